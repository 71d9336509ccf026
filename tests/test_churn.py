"""Metrics made again for every request (tests/programs/go/churn and rust/churn): a
registry per round, its metrics made, updated, gathered and dropped (Go: the garbage
collector forced every ten rounds), so that new metric objects take the addresses of
freed ones. Under ``noop run --binary`` each (metric, labels) the program makes is one
series whose value is its newest object's and whose updates and increments are those
of every round, as the program itself counts them; the rows of objects that are gone
leave the kernel's map. Privileged: real BPF."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest
from harness.metrics import Samples
from harness.noop import Agent, drained, start, stopped

pytestmark = pytest.mark.attach  # run again through perf-event uprobes (--attach both)

ROUNDS = 3000  # 6 objects a round: more than the kernel's rows per update kind (4,096)


def _run(binary: Path, agent: Agent, rust: bool) -> tuple[dict[str, Any], Samples]:
    """Run the program's rounds under ``agent``; its truth and noop's samples once the
    ring is drained and the rows of objects that are gone have left the map. About
    2,000 new metric objects a second: a busy exporter's rate."""
    flags = ["-pace", "2000", "-linger", "120"] if rust else \
        ["-gc", "10", "-pace", "500us", "-linger", "120s"]
    prog = subprocess.Popen([binary, "-rounds", str(ROUNDS), *flags], text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert prog.stdout is not None and prog.stdin is not None
        assert prog.stdout.readline().strip() == "ready"
        if rust:  # it starts on a line
            prog.stdin.write("go\n")
            prog.stdin.flush()
        else:  # on SIGUSR1
            prog.send_signal(signal.SIGUSR1)
        truth = json.loads(prog.stdout.readline())
        got: Samples = {}
        for _ in range(60):  # rows of replaced objects leave at noop's next sweep
            got = agent.metrics()
            if drained(got) and _rows(got) <= LIVE_ROWS:
                break
            subprocess.run(["sleep", "0.5"], check=True)
        return {"pid": prog.pid, **truth}, got
    finally:
        prog.kill()
        prog.wait()


LIVE_ROWS = 16  # the last round's objects, by site (a counter's Inc and Add apart)


def _rows(got: Samples) -> float:
    return sum(v for (name, _l), v in got.items() if name == "noop_aggregate_rows")


def _series(got: Samples, name: str) -> dict[tuple[str, str], float]:
    out: dict[tuple[str, str], float] = {}
    for (n, labels), v in got.items():
        if n == name:
            d = dict(labels)
            key = (d["metric"], d["labels"])
            out[key] = out.get(key, 0.0) + v  # updates: summed over their ops
    return out


# A sweep keeps up with the program's rate when noop has a core: timed by the machine,
# so alone (beside three other workers on two cores, the map filled between sweeps).
@pytest.mark.serial
def test_go_made_again_is_one_series_with_every_update(
        privileged: None, go_churn: Path, agent_cleanup: list[Agent]) -> None:
    _check(go_churn, False, agent_cleanup)


@pytest.mark.serial  # as above
def test_rust_made_again_is_one_series_with_every_update(
        privileged: None, rust_churn: Path, agent_cleanup: list[Agent]) -> None:
    _check(rust_churn, True, agent_cleanup)


def _check(binary: Path, rust: bool, agent_cleanup: list[Agent]) -> None:
    agent = start("--binary", binary, "--max-overhead", "none", "--mirror", "both")
    agent_cleanup.append(agent)
    truth, got = _run(binary, agent, rust)
    want_value, want_updates, want_incs = {}, {}, {}
    for s in truth["series"]:
        labels = s["labels"] if rust else ",".join(
            f"{k}={v}" for k, v in sorted(s["labels"].items()))
        key = (s["name"], labels)
        want_value[key], want_updates[key] = s["value"], s["updates"]
        if not (rust and s["name"] == "churn_probe_success"):
            # the crate's float gauge set: no increments (the store leaves no old value)
            want_incs[key] = s["increments"]
    assert _series(got, "noop_metric_value") == want_value
    assert _series(got, "noop_metric_updates_total") == want_updates
    incs = _series(got, "noop_metric_increments")
    assert incs.keys() == want_incs.keys()
    assert all(incs[k] == pytest.approx(v, rel=1e-9) for k, v in want_incs.items()), incs
    # one row per (process, metric, labels): a scraper keeps them all
    rows = [dict(labels) for (n, labels), _v in got.items() if n == "noop_metric_value"]
    assert len({(r["pid"], r["metric"], r["labels"]) for r in rows}) == len(rows)
    assert all(r["pid"] == str(truth["pid"]) for r in rows)
    assert not any(v for (n, _l), v in got.items()
                   if n == "noop_metric_unnamed_updates_total")
    # no update past the kernel's rows: the map is swept as fast as objects are made
    overflow = [v for (n, _l), v in got.items() if n == "noop_metric_overflow_updates_total"]
    assert overflow and not any(overflow)
    assert _rows(got) <= LIVE_ROWS, "rows of replaced objects stayed in the kernel's map"
    assert not [k for k in got if k[0] == "noop_events_undecodable_total"]
    assert not any(v for (n, _l), v in got.items() if n == "noop_events_lost_total")
    stopped(agent)


@pytest.fixture(scope="module")
def go_many(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from harness.programs import PROGRAMS, go_build, go_toolchain

    out = tmp_path_factory.mktemp("manyseries")
    return go_build(go_toolchain("1.19"), out / "manyseries", out / "gocache",
                    PROGRAMS / "go" / "manyseries")


def test_updates_past_the_kernels_rows_are_counted(
        privileged: None, go_many: Path, agent_cleanup: list[Agent]) -> None:
    """6,000 live children of one CounterVec, more than the rows the preset keeps in
    the kernel per update kind (4,096): every increment is in a series, in the
    unnamed count or in the overflow count, and the overflow count is not zero."""
    agent = start("--binary", go_many, "--max-overhead", "none", "--mirror", "off")
    agent_cleanup.append(agent)
    prog = subprocess.Popen([go_many, "-series", "6000", "-each", "3", "-pace", "500us"],
                            text=True, stdout=subprocess.PIPE)
    try:
        assert prog.stdout is not None
        total = int(prog.stdout.readline())
        got: Samples = {}
        for _ in range(60):
            got = agent.metrics()
            if drained(got):
                break
            subprocess.run(["sleep", "0.5"], check=True)
    finally:
        prog.kill()
        prog.wait()
    named = sum(_series(got, "noop_metric_updates_total").values())
    unnamed = sum(v for (n, _l), v in got.items() if n == "noop_metric_unnamed_updates_total")
    over = sum(v for (n, _l), v in got.items() if n == "noop_metric_overflow_updates_total")
    assert over > 0 and named + unnamed + over == total, (named, unnamed, over, total)
    stopped(agent)
