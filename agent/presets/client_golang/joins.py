"""client_golang's updates on arm64, for ``noop --binary``'s lines: each rule's atomic
operation (``agent.binary.isa.arm64_updates``: an add, a compare-and-swap, a release
store) found in its methods' own code, on the rule's field of the receiver (the
address register holding x0 at the entry plus the field's offset on every path), and
read where it took effect: where the LSE path and the exclusive loop join (an add:
the new value and the amount added in registers, the old value their difference),
after the test of a compare-and-swap's result (the old and new values in the
registers it compared and stored), after a release store (the value stored).

A copy of a method inlined into another function is read in its ranges: an update
there whose address is the field's offset from whatever value it was computed from
(``origin``'s roots). What it does not read yet, each said in the plan's notes: a copy
whose update another path joins, the summary with objectives' buffer, ``Observe``'s
value (passed in v0, which a uprobe cannot read). ``noop run`` does not fold arm64
updates into its rows yet (``facts.UPDATES_FOLDED``).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from agent.binary.isa import of
from agent.binary.isa.arm64_updates import ADD, CAS, STORE, Update, origin, updates
from agent.binary.sites import CALL, Insn
from agent.config.selector import Selector
from agent.plan.binary import Binary
from agent.plan.fetches import Fetch
from agent.plan.model import Plan, ProbePlan, Site, ValueSpec
from agent.plan.updates import field_offset
from agent.presets.client_golang.facts import PKG, RULES, TARGET, Rule, method_op
from agent.presets.client_golang.values import common, field, receiver, regions, register

OPS = {"xadd": ADD, "cmpxchg": CAS, "xchg": STORE}  # x86-64's mnemonic: the operation


def make(b: Binary) -> Plan | None:
    """The preset's update probes of arm64 program ``b`` (what they leave unread in the
    first one's notes); None when no rule found a site."""
    probes: list[ProbePlan] = []
    unseen: list[str] = []
    for rule in RULES:
        op = OPS.get(rule.mnemonic)
        if op is None:
            if any(_code(b, f"{PKG}.(*{rule.struct}).{m}") for m in rule.methods):
                unseen.append(f"(*{rule.struct}).{'/'.join(rule.methods)}: its "
                              f"{rule.field} updates are not read on arm64 yet")
            continue
        probe = _rule(b, rule, op, unseen)
        if probe is not None:
            probes.append(probe)
    if not probes:
        return None
    if unseen:  # said once each, with the first probe
        probes[0] = replace(probes[0], unseen=(*probes[0].unseen, *dict.fromkeys(unseen)))
    here = Selector(path=str(Path(b.path).resolve()))
    return Plan("client_golang preset", (b.plan(TARGET, None, selector=here,
                                                 modules=b.modules(PKG)),), tuple(probes))


def _code(b: Binary, fn: str) -> bool:
    sym = b.functions.symbols.get(fn)
    return sym is not None and bool(sym.size)


