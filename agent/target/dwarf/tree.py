"""The shape of .debug_info read fast from its raw bytes, one unit at a time: what each
scope-like DIE is in and is called, what each function DIE's abstract_origin or
specification names, which DIEs are inlined copies.

pyelftools makes an object for every DIE and attribute and finds a DIE's parent by
parsing its unit from the start (seconds and hundreds of MB on a large Rust binary).
This walks the bytes with a plan per abbreviation (most DIEs are skipped by one
addition) and keeps only those facts, so that a question about a few functions reads
the units that can hold them: the ones whose bytes refer to the function's name (its
string's offset in .debug_str, or the name itself), then, until nothing new turns up,
those whose bytes hold the offset of a DIE found so far (a DW_FORM_ref_addr from
another unit: LLVM's copies inlined across units of one object, GCC's LTO).
"""

from __future__ import annotations

import bisect
import struct
from array import array
from collections.abc import Callable, Collection, Iterable, Iterator
from typing import TypeAlias

from agent.target.dwarf import scan
from agent.target.elf import uleb128

_SUBPROGRAM, _INLINED = 0x2E, 0x1D
_UNIT_TAGS = frozenset({0x11, 0x41, 0x3C})  # compile, skeleton-less type, partial unit
# Function-like DIEs whose reference is kept (a variable's abstract_origin is not).
_REFERRING = frozenset({_SUBPROGRAM, _INLINED})
# DIEs kept even without children: what a function's name or a copy's place needs.
# Named types (struct, union, class, typedef, base, enum, pointer, array, subroutine).
TYPES = frozenset({0x13, 0x17, 0x02, 0x16, 0x24, 0x04, 0x0F, 0x01, 0x15})
_KEPT = frozenset({_SUBPROGRAM, _INLINED, 0x0B, 0x39}) | TYPES
_AT_DECLARATION = 0x3C
_DECLARED = 1 << 16  # a kept DIE's tag with this bit: it has DW_AT_declaration
_PARENT = 1 << 17  # ... with this one: it has children
_STRP, _LINE_STRP, _STRING = 0x0E, 0x1F, 0x08
_ALT_FORMS = frozenset({0x1F20, 0x1F21})  # dwz's references into a supplementary file
_REF_ADDR = 0x10
AT_PRODUCER = 0x25
AT_LOW_PC = 0x11
AT_LANGUAGE = 0x13
_SCOPES = frozenset({0x39, 0x13, 0x02, 0x17, 0x04})  # namespace, struct, class, union, enum

Plan = tuple[int, bool, int, tuple[tuple[int, int, int, int], ...], int, bool]
_SKIP, _NAME, _ORIGIN, _SPEC, _BASE, _LOW, _DECL = range(7)  # what a step does with it


def _size(form: int, u: scan._Unit) -> int | None:
    """The size of an attribute value of ``form`` in unit ``u``, or None when it varies."""
    fixed = scan._FIXED.get(form)
    if fixed is not None:
        return fixed
    if form in scan._OFFSET:
        return u.osize
    if form == 0x01:
        return u.asize
    if form == _REF_ADDR:
        return u.refaddr
    return None


def _plans(table: dict[int, tuple[int, bool, tuple[tuple[int, int], ...]]], u: scan._Unit
           ) -> dict[int, Plan]:
    """code -> (tag, children, size or -1, steps, bytes after the last step, kept): a
    DIE of a fixed size with nothing to read in it is skipped by one addition; else each
    step (bytes before it, what to do, form, its size or -1) is an attribute of a size
    that varies, or one to read (a kept DIE's name, a function's reference, a unit's
    string base)."""
    out: dict[int, Plan] = {}
    for code, (tag, children, specs) in table.items():
        kept = children or tag in _KEPT
        steps: list[tuple[int, int, int, int]] = []
        run = 0
        for attr_, form in specs:
            role = _NAME if kept and attr_ == scan.AT_NAME else \
                _ORIGIN if tag in _REFERRING and attr_ == scan.AT_ABSTRACT_ORIGIN else \
                _SPEC if tag in _REFERRING and attr_ == scan.AT_SPECIFICATION else \
                _BASE if tag in _UNIT_TAGS and attr_ == scan.AT_STR_OFFSETS_BASE else \
                _LOW if tag == _SUBPROGRAM and attr_ == AT_LOW_PC else \
                _DECL if kept and attr_ == _AT_DECLARATION else _SKIP
            size = _size(form, u)
            if size is None or role != _SKIP:
                steps.append((run, role, form, -1 if size is None else size))
                run = 0
            else:
                run += size
        out[code] = (tag, children, -1 if steps else run, tuple(steps), run, kept)
    return out


