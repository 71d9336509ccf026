"""The mirror (``noop run --binary``'s default ``--mirror auto``, and ``--mirror
memory``) beside its baselines, in one run.

Usage: python bench/mirror.py [--library go|rust] [--calls N] [--repeats R]
                              [--processes 10] [--vec 200] [--rate 100000] [--seconds 10]
                              [--series N ...] [--scrapes 21]
                              [--only ops|render|cpu|scrape ...]

``--library rust``: the same for the prometheus crate (1 on examples/bench/rust-loop,
whose each update is a function of its own with the crate's methods inlined in it: its
ops are inc, inc_by, a float inc_by, set, add, sub, an IntGauge's set, observe, a
*Vec child's inc after its with_label_values, a local counter's inc and flush; arms none,
empty, preset, default, mirror, bpftrace; 4 on bench/programs/rust-series); 2 and 3 are
client_golang's.

1. What an update costs the service, per update kind of client_golang (counter.Inc and
   Add, gauge.Add, Sub and Set, histogram.Observe, summary.Observe with objectives, a
   *CounterVec child's Inc after its WithLabelValues) on noop bench's Go workload: arms
   none, empty, preset (every update probed, as ``--mirror both`` and ``off`` load it),
   default (``--mirror auto``: every value read from memory, the one probe where the
   program gathers a registry), mirror (``--mirror memory``: no probe), bpftrace
   (a count) and bpftrace-read (a count per receiver, a word of it read and kept: as
   much as the preset reads), the arms' order rotated every repetition.
2. Reading and writing the mirrored series of many processes at once: ``--processes``
   copies of tests/programs/go/mirror, each with ``--vec`` children per *Vec (5 *Vecs),
   walked once, then ``Mirror.render()`` timed (median of 7), with noop's RSS.
3. The service's CPU under a steady load: the workload calling counter.Inc at ``--rate``
   a second for ``--seconds``, unprobed, then under the preset, the default and the
   mirror alone (scraped every half second); its user + system time per second of each.
4. Scrape cost: ``noop run --binary --mirror memory`` on bench/programs/go-series with
   ``--series`` metric objects (a third *Vec children, every tenth of the rest a
   histogram), noop's /metrics and the program's own scraped in turn ``--scrapes``
   times: p50 and p99 of each, their ratio, and noop's RSS per mirrored object; and
   noop's first two scrapes apart (the walk; the page's template, made again whenever
   the members change).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))  # bench/'s own helpers, beside this file

from agent.cache import cache_dir  # noqa: E402
from agent.tools import arms, bench, workloads  # noqa: E402

GO = Path("/usr/bin/go")
OPS = ("counter.Inc", "counter.Add", "gauge.Add", "gauge.Sub", "gauge.Set",
       "histogram.Observe", "summary.Observe", "countervec.Inc")


def per_op(binary: Path, calls: int, repeats: int, library: str = "go") -> None:
    names = ["none", "empty", "preset", "default", "mirror", "bpftrace"]
    if library == "go":
        names.append("bpftrace-read")  # it reads Go's receiver register
    chosen = [arms.arm(n) for n in names]
    print(f"{'op':<18} " + " ".join(f"{a.name:>10}" for a in chosen) + "   (ns per call added)")
    for op in OPS if library == "go" else workloads.RUST_OPS:
        result = bench.run(binary, op, workloads.workload_function(library, op), chosen, 3,
                           calls, repeats=repeats)
        print(f"{op:<18} " + " ".join(f"{a.added_ns:>10.1f}" for a in result.arms
                                       if a.added_ns is not None))


def _mirror_program(out: Path) -> Path:
    src = ROOT / "tests" / "programs" / "go" / "mirror"
    env = {**os.environ, "GO111MODULE": "off", "GOPATH": "/usr/share/gocode", "GOFLAGS": "",
           "CGO_ENABLED": "0", "GOCACHE": str(cache_dir() / "bench" / ".gocache")}
    subprocess.run([str(GO), "build", "-o", str(out), "."], cwd=src, env=env, check=True)
    return out


def rendering(processes: int, vec: int) -> None:
    from agent.presets.mirror.core import Mirror

    with tempfile.TemporaryDirectory() as tmp:
        binary = _mirror_program(Path(tmp) / "mirror")
        procs = [subprocess.Popen([str(binary), "-rounds", "3", "-vec", str(vec)],
                                  stdout=subprocess.PIPE, text=True) for _ in range(processes)]
        try:
            for p in procs:
                assert p.stdout is not None
                p.stdout.readline()
            pids = [p.pid for p in procs]
            mirror = Mirror("mirror", str(binary), find=lambda: pids)
            t0 = time.perf_counter()
            body = mirror.render()  # the first scrape walks every process
            first = time.perf_counter() - t0
            times = []
            for _ in range(7):
                t0 = time.perf_counter()
                body = mirror.render()
                times.append(time.perf_counter() - t0)
            series = sum(1 for line in body.splitlines() if not line.startswith(b"#"))
            mirror.close()
        finally:
            for p in procs:
                p.terminate()
                p.wait()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{series} samples of {processes} processes: first scrape (walks) {first:.2f} s, "
          f"then {1000 * statistics.median(times):.0f} ms a scrape (median of 7); "
          f"noop's peak RSS {rss:.0f} MB")


def _go_series(out: Path) -> Path:
    src = ROOT / "bench" / "programs" / "go-series"
    env = {**os.environ, "GO111MODULE": "off", "GOPATH": "/usr/share/gocode", "GOFLAGS": "",
           "CGO_ENABLED": "0", "GOCACHE": str(cache_dir() / "bench" / ".gocache")}
    subprocess.run([str(GO), "build", "-o", str(out), "."], cwd=src, env=env, check=True)
    return out


def _timed_get(url: str) -> tuple[float, int]:
    import urllib.request
    t0 = time.perf_counter()
    with urllib.request.urlopen(url, timeout=60) as r:
        n = len(r.read())
    return time.perf_counter() - t0, n


def _rss(pid: int) -> int:
    """Resident bytes of process ``pid``."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _rust_series(out: Path) -> Path:
    src = ROOT / "bench" / "programs" / "rust-series"
    target = cache_dir() / "bench" / "rust-series-target"
    subprocess.run(["cargo", "build", "--release", "--offline", "--quiet"], cwd=src,
                   env={**os.environ, "CARGO_TARGET_DIR": str(target)}, check=True)
    return target / "release" / "rust-series"


