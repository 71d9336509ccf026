"""`noop vars` against llvm-dwarfdump: parameter locations at a function's entry.

For each parameter the expected answer is DWARF's location at the entry PC
(source "dwarf") when that location can be right at the entry, that is when
every piece is a register or a stack slot at or above SP + 8. Otherwise the
expected answer is the calling convention's (source "abi"), worked out by
hand below from the ABI documents:

* Go results (DWARF gives them no location), and the few places where Go's
  DWARF is wrong at the entry (DWARF_WRONG, each with its evidence);
* C at -O0, whose DWARF names frame slots the prologue has not yet written
  (below the entry SP), and one union at -O2 (same reason);
* Rust at opt-level 0, whose frame base is RSP after the prologue.

The hand-worked tables are themselves checked against DWARF wherever DWARF
is right (test_hand_worked_abi_agrees_with_dwarf), so they cannot drift.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from oracles import dwarfdump, machine

Location = list[dict[str, Any]]

PROMETHEUS = "github.com/prometheus/client_golang/prometheus."


def reg(name: str, size: int = 8) -> dict[str, Any]:
    return {"reg": name, "size": size}


def stack(offset: int, size: int = 8) -> dict[str, Any]:
    return {"stack": offset, "size": size}


# Functions per program: (name as noop and the symbol table spell it, ABI key).
# Go 1.19 names generic instantiations go.shape.int_0, newer Go go.shape.int.
GO_COMMON = [
    "main.Point.Area", "main.manyInts", "main.spill", "main.spillLen", "main.mixed",
    "main.withStrings", "main.withSlices", "main.floats", "main.scale", "main.bigByValue",
    "main.arrays", "main.multi", "main.interfaces", "main.(*Order).AddItem", "main.describe",
    PROMETHEUS + "(*counter).Inc", PROMETHEUS + "(*counter).Add", PROMETHEUS + "(*gauge).Add",
    PROMETHEUS + "(*gauge).Set", PROMETHEUS + "(*histogram).Observe",
]
FUNCTIONS: dict[str, list[tuple[str, str]]] = {
    "go_layouts_119": [(f, f) for f in GO_COMMON] + [
        ("main.sum[go.shape.int_0]", "main.sum[int]"),
        ("main.sum[go.shape.float64_0]", "main.sum[float64]"),
    ],
    "go_layouts_new": [(f, f) for f in GO_COMMON] + [
        ("main.sum[go.shape.int]", "main.sum[int]"),
        ("main.sum[go.shape.float64]", "main.sum[float64]"),
    ],
    "c_layouts": [(f, f) for f in ("add_ints", "mix", "by_value", "with_job", "with_packet")],
    "c_layouts_o2": [(f, f) for f in ("add_ints", "mix", "by_value", "with_job", "with_packet")],
    "rust_layouts": [(f, f) for f in ("layouts::add_ints", "layouts::mix_floats",
                                      "layouts::take_str")],
}
ABI_FAMILY = {"go_layouts_119": "go", "go_layouts_new": "go", "c_layouts": "sysv",
              "c_layouts_o2": "sysv", "rust_layouts": "rust"}

# Go's internal ABI (cmd/compile/abi-internal.md), amd64: integer registers
# RAX RBX RCX RDI RSI R8 R9 R10 R11, floats X0-X14; strings, slices,
# interfaces and structs are split field by field; a value that does not fit
# in the registers left goes to the stack whole (and frees what it would have
# taken); arrays longer than 1 always go to the stack; results start again
# from RAX and X0. Stack arguments start at SP + 8 at the entry.
GO_PARAMS: dict[tuple[str, str], Location] = {
    ("main.mixed", "a"): [reg("rax")],
    ("main.mixed", "s"): [reg("rbx"), reg("rcx")],
    ("main.mixed", "x"): [reg("xmm0")],
    ("main.spill", "h"): [reg("r10")],
    ("main.spill", "s"): [stack(8), stack(16)],  # one register (R11) left: too few
    ("main.spillLen", "s"): [stack(8, 16)],
    ("main.manyInts", "i"): [reg("r11")],
    ("main.manyInts", "j"): [stack(8)],
    ("main.manyInts", "k"): [stack(16)],
    ("main.floats", "b"): [reg("xmm1", 4)],
    ("main.floats", "c"): [reg("rax")],
    ("main.floats", "d"): [reg("xmm2")],
    ("main.scale", "p"): [reg("xmm0"), reg("xmm1")],
    ("main.scale", "by"): [reg("xmm2")],
    ("main.bigByValue", "o"): [stack(8, 96)],  # needs 10 integer registers
    ("main.bigByValue", "limit"): [reg("rax")],
    ("main.arrays", "a"): [stack(8, 16)],
    ("main.arrays", "b"): [reg("rax", 4)],
    ("main.arrays", "c"): [reg("rbx")],
    ("main.multi", "a"): [reg("rax", 1)],
    ("main.multi", "b"): [reg("rbx", 2)],
    ("main.multi", "c"): [reg("rcx", 4)],
    ("main.multi", "d"): [reg("rdi", 1)],
    ("main.(*Order).AddItem", "o"): [reg("rax")],
    # Item{SKU string; Qty int32; Price float64}: DWARF (and so noop) lists
    # the pieces without the 4 bytes of padding after Qty.
    ("main.(*Order).AddItem", "it"): [reg("rbx"), reg("rcx"), reg("rdi", 4), reg("xmm0")],
    ("main.describe", "c"): [reg("rax")],
    ("main.describe", "s"): [stack(8, 88)],  # 9 integer registers, 8 left
    ("main.describe", "p"): [reg("rbx"), reg("rcx"), reg("rdi"), reg("rsi", 1)],
    ("main.sum[int]", ".dict"): [reg("rax")],
    ("main.sum[int]", "xs"): [reg("rbx"), reg("rcx"), reg("rdi")],
    ("main.sum[float64]", ".dict"): [reg("rax")],
    (PROMETHEUS + "(*counter).Add", "c"): [reg("rax")],
    (PROMETHEUS + "(*counter).Add", "v"): [reg("xmm0")],
    (PROMETHEUS + "(*gauge).Set", "val"): [reg("xmm0")],
}
GO_RESULTS: dict[str, list[Location]] = {
    "main.Point.Area": [[reg("xmm0")]],
    "main.sum[int]": [[reg("rax")]],
    "main.sum[float64]": [[reg("xmm0")]],
    "main.manyInts": [[reg("rax")]],
    "main.spill": [[reg("rax")]],
    "main.spillLen": [[reg("rax")]],
    "main.mixed": [[reg("rax")], [reg("rbx"), reg("rcx")]],
    "main.withStrings": [[reg("rax"), reg("rbx")]],
    "main.withSlices": [[reg("rax")], [reg("rbx")]],
    "main.floats": [[reg("xmm0")]],
    "main.scale": [[reg("xmm0"), reg("xmm1")]],
    "main.bigByValue": [[reg("rax")]],
    "main.arrays": [[reg("rax")]],
    "main.multi": [[reg("rax")], [reg("rbx"), reg("rcx")], [reg("rdi"), reg("rsi")]],
    "main.interfaces": [[reg("xmm0")]],
    "main.(*Order).AddItem": [[reg("rax")], [reg("rbx"), reg("rcx")]],
    "main.describe": [[reg("rax"), reg("rbx")]],
    PROMETHEUS + "(*counter).Inc": [],
    PROMETHEUS + "(*counter).Add": [],
    PROMETHEUS + "(*gauge).Add": [],
    PROMETHEUS + "(*gauge).Set": [],
    PROMETHEUS + "(*histogram).Observe": [],
}

# System V AMD64 psABI 3.2.3: INTEGER class in RDI RSI RDX RCX R8 R9, SSE in
# XMM0-7, by eightbyte; aggregates over 16 bytes in memory (stack from SP + 8).
SYSV_PARAMS: dict[tuple[str, str], Location] = {
    ("add_ints", "a"): [reg("rdi", 4)],
    ("add_ints", "b"): [reg("rsi")],
    ("add_ints", "c"): [reg("rdx", 2)],
    ("add_ints", "d"): [reg("rcx", 1)],
    ("add_ints", "e"): [reg("r8", 4)],
    ("add_ints", "f"): [reg("r9")],
    ("add_ints", "g"): [stack(8)],
    ("mix", "x"): [reg("xmm0")],
    ("mix", "n"): [reg("rdi", 4)],
    ("mix", "y"): [reg("xmm1", 4)],
    ("mix", "s"): [reg("rsi")],
    ("by_value", "p"): [reg("rdi")],  # {int, int}: one INTEGER eightbyte
    ("by_value", "q"): [reg("rsi"), reg("xmm0")],  # {long, double}: INTEGER, SSE
    ("by_value", "r"): [stack(8, 20)],  # 20 bytes: memory
    ("with_job", "j"): [reg("rdi")],
    ("with_job", "f"): [reg("rsi"), reg("rdx")],
    ("with_job", "v"): [reg("rcx"), reg("r8")],  # int64|double merge to INTEGER
    ("with_packet", "p"): [reg("rdi")],
    ("with_packet", "cb"): [reg("rsi")],
    ("with_packet", "s"): [reg("rdx", 4)],
}

# Rust's own ABI at these signatures matches System V for scalars; a &str is
# a scalar pair (pointer, length) in two registers.
RUST_PARAMS: dict[tuple[str, str], Location] = {
    ("layouts::add_ints", "a"): [reg("rdi")],
    ("layouts::add_ints", "b"): [reg("rsi", 4)],
    ("layouts::add_ints", "c"): [reg("rdx", 1)],
    ("layouts::add_ints", "d"): [reg("rcx")],
    ("layouts::add_ints", "e"): [reg("r8", 2)],
    ("layouts::add_ints", "f"): [reg("r9")],
    ("layouts::add_ints", "g"): [stack(8)],
    ("layouts::add_ints", "h"): [stack(16)],
    ("layouts::mix_floats", "x"): [reg("xmm0")],
    ("layouts::mix_floats", "n"): [reg("rdi", 4)],
    ("layouts::mix_floats", "y"): [reg("xmm1", 4)],
    ("layouts::take_str", "s"): [reg("rdi"), reg("rsi")],
    ("layouts::take_str", "t"): [reg("rdx")],
    ("layouts::take_str", "v"): [reg("rcx")],
}
ABI_PARAMS = {"go": GO_PARAMS, "sysv": SYSV_PARAMS, "rust": RUST_PARAMS}

# Where DWARF's location at the entry looks usable but is wrong:
# (program, ABI key, parameter) -> what DWARF says. The truth is in ABI_PARAMS.
DWARF_WRONG: dict[tuple[str, str, str], Location] = {
    # Only len(s) is used: Go drops the pointer piece and gives the whole
    # string one location, at the length word (CFA+8). The caller stores the
    # pointer at its 0(SP) and the length at 8(SP), that is SP+8 and SP+16
    # at the callee's entry, and the callee reads the length at 0x10(%rsp).
    ("go_layouts_119", "main.spillLen", "s"): [stack(16, 16)],
    ("go_layouts_new", "main.spillLen", "s"): [stack(16, 16)],
    # The dictionary of a generic function is its first argument, in RAX
    # (the caller does `lea main..dict.sum[int](%rip),%rax`); newer Go's DWARF
    # places it in its stack spill slot (DW_OP_call_frame_cfa) from the
    # entry on. Go 1.19 emits no .dict parameter at all.
    ("go_layouts_new", "main.sum[int]", ".dict"): [stack(8)],
    ("go_layouts_new", "main.sum[float64]", ".dict"): [stack(8)],
}

CASES = [pytest.param(program, name, key, id=f"{program}-{name}")
         for program, functions in FUNCTIONS.items() for name, key in functions]


def expected_vars(program: str, name: str, key: str,
                  function: dwarfdump.Function) -> dict[str, Any]:
    """What noop vars must print for FUNCTION, from DWARF and the hand-worked ABI."""
    table = ABI_PARAMS[ABI_FAMILY[program]]

    def abi(param: str) -> Location:
        if (key, param) not in table:
            pytest.fail(f"DWARF gives {key}({param}) no usable entry location and the test "
                        f"has no hand-worked ABI answer for it: add one")
        return table[(key, param)]

    params = []
    for p in function.arguments:
        if (program, key, p.name) in DWARF_WRONG:
            params.append({"name": p.name, "location": abi(p.name), "source": "abi"})
        elif p.valid_at_entry:
            params.append({"name": p.name, "location": p.location_json(), "source": "dwarf"})
        else:
            params.append({"name": p.name, "location": abi(p.name), "source": "abi"})
    expected: dict[str, Any] = {"function": name, "address": function.low_pc, "params": params}
    if ABI_FAMILY[program] == "go":
        results = GO_RESULTS[key]
        assert len(results) == len(function.results), f"{key}: results table out of date"
        expected["results"] = [{"name": p.name, "location": loc, "source": "abi"}
                               for p, loc in zip(function.results, results, strict=True)]
    return expected


def _address(value: Any) -> int:
    return int(value, 0) if isinstance(value, str) else int(value)


def actual_vars(result: dict[str, Any], go: bool) -> dict[str, Any]:
    """noop's answer in the comparison form: types left out, address as a number."""

    def strip(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{"name": e["name"], "location": e["location"], "source": e["source"]}
                for e in entries]

    actual = {"function": result["function"],
              "address": _address(result["address"]), "params": strip(result["params"])}
    if go:
        actual["results"] = strip(result["results"])
    return actual


