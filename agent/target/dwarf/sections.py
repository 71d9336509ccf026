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
