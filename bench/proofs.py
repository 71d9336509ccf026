"""What proving a plan's sites costs before its uprobes go on: per file, the check
``load.attach_proven`` runs through the open file (build-id, each site's function code
read and hashed, decoded from its entry, the instruction compared), cold (nothing
decoded yet in this process) and warm (a second file of the same build), and the
proofs a plan's sites get when it is made.

Usage: python bench/proofs.py [--runs N] [BINARY ...]   (default: the examples)

Needs the examples built (``./setup.sh demo``); no root: nothing is attached.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> int:
    from agent.binary import proof
    from agent.plan.binary import Binary
    from agent.presets import plans as presets

    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("binaries", nargs="*",
                    default=["build/go-prometheus", "build/rust-prometheus"])
    opts = ap.parse_args()
    print("| binary | sites | functions | code | check, cold | check, warm | "
          "proving at plan time |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name in opts.binaries:
        path = str(ROOT / name)
        plan = presets.plan(path, None, aggregate=True)
        sites = [s for p in plan.probes for s in p.sites]
        proofs = {s.proof for s in sites if s.proof is not None}
        cold, warm, made = [], [], []
        for _ in range(opts.runs):
            proof._DECODED.clear()
            for sample in (cold, warm):
                t0 = time.perf_counter()
                with proof.Opened(path) as opened:
                    assert all(not opened.check(s.proof, s.file_offset) for s in sites)
                    assert not opened.unchanged(list(proofs))
                sample.append(time.perf_counter() - t0)
        b = Binary(path)
        for _ in range(opts.runs):
            proof._DECODED.clear()
            t0 = time.perf_counter()
            for s in sites:
                b.prove(s)
            made.append(time.perf_counter() - t0)
        code = {(p.start, p.size) for p in proofs}
        size = sum(n for _start, n in code)
        print(f"| {name} | {len(sites)} | {len(code)} | {size:,} B | "
              f"{statistics.median(cold) * 1e3:.2f} ms | "
              f"{statistics.median(warm) * 1e3:.2f} ms | "
              f"{statistics.median(made) * 1e3:.2f} ms |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
