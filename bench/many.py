"""Many targets on one node: attach time and memory with 20 different builds of the
example at once, under one spec of a few hundred sites, and the preset per build.

Usage: python bench/many.py [--builds N] [--large]

Each build links a padding package of a different size before client_golang, so its
functions sit at other addresses and its generated C differs: nothing one build
compiles serves another. All builds run while noop attaches.

- spec: ``noop run --config`` with one target per build, each probed on every
  ``(*gauge).*`` method of client_golang (a counter of calls): the time to /readyz with
  an empty noop cache and again with the cache it left, and its VmRSS once ready;
- preset: ``noop run --binary`` on each build in turn, sharing one cache (as a node
  whose pods run different builds): the median and largest time to /readyz.

``--large``: the builds are of bench/programs/go-large (a 50 MB client_golang program
with DWARF, from Debian's golang-github-aws-aws-sdk-go-dev) rather than of the example.

Needs root, Debian's Go (golang-go) and client_golang (./setup.sh installs both).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from startup import run_start  # noqa: E402

PATTERN = "github.com/prometheus/client_golang/prometheus.(*gauge).*"


def build(n: int, out: Path, gopath: Path, source: Path) -> Path:
    """The program at ``source`` (the example's main.go) with a padding package of ``n``
    functions linked before client_golang."""
    src = gopath / "src" / "noopmany"
    (src / "aaapad").mkdir(parents=True, exist_ok=True)
    (src / f"ex{n}").mkdir(parents=True, exist_ok=True)
    funcs = "\n".join(f"func F{i}(x int) int {{ for j := 0; j < {i % 7 + 2}; j++ "
                      f"{{ x = x*{i + 3} + j }}; return x }}" for i in range(n))
    (src / "aaapad" / "pad.go").write_text(
        f"package aaapad\n\n{funcs}\n\nvar All = []func(int) int{{"
        + ", ".join(f"F{i}" for i in range(n)) + "}\n")
    text = source.read_text()
    imports = '\n\t"noopmany/aaapad"' + ('' if '"os"' in text else '\n\t"os"')
    text = text.replace("import (", "import (" + imports, 1).replace(
        "func main() {", "func main() {\n\tif len(os.Args) > 1000 {\n\t\t"
        "println(aaapad.All[0](1))\n\t}", 1)
    (src / f"ex{n}" / "main.go").write_text(text)
    binary = out / f"go-prometheus-{n}"
    env = {**os.environ, "GO111MODULE": "off", "GOFLAGS": "",
           "GOPATH": f"{gopath}:/usr/share/gocode", "GOCACHE": str(out / "gocache")}
    subprocess.run(["/usr/bin/go", "build", "-o", str(binary), f"noopmany/ex{n}"],
                   check=True, env=env, capture_output=True)
    shutil.rmtree(src / "aaapad")  # the next build pads its own way
    return binary


def spec(binaries: list[Path]) -> str:
    lines = ["version: 1", "targets:"]
    lines += [f"  t{i}: {{binary: {b}}}" for i, b in enumerate(binaries)]
    lines.append("probes:")
    for i in range(len(binaries)):
        lines += [f"  - name: gauge_calls_{i}", f"    target: t{i}",
                  f'    match: "{PATTERN}"', "    metrics:",
                  f"      - {{name: gauge_calls_{i}_total, type: counter, help: calls}}"]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--builds", type=int, default=20)
    ap.add_argument("--large", action="store_true",
                    help="builds of bench/programs/go-large (50 MB with DWARF)")
    opts = ap.parse_args()
    source = ROOT / ("bench/programs/go-large" if opts.large else "examples/go-prometheus")
    work = Path(tempfile.mkdtemp(prefix="noop-many-"))
    procs = []
    try:
        started = time.monotonic()
        binaries = [build(10 + 7 * i, work, work / "gopath", source / "main.go")
                    for i in range(opts.builds)]
        print(f"built {len(binaries)} variants of the example in "
              f"{time.monotonic() - started:.0f} s")
        procs = [subprocess.Popen([str(b), "-listen", "127.0.0.1:0"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                 for b in binaries]
        conf = work / "many.yaml"
        conf.write_text(spec(binaries))
        sites = subprocess.run([sys.executable, "-m", "agent", "check", "--run", "--config",
                                str(conf)], capture_output=True, text=True, cwd=ROOT,
                               env={**os.environ, "NOOP_CACHE_DIR": str(work / "probe")})
        count = len(re.findall(r"^  at 0x", sites.stdout, re.M))
        cache = work / "cache"
        cold, _ = run_start(["--config", str(conf)], cache)
        warm, rss = run_start(["--config", str(conf)], cache)
        print(f"spec: {len(binaries)} targets, {count} sites: cold {cold:.2f} s, "
              f"warm {warm:.2f} s, VmRSS {rss / 1024:.0f} MB")
        shared = work / "preset-cache"
        times, mem = [], []
        for b in binaries:
            t, m = run_start(["--binary", str(b)], shared)
            times.append(t)
            mem.append(m)
        print(f"preset, each build in turn, one shared cache: median {statistics.median(times):.2f}"
              f" s, largest {max(times):.2f} s to /readyz; VmRSS median "
              f"{statistics.median(mem) / 1024:.0f} MB")
    finally:
        for p in procs:
            p.terminate()
            p.wait()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
