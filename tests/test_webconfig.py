"""The web config file (agent.webconfig): parsing, every refusal, and real TLS handshakes.

A throwaway CA, server and client certificates are made once with the openssl command;
the handshakes run against a ThreadingHTTPServer on 127.0.0.1 in a thread.
"""

from __future__ import annotations

import http.client
import shutil
import socket
import ssl
import subprocess
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from agent.output import webconfig
from agent.output.webconfig import TLSServerConfig, WebConfig, WebConfigError

ECDSA_128 = "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"
ECDSA_256 = "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"


def _openssl(cwd: Path, *args: str) -> None:
    done = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, f"openssl {' '.join(args)}: {done.stderr}"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """ca.pem signs server.pem and client.pem; other-ca.pem signs stranger.pem."""
    assert shutil.which("openssl"), "the openssl command is needed to make test certificates"
    d = tmp_path_factory.mktemp("pki")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    for ca in ("ca", "other-ca"):
        _openssl(d, "req", "-x509", *ec, "-keyout", f"{ca}.key", "-out", f"{ca}.pem",
                 "-days", "2", "-subj", f"/CN=test {ca}",
                 "-addext", "basicConstraints=critical,CA:TRUE",
                 "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    leaves = {"server": ("ca", "subjectAltName=DNS:localhost,IP:127.0.0.1\n"
                               "extendedKeyUsage=serverAuth\n"),
              "client": ("ca", "extendedKeyUsage=clientAuth\n"),
              "stranger": ("other-ca", "extendedKeyUsage=clientAuth\n")}
    for serial, (name, (ca, ext)) in enumerate(leaves.items(), start=1):
        (d / f"{name}.ext").write_text("basicConstraints=CA:FALSE\n"
                                       "keyUsage=critical,digitalSignature\n" + ext)
        _openssl(d, "req", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr",
                 "-subj", f"/CN={name}")
        _openssl(d, "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem",
                 "-CAkey", f"{ca}.key", "-set_serial", str(serial), "-days", "2",
                 "-extfile", f"{name}.ext", "-out", f"{name}.pem")
    _openssl(d, "pkey", "-in", "server.key", "-aes256", "-passout", "pass:secret",
             "-out", "encrypted.key")
    (d / "junk.pem").write_text("not a certificate\n")
    return d


def write(directory: Path, text: str, name: str = "web.yml") -> str:
    path = directory / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return str(path)


def tls(pki: Path, extra: str = "", cert: str = "server") -> str:
    """A tls_server_config block with the server's certificate and ``extra`` lines."""
    return (f"tls_server_config:\n  cert_file: {pki}/{cert}.pem\n  key_file: {pki}/{cert}.key\n"
            + "".join(f"  {line}\n" for line in extra.splitlines()))


def refusal(path: str) -> WebConfigError:
    with pytest.raises(WebConfigError) as info:
        webconfig.load(path)
    err = info.value
    assert err.exit_code == 2
    assert "\n" not in str(err)
    assert err.hint, "every refusal carries a hint"
    return err


# ---------------------------------------------------------------------------------------
# Parsing.

def test_every_key(pki: Path, tmp_path: Path) -> None:
    path = write(tmp_path, tls(pki, f"""\
client_auth_type: RequireAndVerifyClientCert
client_ca_file: {pki}/ca.pem
min_version: TLS13
max_version: TLS13
cipher_suites: [{ECDSA_256}, {ECDSA_128}]
prefer_server_cipher_suites: false""") + """\
http_server_config:
  http2: false
  headers:
    X-Frame-Options: deny
    Strict-Transport-Security: max-age=31536000
basic_auth_users: {}
rate_limit:
""")
    assert webconfig.load(path) == WebConfig(path, TLSServerConfig(
        f"{pki}/server.pem", f"{pki}/server.key", "RequireAndVerifyClientCert",
        f"{pki}/ca.pem", "TLS13", "TLS13", (ECDSA_256, ECDSA_128), False),
        (("X-Frame-Options", "deny"), ("Strict-Transport-Security", "max-age=31536000")))


def test_defaults(pki: Path, tmp_path: Path) -> None:
    path = write(tmp_path, tls(pki))
    config = webconfig.load(path)
    assert config == WebConfig(path, TLSServerConfig(f"{pki}/server.pem", f"{pki}/server.key"))
    assert config.tls_server_config == TLSServerConfig(
        f"{pki}/server.pem", f"{pki}/server.key", "NoClientCert", None, "TLS12", "TLS13", (),
        True)
    ctx = config.ssl_context()
    assert ctx is not None
    assert ctx.verify_mode == ssl.CERT_NONE
    assert (ctx.minimum_version, ctx.maximum_version) == (ssl.TLSVersion.TLSv1_2,
                                                          ssl.TLSVersion.TLSv1_3)
    assert ctx.options & ssl.OP_CIPHER_SERVER_PREFERENCE


