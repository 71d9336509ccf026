"""The Go runtime's own numbers read from outside (agent.binary.gometa.runtimevars,
agent.live.goruntime) against the program's own: tests/programs/go/runtime reports its
runtime/metrics values, NumGoroutine, its thread count and debug.ReadGCStats when asked,
with nothing allocated before it has read them; noop reads its memory just before and
just after. Where the two reads agree (the runtime was quiet) the program's value must
be that value; where they differ it must lie between them (the bound: what changed in
the program while it answered). Every toolchain of the suite, with DWARF and stripped.

The table of offsets is checked against gdb's reading of each toolchain's DWARF, and
the globals noop finds by their anchors against the symbol table."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile
from harness.programs import GO_TOOLCHAINS, PROGRAMS, go_build, go_toolchain
from oracles.gdb import field_offsets

from agent.binary.elf import ElfFile
from agent.binary.gometa import runtimevars
from agent.binary.gometa.program import GoProgram
from agent.live import goruntime
from agent.live.gomemory import GoMemory, open_process

pytestmark = pytest.mark.builds

SOURCE = PROGRAMS / "go" / "runtime"
# each step, then the program's report between two reads of noop's: more than 256 GCs
# (the pause ring wraps), a memory limit and GOGC set, GOMAXPROCS changed
STEPS = ("alloc 20000", "go 40", "gc 2", "alloc 200000", "gc 300", "limit 60000000",
         "gogc 50", "procs 1", "alloc 5000", "procs 2", "gc 1", "limit 9223372036854775807",
         "gogc 100")
_SCALARS = ("goroutines", "threads", "numgc", "pause_total_ns", "last_gc_unix_ns")


def _built(version: str, variant: str, tmp: pytest.TempPathFactory) -> tuple[str, str, Path]:
    out = tmp.mktemp(f"runtime-{version}-{variant}")
    flags = ("-ldflags=-s -w",) if variant == "stripped" else ()
    return version, variant, go_build(go_toolchain(version), out / "runtime", None, SOURCE,
                                      flags)


@pytest.fixture(scope="module", params=[(t, v) for t in GO_TOOLCHAINS
                                        for v in ("dwarf", "stripped")],
                ids=lambda p: f"go{p[0]}-{p[1]}")
def build(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
          ) -> tuple[str, str, Path]:
    return _built(*request.param, tmp_path_factory)


@pytest.fixture(scope="module", params=GO_TOOLCHAINS, ids=lambda v: f"go{v}")
def with_dwarf(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
               ) -> Path:
    return _built(request.param, "dwarf", tmp_path_factory)[2]


def _gdb_name(key: str) -> str:
    """The table's ``mstats.pause_ns`` as gdb's ``runtime.mstats:pause_ns``."""
    name, _, path = key.partition(".")
    return f"runtime.{name}:{path}"


def test_the_table_is_what_gdb_reads_in_dwarf(with_dwarf: Path) -> None:
    binary = with_dwarf
    program = GoProgram(ElfFile(binary))
    table = runtimevars.layout(program.version)
    gdb = field_offsets(binary, [_gdb_name(k) for k in table])
    assert {k: gdb[_gdb_name(k)] for k in table} == table


def test_the_anchors_find_the_symbol_tables_globals(build: tuple[str, str, Path]) -> None:
    _version, variant, binary = build
    found = runtimevars.locate(GoProgram(ElfFile(binary))).globals
    assert set(found) == {*runtimevars.GLOBALS, *runtimevars.OPTIONAL}  # every toolchain
    if variant == "stripped":
        assert all(found.values())  # where they are is checked by the truth test below
        return
    with binary.open("rb") as f:
        symtab = ELFFile(f).get_section_by_name(".symtab")
        symbols = {s.name: s["st_value"] for s in symtab.iter_symbols()}
    # ncpu is runtime.numCPUStartup since Go 1.25
    named = {name: symbols.get(f"runtime.{name}", symbols.get("runtime.numCPUStartup"))
             if name == "ncpu" else symbols[f"runtime.{name}"] for name in found}
    assert found == named


class _Program:
    def __init__(self, binary: Path) -> None:
        self.proc = subprocess.Popen([str(binary)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        self.pid = int(self.proc.stdout.readline())

    def ask(self, line: str) -> str:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline()


@pytest.fixture
def running(build: tuple[str, str, Path]) -> Iterator[tuple[_Program, GoMemory,
                                                             runtimevars.RuntimeVars]]:
    binary = build[2]
    elf = ElfFile(binary)
    program = GoProgram(elf)
    p = _Program(binary)
    try:
        gm = open_process(p.pid, str(binary), program.types,
                          tuple((s.vaddr, s.offset) for s in elf.segments), elf.e_type == 3)
        yield p, gm, runtimevars.locate(program)
    finally:
        p.proc.kill()
        p.proc.wait()


def _between(a: int, own: int, b: int) -> bool:
    return min(a, b) <= own <= max(a, b)


# the counters that only grow: between two reads of noop's whatever else ran meanwhile
MONOTONIC = ("/gc/heap/allocs:bytes", "/gc/heap/allocs:objects", "/gc/heap/frees:bytes",
             "/gc/heap/frees:objects", "/gc/heap/tiny/allocs:objects", "numgc",
             "pause_total_ns", "last_gc_unix_ns")


def _numbers(s: goruntime.Snapshot) -> dict[str, int]:
    return {**s.metrics, **{k: getattr(s, k) for k in _SCALARS}}


def _settled(gm: GoMemory, rv: runtimevars.RuntimeVars) -> goruntime.Snapshot:
    """A read once two in a row 20 ms apart agree (the runtime's background work, the
    sweeper and the scavenger, done), or the last after 3 s."""
    last = goruntime.read(gm, rv)
    for _ in range(150):
        time.sleep(0.02)
        now = goruntime.read(gm, rv)
        if _numbers(now) == _numbers(last):
            return now
        last = now
    return last


def test_every_number_is_the_programs_own(running: tuple[_Program, GoMemory,
                                                         runtimevars.RuntimeVars]) -> None:
    """Quiet (noop's reads before and after the program's equal): exact. Not quiet:
    each counter that only grows lies between noop's two reads; the others are not
    bounded (the sweeper frees and the scavenger releases while the program answers).
    Equal reads on either side do not prove a number stood still between them (a stack
    span freed to the heap and taken again while the program reads): a step whose
    reads disagree is read again, up to three times, and must agree once."""
    p, gm, rv = running
    wrong: list[str] = []
    exact = compared = 0
    for step in STEPS:
        assert p.ask(step).strip() == "ok"
        for _try in range(3):
            before = _settled(gm, rv)
            assert p.ask("snap").strip() == "read"
            after = goruntime.read(gm, rv)  # before the program allocates again
            own = json.loads(p.ask("print"))
            mine = {**own["metrics"], **{k: own[k] for k in _SCALARS}}
            a, b = _numbers(before), _numbers(after)
            here: list[str] = []
            agreed = 0
            for name in sorted(set(a) & set(mine)):
                if a[name] == b[name]:
                    agreed += mine[name] == a[name]
                    if mine[name] != a[name]:
                        here.append(f"{step}: {name} noop {a[name]}, the program {mine[name]}")
                elif name in MONOTONIC and not _between(a[name], mine[name], b[name]):
                    here.append(f"{step}: {name} noop {a[name]}..{b[name]}, "
                                f"the program {mine[name]}")
            if not here:
                break
        wrong += here
        compared += len(set(a) & set(mine))
        exact += agreed
        # debug.ReadGCStats' quantiles, of the pauses noop read when the GC was quiet
        if before.numgc == after.numgc == own["numgc"]:
            assert goruntime.pause_quantiles(before.pauses) == own["quantiles"], step
    assert not wrong
    # most are compared exactly: the runtime is quiet while the program waits
    assert exact >= compared * 0.8, (exact, compared)
    # the series client_golang serves come from the values runtime/metrics names
    assert {"/gc/heap/allocs:bytes", "/memory/classes/total:bytes",
            "/gc/heap/goal:bytes"} <= set(before.metrics)


# MemStats' counters that only grow
_GROWING = ("TotalAlloc", "Mallocs", "Frees")
_STACK_SPAN = 32 << 10  # _StackCacheSize: the span a P's stack cache takes its stacks from


def _stopped(s: goruntime.Snapshot) -> dict[str, float]:
    assert s.stopped is not None
    st = s.stopped
    return {**st.memstats, "gc_cpu_fraction": st.gc_cpu_fraction,
            "numforcedgc": st.numforcedgc, "cgo_calls": st.cgo_calls, "ncpu": st.ncpu}


def test_readmemstats_is_the_programs_own(running: tuple[_Program, GoMemory,
                                                         runtimevars.RuntimeVars]) -> None:
    """ReadMemStats' values (every mcache flushed first), NumCgoCall and NumCPU as
    VictoriaMetrics/metrics writes them: noop's read (its flush of each mcache made by
    arithmetic, nothing written) before the program's own ReadMemStats and after it;
    quiet, exact; else the counters lie between. The objects allocated from cached
    spans are what tells this from the runtime/metrics numbers: the program keeps
    allocating, so its mcaches hold some at each step. One difference is known and
    bounded (docs/limits.md): the flush also empties each P's stack cache, and a stack
    span all of whose stacks were cached goes back to the heap: StackInuse and StackSys
    that much lower, HeapIdle and HeapSys that much higher, whole spans of 32 KiB."""
    p, gm, rv = running
    wrong: list[str] = []
    exact = compared = moved = 0
    for step in STEPS:
        assert p.ask(step).strip() == "ok"
        for _ in range(50):  # a read that agrees with the next (the runtime quiet)
            before = goruntime.read(gm, rv, stopped=True)
            time.sleep(0.02)
            if _stopped(before) == _stopped(goruntime.read(gm, rv, stopped=True)):
                break
        plain = goruntime.memstats_of(before.metrics)
        assert p.ask("memstats").strip() == "read"
        after = goruntime.read(gm, rv, stopped=True)
        own_all = json.loads(p.ask("print"))
        own = {**own_all["memstats"], **{k: own_all[k] for k in (
            "gc_cpu_fraction", "numforcedgc", "cgo_calls", "ncpu")}}
        a, b = _stopped(before), _stopped(after)
        moved += plain["Mallocs"] != a["Mallocs"]
        freed = a["StackInuse"] - own["StackInuse"]
        if freed and freed % _STACK_SPAN == 0 and freed > 0 and all(
                a[k] - own[k] == freed for k in ("StackSys",)) and all(
                own[k] - a[k] == freed for k in ("HeapIdle", "HeapSys")):
            for k in ("StackInuse", "StackSys", "HeapIdle", "HeapSys"):
                own[k] = a[k]  # the stack spans the flush gave back
        for name in sorted(own):
            compared += 1
            if a[name] == b[name]:
                exact += own[name] == a[name]
                if own[name] != a[name]:
                    wrong.append(f"{step}: {name} noop {a[name]}, the program {own[name]}")
            elif name in _GROWING and not _between(int(a[name]), own[name], int(b[name])):
                wrong.append(f"{step}: {name} noop {a[name]}..{b[name]}, "
                             f"the program {own[name]}")
    assert not wrong
    assert exact >= compared * 0.8, (exact, compared)
    assert moved, "no step had objects in a cached span: the flush was not exercised"


def test_a_version_outside_the_table_is_one_line() -> None:
    with pytest.raises(runtimevars.NotVerified) as got:
        runtimevars.layout((1, 20))
    assert "Go 1.20's runtime is not in noop's table" in got.value.message
    assert "\n" not in got.value.message


@pytest.fixture(scope="module", params=GO_TOOLCHAINS, ids=lambda v: f"go{v}")
def stripped(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
             ) -> Path:
    return _built(request.param, "stripped", tmp_path_factory)[2]


def test_damaged_anchors_are_refused_in_one_line(stripped: Path, tmp_path: Path) -> None:
    """Each anchor function's code overwritten in turn (zeros, then random bytes): the
    runtime is located from what is left or refused with noop's one line, never
    another exception; the go_* part of a page then says why."""
    import random

    from agent.errors import NoopError
    from agent.output import goseries

    binary = stripped
    program = GoProgram(ElfFile(binary))
    anchors = ("runtime.(*mcache).refill", "runtime.gcinit", "runtime.mallocinit",
               "runtime.mcommoninit", "runtime.allgadd", "runtime.procresize")
    funcs = {f.name: f for f in program.functions if f.name in anchors}
    assert set(funcs) == set(anchors)
    rng = random.Random(59)
    for name, f in funcs.items():
        for fill in ("zeros", "random"):
            damaged = tmp_path / f"{name.replace('*', '').replace('/', '_')}-{fill}"
            data = bytearray(binary.read_bytes())
            at = ElfFile(binary).file_offset(f.entry)
            size = f.size
            data[at:at + size] = bytes(size) if fill == "zeros" else rng.randbytes(size)
            damaged.write_bytes(bytes(data))
            try:
                runtimevars.locate(GoProgram(ElfFile(damaged)))
            except NoopError as exc:
                assert "\n" not in exc.message and exc.message, (name, fill)
            runtimes = goseries.Runtimes()
            runtimes.snapshot(str(damaged), 1)  # pid 1 is never this program: refused
            assert "\n" not in runtimes.refused.get(str(damaged), "")
