"""Lazy access to a binary's DWARF: compile units, named types and functions by name.

Go binaries hold ~10,000 functions and hundreds of thousands of DIEs; this module
parses only the compile units a query needs (Go puts every type in one unit, and a
function's unit is found from its address), never the whole tree unless asked. One
DIE's own facts are ``dies``'s, damaged DWARF ``damage``'s, the call-frame
information ``frames``'s, and the index of named types ``lookup``'s.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, TypeVar

from elftools.common.exceptions import DWARFError, ELFError
from elftools.dwarf.abbrevtable import AbbrevTable
from elftools.dwarf.compileunit import CompileUnit
from elftools.dwarf.die import DIE
from elftools.dwarf.dwarfinfo import DWARFInfo
from elftools.dwarf.ranges import BaseAddressEntry
from elftools.dwarf.typeunit import TypeUnit

from agent.binary import debuginfo
from agent.binary.dwarf import asks, intact, scan
from agent.binary.dwarf.damage import MALFORMED, SCAN_ERRORS, CheckedAbbrevs
from agent.binary.dwarf.dies import NAMESPACE_TAGS, attr, high_pc, origin_of, referred
from agent.binary.dwarf.frames import CallFrames
from agent.binary.dwarf.sections import dwarf_info, section_bytes, text
from agent.binary.dwarf.tree import Tree
from agent.binary.elf import ElfFile
from agent.errors import BinaryError
from agent.logs import WARNING, say

# DW_AT_language codes noop distinguishes.
_LANGUAGES = {0x16: "go", 0x1C: "rust", 0x01: "c", 0x02: "c", 0x0C: "c", 0x1D: "c",
              0x2C: "c", 0x04: "c++", 0x1A: "c++", 0x21: "c++", 0x2B: "c++"}

_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class UnitRange:
    """Address range [low, high) covered by the compile unit at ``cu_offset``."""

    low: int
    high: int
    cu_offset: int


class Dwarf:
    """A binary's DWARF, opened once; every lookup parses as little as it can."""

    def __init__(self, elf: ElfFile, source: debuginfo.Source | None = None) -> None:
        self.elf = elf
        self.type_indexes: dict[str, dict[str, list[int]]] = {}  # lookup's, by kind
        self.source = source or debuginfo.locate(elf)
        self.source = self.source.ready(elf)
        self._tables: dict[int, scan.Table] = {}  # abbreviation tables, read once
        self._own_ranges: dict[int, list[tuple[int, int]]] = {}  # a unit's, by offset
        if self.source.kind != debuginfo.SELF:
            with ElfFile(self.source.path) as debug:
                elf.take_symbols(debug)
        self._file = open(self.source.path, "rb")  # noqa: SIM115 - pyelftools reads lazily
        try:
            self.info: DWARFInfo = dwarf_info(self._file)
        except (ELFError, ValueError, KeyError) as exc:
            raise BinaryError(f"{elf.path}: cannot read DWARF: {exc}") from None
        tables: dict[int, AbbrevTable] = {}

        def abbrev_table(offset: int) -> AbbrevTable:  # as pyelftools', checked
            if offset not in tables:
                section = self.info.debug_abbrev_sec
                if section is None or offset >= section.size:
                    raise DWARFError(f"an abbreviation table at +{offset:#x} is past the "
                                     ".debug_abbrev section's end")
                tables[offset] = CheckedAbbrevs(self.info.structs, section.stream, offset)
            return tables[offset]

        self.info.get_abbrev_table = abbrev_table  # type: ignore[method-assign]

    def close(self) -> None:
        self._file.close()

    @property
    def from_metadata(self) -> bool:
        """Whether this DWARF was made from a stripped Go binary's runtime metadata."""
        return self.source.kind == debuginfo.GO_METADATA

    @property
    def cache_id(self) -> str:
        """The key of this binary's answers in noop's cache: its build-id, told apart
        from a twin with full DWARF when the answers come from metadata."""
        return debuginfo.cache_id(self.elf, self.source)

    @cached_property
    def raw(self) -> tuple[bytes, bytes]:
        """The bytes of .debug_info and .debug_abbrev (b"" without one), read once for
        the damage check and every raw scan."""
        info, abbrev = self.info.debug_info_sec, self.info.debug_abbrev_sec
        return (section_bytes(info) if info is not None else b"",
                section_bytes(abbrev) if abbrev is not None else b"")

    @cached_property
    def units(self) -> tuple[CompileUnit, ...]:
        present = {f for f, sec in scan.FORM_SECTIONS.items()
                   if getattr(self.info, sec, None) is not None}
        damage = scan.damage(*self.raw, present, self._tables) or intact.strings_damage(
            {".debug_str": self.info.debug_str_sec,
             ".debug_line_str": getattr(self.info, "debug_line_str_sec", None)})
        if damage:  # refused here, in one line, not deep inside pyelftools
            raise BinaryError(f"{self.source.path}: its debug info is damaged: {damage}",
                              "rebuild it, or give an intact debug file with --debuginfo")
        return tuple(self.info.iter_CUs())

    @cached_property
    def language(self) -> str:
        """The main language: Go if any unit is Go's (its C and assembly units come
        from cgo and the runtime), else Rust if any is Rust's, else the most common.
        Read from the units' raw bytes (pyelftools would parse every abbreviation
        table), or unit by unit up to the first Go one."""
        langs = iter(self._languages.values() if self._languages else
                     (self.unit_language(cu) for cu in self.units))
        counts: dict[str, int] = {}
        for lang in langs:
            if lang == "go":
                return "go"
            counts[lang] = counts.get(lang, 0) + 1
        if counts.get("rust"):
            return "rust"
        return max(counts, key=lambda k: counts[k]) if counts else "c"

    def language_of(self, unit: int) -> str:
        """The language of the unit at offset ``unit``, from the raw bytes."""
        got = self._languages.get(unit)
        if got is None:
            got = self.unit_language(self.info.get_CU_at(unit))
        return got

    @cached_property
    def _languages(self) -> dict[int, str]:
        ok, codes = self.ask(lambda t: dict(zip(t.starts, t.languages(), strict=True)))
        return {u: _LANGUAGES.get(c, "c") for u, c in (codes or {}).items()} if ok else {}

    @staticmethod
    def unit_language(cu: CompileUnit | TypeUnit) -> str:
        return _LANGUAGES.get(attr(cu.get_top_DIE(), "DW_AT_language", 0), "c")

    def die_at(self, offset: int) -> DIE:
        return self.info.get_DIE_from_refaddr(offset)

    def ref(self, die: DIE, name: str = "DW_AT_type") -> DIE | None:
        """The DIE an attribute refers to (None for ``void``)."""
        return referred(die, name)

    # -- questions the raw tree answers -----------------------------------------

    @cached_property
    def strings(self) -> scan.Strings:
        """The string sections a DIE's name may be in."""
        return scan.Strings(text(self.info.debug_str_sec), *(
            section_bytes(s) if s is not None else b"" for s in (
                getattr(self.info, "debug_line_str_sec", None),
                getattr(self.info, "debug_str_offsets_sec", None))))

    @cached_property
    def tree(self) -> Tree | None:
        """The raw bytes' shape, read unit by unit as questions need (``tree``); None
        when the scan cannot read these sections (pyelftools' slow walks answer)."""
        self.units  # noqa: B018 - the damage check says what is wrong, in one line
        try:
            tree = Tree(*self.raw, self.strings, self._tables)
            tops = [tree.top_strings(i, intact.SPLIT_ATTRIBUTES)
                    for i in range(len(tree.units))]
        except SCAN_ERRORS:
            return None
        self._split(tops)
        return tree

    def _split(self, tops: list[dict[int, str | None]]) -> None:
        """Refuses DWARF split into .dwo files (``-gsplit-dwarf``), which noop does not
        read; warns, once, when only some units are."""
        n, dwo, present = intact.split_units(tops, self.elf.path)
        if not n:
            return
        where = "beside it" if present else "not found"
        if n == len(tops):
            raise BinaryError(
                f"{self.source.path}: its DWARF is split (-gsplit-dwarf): the functions, "
                f"types and variables of its {n} unit{'s' * (n != 1)} are in .dwo files "
                f"({dwo}: {where}), which noop does not read",
                "build it without -gsplit-dwarf, its DWARF kept in the binary or in a "
                "debug file named by --debuginfo")
        say(f"{self.source.path}: {n} of its {len(tops)} DWARF units are split into .dwo "
            f"files noop does not read ({dwo}: {where}): their functions and types are "
            "not seen (build them without -gsplit-dwarf)", WARNING)

    def ask(self, question: Callable[[Tree], _T]) -> tuple[bool, _T | None]:
        """(True, what ``question`` answers from the tree), or (False, None) when the
        tree cannot read a unit it needed (which turns it off for this binary)."""
        tree = self.tree
        if tree is None:
            return False, None
        try:
            return True, question(tree)
        except SCAN_ERRORS:
            self.__dict__["tree"] = None
            return False, None

    def names_at(self, offsets: set[int]) -> Mapping[int, str] | None:
        """The qualified name (``Tree.qualified``) of the DIE at each offset, read from
        the units that hold them: a mapping of those and perhaps others named before;
        None when the scan cannot read them."""
        nested = self.language != "go"

        def names(tree: Tree) -> Mapping[int, str]:
            # the units that hold those not named yet (a whole walk named every copy's)
            unnamed = tree.unnamed(offsets, nested)
            tree.walk({tree.unit_of(o) for o in unnamed})
            tree.remember_names(tree.names_of(unnamed, nested), nested)
            return tree.named_as(nested)
        return self.ask(names)[1]

    def function_keys(self, names: Collection[tuple[str, ...]], keep: Callable[[str], bool],
                      own: bool = False) -> dict[str, list[int]] | None:
        """``Tree.keys``: the name-holding DIEs of the functions ``keep`` accepts among
        those whose own name or scope is one of ``names``; None when the scan cannot
        read them."""
        nested = self.language != "go"
        return self.ask(lambda t: asks.keys(t, names, keep, nested, own))[1]

    def mentioned_share(self, names: Collection[tuple[str, ...]]) -> float | None:
        """The share of .debug_info's bytes in the units that mention one of ``names``
        (``Mentions.mentioning``: 1 where names may be in another file); None when the
        scan cannot say."""
        def share(tree: Tree) -> float:
            units = tree.mentions.mentioning(names)
            if units is None:
                return 1.0
            return sum(tree.sizes[u] for u in units) / max(len(tree.info), 1)
        return self.ask(share)[1]

    def prefetch_functions(self, names: Collection[tuple[str, ...]]) -> None:
        """Reads at once what ``function_keys`` will read for each of ``names``
        (``asks.prefetch``); nothing when the scan cannot."""
        self.ask(lambda t: asks.prefetch(t, names))

    def copies(self, keys: Collection[int]) -> dict[int, list[int]] | None:
        """Every inlined copy of the functions whose name-holding DIEs are ``keys``, by
        key, reading only the units that can hold one; None when the scan cannot."""
        def reach(tree: Tree) -> dict[int, list[int]]:
            asks.reach(tree, keys)
            return asks.index(tree, keys)
        return self.ask(reach)[1]

    def parent(self, die: DIE) -> DIE | None:
        """The DIE ``die`` is in (None for a unit's own): from the tree when it keeps that
        DIE, else pyelftools' (which parses the unit up to it)."""
        if isinstance(die.cu, TypeUnit):  # .debug_types: offsets the tree does not know
            return die.get_parent()

        def parent(tree: Tree) -> int | bool | None:
            tree.walk([tree.unit_of(die.offset)])
            return tree.parent(die.offset) if die.offset in tree.kept else False
        ok, got = self.ask(parent)
        if not ok or got is False:
            return die.get_parent()
        return self.die_at(got) if isinstance(got, int) else None

    # -- functions ---------------------------------------------------------------

    def ranges(self, die: DIE) -> list[tuple[int, int]]:
        """The [low, high) address ranges of a unit, subprogram or inlined copy; empty
        when it has none that noop reads (DWARF 5 rnglistx)."""
        low = attr(die, "DW_AT_low_pc")
        if "DW_AT_ranges" in die.attributes:
            a = die.attributes["DW_AT_ranges"]
            rl = self.info.range_lists()
            if rl is None or a.form == "DW_FORM_rnglistx" or not isinstance(die.cu, CompileUnit):
                return []
            top = die.cu.get_top_DIE()
            base = attr(top, "DW_AT_low_pc", 0) or 0
            out = []
            for r in rl.get_range_list_at_offset(a.value, cu=die.cu):
                if isinstance(r, BaseAddressEntry):
                    base = r.base_address
                elif getattr(r, "is_absolute", False):
                    out.append((r.begin_offset, r.end_offset))
                else:
                    out.append((base + r.begin_offset, base + r.end_offset))
            return out
        if low is not None and "DW_AT_high_pc" in die.attributes:
            return [(low, high_pc(die))]
        return []

    @cached_property
    def _unit_ranges(self) -> tuple[UnitRange, ...]:
        out = [UnitRange(lo, hi, cu.cu_offset) for cu in self.units
               for lo, hi in self.ranges(cu.get_top_DIE())]
        return tuple(sorted(out, key=lambda r: r.low))

    @cached_property
    def frames(self) -> CallFrames:
        """The call-frame information: the canonical frame address at a pc."""
        return CallFrames(self.info, lambda: self.cache_id, self._eh_index,
                          self.elf.arch.dwarf_regs)

    def _eh_index(self) -> tuple[int, bytes] | None:
        """.eh_frame_hdr of the file .eh_frame is read from: its address and bytes."""
        sec = self.elf.section(".eh_frame_hdr")
        if sec is None or not sec.size or self.info.eh_frame_sec is None:
            return None
        return sec.addr, self.elf.section_data(sec)

    def unit_at(self, address: int) -> CompileUnit | None:
        """The unit whose code holds ``address``: the one .debug_aranges names, when its
        own ranges hold it (one unit's top DIE read), else from every unit's ranges."""
        named = self._arange_unit(address)
        if named is not None:
            try:  # an index only: a damaged one names no unit, or one that is not there
                cu = self.info.get_CU_at(named)
                own = self._own_ranges.get(named)
                if own is None:
                    own = self._own_ranges[named] = self.ranges(cu.get_top_DIE())
            except (DWARFError, ELFError, *MALFORMED):
                own = []
            if any(lo <= address < hi for lo, hi in own):
                return cu
        ranges = self._unit_ranges
        i = bisect.bisect_right([r.low for r in ranges], address) - 1
        if i >= 0 and ranges[i].low <= address < ranges[i].high:
            return self.info.get_CU_at(ranges[i].cu_offset)
        return None

    def _arange_unit(self, address: int) -> int | None:
        """The unit .debug_aranges gives for ``address`` (None: none, or no such table)."""
        try:
            aranges = self._aranges
            return aranges.cu_offset_at_addr(address) if aranges is not None else None
        except (DWARFError, ELFError, *MALFORMED):
            return None

    @cached_property
    def _aranges(self) -> Any:
        try:
            return self.info.get_aranges()
        except (DWARFError, ELFError, *MALFORMED):  # an index: the units' ranges instead
            return None

    def subprogram_at(self, address: int) -> DIE | None:
        """The concrete (out-of-line) subprogram DIE whose code starts at ``address``."""
        cu = self.unit_at(address)
        if cu is None:
            return None
        ok, got = self.ask(lambda t: asks.subprogram_at(t, cu.cu_offset, address))
        if ok and got != -1:
            return self.die_at(got) if got is not None else None
        for die in _walk_scopes(cu.get_top_DIE()):
            if die.tag == "DW_TAG_subprogram" and attr(die, "DW_AT_low_pc") == address:
                return die
        return None

    def subprogram_holding(self, pc: int) -> DIE | None:
        """The concrete (out-of-line) subprogram DIE whose code holds ``pc``."""
        cu = self.unit_at(pc)
        if cu is None:
            return None
        for die in _walk_scopes(cu.get_top_DIE()):
            if die.tag == "DW_TAG_subprogram" and any(
                    lo <= pc < hi for lo, hi in self.ranges(die)):
                return die
        return None

    def line_program(self, cu: CompileUnit) -> Any:
        """The unit's line program (None without one), its length checked first: one
        past the section's end would be parsed to that end, every unit's rows after
        its own read as its (seconds on a large binary) before the error."""
        at = attr(cu.get_top_DIE(), "DW_AT_stmt_list")
        sec = self.info.debug_line_sec
        if isinstance(at, int) and sec is not None:
            stream = sec.stream
            stream.seek(at)
            head = stream.read(12)
            length = int.from_bytes(head[:4], "little") if len(head) >= 4 else -1
            extent = 4
            if length == 0xFFFFFFFF and len(head) == 12:
                length, extent = int.from_bytes(head[4:12], "little"), 12
            reserved = extent == 4 and length >= 0xFFFFFFF0  # DWARF's reserved values
            if length < 0 or reserved or at + extent + length > sec.size:
                raise DWARFError(f"its .debug_line unit at {at:#x} (of the unit at "
                                 f"{cu.cu_offset:#x}) has length {max(length, 0)}, past the "
                                 f"section's end ({sec.size} bytes)")
        return self.info.line_program_for_CU(cu)

    def line_at(self, address: int) -> str | None:
        """``file:line`` of the instruction at ``address``, from its unit's line table."""
        cu = self.unit_at(address)
        program = self.line_program(cu) if cu is not None else None
        if program is None:
            return None
        best: tuple[int, int, int] | None = None  # (address, file, line) of the last row
        for entry in program.get_entries():
            st = entry.state
            if st is None:
                continue
            if st.address <= address and not st.end_sequence and \
                    (best is None or st.address >= best[0]):
                best = (st.address, st.file, st.line)
        if best is None:
            return None
        files = program.header.file_entry
        index = best[1] if program.header.version >= 5 else best[1] - 1
        name = files[index].name.decode(errors="replace") if 0 <= index < len(files) else "?"
        return f"{Path(name).name}:{best[2]}"

    def inlined_index(self) -> dict[int, list[int]]:
        """Offsets of every DW_TAG_inlined_subroutine, by the offset of the DIE holding
        its function's name (from the tree: the raw bytes, not a DIE object each)."""
        ok, got = self.ask(lambda tree: asks.whole_index(tree, self.language != "go"))
        if ok and got is not None:
            return got
        out: dict[int, list[int]] = {}  # a form the scan does not know: the slow walk
        for _cu, die in self.iter_all_dies():
            if die.tag == "DW_TAG_inlined_subroutine":
                out.setdefault(origin_of(die).offset, []).append(die.offset)
        return out

    def iter_all_dies(self) -> Iterator[tuple[CompileUnit, DIE]]:
        """Every DIE of every unit: the slow full walk, for whole-binary listings only."""
        for cu in self.units:
            for die in cu.iter_DIEs():
                yield cu, die


def _walk_scopes(parent: DIE) -> Iterator[DIE]:
    """Children of ``parent``, descending into namespaces and types (Rust/C++ methods)."""
    for die in parent.iter_children():
        yield die
        if die.tag in NAMESPACE_TAGS and die.has_children:
            yield from _walk_scopes(die)


def open_dwarf(path: str | Path) -> Dwarf:
    return Dwarf(ElfFile(path))
