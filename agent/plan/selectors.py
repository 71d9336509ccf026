"""Selectors: turn ``c.desc.fqName`` into a fetch program, walking the types in DWARF.

A value starts where the parameter lives at the probed instruction (registers or a
stack slot), follows pointers (Go's ``p.f`` through a pointer, as in Go), struct
fields, array and slice indexes, and ends in a decoding chosen from the final type.
"""

from __future__ import annotations

from dataclasses import dataclass

from elftools.dwarf.die import DIE

from agent.plan.model import Fetch, Op
from agent.spec.probes import Step
from agent.target.amd64 import is_vector
from agent.target.dwarf.locations import Location
from agent.target.dwarf.reader import DW_AT_GO_KIND, Dwarf, attr, die_name
from agent.target.dwarf.types import GoKind, TypeNamer, member_offset

_ENCODING = {2: "bool", 4: "float", 5: "int", 6: "int", 7: "uint", 8: "uint", 0x10: "uint"}


class SelectError(Exception):
    """A selector that does not fit the types; ``hint`` says what does."""

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


@dataclass(frozen=True, slots=True)
class _Mem:
    ops: tuple[Op, ...]
    offset: int


@dataclass(frozen=True, slots=True)
class _Regs:
    pieces: tuple[tuple[int, int, str | None], ...]  # (offset in value, size, register)

    def covering(self, start: int, size: int) -> _Regs | None:
        inside = tuple((o - start, s, r) for o, s, r in self.pieces
                       if o >= start and o + s <= start + size)
        if sum(s for _, s, _ in inside) != size or any(r is None for _, _, r in inside):
            return None
        return _Regs(inside)


@dataclass(frozen=True, slots=True)
class Selected:
    fetch: Fetch
    decode: str
    size: int
    cap: int
    type: str


