"""The prometheus crate's updates in arm64 code, for noop --binary's lines (noop run
mirrors an arm64 program from its memory: ``rules.make``).

Rust's aarch64 Linux target calls outline atomics: each read-modify-write is a ``bl``
of a helper of the compiler's runtime (``__aarch64_ldadd8_relax``,
``__aarch64_cas8_rel``, ...) that picks the LSE instruction or an exclusive load/store
loop at run time. The helpers' contract (libgcc's and compiler-rt's ``lse.S``, Rust's
compiler_builtins) is that they write x0 (the value before) and the scratch registers
x15 to x17 only; noop reads each helper's code to see that it does, so when the call
returns the caller's registers are as it left them:

- an integer's ``inc_by``/``dec_by`` (``ldadd``: x0 the increment, x1 the field's
  address): at the instruction after the call x0 holds the value before; the
  increment is the constant the caller put in x0, or the register it copied (or
  negated) there, and the value after is their sum, exact;
- a float's (a ``cas`` loop: ``bl __aarch64_cas8_*; cmp x0, Xe; b.ne loop``): at the
  instruction after the ``b.ne``, reached once per swap that took effect, x0 holds the
  old bits, x1 the new and x2 the field's address: the increment is new - old;
- a ``set``: a ``str`` of a general register (at the store: the new value in it, the
  old one still in memory), of ``xzr`` (0), or of a v register (after the store, read
  back from memory: a uprobe's ``pt_regs`` holds no v register);
- a histogram's count (``ShardAndCount::inc``'s ``ldadd``): the count before in x0;
  the observed value (in a v register, which a uprobe cannot read) is new - old where
  the sum's ``cas`` loop took effect, that site paired with the count's by the
  thread's stack pointer (``paired``, as on x86-64).

A build for a CPU with the Large System Extensions (``+lse``, a ``target-cpu`` that has
them) inlines the LSE instructions instead: ``ldadd Xs, Xt, [Xn]`` is probed after it
where Xt (the value before), Xs (the amount) and Xn (the address) are all still there
(exact); where Xt overwrote one of them, at the instruction itself, the value after read
as the field there plus Xs (another thread's update of that moment may be in it). A
``cas Xs, Xt, [Xn]`` loop as the helper's, with its own registers.

A build with neither (``-outline-atomics``) inlines exclusive load/store loops: each
is read where it is left on success (``arm64_loops``), the new value in the register
it stored, the increment the add's immediate or register, or a float loop's constant
(``fmov Dk, #imm``; else new - old where the old bits are still in a register). Where
the loop falls straight into another (``inc(); inc()``, an Arc's count dropped after a
labelled child's update) the site is where the last one is left: the value less what
later adds of constants to the same field added, else read back from memory, the
metric through the register its address was made from when a later loop wrote it
(the histogram's observed value is not read there: the sum's loop keeps no old bits).
A local histogram's flush is said once, not read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from agent.binary import guards, sites
from agent.binary.isa import arm64_loops
from agent.binary.isa.arm64 import _word
from agent.binary.isa.arm64_updates import _mem
from agent.plan.binary import Binary
from agent.plan.fetches import Fetch, Op
from agent.plan.model import Site
from agent.plan.placement.exits import paired_with_swap
from agent.presets.rust_prometheus.copies import Found, Reader, indices
from agent.presets.rust_prometheus.facts import make_tag
from agent.presets.rust_prometheus.places import Placed

_HELPER = re.compile(r"__aarch64_(ldadd|cas)8_(relax|acq|rel|acq_rel)$")
# What a helper may write: its result and the scratch registers of the contract.
_SCRATCH = frozenset({"x0", "x15", "x16", "x17"})
_MASK = 2**64 - 1
_GONE = Fetch("unavailable", why="not held anywhere at this site")
_OBSERVED = Fetch("unavailable", why="v is passed in a v register, which a uprobe's "
                  "pt_regs does not hold")


def helper(b: Binary, i: sites.Insn) -> str | None:
    """``ldadd`` or ``cas`` when ``i`` calls an outline-atomics helper on 8 bytes whose
    code writes no register but x0 and the scratch ones."""
    if i.mnemonic != "bl" or i.target is None:
        return None
    name = b.function_at(i.target)
    m = _HELPER.match(name or "")
    if m is None or name is None:
        return None
    sym = b.functions.symbols.get(name)
    if sym is None or sym.address != i.target:
        return None
    written = {w for x in b.instructions(name) for w in x.writes}
    return m.group(1) if written <= _SCRATCH else None


_LSE_ADD = re.compile(r"(ld|st)add(a|al|l)?$")
_LSE_CAS = re.compile(r"cas(a|al|l)?$")


@dataclass(frozen=True, slots=True)
class Atomic:
    """An 8-byte read-modify-write: ``kind`` ``ldadd`` or ``cas``; ``call``: through an
    outline helper (its registers x0, x1, x2) or inlined (the LSE instruction's Xs, Xt,
    Xn). An add: the amount in ``s``, the old value into ``t`` (xzr: none, ``stadd``);
    a compare-and-swap: the old value expected in ``s`` (and the old value found, after
    it), the new in ``t``; the field's address in ``n``."""

    kind: str
    call: bool
    s: str
    t: str
    n: str


