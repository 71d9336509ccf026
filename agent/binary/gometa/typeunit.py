"""The unit of types in the DWARF noop writes from a stripped Go binary's runtime
metadata: which types it holds (those a scope names, and those its functions'
signatures and the types themselves refer to, or every type with a descriptor), each
shaped as Go's own DWARF shapes it (strings and slices as structs, interfaces as
typedefs of ``runtime.iface``, …), and the types Go's DWARF has that need no
descriptor. Also the types of a signature a spec gives.
"""

from __future__ import annotations

import re
from functools import cached_property

from agent.binary.dwarf.writer import TYPES_UNIT, Info
from agent.binary.gometa import gotype as gt
from agent.binary.gometa import signature
from agent.binary.gometa.abbrevs import GO_LANGUAGE, PRODUCER
from agent.binary.gometa.program import Function, GoProgram, Signature
from agent.binary.gometa.scope import Scope
from agent.errors import NoopError

_ENCODING = {gt.BOOL: 0x02, gt.FLOAT32: 0x04, gt.FLOAT64: 0x04, gt.COMPLEX64: 0x03,
             gt.COMPLEX128: 0x03, **dict.fromkeys(
                 (gt.INT, gt.INT8, gt.INT16, gt.INT32, gt.INT64), 0x05)}
# Go's basic types: (kind, size, DW_ATE encoding), for those without a descriptor.
_BASIC = {"bool": (gt.BOOL, 1, 0x02), "int": (gt.INT, 8, 0x05), "int8": (gt.INT8, 1, 0x05),
          "int16": (gt.INT16, 2, 0x05), "int32": (gt.INT32, 4, 0x05),
          "int64": (gt.INT64, 8, 0x05), "uint": (gt.UINT, 8, 0x07),
          "uint8": (gt.UINT8, 1, 0x07), "byte": (gt.UINT8, 1, 0x07),
          "uint16": (gt.UINT16, 2, 0x07), "uint32": (gt.UINT32, 4, 0x07),
          "uint64": (gt.UINT64, 8, 0x07), "uintptr": (gt.UINTPTR, 8, 0x07),
          "float32": (gt.FLOAT32, 4, 0x04), "float64": (gt.FLOAT64, 8, 0x04),
          "rune": (gt.INT32, 4, 0x05)}
_METHOD = re.compile(r"^(?P<pkg>.*?[^/]*?)\.\((?P<ptr>\*?)(?P<type>[^)]+)\)\.[^.]+$")


# -- which types ------------------------------------------------------------------------


class Known:
    """A program's types by the name DWARF gives them, and its methods' signatures:
    from every type, read at once (``everything``), or each found when asked."""

    def __init__(self, program: GoProgram, everything: bool) -> None:
        self.program = program
        self.types = program.types
        self.everything = everything
        self._found: dict[str, gt.GoType | None] = {}

    @cached_property
    def _all(self) -> dict[str, gt.GoType]:
        return {t.name: t for t in self.types.all}

    def get(self, name: str) -> gt.GoType | None:
        if self.everything:
            return self._all.get(name)
        if name not in self._found:
            self._found[name] = self.types.find(name)
        return self._found[name]

    def __contains__(self, name: str) -> bool:
        return self.get(name) is not None

    def __getitem__(self, name: str) -> gt.GoType:
        got = self.get(name)
        if got is None:
            raise KeyError(name)
        return got

    def wanted(self, scope: Scope) -> list[gt.GoType]:
        """The types ``scope`` names."""
        return [t for t in (self.get(n) for n in scope.types) if t is not None]

    def name(self, t: gt.GoType) -> str:
        return self.types.name(t)

    def pointer_to(self, t: gt.GoType) -> gt.GoType | None:
        """The type ``*t``, where the binary has its descriptor."""
        if self.everything:
            return self._all.get("*" + t.name)
        return self.types.pointer_to(t)

    def signature(self, f: Function) -> Signature | None:
        """The signature of method ``f`` from its receiver type's method table."""
        if self.everything:
            return self.program.signatures.get(f.entry)
        pkg = package_of(f.name)
        rest = f.name[len(pkg) + 1:]
        if rest.startswith("(*") and ")." in rest:
            receiver = f"*{pkg}.{rest[2:rest.index(')')]}"
        elif "." in rest:
            receiver = f"{pkg}.{rest.split('.', 1)[0]}"
        else:
            return None
        t = self.get(receiver)
        if t is None:
            return None
        for m in t.methods:
            if m.tfn == f.entry and m.signature is not None:
                return Signature(t, m.signature)
        return None


