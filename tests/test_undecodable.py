"""Ring records noop cannot decode, fed to every path records take: the terminal
(trace's reader and the printers) and noop run's events (Session, one by one and in
batches, into the preset's meta-metrics and user metrics). Whatever comes (an
operation the preset does not make, a value missing or of the wrong type, a record
cut short, a probe or site index out of range, a decoder that raises), nothing
raises: each is counted by (probe, reason), said once per (probe, reason), and
dropped, and the good records around it are decoded as before. Events handed over
decoded and scrape-time rows: the second half. Unit tests: no root, no BPF.
"""

from __future__ import annotations

import io
import json
import struct
from collections import Counter
from dataclasses import dataclass, replace
from typing import Any, ClassVar

import pytest
from harness.rings import Rec, ring
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.config.decoders import LabelRule
from agent.errors import NoopError
from agent.kernel import aggregate, ringbuf
from agent.kernel.aggregate import Row
from agent.kernel.events import HEADER, HEADER_SIZE, Event, Layout, layout
from agent.kernel.program import Program
from agent.output import printer, trace
from agent.output.exporter import Exporter, Health, Session
from agent.output.undecodable import Tally, Undecodable
from agent.output.usermetrics import UserMetrics
from agent.plan.fetches import Fetch
from agent.plan.model import Aggregate, Column, MetricPlan, Plan, ProbePlan, Site, ValueSpec
from agent.presets.client_golang import facts as client_golang
from agent.presets.meta import PresetMeta
from agent.presets.printer import preset_printer
from agent.presets.rust_prometheus import facts as rust_prometheus

SETTINGS = settings(max_examples=40, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])
Want = tuple[str, str]  # (probe, reason)


def _v(name: str, decode: str) -> ValueSpec:
    if decode == "string":
        return ValueSpec(name, "string", 16, 16, "string", name)
    return ValueSpec(name, decode, 8, 0, decode, name)


COMMON = (_v("metric", "string"), *(_v(f"l{i}_{p}", "string") for i in range(4)
                                    for p in ("name", "value")), _v("object", "addr"))
GO = {"counter_int": (("before", "uint"), ("valInt", "uint"), ("valBits", "float")),
      "counter_add": (("delta", "uint"), ("valInt", "uint"), ("valBits", "float")),
      "counter_float": (("old", "float"), ("new", "float"), ("valInt", "uint")),
      "gauge_add": (("old", "float"), ("new", "float")),
      "gauge_set": (("new", "float"), ("valBits", "float")),
      "histogram": (("before", "uint"), ("observed", "float"))}
RUST = {"counter_u64": (("delta", "uint"), ("value", "uint"), ("before", "uint")),
        "gauge_f64": (("delta", "float"), ("value", "float"), ("before", "float"),
                      ("now", "float")),
        "histogram": (("before", "uint"), ("observed", "float")),
        "histogram_flush": (("delta", "uint"), ("value", "uint"), ("before", "uint"),
                            ("observed", "float"))}
# Every tag each probe's sites get: the preset's own (the rules', the crate's flags).
GO_TAGS = {p: tuple(dict.fromkeys(f"{r.kind}.{client_golang.method_op(m)}"
                                  for m in r.methods))
           for p in GO if (r := client_golang.rule_of(p)) is not None}
RUST_TAGS = {"counter_u64": ("counter.inc", "counter.inc_by", "counter.reset;set",
                             "counter.flush"),
             "gauge_f64": ("gauge.add", "gauge.sub;neg", "gauge.set;set", "gauge.inc"),
             "histogram": ("histogram.observe",), "histogram_flush": ("histogram.flush",)}
# A tag of each kind the preset does not make: client_golang's name its methods; the
# crate's take any method name, their flags must parse.
GO_BAD = {"counter": "counter.Frobnicate", "gauge": "gauge.reset",
          "histogram": "histogram.observe;x"}
RUST_BAD = {"counter": "counter.", "gauge": "gauge", "histogram": "histogram.observe;adjust=x"}


