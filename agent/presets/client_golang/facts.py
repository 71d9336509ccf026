"""What the client_golang preset knows of client_golang without reading a binary: the
update rules (which atomic instruction on which field of which struct), the in-kernel
columns of each kind, the probes' names, what a stripped build's DWARF must hold. The
plan's side (``rules``) finds them in a binary; the output's side decodes and folds
what they read. Imports no DWARF reader."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from fnmatch import fnmatchcase
from functools import cache

from agent.binary.gometa.scope import Scope
from agent.plan.libraries import CLIENT_GOLANG
from agent.plan.model import Column
from agent.presets.mirror import GATHERED as GATHERED

PKG = CLIENT_GOLANG

TARGET = "main"  # the preset's one target
# The architectures whose update instructions the presets read: x86-64's LOCK XADD,
# LOCK CMPXCHG and XCHG, every preset's; arm64's (LSE atomics, or exclusive load/store
# loops, chosen at run time: ``joins``) client_golang's, for noop --binary's lines, not
# yet folded into noop run's in-kernel rows (``UPDATES_FOLDED``). Elsewhere noop run's
# mirror reads every value from memory and no update is probed (``plans.need_updates``).
UPDATES_READ = ("x86-64", "arm64")
UPDATES_FOLDED = ("x86-64",)
OTHERS_READ = ("x86-64",)  # VictoriaMetrics/metrics' updates (the crate's: its facts)
MAX_LABELS = 4  # label pairs read per metric (const and variable labels, sorted)
MAX_ROWS = 4096  # in-kernel rows per update kind: (process, metric object, site)
COUNT_MASK = 2**63 - 1  # histogram.countAndHotIdx: the count below the hot-index bit

# noop run: what each update kind keeps per (process, metric object, site) in the kernel.
# Counters keep the largest valInt seen (it only grows, so the largest is the latest
# even when CPUs race: Inc's is the value before it, plus one) and the float part's
# latest (valBits as first seen, or the float path's newest), gauges the latest new
# value, and every kind the value before the first update noop saw, for the increments
# since. first and base columns read memory only on a CPU's first hit of a row.
COLUMNS = {
    "counter_int": (Column("int", "max", "before", add=1),
                    Column("first_int", "first", "before"),
                    Column("first_bits", "first", "valBits")),
    "counter_float": (Column("int", "max", "valInt"), Column("bits", "max", "new"),
                      Column("first_int", "first", "valInt"),
                      Column("first_bits", "first", "old")),
    "gauge_add": (Column("last", "last", "new"), Column("first", "first", "old")),
    "gauge_set": (Column("last", "last", "new"), Column("first", "first", "valBits")),
    "histogram": (Column("count", "max", "before", mask=COUNT_MASK, add=1),
                  Column("first", "first", "before")),
}
COLUMNS["summary_atomic"] = COLUMNS["histogram"]
# A buffered summary's count as its latest hit read it: flushed, being flushed and
# buffered (this observation's included). A flush on another goroutine adds to cnt one
# value at a time and empties coldBuf at its end, so a reading during one is high by
# what it flushed so far; the next reading is right again.
COLUMNS["summary_buffered"] = (Column("cnt", "last", "cnt"), Column("cold", "last", "cold"),
                               Column("hot", "last", "hot"))
# noop run, where an update has a cheaper site before it than after (an emulated jump or
# call, not a single-stepped instruction): the value is read from memory before the
# update on the first hit of each CPU and carried forward by the updates seen. The
# ``base`` column keeps the smallest (the earliest) of those reads: every hit counted
# follows it, and its update comes after the hit, so none is counted twice and none
# after it is missed.
CHEAP_COLUMNS = {
    "counter_add": (Column("base", "base", "valInt"), Column("added", "sum", "delta"),
                    Column("first_int", "first", "valInt"),
                    Column("first_bits", "first", "valBits")),
    "histogram": (Column("base", "base", "before", mask=COUNT_MASK),
                  Column("first", "first", "before")),
}


@dataclass(frozen=True, slots=True)
class Rule:
    """Which atomic instruction on which field is an update, and what it reads."""

    probe: str
    kind: str  # counter, gauge, histogram
    methods: tuple[str, ...]
    mnemonic: str
    field: str
    after: bool  # probe the next instruction (the kernel will not probe a LOCK one)
    zf: bool = False  # keep only hits with ZF set: the compare-and-swap succeeded
    # Methods whose increment is a constant of the method (Inc adds 1, Dec -1), said as
    # it is rather than as new - old (xadd leaves no increment in a register at all)
    steps: tuple[tuple[str, int], ...] = ()
    go_type: str = ""  # the struct whose methods they are, when not named as ``kind``

    @property
    def struct(self) -> str:
        """The Go type (of client_golang's package) whose methods and field it reads."""
        return self.go_type or self.kind

    @property
    def sets(self) -> bool:
        """Whether its updates store a new value (an exchange): no increment."""
        return self.mnemonic == "xchg"


RULES = (
    Rule("counter_int", "counter", ("Inc", "Add"), "xadd", "valInt", True,
         steps=(("Inc", 1),)),
    Rule("counter_float", "counter", ("Add",), "cmpxchg", "valBits", True, zf=True),
    Rule("gauge_add", "gauge", ("Inc", "Dec", "Add", "Sub"), "cmpxchg", "valBits", True,
         zf=True, steps=(("Inc", 1), ("Dec", -1))),
    Rule("gauge_set", "gauge", ("Set", "SetToCurrentTime"), "xchg", "valBits", False),
    Rule("histogram", "histogram", ("Observe", "observe"), "xadd", "countAndHotIdx", True),
    # A summary without objectives counts like a histogram (its sum is added by a
    # compare-and-swap on another struct, where no register holds the summary).
    Rule("summary_atomic", "summary", ("Observe",), "xadd", "countAndHotIdx", True,
         go_type="noObjectivesSummary"),
    # A summary with objectives takes a lock and appends the value to hotBuf, which it
    # counts and sums when it flushes: probed after the value's store (``_buffered``).
    Rule("summary_buffered", "summary", ("Observe",), "movsd", "hotBuf", True),
)


# What a stripped build's DWARF made from Go metadata must hold for this preset: the
# package's functions (with every function they are inlined into, and the types they
# refer to), its metrics' structs, and the goroutine's (its id's offset).
SCOPE = Scope(functions=(PKG + ".",
                         # VictoriaMetrics/metrics' writer of a Set and update methods
                         # (its preset's probes)
                         "github.com/VictoriaMetrics/metrics.(*Set).WritePrometheus",
                         *(f"github.com/VictoriaMetrics/metrics.(*{t})." for t in (
                             "Counter", "FloatCounter", "Histogram", "Summary"))),
              types=(*sorted({f"{PKG}.{r.struct}" for r in RULES}), "runtime.g"))
# The functions that make client_golang's metric objects: the constructors of counters and
# gauges (and the closures that make a *Vec's children), and the one maker of each of
# histograms and summaries. Each returns the new object as an interface, whose data
# word is in rbx at its RETs (Go's register ABI: results in rax, rbx, ...).
MAKERS = re.compile(re.escape(PKG) + r"\.(?:v2\.)?(?:NewCounter|NewGauge|newHistogram|"
                    r"newSummary|(?:NewCounterVec|NewGaugeVec)\.func\d+)")
MADE = "metric_made"  # the probe at their RETs
MAX_MIRRORED = 500_000  # series of one process mirrored, by default (--mirror-max-series)


@dataclass(frozen=True)
class Choice:
    """Which of a program's families noop mirrors: those a glob of ``include`` matches
    (all, when there is none) and no glob of ``exclude`` does, and at most ``max_series``
    series of a process (families in order of their names; the rest left out and
    counted)."""

    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    max_series: int = MAX_MIRRORED

    def wants(self, family: str) -> bool:
        if not self.include and not self.exclude:
            return True
        return (not self.include or any(fnmatchcase(family, g) for g in self.include)) \
            and not any(fnmatchcase(family, g) for g in self.exclude)


# For noop run's mirror: the probe at ``(*Registry).Gather``'s entry (``GATHERED``).
GATHER = f"{PKG}.(*Registry).Gather"


# The methods whose updates ``_cheap`` finds a cheaper site for, by rule.
CHEAP_METHODS = {"counter_int": ("Add",), "histogram": ("Observe", "observe")}
# The probes ``_cheap`` makes, by rule (the histogram's keeps the rule's name).
CHEAP_PROBES = {"counter_int": "counter_add", "histogram": "histogram"}


@cache
def rule_of(probe: str) -> Rule | None:
    """The rule the preset's probe named ``probe`` follows; a cheaper site's probe
    (``counter_add``) follows its rule for the methods it takes."""
    for rule in RULES:
        if rule.probe == probe:
            return rule
        if CHEAP_PROBES.get(rule.probe) == probe:
            return replace(rule, methods=CHEAP_METHODS[rule.probe])
    return None


def method_op(method: str) -> str:
    """The operation a method's updates are tagged with: the exported method a program
    calls (``observe`` runs for ``Observe`` and ``ObserveWithExemplar``)."""
    return {"observe": "Observe"}.get(method, method)
