"""Parameter locations at a function's entry, read by llvm-dwarfdump: the oracle for `noop vars`.

The function is found by its symbol (`nm -C`), its DIE by address
(`llvm-dwarfdump --lookup`), and then printed with its children
(`--debug-info=OFFSET --show-children`). Going by address rather than by
`--name` also finds the out-of-line copy of a function that is inlined
elsewhere: that copy has no name of its own, only a `DW_AT_abstract_origin`.

Locations are converted to noop's pieces: `{"reg": "rbx", "size": 8}` or
`{"stack": K, "size": N}` where K is the offset from the stack pointer at the
function's first instruction. On amd64 the call has just pushed the return
address, so the canonical frame address (CFA, the stack pointer before the
call) is SP + 8 there: `DW_OP_call_frame_cfa` is stack 8, and
`DW_OP_fbreg k` under a `DW_OP_call_frame_cfa` frame base is stack k + 8.
A piece that DWARF leaves empty (`DW_OP_piece` with no location before it)
is `{"size": N}`.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Protocol

__all__ = [
    "DWARF_REGISTERS",
    "Die",
    "DwarfLookup",
    "Function",
    "Param",
    "Piece",
    "Resolver",
    "entry_expression",
    "evaluate",
    "function_at",
    "parse_dies",
    "parse_function",
    "symbol_address",
]

# DWARF register numbers for x86-64 (System V psABI, figure 3.36).
DWARF_REGISTERS: dict[int, str] = {
    0: "rax", 1: "rdx", 2: "rcx", 3: "rbx", 4: "rsi", 5: "rdi", 6: "rbp", 7: "rsp",
    **{n: f"r{n}" for n in range(8, 16)},
    **{17 + n: f"xmm{n}" for n in range(16)},
}
_RETURN_ADDRESS = 8  # bytes between SP at entry and the CFA


@dataclass(frozen=True, slots=True)
class Piece:
    """Where (part of) a value lives at entry: a register, a stack slot, or nowhere."""

    size: int
    reg: str | None = None
    stack: int | None = None

    def as_json(self) -> dict[str, object]:
        """The piece in noop's JSON form."""
        if self.reg is not None:
            return {"reg": self.reg, "size": self.size}
        if self.stack is not None:
            return {"stack": self.stack, "size": self.size}
        return {"size": self.size}


@dataclass(frozen=True, slots=True)
class Param:
    """A formal parameter (or a Go result) and its location at the entry PC.

    status: "ok" (pieces evaluated), "none" (DWARF gives no location at the
    entry PC), "frame" (relative to a frame base other than the CFA, which
    holds only after the prologue), "unsupported" (an expression that is not
    a plain register/stack location, such as a constant or DW_OP_entry_value).
    """

    name: str
    is_result: bool
    type_name: str
    expression: str | None
    status: str
    pieces: tuple[Piece, ...]

    @property
    def valid_at_entry(self) -> bool:
        """True if every piece is a register or a slot at or above SP + 8.

        Anything below SP + 8 at the first instruction is the return address
        or the callee's own frame, which the callee has not written yet.
        """
        return self.status == "ok" and all(
            p.reg is not None or (p.stack is not None and p.stack >= _RETURN_ADDRESS)
            for p in self.pieces
        )

    def location_json(self) -> list[dict[str, object]]:
        """The pieces in noop's JSON form."""
        return [p.as_json() for p in self.pieces]


@dataclass(frozen=True, slots=True)
class Function:
    """A subprogram DIE with an address, and its direct formal parameters."""

    name: str
    die_offset: int
    low_pc: int
    frame_base: str | None
    params: tuple[Param, ...]

    @property
    def arguments(self) -> tuple[Param, ...]:
        return tuple(p for p in self.params if not p.is_result)

    @property
    def results(self) -> tuple[Param, ...]:
        return tuple(p for p in self.params if p.is_result)