def _probe(name: str, values: tuple[ValueSpec, ...], tags: tuple[str, ...]) -> ProbePlan:
    fetches = tuple(Fetch("unavailable", why="test") for _ in values)
    return ProbePlan(name, "main", values, tuple(Site("f", 0x1000 + i, 0, "test", fetches,
                                                      tag=t) for i, t in enumerate(tags)))


@dataclass(frozen=True)
class Case:
    """A plan, its program, and the probes whose records the program lays out other
    than the plan says (what their events then lack or hold), with the reason."""

    plan: Plan
    program: Program
    good: tuple[int, ...]  # probes whose sites all but the last (a bad tag) decode
    odd: dict[int, str]
    ops: bool = True  # a preset's: each good probe's last site has a bad tag


def _case(source: str, specific: dict[str, tuple[tuple[str, str], ...]],
          tags: dict[str, tuple[str, ...]], bad_tags: dict[str, str],
          odd: dict[str, tuple[str, str, str]]) -> Case:
    """``odd``: probe -> (value, how the program lays it out: ``drop`` or a decode,
    the reason); a probe's last site has a tag its preset does not make."""
    probes, lays, derived = [], [], {}
    for name, values in specific.items():
        bad = bad_tags[next(iter(tags[name])).split(".")[0]]
        probes.append(_probe(name, COMMON + tuple(_v(*v) for v in values),
                             (*tags[name], bad)))
    reasons = {}
    for name, (value, how, reason) in odd.items():
        plain = _probe(name, COMMON + tuple(_v(*v) for v in specific[name]), tags[name])
        probes.append(plain)
        reasons[len(probes) - 1] = reason
        if how == "derive":  # two words' formula on a one-word value: its decoder raises
            derived[(len(probes) - 1, 0)] = {value: "new-old"}
    for i, p in enumerate(probes):
        values = p.values
        if i in reasons and odd[p.name][1] == "drop":
            values = tuple(v for v in values if v.name != odd[p.name][0])
        elif i in reasons and odd[p.name][1] == "string":
            values = tuple(_v(v.name, "string") if v.name == odd[p.name][0] else v
                           for v in values)
        lays.append(layout(i, replace(p, values=values)))
    program = Program("", tuple(lays), {}, (), {}, derived)
    return Case(Plan(source, (), tuple(probes)), program,
                tuple(range(len(specific))), reasons)


GO_CASE = _case("client_golang preset", GO, GO_TAGS, GO_BAD, {
    "gauge_add": ("old", "drop", "missing_value"), "gauge_set": ("new", "string", "bad_value"),
    "counter_float": ("old", "derive", "ValueError")})
RUST_CASE = _case(rust_prometheus.SOURCE, RUST, RUST_TAGS, RUST_BAD, {
    "gauge_f64": ("before", "drop", "missing_value"),
    "counter_u64": ("value", "string", "bad_value"), "histogram": ("observed", "derive",
                                                                   "ValueError")})


def _encode(lay: Layout, probe: int, site: int, values: dict[str, Any], pid: int,
            faults: int = 0) -> bytes:
    out = bytearray(HEADER.pack(pid, 0, pid, pid, probe, site, faults, 0, 0))
    for s in lay.slots:
        x = values[s.value.name]
        if s.cap:
            raw = x.encode()
            out += struct.pack("<I4x", len(raw)) + raw[:s.cap].ljust(s.cap, b"\0")
        else:
            out += struct.pack("<d" if s.value.decode == "float" else "<Q", x)
    return bytes(out)


def _values(lay: Layout) -> st.SearchStrategy[dict[str, Any]]:
    by = {"string": st.text("abcxyz_", min_size=1, max_size=16),
          "float": st.floats(width=64), "uint": st.integers(0, 2**64 - 1),
          "addr": st.integers(1, 2**48)}
    return st.fixed_dictionaries({s.value.name: by[s.value.decode] for s in lay.slots})


