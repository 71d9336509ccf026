"""Metric updates as the presets' events tell them (client_golang's, the prometheus
crate's): the metric, its labels, the value and the increment, and numbers printed
the way Prometheus prints them. What is a set, an add or an increment comes from the
presets' own rules and site tags; an event they do not describe is Undecodable."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache

from agent.kernel.events import Event
from agent.output.undecodable import Undecodable, shown, why
from agent.output.undecodable import value as read
from agent.plan.client_golang import facts as client_golang
from agent.plan.client_golang.facts import COUNT_MASK, MAX_LABELS
from agent.plan.model import ProbePlan
from agent.plan.rust_prometheus import facts as rust_prometheus


@dataclass(frozen=True, slots=True)
class Update:
    kind: str
    op: str
    metric: str
    labels: dict[str, str]
    value: float | int | None
    inc: float | int | None
    object: int
    note: str  # where a number came from when it is not read directly, or why it is missing
    # The value was read from the metric's memory apart from the update itself: it may
    # include another thread's update made at the same moment.
    racy: bool = False


def _labels(v: dict[str, object]) -> dict[str, str]:
    labels = {}
    for i in range(MAX_LABELS):
        lname, lvalue = v.get(f"l{i}_name"), v.get(f"l{i}_value")
        if lname is not None and lvalue is not None:
            labels[str(lname)] = str(lvalue)
    return labels


def _int(event: Event, name: str) -> int | None:
    x = read(event, name)
    if x is not None and (isinstance(x, bool) or not isinstance(x, int)):
        raise Undecodable("bad_value", f"{name}={x!r}, not an integer: {shown(event)}")
    return x


def _number(event: Event, name: str) -> float | int | None:
    x = read(event, name)
    if x is not None and (isinstance(x, bool) or not isinstance(x, int | float)):
        raise Undecodable("bad_value", f"{name}={x!r}, not a number: {shown(event)}")
    return x


def _common(event: Event) -> tuple[str, dict[str, str], int]:
    """The metric's name ("?" when not read), labels and object address."""
    metric, obj = event.values.get("metric"), event.values.get("object")
    if metric is not None and not isinstance(metric, str):
        raise Undecodable("bad_value", f"metric={metric!r}, not a name: {shown(event)}")
    if obj is not None and (isinstance(obj, bool) or not isinstance(obj, int)):
        raise Undecodable("bad_value", f"object={obj!r}, not an address: {shown(event)}")
    return metric or "?", _labels(event.values), obj or 0


def update(event: Event, probe: ProbePlan, library: str = "client_golang") -> Update:
    """The update an event of ``probe``, of the preset for ``library``, tells; Undecodable
    when it tells none (a site, operation or value the preset does not make)."""
    kind, op = operation(probe, event.site, library)
    tag = probe.sites[event.site].tag
    try:
        if library == rust_prometheus.LIBRARY:
            u = _rust(event, kind, op, rust_prometheus.parse_tag(tag))
            value = probe.sites[event.site].fetches[[v.name for v in probe.values].index(
                "value")] if kind != "histogram" else None
            return replace(u, racy=value is not None and value.kind in ("mem", "sum")
                           and u.value is not None)
        return _golang(event, probe.name, kind, op)
    except Exception as exc:  # any decoder's failure: one kind of undecodable event
        raise why(exc, probe.name, f"tag {tag!r}, {shown(event)}") from exc


def operation(probe: ProbePlan, site: int, library: str = "client_golang"
              ) -> tuple[str, str]:
    """(kind, op) of the updates at a site of the preset's ``probe``: client_golang's by
    its probe's rule (``client_golang.RULES``), the crate's by the site's tag;
    Undecodable when that is not an update the preset makes."""
    if not 0 <= site < len(probe.sites):
        raise Undecodable("site_out_of_range", f"site index {site} of "
                          f"{len(probe.sites)} sites", probe.name)
    return _operation(probe.name, probe.sites[site].tag, library)


@lru_cache(maxsize=4096)  # a plan's few (probe, tag) pairs, asked once per event
def _operation(probe: str, tag: str, library: str) -> tuple[str, str]:
    if library == rust_prometheus.LIBRARY:
        try:
            parsed = rust_prometheus.parse_tag(tag)
        except ValueError as exc:
            raise Undecodable("unexpected_op", f"site tag {tag!r}: {exc}", probe) from exc
        return _op(f"{parsed.kind}.{parsed.op}", rust_prometheus.KINDS, None, probe)
    rule = client_golang.rule_of(probe)
    if rule is None:
        raise Undecodable("unexpected_op", f"probe {probe!r} follows no rule of the "
                          "client_golang preset", probe)
    return _op(tag, (rule.kind,), tuple(map(client_golang.method_op, rule.methods)), probe)


