"""A walk of many units spread over the CPUs noop may use: the units cut into runs of
about equal bytes, each later run walked by a forked child that sends back what it
kept, the first by this process; the parts merged in unit order, so that every list
and table is what one walk in order makes.

Walking is pure Python over bytes every process already has (a fork shares them), so
two CPUs walk a 30 MB .debug_info in a little over half the time. Nothing is spread
when threads run (a fork copies one thread, with whatever locks the others held), when
there is too little to walk for a fork to pay, or when noop may use one CPU; a child
that fails has its units walked here, so the answer never depends on it. ``each`` spreads
other work of many equal parts (searches of the raw bytes) the same way, and ``beside``
one piece of work beside what the process does meanwhile.
"""

from __future__ import annotations

import contextlib
import functools
import os
import pickle
import signal
from array import array
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol, TypeVar

from agent import cpus
from agent.binary.dwarf import scan
from agent.binary.dwarf.kept import Kept


class Walker(Protocol):
    """What a walk fills (``tree.Tree``'s tables) and how it walks one unit."""

    units: list[tuple[scan._Unit, int]]
    sizes: dict[int, int]  # bytes of each unit, by its offset
    kept: Kept
    inlined: array[int]
    lows: dict[int, array[int]]
    named: dict[int, list[int]]
    odd: set[int]
    walked: set[int]

    def walk_one(self, at: int) -> None: ...


Tree = TypeVar("Tree", bound=Walker)
_T = TypeVar("_T")
_I = TypeVar("_I")
WORTH = 2 << 20  # bytes of units a child must have for its start and reply to pay (~0.1 s)
SEARCHED = 64 << 20  # bytes a child must search (bytes.find) for the same (~50 ms)
MOST = 4


def walk(tree: Tree, todo: list[int],
         then: Callable[[Tree, list[int]], _T] | None = None) -> list[_T]:
    """Walks the units at ``todo`` (sorted, none walked yet) into ``tree``; with
    ``then``, what it answers for each part (the units of ``todo`` one process walked,
    in order), asked where that part was walked: of the units walked, a child has only
    its part's, so ``then`` must answer from those (what it cannot, it leaves for the
    caller to finish here)."""
    parts = _cut(tree, todo)
    children = [_fork(functools.partial(_walked, tree, part, then)) for part in parts[1:]]
    answers = []
    try:
        for at in parts[0]:
            tree.walk_one(at)
        if then is not None:
            answers.append(then(tree, parts[0]))
        for part, child in zip(parts[1:], children, strict=True):
            got = _reply(*child) if child is not None else None
            if not (isinstance(got, dict) and set(got.get("units", ())) >= set(part)):
                for at in part:
                    tree.walk_one(at)
                if then is not None:
                    answers.append(then(tree, part))
            else:
                _merge(tree, part, got)
                if then is not None:
                    answers.append(got["then"])
    finally:
        for child in children:
            if child is not None:
                _reap(*child)
    return answers


