"""Source lines of functions: a function's listing (which lines can be probed, at which
addresses, which calls were inlined where), the sites of a line (``FUNCTION:LINE`` or
``FILE:LINE``); the parameters and locals available at each site are ``sitevars``'.

A function's lines are those of its own code: of its out-of-line body and of each
copy inlined elsewhere, without the code inlined into them (which is the callee's
line). A line can be probed where the line table has a statement row for it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from elftools.dwarf.die import DIE

from agent.binary.dwarf.dies import attr, origin_of
from agent.binary.dwarf.functions import Functions, outer_subprogram
from agent.binary.dwarf.lines import Lines, Row, Scope, file_names, is_source_name, same_file
from agent.binary.dwarf.locations import Location
from agent.errors import NoopError, nearest

VAR_TAGS = ("DW_TAG_formal_parameter", "DW_TAG_variable")


@dataclass(frozen=True, slots=True)
class Body:
    """One copy of a function's code: its out-of-line body or a copy inlined into
    ``into`` (the out-of-line function holding it)."""

    scope: Scope
    into: str  # the function whose code holds this copy ('' for the out-of-line body)
    subprogram: DIE  # the out-of-line subprogram holding it (its frame base)


@dataclass(frozen=True, slots=True)
class Site:
    """A statement address of a line, in one body."""

    address: int
    file: str
    line: int
    function: str  # the function whose line it is (an inlined callee's, inside a copy)
    into: str  # the out-of-line function holding the code, when that is another
    chain: tuple[Scope, ...]  # the body the line is in, and the blocks inside it holding it
    subprogram: DIE


@dataclass(slots=True)
class _Line:
    """One line of a listing, as it is gathered: its statement addresses (each with the
    function its copy is compiled into, '' for the out-of-line body) and the functions
    inlined on it."""

    file: str
    line: int
    sites: dict[int, str] = field(default_factory=dict)
    inlines: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        return {"file": self.file, "line": self.line,
                "sites": [{"address": a, **({"in": into} if into else {})}
                          for a, into in sorted(self.sites.items())],
                "inlines": self.inlines}


@dataclass(frozen=True, slots=True)
class Var:
    name: str
    kind: str  # param, result or local
    type: str
    size: int
    location: Location | None
    note: str = ""
    tdie: DIE | None = field(default=None, compare=False, repr=False)  # its type's entry
    constant: int | None = None  # the value itself, where DWARF gives it as a constant


class Source:
    """Line answers over one binary."""

    def __init__(self, functions: Functions) -> None:
        self.functions = functions
        self.dwarf = functions.dwarf
        self.lines = Lines(self.dwarf)

    # -- a function's bodies and lines -------------------------------------------

    def bodies(self, name: str) -> list[Body]:
        sym, die = self.functions.find(name)
        out = []
        if sym.address:
            out.append(Body(self.lines.scopes(die), "", die))
        for copy in self.functions.inlined(name):
            outer = outer_subprogram(self.dwarf, copy.die)
            if outer is None:
                continue
            holder = self.functions.function_name(origin_of(outer))
            out.append(Body(self.lines.scopes(copy.die), holder, outer))
        return out

    def home(self, name: str) -> tuple[str | None, int | None]:
        """The file function ``name`` is declared in, and the line."""
        decl = origin_of(self.functions.find(name)[1])
        line = attr(decl, "DW_AT_decl_line")
        return self.lines.file_of(decl), line if isinstance(line, int) and line > 0 else None

    def rows(self, body: Body) -> list[Row]:
        """The line-table rows of a body's own code (not of what is inlined into it)."""
        table = self.lines.table(body.scope.die.cu)
        if table is None:
            return []
        return [r for lo, hi in body.scope.own() for r in table.within(lo, hi)]

    def listing(self, name: str) -> dict[str, object]:
        """A function's lines: for each, its statement addresses (in each body) and the
        functions inlined there."""
        bodies = self.bodies(name)
        if not bodies:
            raise NoopError(f"function {name!r} has no code: neither a body nor an "
                            "inlined copy with addresses")
        home, decl = self.home(name)
        found: dict[tuple[str, int], _Line] = {}

        def line(file: str, number: int) -> _Line:
            return found.setdefault((file, number), _Line(file, number))

        any_rows = False
        for b in bodies:
            rows = self.rows(b)
            any_rows = any_rows or bool(rows)
            for r in rows:
                entry = line(r.file, r.line)
                if r.stmt:
                    entry.sites.setdefault(r.address, b.into)
            for inner in b.scope.inner_bodies():
                file = self.lines.file_of(inner.die, "DW_AT_call_file")
                number = attr(inner.die, "DW_AT_call_line")
                callee = self.functions.function_name(origin_of(inner.die))
                if file and isinstance(number, int) and callee:
                    inl = line(file, number).inlines
                    if callee not in inl:
                        inl.append(callee)
        if not any_rows:
            raise NoopError(f"function {name!r} has no line table rows: {self._no_lines()}",
                            self._lines_hint())
        if home is None:
            home = max({k[0] for k in found}, key=lambda f: sum(1 for k in found if k[0] == f))
        if decl is not None:
            line(home, decl)
        numbers = [n for f, n in found if f == home]
        first = decl if decl is not None else min(numbers)
        for n in range(first, max(numbers)):  # the lines between, without code
            line(home, n)
        for key in [k for k, e in found.items() if k[0] == home and k[1] < first
                    and not e.sites and not e.inlines]:
            del found[key]  # a row of inlined code the compiler gave the caller's file
        ordered = sorted(found.values(), key=lambda e: (e.file != home, e.file, e.line))
        return {"function": name, "file": home, "copies": len(bodies),
                "out_of_line": any(not b.into for b in bodies),
                "lines": [e.to_json() for e in ordered]}

    def _no_lines(self) -> str:
        if self.dwarf.from_metadata:
            return ("this stripped Go binary's pclntab, which noop reads its lines from, "
                    "has none for it")
        if self.dwarf.source.kind == "symbols":
            return "the binary is a build without debug info: noop has its symbol table only"
        return "the binary keeps no source lines for it"

    def _lines_hint(self) -> str:
        if self.dwarf.from_metadata:
            return "give the binary's debug info (--debuginfo), or an unstripped build"
        return "build with line tables (-g; Cargo: debug = 1, 2 or \"line-tables-only\")"

    # -- the sites of a line -----------------------------------------------------

    def sites(self, where: str) -> list[Site]:
        """The statement addresses of ``FUNCTION:LINE`` or ``FILE:LINE``."""
        head, number = split_line(where)
        if is_source_name(head):
            return self._file_sites(head, number)
        return self._function_sites(head, number)

    def _function_sites(self, name: str, number: int) -> list[Site]:
        bodies = self.bodies(name)
        home, _decl = self.home(name)
        out: list[Site] = []
        lines_seen: set[int] = set()
        for b in bodies:
            own = len(out)
            for r in self.rows(b):
                if home is not None and r.file != home:
                    continue
                lines_seen.add(r.line)
                if r.line == number and r.stmt:
                    out.append(self._site(r, b.subprogram))
            if len(out) == own:  # a line of calls inlined and nothing else
                out += self._calls(b.scope, b.subprogram, home, number)
        if not out:
            raise NoopError(f"{name}:{number}: {_no_code(number, lines_seen, home)}",
                            f"see the lines that can be probed: noop lines BINARY '{name}'")
        return _unique(out)

    def _file_sites(self, named: str, number: int) -> list[Site]:
        files: set[str] = set()
        everything: set[str] = set()
        out = []
        lines_seen: set[int] = set()
        held: list[tuple[int, int, DIE]] = []  # the subprograms holding the file's code
        for cu in self.dwarf.units:
            program = self.dwarf.line_program(cu)
            if program is None:
                continue
            names = file_names(program, cu)
            everything.update(names.values())
            if not any(same_file(named, f) for f in names.values()):
                continue
            table = self.lines.table(cu)
            if table is None:
                continue
            for r in table.rows:
                if not same_file(named, r.file):
                    continue
                files.add(r.file)
                lines_seen.add(r.line)
                if r.line == number and r.stmt:
                    sub = self.dwarf.subprogram_holding(r.address)
                    if sub is not None:
                        out.append(self._site(r, sub))
                if not any(lo <= r.address < hi for lo, hi, _s in held):
                    sub = self.dwarf.subprogram_holding(r.address)
                    if sub is not None:
                        held += [(lo, hi, sub) for lo, hi in self.dwarf.ranges(sub)]
        for sub in {id(s): s for _lo, _hi, s in held}.values() if not out else ():
            out += self._calls(self.lines.scopes(sub), sub, named, number, nested=True)
        if not everything:  # no unit has a line table naming a file
            raise NoopError(f"{named}: {self._no_lines()}", self._lines_hint())
        if not files:
            near = nearest(named, sorted(everything, key=len), 3) or nearest(
                named.rsplit("/", 1)[-1], [f.rsplit("/", 1)[-1] for f in everything], 3)
            raise NoopError(f"{named}: no code of the binary comes from a file of that name",
                            f"did you mean {', '.join(near)}?" if near else
                            "name a file as the binary does: noop lines BINARY FUNCTION "
                            "shows it")
        if len(files) > 1:
            raise NoopError(f"{named}: several files of the binary end so: "
                            f"{', '.join(sorted(files)[:4])}",
                            "give more of the path")
        if not out:
            raise NoopError(f"{named}:{number}: {_no_code(number, lines_seen, None)}",
                            "see the lines that can be probed: noop lines BINARY FUNCTION")
        return _unique(out)

    def _calls(self, body: Scope, sub: DIE, file: str | None, number: int,
               nested: bool = False) -> list[Site]:
        """A site at the start of each call inlined into ``body`` from line ``number``
        of ``file``, for a line whose code is nothing else (a Rust ``for`` header is
        its iterator's ``next``); ``nested``: in the bodies inlined into it too."""
        out = []
        for inner in body.inner_bodies():
            line = attr(inner.die, "DW_AT_call_line")
            called = self.lines.file_of(inner.die, "DW_AT_call_file")
            if line == number and called and (file is None or same_file(file, called)) \
                    and inner.ranges:
                out.append(self.site_in(body, self.call_entry(inner), sub))
            if nested:
                out += self._calls(inner, sub, file, number, nested)
        return out

    def call_entry(self, inner: Scope) -> int:
        """Where an inlined copy's code starts: its DW_AT_entry_pc, else its first
        statement row, else its lowest address (its ranges may be scattered, a reload
        of an argument placed before the rest)."""
        entry = entry_pc(inner)
        if entry is not None:
            return entry
        table = self.lines.table(inner.die.cu)
        stmts = [r.address for lo, hi in inner.ranges
                 for r in (table.within(lo, hi) if table else []) if r.stmt]
        return min(stmts) if stmts else min(lo for lo, _hi in inner.ranges)

    def _site(self, r: Row, sub: DIE) -> Site:
        root = self.lines.scopes(sub)
        chain = root.chain(r.address)
        inner = max(i for i, s in enumerate(chain) if s.body)
        # A row of the call's own line at the start of an inlined copy is the caller's.
        while inner and chain[inner].die.tag == "DW_TAG_inlined_subroutine" and \
                attr(chain[inner].die, "DW_AT_call_line") == r.line and \
                self.lines.file_of(chain[inner].die, "DW_AT_call_file") == r.file:
            inner = max(i for i in range(inner) if chain[i].body)
        body = chain[inner]
        function = self.functions.function_name(origin_of(body.die))
        holder = self.functions.function_name(origin_of(sub))
        return Site(r.address, r.file, r.line, function,
                    holder if body.die.offset != sub.offset else "", tuple(chain[inner:]), sub)

    def line_in(self, body: Scope, address: int) -> tuple[str, int] | None:
        """The line of ``body`` an address of its code belongs to: the line table's
        row in the body's own code; the call's line in code inlined into it; None
        outside the body."""
        if not body.covers(address):
            return None
        inner = next((i for i in body.inner_bodies() if i.covers(address)), None)
        if inner is not None:
            file = self.lines.file_of(inner.die, "DW_AT_call_file")
            number = attr(inner.die, "DW_AT_call_line")
            return (file or "", number if isinstance(number, int) else 0)
        table = self.lines.table(body.die.cu)
        row = table.row_at(address) if table is not None else None
        return (row.file, row.line) if row is not None else None

    def site_in(self, body: Scope, address: int, sub: DIE) -> Site:
        """The site at ``address`` of ``body`` (an address of the body's code or of code
        inlined into it), its chain the body and its blocks holding the address."""
        chain = self.lines.scopes(sub).chain(address)
        start = next(n for n, c in enumerate(chain) if c.die.offset == body.die.offset)
        end = next((n for n in range(start + 1, len(chain)) if chain[n].body), len(chain))
        file, number = self.line_in(body, address) or ("", 0)
        function = self.functions.function_name(origin_of(body.die))
        holder = self.functions.function_name(origin_of(sub))
        return Site(address, file, number, function,
                    holder if body.die.offset != sub.offset else "",
                    tuple(chain[start:end]), sub)

    # -- what is available at a site ---------------------------------------------