def roots_of(program: GoProgram, functions: list[Function], scope: Scope,
           by_name: Known) -> list[gt.GoType]:
    """The types a scope's DWARF must hold: those it names, and the receivers,
    parameters and results of the functions written."""
    out = by_name.wanted(scope)
    for f in functions:
        sig = by_name.signature(f)
        if sig is not None:
            out += [sig.receiver, *sig.func.params, *sig.func.results]
        else:
            receiver = receiver_of(f.name, by_name)
            if receiver is not None:
                out.append(receiver)
    return out


def closure(by_name: Known, roots: list[gt.GoType]) -> tuple[gt.GoType, ...]:
    """``roots`` and every type their DWARF refers to (elements, fields, a slice's
    pointer type), named, by address."""
    seen: dict[int, gt.GoType] = {}
    stack = list(roots)
    while stack:
        t = stack.pop()
        if t.address in seen:
            continue
        seen[t.address] = t
        by_name.name(t)
        if t.kind in (gt.POINTER, gt.SLICE, gt.ARRAY) and t.elem is not None:
            stack.append(t.elem)
            pointer = by_name.pointer_to(t.elem) if t.kind == gt.SLICE else None
            if pointer is not None:
                stack.append(pointer)
        elif t.kind == gt.STRUCT:
            stack += [f.type for f in t.fields]
    return tuple(t for _a, t in sorted(seen.items()))


def package_of(name: str) -> str:
    """The package of a function name: what comes before the first dot after the last
    slash (``github.com/a/b.(*T).M`` → ``github.com/a/b``)."""
    slash = name.rfind("/", 0, name.find("(") if "(" in name else len(name))
    dot = name.find(".", slash + 1)
    return name[:dot] if dot > 0 else name


def receiver_of(name: str, types: Known) -> gt.GoType | None:
    """A method's receiver type from its name alone (``pkg.(*T).M``), when the type has
    a descriptor."""
    m = _METHOD.match(name)
    if m is None:
        return None
    return types.get(f"{m['ptr']}{m['pkg']}.{m['type']}")


# -- their DIEs -------------------------------------------------------------------------


def types_unit(info: Info, types: tuple[gt.GoType, ...], aux: Aux,
                by_name: Known) -> None:
    start = info.begin_unit()
    info.die("cu", TYPES_UNIT, GO_LANGUAGE, PRODUCER, 0)
    for t in types:
        _type_die(info, aux, t, by_name)
    aux.finish()
    info.end_children()
    info.unit(start)


class Aux:
    """Types Go's DWARF has that need no descriptor: ``int``, ``*uint8``,
    ``runtime.iface``…, written once each when something refers to them."""

    def __init__(self, info: Info) -> None:
        self.info = info
        self.wanted: set[str] = set()
        self.pointers: dict[str, object | None] = {}  # "*T" with no descriptor: T's reference
        self.slices: dict[str, tuple[object, object]] = {}  # "[]T": T's and *T's
        self.roots: list[gt.GoType] = []  # types with descriptors a signature names

    def ref(self, name: str) -> str:
        self.wanted.add(name)
        return f"aux:{name}"

    def finish(self) -> None:
        done: set[str] = set()
        while self.wanted - done:
            name = sorted(self.wanted - done)[0]
            done.add(name)
            key = f"aux:{name}"
            if key in self.info.offsets:
                continue
            if name in self.pointers:
                target = self.pointers[name]
                if target is None:  # to a type noop cannot lay out
                    self.info.die("void_pointer", name, gt.POINTER, key=key)
                else:
                    self.info.die("pointer", name, target, gt.POINTER, key=key)
            elif name in self.slices:
                elem, pointer = self.slices[name]
                self.info.die("slice", name, 24, gt.SLICE, elem, key=key)
                self.info.die("member", "array", 0, pointer, 0)
                self.info.die("member", "len", 8, self.ref("int"), 0)
                self.info.die("member", "cap", 16, self.ref("int"), 0)
                self.info.end_children()
            elif name in _BASIC:
                kind, size, encoding = _BASIC[name]
                self.info.die("base", name, encoding, size, kind, key=key)
            elif name.startswith("*"):
                target = name[1:]
                if target in ("uint8", "int"):
                    self.info.die("pointer", name, self.ref(target), gt.POINTER, key=key)
                else:  # runtime internals noop has no descriptor for
                    self.info.die("void_pointer", name, gt.POINTER, key=key)
            elif name == "unsafe.Pointer":
                self.info.die("void_pointer", name, gt.UNSAFE_POINTER, key=key)
            elif name in ("runtime.iface", "runtime.eface"):
                first = ("tab", "*runtime.itab") if name == "runtime.iface" \
                    else ("_type", "*runtime._type")
                self.info.die("struct", name, 16, gt.STRUCT, key=key)
                self.info.die("member", first[0], 0, self.ref(first[1]), 0)
                self.info.die("member", "data", 8, self.ref("unsafe.Pointer"), 0)
                self.info.end_children()


