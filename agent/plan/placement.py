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

from agent.binary import sites
from agent.binary.amd64 import is_vector
from agent.binary.dwarf.functions import FunctionVars
from agent.binary.dwarf.listing import Inlined
from agent.binary.dwarf.locations import Location, Piece
from agent.config.model import Probe
from agent.errors import NoopError
from agent.plan import updates
from agent.plan.binary import Binary
from agent.plan.model import Fetch, Op, Site, ValueSpec
from agent.plan.selectors import SelectError

FLAGS_BELOW_OR_EQUAL = 0x41  # CF|ZF: when jbe branches


def registers(fetches: tuple[Fetch, ...]) -> set[str]:
    """Registers the fetches read."""
    return {r for f in fetches for r in f.regs} | {o.reg for f in fetches for o in f.ops
                                                  if o.reg}


def is_vector_fetch(fetch: Fetch) -> bool:
    """Whether the fetch reads an XMM register, which pt_regs does not hold."""
    return any(is_vector(r) for r in fetch.regs)


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
    if vector and xmm_readable:
        site = replace(site, why=site.why + f"; {', '.join(vector)} read from "
                       "XMM registers through the kernel's helper")
        vector = []
    later = later_site(b, function, probe, specs, fv, types, vector) if vector else None
    if vector and later is None:
        found = update_sites(b, function, probe, specs, fv, types)
        if found is not None:
            return found
    copies, missed = inlined_sites(b, function, probe, specs, fv, types, gated)
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
    clobbered = sorted(registers(fetches) & check.writes)
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
                  fv: FunctionVars, types: dict[str, DIE | None], gated: tuple[int, ...] = ()
                  ) -> tuple[list[Site], Counter[str]]:
    """A site at the first instruction of each copy of ``function`` inlined into
    another, where every value is in registers there; and why the others are not.

    ``gated``: the copies are an async fn's body, and a hit counts only while its
    future's state is one of these (``Unresumed``: its first poll). A copy's site is
    then where the first poll starts its work (``_unresumed_arm``), and when DWARF
    places a value only a few instructions on, the first of those where it does."""
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
        if not gated and any(i.target == copy.entry for i in insns):
            missed["its first instruction is also a jump target (a loop)"] += 1
            continue
        if gated:
            arm = _unresumed_arm(b, copy, insns, gated)
            if arm is None:
                missed["noop cannot tell where its first poll starts (its states are not "
                       "dispatched through a jump table)"] += 1
                continue
            insn = arm
            how = sites.handling(insn.raw)
        got = _fetches_at(b, probe, specs, types, sizes,
                          partial(b.functions.inlined_location, copy, pc=insn.address),
                          vector_ok=True)
        if isinstance(got, str) and gated:
            later = _straight_on(b, copy, insns, insn, probe, specs, types, sizes)
            if later is not None:
                insn, got = later
                how = sites.handling(insn.raw)
        if isinstance(got, str):
            missed[f"DWARF places {got} in no register there"] += 1
            continue
        out.append(Site(function, insn.address, b.elf.file_offset(insn.address),
                        f"inlined into {b.functions.display_name(caller or '?')} at "
                        f"+{insn.address - b.start_of(caller):#x}"
                        f" ({insn.mnemonic}, {how})", got, handling=how))
    return out, missed

