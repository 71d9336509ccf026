"""System V AMD64 classification, with the psABI's own kinds of examples."""

from agent.binary.abi import sysv
from agent.binary.abi.shape import Shape, struct, word
from agent.binary.dwarf.locations import Piece

INT = word("int", 4)
LONG = word("int")
DOUBLE = word("float")


def test_ints_then_doubles_use_separate_register_files() -> None:
    a = sysv.assign([INT, DOUBLE, LONG, DOUBLE], LONG)
    assert a.args == ((Piece(4, reg="rdi"),), (Piece(8, reg="xmm0"),),
                      (Piece(8, reg="rsi"),), (Piece(8, reg="xmm1"),))
    assert a.results == ((Piece(8, reg="rax"),),)


def test_seventh_int_goes_to_the_stack() -> None:
    a = sysv.assign([LONG] * 7, None)
    assert a.args[6] == (Piece(8, stack=8),)


def test_small_struct_mixing_int_and_double_uses_one_of_each() -> None:
    s = struct(LONG, DOUBLE)
    assert sysv.classify(s) == (sysv.INTEGER, sysv.SSE)
    a = sysv.assign([s], None)
    assert a.args[0] == (Piece(8, reg="rdi"), Piece(8, reg="xmm0"))


def test_two_floats_in_one_eightbyte_are_sse() -> None:
    s = struct(word("float", 4), word("float", 4))
    assert sysv.classify(s) == (sysv.SSE,)


def test_int_and_float_sharing_an_eightbyte_are_integer() -> None:
    s = struct(INT, word("float", 4))
    assert sysv.classify(s) == (sysv.INTEGER,)


def test_large_struct_is_memory_and_a_memory_result_takes_rdi() -> None:
    big = struct(LONG, LONG, LONG)
    assert sysv.classify(big) == (sysv.MEMORY,)
    a = sysv.assign([LONG, big], big)
    assert a.args[0] == (Piece(8, reg="rsi"),)  # rdi holds the result buffer
    assert a.args[1] == (Piece(24, stack=8),)
    assert a.results == ((Piece(24, reg="rax", at=0),),)  # the result is where rax points


def test_long_double_is_memory() -> None:
    assert sysv.classify(Shape("x87", 16, 16)) == (sysv.MEMORY,)


def test_rust_passes_large_aggregates_by_reference() -> None:
    big = struct(LONG, LONG, LONG)
    a = sysv.assign([big, Shape("struct", 16, 8, ((0, LONG), (8, LONG)))], None, rust=True)
    assert a.args[0] == (Piece(8, reg="rdi"),)
    assert a.by_reference == (True, False)
    assert a.args[1] == (Piece(8, reg="rsi"), Piece(8, reg="rdx"))


def test_long_double_result_comes_back_in_st0_and_takes_no_register() -> None:
    # long double half(long double x, int n): x in memory, n in edi, the result in st0
    # (psABI: the X87 class is returned on the x87 stack, not through a hidden pointer).
    a = sysv.assign([Shape("x87", 16, 16), INT], Shape("x87", 16, 16))
    assert a.args == ((Piece(16, stack=8),), (Piece(4, reg="rdi"),))
    assert a.results == ((Piece(16, reg="st0"),),)
