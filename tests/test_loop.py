"""The session loop the terminal and the daemon share: chores at their intervals, a
reason to stop from the step, signals caught while it runs and the handlers before
put back after."""

from __future__ import annotations

import os
import signal

from agent.output.loop import DRAIN_EVERY, Every, Loop


def test_chores_come_due_at_their_intervals_and_the_step_says_when_to_stop() -> None:
    now = [100.0]
    done: list[tuple[str, float]] = []

    def wait(seconds: float) -> None:
        assert seconds == DRAIN_EVERY
        now[0] += 0.25  # a slow wait: chores run on the clock, not a count of waits

    steps = iter(range(12))
    loop = Loop((), clock=lambda: now[0])
    why = loop.run(lambda: "enough" if next(steps) == 11 else None, wait,
                   [Every(1.0, lambda: done.append(("a", now[0]))),
                    Every(2.0, lambda: done.append(("b", now[0])))])
    assert why == "enough"
    # 11 waits of 0.25 s: "a" due at 101, 102 ( + its run), "b" at 102
    assert done == [("a", 101.0), ("a", 102.0), ("b", 102.0)]


def test_signals_are_caught_while_it_runs_and_the_old_handlers_come_back() -> None:
    heard: list[int] = []
    before = signal.signal(signal.SIGHUP, lambda s, _f: heard.append(s))
    try:
        with Loop((signal.SIGHUP, signal.SIGUSR1)) as loop:
            def step() -> str | None:
                if not loop.caught:
                    os.kill(os.getpid(), signal.SIGHUP)
                    os.kill(os.getpid(), signal.SIGUSR1)
                    return None
                return ",".join(s.name for s in loop.caught)
            assert loop.run(step, lambda _s: None) == "SIGHUP,SIGUSR1"
        assert not heard  # the loop's handler had it
        os.kill(os.getpid(), signal.SIGHUP)
        assert heard == [signal.SIGHUP]  # the handler before it, put back
        assert signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL
    finally:
        signal.signal(signal.SIGHUP, before)
