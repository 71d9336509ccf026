"""Go's pclntab: every function's name, entry and size, its pc-value tables and its
inlining tree, as the runtime's tracebacks read them (runtime/symtab.go).

Headers from Go 1.18 on are read (magics 0xfffffff0 for 1.18 and 1.19, 0xfffffff1
from 1.20); an older one is named for what it is. From Go 1.26 the header's
``textStart`` may be zero: the text address then comes from the module data.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property

from agent.binary.elf import uleb128
from agent.binary.gometa.image import Corrupt, Image

MAGIC_118 = 0xFFFFFFF0  # Go 1.18, 1.19
MAGIC_120 = 0xFFFFFFF1  # Go 1.20 and later
_OLD_MAGICS = {0xFFFFFFFB: "1.2 to 1.15", 0xFFFFFFFA: "1.16 or 1.17"}

PCDATA_INLTREE_INDEX = 2
FUNCDATA_INLTREE = 3
FUNCFLAG_ASM = 4
_HEADER = struct.Struct("<IBBBBQQQQQQQQ")  # through pclnOffset: 72 bytes


@dataclass(frozen=True, slots=True)
class Func:
    """One function of pclntab."""

    name: str
    entry: int
    end: int  # where the next function begins: its code ends there or before
    start_line: int  # Go 1.20 and later; 0 before
    offset: int  # of its _func record, from the start of pclntable
    asm: bool  # written in assembly
    pcsp: int = 0  # its pc-to-SP table's offset (0: none)
    table: Pclntab | None = field(default=None, compare=False, repr=False)

    @property
    def size(self) -> int:
        """The code's own length: where its pc-value tables end (read when asked: a
        plan needs the sizes of a few of a large binary's functions)."""
        return self.table.size_of(self) if self.table is not None else self.end - self.entry


@dataclass(frozen=True, slots=True)
class InlinedCall:
    """One node of a function's inlining tree."""

    index: int
    name: str
    parent: int  # index of the node it is inlined into, -1 for the function itself
    parent_pc: int  # an address in the parent whose position is the call


def find_header(image: Image) -> int:
    """The address of pclntab: its own section when it has one, else the one place
    whose bytes make a valid header (with cgo and external linking it sits inside
    ``.data.rel.ro``)."""
    sec = image.elf.section(".gopclntab")
    if sec is not None and sec.addr:
        return sec.addr
    found = []
    for magic in (MAGIC_120, MAGIC_118, *_OLD_MAGICS):
        for at in image.find(struct.pack("<IBB", magic, 0, 0), align=8):
            if _plausible(image, at):
                found.append(at)
    if not found:
        raise Corrupt(f"{image.elf.path}: no Go pclntab found (not a Go program, or its "
                      "runtime tables are damaged)",
                      "noop reads stripped binaries only when they are Go programs; for "
                      "others point noop at their debug info (--debuginfo)")
    return found[0]


def _plausible(image: Image, at: int) -> bool:
    try:
        head = image.read(at, _HEADER.size)
    except Corrupt:
        return False
    magic, p1, p2, min_lc, ptr, nfunc, nfiles, _text, *offsets = _HEADER.unpack(head)
    if p1 or p2 or min_lc not in (1, 2, 4) or ptr != 8 or not 0 < nfunc < 1 << 24:
        return False
    if magic in _OLD_MAGICS:
        return True
    return nfiles < 1 << 24 and list(offsets) == sorted(offsets) and offsets[0] >= 72 \
        and image.segment(at + offsets[-1]) is not None