@dataclass(frozen=True, slots=True)
class Die:
    """One DIE of llvm-dwarfdump's text output: attribute values kept as printed."""

    offset: int
    tag: str
    depth: int
    attrs: dict[str, str]

    def text(self, name: str) -> str | None:
        """A string attribute's value without its quotes: ("a") -> a."""
        value = self.attrs.get(name)
        if value is None:
            return None
        found = re.fullmatch(r'\("(.*)"\)', value, re.S)
        return found[1] if found else value

    def number(self, name: str) -> int | None:
        """A numeric attribute: (0x10) -> 16, (true) -> 1."""
        value = self.attrs.get(name)
        if value is None:
            return None
        found = re.match(r"\((0x[0-9a-fA-F]+|\d+|true|false)\b", value)
        if not found:
            raise ValueError(f"{name} is not a number: {value}")
        word = found[1]
        if word in ("true", "false"):
            return int(word == "true")
        return int(word, 0)

    def reference(self, name: str) -> tuple[int, str | None] | None:
        """A reference attribute: (0x00a2107 "int") -> (0xa2107, "int")."""
        value = self.attrs.get(name)
        if value is None:
            return None
        found = re.match(r'\((0x[0-9a-fA-F]+)(?:\s+"(.*)")?\)$', value, re.S)
        if not found:
            raise ValueError(f"{name} is not a reference: {value}")
        return int(found[1], 16), found[2]


_DIE_LINE = re.compile(r"^(0x[0-9a-fA-F]+):( +)(DW_TAG_\w+|NULL)\s*$")
_ATTR_LINE = re.compile(r"^\s+(DW_AT_\w+)\s+(\(.*)$")


