"""process_* series beside the mirror (agent/output/processes): a stripped program
registers a process collector as a test names it (tests/programs/go/procs), and
``noop run --binary`` serves exactly the names its collector serves (a Namespace's
prefix, a wrapping's prefix and labels), none where its PidFn reports another process
(listed as unmirrored), client_golang's defaults where it registered none; and a
``--config`` target's processes have client_golang's names, with the values its own
collector reports where the two agree."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest
from harness.example import SPEC
from harness.metrics import get, samples
from harness.noop import start, stopped
from harness.programs import PROGRAMS, go_build, go_toolchain

from agent.binary.elf import ElfFile
from agent.binary.gometa.program import GoProgram
from agent.live import procstat
from agent.output import goseries

DEFAULT = {name for name, _help, _kind in procstat.SERIES}


def _names(page: str, pid: int) -> dict[str, str]:
    """The process series of ``pid`` on noop's page: their labels by name."""
    return {m.group(1): m.group(2) for m in re.finditer(
        rf"^(\w*process_\w+)\{{([^}}]*pid=\"{pid}\"[^}}]*)\}} \S+$", page, re.M)}


@pytest.mark.parametrize(("how", "names", "labels", "its_own"), [
    ("namespace", {f"shop_{n}" for n in DEFAULT}, "", {f"shop_{n}" for n in DEFAULT}),
    # the program's own label called target kept; noop's beside it as noop_target
    ("wrapped", {f"edge_{n}" for n in DEFAULT}, 'target="edge",zone="a"',
     {f"edge_{n}" for n in DEFAULT}),
    ("custom", set(), "", DEFAULT),  # its parent's: not the process noop reads
    ("none", DEFAULT, "", set()),
])
def test_the_programs_process_collector_names_its_series(
        how: str, names: set[str], labels: str, its_own: set[str], tmp_path: Path,
        privileged: None) -> None:
    binary = go_build(go_toolchain("1.19"), tmp_path / "procs", None,
                      PROGRAMS / "go" / "procs", ("-ldflags=-s -w",))
    proc = subprocess.Popen([str(binary), "-how", how], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        own_url = f"http://{proc.stdout.readline().split()[1]}/metrics"
        agent = start("--binary", binary, "--mirror", "memory", cache=tmp_path / "cache",
                      ready="ready: mirroring")
        try:
            deadline = time.monotonic() + 30
            while "procs_total{" not in (page := get(agent.url + "/metrics")):
                assert time.monotonic() < deadline, page
                time.sleep(0.2)
        finally:
            log = stopped(agent)
        own = {name for name, _labels in samples(get(own_url)) if "process_" in name}
    finally:
        proc.kill()
        proc.wait()
    got = _names(page, proc.pid)
    assert set(got) == names, (sorted(got), log)
    assert own == its_own  # the names the program's own collector serves
    ours = ('noop_target="procs"', f'pid="{proc.pid}"') if "target=" in labels else \
        (f'pid="{proc.pid}"', 'target="procs"')
    want = ",".join(sorted(x for x in (*ours, *labels.split(",")) if x))
    for name, text in got.items():
        assert text == want, (name, text)  # sorted by name, as noop writes labels
        assert page.count(f"# TYPE {name} ") == 1
    custom = re.search(r'noop_mirror_unmirrored_collectors\{[^}]*type="[^"]*'
                       r'processCollector"\} (\S+)', page)
    assert (custom is not None and float(custom.group(1)) == 1) == (how == "custom")


def test_a_spec_targets_processes_have_client_golangs_process_series(
        example: Path, tmp_path: Path, privileged: None) -> None:
    spec = tmp_path / "probes.yaml"
    spec.write_text(SPEC.format(binary=example))
    agent = start("--config", spec, cache=tmp_path / "cache")
    try:
        proc = subprocess.Popen([str(example), "-listen", "127.0.0.1:0"],
                                stdout=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 30
            while not _names(page := get(agent.url + "/metrics"), proc.pid):
                assert time.monotonic() < deadline, page
                time.sleep(0.2)
            got = _names(page, proc.pid)
        finally:
            proc.kill()
            proc.wait()
        after = get(agent.url + "/metrics")
    finally:
        stopped(agent)
    assert set(got) == DEFAULT
    assert all('target="' in labels for labels in got.values())
    assert not _names(after, proc.pid)  # gone: none of its series
    # a Go target's go_* too, client_golang's default set (no mirror walks a spec's
    # target), none once it is gone
    with ElfFile(example) as elf:
        old = GoProgram(elf).version < (1, 21)  # no GOGC, no limit in runtime/metrics
    assert _go_names(page, proc.pid) == {name for name, _help in goseries.DEFAULT} - (
        {goseries.GOGC, goseries.GOMEMLIMIT} if old else set())
    assert not _go_names(after, proc.pid)


def _go_names(page: str, pid: int) -> set[str]:
    """The go_* families of ``pid`` on noop's page (a summary's _sum and _count as its
    family)."""
    return {m.group(1).removesuffix("_sum").removesuffix("_count") for m in re.finditer(
        rf'^(go_\w+)\{{[^}}]*pid="{pid}"', page, re.M)}


@pytest.mark.parametrize("version", ["1.19", "newest"])
def test_a_go_program_without_client_golang_is_served_its_process_and_go_series(
        version: str, tmp_path: Path, privileged: None) -> None:
    """``noop run --binary`` on a stripped Go program with no metrics library: not
    refused; its process and runtime series, no uprobe, and one line saying so."""
    binary = go_build(go_toolchain(version), tmp_path / "hotloop", None,
                      PROGRAMS / "go" / "hotloop", ("-ldflags=-s -w",))
    proc = subprocess.Popen([str(binary), "-every", "1h"], stdout=subprocess.DEVNULL)
    try:
        agent = start("--binary", binary, cache=tmp_path / "cache",
                      ready="ready: mirroring")
        try:
            deadline = time.monotonic() + 30
            while not _names(page := get(agent.url + "/metrics"), proc.pid):
                assert time.monotonic() < deadline, page
                time.sleep(0.2)
        finally:
            log = stopped(agent)
    finally:
        proc.kill()
        proc.wait()
    assert set(_names(page, proc.pid)) == DEFAULT
    # and the runtime's series, under client_golang's default Go collector's names (their
    # values against the program's own: tests/test_goruntime.py)
    assert _go_names(page, proc.pid) == {name for name, _help in goseries.DEFAULT} - (
        {goseries.GOGC, goseries.GOMEMLIMIT} if version == "1.19" else set())
    assert re.search(rf'^go_info\{{pid="{proc.pid}",target="hotloop",version="go1\.\d+',
                     page, re.M), page
    assert "has no client_golang metrics: serving its Go runtime's and its process's series" in log
    assert "no uprobe" in log
