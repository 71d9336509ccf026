"""The names of VictoriaMetrics/metrics objects, for ``noop --binary``'s lines: an update
tells its metric's address only (the library keeps names in its Sets, apart from the
values), so the Sets are walked as the mirror walks them, again when an update comes
from an object the last walk did not find (at most every ``AGAIN`` seconds: a metric
made since, by ``GetOrCreate*``)."""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

from agent.errors import NoopError

if TYPE_CHECKING:
    from agent.presets.mirror.core import Mirror

AGAIN = 0.25  # s between two walks asked for by unknown objects


class Names:
    """Names of the metric objects of the processes running the binary at ``path``."""

    def __init__(self, target: str, path: str) -> None:
        self.target, self.path = target, path
        self._pids: set[int] = set()
        self._mirror: Mirror | None = None  # made at the first update (it opens the binary)
        self._refused = False
        self._walked = 0.0
        self._lock = threading.Lock()

    def name(self, pid: int, address: int) -> tuple[str, dict[str, str]] | None:
        """The name and labels the process serves the object at ``address`` under; None
        while no walk found it (a Set only written, not registered, is not walked)."""
        with self._lock:
            mirror = self._made()
            if mirror is None:
                return None
            if pid not in self._pids:
                self._pids.add(pid)
                self._walked = 0.0
            got = mirror.labelled(pid, address)
            walk = got is None and time.monotonic() - self._walked >= AGAIN
            if walk:
                self._walked = time.monotonic()
        if walk:  # outside the lock: a walk takes the mirror's own
            try:
                mirror.blocks()
            except (NoopError, OSError):
                return None
            got = mirror.labelled(pid, address)
        return None if got is None else (got[0], dict(got[1]))

    def _made(self) -> Mirror | None:
        if self._mirror is None and not self._refused:
            from agent.presets.mirror.core import Mirror
            from agent.presets.vmetrics.library import VMLibrary

            try:
                library = VMLibrary(self.path)
            except (NoopError, OSError):
                self._refused = True  # said by the plan already: the names stay ?
                return None
            self._mirror = Mirror(self.target, self.path, walk_every=3600,
                                  find=lambda: sorted(self._pids), library=library)
        return self._mirror

    def close(self) -> None:
        if self._mirror is not None:
            self._mirror.close()
