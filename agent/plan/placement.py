"""Where each probe goes: the instruction of a function (or of its inlined copies, or
its exits) to put a uprobe on, and how each value is fetched there.

A site must see each call exactly once with every value still in place, and among
those noop picks the cheapest for the kernel (``sites.handling``): a Go function's
stack-check ``jbe`` over its single-stepped ``cmp``; for a float argument in an XMM
register, the first instruction on the once-per-call path where DWARF places it in
memory; a site at each inlined copy where the values are in registers; every RET and
tail jump for exits.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from functools import partial

from elftools.dwarf.die import DIE

from agent.errors import NoopError
from agent.plan import updates
from agent.plan.binary import Binary
from agent.plan.model import Fetch, Site, ValueSpec
from agent.plan.selectors import SelectError
from agent.spec.probes import Probe, parse_selector
from agent.target import sites
from agent.target.amd64 import is_vector
from agent.target.dwarf.functions import FunctionVars
from agent.target.dwarf.locations import Location, Piece

FLAGS_BELOW_OR_EQUAL = 0x41  # CF|ZF: when jbe branches


def _registers(fetches: tuple[Fetch, ...]) -> set[str]:
    """Registers the fetches read."""
    return {r for f in fetches for r in f.regs} | {o.reg for f in fetches for o in f.ops
                                                  if o.reg}


def is_vector_fetch(fetch: Fetch) -> bool:
    """Whether the fetch reads an XMM register, which pt_regs does not hold."""
    return any(is_vector(r) for r in fetch.regs)


def entry_sites(b: Binary, function: str, probe: Probe, specs: tuple[ValueSpec, ...],
                fetches: tuple[Fetch, ...], fv: FunctionVars, types: dict[str, DIE | None],
                xmm_readable: bool = False) -> tuple[list[Site], Counter[str]]:
    """An entry probe's sites on one function: its own code's (``entry_site``, or
    for values in XMM registers, unless the kernel can read those (``xmm_readable``),
    ``later_site`` or ``update_sites``) and its inlined copies'; and why the copies
    left out are."""
    if b.functions.only_inlined(function):  # no code of its own: its copies only
        return inlined_sites(b, function, probe, specs, fv, types)
    site = entry_site(b, function, fetches)
    vector = [v.name for v, f in zip(probe.values, fetches, strict=True)
              if is_vector_fetch(f)]
    if vector and xmm_readable:
        site = replace(site, why=site.why + f"; {', '.join(vector)} read from "
                       "XMM registers through the kernel's helper")
        vector = []
    later = later_site(b, function, probe, specs, fv, types, vector) if vector else None
    if vector and later is None:
        found = update_sites(b, function, probe, specs, fv, types)
        if found is not None:
            return found
    copies, missed = inlined_sites(b, function, probe, specs, fv, types)
    return [later or site, *copies], missed


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
        got = _fetches_at(b, probe, specs, types, {p.name: p.size for p in fv.params},
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


def entry_site(b: Binary, function: str, fetches: tuple[Fetch, ...]) -> Site:
    """Where a probe on the function's entry goes: the cheapest instruction that
    every call passes exactly once with the fetched values still in place.

    For a Go function with a stack check that is the check's ``jbe``, which the
    kernel emulates, while the ``cmp`` before it is single-stepped; the BPF program
    drops the hits that branch to morestack (the call restarts at its entry, so an
    entry probe would count it twice). Otherwise it is the first instruction."""
    sym, die = b.functions.find(function)
    insns = b.instructions(function)
    first = insns[0] if insns else None
    how = sites.handling(first.raw) if first is not None else sites.SINGLE_STEPPED
    name = first.mnemonic if first is not None else "?"
    if how == sites.REFUSED:
        raise NoopError(f"{function}: the kernel cannot put a uprobe on its first "
                        f"instruction ({name}, prefixed LOCK or segment)",
                        "probe a function that calls it")
    site = Site(function, sym.address, b.elf.file_offset(sym.address),
                f"entry: the first instruction ({name}, {how})", fetches, handling=how)
    if how == sites.EMULATED or b.dwarf.language != "go":
        return site
    check = sites.stack_check(insns, b.morestack)
    if check is None:
        return replace(site, why=site.why + "; no stack check, so each call passes it "
                       "once")
    jbe = check.jbe
    clobbered = sorted(_registers(fetches) & check.writes)
    if clobbered:
        return replace(site, why=site.why + f"; not the stack check's jbe: the prologue "
                       f"writes {', '.join(clobbered)} before it")
    moved = b.functions.moved_params(die, sym.address, jbe.address)
    if moved:
        return replace(site, why=site.why + f"; not the stack check's jbe: DWARF places "
                       f"{', '.join(moved)} elsewhere there")
    return Site(function, jbe.address, b.elf.file_offset(jbe.address),
                f"the stack check's jbe at +{jbe.address - sym.address:#x} ({how} first "
                f"instruction {name}; the jbe is {sites.handling(jbe.raw)}); hits that "
                "branch to morestack are dropped, so each call counts once", fetches,
                skip_flags=FLAGS_BELOW_OR_EQUAL, handling=sites.handling(jbe.raw))


def inlined_sites(b: Binary, function: str, probe: Probe, specs: tuple[ValueSpec, ...],
                  fv: FunctionVars, types: dict[str, DIE | None]
                  ) -> tuple[list[Site], Counter[str]]:
    """A site at the first instruction of each copy of ``function`` inlined into
    another, where every value is in registers there; and why the others are not."""
    out: list[Site] = []
    missed: Counter[str] = Counter()
    sizes = {p.name: p.size for p in fv.params}
    for copy in b.functions.inlined(function):
        caller = b.function_at(copy.entry)
        insns = b.instructions(caller) if caller else ()
        insn = next((i for i in insns if i.address == copy.entry), None)
        if insn is None:
            missed["its code is not in a function noop can read"] += 1
            continue
        how = sites.handling(insn.raw)
        if how == sites.REFUSED:
            missed[f"its first instruction ({insn.mnemonic}) cannot be probed"] += 1
            continue
        if any(i.target == copy.entry for i in insns):
            missed["its first instruction is also a jump target (a loop)"] += 1
            continue
        got = _fetches_at(b, probe, specs, types, sizes,
                               partial(b.functions.inlined_location, copy),
                               vector_ok=True)
        if isinstance(got, str):
            missed[f"DWARF places {got} in no register there"] += 1
            continue
        out.append(Site(function, copy.entry, b.elf.file_offset(copy.entry),
                        f"inlined into {b.functions.display_name(caller or '?')} at "
                        f"+{copy.entry - b.start_of(caller):#x}"
                        f" ({insn.mnemonic}, {how})", got, handling=how))
    return out, missed

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
    check = sites.stack_check(insns, b.morestack) if b.dwarf.language == "go" \
        else None
    start = next((n + 1 for n, i in enumerate(insns) if check and i == check.jbe), 0)
    sizes = {p.name: p.size for p in fv.params}
    spills: dict[str, tuple[int, int, int]] = {}  # register -> (rsp offset, store, cfa)
    first: Site | None = None
    for insn in sites.once_per_call(insns, start):
        if first is not None and (first.handling == sites.EMULATED or
                                  _calls_between(insns, first.address, insn.address)):
            break
        how = sites.handling(insn.raw)
        cfa = b.dwarf.cfa_at(insn.address)
        if how != sites.REFUSED and cfa is not None and insn.address != sym.address:
            copied: set[str] = set()
            got = _fetches_at(b, probe, specs, types, sizes, partial(
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


def _fetches_at(b: Binary, probe: Probe, specs: tuple[ValueSpec, ...],
                types: dict[str, DIE | None], sizes: dict[str, int],
                locate: Callable[[str, int], Location | None], vector_ok: bool = False
                ) -> tuple[Fetch, ...] | str:
    """Each value's fetch with the parameters where ``locate(name, size)`` places
    them, or the
    name of the first parameter that cannot be read there (``vector_ok``: an XMM
    register counts as readable, to be reported unreadable at run time)."""
    out: list[Fetch] = []
    for v, spec in zip(probe.values, specs, strict=True):
        if v.builtin is not None:
            out.append(Fetch("builtin", builtin=v.builtin))
            continue
        steps = parse_selector(v.selector)
        root = str(steps[0][1])
        try:
            sel = b.walker.select(steps, locate(root, sizes.get(root, 8)),
                                     types.get(root), v.decode, v.max)
        except SelectError:
            return root
        if sel.fetch.kind == "unavailable" or (is_vector_fetch(sel.fetch) and not vector_ok) or (
                sel.decode, sel.size, sel.cap) != (spec.decode, spec.size, spec.cap):
            return root
        out.append(sel.fetch)
    return tuple(out)


def exit_sites(b: Binary, function: str, fetches: tuple[Fetch, ...],
               tail_fetches: tuple[Fetch, ...]) -> tuple[Site, ...]:
    """A site at every RET of the function, and at every jump out of it (a tail
    call: there the results are the callee's, so ``tail_fetches``)."""
    sym, _die = b.functions.find(function)
    out = []
    for e in sites.exits(b.instructions(function), sym.address, sym.address + sym.size):
        how = sites.handling(e.insn.raw)
        if e.tail:
            why = f"exit: tail jump to {b.symbol_name(e.insn.target or 0)} ({how})"
        else:
            why = f"exit: ret at +{e.insn.address - sym.address:#x} ({how})"
        out.append(Site(function, e.insn.address, b.elf.file_offset(e.insn.address),
                        why, tail_fetches if e.tail else fetches, handling=how,
                        role="return"))
    return tuple(out)
