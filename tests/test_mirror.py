"""A Go program's own client_golang metrics, mirrored from its memory (``noop run
--binary``'s mirror): the registries its globals hold walked through its own type
descriptors, every collector's series found under the name and labels the program
serves it with, and every value equal to what the program itself serves: counters,
gauges, histograms' buckets, counts and sums, both kinds of summaries' counts and sums,
*Vec children by the hundred (maps grown over many buckets or tables), a wrapped
registerer's prefix and labels. For Go 1.19's bucketed maps and the newest Go's Swiss
tables, with symbols and stripped, and position-independent (a load bias).

noop is read first and the program second: the program's own scrape flushes its
summaries' buffers. Privileged: reading another process's memory needs ptrace access.
"""

from __future__ import annotations

import ctypes
import math
import os
import re
import struct
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from harness.metrics import Samples, get, samples
from harness.noop import start, stopped
from harness.programs import PROGRAMS, go_build, go_toolchain
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.binary.elf import ElfFile
from agent.binary.gometa.program import GoProgram
from agent.config.decoders import go_float
from agent.live.gomemory import open_process
from agent.live.memory import Memory, Unreadable
from agent.presets.client_golang import readings, registry
from agent.presets.mirror.model import Histogram, Summary

SOURCE = PROGRAMS / "go" / "mirror"
ROUNDS = 23
CHILDREN = 300  # children of each *Vec: maps of many buckets (Go 1.19), many groups (1.24+)
# Collectors the program registers that noop does not mirror (their values are not in
# a metric object's memory): the GaugeFunc, and client_golang's own Go and process ones.
UNMIRRORED = {"valueFunc"}  # the process and Go collectors: from /proc and the runtime
VARIANTS = [("1.19", ()), ("1.19", ("-ldflags=-s -w",)), ("newest", ()),
            ("newest", ("-ldflags=-s -w",)), ("newest", ("-buildmode=pie", "-ldflags=-s -w"))]


def _id(v: tuple[str, tuple[str, ...]]) -> str:
    return f"go{v[0]}" + "".join("-stripped" if "-s" in f else "-pie" if "pie" in f else ""
                                 for f in v[1])


