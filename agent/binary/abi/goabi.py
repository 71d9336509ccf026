"""Go's internal register ABI (Go ≥ 1.17 on amd64, 1.18 on arm64): where each argument
and result lives.

Follows "Go internal ABI specification" (src/cmd/compile/abi-internal.md): each value
is register-assigned as a whole or stack-assigned as a whole; results start again from
the first registers; stack offsets here are from SP at the callee's first instruction,
so the first stack-assigned argument is at 8 (amd64: past the return address; arm64:
past the word the callee saves the link register in). The registers are the
architecture's (``agent.binary.arch``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from agent.binary.abi.shape import Shape, align_up
from agent.binary.arch import AMD64, Arch
from agent.binary.dwarf.locations import Location, Piece


@dataclass(frozen=True, slots=True)
class Assignment:
    """Locations of arguments (receiver first) and of results, in declaration order."""

    args: tuple[Location, ...]
    results: tuple[Location, ...]
    frame_size: int  # bytes of stack-assigned arguments and results, both aligned


class _Regs:
    def __init__(self, arch: Arch) -> None:
        self.ints = 0
        self.floats = 0
        self.int_regs, self.float_regs = arch.go_int_regs, arch.go_float_regs

    def try_assign(self, shape: Shape) -> list[Piece] | None:
        saved = (self.ints, self.floats)
        pieces: list[Piece] = []
        if self._assign(shape, pieces):
            return pieces
        self.ints, self.floats = saved
        return None

    def _assign(self, s: Shape, out: list[Piece]) -> bool:
        if s.size == 0:
            return True
        if s.kind == "int":
            return self._take_int(s.size, out)
        if s.kind == "float":
            return self._take_float(s.size, out)
        if s.kind == "complex":
            return self._take_float(s.size // 2, out) and self._take_float(s.size // 2, out)
        if s.kind in ("string", "iface"):
            return self._take_int(8, out) and self._take_int(8, out)
        if s.kind == "slice":
            return all(self._take_int(8, out) for _ in range(3))
        if s.kind == "array":
            if s.count == 0:
                return True
            if s.count == 1 and s.elem is not None:
                return self._assign(s.elem, out)
            return False
        if s.kind == "struct":
            return all(self._assign(f, out) for _, f in s.fields)
        return False

    def _take_int(self, size: int, out: list[Piece]) -> bool:
        if self.ints >= len(self.int_regs):
            return False
        out.append(Piece(size, reg=self.int_regs[self.ints]))
        self.ints += 1
        return True

    def _take_float(self, size: int, out: list[Piece]) -> bool:
        if self.floats >= len(self.float_regs):
            return False
        out.append(Piece(size, reg=self.float_regs[self.floats]))
        self.floats += 1
        return True


def assign(args: Sequence[Shape], results: Sequence[Shape],
           registers: bool = True, arch: Arch = AMD64) -> Assignment:
    """Assign locations per the Go internal ABI (``registers=False``: ABI0, all on stack)."""
    offset = 0

    def place(values: Sequence[Shape]) -> tuple[Location, ...]:
        nonlocal offset
        regs = _Regs(arch)
        out: list[Location] = []
        for s in values:
            pieces = regs.try_assign(s) if registers else None
            if pieces is None:
                offset = align_up(offset, s.align)
                pieces = [Piece(s.size, stack=arch.go_stack_args + offset)]
                offset += s.size
            out.append(tuple(pieces))
        offset = align_up(offset, 8)
        return tuple(out)

    placed_args = place(args)
    placed_results = place(results)
    return Assignment(placed_args, placed_results, offset)
