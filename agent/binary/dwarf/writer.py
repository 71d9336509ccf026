"""Writing DWARF: DIEs by abbreviation, range lists, and a small ELF debug file to hold
them, for the debug info noop makes itself (from Go's runtime metadata, or from a
symbol table alone).

An abbreviation table maps a name to (tag, has children, ((attribute, form), …)); a
DIE is written by naming its abbreviation and giving its values in order.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

TYPES_UNIT = "go.types"  # the unit noop's DWARF made from Go's metadata keeps types in

Abbrevs = dict[str, tuple[str, bool, tuple[tuple[str, str], ...]]]

# DWARF constants (Go's own attributes included)
_TAG = {"compile_unit": 0x11, "base_type": 0x24, "structure_type": 0x13, "member": 0x0D,
        "pointer_type": 0x0F, "typedef": 0x16, "array_type": 0x01, "subrange_type": 0x21,
        "subroutine_type": 0x15, "subprogram": 0x2E, "formal_parameter": 0x05,
        "inlined_subroutine": 0x1D, "namespace": 0x39}
_AT = {"name": 0x03, "byte_size": 0x0B, "encoding": 0x3E, "type": 0x49,
       "data_member_location": 0x38, "language": 0x13, "producer": 0x25, "low_pc": 0x11,
       "high_pc": 0x12, "ranges": 0x55, "count": 0x37, "external": 0x3F,
       "prototyped": 0x27, "variable_parameter": 0x4B, "abstract_origin": 0x31,
       "inline": 0x20, "go_kind": 0x2900, "go_key": 0x2901, "go_elem": 0x2902,
       "go_embedded": 0x2903, "stmt_list": 0x10, "call_file": 0x58, "call_line": 0x59}
_FORM = {"addr": 0x01, "data1": 0x0B, "data2": 0x05, "data8": 0x07, "string": 0x08,
         "udata": 0x0F, "ref_addr": 0x10, "sec_offset": 0x17, "flag_present": 0x19,
         "flag": 0x0C}


def uleb(v: int) -> bytes:
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def sleb(v: int) -> bytes:
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if (v == 0 and not b & 0x40) or (v == -1 and b & 0x40):
            out.append(b)
            return bytes(out)
        out.append(b | 0x80)


# A row of a line table: [lo, hi) of code, its file (an index of the unit's file table,
# from 1) and line; a statement starts at ``lo`` when the line changes there.
LineRow = tuple[int, int, int, int]


def line_program(files: list[str], sequences: list[list[LineRow]]) -> bytes:
    """One unit's ``.debug_line`` program (DWARF 4): its file table (full paths, no
    directories) and a sequence of rows for each run of contiguous code."""
    table = b"".join(name.encode() + b"\0" + uleb(0) + uleb(0) + uleb(0) for name in files)
    opcodes = bytes([0, 1, 1, 1, 1, 0, 0, 0, 1, 0, 0, 1])  # lengths of opcodes 1..12
    # minimum_instruction_length, max ops, default_is_stmt, line_base (-5), line_range,
    # opcode_base
    header = bytes([1, 1, 1]) + struct.pack("<b", -5) + bytes([14, 13]) + opcodes + \
        b"\0" + table + b"\0"
    body = bytearray()
    for rows in sequences:
        if not rows:
            continue
        body += b"\0" + uleb(9) + b"\x02" + struct.pack("<Q", rows[0][0])  # set_address
        pc, file, line, stmt = rows[0][0], 1, 1, True
        for lo, _hi, f, n in rows:
            want = n != line or f != file or lo == rows[0][0]
            if lo > pc:
                body += b"\x02" + uleb(lo - pc)  # advance_pc
                pc = lo
            if f != file:
                body += b"\x04" + uleb(f)  # set_file
                file = f
            if n != line:
                body += b"\x03" + sleb(n - line)  # advance_line
            if want != stmt:
                body += b"\x06"  # negate_stmt
                stmt = want
            line = n
            body += b"\x01"  # copy
        end = rows[-1][1]
        if end > pc:
            body += b"\x02" + uleb(end - pc)
        body += b"\0\x01\x01"  # end_sequence
    head = struct.pack("<H", 4) + struct.pack("<I", len(header)) + header
    return struct.pack("<I", len(head) + len(body)) + head + bytes(body)


def abbrev_section(abbrevs: Abbrevs) -> bytes:
    """``.debug_abbrev`` for ``abbrevs``: codes 1, 2, … in their order."""
    out = bytearray()
    for code, (tag, children, attrs) in enumerate(abbrevs.values(), 1):
        out += uleb(code) + uleb(_TAG[tag]) + bytes([1 if children else 0])
        for a, f in attrs:
            out += uleb(_AT[a]) + uleb(_FORM[f])
        out += b"\0\0"
    return bytes(out + b"\0")


class Info:
    """``.debug_info`` being written: DIEs, with references patched at the end."""

    def __init__(self, abbrevs: Abbrevs) -> None:
        self.abbrevs = abbrevs
        self.codes = {name: i + 1 for i, name in enumerate(abbrevs)}
        self.buf = bytearray()
        self.offsets: dict[object, int] = {}  # key -> DIE offset
        self.fixups: list[tuple[int, object]] = []
        self.ranges = bytearray()

    def die(self, abbrev: str, *values: object, key: object = None) -> int:
        at = len(self.buf)
        if key is not None:
            self.offsets[key] = at
        self.buf += uleb(self.codes[abbrev])
        forms = [f for _a, f in self.abbrevs[abbrev][2] if f != "flag_present"]  # no value
        for form, value in zip(forms, values, strict=True):
            if form == "string":
                self.buf += str(value).encode() + b"\0"
            elif form == "udata":
                self.buf += uleb(int(value))  # type: ignore[call-overload]
            elif form in ("data1", "flag"):
                self.buf += bytes([int(value) & 0xFF])  # type: ignore[call-overload]
            elif form == "data2":
                self.buf += struct.pack("<H", value)
            elif form in ("addr", "data8"):
                self.buf += struct.pack("<Q", value)
            elif form == "sec_offset":
                self.buf += struct.pack("<I", value)
            elif form == "ref_addr":
                self.fixups.append((len(self.buf), value))
                self.buf += b"\0\0\0\0"
        return at

    def end_children(self) -> None:
        self.buf.append(0)

    def range_list(self, ranges: list[tuple[int, int]]) -> int:
        at = len(self.ranges)
        for lo, hi in ranges:
            self.ranges += struct.pack("<QQ", lo, hi)
        self.ranges += bytes(16)
        return at

    def unit(self, start: int) -> None:
        """Closes the unit begun at ``start`` (its header's length)."""
        struct.pack_into("<I", self.buf, start, len(self.buf) - start - 4)

    def begin_unit(self) -> int:
        start = len(self.buf)
        self.buf += struct.pack("<IHIB", 0, 4, 0, 8)
        return start

    def patch(self) -> None:
        for pos, key in self.fixups:
            target = self.offsets.get(key)
            if target is None:
                raise ValueError(f"a DWARF reference to {key!r} has no entry")
            struct.pack_into("<I", self.buf, pos, target)


def write_elf(out: Path, sections: list[tuple[str, bytes]], text: int, etext: int) -> None:
    """A debug file at ``out``: the ``sections``, and ``.text`` as NOBITS over [text,
    etext) so that addresses fall in it; written whole, then moved into place."""
    names = bytearray(b"\0")
    name_at = {}
    for n in [".text", *(s[0] for s in sections), ".shstrtab"]:
        name_at[n] = len(names)
        names += n.encode() + b"\0"
    body = bytearray()
    headers = [bytes(64)]  # the null section
    # .text as NOBITS: the code stays in the binary; symbols point into it.
    headers.append(struct.pack("<IIQQQQIIQQ", name_at[".text"], 8, 6, text, 0,
                               etext - text, 0, 0, 16, 0))
    offset = 64
    index = {".text": 1}
    for n, data in [*sections, (".shstrtab", bytes(names))]:
        index[n] = len(headers)
        sh_type = {".symtab": 2, ".strtab": 3, ".shstrtab": 3}.get(n, 1)
        link = len(headers) + 1 if n == ".symtab" else 0
        info = 1 if n == ".symtab" else 0
        entsize = 24 if n == ".symtab" else 0
        headers.append(struct.pack("<IIQQQQIIQQ", name_at[n], sh_type, 0, 0, offset + len(body),
                                   len(data), link, info, 8 if n == ".symtab" else 1, entsize))
        body += data
    shoff = 64 + len(body)
    shoff += -shoff % 8
    pad = shoff - 64 - len(body)
    elf_header = b"\x7fELF" + bytes([2, 1, 1, 0]) + bytes(8) + struct.pack(
        "<HHIQQQIHHHHHH", 2, 62, 1, 0, 0, shoff, 0, 64, 56, 0, 64, len(headers),
        index[".shstrtab"])
    # A file of this process's own: two noops making the same file at once each move a
    # whole one into place.
    tmp = out.with_name(f"{out.name}.tmp-{os.getpid()}")
    try:
        tmp.write_bytes(elf_header + bytes(body) + bytes(pad) + b"".join(headers))
        tmp.replace(out)
    finally:
        tmp.unlink(missing_ok=True)
