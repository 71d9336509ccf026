"""Real vendor services under the client_golang preset: Debian's own builds of the
Prometheus pushgateway, the blackbox exporter and the Prometheus server (stripped Go
programs made with client_golang, as Debian ships them), each started on a loopback
port with its data in a temporary directory and driven by local load.

``noop run --binary`` mirrors every metric object the service updates. At a quiet moment
(the load stopped, noop's ring drained, noop read alike before and after the service's
own scrape) every mirrored series must equal the service's own value (counters and
gauges exactly, a histogram or summary by its count), every series the service
updated must be mirrored, each once per process, and the service must stay healthy.
``noop --binary`` in the terminal must name only series the service has. Privileged:
real BPF.
"""

from __future__ import annotations

import http.client
import http.server
import math
import re
import shutil
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from harness.metrics import fetch, get, samples
from harness.noop import attached_to, drained, start, tracing
from prometheus_client.parser import text_string_to_metric_families

Series = tuple[str, str]  # (metric name, its labels as noop writes them: k=v,k=v sorted)
ROUNDS = 23  # rounds of load (bcc's habit: a prime count of events)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _labels(labels: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def _show(series: Series) -> str:
    return f"{series[0]}{{{series[1]}}}"


def _some(values: list[float]) -> str:
    """The first values of a list, for a message."""
    return ", ".join(map(repr, values[:8])) + (", ..." if len(values) > 8 else "")


@dataclass(frozen=True, slots=True)
class Exposition:
    """A service's metrics the way noop mirrors them: a counter's or gauge's series by
    its value, a histogram's or summary's by its count (a summary's quantiles are not
    mirrored); with every name it shows (families and samples)."""

    values: dict[Series, float]
    kinds: dict[Series, str]  # counter, gauge, histogram, summary, unknown
    names: frozenset[str]


def _exposition(text: str) -> Exposition:
    values: dict[Series, float] = {}
    kinds: dict[Series, str] = {}
    names: set[str] = set()
    for fam in text_string_to_metric_families(text):
        names.add(fam.name)
        counted = fam.type in ("histogram", "summary")
        for s in fam.samples:
            names.add(s.name)
            if counted and s.name != fam.name + "_count":
                continue
            key = (fam.name if counted else s.name, _labels(s.labels))
            values[key] = s.value
            kinds[key] = fam.type
    return Exposition(values, kinds, frozenset(names))


@dataclass(frozen=True, slots=True)
class Row:
    """One row of noop's noop_metric_value."""

    metric: str
    labels: str
    value: float


def _rows(text: str, pid: int) -> tuple[Row, ...]:
    """Every noop_metric_value row of process ``pid``, repeated ones included."""
    for fam in text_string_to_metric_families(text):
        if fam.name == "noop_metric_value":
            return tuple(Row(s.labels["metric"], s.labels["labels"], s.value)
                         for s in fam.samples if s.labels["pid"] == str(pid))
    return ()


# ---- the services -------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Vendor:
    """A Debian service made with client_golang, and how the test runs and drives it."""

    binary: str  # in /usr/bin
    flags: Callable[[Path, int], list[str]]  # (its temporary directory, its port)
    # Drives it (its URL, its temporary directory): the bodies of its /probe answers,
    # in order (the blackbox exporter's), else none.
    load: Callable[[str, Path], list[str]]
    # Series its own /metrics handler updates after writing the body the test compares
    # with: by how much noop's value is ahead of that body (promhttp counts a scrape,
    # and takes it out of the in-flight gauge, when it is done).
    scrape: dict[Series, float]
    # Series with no client_golang metric object behind them, so nothing noop could
    # mirror, by a pattern of their names (re.fullmatch) and the reason.
    unmirrored: dict[str, str]
    # WrapRegistererWithPrefix prefixes: the terminal (no mirror) reads a metric's name
    # from its Desc, which is the inner name; the service, and noop run, which names
    # each series as the mirror reads it, serve it with the prefix.
    wrapped: tuple[str, ...] = ()


