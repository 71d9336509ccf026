"""Instructions of a function (capstone): atomic updates of a struct field, and stack
spills of an argument register, for plans that probe inside a function body.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

import capstone
from capstone import x86

from agent.binary.elf import ElfFile


@dataclass(frozen=True, slots=True)
class Insn:
    address: int
    size: int
    mnemonic: str
    lock: bool
    # operands: ("reg", name) or ("mem", base, index, disp); index "" when none
    operands: tuple[tuple[Any, ...], ...]
    target: int | None  # immediate target of a jump or call

    @property
    def end(self) -> int:
        return self.address + self.size


@cache
def _disassembler() -> capstone.Cs:
    md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
    md.detail = True
    return md


def disassemble(elf: ElfFile, address: int, size: int) -> tuple[Insn, ...]:
    md = _disassembler()
    out = []
    for i in md.disasm(elf.read_vaddr(address, size), address):
        ops: list[tuple[Any, ...]] = []
        target = None
        for o in i.operands:
            if o.type == x86.X86_OP_REG:
                ops.append(("reg", md.reg_name(o.reg)))
            elif o.type == x86.X86_OP_MEM:
                ops.append(("mem", md.reg_name(o.mem.base) if o.mem.base else "",
                            md.reg_name(o.mem.index) if o.mem.index else "", o.mem.disp))
            elif o.type == x86.X86_OP_IMM:
                ops.append(("imm", o.imm))
                if i.group(capstone.CS_GRP_JUMP) or i.group(capstone.CS_GRP_CALL):
                    target = o.imm
        mnemonic = i.mnemonic.removeprefix("lock ")  # capstone spells the prefix in
        out.append(Insn(i.address, i.size, mnemonic, i.prefix[0] == x86.X86_PREFIX_LOCK,
                        tuple(ops), target))
    return tuple(out)


def _is_branch(i: Insn) -> bool:
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
        if _is_branch(i) or i.mnemonic in ("push", "pop", "leave"):
            return None
        if i.operands and i.operands[0] == ("reg", "rsp"):
            return None
        if i.mnemonic.startswith("mov") and len(i.operands) == 2 \
                and i.operands[1] == ("reg", reg) and i.operands[0][0] == "mem" \
                and i.operands[0][1] == "rsp" and not i.operands[0][2]:
            return int(i.operands[0][3]), i.address
        if i.address in targets:
            return None
    return None

