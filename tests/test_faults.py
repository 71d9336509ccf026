"""Agent faults: whatever happens to noop or to its target, the target is left as it was.
A uprobe is an int3 the kernel writes into the target's copy of the probed page; these
tests read that byte through /proc/PID/mem, so "no uprobe left" is checked where it
matters, not in noop's own bookkeeping. Privileged: real BPF."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_run import SPEC, Agent, get
from test_trace import _wait_for

REPO = Path(__file__).resolve().parent.parent
INT3 = 0xCC
ONE_COMPILER = pytest.mark.parametrize("example", ["go1.19"], indirect=True)


def _byte(pid: int, address: int) -> int:
    with open(f"/proc/{pid}/mem", "rb") as mem:
        mem.seek(address)
        return mem.read(1)[0]


def _site(example: Path, spec: Path, tmp_path: Path) -> int:
    import json

    env = dict(os.environ)  # the session's shared noop cache (conftest)
    done = subprocess.run([sys.executable, "-m", "agent", "check", "--run", "--config",
                           str(spec), "--json"], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300, check=True)
    (site,) = json.loads(done.stdout)["probes"][0]["sites"]
    return int(site["address"], 16)


def _start(tmp_path: Path, spec: Path) -> Agent:
    env = dict(os.environ)  # the session's shared noop cache (conftest)
    proc = subprocess.Popen([sys.executable, "-m", "agent", "run", "--listen", "127.0.0.1:0",
                             "--config", str(spec)], cwd=REPO, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    log = _wait_for(proc.stderr, r"ready: \d+ uprobes attached", 180)
    addr = next(m.group(1) for line in log if (m := re.search(r"//(\S+)/metrics", line)))
    return Agent(proc, f"http://{addr}", log)


def _example(example: Path) -> subprocess.Popen[str]:
    ex = subprocess.Popen([str(example), "-listen", "127.0.0.1:0", "-period", "20ms"],
                          stderr=subprocess.PIPE, text=True)
    assert ex.stderr is not None
    _wait_for(ex.stderr, r"tick 1$", 60)
    return ex


@ONE_COMPILER
@pytest.mark.serial  # SIGTERM to exit within a second
@pytest.mark.parametrize("how", ["SIGKILL", "SIGTERM"])
def test_noop_stopped_leaves_no_uprobe(privileged: None, example: Path, tmp_path: Path,
                                       agent_cleanup: list[Agent], how: str) -> None:
    """The probed instruction of a running target is an int3 while noop runs; after
    SIGKILL of noop it is the binary's own byte again, and nothing of noop's stays in
    tracefs; SIGTERM does the same, exits 0 and takes less than a second."""
    spec = tmp_path / "probes.yaml"
    spec.write_text(SPEC.format(binary=example))
    address = _site(example, spec, tmp_path)
    ex = _example(example)
    try:
        original = _byte(ex.pid, address)
        assert original != INT3
        agent = _start(tmp_path, spec)
        agent_cleanup.append(agent)
        assert _byte(ex.pid, address) == INT3
        t0 = time.monotonic()
        agent.proc.send_signal(getattr(signal, how))
        code = agent.proc.wait(timeout=10)
        took = time.monotonic() - t0
        if how == "SIGTERM":
            assert code == 0 and took < 1.0, (code, took)
        else:
            assert code == -signal.SIGKILL
        deadline = time.monotonic() + 5  # the kernel closes a killed process's files
        while _byte(ex.pid, address) == INT3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _byte(ex.pid, address) == original
        events = Path("/sys/kernel/tracing/uprobe_events").read_text()
        assert f"bcc_{agent.proc.pid}" not in events, events
        assert ex.poll() is None  # the target runs on
    finally:
        ex.kill()
        ex.wait()


@ONE_COMPILER
def test_target_killed_mid_probe_leaves_noop_running(privileged: None, example: Path,
                                                     tmp_path: Path,
                                                     agent_cleanup: list[Agent]) -> None:
    """A target killed while noop probes it: noop stays healthy, keeps serving what it
    counted, and still stops cleanly."""
    spec = tmp_path / "probes.yaml"
    spec.write_text(SPEC.format(binary=example))
    agent = _start(tmp_path, spec)
    agent_cleanup.append(agent)
    ex = _example(example)
    key = ("noop_probe_hits_total", (("probe", "order"),))
    deadline = time.monotonic() + 30
    while agent.metrics().get(key, 0) < 3 and time.monotonic() < deadline:
        time.sleep(0.1)
    ex.kill()
    ex.wait()
    time.sleep(1.0)
    assert agent.proc.poll() is None
    assert get(agent.url + "/healthz").startswith("ok")
    got = agent.metrics()
    assert got[("noop_probe_hits_total", (("probe", "order"),))] >= 3
    code, err = agent.stop()
    assert code == 0, err
