"""An 8-byte read-modify-write inlined as an exclusive load/store loop, as a compiler
emits one for an arm64 CPU it may not assume has the Large System Extensions and
without outline atomics (LLVM's ``-outline-atomics``): where a probe sees each update
that took effect once, and which registers hold the update there.

A probe inside the loop would clear the exclusive monitor at each trap (the store
fails, the loop never ends) and the kernel refuses the exclusive instructions
themselves, so the site is where the loop is left on success:

- an add: ``ldxr Xt, [Xn]; add|sub Xv, Xt, #imm|Xm; stxr Ws, Xv, [Xn]; cbnz Ws, loop``:
  after the ``cbnz`` Xv holds the new value and the amount is the immediate or Xm;
- a compare-and-swap loop (a float's add: the new bits computed from the expected old
  ones): ``ldxr Xc, [Xn]; cmp Xc, Xe; b.ne fail; ...; stxr Ws, Xv, [Xn]``, then
  ``cbnz Ws, loop`` or ``cbz Ws, done; b loop``: at the instruction after the
  ``cbnz``, or at ``done``, Xv holds the new bits and Xc or Xe the old where the code
  after the ``cmp`` left one of them; the increment is a constant when the new value is
  ``fadd``/``fsub`` of the old and a D register an ``fmov Dk, #imm`` set before the
  loop on the only way into it.

``cbnz`` and ``cbz`` are simulated in the trap, and the site is reached only from the
loop's end, so each hit is one update that took effect.
"""

from __future__ import annotations

from dataclasses import dataclass

from agent.binary import sites
from agent.binary.isa.arm64 import _exclusive_load, _word, exclusive
from agent.binary.isa.arm64_updates import _mem, _regs
from agent.binary.sites import CALL, JUMP, RETURN, STOP, Insn

ADD, CAS = "ldadd", "cas"
_WINDOW = 16  # instructions from an exclusive load to its store, at most


@dataclass(frozen=True, slots=True)
class Loop:
    """The exclusive loop whose store is ``insns[store]``: an ``ADD`` or a ``CAS`` loop
    of the 8 bytes at the register ``base``; ``site``: the index of the instruction
    reached once per update that took effect (it may be another loop's exclusive load,
    which no probe can take: ``chained``); ``new``: the register holding the new value
    there; ``old``: one holding the old value there ("" when none does). An add's
    amount: ``imm`` (signed), or the register ``amount`` times ``sign``; a
    compare-and-swap's constant increment, as f64 bits (None when the code computes
    it)."""

    kind: str
    head: int
    store: int
    site: int
    base: str
    new: str
    old: str = ""
    imm: int | None = None
    amount: str = ""
    sign: int = 1
    bits: int | None = None


def _single(w: int) -> bool:
    """An exclusive access of one 8-byte register (size 3, not a pair: o1, bit 21)."""
    return exclusive(w) and w >> 30 == 3 and not w & (1 << 21)


def _written(insns: tuple[Insn, ...], lo: int, hi: int) -> set[str]:
    return {r for i in insns[lo:hi] for r in i.writes}


def loop(insns: tuple[Insn, ...], n: int) -> Loop | None:
    """The loop ``insns[n]`` ends, when it is an exclusive store of one 8-byte register
    closing an add or compare-and-swap loop this module knows."""
    st = insns[n]
    w = _word(st.raw)
    regs, base = _regs(st), _mem(st)
    if not _single(w) or _exclusive_load(w) or len(regs) != 2 or base is None or \
            n + 1 >= len(insns):
        return None
    status, new = regs
    head = next((k for k in range(n - 1, max(-1, n - _WINDOW), -1)
                 if _exclusive_load(_word(insns[k].raw))), None)
    if head is None or not _single(_word(insns[head].raw)) or _mem(insns[head]) != base:
        return None
    body = insns[head + 1:n]
    if any(i.kind in (CALL, JUMP, RETURN, STOP) or (i.target is not None and
           i.target <= st.address) for i in body):
        return None  # straight-line to the store, but for a forward way out (b.ne fail)
    site = _left(insns, n, status, insns[head].address)
    if site is None:
        return None
    t = _regs(insns[head])[0]
    # the registers the way from the store to the site writes (the status alone)
    after = _written(insns, n, n + 2)
    if len(body) == 1:
        return _add(insns, head, n, site, base, new, t, after)
    return _cas(insns, head, n, site, base, new, t, after)


