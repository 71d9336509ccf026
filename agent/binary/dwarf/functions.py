"""Functions: find one by the name the binary gives it, list all, and say where each
parameter and result lives at the function's first instruction.

DWARF locations come first; where DWARF is silent or only valid after the prologue
(Go results, C/Rust at -O0, optimized-out values), the platform ABI answers, and each
value says which source was used.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from functools import cached_property

from elftools.dwarf.die import DIE

from agent import cache
from agent.binary.abi import goabi, sysv
from agent.binary.abi.shape import Shape
from agent.binary.demangle import demangle, strip_suffix
from agent.binary.dwarf import convention
from agent.binary.dwarf.locations import Location, LocationReader, Unavailable
from agent.binary.dwarf.reader import Dwarf, attr, die_name, origin_of
from agent.binary.dwarf.shapes import shape_of
from agent.binary.dwarf.types import TypeNamer
from agent.binary.elf import Symbol
from agent.errors import NoopError, NotFound


@dataclass(frozen=True, slots=True)
class Variable:
    """A parameter or result: its type, and its location at the function's entry."""

    name: str
    type: str
    size: int
    location: Location | None
    source: str  # "dwarf" or "abi"; "none" when neither can say
    note: str = ""


@dataclass(frozen=True, slots=True)
class FunctionVars:
    function: str
    address: int
    file_offset: int
    language: str
    abi: str
    params: tuple[Variable, ...]
    results: tuple[Variable, ...]


@dataclass(frozen=True, slots=True)
class Inlined:
    """A copy of a function compiled into another one (DW_TAG_inlined_subroutine)."""

    entry: int  # DW_AT_entry_pc, else the lowest address of the copy
    die: DIE


@dataclass(frozen=True, slots=True)
class FunctionSummary:
    name: str
    address: int
    size: int
    inlined: int  # DW_TAG_inlined_subroutine instances of this function


_offsets = cache.shaped(dict[str, list[int]])  # DIE offsets by name, as cached


def _by_offset(value: object) -> dict[str, list[int]]:
    """The cached inlined index: DIE offsets by a DIE offset written in decimal."""
    index: dict[str, list[int]] = _offsets(value)
    # _named reads each key as a number, and inlined() looks one up as str(offset)
    if not all(k.isascii() and k.isdigit() and str(int(k)) == k for k in index):
        raise ValueError("an inlined index keyed by other than offsets")
    return index


