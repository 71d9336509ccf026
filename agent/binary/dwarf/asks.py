"""Questions answered from the units a Tree reads: the functions and types of a
name (from the units that mention it), every inlined copy of a function (through the
units that refer to it), in the order and with the answers a walk of every unit
gives.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Collection, Iterable
from itertools import pairwise

from agent.binary.dwarf import native
from agent.binary.dwarf.kept import NO_NAME
from agent.binary.dwarf.steps import (
    DECLARED,
    INLINED,
    PARENT,
    SCOPES,
    SUBPROGRAM,
    TYPES,
    UNIT_TAGS,
)
from agent.binary.dwarf.tree import Tree


def keys(tree: Tree, names: Collection[tuple[str, ...]], keep: Callable[[str], bool],
         nested: bool = True, own: bool = False) -> dict[str, list[int]]:
    """The name-holding function DIEs (no abstract_origin or specification of their
    own) whose qualified name ``keep`` accepts, by that name, in the units that
    mention one of ``names`` (``mentioning``): every such function whose own name
    (DW_AT_name) and the scopes around it name all parts of one of ``names``. With
    ``own``, the last part of each is the function's own name (only DIEs so named
    are asked about)."""
    units = tree.mentions.mentioning(names)
    tree.walk(units)
    chosen = set(tree.walked if units is None else units)
    owns = {parts[-1] for parts in names if parts}
    if own:  # the subprograms so named, through the index of names
        candidates = sorted(
            {at for n in owns for place in tree.mentions.places(n)
             for at in tree.named.get(place, ())} |
            {at for code, ats in tree.named.items() if code < 0 for at in ats
             if tree.name(at) in owns})
    else:
        candidates = [at for at, tag, name in tree.kept.items(sorted(chosen))
                      if tag & 0xFFFF == SUBPROGRAM and name != NO_NAME
                      and tree.kept.ref(at) < 0]
    out: dict[str, list[int]] = {}
    mine = [at for at in candidates if tree.unit_of(at) in chosen]
    named = tree.names_of(mine, nested)
    for at in mine:
        if keep(named[at]):
            out.setdefault(named[at], []).append(at)
    return out


def prefetch(tree: Tree, names: Collection[tuple[str, ...]]) -> None:
    """Reads at once what ``keys`` reads for each of ``names`` alone (their searches and
    their units spread over the CPUs), so that the questions that follow, one name at a
    time, are answered from what was read."""
    tree.walk(tree.mentions.mentioning(names))


def types(tree: Tree, names: Collection[tuple[str, ...]] | None,
          language: Callable[[int], str]) -> list[tuple[str, int, int, bool]]:
    """``types_in`` of each unit that mentions one of ``names`` (``mentioning``;
    every unit: None), in file order."""
    units = None if names is None else tree.mentions.mentioning(names)
    tree.walk(units)
    return [t for unit in sorted(tree.walked if units is None else units)
            for t in types_in(tree, unit, language(unit))]


def types_in(tree: Tree, unit: int, language: str) -> list[tuple[str, int, int, bool]]:
    """(qualified name, tag, offset, has children) of every named type definition
    (``TYPES``, not DW_AT_declaration) of unit ``unit`` at its top level or in named
    namespaces and types, as a walk of the unit's children finds them. Go's names
    are whole (nothing nested is read), Rust's and C++'s join with ``::``, others'
    with ``.``."""
    tree.walk([unit])
    sep = "::" if language in ("rust", "c++") else "."
    prefixes: dict[int, str | None] = {}
    out: list[tuple[str, int, int, bool]] = []
    for at, flagged, code in tree.kept.items([unit]):
        tag = flagged & 0xFFFF
        if tag not in TYPES or flagged & DECLARED or code == NO_NAME:
            continue
        own = tree.name(at)
        if not own:  # an empty name, as none (a walk of the children skips both)
            continue
        prefix = _type_scope(tree, tree.kept[at][1], language == "go", sep, prefixes)
        if prefix is not None:
            out.append((prefix + own, tag, at, bool(flagged & PARENT)))
    return out


def _type_scope(tree: Tree, offset: int, whole: bool, sep: str, memo: dict[int, str | None]
                ) -> str | None:
    """The prefix of the name of a type in the DIE at ``offset`` ("" at a unit's top
    level); None when a walk of the unit's children does not reach it (an unnamed
    scope, a function, anything nested in Go)."""
    if offset in memo:
        return memo[offset]
    entry = tree.kept.get(offset)
    got: str | None = None
    if entry is not None and entry[0] in UNIT_TAGS:
        got = ""
    elif entry is not None and not whole and entry[0] in SCOPES and tree.name(offset):
        outer = _type_scope(tree, entry[1], whole, sep, memo)
        got = None if outer is None else f"{outer}{tree.name(offset)}{sep}"
    memo[offset] = got
    return got


def reach(tree: Tree, keys: Collection[int]) -> None:
    """Reads the units holding ``keys`` and every unit that refers to them, or to a
    function DIE that does, until no new one turns up: then ``index`` has every
    inlined copy of them."""
    tree.walk({tree.unit_of(k) for k in keys})
    seen = set(keys)
    frontier = set(keys)
    while frontier:
        # an inlined copy is no step to another: nothing refers to it
        tree.walk(tree.mentions.referring(d for d in frontier if tree.kept[d][0] != INLINED))
        frontier = set(_referring(tree, frontier)) - seen
        seen |= frontier


def _referring(tree: Tree, targets: Collection[int]) -> Iterable[int]:
    """The kept DIEs of the units walked that refer to one of ``targets``."""
    if tree.native:
        found = array("Q")
        found.frombytes(native.referring(array("Q", sorted(targets)), *tree.referring()))
        return found
    referrers = tree.referrers()
    return (d for t in targets for d in referrers.get(t, ()))


def index(tree: Tree, keys: Collection[int]) -> dict[int, list[int]]:
    """The inlined copies read so far, in offset order, by the name-holding DIE (of
    ``keys``) their origins lead to."""
    if tree.native:
        return _index_native(tree, set(keys))
    referrers = tree.referrers()
    out: dict[int, list[int]] = {}
    for key in set(keys):
        found: set[int] = set()
        frontier = {key}
        for _ in range(4):  # origin() follows four steps
            frontier = {d for t in frontier for d in referrers.get(t, ())} - found
            found |= frontier
        copies = sorted(d for d in found if tree.kept[d][0] == INLINED
                        and tree.origin(d) == key)
        if copies:
            out[key] = copies
    return out


def _index_native(tree: Tree, keys: set[int]) -> dict[int, list[int]]:
    """``index``, its searches in C: the DIEs referring to any of ``keys`` in four
    steps, then each inlined copy among them followed to its function (a copy whose
    origin is one of ``keys`` is within four steps of it: ``origin`` follows four)."""
    found: set[int] = set()
    frontier = set(keys)
    for _ in range(4):
        frontier = set(_referring(tree, frontier)) - found
        found |= frontier
    copies = array("Q", sorted(d for d in found if tree.kept[d][0] == INLINED))
    raw_copies, raw_keys = native.origins(copies, *tree.referring(),
                                          array("Q", (0, 1 << 63)))
    out: dict[int, list[int]] = {}
    for copy, key in zip(array("Q", raw_copies), array("q", raw_keys), strict=True):
        if key in keys:
            out.setdefault(key, []).append(copy)
    return out


def whole_index(tree: Tree, nested: bool | None = None) -> dict[int, list[int]]:
    """Every unit read: the offsets of every inlined copy, in file order, by the DIE
    its origin leads to (``origin``). None to read where no abbreviation can make an
    inlined copy (a C program built without inlining across its functions). With
    ``nested``, each of those DIEs is named too (``Tree.names_of``: kept for the
    question that follows), by the process that walked its unit."""
    if not any(tag == INLINED for at in {at for _u, at in tree.units}
               for tag, _children, _specs in tree.table(at).values()):
        return {}
    parts = tree.walk_then(lambda t, part: _copies(t, part, nested))
    copies, keys = array("Q"), array("q")
    for got, got_keys, names in parts:
        copies.extend(got)
        keys.extend(got_keys)
        tree.remember_names(names, bool(nested))
    pairs: Iterable[tuple[int, int]] = zip(copies, keys, strict=True)
    ends = [(got[0], got[-1]) for got, _k, _n in parts if got]
    if any(last > first for (_f, last), (first, _l) in pairwise(ends)):
        pairs = sorted(pairs)  # units read before, then the rest: in file order again
        copies, keys = array("Q", (a for a, _k in pairs)), array("q", (k for _a, k in pairs))
    if tree.native:
        return native.group(copies, keys, tree.origin)
    out: dict[int, list[int]] = {}
    for at, key in pairs:
        if key < 0:  # its chain left the units the child had: followed here
            key = tree.origin(at)
        out.setdefault(key, []).append(at)
    return out


def _copies(tree: Tree, part: list[int], nested: bool | None
            ) -> tuple[array[int], array[int], dict[int, str]]:
    """The inlined copies of the units ``part`` and the DIE each one's origin leads to
    (-1: through a unit not in ``part``, followed when all are read), and with
    ``nested`` those DIEs' names."""
    if tree.native:
        copies, keys = _origins(tree, part)
    else:
        copies, keys = _origins_python(tree, part)
    names = tree.names_of({k for k in keys if k >= 0}, nested) if nested is not None else {}
    return copies, keys, names


