"""Cheap ELF facts read with ``struct`` alone: identity, sections, symbols, Go build info.

This module must stay light: the warm path of every inspection command opens the
binary only to learn its build-id, so it must not import pyelftools.
"""

from __future__ import annotations

import errno
import hashlib
import os
import struct
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from agent import files
from agent.binary import arch
from agent.errors import BinaryError

_ELF_MAGIC = b"\x7fELF"
_SHT_SYMTAB = 2
_SHT_STRTAB = 3
# The DWARF sections only a .debug_info gives a meaning to.
_DWARF_PARTS = frozenset({".debug_info", ".debug_abbrev", ".debug_str", ".debug_line",
                          ".debug_line_str", ".debug_str_offsets", ".debug_addr",
                          ".debug_ranges", ".debug_rnglists", ".debug_loc",
                          ".debug_loclists", ".debug_aranges"})
_SHT_NOTE = 7
_SHT_NOBITS = 8
_ET_REL, _ET_CORE = 1, 4
_STT_FUNC = 2
_NT_GNU_BUILD_ID = 3
_NT_GO_BUILD_ID = 4


@dataclass(frozen=True, slots=True)
class Section:
    """One ELF section header: name, virtual address, file offset, size, flags."""

    name: str
    type: int
    flags: int
    addr: int
    offset: int
    size: int
    link: int
    entsize: int


@dataclass(frozen=True, slots=True)
class Symbol:
    """A function symbol from ``.symtab``: name, address, size."""

    name: str
    address: int
    size: int


@dataclass(frozen=True, slots=True)
class Segment:
    """A PT_LOAD segment, to turn virtual addresses into file offsets (for uprobes)."""

    vaddr: int
    offset: int
    filesz: int
    flags: int


