"""What a loaded program's maps and ring buffer hold, read from noop: the records the
ring has, the per-probe counts (records made and lost, read faults, unpaired returns,
cancelled calls), the hits per site and process, each aggregate's rows; and the rows
noop makes at load (each aggregate's overflow row, each site's row of process 0, the
process each target is limited to)."""

from __future__ import annotations

import struct
from collections.abc import Callable

from agent.kernel import aggregate, bpfsys, ringbuf
from agent.kernel.objects import Object
from agent.kernel.program import Program
from agent.plan.model import Plan


class Tables:
    """The maps and ring buffer of a loaded program: ``load.Loaded``, which loads it,
    sets these."""

    plan: Plan
    program: Program
    obj: Object | None
    ring: ringbuf.Ring | None

    def traps(self) -> dict[tuple[int, int], int]:
        """Hits per (site, process) since loading, as the programs counted them: every
        trap, also of processes a --pid filter then leaves out (process 0: those the
        map had no room for). Sites are numbered as ``Program.sites``."""
        return trap_counts(self._map("noop_traps"))

    def forget_traps(self, pids: set[int]) -> None:
        """Delete the hit counts of processes that exited."""
        table = self._map("noop_traps")
        for k in table.listed():
            if struct.unpack("<II", k)[1] in pids:
                table.delete(k)

    def wait(self, timeout: float) -> None:
        """Block up to ``timeout`` seconds, or until a record that wakes readers."""
        assert self.ring is not None
        self.ring.wait(timeout)

    def read(self, on_run: Callable[[ringbuf.Run], None]) -> int:
        """Hand every record committed so far to ``on_run``, in runs of one probe; the
        number of records."""
        assert self.ring is not None
        n = 0
        for run in self.ring.batch():
            on_run(run)
            n += run.count
        return n

    def _map(self, name: str) -> bpfsys.Map:
        assert self.obj is not None
        return self.obj.maps[name]

    def _per_probe(self, name: str) -> dict[int, int]:
        table = self._map(name)
        out = {}
        for pi in range(len(self.plan.probes)):
            out[pi] = sum(int.from_bytes(row[:8], "little")
                          for row in table.rows(pi.to_bytes(4, "little")))
        return out

    def lost(self) -> int:
        return sum(self.lost_by_probe().values())

    def lost_by_probe(self) -> dict[int, int]:
        """Records the ring buffer had no room for, per probe (counted in the kernel)."""
        return self._per_probe("noop_lost")

    def produced(self) -> dict[int, int]:
        """Records the BPF programs made, sent or lost, per probe (counted in the kernel)."""
        return self._per_probe("noop_produced")

    def faults(self) -> dict[int, int]:
        return self._per_probe("noop_faults")

    def unpaired(self) -> dict[int, int]:
        """Returns of exit probes whose call's entry was not seen, per probe."""
        return self._per_probe("noop_unpaired")

    def cancelled(self) -> dict[int, int]:
        """Calls of async fns whose future was dropped before it completed, per probe."""
        return self._per_probe("noop_cancelled")

    def rows(self, probe: int) -> list[tuple[bytes, list[bytes]]]:
        """A probe's in-kernel aggregate: every key with its per-CPU rows, as raw bytes
        (``aggregate.merge`` reads them)."""
        table = self._map(f"noop_agg_{probe}")
        lay = self.program.aggregates[probe]
        if lay.keyless:  # an array of one row: its key is the one a hash would have
            return [(bytes(lay.key_size), table.rows(bytes(4)))]
        out = []
        for k in table.listed():
            got = table.rows(k)
            if got:  # deleted since the keys were listed: gone
                out.append((k, got))
        return out

    def forget(self, probe: int, keys: list[bytes]) -> None:
        """Delete rows (of processes that exited) from a probe's aggregate."""
        if self.program.aggregates[probe].keyless:
            return  # no key, no process: nothing to forget
        table = self._map(f"noop_agg_{probe}")
        for raw in keys:
            table.delete(raw)

    def take(self, probe: int, keys: list[bytes]) -> list[tuple[bytes, list[bytes]]]:
        """Rows of a probe's aggregate, each read and deleted at once: what each held
        last, no hit lost between the two."""
        table = self._map(f"noop_agg_{probe}")
        return [(raw, got) for raw in keys if (got := table.take(raw))]

    def _overflow_rows(self) -> None:
        """Create each aggregate's overflow row now, so that a full map still has it."""
        for pi, lay in self.program.aggregates.items():
            if lay.keyless:
                continue
            table = self._map(f"noop_agg_{pi}")
            table.update(bytes([aggregate.OVERFLOW]) * lay.key_size,
                         bytes(table.d.value_size))  # zeroes on every CPU

    def _trap_rows(self) -> None:
        """Create each site's row of process 0 now: hits of processes past the map's
        room are counted there."""
        table = self._map("noop_traps")
        zero = bytes(table.d.value_size)
        for n in range(len(self.program.sites)):
            table.update(struct.pack("<II", n, 0), zero)

    def _only(self) -> None:
        """The process each target is limited to, where it is (``codegen.only_c``)."""
        table = self._map("noop_only")
        for ti, target in enumerate(self.plan.targets):
            if target.pid is not None:
                table.update(struct.pack("<I", ti), struct.pack("<I", target.pid))


def trap_counts(table: bpfsys.Map) -> dict[tuple[int, int], int]:
    """A noop_traps map's hits, per (site, process), summed over the CPUs."""
    out = {}
    for k in table.listed():
        site, pid = struct.unpack("<II", k)
        out[(site, pid)] = sum(int.from_bytes(v[:8], "little") for v in table.rows(k))
    return out
