"""The one place that makes every page noop serves a valid exposition: never two samples
with one name and label set, never a family with two TYPE or HELP lines, whatever its
parts are (noop's own families, the meta-metrics of several targets, a spec's metrics,
the program's own mirrored families of several processes and registries).

The page's parts are in Prometheus' text format, each family a HELP and a TYPE line and
its samples, with its labels in one order for all its samples (prometheus_client sorts
them; the mirror writes them sorted). A family met again is merged into the first block
of its name when its type is the same; of another type, it is dropped whole. Of two
samples with the same name and labels the first is kept: noop's own families come
before the program's, and the program's in the order the mirror writes them. A sample
whose name belongs to an earlier family of another name (``x_count`` of a summary ``x``
and a gauge ``x_count``) is dropped with its family. Every drop is counted
(``noop_page_dropped_samples_total``, by reason) and logged once a family.
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from agent import logs

# The sample names a family of each type owns, besides its own name (prometheus_client
# writes a ``_created`` sample as a gauge family of its own).
_SUFFIXES = {b"histogram": (b"_bucket", b"_sum", b"_count"),
             b"summary": (b"_sum", b"_count")}
def owned(name: bytes, type_: bytes) -> list[bytes]:
    """The sample names a family of ``type_`` called ``name`` owns: its own, and its
    suffixes' (a histogram's ``_bucket``, ``_sum``, ``_count``; a summary's last two)."""
    return [name, *(name + s for s in _SUFFIXES.get(type_, ()))]


MAX_SAID = 1024  # families whose drops are logged (once each)
REASONS = ("duplicate", "family")
_NAME = b"noop_page_dropped_samples_total"  # noop's count of them, on every page
_HELP = (b"Samples left out of a page noop served: a duplicate of an earlier sample's "
         b"name and labels (duplicate), or of a family whose name or type clashes with an "
         b"earlier one's (family)")


@dataclass(slots=True)
class Block:
    """A family written elsewhere in the text format: its name, help (escaped), type,
    the text of its samples and each sample's key (name and labels, as written)."""

    name: bytes
    help: bytes
    type: bytes
    text: bytes
    keys: list[bytes]


@dataclass(eq=False)
class Bundle:
    """Families written elsewhere, whole: their text (HELP, TYPE and samples), each
    family once and each sample once in it (checked by its maker, once for as long as
    the families and their series are the same), each family's type, the sample names
    each family owns (its own and its suffixes'), and its families apart (``split``),
    for a page where one of them meets another part's."""

    text: bytes
    types: dict[bytes, bytes]
    owned: dict[bytes, bytes]
    split: Callable[[], list[Block]]


class _Family:
    __slots__ = ("help", "keys", "lines", "type")

    def __init__(self, help_: bytes, type_: bytes) -> None:
        self.help = help_
        self.type = type_
        self.lines: list[bytes] = []
        self.keys: set[bytes] | frozenset[bytes] = frozenset()


# A sample line's name and labels: up to the last '}' of the line, or its first space.
_KEYS = re.compile(rb"^([^ {\n]*(?:\{.*\})?) ", re.M)
# A HELP or TYPE line, after the newline before it: which, the family's name, the rest
# (a literal first: found at the speed of a search for it).
_HEADER = re.compile(rb"\n# (HELP|TYPE) (\S+)(?: ([^\n]*))?(?=\n|$)")


