"""/metrics under a flood of idle connections: each connection that sends nothing is
closed at its head's deadline, at most ``max_connections()`` are held at once, and a
scrape that arrives when every one is taken by an idle one takes the oldest one's
place: the scrape is answered, at once. (tests/test_flood.py: ``noop run`` under a
thousand clients, idle and slowloris, past its descriptor limit.)"""

from __future__ import annotations

import socket
import time
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry, Gauge

from agent.output import front, serve

LIMIT = 64


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[serve.Server]:
    monkeypatch.setattr(front, "HEAD_TIMEOUT", 1.0)
    monkeypatch.setattr(front, "max_connections", lambda: LIMIT)
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
    idle = _idle(server.address, 3 * LIMIT)
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


def test_a_slowloris_is_closed_at_its_heads_deadline(server: serve.Server) -> None:
    """A header every 0.3 s: closed once the head's deadline (1 s here) passes, not
    kept alive by each byte."""
    (s,) = _idle(server.address, 1)
    try:
        s.sendall(b"GET /metrics HTTP/1.1\r\n")
        t0 = time.monotonic()
        closed = False
        while time.monotonic() - t0 < 5 and not closed:
            try:
                s.sendall(b"X-Slow: 1\r\n")
                s.settimeout(0.3)
                closed = s.recv(1) == b""
            except TimeoutError:
                continue
            except OSError:
                closed = True
        took = time.monotonic() - t0
        assert closed and took < 2.0, took
    finally:
        s.close()


def test_one_connection_serves_request_after_request(server: serve.Server) -> None:
    """Kept alive, as Prometheus keeps its connection; HEAD has no body; a request that
    is not HTTP is answered 400 and closed."""
    import http.client

    host, port = server.address.rsplit(":", 1)
    c = http.client.HTTPConnection(host, int(port), timeout=5)
    try:
        for path in ("/metrics", "/healthz", "/metrics"):
            c.request("GET", path)
            r = c.getresponse()
            body = r.read()
            assert r.status == 200 and body
        c.request("HEAD", "/metrics")
        r = c.getresponse()
        assert r.status == 200 and r.read() == b""
    finally:
        c.close()
    (s,) = _idle(server.address, 1)
    try:
        s.sendall(b"HELLO\r\n\r\n")
        assert s.recv(100).startswith(b"HTTP/1.1 400 ")
    finally:
        s.close()
