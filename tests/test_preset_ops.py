"""Every update method the presets' rules name, fired for real: a program
(tests/programs/go/allops) calls each of client_golang's, on plain metrics and on *Vec
children, TICKS times, and tests/programs/rust/allops those of the prometheus crate
examples/rust-prometheus does not; ``noop --binary`` and ``noop run --binary`` must
survive all of them, say each one, and report what the program's own /metrics says
(Debian's stripped Prometheus died of ``Gauge.SetToCurrentTime``, which no test fired;
the crate's ``reset`` stores a constant, which the preset did not see).

Privileged: these load BPF programs and attach uprobes for real.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest
from harness.example import TICKS, Traced, run_example, trace
from harness.metrics import scrape, series_name
from harness.noop import Agent, no_probe_left, settle, start

from agent.presets.client_golang.facts import RULES, method_op

pytestmark = pytest.mark.attach  # run again through perf-event uprobes (--attach both)

# Each series of the program: (kind, the op it gets, the increment of one call; None:
# a set, or a histogram). Every call is made once per tick.
SERIES: dict[str, tuple[str, str, float | None]] = {
    "ops_counter_inc": ("counter", "Inc", 1),
    "ops_counter_add_whole": ("counter", "Add", 3),
    "ops_counter_add_frac": ("counter", "Add", 0.5),
    'ops_counter_vec{op="inc"}': ("counter", "Inc", 1),
    'ops_counter_vec{op="add_whole"}': ("counter", "Add", 2),
    'ops_counter_vec{op="add_frac"}': ("counter", "Add", 0.25),
    "ops_gauge_inc": ("gauge", "Inc", 1),
    "ops_gauge_dec": ("gauge", "Dec", -1),
    "ops_gauge_add": ("gauge", "Add", 1.5),
    "ops_gauge_sub": ("gauge", "Sub", -2.5),
    "ops_gauge_set": ("gauge", "Set", None),
    "ops_gauge_set_time": ("gauge", "SetToCurrentTime", None),
    'ops_gauge_vec{op="inc"}': ("gauge", "Inc", 1),
    'ops_gauge_vec{op="dec"}': ("gauge", "Dec", -1),
    'ops_gauge_vec{op="add"}': ("gauge", "Add", 4),
    'ops_gauge_vec{op="sub"}': ("gauge", "Sub", -0.75),
    'ops_gauge_vec{op="set"}': ("gauge", "Set", None),
    'ops_gauge_vec{op="set_time"}': ("gauge", "SetToCurrentTime", None),
    "ops_histogram": ("histogram", "Observe", None),
    "ops_histogram_exemplar": ("histogram", "Observe", None),  # ObserveWithExemplar
    'ops_histogram_vec{op="observe"}': ("histogram", "Observe", None),
    'ops_histogram_vec{op="exemplar"}': ("histogram", "Observe", None),  # WithExemplar
    "ops_counter_add_exemplar": ("counter", "Add", 2),  # AddWithExemplar
    "ops_counter_add_exemplar_frac": ("counter", "Add", 0.75),
    'ops_counter_vec{op="add_exemplar"}': ("counter", "Add", 1.25),
    "ops_summary": ("summary", "Observe", None),  # objectives: buffered
    "ops_summary_plain": ("summary", "Observe", None),  # no objectives: atomics
    'ops_summary_vec{op="observe"}': ("summary", "Observe", None),
    'ops_summary_plain_vec{op="observe"}': ("summary", "Observe", None),
}


def _histogram(series: str, part: str) -> str:
    """A histogram series' _count or _sum series in the program's /metrics."""
    name, brace, labels = series.partition("{")
    return f"{name}_{part}{brace}{labels}"


def test_the_program_fires_every_method_the_rules_name() -> None:
    """The program's calls cover the preset's rules: every (kind, op) a site can be
    tagged with."""
    named = {(r.kind, method_op(m)) for r in RULES for m in r.methods}
    assert {(kind, op) for kind, op, _inc in SERIES.values()} == named


@pytest.fixture(scope="module")
def traced(privileged: None, go_allops: Path, tmp_path_factory: pytest.TempPathFactory
           ) -> Traced:
    return trace(tmp_path_factory.mktemp("allops"), go_allops, "--binary", go_allops)


def test_trace_survives_every_update(traced: Traced) -> None:
    assert traced.noop_exit == 0, traced.noop_stderr
    assert re.search(r"SIGTERM: detached; \d+ events, 0 lost", traced.noop_stderr), \
        traced.noop_stderr
    assert "undecodable" not in traced.noop_stderr, traced.noop_stderr
    assert {x["pid"] for x in traced.lines} == {traced.pid}
    no_probe_left(traced.noop_pid)


def test_trace_one_line_per_call(traced: Traced) -> None:
    got = Counter((series_name(x["metric"], x["labels"]), x["kind"], x["op"])
                 for x in traced.lines)
    assert got == {(s, kind, op): TICKS for s, (kind, op, _inc) in SERIES.items()}


def test_trace_increments(traced: Traced) -> None:
    """An add says its argument, Inc +1, Dec -1, Sub the negated argument; a set (Set,
    SetToCurrentTime) and an observation none."""
    for x in traced.lines:
        _kind, _op, inc = SERIES[series_name(x["metric"], x["labels"])]
        assert x["inc"] == inc, x


def test_trace_marks_values_read_apart_from_the_update(traced: Traced) -> None:
    """A counter's value after Add of a whole number is valInt read from memory (after
    the xadd, or before it at the jump): marked racy; every other value is the update's
    own registers."""
    for x in traced.lines:
        kind, op, inc = SERIES[series_name(x["metric"], x["labels"])]
        whole = kind == "counter" and op == "Add" and float(inc or 0).is_integer()
        assert x.get("racy", False) == whole, x


def test_trace_last_values_equal_its_own_metrics(traced: Traced) -> None:
    last: dict[str, float] = {}
    counts: dict[str, str] = {}
    sums: Counter[str] = Counter()
    for x in traced.lines:
        series = series_name(x["metric"], x["labels"])
        if x["kind"] in ("histogram", "summary"):
            counts[series] = x["note"]
            sums[series] += x["value"]
        else:
            last[series] = x["value"]
    plain = {s for s, (kind, _op, _inc) in SERIES.items()
             if kind not in ("histogram", "summary")}
    assert last == {s: traced.metrics[s] for s in plain}
    hists = set(SERIES) - plain
    assert counts == {s: f"count {traced.metrics[_histogram(s, 'count')]:g}" for s in hists}
    assert sums == {s: traced.metrics[_histogram(s, "sum")] for s in hists}
    assert all(traced.metrics[_histogram(s, "count")] == TICKS for s in hists)


def _key(name: str, pid: int, target: str, series: str, **more: str
         ) -> tuple[str, tuple[tuple[str, str], ...]]:
    metric, _, rest = series.partition("{")
    labels = ",".join(f"{k}={v}" for k, v in sorted(re.findall(r'(\w+)="([^"]*)"', rest)))
    return name, tuple(sorted({"target": target, "pid": str(pid), "library": "client_golang",
                               "metric": metric, "labels": labels, **more}.items()))


def test_run_meta_metrics_equal_its_own(privileged: None, go_allops: Path, tmp_path: Path,
                                        agent_cleanup: list[Agent]) -> None:
    """noop run --binary, started first: every update counted by its op, each series'
    value and increments what the program says; nothing undecodable."""
    agent = start("--binary", go_allops, "--mirror", "both")
    agent_cleanup.append(agent)
    ex, url = run_example(go_allops)
    try:
        truth = scrape(url)
        last = _key("noop_metric_updates_total", ex.pid, go_allops.name,
                    'ops_summary_plain_vec{op="observe"}', op="Observe")
        got = settle(agent, last[0], dict(last[1]), TICKS)
    finally:
        ex.terminate()
        ex.wait(timeout=10)
    name = go_allops.name
    updates = {k: v for k, v in got.items() if k[0] == "noop_metric_updates_total"}
    assert updates == {_key("noop_metric_updates_total", ex.pid, name, s, op=op): TICKS
                       for s, (_kind, op, _inc) in SERIES.items()}
    for s, (kind, _op, _inc) in SERIES.items():
        observed = kind in ("histogram", "summary")
        want = truth[_histogram(s, "count")] if observed else truth[s]
        assert got[_key("noop_metric_value", ex.pid, name, s)] == want, s
        if not observed:  # every series started at 0
            assert got[_key("noop_metric_increments", ex.pid, name, s)] == want, s
    assert not [k for k in got if k[0] == "noop_events_undecodable_total"]
    code, err = agent.stop()
    assert code == 0, err
    assert "cannot decode" not in err, err
    no_probe_left(agent.proc.pid)


# The prometheus crate's preset takes any method of GenericCounter and GenericGauge that
# updates the metric's Value, for each number type. examples/rust-prometheus fires
# these (its tick; tests/test_rust_preset.py checks them), tests/programs/rust/allops
# the others.
CRATE = Path("/usr/share/cargo/registry")
EXAMPLE_FIRES = {("counter", "u64", "inc"), ("counter", "u64", "inc_by"),
                 ("counter", "f64", "inc_by"), *(("gauge", n, op) for n in ("i64", "f64")
                                                 for op in ("inc", "dec", "add", "sub", "set"))}
RUST_SERIES: dict[str, tuple[str, str, float | None]] = {
    "ops_float_counter_inc": ("f64", "inc", 1.0),
    "ops_int_counter_reset": ("u64", "reset", None),
    "ops_float_counter_reset": ("f64", "reset", None),
}


def test_the_rust_programs_fire_every_update_method_of_the_crate() -> None:
    """Every method of the crate's counters and gauges that updates their Value (read
    from Debian's crate source), on integers and floats, is fired by one of them."""
    source = next(CRATE.glob("prometheus-0.13.*"), None)
    assert source is not None, "Debian's prometheus crate (librust-prometheus-dev)"
    methods = {kind: set(re.findall(
        r"pub fn (\w+)\(&self[^)]*\) \{\s*(?:debug_assert!\([^;]*;\s*)?self\.v\."
        r"(?:inc|inc_by|dec|dec_by|set)\(", (source / "src" / f"{kind}.rs").read_text()))
        for kind in ("counter", "gauge")}
    assert methods == {"counter": {"inc", "inc_by", "reset"},
                       "gauge": {"inc", "dec", "add", "sub", "set"}}
    numbers = {"counter": ("u64", "f64"), "gauge": ("i64", "f64")}
    fired = EXAMPLE_FIRES | {("counter", n, op) for n, op, _inc in RUST_SERIES.values()}
    assert fired == {(k, n, op) for k, ops in methods.items() for n in numbers[k]
                     for op in ops}