def atomic(b: Binary, i: sites.Insn) -> Atomic | None:
    """The 8-byte add or compare-and-swap ``i`` makes: a call of an outline helper, or
    an LSE instruction inlined (a build for a CPU with the extensions)."""
    kind = helper(b, i)
    if kind is not None:
        return Atomic(kind, True, "x0", "x0" if kind == "ldadd" else "x1",
                      "x1" if kind == "ldadd" else "x2")
    add, cas = _LSE_ADD.match(i.mnemonic), _LSE_CAS.match(i.mnemonic)
    if not (add or cas) or _word(i.raw) >> 30 != 3:
        return None
    regs = [o[1] for o in i.operands if o[0] == "reg"]
    mems = [o for o in i.operands if o[0] == "mem"]
    if len(mems) != 1 or not mems[0][1] or mems[0][2] or mems[0][3] or \
            len(regs) != (1 if i.mnemonic.startswith("st") else 2):
        return None
    t = regs[1] if len(regs) == 2 else "xzr"
    return Atomic("ldadd" if add else "cas", False, str(regs[0]), str(t), str(mems[0][1]))


def _store(i: sites.Insn) -> tuple[str, str, int] | None:
    """(source register, base, offset) of an 8-byte ``str``/``stlr`` of a register (an
    X, xzr or a D register, named as its v) to a field: a base register other than the
    stack's, no index."""
    if i.mnemonic not in ("str", "stlr") or len(i.operands) != 2:
        return None
    (kind, src), mem = i.operands[0][:2], i.operands[1]
    if kind != "reg" or mem[0] != "mem" or not mem[1] or mem[2] or mem[1] in ("sp", "x29"):
        return None
    # 8 bytes: the size field (bits 31:30) 3, an X register's or a D register's (v)
    return (str(src), str(mem[1]), int(mem[3])) if _word(i.raw) >> 30 == 3 else None


def is_update(b: Binary, insns: tuple[sites.Insn, ...], n: int, number: str,
              store: bool) -> bool:
    """Whether ``insns[n]`` updates a Value's field: a store of the new value (``set``),
    a compare-and-swap helper's call (a float's add), an add helper's (an integer's)."""
    i = insns[n]
    if store:
        return _store(i) is not None
    kind = "cas" if number == "f64" else "ldadd"
    a = atomic(b, i)
    if a is not None:
        return a.kind == kind
    got = arm64_loops.loop(insns, n) if i.mnemonic in _EXCLUSIVE_STORES else None
    return got is not None and got.kind == kind


_EXCLUSIVE_STORES = ("stxr", "stlxr")