def scrape_cost(sizes: list[int], scrapes: int, library: str = "go") -> None:
    """``noop run --binary --mirror memory``'s /metrics beside the program's own, for
    programs of ``sizes`` metric objects (bench/programs/go-series, rust-series),
    scraped in turn: p50 and p99 of each, and noop's RSS."""
    from statistics import quantiles

    from agent_cpu import start_noop
    with tempfile.TemporaryDirectory() as tmp:
        binary = _go_series(Path(tmp) / "go-series") if library == "go" else \
            _rust_series(Path(tmp))
        rss: dict[int, int] = {}
        for n in sizes:
            prog = subprocess.Popen([str(binary), "-series", str(n)], stdout=subprocess.PIPE,
                                    text=True)
            assert prog.stdout is not None
            theirs = "http://" + prog.stdout.readline().split()[1] + "/metrics"
            noop, base = start_noop(None, None, "--binary", str(binary), "--mirror", "memory")
            mine = base + "/metrics"
            try:
                first = _timed_get(mine)[0]  # the first scrape walks the registries, the
                again = _timed_get(mine)[0]  # second makes the page's template
                times: dict[str, list[float]] = {"program": [], "noop": []}
                sizes_of = {}
                for _ in range(scrapes):
                    for who, url in (("program", theirs), ("noop", mine)):
                        t, size = _timed_get(url)
                        times[who].append(t)
                        sizes_of[who] = size
                rss[n] = _rss(noop.pid)
            finally:
                noop.terminate()
                noop.wait()
                prog.terminate()
                prog.wait()
            cuts = {who: quantiles(ts, n=100, method="inclusive") for who, ts in times.items()}
            p50 = {who: 1000 * c[49] for who, c in cuts.items()}
            p99 = {who: 1000 * c[98] for who, c in cuts.items()}
            print(f"{n:>7} objects: the program's /metrics p50 {p50['program']:.1f} ms, p99 "
                  f"{p99['program']:.1f} ms ({sizes_of['program'] // 1024} KiB); noop's p50 "
                  f"{p50['noop']:.1f} ms, p99 {p99['noop']:.1f} ms "
                  f"({sizes_of['noop'] // 1024} KiB): {p50['noop'] / p50['program']:.2f}x at "
                  f"p50; noop's RSS {rss[n] / 2**20:.0f} MiB; its first scrape (the walk) "
                  f"{first:.2f} s, its second (the page's template) {again:.2f} s")
        if len(sizes) > 1:
            lo, hi = min(sizes), max(sizes)
            print(f"noop's RSS per mirrored object: {(rss[hi] - rss[lo]) / (hi - lo):.0f} bytes "
                  f"(from {lo} to {hi} objects)")


def _cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _loaded(binary: Path, rate: int, seconds: float) -> float:
    """CPU seconds a second the workload spends calling counter.Inc ``rate`` a second."""
    n = int(rate * seconds)
    p = subprocess.Popen([str(binary), "-op", "counter.Inc", "-n", str(n), "-rounds", "1",
                          "-rate", str(rate)], stdout=subprocess.DEVNULL)
    time.sleep(seconds * 0.9)
    used = _cpu(p.pid)
    p.wait()
    return used / (seconds * 0.9)


def service_cpu(binary: Path, rate: int, seconds: float) -> None:
    site = workloads.make_site(binary, workloads.workload_function("go", "counter.Inc"))
    rows = [("none", arms.NONE), ("preset", arms.PRESET), ("default", arms.DEFAULT),
            ("mirror", arms.MIRROR)]
    for name, arm in rows:
        with arm.attach(site):
            share = _loaded(binary, rate, seconds)
        print(f"{name:<8} the service at {rate} counter.Inc/s: {100 * share:.1f} % of a CPU")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--library", choices=("go", "rust"), default="go")
    ap.add_argument("--calls", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--processes", type=int, default=10)
    ap.add_argument("--vec", type=int, default=200)
    ap.add_argument("--rate", type=int, default=100_000)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--series", type=int, action="append",
                    help="program sizes for the scrape cost (default 10000 and 100000)")
    ap.add_argument("--scrapes", type=int, default=21)
    ap.add_argument("--only", choices=("ops", "render", "cpu", "scrape"), action="append")
    args = ap.parse_args()
    only = set(args.only or ("ops", "render", "cpu", "scrape"))
    if "scrape" in only:
        scrape_cost(args.series or [10_000, 100_000], args.scrapes, args.library)
    if args.library == "rust":
        if "ops" in only:
            per_op(workloads.build_workload("rust", cache_dir() / "bench"), args.calls,
                   args.repeats, "rust")
        return
    if not only & {"ops", "render", "cpu"}:
        return
    binary = workloads.build_workload("go", cache_dir() / "bench")
    if "ops" in only:
        per_op(binary, args.calls, args.repeats)
    if "render" in only:
        rendering(args.processes, args.vec)
    if "cpu" in only:
        service_cpu(binary, args.rate, args.seconds)


if __name__ == "__main__":
    main()
