"""What ``noop top`` shows, whatever draws it: readings of the page ``noop run`` would
serve (the program's own families, mirrored from its memory, and its runtime's and
process's series), taken one interval apart, and the rows they make: each series'
value and how fast it moved over the interval (a counter's increase per second, a
gauge's change per second, a histogram's or summary's observations per second and the
mean of what was observed), its trend over the last minute, and, where probes count
them, its updates per second.

"Hot" here is how fast a value moves, not how often it is updated: a counter moved by
``Add(100)`` once a second moves as fast as one moved by a hundred ``Inc``s. Memory holds
no count of updates; only the probes' (``--probes``) do.
"""

from __future__ import annotations

import fnmatch
import math
import re
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from agent.output.page import Block, Bundle, label_value, labels_of, owned
from agent.presets.mirror.model import Found, Histogram, Read, Summary

# A series: (pid, or 0 where the page has none; family; its own labels, sorted)
Key = tuple[int, str, tuple[tuple[str, str], ...]]

_SCALAR, _COUNT, _SUM, _SKIP = 0, 1, 2, 3
KINDS = ("counter", "gauge", "histogram", "summary", "untyped")
COLUMNS = ("rate", "value", "mean", "updates", "name", "kind", "pid")
TREND_SECONDS = 60.0

@dataclass(frozen=True, slots=True)
class Series:
    """What a series is: its family, the family's type, its process and labels, and
    the part of the page it is in (read at that part's instant)."""

    family: str
    kind: str
    pid: int
    labels: tuple[tuple[str, str], ...]
    part: int = 0

    @property
    def key(self) -> Key:
        return (self.pid, self.family, self.labels)

    def text(self) -> str:
        """``family{label="value",...}``, as the page writes it (without noop's labels)."""
        if not self.labels:
            return self.family
        inner = ",".join(f'{k}="{label_value(v)}"' for k, v in self.labels)
        return f"{self.family}{{{inner}}}"


@dataclass
class Reading:
    """One page's values, by series id (``Parser.series``): a scalar's value, a
    histogram's or summary's observation count and sum; each part of the page read at
    its own instant (``ats``, monotonic seconds: the last is ``at``)."""

    ats: list[float]
    present: list[int] = field(default_factory=list)  # the series read, in page order
    values: dict[int, float] = field(default_factory=dict)
    counts: dict[int, float] = field(default_factory=dict)
    sums: dict[int, float] = field(default_factory=dict)
    updates: dict[int, float] | None = None  # update counts the probes saw (--probes)

    @property
    def at(self) -> float:
        return self.ats[-1] if self.ats else 0.0


# A part of the page: what a mirror read (each process's families and values), or
# families written out (Blocks, a Bundle).
Mirrored = list[tuple[int, Found, Read]]
Part = Mirrored | list[Block] | Bundle


