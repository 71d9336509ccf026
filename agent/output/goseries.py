"""Every Go target process's go_* series, read from its runtime's memory at each scrape
(``agent.live.goruntime``), under client_golang's Go collector's names: the names and
help of the Go collector the program registered (its Descs, a wrapping's prefix and
labels applied; only those of its series noop computes), or client_golang's default
set when it registered none. Labelled with ``target`` and ``pid`` as the mirror's
series are. A binary whose runtime noop cannot verify gives none, said once."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from agent import logs
from agent.errors import NoopError
from agent.live import goruntime
from agent.live.gomemory import GoMemory
from agent.live.memory import Unreadable
from agent.output.page import Block, help_text, label_value, number, with_noops

# What the program registered: per Go collector, the (name, help) of each series and a
# wrapping's labels; None: none registered (client_golang's default set)
Collectors = Callable[[int], Sequence[tuple[Sequence[tuple[str, str]],
                                            Sequence[tuple[str, str]]]] | None]
_MASK = (1 << 64) - 1


# client_golang's MemStats series: (name, the MemStats field it is)
MEMSTATS = (
    ("go_memstats_alloc_bytes", "Alloc"), ("go_memstats_alloc_bytes_total", "TotalAlloc"),
    ("go_memstats_sys_bytes", "Sys"), ("go_memstats_lookups_total", "Lookups"),
    ("go_memstats_mallocs_total", "Mallocs"), ("go_memstats_frees_total", "Frees"),
    ("go_memstats_heap_alloc_bytes", "HeapAlloc"), ("go_memstats_heap_sys_bytes", "HeapSys"),
    ("go_memstats_heap_idle_bytes", "HeapIdle"),
    ("go_memstats_heap_inuse_bytes", "HeapInuse"),
    ("go_memstats_heap_released_bytes", "HeapReleased"),
    ("go_memstats_heap_objects", "HeapObjects"),
    ("go_memstats_stack_inuse_bytes", "StackInuse"),
    ("go_memstats_stack_sys_bytes", "StackSys"),
    ("go_memstats_mspan_inuse_bytes", "MSpanInuse"),
    ("go_memstats_mspan_sys_bytes", "MSpanSys"),
    ("go_memstats_mcache_inuse_bytes", "MCacheInuse"),
    ("go_memstats_mcache_sys_bytes", "MCacheSys"),
    ("go_memstats_buck_hash_sys_bytes", "BuckHashSys"),
    ("go_memstats_gc_sys_bytes", "GCSys"), ("go_memstats_other_sys_bytes", "OtherSys"),
    ("go_memstats_next_gc_bytes", "NextGC"),
)
_FIELD = dict(MEMSTATS)
# client_golang's base Go collector's, and the runtime/metrics ones its default set has
# had since 1.20 (from a Go runtime that has them: GOGC and the limit since Go 1.21)
GOROUTINES, THREADS, GC, LAST_GC, INFO = ("go_goroutines", "go_threads",
                                          "go_gc_duration_seconds",
                                          "go_memstats_last_gc_time_seconds", "go_info")
GOMAXPROCS, GOGC, GOMEMLIMIT = ("go_sched_gomaxprocs_threads", "go_gc_gogc_percent",
                                "go_gc_gomemlimit_bytes")
_FROM_METRICS = {GOMAXPROCS: "/sched/gomaxprocs:threads", GOGC: "/gc/gogc:percent",
                 GOMEMLIMIT: "/gc/gomemlimit:bytes"}
# The series of a program that registered no Go collector: client_golang's default set
# (1.20 to 1.24, its names and help as its Describe sends them)
_EQ = "Equals to /memory/classes/"
DEFAULT = (
    (GOROUTINES, "Number of goroutines that currently exist."),
    (THREADS, "Number of OS threads created."),
    (GC, "A summary of the wall-time pause (stop-the-world) duration in garbage "
     "collection cycles."),
    (LAST_GC, "Number of seconds since 1970 of last garbage collection."),
    (INFO, "Information about the Go environment."),
    ("go_memstats_alloc_bytes", "Number of bytes allocated in heap and currently in use. "
     f"{_EQ}heap/objects:bytes."),
    ("go_memstats_alloc_bytes_total", "Total number of bytes allocated in heap until now, "
     "even if released already. Equals to /gc/heap/allocs:bytes."),
    ("go_memstats_sys_bytes", f"Number of bytes obtained from system. {_EQ}total:byte."),
    ("go_memstats_mallocs_total", "Total number of heap objects allocated, both live and "
     "gc-ed. Semantically a counter version for go_memstats_heap_objects gauge. Equals to "
     "/gc/heap/allocs:objects + /gc/heap/tiny/allocs:objects."),
    ("go_memstats_frees_total", "Total number of heap objects frees. Equals to "
     "/gc/heap/frees:objects + /gc/heap/tiny/allocs:objects."),
    ("go_memstats_heap_alloc_bytes", "Number of heap bytes allocated and currently in use, "
     f"same as go_memstats_alloc_bytes. {_EQ}heap/objects:bytes."),
    ("go_memstats_heap_sys_bytes", "Number of heap bytes obtained from system. "
     f"{_EQ}heap/objects:bytes + /memory/classes/heap/unused:bytes + "
     "/memory/classes/heap/released:bytes + /memory/classes/heap/free:bytes."),
    ("go_memstats_heap_idle_bytes", "Number of heap bytes waiting to be used. "
     f"{_EQ}heap/released:bytes + /memory/classes/heap/free:bytes."),
    ("go_memstats_heap_inuse_bytes", "Number of heap bytes that are in use. "
     f"{_EQ}heap/objects:bytes + /memory/classes/heap/unused:bytes"),
    ("go_memstats_heap_released_bytes", "Number of heap bytes released to OS. "
     f"{_EQ}heap/released:bytes."),
    ("go_memstats_heap_objects", "Number of currently allocated objects. Equals to "
     "/gc/heap/objects:objects."),
    ("go_memstats_stack_inuse_bytes", "Number of bytes obtained from system for stack "
     f"allocator in non-CGO environments. {_EQ}heap/stacks:bytes."),
    ("go_memstats_stack_sys_bytes", "Number of bytes obtained from system for stack "
     f"allocator. {_EQ}heap/stacks:bytes + /memory/classes/os-stacks:bytes."),
    ("go_memstats_mspan_inuse_bytes", "Number of bytes in use by mspan structures. "
     f"{_EQ}metadata/mspan/inuse:bytes."),
    ("go_memstats_mspan_sys_bytes", "Number of bytes used for mspan structures obtained "
     f"from system. {_EQ}metadata/mspan/inuse:bytes + "
     "/memory/classes/metadata/mspan/free:bytes."),
    ("go_memstats_mcache_inuse_bytes", "Number of bytes in use by mcache structures. "
     f"{_EQ}metadata/mcache/inuse:bytes."),
    ("go_memstats_mcache_sys_bytes", "Number of bytes used for mcache structures obtained "
     f"from system. {_EQ}metadata/mcache/inuse:bytes + "
     "/memory/classes/metadata/mcache/free:bytes."),
    ("go_memstats_buck_hash_sys_bytes", "Number of bytes used by the profiling bucket hash "
     f"table. {_EQ}profiling/buckets:bytes."),
    ("go_memstats_gc_sys_bytes", "Number of bytes used for garbage collection system "
     f"metadata. {_EQ}metadata/other:bytes."),
    ("go_memstats_other_sys_bytes", "Number of bytes used for other system allocations. "
     f"{_EQ}other:bytes."),
    ("go_memstats_next_gc_bytes", "Number of heap bytes when next garbage collection will "
     "take place. Equals to /gc/heap/goal:bytes."),
    (GOGC, "Heap size target percentage configured by the user, otherwise 100. This value "
     "is set by the GOGC environment variable, and the runtime/debug.SetGCPercent "
     "function. Sourced from /gc/gogc:percent."),
    (GOMEMLIMIT, "Go runtime memory limit configured by the user, otherwise math.MaxInt64. "
     "This value is set by the GOMEMLIMIT environment variable, and the "
     "runtime/debug.SetMemoryLimit function. Sourced from /gc/gomemlimit:bytes."),
    (GOMAXPROCS, "The current runtime.GOMAXPROCS setting, or the number of operating "
     "system threads that can execute user-level Go code simultaneously. Sourced from "
     "/sched/gomaxprocs:threads."),
)
_KNOWN = (GOROUTINES, THREADS, GC, LAST_GC, INFO, GOMAXPROCS, GOGC, GOMEMLIMIT, *_FIELD)
_QUANTILES = ("0", "0.25", "0.5", "0.75", "1")


def _base(name: str) -> str | None:
    """The series a name is of, without a wrapping's prefix; None: one noop does not
    compute."""
    best = None
    for base in _KNOWN:
        if name.endswith(base) and (best is None or len(base) > len(best)):
            best = base
    return best


def _seconds(ns: int) -> float:
    """time.Duration.Seconds() of a pause (never negative): whole seconds plus the
    nanoseconds apart, as Go sums them."""
    sec, rest = divmod(ns, 1_000_000_000)
    return float(sec) + float(rest) / 1e9


@dataclass
class Target:
    """A Go target's processes now, labelled ``name``, running the binary at ``path``;
    ``collectors``: what their programs registered, asked per process."""

    name: str
    path: str
    pids: list[int]
    collectors: Collectors | None = None


class Runtimes:
    """The runtime globals of each binary (located once; a binary noop cannot read
    said once) and each process's memory, for the go_* series of every scrape."""

    def __init__(self) -> None:
        self._binaries: dict[tuple[str, int, int], _Binary | None] = {}
        self.refused: dict[str, str] = {}  # why a binary's runtime is not read, by path
        self._memory: dict[int, tuple[tuple[str, int, int], GoMemory]] = {}
        self._said: set[tuple[int, str]] = set()
        self._lock = threading.Lock()  # scrapes may come at once

    def _binary(self, path: str) -> tuple[tuple[str, int, int], _Binary] | None:
        try:
            st = os.stat(path)
        except OSError as exc:
            logs.say(f"{path}: {exc.strerror}: its go_* series are not served", logs.WARNING)
            return None
        key = (path, st.st_ino, st.st_mtime_ns)
        if key not in self._binaries:
            for old in [k for k in self._binaries if k[0] == path]:
                del self._binaries[old]  # the file was replaced
            try:
                self._binaries[key] = _Binary(path)
            except (NoopError, OSError) as exc:
                self._binaries[key] = None
                why = self.refused[path] = exc.message if isinstance(exc, NoopError) \
                    else str(exc)
                logs.say(f"{path}: the program's go_* series are not served: {why}",
                         logs.WARNING)
        got = self._binaries[key]
        return (key, got) if got is not None else None

    def memory(self, path: str, pid: int) -> GoMemory | None:
        """Process ``pid``'s memory, open (None: its binary's runtime is not read)."""
        with self._lock:
            located = self._binary(path)
            return None if located is None else self._held(pid, *located)

    def _held(self, pid: int, key: tuple[str, int, int], binary: _Binary) -> GoMemory:
        """Process ``pid``'s memory, opened once for its binary (``key``)."""
        held = self._memory.get(pid)
        if held is None or held[0] != key:
            held = self._memory[pid] = (key, binary.open(pid))
        return held[1]

    def snapshot(self, path: str, pid: int, stopped: bool = False
                 ) -> goruntime.Snapshot | None:
        """Process ``pid``'s runtime numbers now (with ``stopped``, ReadMemStats' too);
        None (said once per process and reason) when they cannot be read."""
        with self._lock:
            located = self._binary(path)
            if located is None:
                return None
            key, binary = located
            try:
                return goruntime.read(self._held(pid, key, binary), binary.vars, stopped)
            except (Unreadable, OSError) as exc:
                self._memory.pop(pid, None)
                why = exc.message if isinstance(exc, NoopError) else str(exc.strerror)
                if (pid, type(exc).__name__) not in self._said:
                    self._said.add((pid, type(exc).__name__))
                    logs.say(f"process {pid}: its go_* series are not served this time: "
                             f"{why}", logs.WARNING)
                return None

    def forget(self, live: set[int]) -> None:
        """Forget the processes not in ``live``."""
        with self._lock:
            for pid in set(self._memory) - live:
                del self._memory[pid]
            self._said = {s for s in self._said if s[0] in live}


