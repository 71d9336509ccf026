"""Find a named type's DIE: exact names as the binary has them, with an index cached by build-id.

Names: Go ``github.com/prometheus/client_golang/prometheus.counter``; Rust and C++
``crate::module::Type``; C ``job`` or ``struct job`` for ``struct job``.
"""

from __future__ import annotations

from elftools.dwarf.die import DIE

from agent import cache
from agent.errors import NotFound
from agent.target.dwarf.reader import Dwarf, attr

_AGGREGATES = frozenset({"DW_TAG_structure_type", "DW_TAG_union_type", "DW_TAG_class_type"})
_KEYWORDS = ("struct ", "union ", "class ", "enum ")
_cached_index = cache.shaped(dict[str, list[int]])  # an index as the cache keeps it


def _index(dwarf: Dwarf, complete: bool) -> dict[str, list[int]]:
    """Named types -> DIE offsets (aggregates first), from cache or a scan.

    For Go the first index covers only the units that hold types (``runtime``): the
    others hold thousands of functions whose DIEs would take seconds to walk. A miss
    there asks for the ``complete`` index, which walks every unit once.
    """
    bid = dwarf.cache_id
    key = "complete" if complete or dwarf.language != "go" else "go-types"
    if key in dwarf.type_indexes:  # read once per open binary: a plan looks up dozens
        return dwarf.type_indexes[key]
    cached = cache.get(bid, "types", key, load=_cached_index)
    if cached is not None:
        dwarf.type_indexes[key] = cached
        return cached
    index: dict[str, list[int]] = {}
    units = list(dwarf.type_units())
    if key == "go-types":
        units = units[:1]
    fast = dwarf.top_types(units[0]) if key == "go-types" and units else None
    if fast is not None:  # Go's types unit, read from the raw bytes
        for name, tag, offset in fast:
            offs = index.setdefault(name, [])
            if tag in _AGGREGATES:
                offs.insert(0, offset)
            else:
                offs.append(offset)
        units = []
    for cu in units:
        for name, die in dwarf.iter_named_types(cu):
            if attr(die, "DW_AT_declaration"):
                continue  # an incomplete C type: the definition lives elsewhere
            offs = index.setdefault(name, [])
            if die.tag in _AGGREGATES:
                offs.insert(0, die.offset)
            else:
                offs.append(die.offset)
    cache.put(bid, "types", key, index)
    dwarf.type_indexes[key] = index
    return index


def find_type(dwarf: Dwarf, name: str) -> DIE:
    """The type DIE named ``name``, preferring a definition with members."""
    index = _index(dwarf, complete=False)
    die = _lookup(dwarf, name, index)
    if die is None and dwarf.language == "go":
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
