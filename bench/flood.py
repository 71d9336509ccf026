"""Scrape latency of ``noop run`` while 1,000 clients hold its port, beside the same
scrape with no flood, in one run.

Usage: python bench/flood.py [--scrapes N] [--clients N]   # needs root
Builds examples/go-prometheus with Debian's Go, runs it, runs ``noop run --binary`` on
it with a descriptor limit of 1,024 (fewer than the clients), and times N scrapes of
/metrics (and of /healthz) with no flood, with idle clients (they send nothing) and with
a slowloris (each sends its request line, then a header every half second): p50, p99
and the slowest, and the connections the clients had to open again (noop closed them).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]


def _timed(url: str) -> float:
    t = time.monotonic()
    with urllib.request.urlopen(url, timeout=10) as r:
        r.read()
    return time.monotonic() - t


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scrapes", type=int, default=200)
    ap.add_argument("--clients", type=int, default=1000)
    a = ap.parse_args()
    from harness.flood import Flood
    from harness.noop import start, stopped
    from harness.programs import EXAMPLE, go_build, go_toolchain

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        example = go_build(go_toolchain("1.19"), Path(tmp) / "go-prometheus", None, EXAMPLE)
        target = subprocess.Popen([str(example), "-listen", "127.0.0.1:0"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        agent = start("--binary", example, cache=Path(tmp) / "cache",
                      wrap=("prlimit", "--nofile=1024:1024", "--"))
        try:
            time.sleep(3)  # the mirror's first walk
            for mode in ("none", "idle", "trickle"):
                for path in ("/metrics", "/healthz"):
                    url = agent.url + path
                    if mode == "none":
                        times = [_timed(url) for _ in range(a.scrapes)]
                        reopened = 0
                    else:
                        with Flood(agent.url.split("//", 1)[1], a.clients, mode) as flood:
                            times = []
                            for _ in range(a.scrapes):
                                times.append(_timed(url))
                                time.sleep(0.01)
                            reopened = flood.opened - a.clients
                    times.sort()
                    rows.append((mode, path, statistics.median(times) * 1e3,
                                 times[int(len(times) * 0.99) - 1] * 1e3, times[-1] * 1e3,
                                 reopened))
        finally:
            target.kill()
            target.wait()
            stopped(agent)
    print(f"{'flood':<8} {'path':<9} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} "
          f"{'reopened':>9}")
    for mode, path, p50, p99, top, reopened in rows:
        print(f"{mode:<8} {path:<9} {p50:>8.1f} {p99:>8.1f} {top:>8.1f} {reopened:>9}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
