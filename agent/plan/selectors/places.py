"""Where a value is while a selector is walked: in memory the ops reach (``Mem``), in
registers (``Regs``), or in pieces each a register or a memory slot (``Pieces``: Go
keeps a string's pointer and length in two stack slots apart, or one in a register),
and the fetch that reads it there at the end; with what a walk gives (``Selected``) or
says when a selector does not fit (``SelectError``).
"""

from __future__ import annotations

from dataclasses import dataclass

from elftools.dwarf.die import DIE

from agent.binary.amd64 import is_vector
from agent.binary.dwarf.locations import Location
from agent.plan.fetches import Decode, Fetch, Op


class SelectError(Exception):
    """A selector that does not fit the types; ``hint`` says what does."""

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


@dataclass(frozen=True, slots=True)
class Selected:
    fetch: Fetch
    decode: Decode
    size: int
    cap: int
    type: str
    names: tuple[tuple[int, str], ...] = ()
    other: str | None = None


@dataclass(frozen=True, slots=True)
class Mem:
    ops: tuple[Op, ...]
    offset: int


@dataclass(frozen=True, slots=True)
class Regs:
    pieces: tuple[tuple[int, int, str | None], ...]  # (offset in value, size, register)
    guards: tuple[Op, ...] = ()  # checks of registers before the value is read
    add: int = 0  # one piece: the value is its register plus this (an address)

    def covering(self, start: int, size: int) -> Regs | None:
        if self.add:  # an address computed from a register: only as a whole
            return self if (start, size) == (0, 8) else None
        inside = tuple((o - start, s, r) for o, s, r in self.pieces
                       if o >= start and o + s <= start + size)
        if sum(s for _, s, _ in inside) != size or any(r is None for _, _, r in inside):
            return None
        return Regs(inside, self.guards)


@dataclass(frozen=True, slots=True)
class Pieces:
    """A value in pieces, each in a register, in memory (a stack slot, a frame slot),
    or nowhere (optimized out). A part of it within one piece is read as that piece
    is; a part across pieces of one kind, as those are."""

    parts: tuple[tuple[int, int, Mem | str | None], ...]  # (offset in value, size, where)

    def covering(self, start: int, size: int) -> Mem | Regs | Pieces | None:
        inside = tuple((o - start, s, w) for o, s, w in self.parts
                       if o >= start and o + s <= start + size)
        if sum(s for _, s, _ in inside) != size or any(w is None for _, _, w in inside):
            return None
        if all(isinstance(w, str) for _, _, w in inside):
            return Regs(tuple((o, s, w) for o, s, w in inside if isinstance(w, str)))
        if len(inside) == 1 and isinstance(inside[0][2], Mem):
            mem = inside[0][2]
            return Mem(mem.ops, mem.offset)
        return Pieces(inside)


Place = Mem | Regs | Pieces | None


def part(place: Place, start: int, size: int) -> Place:
    """The ``size`` bytes at ``start`` of the value at ``place``."""
    if isinstance(place, Mem):
        return Mem(place.ops, place.offset + start)
    if isinstance(place, Regs | Pieces):
        return place.covering(start, size)
    return None


def _slice_words(place: Place, seq: Seq) -> tuple[Place, Place]:
    """Where a string's or slice's pointer and length words are."""
    return part(place, seq.ptr, 8), part(place, seq.length, 8)


@dataclass(frozen=True, slots=True)
class Seq:
    """Where a string's or a sequence's pointer and length are, and its element type."""

    ptr: int
    length: int
    elem: DIE | None
    text: bool  # a string (Go string, Rust String and &str)


