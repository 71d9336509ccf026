"""The HTTP/1.1 front of noop's port: every connection held by one event loop (asyncio,
TLS included), a request handed to the WSGI application — in a small pool of threads —
only once its whole head has come. A scrape is the one thing noop must always answer,
so what a client can hold is bounded:

* time: a connection's first request head must come whole within ``HEAD_TIMEOUT`` of
  its accept (its TLS handshake within that too), a kept-alive connection's next one
  within ``IDLE_TIMEOUT``, a response be taken within ``WRITE_TIMEOUT``: a slowloris
  that sends a header a second, or reads nothing, is closed at its deadline, not at
  each byte's;
* number: at most ``max_connections()`` at once (a share of the process's file
  descriptors, the rest kept for attaching probes); one more evicts the oldest that is
  not being answered (accepted or kept alive, its head not come whole), so a flood of
  idle or slow connections never keeps a scrape out;
* threads: none per connection; the application runs in ``WORKERS`` threads.

wsgiref's server, before, gave each connection a thread and a per-read timeout: three
hundred clients trickling their headers held every slot, and scrapes went unanswered.
"""

from __future__ import annotations

import asyncio
import contextlib
import resource
import socket
import ssl
import sys
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import unquote

HEAD_TIMEOUT = 5.0  # seconds for a new connection's TLS handshake and first request head
IDLE_TIMEOUT = 65.0  # ... for a kept-alive connection's next request (Prometheus scrapes
# every 60 s at most by default, and keeps its connection)
WRITE_TIMEOUT = 10.0  # ... for the client to take a response
MAX_HEAD = 16 << 10  # bytes of a request's line and headers
MAX_BODY = 64 << 10  # bytes of a request's body (noop's endpoints take none)
WORKERS = 4  # threads that run the application
CEILING = 1024  # connections at most, however many descriptors there are
RESERVED = 256  # descriptors never given to connections: probes, maps, files, targets
BACKLOG = 512  # connections the kernel queues before noop accepts them
ACCEPT_BATCH = 8  # connections accepted a turn of the event loop

App = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def max_connections() -> int:
    """Connections held at once: half of the descriptors left past ``RESERVED``, at
    least 8, at most ``CEILING``."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return CEILING
    return max(8, min(CEILING, (soft - RESERVED) // 2))


class _Conn:
    __slots__ = ("busy", "writer")

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.busy = False  # its request came whole and is being answered


class Front:
    """Serves ``app`` on the listening socket ``sock`` (TLS with ``tls``) until
    ``close``."""

    def __init__(self, sock: socket.socket, app: App, tls: ssl.SSLContext | None) -> None:
        self.app = app
        self.tls = tls
        self.limit = max_connections()
        self._sock = sock
        self._conns: dict[_Conn, None] = {}  # oldest first
        self._pool = ThreadPoolExecutor(WORKERS, thread_name_prefix="noop-http")
        self._loop = asyncio.new_event_loop()
        self._loop.set_exception_handler(lambda _loop, _ctx: None)  # a client's doing
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="noop-http-front",
                                        daemon=True)
        self._thread.start()
        self._ready.wait(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        with contextlib.suppress(Exception):
            self._loop.run_until_complete(self._serve())
        with contextlib.suppress(Exception):
            self._loop.run_until_complete(self._loop.shutdown_asyncgens())
        self._loop.close()

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        # asyncio accepts at most ``backlog`` connections a turn of the loop: a few, so
        # that a connection's request is read before a flood's later connections can
        # evict it (each one that comes past the limit evicts the oldest); the kernel's
        # queue of connections stays BACKLOG long
        server = await asyncio.start_server(
            self._client, sock=self._sock, ssl=self.tls, backlog=ACCEPT_BATCH,
            ssl_handshake_timeout=HEAD_TIMEOUT if self.tls is not None else None,
            limit=MAX_HEAD)
        self._sock.listen(BACKLOG)
        self._ready.set()
        async with server:
            await self._stop.wait()
            server.close()
            for c in list(self._conns):
                c.writer.transport.abort()

    def close(self) -> None:
        """Stop serving: the listening socket closed, every connection aborted."""
        stop = self._stop
        if stop is not None and not self._loop.is_closed():
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(stop.set)
        self._thread.join(10)
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _admit(self, conn: _Conn) -> bool:
        """Room for ``conn``: past the limit the oldest connection not being answered
        goes; none such, ``conn`` itself is refused."""
        self._conns[conn] = None
        while len(self._conns) > self.limit:
            victim = next((c for c in self._conns if not c.busy and c is not conn), None)
            if victim is None:
                del self._conns[conn]
                return False
            del self._conns[victim]
            victim.writer.transport.abort()
        return True

    async def _client(self, reader: asyncio.StreamReader,
                      writer: asyncio.StreamWriter) -> None:
        conn = _Conn(writer)
        if not self._admit(conn):
            writer.transport.abort()
            return
        try:
            timeout = HEAD_TIMEOUT
            while True:
                conn.busy = False
                try:
                    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout)
                except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError,
                        ValueError):  # TimeoutError, ConnectionError, SSLError: OSErrors
                    return  # slow, gone, or a head past MAX_HEAD: closed
                conn.busy = True
                request = _parse(head)
                if request is None:
                    await self._send(writer, b"HTTP/1.1 400 Bad Request\r\nContent-Length: "
                                     b"0\r\nConnection: close\r\n\r\n")
                    return
                method, target, version, headers = request
                body_len = headers.get("content-length", "0")
                if "transfer-encoding" in headers or not body_len.isascii() or \
                        not body_len.isdigit() or int(body_len) > MAX_BODY:
                    await self._send(writer, b"HTTP/1.1 413 Content Too Large\r\n"
                                     b"Content-Length: 0\r\nConnection: close\r\n\r\n")
                    return
                if int(body_len):
                    try:
                        await asyncio.wait_for(reader.readexactly(int(body_len)),
                                               HEAD_TIMEOUT)
                    except (OSError, asyncio.IncompleteReadError):
                        return
                keep = _keep_alive(version, headers)
                environ = self._environ(method, target, version, headers, writer)
                loop = asyncio.get_running_loop()
                try:
                    out = await loop.run_in_executor(self._pool, _call, self.app, environ)
                except RuntimeError:  # the pool is shut down: noop is stopping
                    return
                if not await self._send(writer, _response(out, method, keep)) or not keep:
                    return
                timeout = IDLE_TIMEOUT
        finally:
            self._conns.pop(conn, None)
            writer.transport.abort()

    async def _send(self, writer: asyncio.StreamWriter, data: bytes) -> bool:
        """Whether the client took ``data`` within WRITE_TIMEOUT."""
        try:
            writer.write(data)
            await asyncio.wait_for(writer.drain(), WRITE_TIMEOUT)
            return True
        except (OSError, RuntimeError):
            return False

    def _environ(self, method: str, target: str, version: str, headers: dict[str, str],
                 writer: asyncio.StreamWriter) -> dict[str, Any]:
        path, _, query = target.partition("?")
        peer = writer.get_extra_info("peername") or ("", 0)
        here = writer.get_extra_info("sockname") or ("", 0)
        env: dict[str, Any] = {
            "REQUEST_METHOD": method, "SCRIPT_NAME": "", "PATH_INFO": unquote(path),
            "QUERY_STRING": query, "SERVER_PROTOCOL": version,
            "SERVER_NAME": str(here[0]), "SERVER_PORT": str(here[1]),
            "REMOTE_ADDR": str(peer[0]), "CONTENT_LENGTH": headers.get("content-length", ""),
            "CONTENT_TYPE": headers.get("content-type", ""), "wsgi.version": (1, 0),
            "wsgi.url_scheme": "https" if self.tls is not None else "http",
            "wsgi.errors": sys.stderr, "wsgi.multithread": True,
            "wsgi.multiprocess": False, "wsgi.run_once": False,
        }
        for name, value in headers.items():
            key = "HTTP_" + name.upper().replace("-", "_")
            if key not in ("HTTP_CONTENT_LENGTH", "HTTP_CONTENT_TYPE"):
                env[key] = value
        return env


def _parse(head: bytes) -> tuple[str, str, str, dict[str, str]] | None:
    """(method, target, version, headers by lower-case name) of a request head; None
    when it is not one."""
    try:
        text = head.decode("latin-1")
    except UnicodeDecodeError:
        return None
    lines = text.split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[0].isalpha() or parts[2] not in ("HTTP/1.0", "HTTP/1.1"):
        return None
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            return None
        headers[name.lower()] = value.strip()
    return parts[0], parts[1], parts[2], headers


def _keep_alive(version: str, headers: dict[str, str]) -> bool:
    said = headers.get("connection", "").lower()
    return "keep-alive" in said if version == "HTTP/1.0" else "close" not in said


def _call(app: App, environ: dict[str, Any]) -> tuple[str, list[tuple[str, str]], bytes]:
    """The application's answer: status, headers and the whole body."""
    got: list[Any] = []

    def start(status: str, headers: list[tuple[str, str]], _exc: Any = None) -> None:
        got[:] = [status, headers]

    body = b"".join(app(environ, start))
    return got[0], got[1], body


def _response(out: tuple[str, list[tuple[str, str]], bytes], method: str,
              keep: bool) -> bytes:
    status, headers, body = out
    names = {k.lower() for k, _v in headers}
    lines = [f"HTTP/1.1 {status}", *(f"{k}: {v}" for k, v in headers)]
    if "content-length" not in names:
        lines.append(f"Content-Length: {len(body)}")
    lines.append("Connection: keep-alive" if keep else "Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + \
        (b"" if method == "HEAD" else body)


def listening(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host``:``port`` (IPv6 where the host is), address
    reuse on; OSError as the kernel says."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6 and host in ("::", ""):
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind((host, port))
        sock.listen(BACKLOG)
    except OSError:
        sock.close()
        raise
    return sock

