"""Decoding the VictoriaMetrics/metrics preset's events and rows (``probes``): the update
a site's tag names, what its event tells, and what its row adds to what noop knows of
the metric object. An event names no metric (the library keeps names apart from
values): the metric is ``?`` here, named from the mirror's walk (``library.objects``)
by whoever shows it."""

from __future__ import annotations

from typing import Any

from agent.kernel.events import Event
from agent.plan.model import ProbePlan
from agent.presets.common import MetricObject, Update, common, float_of, int_of, number_of, op_of
from agent.presets.vmetrics.facts import BY_NAME, STEPS

LIBRARY = "VictoriaMetrics/metrics"
UNNAMED = True  # its events name no metric (``presets.meta`` asks the mirror)
KINDS = ("counter", "histogram", "summary")
_MASK = (1 << 64) - 1


def operation(probe: str, tag: str) -> tuple[str, str]:
    rule = BY_NAME.get(probe)
    return op_of(tag, KINDS, rule.methods if rule is not None else (), probe)


def update(event: Event, probe: ProbePlan, kind: str, op: str) -> Update:
    """What the update's instruction leaves: a counter's old value (its new one is that
    and the method's step, or ``c.n`` read just after, which may hold another
    goroutine's add of the moment: racy), a Set's new value, a float counter's value
    and a histogram's or summary's sum read under their lock."""
    _metric, _labels, obj = common(event)
    value: float | int | None = None
    inc: float | int | None = None
    note, racy = "", False
    early = False
    if probe.name == "vm_counter":
        before, now = int_of(event, "before"), int_of(event, "now")
        step = STEPS.get(op)
        # a site before the xadd (another path joins the one after it): c.n read then
        early = probe.sites[event.site].fetches[
            [v.name for v in probe.values].index("before")].kind == "mem"
        if before is not None and step is not None:
            value, inc, racy = (before + step) & _MASK, step, early
        elif early:
            note = "read before the update: its increment is not known there"
        elif before is not None and now is not None:
            value, inc, racy = now, (now - before + (1 << 63)) % (1 << 64) - (1 << 63), True
            note = "increment = c.n after - before"
    elif probe.name == "vm_counter_set":
        value = int_of(event, "new")
    elif probe.name == "vm_float":
        value = number_of(event, "value")
    else:
        value = number_of(event, "sum")
        note = "sum"
        count = int_of(event, "count") if kind == "summary" else None
        if count is not None:
            note = f"sum; count {count + (0 if int_of(event, 'counted') else 1)}"
    missing = [n for n in (*event.faults, *event.unreadable) if not (early and n == "now")]
    if missing:
        note = (note + "; " if note else "") + "not read: " + ", ".join(missing)
    return Update(kind, op, "?", {}, value, inc, obj, note, racy)


def fold(probe: ProbePlan, site: int, o: MetricObject, cols: dict[str, Any], hits: int
         ) -> None:
    """A row of one of the preset's probes: the latest value its hits read (a counter's
    and a float counter's), the value before the first update (a counter's), a
    summary's count."""
    latest = cols.get("now") or cols.get("last")
    if latest is not None and probe.name in ("vm_counter", "vm_counter_set", "vm_float") \
            and (o.last is None or latest[1] > o.last[0]):
        number = float_of(latest[0]) if probe.name == "vm_float" else float(latest[0])
        o.last = (latest[1], number)
        o.now = number
    first = cols.get("first")
    if first is not None:
        o.earlier(first[1], float(first[0]))
    if probe.name == "vm_summary" and cols.get("count") is not None:
        fetches = probe.sites[site].fetches
        counted = fetches[[v.name for v in probe.values].index("counted")].offset
        o.count = max(o.count or 0, cols["count"] + (0 if counted else 1))
        o.now = float(o.count)
