"""User metrics of a spec as Prometheus metric families: from in-kernel aggregate rows
(read at scrape time) or from events aggregated here, labels through the spec's
decoders, each metric held to its series cap; an event or row that cannot be read is
counted, never folded in part. Imports no BPF; rows come in as data."""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from operator import itemgetter
from typing import Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from agent.config import decoders
from agent.config.decoders import go_float
from agent.kernel import events
from agent.kernel.aggregate import Row
from agent.kernel.events import ABSENT, FAULTS, PID, TS, Event, Records
from agent.live.cgroups import Processes
from agent.output.undecodable import Tally, Undecodable, row_ident, shown, why
from agent.output.undecodable import value as read
from agent.plan.model import MetricPlan, Plan, ProbePlan, ValueSpec

OVERFLOW = "__overflow__"  # every label's value in a metric's overflow series
PID_KEY = "$pid"  # the part of every in-kernel key that says which process hit
# A series: the metric's own label values, then the labels of the process's container
# (container_id, pod_uid; none on the host).
Labels = tuple[tuple[str, ...], tuple[tuple[str, str], ...]]


@dataclass
class _Series:
    """The label sets a metric keeps, in the order first seen; beyond ``cap``, new ones
    fold into the overflow series. Bounded by ``cap`` whatever the target does."""

    cap: int
    kept: dict[Labels, None] = field(default_factory=dict)
    overflow_updates: int = 0

    def admit(self, labels: Labels, updates: int) -> Labels:
        if labels in self.kept:
            return labels
        if len(self.kept) < self.cap:
            self.kept[labels] = None
            return labels
        self.overflow_updates += updates
        return tuple(OVERFLOW for _ in labels[0]), ()


@dataclass
class _Acc:
    """One series being built: count or sum, last value and its time, histogram."""

    count: float = 0.0
    last: tuple[int, float] | None = None  # (time, value)
    buckets: list[int] = field(default_factory=list)
    sum: float = 0.0


