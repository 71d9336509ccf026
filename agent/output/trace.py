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
from types import FrameType

from agent import logs
from agent.errors import NoopError
from agent.kernel import budget, ringbuf
from agent.kernel.codegen import Program
from agent.output import undecodable
from agent.output.printer import Sink
from agent.output.undecodable import Tally
from agent.plan.model import Plan


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
    from agent.kernel.load import Loaded, alive, settle

    stats = Stats()
    stop: list[str] = []
    failures: list[Exception] = []

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        stop.append(signal.Signals(signum).name)

    def said(change: budget.Change) -> None:
        stats.detached += not change.on
        print(f"noop: {change.message}", file=sys.stderr, flush=True)

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    run_times = cost.RunTimes()
    try:
        try:
            (plan, program, sink), loaded = settle(
                prepared, lambda p: Loaded(p[0], p[1], progress.step if progress else None),
                again, lambda why: logs.say(f"noop: {why}", logs.WARNING))
        finally:
            if progress is not None:
                progress.done()
        costs: cost.Costs | None = None
        uncosted = ""  # why not: said now the probes are on (a load that failed for the
        try:           # same reason, headers missing say, said it alone); measured
            costs = cost.costs()  # after attaching, so that it never delays the probes
        except NoopError as exc:
            uncosted = exc.message
        if uncosted:
            logs.say(f"{uncosted}: budgets are not held", logs.WARNING)
        for _path, why in sorted(loaded.refused.items()):
            logs.say(f"noop: {why}: that file is not probed", logs.WARNING)
        overhead = budget.Overhead(plan, program, costs, run_times, max_overhead,
                                   time.monotonic(), window)
        next_look = time.monotonic() + budget.EVERY
        with loaded:
            def on_record(data: bytes) -> None:
                try:
                    event = undecodable.record(program, plan, data)
                    if not failures and "output closed" not in stop:
                        sink(event)  # after a signal, what the ring holds is still printed
                except undecodable.Undecodable as err:  # counted, said once, dropped
                    stats.undecodable.add(err)
                    return
                except BrokenPipeError:  # the reader went away (| head): stop quietly
                    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
                    stop.append("output closed")
                except Exception as exc:  # raised once every probe is off: a failing
                    # sink (a full disk) must not leave the probes on while it unwinds
                    failures.append(exc)
                    stop.append("error")
                stats.events += 1

            def on_run(run: ringbuf.Run) -> None:
                for record in ringbuf.records(run):
                    on_record(record)

            sites = len(loaded.attachments)
            targets = ", ".join(f"{t.binary}" + (f" pid {t.pid}" if t.pid else "")
                                for t in plan.targets)
            print(f"noop: {sites} uprobe{'s' * (sites != 1)} on {targets}; "
                  + (f"for {duration:g}s" if duration else "Ctrl-C to stop"),
                  file=sys.stderr, flush=True)
            deadline = time.monotonic() + duration if duration else None
            pids = [t.pid for t in plan.targets if t.pid is not None]
            while not stop:
                loaded.wait(0.1)
                loaded.read(on_run)
                if deadline is not None and time.monotonic() >= deadline:
                    stop.append("duration")
                if time.monotonic() >= next_look:
                    budget.hold(loaded, overhead, run_times, said, time.monotonic)
                    next_look = time.monotonic() + budget.EVERY
                gone = [p for p in pids if not alive(p)]
                if gone and len(gone) == len(pids) and len(pids) == len(plan.targets):
                    stop.append(f"process {gone[0]} exited")
            loaded.read(on_run)
            stats.lost = loaded.lost()
            stats.faults = sum(loaded.faults().values())
            stats.reason = stop[0]
            if costs is not None:
                budget.hold(loaded, overhead, run_times, said, time.monotonic)
                stats.overhead = sum(p.cost_ns for p in overhead.probes) / 1e9
    finally:
        run_times.close()
        for s, handler in old.items():
            signal.signal(s, handler)
    if failures:
        raise failures[0]
    return stats


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