class ElfFile:
    """An x86-64 ELF64 little-endian file, read lazily with plain ``struct``."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        denied = "noop needs CAP_DAC_READ_SEARCH to read a file only its owner may read" \
            if os.geteuid() == 0 else "run as root"
        files.checked(self.path, "executable", error=BinaryError, hints={
            errno.ENOENT: "check the path", errno.EACCES: denied, errno.EPERM: denied})
        try:
            self._f = open(self.path, "rb")  # noqa: SIM115 - kept open for lazy reads
        except PermissionError:
            raise BinaryError(f"{self.path}: permission denied", denied) from None
        except OSError as exc:
            raise files.problem(self.path, exc, error=BinaryError) from None
        head = self._f.read(64)
        if head[:4] != _ELF_MAGIC:
            self._f.close()
            raise BinaryError(f"{self.path}: not an ELF file", "name a compiled executable")
        if len(head) < 64:
            self._f.close()
            raise BinaryError(f"{self.path}: truncated: {len(head)} bytes, shorter than an "
                              "ELF header", "copy the binary again")
        if head[4] != 2 or head[5] != 1:
            self._f.close()
            raise BinaryError(f"{self.path}: not a 64-bit little-endian ELF file")
        (self.e_type, machine, _v, self.entry, self.phoff, self.shoff, _fl, _eh, self.phentsize,
         self.phnum, self.shentsize, self.shnum, self.shstrndx) = struct.unpack_from(
            "<HHIQQQIHHHHHH", head, 16)
        found = arch.of_machine(machine)
        if found is None:
            self._f.close()
            raise BinaryError(f"{self.path}: ELF machine {machine} is neither x86-64 nor "
                              "arm64", "noop reads x86-64 and arm64 binaries")
        self.arch = found
        if self.e_type in (_ET_REL, _ET_CORE):
            self._f.close()
            what = "an object file (made by cc -c), not linked: its functions have no " \
                "addresses yet" if self.e_type == _ET_REL else "a core dump"
            raise BinaryError(f"{self.path}: {what}",
                              "name the program or shared library it is linked into")
        self.size = os.fstat(self._f.fileno()).st_size
        self._check(self.size)

    def _check(self, size: int) -> None:
        """Refuse a truncated or damaged file whose tables or sections lie past its end
        (else it would read as stripped, or fail deep inside a parser)."""
        why = ""
        if (self.shnum and self.shentsize != 64) or (self.phnum and self.phentsize != 56) \
                or (self.shnum and self.shstrndx >= self.shnum):
            why = "its ELF header is damaged"
        for off, length, what in ((self.shoff, self.shnum * self.shentsize, "section"),
                                  (self.phoff, self.phnum * self.phentsize, "program header")):
            if not why and off + length > size:
                why = f"its {what} table (bytes {off}..{off + length}) lies past its end " \
                    f"({size} bytes)"
        if not why:
            past = next(((i, sec) for i, sec in enumerate(self.sections)
                         if sec.type != _SHT_NOBITS and sec.offset + sec.size > size), None)
            if past is not None:
                i, sec = past
                why = f"section {sec.name or i} (bytes {sec.offset}..{sec.offset + sec.size}) " \
                    f"lies past its end ({size} bytes)"
        if not why and self.shnum:
            why = self._names_damage() or self._dwarf_damage()
        if why:
            self._f.close()
            raise BinaryError(f"{self.path}: truncated or damaged: {why}",
                              "copy the binary again")

    def close(self) -> None:
        self._f.close()

    def __enter__(self) -> ElfFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def read(self, offset: int, size: int) -> bytes:
        """Up to ``size`` bytes at ``offset``; none past the file's end (a damaged table
        may give any offset)."""
        if not 0 <= offset < self.size or size <= 0:
            return b""
        self._f.seek(offset)
        return self._f.read(min(size, self.size - offset))

    def _names_damage(self) -> str:
        """What is wrong with the section-name table ('' when nothing): not a string
        table, not NUL-delimited, a name past its end or not one a linker writes (a
        table overwritten would make every debug section unfound: "stripped")."""
        typ, names = self._headers[self.shstrndx][1], self._names
        table = f"its section-name table (section {self.shstrndx})"
        if typ != _SHT_STRTAB:
            return f"{table} is not a string table (type {typ})"
        if names[:1] != b"\0" or names[-1:] != b"\0":
            return f"{table} does not start and end with a NUL"
        for i, (at, typ, *_rest) in enumerate(self._headers[1:], 1):
            if at >= len(names):
                return f"section {i}'s name lies past the end of {table}"
            name = names[at:names.index(b"\0", at)]
            if (typ and not name) or any(c <= 0x20 or c >= 0x7F for c in name):
                return f"section {i} is named {name[:40]!r} in {table}, not a name a " \
                    "linker writes"
        return ""

    def _dwarf_damage(self) -> str:
        """DWARF sections come as a set: .debug_info with its .debug_abbrev, and the
        others only beside them. One without the other says a name was overwritten
        (else the binary would read as stripped)."""
        names = {s.name.replace(".zdebug_", ".debug_", 1) for s in self.sections}
        has = sorted(names & _DWARF_PARTS)
        for needed in (".debug_info", ".debug_abbrev"):
            if has and needed not in names:
                return f"it has {', '.join(has)} but no {needed} section (its section " \
                    "names are damaged, or a tool removed a part of its DWARF)"
        return ""

    @cached_property
    def _headers(self) -> list[tuple[int, ...]]:
        raw = self.read(self.shoff, self.shnum * self.shentsize)
        return [struct.unpack_from("<IIQQQQIIQQ", raw, i * self.shentsize)
                for i in range(self.shnum)]

    @cached_property
    def _names(self) -> bytes:
        strtab = self._headers[self.shstrndx]
        return self.read(strtab[4], strtab[5])

    @cached_property
    def sections(self) -> tuple[Section, ...]:
        if self.shoff == 0 or self.shnum == 0:
            return ()
        names = self._names
        out = []
        for name_off, typ, flags, addr, off, size, link, _info, _align, entsize in \
                self._headers:
            end = names.find(b"\0", name_off)
            out.append(Section(names[name_off:end].decode(errors="replace"), typ, flags, addr,
                               off, size, link, entsize))
        return tuple(out)

    def section(self, name: str) -> Section | None:
        return next((s for s in self.sections if s.name == name), None)

    def section_data(self, sec: Section) -> bytes:
        return b"" if sec.type == _SHT_NOBITS else self.read(sec.offset, sec.size)

    @cached_property
    def segments(self) -> tuple[Segment, ...]:
        raw = self.read(self.phoff, self.phnum * self.phentsize)
        segs = []
        for i in range(self.phnum):
            p_type, p_flags, off, vaddr, _pa, filesz, _msz, _al = struct.unpack_from(
                "<IIQQQQQQ", raw, i * self.phentsize)
            if p_type == 1:  # PT_LOAD
                segs.append(Segment(vaddr, off, filesz, p_flags))
        return tuple(segs)

    def file_offset(self, vaddr: int) -> int:
        """The file offset of a virtual address: what a uprobe is attached at."""
        for s in self.segments:
            if s.vaddr <= vaddr < s.vaddr + s.filesz:
                return vaddr - s.vaddr + s.offset
        raise BinaryError(f"{self.path}: address {vaddr:#x} is in no loaded segment")

    def _notes(self) -> dict[tuple[bytes, int], bytes]:
        notes: dict[tuple[bytes, int], bytes] = {}
        for sec in self.sections:
            if sec.type != _SHT_NOTE:
                continue
            data = self.section_data(sec)
            pos = 0
            while pos + 12 <= len(data):
                namesz, descsz, ntype = struct.unpack_from("<III", data, pos)
                pos += 12
                name = data[pos:pos + namesz].rstrip(b"\0")
                pos += (namesz + 3) & ~3
                notes[(name, ntype)] = data[pos:pos + descsz]
                pos += (descsz + 3) & ~3
        return notes

    @cached_property
    def gnu_build_id(self) -> str:
        """The GNU build-id note, in hex ('' when there is none)."""
        return self._notes().get((b"GNU", _NT_GNU_BUILD_ID), b"").hex()

    @cached_property
    def go_build_id(self) -> str:
        """Go's build ID note ('' when there is none)."""
        return self._notes().get((b"Go", _NT_GO_BUILD_ID), b"").decode(errors="replace")

    @cached_property
    def debuglink(self) -> tuple[str, int] | None:
        """(file name, CRC32) from ``.gnu_debuglink``, if the binary has one."""
        sec = self.section(".gnu_debuglink")
        if sec is None:
            return None
        data = self.section_data(sec)
        end = data.find(b"\0")
        at = (end + 4) & ~3
        if end <= 0 or at + 4 > len(data):
            return None
        return data[:end].decode(errors="replace"), struct.unpack_from("<I", data, at)[0]

    def take_symbols(self, other: ElfFile) -> None:
        """Function symbols from ``other`` (a debug file) when this file has none."""
        if not any(s.type == _SHT_SYMTAB for s in self.sections):
            self.__dict__["_symbols"] = other._symbols

    @cached_property
    def build_id(self) -> str:
        """The GNU build-id, else Go's build id, else a hash of the file's bytes.

        It keys the on-disk cache: a rebuilt binary never gets a stale answer.
        """
        notes = self._notes()
        gnu = notes.get((b"GNU", _NT_GNU_BUILD_ID))
        if gnu:
            return gnu.hex()
        go = notes.get((b"Go", _NT_GO_BUILD_ID))
        if go:
            return "go-" + hashlib.sha256(go).hexdigest()[:40]
        h = hashlib.sha256()
        self._f.seek(0)
        for chunk in iter(lambda: self._f.read(1 << 20), b""):
            h.update(chunk)
        return "sha256-" + h.hexdigest()[:40]

    @cached_property
    def has_dwarf(self) -> bool:
        return any(s.name in (".debug_info", ".zdebug_info") for s in self.sections)

    @cached_property
    def go_version(self) -> str | None:
        """The Go toolchain version from ``.go.buildinfo`` (Go ≥ 1.18 layout), if any."""
        sec = self.section(".go.buildinfo")
        if sec is None:
            return None
        data = self.read(sec.offset, min(sec.size, 4096))
        if not data.startswith(b"\xff Go buildinf:") or len(data) < 32:
            return None
        if not data[15] & 2:  # pre-1.18 layout stores pointers to strings: read via symbols
            return self._go_version_from_symbol()
        n, pos = uleb128(data, 32)
        return data[pos:pos + n].decode(errors="replace")

    def _go_version_from_symbol(self) -> str | None:
        sym = self.symbol("runtime.buildVersion")
        if sym is None:
            return None
        ptr, length = struct.unpack("<QQ", self.read(self.file_offset(sym.address), 16))
        return self.read(self.file_offset(ptr), length).decode(errors="replace")

    @cached_property
    def _symbols(self) -> dict[str, Symbol]:
        sec = next((s for s in self.sections if s.type == _SHT_SYMTAB), None)
        if sec is None:
            return {}
        strtab = self.sections[sec.link]
        names = self.read(strtab.offset, strtab.size)
        raw = self.read(sec.offset, sec.size)
        out: dict[str, Symbol] = {}
        for name_off, info, _other, shndx, value, size in struct.iter_unpack("<IBBHQQ", raw):
            if info & 0xF != _STT_FUNC or shndx == 0 or value == 0:
                continue
            end = names.find(b"\0", name_off)
            name = names[name_off:end].decode(errors="replace")
            first = out.setdefault(name, Symbol(name, value, size))
            if first.address != value:
                # Another function of the same name: local symbols of two files (C's
                # statics) or of two codegen units (rustc's copies of one generic
                # function). Each is kept, the later ones as NAME@0xADDRESS
                # (demangle.strip_suffix takes that off again).
                alias = f"{name}@{value:#x}"
                out.setdefault(alias, Symbol(alias, value, size))
        return out

    def function_symbols(self) -> tuple[Symbol, ...]:
        return tuple(self._symbols.values())

    def symbol(self, name: str) -> Symbol | None:
        return self._symbols.get(name)

    def read_vaddr(self, vaddr: int, size: int) -> bytes:
        return self.read(self.file_offset(vaddr), size)


def uleb128(data: bytes, pos: int) -> tuple[int, int]:
    """The unsigned LEB128 number at ``pos`` (Go's uvarint, DWARF's ULEB128), and where
    it ends."""
    value = shift = 0
    while True:
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7


Stamp = tuple[int, int, int, int]  # a file's version: device, inode, mtime, size


def stamp(path: str | int) -> Stamp | None:
    """A file's version (of a path, or of an open descriptor); None when it is gone."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size
