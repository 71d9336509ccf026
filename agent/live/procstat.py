"""A process's process_* series from /proc, as client_golang's process collector
(prometheus/procfs underneath) computes them for the process it runs in:

- ``process_cpu_seconds_total``: (utime + stime) / 100 (procfs takes USER_HZ as 100);
- ``process_virtual_memory_bytes``: ``vsize``; ``process_resident_memory_bytes``:
  ``rss`` times the page size;
- ``process_start_time_seconds``: the boot time of /proc/stat + ``starttime`` / 100;
- ``process_open_fds``: the entries of /proc/PID/fd;
- ``process_max_fds``, ``process_virtual_memory_max_bytes``: the soft limits of
  /proc/PID/limits ("unlimited": 2^64 - 1);
- ``process_network_receive_bytes_total``, ``…_transmit_…`` (client_golang ≥ 1.20's):
  the bytes of every interface in /proc/PID/net/dev.

Read from outside, two differences are inherent: the program's own collector counts
the descriptor of /proc/self/fd it holds open while it counts, and the connection of
the scrape it answers (one or two more than noop's), and both read CPU time in ticks
of 10 ms. Each file is read alone: one that cannot be
read leaves out its series, as the collector does.
"""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path

USER_HZ = 100  # procfs' constant
UNLIMITED = (1 << 64) - 1
PAGE = os.sysconf("SC_PAGE_SIZE")
_PROC = Path("/proc")


# (name without the prefix, help, type) in the order the collector describes them
SERIES = (
    ("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.",
     "counter"),
    ("process_open_fds", "Number of open file descriptors.", "gauge"),
    ("process_max_fds", "Maximum number of open file descriptors.", "gauge"),
    ("process_virtual_memory_bytes", "Virtual memory size in bytes.", "gauge"),
    ("process_virtual_memory_max_bytes",
     "Maximum amount of virtual memory available in bytes.", "gauge"),
    ("process_resident_memory_bytes", "Resident memory size in bytes.", "gauge"),
    ("process_start_time_seconds", "Start time of the process since unix epoch in seconds.",
     "gauge"),
)
NETWORK = (
    ("process_network_receive_bytes_total",
     "Number of bytes received by the process over the network.", "counter"),
    ("process_network_transmit_bytes_total",
     "Number of bytes sent by the process over the network.", "counter"),
)


def boot_time() -> float | None:
    try:
        for line in (_PROC / "stat").read_text().splitlines():
            if line.startswith("btime "):
                return float(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def values(pid: int, network: bool = False, btime: float | None = None
           ) -> dict[str, float]:
    """The series of process ``pid`` (by name without a prefix) that could be read:
    none of a process that is gone."""
    base = _PROC / str(pid)
    out: dict[str, float] = {}
    try:
        fields = stat_fields(pid)
        utime, stime = int(fields[11]), int(fields[12])
        start, vsize, rss = int(fields[19]), int(fields[20]), int(fields[21])
    except (OSError, ValueError, IndexError):
        pass
    else:
        out["process_cpu_seconds_total"] = (utime + stime) / USER_HZ
        out["process_virtual_memory_bytes"] = float(vsize)
        out["process_resident_memory_bytes"] = float(rss * PAGE)
        boot = btime if btime is not None else boot_time()
        if boot is not None:
            out["process_start_time_seconds"] = boot + start / USER_HZ
    with contextlib.suppress(OSError):
        out["process_open_fds"] = float(len(os.listdir(base / "fd")))
    try:
        limits = _limits((base / "limits").read_text())
    except (OSError, ValueError):
        pass
    else:
        if "Max open files" in limits and "Max address space" in limits:
            out["process_max_fds"] = float(limits["Max open files"])
            out["process_virtual_memory_max_bytes"] = float(limits["Max address space"])
    if network:
        try:
            rx, tx = _net_dev((base / "net" / "dev").read_text())
        except (OSError, ValueError, IndexError):
            pass
        else:
            out["process_network_receive_bytes_total"] = float(rx)
            out["process_network_transmit_bytes_total"] = float(tx)
    return out


def stat_fields(pid: int) -> list[bytes]:
    """The fields of /proc/PID/stat after the command (which may hold spaces and
    parentheses): the state first; OSError or ValueError when it cannot be read."""
    stat = (_PROC / str(pid) / "stat").read_bytes()
    return stat[stat.rindex(b")") + 2:].split()


def open_files_limit(pid: int) -> int:
    """Process ``pid``'s soft limit of open files ("unlimited": 2^64 - 1); OSError or
    ValueError when it cannot be read."""
    limits = _limits((_PROC / str(pid) / "limits").read_text())
    if "Max open files" not in limits:
        raise ValueError("no limit of open files")
    return limits["Max open files"]


def _limits(text: str) -> dict[str, int]:
    """Each limit's soft value, by its name ("unlimited": 2^64 - 1)."""
    out: dict[str, int] = {}
    for line in text.splitlines()[1:]:
        cols = re.split(r"\s{2,}", line.strip())  # name, soft, hard[, units]
        if len(cols) >= 3:
            out[cols[0]] = UNLIMITED if cols[1] == "unlimited" else int(cols[1])
    return out


def _net_dev(text: str) -> tuple[int, int]:
    """The bytes received and sent over every interface."""
    rx = tx = 0
    for line in text.splitlines()[2:]:
        _name, _, rest = line.partition(":")
        cols = rest.split()
        rx += int(cols[0])
        tx += int(cols[8])
    return rx, tx