class UserMetrics:
    """Every user metric of a plan. ``on_event`` takes events of probes aggregated in
    noop; ``families`` builds the metrics of a scrape from the kernel's rows."""

    def __init__(self, plan: Plan, processes: Processes | None = None,
                 undecodable: Tally | None = None) -> None:
        self.plan = plan
        self.processes = processes or Processes(plan.limits())
        # what could not be decoded: the session's one tally (the daemon hands rows of
        # exited processes here, not to the session)
        self.undecodable = undecodable or Tally()
        self._lock = threading.Lock()
        self._series: dict[str, _Series] = {}
        self._events: dict[str, dict[Labels, _Acc]] = {}
        self._kernel_overflow: dict[str, int] = {}
        # rows of processes that exited, folded here and deleted from the kernel's map
        self._retired: dict[str, dict[Labels, _Acc]] = {}
        self._retired_overflow: dict[str, int] = {}
        for probe in plan.probes:
            for m in probe.metrics:
                self._series[m.name] = _Series(m.max_series)
                self._events[m.name] = {}
        self._decoders = {m.name: tuple(decoders.compile_rule(r) for r in m.labels)
                          for p in plan.probes for m in p.metrics}

    def overflow_updates(self) -> dict[str, int]:
        """Per metric: updates folded into its overflow series (by noop or the kernel)."""
        with self._lock:
            return {name: s.overflow_updates + self._kernel_overflow.get(name, 0)
                    for name, s in self._series.items()}

    def series(self) -> dict[str, int]:
        with self._lock:
            return {name: len(s.kept) for name, s in self._series.items()}

    def _labels(self, m: MetricPlan, values: dict[str, Any], pid: int) -> Labels:
        return (tuple(d(values.get(r.value)) for d, r in zip(self._decoders[m.name], m.labels,
                                                              strict=True)),
                self.processes.labels(pid))

    def on_event(self, probe: ProbePlan, event: Event) -> None:
        """Fold an event of ``probe`` into its metrics aggregated here; Undecodable (and
        nothing folded) when a value they need is missing or not a number."""
        if not self.processes.admits(event.probe, event.pid):
            return
        mine = [m for m in probe.metrics if m.where == "events"]
        with self._lock:
            read = [(m, self._labels(m, _needed(m, event), event.pid), _number(m, event))
                    for m in mine]
            for m, own, x in read:
                labels = self._series[m.name].admit(own, 1)
                acc = self._events[m.name].setdefault(labels, _Acc())
                _fold(m, acc, 1, x, event.ts)

    def on_records(self, pi: int, spec: Records, records: list[tuple[Any, ...]]) -> None:
        """Fold many records of ``probe`` at once, unpacked by ``spec``, none with a
        fault or an absent value (``on_event`` takes those): each metric groups them by
        their raw label fields first, so labels are decoded once per distinct set. All
        labels are decoded before anything is folded: when one cannot be, this raises
        and nothing of the records is folded (the caller takes them one by one)."""
        if self.processes.limited(pi):
            records = [r for r in records if self.processes.admits(pi, r[PID])]
        with self._lock:
            read = [(m, *self._read_records(m, spec, records))
                    for m in self.plan.probes[pi].metrics if m.where == "events"]
            for m, keys, counts, owns in read:
                self._fold_records(m, spec, records, keys, counts, owns)

    def _read_records(self, m: MetricPlan, spec: Records, records: list[tuple[Any, ...]]
                      ) -> tuple[list[Any], Counter[Any], dict[Any, Labels]]:
        """The records' raw label keys, how many have each, and each key's labels."""
        if m.value is not None and spec.slots[m.value].cap:
            raise Undecodable("bad_value", f"{m.value} is text or bytes, which metric "
                              f"{m.name} cannot count or observe")
        at = [PID, *(spec.fields[r.value] + k for r in m.labels
                     for k in range(spec.width(r.value)))]
        keys = list(map(itemgetter(*at), records))
        if len(at) == 1:
            keys = [(k,) for k in keys]
        counts = Counter(keys)
        sample = dict(zip(keys, records, strict=True))
        owns = {key: self._labels(m, {r.value: spec.value(r.value, sample[key])
                                      for r in m.labels}, key[0]) for key in counts}
        return keys, counts, owns

    def _fold_records(self, m: MetricPlan, spec: Records, records: list[tuple[Any, ...]],
                      keys: list[Any], counts: Counter[Any], owns: dict[Any, Labels]
                      ) -> None:
        accs = self._events[m.name]
        series = self._series[m.name]
        by_key: dict[Any, _Acc] = {}
        for key, n in counts.items():
            acc = by_key[key] = accs.setdefault(series.admit(owns[key], n), _Acc())
            if m.value is None and m.kind == "counter":
                acc.count += n
        if m.value is None:
            return
        values = list(map(itemgetter(spec.fields[m.value]), records))
        if m.kind == "gauge":  # the latest hit (the later record of equal times) wins
            best: dict[Any, tuple[int, int, Any]] = {}
            for i, (key, ts, x) in enumerate(zip(keys, map(itemgetter(TS), records), values,
                                                 strict=True)):
                b = best.get(key)
                if b is None or ts >= b[0]:
                    best[key] = (ts, i, x)
            for key, (ts, _i, x) in sorted(best.items(), key=lambda kv: kv[1][1]):
                acc = by_key[key]
                if acc.last is None or ts >= acc.last[0]:
                    acc.last = (ts, float(x))
        elif m.kind == "counter":
            for key, x in zip(keys, values, strict=True):
                by_key[key].count += x
        else:
            bounds, top = list(m.buckets), len(m.buckets)
            for key, x in zip(keys, values, strict=True):
                acc = by_key[key]
                if not acc.buckets:
                    acc.buckets = [0] * (top + 1)
                acc.buckets[bisect_left(bounds, x) if x == x else top] += 1  # NaN: +Inf
                acc.sum += x

    def families(self, rows: dict[int, list[Row]]) -> Iterator[Metric]:
        """``rows``: the merged in-kernel rows of each probe (by index) that has them."""
        with self._lock:
            for pi, probe in enumerate(self.plan.probes):
                values = {v.name: v for v in probe.values}
                for m in probe.metrics:
                    if m.where == "kernel":
                        accs = {k: replace(a, buckets=list(a.buckets))
                                for k, a in self._retired.get(m.name, {}).items()}
                        live = self._fold_rows(pi, m, rows.get(pi, []), values, accs)
                        self._kernel_overflow[m.name] = \
                            self._retired_overflow.get(m.name, 0) + live
                    else:
                        accs = self._events[m.name]
                    yield _family(m, accs)

    def retire(self, pi: int, rows: list[Row]) -> None:
        """Fold the rows of processes that exited (their keys are about to be deleted
        from the kernel's map) into what noop keeps: their series go on."""
        probe = self.plan.probes[pi]
        values = {v.name: v for v in probe.values}
        with self._lock:
            for m in probe.metrics:
                if m.where == "kernel":
                    accs = self._retired.setdefault(m.name, {})
                    folded = self._fold_rows(pi, m, rows, values, accs)
                    self._retired_overflow[m.name] = \
                        self._retired_overflow.get(m.name, 0) + folded

    def _fold_rows(self, pi: int, m: MetricPlan, rows: list[Row],
                   values: dict[str, ValueSpec], accs: dict[Labels, _Acc]) -> int:
        """Fold kernel rows into ``accs``; the hits that went to the overflow series. A
        row that cannot be read is left out (and counted): the scrape goes on."""
        overflow = 0
        series = self._series[m.name]
        probe = self.plan.probes[pi].name
        for row in sorted(rows, key=lambda r: r.born):  # label sets kept as first hit
            if row.key is None and not row.hits:
                continue  # the overflow row noop made at load; nothing folded yet
            try:
                read = self._read_row(pi, m, row, values)
            except Exception as exc:  # that row only
                self.undecodable.row(why(exc, probe, f"row {row.key!r}: {row.columns!r}"),
                                     row_ident(pi, row), row.hits)
                continue
            if read is None:
                continue
            own, got = read
            if own is None:  # the kernel's own overflow row: its map was full
                labels: Labels = (tuple(OVERFLOW for _ in m.labels), ())
                overflow += row.hits
            else:
                labels = series.admit(own, 0)
                if row.hits and labels != own:
                    overflow += row.hits  # folded here, this scrape
            acc = accs.setdefault(labels, _Acc())
            if m.value is None:
                acc.count += row.hits
            elif m.kind == "counter":
                acc.count += got
            elif m.kind == "gauge" and got is not None:
                if acc.last is None or got[0] > acc.last[0]:
                    acc.last = got
            elif m.kind == "histogram" and got is not None:
                buckets, total = got
                acc.buckets = [a + b for a, b in zip(acc.buckets or [0] * len(buckets),
                                                     buckets, strict=True)]
                acc.sum += total
        return overflow

    def _read_row(self, pi: int, m: MetricPlan, row: Row, values: dict[str, ValueSpec]
                  ) -> tuple[Labels | None, Any] | None:
        """What ``row`` adds to ``m``: its own labels (None: the kernel's overflow row)
        and its column, decoded (a counter's sum, a gauge's (time, value), a histogram's
        (buckets, sum)); None for a process the target is not limited to."""
        own: Labels | None = None
        if row.key is not None:
            pid = int(row.key[PID_KEY])
            if not self.processes.admits(pi, pid):
                return None
            own = self._labels(m, _row_needed(m, row.key), pid)
        if m.value is None:
            return own, None
        v, got = values[m.value], row.columns.get(m.column)
        if m.kind == "counter":
            return own, _signed(v, _whole(got or 0))
        if got is None:
            return own, None
        if m.kind == "gauge":
            return own, (_whole(got[1]), events.scalar(v, _whole(got[0])))
        n = len(m.buckets) + 1
        if len(got) <= n:
            raise Undecodable("bad_value", f"{m.column}: {len(got)} words, not {n + 1}")
        return own, ([_whole(x) for x in got[:n]], _signed(v, _whole(got[n])))


