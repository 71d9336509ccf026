"""Decoding the prometheus crate preset's events and rows: the update a site's tag
names, what its event tells, and what its aggregate row adds to the metric object's
value (see ``facts.columns``)."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from agent.kernel.events import Event
from agent.output.undecodable import Undecodable
from agent.plan.model import ProbePlan
from agent.presets.common import MetricObject, Update, common, float_of, int_of, number_of, op_of
from agent.presets.rust_prometheus import facts as rust_prometheus

LIBRARY = rust_prometheus.LIBRARY


def operation(probe: str, tag: str) -> tuple[str, str]:
    try:
        parsed = rust_prometheus.parse_tag(tag)
    except ValueError as exc:
        raise Undecodable("unexpected_op", f"site tag {tag!r}: {exc}", probe) from exc
    return op_of(f"{parsed.kind}.{parsed.op}", rust_prometheus.KINDS, None, probe)


def update(event: Event, probe: ProbePlan, kind: str, op: str) -> Update:
    """The update an event tells; a value read from memory apart from the instruction
    (``mem``, ``sum``) may hold another thread's update of the moment: racy."""
    u = _update(event, kind, op, rust_prometheus.parse_tag(probe.sites[event.site].tag))
    value = probe.sites[event.site].fetches[[v.name for v in probe.values].index(
        "value")] if kind != "histogram" else None
    return replace(u, racy=value is not None and value.kind in ("mem", "sum")
                   and u.value is not None)


# Values of the prometheus crate's events that some sites cannot read, by design.
_NOT_HERE = {"delta", "before", "observed"}


def _update(event: Event, kind: str, op: str, parsed: rust_prometheus.Tag) -> Update:
    """A prometheus crate update: integers' increment from the instruction and value from
    memory just after it, floats' bits before and after from registers; a store (the
    tag says so) has no increment. A histogram's value is the observed value, its note
    the count after it; a local histogram's flush (op ``flush``) has the sum flushed as
    its value and the observations flushed as its increment."""
    metric, labels, obj = common(event)
    inc: float | int | None = None
    note = ""
    if kind == "histogram":  # an observation adds one; a flush, the observations flushed
        count, value = int_of(event, "before"), number_of(event, "observed")
        step = int_of(event, "delta") if op == "flush" else 1
        inc = step if op == "flush" else None
        note = f"count {(count & rust_prometheus.COUNT_MASK) + step}" \
            if count is not None and step is not None else ""
        if value is None:
            why_not = event.unreadable.get("observed", "not read")
            note = f"{note}; observed value unreadable: {why_not}".lstrip("; ")
    else:
        value, delta = number_of(event, "value"), number_of(event, "delta")
        before = number_of(event, "before")
        if isinstance(value, float):
            if delta is not None:
                inc = delta
            elif before is not None and "delta" not in event.faults and not parsed.store:
                inc = value - before
                note = "increment = new - old value"
        else:
            if isinstance(delta, int):
                inc = parsed.sign * delta
            if isinstance(value, int) and parsed.adjust:
                value += parsed.adjust  # read after later updates of the same field
    missing = [n for n in (*event.faults, *event.unreadable) if n not in _NOT_HERE] + \
        [n for n in event.faults if n in _NOT_HERE]
    if missing:
        note = (note + "; " if note else "") + "not read: " + ", ".join(missing)
    return Update(kind, op, metric, labels, value, inc, obj, note)


def fold(probe: ProbePlan, site: int, o: MetricObject, cols: dict[str, Any], hits: int
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
            return float_of(raw)
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
        o.add_exact(hits * float_of(delta.offset))
    else:  # a float increment known only at run time
        o.exact = False
    if cols.get("low") is not None:
        o.low = min(o.low if o.low is not None else math.inf, float_of(cols["low"]))
    first, inc, before = (cols.get(c) for c in ("first", "first_delta", "first_before"))
    if before is not None:
        o.earlier(before[1], number(before[0]))
    elif first is not None and inc is not None:
        o.earlier(first[1], number(first[0]) + adjust - sign * number(inc[0]))
