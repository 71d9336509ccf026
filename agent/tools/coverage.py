"""What ``noop run --binary`` will serve of a running Go or Rust program's own page
(``noop check --binary B --coverage [--url URL]``): each family noop serves from the
program's memory and /proc, each collector it does not read, and, given the program's
own /metrics, each family of that page as mirrored, partly mirrored or not, with the
reason, and the coverage line ``N of M series``."""

from __future__ import annotations

import re
import urllib.error
import urllib.request
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from agent.errors import NoopError
from agent.output import goseries, page, processes
from agent.output.page import Bundle
from agent.presets.vmetrics import runtime as vmruntime

# Why a family of the program's page has no object noop reads, by its name
_WHY = ((re.compile(r"go_.+"), "the Go collector's: a series of the runtime/metrics noop "
         "does not compute (an option of the program's Go collector)"),)
_LABEL = re.compile(rb'(\w+)="((?:[^"\\]|\\.)*)"')


def coverage(binary: str, pid: int, url: str | None, client_golang: bool = True,
             language: str = "go", debug: str | None = None) -> dict[str, Any]:
    """What noop serves of process ``pid`` running ``binary`` (and, with ``url``, of
    the program's own page); ``client_golang``: whether a Go program has metrics of
    client_golang's to mirror (else its runtime's and process's series only); a Rust
    program's, the prometheus crate's (its DWARF in ``debug`` when given)."""
    from agent.presets.mirror.core import Mirror, library_of

    name = Path(binary).name
    runtimes = goseries.Runtimes()
    if not client_golang:
        blocks = [*processes.blocks([processes.Target(name, [pid])]),
                  *goseries.blocks([goseries.Target(name, binary, [pid])], runtimes)]
        unread: dict[str, int] = {}
        funcs: set[str] = set()
        library = ""
    else:
        mirror = Mirror(name, binary, walk_every=3600, find=lambda: [pid],
                        library=library_of(binary, debug))
        try:
            got = mirror.blocks()
            pids = mirror.pids()
            blocks = [*(got.split() if isinstance(got, Bundle) else got)]
            theirs = vmruntime.target_of(mirror.library, name, binary, pids)
            if theirs is not None:  # the library writes its own go_* and process_* set
                blocks += vmruntime.blocks([theirs], runtimes)
                runtimes.forget(set())
            else:
                blocks += processes.blocks([processes.Target(name, pids, mirror.collectors)])
            if theirs is None and language == "go":
                blocks += goseries.blocks(
                    [goseries.Target(name, binary, pids, mirror.go_collectors)], runtimes)
            health = {m.name: m for m in mirror.collect()}
            funcs = mirror.funcs(pid)
            library = str(getattr(mirror.library, "name", ""))
        finally:
            mirror.close()
        if pid not in pids:
            raise NoopError(f"process {pid}'s own metrics cannot be read",
                            "noop reads them with ptrace access: run as root, with "
                            "CAP_SYS_PTRACE")
        unread = {s.labels["type"]: int(s.value)
                  for s in health["noop_mirror_unmirrored_collectors"].samples}
    ours = _families(((b.name, b.type, b.keys) for b in blocks), drop=(b"pid", b"target"))
    out: dict[str, Any] = {
        "binary": binary, "pid": pid,
        "served": [{"family": f, "type": t, "series": len(keys)}
                   for f, (t, keys) in sorted(ours.items())],
        "unmirrored_collectors": [{"type": t, "count": n} for t, n in sorted(unread.items())],
    }
    if url is None:
        return out
    own = _families((name, type_, keys)
                    for name, _help, type_, _text, keys in page.text_families(_fetch(url)))
    rows = []
    served = total = 0
    for family, (kind, keys) in sorted(own.items()):
        mine = ours.get(family, ("", set()))[1]
        have = len(keys & mine)
        served += have
        total += len(keys)
        status = "mirrored" if have == len(keys) else "partly" if have else "not"
        rows.append({"family": family, "type": kind, "series": len(keys), "mirrored": have,
                     "status": status, "why": "" if status == "mirrored" else
                     _why(family, status, unread, funcs, language, library)})
    refused = runtimes.refused.get(binary)
    for r in rows:  # the runtime's numbers not read at all: why
        if refused and r["status"] == "not" and str(r["family"]).startswith("go_"):
            r["why"] = f"the Go runtime's numbers are not read: {refused}"
    out["page"] = {"url": url, "families": rows, "mirrored_series": served,
                   "series": total}
    return out