@pytest.mark.parametrize("text", ["", "# nothing\n", "tls_server_config:\n",
                                  "tls_server_config: {}\n", "tls_server_config: {cert_file: ''}\n",
                                  "http_server_config: {headers: {X-XSS-Protection: '0'}}\n"])
def test_no_tls(tmp_path: Path, text: str) -> None:
    path = write(tmp_path, text)
    config = webconfig.load(path)
    assert config.tls_server_config is None
    assert config.ssl_context() is None
    assert config.headers == ((("X-XSS-Protection", "0"),) if "headers" in text else ())


def test_relative_paths_start_at_the_config_file(pki: Path, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    certs = tmp_path / "certs"
    certs.mkdir()
    for name in ("server.pem", "server.key", "ca.pem"):
        shutil.copy(pki / name, certs / name)
    path = write(tmp_path / "etc", "tls_server_config:\n  cert_file: ../certs/server.pem\n"
                 "  key_file: ../certs/server.key\n  client_ca_file: "
                 f"{certs}/ca.pem\n  client_auth_type: VerifyClientCertIfGiven\n")
    monkeypatch.chdir(pki)  # the working directory plays no part
    t = webconfig.load(path).tls_server_config
    assert t is not None
    assert (t.cert_file, t.key_file) == (f"{tmp_path}/etc/../certs/server.pem",
                                         f"{tmp_path}/etc/../certs/server.key")
    assert t.client_ca_file == f"{certs}/ca.pem"  # absolute: unchanged
    monkeypatch.chdir(tmp_path / "etc")  # a bare file name: relative to its own directory
    shutil.copy(pki / "server.pem", tmp_path / "etc" / "s.pem")
    shutil.copy(pki / "server.key", tmp_path / "etc" / "s.key")
    write(tmp_path / "etc", "tls_server_config: {cert_file: s.pem, key_file: s.key}\n", "b.yml")
    t = webconfig.load("b.yml").tls_server_config
    assert t is not None and (t.cert_file, t.key_file) == ("s.pem", "s.key")


@pytest.mark.parametrize(("auth", "mode"), [("NoClientCert", ssl.CERT_NONE),
                                            ("VerifyClientCertIfGiven", ssl.CERT_OPTIONAL),
                                            ("RequireAndVerifyClientCert", ssl.CERT_REQUIRED)])
def test_client_auth_modes(pki: Path, tmp_path: Path, auth: str, mode: ssl.VerifyMode) -> None:
    ca = "" if auth == "NoClientCert" else f"\nclient_ca_file: {pki}/ca.pem"
    ctx = webconfig.load(write(tmp_path, tls(pki, f"client_auth_type: {auth}{ca}"))).ssl_context()
    assert ctx is not None and ctx.verify_mode == mode
    assert len(ctx.get_ca_certs()) == (0 if auth == "NoClientCert" else 1)


@pytest.mark.parametrize(("low", "high"), [("TLS10", "TLS11"), ("TLS11", "TLS12"),
                                           ("TLS12", "TLS12"), ("TLS13", "TLS13")])
def test_versions(pki: Path, tmp_path: Path, low: str, high: str) -> None:
    config = webconfig.load(write(tmp_path, tls(pki, f"min_version: {low}\nmax_version: {high}")))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # asking for TLS 1.0 by name is not a developer warning
        ctx = config.ssl_context()
    assert ctx is not None
    assert (ctx.minimum_version, ctx.maximum_version) == (webconfig.VERSIONS[low],
                                                          webconfig.VERSIONS[high])


def test_cipher_suites_and_preference(pki: Path, tmp_path: Path) -> None:
    ctx = webconfig.load(write(tmp_path, tls(pki, f"cipher_suites: [{ECDSA_128}]\n"
                                                  "prefer_server_cipher_suites: false"))
                         ).ssl_context()
    assert ctx is not None
    assert [c["name"] for c in ctx.get_ciphers() if c["protocol"] == "TLSv1.2"] == [
        "ECDHE-ECDSA-AES128-GCM-SHA256"]
    assert not ctx.options & ssl.OP_CIPHER_SERVER_PREFERENCE


def test_cipher_names_match_openssl() -> None:
    done = subprocess.run(["openssl", "ciphers", "-stdname", "ALL:@SECLEVEL=0"],
                          capture_output=True, text=True, timeout=60, check=True)
    standard = {}
    for line in done.stdout.splitlines():
        iana, dash, name = line.split()[:3]
        assert dash == "-"
        standard[iana] = name
    assert len(webconfig.CIPHERS) == 14
    assert {go: standard[go] for go in webconfig.CIPHERS} == webconfig.CIPHERS


# ---------------------------------------------------------------------------------------
# Refusals: one line each, naming the file and the key.

REFUSALS = [
    ("a: b: c\n", ":1:5: not valid YAML: mapping values are not allowed here", "quoting"),
    ("- tls_server_config\n", ": the web config must be a mapping", "key: value"),
    ("tls_sever_config: {}\n", ": unknown key 'tls_sever_config'",
     "did you mean 'tls_server_config'?"),
    ("{TLS}min_versoin: TLS12\n", ": unknown key 'tls_server_config.min_versoin'",
     "did you mean 'min_version'?"),
    ("http_server_config: {http3: true}\n", ": unknown key 'http_server_config.http3'",
     "did you mean 'http2'?"),
    ("tls_server_config: {cert_file: 5, key_file: k}\n",
     ": tls_server_config.cert_file must be a string", "quote it"),
    ("{TLS}prefer_server_cipher_suites: maybe\n",
     ": tls_server_config.prefer_server_cipher_suites must be true or false",
     "write true or false unquoted"),
    (f"{{TLS}}cipher_suites: {ECDSA_128}\n",
     ": tls_server_config.cipher_suites must be a list of strings", "[A, B]"),
    ("http_server_config: [headers]\n", ": http_server_config must be a mapping", "key: value"),
    ("http_server_config: {headers: [X-Frame-Options]}\n",
     ": http_server_config.headers must be a mapping", "key: value"),
    ("http_server_config: {http2: 'on'}\n",
     ": http_server_config.http2 must be true or false", "true or false"),
    ("basic_auth_users:\n  alice: $2y$10$abcdefghijklmnopqrstuv\n",
     ": basic_auth_users.alice: not a bcrypt hash", "htpasswd -nBC 10 alice"),
    ("basic_auth_users:\n  alice: secret\n",
     ": basic_auth_users.alice: not a bcrypt hash", "never the password itself"),
    ("basic_auth_users: [alice]\n", ": basic_auth_users must be a mapping", "user: bcrypt"),
    ("basic_auth_users:\n  'a:b': $2y$10$" + "a" * 53 + "\n",
     ": basic_auth_users: 'a:b' is not a user name", "without ':'"),
    ("rate_limit: {interval: 1s, burst: 5}\n", ": rate_limit: rate limiting is not supported",
     "reverse proxy"),
    ("tls_server_config: {cert: PEM, key: PEM}\n",
     ": tls_server_config.cert: inline PEM is not supported", "use cert_file"),
    ("{TLS}client_ca: PEM\n", ": tls_server_config.client_ca: inline PEM is not supported",
     "use client_ca_file"),
    ("{TLS}curve_preferences: [X25519]\n",
     ": tls_server_config.curve_preferences: choosing curves is not supported", "remove it"),
    ("{TLS}client_allowed_sans: [a.example]\n",
     ": tls_server_config.client_allowed_sans: checking client SANs is not supported",
     "CA of their own"),
    ("tls_server_config: {key_file: k}\n", ": tls_server_config.cert_file is missing",
     "both cert_file and key_file"),
    ("tls_server_config: {cert_file: c}\n", ": tls_server_config.key_file is missing",
     "both cert_file and key_file"),
    ("{TLS}client_auth_type: RequireAndVerifyClientCerts\n",
     ": tls_server_config.client_auth_type: unknown value 'RequireAndVerifyClientCerts'",
     "did you mean 'RequireAndVerifyClientCert'?"),
    ("{TLS}client_auth_type: RequestClientCert\n  {CA}",
     ": tls_server_config.client_auth_type: RequestClientCert is not supported: noop verifies "
     "every client certificate it takes", "use VerifyClientCertIfGiven with client_ca_file"),
    ("{TLS}client_auth_type: RequireAnyClientCert\n  {CA}",
     ": tls_server_config.client_auth_type: RequireAnyClientCert is not supported: noop "
     "verifies every client certificate it takes",
     "use RequireAndVerifyClientCert with client_ca_file"),
    ("{TLS}client_auth_type: RequireAndVerifyClientCert\n",
     ": tls_server_config.client_ca_file is missing: client_auth_type "
     "RequireAndVerifyClientCert needs it", "CA that signs the client certificates"),
    ("{TLS}client_auth_type: VerifyClientCertIfGiven\n",
     ": tls_server_config.client_ca_file is missing: client_auth_type "
     "VerifyClientCertIfGiven needs it", "CA that signs the client certificates"),
    ("{TLS}{CA}", ": tls_server_config.client_ca_file is set but client_auth_type is "
     "NoClientCert", "set client_auth_type: RequireAndVerifyClientCert"),
    ("{TLS}min_version: TLS1.2\n", ": tls_server_config.min_version: unknown value 'TLS1.2'",
     "did you mean 'TLS12'?"),
    ("{TLS}max_version: SSL3\n", ": tls_server_config.max_version: unknown value 'SSL3'",
     "one of TLS10, TLS11, TLS12, TLS13"),
    ("{TLS}min_version: TLS13\n  max_version: TLS12\n",
     ": tls_server_config.min_version TLS13 is above max_version TLS12", "swap them"),
    ("{TLS}cipher_suites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA]\n",
     ": tls_server_config.cipher_suites: unknown value 'TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA'",
     "did you mean 'TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256'?"),
    ("{TLS}cipher_suites: [TLS_AES_128_GCM_SHA256]\n",
     ": tls_server_config.cipher_suites: TLS_AES_128_GCM_SHA256 is a TLS 1.3 suite",
     "cannot be chosen"),
    ("http_server_config: {headers: {Server: noop}}\n",
     ": http_server_config.headers: 'Server' cannot be set", "settable: Strict-Transport-"),
    ("http_server_config: {headers: {X-Frame-Options: allow}}\n",
     ": http_server_config.headers.X-Frame-Options: 'allow' is not allowed",
     "one of deny, sameorigin"),
    ('http_server_config: {headers: {Content-Security-Policy: "a\\nb"}}\n',
     ": http_server_config.headers.Content-Security-Policy must be a one-line string", "quote"),
]


@pytest.mark.parametrize(("text", "message", "hint"), REFUSALS,
                         ids=[m.lstrip(":0123456789 ")[:60] for _, m, _ in REFUSALS])
def test_refusals(pki: Path, tmp_path: Path, text: str, message: str, hint: str) -> None:
    text = text.replace("{TLS}", tls(pki) + "  ")
    text = text.replace("{CA}", f"client_ca_file: {pki}/ca.pem\n")
    path = write(tmp_path, text)
    err = refusal(path)
    assert err.message == path + message
    assert hint in err.hint


@pytest.mark.parametrize(("extra", "cert", "message", "hint"), [
    ("", "missing", "tls_server_config.cert_file: no such file {pki}/missing.pem",
     "relative paths start at the web config file's directory"),
    ("client_auth_type: RequireAndVerifyClientCert\nclient_ca_file: nowhere/ca.pem", "server",
     "tls_server_config.client_ca_file: no such file {dir}/nowhere/ca.pem", "relative paths"),
    ("client_auth_type: VerifyClientCertIfGiven\nclient_ca_file: {pki}/junk.pem", "server",
     "tls_server_config.client_ca_file: cannot load {pki}/junk.pem: [X509: "
     "NO_CERTIFICATE_OR_CRL_FOUND] no certificate or crl found", "PEM certificates"),
])
def test_missing_and_bad_files(pki: Path, tmp_path: Path, extra: str, cert: str,
                               message: str, hint: str) -> None:
    path = write(tmp_path, tls(pki, extra.format(pki=pki), cert))
    err = refusal(path)
    assert err.message == f"{path}: " + message.format(pki=pki, dir=tmp_path)
    assert hint in err.hint


def test_missing_key_file(pki: Path, tmp_path: Path) -> None:
    path = write(tmp_path, f"tls_server_config: {{cert_file: {pki}/server.pem, key_file: k}}\n")
    assert refusal(path).message == f"{path}: tls_server_config.key_file: no such file {tmp_path}/k"


def test_cert_and_key_that_do_not_match(pki: Path, tmp_path: Path) -> None:
    path = write(tmp_path, f"tls_server_config:\n  cert_file: {pki}/server.pem\n"
                 f"  key_file: {pki}/client.key\n")
    err = refusal(path)
    assert err.message == f"{path}: tls_server_config: key_file is not the key of cert_file"
    assert err.hint == "give the private key that belongs to the certificate"


def test_cert_that_is_not_pem(pki: Path, tmp_path: Path) -> None:
    path = write(tmp_path, f"tls_server_config:\n  cert_file: {pki}/junk.pem\n"
                 f"  key_file: {pki}/server.key\n")
    err = refusal(path)
    assert err.message == f"{path}: tls_server_config: cannot load cert_file and key_file: " \
                          "[SSL] PEM lib"
    assert err.hint == "both must be PEM files"


def test_encrypted_key_is_refused_without_a_prompt(pki: Path, tmp_path: Path) -> None:
    path = write(tmp_path, f"tls_server_config:\n  cert_file: {pki}/server.pem\n"
                 f"  key_file: {pki}/encrypted.key\n")
    err = refusal(path)
    assert err.message == f"{path}: tls_server_config.key_file: {pki}/encrypted.key is encrypted"
    assert "openssl pkey" in err.hint


def test_missing_and_unreadable_config(tmp_path: Path) -> None:
    err = refusal(str(tmp_path / "nope.yml"))
    assert err.message == f"{tmp_path}/nope.yml: no such web config file"
    err = refusal(str(tmp_path))
    assert err.message == f"{tmp_path}: is a directory"


# ---------------------------------------------------------------------------------------
# Handshakes with a real server.

@contextmanager
def serving(config: WebConfig) -> Iterator[int]:
    """An HTTPS server on 127.0.0.1 with ``config``: its port. GET / answers with the CN of
    the client's certificate, or '-', and carries the configured headers."""
    ctx = config.ssl_context()
    assert ctx is not None

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            assert isinstance(self.connection, ssl.SSLSocket)
            cert: Any = self.connection.getpeercert()
            body = (dict(rdn[0] for rdn in cert["subject"])["commonName"] if cert
                    else "-").encode()
            self.send_response(200)
            for name, value in config.headers:
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def client(pki: Path, cert: str | None = None, ca: str = "ca",
           max_version: ssl.TLSVersion | None = None, ciphers: str | None = None
           ) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki / f"{ca}.pem"))
    if cert is not None:
        ctx.load_cert_chain(pki / f"{cert}.pem", pki / f"{cert}.key")
    if max_version is not None:
        ctx.maximum_version = max_version
    if ciphers is not None:
        ctx.set_ciphers(ciphers)
    return ctx


