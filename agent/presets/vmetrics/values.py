"""The values of VictoriaMetrics/metrics' series, read as the program writes them at
that moment: a counter's and a float counter's word; each histogram read whole (its
struct, then every decade's array) once for all its series, so that ``_count`` is the
sum of the very buckets written (as the library sums those it visits), and nothing of
one with no observation; a summary's sum and count while it has counted any; a
quantile computed from the summary's current window as ``histogram.Fast`` computes it
at the program's own write (its samples sorted, the one at ``phi·(n-1)+0.5``, its
minimum and maximum at 0 and 1), none while the window is empty (the program writes
none of a NaN).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable
from typing import TypeVar

from agent.live.gomemory import GoMemory
from agent.presets.mirror.model import Found, Read, Series, Value
from agent.presets.vmetrics.layout import BUCKETS_PER_DECADE, DECADES, Layout

MAX_SAMPLES = 1000  # histogram.Fast's maxSamples: a window holds no more
TRIES = 4  # pairs of reads of a histogram or summary, at most, for two that agree


class Reader:
    def __init__(self, gm: GoMemory, lay: Layout) -> None:
        self.gm, self.lay = gm, lay

    def read(self, found: Found) -> Read:
        gm = self.gm
        out = Read()
        scalars: list[tuple[int, str]] = []
        histograms: dict[int, list[tuple[int, str, Series]]] = {}
        summaries: dict[int, list[tuple[int, str, float, Series]]] = {}
        bad = self._not_themselves(found)
        for f in found.families.values():
            for s in f.series:
                if s.desc in bad:
                    out.gone.append(s)  # its named metric is another's now
                    continue
                tag = s.type[0]
                if tag in ("u64", "f64"):
                    scalars.append((s.address, tag))
                elif tag in ("hsum", "hcount", "bucket"):
                    histograms.setdefault(s.type[1], []).append((s.address, tag, s))
                elif tag in ("ssum", "scount"):
                    summaries.setdefault(s.type[1], []).append((s.address, tag, 0.0, s))
                elif tag == "q":
                    summaries.setdefault(s.type[1], []).append((s.address, tag, s.type[2],
                                                                 s))
        got = gm.memory.read_many([(a, 8) for a, _t in scalars])
        for (address, tag), raw in zip(scalars, got, strict=True):
            if raw is not None:
                out.values[address] = struct.unpack("<Q" if tag == "u64" else "<d", raw)[0]
        self._histograms(histograms, out)
        self._summaries(summaries, out)
        # and again after: a named metric dropped while its values were read may have
        # had its metric's memory given to another's (the garbage collector runs
        # meanwhile): what was read at its address is not served
        later = self._not_themselves(found) - bad
        if later:
            for f in found.families.values():
                for s in f.series:
                    if s.desc in later and out.values.pop(s.address, None) is not None:
                        out.gone.append(s)
        return out

    def _not_themselves(self, found: Found) -> set[int]:
        """The named metrics of ``found`` that do not hold what the walk read of them
        (their name's pointer and length, their metric's itab and object, their name's
        bytes): the garbage collector gave a dropped one's memory to another, whose
        value would be served under the dropped one's name. Two batched reads."""
        memory = self.gm.memory
        checks: dict[int, tuple[bytes, bytes]] = {}
        for f in found.families.values():
            for s in f.series:
                checks.setdefault(s.desc, s.type[-1])
        nms = list(checks)
        heads = memory.read_many([(nm, 32) for nm in nms])
        bad = {nm for nm, head in zip(nms, heads, strict=True) if head != checks[nm][0]}
        named = [nm for nm in nms if nm not in bad and checks[nm][1]]
        got = memory.read_many([(struct.unpack_from("<Q", checks[nm][0])[0],
                                 len(checks[nm][1])) for nm in named])
        bad.update(nm for nm, raw in zip(named, got, strict=True) if raw != checks[nm][1])
        return bad

    def _pass(self, hs: list[int]) -> list[tuple[bytes, tuple[bytes, ...], tuple[int, ...]]
                                             | None]:
        """Each histogram of ``hs`` read once: its struct, and every decade it has made
        (their addresses and bytes); None for one that cannot be read."""
        lay, memory = self.lay, self.gm.memory
        heads = memory.read_many([(h, lay.h_sum + 8) for h in hs])
        arrays: list[tuple[int, int]] = []
        plan: list[int] = []
        for i, head in enumerate(heads):
            if head is not None:
                for a in struct.unpack_from(f"<{DECADES}Q", head, lay.h_decades):
                    if a:
                        arrays.append((a, 8 * BUCKETS_PER_DECADE))
                        plan.append(i)
        got: list[list[tuple[int, bytes | None]]] = [[] for _ in hs]
        for i, (a, _n), raw in zip(plan, arrays, memory.read_many(arrays), strict=True):
            got[i].append((a, raw))
        out: list[tuple[bytes, tuple[bytes, ...], tuple[int, ...]] | None] = []
        for head, decades in zip(heads, got, strict=True):
            if head is None or any(raw is None for _a, raw in decades):
                out.append(None)  # freed meanwhile: not written
            else:
                out.append((head, tuple(raw for _a, raw in decades if raw is not None),
                            tuple(a for a, _raw in decades)))
        return out

    def _histograms(self, wanted: dict[int, list[tuple[int, str, Series]]], out: Read
                    ) -> None:
        """Each histogram as two reads in a row found it with its mutex free (the
        program updates a bucket and the sum under it): its buckets, ``_count`` their
        sum and ``_sum`` of one instant. One updated between every two reads of
        ``TRIES`` (a loop observing all the time) is served as the last read found it
        with its mutex free: ``_count`` still the sum of the buckets written, ``_sum``
        read a moment before them (it may lack the observations made meanwhile)."""
        lay = self.lay
        hs = list(wanted)
        settled, torn = _agreed(
            len(hs), lambda pending: self._pass([hs[i] for i in pending]),
            lambda r: bool(struct.unpack_from("<I", r[0], lay.h_mu)[0] & 1))
        for i in torn:
            out.torn += [s for _a, _t, s in wanted[hs[i]]]
        for i, got in enumerate(settled):
            if got is None:
                continue
            h = hs[i]
            head, decades, addresses = got
            mine: dict[int, int] = {}
            for a, raw in zip(addresses, decades, strict=True):
                for j, c in enumerate(struct.unpack(f"<{BUCKETS_PER_DECADE}Q", raw)):
                    mine[a + 8 * j] = c
            lower, upper = struct.unpack_from("<QQ", head, lay.h_lower)
            (total,) = struct.unpack_from("<d", head, lay.h_sum)
            mine[h + lay.h_lower], mine[h + lay.h_upper] = lower, upper
            count = sum(mine.values())
            for address, tag, _s in wanted[h]:
                v: Value | None
                if tag == "bucket":
                    c = mine.get(address, 0)
                    v = c if c else None
                else:
                    v = None if not count else total if tag == "hsum" else count
                if v is not None:
                    out.values[address] = v

    def _summary_heads(self, sms: list[int]) -> tuple[list[bytes | None], list[int]]:
        """Each summary's struct as two reads in a row found it with its mutex free (the
        program adds to its sum, then its count, under it), else as the last read found
        it with its mutex free; None for one that cannot be read (or never free). And
        the indices of those never found free (torn)."""
        lay, memory = self.lay, self.gm.memory
        ranges = [(sm, lay.s_count + 8) for sm in sms]
        return _agreed(len(sms), lambda pending: memory.read_many(
            [ranges[i] for i in pending]),
            lambda r: bool(struct.unpack_from("<I", r, lay.s_mu)[0] & 1))

    def _summaries(self, wanted: dict[int, list[tuple[int, str, float, Series]]], out: Read
                   ) -> None:
        lay, memory = self.lay, self.gm.memory
        sms = list(wanted)
        heads, torn = self._summary_heads(sms)
        for i in torn:  # never found with its mutex free: counted as a histogram's is
            out.torn += [s for _a, _t, _p, s in wanted[sms[i]]]
        currs = [struct.unpack_from("<Q", h, lay.s_curr)[0] if h is not None else 0
                 for h in heads]
        fasts = memory.read_many([(c, lay.fast_a + 24) for c in currs])
        samples: list[tuple[int, int]] = []
        for fast in fasts:
            data, n, cap = struct.unpack_from("<QQQ", fast, lay.fast_a) if fast else (0, 0, 0)
            ok = fast is not None and n <= cap and n <= MAX_SAMPLES and (data or not n)
            samples.append((data, 8 * n) if ok and n else (0, 0))
        sampled = memory.read_many([r for r in samples if r[1]])
        it = iter(sampled)
        for sm, head, fast, (_data, size) in zip(sms, heads, fasts, samples, strict=True):
            if head is None:
                continue
            (total,) = struct.unpack_from("<d", head, lay.s_sum)
            (count,) = struct.unpack_from("<Q", head, lay.s_count)
            raw = next(it) if size else b""
            ordered = sorted(struct.unpack(f"<{len(raw) // 8}d", raw)) \
                if raw is not None else None
            for address, tag, phi, _s in wanted[sm]:
                v: Value | None
                if tag == "ssum":
                    v = total if count else None
                elif tag == "scount":
                    v = count if count else None
                elif fast is None or ordered is None:
                    v = None  # its window was freed meanwhile: not written this time
                else:
                    (high,) = struct.unpack_from("<d", fast, lay.fast_max)
                    (low,) = struct.unpack_from("<d", fast, lay.fast_min)
                    v = fast_quantile(ordered, phi, low, high)
                if v is not None and not (isinstance(v, float) and math.isnan(v)):
                    out.values[address] = v


