"""Struct layouts as gdb's `ptype /o` prints them: the oracle for `noop struct`.

Only the outermost type's members are kept: a nested struct or union block is
one member, named by its closing line (`} name;`), with the offset and size of
its opening line. Hole and padding comments are skipped (gdb computes them by
walking members in declaration order, which is wrong for Rust structs whose
fields rustc reordered).

Known gdb errors (gdb 13):

* Go func-typed members (`cb func(int) error`) are printed with size 1; DWARF
  gives their `DW_TAG_subroutine_type` a byte size of 8 (a func value is a
  pointer to a closure). `is_go_func_size_error` recognises the case.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "GdbError",
    "Layout",
    "Member",
    "field_offsets",
    "is_go_func_size_error",
    "parse_ptype_o",
    "ptype_o",
    "split_declaration",
    "struct_layout",
]


class GdbError(RuntimeError):
    """gdb could not print the requested type."""


@dataclass(frozen=True, slots=True)
class Member:
    """One top-level member as gdb prints it.

    `offset` is in bytes from the start of the type. For a bitfield, gdb
    prints `byte: bit`, so `offset` is the byte holding the first bit and
    `bit_offset` the bit within that byte (little-endian numbering);
    `bit_size` comes from the declaration's `: N`. `size` is gdb's size
    column: for a bitfield, the size of its declared type.
    """

    name: str
    type: str
    offset: int
    size: int
    bit_offset: int | None = None
    bit_size: int | None = None

    @property
    def bit_position(self) -> int:
        """Absolute position of the member's first bit in the type."""
        return self.offset * 8 + (self.bit_offset or 0)


@dataclass(frozen=True, slots=True)
class Layout:
    """A struct or union: its kind, name as gdb prints it, size, members."""

    kind: str
    name: str
    size: int
    members: tuple[Member, ...]


_HEADER = re.compile(
    r"type = (?P<kind>struct|union|class)\b\s*(?P<name>.*?)\s*(?:\[with .*\])?\s*\{$"
)
# "/*     16      |       8 */    int64 B;"  "/*  1: 3   |   4 */ unsigned w : 13;"
# "/*                     8 */    double d;"  (a union member: no offset)
_MEMBER = re.compile(
    r"^/\*\s*(?:(?P<offset>\d+)(?::\s*(?P<bit>\d+))?\s*\|)?\s*(?P<size>\d+)\s*\*/\s*(?P<decl>.*)$"
)
_TOTAL = re.compile(r"^/\*\s*total size \(bytes\):\s*(\d+)\s*\*/$")
_CLOSE = re.compile(r"^\}\s*(?P<name>[^;,\s]*)\s*[;,]?$")
_BITFIELD = re.compile(r"^(?P<decl>.*\S)\s+:\s+(?P<bits>\d+)$")
_FUNC_POINTER = re.compile(r"\(\s*\*+\s*(?P<name>\w+)\s*(?:\[\d*\]\s*)*\)(?=\s*\()")
_TRAILING_NAME = re.compile(r"^(?P<type>.*?)\s*(?P<name>[^\W\d]\w*)\s*(?P<dims>(?:\[\d*\])*)$")