def faulty(records: list[tuple[Any, ...]]) -> list[int]:
    """Where the records are that have a value whose read faulted or was absent."""
    if not any(map(itemgetter(FAULTS), records)) and not any(map(itemgetter(ABSENT), records)):
        return []
    return [i for i, r in enumerate(records) if r[FAULTS] or r[ABSENT]]


def _needed(m: MetricPlan, event: Event) -> dict[str, Any]:
    """The event's values; Undecodable when one metric ``m`` takes is not there, or is
    None without the event saying why."""
    for name in (*(r.value for r in m.labels), *((m.value,) if m.value else ())):
        read(event, name)
    return event.values


def _number(m: MetricPlan, event: Event) -> Any:
    """The value metric ``m`` counts or observes: None when not read, or a number."""
    x = event.values.get(m.value) if m.value else None
    if x is not None and not isinstance(x, int | float):
        raise Undecodable("bad_value", f"{m.value}={x!r}, not a number, for metric "
                          f"{m.name}: {shown(event)}")
    return x


def _row_needed(m: MetricPlan, key: dict[str, Any]) -> dict[str, Any]:
    for r in m.labels:
        if r.value not in key:
            raise Undecodable("missing_value", f"no key part {r.value!r} for metric "
                              f"{m.name} in row {key!r}")
    return key


