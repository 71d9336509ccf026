"""Which units of .debug_info to read for a question about names: those whose bytes
refer to every part of a qualified name, and those that refer by offset to a DIE
found (``DW_FORM_ref_addr``). Both are searches of the raw bytes (C speed), the
answer a superset: four bytes may match by chance, and a unit read for nothing costs
only its walk.
"""

from __future__ import annotations

import bisect
from collections.abc import Collection, Iterable
from typing import Protocol

from agent.binary.dwarf import scan, spread
from agent.binary.dwarf.sections import finds


class Tree(Protocol):
    """What of a ``tree.Tree`` this reads (named here: the tree makes a Mentions)."""

    info: bytes
    strings: scan.Strings
    units: list[tuple[scan._Unit, int]]
    starts: list[int]
    walked: set[int]

    def unit_of(self, offset: int) -> int: ...

    def table(self, abbrev_at: int) -> scan.Table: ...

    def top(self, i: int) -> tuple[dict[int, tuple[int, int]], int]: ...

    def top_string(self, i: int, wanted: int) -> str | None: ...

_FEW = 4  # a part of a name found in this many places or fewer narrows the units read
# A name whose rarest part ends this many strings or more is not looked for: each place
# is a search of all .debug_info (25 ms for a 32 MB one), and a walk of every unit costs
# less than a hundred of them.
_MANY = 64
_STRING, _INDIRECT, _REF_ADDR = 0x08, 0x16, 0x10
_ALT_FORMS = frozenset({0x1F20, 0x1F21})  # dwz's references into a supplementary file
AT_PRODUCER = 0x25


