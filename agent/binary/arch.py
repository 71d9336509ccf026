"""The architectures noop reads and probes binaries of, one ``Arch`` each: what a
binary's machine says about its registers and calling conventions (for the readers of
DWARF and Go metadata), and how the generated C reads a uprobe's registers.

- ``x86-64``: everything noop does (``agent.binary.amd64``: DWARF numbers, ``pt_regs``,
  the Go register ABI and System V's).
- ``arm64`` (AArch64): DWARF's register numbers (AADWARF64: x0 to x30, sp, v0 to v31),
  the Go register ABI (integer arguments in R0 to R15, floating point in F0 to F15; the
  goroutine in R28), a call that leaves the return address in the link register, and
  pt_regs' ``regs[31]``, ``sp``, ``pc`` and ``pstate``. Probes of Go functions' entries,
  exits and lines; C's parameters by AAPCS64 (``agent.binary.abi.aapcs64``), Rust's
  where DWARF places them; the presets' mirror (noop run --binary) but no update
  probes yet.

The instruction set of each is ``Arch.isa`` (``agent.binary.isa``). A third
architecture is a new ``Arch`` here and a new part there, not edits across the tree.
"""

from __future__ import annotations

from dataclasses import dataclass

from agent.binary import amd64

EM_X86_64, EM_AARCH64 = 62, 183  # ELF e_machine
# A site's ``skip_flags`` with this bit is a condition (arm64's 4-bit encoding in its
# low bits) that takes the branch at the site, not a mask of x86-64's eflags.
CONDITION = 1 << 16
_CONDITIONS = ("eq", "ne", "hs", "lo", "mi", "pl", "vs", "vc", "hi", "ls", "ge", "lt",
               "gt", "le", "al", "nv")


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
    c_abi: bool  # whether noop assigns C's calling convention itself (System V, AAPCS64)
    # the generated C's access to a uprobe's registers (``struct pt_regs *ctx``): each
    # register's expression, and those of the stack pointer, the program counter and
    # the flags (x86-64's eflags, arm64's pstate: NZCV in bits 31..28)
    c_regs: dict[str, str]
    c_sp: str
    c_pc: str
    c_flags: str
    # the system calls noop makes by number (libc has no wrapper for them)
    nr_bpf: int
    nr_perf_event_open: int
    goarch: str  # Go's name for it (runtime.GOARCH)
    # the DWARF number of the register a call leaves the return address in (arm64's
    # link register, x30); -1: a call pushes it (x86-64)
    return_register: int = -1

    def c_reg(self, name: str) -> str:
        return self.c_regs[name]

    @property
    def c_g(self) -> str:
        """The current goroutine's g, in Go code."""
        return self.c_regs[self.go_g_reg]

    def taken_c(self, skip: int) -> str:
        """C true when the branch a site's ``skip_flags`` describes is taken: on x86-64
        any of those eflags set (a jbe: CF or ZF), on arm64 the condition
        ``CONDITION | cond`` holding of pstate's NZCV."""
        if skip & CONDITION:
            return condition_c(skip & 0xF, self.c_flags)
        return f"{self.c_flags} & {skip:#x}"


AMD64 = Arch("x86-64", EM_X86_64, amd64.DWARF_REGS, amd64.SP, amd64.RETURN_ADDRESS_SIZE,
             amd64.RETURN_ADDRESS_SIZE, amd64.GO_INT_REGS, amd64.GO_FLOAT_REGS,
             amd64.GO_G_REG, c_abi=True,
             c_regs={name: f"ctx->{field}" for name, field in amd64.PT_REGS.items()},
             c_sp="ctx->sp", c_pc="ctx->ip", c_flags="ctx->flags",
             nr_bpf=321, nr_perf_event_open=298,  # arch/x86/entry/syscalls/syscall_64.tbl
             goarch="amd64")

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
    c_abi=True,  # AAPCS64 for C; Rust's parameters where DWARF says
    # arm64's pt_regs begins with user_pt_regs: regs[31], sp, pc, pstate
    c_regs={**{f"x{n}": f"ctx->regs[{n}]" for n in range(31)}, "sp": "ctx->sp",
            "pc": "ctx->pc"},
    c_sp="ctx->sp", c_pc="ctx->pc", c_flags="ctx->pstate",
    nr_bpf=280, nr_perf_event_open=241,  # include/uapi/asm-generic/unistd.h
    goarch="arm64", return_register=30)

_BY_MACHINE = {a.machine: a for a in (AMD64, ARM64)}


def of_machine(machine: int) -> Arch | None:
    return _BY_MACHINE.get(machine)


def by_name(name: str) -> Arch:
    """The architecture a plan names (``Arch.name``)."""
    return next((a for a in _BY_MACHINE.values() if a.name == name), AMD64)


def host() -> Arch | None:
    """The architecture of the running kernel (None: one noop does not know)."""
    import platform

    return {"x86_64": AMD64, "aarch64": ARM64, "arm64": ARM64}.get(platform.machine())


def condition_c(cond: int, pstate: str) -> str:
    """C that is true when condition ``cond`` (AArch64's 4-bit encoding) holds of the
    NZCV flags in ``pstate``."""
    n, z, c, v = (f"(({pstate} >> {b}) & 1)" for b in (31, 30, 29, 28))
    base = {0: z, 1: z, 2: c, 3: c, 4: n, 5: n, 6: v, 7: v, 8: f"({c} && !{z})",
            9: f"({c} && !{z})", 10: f"({n} == {v})", 11: f"({n} == {v})",
            12: f"(!{z} && {n} == {v})", 13: f"(!{z} && {n} == {v})", 14: "1", 15: "1"}
    expr = base[cond & 0xF]
    # odd conditions are the even ones' negations (but AL/NV: always)
    return f"!{expr}" if cond & 1 and cond < 14 else expr


def condition_name(cond: int) -> str:
    return _CONDITIONS[cond & 0xF]
