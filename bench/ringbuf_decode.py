"""Time how fast ``noop run`` turns BPF ring-buffer records into metric state, per kind.

Usage: python bench/ringbuf_decode.py [--records N] [--repeats R] [--json]
What: CPU time of this single-threaded process (``time.process_time``, and wall time
beside it) for ``agent.ringbuf.runs`` over a stretch of ring bytes plus
``Session.on_run`` for each run it yields: the code ``noop run`` reads its ring with.
One case per metric kind, each a plan of one probe and one metric aggregated in noop
(``where="events"``), with the program ``codegen.generate`` makes of it (C text only:
nothing is loaded); one more case feeds the string-labelled counter record by record
through ``Session.on_record``, the per-record decode noop did before batching.
How: N records packed as the BPF side leaves them in a 1 MiB ring (each record
written over what the ring held one lap before, so string tails and padding are stale
bytes, as in the kernel), read in chunks of at most 1 MiB of records (what one drain of
noop's ring can hold). Each case runs R times on a fresh session; the figures are the
medians. After every run the metric's samples are checked against what the packed
values imply (counts, sums, histogram buckets, the latest gauge values): a mismatch
raises instead of printing a figure.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import struct
import sys
import time
from bisect import bisect_right
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from agent.config.decoders import LabelRule, go_float
from agent.kernel import codegen, ringbuf
from agent.kernel.events import HEADER, Layout
from agent.kernel.prelude import RINGBUF_BYTES
from agent.kernel.program import Program
from agent.output.exporter import Session
from agent.output.usermetrics import UserMetrics
from agent.plan.fetches import Fetch, Op
from agent.plan.model import MetricPlan, Plan, ProbePlan, Site, TargetPlan, ValueSpec

RING = RINGBUF_BYTES  # noop's ring buffer: what one drain reads at most
SEED = 20240611
# The ring header (u32 length, u32 page offset) and struct noop_hdr, packed at once.
HEAD = struct.Struct("<II" + HEADER.format.lstrip("<"))
TARGET = TargetPlan("svc", "/srv/svc", "", "go", None, None)
PID, THREADS = 4242, (4242, 4250, 4251, 4263)

Columns = dict[str, list[Any]]  # per value (and "ts"): one entry per record
SampleKey = tuple[str, tuple[tuple[str, str], ...]]
Samples = dict[SampleKey, float]

# ---------------------------------------------------------------------------------------
# The probe values, how the site reads them (Go ABI: a string in rax/rbx, a struct
# pointer in rcx, ints in rdi/rsi; floats from memory, as XMM registers cannot be read),
# and how a hit's value is drawn.

CUSTOMERS = ("acme", "globex", "initech-enterprises")  # the last is past the cap
CUSTOMER = ValueSpec("customer", "string", 16, 16, "string", "req.Customer")
AMOUNT = ValueSpec("amount", "float", 8, 0, "float64", "req.Amount")
SECONDS = ValueSpec("seconds", "float", 8, 0, "float64", "req.Seconds")
LEVEL = ValueSpec("level", "int", 8, 0, "int64", "level")
SHARD = ValueSpec("shard", "int", 4, 0, "int32", "shard")
FETCHES = {
    "customer": Fetch("reg_slice", regs=("rax", "rbx")),
    "amount": Fetch("mem", ops=(Op("reg", reg="rcx"),), offset=16, size=8),
    "seconds": Fetch("mem", ops=(Op("reg", reg="rcx"),), offset=24, size=8),
    "level": Fetch("reg", regs=("rdi",), size=8),
    "shard": Fetch("reg", regs=("rsi",), size=4),
}
BOUNDS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25)


def _customers(rng: random.Random, n: int) -> list[bytes]:
    names = [c.encode() for c in CUSTOMERS]
    return rng.choices(names, weights=(60, 30, 10), k=n)


def _amounts(rng: random.Random, n: int) -> list[float]:
    return [round(rng.lognormvariate(3.0, 1.2), 2) for _ in range(n)]


def _seconds(rng: random.Random, n: int) -> list[float]:
    """Latencies around 10 ms, some exactly on a bucket bound."""
    return [rng.choice(BOUNDS) if rng.random() < 0.02 else rng.lognormvariate(-4.5, 1.3)
            for _ in range(n)]


def _levels(rng: random.Random, n: int) -> list[int]:
    return [rng.randrange(-1_000, 1 << 40) for _ in range(n)]


def _shards(rng: random.Random, n: int) -> list[int]:
    return [rng.randrange(50) for _ in range(n)]


DRAW: dict[str, Callable[[random.Random, int], list[Any]]] = {
    "customer": _customers, "amount": _amounts, "seconds": _seconds,
    "level": _levels, "shard": _shards,
}

# ---------------------------------------------------------------------------------------
# What the metric of each case should hold after the records, from the drawn values.


def _want_calls(cols: Columns) -> Samples:
    return {("calls_total", ()): float(len(cols["ts"]))}


def _want_by_customer(cols: Columns) -> Samples:
    counts = Counter(c[:CUSTOMER.cap].decode() for c in cols["customer"])
    return {("calls_total", (("customer", c),)): float(n) for c, n in counts.items()}


def _sequential_sum(xs: list[float]) -> float:
    total = 0.0
    for x in xs:
        total += x
    return total


def _want_amount(cols: Columns) -> Samples:
    return {("amount_total", ()): _sequential_sum(cols["amount"])}


def _want_seconds(cols: Columns) -> Samples:
    xs = sorted(cols["seconds"])
    out: Samples = {("seconds_bucket", (("le", go_float(b)),)): float(bisect_right(xs, b))
                    for b in BOUNDS}
    out[("seconds_bucket", (("le", "+Inf"),))] = float(len(xs))
    out[("seconds_count", ())] = float(len(xs))
    out[("seconds_sum", ())] = _sequential_sum(cols["seconds"])
    return out


def _want_level(cols: Columns) -> Samples:
    """Per shard, the level of its latest hit (the later record of equal times)."""
    latest: dict[int, tuple[int, int, int]] = {}
    for i, (ts, shard, level) in enumerate(zip(cols["ts"], cols["shard"], cols["level"],
                                               strict=True)):
        if shard not in latest or (ts, i) > latest[shard][:2]:
            latest[shard] = (ts, i, level)
    return {("level", (("shard", str(s)),)): float(v) for s, (_t, _i, v) in latest.items()}


# ---------------------------------------------------------------------------------------
# The cases.


@dataclass(frozen=True)
class Case:
    name: str
    values: tuple[ValueSpec, ...]
    metric: MetricPlan
    want: Callable[[Columns], Samples]
    one_by_one: bool = False  # through Session.on_record, record by record


def _metric(name: str, kind: str, value: str | None, labels: tuple[LabelRule, ...] = (),
            buckets: tuple[float, ...] = ()) -> MetricPlan:
    return MetricPlan(name, kind, "", value, buckets, labels, 1000, "events")


BY_CUSTOMER = _metric("calls", "counter", None, (LabelRule("customer", "customer"),))
CASES = (
    Case("counter, calls", (), _metric("calls", "counter", None), _want_calls),
    Case("counter, calls by string", (CUSTOMER,), BY_CUSTOMER, _want_by_customer),
    Case("counter, sum of float64", (AMOUNT,), _metric("amount", "counter", "amount"),
         _want_amount),
    Case("histogram, float64, 8 buckets", (SECONDS,),
         _metric("seconds", "histogram", "seconds", buckets=BOUNDS), _want_seconds),
    Case("gauge, int64 by int (50)", (LEVEL, SHARD),
         _metric("level", "gauge", "level", (LabelRule("shard", "shard"),)), _want_level),
    Case("calls by string, on_record", (CUSTOMER,), BY_CUSTOMER, _want_by_customer,
         one_by_one=True),
)


def plan_of(case: Case) -> Plan:
    site = Site("main.handle", 0x4A1000, 0xA1000, "function entry",
                tuple(FETCHES[v.name] for v in case.values))
    probe = ProbePlan("handle", TARGET.name, case.values, (site,), metrics=(case.metric,))
    return Plan("bench", (TARGET,), (probe,))


def program_of(plan: Plan) -> Program:
    """The program ``noop run`` would load; every value readable at its site, so runs
    take the batched path (an unreadable value sends them record by record)."""
    program = codegen.generate(plan, None, mode="run")
    why = {name: reason for reasons in program.unreadable.values()
           for name, reason in reasons.items()}
    if why:
        raise RuntimeError(f"values unreadable at the site: {why}")
    return program


class NoMaps:
    """The loaded program's maps, which a session reads only at scrape time."""

    def __init__(self) -> None:
        self.attachments: list[Any] = []

    def rows(self, probe: int) -> list[tuple[bytes, list[bytes]]]:
        return []

    def produced(self) -> dict[int, int]:
        return {}

    def lost_by_probe(self) -> dict[int, int]:
        return {}

    def faults(self) -> dict[int, int]:
        return {}


