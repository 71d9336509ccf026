"""Agent faults: whatever happens to noop or to its target, the target is left as it was.
A uprobe is an int3 the kernel writes into the target's copy of the probed page; these
tests read that byte through /proc/PID/mem, so "no uprobe left" is checked where it
matters, not in noop's own bookkeeping. Privileged: real BPF."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest
from harness.example import SPEC
from harness.metrics import get
from harness.noop import Agent, attached_to, no_probe_left, run, start, target_byte, wait_for

from agent.kernel import attach

pytestmark = pytest.mark.attach  # run again through perf-event uprobes (--attach both)

REPO = Path(__file__).resolve().parent.parent
INT3 = 0xCC
ONE_COMPILER = pytest.mark.parametrize("example", ["go1.19"], indirect=True)


def _site(example: Path, spec: Path, tmp_path: Path) -> int:
    import json

    done = run("check", "--run", "--config", spec, "--json")
    assert done.returncode == 0, done.stderr
    (site,) = json.loads(done.stdout)["probes"][0]["sites"]
    return int(site["address"], 16)


def _example(example: Path) -> subprocess.Popen[str]:
    ex = subprocess.Popen([str(example), "-listen", "127.0.0.1:0", "-period", "20ms"],
                          stderr=subprocess.PIPE, text=True)
    assert ex.stderr is not None
    wait_for(ex.stderr, r"tick 1$", 60)
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
        original = target_byte(ex.pid, address)
        assert original != INT3
        agent = start("--config", spec)
        agent_cleanup.append(agent)
        assert target_byte(ex.pid, address) == INT3
        # What the harness's no_probe_left looks for is there while attached (links are
        # listed by the kernel; a perf-event uprobe only in the target's code).
        assert bool(attached_to(example)) == attach.attach_kind().multi
        t0 = time.monotonic()
        agent.proc.send_signal(getattr(signal, how))
        code = agent.proc.wait(timeout=10)
        took = time.monotonic() - t0
        if how == "SIGTERM":
            assert code == 0 and took < 1.0, (code, took)
        else:
            assert code == -signal.SIGKILL
        deadline = time.monotonic() + 5  # the kernel closes a killed process's files
        while target_byte(ex.pid, address) == INT3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert target_byte(ex.pid, address) == original
        no_probe_left(agent.proc.pid)
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
    agent = start("--config", spec)
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