def parse_dies(text: str) -> list[Die]:
    """Parse llvm-dwarfdump --debug-info text into DIEs, in order, with depths.

    The depth comes from the indentation after the offset (1 space at the
    unit's top, 2 more per level). A value printed on several lines (a
    location list, DW_AT_ranges) is joined with newlines.
    """
    dies: list[Die] = []
    current: Die | None = None
    last_attr: str | None = None
    for line in text.splitlines():
        die = _DIE_LINE.match(line)
        if die:
            current, last_attr = None, None
            if die[3] != "NULL":
                current = Die(int(die[1], 16), die[3], (len(die[2]) - 1) // 2, {})
                dies.append(current)
            continue
        if current is None:
            continue
        attr = _ATTR_LINE.match(line)
        if attr:
            last_attr = attr[1]
            current.attrs[last_attr] = attr[2].rstrip()
        elif line[:1].isspace() and line.strip() and last_attr is not None:
            current.attrs[last_attr] += "\n" + line.strip()
        else:
            last_attr = None
    return dies


def entry_expression(location: str | None, pc: int) -> str | None:
    """The DWARF expression of a DW_AT_location value that holds at PC.

    `location` is the value as printed: "(DW_OP_reg0 RAX)", "(<empty>)", or
    "(0x4f08: \\n[0x71a8e0, 0x71a917): DW_OP_reg0 RAX ...)". None if no
    location covers PC.
    """
    if location is None:
        return None
    body = location.strip()
    if not (body.startswith("(") and body.endswith(")")):
        raise ValueError(f"unexpected location value {location!r}")
    body = body[1:-1].strip()
    if body == "<empty>" or not body:
        return None
    head, _, rest = body.partition("\n")
    if not re.fullmatch(r"0x[0-9a-fA-F]+:", head.strip()):
        return body  # a single expression, valid over the whole function
    for entry in rest.splitlines():
        found = re.fullmatch(r"\[(0x[0-9a-fA-F]+),\s*(0x[0-9a-fA-F]+)\):\s*(.*)", entry.strip())
        if not found:
            raise ValueError(f"unexpected location list entry {entry!r}")
        low, high = int(found[1], 16), int(found[2], 16)
        if low <= pc < high:
            return found[3].strip()
    return None


def _operations(expression: str) -> list[str]:
    """Split an expression at the commas that are not inside parentheses."""
    ops, depth, start = [], 0, 0
    for i, char in enumerate(expression):
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "," and depth == 0:
            ops.append(expression[start:i].strip())
            start = i + 1
    ops.append(expression[start:].strip())
    return [op for op in ops if op]


class _Unsupported(Exception):
    pass


class _FrameRelative(Exception):
    pass


def _register(op: str) -> str:
    found = re.fullmatch(r"DW_OP_reg(\d+)\s+(\w+)", op)
    if not found:
        raise ValueError(f"bad register operation {op!r}")
    number, printed = int(found[1]), found[2].lower()
    name = DWARF_REGISTERS.get(number)
    if name is None or name != printed:
        raise ValueError(f"DWARF register {number} printed as {printed!r}, expected {name!r}")
    return name


def evaluate(
    expression: str, frame_base: str | None, size: int | None
) -> tuple[str, tuple[Piece, ...]]:
    """Evaluate a location expression at the entry PC into (status, pieces).

    `size` is the value's byte size, used when the expression has no
    DW_OP_piece (the whole value in one place); it may be None when pieces
    give the sizes.
    """
    try:
        pieces: list[Piece] = []
        where: tuple[str, int | str] | None = None
        saw_piece = False
        for op in _operations(expression):
            name, _, operand = op.partition(" ")
            operand = operand.strip()
            if re.fullmatch(r"DW_OP_reg\d+", name):
                where = ("reg", _register(op))
            elif name == "DW_OP_call_frame_cfa":
                where = ("stack", _RETURN_ADDRESS)
            elif name == "DW_OP_fbreg":
                if frame_base != "(DW_OP_call_frame_cfa)":
                    raise _FrameRelative(op)
                where = ("stack", _RETURN_ADDRESS + int(operand))
            elif name == "DW_OP_breg7":  # RSP+k: at the entry PC, SP itself
                where = ("stack", int(operand.removeprefix("RSP")))
            elif name == "DW_OP_plus_uconst" and where is not None and where[0] == "stack":
                where = ("stack", int(where[1]) + int(operand, 0))
            elif name == "DW_OP_piece":
                saw_piece = True
                piece_size = int(operand, 0)
                if where is None:
                    pieces.append(Piece(piece_size))
                elif where[0] == "reg":
                    pieces.append(Piece(piece_size, reg=str(where[1])))
                else:
                    pieces.append(Piece(piece_size, stack=int(where[1])))
                where = None
            else:
                raise _Unsupported(op)
        if not saw_piece:
            if where is None or size is None:
                raise _Unsupported(expression)
            if where[0] == "reg":
                pieces.append(Piece(size, reg=str(where[1])))
            else:
                pieces.append(Piece(size, stack=int(where[1])))
        elif where is not None:
            raise _Unsupported(expression)  # a location after the last piece
        return "ok", tuple(pieces)
    except _FrameRelative:
        return "frame", ()
    except _Unsupported:
        return "unsupported", ()


class Resolver(Protocol):
    """What parse_function needs to look up elsewhere in the binary's DWARF."""

    def type_size(self, offset: int) -> int:
        """Byte size of the type DIE at OFFSET."""

    def die(self, offset: int) -> Die:
        """The DIE at OFFSET (used to follow DW_AT_abstract_origin)."""


def parse_function(text: str, resolver: Resolver) -> Function:
    """Parse `--debug-info=OFFSET --show-children` text of one subprogram.

    The resolver is asked for type sizes (only for locations without
    DW_OP_piece) and for the abstract origin of an out-of-line copy whose
    parameters carry no name or type of their own.
    """
    dies = parse_dies(text)
    top = next((d for d in dies if d.tag == "DW_TAG_subprogram"), None)
    if top is None:
        raise ValueError("no DW_TAG_subprogram in llvm-dwarfdump output")
    low_pc = top.number("DW_AT_low_pc")
    if low_pc is None:
        raise ValueError(f"subprogram at {top.offset:#x} has no DW_AT_low_pc")
    name = top.text("DW_AT_name")
    if name is None:
        origin = top.reference("DW_AT_abstract_origin")
        name = origin[1] if origin and origin[1] else ""
    frame_base = top.attrs.get("DW_AT_frame_base")
    params = []
    for die in dies[dies.index(top) + 1:]:
        if die.depth <= top.depth:
            break
        if die.depth != top.depth + 1 or die.tag != "DW_TAG_formal_parameter":
            continue
        described = die
        origin = die.reference("DW_AT_abstract_origin")
        if origin is not None:
            described = resolver.die(origin[0])
        type_ref = die.reference("DW_AT_type") or described.reference("DW_AT_type")
        expression = entry_expression(die.attrs.get("DW_AT_location"), low_pc)
        if expression is None:
            status, pieces = "none", ()
        else:
            needs_size = "DW_OP_piece" not in expression
            size = resolver.type_size(type_ref[0]) if needs_size and type_ref else None
            status, pieces = evaluate(expression, frame_base, size)
        is_result = die.number("DW_AT_variable_parameter")
        if is_result is None:
            is_result = described.number("DW_AT_variable_parameter")
        params.append(Param(
            name=die.text("DW_AT_name") or described.text("DW_AT_name") or "",
            is_result=bool(is_result),
            type_name=(type_ref[1] or "") if type_ref else "",
            expression=expression,
            status=status,
            pieces=pieces,
        ))
    return Function(name, top.offset, low_pc, frame_base, tuple(params))


class DwarfLookup:
    """Type sizes and DIEs of one binary, read with llvm-dwarfdump."""

    def __init__(self, binary: Path | str) -> None:
        self.binary = str(binary)

    def type_size(self, offset: int) -> int:
        return _type_size(self.binary, offset)

    def die(self, offset: int) -> Die:
        return _die(self.binary, offset)


@cache
def _die(binary: str, offset: int) -> Die:
    dies = parse_dies(_dwarfdump(binary, f"--debug-info={offset:#x}"))
    if not dies or dies[0].offset != offset:
        raise LookupError(f"no DIE at {offset:#x} in {binary}")
    return dies[0]


@cache
def _type_size(binary: str, offset: int) -> int:
    dies = parse_dies(_dwarfdump(binary, f"--debug-info={offset:#x}", "--show-children"))
    die = dies[0]
    size = die.number("DW_AT_byte_size")
    if size is not None:
        return size
    if die.tag in ("DW_TAG_pointer_type", "DW_TAG_reference_type", "DW_TAG_rvalue_reference_type"):
        return 8
    target = die.reference("DW_AT_type")
    if die.tag in ("DW_TAG_typedef", "DW_TAG_const_type", "DW_TAG_volatile_type",
                   "DW_TAG_restrict_type", "DW_TAG_atomic_type") and target:
        return _type_size(binary, target[0])
    if die.tag == "DW_TAG_array_type" and target:
        count = 1
        for sub in dies[1:]:
            if sub.depth <= die.depth:
                break
            if sub.tag == "DW_TAG_subrange_type":
                n = sub.number("DW_AT_count")
                if n is None:
                    upper = sub.number("DW_AT_upper_bound")
                    n = None if upper is None else upper + 1
                if n is None:
                    raise ValueError(f"array at {offset:#x} has an unknown length")
                count *= n
        return count * _type_size(binary, target[0])
    raise ValueError(f"no size for type DIE {offset:#x} ({die.tag}) in {binary}")


def _dwarfdump(binary: str, *args: str) -> str:
    done = subprocess.run(["llvm-dwarfdump", *args, binary], capture_output=True,
                          text=True, timeout=300, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"llvm-dwarfdump {' '.join(args)} {binary}: {done.stderr.strip()}")
    return done.stdout


def symbol_address(binary: Path | str, name: str) -> int:
    """The address of the defined function symbol NAME (demangled, Rust hashes dropped)."""
    done = subprocess.run(["nm", "-C", "--defined-only", str(binary)], capture_output=True,
                          text=True, timeout=300, check=True)
    found = set()
    for line in done.stdout.splitlines():
        parts = line.split(" ", 2)
        if len(parts) == 3 and parts[1] in "tTwW" and parts[2] == name:
            found.add(int(parts[0], 16))
    if len(found) != 1:
        raise LookupError(f"{len(found)} function symbols named {name!r} in {binary}")
    return found.pop()


def function_at(binary: Path | str, name: str) -> Function:
    """The out-of-line function NAME in BINARY with its parameters at entry."""
    address = symbol_address(binary, name)
    lookup = parse_dies(_dwarfdump(str(binary), f"--lookup={address:#x}"))
    subprograms = [d for d in lookup if d.tag == "DW_TAG_subprogram"
                   and d.number("DW_AT_low_pc") == address]
    if not subprograms:
        raise LookupError(f"no DW_TAG_subprogram starts at {address:#x} ({name}) in {binary}")
    offset = subprograms[0].offset
    text = _dwarfdump(str(binary), f"--debug-info={offset:#x}", "--show-children")
    return parse_function(text, DwarfLookup(binary))
