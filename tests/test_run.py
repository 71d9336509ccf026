"""``noop run`` against the truth: started before examples/go-prometheus, its /metrics
must say what the example's own /metrics says (meta-metrics) and what the example did
(user metrics); reloads, TLS, and detaching on SIGTERM. Privileged: real BPF."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from harness.example import FLOATS, SPEC, TICKS, mirrors_equal, run_example
from harness.metrics import get, one, samples, scrape
from harness.noop import Agent, no_probe_left, run, settle, start
from harness.programs import workload

pytestmark = pytest.mark.attach  # run again through perf-event uprobes (--attach both)

REPO = Path(__file__).resolve().parent.parent


def lean(pid: int) -> None:
    """The daemon loads what BCC compiled without BCC: neither libbcc nor the LLVM and
    clang it links are mapped into it, and it stays within 120 MB resident."""
    maps = Path(f"/proc/{pid}/maps").read_text()
    assert not [line for line in maps.splitlines()
                if re.search(r"libbcc|libLLVM|libclang", line)], "a compiler is mapped"
    rss = next(int(line.split()[1]) for line in Path(f"/proc/{pid}/status").read_text()
               .splitlines() if line.startswith("VmRSS:"))
    assert rss < 120 * 1024, f"VmRSS {rss} KiB"


def _labels_text(series: str) -> tuple[str, str]:
    name, _, rest = series.partition("{")
    pairs = sorted(re.findall(r'(\w+)="([^"]*)"', rest))
    return name, ",".join(f"{k}={v}" for k, v in pairs)


@pytest.mark.parametrize("build", ["dwarf", "stripped"])
def test_meta_metrics_equal_the_programs_own(privileged: None, example: Path, build: str,
                                             tmp_path: Path, agent_cleanup: list[Agent],
                                             request: pytest.FixtureRequest) -> None:
    """noop run --binary: its meta-metrics equal the program's own /metrics, on the
    example and on its -s -w twin (no DWARF, no symbol table)."""
    if build == "stripped":
        example = request.getfixturevalue("stripped_example")
    agent = start("--binary", example, "--mirror", "both")
    agent_cleanup.append(agent)
    lean(agent.proc.pid)
    ex, url = run_example(example)
    try:
        truth = scrape(url)
        base = {"target": example.name, "pid": str(ex.pid), "library": "client_golang"}
        got = settle(agent, "noop_metric_updates_total",
                     {**base, "metric": "fake_counter", "labels": "", "op": "Inc"}, TICKS)
        up = settle(agent, "noop_target_up", {"target": "main"}, 1)  # a pass over /proc
        assert up[("noop_target_up", (("target", "main"),))] == 1
    finally:
        ex.terminate()
        ex.wait(timeout=10)
    series = {k: v for k, v in truth.items() if k.startswith(
        ("fake_", "another_", "sub_", "dec_", "shop_")) and not k.startswith("fake_histogram")}
    assert len(series) == 18
    for s, want in series.items():
        name, labels = _labels_text(s)
        key = tuple(sorted({**base, "metric": name, "labels": labels}.items()))
        assert got[("noop_metric_value", key)] == want, s
        assert got[("noop_metric_increments", key)] == want, s  # all started at 0
    hist = tuple(sorted({**base, "metric": "fake_histogram", "labels": ""}.items()))
    assert got[("noop_metric_value", hist)] == truth["fake_histogram_count"] == TICKS
    updates = {(dict(k)["metric"], dict(k)["labels"], dict(k)["op"]): v
               for (n, k), v in got.items() if n == "noop_metric_updates_total"}
    children = {_labels_text(s): v for s, v in series.items()
                if s.startswith(("fake_requests_total", "shop_orders_total"))}
    assert updates == {
        ("fake_counter", "", "Inc"): TICKS, ("another_fake_counter", "", "Inc"): 2 * TICKS,
        ("fake_gauge", "", "Inc"): TICKS, ("another_fake_gauge", "", "Add"): TICKS,
        ("sub_fake_gauge", "", "Sub"): TICKS, ("dec_fake_gauge", "", "Dec"): TICKS,
        ("fake_set_gauge", "", "Set"): TICKS, ("fake_float_counter", "", "Add"): TICKS,
        ("fake_int_counter", "", "Add"): TICKS, ("fake_histogram", "", "Observe"): TICKS,
        **{(name, k, "Inc"): v for (name, k), v in children.items()}}
    # One description per metric object, through the ring buffer; none lost. (The
    # registries the example gathers tell the mirror, one event a scrape of it.)
    def total(name: str) -> float:
        return sum(v for (n, k), v in got.items()
                   if n == name and dict(k).get("probe") != "registry_gathered")
    produced, seen = total("noop_events_produced_total"), total("noop_events_total")
    lost = total("noop_events_lost_total")
    assert (produced, lost) == (seen, 0) and seen == 10 + len(children)
    # The example has exited: its rows and names are dropped within the prune sweep.
    for _ in range(30):
        left = [k for (n, k), _v in agent.metrics().items()
                if n == "noop_metric_value" and ("pid", str(ex.pid)) in k]
        if not left:
            break
        time.sleep(0.2)
    assert not left
    for _ in range(50):  # exited: up within a pass over /proc (the file keeps its probes)
        up = agent.metrics()[("noop_target_up", (("target", "main"),))]
        if up == 0:
            break
        time.sleep(0.1)
    assert up == 0
    code, err = agent.stop()
    assert code == 0, err
    assert "SIGTERM: detaching" in err
    no_probe_left(agent.proc.pid)


def test_user_metrics_from_a_spec_and_reload(privileged: None, example: Path, tmp_path: Path,
                                            agent_cleanup: list[Agent]) -> None:
    spec = tmp_path / "probes.yaml"
    spec.write_text(SPEC.format(binary=example))
    agent = start("--config", spec)
    agent_cleanup.append(agent)
    ex, _url = run_example(example)
    ex.terminate()
    ex.wait(timeout=10)
    # placeOrder(n) for n = 1..23: customer customers[n % 3], ID n, Items[0].Qty n; the
    # last order (23) is initech's 8th: once its event is in, every one before it is.
    got = settle(agent, "shop_orders_events_total", {"customer": "initech"}, 8)
    per = {"acme": 7.0, "globex": 8.0, "initech": 8.0}
    for c, n in per.items():
        assert one(got, "shop_orders_total", customer=c) == n
        assert one(got, "shop_orders_events_total", customer=c) == n
    assert one(got, "shop_order_ids_total") == sum(range(1, TICKS + 1))
    assert one(got, "shop_last_order_id") == TICKS
    assert [one(got, "shop_first_qty_bucket", le=le) for le in ("5", "10", "20", "+Inf")] \
        == [5, 10, 20, TICKS]
    assert one(got, "shop_first_qty_sum") == sum(range(1, TICKS + 1))
    assert one(got, "shop_tiers_total", tier="gold", known="acme") == 7
    assert one(got, "shop_tiers_total", tier="standard", known="globex") == 8
    assert one(got, "shop_tiers_total", tier="standard", known="other") == 8
    # max_series 2: globex (n=1) and initech (n=2) came first; acme folds into overflow.
    assert one(got, "shop_capped_total", customer="globex") == 8
    assert one(got, "shop_capped_total", customer="initech") == 8
    assert one(got, "shop_capped_total", customer="__overflow__") == 7
    assert one(got, "noop_overflow_updates_total", metric="shop_capped_total") == 7
    assert one(got, "noop_series", metric="shop_capped_total") == 2
    assert one(got, "noop_probe_hits_total", probe="order") == TICKS
    assert one(got, "noop_events_produced_total", probe="order") == \
        one(got, "noop_events_total", probe="order") == TICKS
    # A broken spec on SIGHUP: said once, the running probes stay.
    spec.write_text(SPEC.format(binary=example).replace("o.Customer", "o.Customr"))
    agent.proc.send_signal(signal.SIGHUP)
    got = settle(agent, "noop_reloads_total", {"result": "failure"}, 1)
    assert one(got, "noop_config_last_reload_successful") == 0
    assert one(got, "shop_orders_total", customer="acme") == 7
    # A good one replaces them (counts start again: a counter reset to Prometheus).
    spec.write_text(SPEC.format(binary=example))
    agent.proc.send_signal(signal.SIGHUP)
    got = settle(agent, "noop_reloads_total", {"result": "success"}, 1)
    assert one(got, "noop_config_last_reload_successful") == 1
    assert ("shop_orders_total", (("customer", "acme"),)) not in got
    code, err = agent.stop()
    assert code == 0, err
    assert re.search(r"reload failed, the running probes stay: .*Customr", err), err
    no_probe_left(agent.proc.pid)


def test_float_arguments_mirror_the_programs_own_metrics(
        privileged: None, example: Path, tmp_path: Path, agent_cleanup: list[Agent]) -> None:
    """Counter.Add(v), Gauge.Add/Sub/Inc/Dec/Set(val) and Histogram.Observe(v) get
    their float argument in xmm0, which a uprobe cannot read: what noop derives from
    the updates' registers (and the stack slot Observe copies v to) must sum to what
    the program's own /metrics says."""
    spec = tmp_path / "floats.yaml"
    spec.write_text(FLOATS.format(binary=example))
    agent = start("--config", spec)
    agent_cleanup.append(agent)
    ex, url = run_example(example)
    try:
        own = samples(get(url))
    finally:
        ex.terminate()
        ex.wait(timeout=10)
    mirrors_equal(agent, own)
    code, err = agent.stop()
    assert code == 0, err
    no_probe_left(agent.proc.pid)