class Walker:
    """Resolves selectors against one binary's types."""

    def __init__(self, dwarf: Dwarf, namer: TypeNamer) -> None:
        self.dwarf = dwarf
        self.namer = namer

    # -- types ---------------------------------------------------------------------
    def kind(self, die: DIE | None) -> str:
        d = self.namer.strip(die)
        if d is None:
            return "void"
        gk = attr(d, DW_AT_GO_KIND)
        if gk == GoKind.STRING:
            return "string"
        if gk == GoKind.SLICE:
            return "slice"
        if gk == GoKind.INTERFACE:
            return "interface"
        if d.tag == "DW_TAG_pointer_type":
            return "pointer"
        if d.tag in ("DW_TAG_structure_type", "DW_TAG_union_type", "DW_TAG_class_type"):
            names = {die_name(c) for c in d.iter_children() if c.tag == "DW_TAG_member"}
            if {"data_ptr", "length"} <= names:  # Rust &str, &[T]
                return "string" if die_name(d) == "&str" else "slice"
            return "struct"
        if d.tag == "DW_TAG_array_type":
            return "array"
        if d.tag == "DW_TAG_base_type":
            return _ENCODING.get(attr(d, "DW_AT_encoding", 0), "uint")
        if d.tag == "DW_TAG_enumeration_type":
            return "int"
        if d.tag == "DW_TAG_subroutine_type":
            return "addr"
        return "other"

    def members(self, die: DIE) -> dict[str, tuple[int, DIE | None]]:
        d = self.namer.strip(die)
        out: dict[str, tuple[int, DIE | None]] = {}
        if d is None:
            return out
        for c in d.iter_children():
            if c.tag == "DW_TAG_member" and die_name(c):
                out[die_name(c) or ""] = (member_offset(c), self.dwarf.ref(c))
        return out

    def _target(self, die: DIE | None) -> DIE | None:
        d = self.namer.strip(die)
        return self.dwarf.ref(d) if d is not None else None

    def _elem(self, die: DIE) -> DIE | None:
        """Element type of an array, Go slice or Rust slice."""
        d = self.namer.strip(die)
        if d is not None and d.tag == "DW_TAG_array_type":
            return self.dwarf.ref(d)
        m = self.members(die)
        ptr = m.get("array") or m.get("data_ptr")
        return self._target(ptr[1]) if ptr is not None else None

    def _count(self, die: DIE) -> int | None:
        d = self.namer.strip(die)
        size, elem = self.namer.size(d), self._elem(die)
        esize = self.namer.size(elem) if elem is not None else None
        return size // esize if size is not None and esize else None

    def _size(self, die: DIE | None) -> int:
        return self.namer.size(die) or 0

    # -- walking -------------------------------------------------------------------
    def select(self, steps: tuple[Step, ...], start: Location | None, tdie: DIE | None,
               decode: str | None, cap: int, unavailable: str = "") -> Selected:
        """Walk ``steps`` (after the parameter name) from a parameter at ``start``."""
        place: _Mem | _Regs | None = _start(start)
        path = str(steps[0][1])
        for step, arg in steps[1:]:
            if step == "field":
                place, tdie = self._field(place, tdie, str(arg), path)
                path += f".{arg}"
            else:
                place, tdie = self._index(place, tdie, int(arg), path)
                path += f"[{arg}]"
        return self._final(place, tdie, decode, cap, path,
                           unavailable or "no location for it at this instruction")

    def _deref(self, place: _Mem | _Regs | None, tdie: DIE | None, path: str
               ) -> tuple[_Mem | None, DIE]:
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
        if isinstance(place, _Regs):
            piece = place.covering(0, 8)
            reg = piece.pieces[0][2] if piece is not None else None
            return (_Mem((Op("reg", reg=reg),), 0) if reg and not is_vector(reg)
                    else None), target
        if isinstance(place, _Mem):
            return _Mem((*place.ops, Op("deref", offset=place.offset)), 0), target
        return None, target

    def _field(self, place: _Mem | _Regs | None, tdie: DIE | None, name: str, path: str
               ) -> tuple[_Mem | _Regs | None, DIE | None]:
        kind = self.kind(tdie)
        if kind == "pointer":
            place, tdie = self._deref(place, tdie, path)
            kind = self.kind(tdie)
        if kind not in ("struct", "string", "slice") or tdie is None:
            raise SelectError(f"{path} is {self.namer.name(tdie)}, not a struct or a pointer "
                              "to one", f"drop '.{name}'")
        members = self.members(tdie)
        if name not in members:
            shown = ", ".join(members) or "none"
            raise SelectError(f"{self.namer.name(tdie)} has no field {name!r}",
                              f"its fields: {shown}")
        off, mtype = members[name]
        if isinstance(place, _Mem):
            return _Mem(place.ops, place.offset + off), mtype
        if isinstance(place, _Regs):
            return place.covering(off, self._size(mtype)), mtype
        return None, mtype

    def _index(self, place: _Mem | _Regs | None, tdie: DIE | None, i: int, path: str
               ) -> tuple[_Mem | _Regs | None, DIE | None]:
        kind = self.kind(tdie)
        if kind == "pointer":
            target = self._target(tdie)
            place, tdie = self._deref(place, tdie, path)
            if self.kind(target) != "array":  # C: p[i] is *(p + i)
                size = self._size(target)
                return (_Mem(place.ops, place.offset + i * size) if place else None), target
            kind = "array"
        if kind == "array" and tdie is not None:
            elem, count = self._elem(tdie), self._count(tdie)
            if count is not None and i >= count:
                raise SelectError(f"{path}[{i}] is out of range: "
                                  f"{self.namer.name(tdie)} has {count} elements")
            size = self._size(elem)
            if isinstance(place, _Mem):
                return _Mem(place.ops, place.offset + i * size), elem
            if isinstance(place, _Regs):
                return place.covering(i * size, size), elem
            return None, elem
        if kind == "slice" and tdie is not None:
            elem = self._elem(tdie)
            size = self._size(elem)
            if isinstance(place, _Mem):
                return _Mem((*place.ops, Op("index", offset=place.offset, index=i,
                                            size=size)), 0), elem
            if isinstance(place, _Regs):
                ptr, length = place.covering(0, 8), place.covering(8, 8)
                if ptr is None or length is None:
                    return None, elem
                return _Mem((Op("bound", reg=length.pieces[0][2] or "", index=i),
                             Op("reg", reg=ptr.pieces[0][2] or "")), i * size), elem
            return None, elem
        raise SelectError(f"{path} is {self.namer.name(tdie)}: it cannot be indexed",
                          "index arrays, slices and pointers")

    def _final(self, place: _Mem | _Regs | None, tdie: DIE | None, decode: str | None,
               cap: int, path: str, unavailable: str) -> Selected:
        if decode not in (None, "addr") and self.kind(tdie) == "pointer":
            place, tdie = self._deref(place, tdie, path)  # `as: string` on a *string
        kind, tname, size = self.kind(tdie), self.namer.name(tdie), self._size(tdie)
        natural = {"pointer": "addr", "string": "string", "slice": "bytes",
                   "array": "bytes"}.get(kind, kind)
        if kind == "slice" and tdie is not None:
            elem = self._elem(tdie)
            if self._size(elem) != 1:
                natural = "slice"
        if kind == "array" and tdie is not None and self._size(self._elem(tdie)) != 1:
            natural = "array"
        want = decode or natural
        if natural in ("struct", "slice", "array", "interface", "other", "void"):
            hint = ("its fields: " + ", ".join(self.members(tdie))) \
                if natural == "struct" and tdie is not None \
                else "select an element with [i]" if natural in ("slice", "array") else ""
            if natural == "interface":
                hint = "interfaces are not followed yet: read a concrete parameter"
            if not (decode in ("int", "uint", "addr") and size in (1, 2, 4, 8)):
                raise SelectError(f"{path} is {tname}, which has no single value", hint)
        byteish = natural in ("string", "bytes")
        if want in ("string", "bytes") and not byteish:
            raise SelectError(f"{path} is {tname}: it cannot be read as {want}",
                              "strings come from Go strings, []byte and byte arrays")
        if want in ("int", "uint", "float", "bool", "addr") and byteish:
            raise SelectError(f"{path} is {tname}: it cannot be read as {want}",
                              f"read it as {natural}")
        if want == "float" and size not in (4, 8):
            raise SelectError(f"{path} is {tname} ({size} bytes): floats are 4 or 8 bytes")
        if byteish:
            if kind == "array" and tdie is not None:
                cap = min(cap, self._count(tdie) or cap)
            return Selected(self._bytes_fetch(place, kind, unavailable), want, cap, cap, tname)
        return Selected(self._scalar_fetch(place, size, unavailable), want, size, 0, tname)

    @staticmethod
    def _bytes_fetch(place: _Mem | _Regs | None, kind: str, unavailable: str) -> Fetch:
        if isinstance(place, _Mem):
            return Fetch("mem_array" if kind == "array" else "mem_slice", place.ops,
                         place.offset)
        if isinstance(place, _Regs) and kind != "array":
            ptr, length = place.covering(0, 8), place.covering(8, 8)
            if ptr is not None and length is not None:
                return Fetch("reg_slice", regs=(ptr.pieces[0][2] or "",
                                                length.pieces[0][2] or ""))
        return Fetch("unavailable", why=unavailable)

    @staticmethod
    def _scalar_fetch(place: _Mem | _Regs | None, size: int, unavailable: str) -> Fetch:
        if isinstance(place, _Mem):
            return Fetch("mem", place.ops, place.offset, size)
        if isinstance(place, _Regs) and len(place.pieces) == 1 and place.pieces[0][2]:
            return Fetch("reg", size=size, regs=(place.pieces[0][2],))
        return Fetch("unavailable", why=unavailable)


def _start(loc: Location | None) -> _Mem | _Regs | None:
    """Where a parameter's value is, from its location at the probed instruction."""
    if not loc:
        return None
    if all(p.stack is not None for p in loc):
        first = loc[0].stack or 0
        expected = first
        for p in loc:
            if p.stack != expected:
                return None
            expected += p.size
        return _Mem((Op("sp", offset=first),), 0)
    pieces: list[tuple[int, int, str | None]] = []
    cur = 0
    for p in loc:
        if p.stack is not None:
            return None
        pieces.append((cur, p.size, p.reg))
        cur += p.size
    return _Regs(tuple(pieces))
