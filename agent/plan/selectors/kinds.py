"""What a type is to a selector, from DWARF: its kind (the decoding a value of it takes,
or what a step can do with it), its members, where a string's or a sequence's pointer
and length are, and a Rust enum's variants; and the two moves every language's steps
make: to a member, and through a pointer.
"""

from __future__ import annotations

from dataclasses import dataclass

from elftools.dwarf.die import DIE

from agent.binary.dwarf.dies import DW_AT_GO_KIND, attr, die_name
from agent.binary.dwarf.reader import Dwarf
from agent.binary.dwarf.types import GoKind, TypeNamer, member_offset
from agent.plan.selectors.places import (
    Mem,
    Pieces,
    Place,
    Regs,
    SelectError,
    Seq,
    follow,
    part,
)

_ENCODING = {2: "bool", 4: "float", 5: "int", 6: "int", 7: "uint", 8: "uint", 0x10: "uint"}


@dataclass(frozen=True, slots=True)
class Variant:
    name: str
    value: int | None  # the discriminant that selects it; None: every other value
    offset: int
    type: DIE | None


@dataclass(frozen=True, slots=True)
class Enum:
    """A Rust enum with data: the discriminant (offset, size; None with one variant)."""

    discr: tuple[int, int] | None
    variants: tuple[Variant, ...]

    def guard(self, v: Variant) -> tuple[tuple[int, ...], bool]:
        """(values, negate): the discriminants that select ``v``."""
        if v.value is not None:
            return (v.value,), False
        return tuple(o.value for o in self.variants if o.value is not None), True


