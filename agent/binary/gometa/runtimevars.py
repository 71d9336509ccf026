"""Where a Go binary's runtime keeps the numbers of its own metrics (client_golang's
Go collector reads them through ``runtime.ReadMemStats``, ``runtime/metrics`` and
``debug.ReadGCStats``): the globals ``memstats``, ``gcController``, ``sched``,
``mheap_``, ``allglen``, ``allp``, ``allm``, ``gomaxprocs``, ``ncgocall`` and ``ncpu``,
and the offsets of the fields read in them (with every P's mcache and the spans it
holds, for ``runtime.ReadMemStats``' values).

The globals are found the same way with a symbol table or without one (a stripped
build places them elsewhere than its unstripped twin): by the instructions of runtime
functions every program links, named in pclntab — the address a function loads into
its first argument register just before it calls a method of that global's type, or
the global it stores a slice or a count in. The structs are not described anywhere in
a stripped binary: their offsets are a table per minor version of Go, each measured
on a build of that version (with gdb, on DWARF) and checked against it by the tests;
a version outside the table gives no runtime series and says so.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import NamedTuple

from agent.binary.gometa.program import Function, GoProgram
from agent.binary.isa import LOAD, STORE, TAKE, Reference
from agent.binary.sites import CALL
from agent.errors import NoopError

# The offsets of each field read, per minor version: Go 1.19's, then what each later
# version changed (None: the field is gone). Measured with gdb on the DWARF of a build
# by that toolchain (1.19.8, 1.21.13, 1.22.10, 1.23.9, 1.24.11, 1.25.5, 1.26.6,
# 1.27.3): tests/test_goruntime.py measures the suite's toolchains again.
_FIRST = (1, 19)
_CHANGES: dict[tuple[int, int], dict[str, int | None]] = {
    (1, 19): {
        "mstats.heapStats": 0, "mstats.stacks_sys": 3544, "mstats.mspan_sys": 3552,
        "mstats.mcache_sys": 3560, "mstats.buckhash_sys": 3568, "mstats.gcMiscSys": 3576,
        "mstats.other_sys": 3584, "mstats.last_gc_unix": 3592, "mstats.pause_total_ns": 3600,
        "mstats.pause_ns": 3608, "mstats.numgc": 7704, "mstats.numforcedgc": 7708,
        "consistentHeapStats.stats": 0, "consistentHeapStats.gen": 3528,
        "heapStatsDelta": 1176, "heapStatsDelta.committed": 0, "heapStatsDelta.released": 8,
        "heapStatsDelta.inHeap": 16, "heapStatsDelta.inStacks": 24,
        "heapStatsDelta.inWorkBufs": 32, "heapStatsDelta.inPtrScalarBits": 40,
        "heapStatsDelta.tinyAllocCount": 48, "heapStatsDelta.largeAlloc": 56,
        "heapStatsDelta.largeAllocCount": 64, "heapStatsDelta.smallAllocCount": 72,
        "heapStatsDelta.largeFree": 616, "heapStatsDelta.largeFreeCount": 624,
        "heapStatsDelta.smallFreeCount": 632,
        "gcControllerState.gcPercent": 0, "gcControllerState.memoryLimit": 8,
        "gcControllerState.heapMarked": 184, "gcControllerState.triggered": 120,
        "gcControllerState.gcPercentHeapGoal": 104,
        "gcControllerState.sweepDistMinTrigger": 112, "gcControllerState.heapFree": 320,
        "gcControllerState.totalAlloc": 328, "gcControllerState.totalFree": 336,
        "gcControllerState.mappedReady": 344,
        "schedt.lock": 24, "schedt.mnext": 48, "schedt.nmfreed": 64, "schedt.ngsys": 72,
        "schedt.gFree.n": 176, "schedt.gFree.stack.size": None,
        "schedt.gFree.noStack.size": None,
        "p.gFree.n": 2472, "p.gFree.size": None, "p.statsSeq": 8828,
        "m.alllink": 336, "m.ncgocall": 304,
        "mheap.spanalloc.inuse": 92272, "mheap.cachealloc.inuse": 92344,
        # ReadMemStats' flush of every P's mcache (VictoriaMetrics/metrics' go_memstats_*)
        "mstats.gc_cpu_fraction": 7712, "p.mcache": 64, "mcache.tinyAllocs": 32,
        "mcache.alloc": 40, "mspan.allocCount": 96, "mspan.allocCountBeforeCache": 102,
    },
    (1, 21): {
        "gcControllerState.heapMarked": 152, "gcControllerState.triggered": 88,
        "gcControllerState.gcPercentHeapGoal": 72,
        "gcControllerState.sweepDistMinTrigger": 80, "gcControllerState.heapFree": 288,
        "gcControllerState.totalAlloc": 296, "gcControllerState.totalFree": 304,
        "gcControllerState.mappedReady": 312, "schedt.gFree.n": 184,
        "mheap.spanalloc.inuse": 92280, "mheap.cachealloc.inuse": 92352,
        "mspan.allocCount": 104, "mspan.allocCountBeforeCache": 110,
    },
    (1, 22): {"m.alllink": 328, "m.ncgocall": 296, "mheap.spanalloc.inuse": 92344,
              "mheap.cachealloc.inuse": 92416, "p.statsSeq": 8860, "mspan.allocCount": 96,
              "mspan.allocCountBeforeCache": 102},
    (1, 23): {"p.gFree.n": 2464, "p.statsSeq": 8836, "p.mcache": 56},
    (1, 24): {"m.alllink": 352, "m.ncgocall": 320, "mcache.tinyAllocs": 40,
              "mcache.alloc": 48},
    (1, 25): {
        "mstats.stacks_sys": 3520, "mstats.mspan_sys": 3528, "mstats.mcache_sys": 3536,
        "mstats.buckhash_sys": 3544, "mstats.gcMiscSys": 3552, "mstats.other_sys": 3560,
        "mstats.last_gc_unix": 3568, "mstats.pause_total_ns": 3576, "mstats.pause_ns": 3584,
        "mstats.numgc": 7680, "mstats.numforcedgc": 7684, "consistentHeapStats.gen": 3504,
        "heapStatsDelta": 1168, "heapStatsDelta.inPtrScalarBits": None,
        "heapStatsDelta.tinyAllocCount": 40, "heapStatsDelta.largeAlloc": 48,
        "heapStatsDelta.largeAllocCount": 56, "heapStatsDelta.smallAllocCount": 64,
        "heapStatsDelta.largeFree": 608, "heapStatsDelta.largeFreeCount": 616,
        "heapStatsDelta.smallFreeCount": 624, "schedt.lock": 32, "schedt.mnext": 56,
        "schedt.nmfreed": 72, "schedt.ngsys": 80, "schedt.gFree.n": None,
        "schedt.gFree.stack.size": 184, "schedt.gFree.noStack.size": 200,
        "p.gFree.n": None, "p.gFree.size": 2464, "m.alllink": 344, "m.ncgocall": 312,
        "mstats.gc_cpu_fraction": 7688,
        "mheap.spanalloc.inuse": 92368, "mheap.cachealloc.inuse": 92440, "p.statsSeq": 9388,
    },
    (1, 26): {"schedt.mnext": 72, "schedt.nmfreed": 88, "schedt.ngsys": 96,
              "schedt.gFree.stack.size": 200, "schedt.gFree.noStack.size": 216,
              "p.gFree.size": 2472, "m.alllink": 352, "m.ncgocall": 320,
              "mheap.cachealloc.inuse": 92512,
              "p.statsSeq": 13668},
    (1, 27): {},
}
# The size classes' object sizes (runtime.class_to_size, internal/runtime/gc's
# SizeClassToSize since 1.26): the same 68 in every version of the table.
CLASS_TO_SIZE = (
    0, 8, 16, 24, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240, 256, 288,
    320, 352, 384, 416, 448, 480, 512, 576, 640, 704, 768, 896, 1024, 1152, 1280, 1408, 1536,
    1792, 2048, 2304, 2688, 3072, 3200, 3456, 4096, 4864, 5376, 6144, 6528, 6784, 6912, 8192,
    9472, 9728, 10240, 10880, 12288, 13568, 14336, 16384, 18432, 19072, 20480, 21760, 24576,
    27264, 28672, 32768)

# The globals ``locate`` finds, by their names in the runtime
GLOBALS = ("memstats", "gcController", "sched", "mheap_", "allglen", "allp", "allm",
           "gomaxprocs")
# Found where they can be (ReadMemStats' neighbours: VictoriaMetrics/metrics' set): a
# binary without them still has client_golang's go_* series
OPTIONAL = ("ncgocall", "ncpu")


class NotVerified(NoopError):
    """The runtime's numbers of this binary are not read: its Go version is outside
    noop's table, or its runtime is not laid out as the table says."""