def _type_die(info: Info, aux: Aux, t: gt.GoType, by_name: Known) -> None:
    key, k = t.address, t.kind

    def ref(x: gt.GoType | None) -> object:
        return x.address if x is not None else aux.ref("unsafe.Pointer")

    if k in (gt.BOOL, *range(gt.INT, gt.COMPLEX128 + 1)):
        info.die("base", t.name, _ENCODING.get(k, 0x07), t.size, k, key=key)
        info.offsets.setdefault(f"aux:{t.name}", info.offsets[key])
    elif k == gt.UNSAFE_POINTER:
        info.die("void_pointer", t.name, k, key=key)
    elif k == gt.STRING:
        info.die("struct", t.name, t.size, k, key=key)
        info.die("member", "str", 0, aux.ref("*uint8"), 0)
        info.die("member", "len", 8, aux.ref("int"), 0)
        info.end_children()
    elif k == gt.SLICE:
        info.die("slice", t.name, t.size, k, ref(t.elem), key=key)
        info.die("member", "array", 0, _pointer_to(aux, t.elem, by_name), 0)
        info.die("member", "len", 8, aux.ref("int"), 0)
        info.die("member", "cap", 16, aux.ref("int"), 0)
        info.end_children()
    elif k == gt.ARRAY:
        info.die("array", t.name, ref(t.elem), t.size, k, key=key)
        info.die("subrange", t.length)
        info.end_children()
    elif k == gt.POINTER:
        info.die("pointer", t.name, ref(t.elem), k, key=key)
    elif k == gt.STRUCT:
        if not t.fields:
            info.die("struct_empty", t.name, t.size, k, key=key)
            return
        info.die("struct", t.name, t.size, k, key=key)
        for f in t.fields:
            info.die("member", f.name, f.offset, f.type.address, int(f.embedded))
        info.end_children()
    elif k == gt.INTERFACE:
        info.die("typedef", t.name, aux.ref("runtime.eface" if not t.imethods
                                             else "runtime.iface"), k, key=key)
    elif k == gt.MAP:
        info.die("typedef", t.name, aux.ref("*runtime.hmap"), k, key=key)
    elif k == gt.CHAN:
        info.die("typedef", t.name, aux.ref("*runtime.hchan"), k, key=key)
    elif k == gt.FUNC:
        info.die("func_type", t.name, 8, k, key=key)


def _pointer_to(aux: Aux, elem: gt.GoType | None, by_name: Known) -> object:
    """A reference to the pointer type ``*elem`` (a slice's ``array`` member)."""
    if elem is None:
        return aux.ref("unsafe.Pointer")
    pointer = by_name.pointer_to(elem)
    if pointer is not None:
        return pointer.address
    name = "*" + elem.name
    aux.pointers[name] = elem.address
    return aux.ref(name)


# -- the types of a signature a spec gives ----------------------------------------------


def _type_ref(name: str, by_name: Known, aux: Aux, where: str) -> object:
    """A reference to the type a signature names: its descriptor's, else one written
    here for a basic type, a pointer or a slice."""
    if name in by_name:
        aux.roots.append(by_name[name])
        return by_name[name].address
    if name in _BASIC:
        return aux.ref(name)
    if name.startswith("*"):
        target = name[1:]
        # a pointer whose target has no descriptor is still a pointer: read as an address
        known = target in by_name or target in _BASIC or target[:1] in "*["
        aux.pointers[name] = _type_ref(target, by_name, aux, where) if known else None
        return aux.ref(name)
    if name.startswith("[]"):
        aux.slices[name] = (_type_ref(name[2:], by_name, aux, where),
                            _type_ref("*" + name[2:], by_name, aux, where))
        return aux.ref(name)
    raise NoopError(f"signature of {where}: the binary has no type descriptor for {name}, "
                    "so noop cannot lay it out",
                    "name a pointer to it (*T) to read it as an address, or give the binary's "
                    "debug info (--debuginfo)")


Declared = tuple[list[tuple[str, object, str]], list[tuple[str, object, str]]]


def declared_of(fn: str, text: str, by_name: Known, aux: Aux) -> Declared:
    """A spec's signature of ``fn``: (name, type reference, type name) of each parameter
    (the receiver not included) and result."""
    params, results = signature.parse(text, fn)
    offset = 1 if _METHOD.match(fn) else 0  # the receiver is p0
    return ([(n or f"p{i + offset}", _type_ref(t, by_name, aux, fn), t)
             for i, (n, t) in enumerate(params)],
            [(n or f"~r{i}", _type_ref(t, by_name, aux, fn), t)
             for i, (n, t) in enumerate(results)])