def mem_reg(b: Binary, i: sites.Insn) -> tuple[str, int] | None:
    """(register, offset) of the field an update instruction writes: an atomic's
    address (a helper's x1 for an add, x2 for a compare-and-swap; an LSE instruction's
    Xn), a store's base."""
    a = atomic(b, i)
    if a is not None:
        return a.n, 0
    base = _mem(i) if i.mnemonic in _EXCLUSIVE_STORES else None
    if base is not None:
        return base, 0
    st = _store(i)
    return (st[1], st[2]) if st is not None else None


def reader(b: Binary) -> Reader:
    """arm64's updates (``copies.updates``): stores and helper calls, the count's add a
    call of the add helper."""
    def counts(insns: tuple[sites.Insn, ...], n: int) -> bool:
        a = atomic(b, insns[n])
        if a is None and insns[n].mnemonic in _EXCLUSIVE_STORES:
            got = arm64_loops.loop(insns, n)
            return got is not None and got.kind == arm64_loops.ADD
        return a is not None and a.kind == "ldadd"

    return Reader(lambda insns, n, number, store: is_update(b, insns, n, number, store),
                  lambda i: mem_reg(b, i), counts)


def _field(f: Found) -> Fetch:
    return Fetch("mem", ops=(Op("reg", reg=f.base),), offset=f.disp, size=8)


def _probeable(b: Binary, insns: tuple[sites.Insn, ...], k: int) -> bool:
    """Whether a probe at ``insns[k]`` sees only what reaches it from just before: no
    branch goes there, and the kernel can probe it."""
    return 0 <= k < len(insns) and insns[k].address not in sites.branch_targets(insns) \
        and b.isa.handling_at(insns, k) != sites.REFUSED


def _increment(insns: tuple[sites.Insn, ...], n: int) -> tuple[Fetch, int] | None:
    """What the call at ``insns[n]`` was passed in x0 to add, as read after it: the
    constant moved there, or the register copied (sign 1) or negated (-1) there, which
    nothing writes after (not a register the helper may write); None when neither."""
    targets = sites.branch_targets(insns)
    if insns[n].address in targets:
        return None  # the call reached from elsewhere too
    for k in range(n - 1, max(-1, n - 24), -1):
        i = insns[k]
        if "x0" in i.writes:
            ops = i.operands
            # mov: capstone's alias of movz and movn, its operand the whole value
            if i.mnemonic == "mov" and len(ops) == 2 and ops[1][0] == "imm":
                wide = _word(i.raw) >> 31
                value = int(ops[1][1]) & (_MASK if wide else 2**32 - 1)
                return Fetch("const", offset=value), 1
            if i.mnemonic in ("mov", "neg") and len(ops) == 2 and ops[1][0] == "reg" and \
                    _word(i.raw) >> 31:
                src = str(ops[1][1])
                if src in _SCRATCH or not src.startswith("x") or \
                        any(src in x.writes for x in insns[k + 1:n]):
                    return None
                return Fetch("reg", size=8, regs=(src,)), -1 if i.mnemonic == "neg" else 1
            return None
        if i.kind != sites.NEXT or i.address in targets:
            return None  # the start of its block: x0 set on another path
    return None


