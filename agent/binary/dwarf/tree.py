"""The shape of .debug_info read fast from its raw bytes, one unit at a time: what each
scope-like DIE is in and is called, what each function DIE's abstract_origin or
specification names, which DIEs are inlined copies.

pyelftools makes an object for every DIE and attribute and finds a DIE's parent by
parsing its unit from the start (seconds and hundreds of MB on a large Rust binary).
This walks the bytes with a plan per abbreviation (most DIEs are skipped by one
addition) and keeps only those facts (``kept``), so that a question about a few
functions or types reads only the units ``mentions`` says can hold them; ``asks``
answers the questions.
"""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Callable, Iterable, Mapping
from typing import TypeVar

from agent.binary.dwarf import native, scan, spread
from agent.binary.dwarf.kept import NO_NAME, TEXT, Kept
from agent.binary.dwarf.mentions import Mentions
from agent.binary.dwarf.sections import scan_string
from agent.binary.dwarf.steps import (
    DECL,
    DECLARED,
    INLINED,
    LOW,
    NAME,
    ORIGIN,
    PARENT,
    SKIP,
    SPEC,
    SUBPROGRAM,
    U32,
    UNIT_TAGS,
    Plan,
    Reading,
)
from agent.binary.dwarf.steps import plans as plans_of
from agent.binary.elf import uleb128

_STRP, _LINE_STRP, _STRING = 0x0E, 0x1F, 0x08
_REF_ADDR = 0x10
AT_LANGUAGE = 0x13
_T = TypeVar("_T")
_INT64 = 1 << 63
_SHARE = 16  # names_of in C when naming a sixteenth or more of its units' kept DIEs


