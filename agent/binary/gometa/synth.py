"""DWARF made from a stripped Go binary's runtime metadata, as a small ELF debug file.

noop's DWARF machinery then answers for the stripped binary as it does for a binary
with debug info, from what the metadata holds and nothing more:

- one compile unit of types, shaped as Go's own DWARF shapes them (strings and slices
  as structs, interfaces as typedefs of ``runtime.iface``, …), for every type with a
  descriptor;
- a compile unit per package with a subprogram per pclntab function, its inlined
  copies (``DW_TAG_inlined_subroutine`` with the ranges pclntab's inlining tree
  gives) and, for a method whose signature the type metadata keeps, its parameters
  (``p0`` the receiver, ``p1``…) and results (``~r0``…) with types and no locations:
  the Go register ABI places them at entry;
- ``.debug_frame`` from pclntab's stack-pointer tables, and a symbol table.

The producer string says where it came from; ``PRODUCER`` marks it for readers.
"""

from __future__ import annotations

import re
import struct
from collections import defaultdict
from functools import cached_property
from pathlib import Path

from agent.binary.dwarf.writer import (
    TYPES_UNIT,
    Info,
    LineRow,
    abbrev_section,
    line_program,
    uleb,
    write_elf,
)
from agent.binary.gometa import rtypes as rt
from agent.binary.gometa import signature
from agent.binary.gometa.pclntab import PCDATA_INLTREE_INDEX, InlinedCall, node_ranges
from agent.binary.gometa.program import Function, GoProgram, Signature
from agent.binary.gometa.scope import Scope
from agent.errors import NoopError

PRODUCER = "noop from Go runtime metadata (pclntab, type descriptors); regabi"
FORMAT = 4  # bump when what is written changes: cached copies are then made anew

_ENCODING = {rt.BOOL: 0x02, rt.FLOAT32: 0x04, rt.FLOAT64: 0x04, rt.COMPLEX64: 0x03,
             rt.COMPLEX128: 0x03, **dict.fromkeys(
                 (rt.INT, rt.INT8, rt.INT16, rt.INT32, rt.INT64), 0x05)}

# (tag, children, ((attribute, form), …)) by abbreviation code
_ABBREVS: dict[str, tuple[str, bool, tuple[tuple[str, str], ...]]] = {
    "cu": ("compile_unit", True, (("name", "string"), ("language", "data2"),
                                   ("producer", "string"), ("low_pc", "addr"))),
    "cu_ranges": ("compile_unit", True, (("name", "string"), ("language", "data2"),
                                         ("producer", "string"), ("low_pc", "addr"),
                                         ("ranges", "sec_offset"),
                                         ("stmt_list", "sec_offset"))),
    "base": ("base_type", False, (("name", "string"), ("encoding", "data1"),
                                  ("byte_size", "udata"), ("go_kind", "data1"))),
    "struct": ("structure_type", True, (("name", "string"), ("byte_size", "udata"),
                                        ("go_kind", "data1"))),
    "struct_empty": ("structure_type", False, (("name", "string"), ("byte_size", "udata"),
                                               ("go_kind", "data1"))),
    "slice": ("structure_type", True, (("name", "string"), ("byte_size", "udata"),
                                       ("go_kind", "data1"), ("go_elem", "ref_addr"))),
    "member": ("member", False, (("name", "string"), ("data_member_location", "udata"),
                                 ("type", "ref_addr"), ("go_embedded", "flag"))),
    "pointer": ("pointer_type", False, (("name", "string"), ("type", "ref_addr"),
                                        ("go_kind", "data1"))),
    "void_pointer": ("pointer_type", False, (("name", "string"), ("go_kind", "data1"))),
    "typedef": ("typedef", False, (("name", "string"), ("type", "ref_addr"),
                                   ("go_kind", "data1"))),
    "array": ("array_type", True, (("name", "string"), ("type", "ref_addr"),
                                   ("byte_size", "udata"), ("go_kind", "data1"))),
    "subrange": ("subrange_type", False, (("count", "udata"),)),
    "func_type": ("subroutine_type", False, (("name", "string"), ("byte_size", "udata"),
                                             ("go_kind", "data1"))),
    "subprogram": ("subprogram", True, (("name", "string"), ("low_pc", "addr"),
                                        ("high_pc", "data8"), ("external", "flag_present"),
                                        ("prototyped", "flag"))),
    "abstract": ("subprogram", False, (("name", "string"), ("inline", "data1"))),
    "param": ("formal_parameter", False, (("name", "string"), ("type", "ref_addr"),
                                          ("variable_parameter", "flag"))),
    "inlined": ("inlined_subroutine", True, (("abstract_origin", "ref_addr"),
                                             ("ranges", "sec_offset"), ("call_file", "udata"),
                                             ("call_line", "udata"))),
}
# Go's basic types: (kind, size, DW_ATE encoding), for those without a descriptor.
_BASIC = {"bool": (rt.BOOL, 1, 0x02), "int": (rt.INT, 8, 0x05), "int8": (rt.INT8, 1, 0x05),
          "int16": (rt.INT16, 2, 0x05), "int32": (rt.INT32, 4, 0x05),
          "int64": (rt.INT64, 8, 0x05), "uint": (rt.UINT, 8, 0x07),
          "uint8": (rt.UINT8, 1, 0x07), "byte": (rt.UINT8, 1, 0x07),
          "uint16": (rt.UINT16, 2, 0x07), "uint32": (rt.UINT32, 4, 0x07),
          "uint64": (rt.UINT64, 8, 0x07), "uintptr": (rt.UINTPTR, 8, 0x07),
          "float32": (rt.FLOAT32, 4, 0x04), "float64": (rt.FLOAT64, 8, 0x04),
          "rune": (rt.INT32, 4, 0x05)}
