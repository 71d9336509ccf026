"""noop's own messages on stderr, one line each, ``noop: ...``. When stderr is the
journal's stream (systemd sets ``$JOURNAL_STREAM`` to its device and inode), each line
starts with its syslog priority, ``<3>`` error, ``<4>`` warning, ``<6>`` info, which
journald reads and strips (``SyslogLevelPrefix=``, on by default)."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from functools import cache

ERROR, WARNING, INFO = 3, 4, 6


@cache
def _journal() -> bool:
    stream = os.environ.get("JOURNAL_STREAM", "")
    try:
        st = os.fstat(sys.stderr.fileno())
    except (OSError, ValueError):
        return False
    return stream == f"{st.st_dev}:{st.st_ino}"


# Where noop's lines go instead of stderr while something else owns the terminal (noop
# top's full screen): each line and its priority.
sink: Callable[[str, int], None] | None = None


# The least urgent priority said (noop top --once: warnings and errors only).
shown = INFO


def say(message: str, priority: int = INFO) -> None:
    """One line (or several, each prefixed) on stderr (or to ``sink``, when set)."""
    if priority > shown:
        return
    held = sink
    if held is not None:
        for line in message.splitlines() or [""]:
            held(line, priority)
        return
    prefix = f"<{priority}>" if _journal() else ""
    text = "".join(f"{prefix}noop: {line}\n" for line in message.splitlines() or [""])
    sys.stderr.write(text)
    sys.stderr.flush()


class Progress:
    """The steps of a start (resolving, compiling, attaching). On a terminal, once the
    start has taken a second, one line on stderr says the current step, replaced in
    place and cleared at the end; with ``log``, each step is said with its duration
    when it ends (``noop run``). Silent otherwise."""

    DELAY = 1.0  # seconds; NOOP_PROGRESS_DELAY overrides it (tests show it at once)

    def __init__(self, live: bool, log: bool = False) -> None:
        self.live, self.log = live, log
        self.started = self.since = time.monotonic()
        self.step_name = ""
        self.shown = self.due = False
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None
        if live:
            try:
                delay = float(os.environ.get("NOOP_PROGRESS_DELAY", self.DELAY))
            except ValueError:
                delay = self.DELAY
            self._timer = threading.Timer(delay, self._show)
            self._timer.daemon = True
            self._timer.start()

    def step(self, what: str) -> None:
        with self._lock:
            self._end_step()
            self.step_name, self.since = what, time.monotonic()
            if self.due and self._timer is not None:
                self.shown = True
            if self.shown:
                self._draw()

    def _end_step(self) -> None:
        if self.log and self.step_name:
            say(f"{self.step_name} took {time.monotonic() - self.since:.2f}s")

    def _show(self) -> None:
        with self._lock:
            self.due = True  # shown now, or at the first step if none has begun
            if self.step_name and not self.shown and self._timer is not None:
                self.shown = True
                self._draw()

    def _draw(self) -> None:
        sys.stderr.write(f"\r\033[Knoop: {self.step_name}…")
        sys.stderr.flush()

    def done(self) -> None:
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            self._end_step()
            self.step_name = ""
            if self.shown:
                sys.stderr.write("\r\033[K")
                sys.stderr.flush()
                self.shown = False
