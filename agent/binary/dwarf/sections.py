"""DWARF sections read from the file when a question needs them, not all copied into
memory when the file is opened.

pyelftools' ``get_dwarf_info`` copies every debug section into a stream of its own
(120 MB for a 130 MB Rust binary, its location lists included, which a plan reads a
few hundred bytes of). Here a section that is stored as it is read (not compressed,
nothing to relocate) is a window on the file: pyelftools' small reads come from a
memory map, and the raw scans' whole-section reads are one read, kept for both.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterable, Iterator
from typing import IO, Any, cast

from elftools.dwarf.dwarfinfo import DebugSectionDescriptor, DWARFInfo
from elftools.elf.elffile import ELFFile
from elftools.elf.relocation import RelocationHandler
from elftools.elf.sections import Section

_SHF_COMPRESSED = 0x800


class Window:
    """A file-like view of ``size`` bytes of ``file`` from ``start``: reads and seeks
    as pyelftools makes them. ``whole`` reads it all once; later reads come from
    those bytes."""

    def __init__(self, file: IO[bytes], view: mmap.mmap, start: int, size: int) -> None:
        self._file, self._view = file, view
        self._start, self._size = start, size
        self._pos = 0
        self._data: bytes | None = None

    def whole(self) -> bytes:
        if self._data is None:
            got = os.pread(self._file.fileno(), self._size, self._start)
            if len(got) != self._size:
                raise OSError(f"the file ends {self._size - len(got)} bytes into a section")
            self._data = got
        return self._data

    @property
    def size(self) -> int:
        return self._size

    def pread(self, at: int, n: int) -> bytes:
        """``n`` bytes from ``at`` (fewer at the end), read without mapping them (the
        pages of a memory map once touched count in the process's RSS)."""
        if self._data is not None:
            return self._data[at:at + n]
        n = max(0, min(n, self._size - at))
        return os.pread(self._file.fileno(), n, self._start + at) if n else b""

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self._pos, os.SEEK_END: self._size}[whence]
        self._pos = base + offset
        return self._pos

    def tell(self) -> int:
        return self._pos

    def read(self, n: int = -1) -> bytes:
        end = self._size if n is None or n < 0 else min(self._pos + n, self._size)
        start = min(self._pos, end)
        if self._data is not None:
            got = self._data[start:end]
        else:
            got = self._view[self._start + start:self._start + end]
        self._pos = end
        return got


class Text:
    """A string section read in pieces (a window's), not held whole: the string at an
    offset, and every place a string ends. Over bytes when the section is held anyway
    (decompressed)."""

    _CHUNK = 1 << 22
    _SHIFT = 12  # strings are read a page (4 KB) at a time: a name's neighbours come next
    _PAGE = 1 << _SHIFT
    _PAGES = 64  # pages held at most (256 KB)
    _STRINGS = 1 << 18  # bytes read at a time by ``strings``

    def __init__(self, source: Window | bytes) -> None:
        self._source = source
        self._pages: dict[int, bytes] = {}

    @property
    def size(self) -> int:
        """The section's bytes."""
        source = self._source
        return len(source) if isinstance(source, bytes) else source.size

    def _read(self, at: int, n: int) -> bytes:
        source = self._source
        return source[at:at + n] if isinstance(source, bytes) else source.pread(at, n)

    def string(self, at: int) -> str:
        """The NUL-terminated string at offset ``at``."""
        if isinstance(self._source, bytes):
            return scan_string(self._source, at)
        page = self._pages.get(at >> self._SHIFT)
        if page is None:
            if len(self._pages) >= self._PAGES:  # the oldest out
                del self._pages[next(iter(self._pages))]
            page = self._pages[at >> self._SHIFT] = self._read(at & ~(self._PAGE - 1), self._PAGE)
        start = at & (self._PAGE - 1)
        end = page.find(b"\0", start)
        if end >= 0:
            return page[start:end].decode("utf-8", "replace")
        parts = []  # it goes on past its page
        while True:
            piece = self._read(at, 256)
            end = piece.find(b"\0")
            if end >= 0 or not piece:
                parts.append(piece[:end] if end >= 0 else piece)
                return b"".join(parts).decode("utf-8", "replace")
            parts.append(piece)
            at += len(piece)

    def strings(self, offsets: Iterable[int]) -> dict[int, str]:
        """``string`` of each of ``offsets``, read in ascending order a chunk at a time:
        one read for the strings of a chunk, rather than a page each."""
        source = self._source
        if isinstance(source, bytes):
            return {at: scan_string(source, at) for at in offsets}
        out: dict[int, str] = {}
        chunk, start = b"", 0
        for at in sorted(set(offsets)):
            end = chunk.find(b"\0", at - start) if 0 <= at - start < len(chunk) else -1
            if end < 0:
                chunk, start = self._read(at, self._STRINGS), at
                end = chunk.find(b"\0")
                if end < 0:  # longer than a chunk
                    out[at] = self.string(at)
                    continue
            out[at] = chunk[at - start:end].decode("utf-8", "replace")
        return out

    def places(self, raw: bytes) -> list[int]:
        """Every offset where ``raw`` starts, read a few MB at a time."""
        source = self._source
        if isinstance(source, bytes):
            return list(finds(source, raw))
        out: list[int] = []
        at = 0
        while at < source.size:
            piece = self._read(at, self._CHUNK + len(raw) - 1)
            out += [at + k for k in finds(piece, raw) if k < self._CHUNK]
            at += self._CHUNK
        return out


