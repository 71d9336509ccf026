"""How long noop takes to attach, cold and warm, and how much memory ``noop run`` keeps.

Usage: python bench/startup.py [--runs N] [--binary BIN] [--rust BIN] [--config FILE]
                                [--large BIN ...] [--large-only]

Measured from the command's start to its "uprobes on" line (``noop --binary``,
``noop --config``) or to /readyz answering 200 (``noop run``), the median of ``--runs``
(5) each, all arms in one run. Cold: an empty noop cache (nothing resolved or compiled
before for this binary); warm: the same command again with the cache it left (a
restart). ``noop run``'s VmRSS is read once it is ready. Kernel headers are prepared
once beforehand (a machine's set-up, not a start): BCC_KERNEL_SOURCE is passed on.

Needs root and the examples built (``./setup.sh demo``); they run while the probes
attach, so attaching is measured on live targets. ``--rust``: the Rust example, whose
preset (the prometheus crate's) is measured beside the Go one.

Large binaries (``--large``; by default Debian's stripped ``/usr/bin/prometheus`` and
``build/go-large``, a 50 MB client_golang program with DWARF built here from
bench/programs/go-large and Debian's Go sources): ``noop check --binary`` (the plan
alone), ``noop --binary`` and ``noop run --binary`` with each running, cold and warm,
with each command's peak RSS (the kernel's ``ru_maxrss`` of the process, which counts
the largest of the children it waited for: BCC's compiler, for the attaching arms). Building
go-large needs Debian's ``golang-github-aws-aws-sdk-go-dev``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

NOOP = [sys.executable, "-m", "agent"]
PORT = 19559
PEAK = False  # run_start gives the peak RSS rather than the RSS once ready (large arms)
LARGE = ROOT / "build" / "go-large"


def _env(cache: Path) -> dict[str, str]:
    from agent.kernel import kheaders

    kheaders.ensure_bcc_env()
    return {**os.environ, "NOOP_CACHE_DIR": str(cache),
            "BCC_KERNEL_SOURCE": os.environ.get("BCC_KERNEL_SOURCE", "")}


def _stop(proc: subprocess.Popen[bytes], sig: int) -> int:
    """Stops ``proc``; its peak RSS (KiB)."""
    proc.send_signal(sig)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        pid, _status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            proc.returncode = 0
            return usage.ru_maxrss
        time.sleep(0.01)
    proc.kill()
    return os.wait4(proc.pid, 0)[2].ru_maxrss


def check_plan(args: list[str], cache: Path) -> tuple[float, int]:
    """Seconds ``noop check`` takes to print its plan, and its peak RSS (KiB)."""
    started = time.monotonic()
    proc = subprocess.Popen([*NOOP, "check", *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, env=_env(cache), cwd=ROOT)
    _pid, status, usage = os.wait4(proc.pid, 0)
    took = time.monotonic() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode not in (0, 1):  # 1: a probe over its budget at the rates given
        err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
        raise SystemExit(f"noop check {' '.join(args)} failed:\n{err[-800:]}")
    return took, usage.ru_maxrss


def trace_start(args: list[str], cache: Path) -> tuple[float, int]:
    """Seconds until the terminal mode says its uprobes are on; (that, 0)."""
    started = time.monotonic()
    proc = subprocess.Popen([*NOOP, *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, env=_env(cache), cwd=ROOT)
    assert proc.stderr is not None
    said = []
    for raw in proc.stderr:
        line = raw.decode(errors="replace")
        said.append(line)
        if "uprobes on" in line:
            took = time.monotonic() - started
            return took, _stop(proc, signal.SIGINT)
    proc.wait()
    raise SystemExit(f"noop {' '.join(args)} never attached:\n{''.join(said[-5:])}")


def run_start(args: list[str], cache: Path) -> tuple[float, int]:
    """Seconds until ``noop run`` answers /readyz, and its VmRSS (KiB) a second later."""
    started = time.monotonic()
    proc = subprocess.Popen([*NOOP, "run", *args, "--listen", f"127.0.0.1:{PORT}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env=_env(cache), cwd=ROOT)
    try:
        while True:
            if proc.poll() is not None:
                err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
                raise SystemExit(f"noop run {' '.join(args)} exited:\n{err[-800:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{PORT}/readyz",
                                            timeout=1) as r:
                    if r.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.02)
        took = time.monotonic() - started
        time.sleep(1)
        rss = rss_kib(proc.pid)
        peak = _stop(proc, signal.SIGTERM)
        return took, rss if not PEAK else peak
    finally:
        if proc.returncode is None:
            _stop(proc, signal.SIGTERM)


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def measure(name: str, start: object, args: list[str], runs: int, peak: bool = False
            ) -> list[str]:
    """The median of ``runs`` cold and warm starts; the memory of the warm one (the
    cold one's peak with ``peak``)."""
    cold, warm, rss = [], [], []
    for _ in range(runs):
        cache = Path(tempfile.mkdtemp(prefix="noop-startup-"))
        try:
            t, m = start(args, cache)  # type: ignore[operator]
            cold.append(t)
            if peak:
                rss.append(m)
            t, m = start(args, cache)  # type: ignore[operator]
            warm.append(t)
            if not peak:
                rss.append(m)
        finally:
            shutil.rmtree(cache, ignore_errors=True)
    mem = f"{statistics.median(rss) / 1024:.0f} MB" if any(rss) else "-"
    return [name, f"{statistics.median(cold):.2f} s", f"{statistics.median(warm):.2f} s",
            mem, f"{min(cold):.2f}-{max(cold):.2f} / {min(warm):.2f}-{max(warm):.2f}"]


def build_large() -> Path:
    """build/go-large, from bench/programs/go-large with Debian's Go and its packaged
    sources (client_golang, the AWS SDK). Go builds it every time: its build cache says
    what changed (nothing: the link alone)."""
    if not Path("/usr/share/gocode/src/github.com/aws").is_dir():
        raise SystemExit("build/go-large needs the AWS SDK's Go sources: apt-get install "
                         "golang-github-aws-aws-sdk-go-dev (or give --large BIN ...)")
    LARGE.parent.mkdir(exist_ok=True)
    env = {**os.environ, "GO111MODULE": "off", "GOPATH": "/usr/share/gocode"}
    subprocess.run(["go", "build", "-o", str(LARGE), "."], check=True, env=env,
                   cwd=ROOT / "bench" / "programs" / "go-large")
    return LARGE


def _serve(binary: Path, tmp: Path) -> subprocess.Popen[bytes]:
    """``binary`` running, on loopback (Debian's prometheus with a config of its own)."""
    args = [str(binary), "-listen", "127.0.0.1:0"]
    if binary.name == "prometheus":
        (tmp / "prometheus.yml").write_text("global:\n  scrape_interval: 1h\n")
        args = [str(binary), f"--config.file={tmp / 'prometheus.yml'}",
                f"--storage.tsdb.path={tmp / 'data'}", "--web.listen-address=127.0.0.1:19558"]
    return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def large_arms(binaries: list[Path], runs: int) -> list[list[str]]:
    global PEAK
    rows = []
    tmp = Path(tempfile.mkdtemp(prefix="noop-large-"))
    served = [_serve(b, tmp) for b in binaries]
    PEAK = True
    try:
        for b in binaries:
            size = f"{b.name}, {b.stat().st_size / 1e6:.0f} MB"
            rows += [measure(f"noop check --binary ({size})", check_plan,
                             ["--binary", str(b)], runs, peak=True),
                     measure(f"noop --binary ({size})", trace_start, ["--binary", str(b)],
                             runs, peak=True),
                     measure(f"noop run --binary ({size})", run_start, ["--binary", str(b)],
                             runs, peak=True)]
    finally:
        PEAK = False
        for s in served:
            s.terminate()
            s.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--binary", default="build/go-prometheus")
    ap.add_argument("--rust", default="build/rust-prometheus")
    ap.add_argument("--config", default="probes.yaml")
    ap.add_argument("--large", action="append", type=Path,
                    help="a large binary (default: /usr/bin/prometheus and build/go-large)")
    ap.add_argument("--large-only", action="store_true", help="only the large binaries")
    opts = ap.parse_args()

    def large() -> list[Path]:  # built when its arms run: after the examples' table
        return opts.large or [Path("/usr/bin/prometheus"), build_large()]

    if opts.large_only:
        _table(large_arms(large(), opts.runs), opts.runs, "peak RSS (cold)")
        return 0
    binary, rust = ROOT / opts.binary, ROOT / opts.rust
    for b in (binary, rust):
        if not b.exists():
            raise SystemExit(f"{b} is missing: run ./setup.sh demo first")
    targets = [subprocess.Popen([str(b), "-listen", "127.0.0.1:0"], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL) for b in (binary, rust)]
    try:
        rows = [measure("noop --binary (preset)", trace_start, ["--binary", str(binary)],
                        opts.runs),
                measure("noop --config (example spec)", trace_start,
                        ["--config", opts.config], opts.runs),
                measure("noop run --binary (preset)", run_start, ["--binary", str(binary)],
                        opts.runs),
                measure("noop run --config (example spec)", run_start,
                        ["--config", opts.config], opts.runs),
                measure("noop --binary (Rust preset)", trace_start, ["--binary", str(rust)],
                        opts.runs),
                measure("noop run --binary (Rust preset)", run_start,
                        ["--binary", str(rust)], opts.runs)]
    finally:
        for t in targets:
            t.terminate()
            t.wait()
    _table(rows, opts.runs, "VmRSS (run)")
    _table(large_arms(large(), opts.runs), opts.runs, "peak RSS (cold)")
    return 0


def _table(rows: list[list[str]], runs: int, memory: str) -> None:
    head = ["arm", "cold", "warm", memory, "range cold / warm"]
    print(f"median of {runs}, seconds to a plan (check), to attach (uprobes on) or to "
          "/readyz (run)")
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join(" --- " for _ in head) + "|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    sys.exit(main())
