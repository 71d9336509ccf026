"""The built-in client_golang preset: every update of a counter, gauge or histogram of
``github.com/prometheus/client_golang``, with its name, labels and value.

Where it probes, and why: an update of a metric is one atomic instruction on the
metric's own struct (``lock xadd`` on ``counter.valInt`` and ``histogram.countAndHotIdx``,
``lock cmpxchg`` on ``valBits``, ``xchg`` for ``Gauge.Set``). noop finds those
instructions in the methods' machine code and probes them, not the methods' entries:

- one user-level update is one hit, whatever was inlined into what (``Dec`` calling
  ``Add(-1)`` runs one successful compare-and-swap);
- the new and old float64 values sit in general registers there (``Add(v)`` passes
  ``v`` in xmm0, which a uprobe cannot read), so values are exact, not reconstructed;
- x86 uprobes refuse instructions with a LOCK prefix, so the probe sits on the
  instruction after the ``lock`` one; there ``xadd`` has left the field's old value in
  its register, and a compare-and-swap that lost a race (and will be retried) has
  cleared the zero flag, so only hits with ZF set count.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any

from agent.errors import NoopError
from agent.plan.binary import Binary
from agent.plan.model import Aggregate, Column, Fetch, Op, Plan, ProbePlan, Site, ValueSpec
from agent.plan.placement import entry_site
from agent.plan.updates import PKG, argument_sites, field_offset
from agent.spec.probes import parse_selector
from agent.target import discover, sites
from agent.target.dwarf.locations import Location, Piece, Unavailable
from agent.target.dwarf.reader import die_name

TARGET = "main"  # the preset's one target
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
)


def _common(b: Binary, recv_type: Any, base: str) -> list[tuple[ValueSpec, Fetch]]:
    """Name, labels and address of the metric whose field ``base`` points into."""
    start: Location = (Piece(8, reg=base),)
    out = []
    wanted = [("metric", "m.desc.fqName", "string", 128)]
    for i in range(MAX_LABELS):
        wanted += [(f"l{i}_name", f"m.labelPairs[{i}].Name", "string", 32),
                   (f"l{i}_value", f"m.labelPairs[{i}].Value", "string", 64)]
    for name, sel, decode, cap in wanted:
        got = b.walker.select(parse_selector(sel), start, recv_type, decode, cap)
        out.append((ValueSpec(name, got.decode, got.size, got.cap, got.type, sel), got.fetch))
    out.append((ValueSpec("object", "addr", 8, 0, "pointer", "m"),
                Fetch("reg", size=8, regs=(base,))))
    return out


def _field(b: Binary, recv_type: Any, base: str, name: str, decode: str
           ) -> tuple[ValueSpec, Fetch]:
    got = b.walker.select(parse_selector(f"m.{name}"), (Piece(8, reg=base),), recv_type,
                          decode, 8)
    return ValueSpec(name, got.decode, got.size, 0, got.type, f"m.{name}"), got.fetch


def _reg(name: str, reg: str, decode: str, what: str) -> tuple[ValueSpec, Fetch]:
    # The register differs from site to site; the value's description must not, since
    # all sites of a probe share one event layout.
    return (ValueSpec(name, decode, 8, 0, what, f"register ({name})"),
            Fetch("reg", size=8, regs=(reg,)))


def _observed(b: Binary, function: str, insns: tuple[sites.Insn, ...], site: int
              ) -> tuple[ValueSpec, Fetch]:
    """Histogram.Observe's v: passed in xmm0, which a uprobe cannot read; found where the
    function stored xmm0 on the stack before the site, if DWARF agrees it held v."""
    spec = ValueSpec("observed", "float", 8, 0, "float64", "v")
    reason = "v is passed in xmm0, and this kernel cannot read XMM registers in a uprobe"
    found = sites.spilled(insns, site, "xmm0")
    if found is None:
        return spec, Fetch("unavailable", why=reason)
    offset, store = found
    if b.dwarf.from_metadata:  # no location lists: the code itself must show it
        return spec, (Fetch("mem", ops=(Op("sp", offset=offset),), size=8)
                      if sites.untouched_until(insns, "xmm0", store)
                      else Fetch("unavailable", why=reason))
    _sym, die = b.functions.find(function)
    for child in die.iter_children():
        if child.tag == "DW_TAG_formal_parameter" and die_name(child) == "v":
            expr = b.functions.locations.expression_at(child, store)
            try:
                loc = b.functions.locations.pieces(expr or [], 8, None, at_entry=True)
            except Unavailable:
                break
            if loc == (Piece(8, reg="xmm0"),):
                return spec, Fetch("mem", ops=(Op("sp", offset=offset),), size=8)
    return spec, Fetch("unavailable", why=reason)


def make(b: Binary, aggregate: bool) -> Plan:
    """The preset's plan for Go program ``b``; with ``aggregate``, each probe also folds
    its hits into an in-kernel aggregate by (process, metric object, site) and
    describes each metric object once (for ``noop run``)."""
    path = b.path
    probes = []
    modules = b.modules(PKG)
    births = _births(b) if aggregate else None
    keys = ("$pid", "object", *(("born",) if births else ()), "$site")
    for rule in RULES:
        cheap = _cheap(b, rule) if aggregate else None
        if cheap is not None:
            probes.append(replace(_with_born(cheap, births), aggregate=Aggregate(
                keys, CHEAP_COLUMNS[cheap.name], MAX_ROWS, True)))
            rule = replace(rule, methods=tuple(m for m in rule.methods
                                               if m not in CHEAP_METHODS[rule.probe]))
        probe = _rule(b, rule)
        if probe is not None and aggregate:
            probe = replace(_with_born(probe, births), aggregate=Aggregate(
                keys, COLUMNS[rule.probe], MAX_ROWS, True))
        if probe is not None:
            probes.append(probe)
        elif cheap is None:
            _unrecognised(b, rule, modules)
    if not probes:
        raise NoopError(f"{path} does not update client_golang metrics (no {PKG} counter, "
                        "gauge or histogram methods found)",
                        "write a probes.yaml for it and use --config")
    if births is not None:
        probes.append(births)
    # Watched like a spec's target named by this path (noop run: up, a new build).
    here = discover.Selector(path=str(Path(path).resolve()))
    return Plan("client_golang preset", (b.plan(TARGET, None, selector=here, modules=modules),),
                tuple(probes))


# The functions that make client_golang's metric objects: the constructors of counters and
# gauges (and the closures that make a *Vec's children), and the one maker of each of
# histograms and summaries. Each returns the new object as an interface, whose data
# word is in rbx at its RETs (Go's register ABI: results in rax, rbx, ...).
MAKERS = re.compile(re.escape(PKG) + r"\.(?:v2\.)?(?:NewCounter|NewGauge|newHistogram|"
                    r"newSummary|(?:NewCounterVec|NewGaugeVec)\.func\d+)")
BIRTHS = "metric_made"  # the probe at their RETs


def _births(b: Binary) -> ProbePlan | None:
    """For noop run: a site at every RET of every function that makes a metric object,
    which notes when the object was made. A metric object is then known by its process,
    address and that time: a program that makes its metrics again for every request
    (a registry per request) frees objects whose addresses the garbage collector gives
    to the next ones, and a row of one is never taken for a row of another. None
    without the register ABI (results on the stack)."""
    if b.goid_offset is None:
        return None
    out: list[Site] = []
    unseen: list[str] = []
    fetch = Fetch("reg", size=8, regs=("rbx",))
    for fn in sorted(n for n in b.functions.symbols if MAKERS.fullmatch(n)):
        sym = b.functions.symbols[fn]
        if not sym.size:
            continue
        start = b.start_of(fn)
        for e in sites.exits(b.instructions(fn), sym.address, sym.address + sym.size):
            if e.tail:  # another function's results: not one of ours to note
                unseen.append(f"{fn}: a tail jump at {e.insn.address:#x}")
                continue
            how = sites.handling(e.insn.raw)
            out.append(Site(fn, e.insn.address, b.elf.file_offset(e.insn.address),
                            f"made: ret at +{e.insn.address - start:#x}, the new metric in rbx "
                            f"({how})", (fetch,), handling=how, role="birth"))
        unseen += [f"{fn} inlined at {c.entry:#x}: the objects it makes there are known "
                   "by address only" for c in _inlined(b, fn)]
    if not out:
        return None
    value = ValueSpec("object", "addr", 8, 0, "pointer", "the new metric")
    return ProbePlan(BIRTHS, TARGET, (value,), tuple(out), unseen=tuple(unseen))


def _inlined(b: Binary, fn: str) -> tuple[Any, ...]:
    try:
        return b.functions.inlined(fn)
    except NoopError:
        return ()


def _with_born(probe: ProbePlan, births: ProbePlan | None) -> ProbePlan:
    """``probe`` with, when there are birth sites, when each hit's object was made."""
    if births is None:
        return probe
    i = [v.name for v in probe.values].index("object")
    born = ValueSpec("born", "uint", 8, 0, "uint64", "when m was made")
    return replace(probe, values=(*probe.values, born), sites=tuple(
        replace(s, fetches=(*s.fetches, Fetch("born", regs=s.fetches[i].regs)))
        for s in probe.sites))