def state_stores(b: Binary, body: str, state: int, size: int, value: int
                 ) -> list[tuple[int, Fetch, str]]:
    """Where an async fn's body (``body``: its own code, and each copy inlined into
    another function, nested inlined code aside) stores ``value`` into a one-byte
    state: each store's address, the address it stores to (as a fetch: the key of
    the future), and why. Stores of that byte into another future's state are
    harmless: no call of this one has that key."""
    if size != 1:
        return []
    # (function holding the code, the body's ranges there, nested inlined code's)
    regions: list[tuple[str, list[tuple[int, int]], list[tuple[int, int]]]] = []
    sym = b.functions.symbols.get(body)
    if sym is not None and sym.size:
        _s, die = b.functions.find(body)
        regions.append((body, [(sym.address, sym.address + sym.size)],
                        [r for d in die.iter_children() for r in _inlined_ranges(b, d)]))
    for copy in b.functions.inlined(body):
        caller = b.function_at(copy.entry)
        if caller is not None:
            regions.append((caller, list(b.dwarf.ranges(copy.die)),
                            [r for d in copy.die.iter_children()
                             for r in _inlined_ranges(b, d)]))
    out = []
    seen: set[int] = set()
    for where, ranges, nested in regions:
        for i in b.instructions(where):
            if i.address in seen or not any(lo <= i.address < hi for lo, hi in ranges) \
                    or any(lo <= i.address < hi for lo, hi in nested):
                continue
            ops = i.operands
            if i.mnemonic != "mov" or len(ops) != 2 or ops[0][0] != "mem" \
                    or ops[1] != ("imm", value) or ops[0][1] in ("rip", "") or ops[0][2]:
                continue
            code = i.raw.lstrip(bytes(range(0x40, 0x50)))[:1]  # past a REX prefix
            if code != b"\xc6" or sites.handling(i.raw) == sites.REFUSED:
                continue  # not a one-byte store
            base, disp = ops[0][1], ops[0][3]
            key = Fetch("root", (Op("sp", offset=disp),) if base == "rsp" else
                        (Op("reg", reg=base), Op("add", offset=disp)))
            seen.add(i.address)
            out.append((i.address, key, f"the future's state becomes Returned at "
                        f"{i.address:#x} in {b.functions.display_name(where)} "
                        f"({sites.handling(i.raw)})"))
    return out


def _inlined_ranges(b: Binary, die: DIE) -> list[tuple[int, int]]:
    if die.tag == "DW_TAG_inlined_subroutine":
        return list(b.dwarf.ranges(die))
    return [r for c in die.iter_children() for r in _inlined_ranges(b, c)]


def drop_sites(b: Binary, future: str, state: int) -> list[tuple[str, int, Fetch, str]]:
    """The entries of the drop glue of future type ``future`` (its own code: the pointer
    to drop is in rdi there): each function, address, the key of the future dropped
    (the address of its state) and why."""
    want = f"core::ptr::drop_in_place<{future}>"
    out = []
    seen: set[int] = set()
    for sym in b.elf.function_symbols():  # every copy: several may demangle alike
        shown = b.functions.display_name(sym.name)
        if not sym.size or sym.address in seen or \
                not shown.startswith("core::ptr::drop_in_place<") or \
                b.functions.dwarf_name(sym.name) != want:
            continue
        seen.add(sym.address)
        insns = b.instructions(sym.name)
        if not insns or sites.handling(insns[0].raw) == sites.REFUSED:
            continue
        out.append((shown, sym.address, Fetch("root", (Op("reg", reg="rdi"),
                                                       Op("add", offset=state))),
                    f"the future is dropped: {shown} at {sym.address:#x} (an unfinished "
                    "call was cancelled)"))
    return out


def _falls_through(insn: sites.Insn) -> bool:
    return insn.mnemonic not in ("jmp", "ud2", "hlt") and not insn.mnemonic.startswith("ret")


_REG64 = {"eax": "rax", "ebx": "rbx", "ecx": "rcx", "edx": "rdx", "esi": "rsi",
          "edi": "rdi", **{f"r{n}d": f"r{n}" for n in range(8, 16)}}


