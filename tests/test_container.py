"""noop's image and its DaemonSet pod, really run with podman: the image built offline by
deploy/build-image; the pod template of deploy/kubernetes/noop.yaml run with every
setting it has (hostPID, the capabilities, the read-only root, the mounts, the
ConfigMap's spec, the resources); the example service in a container of its own, at a
path that exists only there. What noop's pod exports must equal what the example itself
exports; a restarted target is probed again; a killed noop leaves no uprobe behind."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from elftools.elf.elffile import ELFFile
from harness.manifests import documents, patched
from harness.metrics import Samples, fetch, samples
from harness.noop import UPROBE_EVENTS, no_probe_left
from harness.programs import DEBIAN_GO, EXAMPLE, go_build, need

from agent import __version__

# containers: an image built, pods run under podman; alone
pytestmark = [pytest.mark.slow, pytest.mark.serial]

REPO = Path(__file__).resolve().parent.parent
MANIFEST = REPO / "deploy" / "kubernetes" / "noop.yaml"
BUILD_IMAGE = REPO / "deploy" / "build-image"
REGISTRY_TROUBLE = 75  # deploy/fetch-retry's exit: "registry trouble: ..." after 3 tries
PREFIX = "noop-test-"  # every container these tests make; removed at the end
# This machine's podman takes its default seccomp profile from containers-common, which
# allows bpf() only with CAP_SYS_ADMIN: the DaemonSet's comment names the patch for such
# runtimes, which the pods here run with (the manifest as written: test_runtime_default_
# without_sys_admin_is_said). The profile it names is written by deploy/kubernetes/
# seccomp-profile from that default, into a directory that stands for the kubelet's.
RUNTIME = "seccomp-localhost"
RUNTIME_DEFAULT = Path("/usr/share/containers/seccomp.json")
SECCOMP_DIR = Path("/run/noop-test-seccomp")

# This machine's podman needs three settings a cluster node's runtime does not: runc
# (crun refuses this hybrid cgroup layout), cgroupfs (no systemd), and ulimits below the
# hard limit of the shell (podman's default nofile is over it). They go in a
# containers.conf of the tests' own, never the machine's.
CONTAINERS_CONF = """\
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]
log_driver = "k8s-file"
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
"""


@dataclass
class Podman:
    env: dict[str, str]
    made: list[str] = field(default_factory=list)

    def __call__(self, *args: str, check: bool = True, timeout: float = 120
                 ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(["podman", *args], env=self.env, capture_output=True,
                              text=True, timeout=timeout, check=False)
        if check and done.returncode != 0:
            pytest.fail(f"podman {' '.join(args)}: {done.stderr.strip()}", pytrace=False)
        return done

    def inspect(self, name: str, fmt: str) -> str:
        return self("inspect", "--format", fmt, name).stdout.strip()

    def pid(self, name: str) -> int:
        """The container's first process, as the host numbers it."""
        return int(self.inspect(name, "{{.State.Pid}}"))

    def ip(self, name: str) -> str:
        return self.inspect(name, "{{.NetworkSettings.IPAddress}}")

    def logs(self, name: str) -> str:
        done = self("logs", name, check=False)
        return done.stdout + done.stderr

    def remove(self) -> None:
        for name in self.made:
            self("rm", "--force", "--time", "0", name, check=False)
        self.made.clear()


@pytest.fixture(scope="module")
def podman(privileged: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Podman]:
    need(shutil.which("podman"), "podman (apt-get install podman)")
    conf = tmp_path_factory.mktemp("podman") / "containers.conf"
    conf.write_text(CONTAINERS_CONF)
    p = Podman({**os.environ, "CONTAINERS_CONF": str(conf)})
    SECCOMP_DIR.mkdir(exist_ok=True)
    done = subprocess.run([str(MANIFEST.parent / "seccomp-profile"), str(RUNTIME_DEFAULT)],
                          capture_output=True, text=True, timeout=60, check=True)
    (SECCOMP_DIR / "noop-bpf.json").write_text(done.stdout)
    left = p("ps", "--all", "--format", "{{.Names}}").stdout.split()
    for name in left:  # from a run that was killed before it could clean up
        if name.startswith(PREFIX):
            p("rm", "--force", "--time", "0", name, check=False)
    yield p
    p.remove()
    shutil.rmtree(SECCOMP_DIR, ignore_errors=True)