def _left(insns: tuple[Insn, ...], n: int, status: str, head: int) -> int | None:
    """Where the loop ending with the store at ``n`` is left once its store succeeded:
    after ``cbnz Ws, back``, or at the target of ``cbz Ws, done`` followed by ``b back``
    (``back`` at or before the exclusive load at ``head``), when nothing else comes
    there."""
    test = insns[n + 1]
    if _regs(test)[:1] != [status] or test.target is None:
        return None
    if test.mnemonic == "cbnz" and test.target <= head and n + 2 < len(insns):
        k = n + 2
        if insns[k].address in sites.branch_targets(insns) and \
                not _exclusive_load(_word(insns[k].raw)):
            return None
        return k  # another loop's exclusive load: see ``chained``
    if test.mnemonic == "cbz" and test.target > test.address and n + 2 < len(insns):
        back = insns[n + 2]
        if back.kind != JUMP or back.target is None or back.target > head:
            return None
        done = sites.index_at(insns, test.target)
        if done is None or insns[done - 1].kind not in (JUMP, RETURN, STOP) or \
                sites.branches_into(insns, test.target - 1, test.target) != [test.address]:
            return None
        return done
    return None


def _add(insns: tuple[Insn, ...], head: int, n: int, site: int, base: str, new: str,
         t: str, after: set[str]) -> Loop | None:
    """``ldxr t, [base]; add|sub new, t, #imm|Xm; stxr ws, new, [base]``."""
    op = insns[head + 1]
    w = _word(op.raw)
    regs = _regs(op)
    if op.mnemonic not in ("add", "sub") or not w >> 31 or regs[:1] != [new] or \
            len(regs) not in (2, 3):
        return None
    sign = 1 if op.mnemonic == "add" else -1
    imm = [o[1] for o in op.operands if o[0] == "imm"]
    old = t if t != new and t not in after else ""
    if len(regs) == 2 and len(imm) == 1 and regs[1] == t:
        if w >> 22 & 1:
            return None  # a shifted immediate (lsl #12)
        return Loop(ADD, head, n, site, base, new, old, imm=sign * int(imm[0]))
    if len(regs) == 3 and not imm and (w >> 24) & 0x1F == 0x0B and not w >> 21 & 1 and \
            not (w >> 10) & 0x3F:  # shifted register, by nothing
        others = [r for r in regs[1:] if r != t] if t in regs[1:] else []
        if op.mnemonic == "sub" and regs[1] != t:
            return None  # the amount less the old value
        if len(others) != 1 or others[0] in after or others[0] in (new, base):
            return None
        return Loop(ADD, head, n, site, base, new, old, amount=others[0], sign=sign)
    return None


def _cas(insns: tuple[Insn, ...], head: int, n: int, site: int, base: str, new: str,
         c: str, after: set[str]) -> Loop | None:
    """``ldxr c, [base]; cmp c, e; b.ne fail; ... new from e ...; stxr ws, new,
    [base]``: the old bits in c or e where nothing after the ``cmp`` wrote it."""
    cmp, bne = insns[head + 1], insns[head + 2]
    if cmp.mnemonic != "cmp" or len(_regs(cmp)) != 2 or _regs(cmp)[0] != c or \
            bne.mnemonic != "b.ne" or bne.target is None or bne.target <= insns[n].address:
        return None
    e = _regs(cmp)[1]
    written = _written(insns, head + 3, n) | after
    old = next((r for r in (c, e) if r not in written and r != new), "")
    return Loop(CAS, head, n, site, base, new, old,
                bits=_float_step(insns, head, n, e))


def _float_step(insns: tuple[Insn, ...], head: int, n: int, e: str) -> int | None:
    """The f64 bits a compare-and-swap loop adds when the new value is ``fadd``
    (``fsub``) of the old, moved into a D register, and one a ``fmov Dk, #imm`` set
    before the loop: the only instruction writing Dk from there to the store, with
    no branch from elsewhere landing in between."""
    moved = {e}
    for k in range(head + 3, n):
        i = insns[k]
        regs = _regs(i)
        if i.mnemonic == "fmov" and len(regs) == 2 and regs[1] in moved:
            moved.add(regs[0])
        elif i.mnemonic in ("fadd", "fsub") and len(regs) == 3:
            if regs[1] in moved and regs[2] not in moved:
                k_reg, sign = regs[2], 1 if i.mnemonic == "fadd" else -1
            elif regs[2] in moved and i.mnemonic == "fadd":
                k_reg, sign = regs[1], 1
            else:
                return None
            bits = _constant(insns, head, n, k, k_reg)
            return None if bits is None else bits ^ (1 << 63 if sign < 0 else 0)
    return None


