"""Updates the program makes only when a condition holds (tests/programs/rust/branches):
in its release build a counter's ``lock incq`` is followed by the code where the path
that skipped it joins, and a gauge's ``lock decq`` is the target of the jump that
chooses it. The preset probes them before the update, at the conditional jump that
guards it; the histogram's observed value comes from its sum's compare-and-swap.
``noop --binary`` and ``noop run --binary`` must see every call the program says it
made, exactly once, and end where its own /metrics does.

The build's code is checked with objdump first: without the pattern these tests would
pass on a build that does not have it. Privileged, except that check and the plan's.
"""

from __future__ import annotations

import re
import subprocess
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from harness.example import TICKS, Traced, run_logged, trace
from harness.metrics import scrape, series_name
from harness.noop import Agent, no_probe_left, settle, start

from agent.plan.binary import Binary
from agent.presets.rust_prometheus import rules as rust_prometheus

CRATE = {"library": "rust-prometheus"}
KINDS = {"branch_errors_total": "counter", "branch_bytes_total": "counter",
         "branch_retries_total": "counter", "branch_level": "gauge",
         "branch_float_level": "gauge", "branch_seconds": "histogram"}


def _tick(binary: Path) -> list[tuple[int, str, str, int | None]]:
    """objdump's ``branches::Metrics::tick``: (address, mnemonic, operands, jump target)."""
    text = subprocess.run(["objdump", "-d", "--no-show-raw-insn", "-C", str(binary)],
                          check=True, capture_output=True, text=True).stdout
    body = text.split("<branches::Metrics::tick>:\n", 1)[1].split("\n\n", 1)[0]
    out = []
    for line in body.splitlines():
        m = re.match(r"\s*([0-9a-f]+):\s+(\S+(?: \S+)?)\s*(.*)", line)
        if m:
            addr, mnemonic, rest = int(m.group(1), 16), m.group(2), m.group(3)
            target = re.match(r"([0-9a-f]+) <", rest)
            out.append((addr, mnemonic, rest,
                        int(target.group(1), 16) if target and mnemonic.startswith("j")
                        else None))
    return out


def test_the_build_has_updates_that_paths_join_after(rust_branches: Path) -> None:
    """The pattern itself: a LOCK update whose next instruction is a conditional jump's
    target (the path that skipped it joins there), and one that a conditional jump
    goes to (the update on the taken side, after an unconditional jump)."""
    insns = _tick(rust_branches)
    jcc = {t for _a, m, _r, t in insns if t is not None and m not in ("jmp", "call")}
    locked = [n for n, (_a, m, _r, _t) in enumerate(insns) if m.startswith("lock ")]
    assert any(insns[n + 1][0] in jcc for n in locked), insns
    assert any(insns[n][0] in jcc and insns[n - 1][1] == "jmp" for n in locked), insns


def test_the_plan_sees_every_update(rust_branches: Path) -> None:
    """No update left unseen, and the joined ones probed at their guarding jumps, one
    keeping the hits that fall through and one those that jump."""
    plan = rust_prometheus.make(Binary(str(rust_branches)), aggregate=False)
    assert not [p.unseen for p in plan.probes if p.unseen]
    sites = [s for p in plan.probes for s in p.sites]
    guards = [s for s in sites if "that guards the update" in s.why]
    assert any(s.keep_flags for s in guards) and any(s.skip_flags for s in guards), guards
    hist = next(p for p in plan.probes if p.name == "histogram")
    assert hist.at == "exit" and [s.role for s in hist.sites] == ["call", "return"]


@dataclass
class Told:
    """What the program said it did: its calls by (metric, method), its observations."""

    calls: Counter[tuple[str, str]]
    observed: list[float]


def _told(log: list[str]) -> Told:
    calls = next(line for line in log if "branches: calls " in line)
    observed = next(line for line in log if "branches: observed " in line)
    made: Counter[tuple[str, str]] = Counter()
    for item in calls.split("calls ", 1)[1].split():
        what, n = item.split("=")
        metric, op = what.split(":")
        made[(metric, op)] = int(n)
    return Told(made, [float(v) for v in observed.split("observed ", 1)[1].split()])