def test_health_and_readiness(privileged: None, example: Path, tmp_path: Path,
                              agent_cleanup: list[Agent]) -> None:
    spec = tmp_path / "probes.yaml"
    spec.write_text(SPEC.format(binary=example))
    agent = start("--config", spec)
    agent_cleanup.append(agent)
    assert get(agent.url + "/healthz") == "ok\n"
    assert get(agent.url + "/readyz") == "1 uprobe attached\n"
    with pytest.raises(urllib.error.HTTPError) as err:
        get(agent.url + "/nothing")
    assert err.value.code == 404
    assert agent.stop()[0] == 0


def _certs(tmp: Path) -> Path:
    def ssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=tmp, check=True, capture_output=True)

    ssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=noop ca",
        "-keyout", "ca.key", "-out", "ca.crt")
    ssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1", "-keyout",
        "server.key", "-out", "server.csr")
    (tmp / "ext").write_text("subjectAltName=IP:127.0.0.1\n")
    ssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
        "-CAcreateserial", "-days", "2", "-extfile", "ext", "-out", "server.crt")
    web = tmp / "web.yml"
    web.write_text("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n")
    return web


def test_tls_from_a_web_config_file(privileged: None, example: Path, tmp_path: Path,
                                    agent_cleanup: list[Agent]) -> None:
    import ssl

    web = _certs(tmp_path)
    spec = tmp_path / "probes.yaml"
    spec.write_text(SPEC.format(binary=example))
    agent = start("--config", spec, "--web.config.file", web, scheme="https")
    agent_cleanup.append(agent)
    ctx = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
    text = get(agent.url + "/metrics", context=ctx)
    assert "noop_build_info{" in text
    with pytest.raises(urllib.error.URLError):  # a client that does not trust it
        get(agent.url + "/metrics", context=ssl.create_default_context())
    with pytest.raises((urllib.error.URLError, ConnectionError)):  # plain HTTP
        get(agent.url.replace("https", "http") + "/metrics")
    assert agent.stop()[0] == 0


