"""x86-64 registers: DWARF numbers, names, ``pt_regs`` fields, and the ABIs' register orders.

DWARF numbering is from the System V AMD64 psABI, table "DWARF Register Number
Mapping"; the Go order is from Go's internal ABI specification (abi-internal.md).
"""

from __future__ import annotations

import re

# DWARF register number -> register name (psABI §3.6.2).
DWARF_REGS: dict[int, str] = {
    0: "rax", 1: "rdx", 2: "rcx", 3: "rbx", 4: "rsi", 5: "rdi", 6: "rbp", 7: "rsp",
    **{n: f"r{n}" for n in range(8, 16)},
    16: "rip",
    **{17 + n: f"xmm{n}" for n in range(16)},
}

# Register name -> field of struct pt_regs that a uprobe's BPF program reads.
PT_REGS: dict[str, str] = {
    "rax": "ax", "rbx": "bx", "rcx": "cx", "rdx": "dx", "rsi": "si", "rdi": "di",
    "rbp": "bp", "rsp": "sp", "rip": "ip", **{f"r{n}": f"r{n}" for n in range(8, 16)},
}

SP = 7  # DWARF number of rsp
FRAME_POINTER = 6  # rbp
RETURN_ADDRESS_SIZE = 8  # a CALL pushes 8 bytes: at entry CFA == rsp + 8

# Go internal ABI, amd64: integer and float argument registers, in assignment order.
GO_INT_REGS = ("rax", "rbx", "rcx", "rdi", "rsi", "r8", "r9", "r10", "r11")
GO_FLOAT_REGS = tuple(f"xmm{n}" for n in range(15))
GO_G_REG = "r14"  # holds the current goroutine's g

# System V AMD64 psABI §3.2.3: argument registers.
SYSV_INT_REGS = ("rdi", "rsi", "rdx", "rcx", "r8", "r9")
SYSV_SSE_REGS = tuple(f"xmm{n}" for n in range(8))
SYSV_INT_RETURN = ("rax", "rdx")
SYSV_SSE_RETURN = ("xmm0", "xmm1")


def is_vector(reg: str) -> bool:
    """XMM registers (and arm64's v registers): a uprobe's pt_regs does not hold them."""
    return reg.startswith("xmm") or re.fullmatch(r"v\d+", reg) is not None


def full_register(name: str) -> str:
    """The 64-bit general register ``name`` is part of (``cl`` and ``ecx``: ``rcx``;
    ``r8b``: ``r8``); any other name as it is."""
    numbered = re.fullmatch(r"(r\d+)[dwb]?", name)
    if numbered:
        return numbered.group(1)
    legacy = re.fullmatch(r"[re]?([abcd])[xlh]", name)
    if legacy:
        return f"r{legacy.group(1)}x"
    index = re.fullmatch(r"[re]?(si|di|sp|bp)l?", name)
    return f"r{index.group(1)}" if index else name
