"""What noop's probes cost their targets, and the budget that bounds it in ``noop run``.

Every program counts its hits per site and process in the kernel (``noop_traps``),
before any filter. A hit costs its thread the trap and uprobe handling of its site's
class (``cost.Costs``, measured on this machine) and the program's own run, which
the kernel times when asked (``cost.RunTimes``). Summed, that is
``noop_probe_overhead_seconds_total``.

A probe's budget is a share of one CPU per target process. Once what it cost one
process over the last ``window`` seconds exceeds that share of the window, it is
taken off: the trap is what costs, so only detaching relieves the service. It goes
back on after a back-off, which doubles each time it has to come off again, and
falls back to the first once the probe has stayed on, within budget, as long as its
last back-off.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from agent.kernel.cost import Costs, RunTimes
from agent.kernel.program import Program
from agent.plan.model import Plan

if TYPE_CHECKING:
    from agent.kernel.load import Loaded

WINDOW = 10.0  # seconds a probe's cost is measured over
EVERY = 1.0  # seconds between looks at the counts
MAX_BACKOFF = 3600.0


@dataclass
class _Probe:
    name: str
    budget: float  # share of one CPU per process; inf: unbounded
    backoff: float
    enabled: bool = True
    cost_ns: float = 0.0  # all processes, since loading
    hits: int = 0
    detached_s: float = 0.0  # closed periods off
    off_since: float | None = None
    retry_at: float = 0.0
    on_since: float = 0.0
    run_ns: int = 0  # the kernel's run time of its programs, last read
    # process -> (time, hits, cost ns) of each look within the window
    recent: dict[int, deque[tuple[float, int, float]]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Change:
    """A probe to take off (``on`` False) or put back, and the line to log."""

    probe: int
    on: bool
    message: str


class Overhead:
    """The cost of one loaded plan's probes, and their budgets. ``look`` reads the
    counts and says which probes to take off or put back; the caller does it (it
    holds the lock attaching takes) and tells ``done``."""

    def __init__(self, plan: Plan, program: Program, costs: Costs | None,
                 run_times: RunTimes | None, default_budget: float, now: float,
                 window: float = WINDOW) -> None:
        self.plan, self.program, self.costs, self.run_times = plan, program, costs, run_times
        self.window = window
        # A renew probe (plan.generations) has none: taken off, an address's new metric
        # object would be counted in the rows of the one there before it.
        self.probes = [_Probe(p.name, math.inf if p.renews else p.budget
                              if p.budget is not None else default_budget,
                              backoff=window, on_since=now) for p in plan.probes]
        self.seen: dict[tuple[int, int], int] = {}  # (site, pid) -> hits last read

    def per_hit(self, pi: int, si: int) -> float:
        assert self.costs is not None
        return self.costs.per_hit(self.plan.probes[pi].sites[si].handling)

    def look(self, traps: dict[tuple[int, int], int], run_ns: dict[int, int], now: float
             ) -> list[Change]:
        """Fold the counts read now (``Loaded.traps``, each probe's program run time)
        into the totals; the probes to take off or put back."""
        hits: dict[tuple[int, int], int] = {}  # (probe, pid) -> new hits
        cost: dict[tuple[int, int], float] = {}
        for (gsi, pid), n in traps.items():
            if gsi >= len(self.program.sites):
                continue
            new = n - self.seen.get((gsi, pid), 0)
            if new < 0:  # the row was deleted and made again
                new = n
            self.seen[(gsi, pid)] = n
            if new <= 0:
                continue
            pi, si = self.program.sites[gsi]
            hits[(pi, pid)] = hits.get((pi, pid), 0) + new
            if self.costs is not None:
                cost[(pi, pid)] = cost.get((pi, pid), 0.0) + new * self.per_hit(pi, si)
        for (_gsi, pid) in [k for k in self.seen if k not in traps]:
            del self.seen[(_gsi, pid)]  # forgotten (the process exited)
        for pi, p in enumerate(self.probes):
            ran = run_ns.get(pi, p.run_ns)
            extra, p.run_ns = max(0, ran - p.run_ns), ran
            mine = {pid: n for (q, pid), n in hits.items() if q == pi}
            total = sum(mine.values())
            p.hits += total
            for pid, n in mine.items():
                ns = cost.get((pi, pid), 0.0) + (extra * n / total if total else 0.0)
                p.cost_ns += ns
                p.recent.setdefault(pid, deque()).append((now, n, ns))
            if not total:
                p.cost_ns += extra
            for q in p.recent.values():
                while q and q[0][0] <= now - self.window:
                    q.popleft()
        return self._decide(now)

    def _decide(self, now: float) -> list[Change]:
        out = []
        for pi, p in enumerate(self.probes):
            if not p.enabled:
                if now >= p.retry_at:
                    out.append(Change(pi, True, f"probe {p.name}: back on after "
                                      f"{p.backoff:.0f} s off (its budget)"))
                continue
            if self.costs is None or math.isinf(p.budget):
                continue
            if now - p.on_since >= p.backoff and p.backoff > self.window:
                p.backoff = self.window  # stayed on, within budget, a whole back-off
            allowed = p.budget * self.window * 1e9
            worst = max(((sum(ns for _t, _n, ns in q), sum(n for _t, n, _ns in q), pid)
                         for pid, q in p.recent.items() if q), default=None)
            if worst is None or worst[0] <= allowed:
                continue
            ns, n, pid = worst
            span = min(self.window, max(now - p.on_since, EVERY))
            who = f"process {pid}" if pid else "processes past the count's room"
            out.append(Change(pi, False, (
                f"probe {p.name}: {n / span:,.0f} hits/s in {who} cost it "
                f"{ns / 1e9 / span:.1%} of a CPU over the last {span:.0f} s, over its "
                f"budget of {p.budget:.1%}: detached for {p.backoff:.0f} s")))
        return out

    def done(self, change: Change, now: float) -> None:
        """``change`` was made at ``now``."""
        p = self.probes[change.probe]
        if change.on:
            if p.off_since is not None:
                p.detached_s += now - p.off_since
            p.enabled, p.off_since, p.on_since = True, None, now
            p.backoff = min(p.backoff * 2, MAX_BACKOFF)  # if it has to come off again
            return
        p.enabled, p.off_since, p.retry_at = False, now, now + p.backoff
        p.recent.clear()  # its cost so far is paid for by this detach

    def detached_seconds(self, pi: int, now: float) -> float:
        p = self.probes[pi]
        return p.detached_s + (now - p.off_since if p.off_since is not None else 0.0)


def hold(loaded: Loaded, overhead: Overhead, run_times: RunTimes | None,
         say: Callable[[Change], None], now: Callable[[], float]) -> None:
    """One look: fold the hits counted so far into the probes' costs, take off and put
    back what the budgets say, and ``say`` each change once made."""
    run = ({pi: run_times.of(loaded.prog_fds(pi)) for pi in range(len(overhead.probes))}
           if run_times is not None and run_times.available else {})
    for change in overhead.look(loaded.traps(), run, now()):
        if change.on:
            loaded.attach_probe(change.probe)
        else:
            loaded.detach_probe(change.probe)
        overhead.done(change, now())
        say(change)
