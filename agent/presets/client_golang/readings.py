"""client_golang metric values read from a running program's memory, in a few batched
reads for every series at once: a counter's ``valBits`` + ``valInt``, a gauge's
``valBits``, a histogram's buckets, count and sum, a summary's count and sum, and a
summary with objectives' quantiles, computed as its Write would on a copy of its
buffer and of the stream that would be head (``quantiles``).

Nothing is written and nothing is stopped, so every read is checked before it is
believed. An object must still be itself: its ``selfCollector.self`` interface points
back at it with its own type, and its ``desc`` is the one it was found with (a freed
and reused address fails either). A histogram (and a summary without objectives) is
taken only when ``countAndHotIdx`` is the same before and after, its cold half is
all zero (count, sum and buckets: the program's own scrape, ``Write``, adds the cold
count to the hot one and zeroes it before it moves the buckets and, last, the sum) and
its hot half's count is ``countAndHotIdx``'s low 63 bits (no observation half-done, no
scrape of the program's own half-way); a summary with objectives only while both its
mutexes are unlocked before and after (its struct the same, which a Write or a flush
in between would change), as ``cnt`` plus the buffered observations. A read that fails
these is tried again a few times; then the series is left out of this scrape, said in
``Read.torn``.
"""

from __future__ import annotations

import struct
import time
from dataclasses import dataclass

from agent.binary.gometa.gotype import GoType
from agent.live.gomemory import GoMemory
from agent.live.memory import Damaged, Reads, Unreadable
from agent.presets.client_golang import quantiles
from agent.presets.common import float_of as _f
from agent.presets.mirror.model import Found, Read, Series, Summary, histogram

TRIES = 4
_COUNTER, _GAUGE, _HALVES, _BUFFERED = range(4)
_CODES = {"counter": _COUNTER, "gauge": _GAUGE, "histogram": _HALVES,
          "noObjectivesSummary": _HALVES, "summary": _BUFFERED}
MAX_KEPT = 1 << 17  # histograms whose bounds a Reader keeps
_COUNT = (1 << 63) - 1


def _u64(raw: bytes, at: int) -> int:
    return int.from_bytes(raw[at:at + 8], "little")


_WORD = struct.Struct("<Q")
# two words: an interface value's itab and data word, the two halves' pointers, a
# slice's pointer and length
_TWO_WORDS = struct.Struct("<QQ")


@dataclass(frozen=True, slots=True)
class _Layout:
    """A metric type's size and the offsets of its selfCollector, desc, valBits and
    valInt (0 where it has none)."""

    name: str  # as DWARF names it: *github.com/.../prometheus.counter
    kind: str  # counter, gauge, histogram, summary, noObjectivesSummary
    code: int  # how it is read: _COUNTER, _GAUGE, _HALVES, _BUFFERED
    size: int
    self_at: int
    desc_at: int
    bits_at: int
    int_at: int


@dataclass(frozen=True, slots=True)
class _Halves:
    """Where a histogram's (or a summary's without objectives) type keeps its
    ``counts`` pointers and ``countAndHotIdx``, the halves' size, and where a half keeps
    its count, sum and buckets (-1: a summary's halves have none)."""

    counts_at: int
    hot_at: int
    half_size: int
    count_at: int
    sum_at: int
    buckets_at: int


