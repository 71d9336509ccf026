"""How many CPUs noop may use: its affinity mask, and its cgroup's CPU quota (a pod's
limit), so that work split across processes never outnumbers what the pod was given."""

from __future__ import annotations

import os
from pathlib import Path


def usable(most: int) -> int:
    """CPUs this process may use, at least 1 and at most ``most``."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except OSError:
        cpus = 1
    return max(1, min(cpus, quota(), most))


def quota() -> int:
    """CPUs this process's cgroup (v2) may use: its ``cpu.max`` quota over its period,
    rounded up; many when it sets none or cannot be read."""
    try:
        line = Path("/proc/self/cgroup").read_text().splitlines()[0]
        limit = (Path("/sys/fs/cgroup") / line.partition("::")[2].lstrip("/") / "cpu.max"
                 ).read_text().split()
        return max(1, -(-int(limit[0]) // int(limit[1])))
    except (OSError, IndexError, ValueError):
        return 1 << 10


def alone() -> bool:
    """Whether this process runs one thread (a library's own threads counted), so that
    a fork copies all of it: a child of a process with other threads gets none of them,
    and whatever locks they held stay held."""
    try:
        return len(os.listdir("/proc/self/task")) == 1
    except OSError:
        return False
