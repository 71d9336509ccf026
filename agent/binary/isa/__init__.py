"""Instruction sets: one part per architecture, behind one interface (``Isa``), for
what plans need of machine code wherever they are made: a function's instructions
(``sites.Insn``, each with its place in the control flow: ``Insn.kind``), how the
running kernel handles a uprobe on each (``handling``: emulated or simulated in the
trap, single-stepped out of line, or refused), a Go function's stack check, a
function's exits, and where instruction boundaries are (a plan's proofs).

``amd64`` wraps what ``sites`` and ``passes`` do for x86-64; ``arm64`` is AArch64's.
The architecture of a binary is ``ElfFile.arch``; ``of(arch.name)`` its instruction set.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from agent.binary.isa.refs import LOAD, STORE, TAKE, USE, Reference

if TYPE_CHECKING:
    from agent.binary.elf import ElfFile
    from agent.binary.passes import Exit, StackCheck
    from agent.binary.sites import Insn


class Isa(Protocol):
    name: str
    max_length: int  # bytes of the longest instruction

    def disassemble(self, elf: ElfFile, address: int, size: int) -> tuple[Insn, ...]: ...

    def decode(self, code: bytes, address: int) -> tuple[Insn, ...]: ...

    def handling(self, insn: Insn) -> str:
        """How the kernel runs a uprobe on ``insn`` alone (``sites.EMULATED``,
        ``SINGLE_STEPPED`` or ``REFUSED``)."""
        ...

    def handling_at(self, insns: tuple[Insn, ...], n: int) -> str:
        """How a uprobe on ``insns[n]`` fares in its function: ``handling``, or REFUSED
        where the instructions around it forbid one (inside an exclusive-load/store
        window, whose retry loop a trap there would never let finish)."""
        ...

    def stack_check(self, insns: tuple[Insn, ...], morestack: frozenset[int]
                    ) -> StackCheck | None: ...

    def exits(self, insns: tuple[Insn, ...], start: int, end: int) -> tuple[Exit, ...]: ...

    def references(self, insns: tuple[Insn, ...]) -> tuple[Reference, ...]:
        """The globals ``insns`` name, in order (a pair load or store: one per
        register)."""
        ...

    def lengths(self, code: bytes) -> tuple[bytes, int]:
        """For each byte of ``code`` (decoded from its first) the length of the
        instruction starting there (0: none does), and how many bytes decoded."""
        ...


def of(name: str) -> Isa:
    """The instruction set of architecture ``name`` (``Arch.name``)."""
    if name == "arm64":
        from agent.binary.isa.arm64 import ARM64

        return ARM64
    from agent.binary.isa.amd64 import AMD64

    return AMD64


__all__ = ["LOAD", "STORE", "TAKE", "USE", "Isa", "Reference", "of"]