def entry_pc(inner: Scope) -> int | None:
    """An inlined copy's DW_AT_entry_pc, when it is an address inside the copy."""
    entry = inner.die.attributes.get("DW_AT_entry_pc")
    if entry is not None and entry.form == "DW_FORM_addr" and inner.covers(entry.value):
        return int(entry.value)
    return None


def split_line(where: str) -> tuple[str, int]:
    """``FUNCTION:LINE`` or ``FILE:LINE`` as (name, line); the name may hold ``::``."""
    head, sep, tail = where.rpartition(":")
    if not sep or not head or not tail.isdigit() or head.endswith(":") or int(tail) <= 0:
        raise NoopError(f"{where!r} is not FUNCTION:LINE or FILE:LINE",
                        "e.g. main.process:51 or main.go:51")
    return head, int(tail)


def _no_code(number: int, seen: set[int], home: str | None) -> str:
    """Why a line has no site: no code, or code with no statement; with the nearest
    lines that have one."""
    where = f" of {home}" if home else ""
    below = max((n for n in seen if n < number), default=None)
    above = min((n for n in seen if n > number), default=None)
    near = " and ".join(str(n) for n in (below, above) if n is not None)
    near = f"; the nearest lines with code: {near}" if near else ""
    if number not in seen:
        return f"line {number}{where} has no code in the binary{near}"
    return (f"line {number}{where} has no code the line table marks as a statement "
            f"(the compiler merged it into another line's){near}")


def _unique(sites: list[Site]) -> list[Site]:
    seen: set[int] = set()
    out = []
    for s in sorted(sites, key=lambda s: s.address):
        if s.address not in seen:
            seen.add(s.address)
            out.append(s)
    return out