class Parser:
    """Readings of pages: each series given an id once (``series[id]``), each sample key
    parsed once, each mirrored object's labels taken once, for as long as they are
    seen."""

    MAX_KEYS = 1 << 20

    def __init__(self) -> None:
        self.series: list[Series] = []
        self._ids: dict[Series, int] = {}
        self._keys: dict[bytes, tuple[int, int] | None] = {}  # sample key -> (id, role)
        # a mirrored object: (pid, address, desc, family) -> (its labels, id)
        self._objects: dict[tuple[int, int, int, str],
                            tuple[tuple[tuple[str, str], ...], int]] = {}

    def id_of(self, s: Series) -> int:
        got = self._ids.get(s)
        if got is None:
            got = self._ids[s] = len(self.series)
            self.series.append(s)
        return got

    def reading(self, parts: Iterable[tuple[Part, float]]) -> Reading:
        """The values of the page's ``parts`` (as ``noop run`` serves them after its own
        families), each with when it was read."""
        out = Reading([])
        if len(self._keys) > self.MAX_KEYS:
            self._keys.clear()
        if len(self._objects) > self.MAX_KEYS:
            self._objects.clear()
        for i, (part, at) in enumerate(parts):
            out.ats.append(at)
            if isinstance(part, Bundle):
                self._lines(part.text, part.owned, part.types, i, out)
            elif part and isinstance(part[0], Block):
                for b in part:
                    assert isinstance(b, Block)
                    self._lines(b.text, {n: b.name for n in owned(b.name, b.type)},
                                {b.name: b.type}, i, out)
            else:
                self._mirrored(part, i, out)  # type: ignore[arg-type]
        return out

    def _mirrored(self, reads: Mirrored, part: int, out: Reading) -> None:
        objects, present = self._objects, out.present
        values, counts, sums = out.values, out.counts, out.sums
        for pid, current, read in reads:
            got = read.values
            for f in current.families.values():
                kind = f.kind if f.kind in KINDS else "untyped"
                name = f.name
                for s in f.series:
                    v = got.get(s.address)
                    if v is None:
                        continue
                    memo = (pid, s.address, s.desc, name)
                    was = objects.get(memo)
                    if was is None or not (was[0] is s.labels or was[0] == s.labels):
                        was = objects[memo] = (s.labels, self.id_of(
                            Series(name, kind, pid, tuple(sorted(s.labels)), part)))
                    sid = was[1]
                    present.append(sid)
                    if isinstance(v, Histogram | Summary):
                        counts[sid] = v.count
                        sums[sid] = v.sum
                    else:
                        values[sid] = v

    def _lines(self, text: bytes, owned: dict[bytes, bytes], types: dict[bytes, bytes],
               part: int, out: Reading) -> None:
        keys = self._keys
        present, values, counts, sums = out.present, out.values, out.counts, out.sums
        for line in text.split(b"\n"):
            if not line or line[0] == 35:  # "#": HELP and TYPE
                continue
            key, _, value = line.rpartition(b" ")
            if not key:
                continue
            try:  # a key names its process (pid): one build's, one type
                got = keys[key]
            except KeyError:
                parsed = _parse(key, owned, types, part)
                got = keys[key] = None if parsed is None else \
                    (self.id_of(parsed[0]), parsed[1])
            if got is None:
                continue
            sid, role = got
            if role == _SKIP:
                continue
            try:
                x = float(value)
            except ValueError:
                continue
            if role == _SCALAR:
                values[sid] = x
                present.append(sid)
            elif role == _COUNT:
                counts[sid] = x
                present.append(sid)
            else:
                sums[sid] = x


def _sample_name(key: bytes) -> bytes:
    brace = key.find(b"{")
    return key if brace < 0 else key[:brace]


def _parse(key: bytes, owned: dict[bytes, bytes], types: dict[bytes, bytes], part: int
           ) -> tuple[Series, int] | None:
    """The series a sample key is of, and what its value is of it."""
    name = _sample_name(key)
    family = owned.get(name)
    if family is None:
        return None
    kind = types.get(family, b"untyped").decode() or "untyped"
    if kind not in KINDS:
        kind = "untyped"
    role = _SCALAR
    if name != family:
        suffix = name[len(family):]
        role = _COUNT if suffix == b"_count" else _SUM if suffix == b"_sum" else _SKIP
    elif kind == "summary":
        role = _SKIP  # a quantile
    text = key[len(name):].decode("utf-8", "replace")
    labels = labels_of(text)
    labels.pop("le", None) if kind == "histogram" else None
    labels.pop("quantile", None) if kind == "summary" else None
    pid_text = labels.pop("noop_pid", None)
    if pid_text is None:
        pid_text = labels.pop("pid", None)
    if labels.pop("noop_target", None) is None:
        labels.pop("target", None)
    pid = int(pid_text) if pid_text is not None and pid_text.isdigit() else 0
    return Series(family.decode(), kind, pid, tuple(sorted(labels.items())), part), role


@dataclass(slots=True)
class Row:
    """One line of the table: a series, or a family's series folded (``folded`` of
    them)."""

    series: Series
    value: float  # a scalar's value; a histogram's or summary's observation count
    rate: float | None  # per second over the interval (None: not seen at its start)
    mean: float | None = None  # of what was observed over the interval
    updates: float | None = None  # updates per second the probes saw (--probes)
    # the last minute's (when, rate), oldest first: shared with ``Rates``, read when drawn
    history: deque[tuple[float, float]] | None = None
    folded: int = 0  # the family's series in this row (0: a series of its own)
    id: int = -1  # the series' (``Parser.series``); -1: a folded family

    @property
    def heat(self) -> float:
        """How fast the value moves, whichever way."""
        return abs(self.rate) if self.rate is not None and not math.isnan(self.rate) else -1.0

    def name(self) -> str:
        if self.folded:
            return f"{self.series.family} ({self.folded} series)"
        return self.series.text()

    def trend(self, now: float, seconds: float = TREND_SECONDS) -> list[float]:
        """The rates of the last ``seconds`` before ``now``, oldest first."""
        if not self.history:
            return []
        keep = now - seconds
        return [x for at, x in self.history if at >= keep]