@pytest.fixture(autouse=True)
def _containers_go(request: pytest.FixtureRequest) -> Iterator[None]:
    """Each test's containers are gone before the next test starts."""
    yield
    if "podman" in request.fixturenames:
        request.getfixturevalue("podman").remove()


def _kind(kind: str) -> dict[str, Any]:
    return next(d for d in documents(MANIFEST) if d["kind"] == kind)


@pytest.fixture(scope="module")
def noop_image(podman: Podman) -> str:
    """deploy/build-image, as a user runs it (its base is reused when current)."""
    done = subprocess.run([str(BUILD_IMAGE)], env={**podman.env, "PYTHON": sys.executable},
                          capture_output=True, text=True, timeout=900, check=False)
    if done.returncode == REGISTRY_TROUBLE:  # counted apart by tests/harness/results.py
        pytest.fail(done.stderr.strip().splitlines()[-1], pytrace=False)
    assert done.returncode == 0, done.stderr
    assert re.search(r"localhost/noop:\S+: \d+ MB", done.stderr), done.stderr
    return done.stdout.strip()


def _target_path() -> str:
    """Where the ConfigMap's spec says the workload's binary is, inside its container."""
    spec = yaml.safe_load(_kind("ConfigMap")["data"]["probes.yaml"])
    (target,) = spec["targets"].values()
    return str(target["binary"])


@dataclass(frozen=True)
class ExampleImage:
    name: str
    binary: Path  # the same file, here, for the oracles below


@pytest.fixture(scope="module")
def example_image(podman: Podman, tmp_path_factory: pytest.TempPathFactory) -> ExampleImage:
    """examples/go-prometheus (static, Debian's Go) alone in an image, at the path the
    ConfigMap's spec names: a path that does not exist on this host."""
    inside = _target_path()
    assert not os.path.exists(inside), f"{inside} exists on the host: the test would cheat"
    out = tmp_path_factory.mktemp("example-image")
    (out / "root" / inside.lstrip("/")).parent.mkdir(parents=True)
    binary = go_build(need(DEBIAN_GO, "Debian's Go (golang-go)"), out / "root" /
                       inside.lstrip("/"), out / "gocache", EXAMPLE)
    # Owned by another user and readable by it alone (0711): what CAP_DAC_READ_SEARCH
    # is in the DaemonSet for. The container's own root runs it all the same.
    os.chown(binary, 1000, 1000)
    binary.chmod(0o711)
    subprocess.run(["tar", "-C", str(out / "root"), "--numeric-owner", "-cf",
                    str(out / "root.tar"), "."], check=True)
    name = "localhost/noop-test-example:latest"
    podman("import", "--quiet", "--change", f'ENTRYPOINT ["{inside}"]', str(out / "root.tar"),
           name)
    return ExampleImage(name, binary)


# ---------------------------------------------------------------------------------------
# The pod template as podman run arguments: every field is applied, or said not to apply
# to one container on one node; a field this does not know fails the test.

NOT_APPLICABLE = {
    "serviceAccountName": "no API server: the account only names the pod's identity",
    "tolerations": "scheduling onto tainted nodes: there is one node",
}


def _bytes(quantity: str) -> int:
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "K": 10**3, "M": 10**6, "G": 10**9}
    m = re.fullmatch(r"(\d+)([KMG]i?)?", str(quantity))
    assert m, quantity
    return int(m.group(1)) * units.get(m.group(2) or "", 1)


