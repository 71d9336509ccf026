"""The DIEs a Tree keeps of each unit it walks, in arrays: what a function's name and
place, a copy's origin and a type's name need, 36 bytes a DIE."""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right, insort
from collections.abc import Iterable, Iterator
from typing import TypeAlias

NO_NAME, TEXT = -1, -2  # a kept DIE's name code: none; a string kept aside

# A unit's kept DIEs: offsets, tags, parents, names, references (a string: the runtime's
# array is not subscriptable before Python 3.12).
Block: TypeAlias = "tuple[array[int], array[int], array[int], array[int], array[int]]"


class Kept:
    """The kept DIEs of the units walked: per unit, arrays of offsets (ascending),
    tags, parents, name codes (a .debug_str offset; -(offset + 3) of a name written in
    .debug_info; ``TEXT``; ``NO_NAME``) and what a function's abstract_origin or
    specification names (-1: nothing): 36 bytes a DIE, not tuples and dict entries
    (about 250)."""

    def __init__(self) -> None:
        self.units: dict[int, Block] = {}
        self.starts: list[int] = []  # of the units in ``units``, sorted
        self.texts: dict[int, str] = {}  # names given as strings (.debug_line_str)

    def add(self, unit: int, block: Block) -> None:
        self.units[unit] = block
        insort(self.starts, unit)

    def _find(self, offset: int) -> tuple[Block, int] | None:
        i = bisect_right(self.starts, offset) - 1
        if i < 0:
            return None
        block = self.units[self.starts[i]]
        k = bisect_left(block[0], offset)
        return (block, k) if k < len(block[0]) and block[0][k] == offset else None

    def found(self, offsets: list[int]) -> list[tuple[Block, int] | None]:
        """``_find`` of each of ``offsets`` (ascending), each unit's arrays looked up
        once and searched from where the offset before was found."""
        out: list[tuple[Block, int] | None] = []
        starts, lo, hi, at = self.starts, 0, -1, 0
        block: Block | None = None
        for o in offsets:
            if not lo <= o < hi:
                i = bisect_right(starts, o) - 1
                block = self.units[starts[i]] if i >= 0 else None
                lo = starts[i] if i >= 0 else -1
                hi = starts[i + 1] if i + 1 < len(starts) else 1 << 64
                at = 0
            if block is None:
                out.append(None)
                continue
            k = bisect_left(block[0], o, at)
            if k < len(block[0]) and block[0][k] == o:
                out.append((block, k))
                at = k
            else:
                out.append(None)
        return out

    def __contains__(self, offset: int) -> bool:
        return self._find(offset) is not None

    def get(self, offset: int) -> tuple[int, int, int | str | None] | None:
        """(tag, the DIE it is in or -1, its name: a .debug_str offset, the negated
        (offset + 1) of a name written in .debug_info, a string, or None)."""
        found = self._find(offset)
        if found is None:
            return None
        (_o, tags, parents, names, _r), k = found
        code = names[k]
        name: int | str | None = None if code == NO_NAME else \
            self.texts[offset] if code == TEXT else code if code >= 0 else code + 2
        return tags[k] & 0xFFFF, parents[k], name

    def __getitem__(self, offset: int) -> tuple[int, int, int | str | None]:
        got = self.get(offset)
        if got is None:
            raise KeyError(offset)
        return got

    def ref(self, offset: int) -> int:
        """What the function DIE at ``offset`` refers to (-1: nothing, or not kept)."""
        found = self._find(offset)
        return found[0][4][found[1]] if found is not None else -1

    def refs(self, unit: int) -> Iterator[tuple[int, int]]:
        """(DIE, what it refers to) of the referring DIEs of walked unit ``unit``."""
        block = self.units[unit]
        return ((at, r) for at, r in zip(block[0], block[4], strict=True) if r >= 0)

    def items(self, units: Iterable[int]) -> Iterator[tuple[int, int, int]]:
        """(offset, tag and ``tree.DECLARED``, name code) of the kept DIEs of ``units``
        (walked ones)."""
        for unit in units:
            block = self.units.get(unit)
            if block is not None:
                yield from zip(block[0], block[1], block[3], strict=True)
