"""``noop check --binary B --coverage --url URL``: each family of a running stripped
program's own page said mirrored, partly or not, with the reason, and the coverage
line; what noop says it serves is what ``noop run --binary`` serves of it; its
mistakes are one line each."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness.noop import one_line_each, run
from harness.programs import PROGRAMS, go_build, go_toolchain, members_serving


@pytest.fixture
def members(tmp_path: Path) -> Iterator[tuple[Path, subprocess.Popen[str], str]]:
    with members_serving(tmp_path / "members", "-steps", "40", "-pace", "0") as got:
        yield got


def test_each_family_of_the_programs_page_is_said_mirrored_or_why_not(
        members: tuple[Path, subprocess.Popen[str], str], tmp_path: Path,
        privileged: None) -> None:
    binary, proc, url = members
    done = run("check", "--binary", binary, "--pid", str(proc.pid), "--coverage", "--url",
               url, "--json", cache=tmp_path / "cache")
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    rows = {r["family"]: r for r in got["page"]["families"]}
    assert rows["members_total"]["status"] == "mirrored"
    assert rows["members_total"]["series"] == rows["members_total"]["mirrored"] > 0
    assert {f for f, r in rows.items() if f.startswith("process_")} and all(
        r["status"] == "mirrored" for f, r in rows.items() if f.startswith("process_"))
    assert rows["promhttp_metric_handler_requests_total"]["status"] == "mirrored"
    # the Go collector's families too, read from the runtime's memory: the whole page
    assert {f for f in rows if f.startswith("go_")} and all(
        r["status"] == "mirrored" for f, r in rows.items() if f.startswith("go_"))
    missing = {f: r["why"] for f, r in rows.items() if r["status"] != "mirrored"}
    assert not missing, missing
    page = got["page"]
    assert page["mirrored_series"] == sum(r["mirrored"] for r in rows.values())
    assert page["series"] == sum(r["series"] for r in rows.values()) == page["mirrored_series"]
    assert got["unmirrored_collectors"] == []
    text = run("check", "--binary", binary, "--pid", str(proc.pid), "--coverage", "--url",
               url, cache=tmp_path / "cache")
    assert text.returncode == 0, text.stderr
    assert re.search(rf"^{page['mirrored_series']} of {page['series']} series of ",
                     text.stdout, re.M), text.stdout
    assert re.search(r"^go_goroutines +gauge +1 +1  mirrored$", text.stdout, re.M), text.stdout


@pytest.mark.parametrize("version", ["1.19", "newest"])
def test_a_go_program_without_client_golang_is_said_its_runtime_and_process_series(
        version: str, tmp_path: Path, privileged: None) -> None:
    binary = go_build(go_toolchain(version), tmp_path / "hotloop", None,
                      PROGRAMS / "go" / "hotloop", ("-ldflags=-s -w",))
    proc = subprocess.Popen([str(binary), "-every", "1h"], stdout=subprocess.DEVNULL)
    try:
        done = run("check", "--binary", binary, "--pid", str(proc.pid), "--coverage",
                   "--json", cache=tmp_path / "cache")
    finally:
        proc.kill()
        proc.wait()
    assert done.returncode == 0, done.stderr
    served = {r["family"] for r in json.loads(done.stdout)["served"]}
    assert {"go_goroutines", "go_gc_duration_seconds", "go_memstats_heap_alloc_bytes",
            "go_info", "process_cpu_seconds_total"} <= served, served


def test_coverage_mistakes_are_one_line(members: tuple[Path, subprocess.Popen[str], str],
                                        tmp_path: Path, privileged: None) -> None:
    binary, proc, _url = members
    for args, said in (
            (("--coverage",), "reads a running Go program's metrics"),
            (("--binary", binary, "--pid", str(proc.pid), "--coverage", "--url",
              "http://127.0.0.1:1/metrics"), "cannot read http://127.0.0.1:1/metrics"),
            (("--binary", "/bin/true", "--coverage"), "")):
        done = run("check", *args, cache=tmp_path / "cache")
        assert done.returncode != 0
        (line,) = one_line_each(done.stderr)[-1:]
        assert said in line, done.stderr
