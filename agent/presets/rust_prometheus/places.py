"""Where the prometheus crate preset probes each update it found (``copies``), and what
it reads there: just after the update instruction (a LOCK one's first instruction
after it; a store's own address when the new value is in a register or a constant), or
before it where another path joins after it (``guards.before``); a histogram's count
paired with its sum's compare-and-swap for the observed value; a float counter's
increment where its loop adds a constant of the binary. ``rules``'s docstring says why
each site."""

from __future__ import annotations

import struct
from dataclasses import replace

from agent.binary import guards, sites
from agent.binary.amd64 import full_register
from agent.plan.binary import Binary
from agent.plan.fetches import Fetch, Op
from agent.plan.model import Site
from agent.plan.placement.exits import paired_with_swap
from agent.presets.rust_prometheus.copies import LOCK_OPS, STORES, Found, indices, mem_reg, qword
from agent.presets.rust_prometheus.facts import make_tag

# Where to probe an update: the site's address, what to read there, why, and its tag.
Placed = tuple[int, tuple[Fetch, ...], str, str]


def _field(f: Found) -> Fetch:
    """The updated field itself, in memory."""
    return Fetch("mem", ops=(Op("reg", reg=f.base),), offset=f.disp, size=8)


def place(b: Binary, f: Found) -> Placed | None:
    """Where to probe update ``f``, what to read there, why, and the site's tag."""
    insns, i = f.insns, f.insns[f.n]
    gone = Fetch("unavailable", why="not held anywhere at this site")
    field = "count" if f.kind == "histogram" else "value"
    what = f"{'lock ' * i.lock}{i.mnemonic} on the {f.kind}'s {field} at {i.address:#x}"
    targets = sites.branch_targets(insns)
    src = next((o[1] for o in i.operands if o[0] == "reg"), None)
    imm = next((o[1] for o in i.operands if o[0] == "imm"), None)
    if not i.lock and i.mnemonic in STORES:
        if imm is not None:  # at the store of a constant (reset's 0): the new value
            new = Fetch("const", offset=imm & 2**64 - 1)
            return (i.address, (gone, new, _field(f), *_now(f, new)),
                    f"at the store of the constant {imm:#x} ({what})",
                    make_tag(f.kind, f.op, store=True))
        if src is not None and src.startswith("r"):  # at the store: new in a register
            new = Fetch("reg", size=8, regs=(src,))
            return (i.address, (gone, new, _field(f), *_now(f, new)),
                    f"at the store of the new value ({what}) from {src}",
                    make_tag(f.kind, f.op, store=True))
        after = _after(insns, f.n, targets)
        if after is None:
            return None
        return (insns[after].address, (gone, _field(f), gone, *_now(f, _field(f))),
                f"after the store of the new value ({what}), read back from memory",
                make_tag(f.kind, f.op, store=True))
    after = _after(insns, f.n, targets)
    if after is None:
        return None
    site = insns[after].address
    if f.kind == "histogram":  # xadd left the count before in src
        return (site, (Fetch("reg", size=8, regs=(src,)) if src else gone,
                       Fetch("unavailable", why="v is passed in xmm0, and this kernel "
                             "cannot read XMM registers in a uprobe")),
                f"after the {what}: the count before it in {src}", make_tag("histogram", "observe"))
    if i.mnemonic == "cmpxchg":  # old bits in rax, new in src; ZF: the swap won
        delta = _constant_delta(b, insns, f.n, src or "")
        return (site, (Fetch("const", offset=delta) if delta is not None else Fetch(
                    "unavailable", why="computed at run time: the increment is new - old"),
                       Fetch("reg", size=8, regs=(src,)) if src else gone,
                       Fetch("reg", size=8, regs=("rax",)), *_now(f, _field(f))),
                f"after the {what}: a successful swap (ZF), old bits in rax, new in {src}"
                + (", the increment a constant of the loop" if delta is not None else ""),
                make_tag(f.kind, f.op))
    sign = LOCK_OPS[i.mnemonic]
    if i.mnemonic in ("inc", "dec"):
        delta_fetch, reg_sign = Fetch("const", offset=sign & 2**64 - 1), 1
    elif imm is not None:
        delta_fetch, reg_sign = Fetch("const", offset=(sign * imm) & 2**64 - 1), 1
    else:
        delta_fetch, reg_sign = Fetch("reg", size=8, regs=(src or "",)), sign
    adjust = _later(insns, f.n, after, f.base, f.disp)
    if adjust is None:
        return None
    return (site, (delta_fetch, _field(f), gone),
            f"after the {what} (the kernel refuses a LOCK instruction): the value read "
            "back from memory, the increment from the instruction", make_tag(f.kind, f.op,
                                                                        reg_sign, adjust))


def guarded(f: Found) -> guards.Before | str:
    """The site before LOCK update ``f`` (``guards.before``), where its base register
    and the register of its increment are read; a string: why there is none."""
    i = f.insns[f.n]
    src = next((o[1] for o in i.operands if o[0] == "reg"), None)
    return guards.before(f.insns, f.n, (f.base, *((src,) if src else ())),
                         plain=(src,) if src else ())


