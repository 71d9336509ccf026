"""Calls seen exactly once, at entry and at exit, against the program's own counts.

tests/programs/go/calls recurses through frames of each Go stack-check form on many
goroutines, so stacks grow (a growing call restarts at its entry) and move while calls
are in progress. Its own counts and results are the truth. Privileged: real BPF.
"""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from harness import calls as calls_program
from harness.metrics import one
from harness.noop import Agent, no_probe_left, settle, start, stopped, tracing
from harness.programs import workload

pytestmark = pytest.mark.attach  # run again through perf-event uprobes (--attach both)

REPO = Path(__file__).resolve().parent.parent


def _first_instruction_counter(binary: Path, function: str) -> Any:
    """A counter of calls of ``function`` probed the naive way, at its first instruction,
    loaded beside noop run in this process: what noop's choice of site avoids."""
    from agent.config import probes as spec
    from agent.kernel import codegen, load
    from agent.plan import resolve
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
    spec.write_text(calls_program.COUNT_SPEC.replace("BINARY", str(calls)))
    agent = start("--config", spec, "--max-overhead", "none")  # counts exact under load
    agent_cleanup.append(agent)
    plan, program, load = _first_instruction_counter(calls, "huge")
    with load.Loaded(plan, program) as naive:
        truth = calls_program.run(calls, "-goroutines", "8", "-depth", "400", "-rounds",
                                  "20", "-deposits", "0", "-sleeps", "0")
        naive_hits = sum(aggregate.merge(program.aggregates[0], k, vs).hits
                         for k, vs in naive.rows(0))
    calls_program.exact(agent, truth)
    # Stacks did grow under the calls: the first instruction saw restarted calls twice.
    assert naive_hits > truth["huge"], (naive_hits, truth["huge"])
    stopped(agent)


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
        truth = calls_program.run(calls, "-goroutines", "4", "-depth", "300", "-rounds",
                                  "3", "-deposits", "200", "-sleeps", "3", "-sleep-ms", "20")
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
    truth = calls_program.run(calls, "-goroutines", "1", "-rounds", "1", "-depth", "1",
                              "-deposits", "0", "-sleeps", "0", "-bumps", "250")
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