def _millicpu(quantity: str) -> int:
    q = str(quantity)
    return int(q[:-1]) if q.endswith("m") else int(float(q) * 1000)


def pod_args(template: dict[str, Any], cm: dict[str, Any], work: Path, name: str,
             drop: str | None = None) -> list[str]:
    """``podman run`` arguments for the template's one container; ``drop``: a capability
    taken out of the ones it adds."""
    spec = dict(template["spec"])
    (c,) = spec.pop("containers")
    args = ["run", "--detach", "--name", name]
    for key, value in template.get("metadata", {}).get("labels", {}).items():
        args += ["--label", f"{key}={value}"]
    if spec.pop("hostPID", False):
        args.append("--pid=host")
    if spec.pop("automountServiceAccountToken", True) is not False:
        pytest.fail("the pod mounts an API token; noop never talks to the API server")
    args += ["--stop-timeout", str(spec.pop("terminationGracePeriodSeconds", 30))]
    volumes = {v["name"]: v for v in spec.pop("volumes", [])}
    for key in NOT_APPLICABLE:
        spec.pop(key, None)
    assert not spec, f"pod fields this test does not apply: {sorted(spec)}"

    c = dict(c)
    c.pop("name")
    image = c.pop("image")
    args.append({"IfNotPresent": "--pull=missing", "Never": "--pull=never",
                 "Always": "--pull=always"}[c.pop("imagePullPolicy", "IfNotPresent")])
    for e in c.pop("env", []):
        args += ["--env", f"{e['name']}={e['value']}"]
    ports = c.pop("ports", [])
    assert all(p.get("protocol", "TCP") == "TCP" for p in ports)
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        c.pop(probe, None)  # HTTP GETs the test makes itself (see http_probes)
    res = c.pop("resources", {})
    limits, requests = res.get("limits", {}), res.get("requests", {})
    if "cpu" in limits:
        args.append(f"--cpus={_millicpu(limits['cpu']) / 1000}")
    if "memory" in limits:
        args.append(f"--memory={_bytes(limits['memory'])}")
    if "cpu" in requests:
        args.append(f"--cpu-shares={max(2, _millicpu(requests['cpu']) * 1024 // 1000)}")
    if "memory" in requests:
        args.append(f"--memory-reservation={_bytes(requests['memory'])}")
    sc = dict(c.pop("securityContext", {}))
    if sc.pop("privileged", False):
        args.append("--privileged")
    if sc.pop("allowPrivilegeEscalation", True) is False:
        args += ["--security-opt", "no-new-privileges"]
    if sc.pop("readOnlyRootFilesystem", False):
        args += ["--read-only", "--read-only-tmpfs=false"]  # no tmpfs Kubernetes lacks
    if "runAsUser" in sc:
        args += ["--user", str(sc.pop("runAsUser"))]
    sc.pop("runAsNonRoot", None)  # false: nothing to check
    caps = sc.pop("capabilities", {})
    args += [f"--cap-drop={x}" for x in caps.get("drop", [])]
    args += [f"--cap-add={x}" for x in caps.get("add", []) if x != drop]
    seccomp = dict(sc.pop("seccompProfile", {"type": "RuntimeDefault"}))
    kind = seccomp.pop("type")
    if kind == "Localhost":  # a file in the kubelet's seccomp directory (the test's own)
        args += ["--security-opt", f"seccomp={SECCOMP_DIR / seccomp.pop('localhostProfile')}"]
    else:
        assert kind == "RuntimeDefault", kind  # podman's default profile
    assert not seccomp, seccomp
    assert not sc, f"securityContext fields this test does not apply: {sorted(sc)}"
    for m in c.pop("volumeMounts", []):
        args += _mount(volumes[m["name"]], m, cm, work)
    cmd = c.pop("command", None)
    if cmd:
        args += ["--entrypoint", json.dumps(cmd)]
    rest = c.pop("args", [])
    assert not c, f"container fields this test does not apply: {sorted(c)}"
    return [*args, image, *rest]