# Every service has client_golang's Go and process collectors and a build-info gauge.
# What these builds' Go collector exposes (go_memstats_*, go_goroutines, go_threads,
# go_gc_duration_seconds, go_info) it makes as constant metrics at each scrape; the
# runtime/metrics counters and gauges it can also expose are metric objects, updated at
# each scrape (noop probes those updates), but client_golang 1.14 exposes none of them
# by default, and these services do not ask for them.
COLLECTORS = {
    r"go_.+": "made as constant metrics at each scrape: no metric object",
    r"process_.+": "made at each scrape from /proc (noop reads /proc too): no metric object",
    r".+_build_info": "a constant metric, made at registration",
}
# process_* series the service's scrape moves (noop reads them from /proc), with what its
# own collector counts that noop's read does not
PROCESS_MOVES = {"process_cpu_seconds_total": 0.0, "process_resident_memory_bytes": 0.0,
                 "process_virtual_memory_bytes": 0.0, "process_open_fds": 1.0}
# Of those, the ones that lie between noop's reads around the service's own scrape: CPU
# only grows, and the descriptors are held across it. A busy service's memory moves
# both ways between any two reads (its collector scavenges); held exact on a quiet
# program instead (tests/test_procstat.py).
PROCESS_BETWEEN = ("process_cpu_seconds_total", "process_open_fds")
PROMHTTP = {("promhttp_metric_handler_requests_total", "code=200"): 1.0,
            ("promhttp_metric_handler_requests_in_flight", ""): -1.0}


def _send(url: str, method: str, body: str | None = None) -> int:
    data = body.encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method)
    with urllib.request.urlopen(req, timeout=5) as r:
        return int(r.status)


def _pushgateway_flags(tmp: Path, port: int) -> list[str]:
    return [f"--web.listen-address=127.0.0.1:{port}",
            f"--persistence.file={tmp / 'pushgateway.data'}"]


PUSHED = ("# TYPE jobs_done counter\njobs_done {n}\n"
          "# TYPE queue_length gauge\nqueue_length {n}\n"
          "# TYPE batch_seconds histogram\nbatch_seconds_bucket{{le=\"1\"}} {n}\n"
          "batch_seconds_bucket{{le=\"+Inf\"}} {n}\nbatch_seconds_sum {n}\n"
          "batch_seconds_count {n}\n")


def _pushgateway_load(base: str, tmp: Path) -> list[str]:
    """Groups replaced (PUT), added to (POST) and deleted, the API read, /metrics
    scraped."""
    for n in range(1, ROUNDS + 1):
        group = f"{base}/metrics/job/batch{n % 4}/instance/host{n % 3}"
        assert _send(group, "PUT", PUSHED.format(n=n)) == 200
        assert _send(group, "POST", f"# TYPE extra gauge\nextra {n}\n") == 200
        if n % 5 == 0:
            assert _send(group, "DELETE") == 202
        get(base + "/api/v1/metrics")
        get(base + "/api/v1/status")
        get(base + "/metrics")
    return []


def _blackbox_flags(tmp: Path, port: int) -> list[str]:
    config = tmp / "blackbox.yml"
    config.write_text("modules:\n"
                      "  http_2xx: {prober: http, timeout: 5s}\n"
                      "  tcp_connect: {prober: tcp, timeout: 5s}\n")
    return [f"--config.file={config}", f"--web.listen-address=127.0.0.1:{port}"]


