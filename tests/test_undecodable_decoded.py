"""What noop cannot decode that comes to it decoded: events handed to the preset
printer, the meta-metrics and user metrics, and in-kernel rows read at a scrape (the
preset's meta-metrics, user metrics, rows whose bytes are not their aggregate's
layout). Records, from the ring on, are tests/test_undecodable.py's. Unit tests: no
root, no BPF.
"""

from __future__ import annotations

import io
import struct
from collections import Counter
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_undecodable import (
    COMMON,
    GO_CASE,
    GO_TAGS,
    RUST,
    RUST_CASE,
    SETTINGS,
    SPEC_CASE,
    SPEC_PLAN,
    WHO,
    Case,
    Want,
    _Maps,
    _probe,
    _said,
    _undecodable_samples,
    _v,
    _values,
)

from agent.kernel import aggregate
from agent.kernel.aggregate import Row
from agent.kernel.codegen import Program
from agent.kernel.events import Event, layout
from agent.output import printer
from agent.output.exporter import Session
from agent.output.meta import PresetMeta
from agent.output.undecodable import Tally, Undecodable
from agent.output.usermetrics import UserMetrics
from agent.plan import rust_prometheus
from agent.plan.model import Aggregate, Column, MetricPlan, Plan, ProbePlan

# ---------------------------------------------------------------------------------------
# Events handed over decoded: what a record can never hold (None without a reason), and
# each value a path reads missing or of a wrong type, or an index out of range.

USED = {"counter_int": ("before", "valInt", "valBits"), "counter_add": ("delta", "valInt",
                                                                        "valBits"),
        "counter_float": ("old", "new", "valInt"), "gauge_add": ("old", "new"),
        "gauge_set": ("new",), "histogram": ("before",), "counter_u64": ("delta", "value",
                                                                         "before"),
        "gauge_f64": ("delta", "value", "before")}
RUST_USED = {"histogram": ("before", "observed")}
NOT_NUMBERS = st.one_of(st.text(max_size=3), st.binary(max_size=3), st.booleans(),
                        st.lists(st.integers(), max_size=2))


@st.composite
def events(draw: st.DrawFn, case: Case) -> tuple[Event, Want | None]:
    """A decoded event of one of ``case``'s good probes and sites, spoilt in one way
    (or not); what it then is."""
    pi = draw(st.sampled_from(case.good))
    probe = case.plan.probes[pi]
    site = draw(st.integers(0, len(probe.sites) - 2))
    values = draw(_values(case.program.layouts[pi]))
    used = (RUST_USED if case is RUST_CASE else {}).get(probe.name, USED[probe.name])
    name = draw(st.sampled_from(used))
    how = draw(st.sampled_from(["good", "drop", "none", "type", "metric", "object", "probe",
                                "site", "unread"]))
    want: Want | None = (probe.name, "missing_value")
    faults: tuple[str, ...] = ()
    if how == "drop":
        del values[name]
    elif how in ("none", "unread"):
        values[name] = None
        faults = (name,) if how == "unread" else ()  # a fault says why: decoded
        want = None if how == "unread" else want
    elif how in ("type", "metric", "object"):
        values[{"type": name}.get(how, how)] = draw(
            NOT_NUMBERS if how != "metric" else st.one_of(st.integers(), st.binary()))
        want = (probe.name, "bad_value")
    elif how == "probe":
        pi, want = draw(st.integers(len(case.plan.probes), 2**16 - 1)), ("",
                                                                        "probe_out_of_range")
    elif how == "site":
        site = draw(st.integers(len(probe.sites), 2**16 - 1))
        want = (probe.name, "site_out_of_range")
    else:
        want = None
    return Event(pi, site, 1, 7, 7, 0, values, faults, (), (), {}), want


