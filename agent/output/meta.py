"""Meta-metrics of a program's own Prometheus metrics (client_golang's, the prometheus
crate's), for ``noop run --binary``: how often each series is updated (by operation),
its value as seen in the process's memory, and the sum of the increments noop saw.
Built at scrape time from the preset's in-kernel rows; each metric object's name and
labels come from the one event the BPF program sends the first time it sees the
object. An event it cannot decode raises Undecodable; a row, only that row is left out
of the scrape (and counted). Imports no BPF."""

from __future__ import annotations

import math
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from agent.kernel.aggregate import Row
from agent.kernel.events import Event
from agent.live.cgroups import Processes
from agent.output import updates
from agent.output.undecodable import Tally, probe_of, row_ident, why
from agent.output.usermetrics import with_labels
from agent.plan import generations
from agent.plan.client_golang.facts import COUNT_MASK
from agent.plan.model import Plan, ProbePlan
from agent.plan.presets import library
from agent.plan.rust_prometheus import facts as rust_prometheus

LABELS = ("target", "pid", "library", "metric", "labels")


def _float(bits: int) -> float:
    return float(struct.unpack("<d", struct.pack("<Q", bits))[0])


@dataclass
class _Object:
    """What noop knows of one metric object of one process, merged over its rows."""

    kind: str = ""
    int_part: int | None = None  # counter: largest valInt seen
    bits_part: float | None = None  # counter: largest valBits seen
    last: tuple[int, float] | None = None  # gauge: (time, value) of the latest update
    count: int | None = None  # histogram: observations, from countAndHotIdx
    first: tuple[int, float] | None = None  # (time, value before the first update seen)
    updates: dict[str, int] = field(default_factory=dict)
    # Carried forward (sites before the update): the earliest value read before one,
    # and what the updates seen since added to it.
    base: int | None = None
    added: int = 0
    carried: bool = False
    # The prometheus crate's: a counter's largest value seen; the increments' exact sum
    # (while ``exact``: every update seen had an increment known exactly); a float
    # counter's smallest old value any CPU saw first.
    now: float | None = None
    summed: float = 0.0
    exact: bool | None = None
    low: float | None = None
    seen: int = 0  # the time of its first hit noop counted (its rows' earliest)

    def add_exact(self, inc: float) -> None:
        self.summed += inc
        self.exact = self.exact is not False

    def increments(self, now: float) -> float | None:
        """The value now less the value before the first update noop saw."""
        if self.exact:
            return self.summed
        if self.low is not None:
            return now - self.low
        return now - self.first[1] if self.first is not None else None

    def carry(self, base: int | None, added: int, carried: bool = True) -> None:
        """Updates seen since ``base``, the value before the first of them. Only rows
        read before their update (``carried``) make the object's value the carried
        one: alone, the rows read after it have the value itself."""
        self.carried |= carried
        self.added += added
        if base is not None and (self.base is None or base < self.base):
            self.base = base

    def value(self) -> float | None:
        if self.now is not None:
            return self.now
        if self.carried and self.base is not None:
            whole = self.base + self.added
            if self.kind == "counter":
                return (self.bits_part or 0.0) + whole
            return float(whole)
        if self.kind == "counter" and self.int_part is not None:
            return (self.bits_part or 0.0) + self.int_part
        if self.kind == "gauge" and self.last is not None:
            return self.last[1]
        return float(self.count) if self.count is not None else None

    def earlier(self, ts: int, before: float) -> None:
        if ts and (self.first is None or ts < self.first[0]):
            self.first = (ts, before)


Object = tuple[int, int, int]  # (pid, address, its generation: plan.generations)
Series = tuple[int, str, str]  # (pid, metric, labels)


@dataclass
class _Retired:
    """What the objects of one series that are gone had counted, and the value of the
    one of them first updated last (with that time)."""

    updates: dict[str, int] = field(default_factory=dict)
    increments: float | None = None
    value: float | None = None
    seen: int = 0


