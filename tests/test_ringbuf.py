"""Reading the BPF ring buffer in batches (agent.ringbuf), unpacking a run of records at
once (agent.events.records) and folding those records into user metrics
(UserMetrics.on_records): each checked against the record-by-record path it replaces.

The ring bytes are built here by hand, as the kernel lays them out (kernel/bpf/ringbuf.c):
an 8-byte header per record (u32 length, bit 31 busy, bit 30 discarded; a u32 page offset
the reader ignores), each record padded to 8 bytes. Records are packed as the BPF side
fills them (bpf/noop.h, codegen): the 40-byte struct noop_hdr, then one 8-byte slot per
scalar (a register's upper bytes may be anything), and per string a u32 full length, a
pad word and the first bytes, with whatever was in the ring before after them.
"""

from __future__ import annotations

import itertools
import math
import random
import struct
from typing import Any

import pytest
from harness.rings import Rec, noop_body, ring

from agent.config.decoders import LabelRule
from agent.kernel import events, ringbuf
from agent.kernel.events import HEADER, Layout
from agent.output.usermetrics import OVERFLOW, UserMetrics, faulty
from agent.plan.fetches import Fetch
from agent.plan.model import MetricPlan, Plan, ProbePlan, Site, ValueSpec

BUSY, DISCARD = ringbuf.BUSY, ringbuf.DISCARD

def runs_of(data: bytes) -> list[ringbuf.Run]:
    return list(ringbuf.runs(memoryview(data)))


# ---------------------------------------------------------------------------------------
# ringbuf.runs over hand-made rings.


def _recs(*groups: tuple[int, int | None, int, int]) -> list[Rec]:
    """(count, probe, length, flags) groups of equal records, in order."""
    return [Rec(noop_body(probe, length), flags)
            for count, probe, length, flags in groups for _ in range(count)]


# (records, runs as (probe, length, stride, count, end))
RUNS = [
    pytest.param(_recs((5, 3, 48, 0)), [(3, 48, 56, 5, 280)], id="one-run"),
    pytest.param(_recs((1, 3, 48, 0)), [(3, 48, 56, 1, 56)], id="one-record"),
    pytest.param(_recs((2, 1, 48, 0), (3, 1, 56, 0)),
                 [(1, 48, 56, 2, 112), (1, 56, 64, 3, 304)], id="length-change-splits"),
    pytest.param(_recs((2, 1, 48, 0), (2, 2, 48, 0), (1, 1, 48, 0)),
                 [(1, 48, 56, 2, 112), (2, 48, 56, 2, 224), (1, 48, 56, 1, 280)],
                 id="probe-change-splits"),
    pytest.param(_recs((2, 1, 48, 0), (2, 256, 48, 0)),
                 [(1, 48, 56, 2, 112), (256, 48, 56, 2, 224)], id="probe-high-byte-splits"),
    pytest.param(_recs((3, 1, 50, 0), (1, 1, 56, 0)),
                 [(1, 50, 64, 3, 192), (1, 56, 64, 1, 256)],
                 id="same-stride-other-length-splits"),
    pytest.param(_recs((2, 1, 48, 0), (1, 1, 48, BUSY), (2, 1, 48, 0)),
                 [(1, 48, 56, 2, 112)], id="busy-stops"),
    pytest.param(_recs((1, 1, 48, BUSY), (2, 1, 48, 0)), [], id="busy-first"),
    pytest.param(_recs((2, 1, 48, 0), (1, 1, 48, BUSY | DISCARD), (2, 1, 48, 0)),
                 [(1, 48, 56, 2, 112)], id="busy-and-discarded-stops"),
    pytest.param(_recs((2, 1, 48, 0), (1, 1, 48, DISCARD), (2, 1, 48, 0)),
                 [(1, 48, 56, 2, 112), (1, 48, 56, 2, 280)], id="discarded-skipped"),
    pytest.param(_recs((2, 1, 48, 0), (3, 2, 64, DISCARD), (1, 1, 48, 0)),
                 [(1, 48, 56, 2, 112), (1, 48, 56, 1, 384)],
                 id="discarded-run-of-other-length"),
    pytest.param(_recs((1, 1, 48, DISCARD), (1, 1, 48, 0)), [(1, 48, 56, 1, 112)],
                 id="discarded-first"),
    pytest.param(_recs((2, 1, 48, 0), (2, 1, 48, DISCARD)), [(1, 48, 56, 2, 112)],
                 id="discarded-last"),
    pytest.param(_recs((1, 1, 48, DISCARD), (1, 1, 48, BUSY), (1, 1, 48, 0)), [],
                 id="discarded-then-busy"),
    pytest.param([], [], id="empty"),
    pytest.param(_recs((3, None, 16, 0), (2, None, 25, 0), (1, 7, 26, 0)),
                 [(None, 16, 24, 3, 72), (None, 25, 40, 2, 152), (7, 26, 40, 1, 192)],
                 id="short-records-have-no-probe"),
    pytest.param([Rec(noop_body(None, 24, 1)), Rec(noop_body(None, 24, 2))],
                 [(None, 24, 32, 2, 64)], id="short-records-of-any-content-run"),
    pytest.param(_recs((2, None, 0, 0), (1, 4, 40, 0)),
                 [(None, 0, 8, 2, 16), (4, 40, 48, 1, 64)], id="empty-records"),
]