def place_before(f: Found, at: guards.Before) -> Placed:
    """Like ``place``, at a site before the LOCK update ``f``: the increment from the
    instruction, the value it leaves as the field read there plus the increment, and
    the value before it."""
    i = f.insns[f.n]
    base = at.reg(f.base)
    field = rebase(_field(f), f.base, base)
    src = next((o[1] for o in i.operands if o[0] == "reg"), None)
    imm = next((o[1] for o in i.operands if o[0] == "imm"), None)
    sign = LOCK_OPS[i.mnemonic]
    if src is None:  # inc, dec, or a constant operand
        step = sign * (1 if imm is None else imm) & 2**64 - 1
        delta, value = Fetch("const", offset=step), replace(field, kind="sum", base=step)
        reg_sign = 1
    else:
        reg = at.reg(src).reg
        delta = Fetch("reg", size=8, regs=(reg,))
        value = replace(field, kind="sum", regs=(reg,), formula="-" if sign < 0 else "")
        reg_sign = sign
    what = f"lock {i.mnemonic} on the {f.kind}'s value at {i.address:#x}"
    return (at.site.address, (delta, value, field),
            f"before the {what} (after it another path joins, or the kernel refuses the "
            f"instruction): {at.why}; the value before it read from memory, the increment "
            "from the instruction", make_tag(f.kind, f.op, reg_sign))


def place_flush(f: Found, at: guards.Before) -> Placed:
    """Where to probe a local histogram's flush ``f`` (its ``lock xadd`` of the local
    count on the shared ``shard_and_count``): at the site before it, where the xadd's
    register still holds the observations flushed; the count after it is the field
    read there plus them. The flushed sum comes later, from the sum's swap."""
    i = f.insns[f.n]
    base = at.reg(f.base)
    field = rebase(_field(f), f.base, base)
    src = next(o[1] for o in i.operands if o[0] == "reg")
    reg = at.reg(src).reg
    return (at.site.address, (Fetch("reg", size=8, regs=(reg,)),
                              replace(field, kind="sum", regs=(reg,)), field,
                              Fetch("unavailable", why="added to the shard's sum later, "
                                    "by its compare-and-swap")),
            f"before the lock xadd on the histogram's count at {i.address:#x} (a local "
            f"histogram's flush: after it the register holds the count before, no longer "
            f"the observations flushed): {at.why}; the count before it read from memory, "
            f"the observations flushed from {reg}", make_tag("histogram", "flush"))


def rebase(fetch: Fetch, reg: str, at: guards.Reg) -> Fetch:
    """``fetch``, which starts from register ``reg``, read where ``reg`` is ``at``."""
    if at == guards.Reg(reg):
        return fetch
    chain = (Op("reg", reg=at.reg), *(Op("deref", offset=d) for d in at.derefs))
    if fetch.kind == "reg" and fetch.regs == (reg,) and not fetch.ops:
        if not at.derefs:
            return replace(fetch, regs=(at.reg,), offset=fetch.offset + at.add)
        return Fetch("addr", chain, offset=fetch.offset + at.add)
    if not fetch.ops or fetch.ops[0] != Op("reg", reg=reg):
        raise ValueError(f"{fetch.describe()} does not start from {reg}")
    add = (Op("add", offset=at.add),) if at.add else ()
    return replace(fetch, ops=(*chain, *add, *fetch.ops[1:]))


def sum_swap(f: Found, site: int) -> int | None:
    """The index of the ``lock cmpxchg`` that adds the observed value to the shard's sum
    in the histogram update ``f``'s ``HistogramCore::observe``, when a probe after it
    pairs with one at ``site`` (the count's): the thread's stack pointer is the same at
    both (nothing between them moves it or calls), and only the swap leads to the
    instruction after it."""
    insns = f.insns
    swaps = [m for m in indices(insns, list(f.around))
             if insns[m].lock and insns[m].mnemonic == "cmpxchg" and qword(insns[m])
             and mem_reg(insns[m])]
    if len(swaps) != 1 or swaps[0] <= f.n or swaps[0] + 1 >= len(insns):
        return None
    m = swaps[0]
    after = insns[m + 1]
    if any(i.target == after.address for i in insns) or \
            sites.handling(after.raw) == sites.REFUSED:
        return None
    span = [i for i in insns if site <= i.address <= insns[m].address]
    if any(i.mnemonic in ("call", "push", "pop", "leave") or "rsp" in i.writes for i in span):
        return None
    return m