def place(b: Binary, f: Found) -> tuple[Placed | None, guards.Before | str]:
    """Where to probe update ``f``, what to read there, why and the site's tag; or
    None and why there is none. With a site, a ``guards.Before`` when the metric is read
    there through another register than ``f.base`` (``_looped``)."""
    insns, n = f.insns, f.n
    i = insns[n]
    what = f"the {f.kind}'s {'count' if f.kind == 'histogram' else 'value'}"
    st = _store(i)
    if st is not None:
        src = st[0]
        now = (_field(f),) if f.number == "f64" else ()
        if src == "xzr" and b.isa.handling_at(insns, n) != sites.REFUSED:
            new = Fetch("const", offset=0)
            return (i.address, (_GONE, new, _field(f), *((new,) if now else ())),
                    f"at the store of 0 to {what} at {i.address:#x}",
                    make_tag(f.kind, f.op, store=True)), ""
        if src.startswith("x") and b.isa.handling_at(insns, n) != sites.REFUSED:
            new = Fetch("reg", size=8, regs=(src,))
            return (i.address, (_GONE, new, _field(f), *((new,) if now else ())),
                    f"at the store of the new value to {what} at {i.address:#x}, "
                    f"from {src}", make_tag(f.kind, f.op, store=True)), ""
        if not _probeable(b, insns, n + 1):
            return None, "no instruction after its store to probe"
        return (insns[n + 1].address, (_GONE, _field(f), _GONE, *now),
                f"after the store of the new value to {what} at {i.address:#x} (from "
                f"{src}: no v register in a uprobe's pt_regs), read back from memory",
                make_tag(f.kind, f.op, store=True)), ""
    if i.mnemonic in _EXCLUSIVE_STORES:
        got = arm64_loops.loop(insns, n)
        if got is None:
            return None, "an exclusive loop noop does not know"
        return _looped(b, f, got, what)
    a = atomic(b, i)
    if a is None:
        return None, "not an update noop reads on arm64"
    name = f"the call of {b.function_at(i.target or 0)}" if a.call else f"the {i.mnemonic}"
    if a.kind == "ldadd":
        return _added(b, f, a, name, what)
    cmp, bne = (insns[n + 1], insns[n + 2]) if n + 2 < len(insns) else (None, None)
    if cmp is None or bne is None or cmp.mnemonic != "cmp" or \
            cmp.operands[:1] != (("reg", a.s),) or bne.mnemonic != "b.ne" or \
            bne.target is None or bne.target > i.address:
        return None, f"no loop back after {name} (cmp {a.s}, then b.ne)"
    if not _probeable(b, insns, n + 3):
        return None, "no instruction after its loop to probe"
    return (insns[n + 3].address, (
        Fetch("unavailable", why="computed at run time: the increment is new - old"),
        Fetch("reg", size=8, regs=(a.t,)), Fetch("reg", size=8, regs=(a.s,)), _field(f)),
        f"after the loop of {name} on {what} at {i.address:#x}, reached once per swap "
        f"that took effect: old bits in {a.s}, new in {a.t}", make_tag(f.kind, f.op)), ""


def _added(b: Binary, f: Found, a: Atomic, name: str, what: str) -> tuple[Placed | None, str]:
    """An add's site: after it where the old value, the amount added and the field's
    address are all in registers there (a helper's call, its amount from the code
    before it; an LSE ``ldadd`` that overwrote none of them): exact. Else at the LSE
    instruction itself, the value the field's now read from memory plus the amount
    (what another thread adds at that moment is in it too)."""
    insns, n = f.insns, f.n
    i = insns[n]
    after = _probeable(b, insns, n + 1) and (a.call or a.t not in ("xzr", a.n, a.s))
    histogram = f.kind == "histogram"
    observed = _OBSERVED
    if after:
        site = insns[n + 1].address
        before = Fetch("reg", size=8, regs=(a.t,))
        if histogram:
            return (site, (before, observed), f"after {name} on {what} at "
                    f"{i.address:#x}: the count before it in {a.t}",
                    make_tag("histogram", f.op)), ""
        got = _increment(insns, n) if a.call else (Fetch("reg", size=8, regs=(a.s,)), 1)
        if got is None:
            return (site, (Fetch("unavailable", why="the increment passed in x0 is not "
                                 "kept"), _field(f), before),
                    f"after {name} on {what} at {i.address:#x}: the value before it in "
                    f"{a.t}, the value read back from memory", make_tag(f.kind, f.op)), ""
        delta, sign = got
        if delta.kind == "const":  # a signed offset: -1 is x0 + (-1)
            step = delta.offset - 2**64 if delta.offset >= 2**63 else delta.offset
            value = Fetch("reg", size=8, regs=(a.t,), offset=step)
            told = f"the constant {delta.offset:#x}"
        else:
            value = Fetch("reg", size=8, regs=(a.t, delta.regs[0]),
                          formula="-" if sign < 0 else "+")
            told = f"{'minus ' if sign < 0 else ''}{delta.regs[0]}"
        return (site, (delta, value, before),
                f"after {name} on {what} at {i.address:#x}: the value before it in "
                f"{a.t}, the increment {told}", make_tag(f.kind, f.op, sign)), ""
    if a.call or b.isa.handling_at(insns, n) == sites.REFUSED:
        return None, f"no instruction after {name} to probe"
    field = _field(f)
    if histogram:
        return (i.address, (field, observed), f"at the {i.mnemonic} on {what} at "
                f"{i.address:#x} (after it {a.t} no longer holds the count, or the "
                "address): the count before it read from memory",
                make_tag("histogram", f.op)), ""
    return (i.address, (Fetch("reg", size=8, regs=(a.s,)),
                        Fetch("sum", ops=field.ops, offset=field.offset, regs=(a.s,)), field),
            f"at the {i.mnemonic} on {what} at {i.address:#x} (after it {a.t} no longer "
            f"holds the value before, the amount or the address): the value before it read "
            f"from memory, the increment {a.s}", make_tag(f.kind, f.op)), ""


