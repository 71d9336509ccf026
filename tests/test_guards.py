"""guards.before on hand-assembled code: the site before an update that only some
paths make, the flags that keep its hits, and its registers read there."""

from __future__ import annotations

from agent.binary import guards, sites

LOCK_INC = bytes.fromhex("f048ff8098000000")  # lock inc qword [rax+0x98]
LOAD = bytes.fromhex("488b03")  # mov rax, [rbx]
JOIN = bytes.fromhex("4889f7")  # mov rdi, rsi
CMP = bytes.fromhex("4839c8")  # cmp rax, rcx


def _at(code: bytes, mnemonic: str, nth: int = 0) -> tuple[tuple[sites.Insn, ...], int]:
    insns = sites.decode(code, 0x1000)
    return insns, [n for n, i in enumerate(insns) if i.mnemonic == mnemonic][nth]


def _before(code: bytes) -> guards.Before:
    insns, n = _at(code, "inc")
    got = guards.before(insns, n, ("rax",))
    assert isinstance(got, guards.Before), got
    return got


def test_a_jump_over_the_update_keeps_the_hits_that_fall_through() -> None:
    # cmp; ja join; mov rax, [rbx]; lock inc [rax+0x98]; join: mov rdi, rsi
    got = _before(CMP + bytes([0x77, len(LOAD + LOCK_INC)]) + LOAD + LOCK_INC + JOIN)
    assert got.site.mnemonic == "ja"
    assert (got.keep_flags, got.skip_flags) == (guards.CF | guards.ZF, 0)
    assert got.reg("rax") == guards.Reg("rbx", (0,))


def test_a_jump_to_the_update_keeps_the_hits_that_jump() -> None:
    # cmp; jne dec; lock inc; jmp join; dec: lock dec [rax+0x98]; join: mov rdi, rsi
    dec = bytes.fromhex("f048ff8898000000")
    code = CMP + bytes([0x75, len(LOCK_INC) + 2]) + LOCK_INC + bytes([0xEB, len(dec)]) + \
        dec + JOIN
    insns, n = _at(code, "dec")
    got = guards.before(insns, n, ("rax",))
    assert isinstance(got, guards.Before) and got.site.mnemonic == "jne"
    assert (got.keep_flags, got.skip_flags) == (0, guards.ZF)


def test_a_signed_jump_leaves_the_first_instruction_of_the_straight_code() -> None:
    got = _before(CMP + bytes([0x7F, len(LOAD + LOCK_INC)]) + LOAD + LOCK_INC + JOIN)  # jg
    assert got.site.mnemonic == "mov" and (got.keep_flags, got.skip_flags) == (0, 0)
    assert got.reg("rax") == guards.Reg("rbx", (0,))


def test_a_register_computed_on_the_way_is_read_after_it() -> None:
    # cmp; je join; lea rcx, [rcx+rcx*4]; lock add [rdx+0x98], rcx; join
    lea, add = bytes.fromhex("488d0c89"), bytes.fromhex("f048018a98000000")
    insns, n = _at(CMP + bytes([0x74, len(lea + add)]) + lea + add + JOIN, "add")
    got = guards.before(insns, n, ("rdx", "rcx"), plain=("rcx",))
    assert isinstance(got, str), got  # the update itself is all that is left
