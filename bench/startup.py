"""How long noop takes to attach, cold and warm, and how much memory ``noop run`` keeps.

Usage: python bench/startup.py [--runs N] [--binary BIN] [--rust BIN] [--config FILE]

Measured from the command's start to its "uprobes on" line (``noop --binary``,
``noop --config``) or to /readyz answering 200 (``noop run``), the median of ``--runs``
(5) each, all arms in one run. Cold: an empty noop cache (nothing resolved or compiled
before for this binary); warm: the same command again with the cache it left (a
restart). ``noop run``'s VmRSS is read once it is ready. Kernel headers are prepared
once beforehand (a machine's set-up, not a start): BCC_KERNEL_SOURCE is passed on.

Needs root and the examples built (``./setup.sh demo``); they run while the probes
attach, so attaching is measured on live targets. ``--rust``: the Rust example, whose
preset (the prometheus crate's) is measured beside the Go one.
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


def _env(cache: Path) -> dict[str, str]:
    from agent.kernel import kheaders

    kheaders.ensure_bcc_env()
    return {**os.environ, "NOOP_CACHE_DIR": str(cache),
            "BCC_KERNEL_SOURCE": os.environ.get("BCC_KERNEL_SOURCE", "")}


def _stop(proc: subprocess.Popen[bytes], sig: int) -> None:
    proc.send_signal(sig)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


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
            _stop(proc, signal.SIGINT)
            return took, 0
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
        return took, rss
    finally:
        _stop(proc, signal.SIGTERM)


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def measure(name: str, start: object, args: list[str], runs: int) -> list[str]:
    cold, warm, rss = [], [], []
    for _ in range(runs):
        cache = Path(tempfile.mkdtemp(prefix="noop-startup-"))
        try:
            t, _m = start(args, cache)  # type: ignore[operator]
            cold.append(t)
            t, m = start(args, cache)  # type: ignore[operator]
            warm.append(t)
            rss.append(m)
        finally:
            shutil.rmtree(cache, ignore_errors=True)
    mem = f"{statistics.median(rss) / 1024:.0f} MB" if any(rss) else "-"
    return [name, f"{statistics.median(cold):.2f} s", f"{statistics.median(warm):.2f} s",
            mem, f"{min(cold):.2f}-{max(cold):.2f} / {min(warm):.2f}-{max(warm):.2f}"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--binary", default="build/go-prometheus")
    ap.add_argument("--rust", default="build/rust-prometheus")
    ap.add_argument("--config", default="probes.yaml")
    opts = ap.parse_args()
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
    head = ["arm", "cold", "warm", "VmRSS (run)", "range cold / warm"]
    print(f"median of {opts.runs}, seconds to attach (uprobes on, or /readyz)")
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join(" --- " for _ in head) + "|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
