"""``noop top``'s session: what ``noop run --binary`` loads (the probe where the program
gathers a registry, or with ``--probes`` every update's probe, under the usual budget),
a mirror of each Go or Rust target, and, every interval, a reading of the page ``noop
run`` would serve: shown full screen (``screen``) or printed once (``--once``).
"""

from __future__ import annotations

import json
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agent import logs
from agent.errors import NoopError
from agent.kernel import budget
from agent.output.loop import Every, Loop
from agent.presets.client_golang.facts import GATHERED
from agent.service.daemon import Daemon, Options
from agent.service.sweep import PRUNE_EVERY
from agent.service.watch import SCAN_EVERY
from agent.top.model import Filter, Parser, Part, Rates, Reading, Row, ordered, short

MAX_SERIES = 1 << 20  # series ever seen, before their ids are given again from 0


@dataclass
class View:
    """How the table is shown: what the command line asked, changed by keys."""

    delay: float = 1.0
    sort: str = "rate"
    reverse: bool = False
    filter: Filter = field(default_factory=Filter)
    fold: bool = False  # every family folded into one row
    toggled: set[str] = field(default_factory=set)  # families the other way than ``fold``
    limit: int | None = None  # rows printed (--once)
    probes: bool = False

    def rows(self, rates: Rates, rows: list[Row]) -> list[Row]:
        """``rows`` filtered, folded and ordered as the view says."""
        shown = [r for r in rows if self.filter.wants(r.series)] if self.filter else rows
        if self.fold or self.toggled:
            families = {r.series.family for r in shown}
            folded = {f for f in families if (f in self.toggled) != self.fold}
            if folded:
                shown = rates.folded(shown, folded)
        return ordered(shown, self.sort, self.reverse)


class Top(Daemon):
    """The session: ``refresh`` reads the page and gives its rows."""

    def __init__(self, opts: Options, view: View, notes: list[str], named: str) -> None:
        super().__init__(opts)
        self.view = view
        self.notes = notes  # what planning found noop cannot show
        self.named = named  # what the command line named: the title
        self.parser = Parser()
        self.rates = Rates(self.parser.series, delay=view.delay)
        self.rows: list[Row] = []
        self.cpu = 0.0  # seconds of noop's CPU the last refresh took
        self.refreshed = 0.0  # when (monotonic)
        self.series = 0
        self.pids: set[int] = set()
        self._cost: tuple[float, float] | None = None  # (when, the probes' cost in s)
        self.probe_share: float | None = None  # of a CPU, over the last interval

    def refresh(self) -> list[Row]:
        """A reading of the page now, and its rows against the last one."""
        t0 = time.process_time()
        if len(self.parser.series) > MAX_SERIES:  # series came and went: start again
            self.parser = Parser()
            self.rates = Rates(self.parser.series, delay=self.view.delay)
        reading = self.parser.reading(self._timed())
        if self.view.probes:
            reading.updates = self._updates(reading)
        self.rows = self.rates.add(reading)
        self.series = len(reading.present)
        series = self.parser.series
        self.pids = {series[i].pid for i in reading.present} - {0}
        self._probe_cost(reading.at)
        self.refreshed = reading.at
        self.cpu = time.process_time() - t0
        return self.rows

    def _timed(self) -> list[tuple[Part, float]]:
        """The page's parts (``Daemon._parts``: each mirror's values, then the process
        and runtime series), each with the instant it was read."""
        out: list[tuple[Part, float]] = [(m.values(), time.monotonic()) for m in self.mirrors]
        rest = self._parts(mirrored=False)
        out += [(part, time.monotonic()) for part in rest]
        return out

    def _updates(self, r: Reading) -> dict[int, float]:
        """Each series' updates the probes saw (the preset's noop_metric_updates, all
        operations), by series id."""
        series = self.parser.series
        named: dict[tuple[int, str, str], int] = {
            (s.pid, s.family, ",".join(f"{a}={b}" for a, b in s.labels)): i
            for i in r.present for s in (series[i],)}
        out: dict[int, float] = {}
        for m in self.exporter.collect():
            if m.name != "noop_metric_updates":
                continue
            for s in m.samples:
                if not s.name.endswith("_total"):
                    continue
                labels = s.labels
                pid = labels.get("pid", "")
                k = named.get((int(pid) if pid.isdigit() else 0, labels.get("metric", ""),
                               labels.get("labels", "")))
                if k is not None:
                    out[k] = out.get(k, 0.0) + s.value
        return out

    def _probe_cost(self, at: float) -> None:
        s = self.exporter.session
        o = s.overhead if s is not None else None
        if o is None or self.costs is None or not self.view.probes:
            return
        self.hold_budgets()  # the hits since the last look folded into their cost
        total = sum(p.cost_ns for p in o.probes) / 1e9
        if self._cost is not None and at > self._cost[0]:
            self.probe_share = (total - self._cost[1]) / (at - self._cost[0])
        self._cost = (at, total)

    def unseen(self) -> list[str]:
        """What the page does not show, one line each (said in the status line)."""
        out = list(self.notes)
        for name, why in sorted(self.unmirrored.items()):
            out.append(f"{name}: its own metrics are not read: {why}")
        finding = self.loaded is not None and any(p.name == GATHERED for p in self.plan.probes)
        for m in self.mirrors:
            u = m.unseen()
            if u.unmirrored:
                n = sum(u.unmirrored.values())
                kinds = ", ".join(f"{t} x{k}" if k > 1 else t
                                  for t, k in sorted(u.unmirrored.items()))
                out.append(f"{n} collector{'s' * (n != 1)} noop does not read: {kinds}")
            if u.funcs:
                out.append(f"{len(u.funcs)} famil{'ies' if len(u.funcs) != 1 else 'y'} of "
                           "functions the program calls at each scrape (no value in memory): "
                           + ", ".join(sorted(u.funcs)[:3]) + (", …" if len(u.funcs) > 3
                                                              else ""))
            if u.pending:
                out.append(f"{u.pending} registr{'ies' if u.pending != 1 else 'y'} gathered "
                           "once: shown after the program gathers it again")
            how = " (the probe where it gathers or writes one is on)" if finding else ""
            if u.bare:
                out.append(f"{u.bare} process{'es' * (u.bare != 1)} with no registry found "
                           "yet: one only a local holds shows once the program serves its "
                           "/metrics twice" + how)
            elif u.ungathered and finding:
                out.append(f"{u.ungathered} process{'es' * (u.ungathered != 1)} not scraped "
                           "yet: a registry only a local variable holds shows once the "
                           "program serves its /metrics twice" + how)
            if u.capped:
                out.append(f"{u.capped} series past --mirror-max-series")
            if u.damaged:
                out.append(f"not read: {u.damaged[0]}")
            if u.refused:
                out.append(f"{u.refused} process{'es' * (u.refused != 1)} whose memory noop "
                           "may not read")
        if not self.pids and self.refreshed:
            out.append(f"no process runs {self.named} now: waiting for one")
        if self.view.probes:
            out.append(self._probes_said())
        return out

    def _probes_said(self) -> str:
        n = len(self.loaded.attachments) if self.loaded is not None else 0
        s = self.exporter.session
        o = s.overhead if s is not None else None
        off = sum(not p.enabled for p in o.probes) if o is not None else 0
        cost = f", costing {self.probe_share * 100:.2g}% of a CPU" \
            if self.probe_share is not None else ""
        budget_said = "no budget" if self.opts.max_overhead == float("inf") else \
            f"budget {self.opts.max_overhead * 100:g}% a process"
        return (f"update probes: {n} uprobe{'s' * (n != 1)}{cost} ({budget_said})" +
                (f"; {off} off for their budget: their counts fall short" if off else ""))

    def chores(self) -> list[Every]:
        return [Every(SCAN_EVERY, self.rescan), Every(budget.EVERY, self.hold_budgets),
                Every(PRUNE_EVERY, self.prune)]

    def begin(self) -> None:
        """Load and attach, and start the mirrors (as ``noop run`` does, with no page
        served)."""
        session = self.start()
        self._mirror()
        self.priced(session)