def _origins(tree: Tree, part: list[int]) -> tuple[array[int], array[int]]:
    """``_origins_python`` in C (``_walk.c``)."""
    starts, ranges = tree.starts, array("Q")
    for unit in sorted(part):
        i = bisect_left(starts, unit)
        ranges.extend((unit, starts[i + 1] if i + 1 < len(starts) else len(tree.info)))
    got_copies, got_keys = native.origins(tree.inlined, *tree.referring(part), ranges)
    copies, keys = array("Q"), array("q")
    copies.frombytes(got_copies)
    keys.frombytes(got_keys)
    return copies, keys


def _origins_python(tree: Tree, part: list[int]) -> tuple[array[int], array[int]]:
    """The inlined copies of the units ``part`` and the DIE each one's origin leads to
    (-1: through a unit not in ``part``)."""
    starts = tree.starts
    i = bisect_left(starts, part[0]) if part else 0
    if starts[i:i + len(part)] == part:  # a run of units: one comparison says if in it
        lo, hi = (part[0], starts[i + len(part)] if i + len(part) < len(starts)
                  else len(tree.info)) if part else (0, 0)

        def mine(o: int) -> bool:
            return lo <= o < hi
    else:
        units = set(part)

        def mine(o: int) -> bool:
            return starts[bisect_right(starts, o) - 1] in units
    refs: dict[int, int] = {}
    for unit in part:
        refs.update(tree.kept.refs(unit))
    copies, keys = array("Q", [at for at in tree.inlined if mine(at)]), array("q")
    get, append = refs.get, keys.append
    for at in copies:
        key = at
        for _ in range(4):  # origin(): four steps at most
            nxt = get(key, -1)
            if nxt < 0:
                break
            key = nxt
        append(key if mine(key) else -1)
    return copies, keys


def subprogram_at(tree: Tree, unit: int, address: int) -> int | None:
    """The first subprogram DIE of unit ``unit``, at its top level or in namespaces
    and types, whose code starts at ``address``; None when there is none; -1 when
    the unit gives a start in a form this does not read."""
    tree.walk([unit])
    if unit in tree.odd:
        return -1
    for at in tree.starting(unit, address):
        parent = tree.kept[at][1]
        while parent >= 0 and tree.kept[parent][0] in SCOPES:
            parent = tree.kept[parent][1]
        if parent >= 0 and tree.kept[parent][0] in UNIT_TAGS:
            return at
    return None
