"""noop's own CPU while its probes take a steady rate of hits, aggregated in the kernel.

Usage: python bench/agent_cpu.py [--rate HITS_PER_S] [--seconds S] [--scrape S]

Builds the Go workload of ``noop bench``, starts ``noop run`` on a spec counting
``(*gauge).Add`` calls by the gauge's name (a string read from the target's memory at
every hit and used as the key of the in-kernel aggregate), waits until it is ready,
then runs the workload at ``--rate`` calls per second for ``--seconds`` while scraping
/metrics every ``--scrape`` seconds. noop's CPU is its user + system time over that
window (from /proc), as a share of one core. The counter noop serves at the end must
equal the calls the workload made, or the script fails: a cheap wrong answer is no
answer.
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

from agent.tools import workloads  # noqa: E402

SPEC = """version: 1
targets:
  bench: {{binary: {binary}}}
probes:
  - name: gauge_add
    function: github.com/prometheus/client_golang/prometheus.(*gauge).Add
    values:
      metric: g.desc.fqName
    metrics:
      - name: bench_gauge_adds_total
        type: counter
        help: Calls of Gauge.Add, by the gauge's name
        labels: {{metric: metric}}
"""


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as r:
        return str(r.read().decode())


def counted(text: str) -> float:
    m = re.search(r'^bench_gauge_adds_total\{metric="bench_gauge"\} (\S+)$', text, re.M)
    return float(m.group(1)) if m else 0.0


def start_noop(spec: Path | None, cache: Path | None, *args: str
               ) -> tuple[subprocess.Popen[str], str]:
    """``noop run --config spec`` (or ``noop run ARGS``) on a port of its own, once it
    says it is ready: the process and its URL. ``cache``: noop's cache (default its
    own)."""
    what = ["--config", str(spec)] if spec is not None else list(args)
    env = {**os.environ, **({"NOOP_CACHE_DIR": str(cache)} if cache is not None else {})}
    proc = subprocess.Popen(
        [sys.executable, "-m", "agent", "run", *what, "--listen", "127.0.0.1:0"], cwd=ROOT,
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    url = ""
    for line in proc.stderr:
        if m := re.search(r"(http://\S+)/metrics", line):
            url = m.group(1)
        if "ready:" in line:
            return proc, url
    raise SystemExit(f"noop run exited {proc.wait()} before it was ready")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rate", type=int, default=100_000, help="probe hits per second")
    p.add_argument("--seconds", type=int, default=30, help="how long to measure")
    p.add_argument("--scrape", type=float, default=1.0, help="seconds between scrapes")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="noop-cpu-") as tmp:
        out = Path(tmp)
        binary = workloads.build_workload("go", out)
        spec = out / "probes.yaml"
        spec.write_text(SPEC.format(binary=binary))
        noop, url = start_noop(spec, out / "cache")
        try:
            load = subprocess.Popen([str(binary), "-op", "gauge.Add", "-rate", str(args.rate),
                                     "-n", str(args.rate), "-rounds", str(args.seconds)],
                                    stdout=subprocess.PIPE, text=True)
            t0, c0 = time.monotonic(), cpu_seconds(noop.pid)
            scrapes = 0
            while load.poll() is None:
                scrape(url + "/metrics")
                scrapes += 1
                time.sleep(args.scrape)
            wall, cpu = time.monotonic() - t0, cpu_seconds(noop.pid) - c0
            calls = args.rate * args.seconds
            if load.returncode != 0:
                raise SystemExit(f"the workload exited {load.returncode}")
            seen = counted(scrape(url + "/metrics"))
        finally:
            noop.send_signal(signal.SIGTERM)
            noop.wait(timeout=30)
    print(f"rate        {calls / wall:>12,.0f} hits/s over {wall:.1f} s "
          f"({scrapes} scrapes, every {args.scrape:g} s)")
    print(f"noop CPU    {cpu:>12.2f} s = {100 * cpu / wall:.2f} % of one core")
    print(f"counted     {seen:>12,.0f} of {calls:,} calls")
    if seen != calls:
        print("noop's count differs from the workload's", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