_GO_LANGUAGE = 0x16
_METHOD = re.compile(r"^(?P<pkg>.*?[^/]*?)\.\((?P<ptr>\*?)(?P<type>[^)]+)\)\.[^.]+$")


def write(program: GoProgram, out: Path, signatures: dict[str, str] | None = None,
          scope: Scope | None = None) -> None:
    """Writes the DWARF debug file for ``program`` to ``out``, with the ``signatures``
    (Go function types, by function name) a spec gives where the metadata has none;
    for ``scope`` only (its functions, the functions they are inlined into and the
    types all of these need), else for the whole program."""
    info = Info(_ABBREVS)
    by_name = _Known(program, everything=scope is None)
    aux = _Aux(info)
    declared = {fn: _declared(fn, text, by_name, aux)
                for fn, text in (signatures or {}).items()}
    functions, trees = _chosen(program, scope, set(declared))
    types = program.types.all if scope is None else \
        _closure(by_name, [*aux.roots, *_roots(program, functions, scope, by_name)])
    _types_unit(info, types, aux, by_name)
    lines = bytearray()
    _functions_units(info, program, functions, trees, declared, lines, by_name)
    info.patch()
    frame = _frames(program, functions)
    symtab, strtab = _symbols(program if scope is None or scope.functions else None)
    sections = [(".debug_abbrev", abbrev_section(_ABBREVS)), (".debug_info", bytes(info.buf)),
                (".debug_ranges", bytes(info.ranges)), (".debug_frame", frame),
                (".debug_line", bytes(lines)),
                (".symtab", symtab), (".strtab", strtab)]
    write_elf(out, sections, program.module.text, program.module.etext)


def _chosen(program: GoProgram, scope: Scope | None, declared: set[str]
            ) -> tuple[list[Function], dict[str, list[InlinedCall]]]:
    """The functions to write, by address: those ``scope`` wants (and those a spec
    declares a signature of) with every function one of them is inlined into, or all;
    and their inlining trees."""
    gofunc = program.module.gofunc
    if scope is not None and not scope.functions and not declared:
        return [], {}  # types only: no function is read
    functions = program.functions
    if scope is not None:
        hosts = {f.offset for f in program.pclntab.inliners(
            [f.func for f in functions], scope.wants_function, gofunc)}
        functions = tuple(f for f in functions if f.func.offset in hosts or
                          f.name in declared or scope.wants_function(f.name))
    trees = {}
    for f in functions:
        tree = program.pclntab.inline_tree(f.func, gofunc)
        if tree:
            trees[f.name] = tree
    return list(functions), trees


