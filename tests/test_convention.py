"""Which Rust values rustc passes where System V would, and which results come back in
memory: table tests of agent.dwarf.convention, with what rustc 1.95 compiles them to
at opt-level 0 (checked with objdump) as the expected answers."""

import pytest

from agent.binary.abi.shape import Shape, struct, word
from agent.binary.dwarf import convention

U32, U64, F32, F64 = word("int", 4), word("int"), word("float", 4), word("float")
FAT = struct(U64, U64)
UNIT = Shape("struct", 0, 1)


@pytest.mark.parametrize(("args", "names", "placed"), [
    # fn f(a: u64, b: &u64, x: f64): scalars and thin pointers, as System V.
    ([U64, U64, F64], ["u64", "&u64", "f64"], [True, True, True]),
    # fn f(s: &str, n: u64): a fat pointer is two words in two registers (rdi, rsi).
    ([FAT, U64], ["&str", "u64"], [True, True]),
    # fn f(u: (), n: u64): a zero-sized argument takes no register.
    ([UNIT, U64], ["()", "u64"], [True, True]),
    # fn f(t: (u32, u32), n: u64): edi and esi, where System V packs t into rdi; n then
    # goes to rdx, not rsi.
    ([struct(U32, U32), U64], ["(u32, u32)", "u64"], [False, False]),
    # fn f(p: P {u32, u32, u64}, n: u64): p by reference in rdi; noop does not follow.
    ([struct(U32, U32, U64), U64], ["abi::P", "u64"], [False, False]),
    # fn f(f: F {f32, f32}, g: f64): xmm0 and xmm1 for f, g in xmm2.
    ([struct(F32, F32), F64], ["abi::F", "f64"], [False, False]),
    # A struct of two u64 that is not a reference: not placed.
    ([FAT], ["abi::Pair"], [False]),
])
def test_rust_arguments_placed_only_where_rustc_agrees(args: list[Shape], names: list[str],
                                                       placed: list[bool]) -> None:
    why = convention.rust_unplaced(args, names)
    assert [not w for w in why] == placed
    if not all(placed):
        first = placed.index(False)
        assert names[first] in why[first]


@pytest.mark.parametrize(("result", "placed"), [
    (None, True), (U64, True), (F64, True), (UNIT, True),
    (struct(U64, U64), False),  # Option<u64>: rax and rdx
    (struct(U64, U64, U64), True),  # in memory, its address in rax at the return
])
def test_rust_results(result: Shape | None, placed: bool) -> None:
    assert (not convention.rust_result_unplaced(result, "T")) == placed


def test_results_noop_cannot_read_as_values() -> None:
    big = struct(U64, U64, U64)
    # In memory: read where rax points at the return (sysv places it there).
    assert not convention.result_unreadable("c", big)
    assert not convention.result_unreadable("rust", big)
    assert "st0" in convention.result_unreadable("c", Shape("x87", 16, 16))
    assert not convention.result_unreadable("c", struct(U64, F64))  # rax and xmm0
    assert not convention.result_unreadable("rust", struct(U64, U64))  # rax and rdx
