"""process_* from /proc (agent/live/procstat) against client_golang's process collector
in the program itself: a quiet stripped Go program's own page is scraped, noop reads,
the page is scraped again; where the two scrapes agree noop's value is theirs, a
counter lies between them, and open descriptors are the program's less those its
collector sees that noop does not: the /proc/self/fd it holds open while it counts, and
the connection of the scrape it answers unless the last one's was still open when noop
read. And the files' odd cases: a command with
spaces and parentheses, limits "unlimited", a process gone."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
from harness.metrics import get, samples
from harness.programs import members_serving

from agent.live import procstat

GAUGES = ("process_max_fds", "process_virtual_memory_bytes",
          "process_virtual_memory_max_bytes", "process_resident_memory_bytes",
          "process_start_time_seconds")


def _own(url: str) -> dict[str, float]:
    return {name: v for (name, _labels), v in samples(get(url)).items()
            if name.startswith("process_")}


@pytest.mark.builds
def test_process_series_are_the_collectors_own(tmp_path: Path) -> None:
    running = members_serving(tmp_path / "members", "-steps", "3", "-pace", "0")
    with running as (_binary, proc, url):
        quiet = 0
        for _ in range(200):
            before = _own(url)
            noop = procstat.values(proc.pid)
            after = _own(url)
            assert set(noop) == set(before) == set(after), (noop, before)
            c = "process_cpu_seconds_total"
            assert before[c] <= noop[c] <= after[c]
            # the program's collector: its /proc/self/fd, and this scrape's connection
            # (which noop saw too when the last scrape's was not closed yet)
            fds = before["process_open_fds"] - noop["process_open_fds"]
            assert fds in (1, 2) or before["process_open_fds"] != after["process_open_fds"]
            if all(before[k] == after[k] for k in GAUGES):
                assert all(noop[k] == before[k] for k in GAUGES), (noop, before)
                quiet += 1
                if quiet == 20:
                    break
        assert quiet == 20
    assert procstat.values(proc.pid) == {}  # gone: nothing


def test_odd_commands_limits_and_devices_are_read_as_procfs_reads_them(
        tmp_path: Path) -> None:
    odd = tmp_path / "a b) (c"
    odd.symlink_to("/bin/sleep")
    proc = subprocess.Popen([str(odd), "30"])
    try:
        time.sleep(0.2)
        got = procstat.values(proc.pid, network=True)
        stat = Path(f"/proc/{proc.pid}/stat").read_text()
        assert ") (c)" in stat  # the command's parenthesis is not the end of it
        fields = stat[stat.rindex(")") + 2:].split()
        assert got["process_virtual_memory_bytes"] == int(fields[20])
        assert got["process_resident_memory_bytes"] == int(fields[21]) * os.sysconf(
            "SC_PAGE_SIZE")
        assert got["process_open_fds"] == len(os.listdir(f"/proc/{proc.pid}/fd"))
        assert "process_network_receive_bytes_total" in got
    finally:
        proc.kill()
        proc.wait()
    limits = ("Limit                     Soft Limit           Hard Limit           Units\n"
              "Max open files            1024                 524288               files\n"
              "Max address space         unlimited            unlimited            bytes\n")
    assert procstat._limits(limits) == {"Max open files": 1024,
                                        "Max address space": (1 << 64) - 1}
    dev = ("Inter-|   Receive                                                |  Transmit\n"
           " face |bytes    packets errs drop fifo frame compressed multicast|bytes    "
           "packets errs drop fifo colls carrier compressed\n"
           "    lo:     100       1    0    0    0     0          0         0      200"
           "       2    0    0    0     0       0          0\n"
           "  eth0:      10       1    0    0    0     0          0         0       20"
           "       2    0    0    0     0       0          0\n")
    assert procstat._net_dev(dev) == (110, 220)