class Reader:
    """Reads the values of ``found``'s series."""

    def __init__(self, gm: GoMemory) -> None:
        self.gm = gm
        self._offsets: dict[int, dict[str, int]] = {}
        # Kept from scrape to scrape (a process's Reader lives as long as it is followed):
        # the type each itab is of (itabs are never freed), and a histogram's bucket
        # bounds by (address, desc) (fixed when it is made; an object that is not itself
        # any more is never read).
        self._itab_types: dict[int, str] = {}
        self._bounds_of: dict[tuple[int, int], list[float]] = {}
        self._layouts: dict[int, _Layout] = {}
        self._halves_layouts: dict[int, _Halves] = {}
        # the last read's series, their layouts and ranges (while its members are the same)
        self._flat: tuple[Found, list[Series], list[_Layout], list[tuple[int, int]]] | None \
            = None
        self._quantiled: dict[int, _Quantiled] = {}
        # a summary's quantiles by its address, with what they were computed from (the
        # struct, its head stream's samples and buffer, which stream, its rotations)
        self._quantiles_of: dict[int, tuple[tuple[object, ...],
                                            tuple[tuple[float, float], ...]]] = {}
        self._objectives_of: dict[tuple[int, int], tuple[tuple[tuple[float, float], ...],
                                                         list[float]]] = {}

    def _off(self, t: GoType, name: str) -> int:
        by = self._offsets.setdefault(id(t), {})
        if name not in by:
            by[name] = self.gm.field(t, name)
        return by[name]

    def read(self, found: Found) -> Read:
        out = Read()
        if self._flat is None or self._flat[0] is not found:  # another scrape's members
            series = [s for f in found.families.values() for s in f.series]
            layouts = [self._layout(s.type) for s in series]
            self._flat = (found, series, layouts,
                          [(s.address, lay.size) for s, lay in zip(series, layouts,
                                                                     strict=True)])
        _found, pending, layouts, ranges = self._flat
        pending = self._once(pending, out, layouts, ranges)
        for _try in range(TRIES - 1):  # the ones to try again: their own layouts, ranges
            if not pending:
                break
            pending = self._once(pending, out)
        out.torn += pending
        return out

    def _once(self, series: list[Series], out: Read, layouts: list[_Layout] | None = None,
              ranges: list[tuple[int, int]] | None = None) -> list[Series]:
        """Reads ``series`` (their ``layouts`` and ``ranges``, when known, the same list
        from scrape to scrape: its reads are prepared once); the ones to try again."""
        if layouts is None or ranges is None:
            layouts = [self._layout(s.type) for s in series]
            ranges = [(s.address, lay.size) for s, lay in zip(series, layouts, strict=True)]
        raws = self.gm.memory.read_many(ranges)
        again: list[Series] = []
        histograms: list[tuple[Series, bytes]] = []
        summaries: list[tuple[Series, bytes]] = []
        values = out.values
        gone = out.gone
        two, one, fl = _TWO_WORDS.unpack_from, _WORD.unpack_from, _f
        itab_types = self._itab_types
        for s, lay, raw in zip(series, layouts, raws, strict=True):
            if raw is None:
                gone.append(s)
                continue
            itab, data = two(raw, lay.self_at)
            if data != s.address or one(raw, lay.desc_at)[0] != s.desc or \
                    (itab_types.get(itab) or self._named(itab)) != lay.name:
                gone.append(s)  # not the object it was (freed, maybe reused)
                continue
            kind = lay.code
            if kind == _COUNTER:
                values[s.address] = fl(one(raw, lay.bits_at)[0]) + \
                    float(one(raw, lay.int_at)[0])
            elif kind == _GAUGE:
                values[s.address] = fl(one(raw, lay.bits_at)[0])
            elif kind == _HALVES:
                histograms.append((s, raw))
            elif kind == _BUFFERED:
                summaries.append((s, raw))
        again += self._halves(histograms, out)
        again += self._summaries(summaries, out)
        return again

    def _layout(self, t: GoType) -> _Layout:
        """Where a metric type keeps what every read looks at, found once per type."""
        got = self._layouts.get(id(t))
        if got is None:
            name = self.gm.types.name(t)
            has = {f.name for f in (t.elem.fields if t.elem is not None else ())}
            kind = name.rsplit(".", 1)[-1]
            got = self._layouts[id(t)] = _Layout(
                name, kind, _CODES.get(kind, -1), t.elem.size if t.elem is not None else 0,
                self._off(t, "selfCollector"), self._off(t, "desc"),
                self._off(t, "valBits") if "valBits" in has else 0,
                self._off(t, "valInt") if "valInt" in has else 0)
        return got

    def _named(self, itab: int) -> str:
        """The name of the type of the itab at ``itab``; "" when it is not an itab of
        one of the binary's types (every itab read once: itabs are never freed)."""
        if not itab:
            return ""
        try:
            t = self.gm.iface_type(itab)
        except Unreadable:  # an itab that is not one: not the object
            return ""
        if t is None:
            return ""
        named = self._itab_types[itab] = self.gm.types.name(t)
        return named

    def _halves_of(self, t: GoType) -> _Halves:
        """Where a histogram's or summary's type keeps its halves, found once per type."""
        got = self._halves_layouts.get(id(t))
        if got is None:
            arr = self.gm.field_type(t, "counts")  # counts [2]*T
            if arr.elem is None or arr.elem.elem is None:
                raise Damaged(f"{t.short}.counts is not an array of pointers", "")
            ct = arr.elem.elem
            buckets = any(f.name == "buckets" for f in ct.fields)
            got = self._halves_layouts[id(t)] = _Halves(
                self._off(t, "counts"), self._off(t, "countAndHotIdx"), ct.size,
                self._off(ct, "count"), self._off(ct, "sumBits"),
                self._off(ct, "buckets") if buckets else -1)
        return got

    def _halves(self, objects: list[tuple[Series, bytes]], out: Read) -> list[Series]:
        """Histograms and summaries without objectives: their ``counts[2]`` halves read
        whole, then the hot half's buckets and ``countAndHotIdx`` again."""
        gm = self.gm
        if not objects:
            return []
        plan = []
        layouts = [self._halves_of(s.type) for s, _raw in objects]
        wanted: list[tuple[int, int]] = []
        for (_s, raw), h in zip(objects, layouts, strict=True):
            first, second = _TWO_WORDS.unpack_from(raw, h.counts_at)
            wanted += [(first, h.half_size), (second, h.half_size)]
        halves = gm.memory.read_many(wanted)
        wanted = []
        for i, ((s, raw), h) in enumerate(zip(objects, layouts, strict=True)):
            n = _WORD.unpack_from(raw, h.hot_at)[0]
            hot, cold = halves[2 * i + (n >> 63)], halves[2 * i + 1 - (n >> 63)]
            plan.append((s, raw, n, hot, cold, h))
            if h.buckets_at >= 0:
                for half in (hot, cold):
                    data, k = _TWO_WORDS.unpack_from(half, h.buckets_at) if half else (0, 1)
                    wanted.append((data, 8 * k) if k else (s.address, 0))  # none: b""
            wanted.append((s.address + h.hot_at, 8))
        got = iter(gm.memory.read_many([w for w in wanted if w[1]]))
        sizes = iter(n for _a, n in wanted)
        again = []
        for s, raw, n, hot, cold, h in plan:
            each: bytes | None = b""
            cold_each: bytes | None = b""
            if h.buckets_at >= 0:
                each = next(got) if next(sizes) else b""
                cold_each = next(got) if next(sizes) else b""
            next(sizes)
            after = next(got)
            if hot is None or cold is None:
                out.gone.append(s)
                continue
            # The cold half wholly zero: the program's own scrape (Write) adds the cold
            # count to the hot one and zeroes it, then moves each bucket, the sum last.
            if after is None or _WORD.unpack_from(after)[0] != n or \
                    _WORD.unpack_from(cold, h.count_at)[0] != 0 or \
                    _WORD.unpack_from(cold, h.sum_at)[0] != 0 or \
                    _WORD.unpack_from(hot, h.count_at)[0] != n & _COUNT or each is None or \
                    cold_each is None or cold_each.count(0) != len(cold_each):
                again.append(s)  # an observation or a scrape of the program's midway
                continue
            count, total = n & _COUNT, _f(_WORD.unpack_from(hot, h.sum_at)[0])
            if h.buckets_at < 0:
                out.values[s.address] = Summary(count, total)
                continue
            out.values[s.address] = histogram(self._bounds(s, raw), each, count, total)
        return again

    def _bounds(self, s: Series, raw: bytes) -> list[float]:
        key = (s.address, s.desc)
        got = self._bounds_of.get(key)
        if got is None:
            if len(self._bounds_of) > MAX_KEPT:  # objects come and go: start again
                self._bounds_of.clear()
            got = self._bounds_of[key] = self._read_bounds(s, raw)
        return got

    def _read_bounds(self, s: Series, raw: bytes) -> list[float]:
        gm = self.gm
        at = self._off(s.type, "upperBounds")
        data, n = _u64(raw, at), _u64(raw, at + 8)
        if n > 1 << 12:
            return []
        b = gm.memory.read(data, 8 * n) if n else b""
        return [_f(_u64(b, 8 * i)) for i in range(n)]

    def _summaries(self, objects: list[tuple[Series, bytes]], out: Read) -> list[Series]:
        """Summaries with objectives: ``cnt`` and ``sum`` with the observations still in
        ``hotBuf`` and ``coldBuf``, and the quantiles Write would serve now (computed on
        a copy of the stream that would be head, ``quantiles``), read while neither
        mutex is held: the buffers, the streams and the struct again, in a few batches
        whose last is the struct (a Write or a flush between changes it)."""
        gm = self.gm
        again: list[Series] = []
        now = time.time_ns()
        plan = []
        wanted: list[tuple[int, int]] = []
        for s, raw in objects:
            q = self._quantiled_of(s.type)
            if _u64(raw, q.mtx) & 0xFFFFFFFF or _u64(raw, q.buf_mtx) & 0xFFFFFFFF:
                again.append(s)  # being observed, flushed or scraped: the next try
                continue
            bufs = [(_u64(raw, at), min(_u64(raw, at + 8), 1 << 20)) for at in (q.hot, q.cold)]
            streams, k = _u64(raw, q.streams), min(_u64(raw, q.streams + 8), 64)
            wanted += [(data, 8 * n) for data, n in bufs if n]
            wanted.append((streams, 8 * k) if k else (s.address, 8))
            plan.append((s, raw, q, bufs, k))
        got = iter(gm.memory.read_many(wanted))
        level: list[tuple[Series, bytes, _Quantiled, list[bytes], quantiles.Summary,
                          int | None]] = []
        wanted = []
        for s, raw, q, bufs, k in plan:
            read = [next(got) if n else b"" for _d, n in bufs]
            pointers = next(got)
            values = [v for v in read if v is not None]
            if len(values) != len(read) or pointers is None:
                again.append(s)
                continue
            hot = [_f(_u64(v, 8 * i)) for v in values if v for i in range(len(v) // 8)]
            state = quantiles.Summary(
                hot, _unix_ns(raw, q.hot_exp), _unix_ns(raw, q.head_exp),
                _signed(_u64(raw, q.duration)), k, _u64(raw, q.head_idx), [])
            r = quantiles.rotations(state, now)
            head = None if r >= k or not k else \
                _u64(pointers, 8 * ((state.head + r) % k))
            level.append((s, raw, q, values, state, head))
            wanted.append((head, q.stream_size) if head else (s.address, 8))
        got = iter(gm.memory.read_many(wanted))
        level3 = []
        wanted = []
        for s, raw, q, values, state, head in level:
            outer = next(got)
            if head and outer is None:
                again.append(s)
                continue
            inner = _u64(outer, q.inner) if head and outer else 0
            b, nb, cb = (_u64(outer, q.b), _u64(outer, q.b + 8), _u64(outer, q.b + 16)) \
                if head and outer else (0, 0, 0)
            if nb > 1 << 16 or cb > 1 << 16:
                again.append(s)
                continue
            wanted += [(inner, q.inner_size) if inner else (s.address, 8),
                       (b, 24 * nb) if nb else (s.address, 8)]
            sorted_ = bool(outer[q.sorted]) if head and outer else True
            level3.append((s, raw, q, values, state, head, nb, cb, sorted_))
        got = iter(gm.memory.read_many(wanted))
        level4 = []
        wanted = []
        for s, raw, q, values, state, head, nb, cb, sorted_ in level3:
            inner_raw, b_raw = next(got), next(got)
            if head and (inner_raw is None or (nb and b_raw is None)):
                again.append(s)
                continue
            n = _f(_u64(inner_raw, q.n)) if head and inner_raw else 0.0
            lp, nl = (_u64(inner_raw, q.l), _u64(inner_raw, q.l + 8)) \
                if head and inner_raw else (0, 0)
            if nl > 1 << 20:
                again.append(s)
                continue
            wanted += [(lp, 24 * nl) if nl else (s.address, 8), (s.address, len(raw))]
            level4.append((s, raw, q, values, state, head, n, b_raw if nb else b"", cb,
                           sorted_, nl))
        got = iter(gm.memory.read_many(wanted))
        for s, raw, q, values, state, head, n, b_raw, cb, sorted_, nl in level4:
            l_raw, after = next(got), next(got)
            if after != raw or (nl and l_raw is None):
                again.append(s)
                continue
            count = _u64(raw, q.cnt)
            total = _f(_u64(raw, q.sum))
            for v in values:
                count += len(v) // 8
                for i in range(len(v) // 8):  # one by one, as the program's flush adds them
                    total += _f(_u64(v, 8 * i))
            seen = (raw, l_raw, b_raw, head, quantiles.rotations(state, now))
            known = self._quantiles_of.get(s.address)
            if known is not None and known[0] == seen:  # nothing moved: the same answers
                out.values[s.address] = Summary(count, total, known[1])
                continue
            targets, ranks = self._objectives(s, raw, q)
            state.ranks = ranks
            final = None
            if head:
                final = quantiles.Stream(n, _samples(l_raw or b"", nl),
                                         _samples(b_raw or b"", len(b_raw or b"") // 24),
                                         int(cb), sorted_, targets)
            try:
                qs = tuple(quantiles.served(state, final))
            except (ValueError, OverflowError, IndexError):  # a torn stream: not its own
                again.append(s)
                continue
            if len(self._quantiles_of) > MAX_KEPT:
                self._quantiles_of.clear()
            self._quantiles_of[s.address] = (seen, qs)
            out.values[s.address] = Summary(count, total, qs)
        return again

    def _quantiled_of(self, t: GoType) -> _Quantiled:
        """Where a summary with objectives keeps what its quantiles are made of."""
        got = self._quantiled.get(id(t))
        if got is None:
            gm = self.gm
            st = gm.field_type(t, "streams")  # []*quantile.Stream
            outer = st.elem.elem if st.elem is not None and st.elem.elem is not None else None
            if outer is None:
                raise Damaged(f"{t.short}.streams is not a slice of pointers", "")
            inner_t = gm.field_type(outer, "stream")
            inner = inner_t.elem if inner_t.elem is not None else None
            if inner is None:
                raise Damaged("a quantile.Stream without its stream", "")
            o = self._off
            got = self._quantiled[id(t)] = _Quantiled(
                o(t, "mtx"), o(t, "bufMtx"), o(t, "hotBuf"), o(t, "coldBuf"), o(t, "cnt"),
                o(t, "sum"), o(t, "streams"), o(t, "streamDuration"), o(t, "headStreamIdx"),
                o(t, "headStreamExpTime"), o(t, "hotBufExpTime"), o(t, "objectives"),
                o(t, "sortedObjectives"), outer.size, o(outer, "stream"), o(outer, "b"),
                o(outer, "sorted"), inner.size, o(inner, "n"), o(inner, "l"),
                gm.field_type(t, "objectives"))
        return got

    def _objectives(self, s: Series, raw: bytes, q: _Quantiled
                    ) -> tuple[tuple[tuple[float, float], ...], list[float]]:
        """The summary's objectives (quantile, error) and its ranks in order, fixed when
        it is made: read once for as long as the object is the same."""
        key = (s.address, s.desc)
        got = self._objectives_of.get(key)
        if got is None:
            gm = self.gm
            pairs = gm.map_pairs([(_u64(raw, q.objectives), q.objectives_type)],
                                 Reads(gm.memory))[0]
            if isinstance(pairs, Damaged):
                raise pairs
            targets = tuple((_f(_u64(k, 0)), _f(_u64(v, 0))) for k, v in pairs)
            data, n = _u64(raw, q.ranks), min(_u64(raw, q.ranks + 8), 64)
            b = gm.memory.read(data, 8 * n) if n else b""
            ranks = [_f(_u64(b, 8 * i)) for i in range(n)]
            if len(self._objectives_of) > MAX_KEPT:
                self._objectives_of.clear()
            got = self._objectives_of[key] = (targets, ranks)
        return got


@dataclass(frozen=True, slots=True)
class _Quantiled:
    """Offsets in a summary with objectives, its quantile.Stream and its stream."""

    mtx: int
    buf_mtx: int
    hot: int
    cold: int
    cnt: int
    sum: int
    streams: int
    duration: int
    head_idx: int
    head_exp: int
    hot_exp: int
    objectives: int
    ranks: int
    stream_size: int
    inner: int
    b: int
    sorted: int
    inner_size: int
    n: int
    l: int  # noqa: E741 - the field's own name
    objectives_type: GoType


# time.Time's wall clock (its wall word with the monotonic bit set: 33 bits of seconds
# since 1885, 30 of nanoseconds; else ext seconds since year 1)
_WALL_TO_INTERNAL = (1884 * 365 + 1884 // 4 - 1884 // 100 + 1884 // 400) * 86400
_UNIX_TO_INTERNAL = (1969 * 365 + 1969 // 4 - 1969 // 100 + 1969 // 400) * 86400


def _unix_ns(raw: bytes, at: int) -> int:
    """The time.Time at ``at`` in ``raw``, in ns since the Unix epoch."""
    wall, ext = _u64(raw, at), _signed(_u64(raw, at + 8))
    nsec = wall & ((1 << 30) - 1)
    sec = _WALL_TO_INTERNAL + (((wall << 1) & (1 << 64) - 1) >> 31) if wall >> 63 else ext
    return (sec - _UNIX_TO_INTERNAL) * 1_000_000_000 + nsec


def _signed(x: int) -> int:
    return x - (1 << 64) if x >> 63 else x


def _samples(raw: bytes, n: int) -> list[tuple[float, float, float]]:
    return [struct.unpack_from("<3d", raw, 24 * i) for i in range(n)]
