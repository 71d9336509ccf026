"""Where an async fn's probes go besides its entry: in a copy of its body inlined into
another function, where its first poll starts its work (the arm its state's jump table
dispatches to, or a few instructions on where DWARF places the values); the stores
that make its future's state ``Returned`` (its end), and its future's drop glue (a
call cancelled).
"""

from __future__ import annotations

from functools import partial

from elftools.dwarf.die import DIE

from agent.binary import sites
from agent.binary.dwarf.listing import Inlined
from agent.config.model import Probe
from agent.errors import NoopError
from agent.plan.binary import Binary
from agent.plan.fetches import Fetch, Op
from agent.plan.model import ValueSpec
from agent.plan.placement.reads import fetches_at


def _falls_through(insn: sites.Insn) -> bool:
    return insn.mnemonic not in ("jmp", "ud2", "hlt") and not insn.mnemonic.startswith("ret")


_REG64 = {"eax": "rax", "ebx": "rbx", "ecx": "rcx", "edx": "rdx", "esi": "rsi",
          "edi": "rdi", **{f"r{n}d": f"r{n}" for n in range(8, 16)}}


def unresumed_arm(b: Binary, copy: Inlined, insns: tuple[sites.Insn, ...],
                  first: tuple[int, ...]) -> sites.Insn | None:
    """Where the first poll of an async fn's body inlined as ``copy`` starts its work:
    the arm its dispatch jumps to for state ``first`` (read from the jump table the
    copy's first instructions index with the state), followed on through direct jumps
    to where the code of a poll made right after the future is built (which skips
    the dispatch: the state is known there) joins it. Every first poll passes there
    once; None when the dispatch is not such a table."""
    at = next((n for n, i in enumerate(insns) if i.address == copy.entry), None)
    if at is None or len(first) != 1:
        return None
    table = _jump_table(insns[at:at + 16])
    if table is None:
        return None
    try:
        rel = int.from_bytes(b.elf.read_vaddr(table + 4 * first[0], 4), "little",
                             signed=True)
    except NoopError:
        return None
    by_address = {i.address: i for i in insns}
    return _joins(by_address.get(table + rel), by_address,
                  _joined(insns, b.dwarf.ranges(copy.die)))


def _jump_table(head: tuple[sites.Insn, ...]) -> int | None:
    """The address of the jump table a dispatch at the start of ``head`` indexes with
    the state it reads (``movzx`` the state, ``lea`` the table, ``movsxd`` the entry
    the state indexes, ``jmp`` through a register); None for any other code."""
    base: tuple[int, str] | None = None  # the table's address, and its register
    index = state = None
    for i in head:
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
    return base[0]


def _joined(insns: tuple[sites.Insn, ...], ranges: list[tuple[int, int]]) -> set[int]:
    """The addresses in ``ranges`` (a copy's code) that code outside them enters."""

    def inside(a: int) -> bool:
        return any(lo <= a < hi for lo, hi in ranges)

    joined: set[int] = set()  # entered from outside the copy: by a jump, or falling in
    for n, i in enumerate(insns):
        if i.target is not None and not inside(i.address) and inside(i.target):
            joined.add(i.target)
        if n and inside(i.address) and not inside(insns[n - 1].address) \
                and _falls_through(insns[n - 1]):
            joined.add(i.address)
    return joined


def _joins(arm: sites.Insn | None, by_address: dict[int, sites.Insn], joined: set[int]
           ) -> sites.Insn | None:
    """From ``arm`` on through direct jumps, the first instruction other code joins
    (``joined``); ``arm`` itself when a branch, call or return comes first."""
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


def straight_on(b: Binary, copy: Inlined, insns: tuple[sites.Insn, ...], first: sites.Insn,
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
        got = fetches_at(b, probe, specs, types, sizes,
                         partial(b.functions.inlined_location, copy, pc=insn.address),
                         vector_ok=True)
        if not isinstance(got, str):
            return insn, got
    return None


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
