"""The HTTP side of ``noop run``: /metrics (prometheus-client's exposition of a
registry), /healthz and /readyz, over plain HTTP or TLS from a web config file.
Serves in threads of its own; knows nothing of BPF."""

from __future__ import annotations

import contextlib
import errno
import gzip
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from agent import numbers
from agent.errors import NoopError
from agent.output import DEFAULT_LISTEN
from agent.output.page import Block, Bundle, Pages

if TYPE_CHECKING:  # read only when noop is given a web config (commands)
    from agent.output.webconfig import WebConfig

Check = Callable[[], tuple[bool, str]]  # (ok, one line saying why)


def parse_listen(text: str, resolve: bool = False) -> tuple[str, int]:
    """``HOST:PORT``, ``[V6]:PORT`` or ``:PORT`` (every address); with ``resolve``, the
    host must be an address of this machine's resolver (checked before anything starts,
    not once the probes are resolved)."""
    host, sep, port = text.rpartition(":")
    ok = bool(sep and numbers.INTEGER.match(port)) and 0 <= int(port) <= 65535
    if host.startswith("[") or host.endswith("]"):  # an IPv6 address in brackets
        ok = ok and host.startswith("[") and host.endswith("]") and ":" in host \
            and "[" not in host[1:] and "]" not in host[:-1]
        host = host[1:-1]
    elif ":" in host:
        ok = False  # an IPv6 address must be in brackets: [::1]:9559
    if not ok or not host.isascii() or any(c.isspace() for c in host):
        raise NoopError(f"--listen {text!r}: expected HOST:PORT, [IPV6]:PORT or :PORT",
                        f"for example {DEFAULT_LISTEN}, [::1]:9559, or :9559 for every "
                        "address")
    if resolve and host:
        try:
            socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
        except (socket.gaierror, UnicodeError) as exc:
            raise NoopError(f"--listen {text!r}: host {host!r} does not resolve "
                            f"({getattr(exc, 'strerror', None) or exc})",
                            "check the host name, or give an address such as 127.0.0.1"
                            ) from None
    return host or "::", int(port)


# A connection that sends nothing this long is closed (a scrape sends its request at
# once); at most this many are served at once, the others closed as they come, so that
# idle or slow clients can neither hold every thread nor every file descriptor.
READ_TIMEOUT = 10.0
MAX_CONNECTIONS = 64
_ACCEPT_BACKOFF = 0.1  # seconds before accepting again when no descriptor is left
_EVICT_WAIT = 0.2  # seconds a new connection waits for the slot an eviction frees


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True
    request_queue_size = 128  # listen()'s backlog: a burst of connections waits in it
    tls: ssl.SSLContext | None = None

    def server_activate(self) -> None:
        super().server_activate()
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self._lock = threading.Lock()
        self._idle: dict[int, socket.socket] = {}  # accepted, no request yet: oldest first

    def asked(self, sock: socket.socket) -> None:
        """The connection ``sock`` sent its request: it is not idle any more."""
        with self._lock:
            self._idle.pop(id(sock), None)

    def _evict(self) -> None:
        """Ends the oldest connection that has sent nothing yet (its thread reads EOF and
        frees its slot): a flood of idle connections never keeps a scrape out."""
        with self._lock:
            oldest = next(iter(self._idle), None)
            sock = self._idle.pop(oldest) if oldest is not None else None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def get_request(self) -> tuple[socket.socket, Any]:
        try:
            sock, addr = super().get_request()
        except OSError as exc:
            if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                # The connection stays queued and the socket readable: without a pause
                # the loop would try again at once, at 100 % of a CPU.
                time.sleep(_ACCEPT_BACKOFF)
            raise
        if self.tls is not None:  # the handshake happens in the connection's own thread
            sock = self.tls.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        return sock, addr

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):  # every slot taken: free the oldest
            self._evict()  # idle one, if any, and wait a moment for it
            if not self._slots.acquire(timeout=_EVICT_WAIT):
                self.shutdown_request(request)  # every slot busy with a request
                return
        with self._lock:
            self._idle[id(request)] = request
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._done(request)
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._done(request)

    def _done(self, request: Any) -> None:
        with self._lock:
            self._idle.pop(id(request), None)
        self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that hung up or failed the TLS handshake is not noop's problem


