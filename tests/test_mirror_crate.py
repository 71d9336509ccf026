"""A Rust program's own prometheus crate metrics, mirrored from its memory by ``noop run
--binary``: every sample of the program's own page, equal, under its own names, types
and help (tests/programs/rust/mirror's ``full``: every kind in four registries, the
crate's default one, a ``OnceLock`` one with a prefix and common labels, a ``LazyLock``
one, one only ``main`` holds and gathers; label values that need escaping, bounds Rust
writes without an exponent, removed and reset children, a counter registered again);
the example service's page; what noop reads the crate's objects at equals gdb's
reading of the same DWARF; and a build without DWARF types is refused in one line.
The membership, torn-histogram and hostile-target tests of the Go mirror run for the
crate too (test_members, test_torn, test_hostile). Privileged: another process's
memory."""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from dataclasses import replace
from pathlib import Path

import pytest
from harness.metrics import get, samples
from harness.noop import run, start, stopped
from hypothesis import given, settings
from hypothesis import strategies as st
from oracles.gdb import field_offsets

from agent.presets.mirror.model import Found, Series

Key = tuple[str, tuple[tuple[str, str], ...]]


def _parsed(page: str) -> dict[Key, float]:
    return {(n, tuple(sorted(labels))): v for (n, labels), v in samples(page).items()}


def _theirs(url: str) -> dict[Key, float]:
    return _parsed(get(url))


def _mine(page: str, pid: int) -> dict[Key, float]:
    """The program's series on noop's page, its labels without noop's two."""
    out: dict[Key, float] = {}
    for (name, labels), v in samples(page).items():
        own = dict(labels)
        if name.startswith(("noop_", "process_")) or own.pop("pid", None) != str(pid):
            continue
        own.pop("target", None)
        out[(name, tuple(sorted(own.items())))] = v
    return out


def _served(url: str, times: int = 3) -> None:
    """The program scraped as Prometheus would, ``APART`` and more between: noop's probe
    where it gathers a registry sees each of them gathered again."""
    for _ in range(times):
        get(url)
        time.sleep(1.1)


def _help(page: str) -> dict[str, str]:
    return {m.group(1): m.group(2) for m in re.finditer(r"^# HELP (\S+) (.*)$", page, re.M)
            if not m.group(1).startswith(("noop_", "process_"))}


def _lint(page: str) -> None:
    promtool = shutil.which("promtool")
    assert promtool, "promtool not found: run ./setup.sh"
    lint = subprocess.run([promtool, "check", "metrics"], input=page, text=True,
                          capture_output=True, check=False)
    assert not re.search(r"error|duplicate", lint.stdout + lint.stderr, re.I), \
        lint.stdout + lint.stderr