def _unresumed_arm(b: Binary, copy: Inlined, insns: tuple[sites.Insn, ...],
                   first: tuple[int, ...]) -> sites.Insn | None:
    """Where the first poll of an async fn's body inlined as ``copy`` starts its work:
    the arm its dispatch jumps to for state ``first`` (read from the jump table the
    copy's first instructions index with the state), followed on through direct jumps
    to where the code of a poll made right after the future is built (which skips
    the dispatch: the state is known there) joins it. Every first poll passes there
    once; None when the dispatch is not such a table."""
    by_address = {i.address: i for i in insns}
    at = next((n for n, i in enumerate(insns) if i.address == copy.entry), None)
    if at is None or len(first) != 1:
        return None
    base = index = state = None
    for i in insns[at:at + 16]:
        ops = i.operands
        table_read = i.mnemonic == "movsxd" and base is not None and ops[1][0] == "mem" \
            and ops[1][1] == base[1]
        if state is not None and index is None and not table_read and any(
                _REG64.get(w, w) == state for w in i.writes):
            return None  # the state changed on its way to the table (a bias): not read
        if i.mnemonic == "movzx" and ops[1][0] == "mem" and ops[0][0] == "reg":
            state = _REG64.get(ops[0][1], ops[0][1])
        elif i.mnemonic == "lea" and ops[1][0] == "mem" and ops[1][1] == "rip":
            base = (i.end + ops[1][3], ops[0][1])
        elif table_read:
            index = ops[1][2]
        elif i.mnemonic == "jmp" and ops and ops[0][0] == "reg":
            break
        elif i.mnemonic.startswith(("j", "call", "ret")):
            return None
    else:
        return None
    if base is None or index is None or index != state:
        return None
    try:
        rel = int.from_bytes(b.elf.read_vaddr(base[0] + 4 * first[0], 4), "little",
                             signed=True)
    except NoopError:
        return None
    ranges = b.dwarf.ranges(copy.die)

    def inside(a: int) -> bool:
        return any(lo <= a < hi for lo, hi in ranges)

    joined: set[int] = set()  # entered from outside the copy: by a jump, or falling in
    for n, i in enumerate(insns):
        if i.target is not None and not inside(i.address) and inside(i.target):
            joined.add(i.target)
        if n and inside(i.address) and not inside(insns[n - 1].address) \
                and _falls_through(insns[n - 1]):
            joined.add(i.address)
    arm = by_address.get(base[0] + rel)
    cur = arm
    for _ in range(32):
        if cur is None:
            return None
        if cur is not arm and cur.address in joined:
            return cur
        if cur.mnemonic == "jmp" and cur.target is not None:
            cur = by_address.get(cur.target)
        elif cur.mnemonic.startswith(("j", "call", "ret")):
            return arm
        else:
            cur = by_address.get(cur.end)
    return arm


def _straight_on(b: Binary, copy: Inlined, insns: tuple[sites.Insn, ...], first: sites.Insn,
                 probe: Probe, specs: tuple[ValueSpec, ...], types: dict[str, DIE | None],
                 sizes: dict[str, int]) -> tuple[sites.Insn, tuple[Fetch, ...]] | None:
    """The first instruction after a copy's entry, reached straight on from it (no
    jump, call or return before it, none jumping to it) and in the copy's code, where
    every value can be read; None when there is none within a few instructions."""
    ranges = b.dwarf.ranges(copy.die)
    targets = {i.target for i in insns if i.target is not None}
    at = insns.index(first)
    for n, insn in enumerate(insns[at + 1:at + 17], at + 1):
        if insn.address in targets or insns[n - 1].mnemonic.startswith(("j", "call", "ret")):
            return None
        if sites.handling(insn.raw) == sites.REFUSED or \
                not any(lo <= insn.address < hi for lo, hi in ranges):
            continue
        got = _fetches_at(b, probe, specs, types, sizes,
                          partial(b.functions.inlined_location, copy, pc=insn.address),
                          vector_ok=True)
        if not isinstance(got, str):
            return insn, got
    return None


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
        cfa = b.dwarf.frames.cfa_at(insn.address)
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
        steps = v.steps
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


def paired_with_swap(fetches: tuple[Fetch, ...], src: str
                     ) -> tuple[tuple[Fetch, ...], tuple[Fetch, ...]]:
    """A count site paired with the compare-and-swap that adds the observed value to a
    sum, as an exit probe's call and return: the call's fetches (all but the last
    value, the observed one, which is read at the return) and the return's (what the
    call read, and the observed value as new - old: rax and the swap's ``src``)."""
    kept = (*fetches[:-1], Fetch("later"))
    ends = (*(Fetch("saved", slot=k) for k in range(len(fetches) - 1)),
            Fetch("derived", regs=("rax", src), formula="new-old"))
    return kept, ends