def get(port: int, ctx: ssl.SSLContext) -> tuple[str, dict[str, str]]:
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=10)
    try:
        conn.request("GET", "/")
        response = conn.getresponse()
        assert response.status == 200
        return response.read().decode(), dict(response.getheaders())
    finally:
        conn.close()


def refused(port: int, ctx: ssl.SSLContext) -> str:
    """The reason the server gives for refusing this client (its TLS alert)."""
    with pytest.raises(ssl.SSLError) as info, \
            socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
            ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls_socket:
        tls_socket.recv(1)  # TLS 1.3: the server's verdict comes after the client's handshake
    return str(info.value.reason)


def load(directory: Path, text: str) -> WebConfig:
    return webconfig.load(write(directory, text))


def test_plain_tls(pki: Path, tmp_path: Path) -> None:
    config = load(tmp_path, tls(pki) + "http_server_config:\n  headers:\n"
                  "    X-Content-Type-Options: nosniff\n")
    with serving(config) as port:
        body, headers = get(port, client(pki))
        assert body == "-"
        assert headers["X-Content-Type-Options"] == "nosniff"
        assert get(port, client(pki, cert="client"))[0] == "-"  # not asked for, not read
        assert refused(port, client(pki, ca="other-ca")) == "CERTIFICATE_VERIFY_FAILED"