def session_of(plan: Plan, program: Program) -> Session:
    return Session(plan, program, NoMaps(), UserMetrics(plan), None)


# ---------------------------------------------------------------------------------------
# Packing the ring.


def draw(case: Case, rng: random.Random, n: int) -> Columns:
    """Each value of ``n`` hits, and their times: increasing, a few microseconds apart."""
    ts, t = [], 1_000_000_000_000
    for _ in range(n):
        t += rng.randrange(200, 20_000)
        ts.append(t)
    cols: Columns = {"ts": ts, "tid": rng.choices(THREADS, k=n)}
    for v in case.values:
        cols[v.name] = DRAW[v.name](rng, n)
    return cols


Writer = Callable[[bytearray, int, int], None]


def _writer(lay: Layout, index: int, cols: Columns, rng: random.Random) -> Writer:
    """What the BPF program writes into slot ``index`` of record ``i`` at ``at``."""
    slot = lay.slots[index]
    v, column, off = slot.value, cols[slot.value.name], slot.offset + ringbuf.HEADER_SIZE
    if slot.cap:  # u32 full length, its pad word left alone, then at most cap bytes
        def text(out: bytearray, at: int, i: int) -> None:
            data = column[i]
            struct.pack_into("<I", out, at + off, len(data))
            kept = data[:slot.cap]
            out[at + off + 8:at + off + 8 + len(kept)] = kept
        return text
    if v.decode == "float":
        fmt = struct.Struct("<d")
        return lambda out, at, i: fmt.pack_into(out, at + off, column[i])
    if v.size == 8:
        fmt = struct.Struct("<q")
        return lambda out, at, i: fmt.pack_into(out, at + off, column[i])
    # a narrower int from a register: the register's upper bytes come along
    fmt = struct.Struct(f"<{'bhi'[v.size.bit_length() - 1]}{8 - v.size}s")
    noise = [rng.randbytes(8 - v.size) for _ in range(64)]
    return lambda out, at, i: fmt.pack_into(out, at + off, column[i], noise[i & 63])