def ptype_o(binary: Path | str, expression: str, *, timeout: float = 120) -> str:
    """Run gdb's `ptype /o EXPRESSION` on BINARY and return its standard output."""
    command = [
        "gdb", "-batch", "-nx",
        "-iex", "set auto-load off",
        "-ex", "set language c",
        "-ex", "set width unlimited",
        "-ex", f"ptype /o {expression}",
        str(binary),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    if "type = " not in done.stdout:
        lines = done.stderr.strip().splitlines()
        reason = lines[-1] if lines else "no output"
        raise GdbError(f"gdb ptype /o {expression} on {binary}: {reason}")
    return done.stdout


def struct_layout(binary: Path | str, expression: str) -> Layout:
    """Layout of the struct or union gdb finds for EXPRESSION in BINARY."""
    return parse_ptype_o(ptype_o(binary, expression))


def split_declaration(declaration: str) -> tuple[str, str, int | None]:
    """Split a gdb member declaration into (type, name, bit size or None).

    Handles C (`char name[13]`, `void (*done)(struct job *)`,
    `unsigned int mode : 3`), Go (`func(int) error cb`, `[3][2]int32 Grid`)
    and Rust printed as C (`u8 *data_ptr`).
    """
    decl = declaration.strip().rstrip(";,").strip()
    bits = None
    bitfield = _BITFIELD.match(decl)
    if bitfield:
        decl, bits = bitfield["decl"], int(bitfield["bits"])
    pointer = _FUNC_POINTER.search(decl)
    if pointer:
        name = pointer["name"]
        type_ = decl[: pointer.start("name")] + decl[pointer.end("name"):]
        return re.sub(r"\s+", " ", type_).strip(), name, bits
    trailing = _TRAILING_NAME.match(decl)
    if not trailing or not trailing["type"]:
        raise ValueError(f"cannot find a member name in {declaration!r}")
    return (trailing["type"] + trailing["dims"]).strip(), trailing["name"], bits


def parse_ptype_o(text: str) -> Layout:
    """Parse the output of `ptype /o` for one struct or union."""
    lines = [line.strip() for line in text.splitlines()]
    start = next((i for i, line in enumerate(lines) if _HEADER.search(line)), None)
    if start is None:
        raise ValueError("no 'type = struct/union ... {' line in gdb output")
    header = _HEADER.search(lines[start])
    assert header is not None
    kind, name = header["kind"], header["name"]

    members: list[Member] = []
    pending: dict[str, object] | None = None  # a nested block waiting for its name
    depth = 1
    total: int | None = None
    for line in lines[start + 1:]:
        if not line:
            continue
        if line.startswith("}"):
            depth -= 1
            if depth == 0:
                break
            if depth == 1:
                closing = _CLOSE.match(line)
                if pending is None or closing is None:
                    raise ValueError(f"unexpected closing line {line!r}")
                members.append(Member(name=closing["name"], **pending))  # type: ignore[arg-type]
                pending = None
            continue
        member = _MEMBER.match(line)
        if member:
            opens = member["decl"].endswith("{")
            if depth == 1:
                offset = int(member["offset"]) if member["offset"] is not None else 0
                size = int(member["size"])
                bit = int(member["bit"]) if member["bit"] is not None else None
                if opens:
                    block_type = member["decl"][:-1].strip()
                    pending = {"type": block_type, "offset": offset, "size": size}
                else:
                    type_, member_name, bits = split_declaration(member["decl"])
                    if bits is not None and bit is None:
                        bit = 0
                    members.append(Member(member_name, type_, offset, size, bit, bits))
            if opens:
                depth += 1
            continue
        found = _TOTAL.match(line)
        if found and depth == 1:
            total = int(found[1])
        # Anything else: hole/padding comments, access labels, <no data fields>.
    if depth != 0:
        raise ValueError("gdb output ended inside the type")
    if total is None:
        raise ValueError("no '/* total size (bytes): N */' line for the type")
    return Layout(kind, name, total, tuple(members))


def is_go_func_size_error(member: Member) -> bool:
    """True where gdb printed a Go func-typed member with its wrong size 1."""
    return member.size == 1 and member.type.startswith("func(")


_OFFSETS_SCRIPT = r'''
import gdb, json, sys
out = {}
for key in json.loads(sys.argv_paths):
    name, _, path = key.rpartition(":")
    try:
        t = gdb.lookup_type(name)
    except gdb.error:
        out[key] = None
        continue
    off = 0
    for part in path.split(".") if path else []:
        t = t.strip_typedefs()
        f = [f for f in t.fields() if f.name == part]
        if not f:
            off = None
            break
        off += f[0].bitpos // 8
        t = f[0].type
    out[key] = t.sizeof if not path else off
print("OFFSETS " + json.dumps(out))
'''


def field_offsets(binary: Path, paths: list[str], language: str = "auto"
                  ) -> dict[str, int | None]:
    """gdb's offset of each ``TYPE:FIELD.FIELD`` (nested fields summed; ``TYPE:`` its
    size; None: no such type or field), from gdb's own reading of the DWARF; type names
    parsed as ``language`` (``rust`` for ``a::b<c>``)."""
    import json

    script = binary.parent / f".{binary.name}-offsets.py"
    script.write_text("import sys\nsys.argv_paths = " + repr(json.dumps(paths)) + "\n"
                      + f"import gdb\ngdb.execute('set language {language}')\n"
                      + _OFFSETS_SCRIPT)
    try:
        out = subprocess.run(["gdb", "-nx", "-batch", "-x", str(script), str(binary)],
                             capture_output=True, text=True, timeout=120).stdout
    finally:
        script.unlink()
    line = next((x for x in out.splitlines() if x.startswith("OFFSETS ")), None)
    if line is None:
        raise GdbError(f"gdb printed no offsets for {binary}: {out[-500:]}")
    return dict(json.loads(line[len("OFFSETS "):]))