def _constant(insns: tuple[Insn, ...], head: int, n: int, k: int, reg: str) -> int | None:
    """The f64 bits ``fmov reg, #imm`` put in ``reg`` for ``insns[k]``: the last writer
    of ``reg`` before it, before the loop's exclusive load at ``head`` on straight-line
    code, no branch landing between it and ``insns[k]`` but the loop's own ways back
    (from its store at ``n`` and the few instructions after)."""
    if reg in _written(insns, head, k):
        return None
    for j in range(head - 1, max(-1, head - 32), -1):
        i = insns[j]
        if i.kind in (CALL, JUMP, RETURN, STOP) or sites.is_branch(i):
            return None
        if reg in i.writes:
            bits = _fmov_imm(_word(i.raw))
            end = insns[min(n + 4, len(insns) - 1)].address
            if bits is None or any(not insns[head].address < a <= end for a in
                                   sites.branches_into(insns, i.address, insns[k].address)):
                return None
            return bits
    return None


def _fmov_imm(w: int) -> int | None:
    """The f64 bits of ``fmov Dd, #imm`` (FMOV scalar, immediate, double): imm8 expanded
    as the architecture's VFPExpandImm does."""
    if w & 0xFFE01FE0 != 0x1E601000:
        return None
    imm8 = (w >> 13) & 0xFF
    b = (imm8 >> 6) & 1
    exponent = ((b ^ 1) << 10) | ((0xFF if b else 0) << 2) | ((imm8 >> 4) & 3)
    return (imm8 >> 7) << 63 | exponent << 52 | (imm8 & 0xF) << 48


@dataclass(frozen=True, slots=True)
class Seen:
    """Where an add loop is seen (``chained``): the index of the site, the register
    holding its field's value there plus ``later`` ("" when none does), and whether its
    address register still holds the field's address there."""

    site: int
    new: str
    later: int
    based: bool


def chained(insns: tuple[Insn, ...], first: Loop) -> Seen | None:
    """Where add loop ``first`` is seen. Where its end falls into another loop's
    exclusive load (the same field added to again right after, ``inc(); inc()``, or an
    Arc's count dropped), at the end of the last loop of the run: with the same field's
    adds of constants, its new value there less what they added (exact when no other
    thread adds between them); after a loop on anything else, the field's value is no
    longer in a register (read back from memory where the address still is). None when
    a loop of the run cannot be followed (its exclusive load reached from elsewhere, its
    end not one this module knows) or the run writes ``first``'s amount register."""
    end, later, new = first.site, 0, first.new
    for _ in range(8):
        if not _exclusive_load(_word(insns[end].raw)):
            kept = _written(insns, first.store, end)
            if first.amount and first.amount in kept:
                return None
            return Seen(end, new, later, first.base not in kept)
        store = next((m for m in range(end + 1, min(len(insns), end + _WINDOW))
                      if exclusive(_word(insns[m].raw))), None)
        if store is None or _exclusive_load(_word(insns[store].raw)) or \
                store + 1 >= len(insns):
            return None
        head = insns[end].address
        if sites.branches_into(insns, head - 1, head) != [insns[store + 1].address]:
            return None  # the loop entered from elsewhere too
        nxt = loop(insns, store)
        site = nxt.site if nxt is not None else \
            _left(insns, store, _regs(insns[store])[0], head)
        if site is None:
            return None
        if new and first.kind == ADD and nxt is not None and nxt.kind == ADD and \
                nxt.imm is not None and nxt.base == first.base and nxt.head == end:
            later, new = later + nxt.imm, nxt.new
        else:
            new = ""
        end = site
    return None


def rebased(insns: tuple[Insn, ...], first: Loop, site: int) -> tuple[str, int] | None:
    """What ``first``'s address register was made from, when a later loop wrote it
    before ``site``: (a register, a constant added) the instruction that set it before
    the loop took (``add Xb, Xr, #imm`` or ``mov Xb, Xr``, on straight-line code into
    the loop), Xr written by nothing from there to ``site``; None otherwise."""
    head = insns[first.head].address
    for j in range(first.head - 1, max(-1, first.head - 16), -1):
        i = insns[j]
        if i.kind in (CALL, JUMP, RETURN, STOP) or sites.is_branch(i):
            return None
        if first.base not in i.writes:
            continue
        regs = _regs(i)
        imm = [o[1] for o in i.operands if o[0] == "imm"]
        if i.mnemonic == "add" and len(regs) == 2 and len(imm) == 1 and \
                not _word(i.raw) >> 22 & 1:
            made = (regs[1], int(imm[0]))
        elif i.mnemonic == "mov" and len(regs) == 2 and not imm:
            made = (regs[1], 0)
        else:
            return None
        end = insns[min(first.store + 4, len(insns) - 1)].address
        if made[0] in (first.base, "sp") or made[0] in _written(insns, j + 1, site) or \
                any(not head <= a <= end for a in
                    sites.branches_into(insns, i.address, head)):
            return None
        return made
    return None