def _increase(now: float, before: float | None, monotonic: bool) -> float | None:
    """What moved between two readings; a counter that went down was reset (started
    again from zero: its increase is its value now, as Prometheus' rate takes it)."""
    if before is None:
        return None
    d = now - before
    if monotonic and d < 0:
        return now
    return d


class Rates:
    """Rows of consecutive readings, with each series' rates over ``TREND_SECONDS``."""

    def __init__(self, series: list[Series], trend_seconds: float = TREND_SECONDS,
                 delay: float = 1.0) -> None:
        self.series = series  # the parser's, by id
        self.trend_seconds = trend_seconds
        self.keep = max(2, math.ceil(trend_seconds / delay) + 1)  # rates a history holds
        self.last: Reading | None = None
        self.interval = 0.0  # seconds between the last two readings
        self._trends: dict[int | str, deque[tuple[float, float]]] = {}

    def add(self, r: Reading) -> list[Row]:
        """The rows of reading ``r`` against the one before it."""
        before, self.last = self.last, r
        spans = [a - b for a, b in zip(r.ats, before.ats, strict=False)] \
            if before is not None else []
        self.interval = r.at - before.at if before is not None else 0.0
        at = r.at
        rows = []
        series, trends, keep = self.series, self._trends, self.keep
        values, counts, sums = r.values, r.counts, r.sums
        was_values = before.values if before is not None else {}
        was_counts = before.counts if before is not None else {}
        was_sums = before.sums if before is not None else {}
        updates = r.updates if before is not None and before.updates is not None else None
        was_updates = before.updates if before is not None and before.updates else {}
        for sid in r.present:
            s = series[sid]
            dt = spans[s.part] if s.part < len(spans) else 0.0
            if s.kind == "histogram" or s.kind == "summary":
                value = counts[sid]
                was = was_counts.get(sid)
                moved = _increase(value, was, True)
                # reset: what was observed since is what it holds now
                total = sums.get(sid, 0.0)
                since = None if was is None else total if value < was else \
                    total - was_sums.get(sid, 0.0)
                mean = since / moved if moved and since is not None else None
            else:
                value = values[sid]
                moved = _increase(value, was_values.get(sid), s.kind == "counter")
                mean = None
            rate = moved / dt if moved is not None and dt > 0 else None
            u = None
            if updates is not None and dt > 0:
                du = _increase(updates.get(sid, 0.0), was_updates.get(sid, 0.0), True)
                u = du / dt if du is not None else None
            t = trends.get(sid)
            if t is None:
                t = trends[sid] = deque(maxlen=keep)
            if rate is not None:
                t.append((at, rate))
            rows.append(Row(s, value, rate, mean, u, t, id=sid))
        if len(trends) > len(rows) + 64:  # series gone: their trends with them
            live: set[int | str] = set(r.present)
            for k in [k for k in trends if not isinstance(k, str) and k not in live]:
                del trends[k]
        return rows

    def folded(self, rows: list[Row], families: set[str] | None = None) -> list[Row]:
        """``rows`` with the series of each family in ``families`` (None: every family)
        as one row, where it has more than one: values and rates summed (gauges' rates
        as magnitudes), the mean of all the family's observations, the trend of the
        summed rates."""
        out: list[Row] = []
        groups: dict[str, list[Row]] = {}
        for row in rows:
            if families is None or row.series.family in families:
                groups.setdefault(row.series.family, []).append(row)
            else:
                out.append(row)
        at = self.last.at if self.last is not None else 0.0
        for family, group in groups.items():
            if len(group) == 1:  # nothing to fold
                out.append(group[0])
                continue
            first = group[0].series
            rates = [g.rate for g in group if g.rate is not None]
            observed = sum(g.rate for g in group if g.rate is not None and g.mean is not None)
            means = sum(g.rate * g.mean for g in group
                        if g.rate is not None and g.mean is not None)
            updates = [g.updates for g in group if g.updates is not None]
            rate = (sum(abs(x) for x in rates) if first.kind not in ("counter", "histogram",
                                                                       "summary")
                    else sum(rates)) if rates else None
            t = self._trends.get("\0" + family)
            if t is None:
                t = self._trends["\0" + family] = deque(maxlen=self.keep)
            if rate is not None and (not t or t[-1][0] != at):
                t.append((at, rate))
            out.append(Row(Series(family, first.kind, first.pid if all(
                g.series.pid == first.pid for g in group) else 0, ()),
                sum(g.value for g in group), rate, means / observed if observed else None,
                sum(updates) if updates else None, t, folded=len(group)))
        return out


