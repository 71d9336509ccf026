"""noop bench's workloads and harness, against exact truths: each workload counts its own
calls, bpftrace counts every one of them at the site, and the Go workload's metric ends
at the value its calls imply. Timings are only checked to be positive (a noisy machine).

The bpftrace tests are privileged: they attach uprobes for real.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from harness.noop import run as run_noop
from harness.programs import workload

from agent.errors import NoopError, NotFound
from agent.tools import arms, bench
from agent.tools import workloads as wl

pytestmark = [pytest.mark.slow, pytest.mark.serial]  # benchmarks: every arm timed, alone

CALLS = 100_000
ROUNDS = 2
REPEATS = 3
TRACEFS = Path("/sys/kernel/tracing")


@pytest.fixture(scope="module")
def workloads(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("bench")
    try:
        return {kind: workload(kind, out) for kind in wl.KINDS}
    except NoopError as exc:
        pytest.fail(f"{exc}: run ./setup.sh to install the test toolchains", pytrace=False)


@pytest.fixture(scope="module")
def tracefs(privileged: None) -> None:
    """uprobes need tracefs; mount it where the kernel expects it when it is missing."""
    if not (TRACEFS / "uprobe_events").exists():
        subprocess.run(["mount", "-t", "tracefs", "nodev", str(TRACEFS)], check=True)


def _check_runs(result: bench.Result, op: str) -> None:
    for a in result.arms:
        assert len(a.runs) == REPEATS
        assert a.calls == CALLS * ROUNDS * REPEATS
        assert a.ns_per_call > 0
        for r in a.runs:
            assert r.calls == CALLS * ROUNDS, f"{a.name}: the workload made {r.calls} calls"
            assert len(r.ns_per_call) == ROUNDS
            assert all(x > 0 for x in r.ns_per_call)
            assert r.final == wl.expected_final(op, r.calls)


@pytest.mark.parametrize("kind, op", [("go", "counter.Inc"), ("c", "func"),
                                      ("rust", "counter.inc")])
def test_bpftrace_counts_every_call(workloads: dict[str, Path], tracefs: None,
                                    kind: str, op: str) -> None:
    result = bench.run(workloads[kind], op, wl.workload_function(kind, op),
                       [arms.NONE, arms.BPFTRACE], ROUNDS, CALLS, repeats=REPEATS)
    _check_runs(result, op)
    none, traced = result.arms
    assert none.hits is None
    for r in traced.runs:
        assert r.hits == r.calls, f"bpftrace saw {r.hits} hits of {r.calls} calls"
    assert result.baseline == "bpftrace"
    assert traced.added_ns is not None and traced.ratio == pytest.approx(1.0)
    table = bench.render(result)
    assert all(len(line) <= 80 for line in table.splitlines())
    assert "hits differ" not in table


@pytest.mark.parametrize("op", wl.GO_OPS)
def test_go_final_values(workloads: dict[str, Path], op: str) -> None:
    """Every op ends at the value its calls imply, as the program reads its own metric."""
    result = bench.run(workloads["go"], op, wl.workload_function("go", op), [arms.NONE],
                       3, 1000, repeats=1)
    (run,) = result.arms[0].runs
    assert run.calls == 3000
    assert run.final == wl.expected_final(op, 3000)
    assert result.arms[0].added_ns == 0 and result.baseline is None


@pytest.mark.parametrize("op", wl.RUST_OPS)
def test_rust_final_values(workloads: dict[str, Path], op: str) -> None:
    """Every op of the Rust workload (the prometheus crate's updates) ends at the value
    its calls imply, as the program reads its own metric."""
    result = bench.run(workloads["rust"], op, wl.workload_function("rust", op), [arms.NONE],
                       3, 1000, repeats=1)
    (run,) = result.arms[0].runs
    assert run.calls == 3000
    assert run.final == wl.expected_final(op, 3000)


def test_arms_rotate_and_report_hits(workloads: dict[str, Path]) -> None:
    """A new arm is a name and a context manager; the order rotates every repetition."""
    order: list[str] = []

    def recording(name: str) -> arms.Arm:
        @contextmanager
        def attach(site: wl.Site) -> Iterator[arms.Attached]:
            assert site.entry and site.function == "work"
            order.append(name)
            attached = arms.Attached()
            yield attached
            attached.hits = 7

        return arms.Arm(name, attach)

    chosen = [arms.NONE, recording("a"), recording("empty")]
    result = bench.run(workloads["c"], "func", "work", chosen, 1, 1000, repeats=3)
    assert order == ["a", "empty", "a", "empty", "empty", "a"]  # none ran first, third, second
    assert [a.hits for a in result.arms] == [None, 21, 21]
    assert result.baseline == "empty"
    assert result.site.address == wl.site_address(workloads["c"], "work")
    assert "hits differ from calls: a, empty" in bench.render(result)


def test_site_is_noops_own(workloads: dict[str, Path]) -> None:
    fn = wl.workload_function("go", "func")
    site = wl.make_site(workloads["go"], fn)
    assert site.address == wl.site_address(workloads["go"], fn)
    assert site.binary == str(workloads["go"].resolve()) and os.path.isabs(site.binary)
    with pytest.raises(NoopError, match="outside"):
        wl.make_site(workloads["go"], fn, site.address - 1)


def test_mistakes_are_errors(tmp_path: Path, workloads: dict[str, Path]) -> None:
    with pytest.raises(NotFound):
        wl.build_workload("fortran", tmp_path)
    with pytest.raises(NotFound):
        wl.workload_function("c", "counter.Inc")
    with pytest.raises(NotFound):
        arms.arm("nonesuch")
    with pytest.raises(NotFound):
        bench.run(workloads["c"], "func", "work", [arms.NONE], 1, 10, baseline="empty")
    with pytest.raises(NoopError, match="exited 2"):
        bench.run(workloads["c"], "gauge.Set", "work", [arms.NONE], 1, 10, repeats=1)


@pytest.mark.parametrize("kind, op", [("go", "gauge.Add"), ("c", "func")])
def test_bpf_arms_count_every_call(workloads: dict[str, Path], tracefs: None, kind: str,
                                   op: str) -> None:
    """noop's probes count every call of the workload, in the kernel and through the ring
    buffer (read by noop, wrapping the 1 MiB ring many times on the Go workload); the
    empty program counts nothing."""
    calls = CALLS if kind == "go" else CALLS // 10  # a C hit is single-stepped: slow
    chosen = [arms.NONE, arms.EMPTY, arms.NOOP_KERNEL, arms.NOOP_RINGBUF]
    result = bench.run(workloads[kind], op, wl.workload_function(kind, op), chosen,
                       ROUNDS, calls, repeats=2)
    none, empty, kernel, ringbuf = result.arms
    assert result.baseline == "empty" and empty.ratio == pytest.approx(1.0)
    assert none.hits is None and empty.hits is None
    for r in (*kernel.runs, *ringbuf.runs):
        assert r.calls == calls * ROUNDS
        assert r.hits == r.calls, f"{r.arm} saw {r.hits} hits of {r.calls} calls"
        assert r.final == wl.expected_final(op, r.calls)
    for r in ringbuf.runs:
        # Every record is read or counted lost, and every one read is counted. Whether
        # the reader keeps up with a tight loop on a busy machine is a speed, which the
        # bench measures (docs/benchmarks.md, ring-buffer reading), not a result.
        assert r.notes["read"] + r.notes["lost"] == r.calls
        assert r.notes["read"] == r.notes["counted"]
        assert r.notes["cpu_s"] > 0
    for a in (empty, kernel, ringbuf):
        assert a.added_ns is not None and a.added_ns > 0
    table = bench.render(result)
    assert all(len(line) <= 80 for line in table.splitlines())
    read = sum(int(r.notes["read"]) for r in ringbuf.runs)
    lost = sum(int(r.notes["lost"]) for r in ringbuf.runs)
    assert f"noop-ringbuf: {read} records read, {lost} lost" in table


def test_a_counter_through_a_link_and_through_a_perf_event(
        workloads: dict[str, Path], tracefs: None) -> None:
    """noop-kernel's counter attached both ways in one run, the arms alternating: each
    counts every call, and each really went on its own way (a uprobe_multi link on the
    workload's file while noop-multi is on, none while noop-perf is). What each costs
    is the bench's table (docs/benchmarks.md), not asserted here."""
    from agent.kernel import uprobes

    links: dict[str, list[int]] = {}

    def watched(arm: arms.Arm) -> arms.Arm:
        @contextmanager
        def attach(site: wl.Site) -> Iterator[arms.Attached]:
            with arm.attach(site) as attached:
                mine = os.path.realpath(site.binary)
                links.setdefault(arm.name, []).append(sum(
                    link.count for link in uprobes.uprobe_multi_links()
                    if os.path.realpath(link.path) == mine))
                yield attached

        return arms.Arm(arm.name, attach, arm.about)

    op = "gauge.Add"
    chosen = [arms.NONE, watched(arms.NOOP_MULTI), watched(arms.NOOP_PERF)]
    result = bench.run(workloads["go"], op, wl.workload_function("go", op), chosen, ROUNDS,
                       CALLS, repeats=2)
    _none, multi, perf = result.arms
    for a in (multi, perf):
        assert a.hits == a.calls == 2 * ROUNDS * CALLS, a.name
        assert a.added_ns is not None and a.added_ns > 0
        assert all(r.final == wl.expected_final(op, r.calls) for r in a.runs)
    # noop-multi: one link with a uprobe per site of its probe, each time; noop-perf: none.
    (per_run,) = set(links["noop-multi"])
    assert per_run >= 1 and links["noop-perf"] == [0, 0], links


def test_bench_plan_is_a_counter_at_the_site(workloads: dict[str, Path]) -> None:
    site = wl.make_site(workloads["c"], "work")
    for aggregate in ("kernel", "events"):
        plan = arms.bench_plan(site, aggregate)
        (probe,) = plan.probes
        ((metric,), (s,)) = probe.metrics, probe.sites
        assert (metric.kind, metric.where, s.address) == ("counter", aggregate, site.address)
    inside = wl.make_site(workloads["c"], "work", site.address + 4)
    (s,) = arms.bench_plan(inside, "kernel").probes[0].sites
    assert (s.address, s.file_offset) == (inside.address, inside.file_offset)


def test_noop_arms_probe_noops_own_site(workloads: dict[str, Path], tracefs: None) -> None:
    """On a Go function with a stack check, noop's arms probe its jbe and still count
    every call; noop-first probes the first instruction like the other arms; objdump
    agrees that the site is the jbe right after the compare with g's stack guard."""
    op = "histogram.Observe"
    fn = wl.workload_function("go", op)
    site = wl.make_site(workloads["go"], fn)
    (chosen,) = arms.bench_plan(site, "kernel").probes[0].sites
    (first,) = arms.bench_plan(site, "kernel", first=True).probes[0].sites
    assert first.address == site.address and not first.skip_flags
    assert chosen.skip_flags == 0x41 and chosen.handling == "emulated"
    dump = subprocess.run(["objdump", "-d", "--no-show-raw-insn",
                           f"--start-address={site.address:#x}",
                           f"--stop-address={site.address + 32:#x}", str(workloads["go"])],
                          capture_output=True, text=True, check=True).stdout
    insns = [line.split(":", 1) for line in dump.splitlines() if re.match(r"\s+[0-9a-f]+:", line)]
    at = {int(a, 16): text.split() for a, text in insns}
    assert at[chosen.address][0] == "jbe"
    previous = max(a for a in at if a < chosen.address)
    assert at[previous][0] == "cmp" and at[previous][1].startswith("0x10(%r14),")
    three = [arms.NONE, arms.NOOP_FIRST, arms.NOOP_KERNEL]
    result = bench.run(workloads["go"], op, fn, three, 1, 20_000, repeats=1)
    _none, naive, kernel = result.arms
    # The first instruction also sees calls restarted after a preemption request.
    assert kernel.hits == 20_000 and naive.hits is not None and naive.hits >= 20_000
    assert kernel.runs[0].where.startswith(f"{chosen.address:#x} (emulated")
    assert naive.runs[0].where == ""
    assert f"noop-kernel probed {chosen.address:#x}" in bench.render(result)


def test_cli(workloads: dict[str, Path], tracefs: None) -> None:
    """noop bench on the command line: a table, or JSON; mistakes in one line."""
    from agent.cli import main

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return run_noop("bench", *argv)

    done = run("--binary", str(workloads["c"]), "--workload", "c", "--calls", "2000",
               "--rounds", "1", "--repeats", "1", "--arms", "none,noop-kernel", "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert [a["name"] for a in data["arms"]] == ["none", "noop-kernel"]
    assert data["arms"][1]["hits"] == 2000
    done = run("--binary", str(workloads["c"]), "--workload", "c", "--calls", "1000",
               "--rounds", "1", "--repeats", "1", "--arms", "none")
    assert done.returncode == 0 and done.stdout.startswith("op func: 1 repeats")
    for argv, said in ((["--arms", "none,bogus"], "arm 'bogus' not found"),
                       (["--calls", "0"], "is not a whole number above 0"),
                       (["--address", "zz"], "not an address"),
                       (["--binary", "/nonexistent/loop"], "no such workload")):
        done = run(*argv)
        assert done.returncode != 0 and said in done.stderr, (argv, done.stderr)
        assert "Traceback" not in done.stderr
    assert main(["bench", "--arms", "nonesuch"]) == 1


@pytest.mark.parametrize("op", ["gauge.Add", "counter.Add"])
def test_value_arm_sums_the_float_argument(workloads: dict[str, Path], tracefs: None,
                                           op: str) -> None:
    """noop-value reads Add's float argument without an XMM helper, at the emulated
    conditional jump after each update's sete and test: it sees every call and its
    sum equals the metric the workload itself reads (2.5 per call). (10 000 calls: a
    value derived at its site is decoded record by record, slower than the workload
    makes them, so the ring holds the burst.)"""
    fn = wl.workload_function("go", op)
    result = bench.run(workloads["go"], op, fn, [arms.NONE, arms.NOOP_VALUE], 1, 10_000,
                       repeats=1)
    _none, value = result.arms
    (run,) = value.runs
    assert run.hits == run.calls == run.notes["read"] == 10_000 and run.notes["lost"] == 0
    assert run.notes["value"] == run.final == wl.expected_final(op, run.calls)
    assert "(emulated instruction)" in run.where
    assert f"noop-value: argument summed {run.final:g}" in bench.render(result)


def test_value_arm_needs_a_float_argument(workloads: dict[str, Path]) -> None:
    fn = wl.workload_function("go", "counter.Inc")
    with pytest.raises(NoopError, match="has no float argument"):
        bench.run(workloads["go"], "counter.Inc", fn, [arms.NOOP_VALUE], 1, 10, repeats=1)


def test_the_mirror_arm_probes_no_counter(workloads: dict[str, Path], tracefs: None,
                                          privileged: None) -> None:
    """``--mirror memory`` as the bench loads it: no probe (the counter's value is read
    from memory), every call made and the counter right."""
    op = "counter.Inc"
    result = bench.run(workloads["go"], op, wl.workload_function("go", op),
                       [arms.NONE, arms.MIRROR], 1, CALLS, repeats=1)
    _none, mirror = result.arms
    (run,) = mirror.runs
    assert run.hits is None and run.calls == CALLS
    assert run.final == wl.expected_final(op, CALLS)
    assert run.where == "no probe (mirror)"
