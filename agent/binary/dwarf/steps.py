"""How a Tree walks the DIEs of each abbreviation: which DIEs it keeps (scope-like
ones, functions and their inlined copies, named types) and, of each kept DIE, the
attributes it reads (a name, a function's abstract_origin or specification, a unit's
string base, a subprogram's low_pc, DW_AT_declaration), as a plan per abbreviation
code so that a DIE with nothing to read is skipped by one addition.
"""

from __future__ import annotations

import struct

from agent.binary.dwarf import scan

SUBPROGRAM, INLINED = 0x2E, 0x1D
UNIT_TAGS = frozenset({0x11, 0x41, 0x3C})  # compile, skeleton-less type, partial unit
# Function-like DIEs whose reference is kept (a variable's abstract_origin is not).
REFERRING = frozenset({SUBPROGRAM, INLINED})
# DIEs kept even without children: what a function's name or a copy's place needs.
# Named types (struct, union, class, typedef, base, enum, pointer, array, subroutine).
TYPES = frozenset({0x13, 0x17, 0x02, 0x16, 0x24, 0x04, 0x0F, 0x01, 0x15})
KEPT = frozenset({SUBPROGRAM, INLINED, 0x0B, 0x39}) | TYPES
AT_DECLARATION = 0x3C
DECLARED = 1 << 16  # a kept DIE's tag with this bit: it has DW_AT_declaration
PARENT = 1 << 17  # ... with this one: it has children
AT_LOW_PC = 0x11
SCOPES = frozenset({0x39, 0x13, 0x02, 0x17, 0x04})  # namespace, struct, class, union, enum

U32, U64 = struct.Struct("<I").unpack_from, struct.Struct("<Q").unpack_from
Plan = tuple[int, bool, int, tuple[tuple[int, int, int, int], ...], int, bool]
SKIP, NAME, ORIGIN, SPEC, BASE, LOW, DECL = range(7)  # what a step does with it


def plans(table: dict[int, tuple[int, bool, tuple[tuple[int, int], ...]]], u: scan._Unit,
          memo: dict[tuple[object, ...], Plan] | None = None) -> dict[int, Plan]:
    """code -> (tag, children, size or -1, steps, bytes after the last step, kept): a
    DIE of a fixed size with nothing to read in it is skipped by one addition; else each
    step (bytes before it, what to do, form, its size or -1) is an attribute of a size
    that varies, or one to read (a kept DIE's name, a function's reference, a unit's
    string base). ``memo`` keeps each abbreviation's plan for the next table that has
    it (GCC writes a table a unit, most of their abbreviations alike)."""
    memo = {} if memo is None else memo
    shape = (u.osize, u.asize, u.refaddr)
    out: dict[int, Plan] = {}
    for code, entry in table.items():
        key = (entry, shape)
        got = memo.get(key)
        if got is None:
            got = memo[key] = _plan(*entry, u)
        out[code] = got
    return out


def _plan(tag: int, children: bool, specs: tuple[tuple[int, int], ...], u: scan._Unit
          ) -> Plan:
    kept = children or tag in KEPT
    steps: list[tuple[int, int, int, int]] = []
    run = 0
    for attr_, form in specs:
        role = NAME if kept and attr_ == scan.AT_NAME else \
            ORIGIN if tag in REFERRING and attr_ == scan.AT_ABSTRACT_ORIGIN else \
            SPEC if tag in REFERRING and attr_ == scan.AT_SPECIFICATION else \
            BASE if tag in UNIT_TAGS and attr_ == scan.AT_STR_OFFSETS_BASE else \
            LOW if tag == SUBPROGRAM and attr_ == AT_LOW_PC else \
            DECL if kept and attr_ == AT_DECLARATION else SKIP
        size = scan.fixed_size(form, u)
        if size is None or role != SKIP:
            steps.append((run, role, form, -1 if size is None else size))
            run = 0
        else:
            run += size
    return (tag, children, -1 if steps else run, tuple(steps), run, kept)


class Reading:
    """What reading a unit's attributes needs of it: its header, how a section offset
    and a DW_FORM_ref_addr are read, and its base in .debug_str_offsets (its own DIE
    sets it)."""

    __slots__ = ("refaddr", "str_base", "u", "word")

    def __init__(self, u: scan._Unit) -> None:
        self.u = u
        self.word = U32 if u.osize == 4 else U64  # a section offset (strp, sec_offset)
        self.refaddr = U32 if u.refaddr == 4 else U64 if u.refaddr == 8 else None
        self.str_base = 8 if u.osize == 4 else 16

