"""The fast scan of .debug_info for inlined copies against pyelftools' full walk: the
same copies of the same functions, on every kind of binary the tests build (Go by two
compilers, Rust, C by GCC and by clang, whose DWARF 5 uses the indexed forms)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from elftools.dwarf.die import DIE

from agent.binary.dwarf import lookup, scan
from agent.binary.dwarf.dies import die_name
from agent.binary.dwarf.reader import open_dwarf
from agent.binary.dwarf.tree import Tree


def _both(binary: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fast = open_dwarf(binary).inlined_index()

    def refuse(*_a: object) -> list[int]:
        raise ValueError("the full walk, please")

    with monkeypatch.context() as m:
        m.setattr(Tree, "walk", refuse)
        m.setattr(Tree, "walk_then", refuse)
        slow = open_dwarf(binary).inlined_index()
    assert fast == slow


def test_the_scan_on_go(example: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _both(example, monkeypatch)
    assert sum(map(len, open_dwarf(example).inlined_index().values())) > 1000


@pytest.mark.parametrize("which", ["rust_layouts", "rust_dropped", "c_layouts_o2",
                                   "c_dropped_clang"])
def test_the_scan_finds_what_the_full_walk_finds(which: str, request: pytest.FixtureRequest,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    _both(request.getfixturevalue(which), monkeypatch)


def test_an_unknown_form_is_refused_not_guessed() -> None:
    """A unit whose abbreviation uses a form the scan does not know: ValueError (the
    caller falls back to the full walk), never a wrong skip."""
    abbrev = bytes([1, 0x11, 0, 0x03, 0x7F, 0, 0, 0])  # code 1: compile_unit, form 0x7f
    unit = bytes([4, 0, 0, 0, 0, 0, 8, 1, 0xAA])  # v4, abbrev 0, 8-byte addresses, DIE 1
    info = len(unit).to_bytes(4, "little") + unit
    with pytest.raises(ValueError, match="form 0x7f"):
        Tree(info, abbrev, scan.Strings()).walk()


def test_the_frame_of_a_pc_as_the_full_list_has_it(example: Path) -> None:
    """The FDE found by scanning .debug_frame's headers gives the same canonical frame
    address as pyelftools' full list, at many points of many functions, and none
    past the last function."""
    d = open_dwarf(example).frames
    fdes = d._fdes  # the full list: what the scan must agree with
    pcs = [lo + (hi - lo) // 3 for lo, hi, _ in fdes[::97]] + [lo for lo, _, _ in fdes[::131]]
    for pc in pcs:
        fde = next(f for lo, hi, f in fdes if lo <= pc < hi)
        assert d._fde_at(pc).offset == fde.offset, hex(pc)
    assert d._fde_at(fdes[-1][1] + 100) is None
    assert scan.fde_offset(b"\xff\xff\xff\xff" + bytes(20), 0) == -1  # 64-bit DWARF: not read


@pytest.mark.builds  # compiles the lines program
@pytest.mark.parametrize("build", ["rust-release", "gcc-O2", "clang-O2"])
def test_the_frame_of_a_pc_by_eh_frame_hdr_as_the_full_list_has_it(
        build: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    """In a binary whose call frames are in .eh_frame only (Rust, C), the FDE that
    .eh_frame_hdr's search table finds is the full list's, at the start, inside and at
    the end of many functions, with the same canonical frame address rules; none below
    the first function or past the last; a header in another encoding is not read."""
    from conftest import _native
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from agent.binary.dwarf.frames import eh_fde_offset

    _lang, binary = _native(tmp_path_factory, build, "lines")
    frames = open_dwarf(binary).frames
    fdes = frames._fdes  # the full list
    assert fdes and frames._eh_index is not None

    @settings(max_examples=300, deadline=None, derandomize=True, database=None)
    @given(st.integers(0, len(fdes) - 1), st.floats(0, 1, exclude_max=True))
    def same(i: int, where: float) -> None:
        lo, hi, fde = fdes[i]
        pc = lo + int((hi - lo) * where)
        said, got = frames._eh_fde_at(pc)
        assert said and got is not None and got.offset == fde.offset, hex(pc)
        assert frames._cfa_rule(pc) == _rule(fde, pc)

    same()
    assert frames._eh_fde_at(fdes[-1][1] + 100) == (True, None)
    assert frames._eh_fde_at(0) == (True, None)
    address, hdr = frames._eh_index
    assert eh_fde_offset(hdr[:3] + b"\x1b" + hdr[4:], address, fdes[0][0]) == -1


def _rule(fde: Any, pc: int) -> tuple[str, int] | None:
    """The CFA rule at ``pc`` by the full list's own decoding (None where pyelftools
    cannot decode the entry's instructions: noop says it is not described)."""
    from agent.binary.amd64 import DWARF_REGS

    rule = None
    try:
        table = fde.get_decoded().table
    except ValueError:
        return None
    for row in table:
        if row["pc"] > pc:
            break
        rule = row.get("cfa")
    return None if rule is None or rule.expr is not None else (DWARF_REGS[rule.reg],
                                                               int(rule.offset))


def test_go_type_names_as_the_full_walk_has_them(example: Path) -> None:
    """Go's types unit, read from the raw bytes: every named type definition directly
    under it, with its tag and offset, as pyelftools' walk yields them."""
    d = open_dwarf(example)
    cu = next(iter(lookup.type_units(d)))
    slow = [(name, die.tag, die.offset) for name, die in lookup.iter_named_types(d, cu)
            if not die.attributes.get("DW_AT_declaration")]
    assert lookup.top_types(d, cu) == slow and len(slow) > 1000


def _names_as_the_full_walk_has_them(binary: Path) -> None:
    from agent.binary.dwarf.functions import Functions
    from agent.binary.dwarf.types import TypeNamer

    dwarf = open_dwarf(binary)
    functions = Functions(dwarf, TypeNamer(dwarf))
    keys = {int(k) for k in dwarf.inlined_index()}
    fast = dwarf.names_at(keys)
    assert fast is not None and len(fast) == len(keys) > 0
    go = dwarf.language == "go"
    slow = {k: die_name(dwarf.die_at(k)) or "" if go else _qualified(dwarf.die_at(k))
            for k in keys}
    assert fast == slow
    assert {k: functions.function_name(dwarf.die_at(k)) for k in keys} == slow


def _qualified(die: DIE) -> str:
    """``a::b::f`` through pyelftools' own parents (each found by parsing the unit)."""
    parts = [die_name(die) or "?"]
    parent = die.get_parent()
    while parent is not None and parent.tag != "DW_TAG_compile_unit":
        if die_name(parent):
            parts.append(die_name(parent) or "")
        parent = parent.get_parent()
    return "::".join(reversed(parts))


@pytest.mark.parametrize("which", ["rust_ledger", "rust_handler", "rust_layouts",
                                   "c_dropped_clang", "c_dropped_gcc"])
def test_inlined_function_names_as_the_full_walk_has_them(which: str,
                                                          request: pytest.FixtureRequest
                                                          ) -> None:
    """The names of the functions inlined copies are of, read from the raw bytes with
    their namespaces (Rust's ``a::b::f``, closures' ``f::{closure#0}``; clang's DWARF 5
    names by index), equal the names pyelftools gives walking each DIE's parents."""
    _names_as_the_full_walk_has_them(request.getfixturevalue(which))


def test_inlined_go_function_names_as_the_full_walk_has_them(example: Path) -> None:
    _names_as_the_full_walk_has_them(example)