@pytest.mark.parametrize("case", [GO_CASE, RUST_CASE], ids=["client_golang", "rust"])
@SETTINGS
@given(data=st.data())
def test_preset_events(case: Case, data: st.DataObject) -> None:
    """The preset printer (terminal) and the meta-metrics (noop run) take a decoded
    event or raise Undecodable, saying the probe and reason, and nothing of it is
    written or learnt; the events after it are."""
    for path in ("printer", "meta"):
        out, meta = io.StringIO(), PresetMeta(case.plan, "t")
        sink = printer.preset_printer(case.plan, out, True) if path == "printer" else \
            (lambda e, meta=meta: meta.on_event(e.probe, e))
        got = data.draw(st.lists(events(case), min_size=1, max_size=12))
        tally: Counter[Want] = Counter()
        for event, want in got:
            before = (out.getvalue(), dict(meta._names))
            try:
                sink(event)
            except Undecodable as err:
                tally[(err.probe, err.reason)] += 1
                assert (out.getvalue(), meta._names) == before
            else:
                assert want is None, (event, want)
        assert tally == Counter(w for _e, w in got if w is not None)
        good = [e for e, w in got if w is None]
        if path == "printer":
            assert len(out.getvalue().splitlines()) == len(good)
        else:
            assert {k for k in meta._names} == {(e.pid, e.values["object"]) for e in good}


@SETTINGS
@given(data=st.data())
def test_user_metric_decoded_events(data: st.DataObject) -> None:
    """UserMetrics.on_event: a value a metric takes missing, None without a reason or
    not a number raises Undecodable; nothing of the event is folded."""
    users = UserMetrics(SPEC_PLAN)
    probe = SPEC_PLAN.probes[0]
    for _ in range(data.draw(st.integers(1, 10))):
        values = data.draw(_values(SPEC_CASE.program.layouts[0]))
        name = data.draw(st.sampled_from(["who", "x", "n"]))
        how = data.draw(st.sampled_from(["good", "drop", "none", "type"]))
        if how == "drop":
            del values[name]
        elif how == "none":
            values[name] = None
        elif how == "type" and name != "who":
            values[name] = data.draw(st.one_of(st.text(max_size=3), st.binary(max_size=3)))
        bad = how in ("drop", "none") or (how == "type" and name != "who")
        before = [(f.name, list(f.samples)) for f in users.families({})]
        try:
            users.on_event(probe, Event(0, 0, 1, 7, 7, 0, values, (), (), (), {}))
        except Undecodable as err:
            assert bad and err.reason == ("bad_value" if how == "type" else "missing_value")
            assert [(f.name, list(f.samples)) for f in users.families({})] == before
        else:
            assert not bad


@pytest.mark.parametrize(("tag", "inc"), [("gauge.set;set", None), ("gauge.swap;set", None),
                                          ("gauge.add", 1.5), ("gauge.set", 1.5)])
def test_a_crate_set_is_what_its_tag_says(tag: str, inc: float | None) -> None:
    """A store (the tag's ``set`` flag, whatever the method's name) has no increment; an
    update whose increment is unread has new - old."""
    from agent.output import updates
    probe = _probe("gauge_f64", COMMON + tuple(_v(*v) for v in RUST["gauge_f64"]), (tag,))
    values = {"metric": "g", **{f"l{i}_{p}": None for i in range(4) for p in ("name",
                                                                             "value")},
              "object": 1, "delta": None, "value": 4.0, "before": 2.5, "now": 4.0}
    event = Event(0, 0, 1, 1, 1, 0, values, (), tuple(f"l{i}_{p}" for i in range(4)
                                                     for p in ("name", "value")), (),
                  {"delta": "a store"})
    assert updates.update(event, probe, rust_prometheus.LIBRARY).inc == inc


# ---------------------------------------------------------------------------------------
# Scrape time: in-kernel rows. A row that cannot be read is left out of that scrape
# and its hits counted once, however often it is scraped; the rest of the scrape, the
# same object's or series' good rows included, is what it would be without it.


def _bits(x: float) -> int:
    return int(struct.unpack("<Q", struct.pack("<d", x))[0])