_NO_NAME, _TEXT = -1, -2  # a kept DIE's name code: none; a string kept aside
_FEW = 4  # a part of a name found in this many places or fewer narrows the units read
_U32, _U64 = struct.Struct("<I").unpack_from, struct.Struct("<Q").unpack_from


# A unit's kept DIEs: offsets, tags, parents, names, references (a string: the runtime's
# array is not subscriptable before Python 3.12).
Block: TypeAlias = "tuple[array[int], array[int], array[int], array[int], array[int]]"


class _Kept:
    """The kept DIEs of the units walked: per unit, arrays of offsets (ascending),
    tags, parents, name codes (a .debug_str offset; -(offset + 3) of a name written in
    .debug_info; ``_TEXT``; ``_NO_NAME``) and what a function's abstract_origin or
    specification names (-1: nothing): 36 bytes a DIE, not tuples and dict entries
    (about 250)."""

    def __init__(self) -> None:
        self.units: dict[int, Block] = {}
        self.starts: list[int] = []  # of the units in ``units``, sorted
        self.texts: dict[int, str] = {}  # names given as strings (.debug_line_str)

    def add(self, unit: int, block: Block) -> None:
        self.units[unit] = block
        bisect.insort(self.starts, unit)

    def _find(self, offset: int) -> tuple[Block, int] | None:
        i = bisect.bisect_right(self.starts, offset) - 1
        if i < 0:
            return None
        block = self.units[self.starts[i]]
        k = bisect.bisect_left(block[0], offset)
        return (block, k) if k < len(block[0]) and block[0][k] == offset else None

    def __contains__(self, offset: int) -> bool:
        return self._find(offset) is not None

    def get(self, offset: int) -> tuple[int, int, int | str | None] | None:
        """(tag, the DIE it is in or -1, its name: a .debug_str offset, the negated
        (offset + 1) of a name written in .debug_info, a string, or None)."""
        found = self._find(offset)
        if found is None:
            return None
        (_o, tags, parents, names, _r), k = found
        code = names[k]
        name: int | str | None = None if code == _NO_NAME else \
            self.texts[offset] if code == _TEXT else code if code >= 0 else code + 2
        return tags[k] & 0xFFFF, parents[k], name

    def __getitem__(self, offset: int) -> tuple[int, int, int | str | None]:
        got = self.get(offset)
        if got is None:
            raise KeyError(offset)
        return got

    def ref(self, offset: int) -> int:
        """What the function DIE at ``offset`` refers to (-1: nothing, or not kept)."""
        found = self._find(offset)
        return found[0][4][found[1]] if found is not None else -1

    def refs(self, unit: int) -> Iterator[tuple[int, int]]:
        """(DIE, what it refers to) of the referring DIEs of walked unit ``unit``."""
        block = self.units[unit]
        return ((at, r) for at, r in zip(block[0], block[4], strict=True) if r >= 0)


    def items(self, units: Iterable[int]) -> Iterator[tuple[int, int, int]]:
        """(offset, tag and ``_DECLARED``, name code) of the kept DIEs of ``units``
        (walked ones)."""
        for unit in units:
            block = self.units.get(unit)
            if block is not None:
                yield from zip(block[0], block[1], block[3], strict=True)


