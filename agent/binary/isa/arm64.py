"""AArch64's instruction set for plans: capstone's decoding into ``Insn``s (fixed
4-byte instructions), how an arm64 kernel handles a uprobe on each, Go's stack check
and a function's exits.

How the kernel handles one (``arch/arm64/kernel/probes/decode-insn.c``,
``arm_probe_decode_insn``, as of 6.1 to 6.18):

- simulated in the trap: B, BL, B.cond, CBZ/CBNZ, TBZ/TBNZ, BR, BLR, RET, ADR, ADRP
  (``EMULATED`` here: one trap);
- refused (the uprobe cannot go on): exception generation (SVC, HVC, SMC, BRK, HLT,
  DCPS), MSR, MRS of DAIF, hints other than NOP, BTI and the pointer-authentication
  signs, other branches (the pointer-authenticated ones, ERET), loads of PC-relative
  literals (``LDR``/``LDRSW``/``PRFM`` literal: a uprobe's simulation of them was wrong
  until 6.12 and 6.1.114, and is removed since), exclusive loads and stores;
- everything else single-stepped out of line (a second trap), atomics of the Large
  System Extensions (LDADD, CAS, SWP) included. NOP is simulated from 6.13 on and
  single-stepped before: counted as single-stepped.

One more place refuses a uprobe though the kernel would take it: between an exclusive
load and its store (a retry loop such as Go's atomics without LSE), where each trap
clears the exclusive monitor, the store fails, and the loop never ends
(``handling_at``).
"""

from __future__ import annotations

import re
import struct
from functools import cache
from typing import TYPE_CHECKING, Any

from agent.binary import sites
from agent.binary.arch import CONDITION
from agent.binary.elf import ElfFile
from agent.binary.isa.refs import LOAD, STORE, TAKE, USE, Reference
from agent.binary.passes import Exit, StackCheck
from agent.binary.sites import BRANCH, CALL, JUMP, NEXT, RETURN, STOP, Insn

if TYPE_CHECKING:
    import capstone

_WORD = struct.Struct("<I")
LS = 0b1001  # the condition "unsigned lower or same" (C clear or Z set)
_MRS_DAIF = 0xD53B4220  # mrs x0, daif: its system-register field
_SYSREG = 0x1FFFE0
# hints a uprobe may single-step: NOP, the pointer-authentication signs (PACIASP and
# kin, XPACLRI), BTI and its variants (CRm:op2 of the HINT encoding, bits 11..5)
_STEPPABLE_HINTS = frozenset((0, 7, 8, 10, 24, 25, 26, 27, 32, 34, 36, 38))
_ATOMIC_SECOND = re.compile(r"(ld(add|clr|eor|set|smax|smin|umax|umin)|swp)(a|al|l)?[bh]?$")
_COMPARES = ("cmp", "cmn", "tst", "ccmp", "ccmn", "fcmp", "fcmpe", "fccmp", "fccmpe")


def _word(raw: bytes) -> int:
    return int(_WORD.unpack_from(raw)[0]) if len(raw) >= 4 else 0


def _kind(w: int) -> str:
    """An instruction word's place in the control flow."""
    if (w & 0x7C000000) == 0x14000000:
        return CALL if w & 0x80000000 else JUMP  # BL, B
    if (w & 0xFF000010) == 0x54000000 or (w & 0x7E000000) in (0x34000000, 0x36000000):
        return BRANCH  # B.cond, CBZ/CBNZ, TBZ/TBNZ
    if (w & 0xFE000000) == 0xD6000000:  # branch to a register
        opc = (w >> 21) & 0xF
        return {0: JUMP, 1: CALL, 2: RETURN, 8: JUMP, 9: CALL}.get(opc, STOP)
    if (w & 0xFFFF0000) == 0x00000000 or (w & 0xFFE0001F) in (0xD4200000, 0xD4400000):
        return STOP  # UDF, BRK, HLT
    return NEXT


def _target(w: int, address: int) -> int | None:
    """Where a direct branch goes."""
    def signed(v: int, bits: int) -> int:
        return v - (1 << bits) if v >> (bits - 1) else v

    if (w & 0x7C000000) == 0x14000000:
        return address + 4 * signed(w & 0x3FFFFFF, 26)
    if (w & 0xFF000010) == 0x54000000 or (w & 0x7E000000) == 0x34000000:
        return address + 4 * signed((w >> 5) & 0x7FFFF, 19)
    if (w & 0x7E000000) == 0x36000000:
        return address + 4 * signed((w >> 5) & 0x3FFF, 14)
    return None


