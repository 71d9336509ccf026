"""What a function's machine code shows of its calling convention, read from objdump.

The oracle for `noop vars` answers that come from the ABI rather than from DWARF:
an argument in a register is confirmed when the function reads that register before
it writes it (the caller must have set it); an argument on the stack when the
function reads the slot at that offset from its entry stack pointer; a result in a
register when a caller reads that register after the call before writing it.

Code is read in address order, which for the small test functions is the order
the entry block and the prologue run in. AT&T syntax: the last operand is the
destination; registers inside a memory operand are read.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from functools import cache
from pathlib import Path

__all__ = ["Insn", "caller_reads_after_call", "disassemble", "reads_register_first",
           "reads_stack"]

_LINE = re.compile(r"^\s*([0-9a-f]+):\s+(\S+)\s*(.*?)\s*(?:#.*)?$")
_REG = re.compile(r"%([a-z0-9]+)")
_MEM = re.compile(r"(-?0x[0-9a-f]+|-?\d+)?\(%(\w+)(?:,%?\w*(?:,\d+)?)?\)")
# Mnemonics whose destination is written without being read.
_WRITE_ONLY = re.compile(r"^(mov|lea|cvt|set|pop|cmov)|^(pxor|xorps|xorpd)$")


def _family(reg: str) -> str:
    """The 64-bit register (or xmm register) a register name is part of."""
    reg = reg.lower()
    if reg.startswith(("xmm", "ymm", "zmm")):
        return "xmm" + reg[3:]
    table = {"al": "rax", "ah": "rax", "ax": "rax", "eax": "rax",
             "bl": "rbx", "bh": "rbx", "bx": "rbx", "ebx": "rbx",
             "cl": "rcx", "ch": "rcx", "cx": "rcx", "ecx": "rcx",
             "dl": "rdx", "dh": "rdx", "dx": "rdx", "edx": "rdx",
             "sil": "rsi", "si": "rsi", "esi": "rsi", "dil": "rdi", "di": "rdi", "edi": "rdi",
             "bpl": "rbp", "bp": "rbp", "ebp": "rbp", "spl": "rsp", "sp": "rsp", "esp": "rsp"}
    if reg in table:
        return table[reg]
    m = re.fullmatch(r"(r\d+)[dwb]?", reg)
    return m.group(1) if m else reg


def _operands(text: str) -> list[str]:
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
            continue
        depth += ch == "("
        depth -= ch == ")"
        cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


@dataclass(frozen=True, slots=True)
class Insn:
    address: int
    mnemonic: str
    operands: tuple[str, ...]

    @property
    def reads(self) -> set[str]:
        """Register families the instruction reads (explicit operands only)."""
        out: set[str] = set()
        ops = self.operands
        for n, op in enumerate(ops):
            regs = {_family(r) for r in _REG.findall(op)}
            if "(" in op:
                out |= regs  # address registers
            elif n < len(ops) - 1 or len(ops) == 1:
                if not (len(ops) == 1 and self.mnemonic.startswith("pop")):
                    out |= regs
            elif not _WRITE_ONLY.search(self.mnemonic) and not self._zeroing:
                out |= regs  # a read-modify-write destination
        return out

    @property
    def writes(self) -> set[str]:
        ops = self.operands
        if not ops or "(" in ops[-1] or self.mnemonic.startswith(("cmp", "test", "push",
                                                                      "call", "j")):
            return set()
        return {_family(r) for r in _REG.findall(ops[-1])}

    @property
    def _zeroing(self) -> bool:
        return self.mnemonic.startswith(("xor", "sub", "pxor")) and len(self.operands) == 2 \
            and self.operands[0] == self.operands[1]

    def memory(self) -> list[tuple[str, int, bool]]:
        """Memory operands: (base register, displacement, read?)."""
        out = []
        for n, op in enumerate(self.operands):
            m = _MEM.search(op)
            if m is None or self.mnemonic.startswith("lea"):
                continue
            disp = int(m.group(1), 0) if m.group(1) else 0
            is_dest = n == len(self.operands) - 1 and len(self.operands) > 1
            read = not is_dest or not _WRITE_ONLY.search(self.mnemonic)
            out.append((_family(m.group(2)), disp, read))
        return out


_SYMBOL = re.compile(r"^([0-9a-f]+) <.*>:$")


@cache
def _objdump(binary: Path | str) -> tuple[tuple[Insn, ...], frozenset[int]]:
    """Every instruction of the binary's .text in address order, and the addresses
    where objdump starts a symbol."""
    done = subprocess.run(["objdump", "-d", "--no-show-raw-insn", "-j", ".text", str(binary)],
                          capture_output=True, text=True, timeout=300, check=True)
    out = []
    starts = set()
    for line in done.stdout.splitlines():
        if (sym := _SYMBOL.match(line)) is not None:
            starts.add(int(sym.group(1), 16))
            continue
        m = _LINE.match(line)
        if m is None:
            continue
        mnemonic, rest = m.group(2), m.group(3)
        rest = re.sub(r"\s*<[^>]*>$", "", rest)
        out.append(Insn(int(m.group(1), 16), mnemonic, tuple(_operands(rest))))
    return tuple(out), frozenset(starts)


def disassemble(binary: Path | str) -> tuple[Insn, ...]:
    """Every instruction of the binary's .text, in address order."""
    return _objdump(binary)[0]