def _unrecognised(b: Binary, rule: Rule, modules: tuple[tuple[str, str], ...]) -> None:
    """Refuses a client_golang whose update methods do not do what ``rule`` reads (it
    found no site): one of them has code, and none has the atomic update it looks for."""
    present = [m for m in rule.methods
               if (s := b.functions.symbols.get(f"{PKG}.(*{rule.kind}).{m}")) and s.size]
    if not present:
        return
    version = next((v for _p, v in modules), "version unknown")
    raise NoopError(f"{b.path}: client_golang {version}: (*{rule.kind}).{present[0]} "
                    f"has no {rule.mnemonic} on {rule.kind}.{rule.field}: noop does not know "
                    "these update methods and will not guess",
                    "write a probes.yaml for this program and use --config")


def _rule(b: Binary, rule: Rule) -> ProbePlan | None:
    layout: tuple[ValueSpec, ...] | None = None
    out: list[Site] = []
    for method in rule.methods:
        fn = f"{PKG}.(*{rule.kind}).{method}"
        sym = b.functions.symbols.get(fn)
        if sym is None or not sym.size:
            continue
        recv = next(iter(b.functions.param_types(fn).values()), None)
        offset = field_offset(b, rule.kind, rule.field)
        if recv is None or offset is None:
            continue
        insns = sites.disassemble(b.elf, sym.address, sym.size)
        for a in sites.atomics(insns, rule.mnemonic, offset):
            address = a.insn.end if rule.after else a.insn.address
            zf, skip, past = rule.zf, 0, ""
            jcc = sites.past_swap_flag(insns, insns.index(a.insn), ("rax", a.src, a.base)) \
                if rule.zf else None
            if jcc is not None:  # emulated where the sete after the cmpxchg is not
                address, zf, skip = jcc.address, False, sites.ZF
                past = f", at the {jcc.mnemonic} after its sete and test (ZF clear)"
            pairs = _common(b, recv, a.base) + _specific(b, rule, recv, a, fn, insns, address)
            values = tuple(v for v, _ in pairs)
            if layout is not None and values != layout:
                continue  # same rule, other types: not a client_golang we know
            layout = values
            how = ("after the " if rule.after else "at the ") + \
                f"{'lock ' * a.insn.lock}{rule.mnemonic} on {rule.kind}.{rule.field} " \
                f"at {a.insn.address:#x}{past}"
            at = next((i for i in insns if i.address == address), None)
            out.append(Site(fn, address, b.elf.file_offset(address), how,
                            tuple(f for _, f in pairs), when_zf=zf, skip_flags=skip,
                            tag=f"{rule.kind}.{method_op(method)}",
                            handling=sites.handling(at.raw) if at is not None else ""))
    if not out or layout is None:
        return None
    return ProbePlan(rule.probe, "main", layout, tuple(out))


