"""The mirror under a hostile target (tests/programs/go/hostile): two processes of one
stripped build make and delete a CounterVec's children and register and unregister
counters and histograms in a tight loop, each object's label value or help in a page of
its own that is unmapped once the object is deleted (and mapped again, soon, for
another), collect garbage and return memory every few hundred steps, and map and unmap a
larger region all along; then one exits and the other execs /bin/sleep. ``noop run
--binary`` (default settings) is scraped all the while: every value is the one of the
object whose name and labels it is served under (an object made for id i holds i + 1),
every HELP line is its own family's, every page is one Prometheus takes, a process gone
before a scrape began has no series on it, what was left out is counted, and noop logs
no traceback."""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from harness.metrics import get, samples
from harness.noop import start, stopped
from harness.programs import PROGRAMS, go_build, go_toolchain

SAMPLE = re.compile(r'(hostile_(?:(\d+)_)?total(?:_bucket|_sum|_count)?)\{([^}]*)\} (\S+)')


def _wrong(page: str) -> list[str]:
    """The lines of ``page`` whose value or help is not its own object's."""
    out = []
    for line in page.splitlines():
        if m := re.fullmatch(r"# HELP hostile_(\d+)_total (.*)", line):
            if m.group(2) != f"Of id {m.group(1)}.":
                out.append(line)
            continue
        m = SAMPLE.fullmatch(line)
        if m is None:
            continue
        name, ident, labels, value = m.group(1), m.group(2), m.group(3), float(m.group(4))
        if ident is None:  # a child: labelled with its id; 0 between its make and Add
            got = re.search(r'id="(\d+)"', labels)
            ok = got is not None and value in (0, int(got.group(1)) + 1)
        else:
            i = int(ident)
            le = re.search(r'le="([^"]+)"', labels)
            if name.endswith("_count"):
                ok = value == 1
            elif le:  # one observation of i + 1
                ok = value == (float(le.group(1)) >= i + 1)
            else:  # a counter's value, a histogram's sum
                ok = value == i + 1
        if not ok:
            out.append(line)
    return out


VM_SAMPLE = re.compile(r'hostile_(?:(\d+)_)?(total|seconds_bucket|seconds_sum|seconds_count)'
                       r'\{([^}]*)\} (\S+)')


def _wrong_vm(page: str) -> list[str]:
    """``_wrong`` for VictoriaMetrics/metrics' lines: a counter holds its id + 1 (0
    between its making and its Add); a histogram has one observation of id + 1, in the
    bucket whose vmrange holds it."""
    out = []
    for line in page.splitlines():
        m = VM_SAMPLE.fullmatch(line)
        if m is None:
            continue
        ident, kind, labels, value = m.group(1), m.group(2), m.group(3), float(m.group(4))
        if ident is None:
            got = re.search(r'id="(\d+)"', labels)
            ok = kind == "total" and got is not None and value in (0, int(got.group(1)) + 1)
        else:
            i = int(ident)
            if kind == "total":
                ok = value in (0, i + 1)
            elif kind == "seconds_sum":
                ok = value == i + 1
            elif kind == "seconds_count":
                ok = value == 1
            else:
                rng = re.search(r'vmrange="(.+?)\.\.\.(.+?)"', labels)
                ok = rng is not None and value == 1 and \
                    float(rng.group(1)) < i + 1 <= float(rng.group(2))
        if not ok:
            out.append(line)
    return out