def test_require_and_verify_client_cert(pki: Path, tmp_path: Path) -> None:
    config = load(tmp_path, tls(pki, f"client_auth_type: RequireAndVerifyClientCert\n"
                                     f"client_ca_file: {pki}/ca.pem"))
    with serving(config) as port:
        assert refused(port, client(pki)) == "TLSV13_ALERT_CERTIFICATE_REQUIRED"
        assert refused(port, client(pki, cert="stranger")) == "TLSV1_ALERT_UNKNOWN_CA"
        assert get(port, client(pki, cert="client"))[0] == "client"


def test_verify_client_cert_if_given(pki: Path, tmp_path: Path) -> None:
    config = load(tmp_path, tls(pki, f"client_auth_type: VerifyClientCertIfGiven\n"
                                     f"client_ca_file: {pki}/ca.pem"))
    with serving(config) as port:
        assert get(port, client(pki))[0] == "-"
        assert get(port, client(pki, cert="client"))[0] == "client"
        assert refused(port, client(pki, cert="stranger")) == "TLSV1_ALERT_UNKNOWN_CA"


def test_min_version_tls13_refuses_a_tls12_client(pki: Path, tmp_path: Path) -> None:
    config = load(tmp_path, tls(pki, "min_version: TLS13"))
    with serving(config) as port:
        assert refused(port, client(pki, max_version=ssl.TLSVersion.TLSv1_2)) == \
            "TLSV1_ALERT_PROTOCOL_VERSION"
        assert get(port, client(pki))[0] == "-"


