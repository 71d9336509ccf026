"""Real components: Debian's Prometheus server scrapes ``noop run`` and holds the values
the example itself exposes; ``promtool check metrics`` finds nothing to lint in noop's
/metrics. Privileged: real BPF."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from harness.example import SPEC, TICKS, run_example
from harness.metrics import get, scrape
from harness.noop import Agent, settle, start


def _tool(name: str) -> str:
    found = shutil.which(name)
    assert found, f"{name} is not installed: ./setup.sh installs Debian's prometheus"
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _query(base: str, promql: str) -> list[dict[str, object]]:
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(url, timeout=5) as r:
        body = json.load(r)
    assert body["status"] == "success", body
    return list(body["data"]["result"])


def test_prometheus_scrapes_noop(privileged: None, example: Path, tmp_path: Path,
                                 agent_cleanup: list[Agent]) -> None:
    agent = start("--binary", example, "--mirror", "both")
    agent_cleanup.append(agent)
    port = _free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n  - job_name: noop\n    static_configs:\n"
        f"      - targets: ['{agent.url.removeprefix('http://')}']\n")
    prom = subprocess.Popen([_tool("prometheus"), f"--config.file={config}",
                             f"--storage.tsdb.path={tmp_path / 'data'}",
                             f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        ex, url = run_example(example)
        try:
            truth = scrape(url)
            settle(agent, "noop_metric_value", {"target": example.name, "pid": str(ex.pid),
                                                "library": "client_golang",
                                                "metric": "fake_counter", "labels": ""},
                   TICKS)
            want = {k: v for k, v in truth.items() if k.startswith(
                ("fake_counter", "another_fake_gauge", "sub_fake_gauge", "fake_requests"))}
            got: dict[str, float] = {}
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and len(got) < len(want):
                got = {}
                try:
                    rows = _query(base, f'noop_metric_value{{pid="{ex.pid}"}}')
                except OSError:  # the server is still starting
                    rows = []
                for row in rows:
                    m = row["metric"]
                    assert isinstance(m, dict) and m["job"] == "noop"
                    labels = ",".join(f'{k}="{v}"' for k, v in sorted(
                        p.split("=", 1) for p in str(m.get("labels", "")).split(",") if p))
                    name = str(m["metric"]) + (f"{{{labels}}}" if labels else "")
                    value = row["value"]
                    assert isinstance(value, list)
                    got[name] = float(value[1])
                got = {k: v for k, v in got.items() if k in want}
                time.sleep(0.5)
        finally:
            ex.terminate()
            ex.wait(timeout=10)
        assert got == want
        up = _query(base, 'up{job="noop"}')
        assert [r["value"][1] for r in up] == ["1"]  # type: ignore[index]
    finally:
        prom.terminate()
        prom.wait(timeout=30)
    assert agent.stop()[0] == 0


@pytest.mark.parametrize("what", ["preset", "spec"])
def test_promtool_finds_nothing_to_lint(privileged: None, example: Path, tmp_path: Path,
                                        agent_cleanup: list[Agent], what: str) -> None:
    if what == "spec":
        spec = tmp_path / "probes.yaml"
        spec.write_text(SPEC.format(binary=example))
        agent = start("--config", spec)
    else:
        agent = start("--binary", example, "--mirror", "both")
    agent_cleanup.append(agent)
    ex, _url = run_example(example, ticks=5)
    ex.terminate()
    ex.wait(timeout=10)
    text = get(agent.url + "/metrics")
    assert "noop_probes_attached" in text
    checked = subprocess.run([_tool("promtool"), "check", "metrics"], input=text,
                             capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0 and not checked.stdout.strip() \
        and not checked.stderr.strip(), checked.stdout + checked.stderr
    assert agent.stop()[0] == 0
