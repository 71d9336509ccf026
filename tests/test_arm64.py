"""arm64 binaries read on this x86-64 machine (``agent.binary.arch``): the example
(examples/go-prometheus) cross-built with GOARCH=arm64 by Go 1.19 and the newest Go,
with DWARF and stripped. ``noop funcs`` lists what the symbol table (nm) lists,
``struct`` lays a struct out as llvm-dwarfdump reads its DWARF, ``vars`` puts Go's
register arguments in the registers DWARF names (x0, x1: AADWARF64's numbers) and, on
a stripped build, where the Go arm64 register ABI assigns them; ``lines`` gives the
statement addresses of the DWARF line table. A plan (check, run, a trace) is refused in
one line: noop makes no probes for arm64 yet."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from harness.noop import run
from harness.programs import go_build, go_toolchain

from agent.binary.abi import goabi
from agent.binary.abi.shape import Shape, word
from agent.binary.arch import ARM64
from agent.binary.dwarf.locations import Piece
from agent.tools import inspect

pytestmark = pytest.mark.builds  # cross-builds of the example

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "go-prometheus"
VARIANTS = [(v, s) for v in ("1.19", "newest") for s in ("dwarf", "stripped")]


def test_the_go_arm64_register_abi() -> None:
    """abi-internal.md's arm64 registers: integers in R0 to R15 (x0..), floats in F0 to
    F15 (v0..); results from the first registers again; past sixteen, the stack from 8
    (the word at 0(SP) is the callee's, for the link register)."""
    string = Shape("string", 16, 8)
    a = goabi.assign([word("int"), string, word("float")], [word("int")], arch=ARM64)
    assert [[p.reg for p in x] for x in a.args] == [["x0"], ["x1", "x2"], ["v0"]]
    assert [[p.reg for p in x] for x in a.results] == [["x0"]]
    many = goabi.assign([word("int")] * 17, [], arch=ARM64)
    assert [x[0].reg for x in many.args[:16]] == [f"x{n}" for n in range(16)]
    assert many.args[16] == (Piece(8, stack=8),)


@pytest.fixture(scope="module", params=VARIANTS, ids=lambda v: f"go{v[0]}-{v[1]}")
def built(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
          ) -> tuple[str, Path, Path]:
    """(variant, the arm64 build, its build with DWARF)."""
    version, variant = request.param
    out = tmp_path_factory.mktemp(f"arm64-{version}")
    go = go_toolchain(version)
    twin = go_build(go, out / "dwarf" / "go-prometheus", None, EXAMPLE, goarch="arm64")
    if variant == "dwarf":
        return variant, twin, twin
    return variant, go_build(go, out / "stripped" / "go-prometheus", None, EXAMPLE,
                             ("-ldflags=-s -w",), goarch="arm64"), twin


def _machine(binary: Path) -> int:
    return int.from_bytes(binary.read_bytes()[18:20], "little")


def test_funcs_are_the_symbol_tables(built: tuple[str, Path, Path]) -> None:
    _variant, binary, twin = built
    assert _machine(binary) == 183  # EM_AARCH64
    nm = subprocess.run(["nm", "--defined-only", str(twin)], capture_output=True, text=True,
                        check=True).stdout
    want = {int(a, 16): n for a, t, n in (line.split(" ", 2) for line in nm.splitlines())
            if t in "tT" and n.startswith("main.")}
    got = {r["address"]: r["name"] for r in inspect.function_list(str(binary), "main.*")}
    assert got == want


def test_struct_layout_is_the_dwarfs(built: tuple[str, Path, Path]) -> None:
    variant, binary, twin = built
    # stripped: main.metrics, whose type descriptor the build keeps (main.order has none)
    name = "main.metrics" if variant == "stripped" else "main.order"
    mine = {m["name"]: (m["offset"], m["size"])
            for m in inspect.struct_layout(str(binary), name)["members"]}
    text = subprocess.run(["llvm-dwarfdump", "--debug-info", "--name", name, "-c",
                           str(twin)], capture_output=True, text=True, check=True).stdout
    members = re.findall(r'DW_TAG_member\s+DW_AT_name\s+\("([^"]+)"\).*?'
                         r"DW_AT_data_member_location\s+\((0x[0-9a-f]+|\d+)\)", text, re.S)
    assert members and {n: int(o, 0) for n, o in members} == \
        {n: o for n, (o, _s) in mine.items()}


def test_vars_are_in_the_registers_dwarf_names(built: tuple[str, Path, Path]) -> None:
    """(*metrics).tick(n int): the receiver in x0, n in x1, as llvm-dwarfdump reads the
    build's location lists at the entry (DW_OP_reg0 W0, DW_OP_reg1 W1), and as the ABI
    assigns them on the stripped build."""
    variant, binary, twin = built
    fn = "main.(*metrics).tick"
    got = inspect.function_vars(str(binary), fn)
    assert [(p["type"], [x.get("reg") for x in p["location"]]) for p in got["params"]] == \
        [("*main.metrics", ["x0"]), ("int", ["x1"])]
    assert got["abi"] == "go-internal (register)"
    if variant == "dwarf":
        text = subprocess.run(["llvm-dwarfdump", "--debug-info", "--name", fn, "-c",
                               str(twin)], capture_output=True, text=True, check=True).stdout
        # the registers at the entry as llvm-dwarfdump names them (W0: the low half of x0)
        assert "DW_OP_reg0 W0" in text and "DW_OP_reg1 W1" in text


def test_lines_are_the_line_tables(built: tuple[str, Path, Path]) -> None:
    """Each line's sites are statements of the DWARF line table (a stripped build's, from
    pclntab, which marks no statements: rows of the twin's table, where a line starts)."""
    variant, binary, twin = built
    got = inspect.function_lines(str(binary), "main.placeOrder")
    mine = {s["address"] for e in got["lines"] for s in e["sites"]}
    table = subprocess.run(["llvm-dwarfdump", "--debug-line", str(twin)], capture_output=True,
                           text=True, check=True).stdout
    start = inspect.function_list(str(twin), "main.placeOrder")[0]
    lo, hi = start["address"], start["address"] + start["size"]
    # address, line, column, file, ISA, discriminator, flags
    flags = r"\s+is_stmt$" if variant == "dwarf" else r"(?:\s+is_stmt)?\s*$"
    stmts = {int(m[1], 16) for m in re.finditer(rf"^0x([0-9a-f]+)(?:\s+\d+){{5}}{flags}",
                                                table, re.M) if lo <= int(m[1], 16) < hi}
    assert mine and mine <= stmts | {lo}
    assert got["note"].startswith("noop makes no probes for arm64 yet")


def test_a_plan_is_refused_in_one_line(built: tuple[str, Path, Path]) -> None:
    _variant, binary, _twin = built
    for args in (("check", "--binary", binary), ("--binary", binary, "--duration", "1"),
                 ("run", "--binary", binary, "--listen", "127.0.0.1:0")):
        done = run(*args, timeout=60)
        assert done.returncode != 0
        lines = [x for x in done.stderr.splitlines() if x.strip()]
        assert len(lines) == 1 and "is an arm64 binary" in lines[0] and \
            "Traceback" not in done.stderr, done.stderr
