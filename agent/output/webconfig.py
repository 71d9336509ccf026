"""Read a Prometheus web config file into a server ssl.SSLContext; refuse what it cannot honour."""

from __future__ import annotations

import base64
import hashlib
import re
import ssl
import threading
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import yaml

from agent import files, numbers
from agent.errors import NoopError, nearest

CLIENT_AUTH = {"NoClientCert": ssl.CERT_NONE, "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
               "RequireAndVerifyClientCert": ssl.CERT_REQUIRED}
_UNVERIFIED = {  # Go modes that take a client certificate unverified; ssl has no such mode
    "RequestClientCert": "use VerifyClientCertIfGiven with client_ca_file, or NoClientCert",
    "RequireAnyClientCert": "use RequireAndVerifyClientCert with client_ca_file",
    "RequireClientCert": "use RequireAndVerifyClientCert with client_ca_file"}  # an old name
VERSIONS = {"TLS10": ssl.TLSVersion.TLSv1, "TLS11": ssl.TLSVersion.TLSv1_1,
            "TLS12": ssl.TLSVersion.TLSv1_2, "TLS13": ssl.TLSVersion.TLSv1_3}
# The TLS 1.2 cipher suites Go offers, by Go's (IANA) name -> OpenSSL's name.
_BULK = {"AES_128_CBC_SHA": "AES128-SHA", "AES_256_CBC_SHA": "AES256-SHA",
         "AES_128_GCM_SHA256": "AES128-GCM-SHA256", "AES_256_GCM_SHA384": "AES256-GCM-SHA384",
         "CHACHA20_POLY1305_SHA256": "CHACHA20-POLY1305"}
CIPHERS = {f"TLS_{kx}_WITH_{bulk}": prefix + name for kx, prefix in
           (("RSA", ""), ("ECDHE_RSA", "ECDHE-RSA-"), ("ECDHE_ECDSA", "ECDHE-ECDSA-"))
           for bulk, name in _BULK.items() if kx != "RSA" or "CHACHA" not in bulk}
_TLS13 = ("TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256")
# The response headers exporter-toolkit lets a config set, with their allowed values (if fixed).
HEADERS: dict[str, tuple[str, ...]] = {
    "Strict-Transport-Security": (), "X-Content-Type-Options": ("nosniff",), "X-XSS-Protection": (),
    "X-Frame-Options": ("deny", "sameorigin"), "Content-Security-Policy": ()}
_TLS_KEYS = ("cert_file", "key_file", "client_auth_type", "client_ca_file", "min_version",
             "max_version", "cipher_suites", "prefer_server_cipher_suites")
_REFUSED = {  # keys of the format that noop cannot honour: (why, what to do instead)
    "rate_limit": ("rate limiting is not supported", "put a reverse proxy in front of noop"),
    **{f"tls_server_config.{k}": ("inline PEM is not supported",
                                  f"write it to a file and use {k}_file")
       for k in ("cert", "key", "client_ca")},
    "tls_server_config.curve_preferences": ("choosing curves is not supported", "remove it"),
    "tls_server_config.client_allowed_sans": ("checking client SANs is not supported",
                                              "give those clients a CA of their own")}
_KINDS = {str: ("a string", "quote it"), bool: ("true or false", "write true or false unquoted"),
          list: ("a list of strings", "write [A, B]"),
          dict: ("a mapping", "write 'key: value' lines")}
_EMPTY: tuple[Any, ...] = (None, "", [], {})


class WebConfigError(NoopError):
    """A web config file that cannot be used as written. Exit code 2."""

    exit_code = 2


@dataclass(frozen=True, slots=True)
class TLSServerConfig:
    cert_file: str  # file paths are resolved against the config file's directory
    key_file: str
    client_auth_type: str = "NoClientCert"
    client_ca_file: str | None = None
    min_version: str = "TLS12"
    max_version: str = "TLS13"
    cipher_suites: tuple[str, ...] = ()  # Go's names, TLS 1.2 and older; () for the defaults
    prefer_server_cipher_suites: bool = True


