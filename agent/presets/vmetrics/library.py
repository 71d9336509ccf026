"""VictoriaMetrics/metrics as the mirror (``presets.mirror.core``) reads it: the Sets
``registeredSets`` holds (the default one among them), their named metrics and values,
through the type descriptors of the binary the process runs."""

from __future__ import annotations

import struct
from typing import Any

from agent.config.decoders import go_float
from agent.errors import NoopError
from agent.live.gomemory import GoMemory, open_process
from agent.live.memory import Damaged, Reads
from agent.presets.mirror.model import Found, Last, Now
from agent.presets.vmetrics import walk as walking
from agent.presets.vmetrics.layout import Layout, NoLayout, layout
from agent.presets.vmetrics.values import Reader

MAX_SETS = 1 << 12
MAX_PROCESSES = 256


class VMLibrary:
    """VictoriaMetrics/metrics in the Go program at ``path``."""

    name = "VictoriaMetrics/metrics"
    process_type = ""

    def __init__(self, path: str) -> None:
        from agent.binary.elf import ElfFile
        from agent.binary.gometa.program import GoProgram

        self.path = path
        self._elf = ElfFile(path)
        try:
            program = GoProgram(self._elf)
            self._types = program.types
            self.layout: Layout = layout(program)
        except NoLayout as exc:
            self._elf.close()
            raise NoopError(f"{path}: its VictoriaMetrics/metrics series cannot be read from "
                            f"its memory: {exc.message}", "noop reads the library's 1.x "
                            "layouts it can verify in the binary's type descriptors") \
                from None
        except BaseException:
            self._elf.close()
            raise
        self._segments = tuple((s.vaddr, s.offset) for s in self._elf.segments)
        self._pie = self._elf.e_type == 3  # ET_DYN
        # each process's named metrics read before (walk.members), by its memory's id
        self._named: dict[int, tuple[GoMemory, walking.Named]] = {}

    def open(self, pid: int) -> GoMemory:
        return open_process(pid, self.path, self._types, self._segments, self._pie)

    def registries(self, gm: GoMemory) -> list[int]:
        """The Sets registeredSets holds now, by address."""
        header = gm.word(self.layout.registered + gm.bias)
        got = gm.map_pairs([(header, self.layout.sets_map)], Reads(gm.memory))[0]
        if isinstance(got, Damaged):
            raise got
        sets = sorted({struct.unpack("<Q", k)[0] for k, _v in got} - {0})
        if len(sets) > MAX_SETS:
            raise Damaged(f"registeredSets holds {len(sets)} Sets", "")
        return sets

    def walk(self, gm: GoMemory, served: dict[int, tuple[int, int]]) -> Found:
        """Every registered Set, and every Set the program writes (``served``: seen by
        the probe) while every named metric of it is one of the library's."""
        try:
            sets = self.registries(gm)
        except Damaged as exc:
            return Found(damaged=[exc.message])
        return walking.walk(gm, self.layout, sets, sorted(set(served) - set(sets)))

    def walker(self, gm: GoMemory, found: Found | None = None) -> walking.Walker:
        known = self._named.get(id(gm))
        return walking.Walker(gm, self.layout, found,
                              known[1] if known is not None and known[0] is gm else None)

    def members(self, gm: GoMemory, found: Found, vecs: list[Any], last: Last | None = None,
                once: bool = False) -> tuple[Now, Last | None]:
        named = self._named.setdefault(id(gm), (gm, {}))
        if len(self._named) > MAX_PROCESSES:  # processes gone: their memos with them
            self._named = {k: v for k, v in self._named.items() if v[0] is gm}
            named = self._named.setdefault(id(gm), (gm, {}))
        return walking.members(gm, self.layout, found, vecs, last, once, named[1])

    def reader(self, gm: GoMemory) -> Reader:
        return Reader(gm, self.layout)

    def gathered(self, gm: GoMemory, values: dict[str, Any]) -> tuple[int, int, int] | None:
        """The Set ``(*Set).WritePrometheus`` was called on (a Set has no map whose
        seed tells it from another at its address: a freed one's memory is checked at
        its walk instead)."""
        s = values.get("registry")
        return (s, 0, 0) if isinstance(s, int) and s else None

    def objects(self, current: Found) -> dict[int, tuple[str, tuple[tuple[str, str], ...]]]:
        """Each metric object of ``current`` by its own address (an update's probe reads
        that, not a series' field): its name as the program writes it (a histogram's and a
        summary's without ``_count``) and its labels."""
        lay = self.layout
        out: dict[int, tuple[str, tuple[tuple[str, str], ...]]] = {}
        for f in current.families.values():
            for s in f.series:
                tag = s.type[0]
                if tag == "u64":
                    out[s.address - lay.counter_n] = (f.name, s.labels)
                elif tag == "f64":
                    out[s.address - lay.float_n] = (f.name, s.labels)
                elif tag in ("hcount", "scount") and f.name.endswith("_count"):
                    out[s.type[1]] = (f.name[:-len("_count")], s.labels)
        return out

    def bound(self, x: float) -> str:
        return go_float(x)

    def own_pid_fns(self) -> frozenset[int]:
        return frozenset()

    def close(self) -> None:
        self._elf.close()


def uses(path: str) -> bool:
    """Whether the Go program at ``path`` keeps metrics with VictoriaMetrics/metrics and
    not with client_golang (whose mirror it gets then)."""
    from agent.binary.elf import ElfFile
    from agent.binary.gometa.program import GoProgram
    from agent.plan.libraries import CLIENT_GOLANG
    from agent.presets.vmetrics.facts import PKG

    with ElfFile(path) as elf:
        types = GoProgram(elf).types
        return types.find(f"{PKG}.Set") is not None and \
            types.find(f"{CLIENT_GOLANG}.Registry") is None