def _function(binary: Path | str, start: int) -> list[Insn]:
    """The function's instructions: from ``start`` to the next symbol."""
    insns, starts = _objdump(binary)
    i = next(n for n, x in enumerate(insns) if x.address == start)
    out = [insns[i]]
    for x in insns[i + 1:]:
        if x.address in starts:
            break
        out.append(x)
    return out


def reads_register_first(binary: Path | str, start: int, reg: str) -> bool:
    """Whether the function at ``start`` reads ``reg`` before any write to it."""
    family = _family(reg)
    for x in _function(binary, start):
        if family in x.reads:
            return True
        if family in x.writes:
            return False
    return False


def reads_stack(binary: Path | str, start: int, offset: int, size: int) -> bool:
    """Whether the function at ``start`` reads memory in [SP+offset, SP+offset+size)
    as SP was at its entry (the stack pointer tracked through push, pop, sub, add and
    a frame pointer set from it)."""
    sp, bp = 0, None  # SP and RBP as offsets from the entry SP
    for x in _function(binary, start):
        for base, disp, read in x.memory():
            at = sp + disp if base == "rsp" else \
                bp + disp if base == "rbp" and bp is not None else None
            if read and at is not None and offset <= at < offset + size:
                return True
        ops = x.operands
        if x.mnemonic.startswith("push"):
            sp -= 8
        elif x.mnemonic.startswith("pop"):
            sp += 8
            if ops and _family(ops[0].lstrip("%")) == "rbp":
                bp = None
        elif x.mnemonic.startswith(("sub", "add")) and len(ops) == 2 and ops[1] == "%rsp" \
                and ops[0].startswith("$"):
            delta = int(ops[0][1:], 0)
            sp += -delta if x.mnemonic.startswith("sub") else delta
        elif x.mnemonic.startswith("mov") and ops == ("%rsp", "%rbp"):
            bp = sp
        elif x.mnemonic == "ret":
            break
    return False


def caller_reads_after_call(binary: Path | str, target: int, reg: str) -> bool:
    """Whether some direct call of ``target`` is followed, in its caller, by a read of
    ``reg`` before any write to it (before the next call, jump or return)."""
    family = _family(reg)
    insns = disassemble(binary)
    for n, x in enumerate(insns):
        if x.mnemonic != "call" or x.operands != (f"{target:x}",):
            continue
        for y in insns[n + 1:n + 40]:
            if family in y.reads:
                return True
            if family in y.writes or y.mnemonic in ("call", "ret", "jmp"):
                break
    return False


def _block_end(x: Insn) -> bool:
    return x.mnemonic in ("call", "ret") or x.mnemonic.startswith("j")


def caller_sets_before_call(binary: Path | str, target: int, reg: str) -> bool:
    """Whether some direct call of ``target`` is preceded, in its block, by a write of
    ``reg``: the caller's argument set-up."""
    family = _family(reg)
    insns = disassemble(binary)
    for n, x in enumerate(insns):
        if x.mnemonic != "call" or x.operands != (f"{target:x}",):
            continue
        for y in reversed(insns[max(0, n - 40):n]):
            if _block_end(y):
                break
            if family in y.writes:
                return True
    return False


def writes_before_ret(binary: Path | str, start: int, reg: str) -> bool:
    """Whether some RET of the function at ``start`` is preceded, in its block, by a
    write of ``reg``: the function sets it as it returns."""
    family = _family(reg)
    code = _function(binary, start)
    for n, x in enumerate(code):
        if x.mnemonic != "ret":
            continue
        for y in reversed(code[:n]):
            if _block_end(y):
                break
            if family in y.writes:
                return True
    return False