@pytest.mark.usefixtures("oracle_tools")
@pytest.mark.parametrize(("program", "name", "key"), CASES)
def test_vars_match_dwarf_and_abi(request: pytest.FixtureRequest, noop_json: Callable[..., Any],
                                  program: str, name: str, key: str) -> None:
    binary: Path = request.getfixturevalue(program)
    function = dwarfdump.function_at(binary, name)
    want = expected_vars(program, name, key, function)
    got = noop_json("vars", binary, name, "--json")
    assert actual_vars(got, go=ABI_FAMILY[program] == "go") == want


@pytest.mark.usefixtures("oracle_tools")
@pytest.mark.parametrize(("program", "name", "key"), CASES)
def test_hand_worked_abi_agrees_with_dwarf(request: pytest.FixtureRequest, program: str,
                                           name: str, key: str) -> None:
    """Where DWARF is usable at the entry, the hand-worked ABI answers equal it.

    Where it is not, the reason is one of the documented ones. This runs
    without noop: it checks the oracle, the tables and the test programs.
    """
    binary: Path = request.getfixturevalue(program)
    function = dwarfdump.function_at(binary, name)
    table = ABI_PARAMS[ABI_FAMILY[program]]
    for p in function.arguments:
        where = f"{program} {name}({p.name}): DWARF {p.expression!r}"
        if (program, key, p.name) in DWARF_WRONG:
            assert p.status == "ok" and p.valid_at_entry, where
            assert p.location_json() == DWARF_WRONG[(program, key, p.name)], where
            assert table[(key, p.name)] != p.location_json(), where
        elif p.valid_at_entry:
            if (key, p.name) in table:
                assert p.location_json() == table[(key, p.name)], where
        elif program == "rust_layouts":
            assert p.status == "frame", where  # frame base RSP after the prologue
        elif program.startswith("c_layouts"):
            # A frame slot below the entry SP: written by the prologue, later.
            assert p.status == "ok", where
            assert any(x.stack is not None and x.stack < 8 for x in p.pieces), where
        else:
            pytest.fail(f"{where}: unexpected DWARF at the entry ({p.status})")
    if ABI_FAMILY[program] == "go":
        assert all(r.status == "none" for r in function.results), "Go results have no location"


