"""A fast pass over all of ``.debug_info`` for the one question that needs every DIE:
which DIEs are inlined copies, and of what.

pyelftools builds an object for every DIE and attribute (seconds and a few hundred MB
for a large Go binary); this reads the raw bytes with the abbreviation tables, skips
each attribute by its form, and keeps only the references that name an origin.
"""

from __future__ import annotations

import struct
from typing import Any

TAG_INLINED_SUBROUTINE = 0x1D
AT_ABSTRACT_ORIGIN = 0x31
AT_SPECIFICATION = 0x47
_REFS = (AT_ABSTRACT_ORIGIN, AT_SPECIFICATION)

# Forms of a fixed size whatever the unit (0: nothing in the DIE).
_FIXED = {0x05: 2, 0x06: 4, 0x07: 8, 0x0B: 1, 0x0C: 1, 0x11: 1, 0x12: 2, 0x13: 4,
          0x14: 8, 0x19: 0, 0x1C: 4, 0x1E: 16, 0x20: 8, 0x21: 0, 0x24: 8, 0x25: 1,
          0x26: 2, 0x27: 3, 0x28: 4, 0x29: 1, 0x2A: 2, 0x2B: 3, 0x2C: 4}
_ULEB = {0x0D, 0x0F, 0x15, 0x1A, 0x1B, 0x22, 0x23, 0x1F01, 0x1F02}  # one LEB128 value
_OFFSET = {0x0E, 0x17, 0x1D, 0x1F, 0x1F20, 0x1F21}  # 4 or 8 bytes: the DWARF format
_CU_REF = {0x11: 1, 0x12: 2, 0x13: 4, 0x14: 8}  # unit-relative references, by size


def _uleb(data: bytes, pos: int) -> tuple[int, int]:
    out = shift = 0
    while True:
        b = data[pos]
        pos += 1
        out |= (b & 0x7F) << shift
        if b < 0x80:
            return out, pos
        shift += 7


def _abbrevs(data: bytes, pos: int) -> dict[int, tuple[int, bool, tuple[tuple[int, int], ...]]]:
    """code -> (tag, has children, ((attribute, form), ...)) of the table at ``pos``."""
    out: dict[int, tuple[int, bool, tuple[tuple[int, int], ...]]] = {}
    while True:
        code, pos = _uleb(data, pos)
        if code == 0:
            return out
        tag, pos = _uleb(data, pos)
        children = data[pos] != 0
        pos += 1
        specs = []
        while True:
            at, pos = _uleb(data, pos)
            form, pos = _uleb(data, pos)
            if form == 0x21:  # implicit_const: its value is here, not in the DIE
                while data[pos] & 0x80:
                    pos += 1
                pos += 1
            if at == 0 and form == 0:
                break
            specs.append((at, form))
        out[code] = (tag, children, tuple(specs))


def origins(info: bytes, abbrev: bytes) -> tuple[dict[int, int], list[int]]:
    """(offset -> the offset its DW_AT_abstract_origin or DW_AT_specification names, for
    every DIE with one; the offsets of every DW_TAG_inlined_subroutine). ValueError on
    a form it does not know."""
    refs: dict[int, int] = {}
    inlined: list[int] = []
    tables: dict[int, Any] = {}
    unit = 0
    while unit < len(info):
        (length,) = struct.unpack_from("<I", info, unit)
        big = length == 0xFFFFFFFF
        if big:
            (length,) = struct.unpack_from("<Q", info, unit + 4)
        head = unit + (12 if big else 4)
        end = head + length
        osize = 8 if big else 4
        (version,) = struct.unpack_from("<H", info, head)
        if version >= 5:
            kind, asize = info[head + 2], info[head + 3]
            abbrev_at = int.from_bytes(info[head + 4:head + 4 + osize], "little")
            pos = head + 4 + osize + (8 if kind in (4, 5) else 8 + osize if kind in (2, 6)
                                      else 0)
        else:
            abbrev_at = int.from_bytes(info[head + 2:head + 2 + osize], "little")
            asize = info[head + 2 + osize]
            pos = head + 3 + osize
        table = tables.get(abbrev_at)
        if table is None:
            table = tables[abbrev_at] = _abbrevs(abbrev, abbrev_at)
        refaddr = asize if version == 2 else osize
        while pos < end:
            at = pos
            code, pos = _uleb(info, pos)
            if code == 0:
                continue
            tag, _children, specs = table[code]
            if tag == TAG_INLINED_SUBROUTINE:
                inlined.append(at)
            for name, form in specs:
                while form == 0x16:  # indirect: the form is in the DIE
                    form, pos = _uleb(info, pos)
                if name in _REFS and (form in _CU_REF or form in (0x10, 0x15)) and not (
                        name == AT_SPECIFICATION and at in refs):  # abstract_origin first
                    if form == 0x10:
                        refs[at] = int.from_bytes(info[pos:pos + refaddr], "little")
                    elif form == 0x15:
                        value, _ = _uleb(info, pos)
                        refs[at] = unit + value
                    else:
                        refs[at] = unit + int.from_bytes(info[pos:pos + _CU_REF[form]],
                                                         "little")
                size = _FIXED.get(form)
                if size is not None:
                    pos += size
                elif form in _ULEB:
                    while info[pos] & 0x80:
                        pos += 1
                    pos += 1
                elif form in _OFFSET:
                    pos += osize
                elif form == 0x01:  # addr
                    pos += asize
                elif form == 0x10:  # ref_addr
                    pos += refaddr
                elif form == 0x08:  # string
                    pos = info.index(b"\0", pos) + 1
                elif form in (0x09, 0x18):  # block, exprloc
                    n, pos = _uleb(info, pos)
                    pos += n
                elif form == 0x0A:
                    pos += 1 + info[pos]
                elif form == 0x03:
                    pos += 2 + struct.unpack_from("<H", info, pos)[0]
                elif form == 0x04:
                    pos += 4 + struct.unpack_from("<I", info, pos)[0]
                else:
                    raise ValueError(f"DWARF form {form:#x} in the unit at {unit:#x}")
        unit = end
    return refs, inlined


def inlined_index(info: bytes, abbrev: bytes) -> dict[str, list[int]]:
    """Offsets of every inlined copy, by the offset of the DIE that holds its function's
    name and type (abstract_origin / specification followed, up to four steps)."""
    refs, inlined = origins(info, abbrev)
    index: dict[str, list[int]] = {}
    for at in inlined:
        die = at
        for _ in range(4):
            if die not in refs:
                break
            die = refs[die]
        index.setdefault(str(die), []).append(at)
    return index


def fde_offset(frame: bytes, pc: int) -> int | None:
    """The offset in ``.debug_frame`` of the FDE whose range holds ``pc`` (64-bit
    addresses), or None when none does; -1 when the section uses a layout this does not
    read (the 64-bit DWARF format)."""
    pos = 0
    while pos + 4 <= len(frame):
        (length,) = struct.unpack_from("<I", frame, pos)
        if length == 0xFFFFFFFF:
            return -1
        if length == 0:
            pos += 4
            continue
        (cie,) = struct.unpack_from("<I", frame, pos + 4)
        if cie != 0xFFFFFFFF:  # an FDE: CIE pointer, initial location, address range
            lo, size = struct.unpack_from("<QQ", frame, pos + 8)
            if lo <= pc < lo + size:
                return pos
        pos += 4 + length
    return None