@pytest.mark.parametrize(("recs", "want"), RUNS)
def test_runs(recs: list[Rec], want: list[tuple[int | None, int, int, int, int]]) -> None:
    """The runs of a ring: one per stretch of committed records of one probe and length,
    each ending (``end``) where the reader may free up to, discarded records included;
    nothing from the first busy record on."""
    data = ring(recs)
    got = runs_of(data)
    assert [(r.probe, r.length, r.stride, r.count, r.end) for r in got] == want
    for r in got:
        assert r.stride == ringbuf.stride(r.length)
        assert bytes(r.data) == data[r.end - r.count * r.stride:r.end]


@pytest.mark.parametrize("first", [1, 2, 7, 8, 9, 23, 24, 25, 56, 57, 200, 1000])
def test_runs_of_every_length(first: int) -> None:
    """Runs are measured in windows that double (8, 16, 32, ... records): a run ending
    at, just before or just past a window's edge is cut exactly there."""
    recs = _recs((first, 1, 48, 0), (3, 2, 48, 0), (first, 1, 48, 0), (1, 1, 48, BUSY))
    got = [(r.probe, r.count) for r in runs_of(ring(recs))]
    assert got == [(1, first), (2, 3), (1, first)]


def test_records_are_the_bodies() -> None:
    """``records`` gives each record of a run without its ring header or padding."""
    bodies = [noop_body(9, 50, fill) for fill in (1, 2, 3)]
    data = ring([Rec(b) for b in bodies], random.Random(5))
    (run,) = runs_of(data)
    assert (run.probe, run.length, run.stride, run.count) == (9, 50, 64, 3)
    assert list(ringbuf.records(run)) == bodies


def test_records_of_empty_records() -> None:
    """A run of records with an empty body (the kernel lets a program reserve 0 bytes)
    gives one empty body per record, however many there are."""
    (run,) = runs_of(ring([Rec(b"")] * 3))
    assert (run.probe, run.length, run.stride, run.count, run.end) == (None, 0, 8, 3, 24)
    assert list(ringbuf.records(run)) == [b"", b"", b""]


def test_stride() -> None:
    """A record takes its 8-byte header and its body rounded up to 8 bytes."""
    assert [ringbuf.stride(n) for n in (0, 1, 7, 8, 9, 40, 41, 48)] == \
        [8, 16, 16, 16, 24, 48, 56, 56]