@pytest.mark.parametrize(("args", "message"), [
    (["--listen", "nowhere"], "--listen 'nowhere': expected HOST:PORT"),
    (["--web.config.file", "/nonexistent/web.yml"], "web.yml"),
])
def test_run_bad_flags_are_one_line(example: Path, args: list[str], message: str) -> None:
    got = run("run", "--binary", example, *args, timeout=120)
    assert got.returncode == 2, got.stderr
    assert message in got.stderr
    assert "Traceback" not in got.stderr and len(got.stderr.splitlines()) == 1


def test_run_without_metrics_says_so(example: Path, tmp_path: Path) -> None:
    spec = tmp_path / "probes.yaml"
    spec.write_text(f"targets:\n  t: {{binary: {example}}}\nprobes:\n  - name: p\n"
                    "    function: main.placeOrder\n")
    got = run("run", "--config", spec, timeout=120)
    assert got.returncode == 2
    assert got.stderr.strip().splitlines()[-1] == (
        "noop: nothing to export: no probe of the spec has metrics "
        "(add metrics: to a probe (see probes.yaml))")


MILLION_SPEC = """version: 1
targets:
  loop: {{binary: {binary}}}
probes:
  - name: kernel
    function: work
    values: {{x: x}}
    metrics:
      - {{name: loop_kernel_total, type: counter, labels: {{x: x}}}}
  - name: events
    function: work
    values: {{x: x}}
    metrics:
      - {{name: loop_events_total, type: counter, aggregate: events, labels: {{x: x}}}}
"""


def _rss_kib(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"^VmRSS:\s+(\d+) kB", status, re.M).group(1))  # type: ignore[union-attr]


