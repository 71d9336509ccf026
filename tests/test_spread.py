"""A walk of .debug_info spread over forked children, and the inlined index whose
copies' origins and names they find, against one process walking every unit in order:
the same DIEs kept, the same tables, the same index and names, on every kind of binary
the tests build; a child that fails or says nothing readable has its units walked
here; nothing is spread while another thread runs. No root needed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from harness.forks import counted, spread_over

from agent import cpus
from agent.binary.dwarf import asks, spread
from agent.binary.dwarf.reader import open_dwarf
from agent.binary.dwarf.tree import Tree

_KINDS = ["rust_layouts", "rust_dropped", "c_dropped_gcc", "c_dropped_clang",
          "go_layouts_119"]


def _tree(binary: Path) -> Tree:
    tree = open_dwarf(binary).tree
    assert tree is not None
    return tree


def _facts(tree: Tree) -> dict[str, Any]:
    return {"units": {u: tuple(map(list, b)) for u, b in tree.kept.units.items()},
            "starts": tree.kept.starts, "texts": tree.kept.texts,
            "inlined": list(tree.inlined),
            "lows": {u: list(a) for u, a in tree.lows.items()}, "named": tree.named,
            "odd": tree.odd, "walked": tree.walked}


@pytest.mark.parametrize("which", _KINDS)
@pytest.mark.parametrize("ways", [2, 3])
def test_a_spread_walk_keeps_what_one_walk_keeps(which: str, ways: int,
                                                 request: pytest.FixtureRequest,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    binary = Path(request.getfixturevalue(which))
    alone = _tree(binary)
    alone.walk()
    with monkeypatch.context() as m:
        spread_over(m, ways)
        forks = counted(m)
        spread_ = _tree(binary)
        spread_.walk()
    assert len(forks) == min(ways, len(alone.starts)) - 1
    assert forks or which.startswith("c_")  # a C program of one unit: nothing to spread
    assert _facts(spread_) == _facts(alone)


@pytest.mark.parametrize("which", _KINDS)
def test_the_index_and_its_names_as_one_process_finds_them(
        which: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Also with some units read before (a part of their own) and names asked later."""
    binary = Path(request.getfixturevalue(which))
    go = which.startswith("go")
    alone = _tree(binary)
    index = asks.whole_index(alone)
    names = alone.names_of(index, not go)
    assert index or which.startswith("c_")
    with monkeypatch.context() as m:
        spread_over(m, 3)
        for before in ([], alone.starts[1::3]):
            tree = _tree(binary)
            tree.walk(before)
            got = asks.whole_index(tree, not go)
            assert got == index and list(got) == list(index)
            assert tree.names_of(got, not go) == names
            if got:
                assert tree._named_as[not go]  # the children named them


