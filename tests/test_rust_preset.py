"""End to end, against the truth: the preset for Rust's prometheus crate on
examples/rust-prometheus, a release build whose update methods exist only inlined,
with several updater threads at once and its /metrics scraped on every tick (so a
histogram's scrape-time folds run meanwhile and must not count). What noop prints
under ``noop --binary``, and exports under ``noop run --binary``, must equal what the
example says about itself; and so must noop attached while the example already runs.

Privileged: these load BPF programs and attach uprobes for real.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from harness.metrics import scrape, series_name
from harness.noop import Agent, no_probe_left, one_line_each, settle, start, tracing, wait_for

TICKS, THREADS = 11, 3  # a prime number of ticks: no two expected counts coincide
N = TICKS * THREADS  # each updater thread makes every update of a tick

# What each thread does on every tick: (op, increment) per update, by metric.
PER_TICK: dict[str, list[tuple[str, float | None]]] = {
    "fake_counter": [("inc", 1)],
    "another_fake_counter": [("inc", 1), ("inc", 1)],
    "fake_gauge": [("inc", 1.0)],
    "another_fake_gauge": [("add", 5.0)],
    "sub_fake_gauge": [("sub", -7.0)],
    "dec_fake_gauge": [("dec", -1)],
    "fake_set_gauge": [("set", None)],
    "fake_set_int_gauge": [("set", None)],
    "fake_add_int_gauge": [("add", 4), ("sub", -1)],
    "fake_float_counter": [("inc_by", 0.25)],
    "fake_int_counter": [("inc_by", 3)],
    "fake_tick_float_counter": [("inc_by", None)],  # half the tick number: see below
    "fake_dec_float_gauge": [("dec", -1.0)],
    "fake_inc_int_gauge": [("inc", 1)],
    "fake_requests_total": [("inc", 1)],
    "fake_histogram": [("observe", None)],
}


def _updates_made() -> Counter[tuple[str, str]]:
    """(metric, op): how many updates the example makes in TICKS ticks."""
    return Counter({(metric, op): N * [o for o, _ in ops].count(op)
                    for metric, ops in PER_TICK.items() for op, _inc in ops})


@dataclass
class Run:
    lines: list[dict[str, Any]]
    metrics: dict[str, float]  # the example's /metrics after its last tick
    scrapes: int
    pid: int
    noop_stderr: str
    noop_exit: int
    noop_pid: int


def _example(binary: Path, ticks: int, period: str = "40ms") -> subprocess.Popen[str]:
    return subprocess.Popen([str(binary), "-listen", "127.0.0.1:0", "-period", period,
                             "-ticks", str(ticks), "-threads", str(THREADS), "-linger", "60s"],
                            stderr=subprocess.PIPE, text=True)


def _url(ex: subprocess.Popen[str]) -> str:
    assert ex.stderr is not None
    log = wait_for(ex.stderr, r"serving http://", 60)
    return next(m.group(1) for line in log if (m := re.search(r"(http://\S+/metrics)", line)))


def _ticks(ex: subprocess.Popen[str], url: str, upto: int) -> int:
    """Follow the example to tick ``upto``, scraping its /metrics on every tick; the
    number of scrapes."""
    scrapes = 0
    while True:
        (line,) = wait_for(ex.stderr, r"tick \d+$", 60)[-1:]
        scrape(url)
        scrapes += 1
        if int(line.split()[-1]) >= upto:
            return scrapes


def _trace(tmp_path: Path, binary: Path) -> Run:
    """noop started first, then the example for TICKS ticks."""
    with tracing(tmp_path, "--binary", binary) as session:
        ex = _example(binary, TICKS)
        try:
            url = _url(ex)
            scrapes = _ticks(ex, url, TICKS)
            metrics = scrape(url)
            time.sleep(1.0)  # let noop drain the ring buffer
        finally:
            ex.terminate()
            ex.wait(timeout=10)
    return Run(session.lines, metrics, scrapes, ex.pid, session.stderr, session.exit or 0,
               session.pid)


@pytest.fixture(scope="module")
def traced(privileged: None, rust_example: Path, tmp_path_factory: pytest.TempPathFactory
           ) -> Run:
    return _trace(tmp_path_factory.mktemp("rust-preset"), rust_example)


def _latest(lines: list[dict[str, Any]]) -> dict[str, float]:
    """Each counter's and gauge's latest value as the lines tell it. An integer's value
    is read from memory after the update, so the last line has every update before
    it. A float's is exact from its compare-and-swap's registers, but racing threads'
    lines may come in another order: its latest is the end of the chain of values
    (the one no other line's update started from: value - increment)."""
    by: dict[str, list[dict[str, Any]]] = {}
    for x in lines:
        if x["kind"] in ("counter", "gauge"):
            by.setdefault(series_name(x["metric"], x["labels"]), []).append(x)
    out = {}
    for series, xs in by.items():
        if any(isinstance(x["value"], float) and x["inc"] is not None for x in xs):
            ends = {x["value"] for x in xs} - {x["value"] - x["inc"] for x in xs}
            assert len(ends) == 1, (series, sorted(ends))
            out[series] = ends.pop()
        else:
            out[series] = xs[-1]["value"]
    return out


def _truth(metrics: dict[str, float]) -> dict[str, float]:
    return {k: v for k, v in metrics.items() if k.startswith(("fake_", "another_", "sub_",
                                                               "dec_"))
            and not k.startswith("fake_histogram")}


def test_noop_ran_and_detached(traced: Run) -> None:
    assert traced.noop_exit == 0, traced.noop_stderr
    assert {x["pid"] for x in traced.lines} == {traced.pid}
    assert re.search(r"SIGTERM: detached; \d+ events, 0 lost", traced.noop_stderr), \
        traced.noop_stderr
    no_probe_left(traced.noop_pid)
    assert traced.scrapes >= TICKS


def test_last_values_equal_its_own_metrics(traced: Run) -> None:
    truth = _truth(traced.metrics)
    assert len(truth) == 14 + 6, truth  # the plain series, and the vec's six children
    assert _latest(traced.lines) == truth


def test_one_line_per_update(traced: Run) -> None:
    """Every update once, whatever was inlined where and however the threads raced;
    the scrapes' folds of the histogram (one per tick) none."""
    assert Counter((x["metric"], x["op"]) for x in traced.lines) == _updates_made()
    children = Counter(series_name(x["metric"], x["labels"]) for x in traced.lines
                      if x["metric"] == "fake_requests_total")
    assert {k: float(v) for k, v in children.items()} == {
        k: v for k, v in traced.metrics.items() if k.startswith("fake_requests_total")}


def test_increments_are_the_arguments(traced: Run) -> None:
    """add(x) prints x, sub(y) -y, dec() -1, inc() +1; a set, none. A float increment
    known only at run time (half the tick number) is new - old, exact here."""
    for x in traced.lines:
        allowed = PER_TICK[x["metric"]]
        if x["metric"] == "fake_tick_float_counter":
            assert x["op"] == "inc_by" and x["inc"] in {t * 0.5 for t in range(1, TICKS + 1)}
        elif x["kind"] != "histogram":
            assert (x["op"], x["inc"]) in allowed, x
            assert type(x["inc"]) is type(allowed[0][1]), x  # integers stay integers
    incs = Counter(x["inc"] for x in traced.lines if x["metric"] == "fake_tick_float_counter")
    assert incs == {t * 0.5: THREADS for t in range(1, TICKS + 1)}


def test_float_values_are_exact(traced: Run) -> None:
    """Each float update's value is its own, from the registers of its swap: over all
    threads, every step of the sum exactly once."""
    steps = {"fake_float_counter": 0.25, "fake_gauge": 1.0, "another_fake_gauge": 5.0,
             "sub_fake_gauge": -7.0, "fake_dec_float_gauge": -1.0}
    for metric, step in steps.items():
        values = sorted((x["value"] for x in traced.lines if x["metric"] == metric),
                        key=abs)
        assert values == [step * k for k in range(1, N + 1)], metric


def test_histogram_count(traced: Run) -> None:
    counts = [int(re.match(r"count (\d+)", x["note"]).group(1))  # type: ignore[union-attr]
              for x in traced.lines if x["metric"] == "fake_histogram"]
    assert sorted(counts) == list(range(1, N + 1))
    assert traced.metrics["fake_histogram_count"] == N


def test_attached_while_it_runs(privileged: None, rust_example: Path, tmp_path: Path) -> None:
    """noop started while the example is already updating: what it prints from then on
    ends where the example's own /metrics does."""
    ticks = 200
    ex = _example(rust_example, ticks)
    try:
        url = _url(ex)
        wait_for(ex.stderr, r"tick 3$", 60)
        with tracing(tmp_path, "--binary", rust_example) as session:
            _ticks(ex, url, ticks)
            metrics = scrape(url)
            time.sleep(1.0)
    finally:
        ex.terminate()
        ex.wait(timeout=10)
    assert session.exit == 0, session.stderr
    assert session.lines, "noop saw no update"
    assert _latest(session.lines) == _truth(metrics)


def _meta(agent: Agent, pid: int, truth: dict[str, float]) -> dict[tuple[str, Any], float]:
    base = {"target": "rust-prometheus", "pid": str(pid), "library": "rust-prometheus"}
    return settle(agent, "noop_metric_updates_total",
                  {**base, "metric": "fake_counter", "labels": "", "op": "inc"},
                  truth["fake_counter"])


def _key(name: str, pid: int, series: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    metric, _, rest = series.partition("{")
    labels = ",".join(f"{k}={v}" for k, v in sorted(re.findall(r'(\w+)="([^"]*)"', rest)))
    return name, tuple(sorted({"target": "rust-prometheus", "pid": str(pid),
                               "library": "rust-prometheus", "metric": metric,
                               "labels": labels}.items()))


def test_run_meta_metrics_equal_its_own(privileged: None, rust_example: Path,
                                        tmp_path: Path, agent_cleanup: list[Agent]) -> None:
    """noop run --binary, started first: each series' value, updates by operation and
    increments equal what the example says and did."""
    agent = start("--binary", rust_example, "--mirror", "both")
    agent_cleanup.append(agent)
    ex = _example(rust_example, TICKS)
    try:
        url = _url(ex)
        _ticks(ex, url, TICKS)
        truth = scrape(url)
        got = _meta(agent, ex.pid, truth)
    finally:
        ex.terminate()
        ex.wait(timeout=10)
    for series, want in _truth(truth).items():
        assert got.get(_key("noop_metric_value", ex.pid, series)) == want, series
        incs = got.get(_key("noop_metric_increments", ex.pid, series))
        if series == "fake_set_gauge":  # a float set: the old value is gone, the new
            assert incs is None          # one came in an XMM register
        else:
            assert incs == want, series  # all started at 0
    assert got[_key("noop_metric_value", ex.pid, "fake_histogram")] == N
    summed: Counter[tuple[str, str]] = Counter()
    for (n, k), v in got.items():
        if n == "noop_metric_updates_total" and dict(k)["pid"] == str(ex.pid):
            summed[(dict(k)["metric"], dict(k)["op"])] += int(v)
    assert summed == _updates_made()


@pytest.mark.builds  # each asks for its build by name
@pytest.mark.parametrize("what", ["no-crate", "no-debug-info", "line-tables-only",
                                  "unoptimized"])
def test_what_the_preset_needs(noop: Any, request: pytest.FixtureRequest, what: str) -> None:
    """A Rust program without the prometheus crate, built without debug info, with
    line tables only, or without optimization: one line that says what the preset
    looks for and what is missing."""
    path = request.getfixturevalue({"no-crate": "rust_ledger",
                                    "no-debug-info": "rust_example_nodebug",
                                    "line-tables-only": "rust_example_lines",
                                    "unoptimized": "rust_example_unoptimized"}[what])
    done = noop("--binary", path, "--duration", "1")
    assert done.returncode == 2, done.stderr
    (line,) = one_line_each(done.stderr)
    assert line.startswith(f"noop: {path}")
    if what == "no-crate":
        assert "without the prometheus crate" in line and "probes.yaml" in line
    elif what == "no-debug-info":
        assert "without debug info" in line and "debug = 2" in line
    elif what == "line-tables-only":
        assert "no DWARF types" in line and "debug = 2" in line
    else:
        assert "compiled out of line" in line and "--release" in line
