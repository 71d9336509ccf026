"""/metrics under a flood of idle connections: each connection that sends nothing is
closed after a read timeout, at most ``MAX_CONNECTIONS`` are served at once, and a
scrape that arrives when every slot is taken by an idle one takes the oldest one's
place: the scrape is answered, at once."""

from __future__ import annotations

import socket
import time
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry, Gauge

from agent.output import serve


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[serve.Server]:
    monkeypatch.setattr(serve._Quiet, "timeout", 1.0)
    registry = CollectorRegistry(auto_describe=False)
    Gauge("flood_test_value", "A value the scrape must see.", registry=registry).set(23)
    s = serve.Server("127.0.0.1:0", registry, lambda: (True, "ok"), lambda: (True, "ok"))
    try:
        yield s
    finally:
        s.close()


def _idle(address: str, n: int) -> list[socket.socket]:
    host, port = address.rsplit(":", 1)
    out = []
    for _ in range(n):
        out.append(socket.create_connection((host, int(port)), timeout=5))
    return out


def test_a_scrape_is_answered_under_a_flood_of_idle_connections(server: serve.Server) -> None:
    idle = _idle(server.address, 3 * serve.MAX_CONNECTIONS)
    try:
        t0 = time.monotonic()
        with urllib.request.urlopen(f"http://{server.address}/metrics", timeout=5) as r:
            body = r.read().decode()
        took = time.monotonic() - t0
        assert "flood_test_value 23.0" in body
        assert took < 1.0, f"the scrape waited {took:.2f} s for a slot"  # not the timeout
        # every idle connection is closed by the server, soon: none holds a thread
        deadline = time.monotonic() + 10
        for s in idle:
            s.settimeout(max(0.1, deadline - time.monotonic()))
            assert s.recv(1) == b"", "an idle connection was kept"
    finally:
        for s in idle:
            s.close()
