"""A running Go program's runtime numbers, read from its memory in two batched reads,
computed as the program itself would compute them: ``runtime/metrics`` (whose values
client_golang's Go collector turns into go_memstats_*), ``NumGoroutine``, the thread
count, ``debug.ReadGCStats`` (go_gc_duration_seconds), GOGC, the memory limit and
GOMAXPROCS; with ``stopped``, also ``runtime.ReadMemStats``' values (VictoriaMetrics/
metrics writes them): ReadMemStats stops the world and flushes every P's mcache first,
which counts the objects allocated from each span the mcache holds since it took it and
the tiny allocations it holds; noop reads each mcache and adds those as the flush would.

What is read while the program runs is checked before it is kept: the heap statistics'
ring (three generations, one of them zero between the runtime's own reads of it, the
generation the same before and after), every P's statistics sequence even (no writer
half-way), ``len(allp)`` = GOMAXPROCS, each P's id its index, the memory the pacer
counts no more than it has mapped. A read that fails a check is made again after a
pause that doubles (a writer the kernel preempted half-way holds its P's sequence odd
until it runs again: a scheduler tick or more on a loaded host), seven times at most,
~32 ms in all; then the snapshot is Unsettled and nothing of it is served.
"""

from __future__ import annotations

import struct
import time
from dataclasses import dataclass

from agent.binary.gometa.runtimevars import CLASS_TO_SIZE, RuntimeVars
from agent.live.gomemory import GoMemory
from agent.live.memory import Unreadable

TRIES = 8
_FIRST_PAUSE = 0.00025  # s; doubled after each failed try
MAX_P = 1 << 16  # GOMAXPROCS at most (the runtime's own limit is 1 << 31 - 1... of
# which a real program uses a few hundred)
_MIN_RUNWAY = 64 << 10  # the pacer's minRunway
_MIN_HEADROOM = 1 << 20  # memoryLimitMinHeapGoalHeadroom (memoryLimitHeapGoalHeadroom)
_HEADROOM_PERCENT = 3  # memoryLimitHeapGoalHeadroomPercent, since 1.21
_NUM_CLASSES = len(CLASS_TO_SIZE)
_SPAN_CLASSES = 2 * _NUM_CLASSES  # numSpanClasses: with and without pointers
_MASK = (1 << 64) - 1
MAX_M = 1 << 16  # Ms walked at most (the runtime's default limit is 10,000 threads)


class Unsettled(Unreadable):
    """The runtime's numbers changed under every read (or are not what its code keeps
    them as): none served this time."""


@dataclass(frozen=True, slots=True)
class Snapshot:
    """One process's runtime numbers at one read."""

    go_version: str
    goroutines: int  # runtime.NumGoroutine()
    threads: int  # the Ms made and not freed (runtime.ThreadCreateProfile's count)
    metrics: dict[str, int]  # runtime/metrics' values by their names, as the runtime has
    # them (uint64; /gc/gogc:percent and /gc/gomemlimit:bytes as their int64 bits)
    pauses: tuple[int, ...]  # the last min(numgc, 256) GC pauses, ns, most recent first
    pause_total_ns: int
    numgc: int
    last_gc_unix_ns: int
    stopped: Stopped | None = None  # ReadMemStats' values (read with ``stopped``)


@dataclass(frozen=True, slots=True)
class Stopped:
    """What ``runtime.ReadMemStats`` and its neighbours give: MemStats' fields as
    ReadMemStats fills them (every mcache flushed), and the other numbers
    VictoriaMetrics/metrics writes."""

    memstats: dict[str, int]  # by MemStats' field names
    gc_cpu_fraction: float
    numforcedgc: int
    cgo_calls: int | None  # runtime.NumCgoCall() (None: its global not found)
    ncpu: int | None  # runtime.NumCPU()


