"""Arguments a compiler dropped or moved: reported as not available, never read.

tests/programs/c/dropped.c (GCC and clang at -O2) and tests/programs/rust/dropped (a
release build) have functions whose compilers changed how they are called. Each
premise is first checked with an independent tool (llvm-dwarfdump, nm, objdump);
then `noop vars` and `noop check` must say "not available" for every dropped value,
and a trace must read every value still passed exactly as the program passed it, per
call, and print no number for a dropped one.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from harness.noop import tracing
from harness.programs import NoopRun
from oracles import dwarfdump, machine

CALLS = 23  # rounds of calls: a prime, so a count that is off by a factor shows


def _clone(binary: Path, name: str) -> str:
    """The one symbol GCC made of static function ``name`` (``name.isra.0``, ...)."""
    nm = subprocess.run(["nm", str(binary)], capture_output=True, text=True, check=True,
                        timeout=60).stdout
    found = {line.split()[-1] for line in nm.splitlines()
             if line.split()[-1].startswith(name + ".")}
    assert len(found) == 1, f"GCC made {found or 'no'} clones of {name}"
    return found.pop()


def _vars(noop_json: Callable[..., Any], binary: Path, function: str) -> dict[str, Any]:
    got = noop_json("vars", binary, function, "--json")
    return {v["name"]: v for v in got["params"] + got["results"]}


def _unavailable(v: dict[str, Any], reason: str) -> None:
    assert v["location"] is None and v["source"] == "none", v
    assert reason in v["note"], v


def _placed(v: dict[str, Any], *where: dict[str, Any]) -> None:
    assert v["location"] == list(where), v


def reg(name: str, size: int = 8) -> dict[str, Any]:
    return {"reg": name, "size": size}


@pytest.mark.usefixtures("oracle_tools")
def test_rust_release_build(rust_dropped: Path, noop_json: Callable[..., Any]) -> None:
    for name in ("dropped::audit", "dropped::post"):
        assert "DW_CC_nocall" in subprocess.run(
            ["llvm-dwarfdump", f"--name={name.split('::')[1]}", str(rust_dropped)],
            capture_output=True, text=True, check=True, timeout=60).stdout, name
    audit = _vars(noop_json, rust_dropped, "dropped::audit")
    for name in ("e", "unused", "~r0"):
        _unavailable(audit[name], "DW_CC_nocall")
    post = _vars(noop_json, rust_dropped, "dropped::post")
    _placed(post["total"], reg("rdi"))
    for name in ("e", "batch", "~r0"):
        _unavailable(post[name], "DW_CC_nocall")
    exported = _vars(noop_json, rust_dropped, "exported")
    _placed(exported["a"], reg("rdi"))
    _unavailable(exported["b"], "callers compiled by LLVM need not pass it")
    _placed(exported["~r0"], reg("rax"))
    # Called through a function pointer: rustc's convention stays.
    score = _vars(noop_json, rust_dropped, "dropped::score")
    _placed(score["e"], reg("rdi"))
    _placed(score["weight"], reg("rsi"))
    _placed(score["~r0"], reg("rax"))


def test_clang_o2(c_dropped_clang: Path, noop_json: Callable[..., Any]) -> None:
    tally = _vars(noop_json, c_dropped_clang, "tally")
    _placed(tally["o"], reg("rdi"))
    _placed(tally["qty"], reg("rsi", 4))  # the System V register of the third argument is rdx
    _unavailable(tally["unused"], "the compiler changed how the function is called")
    _unavailable(tally["~r0"], "the compiler changed how the function is called")
    kept = _vars(noop_json, c_dropped_clang, "kept")
    _placed(kept["a"], reg("rdi"))
    _placed(kept["o"], reg("rdx"))
    _unavailable(kept["spare"], "callers compiled by LLVM need not pass it")
    # The premise, from the machine code: main does not set rsi for kept, and kept
    # never reads it; kept_used does.
    address = dwarfdump.symbol_address(c_dropped_clang, "kept")
    assert not machine.caller_sets_before_call(c_dropped_clang, address, "rsi")
    assert not machine.reads_register_first(c_dropped_clang, address, "rsi")
    # settle's o and rounds are in DWARF 5 indexed location lists; seed is a constant.
    assert "DW_FORM_loclistx" in subprocess.run(
        ["llvm-dwarfdump", "--name=settle", "--show-children", "--show-form",
         str(c_dropped_clang)], capture_output=True, text=True, check=True, timeout=60).stdout
    settle = _vars(noop_json, c_dropped_clang, "settle")
    _placed(settle["o"], reg("rdi"))
    _placed(settle["rounds"], reg("rsi", 4))
    _unavailable(settle["seed"], "always 7")
    used = _vars(noop_json, c_dropped_clang, "kept_used")
    _placed(used["spare"], reg("rsi"))
    _placed(used["~r0"], reg("rax"))


def test_gcc_o2_clones(c_dropped_gcc: Path, noop: NoopRun,
                       noop_json: Callable[..., Any]) -> None:
    tally = _clone(c_dropped_gcc, "tally")
    got = _vars(noop_json, c_dropped_gcc, tally)
    for name in ("o", "unused", "~r0"):
        _unavailable(got[name], "compiler clone")
    _placed(got["qty"], reg("rsi", 4))
    quantity = _vars(noop_json, c_dropped_gcc, _clone(c_dropped_gcc, "quantity"))
    _unavailable(quantity["o"], "compiler clone")
    _placed(quantity["scale"], reg("rsi", 4))
    settle = _vars(noop_json, c_dropped_gcc, _clone(c_dropped_gcc, "settle"))
    _unavailable(settle["seed"], "always 7")
    # GCC passes every argument of a function it keeps, read or not.
    kept = _vars(noop_json, c_dropped_gcc, "kept")
    _placed(kept["spare"], reg("rsi"))
    assert machine.caller_sets_before_call(
        c_dropped_gcc, dwarfdump.symbol_address(c_dropped_gcc, "kept"), "rsi")
    # The user names the function as written; noop points at what GCC made of it.
    done = noop("vars", c_dropped_gcc, "tally")
    assert done.returncode == 1 and f"did you mean {tally}?" in done.stderr


def _spec(tmp_path: Path, binary: Path, probes: str) -> Path:
    spec = tmp_path / "probes.yaml"
    spec.write_text(f"targets: {{p: {{binary: {binary}}}}}\nprobes:\n{probes}")
    return spec


DROPPED = {
    "rust_dropped": """
  - {name: audit, function: 'dropped::audit', values: {unused: unused}}
  - {name: post, function: 'dropped::post', values: {batch: batch, amount: e.amount_cents}}
  - {name: posted, function: 'dropped::post', at: exit, values: {r: '~r0'}}
  - {name: exported, function: exported, values: {b: b}}
