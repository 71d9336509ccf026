"""The go_* and process_* series VictoriaMetrics/metrics writes for a program
(``WritePrometheus(w, true)``, ``WriteProcessMetrics``, ``WriteFDMetrics``), under its
names, untyped and without HELP as it writes them, each computed as it computes it:

- go_memstats_*: ``runtime.ReadMemStats`` (every mcache flushed first: see
  ``live.goruntime``), go_cgo_calls_count (``runtime.NumCgoCall``), go_cpu_count
  (``runtime.NumCPU``), go_gc_forced_count, go_gomaxprocs, go_goroutines, go_threads;
- go_gc_duration_seconds: the quantiles 0, 0.25, 0.5, 0.75, 1 of a histogram.Fast fed
  every one of MemStats' 256 pause slots (the empty ones as zeros), ``_sum`` and
  ``_count`` from PauseTotalNs and NumGC;
- go_info{version}, go_info_ext{compiler, GOARCH, GOOS, GOROOT}: GOROOT as
  ``runtime.GOROOT()`` returns it, the process's GOROOT variable or the one the linker
  wrote (which the binary's own file names hold: empty for a -trimpath build);
- process_*: /proc/PID/stat (CPU in ticks of 1/100 s, resident pages of 4096 bytes, as
  the library takes them), /proc/PID/status (peaks and resident kinds), /proc/PID/io;
  process_start_time_seconds from the library's own ``startTimeSeconds`` (the second its
  package was initialised) where noop finds it, else the process's start from /proc;
  process_max_fds and process_open_fds only for a program that calls WriteFDMetrics.

Labelled with ``target`` and ``pid`` as the mirror's series are. Series noop cannot read
(a file /proc does not let it, a runtime outside its table) are left out.
"""

from __future__ import annotations

import contextlib
import math
import os
from dataclasses import dataclass
from pathlib import Path

from agent.live import goruntime, procstat
from agent.live.memory import Unreadable
from agent.output.goseries import Runtimes
from agent.output.page import Block, label_value, number, with_noops
from agent.presets.vmetrics.values import fast_quantile

# (name, MemStats field), in the order the library writes them
MEMSTATS = (
    ("go_memstats_alloc_bytes", "Alloc"), ("go_memstats_alloc_bytes_total", "TotalAlloc"),
    ("go_memstats_buck_hash_sys_bytes", "BuckHashSys"),
    ("go_memstats_frees_total", "Frees"), ("go_memstats_gc_cpu_fraction", ""),
    ("go_memstats_gc_sys_bytes", "GCSys"), ("go_memstats_heap_alloc_bytes", "HeapAlloc"),
    ("go_memstats_heap_idle_bytes", "HeapIdle"), ("go_memstats_heap_inuse_bytes", "HeapInuse"),
    ("go_memstats_heap_objects", "HeapObjects"),
    ("go_memstats_heap_released_bytes", "HeapReleased"),
    ("go_memstats_heap_sys_bytes", "HeapSys"), ("go_memstats_last_gc_time_seconds", ""),
    ("go_memstats_lookups_total", "Lookups"), ("go_memstats_mallocs_total", "Mallocs"),
    ("go_memstats_mcache_inuse_bytes", "MCacheInuse"),
    ("go_memstats_mcache_sys_bytes", "MCacheSys"),
    ("go_memstats_mspan_inuse_bytes", "MSpanInuse"),
    ("go_memstats_mspan_sys_bytes", "MSpanSys"), ("go_memstats_next_gc_bytes", "NextGC"),
    ("go_memstats_other_sys_bytes", "OtherSys"),
    ("go_memstats_stack_inuse_bytes", "StackInuse"),
    ("go_memstats_stack_sys_bytes", "StackSys"), ("go_memstats_sys_bytes", "Sys"),
)
PHIS = (0.0, 0.25, 0.5, 0.75, 1.0)
PAUSE_SLOTS = 256  # MemStats.PauseNs
PAGE = 4096  # the library's page size for resident memory, whatever the host's
# /proc/PID/status lines (kB, times 1024)
STATUS = (("process_virtual_memory_peak_bytes", "VmPeak:"),
          ("process_resident_memory_peak_bytes", "VmHWM:"),
          ("process_resident_memory_anon_bytes", "RssAnon:"),
          ("process_resident_memory_file_bytes", "RssFile:"),
          ("process_resident_memory_shared_bytes", "RssShmem:"))
