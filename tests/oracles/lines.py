"""Source lines and the values available at an address, read by binutils and LLVM:
the oracle for `noop lines` and `noop vars FUNCTION:LINE`.

- the line table from `llvm-dwarfdump --debug-line` (rows: address, line, file, is_stmt);
- the canonical frame address at each address from `readelf --debug-dump=frames-interp`
  (the call-frame table of .eh_frame and .debug_frame, as readelf works it out);
- a function's scopes (its lexical blocks and inlined copies, with their ranges) and its
  variables' location lists from `llvm-dwarfdump --debug-info=OFFSET --show-children`.

Locations are put in noop's JSON form for the instruction at the address: a register
`{"reg": "rbx", "size": 8}`, a stack slot `{"stack": K, "size": N}` at rsp + K there, or
memory at a frame register `{"memory": {"reg": "rbp", "offset": K}, "size": N}`.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from oracles.dwarfdump import (
    DWARF_REGISTERS,
    Die,
    DwarfLookup,
    _dwarfdump,
    _operations,
    entry_expression,
    parse_dies,
    symbol_address,
)

__all__ = ["Row", "Scope", "cfa_at", "line_rows", "scopes_of", "stmt_sites", "vars_at"]

_ROW = re.compile(r"^0x([0-9a-fA-F]+)\s+(\d+)\s+(\d+)\s+(\d+)\s+\d+\s+\d+\s*(?:\d+\s+)?(.*)$")


@dataclass(frozen=True, slots=True)
class Row:
    address: int
    line: int
    file: str  # the file's base name
    stmt: bool


@cache
def line_rows(binary: str) -> tuple[Row, ...]:
    """Every row of every line table, end_sequence rows left out."""
    rows: list[Row] = []
    names: dict[int, str] = {}
    pending: int | None = None
    for text in _dwarfdump(binary, "--debug-line").splitlines():
        if text.startswith("debug_line["):
            names = {}
            continue
        found = re.match(r"^file_names\[\s*(\d+)\]:", text)
        if found:
            pending = int(found[1])
            continue
        found = re.match(r'^\s+name: "(.*)"$', text)
        if found and pending is not None:
            names[pending] = found[1].rsplit("/", 1)[-1]
            pending = None
            continue
        found = _ROW.match(text)
        if found and "end_sequence" not in found[5]:
            rows.append(Row(int(found[1], 16), int(found[2]), names.get(int(found[4]), "?"),
                            "is_stmt" in found[5]))
    return tuple(rows)


@cache
def _frames(binary: str) -> tuple[tuple[int, int, tuple[tuple[int, str, int], ...]], ...]:
    """(start, end, rows (address, register, offset)) per FDE, from readelf."""
    done = subprocess.run(["readelf", "--wide", "--debug-dump=frames-interp", binary],
                          capture_output=True, text=True, timeout=300, check=True)
    out = []
    start = end = 0
    rows: list[tuple[int, str, int]] = []
    for text in done.stdout.splitlines():
        fde = re.search(r"FDE cie=\w+ pc=([0-9a-f]+)\.\.([0-9a-f]+)", text)
        if fde:
            if rows:
                out.append((start, end, tuple(rows)))
            start, end, rows = int(fde[1], 16), int(fde[2], 16), []
            continue
        row = re.match(r"^([0-9a-f]{8,16})\s+(r\w+)\+(\d+)\s", text)
        if row:
            rows.append((int(row[1], 16), row[2], int(row[3])))
    if rows:
        out.append((start, end, tuple(rows)))
    return tuple(out)


def cfa_at(binary: str, pc: int) -> tuple[str, int] | None:
    """The CFA at ``pc`` as (register, offset), as readelf's table gives it."""
    for start, end, rows in _frames(binary):
        if start <= pc < end:
            got = None
            for address, reg, offset in rows:
                if address <= pc:
                    got = (reg, offset)
            return got
    return None


