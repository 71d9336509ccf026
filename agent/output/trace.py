"""Trace in the terminal: load a plan, print every event until Ctrl-C, SIGTERM, the
duration, or the one target process exiting; then detach everything and say what
was seen, lost and not read."""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from agent import logs
from agent.errors import NoopError
from agent.kernel import budget, ringbuf
from agent.kernel.program import Program
from agent.output import undecodable
from agent.output.loop import Every, Loop
from agent.output.printer import Sink
from agent.output.undecodable import Tally
from agent.plan.model import Plan

if TYPE_CHECKING:
    from agent.kernel.cost import Costs
    from agent.kernel.load import Loaded


@dataclass
class Stats:
    events: int = 0
    undecodable: Tally = field(default_factory=Tally)  # events dropped, by probe and reason
    lost: int = 0
    faults: int = 0
    reason: str = ""
    overhead: float | None = None  # seconds of CPU the probes cost the targets, estimated
    detached: int = 0  # times a probe came off for its budget


Prepared = tuple[Plan, Program, Sink]


@dataclass
class _Reader:
    """Hands each ring-buffer record to the sink, and says what stops the trace."""

    plan: Plan
    program: Program
    sink: Sink
    stats: Stats
    stop: list[str]  # why the trace stops, first reason first (a signal's name, ...)
    failures: list[Exception] = field(default_factory=list)

    def record(self, data: bytes) -> None:
        try:
            event = undecodable.record(self.program, self.plan, data)
            if not self.failures and "output closed" not in self.stop:
                self.sink(event)  # after a signal, what the ring holds is still printed
        except undecodable.Undecodable as err:  # counted, said once, dropped
            self.stats.undecodable.add(err)
            return
        except BrokenPipeError:  # the reader went away (| head): stop quietly
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            self.stop.append("output closed")
        except Exception as exc:  # raised once every probe is off: a failing sink (a
            self.failures.append(exc)  # full disk) must not leave the probes on while it
            self.stop.append("error")  # unwinds
        self.stats.events += 1

    def run(self, run: ringbuf.Run) -> None:
        for record in ringbuf.records(run):
            self.record(record)


def run(prepared: Prepared, duration: float | None = None,
        progress: logs.Progress | None = None, max_overhead: float = float("inf"),
        window: float = budget.WINDOW, again: Callable[[], Prepared] | None = None
        ) -> Stats:
    """Attach, hand every event to ``sink`` until a signal, ``duration`` or the
    targets' exit, detach. ``progress`` hears the steps of attaching, and is done
    before the line that says the probes are on. Probes are held to their budgets
    (``max_overhead`` for those the spec sets none for) as in ``noop run``. When a
    file is not the build its plan was made from, ``again()`` plans anew."""
    from agent.kernel import cost
    from agent.kernel.load import Loaded, settle

    stats = Stats()
    stop: list[str] = []  # what the reader says stops the trace ("output closed", ...)

    def said(change: budget.Change) -> None:
        stats.detached += not change.on
        print(f"noop: {change.message}", file=sys.stderr, flush=True)

    run_times = cost.RunTimes()
    with Loop((signal.SIGINT, signal.SIGTERM)) as loop:  # caught while attaching too
        try:
            try:
                (plan, program, sink), loaded = settle(
                    prepared, lambda p: Loaded(p[0], p[1], progress.step if progress else None),
                    again, lambda why: logs.say(why, logs.WARNING))
            finally:
                if progress is not None:
                    progress.done()
            costs = _costs()  # after attaching, so that it never delays the probes
            for _path, why in sorted(loaded.refused.items()):
                logs.say(f"{why}: that file is not probed", logs.WARNING)
            for path, why in sorted(loaded.unattached.items()):
                logs.say(f"cannot attach to {path}: {why}: that file is not probed",
                         logs.WARNING)
            overhead = budget.Overhead(plan, program, costs, run_times, max_overhead,
                                       time.monotonic(), window)
            reader = _Reader(plan, program, sink, stats, stop)
            with loaded:
                _announce(loaded, plan, duration)
                stats.reason = _until_stopped(
                    loop, loaded, reader, duration,
                    lambda: budget.hold(loaded, overhead, run_times, said, time.monotonic))
                stats.lost = loaded.lost()
                stats.faults = sum(loaded.faults().values())
                if costs is not None:
                    budget.hold(loaded, overhead, run_times, said, time.monotonic)
                    stats.overhead = sum(p.cost_ns for p in overhead.probes) / 1e9
        finally:
            run_times.close()
    if reader.failures:
        raise reader.failures[0]
    return stats


def _costs() -> Costs | None:
    """What a hit costs here (calibrated on a first start on a machine); None, said,
    when it cannot be known (a load that failed for the same reason, headers missing
    say, said it alone)."""
    from agent.kernel import cost

    try:
        return cost.costs()
    except NoopError as exc:
        logs.say(f"{exc.message}: budgets are not held", logs.WARNING)
        return None


def _announce(loaded: Loaded, plan: Plan, duration: float | None) -> None:
    sites = len(loaded.attachments)
    targets = ", ".join(f"{t.binary}" + (f" pid {t.pid}" if t.pid else "")
                        for t in plan.targets)
    print(f"noop: {sites} uprobe{'s' * (sites != 1)} on {targets}; "
          + (f"for {duration:g}s" if duration else "Ctrl-C to stop"),
          file=sys.stderr, flush=True)


def _until_stopped(loop: Loop, loaded: Loaded, reader: _Reader, duration: float | None,
                   hold: Callable[[], None]) -> str:
    """Read the ring until a reason to stop, which is returned: a signal, the reader's
    (output closed, a failing sink), the duration, every target process gone; the
    budgets held every ``budget.EVERY`` seconds. Then read what it still holds."""
    from agent.kernel.preflight import alive

    plan, stop = reader.plan, reader.stop
    deadline = time.monotonic() + duration if duration else None
    pids = [t.pid for t in plan.targets if t.pid is not None]

    def step() -> str | None:
        loaded.read(reader.run)
        if loop.caught:
            return loop.caught[0].name
        if stop:
            return stop[0]
        if deadline is not None and time.monotonic() >= deadline:
            return "duration"
        gone = [p for p in pids if not alive(p)]
        if gone and len(gone) == len(pids) and len(pids) == len(plan.targets):
            return f"process {gone[0]} exited"
        return None

    why = loop.run(step, loaded.wait, [Every(budget.EVERY, hold)])
    loaded.read(reader.run)
    return why


def summary(stats: Stats) -> str:
    parts = [f"{stats.events} events", f"{stats.lost} lost"]
    if stats.faults:
        parts.append(f"{stats.faults} with values not read (user-memory faults)")
    if stats.undecodable.total():
        parts.append(f"{stats.undecodable.total()} undecodable")
    if stats.overhead is not None:
        parts.append(f"the probes cost the targets ~{stats.overhead:.3g} s of CPU")
    if stats.detached:
        parts.append(f"probes taken off {stats.detached} times (their budget)")
    return f"noop: {stats.reason}: detached; " + ", ".join(parts)
