"""Large binaries with DWARF, planned and asked about cold and warm: a Rust release
build with debug info and a C program with a large separate debug file.

Usage: python bench/large.py [--runs N]

Arms (each the median of ``--runs``, 3 by default; cold: an empty noop cache, warm:
the same command again with the cache it left; peak RSS: the cold run's ``ru_maxrss``):

- build/rust-large (bench/programs/rust-large: the prometheus crate beside tokio,
  rayon, petgraph, serde and indexmap, 64 generic components; ``debug = 2``; 130 MB):
  ``noop check --binary`` (the crate's preset), ``noop check --config`` of a 20-probe
  spec (``graph`` of every third component, a slice's length), ``noop funcs``,
  ``noop struct`` of a type of the program's own, ``noop vars`` of one of its functions;
- build/c-large (bench/programs/c-large/gen.py: 1,600 units, a 39 MB debug file beside
  the stripped binary): its 20-probe spec, ``noop funcs``, ``noop struct`` of a
  system header's type written in every unit, ``noop vars``.

Builds both once (cargo offline from Debian's registry, as the tests do; gcc and make).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import startup  # noqa: E402 - bench/'s own helpers, beside this file

BUILD = ROOT / "build"
RUST = BUILD / "rust-large-target" / "release" / "rust-large"
C = BUILD / "c-large" / "c-large"


def build_rust() -> Path:
    """build/rust-large-target/release/rust-large and its 20-probe spec. cargo builds it
    every time: its own fingerprints say what changed (nothing: a second)."""
    env = {**os.environ, "CARGO_TARGET_DIR": str(RUST.parent.parent)}
    subprocess.run(["cargo", "build", "--release", "--offline", "--quiet"], check=True,
                   env=env, cwd=ROOT / "bench" / "programs" / "rust-large")
    lines = ["version: 1", "targets:", "  large:", f"    binary: {RUST.name}", "probes:"]
    for p in range(20):
        lines += [f"  - name: p{p}", f"    function: rust_large::c{3 * p:02d}::graph",
                  "    values:", "      n: len(records)"]
    (RUST.parent / "probes.yaml").write_text("\n".join(lines) + "\n")
    return RUST


def build_c() -> Path:
    """build/c-large/c-large (its debug file beside it) and its 20-probe spec: made again
    when what makes it changes (the generator, the compiler $(CC), the C library's headers),
    which a digest beside it records."""
    gen = ROOT / "bench" / "programs" / "c-large" / "gen.py"
    tools = subprocess.run(["sh", "-c", 'echo "${CC:-cc}"; ${CC:-cc} --version; '
                            "dpkg-query -W libc6-dev"],  # what its Makefile's $(CC) runs
                           capture_output=True, text=True, check=False).stdout
    made_from = hashlib.sha256(gen.read_bytes() + tools.encode()).hexdigest()
    stamp = C.parent / ".made-from"
    if not C.exists() or not stamp.is_file() or stamp.read_text() != made_from:
        subprocess.run([sys.executable, str(gen), str(C.parent)], check=True)
        subprocess.run(["make", "-s", f"-j{os.cpu_count() or 1}", "-C", str(C.parent)],
                       check=True)
        stamp.write_text(made_from)
    return C


def command(args: list[str], cache: Path) -> tuple[float, int]:
    """Seconds ``noop ARGS`` takes, and its peak RSS (KiB)."""
    started = time.monotonic()
    proc = subprocess.Popen([*startup.NOOP, *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, env=startup._env(cache), cwd=ROOT)
    _pid, status, usage = os.wait4(proc.pid, 0)
    took = time.monotonic() - started
    if os.waitstatus_to_exitcode(status) not in (0, 1):  # 1: a probe over its budget
        err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
        raise SystemExit(f"noop {' '.join(args)} failed:\n{err[-800:]}")
    return took, usage.ru_maxrss


def arms(runs: int) -> list[list[str]]:
    rust, c = build_rust(), build_c()
    rs = f"rust-large, {rust.stat().st_size / 1e6:.0f} MB"
    cs = f"c-large, {(c.parent / 'c-large.debug').stat().st_size / 1e6:.0f} MB debug file"
    asks = [
        (f"noop check --binary ({rs}, the preset)", ["check", "--binary", str(rust)]),
        (f"noop check --config ({rs}, 20 probes)",
         ["check", "--config", str(rust.parent / "probes.yaml")]),
        (f"noop funcs ({rs})", ["funcs", str(rust)]),
        (f"noop struct ({rs}, rust_large::c07::Record<u64>)",
         ["struct", str(rust), "rust_large::c07::Record<u64>"]),
        (f"noop vars ({rs}, rust_large::c07::graph)",
         ["vars", str(rust), "rust_large::c07::graph"]),
        (f"noop check --config ({cs}, 20 probes)",
         ["check", "--config", str(c.parent / "probes.yaml")]),
        (f"noop funcs ({cs})", ["funcs", str(c)]),
        (f"noop struct ({cs}, struct sockaddr_in)", ["struct", str(c), "struct sockaddr_in"]),
        (f"noop vars ({cs}, u800_f3)", ["vars", str(c), "u800_f3"]),
    ]
    return [startup.measure(name, command, args, runs, peak=True) for name, args in asks]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    opts = ap.parse_args()
    startup._table(arms(opts.runs), opts.runs, "peak RSS (cold)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
