"""Decoding the client_golang preset's events and rows: which update a probe's rule
makes, what its event tells (``facts.RULES``), and what its aggregate row adds to the
metric object's value."""

from __future__ import annotations

from typing import Any

from agent.kernel.events import Event
from agent.output.undecodable import Undecodable
from agent.plan.model import ProbePlan
from agent.presets.client_golang import facts as client_golang
from agent.presets.client_golang.facts import COUNT_MASK
from agent.presets.common import MetricObject, Update, common, float_of, int_of, number_of, op_of

LIBRARY = "client_golang"


def operation(probe: str, tag: str) -> tuple[str, str]:
    rule = client_golang.rule_of(probe)
    if rule is None:
        raise Undecodable("unexpected_op", f"probe {probe!r} follows no rule of the "
                          "client_golang preset", probe)
    return op_of(tag, (rule.kind,), tuple(map(client_golang.method_op, rule.methods)), probe)


def update(event: Event, probe: ProbePlan, kind: str, op: str) -> Update:
    """A client_golang update, as the rule of its probe reads it (``client_golang.RULES``):
    what the rule's instruction leaves in registers and memory."""
    name = probe.name
    rule = client_golang.rule_of(name)
    assert rule is not None  # operation() said so
    metric, labels, obj = common(event)
    step = dict(rule.steps).get(op)
    if name == client_golang.CHEAP_PROBES["counter_int"] or rule.field == "valInt":
        value, inc, note = _counter_int(event, name, step)
    else:
        value, inc, note = _other(event, rule, kind, step)
    missing = [n for n in (*event.faults, *event.unreadable)
               if n != "observed" or rule.mnemonic == "movsd"]
    if missing:
        note = (note + "; " if note else "") + "not read: " + ", ".join(missing)
    # valInt read from memory before Add's xadd (at the jump before it), or after it
    # for an Add of a whole number: another thread's add at that moment is in it
    racy = value is not None and (name == client_golang.CHEAP_PROBES["counter_int"] or
                                  (rule.field == "valInt" and step is None))
    return Update(kind, op, metric, labels, value, inc, obj, note, racy)


Read = tuple[float | int | None, float | int | None, str]  # value, increment, note


def _counter_int(event: Event, name: str, step: int | None) -> Read:
    """A counter's integer part: before its xadd (the argument), or after it."""
    value: float | int | None = None
    inc: float | int | None = None
    note = ""
    if name == client_golang.CHEAP_PROBES["counter_int"]:  # before the xadd: the argument
        delta, now, bits = (int_of(event, "delta"), int_of(event, "valInt"),
                            number_of(event, "valBits"))
        if delta is not None:
            inc = float(delta)
            if now is not None and bits is not None:
                value = bits + float(now + delta)
        return value, inc, note
    # xadd on a counter's integer part: valBits + valInt
    before, now, bits = (int_of(event, "before"), int_of(event, "valInt"),
                         number_of(event, "valBits"))
    if before is not None and now is not None and bits is not None:
        if step is not None:
            added = step
        else:  # Add(v) with a whole v: read back from the field just after the add
            added = now - before
            note = "increment = valInt after - before"
        inc = float(added)
        value = bits + float(before + added)
    return value, inc, note


def _other(event: Event, rule: client_golang.Rule, kind: str, step: int | None) -> Read:
    """A summary's buffered value, a gauge's exchange, a float's compare-and-swap, a
    histogram's or atomic summary's count."""
    value: float | int | None = None
    inc: float | int | None = None
    note = ""
    if rule.mnemonic == "movsd":  # a summary's buffered value: count = flushed + buffered
        value = number_of(event, "observed")
        parts = [int_of(event, n) for n in ("cnt", "cold", "hot")]
        note = f"count {sum(parts)}" if None not in parts else ""  # type: ignore[arg-type]
    elif rule.sets:  # an exchange stores the new value: no increment
        value = number_of(event, "new")
    elif rule.mnemonic == "cmpxchg":  # the float's bits before and after the swap
        old, new = number_of(event, "old"), number_of(event, "new")
        whole = int_of(event, "valInt") if kind == "counter" else 0
        if new is not None and whole is not None:
            value = new + float(whole) if kind == "counter" else new
        if old is not None and new is not None and step is not None:
            inc = float(step)  # Inc and Dec: the method's constant
        elif old is not None and new is not None:
            inc = new - old
            note = "increment = new - old " + ("sum" if kind == "counter" else "value")
    else:  # histogram: xadd on countAndHotIdx, the count before it left in a register
        value = number_of(event, "observed") if "observed" in event.values else None
        count = int_of(event, "before")
        note = f"count {(count & COUNT_MASK) + 1}" if count is not None else ""
        if value is None:
            why_not = event.unreadable.get("observed", "not read")
            note = f"{note}; observed value unreadable: {why_not}".lstrip("; ")
    return value, inc, note


def fold(probe: ProbePlan, site: int, o: MetricObject, cols: dict[str, Any], hits: int
         ) -> None:
    """A row of the probe's rule, folded into what noop knows of its object."""
    rule = probe.name
    if rule == "counter_int":  # Inc: valInt before it, in a register; adds one
        first = cols.get("first_int")
        o.carry(first[0] if first is not None else None, hits, carried=False)
    if rule == "counter_add":  # Add's integer path, carried: valInt before, the argument
        o.carry(cols.get("base"), cols.get("added") or 0)
    if rule in ("counter_int", "counter_float", "counter_add"):
        if cols.get("int") is not None:
            o.int_part = max(o.int_part or 0, cols["int"])
        if cols.get("bits") is not None:
            o.bits_part = max(o.bits_part or 0.0, float_of(cols["bits"]))
        fi, fb = cols.get("first_int"), cols.get("first_bits")
        if fb is not None:  # valBits only grows: the float part is at least this
            o.bits_part = max(o.bits_part or 0.0, float_of(fb[0]))
        if fi is not None and fb is not None:
            o.earlier(min(fi[1], fb[1]), fi[0] + float_of(fb[0]))
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
            o.last = (last[1], float_of(last[0]))
        if first is not None:
            o.earlier(first[1], float_of(first[0]))
    else:
        if "base" in cols:  # at the call's entry, before its update: carried
            o.carry(cols["base"], hits)
        if cols.get("count") is not None:
            o.count = max(o.count or 0, cols["count"])
        first = cols.get("first")
        if first is not None:
            o.earlier(first[1], float(first[0] & COUNT_MASK))
