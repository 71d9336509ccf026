"""Where each parameter and result of a function lives at its first instruction (or
at a pc inside it, or in a copy inlined elsewhere), with its type. ``Functions`` adds
this to the lookups of ``listing.Listing``.

DWARF locations come first; where DWARF is silent or only valid after the prologue
(Go results, C/Rust at -O0, optimized-out values), the platform ABI answers, and each
value says which source was used.
"""

from __future__ import annotations

from dataclasses import dataclass

from elftools.dwarf.die import DIE

from agent.binary.abi import aapcs64, goabi, sysv
from agent.binary.abi.shape import Shape
from agent.binary.arch import Arch
from agent.binary.dwarf import convention
from agent.binary.dwarf.dies import attr, die_name, origin_of
from agent.binary.dwarf.listing import Inlined, Listing
from agent.binary.dwarf.locations import Location, LocationReader, Unavailable
from agent.binary.dwarf.reader import Dwarf
from agent.binary.dwarf.shapes import shape_of
from agent.binary.dwarf.types import TypeNamer


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


class Functions(Listing):
    """Function lookups over one binary, and where each function's values live."""

    def __init__(self, dwarf: Dwarf, namer: TypeNamer) -> None:
        super().__init__(dwarf, namer)
        self.locations = LocationReader(dwarf)

    def param_types(self, name: str) -> dict[str, DIE | None]:
        """Each named parameter's type DIE (what selectors walk from)."""
        _sym, die = self.find(name)
        decls = [origin_of(c) for c in die.iter_children() if c.tag == "DW_TAG_formal_parameter"]
        if not decls:
            decls = [c for c in origin_of(die).iter_children()
                     if c.tag == "DW_TAG_formal_parameter"]
        return {die_name(d) or f"~p{i}": self.dwarf.ref(d) for i, d in enumerate(decls)
                if not attr(d, "DW_AT_variable_parameter")}

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
        cfa = self.dwarf.frames.cfa_at(pc)
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
            if where == ():  # AAPCS64: in memory where x8 pointed, which need not be kept
                where, ret_unplaced = None, "returned in memory at the address the caller " \
                    "passed in x8, which the function need not keep"
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
        arch = self.dwarf.elf.arch
        if not _assigned(arch, lang):  # noop assigns no convention here: DWARF alone says
            why = f"noop does not assign {arch.name}'s {lang.upper()} calling convention " \
                "yet: DWARF's location only"
            return [why] * len(params), why
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
        unplaced = [why or ("passed by reference, its address on the stack: noop does not "
                            "follow it" if abi[i] == () else "")
                    for i, why in enumerate(unplaced)]
        if not ret_unplaced and result is not None and arch.name == "x86-64":
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
            arch = self.dwarf.elf.arch
            if b"regabi" in producer:
                a = goabi.assign(args, results, arch=arch)
                return "go-internal (register)", list(a.args)[hidden:], list(a.results)
            a = goabi.assign(args, results, registers=False, arch=arch)
            return "go ABI0 (stack)", list(a.args)[hidden:], list(a.results)
        ret = self.dwarf.ref(origin)
        result = shape_of(self.namer, ret) if ret is not None else None
        arch = self.dwarf.elf.arch
        if not _assigned(arch, lang):
            return f"{arch.name} (not assigned: DWARF's locations only)", \
                [() for _a in args], [() for _r in ([result] if result else [])]
        if arch.name == "arm64":
            c = aapcs64.assign(args, result)
            return "aapcs64", list(c.args), list(c.results)
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


def outer_subprogram(dwarf: Dwarf, die: DIE) -> DIE | None:
    """The out-of-line subprogram an inlined copy (or a block) is in."""
    at = dwarf.parent(die)
    while at is not None and at.tag != "DW_TAG_subprogram":
        at = dwarf.parent(at)
    return at


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


def _assigned(arch: Arch, lang: str) -> bool:
    """Whether noop assigns ``lang``'s calling convention on ``arch`` itself: System V
    for C and (approximately) Rust on x86-64, AAPCS64 for C on arm64."""
    return arch.c_abi and (arch.name == "x86-64" or lang != "rust")
