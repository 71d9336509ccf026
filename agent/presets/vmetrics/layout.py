"""Where VictoriaMetrics/metrics keeps what the mirror reads, in one Go binary: every
offset from the binary's own type descriptors (stripped builds keep them), the global
``registeredSets`` (the map of every registered Set, the default one among them) from
the code of ``RegisterSet`` (its map assignment's map), and the vmrange text of each
histogram bucket, computed as the library computes it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from agent.errors import NoopError
from agent.presets.vmetrics.facts import PKG

FAST = "github.com/valyala/histogram.Fast"
DECADES = 27  # e10Max - e10Min: 1e-9 to 1e18
BUCKETS_PER_DECADE = 18
_E10_MIN, _E10_MAX = -9, 18


class NoLayout(NoopError):
    """The library is not in the binary, or not as noop knows it."""


@lru_cache(maxsize=1)
def _ranges() -> tuple[str, ...]:
    """Each bucket's vmrange, as initBucketRanges makes them (the same float steps: Go's
    math.Pow(10, 1/18) and Python's agree bit for bit here, as do their %.3e)."""
    step = math.pow(10, 1.0 / BUCKETS_PER_DECADE)
    v = math.pow(10, _E10_MIN)
    start = f"{v:.3e}"
    out = []
    for _ in range(DECADES * BUCKETS_PER_DECADE):
        v *= step
        end = f"{v:.3e}"
        out.append(f"{start}...{end}")
        start = end
    return tuple(out)


def vmrange(index: int) -> str:
    """The vmrange label of bucket ``index`` (-1: below every decade; past the last:
    above)."""
    if index < 0:
        return f"0...{10.0 ** _E10_MIN:.3e}"
    if index >= DECADES * BUCKETS_PER_DECADE:
        return f"{10.0 ** _E10_MAX:.3e}...+Inf"
    return _ranges()[index]


@dataclass(frozen=True)
class Layout:
    """The offsets and types the mirror reads, and the global it starts from."""

    pkg: str
    registered: int  # link-time address of registeredSets (a map[*Set]struct{})
    sets_map: Any  # its type
    set_mu: int
    set_a: int
    counter_n: int
    float_n: int
    h_mu: int
    h_decades: int
    h_lower: int
    h_upper: int
    h_sum: int
    s_mu: int
    s_curr: int
    s_quantiles: int
    s_sum: int
    s_count: int
    fast_max: int
    fast_min: int
    fast_a: int
    kinds: dict[str, str]  # type name of a metric's pointer -> its kind
    start_time: int | None  # link-time address of startTimeSeconds (None: not found)
    fds: bool  # the program calls WriteFDMetrics (the linker keeps what is called)
    goroot: str  # what runtime.GOROOT() returns without a GOROOT variable
    goarch: str  # runtime.GOARCH: amd64, arm64
    functions: tuple[tuple[int, ...], tuple[str, ...]]  # entries and names, by entry

    def kind(self, type_name: str) -> str | None:
        return self.kinds.get(type_name)


