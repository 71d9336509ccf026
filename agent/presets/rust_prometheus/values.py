"""What a scrape reads of a Rust program's prometheus crate metrics: the members of its
registries and *Vecs (``members``: each map's buckets, read twice to agree as
client_golang's are) and their values (``Reader``), in a few batched reads for all of
them.

Values. A counter's or gauge's ``Value.val`` is one word (u64, i64 or an f64's bits),
read with the object's Arc count and Desc id: an object whose count is 0, or whose id
is not the one it was found with, is gone. A histogram is read in one system call as
its lock and ``shard_and_count``, its two shards, the lock again, the first shard's
buckets, the lock again, the second's, the lock again; twice over. A pass is whole when
the lock was free and ``shard_and_count`` the same at each of its four reads (the
crate's own collect holds the lock throughout: it flips ``shard_and_count``, zeroes the
cold shard's count, swaps its sum out, moves its buckets one by one, then adds the
count and, last, the sum to the hot shard), the cold shard wholly zero and the hot
one's count ``shard_and_count``'s (no observation half-done); the read is taken when
both passes are whole and alike (a pass torn by two whole collects between two of its
ranges, the reader preempted there, is not torn alike twice). Otherwise it is read
again a few times, then left out of this scrape (``Read.torn``).
"""

from __future__ import annotations

import struct
from typing import Any

from agent.live.memory import IOV_MAX, Damaged, Reads
from agent.presets.common import float_of
from agent.presets.mirror import model
from agent.presets.mirror.model import Found, Histogram, Last, Now, Read, Series, histogram
from agent.presets.rust_prometheus.layout import Kind, Layout
from agent.presets.rust_prometheus.memory import CrateMemory, tables, u64
from agent.presets.rust_prometheus.walk import Reg, Vec

TRIES = 4  # reads of a value before it is left out of the scrape
MAX_KEPT = 1 << 17  # histograms whose bounds a Reader keeps
_COUNT = (1 << 63) - 1
_I64 = struct.Struct("<q")
_READS = 7  # ranges read of one histogram
_IN_ONE = IOV_MAX // (2 * _READS)  # histograms read in one system call (twice each)


def members(mem: CrateMemory, layout: Layout, found: Found, vecs: list[Any],
            last: Last | None = None, once: bool = False) -> tuple[Now, Last | None]:
    """The members of ``found``'s registries and of ``vecs`` now, and the read to give
    the next call as ``last`` (as client_golang's: two reads that agree, or each map as
    two agreed; ``once``: one read, for a caller that reads them again after)."""
    return model.members(mem.memory, found, vecs,
                         lambda reads: _once(layout, found.regs, vecs, reads), last, once)


def _once(layout: Layout, regs: list[Reg], vecs: list[Vec], reads: Reads) -> Now:
    now = Now()
    t = layout.collectors
    got = tables([(r.address + layout.core, t) for r in regs] +
                 [(v.core, v.table) for v in vecs], reads)
    for r, g in zip(regs, got, strict=False):
        if isinstance(g, Damaged) or g[0] != r.keys or len(g[1]) > (1 << 16):
            now.regs.append(None)  # another map at its address: not the registry
            continue
        now.regs.append({(u64(raw, t.key), u64(raw, t.value + 8), u64(raw, t.value))
                         for raw in g[1]})
    for v, g in zip(vecs, got[len(regs):], strict=True):
        if isinstance(g, Damaged) or g[0] != v.keys:
            now.children[id(v)] = None
            continue
        now.children[id(v)] = [(u64(raw, v.table.key), 0, u64(raw, v.table.value))
                               for raw in g[1]]
    return now


