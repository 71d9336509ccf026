"""The ABI answers of `noop vars` against the machine code they describe.

Where DWARF gives a parameter no usable location at the entry, noop answers from the
calling convention, and test_oracle_vars holds hand-worked tables of those answers.
This test checks every such answer against what the compiled code itself does
(objdump): the function reads the argument's register before writing it (or its caller
sets the register just before the call), or reads its stack slot; the function sets a
result's register just before returning (or its caller reads it just after).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from oracles import dwarfdump, machine
from test_oracle_vars import ABI_FAMILY, CASES, expected_vars


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