GAUGE_ADD = next(i for i, p in enumerate(GO_CASE.plan.probes) if p.name == "gauge_add")
OBJECT = {"$pid": 1, "object": 0x10, "$site": 0}
# A bad row of the gauge_add probe, by what is wrong with it, and the reason.
META_ROWS: dict[str, tuple[dict[str, Any], dict[str, Any], str]] = {
    "no site": ({"$pid": 1, "object": 0x10}, {}, "KeyError"),
    "site out of range": ({**OBJECT, "$site": 40}, {}, "site_out_of_range"),
    "bad tag": ({**OBJECT, "$site": len(GO_TAGS["gauge_add"])}, {}, "unexpected_op"),
    "pid not a number": ({**OBJECT, "$pid": "x"}, {}, "ValueError"),
    "column not a pair": ({**OBJECT, "$site": 1}, {"last": 5}, "TypeError"),
}


@SETTINGS
@given(bad=st.dictionaries(st.sampled_from(sorted(META_ROWS)), st.integers(0, 99)),
       more=st.integers(0, 5))
def test_meta_rows(bad: dict[str, int], more: int) -> None:
    said: list[str] = []
    tally = Tally(said.append)
    meta = PresetMeta(GO_CASE.plan, "t")
    name = {f"l{i}_{p}": None for i in range(4) for p in ("name", "value")}
    meta.on_event(GAUGE_ADD, Event(GAUGE_ADD, 0, 1, 1, 1, 0, {
        "metric": "g", **name, "object": 0x10, "old": 0.0, "new": 1.0},
        (), tuple(name), (), {}))
    good = Row(OBJECT, (), 7, 1, {"last": (_bits(2.5), 5), "first": (_bits(0.0), 1)})

    def scrape(extra: int) -> dict[tuple[str, str], float]:
        rows = [good, *(Row(META_ROWS[k][0], (), hits + extra, 1, META_ROWS[k][1])
                        for k, hits in bad.items())]
        return {(f.name, s.labels.get("op", "")): s.value
                for f in meta.families({GAUGE_ADD: rows}, tally) for s in f.samples}

    assert scrape(0) == {("noop_metric_updates", "Inc"): 7, ("noop_metric_value", ""): 2.5,
                         ("noop_metric_increments", ""): 2.5}
    want = Counter[Want]()
    for k, hits in bad.items():
        want[("gauge_add", META_ROWS[k][2])] += max(hits, 1)
    assert tally.counts() == want
    scrape(0)
    assert tally.counts() == want  # the same rows again: counted once
    scrape(more)
    for k, hits in bad.items():
        want[("gauge_add", META_ROWS[k][2])] += max(hits + more, 1) - max(hits, 1)
    assert tally.counts() == +want
    _said(said, +want)


KERNEL = ProbePlan("k", "main", (_v("who", "string"), _v("n", "uint")), (), metrics=(
    MetricPlan("k_total", "counter", "", "n", (), (WHO,), 100, "kernel", column="c"),
    MetricPlan("k_hist", "histogram", "", "n", (1.0, 2.0), (WHO,), 100, "kernel",
               column="h")))
USER_ROWS: dict[str, tuple[dict[str, Any], dict[str, Any], str]] = {
    "no label": ({"$pid": 1}, {"c": 1, "h": [0, 0, 1, 9]}, "missing_value"),
    "no pid": ({"who": "b"}, {"c": 1, "h": [0, 0, 1, 9]}, "KeyError"),
    "columns": ({"$pid": 1, "who": "c"}, {"c": "x", "h": [1]}, "bad_value"),
}