def read(gm: GoMemory, rv: RuntimeVars, stopped: bool = False) -> Snapshot:
    """The runtime numbers of the process ``gm`` reads (with ``stopped``, ReadMemStats'
    too); Unsettled when every try failed a check, Unreadable when its memory cannot
    be read."""
    why = ""
    for i in range(TRIES):
        if i:
            time.sleep(_FIRST_PAUSE * (1 << (i - 1)))
        try:
            return _read(gm, rv, stopped)
        except Unsettled as exc:
            why = exc.message
    raise Unsettled(f"the runtime's numbers changed under {TRIES} reads: {why}", "")


def pause_quantiles(pauses: tuple[int, ...], n: int = 5) -> list[int]:
    """debug.ReadGCStats' PauseQuantiles (client_golang asks for 5: the minimum, the
    quartiles and the maximum) of ``pauses``: all zero when there are none."""
    if not pauses:
        return [0] * n
    ordered = sorted(pauses)
    return [ordered[len(ordered) * i // (n - 1)] for i in range(n - 1)] + [ordered[-1]]


def _u(data: bytes, at: int | None, size: int = 8, signed: bool = False) -> int:
    if at is None:
        return 0
    return int.from_bytes(data[at:at + size], "little", signed=signed)


def memstats_of(m: dict[str, int]) -> dict[str, int]:
    """runtime.MemStats from runtime/metrics' values as client_golang (>= 1.12) fills it
    (memStatsFromRM), which is ReadMemStats' own arithmetic on the same statistics, in
    uint64 arithmetic."""
    def g(name: str) -> int:
        return m.get(name, 0)

    tiny = g("/gc/heap/tiny/allocs:objects")
    heap_alloc = g("/memory/classes/heap/objects:bytes")
    heap_inuse = heap_alloc + g("/memory/classes/heap/unused:bytes")
    heap_idle = g("/memory/classes/heap/released:bytes") + g("/memory/classes/heap/free:bytes")
    stack_inuse = g("/memory/classes/heap/stacks:bytes")
    span = g("/memory/classes/metadata/mspan/inuse:bytes")
    cache = g("/memory/classes/metadata/mcache/inuse:bytes")
    out = {
        "Alloc": heap_alloc, "TotalAlloc": g("/gc/heap/allocs:bytes"),
        "Sys": g("/memory/classes/total:bytes"), "Lookups": 0,
        "Mallocs": g("/gc/heap/allocs:objects") + tiny,
        "Frees": g("/gc/heap/frees:objects") + tiny, "HeapAlloc": heap_alloc,
        "HeapSys": heap_inuse + heap_idle, "HeapIdle": heap_idle, "HeapInuse": heap_inuse,
        "HeapReleased": g("/memory/classes/heap/released:bytes"),
        "HeapObjects": g("/gc/heap/objects:objects"), "StackInuse": stack_inuse,
        "StackSys": stack_inuse + g("/memory/classes/os-stacks:bytes"),
        "MSpanInuse": span, "MSpanSys": span + g("/memory/classes/metadata/mspan/free:bytes"),
        "MCacheInuse": cache,
        "MCacheSys": cache + g("/memory/classes/metadata/mcache/free:bytes"),
        "BuckHashSys": g("/memory/classes/profiling/buckets:bytes"),
        "GCSys": g("/memory/classes/metadata/other:bytes"),
        "OtherSys": g("/memory/classes/other:bytes"), "NextGC": g("/gc/heap/goal:bytes"),
    }
    return {k: v & _MASK for k, v in out.items()}


def _read(gm: GoMemory, rv: RuntimeVars, stopped: bool = False) -> Snapshot:
    o, g, b = rv.offsets, rv.globals, gm.bias
    ms_size = _off(o, "mstats.numforcedgc") + 4
    if stopped:
        ms_size = max(ms_size, _off(o, "mstats.gc_cpu_fraction") + 8)
    gc_size = max(v for k, v in o.items() if k.startswith("gcControllerState.")
                  and v is not None) + 8
    sc_fields = [k for k in o if k.startswith("schedt.") and o[k] is not None]
    sc_size = max(_off(o, k) for k in sc_fields) + 8
    span_at, cache_at = _off(o, "mheap.spanalloc.inuse"), _off(o, "mheap.cachealloc.inuse")
    ranges = [(g["memstats"] + b, ms_size), (g["gcController"] + b, gc_size),
              (g["sched"] + b, sc_size), (g["mheap_"] + span_at + b, 8),
              (g["mheap_"] + cache_at + b, 8), (g["allglen"] + b, 8), (g["allp"] + b, 24),
              (g["gomaxprocs"] + b, 4)]
    got = gm.memory.read_many(ranges)
    if any(x is None for x in got):
        raise Unreadable("the runtime's globals are not mapped where the binary has them",
                         "")
    ms, gc, sc, span, cache, allglen_b, allp_b, procs_b = (x or b"" for x in got)
    allp, nprocs, _cap = struct.unpack("<QQQ", allp_b)
    gomaxprocs = _u(procs_b, 0, 4, signed=True)
    if not 0 < nprocs <= MAX_P or nprocs != gomaxprocs:
        raise Unsettled(f"len(allp) {nprocs} is not GOMAXPROCS {gomaxprocs}", "")
    # Second read: each P's id, free g's and statistics sequence, and the heap
    # statistics' generation again.
    ps = gm.memory.read_many([(allp, 8 * nprocs)])[0]
    if ps is None:
        raise Unsettled("allp is not mapped", "")
    p_addrs = struct.unpack(f"<{nprocs}Q", ps)
    free_at = o.get("p.gFree.n") if o.get("p.gFree.n") is not None else o.get("p.gFree.size")
    seq_at = _off(o, "p.statsSeq")
    gen_at = _off(o, "mstats.heapStats") + _off(o, "consistentHeapStats.gen")
    per_p: list[tuple[int, int]] = []
    k = 4 if stopped else 3
    for p in p_addrs:
        per_p += [(p, 4), (p + _off_or(free_at), 4), (p + seq_at, 4)]
        if stopped:
            per_p.append((p + _off(o, "p.mcache"), 8))
    again = gm.memory.read_many([*per_p, (g["memstats"] + gen_at + b, 4)])
    if any(x is None for x in again):
        raise Unsettled("a P is not mapped", "")
    free_p = 0
    for i in range(nprocs):
        pid, free, seq = (_u(again[k * i + j] or b"", 0, 4, signed=True) for j in range(3))
        if pid != i:
            raise Unsettled(f"allp[{i}] has id {pid}", "")
        if seq % 2:
            raise Unsettled(f"P {i} is updating the heap statistics", "")
        free_p += free
    heap = _heap(ms, o)
    if _u(again[-1] or b"", 0, 4) != heap.pop("gen"):
        raise Unsettled("the heap statistics' generation moved", "")
    metrics = _metrics(ms, gc, span, cache, heap, o, rv.version)
    held = None
    if stopped:
        mcaches = [_u(again[k * i + 3] or b"", 0) for i in range(nprocs)]
        flushed = _flushed(gm, o, [c for c in mcaches if c], dict(heap))
        # a refill meanwhile (it moves a span's counts into the heap statistics, under
        # its P's statistics sequence) would be counted twice or not at all: read again
        seqs = gm.memory.read_many([(p + seq_at, 4) for p in p_addrs])
        if any(now is None or now != again[k * i + 2] for i, now in enumerate(seqs)):
            raise Unsettled("a P refilled its mcache while noop read them", "")
        held = Stopped(
            memstats_of(_metrics(ms, gc, span, cache, flushed, o, rv.version)),
            struct.unpack_from("<d", ms, _off(o, "mstats.gc_cpu_fraction"))[0],
            _u(ms, _off(o, "mstats.numforcedgc"), 4),
            _cgo_calls(gm, rv) if "ncgocall" in g else None,
            _u(gm.memory.read_many([(g["ncpu"] + b, 4)])[0] or b"", 0, 4, signed=True)
            if "ncpu" in g else None)
    allglen = _u(allglen_b, 0)
    free_s = sum(_u(sc, o.get(k), 4, signed=True) for k in (
        "schedt.gFree.n", "schedt.gFree.stack.size", "schedt.gFree.noStack.size"))
    goroutines = allglen - free_s - _u(sc, _off(o, "schedt.ngsys"), 4, signed=True) - free_p
    threads = _u(sc, _off(o, "schedt.mnext"), signed=True) - \
        _u(sc, _off(o, "schedt.nmfreed"), signed=True)
    numgc = _u(ms, _off(o, "mstats.numgc"), 4)
    n = min(numgc, 256)
    ring = _off(o, "mstats.pause_ns")
    pauses = tuple(_u(ms, ring + 8 * ((numgc - 1 - i) % 256)) for i in range(n))
    metrics["/sched/gomaxprocs:threads"] = gomaxprocs
    return Snapshot(
        go_version=rv.go_version, goroutines=max(goroutines, 1), threads=threads,
        metrics=metrics, pauses=pauses,
        pause_total_ns=_u(ms, _off(o, "mstats.pause_total_ns")), numgc=numgc,
        last_gc_unix_ns=_u(ms, _off(o, "mstats.last_gc_unix")), stopped=held)


def _flushed(gm: GoMemory, o: dict[str, int | None], mcaches: list[int],
             heap: dict[str, int]) -> dict[str, int]:
    """``heap`` as it is after ReadMemStats' flush of ``mcaches`` (mcache.releaseAll):
    each span's objects allocated since the mcache took it (allocCount -
    allocCountBeforeCache) counted in its size class, the tiny allocations counted.
    An mcache holds the empty span (no objects, none counted) for a class it has none
    of."""
    tiny_at, alloc_at = _off(o, "mcache.tinyAllocs"), _off(o, "mcache.alloc")
    got = gm.memory.read_many([r for c in mcaches for r in
                               ((c + tiny_at, 8), (c + alloc_at, 8 * _SPAN_CLASSES))])
    if any(x is None for x in got):
        raise Unsettled("an mcache is not mapped", "")
    spans: list[tuple[int, int]] = []  # (span, size class)
    for i in range(len(mcaches)):
        heap["tinyAllocCount"] += _u(got[2 * i] or b"", 0)
        table = struct.unpack(f"<{_SPAN_CLASSES}Q", got[2 * i + 1] or b"")
        spans += [(s, c >> 1) for c, s in enumerate(table) if s]
    at, before = _off(o, "mspan.allocCount"), _off(o, "mspan.allocCountBeforeCache")
    counts = gm.memory.read_many([(s + at, before + 2 - at) for s, _c in spans])
    for (_s, c), raw in zip(spans, counts, strict=True):
        if raw is None:
            raise Unsettled("a span an mcache holds is not mapped", "")
        used = _u(raw, 0, 2) - _u(raw, before - at, 2)
        if used < 0:  # the span was given to another mcache between the reads
            raise Unsettled("a span an mcache holds changed while noop read it", "")
        heap["smallAllocCount"] += used
        heap["smallAllocCountBytes"] += used * CLASS_TO_SIZE[c]
    return heap


def _cgo_calls(gm: GoMemory, rv: RuntimeVars) -> int:
    """runtime.NumCgoCall(): the exited Ms' count and every M's own, along allm."""
    o, g, b = rv.offsets, rv.globals, gm.bias
    total = gm.word(g["ncgocall"] + b)
    calls_at, link_at = _off(o, "m.ncgocall"), _off(o, "m.alllink")
    m = gm.word(g["allm"] + b)
    for _ in range(MAX_M):
        if not m:
            return total & _MASK
        raw = gm.memory.read_many([(m + calls_at, 8), (m + link_at, 8)])
        if raw[0] is None or raw[1] is None:
            raise Unsettled("an M on allm is not mapped", "")
        total += _u(raw[0], 0)
        m = _u(raw[1], 0)
    raise Unsettled(f"allm holds more than {MAX_M} Ms", "")


def _off(o: dict[str, int | None], name: str) -> int:
    v = o.get(name)
    if v is None:
        raise KeyError(name)
    return v


def _off_or(v: int | None) -> int:
    return v if v is not None else 0


_DELTA_SIGNED = ("committed", "released", "inHeap", "inStacks", "inWorkBufs",
                 "inPtrScalarBits")
_DELTA_PLAIN = ("tinyAllocCount", "largeAlloc", "largeAllocCount", "largeFree",
                "largeFreeCount")


def _heap(ms: bytes, o: dict[str, int | None]) -> dict[str, int]:
    """consistentHeapStats.read's result: the three generations summed, accepted only
    between the runtime's own reads (the generation after the current one zero: it
    merged it and cleared it)."""
    base = _off(o, "mstats.heapStats") + _off(o, "consistentHeapStats.stats")
    size = _off(o, "heapStatsDelta")
    gen = _u(ms, _off(o, "mstats.heapStats") + _off(o, "consistentHeapStats.gen"), 4)
    if gen > 2:
        raise Unsettled(f"the heap statistics' generation is {gen}", "")
    cleared = base + size * ((gen + 1) % 3)
    if any(ms[cleared:cleared + size]):
        raise Unsettled("the runtime is reading its heap statistics", "")
    out: dict[str, int] = {"gen": gen}
    for name in (*_DELTA_SIGNED, *_DELTA_PLAIN):
        at = o.get(f"heapStatsDelta.{name}")
        out[name] = sum(_u(ms, None if at is None else base + size * k + at,
                           signed=name in _DELTA_SIGNED) for k in range(3))
    for name in ("smallAllocCount", "smallFreeCount"):
        at = _off(o, f"heapStatsDelta.{name}")
        out[name + "Bytes"] = out[name] = 0
        for c in range(_NUM_CLASSES):
            count = sum(_u(ms, base + size * k + at + 8 * c) for k in range(3))
            out[name] += count
            out[name + "Bytes"] += count * CLASS_TO_SIZE[c]
    return out


def _metrics(ms: bytes, gc: bytes, span: bytes, cache: bytes, h: dict[str, int],
             o: dict[str, int | None], version: tuple[int, int]) -> dict[str, int]:
    """The runtime/metrics values client_golang's Go collector reads, each as the
    runtime computes it (heapStatsAggregate, sysStatsAggregate and the metric's own
    compute function), wrapped to 64 bits as its uint64 conversions do."""
    def sys(name: str) -> int:
        return _u(ms, _off(o, f"mstats.{name}"))

    allocs = h["largeAllocCount"] + h["smallAllocCount"]
    frees = h["largeFreeCount"] + h["smallFreeCount"]
    allocated = h["largeAlloc"] + h["smallAllocCountBytes"]
    freed = h["largeFree"] + h["smallFreeCountBytes"]
    in_objects = allocated - freed
    stacks_sys, mspan_sys, mcache_sys = sys("stacks_sys"), sys("mspan_sys"), sys("mcache_sys")
    buckhash, gc_misc, other = sys("buckhash_sys"), sys("gcMiscSys"), sys("other_sys")
    span_inuse, cache_inuse = _u(span, 0), _u(cache, 0)
    values = {
        "/gc/heap/allocs:bytes": allocated, "/gc/heap/allocs:objects": allocs,
        "/gc/heap/frees:bytes": freed, "/gc/heap/frees:objects": frees,
        "/gc/heap/tiny/allocs:objects": h["tinyAllocCount"],
        "/gc/heap/objects:objects": allocs - frees,
        "/gc/heap/goal:bytes": _heap_goal(gc, o, version),
        "/memory/classes/heap/objects:bytes": in_objects,
        "/memory/classes/heap/unused:bytes": h["inHeap"] - in_objects,
        "/memory/classes/heap/free:bytes": h["committed"] - h["inHeap"] - h["inStacks"]
        - h["inWorkBufs"] - h["inPtrScalarBits"],
        "/memory/classes/heap/released:bytes": h["released"],
        "/memory/classes/heap/stacks:bytes": h["inStacks"],
        "/memory/classes/os-stacks:bytes": stacks_sys,
        "/memory/classes/metadata/mspan/inuse:bytes": span_inuse,
        "/memory/classes/metadata/mspan/free:bytes": mspan_sys - span_inuse,
        "/memory/classes/metadata/mcache/inuse:bytes": cache_inuse,
        "/memory/classes/metadata/mcache/free:bytes": mcache_sys - cache_inuse,
        "/memory/classes/metadata/other:bytes": h["inWorkBufs"] + h["inPtrScalarBits"]
        + gc_misc,
        "/memory/classes/profiling/buckets:bytes": buckhash,
        "/memory/classes/other:bytes": other,
        "/memory/classes/total:bytes": h["committed"] + h["released"] + stacks_sys
        + mspan_sys + mcache_sys + buckhash + gc_misc + other,
        "/gc/gogc:percent": _u(gc, _off(o, "gcControllerState.gcPercent"), 4, signed=True),
        "/gc/gomemlimit:bytes": _u(gc, _off(o, "gcControllerState.memoryLimit"),
                                   signed=True),
    }
    if version < (1, 21):  # runtime/metrics has had GOGC and the memory limit since
        del values["/gc/gogc:percent"], values["/gc/gomemlimit:bytes"]
    return {k: v & _MASK for k, v in values.items()}


def _heap_goal(gc: bytes, o: dict[str, int | None], version: tuple[int, int]) -> int:
    """gcController.heapGoal(): the GOGC goal, or the memory limit's when lower, else
    raised to the sweep distance's trigger and the runway past the last trigger."""
    def f(name: str, size: int = 8, signed: bool = False) -> int:
        return _u(gc, _off(o, f"gcControllerState.{name}"), size, signed)

    goal = f("gcPercentHeapGoal")
    heap_free, mapped = f("heapFree"), f("mappedReady")
    heap_alloc = (f("totalAlloc") - f("totalFree")) & _MASK
    if heap_free + heap_alloc > mapped:
        raise Unsettled("the pacer counts more memory than it has mapped", "")
    limit_goal = _limit_goal(f("memoryLimit", signed=True) & _MASK, heap_free, heap_alloc,
                             mapped, f("heapMarked"), version >= (1, 21))
    if limit_goal < goal:
        return limit_goal
    trigger = f("sweepDistMinTrigger")
    goal = max(goal, trigger)
    triggered = f("triggered")
    if triggered != _MASK and goal < triggered + _MIN_RUNWAY:
        goal = triggered + _MIN_RUNWAY
    return goal


def _limit_goal(limit: int, heap_free: int, heap_alloc: int, mapped: int, marked: int,
                proportional: bool) -> int:
    """gcController.memoryLimitHeapGoal()."""
    non_heap = mapped - heap_free - heap_alloc
    overage = mapped - limit if mapped > limit else 0
    if non_heap + overage >= limit:
        return marked
    goal = limit - (non_heap + overage)
    # 1.19: a fixed headroom; from 1.21 a percentage of the goal, at least as much
    headroom = max(goal // 100 * _HEADROOM_PERCENT, _MIN_HEADROOM) if proportional \
        else _MIN_HEADROOM
    goal = headroom if goal < headroom or goal - headroom < headroom else goal - headroom
    return max(goal, marked)