def finds(data: bytes, pattern: bytes, lo: int = 0, hi: int | None = None
          ) -> Iterator[int]:
    """Every place ``pattern`` starts in ``data`` (between ``lo`` and ``hi``)."""
    end = len(data) if hi is None else hi
    at = data.find(pattern, lo, end)
    while at >= 0:
        yield at
        at = data.find(pattern, at + 1, end)


def scan_string(data: bytes, at: int) -> str:
    """The NUL-terminated string at ``at`` of bytes held."""
    return data[at:data.index(b"\0", at)].decode("utf-8", "replace")


def text(section: Any) -> Text:
    """A string section as ``Text``: its window where it has one."""
    if section is None:
        return Text(b"")
    stream = section.stream
    return Text(stream if isinstance(stream, Window) else section_bytes(section))


class _WindowedELF(ELFFile):
    """An ELFFile whose DWARF sections are windows wherever they can be."""

    def __init__(self, stream: IO[bytes]) -> None:
        super().__init__(stream)
        self._view = mmap.mmap(stream.fileno(), 0, access=mmap.ACCESS_READ)

    def _read_dwarf_section(self, section: Section, relocate_dwarf_sections: bool
                            ) -> DebugSectionDescriptor:
        if section["sh_flags"] & _SHF_COMPRESSED or section["sh_type"] == "SHT_NOBITS" \
                or section.name.startswith(".z") or self.has_phantom_bytes() \
                or self["e_type"] == "ET_REL" \
                or section["sh_offset"] + section["sh_size"] > self._view.size():
            return super()._read_dwarf_section(section, relocate_dwarf_sections)
        if relocate_dwarf_sections and \
                RelocationHandler(self).find_relocations_for_section(section) is not None:
            return super()._read_dwarf_section(section, relocate_dwarf_sections)
        return DebugSectionDescriptor(
            stream=cast(IO[bytes], Window(self.stream, self._view, section["sh_offset"],
                                          section["sh_size"])),  # reads as pyelftools does
            name=section.name, global_offset=section["sh_offset"],
            size=section["sh_size"], address=section["sh_addr"])


def dwarf_info(file: IO[bytes]) -> DWARFInfo:
    """The DWARF of the ELF file open as ``file``, its sections windows where they can
    be. An empty file cannot be mapped: pyelftools says what is wrong with it."""
    try:
        elf = _WindowedELF(file)
    except (OSError, ValueError):  # not mappable (empty): pyelftools says what is wrong
        file.seek(0)
        return ELFFile(file).get_dwarf_info()
    return elf.get_dwarf_info()


def section_bytes(section: Any) -> bytes:
    """A DWARF section's (decompressed) bytes: read once from a window, else copied
    from the stream pyelftools made."""
    stream = section.stream
    if isinstance(stream, Window):
        return stream.whole()
    stream.seek(0)
    return bytes(stream.read())
