"""The CLI as a user meets it: bad input gets one line and a non-zero exit, never a
traceback; funcs agrees with the symbol table; cold and warm answers are the same."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from harness.noop import run as run_noop

NoopRun = Callable[..., "subprocess.CompletedProcess[str]"]


def one_line_error(done: subprocess.CompletedProcess[str], *needles: str) -> str:
    assert done.returncode != 0, done.stdout
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


def test_missing_file(noop: NoopRun) -> None:
    one_line_error(noop("struct", "/nonexistent/main", "main.T"), "no such file")


def test_not_an_elf_file(noop: NoopRun, tmp_path: Path) -> None:
    script = tmp_path / "run.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    one_line_error(noop("vars", script, "main.main"), "not an ELF file")


def test_a_directory(noop: NoopRun, tmp_path: Path) -> None:
    one_line_error(noop("funcs", tmp_path), "is a directory")


def test_stripped_binary_says_what_to_do(noop: NoopRun, c_layouts: Path,
                                         tmp_path: Path) -> None:
    stripped = tmp_path / "stripped"
    shutil.copy(c_layouts, stripped)
    subprocess.run(["strip", "--strip-debug", str(stripped)], check=True)
    line = one_line_error(noop("struct", stripped, "job"), "no DWARF")
    assert "-g" in line  # the fix for C


def test_unknown_type_suggests_the_full_name(noop: NoopRun, go_layouts_119: Path) -> None:
    line = one_line_error(noop("struct", go_layouts_119, "prometheus.counter"), "not found")
    assert "github.com/prometheus/client_golang/prometheus.counter" in line


def test_unknown_function_suggests_the_full_name(noop: NoopRun, go_layouts_119: Path) -> None:
    line = one_line_error(noop("vars", go_layouts_119, "prometheus.(*counter).Inc"),
                          "not found")
    assert "github.com/prometheus/client_golang/prometheus.(*counter).Inc" in line


def test_struct_of_a_non_struct_type_says_what_it_is(noop: NoopRun, go_layouts_119: Path) -> None:
    one_line_error(noop("struct", go_layouts_119, "uint64"), "not a struct", "8 bytes")


def test_glob_matching_nothing(noop: NoopRun, go_layouts_119: Path) -> None:
    one_line_error(noop("funcs", go_layouts_119, "nosuch*"), "no function matches")


def nm_functions(binary: Path) -> dict[str, int]:
    out = subprocess.run(["nm", "--defined-only", str(binary)], capture_output=True,
                         text=True, check=True).stdout
    funcs = {}
    for line in out.splitlines():
        m = re.match(r"([0-9a-f]+) [Tt] (.+)$", line)
        if m:
            funcs.setdefault(m.group(2), int(m.group(1), 16))
    return funcs


def test_funcs_lists_every_function_symbol_at_its_address(
        noop_json: Callable[..., Any], go_layouts_119: Path) -> None:
    got_json = noop_json("funcs", go_layouts_119, "--json")
    assert got_json["go_version"].startswith("go1.19")
    assert got_json["debug"] == "in the binary"
    rows = got_json["functions"]
    nm = nm_functions(go_layouts_119)
    got = {r["name"]: r["address"] for r in rows}
    assert {k: v for k, v in nm.items() if v} == {k: got.get(k) for k, v in nm.items() if v}
    assert all(set(r) >= {"name", "address", "size", "inlined"} for r in rows)


def test_funcs_counts_inlined_instances(noop_json: Callable[..., Any],
                                        go_layouts_119: Path) -> None:
    # Count DW_TAG_inlined_subroutine instances of one function with llvm-dwarfdump.
    name = "github.com/prometheus/client_golang/prometheus.(*counter).Add"
    dump = subprocess.run(["llvm-dwarfdump", "--debug-info", str(go_layouts_119)],
                          capture_output=True, text=True, check=True).stdout
    head = r"^(0x[0-9a-f]+):\s+DW_TAG_subprogram\n\s+DW_AT_name\s+\(\""
    abstract = {int(o, 16) for o in re.findall(head + re.escape(name) + r"\"\)\n\s+DW_AT_inline",
                                               dump, re.M)}
    origin = r"DW_TAG_inlined_subroutine\n\s+DW_AT_abstract_origin\s+\((0x[0-9a-f]+)"
    want = sum(1 for b in re.findall(origin, dump) if int(b, 16) in abstract)
    assert want > 0, "the test program no longer inlines (*counter).Add: pick another"
    rows = noop_json("funcs", go_layouts_119, name, "--json")["functions"]
    assert [r["inlined"] for r in rows] == [want]


def test_cold_and_warm_answers_are_identical(go_layouts_new: Path, tmp_path: Path) -> None:
    args = ("vars", go_layouts_new,
            "github.com/prometheus/client_golang/prometheus.(*gauge).Add", "--json")
    cold = run_noop(*args, cache=tmp_path).stdout
    assert any(tmp_path.rglob("vars-*.json")), "the answer was not cached"
    warm = run_noop(*args, cache=tmp_path).stdout
    assert json.loads(cold) == json.loads(warm)
    assert json.loads(warm)["params"][1]["location"] == [{"reg": "xmm0", "size": 8}]


@pytest.mark.parametrize("command", ["funcs", "struct", "vars"])
def test_usage_errors_exit_2(noop: NoopRun, command: str) -> None:
    done = noop(command)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr


def test_every_command_has_help(capsys: pytest.CaptureFixture[str]) -> None:
    """`noop --help` and `noop COMMAND --help` print usage and exit 0, for every command
    the parser has (a stray % in a help string once made them a traceback)."""
    import argparse

    from agent.cli import parser

    p = parser()
    sub = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
    commands = sorted(sub.choices)
    assert {"run", "check", "funcs", "doctor"} <= set(commands)
    for argv in ([], *([c] for c in commands)):
        with pytest.raises(SystemExit) as done:
            parser().parse_args([*argv, "--help"])
        out = capsys.readouterr().out
        assert done.value.code == 0, argv
        assert out.startswith("usage: noop"), (argv, out)


def test_an_answer_leaves_at_once_with_all_written(rust_layouts: Path, tmp_path: Path
                                                   ) -> None:
    """``noop funcs`` ends without the interpreter's teardown (``cli.main``'s ``leave``):
    its output whole, its answer cached, no cache writer still writing."""
    from agent.tools import inspect, render

    done = run_noop("funcs", rust_layouts, cache=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == render.funcs_table(inspect.function_list(str(rust_layouts))) + "\n"
    assert any(tmp_path.rglob("funcs-*.json")), "the answer was not cached"
    assert not any(tmp_path.rglob(".tmp-*")), "a cache writer was still writing"
    warm = run_noop("funcs", rust_layouts, "--json", cache=tmp_path)
    assert json.loads(warm.stdout)["functions"] == inspect.function_list(str(rust_layouts))
