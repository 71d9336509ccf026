"""What a refresh of ``noop top`` costs noop, beside its baseline in one run: the page
``noop run --binary`` serves, read from the program's memory and written out (the
mirror's scrape, the runtime's and process's series), then the whole refresh (the same
reading, its values taken as they are read, rates and trends, ordered for the screen).

Usage: python bench/top.py [--library go|rust] [--series N ...] [--refreshes 21]

On bench/programs/go-series (or rust-series) with ``--series`` metric objects, each
updated every 100 ms (``-move``: every value moves between two refreshes, so no page is
served again as it was); noop's CPU time (all its threads) per refresh, p50 and p99.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from mirror import _go_series, _rust_series  # noqa: E402

from agent import cli  # noqa: E402
from agent.top import command  # noqa: E402


def _cut(xs: list[float]) -> str:
    q = statistics.quantiles(xs, n=100, method="inclusive")
    return f"p50 {1000 * q[49]:.1f} ms, p99 {1000 * q[98]:.1f} ms"


def one(binary: Path, n: int, refreshes: int) -> None:
    prog = subprocess.Popen([str(binary), "-series", str(n), "-move"], stdout=subprocess.PIPE,
                            text=True)
    assert prog.stdout is not None
    prog.stdout.readline()
    top = command.session(cli.parser().parse_args(["top", "--binary", str(binary),
                                                  "--pid", str(prog.pid)]))
    try:
        top.begin()
        top.refresh()  # the walk, the page's template, the keys parsed: once
        time.sleep(0.5)
        top.refresh()
        page: list[float] = []
        whole: list[float] = []
        for _ in range(refreshes):
            time.sleep(0.3)
            t0 = time.process_time()
            top._parts()  # what noop run's /metrics reads and writes of the program
            page.append(time.process_time() - t0)
            time.sleep(0.3)
            t0 = time.process_time()
            rows = top.view.rows(top.rates, top.refresh())
            whole.append(time.process_time() - t0)
        print(f"{n:>7} objects ({top.series} series, {len(rows)} rows): the page read "
              f"{_cut(page)}; a whole refresh {_cut(whole)} "
              f"({statistics.median(whole) / statistics.median(page):.2f}x)")
    finally:
        top.close()
        prog.terminate()
        prog.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--library", choices=("go", "rust"), default="go")
    ap.add_argument("--series", type=int, action="append")
    ap.add_argument("--refreshes", type=int, default=21)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        binary = _go_series(Path(tmp) / "go-series") if args.library == "go" else \
            _rust_series(Path(tmp))
        for n in args.series or [1000, 10000]:
            one(binary, n, args.refreshes)


if __name__ == "__main__":
    main()
