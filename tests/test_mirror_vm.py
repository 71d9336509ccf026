"""A Go program's VictoriaMetrics/metrics series, mirrored from its memory by ``noop run
--binary``: tests/programs/go/vmetrics keeps every kind (counters made up front and on
the fly, float counters, histograms over many decades and outside them, summaries with
the default and their own quantiles past the 1,000 samples a window keeps, a callback
gauge, a second registered Set). Every series the program writes on its /metrics is on
noop's page with the same value and labels (noop's ``target`` and ``pid`` apart), and
nothing else of the library's; the callback gauge is listed with its function. Go 1.19
and the newest Go, with DWARF and stripped.
"""

from __future__ import annotations

import itertools
import json
import re
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from harness.metrics import Samples, get, samples
from harness.noop import Agent, run, start, tracing
from harness.programs import PROGRAMS, go_build, go_toolchain

from agent.presets.vmetrics.layout import BUCKETS_PER_DECADE, DECADES, vmrange

SOURCE = PROGRAMS / "go" / "vmetrics"
VARIANTS = [("1.19", ()), ("1.19", ("-ldflags=-s -w",)), ("newest", ()),
            ("newest", ("-ldflags=-s -w",))]
READY = r"ready: (mirroring|\d+ uprobes? attached)"
LOCAL = {("vm_local_total", (("set", "local"),)), ("vm_local_float_total", ())}


def _id(v: tuple[str, tuple[str, ...]]) -> str:
    return f"go{v[0]}" + ("-stripped" if v[1] else "")


@pytest.fixture(scope="module", params=VARIANTS, ids=_id)
def vm_program(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
               ) -> Path:
    version, flags = request.param
    return go_build(go_toolchain(version), tmp_path_factory.mktemp("vm") / "vmetrics", None,
                    SOURCE, flags)