class _Known:
    """A program's types by the name DWARF gives them, and its methods' signatures:
    from every type, read at once (``everything``), or each found when asked."""

    def __init__(self, program: GoProgram, everything: bool) -> None:
        self.program = program
        self.types = program.types
        self.everything = everything
        self._found: dict[str, rt.GoType | None] = {}

    @cached_property
    def _all(self) -> dict[str, rt.GoType]:
        return {t.name: t for t in self.types.all}

    def get(self, name: str) -> rt.GoType | None:
        if self.everything:
            return self._all.get(name)
        if name not in self._found:
            self._found[name] = self.types.find(name)
        return self._found[name]

    def __contains__(self, name: str) -> bool:
        return self.get(name) is not None

    def __getitem__(self, name: str) -> rt.GoType:
        got = self.get(name)
        if got is None:
            raise KeyError(name)
        return got

    def wanted(self, scope: Scope) -> list[rt.GoType]:
        """The types ``scope`` names."""
        return [t for t in (self.get(n) for n in scope.types) if t is not None]

    def name(self, t: rt.GoType) -> str:
        return self.types.name(t)

    def pointer_to(self, t: rt.GoType) -> rt.GoType | None:
        """The type ``*t``, where the binary has its descriptor."""
        if self.everything:
            return self._all.get("*" + t.name)
        return self.types.pointer_to(t)

    def signature(self, f: Function) -> Signature | None:
        """The signature of method ``f`` from its receiver type's method table."""
        if self.everything:
            return self.program.signatures.get(f.entry)
        pkg = _package(f.name)
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


def _roots(program: GoProgram, functions: list[Function], scope: Scope,
           by_name: _Known) -> list[rt.GoType]:
    """The types a scope's DWARF must hold: those it names, and the receivers,
    parameters and results of the functions written."""
    out = by_name.wanted(scope)
    for f in functions:
        sig = by_name.signature(f)
        if sig is not None:
            out += [sig.receiver, *sig.func.params, *sig.func.results]
        else:
            receiver = _receiver(f.name, by_name)
            if receiver is not None:
                out.append(receiver)
    return out


def _closure(by_name: _Known, roots: list[rt.GoType]) -> tuple[rt.GoType, ...]:
    """``roots`` and every type their DWARF refers to (elements, fields, a slice's
    pointer type), named, by address."""
    seen: dict[int, rt.GoType] = {}
    stack = list(roots)
    while stack:
        t = stack.pop()
        if t.address in seen:
            continue
        seen[t.address] = t
        by_name.name(t)
        if t.kind in (rt.POINTER, rt.SLICE, rt.ARRAY) and t.elem is not None:
            stack.append(t.elem)
            pointer = by_name.pointer_to(t.elem) if t.kind == rt.SLICE else None
            if pointer is not None:
                stack.append(pointer)
        elif t.kind == rt.STRUCT:
            stack += [f.type for f in t.fields]
    return tuple(t for _a, t in sorted(seen.items()))


# -- types -----------------------------------------------------------------------------


def _types_unit(info: Info, types: tuple[rt.GoType, ...], aux: _Aux,
                by_name: _Known) -> None:
    start = info.begin_unit()
    info.die("cu", TYPES_UNIT, _GO_LANGUAGE, PRODUCER, 0)
    for t in types:
        _type_die(info, aux, t, by_name)
    aux.finish()
    info.end_children()
    info.unit(start)