class Functions:
    """Function lookups over one binary."""

    def __init__(self, dwarf: Dwarf, namer: TypeNamer) -> None:
        self.dwarf = dwarf
        self.namer = namer
        self.locations = LocationReader(dwarf)
        self._index: dict[str, list[int]] | None = None
        self._names: dict[str, list[int]] | None = None
        # What questions about a few functions found, reading only the units they need:
        # a function's name-holding DIEs with copies, and each such DIE's copies.
        self._keys: dict[str, list[int]] = {}
        self._copies: dict[int, list[int]] = {}

    @cached_property
    def symbols(self) -> dict[str, Symbol]:
        """Function symbols by the name a user writes (Rust's names demangled)."""
        out: dict[str, Symbol] = {}
        for sym in self.dwarf.elf.function_symbols():
            out.setdefault(sym.name, sym)
            plain = self.display_name(sym.name)
            if plain != sym.name:
                out.setdefault(plain, sym)
        return out

    def find(self, name: str) -> tuple[Symbol, DIE]:
        """The function's symbol and DWARF entry. A function that exists only as
        inlined copies has a symbol of address 0 and size 0 (``only_inlined``) and the
        DIE that names it."""
        sym = self.symbols.get(name)
        if sym is None and name.startswith(("struct ", "fn ")):
            sym = self.symbols.get(name.split(" ", 1)[1])
        if sym is None and self.only_inlined(name):
            return Symbol(name, 0, 0), self.dwarf.die_at(self._keys_of(name)[0])
        if sym is None:
            raise NotFound("function", name, self._every_name())
        die = self.dwarf.subprogram_at(sym.address)
        if die is None:
            raise NoopError(f"function {name!r} has a symbol but no DWARF entry",
                            "it may come from assembly or a library built without -g")
        return sym, die

    def param_types(self, name: str) -> dict[str, DIE | None]:
        """Each named parameter's type DIE (what selectors walk from)."""
        _sym, die = self.find(name)
        decls = [origin_of(c) for c in die.iter_children() if c.tag == "DW_TAG_formal_parameter"]
        if not decls:
            decls = [c for c in origin_of(die).iter_children()
                     if c.tag == "DW_TAG_formal_parameter"]
        return {die_name(d) or f"~p{i}": self.dwarf.ref(d) for i, d in enumerate(decls)
                if not attr(d, "DW_AT_variable_parameter")}

    def _inlined_index(self) -> dict[str, list[int]]:
        """Offsets of every inlined copy, by the offset of the function's abstract DIE:
        one walk over all of DWARF (seconds on a large Go binary), cached by build-id."""
        if self._index is not None:
            return self._index
        build_id = self.dwarf.cache_id
        index = cache.get(build_id, "inlined", "v1", load=_by_offset) if build_id else None
        if index is None:
            index = self.dwarf.inlined_index()
            if build_id:
                cache.put(build_id, "inlined", "v1", index)
        self._index = index
        return index

    def _named(self) -> dict[str, list[int]]:
        """The DIEs naming inlined functions (keys of the inlined index), by the name a
        user writes; rustc writes a function's DIE again in each unit it is inlined
        in. One pass over the index, cached by build-id."""
        if self._names is not None:
            return self._names
        build_id = self.dwarf.cache_id
        got = cache.get(build_id, "inlined-names", "v1", load=_offsets) if build_id else None
        if got is None:
            got = {}
            keys = {int(k) for k in self._inlined_index()}
            fast = self.dwarf.names_at(keys)
            for key in sorted(keys):
                name = fast.get(key) if fast is not None else \
                    self.function_name(self.dwarf.die_at(key))
                if name:
                    got.setdefault(name, []).append(key)
            if build_id:
                cache.put(build_id, "inlined-names", "v1", got)
        self._names = got
        return got

    def copies(self, name: str) -> list[str]:
        """The symbols of other copies of function ``name``: the same mangled symbol but
        for LLVM's ``.llvm.N`` (rustc's copies of one function in several codegen units:
        its hash says it is the same function), at other addresses, by their own
        symbol names. Two C functions of one name (statics of two files) are not
        copies of each other."""
        first = self.symbols.get(name)
        if first is None or not first.name.startswith(("_ZN", "_R")):
            return []
        base = strip_suffix(first.name)
        seen = {first.address}
        out = []
        for sym in self.dwarf.elf.function_symbols():
            if sym.size and sym.address not in seen and strip_suffix(sym.name) == base:
                seen.add(sym.address)
                out.append(sym.name)
        return out

    def dwarf_name(self, name: str) -> str:
        """The name DWARF gives function ``name`` (a symbol's name may differ: rustc's
        legacy symbols write a closure as ``{{closure}}``, DWARF as ``{async_fn_env#0}``
        or ``{closure#0}``); '' when DWARF has none."""
        sym = self.symbols.get(name)
        die = self.dwarf.subprogram_at(sym.address) if sym is not None else None
        return self.function_name(origin_of(die)) if die is not None else ""

    def only_inlined(self, name: str) -> bool:
        """Whether ``name`` exists only as copies inlined into other functions."""
        return name not in self.symbols and bool(self._keys_of(name))

    def inlined_names(self) -> list[str]:
        """Functions that exist only as inlined copies."""
        return [n for n in self._named() if n not in self.symbols]

    def inlined_among(self, names: Collection[tuple[str, ...]], keep: Callable[[str], bool]
                      ) -> list[str]:
        """The functions that exist only as inlined copies and whose name ``keep``
        accepts, among those whose own name and the namespaces and types they are in
        name all parts of one of ``names``: read from the units that mention them (and
        those their copies are in), not from every unit."""
        got = self._targeted(names, keep)
        if got is None:
            return [n for n in self.inlined_names() if keep(n)]
        return [n for n in got if n not in self.symbols]

    def _every_name(self) -> Iterator[str]:
        """Every function's name, the inlined-only ones read when first asked for."""
        yield from self.symbols
        yield from self._named()

    def _keys_of(self, name: str) -> list[int]:
        """The DIEs holding function ``name`` that inlined copies lead to."""
        if self._names is not None:
            return self._names.get(name, [])
        go = self.dwarf.language == "go"
        if name not in self._keys:
            got = self._targeted([name_parts(name) if not go else (name,)],
                                 lambda n: n == name, own=True)
            # C++'s conversion operators name a type, whose "::" no scope splits
            if got is not None and (go or (_balanced(name) and "operator" not in name)):
                self._keys.setdefault(name, [])  # no unit names it: there is none
        if name not in self._keys:  # the raw reader could not say: every unit
            self._keys[name] = self._named().get(name, [])
        return self._keys[name]

    def _targeted(self, names: Collection[tuple[str, ...]], keep: Callable[[str], bool],
                  own: bool = False) -> dict[str, list[int]] | None:
        """The name-holding DIEs with copies of the functions ``keep`` accepts among
        those ``names`` mention (``Tree.keys``), kept for later questions; None when the
        raw reader cannot read them."""
        keys = self.dwarf.function_keys(names, keep, own)
        index = self.dwarf.copies([k for ks in keys.values() for k in ks]) \
            if keys is not None else None
        if keys is None or index is None:
            return None
        self._copies.update(index)
        # a function named so with no copies has none: said, not asked again
        self._keys.update({n: [k for k in ks if index.get(k)] for n, ks in keys.items()})
        # in the whole index's order: by each name's first DIE with copies
        return {n: self._keys[n] for n in sorted((n for n in keys if self._keys[n]),
                                                 key=lambda n: min(self._keys[n]))}

    def _copies_of(self, key: int) -> list[int]:
        """The inlined copies of the function whose name-holding DIE is at ``key``."""
        if self._index is not None:
            return self._index.get(str(key), [])
        if key not in self._copies:
            got = self.dwarf.copies([key])
            if got is None:
                return self._inlined_index().get(str(key), [])
            self._copies[key] = got.get(key, [])
        return self._copies[key]

    def inlined(self, name: str) -> tuple[Inlined, ...]:
        """The function's inlined copies with code, by entry address."""
        _sym, die = self.find(name)
        keys = {origin_of(die).offset}
        if self.dwarf.unit_language(die.cu) != "go":  # Go names a function once
            keys.update(self._keys_of(self.display_name(name)))
        out = []
        for offset in (o for k in sorted(keys) for o in self._copies_of(k)):
            copy = self.dwarf.die_at(offset)
            entry = attr(copy, "DW_AT_entry_pc")
            ranges = self.dwarf.ranges(copy)
            if isinstance(entry, int) and ranges and \
                    copy.attributes["DW_AT_entry_pc"].form.startswith("DW_FORM_data"):
                entry += ranges[0][0]  # DWARF 5: an offset from the copy's first address
            if not isinstance(entry, int) or not entry:
                entry = min((lo for lo, _hi in ranges), default=0)
            if entry:
                out.append(Inlined(entry, copy))
        return tuple(sorted(out, key=lambda c: c.entry))

    def location_at(self, die: DIE, pc: int, cfa: int, param: str, size: int
                    ) -> Location | None:
        """Where DWARF places parameter ``param`` of the function ``die`` when the
        instruction at ``pc`` is about to run, with stack slots relative to rsp there
        (``cfa``: the canonical frame address's offset from rsp at ``pc``); None when it
        says nothing noop can read."""
        return self._param_location(die, param, size, pc, frame_base(die), cfa)

    def location_starts(self, die: DIE, param: str) -> list[int]:
        """The addresses where parameter ``param``'s location list changes, in order."""
        var = _param_die(die, param)
        return sorted(lo for lo, _hi, _e in self.locations.ranges(var)) if var else []

    def display_name(self, symbol: str) -> str:
        """A symbol as a user writes it (Rust's names demangled, LLVM's suffixes off)."""
        return demangle(symbol) or symbol

    def inlined_location(self, copy: Inlined, param: str, size: int, pc: int | None = None
                         ) -> Location | None:
        """Where parameter ``param`` of an inlined copy is at its entry (or at ``pc``,
        inside it): for Go, registers only (a stack slot there is relative to the
        caller's frame, which noop does not track); None when DWARF gives no such
        location."""
        pc = copy.entry if pc is None else pc
        if self.dwarf.unit_language(copy.die.cu) == "go":
            loc = self._param_location(copy.die, param, size, pc, None, None)
            return loc if loc is not None and all(p.reg is not None for p in loc) else None
        # C and Rust: a slot in the caller's frame is read from rsp there, through the
        # caller's frame base and the call-frame information at the copy's entry.
        outer = outer_subprogram(self.dwarf, copy.die)
        cfa = self.dwarf.cfa_at(pc)
        return self._param_location(copy.die, param, size, pc,
                                    frame_base(outer) if outer is not None else None, cfa)

    def _param_location(self, die: DIE, param: str, size: int, pc: int,
                        frame_base: list[int] | None, cfa: int | None) -> Location | None:
        child = _param_die(die, param)
        expr = self.locations.expression_at(child, pc) if child is not None else None
        if not expr:
            return None
        try:
            loc = self.locations.pieces(expr, size, frame_base, at_entry=False, cfa=cfa)
        except Unavailable:
            return None
        return loc if all(p.reg is not None or p.stack is not None for p in loc) else None

    def result_types(self, name: str) -> dict[str, DIE | None]:
        """Each result's type DIE, by the name ``vars`` gives it (``~r0`` when unnamed;
        a C or Rust function's one result is ``~r0``)."""
        _sym, die = self.find(name)
        origin = origin_of(die)
        if self.dwarf.unit_language(die.cu) != "go":
            ret = self.dwarf.ref(origin)
            return {"~r0": ret} if ret is not None else {}
        decls = [origin_of(c) for c in die.iter_children() if c.tag == "DW_TAG_formal_parameter"]
        if not decls:
            decls = [c for c in origin.iter_children() if c.tag == "DW_TAG_formal_parameter"]
        results = [d for d in decls if attr(d, "DW_AT_variable_parameter")]
        return {die_name(d) or f"~r{i}": self.dwarf.ref(d) for i, d in enumerate(results)}

    def vars(self, name: str) -> FunctionVars:
        sym, die = self.find(name)
        if not sym.address:
            return self._inlined_vars(name, die)
        origin = origin_of(die)
        lang = self.dwarf.unit_language(die.cu)
        fb = frame_base(die)
        params: list[tuple[DIE, DIE]] = []  # (concrete, declaration with name and type)
        results: list[tuple[DIE, DIE]] = []
        for child in die.iter_children():
            if child.tag != "DW_TAG_formal_parameter":
                continue
            decl = origin_of(child)
            (results if attr(decl, "DW_AT_variable_parameter") else params).append((child, decl))
        if not params and not results and origin is not die:
            # A concrete copy that lists no parameters: take the declaration's.
            params = [(c, c) for c in origin.iter_children()
                      if c.tag == "DW_TAG_formal_parameter"]
        types = [self.dwarf.ref(d) for _, d in params]
        shapes = [shape_of(self.namer, t) for t in types]
        result_shapes = [shape_of(self.namer, self.dwarf.ref(d)) for _, d in results]
        abi_name, abi_args, abi_results = self._abi(lang, die, origin, shapes, result_shapes)
        dwarf = [self._at_entry(c, d, sym.address, fb) for c, d in params]
        unplaced, ret_unplaced = self._unplaced(lang, sym.name, die, origin, params, shapes,
                                                types, dwarf, abi_args)
        # Only the Go ABIs are fixed by the compiler at every call: trust them over DWARF.
        abi_binding = lang == "go"
        out_params = tuple(self._variable(d, dwarf[i], None if unplaced[i] else abi_args[i],
                                          unplaced[i], i, abi_binding)
                           for i, (_c, d) in enumerate(params))
        out_results = tuple(self._result(d, abi_results[i] if i < len(abi_results) else None, i)
                            for i, (_c, d) in enumerate(results))
        ret = self.dwarf.ref(origin) if lang != "go" else None
        if ret is not None and abi_results:
            where: Location | None = None if ret_unplaced else abi_results[0]
            out_results = (Variable("~r0", self.namer.name(ret), self.namer.size(ret) or 0,
                                    where, "none" if where is None else "abi",
                                    ret_unplaced or "at each RET"),)
        return FunctionVars(name, sym.address, self.dwarf.elf.file_offset(sym.address), lang,
                            abi_name, out_params, out_results)

    def no_values(self, name: str) -> str:
        """Why the debug info of function ``name`` keeps none of its values: a Rust build
        read from its symbol table only, or one with line tables only ('' otherwise)."""
        from agent.binary.dwarf import symtab

        _sym, die = self.find(name)
        top = die.cu.get_top_DIE()
        if attr(top, "DW_AT_producer", b"") == symtab.PRODUCER.encode():
            return "the binary is a Rust build without debug info: noop has its symbol " \
                "table only"
        if self.dwarf.unit_language(die.cu) == "rust" and not any(
                c.tag == "DW_TAG_formal_parameter" for c in origin_of(die).iter_children()) \
                and not any(c.tag == "DW_TAG_base_type" for c in top.iter_children()):
            return "the binary was built with line tables only (debug = " \
                "\"line-tables-only\"): no types or variables"
        return ""

    def _inlined_vars(self, name: str, die: DIE) -> FunctionVars:
        """A function with no code of its own: its parameters and result, each placed
        by every inlined copy for itself."""
        lang = self.dwarf.unit_language(die.cu)
        decls = [c for c in die.iter_children() if c.tag == "DW_TAG_formal_parameter"]
        n = len(self.inlined(name))
        why = f"only inlined ({n} cop{'ies' if n != 1 else 'y'}): each copy places it"
        params = tuple(Variable(die_name(d) or f"~p{i}", self.namer.name(t),
                                self.namer.size(t) or 0, None, "none", why)
                       for i, d in enumerate(decls) for t in [self.dwarf.ref(d)])
        ret = self.dwarf.ref(die) if lang != "go" else None
        results = (Variable("~r0", self.namer.name(ret), self.namer.size(ret) or 0, None,
                            "none", "only inlined: a copy has no return of its own"),) \
            if ret is not None else ()
        return FunctionVars(name, 0, 0, lang, f"inlined only ({n} copies)", params, results)

    def _unplaced(self, lang: str, symbol: str, die: DIE, origin: DIE,
                  params: list[tuple[DIE, DIE]], shapes: list[Shape],
                  types: list[DIE | None], dwarf: list[Location | str],
                  abi: list[Location]) -> tuple[list[str], str]:
        """Per parameter, and for a C or Rust result, why the ABI may not say where it is
        ('' where it may): see agent.binary.dwarf.convention. Go keeps its ABI everywhere."""
        if lang == "go":
            return [""] * len(params), ""
        ret = self.dwarf.ref(origin)
        result = shape_of(self.namer, ret) if ret is not None else None
        changed = convention.changed(symbol, die, origin)
        if changed:
            unplaced, ret_unplaced = [changed] * len(params), changed
        elif lang == "rust":
            unplaced = convention.rust_unplaced(shapes, [self.namer.name(t) for t in types])
            ret_unplaced = convention.rust_result_unplaced(result, self.namer.name(ret))
        else:
            unplaced, ret_unplaced = [""] * len(params), ""
        moved = next(((die_name(d) or "?", loc, abi[i]) for i, ((_c, d), loc)
                      in enumerate(zip(params, dwarf, strict=True))
                      if not unplaced[i] and not isinstance(loc, str)
                      and _disagree(loc, abi[i])), None)
        if moved is not None:
            # A compiler that moved one argument (clang before DW_CC_nocall existed for
            # it) may have removed any other.
            name, loc, where = moved
            changed = (f"DWARF places {name} in {' '.join(map(str, loc))} at entry, where the "
                       f"convention passes it in {' '.join(map(str, where))}: the compiler "
                       "changed how the function is called")
            unplaced, ret_unplaced = [changed] * len(params), changed
        if not ret_unplaced and result is not None:
            ret_unplaced = convention.result_unreadable(lang, result)
        return ([why or convention.unused_by_llvm(c)
                 for why, (c, _d) in zip(unplaced, params, strict=True)], ret_unplaced)

    def _abi(self, lang: str, die: DIE, origin: DIE, args: list[Shape],
             results: list[Shape]) -> tuple[str, list[Location], list[Location]]:
        if lang == "go":
            producer = attr(die.cu.get_top_DIE(), "DW_AT_producer", b"") or b""
            name = die_name(origin) or ""
            hidden = 0
            if "[go.shape." in name and not any(
                    die_name(c) == ".dict" for c in origin.iter_children()):
                # A shape instance takes its generic dictionary first, in rax; Go 1.19's
                # DWARF does not list it, so it is assigned here and not shown.
                args = [Shape("int", 8, 8), *args]
                hidden = 1
            if b"regabi" in producer:
                a = goabi.assign(args, results)
                return "go-internal (register)", list(a.args)[hidden:], list(a.results)
            a = goabi.assign(args, results, registers=False)
            return "go ABI0 (stack)", list(a.args)[hidden:], list(a.results)
        ret = self.dwarf.ref(origin)
        result = shape_of(self.namer, ret) if ret is not None else None
        s = sysv.assign(args, result, rust=lang == "rust")
        name = "rust (sysv-based, approximate)" if lang == "rust" else "sysv"
        return name, list(s.args), list(s.results)

    def _at_entry(self, concrete: DIE, decl: DIE, pc: int, frame_base: list[int] | None
                  ) -> Location | str:
        """Where DWARF places a parameter at the function's entry, or why it does not."""
        expr = self.locations.expression_at(concrete, pc)
        if not expr and "DW_AT_const_value" in concrete.attributes:
            value = attr(concrete, "DW_AT_const_value")
            return f"dwarf: always {value!r}, a constant noop does not read yet"
        if not expr:
            return "dwarf: no location at entry" if "DW_AT_location" in concrete.attributes \
                else "dwarf: no location"
        size = self.namer.size(self.dwarf.ref(decl)) or 0
        try:
            return self.locations.pieces(expr, size, frame_base, at_entry=True)
        except Unavailable as why:
            return f"dwarf: {why}"

    def _variable(self, decl: DIE, dwarf: Location | str, abi_loc: Location | None,
                  unplaced: str, index: int, abi_binding: bool) -> Variable:
        """A parameter at entry: where DWARF places it (``dwarf``, or why it does not),
        else (or, for Go, over it) where the ABI does; ``abi_loc`` is None where the ABI
        may not say (``unplaced``: why)."""
        tdie = self.dwarf.ref(decl)
        tname, size = self.namer.name(tdie), self.namer.size(tdie) or 0
        name = die_name(decl) or f"~p{index}"
        if isinstance(dwarf, str):
            note = dwarf
        elif abi_loc is None or not _disagree(dwarf, abi_loc):
            return Variable(name, tname, size, dwarf, "dwarf")
        elif not abi_binding:
            return Variable(name, tname, size, dwarf, "dwarf",
                            "abi says " + " ".join(map(str, abi_loc)))
        else:
            # At entry a Go function's arguments are where its ABI puts them; Go's DWARF
            # sometimes describes only the part the body uses (len(s) of a string) or a
            # spill slot (generic dictionaries), so the ABI wins.
            note = "dwarf says " + " ".join(map(str, dwarf)) + ", not the ABI's entry state"
        if abi_loc is None:
            return Variable(name, tname, size, None, "none",
                            f"{unplaced}; {note}" if unplaced else note)
        return Variable(name, tname, size, abi_loc, "abi", note)

    def moved_params(self, die: DIE, entry: int, pc: int) -> list[str]:
        """Parameters whose DWARF location expression at ``pc`` is not the one at the
        function's entry."""
        out = []
        for child in die.iter_children():
            if child.tag == "DW_TAG_formal_parameter" and \
                    not attr(origin_of(child), "DW_AT_variable_parameter") and \
                    self.locations.expression_at(child, entry) != \
                    self.locations.expression_at(child, pc):
                out.append(die_name(origin_of(child)) or die_name(child) or "?")
        return out

    def _result(self, decl: DIE, abi_loc: Location | None, index: int) -> Variable:
        tdie = self.dwarf.ref(decl)
        name = die_name(decl) or f"~r{index}"
        return Variable(name, self.namer.name(tdie), self.namer.size(tdie) or 0, abi_loc,
                        "abi" if abi_loc is not None else "none",
                        "at each RET" if abi_loc is not None else "")

    def summaries(self) -> tuple[FunctionSummary, ...]:
        """Every function symbol with its inlined-instance count, then the functions
        that exist only inlined (address and size 0), from the inlined index."""
        index = self._inlined_index()
        inlined = {name: sum(len(index.get(str(k), ())) for k in keys)
                   for name, keys in self._named().items()}
        syms = sorted(self.dwarf.elf.function_symbols(), key=lambda s: (s.address, s.name))
        out = [FunctionSummary(shown, s.address, s.size, inlined.get(shown, 0))
               for s in syms for shown in [self.display_name(s.name)]]
        named = {f.name for f in out}
        out += [FunctionSummary(n, 0, 0, count) for n, count in sorted(inlined.items())
                if n and n not in named and n not in self.symbols]
        return tuple(out)

    def function_name(self, decl: DIE) -> str:
        """The name a user writes: Go's DW_AT_name is already qualified, Rust's is not."""
        if self.dwarf.unit_language(decl.cu) == "go":
            return die_name(decl) or ""
        return self.namer.qualified(decl)