class Filter:
    """Which series to show: a glob on the family's name or on the whole series
    (``family{label="value"}``), or ``/regex/`` searched in the whole series; either
    after ``!``: those it does not match. An empty one shows them all. ValueError for a
    regex that does not compile."""

    def __init__(self, text: str = "") -> None:
        self.text = text
        self._not = text.startswith("!")
        self._glob = text[1:] if self._not else text
        self._re: re.Pattern[str] | None = None
        body = self._glob
        if len(body) >= 2 and body.startswith("/") and body.endswith("/"):
            try:
                self._re = re.compile(body[1:-1])
            except re.error as exc:
                raise ValueError(f"{text}: not a regular expression: {exc}") from None

    def __bool__(self) -> bool:
        return bool(self.text)

    def wants(self, s: Series) -> bool:
        if not self.text:
            return True
        if self._re is not None:
            found = self._re.search(s.text()) is not None
        else:
            found = fnmatch.fnmatchcase(s.family, self._glob) or \
                fnmatch.fnmatchcase(s.text(), self._glob)
        return found != self._not


def ordered(rows: list[Row], column: str = "rate", reverse: bool = False) -> list[Row]:
    """``rows`` by ``column``: the hottest, largest, most updated first (``reverse``: last);
    names, kinds and pids in ascending order. Ties as they came (the page's order)."""
    if column == "name":
        return sorted(rows, key=lambda r: (r.series.family, r.series.labels, r.series.pid),
                      reverse=reverse)
    if column == "kind":
        return sorted(rows, key=lambda r: r.series.kind, reverse=reverse)
    if column == "pid":
        return sorted(rows, key=lambda r: r.series.pid, reverse=reverse)
    if column == "rate":
        return sorted(rows, key=lambda r: r.heat, reverse=not reverse)

    def metric(r: Row) -> float:
        x = r.value if column == "value" else r.mean if column == "mean" else r.updates
        return -math.inf if x is None or math.isnan(x) else x

    return sorted(rows, key=metric, reverse=not reverse)


def short(x: float | None, width: int = 8) -> str:
    """A number in at most ``width`` characters: SI prefixes past four digits."""
    if x is None:
        return "-"
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "+Inf" if x > 0 else "-Inf"
    a = abs(x)
    if a == 0:
        return "0"
    for div, unit in ((1e18, "E"), (1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e4, "k")):
        if a >= div:
            v = x / (1e3 if unit == "k" else div)
            text = f"{v:.{max(0, 3 - len(str(int(abs(v)))))}f}{unit}"
            return text if len(text) <= width else f"{x:.2e}"
    if a >= 100 or float(x).is_integer():
        text = f"{x:.0f}" if float(x).is_integer() else f"{x:.1f}"
    elif a >= 0.01:
        text = f"{x:.3g}"
    else:
        text = f"{x:.2e}"
    return text if len(text) <= width else f"{x:.1e}"


BARS = "▁▂▃▄▅▆▇█"
ASCII_BARS = "_.-=+*#@"


def sparkline(values: list[float], width: int, bars: str = BARS) -> str:
    """The last values (oldest first) as ``width`` bars at most, each the mean of its
    share of them, from zero to the largest (magnitudes)."""
    if not values or width <= 0:
        return ""
    n = len(values)
    if n > width:
        step = n / width
        values = [sum(abs(v) for v in values[int(i * step):int((i + 1) * step)] or [0.0]) /
                  max(1, int((i + 1) * step) - int(i * step)) for i in range(width)]
    else:
        values = [abs(v) for v in values]
    top = max(values)
    if top <= 0 or math.isnan(top):
        return bars[0] * len(values)
    last = len(bars) - 1
    return "".join(bars[min(last, round(v / top * last))] if not math.isnan(v) else " "
                   for v in values)