@dataclass(frozen=True, slots=True)
class WebConfig:
    path: str
    tls_server_config: TLSServerConfig | None = None
    headers: tuple[tuple[str, str], ...] = ()  # (name, value) to add to every response
    basic_auth_users: tuple[tuple[str, str], ...] = ()  # (user, bcrypt hash)

    def ssl_context(self) -> ssl.SSLContext | None:
        """A new server context, reading the certificate files again; None without TLS."""
        t = self.tls_server_config
        if t is None:
            return None
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        with warnings.catch_warnings():  # TLS10 and TLS11 are deprecated, but asked for
            warnings.simplefilter("ignore", DeprecationWarning)
            ctx.minimum_version = VERSIONS[t.min_version]
            ctx.maximum_version = VERSIONS[t.max_version]
        ctx.options &= ~ssl.OP_CIPHER_SERVER_PREFERENCE
        if t.prefer_server_cipher_suites:
            ctx.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
        if t.cipher_suites:
            ctx.set_ciphers(":".join(CIPHERS[c] for c in t.cipher_suites))
        for key in ("cert_file", "key_file", "client_ca_file"):
            file = getattr(t, key)
            if file is not None and not Path(file).is_file():
                _fail(self.path, f"tls_server_config.{key}: no such file {file}",
                      "relative paths start at the web config file's directory")

        def encrypted() -> NoReturn:
            _fail(self.path, f"tls_server_config.key_file: {t.key_file} is encrypted",
                  "decrypt it: openssl pkey -in KEY -out PLAIN_KEY")

        try:
            ctx.load_cert_chain(t.cert_file, t.key_file, password=encrypted)
        except OSError as exc:
            if getattr(exc, "reason", None) == "KEY_VALUES_MISMATCH":
                _fail(self.path, "tls_server_config: key_file is not the key of cert_file",
                      "give the private key that belongs to the certificate")
            _fail(self.path, f"tls_server_config: cannot load cert_file and key_file: "
                  f"{_why(exc)}", "both must be PEM files")
        ctx.verify_mode = CLIENT_AUTH[t.client_auth_type]
        if t.client_ca_file is not None:
            try:
                ctx.load_verify_locations(cafile=t.client_ca_file)
            except OSError as exc:
                _fail(self.path, f"tls_server_config.client_ca_file: cannot load "
                      f"{t.client_ca_file}: {_why(exc)}", "it must hold PEM certificates")
        return ctx


def load(path: str) -> WebConfig:
    """Read a web config file and check it, certificate files included."""
    if not files.exists(path):
        _fail(path, "no such web config file", "give the path of a web config file (YAML)")
    text = files.read_text(path, "web config file", error=WebConfigError)
    try:
        doc = yaml.load(text, Loader=numbers.yaml_loader())  # a SafeLoader: decimal numbers
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""
        problem = " ".join(str(getattr(exc, "problem", None) or exc).split())
        _fail(path + where, f"not valid YAML: {problem}", "check indentation and quoting")
    top = _mapping(path, "", doc, ("tls_server_config", "http_server_config",
                                   "basic_auth_users"))
    tls = _tls(path, top.get("tls_server_config"), Path(path).parent)
    config = WebConfig(path, tls, _headers(path, top.get("http_server_config")),
                       _users(path, top.get("basic_auth_users")))
    config.ssl_context()  # fail now on bad certificate files, not at the first scrape
    return config


def _fail(path: str, message: str, hint: str) -> NoReturn:
    raise WebConfigError(f"{path}: {message}", hint) from None


def _mapping(path: str, where: str, value: Any, keys: tuple[str, ...]) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        _fail(path, f"{where or 'the web config'} must be a mapping", _KINDS[dict][1])
    for key, item in value.items():
        full = f"{where}.{key}" if where else str(key)
        if full in _REFUSED and item not in _EMPTY:
            _fail(path, f"{full}: {_REFUSED[full][0]}", _REFUSED[full][1])
        if key not in keys and full not in _REFUSED:
            near = nearest(str(key), keys, 1)
            _fail(path, f"unknown key {full!r}", f"did you mean {near[0]!r}?" if near
                  else "expected one of " + ", ".join(keys))
    return value


def _get(path: str, m: dict[str, Any], key: str, kind: type, default: Any,
         allowed: tuple[str, ...] = ()) -> Any:
    """m[key] checked to be a ``kind`` (and one of ``allowed``); key is 'section.name'."""
    value = m.get(key.rpartition(".")[2])
    if value is None:
        return default
    if not isinstance(value, kind) or (isinstance(value, list)
                                       and not all(isinstance(v, str) for v in value)):
        _fail(path, f"{key} must be {_KINDS[kind][0]}", _KINDS[kind][1])
    for v in (value if isinstance(value, list) else [value]) if allowed else []:
        _one_of(path, key, v, allowed)
    return value


