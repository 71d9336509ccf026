"""The part of a type an ABI cares about: class, size, alignment, and the fields inside.

ABI modules take shapes, not DWARF, so they are pure and table-tested.
"""

from __future__ import annotations

from dataclasses import dataclass

# Kinds: "int" (integers, bools, pointers, maps, chans, funcs), "float", "complex",
# "string" {ptr,len}, "slice" {ptr,len,cap}, "iface" {tab,data}, "array", "struct",
# "x87" (long double: always memory), "void".


@dataclass(frozen=True, slots=True)
class Shape:
    kind: str
    size: int
    align: int
    fields: tuple[tuple[int, Shape], ...] = ()  # (offset, shape), for structs and unions
    elem: Shape | None = None  # arrays
    count: int = 0  # arrays

    def leaves(self, base: int = 0) -> list[tuple[int, Shape]]:
        """Scalar leaves with their byte offsets: what register classification looks at."""
        if self.kind == "struct":
            return [leaf for off, f in self.fields for leaf in f.leaves(base + off)]
        if self.kind == "array" and self.elem is not None:
            step = self.elem.size
            return [leaf for i in range(self.count) for leaf in self.elem.leaves(base + i * step)]
        if self.kind == "complex":
            half = Shape("float", self.size // 2, self.align)
            return [(base, half), (base + self.size // 2, half)]
        if self.kind in ("string", "iface"):
            word = Shape("int", 8, 8)
            return [(base, word), (base + 8, word)]
        if self.kind == "slice":
            word = Shape("int", 8, 8)
            return [(base, word), (base + 8, word), (base + 16, word)]
        return [(base, self)] if self.size else []


def word(kind: str = "int", size: int = 8) -> Shape:
    return Shape(kind, size, min(size, 8) or 1)


def struct(*fields: Shape) -> Shape:
    """A struct laid out with natural alignment (for tests and hand-made shapes)."""
    off = 0
    placed: list[tuple[int, Shape]] = []
    align = 1
    for f in fields:
        off = -(-off // f.align) * f.align
        placed.append((off, f))
        off += f.size
        align = max(align, f.align)
    return Shape("struct", -(-off // align) * align, align, tuple(placed))


def align_up(n: int, a: int) -> int:
    return -(-n // a) * a if a > 1 else n
