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
from agent.output import updates
from agent.output.undecodable import Tally, probe_of, row_ident, why
from agent.output.usermetrics import with_labels
from agent.plan import rust_prometheus
from agent.plan.client_golang import COUNT_MASK
from agent.plan.model import Plan, ProbePlan
from agent.plan.presets import library
from agent.target.cgroups import Processes

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


class PresetMeta:
    """``on_event`` learns each object's name and labels; ``families`` reads the rows."""

    def __init__(self, plan: Plan, target: str, processes: Processes | None = None) -> None:
        self.plan = plan
        self.target = target
        self.processes = processes or Processes()
        self.library = library(plan)
        self._lock = threading.Lock()
        self._names: dict[tuple[int, int], tuple[str, str]] = {}  # (pid, object) -> ...

    def on_event(self, probe_index: int, event: Event) -> None:
        """Learns the name and labels of the event's metric object; Undecodable when the
        event tells no update of the preset's."""
        probe = probe_of(self.plan, replace(event, probe=probe_index))
        u = updates.update(event, probe, self.library)
        if u.metric == "?":  # the name could not be read; try again on the next one
            return
        labels = ",".join(f"{k}={v}" for k, v in sorted(u.labels.items()))
        with self._lock:
            self._names[(event.pid, u.object)] = (u.metric, labels)

    def forget(self, pids: set[int]) -> None:
        with self._lock:
            for key in [k for k in self._names if k[0] in pids]:
                del self._names[key]

    def objects(self, rows: dict[int, list[Row]], tally: Tally
                ) -> dict[tuple[int, int], _Object]:
        """Each metric object's rows merged; a row that cannot be decoded is left out and
        its hits counted in ``tally``."""
        objs: dict[tuple[int, int], _Object] = {}
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

    def _fold_row(self, probe: ProbePlan, row: Row, objs: dict[tuple[int, int], _Object]
                  ) -> tuple[tuple[int, int], _Object]:
        """The object ``row`` is of, with the row folded into a copy of what ``objs``
        holds of it (kept only when all of the row could be read)."""
        assert row.key is not None
        key = (int(row.key["$pid"]), int(row.key["object"] or 0))
        site = int(row.key["$site"])
        kind, op = updates.operation(probe, site, self.library)
        had = objs.get(key)
        o = _Object(kind) if had is None else replace(had, updates=dict(had.updates))
        o.updates[op] = o.updates.get(op, 0) + row.hits
        if self.library == rust_prometheus.LIBRARY:
            _fold_rust(probe, site, o, row.columns, row.hits)
        else:
            _fold(probe.name, o, row.columns, row.hits)
        return key, o

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
        with self._lock:
            names = dict(self._names)
        for (pid, obj), o in sorted(self.objects(rows, tally).items()):
            name = names.get((pid, obj))
            if name is None:
                continue  # its description is still in the ring buffer
            labels = [self.target, str(pid), self.library, *name]
            where = self.processes.labels(pid)  # the container's, none on the host
            marks = [len(f.samples) for f in (updates, value, incs)]
            for op, n in sorted(o.updates.items()):
                updates.add_metric([*labels, op], n)
            now = o.value()
            if now is not None:
                value.add_metric(labels, now)
                since = o.increments(now)
                if since is not None:
                    incs.add_metric(labels, since)
            for f, mark in zip((updates, value, incs), marks, strict=True):
                with_labels(f, mark, where)
        yield from (updates, value, incs)


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