class PresetMeta:
    """``on_event`` learns each object's name and labels; ``families`` reads the rows.

    A metric object is known by its process, its address and that address's generation
    (``plan.generations``; 0 where the preset saw none). A program that makes a metric
    again (a registry per request) makes one series of all the objects of one name and
    labels: its value is the newest live object's (made last where the generations say
    when objects were made, else first updated last), its updates and increments those
    of all of them. ``retire`` folds the rows of objects that are gone into their
    series, so that the rows can leave the kernel's map."""

    def __init__(self, plan: Plan, target: str, processes: Processes | None = None) -> None:
        self.plan = plan
        self.target = target
        self.processes = processes or Processes()
        self.library = library(plan)
        self._lock = threading.Lock()
        self._names: dict[Object, tuple[str, str]] = {}
        self._retired: dict[Series, _Retired] = {}
        self._unnamed: dict[int, int] = {}  # per process: updates of nameless objects
        self._nameless: set[Object] = set()  # objects nameless at the last sweep
        # whether the plan's rows say their object's generation; and whether that is
        # when the object was made (client_golang's makers), which orders a series'
        # objects, or when the address's last object was dropped (the crate's)
        self.renews = any(p.renews for p in plan.probes)
        self.made = any(s.role == "renew" and s.tag == "made"
                        for p in plan.probes for s in p.sites)

    def on_event(self, probe_index: int, event: Event) -> None:
        """Learns the name and labels of the event's metric object; Undecodable when the
        event tells no update of the preset's."""
        probe = probe_of(self.plan, replace(event, probe=probe_index))
        u = updates.update(event, probe, self.library)
        if u.metric == "?":  # the name could not be read; try again on the next one
            return
        labels = ",".join(f"{k}={v}" for k, v in sorted(u.labels.items()))
        generation = int(event.values.get(generations.NAME) or 0)
        with self._lock:
            self._names[(event.pid, u.object, generation)] = (u.metric, labels)

    def forget(self, pids: set[int]) -> None:
        with self._lock:
            for key in [k for k in self._names if k[0] in pids]:
                del self._names[key]
            for series in [k for k in self._retired if k[0] in pids]:
                del self._retired[series]
            for pid in pids & set(self._unnamed):
                del self._unnamed[pid]

    def objects(self, rows: dict[int, list[Row]], tally: Tally) -> dict[Object, _Object]:
        """Each metric object's rows merged; a row that cannot be decoded is left out and
        its hits counted in ``tally``."""
        objs: dict[Object, _Object] = {}
        for pi, probe in enumerate(self.plan.probes):
            for row in rows.get(pi, []):
                if row.key is None:
                    continue
                try:
                    key, o = self._fold_row(probe, row, objs)
                except Exception as exc:  # that row only: the scrape goes on
                    tally.row(why(exc, probe.name, f"row {row.key!r}: {row.columns!r}"),
                              row_ident(pi, row), row.hits)
                    continue
                objs[key] = o
        return objs

    def _fold_row(self, probe: ProbePlan, row: Row, objs: dict[Object, _Object]
                  ) -> tuple[Object, _Object]:
        """The object ``row`` is of, with the row folded into a copy of what ``objs``
        holds of it (kept only when all of the row could be read)."""
        assert row.key is not None
        key = object_of(row.key)
        site = int(row.key["$site"])
        kind, op = updates.operation(probe, site, self.library)
        had = objs.get(key)
        o = _Object(kind) if had is None else replace(had, updates=dict(had.updates))
        o.updates[op] = o.updates.get(op, 0) + row.hits
        if row.born and (not o.seen or row.born < o.seen):
            o.seen = row.born
        if self.library == rust_prometheus.LIBRARY:
            _fold_rust(probe, site, o, row.columns, row.hits)
        else:
            _fold(probe.name, o, row.columns, row.hits)
        return key, o

    def superseded(self, keys: set[Object]) -> set[Object]:
        """Of the objects ``keys`` (those with rows, listed before the ring buffer was
        last read to its end), the ones whose rows can be retired: an object whose
        address has a later generation among ``keys`` (another object was made there,
        or it was dropped and another one updated there); where generations are when
        objects were made, also one a newer object of its series replaced; and one
        whose name never came (its event was lost, or its name could not be read):
        ``retire`` counts its updates as unnamed, and its next update, if any, makes a
        new row and says its name again."""
        latest: dict[tuple[int, int], int] = {}
        for pid, address, generation in keys:
            latest[(pid, address)] = max(latest.get((pid, address), 0), generation)
        with self._lock:
            # Nameless at two sweeps in a row: a row is made before its event is sent,
            # so at one sweep its name may still be on its way.
            now = {k for k in keys if k not in self._names}
            nameless, self._nameless = now & self._nameless, now
            gone = nameless | {k for k in keys if k[2] < latest[k[:2]] and k in self._names}
            if not self.made:
                return gone
            newest: dict[Series, int] = {}
            for k in keys:
                name = self._names.get(k)
                if name is not None:
                    series = (k[0], *name)
                    newest[series] = max(newest.get(series, 0), k[2])
            return gone | {k for k in keys if (name := self._names.get(k)) is not None
                           and k[2] < newest[(k[0], *name)]}

    def retire(self, rows: dict[int, list[Row]], tally: Tally) -> None:
        """Every row of some objects, about to leave the kernel's map: what they counted
        stays in their series. Called with the session's lock held."""
        for key, o in self.objects(rows, tally).items():
            with self._lock:
                name = self._names.pop(key, None)
                if name is None:  # its name never came: counted, but in no series
                    self._unnamed[key[0]] = self._unnamed.get(key[0], 0) + \
                        sum(o.updates.values())
                    continue
                r = self._retired.setdefault((key[0], *name), _Retired())
            for op, n in o.updates.items():
                r.updates[op] = r.updates.get(op, 0) + n
            now = o.value()
            since = o.increments(now) if now is not None else None
            if since is not None:
                r.increments = (r.increments or 0.0) + since
            if now is not None and o.seen >= r.seen:
                r.value, r.seen = now, o.seen

    def families(self, rows: dict[int, list[Row]], tally: Tally) -> Iterator[Metric]:
        updates = CounterMetricFamily(
            "noop_metric_updates", "Updates of the program's own metric series seen by "
            "noop, by operation", labels=[*LABELS, "op"])
        value = GaugeMetricFamily(
            "noop_metric_value", "The series' value in the process's memory at its "
            "latest update (a histogram: its observation count)", labels=list(LABELS))
        incs = GaugeMetricFamily(
            "noop_metric_increments", "Sum of the increments noop saw: the value now "
            "minus the value before the first update it saw", labels=list(LABELS))
        unnamed = CounterMetricFamily(
            "noop_metric_unnamed_updates", "Updates of metric objects whose name noop "
            "never read (its ring-buffer event was lost): in no series",
            labels=["target", "pid", "library"])
        with self._lock:
            names = dict(self._names)
            for pid, n in sorted(self._unnamed.items()):
                unnamed.add_metric([self.target, str(pid), self.library], n)
            retired = {k: replace(r, updates=dict(r.updates)) for k, r in self._retired.items()}
        series: dict[Series, list[tuple[Object, _Object]]] = {}
        for key, o in self.objects(rows, tally).items():
            name = names.get(key)
            if name is not None:  # else its description is still in the ring buffer
                series.setdefault((key[0], *name), []).append((key, o))
        for s in sorted(set(series) | set(retired)):
            pid, metric, labelset = s
            labels = [self.target, str(pid), self.library, metric, labelset]
            where = self.processes.labels(pid)  # the container's, none on the host
            marks = [len(f.samples) for f in (updates, value, incs)]
            old = retired.get(s, _Retired())
            counts = dict(old.updates)
            since = old.increments
            # The value: the newest live object's (made last, where generations say
            # when objects were made; else first updated last), else the newest gone one's.
            now = None
            for _key, o in sorted(series.get(s, []), key=lambda ko: (
                    ko[0][2] if self.made else 0, ko[1].seen, ko[0])):
                for op, n in o.updates.items():
                    counts[op] = counts.get(op, 0) + n
                got = None
                if (v := o.value()) is not None:
                    now = v
                    got = o.increments(v)
                if got is not None:
                    since = (since or 0.0) + got
            if now is None:
                now = old.value
            for op, n in sorted(counts.items()):
                updates.add_metric([*labels, op], n)
            if now is not None:
                value.add_metric(labels, now)
                if since is not None:
                    incs.add_metric(labels, since)
            for f, mark in zip((updates, value, incs), marks, strict=True):
                with_labels(f, mark, where)
        yield from (updates, value, incs, unnamed)


