"""Go's internal register ABI on amd64 (Go ≥ 1.17): where each argument and result lives.

Follows "Go internal ABI specification" (src/cmd/compile/abi-internal.md): each value
is register-assigned as a whole or stack-assigned as a whole; results start again from
the first registers; stack offsets here are from SP at the callee's first instruction,
so the first stack-assigned argument is at 8 (past the return address).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from agent.binary.abi.shape import Shape, align_up
from agent.binary.amd64 import GO_FLOAT_REGS, GO_INT_REGS, RETURN_ADDRESS_SIZE
from agent.binary.dwarf.locations import Location, Piece


@dataclass(frozen=True, slots=True)
class Assignment:
    """Locations of arguments (receiver first) and of results, in declaration order."""

    args: tuple[Location, ...]
    results: tuple[Location, ...]
    frame_size: int  # bytes of stack-assigned arguments and results, both aligned


class _Regs:
    def __init__(self) -> None:
        self.ints = 0
        self.floats = 0

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
        if self.ints >= len(GO_INT_REGS):
            return False
        out.append(Piece(size, reg=GO_INT_REGS[self.ints]))
        self.ints += 1
        return True

    def _take_float(self, size: int, out: list[Piece]) -> bool:
        if self.floats >= len(GO_FLOAT_REGS):
            return False
        out.append(Piece(size, reg=GO_FLOAT_REGS[self.floats]))
        self.floats += 1
        return True


def assign(args: Sequence[Shape], results: Sequence[Shape],
           registers: bool = True) -> Assignment:
    """Assign locations per the Go internal ABI (``registers=False``: ABI0, all on stack)."""
    offset = 0

    def place(values: Sequence[Shape]) -> tuple[Location, ...]:
        nonlocal offset
        regs = _Regs()
        out: list[Location] = []
        for s in values:
            pieces = regs.try_assign(s) if registers else None
            if pieces is None:
                offset = align_up(offset, s.align)
                pieces = [Piece(s.size, stack=RETURN_ADDRESS_SIZE + offset)]
                offset += s.size
            out.append(tuple(pieces))
        offset = align_up(offset, 8)
        return tuple(out)

    placed_args = place(args)
    placed_results = place(results)
    return Assignment(placed_args, placed_results, offset)
