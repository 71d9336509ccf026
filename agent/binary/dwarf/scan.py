"""Raw reading of DWARF's bytes: unit headers and abbreviation tables (and what is
damaged in them), skipping an attribute by its form, a Go unit's top-level types, the
FDE of a pc. ``tree`` walks units with these.

pyelftools builds an object for every DIE and attribute (seconds and a few hundred MB
for a large binary); these read the bytes and keep only what a question needs.
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field

from agent.binary.dwarf.sections import Text
from agent.binary.elf import uleb128

AT_NAME = 0x03
AT_DECLARATION = 0x3C
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


def _abbrevs(data: bytes, pos: int) -> dict[int, tuple[int, bool, tuple[tuple[int, int], ...]]]:
    """code -> (tag, has children, ((attribute, form), ...)) of the table at ``pos``."""
    return _abbrevs_to(data, pos)[0]


def _abbrevs_to(data: bytes, pos: int
                ) -> tuple[dict[int, tuple[int, bool, tuple[tuple[int, int], ...]]], int]:
    """``_abbrevs``, and where the table ends."""
    out: dict[int, tuple[int, bool, tuple[tuple[int, int], ...]]] = {}
    # A number of one byte (most attributes and forms) read here: 135,000 of them in
    # a large Rust binary's tables, each a call to ``uleb128`` otherwise.
    while True:
        code = data[pos]
        if code < 0x80:
            pos += 1
        else:
            code, pos = uleb128(data, pos)
        if code == 0:
            return out, pos
        tag, pos = uleb128(data, pos)
        children = data[pos] != 0
        pos += 1
        specs = []
        while True:
            at = data[pos]
            if at < 0x80:
                pos += 1
            else:
                at, pos = uleb128(data, pos)
            form = data[pos]
            if form < 0x80:
                pos += 1
            else:
                form, pos = uleb128(data, pos)
            if form == 0x21:  # implicit_const: its value is here, not in the DIE
                while data[pos] & 0x80:
                    pos += 1
                pos += 1
            if at == 0 and form == 0:
                break
            specs.append((at, form))
        out[code] = (tag, children, tuple(specs))


@dataclass(frozen=True, slots=True)
class _Unit:
    at: int  # offset of the unit's header
    end: int
    first: int  # offset of its first DIE
    version: int
    osize: int  # 4 or 8: the DWARF format
    asize: int  # address size
    refaddr: int  # size of a DW_FORM_ref_addr


def _extent(info: bytes, unit: int) -> tuple[int, int, int]:
    """(length, where the header's version is, offset size) of the unit at ``unit``."""
    (length,) = struct.unpack_from("<I", info, unit)
    if length == 0xFFFFFFFF:  # 64-bit DWARF
        (length,) = struct.unpack_from("<Q", info, unit + 4)
        return length, unit + 12, 8
    return length, unit + 4, 4


def _fields(info: bytes, head: int, osize: int) -> tuple[int, int, int, int]:
    """(version, address size, abbreviation table's offset, first DIE's offset) of the
    unit header whose version is at ``head``."""
    (version,) = struct.unpack_from("<H", info, head)
    if version >= 5:
        kind, asize = info[head + 2], info[head + 3]
        abbrev_at = int.from_bytes(info[head + 4:head + 4 + osize], "little")
        first = head + 4 + osize + (8 if kind in (4, 5) else 8 + osize if kind in (2, 6)
                                    else 0)
    else:
        abbrev_at = int.from_bytes(info[head + 2:head + 2 + osize], "little")
        asize = info[head + 2 + osize]
        first = head + 3 + osize
    return version, asize, abbrev_at, first


Table = dict[int, tuple[int, bool, tuple[tuple[int, int], ...]]]  # ``_abbrevs``'


def damage(info: bytes, abbrev: bytes, present: frozenset[int] | set[int] = frozenset(),
           tables: dict[int, Table] | None = None) -> str:
    """What is wrong with the unit headers of .debug_info ('' when nothing): a length
    past the section's end, a version DWARF does not have, an address size that is not
    4 or 8, an abbreviation table past its section's end or not readable. The tables
    read are kept in ``tables`` (the raw reader's, read once: a GCC build has one a
    unit)."""
    checked: dict[int, str] = {}
    alike = _Alike(abbrev, _table_offsets(info))
    unit = 0
    while unit < len(info):
        big = info[unit:unit + 4] == b"\xff\xff\xff\xff"
        if unit + (12 if big else 4) > len(info):
            return f"a unit header at +{unit:#x} is cut off"
        length, head, osize = _extent(info, unit)
        if length < 2 + osize + 1:
            return f"the unit at +{unit:#x} has length {length}, too short for its header"
        if head + length > len(info):
            return f"the unit at +{unit:#x} has length {length}, past the section's end"
        version, asize, abbrev_at, _first = _fields(info, head, osize)
        if not 2 <= version <= 5:
            return f"the unit at +{unit:#x} has DWARF version {version}"
        if asize not in (4, 8):
            return f"the unit at +{unit:#x} has address size {asize}"
        if abbrev_at >= len(abbrev):
            return f"the unit at +{unit:#x} has its abbreviations past .debug_abbrev's end"
        if abbrev_at not in checked:
            checked[abbrev_at] = abbrev_damage(abbrev, abbrev_at, version, present, tables,
                                               alike)
        if checked[abbrev_at]:
            return checked[abbrev_at]
        unit = head + length
    return ""


# The attribute forms of DWARF 2-4 and GNU's extensions; DWARF 5 adds 0x1a-0x2c.
FORMS = frozenset(range(0x01, 0x1A)) - {0x02} | {0x20} | frozenset(range(0x1F01, 0x1F22))
FORMS_5 = FORMS | frozenset(range(0x1A, 0x2D))
# The forms that point into another section, by pyelftools' attribute for it: a form
# whose section the file lacks is damage.
FORM_SECTIONS = {0x0E: "debug_str_sec", 0x1F: "debug_line_str_sec",
                 **{f: "debug_str_offsets_sec" for f in (0x1A, 0x25, 0x26, 0x27, 0x28)},
                 **{f: "debug_addr_sec" for f in (0x1B, 0x29, 0x2A, 0x2B, 0x2C)},
                 0x22: "debug_loclists_sec", 0x23: "debug_rnglists_sec"}


def abbrev_damage(abbrev: bytes, at: int, version: int = 5,
                  present: frozenset[int] | set[int] | None = None,
                  tables: dict[int, Table] | None = None, alike: _Alike | None = None
                  ) -> str:
    """What is wrong with the abbreviation table at ``at`` ('' when nothing): cut off,
    an attribute form that unit's DWARF version does not have, or one that points into
    a section the file lacks (``present``: the forms whose sections it has). A table
    alike one checked before (``_Alike``) is that one, checked once a version."""
    try:
        table = alike.table(at) if alike is not None else _abbrevs(abbrev, at)
    except IndexError:
        return f"the abbreviation table at +{at:#x} runs past .debug_abbrev's end"
    if tables is not None:
        tables[at] = table
    if alike is not None:
        said = alike.said.get((id(table), version, id(present)))
        if said is None:
            said = alike.said[(id(table), version, id(present))] = _table_damage(
                table, at, version, present)
        return said.replace("@AT@", f"{at:#x}")
    return _table_damage(table, at, version, present).replace("@AT@", f"{at:#x}")


def _table_damage(table: Table, at: int, version: int,
                  present: frozenset[int] | set[int] | None) -> str:
    """``abbrev_damage`` of a table read, its offset written @AT@."""
    known = FORMS_5 if version >= 5 else FORMS
    for code, (_tag, _children, specs) in table.items():
        for attr, form in specs:
            if form not in known:
                return (f"abbreviation {code} at +@AT@ gives attribute {attr:#x} the "
                        f"form {form:#x}, unknown in DWARF {version}")
            if present is not None and form in FORM_SECTIONS and form not in present:
                return (f"abbreviation {code} at +@AT@ gives attribute {attr:#x} the "
                        f"form {form:#x}, whose section the file does not have")
    return ""


class _Alike:
    """Abbreviation tables read once per content: GCC writes one table per unit, most
    of them byte for byte alike. A table's bytes up to the next table's offset key it;
    one that runs past that point is read on its own, never shared."""

    def __init__(self, abbrev: bytes, offsets: list[int]) -> None:
        self.abbrev = abbrev
        self.bounds = sorted(set(offsets))
        self.read: dict[bytes, Table] = {}
        self.said: dict[tuple[int, int, int], str] = {}

    def table(self, at: int) -> Table:
        i = bisect.bisect_right(self.bounds, at)
        end = self.bounds[i] if i < len(self.bounds) else len(self.abbrev)
        raw = self.abbrev[at:end]
        got = self.read.get(raw)
        if got is None:
            got, stop = _abbrevs_to(self.abbrev, at)
            if stop <= end:
                self.read[raw] = got
        return got


def _table_offsets(info: bytes) -> list[int]:
    """The abbreviation offsets of the units whose headers read (up to the first that
    does not: the damage check says what is wrong with it)."""
    out = []
    unit = 0
    try:
        while unit + 4 <= len(info):
            length, head, osize = _extent(info, unit)
            if length < 2 + osize + 1 or head + length > len(info):
                break
            out.append(_fields(info, head, osize)[2])
            unit = head + length
    except (struct.error, IndexError):
        pass
    return out


def _units(info: bytes) -> Iterator[tuple[_Unit, int]]:
    """Every unit of .debug_info, with the offset of its abbreviation table."""
    unit = 0
    while unit < len(info):
        length, head, osize = _extent(info, unit)
        version, asize, abbrev_at, first = _fields(info, head, osize)
        yield (_Unit(unit, head + length, first, version, osize, asize,
                     asize if version == 2 else osize), abbrev_at)
        unit = head + length


def fixed_size(form: int, u: _Unit) -> int | None:
    """The size of an attribute value of ``form`` in unit ``u``, or None when it varies."""
    size = _FIXED.get(form)
    if size is not None:
        return size
    if form in _OFFSET:
        return u.osize
    if form == 0x01:  # addr
        return u.asize
    if form == 0x10:  # ref_addr
        return u.refaddr
    return None


def _skip(info: bytes, pos: int, form: int, u: _Unit) -> int:
    """Where the attribute value of ``form`` at ``pos`` ends."""
    size = fixed_size(form, u)
    if size is not None:
        return pos + size
    if form in _ULEB:
        while info[pos] & 0x80:
            pos += 1
        return pos + 1
    if form == 0x08:  # string
        return info.index(b"\0", pos) + 1
    if form in (0x09, 0x18):  # block, exprloc
        n, pos = uleb128(info, pos)
        return pos + n
    if form == 0x16:  # indirect: the form is written before the value
        form, _size, pos = indirect(info, pos, u)
        return _skip(info, pos, form, u)
    if form == 0x0A:
        return pos + 1 + info[pos]
    if form == 0x03:
        return pos + 2 + int(struct.unpack_from("<H", info, pos)[0])
    if form == 0x04:
        return pos + 4 + int(struct.unpack_from("<I", info, pos)[0])
    raise ValueError(f"DWARF form {form:#x} in the unit at {u.at:#x}")


def indirect(info: bytes, pos: int, u: _Unit) -> tuple[int, int, int]:
    """A DW_FORM_indirect value's form (written first, and again while it is indirect),
    its size (-1: it varies) and where the value starts."""
    form, pos = uleb128(info, pos)
    while form == 0x16:
        form, pos = uleb128(info, pos)
    known = fixed_size(form, u)
    return form, -1 if known is None else known, pos


def _ref(info: bytes, pos: int, form: int, u: _Unit) -> int | None:
    """The DIE offset a reference attribute names (None: another file's, or not one)."""
    if form in _CU_REF:
        return u.at + int.from_bytes(info[pos:pos + _CU_REF[form]], "little")
    if form == 0x15:
        return u.at + uleb128(info, pos)[0]
    if form == 0x10:
        return int.from_bytes(info[pos:pos + u.refaddr], "little")
    return None


def top_types(info: bytes, abbrev: bytes, unit: int, tags: frozenset[int], strs: bytes
              ) -> list[tuple[str, int, int]]:
    """(name, tag, offset) of every named, defined (not DW_AT_declaration) DIE with a
    tag of ``tags`` directly under the unit at ``unit``. Names inline or in .debug_str
    (``strs``); ValueError for any other name form, or a form it does not know."""
    out: list[tuple[str, int, int]] = []
    for u, abbrev_at in _units(info):
        if u.at != unit:
            continue
        table = _abbrevs(abbrev, abbrev_at)
        pos, depth = u.first, 0
        while pos < u.end:
            at = pos
            code, pos = uleb128(info, pos)
            if code == 0:
                depth -= 1
                continue
            tag, children, specs = table[code]
            name, declared = None, False
            for attr_, form in specs:
                while form == 0x16:
                    form, pos = uleb128(info, pos)
                if depth == 1 and attr_ == AT_NAME:
                    if form == 0x08:
                        name = info[pos:info.index(b"\0", pos)].decode("utf-8", "replace")
                    elif form == 0x0E:
                        off = int.from_bytes(info[pos:pos + u.osize], "little")
                        name = strs[off:strs.index(b"\0", off)].decode("utf-8", "replace")
                    else:
                        raise ValueError(f"a name in form {form:#x}")
                elif depth == 1 and attr_ == AT_DECLARATION:
                    declared = form == 0x19 or (form == 0x0C and info[pos] != 0)
                pos = _skip(info, pos, form, u)
            if depth == 1 and tag in tags and name and not declared:
                out.append((name, tag, at))
            if children:
                depth += 1
        return out
    raise ValueError(f"no unit at {unit:#x}")


_STRX = {0x25: 1, 0x26: 2, 0x27: 3, 0x28: 4}  # strx1..strx4: an index of that size
AT_STR_OFFSETS_BASE = 0x72


@dataclass(frozen=True, slots=True)
class Strings:
    """The string sections a DIE's name may be in."""

    str: Text = field(default_factory=lambda: Text(b""))  # .debug_str
    line_str: bytes = b""  # .debug_line_str (DWARF 5)
    offsets: bytes = b""  # .debug_str_offsets (DWARF 5's strx forms index it)


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