class Pclntab:
    """pclntab at ``address`` in ``image``; ``text`` is where its function offsets
    count from (``textStart``, else the module data's ``text``)."""

    def __init__(self, image: Image, address: int, text: int | None = None) -> None:
        self.image = image
        self.address = address
        path = image.elf.path
        head = image.read(address, _HEADER.size, "pclntab's header")
        (self.magic, _p1, _p2, self.min_lc, _ptr, self.nfunc, self.nfiles, _ts,
         self.funcname_off, self.cu_off, self.filetab_off, self.pctab_off,
         self.pcln_off) = _HEADER.unpack(head)
        if self.magic in _OLD_MAGICS:
            raise Corrupt(f"{path}: built by Go {_OLD_MAGICS[self.magic]}, whose runtime "
                          "tables noop does not read",
                          "rebuild with Go 1.18 or later, or keep its DWARF")
        if self.magic not in (MAGIC_118, MAGIC_120) or not _plausible(image, address):
            raise Corrupt(f"{path}: pclntab's header at {address:#x} is not one noop knows "
                          f"(magic {self.magic:#x})", "the binary is damaged")
        # textStart is a pointer: relocated in a position-independent executable.
        start = image.pointer(address + 24)
        self.text = start or text or 0
        if not self.text:
            raise Corrupt(f"{path}: pclntab gives no text address and no module data "
                          "was found", "the binary is damaged")
        self.new = self.magic == MAGIC_120
        self._func_struct = struct.Struct("<IiiIIIIIIiBBBB" if self.new else "<IiiIIIIIIBBBB")

    def _table(self, offset: int, size: int, what: str) -> bytes:
        return self.image.read(self.address + offset, size, what)

    @cached_property
    def _names(self) -> bytes:
        return self._table(self.funcname_off, self.cu_off - self.funcname_off,
                           "pclntab's function names")

    @cached_property
    def _pctab(self) -> bytes:
        return self._table(self.pctab_off, self.pcln_off - self.pctab_off,
                           "pclntab's pc-value tables")

    @cached_property
    def _pclntable(self) -> bytes:
        seg = self.image.segment(self.address + self.pcln_off)
        if seg is None:
            raise Corrupt(f"{self.image.elf.path}: pclntab's function table is outside "
                          "the loaded image")
        start, data = seg
        return data[self.address + self.pcln_off - start:]

    def name_at(self, offset: int) -> str:
        if not 0 <= offset < len(self._names):
            raise Corrupt(f"{self.image.elf.path}: a function name offset {offset:#x} is "
                          "outside pclntab", "the binary is damaged")
        end = self._names.find(b"\0", offset)
        return self._names[offset:end if end >= 0 else None].decode(errors="replace")

    @cached_property
    def functions(self) -> tuple[Func, ...]:
        """Every function, by address."""
        table = self._pclntable
        need = (self.nfunc + 1) * 8
        if len(table) < need:
            raise Corrupt(f"{self.image.elf.path}: pclntab is truncated "
                          f"({self.nfunc} functions do not fit)", "the binary is damaged")
        ftab = struct.unpack_from(f"<{2 * (self.nfunc + 1)}I", table)
        out = []
        for i in range(self.nfunc):
            entry_off, func_off = ftab[2 * i], ftab[2 * i + 1]
            rec = self._func(func_off)
            if rec[0] != entry_off:
                raise Corrupt(f"{self.image.elf.path}: pclntab's function {i} disagrees with "
                              "its index", "the binary is damaged")
            flag = rec[11] if self.new else rec[10]
            out.append(Func(self.name_at(rec[1]), self.text + entry_off,
                            self.text + ftab[2 * i + 2], rec[9] if self.new else 0,
                            func_off, bool(flag & FUNCFLAG_ASM), rec[4], self))
        return tuple(out)

    def size_of(self, func: Func) -> int:
        """``func``'s own length: where its pc-to-SP table ends (that of code the table
        does not cover: to the next function)."""
        got = self._sizes.get(func.offset)
        if got is None:
            size = self._last_pc(func.pcsp, func.entry) - func.entry if func.pcsp else \
                func.end - func.entry
            got = self._sizes[func.offset] = min(max(size, 0), func.end - func.entry)
        return got

    @cached_property
    def _sizes(self) -> dict[int, int]:
        return {}

    def file_at_entry(self, func: Func) -> str:
        """The source file of ``func``'s first instruction (``<autogenerated>`` for code
        the compiler made, such as ABI wrappers)."""
        rec = self._func(func.offset)
        ranges = self.pcvalue(rec[5], func.entry) if rec[5] else []
        return self._file(rec[8] + ranges[0][2]) if ranges else ""

    def lines(self, func: Func) -> list[tuple[int, int, str, int]]:
        """``func``'s line table: each range [lo, hi) of its code with the file and line
        it comes from (inside inlined code, the inlined function's), from its pcfile and
        pcln tables."""
        rec = self._func(func.offset)
        if not rec[5] or not rec[6]:
            return []
        files = self.pcvalue(rec[5], func.entry)
        numbers = self.pcvalue(rec[6], func.entry)
        out: list[tuple[int, int, str, int]] = []
        i = 0
        for lo, hi, line in numbers:
            while i < len(files) and files[i][1] <= lo:
                i += 1
            at = lo
            while at < hi and i < len(files):
                _lo, fhi, fileno = files[i]
                end = min(hi, fhi)
                if line > 0 and end > at:
                    out.append((at, end, self._file(rec[8] + fileno), line))
                at = end
                if fhi <= at:
                    i += 1
        return out

    def _file(self, index: int) -> str:
        cutab = self._cutab
        if not 0 <= index < len(cutab) // 4:
            return ""
        (off,) = struct.unpack_from("<I", cutab, 4 * index)
        files = self._filetab
        end = files.find(b"\0", off)
        return files[off:end].decode(errors="replace") if off < len(files) else ""

    @cached_property
    def _cutab(self) -> bytes:
        return self._table(self.cu_off, self.filetab_off - self.cu_off, "pclntab's units")

    @cached_property
    def _filetab(self) -> bytes:
        return self._table(self.filetab_off, self.pctab_off - self.filetab_off,
                           "pclntab's files")

    def _func(self, offset: int) -> tuple[int, ...]:
        table = self._pclntable
        if offset + self._func_struct.size > len(table):
            raise Corrupt(f"{self.image.elf.path}: a pclntab function record at {offset:#x} "
                          "is outside the table", "the binary is damaged")
        return self._func_struct.unpack_from(table, offset)

    def _last_pc(self, table_off: int, entry: int) -> int:
        """Where a pc-value table's last range ends: ``pcvalue``'s walk, adding only the
        pc deltas (every function's size is asked for by a synthesized symbol table)."""
        data = self._pctab
        if not 0 <= table_off < len(data):
            return max((hi for _lo, hi, _v in self.pcvalue(table_off, entry)), default=entry)
        pos, pc, first = table_off, 0, True
        try:
            for _ in range(1 << 20):
                uv = data[pos]
                if uv < 0x80:
                    pos += 1
                else:
                    uv, pos = uleb128(data, pos)
                if uv == 0 and not first:
                    return entry + pc * int(self.min_lc)
                first = False
                delta = data[pos]
                if delta < 0x80:
                    pos += 1
                else:
                    delta, pos = uleb128(data, pos)
                pc += delta
        except IndexError:
            pass
        self.pcvalue(table_off, entry)  # says what is wrong
        raise AssertionError("pcvalue accepted what _last_pc did not")

    def pcvalue(self, table_off: int, entry: int) -> list[tuple[int, int, int]]:
        """The ranges [lo, hi) of a pc-value table and the value over each."""
        data = self._pctab
        if not 0 <= table_off < len(data):
            raise Corrupt(f"{self.image.elf.path}: a pc-value table offset {table_off:#x} is "
                          "outside pclntab", "the binary is damaged")
        out: list[tuple[int, int, int]] = []
        pos, value, pc, first = table_off, -1, entry, True
        try:
            while len(out) < 1 << 20:
                uv = data[pos]  # most values and deltas fit one byte
                if uv < 0x80:
                    pos += 1
                else:
                    uv, pos = uleb128(data, pos)
                if uv == 0 and not first:
                    return out
                first = False
                value += -((uv >> 1) + 1) if uv & 1 else uv >> 1
                delta = data[pos]
                if delta < 0x80:
                    pos += 1
                else:
                    delta, pos = uleb128(data, pos)
                out.append((pc, pc + delta * self.min_lc, value))
                pc += delta * self.min_lc
        except IndexError:
            pass
        raise Corrupt(f"{self.image.elf.path}: a pc-value table runs past the end of "
                      "pclntab", "the binary is damaged")

    def pcdata(self, func: Func, index: int) -> list[tuple[int, int, int]]:
        """The ranges of pc-data table ``index`` of ``func`` ([] when it has none)."""
        rec = self._func(func.offset)
        npcdata = rec[7]
        if index >= npcdata:
            return []
        base = func.offset + self._func_struct.size
        (off,) = struct.unpack_from("<I", self._pclntable, base + 4 * index)
        return self.pcvalue(off, func.entry) if off else []

    def funcdata(self, func: Func, index: int) -> int | None:
        """The offset from ``gofunc`` of ``func``'s funcdata ``index``, if it has one."""
        rec = self._func(func.offset)
        npcdata, nfuncdata = rec[7], rec[-1]
        if index >= nfuncdata:
            return None
        base = func.offset + self._func_struct.size + 4 * npcdata
        (off,) = struct.unpack_from("<I", self._pclntable, base + 4 * index)
        return None if off == 0xFFFFFFFF else off

    def inline_tree(self, func: Func, gofunc: int) -> list[InlinedCall]:
        """``func``'s inlining tree, with each node's parent (from Go 1.20 on the tree
        keeps none: it is the node whose code holds the call's ``parentPc``)."""
        return self.inlining(func, gofunc)[0]

    def inlining(self, func: Func, gofunc: int
                 ) -> tuple[list[InlinedCall], list[tuple[int, int, int]]]:
        """``func``'s inlining tree and its inlining index: the node each range of its
        code is from (-1: the function's own)."""
        off = self.funcdata(func, FUNCDATA_INLTREE)
        ranges = self.pcdata(func, PCDATA_INLTREE_INDEX)
        if off is None or not ranges:
            return [], ranges
        count = max(v for _lo, _hi, v in ranges) + 1
        if count <= 0:
            return [], ranges
        size = 16 if self.new else 20
        raw = self.image.read(gofunc + off, size * count, "an inlining tree")
        nodes = []
        for i in range(count):
            if self.new:
                _fid, _a, _b, _c, name_off, parent_pc, _line = struct.unpack_from(
                    "<BBBBiii", raw, i * size)
                parent = _value_at(ranges, func.entry + parent_pc)
            else:
                parent, _fid, _pad, _file, _line, name_off, parent_pc = struct.unpack_from(
                    "<hBBiiii", raw, i * size)
            nodes.append(InlinedCall(i, self.name_at(name_off), parent,
                                     func.entry + parent_pc))
        return nodes, ranges

    def inliners(self, funcs: list[Func], wanted: Callable[[str], bool], gofunc: int
                 ) -> list[Func]:
        """Those of ``funcs`` whose inlining tree holds a function whose name (``·`` as
        ``.``) is ``wanted``: every tree's names compared by their offsets in the names
        table (a tree ends where the next begins, or sooner), and the trees that may
        hold one decoded."""
        wanted_at: set[int] = set()
        at = 0
        for raw in self._names.split(b"\0"):
            if raw and wanted(raw.decode(errors="replace").replace("·", ".")):
                wanted_at.add(at)
            at += len(raw) + 1
        trees = sorted((off, f) for f in funcs
                       if (off := self.funcdata(f, FUNCDATA_INLTREE)) is not None)
        if not wanted_at or not trees:
            return []
        size, name_at = (16, 4) if self.new else (20, 12)
        lo, hi = trees[0][0], trees[-1][0] + size * 4096
        seg = self.image.segment(gofunc + lo)
        if seg is None:
            return [f for _o, f in trees if any(wanted(n.name.replace("·", "."))
                                                for n in self.inline_tree(f, gofunc))]
        start, data = seg
        region = data[gofunc + lo - start:gofunc + hi - start]
        words = memoryview(region[:len(region) // 4 * 4]).cast("i")
        starts = sorted({off for off, _f in trees})
        ends = dict(zip(starts, [*starts[1:], hi], strict=True))  # functions may share one tree
        out = []
        for off, f in trees:
            end = ends[off]
            first = (off - lo + name_at) // 4
            maybe = (off - lo) % 4 or not wanted_at.isdisjoint(
                words[first:(end - lo) // 4:size // 4])
            if maybe and any(wanted(n.name.replace("·", "."))
                             for n in self.inline_tree(f, gofunc)):
                out.append(f)
        return out


def node_ranges(tree: list[InlinedCall], index: list[tuple[int, int, int]]
                ) -> dict[int, list[tuple[int, int]]]:
    """The code of each node of an inlining tree: the ranges ``index`` (the function's
    inlining index) gives it and those of the copies inlined into it; a node with none
    has no code left."""
    out: dict[int, list[tuple[int, int]]] = {}
    parents = {n.index: n.parent for n in tree}
    for lo, hi, node in index:
        steps = 0
        while node >= 0 and steps < len(tree):
            out.setdefault(node, []).append((lo, hi))
            node = parents.get(node, -1)
            steps += 1
    return out


def _value_at(ranges: list[tuple[int, int, int]], pc: int) -> int:
    return next((v for lo, hi, v in ranges if lo <= pc < hi), -1)
