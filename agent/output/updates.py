"""Metric updates as the presets' events tell them (client_golang's, the prometheus
crate's): the metric, its labels, the value and the increment, and numbers printed
the way Prometheus prints them."""

from __future__ import annotations

import math
from dataclasses import dataclass

from agent.kernel.events import Event
from agent.plan import rust_prometheus
from agent.plan.client_golang import MAX_LABELS


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


def _labels(v: dict[str, object]) -> dict[str, str]:
    labels = {}
    for i in range(MAX_LABELS):
        lname, lvalue = v.get(f"l{i}_name"), v.get(f"l{i}_value")
        if lname is not None and lvalue is not None:
            labels[str(lname)] = str(lvalue)
    return labels


def update(event: Event, tag: str, library: str = "client_golang") -> Update:
    """The update an event of the preset for ``library`` tells."""
    if library == rust_prometheus.LIBRARY:
        return _rust(event, tag)
    v = event.values
    kind, op = tag.split(".", 1)
    labels = _labels(v)
    metric = v.get("metric") or "?"
    value: float | None = None
    inc: float | None = None
    note = ""
    if kind == "counter" and "before" in v:  # integer path: valBits + valInt
        if None not in (v["before"], v["valInt"], v["valBits"]):
            if op == "Inc":
                added = 1
            else:  # Add(v) with a whole v: read back from the field just after the add
                added = v["valInt"] - v["before"]
                note = "increment = valInt after - before"
            inc = float(added)
            value = v["valBits"] + float(v["before"] + added)
    elif kind == "counter" and "new" in v:  # counter, float path
        if None not in (v["old"], v["new"], v["valInt"]):
            value = v["new"] + float(v["valInt"])
            inc = v["new"] - v["old"]
            note = "increment = new - old sum"
    elif kind == "gauge" and op == "Set":
        value = v["new"]
    elif kind == "gauge":
        value = v["new"]
        if v["old"] is not None and v["new"] is not None:
            inc = {"Inc": 1.0, "Dec": -1.0}.get(op, v["new"] - v["old"])
            if op not in ("Inc", "Dec"):
                note = "increment = new - old value"
    else:  # histogram
        value = v.get("observed")
        count = v.get("before")
        note = f"count {(count & (2**63 - 1)) + 1}" if count is not None else ""
        if value is None:
            why = event.unreadable.get("observed", "not read")
            note = f"{note}; observed value unreadable: {why}".lstrip("; ")
    missing = [n for n in (*event.faults, *event.unreadable) if n != "observed"]
    if missing:
        note = (note + "; " if note else "") + "not read: " + ", ".join(missing)
    return Update(kind, op, str(metric), labels, value, inc, int(v.get("object") or 0), note)


# Values of the prometheus crate's events that some sites cannot read, by design.
_NOT_HERE = {"delta", "before", "observed"}


def _rust(event: Event, tag: str) -> Update:
    """A prometheus crate update: integers' increment from the instruction and value from
    memory just after it, floats' bits before and after from registers."""
    v = event.values
    kind, op, sign, adjust = rust_prometheus.parse_tag(tag)
    value, inc, note = v.get("value"), None, ""
    if kind == "histogram":
        count = v.get("before")
        value = v.get("observed")
        note = f"count {(count & rust_prometheus.COUNT_MASK) + 1}" if count is not None \
            else ""
        if value is None:
            why = event.unreadable.get("observed", "not read")
            note = f"{note}; observed value unreadable: {why}".lstrip("; ")
    elif isinstance(value, float):
        delta, before = v.get("delta"), v.get("before")
        if delta is not None:
            inc = delta
        elif before is not None and value is not None and "delta" not in event.faults \
                and op != "set" and op != "reset":
            inc = value - before
            note = "increment = new - old value"
    else:
        delta = v.get("delta")
        if isinstance(delta, int):
            inc = sign * delta
        if isinstance(value, int) and adjust:
            value += adjust  # read after later updates of the same field by constants
    missing = [n for n in (*event.faults, *event.unreadable) if n not in _NOT_HERE] + \
        [n for n in event.faults if n in _NOT_HERE]
    if missing:
        note = (note + "; " if note else "") + "not read: " + ", ".join(missing)
    return Update(kind, op, str(v.get("metric") or "?"), _labels(v), value, inc,
                  int(v.get("object") or 0), note)


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