T = TypeVar("T")


def _agreed(n: int, read: Callable[[list[int]], list[T | None]], locked: Callable[[T], bool]
            ) -> tuple[list[T | None], list[int]]:
    """Each of ``n`` objects as two reads in a row (``read`` of the indices still
    wanted) found it with its mutex free (``locked`` says it was not); one read between
    every two of ``TRIES`` pairs as the last read that found it free; None for one that
    cannot be read. And the objects never found free (torn)."""
    best: list[T | None] = [None] * n
    pending = list(range(n))
    for _try in range(TRIES):
        first, second = read(pending), read(pending)
        still = []
        for i, x, y in zip(pending, first, second, strict=True):
            free = [r for r in (y, x) if r is not None and not locked(r)]
            if x is None and y is None:
                best[i] = None  # freed meanwhile: not written
            elif x is not None and x == y and free:
                best[i] = x
            else:
                if free:
                    best[i] = free[0]  # the best so far, if no pair agrees
                still.append(i)
        pending = still
        if not pending:
            break
    return best, [i for i in pending if best[i] is None]


def fast_quantile(ordered: list[float], phi: float, low: float, high: float) -> float | None:
    """histogram.Fast's quantile ``phi`` of its samples (``ordered``), its minimum and
    maximum ``low`` and ``high``; None for an empty window."""
    if not ordered or math.isnan(phi):
        return None
    if phi <= 0:
        return low
    if phi >= 1:
        return high
    idx = int(phi * (len(ordered) - 1) + 0.5)
    return ordered[min(idx, len(ordered) - 1)]