@dataclass(frozen=True)
class Item:
    data: bytes
    want: Want | None  # undecodable: (probe, reason); None: a good record
    values: dict[str, Any]
    pid: int

    @property
    def metric(self) -> str:
        return str(self.values["metric"])

    def name(self) -> tuple[tuple[int, int, int], tuple[str, str]]:
        """What the preset learns of a good one's metric object (its process, address
        and when it was made): its name and labels."""
        labels = {self.values[f"l{i}_name"]: self.values[f"l{i}_value"] for i in range(4)}
        generation = int(self.values.get("generation") or 0)
        return (self.pid, self.values["object"], generation), (self.metric, ",".join(
            f"{k}={v}" for k, v in sorted(labels.items())))


@st.composite
def items(draw: st.DrawFn, case: Case) -> Item:
    """One ring record of ``case``'s program: good, or undecodable in one way."""
    plan, program = case.plan, case.program
    kind = draw(st.sampled_from(["good", "good", "good", "odd", "short", "probe", "site",
                                 *(["op"] if case.ops else [])]))
    pi = draw(st.sampled_from(sorted(case.odd) if kind == "odd" else case.good))
    probe = plan.probes[pi]
    last = len(probe.sites) - (pi in case.good and case.ops)
    site = last if kind == "op" else draw(st.integers(0, last - 1))
    values = draw(_values(program.layouts[pi]))
    pid = draw(st.integers(1, 2**31))
    data = _encode(program.layouts[pi], pi, site, values, pid)
    if kind == "good":
        return Item(data, None, values, pid)
    if kind == "short":
        n = draw(st.integers(0, len(data) - 1))
        return Item(data[:n], ("" if n < HEADER_SIZE else probe.name, "too_short"),
                    values, pid)
    if kind == "probe":
        index = draw(st.integers(len(plan.probes), 2**16 - 1))
        return Item(data[:24] + struct.pack("<H", index) + data[26:],
                    ("", "probe_out_of_range"), values, pid)
    if kind == "site":
        index = draw(st.integers(len(probe.sites), 2**16 - 1))
        return Item(data[:26] + struct.pack("<H", index) + data[28:],
                    (probe.name, "site_out_of_range"), values, pid)
    return Item(data, (probe.name, "unexpected_op" if kind == "op" else case.odd[pi]),
                values, pid)


def _said(lines: list[str], want: Counter[Want]) -> None:
    """Each (probe, reason) said once, and nothing else said about decoding."""
    told = [line for line in lines if "cannot decode" in line]
    assert len(told) == len(want), told
    for probe, reason in want:
        assert sum(f"probe {probe or '(none)'}: an event noop cannot decode ({reason})"
                   in line for line in told) == 1, (probe, reason, told)


class _Loaded:
    """What trace.run needs of a loaded program: the ring's runs, handed over once."""

    attachments: ClassVar[list[Any]] = []
    refused: ClassVar[dict[str, str]] = {}
    unattached: ClassVar[dict[str, str]] = {}

    def __init__(self, runs: list[ringbuf.Run]) -> None:
        self.runs = runs

    def __enter__(self) -> _Loaded:
        return self

    def __exit__(self, *_exc: object) -> None:
        return None

    def wait(self, _timeout: float) -> None:
        return None

    def read(self, on_run: Any) -> None:
        runs, self.runs = self.runs, []
        for run in runs:
            on_run(run)

    def lost(self) -> int:
        return 0

    def faults(self) -> dict[int, int]:
        return {}


def _runs(got: list[Item]) -> list[ringbuf.Run]:
    return list(ringbuf.runs(memoryview(ring([Rec(i.data) for i in got]))))


def _no_costs() -> Any:
    raise NoopError("no costs in a unit test")