def outer_subprogram(dwarf: Dwarf, die: DIE) -> DIE | None:
    """The out-of-line subprogram an inlined copy (or a block) is in."""
    at = dwarf.parent(die)
    while at is not None and at.tag != "DW_TAG_subprogram":
        at = dwarf.parent(at)
    return at


def name_parts(name: str) -> tuple[str, ...]:
    """The parts of a qualified name (``a::B<c::D>::f`` -> ``a``, ``B<c::D>``, ``f``: the
    DW_AT_names of a DIE and the scopes it is in), ``::`` inside brackets not counted."""
    depth = last = i = 0
    parts = []
    while i < len(name):
        if name.startswith("->", i):
            i += 2
            continue
        c = name[i]
        if c in "<([":
            depth += 1
        elif c in ">)]":
            depth -= 1
        elif depth == 0 and name.startswith("::", i):
            parts.append(name[last:i])
            last = i = i + 2
            continue
        i += 1
    return (*parts, name[last:])


def _balanced(name: str) -> bool:
    """Whether every bracket of ``name`` closes (then ``name_parts`` splits it as
    DWARF's names nest)."""
    depth = 0
    for c in name.replace("->", ""):
        depth += (c in "<([") - (c in ">)]")
        if depth < 0:
            return False
    return depth == 0


