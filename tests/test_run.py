"""``noop run`` against the truth: started before examples/go-prometheus, its /metrics
must say what the example's own /metrics says (meta-metrics) and what the example did
(user metrics); reloads, TLS, and detaching on SIGTERM. Privileged: real BPF."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import _workload
from prometheus_client.parser import text_string_to_metric_families
from test_example import scrape
from test_trace import TICKS, _no_probe_left, _wait_for

REPO = Path(__file__).resolve().parent.parent
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def samples(text: str) -> Samples:
    out: Samples = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def get(url: str, **kw: object) -> str:
    with urllib.request.urlopen(url, timeout=5, **kw) as r:  # type: ignore[arg-type]
        return str(r.read().decode())


@dataclass
class Agent:
    proc: subprocess.Popen[str]
    url: str  # http(s)://host:port
    log: list[str]

    def metrics(self) -> Samples:
        return samples(get(self.url + "/metrics"))

    def stop(self) -> tuple[int, str]:
        self.proc.send_signal(signal.SIGTERM)
        _out, err = self.proc.communicate(timeout=30)
        return self.proc.returncode, "".join(self.log) + err


def start(tmp: Path, *args: str | Path, scheme: str = "http") -> Agent:
    env = dict(os.environ)  # the session's shared noop cache (conftest)
    proc = subprocess.Popen([sys.executable, "-m", "agent", "run", "--listen", "127.0.0.1:0",
                             *map(str, args)], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    log = _wait_for(proc.stderr, r"ready: \d+ uprobes attached", 180)
    addr = next(m.group(1) for line in log if (m := re.search(r"//(\S+)/metrics", line)))
    return Agent(proc, f"{scheme}://{addr}", log)


def lean(pid: int) -> None:
    """The daemon loads what BCC compiled without BCC: neither libbcc nor the LLVM and
    clang it links are mapped into it, and it stays within 120 MB resident."""
    maps = Path(f"/proc/{pid}/maps").read_text()
    assert not [line for line in maps.splitlines()
                if re.search(r"libbcc|libLLVM|libclang", line)], "a compiler is mapped"
    rss = next(int(line.split()[1]) for line in Path(f"/proc/{pid}/status").read_text()
               .splitlines() if line.startswith("VmRSS:"))
    assert rss < 120 * 1024, f"VmRSS {rss} KiB"


def run_example(example: Path, ticks: int = TICKS) -> tuple[subprocess.Popen[str], str]:
    ex = subprocess.Popen([str(example), "-listen", "127.0.0.1:0", "-period", "30ms",
                           "-ticks", str(ticks), "-linger", "60s"],
                          stderr=subprocess.PIPE, text=True)
    assert ex.stderr is not None
    log = _wait_for(ex.stderr, rf"tick {ticks}$", 60)
    url = next(m.group(1) for line in log if (m := re.search(r"(http://\S+/metrics)", line)))
    return ex, url


def settle(agent: Agent, name: str, labels: dict[str, str], want: float) -> Samples:
    """Scrape until a sample reaches ``want`` (the ring buffer is drained on a timer)."""
    key = (name, tuple(sorted(labels.items())))
    got: Samples = {}
    for _ in range(50):
        got = agent.metrics()
        if got.get(key) == want:
            break
        time.sleep(0.2)
    return got


def _labels_text(series: str) -> tuple[str, str]:
    name, _, rest = series.partition("{")
    pairs = sorted(re.findall(r'(\w+)="([^"]*)"', rest))
    return name, ",".join(f"{k}={v}" for k, v in pairs)


def test_meta_metrics_equal_the_programs_own(privileged: None, example: Path,
                                             tmp_path: Path, agent_cleanup: list[Agent]
                                             ) -> None:
    agent = start(tmp_path, "--binary", example)
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
    # One description per metric object, through the ring buffer; none lost.
    produced = sum(v for (n, _), v in got.items() if n == "noop_events_produced_total")
    seen = sum(v for (n, _), v in got.items() if n == "noop_events_total")
    lost = sum(v for (n, _), v in got.items() if n == "noop_events_lost_total")
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
    _no_probe_left(agent.proc.pid)


SPEC = """
targets:
  example: {{binary: {binary}}}
probes:
  - name: order
    function: main.placeOrder
    values:
      id: o.ID
      customer: o.Customer
      qty: o.Items[0].Qty
    metrics:
      - name: shop_orders_total
        type: counter
        help: Orders, by customer
        labels: {{customer: customer}}
      - name: shop_order_ids_total
        type: counter
        value: id
      - name: shop_first_qty
        type: histogram
        value: qty
        buckets: [5, 10, 20]
      - name: shop_last_order_id
        type: gauge
        value: id
      - name: shop_tiers_total
        type: counter
        labels:
          tier: {{value: customer, map: {{acme: gold}}, default: standard}}
          known: {{value: customer, allow: "acme|globex"}}
      - name: shop_capped_total
        type: counter
        max_series: 2
        labels: {{customer: customer}}
      - name: shop_orders_events_total
        type: counter
        aggregate: events
        labels: {{customer: customer}}
