"""Time ``noop struct`` cold and warm beside ``pahole -C`` and gdb ``ptype /o`` on one type.

Usage: python bench/inspect_struct.py [BINARY] [TYPE] [--runs N]
Cold: a fresh, empty cache directory for every run. Warm: the cache filled once.
Each figure is the median wall time of N runs of the whole command, in one run of
this script, so the tools are compared under the same load.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_TYPE = "github.com/prometheus/client_golang/prometheus.counter"


def timed(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, int, str]:
    t0 = time.perf_counter()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    return time.perf_counter() - t0, p.returncode, (p.stdout + p.stderr)


def median_of(runs: int, make: callable) -> tuple[float, int, str]:  # type: ignore[valid-type]
    results = [make() for _ in range(runs)]
    return statistics.median(r[0] for r in results), results[-1][1], results[-1][2]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("binary", nargs="?", default=str(ROOT / "build" / "go-prometheus"))
    ap.add_argument("type", nargs="?", default=DEFAULT_TYPE)
    ap.add_argument("--runs", type=int, default=7)
    a = ap.parse_args()
    noop = [sys.executable, "-m", "agent", "struct", a.binary, a.type]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        def cold() -> tuple[float, int, str]:
            d = tempfile.mkdtemp(dir=tmp)
            try:
                return timed(noop, {**os.environ, "NOOP_CACHE_DIR": d})
            finally:
                shutil.rmtree(d)

        warm_env = {**os.environ, "NOOP_CACHE_DIR": os.path.join(tmp, "warm")}
        timed(noop, warm_env)
        rows.append(("noop struct (cold)", *median_of(a.runs, cold)))
        rows.append(("noop struct (warm)", *median_of(a.runs, lambda: timed(noop, warm_env))))
    gdb = ["gdb", "-batch", "-nx", "-iex", "set auto-load off", "-ex", "set language c",
           "-ex", f"ptype /o '{a.type}'", a.binary]
    rows.append(("gdb ptype /o", *median_of(a.runs, lambda: timed(gdb))))
    pahole = ["pahole", "-C", a.type, a.binary]
    rows.append(("pahole -C", *median_of(a.runs, lambda: timed(pahole))))
    print(f"binary {a.binary}\ntype   {a.type}\nmedian of {a.runs} runs each\n")
    print(f"{'tool':<22} {'ms':>8}  result")
    for name, secs, rc, out in rows:
        lines = out.strip().splitlines()
        note = "ok" if rc == 0 and lines else f"failed (exit {rc}): " + (
            lines[-1][:60] if lines else "no output")
        if rc == 0 and not lines:
            note = "no output"
        print(f"{name:<22} {secs * 1000:8.0f}  {note}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