@pytest.mark.usefixtures("oracle_tools")
def test_go119_has_no_dict_parameter(go_layouts_119: Path, go_layouts_new: Path) -> None:
    """Go 1.19 leaves a generic function's dictionary out of DWARF; newer Go lists it first."""
    old = dwarfdump.function_at(go_layouts_119, "main.sum[go.shape.int_0]")
    new = dwarfdump.function_at(go_layouts_new, "main.sum[go.shape.int]")
    assert [p.name for p in old.params] == ["xs", "~r0"]
    assert [p.name for p in new.params] == [".dict", "xs", "~r0"]


# --- the ABI answers against the machine code they describe -------------------
#
# The ABI answers of `noop vars` against the machine code they describe.
#
# Where DWARF gives a parameter no usable location at the entry, noop answers from the
# calling convention, and test_oracle_vars holds hand-worked tables of those answers.
# This test checks every such answer against what the compiled code itself does
# (objdump): the function reads the argument's register before writing it (or its caller
# sets the register just before the call), or reads its stack slot; the function sets a
# result's register just before returning (or its caller reads it just after).


def _confirmed(binary: Path, address: int, piece: dict[str, Any], result: bool) -> bool:
    """Whether the code shows the piece where noop says: a register argument read by
    the function before it writes it, or set by a caller just before the call; a stack
    argument read from its slot; a result register set just before a RET, or read by a
    caller just after the call."""
    reg = piece.get("reg")
    if reg is not None and result:
        return machine.writes_before_ret(binary, address, reg) or \
            machine.caller_reads_after_call(binary, address, reg)
    if reg is not None:
        return machine.reads_register_first(binary, address, reg) or \
            machine.caller_sets_before_call(binary, address, reg)
    return machine.reads_stack(binary, address, piece["stack"], piece["size"])


