"""Work spread over forked children (``agent.binary.dwarf.spread``), made to spread in
a test however little there is, and the children counted."""

from __future__ import annotations

import os

import pytest

from agent import cpus
from agent.binary.dwarf import spread


def spread_over(monkeypatch: pytest.MonkeyPatch, ways: int) -> None:
    """Any walk or search spread ``ways`` ways, however small, also in a test runner's
    worker (whose own threads only wait on their sockets while a test runs)."""
    monkeypatch.setattr(spread, "WORTH", 1)
    monkeypatch.setattr(spread, "SEARCHED", 1)
    monkeypatch.setattr(cpus, "usable", lambda most: min(ways, most))
    monkeypatch.setattr(cpus, "alone", lambda: True)


def counted(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The children forked from now on, listed as they start."""
    forks: list[int] = []
    real_fork = os.fork

    def fork() -> int:
        pid = real_fork()
        if pid:
            forks.append(pid)
        return pid

    monkeypatch.setattr(os, "fork", fork)
    return forks