class _Aux:
    """Types Go's DWARF has that need no descriptor: ``int``, ``*uint8``,
    ``runtime.iface``…, written once each when something refers to them."""

    def __init__(self, info: Info) -> None:
        self.info = info
        self.wanted: set[str] = set()
        self.pointers: dict[str, object | None] = {}  # "*T" with no descriptor: T's reference
        self.slices: dict[str, tuple[object, object]] = {}  # "[]T": T's and *T's
        self.roots: list[rt.GoType] = []  # types with descriptors a signature names

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
                    self.info.die("void_pointer", name, rt.POINTER, key=key)
                else:
                    self.info.die("pointer", name, target, rt.POINTER, key=key)
            elif name in self.slices:
                elem, pointer = self.slices[name]
                self.info.die("slice", name, 24, rt.SLICE, elem, key=key)
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
                    self.info.die("pointer", name, self.ref(target), rt.POINTER, key=key)
                else:  # runtime internals noop has no descriptor for
                    self.info.die("void_pointer", name, rt.POINTER, key=key)
            elif name == "unsafe.Pointer":
                self.info.die("void_pointer", name, rt.UNSAFE_POINTER, key=key)
            elif name in ("runtime.iface", "runtime.eface"):
                first = ("tab", "*runtime.itab") if name == "runtime.iface" \
                    else ("_type", "*runtime._type")
                self.info.die("struct", name, 16, rt.STRUCT, key=key)
                self.info.die("member", first[0], 0, self.ref(first[1]), 0)
                self.info.die("member", "data", 8, self.ref("unsafe.Pointer"), 0)
                self.info.end_children()


def _type_die(info: Info, aux: _Aux, t: rt.GoType, by_name: _Known) -> None:
    key, k = t.address, t.kind

    def ref(x: rt.GoType | None) -> object:
        return x.address if x is not None else aux.ref("unsafe.Pointer")

    if k in (rt.BOOL, *range(rt.INT, rt.COMPLEX128 + 1)):
        info.die("base", t.name, _ENCODING.get(k, 0x07), t.size, k, key=key)
        info.offsets.setdefault(f"aux:{t.name}", info.offsets[key])
    elif k == rt.UNSAFE_POINTER:
        info.die("void_pointer", t.name, k, key=key)
    elif k == rt.STRING:
        info.die("struct", t.name, t.size, k, key=key)
        info.die("member", "str", 0, aux.ref("*uint8"), 0)
        info.die("member", "len", 8, aux.ref("int"), 0)
        info.end_children()
    elif k == rt.SLICE:
        info.die("slice", t.name, t.size, k, ref(t.elem), key=key)
        info.die("member", "array", 0, _pointer_to(aux, t.elem, by_name), 0)
        info.die("member", "len", 8, aux.ref("int"), 0)
        info.die("member", "cap", 16, aux.ref("int"), 0)
        info.end_children()
    elif k == rt.ARRAY:
        info.die("array", t.name, ref(t.elem), t.size, k, key=key)
        info.die("subrange", t.length)
        info.end_children()
    elif k == rt.POINTER:
        info.die("pointer", t.name, ref(t.elem), k, key=key)
    elif k == rt.STRUCT:
        if not t.fields:
            info.die("struct_empty", t.name, t.size, k, key=key)
            return
        info.die("struct", t.name, t.size, k, key=key)
        for f in t.fields:
            info.die("member", f.name, f.offset, f.type.address, int(f.embedded))
        info.end_children()
    elif k == rt.INTERFACE:
        info.die("typedef", t.name, aux.ref("runtime.eface" if not t.imethods
                                             else "runtime.iface"), k, key=key)
    elif k == rt.MAP:
        info.die("typedef", t.name, aux.ref("*runtime.hmap"), k, key=key)
    elif k == rt.CHAN:
        info.die("typedef", t.name, aux.ref("*runtime.hchan"), k, key=key)
    elif k == rt.FUNC:
        info.die("func_type", t.name, 8, k, key=key)


def _pointer_to(aux: _Aux, elem: rt.GoType | None, by_name: _Known) -> object:
    """A reference to the pointer type ``*elem`` (a slice's ``array`` member)."""
    if elem is None:
        return aux.ref("unsafe.Pointer")
    pointer = by_name.pointer_to(elem)
    if pointer is not None:
        return pointer.address
    name = "*" + elem.name
    aux.pointers[name] = elem.address
    return aux.ref(name)


