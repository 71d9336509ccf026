"""Where client_golang updates a metric's own fields: the atomic instructions on a
counter's, gauge's or histogram's struct, found in the methods' machine code, and for
the methods whose float argument never leaves its XMM register, where that argument
can be read back from general registers at the update. Used by placement (a spec
probe's float argument) and by the client_golang preset (its update sites)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agent.binary import sites
from agent.binary.dwarf.lookup import find_type
from agent.errors import NotFound
from agent.plan.binary import Binary
from agent.plan.fetches import Fetch
from agent.plan.libraries import CLIENT_GOLANG as PKG


@dataclass(frozen=True, slots=True)
class Argument:
    """A method whose float argument never leaves its XMM register, and the atomic
    update of the receiver's ``field`` where the values it was computed into sit in
    general registers: ``formula`` (``fetches.FORMULAS``) gives it back from them, or
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
    offset = field_offset(b, a.kind, a.field)
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


def field_offset(b: Binary, kind: str, field: str) -> int | None:
    """The offset of ``field`` in client_golang's struct ``kind``; None when the program
    has no such type (it makes no metric of that kind) or no such field."""
    try:
        typ = metric_type(b, kind)
    except NotFound:
        return None
    layout = b.walker.members(typ)
    got = layout.get(field)
    return got[0] if got is not None else None


def metric_type(b: Binary, kind: str) -> Any:
    return find_type(b.dwarf, f"{PKG}.{kind}")