def test_runs_reassemble_the_ring() -> None:
    """Over many random rings: what ``runs`` yields, record by record, is exactly the
    committed records in order up to the first busy one, discarded ones left out; each
    run is one probe and length, and two runs side by side differ in one of them."""
    rng = random.Random(20240611)
    probes = [0, 1, 2, 255, 256, 65535]
    lengths = [1, 8, 20, 25, 26, 40, 48, 50, 63, 64, 120]  # 0: test_records_of_empty_records
    for _ in range(400):
        recs: list[Rec] = []
        for _ in range(rng.randrange(0, 12)):
            length = rng.choice(lengths)
            probe = rng.choice(probes) if length >= 26 else None
            flags = rng.choices([0, DISCARD, BUSY], weights=[85, 12, 3])[0]
            for _ in range(rng.randrange(1, 9)):
                body = bytearray(rng.randbytes(length))
                if probe is not None:
                    body[24:26] = probe.to_bytes(2, "little")
                recs.append(Rec(bytes(body), flags))
        data = ring(recs, rng)
        first_busy = next((i for i, r in enumerate(recs) if r.flags & BUSY), len(recs))
        want = [r.body for r in recs[:first_busy] if not r.flags & DISCARD]
        got = runs_of(data)
        assert [b for run in got for b in ringbuf.records(run)] == want
        busy_at = len(ring(recs[:first_busy]))
        last_start = -1
        for run in got:
            start = run.end - run.count * run.stride
            assert last_start < start and run.end <= busy_at
            last_start = start
            assert run.count >= 1 and len(run.data) == run.count * run.stride
            for rec in ringbuf.records(run):
                assert len(rec) == run.length
                assert run.probe == (int.from_bytes(rec[24:26], "little")
                                     if run.length >= 26 else None)
        for a, b in itertools.pairwise(got):
            if a.end == b.end - b.count * b.stride:
                assert (a.probe, a.length) != (b.probe, b.length)


# ---------------------------------------------------------------------------------------
# Packing records as the BPF side does.


def pack(lay: Layout, values: dict[str, Any], *, ts: int = 1, pid: int = 100,
         tid: int = 101, goid: int = 0, site: int = 0, faults: int = 0, absent: int = 0,
         junk: random.Random | None = None) -> bytes:
    """The record ``lay``'s C struct holds after a hit reading ``values``: a string or
    bytes value is its full length, then its first bytes (at most the slot's); junk is
    what the ring held before (the upper bytes of a register, string tails)."""
    out = bytearray(HEADER.pack(ts, goid, pid, tid, lay.probe, site, faults, absent, 0))
    for s in lay.slots:
        v, x = s.value, values[s.value.name]
        noise = junk.randbytes(s.size) if junk else bytes(s.size)
        if s.cap:
            data = x.encode() if isinstance(x, str) else bytes(x)
            kept = data[:s.cap]
            out += struct.pack("<I", len(data)) + noise[4:8] + kept + noise[8 + len(kept):]
            continue
        if v.decode == "float":
            raw = struct.pack("<d" if v.size == 8 else "<f", x)
        else:
            raw = (int(x) & ((1 << (8 * v.size)) - 1)).to_bytes(v.size, "little")
        out += raw + noise[v.size:]
    assert len(out) == lay.size
    return bytes(out)


