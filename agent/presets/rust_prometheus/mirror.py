"""The prometheus crate as the mirror (``presets.mirror.core``) reads it: a Rust
program's registries found in its statics (``layout.holders``) and through the
preset's probe where it gathers one, walked (``walk``), their members and values read
at each scrape (``values``), by the offsets the build's DWARF gives (``layout``)."""

from __future__ import annotations

import math
from typing import Any

from agent.config.decoders import rust_float
from agent.errors import NoopError
from agent.live.memory import Unreadable
from agent.presets.mirror.model import Found, Last, Now
from agent.presets.rust_prometheus import values
from agent.presets.rust_prometheus import walk as walking
from agent.presets.rust_prometheus.layout import Layout, NoLayout
from agent.presets.rust_prometheus.memory import CrateMemory, open_process


class CrateLibrary:
    """The prometheus crate in the Rust program at ``path``."""

    name = "prometheus crate"
    process_type = "prometheus::process_collector::ProcessCollector"

    def __init__(self, path: str, debug: str | None = None) -> None:
        from agent.binary import debuginfo
        from agent.binary.dwarf.damage import damage_said
        from agent.binary.dwarf.reader import Dwarf
        from agent.binary.dwarf.types import TypeNamer
        from agent.binary.elf import ElfFile
        from agent.presets.rust_prometheus.layout import layout

        self.path = path
        with ElfFile(path) as elf:
            self._segments = tuple((s.vaddr, s.offset) for s in elf.segments)
            # the file's own bytes, where no Arc's allocation is
            self._image = (min((s.vaddr for s in elf.segments), default=0),
                           max((s.vaddr + s.filesz for s in elf.segments), default=0))
            self._pie = elf.e_type == 3  # ET_DYN
            with damage_said(path):
                dwarf = Dwarf(elf, debuginfo.locate(elf, None, debuginfo.Given(debug)))
                try:
                    self.layout: Layout = layout(dwarf, TypeNamer(dwarf))
                except NoLayout as exc:
                    raise NoopError(f"{path}: the prometheus crate's metrics cannot be read "
                                    f"from its memory: {exc.message}",
                                    exc.hint or "build it with debug = 2 in its Cargo profile, "
                                    "or give its debug file (--debuginfo)") from None
                finally:
                    dwarf.close()

    def open(self, pid: int) -> CrateMemory:
        return open_process(pid, self.path, self._segments, self._pie)

    def registries(self, mem: CrateMemory) -> list[int]:
        """The registries the statics hold now: not one not made yet (0, or a LazyLock's
        initializer where its value will be: a pointer into the binary's own image, where
        no Arc is allocated)."""
        holders = self.layout.holders
        got = mem.memory.read_many([(h.address + mem.bias + h.arc, 8) for h in holders])
        lo, hi = self._image[0] + mem.bias, self._image[1] + mem.bias
        out: list[int] = []
        for raw in got:
            reg = int.from_bytes(raw, "little") if raw is not None else 0
            if reg and not lo <= reg < hi and reg not in out:
                out.append(reg)
        return out

    def walk(self, mem: CrateMemory, served: dict[int, tuple[int, int]]) -> Found:
        try:
            holders = self.registries(mem)
        except Unreadable:
            holders = []
        return walking.walk(mem, self.layout, holders, served)

    def walker(self, mem: CrateMemory, found: Found | None = None) -> walking.Walker:
        return walking.Walker(mem, self.layout, found)

    def members(self, mem: CrateMemory, found: Found, vecs: list[Any],
                last: Last | None = None, once: bool = False) -> tuple[Now, Last | None]:
        return values.members(mem, self.layout, found, vecs, last, once)

    def reader(self, mem: CrateMemory) -> values.Reader:
        return values.Reader(mem, self.layout)

    def gathered(self, mem: CrateMemory, got: dict[str, Any]) -> tuple[int, int, int] | None:
        """The registry the program gathered: its ArcInner (the probe reads the
        ``RegistryCore`` it was called on, or the ``Registry``'s ArcInner) and its map of
        collectors' hasher keys."""
        core, reg = got.get("core"), got.get("registry")
        k0, k1 = got.get("collectors"), got.get("seed")
        if isinstance(core, int) and core:
            reg = core - self.layout.core
        if not isinstance(reg, int) or not reg or not isinstance(k0, int) or \
                not isinstance(k1, int):
            return None
        return reg, k0, k1

    def bound(self, x: float) -> str:
        """A bucket's bound as the crate's text encoder writes it: Rust's Display of
        the f64, and ``+Inf`` for the bucket it adds last."""
        return "+Inf" if x == math.inf else rust_float(x)

    def own_pid_fns(self) -> frozenset[int]:
        return frozenset()

    def close(self) -> None:
        pass