@pytest.mark.serial  # a million calls and noop's memory measured
def test_a_million_distinct_label_values(privileged: None, tmp_path: Path,
                                         agent_cleanup: list[Agent]) -> None:
    """work(x) called with x = 0 .. 999999: every metric keeps its first 1000 label sets
    (the default cap), folds the rest into the overflow series and counts each of them;
    the kernel map and noop's memory stay bounded."""
    loop = workload("c", tmp_path / "loop")
    spec = tmp_path / "probes.yaml"
    spec.write_text(MILLION_SPEC.format(binary=loop))
    agent = start("--config", spec, "--max-overhead", "none")  # a hot loop, counted
    agent_cleanup.append(agent)
    calls, cap = 1_000_000, 1000
    proc = subprocess.Popen([str(loop), "-n", str(calls // 10), "-rounds", "10"],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    proc.stdout.readline()  # the first round: 100000 distinct values so far
    early = _rss_kib(agent.proc.pid)
    rest, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0 and json.loads(rest.splitlines()[-1])["calls_total"] == calls
    got = settle(agent, "loop_kernel_total", {"x": "__overflow__"}, calls - cap)
    late = _rss_kib(agent.proc.pid)
    # The events path counts what the ring buffer carried; a reader slower than this
    # hot loop (a loaded machine) loses some, each counted as lost: every call is
    # accounted for either way. The kernel path loses none.
    lost = one(got, "noop_events_lost_total", probe="events")
    assert one(got, "noop_events_total", probe="events") + lost == calls
    for name, missed in (("loop_kernel_total", 0), ("loop_events_total", lost)):
        series = {k[1]: v for k, v in got.items() if k[0] == name}
        assert len(series) == cap + 1, name
        assert series[(("x", "__overflow__"),)] == calls - cap - missed, name
        assert all(series[(("x", str(x)),)] == 1 for x in range(cap)), name  # first hit first
        assert one(got, "noop_overflow_updates_total", metric=name) == calls - cap - missed
        assert one(got, "noop_series", metric=name) == cap
    for probe in ("kernel", "events"):
        assert one(got, "noop_probe_hits_total", probe=probe) == calls
    # 900000 more distinct values after the first round: kept, they would take >100 MB.
    assert late - early < 20_000, f"noop grew from {early} to {late} KiB"
    code, err = agent.stop()
    assert code == 0, err


def test_scrapes_during_reloads_are_answered(privileged: None, example: Path,
                                             tmp_path: Path, agent_cleanup: list[Agent]
                                             ) -> None:
    """Scrapes that run while a reload swaps the probes read the old probes' maps or
    the new ones', never maps already closed: every one of them is answered (200)."""
    spec = tmp_path / "probes.yaml"
    spec.write_text(SPEC.format(binary=example))
    agent = start("--config", spec)
    agent_cleanup.append(agent)
    answers: list[int] = []
    stop = threading.Event()

    def scrape_on() -> None:
        while not stop.is_set():
            try:
                with urllib.request.urlopen(agent.url + "/metrics", timeout=10) as r:
                    r.read()
                    answers.append(r.status)
            except urllib.error.HTTPError as exc:
                answers.append(exc.code)

    scrapers = [threading.Thread(target=scrape_on) for _ in range(3)]
    for t in scrapers:
        t.start()
    try:
        for n in range(1, 13):
            agent.proc.send_signal(signal.SIGHUP)
            settle(agent, "noop_reloads_total", {"result": "success"}, n)
    finally:
        stop.set()
        for t in scrapers:
            t.join()
    got = agent.metrics()
    assert one(got, "noop_reloads_total", result="success") == 12
    assert answers and set(answers) == {200}, sorted(set(answers))
    code, err = agent.stop()
    assert code == 0, err


def test_a_session_given_up_waits_for_the_scrape_that_reads_it() -> None:
    """Exporter.use (a reload, a new build) returns only once no scrape reads the maps of
    the session before: the caller closes them next. A scrape held inside the old
    session's first map read must hold use() back until it is done."""
    from agent.output.exporter import Exporter, Health, Session

    reading, release = threading.Event(), threading.Event()

    class Maps:
        def produced(self) -> dict[int, int]:
            reading.set()
            release.wait(10)
            raise OSError(9, "closed")  # what reading a closed map raises: no further

    old = Session.__new__(Session)
    object.__setattr__(old, "maps", Maps())
    exporter = Exporter(Health())
    exporter.use(old)
    failed: list[BaseException] = []

    def scrape() -> None:
        try:
            list(exporter.collect())
        except OSError as exc:
            failed.append(exc)

    scraper = threading.Thread(target=scrape)
    scraper.start()
    assert reading.wait(10)
    swapped = threading.Event()
    swapper = threading.Thread(target=lambda: (exporter.use(None), swapped.set()))
    swapper.start()
    held = not swapped.wait(0.3)  # the scrape still reads the old maps
    release.set()
    scraper.join(10)
    swapper.join(10)
    assert held, "use() returned while a scrape was reading the old session's maps"
    assert swapped.is_set() and exporter.session is None and len(failed) == 1