""",
    "c_dropped_clang": """
  - {name: tally, function: tally, values: {unused: unused}}
  - {name: tallied, function: tally, at: exit, values: {r: '~r0'}}
  - {name: kept, function: kept, values: {spare: spare}}
""",
}


@pytest.mark.parametrize("program", list(DROPPED))
def test_check_refuses_a_value_no_site_can_read(request: pytest.FixtureRequest, noop: NoopRun,
                                                tmp_path: Path, program: str) -> None:
    binary: Path = request.getfixturevalue(program)
    probes = DROPPED[program]
    done = noop("check", "--config", _spec(tmp_path, binary, probes))
    assert done.returncode == 2, done.stdout
    lines = done.stderr.strip().splitlines()
    values = sum(len(p["values"]) for p in yaml.safe_load(probes))
    assert len(lines) == values, done.stderr  # one line for each value
    assert all("cannot be read at any site of" in line for line in lines), done.stderr
    assert "Traceback" not in done.stderr
    assert all(re.search(r"look where it is called: (dropped::)?main at (main\.rs|dropped\.c)",
                         line) for line in lines), done.stderr


def test_check_refuses_a_gcc_clone_argument(c_dropped_gcc: Path, noop: NoopRun,
                                            tmp_path: Path) -> None:
    tally = _clone(c_dropped_gcc, "tally")
    done = noop("check", "--config", _spec(tmp_path, c_dropped_gcc, f"""
  - {{name: tally, function: '{tally}', values: {{id: o.id, qty: qty}}}}
"""))
    assert done.returncode == 2, done.stdout
    (line,) = done.stderr.strip().splitlines()
    assert "id: o.id cannot be read at any site" in line and "compiler clone" in line


# What each program passed, per call (its JSON lines), against what noop read.
READABLE: dict[str, tuple[str, list[tuple[str, Callable[[dict[str, Any]], dict[str, int]]]]]] = {
    "rust_dropped": ("""
  - {name: post, function: 'dropped::post', values: {total: {read: total, as: int}}}
  - {name: exported, function: exported, values: {a: a}}
  - {name: score, function: 'dropped::score', values: {amount: e.amount_cents, weight: weight}}
  - {name: scored, function: 'dropped::score', at: exit, values: {r: '~r0'}}