class _Binary:
    """A Go binary, open, with its runtime's globals located (NotVerified: not)."""

    def __init__(self, path: str) -> None:
        from agent.binary.elf import ElfFile
        from agent.binary.gometa import runtimevars
        from agent.binary.gometa.program import GoProgram

        self.path = path
        self.elf = ElfFile(path)
        try:
            program = GoProgram(self.elf)
            self.vars = runtimevars.locate(program)
            self.types = program.types
        except BaseException:
            self.elf.close()
            raise
        self.segments = tuple((s.vaddr, s.offset) for s in self.elf.segments)

    def open(self, pid: int) -> GoMemory:
        from agent.live.gomemory import open_process

        return open_process(pid, self.path, self.types, self.segments, self.elf.e_type == 3)


def blocks(targets: list[Target], runtimes: Runtimes, keep: frozenset[int] = frozenset()
           ) -> list[Block]:
    """The go_* families of ``targets``' processes, read now; the memory of processes
    neither theirs nor in ``keep`` (another writer's of the same ``runtimes``) let go."""
    families: dict[str, tuple[str, str, list[str], list[bytes]]] = {}
    live: set[int] = set()
    for t in targets:
        for pid in t.pids:
            live.add(pid)
            held = t.collectors(pid) if t.collectors is not None else None
            snap = runtimes.snapshot(t.path, pid)
            if snap is None:
                continue
            sets = [(_defaults(snap), ())] if held is None else held
            memstats = goruntime.memstats_of(snap.metrics)
            for series, labels in sets:
                mine = with_noops(labels, t.name, pid)
                for name, help_ in series:
                    base = _base(name)
                    if base is None or (base in _FROM_METRICS and
                                        _FROM_METRICS[base] not in snap.metrics):
                        continue  # not one noop computes (or not this runtime's)
                    _add(families, name, help_, base, snap, memstats, mine)
    runtimes.forget(live | keep)
    return [Block(name.encode(), help_text(help_).encode(), kind.encode(),
                  "".join(lines).encode(), keys)
            for name, (help_, kind, lines, keys) in sorted(families.items())]