class Pages:
    """Makes pages unique, counting what it drops across pages."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.dropped: dict[str, int] = {}  # by reason
        self._said: set[tuple[bytes, str]] = set()
        # a Block's keys (the same list from scrape to scrape while its family is the
        # same), their set and whether each is once: by the list's id, the last page's
        self._sets: dict[int, tuple[list[bytes], frozenset[bytes], bool]] = {}

    def unique(self, parts: Iterable[bytes | list[Block] | Bundle]) -> bytes:
        """The parts as one page: each family once, each sample once. A part is the
        text format, its families already apart, or a Bundle of them (the mirror's),
        taken whole when none of its families or sample names is another part's
        before it, else family by family. A family met after a Bundle that holds one of
        its name is dropped."""
        own = _Family(_HELP, b"counter")  # its samples once the page is made
        families: dict[bytes, _Family] = {_NAME: own}
        owner: dict[bytes, bytes] = {_NAME: _NAME}  # a sample name -> its family
        drops: list[tuple[bytes, str, int]] = []
        sets: dict[int, tuple[list[bytes], frozenset[bytes], bool]] = {}
        for part in parts:
            if isinstance(part, Bundle):
                if part.owned.keys().isdisjoint(owner) and \
                        part.types.keys().isdisjoint(families):
                    raw = _Family(b"", b"")
                    raw.lines.append(part.text)
                    families[b"\x00" + str(len(families)).encode()] = raw  # not a name
                    owner.update(part.owned)
                    continue
                part = part.split()
            for name, help_, type_, text, keys in (
                    text_families(part) if isinstance(part, bytes) else
                    ((b.name, b.help, b.type, b.text, b.keys) for b in part)):
                f = families.get(name)
                if f is None and name in owner and owner[name] == name:
                    drops.append((name, "a family served before in one piece has its name",
                                  len(keys)))
                    continue
                if f is None:
                    f = _Family(help_, type_)
                    names = owned(name, type_)
                    taken = next((owner[n] for n in names if n in owner), None)
                    if taken is not None and taken != name:
                        drops.append((name, f"its samples' names are {taken.decode()}'s",
                                      len(keys)))
                        continue
                    families[name] = f
                    for n in names:
                        owner[n] = name
                elif f.type != type_:
                    drops.append((name, "a family of another type has its name", len(keys)))
                    continue
                if isinstance(part, bytes):
                    total, kept = _merged(f, text, keys)
                else:
                    known = self._sets.get(id(keys))
                    if known is None or known[0] is not keys:
                        fresh = frozenset(keys)
                        known = (keys, fresh, len(fresh) == len(keys))
                    sets[id(keys)] = known
                    total, kept = _merged_block(f, text, keys, known[1], known[2])
                if kept < total:
                    drops.append((name, "another sample has its name and labels",
                                  total - kept))
        self._sets = sets
        if drops:
            self._count(drops)
        with self._lock:
            own.lines = [_NAME + b'{reason="' + r.encode() + b'"} ' +
                         str(self.dropped.get(r, 0)).encode() + b"\n" for r in REASONS]
        out: list[bytes] = []
        for name, f in families.items():
            if not name.startswith(b"\x00"):  # a Bundle's families have their own
                out.append(b"# HELP " + name + b" " + f.help + b"\n# TYPE " + name + b" " +
                           f.type + b"\n")
            out += f.lines
        return b"".join(out)

    def _count(self, drops: list[tuple[bytes, str, int]]) -> None:
        with self._lock:
            for name, why, n in drops:
                reason = "duplicate" if why.startswith("another sample") else "family"
                self.dropped[reason] = self.dropped.get(reason, 0) + n
                if (name, reason) not in self._said and len(self._said) < MAX_SAID:
                    self._said.add((name, reason))
                    logs.say(f"/metrics: {n} sample{'s' * (n != 1)} of {name.decode()} "
                             f"dropped: {why} (the first one served is kept)",
                             logs.WARNING)


def _merged_block(f: _Family, text: bytes, keys: list[bytes], fresh: frozenset[bytes],
                  once: bool) -> tuple[int, int]:
    """``_merged`` of a Block's samples (a line each key, in order), whose keys' set is
    ``fresh`` and each of them once when ``once``."""
    if once and fresh.isdisjoint(f.keys):  # almost always
        f.keys = fresh if not f.keys else f.keys | fresh
        f.lines.append(text)
        return len(keys), len(keys)
    added = 0
    mine = set(f.keys)
    for line, key in zip(text.split(b"\n"), keys, strict=False):
        if key not in mine:
            mine.add(key)
            f.lines.append(line + b"\n")
            added += 1
    f.keys = mine
    return len(keys), added


def _merged(f: _Family, text: bytes, keys: list[bytes]) -> tuple[int, int]:
    """Adds the sample lines of ``text`` (with their ``keys``) to ``f``, but those whose
    sample is there already: how many there were, and how many it added."""
    text = text.strip(b"\n")
    if not text:
        return 0, 0
    fresh = set(keys)
    if len(fresh) == len(keys) == text.count(b"\n") + 1 and fresh.isdisjoint(f.keys):
        f.keys = fresh if not f.keys else f.keys | fresh  # almost always: every line a
        # sample, each once (a set another family's block may share: not changed)
        f.lines.append(text + b"\n")
        return len(keys), len(keys)
    n = added = 0
    mine = set(f.keys)
    for line in text.split(b"\n"):  # not splitlines: a label value may hold a \r
        if not line.strip() or line.startswith(b"#"):
            continue
        n += 1
        m = _KEYS.match(line + b"\n")
        key = m.group(1) if m else line
        if key not in mine:
            mine.add(key)
            f.lines.append(line + b"\n")
            added += 1
    f.keys = mine
    return n, added


def text_families(part: bytes) -> Iterator[tuple[bytes, bytes, bytes, bytes, list[bytes]]]:
    """Each family of a page part: its name, help, type, the text of its samples and
    their keys (name and labels). Samples before any HELP or TYPE line are untyped, a
    family of each sample name (as a program that writes no TYPE line means them:
    VictoriaMetrics/metrics'); a comment that is neither is left out."""
    name = help_ = type_ = b""
    part = b"\n" + part  # a header line is one after a newline
    at = 0
    have = False
    chunks: list[bytes] = []

    def blocks() -> Iterator[tuple[bytes, bytes, bytes, bytes, list[bytes]]]:
        text = b"".join(chunks)
        if have:
            yield name, help_, type_ or b"untyped", text, _KEYS.findall(text)
            return
        by_name: dict[bytes, list[bytes]] = {}  # headerless: untyped, by sample name
        for line in text.split(b"\n"):  # not splitlines: a label value may hold \r
            key = _KEYS.match(line)
            if key is not None:
                by_name.setdefault(key.group(1).partition(b"{")[0], []).append(line)
        for n, lines in by_name.items():
            body = b"".join(x + b"\n" for x in lines)
            yield n, b"", b"untyped", body, _KEYS.findall(body)

    said: set[bytes] = set()  # the current block's header lines (HELP, TYPE)
    for m in _HEADER.finditer(part):
        chunks.append(part[at:m.start()])
        at = m.end()
        which, fam, rest = m.group(1), m.group(2), m.group(3) or b""
        samples = any(c.strip() for c in chunks)
        if fam != name or not have or which in said or samples:  # another block
            if have or samples:
                yield from blocks()
            name, help_, type_, chunks, have, said = fam, b"", b"", [], True, set()
        said.add(which)
        if which == b"HELP":
            help_ = rest
        else:
            type_ = rest or b"untyped"
    chunks.append(part[at:])
    if have or any(c.strip() for c in chunks):
        yield from blocks()


def number(x: float) -> str:
    """A sample's value: the shortest digits that read back as it (Prometheus parses any
    float; only a label's text must be the program's own)."""
    if type(x) is int:  # a library's integer counter or gauge
        return str(x)
    if x != x:
        return "NaN"
    if x.is_integer() and abs(x) < 1e15:
        return str(int(x))
    return "+Inf" if x == math.inf else "-Inf" if x == -math.inf else repr(x)


def help_text(text: str) -> str:
    """A HELP line's text, escaped."""
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def label_value(v: str) -> str:
    """A label's value between its quotes, escaped."""
    return v.replace("\\", "\\\\").replace("\"", '\\"').replace("\n", "\\n")


_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


def labels_of(text: str) -> dict[str, str]:
    """The labels of a sample's ``{name="value",...}`` text, their values unescaped
    (``label_value``'s inverse)."""
    return {k: re.sub(r'\\[\\"n]', lambda m: _UNESCAPE[m.group(0)], v) if "\\" in v else v
            for k, v in _LABEL.findall(text)}


def with_noops(labels: Iterable[tuple[str, str]], target: str, pid: int
               ) -> list[tuple[str, str]]:
    """A program's series' labels and noop's ``target`` and ``pid`` beside them, sorted
    by name: noop's as ``noop_target``, ``noop_pid`` where the program has its own of
    that name."""
    own = dict(labels)
    return sorted([*own.items(), *((("noop_" if k in own else "") + k, x)
                                   for k, x in (("target", target), ("pid", str(pid))))])
