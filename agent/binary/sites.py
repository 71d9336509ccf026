"""Instructions of a function (capstone), and what a uprobe costs on each.

Plans use these to probe inside a function body: atomic updates of a struct field,
stack spills of an argument register (``passes`` finds a Go function's stack check,
the cheapest exactly-once entry site, and its exits).

How an x86-64 kernel handles a uprobe's instruction decides its cost: a few it
emulates in the trap handler (relative jumps, conditional jumps and calls, ``push``
of a register, ``nop``), about a microsecond per hit; every other one it single-steps
out of line with a second trap, about ten times as long; LOCK- and segment-prefixed
ones it refuses to probe (``arch/x86/kernel/uprobes.c``).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import capstone

from agent.binary.amd64 import full_register
from agent.binary.elf import ElfFile

# What an instruction does to the flow (``Insn.kind``): comes back to the next one
# (CALL), goes elsewhere always (JUMP, direct or not) or on a condition (BRANCH),
# returns, traps for good (STOP: ud2, int3, hlt; AArch64's udf, brk), or goes on (NEXT).
CALL, JUMP, BRANCH, RETURN, STOP, NEXT = "call", "jump", "branch", "return", "stop", "next"
_X86_STOPS = ("ud2", "int3", "hlt")


class Insn:
    """One instruction. Address, size, mnemonic, bytes and the target of a direct jump
    or call come from capstone's light pass; operands, the LOCK prefix and the
    registers written from its full decode, made the first time one of them is asked
    for: a function's 30,000 instructions are read in 0.04 s so, 0.8 s fully, and a
    plan asks for the operands of a few hundred."""

    __slots__ = (
        "_lock",
        "_operands",
        "_writes",
        "address",
        "mnemonic",
        "raw",
        "size",
        "target",
    )

    def __init__(self, address: int, size: int, mnemonic: str, lock: bool | None = None,
                 operands: tuple[tuple[Any, ...], ...] | None = None,
                 target: int | None = None, raw: bytes = b"",
                 writes: tuple[str, ...] | None = None) -> None:
        self.address, self.size, self.mnemonic = address, size, mnemonic
        self.target = target  # immediate target of a jump or call
        self.raw = raw
        self._lock, self._operands, self._writes = lock, operands, writes

    @property
    def lock(self) -> bool:
        if self._lock is None:
            self._decode()
        return bool(self._lock)

    @property
    def operands(self) -> tuple[tuple[Any, ...], ...]:
        """("reg", name), ("mem", base, index, disp) (index "" when none), ("imm", n)."""
        if self._operands is None:
            self._decode()
        return self._operands or ()

    @property
    def writes(self) -> tuple[str, ...]:
        """The registers it writes, flags aside."""
        if self._writes is None:
            self._decode()
        return self._writes or ()

    def _decode(self) -> None:
        md = _disassembler()
        self._operands, self._writes, self._lock = detail(
            md, next(md.disasm(self.raw, self.address, 1)))

    @property
    def end(self) -> int:
        return self.address + self.size

    @property
    def kind(self) -> str:
        """Its place in the control flow: CALL, JUMP, BRANCH, RETURN, STOP or NEXT."""
        m = self.mnemonic
        if m == "call":
            return CALL
        if m == "jmp":
            return JUMP
        if m.startswith("j") or m == "xbegin":
            return BRANCH
        if m == "ret":
            return RETURN
        return STOP if m in _X86_STOPS else NEXT

    @property
    def stores(self) -> bool:
        """Whether it may write memory: its destination is memory (compares aside)."""
        return bool(self.operands) and self.operands[0][0] == "mem" and \
            self.mnemonic not in ("cmp", "test", "bt", "ucomisd", "ucomiss", "comisd",
                                  "comiss")

    def _key(self) -> tuple[Any, ...]:
        return (self.address, self.size, self.mnemonic, self.lock, self.operands,
                self.target, self.raw, self.writes)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Insn) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash((self.address, self.size, self.raw))

    def __repr__(self) -> str:
        return f"Insn({self.address:#x}, {self.mnemonic!r}, {self.raw.hex()})"


def detail(md: capstone.Cs, i: capstone.CsInsn
           ) -> tuple[tuple[tuple[Any, ...], ...], tuple[str, ...], bool]:
    """(operands, registers written but the flags, LOCK-prefixed) of instruction ``i``
    of capstone's full decode (``md`` with details on)."""
    from capstone import x86

    ops: list[tuple[Any, ...]] = []
    for o in i.operands:
        if o.type == x86.X86_OP_REG:
            ops.append(("reg", md.reg_name(o.reg)))
        elif o.type == x86.X86_OP_MEM:
            ops.append(("mem", md.reg_name(o.mem.base) if o.mem.base else "",
                        md.reg_name(o.mem.index) if o.mem.index else "", o.mem.disp))
        elif o.type == x86.X86_OP_IMM:
            ops.append(("imm", o.imm))
    _read, written = i.regs_access()
    return (tuple(ops), tuple(sorted({md.reg_name(r) for r in written} - {"rflags"})),
            i.prefix[0] == x86.X86_PREFIX_LOCK)


