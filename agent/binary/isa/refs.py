"""How an instruction names a global (``Reference``): what each instruction set's
``references`` gives, and the searches for a stripped Go build's globals read."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agent.binary.sites import Insn

# How an instruction names a global (``Reference.how``)
TAKE = "take"  # its address, into a register (x86-64's lea, arm64's adrp and add)
LOAD = "load"  # a load from it into a register
STORE = "store"  # a store of a register to it
USE = "use"  # any other access (a compare, an atomic)


@dataclass(frozen=True, slots=True)
class Reference:
    """An instruction's naming of a global's address as position-dependent code does
    (x86-64: a RIP-relative operand; arm64: ADRP and the ADD, load or store using its
    page, or a load or store through a register an ADD so took the address into)."""

    insn: Insn  # the instruction that completes the address
    how: str  # TAKE, LOAD, STORE or USE
    reg: str  # the register taken, loaded or stored (its full name: rax, x0); "" for USE
    size: int  # bytes loaded or stored (0: a TAKE or a USE)
    address: int
