"""DWARF made from a symbol table alone, for a Rust program built without debug info.

Cargo's release profile strips debug info unless it asks for it, and leaves the symbol
table: names and addresses, no types, no parameters. From those noop writes one
compile unit with a subprogram per function symbol, so that ``noop funcs`` lists the
functions and a probe with no values counts calls; a value needs real debug info, and
``noop check`` says how to get it (``NO_VALUES``).
"""

from __future__ import annotations

from pathlib import Path

from agent.binary.demangle import demangle
from agent.binary.dwarf.writer import Info, abbrev_section, write_elf
from agent.binary.elf import ElfFile

PRODUCER = "noop from the symbol table: built without debug info"
FORMAT = 1  # bump when what is written changes: cached copies are then made anew
_RUST = 0x1C

_ABBREVS = {
    "cu": ("compile_unit", True, (("name", "string"), ("language", "data2"),
                                   ("producer", "string"), ("low_pc", "addr"),
                                   ("ranges", "sec_offset"))),
    "subprogram": ("subprogram", False, (("name", "string"), ("low_pc", "addr"),
                                         ("high_pc", "data8"), ("external", "flag_present"))),
}

NO_VALUES = ("build it with debug info: debug = 2 under [profile.release] in "
             "Cargo.toml (1 and \"line-tables-only\" keep no values), or name its separate "
             "debug file (split-debuginfo) with --debuginfo FILE")


def is_rust(elf: ElfFile) -> bool:
    """Whether rustc built ``elf``: its .comment says so, or its symbols are mangled as
    rustc mangles them."""
    comment = elf.section(".comment")
    if comment is not None and b"rustc version" in elf.section_data(comment):
        return True
    syms = elf.function_symbols()
    return sum(1 for s in syms if s.name.startswith(("_R", "_ZN"))
               and demangle(s.name) is not None) > len(syms) // 10 > 0


def write(elf: ElfFile, out: Path) -> None:
    """Writes the debug file for ``elf`` to ``out``: a subprogram per sized function
    symbol, named as a user writes it."""
    text = elf.section(".text")
    syms = sorted((s for s in elf.function_symbols() if s.size), key=lambda s: s.address)
    info = Info(_ABBREVS)
    start = info.begin_unit()
    spans: list[tuple[int, int]] = []
    for s in syms:
        if spans and s.address <= spans[-1][1]:
            spans[-1] = (spans[-1][0], max(spans[-1][1], s.address + s.size))
        else:
            spans.append((s.address, s.address + s.size))
    info.die("cu", elf.path.name, _RUST, PRODUCER, 0, info.range_list(spans))
    seen: set[int] = set()
    for s in syms:
        if s.address in seen:
            continue
        seen.add(s.address)
        info.die("subprogram", demangle(s.name) or s.name, s.address, s.size)
    info.end_children()
    info.unit(start)
    info.patch()
    lo = text.addr if text is not None else (spans[0][0] if spans else 0)
    hi = text.addr + text.size if text is not None else (spans[-1][1] if spans else 0)
    write_elf(out, [(".debug_abbrev", abbrev_section(_ABBREVS)),
                    (".debug_info", bytes(info.buf)), (".debug_ranges", bytes(info.ranges))],
              lo, hi)