def test_max_version_tls12(pki: Path, tmp_path: Path) -> None:
    config = load(tmp_path, tls(pki, "max_version: TLS12"))
    with serving(config) as port, \
            socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
            client(pki).wrap_socket(raw, server_hostname="127.0.0.1") as s:
        assert s.version() == "TLSv1.2"


@pytest.mark.parametrize(("prefer", "chosen"), [("true", "ECDHE-ECDSA-AES256-GCM-SHA384"),
                                                ("false", "ECDHE-ECDSA-AES128-GCM-SHA256")])
def test_cipher_suites_over_tls12(pki: Path, tmp_path: Path, prefer: str, chosen: str) -> None:
    config = load(tmp_path, tls(pki, f"max_version: TLS12\ncipher_suites: [{ECDSA_256}, "
                                     f"{ECDSA_128}]\nprefer_server_cipher_suites: {prefer}"))
    ours = client(pki, ciphers="ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384")
    with serving(config) as port:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
                ours.wrap_socket(raw, server_hostname="127.0.0.1") as s:
            assert s.cipher()[0] == chosen
        assert refused(port, client(pki, ciphers="ECDHE-ECDSA-CHACHA20-POLY1305")) == \
            "SSLV3_ALERT_HANDSHAKE_FAILURE"


def _scrape(url: str, user: str | None = None, password: str = "",
            ctx: ssl.SSLContext | None = None) -> tuple[int, str, dict[str, str]]:
    import base64
    import urllib.error
    import urllib.request

    request = urllib.request.Request(url)
    if user is not None:
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=10, context=ctx) as r:
            return r.status, r.read().decode(), dict(r.getheaders())
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(), dict(e.headers)


