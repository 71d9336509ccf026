"""The walk in C (``_walk.c``) against the walk in Python it stands in for: on every
kind of binary the tests build (Go, Rust, C by GCC and by clang, whose DWARF 5 names
strings by index), what each keeps of every unit, the index of every inlined copy and
the qualified name of every function DIE are the same; on units damaged at random,
each walk ends the same way (the same facts, or the same error), the C one leaving to
Python whatever it does not read. And noop's install builds it: without it a large
binary's listing takes seconds more, and nothing here would test it."""

from __future__ import annotations

import os
from array import array
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.binary.dwarf import asks, native, scan
from agent.binary.dwarf.damage import SCAN_ERRORS
from agent.binary.dwarf.reader import open_dwarf
from agent.binary.dwarf.tree import Tree

_KINDS = ["rust_layouts", "rust_dropped", "rust_handler", "c_layouts_o2",
          "c_dropped_clang", "c_dropped_gcc", "go_layouts_119", "go_layouts_new"]


def test_noop_is_installed_with_the_walk_in_c() -> None:
    assert native.BUILT, "agent/binary/dwarf/_walk.c was not built: ./setup.sh setup"


def _tree(binary: Path, in_c: bool) -> Tree:
    dwarf = open_dwarf(binary)
    tree = dwarf.tree
    assert tree is not None
    tree.native = in_c
    return tree


def _facts(tree: Tree) -> tuple[Any, ...]:
    """Everything a walk leaves in the tree, in the order it left it."""
    return ({u: tuple(bytes(a) for a in b) for u, b in tree.kept.units.items()},
            list(tree.kept.texts.items()), bytes(tree.inlined),
            [(u, list(pairs)) for u, pairs in tree.lows.items()],
            [(k, list(v)) for k, v in tree.named.items()], sorted(tree.odd))


@pytest.mark.parametrize("which", _KINDS)
def test_the_walk_in_c_is_the_walk_in_python(which: str,
                                             request: pytest.FixtureRequest) -> None:
    binary = Path(request.getfixturevalue(which))
    walks = {}
    for in_c in (True, False):
        tree = _tree(binary, in_c)
        nested = open_dwarf(binary).language != "go"
        tree.walk()
        index = asks.whole_index(tree, nested)  # each copy followed to its function
        named = dict(tree._named_as.get(nested, {}))
        every = sorted(at for b in tree.kept.units.values() for at in b[0])
        tree._named_as.clear()
        walks[in_c] = (_facts(tree), index, named, tree.names_of(every, nested),
                       tree.names_of(every, not nested))
    assert walks[True] == walks[False]
    facts, index, named, _names, _other = walks[True]
    assert facts[0]  # something was read
    assert (index and named) or "c_layouts" in which  # built without inlining


def _outcome(info: bytes, abbrev: bytes, strings: scan.Strings, in_c: bool) -> Any:
    """What walking each unit of ``info`` leaves, or the error it stops on."""
    try:
        tree = Tree(info, abbrev, strings)
        tree.native = in_c
        for at in tree.starts:
            tree.walk_one(at)
            # the names too: the C loop over every kept DIE, the Python one DIE by DIE
        every = sorted(at for b in tree.kept.units.values() for at in b[0])
        return _facts(tree), tree.names_of(every)
    except SCAN_ERRORS as e:
        return type(e)


@pytest.fixture(scope="module")
def small(request: pytest.FixtureRequest) -> tuple[bytes, bytes, scan.Strings]:
    """A Rust program's .debug_info (its first units: a few hundred KB), .debug_abbrev
    and strings."""
    dwarf = open_dwarf(Path(request.getfixturevalue("rust_layouts")))
    info, abbrev = dwarf.raw
    tree = dwarf.tree
    assert tree is not None
    cut = next((at for at in tree.starts if at > 200_000), len(info))
    return info[:cut], abbrev, dwarf.strings


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(0, 255)),
                min_size=1, max_size=6))
def test_damaged_units_end_the_same_way(small: tuple[bytes, bytes, scan.Strings],
                                        changes: list[tuple[float, int]]) -> None:
    """Bytes of .debug_info changed at random (codes, forms' values, lengths,
    references, name offsets): the C walk reads what it is sure of and leaves the rest
    to Python, so both end alike."""
    info, abbrev, strings = small
    damaged = bytearray(info)
    for where, value in changes:
        damaged[11 + int(where * (len(info) - 11))] = value  # not the first header
    got = bytes(damaged)
    assert _outcome(got, abbrev, strings, True) == _outcome(got, abbrev, strings, False)