def _mount(volume: dict[str, Any], m: dict[str, Any], cm: dict[str, Any], work: Path
           ) -> list[str]:
    ro = ",ro" if m.get("readOnly") else ""
    dest = m["mountPath"]
    if "configMap" in volume:
        assert volume["configMap"]["name"] == cm["metadata"]["name"]
        d = work / volume["name"]
        d.mkdir()
        for key, text in cm["data"].items():
            (d / key).write_text(text)
        return ["--mount", f"type=bind,source={d},destination={dest}{ro}"]
    if "emptyDir" in volume:
        e = volume["emptyDir"] or {}
        if e.get("medium") == "Memory":
            size = f",tmpfs-size={_bytes(e['sizeLimit'])}" if "sizeLimit" in e else ""
            return ["--mount", f"type=tmpfs,destination={dest}{size}"]
        d = work / volume["name"]
        d.mkdir()
        return ["--mount", f"type=bind,source={d},destination={dest}{ro}"]
    if "hostPath" in volume:
        h = volume["hostPath"]
        if h.get("type") == "Directory":
            assert os.path.isdir(h["path"]), f"hostPath {h['path']} is not on this node"
        return ["--mount", f"type=bind,source={h['path']},destination={dest}{ro}"]
    pytest.fail(f"a volume this test does not apply: {volume}")


def container_port(c: dict[str, Any], port: int | str) -> int:
    if isinstance(port, int):
        return port
    return int(next(p["containerPort"] for p in c["ports"] if p["name"] == port))


@dataclass
class NoopPod:
    podman: Podman
    name: str
    url: str  # http://IP:PORT of the pod's metrics port
    container: dict[str, Any]  # the manifest's container

    def metrics(self) -> Samples:
        status, text = fetch(self.url + "/metrics")
        assert status == 200, text
        return samples(text)

    def wait(self, what: str, ok: Any, timeout: float = 60) -> Samples:
        deadline = time.monotonic() + timeout
        got: Samples = {}
        while time.monotonic() < deadline:
            status, text = fetch(self.url + "/metrics")  # 0 until noop listens
            got = samples(text) if status == 200 else {}
            if got and ok(got):
                return got
            time.sleep(0.2)
        pytest.fail(f"noop's pod: {what} did not happen in {timeout}s; log:\n"
                    f"{self.podman.logs(self.name)}", pytrace=False)


def start_pod(podman: Podman, work: Path, name: str, drop: str | None = None,
              spec: str | None = None, variant: str | None = RUNTIME,
              env: dict[str, str] | None = None) -> NoopPod:
    """noop's pod as the manifest writes it (``drop``: but for one capability; ``spec``:
    with another probes.yaml in its ConfigMap; ``variant``: with one of the patches
    deploy/kubernetes has beside it, by default the one for this machine's runtime;
    ``env``: more environment for noop)."""
    ds, cm = _kind("DaemonSet"), _kind("ConfigMap")
    if variant is not None:
        (patch,) = documents(MANIFEST.parent / f"{variant}.patch.yaml")
        ds = patched(ds, patch)
    if env:
        ds = patched(ds, {"spec": {"template": {"spec": {"containers": [{
            "name": "noop", "env": [{"name": k, "value": v} for k, v in env.items()]}]}}}})
    if spec is not None:
        cm = {**cm, "data": {"probes.yaml": spec}}
    template = ds["spec"]["template"]
    work.mkdir(parents=True, exist_ok=True)
    podman(*pod_args(template, cm, work, PREFIX + name, drop))
    podman.made.append(PREFIX + name)
    (c,) = template["spec"]["containers"]
    port = container_port(c, c["ports"][0]["name"])
    return NoopPod(podman, PREFIX + name, f"http://{podman.ip(PREFIX + name)}:{port}", c)