@pytest.mark.usefixtures("oracle_tools")
@pytest.mark.parametrize(("program", "name", "key"), CASES)
def test_abi_answers_match_the_machine_code(request: pytest.FixtureRequest,
                                            noop_json: Callable[..., Any], program: str,
                                            name: str, key: str) -> None:
    binary: Path = request.getfixturevalue(program)
    function = dwarfdump.function_at(binary, name)
    want = expected_vars(program, name, key, function)
    got = noop_json("vars", binary, name, "--json")
    entries = [(p, False) for p in want["params"]] + \
        [(r, True) for r in want.get("results", [])]
    checked = 0
    for entry, result in entries:
        if entry["source"] != "abi":
            continue
        for piece in entry["location"]:
            assert _confirmed(binary, function.low_pc, piece, result), \
                f"{name} {entry['name']}: the machine code does not use {piece}"
            checked += 1
    by_name = {e["name"]: e for e in got["params"] + got["results"]}
    for entry, _result in entries:
        assert by_name[entry["name"]]["source"] == entry["source"], entry["name"]
    abi = sum(e["source"] == "abi" for e, _ in entries)
    assert checked >= abi, f"{name}: {abi} ABI answers, {checked} pieces checked"
    if ABI_FAMILY[program] == "go" and want.get("results"):
        assert any(r["source"] == "abi" for r in want["results"])