def pack(lay: Layout, cols: Columns, rng: random.Random) -> bytes:
    """The ring bytes of the hits in ``cols``, one after another as if the ring were
    never wrapped: each record written over what the ring held there one lap before
    (zeros on the first lap), as the kernel's producer does."""
    n, step = len(cols["ts"]), ringbuf.stride(lay.size)
    out = bytearray(n * step)
    writers = [_writer(lay, k, cols, rng) for k in range(len(lay.slots))]
    ts, tid = cols["ts"], cols["tid"]
    for i in range(n):
        at = i * step
        if at >= RING:
            out[at:at + step] = out[at - RING:at - RING + step]
        page = (at % RING) // 4096 + 2  # the page offset the reader ignores
        HEAD.pack_into(out, at, lay.size, page, ts[i], 0, PID, tid[i], lay.probe, 0, 0, 0, 0)
        for w in writers:
            w(out, at, i)
    return bytes(out)


def chunks(buf: bytes, step: int) -> list[memoryview]:
    """``buf`` in the stretches one drain of the ring reads: at most 1 MiB of records."""
    whole, size = memoryview(buf), RING // step * step
    return [whole[a:a + size] for a in range(0, len(buf), size)]


# ---------------------------------------------------------------------------------------
# Timing and checking.


def feed(session: Session, stretches: list[memoryview], one_by_one: bool) -> None:
    """What the daemon does with each drain of the ring."""
    if one_by_one:
        for stretch in stretches:
            for run in ringbuf.runs(stretch):
                for record in ringbuf.records(run):
                    session.on_record(record)
        return
    for stretch in stretches:
        for run in ringbuf.runs(stretch):
            session.on_run(run)