def _type_ref(name: str, by_name: _Known, aux: _Aux, where: str) -> object:
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


def _declared(fn: str, text: str, by_name: _Known, aux: _Aux) -> Declared:
    """A spec's signature of ``fn``: (name, type reference, type name) of each parameter
    (the receiver not included) and result."""
    params, results = signature.parse(text, fn)
    offset = 1 if _METHOD.match(fn) else 0  # the receiver is p0
    return ([(n or f"p{i + offset}", _type_ref(t, by_name, aux, fn), t)
             for i, (n, t) in enumerate(params)],
            [(n or f"~r{i}", _type_ref(t, by_name, aux, fn), t)
             for i, (n, t) in enumerate(results)])


# -- functions ---------------------------------------------------------------------------


def _package(name: str) -> str:
    """The package of a function name: what comes before the first dot after the last
    slash (``github.com/a/b.(*T).M`` → ``github.com/a/b``)."""
    slash = name.rfind("/", 0, name.find("(") if "(" in name else len(name))
    dot = name.find(".", slash + 1)
    return name[:dot] if dot > 0 else name


def _functions_units(info: Info, program: GoProgram, functions: list[Function],
                     trees: dict[str, list[InlinedCall]], declared: dict[str, Declared],
                     lines: bytearray, by_name: _Known) -> None:
    """A unit per package of the ``functions`` written, each function with its inlined
    copies; every other function named as inlined gets an abstract entry in a unit of
    its package."""
    by_package: dict[str, list[Function]] = defaultdict(list)
    for f in functions:
        by_package[_package(f.name)].append(f)
    inlined_names: set[str] = set()
    for tree in trees.values():
        inlined_names.update(n.name.replace("·", ".") for n in tree)
    written = {f.name for f in functions}
    abstract: dict[str, list[str]] = defaultdict(list)  # not written here, by package
    for name in inlined_names - written:
        abstract[_package(name)].append(name)
    for pkg in sorted(by_package.keys() | abstract.keys()):
        funcs = by_package.get(pkg, [])
        start = info.begin_unit()
        if not funcs:
            info.die("cu", pkg, _GO_LANGUAGE, PRODUCER, 0)
        else:
            spans = _merge([(f.entry, f.entry + max(f.size, 1)) for f in funcs])
            # The unit's line table, from each function's pcfile and pcln tables.
            files: dict[str, int] = {}
            rows = {f.name: [(lo, hi, files.setdefault(name, len(files) + 1), line)
                             for lo, hi, name, line in program.pclntab.lines(f.func)]
                    for f in funcs}
            stmt_list = len(lines)
            lines += line_program(list(files), [rows[f.name] for f in
                                                sorted(funcs, key=lambda f: f.entry)])
            info.die("cu_ranges", pkg, _GO_LANGUAGE, PRODUCER, 0, info.range_list(spans),
                     stmt_list)
        for f in funcs:
            sig = by_name.signature(f)
            receiver = _receiver(f.name, by_name) if sig is None else sig.receiver
            given = declared.get(f.name)
            if given is not None and sig is not None:
                _agree(f.name, given, sig)
            info.die("subprogram", f.name, f.entry, f.size, 1 if sig or given else 0,
                     key=("fn", f.name))
            _params(info, sig, receiver, given)
            tree = trees.get(f.name, [])
            code = node_ranges(tree, program.pclntab.pcdata(f.func, PCDATA_INLTREE_INDEX)) \
                if tree else {}
            for node in (n for n in tree if n.parent < 0):
                _inlined(info, tree, node, code, rows[f.name])
            info.end_children()
        for name in sorted(abstract.get(pkg, ())):
            info.die("abstract", name, 1, key=("fn", name))
        info.end_children()
        info.unit(start)