# Over 20 pages served while the programs live (10 s: a scrape of two programs whose maps
# change every microsecond took up to 0.5 s here): timed by the machine, so alone.
@pytest.mark.serial
@pytest.mark.parametrize("library", ["go", "rust", "vm"])
def test_a_hostile_target_never_has_another_objects_value_served(
        library: str, tmp_path: Path, privileged: None, request: pytest.FixtureRequest
) -> None:
    if library == "rust":  # the prometheus crate's: the allocator reuses what is freed
        binary = request.getfixturevalue("rust_mirror")
        command, after = [str(binary), "hostile"], "10"
    elif library == "vm":  # VictoriaMetrics/metrics: names in pages unmapped once gone
        binary = go_build(go_toolchain("newest"), tmp_path / "vmetrics", None,
                          PROGRAMS / "go" / "vmetrics", ("-ldflags=-s -w",))
        command, after = [str(binary), "-hostile"], "10s"
    else:
        binary = go_build(go_toolchain("1.19"), tmp_path / "hostile", None,
                          PROGRAMS / "go" / "hostile", ("-ldflags=-s -w",))
        command, after = [str(binary)], "10s"
    agent = start("--binary", binary, cache=tmp_path / "cache")
    procs: dict[str, subprocess.Popen[str]] = {}
    pages: list[tuple[set[int], str]] = []  # (pids gone before the scrape began, page)
    try:
        for how in ("exit", "exec"):
            procs[how] = subprocess.Popen([*command, f"-{how}-after", after],
                                          stdout=subprocess.PIPE, text=True)
        for p in procs.values():
            assert p.stdout is not None and p.stdout.readline() == "ready\n"

        def gone() -> set[int]:
            out = {procs["exit"].pid} if procs["exit"].poll() is not None else set()
            try:
                comm = Path(f"/proc/{procs['exec'].pid}/comm").read_text().strip()
            except OSError:
                comm = ""
            return out | ({procs["exec"].pid} if comm not in ("hostile", "mirror", "vmetrics")
                          else set())

        deadline = time.monotonic() + 12
        while time.monotonic() < deadline:
            before = gone()
            pages.append((before, get(agent.url + "/metrics")))
    finally:
        for p in procs.values():
            p.kill()
            p.wait()
        log = stopped(agent)
    assert "Traceback" not in log and "internal error" not in log, log
    both = {p.pid for p in procs.values()}
    alive = [page for g, page in pages if not g]
    assert len(alive) > 20
    # each process's children, on the pages where two reads of its map agreed (how
    # many depends on how busy the machine is: a map changed every microsecond by a
    # process running beside noop's reads, which no two reads agree on, is left out
    # and counted); one process's at least
    served = {p for p in both if any(re.search(rf'^hostile_total{{id="\d+",pid="{p}"',
                                               page, re.M) for page in alive)}
    assert served, "no process's children on any page"
    for p in both - served:
        assert any(re.search(rf'^noop_mirror_unread_vecs_total{{[^}}]*pid="{p}"[^}}]*}} [1-9]',
                             page, re.M) for page in alive), p
    judge = _wrong_vm if library == "vm" else _wrong
    wrong = [(i, line) for i, (_g, page) in enumerate(pages) for line in judge(page)]
    assert not wrong, f"{len(wrong)} lines not their own object's: {wrong[:5]}"
    after = [(g, page) for g, page in pages if g == both]
    assert after, "the processes did not go"
    left = [line for g, page in pages for line in page.splitlines()
            if line.startswith("hostile") and any(f'pid="{p}"' in line for p in g)]
    assert not left, left[:5]
    promtool = shutil.which("promtool")
    assert promtool, "promtool not found: run ./setup.sh"
    for _g, page in pages[::max(1, len(pages) // 20)]:
        lint = subprocess.run([promtool, "check", "metrics"], input=page, text=True,
                              capture_output=True, check=False)
        assert not re.search(r"error|duplicate", lint.stdout + lint.stderr, re.I), \
            lint.stdout + lint.stderr
    # what a scrape could not read whole is counted: read again (a member went before
    # its value was read), members changing at every read, objects gone or torn (counted
    # per process: the largest total any page says, as a process's counters go with it
    # once it exits, which the last page before may already see)
    skipped = max(sum(v for (name, _labels), v in samples(page).items()
                      if name in ("noop_mirror_torn_reads_total",
                                  "noop_mirror_gone_objects_total",
                                  "noop_mirror_unsettled_reads_total",
                                  "noop_mirror_unread_vecs_total",
                                  "noop_mirror_reread_scrapes_total")) for page in alive)
    assert skipped > 0, [x for x in alive[-1].splitlines() if x.startswith("noop_mirror")]
    print(f"{len(pages)} scrapes, {skipped:g} reads made again or left out")