IO = (("process_io_read_bytes_total", "rchar"), ("process_io_written_bytes_total", "wchar"),
      ("process_io_read_syscalls_total", "syscr"),
      ("process_io_write_syscalls_total", "syscw"),
      ("process_io_storage_read_bytes_total", "read_bytes"),
      ("process_io_storage_written_bytes_total", "write_bytes"))
_PROC = Path("/proc")


@dataclass
class Target:
    """A VictoriaMetrics/metrics program's processes now, labelled ``name``, running the
    binary at ``path``; ``start_time``: the link-time address of the library's
    ``startTimeSeconds`` (None: not found); ``fds``: whether the program calls
    WriteFDMetrics; ``goroot``: the GOROOT its linker wrote; ``goarch``: its GOARCH."""

    name: str
    path: str
    pids: list[int]
    start_time: int | None
    fds: bool
    goroot: str
    goarch: str


def blocks(targets: list[Target], runtimes: Runtimes) -> list[Block]:
    """The library's go_* and process_* families of ``targets``' processes, read now
    (``goseries.blocks`` lets go of the memory of processes gone: it is given these)."""
    families: dict[str, tuple[list[str], list[bytes]]] = {}
    btime = procstat.boot_time()
    for t in targets:
        for pid in t.pids:
            samples: list[tuple[str, tuple[tuple[str, str], ...], float]] = []
            snap = runtimes.snapshot(t.path, pid, stopped=True)
            if snap is not None and snap.stopped is not None:
                samples += _go(snap, snap.stopped, _goroot(pid, t.goroot), t.goarch)
            start = _start_time(runtimes, t, pid)
            samples += _process(pid, btime, start, t.fds)
            for name, labels, value in samples:
                text = ",".join(f'{k}="{label_value(v)}"'
                                for k, v in with_noops(labels, t.name, pid))
                f = families.setdefault(name, ([], []))
                key = f"{name}{{{text}}}"
                f[0].append(f"{key} {number(value)}\n")
                f[1].append(key.encode())
    return [Block(name.encode(), b"", b"untyped", "".join(lines).encode(), keys)
            for name, (lines, keys) in sorted(families.items())]


Samples = list[tuple[str, tuple[tuple[str, str], ...], float]]  # name, labels, value


def _go(snap: goruntime.Snapshot, st: goruntime.Stopped, goroot: str,
        goarch: str) -> Samples:
    ms = st.memstats
    out: Samples = []
    for name, field in MEMSTATS:
        if name == "go_memstats_gc_cpu_fraction":
            value = st.gc_cpu_fraction
        elif name == "go_memstats_last_gc_time_seconds":
            value = float(snap.last_gc_unix_ns) / 1e9
        else:
            value = float(ms[field])
        out.append((name, (), value))
    out += [(name, (), float(v)) for name, v in (("go_cgo_calls_count", st.cgo_calls),
                                                 ("go_cpu_count", st.ncpu)) if v is not None]
    ring = sorted([p / 1e9 for p in snap.pauses] + [0.0] * (PAUSE_SLOTS - len(snap.pauses)))
    for phi in PHIS:
        q = fast_quantile(ring, phi, ring[0], ring[-1])
        if q is not None and not math.isnan(q):
            out.append(("go_gc_duration_seconds", (("quantile", number(phi)),), q))
    out += [("go_gc_duration_seconds_sum", (), float(snap.pause_total_ns) / 1e9),
            ("go_gc_duration_seconds_count", (), float(snap.numgc)),
            ("go_gc_forced_count", (), float(st.numforcedgc)),
            ("go_gomaxprocs", (), float(snap.metrics.get("/sched/gomaxprocs:threads", 0))),
            ("go_goroutines", (), float(snap.goroutines)),
            ("go_threads", (), float(snap.threads)),
            ("go_info", (("version", snap.go_version),), 1.0),
            ("go_info_ext", (("GOARCH", goarch), ("GOOS", "linux"), ("GOROOT", goroot),
                             ("compiler", "gc")), 1.0)]
    return out


