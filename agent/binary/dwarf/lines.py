"""Source lines: the line table, and which function (or inlined copy of one) each
address belongs to, so a line can be named, listed and probed.

A function's code is its out-of-line body and each copy inlined elsewhere. An
address belongs to the innermost of them whose ranges hold it (a copy inlined into
a copy belongs to the inner one), and inside it to the lexical blocks that hold it:
what a line's variables are, and which body's line a line-table row is.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from elftools.common.exceptions import DWARFError
from elftools.dwarf.compileunit import CompileUnit
from elftools.dwarf.die import DIE
from elftools.dwarf.typeunit import TypeUnit

from agent.binary.dwarf.dies import attr
from agent.binary.dwarf.reader import Dwarf

BODY_TAGS = ("DW_TAG_subprogram", "DW_TAG_inlined_subroutine")
SCOPE_TAGS = (*BODY_TAGS, "DW_TAG_lexical_block")
SOURCE_SUFFIXES = (".go", ".rs", ".c", ".h", ".cc", ".cpp", ".cxx", ".hh", ".hpp", ".s", ".S")


@dataclass(frozen=True, slots=True)
class Row:
    """One line-table row: the code at ``address`` is ``file``:``line``; ``stmt``: the
    compiler marks it a place to stop for that line (DWARF's ``is_stmt``)."""

    address: int
    file: str
    line: int
    stmt: bool


@dataclass(slots=True)
class Table:
    """A unit's line table: its rows by address, and its file names by number."""

    rows: list[Row]
    files: dict[int, str]
    starts: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.starts = [r.address for r in self.rows]

    def within(self, low: int, high: int) -> list[Row]:
        """The rows whose address is in [low, high)."""
        return self.rows[bisect.bisect_left(self.starts, low):
                         bisect.bisect_left(self.starts, high)]

    def row_at(self, address: int) -> Row | None:
        """The row the instruction at ``address`` belongs to (the last at or before it)."""
        i = bisect.bisect_right(self.starts, address) - 1
        return self.rows[i] if i >= 0 else None


@dataclass(slots=True)
class Scope:
    """A subprogram, an inlined copy or a lexical block, with its address ranges and
    the scopes inside it."""

    die: DIE
    ranges: list[tuple[int, int]]
    children: list[Scope]

    @property
    def body(self) -> bool:
        return self.die.tag in BODY_TAGS

    def covers(self, pc: int) -> bool:
        return any(lo <= pc < hi for lo, hi in self.ranges)

    def own(self) -> list[tuple[int, int]]:
        """This body's ranges without those of the bodies inlined into it."""
        cut = sorted(r for b in self.inner_bodies() for r in b.ranges)
        out = []
        for lo, hi in sorted(self.ranges):
            at = lo
            for clo, chi in cut:
                if chi <= at or clo >= hi:
                    continue
                if clo > at:
                    out.append((at, clo))
                at = max(at, chi)
            if at < hi:
                out.append((at, hi))
        return out

    def inner_bodies(self) -> Iterator[Scope]:
        """The inlined copies directly inside this body (through its lexical blocks)."""
        for c in self.children:
            if c.body:
                yield c
            else:
                yield from c.inner_bodies()

    def chain(self, pc: int) -> list[Scope]:
        """This scope and, inward, the scopes that hold ``pc``, down to the innermost."""
        out = [self]
        at = self
        while True:
            nxt = next((c for c in at.children if c.covers(pc)), None)
            if nxt is None:
                return out
            out.append(nxt)
            at = nxt


class Lines:
    """Line tables and scopes of one binary, each unit's table read once."""

    def __init__(self, dwarf: Dwarf) -> None:
        self.dwarf = dwarf
        self._tables: dict[int, Table | None] = {}
        self._scopes: dict[int, Scope] = {}

    def table(self, cu: CompileUnit | TypeUnit) -> Table | None:
        """The unit's line table (None for a type unit, or a unit without one)."""
        if not isinstance(cu, CompileUnit):
            return None
        if cu.cu_offset not in self._tables:
            self._tables[cu.cu_offset] = self._read(cu)
        return self._tables[cu.cu_offset]

    def _read(self, cu: CompileUnit) -> Table | None:
        program = self.dwarf.line_program(cu)
        if program is None:
            return None
        files = file_names(program, cu)
        rows = []
        for entry in program.get_entries():
            st = entry.state
            if st is None or st.end_sequence or not st.line:
                continue  # line 0: code of no source line (the compiler's own)
            rows.append(Row(st.address, files.get(st.file, "?"), st.line, bool(st.is_stmt)))
        rows.sort(key=lambda r: r.address)  # stable: rows of one address keep their order
        return Table(rows, files)

    def file_of(self, die: DIE, name: str = "DW_AT_decl_file") -> str | None:
        """The file a DIE's ``DW_AT_decl_file`` or ``DW_AT_call_file`` names."""
        index = attr(die, name)
        if not isinstance(index, int) or not isinstance(die.cu, CompileUnit):
            return None
        table = self.table(die.cu)
        return table.files.get(index) if table is not None else None

    def scopes(self, die: DIE) -> Scope:
        """The scope tree of a subprogram or inlined copy (built once for each)."""
        def build(d: DIE, outer: list[tuple[int, int]]) -> Scope:
            ranges = self.dwarf.ranges(d) or outer  # a block with no code of its own
            s = Scope(d, ranges, [])
            for c in d.iter_children():
                if c.tag in SCOPE_TAGS:
                    s.children.append(build(c, ranges))
            return s

        if die.offset not in self._scopes:
            self._scopes[die.offset] = build(die, [])
        return self._scopes[die.offset]


def file_names(program: object, cu: CompileUnit) -> dict[int, str]:
    """The line table's file names by number, each joined to its directory (a
    relative directory to the unit's compilation directory): DWARF 5 counts files
    from 0, earlier versions from 1."""
    header = program.header  # type: ignore[attr-defined]
    version = header.version
    if header.include_directory is None or header.file_entry is None:
        raise DWARFError(f"the .debug_line header of the unit at {cu.cu_offset:#x} has no "
                         "directory or file table (its formats are not DWARF's)")
    comp_dir = attr(cu.get_top_DIE(), "DW_AT_comp_dir", b"") or b""
    dirs = [d.decode(errors="replace") if isinstance(d, bytes) else str(d)
            for d in header.include_directory]
    base = comp_dir.decode(errors="replace") if isinstance(comp_dir, bytes) else ""
    out = {}
    first = 0 if version >= 5 else 1
    for i, f in enumerate(header.file_entry):
        name = f.name.decode(errors="replace") if isinstance(f.name, bytes) else str(f.name)
        d = f.dir_index
        if version >= 5:
            folder = dirs[d] if 0 <= d < len(dirs) else ""
        else:
            folder = dirs[d - 1] if 1 <= d <= len(dirs) else base
        path = PurePosixPath(name)
        if not path.is_absolute() and folder:
            path = PurePosixPath(folder) / path
            if not path.is_absolute() and base:
                path = PurePosixPath(base) / path
        out[i + first] = str(path)
    return out


def same_file(named: str, path: str) -> bool:
    """Whether a user's file name ``named`` names ``path``: the whole path, or a suffix
    of it that starts at a directory boundary (``main.go``, ``shop/main.go``)."""
    if named == path:
        return True
    return path.endswith("/" + named.lstrip("/")) if not named.startswith("/") else False


def read_source(path: str, source_dir: str | None) -> list[str] | None:
    """The lines of a source file: at the path the binary names, else under
    ``source_dir`` at the longest tail of that path found there; None when absent."""
    candidates = []
    p = PurePosixPath(path)
    if source_dir:
        parts = p.parts[1:] if p.is_absolute() else p.parts
        candidates += [Path(source_dir, *parts[i:]) for i in range(len(parts))]
    candidates.append(Path(path))
    for c in candidates:
        try:
            if c.is_file():
                return c.read_text(errors="replace").splitlines()
        except OSError:
            continue
    return None


def is_source_name(text: str) -> bool:
    """Whether ``text`` is a file name (``FILE:LINE``) rather than a function's."""
    return text.endswith(SOURCE_SUFFIXES)
