"""Where an entry probe goes when a float argument is in an XMM register, which a
uprobe cannot read: the first instruction on the once-per-call path where every value
is in memory or a general register (DWARF's place, or the stack slot the function
copied the register to), or for client_golang's methods whose argument never leaves
its register, each update of the receiver, where it is computed back.
"""

from __future__ import annotations

from collections import Counter
from functools import partial

from elftools.dwarf.die import DIE

from agent.binary import passes, sites
from agent.binary.amd64 import is_vector
from agent.binary.dwarf.functions import FunctionVars
from agent.binary.dwarf.locations import Location, Piece
from agent.config.model import Probe
from agent.plan import updates
from agent.plan.binary import Binary
from agent.plan.model import Site, ValueSpec
from agent.plan.placement.reads import fetches_at, is_vector_fetch


def update_sites(b: Binary, function: str, probe: Probe, specs: tuple[ValueSpec, ...],
                 fv: FunctionVars, types: dict[str, DIE | None]
                 ) -> tuple[list[Site], Counter[str]] | None:
    """For a client_golang method whose float argument never leaves its XMM register
    (``updates.ARGUMENTS``): a site at each update of its receiver, in its own
    code and its inlined copies, where the argument is computed back from the general
    registers the update uses and every other value is reached from the receiver;
    None when the method is not one of those or no update can be probed."""
    found, unseen = updates.argument_sites(b, function)
    receiver = fv.params[0].name if fv.params else ""
    out: list[Site] = []
    missed: Counter[str] = Counter()
    for a in found:
        got = fetches_at(b, probe, specs, types, {p.name: p.size for p in fv.params},
                         partial(_at_update, receiver, a.receiver), vector_ok=True)
        if isinstance(got, str):
            missed[f"{got} cannot be read at an update"] += 1
            continue
        own = tuple(a.fetch if is_vector_fetch(f) else f for f in got)
        out.append(Site(function, a.address, b.elf.file_offset(a.address),
                        "the float argument never leaves its XMM register, which a uprobe "
                        "cannot read: " + a.why + "; the argument " + (
                            "is " + a.fetch.describe() if a.fetch.kind == "derived"
                            else f"is in {a.fetch.regs[0]}"),
                        own, when_zf=a.when_zf, skip_flags=a.skip_flags,
                        handling=a.handling))
    if not out:
        return None
    if unseen:
        missed["no update of the receiver noop can probe in the copy"] += unseen
    return out, missed


def _at_update(receiver: str, reg: str, param: str, size: int) -> Location | None:
    """At an update: the receiver is the register the update goes through; a float
    argument stands in its XMM register, for its fetch to be replaced; nothing else
    is known."""
    if param == receiver:
        return (Piece(8, reg=reg),)
    return (Piece(size, reg="xmm0"),)


def later_site(b: Binary, function: str, probe: Probe, specs: tuple[ValueSpec, ...],
               fv: FunctionVars, types: dict[str, DIE | None], unreadable: list[str]
               ) -> Site | None:
    """For values in XMM registers at entry: the first instruction that every call
    runs once (after the stack check, straight on, over calls) where every value is in
    memory or a general register, or when that one is single-stepped, a later one the
    kernel emulates where they still are, up to the next call (the call itself
    included: the probe fires before it runs, so no call is missed); None when there
    is none.

    A value is where DWARF places it there, or, where DWARF still names the XMM
    register, in the stack slot the function copied that register to on the way
    (Go spills a float argument before a call, and its DWARF does not follow the copy)
    as long as DWARF placed the value in that register at the copy and nothing has
    written the slot or moved rsp since."""
    sym, die = b.functions.find(function)
    insns = b.instructions(function)
    check = passes.stack_check(insns, b.morestack) if b.dwarf.language == "go" \
        else None
    start = next((n + 1 for n, i in enumerate(insns) if check and i == check.jbe), 0)
    sizes = {p.name: p.size for p in fv.params}
    spills: dict[str, tuple[int, int, int]] = {}  # register -> (rsp offset, store, cfa)
    first: Site | None = None
    for insn in passes.once_per_call(insns, start):
        if first is not None and (first.handling == sites.EMULATED or
                                  _calls_between(insns, first.address, insn.address)):
            break
        how = sites.handling(insn.raw)
        cfa = b.dwarf.frames.cfa_at(insn.address)
        if how != sites.REFUSED and cfa is not None and insn.address != sym.address:
            copied: set[str] = set()
            got = fetches_at(b, probe, specs, types, sizes, partial(
                _spilled_location, b, die, insn.address, cfa, spills, copied))
            if not isinstance(got, str):
                where = "DWARF places every value in memory or general registers"
                if copied:
                    where = (f"{', '.join(sorted(copied))} is in the stack slot its XMM "
                             "register was copied to (DWARF agrees at the copy) and DWARF "
                             "places every other value in memory or general registers")
                which = "the first instruction every call runs once" if first is None \
                    else ("the first emulated instruction after the single-stepped "
                          f"+{first.address - sym.address:#x}, with no call between,")
                if first is None or how == sites.EMULATED:
                    first = Site(function, insn.address, b.elf.file_offset(insn.address),
                                 f"{', '.join(unreadable)} in XMM registers at entry, which "
                                 f"a uprobe cannot read: at +{insn.address - sym.address:#x}"
                                 f" ({insn.mnemonic}, {how}), {which} where {where}", got,
                                 handling=how)
        if "rsp" in insn.writes and insn.mnemonic != "call":
            spills.clear()
        for reg, (offset, _store, _cfa) in list(spills.items()):
            if sites.overwrites_frame(insn, offset, 8):
                del spills[reg]
        stored = sites.stack_store(insn)
        if stored is not None and is_vector(stored[1]) and cfa is not None:
            spills[stored[1]] = (stored[0], insn.address, cfa)
    return first


def _calls_between(insns: tuple[sites.Insn, ...], start: int, end: int) -> bool:
    """Whether a call runs from ``start`` up to (not including) ``end``."""
    return any(i.mnemonic == "call" for i in insns if start <= i.address < end)


def _spilled_location(b: Binary, die: DIE, pc: int, cfa: int,
                      spills: dict[str, tuple[int, int, int]], copied: set[str],
                      param: str, size: int) -> Location | None:
    """Where ``param`` is at ``pc``: as DWARF says, but in the stack slot an XMM
    register was copied to when DWARF names that register and placed ``param`` in it
    at the copy too (then ``param`` joins ``copied``)."""
    loc = b.functions.location_at(die, pc, cfa, param, size)
    if loc is None or len(loc) != 1 or loc[0].reg not in spills:
        return loc
    offset, store, store_cfa = spills[loc[0].reg]
    if b.functions.location_at(die, store, store_cfa, param, size) != loc:
        return loc
    copied.add(param)
    return (Piece(loc[0].size, stack=offset),)