"""


def _one(got: Samples, name: str, **labels: str) -> float:
    return got[(name, tuple(sorted(labels.items())))]


def test_user_metrics_from_a_spec_and_reload(privileged: None, example: Path, tmp_path: Path,
                                            agent_cleanup: list[Agent]) -> None:
    spec = tmp_path / "probes.yaml"
    spec.write_text(SPEC.format(binary=example))
    agent = start(tmp_path, "--config", spec)
    agent_cleanup.append(agent)
    ex, _url = run_example(example)
    ex.terminate()
    ex.wait(timeout=10)
    got = settle(agent, "shop_orders_events_total", {"customer": "acme"}, 7)
    # placeOrder(n) for n = 1..23: customer customers[n % 3], ID n, Items[0].Qty n.
    per = {"acme": 7.0, "globex": 8.0, "initech": 8.0}
    for c, n in per.items():
        assert _one(got, "shop_orders_total", customer=c) == n
        assert _one(got, "shop_orders_events_total", customer=c) == n
    assert _one(got, "shop_order_ids_total") == sum(range(1, TICKS + 1))
    assert _one(got, "shop_last_order_id") == TICKS
    assert [_one(got, "shop_first_qty_bucket", le=le) for le in ("5", "10", "20", "+Inf")] \
        == [5, 10, 20, TICKS]
    assert _one(got, "shop_first_qty_sum") == sum(range(1, TICKS + 1))
    assert _one(got, "shop_tiers_total", tier="gold", known="acme") == 7
    assert _one(got, "shop_tiers_total", tier="standard", known="globex") == 8
    assert _one(got, "shop_tiers_total", tier="standard", known="other") == 8
    # max_series 2: globex (n=1) and initech (n=2) came first; acme folds into overflow.
    assert _one(got, "shop_capped_total", customer="globex") == 8
    assert _one(got, "shop_capped_total", customer="initech") == 8
    assert _one(got, "shop_capped_total", customer="__overflow__") == 7
    assert _one(got, "noop_overflow_updates_total", metric="shop_capped_total") == 7
    assert _one(got, "noop_series", metric="shop_capped_total") == 2
    assert _one(got, "noop_probe_hits_total", probe="order") == TICKS
    assert _one(got, "noop_events_produced_total", probe="order") == \
        _one(got, "noop_events_total", probe="order") == TICKS
    # A broken spec on SIGHUP: said once, the running probes stay.
    spec.write_text(SPEC.format(binary=example).replace("o.Customer", "o.Customr"))
    agent.proc.send_signal(signal.SIGHUP)
    got = settle(agent, "noop_reloads_total", {"result": "failure"}, 1)
    assert _one(got, "noop_config_last_reload_successful") == 0
    assert _one(got, "shop_orders_total", customer="acme") == 7
    # A good one replaces them (counts start again: a counter reset to Prometheus).
    spec.write_text(SPEC.format(binary=example))
    agent.proc.send_signal(signal.SIGHUP)
    got = settle(agent, "noop_reloads_total", {"result": "success"}, 1)
    assert _one(got, "noop_config_last_reload_successful") == 1
    assert ("shop_orders_total", (("customer", "acme"),)) not in got
    code, err = agent.stop()
    assert code == 0, err
    assert re.search(r"reload failed, the running probes stay: .*Customr", err), err
    _no_probe_left(agent.proc.pid)


FLOATS = """
targets:
  example: {{binary: {binary}}}
probes:
  - name: counter_add
    function: github.com/prometheus/client_golang/prometheus.(*counter).Add
    values: {{metric: c.desc.fqName, v: v}}
    metrics:
      - {{name: mirror_added_total, type: counter, value: v, labels: {{metric: metric}}}}
  - name: gauge_add           # with its copies inlined into Inc, Dec and Sub
    function: github.com/prometheus/client_golang/prometheus.(*gauge).Add
    values: {{metric: g.desc.fqName, delta: val}}
    metrics:                  # the sum of the increments: the gauge itself
      - {{name: mirror_changes, type: histogram, value: delta, buckets: [0],
         labels: {{metric: metric}}}}
  - name: gauge_set
    function: github.com/prometheus/client_golang/prometheus.(*gauge).Set
    values: {{metric: g.desc.fqName, to: val}}
    metrics:
      - {{name: mirror_set, type: gauge, value: to, labels: {{metric: metric}}}}
  - name: observe
    function: github.com/prometheus/client_golang/prometheus.(*histogram).Observe
    values: {{v: v}}
    metrics:
      - {{name: mirror_observed, type: histogram, value: v, buckets: [1, 2.5, 5, 7.5]}}
