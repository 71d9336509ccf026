"""The prometheus crate's updates made later than the call that asks for them
(tests/programs/rust/deferred): a histogram timer's observation when it stops or is
dropped, ``observe_closure_duration``, and the flushes of local counters and
histograms (``counter.local()``, ``histogram.local()``, their ``*Vec`` forms, and a
``LocalHistogram``'s drop). A timer observes through ``HistogramCore::observe`` like
``observe``; a local counter's flush is one ``GenericCounter::inc_by`` of its sum; a
local histogram's flush adds its count, buckets and sum to the shared histogram's at
once, with a ``lock xadd`` of the count outside ``HistogramCore::observe``.

``noop --binary`` must print one line per update of a shared metric (op ``flush`` for
a flush, its increment what was flushed), none for what stays local (a local counter
dropped unflushed, a flush of nothing, ``stop_and_discard``), and ``noop run --binary``
must count them by op and end where the program's own /metrics does.

The build's code is checked first: without these paths compiled in, the tests would
pass on a build that does not have them. Privileged, except that check and the plan's.
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

CRATE = Path("/usr/share/cargo/registry")
# Observations each call makes on its histogram; stop_and_discard's timer none.
TIMERS = {"ops_timer_observe_duration": 1, "ops_timer_stop_and_record": 1,
          "ops_timer_dropped": 1, "ops_closure_duration": 1,
          "ops_timer_stop_and_discard": 0}
HISTOGRAMS = {"ops_local_histogram", "ops_local_histogram_dropped",
              'ops_local_histogram_vec{op="flush"}'}
COUNTERS = {"ops_local_int_counter", "ops_local_counter", 'ops_local_counter_vec{op="flush"}'}
UNTOUCHED = {"ops_timer_stop_and_discard", "ops_local_int_counter_dropped"}


def _functions(binary: Path) -> dict[str, list[str]]:
    """objdump's functions of the binary: name -> its instructions' mnemonics."""
    text = subprocess.run(["objdump", "-d", "--no-show-raw-insn", "-C", str(binary)],
                          check=True, capture_output=True, text=True).stdout
    out: dict[str, list[str]] = {}
    for block in text.split("\n\n"):
        head = re.search(r"^[0-9a-f]+ <(.+)>:$", block, re.M)
        if head:
            out[head.group(1)] = [m.group(1) for m in re.finditer(
                r"^\s*[0-9a-f]+:\s+(\S+(?: \S+)?)", block, re.M)]
    return out


def test_the_crate_flushes_a_local_histogram_on_drop_and_not_a_local_counter() -> None:
    """What the program's truth assumes of the crate: a ``LocalHistogram`` flushes when
    dropped, a ``GenericLocalCounter`` does not (it has no Drop), and a flush of nothing
    returns early."""
    source = next(CRATE.glob("prometheus-0.13.*"), None)
    assert source is not None, "Debian's prometheus crate (librust-prometheus-dev)"
    histogram = (source / "src" / "histogram.rs").read_text()
    counter = (source / "src" / "counter.rs").read_text()
    assert re.search(r"impl Drop for LocalHistogram \{\s*fn drop\(&mut self\) \{\s*"
                     r"self\.flush\(\)", histogram)
    assert "Drop for GenericLocalCounter" not in counter
    assert re.search(r"if \*self\.val\.borrow\(\) == P::T::from_i64\(0\) \{\s*return;", counter)
    assert re.search(r"if self\.count == 0 \{\s*return;", histogram)


def test_the_build_has_the_deferred_paths(rust_deferred: Path) -> None:
    """The paths are compiled code: a timer's observation (``lock xadd`` on the count,
    ``lock cmpxchg`` on the sum) in ``stop_and_record`` and in the timer's ``drop``; a
    local histogram's flush, its own out-of-line function, with a ``lock xadd`` of the
    local count, ``lock add`` of the buckets and the shard's count, and the sum's swap;
    and the counters' flushes inlined into the program's code (``lock add`` of an
    integer counter's sum, a swap of a float's)."""
    fns = _functions(rust_deferred)

    def body(name: str) -> list[str]:
        return next(v for k, v in fns.items() if k.startswith(name))

    for timer in ("prometheus::histogram::HistogramTimer::stop_and_record",
                  "<prometheus::histogram::HistogramTimer as core::ops::drop::Drop>::drop"):
        assert {"lock xadd", "lock cmpxchg"} <= set(body(timer)), timer
    flush = body("prometheus::histogram::LocalHistogram::flush")
    assert flush.count("lock xadd") == 1 and flush.count("lock cmpxchg") == 1, flush
    assert flush.count("lock add") == 2, flush
    counters = body("deferred::Metrics::counters")
    assert counters.count("lock add") == 2 and counters.count("lock cmpxchg") == 1, counters


def test_the_plan_sees_every_deferred_update(rust_deferred: Path) -> None:
    """Nothing left unseen; the counters' flushes tagged ``flush``; the local histogram's
    flush probed before its xadd (where the register holds the observations flushed),
    at the jump that skips an empty flush, paired with its sum's swap."""
    plan = rust_prometheus.make(Binary(str(rust_deferred)), aggregate=False)
    assert not [p.unseen for p in plan.probes if p.unseen]
    tags = Counter(s.tag for p in plan.probes for s in p.sites if p.name.startswith("counter"))
    assert tags == {"counter.flush": 3}
    flush = next(p for p in plan.probes if p.name == "histogram_flush")
    assert [(s.tag, s.role) for s in flush.sites] == [("histogram.flush", "call"),
                                                      ("histogram.flush", "return")]
    assert "before the lock xadd" in flush.sites[0].why and flush.sites[0].skip_flags, \
        flush.sites[0]
    timers = next(p for p in plan.probes if p.name == "histogram")
    assert {s.tag for s in timers.sites} == {"histogram.observe"}


