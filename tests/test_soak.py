"""The soak: minutes of calls under entry and exit probes while stacks grow and the
GC runs, against tests/programs/go/calls' own counts. Privileged: real BPF.

Each of its tests is a unit of its own in the parallel pass (tests/harness/tiers.py,
PER_TEST), started first, so the two soaks run beside the rest of the suite.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from harness import calls as program
from harness.noop import Agent, start, stopped

pytestmark = pytest.mark.attach

SOAK_SECONDS = 120


@pytest.mark.slow  # minutes of load, on purpose
def test_soak_stack_growth_and_gc_under_entry_and_exit_probes(
        privileged: None, calls: Path, tmp_path: Path, agent_cleanup: list[Agent]) -> None:
    """Minutes of recursion on fresh goroutines (each grows its stack from the start)
    with the GC busy, under entry probes at the jbe and exit probes at every RET: the
    program exits cleanly and every count is exact.

    The program runs at a low CPU priority (nice 10): a soak asserts that nothing
    goes wrong over time, not how much it did, and at full priority its eight
    goroutines under probes on every call would take the machine from the tests
    beside it. It still runs every cycle the machine has spare for its whole time."""
    spec = tmp_path / "probes.yaml"
    spec.write_text(program.COUNT_SPEC.replace("BINARY", str(calls)))
    # Every count must be exact: no budget may take a probe off (these cost the
    # program most of its CPU on purpose).
    agent = start("--config", spec, "--max-overhead", "none")
    agent_cleanup.append(agent)
    done = subprocess.run(["nice", "-n", "10", str(calls), "-goroutines", "8", "-depth",
                           "400", "-seconds", str(SOAK_SECONDS), "-garbage", "262144",
                           "-deposits", "0", "-sleeps", "0"], capture_output=True, text=True,
                          timeout=SOAK_SECONDS + 300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    counts = program.truth(done)
    # At nice 10 it gets what the machine has spare: on a busy one (the whole suite
    # beside it) ten cycles in its time; five still move stacks and collect under the
    # probes again and again, which is what the exact counts below are about.
    assert counts["trees"] > 100 and counts["gc_cycles"] >= 5, counts
    program.exact(agent, counts)
    stopped(agent)