""", [("post", lambda c: {"total": c["total_before"]}),
      ("exported", lambda c: {"a": c["exported_a"]}),
      ("score", lambda c: {"amount": c["amount"], "weight": c["weight"]}),
      ("scored", lambda c: {"r": c["amount"] * c["weight"] + len("memo")})]),
    "c_dropped_clang": ("""
  - {name: tally, function: tally, values: {id: o.id, qty: qty}}
  - {name: quantity, function: quantity, values: {qty: o.qty, scale: scale}}
  - {name: kept, function: kept, values: {a: a, qty: o.qty}}
  - {name: kept_done, function: kept, at: exit, values: {r: '~r0'}}
  - {name: kept_used, function: kept_used, values: {a: a, spare: spare}}
  - {name: settle, function: settle, values: {id: o.id, rounds: rounds}}
  - {name: priced, function: priced, at: exit, values: {id: ~r0.id, qty: ~r0.qty}}
""", [("tally", lambda c: {"id": c["id"], "qty": c["tally_qty"]}),
      ("quantity", lambda c: {"qty": c["qty"], "scale": c["scale"]}),
      ("kept", lambda c: {"a": c["kept_a"], "qty": c["qty"]}),
      ("kept_done", lambda c: {"r": c["kept_a"] + c["qty"]}),
      ("kept_used", lambda c: {"a": c["used_a"], "spare": c["spare"]}),
      ("settle", lambda c: {"id": c["id"], "rounds": c["rounds"]}),
      ("priced", lambda c: {"id": 2 * c["id"], "qty": c["qty"] + 1})]),
    "c_dropped_gcc": ("""
  - {name: tally, function: TALLY, values: {qty: qty}}
  - {name: quantity, function: QUANTITY, values: {scale: scale}}
  - {name: kept, function: kept, values: {a: a, spare: spare, qty: o.qty}}
  - {name: settle, function: SETTLE, values: {id: o.id, rounds: rounds}}
  - {name: priced, function: priced, at: exit, values: {id: ~r0.id, qty: ~r0.qty}}
""", [("tally", lambda c: {"qty": c["tally_qty"]}),
      ("quantity", lambda c: {"scale": c["scale"]}),
      ("kept", lambda c: {"a": c["kept_a"], "spare": c["unused"], "qty": c["qty"]}),
      ("settle", lambda c: {"id": c["id"], "rounds": c["rounds"]}),
      ("priced", lambda c: {"id": 2 * c["id"], "qty": c["qty"] + 1})]),
}


def _calls(binary: Path) -> list[dict[str, Any]]:
    done = subprocess.run([str(binary), str(CALLS)], capture_output=True, text=True,
                          timeout=120, check=True)
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    return [x for x in lines if "sum" not in x and "settled" not in x]


@pytest.mark.parametrize("program", list(READABLE))
def test_trace_reads_what_is_still_passed(privileged: None, request: pytest.FixtureRequest,
                                          tmp_path: Path, program: str) -> None:
    binary: Path = request.getfixturevalue(program)
    probes, expected = READABLE[program]
    if program == "c_dropped_gcc":
        for name in ("tally", "quantity", "settle"):
            probes = probes.replace(name.upper(), _clone(binary, name))
    with tracing(tmp_path, "--config", _spec(tmp_path, binary, probes)) as noop:
        calls = _calls(binary)
    assert noop.exit == 0, noop.stderr
    assert len(calls) == CALLS
    for probe, truth in expected:
        got = [line["values"] for line in noop.lines if line["probe"] == probe]
        assert got == [truth(c) for c in calls], probe
    assert not any(line.get("unreadable") for line in noop.lines)


def test_trace_never_prints_a_number_for_a_dropped_value(privileged: None,
                                                         c_dropped_clang: Path,
                                                         tmp_path: Path) -> None:
    """kept and kept_used share a signature; clang's callers pass spare only to the one
    that reads it. One probe on both: a number from kept_used, none from kept."""
    spec = _spec(tmp_path, c_dropped_clang,
                 "  - {name: kept, match: 'kept*', values: {a: a, spare: spare}}\n")
    with tracing(tmp_path, "--config", spec) as noop:
        calls = _calls(c_dropped_clang)
    assert noop.exit == 0, noop.stderr
    kept = [line for line in noop.lines if line["function"] == "kept"]
    used = [line for line in noop.lines if line["function"] == "kept_used"]
    assert [x["values"] for x in used] == [{"a": c["used_a"], "spare": c["spare"]}
                                           for c in calls]
    assert [x["values"] for x in kept] == [{"a": c["kept_a"], "spare": None} for c in calls]
    assert all("need not pass it" in x["unreadable"]["spare"] for x in kept)
