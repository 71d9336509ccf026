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

A *Vec's children share their Desc (its id says which *Vec, not which child), and the
allocator gives a freed child's memory to the next one made: each child's own label
values (``Series.marks``) are read in the same system call as its value, just before
and just after it, and must be the child's bytes both times (a freed string's first
bytes are the allocator's list pointers), or the value is not served (gone).
"""

from __future__ import annotations

import itertools
import math
import struct
from collections.abc import Iterator
from dataclasses import dataclass
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
_COUNTS = struct.Struct("<QQ")
_MAX_COUNT = 1 << 32  # Arc counts past this: not counts (an allocator's pointers)
_READS = 7  # ranges read of one histogram
_IN_ONE = IOV_MAX // (2 * _READS + 1)  # histograms read in one system call (twice each)


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


@dataclass
class _Plan:
    """What a scrape of one set of members reads, made once for it: the counters' and
    gauges' ranges (the object from its Arc counts to its value, one range each) and
    how each unpacks (its count, its Desc id, its value); the histograms' ranges, in
    lists of at most ``_IN_ONE`` histograms (none split between two system calls)."""

    found: Found
    # counters and gauges, by kind and whether they are marked: its series, their ranges
    # (each one's marks, its record, its marks again), how one unpacks, each one's marks'
    # bytes
    scalars: list[tuple[list[Series], list[tuple[int, int]],
                        tuple[struct.Struct, str, tuple[int, int, int]], list[bytes]]]
    histograms: list[Series]
    chunks: list[list[tuple[int, int]]]


class Reader:
    """Reads the values of ``found``'s series."""

    def __init__(self, mem: CrateMemory, layout: Layout) -> None:
        self.mem = mem
        self.layout = layout
        # a histogram's bounds by (address, desc id): fixed when it is made
        self._bounds_of: dict[tuple[int, int], list[float]] = {}
        self._plan: _Plan | None = None  # the last read's (while its members are the same)
        # by id(Kind): its Struct, its number, where its count, id and value are in it
        self._unpackers: dict[int, tuple[struct.Struct, str, tuple[int, int, int]]] = {}
        # the last read of each list of records: the list, its bytes and what they held
        self._records_of: dict[int, tuple[list[tuple[int, int]], bytes, dict[int, float],
                                          list[Series]]] = {}
        # each histogram's last whole read: its bytes and its value
        self._whole_of: dict[int, tuple[list[bytes], Histogram]] = {}

    def read(self, found: Found) -> Read:
        out = Read()
        plan = self._plan
        if plan is None or plan.found is not found:
            plan = self._plan = self._planned(found)
        pending: list[Series] = []
        for series, ranges, unpack, marks in plan.scalars:
            if not self._records(series, ranges, unpack, marks, out):
                pending += self._scalars(series, ranges, [unpack] * len(series), out)
        for chunk, lists in zip(_chunked(plan.histograms), plan.chunks, strict=True):
            pending += self._histograms(chunk, lists, out)
        for _try in range(TRIES - 1):
            if not pending:
                break
            again = [s for s in pending if s.type.kind != "histogram"]
            held = [s for s in pending if s.type.kind == "histogram"]
            pending = self._scalars(again, [r for s in again for r in self._pieces(s)],
                                    [self._unpacker(s.type) for s in again], out)
            for chunk in _chunked(held):
                pending += self._histograms(chunk, self._ranges(chunk), out)
        out.torn += pending
        return out

    def _planned(self, found: Found) -> _Plan:
        series = [s for f in found.families.values() for s in f.series]
        by_kind: dict[tuple[int, bool], list[Series]] = {}
        for s in series:
            if s.type.kind != "histogram":
                by_kind.setdefault((id(s.type), bool(s.marks)), []).append(s)
        histograms = [s for s in series if s.type.kind == "histogram"]
        return _Plan(found, [(group, [r for s in group for r in self._pieces(s)],
                              self._unpacker(group[0].type),
                              [b"".join(m for _a, m in s.marks) for s in group] if marked
                              else [])
                             for (_k, marked), group in by_kind.items()],
                     histograms, [self._ranges(chunk) for chunk in _chunked(histograms)])

    def _pieces(self, s: Series) -> list[tuple[int, int]]:
        """A counter's or gauge's ranges: its marks, its record, its marks again."""
        marks = _mark_ranges(s)
        return [*marks, self._range(s), *marks]

    def _range(self, s: Series) -> tuple[int, int]:
        """A counter's or gauge's object, from its Arc counts to its value."""
        kind: Kind = s.type
        return s.address, kind.data + max(kind.val, kind.desc + self.layout.descs.id) + 8

    def _unpacker(self, kind: Kind) -> tuple[struct.Struct, str, tuple[int, int, int]]:
        """How a counter's or gauge's range unpacks: its Arc counts (16 bytes), its Desc
        id and its value, in the order they are in it."""
        got = self._unpackers.get(id(kind))
        if got is None:
            ids = kind.data + kind.desc + self.layout.descs.id
            fields = sorted([(0, "16s", 0), (ids, "Q", 1),
                             (kind.data + kind.val, "q" if kind.number == "i64" else "Q", 2)])
            fmt, at = "<", 0
            for off, code, _i in fields:
                fmt += f"{off - at}x{code}" if off > at else code
                at = off + struct.calcsize("<" + code)
            _a, size = self._range(Series((), 0, kind, 0))
            fmt += f"{size - at}x" if size > at else ""  # the whole range: a record
            where = {i: n for n, (_o, _c, i) in enumerate(fields)}
            got = (struct.Struct(fmt), kind.number, (where[0], where[1], where[2]))
            self._unpackers[id(kind)] = got
        return got

    def _scalars(self, series: list[Series], ranges: list[tuple[int, int]],
                 unpack: list[tuple[struct.Struct, str, tuple[int, int, int]]], out: Read
                 ) -> list[Series]:
        """Counters and gauges; the ones to try again (none: a value is one word)."""
        values = out.values
        got = iter(self.mem.memory.read_many(ranges))
        for s, (st, number, (a, b, c)) in zip(series, unpack, strict=True):
            before = [next(got) for _m in s.marks]
            raw = next(got)
            after = [next(got) for _m in s.marks]
            if raw is None or not _marked(s, before) or not _marked(s, after):
                out.gone.append(s)  # freed, or another child at its address
                continue
            fields = st.unpack_from(raw)
            if not _alive(fields[a]) or fields[b] != s.desc:
                out.gone.append(s)  # freed, or another object at its address
                continue
            values[s.address] = float_of(fields[c]) if number == "f64" else fields[c]
        return []

    def _records(self, series: list[Series], ranges: list[tuple[int, int]],
                 unpack: tuple[struct.Struct, str, tuple[int, int, int]], marks: list[bytes],
                 out: Read) -> bool:
        """Counters and gauges of one kind, read as records of one buffer (one C call to
        unpack them all; each between its ``marks`` where they have them); False when
        one of them does not read whole (``_scalars`` reads them then). An integer's
        value is kept an integer (written as one)."""
        st, number, (a, b, c) = unpack
        joined = self.mem.memory.read_joined(ranges)
        if joined is None or len(joined) != st.size * len(series) + 2 * sum(map(len, marks)):
            return False
        last = self._records_of.get(id(ranges))
        if last is not None and last[0] is ranges and last[1] == joined:
            out.values.update(last[2])  # every byte as at the last scrape
            out.gone += last[3]
            return True
        values: dict[int, float] = {}
        gone: list[Series] = []
        f64 = number == "f64"
        for s, fields in zip(series, _unpacked(st, joined, marks), strict=True):
            if fields is None or not _alive(fields[a]) or fields[b] != s.desc:
                gone.append(s)  # freed, or another object at its address
                continue
            values[s.address] = float_of(fields[c]) if f64 else fields[c]
        if len(self._records_of) > 4 * len(self.layout.kinds) + 16:
            self._records_of.clear()
        self._records_of[id(ranges)] = (ranges, joined, values, gone)
        out.values.update(values)
        out.gone += gone
        return True

    def _ranges(self, histograms: list[Series]) -> list[tuple[int, int]]:
        """A system call's ranges of ``histograms``: each one's Arc count and Desc id,
        then twice over its lock and shard_and_count, its shards, the lock again (one
        range with the shards where it follows them), each shard's buckets with the lock
        again after each (their pointers read now: a shard's buckets are never moved
        while the histogram lives)."""
        out: list[tuple[int, int]] = []
        vec = self.layout.vec
        ids = self.layout.descs.id
        heads = self.mem.memory.read_many([(s.address, s.type.size) for s in histograms])
        for s, raw in zip(histograms, heads, strict=True):
            k: Kind = s.type
            tail = (s.address + k.data + min(k.lock, k.hot), abs(k.hot - k.lock) + 8)
            shards = s.address + k.data + k.shards
            one = [tail, (shards, tail[0] + tail[1] - shards)] if _joined(k) else \
                [tail, (shards, 2 * k.shard_size), tail]
            for i in (0, 1):
                at = k.data + k.shards + i * k.shard_size + k.buckets
                ptr = u64(raw, at + vec.ptr) if raw is not None else 0
                n = u64(raw, at + vec.len) if raw is not None else 0
                one += [(ptr, 8 * n) if ptr and n <= 1 << 12 else (s.address, 0), tail]
            marks = _mark_ranges(s)
            out += [*marks, (s.address, k.data + k.desc + ids + 8), *one, *one, *marks]
        return out

    def _histograms(self, objects: list[Series], ranges: list[tuple[int, int]], out: Read
                    ) -> list[Series]:
        """Histograms (``_ranges``' of them, in one system call); the ones to try again."""
        if not objects:
            return []
        got = iter(self.mem.memory.read_many(ranges))
        ids = self.layout.descs.id
        again = []
        for s in objects:
            k: Kind = s.type
            before = [next(got) for _m in s.marks]
            head = next(got)
            reads = [next(got) for _i in range(2 * (_READS - _joined(k)))]
            after = [next(got) for _m in s.marks]
            if head is None or None in reads or not _alive(head[:16]) or \
                    u64(head, k.data + k.desc + ids) != s.desc or \
                    not _marked(s, before) or not _marked(s, after):
                out.gone.append(s)  # freed, or another object at its address
                continue
            # Read twice over, the same bytes: a read torn by two of the program's collects
            # in a row between two of its ranges (the reader preempted there) is not read
            # again alike.
            half = len(reads) // 2
            one: list[bytes] = reads[:half]  # type: ignore[assignment]
            was = self._whole_of.get(s.address)
            if was is not None and was[0] == one and one == reads[half:]:
                out.values[s.address] = was[1]  # every byte as at the last scrape
                continue
            first = self._whole(s, one) if one == reads[half:] else None
            if first is not None:
                if len(self._whole_of) > MAX_KEPT:
                    self._whole_of.clear()
                self._whole_of[s.address] = (one, first)
            if first is None:
                again.append(s)  # an observation or the program's own collect midway
                continue
            out.values[s.address] = first
        return again

    def _whole(self, s: Series, reads: list[bytes]) -> Histogram | None:
        """The histogram one pass of ``_some_histograms``' ranges read, if they read it
        whole: its lock free and ``shard_and_count`` the same before, between and after
        them (the program's own collect holds the lock throughout and flips
        shard_and_count once), the cold shard wholly zero and the hot one's count
        ``shard_and_count``'s (no observation half-done); else None."""
        k: Kind = s.type
        if _joined(k):  # the shards and the lock after them in one range
            first, both, each0, t2, each1, t3 = reads
            shards, t1 = both[:2 * k.shard_size], both[len(both) - len(first):]
        else:
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
        bounds = self._bounds(s)
        if not _bounds_of_a_histogram(bounds, len(each0) // 8):
            # read while the object was being freed or made (an allocator's words): read
            # again, at the next try
            self._bounds_of.pop((s.address, s.desc), None)
            return None
        value = histogram(bounds, (each0, each1)[hot], count, total)
        if len(value.buckets) > 1 and value.buckets[-2][1] > count:
            return None  # a bucket counted before the count: an observation midway
        return value

    def _bounds(self, s: Series) -> list[float]:
        key = (s.address, s.desc)
        got = self._bounds_of.get(key)
        if got is None:
            k: Kind = s.type
            at = s.address + k.data + k.bounds
            vec = self.layout.vec
            head = self.mem.memory.read(at, max(vec.ptr, vec.len) + 8)
            ptr, n = u64(head, vec.ptr), u64(head, vec.len)
            raw = self.mem.memory.read(ptr, 8 * n) if n and n <= 1 << 12 else b""
            got = [float_of(b) for b in struct.unpack(f"<{len(raw) // 8}Q", raw)]
            if len(self._bounds_of) > MAX_KEPT:
                self._bounds_of.clear()
            self._bounds_of[key] = got
        return got


def _bounds_of_a_histogram(bounds: list[float], buckets: int) -> bool:
    """Whether ``bounds`` can be a histogram's of ``buckets`` buckets: one a bucket,
    strictly increasing (no NaN), +Inf not among them (the crate refuses any other when
    it makes one, and drops a last +Inf)."""
    return len(bounds) == buckets and math.inf not in bounds and \
        all(a < b for a, b in itertools.pairwise(bounds)) and \
        not any(map(math.isnan, bounds))


def _alive(counts: bytes) -> bool:
    """Whether an ArcInner's strong and weak counts (its first 16 bytes) are those of a
    live object: a freed one's are the allocator's list pointers (glibc's tcache keeps
    its next pointer and its key there) or 0."""
    strong, weak = _COUNTS.unpack(counts)
    return bool(0 < strong < _MAX_COUNT and 0 < weak < _MAX_COUNT)


def _mark_ranges(s: Series) -> list[tuple[int, int]]:
    """The ranges ``s``'s marks are read from."""
    return [(a, len(m)) for a, m in s.marks]


def _marked(s: Series, got: list[bytes | None]) -> bool:
    """Whether ``got`` (a read of ``s``'s marks) holds their bytes."""
    return all(g == m for g, (_a, m) in zip(got, s.marks, strict=True))


def _unpacked(st: struct.Struct, joined: bytes, marks: list[bytes]
              ) -> Iterator[tuple[Any, ...] | None]:
    """The records of ``joined``, each between its marks where ``marks`` has them (one
    bytes a record): None for one whose marks are not those bytes, before or after."""
    if not marks:
        yield from st.iter_unpack(joined)
        return
    at, size = 0, st.size
    for m in marks:
        n = len(m)
        if joined[at:at + n] == m and joined[at + n + size:at + 2 * n + size] == m:
            yield st.unpack_from(joined, at + n)
        else:
            yield None
        at += 2 * n + size


def _joined(k: Kind) -> bool:
    """Whether a histogram's lock and shard_and_count follow its shards in memory: then
    the shards and they are read in one range, the shards first."""
    return k.shards + 2 * k.shard_size <= min(k.lock, k.hot)


def _chunked(histograms: list[Series]) -> list[list[Series]]:
    return [histograms[i:i + _IN_ONE] for i in range(0, len(histograms), _IN_ONE)]
