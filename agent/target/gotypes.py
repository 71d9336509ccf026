"""The name of a Go type from the address of its descriptor: what a probe read as an
interface's dynamic type, named when it is printed or exported as Go's ``%T`` names
it (``*errors.errorString``), from the descriptor's own string in the binary."""

from __future__ import annotations

import threading
from functools import cache
from typing import Any

from agent.target.elf import ElfFile


def name(binary: str, address: int) -> str:
    """``nil`` for 0; the address in hex when no descriptor of ``binary`` is there."""
    if address == 0:
        return "nil"
    return _names(binary).at(address)


@cache
def _names(binary: str) -> _Names:
    return _Names(binary)


class _Names:
    def __init__(self, binary: str) -> None:
        self.binary = binary
        self._lock = threading.Lock()
        self._memo: dict[int, str] = {}
        self._types: Any = None
        self._opened = False

    def at(self, address: int) -> str:
        with self._lock:
            if address not in self._memo:
                self._memo[address] = self._name(address)
            return self._memo[address]

    def _name(self, address: int) -> str:
        if not self._opened:
            self._opened = True
            try:
                from agent.target.gometa.program import GoProgram
                self._types = GoProgram(ElfFile(self.binary)).types
            except Exception:  # not a Go binary noop can read: addresses, then
                self._types = None
        if self._types is None:
            return f"{address:#x}"
        try:
            return self._types.at(address).short or f"{address:#x}"
        except Exception:  # no descriptor there (a damaged or foreign address)
            return f"{address:#x}"
