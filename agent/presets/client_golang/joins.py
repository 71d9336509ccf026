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
(``origin``'s roots). ``Observe``'s value (passed in F0, which a uprobe cannot read) is
read from the frame slot ``observe`` stores it to just after the count's update
(``_past_spill``). What it does not read yet, each said in the plan's notes: a copy
whose update another path joins, the summary with objectives' buffer, the observed
value where it is not stored so. ``noop run`` does not fold arm64
updates into its rows yet (``facts.UPDATES_FOLDED``).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from agent.binary import sites
from agent.binary.isa import of
from agent.binary.isa.arm64 import _word
from agent.binary.isa.arm64_updates import ADD, CAS, STORE, Update, origin, updates
from agent.binary.sites import CALL, Insn
from agent.config.selector import Selector
from agent.plan.binary import Binary
from agent.plan.fetches import Fetch, Op
from agent.plan.model import Plan, ProbePlan, Site, ValueSpec
from agent.plan.updates import field_offset
from agent.presets.client_golang.facts import PKG, RULES, TARGET, Rule, method_op
from agent.presets.client_golang.values import (
    OBSERVED,
    common,
    field,
    held_v,
    receiver,
    regions,
    register,
)

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
            n = index[u.site]
            spill = _past_spill(b, fn, insns, n, (u.base, u.new, u.delta)) \
                if own and rule.mnemonic == "xadd" and rule.probe != "counter_int" else None
            kept = Fetch("mem", ops=(Op("sp", offset=spill[1]),), size=8) if spill else None
            pairs = common(b, recv, u.base, -offset) + \
                _specific(b, rule, recv, u, -offset, kept)
            values = tuple(v for v, _ in pairs)
            if layout is not None and values != layout:
                continue  # same rule, other types: not a client_golang we know
            layout = values
            how = f"where {rule.struct}.{rule.field}'s {op} at {u.insn.address:#x} took " \
                f"effect ({_where(u)})" + ("" if own else f" ({method} inlined into {fn})")
            if spill is not None:
                n = spill[0]
                how += f", just after v's spill to the stack (at {insns[n - 1].address:#x})"
            out.append(Site(fn, insns[n].address, b.elf.file_offset(insns[n].address), how,
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


def _past_spill(b: Binary, fn: str, insns: tuple[Insn, ...], n: int,
                keep: tuple[str, ...]) -> tuple[int, int] | None:
    """Where ``Observe``'s v is read after the update whose site is ``insns[n]``: the
    instruction just after the function stores v's register (Go's first float one,
    F0) to its frame (``str d0, [sp, #d]``, to keep it across the call that follows),
    on straight-line code from the site that writes none of ``keep`` (what the site
    reads) nor the stack pointer; (its index, d). None where there is no such store,
    or where DWARF (or, stripped, the code since the entry) does not say the register
    held v there."""
    reg = b.arch.go_float_regs[0]
    targets = sites.branch_targets(insns)
    for k in range(n, min(len(insns) - 1, n + 8)):
        i = insns[k]
        if (k > n and i.address in targets) or i.kind != sites.NEXT or \
                "sp" in i.writes or any(r in i.writes for r in keep if r):
            return None
        ops = i.operands
        if i.mnemonic == "str" and len(ops) == 2 and ops[0] == ("reg", reg) and \
                ops[1][0] == "mem" and ops[1][1] == "sp" and not ops[1][2] and \
                _word(i.raw) >> 30 == 3:  # 8 bytes: a D register
            after = k + 1
            if insns[after].address in targets or \
                    of(b.arch.name).handling_at(insns, after) == sites.REFUSED or \
                    not held_v(b, fn, insns, i.address, reg):
                return None
            return after, int(ops[1][3])
    return None


def _specific(b: Binary, rule: Rule, recv: object, u: Update, add: int,
              v: Fetch | None = None) -> list[tuple[ValueSpec, Fetch]]:
    """What each rule reads, named as on x86-64 (``values.specific``); ``v``: where
    ``Observe``'s v is read (``_past_spill``), None where it is not."""
    if rule.probe == "counter_int" or rule.mnemonic == "xadd":
        before = (ValueSpec("before", "uint", 8, 0, "uint64", "register (before)"),
                  Fetch("reg", size=8, regs=(u.new, u.delta), formula="-"))
        if rule.probe == "counter_int":
            return [before, field(b, recv, u.base, "valInt", "uint", add),
                    field(b, recv, u.base, "valBits", "float", add)]
        why = "v is passed in v0, a SIMD register, which a uprobe cannot read, and " \
            "not stored to the stack just after the update"
        return [before, (OBSERVED, v or Fetch("unavailable", why=why))]
    if rule.probe == "counter_float":
        return [register("old", u.old, "float", "float64"),
                register("new", u.new, "float", "float64"),
                field(b, recv, u.base, "valInt", "uint", add)]
    if rule.probe == "gauge_add":
        return [register("old", u.old, "float", "float64"),
                register("new", u.new, "float", "float64")]
    return [register("new", u.new, "float", "float64"),  # gauge_set
            field(b, recv, u.base, "valBits", "float", add)]

