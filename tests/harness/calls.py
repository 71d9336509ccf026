"""tests/programs/go/calls, the truth for counting calls: it recurses through frames
of each Go stack-check form on many goroutines (stacks grow, and a growing call
restarts at its entry) and prints its own counts as JSON when it ends."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from harness.metrics import one
from harness.noop import Agent, settle

FUNCTIONS = ("small", "medium", "huge")

# A counter of calls and of returns for each function, and the sum of small's results.
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


def truth(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """The program's own counts: its last line."""
    return dict(json.loads(done.stdout.splitlines()[-1]))


def run(binary: Path, *args: str) -> dict[str, Any]:
    """Run the program to its end; its own counts."""
    return truth(subprocess.run([str(binary), *args], capture_output=True, text=True,
                                timeout=300, check=True))


def exact(agent: Agent, counts: dict[str, Any]) -> None:
    """Every count of COUNT_SPEC equals the program's own, and every return paired."""
    got = settle(agent, "huge_returns_total", {}, counts["huge"])
    for f in FUNCTIONS:
        assert counts[f] > 0
        assert one(got, f"{f}_calls_total") == counts[f], f
        assert one(got, f"{f}_returns_total") == counts[f], f
        assert one(got, "noop_exits_unpaired_total", probe=f"{f}_exit") == 0
    assert one(got, "small_results_total") == counts["small_results"]
