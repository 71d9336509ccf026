"""x86-64's instruction set for plans: capstone's decoding (``sites``), the kernel's
handling of a uprobe on each instruction (``arch/x86/kernel/uprobes.c``: relative
jumps and calls, ``push`` of a register and ``nop`` emulated, LOCK- and
segment-prefixed ones refused, the rest single-stepped), Go's stack check and the
exits (``passes``)."""

from __future__ import annotations

from agent.binary import passes, sites
from agent.binary.amd64 import full_register
from agent.binary.elf import ElfFile
from agent.binary.isa.refs import LOAD, STORE, TAKE, USE, Reference
from agent.binary.passes import Exit, StackCheck
from agent.binary.sites import Insn

_MAX_LENGTH = 15


class _Amd64:
    name = "x86-64"

    def disassemble(self, elf: ElfFile, address: int, size: int) -> tuple[Insn, ...]:
        return sites.disassemble(elf, address, size)

    def decode(self, code: bytes, address: int) -> tuple[Insn, ...]:
        return sites.decode(code, address)

    def handling(self, insn: Insn) -> str:
        return sites.handling(insn.raw)

    def handling_at(self, insns: tuple[Insn, ...], n: int) -> str:
        return sites.handling(insns[n].raw)

    def stack_check(self, insns: tuple[Insn, ...], morestack: frozenset[int]
                    ) -> StackCheck | None:
        return passes.stack_check(insns, morestack)

    def exits(self, insns: tuple[Insn, ...], start: int, end: int) -> tuple[Exit, ...]:
        return passes.exits(insns, start, end)

    def references(self, insns: tuple[Insn, ...]) -> tuple[Reference, ...]:
        """Each RIP-relative operand: ``lea`` takes its address, a ``mov`` to or from
        a register loads or stores it, any other instruction uses it."""
        from capstone import x86

        md = sites._disassembler()
        out = []
        for insn in insns:
            if not any((b & 0xC7) == 0x05 for b in insn.raw[1:]):
                continue  # no ModRM byte of RIP-relative form (mod 00, r/m 101) in it
            i = next(md.disasm(insn.raw, insn.address, 1), None)
            if i is None:
                continue
            ops = i.operands
            at = next((n for n, o in enumerate(ops) if o.type == x86.X86_OP_MEM and
                       o.mem.base == x86.X86_REG_RIP), None)
            if at is None:
                continue
            mem = ops[at]
            address = i.address + i.size + mem.mem.disp
            regs = [full_register(i.reg_name(o.reg)) for o in ops if o.type == x86.X86_OP_REG]
            if i.mnemonic == "lea" and regs:
                out.append(Reference(insn, TAKE, regs[0], 0, address))
            elif i.mnemonic == "mov" and len(ops) == 2:  # a store of a constant: reg ""
                how = LOAD if at == 1 else STORE
                out.append(Reference(insn, how, regs[0] if regs else "", mem.size, address))
            else:
                out.append(Reference(insn, USE, "", 0, address))
        return tuple(out)

    def lengths(self, code: bytes) -> tuple[bytes, int]:
        lengths = bytearray(len(code))
        end = 0
        for address, size, _mnemonic, _operands in sites._light().disasm_lite(code, 0):
            lengths[address] = size
            end = address + size
        return bytes(lengths), end

    max_length = _MAX_LENGTH


AMD64 = _Amd64()
