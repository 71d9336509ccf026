"""Async functions: a probe on an async fn counts its calls, not its polls, reads its
arguments from what its future captured, times a call from its first poll to the one
that completes it, and counts a call whose future is dropped first as cancelled.

tests/programs/rust/handler is a tokio program (Debian's crates, a release build with
debug info) whose handler suspends twice in each call, so each is polled three times
or more; its calls are awaited directly (the future is made and first polled in the
caller's own poll, where the compiler skips the state dispatch), through a timeout
and as spawned tasks, and every fourth is cancelled by a timeout. The program prints
each call's arguments, whether it was cancelled and how long it took around the
await: the truth. Privileged: real BPF.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.metrics import one
from harness.noop import Agent, settle, start, tracing
from harness.programs import NoopRun

CALLS = 17

SPEC = """
targets: {h: {binary: BINARY}}
probes:
  - name: handle
    function: 'handler::handle'
    values: {id: req.id, path: req.path, n: len(req.path), weight: req.weight,
             delay: delay_ms}
  - name: handled
    function: 'handler::handle'
    at: exit
    values: {id: req.id, took: $duration}
    metrics:
      - {name: handled_total, type: counter}
"""


def _calls(binary: Path) -> list[dict[str, Any]]:
    done = subprocess.run([str(binary), str(CALLS)], capture_output=True, text=True,
                          timeout=120, check=True)
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_calls_not_polls_with_their_arguments_and_durations(
        privileged: None, rust_handler: Path, tmp_path: Path) -> None:
    spec = tmp_path / "probes.yaml"
    spec.write_text(SPEC.replace("BINARY", str(rust_handler)))
    with tracing(tmp_path, "--config", spec) as noop:
        calls = _calls(rust_handler)
    assert noop.exit == 0, noop.stderr
    assert len(calls) == CALLS and sum(c["cancelled"] for c in calls) == CALLS // 4
    entries = [line["values"] for line in noop.lines if line["probe"] == "handle"]
    assert entries == [{"id": c["id"], "path": c["path"], "n": len(c["path"]),
                        "weight": c["weight"], "delay": c["delay"]} for c in calls]
    ends = [line["values"] for line in noop.lines if line["probe"] == "handled"]
    done = [c for c in calls if not c["cancelled"]]
    assert [e["id"] for e in ends] == [c["id"] for c in done]
    for e, c in zip(ends, done, strict=True):
        # From the first poll to the last: at least the handler's sleep, at most the
        # program's own measure around the whole await.
        assert c["delay"] * 1_000_000 <= e["took"] <= c["took_ns"], (e, c)


def test_cancelled_calls_are_counted_and_released(privileged: None, rust_handler: Path,
                                                  tmp_path: Path,
                                                  agent_cleanup: list[Agent]) -> None:
    spec = tmp_path / "probes.yaml"
    spec.write_text(SPEC.replace("BINARY", str(rust_handler)))
    agent = start("--config", spec)
    agent_cleanup.append(agent)
    calls = _calls(rust_handler)
    done = sum(not c["cancelled"] for c in calls)
    got = settle(agent, "handled_total", {}, done)
    assert one(got, "handled_total") == done
    assert one(got, "noop_async_cancelled_total", probe="handled") == CALLS - done
    assert one(got, "noop_exits_unpaired_total", probe="handled") == 0


def test_check_shows_the_first_poll_and_refuses_what_it_cannot_read(
        rust_handler: Path, noop: NoopRun, tmp_path: Path) -> None:
    spec = tmp_path / "probes.yaml"
    spec.write_text(SPEC.replace("BINARY", str(rust_handler)))
    done = noop("check", "--config", spec)
    assert done.returncode == 0, done.stderr
    assert "only a call's first poll" in done.stdout
    assert "the future's state becomes Returned" in done.stdout
    assert "the future is dropped" in done.stdout
    bad = tmp_path / "bad.yaml"
    bad.write_text(f"targets: {{h: {{binary: {rust_handler}}}}}\nprobes:\n"
                   "  - {name: a, function: 'handler::handle', values: {x: requ.id}}\n"
                   "  - {name: b, function: 'handler::handle', at: exit, values: {r: '~r0'}}\n")
    done = noop("check", "--config", bad)
    assert done.returncode == 2
    a, b = done.stderr.strip().splitlines()
    assert "async fn handler::handle has no parameter 'requ' (did you mean 'req'?" in a
    assert "the result of async fn handler::handle is not read yet" in b


def test_a_function_compiled_more_than_once_is_probed_at_every_copy(
        rust_handler: Path, noop_json: Callable[..., Any], tmp_path: Path) -> None:
    """rustc makes a copy of a generic function in each codegen unit that needs it; the
    copies share a name but for LLVM's `.llvm.N`. A probe by that name is on each
    (the future's drop glue here), as nm counts them."""
    nm = subprocess.run(["nm", str(rust_handler)], capture_output=True, text=True,
                        check=True, timeout=60).stdout
    glue = "drop_in_place$LT$handler..handle..$u7b$$u7b$closure$u7d$$u7d$$GT$"
    copies = {line.split()[0] for line in nm.splitlines()
              if re.fullmatch(r"_ZN4core3ptr\d+" + re.escape(glue) + r"17h[0-9a-f]{16}E"
                              r"(\.llvm\.\d+)?", line.split()[-1])}
    assert len(copies) > 1
    spec = tmp_path / "probes.yaml"
    spec.write_text(f"targets: {{h: {{binary: {rust_handler}}}}}\nprobes:\n  - {{name: d, "
                    "function: 'core::ptr::drop_in_place<handler::handle::{{closure}}>'}\n")
    plan = noop_json("check", "--config", spec, "--json")
    (probe,) = plan["probes"]
    assert {int(s["address"], 16) for s in probe["sites"]} == {int(a, 16) for a in copies}
