"""Types from DWARF: display names, sizes, and struct/union layouts (pahole's job).

Go's func-typed members carry ``DW_AT_byte_size`` 8 on their subroutine type; gdb 13
prints 1 and pahole 1.24 fails on them. noop reads the attribute the compiler wrote.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from elftools.dwarf.die import DIE

from agent.binary.dwarf.dies import DW_AT_GO_KIND, attr, die_name, tag
from agent.binary.dwarf.reader import Dwarf

_QUALIFIERS = {"DW_TAG_const_type": "const", "DW_TAG_volatile_type": "volatile",
               "DW_TAG_restrict_type": "restrict", "DW_TAG_atomic_type": "_Atomic"}
_TRANSPARENT = frozenset({"DW_TAG_typedef", *_QUALIFIERS})
_AGGREGATE_KEYWORD = {"DW_TAG_structure_type": "struct", "DW_TAG_union_type": "union",
                      "DW_TAG_class_type": "class", "DW_TAG_enumeration_type": "enum"}


@dataclass(frozen=True, slots=True)
class Member:
    """A member of a struct or union.

    ``offset`` is in bytes from the start of the aggregate. For a bitfield,
    ``bit_offset`` counts bits from that byte (as gdb's ``ptype /o`` does) and
    ``bit_size`` is its width; both are None for ordinary members.
    """

    name: str
    type: str
    offset: int
    size: int
    bit_offset: int | None = None
    bit_size: int | None = None
    kind: str = ""
    # Rust enums (DW_TAG_variant_part): the member holding the discriminant, and for
    # each variant's member the discriminant value that selects it (None: the default).
    discriminant: bool = False
    discr_value: int | None = None


@dataclass(frozen=True, slots=True)
class Layout:
    """A struct/union/class layout: name as the binary has it, size, top-level members."""

    name: str
    kind: str
    size: int
    members: tuple[Member, ...]
    language: str
    alignment: int | None = None


@dataclass(frozen=True, slots=True)
class GoKind:
    """reflect.Kind numbers Go writes in DW_AT_go_kind (runtime/type.go)."""

    BOOL = 1
    INT, INT8, INT16, INT32, INT64 = 2, 3, 4, 5, 6
    UINT, UINT8, UINT16, UINT32, UINT64, UINTPTR = 7, 8, 9, 10, 11, 12
    FLOAT32, FLOAT64, COMPLEX64, COMPLEX128 = 13, 14, 15, 16
    ARRAY, CHAN, FUNC, INTERFACE, MAP, PTR, SLICE, STRING, STRUCT, UNSAFEPTR = range(17, 27)


class TypeNamer:
    """Display names and sizes of type DIEs, memoised by DIE offset."""

    def __init__(self, dwarf: Dwarf) -> None:
        self.dwarf = dwarf
        self._names: dict[int, str] = {}
        self._sizes: dict[int, int | None] = {}

    def strip(self, die: DIE | None) -> DIE | None:
        """Follow typedefs and qualifiers to the underlying type."""
        seen = 0
        while die is not None and die.tag in _TRANSPARENT and seen < 64:
            die = self.dwarf.ref(die)
            seen += 1
        return die

    def name(self, die: DIE | None) -> str:
        if die is None:
            return "void"
        cached = self._names.get(die.offset)
        if cached is None:
            self._names[die.offset] = "?"  # breaks cycles through self-referencing types
            cached = self._compute_name(die)
            self._names[die.offset] = cached
        return cached

    def _compute_name(self, die: DIE) -> str:
        name = die_name(die)
        lang = self.dwarf.unit_language(die.cu)
        dtag = tag(die)
        if dtag in _QUALIFIERS:
            inner = self.name(self.dwarf.ref(die))
            return f"{_QUALIFIERS[dtag]} {inner}"
        if name is not None:
            if lang in ("rust", "c++"):
                return self.qualified(die)
            if lang == "c" and dtag in _AGGREGATE_KEYWORD:
                return f"{_AGGREGATE_KEYWORD[dtag]} {name}"
            return name
        if dtag == "DW_TAG_pointer_type" or dtag == "DW_TAG_reference_type":
            target = self.dwarf.ref(die)
            if target is not None and target.tag == "DW_TAG_subroutine_type":
                ret, params = self._signature(target)
                return f"{ret} (*)({params})"
            sigil = " *" if dtag == "DW_TAG_pointer_type" else " &"
            return self.name(target) + sigil
        if dtag == "DW_TAG_array_type":
            elem = self.name(self.dwarf.ref(die))
            return elem + "".join(f"[{n}]" if n is not None else "[]"
                                  for n in self._dimensions(die))
        if dtag == "DW_TAG_subroutine_type":
            ret, params = self._signature(die)
            return f"{ret} ({params})"
        if dtag in _AGGREGATE_KEYWORD:
            return f"{_AGGREGATE_KEYWORD[dtag]} {{...}}"
        return dtag.removeprefix("DW_TAG_")

    def _signature(self, die: DIE) -> tuple[str, str]:
        params = [self.name(self.dwarf.ref(c)) for c in die.iter_children()
                  if c.tag == "DW_TAG_formal_parameter"]
        return self.name(self.dwarf.ref(die)), ", ".join(params) or "void"

    def qualified(self, die: DIE) -> str:
        """``a::b::Name`` from the enclosing namespaces and types (Rust, C++)."""
        parts = [die_name(die) or "?"]
        parent = self.dwarf.parent(die)
        while parent is not None and parent.tag != "DW_TAG_compile_unit":
            pname = die_name(parent)
            if pname:
                parts.append(pname)
            parent = self.dwarf.parent(parent)
        return "::".join(reversed(parts))

    def _dimensions(self, die: DIE) -> list[int | None]:
        dims: list[int | None] = []
        for sub in die.iter_children():
            if sub.tag != "DW_TAG_subrange_type":
                continue
            count = attr(sub, "DW_AT_count")
            if count is None and "DW_AT_upper_bound" in sub.attributes:
                upper = attr(sub, "DW_AT_upper_bound")
                lower = attr(sub, "DW_AT_lower_bound", 0)
                count = upper - lower + 1 if isinstance(upper, int) else None
            dims.append(count if isinstance(count, int) else None)
        return dims

    def size(self, die: DIE | None) -> int | None:
        """Size in bytes, following typedefs; None for void and unsized types."""
        if die is None:
            return None
        if die.offset in self._sizes:
            return self._sizes[die.offset]
        self._sizes[die.offset] = None
        size = self._compute_size(die)
        self._sizes[die.offset] = size
        return size

    def _compute_size(self, die: DIE) -> int | None:
        explicit = attr(die, "DW_AT_byte_size")
        if isinstance(explicit, int):
            return explicit
        if die.tag in _TRANSPARENT:
            return self.size(self.dwarf.ref(die))
        if die.tag in ("DW_TAG_pointer_type", "DW_TAG_reference_type",
                       "DW_TAG_rvalue_reference_type", "DW_TAG_ptr_to_member_type"):
            return int(die.cu["address_size"])
        if die.tag == "DW_TAG_array_type":
            elem = self.size(self.dwarf.ref(die))
            if elem is None:
                return None
            total = elem
            for n in self._dimensions(die):
                if n is None:
                    return 0
                total *= n
            return total
        if die.tag == "DW_TAG_enumeration_type":
            return self.size(self.dwarf.ref(die))
        return None

    def go_kind(self, die: DIE | None) -> int | None:
        return None if die is None else attr(die, DW_AT_GO_KIND)


def layout_of(dwarf: Dwarf, namer: TypeNamer, die: DIE, display_name: str) -> Layout:
    """The layout of an aggregate type DIE (typedefs already followed by the caller)."""
    kind = tag(die).removeprefix("DW_TAG_").removesuffix("_type")
    members: list[Member] = []
    for child in die.iter_children():
        if child.tag == "DW_TAG_member" and not attr(child, "DW_AT_external"):
            members.append(_member(dwarf, namer, child))
        elif child.tag == "DW_TAG_variant_part":
            members.extend(_variant_members(dwarf, namer, child))
    members.sort(key=lambda m: (m.offset, (m.bit_offset or 0)))
    size = namer.size(die)
    return Layout(display_name, kind, size or 0, tuple(members),
                  dwarf.unit_language(die.cu), attr(die, "DW_AT_alignment"))


def _member(dwarf: Dwarf, namer: TypeNamer, child: DIE) -> Member:
    mtype = dwarf.ref(child)
    tname = namer.name(mtype)
    size = namer.size(mtype) or 0
    base = member_offset(child)
    stripped = namer.strip(mtype)
    kind = tag(stripped).removeprefix("DW_TAG_") if stripped is not None else "void"
    name = die_name(child) or ""
    bit_size = attr(child, "DW_AT_bit_size")
    if bit_size is None:
        return Member(name, tname, base, size, kind=kind)
    if "DW_AT_data_bit_offset" in child.attributes:
        bits = attr(child, "DW_AT_data_bit_offset")
    else:  # DWARF 2/3: DW_AT_bit_offset counts from the storage unit's most significant bit
        storage = attr(child, "DW_AT_byte_size", size)
        bits = base * 8 + storage * 8 - attr(child, "DW_AT_bit_offset", 0) - bit_size
    return Member(name, tname, bits // 8, size, bits % 8, bit_size, kind)


def member_offset(child: DIE) -> int:
    loc = child.attributes.get("DW_AT_data_member_location")
    if loc is None:
        return 0
    if isinstance(loc.value, int):
        return loc.value
    # DWARF 2 style: an expression, in practice DW_OP_plus_uconst N.
    raw = list(loc.value)
    if raw and raw[0] == 0x23:
        value = shift = 0
        for b in raw[1:]:
            value |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                break
        return value
    return 0


def _variant_members(dwarf: Dwarf, namer: TypeNamer, part: DIE) -> list[Member]:
    """Members of a Rust enum's DW_TAG_variant_part: the discriminant, then each variant."""
    out: list[Member] = []
    for child in part.iter_children():
        if child.tag == "DW_TAG_member":
            m = _member(dwarf, namer, child)
            out.append(replace(m, name=m.name or "<discriminant>", discriminant=True))
        elif child.tag == "DW_TAG_variant":
            value = attr(child, "DW_AT_discr_value")
            out.extend(replace(_member(dwarf, namer, m), discr_value=value)
                       for m in child.iter_children() if m.tag == "DW_TAG_member")
    return out
