"""Find a named type's DIE: exact names as the binary has them, with an index cached by build-id.

Names: Go ``github.com/prometheus/client_golang/prometheus.counter``; Rust and C++
``crate::module::Type``; C ``job`` or ``struct job`` for ``struct job``.
"""

from __future__ import annotations

import functools

from elftools.dwarf.die import DIE

from agent import cache
from agent.binary.dwarf import asks
from agent.binary.dwarf.listing import name_parts
from agent.binary.dwarf.reader import Dwarf, attr
from agent.errors import NotFound

_AGGREGATES = frozenset({"DW_TAG_structure_type", "DW_TAG_union_type", "DW_TAG_class_type"})
_AGGREGATE_TAGS = frozenset({0x13, 0x17, 0x02})  # the same, as numbers
_TAG_NUMBERS = {"struct": 0x13, "union": 0x17, "class": 0x02, "enum": 0x04}
_KEYWORDS = ("struct ", "union ", "class ", "enum ")
GO_TYPES = "go-types-v2"  # the index of Go's types units (v2: every unit named runtime)
_cached_index = cache.shaped(dict[str, list[int]])  # an index as the cache keeps it


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
    units = dwarf.go_type_units() if key == GO_TYPES else list(dwarf.type_units())
    for cu in list(units) if key == GO_TYPES else []:
        fast = dwarf.top_types(cu)
        if fast is None:
            continue
        for name, tag, offset in fast:  # Go's types unit, read from the raw bytes
            _add(index, name, offset, tag in _AGGREGATES)
        units.remove(cu)
    for cu in units:
        for name, die in dwarf.iter_named_types(cu):
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
