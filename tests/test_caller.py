"""``$caller`` and ``$caller_line``, against the program's source.

On each build of the lines program (Go 1.19 and newest, GCC -O0/-O2, clang -O2, Rust
release), process is called from main at the line marked call-process, and clamp is
called (inlined, or out of line at -O0) from process at the line marked clamp-call.
At process's entry, at a line later in it (where the return address is found through
the call-frame information, not at the top of the stack), at its returns and on the
line inside clamp, the caller and the line of the call must be those. Kept in the
kernel as a label, the calls per caller must equal the rounds the program ran.
Privileged: real BPF.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import yaml
from harness.noop import Agent, no_probe_left, settle, start, tracing
from harness.programs import LINES_PROCESS as PROCESS
from harness.programs import LINES_SOURCES as SOURCES
from oracles import lines as oracle

ROUNDS = 3
MAIN = {"go": "main.main", "c": "main", "rust": "lines::main"}


def _args(lang: str) -> list[str]:
    return ["-rounds", str(ROUNDS)] if lang == "go" else [str(ROUNDS), "0", "60"]


def _where(lang: str, marker: str) -> str:
    return f"{SOURCES[lang]}:{oracle.source_line(SOURCES[lang], marker)}"


def test_caller_at_entry_later_and_inlined(privileged: None, lines_program: tuple[str, Path],
                                           tmp_path: Path) -> None:
    lang, binary = lines_program
    name = SOURCES[lang].name
    who = {"who": "$caller", "at": "$caller_line"}
    spec = tmp_path / "probes.yaml"
    spec.write_text(yaml.safe_dump({"targets": {"lines": {"binary": str(binary)}}, "probes": [
        {"name": "entry", "function": PROCESS[lang], "values": who},
        {"name": "later", "line": f"{name}:{oracle.source_line(SOURCES[lang], 'and')}",
         "values": who},
        {"name": "ret", "function": PROCESS[lang], "at": "exit", "values": who},
        {"name": "inner", "line": f"{name}:{oracle.source_line(SOURCES[lang], 'clamp-low')}",
         "values": who}]}))
    with tracing(tmp_path, "--config", spec) as session:
        subprocess.run([str(binary), *_args(lang)], capture_output=True, timeout=60,
                       check=True)
        time.sleep(1.5)
    assert session.exit == 0, session.stderr
    no_probe_left(session.pid)
    seen: dict[str, set[tuple[Any, Any]]] = {}
    count: dict[str, int] = {}
    for line in session.lines:
        v = line["values"]
        seen.setdefault(line["probe"], set()).add((v["who"], v["at"]))
        count[line["probe"]] = count.get(line["probe"], 0) + 1
    from_main = {(MAIN[lang], _where(lang, "call-process"))}
    assert seen["entry"] == from_main
    assert seen["later"] == from_main
    assert seen["ret"] == from_main
    assert seen["inner"] == {(PROCESS[lang], _where(lang, "clamp-call"))}
    assert count["entry"] == count["ret"] == ROUNDS
    assert count["inner"] == sum(3 + r % 3 for r in range(ROUNDS))


def _calls_by_caller(lang: str, binary: Path, target: dict[str, str], tmp_path: Path,
                     agent_cleanup: list[Agent]) -> dict[Any, float]:
    """Under noop run, process's calls counted in the kernel by ``$caller`` while the
    program at ``binary`` (the spec's target ``target``) runs: the series scraped."""
    spec = tmp_path / "probes.yaml"
    spec.write_text(yaml.safe_dump({"targets": {"lines": target}, "probes": [
        {"name": "calls", "function": PROCESS[lang], "values": {"who": "$caller"},
         "metrics": [{"name": "process_calls_total", "type": "counter",
                      "labels": {"caller": "who"}, "aggregate": "kernel"}]}]}))
    agent = start("--config", spec)
    agent_cleanup.append(agent)
    subprocess.run([str(binary), *_args(lang)], capture_output=True, timeout=60, check=True)
    got = settle(agent, "process_calls_total", {"caller": MAIN[lang]}, ROUNDS)
    code, err = agent.stop()
    assert code == 0, err
    return {k: v for k, v in got.items() if k[0] == "process_calls_total"}


def test_caller_as_a_label_kept_in_the_kernel(privileged: None,
                                              lines_program: tuple[str, Path], tmp_path: Path,
                                              agent_cleanup: list[Agent]) -> None:
    """The aggregate's key holds the return address; the name is the scrape's."""
    lang, binary = lines_program
    got = _calls_by_caller(lang, binary, {"binary": str(binary)}, tmp_path, agent_cleanup)
    assert got == {("process_calls_total", (("caller", MAIN[lang]),)): ROUNDS}


def test_caller_named_from_the_debug_file_the_spec_names(
        privileged: None, lines_program: tuple[str, Path], tmp_path: Path,
        agent_cleanup: list[Agent]) -> None:
    """A stripped build whose DWARF is in a separate file the target names
    (``debuginfo:``): the scrape names the caller from that file too (C and Rust
    stripped keep no symbol to fall back on)."""
    lang, built = lines_program
    binary, debug = tmp_path / "lines", tmp_path / "lines.debug"
    subprocess.run(["objcopy", "--only-keep-debug", str(built), str(debug)], check=True)
    shutil.copy(built, binary)
    subprocess.run(["strip", "--strip-debug", "--strip-unneeded", str(binary)], check=True)
    got = _calls_by_caller(lang, binary, {"binary": str(binary), "debuginfo": str(debug)},
                           tmp_path, agent_cleanup)
    assert got == {("process_calls_total", (("caller", MAIN[lang]),)): ROUNDS}