def handling(raw: bytes) -> str:
    """How an arm64 kernel runs a uprobe on the instruction ``raw`` (its 4 bytes)."""
    w = _word(raw)
    if len(raw) < 4:
        return sites.REFUSED
    if (w & 0x1C000000) == 0x14000000:  # branches, exception generation, system
        if (w & 0x7C000000) == 0x14000000 or (w & 0xFF000010) == 0x54000000 or \
                (w & 0x7E000000) in (0x34000000, 0x36000000) or \
                (w & 0xFFFFFC1F) in (0xD61F0000, 0xD63F0000, 0xD65F0000):
            return sites.EMULATED
        if (w & 0xFE000000) == 0xD6000000 or (w & 0xFF000000) == 0xD4000000:
            return sites.REFUSED  # other branches (authenticated, ERET); exceptions
        if (w & 0xFFF8F01F) == 0xD500401F or (w & 0xFFF00000) == 0xD5100000:
            return sites.REFUSED  # MSR (immediate), MSR (register)
        if (w & 0xFFF00000) == 0xD5300000:  # MRS: DAIF only refused
            same = (w & _SYSREG) == (_MRS_DAIF & _SYSREG)
            return sites.REFUSED if same else sites.SINGLE_STEPPED
        if (w & 0xFFFFF01F) == 0xD503201F:  # HINT
            return sites.SINGLE_STEPPED if (w >> 5) & 0x7F in _STEPPABLE_HINTS \
                else sites.REFUSED
        return sites.SINGLE_STEPPED
    if (w & 0x1F000000) == 0x10000000:
        return sites.EMULATED  # ADR, ADRP
    if (w & 0x3B000000) == 0x18000000:
        return sites.REFUSED  # load of a literal (general, SIMD, PRFM)
    if exclusive(w):
        return sites.REFUSED
    return sites.SINGLE_STEPPED


def exclusive(w: int) -> bool:
    """Whether the word is an exclusive load or store (LDXR, LDAXR, STXR, STLXR and
    their pairs, bytes and halves)."""
    return (w & 0x3F800000) == 0x08000000


def _exclusive_load(w: int) -> bool:
    return exclusive(w) and bool(w & (1 << 22))


def _full(name: str) -> str:
    """The register ``name`` is part of: w3 and x3 are x3, fp x29, lr x30; b/h/s/d/q
    views of a vector register its v."""
    if name in ("fp", "w29"):
        return "x29"
    if name in ("lr", "w30"):
        return "x30"
    m = re.fullmatch(r"[wx](\d+)", name)
    if m:
        return f"x{m.group(1)}"
    m = re.fullmatch(r"[bhsdqv](\d+)", name)
    if m:
        return f"v{m.group(1)}"
    return "sp" if name == "wsp" else name


class Arm64Insn(Insn):
    """An AArch64 instruction: its kind and target from its word, its operands and the
    registers it writes from capstone's full decode (the first register operand of
    an LSE atomic, the destination capstone leaves out, added; a compare's ``sp``
    dropped)."""

    __slots__ = ()

    @property
    def kind(self) -> str:
        return _kind(_word(self.raw))

    @property
    def stores(self) -> bool:
        """Whether it may write memory: a store, or an atomic of the LSE."""
        m = self.mnemonic
        return m.startswith(("st", "cas")) or bool(_ATOMIC_SECOND.match(m))

    def _decode(self) -> None:
        md = _disassembler()
        i = next(md.disasm(self.raw, self.address, 1), None)
        if i is None:
            self._operands, self._writes, self._lock = (), (), False
            return
        self._operands, self._writes = detail(md, i)
        self._lock = False


def detail(md: capstone.Cs, i: Any) -> tuple[tuple[tuple[Any, ...], ...], tuple[str, ...]]:
    from capstone import arm64

    ops: list[tuple[Any, ...]] = []
    regs: list[str] = []
    for o in i.operands:
        if o.type == arm64.ARM64_OP_REG:
            ops.append(("reg", _full(md.reg_name(o.reg))))
            regs.append(ops[-1][1])
        elif o.type == arm64.ARM64_OP_MEM:
            ops.append(("mem", _full(md.reg_name(o.mem.base)) if o.mem.base else "",
                        _full(md.reg_name(o.mem.index)) if o.mem.index else "", o.mem.disp))
        elif o.type == arm64.ARM64_OP_IMM:
            ops.append(("imm", o.imm))
    _read, written = i.regs_access()
    writes = {_full(md.reg_name(r)) for r in written}
    m = i.mnemonic
    if m in _COMPARES:
        writes = {"nzcv"}
    elif _ATOMIC_SECOND.match(m) and len(regs) >= 2:
        writes.add(regs[1])  # ldadd Xs, Xt, [Xn]: the old value in Xt
    elif m.startswith("cas") and regs:
        writes.add(regs[0])  # cas Xs, Xt, [Xn]: the old value in Xs
    writes -= {"xzr", "wzr", "nzcv"}
    return tuple(ops), tuple(sorted(writes))


