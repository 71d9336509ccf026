"""Find a named type's DIE: exact names as the binary has them, with an index cached by build-id.

Names: Go ``github.com/prometheus/client_golang/prometheus.counter``; Rust and C++
``crate::module::Type``; C ``job`` or ``struct job`` for ``struct job``.

The index is read from the raw bytes where the scan can read them, else from each
unit's DIEs as pyelftools reads them (Go's types units first).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator

from elftools.dwarf.compileunit import CompileUnit
from elftools.dwarf.die import DIE
from elftools.dwarf.enums import ENUM_DW_TAG

from agent import cache
from agent.binary.dwarf import asks, scan
from agent.binary.dwarf.damage import SCAN_ERRORS
from agent.binary.dwarf.dies import NAMESPACE_TAGS, attr, die_name
from agent.binary.dwarf.listing import name_parts
from agent.binary.dwarf.reader import Dwarf
from agent.binary.dwarf.sections import section_bytes
from agent.binary.dwarf.writer import TYPES_UNIT
from agent.errors import NotFound

_AGGREGATES = frozenset({"DW_TAG_structure_type", "DW_TAG_union_type", "DW_TAG_class_type"})
_AGGREGATE_TAGS = frozenset({0x13, 0x17, 0x02})  # the same, as numbers
_TAG_NUMBERS = {"struct": 0x13, "union": 0x17, "class": 0x02, "enum": 0x04}
_KEYWORDS = ("struct ", "union ", "class ", "enum ")
GO_TYPES = "go-types-v2"  # the index of Go's types units (v2: every unit named runtime)
_cached_index = cache.shaped(dict[str, list[int]])  # an index as the cache keeps it
TYPE_TAGS = frozenset({
    "DW_TAG_structure_type", "DW_TAG_union_type", "DW_TAG_class_type", "DW_TAG_typedef",
    "DW_TAG_base_type", "DW_TAG_enumeration_type", "DW_TAG_pointer_type",
    "DW_TAG_array_type", "DW_TAG_subroutine_type",
})
_TAG_NAMES = {v: k for k, v in ENUM_DW_TAG.items()}


def _index(dwarf: Dwarf, complete: bool) -> dict[str, list[int]]:
    """Named types -> DIE offsets (aggregates first), from cache or a scan.

    For Go the first index covers only the unit that holds Go's types (``runtime``):
    the others hold thousands of functions whose DIEs would take seconds to walk. A
    miss of a C type (cgo's) there asks for the ``complete`` index, which walks every
    unit once.
    """
    bid = dwarf.cache_id
    key = "complete" if complete or dwarf.language != "go" else GO_TYPES
    if key in dwarf.type_indexes:  # read once per open binary: a plan looks up dozens
        return dwarf.type_indexes[key]
    cached = cache.get(bid, "types", key, load=_cached_index)
    if cached is not None:
        dwarf.type_indexes[key] = cached
        return cached
    index = _from_tree(dwarf, None) if key != GO_TYPES else None
    if index is not None:
        cache.put(bid, "types", key, index)
        dwarf.type_indexes[key] = index
        return index
    index = {}
    units = go_type_units(dwarf) if key == GO_TYPES else list(type_units(dwarf))
    for cu in list(units) if key == GO_TYPES else []:
        fast = top_types(dwarf, cu)
        if fast is None:
            continue
        for name, tag, offset in fast:  # Go's types unit, read from the raw bytes
            _add(index, name, offset, tag in _AGGREGATES)
        units.remove(cu)
    for cu in units:
        for name, die in iter_named_types(dwarf, cu):
            if attr(die, "DW_AT_declaration"):
                continue  # an incomplete C type: the definition lives elsewhere
            _add(index, name, die.offset, die.tag in _AGGREGATES)
    cache.put(bid, "types", key, index)
    dwarf.type_indexes[key] = index
    return index


def _from_tree(dwarf: Dwarf, names: set[tuple[str, ...]] | None
               ) -> dict[str, list[int]] | None:
    """The index of named types (``_index``'s, in its order) from the tree, of the
    units that mention one of ``names`` (every unit: None); None when the tree cannot
    read them."""
    ok, found = dwarf.ask(lambda t: asks.types(t, names, dwarf.language_of))
    return _indexed(found) if ok and found is not None else None


def _indexed(found: list[tuple[str, int, int, bool]]) -> dict[str, list[int]]:
    """Named types (in file order) -> offsets, aggregates first, the last first."""
    index: dict[str, list[int]] = {}
    for qualified, tag, offset, _children in found:
        _add(index, qualified, offset, tag in _AGGREGATE_TAGS)
    return index


def _add(index: dict[str, list[int]], name: str, offset: int, aggregate: bool) -> None:
    """A type into the index in the order lookups rank: aggregates first, the last
    seen first; others after them, in order."""
    offs = index.setdefault(name, [])
    if aggregate:
        offs.insert(0, offset)
    else:
        offs.append(offset)


def _alone(dwarf: Dwarf, name: str) -> DIE | None:
    """Type ``name`` from the units that mention every part of it, the last first: the
    whole index's answer is the last definition with members of the tag asked for, so
    the first unit from the end that has one ends the search (a C type written in each
    of 1,600 units is one unit's walk). None when not found there, or not readable."""
    bare = name.strip()
    keyword = next((k for k in _KEYWORDS if bare.startswith(k)), "")
    bare = bare[len(keyword):].strip()
    tag = _TAG_NUMBERS.get(keyword.strip())
    ok, units = dwarf.ask(lambda t: t.mentions.mentioning({name_parts(bare),
                                                   (bare.rsplit(".", 1)[-1],)}))
    if not ok or units is None:
        return None
    found: list[tuple[str, int, int, bool]] = []
    for unit in sorted(units, reverse=True):
        ok, got = dwarf.ask(functools.partial(asks.types_in, unit=unit,
                                              language=dwarf.language_of(unit)))
        if not ok or got is None:
            return None
        found[:0] = got
        if any(n == bare and t in _AGGREGATE_TAGS and children and (tag is None or t == tag)
               for n, t, _o, children in got):
            break
    return _lookup(dwarf, name, _indexed(found))


def find_type(dwarf: Dwarf, name: str) -> DIE:
    """The type DIE named ``name``, preferring a definition with members. Rust's and
    C's: first from the units that mention its name alone (every unit is read for a
    miss, which suggests names)."""
    if dwarf.language != "go" and not dwarf.type_indexes:
        die = _alone(dwarf, name)
        if die is not None:
            return die
    index = _index(dwarf, complete=False)
    die = _lookup(dwarf, name, index)
    # Go's linker writes every Go type in one unit, noop's DWARF from metadata too: the
    # others hold only cgo's C types, whose names have no package.
    if die is None and dwarf.language == "go" and not dwarf.from_metadata and \
            "." not in name:
        index = _index(dwarf, complete=True)
        die = _lookup(dwarf, name, index)
    if die is None:
        raise NotFound("type", name, index)
    return die


def _lookup(dwarf: Dwarf, name: str, index: dict[str, list[int]]) -> DIE | None:
    wanted = name.strip()
    keyword = next((k for k in _KEYWORDS if wanted.startswith(k)), "")
    bare = wanted[len(keyword):].strip()
    for candidate in (wanted, bare):
        offsets = index.get(candidate)
        if offsets:
            dies = [dwarf.die_at(o) for o in offsets]
            if keyword:
                tag = "DW_TAG_" + keyword.strip() + "_type"
                dies = [d for d in dies if d.tag == tag] or dies
            return max(dies, key=lambda d: (d.tag in _AGGREGATES, d.has_children))
    return None


# -- each unit's types, where the index is not read from the tree ---------------------


def type_units(dwarf: Dwarf) -> Iterator[CompileUnit]:
    """Units in the order types are most likely found: Go's in ``go_type_units``."""
    first = go_type_units(dwarf) if dwarf.language == "go" else []
    yield from first
    yield from (cu for cu in dwarf.units if cu not in first)


def go_type_units(dwarf: Dwarf) -> list[CompileUnit]:
    """The units that hold a Go program's types: noop's "go.types" in DWARF made
    from metadata; else those named ``runtime``, where the linker writes them (the
    last of them, or, with cgo, another), the largest first."""
    names = [(cu, die_name(cu.get_top_DIE())) for cu in dwarf.units]
    made = [cu for cu, n in names if n == TYPES_UNIT]
    return made[:1] or sorted((cu for cu, n in names if n == "runtime"),
                              key=lambda cu: -cu["unit_length"])


def top_types(dwarf: Dwarf, cu: CompileUnit) -> list[tuple[str, str, int]] | None:
    """(name, tag, offset) of the named type definitions directly under ``cu`` as
    ``scan`` reads them from the raw bytes (what ``iter_named_types`` yields for a Go
    unit, without a DIE object each); None when the scan cannot read them."""
    strs = dwarf.info.debug_str_sec
    try:
        info, abbrev = dwarf.raw
        got = scan.top_types(info, abbrev, cu.cu_offset,
                             frozenset(ENUM_DW_TAG[t] for t in TYPE_TAGS),
                             section_bytes(strs) if strs is not None else b"")
    except SCAN_ERRORS:
        return None
    return [(name, _TAG_NAMES[tag], offset) for name, tag, offset in got]


def iter_named_types(dwarf: Dwarf, cu: CompileUnit) -> Iterator[tuple[str, DIE]]:
    """(qualified name, DIE) for every named type at top level or inside namespaces."""
    lang = dwarf.unit_language(cu)
    sep = "::" if lang in ("rust", "c++") else "."

    def walk(parent: DIE, prefix: str) -> Iterator[tuple[str, DIE]]:
        for die in parent.iter_children():
            name = die_name(die)
            if die.tag in TYPE_TAGS and name:
                yield (prefix + name if lang != "go" else name), die
            if die.tag in NAMESPACE_TAGS and name and lang != "go" and die.has_children:
                yield from walk(die, prefix + name + sep)

    yield from walk(cu.get_top_DIE(), "")
