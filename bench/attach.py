"""How long uprobes take to go on and to come off, through each way noop has:
uprobe_multi links (one per program and file) and perf-event uprobes (one each), side
by side in one run, on a spec whose glob matches hundreds of functions.

Each way runs in a process of its own (``NOOP_ATTACH``): the programs are compiled (or
found in the cache) first, then timed: ``Loaded`` attaching every site (the proofs
included), and every uprobe taken off, side by side as noop does, and perf-event
uprobes also one by one (the baseline: how noop took them off before).

Usage: sudo python bench/attach.py [--runs N] [--binary B] [--functions GLOB]
(default: build/go-prometheus and encoding/json.*; needs ``./setup.sh demo``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def once(binary: str, functions: str, one_by_one: bool) -> dict[str, float]:
    """In this process: attach every site the glob matches, then detach (``one_by_one``:
    each uprobe closed after the last, as noop did before it closed them side by side);
    the times."""
    from agent.config import probes as spec
    from agent.kernel import attach, codegen, load
    from agent.kernel.kfeatures import attach_cookies, xmm_helper_available
    from agent.plan import resolve

    text = (f"targets:\n  t: {{binary: {binary}}}\n"
            f"probes:\n  - name: many\n    match: '{functions}'\n    max_sites: 100000\n")
    plan = resolve.resolve(spec.parse(text, "bench"), False)
    program = codegen.generate(plan, xmm_helper_available(), cookies=attach_cookies())
    marks: dict[str, float] = {}
    loaded = load.Loaded(plan, program,
                         lambda step: marks.setdefault(step.split()[0], time.perf_counter()))
    attached = time.perf_counter()
    n = len(loaded.attachments)
    t0 = time.perf_counter()
    if one_by_one:
        for handle in {id(h): h for h in loaded._probes}.values():
            handle.close()
    else:
        loaded._detach(lambda _a: True)  # every uprobe off: what SIGTERM waits for
    off = time.perf_counter()
    loaded.close()
    closed = time.perf_counter()
    return {"sites": n, "attach": attached - marks["attaching"], "detach": off - t0,
            "close": closed - off,
            "kind": attach.attach_kind().name + (", closed one by one" if one_by_one else "")}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--binary", default="build/go-prometheus")
    ap.add_argument("--functions", default="encoding/json.*")
    ap.add_argument("--once", help=argparse.SUPPRESS)  # a child: this way, one run
    opts = ap.parse_args()
    binary = str((ROOT / opts.binary).resolve())
    if opts.once:
        print(json.dumps(once(binary, opts.functions, opts.once == "one-by-one")))
        return 0
    cache = tempfile.mkdtemp(prefix="noop-bench-attach-")  # compiled once, both ways
    rows: dict[str, list[dict[str, float]]] = {}
    for _ in range(opts.runs):
        for arm, way in (("multi", "multi"), ("perf", "perf"), ("one-by-one", "perf")):
            env = {**os.environ, "NOOP_ATTACH": way, "NOOP_CACHE_DIR": cache}
            done = subprocess.run([sys.executable, __file__, "--once", arm, "--binary",
                                   binary, "--functions", opts.functions],
                                  env=env, capture_output=True, text=True, check=False)
            if done.returncode:
                print(done.stderr.strip(), file=sys.stderr)
                return 1
            rows.setdefault(arm, []).append(json.loads(done.stdout.splitlines()[-1]))
    print(f"{opts.binary}, `{opts.functions}`, median of {opts.runs} runs:\n")
    print("| attached through | uprobes | attach | detach | detach per uprobe |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for got in rows.values():
        n = int(got[0]["sites"])
        att = statistics.median(r["attach"] for r in got)
        det = statistics.median(r["detach"] for r in got)
        print(f"| {got[0]['kind']} | {n} | {att:.3f} s | {det:.3f} s | "
              f"{det / n * 1e3:.2f} ms |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