def samples(session: Session) -> Samples:
    return {(s.name, tuple(sorted(s.labels.items()))): float(s.value)
            for family in session.users.families({}) for s in family.samples}


def check(case: Case, session: Session, want: Samples, n: int) -> None:
    """Raise unless the session decoded every record and holds exactly ``want``."""
    if session.seen != {0: n} or session.undecodable.total():
        raise AssertionError(f"{case.name}: decoded {session.seen}, "
                             f"{session.undecodable.total()} errors, of {n} records")
    got = samples(session)
    if got.keys() != want.keys():
        raise AssertionError(f"{case.name}: samples {sorted(got)} != {sorted(want)}")
    for key, x in want.items():
        if not math.isclose(got[key], x, rel_tol=1e-12):
            raise AssertionError(f"{case.name}: {key} is {got[key]!r}, not {x!r}")


@dataclass(frozen=True)
class Result:
    case: str
    record_bytes: int  # the stride: ring header, record, padding
    records: int
    cpu_s: list[float]
    wall_s: list[float]

    @property
    def cpu(self) -> float:
        return statistics.median(self.cpu_s)

    @property
    def wall(self) -> float:
        return statistics.median(self.wall_s)

    @property
    def rate(self) -> float:
        """Records per CPU second, from the median run."""
        return self.records / self.cpu

    def to_json(self) -> dict[str, Any]:
        return {"case": self.case, "record_bytes": self.record_bytes,
                "records": self.records, "median_cpu_s": self.cpu,
                "median_wall_s": self.wall, "records_per_cpu_s": self.rate,
                "cpu_s": self.cpu_s, "wall_s": self.wall_s}


def measure(case: Case, n: int, repeats: int) -> Result:
    plan = plan_of(case)
    program = program_of(plan)
    rng = random.Random(SEED)
    cols = draw(case, rng, n)
    want = case.want(cols)
    lay = program.layouts[0]
    buf = pack(lay, cols, rng)
    del cols
    step = ringbuf.stride(lay.size)
    stretches = chunks(buf, step)
    cpu, wall = [], []
    for _ in range(repeats):
        session = session_of(plan, program)
        c0, w0 = time.process_time(), time.perf_counter()
        feed(session, stretches, case.one_by_one)
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - w0)
        check(case, session, want, n)
    for s in stretches:
        s.release()
    return Result(case.name, step, n, cpu, wall)


def table(results: list[Result], repeats: int) -> Iterator[str]:
    yield (f"{'case':<32}{'rec B':>6}{'records':>10}{'CPU s':>8}{'wall s':>8}"
           f"{'M rec/s':>9}")
    for r in results:
        yield (f"{r.case:<32}{r.record_bytes:>6}{r.records:>10}{r.cpu:>8.3f}"
               f"{r.wall:>8.3f}{r.rate / 1e6:>9.2f}")
    yield (f"median of {repeats} runs; M rec/s = records per CPU second of one core "
           f"(Python {sys.version.split()[0]})")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    a = ap.parse_args()
    if a.records < 1 or a.repeats < 1:
        ap.error("--records and --repeats take a positive number")
    results = [measure(case, a.records, a.repeats) for case in CASES]
    if a.json:
        print(json.dumps({"repeats": a.repeats, "python": sys.version.split()[0],
                          "results": [r.to_json() for r in results]}, indent=2))
    else:
        print("\n".join(table(results, a.repeats)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