def http_probes(pod: NoopPod, timeout: float = 180) -> dict[str, int]:
    """Each of the manifest's HTTP probes, made as the kubelet makes it: the status of
    the first answer (the startup probe may take its failureThreshold x periodSeconds)."""
    out = {}
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        get = pod.container[probe]["httpGet"]
        host = pod.url.rsplit(":", 1)[0]
        url = f"{host}:{container_port(pod.container, get['port'])}{get['path']}"
        deadline = time.monotonic() + timeout
        status = 0
        while time.monotonic() < deadline:
            status, _ = fetch(url)
            if status == 200:
                break
            time.sleep(0.3)
        out[probe] = status
    return out


def start_example(podman: Podman, image: ExampleImage, name: str, ticks: int,
                  *flags: str) -> str:
    """The example in its own container (own PID, mount and network namespaces), held
    before its first tick until SIGUSR1, then lingering to be scraped; its id."""
    podman("run", "--detach", "--name", PREFIX + name, *flags, image.name, "-listen",
           ":9091", "-period", "20ms", "-ticks", str(ticks), "-linger", "600s", "-hold")
    podman.made.append(PREFIX + name)
    return podman.inspect(PREFIX + name, "{{.Id}}")


def example_metrics(podman: Podman, name: str, ticks: int, run: int = 1) -> Samples:
    """The example's own /metrics once it has made its ticks (in its ``run``-th start:
    the container's log holds every run's)."""
    deadline = time.monotonic() + 60
    while len(re.findall(rf"tick {ticks}$", podman.logs(PREFIX + name), re.M)) < run:
        assert time.monotonic() < deadline, podman.logs(PREFIX + name)
        time.sleep(0.1)
    status, text = fetch(f"http://{podman.ip(PREFIX + name)}:9091/metrics")
    assert status == 200, text
    return samples(text)


def orders(s: Samples) -> dict[str, float]:
    return {dict(k)["customer"]: v for (n, k), v in s.items() if n == "shop_orders_total"}


def _target(s: Samples, metric: str) -> float:
    return s.get((metric, (("target", "shop"),)), 0)


def text_bytes(binary: Path, function: str) -> tuple[int, bytes]:
    """The function's address and machine code, from the file's symbol table."""
    with open(binary, "rb") as f:
        elf = ELFFile(f)
        symtab = elf.get_section_by_name(".symtab")
        (sym,) = symtab.get_symbol_by_name(function)
        addr, size = sym["st_value"], sym["st_size"]
        for seg in elf.iter_segments():
            if seg["p_type"] == "PT_LOAD" and seg["p_vaddr"] <= addr < seg["p_vaddr"] + \
                    seg["p_filesz"]:
                f.seek(seg["p_offset"] + addr - seg["p_vaddr"])
                return addr, f.read(size)
    raise AssertionError(f"{function} is in no loaded segment")


def breakpoints(pid: int, addr: int, code: bytes) -> list[int]:
    """Where the process's copy of the code differs from the file: each an int3 that a
    uprobe put there (the binary is not PIE: its addresses are the file's)."""
    with open(f"/proc/{pid}/mem", "rb") as mem:
        mem.seek(addr)
        live = mem.read(len(code))
    diff = [i for i, (a, b) in enumerate(zip(live, code, strict=True)) if a != b]
    assert all(live[i] == 0xCC for i in diff), (live.hex(), code.hex())
    return diff


# ---------------------------------------------------------------------------------------