class Tree:
    """Facts of the units walked so far (``walk``), by DIE offset."""

    def __init__(self, info: bytes, abbrev: bytes, strings: scan.Strings,
                 tables: dict[int, scan.Table] | None = None) -> None:
        self.info, self.abbrev, self.strings = info, abbrev, strings
        self.units = list(scan._units(info))
        self.starts = [u.at for u, _ in self.units]
        self.walked: set[int] = set()
        self.kept = _Kept()
        self.inlined = array("Q")
        self.starting: dict[int, list[int]] = {}  # address -> subprograms starting there
        self.odd: set[int] = set()  # units with a subprogram's low_pc in a form not read
        self._mentioned: dict[str, set[int]] = {}  # name -> the units that mention it
        self._tables = tables if tables is not None else {}  # abbreviation tables read
        self._names: dict[int, str] = {}  # .debug_str offset -> the string there
        self._back: dict[int, list[int]] = {}  # ``_referrers``
        # name code -> the name-holding subprograms (no reference of their own) so named
        self._named: dict[int, list[int]] = {}
        self._folded: set[int] = set()  # the units whose references are in ``_back``
        self._strings_at: dict[str, list[int]] = {}  # name -> its places in .debug_str
        self._plans: dict[tuple[int, int, int, int], dict[int, Plan]] = {}
        self._prefix: dict[int, str] = {}
        self._made_by: dict[int, bool] = {}
        # The byte range of the run of units sharing each one's abbreviation table.
        self._runs: list[tuple[int, int]] = []
        first = 0
        for i in range(1, len(self.units) + 1):
            if i == len(self.units) or self.units[i][1] != self.units[first][1]:
                span = (self.units[first][0].at, self.units[i - 1][0].end)
                self._runs += [span] * (i - first)
                first = i
        forms = {f for at in {at for _u, at in self.units} for f in self._forms(at)}
        self._inline_names = any(
            a == scan.AT_NAME and f in (_STRING, 0x16)  # written there, or said there
            for at in {at for _u, at in self.units}
            for _t, _c, specs in self._table(at).values() for a, f in specs)
        # Whether another unit can refer to a DIE by its offset (searched for), and
        # whether names may be in a file this one is not (then every unit is read).
        self.cross = _REF_ADDR in forms
        self.elsewhere = bool(forms & _ALT_FORMS) or (any(
            f in scan._STRX or f == 0x1A for f in forms) and not strings.offsets)

    def _forms(self, abbrev_at: int) -> set[int]:
        return {f for _t, _c, specs in self._table(abbrev_at).values()
                for _a, f in specs}

    def _table(self, abbrev_at: int) -> scan.Table:
        """The abbreviation table at ``abbrev_at``, read once."""
        got = self._tables.get(abbrev_at)
        if got is None:
            got = self._tables[abbrev_at] = scan._abbrevs(self.abbrev, abbrev_at)
        return got

    # --- walking -------------------------------------------------------------------

    def unit_of(self, offset: int) -> int:
        """The offset of the unit holding the DIE at ``offset``."""
        return self.starts[max(bisect.bisect_right(self.starts, offset) - 1, 0)]

    def walk(self, units: Iterable[int] | None = None) -> list[int]:
        """Reads the units at ``units`` (every unit: None) not read before; the offsets of
        those read."""
        todo = sorted((set(self.starts) if units is None else set(units)) - self.walked)
        for at in todo:
            i = bisect.bisect_left(self.starts, at)
            if i == len(self.starts) or self.starts[i] != at:
                raise ValueError(f"no unit at +{at:#x}")
            self._walk_unit(*self.units[i])
            self.walked.add(at)
        return todo

    def _walk_unit(self, u: scan._Unit, abbrev_at: int) -> None:
        key = (abbrev_at, u.osize, u.asize, u.refaddr)
        plans = self._plans.get(key)
        if plans is None:
            plans = self._plans[key] = _plans(self._table(abbrev_at), u)
        info, inlined, starting = self.info, self.inlined, self.starting
        named = self._named
        block = (array("Q"), array("I"), array("q"), array("q"), array("q"))
        k_at, k_tag, k_parent, k_name, k_ref = (a.append for a in block)
        pos, end = u.first, u.end
        stack: list[int] = []
        parent = -1  # the DIE the next one is in: the top of ``stack``
        str_base = 8 if u.osize == 4 else 16
        skip = scan._skip
        word = _U32 if u.osize == 4 else _U64  # a section offset (strp, sec_offset)
        refaddr = _U32 if u.refaddr == 4 else _U64 if u.refaddr == 8 else None
        unit = u.at
        while pos < end:
            at = pos
            code = info[pos]
            if code < 0x80:
                pos += 1
            else:
                code, pos = uleb128(info, pos)
            if code == 0:
                if stack:
                    stack.pop()
                    parent = stack[-1] if stack else -1
                continue
            tag, children, fixed, steps, tail, keep = plans[code]
            if fixed >= 0:
                pos += fixed
                if keep:
                    k_at(at)
                    k_tag(tag | _PARENT if children else tag)
                    k_parent(parent)
                    k_name(_NO_NAME)
                    k_ref(-1)
                    if tag == _INLINED:
                        inlined.append(at)
                    if children:
                        stack.append(at)
                        parent = at
                continue
            name = _NO_NAME
            ref = low = -1
            declared = 0
            for before, role, form, size in steps:
                pos += before
                while form == 0x16:  # indirect: the form is in the DIE
                    form, pos = uleb128(info, pos)
                    known = _size(form, u)
                    size = -1 if known is None else known
                if role == _SKIP:
                    if form == 0x18 or form == 0x09:  # exprloc, block: a length first
                        n = info[pos]
                        pos = pos + 1 + n if n < 0x80 else skip(info, pos, form, u)
                    elif (form == 0x0D or form == 0x0F) and info[pos] < 0x80:
                        pos += 1  # a one-byte LEB128
                    else:
                        pos = skip(info, pos, form, u)
                    continue
                if role == _NAME:
                    if form == _STRP:
                        name = word(info, pos)[0]
                    else:
                        got_name = self._name(pos, form, u, str_base)
                        if isinstance(got_name, str):
                            self.kept.texts[at] = got_name
                            name = _TEXT
                        else:
                            name = got_name if got_name >= 0 else got_name - 2
                elif role in (_ORIGIN, _SPEC):
                    if form == 0x13:
                        got = unit + _U32(info, pos)[0]
                    elif form == _REF_ADDR and refaddr is not None:
                        got = refaddr(info, pos)[0]
                    else:
                        got = scan._ref(info, pos, form, u)
                    if got is not None and (role == _ORIGIN or ref < 0):
                        ref = got  # abstract_origin, else specification
                elif role == _DECL:
                    declared = _DECLARED if form == 0x19 or info[pos] else 0
                elif role == _LOW:
                    if form == 0x01:
                        low = int.from_bytes(info[pos:pos + u.asize], "little")
                    else:
                        self.odd.add(u.at)
                else:
                    str_base = int.from_bytes(info[pos:pos + u.osize], "little")
                pos = pos + size if size >= 0 else skip(info, pos, form, u)
            pos += tail
            if keep:
                k_at(at)
                k_tag((tag | _PARENT if children else tag) | declared)
                k_parent(parent)
                k_name(name)  # -(pos + 1) of a name in .debug_info was made -(pos + 3)
                k_ref(ref)
                if low >= 0:
                    starting.setdefault(low, []).append(at)
                if tag == _SUBPROGRAM and ref < 0 and name != _NO_NAME:
                    named.setdefault(name, []).append(at)
                if tag == _INLINED:
                    inlined.append(at)
                if children:
                    stack.append(at)
                    parent = at
        self.kept.add(u.at, block)

    def _name(self, pos: int, form: int, u: scan._Unit, str_base: int) -> int | str:
        info = self.info
        if form == _STRP:
            return int.from_bytes(info[pos:pos + u.osize], "little")
        if form == _STRING:
            return -(pos + 1)
        if form == _LINE_STRP:
            return scan._string(self.strings.line_str,
                                int.from_bytes(info[pos:pos + u.osize], "little"))
        if form in scan._STRX or form == 0x1A:
            index = int.from_bytes(info[pos:pos + scan._STRX[form]], "little") \
                if form in scan._STRX else uleb128(info, pos)[0]
            at = str_base + index * u.osize
            return int.from_bytes(self.strings.offsets[at:at + u.osize], "little")
        raise ValueError(f"a name in form {form:#x}")

    # --- names ---------------------------------------------------------------------

    def name(self, offset: int) -> str | None:
        """The DW_AT_name of the kept DIE at ``offset``."""
        found = self.kept._find(offset)
        return self._decoded(offset, found[0][3][found[1]]) if found is not None else None

    def qualified(self, offset: int, nested: bool = True) -> str:
        """``a::b::name``: the names of the DIEs it is in (its unit's aside), then its
        own ("?" when it has none); its own only without ``nested`` (Go's)."""
        own = self.name(offset) or "?"
        if not nested:
            return own
        parent = self.kept[offset][1] if offset in self.kept else -1
        prefix = self._scope(parent)
        return f"{prefix}::{own}" if prefix else own

    def _scope(self, offset: int) -> str:
        got = self._prefix.get(offset)
        if got is not None:
            return got
        entry = self.kept.get(offset)
        if entry is None or entry[0] in _UNIT_TAGS:
            return ""
        outer = self._scope(entry[1])
        own = self.name(offset)
        got = self._prefix[offset] = f"{outer}::{own}" if outer and own else outer or own or ""
        return got

    def names_of(self, offsets: Iterable[int], nested: bool = True) -> dict[int, str]:
        """``qualified`` of each DIE at ``offsets`` (kept, in units read), looked up unit
        by unit in the arrays rather than one bisection each."""
        by_unit: dict[int, list[int]] = {}
        for o in offsets:
            by_unit.setdefault(self.unit_of(o), []).append(o)
        out: dict[int, str] = {}
        for unit, wanted in by_unit.items():
            block = self.kept.units.get(unit)
            if block is None:
                out.update((o, self.qualified(o, nested)) for o in wanted)
                continue
            where = {o: i for i, o in enumerate(block[0])}
            for o in wanted:
                i = where.get(o)
                if i is None:
                    out[o] = self.qualified(o, nested)
                    continue
                code = block[3][i]
                own = self._decoded(o, code) or "?"
                prefix = self._scope(block[2][i]) if nested else ""
                out[o] = f"{prefix}::{own}" if prefix else own
        return out

    def _decoded(self, offset: int, code: int) -> str | None:
        """The name a name code stands for (``_Kept``'s), of the DIE at ``offset``."""
        if code == _NO_NAME:
            return None
        if code == _TEXT:
            return self.kept.texts[offset]
        if code >= 0:
            text = self._names.get(code)
            if text is None:
                text = self._names[code] = self.strings.str.string(code)
            return text
        return scan._string(self.info, -(code + 2) - 1)

    def whole_index(self) -> dict[int, list[int]]:
        """Every unit read: the offsets of every inlined copy, in file order, by the DIE
        its origin leads to (``origin``)."""
        self.walk()
        refs = {at: r for unit in self.kept.units for at, r in self.kept.refs(unit)}
        out: dict[int, list[int]] = {}
        for at in sorted(self.inlined):
            key = at
            for _ in range(4):
                nxt = refs.get(key)
                if nxt is None:
                    break
                key = nxt
            out.setdefault(key, []).append(at)
        return out

    def parent(self, offset: int) -> int | None:
        """The DIE the kept DIE at ``offset`` is in; None when it was not read."""
        got = self.kept.get(offset)
        return got[1] if got is not None and got[1] >= 0 else None

    def subprogram_at(self, unit: int, address: int) -> int | None:
        """The first subprogram DIE of unit ``unit``, at its top level or in namespaces
        and types, whose code starts at ``address``; None when there is none; -1 when
        the unit gives a start in a form this does not read."""
        self.walk([unit])
        if unit in self.odd:
            return -1
        for at in sorted(self.starting.get(address, ())):
            if self.unit_of(at) != unit:
                continue
            parent = self.kept[at][1]
            while parent >= 0 and self.kept[parent][0] in _SCOPES:
                parent = self.kept[parent][1]
            if parent >= 0 and self.kept[parent][0] in _UNIT_TAGS:
                return at
        return None

    def origin(self, offset: int) -> int:
        """The DIE holding the name of function DIE ``offset``: its abstract_origin or
        specification followed, up to four steps, as far as the units read go."""
        for _ in range(4):
            nxt = self.kept.ref(offset)
            if nxt < 0:
                break
            offset = nxt
        return offset

    # --- choosing units ------------------------------------------------------------

    def mentioning(self, names: Collection[tuple[str, ...]]) -> set[int] | None:
        """The units that mention every part of one of ``names`` (a qualified name's
        parts: a DIE and the scopes it is in are in one unit), a part mentioned as a
        DW_AT_name can be: the offset of its string in .debug_str (any place it ends,
        since linkers merge a string into the tail of a longer one), through
        .debug_str_offsets, or written in the unit itself. A superset (four bytes may
        match by chance); None when names may be in another file (every unit is read)."""
        if self.elsewhere:
            return None
        out: set[int] = set()
        for parts in names:
            # each part's units: the rarest string's first, then those of others found
            # in few places (each place is a search of all .debug_info)
            ranked = sorted(dict.fromkeys(parts), key=lambda p: len(self._places(p)))
            units = self._mentions(ranked[0]) if ranked else set()
            for part in ranked[1:]:
                if len(self._places(part)) <= _FEW:
                    units = units & self._mentions(part)
            out |= units
        return out

    def _places(self, name: str) -> list[int]:
        """Where a string ``name`` ends .debug_str's strings (its possible offsets)."""
        got = self._strings_at.get(name)
        if got is None:
            raw = name.encode() + b"\0"
            got = self._strings_at[name] = self.strings.str.places(raw)
        return got

    def _mentions(self, name: str) -> set[int]:
        """The units that mention ``name`` (``mentioning``), kept."""
        got = self._mentioned.get(name)
        if got is not None:
            return got
        info = self.info
        offsets = self._places(name)
        # a name written in the unit itself, where any abbreviation allows one
        hits = set(_finds(info, name.encode() + b"\0")) if self._inline_names else set()
        sizes = {u.osize for u, _ in self.units}
        for off in offsets:
            for size in sizes:
                hits.update(_finds(info, off.to_bytes(size, "little")))
        if self.strings.offsets and offsets:
            hits.update(self._by_index(offsets, sizes))
        got = self._mentioned[name] = {self.unit_of(h) for h in hits}
        return got

    def _by_index(self, offsets: list[int], sizes: set[int]) -> set[int]:
        """Units whose .debug_str_offsets contribution holds one of ``offsets`` (DWARF
        5's strx forms name a string by its index there)."""
        table = self.strings.offsets
        places = sorted(p for off in offsets for size in sizes
                        for p in _finds(table, off.to_bytes(size, "little")))
        if not places:
            return set()
        bases = sorted(self._str_bases())
        out = set()
        for p in places:
            i = bisect.bisect_right(bases, (p, 2**64)) - 1
            if i >= 0:
                out.add(bases[i][1])
            else:
                out.update(self.starts)  # a table no unit names: read them all
        return out

    def _str_bases(self) -> list[tuple[int, int]]:
        """(DW_AT_str_offsets_base, unit) of each unit that has one."""
        out = []
        for u, abbrev_at in self.units:
            pos = u.first
            code, pos = uleb128(self.info, pos)
            table = self._table(abbrev_at)
            if code not in table:
                continue
            for attr_, form in table[code][2]:
                while form == 0x16:
                    form, pos = uleb128(self.info, pos)
                if attr_ == scan.AT_STR_OFFSETS_BASE:
                    out.append((int.from_bytes(self.info[pos:pos + u.osize], "little"),
                                u.at))
                pos = scan._skip(self.info, pos, form, u)
        return out

    def referring(self, targets: Iterable[int]) -> set[int]:
        """Units not read whose bytes hold the offset of one of ``targets`` as a
        DW_FORM_ref_addr would (a superset). LLVM refers across units only within one
        object file, whose units share one abbreviation table and lie together (a
        "run"): only there is looked for a target LLVM made; everywhere for others (GCC's
        LTO refers to the units of the objects it was compiled from)."""
        if not self.cross:
            return set()
        sizes = {u.refaddr for u, _ in self.units}
        out: set[int] = set()
        for t in targets:
            i = max(bisect.bisect_right(self.starts, t) - 1, 0)
            lo, hi = self._runs[i] if self._llvm(i) else (0, len(self.info))
            for size in sizes:
                out.update(self.unit_of(h) for h in _finds(self.info, t.to_bytes(size, "little"),
                                                           lo, hi))
        return out - self.walked

    def _llvm(self, i: int) -> bool:
        """Whether LLVM made unit ``i`` (its DW_AT_producer says so)."""
        got = self._made_by.get(i)
        if got is None:
            producer = self._top_string(i, AT_PRODUCER) or ""
            got = self._made_by[i] = "LLVM" in producer or "clang" in producer
        return got

    def _top(self, i: int) -> tuple[dict[int, tuple[int, int]], int]:
        """Unit ``i``'s own DIE: attribute -> (form, where its value is), and the unit's
        base in .debug_str_offsets."""
        u, abbrev_at = self.units[i]
        info = self.info
        code, pos = uleb128(info, u.first)
        table = self._table(abbrev_at)
        out: dict[int, tuple[int, int]] = {}
        if code not in table:
            return out, 0
        base = 8 if u.osize == 4 else 16
        for attr_, form in table[code][2]:
            while form == 0x16:
                form, pos = uleb128(info, pos)
            out[attr_] = (form, pos)
            if attr_ == scan.AT_STR_OFFSETS_BASE and form == 0x17:
                base = int.from_bytes(info[pos:pos + u.osize], "little")
            pos = scan._skip(info, pos, form, u)
        return out, base

    def _top_string(self, i: int, wanted: int) -> str | None:
        """A string attribute of unit ``i``'s own DIE."""
        attrs, base = self._top(i)
        if wanted not in attrs:
            return None
        form, pos = attrs[wanted]
        raw = self._name(pos, form, self.units[i][0], base)
        if isinstance(raw, str):
            return raw
        return self.strings.str.string(raw) if raw >= 0 else \
            scan._string(self.info, -raw - 1)

    def languages(self) -> list[int]:
        """Each unit's DW_AT_language (0 without one)."""
        out = []
        for i in range(len(self.units)):
            attrs, _base = self._top(i)
            form, pos = attrs.get(AT_LANGUAGE, (0, 0))
            size = {0x0B: 1, 0x05: 2, 0x06: 4}.get(form)
            out.append(int.from_bytes(self.info[pos:pos + size], "little") if size else
                       uleb128(self.info, pos)[0] if form == 0x0F else 0)
        return out

    def keys(self, names: Collection[tuple[str, ...]], keep: Callable[[str], bool],
             nested: bool = True, own: bool = False) -> dict[str, list[int]]:
        """The name-holding function DIEs (no abstract_origin or specification of their
        own) whose qualified name ``keep`` accepts, by that name, in the units that
        mention one of ``names`` (``mentioning``): every such function whose own name
        (DW_AT_name) and the scopes around it name all parts of one of ``names``. With
        ``own``, the last part of each is the function's own name (only DIEs so named
        are asked about)."""
        units = self.mentioning(names)
        self.walk(units)
        chosen = set(self.walked if units is None else units)
        owns = {parts[-1] for parts in names if parts}
        if own:  # the subprograms so named, through the index of names
            candidates = sorted(
                {at for n in owns for place in self._places(n)
                 for at in self._named.get(place, ())} |
                {at for code, ats in self._named.items() if code < 0 for at in ats
                 if self.name(at) in owns})
        else:
            candidates = [at for at, tag, name in self.kept.items(sorted(chosen))
                          if tag & 0xFFFF == _SUBPROGRAM and name != _NO_NAME
                          and self.kept.ref(at) < 0]
        out: dict[str, list[int]] = {}
        for at in candidates:
            if self.unit_of(at) in chosen:
                q = self.qualified(at, nested)
                if keep(q):
                    out.setdefault(q, []).append(at)
        return out

    def types(self, names: Collection[tuple[str, ...]] | None,
              language: Callable[[int], str]) -> list[tuple[str, int, int, bool]]:
        """``types_in`` of each unit that mentions one of ``names`` (``mentioning``;
        every unit: None), in file order."""
        units = None if names is None else self.mentioning(names)
        self.walk(units)
        return [t for unit in sorted(self.walked if units is None else units)
                for t in self.types_in(unit, language(unit))]

    def types_in(self, unit: int, language: str) -> list[tuple[str, int, int, bool]]:
        """(qualified name, tag, offset, has children) of every named type definition
        (``TYPES``, not DW_AT_declaration) of unit ``unit`` at its top level or in named
        namespaces and types, as a walk of the unit's children finds them. Go's names
        are whole (nothing nested is read), Rust's and C++'s join with ``::``, others'
        with ``.``."""
        self.walk([unit])
        sep = "::" if language in ("rust", "c++") else "."
        prefixes: dict[int, str | None] = {}
        out: list[tuple[str, int, int, bool]] = []
        for at, flagged, code in self.kept.items([unit]):
            tag = flagged & 0xFFFF
            if tag not in TYPES or flagged & _DECLARED or code == _NO_NAME:
                continue
            prefix = self._type_scope(self.kept[at][1], language == "go", sep, prefixes)
            if prefix is not None:
                out.append((prefix + (self.name(at) or ""), tag, at, bool(flagged & _PARENT)))
        return out

    def _type_scope(self, offset: int, whole: bool, sep: str, memo: dict[int, str | None]
                    ) -> str | None:
        """The prefix of the name of a type in the DIE at ``offset`` ("" at a unit's top
        level); None when a walk of the unit's children does not reach it (an unnamed
        scope, a function, anything nested in Go)."""
        if offset in memo:
            return memo[offset]
        entry = self.kept.get(offset)
        got: str | None = None
        if entry is not None and entry[0] in _UNIT_TAGS:
            got = ""
        elif entry is not None and not whole and entry[0] in _SCOPES and self.name(offset):
            outer = self._type_scope(entry[1], whole, sep, memo)
            got = None if outer is None else f"{outer}{self.name(offset)}{sep}"
        memo[offset] = got
        return got

    def reach(self, keys: Collection[int]) -> None:
        """Reads the units holding ``keys`` and every unit that refers to them, or to a
        function DIE that does, until no new one turns up: then ``index`` has every
        inlined copy of them."""
        self.walk({self.unit_of(k) for k in keys})
        seen = set(keys)
        frontier = set(keys)
        while frontier:
            # an inlined copy is no step to another: nothing refers to it
            self.walk(self.referring(d for d in frontier if self.kept[d][0] != _INLINED))
            referrers = self._referrers()
            frontier = {d for t in frontier for d in referrers.get(t, ()) if d not in seen}
            seen |= frontier

    def _referrers(self) -> dict[int, list[int]]:
        """DIE -> the function DIEs whose reference names it, of the units read."""
        for unit in self.kept.units.keys() - self._folded:
            for d, r in self.kept.refs(unit):
                self._back.setdefault(r, []).append(d)
            self._folded.add(unit)
        return self._back

    def index(self, keys: Collection[int]) -> dict[int, list[int]]:
        """The inlined copies read so far, in offset order, by the name-holding DIE (of
        ``keys``) their origins lead to."""
        referrers = self._referrers()
        out: dict[int, list[int]] = {}
        for key in set(keys):
            found: set[int] = set()
            frontier = {key}
            for _ in range(4):  # origin() follows four steps
                frontier = {d for t in frontier for d in referrers.get(t, ())} - found
                found |= frontier
            copies = sorted(d for d in found if self.kept[d][0] == _INLINED
                            and self.origin(d) == key)
            if copies:
                out[key] = copies
        return out


def _finds(data: bytes, pattern: bytes, lo: int = 0, hi: int | None = None
           ) -> Iterable[int]:
    """Every place ``pattern`` starts in ``data`` (between ``lo`` and ``hi``)."""
    end = len(data) if hi is None else hi
    at = data.find(pattern, lo, end)
    while at >= 0:
        yield at
        at = data.find(pattern, at + 1, end)