def _receiver(name: str, types: _Known) -> rt.GoType | None:
    """A method's receiver type from its name alone (``pkg.(*T).M``), when the type has
    a descriptor."""
    m = _METHOD.match(name)
    if m is None:
        return None
    return types.get(f"{m['ptr']}{m['pkg']}.{m['type']}")


def _agree(fn: str, given: Declared, sig: Signature) -> None:
    """A spec's signature must be the one the type metadata keeps, where it keeps one."""
    mine = ([t for _n, _r, t in given[0]], [t for _n, _r, t in given[1]])
    theirs = ([p.name for p in sig.func.params], [r.name for r in sig.func.results])
    if mine != theirs:
        raise NoopError(f"signature of {fn}: the binary's type metadata says "
                        f"{sig.func.name}, not the spec's",
                        "leave signature: out for this function, or correct it")


def _params(info: Info, sig: Signature | None, receiver: rt.GoType | None,
            given: Declared | None) -> None:
    if receiver is not None:
        info.die("param", "p0", receiver.address, 0)
    if given is not None:
        for name, ref, _t in given[0]:
            info.die("param", name, ref, 0)
        for name, ref, _t in given[1]:
            info.die("param", name, ref, 1)
        return
    if sig is None:
        return
    for i, p in enumerate(sig.func.params, start=1):
        info.die("param", f"p{i}", p.address, 0)
    for i, r in enumerate(sig.func.results):
        info.die("param", f"~r{i}", r.address, 1)


def _inlined(info: Info, tree: list[InlinedCall], node: InlinedCall,
             code: dict[int, list[tuple[int, int]]], rows: list[LineRow]) -> None:
    """The inlined copy ``node`` of a function (its ``tree``, each node's ``code``), with
    the copies inlined into it, each with the file and line of its call: those of its
    ``parent_pc`` in the function's ``rows``."""
    def emit(n: InlinedCall) -> None:
        got = _merge(code.get(n.index, []))
        if not got:
            return
        name = n.name.replace("·", ".")
        at = next(((file, line) for lo, hi, file, line in rows if lo <= n.parent_pc < hi),
                  (0, 0))
        info.die("inlined", ("fn", name), info.range_list(got), *at)
        for child in tree:
            if child.parent == n.index:
                emit(child)
        info.end_children()

    emit(node)


def _merge(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(hi, out[-1][1]))
        else:
            out.append((lo, hi))
    return out


# -- frames and symbols ----------------------------------------------------------------


def _frames(program: GoProgram, functions: list[Function]) -> bytes:
    """``.debug_frame``: the canonical frame address at each pc, rsp + 8 + the frame's
    size from pclntab's pcsp table."""
    cie_body = (struct.pack("<IB", 0xFFFFFFFF, 1) + b"\0" + uleb(1) + b"\x78" + bytes([16])
                + b"\x0c\x07\x08" + b"\x90\x01")
    cie_body += bytes(-(len(cie_body) + 4) % 8)
    out = bytearray(struct.pack("<I", len(cie_body)) + cie_body)
    pcl = program.pclntab
    for f in functions:
        rec = pcl._func(f.func.offset)
        body = bytearray(struct.pack("<IQQ", 0, f.entry, f.size))
        pc = f.entry
        for lo, _hi, sp in pcl.pcvalue(rec[4], f.entry) if rec[4] else []:
            if lo > pc:
                body += b"\x04" + struct.pack("<I", lo - pc)
                pc = lo
            body += b"\x0e" + uleb(8 + max(sp, 0))
        body += bytes(-(len(body) + 4) % 8)
        out += struct.pack("<I", len(body)) + body
    return bytes(out)


def _symbols(program: GoProgram | None) -> tuple[bytes, bytes]:
    """The symbol table of every function (none without ``program``)."""
    strtab = bytearray(b"\0")
    symtab = bytearray(bytes(24))
    for f in program.functions if program is not None else ():
        name = len(strtab)
        strtab += f.name.encode() + b"\0"
        symtab += struct.pack("<IBBHQQ", name, 0x12, 0, 1, f.entry, f.size)  # GLOBAL FUNC
    return bytes(symtab), bytes(strtab)
