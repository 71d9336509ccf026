"""Selectors: turn ``c.desc.fqName`` into a fetch program, walking the types in DWARF.

A value starts where the parameter lives at the probed instruction (registers or a
stack slot), follows pointers (Go's ``p.f`` through a pointer, as in Go), struct
fields, array and slice indexes, and ends in a decoding chosen from the final type.

Rust's standard types read as a Rust programmer writes them: ``String`` and ``&str``
are strings, ``Vec<T>`` and slices are indexed, ``len(x)`` is a length; ``Box``,
``Arc``, ``Rc`` and references are followed, and single-field wrappers (atomics,
``Cell``, ``NonNull``, newtypes), ``Mutex`` and ``RefCell`` read as what they wrap, the
way Rust's auto-deref finds a field. An enum reads as the name of its active variant;
``.Variant`` enters one (the value is absent while another is active), and an
``Option`` reads as its ``Some`` value.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

from elftools.dwarf.die import DIE

from agent.binary.amd64 import is_vector
from agent.binary.dwarf.dies import DW_AT_GO_KIND, attr, die_name
from agent.binary.dwarf.locations import Location
from agent.binary.dwarf.reader import Dwarf
from agent.binary.dwarf.types import GoKind, TypeNamer, member_offset
from agent.config.model import Step
from agent.errors import NoopError
from agent.plan.model import Decode, Fetch, Op, decode_of

_ENCODING = {2: "bool", 4: "float", 5: "int", 6: "int", 7: "uint", 8: "uint", 0x10: "uint"}


DW_AT_GO_RUNTIME_TYPE = 0x2904  # a Go type's descriptor, as an offset from runtime.types
# Error types whose Error() is their first field, a string: err.Error() reads it.
ERROR_TYPES = ("*errors.errorString", "*fmt.wrapError", "*fmt.wrapErrors")


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
    guards: tuple[Op, ...] = ()  # checks of registers before the value is read
    add: int = 0  # one piece: the value is its register plus this (an address)

    def covering(self, start: int, size: int) -> _Regs | None:
        if self.add:  # an address computed from a register: only as a whole
            return self if (start, size) == (0, 8) else None
        inside = tuple((o - start, s, r) for o, s, r in self.pieces
                       if o >= start and o + s <= start + size)
        if sum(s for _, s, _ in inside) != size or any(r is None for _, _, r in inside):
            return None
        return _Regs(inside, self.guards)


@dataclass(frozen=True, slots=True)
class _Seq:
    """Where a string's or a sequence's pointer and length are, and its element type."""

    ptr: int
    length: int
    elem: DIE | None
    text: bool  # a string (Go string, Rust String and &str)


@dataclass(frozen=True, slots=True)
class _Variant:
    name: str
    value: int | None  # the discriminant that selects it; None: every other value
    offset: int
    type: DIE | None


@dataclass(frozen=True, slots=True)
class _Enum:
    """A Rust enum with data: the discriminant (offset, size; None with one variant)."""

    discr: tuple[int, int] | None
    variants: tuple[_Variant, ...]

    def guard(self, v: _Variant) -> tuple[tuple[int, ...], bool]:
        """(values, negate): the discriminants that select ``v``."""
        if v.value is not None:
            return (v.value,), False
        return tuple(o.value for o in self.variants if o.value is not None), True


@dataclass(frozen=True, slots=True)
class Future:
    """An async fn's future: its type, the arguments it captured, where its state is
    (offset and size in it) and the values of the states by name."""

    type: str
    args: tuple[str, ...]
    state: int
    size: int
    states: dict[str, int]


@dataclass(frozen=True, slots=True)
class Selected:
    fetch: Fetch
    decode: Decode
    size: int
    cap: int
    type: str
    names: tuple[tuple[int, str], ...] = ()
    other: str | None = None


# The state of a Rust future that has not been polled yet: its async fn's call starts.
FIRST_POLL = "Unresumed"

# Rust types that hold their value in one named member (besides their lock or count).
_HOLDERS = {"Mutex": "data", "RwLock": "data", "RefCell": "value", "ArcInner": "data",
            "RcInner": "value", "RcBox": "value", "OnceCell": "inner"}
_RC = ("alloc::sync::Arc<", "alloc::rc::Rc<", "alloc::sync::Weak<", "alloc::rc::Weak<")


class Walker:
    """Resolves selectors against one binary's types."""

    def __init__(self, dwarf: Dwarf, namer: TypeNamer) -> None:
        self.dwarf = dwarf
        self.namer = namer
        # each struct's members, by its DIE's offset: a preset asks of the same few
        # types thousands of times, and pyelftools parses a DIE's children on each walk
        self._members: dict[int, dict[str, tuple[int, DIE | None]]] = {}
        self._selected: dict[tuple[Any, ...], Selected] = {}

    # -- types ---------------------------------------------------------------------
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

    def _seq(self, die: DIE | None) -> _Seq | None:
        """Where a string's or a sequence's pointer and length are: Go strings and
        slices, Rust &str, &[T], String and Vec<T>."""
        d = self.namer.strip(die)
        if d is None:
            return None
        m = self.members(d)
        if "data_ptr" in m and "length" in m:
            return _Seq(m["data_ptr"][0], m["length"][0], self._target(m["data_ptr"][1]),
                        self._str(d))
        gk = attr(d, DW_AT_GO_KIND)
        if gk == GoKind.STRING:
            return _Seq(m.get("str", (0, None))[0], m.get("len", (8, None))[0], None, True)
        if gk == GoKind.SLICE:
            ptr = m.get("array", (0, None))
            return _Seq(ptr[0], m.get("len", (8, None))[0], self._target(ptr[1]), False)
        if not self.rust(d):
            return None
        name = self.namer.name(d)
        if name == "alloc::string::String" and "vec" in m:
            inner = self._seq(m["vec"][1])
            off = m["vec"][0]
            return _Seq(off + inner.ptr, off + inner.length, inner.elem, True) if inner else None
        if name.startswith("alloc::vec::Vec<") and "len" in m and "buf" in m:
            leaf = self._pointer_leaf(m["buf"][1])
            if leaf is None:
                return None
            elem = self._template(d, "T") or self.dwarf.ref(leaf[1])
            return _Seq(m["buf"][0] + leaf[0], m["len"][0], elem, False)
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

    def _enum(self, d: DIE | None) -> _Enum | None:
        """A Rust enum with data (a struct with a DW_TAG_variant_part); None otherwise."""
        if d is None:
            return None
        part = next((c for c in d.iter_children() if c.tag == "DW_TAG_variant_part"), None)
        if part is None:
            return None
        discr: tuple[int, int] | None = None
        variants: list[_Variant] = []
        for c in part.iter_children():
            if c.tag == "DW_TAG_member":
                discr = (member_offset(c), self._size(self.dwarf.ref(c)))
            elif c.tag == "DW_TAG_variant":
                value = attr(c, "DW_AT_discr_value")
                variants += [_Variant(_variant_name(m, self.dwarf.ref(m)),
                                      value if isinstance(value, int) else None,
                                      member_offset(m), self.dwarf.ref(m))
                             for m in c.iter_children() if m.tag == "DW_TAG_member"]
        return _Enum(discr, tuple(variants))

    def _option(self, d: DIE | None) -> _Variant | None:
        """The ``Some`` variant of an ``Option``."""
        if d is None or not self.namer.name(d).startswith("core::option::Option<"):
            return None
        e = self._enum(d)
        return next((v for v in e.variants if v.name == "Some"), None) if e else None

    def future(self, pinned: DIE | None) -> Future | None:
        """An async fn's future, from its poll's ``self`` (``Pin<&mut
        {async_fn_env#0}>``): what it captured (the members of its ``Unresumed``
        variant) and where its state is; None when the type is not such a future."""
        d = self.namer.strip(pinned)
        for _ in range(8):
            if d is None:
                return None
            if self.kind(d) == "pointer":
                d = self.namer.strip(self._target(d))
                continue
            e = self._enum(d)
            if e is not None:
                first = next((v for v in e.variants if v.name == FIRST_POLL), None)
                if first is None or e.discr is None:
                    return None
                states = {v.name: v.value for v in e.variants if v.value is not None}
                return Future(self.namer.name(d), tuple(self.members(first.type)),
                              e.discr[0], e.discr[1], states)
            sized = [m for m in self.members(d).values() if self._size(m[1]) > 0]
            if len(sized) != 1:
                return None
            d = self.namer.strip(sized[0][1])
        return None

    def _fields(self, die: DIE | None) -> str:
        """What can be read from a type, for a hint."""
        d = self.namer.strip(die)
        e = self._enum(d)
        if e is not None:
            return "its variants: " + ", ".join(v.name for v in e.variants)
        names = [n.removeprefix("__") if n.startswith("__") and n[2:].isdigit() else n
                 for n in self.members(d)]
        return "its fields: " + ", ".join(names) if names else "it has no fields"

    # -- walking -------------------------------------------------------------------
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
        place: _Mem | _Regs | None = _start(start)
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

    # -- Go interfaces -----------------------------------------------------------
    def _interface(self, tdie: DIE | None, path: str, what: str) -> bool:
        """Whether the interface at ``path`` has methods (``tab, data``: its first word
        is an itab, whose type is at +8) rather than none (``_type, data``)."""
        if self.kind(tdie) != "interface":
            raise SelectError(f"{path} is {self.namer.name(tdie)}, not a Go interface: "
                              f"{what} needs one", "drop it")
        return "tab" in self.members(tdie)

    @cached_property
    def _types_start(self) -> int | None:
        """Where the binary's type descriptors start (``runtime.types``): DWARF gives a
        type's descriptor as an offset from it."""
        from agent.binary.gometa.program import GoProgram
        if self.dwarf.elf.e_type == 3:  # ET_DYN: a PIE moves the descriptors at load
            return None
        try:
            return GoProgram(self.dwarf.elf).module.types
        except (NoopError, ValueError, KeyError, IndexError, struct.error):
            sym = self.dwarf.elf.symbol("runtime.types")
            return sym.address if sym is not None else None

    def runtime_type(self, name: str, path: str) -> tuple[int, DIE]:
        """The address of Go type ``name``'s descriptor, and the DWARF entry of the
        value an interface holding one points to (``*T``: T; T: T)."""
        from agent.binary.dwarf.lookup import find_type
        pointer = name.startswith("*")
        try:
            die = find_type(self.dwarf, name)
            value = self._target(die) if pointer else die
        except NoopError as exc:
            # DWARF may have no entry for a pointer type no variable has (``&Order{}``
            # stored in an ``any``) while the binary has its descriptor.
            try:
                if not pointer:
                    raise
                die, value = None, find_type(self.dwarf, name[1:])
            except NoopError:
                raise SelectError(f"{path}.({name}): {exc.message}", exc.hint or
                                  "name the type as Go's DWARF does: *main.Order, "
                                  "*errors.errorString, *github.com/org/pkg.Type") from None
        offset = attr(die, DW_AT_GO_RUNTIME_TYPE) if die is not None else None
        if self._types_start is None:
            raise SelectError(f"{path}.({name}): noop finds no Go type descriptors at "
                              "fixed addresses in this binary (a position-independent "
                              "build has none)", "build without -buildmode=pie")
        address = self._types_start + offset if isinstance(offset, int) \
            else self._descriptors.get(name)
        if address is None or value is None:
            raise SelectError(f"{path}.({name}): the binary keeps no type descriptor of "
                              f"{name}, so no interface can hold one",
                              "a type never converted to an interface has none")
        return address, value

    @cached_property
    def _descriptors(self) -> dict[str, int]:
        """The binary's type descriptors by the name Go's DWARF gives their type."""
        from agent.binary.gometa.program import GoProgram
        try:
            return {t.name: t.address for t in GoProgram(self.dwarf.elf).types.all}
        except (NoopError, ValueError, KeyError, IndexError, struct.error):
            return {}

    def _is_type(self, place: _Mem | _Regs | None, iface: bool, values: tuple[int, ...]
                 ) -> _Mem | _Regs | None:
        """``place`` (an interface) kept only while its dynamic type is one of
        ``values`` (absent when nil or another)."""
        op = Op("itype", index=int(iface), values=values)
        if isinstance(place, _Mem):
            return _Mem((*place.ops, replace(op, offset=place.offset)), place.offset)
        if isinstance(place, _Regs) and not place.add:
            word = place.covering(0, 8)
            reg = word.pieces[0][2] if word is not None else None
            if reg and not is_vector(reg):
                return _Regs(place.pieces, (*place.guards, replace(op, reg=reg)))
        return None

    def _data(self, place: _Mem | _Regs | None) -> _Mem | None:
        """What an interface's data word points to."""
        return _follow(place.covering(8, 8) if isinstance(place, _Regs) else
                       _Mem(place.ops, place.offset + 8) if isinstance(place, _Mem) else None)

    def _assert(self, place: _Mem | _Regs | None, tdie: DIE | None, name: str, path: str
                ) -> tuple[_Mem | _Regs | None, DIE | None]:
        """Go's ``x.(T)``: the value inside the interface, absent unless it holds a T."""
        iface = self._interface(tdie, path, f"the type assertion .({name})")
        address, value = self.runtime_type(name, path)
        # The data word points to the value: a *T's T, or the copy of a T.
        return self._data(self._is_type(place, iface, (address,))), value

    def _dynamic_type(self, place: _Mem | _Regs | None, tdie: DIE | None, tname: str,
                      path: str, unavailable: str) -> Selected:
        """An interface read whole: the name of its dynamic type (``nil``), from the type
        descriptor its first word is (or, with methods, its itab points to)."""
        iface = self._interface(tdie, path, "reading its type")
        if self._types_start is None:
            raise SelectError(f"{path} is {tname}: noop finds no Go type descriptors at "
                              "fixed addresses in this binary to name its dynamic type "
                              "(a position-independent build has none)",
                              "build without -buildmode=pie, or read .(TYPE) fields")
        slot = int(iface)
        if isinstance(place, _Mem):
            fetch = Fetch("gotype", place.ops, place.offset, 8, slot=slot)
        elif isinstance(place, _Regs) and not place.add and place.covering(0, 8):
            word = place.covering(0, 8)
            assert word is not None
            fetch = Fetch("gotype", place.guards, regs=(word.pieces[0][2] or "",), slot=slot)
        else:
            fetch = Fetch("unavailable", why=unavailable)
        return Selected(fetch, "gotype", 8, 0, tname)

    def _error_text(self, place: _Mem | _Regs | None, tdie: DIE | None, decode: str | None,
                    cap: int, path: str, unavailable: str) -> Selected:
        """``err.Error()`` where it is a field read: the message string of the error
        types ERROR_TYPES (each keeps it first); absent for nil and any other type."""
        iface = self._interface(tdie, path, ".Error()")
        found = []
        for name in ERROR_TYPES:
            try:
                found.append(self.runtime_type(name, path)[0])
            except SelectError:
                continue
        if not found:
            raise SelectError(f"{path}.Error(): none of the error types noop reads as a "
                              f"message ({', '.join(ERROR_TYPES)}) is in this binary",
                              f"read {path}.(TYPE).field of the error type it holds")
        if decode not in (None, "string"):
            raise SelectError(f"{path}.Error() is a string: it cannot be read as {decode}")
        struct_at = self._data(self._is_type(place, iface, tuple(found)))
        seq = _Seq(0, 8, None, True)  # a Go string: pointer, then length
        return Selected(self._bytes_fetch(struct_at, "string", seq, unavailable), "string",
                        cap, cap, "string")

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
        return _follow(place), target

    def _member(self, place: _Mem | _Regs | None, member: tuple[int, DIE | None]
                ) -> tuple[_Mem | _Regs | None, DIE | None]:
        off, mtype = member
        if isinstance(place, _Mem):
            return _Mem(place.ops, place.offset + off), mtype
        if isinstance(place, _Regs):
            return place.covering(off, self._size(mtype)), mtype
        return None, mtype

    def _enter(self, place: _Mem | _Regs | None, tdie: DIE | None, e: _Enum, v: _Variant,
               path: str) -> tuple[_Mem | _Regs | None, DIE | None]:
        """Into variant ``v`` of an enum at ``place``: absent while another is active."""
        if e.discr is not None:
            doff, dsize = e.discr
            if dsize not in (1, 2, 4, 8):
                raise SelectError(f"{path} is {self.namer.name(tdie)}, whose discriminant "
                                  f"takes {dsize} bytes: noop reads up to 8")
            values, negate = e.guard(v)
            if isinstance(place, _Mem):
                place = _Mem((*place.ops, Op("when", offset=place.offset + doff, size=dsize,
                                             values=values, negate=negate)), place.offset)
            elif isinstance(place, _Regs) and place.add:
                place = None  # an address, not an enum
            elif isinstance(place, _Regs):
                # The discriminant in the low bytes of one register, or not readable here.
                reg = next((r for o, s, r in place.pieces if o == doff and s >= dsize), None)
                place = _Regs(place.pieces, (*place.guards, Op(
                    "when", reg=reg, size=dsize, values=values, negate=negate))) \
                    if reg and not is_vector(reg) else None
        return self._member(place, (v.offset, v.type))

    def _unwrap(self, place: _Mem | _Regs | None, tdie: DIE | None, path: str
                ) -> tuple[_Mem | _Regs | None, DIE | None] | None:
        """One step of Rust's auto-deref: through a reference or Box, an Arc or Rc, the
        ``Some`` of an Option, a Mutex's or RefCell's value, a single-field wrapper."""
        kind = self.kind(tdie)
        d = self.namer.strip(tdie)
        if kind == "pointer":
            return self._deref(place, tdie, path)
        if kind == "enum":
            some = self._option(d)
            e = self._enum(d)
            if some is None or e is None:
                return None
            place, tdie = self._enter(place, d, e, some, path)
            inner = self.members(tdie).get("__0")
            return self._member(place, inner) if inner else None
        if kind != "struct" or d is None:
            return None
        m = self.members(d)
        if self.namer.name(d).startswith(_RC) and "ptr" in m:
            place, t = self._member(place, m["ptr"])
            for _ in range(8):  # NonNull<ArcInner<T>> down to the pointer, then in
                if self.kind(t) == "pointer":
                    place, t = self._deref(place, t, path)
                    fields = self.members(t)
                    held = next((fields[k] for k in ("data", "value") if k in fields), None)
                    return self._member(place, held) if held else (place, t)
                step = self._single(place, t)
                if step is None:
                    return None
                place, t = step
            return None
        holder = _HOLDERS.get((die_name(d) or "").split("<")[0])
        if holder and holder in m:
            return self._member(place, m[holder])
        return self._single(place, d)

    def _single(self, place: _Mem | _Regs | None, d: DIE | None
                ) -> tuple[_Mem | _Regs | None, DIE | None] | None:
        """The one member that holds data of a wrapper (NonNull, Cell, AtomicU64, ...)."""
        if self.kind(d) != "struct":
            return None
        sized = [m for m in self.members(d).values() if self._size(m[1]) > 0]
        return self._member(place, sized[0]) if len(sized) == 1 else None

    def _field(self, place: _Mem | _Regs | None, tdie: DIE | None, name: str, path: str
               ) -> tuple[_Mem | _Regs | None, DIE | None]:
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

    def _index(self, place: _Mem | _Regs | None, tdie: DIE | None, i: int, path: str
               ) -> tuple[_Mem | _Regs | None, DIE | None]:
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
        seq = self._seq(tdie) if kind == "slice" else None
        if seq is not None:
            size = self._size(seq.elem)
            if isinstance(place, _Mem):
                length = place.offset + seq.length
                return _Mem((*place.ops, Op(
                    "index", offset=place.offset + seq.ptr, index=i, size=size,
                    length=None if seq.length == seq.ptr + 8 else length)), 0), seq.elem
            if isinstance(place, _Regs):
                ptr, n = place.covering(seq.ptr, 8), place.covering(seq.length, 8)
                if ptr is None or n is None or place.add:
                    return None, seq.elem
                return _Mem((*place.guards, Op("bound", reg=n.pieces[0][2] or "", index=i),
                             Op("reg", reg=ptr.pieces[0][2] or "")), i * size), seq.elem
            return None, seq.elem
        raise SelectError(f"{path} is {self.namer.name(tdie)}: it cannot be indexed",
                          "index arrays, slices, Vec and pointers")

    def _len(self, place: _Mem | _Regs | None, tdie: DIE | None, decode: str | None,
             path: str, unavailable: str) -> Selected:
        """``len(path)``: the length word of a string, slice or Vec, a Go map's count."""
        rust = self.rust(self.namer.strip(tdie))
        for _ in range(32):
            kind = self.kind(tdie)
            seq = self._seq(tdie) if kind in ("string", "slice") else None
            if seq is not None:
                place = place.covering(seq.length, 8) if isinstance(place, _Regs) \
                    else self._member(place, (seq.length, None))[0]
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

    def _length(self, place: _Mem | _Regs | None, decode: str | None, tname: str,
                path: str, unavailable: str) -> Selected:
        want = decode or ("uint" if tname == "usize" else "int")
        if want not in ("int", "uint"):
            raise SelectError(f"len({path}) is a number: it cannot be read as {want}",
                              "read it as int or uint")
        if isinstance(place, _Mem):
            place = _Mem(place.ops, place.offset)
        return Selected(self._scalar_fetch(place, 8, unavailable), decode_of(want), 8, 0,
                        tname)

    def _final(self, place: _Mem | _Regs | None, tdie: DIE | None, decode: str | None,
               cap: int, path: str, unavailable: str) -> Selected:
        if decode not in (None, "addr") and self.kind(tdie) == "pointer":
            place, tdie = self._deref(place, tdie, path)  # `as: string` on a *string
        if self.rust(self.namer.strip(tdie)):
            # References, Box, wrappers, Arc, Option: to the value they hold (``as:
            # addr`` keeps a reference's address; raw pointers are not followed).
            for _ in range(32):
                d = self.namer.strip(tdie)
                kind = self.kind(d)
                if kind == "pointer" and (decode == "addr" or self._target(d) is None
                                          or self.namer.name(d).startswith("*")):
                    break
                if kind not in ("struct", "enum", "pointer") or \
                        (kind == "enum" and self._option(d) is None):
                    break
                if decode is None and self.namer.name(d) == "core::sync::atomic::AtomicBool":
                    decode = "bool"
                step = self._unwrap(place, tdie, path)
                if step is None:
                    break
                place, tdie = step
            if decode not in (None, "addr") and self.kind(tdie) == "pointer":
                place, tdie = self._deref(place, tdie, path)
            if self.kind(tdie) == "enum":
                return self._variant(place, tdie, decode, path, unavailable)
        kind, tname, size = self.kind(tdie), self.namer.name(tdie), self._size(tdie)
        if kind == "interface" and decode in (None, "string"):
            return self._dynamic_type(place, tdie, tname, path, unavailable)
        if kind == "map" and decode != "addr":
            raise SelectError(f"{path} is {tname}: a map has no single value",
                              f"read len({path}) for its number of entries, or as: addr "
                              "for its address")
        natural = {"pointer": "addr", "string": "string", "slice": "bytes",
                   "array": "bytes", "map": "addr"}.get(kind, kind)
        seq = self._seq(tdie) if kind in ("string", "slice") else None
        if kind == "slice" and seq is not None and self._size(seq.elem) != 1:
            natural = "slice"
        if kind == "array" and tdie is not None and self._size(self._elem(tdie)) != 1:
            natural = "array"
        want = decode or natural
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
        if byteish:
            if kind == "array" and tdie is not None:
                cap = min(cap, self._count(tdie) or cap)
            return Selected(self._bytes_fetch(place, kind, seq, unavailable), decode_of(want),
                            cap, cap, tname)
        return Selected(self._scalar_fetch(place, size, unavailable), decode_of(want), size, 0,
                        tname)

    def _variant(self, place: _Mem | _Regs | None, tdie: DIE | None, decode: str | None,
                 path: str, unavailable: str) -> Selected:
        """A Rust enum read as the name of its active variant (``as: int``: the number
        that selects it)."""
        d = self.namer.strip(tdie)
        tname = self.namer.name(tdie)
        e = self._enum(d)
        if e is None and d is not None:  # fieldless: DW_TAG_enumeration_type
            size = self._size(d)
            names = tuple((attr(c, "DW_AT_const_value"), die_name(c) or "?")
                          for c in d.iter_children() if c.tag == "DW_TAG_enumerator")
            other = None
        elif e is not None and e.discr is not None:
            doff, size = e.discr
            if isinstance(place, _Regs):  # in the low bytes of one register
                reg = next((r for o, s, r in place.pieces if o == doff and s >= size), None)
                place = _Regs(((0, size, reg),), place.guards) if reg else None
            else:
                place = self._member(place, (doff, None))[0]
            names = tuple((v.value, v.name) for v in e.variants if v.value is not None)
            other = next((v.name for v in e.variants if v.value is None), None)
        else:
            only = e.variants[0].name if e and e.variants else "?"
            raise SelectError(f"{path} is {tname}, which has one variant, {only}",
                              f"read a field of it: .{only}.<field>")
        if size not in (1, 2, 4, 8):
            raise SelectError(f"{path} is {tname}, whose discriminant takes {size} bytes: "
                              "noop reads up to 8")
        mask = (1 << 8 * size) - 1
        names = tuple((int(v) & mask, n) for v, n in names if isinstance(v, int))
        if decode in ("int", "uint"):
            return Selected(self._scalar_fetch(place, size, unavailable), decode_of(decode),
                            size, 0, tname)
        if decode not in (None, "string"):
            raise SelectError(f"{path} is {tname}: it cannot be read as {decode}",
                              "an enum reads as the name of its variant, or as int")
        return Selected(self._scalar_fetch(place, size, unavailable), "variant", size, 0,
                        tname, names, other)

    @staticmethod
    def _bytes_fetch(place: _Mem | _Regs | None, kind: str, seq: _Seq | None,
                     unavailable: str) -> Fetch:
        if isinstance(place, _Mem):
            if kind == "array" or seq is None:
                return Fetch("mem_array", place.ops, place.offset)
            return Fetch("mem_slice", place.ops, place.offset + seq.ptr,
                         length=None if seq.length == seq.ptr + 8
                         else place.offset + seq.length)
        if isinstance(place, _Regs) and kind != "array" and seq is not None and not place.add:
            ptr, length = place.covering(seq.ptr, 8), place.covering(seq.length, 8)
            if ptr is not None and length is not None:
                return Fetch("reg_slice", place.guards, regs=(ptr.pieces[0][2] or "",
                                                              length.pieces[0][2] or ""))
        return Fetch("unavailable", why=unavailable)

    @staticmethod
    def _scalar_fetch(place: _Mem | _Regs | None, size: int, unavailable: str) -> Fetch:
        if isinstance(place, _Mem):
            return Fetch("mem", place.ops, place.offset, size)
        if isinstance(place, _Regs) and len(place.pieces) == 1 and place.pieces[0][2]:
            return Fetch("reg", place.guards, offset=place.add, size=size,
                         regs=(place.pieces[0][2],))
        return Fetch("unavailable", why=unavailable)


