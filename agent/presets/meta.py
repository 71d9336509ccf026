"""Meta-metrics of a program's own Prometheus metrics (client_golang's, the prometheus
crate's), for ``noop run --binary``: how often each series is updated (by operation),
its value as seen in the process's memory, and the sum of the increments noop saw.
Built at scrape time from the preset's in-kernel rows; each metric object's name and
labels come from the one event the BPF program sends the first time it sees the
object. An event it cannot decode raises Undecodable; a row, only that row is left out
of the scrape (and counted). Imports no BPF."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from agent.kernel.aggregate import Row
from agent.kernel.events import Event
from agent.live.cgroups import Processes
from agent.output.exporter import Object
from agent.output.undecodable import Tally, probe_of, row_ident, why
from agent.output.usermetrics import with_labels
from agent.plan import generations
from agent.plan.model import Plan, ProbePlan
from agent.presets import updates
from agent.presets.common import MetricObject
from agent.presets.plans import library

LABELS = ("target", "pid", "library", "metric", "labels")


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

    def __init__(self, plan: Plan, target: str, processes: Processes | None = None,
                 served: Callable[[int, int], tuple[str, str] | None] | None = None
                 ) -> None:
        """``served``: the name and labels (``k=v,...``) the program serves an object
        under, by (pid, address), where the mirror knows them: a wrapped registerer's
        prefix and labels, which the object's own Desc does not hold."""
        self.served = served
        self.plan = plan
        self.target = target
        self.processes = processes or Processes()
        self.library = library(plan)
        self._decoder = updates.decoder(self.library)
        # a library whose updates carry no name: the mirror's walk names their objects
        self._unnamed_events = bool(getattr(self._decoder, "UNNAMED", False))
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
        generation = int(event.values.get(generations.NAME) or 0)
        key = (event.pid, u.object, generation)
        if u.metric == "?":  # no name in the event: the mirror's, else on the next one
            self._from_mirror(key)
            return
        labels = ",".join(f"{k}={v}" for k, v in sorted(u.labels.items()))
        with self._lock:
            self._names[key] = (u.metric, labels)

    def _from_mirror(self, key: Object) -> tuple[str, str] | None:
        """The name and labels the mirror's last walk found the object at ``key``'s
        address under, kept as its name: for an update that carries none
        (VictoriaMetrics/metrics keeps names apart from values)."""
        if not self._unnamed_events or self.served is None:
            return None
        got = self.served(key[0], key[1])
        if got is not None:  # the walk's latest: an address given to another metric since
            with self._lock:  # names it from then on
                self._names[key] = got
        return got

    def _as_served(self, key: Object, name: tuple[str, str]) -> tuple[str, str]:
        """``name`` (its Desc's name and its own labels) as the program serves it, where
        the mirror's object at that address is it: a name that ends with the Desc's,
        labels that hold its own (a wrapping adds a prefix and labels); else as it is
        (the address holds another object now)."""
        got = self.served(key[0], key[1]) if self.served is not None else None
        if got is None:
            return name
        own = {x for x in name[1].split(",") if x}
        if got[0].endswith(name[0]) and own <= set(got[1].split(",")):
            return got
        return name

    def forget(self, pids: set[int]) -> None:
        with self._lock:
            for key in [k for k in self._names if k[0] in pids]:
                del self._names[key]
            for series in [k for k in self._retired if k[0] in pids]:
                del self._retired[series]
            for pid in pids & set(self._unnamed):
                del self._unnamed[pid]

    def objects(self, rows: dict[int, list[Row]], tally: Tally) -> dict[Object, MetricObject]:
        """Each metric object's rows merged; a row that cannot be decoded is left out and
        its hits counted in ``tally``."""
        objs: dict[Object, MetricObject] = {}
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

    def _fold_row(self, probe: ProbePlan, row: Row, objs: dict[Object, MetricObject]
                  ) -> tuple[Object, MetricObject]:
        """The object ``row`` is of, with the row folded into a copy of what ``objs``
        holds of it (kept only when all of the row could be read)."""
        assert row.key is not None
        key = object_of(row.key)
        site = int(row.key["$site"])
        kind, op = updates.operation(probe, site, self.library)
        had = objs.get(key)
        o = MetricObject(kind) if had is None else replace(had, updates=dict(had.updates))
        o.updates[op] = o.updates.get(op, 0) + row.hits
        if row.born and (not o.seen or row.born < o.seen):
            o.seen = row.born
        self._decoder.fold(probe, site, o, row.columns, row.hits)
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
            unnamed = [k for k in keys if k not in self._names]
        for k in unnamed:  # outside the lock: the mirror has its own
            self._from_mirror(k)
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
            if key not in self._names:
                self._from_mirror(key)
            with self._lock:
                name = self._names.pop(key, None)
            if name is not None:
                name = self._as_served(key, name)
            with self._lock:
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
            "never read (its ring-buffer event was lost, or, for a library whose updates "
            "carry no name, no walk of the program's metrics found the object): in no "
            "series",
            labels=["target", "pid", "library"])
        overflow = CounterMetricFamily(
            "noop_metric_overflow_updates", "Updates of metric objects past the rows the "
            "kernel keeps for the preset (per update kind), folded into its overflow row: "
            "in no series", labels=["target", "library"])
        overflow.add_metric([self.target, self.library], sum(
            row.hits for got in rows.values() for row in got if row.key is None))
        with self._lock:
            names = dict(self._names)
            for pid, n in sorted(self._unnamed.items()):
                unnamed.add_metric([self.target, str(pid), self.library], n)
            retired = {k: replace(r, updates=dict(r.updates)) for k, r in self._retired.items()}
        series: dict[Series, list[tuple[Object, MetricObject]]] = {}
        for key, o in self.objects(rows, tally).items():
            name = (self._from_mirror(key) or names.get(key)) if self._unnamed_events \
                else names.get(key)
            if name is not None:
                name = self._as_served(key, name)
            if name is not None:  # else its description is still in the ring buffer
                series.setdefault((key[0], *name), []).append((key, o))
        for s in sorted(set(series) | set(retired)):
            pid, metric, labelset = s
            labels = [self.target, str(pid), self.library, metric, labelset]
            where = self.processes.labels(pid)  # the container's, none on the host
            marks = [len(f.samples) for f in (updates, value, incs)]
            counts, now, since = self._totals(retired.get(s, _Retired()), series.get(s, []))
            for op, n in sorted(counts.items()):
                updates.add_metric([*labels, op], n)
            if now is not None:
                value.add_metric(labels, now)
                if since is not None:
                    incs.add_metric(labels, since)
            for f, mark in zip((updates, value, incs), marks, strict=True):
                with_labels(f, mark, where)
        yield from (updates, value, incs, unnamed, overflow)

    def _totals(self, old: _Retired, objects: list[tuple[Object, MetricObject]]
                ) -> tuple[dict[str, int], float | None, float | None]:
        """A series' updates by operation, value and increments: its objects gone
        (``old``) and live. The value is the newest live object's (made last, where
        generations say when objects were made; else first updated last), else the
        newest gone one's."""
        counts = dict(old.updates)
        since = old.increments
        now = None
        for _key, o in sorted(objects, key=lambda ko: (ko[0][2] if self.made else 0,
                                                       ko[1].seen, ko[0])):
            for op, n in o.updates.items():
                counts[op] = counts.get(op, 0) + n
            got = None
            if (v := o.value()) is not None:
                now = v
                got = o.increments(v)
            if got is not None:
                since = (since or 0.0) + got
        return counts, now if now is not None else old.value, since


def object_of(key: dict[str, Any]) -> Object:
    """The metric object the preset's aggregate row with (decoded) ``key`` is of."""
    return (int(key["$pid"]), int(key["object"] or 0), int(key.get(generations.NAME) or 0))