def once(top: Top, as_json: bool) -> int:
    """One interval's table (or JSON) on stdout, what it cannot show on stderr."""
    with Loop((signal.SIGINT, signal.SIGTERM)) as loop:
        top.begin()
        top.refresh()
        end = time.monotonic() + top.view.delay
        while not loop.caught and time.monotonic() < end:
            top.drain()
            top._wait(min(0.1, max(0.0, end - time.monotonic())))
        if loop.caught:
            return 130 if loop.caught[0] == signal.SIGINT else 143
        top.drain()
        seen = set(top.pids)
        rows = top.view.rows(top.rates, top.refresh())
    if not seen and not top.pids:
        raise NoopError(f"no process runs {top.named}", "start it, or give --pid")
    if top.view.limit is not None:
        rows = rows[:top.view.limit]
    notes = top.unseen()
    if as_json:
        json.dump({"interval_seconds": top.rates.interval, "processes": sorted(top.pids),
                   "refresh_cpu_seconds": top.cpu, "series": [_json(r) for r in rows],
                   "unseen": notes}, sys.stdout)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(table(rows, top.view.probes, top.rates.interval))
    for note in notes:
        logs.say(note, logs.WARNING)
    return 0


def _json(r: Row) -> dict[str, Any]:
    out: dict[str, Any] = {"family": r.series.family, "kind": r.series.kind,
                           "pid": r.series.pid or None, "labels": dict(r.series.labels),
                           "value": _finite(r.value), "rate": _finite(r.rate)}
    if r.series.kind in ("histogram", "summary"):
        out["mean"] = _finite(r.mean)
    if r.updates is not None:
        out["updates_rate"] = r.updates
    if r.folded:
        out["series"] = r.folded
    return out


def _finite(x: float | None) -> float | str | None:
    """A number JSON can hold: NaN and the infinities as the text format writes them."""
    if x is None or (x == x and abs(x) != float("inf")):
        return x
    return "NaN" if x != x else "+Inf" if x > 0 else "-Inf"


def table(rows: list[Row], probes: bool, interval: float) -> str:
    """The rows as text, a header first."""
    head = f"{'RATE/s':>9} " + (f"{'UPD/s':>9} " if probes else "") + \
        f"{'VALUE':>9} {'MEAN':>9} {'KIND':<9} {'PID':>7}  SERIES"
    lines = [f"# over {interval:.2f} s; hot = how fast a value moves, not how often it is "
             "updated", head]
    for r in rows:
        lines.append(f"{short(r.rate, 9):>9} " +
                     (f"{short(r.updates, 9):>9} " if probes else "") +
                     f"{short(r.value, 9):>9} {short(r.mean, 9):>9} {r.series.kind:<9} "
                     f"{r.series.pid or '':>7}  {r.name()}")
    return "\n".join(lines) + "\n"


def interactive(top: Top, draw: Callable[[Top, Loop], int]) -> int:
    """The full screen until a key or a signal ends it."""
    with Loop((signal.SIGINT, signal.SIGTERM)) as loop:
        top.begin()
        return draw(top, loop)
