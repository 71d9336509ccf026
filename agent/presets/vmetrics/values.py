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

from agent.live.gomemory import GoMemory
from agent.presets.mirror.model import Found, Read, Value
from agent.presets.vmetrics.layout import BUCKETS_PER_DECADE, DECADES, Layout

MAX_SAMPLES = 1000  # histogram.Fast's maxSamples: a window holds no more


class Reader:
    def __init__(self, gm: GoMemory, lay: Layout) -> None:
        self.gm, self.lay = gm, lay

    def read(self, found: Found) -> Read:
        gm = self.gm
        out = Read()
        scalars: list[tuple[int, str]] = []
        histograms: dict[int, list[tuple[int, str]]] = {}
        summaries: dict[int, list[tuple[int, str, float]]] = {}
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
                    histograms.setdefault(s.type[1], []).append((s.address, tag))
                elif tag in ("ssum", "scount"):
                    summaries.setdefault(s.type[1], []).append((s.address, tag, 0.0))
                elif tag == "q":
                    summaries.setdefault(s.type[1], []).append((s.address, tag, s.type[2]))
        got = gm.memory.read_many([(a, 8) for a, _t in scalars])
        for (address, tag), raw in zip(scalars, got, strict=True):
            if raw is not None:
                out.values[address] = struct.unpack("<Q" if tag == "u64" else "<d", raw)[0]
        self._histograms(histograms, out)
        self._summaries(summaries, out)
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

    def _histograms(self, wanted: dict[int, list[tuple[int, str]]], out: Read) -> None:
        lay, memory = self.lay, self.gm.memory
        hs = list(wanted)
        heads = memory.read_many([(h, lay.h_sum + 8) for h in hs])
        arrays: list[tuple[int, int]] = []
        plan: list[tuple[int, int]] = []  # (histogram's index, decade)
        for i, head in enumerate(heads):
            if head is None:
                continue
            for d, a in enumerate(struct.unpack_from(f"<{DECADES}Q", head, lay.h_decades)):
                if a:
                    arrays.append((a, 8 * BUCKETS_PER_DECADE))
                    plan.append((i, d))
        counts: dict[int, dict[int, int]] = {}  # histogram -> bucket counter -> count
        decades = memory.read_many(arrays)
        for (i, _d), (a, _n), raw in zip(plan, arrays, decades, strict=True):
            if raw is None:
                heads[i] = None  # freed meanwhile: the histogram is not written
                continue
            mine = counts.setdefault(i, {})
            for j, c in enumerate(struct.unpack(f"<{BUCKETS_PER_DECADE}Q", raw)):
                mine[a + 8 * j] = c
        for i, (h, head) in enumerate(zip(hs, heads, strict=True)):
            if head is None:
                continue
            lower, upper = struct.unpack_from("<QQ", head, lay.h_lower)
            (total,) = struct.unpack_from("<d", head, lay.h_sum)
            mine = counts.get(i, {})
            mine[h + lay.h_lower], mine[h + lay.h_upper] = lower, upper
            count = sum(mine.values())
            for address, tag in wanted[h]:
                v: Value | None
                if tag == "bucket":
                    c = mine.get(address, 0)
                    v = c if c else None
                else:
                    v = None if not count else total if tag == "hsum" else count
                if v is not None:
                    out.values[address] = v

    def _summaries(self, wanted: dict[int, list[tuple[int, str, float]]], out: Read) -> None:
        lay, memory = self.lay, self.gm.memory
        sms = list(wanted)
        heads = memory.read_many([(sm, lay.s_count + 8) for sm in sms])
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
            for address, tag, phi in wanted[sm]:
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
                    v = _quantile(ordered, phi, low, high)
                if v is not None and not (isinstance(v, float) and math.isnan(v)):
                    out.values[address] = v


def _quantile(ordered: list[float], phi: float, low: float, high: float) -> float | None:
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