class _Quiet(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"a page the blackbox exporter probes\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def _web_server() -> Iterator[int]:
    """A local HTTP server for the probes: its port."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


def _blackbox_load(base: str, tmp: Path) -> list[str]:
    """http_2xx and tcp_connect probes of a local web server, and every fourth round
    both against a port nothing listens on (refused); the last round succeeds."""
    def probe(target: str, module: str) -> str:
        query = urllib.parse.urlencode({"target": target, "module": module})
        return get(f"{base}/probe?{query}")

    bodies: list[str] = []
    closed = _free_port()
    with _web_server() as port:
        for n in range(ROUNDS):
            if n % 4 == 1:
                bodies.append(probe(f"127.0.0.1:{closed}", "http_2xx"))
                bodies.append(probe(f"127.0.0.1:{closed}", "tcp_connect"))
            bodies.append(probe(f"127.0.0.1:{port}", "http_2xx"))
            bodies.append(probe(f"127.0.0.1:{port}", "tcp_connect"))
    return bodies


def _prometheus_flags(tmp: Path, port: int) -> list[str]:
    config = tmp / "prometheus.yml"
    config.write_text("global: {scrape_interval: 1h, evaluation_interval: 1h}\n")
    return [f"--config.file={config}", f"--storage.tsdb.path={tmp / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}"]


def _prometheus_load(base: str, tmp: Path) -> list[str]:
    """Instant and range queries, the label and series APIs, the readiness and status
    endpoints."""
    for n in range(ROUNDS):
        now = time.time()
        for path, query in (
                ("/api/v1/query", {"query": f"vector({n})"}),
                ("/api/v1/query_range", {"query": "vector(1)", "start": str(now - 60),
                                         "end": str(now), "step": "15"}),
                ("/api/v1/labels", {}),
                ("/api/v1/series", {"match[]": "up"}),
                ("/api/v1/status/buildinfo", {}),
                ("/-/ready", {})):
            get(f"{base}{path}?{urllib.parse.urlencode(query)}")
    return []


VENDORS = {
    "pushgateway": Vendor(
        "prometheus-pushgateway", _pushgateway_flags, _pushgateway_load, scrape={},
        unmirrored={
            **COLLECTORS,
            # What a client pushed is kept and served as the parsed text's families
            # (with push_time_seconds and push_failure_time_seconds, made per group at
            # each scrape), never as client_golang metric objects.
            r"jobs_done(_total)?|queue_length|batch_seconds|extra|push_(failure_)?time_seconds":
                "a pushed group's series: parsed families, not metric objects",
        }),
    "blackbox": Vendor(
        "prometheus-blackbox-exporter", _blackbox_flags, _blackbox_load, scrape=PROMHTTP,
        unmirrored=COLLECTORS),
    "prometheus": Vendor(
        "prometheus", _prometheus_flags, _prometheus_load,
        scrape={**PROMHTTP,
                ("prometheus_http_requests_total", "code=200,handler=/metrics"): 1.0,
                ("prometheus_http_request_duration_seconds", "handler=/metrics"): 1.0,
                ("prometheus_http_response_size_bytes", "handler=/metrics"): 1.0},
        unmirrored={
            **COLLECTORS,
            r"prometheus_tsdb_(head_(min|max)_time|lowest_timestamp)(_seconds)?":
                "GaugeFuncs: a function read at each scrape, no value kept",
        },
        # The TSDB's write-ahead log registers its metrics through this prefix.
        wrapped=("prometheus_tsdb_wal_",)),
}


@dataclass(frozen=True, slots=True)
class Service:
    proc: subprocess.Popen[bytes]
    port: int
    url: str
    log: Path


def _copy(vendor: Vendor, tmp: Path) -> Path:
    """Debian's binary, copied byte for byte: uprobes are per file, so a copy keeps this
    test's probes off any other process running the installed file (test_prometheus's
    server), as every test program of the suite is a copy of its own."""
    installed = Path("/usr/bin") / vendor.binary
    assert installed.exists(), (f"{installed} is missing: ./setup.sh installs Debian's "
                                f"{vendor.binary}")
    return Path(shutil.copy2(installed, tmp / vendor.binary))


@contextmanager
def _running(vendor: Vendor, binary: Path, tmp: Path) -> Iterator[Service]:
    """The service on a loopback port, once its /metrics answers; stopped on leaving."""
    port = _free_port()
    log = tmp / "service.log"
    with open(log, "wb") as sink:
        proc = subprocess.Popen([str(binary), *vendor.flags(tmp, port)], cwd=tmp,
                                stdout=sink, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while fetch(url + "/metrics")[0] != 200:
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"{vendor.binary} did not come up:\n{log.read_text()}",
                            pytrace=False)
            time.sleep(0.2)
        yield Service(proc, port, url, log)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _kernel_log() -> list[str]:
    return subprocess.run(["dmesg"], capture_output=True, text=True, check=True,
                          timeout=30).stdout.splitlines()


def _probe_values(bodies: list[str]) -> dict[Series, float]:
    """Of each name the /probe answers had, the series of the last answer that had it:
    the blackbox exporter makes its probe_* metrics afresh for each request, in a
    registry of that request's, so they are in the answers and never on /metrics."""
    last: dict[str, dict[str, float]] = {}
    for body in bodies:
        by_name: dict[str, dict[str, float]] = {}
        for (name, labels), value in _exposition(body).values.items():
            by_name.setdefault(name, {})[labels] = value
        last.update(by_name)
    return {(name, labels): v for name, series in last.items()
            for labels, v in series.items()}


# ---- noop run: one run per service, read at a quiet moment ----------------------------