@cache
def _disassembler() -> capstone.Cs:
    import capstone

    md = capstone.Cs(capstone.CS_ARCH_ARM64, capstone.CS_MODE_ARM)
    md.detail = True
    return md


@cache
def _light() -> capstone.Cs:
    import capstone

    md = capstone.Cs(capstone.CS_ARCH_ARM64, capstone.CS_MODE_ARM)
    md.skipdata = True  # a word it cannot decode (a constant in code): on past it
    return md


def decode(code: bytes, address: int) -> tuple[Insn, ...]:
    """The instructions of ``code`` at ``address``: every 4-byte word from the first
    (a word capstone cannot decode is one too, ``.word``: data in code, or an
    instruction it does not know)."""
    known = {at: m for at, size, m, _ops in _light().disasm_lite(code, address)
             if size == 4 and not m.startswith(".")}
    out: list[Insn] = []
    for k in range(0, len(code) - 3, 4):
        raw = code[k:k + 4]
        at = address + k
        w = _word(raw)
        out.append(Arm64Insn(at, 4, known.get(at, ".word"), False, None, _target(w, at), raw))
    return tuple(out)


_WIDTH = {"w": 4, "x": 8, "b": 1, "h": 2, "s": 4, "d": 8, "q": 16}


def _access(mnemonic: str, reg: str) -> tuple[str, int, bool] | None:
    """(LOAD or STORE, bytes, a pair) of a load or store of ``reg`` (capstone's name,
    which gives its width), by its mnemonic; None for any other instruction (an
    exclusive store, an atomic)."""
    m = re.fullmatch(r"(ld|st)(a?x?|l|ap)?(r|ur|p|np)(s?[bhw])?", mnemonic)
    if m is None or (m.group(1) == "st" and "x" in (m.group(2) or "")):
        return None
    suffix = m.group(4) or ""
    size = {"b": 1, "h": 2, "w": 4}.get(suffix[-1:]) if suffix else _WIDTH.get(reg[:1])
    if not size:
        return None
    return LOAD if m.group(1) == "ld" else STORE, size, "p" in m.group(3)


def references(insns: tuple[Insn, ...]) -> tuple[Reference, ...]:
    """The globals ``insns`` name: ADRP's page with the ADD after it (an address taken,
    kept in that register for the loads and stores through it) or the offset of a
    load or store based on it (a pair: one per register); an ADR's address taken; any
    other instruction addressing memory from such a register uses it. A register's
    page or address is forgotten when anything else writes it, and every one at a
    call."""
    from capstone import arm64

    md = _disassembler()
    pages: dict[str, int] = {}  # register -> the page an ADRP put in it
    held: dict[str, int] = {}  # register -> the address an ADD took into it
    out: list[Reference] = []
    for insn in insns:
        i = next(md.disasm(insn.raw, insn.address, 1), None)
        if i is None or insn.kind == CALL:
            pages.clear()
            held.clear()
            continue
        ops = i.operands
        regs = [md.reg_name(o.reg) for o in ops if o.type == arm64.ARM64_OP_REG]
        mem = next((o.mem for o in ops if o.type == arm64.ARM64_OP_MEM), None)
        kept: tuple[str, dict[str, int], int] | None = None
        if i.mnemonic == "adrp" and regs and ops[-1].type == arm64.ARM64_OP_IMM:
            kept = (_full(regs[0]), pages, ops[-1].imm)
        elif i.mnemonic == "adr" and regs and ops[-1].type == arm64.ARM64_OP_IMM:
            kept = (_full(regs[0]), held, ops[-1].imm)
            out.append(Reference(insn, TAKE, kept[0], 0, kept[2]))
        elif i.mnemonic == "add" and len(regs) == 2 and len(ops) == 3 and \
                ops[2].type == arm64.ARM64_OP_IMM and _full(regs[1]) in pages and \
                not ops[2].shift.value:
            kept = (_full(regs[0]), held, pages[_full(regs[1])] + ops[2].imm)
            out.append(Reference(insn, TAKE, kept[0], 0, kept[2]))
        elif mem is not None and mem.base and not mem.index:
            base = _full(md.reg_name(mem.base))
            start = pages.get(base, held.get(base))
            if start is not None:
                address = start + mem.disp
                access = _access(i.mnemonic, regs[0]) if regs and not i.writeback else None
                if access is None or (access[2] and len(regs) != 2):
                    out.append(Reference(insn, USE, "", 0, address))
                else:
                    how, size, pair = access
                    for k, r in enumerate(regs[:2] if pair else regs[:1]):
                        out.append(Reference(insn, how, _full(r), size, address + k * size))
        for r in _written(i, md):
            pages.pop(r, None)
            held.pop(r, None)
        if kept is not None:
            kept[1][kept[0]] = kept[2]
    return tuple(out)