@pytest.mark.parametrize("how", ["raises", "exits", "says nonsense"])
def test_a_child_that_fails_has_its_units_walked_here(
        how: str, rust_layouts: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    alone = _tree(rust_layouts)
    index = asks.whole_index(alone, True)

    def walked(tree: Tree, part: list[int], then: Any) -> dict[str, Any]:
        if how == "raises":
            raise MemoryError
        if how == "exits":
            os._exit(0)
        return {"units": {}}

    with monkeypatch.context() as m:
        spread_over(m, 2)
        m.setattr(spread, "_walked", walked)
        tree = _tree(rust_layouts)
        assert asks.whole_index(tree, True) == index
    assert _facts(tree) == _facts(alone)


def test_nothing_is_spread_while_another_thread_runs(rust_layouts: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    spread_over(monkeypatch, 4)
    tree = _tree(rust_layouts)
    assert len(spread._cut(tree, tree.starts)) > 1
    monkeypatch.setattr(cpus, "alone", lambda: False)
    assert spread._cut(tree, tree.starts) == [tree.starts]


def test_a_process_is_alone_until_a_thread_starts() -> None:
    """Threads of Python's and of a library's own (one in C is one in /proc too)."""
    code = ("import threading, time\n"
            "from agent import cpus\n"
            "print(cpus.alone())\n"
            "threading.Thread(target=time.sleep, args=(2,), daemon=True).start()\n"
            "print(cpus.alone())\n")
    said = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, cwd=Path(__file__).resolve().parent.parent).stdout
    assert said.split() == ["True", "False"]


@pytest.mark.parametrize("ways", [1, 2, 3])
@pytest.mark.parametrize("count", [0, 1, 2, 5, 11])
def test_each_answers_in_order_as_one_process(ways: int, count: int,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """In order, each part's answers from the child that made them, every child gone
    after; spread as far as the work pays for (``worth`` forks), no further."""
    spread_over(monkeypatch, ways)
    forks = counted(monkeypatch)
    items = [bytes([k]) * k for k in range(count)]
    got = spread.each(items, lambda b: (len(b), b, os.getpid()), worth=count)
    assert [g[:2] for g in got] == [(k, bytes([k]) * k) for k in range(count)]
    spread_ = min(ways, count) if count >= 2 else 1
    assert len(forks) == spread_ - 1
    assert {g[2] for g in got} == ({os.getpid(), *forks} if count else set())
    for pid in forks:  # reaped: not a child of this process any more
        with pytest.raises(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
    forks.clear()
    assert spread.each(items, lambda b: len(b), worth=1) == list(range(count))
    assert not forks  # work that pays for one fork is not spread


@pytest.mark.parametrize("how", ["raises", "exits", "says nonsense", "says too little"])
def test_each_does_here_what_a_child_did_not(how: str, monkeypatch: pytest.MonkeyPatch
                                             ) -> None:
    spread_over(monkeypatch, 3)
    parent = os.getpid()

    def do(k: int) -> int:
        if os.getpid() != parent:
            if how == "raises":
                raise MemoryError
            if how == "exits":
                os._exit(0)
        return k * k

    real_each = spread._each

    def each(do_: Any, part: Any) -> Any:
        if os.getpid() != parent and how == "says nonsense":
            return {"not": "a list"}
        if os.getpid() != parent and how == "says too little":
            return real_each(do_, part)[:-1]
        return real_each(do_, part)

    monkeypatch.setattr(spread, "_each", each)
    assert spread.each(list(range(9)), do, worth=9) == [k * k for k in range(9)]


def test_each_is_not_spread_while_another_thread_runs(monkeypatch: pytest.MonkeyPatch
                                                      ) -> None:
    spread_over(monkeypatch, 4)
    monkeypatch.setattr(cpus, "alone", lambda: False)
    monkeypatch.setattr(os, "fork", lambda: pytest.fail("forked"))
    assert spread.each(list(range(8)), str, worth=8) == [str(k) for k in range(8)]


@pytest.mark.parametrize("ways,worth,forked", [(2, 2, True), (4, 9, True), (2, 1, False),
                                               (1, 9, False)])
def test_beside_answers_what_make_answers_made_by_a_child_when_it_pays(
        ways: int, worth: int, forked: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    spread_over(monkeypatch, ways)
    forks = counted(monkeypatch)
    with spread.beside(lambda: (os.getpid(), ["x" * 70_000] * 3), worth) as made:
        assert len(forks) == int(forked)  # started before it is asked for
        pid, got = made()
        assert made() == (pid, got)  # asked twice: made once
    assert got == ["x" * 70_000] * 3  # more than a pipe holds
    assert (pid != os.getpid()) is forked
    for child in forks:
        with pytest.raises(ChildProcessError):
            os.waitpid(child, os.WNOHANG)


@pytest.mark.parametrize("how", ["raises", "exits", "never asked"])
def test_beside_makes_here_what_its_child_did_not_and_leaves_no_child(
        how: str, monkeypatch: pytest.MonkeyPatch) -> None:
    spread_over(monkeypatch, 2)
    forks = counted(monkeypatch)
    parent = os.getpid()

    def make() -> int:
        if os.getpid() != parent:
            if how == "raises":
                raise MemoryError
            if how == "exits":
                os._exit(0)
            if how == "never asked":
                os.kill(os.getpid(), signal.SIGSTOP)  # left stopped unless reaped
        return 42
    with spread.beside(make, 2) as made:
        if how != "never asked":
            assert made() == 42
    assert len(forks) == 1
    with pytest.raises(ChildProcessError):
        os.waitpid(forks[0], os.WNOHANG)
    kept = os.open(os.devnull, os.O_RDONLY)  # may take the pipe's number
    try:
        assert made() == 42  # asked for after the block: made here, nothing closed
        os.fstat(kept)
    finally:
        os.close(kept)


def test_beside_is_not_spread_while_another_thread_runs(monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    spread_over(monkeypatch, 4)
    monkeypatch.setattr(cpus, "alone", lambda: False)
    monkeypatch.setattr(os, "fork", lambda: pytest.fail("forked"))
    with spread.beside(lambda: os.getpid(), 8) as made:
        assert made() == os.getpid()


@pytest.mark.parametrize("which", ["rust_layouts", "rust_dropped"])
def test_a_listing_with_its_symbols_demangled_beside_is_the_listing(
        which: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """``noop funcs``' rows with the Rust symbols demangled by a child while the index is
    made, as one process makes them."""
    from agent.binary.dwarf import listing
    from agent.binary.dwarf.types import TypeNamer
    from agent.tools import inspect

    binary = Path(request.getfixturevalue(which))
    monkeypatch.setenv("NOOP_NO_CACHE", "1")
    alone = open_dwarf(binary)
    rows = inspect.listing(alone, TypeNamer(alone))
    spread_over(monkeypatch, 2)
    monkeypatch.setattr(listing, "_DEMANGLED", 1)
    monkeypatch.setattr(spread, "WORTH", 1 << 40)  # the walk in one process
    forks = counted(monkeypatch)
    beside = open_dwarf(binary)
    assert inspect.listing(beside, TypeNamer(beside)) == rows
    assert len(forks) == 1  # the demangling
    assert any("::" in r["name"] for r in rows)