def _full(binary: Path, tmp_path: Path, vec: int, *noop: str | Path, served: int = 3,
          ready: str | None = None) -> tuple[str, str, int, str]:
    """The program's ``full`` mode and ``noop run --binary`` on it (``noop``: more of its
    flags), the program scraped ``served`` times as Prometheus would, then both pages:
    the program's, noop's, the program's pid and noop's log."""
    proc = subprocess.Popen([str(binary), "full", "-vec", str(vec)], stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout is not None
    url = f"http://{proc.stdout.readline().split()[1]}/metrics"
    try:
        agent = start("--binary", noop[0] if noop else binary, *noop[1:],
                      cache=tmp_path / "cache", **({"ready": ready} if ready else {}))
        try:
            _served(url, served)
            theirs, page = get(url), get(agent.url + "/metrics")
        finally:
            log = stopped(agent)
    finally:
        proc.terminate()
        proc.wait()
    return theirs, page, proc.pid, log


def test_noop_run_serves_every_sample_of_the_programs_own_page(
        rust_mirror: Path, tmp_path: Path, privileged: None) -> None:
    theirs_page, page, pid, log = _full(rust_mirror, tmp_path, 300)
    assert "Traceback" not in log, log
    theirs = _parsed(theirs_page)
    mine = _mine(page, pid)
    assert mine.keys() == theirs.keys(), sorted(set(mine) ^ set(theirs))[:10]
    wrong = {k: (v, theirs[k]) for k, v in mine.items() if v != theirs[k]}
    assert not wrong, list(wrong.items())[:10]
    assert len(mine) > 300
    # each family once, with the program's own help and type
    assert _help(page) == _help(theirs_page)
    types = re.findall(r"^# TYPE (\S+) (\S+)$", page, re.M)
    assert sorted(t for t in types if not t[0].startswith(("noop_", "process_"))) == \
        sorted(re.findall(r"^# TYPE (\S+) (\S+)$", theirs_page, re.M))
    _lint(page)
    # the bounds as the program writes them, the escaped values as it escapes them
    assert 'le="1000000000000000000000"' in page and 'le="0.0000001"' in page
    for value in (r'quote\"d', r"back\\slash", r"new\nline", "ünïcødé"):
        assert f'value="{value}"' in page
    # the custom collector: said, by its type
    assert re.search(r'noop_mirror_unmirrored_collectors\{pid="\d+",target="mirror",'
                     r'type="mirror::Custom"\} 1', page), page[-2000:]


def test_memory_alone_finds_the_registries_statics_hold(
        rust_mirror: Path, tmp_path: Path, privileged: None) -> None:
    """``--mirror memory`` (no BPF at all): the default registry and the ``OnceLock``
    and ``LazyLock`` ones, found through the statics; the one only a local holds is not
    (the probe where the program gathers it is what finds it)."""
    theirs_page, page, pid, _log = _full(rust_mirror, tmp_path, 3, rust_mirror, "--mirror",
                                         "memory", served=2, ready="ready: mirroring")
    theirs, mine = _parsed(theirs_page), _mine(page, pid)
    statics = {k: v for k, v in theirs.items() if not k[0].startswith("local_")}
    assert mine == statics and len(statics) < len(theirs)
    assert {k[0].split("_")[0] for k in mine} == {"full", "app", "lazy"}


class _Reuse:
    """tests/programs/rust/mirror's ``reuse`` mode: children made and removed when told."""

    def __init__(self, binary: Path) -> None:
        self.proc = subprocess.Popen([str(binary), "reuse"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None and self.proc.stdout.readline() == "ready\n"

    def say(self, *lines: str) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        for line in lines:
            self.proc.stdin.write(line + "\n")
            self.proc.stdin.flush()
            assert self.proc.stdout.readline() == "ok\n", line

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


def test_a_child_read_where_another_was_made_since_is_not_served_as_itself(
        rust_mirror: Path, privileged: None) -> None:
    """A *Vec's children share their Desc, and the allocator gives a removed child's
    memory to the next one made: child 28 walked, removed, and 38 made where it was
    (checked: both the counter's and the histogram's objects); a read of the members
    as walked says 28 is gone, where a read that trusted the Desc alone (the same
    series without their marks) serves 38's values under 28's labels."""
    from agent.presets.rust_prometheus.mirror import CrateLibrary

    lib = CrateLibrary(str(rust_mirror))
    program = _Reuse(rust_mirror)
    try:
        mem = lib.open(program.proc.pid)

        def children() -> tuple[Found, dict[tuple[str, str], Series]]:
            found = lib.walk(mem, {})
            return found, {(f.name, dict(s.labels)["id"]): s for f in found.families.values()
                           for s in f.series if f.name.startswith("reused_")}

        program.say("make 28")
        found, was = children()
        assert sorted(was) == [("reused_seconds", "28"), ("reused_total", "28")]
        assert all(s.marks for s in was.values())
        program.say("remove 28", "make 38")
        _now, now = children()
        assert {name: s.address for (name, _i), s in was.items()} == \
            {name: s.address for (name, _i), s in now.items()}, "38 is not where 28 was"
        read = lib.reader(mem).read(found)
        assert not read.values
        assert sorted(s.address for s in read.gone) == sorted(s.address for s in was.values())
        blind = Found(families={name: replace(f, series=[replace(s, marks=())
                                                         for s in f.series])
                                for name, f in found.families.items()})
        values = lib.reader(mem).read(blind).values
        total, seconds = was[("reused_total", "28")], was[("reused_seconds", "28")]
        assert values[total.address] == 39 and values[seconds.address].sum == 39
    finally:
        program.close()


def test_a_child_made_again_where_it_was_is_served_again(
        rust_mirror: Path, tmp_path: Path, privileged: None) -> None:
    """Child 28 served, then removed, 38 made where it was and removed, and 28 made
    again at its first address (its label value's string elsewhere): the member the
    page was made of is the same, its labels are read again, and the pages after
    serve 28 with its value and never 38."""
    agent = start("--binary", rust_mirror, "--mirror", "memory", cache=tmp_path / "cache",
                  ready="ready: mirroring")
    program = _Reuse(rust_mirror)
    pid = program.proc.pid

    def page() -> dict[Key, float]:
        return {k: v for k, v in _mine(get(agent.url + "/metrics"), pid).items()
                if k[0].startswith("reused_") and k[0] != "reused_seconds_bucket"}

    try:
        program.say("make 28")
        deadline = time.monotonic() + 30
        while not page() and time.monotonic() < deadline:
            time.sleep(0.2)
        one = {("reused_total", (("id", "28"),)): 29, ("reused_seconds_sum", (("id", "28"),)):
               29, ("reused_seconds_count", (("id", "28"),)): 1}
        assert page() == one
        program.say("remove 28", "make 38", "remove 38", "make 28")
        pages = [page() for _ in range(3)]
        assert pages[-1] == one, pages
        assert all(p in ({}, one) for p in pages), pages
    finally:
        program.close()
        log = stopped(agent)
    assert "Traceback" not in log, log


def test_a_process_found_before_its_registries_exist_is_looked_at_again_soon(
        rust_mirror: Path, privileged: None) -> None:
    """A process followed as it starts is walked before its code made a registry: it is
    looked at again after a second (then 2, 4, ... up to the walk's own period, here
    an hour), and its metrics served once they exist."""
    from agent.presets.mirror.core import Mirror

    program = _Reuse(rust_mirror)
    mirror = Mirror("reuse", str(rust_mirror), walk_every=3600,
                    find=lambda: [program.proc.pid])
    try:
        assert b"reused_total" not in mirror.render()
        program.say("make 28")
        deadline = time.monotonic() + 30
        while b"reused_total" not in mirror.render() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert b'reused_total{id="28",pid="%d",target="reuse"} 29' % program.proc.pid \
            in mirror.render()
    finally:
        mirror.close()
        program.close()


def test_the_example_services_page(rust_example: Path, tmp_path: Path, privileged: None
                                   ) -> None:
    proc = subprocess.Popen([str(rust_example), "-listen", "127.0.0.1:0", "-period", "10ms",
                             "-ticks", "30", "-linger", "60s"], stderr=subprocess.PIPE,
                            text=True)
    assert proc.stderr is not None
    first = proc.stderr.readline()
    url = re.search(r"(http://\S+/metrics)", first)
    assert url, first
    agent = start("--binary", rust_example, cache=tmp_path / "cache")
    try:
        time.sleep(0.5)  # its 30 ticks done: quiet from here
        _served(url.group(1))
        theirs = _theirs(url.group(1))
        mine = _mine(get(agent.url + "/metrics"), proc.pid)
    finally:
        proc.terminate()
        proc.wait()
        stopped(agent)
    assert mine == theirs and len(mine) > 20
    # (the parser names a counter's sample with _total)
    assert mine[("fake_counter_total", ())] == 30 * 2  # two updater threads


def test_the_offsets_read_are_gdbs(rust_mirror: Path) -> None:
    """What the layout reads the crate's objects at, from the build's DWARF, is what
    gdb reads in the same DWARF."""
    from agent.binary.dwarf.reader import Dwarf
    from agent.binary.dwarf.types import TypeNamer
    from agent.binary.elf import ElfFile
    from agent.presets.rust_prometheus.layout import _Reader

    with ElfFile(rust_mirror) as elf:
        dwarf = Dwarf(elf)
        lay = _Reader(dwarf, TypeNamer(dwarf)).layout()
        dwarf.close()
    kinds = dict(lay.kinds)
    value = "prometheus::value::Value<prometheus::atomic64::AtomicU64>"
    core = "prometheus::histogram::HistogramCore"
    registry = "prometheus::registry::RegistryCore"
    desc = "prometheus::desc::Desc"
    got = field_offsets(rust_mirror, [
        f"{value}:val", f"{value}:label_pairs", f"{core}:shard_and_count",
        f"{core}:collect_lock", f"{core}:shards", f"{core}:upper_bounds",
        f"{registry}:collectors_by_id", f"{desc}:id", f"{desc}:help",
        "prometheus::histogram::Shard:count", "prometheus::histogram::Shard:sum",
        "prometheus::histogram::Shard:"], language="rust")
    counter = kinds["prometheus::counter::GenericCounter<prometheus::atomic64::AtomicU64>"]
    histogram = kinds["prometheus::histogram::Histogram"]
    assert counter.val == got[f"{value}:val"]
    assert counter.pairs == got[f"{value}:label_pairs"]
    assert histogram.hot == got[f"{core}:shard_and_count"]
    assert histogram.lock == got[f"{core}:collect_lock"]  # its futex word first
    assert histogram.shards == got[f"{core}:shards"]
    assert histogram.bounds == got[f"{core}:upper_bounds"]
    assert histogram.count == got["prometheus::histogram::Shard:count"]
    assert histogram.sum == got["prometheus::histogram::Shard:sum"]
    assert histogram.shard_size == got["prometheus::histogram::Shard:"]
    assert lay.descs.id == got[f"{desc}:id"] and lay.descs.help == got[f"{desc}:help"]
    assert lay.collectors.ctrl >= got[f"{registry}:collectors_by_id"]  # type: ignore[operator]


@pytest.fixture(scope="module")
def rust_mirror_limited(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The mirror program built with ``debug = 1`` (line tables and functions, no types
    nor variables)."""
    from conftest import _cargo_build
    from harness.programs import PROGRAMS

    return _cargo_build(tmp_path_factory, PROGRAMS / "rust" / "mirror", "prometheus-0.13.*",
                        "librust-prometheus-dev", debug="1")


@pytest.mark.parametrize("build", ["rust_mirror_limited", "rust_example_lines",
                                   "rust_example_nodebug"])
def test_a_build_without_types_is_refused_in_one_line(
        build: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """Neither the mirror nor the update probes can name a metric without the crate's
    types: one line says so, and what to build instead."""
    binary = request.getfixturevalue(build)
    got = run("run", "--binary", binary, "--listen", "127.0.0.1:0", cache=tmp_path / "cache")
    lines = got.stderr.strip().splitlines()
    assert got.returncode == 2 and len(lines) == 1, got.stderr
    assert "debug = 2" in lines[0], lines[0]
    assert "Traceback" not in got.stderr


def test_updates_in_unrolled_loops_are_each_a_site(
        rust_mirror: Path, tmp_path: Path, privileged: None) -> None:
    """``noop --binary`` on updates the compiler unrolled (a counter's inc nine times, a
    gauge set eight times, an int gauge added 1, 2, 3): every update instruction of the
    unrolled copies is a site of its own, none is said unseen, and the lines end where
    the program's own values do."""
    import json

    from harness.noop import tracing

    check = run("check", "--binary", rust_mirror, cache=tmp_path / "cache")
    assert check.returncode == 0, check.stderr
    assert "not seen" not in check.stdout + check.stderr
    # the unrolled loops' sites: 9 increments, 8 stores, 3 additions (of 1, 2, 3)
    assert check.stdout.count("mirror::hot_round") == 9 + 8 + 3, check.stdout
    rounds = 50
    proc = subprocess.Popen([str(rust_mirror), "hot", "-rounds", str(rounds)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdin is not None
    try:
        assert proc.stdout.readline().strip() == "ready"
        with tracing(tmp_path, "--binary", rust_mirror) as session:
            proc.stdin.write("go\n")
            proc.stdin.flush()
            truth = json.loads(proc.stdout.readline())
            time.sleep(1.0)
    finally:
        proc.kill()
        proc.wait()
    assert session.exit == 0, session.stderr
    lost = re.search(r"(\d+) lost", session.stderr)
    seen: dict[str, list[float]] = {}
    for x in session.lines:
        seen.setdefault(x["metric"], []).append(x["value"])
    for metric in ("hot_total", "hot_gauge", "hot_int_gauge"):
        assert seen.get(metric), (metric, session.stderr)
        if lost is not None and lost.group(1) == "0":  # every update a line
            assert len(seen[metric]) == truth["updates"][metric], metric
    # each value one the program had: the counter's rising to its own, the gauge's set
    # values, the int gauge's never past its own
    assert seen["hot_total"] == sorted(set(seen["hot_total"]))
    assert max(seen["hot_total"]) <= truth["hot_total"]
    assert all(v == int(v) and 0 <= v < 8 * rounds for v in seen["hot_gauge"])
    assert max(seen["hot_int_gauge"]) <= truth["hot_int_gauge"]
    if lost is None or lost.group(1) != "0":  # a burst past the ring buffer: said
        return
    assert seen["hot_total"][-1] == truth["hot_total"]
    assert truth["hot_gauge"] in seen["hot_gauge"]
    assert seen["hot_int_gauge"][-1] == truth["hot_int_gauge"]


def test_vtables_without_dwarf_are_named_by_their_drop(
        rust_mirror_mixed: Path, tmp_path: Path, privileged: None) -> None:
    """A build whose own crate has debug = 1 and the prometheus crate debug = 2: no
    vtable is described, nor the generic metrics the program instantiates. A vtable is
    named by its drop_in_place<T> where that singles out one type: the histograms (their
    type is the crate's own) are mirrored, every sample equal to the program's; the
    counters and gauges are listed as not mirrored, with why; nothing else is served."""
    theirs_page, page, pid, _log = _full(rust_mirror_mixed, tmp_path, 5)
    theirs, mine = _parsed(theirs_page), _mine(page, pid)
    histograms = {k: v for k, v in theirs.items()
                  if re.fullmatch(r"\w+_(bucket|sum|count)", k[0]) and
                  k[0].rsplit("_", 1)[0] in ("full_latency_seconds", "lazy_sizes",
                                             "local_seen_seconds")}
    assert mine == histograms and len(histograms) > 20
    assert re.search(r'noop_mirror_unmirrored_collectors\{pid="\d+",target="mirror",'
                     r'type="prometheus::counter::GenericCounter<prometheus::atomic64::'
                     r'AtomicU64> \(the binary\'s DWARF has no layout of it\)"\} [1-9]', page)
    assert 'type="mirror::Custom"' in page


def test_a_stripped_build_is_mirrored_through_its_debug_file(
        rust_mirror: Path, tmp_path: Path, privileged: None) -> None:
    """The build stripped, its DWARF in a separate file given with --debuginfo: the
    registries its statics hold are mirrored as from the unstripped build."""
    stripped, debug = tmp_path / "mirror", tmp_path / "mirror.debug"
    subprocess.run(["objcopy", "--only-keep-debug", str(rust_mirror), str(debug)], check=True)
    subprocess.run(["objcopy", "--strip-all", str(rust_mirror), str(stripped)], check=True)
    theirs_page, page, pid, _log = _full(stripped, tmp_path, 3, stripped, "--debuginfo",
                                         debug, "--mirror", "memory", served=0,
                                         ready="ready: mirroring")
    theirs, mine = _parsed(theirs_page), _mine(page, pid)
    assert mine == {k: v for k, v in theirs.items() if not k[0].startswith("local_")}
    assert len(mine) > 20


def test_coverage_says_what_is_mirrored_and_why_not(
        rust_mirror: Path, tmp_path: Path, privileged: None) -> None:
    """``noop check --coverage --url`` on a Rust program: the families of the registries
    its statics hold mirrored whole, those of the one only ``main`` holds not, with why
    (check loads no probe to find it)."""
    import json

    proc = subprocess.Popen([str(rust_mirror), "full", "-vec", "3"], stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout is not None
    url = f"http://{proc.stdout.readline().split()[1]}/metrics"
    try:
        done = run("check", "--binary", rust_mirror, "--pid", str(proc.pid), "--coverage",
                   "--url", url, "--json", cache=tmp_path / "cache")
    finally:
        proc.terminate()
        proc.wait()
    assert done.returncode == 0, done.stderr
    rows = {r["family"]: r for r in json.loads(done.stdout)["page"]["families"]}
    for family in ("full_requests_total", "app_label_gauge", "lazy_bytes_total",
                   "full_latency_seconds"):
        assert rows[family]["status"] == "mirrored", rows[family]
    for family in ("local_calls_total", "local_seen_seconds"):
        assert rows[family]["status"] == "not" and "gathers" in rows[family]["why"], \
            rows[family]


@settings(max_examples=400, deadline=None)
@given(st.sampled_from([0, 1, 3, 7, 15, 31, 2, 6, 1 << 40]), st.integers(0, 40),
       st.integers(0, 64), st.binary(min_size=0, max_size=1200), st.booleans())
def test_a_table_of_any_bytes_is_read_or_said_damaged(mask: int, items: int, at: int,
                                                      body: bytes, aligned: bool) -> None:
    """hashbrown's tables read from memory whatever their bytes (a table freed and its
    memory given to another object, a read mid-resize, a header read as another's): the
    buckets of a table whose header and control bytes agree, or Damaged, never another
    error, never other than ``items`` buckets of the bucket's size."""
    import struct

    from agent.live.memory import Damaged, Reads
    from agent.presets.rust_prometheus.layout import Table
    from agent.presets.rust_prometheus.memory import tables

    t = Table(ctrl=0, mask=8, items=24, k0=32, k1=40, size=24, key=0, value=8)
    ctrl = 0x2000 + 8 * at + (0 if aligned else 3)
    head = struct.pack("<QQQQQQ", ctrl, mask, 0, items, 7, 9)

    class Fake:
        """Memory of a header at 0x1000 and ``body`` at 0x2000."""

        def read_many(self, ranges: list[tuple[int, int]]) -> list[bytes | None]:
            out: list[bytes | None] = []
            for a, n in ranges:
                base, data = (0x1000, head) if 0x1000 <= a < 0x2000 else (0x2000, body)
                out.append(data[a - base:a - base + n] if a >= base and
                           a + n <= base + len(data) else None)
            return out

    got = tables([(0x1000, t)], Reads(Fake()))[0]  # type: ignore[arg-type]
    if not isinstance(got, Damaged):
        keys, buckets = got
        assert keys == (7, 9)
        assert len(buckets) == items and all(len(b) == t.size for b in buckets)


def test_a_program_whose_crate_layout_is_not_read_is_probed_instead(
        rust_handler: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--mirror auto`` on a Rust build whose memory noop cannot read the crate's
    metrics in (here: no prometheus::registry::Registry in its DWARF): said in one line,
    and every update probed instead rather than nothing served."""
    import argparse
    from types import SimpleNamespace

    from agent.commands import _mirrorable

    plan = SimpleNamespace(targets=[SimpleNamespace(language="rust", binary=str(rust_handler))])
    assert not _mirrorable(argparse.Namespace(debuginfo=None), plan)
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "Registry" in line and "every update is probed instead" in line