def _why(family: str, status: str, unread: dict[str, int], funcs: set[str],
         language: str = "go", library: str = "") -> str:
    if family in funcs:
        return "a GaugeFunc or CounterFunc: a function called at each scrape, no value kept"
    for pattern, why in _WHY if library != "VictoriaMetrics/metrics" else ():
        if pattern.fullmatch(family):  # client_golang's Go collector's options
            return why
    if status == "partly":
        return "some series were not members when read (made or deleted since), or " \
            "past --mirror-max-series"
    if library == "VictoriaMetrics/metrics":
        return "written by the program itself, not kept by the library (a line it writes " \
            "by hand, as flag{…}), or in a Set noop has not found (written without being " \
            "registered: noop run finds it through its probe on the Set's writer)"
    if language == "rust":
        kinds = ", ".join(sorted(unread))
        return "in a registry no static holds (noop run finds it through its probe where " \
            "the program gathers one; check loads none)" + \
            (f", or made by a collector noop does not read ({kinds})" if kinds else "")
    kinds = ", ".join(sorted(t.rsplit(".", 1)[-1] for t in unread
                             if t.rsplit(".", 1)[-1] not in ("goCollector", "valueFunc")))
    return f"made by a collector of the program's own ({kinds or 'none found'}): its " \
        "values are made at each scrape, none kept to read"


def _fetch(url: str) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return bytes(r.read())
    except (OSError, ValueError, urllib.error.URLError) as exc:
        raise NoopError(f"cannot read {url}: {getattr(exc, 'reason', exc)}",
                        "give the program's own /metrics URL") from None


def _families(blocks: Iterable[tuple[bytes, bytes, list[bytes]]], drop: tuple[bytes, ...] = ()
              ) -> dict[str, tuple[str, set[str]]]:
    """Families (name, type, their samples' keys as written): each one's type and its
    samples' keys, the labels ``drop`` names left out and the rest sorted."""
    out: dict[str, tuple[str, set[str]]] = {}
    for name, type_, keys in blocks:
        got = out.setdefault(name.decode(errors="replace"), (type_.decode(), set()))[1]
        for key in keys:
            sample, _, labels = key.partition(b"{")
            kept = sorted((k, v) for k, v in _LABEL.findall(labels) if k not in drop)
            got.add((sample + b"{" + b",".join(k + b'="' + v + b'"' for k, v in kept)
                     + b"}").decode(errors="replace"))
    return out


def render(data: dict[str, Any]) -> str:
    """``coverage``'s answer as a table: the program's page when it was read, else what
    noop serves; the collectors it does not read; the coverage line."""
    lines = [f"{data['binary']} (process {data['pid']})"]
    page = data.get("page")
    if page is None:
        lines.append(f"{'family':<48} {'type':<10} {'series':>7}")
        lines += [f"{r['family']:<48} {r['type']:<10} {r['series']:>7}"
                  for r in data["served"]]
    else:
        lines.append(f"{'family':<48} {'type':<10} {'series':>7} {'noop':>7}  status")
        for r in page["families"]:
            why = f" ({r['why']})" if r["why"] else ""
            lines.append(f"{r['family']:<48} {r['type']:<10} {r['series']:>7} "
                         f"{r['mirrored']:>7}  {r['status']}{why}")
    for c in data["unmirrored_collectors"]:
        lines.append(f"not read: {c['count']} collector(s) of type {c['type']}")
    if page is not None:
        lines.append(f"{page['mirrored_series']} of {page['series']} series of "
                     f"{page['url']} mirrored")
    return "\n".join(lines)
