"""Go internal ABI assignment, worked by hand from abi-internal.md's rules."""

from agent.binary.abi import goabi
from agent.binary.abi.shape import Shape, struct, word
from agent.binary.dwarf.locations import Piece

INT = word("int")
F64 = word("float")
STRING = Shape("string", 16, 8)
SLICE = Shape("slice", 24, 8)
IFACE = Shape("iface", 16, 8)


def regs(loc: tuple[Piece, ...]) -> list[str | None]:
    return [p.reg for p in loc]


def test_mixed_int_string_float_with_results() -> None:
    # func f(a int, s string, x float64) (int, error)
    a = goabi.assign([INT, STRING, F64], [INT, IFACE])
    assert [regs(x) for x in a.args] == [["rax"], ["rbx", "rcx"], ["xmm0"]]
    assert [regs(x) for x in a.results] == [["rax"], ["rbx", "rcx"]]
    assert a.frame_size == 0


def test_tenth_int_goes_to_the_stack_past_the_return_address() -> None:
    a = goabi.assign([INT] * 10, [])
    assert [regs(x) for x in a.args[:9]] == [[r] for r in
                                             ("rax", "rbx", "rcx", "rdi", "rsi", "r8", "r9",
                                              "r10", "r11")]
    assert a.args[9] == (Piece(8, stack=8),)


def test_a_value_that_does_not_fit_goes_whole_to_the_stack_and_later_ones_still_use_regs() -> None:
    # 8 ints use rax..r10; a slice needs 3 registers, only r11 is left: the slice is
    # stack-assigned whole, and the int after it still takes r11.
    a = goabi.assign([INT] * 8 + [SLICE, INT], [])
    assert a.args[8] == (Piece(24, stack=8),)
    assert regs(a.args[9]) == ["r11"]


def test_struct_fields_are_assigned_one_by_one_with_their_sizes() -> None:
    small = struct(word("int", 1), word("int", 4), F64)
    a = goabi.assign([small], [])
    assert a.args[0] == (Piece(1, reg="rax"), Piece(4, reg="rbx"), Piece(8, reg="xmm0"))


def test_arrays_longer_than_one_are_stack_assigned() -> None:
    arr2 = Shape("array", 16, 8, elem=INT, count=2)
    arr1 = Shape("array", 8, 8, elem=INT, count=1)
    a = goabi.assign([arr2, arr1], [])
    assert a.args[0] == (Piece(16, stack=8),)
    assert regs(a.args[1]) == ["rax"]


def test_stack_results_follow_stack_args_after_pointer_alignment() -> None:
    byte_arr = Shape("array", 3, 1, elem=word("int", 1), count=3)
    a = goabi.assign([byte_arr], [byte_arr])
    assert a.args[0] == (Piece(3, stack=8),)
    assert a.results[0] == (Piece(3, stack=16),)
    assert a.frame_size == 16


def test_complex_takes_two_float_registers() -> None:
    a = goabi.assign([Shape("complex", 16, 8)], [])
    assert a.args[0] == (Piece(8, reg="xmm0"), Piece(8, reg="xmm1"))


def test_abi0_puts_everything_on_the_stack_in_order() -> None:
    a = goabi.assign([INT, STRING], [INT], registers=False)
    assert a.args == ((Piece(8, stack=8),), (Piece(16, stack=16),))
    assert a.results == ((Piece(8, stack=32),),)
