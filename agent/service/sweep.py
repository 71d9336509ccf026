"""``noop run``'s sweeps: every ``PRUNE_EVERY`` seconds the in-kernel rows of processes
that exited (and, under the preset, of metric objects that are gone) move from the
kernel's maps into noop's session, and what noop knew of those processes is forgotten,
so that memory stays bounded however many processes come and go."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from agent.kernel import aggregate
from agent.output.exporter import Object, Session
from agent.presets.meta import object_of

if TYPE_CHECKING:
    from agent.kernel.load import Loaded

PRUNE_EVERY = 2.0  # seconds between sweeps for rows of processes that exited (and,
# under the preset, of metric objects that are gone)
# Every row of every map is read when a process that hit has exited, and at least every
# this many sweeps (a process beyond the hit-count table's room exits unseen).
FULL_SWEEP = 15
# A probe whose rows are metric objects (the preset's) is swept at once, between timed
# sweeps, when this share of its rows was made since its last sweep: a program that makes
# metrics again for every request fills a map in seconds, and what comes past its rows
# folds into the overflow row, in no series, however slow noop's machine is.
PRESSURE = 4  # a quarter of its rows


class Sweeper:
    """Counts its sweeps: most read only the processes the budgets saw hit."""

    def __init__(self) -> None:
        self._sweeps = 0
        self._made: dict[int, int] = {}  # per renewing probe: its events at the last sweep

    def pressed(self, s: Session | None) -> bool:
        """Whether a probe whose rows are metric objects made a ``1/PRESSURE`` of its
        map's rows since its last sweep (each new row says so in one event)."""
        if s is None or s.meta is None or not s.meta.renews:
            return False
        for pi, probe in enumerate(s.plan.probes):
            agg = probe.aggregate
            if agg is None or not agg.describe or probe.events:
                continue
            if s.seen.get(pi, 0) - self._made.get(pi, 0) >= max(1, agg.max_series // PRESSURE):
                return True
        return False

    def _swept(self, s: Session) -> None:
        self._made = dict(s.seen)  # rows made until now: each probe's pressure from here

    def prune(self, s: Session | None, loaded: Loaded | None,
              drain: Callable[[], int]) -> None:
        """Forget the rows and names of processes that exited: memory stays bounded.
        ``drain`` reads the ring buffer into the session."""
        from agent.kernel.preflight import alive

        if s is None or loaded is None:
            return
        self._swept(s)
        # the processes the last look at the budgets counted hits of
        seen = s.overhead.seen if s.overhead is not None else loaded.traps()
        exited = {pid for _site, pid in seen if pid and not alive(pid)}
        for pid in {pid for _site, pid in seen if pid} - exited:
            s.users.processes.of(pid)  # where it runs, read while it does (once each)
        if exited:
            loaded.forget_traps(exited)
        self._sweeps += 1
        renews = s.meta is not None and s.meta.renews
        if not exited and not renews and self._sweeps % FULL_SWEEP:
            return  # no row can be of a process that exited: not worth reading them all
        running: dict[int, bool] = {pid: False for pid in exited}
        objects: dict[int, list[tuple[bytes, Object]]] = {}  # the live processes' rows
        for pi, lay in s.program.aggregates.items():
            # Reading a probe's rows takes a system call a row: the ring is read between
            # probes, so that a burst of new objects' names does not overflow it meanwhile.
            drain()
            gone = []
            for key, per_cpu in loaded.rows(pi):
                values, _bad = aggregate.decode_key(lay, key)
                if values is None or "$pid" not in values:  # the overflow row stays
                    continue
                pid = int(values["$pid"])
                if pid not in running:
                    running[pid] = alive(pid)
                    if running[pid]:  # where it runs, read while it still does
                        s.users.processes.of(pid)
                if not running[pid]:
                    gone.append((key, per_cpu))
                elif renews and values.get("object") is not None:
                    objects.setdefault(pi, []).append((key, object_of(values)))
            if not gone:
                continue
            with s.lock:  # a scrape sees the rows in the map or in noop, never in both
                s.retire(pi, gone)
                loaded.forget(pi, [k for k, _ in gone])
        if objects and s.meta is not None:
            drain()  # the names of what the rows hold, as far as they came
            old = s.meta.superseded({o for rows in objects.values() for _k, o in rows})
            if old:
                with s.lock:  # read and deleted under it: a scrape counts them once
                    s.renew({pi: loaded.take(pi, [k for k, o in rows if o in old])
                             for pi, rows in objects.items()})
        dead = {pid for pid, up in running.items() if not up}
        if dead:
            if s.meta is not None:
                s.meta.forget(dead)
            s.users.processes.forget(dead)
