"""Walks a selector's steps from a parameter to the value they select: fields (through
pointers, as Go's ``p.f`` does), array, slice and pointer indexes (C's ``p[i]`` is
``*(p + i)``), ``len()``, and the decoding the final type takes; Go's and Rust's own
steps come from ``go`` and ``rust``.
"""

from __future__ import annotations

from typing import Any

from elftools.dwarf.die import DIE

from agent.binary.dwarf.locations import Location
from agent.binary.dwarf.reader import Dwarf
from agent.binary.dwarf.types import TypeNamer
from agent.config.model import Step
from agent.plan.fetches import Op, decode_of
from agent.plan.selectors.go import GoSteps
from agent.plan.selectors.places import (
    Mem,
    Pieces,
    Place,
    Regs,
    Selected,
    SelectError,
    Seq,
    bytes_fetch,
    part,
    place_of,
    scalar_fetch,
)
from agent.plan.selectors.rust import RustSteps


class Walker(GoSteps, RustSteps):
    """Resolves selectors against one binary's types."""

    def __init__(self, dwarf: Dwarf, namer: TypeNamer) -> None:
        super().__init__(dwarf, namer)
        self._selected: dict[tuple[Any, ...], Selected] = {}

    def select(self, steps: tuple[Step, ...], start: Location | None, tdie: DIE | None,
               decode: str | None, cap: int, unavailable: str = "") -> Selected:
        """Walk ``steps`` (after the parameter name) from a parameter at ``start``; a
        last step ``len`` reads the length of what the others selected. Kept: a preset
        asks the same of the same type at each of hundreds of sites."""
        key = (steps, start, tdie.offset if tdie is not None else None, decode, cap,
               unavailable)
        got = self._selected.get(key)
        if got is None:
            got = self._selected[key] = self._select(steps, start, tdie, decode, cap,
                                                     unavailable)
        return got

    def _select(self, steps: tuple[Step, ...], start: Location | None, tdie: DIE | None,
                decode: str | None, cap: int, unavailable: str) -> Selected:
        place: Place = place_of(start)
        path = str(steps[0][1])
        why = unavailable or "no location for it at this instruction"
        for step, arg in steps[1:]:
            if step == "field":
                place, tdie = self._field(place, tdie, str(arg), path)
                path += f".{arg}"
            elif step == "len":
                return self._len(place, tdie, decode, path, why)
            elif step == "assert":
                place, tdie = self._assert(place, tdie, str(arg), path)
                path += f".({arg})"
            elif step == "error":
                return self._error_text(place, tdie, decode, cap, path, why)
            else:
                place, tdie = self._index(place, tdie, int(arg), path)
                path += f"[{arg}]"
        return self._final(place, tdie, decode, cap, path, why)

    def _field(self, place: Place, tdie: DIE | None, name: str, path: str
               ) -> tuple[Place, DIE | None]:
        rust = self.rust(self.namer.strip(tdie))
        for _ in range(32):
            kind = self.kind(tdie)
            if kind == "pointer":
                place, tdie = self._deref(place, tdie, path)
                kind = self.kind(tdie)
                if rust and kind == "pointer":
                    continue
            if kind == "enum":
                e = self._enum(self.namer.strip(tdie))
                v = next((v for v in e.variants if v.name == name), None) if e else None
                if v is not None and e is not None:
                    return self._enter(place, tdie, e, v, path)
                step = self._unwrap(place, tdie, path) if e is not None else None
                if step is None:
                    raise SelectError(f"{path} is {self.namer.name(tdie)}, which has no "
                                      f"variant {name!r}", self._fields(tdie))
                place, tdie = step
                continue
            if kind not in ("struct", "string", "slice", "interface") or tdie is None:
                raise SelectError(f"{path} is {self.namer.name(tdie)}, not a struct or a "
                                  "pointer to one", f"drop '.{name}'")
            members = self.members(tdie)
            key = name if name in members else f"__{name}" if f"__{name}" in members else None
            if key is not None:
                return self._member(place, members[key])
            step = self._unwrap(place, tdie, path) if rust else None
            if step is None:
                raise SelectError(f"{self.namer.name(tdie)} has no field {name!r}",
                                  self._fields(tdie))
            place, tdie = step
        raise SelectError(f"{path}: too many wrappers to reach {name!r}")

    def _index(self, place: Place, tdie: DIE | None, i: int, path: str
               ) -> tuple[Place, DIE | None]:
        rust = self.rust(self.namer.strip(tdie))
        for _ in range(32):
            kind = self.kind(tdie)
            if kind in ("slice", "array") or not rust:
                break
            step = self._unwrap(place, tdie, path)
            if step is None:
                break
            place, tdie = step
        kind = self.kind(tdie)
        if kind == "pointer":
            target = self._target(tdie)
            place, tdie = self._deref(place, tdie, path)
            if self.kind(target) != "array":  # C: p[i] is *(p + i)
                size = self._size(target)
                return (Mem(place.ops, place.offset + i * size) if place else None), target
            kind = "array"
        if kind == "array" and tdie is not None:
            elem, count = self._elem(tdie), self._count(tdie)
            if count is not None and i >= count:
                raise SelectError(f"{path}[{i}] is out of range: "
                                  f"{self.namer.name(tdie)} has {count} elements")
            size = self._size(elem)
            return part(place, i * size, size), elem
        seq = self._seq(tdie) if kind == "slice" else None
        if seq is not None:
            size = self._size(seq.elem)
            if isinstance(place, Mem):
                length = place.offset + seq.length
                return Mem((*place.ops, Op(
                    "index", offset=place.offset + seq.ptr, index=i, size=size,
                    length=None if seq.length == seq.ptr + 8 else length)), 0), seq.elem
            if isinstance(place, Regs | Pieces):
                ptr, n = part(place, seq.ptr, 8), part(place, seq.length, 8)
                if isinstance(ptr, Mem) and isinstance(n, Mem) and ptr.ops == n.ops:
                    return Mem((*ptr.ops, Op(  # both in memory: a Go slice in stack slots
                        "index", offset=ptr.offset, index=i, size=size,
                        length=None if n.offset == ptr.offset + 8 else n.offset)), 0), seq.elem
                if not isinstance(ptr, Regs) or not isinstance(n, Regs) or \
                        (isinstance(place, Regs) and place.add):
                    return None, seq.elem
                guards = place.guards if isinstance(place, Regs) else ()
                return Mem((*guards, Op("bound", reg=n.pieces[0][2] or "", index=i),
                            Op("reg", reg=ptr.pieces[0][2] or "")), i * size), seq.elem
            return None, seq.elem
        raise SelectError(f"{path} is {self.namer.name(tdie)}: it cannot be indexed",
                          "index arrays, slices, Vec and pointers")

    def _len(self, place: Place, tdie: DIE | None, decode: str | None,
             path: str, unavailable: str) -> Selected:
        """``len(path)``: the length word of a string, slice or Vec, a Go map's count."""
        rust = self.rust(self.namer.strip(tdie))
        for _ in range(32):
            kind = self.kind(tdie)
            seq = self._seq(tdie) if kind in ("string", "slice") else None
            if seq is not None:
                place = part(place, seq.length, 8)
                return self._length(place, decode, "usize" if rust else "int", path,
                                    unavailable)
            if kind == "map":
                place, tdie = self._deref(place, tdie, path)
                m = self.members(tdie)
                count = m.get("count") or m.get("used")  # hmap; swiss maps (Go 1.24)
                if count is None:
                    break
                place, _t = self._member(place, count)
                return self._length(place, decode, "int", path, unavailable)
            if kind == "array":
                raise SelectError(f"len({path}): {path} is {self.namer.name(tdie)}, whose "
                                  f"length is its type's: {self._count(tdie)}"
                                  if tdie is not None else f"len({path}): no type")
            step = self._unwrap(place, tdie, path) if rust else None
            if step is None:
                break
            place, tdie = step
        raise SelectError(f"len({path}): {path} is {self.namer.name(tdie)}, which has no "
                          "length", "len() takes strings, slices, Vec and maps")

    def _length(self, place: Place, decode: str | None, tname: str,
                path: str, unavailable: str) -> Selected:
        want = decode or ("uint" if tname == "usize" else "int")
        if want not in ("int", "uint"):
            raise SelectError(f"len({path}) is a number: it cannot be read as {want}",
                              "read it as int or uint")
        if isinstance(place, Mem):
            place = Mem(place.ops, place.offset)
        return Selected(scalar_fetch(place, 8, unavailable), decode_of(want), 8, 0,
                        tname)

    def _final(self, place: Place, tdie: DIE | None, decode: str | None,
               cap: int, path: str, unavailable: str) -> Selected:
        """The value the steps reached, read whole: as ``decode`` says, or as its type
        reads when the spec does not say (``_natural``)."""
        if decode not in (None, "addr") and self.kind(tdie) == "pointer":
            place, tdie = self._deref(place, tdie, path)  # `as: string` on a *string
        if self.rust(self.namer.strip(tdie)):
            place, tdie, decode = self._held(place, tdie, decode, path)
            if self.kind(tdie) == "enum":
                return self._variant(place, tdie, decode, path, unavailable)
        kind, tname, size = self.kind(tdie), self.namer.name(tdie), self._size(tdie)
        if kind == "interface" and decode in (None, "string"):
            return self._dynamic_type(place, tdie, tname, path, unavailable)
        if kind == "map" and decode != "addr":
            raise SelectError(f"{path} is {tname}: a map has no single value",
                              f"read len({path}) for its number of entries, or as: addr "
                              "for its address")
        seq = self._seq(tdie) if kind in ("string", "slice") else None
        natural = self._natural(kind, tdie, seq)
        want = decode or natural
        self._readable(tdie, tname, size, natural, decode, want, path)
        if natural in ("string", "bytes"):
            if kind == "array" and tdie is not None:
                cap = min(cap, self._count(tdie) or cap)
            return Selected(bytes_fetch(place, kind, seq, unavailable), decode_of(want),
                            cap, cap, tname)
        return Selected(scalar_fetch(place, size, unavailable), decode_of(want), size, 0,
                        tname)

    def _natural(self, kind: str, tdie: DIE | None, seq: Seq | None) -> str:
        """What a value of ``kind`` reads as when the spec gives no ``as:``: a pointer as
        its address, a string as its text, bytes as bytes; a slice or an array of other
        elements as itself, which has no single value."""
        natural = {"pointer": "addr", "string": "string", "slice": "bytes",
                   "array": "bytes", "map": "addr"}.get(kind, kind)
        if kind == "slice" and seq is not None and self._size(seq.elem) != 1:
            natural = "slice"
        if kind == "array" and tdie is not None and self._size(self._elem(tdie)) != 1:
            natural = "array"
        return natural

    def _readable(self, tdie: DIE | None, tname: str, size: int, natural: str,
                  decode: str | None, want: str, path: str) -> None:
        """Refuses a value that reads as ``want`` in no way: one with no single value
        (unless read as a number or an address of a scalar's size), bytes as a number,
        a number as bytes, a float of other than 4 or 8 bytes."""
        if natural in ("struct", "slice", "array", "interface", "other", "void"):
            hint = self._fields(tdie) if natural == "struct" and tdie is not None \
                else "select an element with [i], or its length with len()" \
                if natural in ("slice", "array") else ""
            if natural == "interface":
                hint = ("read it whole for its dynamic type's name, a field of what it "
                        "holds with .(TYPE).field, or an error's message with .Error()")
            if not (decode in ("int", "uint", "addr") and size in (1, 2, 4, 8)):
                raise SelectError(f"{path} is {tname}, which has no single value", hint)
        byteish = natural in ("string", "bytes")
        if want in ("string", "bytes") and not byteish:
            raise SelectError(f"{path} is {tname}: it cannot be read as {want}",
                              "strings come from String, &str, Vec<u8>, &[u8] and byte "
                              "arrays" if self.rust(self.namer.strip(tdie)) else
                              "strings come from Go strings, []byte and byte arrays")
        if want in ("int", "uint", "float", "bool", "addr") and byteish:
            raise SelectError(f"{path} is {tname}: it cannot be read as {want}",
                              f"read it as {natural}, or its length with len()")
        if want == "float" and size not in (4, 8):
            raise SelectError(f"{path} is {tname} ({size} bytes): floats are 4 or 8 bytes")