def each(items: Sequence[_I], do: Callable[[_I], _T], worth: int) -> list[_T]:
    """``[do(item) for item in items]``, in order, its later parts done by forked
    children when the work pays for ``worth`` forks (a fork of a large process costs
    as much as searching tens of MB: ``SEARCHED``); a part whose child fails is done
    here."""
    if not items:
        return []
    ways = min(_ways(worth), len(items))
    size = -(-len(items) // ways)
    parts = [items[k:k + size] for k in range(0, len(items), size)]
    children = [_fork(functools.partial(_each, do, part)) for part in parts[1:]]
    try:
        out = _each(do, parts[0])
        for part, child in zip(parts[1:], children, strict=True):
            got = _reply(*child) if child is not None else None
            out += got if isinstance(got, list) and len(got) == len(part) else _each(do, part)
    finally:
        for child in children:
            if child is not None:
                _reap(*child)
    return out


@contextlib.contextmanager
def beside(make: Callable[[], _T], worth: int) -> Iterator[Callable[[], _T]]:
    """A function giving ``make()``, made meanwhile by a forked child when the work pays
    for ``worth`` forks (``each``) and noop may use another CPU: work the process does
    not need until later, done beside what it does first. It is made here when asked
    for if no child could make it or the child sent no answer; a child whose answer
    is not asked for is gone at the end of the block."""
    child = _fork(lambda: [make()]) if _ways(worth) > 1 else None
    got: list[_T] = []

    def answer() -> _T:
        nonlocal child
        if not got:
            sent = _reply(*child) if child is not None else None
            if child is not None:
                _reap(*child)
                child = None
            got.append(sent[0] if isinstance(sent, list) and len(sent) == 1 else make())
        return got[0]
    try:
        yield answer
    finally:
        if child is not None:
            _reap(*child)
            child = None  # asked for after the block: made here


def _each(do: Callable[[_I], _T], part: Sequence[_I]) -> list[_T]:
    return [do(item) for item in part]


def _ways(worth: int) -> int:
    """How many processes to share work that pays for ``worth`` forks: at most one per
    CPU noop may use, and one while other threads run."""
    return max(1, min(worth, cpus.usable(MOST))) if worth >= 2 and cpus.alone() else 1


def _cut(tree: Tree, todo: list[int]) -> list[list[int]]:
    """``todo`` as contiguous runs of about equal bytes, one per CPU worth using."""
    if len(todo) < 2:
        return [todo]
    total = sum(tree.sizes[at] for at in todo)
    ways = _ways(total // WORTH)  # a question's few units: asked often, answered at once
    if ways < 2:
        return [todo]
    parts: list[list[int]] = [[]]
    done = 0
    for at in todo:
        if done >= total * len(parts) / ways and len(parts) < ways:
            parts.append([])
        parts[-1].append(at)
        done += tree.sizes[at]
    return parts


def _fork(make: Callable[[], Any]) -> tuple[int, int] | None:
    """A child sending what ``make`` returns, and the end of the pipe it comes on."""
    try:
        read, write = os.pipe()
    except OSError:
        return None
    try:
        pid = os.fork()
    except OSError:
        os.close(read)
        os.close(write)
        return None
    if pid == 0:  # pragma: no cover - the child, measured by what it sends
        code = 1
        try:
            os.close(read)
            with os.fdopen(write, "wb") as out:
                pickle.dump(make(), out, protocol=pickle.HIGHEST_PROTOCOL)
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    return pid, read


def _walked(tree: Tree, part: list[int], then: Callable[[Tree, list[int]], Any] | None
            ) -> dict[str, Any]:
    """What walking ``part`` adds to ``tree``, walked from empty tables (the child's
    copy of them), and ``then``'s answer for it."""
    tree.kept, tree.inlined, tree.lows = Kept(), array("Q"), {}
    tree.named, tree.odd = {}, set()
    for at in part:
        tree.walk_one(at)
    return {"units": tree.kept.units, "texts": tree.kept.texts, "inlined": tree.inlined,
            "lows": tree.lows, "named": tree.named, "odd": tree.odd,
            "then": then(tree, part) if then is not None else None}


def _reply(pid: int, read: int) -> Any:
    """The child's reply; None when it sent none whole."""
    try:
        with os.fdopen(read, "rb", closefd=False) as got:
            return pickle.load(got)
    except (OSError, EOFError, pickle.UnpicklingError, ValueError, MemoryError):
        return None


def _reap(pid: int, read: int) -> None:
    """The child gone: its reply read or not wanted (an error, an interrupt here)."""
    with contextlib.suppress(OSError):
        os.close(read)
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, 0)


def _merge(tree: Tree, part: list[int], got: dict[str, Any]) -> None:
    """A child's units into ``tree``, after this process's (lower) ones."""
    for unit in part:
        tree.kept.add(unit, got["units"][unit])
    tree.kept.texts.update(got["texts"])
    tree.inlined.extend(got["inlined"])
    tree.lows.update(got["lows"])
    for k, offsets in got["named"].items():
        tree.named.setdefault(k, []).extend(offsets)
    tree.odd |= got["odd"]
    tree.walked.update(part)