def _looped(b: Binary, f: Found, loop: arm64_loops.Loop, what: str
            ) -> tuple[Placed | None, guards.Before | str]:
    """An exclusive loop's site (``arm64_loops``): where the loop is left once its store
    succeeded (or, where another loop follows at once, where the last of them is left:
    ``chained``), the new value in a register there, the increment the add's immediate
    or register or the float loop's constant. Where a later loop wrote the field's
    address register, the metric is read through the register it was made from
    (a ``guards.Before`` saying which, for ``probes``)."""
    insns, n = f.insns, f.n
    i = insns[n]
    seen = arm64_loops.chained(insns, loop)
    if seen is None or b.isa.handling_at(insns, seen.site) == sites.REFUSED:
        return None, f"no instruction after the exclusive loop on {what} at " \
            f"{i.address:#x} to probe"
    where = insns[seen.site]
    moved: guards.Before | str = ""
    if not seen.based:
        made = arm64_loops.rebased(insns, loop, seen.site)
        if made is None:
            return None, f"the exclusive loops after the one on {what} at {i.address:#x} " \
                f"write its address, and it is not kept elsewhere"
        at = guards.Reg(made[0], add=made[1])
        moved = guards.Before(where, ((f.base, at),), 0, 0, f"the address as {at}")
        f = replace(f, base=made[0], disp=f.disp + made[1])
    site = where.address
    alone = seen.site == loop.site
    old = loop.old if alone else ""
    kind = f"{'cas' if loop.kind == arm64_loops.CAS else 'add'} loop"
    at_end = "" if alone else f", at the end of the exclusive loops after it at {site:#x}"
    place = f"after the exclusive {kind} on {what} at {i.address:#x}{at_end}"
    if seen.new:
        value = Fetch("reg", size=8, regs=(seen.new,), offset=-seen.later)
        told = f"the value after it in {seen.new}" + (
            f" less the {seen.later:+d} added after it (another thread's add between "
            "them counted in it)" if seen.later else "")
    else:
        value = _field(f)
        told = "the value read back from memory (what another thread adds by then " \
            "counted in it)"
    if loop.kind == arm64_loops.CAS:
        delta = Fetch("const", offset=loop.bits) if loop.bits is not None else Fetch(
            "unavailable", why="computed at run time: the increment is new - old")
        before = Fetch("reg", size=8, regs=(old,)) if old else _GONE
        return (site, (delta, value, before, value),
                f"{place}: {told}" + (f", the old bits in {old}" if old else "") +
                (", the increment a constant of the loop" if loop.bits is not None else ""),
                make_tag(f.kind, f.op)), moved
    if loop.imm is not None:
        delta, step, sign = Fetch("const", offset=loop.imm & _MASK), loop.imm, 1
        was = Fetch("reg", size=8, regs=(old,)) if old else Fetch(
            "reg", size=8, regs=(seen.new,), offset=-seen.later - step) \
            if seen.new else _GONE
        amount = f"the constant {loop.imm}"
    else:
        delta, sign = Fetch("reg", size=8, regs=(loop.amount,)), loop.sign
        was = Fetch("reg", size=8, regs=(old,)) if old else Fetch(
            "reg", size=8, regs=(seen.new, loop.amount), formula="-" if sign > 0 else "+") \
            if seen.new and not seen.later else _GONE
        amount = f"{'minus ' if sign < 0 else ''}{loop.amount}"
    if f.kind == "histogram":
        return (site, (was, _OBSERVED), f"{place}: the count before it" +
                (f" in {old}" if old else ""), make_tag("histogram", f.op)), moved
    return (site, (delta, value, was), f"{place}: {told}, the increment {amount}",
            make_tag(f.kind, f.op, sign)), moved



