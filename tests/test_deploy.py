"""Deployment: the systemd unit (verified by systemd-analyze, installed by noop itself),
the notify protocol spoken to a real socket, log priorities for the journal, and the
Kubernetes manifests checked against the API's schemas. Privileged where noop runs."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from harness.example import SPEC, run_example
from harness.manifests import documents, patched
from harness.metrics import fetch
from harness.noop import Agent, command, environment, popen, settle, wait_for

REPO = Path(__file__).resolve().parent.parent
UNIT = REPO / "deploy" / "systemd" / "noop.service"
KUBE = REPO / "deploy" / "kubernetes"
NOOP = Path(sys.executable).parent / "noop"
ONE_COMPILER = pytest.mark.parametrize("example", ["go1.19"], indirect=True)


# ---------------------------------------------------------------------------------------
# systemd


def _install(root: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(NOOP), "install-service", "--root", str(root), *extra],
                          capture_output=True, text=True, timeout=120, check=False)


def test_install_service_puts_the_unit_in_place(tmp_path: Path) -> None:
    """The unit from deploy/, with ExecStart naming this noop; the config only when there
    is none (a second install keeps the user's edits)."""
    done = _install(tmp_path)
    assert done.returncode == 0, done.stderr
    unit = (tmp_path / "etc/systemd/system/noop.service").read_text()
    execs = re.findall(r"^ExecStart=(\S+) run --config /etc/noop/probes\.yaml", unit, re.M)
    assert execs == [str(NOOP)]
    assert unit.replace(str(NOOP), "/usr/local/bin/noop") == UNIT.read_text()
    config = tmp_path / "etc/noop/probes.yaml"
    assert "targets:" in config.read_text()
    config.write_text("# mine\n")
    again = _install(tmp_path)
    assert again.returncode == 0, again.stderr
    assert config.read_text() == "# mine\n"
    assert "kept" in again.stdout


def test_systemd_analyze_verify_says_nothing(tmp_path: Path) -> None:
    """systemd-analyze verify warns about unknown keys and bad values but still exits
    0: any output at all fails."""
    assert _install(tmp_path).returncode == 0
    done = subprocess.run(["systemd-analyze", "verify",
                           str(tmp_path / "etc/systemd/system/noop.service")],
                          capture_output=True, text=True, timeout=60, check=False)
    assert (done.returncode, done.stdout + done.stderr) == (0, "")


def test_the_perf_uprobes_drop_in_verifies(tmp_path: Path) -> None:
    """The drop-in for kernels without uprobe_multi links, merged into the unit as
    systemd merges it: verify says nothing; it adds CAP_SYS_ADMIN and a longer stop."""
    assert _install(tmp_path).returncode == 0
    unit = tmp_path / "etc/systemd/system/noop.service"
    drop_in = (UNIT.parent / "noop-perf-uprobes.conf").read_text()
    assert re.findall(r"^(\w+)=", drop_in, re.M) == ["CapabilityBoundingSet",
                                                      "TimeoutStopSec"]
    unit.write_text(unit.read_text() + "\n" + drop_in)
    done = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True,
                          text=True, timeout=60, check=False)
    assert (done.returncode, done.stdout + done.stderr) == (0, "")


def test_systemd_analyze_verify_catches_a_mistake(tmp_path: Path) -> None:
    """The check above can fail: a misspelt value is reported."""
    assert _install(tmp_path).returncode == 0
    unit = tmp_path / "etc/systemd/system/noop.service"
    unit.write_text(unit.read_text().replace("ProtectSystem=strict", "ProtectSystem=strictt"))
    done = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True,
                          text=True, timeout=60, check=False)
    assert "strictt" in done.stdout + done.stderr


def test_systemd_security_exposure() -> None:
    """systemd's own score of the sandbox (0 safest, 10 unsafe): a regression fails."""
    done = subprocess.run(["systemd-analyze", "security", "--offline=yes", "--no-pager",
                           str(UNIT)], capture_output=True, text=True, timeout=60,
                          check=False)
    m = re.search(r"Overall exposure level for noop\.service: ([\d.]+)", done.stdout)
    assert m, done.stdout + done.stderr
    assert float(m.group(1)) <= 4.0, done.stdout


