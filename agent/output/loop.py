"""The one main loop of a session, the terminal's (``noop``) and the daemon's (``noop
run``): signals caught into a list while it runs (and the handlers before put back
after), then, until a reason to stop, one step (the ring buffer read, the signals
answered), a wait for events or ``DRAIN_EVERY`` seconds, and the periodic chores each
at its own interval (the budgets, the sweeps, the look for new processes)."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import FrameType, TracebackType

DRAIN_EVERY = 0.1  # seconds between reads of the ring buffer


@dataclass
class Every:
    """A chore done every ``seconds``: first that long after the loop starts."""

    seconds: float
    do: Callable[[], None]
    due: float = 0.0


class Loop:
    """``with Loop(signals) as loop: why = loop.run(step, wait, chores)``."""

    def __init__(self, signals: Sequence[signal.Signals],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.caught: list[signal.Signals] = []  # in the order they came, not yet answered
        self._signals = tuple(signals)
        self._old: dict[signal.Signals, object] = {}
        self._clock = clock

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        self.caught.append(signal.Signals(signum))

    def __enter__(self) -> Loop:
        self._old = {s: signal.signal(s, self._on_signal) for s in self._signals}
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        for s, handler in self._old.items():
            signal.signal(s, handler)  # type: ignore[arg-type]  # as signal.signal gave it

    def run(self, step: Callable[[], str | None], wait: Callable[[float], None],
            chores: Sequence[Every] = ()) -> str:
        """Until ``step`` gives a reason to stop (which is returned): ``step``, then
        ``wait(DRAIN_EVERY)`` (it returns early when events come), then each chore
        that is due."""
        start = self._clock()
        for chore in chores:
            chore.due = start + chore.seconds
        while True:
            why = step()
            if why:
                return why
            wait(DRAIN_EVERY)
            for chore in chores:
                if self._clock() >= chore.due:
                    chore.do()
                    chore.due = self._clock() + chore.seconds
