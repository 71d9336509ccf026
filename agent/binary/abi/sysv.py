"""The System V AMD64 psABI (§3.2.3) for C, and rustc's Rust ABI approximated on top of it.

Classification is per eightbyte: INTEGER goes to rdi, rsi, rdx, rcx, r8, r9; SSE to
xmm0-7; aggregates over 16 bytes, unaligned ones and long double go to memory (the
stack, 8-aligned, from 8(%rsp) at entry). An argument that does not fit the remaining
registers goes to the stack whole. A memory-class result takes rdi for its address.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from agent.binary.abi.shape import Shape, align_up
from agent.binary.amd64 import (
    RETURN_ADDRESS_SIZE,
    SYSV_INT_REGS,
    SYSV_INT_RETURN,
    SYSV_SSE_REGS,
    SYSV_SSE_RETURN,
)
from agent.binary.dwarf.locations import Location, Piece

INTEGER, SSE, MEMORY = "INTEGER", "SSE", "MEMORY"


@dataclass(frozen=True, slots=True)
class Assignment:
    args: tuple[Location, ...]
    results: tuple[Location, ...]
    by_reference: tuple[bool, ...]  # per argument: the location holds a pointer to it


def classify(s: Shape) -> tuple[str, ...]:
    """The class of each eightbyte of ``s``, or (MEMORY,)."""
    if s.size == 0:
        return ()
    if s.size > 16 or s.kind == "x87":
        return (MEMORY,)
    classes: list[str | None] = [None] * ((s.size + 7) // 8)
    for off, leaf in s.leaves():
        if leaf.kind == "x87" or (leaf.align > 1 and off % leaf.align):
            return (MEMORY,)
        cls = SSE if leaf.kind == "float" else INTEGER
        i = off // 8
        classes[i] = INTEGER if INTEGER in (classes[i], cls) else cls
    return tuple(c or SSE for c in classes)


def _eightbyte_sizes(size: int) -> list[int]:
    return [min(8, size - i * 8) for i in range((size + 7) // 8)]


def _in_registers(classes: tuple[str, ...], size: int, int_regs: tuple[str, ...],
                  sse_regs: tuple[str, ...], ints: int, sses: int
                  ) -> tuple[Location, int, int]:
    """One piece per eightbyte from the next free register of its class; the counts after."""
    pieces: list[Piece] = []
    for cls, part in zip(classes, _eightbyte_sizes(size), strict=True):
        if cls == SSE:
            pieces.append(Piece(part, reg=sse_regs[sses]))
            sses += 1
        else:
            pieces.append(Piece(part, reg=int_regs[ints]))
            ints += 1
    return tuple(pieces), ints, sses


def assign(args: Sequence[Shape], result: Shape | None, rust: bool = False) -> Assignment:
    ints = sses = 0
    stack = 0
    locations: list[Location] = []
    by_ref: list[bool] = []
    results: tuple[Location, ...] = ()
    if result is not None and result.size:
        rclass = classify(result)
        if result.kind == "x87":  # a long double comes back in st0, not in memory
            results = ((Piece(result.size, reg="st0"),),)
        elif rclass == (MEMORY,) or (rust and result.kind in ("struct", "array")
                                     and result.size > 16):
            ints = 1  # the caller passes the result buffer in rdi; rax returns it
            results = ((Piece(result.size, reg="rax", at=0),),)
        else:
            pieces, _, _ = _in_registers(rclass, result.size, SYSV_INT_RETURN,
                                         SYSV_SSE_RETURN, 0, 0)
            results = (pieces,)
    for s in args:
        indirect = rust and s.kind in ("struct", "array") and s.size > 16
        shape = Shape("int", 8, 8) if indirect else s
        classes = classify(shape)
        need_i = classes.count(INTEGER)
        need_s = classes.count(SSE)
        if classes != (MEMORY,) and ints + need_i <= len(SYSV_INT_REGS) \
                and sses + need_s <= len(SYSV_SSE_REGS):
            loc, ints, sses = _in_registers(classes, shape.size, SYSV_INT_REGS,
                                            SYSV_SSE_REGS, ints, sses)
            locations.append(loc)
        else:
            stack = align_up(stack, max(8, shape.align))
            locations.append((Piece(shape.size, stack=RETURN_ADDRESS_SIZE + stack),))
            stack += align_up(shape.size, 8)
        by_ref.append(indirect)
    return Assignment(tuple(locations), results, tuple(by_ref))
