"""What the VictoriaMetrics/metrics preset's update probes are (``probes`` finds them in
a binary; ``decode`` reads their events and rows): each rule's probe, the kind and
methods of its updates, the instruction it looks for, and the in-kernel row's columns.
Imported by the decoders at every start: nothing here reads a binary."""

from __future__ import annotations

from dataclasses import dataclass

from agent.plan.model import Column

PKG = "github.com/VictoriaMetrics/metrics"


@dataclass(frozen=True, slots=True)
class Rule:
    probe: str
    kind: str  # counter, histogram, summary (as the site's tag and noop's lines say)
    struct: str  # the library's type whose methods update
    methods: tuple[str, ...]
    what: str  # xadd, xchg, store


RULES = (
    Rule("vm_counter", "counter", "Counter", ("Inc", "Dec", "Add", "AddInt64"), "xadd"),
    Rule("vm_counter_set", "counter", "Counter", ("Set",), "xchg"),
    Rule("vm_float", "counter", "FloatCounter", ("Add", "Sub", "Set"), "store"),
    Rule("vm_histogram", "histogram", "Histogram", ("Update",), "store"),
    Rule("vm_summary", "summary", "Summary", ("Update",), "store"),
)
BY_NAME = {r.probe: r for r in RULES}
STEPS = {"Inc": 1, "Dec": -1}  # the methods whose increment is their own constant
# What each probe's in-kernel row keeps besides its hits (noop run --mirror both)
COLUMNS = {
    "vm_counter": (Column("now", "last", "now"), Column("first", "first", "before")),
    "vm_counter_set": (Column("last", "last", "new"),),
    "vm_float": (Column("last", "last", "value"),),
    "vm_histogram": (),
    "vm_summary": (Column("count", "max", "count"),),
}
# The stripped-Go metadata the rules read: the update methods, with every function
# they are inlined into
FUNCTIONS = tuple(f"{PKG}.(*{r.struct}).{m}" for r in RULES for m in r.methods)