def paired(b: Binary, f: Found, at: sites.Insn, m: int, fetches: tuple[Fetch, ...],
           tag: str, why: str, flags: tuple[int, int] = (0, 0)
           ) -> list[tuple[int, int, Site]]:
    """The histogram update ``f``'s two sites: at the count (``at``), which keeps what it
    reads for the thread, and after the sum's successful swap (``insns[m]``), where the
    observed value is new - old and each observation is a hit."""
    swap, after = f.insns[m], f.insns[m + 1]
    src = next((o[1] for o in swap.operands if o[0] == "reg"), "")
    name = b.functions.display_name(f.function)
    kept, ends = paired_with_swap(fetches, src)
    return [
        (at.address, -f.insns[f.n].address, Site(
            name, at.address, b.elf.file_offset(at.address), why + "; kept for the sum's "
            f"swap at {swap.address:#x}", kept, tag=tag, handling=sites.handling(at.raw),
            role="call", skip_flags=flags[0], keep_flags=flags[1])),
        (after.address, -swap.address, Site(
            name, after.address, b.elf.file_offset(after.address),
            f"after the lock cmpxchg on the histogram's sum at {swap.address:#x}: a "
            f"successful swap (ZF), the {'sum flushed' if f.op == 'flush' else 'observed value'}"
            f" new - old (rax, {src}), the count as the call's count site read it", ends,
            when_zf=True, tag=tag,
            handling=sites.handling(after.raw), role="return"))]


def _now(f: Found, fetch: Fetch) -> tuple[Fetch, ...]:
    """The field just after the update, for a float probe's gauges (see ``columns``)."""
    return (fetch,) if f.number == "f64" else ()


def _after(insns: tuple[sites.Insn, ...], n: int, targets: frozenset[int]) -> int | None:
    """The first instruction after ``insns[n]`` and any LOCK instructions right after it,
    if nothing else jumps there and the kernel can probe it."""
    k = n + 1
    while k < len(insns) and insns[k].lock:
        k += 1
    if k >= len(insns) or insns[k].address in targets or \
            sites.handling(insns[k].raw) == sites.REFUSED:
        return None
    return k


def _later(insns: tuple[sites.Insn, ...], n: int, site: int, base: str, disp: int
           ) -> int | None:
    """What the LOCK updates between ``insns[n]`` and the site add to the same field (by
    constants), for the value after ``insns[n]``'s own; None when one adds a register."""
    total = 0
    for i in insns[n + 1:site]:
        if mem_reg(i) != (base, disp):
            continue
        imm = next((o[1] for o in i.operands if o[0] == "imm"), None)
        if i.mnemonic in ("inc", "dec"):
            total += LOCK_OPS[i.mnemonic]
        elif i.mnemonic in ("add", "sub") and imm is not None:
            total += LOCK_OPS[i.mnemonic] * imm
        else:
            return None
    return -total


def _constant_delta(b: Binary, insns: tuple[sites.Insn, ...], n: int, src: str
                    ) -> int | None:
    """The f64 bits of a compare-and-swap loop's increment, when it is a constant: the
    new value is ``addsd``/``subsd`` of the old with a double loaded from the binary."""
    k = n - 1
    moved = src
    while k >= max(0, n - 16):  # back to what computed src
        i = insns[k]
        if i.mnemonic in ("addsd", "subsd") and i.operands[0] == ("reg", moved):
            sign = 1 if i.mnemonic == "addsd" else -1
            other = i.operands[1]
            if other[0] == "mem" and other[1] == "rip":
                return _double(b, i, other[3], sign)
            if other[0] == "reg":
                return _loaded(b, insns, k, n, other[1], sign)
            return None
        if i.mnemonic == "movq" and i.operands[0] == ("reg", moved):
            moved = i.operands[1][1] if i.operands[1][0] == "reg" else ""
        k -= 1
    return None


def _loaded(b: Binary, insns: tuple[sites.Insn, ...], k: int, n: int, reg: str, sign: int
            ) -> int | None:
    """The constant double in ``reg`` at ``insns[k]``: loaded before it, on the only
    path there (jumps into the span come from inside it: the loop's own)."""
    lo = k - 1
    while lo >= 0:
        i = insns[lo]
        if i.mnemonic in ("call", "ret") or i.mnemonic.startswith("j") or \
                full_register(reg) in (full_register(w) for w in i.writes):
            break
        lo -= 1
    if lo < 0:
        return None
    load = insns[lo]
    if load.mnemonic != "movsd" or load.operands[0] != ("reg", reg) or \
            load.operands[1][0] != "mem" or load.operands[1][1] != "rip":
        return None
    span = (load.address, insns[n + 1].address + insns[n + 1].size)
    if any(not span[0] <= a < span[1]
           for a in sites.branches_into(insns, span[0], insns[k].address)):
        return None
    return _double(b, load, load.operands[1][3], sign)


def _double(b: Binary, i: sites.Insn, disp: int, sign: int) -> int | None:
    try:
        raw = b.elf.read_vaddr(i.address + i.size + disp, 8)
    except (ValueError, KeyError, OSError):
        return None
    (x,) = struct.unpack("<d", raw)
    return int.from_bytes(struct.pack("<d", sign * x), "little")