def _goroot(pid: int, linked: str) -> str:
    """runtime.GOROOT() of process ``pid``: its GOROOT variable as it started (the
    runtime reads its environment as it was then), else what its linker wrote."""
    try:
        env = (_PROC / str(pid) / "environ").read_bytes()
    except OSError:
        return linked
    for var in env.split(b"\0"):
        if var.startswith(b"GOROOT=") and len(var) > 7:
            return var[7:].decode(errors="replace")
    return linked


def _start_time(runtimes: Runtimes, t: Target, pid: int) -> int | None:
    """The library's startTimeSeconds in process ``pid``: None when it is not found (or
    cannot be read), the process's start from /proc then."""
    if t.start_time is None:
        return None
    with contextlib.suppress(Unreadable, OSError):
        gm = runtimes.memory(t.path, pid)
        if gm is not None:
            value = gm.word(t.start_time + gm.bias)
            return value - (1 << 64) if value >> 63 else value
    return None


def _process(pid: int, btime: float | None, start: int | None, fds: bool) -> Samples:
    base = _PROC / str(pid)
    out: Samples = []
    try:
        f = procstat.stat_fields(pid)
        minflt, majflt, utime, stime = int(f[7]), int(f[9]), int(f[11]), int(f[12])
        threads, started, vsize, rss = int(f[17]), int(f[19]), int(f[20]), int(f[21])
    except (OSError, ValueError, IndexError):
        return out  # the process is gone: nothing of it
    user, system = utime / procstat.USER_HZ, stime / procstat.USER_HZ
    if start is None and btime is not None:
        start = int(btime + started / procstat.USER_HZ)
    out += [("process_cpu_seconds_system_total", (), system),
            ("process_cpu_seconds_total", (), user + system),
            ("process_cpu_seconds_user_total", (), user),
            ("process_major_pagefaults_total", (), float(majflt)),
            ("process_minor_pagefaults_total", (), float(minflt)),
            ("process_num_threads", (), float(threads)),
            ("process_resident_memory_bytes", (), float(rss * PAGE)),
            *((("process_start_time_seconds", (), float(start)),) if start is not None
              else ()),
            ("process_virtual_memory_bytes", (), float(vsize))]
    with contextlib.suppress(OSError, ValueError, IndexError):
        status = {}
        for line in (base / "status").read_text().splitlines():
            cols = line.split()
            if len(cols) == 3 and cols[2] == "kB":
                status[cols[0]] = int(cols[1]) * 1024
        out += [(name, (), float(status.get(key, 0))) for name, key in STATUS]
    with contextlib.suppress(OSError, ValueError, IndexError):
        io = {}
        for line in (base / "io").read_text().splitlines():
            key, _, value = line.partition(": ")
            io[key.strip()] = int(value)
        out += [(name, (), float(io.get(key, 0))) for name, key in IO]
    if fds:
        with contextlib.suppress(OSError, ValueError):
            limit = procstat.open_files_limit(pid)
            out += [("process_max_fds", (), float(limit)),
                    ("process_open_fds", (), float(len(os.listdir(base / "fd"))))]
    return out


def target_of(library: object, name: str, path: str, pids: list[int]) -> Target | None:
    """The processes of a mirrored program whose library (the mirror's) is
    VictoriaMetrics/metrics, which writes its own go_* and process_* set; None for
    another library's (client_golang's collectors name theirs)."""
    from agent.presets.vmetrics.library import VMLibrary

    if not isinstance(library, VMLibrary):
        return None
    lay = library.layout
    return Target(name, path, pids, lay.start_time, lay.fds, lay.goroot, lay.goarch)