@pytest.mark.parametrize("case", [GO_CASE, RUST_CASE], ids=["client_golang", "rust"])
@SETTINGS
@given(data=st.data())
def test_terminal(case: Case, data: st.DataObject, capsys: pytest.CaptureFixture[str]
                  ) -> None:
    """noop --binary: trace's reader and the preset printer, records in ring runs."""
    got = data.draw(st.lists(items(case), min_size=1, max_size=30))
    capsys.readouterr()
    out = io.StringIO()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("agent.kernel.load.Loaded", lambda *_a: _Loaded(_runs(got)))
        mp.setattr("agent.kernel.cost.costs", _no_costs)
        stats = trace.run((case.plan, case.program,
                           preset_printer(case.plan, out, True)), duration=0.01)
    want = Counter(i.want for i in got if i.want is not None)
    assert stats.undecodable.counts() == want
    _said(capsys.readouterr().err.splitlines(), want)
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [x["metric"] for x in lines] == [i.metric for i in got if i.want is None]
    assert stats.events == len(lines)
    if want:
        assert f"{sum(want.values())} undecodable" in trace.summary(stats)


@SETTINGS
@given(data=st.data())
def test_terminal_spec(data: st.DataObject, capsys: pytest.CaptureFixture[str]) -> None:
    """noop --config: trace's reader and the spec printer, which shows whatever values a
    record holds (a missing or text one too): only what is not a record of the plan
    (cut short, an index out of range, a decoder that raises) is undecodable."""
    got = data.draw(st.lists(items(SPEC_CASE), min_size=1, max_size=30))
    capsys.readouterr()
    out = io.StringIO()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("agent.kernel.load.Loaded", lambda *_a: _Loaded(_runs(got)))
        mp.setattr("agent.kernel.cost.costs", _no_costs)
        stats = trace.run((SPEC_PLAN, SPEC_CASE.program,
                           printer.spec_printer(SPEC_PLAN, out, True)), duration=0.01)
    shown = [i for i in got if i.want is None or i.want[1] in ("missing_value", "bad_value")]
    want = Counter(i.want for i in got if i.want is not None and i not in shown)
    assert stats.undecodable.counts() == want
    _said(capsys.readouterr().err.splitlines(), want)
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [(x["probe"], x["pid"]) for x in lines] == [
        (SPEC_PLAN.probes[struct.unpack_from("<H", i.data, 24)[0]].name, i.pid)
        for i in shown]


@pytest.mark.parametrize("case", [GO_CASE, RUST_CASE], ids=["client_golang", "rust"])
@SETTINGS
@given(data=st.data())
def test_run_events(case: Case, data: st.DataObject) -> None:
    """noop run --binary: Session.on_run and on_record into the preset's meta-metrics."""
    got = data.draw(st.lists(items(case), min_size=1, max_size=30))
    said: list[str] = []
    users = UserMetrics(case.plan, undecodable=Tally(said.append))
    session = Session(case.plan, case.program, _Maps(), users, PresetMeta(case.plan, "t"))
    for n, run in enumerate(_runs(got)):
        if n % 2:
            session.on_run(run)
        else:
            for record in ringbuf.records(run):
                session.on_record(record)
    want = Counter(i.want for i in got if i.want is not None)
    assert session.undecodable.counts() == want
    _said(said, want)
    assert session.meta is not None
    assert session.meta._names == dict(i.name() for i in got if i.want is None)
    read = [i for i in got if len(i.data) >= HEADER_SIZE
            and struct.unpack_from("<H", i.data, 24)[0] < len(case.plan.probes)]
    assert sum(session.seen.values()) == len(read)  # read, whether decoded or not
    assert _undecodable_samples(session) == want


class _Maps:
    """What the collector needs of a loaded program: rows (raw, by probe), no counts."""

    attachments: ClassVar[list[Any]] = []

    def __init__(self, rows: dict[int, list[tuple[bytes, list[bytes]]]] | None = None
                 ) -> None:
        self._rows = rows or {}

    def rows(self, probe: int) -> list[tuple[bytes, list[bytes]]]:
        return self._rows.get(probe, [])

    def produced(self) -> dict[int, int]:
        return {}

    lost_by_probe = faults = unpaired = cancelled = produced