@dataclass
class Told:
    """What the program said it did: its calls by (series, method), and each flush's
    (observations, sum) by series (a counter's: (sum, sum)), empty ones too."""

    calls: Counter[tuple[str, str]]
    flushes: dict[str, list[tuple[float, float]]]

    def flushed(self, series: str) -> list[tuple[float, float]]:
        """The flushes that reached the shared metric (the crate skips empty ones)."""
        return [f for f in self.flushes.get(series, []) if f[0] > 0]

    def updates(self) -> Counter[tuple[str, str]]:
        """Updates of each shared series, by the op noop gives them."""
        want: Counter[tuple[str, str]] = Counter()
        for (series, _method), n in self.calls.items():
            if TIMERS.get(series):
                want[(series, "observe")] += n * TIMERS[series]
        for series in self.flushes:
            if self.flushed(series):
                want[(series, "flush")] = len(self.flushed(series))
        return want


def _told(log: list[str]) -> Told:
    calls = next(line for line in log if "deferred: calls " in line)
    made: Counter[tuple[str, str]] = Counter()
    for item in calls.split("calls ", 1)[1].split():
        what, n = item.split("=")
        series, method = what.split(":")
        made[(series, method)] = int(n)
    flushes: dict[str, list[tuple[float, float]]] = {}
    for line in log:
        m = re.search(r"deferred: flush (\S+) (\S+)(?: (\S+))?$", line)
        if m:
            size = float(m.group(2))
            flushes.setdefault(m.group(1), []).append(
                (size, float(m.group(3)) if m.group(3) else size))
    return Told(made, flushes)


@pytest.fixture(scope="module")
def traced(privileged: None, rust_deferred: Path, tmp_path_factory: pytest.TempPathFactory
           ) -> Traced:
    return trace(tmp_path_factory.mktemp("deferred"), rust_deferred, "--binary",
                 rust_deferred)


@pytest.fixture(scope="module")
def told(traced: Traced) -> Told:
    return _told(traced.log)


def _series(x: dict[str, Any]) -> str:
    return series_name(x["metric"], x["labels"])


def test_the_program_made_its_calls(told: Told) -> None:
    """Its own account: every call each tick, flushes on the ticks it says, some of
    them empty (the crate skips those) and some not."""
    assert {s for s, _m in told.calls} == \
        {s.partition("{")[0] for s in {*TIMERS, *HISTOGRAMS, *COUNTERS, *UNTOUCHED}}
    assert all(n == TICKS for (s, _m), n in told.calls.items() if s in TIMERS)
    for series in HISTOGRAMS | COUNTERS:
        method = "drop" if series.endswith("_dropped") else "flush"
        assert len(told.flushes[series]) == told.calls[(series.partition("{")[0], method)]
    assert any(f[0] == 0 for f in told.flushes["ops_local_histogram"])
    assert any(f[0] == 0 for f in told.flushes["ops_local_int_counter"])