@dataclass(slots=True)
class Scope:
    die: Die
    ranges: list[tuple[int, int]]
    children: list[Scope]

    def covers(self, pc: int) -> bool:
        return any(lo <= pc < hi for lo, hi in self.ranges)


def _ranges(die: Die) -> list[tuple[int, int]]:
    low = die.number("DW_AT_low_pc")
    if low is not None and "DW_AT_high_pc" in die.attrs:
        high = die.number("DW_AT_high_pc") or 0
        return [(low, high if high > low else low + high)]
    text = die.attrs.get("DW_AT_ranges", "")
    return [(int(a, 16), int(b, 16)) for a, b in
            re.findall(r"\[(0x[0-9a-fA-F]+),\s*(0x[0-9a-fA-F]+)\)", text)]


@cache
def _subprogram(binary: str, name: str) -> tuple[Die, ...]:
    address = symbol_address(binary, name)
    lookup = parse_dies(_dwarfdump(binary, f"--lookup={address:#x}"))
    top = next(d for d in lookup if d.tag == "DW_TAG_subprogram"
               and d.number("DW_AT_low_pc") == address)
    return tuple(parse_dies(_dwarfdump(binary, f"--debug-info={top.offset:#x}",
                                       "--show-children")))


def scopes_of(binary: str, name: str) -> tuple[Scope, list[Die]]:
    """The scope tree of the out-of-line function ``name`` (by its symbol), and all its
    DIEs in order."""
    dies = list(_subprogram(binary, name))
    root: Scope | None = None
    stack: list[tuple[int, Scope]] = []
    for d in dies:
        if d.tag not in ("DW_TAG_subprogram", "DW_TAG_inlined_subroutine",
                         "DW_TAG_lexical_block"):
            continue
        while stack and stack[-1][0] >= d.depth:
            stack.pop()
        parent = stack[-1][1] if stack else None
        s = Scope(d, _ranges(d) or (parent.ranges if parent else []), [])
        if parent is None:
            root = s
        else:
            parent.children.append(s)
        stack.append((d.depth, s))
    assert root is not None
    return root, dies


def inlined_ranges(root: Scope) -> list[tuple[int, int]]:
    """The ranges of the copies inlined into the function (any depth)."""
    out = []

    def walk(s: Scope) -> None:
        for c in s.children:
            if c.die.tag == "DW_TAG_inlined_subroutine":
                out.extend(c.ranges)
            walk(c)

    walk(root)
    return out


def call_lines(root: Scope) -> set[int]:
    """The lines the function's own code calls an inlined copy from."""
    out = set()

    def walk(s: Scope) -> None:
        for c in s.children:
            if c.die.tag == "DW_TAG_inlined_subroutine":
                out.add(c.die.number("DW_AT_call_line") or 0)
            else:
                walk(c)

    walk(root)
    return out


def stmt_sites(binary: str, name: str, file: str) -> dict[int, set[int]]:
    """Per line of ``file``: the statement addresses in the function's own code (not in
    what was inlined into it)."""
    root, _ = scopes_of(binary, name)
    inlined = inlined_ranges(root)
    out: dict[int, set[int]] = {}
    for r in line_rows(binary):
        if r.stmt and r.file == file and root.covers(r.address) and \
                not any(lo <= r.address < hi for lo, hi in inlined):
            out.setdefault(r.line, set()).add(r.address)
    return out


def _name(die: Die) -> str | None:
    if die.text("DW_AT_name"):
        return die.text("DW_AT_name")
    origin = die.reference("DW_AT_abstract_origin")
    return origin[1] if origin else None


def _type(die: Die, lookup: DwarfLookup) -> int | None:
    ref = die.reference("DW_AT_type")
    if ref is None:
        origin = die.reference("DW_AT_abstract_origin")
        if origin is not None:
            ref = lookup.die(origin[0]).reference("DW_AT_type")
    return ref[0] if ref else None


