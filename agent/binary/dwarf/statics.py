"""A Rust (or C++) program's statics from its DWARF: every ``DW_TAG_variable`` at a
unit's top level or inside its namespaces (Rust writes a function's ``static`` in a
namespace named after the function: ``…::deref::__stability::LAZY``), with its
qualified name, its type's DIE and its link-time address. Read from the raw bytes of
the units asked for (``units``), not through pyelftools: a variable's own DIE is all
that is kept.

A static the linker dropped keeps its DIE with address 0: it is left out.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from agent.binary.dwarf import scan
from agent.binary.elf import uleb128

_VARIABLE, _NAMESPACE = 0x34, 0x39
_AT_TYPE, _AT_LOCATION = 0x49, 0x02
_OP_ADDR = 0x03
_UNIT_TAGS = frozenset({0x11, 0x41, 0x3C})


@dataclass(frozen=True, slots=True)
class Static:
    name: str  # qualified: namespaces joined with ``::``
    die: int  # the variable's DIE offset
    type: int  # its type's DIE offset (-1: none said)
    address: int  # link-time


def statics(info: bytes, abbrev: bytes, strs: bytes, units: Iterable[int] | None = None
            ) -> list[Static]:
    """The statics of the units at ``units`` (every unit: None) with an address of their
    own (a ``DW_OP_addr`` location). ValueError for a form it does not read."""
    wanted = None if units is None else set(units)
    out: list[Static] = []
    tables: dict[int, dict[int, tuple[int, bool, tuple[tuple[int, int], ...]]]] = {}
    for u, abbrev_at in scan._units(info):
        if wanted is not None and u.at not in wanted:
            continue
        table = tables.get(abbrev_at)
        if table is None:
            table = tables[abbrev_at] = scan._abbrevs(abbrev, abbrev_at)
        _unit(info, strs, u, table, out)
    return out


def _unit(info: bytes, strs: bytes, u: scan._Unit,
          table: dict[int, tuple[int, bool, tuple[tuple[int, int], ...]]],
          out: list[Static]) -> None:
    # The scopes open above the DIE being read: each a namespace's name, or None for
    # any other DIE with children (whose variables are locals, not statics).
    scopes: list[str | None] = []
    pos = u.first
    end = u.end
    skip = scan._skip
    while pos < end:
        at = pos
        code, pos = uleb128(info, pos)
        if code == 0:
            if scopes:
                scopes.pop()
            continue
        tag, children, specs = table[code]
        inside = all(s is not None for s in scopes[1:])  # the unit, then namespaces only
        if inside and tag in (_VARIABLE, _NAMESPACE):
            name, type_, address = None, -1, 0
            for attr_, form in specs:
                while form == 0x16:
                    form, pos = uleb128(info, pos)
                if attr_ == scan.AT_NAME:
                    if form == 0x08:
                        stop = info.index(b"\0", pos)
                        name = info[pos:stop].decode("utf-8", "replace")
                    elif form == 0x0E:
                        off = int.from_bytes(info[pos:pos + u.osize], "little")
                        name = strs[off:strs.index(b"\0", off)].decode("utf-8", "replace")
                elif attr_ == _AT_TYPE:
                    got = scan._ref(info, pos, form, u)
                    type_ = -1 if got is None else got
                elif attr_ == _AT_LOCATION and form in (0x18, 0x0A):  # exprloc, block1
                    n, start = (uleb128(info, pos) if form == 0x18 else (info[pos], pos + 1))
                    if n == 1 + u.asize and info[start] == _OP_ADDR:
                        address = int.from_bytes(info[start + 1:start + 1 + u.asize],
                                                 "little")
                pos = skip(info, pos, form, u)
            if tag == _VARIABLE and name and address:
                prefix = "".join(s + "::" for s in scopes[1:] if s)
                out.append(Static(prefix + name, at, type_, address))
            if children:
                scopes.append(name or "" if tag == _NAMESPACE else None)
            continue
        for _attr, form in specs:
            pos = skip(info, pos, form, u)
        if children:
            scopes.append("" if tag in _UNIT_TAGS else None)