def object_of(key: dict[str, Any]) -> Object:
    """The metric object the preset's aggregate row with (decoded) ``key`` is of."""
    return (int(key["$pid"]), int(key["object"] or 0), int(key.get(generations.NAME) or 0))


def _fold(rule: str, o: _Object, cols: dict[str, Any], hits: int) -> None:
    if rule == "counter_int":  # Inc: valInt before it, in a register; adds one
        first = cols.get("first_int")
        o.carry(first[0] if first is not None else None, hits, carried=False)
    if rule == "counter_add":  # Add's integer path, carried: valInt before, the argument
        o.carry(cols.get("base"), cols.get("added") or 0)
    if rule in ("counter_int", "counter_float", "counter_add"):
        if cols.get("int") is not None:
            o.int_part = max(o.int_part or 0, cols["int"])
        if cols.get("bits") is not None:
            o.bits_part = max(o.bits_part or 0.0, _float(cols["bits"]))
        fi, fb = cols.get("first_int"), cols.get("first_bits")
        if fb is not None:  # valBits only grows: the float part is at least this
            o.bits_part = max(o.bits_part or 0.0, _float(fb[0]))
        if fi is not None and fb is not None:
            o.earlier(min(fi[1], fb[1]), fi[0] + _float(fb[0]))
    elif rule == "summary_buffered":  # the count as the latest hit read it; a hit each
        parts = [cols.get(n) for n in ("cnt", "cold", "hot")]
        if all(p is not None for p in parts):
            ts = max(p[1] for p in parts if p is not None)
            if o.last is None or ts > o.last[0]:
                o.last = (ts, float(sum(p[0] for p in parts if p is not None)))
                o.now = o.last[1]
        o.add_exact(hits)  # one observation a hit
    elif rule in ("gauge_add", "gauge_set"):
        last, first = cols.get("last"), cols.get("first")
        if last is not None and (o.last is None or last[1] > o.last[0]):
            o.last = (last[1], _float(last[0]))
        if first is not None:
            o.earlier(first[1], _float(first[0]))
    else:
        if "base" in cols:  # at the call's entry, before its update: carried
            o.carry(cols["base"], hits)
        if cols.get("count") is not None:
            o.count = max(o.count or 0, cols["count"])
        first = cols.get("first")
        if first is not None:
            o.earlier(first[1], float(first[0] & COUNT_MASK))