def _defaults(snap: goruntime.Snapshot) -> tuple[tuple[str, str], ...]:
    """client_golang's default set for this runtime: GOGC and the memory limit only
    from a runtime whose runtime/metrics has them (Go 1.21)."""
    return tuple((n, h) for n, h in DEFAULT
                 if n not in _FROM_METRICS or _FROM_METRICS[n] in snap.metrics)


def _add(families: dict[str, tuple[str, str, list[str], list[bytes]]], name: str,
         help_: str, base: str, snap: goruntime.Snapshot, memstats: dict[str, int],
         labels: list[tuple[str, str]]) -> None:
    kind = "summary" if base == GC else "counter" if base.endswith("_total") else "gauge"
    f = families.setdefault(name, (help_, kind, [], []))
    if base == INFO:
        labels = sorted([*labels, ("version", snap.go_version)])
    text = ",".join(f'{k}="{label_value(v)}"' for k, v in labels)

    def line(key: str, value: float) -> None:
        f[2].append(f"{key} {number(value)}\n")
        f[3].append(key.encode())

    if base == GC:
        for q, v in zip(_QUANTILES, goruntime.pause_quantiles(snap.pauses), strict=True):
            line(f'{name}{{{text + "," if text else ""}quantile="{q}"}}', _seconds(v))
        line(f"{name}_sum{{{text}}}", _seconds(snap.pause_total_ns))
        line(f"{name}_count{{{text}}}", float(snap.numgc))
        return
    if base == GOROUTINES:
        value = float(snap.goroutines)
    elif base == THREADS:
        value = float(snap.threads)
    elif base == LAST_GC:
        value = float(snap.last_gc_unix_ns - (1 << 64 if snap.last_gc_unix_ns >> 63 else 0)) / 1e9
    elif base == INFO:
        value = 1.0
    elif base in _FROM_METRICS:
        value = float(snap.metrics.get(_FROM_METRICS[base], 0))
    else:
        value = float(memstats[_FIELD[base]])
    line(f"{name}{{{text}}}", value)