def test_log_priorities_for_the_journal(tmp_path: Path) -> None:
    """With stderr the journal's stream (JOURNAL_STREAM names its device and inode),
    each line carries its syslog priority; on any other stderr it does not."""
    def run(journal: bool) -> str:
        r, w = os.pipe()
        st = os.fstat(w)
        env = {**os.environ, "JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}" if journal else ""}
        proc = subprocess.Popen([str(NOOP), "check", "--config", str(tmp_path / "none.yaml")],
                                stdout=subprocess.DEVNULL, stderr=w, env=env)
        os.close(w)
        with os.fdopen(r) as f:
            out = f.read()
        assert proc.wait(timeout=60) != 0
        return out

    assert re.fullmatch(r"<3>noop: .*none\.yaml.*\n", run(True)), run(True)
    assert re.fullmatch(r"noop: .*none\.yaml.*\n", run(False))


class NotifySocket:
    """A service manager's notify socket: an abstract AF_UNIX datagram socket."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.name = f"noop-test-{os.getpid()}-{time.monotonic_ns()}"
        self.sock.bind("\0" + self.name)
        self.messages: list[tuple[float, dict[str, str]]] = []

    def wait_for(self, key: str, timeout: float) -> dict[str, str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                data = self.sock.recv(4096)
            except TimeoutError:
                break
            fields = dict(line.split("=", 1) for line in data.decode().splitlines())
            self.messages.append((time.monotonic(), fields))
            if key in fields:
                return fields
        pytest.fail(f"no {key} within {timeout}s; got {[m for _, m in self.messages]}",
                    pytrace=False)

    def close(self) -> None:
        self.sock.close()


@ONE_COMPILER
@pytest.mark.serial  # the watchdog's period is timed
def test_notify_ready_watchdog_reload_stop(privileged: None, example: Path,
                                           tmp_path: Path) -> None:
    """Against a real notify socket: more start time is asked for first; READY=1 comes
    only when /readyz says the probes are attached; WATCHDOG=1 comes from the main loop
    at half of WATCHDOG_USEC; SIGHUP is RELOADING=1 then READY=1; SIGTERM is
    STOPPING=1 and exit 0."""
    spec = tmp_path / "probes.yaml"
    spec.write_text(SPEC.format(binary=example))
    notify = NotifySocket()
    proc = popen("run", "--listen", "127.0.0.1:0", "--config", spec, cache=tmp_path / "cache",
                 env={"NOTIFY_SOCKET": "@" + notify.name, "WATCHDOG_USEC": "1000000"},
                 stderr=subprocess.PIPE)
    try:
        assert proc.stderr is not None
        serving = proc.stderr.readline()
        addr = re.search(r"//(\S+)/metrics", serving)
        assert addr, serving
        first = notify.wait_for("EXTEND_TIMEOUT_USEC", 30)
        assert "READY" not in first and int(first["EXTEND_TIMEOUT_USEC"]) >= 10_000_000
        assert fetch(f"http://{addr.group(1)}/readyz")[0] == 503  # still attaching
        ready = notify.wait_for("READY", 180)
        assert re.fullmatch(r"\d+ uprobes? attached", ready.get("STATUS", "")), ready
        assert fetch(f"http://{addr.group(1)}/readyz") == (200, ready["STATUS"] + "\n")
        t0 = time.monotonic()
        notify.wait_for("WATCHDOG", 3)
        notify.wait_for("WATCHDOG", 3)
        assert time.monotonic() - t0 < 2.5  # at half of WATCHDOG_USEC (1 s)
        proc.send_signal(signal.SIGHUP)
        notify.wait_for("RELOADING", 10)
        notify.wait_for("READY", 120)
        proc.send_signal(signal.SIGTERM)
        notify.wait_for("STOPPING", 10)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        notify.close()


# ---------------------------------------------------------------------------------------
# Kubernetes


def test_daemonset_is_valid_kubernetes() -> None:
    """kubernetes-validate --strict (the API's own OpenAPI schemas, bundled: no cluster,
    no network) passes every object of the manifest; --strict fails unknown fields."""
    validate = Path(sys.executable).parent / "kubernetes-validate"
    done = subprocess.run([str(validate), "--strict", str(KUBE / "noop.yaml")],
                          capture_output=True, text=True, timeout=300, check=False)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    kinds = {d["kind"] for d in documents(KUBE / "noop.yaml")}
    assert kinds == {"Namespace", "ServiceAccount", "ConfigMap", "DaemonSet"}
    assert len(re.findall(r"^INFO .* passed for resource", out, re.M)) == len(
        documents(KUBE / "noop.yaml")), out
    assert "WARN" not in out and "ERROR" not in out, out


@pytest.mark.parametrize("patch", ["seccomp-localhost", "sys-admin"])
def test_daemonset_patches_are_valid_kubernetes(patch: str, tmp_path: Path) -> None:
    """Each variant the DaemonSet's comment names, applied to it as `kubectl patch`
    would, passes kubernetes-validate --strict and changes only what it says."""
    (change,) = documents(KUBE / f"{patch}.patch.yaml")
    ds = next(d for d in documents(KUBE / "noop.yaml") if d["kind"] == "DaemonSet")
    out = patched(ds, change)
    assert f"{patch}.patch.yaml" in (KUBE / "noop.yaml").read_text()
    path = tmp_path / "ds.yaml"
    path.write_text(yaml.safe_dump(out))
    validate = Path(sys.executable).parent / "kubernetes-validate"
    done = subprocess.run([str(validate), "--strict", str(path)], capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    sc = out["spec"]["template"]["spec"]["containers"][0]["securityContext"]
    if patch == "sys-admin":
        assert sc["capabilities"]["add"] == ["SYS_ADMIN", "SYS_PTRACE", "DAC_READ_SEARCH"]
        assert out["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] >= 30
    else:
        assert sc["seccompProfile"] == {"type": "Localhost",
                                        "localhostProfile": "noop-bpf.json"}
        assert "SYS_ADMIN" not in sc["capabilities"]["add"]
    rest = {k: v for k, v in sc.items() if k not in ("capabilities", "seccompProfile")}
    orig = ds["spec"]["template"]["spec"]["containers"][0]["securityContext"]
    assert rest == {k: v for k, v in orig.items()
                    if k not in ("capabilities", "seccompProfile")}


def test_seccomp_profile_changes_bpf_and_perf_event_open_only(tmp_path: Path) -> None:
    """deploy/kubernetes/seccomp-profile on podman's own default (containers-common):
    every rule the same but those naming bpf and perf_event_open, which are allowed to
    CAP_BPF and CAP_PERFMON and refused otherwise as before; a missing or broken default
    is said in one line. The pod under it: tests/test_container.py."""
    script = KUBE / "seccomp-profile"
    default = Path("/usr/share/containers/seccomp.json")
    done = subprocess.run([str(script), str(default)], capture_output=True, text=True,
                          timeout=60, check=True)
    old, new = json.loads(default.read_text()), json.loads(done.stdout)
    assert {k: v for k, v in new.items() if k != "syscalls"} == \
        {k: v for k, v in old.items() if k != "syscalls"}
    ours = {"bpf", "perf_event_open"}

    def without(rules: list[dict[str, Any]]) -> list[Any]:
        out = []
        for r in rules:
            names = [n for n in r["names"] if n not in ours]
            if names:
                out.append({**r, "names": names})
        return out

    assert without(new["syscalls"]) == without(old["syscalls"])
    for name, cap in (("bpf", "CAP_BPF"), ("perf_event_open", "CAP_PERFMON")):
        rules = [r for r in new["syscalls"] if name in r["names"]]
        allow = [r for r in rules if r["action"] == "SCMP_ACT_ALLOW"]
        assert {tuple(r["includes"].get("caps", [])) for r in allow} == \
            {("CAP_SYS_ADMIN",), (cap,)}
        refuse = [r for r in rules if r["action"] != "SCMP_ACT_ALLOW"]
        assert refuse and all(cap in r["excludes"]["caps"] and "CAP_SYS_ADMIN" in
                              r["excludes"]["caps"] for r in refuse)
    (tmp_path / "bad.json").write_text("{")
    (tmp_path / "list.json").write_text("[]")
    for arg, says in ((tmp_path / "none.json", "No such file"), (tmp_path / "bad.json",
                      "not a seccomp profile"), (tmp_path / "list.json", "no defaultAction")):
        bad = subprocess.run([str(script), str(arg)], capture_output=True, text=True,
                             timeout=60, check=False)
        assert bad.returncode == 1 and bad.stdout == "", bad
        assert len(bad.stderr.splitlines()) == 1 and says in bad.stderr, bad.stderr


def test_daemonset_validation_can_fail(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text((KUBE / "noop.yaml").read_text().replace("hostPID: true",
                                                              "hostPID: true\n      hostPIDs: 1"))
    validate = Path(sys.executable).parent / "kubernetes-validate"
    done = subprocess.run([str(validate), "--strict", str(bad)], capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode != 0 and "hostPIDs" in done.stdout + done.stderr


def _podmonitor_errors(doc: dict[str, Any]) -> list[str]:
    """Errors of ``doc`` against the PodMonitor schema of the Prometheus Operator's
    CRD (cloudcoil's generated model of it), made strict: no field it does not know."""
    import jsonschema
    from cloudcoil.models.prometheus_operator.v1 import PodMonitor

    schema = PodMonitor.model_json_schema(by_alias=True)

    def strict(node: Any) -> None:
        if isinstance(node, dict):
            if "properties" in node and "additionalProperties" not in node:
                node["additionalProperties"] = False
            for v in node.values():
                strict(v)
        elif isinstance(node, list):
            for v in node:
                strict(v)

    strict(schema)
    validator = jsonschema.Draft202012Validator(schema)
    return [f"{'/'.join(map(str, e.path))}: {e.message}" for e in validator.iter_errors(doc)]


def test_podmonitor_matches_its_schema_and_the_daemonset() -> None:
    (pm,) = documents(KUBE / "podmonitor.yaml")
    assert (pm["apiVersion"], pm["kind"]) == ("monitoring.coreos.com/v1", "PodMonitor")
    assert _podmonitor_errors(pm) == []
    ds = next(d for d in documents(KUBE / "noop.yaml") if d["kind"] == "DaemonSet")
    pod = ds["spec"]["template"]
    assert pm["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    ports = {p["name"] for c in pod["spec"]["containers"] for p in c["ports"]}
    assert {e["port"] for e in pm["spec"]["podMetricsEndpoints"]} <= ports
    assert pm["metadata"]["namespace"] == ds["metadata"]["namespace"]


def test_podmonitor_schema_check_can_fail() -> None:
    (pm,) = documents(KUBE / "podmonitor.yaml")
    pm["spec"]["podMetricsEndpoints"][0]["prot"] = "metrics"
    pm["spec"]["selector"] = "app=noop"
    errors = _podmonitor_errors(json.loads(json.dumps(pm)))
    assert any("prot" in e for e in errors) and any(e.startswith("spec/selector") for e in
                                                    errors), errors


def test_daemonset_config_is_a_valid_spec(tmp_path: Path) -> None:
    """The ConfigMap's probes.yaml parses as a spec (its binary lives in the pods)."""
    from agent.config import probes as spec

    cm = next(d for d in documents(KUBE / "noop.yaml") if d["kind"] == "ConfigMap")
    path = tmp_path / "probes.yaml"
    path.write_text(cm["data"]["probes.yaml"])
    s = spec.load(path)
    assert [p.name for p in s.probes] == ["order"]


# ---------------------------------------------------------------------------------------
# Privileges: only the capabilities the unit and the DaemonSet list.

CAP_BITS = {"bpf": 39, "perfmon": 38, "sys_ptrace": 19, "dac_read_search": 2}


def _listed() -> set[str]:
    """The capabilities the unit grants: the DaemonSet's, the same."""
    unit = re.search(r"^CapabilityBoundingSet=(.*)$", UNIT.read_text(), re.M)
    assert unit
    in_unit = {c.removeprefix("CAP_").lower() for c in unit.group(1).split()}
    ds = next(d for d in documents(KUBE / "noop.yaml") if d["kind"] == "DaemonSet")
    sc = ds["spec"]["template"]["spec"]["containers"][0]["securityContext"]
    assert sc["capabilities"]["drop"] == ["ALL"] and sc["privileged"] is False
    assert {c.lower() for c in sc["capabilities"]["add"]} == in_unit
    return in_unit


def _with_caps(caps: set[str], *argv: str) -> list[str]:
    """argv run as root's uid with no capability but ``caps`` (bounding set)."""
    return ["setpriv", "--bounding-set=-all," + ",".join(f"+{c}" for c in sorted(caps)),
            "--inh-caps=-all", "--", *argv]


@ONE_COMPILER
def test_runs_with_only_the_listed_capabilities(privileged: None, example: Path,
                                                tmp_path: Path) -> None:
    """noop run with the listed capabilities and no other (not full root: no
    CAP_SYS_ADMIN) attaches through uprobe_multi links and counts what the example did,
    saying once that budgets count traps only; with CAP_BPF or CAP_PERFMON dropped it
    refuses in one line that names it."""

    caps = _listed()
    assert caps == set(CAP_BITS)
    spec = tmp_path / "probes.yaml"
    spec.write_text(SPEC.format(binary=example))
    env = environment(cache=tmp_path / "cache")
    cmd = command("run", "--listen", "127.0.0.1:0", "--config", spec)
    proc = subprocess.Popen(_with_caps(caps, *cmd), cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    agent = None
    try:
        assert proc.stderr is not None
        log = wait_for(proc.stderr, r"ready: \d+ uprobes? attached", 180)
        status = Path(f"/proc/{proc.pid}/status").read_text()
        eff = int(re.search(r"^CapEff:\s*(\w+)", status, re.M).group(1), 16)  # type: ignore[union-attr]
        assert eff == sum(1 << b for b in CAP_BITS.values())
        addr = next(m.group(1) for line in log if (m := re.search(r"//(\S+)/metrics", line)))
        agent = Agent(proc, f"http://{addr}", log)
        ex, _url = run_example(example)
        ex.terminate()
        ex.wait(timeout=10)
        got = settle(agent, "shop_orders_total", {"customer": "acme"}, 7)
        assert {c: got[("shop_orders_total", (("customer", c),))]
                for c in ("acme", "globex", "initech")} == {"acme": 7, "globex": 8,
                                                            "initech": 8}
        code, err = agent.stop()
        assert code == 0, err
        assert "warning" not in err, err
        said = ("without CAP_SYS_ADMIN noop cannot have the kernel time BPF programs "
                "(BPF_ENABLE_STATS), and sysctl kernel.bpf_stats_enabled is 0: budgets "
                "count the traps only") in err
        timed = Path("/proc/sys/kernel/bpf_stats_enabled").read_text().strip() == "1"
        assert said != timed, err  # the run time kept without the command, or said lost
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    for dropped, named in (("bpf", "CAP_BPF"), ("perfmon", "CAP_PERFMON")):
        done = subprocess.run(_with_caps(caps - {dropped}, *cmd), cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode != 0
        assert re.fullmatch(rf"noop: not allowed to load BPF programs: missing {named} "
                            r"\(.*\)\n", done.stderr), done.stderr