def layouts() -> Iterator[tuple[tuple[int, int], dict[str, int | None]]]:
    """Each minor version of the table with every offset it has."""
    now: dict[str, int | None] = {}
    for version, changes in _CHANGES.items():
        now = {**now, **changes}
        yield version, dict(now)


def layout(version: tuple[int, int]) -> dict[str, int | None]:
    for v, offsets in layouts():
        if v == version:
            return offsets
    raise NotVerified(
        f"Go {version[0]}.{version[1]}'s runtime is not in noop's table of layouts "
        f"(Go 1.19, 1.21 to {max(_CHANGES)[0]}.{max(_CHANGES)[1]})",
        "the program's go_* series are not served; its process_* series are")


class Step(NamedTuple):
    """An instruction as ``_Code``'s searches read it: the global it names, or the
    function it calls (a call's ``ref`` is None, any other's ``call``)."""

    ref: Reference | None
    call: str | None


@dataclass(frozen=True, slots=True)
class RuntimeVars:
    """A binary's runtime globals (link-time addresses) and the offsets of their
    fields (``offsets``: this Go version's)."""

    go_version: str  # as runtime.Version() says it: go_info's label
    version: tuple[int, int]
    globals: dict[str, int]
    offsets: dict[str, int | None]


def locate(program: GoProgram) -> RuntimeVars:
    """The runtime's globals in ``program``; NotVerified when its version is outside
    the table or an anchor is not where it should be."""
    go_version = program.go_version
    if go_version is None:
        raise NotVerified("the binary has no Go build information (its Go version is "
                          "unknown)", "the program's go_* series are not served")
    offsets = layout(program.version)
    funcs = {f.name: f for f in program.functions}
    code = _Code(program, funcs)
    found = {
        "memstats": code.receiver("runtime.(*mcache).refill",
                                  "runtime.(*consistentHeapStats).acquire")
        - _need(offsets, "mstats.heapStats"),
        "gcController": code.receiver("runtime.gcinit", "runtime.(*gcControllerState).init"),
        "mheap_": code.receiver("runtime.mallocinit", "runtime.(*mheap).init"),
        "sched": code.receiver("runtime.mcommoninit", "runtime.lock2")
        - _need(offsets, "schedt.lock"),
        "allm": code.receiver("runtime.mcommoninit", "runtime.atomicwb"),
        "allglen": code.before_unlock("runtime.allgadd"),
        "allp": code.first_slice("runtime.procresize"),
        "gomaxprocs": code.first_int32("runtime.procresize"),
    }
    optional: dict[str, Callable[[], int]] = {
        # the cgo calls of the Ms that exited: mexit adds its M's count to it just after
        # it unlocks sched (runtime.NumCgoCall adds every live M's own)
        "ncgocall": lambda: code.after_call("runtime.mexit", "runtime.unlock2", (TAKE,)),
        # runtime.NumCPU(): osinit stores the CPU count it is given there (ncpu, named
        # numCPUStartup since Go 1.25)
        "ncpu": lambda: code.after_call("runtime.osinit", "runtime.getCPUCount"
                                        if program.version >= (1, 25) else
                                        "runtime.getproccount", (LOAD, STORE)),
    }
    for name, find in optional.items():
        # not found: its series left out (VictoriaMetrics/metrics' go_cgo_calls_count, ...)
        with contextlib.suppress(NotVerified):
            found[name] = find()
    return RuntimeVars(go_version, program.version, found, offsets)