class _V6Server(_Server):
    address_family = socket.AF_INET6


class _Quiet(WSGIRequestHandler):
    timeout = READ_TIMEOUT  # the socket's: a read that waits longer ends the connection

    def parse_request(self) -> bool:
        server = self.server
        if isinstance(server, _Server):
            server.asked(self.request)  # its request line came: no longer idle
        return bool(super().parse_request())

    def log_message(self, format: str, *args: Any) -> None:
        pass


Parts = Callable[[], list[list[Block] | Bundle]]


def _text(registry: CollectorRegistry, more: Parts | None
          ) -> Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]:
    """/metrics: the registry's families (noop's own first), then ``more``'s parts,
    made one valid page (``page.Pages``), gzipped for a client that takes it."""
    pages = Pages()

    def app(environ: dict[str, Any], start: Callable[..., Any]) -> Iterable[bytes]:
        parts = more() if more is not None else []  # first: what noop says of them
        body = pages.unique([generate_latest(registry), *parts])  # is of this read
        headers = [("Content-Type", CONTENT_TYPE_LATEST)]
        if "gzip" in environ.get("HTTP_ACCEPT_ENCODING", ""):
            body = gzip.compress(body, compresslevel=1)
            headers.append(("Content-Encoding", "gzip"))
        start("200 OK", [*headers, ("Content-Length", str(len(body)))])
        return [body]
    return app


class Server:
    """Serves until ``close``. ``ready`` and ``healthy`` are asked on every request."""

    def __init__(self, listen: str, registry: CollectorRegistry, healthy: Check,
                 ready: Check, web: WebConfig | None = None,
                 more: Parts | None = None) -> None:
        """``more``: parts of families to serve after the registry's (a program's own
        metrics, mirrored under its names and types, which prometheus_client would
        rename; its processes' process_* series). /metrics is the text format."""
        host, port = parse_listen(listen)
        metrics = _text(registry, more)
        headers = list(web.headers) if web else []
        auth = None
        if web and web.basic_auth_users:
            from agent.output.webconfig import BasicAuth
            auth = BasicAuth(web.basic_auth_users)

        def app(environ: dict[str, Any], start: Callable[..., Any]) -> Iterable[bytes]:
            path = environ.get("PATH_INFO", "")
            if auth is not None and not auth.allows(environ.get("HTTP_AUTHORIZATION")):
                start("401 Unauthorized", [("Content-Type", "text/plain; charset=utf-8"),
                                           ("WWW-Authenticate", 'Basic realm="noop"'),
                                           *headers])
                return [b"Unauthorized\n"]
            if path in ("/healthz", "/readyz"):
                ok, why = (healthy if path == "/healthz" else ready)()
                start("200 OK" if ok else "503 Service Unavailable",
                      [("Content-Type", "text/plain; charset=utf-8"), *headers])
                return [(why + "\n").encode()]
            if path == "/metrics":
                def with_headers(status: str, hdrs: list[tuple[str, str]],
                                 *rest: Any) -> Any:
                    return start(status, [*hdrs, *headers], *rest)
                return metrics(environ, with_headers)
            start("404 Not Found", [("Content-Type", "text/plain"), *headers])
            return [b"noop: /metrics, /healthz, /readyz\n"]

        cls = _V6Server if ":" in host else _Server
        try:
            self._httpd = make_server(host, port, app, server_class=cls, handler_class=_Quiet)
        except OSError as exc:
            raise NoopError(f"cannot listen on {listen}: {exc.strerror or exc}",
                            "pick a free port with --listen HOST:PORT") from None
        self._httpd.tls = web.ssl_context() if web else None
        self.scheme = "https" if self._httpd.tls else "http"
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="noop-http",
                                        kwargs={"poll_interval": 0.2}, daemon=True)
        self._thread.start()

    @property
    def address(self) -> str:
        host, port = self._httpd.server_address[:2]
        name = host.decode() if isinstance(host, bytes) else str(host)
        return f"[{name}]:{port}" if ":" in name else f"{name}:{port}"

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