@dataclass(frozen=True, slots=True)
class Watched:
    """What one run of a service under ``noop run --binary`` left to check."""

    vendor: Vendor
    pid: int
    rows: tuple[Row, ...]  # noop_metric_value of the service's process
    exposition: Exposition  # the service's /metrics read between two equal reads of noop
    probes: dict[Series, float]  # the last /probe answers' values (blackbox)
    lost: float  # noop_events_lost_total, all probes
    alive: bool
    metrics_status: int
    kernel_lines: tuple[str, ...]  # new dmesg lines that name the service's process
    crash_lines: tuple[str, ...]  # the service's own log: a Go panic or fatal signal
    noop_exit: int
    noop_log: str
    left: tuple[str, ...]  # uprobes left on the binary after noop stopped
    # what noop served of the service's own metrics from its memory (the mirror), read
    # just before the service's scrape, by sample (name, labels) as the service writes
    memory: dict[tuple[str, str], float]
    truth: dict[tuple[str, str], float]  # the service's own samples, the same way
    memory_after: dict[tuple[str, str], float]  # what noop served just after that scrape


def _noop_drained(url: str) -> str:
    """noop's /metrics once every record its probes made is read or counted lost (the
    ring is read on a timer)."""
    text = ""
    for _ in range(50):
        text = get(url + "/metrics")
        if drained(samples(text)):
            return text
        time.sleep(0.2)
    pytest.fail(f"noop's ring buffer never drained:\n{text}", pytrace=False)


def _steady(before: tuple[Row, ...], after: tuple[Row, ...], vendor: Vendor) -> bool:
    """Whether nothing but the scrape's own series moved between two reads of noop."""
    def still(rows: tuple[Row, ...]) -> Counter[Row]:
        return Counter(r for r in rows if (r.metric, r.labels) not in vendor.scrape)
    return still(before) == still(after)


@pytest.fixture(scope="module", params=sorted(VENDORS))
def watched(privileged: None, request: pytest.FixtureRequest,
            tmp_path_factory: pytest.TempPathFactory) -> Watched:
    vendor = VENDORS[request.param]
    tmp = tmp_path_factory.mktemp(request.param)
    binary = _copy(vendor, tmp)
    agent = start("--binary", binary, "--mirror", "both")
    try:
        kernel_before = set(_kernel_log())
        with _running(vendor, binary, tmp) as service:
            pid = service.proc.pid
            bodies = vendor.load(service.url, tmp)
            # The quiet moment: nothing but the service's own scrape between two reads
            # of noop, both with the ring drained (a background task of the service
            # moving a metric in between makes the test read again). The scrapes go
            # over one kept-alive connection, so that no connection is accepted or
            # closed in between (the Prometheus server counts those).
            scraper = http.client.HTTPConnection("127.0.0.1", service.port, timeout=5)
            scraper.connect()
            try:
                for _ in range(20):
                    first = _noop_drained(agent.url)
                    before = _rows(first, pid)
                    scraper.request("GET", "/metrics")
                    answer = scraper.getresponse()
                    truth = answer.read().decode()
                    assert answer.status == 200, truth
                    text = _noop_drained(agent.url)
                    after = _rows(text, pid)
                    if _steady(before, after, vendor):
                        break
                    time.sleep(0.5)
                else:
                    pytest.fail(f"{vendor.binary}'s metrics never held still",
                                pytrace=False)
            finally:
                scraper.close()
            alive = service.proc.poll() is None
            status = fetch(service.url + "/metrics")[0]
            comm = vendor.binary[:15]  # the kernel's name of the process
            kernel = tuple(line for line in _kernel_log() if line not in kernel_before
                           and f"{comm}[{pid}]" in line)
            crash = tuple(line for line in service.log.read_text().splitlines()
                          if re.match(r"(panic: |fatal error: |SIG[A-Z]+: )", line))
        lost = sum(v for (name, _), v in samples(text).items()
                   if name == "noop_events_lost_total")
        code, log = agent.stop()
    finally:
        if agent.proc.poll() is None:
            agent.proc.kill()
            agent.proc.wait()
    return Watched(vendor, pid, after, _exposition(truth), _probe_values(bodies), lost,
                   alive, status, kernel, crash, code, log, tuple(attached_to(binary)),
                   _memory(first, pid), _samples(truth), _memory(text, pid))


