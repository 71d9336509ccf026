"""A summary's quantiles as its program would serve them at this moment, computed on a
copy of what its memory holds: client_golang's ``summary.Write`` swaps its buffers
(moving ``hotBufExpTime`` past now), inserts the buffered observations into every
age stream, rotates the streams the time passed says (the head stream reset and the
next one made head, once for each ``streamDuration`` gone), then asks the head stream
for each objective's rank; the streams are beorn7/perks' targeted quantile streams
(CKMS: a buffer of 500 samples merged into a compressed list of (value, width, delta)).
The arithmetic is Go's, in the same order, on the same float64s: the same answers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

Sample = tuple[float, float, float]  # value, width, delta


@dataclass
class Stream:
    """A copy of one ``quantile.Stream``: its ``stream``'s count and samples, its buffer
    and the buffer's capacity (a full buffer is merged as it fills)."""

    n: float
    l: list[Sample]  # noqa: E741 - perks' own name
    b: list[Sample]
    cap: int
    sorted: bool
    targets: tuple[tuple[float, float], ...]  # (quantile, epsilon) of the objectives

    def _f(self, r: float) -> float:
        """The targeted invariant (``NewTargeted``'s ƒ)."""
        m = 1.7976931348623157e308  # math.MaxFloat64
        for q, eps in self.targets:
            f = (2 * eps * r) / q if q * self.n <= r else (2 * eps * (self.n - r)) / (1 - q)
            if f < m:
                m = f
        return m

    def insert(self, v: float) -> None:
        self.b.append((v, 1.0, 0.0))
        self.sorted = False
        if len(self.b) == self.cap:
            self._flush()

    def count(self) -> int:
        return len(self.b) + int(self.n)

    def query(self, q: float) -> float:
        if not self.l:  # not flushed yet: the buffer alone
            k = len(self.b)
            if k == 0:
                return 0.0
            i = math.ceil(k * q)
            if i > 0:
                i -= 1
            self._sort()
            return self.b[i][0]
        self._flush()
        t = math.ceil(q * self.n)
        t += math.ceil(self._f(t) / 2)
        p = self.l[0]
        r = 0.0
        for c in self.l[1:]:
            r += p[1]
            if r + c[1] + c[2] > t:
                return p[0]
            p = c
        return p[0]

    def _sort(self) -> None:
        if not self.sorted:
            self.sorted = True
            self.b.sort(key=lambda s: s[0])  # equal values are equal samples

    def _flush(self) -> None:
        self._sort()
        self._merge(self.b)
        self.b = []

    def _merge(self, samples: list[Sample]) -> None:
        r = 0.0
        i = 0
        out = self.l
        for value, width, delta in samples:
            while i < len(out):
                c = out[i]
                if c[0] > value:
                    out.insert(i, (value, width, _go_max(delta, math.floor(self._f(r)) - 1)))
                    i += 1
                    break
                r += c[1]
                i += 1
            else:
                out.append((value, width, 0.0))
                i += 1
            self.n += width
            r += width
        self._compress()

    def _compress(self) -> None:
        out = self.l
        if len(out) < 2:
            return
        x = out[-1]
        xi = len(out) - 1
        r = self.n - 1 - x[1]
        for i in range(len(out) - 2, -1, -1):
            c = out[i]
            if c[1] + x[1] + x[2] <= self._f(r):
                x = (x[0], x[1] + c[1], x[2])
                out[xi] = x
                del out[i]
                xi -= 1
            else:
                x = c
                xi = i
            r -= c[1]


def _go_max(x: float, y: float) -> float:
    """Go's math.Max: NaN if either is, +0 over -0."""
    if math.isnan(x) or math.isnan(y):
        return math.nan
    if x == y == 0:
        return x if math.copysign(1, x) > 0 else y
    return x if x > y else y


@dataclass
class Summary:
    """What a summary's Write reads, copied from its memory: its buffered observations
    (``hotBuf``; ``coldBuf`` is empty while its mutex is free), the times and index of
    its age streams, its objectives, and the copy of the stream that would be head."""

    hot: list[float]
    hot_exp: int  # hotBufExpTime, ns (wall)
    head_exp: int  # headStreamExpTime, ns (wall)
    duration: int  # streamDuration, ns
    streams: int  # how many age streams
    head: int  # headStreamIdx
    ranks: list[float]  # sortedObjectives


def rotations(s: Summary, now: int) -> int:
    """How many times Write at ``now`` (ns, wall) rotates the streams: ``swapBufs``
    moves ``hotBufExpTime`` a ``streamDuration`` at a time past now, then
    ``maybeRotateStreams`` moves the head's expiry to it."""
    exp = s.hot_exp
    if s.duration <= 0:
        return 0
    if now > exp:
        exp += ((now - exp) // s.duration + (1 if (now - exp) % s.duration else 0)) * \
            s.duration
        if now > exp:  # (never: the division is exact) as Go's loop would
            exp += s.duration
    if exp == s.head_exp:
        return 0
    return max(0, (exp - s.head_exp) // s.duration)


def served(s: Summary, final: Stream | None) -> list[tuple[float, float]]:
    """(rank, value) of each objective, in order of rank, as Write would serve them:
    ``final`` is a copy of the stream that would be head, None when the rotations
    reset it; every buffered observation is inserted into it first."""
    if final is not None:
        for v in s.hot:
            final.insert(v)
    out = []
    for rank in s.ranks:
        if final is None or final.count() == 0:
            out.append((rank, math.nan))
        else:
            out.append((rank, final.query(rank)))
    return sorted(out, key=lambda rv: rv[0])