"""


def mirrors_equal(agent: Agent, own: Samples) -> None:
    """What noop run with ``FLOATS`` exports equals the example's own ``/metrics``."""
    got = settle(agent, "mirror_observed_count", {}, TICKS)
    for name in ("fake_float_counter", "fake_int_counter"):
        assert _one(got, "mirror_added_total", metric=name) == _one(own, name + "_total") > 0
    for name in ("fake_gauge", "another_fake_gauge", "sub_fake_gauge", "dec_fake_gauge"):
        assert _one(got, "mirror_changes_sum", metric=name) == _one(own, name) != 0
        assert _one(got, "mirror_changes_count", metric=name) == TICKS
    assert _one(got, "mirror_set", metric="fake_set_gauge") == _one(own, "fake_set_gauge")
    for le in ("1", "2.5", "5", "7.5", "+Inf"):
        assert _one(got, "mirror_observed_bucket", le=le) == \
            _one(own, "fake_histogram_bucket", le=le)
    assert _one(got, "mirror_observed_sum") == _one(own, "fake_histogram_sum")


def test_float_arguments_mirror_the_programs_own_metrics(
        privileged: None, example: Path, tmp_path: Path, agent_cleanup: list[Agent]) -> None:
    """Counter.Add(v), Gauge.Add/Sub/Inc/Dec/Set(val) and Histogram.Observe(v) get
    their float argument in xmm0, which a uprobe cannot read: what noop derives from
    the updates' registers (and the stack slot Observe copies v to) must sum to what
    the program's own /metrics says."""
    spec = tmp_path / "floats.yaml"
    spec.write_text(FLOATS.format(binary=example))
    agent = start(tmp_path, "--config", spec)
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
    _no_probe_left(agent.proc.pid)


def test_health_and_readiness(privileged: None, example: Path, tmp_path: Path,
                              agent_cleanup: list[Agent]) -> None:
    spec = tmp_path / "probes.yaml"
    spec.write_text(SPEC.format(binary=example))
    agent = start(tmp_path, "--config", spec)
    agent_cleanup.append(agent)
    assert get(agent.url + "/healthz") == "ok\n"
    assert get(agent.url + "/readyz") == "1 uprobes attached\n"
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
    agent = start(tmp_path, "--config", spec, "--web.config.file", web, scheme="https")
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
    got = subprocess.run([sys.executable, "-m", "agent", "run", "--binary", str(example),
                          *args], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert got.returncode == 2, got.stderr
    assert message in got.stderr
    assert "Traceback" not in got.stderr and len(got.stderr.splitlines()) == 1


def test_run_without_metrics_says_so(example: Path, tmp_path: Path) -> None:
    spec = tmp_path / "probes.yaml"
    spec.write_text(f"targets:\n  t: {{binary: {example}}}\nprobes:\n  - name: p\n"
                    "    function: main.placeOrder\n")
    got = subprocess.run([sys.executable, "-m", "agent", "run", "--config", str(spec)],
                         cwd=REPO, capture_output=True, text=True, timeout=120)
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
    loop = _workload("c", tmp_path / "loop")
    spec = tmp_path / "probes.yaml"
    spec.write_text(MILLION_SPEC.format(binary=loop))
    agent = start(tmp_path, "--config", spec, "--max-overhead", "none")  # a hot loop, counted
    agent_cleanup.append(agent)
    calls, cap = 1_000_000, 1000
    proc = subprocess.Popen([str(loop), "-n", str(calls // 10), "-rounds", "10"],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    proc.stdout.readline()  # the first round: 100000 distinct values so far
    early = _rss_kib(agent.proc.pid)
    rest, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0 and json.loads(rest.splitlines()[-1])["calls_total"] == calls
    got = settle(agent, "loop_events_total", {"x": "__overflow__"}, calls - cap)
    late = _rss_kib(agent.proc.pid)
    for name in ("loop_kernel_total", "loop_events_total"):
        series = {k[1]: v for k, v in got.items() if k[0] == name}
        assert len(series) == cap + 1, name
        assert series[(("x", "__overflow__"),)] == calls - cap
        assert all(series[(("x", str(x)),)] == 1 for x in range(cap)), name  # first hit first
        assert _one(got, "noop_overflow_updates_total", metric=name) == calls - cap
        assert _one(got, "noop_series", metric=name) == cap
    for probe in ("kernel", "events"):
        assert _one(got, "noop_probe_hits_total", probe=probe) == calls
    assert _one(got, "noop_events_total", probe="events") == calls
    assert _one(got, "noop_events_lost_total", probe="events") == 0
    # 900000 more distinct values after the first round: kept, they would take >100 MB.
    assert late - early < 20_000, f"noop grew from {early} to {late} KiB"
    code, err = agent.stop()
    assert code == 0, err