def test_image_is_built_offline_without_a_compiler(podman: Podman, noop_image: str) -> None:
    """The image deploy/build-image made is the one the manifest names; it holds this
    tree's noop with its walk in C, imports Debian's BCC, has kernel headers, and no
    compiler, linker or package installer."""
    (c,) = _kind("DaemonSet")["spec"]["template"]["spec"]["containers"]
    assert noop_image == f"localhost/{c['image']}" == f"localhost/noop:{__version__}"
    script = ("/opt/noop/bin/noop --version; python3 -c 'import bcc; print(\"bcc ok\")'; "
              'ls "$BCC_KERNEL_SOURCE/include/linux/kernel.h"; '
              "/opt/noop/bin/python -c 'from agent.binary.dwarf import native; "
              "print(\"walk in C\" if native.BUILT else \"walk in Python\")'; "
              "for t in gcc cc c++ clang clang-14 ld as make pip pip3 pytest; do "
              'command -v $t && echo "found $t"; done; true')
    done = podman("run", "--rm", "--entrypoint", "sh", noop_image, "-c", script)
    assert done.stdout.splitlines()[:4] == [
        f"noop {__version__}", "bcc ok",
        "/usr/share/noop/kernel-headers/debian/include/linux/kernel.h",
        "walk in C"], done.stdout  # built here, into noop's wheel
    assert "found" not in done.stdout, done.stdout


def test_daemonset_pod_mirrors_the_example_in_another_container(
        podman: Podman, noop_image: str, example_image: ExampleImage, tmp_path: Path) -> None:
    """noop's pod, as the manifest writes it, finds the example running in a container
    of its own by the path the spec names, and exports exactly the orders the example
    counts itself; the manifest's probes answer; the restarted example is probed again;
    a SIGKILLed noop leaves no uprobe in the example's memory or in tracefs."""
    ticks = 11
    pod = start_pod(podman, tmp_path / "pod", "noop")
    assert http_probes(pod) == {"startupProbe": 200, "livenessProbe": 200,
                                "readinessProbe": 200}, podman.logs(pod.name)
    addr, code = text_bytes(example_image.binary, "main.placeOrder")

    def run_once(first: bool) -> tuple[Samples, int]:
        if first:
            start_example(podman, example_image, "shop", ticks)
        else:
            podman("start", PREFIX + "shop")
        pid = podman.pid(PREFIX + "shop")
        pod.wait("attaching to the example", lambda s: _target(s, "noop_target_up") == 1 and
                 _target(s, "noop_probes_attached") >= 1)
        assert breakpoints(pid, addr, code), "no uprobe in the example's placeOrder"
        podman("kill", "--signal", "USR1", PREFIX + "shop")
        return example_metrics(podman, "shop", ticks, 1 if first else 2), pid

    own, _ = run_once(first=True)
    want = orders(own)
    assert sum(want.values()) == ticks and len(want) == 3
    pod.wait("counting every order", lambda s: orders(s) == want)

    # The example stops and starts again (a new process of the same file): its own
    # counters start over, noop's go on from where they were.
    podman("stop", "--time", "10", PREFIX + "shop")
    pod.wait("seeing the example exit", lambda s: _target(s, "noop_target_up") == 0)
    own, pid = run_once(first=False)
    assert orders(own) == want
    pod.wait("counting the restarted example", lambda s: orders(s) == {
        c: 2 * n for c, n in want.items()})

    noop_pid = podman.pid(pod.name)
    assert f"bcc_{noop_pid}" in UPROBE_EVENTS.read_text() or breakpoints(pid, addr, code)
    podman("kill", "--signal", "KILL", pod.name)
    deadline = time.monotonic() + 20
    while breakpoints(pid, addr, code) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert breakpoints(pid, addr, code) == [], "a uprobe outlived noop's container"
    no_probe_left(noop_pid)


POD_UID = "6f1d2c3b-4a59-4e8d-9c7b-0a1b2c3d4e5f"  # as the kubelet names a pod's cgroup


def _by_container(s: Samples) -> dict[tuple[str, str], dict[str, float]]:
    """noop's orders per (container id, pod UID) of the process they came from."""
    out: dict[tuple[str, str], dict[str, float]] = {}
    for (name, key), v in s.items():
        if name == "shop_orders_total":
            d = dict(key)
            where = (d.pop("container_id", ""), d.pop("pod_uid", ""))
            out.setdefault(where, {})[d.pop("customer")] = v
            assert not d, key  # no label but those
    return out


