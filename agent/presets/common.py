"""What the presets' decoders share: an update as an event tells it, the checks on an
event's values, and what noop knows of one metric object merged over its rows."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from agent.kernel.events import Event
from agent.output.undecodable import Undecodable, shown
from agent.output.undecodable import value as read


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


def labels_of(v: dict[str, object]) -> dict[str, str]:
    """The label pairs an event read (``l0_name``, ``l0_value``, ...), those both read."""
    labels = {}
    i = 0
    while f"l{i}_name" in v:
        lname, lvalue = v.get(f"l{i}_name"), v.get(f"l{i}_value")
        if lname is not None and lvalue is not None:
            labels[str(lname)] = str(lvalue)
        i += 1
    return labels


def int_of(event: Event, name: str) -> int | None:
    x = read(event, name)
    if x is not None and (isinstance(x, bool) or not isinstance(x, int)):
        raise Undecodable("bad_value", f"{name}={x!r}, not an integer: {shown(event)}")
    return x


def number_of(event: Event, name: str) -> float | int | None:
    x = read(event, name)
    if x is not None and (isinstance(x, bool) or not isinstance(x, int | float)):
        raise Undecodable("bad_value", f"{name}={x!r}, not a number: {shown(event)}")
    return x


def common(event: Event) -> tuple[str, dict[str, str], int]:
    """The metric's name ("?" when not read), labels and object address."""
    metric, obj = event.values.get("metric"), event.values.get("object")
    if metric is not None and not isinstance(metric, str):
        raise Undecodable("bad_value", f"metric={metric!r}, not a name: {shown(event)}")
    if obj is not None and (isinstance(obj, bool) or not isinstance(obj, int)):
        raise Undecodable("bad_value", f"object={obj!r}, not an address: {shown(event)}")
    return metric or "?", labels_of(event.values), obj or 0


def op_of(tag: str, kinds: tuple[str, ...], methods: tuple[str, ...] | None, probe: str
        ) -> tuple[str, str]:
    kind, dot, op = tag.partition(".")
    if not dot or kind not in kinds or (methods is not None and op not in methods) or \
            not op.isidentifier():
        raise Undecodable("unexpected_op", f"site tag {tag!r}: not an update of "
                          + ", ".join(methods or kinds), probe)
    return kind, op


def float_of(bits: int) -> float:
    return float(struct.unpack("<d", struct.pack("<Q", bits))[0])


@dataclass
class MetricObject:
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