def _rule(b: Binary, rule: Rule, op: str, unseen: list[str]) -> ProbePlan | None:
    offset = field_offset(b, rule.struct, rule.field)
    recv = receiver(b, rule)
    if offset is None or recv is None:
        return None
    isa = of(b.arch.name)
    first = b.arch.go_int_regs[0]  # the receiver at the entry
    out: list[Site] = []
    layout: tuple[ValueSpec, ...] | None = None
    seen: set[int] = set()
    for method, fn, code, own, in_rule in regions(b, rule):
        if not own and in_rule:
            continue  # a copy inlined into another of them (Inc's Add) is read there
        ranges = None if own else code
        insns = b.instructions(fn)
        index = {i.address: n for n, i in enumerate(insns)}
        found = [u for u in updates(insns) if u.op == op and u.site not in seen and
                 _ours(u, insns, index[u.insn.address], ranges, (first, offset))]
        if not found:
            if own and not _calls_another(b, insns, rule, fn):  # (Observe calls observe)
                unseen.append(f"{fn}: no {op} on {rule.struct}.{rule.field} through its "
                              "receiver that noop reads on arm64: not counted")
            elif not own:
                unseen.append(f"{PKG}.(*{rule.struct}).{method} inlined into {fn}: no "
                              f"{op} on {rule.struct}.{rule.field} there that noop reads "
                              "on arm64: not counted")
            continue
        for u in found:
            seen.add(u.site)
            pairs = common(b, recv, u.base, -offset) + _specific(b, rule, recv, u, -offset)
            values = tuple(v for v, _ in pairs)
            if layout is not None and values != layout:
                continue  # same rule, other types: not a client_golang we know
            layout = values
            n = index[u.site]
            how = f"where {rule.struct}.{rule.field}'s {op} at {u.insn.address:#x} took " \
                f"effect ({_where(u)})" + ("" if own else f" ({method} inlined into {fn})")
            out.append(Site(fn, u.site, b.elf.file_offset(u.site), how,
                            tuple(f for _, f in pairs), tag=f"{rule.kind}.{method_op(method)}",
                            handling=isa.handling_at(insns, n)))
    if not out or layout is None:
        return None
    return ProbePlan(rule.probe, TARGET, layout, tuple(out))


def _ours(u: Update, insns: tuple[Insn, ...], n: int, ranges: list[tuple[int, int]] | None,
          field: tuple[str, int]) -> bool:
    """Whether update ``u`` (at ``insns[n]``) is on the rule's ``field`` (the receiver's
    register at the entry, the field's offset): in a method's own code (``ranges``
    None), through the receiver; in a copy, in the copy's ranges, at the field's offset
    from whatever value its address was computed from."""
    if ranges is None:
        return origin(insns, n, u.base) == field
    got = origin(insns, n, u.base, rooted=True)
    return any(lo <= u.insn.address < hi for lo, hi in ranges) and got is not None and \
        got[1] == field[1]


def _calls_another(b: Binary, insns: tuple[Insn, ...], rule: Rule, fn: str) -> bool:
    """Whether ``fn`` calls another of ``rule``'s methods (whose updates are its)."""
    others = {s.address for m in rule.methods
              if (s := b.functions.symbols.get(f"{PKG}.(*{rule.struct}).{m}")) is not None
              and f"{PKG}.(*{rule.struct}).{m}" != fn}
    return any(i.kind == CALL and i.target in others for i in insns)


def _where(u: Update) -> str:
    if u.op == ADD:
        return f"the new value in {u.new}, the amount added in {u.delta}"
    if u.op == CAS:
        return f"the old value in {u.old}, the new in {u.new}"
    return f"the value stored in {u.new}"


def _specific(b: Binary, rule: Rule, recv: object, u: Update, add: int
              ) -> list[tuple[ValueSpec, Fetch]]:
    """What each rule reads, named as on x86-64 (``values.specific``)."""
    if rule.probe == "counter_int" or rule.mnemonic == "xadd":
        before = (ValueSpec("before", "uint", 8, 0, "uint64", "register (before)"),
                  Fetch("reg", size=8, regs=(u.new, u.delta), formula="-"))
        if rule.probe == "counter_int":
            return [before, field(b, recv, u.base, "valInt", "uint", add),
                    field(b, recv, u.base, "valBits", "float", add)]
        why = "v is passed in v0, a SIMD register, which a uprobe cannot read"
        return [before, (ValueSpec("observed", "float", 8, 0, "float64", "v"),
                         Fetch("unavailable", why=why))]
    if rule.probe == "counter_float":
        return [register("old", u.old, "float", "float64"),
                register("new", u.new, "float", "float64"),
                field(b, recv, u.base, "valInt", "uint", add)]
    if rule.probe == "gauge_add":
        return [register("old", u.old, "float", "float64"),
                register("new", u.new, "float", "float64")]
    return [register("new", u.new, "float", "float64"),  # gauge_set
            field(b, recv, u.base, "valBits", "float", add)]