def bytes_fetch(place: Place, kind: str, seq: Seq | None,
                unavailable: str) -> Fetch:
    """The fetch of the bytes of the string, sequence or byte array (``kind``) at
    ``place``: ``unavailable`` when they cannot be read there."""
    if isinstance(place, Mem):
        if kind == "array" or seq is None:
            return Fetch("mem_array", place.ops, place.offset)
        return Fetch("mem_slice", place.ops, place.offset + seq.ptr,
                     length=None if seq.length == seq.ptr + 8
                     else place.offset + seq.length)
    if isinstance(place, Regs) and kind != "array" and seq is not None and not place.add:
        ptr, length = place.covering(seq.ptr, 8), place.covering(seq.length, 8)
        if ptr is not None and length is not None:
            return Fetch("reg_slice", place.guards, regs=(ptr.pieces[0][2] or "",
                                                          length.pieces[0][2] or ""))
    if isinstance(place, Pieces) and kind != "array" and seq is not None:
        at, n = _slice_words(place, seq)
        if isinstance(at, Regs) and isinstance(n, Regs) and \
                len(at.pieces) == len(n.pieces) == 1:
            return Fetch("reg_slice", regs=(at.pieces[0][2] or "", n.pieces[0][2] or ""))
        if isinstance(at, Mem) and isinstance(n, Mem) and at.ops == n.ops:
            return Fetch("mem_slice", at.ops, at.offset,
                         length=None if n.offset == at.offset + 8 else n.offset)
        for slot, (word, other) in enumerate(((at, n), (n, at))):  # one in a register
            if isinstance(word, Regs) and len(word.pieces) == 1 and word.pieces[0][2] \
                    and not is_vector(word.pieces[0][2]) and isinstance(other, Mem):
                return Fetch("mem_slice", other.ops, other.offset,
                             regs=(word.pieces[0][2],), slot=slot)
    return Fetch("unavailable", why=unavailable)


def scalar_fetch(place: Place, size: int, unavailable: str) -> Fetch:
    """The fetch of the ``size``-byte value at ``place``: ``unavailable`` when it
    cannot be read there."""
    if isinstance(place, Pieces):
        whole = place.covering(0, size)
        place = whole if not isinstance(whole, Pieces) else None
    if isinstance(place, Mem):
        return Fetch("mem", place.ops, place.offset, size)
    if isinstance(place, Regs) and len(place.pieces) == 1 and place.pieces[0][2]:
        return Fetch("reg", place.guards, offset=place.add, size=size,
                     regs=(place.pieces[0][2],))
    return Fetch("unavailable", why=unavailable)


def follow(place: Place) -> Mem | None:
    """What the pointer at ``place`` points to: the memory at the address its
    register holds (plus the address's offset), or at the word it reads."""
    if isinstance(place, Pieces):
        word = place.covering(0, 8)
        return follow(word) if not isinstance(word, Pieces) else None
    if isinstance(place, Regs):
        piece = place.covering(0, 8)
        reg = piece.pieces[0][2] if piece is not None else None
        return (Mem((*place.guards, Op("reg", reg=reg),
                     *((Op("add", offset=place.add),) if place.add else ())), 0)
                if reg and not is_vector(reg) else None)
    if isinstance(place, Mem):
        return Mem((*place.ops, Op("deref", offset=place.offset)), 0)
    return None


def place_of(loc: Location | None) -> Place:
    """Where a parameter's value is, from its location at the probed instruction."""
    if not loc:
        return None
    if len(loc) == 1 and loc[0].at is not None and loc[0].reg is not None:
        return Mem((Op("reg", reg=loc[0].reg),), loc[0].at)
    if len(loc) == 1 and loc[0].add and loc[0].reg is not None:
        return Regs(((0, loc[0].size, loc[0].reg),), add=loc[0].add)
    if any(p.add for p in loc):
        return None
    if any(p.at is not None for p in loc):
        return _pieces(loc)
    if all(p.stack is not None for p in loc):
        first = loc[0].stack or 0
        expected = first
        for p in loc:
            if p.stack != expected:
                return _pieces(loc)
            expected += p.size
        return Mem((Op("sp", offset=first),), 0)
    if any(p.stack is not None for p in loc):
        return _pieces(loc)
    pieces: list[tuple[int, int, str | None]] = []
    cur = 0
    for p in loc:
        pieces.append((cur, p.size, p.reg))
        cur += p.size
    return Regs(tuple(pieces))


def _pieces(loc: Location) -> Pieces:
    """A location of several pieces, not all registers nor one run of stack slots."""
    parts: list[tuple[int, int, Mem | str | None]] = []
    cur = 0
    for p in loc:
        where: Mem | str | None = \
            Mem((Op("sp", offset=0),), p.stack) if p.stack is not None else \
            Mem((Op("reg", reg=p.reg),), p.at) if p.reg is not None and p.at is not None \
            else p.reg
        parts.append((cur, p.size, where))
        cur += p.size
    return Pieces(tuple(parts))