def code_of(program: GoProgram) -> _Code:
    """The instructions of ``program``'s functions, by name (a library's globals are
    found in them as the runtime's are)."""
    return _Code(program, {f.name: f for f in program.functions})


def _need(offsets: dict[str, int | None], name: str) -> int:
    got = offsets.get(name)
    if got is None:
        raise NotVerified(f"the runtime's {name} is not in noop's table",
                          "the program's go_* series are not served")
    return got


class _Code:
    """The instructions of a few runtime functions, as the globals they name and the
    functions they call (``isa.Reference``: the same on every architecture)."""

    def __init__(self, program: GoProgram, funcs: dict[str, Function]) -> None:
        from agent.binary import isa

        self.program = program
        self.funcs = funcs
        self._names = {f.entry: name for name, f in funcs.items()}
        self.isa = isa.of(program.elf.arch.name)
        self._steps: dict[str, list[Step]] = {}  # by function: each is read more than once
        # the Go register ABI's first and second integer registers (rax, rbx; x0, x1)
        self.first, self.second = program.elf.arch.go_int_regs[:2]

    def _missing(self, function: str, what: str) -> NotVerified:
        return NotVerified(f"{what} is not where Go {self.program.version[0]}."
                           f"{self.program.version[1]} has it in {function}",
                           "the program's go_* series are not served")

    def instructions(self, function: str) -> list[Step]:
        """What each instruction of ``function`` does that the searches read: the
        global it names (``Step.ref``), or the call it makes (``Step.call``: the called
        function's name, "" for an indirect call or one to no function known)."""
        if function in self._steps:
            return self._steps[function]
        f = self.funcs.get(function)
        if f is None:
            raise self._missing(function, "the function itself")
        insns = self.isa.disassemble(self.program.elf, f.entry, f.size)
        refs: dict[int, list[Reference]] = {}
        for r in self.isa.references(insns):
            refs.setdefault(r.insn.address, []).append(r)
        out: list[Step] = []
        for i in insns:
            if i.kind == CALL:
                out.append(Step(None, self._names.get(i.target, "") if i.target is not None
                                else ""))
            out += [Step(r, None) for r in refs.get(i.address, ())]
        self._steps[function] = out
        return out

    def receiver(self, function: str, callee: str) -> int:
        """The address ``function`` takes into the first argument register (rax, x0)
        last before its first call of ``callee``: that method's receiver, a global."""
        last: int | None = None
        for ref, called in self.instructions(function):
            if ref is not None and ref.how == TAKE and ref.reg == self.first:
                last = ref.address
            elif called == callee:
                if last is None:
                    break
                return last
            elif called is not None:
                last = None
        raise self._missing(function, f"the receiver of its call of {callee}")

    def before_unlock(self, function: str) -> int:
        """allgadd's ``atomicstoreuintptr(&allglen, ...)``: the last address it takes
        into a register other than the first argument's before it calls unlock2."""
        last: int | None = None
        for ref, called in self.instructions(function):
            if ref is not None and ref.how == TAKE and ref.reg != self.first:
                last = ref.address
            elif called == "runtime.unlock2" and last is not None:
                return last
        raise self._missing(function, "the store of allglen")

    def first_slice(self, function: str) -> int:
        """procresize's ``allp``: the first global of which the function uses the
        pointer, the length and the capacity (a slice), by its first use."""
        order = [ref.address for ref, _c in self.instructions(function) if ref is not None]
        used = set(order)
        for at in order:
            for base in (at, at - 8, at - 16):
                if base in used and base + 8 in used and base + 16 in used:
                    return base
        raise self._missing(function, "allp")

    def after_call(self, function: str, callee: str, hows: tuple[str, ...]) -> int:
        """The address the first reference of one of ``hows`` (``isa.TAKE``, ``LOAD``,
        ``STORE``) after ``function``'s first call of ``callee`` names, before any
        other call. A global the function loads a single byte of is left out: a CPU
        feature flag tested before an atomic (arm64's ``HasATOMICS``, read before
        ``atomic.Xadd64(&ncgocall, ...)`` picks LDADDAL or an exclusive loop)."""
        steps = self.instructions(function)
        flags = {ref.address for ref, _c in steps
                 if ref is not None and ref.how == LOAD and ref.size == 1}
        called = False
        for ref, c in steps:
            if called and c is not None:
                break
            if c == callee:
                called = True
            elif called and ref is not None and ref.how in hows and \
                    ref.address not in flags:
                return ref.address
        raise self._missing(function, f"the global it names after calling {callee}")

    def first_int32(self, function: str) -> int:
        """procresize's ``old := gomaxprocs``: its first 32-bit load of a global."""
        for ref, _c in self.instructions(function):
            if ref is not None and ref.how == LOAD and ref.size == 4:
                return ref.address
        raise self._missing(function, "gomaxprocs")
