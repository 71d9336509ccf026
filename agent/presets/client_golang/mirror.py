"""client_golang as the mirror (``presets.mirror.core``) reads it: a Go program's
registries found through its globals' itabs (``registry``), their members read again
at each scrape (``members``), their values (``readings``), through the type
descriptors of the binary the process runs (``live.gomemory``)."""

from __future__ import annotations

from typing import Any

from agent.config.decoders import go_float
from agent.live.gomemory import GoMemory, open_process
from agent.presets.client_golang import members, readings, registry
from agent.presets.mirror.model import Found, Last, Now


class GoLibrary:
    """client_golang in the Go program at ``path``."""

    name = "client_golang"
    process_type = registry.PROCESS

    def __init__(self, path: str) -> None:
        from agent.binary.elf import ElfFile
        from agent.binary.gometa.program import GoProgram

        self.path = path
        self._elf = ElfFile(path)
        try:
            self._types = GoProgram(self._elf).types
        except BaseException:
            self._elf.close()
            raise
        self._segments = tuple((s.vaddr, s.offset) for s in self._elf.segments)
        self._pie = self._elf.e_type == 3  # ET_DYN
        self._pid_fns: frozenset[int] | None = None

    def open(self, pid: int) -> GoMemory:
        return open_process(pid, self.path, self._types, self._segments, self._pie)

    def registries(self, gm: GoMemory) -> list[int]:
        return registry.registries(gm, self._elf)

    def walk(self, gm: GoMemory, served: dict[int, tuple[int, int]]) -> Found:
        return registry.walk(gm, self._elf, served)

    def walker(self, gm: GoMemory, found: Found | None = None) -> registry.Walker:
        return registry.Walker(gm, found)

    def members(self, gm: GoMemory, found: Found, vecs: list[Any], last: Last | None = None,
                once: bool = False) -> tuple[Now, Last | None]:
        return members.read(gm, found, vecs, last, once)

    def reader(self, gm: GoMemory) -> readings.Reader:
        return readings.Reader(gm)

    def gathered(self, gm: GoMemory, values: dict[str, Any]) -> tuple[int, int, int] | None:
        """The registry ``(*Registry).Gather`` was called on, its map of collectors'
        header and its hash seed (from the header's second word, as Gather started)."""
        reg, header, second = values.get("registry"), values.get("collectors"), \
            values.get("seed")
        if not isinstance(reg, int) or not isinstance(header, int) or not reg or \
                not header or not isinstance(second, int):
            return None
        return reg, header, gm.seed_of(second)

    def bound(self, x: float) -> str:
        return go_float(x)

    def own_pid_fns(self) -> frozenset[int]:
        """The link-time entries of the functions client_golang makes a pidFn of."""
        if self._pid_fns is None:
            from agent.binary.gometa.program import GoProgram

            self._pid_fns = frozenset(f.entry for f in GoProgram(self._elf).functions
                                      if f.name in registry.DEFAULT_PID_FNS)
        return self._pid_fns

    def close(self) -> None:
        self._elf.close()
