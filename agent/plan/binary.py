"""One target binary opened for resolving: its ELF, DWARF, functions and type walker,
with the facts placement needs (the goroutine register's offsets, runtime.morestack,
each function's instructions)."""

from __future__ import annotations

import bisect
from dataclasses import replace
from functools import cached_property
from pathlib import Path

from agent.binary import debuginfo, isa, proof, sites
from agent.binary.dwarf.functions import Functions
from agent.binary.dwarf.lookup import find_type
from agent.binary.dwarf.reader import Dwarf
from agent.binary.dwarf.types import TypeNamer
from agent.binary.elf import ElfFile
from agent.binary.gometa import buildinfo
from agent.binary.gometa.image import Image
from agent.binary.gometa.scope import Scope
from agent.config.selector import Selector, through_proc
from agent.errors import NoopError
from agent.plan.model import ProbePlan, Site, TargetPlan
from agent.plan.selectors.walker import Walker

# runtime.g.goid by Go version, for stripped builds whose runtime.g has no type
# descriptor; each checked in the tests against DWARF of that toolchain's builds.
GOID_OFFSETS = {(1, 19): 152, (1, 21): 152, (1, 24): 160, (1, 26): 152, (1, 27): 152}


class Binary:
    """One target binary opened for resolving: ELF, DWARF, functions, type walker."""

    def __init__(self, path: str, scope: Scope | None = None,
                 given: debuginfo.Given = debuginfo.NOTHING) -> None:
        elf = ElfFile(path)
        dwarf = Dwarf(elf, debuginfo.locate(elf, scope, given))
        self._use(path, given, elf, dwarf, TypeNamer(dwarf))

    @classmethod
    def opened(cls, elf: ElfFile, dwarf: Dwarf, namer: TypeNamer) -> Binary:
        """The binary whose ELF and DWARF a caller has open already."""
        b = cls.__new__(cls)
        b._use(str(elf.path), debuginfo.NOTHING, elf, dwarf, namer)
        return b

    def _use(self, path: str, given: debuginfo.Given, elf: ElfFile, dwarf: Dwarf,
             namer: TypeNamer) -> None:
        self.path, self.given, self.elf, self.dwarf, self.namer = path, given, elf, dwarf, \
            namer
        self.functions = Functions(dwarf, namer)
        self.walker = Walker(dwarf, namer)
        self.arch = elf.arch
        self.isa = isa.of(elf.arch.name)  # decoding, the kernel's handling of a uprobe
        self._insns: dict[str, tuple[sites.Insn, ...]] = {}
        self._codes: proof.Codes = {}  # the code of the functions sites were proven in

    @cached_property
    def goid_offset(self) -> int | None:
        """Offset of runtime.g.goid when the program keeps g in r14 (Go register ABI)."""
        if self.dwarf.language != "go":
            return None
        try:
            g = find_type(self.dwarf, "runtime.g")
        except NoopError:
            # A stripped build whose runtime.g has no type descriptor: the offset its
            # Go version is known to have.
            version = self.build.version if self.build else None
            return GOID_OFFSETS.get(version) if self.dwarf.from_metadata and version \
                else None
        goid = self.walker.members(g).get("goid")
        return goid[0] if goid is not None else None

    @cached_property
    def build(self) -> buildinfo.BuildInfo | None:
        """The Go build info: toolchain and module versions (None for other programs)."""
        return buildinfo.read(Image(self.elf))

    def modules(self, *paths: str) -> tuple[tuple[str, str], ...]:
        """(module, version) of the modules that provide packages ``paths``; the version
        is "unknown" for a build without module information (GOPATH mode)."""
        if self.build is None:
            return ()
        unknown = "version unknown (not in the build info)" if self.build.deps else \
            "version unknown (built without module information)"
        out = []
        for path in paths:
            m = self.build.module(path)
            out.append((m.path, m.version) if m is not None else (path, unknown))
        return tuple(out)

    @cached_property
    def morestack(self) -> frozenset[int]:
        """Addresses of the Go runtime's stack-growth entry points."""
        return frozenset(s.address for n, s in self.functions.symbols.items()
                         if n.startswith("runtime.morestack"))

    def instructions(self, function: str) -> tuple[sites.Insn, ...]:
        got = self._insns.get(function)
        if got is None:
            sym = self.functions.symbols.get(function)
            if sym is None:  # said as find says it
                sym, _die = self.functions.find(function)
            got = self._insns[function] = self.isa.disassemble(self.elf, sym.address,
                                                               max(sym.size, 1))
        return got

    @cached_property
    def stack_hi_offset(self) -> int | None:
        """Offset of runtime.g.stack.hi: the top of the goroutine's stack, from which a
        frame's depth stays the same when Go moves the stack."""
        if self.goid_offset is None:
            return None
        g = find_type(self.dwarf, "runtime.g")
        stack = self.walker.members(g).get("stack")
        hi = self.walker.members(stack[1]).get("hi") if stack and stack[1] else None
        return stack[0] + hi[0] if stack is not None and hi is not None else None

    @cached_property
    def _by_address(self) -> list[tuple[int, int, str]]:
        return sorted((s.address, s.address + s.size, s.name)
                      for s in self.elf.function_symbols() if s.size)

    def function_at(self, address: int) -> str | None:
        """The function whose code holds ``address``."""
        table = self._by_address
        i = bisect.bisect_right(table, (address, 2**64)) - 1
        return table[i][2] if i >= 0 and table[i][0] <= address < table[i][1] else None

    def code_holding(self, address: int) -> tuple[int, int]:
        """(first address, size) of the function whose code holds ``address``: its
        symbol, else its DWARF entry's range there."""
        table = self._by_address
        i = bisect.bisect_right(table, (address, 2**64))
        # a symbol inside another: the nearest that holds it
        for lo, hi, _name in reversed(table[max(0, i - 8):i]):
            if lo <= address < hi:
                return lo, hi - lo
        die = self.dwarf.subprogram_holding(address)
        for lo, hi in self.dwarf.ranges(die) if die is not None else ():
            if lo <= address < hi:
                return lo, hi - lo
        raise proof.Unprovable(f"no function holds {address:#x}")

    def prove_at(self, address: int) -> proof.Proof:
        """That ``address`` starts an instruction of this build (Unprovable if not)."""
        return proof.make(self.elf, self.code_holding(address), address, self._codes)

    def prove(self, site: Site) -> Site:
        """``site`` with the proof that its offset starts an instruction of this build."""
        return replace(site, proof=self.prove_at(site.address))

    def proven(self, probe: ProbePlan) -> ProbePlan:
        """``probe`` with every site proven (Unprovable for one that cannot be)."""
        return replace(probe, sites=tuple(self.prove(s) for s in probe.sites))

    def symbol_name(self, address: int) -> str:
        """The function at ``address`` as a user writes it (demangled), else the address."""
        name = self.function_at(address)
        return self.functions.display_name(name) if name else f"{address:#x}"

    def start_of(self, function: str | None) -> int:
        sym = self.functions.symbols.get(function or "")
        return sym.address if sym is not None else 0

    def plan(self, name: str, pid: int | None, also: tuple[str, ...] = (),
             selector: Selector | None = None, pinned: bool = True,
             modules: tuple[tuple[str, str], ...] = ()) -> TargetPlan:
        # A path through /proc/PID/root reaches another mount namespace's file: resolving
        # its links would name a path of that namespace instead.
        path = self.path if through_proc(self.path) \
            else str(Path(self.path).resolve())
        where = self.dwarf.source.how if self.dwarf.source.kind != "separate" \
            else f"{self.dwarf.source.path} ({self.dwarf.source.how})"
        return TargetPlan(name, path, self.elf.build_id, self.dwarf.language, pid,
                          self.goid_offset, self.stack_hi_offset, also, selector, pinned,
                          where, self.elf.go_version, modules, self.arch.name)
