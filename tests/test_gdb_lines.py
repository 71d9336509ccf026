"""What a line probe reads at each pass, against gdb stopped at the same instructions.

For every line of the test programs' functions with a statement a line probe counts
passes at (the lines program in Go 1.19 and newest, GCC -O0 and -O2, clang -O2 and
Rust release; tests/programs/go/locals, whose strings, slice and struct live in stack
slots and registers), one probe reads every value ``noop vars`` places there (an
integer or a pointer, a string, a string's or slice's length, a struct's integer and
string fields). The program runs once under noop and once under gdb, with the same
input, gdb stopping at every address each probe was put on and reading each value
with its own DWARF evaluator (tests/oracles/gdbvalues.py). Each probe must hit as
often as gdb stopped at its addresses, in the same order, and read on each hit what
gdb read at that stop. Privileged: real BPF.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from harness.linevalues import every_line
from harness.noop import no_probe_left, tracing
from harness.programs import LINES_PROCESS, LOCALS_FUNCTION
from oracles.gdbvalues import QUIET, values_at, without_aslr

from agent.binary.elf import ElfFile
from agent.tools import inspect

ROUNDS = 4


def _probes(binary: Path, function: str
            ) -> tuple[dict[str, tuple[str, dict[str, str]]], set[int]]:
    """Probe name -> (its line, its values by key): every line of ``function`` a line
    probe can count the passes of (noop refuses one no instruction sees each pass of,
    and says so in ``noop vars``); and the addresses where a probe counts a pass at a
    jump into its line rather than at a statement of it."""
    lines, jumps = [], set()
    for where, values in every_line(binary, function).items():
        answer = inspect.line_vars(str(binary), where)
        if "refused" in answer:
            continue
        lines.append((where, values))
        jumps |= {s["address"] for s in answer["sites"]
                  if "counts" in s and s.get("statement") is False}
    return {f"l{n}": line for n, line in enumerate(lines)}, jumps


def _compare(binary: Path, language: str, function: str, args: list[str],
             tmp_path: Path) -> None:
    probes, jumps = _probes(binary, function)
    spec = tmp_path / "p.yaml"
    spec.write_text(json.dumps({"targets": {"t": {"binary": str(binary)}}, "probes": [
        {"name": name, "line": where, **({"values": values} if values else {})}
        for name, (where, values) in probes.items()]}))
    from harness.noop import REPO, command
    checked = subprocess.run(command("check", "--json", "--config", spec), cwd=REPO,
                             capture_output=True, text=True, timeout=300)
    assert checked.returncode == 0, checked.stderr
    plan = json.loads(checked.stdout)
    sites: dict[int, dict[str, str]] = {}  # each probe's values there, as "probe:key"
    probes_at: dict[int, list[str]] = {}  # lines may share an address
    skips: dict[int, int] = {}  # the hits a site drops: "flags & 0x41"
    for p in plan["probes"]:
        for s in p["sites"]:
            address = int(s["address"], 16)
            if "skip" in s:
                skips[address] = int(s["skip"].rpartition("&")[2], 16)
            sites.setdefault(address, {}).update(
                {f"{p['name']}:{k}": v for k, v in probes[p["name"]][1].items()})
            probes_at.setdefault(address, []).append(p["name"])
    with ElfFile(binary) as elf:
        pie = elf.e_type == 3
    extra = QUIET.get(language, {})
    oracle = values_at(binary, args, sites, pie, language, jumps, extra, skips)
    with tracing(tmp_path, "--config", spec) as session:
        subprocess.run(without_aslr(binary, args, extra), capture_output=True, timeout=60,
                       check=True)
        time.sleep(1.5)  # let noop drain the ring buffer
    assert session.exit == 0, session.stderr
    no_probe_left(session.pid)
    want: dict[str, list[dict[str, object]]] = {name: [] for name in probes}
    for pc, values in oracle.hits:
        for name in probes_at[pc]:
            want[name].append({k.partition(":")[2]: v for k, v in values.items()
                               if k.partition(":")[0] == name})
    got: dict[str, list[dict[str, object]]] = {name: [] for name in probes}
    for line in session.lines:
        got[line["probe"]].append(line.get("values", {}))
    read = sum(len(v) for _w, v in probes.values())
    assert read >= 3 and sum(map(len, want.values())) >= 10, (probes, oracle.errors)
    # gdb read every value noop places (else noop places one gdb cannot find)
    assert not oracle.errors, oracle.errors[:10]
    wrong = [_first_difference(f"{name} ({probes[name][0]})", got[name], want[name])
             for name in probes if got[name] != want[name]]
    assert not wrong, "\n".join(wrong)


def _first_difference(probe: str, got: list[dict[str, object]],
                      want: list[dict[str, object]]) -> str:
    if len(got) != len(want):
        return f"{probe}: {len(got)} hits, gdb stopped {len(want)} times"
    i = next(i for i, (g, w) in enumerate(zip(got, want, strict=True)) if g != w)
    return f"{probe}, hit {i}: noop read {got[i]}, gdb {want[i]}"


@pytest.mark.usefixtures("oracle_tools")
def test_each_pass_reads_what_gdb_reads(privileged: None, lines_program: tuple[str, Path],
                                        tmp_path: Path) -> None:
    lang, binary = lines_program
    args = ["-rounds", str(ROUNDS), "-limit", "60"] if lang == "go" \
        else [str(ROUNDS), "0", "60"]
    _compare(binary, lang, LINES_PROCESS[lang], args, tmp_path)


@pytest.mark.usefixtures("oracle_tools")
def test_strings_slices_and_structs_read_what_gdb_reads(
        privileged: None, locals_program: tuple[str, Path], tmp_path: Path) -> None:
    lang, binary = locals_program
    args = ["-calls", "6"] if lang == "go" else ["6"]
    _compare(binary, lang, LOCALS_FUNCTION[lang], args, tmp_path)
