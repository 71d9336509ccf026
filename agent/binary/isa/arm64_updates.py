"""AArch64's atomic updates of a 64-bit word, each found where a probe sees it once it
succeeded: what Go's compiler makes of ``atomic.AddUint64``, ``CompareAndSwapUint64``
and ``StoreUint64`` (``cmd/compile/internal/ssagen``, ``ARM64`` lowering rules).

Without a GOARM64 level of v8.1 or more the compiler emits each read-modify-write
twice, chosen at run time by ``internal/cpu.ARM64.HasATOMICS``: an instruction of the
Large System Extensions (``ldaddal``, ``casal``) and an exclusive load/store loop
(``ldaxr`` ... ``stlxr``, ``cbnz`` back), the two paths joining after. A uprobe inside
the loop would clear the exclusive monitor at each trap and the loop would never end,
and one on the LSE instruction sees one path only: the site is where the paths join,
reached once per update that took effect.

- add: ``ldaddal Xs, Xt, [Xn]; add Xt, Xt, Xs; b join`` beside ``ldaxr Xt, [Xn];
  add Xt, Xt, Xs; stlxr Ws, Xt, [Xn]; cbnz Ws, loop``; at the join Xt holds the new
  value and Xs the amount added;
- compare-and-swap: ``mov Xc, Xo; casal Xc, Xn', [Xn]; cmp Xc, Xo; cset Xr, eq;
  b join`` beside ``ldaxr Xc, [Xn]; cmp Xc, Xo; b.ne fail; stlxr Ws, Xn', [Xn];
  cbnz Ws, loop; fail: cset Xr, eq``, and at the join ``tbz wR, #0, retry``: the
  instruction after it runs once per swap that took effect, Xo the old value and Xn'
  the new;
- store: ``stlr Xv, [Xn]`` (one instruction, one path): the instruction after it
  while it is reached from the store alone, else the store itself.

With v8.1 or more the LSE instruction is alone and its site follows it the same way.
Where an add's two paths go on apart (inlined into a caller, each path continues to
its own code) each has a site of its own: the loop's end and the LSE path's ``b``.
``origin`` says what the address register holds: a register at the function's entry
plus a constant, on every path there.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from agent.binary.isa.arm64 import _word
from agent.binary.sites import CALL, JUMP, RETURN, STOP, Insn

ADD, CAS, STORE = "add", "cas", "store"
# the site after an instruction (its index) that no branch but these (indexes) jumps to
After = Callable[[int, set[int]], int | None]
# the LSE paths' ``b`` into a join, each checked by a test of its index
Twins = Callable[[int, Callable[[int], bool]], set[int] | None]


@dataclass(frozen=True, slots=True)
class Update:
    """One atomic update of the 8-byte word at the register ``base``, seen once per
    update that took effect at ``site``, where ``new`` holds the word's new value,
    ``old`` its old one (compare-and-swap) and ``delta`` the amount added (add).
    ``insn``: the atomic instruction (the LSE one where there is one)."""

    op: str
    insn: Insn
    site: int
    base: str
    new: str
    old: str = ""
    delta: str = ""


def _regs(i: Insn) -> list[str]:
    return [o[1] for o in i.operands if o[0] == "reg"]


def _two(i: Insn) -> tuple[str, str]:
    """Its first two register operands ("" for each it lacks)."""
    regs = [*_regs(i), "", ""]
    return regs[0], regs[1]


def _mem(i: Insn) -> str | None:
    """The base register of a ``[Xn]`` operand with no index and no offset."""
    mems = [o for o in i.operands if o[0] == "mem"]
    if len(mems) != 1 or mems[0][2] or mems[0][3]:
        return None
    return str(mems[0][1])


def _wide(i: Insn) -> bool:
    """A 64-bit access (size bits 31:30 of the atomic, exclusive or release store)."""
    return _word(i.raw) >> 30 == 3


def _is_add(i: Insn, t: str, s: str) -> bool:
    return i.mnemonic == "add" and _regs(i) in ([t, t, s], [t, s, t]) and \
        not any(o[0] == "imm" for o in i.operands)


def _flow(insns: tuple[Insn, ...]) -> tuple[dict[int, int], dict[int, list[int]]]:
    """Each instruction's index by address, and the indexes of the branches to each
    address."""
    at = {i.address: n for n, i in enumerate(insns)}
    into: dict[int, list[int]] = {}
    for n, i in enumerate(insns):
        if i.target is not None and i.target in at:
            into.setdefault(i.target, []).append(n)
    return at, into


def updates(insns: tuple[Insn, ...]) -> tuple[Update, ...]:
    """The atomic updates of ``insns`` (one function's code), by site."""
    at, into = _flow(insns)
    found: dict[int, Update] = {}
    jumping: list[int] = []  # LSE adds whose path jumps on (_lse_paths_apart)

    def after(n: int, sources: set[int]) -> int | None:
        """The address after ``insns[n]`` when nothing but ``sources`` (indexes of
        branches) also jumps there."""
        if n + 1 >= len(insns):
            return None
        nxt = insns[n + 1].address
        return nxt if set(into.get(nxt, ())) <= sources else None

    def lse_twins(join: int, make: Callable[[int], bool]) -> set[int] | None:
        """The ``b join`` of each LSE path into ``join``, each checked by ``make``
        (the LSE path ending there); None when any other branch jumps there."""
        out = set()
        for src in into.get(join, ()):
            if insns[src].kind != JUMP or not make(src):
                return None
            out.add(src)
        return out

    for n, i in enumerate(insns):
        m = i.mnemonic
        if m == "stlxr" and n >= 3 and n + 2 < len(insns) and _wide(i):
            _loop(insns, n, at, found, after, lse_twins)
        elif m in ("ldaddal", "ldadd", "ldadda", "ldaddl") and _wide(i) and n + 2 < len(insns):
            s, t = _two(i)
            base = _mem(i)
            if base and _is_add(insns[n + 1], t, s) and insns[n + 2].kind == JUMP:
                jumping.append(n)
            elif base and _is_add(insns[n + 1], t, s):
                site = after(n + 1, set())  # LSE alone (GOARM64 v8.1 or more)
                if site is not None:
                    found.setdefault(site, Update(ADD, i, site, base, t, delta=s))
        elif m in ("casal", "cas", "casa", "casl") and _wide(i) and n + 3 < len(insns):
            c, new = _two(i)
            base = _mem(i)
            old = _cas_compared(insns, n, c)
            if base and old and insns[n + 3].kind != JUMP:  # LSE alone: cset, then test
                site = _swapped(insns, n + 3, after)
                if site is not None:
                    found.setdefault(site, Update(CAS, i, site, base, new, old=old))
        elif m == "stlr" and _wide(i):
            regs, base = _regs(i), _mem(i)
            if base and regs:  # after it (a probe sees the registers the store left)
                nxt = after(n, set())
                site = nxt if nxt is not None else i.address
                found.setdefault(site, Update(STORE, i, site, base, regs[0]))
    _lse_paths_apart(insns, jumping, found, after)
    return tuple(found[a] for a in sorted(found))


def _lse_paths_apart(insns: tuple[Insn, ...], jumping: list[int], found: dict[int, Update],
                     after: After) -> None:
    """An add whose LSE path (``jumping``: the indexes of LSE adds followed by their
    ``add`` and a jump) jumps elsewhere than where its exclusive loop ends (an inlined
    copy: each path goes on to the caller's code its own way): the loop's end is its
    site for that path, and the LSE path's ``b`` (reached from its add alone) the site
    for the other; one of the two sees each update."""
    loops = {(u.base, u.new, u.delta) for u in found.values()
             if u.op == ADD and u.insn.mnemonic == "stlxr"}
    for n in jumping:
        s, t = _two(insns[n])
        base = _mem(insns[n])
        if (base, t, s) not in loops or insns[n + 2].target in found:
            continue
        site = after(n + 1, set())
        if site is not None:
            found.setdefault(site, Update(ADD, insns[n], site, str(base), t, delta=s))


def _cas_compared(insns: tuple[Insn, ...], n: int, c: str) -> str | None:
    """The old value ``casal c, new, [base]`` at ``insns[n]`` is checked against:
    ``mov c, old`` before it, ``cmp c, old; cset r, eq`` after."""
    if n < 1 or n + 2 >= len(insns):
        return None
    mov, cmp, cset = insns[n - 1], insns[n + 1], insns[n + 2]
    if mov.mnemonic != "mov" or _regs(mov)[:1] != [c] or len(_regs(mov)) != 2:
        return None
    old = _regs(mov)[1]
    if cmp.mnemonic != "cmp" or _regs(cmp) != [c, old] or cset.mnemonic != "cset":
        return None
    return old


def _swapped(insns: tuple[Insn, ...], k: int, after: After) -> int | None:
    """The site after the swap's test at ``insns[k]`` (``tbz wR, #0, retry`` or
    ``cbz wR, retry``, R the ``cset``'s register before it): the fall-through, reached
    once per swap that took effect."""
    test, cset = insns[k], insns[k - 1]
    if cset.mnemonic != "cset" or test.mnemonic not in ("tbz", "cbz") or \
            _regs(test)[:1] != _regs(cset)[:1]:
        return None
    if test.mnemonic == "tbz" and [o for o in test.operands if o[0] == "imm"][:1] != \
            [("imm", 0)]:
        return None
    return after(k, set())


def _loop(insns: tuple[Insn, ...], n: int, at: dict[int, int], found: dict[int, Update],
          after: After, lse_twins: Twins) -> None:
    """The exclusive loop whose store is ``insns[n]``, with its LSE twin when there
    is one: an add's or a compare-and-swap's site."""
    store = insns[n]
    regs, base = _regs(store), _mem(store)
    loop = insns[n + 1]
    if base is None or len(regs) != 2 or loop.mnemonic != "cbnz" or \
            _regs(loop)[:1] != [regs[0]] or loop.target not in at:
        return
    head = at[loop.target]
    load = insns[head]
    if load.mnemonic != "ldaxr" or _mem(load) != base or not _wide(load):
        return
    value = regs[1]
    if n - head == 2 and _is_add(insns[head + 1], value, _other(insns[head + 1], value)):
        delta = _other(insns[head + 1], value)
        join = insns[n + 2].address

        def lse_add(src: int) -> bool:
            if src < 2:
                return False
            lse, add = insns[src - 2], insns[src - 1]
            s, t = _two(lse)
            return lse.mnemonic.startswith("ldadd") and _mem(lse) == base and \
                (t, s) == (value, delta) and _is_add(add, t, s)

        twins = lse_twins(join, lse_add)
        if twins is not None:
            first = insns[min(twins) - 2] if twins else store
            found.setdefault(join, Update(ADD, first, join, base, value, delta=delta))
        return
    # compare-and-swap: ldaxr c; cmp c, old; b.ne fail; stlxr w, new, [base]
    if n - head != 3:
        return
    c = _regs(load)[0]
    cmp, bne = insns[head + 1], insns[head + 2]
    if cmp.mnemonic != "cmp" or _regs(cmp)[:1] != [c] or len(_regs(cmp)) != 2 or \
            bne.mnemonic != "b.ne" or bne.target != insns[n + 2].address:
        return
    old = _regs(cmp)[1]
    fail = n + 2  # cset r, eq (the loop's end falls into it too)
    join = fail + 1

    def lse_cas(src: int) -> bool:
        if src < 3:
            return False
        cas = insns[src - 3]
        return cas.mnemonic.startswith("cas") and _mem(cas) == base and \
            _regs(cas)[1:2] == [value] and _cas_compared(insns, src - 3, c) == old

    if insns[fail].mnemonic != "cset" or join >= len(insns):
        return
    twins = lse_twins(insns[join].address, lse_cas)
    if twins is None:
        return
    site = _swapped(insns, join, after)
    if site is not None:
        first = insns[min(twins) - 3] if twins else store
        found.setdefault(site, Update(CAS, first, site, base, value, old=old))


def _other(add: Insn, value: str) -> str:
    """The register ``add value, value, X`` (or ``add value, X, value``) adds."""
    regs = _regs(add)
    return regs[2] if len(regs) == 3 and regs[1] == value else regs[1] if len(regs) == 3 \
        else ""


# What a call leaves as it was, under Go's ABI (every other register is the caller's to
# save): the stack pointer and g.
_KEPT_BY_CALLS = ("sp", "x28")
_LOADS, _STORES = ("ldr", "ldur"), ("str", "stur", "stp")


def origin(insns: tuple[Insn, ...], n: int, reg: str, rooted: bool = False
           ) -> tuple[str, int] | None:
    """What ``reg`` holds before ``insns[n]``: (a register at the function's entry, a
    constant added), the same on every path from the entry (a loop's way back adding
    nothing); None when a path computes it otherwise (a load from anywhere but the
    function's own stack, arithmetic of two, a call's result). A register spilled to a
    stack slot and loaded back (``str x0, [sp, #24]`` ... ``ldr x1, [sp, #24]``) is
    followed through the slot, named by its offset from the stack pointer at the entry
    (a call leaves the caller's frame as it was). ``rooted``: a value computed
    otherwise is a root of its own, named ``=ADDRESS`` by the instruction that made it
    (what an inlined copy's receiver is: (its root, the field's offset))."""
    _at, into = _flow(insns)
    busy = object()
    memo: dict[tuple[int, str], object] = {}

    def before(k: int, r: str, depth: int) -> object:
        if k == 0:
            return (r, 0) if not r.startswith("@") else None  # the entry
        key = (k, r)
        if key in memo:
            return memo[key]
        if depth > 400:
            return None
        memo[key] = busy
        ways = [into.get(insns[k].address, [])]
        if insns[k - 1].kind not in (JUMP, RETURN, STOP):
            ways.append([k - 1])
        got = {through(s, r, depth + 1) for way in ways for s in way} - {busy}
        if not got:  # reached only around a loop being followed: what its way in says
            del memo[key]
            return busy
        memo[key] = out = got.pop() if len(got) == 1 else None
        return out

    def slot(k: int, i: Insn, depth: int) -> int | None:
        """The stack slot ``i`` (at ``k``) addresses: its offset from the entry's stack
        pointer, None when its base is not the stack pointer plus a constant."""
        mem = next((o for o in i.operands if o[0] == "mem"), None)
        if mem is None or mem[2]:
            return None
        base = before(k, str(mem[1]), depth)
        if not isinstance(base, tuple) or base[0] != "sp":
            return None
        post = str(mem[1]) in i.writes and any(o[0] == "imm" for o in i.operands)
        return int(base[1]) + (0 if post else int(mem[3]))

    def through(k: int, r: str, depth: int) -> object:
        """``r`` after ``insns[k]``."""
        i = insns[k]

        def made() -> tuple[str, int] | None:
            return (f"={i.address:#x}", 0) if rooted else None
        if r.startswith("@"):  # a stack slot
            at = slot(k, i, depth) if i.stores else None
            if at is not None:
                regs = _regs(i)
                stored = (regs[:2] if i.mnemonic == "stp" else regs[:1]) \
                    if i.mnemonic in _STORES else []
                for j, src in enumerate(stored):
                    if r == f"@{at + 8 * j}" and src.startswith("x"):
                        return before(k, src, depth)
                wide = 8 if stored and all(x.startswith("x") for x in stored) else 16
                if at < int(r[1:]) + 8 and int(r[1:]) < at + wide * max(1, len(stored)):
                    return None  # written otherwise, or in part
            if i.kind == CALL:  # the callee's frame is below the stack pointer
                sp = before(k, "sp", depth)
                if not isinstance(sp, tuple) or sp[0] != "sp" or int(r[1:]) < sp[1]:
                    return None
            return before(k, r, depth)
        if i.kind == CALL and r not in _KEPT_BY_CALLS:
            return made()
        if r not in i.writes:
            return before(k, r, depth)
        regs = _regs(i)
        imm = [o[1] for o in i.operands if o[0] == "imm"]
        mem = next((o for o in i.operands if o[0] == "mem"), None)
        if mem is not None and mem[1] == r and r not in regs:  # [r, #d]! or [r], #d
            base = before(k, r, depth)
            step = int(imm[0] if imm else mem[3])
            return (base[0], base[1] + step) if isinstance(base, tuple) else base
        if i.mnemonic in _LOADS and regs[:1] == [r] and r.startswith("x"):
            at = slot(k, i, depth)
            return before(k, f"@{at}", depth) if at is not None else made()
        if i.mnemonic in ("add", "sub") and len(regs) == 2 and regs[0] == r and len(imm) == 1 \
                and not _word(i.raw) >> 22 & 1:  # no shifted immediate
            value = before(k, regs[1], depth)
            if isinstance(value, tuple):
                return (value[0], value[1] + (imm[0] if i.mnemonic == "add" else -imm[0]))
            return value
        if i.mnemonic == "mov" and len(regs) == 2 and regs[0] == r and not imm:
            return before(k, regs[1], depth)
        return made()

    got = before(n, reg, 0)
    return got if isinstance(got, tuple) else None