@pytest.fixture(scope="module", params=VARIANTS, ids=_id)
def program(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    version, flags = request.param
    return go_build(go_toolchain(version), tmp_path_factory.mktemp("mirror") / "mirror",
                    None, SOURCE, flags)


def _started(binary: Path, children: int = CHILDREN, rounds: int = ROUNDS,
             *more: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([str(binary), "-rounds", str(rounds), "-vec", str(children),
                             *more], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("listening "), line
    return proc, line.split()[1]


def _exposed(found: registry.Found, read: readings.Read) -> dict[tuple[str, tuple[tuple[str, str],
                                                                                ...]], float]:
    """What noop read, keyed as the program's exposition parses (name, sorted labels)."""
    out = {}
    for f in found.families.values():
        for s in f.series:
            v = read.values.get(s.address)
            labels = tuple(sorted(s.labels))
            if isinstance(v, Histogram):
                for le, c in v.buckets:
                    key = tuple(sorted((*s.labels, ("le", go_float(le)))))
                    out[(f.name + "_bucket", key)] = float(c)
            if isinstance(v, Summary):
                for q, x in v.quantiles:
                    out[(f.name, tuple(sorted((*s.labels, ("quantile", go_float(q))))))] = x
            if isinstance(v, Histogram | Summary):
                out[(f.name + "_count", labels)] = float(v.count)
                out[(f.name + "_sum", labels)] = v.sum
            elif v is not None:
                out[(f.name, labels)] = v
    return out


def _parses(page: str) -> None:
    """The page is one exposition Prometheus takes: promtool's parser finds no error
    (a second HELP or TYPE line of a family, a sample line it cannot read)."""
    import shutil
    promtool = shutil.which("promtool")
    assert promtool, "promtool not found: run ./setup.sh"
    lint = subprocess.run([promtool, "check", "metrics"], input=page, text=True,
                          capture_output=True)
    assert "error while linting" not in lint.stdout + lint.stderr, lint


def _theirs(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The program's own series, with the sample names as written (counters keep
    ``_total``), noop-unmirrored families left out."""
    got = samples(get(f"http://{url}/metrics"))
    return {k: v for k, v in got.items()
            if not k[0].startswith(("go_", "process_", "mirror_goroutines"))}


def test_every_value_equals_the_programs_own(program: Path, privileged: None) -> None:
    proc, url = _started(program)
    try:
        with ElfFile(program) as elf:
            gm = open_process(proc.pid, str(program), GoProgram(elf).types,
                              tuple((s.vaddr, s.offset) for s in elf.segments),
                              elf.e_type == 3)
            found = registry.walk(gm, elf)
            read = readings.Reader(gm).read(found)
        mine = _exposed(found, read)  # before the program's own scrape: it flushes
        theirs = _theirs(url)
    finally:
        proc.terminate()
        proc.wait()
    assert not found.damaged and not read.torn and not read.gone
    assert len(found.registries) == 1  # the default one, behind DefaultRegisterer
    assert {n.rsplit(".", 1)[-1] for n in found.unmirrored} == UNMIRRORED
    # The program's scrape itself is in flight while it is served: its gauge says 1.
    theirs.pop(("promhttp_metric_handler_requests_in_flight", ()))
    mine.pop(("promhttp_metric_handler_requests_in_flight", ()))
    assert mine.keys() == theirs.keys(), (sorted(set(mine) ^ set(theirs))[:10])
    wrong = {k: (v, theirs[k]) for k, v in mine.items() if v != theirs[k]}
    assert not wrong, list(wrong.items())[:10]
    # the wrapped registerer's prefix and labels, and a *Vec's hundreds of children
    assert mine[("inner_wrapped_total", (("zone", "a"),))] == ROUNDS
    assert sum(1 for k in mine if k[0] == "mirror_temperature") == CHILDREN


def test_a_process_that_exits_reads_as_gone(program: Path, privileged: None) -> None:
    proc, _url = _started(program, 3)
    with ElfFile(program) as elf:
        gm = open_process(proc.pid, str(program), GoProgram(elf).types,
                          tuple((s.vaddr, s.offset) for s in elf.segments), elf.e_type == 3)
        found = registry.walk(gm, elf)
    proc.kill()
    proc.wait()
    with pytest.raises(Unreadable, match="exited"):
        readings.Reader(gm).read(found)


def test_memory_is_read_in_whole_ranges_or_not_at_all() -> None:
    data = ctypes.create_string_buffer(b"0123456789abcdef" * 4)
    at = ctypes.addressof(data)
    mem = Memory(os.getpid())
    # an unmapped page, a damaged length, a range past the end of what is mapped
    got = mem.read_many([(at, 4), (4096, 8), (at + 4, 4), (at, 1 << 40), (at + 60, 4),
                         (0, 8), (at, 0)])
    assert got == [b"0123", None, b"4567", None, b"cdef", None, None]
    assert mem.read_many([(at + 16 * i, 16) for i in range(4)] * 600)[-1] == \
        b"0123456789abcdef"  # more ranges than one system call takes
    with pytest.raises(Unreadable, match="exited"):
        Memory(2**22 + 12345).read(at, 1)


@pytest.fixture(scope="module")
def guarded_page() -> Iterator[tuple[int, bytes]]:
    """A page of known bytes followed by a page that cannot be read: its address and
    bytes."""
    import mmap

    pages = mmap.mmap(-1, 2 * mmap.PAGESIZE)
    content = bytes(range(256)) * (mmap.PAGESIZE // 256)
    pages[:mmap.PAGESIZE] = content
    holder = ctypes.c_char.from_buffer(pages)
    at = ctypes.addressof(holder)
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.mprotect(ctypes.c_void_p(at + mmap.PAGESIZE), mmap.PAGESIZE, 0) == 0  # none
    yield at, content
    del holder
    pages.close()


KINDS = ("in", "straddle", "unmapped", "zero", "huge", "empty")


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(st.lists(st.tuples(st.sampled_from(KINDS), st.integers(0, 4095), st.integers(1, 300)),
                max_size=80))
def test_each_range_is_its_bytes_or_none(guarded_page: tuple[int, bytes],
                                         asked: list[tuple[str, int, int]]) -> None:
    """Any mix of ranges, read in batches: each one readable whole is exactly its bytes,
    each other one (crossing into a page that cannot be read, unmapped, at address 0,
    of a damaged or empty length) None, whatever comes before or after it."""
    at, content = guarded_page
    page = len(content)
    ranges, want = [], []
    for kind, off, size in asked:
        size = min(size, page - off) if kind == "in" else size
        # straddle: its last bytes past the readable page (or all of it, one byte long)
        start = {"in": at + off, "straddle": at + page - (1 + off % (size - 1)) if size > 1
                 else at + page, "unmapped": 4096, "zero": 0, "huge": at,
                 "empty": at + off}[kind]
        length = {"huge": 1 << 40, "empty": 0}.get(kind, size)
        ranges.append((start, length))
        want.append(content[off:off + size] if kind == "in" else None)
    mem = Memory(os.getpid())
    assert mem.read_many(ranges) == want
    assert mem.read_many(ranges) == want  # again: a long list through what was prepared


def test_a_list_read_again_sees_memory_as_it_is_now() -> None:
    """A list of ranges read again (through the iovecs prepared for it) gives the bytes
    as they are now, and None for a range whose page cannot be read any more."""
    import mmap

    pages = mmap.mmap(-1, 2 * mmap.PAGESIZE)
    pages[:] = b"a" * (2 * mmap.PAGESIZE)
    holder = ctypes.c_char.from_buffer(pages)
    at = ctypes.addressof(holder)
    ranges = [(at + 16 * i, 16) for i in range(2 * mmap.PAGESIZE // 16)]
    mem = Memory(os.getpid())
    assert mem.read_many(ranges) == [b"a" * 16] * len(ranges)
    pages[:16] = b"b" * 16
    assert mem.read_many(ranges)[:2] == [b"b" * 16, b"a" * 16]
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.mprotect(ctypes.c_void_p(at + mmap.PAGESIZE), mmap.PAGESIZE, 0) == 0
    try:
        got = mem.read_many(ranges)
    finally:
        libc.mprotect(ctypes.c_void_p(at + mmap.PAGESIZE), mmap.PAGESIZE, 3)
        del holder
        pages.close()
    half = mmap.PAGESIZE // 16
    assert got == [b"b" * 16] + [b"a" * 16] * (half - 1) + [None] * half


@pytest.fixture(scope="module")
def go_formatter(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return go_build(go_toolchain("1.19"), tmp_path_factory.mktemp("fmt") / "mirror", None,
                    SOURCE)


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(st.lists(st.floats(allow_nan=False) | st.sampled_from(
    [1e6, 999999.0, 1e21, 1e-4, 1e-5, 123456.5, 0.1, 2.5, 5e-324, -0.0, math.inf]),
    min_size=1, max_size=40))
def test_numbers_are_written_as_go_writes_them(go_formatter: Path, xs: list[float]) -> None:
    """Bucket bounds (``le``) and values as the program's own exposition writes them."""
    bits = "".join(f"{struct.unpack('<Q', struct.pack('<d', x))[0]:x}\n" for x in xs)
    go = subprocess.run([str(go_formatter), "-format"], input=bits, capture_output=True,
                        text=True, check=True).stdout.split()
    assert [go_float(x) for x in xs] == go


def _once_mirrored(agent: str, tries: int = 100) -> str:
    """noop's /metrics once it has the program's families (or after ``tries`` scrapes)."""
    text = ""
    for _ in range(tries):
        text = get(agent + "/metrics")
        if "mirror_calls_total{" in text:
            break
    return text


def _by_own(got: Samples, binary: Path, pid: int) -> Samples:
    """The samples noop serves of process ``pid``'s own metrics, keyed as the program's
    exposition parses (its labels alone, without noop's target and pid)."""
    ours = {("target", binary.name), ("pid", str(pid))}
    return {(k[0], tuple(sorted(set(k[1]) - ours))): v for k, v in got.items()
            if ours <= set(k[1])}


def _mirrored(text: str) -> Iterator[str]:
    for line in text.splitlines():
        if line.startswith(("mirror_", "inner_", "promhttp_")):
            yield line


@pytest.mark.parametrize("variant", [VARIANTS[1]], ids=_id)
def test_noop_run_serves_the_programs_metrics_under_their_own_names(
        variant: tuple[str, tuple[str, ...]], tmp_path: Path, privileged: None) -> None:
    """``noop run --binary`` on a stripped build: the program's families under their own
    names and types with noop's target and pid labels, equal to the program's own
    values; with ``--mirror off``, none of them."""
    binary = go_build(go_toolchain(variant[0]), tmp_path / "mirror", None, SOURCE, variant[1])
    proc, url = _started(binary, 5)
    try:
        agent = start("--binary", binary, "--mirror", "memory", cache=tmp_path / "cache",
                      ready="ready: mirroring")
        try:
            text = _once_mirrored(agent.url)  # the first walk runs beside the first scrapes
            mine = samples(text)
            theirs = _theirs(url)
            raw = get(f"http://{url}/metrics")
        finally:
            stopped(agent)
        # label values and help written as the program writes them, byte for byte
        ids = f'pid="{proc.pid}",target="{binary.name}",'
        odd = [line.replace(ids, "") for line in text.splitlines() if "mirror_odd_labels" in line]
        assert sorted(odd) == sorted(line for line in raw.splitlines()
                                     if "mirror_odd_labels" in line)
        assert len(odd) == 9, odd  # HELP, TYPE and seven values
        off = start("--binary", binary, "--mirror", "off", cache=tmp_path / "cache")
        try:
            assert not list(_mirrored(get(off.url + "/metrics")))
        finally:
            stopped(off)
    finally:
        proc.terminate()
        proc.wait()
    by_own = _by_own(mine, binary, proc.pid)
    theirs.pop(("promhttp_metric_handler_requests_in_flight", ()))
    assert {k: by_own.get(k) for k in theirs} == theirs
    # the Go collector's series, read from the runtime (values: tests/test_goruntime.py),
    # with the help the program's own Descs give them
    go = re.compile(r"^# HELP (go_\w+) (.*)$", re.M)
    assert go.findall(text) and sorted(go.findall(text)) == sorted(go.findall(raw))
    # no probe at all: every value comes from memory
    assert not [k for k in mine if k[0] == "noop_events_total"]
    assert mine[("noop_page_dropped_samples_total", (("reason", "duplicate"),))] == 0
    _parses(text)
    # every family whole: a summary's quantiles too
    assert by_own[("mirror_size_bytes", (("quantile", "0.9"),))] == \
        theirs[("mirror_size_bytes", (("quantile", "0.9"),))]
    assert "# TYPE mirror_latency_seconds histogram" in text
    assert "# TYPE mirror_calls_total counter" in text
    assert mine[("noop_mirror_unmirrored_collectors", tuple(sorted(
        {("target", binary.name), ("pid", str(proc.pid)),
         ("type", "*github.com/prometheus/client_golang/prometheus.valueFunc")})))] == 1




def _rounds_under(binary: Path, tmp_path: Path, rounds: int, children: int, *flags: str,
                  until: Callable[[Samples], bool] = lambda _got: True
                  ) -> tuple[Samples, dict[tuple[str, tuple[tuple[str, str], ...]], float], int]:
    """``rounds`` rounds of the program's updates made under ``noop run --binary
    *flags``: noop's page once ``until`` holds of it (or after 30 s), the program's own
    page after it, and the program's pid."""
    import signal
    import time

    from harness.noop import drained

    proc, url = _started(binary, children, 0)
    assert proc.stdout is not None
    try:
        agent = start("--binary", binary, *flags, cache=tmp_path / "cache")
        try:
            for _ in range(rounds):  # each round once noop is on: every update seen
                proc.send_signal(signal.SIGUSR1)
                assert proc.stdout.readline().strip() == "round"
            got: Samples = {}
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                text = get(agent.url + "/metrics")
                got = samples(text)
                if "mirror_calls_total{" in text and drained(got) and until(got):
                    break
                time.sleep(0.1)
            theirs = _theirs(url)
        finally:
            stopped(agent)
    finally:
        proc.terminate()
        proc.wait()
    return got, theirs, proc.pid


def _updates(got: Samples, families: set[str]) -> dict[tuple[str, str], float]:
    """noop's updates of the program's series of ``families``: (family, labels) -> n."""
    out: dict[tuple[str, str], float] = {}
    for (name, labels), v in got.items():
        d = dict(labels)
        if name == "noop_metric_updates_total" and d["metric"] in families:
            out[(d["metric"], d["labels"])] = out.get((d["metric"], d["labels"]), 0) + v
    return out


@pytest.mark.parametrize("variant", [VARIANTS[1], VARIANTS[3]], ids=_id)
def test_by_default_no_probe_is_on_an_update_path(
        variant: tuple[str, tuple[str, ...]], tmp_path: Path, privileged: None) -> None:
    """``noop run --binary`` by default (``--mirror auto``): every value from memory,
    equal to the program's own, and one probe alone, where the program gathers a
    registry: no update of any kind (gauges' included) costs the program a trap."""
    binary = go_build(go_toolchain(variant[0]), tmp_path / "mirror", None, SOURCE, variant[1])
    rounds = 7
    got, theirs, pid = _rounds_under(binary, tmp_path, rounds, 5)
    by_own = _by_own(got, binary, pid)
    theirs.pop(("promhttp_metric_handler_requests_in_flight", ()))
    assert theirs[("mirror_calls_total", ())] == rounds
    assert theirs[("mirror_level", ())] > 0  # gauges were set
    assert {k: by_own.get(k) for k in theirs} == theirs
    loaded = {dict(k[1])["probe"] for k in got if k[0] == "noop_probe_enabled"}
    assert loaded == {"registry_gathered"}, loaded
    assert not [k for k in got if k[0] == "noop_metric_updates_total"]


@pytest.mark.parametrize("variant", [VARIANTS[1], VARIANTS[3]], ids=_id)
def test_mirror_both_counts_every_gauge_update_beside_the_values_from_memory(
        variant: tuple[str, tuple[str, ...]], tmp_path: Path, privileged: None) -> None:
    """``--mirror both``: the values from memory as by default, and every update probed,
    gauges' too: each gauge series counted as many updates as the program made."""
    binary = go_build(go_toolchain(variant[0]), tmp_path / "mirror", None, SOURCE, variant[1])
    rounds, children = 7, 5
    families = {"mirror_level", "mirror_info", "mirror_temperature"}
    want = {("mirror_level", ""): rounds, ("mirror_info", "version=1.2.3"): rounds,
            **{("mirror_temperature", f"room=room{c}"): rounds for c in range(children)}}
    got, theirs, pid = _rounds_under(binary, tmp_path, rounds, children, "--mirror", "both",
                                     until=lambda got: _updates(got, families) == want)
    by_own = _by_own(got, binary, pid)
    theirs.pop(("promhttp_metric_handler_requests_in_flight", ()))
    assert {k: by_own.get(k) for k in theirs} == theirs
    hit = {dict(k[1])["probe"] for k, v in got.items() if k[0] == "noop_probe_hits_total" and v}
    assert "gauge_set" in hit, hit
    assert _updates(got, families) == want
    # each series named as the program serves it: a wrapped registerer's prefix and
    # labels, which the object's own Desc does not hold, applied
    named = {(d["metric"], d["labels"]) for k in got if k[0] == "noop_metric_updates_total"
             for d in [dict(k[1])]}
    assert ("inner_wrapped_total", "zone=a") in named, sorted(named)
    assert not [n for n in named if n[0].startswith("wrapped_")], sorted(named)


@pytest.mark.parametrize("variant", [VARIANTS[1], VARIANTS[3]], ids=_id)
def test_a_registry_only_a_local_variable_holds_is_found_once_the_program_serves_it(
        variant: tuple[str, tuple[str, ...]], tmp_path: Path, privileged: None) -> None:
    """A registry no global holds (``prometheus.NewRegistry()`` in main, served by
    ``promhttp.HandlerFor``, as the bundled example does) is found by the probe on
    ``(*Registry).Gather`` once the program has been scraped twice, a second apart:
    then every value noop serves of it equals the program's own. A registry made for one
    request, gathered twice at once and dropped (the program's /probe, as the blackbox
    exporter makes one per probe), is never mirrored."""
    import time

    from agent.presets.mirror.core import APART

    binary = go_build(go_toolchain(variant[0]), tmp_path / "mirror", None, SOURCE, variant[1])
    proc, url = _started(binary, 5, ROUNDS, "-local")
    try:
        agent = start("--binary", binary, cache=tmp_path / "cache")
        try:
            before = get(agent.url + "/metrics")
            for _ in range(2):  # two scrapes of the program, as a scraper spaces them
                get(f"http://{url}/probe")
                get(f"http://{url}/metrics")
                time.sleep(APART)
            text = _once_mirrored(agent.url)  # walked at noop's next scrape, or by its thread
            mine = samples(text)
            theirs = _theirs(url)
        finally:
            stopped(agent)
    finally:
        proc.terminate()
        proc.wait()
    assert "mirror_calls_total{" not in before  # no global holds it: not found before
    # the registries /probe made, each gathered twice within one request: not mirrored
    assert not [line for line in text.splitlines() if line.startswith("probe_made_total")
                or line.startswith("# TYPE probe_made_total")]
    by_own = _by_own(mine, binary, proc.pid)
    assert theirs and {k: by_own.get(k) for k in theirs} == theirs


@pytest.mark.parametrize("mode", ["memory", "auto"])
def test_memory_alone_needs_no_bpf_capability(mode: str, privileged: None, tmp_path: Path
                                              ) -> None:
    """``--mirror memory`` loads no BPF: with CAP_BPF, CAP_PERFMON and CAP_SYS_ADMIN
    dropped (CAP_SYS_PTRACE kept) it serves the program's metrics all the same; so does
    the default (``auto``), without its probe on ``Gather``, saying so once."""
    import re
    import shlex
    import shutil
    import signal

    from harness.noop import REPO, command, wait_for

    binary = go_build(go_toolchain("1.19"), tmp_path / "mirror", None, SOURCE,
                      VARIANTS[1][1])
    proc, _url = _started(binary, 2)
    capsh = shutil.which("capsh")
    assert capsh, "capsh not found: run ./setup.sh"
    run = command("run", "--binary", binary, "--mirror", mode, "--listen", "127.0.0.1:0")
    noop = subprocess.Popen([capsh, "--drop=cap_bpf,cap_perfmon,cap_sys_admin", "--", "-c",
                             "exec " + shlex.join(run)], cwd=REPO, text=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        assert noop.stderr is not None
        log = wait_for(noop.stderr, "ready: mirroring", 120)
        said = [line for line in log if "as --mirror memory" in line]
        assert len(said) == (mode == "auto"), log
        addr = next(m.group(1) for line in log if (m := re.search(r"//(\S+)/metrics", line)))
        text = get(f"http://{addr}/metrics")
        assert f'mirror_calls_total{{pid="{proc.pid}",target="{binary.name}"}} {ROUNDS}' \
            in text, text
    finally:
        noop.send_signal(signal.SIGTERM)
        noop.communicate(timeout=30)
        proc.terminate()
        proc.wait()
    assert noop.returncode == 0


def test_metrics_dropped_and_memory_reused_are_never_read_as_the_old_ones(
        program: Path, privileged: None) -> None:
    """The program unregisters a summary, deletes one *Vec child and resets another
    *Vec (then gives it a new child), collects its garbage and makes objects of the same
    sizes: read with the walk from before, none of the dropped objects reads as what it
    was, and the next scrape, which reads the members again, equals the program."""
    import signal

    from agent.presets.mirror.core import Mirror

    proc, url = _started(program, 3)
    assert proc.stdout is not None
    try:
        mirror = Mirror("mirror", str(program), walk_every=3600, find=lambda: [proc.pid])
        try:
            mirror.render()  # walked
            (p,) = mirror._processes.values()
            assert p.reader is not None
            old = p.found
            first = p.reader.read(old)
            proc.send_signal(signal.SIGUSR2)
            assert proc.stdout.readline().startswith("dropped")
            stale = p.reader.read(old)
            after = {(k[0], tuple(x for x in k[1] if x[0] not in ("target", "pid"))): v
                     for k, v in samples(mirror.render().decode()).items()}
            current = mirror._current(p)  # the members now, as that scrape read them
        finally:
            mirror.close()
        theirs = _theirs(url)
    finally:
        proc.terminate()
        proc.wait()
    # Read with the walk from before the drop: an object still registered, or dropped
    # but not yet freed, reads as itself (its value then, as nothing was updated); one
    # freed and reused reads as gone; none reads as another object's value.
    kept = {s.address for f in current.families.values() for s in f.series}
    assert first.values and not first.gone
    for address, value in stale.values.items():
        assert address in kept or value == first.values[address], hex(address)
    dropped = {s.address for f in old.families.values() for s in f.series} - kept
    assert dropped  # the summary, the deleted child, the reset *Vec's children
    theirs.pop(("promhttp_metric_handler_requests_in_flight", ()))
    after.pop(("promhttp_metric_handler_requests_in_flight", ()), None)
    assert after == theirs
    assert ("mirror_requests_total", (("code", "201"), ("method", "NEW"),
                                      ("service", "mirror"))) in after
    assert not any(k[0].startswith("mirror_wait_seconds") for k in after)


def test_the_default_keeps_only_the_probe_that_finds_registries() -> None:
    """``--mirror auto``'s plan: of the client_golang preset's probes, ``Gather``'s
    alone (none on an update path, nor on the makers); of the prometheus crate's, its
    ``gather``'s alone; a spec's plan as it is."""
    from dataclasses import replace

    from agent.plan.model import Plan, ProbePlan
    from agent.presets.plans import finders_only
    from agent.presets.rust_prometheus.facts import SOURCE as CRATE

    def probe(name: str, *unseen: str) -> ProbePlan:
        return ProbePlan(name, "main", (), (), unseen=unseen)

    probes = (probe("counter_int", "the xadd on counter.valInt at 0x10: not counted"),
              probe("counter_add"), probe("counter_float"), probe("gauge_add"),
              probe("gauge_set"), probe("histogram"), probe("summary_atomic"),
              probe("summary_buffered"), probe("metric_made"), probe("registry_gathered"))
    plan = Plan("client_golang preset", (), probes)
    assert [p.name for p in finders_only(plan).probes] == ["registry_gathered"]
    crate = replace(plan, source=CRATE, probes=(
        probe("counter.inc", "an unrolled copy: not seen"), probe("gauge.set"),
        probe("histogram.observe"), probe("metric_dropped"), probe("registry_gathered")))
    assert [p.name for p in finders_only(crate).probes] == ["registry_gathered"]
    spec = replace(plan, source="probes.yaml")
    assert finders_only(spec) == spec


@pytest.mark.serial  # prices hits and holds a budget: alone on the machine
def test_a_gauge_probe_over_its_budget_comes_off_and_its_value_still_comes_from_memory(
        tmp_path: Path, privileged: None) -> None:
    """Under ``--mirror both``, the gauges' probe keeps to its budget like any probe:
    hundreds of Gauge.Set a round over a tiny budget take it off, and from then on every
    value noop serves, the gauges' too, still equals the program's own."""
    import signal
    import threading

    from harness.noop import wait_for

    binary = go_build(go_toolchain("1.19"), tmp_path / "mirror", None, SOURCE,
                      VARIANTS[1][1])
    proc, url = _started(binary, CHILDREN, 0)
    assert proc.stdout is not None
    stop = threading.Event()

    def rounds() -> None:  # each round sets CHILDREN + 2 gauges
        assert proc.stdout is not None
        while not stop.is_set():
            proc.send_signal(signal.SIGUSR1)
            if proc.stdout.readline().strip() != "round":
                return

    try:
        agent = start("--binary", binary, "--mirror", "both", "--max-overhead", "0.01%",
                      "--budget-window", "2", cache=tmp_path / "cache")
        driver = threading.Thread(target=rounds, daemon=True)
        try:
            driver.start()
            assert agent.proc.stderr is not None
            wait_for(agent.proc.stderr, r"probe gauge_set: .* over its budget", 60)
            stop.set()
            driver.join(timeout=30)
            got = samples(_once_mirrored(agent.url))
            theirs = _theirs(url)
        finally:
            stop.set()
            stopped(agent)
    finally:
        proc.terminate()
        proc.wait()
    assert got[("noop_probe_enabled", (("probe", "gauge_set"),))] == 0
    by_own = _by_own(got, binary, proc.pid)
    theirs.pop(("promhttp_metric_handler_requests_in_flight", ()))
    assert theirs[("mirror_level", ())] > 0
    assert {k: by_own.get(k) for k in theirs} == theirs


def test_families_are_chosen_by_globs_and_capped(tmp_path: Path, privileged: None) -> None:
    """``--mirror-include``/``--mirror-exclude`` choose the families mirrored by their
    names; ``--mirror-max-series`` caps a process's series (families in order of their
    names), what it leaves out counted in noop_mirror_capped_series."""
    binary = go_build(go_toolchain("1.19"), tmp_path / "mirror", None, SOURCE, VARIANTS[1][1])
    proc, url = _started(binary, 20)
    try:
        agent = start("--binary", binary, "--mirror", "memory", "--mirror-include", "mirror_*",
                      "--mirror-include", "inner_*", "--mirror-exclude", "mirror_op_*",
                      "--mirror-max-series", "50", cache=tmp_path / "cache",
                      ready="ready: mirroring")
        try:
            text = _once_mirrored(agent.url)
        finally:
            stopped(agent)
        theirs = samples(get(f"http://{url}/metrics"))
    finally:
        proc.terminate()
        proc.wait()
    got = samples(text)
    ids = (("pid", str(proc.pid)), ("target", binary.name))
    mine = [k for k in got if set(ids) <= set(k[1]) and not k[0].startswith("noop_")]
    families = {re.sub(r"_(bucket|sum|count)$", "", k[0]) for k in mine}
    assert families and all(f.startswith(("mirror_", "inner_")) for f in families), families
    assert not [f for f in families if f.startswith("mirror_op_")]
    objects = {(re.sub(r"_(bucket|sum|count)$", "", k[0]),
                tuple(x for x in k[1] if x[0] not in ("le", "quantile"))) for k in mine}
    wanted = {(re.sub(r"_(bucket|sum|count)$", "", k[0]),
               tuple(x for x in k[1] if x[0] not in ("le", "quantile")))
              for k in theirs if k[0].startswith(("mirror_", "inner_"))
              and not k[0].startswith(("mirror_op_", "mirror_goroutines"))}
    assert len(objects) == 50 < len(wanted)
    capped = got[("noop_mirror_capped_series", ids)]
    assert capped == len(wanted) - 50, (capped, len(wanted))


def test_a_choice_of_families() -> None:
    from agent.presets.client_golang.facts import Choice

    c = Choice(("http_*", "rpc_*"), ("*_bucket_*", "http_debug_*"))
    assert c.wants("http_requests_total") and c.wants("rpc_calls_total")
    assert not c.wants("go_goroutines") and not c.wants("http_debug_hits")
    assert not c.wants("http_x_bucket_y")
    assert Choice().wants("anything") and not Choice((), ("*",)).wants("x")