@pytest.mark.parametrize("with_tls", [False, True])
def test_basic_auth(pki: Path, tmp_path: Path, with_tls: bool) -> None:
    """noop's own server with basic_auth_users (bcrypt hashes, $2y$ as htpasswd writes
    them): every path needs a user's password; without it, or with a wrong one or an
    unknown user, 401 and a Basic challenge."""
    import bcrypt
    from prometheus_client import CollectorRegistry, Gauge

    from agent.output.serve import Server

    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4)).decode()
    text = (tls(pki) if with_tls else "") + \
        f"basic_auth_users:\n  alice: '{hashed.replace('$2b$', '$2y$')}'\n" \
        f"  bob: '{bcrypt.hashpw(b'other', bcrypt.gensalt(rounds=4)).decode()}'\n"
    config = load(tmp_path, text)
    registry = CollectorRegistry()
    Gauge("noop_test_value", "a value", registry=registry).set(7)
    server = Server("127.0.0.1:0", registry, lambda: (True, "ok"), lambda: (True, "ready"),
                    config)
    ctx = client(pki) if with_tls else None
    try:
        base = f"{server.scheme}://{server.address}"
        status, body, headers = _scrape(base + "/metrics", "alice", "s3cret", ctx)
        assert status == 200 and "noop_test_value 7.0" in body
        assert _scrape(base + "/metrics", "alice", "s3cret", ctx)[0] == 200  # remembered
        assert _scrape(base + "/readyz", "bob", "other", ctx)[:2] == (200, "ready\n")
        for user, password in ((None, ""), ("alice", "wrong"), ("bob", "s3cret"),
                               ("carol", "s3cret"), ("alice", "")):
            status, body, headers = _scrape(base + "/metrics", user, password, ctx)
            assert status == 401 and "noop_test_value" not in body, (user, password)
            assert headers["WWW-Authenticate"] == 'Basic realm="noop"'
        assert _scrape(base + "/healthz", None, "", ctx)[0] == 401
    finally:
        server.close()
