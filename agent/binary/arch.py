"""The architectures noop reads binaries of, one part each: what a binary's machine says
about its registers and calling conventions, for the readers of DWARF and Go metadata.

- ``x86-64``: everything noop does (``agent.binary.amd64``: DWARF numbers, ``pt_regs``,
  the Go register ABI and System V's).
- ``arm64`` (AArch64): read (``noop funcs``, ``struct``, ``vars``, ``lines``): DWARF's
  register numbers (AADWARF64: x0 to x30, sp, v0 to v31), the Go register ABI (integer
  arguments in R0 to R15, floating point in F0 to F15; the goroutine in R28) and a call that
  leaves the return address in the link register, not on the stack. noop makes no plan
  to probe an arm64 binary yet: that is refused in one line.

A third architecture is a new ``Arch`` here (and its instruction decoding where plans
are made), not edits across the tree.
"""

from __future__ import annotations

from dataclasses import dataclass

from agent.binary import amd64

EM_X86_64, EM_AARCH64 = 62, 183  # ELF e_machine


@dataclass(frozen=True)
class Arch:
    name: str
    machine: int  # ELF e_machine
    dwarf_regs: dict[int, str]  # DWARF register number -> name
    sp: int  # DWARF number of the stack pointer
    cfa_at_entry: int  # CFA - SP at a function's first instruction (what a call pushes)
    go_stack_args: int  # where Go's stack arguments start, from SP at entry
    go_int_regs: tuple[str, ...]  # Go's internal ABI, in assignment order
    go_float_regs: tuple[str, ...]
    go_g_reg: str  # holds the current goroutine's g
    probes: bool  # whether noop makes plans (uprobes) for it

    def refused(self, path: str) -> tuple[str, str]:
        """The one line (message, hint) for a plan asked of a binary of this
        architecture, which noop only reads."""
        return (f"{path} is an {self.name} binary: noop reads it (funcs, struct, vars, "
                f"lines) but makes no probes for {self.name} yet",
                "probe an x86-64 build of the program")


AMD64 = Arch("x86-64", EM_X86_64, amd64.DWARF_REGS, amd64.SP, amd64.RETURN_ADDRESS_SIZE,
             amd64.RETURN_ADDRESS_SIZE, amd64.GO_INT_REGS, amd64.GO_FLOAT_REGS,
             amd64.GO_G_REG, probes=True)

ARM64 = Arch(
    "arm64", EM_AARCH64,
    # AADWARF64 ("DWARF for the Arm 64-bit Architecture", table 2): X0-X30, SP, then
    # the 32 SIMD/FP registers at 64; Go's R0..R30 are x0..x30, F0..F31 the v registers.
    {**{n: f"x{n}" for n in range(31)}, 31: "sp", **{64 + n: f"v{n}" for n in range(32)}},
    # a call leaves the return address in x30 (CFA = SP at entry); Go keeps the word at
    # 0(SP) for the callee to save it in, its stack arguments after it
    31, 0, 8,
    # Go's internal ABI on arm64 (abi-internal.md): R0-R15, F0-F15; g in R28
    tuple(f"x{n}" for n in range(16)), tuple(f"v{n}" for n in range(16)), "x28",
    probes=False)

_BY_MACHINE = {a.machine: a for a in (AMD64, ARM64)}


def of_machine(machine: int) -> Arch | None:
    return _BY_MACHINE.get(machine)