class Reader:
    """Reads the values of ``found``'s series."""

    def __init__(self, mem: CrateMemory, layout: Layout) -> None:
        self.mem = mem
        self.layout = layout
        # a histogram's bounds by (address, desc id): fixed when it is made
        self._bounds_of: dict[tuple[int, int], list[float]] = {}
        # the last read's series and ranges (while its members are the same)
        self._flat: tuple[Found, list[Series], list[tuple[int, int]]] | None = None

    def read(self, found: Found) -> Read:
        out = Read()
        if self._flat is None or self._flat[0] is not found:
            series = [s for f in found.families.values() for s in f.series]
            self._flat = (found, series, [self._range(s) for s in series])
        _found, pending, ranges = self._flat
        pending = self._once(pending, out, ranges)
        for _try in range(TRIES - 1):
            if not pending:
                break
            pending = self._once(pending, out)
        out.torn += pending
        return out

    def _range(self, s: Series) -> tuple[int, int]:
        kind: Kind = s.type
        if kind.kind == "histogram":
            return s.address, kind.size
        end = kind.data + max(kind.val, kind.desc + self.layout.descs.id) + 8
        return s.address, end

    def _once(self, series: list[Series], out: Read,
              ranges: list[tuple[int, int]] | None = None) -> list[Series]:
        """Reads ``series``; the ones to try again."""
        got = self.mem.memory.read_many(ranges if ranges is not None else
                                        [self._range(s) for s in series])
        ids = self.layout.descs.id
        again: list[Series] = []
        histograms: list[tuple[Series, bytes]] = []
        for s, raw in zip(series, got, strict=True):
            kind: Kind = s.type
            if raw is None or u64(raw, 0) == 0 or \
                    u64(raw, kind.data + kind.desc + ids) != s.desc:
                out.gone.append(s)  # freed, or another object at its address
                continue
            if kind.kind == "histogram":
                histograms.append((s, raw))
                continue
            bits = u64(raw, kind.data + kind.val)
            out.values[s.address] = float_of(bits) if kind.number == "f64" else \
                float(_I64.unpack_from(raw, kind.data + kind.val)[0]) \
                if kind.number == "i64" else float(bits)
        again += self._histograms(histograms, out)
        return again

    def _histograms(self, objects: list[tuple[Series, bytes]], out: Read) -> list[Series]:
        """Histograms: each one's shards and both shards' buckets, with its lock and
        ``shard_and_count`` read before, between and after them, in this order in one
        system call (``_IN_ONE`` histograms a call: none split between two)."""
        again: list[Series] = []
        for i in range(0, len(objects), _IN_ONE):
            again += self._some_histograms(objects[i:i + _IN_ONE], out)
        return again

    def _some_histograms(self, objects: list[tuple[Series, bytes]], out: Read
                         ) -> list[Series]:
        wanted: list[tuple[int, int]] = []
        vec = self.layout.vec
        for s, raw in objects:
            k: Kind = s.type
            tail = (s.address + k.data + min(k.lock, k.hot), abs(k.hot - k.lock) + 8)
            one = [tail, (s.address + k.data + k.shards, 2 * k.shard_size), tail]
            for i in (0, 1):
                at = k.data + k.shards + i * k.shard_size + k.buckets
                ptr, n = u64(raw, at + vec.ptr), u64(raw, at + vec.len)
                one += [(ptr, 8 * n) if ptr and n <= 1 << 12 else (s.address, 0), tail]
            wanted += one + one
        got = iter(self.mem.memory.read_many(wanted))
        again = []
        for s, raw in objects:
            reads = [next(got) for _i in range(2 * _READS)]
            if any(r is None for r in reads):
                out.gone.append(s)
                continue
            first = self._whole(s, raw, reads[:_READS])  # type: ignore[arg-type]
            # Read twice over, the same: a read torn by two of the program's collects in
            # a row between two of its ranges (the reader preempted there) is not read
            # again alike.
            if first is None or first != self._whole(s, raw, reads[_READS:]):  # type: ignore[arg-type]
                again.append(s)  # an observation or the program's own collect midway
                continue
            out.values[s.address] = first
        return again

    def _whole(self, s: Series, raw: bytes, reads: list[bytes]) -> Histogram | None:
        """The histogram one pass of ``_some_histograms``' ranges read, if they read it
        whole: its lock free and ``shard_and_count`` the same before, between and after
        them (the program's own collect holds the lock throughout and flips
        shard_and_count once), the cold shard wholly zero and the hot one's count
        ``shard_and_count``'s (no observation half-done); else None."""
        k: Kind = s.type
        first, shards, t1, each0, t2, each1, t3 = reads
        base = min(k.lock, k.hot)
        lock = int.from_bytes(first[k.lock - base:k.lock - base + 4], "little")
        n = u64(first, k.hot - base)
        hot = n >> 63
        halves = [i * k.shard_size for i in (0, 1)]
        cold_each = (each0, each1)[1 - hot]
        if lock or not first == t1 == t2 == t3 or \
                u64(shards, halves[1 - hot] + k.count) or \
                u64(shards, halves[1 - hot] + k.sum) or \
                cold_each.count(0) != len(cold_each) or \
                u64(shards, halves[hot] + k.count) != n & _COUNT:
            return None
        count, total = n & _COUNT, float_of(u64(shards, halves[hot] + k.sum))
        value = histogram(self._bounds(s, raw), (each0, each1)[hot], count, total)
        if len(value.buckets) > 1 and value.buckets[-2][1] > count:
            return None  # a bucket counted before the count: an observation midway
        return value

    def _bounds(self, s: Series, core: bytes) -> list[float]:
        key = (s.address, s.desc)
        got = self._bounds_of.get(key)
        if got is None:
            k: Kind = s.type
            at = k.data + k.bounds
            ptr, n = u64(core, at + self.layout.vec.ptr), u64(core, at + self.layout.vec.len)
            raw = self.mem.memory.read(ptr, 8 * n) if n and n <= 1 << 12 else b""
            got = [float_of(b) for b in struct.unpack(f"<{len(raw) // 8}Q", raw)]
            if len(self._bounds_of) > MAX_KEPT:
                self._bounds_of.clear()
            self._bounds_of[key] = got
        return got
