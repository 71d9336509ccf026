"""DWARF made from a stripped Go binary's runtime metadata, as a small ELF debug file.

noop's DWARF machinery then answers for the stripped binary as it does for a binary
with debug info, from what the metadata holds and nothing more:

- one compile unit of types, shaped as Go's own DWARF shapes them (strings and slices
  as structs, interfaces as typedefs of ``runtime.iface``, …), for every type with a
  descriptor;
- a compile unit per package with a subprogram per pclntab function, its inlined
  copies (``DW_TAG_inlined_subroutine`` with the ranges pclntab's inlining tree
  gives) and, for a method whose signature the type metadata keeps, its parameters
  (``p0`` the receiver, ``p1``…) and results (``~r0``…) with types and no locations:
  the Go register ABI places them at entry;
- ``.debug_frame`` from pclntab's stack-pointer tables, and a symbol table.

The producer string says where it came from; ``abbrevs.PRODUCER`` marks it for
readers. The unit of types is ``typeunit``'s, the units of functions ``funcunits``'s.
"""

from __future__ import annotations

import struct
from pathlib import Path

from agent.binary.dwarf.writer import Info, abbrev_section, uleb, write_elf
from agent.binary.gometa.abbrevs import ABBREVS
from agent.binary.gometa.funcunits import functions_units
from agent.binary.gometa.pclntab import InlinedCall
from agent.binary.gometa.program import Function, GoProgram
from agent.binary.gometa.scope import Scope
from agent.binary.gometa.typeunit import Aux, Known, closure, declared_of, roots_of, types_unit


def write(program: GoProgram, out: Path, signatures: dict[str, str] | None = None,
          scope: Scope | None = None) -> None:
    """Writes the DWARF debug file for ``program`` to ``out``, with the ``signatures``
    (Go function types, by function name) a spec gives where the metadata has none;
    for ``scope`` only (its functions, the functions they are inlined into and the
    types all of these need), else for the whole program."""
    info = Info(ABBREVS)
    by_name = Known(program, everything=scope is None)
    aux = Aux(info)
    declared = {fn: declared_of(fn, text, by_name, aux)
                for fn, text in (signatures or {}).items()}
    functions, trees = _chosen(program, scope, set(declared))
    types = program.types.all if scope is None else \
        closure(by_name, [*aux.roots, *roots_of(program, functions, scope, by_name)])
    types_unit(info, types, aux, by_name)
    lines = bytearray()
    functions_units(info, program, functions, trees, declared, lines, by_name)
    info.patch()
    frame = _frames(program, functions)
    symtab, strtab = _symbols(program if scope is None or scope.functions else None,
                              None if scope is None else {f.entry for f in functions})
    sections = [(".debug_abbrev", abbrev_section(ABBREVS)), (".debug_info", bytes(info.buf)),
                (".debug_ranges", bytes(info.ranges)), (".debug_frame", frame),
                (".debug_line", bytes(lines)),
                (".symtab", symtab), (".strtab", strtab)]
    write_elf(out, sections, program.module.text, program.module.etext)


def _chosen(program: GoProgram, scope: Scope | None, declared: set[str]
            ) -> tuple[list[Function], dict[str, list[InlinedCall]]]:
    """The functions to write, by address: those ``scope`` wants (and those a spec
    declares a signature of) with every function one of them is inlined into, or all;
    and their inlining trees."""
    gofunc = program.module.gofunc
    if scope is not None and not scope.functions and not declared:
        return [], {}  # types only: no function is read
    functions = program.functions
    if scope is not None:
        hosts = {f.offset for f in program.pclntab.inliners(
            [f.func for f in functions], scope.wants_function, gofunc)}
        functions = tuple(f for f in functions if f.func.offset in hosts or
                          f.name in declared or scope.wants_function(f.name))
    trees = {}
    for f in functions:
        tree = program.pclntab.inline_tree(f.func, gofunc)
        if tree:
            trees[f.name] = tree
    return list(functions), trees


# -- frames and symbols ----------------------------------------------------------------


def _frames(program: GoProgram, functions: list[Function]) -> bytes:
    """``.debug_frame``: the canonical frame address at each pc, the stack pointer plus
    what a call leaves on the stack (x86-64's return address: 8; arm64: 0) plus the
    frame's size from pclntab's pcsp table; and where the return address is: on
    x86-64 always at CFA - 8, on arm64 in the link register (x30) while the frame has
    no size, else where Go's prologue saved it, at 0(SP) of the new frame (CFA less
    the frame's size)."""
    arch = program.elf.arch
    arm64 = arch.return_register >= 0
    if arm64:  # CIE: code 1, data -8, RA column 30; CFA = sp + 0, x30 same value
        cie_body = (struct.pack("<IB", 0xFFFFFFFF, 1) + b"\0" + uleb(1) + b"\x78" +
                    bytes([arch.return_register]) + b"\x0c" + uleb(arch.sp) + uleb(0) +
                    b"\x08" + uleb(arch.return_register))
    else:  # CIE: code 1, data -8, RA column 16; CFA = rsp + 8, RA at CFA - 8
        cie_body = (struct.pack("<IB", 0xFFFFFFFF, 1) + b"\0" + uleb(1) + b"\x78" +
                    bytes([16]) + b"\x0c\x07\x08" + b"\x90\x01")
    cie_body += bytes(-(len(cie_body) + 4) % 8)
    out = bytearray(struct.pack("<I", len(cie_body)) + cie_body)
    pcl = program.pclntab
    for f in functions:
        rec = pcl._func(f.func.offset)
        body = bytearray(struct.pack("<IQQ", 0, f.entry, f.size))
        pc = f.entry
        for lo, _hi, sp in pcl.pcvalue(rec[4], f.entry) if rec[4] else []:
            if lo > pc:
                body += b"\x04" + struct.pack("<I", lo - pc)
                pc = lo
            size = max(sp, 0)
            body += b"\x0e" + uleb(arch.cfa_at_entry + size)
            if not arm64:
                continue
            if size == 0:  # DW_CFA_same_value x30
                body += b"\x08" + uleb(arch.return_register)
            elif size % 8 == 0:  # DW_CFA_offset x30: CFA - size (factored by -8)
                body += bytes([0x80 | arch.return_register]) + uleb(size // 8)
            else:  # DW_CFA_undefined: not where noop can say
                body += b"\x07" + uleb(arch.return_register)
        body += bytes(-(len(body) + 4) % 8)
        out += struct.pack("<I", len(body)) + body
    return bytes(out)


def _symbols(program: GoProgram | None, read: set[int] | None) -> tuple[bytes, bytes]:
    """The symbol table of every function (none without ``program``): the size of each
    whose code a plan reads (entry in ``read``; None: all) where its pc-value tables
    end, of any other up to the next function's entry (its code and the padding after:
    nothing reads them, and their ends are 0.4 s of a 50 MB binary's plan)."""
    strtab = bytearray(b"\0")
    symtab = bytearray(bytes(24))
    for f in program.functions if program is not None else ():
        name = len(strtab)
        strtab += f.name.encode() + b"\0"
        size = f.size if read is None or f.entry in read else f.func.end - f.entry
        symtab += struct.pack("<IBBHQQ", name, 0x12, 0, 1, f.entry, size)  # GLOBAL FUNC
    return bytes(symtab), bytes(strtab)
