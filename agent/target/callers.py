"""Who called: the function and the line of a call, from the return address a probe
read (``$caller``, ``$caller_line``), resolved when the value is printed or exported.

A return address is resolved at the call instruction just before it, inlining-aware:
the innermost function whose code holds that instruction (a call made from code
inlined into another function is that inlined function's), from DWARF where the
binary has it, else from the symbol table (or a stripped Go binary's pclntab, read as
its symbols). A probe site inside an inlined copy has its caller in the binary itself:
the function the copy is inlined into, and the line of the call; the probe reads a
token for it (``INLINED`` | the copy's DIE offset).
"""

from __future__ import annotations

import bisect
import threading
from functools import cache

from agent.errors import NoopError
from agent.target.dwarf.functions import Functions
from agent.target.dwarf.lines import Lines
from agent.target.dwarf.reader import Dwarf, attr, origin_of
from agent.target.dwarf.types import TypeNamer
from agent.target.elf import ElfFile

INLINED = 1 << 63  # with a DIE offset: the caller of that inlined copy
BODY_TAGS = ("DW_TAG_subprogram", "DW_TAG_inlined_subroutine")


def name(binary: str, raw: int, line: bool = False) -> str:
    """The caller (``line``: its ``file:line``) a value read from ``binary`` names;
    the address in hex when nothing in the binary holds it (a caller in another
    module: a shared library's)."""
    got = _resolver(binary).at(raw)
    return got[1] if line else got[0]


@cache
def _resolver(binary: str) -> _Resolver:
    return _Resolver(binary)


class _Resolver:
    def __init__(self, binary: str) -> None:
        self.binary = binary
        self._lock = threading.Lock()
        self._memo: dict[int, tuple[str, str]] = {}
        self._opened = False
        self.dwarf: Dwarf | None = None
        self.functions: Functions | None = None
        self.symbols: list[tuple[int, int, str]] = []

    def _open(self) -> None:
        self._opened = True
        try:
            elf = ElfFile(self.binary)
            self.symbols = sorted((s.address, s.address + s.size, s.name)
                                  for s in elf.function_symbols() if s.size)
            self.dwarf = Dwarf(elf)
            self.functions = Functions(self.dwarf, TypeNamer(self.dwarf))
            self.lines = Lines(self.dwarf)
        except (NoopError, OSError, ValueError):
            self.dwarf = None  # the symbols alone, if any

    def at(self, raw: int) -> tuple[str, str]:
        with self._lock:
            if raw not in self._memo:
                if not self._opened:
                    self._open()
                try:
                    self._memo[raw] = self._resolve(raw)
                except Exception:  # a damaged binary must not stop an export: the address
                    self._memo[raw] = (f"{raw:#x}", "?")
            return self._memo[raw]

    def _resolve(self, raw: int) -> tuple[str, str]:
        if raw & INLINED:
            return self._inlined(raw & ~INLINED)
        if raw == 0:
            return ("?", "?")
        pc = raw - 1  # the call instruction
        where = self._line(pc)
        sub = self.dwarf.subprogram_holding(pc) if self.dwarf is not None else None
        if sub is not None and self.functions is not None:
            chain = self.lines.scopes(sub).chain(pc)
            body = next(s for s in reversed(chain) if s.body)
            return (self.functions.function_name(origin_of(body.die)) or "?", where or "?")
        i = bisect.bisect_right(self.symbols, (pc, 2**64)) - 1
        if i >= 0 and self.symbols[i][0] <= pc < self.symbols[i][1]:
            symbol = self.symbols[i][2]
            shown = self.functions.display_name(symbol) if self.functions else symbol
            return (shown, where or "?")
        return (f"{raw:#x}", "?")

    def _line(self, pc: int) -> str | None:
        cu = self.dwarf.unit_at(pc) if self.dwarf is not None else None
        table = self.lines.table(cu) if cu is not None else None
        row = table.row_at(pc) if table is not None else None
        return f"{row.file}:{row.line}" if row is not None else None

    def _inlined(self, offset: int) -> tuple[str, str]:
        if self.dwarf is None or self.functions is None:
            return ("?", "?")
        die = self.dwarf.info.get_DIE_from_refaddr(offset)
        parent = self.dwarf.parent(die)
        while parent is not None and parent.tag not in BODY_TAGS:
            parent = self.dwarf.parent(parent)
        name = self.functions.function_name(origin_of(parent)) if parent is not None else "?"
        file = self.lines.file_of(die, "DW_AT_call_file")
        line = attr(die, "DW_AT_call_line")
        return (name or "?", f"{file}:{line}" if file and isinstance(line, int) else "?")