def _undecodable_samples(session: Session) -> dict[Want, float]:
    """noop_events_undecodable_total of a scrape of the session."""
    ex = Exporter(Health())
    ex.use(session)
    fam = next(f for f in ex.collect() if f.name == "noop_events_undecodable")
    return {(s.labels["probe"], s.labels["reason"]): s.value for s in fam.samples}


# ---------------------------------------------------------------------------------------
# noop run --config: records of a spec's probes into user metrics aggregated in noop,
# a run at once (the batch path) or one by one.

WHO = LabelRule("who", "who")


def _spec_probe(n: int, values: tuple[ValueSpec, ...]) -> ProbePlan:
    metrics = (MetricPlan(f"calls_{n}", "counter", "", None, (), (WHO,), 100, "events"),
               MetricPlan(f"xs_{n}", "histogram", "", "x", (1.0, 2.0), (), 100, "events"),
               MetricPlan(f"last_{n}", "gauge", "", "n", (), (WHO,), 100, "events"))
    return replace(_probe(f"req{n}", values, ("", "")), metrics=metrics)


SPEC_VALUES = (_v("who", "string"), _v("n", "uint"), _v("x", "float"))
SPEC_PLAN = Plan("probes.yaml", (), tuple(_spec_probe(n, SPEC_VALUES) for n in range(4)))
SPEC_CASE = Case(SPEC_PLAN, Program("", (
    layout(0, SPEC_PLAN.probes[0]),
    layout(1, replace(SPEC_PLAN.probes[1], values=SPEC_VALUES[1:])),  # no who
    layout(2, replace(SPEC_PLAN.probes[2], values=(*SPEC_VALUES[:2], _v("x", "string")))),
    layout(3, SPEC_PLAN.probes[3])), {}, (), {},
    {(3, site): {"x": "new-old"} for site in (0, 1)}),  # two words' formula on one word
    (0,), {1: "missing_value", 2: "bad_value", 3: "ValueError"}, ops=False)


# A decoder that raises (probe 3's) raises only record by record: the batch path never
# derives a one-word value (no plan has one, only SPEC_CASE's program).
USERS_CASE = replace(SPEC_CASE, odd={1: "missing_value", 2: "bad_value"})


@st.composite
def spec_items(draw: st.DrawFn) -> Item:
    """A record of USERS_CASE, good (its x faulted, at times) or not."""
    item = draw(items(USERS_CASE))
    if item.want is not None or not draw(st.booleans()):
        return item
    faults = 1 << 2  # x's read faulted: None, said why; the calls still count
    return replace(item, data=item.data[:28] + struct.pack("<I", faults) + item.data[32:])


@SETTINGS
@given(got=st.lists(spec_items(), min_size=1, max_size=40), batch=st.booleans())
def test_user_metric_events(got: list[Item], batch: bool) -> None:
    said: list[str] = []
    users = UserMetrics(SPEC_PLAN, undecodable=Tally(said.append))
    session = Session(SPEC_PLAN, SPEC_CASE.program, _Maps(), users, None)
    for run in _runs(got):
        if batch:
            session.on_run(run)
        else:
            for record in ringbuf.records(run):
                session.on_record(record)
    want = Counter(i.want for i in got if i.want is not None)
    assert session.undecodable.counts() == want
    _said(said, want)
    fams = {f.name: f for f in users.families({})}
    good = [i for i in got if i.want is None]
    assert {s.labels["who"]: s.value for s in fams["calls_0"].samples} == \
        Counter(i.values["who"] for i in good)
    for n in (1, 2, 3):  # nothing of a bad record folded
        assert not fams[f"calls_{n}"].samples and not fams[f"last_{n}"].samples
    assert _undecodable_samples(session) == want


# --- What noop cannot decode that comes to it decoded: events handed to the preset
# printer, the meta-metrics and user metrics, and in-kernel rows read at a scrape (the
# preset's meta-metrics, user metrics, rows whose bytes are not their aggregate's
# layout).


