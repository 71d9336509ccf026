"""What the mirror of VictoriaMetrics/metrics costs a program's updates, beside its
baselines in one run: each update kind of bench/programs/vm-loop (Counter.Inc,
FloatCounter.Add, Histogram.Update, Summary.Update, GetOrCreateCounter(name).Inc) timed
unprobed, under ``noop run --binary`` as it runs by default (values read from memory at
each scrape, one probe where the program writes a Set), under ``--mirror both`` (every
update probed and counted, without a budget, which would take a probe this busy off:
at most ``BOTH_CALLS`` calls a round, each one a uprobe hit)
and under bpftrace counting at the update's function where it has one of its own; the
program scraped twice a second all along; the arms' order rotated at each repetition.

Usage: python bench/vm.py [--calls N] [--rounds R] [--repeats K]   (as root)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from agent_cpu import start_noop  # noqa: E402

OPS = ("counter.Inc", "floatcounter.Add", "histogram.Update", "summary.Update",
       "getorcreate.Inc")
PKG = "github.com/VictoriaMetrics/metrics"
# The function bpftrace counts at: the update's own, where it is out of line.
ENTRY = {"floatcounter.Add": f"{PKG}.(*FloatCounter).Add",
         "histogram.Update": f"{PKG}.(*Histogram).Update",
         "summary.Update": f"{PKG}.(*Summary).Update"}


BOTH_CALLS = 100_000  # a hit costs microseconds: fewer calls, the same ns per call


def build(out: Path) -> Path:
    env = {**os.environ, "GO111MODULE": "off", "GOPATH": "/usr/share/gocode", "GOFLAGS": "",
           "CGO_ENABLED": "0", "GOCACHE": str(out.parent / ".gocache")}
    subprocess.run(["/usr/bin/go", "build", "-o", str(out), "."],
                   cwd=ROOT / "bench" / "programs" / "vm-loop", env=env, check=True)
    return out


def once(binary: Path, op: str, arm: str, calls: int, rounds: int) -> float:
    """The median ns a call of ``op`` under ``arm``."""
    if arm == "both":
        calls = min(calls, BOTH_CALLS)
    prog = subprocess.Popen([str(binary), "-op", op, "-n", str(calls), "-rounds", str(rounds)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert prog.stdin is not None and prog.stdout is not None
    url = "http://" + prog.stdout.readline().split()[1] + "/metrics"
    other: subprocess.Popen[str] | None = None
    noop = None
    stop = threading.Event()

    def scrape() -> None:  # as Prometheus would
        while not stop.wait(0.5):
            with urllib.request.urlopen(url, timeout=10) as r:
                r.read()
            if noop is not None:
                with urllib.request.urlopen(noop[1] + "/metrics", timeout=30) as r:
                    r.read()

    try:
        if arm in ("default", "both"):
            noop = start_noop(None, None, "--binary", str(binary), "--pid", str(prog.pid),
                              *(("--mirror", "both", "--max-overhead", "none")
                                if arm == "both" else ()))
        elif arm == "bpftrace":
            other = subprocess.Popen(["bpftrace", "-e", f'uprobe:{binary}:"{ENTRY[op]}" '
                                      "{ @n = count(); }"], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
            time.sleep(3)  # attached
        t = threading.Thread(target=scrape)
        t.start()
        prog.stdin.write("go\n")
        prog.stdin.flush()
        got = [json.loads(prog.stdout.readline())["ns_per_call"] for _ in range(rounds)]
        stop.set()
        t.join()
        return statistics.median(got)
    finally:
        stop.set()
        prog.kill()
        prog.wait()
        if noop is not None:
            noop[0].terminate()
            noop[0].wait()
        if other is not None:
            other.terminate()
            other.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=2_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        binary = build(Path(tmp) / "vm-loop")
        print(f"{'op':<18} {'none':>8} {'default':>8} {'both':>8} {'bpftrace':>9}"
              "   (ns per call)")
        for op in OPS:
            arms = ["none", "default", "both"] + (["bpftrace"] if op in ENTRY and
                                                  shutil.which("bpftrace") else [])
            times: dict[str, list[float]] = {a: [] for a in arms}
            for r in range(args.repeats):
                for a in arms[r % len(arms):] + arms[:r % len(arms)]:
                    times[a].append(once(binary, op, a, args.calls, args.rounds))
            med = {a: statistics.median(v) for a, v in times.items()}
            print(f"{op:<18} {med['none']:>8.1f} {med['default']:>8.1f} "
                  f"{med['both']:>8.1f} {med.get('bpftrace', float('nan')):>9.1f}   "
                  f"default adds {med['default'] - med['none']:+.1f} ns")


if __name__ == "__main__":
    main()
