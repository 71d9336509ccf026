"""The raw reader's batched lookups answer as their one-at-a-time forms do: strings
of a string section read in ascending chunks (``Text.strings``) as ``Text.string``
reads each, from a file window and from bytes; kept DIEs found unit by unit
(``Kept.found``) as ``Kept._find`` finds each."""

from __future__ import annotations

import mmap
from array import array

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.binary.dwarf import sections
from agent.binary.dwarf.kept import Kept


@settings(max_examples=100, deadline=None)
@given(st.lists(st.text(min_size=0, max_size=300), min_size=1, max_size=60),
       st.lists(st.integers(0, 1 << 16), max_size=80), st.integers(4, 64))
def test_strings_in_chunks_as_one_at_a_time(tmp_path_factory: pytest.TempPathFactory,
                                            texts: list[str],
                                            picks: list[int], chunk: int) -> None:
    data = b"".join(t.encode() + b"\0" for t in texts)
    # a string's start, or any place inside one (linkers merge a name into the tail of
    # a longer one), or the last NUL
    offsets = [p % len(data) for p in picks]
    path = tmp_path_factory.mktemp("strings") / "s"
    path.write_bytes(b"pad" + data)
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as view:
        for source in (sections.Window(f, view, 3, len(data)), data):
            text = sections.Text(source)
            text._STRINGS = chunk  # chunks shorter than strings, and longer
            got = text.strings(iter(offsets))
            assert got == {at: sections.Text(source).string(at) for at in offsets}


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.integers(0, 40), min_size=0, max_size=12), min_size=1,
                max_size=6), st.lists(st.integers(0, 2000), max_size=60))
def test_dies_found_unit_by_unit_as_one_at_a_time(gaps: list[list[int]],
                                                   asked: list[int]) -> None:
    kept = Kept()
    at = 0
    for unit_gaps in gaps:  # units in any order of adding, DIEs ascending in each
        start, offsets = at, []
        for g in unit_gaps:
            at += g + 1
            offsets.append(at)
        block = (array("Q", offsets), array("I", [0] * len(offsets)),
                 array("q", [-1] * len(offsets)), array("q", [-1] * len(offsets)),
                 array("q", [-1] * len(offsets)))
        kept.add(start, block)
        at += 7  # a unit's header: no DIE there
    wanted = sorted(asked)
    assert kept.found(wanted) == [kept._find(o) for o in wanted]
