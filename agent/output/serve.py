"""The HTTP side of ``noop run``: /metrics (prometheus-client's exposition of a
registry), /healthz and /readyz, over plain HTTP or TLS from a web config file.
Serves from a thread of its own (``front``: the connections, bounded); knows nothing
of BPF."""

from __future__ import annotations

import gzip
import socket
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from agent import numbers
from agent.errors import NoopError
from agent.output import DEFAULT_LISTEN, front
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

        try:
            self._sock = front.listening(host, port)
        except OSError as exc:
            raise NoopError(f"cannot listen on {listen}: {exc.strerror or exc}",
                            "pick a free port with --listen HOST:PORT") from None
        tls = web.ssl_context() if web else None
        self.scheme = "https" if tls else "http"
        self._front = front.Front(self._sock, app, tls)

    @property
    def address(self) -> str:
        host, port = self._sock.getsockname()[:2]
        name = host.decode() if isinstance(host, bytes) else str(host)
        return f"[{name}]:{port}" if ":" in name else f"{name}:{port}"

    def close(self) -> None:
        self._front.close()
        self._sock.close()