def _op(tag: str, kinds: tuple[str, ...], methods: tuple[str, ...] | None, probe: str
        ) -> tuple[str, str]:
    kind, dot, op = tag.partition(".")
    if not dot or kind not in kinds or (methods is not None and op not in methods) or \
            not op.isidentifier():
        raise Undecodable("unexpected_op", f"site tag {tag!r}: not an update of "
                          + ", ".join(methods or kinds), probe)
    return kind, op


def _golang(event: Event, probe: str, kind: str, op: str) -> Update:
    """A client_golang update, as the rule of its probe reads it (``client_golang.RULES``):
    what the rule's instruction leaves in registers and memory."""
    rule = client_golang.rule_of(probe)
    assert rule is not None  # operation() said so
    metric, labels, obj = _common(event)
    value: float | int | None = None
    inc: float | int | None = None
    note = ""
    step = dict(rule.steps).get(op)
    if probe == client_golang.CHEAP_PROBES["counter_int"]:  # before the xadd: the argument
        delta, now, bits = (_int(event, "delta"), _int(event, "valInt"),
                            _number(event, "valBits"))
        if delta is not None:
            inc = float(delta)
            if now is not None and bits is not None:
                value = bits + float(now + delta)
    elif rule.field == "valInt":  # xadd on a counter's integer part: valBits + valInt
        before, now, bits = (_int(event, "before"), _int(event, "valInt"),
                             _number(event, "valBits"))
        if before is not None and now is not None and bits is not None:
            if step is not None:
                added = step
            else:  # Add(v) with a whole v: read back from the field just after the add
                added = now - before
                note = "increment = valInt after - before"
            inc = float(added)
            value = bits + float(before + added)
    elif rule.mnemonic == "movsd":  # a summary's buffered value: count = flushed + buffered
        value = _number(event, "observed")
        parts = [_int(event, n) for n in ("cnt", "cold", "hot")]
        note = f"count {sum(parts)}" if None not in parts else ""  # type: ignore[arg-type]
    elif rule.sets:  # an exchange stores the new value: no increment
        value = _number(event, "new")
    elif rule.mnemonic == "cmpxchg":  # the float's bits before and after the swap
        old, new = _number(event, "old"), _number(event, "new")
        whole = _int(event, "valInt") if kind == "counter" else 0
        if new is not None and whole is not None:
            value = new + float(whole) if kind == "counter" else new
        if old is not None and new is not None and step is not None:
            inc = float(step)  # Inc and Dec: the method's constant
        elif old is not None and new is not None:
            inc = new - old
            note = "increment = new - old " + ("sum" if kind == "counter" else "value")
    else:  # histogram: xadd on countAndHotIdx, the count before it left in a register
        value = _number(event, "observed") if "observed" in event.values else None
        count = _int(event, "before")
        note = f"count {(count & COUNT_MASK) + 1}" if count is not None else ""
        if value is None:
            why_not = event.unreadable.get("observed", "not read")
            note = f"{note}; observed value unreadable: {why_not}".lstrip("; ")
    missing = [n for n in (*event.faults, *event.unreadable)
               if n != "observed" or rule.mnemonic == "movsd"]
    if missing:
        note = (note + "; " if note else "") + "not read: " + ", ".join(missing)
    # valInt read from memory before Add's xadd (at the jump before it), or after it
    # for an Add of a whole number: another thread's add at that moment is in it
    racy = value is not None and (probe == client_golang.CHEAP_PROBES["counter_int"] or
                                  (rule.field == "valInt" and step is None))
    return Update(kind, op, metric, labels, value, inc, obj, note, racy)


# Values of the prometheus crate's events that some sites cannot read, by design.
_NOT_HERE = {"delta", "before", "observed"}


def _rust(event: Event, kind: str, op: str, parsed: rust_prometheus.Tag) -> Update:
    """A prometheus crate update: integers' increment from the instruction and value from
    memory just after it, floats' bits before and after from registers; a store (the
    tag says so) has no increment. A histogram's value is the observed value, its note
    the count after it; a local histogram's flush (op ``flush``) has the sum flushed as
    its value and the observations flushed as its increment."""
    metric, labels, obj = _common(event)
    inc: float | int | None = None
    note = ""
    if kind == "histogram":  # an observation adds one; a flush, the observations flushed
        count, value = _int(event, "before"), _number(event, "observed")
        step = _int(event, "delta") if op == "flush" else 1
        inc = step if op == "flush" else None
        note = f"count {(count & rust_prometheus.COUNT_MASK) + step}" \
            if count is not None and step is not None else ""
        if value is None:
            why_not = event.unreadable.get("observed", "not read")
            note = f"{note}; observed value unreadable: {why_not}".lstrip("; ")
    else:
        value, delta = _number(event, "value"), _number(event, "delta")
        before = _number(event, "before")
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


def number(x: float | int | None) -> str:
    """A number the way Prometheus' text format prints it (shortest round-trip)."""
    if x is None:
        return "?"
    if isinstance(x, int):
        return str(x)
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "+Inf" if x > 0 else "-Inf"
    return str(int(x)) if x.is_integer() and abs(x) < 1e15 else repr(x)