USED = {"counter_int": ("before", "valInt", "valBits"), "counter_add": ("delta", "valInt",
                                                                        "valBits"),
        "counter_float": ("old", "new", "valInt"), "gauge_add": ("old", "new"),
        "gauge_set": ("new",), "histogram": ("before",), "counter_u64": ("delta", "value",
                                                                         "before"),
        "gauge_f64": ("delta", "value", "before")}
RUST_USED = {"histogram": ("before", "observed"),
             "histogram_flush": ("delta", "before", "observed")}
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
    own = RUST_USED if case is RUST_CASE else {}
    used = own[probe.name] if probe.name in own else USED[probe.name]
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
        sink = preset_printer(case.plan, out, True) if path == "printer" else \
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
            assert set(meta._names) == {(e.pid, e.values["object"],
                                         int(e.values.get("generation") or 0)) for e in good}


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
    from agent.presets import updates
    probe = _probe("gauge_f64", COMMON + tuple(_v(*v) for v in RUST["gauge_f64"]), (tag,))
    values = {"metric": "g", **{f"l{i}_{p}": None for i in range(4) for p in ("name",
                                                                             "value")},
              "object": 1, "delta": None, "value": 4.0, "before": 2.5, "now": 4.0}
    event = Event(0, 0, 1, 1, 1, 0, values, (), tuple(f"l{i}_{p}" for i in range(4)
                                                     for p in ("name", "value")), (),
                  {"delta": "a store"})
    assert updates.update(event, probe, rust_prometheus.LIBRARY).inc == inc


@pytest.mark.parametrize(("tag", "inc", "note"), [("histogram.observe", None, "count 6"),
                                                  ("histogram.flush", 3, "count 8")])
def test_a_crate_histogram_flush_adds_what_it_flushed(tag: str, inc: int | None,
                                                      note: str) -> None:
    """An observation adds one to the count; a local histogram's flush the observations
    flushed (its increment), its value the sum flushed. The count before it may have
    the hot shard's bit set."""
    from agent.presets import updates
    probe = _probe("histogram_flush", COMMON + tuple(_v(*v) for v in RUST["histogram_flush"]),
                   (tag,))
    values = {"metric": "h", **{f"l{i}_{p}": None for i in range(4) for p in ("name",
                                                                             "value")},
              "object": 1, "delta": 3, "value": 2**63 + 8, "before": 2**63 + 5,
              "observed": 1.5}
    event = Event(0, 0, 1, 1, 1, 0, values, (), tuple(f"l{i}_{p}" for i in range(4)
                                                     for p in ("name", "value")), (), {})
    u = updates.update(event, probe, rust_prometheus.LIBRARY)
    assert (u.kind, u.op, u.inc, u.value, u.note) == ("histogram", tag.partition(".")[2],
                                                      inc, 1.5, note)


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
        rows = [good, Row(None, (), 3, 1, {}),  # the overflow row: past the kernel's rows
                *(Row(META_ROWS[k][0], (), hits + extra, 1, META_ROWS[k][1])
                  for k, hits in bad.items())]
        return {(f.name, s.labels.get("op", "")): s.value
                for f in meta.families({GAUGE_ADD: rows}, tally) for s in f.samples}

    assert scrape(0) == {("noop_metric_updates", "Inc"): 7, ("noop_metric_value", ""): 2.5,
                         ("noop_metric_increments", ""): 2.5,
                         ("noop_metric_overflow_updates", ""): 3}
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
        fam, _rows = _hits(session, session.rows(), {})
        return fam.samples[0].value

    assert hits() == 12
    gone = [r for r in maps._rows[0] if struct.unpack_from(
        "<Q", r[0], lay.parts[0].offset)[0] == 2]
    session.retire(0, [*gone, (b"\1", [b"\0"])])  # and one that cannot be merged
    maps._rows[0] = [r for r in maps._rows[0] if r not in gone]
    assert hits() == 12
    assert session.undecodable.total() == 1
