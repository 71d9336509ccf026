"""The name of a Go type from the address of its descriptor: what a probe read as an
interface's dynamic type, named when it is printed or exported as Go's ``%T`` names
it (``*errors.errorString``), from the descriptor's own string in the binary."""

from __future__ import annotations

import threading
from functools import lru_cache
from typing import TYPE_CHECKING

from agent import logs
from agent.binary.elf import ElfFile
from agent.errors import NoopError

if TYPE_CHECKING:
    from agent.binary.gometa.rtypes import Types

KEPT = 16  # files' namers kept at once (per-container copies, builds followed)


def name(binary: str, build: str, address: int) -> str:
    """``nil`` for 0; the address in hex when no descriptor of ``binary`` (as its build
    ``build`` has it) is there, or when the file at that path is another build now."""
    if address == 0:
        return "nil"
    return _names(binary, build).at(address)


@lru_cache(maxsize=KEPT)
def _names(binary: str, build: str) -> _Names:
    return _Names(binary, build)


class _Names:
    def __init__(self, binary: str, build: str) -> None:
        self.binary = binary
        self.build = build
        self._lock = threading.Lock()
        self._memo: dict[int, str] = {}
        self._types: Types | None = None
        self._opened = False

    def at(self, address: int) -> str:
        with self._lock:
            if address not in self._memo:
                self._memo[address] = self._name(address)
            return self._memo[address]

    def _open(self) -> None:
        self._opened = True
        from agent.binary.gometa.program import GoProgram
        try:
            elf = ElfFile(self.binary)  # kept open: descriptors are read when asked
            if self.build and elf.build_id != self.build:
                why = "it is no longer the build its plan was made from"
            else:
                self._types = GoProgram(elf).types
                return
        except (NoopError, OSError) as exc:
            why = exc.message if isinstance(exc, NoopError) else str(exc)
        logs.say(f"Go types in {self.binary} are shown as addresses: {why}",
                 logs.WARNING)

    def _name(self, address: int) -> str:
        if not self._opened:
            self._open()
        if self._types is None:
            return f"{address:#x}"
        try:
            return self._types.at(address).short or f"{address:#x}"
        except NoopError:  # no descriptor there (a damaged or foreign address)
            return f"{address:#x}"