def test_what_c_does_not_read_is_left_to_python(small: tuple[bytes, bytes, scan.Strings]
                                                ) -> None:
    """A form the C walk does not read (DW_FORM_indirect), a unit cut short, or a
    plan with no entry for a code: it answers None, changing nothing, and the walk is
    Python's."""
    info, abbrev, strings = small
    tree = Tree(info, abbrev, strings)
    u, abbrev_at = tree.units[0]
    plans = tree._plans_for(u, abbrev_at)
    assert tree._walk_native(u, plans)  # an intact unit: read in C
    before = _facts(tree)
    # every code's plan gone: no DIE can be read
    empty = array("q", [1, -1])
    assert native.walk(info, u.first, u.end, u.at, u.osize, u.asize, u.refaddr, 8, empty,
                       tree._entries, strings.offsets, strings.line_str) is None
    # the unit's last bytes cut off: it runs past the section
    assert native.walk(info[:u.end - 3], u.first, u.end, u.at, u.osize, u.asize,
                       u.refaddr, 8, tree._coded[id(plans)], tree._entries,
                       strings.offsets, strings.line_str) is None
    # an attribute of every plan made indirect: the form is in the DIE
    indirect = array("q", tree._entries)
    for at in tree._coded[id(plans)][1:]:
        if at >= 0 and indirect[at + 5]:
            indirect[at + 6 + 2] = 0x16
    assert native.walk(info, u.first, u.end, u.at, u.osize, u.asize, u.refaddr, 8,
                       tree._coded[id(plans)], indirect, strings.offsets,
                       strings.line_str) is None
    assert _facts(tree) == before


@pytest.mark.parametrize("which", _KINDS)
def test_a_few_functions_copies_in_c_as_in_python(which: str,
                                                  request: pytest.FixtureRequest) -> None:
    """The units read for some functions' copies (every unit referring to them, step by
    step) and the copies found there: the same whether the references are searched in
    C or through Python's table of referrers."""
    binary = Path(request.getfixturevalue(which))
    whole = _tree(binary, False)
    index = asks.whole_index(whole, None)
    keys = sorted(index)[::max(1, len(index) // 25)]
    got = {}
    for in_c in (True, False):
        dwarf = open_dwarf(binary)
        tree = dwarf.tree
        assert tree is not None
        tree.native = in_c
        got[in_c] = (dwarf.copies(keys), sorted(tree.walked))
    assert got[True] == got[False]
    assert got[True][0] == {k: index[k] for k in keys if index.get(k)}


def test_plans_past_64_bits_leave_the_unit_to_python() -> None:
    """An abbreviation whose tag (or form) does not fit 64 bits, in a damaged table:
    the unit's plans are not made for C (no code has one there), nothing is recorded
    for them, and the Python walk reads what it can."""
    from agent.binary.dwarf.tree import _coded

    entries, entry_at = array("q"), {}
    good = (0x2E, True, -1, ((0, 1, 0x0E, 4),), 0, True)
    assert list(_coded({1: good}, entries, entry_at)) == [2, -1, 0]
    before = (bytes(entries), dict(entry_at))
    damaged = {1: good, 2: (1 << 63, False, 0, (), 0, False)}
    assert list(_coded(damaged, entries, entry_at)) == [0]
    assert (bytes(entries), dict(entry_at)) == before


def test_names_read_for_names_not_nested_are_their_own(
        small: tuple[bytes, bytes, scan.Strings]) -> None:
    """Go's names are not nested: the codes read for them are the DIEs' own, not their
    scopes' (a damaged scope's name must not stop the answer Python would give)."""
    info, abbrev, strings = small
    tree = Tree(info, abbrev, strings)
    tree.walk_one(tree.starts[0])
    block = tree.kept.units[tree.starts[0]]
    tag = {at: t & 0xFFFF for at, t in zip(block[0], block[1], strict=True)}
    # functions in namespaces: each scope's name is another's than its own
    inner = [i for i, p in enumerate(block[2]) if tag[block[0][i]] == 0x2E
             and tag.get(p) == 0x39][:50]
    assert inner
    wanted = array("Q", [block[0][i] for i in inner])
    own = array("q")
    own.frombytes(native.codes(wanted, block[0], block[1], block[2], block[3], False))
    assert set(own) == {block[3][i] for i in inner}
    nested = array("q")
    nested.frombytes(native.codes(wanted, block[0], block[1], block[2], block[3], True))
    assert set(own) < set(nested)  # the scopes' names too


@pytest.mark.parametrize("which", ["rust_layouts", "c_dropped_gcc", "go_layouts_new"])
def test_noop_built_without_c_answers_the_same(which: str, request: pytest.FixtureRequest,
                                               tmp_path: Path) -> None:
    """noop installed where no compiler built the walk in C (its module missing): the
    listing of every function, each with its inlined copies, as with it."""
    import json
    import subprocess
    import sys

    binary = str(request.getfixturevalue(which))
    script = ("import sys; sys.modules['agent.binary.dwarf._walk'] = None\n"
              "from agent.binary.dwarf import native; assert not native.BUILT\n"
              "from agent.cli import main; sys.exit(main(sys.argv[1:]))")
    answers = []
    for without in (True, False):
        cache = tmp_path / f"cache-{without}"
        run = [sys.executable, "-c", script] if without else [sys.executable, "-m", "agent"]
        done = subprocess.run([*run, "funcs", "--json", binary], capture_output=True,
                              text=True, timeout=300, check=False,
                              cwd=Path(__file__).resolve().parents[1],
                              env={**os.environ, "NOOP_CACHE_DIR": str(cache)})
        assert done.returncode == 0, done.stderr
        answers.append(json.loads(done.stdout))
    assert answers[0] == answers[1] and answers[0]["functions"]
