"""systemd's notify protocol (sd_notify(3)), spoken by ``noop run`` under a unit with
``Type=notify``: ``READY=1`` once every probe is attached, ``EXTEND_TIMEOUT_USEC`` while
it resolves and BCC compiles, ``WATCHDOG=1`` from the main loop, ``RELOADING=1`` and
``STOPPING=1`` around reloads and the exit. Outside systemd (no ``$NOTIFY_SOCKET``)
every call does nothing.

The protocol is one datagram per message on the AF_UNIX socket ``$NOTIFY_SOCKET`` names
(a leading ``@`` is Linux's abstract namespace), holding newline-separated
``KEY=VALUE`` lines.
"""

from __future__ import annotations

import os
import socket
import threading
import time

from agent import numbers


class Notifier:
    """The service manager's socket, or nothing. ``watchdog`` is the interval at which
    ``beat`` really sends (half of ``$WATCHDOG_USEC``), None without a watchdog."""

    def __init__(self, environ: dict[str, str] | None = None) -> None:
        env = dict(os.environ if environ is None else environ)
        path = env.get("NOTIFY_SOCKET", "")
        self.address = "\0" + path[1:] if path.startswith("@") else path
        self.watchdog: float | None = None
        usec = env.get("WATCHDOG_USEC", "")
        owner = env.get("WATCHDOG_PID", "")
        # systemd writes them in ASCII digits; anything else is no watchdog of ours
        if numbers.INTEGER.match(usec) and int(usec) > 0 and owner in ("", str(os.getpid())):
            self.watchdog = int(usec) / 2e6
        self._last_beat = 0.0
        self._lock = threading.Lock()
        self._stop_extending = threading.Event()
        self._extender: threading.Thread | None = None

    @property
    def active(self) -> bool:
        return bool(self.address)

    def send(self, **fields: str | int) -> bool:
        """One message (``READY=1`` is ``send(READY=1)``); whether it was sent. A
        service manager that went away is not noop's problem: False, no error."""
        if not self.address:
            return False
        text = "\n".join(f"{k}={v}" for k, v in fields.items()).encode()
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as s, \
                    self._lock:
                s.sendto(text, self.address)
        except OSError:
            return False
        return True

    def beat(self) -> None:
        """From the main loop: ``WATCHDOG=1``, at most once per half watchdog interval."""
        if self.watchdog is None:
            return
        now = time.monotonic()
        if now - self._last_beat >= self.watchdog:
            self._last_beat = now
            self.send(WATCHDOG=1)

    def extending(self, step: float = 10.0, extra: float = 30.0) -> None:
        """Until ``ready`` or ``stop_extending``: every ``step`` seconds ask for ``extra``
        seconds more to start, while noop resolves, compiles and attaches (the start
        timeout then bounds a stall, not a slow compile)."""
        if not self.active or self._extender is not None:
            return

        def run() -> None:
            while True:
                self.send(EXTEND_TIMEOUT_USEC=int(extra * 1e6))
                if self._stop_extending.wait(step):
                    return

        self._stop_extending.clear()
        self._extender = threading.Thread(target=run, name="noop-sd-extend", daemon=True)
        self._extender.start()

    def stop_extending(self) -> None:
        self._stop_extending.set()
        if self._extender is not None:
            self._extender.join()
            self._extender = None

    def ready(self, status: str) -> None:
        self.stop_extending()
        self.send(READY=1, STATUS=status)

    def reloading(self) -> None:
        # MONOTONIC_USEC lets systemd >= 253 tell this reload from an older one.
        self.send(RELOADING=1, MONOTONIC_USEC=time.clock_gettime_ns(time.CLOCK_MONOTONIC)
                  // 1000)

    def stopping(self) -> None:
        self.stop_extending()
        self.send(STOPPING=1)