# Mnemonics whose immediate operand is where they go (capstone's jump and call groups).
_BRANCHES = ("j", "call", "xbegin")  # not loop*: capstone groups it with neither


def _direct(mnemonic: str, operands: str) -> int | None:
    """The target of a direct jump or call, from capstone's text of its operands."""
    if not mnemonic.rsplit(" ", 1)[-1].startswith(_BRANCHES):
        return None
    try:
        return int(operands, 0)
    except ValueError:
        return None  # through a register or memory


@cache
def _light() -> capstone.Cs:
    import capstone  # imported when first needed: a warm start decodes nothing

    return capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)


@cache
def _disassembler() -> capstone.Cs:
    import capstone

    md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
    md.detail = True
    return md


def disassemble(elf: ElfFile, address: int, size: int) -> tuple[Insn, ...]:
    return decode(elf.read_vaddr(address, size), address)


def decode(code: bytes, address: int) -> tuple[Insn, ...]:
    """The instructions of machine code ``code`` loaded at ``address``."""
    out = []
    for at, size, mnemonic, operands in _light().disasm_lite(code, address):
        name = mnemonic.removeprefix("lock ")  # capstone spells the prefix in
        start = at - address
        out.append(Insn(at, size, name, None, None, _direct(name, operands),
                        code[start:start + size]))
    return tuple(out)


_SEEN: dict[int, tuple[tuple[Insn, ...], frozenset[int], list[tuple[int, int]]]] = {}


def _branches(insns: tuple[Insn, ...]) -> tuple[frozenset[int], list[tuple[int, int]]]:
    """The targets of a function's direct jumps and calls, and (target, address) of
    each sorted, worked out once per instruction tuple (plans ask per update site)."""
    got = _SEEN.get(id(insns))
    if got is None or got[0] is not insns:
        if len(_SEEN) > 64:
            _SEEN.clear()
        pairs = sorted((i.target, i.address) for i in insns if i.target is not None)
        got = _SEEN[id(insns)] = (insns, frozenset(t for t, _a in pairs), pairs)
    return got[1], got[2]


def branch_targets(insns: tuple[Insn, ...]) -> frozenset[int]:
    """Where the direct jumps and calls of ``insns`` go."""
    return _branches(insns)[0]


def branches_into(insns: tuple[Insn, ...], lo: int, hi: int) -> list[int]:
    """The addresses of the direct jumps and calls of ``insns`` that go to an address
    in (``lo``, ``hi``]."""
    pairs = _branches(insns)[1]
    start = bisect.bisect_right(pairs, (lo, 2**64))
    end = bisect.bisect_right(pairs, (hi, 2**64))
    return [a for _t, a in pairs[start:end]]


def index_at(insns: tuple[Insn, ...], address: int) -> int | None:
    """The index of the instruction of ``insns`` (in address order) at ``address``."""
    k = bisect.bisect_left(insns, address, key=lambda i: i.address)
    return k if k < len(insns) and insns[k].address == address else None


def is_branch(i: Insn) -> bool:
    return i.mnemonic.startswith("j") or i.mnemonic in ("call", "ret", "int3", "ud2")


@dataclass(frozen=True, slots=True)
class Atomic:
    """An atomic read-modify-write of ``[base + disp]`` with register ``src``."""

    insn: Insn
    base: str
    disp: int
    src: str


def atomics(insns: tuple[Insn, ...], mnemonic: str, disp: int) -> tuple[Atomic, ...]:
    """``lock xadd`` / ``lock cmpxchg`` / ``xchg`` (implicitly locked) on an 8-byte field
    at ``disp`` from a base register, without an index register."""
    out = []
    for i in insns:
        if i.mnemonic != mnemonic or (mnemonic != "xchg" and not i.lock):
            continue
        mem = next((o for o in i.operands if o[0] == "mem"), None)
        reg = next((o for o in i.operands if o[0] == "reg"), None)
        if mem is None or reg is None or mem[2] or not mem[1] or mem[3] != disp:
            continue
        if not reg[1].startswith("r"):  # 8-byte general register only
            continue
        out.append(Atomic(i, mem[1], mem[3], reg[1]))
    return tuple(out)


ZF = 0x40  # the zero flag in eflags


def past_swap_flag(insns: tuple[Insn, ...], n: int, keep: Iterable[str]) -> Insn | None:
    """After the ``lock cmpxchg`` at ``insns[n]``, Go's ``sete R; test R, R; jcc``: the
    jcc, which the kernel emulates where the ``sete`` right after the cmpxchg is
    single-stepped; there ZF is clear exactly when the swap won. None when the code is
    otherwise, when R is part of a register in ``keep``, or when anything jumps in
    between (then other paths would reach the jcc)."""
    if n + 3 >= len(insns):
        return None
    sete, test, jcc = insns[n + 1:n + 4]
    if sete.mnemonic != "sete" or len(sete.operands) != 1 or sete.operands[0][0] != "reg":
        return None
    r = sete.operands[0][1]
    if test.mnemonic != "test" or test.operands != (("reg", r), ("reg", r)):
        return None
    if not jcc.mnemonic.startswith("j") or jcc.mnemonic == "jmp":
        return None
    if full_register(r) in {full_register(k) for k in keep}:
        return None
    if any(i.target in (sete.address, test.address, jcc.address) for i in insns):
        return None
    return jcc