@pytest.fixture(scope="module")
def rust_traced(privileged: None, rust_allops: Path, tmp_path_factory: pytest.TempPathFactory
                ) -> Traced:
    return trace(tmp_path_factory.mktemp("rust-allops"), rust_allops, "--binary", rust_allops)


def test_rust_trace_says_every_update(rust_traced: Traced) -> None:
    t = rust_traced
    assert t.noop_exit == 0, t.noop_stderr
    assert "undecodable" not in t.noop_stderr and "warning" not in t.noop_stderr, \
        t.noop_stderr  # no update left unseen (a reset was, before)
    assert Counter((x["metric"], x["op"], x["inc"]) for x in t.lines) == {
        (s, op, inc): TICKS for s, (_n, op, inc) in RUST_SERIES.items()}
    last = {x["metric"]: x["value"] for x in t.lines}
    assert last == {s: t.metrics[s] for s in RUST_SERIES}
    no_probe_left(t.noop_pid)


def test_rust_run_meta_metrics_equal_its_own(privileged: None, rust_allops: Path,
                                             tmp_path: Path, agent_cleanup: list[Agent]
                                             ) -> None:
    crate = {"library": "rust-prometheus"}
    agent = start("--binary", rust_allops, "--mirror", "both")
    agent_cleanup.append(agent)
    ex, url = run_example(rust_allops)
    try:
        truth = scrape(url)
        key = _key("noop_metric_updates_total", ex.pid, rust_allops.name,
                   "ops_float_counter_reset", op="reset", **crate)
        got = settle(agent, key[0], dict(key[1]), TICKS)
    finally:
        ex.terminate()
        ex.wait(timeout=10)
    updates = {k: v for k, v in got.items() if k[0] == "noop_metric_updates_total"}
    assert updates == {_key("noop_metric_updates_total", ex.pid, rust_allops.name, s,
                            op=op, **crate): TICKS for s, (_n, op, _i) in RUST_SERIES.items()}
    for s in RUST_SERIES:
        assert got[_key("noop_metric_value", ex.pid, rust_allops.name, s, **crate)] == \
            truth[s], s
        assert got[_key("noop_metric_increments", ex.pid, rust_allops.name, s, **crate)] == \
            truth[s], s  # started at 0
    assert not [k for k in got if k[0] == "noop_events_undecodable_total"]
    code, err = agent.stop()
    assert code == 0, err
    no_probe_left(agent.proc.pid)