class Tree:
    """Facts of the units walked so far (``walk``), by DIE offset."""

    def __init__(self, info: bytes, abbrev: bytes, strings: scan.Strings,
                 tables: dict[int, scan.Table] | None = None) -> None:
        self.info, self.abbrev, self.strings = info, abbrev, strings
        self.units = list(scan._units(info))
        self.starts = [u.at for u, _ in self.units]
        self.sizes = {u.at: u.end - u.at for u, _ in self.units}
        self.walked: set[int] = set()
        self.kept = Kept()
        self.inlined = array("Q")
        # unit -> (low_pc, DIE) of its subprograms with one, in file order
        self.lows: dict[int, array[int]] = {}
        self._starting: dict[int, dict[int, list[int]]] = {}  # ``starting``'s, by unit
        self.odd: set[int] = set()  # units with a subprogram's low_pc in a form not read
        self._tables = tables if tables is not None else {}  # abbreviation tables read
        self._names: dict[int, str] = {}  # .debug_str offset -> the string there
        self._back: dict[int, list[int]] = {}  # ``referrers``
        # name code -> the name-holding subprograms (no reference of their own) so named
        self.named: dict[int, list[int]] = {}
        self._folded: set[int] = set()  # the units whose references are in ``_back``
        # ``referring``'s: each unit's, and every walked unit's (for how many units)
        self._refers: dict[int, tuple[array[int], array[int]]] = {}
        self._referring: tuple[tuple[int, int], tuple[array[int], array[int]]] = (
            (0, -1), (array("Q"), array("q")))
        self._plans: dict[tuple[int, int, int, int], dict[int, Plan]] = {}
        self._plan_memo: dict[tuple[object, ...], Plan] = {}  # ``steps.plans``'
        # ``_plans``' values as ``native`` reads them: per table an index into ``_entries``,
        # which holds each plan once (``_coded``)
        self._coded: dict[int, array[int]] = {}
        self._entries = array("q")
        self._entry_at: dict[int, int] = {}  # a plan's id -> where it is in ``_entries``
        self.native = native.BUILT  # whether units are walked in C where it can
        self._prefix: dict[int, str] = {}
        self._named_as: dict[bool, dict[int, str]] = {}  # names_of's, by ``nested``
        self.mentions = Mentions(self)  # which units to read for a name

    def table(self, abbrev_at: int) -> scan.Table:
        """The abbreviation table at ``abbrev_at``, read once."""
        got = self._tables.get(abbrev_at)
        if got is None:
            got = self._tables[abbrev_at] = scan._abbrevs(self.abbrev, abbrev_at)
        return got

    # --- walking -------------------------------------------------------------------

    def starting(self, unit: int, address: int) -> list[int]:
        """The subprogram DIEs of walked unit ``unit`` whose code starts at ``address``
        (their low_pc), in file order."""
        by_low = self._starting.get(unit)
        if by_low is None:
            by_low = self._starting[unit] = {}
            pairs = self.lows.get(unit, array("Q"))
            for i in range(0, len(pairs), 2):
                by_low.setdefault(pairs[i], []).append(pairs[i + 1])
        return by_low.get(address, [])

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
        spread.walk(self, todo)
        return todo

    def walk_then(self, then: Callable[[Tree, list[int]], _T]) -> list[_T]:
        """Reads every unit not read before, and ``then``'s answers for parts of them
        (``spread.walk``): the units read before are a part of their own, first."""
        todo = sorted(set(self.starts) - self.walked)
        before = sorted(self.walked)
        return ([then(self, before)] if before else []) + spread.walk(self, todo, then)

    def walk_one(self, at: int) -> None:
        """Reads the unit at ``at``."""
        self._walk_unit(*self.units[bisect.bisect_left(self.starts, at)])
        self.walked.add(at)

    def _walk_unit(self, u: scan._Unit, abbrev_at: int) -> None:
        plans = self._plans_for(u, abbrev_at)
        if not (self.native and self._walk_native(u, plans)):
            self._walk_python(u, plans)

    def _walk_native(self, u: scan._Unit, plans: dict[int, Plan]) -> bool:
        """``_walk_python`` in C (``_walk.c``): False, with nothing changed, for a unit
        it leaves to Python (a form it does not read, a value past its section)."""
        coded = self._coded.get(id(plans))
        if coded is None:
            coded = self._coded[id(plans)] = _coded(plans, self._entries, self._entry_at)
        got = native.walk(self.info, u.first, u.end, u.at, u.osize, u.asize, u.refaddr,
                          8 if u.osize == 4 else 16, coded, self._entries,
                          self.strings.offsets, self.strings.line_str)
        if got is None:
            return False
        ats, tags, parents, names, refs, lows, named, inlined, texts, odd = got
        block = (array("Q"), array("I"), array("q"), array("q"), array("q"))
        for a, raw in zip(block, (ats, tags, parents, names, refs), strict=True):
            a.frombytes(raw)
        self.lows[u.at] = array("Q", lows)
        native.fold(named, self.named)
        self.inlined.frombytes(inlined)
        pairs = array("Q", texts)
        for i in range(0, len(pairs), 2):
            self.kept.texts[pairs[i]] = scan_string(self.strings.line_str, pairs[i + 1])
        if odd:
            self.odd.add(u.at)
        self.kept.add(u.at, block)
        return True

    def _walk_python(self, u: scan._Unit, plans: dict[int, Plan]) -> None:
        # Its loop runs once per DIE (millions in a large Rust build): a DIE with nothing
        # to read is skipped by an addition or a loop of skips here, and only a kept DIE
        # with something to read costs a call (``_read``).
        info, inlined, named = self.info, self.inlined, self.named
        block = (array("Q"), array("I"), array("q"), array("q"), array("q"))
        k_at, k_tag, k_parent, k_name, k_ref = (a.append for a in block)
        lows = self.lows[u.at] = array("Q")
        pos, end = u.first, u.end
        stack: list[int] = []
        parent = -1  # the DIE the next one is in: the top of ``stack``
        skip, read = scan._skip, self._read
        unit = Reading(u)
        while pos < end:
            at = pos
            code = info[pos]
            if code < 0x80:
                pos += 1
            elif info[pos + 1] < 0x80:  # GCC's codes pass 127 in a large unit
                code = (code & 0x7F) | info[pos + 1] << 7
                pos += 2
            else:
                code, pos = uleb128(info, pos)
            if code == 0:
                if stack:
                    stack.pop()
                    parent = stack[-1] if stack else -1
                continue
            tag, children, fixed, steps, tail, keep = plans[code]
            if fixed >= 0:  # no attribute noop reads, none of varying size: one addition
                pos += fixed
                if not keep:
                    continue
                name, ref, low, declared = NO_NAME, -1, -1, 0
            elif not keep:  # every step a skip: noop reads attributes of kept DIEs only
                for before, _role, form, _size in steps:
                    pos += before
                    if form == 0x18 or form == 0x09:  # exprloc, block: a length first
                        n = info[pos]
                        pos = pos + 1 + n if n < 0x80 else skip(info, pos, form, u)
                    elif (form == 0x0D or form == 0x0F) and info[pos] < 0x80:
                        pos += 1  # a one-byte LEB128
                    else:
                        pos = skip(info, pos, form, u)
                pos += tail
                continue
            else:
                pos, name, ref, low, declared = read(at, pos, steps, unit)
                pos += tail
            k_at(at)
            k_tag((tag | PARENT if children else tag) | declared)
            k_parent(parent)
            k_name(name)  # -(pos + 1) of a name in .debug_info was made -(pos + 3)
            k_ref(ref)
            if low >= 0:
                lows.extend((low, at))
            if tag == SUBPROGRAM and ref < 0 and name != NO_NAME:
                named.setdefault(name, []).append(at)
            if tag == INLINED:
                inlined.append(at)
            if children:
                stack.append(at)
                parent = at
        self.kept.add(u.at, block)

    def _plans_for(self, u: scan._Unit, abbrev_at: int) -> dict[int, Plan]:
        """The walk's plan of each abbreviation of unit ``u``, made once per table and
        unit shape."""
        table = self.table(abbrev_at)  # alike tables are one object (scan._Alike)
        key = (id(table), u.osize, u.asize, u.refaddr)
        plans = self._plans.get(key)
        if plans is None:
            plans = self._plans[key] = plans_of(table, u, self._plan_memo)
        return plans

    def _read(self, at: int, pos: int, steps: tuple[tuple[int, int, int, int], ...],
              unit: Reading) -> tuple[int, int, int, int, int]:
        """The attributes of the kept DIE at ``at`` whose first is at ``pos``, read by
        its plan's ``steps``: where they end, its name code, what it refers to, its
        low_pc and ``DECLARED`` (-1, -1, 0 for none)."""
        info, u = self.info, unit.u
        name = NO_NAME
        ref = low = -1
        declared = 0
        for before, role, form, size in steps:
            pos += before
            if form == 0x16:  # indirect: the form is in the DIE
                form, size, pos = scan.indirect(info, pos, u)
            if role == SKIP:
                if form == 0x18 or form == 0x09:  # exprloc, block: a length first
                    n = info[pos]
                    pos = pos + 1 + n if n < 0x80 else scan._skip(info, pos, form, u)
                else:
                    pos = scan._skip(info, pos, form, u)
                continue
            if role == NAME:
                if form == _STRP:
                    name = unit.word(info, pos)[0]
                else:
                    name = self._name_of(at, pos, form, unit)
            elif role in (ORIGIN, SPEC):
                if form == 0x13:
                    got = u.at + U32(info, pos)[0]
                elif form == _REF_ADDR and unit.refaddr is not None:
                    got = unit.refaddr(info, pos)[0]
                else:
                    got = scan._ref(info, pos, form, u)
                if got is not None and (role == ORIGIN or ref < 0):
                    ref = got  # abstract_origin, else specification
            elif role == DECL:
                declared = DECLARED if form == 0x19 or info[pos] else 0
            elif role == LOW:
                if form == 0x01:
                    low = int.from_bytes(info[pos:pos + u.asize], "little")
                else:
                    self.odd.add(u.at)
            else:
                unit.str_base = int.from_bytes(info[pos:pos + u.osize], "little")
            pos = pos + size if size >= 0 else scan._skip(info, pos, form, u)
        return pos, name, ref, low, declared

    def _name_of(self, at: int, pos: int, form: int, unit: Reading) -> int:
        """The name code (``Kept``'s) of a name in a form other than strp."""
        got = self.name_code(pos, form, unit.u, unit.str_base)
        if isinstance(got, str):
            self.kept.texts[at] = got
            return TEXT
        return got if got >= 0 else got - 2

    def name_code(self, pos: int, form: int, u: scan._Unit, str_base: int) -> int | str:
        info = self.info
        if form == _STRP:
            return int.from_bytes(info[pos:pos + u.osize], "little")
        if form == _STRING:
            return -(pos + 1)
        if form == _LINE_STRP:
            return scan_string(self.strings.line_str,
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
        if entry is None or entry[0] in UNIT_TAGS:
            return ""
        outer = self._scope(entry[1])
        own = self.name(offset)
        got = self._prefix[offset] = f"{outer}::{own}" if outer and own else outer or own or ""
        return got

    def names_of(self, offsets: Iterable[int], nested: bool = True) -> dict[int, str]:
        """``qualified`` of each DIE at ``offsets`` (kept, in units read), read from its
        unit's arrays; those a child named (``remember_names``) as it said. In no
        promised order."""
        offsets = list(offsets)
        known = self._named_as.get(nested, {})
        todo = sorted(set(self.unnamed(offsets, nested) if known else offsets))
        made = self._names_native(todo, nested) if self.native else None
        if made is None:
            made = self._names_python(todo, nested)
        if not known:
            return made  # each of ``offsets`` named
        return {o: known[o] if o in known else made[o] for o in offsets}

    def _names_native(self, todo: list[int], nested: bool) -> dict[int, str] | None:
        """``_names_python`` in C (``_walk.c``), over the kept DIEs of their units at
        once; None when scopes nest deeper than it follows, or when they are too few
        of those DIEs for joining their units' arrays to pay."""
        # the units holding them (a DIE's scopes are in its unit)
        starts = self.kept.starts
        blocks = []
        for start, end in zip(starts, [*starts[1:], 1 << 64], strict=False):
            i = bisect.bisect_left(todo, start)
            if i < len(todo) and todo[i] < end:
                blocks.append(self.kept.units[start])
        if len(todo) * _SHARE < sum(len(b[0]) for b in blocks):
            return None
        ats, tags, parents, names = array("Q"), array("I"), array("q"), array("q")
        for block in blocks:
            ats.extend(block[0])
            tags.extend(block[1])
            parents.extend(block[2])
            names.extend(block[3])
        wanted = array("Q", todo)
        codes = array("q")
        codes.frombytes(native.codes(wanted, ats, tags, parents, names, nested))
        self._read_names(codes)
        got = native.qualify(wanted, ats, tags, parents, names, nested, self._names,
                             self._decoded)
        if got is None:
            return None
        return {o: name if name is not None else self.qualified(o, nested)
                for o, name in zip(todo, got, strict=True)}

    def _read_names(self, codes: Iterable[int]) -> None:
        """The names in .debug_str of name codes ``codes``, read in one pass over it."""
        self._names.update(self.strings.str.strings(
            c for c in set(codes) if c >= 0 and c not in self._names))

    def _names_python(self, todo: list[int], nested: bool) -> dict[int, str]:
        """``qualified`` of each DIE at ``todo`` (ascending), read from its unit's
        arrays."""
        found = self.kept.found(todo)
        self._read_names(b[3][i] for b, i in (f for f in found if f is not None))
        made: dict[int, str] = {}
        for o, got in zip(todo, found, strict=True):
            if got is None:
                made[o] = self.qualified(o, nested)
                continue
            block, i = got
            own = self._decoded(o, block[3][i]) or "?"
            prefix = self._scope(block[2][i]) if nested else ""
            made[o] = f"{prefix}::{own}" if prefix else own
        return made

    def unnamed(self, offsets: Iterable[int], nested: bool) -> list[int]:
        """Those of ``offsets`` that ``names_of`` has not named yet."""
        known = self._named_as.get(nested, {})
        return [o for o in offsets if o not in known]

    def named_as(self, nested: bool) -> Mapping[int, str]:
        """Every DIE named so far (``names_of``, ``remember_names``), by offset."""
        return self._named_as.setdefault(nested, {})

    def remember_names(self, names: dict[int, str], nested: bool) -> None:
        """``names_of``'s answers found elsewhere (by a child that walked their units)."""
        self._named_as.setdefault(nested, {}).update(names)

    def _decoded(self, offset: int, code: int) -> str | None:
        """The name a name code stands for (``_Kept``'s), of the DIE at ``offset``."""
        if code == NO_NAME:
            return None
        if code == TEXT:
            return self.kept.texts[offset]
        if code >= 0:
            text = self._names.get(code)
            if text is None:
                text = self._names[code] = self.strings.str.string(code)
            return text
        return scan_string(self.info, -(code + 2) - 1)

    def parent(self, offset: int) -> int | None:
        """The DIE the kept DIE at ``offset`` is in; None when it was not read."""
        got = self.kept.get(offset)
        return got[1] if got is not None and got[1] >= 0 else None

    def origin(self, offset: int) -> int:
        """The DIE holding the name of function DIE ``offset``: its abstract_origin or
        specification followed, up to four steps, as far as the units read go."""
        for _ in range(4):
            nxt = self.kept.ref(offset)
            if nxt < 0:
                break
            offset = nxt
        return offset

    def referring(self, units: Iterable[int] | None = None) -> tuple[array[int], array[int]]:
        """The kept DIEs of walked units ``units`` (every one: None) that refer to
        another (abstract_origin, specification), ascending, and what each refers to:
        the arrays ``native``'s loops search (a quarter of the kept DIEs)."""
        chosen = self.kept.starts if units is None else sorted(units)
        version = (id(self.kept), len(chosen))  # units are added, never taken away
        if units is None and self._referring[0] == version:
            return self._referring[1]
        ats, refs = array("Q"), array("q")
        for unit in chosen:
            got = self._refers.get(unit)
            if got is None:
                block = self.kept.units[unit]
                a, r = native.refers(block[0], block[4])
                got = self._refers[unit] = (array("Q", a), array("q", r))
            ats.extend(got[0])
            refs.extend(got[1])
        if units is None:
            self._referring = (version, (ats, refs))
        return ats, refs

    def referrers(self) -> dict[int, list[int]]:
        """DIE -> the function DIEs whose reference names it, of the units read."""
        for unit in self.kept.units.keys() - self._folded:
            for d, r in self.kept.refs(unit):
                self._back.setdefault(r, []).append(d)
            self._folded.add(unit)
        return self._back

    def top(self, i: int) -> tuple[dict[int, tuple[int, int]], int]:
        """Unit ``i``'s own DIE: attribute -> (form, where its value is), and the unit's
        base in .debug_str_offsets."""
        u, abbrev_at = self.units[i]
        info = self.info
        code, pos = uleb128(info, u.first)
        table = self.table(abbrev_at)
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

    def top_string(self, i: int, wanted: int) -> str | None:
        """A string attribute of unit ``i``'s own DIE."""
        return self.top_strings(i, (wanted,))[wanted]

    def top_strings(self, i: int, wanted: tuple[int, ...]) -> dict[int, str | None]:
        """String attributes of unit ``i``'s own DIE, read with one parse of it."""
        attrs, base = self.top(i)
        return {a: self._top_value(i, attrs, base, a) for a in wanted}

    def _top_value(self, i: int, attrs: dict[int, tuple[int, int]], base: int,
                   wanted: int) -> str | None:
        if wanted not in attrs:
            return None
        form, pos = attrs[wanted]
        raw = self.name_code(pos, form, self.units[i][0], base)
        if isinstance(raw, str):
            return raw
        return self.strings.str.string(raw) if raw >= 0 else \
            scan_string(self.info, -raw - 1)

    def languages(self) -> list[int]:
        """Each unit's DW_AT_language (0 without one)."""
        out = []
        for i in range(len(self.units)):
            attrs, _base = self.top(i)
            form, pos = attrs.get(AT_LANGUAGE, (0, 0))
            size = {0x0B: 1, 0x05: 2, 0x06: 4}.get(form)
            out.append(int.from_bytes(self.info[pos:pos + size], "little") if size else
                       uleb128(self.info, pos)[0] if form == 0x0F else 0)
        return out


def _coded(plans: dict[int, Plan], entries: array[int], entry_at: dict[int, int]
           ) -> array[int]:
    """``plans`` as ``_walk.c`` reads them: the number of codes, then each code's offset
    in ``entries`` (-1: none), where its plan's tag, children, size, tail, kept, number
    of steps and each step's four numbers are; a plan not there yet is added (plans are
    shared: ``entry_at`` says where each is, by its id)."""
    codes = max(plans, default=0) + 1
    if codes > 1 << 16:  # codes GCC and rustc never reach: an index too large to make
        return array("q", [0])  # no code has a plan: every DIE is left to Python
    out = array("q", [codes] + [-1] * codes)
    for code, plan in plans.items():
        at = entry_at.get(id(plan))
        if at is None:
            tag, children, fixed, steps, tail, keep = plan
            numbers = (tag, children, fixed, tail, keep, len(steps),
                       *(n for step in steps for n in step))
            if not all(-_INT64 <= n < _INT64 for n in numbers):
                return array("q", [0])  # a tag or form past 64 bits: damage, for Python
            at = entry_at[id(plan)] = len(entries)
            entries.extend(numbers)
        out[1 + code] = at
    return out
