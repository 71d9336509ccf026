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

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from agent import discover, sites
from agent.dwarf.locations import Location, Piece, Unavailable
from agent.dwarf.lookup import find_type
from agent.dwarf.reader import die_name
from agent.errors import NoopError
from agent.events import Event
from agent.plan import Aggregate, Column, Fetch, Op, Plan, ProbePlan, Site, ValueSpec
from agent.resolve import Binary
from agent.spec import parse_selector

PKG = "github.com/prometheus/client_golang/prometheus"
TARGET = "main"  # the preset's one target
MAX_LABELS = 4  # label pairs read per metric (const and variable labels, sorted)
MAX_ROWS = 4096  # in-kernel rows per update kind: (process, metric object, site)
COUNT_MASK = 2**63 - 1  # histogram.countAndHotIdx: the count below the hot-index bit

# noop run: what each update kind keeps per (process, metric object, site) in the kernel.
# Counters keep the largest valInt and valBits seen (both only grow, so the largest is
# the latest even when CPUs race), gauges the latest new value, and every kind the
# value before the first update noop saw, for the increments since.
COLUMNS = {
    "counter_int": (Column("int", "max", "valInt"), Column("bits", "max", "valBits"),
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


RULES = (
    Rule("counter_int", "counter", ("Inc", "Add"), "xadd", "valInt", True),
    Rule("counter_float", "counter", ("Add",), "cmpxchg", "valBits", True, zf=True),
    Rule("gauge_add", "gauge", ("Inc", "Dec", "Add", "Sub"), "cmpxchg", "valBits", True,
         zf=True),
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


def plan(path: str, pid: int | None = None, aggregate: bool = False) -> Plan:
    """The preset's plan for the binary at ``path``; with ``aggregate``, each probe also
    folds its hits into an in-kernel aggregate by (process, metric object, site) and
    describes each metric object once (for ``noop run``)."""
    b = Binary(path)
    if b.dwarf.language != "go":
        raise NoopError(f"{path} is not a Go program",
                        "the built-in preset is for client_golang; write a probes.yaml "
                        "and use --config")
    probes = []
    for rule in RULES:
        probe = _rule(b, rule)
        if probe is not None and aggregate:
            probe = replace(probe, aggregate=Aggregate(("$pid", "object", "$site"),
                                                       COLUMNS[rule.probe], MAX_ROWS, True))
        if probe is not None:
            probes.append(probe)
    if not probes:
        raise NoopError(f"{path} does not update client_golang metrics (no {PKG} counter, "
                        "gauge or histogram methods found)",
                        "write a probes.yaml for it and use --config")
    # Watched like a spec's target named by this path (noop run: up, a new build).
    here = discover.Selector(path=str(Path(path).resolve()))
    return Plan("client_golang preset", (b.plan(TARGET, pid, selector=here),), tuple(probes))


def _rule(b: Binary, rule: Rule) -> ProbePlan | None:
    layout: tuple[ValueSpec, ...] | None = None
    out: list[Site] = []
    for method in rule.methods:
        fn = f"{PKG}.(*{rule.kind}).{method}"
        sym = b.functions.symbols.get(fn)
        if sym is None or not sym.size:
            continue
        recv = next(iter(b.functions.param_types(fn).values()), None)
        offset = _offset(b, rule.kind, rule.field)
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
            out.append(Site(fn, address, b.elf.file_offset(address), how,
                            tuple(f for _, f in pairs), when_zf=zf, skip_flags=skip,
                            tag=f"{rule.kind}.{_op(method)}"))
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


# ---------------------------------------------------------------------------------------
# A spec probe's float argument: where a uprobe sees it without an XMM helper.

@dataclass(frozen=True, slots=True)
class Argument:
    """A method whose float argument never leaves its XMM register, and the atomic
    update of the receiver's ``field`` where the values it was computed into sit in
    general registers: ``formula`` (``plan.FORMULAS``) gives it back from them, or
    ``bits`` when the register holds the argument's own bits."""

    kind: str
    method: str
    mnemonic: str
    field: str
    formula: str


ARGUMENTS = (
    Argument("gauge", "Add", "cmpxchg", "valBits", "new-old"),
    Argument("gauge", "Sub", "cmpxchg", "valBits", "old-new"),
    Argument("gauge", "Set", "xchg", "valBits", "bits"),
    Argument("counter", "Add", "cmpxchg", "valBits", "new-old"),  # v is not whole
    Argument("counter", "Add", "xadd", "valInt", "uint"),  # v == float64(uint64(v))
)

# A conditional jump just before a ``lock xadd``: the flags with which it branches
# away, as (any of these set: skip the hit, keep only hits with ZF set).
_BRANCHES = {"jp": (0x4, False), "je": (0x40, False), "jb": (0x1, False),
             "jbe": (0x41, False), "js": (0x80, False), "jo": (0x800, False),
             "jne": (0, True)}


@dataclass(frozen=True, slots=True)
class ArgumentSite:
    """Where a probe reads a method's float argument at one of its updates."""

    function: str  # whose code holds the site: the method, or one it is inlined into
    address: int
    receiver: str  # the register holding the receiver there
    fetch: Fetch  # the argument
    when_zf: bool
    skip_flags: int
    why: str
    handling: str


def argument_sites(b: Binary, function: str) -> tuple[list[ArgumentSite], int]:
    """For a client_golang method in ``ARGUMENTS``: a site at each update of its
    receiver in its own code and in its inlined copies, and how many copies have
    none noop can use; ([], 0) for any other function."""
    rules = [a for a in ARGUMENTS if function == f"{PKG}.(*{a.kind}).{a.method}"]
    if not rules:
        return [], 0
    sym, _die = b.functions.find(function)
    regions = [(function, b.instructions(function), [(sym.address, sym.address + sym.size)])]
    for copy in b.functions.inlined(function):
        caller = b.function_at(copy.entry)
        regions.append((caller or "", b.instructions(caller) if caller else (),
                        b.dwarf.ranges(copy.die)))
    out: list[ArgumentSite] = []
    missed = 0
    for n, (where, insns, ranges) in enumerate(regions):
        found = [s for a in rules for s in _argument_at(b, a, where, insns, ranges)]
        out += found
        missed += n > 0 and not found
    return out, missed


def _argument_at(b: Binary, a: Argument, where: str, insns: tuple[sites.Insn, ...],
                 ranges: list[tuple[int, int]]) -> list[ArgumentSite]:
    offset = _offset(b, a.kind, a.field)
    if offset is None:
        return []
    targets = {i.target for i in insns if i.target is not None}
    index = {i.address: n for n, i in enumerate(insns)}
    start = b.start_of(where)
    out = []
    for at in sites.atomics(insns, a.mnemonic, offset):
        if not any(lo <= at.insn.address < hi for lo, hi in ranges):
            continue
        n = index[at.insn.address]
        what = f"{'lock ' * at.insn.lock}{a.mnemonic} on {a.kind}.{a.field}"
        if a.mnemonic == "cmpxchg":  # after it: old in rax, new in src, ZF if it won
            site, zf, skip = insns[n + 1] if n + 1 < len(insns) else None, True, 0
            fetch = Fetch("derived", regs=("rax", at.src), formula=a.formula)
            why = f"after the {what}: a successful update"
            jcc = sites.past_swap_flag(insns, n, ("rax", at.src, at.base))
            if jcc is not None:
                site, zf, skip = jcc, False, sites.ZF
                why += f" (at the {jcc.mnemonic} after its sete and test: ZF clear)"
        elif a.mnemonic == "xchg":  # the argument's bits, stored as they are
            site, zf, skip = at.insn, False, 0
            fetch = Fetch("reg", size=8, regs=(at.src,))
            why = f"at the {what}, which stores the argument's bits from {at.src}"
        else:  # at the jump that leads to it: the whole argument, as an integer in src
            site = insns[n - 1] if n else None
            skip, zf = _BRANCHES.get(site.mnemonic, (0, False)) if site else (0, False)
            if site is None or not (skip or zf) or at.src in site.writes:
                continue
            fetch = Fetch("derived", regs=(at.src,), formula=a.formula)
            why = (f"at the {site.mnemonic} before the {what} (the hits it does not "
                   f"branch away from), with the argument as an integer in {at.src}")
        if site is None or site.address in targets:
            continue
        how = sites.handling(site.raw)
        if how == sites.REFUSED:
            continue
        out.append(ArgumentSite(where, site.address, at.base, fetch, zf, skip,
                                f"{why} at +{site.address - start:#x} of {where} "
                                f"({site.mnemonic}, {how})", how))
    return out


def _offset(b: Binary, kind: str, field: str) -> int | None:
    layout = b.walker.members(_type(b, kind))
    got = layout.get(field)
    return got[0] if got is not None else None


def _type(b: Binary, kind: str) -> Any:
    return find_type(b.dwarf, f"{PKG}.{kind}")


def _op(method: str) -> str:
    return {"observe": "Observe"}.get(method, method)


# ---------------------------------------------------------------------------------------
# Events -> metric updates.

@dataclass(frozen=True, slots=True)
class Update:
    kind: str
    op: str
    metric: str
    labels: dict[str, str]
    value: float | None
    inc: float | None
    object: int
    note: str  # where a number came from when it is not read directly, or why it is missing


def update(event: Event, tag: str) -> Update:
    v = event.values
    kind, op = tag.split(".", 1)
    labels = {}
    for i in range(MAX_LABELS):
        lname, lvalue = v.get(f"l{i}_name"), v.get(f"l{i}_value")
        if lname is not None and lvalue is not None:
            labels[str(lname)] = str(lvalue)
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


def number(x: float | None) -> str:
    """A float64 the way Prometheus' text format prints it (shortest round-trip)."""
    if x is None:
        return "?"
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "+Inf" if x > 0 else "-Inf"
    return str(int(x)) if x.is_integer() and abs(x) < 1e15 else repr(x)
