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
from functools import lru_cache

from agent import logs
from agent.binary import debuginfo
from agent.binary.dwarf.damage import DAMAGE, damage_said
from agent.binary.dwarf.dies import attr, origin_of
from agent.binary.dwarf.functions import Functions
from agent.binary.dwarf.lines import Lines
from agent.binary.dwarf.reader import Dwarf
from agent.binary.dwarf.types import TypeNamer
from agent.binary.elf import ElfFile
from agent.errors import NoopError

INLINED = 1 << 63  # with a DIE offset: the caller of that inlined copy
BODY_TAGS = ("DW_TAG_subprogram", "DW_TAG_inlined_subroutine")


KEPT = 16  # files' namers kept at once (per-container copies, builds followed)


def name(binary: str, build: str, raw: int, line: bool = False, debug: str = "") -> str:
    """The caller (``line``: its ``file:line``) a value read from ``binary`` names, as
    its build ``build`` has it; the address in hex when nothing in that build holds it
    (a caller in another module: a shared library's), or when the file at that path is
    another build now; ``debug``: its separate debug file, when the user named one."""
    got = _resolver(binary, build, debug).at(raw)
    return got[1] if line else got[0]


@lru_cache(maxsize=KEPT)
def _resolver(binary: str, build: str, debug: str) -> _Resolver:
    return _Resolver(binary, build, debug)


class _Resolver:
    def __init__(self, binary: str, build: str, debug: str) -> None:
        self.binary = binary
        self.build = build
        self.debug = debug
        self._lock = threading.Lock()
        self._memo: dict[int, tuple[str, str]] = {}
        self._opened = False
        self.dwarf: Dwarf | None = None
        self.functions: Functions | None = None
        self.symbols: list[tuple[int, int, str]] = []
        self._failed = False

    def _open(self) -> None:
        self._opened = True
        try:
            with damage_said(self.binary):
                elf = ElfFile(self.binary)
                if self.build and elf.build_id != self.build:
                    logs.say(f"{self.binary} is no longer the build its plan was made "
                             f"from: its callers are shown as addresses", logs.WARNING)
                    return
                self.symbols = sorted((s.address, s.address + s.size, s.name)
                                      for s in elf.function_symbols() if s.size)
                self.dwarf = Dwarf(elf, debuginfo.locate(elf, None,
                                                         debuginfo.Given(self.debug or None)))
                self.functions = Functions(self.dwarf, TypeNamer(self.dwarf))
                self.lines = Lines(self.dwarf)
        except (NoopError, OSError, *DAMAGE) as exc:
            self.dwarf = None  # the symbols alone, if any
            logs.say(f"callers in {self.binary} are named from its symbols alone: "
                     f"{_why(exc)}", logs.WARNING)

    def at(self, raw: int) -> tuple[str, str]:
        with self._lock:
            if raw not in self._memo:
                if not self._opened:
                    self._open()
                try:
                    with damage_said(self.binary):
                        self._memo[raw] = self._resolve(raw)
                except (NoopError, *DAMAGE) as exc:  # a damaged binary must not stop an
                    self._memo[raw] = (f"{raw:#x}", "?")  # export: the address, said once
                    if not self._failed:
                        self._failed = True
                        logs.say(f"a caller in {self.binary} is shown as its address: "
                                 f"{_why(exc)}", logs.WARNING)
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


def _why(exc: Exception) -> str:
    return exc.message if isinstance(exc, NoopError) else f"{type(exc).__name__}: {exc}"
