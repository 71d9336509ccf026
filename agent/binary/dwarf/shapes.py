"""Turn DWARF type DIEs into ABI shapes (agent.abi.shape), for Go, C and Rust."""

from __future__ import annotations

from elftools.dwarf.die import DIE

from agent.binary.abi.shape import Shape
from agent.binary.dwarf.dies import attr
from agent.binary.dwarf.types import GoKind, TypeNamer, member_offset

_DW_ATE_FLOAT = 0x04
_DW_ATE_COMPLEX_FLOAT = 0x03

_GO_SCALAR_INT = frozenset({
    GoKind.BOOL, GoKind.INT, GoKind.INT8, GoKind.INT16, GoKind.INT32, GoKind.INT64,
    GoKind.UINT, GoKind.UINT8, GoKind.UINT16, GoKind.UINT32, GoKind.UINT64, GoKind.UINTPTR,
    GoKind.CHAN, GoKind.FUNC, GoKind.MAP, GoKind.PTR, GoKind.UNSAFEPTR,
})
_GO_WORDS = {GoKind.STRING: "string", GoKind.SLICE: "slice", GoKind.INTERFACE: "iface"}


def shape_of(namer: TypeNamer, die: DIE | None, depth: int = 0) -> Shape:
    """The ABI shape of a type DIE (typedefs followed)."""
    if die is None or depth > 32:
        return Shape("void", 0, 1)
    kind = namer.go_kind(die)
    stripped = namer.strip(die)
    if kind is None and stripped is not None:
        kind = namer.go_kind(stripped)
    size = namer.size(die) or 0
    if kind is not None:
        return _go_shape(namer, stripped, kind, size, depth)
    return _c_shape(namer, stripped, size, depth)


def _go_shape(namer: TypeNamer, die: DIE | None, kind: int, size: int, depth: int) -> Shape:
    if kind in _GO_SCALAR_INT:
        return Shape("int", size, max(1, min(size, 8)))
    if kind in (GoKind.FLOAT32, GoKind.FLOAT64):
        return Shape("float", size, size)
    if kind in (GoKind.COMPLEX64, GoKind.COMPLEX128):
        return Shape("complex", size, size // 2)
    if kind in _GO_WORDS:
        return Shape(_GO_WORDS[kind], size, 8)
    if kind == GoKind.ARRAY and die is not None:
        elem = shape_of(namer, namer.dwarf.ref(die), depth + 1)
        count = size // elem.size if elem.size else 0
        return Shape("array", size, elem.align, elem=elem, count=count)
    if die is not None:
        return _aggregate(namer, die, size, depth)
    return Shape("int", size, max(1, min(size, 8)))


def _c_shape(namer: TypeNamer, die: DIE | None, size: int, depth: int) -> Shape:
    if die is None:
        return Shape("void", 0, 1)
    tag = die.tag
    if tag == "DW_TAG_base_type":
        enc = attr(die, "DW_AT_encoding")
        if enc == _DW_ATE_FLOAT:
            return Shape("x87", size, 16) if size > 8 else Shape("float", size, size)
        if enc == _DW_ATE_COMPLEX_FLOAT:
            return Shape("complex", size, size // 2)
        return Shape("int", size, max(1, min(size, 8)))
    if tag in ("DW_TAG_pointer_type", "DW_TAG_reference_type", "DW_TAG_enumeration_type",
               "DW_TAG_subroutine_type", "DW_TAG_rvalue_reference_type"):
        return Shape("int", size or 8, max(1, min(size or 8, 8)))
    if tag == "DW_TAG_array_type":
        elem = shape_of(namer, namer.dwarf.ref(die), depth + 1)
        count = size // elem.size if elem.size else 0
        return Shape("array", size, elem.align, elem=elem, count=count)
    return _aggregate(namer, die, size, depth)


def _aggregate(namer: TypeNamer, die: DIE, size: int, depth: int) -> Shape:
    fields: list[tuple[int, Shape]] = []
    for child in die.iter_children():
        if child.tag == "DW_TAG_member" and "DW_AT_bit_size" in child.attributes:
            # A bitfield: what classification needs is the byte it starts in.
            bits = attr(child, "DW_AT_data_bit_offset")
            byte = bits // 8 if isinstance(bits, int) else member_offset(child)
            fields.append((byte, Shape("int", 1, 1)))
        elif child.tag == "DW_TAG_member" and not attr(child, "DW_AT_external"):
            fields.append((member_offset(child),
                           shape_of(namer, namer.dwarf.ref(child), depth + 1)))
        elif child.tag == "DW_TAG_variant_part":
            # A Rust enum: classify it by its bytes as integers (what rustc does for
            # data-carrying enums that fit in registers).
            return Shape("int" if size <= 8 else "struct", size, min(8, size) or 1,
                         tuple((o, Shape("int", min(8, size - o), 1))
                               for o in range(0, size, 8)) if size > 8 else ())
    align = attr(die, "DW_AT_alignment") or max((f.align for _, f in fields), default=1)
    return Shape("struct", size, align, tuple(fields))