def _specific(b: Binary, rule: Rule, recv: Any, a: sites.Atomic, fn: str,
              insns: tuple[sites.Insn, ...], address: int) -> list[tuple[ValueSpec, Fetch]]:
    if rule.probe == "counter_int":  # after xadd: src holds valInt's old value
        return [_reg("before", a.src, "uint", "uint64"),
                _field(b, recv, a.base, "valInt", "uint"),
                _field(b, recv, a.base, "valBits", "float")]
    if rule.probe == "counter_float":
        return [_reg("old", "rax", "float", "float64"), _reg("new", a.src, "float", "float64"),
                _field(b, recv, a.base, "valInt", "uint")]
    if rule.probe == "gauge_add":
        return [_reg("old", "rax", "float", "float64"), _reg("new", a.src, "float", "float64")]
    if rule.probe == "gauge_set":
        return [_reg("new", a.src, "float", "float64"),
                _field(b, recv, a.base, "valBits", "float")]
    return [_reg("before", a.src, "uint", "uint64"),  # countAndHotIdx's old value
            _observed(b, fn, insns, address)]


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


def _cheap(b: Binary, rule: Rule) -> ProbePlan | None:
    """For noop run: the rule's updates at a cheaper site than the one after them, or
    None when there is none (or nothing to gain)."""
    if rule.probe == "counter_int":
        return _counter_add(b)
    if rule.probe == "histogram":
        return _observe_entry(b)
    return None