def test_trace_one_line_per_update_of_a_shared_metric(traced: Traced, told: Told) -> None:
    assert traced.noop_exit == 0, traced.noop_stderr
    assert "undecodable" not in traced.noop_stderr and \
        "warning" not in traced.noop_stderr, traced.noop_stderr
    assert Counter((_series(x), x["op"]) for x in traced.lines) == told.updates()
    assert not {_series(x) for x in traced.lines} & UNTOUCHED
    assert traced.metrics["ops_local_int_counter_dropped"] == 0
    assert traced.metrics["ops_timer_stop_and_discard_count"] == 0
    no_probe_left(traced.noop_pid)


def test_trace_flushes_say_what_was_flushed(traced: Traced, told: Told) -> None:
    """A counter's flush: its increment the local sum, its value the counter's after it.
    A histogram's: its increment the observations flushed, its value their sum, its
    note the count after it; one line per flush that reached the shared histogram."""
    for series in COUNTERS | HISTOGRAMS:
        lines = [x for x in traced.lines if _series(x) == series]
        assert [(x["inc"], x["value"] if series in HISTOGRAMS else x["inc"])
                for x in lines] == told.flushed(series), series
    for series in HISTOGRAMS:
        counts = [x["note"] for x in traced.lines if _series(x) == series]
        sizes = [int(n) for n, _sum in told.flushed(series)]
        assert counts == [f"count {sum(sizes[:k + 1])}" for k in range(len(sizes))], series


def test_trace_ends_where_its_metrics_do(traced: Traced) -> None:
    """Each counter's last value, each histogram's last count and the sum of its values
    are the program's (a timer's values are times: their sum as the program adds them,
    to rounding)."""
    last = {_series(x): x for x in traced.lines}
    for series in COUNTERS:
        assert last[series]["value"] == traced.metrics[series], series
    for series in HISTOGRAMS | {s for s, n in TIMERS.items() if n}:
        name, brace, labels = series.partition("{")
        count, total = (f"{name}_{part}{brace}{labels}" for part in ("count", "sum"))
        assert last[series]["note"] == f"count {traced.metrics[count]:g}", series
        values = sum(x["value"] for x in traced.lines if _series(x) == series)
        if series in HISTOGRAMS:
            assert values == traced.metrics[total], series
        else:
            assert values == pytest.approx(traced.metrics[total], rel=1e-9), series


def _key(name: str, pid: int, target: str, series: str, **more: str
         ) -> tuple[str, tuple[tuple[str, str], ...]]:
    metric, _, rest = series.partition("{")
    labels = ",".join(f"{k}={v}" for k, v in sorted(re.findall(r'(\w+)="([^"]*)"', rest)))
    return name, tuple(sorted({"target": target, "pid": str(pid), "metric": metric,
                               "labels": labels, "library": "rust-prometheus",
                               **more}.items()))


def test_run_meta_metrics_equal_its_own(privileged: None, rust_deferred: Path,
                                        agent_cleanup: list[Agent]) -> None:
    """noop run --binary: updates by op what the program's calls and non-empty flushes
    make; each series' value what its /metrics says (a histogram's: its count, grown
    by each flush's observations), and the increments too (every series started at
    0); nothing for what stayed local."""
    agent = start("--binary", rust_deferred, "--mirror", "both")
    agent_cleanup.append(agent)
    ex, url, log = run_logged(rust_deferred)
    told = _told(log)
    name = rust_deferred.name
    last = 'ops_local_histogram_vec{op="flush"}'
    try:
        truth = scrape(url)
        key = _key("noop_metric_updates_total", ex.pid, name, last, op="flush")
        got = settle(agent, key[0], dict(key[1]), len(told.flushed(last)))
    finally:
        ex.terminate()
        ex.wait(timeout=10)
    updates = {k: v for k, v in got.items() if k[0] == "noop_metric_updates_total"}
    assert updates == {_key("noop_metric_updates_total", ex.pid, name, s, op=op): n
                       for (s, op), n in told.updates().items()}
    for series, _op in told.updates():
        metric, brace, labels = series.partition("{")
        want = truth[series] if series in COUNTERS else truth[f"{metric}_count{brace}{labels}"]
        assert got[_key("noop_metric_value", ex.pid, name, series)] == want, series
        assert got[_key("noop_metric_increments", ex.pid, name, series)] == want, series
    assert not [k for k in got if dict(k[1]).get("metric") in UNTOUCHED]
    assert not [k for k in got if k[0] == "noop_events_undecodable_total"]
    code, err = agent.stop()
    assert code == 0, err
    no_probe_left(agent.proc.pid)