def vars_at(binary: str, name: str, pc: int) -> dict[str, list[dict[str, object]] | str | None]:
    """The values at ``pc`` in function ``name``: those of the innermost body (the
    function or an inlined copy) holding it and of its blocks holding it, each with its
    location there (None: none covers pc; "unsupported": an expression this oracle does
    not evaluate)."""
    root, dies = scopes_of(binary, name)
    chain = [root]
    while True:
        nxt = next((c for c in chain[-1].children if c.covers(pc)), None)
        if nxt is None:
            break
        chain.append(nxt)
    inner = max(i for i, s in enumerate(chain) if s.die.tag != "DW_TAG_lexical_block")
    lookup = DwarfLookup(binary)
    frame_base = root.die.attrs.get("DW_AT_frame_base")
    cfa = cfa_at(binary, pc)
    out: dict[str, list[dict[str, object]] | str | None] = {}
    for scope in chain[inner:]:
        at = dies.index(scope.die)
        for d in dies[at + 1:]:
            if d.depth <= scope.die.depth:
                break
            if d.depth != scope.die.depth + 1 or d.tag not in (
                    "DW_TAG_formal_parameter", "DW_TAG_variable"):
                continue
            var = _name(d)
            if not var or "DW_AT_const_value" in d.attrs:
                continue
            expr = entry_expression(d.attrs.get("DW_AT_location"), pc)
            if expr is None:
                out[var] = None
                continue
            tref = _type(d, lookup)
            size = lookup.type_size(tref) if tref is not None else None
            out[var] = _evaluate(expr, frame_base, size, cfa)
    return out


def _evaluate(expression: str, frame_base: str | None, size: int | None,
              cfa: tuple[str, int] | None) -> list[dict[str, object]] | str:
    """A location expression at an address in the body, in noop's JSON form, with
    empty pieces left out; "unsupported" for what this oracle does not evaluate."""
    pieces: list[dict[str, object]] = []
    where: tuple[str, str, int] | None = None  # ("reg", name, 0) / ("mem", base, offset)
    saw_piece = False

    def place(piece_size: int) -> None:
        if where is None:
            return
        if where[0] == "reg":
            pieces.append({"reg": where[1], "size": piece_size})
        elif where[1] == "rsp":
            pieces.append({"stack": where[2], "size": piece_size})
        else:
            pieces.append({"memory": {"reg": where[1], "offset": where[2]},
                           "size": piece_size})

    for op in _operations(expression):
        name, _, operand = op.partition(" ")
        operand = operand.strip()
        if re.fullmatch(r"DW_OP_reg\d+", name):
            where = ("reg", DWARF_REGISTERS[int(name[9:])], 0)
        elif name == "DW_OP_call_frame_cfa" and cfa is not None:
            where = ("mem", cfa[0], cfa[1])
        elif name == "DW_OP_fbreg" and frame_base == "(DW_OP_call_frame_cfa)" and cfa:
            where = ("mem", cfa[0], cfa[1] + int(operand))
        elif name == "DW_OP_fbreg" and frame_base and re.fullmatch(
                r"\(DW_OP_reg(\d+) \w+\)", frame_base):
            reg = DWARF_REGISTERS[int(re.findall(r"\d+", frame_base)[0])]
            where = ("mem", reg, int(operand))
        elif re.fullmatch(r"DW_OP_breg\d+", name) and len(_operations(expression)) in (1, 2):
            reg = DWARF_REGISTERS[int(name[10:])]
            if reg != "rsp":
                return "unsupported"  # memory at a register: noop's own form, not a slot
            where = ("mem", "rsp", int(re.sub(r"^[A-Z0-9]+", "", operand)))
        elif name == "DW_OP_piece":
            saw_piece = True
            place(int(operand, 0))
            where = None
        else:
            return "unsupported"
    if not saw_piece:
        if size is None:
            return "unsupported"
        place(size)
    return pieces


def source_line(path: Path, marker: str) -> int:
    """The line of ``path`` carrying the comment ``at: MARKER``."""
    for number, text in enumerate(path.read_text().splitlines(), 1):
        if re.search(rf"\bat: {re.escape(marker)}\b", text):
            return number
    raise LookupError(f"no line marked 'at: {marker}' in {path}")