def _sum_swap(b: Binary, f: Found, site: int) -> tuple[int, int, Atomic] | None:
    """The compare-and-swap loop that adds the observed value to the shard's sum in the
    histogram update ``f``'s ``HistogramCore::observe``, when a probe after it pairs
    with one at ``site`` (the count's): (the swap's index, the index of the instruction
    after its loop, the swap). The stack pointer is the same at both: nothing between
    them writes it, and the only calls are outline helpers, which keep it."""
    insns = f.insns
    swaps = [m for m in indices(insns, list(f.around))
             if (a := atomic(b, insns[m])) is not None and a.kind == "cas"]
    k = sites.index_at(insns, site)
    if len(swaps) != 1 or k is None or not f.n < swaps[0] < len(insns) - 3:
        return None
    m = swaps[0]
    a = atomic(b, insns[m])
    cmp, bne = insns[m + 1], insns[m + 2]
    if a is None or cmp.mnemonic != "cmp" or cmp.operands[:1] != (("reg", a.s),) or \
            bne.mnemonic != "b.ne" or bne.target is None or bne.target > insns[m].address \
            or not _probeable(b, insns, m + 3):
        return None
    if any("sp" in i.writes or (i.kind == sites.CALL and helper(b, i) is None)
           for i in insns[k:m + 3]):
        return None
    return m, m + 3, a


def paired(b: Binary, f: Found, at: sites.Insn, fetches: tuple[Fetch, ...], tag: str,
           why: str) -> list[tuple[int, int, Site]] | None:
    """The histogram update ``f``'s two sites, as ``places.paired`` on x86-64: at the
    count (``at``), which keeps what it reads for the thread, and after the loop of the
    sum's compare-and-swap, reached once per swap that took effect, where the observed
    value is new - old (the helper's x1 and x0, or an inlined ``cas``'s Xt and Xs); None
    when there is no such loop to pair with."""
    got = _sum_swap(b, f, at.address)
    if got is None:
        return None
    m, k, a = got
    swap, after = f.insns[m], f.insns[k]
    name = b.functions.display_name(f.function)
    kept, ends = paired_with_swap(fetches, a.t, a.s)
    where = f"the call of {b.function_at(swap.target or 0)}" if a.call else \
        f"the {swap.mnemonic}"
    count = sites.index_at(f.insns, at.address)
    assert count is not None  # a site is one of the function's instructions
    return [
        (at.address, -f.insns[f.n].address, Site(
            name, at.address, b.elf.file_offset(at.address), why + "; kept for the sum's "
            f"swap at {swap.address:#x}", kept, tag=tag,
            handling=b.isa.handling_at(f.insns, count), role="call")),
        (after.address, -swap.address, Site(
            name, after.address, b.elf.file_offset(after.address),
            f"after the loop of {where} on the histogram's sum at {swap.address:#x}, "
            f"reached once per swap that took effect: the observed value new - old "
            f"({a.s}, {a.t}), the count as the count site read it", ends, tag=tag,
            handling=b.isa.handling_at(f.insns, k), role="return"))]
