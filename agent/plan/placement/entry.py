"""Where an entry probe goes: the cheapest instruction of a function that every call
passes exactly once with the values still in place (a Go function's stack-check
``jbe`` over its single-stepped ``cmp``), another for float arguments in XMM registers
(``floats``), and a site at each inlined copy where the values are in registers (for an
async fn's body, where its first poll starts: ``asyncfn``).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from functools import partial

from elftools.dwarf.die import DIE

from agent.binary import sites
from agent.binary.dwarf.functions import FunctionVars
from agent.config.model import Probe
from agent.errors import NoopError
from agent.plan.binary import Binary
from agent.plan.fetches import Fetch
from agent.plan.model import Site, ValueSpec
from agent.plan.placement.asyncfn import straight_on, unresumed_arm
from agent.plan.placement.floats import later_site, update_sites
from agent.plan.placement.reads import fetches_at, is_vector_fetch, registers


def entry_sites(b: Binary, function: str, probe: Probe, specs: tuple[ValueSpec, ...],
                fetches: tuple[Fetch, ...], fv: FunctionVars, types: dict[str, DIE | None],
                xmm_readable: bool = False, gated: tuple[int, ...] = ()
                ) -> tuple[list[Site], Counter[str]]:
    """An entry probe's sites on one function: its own code's (``entry_site``, or
    for values in XMM registers, unless the kernel can read those (``xmm_readable``),
    ``later_site`` or ``update_sites``) and its inlined copies'; and why the copies
    left out are."""
    if b.functions.only_inlined(function):  # no code of its own: its copies only
        return inlined_sites(b, function, probe, specs, fv, types, gated)
    site = entry_site(b, function, fetches)
    vector = [v.name for v, f in zip(probe.values, fetches, strict=True)
              if is_vector_fetch(f)]
    if vector and xmm_readable and b.arch.name == "x86-64":
        site = replace(site, why=site.why + f"; {', '.join(vector)} read from "
                       "XMM registers through the kernel's helper")
        vector = []
    # (x86-64's: where Go spills an XMM argument, or a client_golang update reads it)
    spills = vector and b.arch.name == "x86-64"
    later = later_site(b, function, probe, specs, fv, types, vector) if spills else None
    if spills and later is None:
        found = update_sites(b, function, probe, specs, fv, types)
        if found is not None:
            return found
    copies, missed = inlined_sites(b, function, probe, specs, fv, types, gated)
    return [later or site, *copies], missed


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
    how = b.isa.handling_at(insns, 0) if first is not None else sites.SINGLE_STEPPED
    name = first.mnemonic if first is not None else "?"
    if how == sites.REFUSED:
        raise NoopError(f"{function}: the kernel cannot put a uprobe on its first "
                        f"instruction ({name})", "probe a function that calls it")
    site = Site(function, sym.address, b.elf.file_offset(sym.address),
                f"entry: the first instruction ({name}, {how})", fetches, handling=how)
    check = b.isa.stack_check(insns, b.morestack) \
        if how != sites.EMULATED and b.dwarf.language == "go" else None
    if check is None and first is not None and b.dwarf.language == "go" and \
            any(i.target == first.address and i.kind != sites.CALL for i in insns):
        # (a Go leaf's compare-and-swap loop on arm64 goes back to its entry; Go makes no
        # tail calls, so this is a loop, where C's tail recursion would be a call)
        raise NoopError(f"{function}: its first instruction is also the head of a loop in "
                        "it (a retry), so a probe there would count each pass, not each "
                        "call", "probe a function that calls it")
    if how == sites.EMULATED or b.dwarf.language != "go":
        return site
    if check is None:
        return replace(site, why=site.why + "; no stack check, so each call passes it "
                       "once")
    jbe = check.jbe
    clobbered = sorted(registers(fetches) & check.writes)
    if clobbered:
        return replace(site, why=site.why + f"; not the stack check's {jbe.mnemonic}: the "
                       f"prologue writes {', '.join(clobbered)} before it")
    moved = b.functions.moved_params(die, sym.address, jbe.address)
    if moved:
        return replace(site, why=site.why + f"; not the stack check's {jbe.mnemonic}: DWARF "
                       f"places {', '.join(moved)} elsewhere there")
    at = b.isa.handling(jbe)
    return Site(function, jbe.address, b.elf.file_offset(jbe.address),
                f"the stack check's {jbe.mnemonic} at +{jbe.address - sym.address:#x} ({how} "
                f"first instruction {name}; the {jbe.mnemonic} is {at}); hits that branch to "
                "morestack are dropped, so each call counts once", fetches,
                skip_flags=check.skip, handling=at)


def inlined_sites(b: Binary, function: str, probe: Probe, specs: tuple[ValueSpec, ...],
                  fv: FunctionVars, types: dict[str, DIE | None], gated: tuple[int, ...] = ()
                  ) -> tuple[list[Site], Counter[str]]:
    """A site at the first instruction of each copy of ``function`` inlined into
    another, where every value is in registers there; and why the others are not.

    ``gated``: the copies are an async fn's body, and a hit counts only while its
    future's state is one of these (``Unresumed``: its first poll). A copy's site is
    then where the first poll starts its work (``asyncfn.unresumed_arm``), and when DWARF
    places a value only a few instructions on, the first of those where it does."""
    out: list[Site] = []
    missed: Counter[str] = Counter()
    sizes = {p.name: p.size for p in fv.params}
    for copy in b.functions.inlined(function):
        caller = b.function_at(copy.entry)
        insns = b.instructions(caller) if caller else ()
        k = sites.index_at(insns, copy.entry)
        insn = insns[k] if k is not None else None
        if insn is None or k is None:
            missed["its code is not in a function noop can read"] += 1
            continue
        how = b.isa.handling_at(insns, k)
        if how == sites.REFUSED:
            missed[f"its first instruction ({insn.mnemonic}) cannot be probed"] += 1
            continue
        if not gated and any(i.target == copy.entry for i in insns):
            missed["its first instruction is also a jump target (a loop)"] += 1
            continue
        if gated:
            arm = unresumed_arm(b, copy, insns, gated)
            if arm is None:
                missed["noop cannot tell where its first poll starts (its states are not "
                       "dispatched through a jump table)"] += 1
                continue
            insn = arm
            how = b.isa.handling(insn)
        got = fetches_at(b, probe, specs, types, sizes,
                         partial(b.functions.inlined_location, copy, pc=insn.address),
                         vector_ok=True)
        if isinstance(got, str) and gated:
            later = straight_on(b, copy, insns, insn, probe, specs, types, sizes)
            if later is not None:
                insn, got = later
                how = b.isa.handling(insn)
        if isinstance(got, str):
            missed[f"DWARF places {got} in no register there"] += 1
            continue
        out.append(Site(function, insn.address, b.elf.file_offset(insn.address),
                        f"inlined into {b.functions.display_name(caller or '?')} at "
                        f"+{insn.address - b.start_of(caller):#x}"
                        f" ({insn.mnemonic}, {how})", got, handling=how))
    return out, missed