class Program:
    def __init__(self, binary: Path, *flags: str) -> None:
        self.proc = subprocess.Popen([str(binary), *flags], stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        self.url = "http://" + self.proc.stdout.readline().split()[1] + "/metrics"

    def page(self) -> str:
        return get(self.url)

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def running(vm_program: Path, privileged: None) -> Iterator[tuple[Program, Agent]]:
    p = Program(vm_program)
    noop = start("--binary", vm_program, "--pid", str(p.proc.pid), ready=READY)
    try:
        yield p, noop
    finally:
        noop.stop()
        p.stop()


def _own(got: Samples, pid: int) -> Samples:
    """noop's series of the program's library (``vm_``), without noop's labels."""
    out: Samples = {}
    for (name, labels), v in got.items():
        if not name.startswith("vm_"):
            continue
        mine = dict(labels)
        assert mine.pop("pid") == str(pid) and mine.pop("target")
        out[(name, tuple(sorted(mine.items())))] = v
    return out


def _theirs(text: str) -> Samples:
    return {(n, tuple(sorted(labels))): v for (n, labels), v in samples(text).items()
            if n != "vm_goroutines_now" and not n.startswith(("go_", "process_"))}


def _found_local(p: Program, noop: Agent) -> None:
    """The program scraped twice, a second apart (as Prometheus would): the Set it writes
    without registering it is found through the probe on its writer, then mirrored."""
    p.page()
    time.sleep(1.1)
    p.page()
    deadline = time.monotonic() + 15
    while not set(_own(noop.metrics(), p.proc.pid)) >= LOCAL:
        assert time.monotonic() < deadline, "the unregistered Set was not found"
        time.sleep(0.3)


def test_every_series_equals_the_programs_own(running: tuple[Program, Agent]) -> None:
    p, noop = running
    before = _own(noop.metrics(), p.proc.pid)
    assert not LOCAL & set(before)  # not yet written: not found
    _found_local(p, noop)
    mine = _own(noop.metrics(), p.proc.pid)  # before the program's own write (its
    theirs = _theirs(p.page())  # summaries' quantiles are computed there, from the same
    assert mine.keys() == theirs.keys(), sorted(set(mine) ^ set(theirs))[:10]  # window)
    wrong = {k: (v, theirs[k]) for k, v in mine.items() if v != theirs[k]}
    assert not wrong, list(wrong.items())[:10]
    # what the program wrote is all there: both Sets, the buckets outside every decade,
    # quantiles of a window that sampled 1,000 of 1,500 observations
    assert theirs[("vm_set_total", (("set", "second"),))] == 9
    assert theirs[("vm_latency_seconds_bucket", (("handler", "/q"),
                                                 ("vmrange", "0...1.000e-09")))] == 2
    assert theirs[("vm_latency_seconds_bucket", (("handler", "/q"),
                                                 ("vmrange", "1.000e+18...+Inf")))] == 1
    assert ("vm_duration_seconds", (("op", "read"), ("quantile", "0.97"))) in theirs
    assert not any(k[0].startswith("vm_empty") for k in theirs)
    assert theirs[("vm_local_total", (("set", "local"),))] == 5


# Series the program's own scrape moves while it writes them: the goroutines serving it,
# the descriptors of its connection and of /proc/self/fd (docs/limits.md)
_SERVING = {"go_goroutines": 3, "process_open_fds": 3}
# what ReadMemStats' flush of the stack caches moves (docs/limits.md): whole pages
_STACKS = {f"go_memstats_{n}_bytes" for n in ("heap_idle", "heap_inuse", "heap_sys",
                                              "stack_inuse", "stack_sys")}
_PAGE, _PAGES = 8192, 8
# what only grows: between the program's two scrapes around noop's
_GROWING = re.compile(r"go_memstats_(alloc_bytes_total|mallocs_total|frees_total)|"
                      r"go_gc_duration_seconds_(sum|count)|go_gc_forced_count|"
                      r"go_cgo_calls_count|process_cpu_seconds_.*|process_.*pagefaults_total|"
                      r"process_io_.*")


def _runtime(text: str) -> Samples:
    return {(n, tuple(sorted(labels))): v for (n, labels), v in samples(text).items()
            if n.startswith(("go_", "process_"))}


def _runtime_mine(got: Samples, pid: int) -> Samples:
    out: Samples = {}
    for (name, labels), v in got.items():
        if name.startswith(("go_", "process_")):
            mine = dict(labels)
            assert mine.pop("pid") == str(pid) and mine.pop("target")
            out[(name, tuple(sorted(mine.items())))] = v
    return out


def _runtime_wrong(before: Samples, mine: Samples, after: Samples) -> tuple[list[str], int]:
    """The library's go_* and process_* series of noop's page against the program's two
    pages around it: quiet, equal (those the program's scrape moves by at most a few);
    else what only grows lies between. And how many were quiet."""
    wrong, quiet = [], 0
    for k, v in mine.items():
        a, b = before[k], after[k]
        if k[0] in _SERVING:
            if not 0 <= a - v <= _SERVING[k[0]]:
                wrong.append(f"{k}: noop {v}, the program {a}")
        elif a == b:
            quiet += 1
            pages = k[0] in _STACKS and (v - a) % _PAGE == 0 and abs(v - a) <= _PAGE * _PAGES
            if v != a and not pages:
                wrong.append(f"{k}: noop {v}, the program {a} twice")
        elif _GROWING.fullmatch(k[0]) and not min(a, b) <= v <= max(a, b):
            wrong.append(f"{k}: noop {v}, the program {a} then {b}")
    return wrong, quiet


def test_runtime_series_are_the_librarys(running: tuple[Program, Agent]) -> None:
    """The go_* and process_* set the library writes (WritePrometheus(w, true) and
    WriteFDMetrics), not client_golang's: the same names and labels, untyped, and the
    values ReadMemStats, /proc and the library's own start time give (the GC pause
    quantiles over all 256 slots, GOROOT as the linker wrote it)."""
    p, noop = running
    p.page()
    time.sleep(0.5)
    before = _runtime(p.page())
    mine = _runtime_mine(noop.metrics(), p.proc.pid)
    after = _runtime(p.page())
    assert mine.keys() == before.keys(), sorted(set(mine) ^ set(before))
    wrong, quiet = _runtime_wrong(before, mine, after)
    assert not wrong, wrong
    assert quiet >= 10
    assert ("go_gc_duration_seconds", (("quantile", "0.25"),)) in mine
    assert any(k[0] == "go_info_ext" and dict(k[1])["GOROOT"] for k in mine)
    assert "# TYPE go_goroutines untyped" in get(noop.url + "/metrics")


REQ = ("vm_requests_total", {"code": "200", "path": "/api"})
BYTES = ("vm_bytes_total", {"dir": "in"})
# One GET /bump of the program, in order: (kind, op, metric, labels, value after; None:
# a histogram's or summary's sum, checked against the page); the negative observation
# is not an update
BUMP = [("counter", "Inc", *REQ, 43), ("counter", "Inc", *REQ, 44),
        ("counter", "Add", *REQ, 49), ("counter", "Dec", *REQ, 48),
        ("counter", "Set", "vm_bare_total", {}, 7),
        ("counter", "Add", *BYTES, 2.25), ("counter", "Sub", *BYTES, 2),
        ("counter", "Set", *BYTES, 10),
        ("histogram", "Update", "vm_latency_seconds", {"handler": "/q"}, None),
        ("histogram", "Update", "vm_latency_seconds", {"handler": "/q"}, None),
        ("summary", "Update", "vm_duration_seconds", {"op": "read"}, None),
        ("summary", "Update", "vm_own_seconds", {}, None),
        ("counter", "Inc", "vm_bumped_total", {"n": "1"}, 1)]


def test_terminal_prints_each_update_with_its_name(vm_program: Path, privileged: None,
                                                    tmp_path: Path) -> None:
    """``noop --binary`` on the program: each update of one /bump a line, in the
    program's order, with its series' name and labels (a counter made on the fly
    included) and its value; a histogram's and a summary's sum as the page then has it,
    a summary's count. Counter updates are the copies inlined into the handler."""
    p = Program(vm_program)
    try:
        with tracing(tmp_path, "--binary", vm_program, "--pid", str(p.proc.pid)) as noop:
            assert get(p.url.replace("/metrics", "/bump")).strip() == "bumped"
            time.sleep(1.5)
        page = samples(p.page())
    finally:
        p.stop()
    assert noop.exit == 0, noop.stderr
    got = [(x["kind"], x["op"], x["metric"], x["labels"], x["value"]) for x in noop.lines]
    want = [(k, o, m, lb, v if v is not None else page[(f"{m}_sum", tuple(lb.items()))])
            for k, o, m, lb, v in BUMP]
    want[8] = (*want[8][:4], got[8][4])  # the first of two observations: its own sum
    assert got == want
    assert noop.lines[10]["note"] == "sum; count 1501" and noop.lines[11]["note"] == \
        "sum; count 11"
    assert got[8][4] <= got[9][4]
    assert noop.lines[2]["inc"] == 5 and noop.lines[3]["inc"] == -1


def test_mirror_both_counts_each_update(vm_program: Path, privileged: None) -> None:
    """``noop run --mirror both``: the meta-metrics count each update of one /bump by
    its series and method (the negative observation none), with the series' value and
    the increments seen, beside the mirror's page."""
    p = Program(vm_program)
    noop = start("--binary", vm_program, "--pid", str(p.proc.pid), "--mirror", "both")
    try:
        assert get(p.url.replace("/metrics", "/bump")).strip() == "bumped"
        deadline = time.monotonic() + 15
        while True:
            got = noop.metrics()
            counts = {(dict(lb)["metric"], dict(lb)["labels"], dict(lb)["op"]): v
                      for (n, lb), v in got.items() if n == "noop_metric_updates_total"}
            if len(counts) >= 11 or time.monotonic() > deadline:
                break
            time.sleep(0.3)
    finally:
        noop.stop()
        p.stop()
    assert counts == {
        ("vm_requests_total", "code=200,path=/api", "Inc"): 2,
        ("vm_requests_total", "code=200,path=/api", "Add"): 1,
        ("vm_requests_total", "code=200,path=/api", "Dec"): 1,
        ("vm_bare_total", "", "Set"): 1, ("vm_bytes_total", "dir=in", "Add"): 1,
        ("vm_bytes_total", "dir=in", "Sub"): 1, ("vm_bytes_total", "dir=in", "Set"): 1,
        ("vm_latency_seconds", "handler=/q", "Update"): 2,
        ("vm_duration_seconds", "op=read", "Update"): 1,
        ("vm_own_seconds", "", "Update"): 1, ("vm_bumped_total", "n=1", "Inc"): 1}
    values = {(dict(lb)["metric"], dict(lb)["labels"]): v for (n, lb), v in got.items()
              if n == "noop_metric_value"}
    assert values[("vm_requests_total", "code=200,path=/api")] == 48
    assert values[("vm_bytes_total", "dir=in")] == 10
    assert values[("vm_duration_seconds", "op=read")] == 1501
    increments = {(dict(lb)["metric"], dict(lb)["labels"]): v for (n, lb), v in got.items()
                  if n == "noop_metric_increments"}
    assert increments[("vm_requests_total", "code=200,path=/api")] == 6


def test_memory_alone_finds_registered_sets(vm_program: Path, privileged: None) -> None:
    """--mirror memory: no probe, no BPF: the registered Sets, not the one the program
    writes without registering it."""
    p = Program(vm_program)
    noop = start("--binary", vm_program, "--pid", str(p.proc.pid), "--mirror", "memory",
                 ready=READY)
    try:
        p.page()
        time.sleep(1.1)
        p.page()
        time.sleep(1)
        mine = _own(noop.metrics(), p.proc.pid)
        assert ("vm_set_total", (("set", "second"),)) in mine and not LOCAL & set(mine)
        assert any("ready: mirroring" in line for line in noop.log)
    finally:
        noop.stop()
        p.stop()


def test_callback_gauge_listed_with_its_function(running: tuple[Program, Agent]) -> None:
    _p, noop = running
    got = noop.metrics()
    listed = {dict(labels)["type"]: v for (name, labels), v in got.items()
              if name == "noop_mirror_unmirrored_collectors"}
    assert listed == {"*github.com/VictoriaMetrics/metrics.Gauge (main.main.func1)": 1}


def test_page_is_one_exposition(running: tuple[Program, Agent]) -> None:
    _p, noop = running
    promtool = shutil.which("promtool")
    assert promtool, "promtool not found: run ./setup.sh"
    lint = subprocess.run([promtool, "check", "metrics"], input=get(noop.url + "/metrics"),
                          text=True, capture_output=True, check=False)
    assert "error while linting" not in lint.stdout + lint.stderr, lint


def test_updates_and_new_series_follow(vm_program: Path, privileged: None) -> None:
    """A program updating all along and making a series every millisecond: on a quiet
    pair (two writes of the program that agree around noop's read) noop's value is the
    program's; series made since noop started are there."""
    p = Program(vm_program, "-churn")
    noop = start("--binary", vm_program, "--pid", str(p.proc.pid), ready=READY)
    try:
        checked = 0
        whole: dict[str, int] = {}  # pages with each of the two, read whole
        for _ in range(12):
            before = _theirs(p.page())
            mine = _own(noop.metrics(), p.proc.pid)
            after = _theirs(p.page())
            # a Set the program never stops growing is on every page, not left out
            assert sum(1 for k in mine if k[0] == "vm_items_total") == 20
            # a histogram and a summary updated all along, each observing 1: every read
            # of one is of one instant (its sum its count; buckets summing to its count)
            for name in ("vm_ones", "vm_ones_summary"):
                if (name + "_count", ()) in mine:
                    whole[name] = whole.get(name, 0) + 1
                    assert mine[(name + "_sum", ())] == mine[(name + "_count", ())], name
                    ones = torn_or_whole = mine[(name + "_count", ())]
                    if name == "vm_ones":
                        torn_or_whole = sum(v for k, v in mine.items()
                                            if k[0] == "vm_ones_bucket")
                    assert torn_or_whole == ones, name
            for k, v in mine.items():  # a quantile moves both ways: not from a pair
                if k in before and before[k] == after.get(k) and \
                        not any(n == "quantile" for n, _v in k[1]):
                    assert v == before[k], (k, v, before[k])
                    checked += 1
            time.sleep(0.05)
        assert checked > 60
        assert whole.get("vm_ones", 0) > 6 and whole.get("vm_ones_summary", 0) > 6, whole
        churned = {k for k in _own(noop.metrics(), p.proc.pid) if k[0] == "vm_churn_total"}
        assert len(churned) > 50
    finally:
        noop.stop()
        p.stop()


def test_a_program_with_both_libraries_is_client_golangs(privileged: None,
                                                        tmp_path: Path) -> None:
    """A program that keeps metrics with client_golang and VictoriaMetrics/metrics: its
    client_golang series mirrored, equal to its page; the other library's not, and said
    in one line at the start."""
    binary = go_build(go_toolchain("1.19"), tmp_path / "both", None, PROGRAMS / "go" / "both",
                      ("-ldflags=-s -w",))
    p = Program(binary)
    noop = start("--binary", binary, "--pid", str(p.proc.pid), ready=READY)
    try:
        theirs = samples(p.page())
        assert theirs[("both_cg_total", ())] == 3 and theirs[("both_vm_total", ())] == 5
        got = {n: v for (n, _l), v in noop.metrics().items() if n.startswith("both_")}
        assert got == {"both_cg_total": 3}
    finally:
        _code, log = noop.stop()
        p.stop()
    said = [line for line in log.splitlines() if "VictoriaMetrics/metrics as well" in line]
    assert len(said) == 1 and "noop reads client_golang's only" in said[0], log


def test_vmranges_are_the_librarys() -> None:
    """Each bucket's range text as initBucketRanges writes it: contiguous, %.3e, the
    first from 1e-9 and the last to 1e18."""
    texts = [vmrange(i) for i in range(DECADES * BUCKETS_PER_DECADE)]
    assert texts[0].startswith("1.000e-09...") and texts[-1].endswith("...1.000e+18")
    assert all(a.split("...")[1] == b.split("...")[0] for a, b in itertools.pairwise(texts))
    assert texts[17] == "8.799e-09...1.000e-08"
    assert vmrange(-1) == "0...1.000e-09" and vmrange(10**6) == "1.000e+18...+Inf"


# --- Debian's victoria-metrics ---------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _post(url: str, body: bytes) -> int:
    req = urllib.request.Request(url, data=body, method="POST")
    with urllib.request.urlopen(req, timeout=30) as r:
        return int(r.status)


def _about_its_own_scrape(key: tuple[str, tuple[tuple[str, str], ...]]) -> bool:
    """A series the service's own /metrics request moves while it is written (the
    request in flight, its connection open): its page and memory differ by that one."""
    labels = dict(key[1])
    return labels.get("path") == "/metrics" or key[0].startswith("vm_tcplistener_")


@contextmanager
def _debian_service(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], str, Path]]:
    """Debian's victoria-metrics, a copy, on a loopback port with a temporary data
    directory, once it answers: (process, URL, binary)."""
    installed = Path("/usr/bin/victoria-metrics")
    assert installed.exists(), "victoria-metrics is missing: ./setup.sh installs it"
    binary = Path(shutil.copy2(installed, tmp_path / "victoria-metrics"))
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    with open(tmp_path / "service.log", "wb") as log:
        proc = subprocess.Popen([str(binary), f"-storageDataPath={tmp_path / 'data'}",
                                 f"-httpListenAddr=127.0.0.1:{port}", "-retentionPeriod=1d"],
                                cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                get(url + "/metrics")
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, \
                    (tmp_path / "service.log").read_text()
                time.sleep(0.2)
        yield proc, url, binary
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _load(url: str, rounds: int) -> None:
    """Samples written to the service, then read back."""
    now = int(time.time())
    for i in range(rounds):
        lines = "".join(f'load_total{{n="{j}"}} {i * j} {now + i}\n' for j in range(50))
        assert _post(url + "/api/v1/import/prometheus", lines.encode()) == 204
        get(url + f"/api/v1/query?query=sum(load_total)&time={now + i}")


def test_debian_victoria_metrics(privileged: None, tmp_path: Path) -> None:
    """Debian's victoria-metrics (stripped, Go 1.19, VictoriaMetrics/metrics 1.23) under
    local load: every series noop mirrors is on the service's own page, each equal to
    it where two scrapes of the service agree around noop's (its own /metrics request's
    series aside); the callback gauges listed; the service healthy after."""
    noop: Agent | None = None
    with _debian_service(tmp_path) as (proc, url, binary):
        try:
            noop = start("--binary", binary, ready=READY)
            _load(url, 23)
            time.sleep(2)  # its in-memory buffers flushed, its background work settled
            # The service writes its /metrics again at most once a second (it serves the
            # last page until then): scrapes a second apart are made when they are served.
            before = _theirs(get(url + "/metrics"))
            time.sleep(1.2)
            mine = _own(noop.metrics(), proc.pid)
            time.sleep(1.2)
            after = _theirs(get(url + "/metrics"))
            assert len(mine) > 200
            stray = [k for k in mine if k not in before and k not in after]
            assert not stray, stray  # on the service's page (one its scrape made: on the next)
            quiet = [k for k in mine if k in before and before[k] == after.get(k) and
                     not _about_its_own_scrape(k)]
            assert len(quiet) > len(mine) * 0.8
            wrong = {k: (mine[k], before[k]) for k in quiet if mine[k] != before[k]}
            assert not wrong, list(wrong.items())[:10]
            # the library's go_* and process_* set, but for the two the service writes itself
            theirs = _runtime(get(url + "/metrics"))
            time.sleep(1.2)
            runtime = _runtime_mine(noop.metrics(), proc.pid)
            time.sleep(1.2)
            later = _runtime(get(url + "/metrics"))
            assert set(theirs) - set(runtime) == {("process_cpu_cores_available", ()),
                                                   ("process_memory_limit_bytes", ())}
            assert set(runtime) <= set(theirs)
            wrong, quiet = _runtime_wrong(theirs, runtime, later)
            assert not wrong and quiet >= 10, (wrong, quiet)
            assert (("go_info_ext", (("GOARCH", "amd64"), ("GOOS", "linux"), ("GOROOT", ""),
                                     ("compiler", "gc"))) in runtime)
            listed = [dict(labels)["type"] for (name, labels), _v in noop.metrics().items()
                      if name == "noop_mirror_unmirrored_collectors"]
            assert len(listed) > 100 and all(t.startswith(
                "*github.com/VictoriaMetrics/metrics.Gauge (github.com/VictoriaMetrics/")
                for t in listed)
            assert get(url + "/health").strip() == "OK"
        finally:
            if noop is not None:
                noop.stop()


def _at_rest(url: str, noop: Agent) -> tuple[Samples, dict[tuple[str, str], float]]:
    """The service's series that two of its scrapes 2.4 s apart agree on (its own
    /metrics request's aside), and noop's update counts by series read between them."""
    first = _theirs(get(url + "/metrics"))
    time.sleep(1.2)
    counts: dict[tuple[str, str], float] = {}
    for (name, labels), v in noop.metrics().items():
        if name == "noop_metric_updates_total":
            lb = dict(labels)
            key = (lb["metric"], lb["labels"])
            counts[key] = counts.get(key, 0) + v
    time.sleep(1.2)
    second = _theirs(get(url + "/metrics"))
    return {k: v for k, v in first.items() if second.get(k) == v and
            not _about_its_own_scrape(k)}, counts


def test_debian_victoria_metrics_updates_counted(privileged: None, tmp_path: Path) -> None:
    """``--mirror both`` on Debian's victoria-metrics under load: between two moments
    at rest, the observations noop counted of each histogram and summary equal its
    _count's change on the service's own page, and the increments of each counter only
    ever incremented (Inc: its copies inlined all over the service, each probed) its
    value's change; the service healthy after."""
    noop: Agent | None = None
    with _debian_service(tmp_path) as (_proc, url, binary):
        try:
            noop = start("--binary", binary, "--mirror", "both", ready=READY)
            _load(url, 3)
            time.sleep(2)
            a, na = _at_rest(url, noop)
            _load(url, 23)
            time.sleep(2)
            b, nb = _at_rest(url, noop)
            ops = {(dict(lb)["metric"], dict(lb)["labels"]): dict(lb)["op"]
                   for (n, lb), _v in noop.metrics().items()
                   if n == "noop_metric_updates_total"}
            assert get(url + "/health").strip() == "OK"
        finally:
            if noop is not None:
                noop.stop()
    compared, moved, wrong = 0, 0, []
    for (name, labels), v in b.items():
        text = ",".join(f"{k}={x}" for k, x in labels)
        if name.endswith("_count") and (name, labels) in a:
            key = (name[:-len("_count")], text)  # a histogram's or a summary's
        elif name.endswith("_total") and ops.get((name, text)) == "Inc" and \
                (name, labels) in a:
            key = (name, text)
        else:
            continue
        compared += 1
        page = v - a[(name, labels)]
        counted = nb.get(key, 0) - na.get(key, 0)
        moved += page > 0
        if page != counted:
            wrong.append(f"{key}: its page moved {page}, noop counted {counted}")
    assert not wrong, wrong
    assert compared >= 10 and moved >= 5, (compared, moved)


def test_coverage_lists_what_the_library_keeps(vm_program: Path, privileged: None,
                                               tmp_path: Path) -> None:
    """``noop check --coverage`` on the program: its page (no TYPE line: an untyped
    family per sample name) all mirrored, the library's go_* and process_* set
    included, but the callback gauge, said to be one, and the Set the program writes
    without registering it (check loads no probe: ``noop run`` finds it through one)."""
    p = Program(vm_program)
    try:
        done = run("check", "--binary", vm_program, "--pid", str(p.proc.pid), "--coverage",
                   "--url", p.url, "--json", cache=tmp_path / "cache")
    finally:
        p.stop()
    assert done.returncode == 0, done.stderr
    page = json.loads(done.stdout)["page"]
    rows = {r["family"]: r for r in page["families"]}
    assert rows["vm_goroutines_now"]["status"] == "not" and \
        "GaugeFunc" in rows["vm_goroutines_now"]["why"]
    for local in ("vm_local_total", "vm_local_float_total"):
        assert rows[local]["status"] == "not" and "registered" in rows[local]["why"]
    rest = {f: r["status"] for f, r in rows.items()
            if f not in ("vm_goroutines_now", "vm_local_total", "vm_local_float_total")}
    assert set(rest.values()) == {"mirrored"}, {f: s for f, s in rest.items()
                                                if s != "mirrored"}
    assert {"vm_latency_seconds_bucket", "vm_latency_seconds_count", "go_gc_forced_count",
            "process_io_read_bytes_total"} <= set(rows)
    assert page["mirrored_series"] == page["series"] - 3