def _fold_rust(probe: ProbePlan, site: int, o: _Object, cols: dict[str, Any], hits: int
               ) -> None:
    """A prometheus crate probe's row (see ``rust_prometheus.columns``): integers and
    f64 bits as the probe decodes them."""
    tag = rust_prometheus.parse_tag(probe.sites[site].tag)
    kind, sign, adjust = tag.kind, tag.sign, tag.adjust
    if kind == "histogram":
        if cols.get("count") is not None:
            o.count = max(o.count or 0, cols["count"])
        first = cols.get("first")
        if first is not None:
            o.earlier(first[1], float(first[0] & rust_prometheus.COUNT_MASK))
        return
    names = [v.name for v in probe.values]
    decode = probe.values[names.index("value")].decode
    delta = probe.sites[site].fetches[names.index("delta")]

    def number(raw: int) -> float:
        if decode == "float":
            return _float(raw)
        return float(raw - 2**64 if decode == "int" and raw >= 2**63 else raw)

    now = cols.get("value")
    if kind == "counter" and now is not None:
        o.now = max(o.now if o.now is not None else -math.inf, number(now))
    elif now is not None and (o.last is None or now[1] > o.last[0]):
        o.last = (now[1], number(now[0]))
    if delta.kind == "unavailable":  # a set: no increment
        o.exact = False
    elif cols.get("added") is not None:  # integers: the increments' exact sum
        wrapped = (sign * cols["added"]) & (2**64 - 1)
        o.add_exact(wrapped - 2**64 if wrapped >= 2**63 else wrapped)
    elif delta.kind == "const" and decode == "float":  # a float's constant increment
        o.add_exact(hits * _float(delta.offset))
    else:  # a float increment known only at run time
        o.exact = False
    if cols.get("low") is not None:
        o.low = min(o.low if o.low is not None else math.inf, _float(cols["low"]))
    first, inc, before = (cols.get(c) for c in ("first", "first_delta", "first_before"))
    if before is not None:
        o.earlier(before[1], number(before[0]))
    elif first is not None and inc is not None:
        o.earlier(first[1], number(first[0]) + adjust - sign * number(inc[0]))