def _counter_add(b: Binary) -> ProbePlan | None:
    """``Counter.Add``'s integer path, at the conditional jump just before its ``lock
    xadd`` (emulated), in the method and in every copy of it inlined elsewhere: the
    argument is there as a whole unsigned number, and valInt not yet changed."""
    fn = f"{PKG}.(*counter).Add"
    if fn not in b.functions.symbols:
        return None
    found, missed = argument_sites(b, fn)
    found = [a for a in found if a.fetch.formula == "uint"]
    recv = next(iter(b.functions.param_types(fn).values()), None)
    if not found or missed or recv is None:
        return None  # a copy noop cannot probe there: the sites after every xadd instead
    out: list[Site] = []
    layout: tuple[ValueSpec, ...] = ()
    for a in found:  # name, labels and object first: read once per object, to describe it
        pairs = [*_common(b, recv, a.receiver),
                 _reg("delta", a.fetch.regs[0], "uint", "uint64"),
                 _field(b, recv, a.receiver, "valInt", "uint"),
                 _field(b, recv, a.receiver, "valBits", "float")]
        layout = tuple(v for v, _ in pairs)
        out.append(Site(a.function, a.address, b.elf.file_offset(a.address), a.why,
                        tuple(f for _, f in pairs), when_zf=a.when_zf,
                        skip_flags=a.skip_flags, handling=a.handling, tag="counter.Add"))
    return ProbePlan(CHEAP_PROBES["counter_int"], TARGET, layout, tuple(out))


def _observe_entry(b: Binary) -> ProbePlan | None:
    """``histogram.observe``, the one function every observation of a histogram runs
    (``Observe``, ``ObserveWithExemplar``), at its entry: the stack check's ``jbe``
    (emulated) of its own code, before its ``lock xadd`` on countAndHotIdx. None when
    it is inlined anywhere (those copies would go unseen)."""
    fn = f"{PKG}.(*histogram).observe"
    if fn not in b.functions.symbols or b.functions.inlined(fn):
        return None
    recv = next(iter(b.functions.param_types(fn).values()), None)
    if recv is None or field_offset(b, "histogram", "countAndHotIdx") is None:
        return None
    receiver = "rax"  # Go's register ABI: the first integer argument
    count = _field(b, recv, receiver, "countAndHotIdx", "uint")
    before = (replace(count[0], name="before"), count[1])
    pairs = [*_common(b, recv, receiver), before]
    site = entry_site(b, fn, tuple(f for _, f in pairs))
    if not site.skip_flags and site.handling != sites.EMULATED:
        return None  # no cheaper than after the xadd
    return ProbePlan("histogram", TARGET, tuple(v for v, _ in pairs),
                     (replace(site, tag="histogram.Observe"),))


def method_op(method: str) -> str:
    """The operation a method's updates are tagged with: the exported method a program
    calls (``observe`` runs for ``Observe`` and ``ObserveWithExemplar``)."""
    return {"observe": "Observe"}.get(method, method)