class Types:
    """What one binary's types are to a selector: their kinds, members, sequences and
    enums, and the moves from a value to a member and through a pointer that every
    language's steps make."""

    def __init__(self, dwarf: Dwarf, namer: TypeNamer) -> None:
        self.dwarf = dwarf
        self.namer = namer
        # each struct's members, by its DIE's offset: a preset asks of the same few
        # types thousands of times, and pyelftools parses a DIE's children on each walk
        self._members: dict[int, dict[str, tuple[int, DIE | None]]] = {}

    def rust(self, die: DIE | None) -> bool:
        return die is not None and self.dwarf.unit_language(die.cu) == "rust"

    def _go_kind(self, die: DIE | None) -> int | None:
        """DW_AT_go_kind of the type or of a typedef on the way to it (a map's)."""
        for _ in range(16):
            if die is None:
                return None
            gk = attr(die, DW_AT_GO_KIND)
            if gk is not None or die.tag != "DW_TAG_typedef":
                return int(gk) if gk is not None else None
            die = self.dwarf.ref(die)
        return None

    def kind(self, die: DIE | None) -> str:
        d = self.namer.strip(die)
        if d is None:
            return "void"
        gk = attr(d, DW_AT_GO_KIND)
        if gk == GoKind.STRING:
            return "string"
        if gk == GoKind.SLICE:
            return "slice"
        if gk == GoKind.INTERFACE or self._go_kind(die) == GoKind.INTERFACE:
            return "interface"
        if self._go_kind(die) == GoKind.MAP:
            return "map"
        if d.tag in ("DW_TAG_pointer_type", "DW_TAG_reference_type",
                     "DW_TAG_rvalue_reference_type"):
            return "pointer"
        if d.tag in ("DW_TAG_structure_type", "DW_TAG_union_type", "DW_TAG_class_type"):
            names = {die_name(c) for c in d.iter_children() if c.tag == "DW_TAG_member"}
            if {"data_ptr", "length"} <= names:  # Rust &str, &[T], Box<str>
                return "string" if self._str(d) else "slice"
            if self.rust(d):
                if self._enum(d) is not None:
                    return "enum"
                name = self.namer.name(d)
                if name == "alloc::string::String":
                    return "string"
                if name.startswith("alloc::vec::Vec<"):
                    return "slice"
            return "struct"
        if d.tag == "DW_TAG_array_type":
            return "array"
        if d.tag == "DW_TAG_base_type":
            return _ENCODING.get(attr(d, "DW_AT_encoding", 0), "uint")
        if d.tag == "DW_TAG_enumeration_type":
            return "enum" if self.rust(d) else "int"
        if d.tag == "DW_TAG_subroutine_type":
            return "addr"
        return "other"

    def _str(self, d: DIE) -> bool:
        name = self.namer.name(d)
        return name in ("&str", "&mut str", "*const str", "*mut str") or \
            name.startswith(("alloc::boxed::Box<str", "alloc::rc::Rc<str", "alloc::sync::Arc<str"))

    def members(self, die: DIE | None) -> dict[str, tuple[int, DIE | None]]:
        d = self.namer.strip(die)
        if d is None:
            return {}
        out = self._members.get(d.offset)
        if out is None:
            out = self._members[d.offset] = {
                die_name(c) or "": (member_offset(c), self.dwarf.ref(c))
                for c in d.iter_children() if c.tag == "DW_TAG_member" and die_name(c)}
        return dict(out)

    def _target(self, die: DIE | None) -> DIE | None:
        d = self.namer.strip(die)
        return self.dwarf.ref(d) if d is not None else None

    def _template(self, d: DIE, name: str) -> DIE | None:
        return next((self.dwarf.ref(c) for c in d.iter_children()
                     if c.tag == "DW_TAG_template_type_param" and die_name(c) == name), None)

    def _pointer_leaf(self, die: DIE | None, depth: int = 0) -> tuple[int, DIE] | None:
        """The first pointer inside a struct (through nested structs): a Vec's buffer."""
        d = self.namer.strip(die)
        if d is None or depth > 8:
            return None
        if d.tag == "DW_TAG_pointer_type":
            return 0, d
        if d.tag != "DW_TAG_structure_type":
            return None
        for off, mtype in self.members(d).values():
            found = self._pointer_leaf(mtype, depth + 1)
            if found is not None:
                return off + found[0], found[1]
        return None

    def _seq(self, die: DIE | None) -> Seq | None:
        """Where a string's or a sequence's pointer and length are: Go strings and
        slices, Rust &str, &[T], String and Vec<T>."""
        d = self.namer.strip(die)
        if d is None:
            return None
        m = self.members(d)
        if "data_ptr" in m and "length" in m:
            return Seq(m["data_ptr"][0], m["length"][0], self._target(m["data_ptr"][1]),
                       self._str(d))
        gk = attr(d, DW_AT_GO_KIND)
        if gk == GoKind.STRING:
            return Seq(m.get("str", (0, None))[0], m.get("len", (8, None))[0], None, True)
        if gk == GoKind.SLICE:
            ptr = m.get("array", (0, None))
            return Seq(ptr[0], m.get("len", (8, None))[0], self._target(ptr[1]), False)
        if not self.rust(d):
            return None
        name = self.namer.name(d)
        if name == "alloc::string::String" and "vec" in m:
            inner = self._seq(m["vec"][1])
            off = m["vec"][0]
            return Seq(off + inner.ptr, off + inner.length, inner.elem, True) if inner else None
        if name.startswith("alloc::vec::Vec<") and "len" in m and "buf" in m:
            leaf = self._pointer_leaf(m["buf"][1])
            if leaf is None:
                return None
            elem = self._template(d, "T") or self.dwarf.ref(leaf[1])
            return Seq(m["buf"][0] + leaf[0], m["len"][0], elem, False)
        return None

    def _elem(self, die: DIE) -> DIE | None:
        """Element type of an array, Go slice or Rust slice."""
        d = self.namer.strip(die)
        if d is not None and d.tag == "DW_TAG_array_type":
            return self.dwarf.ref(d)
        seq = self._seq(die)
        return seq.elem if seq is not None else None

    def _count(self, die: DIE) -> int | None:
        d = self.namer.strip(die)
        size, elem = self.namer.size(d), self._elem(die)
        esize = self.namer.size(elem) if elem is not None else None
        return size // esize if size is not None and esize else None

    def _size(self, die: DIE | None) -> int:
        return self.namer.size(die) or 0

    def _enum(self, d: DIE | None) -> Enum | None:
        """A Rust enum with data (a struct with a DW_TAG_variant_part); None otherwise."""
        if d is None:
            return None
        part = next((c for c in d.iter_children() if c.tag == "DW_TAG_variant_part"), None)
        if part is None:
            return None
        discr: tuple[int, int] | None = None
        variants: list[Variant] = []
        for c in part.iter_children():
            if c.tag == "DW_TAG_member":
                discr = (member_offset(c), self._size(self.dwarf.ref(c)))
            elif c.tag == "DW_TAG_variant":
                value = attr(c, "DW_AT_discr_value")
                variants += [Variant(_variant_name(m, self.dwarf.ref(m)),
                                     value if isinstance(value, int) else None,
                                     member_offset(m), self.dwarf.ref(m))
                             for m in c.iter_children() if m.tag == "DW_TAG_member"]
        return Enum(discr, tuple(variants))

    def _option(self, d: DIE | None) -> Variant | None:
        """The ``Some`` variant of an ``Option``."""
        if d is None or not self.namer.name(d).startswith("core::option::Option<"):
            return None
        e = self._enum(d)
        return next((v for v in e.variants if v.name == "Some"), None) if e else None

    def _fields(self, die: DIE | None) -> str:
        """What can be read from a type, for a hint."""
        d = self.namer.strip(die)
        e = self._enum(d)
        if e is not None:
            return "its variants: " + ", ".join(v.name for v in e.variants)
        names = [n.removeprefix("__") if n.startswith("__") and n[2:].isdigit() else n
                 for n in self.members(d)]
        return "its fields: " + ", ".join(names) if names else "it has no fields"

    def _deref(self, place: Place, tdie: DIE | None, path: str
               ) -> tuple[Mem | None, DIE]:
        target = self._target(tdie)
        if target is None and self.dwarf.from_metadata:
            name = self.namer.name(tdie)
            raise SelectError(f"{path} points to {name.removeprefix('*')}, which has no type "
                              "descriptor in this stripped binary: its layout is unknown",
                              "read the pointer itself, or give the binary's debug info "
                              "(--debuginfo)")
        if target is None:
            raise SelectError(f"{path} is an untyped pointer ({self.namer.name(tdie)})",
                              "read it as a value, or cast in the program")
        return follow(place), target

    def _member(self, place: Place, member: tuple[int, DIE | None]
                ) -> tuple[Place, DIE | None]:
        off, mtype = member  # in registers or pieces: as many bytes as its type has
        return part(place, off, self._size(mtype) if isinstance(place, Regs | Pieces) else 0), \
            mtype


def _variant_name(member: DIE, vtype: DIE | None) -> str:
    """A variant's name: its member's, or for a coroutine (an async fn's future), whose
    members are numbered, its type's (``Unresumed``, ``Returned``, ``Suspend0``)."""
    name = die_name(member) or "?"
    if name.isdigit() and vtype is not None and die_name(vtype):
        return die_name(vtype) or name
    return name
