"""noop's estimate of what its probes cost a target, against the target's own CPU time.

Usage: python bench/overhead.py [--rate CALLS_PER_S] [--seconds S] [--workers 1,4]

Builds tests/programs/go/hotloop with Debian's Go and, for each site class (main.hot's
first instruction, single-stepped; main.deep's stack-check jbe, emulated) and each
number of goroutines, runs it at ``--rate`` calls per second per goroutine: first
unprobed for ``--seconds``, then with ``noop run`` counting the calls (no budget), for
as long again. The loop's calls per second are the same both times (it sleeps to a
schedule), so what the process spends more while probed is what the probes cost it.
Printed per row: the hits, noop's estimate (the growth of
``noop_probe_overhead_seconds_total``, as a share of one CPU), the target's added
system time (``/proc/PID/stat``, where uprobe handling runs) and added user + system
time. The hits per second should be the rate times the goroutines.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agent_cpu import start_noop  # noqa: E402

from agent.cache import cache_dir  # noqa: E402

GO = Path("/usr/bin/go")
SPEC = """targets: {{t: {{binary: {binary}}}}}
budget: none
probes:
  - name: loop
    function: main.{function}
    metrics: [{{name: loop_calls_total, type: counter}}]
"""


def cpu(pid: int) -> tuple[float, float]:
    """The process's (user, system) CPU seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def scrape(url: str, name: str) -> float:
    with urllib.request.urlopen(url, timeout=5) as r:
        text = r.read().decode()
    m = re.search(rf'^{name}(?:{{probe="loop"}})? (\S+)$', text, re.M)
    if m is None:
        sys.exit(f"no {name} in /metrics")
    return float(m.group(1))


def build(out: Path) -> Path:
    env = {**os.environ, "GO111MODULE": "off", "GOFLAGS": "", "GOPROXY": "off",
           "CGO_ENABLED": "0", "GOCACHE": str(out / "gocache")}
    binary = out / "hotloop"
    subprocess.run([str(GO), "build", "-o", str(binary), "."], env=env, check=True,
                   cwd=ROOT / "tests" / "programs" / "go" / "hotloop")
    return binary


def one(binary: Path, tmp: Path, function: str, workers: int, rate: int, seconds: float
        ) -> dict[str, float]:
    target = subprocess.Popen([str(binary), "-call", function, "-workers", str(workers),
                               "-rate", str(rate), "-every", "1h"], stdout=subprocess.PIPE)
    try:
        assert target.stdout is not None
        target.stdout.readline()
        time.sleep(1.0)
        u0, s0 = cpu(target.pid)
        time.sleep(seconds)
        u1, s1 = cpu(target.pid)
        spec = tmp / f"{function}.yaml"
        spec.write_text(SPEC.format(binary=binary, function=function))
        noop, base = start_noop(spec, cache_dir())
        url = base + "/metrics"
        try:
            time.sleep(1.5)  # a look at the counts has happened
            h0, e0 = scrape(url, "noop_probe_hits_total"), scrape(
                url, "noop_probe_overhead_seconds_total")
            u2, s2 = cpu(target.pid)
            time.sleep(seconds)
            u3, s3 = cpu(target.pid)
            time.sleep(1.2)  # the next look counts the window's last hits
            h1, e1 = scrape(url, "noop_probe_hits_total"), scrape(
                url, "noop_probe_overhead_seconds_total")
        finally:
            noop.send_signal(signal.SIGTERM)
            noop.wait(timeout=30)
    finally:
        target.kill()
        target.wait()
    hits = h1 - h0
    return {"hits_per_s": hits / (seconds + 1.2),
            "estimate": (e1 - e0) / (seconds + 1.2),
            "system": (s3 - s2 - (s1 - s0)) / seconds,
            "total": (u3 + s3 - u2 - s2 - (u1 + s1 - u0 - s0)) / seconds}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=int, default=20_000, help="calls per second per goroutine")
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--workers", default="1,4", help="goroutines, comma-separated")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root")
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        binary = build(tmp)
        print(f"{'site':<28} {'goroutines':>10} {'hits/s':>9} {'estimate':>9} "
              f"{'+system':>8} {'+user+sys':>9} {'est/sys':>7}")
        for function, site in (("hot", "hot: first insn, single-step"),
                               ("deep", "deep: stack-check jbe, emul.")):
            for w in (int(x) for x in args.workers.split(",")):
                r = one(binary, tmp, function, w, args.rate, args.seconds)
                ratio = r["estimate"] / r["system"] if r["system"] > 0 else float("nan")
                print(f"{site:<28} {w:>10} {r['hits_per_s']:>9,.0f} {r['estimate']:>9.1%} "
                      f"{r['system']:>8.1%} {r['total']:>9.1%} {ratio:>7.2f}", flush=True)


if __name__ == "__main__":
    main()
