"""A program's own metrics, mirrored from its memory for ``noop run --binary``, whatever
the library that keeps them (a ``Library``: client_golang's, the prometheus crate's):
each process running the target's build has its registries walked in a thread of
their own (at start, and again when, looked for every ``WALK_EVERY`` seconds, its
globals hold other registries), and at every scrape the members of those registries
and of their *Vecs are read again (a collector registered or a child made since the
walk is there, one unregistered, deleted or reset is not), then their values, in a few
batched reads. The program pays nothing for the values: no probe, no stop, only reads
of its memory by another process. A registry no global holds is found once the
program gathers it a second time (``gathered``: the preset's one probe where the
program gathers a registry, a hit per scrape of the program).

Each family is exported under the program's own name, type and help, with its own
labels and two of noop's: ``target`` and ``pid`` (``noop_target``, ``noop_pid`` when
the program's metric has a label of that name already). A process that exits, or
whose memory can no longer be read, has its series go away; a series whose object is
gone or torn at every try is left out of that scrape and counted.
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import chain
from typing import TYPE_CHECKING, Any, Protocol, overload

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from agent import logs
from agent.live.memory import Memory, Unreadable, check
from agent.output.page import Block, Bundle, help_text, label_value, number, owned, with_noops
from agent.presets.client_golang.facts import Choice
from agent.presets.mirror.model import (
    Family,
    Found,
    Histogram,
    Key,
    Last,
    Now,
    ProcessCollector,
    Read,
    Series,
    Summary,
    Torn,
    Unit,
    Value,
    Vec,
    vecs_of,
)

if TYPE_CHECKING:
    from agent.kernel.events import Event
    from agent.live.discover import BuildIds
    from agent.plan.model import TargetPlan

WALK_EVERY = 10.0  # seconds between walks of a process's registries
# A process whose walk found no registry (one walked as it started, before its code
# made them) is looked at again after 1, 2, 4, ... seconds, up to WALK_EVERY.
FIRST_LOOK = 1.0
# A registry the program gathers this often, at gathers this far apart, is one it serves
# (one made for one request is dropped after it: the blackbox exporter makes one per
# probe, and gathers it twice within milliseconds, for its answer and for its page of
# recent probes) ...
SERVED_AFTER = 2
APART = 1.0  # seconds
STALE = 3600.0  # ... until it has not been gathered for this long
MAX_GATHERED = 1024  # registries remembered per process (the oldest gathered forgotten)
MAX_SERIES = 1 << 18  # series whose label text is kept


class Process(Protocol):
    """A library's view of one process's memory."""

    memory: Memory
    bias: int  # run-time address less link-time address of the binary's code and data


class Walker(Protocol):
    def unit(self, itab: int, data: int, id_: int = -1, reg: Any = None) -> Unit: ...

    def child(self, vec: Any, hash_: int, itab: int, data: int) -> Series | None: ...


class Reader(Protocol):
    def read(self, found: Found) -> Read: ...


class Library(Protocol):
    """What the mirror asks of the library a program keeps its metrics with."""

    name: str
    process_type: str  # the collector type a process collector is (unmirrored when foreign)

    def open(self, pid: int) -> Process: ...

    def registries(self, gm: Any) -> list[int]: ...

    def walk(self, gm: Any, served: dict[int, tuple[int, int]]) -> Found: ...

    def walker(self, gm: Any, found: Found | None = None) -> Walker: ...

    def members(self, gm: Any, found: Found, vecs: list[Any], last: Last | None = None,
                once: bool = False) -> tuple[Now, Last | None]: ...

    def reader(self, gm: Any) -> Reader: ...

    def gathered(self, gm: Any, values: dict[str, Any]) -> tuple[int, int, int] | None: ...

    def bound(self, x: float) -> str: ...

    def own_pid_fns(self) -> frozenset[int]: ...

    def close(self) -> None: ...


@dataclass
class _Process:
    pid: int
    gm: Process
    found: Found = field(default_factory=Found)
    walked: float = 0.0  # when (monotonic), 0: not yet
    looks: int = 0  # looks for registries since a walk that found none
    walk_seconds: float = 0.0
    torn: int = 0  # series left out of a scrape: changing at every try
    gone: int = 0  # series whose object was no longer itself at a scrape
    unsettled: int = 0  # scrapes whose members changed at every read: what all held
    read_members: Last | None = None  # the last settled read of its members
    unread: int = 0  # *Vecs whose map could not be read at a scrape
    reread: int = 0  # scrapes' reads made again: a member went before its value was read
    capped: int = 0  # series left out of the last scrape: past the cap
    walking: threading.Lock = field(default_factory=threading.Lock)  # one walk at a time
    scraping: threading.Lock = field(default_factory=threading.Lock)  # one scrape too
    reader: Reader | None = None  # kept: what it learnt holds while p runs
    vecs: list[Vec] = field(default_factory=list)  # the walk's *Vecs, once each
    # the last scrape's series: (name, labels) each object is served under, by address
    served: dict[int, tuple[str, tuple[tuple[str, str], ...]]] = field(default_factory=dict)
    # the library's metric objects by their own address, where not a series' (updates)
    objects: dict[int, tuple[str, tuple[tuple[str, str], ...]]] = field(default_factory=dict)
    # the last scrape's walk, members and their families (while the members are the
    # same, so are the families)
    last: tuple[Found, Now, Found] | None = None
    processes: list[ProcessCollector] = field(default_factory=list)  # last scrape's
    # what this scrape's page is of: the walk, its *Vecs, and the members read
    members: tuple[Found, list[Vec], Now] | None = None


@dataclass
class Unseen:
    """What a mirror's processes hold that their pages do not show: collectors it does
    not read (by type), the families of functions called at each scrape, what could
    not be read, series past the cap, registries gathered once (shown after their next
    gather), processes with no registry found yet, processes whose memory noop may not
    read, processes not seen gathering a registry yet (one only a local holds is found
    when it is gathered)."""

    unmirrored: dict[str, int] = field(default_factory=dict)
    funcs: set[str] = field(default_factory=set)
    damaged: list[str] = field(default_factory=list)
    capped: int = 0
    pending: int = 0
    bare: int = 0
    refused: int = 0
    ungathered: int = 0  # processes seen gathering no registry yet


class Mirror:
    """The collector of one target's mirrored metrics. ``follow(pids)`` says which
    processes run its build now; ``close()`` stops the walks."""

    def __init__(self, target: str, path: str, walk_every: float = WALK_EVERY,
                 find: Callable[[], Iterable[int]] | None = None,
                 choice: Choice | None = None, library: Library | None = None) -> None:
        """``find``: the processes running the target's build now, asked at every
        scrape (a process that started since the last scan is mirrored at once);
        ``choice``: the families mirrored; ``library``: what keeps them (by default,
        the one the binary's language says: ``library_of``)."""
        self.choice = choice or Choice()
        self._capped_said: set[int] = set()  # processes whose cap was said
        self.target = target
        self.path = path
        self.walk_every = walk_every
        self._find = find
        self._looked = 0.0  # when gathered() last looked for processes
        self.library = library or library_of(path)
        self._bound = lru_cache(maxsize=4096)(self.library.bound)
        self._lock = threading.Lock()  # the processes and what their walks found
        self._processes: dict[int, _Process] = {}
        self._refused: set[int] = set()  # processes whose memory cannot be read (said once)
        # per process: (registry, its map's header and seed) -> (times gathered APART,
        # when the last of those, when last gathered)
        self._gathered: dict[int, dict[tuple[int, int, int], tuple[int, float, float]]] = {}
        # _label_text's and _keys' (with the labels they were written of)
        self._labels_of: dict[tuple[int, int, int],
                              tuple[tuple[tuple[str, str], ...],
                                    tuple[str, str, str, str, str]]] = {}
        self._keys_of: dict[tuple[int, int, int, str],
                            tuple[tuple[tuple[str, str], ...], tuple[str, ...]]] = {}
        # each family's series' keys on the last page, and its name, help, type and
        # keys written (the page's check of the keys is kept by that list while the
        # family is the same)
        self._blocks_of: dict[str, tuple[list[tuple[str, ...]],
                                         tuple[bytes, bytes, bytes, list[bytes]]]] = {}
        self._template: _Template | None = None  # the last page's, its values left out
        self._wake = threading.Event()
        self._stop = False
        self._thread = threading.Thread(target=self._walks, name="noop-mirror", daemon=True)
        self._thread.start()

    def follow(self, pids: Iterable[int]) -> None:
        """The processes that run the target's build now: new ones are walked at once,
        gone ones forgotten."""
        now = set(pids)
        with self._lock:
            for pid in set(self._processes) - now:
                del self._processes[pid]
            for pid in set(self._gathered) - now:
                del self._gathered[pid]
            self._refused &= now
            fresh = now - set(self._processes) - self._refused
            for pid in fresh:
                try:
                    gm = self.library.open(pid)
                    check(pid)
                except Unreadable as exc:
                    self._refused.add(pid)
                    logs.say(f"target {self.target}: process {pid}: its own metrics are not "
                             f"mirrored: {exc.message}" + (f" ({exc.hint})" if exc.hint else ""),
                             logs.WARNING)
                    continue
                except OSError as exc:  # it exited between the scan and now
                    self._refused.add(pid)
                    logs.say(f"target {self.target}: process {pid}: {exc.strerror}",
                             logs.WARNING)
                    continue
                self._processes[pid] = _Process(pid, gm)
        if fresh:
            self._wake.set()

    def gathered(self, event: Event) -> None:
        """A registry the program gathered (the preset's ``registry_gathered`` probe, at
        each scrape of the program): once gathered again, at least ``APART`` later,
        walked beside those the globals hold, while it is itself (its map of collectors
        the same). A process not followed yet (started since noop was last scraped) is
        looked for then, once a second at most."""
        with self._lock:
            p = self._processes.get(event.pid)
        if p is None and self._find is not None and time.monotonic() - self._looked >= 1.0:
            self._looked = time.monotonic()
            self.follow(self._find())
            with self._lock:
                p = self._processes.get(event.pid)
        key = self.library.gathered(p.gm, event.values) if p is not None else None
        if p is None or key is None:
            return  # not a process of the target's build: the next gather is looked at
        now = event.ts / 1e9 if event.ts else time.monotonic()  # when Gather started
        with self._lock:
            seen = self._gathered.setdefault(event.pid, {})
            n, counted, _last = seen.get(key, (0, 0.0, 0.0))
            served = not n or now - counted >= APART  # another scrape, not the same one
            if served:
                n, counted = n + 1, now
            seen[key] = (n, counted, now)
            while len(seen) > MAX_GATHERED:
                del seen[min(seen, key=lambda k: seen[k][2])]
            served = served and n == SERVED_AFTER
            if served:
                p.walked = 0.0  # walked again: at the next scrape, or by the thread
        if served:
            self._wake.set()

    def _served(self, pid: int) -> dict[int, tuple[int, int]]:
        """The registries process ``pid`` serves that its globals may not hold: each one's
        address, and its map's header and seed (called with ``_lock`` held)."""
        now = time.monotonic()
        return {reg: (header, seed) for (reg, header, seed), (n, _counted, last)
                in self._gathered.get(pid, {}).items()
                if n >= SERVED_AFTER and now - last < STALE}

    def close(self) -> None:
        self._stop = True
        self._wake.set()
        self._thread.join(timeout=5)
        self.library.close()

    def _walks(self) -> None:
        while not self._stop:
            with self._lock:
                due = [p for p in self._processes.values() if self._due(p)]
            for p in due:
                if not p.walked:  # its first walk, unless a scrape made it meanwhile
                    self._walk(p, unless_walked=True)
                elif self._other_registries(p):
                    self._walk(p)
                else:
                    p.walked = time.monotonic()  # the members are read at each scrape
                    p.looks += 1
            self._wake.wait(timeout=1.0)
            self._wake.clear()

    def _due(self, p: _Process) -> bool:
        """Whether ``p``'s registries are to be looked for again now."""
        every = self.walk_every
        if not p.found.considered:  # none found yet: sooner, then less and less often
            every = min(every, FIRST_LOOK * 2 ** min(p.looks, 16))
        return not p.walked or time.monotonic() - p.walked >= every

    def _other_registries(self, p: _Process) -> bool:
        """Whether the registries ``p``'s globals hold, or that it serves, are others than
        at its walk (a scan of its data for their itabs; not a walk)."""
        with self._lock:
            served = self._served(p.pid)
        try:
            now = set(self.library.registries(p.gm)) | set(served)
        except Unreadable:
            return False  # it exited: the next scrape forgets it
        return now != p.found.considered

    def _walk(self, p: _Process, unless_walked: bool = False) -> None:
        with p.walking:
            if unless_walked and p.walked:
                return  # the thread walked it meanwhile
            self._walk_now(p)

    def _walk_now(self, p: _Process) -> None:
        t0 = time.monotonic()
        with self._lock:
            served = self._served(p.pid)
        try:
            found = self.library.walk(p.gm, served)
        except Unreadable as exc:
            found = Found(damaged=[exc.message])
        except Exception as exc:  # one process's walk: the others, and noop, go on
            found = Found(damaged=[f"{type(exc).__name__}: {exc}"])
        with self._lock:
            if self._processes.get(p.pid) is p:
                p.found, p.vecs, p.walked = found, vecs_of(found), time.monotonic()
                p.looks = 0
                p.walk_seconds = p.walked - t0
        _settled()

    def collect(self) -> Iterator[Metric]:
        """noop's own metrics of the mirror (the mirrored families are ``render``'s)."""
        with self._lock:
            processes = list(self._processes.values())
        yield from self._health(processes)

    def render(self) -> bytes:
        """The mirrored families in Prometheus' text format (``blocks``, written out)."""
        got = self.blocks()
        if isinstance(got, Bundle):
            return got.text
        return b"".join(b"# HELP " + b.name + b" " + b.help + b"\n# TYPE " + b.name + b" " +
                        b.type + b"\n" + b.text for b in got)

    def blocks(self) -> list[Block] | Bundle:
        """The mirrored families, as the program writes them (its names, types, help and
        bucket bounds), each series with ``target`` and ``pid`` beside its own labels:
        of the objects that are members of the program's registries and *Vecs at this
        scrape (``members``). While the members are those of the last scrape and every
        one of them is read, the page is the last one's with this scrape's values (one
        ``Bundle``, checked once); else a ``Block`` a family."""
        reads = self._reads()
        shape = tuple((p.pid, current) for p, current, _read in reads)
        t = self._template
        if t is not None and len(t.shape) == len(shape) and \
                all(a[0] == b[0] and a[1] is b[1] for a, b in zip(t.shape, shape, strict=True)):
            text = t.fill([read for _p, _c, read in reads])
            if text is not None:
                return Bundle(text, t.types, t.owned, lambda: self._blocks(reads))
        got = self._blocks(reads)
        self._template = _Template.made(shape, got, reads, self)
        return got

    def values(self) -> list[tuple[int, Found, Read]]:
        """What a scrape reads, not written out: each process's families (their series
        by address) and the values read, by address (``noop top``)."""
        return [(p.pid, current, read) for p, current, read in self._reads()]

    def _reads(self) -> list[tuple[_Process, Found, Read]]:
        """A scrape of every process running the build now: its members' families, and
        their values."""
        if self._find is not None:
            self.follow(self._find())
        with self._lock:
            processes = list(self._processes.values())
        reads: list[tuple[_Process, Found, Read]] = []
        for p in processes:
            if not p.walked:
                self._walk(p, unless_walked=True)
            try:
                with p.scraping:  # one scrape of a process at a time: its members' memo
                    if p.reader is None:
                        p.reader = self.library.reader(p.gm)
                    current, read = self._scrape(p, p.reader)
                    if read.gone:
                        _forget(p, read.gone)
            except Unreadable:
                continue  # it exited, or cannot be read: its series go away
            p.torn += len(read.torn)
            p.gone += len(read.gone)
            reads.append((p, current, read))
        return reads

    def _blocks(self, reads: list[tuple[_Process, Found, Read]]) -> list[Block]:
        """A Block a family of what ``reads`` read."""
        families: dict[str, tuple[Family, list[str], list[tuple[str, ...]]]] = {}
        for p, current, read in reads:
            for f in current.families.values():
                got = families.get(f.name)
                if got is None:
                    got = families[f.name] = (f, [], [])
                self._series(f, p.pid, read, got[1], got[2])
        out = []
        kept: dict[str, tuple[list[tuple[str, ...]], tuple[bytes, bytes, bytes, list[bytes]]]] = {}
        for name in sorted(families):
            f, lines, keys = families[name]
            if not lines:
                continue
            known = self._blocks_of.get(name)
            if known is None or known[0] != keys:  # another family than the last page's
                known = (keys, (name.encode(), help_text(f.help).encode(),
                                (f.kind or "untyped").encode(),
                                "\n".join(k for ks in keys for k in ks).encode().split(b"\n")))
            kept[name] = known
            head = known[1]
            out.append(Block(head[0], head[1], head[2], "".join(lines).encode(), head[3]))
        self._blocks_of = kept  # the same keys' list while a family is the same
        return out

    def processes(self, pid: int) -> list[ProcessCollector] | None:
        """The process collectors the program's registries held at the last scrape of
        process ``pid`` whose pidFn is client_golang's own (the process's pid): the
        series they serve; None when they held none (or the process is not one noop
        mirrors)."""
        with self._lock:
            p = self._processes.get(pid)
        mine = [c for c in p.processes if c.kind == "process"] if p is not None else []
        if p is None or not mine:
            return None
        own = self.library.own_pid_fns()
        return [c for c in mine if c.pid_fn - p.gm.bias in own]

    def go_collectors(self, pid: int) -> list[tuple[tuple[tuple[str, str], ...],
                                                    tuple[tuple[str, str], ...]]] | None:
        """The Go collectors the program's registries held at the last scrape of
        process ``pid``: each one's series (name, help) and a wrapping's labels; None
        when they held none (or the process is not one noop mirrors)."""
        with self._lock:
            p = self._processes.get(pid)
        got = [(c.series, c.labels) for c in p.processes if c.kind == "go"] \
            if p is not None else []
        return got or None

    def funcs(self, pid: int) -> set[str]:
        """The families of the GaugeFuncs and CounterFuncs the last walk of ``pid``
        found: a function the program calls at each scrape, no value kept to read."""
        with self._lock:
            p = self._processes.get(pid)
        return set(p.found.funcs) if p is not None else set()

    def unseen(self) -> Unseen:
        """What the processes' last scrapes could not show, all processes together."""
        out = Unseen()
        with self._lock:
            processes = list(self._processes.values())
            out.refused = len(self._refused)
            pending = {pid: sum(1 for n, _c, _l in seen.values() if n < SERVED_AFTER)
                       for pid, seen in self._gathered.items()}
            out.ungathered = sum(1 for pid in self._processes if not self._gathered.get(pid))
        own = self.library.own_pid_fns()
        for p in processes:
            for t, n in p.found.unmirrored.items():
                out.unmirrored[t] = out.unmirrored.get(t, 0) + n
            custom = sum(c.kind == "process" and c.pid_fn - p.gm.bias not in own
                         for c in p.processes)
            if custom:
                t = self.library.process_type
                out.unmirrored[t] = out.unmirrored.get(t, 0) + custom
            out.funcs |= p.found.funcs
            out.damaged += p.found.damaged
            out.capped += p.capped
            out.pending += pending.get(p.pid, 0)
            out.bare += bool(p.walked) and not p.found.registries
        return out

    def pids(self) -> list[int]:
        """The processes the last scrape mirrored."""
        with self._lock:
            return list(self._processes)

    def collectors(self, pid: int) -> list[tuple[tuple[tuple[str, str], ...],
                                                 tuple[tuple[str, str], ...]]] | None:
        """``processes(pid)``: each one's series (name, help) and a wrapping's labels."""
        got = self.processes(pid)
        return None if got is None else [(c.series, c.labels) for c in got]

    def served(self, pid: int, address: int) -> tuple[str, str] | None:
        """The name and labels (``k=v,...``, sorted) the program serves the object at
        ``address`` under, as the last scrape read them; None for one it did not."""
        got = self.labelled(pid, address)
        return None if got is None else (got[0], ",".join(f"{k}={v}" for k, v in got[1]))

    def labelled(self, pid: int, address: int
                 ) -> tuple[str, tuple[tuple[str, str], ...]] | None:
        """``served``'s name and labels, the labels as pairs: of a series, or of a
        metric object the library names apart from its series (an update's address)."""
        with self._lock:
            p = self._processes.get(pid)
        if p is None:
            return None
        got = p.objects.get(address)  # an object first: a histogram's is its _count's too
        return got if got is not None else p.served.get(address)

    def _confirm(self, p: _Process, read: Read, last_try: bool) -> bool:
        """Whether every object whose value ``read`` holds is still a member, as when
        the scrape read the members (``p.members``): what was read at the address of
        one that is not may be another's (a collector unregistered, freed and its memory
        given to another of the same type, a child deleted and another made). One read
        of the members' bytes when they did not change; else they are read again, and
        on the ``last_try`` the values of those gone are left out of ``read`` (the
        scrape counted unsettled)."""
        last, before = p.read_members, p.members
        if before is None:
            return True
        found, vecs = before[0], before[1]
        if last is not None and last.found is found and last.now is before[2] and \
                p.gm.memory.read_many(last.ranges) == last.got:
            return True
        after, p.read_members = self.library.members(p.gm, found, vecs, last)
        lost = _absent(found, vecs, before[2], after)
        if lost and not last_try:
            return False
        for address in lost:
            if read.values.pop(address, None) is not None:
                p.gone += 1
        if lost:
            p.last = None
            p.unsettled += 1
        return True

    def _scrape(self, p: _Process, reader: Reader) -> tuple[Found, Read]:
        """The families of ``p``'s members and their values, read again (twice at
        most) while a member goes before its value has been read; the scrape counted
        unsettled once, however many of its reads were."""
        was = p.unsettled
        try:
            for last in (False, False):
                got = self._current(p, last)
                if got is not None:
                    read = reader.read(got)
                    if self._confirm(p, read, last):
                        return got, self._gone_again(p, reader, got, read)
                p.reread += 1
            current = self._current(p)
            read = reader.read(current)
            self._confirm(p, read, True)
            return current, self._gone_again(p, reader, current, read)
        finally:
            p.unsettled = min(p.unsettled, was + 1)

    def _gone_again(self, p: _Process, reader: Reader, found: Found, read: Read) -> Read:
        """``read``, with the values of the series it read as gone (their object not
        itself: freed, or another's) while the members read after the values still
        held them, read once more, and the members read again after that (a value of an
        object that is no member then is left out, as ``_confirm`` does): an object
        caught as it was being written reads as itself a moment later, and is not left
        out of the page; one that is gone stays out."""
        if not read.gone:
            return read
        again = reader.read(found)
        kept: list[Series] = []
        for s in read.gone:
            v = again.values.get(s.address)
            if v is None:
                kept.append(s)
            else:
                read.values[s.address] = v
        if len(kept) < len(read.gone):
            read.gone = kept
            self._confirm(p, read, True)
        return read

    @overload
    def _current(self, p: _Process) -> Found: ...

    @overload
    def _current(self, p: _Process, last_try: bool) -> Found | None: ...

    def _current(self, p: _Process, last_try: bool = True) -> Found | None:
        """The families of the objects that are members now, read from ``p``'s memory:
        a collector registered since the walk is walked here, alone, and the members
        read again with it (a few times at most: then what it holds but its *Vecs'
        children, which the next scrape reads). What was read of objects new at this
        scrape (names, help, labels) is theirs only if they are members still when it
        has been read: the members are read once more, and a new object that is not
        one any more is forgotten (its memory may have been another's). When a member
        went meanwhile: None, unless on the ``last_try``, which leaves out what went
        (the scrape counted unsettled)."""
        with self._lock:  # a walk replaces both at once
            found, vecs = p.found, p.vecs
        walked: list[tuple[int, Key]] = []  # (registry, collector) walked here
        for last in (False, False, True):
            # a walker a read of the members: what one learnt of an address (a Desc, a
            # collector) may be another object's at the next
            walker: Walker | None = None
            # one read when they are the last read's: _confirm reads them again after
            # the values, the second of the two that make an instant
            now, p.read_members = self.library.members(p.gm, found, vecs, p.read_members,
                                                       once=True)
            if p.last is not None and p.last[0] is found and now.settled and \
                    p.last[1].regs == now.regs and p.last[1].children == now.children:
                p.members = (found, vecs, now)
                return p.last[2]  # the members of the last scrape: its families as they were
            units: list[Unit] = []
            fresh = False
            for i, (r, keys) in enumerate(zip(found.regs, now.regs, strict=True)):
                for key in sorted(keys or ()):
                    unit = r.units.get(key)
                    if unit is None:  # registered since the walk
                        walker = walker or self.library.walker(p.gm, found)
                        try:
                            unit = r.units[key] = walker.unit(key[1], key[2], key[0], r)
                        except Torn:
                            p.torn += 1  # read again at the next scrape
                            continue
                        walked.append((i, key))
                        vecs = vecs + [v for v in unit.vecs if all(v is not w for w in vecs)]
                        fresh = fresh or bool(unit.vecs)
                        if last:
                            unit = Unit(unit.series, helps=unit.helps, processes=unit.processes)
                    units.append(unit)
            if not fresh or last:
                break
        p.unsettled += not now.settled
        gone = False
        for r, keys in zip(found.regs, now.regs, strict=True):
            if keys is not None and now.settled:  # forget the collectors that are gone
                for key in set(r.units) - keys:
                    del r.units[key]
                    gone = True
        if gone:
            vecs = vecs_of(found)
        with self._lock:
            if p.found is found:  # not walked again meanwhile
                p.vecs = vecs
        read_now: list[tuple[Vec, Key]] = []
        unread: list[tuple[Vec, Key]] = []
        current = self._families(p, found, units, now, read_now, unread)
        lost: set[int] = set()
        p.members = (found, vecs, now)
        if walked or read_now or unread:
            again, p.read_members = self.library.members(p.gm, found, vecs, p.read_members)
            lost = _absent(found, vecs, now, again) | _lost(found, again, walked, read_now)
            # a child whose labels could not be read: gone meanwhile (the page would
            # hold the members before with it left out: no set that was), or torn
            if (lost or unread) and not last_try:
                return None
            if lost:
                for f in current.families.values():
                    f.series = [s for s in f.series if s.address not in lost]
            if lost or unread:
                p.torn += len(lost) + len(unread)
                p.unsettled += 1
            p.members = (found, vecs, again)
        p.last = (found, now, current) if now.settled and not lost and not unread else None
        p.served = {s.address: (f.name, s.labels)
                    for f in current.families.values() for s in f.series}
        objects = getattr(self.library, "objects", None)
        # metric objects apart from their series (updates name them), made whole first
        p.objects = objects(current) if objects is not None else {}
        p.processes = current.processes
        return current

    def _families(self, p: _Process, found: Found, units: list[Unit], now: Now,
                  read_now: list[tuple[Vec, Key]], unread: list[tuple[Vec, Key]]) -> Found:
        """The families of ``units`` and of their *Vecs' children that are members
        ``now`` (a child made since the walk read here, and added to ``read_now``, or to
        ``unread`` when its labels could not be read; one gone forgotten)."""
        out = Found()
        seen: set[int] = set()  # objects (one may be in two registries)
        walker: Walker | None = None

        wanted: dict[str, bool] = {}

        def add(name: str, help_: str, kind: str, s: Series) -> None:
            if s.address not in seen:
                seen.add(s.address)
                f = out.families.get(name)
                if f is None:
                    f = out.families[name] = Family(name, help_, kind)
                f.series.append(s)

        def chosen(name: str) -> bool:
            got = wanted.get(name)
            if got is None:
                got = wanted[name] = self.choice.wants(name)
            return got

        vecs: dict[int, Vec] = {}
        for u in units:
            out.processes += u.processes
            for name, s in u.series:
                if chosen(name):
                    f = found.families.get(name)
                    add(name, u.helps.get(name, ""), f.kind if f else "", s)
            for v in u.vecs:
                if chosen(v.family):
                    vecs.setdefault(id(v), v)
        for v in vecs.values():
            children = now.children.get(id(v))
            if children is None:
                p.unread += 1  # its map could not be read: its children left out
                continue
            for key in children:
                if key in v.children:
                    child = v.children[key]
                else:  # made since the walk: its labels read now
                    walker = walker or self.library.walker(p.gm)
                    try:
                        child = walker.child(v, *key)
                    except Unreadable:
                        unread.append((v, key))  # gone already, or torn
                        continue
                    read_now.append((v, key))
                if child is not None:
                    add(v.family, v.help, v.kind, child)
            if now.settled:  # forget the children that are gone
                for key in set(v.children) - set(children):
                    del v.children[key]
        return self._capped(p, out)

    def _capped(self, p: _Process, found: Found) -> Found:
        """``found`` with at most ``choice.max_series`` series, families in order of
        their names; how many were left out kept in ``p.capped`` (said once)."""
        left = self.choice.max_series
        p.capped = 0
        for name in sorted(found.families):
            f = found.families[name]
            if len(f.series) > left:
                p.capped += len(f.series) - left
                f.series = f.series[:left]
            left -= len(f.series)
        if p.capped and p.pid not in self._capped_said:
            self._capped_said.add(p.pid)
            logs.say(f"target {self.target}: process {p.pid}: {p.capped} series past "
                     f"--mirror-max-series {self.choice.max_series} are not mirrored",
                     logs.WARNING)
        return found

    def _series(self, f: Family, pid: int, read: Read, lines: list[str],
                keys: list[tuple[str, ...]]) -> None:
        """Adds the sample lines of ``f``'s series read, and their keys (name and
        labels, a tuple a series), to ``lines`` and ``keys``."""
        name = f.name
        for s in f.series:
            v = read.values.get(s.address)
            if v is None:
                continue
            mine = self._keys(name, s, pid, v)
            if isinstance(v, Histogram):
                if len(mine) != len(v.buckets) + 2:  # its bounds are fixed: not itself
                    continue
                lines += [f"{k} {c}\n" for k, (_le, c) in zip(mine, v.buckets, strict=False)]
                lines += (f"{mine[-2]} {number(v.sum)}\n", f"{mine[-1]} {v.count}\n")
            elif isinstance(v, Summary):
                if len(mine) != len(v.quantiles) + 2:  # its objectives are fixed: not itself
                    continue
                lines += [f"{k} {number(x)}\n" for k, (_q, x) in zip(mine, v.quantiles,
                                                                      strict=False)]
                lines += (f"{mine[-2]} {number(v.sum)}\n", f"{mine[-1]} {v.count}\n")
            else:
                lines.append(f"{mine[0]} {number(v)}\n")
            keys.append(mine)

    def _keys(self, name: str, s: Series, pid: int, v: Value) -> tuple[str, ...]:
        """The keys (name and labels) of the samples of series ``s``, written once for
        as long as the object is the same: a histogram's buckets' (its bounds are fixed
        when it is made), sum's and count's; a summary's quantiles' (its objectives are
        fixed too), sum's and count's; else one."""
        cached = (pid, s.address, s.desc, name)
        was = self._keys_of.get(cached)
        # another child of the *Vec may be at the address now, with other labels
        got = was[1] if was is not None and (was[0] is s.labels or was[0] == s.labels) \
            else None
        if got is None:
            inner, before, after, qbefore, qafter = self._label_text(s, pid)
            if isinstance(v, Histogram):
                got = (*(f'{name}_bucket{{{before}le="{self._bound(le)}"{after}}}'
                         for le, _c in v.buckets),
                       f"{name}_sum{{{inner}}}", f"{name}_count{{{inner}}}")
            elif isinstance(v, Summary):
                got = (*(f'{name}{{{qbefore}quantile="{self._bound(q)}"{qafter}}}'
                         for q, _x in v.quantiles),
                       f"{name}_sum{{{inner}}}", f"{name}_count{{{inner}}}")
            else:
                got = (f"{name}{{{inner}}}",)
            if len(self._keys_of) > MAX_SERIES:  # objects come and go: start again
                self._keys_of.clear()
            self._keys_of[cached] = (s.labels, got)
        return got

    def _label_text(self, s: Series, pid: int) -> tuple[str, str, str, str, str]:
        """The series' labels and noop's, sorted by name as every part of noop's page
        writes them, written once for as long as the object is the same (its address,
        desc and labels): all of them, those before and after a bucket's ``le``, and those
        before and after a summary's ``quantile``."""
        key = (pid, s.address, s.desc)
        was = self._labels_of.get(key)
        got = was[1] if was is not None and (was[0] is s.labels or was[0] == s.labels) \
            else None
        if got is None:
            labels = with_noops(s.labels, self.target, pid)
            if len(self._labels_of) > MAX_SERIES:  # objects come and go: start again
                self._labels_of.clear()
            text = [f'{k}="{label_value(x)}"' for k, x in labels]
            cut = sum(1 for k, _x in labels if k < "le")
            qcut = sum(1 for k, _x in labels if k < "quantile")
            got = (",".join(text), "".join(t + "," for t in text[:cut]),
                   "".join("," + t for t in text[cut:]), "".join(t + "," for t in text[:qcut]),
                   "".join("," + t for t in text[qcut:]))
            self._labels_of[key] = (s.labels, got)
        return got

    def _health(self, processes: list[_Process]) -> Iterator[Metric]:
        series = GaugeMetricFamily("noop_mirror_series", "Series of the program's own "
                                   "metrics noop mirrors from its memory",
                                   labels=["target", "pid"])
        skipped = GaugeMetricFamily("noop_mirror_unmirrored_collectors", "Collectors "
                                    "noop does not mirror (a custom Collector, a "
                                    "GaugeFunc), by type", labels=["target", "pid", "type"])
        walk = GaugeMetricFamily("noop_mirror_walk_seconds", "How long the last walk of "
                                 "the process's registries took", labels=["target", "pid"])
        torn = CounterMetricFamily("noop_mirror_torn_reads", "Series left out of a scrape: "
                                   "changing at every try", labels=["target", "pid"])
        gone = CounterMetricFamily("noop_mirror_gone_objects", "Series left out of a "
                                   "scrape: the object was no longer the one found",
                                   labels=["target", "pid"])
        capped = GaugeMetricFamily("noop_mirror_capped_series", "Series left out of the "
                                   "last scrape: past --mirror-max-series",
                                   labels=["target", "pid"])
        unsettled = CounterMetricFamily("noop_mirror_unsettled_reads", "Scrapes whose "
                                        "registries and *Vecs changed at every read of "
                                        "their members: what every read held was served",
                                        labels=["target", "pid"])
        unread = CounterMetricFamily("noop_mirror_unread_vecs", "*Vecs left out of a "
                                     "scrape with their children: their map changed at "
                                     "every read of it", labels=["target", "pid"])
        reread = CounterMetricFamily("noop_mirror_reread_scrapes", "Reads of the members "
                                     "and values made again: a member went before its "
                                     "value had been read", labels=["target", "pid"])
        for p in processes:
            ids = [self.target, str(p.pid)]
            reread.add_metric(ids, p.reread)
            series.add_metric(ids, len(p.served))  # at the last scrape
            unmirrored = dict(p.found.unmirrored)
            if p.processes:  # one with a pidFn of its own reports another process
                own = self.library.own_pid_fns()
                custom = sum(c.kind == "process" and c.pid_fn - p.gm.bias not in own
                             for c in p.processes)
                kind = self.library.process_type
                if custom:
                    unmirrored[kind] = unmirrored.get(kind, 0) + custom
            for t, n in sorted(unmirrored.items()):
                skipped.add_metric([*ids, t], n)
            walk.add_metric(ids, p.walk_seconds)
            torn.add_metric(ids, p.torn)
            gone.add_metric(ids, p.gone)
            capped.add_metric(ids, p.capped)
            unsettled.add_metric(ids, p.unsettled)
            unread.add_metric(ids, p.unread)
        yield from (series, skipped, walk, torn, gone, capped, unsettled, unread, reread)


_SCALAR, _SUMMARY, _HISTOGRAM = 0, 1, 2


@dataclass
class _Template:
    """A page of mirrored families with its values left out: the text before each value
    (``statics[i]`` before value ``i``), and the series whose values go there, in order
    (the read's index, the object's address, its kind, a histogram's buckets)."""

    shape: tuple[tuple[int, Found], ...]  # (pid, its members' families), each read
    statics: list[str]
    tail: str
    series: list[tuple[int, int, int, int]]
    types: dict[bytes, bytes]  # family -> type
    owned: dict[bytes, bytes]  # sample name -> its family
    # the last fill's value of each series, and the texts written of it
    last: list[Value] = field(default_factory=list)
    texts: list[list[str]] = field(default_factory=list)
    reads: list[dict[int, Value]] = field(default_factory=list)  # the last fill's values
    page: bytes | None = None  # and what it made of them

    @classmethod
    def made(cls, shape: tuple[tuple[int, Found], ...], blocks: list[Block],
             reads: list[tuple[_Process, Found, Read]], mirror: Mirror
             ) -> _Template | None:
        """The template of a page whose blocks are ``blocks``, when every series of
        ``reads`` was read and every family's samples are each once; else None."""
        if any(r.torn or r.gone for _p, _c, r in reads):
            return None
        for b in blocks:
            if len(set(b.keys)) != len(b.keys):
                return None
        at = {b.name.decode(): b for b in blocks}
        statics: list[str] = []
        series: list[tuple[int, int, int, int]] = []
        pending = ""
        by_family: dict[str, list[tuple[int, int, Series, Value]]] = {}
        for i, (p, current, read) in enumerate(reads):
            for f in current.families.values():
                for s in f.series:
                    v = read.values.get(s.address)
                    if v is not None:
                        by_family.setdefault(f.name, []).append((i, p.pid, s, v))
        for name in sorted(by_family):
            block = at.get(name)
            if block is None:
                return None
            pending += f"# HELP {name} {block.help.decode()}\n# TYPE {name} " \
                f"{block.type.decode()}\n"
            for i, pid, s, v in by_family[name]:
                keys = mirror._keys(name, s, pid, v)
                kind, n = (_HISTOGRAM, len(v.buckets)) if isinstance(v, Histogram) else \
                    (_SUMMARY, len(v.quantiles)) if isinstance(v, Summary) else (_SCALAR, 0)
                if kind != _SCALAR and len(keys) != n + 2:
                    return None
                for k in keys:
                    statics.append(pending + k + " ")
                    pending = "\n"
                series.append((i, s.address, kind, n))
        owner = {n: b.name for b in blocks for n in owned(b.name, b.type)}
        return cls(shape, statics, pending, series, {b.name: b.type for b in blocks}, owner)

    def fill(self, reads: list[Read]) -> bytes | None:
        """The page with ``reads``' values; None when one of its series was not read
        (gone, torn) or has another shape. A series whose value is the last fill's has
        its text written as it was (most series of a service do not move between two
        scrapes)."""
        if self.page is not None and len(reads) == len(self.reads) and \
                all(a.values == b for a, b in zip(reads, self.reads, strict=True)):
            return self.page  # every value as at the last fill
        values: list[str] = []
        last, texts = self.last, self.texts
        same = len(last) == len(self.series)
        now: list[Value] = []
        written: list[list[str]] = []
        try:
            for j, (i, address, kind, n) in enumerate(self.series):
                v = reads[i].values[address]
                if same and type(last[j]) is type(v) and last[j] == v:
                    t = texts[j]
                elif kind == _SCALAR:
                    t = [number(v)]  # type: ignore[arg-type]
                elif kind == _SUMMARY:
                    qs = v.quantiles  # type: ignore[union-attr]
                    if len(qs) != n:
                        return None
                    t = [*(number(x) for _q, x in qs), number(v.sum),  # type: ignore[union-attr]
                         str(v.count)]  # type: ignore[union-attr]
                else:
                    buckets = v.buckets  # type: ignore[union-attr]
                    if len(buckets) != n:
                        return None
                    t = [*(str(c) for _le, c in buckets), number(v.sum),  # type: ignore[union-attr]
                         str(v.count)]  # type: ignore[union-attr]
                now.append(v)
                written.append(t)
                values += t
        except (KeyError, AttributeError):
            return None
        if len(values) != len(self.statics):
            return None
        self.last, self.texts = now, written
        self.reads = [r.values for r in reads]  # each scrape reads into a new Read
        self.page = ("".join(chain.from_iterable(zip(self.statics, values, strict=True))) +
                     self.tail).encode()
        return self.page


def _settled() -> None:
    """What a walk made lives until the registries change: out of the garbage
    collector's full passes, which would walk every object of it (a pause of a third of
    a second at 100,000 series) every few scrapes. The garbage there is now is collected
    first, so that no cycle is kept for good; a walk holds none of its own (the
    reference counts free it when it goes)."""
    gc.collect()
    gc.freeze()


def _lost(found: Found, again: Now, walked: list[tuple[int, Key]],
          read_now: list[tuple[Vec, Key]]) -> set[int]:
    """The addresses of the objects read at this scrape (collectors ``walked``, by their
    registry's index, children ``read_now``) that are not members ``again``; each is
    forgotten (what was read of it may be of another object at its address)."""
    lost: set[int] = set()
    for i, key in walked:
        keys = again.regs[i] if i < len(again.regs) else None
        if keys is None or key not in keys:
            unit = found.regs[i].units.pop(key, None)
            if unit is not None:
                lost.update(s.address for _name, s in unit.series)
                lost.update(c.address for v in unit.vecs for c in v.children.values()
                            if c is not None)
    sets: dict[int, set[Key]] = {}
    for v, key in read_now:
        children = sets.get(id(v))
        if children is None:
            children = sets[id(v)] = set(again.children.get(id(v)) or ())
        if key not in children:
            child = v.children.pop(key, None)
            if child is not None:
                lost.add(child.address)
    return lost


def _forget(p: _Process, gone: list[Series]) -> None:
    """Forgets the *Vec children among ``gone`` (read as not themselves while members):
    the child at such a member's address may be another made there since, under the
    same key, whose labels the next scrape reads."""
    addresses = {s.address for s in gone}
    forgot = False
    for v in p.vecs:
        for key, child in list(v.children.items()):
            if child is not None and child.address in addresses and child in gone:
                del v.children[key]
                forgot = True
    if forgot:
        p.last = None  # its families held them


def _absent(found: Found, vecs: list[Vec], before: Now, after: Now) -> set[int]:
    """The addresses of the objects that were members ``before`` and are not ``after``
    (all of a registry's, or a *Vec's, that cannot be read ``after``)."""
    out: set[int] = set()
    for i, keys in enumerate(before.regs):
        now = after.regs[i] if i < len(after.regs) else None
        for key in (keys or set()) - (now or set()):
            unit = found.regs[i].units.get(key)
            if unit is not None:
                out.update(s.address for _name, s in unit.series)
                out.update(c.address for v in unit.vecs for c in v.children.values()
                           if c is not None)
    by_id = {id(v): v for v in vecs}
    for vid, children in before.children.items():
        v = by_id.get(vid)
        if v is None or not children:
            continue
        now_children = set(after.children.get(vid) or ())
        for key in children:
            if key not in now_children and (c := v.children.get(key)) is not None:
                out.add(c.address)
    return out


def running(t: TargetPlan, ids: BuildIds | None = None) -> Callable[[], list[int]]:
    """What ``Mirror(find=...)`` asks at each scrape: the processes running target
    ``t``'s build now (named as the target names them, its pid alone when it has one)."""
    from agent.live import discover

    known = ids or discover.BuildIds()

    def find() -> list[int]:
        if t.selector is None:
            return []
        return [p.pid for p in discover.find(t.selector, t.pid, ids=known)
                if known.of(p) == t.build_id]

    return find


def library_of(path: str, debug: str | None = None) -> Library:
    """The library a binary keeps its metrics with, by its language: client_golang in a
    Go program, the prometheus crate in a Rust one (its DWARF in ``debug`` when given,
    else found as for its plan); NoopError for any other."""
    from agent.binary.elf import ElfFile

    with ElfFile(path) as elf:
        is_go = elf.go_version is not None
    if is_go:
        from agent.presets.vmetrics.library import VMLibrary, uses

        if uses(path):
            vm: Library = VMLibrary(path)
            return vm
        from agent.presets.client_golang.mirror import GoLibrary

        go: Library = GoLibrary(path)
        return go
    from agent.presets.rust_prometheus.mirror import CrateLibrary

    crate: Library = CrateLibrary(path, debug)
    return crate