@SETTINGS
@given(bad=st.dictionaries(st.sampled_from(sorted(USER_ROWS)), st.integers(0, 99)))
def test_user_metric_rows(bad: dict[str, int]) -> None:
    said: list[str] = []
    users = UserMetrics(Plan("probes.yaml", (), (KERNEL,)), undecodable=Tally(said.append))
    good = Row({"$pid": 1, "who": "a"}, (), 3, 1, {"c": 5, "h": [1, 1, 1, 4]})
    rows = {0: [good, *(Row(USER_ROWS[k][0], (), hits, 2, USER_ROWS[k][1])
                        for k, hits in bad.items())]}
    for _ in range(2):
        got = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for f in users.families(rows) for s in f.samples}
        assert got[("k_total", (("who", "a"),))] == 5
        assert got[("k_hist_count", (("who", "a"),))] == 3
        assert got[("k_hist_sum", (("who", "a"),))] == 4
        assert {k for k in got if k[0] == "k_total"} == {("k_total", (("who", "a"),))}
    want = Counter({("k", USER_ROWS[k][2]): max(hits, 1) for k, hits in bad.items()})
    assert users.undecodable.counts() == +want
    _said(said, +want)


def test_session_rows_it_cannot_merge() -> None:
    """Rows whose bytes are not the aggregate's layout: left out of the scrape, counted."""
    probe = replace(KERNEL, metrics=KERNEL.metrics[:1], aggregate=Aggregate(
        ("$pid", "who"), (Column("c", "sum", "n"),), 100))
    plan = Plan("probes.yaml", (), (probe,))
    lay = aggregate.layout(0, probe)
    said: list[str] = []
    maps = _Maps({0: [(bytes(lay.key_size), [bytes(lay.row_size)]), (b"\1\2\3", [b"\0"]),
                      (bytes(lay.key_size), [b"\0" * 3])]})
    session = Session(plan, Program("", (layout(0, probe),), {0: lay}, (), {}, {}), maps,
                      UserMetrics(plan, undecodable=Tally(said.append)), None)
    for _ in range(2):
        assert len(session.rows()[0]) == 1
    assert session.undecodable.counts() == {("k", "struct.error"): 2}
    assert _undecodable_samples(session) == {("k", "struct.error"): 2}
    _said(said, Counter({("k", "struct.error"): 2}))


@pytest.mark.parametrize("preset", [False, True])
def test_hits_of_retired_rows_stay_counted(preset: bool) -> None:
    """Rows of a process that exited move out of the kernel's map (the prune sweep):
    noop_probe_hits_total keeps their hits, for a spec's metrics and the preset's, and
    a row that cannot be merged is counted as undecodable, not raised."""
    from agent.output.exporter import _hits
    probe = replace(KERNEL, metrics=(replace(KERNEL.metrics[0], labels=()),),
                    aggregate=Aggregate(("$pid",), (Column("c", "sum", "n"),), 100))
    plan = Plan("probes.yaml", (), (probe,))
    lay = aggregate.layout(0, probe)

    def row(pid: int, hits: int) -> tuple[bytes, list[bytes]]:
        key = bytearray(lay.key_size)
        struct.pack_into("<Q", key, lay.parts[0].offset, pid)
        value = bytearray(lay.row_size)
        struct.pack_into("<QQQ", value, 0, hits, 1, hits)
        return bytes(key), [bytes(value)]

    maps = _Maps({0: [row(1, 7), row(2, 5)]})
    users = UserMetrics(plan, undecodable=Tally(lambda _m: None))
    session = Session(plan, Program("", (layout(0, probe),), {0: lay}, (), {}, {}), maps,
                      users, PresetMeta(plan, "t") if preset else None)

    def hits() -> float:
        (fam,) = _hits(session, session.rows(), {})
        return fam.samples[0].value

    assert hits() == 12
    gone = [r for r in maps._rows[0] if struct.unpack_from(
        "<Q", r[0], lay.parts[0].offset)[0] == 2]
    session.retire(0, [*gone, (b"\1", [b"\0"])])  # and one that cannot be merged
    maps._rows[0] = [r for r in maps._rows[0] if r not in gone]
    assert hits() == 12
    assert session.undecodable.total() == 1