def own_name(name: str) -> str:
    """The last part of a qualified name: what its DIE's DW_AT_name holds."""
    return name_parts(name)[-1]


def frame_base(die: DIE) -> list[int] | None:
    """A subprogram's DW_AT_frame_base expression, when it is one."""
    a = die.attributes.get("DW_AT_frame_base")
    return list(a.value) if a is not None and a.form in ("DW_FORM_exprloc",
                                                         "DW_FORM_block1") else None


def _param_die(die: DIE, param: str) -> DIE | None:
    """The formal parameter of subprogram or inlined copy ``die`` named ``param`` (an
    unnamed one: ``~pN``, the Nth)."""
    params = [c for c in die.iter_children() if c.tag == "DW_TAG_formal_parameter"]
    named = next((c for c in params if die_name(origin_of(c)) == param), None)
    if named is None and param.startswith("~p") and param[2:].isdigit() \
            and int(param[2:]) < len(params) and not die_name(origin_of(params[int(param[2:])])):
        return params[int(param[2:])]
    return named


def _disagree(a: Location, b: Location) -> bool:
    """Whether two locations name different places (pieces split differently still agree)."""
    return _places(a) != _places(b)


def _places(loc: Location) -> list[tuple[str, int, int]]:
    """(register or "stack", start, size), with adjacent stack pieces merged."""
    out: list[tuple[str, int, int]] = []
    for p in loc:
        if p.stack is not None and out and out[-1][0] == "stack" \
                and out[-1][1] + out[-1][2] == p.stack:
            out[-1] = ("stack", out[-1][1], out[-1][2] + p.size)
        elif p.stack is not None:
            out.append(("stack", p.stack, p.size))
        else:
            out.append(((p.reg or "") + ("[]" if p.at is not None else "")
                        + (f"{p.add:+d}" if p.add else ""), p.at or 0, p.size))
    return out
