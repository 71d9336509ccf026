"""A binary's loaded image as the program sees it before it runs: bytes by virtual
address from its PT_LOAD segments, with pointers as the dynamic loader would set them.

A position-independent executable linked externally keeps many pointers of its static
data as zero in the file and their values in ``R_X86_64_RELATIVE`` relocations; reading
them through ``pointer`` gives the value at a load address of zero, the same address
space as the file's symbols and sections.
"""

from __future__ import annotations

import struct
from functools import cached_property

from agent.binary.elf import ElfFile
from agent.errors import BinaryError

_PT_LOAD = 1
_PT_DYNAMIC = 2
_DT_RELA, _DT_RELASZ = 7, 8
_R_X86_64_64, _R_X86_64_RELATIVE = 1, 8


class Corrupt(BinaryError):
    """Metadata that points outside the file or does not parse."""


class Image:
    """Bytes and pointers of a binary by virtual address."""

    def __init__(self, elf: ElfFile) -> None:
        self.elf = elf
        self._data: dict[int, bytes] = {}

    @cached_property
    def loads(self) -> tuple[tuple[int, int, int, int, int], ...]:
        """(vaddr, memsz, offset, filesz, flags) of each PT_LOAD segment."""
        raw = self.elf.read(self.elf.phoff, self.elf.phnum * self.elf.phentsize)
        out = []
        for i in range(self.elf.phnum):
            p_type, flags, off, vaddr, _pa, filesz, memsz, _al = struct.unpack_from(
                "<IIQQQQQQ", raw, i * self.elf.phentsize)
            if p_type == _PT_LOAD:
                out.append((vaddr, memsz, off, filesz, flags))
        return tuple(out)

    def segment(self, vaddr: int) -> tuple[int, bytes] | None:
        """The loaded segment holding ``vaddr``: its start address and bytes (zeros past
        the file's part, as the loader maps them)."""
        for start, memsz, off, filesz, _fl in self.loads:
            if start <= vaddr < start + memsz:
                data = self._data.get(start)
                if data is None:
                    data = self.elf.read(off, filesz)
                    if len(data) < filesz:
                        raise Corrupt(f"{self.elf.path}: truncated (a segment ends past the "
                                      "end of the file)", "copy the whole binary again")
                    data = self._data[start] = data + bytes(memsz - filesz)
                return start, data
        return None

    def read(self, vaddr: int, size: int, what: str = "data") -> bytes:
        got = self.segment(vaddr)
        if got is None or vaddr + size > got[0] + len(got[1]) or size < 0:
            raise Corrupt(f"{self.elf.path}: {what} at {vaddr:#x} (+{size}) is outside the "
                          "loaded image", "the binary is damaged or not a Go program")
        start, data = got
        return data[vaddr - start:vaddr - start + size]

    def u32(self, vaddr: int) -> int:
        return int.from_bytes(self.read(vaddr, 4), "little")

    def pointer(self, vaddr: int) -> int:
        """The 8-byte pointer at ``vaddr`` after relocation at load address zero."""
        reloc = self.relocations.get(vaddr)
        if reloc is not None:
            return reloc
        return int.from_bytes(self.read(vaddr, 8), "little")

    def words(self, vaddr: int, count: int) -> tuple[int, ...]:
        return tuple(self.pointer(vaddr + 8 * i) for i in range(count))

    @cached_property
    def relocations(self) -> dict[int, int]:
        """Each relative relocation's place and value, from the dynamic section's
        ``DT_RELA`` table (empty for a statically placed executable)."""
        dynamic = self._dynamic()
        rela, size = dynamic.get(_DT_RELA), dynamic.get(_DT_RELASZ)
        if not rela or not size:
            return {}
        try:
            raw = self.read(rela, size, "the relocation table")
        except Corrupt:
            return {}
        out: dict[int, int] = {}
        for offset, info, addend in struct.iter_unpack("<QQq", raw[:size - size % 24]):
            if info & 0xFFFFFFFF == _R_X86_64_RELATIVE:
                out[offset] = addend & (2**64 - 1)
        return out

    def _dynamic(self) -> dict[int, int]:
        raw = self.elf.read(self.elf.phoff, self.elf.phnum * self.elf.phentsize)
        for i in range(self.elf.phnum):
            p_type, _fl, off, _va, _pa, filesz, _msz, _al = struct.unpack_from(
                "<IIQQQQQQ", raw, i * self.elf.phentsize)
            if p_type == _PT_DYNAMIC:
                data = self.elf.read(off, filesz)
                out: dict[int, int] = {}
                for tag, value in struct.iter_unpack("<qQ", data[:len(data) - len(data) % 16]):
                    if tag == 0:
                        break
                    out.setdefault(tag, value)
                return out
        return {}

    def find(self, needle: bytes, align: int = 1, writable: bool | None = None
             ) -> list[int]:
        """Virtual addresses of ``needle`` in the loaded segments (only those that are, or
        are not, writable when ``writable`` says so), at multiples of ``align``."""
        out = []
        for start, _memsz, _off, _filesz, flags in self.loads:
            if writable is not None and bool(flags & 2) != writable:
                continue
            got = self.segment(start)
            assert got is not None
            data = got[1]
            pos = data.find(needle)
            while pos >= 0:
                if (start + pos) % align == 0:
                    out.append(start + pos)
                pos = data.find(needle, pos + 1)
        return out
