"""Targets named by path, executable name or build-id, found in every process, containers
included (through /proc/PID/root).

The container test runs the example in its own mount and PID namespaces (unshare),
from a copied root, at a path that does not exist here: noop on the host, given the
path as the container sees it or the executable's name, must find it, attach, and
report what the example's own /metrics says. Privileged where it loads BPF.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from test_run import FLOATS, Agent, _one, get, samples, settle, start
from test_trace import TICKS, _no_probe_left, _wait_for

from agent import discover, spec
from agent.binary.elf import ElfFile
from agent.errors import NoopError
from agent.spec import SpecError


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
    (by_name,) = discover.find(discover.Selector(exe=exe.name))
    assert (by_name.pid, by_name.exe) == (proc.pid, str(exe))
    assert by_name.path == f"/proc/{proc.pid}/root{exe}"  # the same file, reached via /proc
    st = exe.stat()
    assert by_name.file == (st.st_dev, st.st_ino)
    assert [p.pid for p in discover.find(discover.Selector(path=str(exe)))] == [proc.pid]
    build = ElfFile(exe).build_id
    assert proc.pid in [p.pid for p in discover.find(discover.Selector(build_id=build))]
    assert discover.find(discover.Selector(exe=exe.name), pid=os.getpid()) == []
    assert [p.pid for p in discover.find(discover.Selector(exe=exe.name), pid=proc.pid)] \
        == [proc.pid]
    # A deleted executable is still reached, through /proc/PID/exe.
    exe.unlink()
    gone = discover.process(proc.pid)
    assert gone is not None and gone.exe == str(exe) and gone.path == f"/proc/{proc.pid}/exe"
    assert discover.BuildIds().of(gone) == build
    assert [p.pid for p in discover.find(discover.Selector(exe=exe.name))] == [proc.pid]


def test_processes_of_one_file_attach_once(sleeper: tuple[Path, subprocess.Popen[bytes]]
                                           ) -> None:
    exe, proc = sleeper
    other = subprocess.Popen([str(exe), "60"])
    try:
        _until(lambda: len(discover.find(discover.Selector(exe=exe.name))) == 2, "two")
        found = discover.find(discover.Selector(exe=exe.name))
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
    from agent import resolve
    for target, said in [("{exe: no-such-program-x}", "no process runs an executable named "
                          "no-such-program-x"),
                         ("{exe: no-such-program-x, pid: 1}", "process 1 does not run an "
                          "executable named no-such-program-x"),
                         ("{binary: /no/such/dir/prog}", "no such file here, and no "
                          "process runs /no/such/dir/prog")]:
        text = f"targets: {{t: {target}}}\nprobes: [{{name: p, function: f}}]\n"
        with pytest.raises(NoopError, match=re.escape(said)):
            resolve.resolve(spec.parse(text, "<t>"))


# -- a container without Kubernetes ------------------------------------------------------

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
    proc = subprocess.Popen(["unshare", "--mount", "--pid", "--fork", "--kill-child",
                             "--mount-proc",
                             f"--root={root}", "/app/shop", "-hold", "-listen",
                             "127.0.0.1:0", "-period", "30ms", "-ticks", str(TICKS),
                             "-linger", "60s"], stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        log = _wait_for(proc.stderr, r"holding until SIGUSR1", 60)
        url = next(m.group(1) for line in log if (m := re.search(r"(http://\S+/metrics)", line)))
        inside = next(int(m.group(1)) for line in log if (m := re.search(r"pid (\d+) ", line)))
        (shop,) = discover.find(discover.Selector(exe="shop"))
        assert inside == 1 and shop.pid != 1  # PID 1 in its namespace, another here
        assert shop.exe == "/app/shop" and shop.path == f"/proc/{shop.pid}/root/app/shop"
        yield proc, shop.pid, url
        os.kill(shop.pid, signal.SIGKILL)  # unshare reaps it and exits
        proc.wait(timeout=10)
    finally:
        proc.kill()  # and with it (--kill-child) the example, if still there
        proc.wait()
        _until(lambda: not discover.find(discover.Selector(exe="shop")), "the example's end")


@pytest.mark.parametrize("named", ["{binary: /app/shop}", "{exe: shop}"])
def test_a_container_is_found_and_measured(container: tuple[subprocess.Popen[str], int, str],
                                           named: str, tmp_path: Path,
                                           agent_cleanup: list[Agent]) -> None:
    proc, pid, url = container
    text = FLOATS.format(binary="/app/shop").replace("{binary: /app/shop}", named)
    assert named in text
    spec_file = tmp_path / "floats.yaml"
    spec_file.write_text(text)
    agent = start(tmp_path, "--config", spec_file)
    agent_cleanup.append(agent)
    os.kill(pid, signal.SIGUSR1)
    assert proc.stderr is not None
    _wait_for(proc.stderr, rf"tick {TICKS}$", 60)
    own = samples(get(url))
    got = settle(agent, "mirror_observed_count", {}, TICKS)
    for name in ("fake_float_counter", "fake_int_counter"):
        assert _one(got, "mirror_added_total", metric=name) == _one(own, name + "_total") > 0
    for name in ("fake_gauge", "another_fake_gauge", "sub_fake_gauge", "dec_fake_gauge"):
        assert _one(got, "mirror_changes_sum", metric=name) == _one(own, name) != 0
    assert _one(got, "mirror_set", metric="fake_set_gauge") == _one(own, "fake_set_gauge")
    assert _one(got, "mirror_observed_sum") == _one(own, "fake_histogram_sum")
    code, err = agent.stop()
    assert code == 0, err
    _no_probe_left(agent.proc.pid)