def _whole(x: Any) -> int:
    """A word of an in-kernel row."""
    if isinstance(x, bool) or not isinstance(x, int):
        raise Undecodable("bad_value", f"{x!r} where a row has a 64-bit word")
    return x


def _signed(v: ValueSpec, raw: int) -> int:
    return raw - (1 << 64) if v.decode == "int" and raw >> 63 else raw


def _fold(m: MetricPlan, acc: _Acc, hits: int, x: Any, ts: int) -> None:
    if m.kind == "counter":
        acc.count += hits if m.value is None else (float(x) if x is not None else 0.0)
    elif m.kind == "gauge":
        if x is not None and (acc.last is None or ts >= acc.last[0]):
            acc.last = (ts, float(x))
    elif x is not None:
        if not acc.buckets:
            acc.buckets = [0] * (len(m.buckets) + 1)
        value = float(x)
        acc.buckets[next((i for i, b in enumerate(m.buckets) if value <= b),
                         len(m.buckets))] += 1
        acc.sum += value


def with_labels(family: Metric, since: int, extra: tuple[tuple[str, str], ...]) -> None:
    """Give the samples ``family`` got since its ``since``-th the labels ``extra`` too
    (a family's label names are fixed; a process's container is known per series)."""
    if extra:
        family.samples[since:] = [s._replace(labels={**s.labels, **dict(extra)})
                                  for s in family.samples[since:]]


def _family(m: MetricPlan, accs: dict[Labels, _Acc]) -> Metric:
    names = [r.name for r in m.labels]
    doc = m.help or f"noop: {m.kind} of probe value {m.value or 'calls'}"
    fam: Metric
    if m.kind == "counter":
        fam = CounterMetricFamily(m.name, doc, labels=names)
    elif m.kind == "gauge":
        fam = GaugeMetricFamily(m.name, doc, labels=names)
    else:
        fam = HistogramMetricFamily(m.name, doc, labels=names)
    for (labels, extra), acc in sorted(accs.items()):
        since = len(fam.samples)
        if isinstance(fam, CounterMetricFamily):
            fam.add_metric(labels, acc.count)
        elif isinstance(fam, GaugeMetricFamily):
            if acc.last is not None:
                fam.add_metric(labels, acc.last[1])
        else:
            counts = acc.buckets or [0] * (len(m.buckets) + 1)
            running, out = 0, []
            for bound, n in zip([*map(go_float, m.buckets), "+Inf"], counts, strict=True):
                running += n
                out.append((bound, float(running)))
            fam.add_metric(labels, out, acc.sum)
        with_labels(fam, since, extra)
    return fam
