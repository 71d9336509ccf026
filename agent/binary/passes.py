"""Where a call passes once: a Go function's stack check (the ``jbe`` to
runtime.morestack, taken again on a restart), the instructions every call runs exactly
once from a start, and a function's exits (its RETs and tail calls). Read from the
instructions ``sites`` decodes."""

from __future__ import annotations

from dataclasses import dataclass

from agent.binary.sites import Insn, is_branch

# --- a Go function's stack check --------------------------------------------------------

_GUARDS = (0x10, 0x18)  # g.stackguard0, g.stackguard1 (runtime functions on the g0 stack)


@dataclass(frozen=True, slots=True)
class StackCheck:
    """``cmp [r14+guard], rsp|r12; jbe morestack-tail``: the tail calls
    runtime.morestack and jumps back to the function's first instruction, so a call
    passes the ``jbe`` not taken exactly once."""

    jbe: Insn  # the conditional branch to the tail (arm64: a b.ls)
    writes: frozenset[str]  # registers written between the entry and the jbe
    morestack: int  # address of the tail's call to runtime.morestack*
    # when the branch is taken (a hit to drop), as the architecture's ``taken_c``
    # reads it: x86-64's flags that take a jbe (CF|ZF), arm64's condition (LS)
    skip: int = 0x41


def stack_check(insns: tuple[Insn, ...], morestack: frozenset[int]) -> StackCheck | None:
    """The stack check opening a Go function, as the Go compiler emits it: up to
    ``lea/mov/sub r12`` and a ``jb`` to the same tail, then the compare and the jbe.
    None when the function has none (a leaf, NOSPLIT, assembly) or it differs."""
    if not insns:
        return None
    entry = insns[0].address
    by_address = {i.address: n for n, i in enumerate(insns)}
    writes: set[str] = set()
    for n, i in enumerate(insns[:5]):
        if i.mnemonic == "cmp" and len(i.operands) == 2 \
                and i.operands[0] in (("reg", "rsp"), ("reg", "r12")) \
                and i.operands[1][:3] == ("mem", "r14", "") and i.operands[1][3] in _GUARDS:
            if n + 1 >= len(insns) or insns[n + 1].mnemonic != "jbe":
                return None
            jbe = insns[n + 1]
            call = _restarts(insns, by_address.get(jbe.target or -1), entry, morestack)
            if call is None or "rsp" in writes:
                return None
            return StackCheck(jbe, frozenset(writes), call)
        if i.mnemonic not in ("lea", "mov", "sub", "jb") or (
                i.mnemonic != "jb" and i.writes != ("r12",)):
            return None
        writes.update(i.writes)
    return None


def _restarts(insns: tuple[Insn, ...], start: int | None, entry: int,
              morestack: frozenset[int]) -> int | None:
    """The address of the call to runtime.morestack in the block at ``insns[start]`` if
    that block is the stack check's tail: spills, the call, reloads, ``jmp entry``."""
    if start is None:
        return None
    call = None
    for i in insns[start:start + 64]:
        if i.mnemonic == "call":
            if call is not None or i.target not in morestack:
                return None
            call = i.address
        elif i.mnemonic == "jmp":
            return call if call is not None and i.target == entry else None
        elif is_branch(i):
            return None
    return None


def once_per_call(insns: tuple[Insn, ...], start: int, limit: int = 256) -> tuple[Insn, ...]:
    """The instructions from ``insns[start]`` on that every call runs exactly once:
    straight on, over calls (which come back to the next instruction), up to the first
    jump, conditional jump or return, and never past an instruction that something
    jumps to."""
    targets = {i.target for i in insns if i.target is not None and i.mnemonic != "call"}
    out: list[Insn] = []
    for i in insns[start:start + limit]:
        if i.address in targets:
            break
        out.append(i)
        if is_branch(i) and i.mnemonic != "call":
            break
    return tuple(out)


# --- exits ------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Exit:
    """Where a call leaves the function: a ``ret``, or a ``jmp`` to another function
    (a tail call: the frame is gone, the callee returns to our caller)."""

    insn: Insn
    tail: bool


def exits(insns: tuple[Insn, ...], start: int, end: int) -> tuple[Exit, ...]:
    """Every RET of the function ``[start, end)``, and every direct jump out of it."""
    out = []
    for i in insns:
        if i.mnemonic == "ret":
            out.append(Exit(i, False))
        elif i.mnemonic == "jmp" and i.target is not None and not start <= i.target < end:
            out.append(Exit(i, True))
    return tuple(out)