def _two_examples(podman: Podman, image: ExampleImage, pod: NoopPod, ticks: dict[str, int],
                  want_processes: int) -> dict[str, tuple[str, Samples]]:
    """Two containers of the example's one image, "a" plain and "b" in a pod's cgroup,
    each making its own number of ticks once noop has attached; each one's id and own
    /metrics."""
    ids = {"a": start_example(podman, image, "a", ticks["a"]),
           "b": start_example(podman, image, "b", ticks["b"], "--cgroup-parent",
                              f"/kubepods/besteffort/pod{POD_UID}")}
    pod.wait(f"{want_processes} process(es) of the example found", lambda s: _target(
        s, "noop_target_processes") == want_processes and _target(
        s, "noop_probes_attached") >= 1)
    for name in ids:
        podman("kill", "--signal", "USR1", PREFIX + name)
    return {name: (ids[name], example_metrics(podman, name, ticks[name])) for name in ids}


def test_two_containers_of_one_image_have_their_own_series(
        podman: Podman, noop_image: str, example_image: ExampleImage, tmp_path: Path) -> None:
    """Both containers run one file (overlayfs shows it under a device per container,
    the kernel probes the image layer's one inode): noop attaches once, counts each
    hit once, and every series carries the container id of the process it came from,
    and the pod UID where the cgroup path holds one; each equals that container's own."""
    pod = start_pod(podman, tmp_path / "pod", "noop2")
    own = _two_examples(podman, example_image, pod, {"a": 5, "b": 7}, 2)
    want = {(own["a"][0], ""): orders(own["a"][1]), (own["b"][0], POD_UID): orders(own["b"][1])}
    assert [sum(w.values()) for w in want.values()] == [5, 7]
    got = pod.wait("each container's orders", lambda s: _by_container(s) == want)
    assert _target(got, "noop_probes_attached") == _target(
        pod.metrics(), "noop_probes_attached")  # attached once, not per container
    assert not [k for (n, k), _ in got.items() if n.startswith("noop_probe_hits")
                and ("container_id" in dict(k))]  # noop's own series are noop's


def test_a_target_limited_to_a_pod(podman: Podman, noop_image: str,
                                   example_image: ExampleImage, tmp_path: Path) -> None:
    """The ConfigMap's spec with `pod: UID` on its target: only the container in that
    pod's cgroup is counted, found and shown; the other's hits (the same uprobe fires
    for both) are left out."""
    text = _kind("ConfigMap")["data"]["probes.yaml"]
    limited = re.sub(r"(\n( +)binary: .*\n)", rf"\1\2pod: {POD_UID}\n", text, count=1)
    assert limited != text
    pod = start_pod(podman, tmp_path / "pod", "noop3", spec=limited)
    own = _two_examples(podman, example_image, pod, {"a": 5, "b": 7}, 1)
    want = {(own["b"][0], POD_UID): orders(own["b"][1])}
    pod.wait("the pod's orders alone", lambda s: _by_container(s) == want)
    time.sleep(1.5)  # a scan later: still nothing of container a
    assert _by_container(pod.metrics()) == want


# The capabilities the DaemonSet adds, and what each one's comment says fails without
# it: each dropped in turn from the pod as written.
def _exits(pod: NoopPod, podman: Podman, code: int, *needles: str) -> None:
    deadline = time.monotonic() + 60
    while podman.inspect(pod.name, "{{.State.Running}}") == "true":
        assert time.monotonic() < deadline, podman.logs(pod.name)
        time.sleep(0.2)
    log = podman.logs(pod.name)
    assert podman.inspect(pod.name, "{{.State.ExitCode}}") == str(code), log
    assert "Traceback" not in log and all(n in log for n in needles), log