def same(a: Any, b: Any) -> bool:
    """Equal and of one type, NaN equal to NaN."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return bool(a == b)


def _f32(x: float) -> float:
    return float(struct.unpack("<f", struct.pack("<f", x))[0])


NAN, INF = float("nan"), float("inf")

# (value, five samples, what each decodes to)
COLUMNS: list[tuple[ValueSpec, list[Any], list[Any]]] = [
    (ValueSpec("i8", "int", 1, 0, "int8_t", "a.i8"),
     [0, 1, -1, 127, -128], [0, 1, -1, 127, -128]),
    (ValueSpec("i16", "int", 2, 0, "int16_t", "a.i16"),
     [0, -2, 32767, -32768, 300], [0, -2, 32767, -32768, 300]),
    (ValueSpec("i32", "int", 4, 0, "int32_t", "a.i32"),
     [0, -3, 2**31 - 1, -2**31, 70000], [0, -3, 2**31 - 1, -2**31, 70000]),
    (ValueSpec("i64", "int", 8, 0, "int64_t", "a.i64"),
     [0, -4, 2**63 - 1, -2**63, 2**40], [0, -4, 2**63 - 1, -2**63, 2**40]),
    (ValueSpec("u8", "uint", 1, 0, "uint8_t", "a.u8"),
     [0, 1, 255, 128, 7], [0, 1, 255, 128, 7]),
    (ValueSpec("u16", "uint", 2, 0, "uint16_t", "a.u16"),
     [0, 65535, 32768, 7, 256], [0, 65535, 32768, 7, 256]),
    (ValueSpec("u32", "uint", 4, 0, "uint32_t", "a.u32"),
     [0, 2**32 - 1, 2**31, 9, 65536], [0, 2**32 - 1, 2**31, 9, 65536]),
    (ValueSpec("u64", "uint", 8, 0, "uint64_t", "a.u64"),
     [0, 2**64 - 1, 2**63, 11, 2**32], [0, 2**64 - 1, 2**63, 11, 2**32]),
    (ValueSpec("ptr", "addr", 8, 0, "*T", "a.ptr"),
     [0, 0x7FFF_0000_1000, 2**64 - 1, 8, 16], [0, 0x7FFF_0000_1000, 2**64 - 1, 8, 16]),
    (ValueSpec("f32", "float", 4, 0, "float", "a.f32"),
     [0.0, -1.5, 0.1, NAN, INF], [0.0, -1.5, _f32(0.1), NAN, INF]),
    (ValueSpec("f64", "float", 8, 0, "double", "a.f64"),
     [0.0, -0.0, 0.1, NAN, -INF], [0.0, -0.0, 0.1, NAN, -INF]),
    (ValueSpec("flag", "bool", 1, 0, "bool", "a.flag"),
     [0, 1, 1, 0, 1], [False, True, True, False, True]),
    (ValueSpec("name", "string", 5, 5, "string", "a.name"),
     ["", "abc", "abcde", "abcdefghij", "ééé"],
     ["", "abc", "abcde", "abcde", "éé\ufffd"]),
    (ValueSpec("blob", "bytes", 3, 3, "[]byte", "a.blob"),
     [b"", b"\x00\xff", b"\x01\x02\x03", b"\x01\x02\x03\x04\x05", b"\xff" * 9],
     [b"", b"\x00\xff", b"\x01\x02\x03", b"\x01\x02\x03", b"\xff" * 3]),
]
ALL = ProbePlan("all", "t", tuple(c[0] for c in COLUMNS), ())


@pytest.mark.parametrize("extra", [0, 3, 8, 16])
def test_records_unpack_as_decode(extra: int) -> None:
    """A run unpacked at once (``Records``) gives every value exactly as ``decode`` gives
    it from the record alone, and as it was read: ints of each size signed, floats of 4
    bytes widened, strings cut to their cap (and past it marked truncated by ``decode``).
    ``extra``: a record longer than the layout (the ring's length is what is read)."""
    lay = events.layout(2, ALL)
    junk = random.Random(extra)
    rows = [{v.name: samples[i] for v, samples, _ in COLUMNS} for i in range(5)]
    bodies = [pack(lay, row, ts=1000 + i, pid=7 + i, junk=junk) + junk.randbytes(extra)
              for i, row in enumerate(rows)]
    (run,) = runs_of(ring([Rec(b) for b in bodies], junk))
    assert (run.probe, run.count) == (2, 5)
    spec = events.records(lay, run.stride)
    assert spec.struct.size == run.stride
    tuples = list(spec.struct.iter_unpack(run.data))
    assert len(tuples) == 5
    for i, (t, body) in enumerate(zip(tuples, ringbuf.records(run), strict=True)):
        ev = events.decode(lay, body)
        assert (t[events.TS], t[events.PID], t[events.FAULTS], t[events.ABSENT]) == \
            (ev.ts, ev.pid, 0, 0) == (1000 + i, 7 + i, 0, 0)
        for v, _samples, decoded in COLUMNS:
            got, want = spec.value(v.name, t), ev.values[v.name]
            assert same(got, want), (v.name, i, got, want)
            assert same(want, decoded[i]), (v.name, i, want, decoded[i])
        assert ev.truncated == tuple(name for name, k in (("name", 5), ("blob", 3))
                                     if len(rows[i][name] if name == "blob"
                                            else rows[i][name].encode()) > k)


def test_records_too_short_a_stride() -> None:
    """A stride that cannot hold the layout is refused, not read past."""
    lay = events.layout(0, ALL)
    with pytest.raises(ValueError, match="noop_ev_0"):
        events.records(lay, ringbuf.stride(lay.size) - 8)


# ---------------------------------------------------------------------------------------
# UserMetrics.on_records against on_event.

VALUES = (
    ValueSpec("who", "string", 6, 6, "string", "r.Method"),
    ValueSpec("code", "int", 4, 0, "int32", "r.Code"),
    ValueSpec("n", "int", 8, 0, "int64", "r.N"),
    ValueSpec("cost", "float", 8, 0, "float64", "r.Cost"),
    ValueSpec("secs", "float", 8, 0, "float64", "r.Secs"),
    ValueSpec("ratio", "float", 4, 0, "float32", "r.Ratio"),
    ValueSpec("ok", "bool", 1, 0, "bool", "r.OK"),
)
WHO = LabelRule("who", "who")
STATUS = LabelRule("status", "code", map=(("200", "ok"), ("404", "missing")),
                   allow="[a-z]+", other="other")
OK = LabelRule("ok", "ok")


def metric(name: str, kind: str, value: str | None, labels: tuple[LabelRule, ...] = (),
           buckets: tuple[float, ...] = (), max_series: int = 1000,
           where: str = "events") -> MetricPlan:
    return MetricPlan(name, kind, "", value, buckets, labels, max_series, where)


METRICS = (
    metric("calls_total", "counter", None, (WHO,), max_series=3),
    metric("status_total", "counter", None, (STATUS,)),
    metric("n_total", "counter", "n", (STATUS,)),
    metric("cost_total", "counter", "cost", (WHO, OK), max_series=4),
    metric("ratio_total", "counter", "ratio"),
    metric("oks_total", "counter", "ok"),
    metric("level", "gauge", "n", (WHO,), max_series=2),
    metric("ratio", "gauge", "ratio", (STATUS,)),
    metric("latency", "histogram", "secs", (STATUS, OK), buckets=(0.25, 1.0, 2.5),
           max_series=3),
    metric("codes", "histogram", "code", buckets=(-1.0, 0.0, 200.0, 404.0)),
    metric("n_size", "histogram", "n", (WHO,), buckets=(-100.0, 0.0, 100.0)),
    metric("kernel_total", "counter", None, (STATUS,), where="kernel", max_series=5),
)
PROBE = ProbePlan("req", "t", VALUES, (), metrics=METRICS)
PLAN = Plan("test", (), (ProbePlan("other", "t", (), ()), PROBE))
LAYOUT = events.layout(1, PROBE)


def random_rows(rng: random.Random, n: int) -> list[dict[str, Any]]:
    """Hits with repeating label values (some strings past their cap, so that two
    different reads give one label), values on and around bucket bounds, NaN, infinities."""
    who = ["GET", "POST", "PUT", "DELETE", "PATCHES", "PATCHED", "", "héé"]
    codes = [200, 404, 500, 501, -1, 0, 2**31 - 1]
    secs = [0.25, 1.0, 2.5, 0.1, 3.0, NAN, INF, -INF, -0.5, 0.0, 0.2500001]
    return [{"who": rng.choice(who), "code": rng.choice(codes),
             "n": rng.choice([-100, 0, 100, 101, -101, rng.randrange(-2**40, 2**40)]),
             "cost": rng.uniform(-10, 10), "secs": rng.choice(secs),
             "ratio": rng.choice([0.1, 0.5, -3.25, NAN, 1e30]), "ok": rng.random() < 0.5}
            for _ in range(n)]


def unpacked(bodies: list[bytes]) -> list[tuple[Any, ...]]:
    """Records as the exporter hands them to ``on_records``: one run, unpacked at once."""
    (run,) = runs_of(ring([Rec(b) for b in bodies]))
    assert run.count == len(bodies)
    return list(events.records(LAYOUT, run.stride).struct.iter_unpack(run.data))


def one_by_one(bodies: list[bytes]) -> UserMetrics:
    users = UserMetrics(PLAN)
    for body in bodies:
        users.on_event(PROBE, events.decode(LAYOUT, body))
    return users


def batched(bodies: list[bytes], cuts: list[int]) -> UserMetrics:
    users = UserMetrics(PLAN)
    records = unpacked(bodies)
    spec = events.records(LAYOUT, ringbuf.stride(LAYOUT.size))
    assert not faulty(records)
    for a, b in zip([0, *cuts], [*cuts, len(records)], strict=True):
        users.on_records(1, spec, records[a:b])  # PROBE is the plan's second
    return users


def samples(users: UserMetrics) -> list[tuple[Any, ...]]:
    """Every sample of every family, NaN made comparable."""
    return [(f.name, f.type, s.name, tuple(sorted(s.labels.items())),
             "NaN" if math.isnan(s.value) else s.value)
            for f in users.families({}) for s in f.samples]


def _cuts(kind: str, n: int) -> list[int]:
    if kind == "one-batch":
        return []
    if kind == "record-by-record":
        return list(range(1, n))
    rng = random.Random(kind)
    return sorted([0, 0, *rng.sample(range(1, n), 6), n])  # an empty batch at each end


@pytest.mark.parametrize("cuts", ["one-batch", "record-by-record", "random-cuts"])
def test_on_records_folds_as_on_event(cuts: str) -> None:
    """Folding unpacked records in batches gives exactly the families, series counts and
    overflow counts that folding each decoded event does: counts and sums per label set,
    the last gauge value, histogram buckets (NaN in +Inf, a bound in its own bucket),
    labels through map and allow, label sets past the cap in the overflow series."""
    rng = random.Random(7)
    rows = random_rows(rng, 600)
    bodies = [pack(LAYOUT, row, ts=10 * i, junk=rng) for i, row in enumerate(rows)]
    want, got = one_by_one(bodies), batched(bodies, _cuts(cuts, len(bodies)))
    assert samples(got) == samples(want)
    assert got.series() == want.series()
    assert got.overflow_updates() == want.overflow_updates()
    # the case is not vacuous: caps were hit, labels were decoded
    assert want.series()["calls_total"] == 3 and want.overflow_updates()["calls_total"] > 0
    assert want.overflow_updates()["level"] > 0 and want.overflow_updates()["latency"] > 0
    labels = {dict(s[3]).get("status") for s in samples(want)}
    assert {"ok", "missing", "other", OVERFLOW} <= labels
    assert ("status", "500") not in {kv for s in samples(want) for kv in s[3]}


def test_on_records_known_sums() -> None:
    """A small batch whose families are worked out by hand."""
    rows = [
        {"who": "GET", "code": 200, "n": 5, "cost": 0.5, "secs": 0.25, "ratio": 0.5,
         "ok": True},
        {"who": "GET", "code": 500, "n": -7, "cost": 1.25, "secs": NAN, "ratio": 2.0,
         "ok": False},
        {"who": "POSTING", "code": 404, "n": 100, "cost": -2.0, "secs": 2.5, "ratio": 1.0,
         "ok": True},
        {"who": "GET", "code": 200, "n": 1, "cost": 0.0, "secs": 1.0, "ratio": 4.0,
         "ok": True},
    ]
    bodies = [pack(LAYOUT, row, ts=i + 1) for i, row in enumerate(rows)]
    users = batched(bodies, [])
    got = {(s[2], s[3]): s[4] for s in samples(users)}
    assert got[("calls_total", (("who", "GET"),))] == 3
    assert got[("calls_total", (("who", "POSTIN"),))] == 1
    assert got[("n_total", (("status", "ok"),))] == 6
    assert got[("n_total", (("status", "other"),))] == -7
    assert got[("n_total", (("status", "missing"),))] == 100
    assert got[("cost_total", (("ok", "true"), ("who", "GET")))] == 0.5
    assert got[("oks_total", ())] == 3
    assert got[("level", (("who", "GET"),))] == 1
    assert got[("ratio", (("status", "ok"),))] == 4.0
    assert got[("latency_bucket", (("le", "0.25"), ("ok", "true"), ("status", "ok")))] == 1
    assert got[("latency_bucket", (("le", "1"), ("ok", "true"), ("status", "ok")))] == 2
    assert got[("latency_bucket", (("le", "2.5"), ("ok", "false"), ("status", "other")))] \
        == 0
    assert got[("latency_bucket", (("le", "+Inf"), ("ok", "false"), ("status", "other")))] \
        == 1
    assert got[("latency_sum", (("ok", "false"), ("status", "other")))] == "NaN"
    assert got[("codes_bucket", (("le", "0"),))] == 0
    assert got[("codes_bucket", (("le", "200"),))] == 2
    assert got[("codes_bucket", (("le", "404"),))] == 3
    assert got[("codes_bucket", (("le", "+Inf"),))] == 4
    assert samples(users) == samples(one_by_one(bodies))


# (hits as (ts, code, n), the gauge's value): "level" by the label of "code", one batch
GAUGE = [
    pytest.param([(1, 200, 1), (2, 200, 2), (3, 200, 3)], 3, id="in-order"),
    pytest.param([(5, 200, 1), (5, 200, 2)], 2, id="tie-later-wins"),
    pytest.param([(9, 500, 1), (4, 501, 2)], 1, id="older-hit-of-other-code"),
    pytest.param([(5, 200, 1), (3, 200, 2)], 1, id="older-hit-after-newer"),
    pytest.param([(5, 500, 1), (5, 501, 2), (5, 500, 3)], 3, id="tie-across-codes"),
]


@pytest.mark.parametrize(("hits", "want"), GAUGE)
def test_gauge_keeps_the_latest_hit(hits: list[tuple[int, int, int]], want: int) -> None:
    """A gauge holds the value of its latest hit by timestamp (a later record wins a
    tie), whatever order the ring holds hits in (CPUs commit out of time order) and
    whichever raw values a label set came from (500 and 501 are both "other")."""
    probe = ProbePlan("g", "t", VALUES, (),
                      metrics=(metric("level", "gauge", "n", (STATUS,)),))
    plan = Plan("test", (), (probe,))
    lay = events.layout(0, probe)
    row = random_rows(random.Random(1), 1)[0]
    bodies = [pack(lay, {**row, "code": code, "n": n}, ts=ts) for ts, code, n in hits]
    (run,) = runs_of(ring([Rec(b) for b in bodies]))
    spec = events.records(lay, run.stride)
    batch, single = UserMetrics(plan), UserMetrics(plan)
    batch.on_records(0, spec, list(spec.struct.iter_unpack(run.data)))
    for body in bodies:
        single.on_event(probe, events.decode(lay, body))
    assert [s.value for f in single.families({}) for s in f.samples] == [want]
    assert [s.value for f in batch.families({}) for s in f.samples] == [want]


# ---------------------------------------------------------------------------------------
# faulty.


@pytest.mark.parametrize(("bits", "want"), [
    pytest.param([], [], id="no-records"),
    pytest.param([(0, 0)] * 4, [], id="all-read"),
    pytest.param([(0, 0), (1, 0), (0, 0)], [1], id="fault"),
    pytest.param([(0, 0), (0, 0), (0, 1 << 3)], [2], id="absent-last"),
    pytest.param([(1 << 6, 0)], [0], id="fault-high-bit"),
    pytest.param([(1 << 2, 1 << 4), (0, 0), (1, 1)], [0, 2], id="both"),
])
def test_faulty(bits: list[tuple[int, int]], want: list[int]) -> None:
    """The records that must be decoded one by one, as events: exactly those where
    ``decode`` reports a value whose read faulted or was absent."""
    row = random_rows(random.Random(3), 1)[0]
    bodies = [pack(LAYOUT, row, faults=f, absent=a) for f, a in bits]
    records = unpacked(bodies) if bodies else []
    assert faulty(records) == want
    assert want == [i for i, b in enumerate(bodies)
                    if (ev := events.decode(LAYOUT, b)).faults or ev.absent]


# ---------------------------------------------------------------------------------------
# Values noop derives from the words a site read (fetches.FORMULAS).

def _bits(x: float) -> int:
    return int.from_bytes(struct.pack("<d", x), "little")


DERIVED = ProbePlan("d", "t", (ValueSpec("name", "string", 4, 4, "string", "g.name"),
                               ValueSpec("val", "float", 8, 0, "float64", "val")), (
    Site("f", 1, 1, "in a register", (Fetch("mem_slice"), Fetch("reg", regs=("rcx",)))),
    Site("f", 2, 2, "after a CAS", (Fetch("mem_slice"),
                                    Fetch("derived", regs=("rax", "rdx"), formula="new-old"))),
))


@pytest.mark.parametrize(("formula", "words", "want"), [
    ("new-old", (_bits(10.0), _bits(15.0)), 5.0),
    ("new-old", (_bits(-406.0), _bits(-413.0)), -7.0),
    ("old-new", (_bits(-406.0), _bits(-413.0)), 7.0),
    ("new-old", (_bits(0.25 * 22), _bits(0.25 * 23)), 0.25),
    ("uint", (3, 0), 3.0),
    ("uint", (2**64 - 1, 0), float(2**64 - 1)),
])
def test_derived_values(formula: str, words: tuple[int, int], want: float) -> None:
    """A value derived from two words takes two u64s in every record of its probe (the
    C struct says so); each site's own formula gives it back, and a site that reads it
    whole reads the first word."""
    lay = events.layout(0, DERIVED)
    val = lay.slots[1]
    assert (val.words, val.size, lay.size) == (2, 16, events.HEADER_SIZE + 16 + 16)
    assert "u64 v1[2];" in "\n".join(events.c_struct(lay))
    body = HEADER.pack(1, 0, 7, 7, 0, 1, 0, 0, 0) + struct.pack("<I4x8s", 2, b"ab") \
        + struct.pack("<QQ", *words)
    assert events.decode(lay, body, derived={"val": formula}).values == \
        {"name": "ab", "val": want}
    whole = events.decode(lay, body).values["val"]
    assert whole == struct.unpack("<d", struct.pack("<Q", words[0]))[0] or \
        math.isnan(whole)


def test_derived_values_unpack_at_once_as_decode() -> None:
    """A run of records of a probe with a value derived at one site (site 1) and read
    whole at the other (site 0): ``Records.finish`` gives every value as ``decode`` does
    with the site's own formulas, so such probes keep the batch path."""
    lay = events.layout(0, DERIVED)
    stride = ringbuf.stride(lay.size)
    derived = {0: {}, 1: {"val": "new-old"}}
    spec = events.records(lay, stride, derived)
    assert spec.struct.size == stride
    bodies = []
    for i, (site, words) in enumerate([(1, (_bits(10.0), _bits(15.0))), (0, (_bits(2.5), 9)),
                                       (1, (_bits(-406.0), _bits(-413.0)))]):
        body = HEADER.pack(100 + i, 0, 7, 7, 0, site, 0, 0, 0) + \
            struct.pack("<I4x8s", 2, b"ab") + struct.pack("<QQ", *words)
        bodies.append(body + bytes(stride - 8 - len(body)))
    raw = b"".join(struct.pack("<I4x", len(b)) + b for b in bodies)
    got = spec.finish(list(spec.struct.iter_unpack(raw)))
    for t, body in zip(got, bodies, strict=True):
        ev = events.decode(lay, body, derived=derived[t[events.SITE]])
        assert spec.value("val", t) == ev.values["val"]
        assert spec.value("name", t) == ev.values["name"] == "ab"
    assert [spec.value("val", t) for t in got] == [5.0, 2.5, -7.0]