@pytest.fixture(scope="module")
def traced(privileged: None, rust_branches: Path, tmp_path_factory: pytest.TempPathFactory
           ) -> Traced:
    return trace(tmp_path_factory.mktemp("branches"), rust_branches, "--binary",
                 rust_branches)


@pytest.fixture(scope="module")
def told(traced: Traced) -> Told:
    return _told(traced.log)


def test_trace_sees_each_call_once(traced: Traced, told: Told) -> None:
    assert traced.noop_exit == 0, traced.noop_stderr
    assert "undecodable" not in traced.noop_stderr and \
        "warning" not in traced.noop_stderr, traced.noop_stderr
    assert Counter((x["metric"], x["op"]) for x in traced.lines) == told.calls
    assert sum(told.calls.values()) > TICKS  # the program did make them
    no_probe_left(traced.noop_pid)


def test_trace_values_end_where_its_metrics_do(traced: Traced) -> None:
    """Each series' last value is the program's; an integer's is read from memory apart
    from its update (marked racy), a float's from its swap's registers (not)."""
    last: dict[str, dict[str, Any]] = {}
    for x in traced.lines:
        if x["kind"] != "histogram":
            last[series_name(x["metric"], x["labels"])] = x
    assert {k: x["value"] for k, x in last.items()} == \
        {k: v for k, v in traced.metrics.items() if KINDS.get(k) in ("counter", "gauge")}
    for x in traced.lines:
        if x["kind"] != "histogram":
            assert x.get("racy", False) == isinstance(x["inc"], int), x


def test_trace_increments_and_observations(traced: Traced, told: Told) -> None:
    """inc() +1, dec() -1, inc_by(n) n (the program's n: 10 times a tick number); the
    histogram's observed values are the program's, each with its count."""
    for x in traced.lines:
        if x["kind"] == "histogram":
            continue
        if x["op"] == "inc_by":
            assert x["inc"] % 10 == 0 and 0 < x["inc"] <= 10 * TICKS, x
        else:
            assert x["inc"] == {"inc": 1, "dec": -1}[x["op"]], x
    hist = [x for x in traced.lines if x["kind"] == "histogram"]
    assert [x["value"] for x in hist] == told.observed
    assert [x["note"] for x in hist] == [f"count {k}" for k in range(1, len(hist) + 1)]
    assert sum(told.observed) == traced.metrics["branch_seconds_sum"]


def _key(name: str, pid: int, target: str, series: str, **more: str
         ) -> tuple[str, tuple[tuple[str, str], ...]]:
    return name, tuple(sorted({"target": target, "pid": str(pid), "metric": series,
                               "labels": "", **CRATE, **more}.items()))


def test_run_meta_metrics_equal_its_own(privileged: None, rust_branches: Path,
                                        agent_cleanup: list[Agent]) -> None:
    """noop run --binary: updates by op what the program says it called; each series'
    value what its /metrics says, and the increments too (every series started at 0);
    a histogram's value its count."""
    agent = start("--binary", rust_branches, "--mirror", "both")
    agent_cleanup.append(agent)
    ex, url, log = run_logged(rust_branches)
    told = _told(log)
    name = rust_branches.name
    try:
        truth = scrape(url)
        key = _key("noop_metric_updates_total", ex.pid, name, "branch_seconds", op="observe")
        got = settle(agent, key[0], dict(key[1]), told.calls[("branch_seconds", "observe")])
    finally:
        ex.terminate()
        ex.wait(timeout=10)
    updates = {k: v for k, v in got.items() if k[0] == "noop_metric_updates_total"}
    assert updates == {_key("noop_metric_updates_total", ex.pid, name, m, op=op): n
                       for (m, op), n in told.calls.items()}
    for series, kind in KINDS.items():
        want = truth[f"{series}_count"] if kind == "histogram" else truth[series]
        assert got[_key("noop_metric_value", ex.pid, name, series)] == want, series
        if kind != "histogram":
            assert got[_key("noop_metric_increments", ex.pid, name, series)] == want, series
    assert not [k for k in got if k[0] == "noop_events_undecodable_total"]
    code, err = agent.stop()
    assert code == 0, err
    no_probe_left(agent.proc.pid)