def stack_store(i: Insn) -> tuple[int, str] | None:
    """(rsp offset, register) when ``i`` copies a register into the stack frame
    (``mov* [rsp + d], reg``), as Go does to keep an argument across a call."""
    if i.mnemonic.startswith("mov") and len(i.operands) == 2 and i.operands[1][0] == "reg" \
            and i.operands[0][0] == "mem" and i.operands[0][1] == "rsp" \
            and not i.operands[0][2]:
        return int(i.operands[0][3]), str(i.operands[1][1])
    return None


def spilled(insns: tuple[Insn, ...], site: int, reg: str) -> tuple[int, int] | None:
    """(rsp offset at ``site``, address of the store) where ``reg`` was stored on every
    path to ``site``.

    Walks back from ``site`` over straight-line code (no branch in between, no jump
    into it) to a ``mov[sd|q|aps] [rsp + d], reg``; rsp must not change on the way.
    The caller checks with DWARF that ``reg`` held the value at that store.
    """
    targets = {i.target for i in insns if i.target is not None}
    idx = next((n for n, i in enumerate(insns) if i.address == site), None)
    if idx is None or site in targets:
        return None
    for n in range(idx - 1, -1, -1):
        i = insns[n]
        if is_branch(i) or i.mnemonic in ("push", "pop", "leave"):
            return None
        if i.operands and i.operands[0] == ("reg", "rsp"):
            return None
        stored = stack_store(i)
        if stored is not None and stored[1] == reg:
            return stored[0], i.address
        if i.address in targets:
            return None
    return None


def untouched_until(insns: tuple[Insn, ...], reg: str, address: int) -> bool:
    """Whether ``reg`` still holds what it held at the function's entry (``insns[0]``)
    when the instruction at ``address`` runs: every path there stays in the code from
    the entry up to it (what jumps into that code jumps from inside it, or back to the
    entry itself), and nothing there writes ``reg`` or calls."""
    if not insns:
        return False
    entry = insns[0].address
    if any(i.target is not None and entry < i.target <= address
           and not entry <= i.address < address for i in insns):
        return False
    return all(reg not in i.writes and i.kind != CALL for i in insns if i.address < address)


def overwrites_frame(i: Insn, offset: int, size: int) -> bool:
    """Whether ``i`` may write the frame's bytes ``[rsp + offset, + size)``: its
    destination is memory through rsp within 16 bytes of them, or through rsp with an
    index register."""
    if not i.operands or i.operands[0][0] != "mem" or i.operands[0][1] != "rsp":
        return False
    disp = int(i.operands[0][3])
    return bool(i.operands[0][2]) or (disp < offset + size and offset < disp + 16)


# --- what a uprobe costs on an instruction ----------------------------------------------

EMULATED, SINGLE_STEPPED, REFUSED = "emulated", "single-stepped", "refused"
_LEGACY_PREFIXES = {0xF0, 0xF2, 0xF3, 0x2E, 0x36, 0x3E, 0x26, 0x64, 0x65, 0x66, 0x67}
_BAD_PREFIXES = {0xF0, 0x2E, 0x36, 0x3E, 0x26}  # LOCK and the ES/CS/SS/DS overrides


def handling(raw: bytes) -> str:
    """How the kernel runs a uprobed instruction: ``emulated`` (relative jmp, jcc,
    call; push of a register; a one-byte nop), ``single-stepped`` (anything else), or
    ``refused`` (LOCK or segment prefix: the uprobe cannot be attached there)."""
    n = 0
    while n < len(raw) and raw[n] in _LEGACY_PREFIXES:
        n += 1
    prefixes = set(raw[:n])
    if prefixes & _BAD_PREFIXES:
        return REFUSED
    rex = raw[n] if n < len(raw) and 0x40 <= raw[n] <= 0x4F else None
    op = raw[n + (rex is not None):]
    if not op:
        return SINGLE_STEPPED
    branch = op[0] in (0xEB, 0xE9, 0xE8) or 0x70 <= op[0] <= 0x7F or (
        op[0] == 0x0F and len(op) > 1 and 0x80 <= op[1] <= 0x8F)
    if branch:
        return REFUSED if 0x66 in prefixes else EMULATED
    if op[0] == 0x90 and rex is None:
        return EMULATED
    if 0x50 <= op[0] <= 0x57 and not prefixes and rex in (None, 0x41) and len(op) == 1:
        return EMULATED
    return SINGLE_STEPPED