def _one_of(path: str, key: str, value: object, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        near = nearest(str(value), allowed, 1)
        _fail(path, f"{key}: unknown value {value!r}", f"did you mean {near[0]!r}?" if near
              else "one of " + ", ".join(allowed))


def _tls(path: str, value: Any, base: Path) -> TLSServerConfig | None:
    w = "tls_server_config."
    m = _mapping(path, w[:-1], value, _TLS_KEYS)
    if all(item in _EMPTY for item in m.values()):
        return None  # as exporter-toolkit: no TLS
    cert, key = (_get(path, m, w + k, str, "") for k in ("cert_file", "key_file"))
    if not cert or not key:
        _fail(path, f"{w}{'key_file' if cert else 'cert_file'} is missing",
              "TLS needs both cert_file and key_file (PEM files)")
    auth = _get(path, m, w + "client_auth_type", str, "NoClientCert")
    if auth in _UNVERIFIED:
        _fail(path, f"{w}client_auth_type: {auth} is not supported: noop verifies every client "
              "certificate it takes", _UNVERIFIED[auth])
    _one_of(path, w + "client_auth_type", auth, tuple(CLIENT_AUTH))
    ca = _get(path, m, w + "client_ca_file", str, "") or None
    if auth != "NoClientCert" and ca is None:
        _fail(path, f"{w}client_ca_file is missing: client_auth_type {auth} needs it",
              "give the PEM file of the CA that signs the client certificates")
    if auth == "NoClientCert" and ca is not None:
        _fail(path, f"{w}client_ca_file is set but client_auth_type is NoClientCert",
              "set client_auth_type: RequireAndVerifyClientCert")
    low = _get(path, m, w + "min_version", str, "TLS12", tuple(VERSIONS))
    high = _get(path, m, w + "max_version", str, "TLS13", tuple(VERSIONS))
    if VERSIONS[low] > VERSIONS[high]:
        _fail(path, f"{w}min_version {low} is above max_version {high}", "swap them")
    ciphers = tuple(_get(path, m, w + "cipher_suites", list, []))
    for c in ciphers:
        if c in _TLS13:
            _fail(path, f"{w}cipher_suites: {c} is a TLS 1.3 suite", "those cannot be chosen")
        _one_of(path, w + "cipher_suites", c, tuple(CIPHERS))
    prefer = _get(path, m, w + "prefer_server_cipher_suites", bool, True)
    return TLSServerConfig(str(base / cert), str(base / key), auth,
                           str(base / ca) if ca else None, low, high, ciphers, prefer)


def _headers(path: str, value: Any) -> tuple[tuple[str, str], ...]:
    w = "http_server_config."
    m = _mapping(path, w[:-1], value, ("headers", "http2"))
    _get(path, m, w + "http2", bool, True)  # checked, then unused: noop serves HTTP/1.1
    headers = _get(path, m, w + "headers", dict, {})
    for name, text in headers.items():
        if name not in HEADERS:
            _fail(path, f"{w}headers: {name!r} cannot be set", "settable: " + ", ".join(HEADERS))
        if not isinstance(text, str) or re.search(r"[\r\n]", text):
            _fail(path, f"{w}headers.{name} must be a one-line string", "quote the value")
        if HEADERS[name] and text not in HEADERS[name]:
            _fail(path, f"{w}headers.{name}: {text!r} is not allowed",
                  "one of " + ", ".join(HEADERS[name]))
    return tuple(headers.items())


_BCRYPT = re.compile(r"\$2[aby]\$(0[4-9]|[12]\d|3[01])\$[./A-Za-z0-9]{53}")


def _users(path: str, value: Any) -> tuple[tuple[str, str], ...]:
    """basic_auth_users: user name -> bcrypt hash of the password, as exporter-toolkit
    takes them (htpasswd -nBC 10 USER makes one)."""
    if value is None:
        return ()
    if not isinstance(value, dict):
        _fail(path, "basic_auth_users must be a mapping", "write 'user: bcrypt hash' lines")
    out = []
    for user, hashed in value.items():
        if not isinstance(user, str) or not user or ":" in user:
            _fail(path, f"basic_auth_users: {user!r} is not a user name",
                  "a non-empty string without ':'")
        if not isinstance(hashed, str) or not _BCRYPT.fullmatch(hashed):
            _fail(path, f"basic_auth_users.{user}: not a bcrypt hash",
                  f"store the password's bcrypt hash (htpasswd -nBC 10 {user}), never the "
                  "password itself")
        out.append((user, hashed))
    return tuple(out)


class BasicAuth:
    """Checks a request's ``Authorization: Basic`` header against the users' bcrypt
    hashes. A bcrypt check takes tens of milliseconds by design, so the credentials
    that passed are remembered (by a digest, never in the clear) for the scrapes
    that follow; an unknown user costs a check as long as a known one."""

    _DUMMY = "$2b$10$" + "." * 53  # checked for unknown users, so they take as long

    def __init__(self, users: tuple[tuple[str, str], ...]) -> None:
        self.users = dict(users)
        self._passed: dict[bytes, None] = {}  # insertion-ordered: the oldest go first
        self._lock = threading.Lock()

    def allows(self, header: str | None) -> bool:
        import bcrypt

        if not header or not header.startswith("Basic "):
            return False
        try:
            user, sep, password = base64.b64decode(header[6:].strip(),
                                                   validate=True).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            return False
        if not sep:
            return False
        key = hashlib.sha256(f"{user}\0{password}".encode()).digest()
        with self._lock:
            if key in self._passed:
                return True
        hashed = self.users.get(user)
        try:
            ok = bcrypt.checkpw(password.encode(), (hashed or self._DUMMY).encode())
        except ValueError:
            ok = False
        if ok and hashed is not None:
            with self._lock:
                self._passed[key] = None
                while len(self._passed) > 64:
                    del self._passed[next(iter(self._passed))]
            return True
        return False


def _why(exc: BaseException) -> str:
    """An exception as a short phrase, without OpenSSL's source locations."""
    return re.sub(r"\s*\(_ssl\.c:\d+\)", "", str(getattr(exc, "strerror", None) or exc))
