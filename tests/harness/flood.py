"""A flood of clients on an HTTP port, from a thread of the test's own: ``n``
connections held open all along (one the server closes is opened again), each sending
nothing (``idle``), or its request line and then one header every half second
(``trickle``: a slowloris)."""

from __future__ import annotations

import contextlib
import resource
import socket
import threading
import time


class Flood:
    def __init__(self, address: str, n: int, mode: str) -> None:
        host, port = address.rsplit(":", 1)
        self.target = (host.strip("[]"), int(port))
        self.n = n
        self.mode = mode
        self.opened = 0  # connections made, all along
        self.held: list[socket.socket] = []
        self._stop = threading.Event()
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft < n + 256:  # the test's own descriptors: the flood's and its own
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, n + 1024), hard))
        self._thread = threading.Thread(target=self._run, name="flood", daemon=True)

    def __enter__(self) -> Flood:
        self._thread.start()
        deadline = time.monotonic() + 30
        while self.opened < self.n and time.monotonic() < deadline:
            time.sleep(0.05)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        for s in self.held:
            with contextlib.suppress(OSError):
                s.close()
        self.held.clear()

    def _open(self) -> None:
        try:
            s = socket.create_connection(self.target, timeout=2)
        except OSError:
            time.sleep(0.01)
            return
        s.setblocking(False)
        if self.mode == "trickle":
            with contextlib.suppress(OSError):
                s.send(b"GET /metrics HTTP/1.1\r\n")
        self.held.append(s)
        self.opened += 1

    def _run(self) -> None:
        last = 0.0
        while not self._stop.is_set():
            while len(self.held) < self.n and not self._stop.is_set():
                self._open()
            if time.monotonic() - last < 0.5:
                time.sleep(0.05)
                continue
            last = time.monotonic()
            for s in list(self.held):  # a header a tick, or notice the close
                try:
                    if self.mode == "trickle":
                        s.send(b"X-Slow: 1\r\n")
                    if s.recv(1) == b"":
                        raise ConnectionResetError
                except BlockingIOError:
                    continue
                except OSError:
                    self.held.remove(s)
                    s.close()