class Mentions:
    """The units a name or a DIE's offset is mentioned in, of one Tree's sections."""

    def __init__(self, tree: Tree) -> None:
        self.tree = tree
        self._mentioned: dict[str, set[int]] = {}  # name -> the units that mention it
        self._strings_at: dict[str, list[int]] = {}  # name -> its places in .debug_str
        self._made_by: dict[int, bool] = {}
        units = tree.units
        # The byte range of the run of units sharing each one's abbreviation table.
        self._runs: list[tuple[int, int]] = []
        first = 0
        for i in range(1, len(units) + 1):
            if i == len(units) or units[i][1] != units[first][1]:
                span = (units[first][0].at, units[i - 1][0].end)
                self._runs += [span] * (i - first)
                first = i
        specs = [spec for at in {at for _u, at in units}
                 for _t, _c, specs in tree.table(at).values() for spec in specs]
        forms = {f for _a, f in specs}
        # a name written in a unit itself (or whose form the DIE says), where any
        # abbreviation allows one: then searched for as it is written
        self._inline_names = any(a == scan.AT_NAME and f in (_STRING, _INDIRECT)
                                 for a, f in specs)
        # Whether another unit can refer to a DIE by its offset (searched for), and
        # whether names may be in a file this one is not (then every unit is read).
        self.cross = bool(forms & {_REF_ADDR, _INDIRECT})  # indirect: maybe a ref_addr
        self._sizes = sorted({u.osize for u, _ in units})  # of a strp
        self.elsewhere = bool(forms & _ALT_FORMS) or (any(
            f in scan._STRX or f == 0x1A for f in forms) and not tree.strings.offsets)

    def mentioning(self, names: Collection[tuple[str, ...]]) -> set[int] | None:
        """The units that mention every part of one of ``names`` (a qualified name's
        parts: a DIE and the scopes it is in are in one unit), a part mentioned as a
        DW_AT_name can be: the offset of its string in .debug_str (any place it ends,
        since linkers merge a string into the tail of a longer one), through
        .debug_str_offsets, or written in the unit itself. A superset (four bytes may
        match by chance); None when names may be in another file (every unit is read)."""
        if self.elsewhere:
            return None
        if len(names) > 1:
            self.prefetch(names)
        out: set[int] = set()
        for parts in names:
            narrowing = self._narrowing(parts)
            if narrowing is None:
                return None  # every unit: fewer bytes read than searching for it
            units = self._mentions(narrowing[0]) if narrowing else set()
            for part in narrowing[1:]:
                units = units & self._mentions(part)
            out |= units
        return out

    def _narrowing(self, parts: tuple[str, ...]) -> list[str] | None:
        """The parts of a name whose units ``mentioning`` intersects: the rarest string
        first, then others found in few places (each place is a search of all
        .debug_info); None when even the rarest ends too many strings (``_MANY``)."""
        ranked = sorted(dict.fromkeys(parts), key=lambda p: len(self.places(p)))
        if ranked and len(self.places(ranked[0])) >= _MANY:
            return None
        return ranked[:1] + [p for p in ranked[1:] if len(self.places(p)) <= _FEW]

    def prefetch(self, names: Collection[tuple[str, ...]]) -> None:
        """Makes the searches ``mentioning(names)`` makes, each as it would, but spread
        over the CPUs (``spread.each``): every part's places in .debug_str, then the
        places in .debug_info of those that narrow (tens of searches of 30 MB for a
        spec of 20 functions in a large Rust build)."""
        if self.elsewhere:
            return
        info = self.tree.info
        parts = sorted({p for ps in names for p in ps} - self._strings_at.keys())
        found = spread.each(parts, self._search,
                            len(parts) * self.tree.strings.str.size // spread.SEARCHED)
        self._strings_at.update(zip(parts, found, strict=True))
        wanted = sorted({p for ps in names for p in self._narrowing(ps) or ()} -
                        self._mentioned.keys())
        patterns = sorted({pattern for p in wanted for pattern in self._patterns(p)})
        hits = dict(zip(patterns, spread.each(
            patterns, lambda pattern: list(finds(info, pattern)),
            len(patterns) * len(info) // spread.SEARCHED), strict=True))
        for part in wanted:
            self._mentions(part, hits)

    def places(self, name: str) -> list[int]:
        """Where a string ``name`` ends .debug_str's strings (its possible offsets)."""
        got = self._strings_at.get(name)
        if got is None:
            got = self._strings_at[name] = self._search(name)
        return got

    def _search(self, name: str) -> list[int]:
        """``places``, searched for in .debug_str."""
        return self.tree.strings.str.places(name.encode() + b"\0")

    def _mentions(self, name: str, found: dict[bytes, list[int]] | None = None) -> set[int]:
        """The units that mention ``name`` (``mentioning``), kept; the places of each
        of its ``_patterns`` in .debug_info from ``found`` where it has them."""
        got = self._mentioned.get(name)
        if got is not None:
            return got
        info = self.tree.info
        hits: set[int] = set()
        for pattern in self._patterns(name):
            hits.update(found[pattern] if found is not None and pattern in found
                        else finds(info, pattern))
        offsets = self.places(name)
        if self.tree.strings.offsets and offsets:
            hits.update(self._by_index(offsets, self._sizes))
        got = self._mentioned[name] = {self.tree.unit_of(h) for h in hits}
        return got

    def _patterns(self, name: str) -> list[bytes]:
        """What .debug_info holds where it mentions ``name``: the offset of each of its
        places in .debug_str as a strp of any unit's size, and the name itself where
        an abbreviation allows one written in the unit."""
        out = [name.encode() + b"\0"] if self._inline_names else []
        return out + [off.to_bytes(size, "little") for off in self.places(name)
                      for size in self._sizes]

    def _by_index(self, offsets: list[int], sizes: Collection[int]) -> set[int]:
        """Units whose .debug_str_offsets contribution holds one of ``offsets`` (DWARF
        5's strx forms name a string by its index there)."""
        table = self.tree.strings.offsets
        places = sorted(p for off in offsets for size in sizes
                        for p in finds(table, off.to_bytes(size, "little")))
        if not places:
            return set()
        units_at: dict[int, list[int]] = {}  # base -> every unit with it (LTO shares one)
        for base, unit in self._str_bases():
            units_at.setdefault(base, []).append(unit)
        bases = sorted(units_at)
        out = set()
        for p in places:
            i = bisect.bisect_right(bases, p) - 1
            if i >= 0:
                out.update(units_at[bases[i]])
            else:
                out.update(self.tree.starts)  # a table no unit names: read them all
        return out

    def _str_bases(self) -> list[tuple[int, int]]:
        """(the base in .debug_str_offsets its walk reads names from, unit) of each unit
        (``Tree.top``)."""
        return [(self.tree.top(i)[1], u.at) for i, (u, _a) in enumerate(self.tree.units)]

    def referring(self, targets: Iterable[int]) -> set[int]:
        """Units not read whose bytes hold the offset of one of ``targets`` as a
        DW_FORM_ref_addr would (a superset). LLVM refers across units only within one
        object file, whose units share one abbreviation table and lie together (a
        "run"): only there is looked for a target LLVM made; everywhere for others (GCC's
        LTO refers to the units of the objects it was compiled from)."""
        if not self.cross:
            return set()
        sizes = {u.refaddr for u, _ in self.tree.units}
        starts = self.tree.starts
        where: dict[tuple[int, int], list[int]] = {}  # the bytes to search, for each target
        for t in targets:
            i = max(bisect.bisect_right(starts, t) - 1, 0)
            where.setdefault(self._runs[i] if self._llvm(i) else (0, len(self.tree.info)),
                             []).append(t)
        out: set[int] = set()
        for (lo, hi), found in where.items():
            if len(found) * len(sizes) >= _MANY:  # reading them is cheaper: every unit there
                out.update(starts[bisect.bisect_left(starts, lo):bisect.bisect_left(starts, hi)])
                continue
            for t in found:
                for size in sizes:
                    pattern = t.to_bytes(size, "little")
                    out.update(self.tree.unit_of(h)
                               for h in finds(self.tree.info, pattern, lo, hi))
        return out - self.tree.walked

    def _llvm(self, i: int) -> bool:
        """Whether LLVM made unit ``i`` (its DW_AT_producer says so)."""
        got = self._made_by.get(i)
        if got is None:
            producer = self.tree.top_string(i, AT_PRODUCER) or ""
            got = self._made_by[i] = "LLVM" in producer or "clang" in producer
        return got

