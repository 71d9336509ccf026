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
  the observed value, in a v register, is not read.

An update in another form (the LSE instruction or a loop inlined, in a build for a
CPU that has the extensions; a local histogram's flush) is said once, not read.
"""

from __future__ import annotations

import re

from agent.binary import sites
from agent.binary.isa.arm64 import _word
from agent.plan.binary import Binary
from agent.plan.fetches import Fetch, Op
from agent.presets.rust_prometheus.copies import Found, Reader
from agent.presets.rust_prometheus.facts import make_tag
from agent.presets.rust_prometheus.places import Placed

_HELPER = re.compile(r"__aarch64_(ldadd|cas)8_(relax|acq|rel|acq_rel)$")
# What a helper may write: its result and the scratch registers of the contract.
_SCRATCH = frozenset({"x0", "x15", "x16", "x17"})
_MASK = 2**64 - 1
_GONE = Fetch("unavailable", why="not held anywhere at this site")


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
    return helper(b, i) == ("cas" if number == "f64" else "ldadd")


def mem_reg(b: Binary, i: sites.Insn) -> tuple[str, int] | None:
    """(register, offset) of the field an update instruction writes: a helper's
    address argument (x1 for an add, x2 for a compare-and-swap), a store's base."""
    kind = helper(b, i)
    if kind is not None:
        return ("x1" if kind == "ldadd" else "x2"), 0
    st = _store(i)
    return (st[1], st[2]) if st is not None else None


def reader(b: Binary) -> Reader:
    """arm64's updates (``copies.updates``): stores and helper calls, the count's add a
    call of the add helper."""
    return Reader(lambda insns, n, number, store: is_update(b, insns, n, number, store),
                  lambda i: mem_reg(b, i), lambda insns, n: helper(b, insns[n]) == "ldadd")


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
    for k in range(n - 1, max(-1, n - 24), -1):
        i = insns[k]
        if "x0" in i.writes:
            ops = i.operands
            if i.mnemonic in ("mov", "movz", "movn") and len(ops) == 2 and ops[1][0] == "imm":
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


def place(b: Binary, f: Found) -> tuple[Placed | None, str]:
    """Where to probe update ``f``, what to read there, why and the site's tag; or
    None and why there is none."""
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
    kind = helper(b, i)
    name = b.function_at(i.target or 0) or "its helper"
    if kind == "ldadd":
        if not _probeable(b, insns, n + 1):
            return None, "no instruction after its call to probe"
        site = insns[n + 1].address
        before = Fetch("reg", size=8, regs=("x0",))
        if f.kind == "histogram":
            return (site, (before, Fetch("unavailable", why="v is passed in a v register, "
                                         "which a uprobe's pt_regs does not hold")),
                    f"after the call of {name} on {what} at {i.address:#x}: the count "
                    "before it in x0", make_tag("histogram", f.op)), ""
        got = _increment(insns, n)
        if got is None:
            return (site, (Fetch("unavailable", why="the increment passed in x0 is not "
                                 "kept"), _field(f), before),
                    f"after the call of {name} on {what} at {i.address:#x}: the value "
                    "before it in x0, the value read back from memory",
                    make_tag(f.kind, f.op)), ""
        delta, sign = got
        if delta.kind == "const":  # a signed offset: -1 is x0 + (-1)
            step = delta.offset - 2**64 if delta.offset >= 2**63 else delta.offset
            value = Fetch("reg", size=8, regs=("x0",), offset=step)
            told = f"the constant {delta.offset:#x}"
        else:
            value = Fetch("reg", size=8, regs=("x0", delta.regs[0]),
                          formula="-" if sign < 0 else "+")
            told = f"{'minus ' if sign < 0 else ''}{delta.regs[0]}"
        return (site, (delta, value, before),
                f"after the call of {name} on {what} at {i.address:#x}: the value before "
                f"it in x0, the increment {told}", make_tag(f.kind, f.op, sign)), ""
    if kind == "cas":
        cmp, bne = (insns[n + 1], insns[n + 2]) if n + 2 < len(insns) else (None, None)
        if cmp is None or bne is None or cmp.mnemonic != "cmp" or \
                cmp.operands[:1] != (("reg", "x0"),) or bne.mnemonic != "b.ne" or \
                bne.target is None or bne.target > i.address:
            return None, f"no loop back after its call of {name} (cmp x0, then b.ne)"
        if not _probeable(b, insns, n + 3):
            return None, "no instruction after its loop to probe"
        return (insns[n + 3].address, (
            Fetch("unavailable", why="computed at run time: the increment is new - old"),
            Fetch("reg", size=8, regs=("x1",)), Fetch("reg", size=8, regs=("x0",)),
            _field(f)),
            f"after the loop of {name} on {what} at {i.address:#x}, reached once per "
            "swap that took effect: old bits in x0, new in x1", make_tag(f.kind, f.op)), ""
    return None, "not an update noop reads on arm64"