def _fails_without(cap: str, pod: NoopPod, podman: Podman) -> None:
    if cap in ("BPF", "PERFMON", "SYS_ADMIN"):  # noop stops at start, in one line
        _exits(pod, podman, 1, f"not allowed to load BPF programs: missing CAP_{cap}")
    elif cap == "DAC_READ_SEARCH":  # it finds the example, cannot read its 0711 binary
        _exits(pod, podman, 2, "/app/shop: permission denied", "CAP_DAC_READ_SEARCH")
    else:  # SYS_PTRACE: the other container's process is never found
        assert http_probes(pod, 60)["readinessProbe"] == 200  # it runs, and waits
        time.sleep(3)  # a few passes over /proc with the example running
        log = podman.logs(pod.name)
        assert _target(pod.metrics(), "noop_target_processes") == 0, log
        assert "waiting for a process running" in log and f"without CAP_{cap}" in log, log


def test_each_capability_is_needed(podman: Podman, noop_image: str,
                                   example_image: ExampleImage, tmp_path: Path) -> None:
    (c,) = _kind("DaemonSet")["spec"]["template"]["spec"]["containers"]
    caps = c["securityContext"]["capabilities"]["add"]
    assert caps == ["BPF", "PERFMON", "SYS_PTRACE", "DAC_READ_SEARCH"]
    start_example(podman, example_image, "held", 1)  # runs, held before its first tick
    for cap in caps:
        pod = start_pod(podman, tmp_path / cap, f"drop-{cap.lower()}", drop=cap)
        _fails_without(cap, pod, podman)
        podman("rm", "--force", "--time", "0", pod.name)


def test_runtime_default_without_sys_admin_is_said(
        podman: Podman, noop_image: str, example_image: ExampleImage, tmp_path: Path) -> None:
    """The manifest as written, under this runtime's own default seccomp profile (which
    allows bpf() only with CAP_SYS_ADMIN): noop stops at start, in one line that says
    what refuses and names both ways out, as the DaemonSet's comment says."""
    start_example(podman, example_image, "held", 1)
    pod = start_pod(podman, tmp_path / "pod", "runtime-default", variant=None)
    _exits(pod, podman, 1, "a program for them does not load: Operation not permitted",
           "a seccomp profile", "deploy/kubernetes/seccomp-profile", "CAP_SYS_ADMIN")
    assert len([x for x in podman.logs(pod.name).splitlines() if x.strip()]) == 1


def test_sys_admin_variant_for_kernels_without_uprobe_multi(
        podman: Podman, noop_image: str, example_image: ExampleImage, tmp_path: Path) -> None:
    """The variant for kernels before 6.6, with perf-event uprobes as such a kernel
    leaves (NOOP_ATTACH=perf): it mirrors the example exactly under the runtime's own
    default profile; without its CAP_SYS_ADMIN noop stops at start and says so."""
    ticks = 7
    pod = start_pod(podman, tmp_path / "pod", "sys-admin", variant="sys-admin",
                    env={"NOOP_ATTACH": "perf"})
    start_example(podman, example_image, "shop", ticks)
    pod.wait("attaching to the example", lambda s: _target(s, "noop_probes_attached") >= 1)
    assert "uprobes go on through perf-event uprobes" in podman.logs(pod.name)
    podman("kill", "--signal", "USR1", PREFIX + "shop")
    want = orders(example_metrics(podman, "shop", ticks))
    assert sum(want.values()) == ticks
    pod.wait("counting every order", lambda s: orders(s) == want)
    podman("rm", "--force", "--time", "0", pod.name)
    pod = start_pod(podman, tmp_path / "drop", "sys-admin-drop", drop="SYS_ADMIN",
                    variant="sys-admin", env={"NOOP_ATTACH": "perf"})
    _fails_without("SYS_ADMIN", pod, podman)