def layout(program: Any) -> Layout:
    """The library's layout in ``program`` (a GoProgram); NoLayout when it is not there
    or not as this version of noop knows it."""
    types = program.types
    need: dict[str, Any] = {}
    for short in ("Set", "namedMetric", "Counter", "FloatCounter", "Histogram", "Summary",
                  "quantileValue"):
        t = types.find(f"{PKG}.{short}")
        if t is None:
            raise NoLayout(f"the binary has no {PKG}.{short} type", "")
        need[short] = t
    fast = types.find(FAST)
    sets_map = types.find(f"map[*{PKG}.Set]struct {{}}")
    if fast is None or sets_map is None:
        raise NoLayout("the binary's VictoriaMetrics/metrics types are not all there", "")

    def at(short: str, name: str, size: int = 8) -> int:
        t = need[short] if short != "Fast" else fast
        for f in t.fields:
            if f.name == name:
                if f.type.size != size:
                    break
                return int(f.offset)
        raise NoLayout(f"{PKG}.{short}.{name} is not as noop knows it (1.x with a "
                       f"{size}-byte {name})", "")

    named = [(f.name, int(f.offset), int(f.type.size)) for f in need["namedMetric"].fields]
    if named[:3] != [("name", 0, 16), ("metric", 16, 16), ("isAux", 32, 1)]:
        raise NoLayout(f"{PKG}.namedMetric is not {{name string; metric; isAux bool}}", "")
    decades = next((f for f in need["Histogram"].fields if f.name == "decimalBuckets"), None)
    if decades is None or decades.type.size != 8 * DECADES:
        raise NoLayout(f"{PKG}.Histogram has not {DECADES} decades of buckets", "")
    functions = sorted((f.entry, f.name) for f in program.functions)
    return Layout(
        pkg=PKG, registered=_registered(program), sets_map=sets_map,
        set_mu=at("Set", "mu"), set_a=at("Set", "a", 24), counter_n=at("Counter", "n"),
        float_n=at("FloatCounter", "n"),
        h_mu=at("Histogram", "mu"), h_decades=int(decades.offset),
        h_lower=at("Histogram", "lower"),
        h_upper=at("Histogram", "upper"), h_sum=at("Histogram", "sum"),
        s_mu=at("Summary", "mu"), s_curr=at("Summary", "curr"),
        s_quantiles=at("Summary", "quantiles", 24),
        s_sum=at("Summary", "sum"), s_count=at("Summary", "count"),
        fast_max=at("Fast", "max"), fast_min=at("Fast", "min"), fast_a=at("Fast", "a", 24),
        kinds={f"*{PKG}.Counter": "counter", f"*{PKG}.FloatCounter": "float",
               f"*{PKG}.Histogram": "histogram", f"*{PKG}.Summary": "summary",
               f"*{PKG}.quantileValue": "quantile", f"*{PKG}.Gauge": "gauge"},
        start_time=_start_time(program), goroot=goroot(program),
        goarch=program.elf.arch.goarch,
        fds=any(n == f"{PKG}.writeFDMetrics" for _e, n in functions),
        functions=(tuple(e for e, _n in functions), tuple(n for _e, n in functions)))


def goroot(program: Any) -> str:
    """The GOROOT the linker wrote into the program (runtime.defaultGOROOT): the root
    its runtime's file names start from; empty for a -trimpath build, whose names are
    relative (and whose defaultGOROOT the linker leaves empty)."""
    main = next((f for f in program.functions if f.name == "runtime.main"), None)
    if main is None:
        return ""
    try:
        name = program.pclntab.file_at_entry(main.func)
    except NoopError:
        return ""
    root, found, _rest = name.rpartition("/src/runtime/")
    return root if found and name.startswith("/") else ""


def _start_time(program: Any) -> int | None:
    """startTimeSeconds: the one 8-byte global without pointers (``.noptrbss``: set as
    the package is initialised) writeProcessMetrics loads into a register; None when
    it has not exactly one (the process's start from /proc is served then)."""
    from agent.binary.gometa.runtimevars import NotVerified, code_of
    from agent.binary.isa import LOAD

    section = program.elf.section(".noptrbss")
    try:
        instructions = code_of(program).instructions(f"{PKG}.writeProcessMetrics")
    except NotVerified:
        return None
    if section is None:
        return None
    loads = {ref.address for ref, _c in instructions
             if ref is not None and ref.how == LOAD and ref.size == 8 and
             section.addr <= ref.address < section.addr + section.size}
    return loads.pop() if len(loads) == 1 else None


def _registered(program: Any) -> int:
    """registeredSets: the map ``RegisterSet`` (or ``init.0``, where it is inlined)
    assigns to, the last global loaded into the second argument register (rbx, x1:
    mapassign's map) before its call of ``runtime.mapassign*``."""
    from agent.binary.gometa.runtimevars import NotVerified, code_of
    from agent.binary.isa import LOAD

    code = code_of(program)
    for function in (f"{PKG}.RegisterSet", f"{PKG}.init.0"):
        try:
            instructions = code.instructions(function)
        except NotVerified:
            continue
        last: int | None = None
        for ref, called in instructions:
            if ref is not None and ref.how == LOAD and ref.reg == code.second and \
                    ref.size == 8:
                last = ref.address
            elif called is not None and called.startswith("runtime.mapassign"):
                if last is not None:
                    return last
            elif called is not None:
                last = None
    raise NoLayout(f"{PKG}.registeredSets is not where noop looks for it (RegisterSet's "
                   "map assignment)", "")