def _variant_name(member: DIE, vtype: DIE | None) -> str:
    """A variant's name: its member's, or for a coroutine (an async fn's future), whose
    members are numbered, its type's (``Unresumed``, ``Returned``, ``Suspend0``)."""
    name = die_name(member) or "?"
    if name.isdigit() and vtype is not None and die_name(vtype):
        return die_name(vtype) or name
    return name


def _follow(place: _Mem | _Regs | None) -> _Mem | None:
    """What the pointer at ``place`` points to: the memory at the address its
    register holds (plus the address's offset), or at the word it reads."""
    if isinstance(place, _Regs):
        piece = place.covering(0, 8)
        reg = piece.pieces[0][2] if piece is not None else None
        return (_Mem((*place.guards, Op("reg", reg=reg),
                      *((Op("add", offset=place.add),) if place.add else ())), 0)
                if reg and not is_vector(reg) else None)
    if isinstance(place, _Mem):
        return _Mem((*place.ops, Op("deref", offset=place.offset)), 0)
    return None


def _start(loc: Location | None) -> _Mem | _Regs | None:
    """Where a parameter's value is, from its location at the probed instruction."""
    if not loc:
        return None
    if len(loc) == 1 and loc[0].at is not None and loc[0].reg is not None:
        return _Mem((Op("reg", reg=loc[0].reg),), loc[0].at)
    if len(loc) == 1 and loc[0].add and loc[0].reg is not None:
        return _Regs(((0, loc[0].size, loc[0].reg),), add=loc[0].add)
    if any(p.at is not None or p.add for p in loc):
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