def _written(i: Any, md: capstone.Cs) -> set[str]:
    _read, written = i.regs_access()
    return {_full(md.reg_name(r)) for r in written}


def in_exclusive_window(insns: tuple[Insn, ...], n: int) -> bool:
    """Whether ``insns[n]`` lies between an exclusive load and the store that ends its
    window (the store included): walking back over straight-line code and the
    window's own conditional exits, an exclusive load comes before any exclusive
    store."""
    for k in range(n, max(-1, n - 32), -1):
        w = _word(insns[k].raw)
        if k < n and _exclusive_load(w):
            return True
        if exclusive(w) and not _exclusive_load(w) and k < n:
            return False
        if k < n and insns[k].kind in (CALL, JUMP, RETURN, STOP):
            return False
    return False


class _Arm64:
    name = "arm64"
    max_length = 4

    def disassemble(self, elf: ElfFile, address: int, size: int) -> tuple[Insn, ...]:
        return decode(elf.read_vaddr(address, size), address)

    def decode(self, code: bytes, address: int) -> tuple[Insn, ...]:
        return decode(code, address)

    def handling(self, insn: Insn) -> str:
        return handling(insn.raw)

    def handling_at(self, insns: tuple[Insn, ...], n: int) -> str:
        if in_exclusive_window(insns, n):
            return sites.REFUSED
        return handling(insns[n].raw)

    def stack_check(self, insns: tuple[Insn, ...], morestack: frozenset[int]
                    ) -> StackCheck | None:
        """Go's stack check on arm64: ``ldr x16, [x28, #16|#24]`` (g's stackguard0 or
        1), up to three instructions putting SP less the frame in x17 (with a
        ``b.lo`` to the tail when that underflows), ``cmp sp|x17, x16`` and ``b.ls``
        to a tail that calls runtime.morestack and branches back to the entry. A call
        passes the ``b.ls`` not taken exactly once; a hit that takes it is dropped
        (its condition, LS, read from pstate)."""
        if len(insns) < 3:
            return None
        first = insns[0]
        if first.mnemonic != "ldr" or len(first.operands) != 2 or \
                first.operands[0] != ("reg", "x16") or \
                first.operands[1][:3] != ("mem", "x28", "") or \
                first.operands[1][3] not in (16, 24):
            return None
        writes = {"x16"}
        by_address = {i.address: n for n, i in enumerate(insns)}
        for n in range(1, min(len(insns) - 1, 6)):
            i = insns[n]
            if i.mnemonic == "cmp" and i.operands[:1] in ((("reg", "sp"),), (("reg", "x17"),)) \
                    and i.operands[1:] == (("reg", "x16"),):
                bls = insns[n + 1]
                if bls.mnemonic != "b.ls" or bls.target is None:
                    return None
                call = _restarts(insns, by_address.get(bls.target), first.address, morestack)
                if call is None:
                    return None
                return StackCheck(bls, frozenset(writes), call, skip=CONDITION | LS)
            if i.mnemonic in ("b.lo", "b.cc") or (set(i.writes) <= {"x17"} and
                                                  i.mnemonic in ("sub", "subs", "mov",
                                                                 "movz", "movk", "add")):
                writes.update(i.writes)
                continue
            return None
        return None

    def exits(self, insns: tuple[Insn, ...], start: int, end: int) -> tuple[Exit, ...]:
        """Every RET, and every direct ``b`` out of the function (a tail call)."""
        out = []
        for i in insns:
            if i.kind == RETURN:
                out.append(Exit(i, False))
            elif i.kind == JUMP and i.target is not None and not start <= i.target < end:
                out.append(Exit(i, True))
        return tuple(out)

    def references(self, insns: tuple[Insn, ...]) -> tuple[Reference, ...]:
        return references(insns)

    def lengths(self, code: bytes) -> tuple[bytes, int]:
        """Every 4-byte word starts an instruction (fixed width, aligned)."""
        n = len(code) // 4 * 4
        return bytes(4 if k % 4 == 0 and k < n else 0 for k in range(len(code))), n


def _restarts(insns: tuple[Insn, ...], start: int | None, entry: int,
              morestack: frozenset[int]) -> int | None:
    """The address of the ``bl`` to runtime.morestack in the tail at ``insns[start]``:
    spills, ``mov x3, x30``, the call, reloads, ``b entry``."""
    if start is None:
        return None
    call = None
    for i in insns[start:start + 64]:
        if i.kind == CALL:
            if call is not None or i.target not in morestack:
                return None
            call = i.address
        elif i.kind == JUMP:
            return call if call is not None and i.target == entry else None
        elif i.kind != NEXT:
            return None
    return None


ARM64 = _Arm64()