def _samples(text: str) -> dict[tuple[str, str], float]:
    return {(s.name, _labels(s.labels)): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def _memory(text: str, pid: int) -> dict[tuple[str, str], float]:
    """The service's samples noop mirrored from its memory: its own names, with noop's
    target and pid labels (left out here)."""
    out = {}
    for fam in text_string_to_metric_families(text):
        if fam.name.startswith("noop_"):
            continue
        for s in fam.samples:
            if s.labels.get("pid") == str(pid) and "target" in s.labels:
                own = {k: v for k, v in s.labels.items() if k not in ("pid", "target")}
                out[(s.name, _labels(own))] = s.value
    return out


# the go_* series that only grow: counters, and the GC's count, pause sum and last time
GO_COUNTED = ("_total", "_seconds_count", "_seconds_sum", "last_gc_time_seconds")


def _go_moves(name: str) -> bool:
    """A go_* series that moves while the service answers its own scrape."""
    return name.startswith("go_") and name != "go_info"


def test_memory_mirror_equals_the_services_own(watched: Watched) -> None:
    """Read from the service's memory at noop's scrape: every sample (a counter's or
    gauge's value, a histogram's buckets, count and sum, a summary's count, sum and
    quantiles, NaN where the service's are: no observation in the head stream)
    equals what the service serves next, but for the series the service's own scrape
    moves; none is one the service does not have."""
    w = watched
    assert w.memory, f"noop mirrored nothing of {w.vendor.binary} from its memory"
    for row in w.rows:  # every series the probes saw updated is in memory too
        got = _truth_of(w, (row.metric, row.labels))
        if got is None or got[0] in w.probes:
            continue
        (name, labels), _value = got
        counted = w.exposition.kinds[(name, labels)] in ("histogram", "summary")
        assert (name + "_count" if counted else name, labels) in w.memory, (name, labels)
    moved = {name for name, _labels in w.vendor.scrape}
    unknown = sorted(k for k in w.memory if k not in w.truth)
    assert not unknown, f"samples {w.vendor.binary} does not have: {unknown[:10]}"
    wrong = {k: (v, w.truth[k]) for k, v in w.memory.items()
             if v != w.truth[k] and not (math.isnan(v) and math.isnan(w.truth[k]))
             and k[0] not in moved and k[0].removesuffix("_total") not in moved
             and k[0] not in PROCESS_MOVES and not _go_moves(k[0])}
    assert not wrong, f"{len(wrong)} samples differ: {sorted(wrong.items())[:10]}"
    # go_*, read from the runtime's memory: every series the service serves, under its
    # names. Its counters lie between noop's reads around the service's own scrape;
    # go_goroutines above them by the goroutines answering that scrape at most (its
    # connection's, its registry's collect workers: one per collector, fewer than its
    # families); the gauges move with the service's own work both ways (allocation, a
    # GC, the sweeper) and are held exact on a quiet program (tests/test_goruntime.py)
    go = {k for k in w.truth if k[0].startswith("go_")}
    assert go and go <= set(w.memory), sorted(go - set(w.memory))[:5]
    assert w.memory[("go_info", next(lb for n, lb in go if n == "go_info"))] == 1
    serving = len({name for name, _l in w.truth}) + 2
    for key in sorted(go):
        own, a, b = w.truth[key], w.memory[key], w.memory_after[key]
        if key[0] == "go_goroutines":
            assert min(a, b) <= own <= max(a, b) + serving, (key, a, own, b)
        elif key[0].endswith(GO_COUNTED):
            assert min(a, b) <= own <= max(a, b), (key, a, own, b)
    # read from /proc: what the service's scrape moves lies between noop's reads around
    # it; its collector counts the /proc/self/fd it holds open (the scrape's kept-alive
    # connection is open at all three reads)
    for name in PROCESS_BETWEEN:
        own = w.truth[(name, "")] - PROCESS_MOVES[name]
        a, b = w.memory[(name, "")], w.memory_after[(name, "")]
        assert min(a, b) <= own <= max(a, b), (name, a, w.truth[(name, "")], b)


def _truth_of(w: Watched, series: Series) -> tuple[Series, float] | None:
    """The service's series that noop's ``series`` mirrors, and its value; None when the
    service has no such series."""
    if series in w.probes:
        return series, w.probes[series]
    # under the name the service serves it with (a wrapped registerer's prefix too)
    if series in w.exposition.values:
        return series, w.exposition.values[series]
    if series in w.vendor.scrape:  # counted by a scrape after the body was written
        return series, 0.0
    return None


def test_every_mirrored_series_equals_the_services_own(watched: Watched) -> None:
    w = watched
    assert w.rows, f"noop mirrored nothing of {w.vendor.binary}"
    by_series: dict[Series, list[float]] = {}
    for row in w.rows:
        by_series.setdefault((row.metric, row.labels), []).append(row.value)
    wrong: list[str] = []
    for (metric, labels), values in sorted(by_series.items()):
        found = _truth_of(w, (metric, labels))
        if found is None:
            wrong.append(f"{_show((metric, labels))}: noop {values}, the service has no "
                         "such series")
            continue
        key, value = found
        want = value + w.vendor.scrape.get(key, 0.0)
        off = sorted(v for v in values if v != want)
        if off:
            wrong.append(f"{_show(key)}: the service {want!r}; of noop's {len(values)} "
                         f"rows, {len(off)} differ: {_some(off)}")
    assert not wrong, (f"{len(wrong)} of {len(by_series)} series differ, "
                       f"{len(w.rows)} rows in all "
                       f"(noop lost {w.lost:g} records):\n" + "\n".join(wrong))


def test_every_updated_series_is_mirrored(watched: Watched) -> None:
    w = watched
    mirrored = {(r.metric, r.labels) for r in w.rows}
    missing: list[str] = []
    for (name, labels), value in [*w.exposition.values.items(), *w.probes.items()]:
        kind = w.exposition.kinds.get((name, labels), "gauge")  # a probe's: gauges
        if kind not in ("counter", "gauge", "histogram", "summary"):
            continue  # untyped: a pushed group's series
        if value == 0:
            continue  # never updated while noop watched (a zero counter, a gauge at its
            # zero value): noop has a row only for an object it saw updated
        if any(re.fullmatch(pattern, name) for pattern in w.vendor.unmirrored):
            continue  # no metric object behind it (the vendor's reasons, above)
        if (name, labels) not in mirrored:
            missing.append(f"{_show((name, labels))} = {value}")
    assert not missing, (f"{len(missing)} series updated and not mirrored:\n"
                         + "\n".join(sorted(missing)))


def test_one_row_per_series_and_process(watched: Watched) -> None:
    counts = Counter((r.metric, r.labels) for r in watched.rows)
    repeated = {k: n for k, n in counts.items() if n > 1}
    assert not repeated, (
        f"{len(repeated)} series of pid {watched.pid} have several rows "
        f"({sum(repeated.values())} rows):\n"
        + "\n".join(f"{_show(k)} x{n}: " + _some(
            [r.value for r in watched.rows if (r.metric, r.labels) == k])
            for k, n in sorted(repeated.items())))


def test_service_stays_healthy_and_noop_leaves_cleanly(watched: Watched) -> None:
    w = watched
    assert w.alive, f"{w.vendor.binary} exited under noop"
    assert w.metrics_status == 200
    assert not w.kernel_lines, "\n".join(w.kernel_lines)
    assert not w.crash_lines, "\n".join(w.crash_lines)
    assert w.noop_exit == 0, w.noop_log
    assert not w.left


# ---- noop --binary in the terminal ---------------------------------------------------

@pytest.mark.parametrize("name", sorted(VENDORS))
def test_terminal_prints_only_the_services_series(privileged: None, name: str,
                                                  tmp_path: Path) -> None:
    vendor = VENDORS[name]
    binary = _copy(vendor, tmp_path)
    # The service stops first (the with's contexts end last to first), then noop.
    with (tracing(tmp_path, "--binary", binary) as session,
          _running(vendor, binary, tmp_path) as service):
        pid = service.proc.pid
        bodies = vendor.load(service.url, tmp_path)
        final = _exposition(get(service.url + "/metrics"))
    assert session.exit == 0, session.stderr
    lines = [x for x in session.lines if x["pid"] == pid]
    assert lines, f"noop printed no update of {vendor.binary}:\n{session.stderr}"
    answers = [_exposition(b) for b in bodies]
    names = final.names.union(*(a.names for a in answers))
    series = {*final.values, *(k for a in answers for k in a.values)}

    def real(name: str) -> list[str]:  # a wrapped metric prints under its inner name
        return [n for n in (name, *(p + name for p in vendor.wrapped)) if n in names]

    unknown = sorted({x["metric"] for x in lines if not real(x["metric"])})
    assert not unknown, f"{len(unknown)} names {vendor.binary} does not have: {unknown}"
    strays = sorted({_show((x["metric"], _labels(x["labels"]))) for x in lines
                     if not any((n, _labels(x["labels"])) in series
                                for n in real(x["metric"]))})
    assert not strays, f"{len(strays)} series {vendor.binary} does not have: {strays}"
