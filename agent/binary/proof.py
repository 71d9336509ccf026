"""Proofs that an offset is where a uprobe may go: an instruction boundary of the very
build a plan was made for.

A uprobe writes a breakpoint over the first byte of whatever starts at its file offset.
At an offset that is not the start of an instruction it lands inside one (a
displacement, an immediate) and the service computes with a corrupted instruction. So
every site of a plan carries a ``Proof``: the build-id of its file, the code around it
(a function's bytes, by file offset, size and digest) and the bytes of the instruction
at the site. Before a uprobe goes on, ``Opened.check`` reads the file through the very
descriptor the uprobe is then attached through and confirms all of it, decoding the
code from its first instruction (capstone) to see that the offset starts one: the
expected bytes alone may match by chance (a ``ret``, padding).
"""

from __future__ import annotations

import base64
import hashlib
import os
import threading
import zlib
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from agent import cache as disk
from agent.binary.arch import AMD64, host
from agent.binary.elf import ElfFile, Stamp, stamp
from agent.binary.isa import of as of_arch
from agent.errors import BinaryError, NoopError

MAX_CODE = 1 << 24  # bytes of code a proof may decode (the largest function seen: ~1 MB)


class Unprovable(NoopError):
    """A site whose offset cannot be shown to start an instruction."""


@dataclass(frozen=True, slots=True)
class Proof:
    """What the file must hold for a uprobe at a site: the build, the code holding the
    site (``size`` bytes at file offset ``start``, their sha256 ``digest``), and the
    bytes of the instruction at the site (hex)."""

    build: str
    start: int
    size: int
    digest: str
    insn: str


def digest(code: bytes) -> str:
    return hashlib.sha256(code).hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class Decoded:
    """``code`` decoded from its first byte: ``lengths[i]`` is the length of the
    instruction starting ``i`` bytes in (0 where none starts), ``end`` how many bytes
    decoded (fewer than all: capstone met a byte it cannot decode). One byte per byte
    of code, whatever the function."""

    lengths: bytes
    end: int

    def length(self, at: int) -> int:
        """The length of the instruction starting ``at`` bytes in; 0 when none does."""
        return self.lengths[at] if 0 <= at < len(self.lengths) else 0


_DECODED: OrderedDict[tuple[str, int, str], Decoded] = OrderedDict()
_DECODED_BYTES = 16 << 20  # what the kept tables may take in all
_lock = threading.Lock()


def decoded(code: bytes, digested: str = "", arch: str = "x86-64") -> Decoded:
    """``code`` of architecture ``arch`` decoded from its first byte (``digested``: its
    ``digest``, when known). Kept, up to 16 MB of tables in all, by digest: many files
    of one build, and many sites in one function, decode once."""
    key = (digested or digest(code), len(code), arch)
    with _lock:
        got = _DECODED.get(key)
        if got is not None:
            _DECODED.move_to_end(key)
            return got
    isa = of_arch(arch)
    name = f"{key[0]}-{key[1]}" + ("" if arch == "x86-64" else f"-{arch}")
    got = disk.get("code", "decoded", name,
                   load=lambda v: _kept(v, len(code), isa.max_length))
    if got is None:
        got = Decoded(*isa.lengths(code))  # capstone: only when a site is proven
        disk.put("code", "decoded", name, {
            "lengths": base64.b64encode(zlib.compress(got.lengths)).decode(), "end": got.end})
    with _lock:
        _DECODED[key] = got
        kept = sum(len(d.lengths) for d in _DECODED.values())
        while kept > _DECODED_BYTES and len(_DECODED) > 1:
            kept -= len(_DECODED.popitem(last=False)[1].lengths)
    return got


def _kept(value: object, size: int, longest: int = 15) -> Decoded:
    """The table a cache entry keeps for ``size`` bytes of code, checked: the
    instructions it names follow one another from the first byte to ``end`` and no
    other byte starts one (what decoding from the first byte gives); else ValueError.
    A warm start then proves its sites without loading capstone."""
    if not isinstance(value, dict) or not isinstance(value.get("lengths"), str) or \
            not isinstance(value.get("end"), int):
        raise ValueError("not a decoded table")
    lengths = zlib.decompress(base64.b64decode(value["lengths"], validate=True),
                              bufsize=size + 1)
    end, at, starts = value["end"], 0, 0
    if len(lengths) != size or not 0 <= end <= size:
        raise ValueError("a table of another size")
    while at < end:
        if not 1 <= lengths[at] <= longest:
            raise ValueError(f"no instruction at +{at}")
        at, starts = at + lengths[at], starts + 1
    if at != end or starts != size - lengths.count(0):
        raise ValueError("instructions that do not follow one another")
    return Decoded(lengths, end)


def _insn(code: bytes, start: int, offset: int, digested: str = "", arch: str = "x86-64"
          ) -> bytes | None:
    """The bytes of the instruction at file ``offset`` of ``code`` (at file offset
    ``start``), decoded from its first byte; None when none starts there."""
    n = decoded(code, digested, arch).length(offset - start)
    return code[offset - start:offset - start + n] if n else None


# What was read of a file for many sites at once (a plan made, a pass of checks before
# attaching): code, its bytes and digest, by file offset and size. A function holding
# a hundred sites is read and hashed once.
Codes = dict[tuple[int, int], tuple[bytes, str]]


def make(elf: ElfFile, code: tuple[int, int], address: int, codes: Codes | None = None
         ) -> Proof:
    """The proof for a site at virtual ``address`` inside the code ``(first address,
    size)`` of ``elf``; Unprovable when the code does not decode to an instruction
    starting there. ``codes``: what the caller read of ``elf`` before, and keeps (a
    plan's Binary: the file as it was read to make the plan)."""
    first, size = code
    if not first <= address < first + size:
        raise Unprovable(f"{address:#x} is outside the code it was found in "
                         f"({first:#x}..{first + size:#x})")
    try:
        start, offset = elf.file_offset(first), elf.file_offset(address)
    except BinaryError as exc:
        raise Unprovable(exc.message) from None
    if size > MAX_CODE:
        raise Unprovable(f"the function holding {address:#x} is {size} bytes long, "
                         f"more than noop decodes ({MAX_CODE})")
    got, digested = _read(elf.read, start, size, codes)
    return of_code(got, start, offset, elf.build_id, digested, elf.arch.name)


def _read(read: Callable[[int, int], bytes], start: int, size: int, codes: Codes | None
          ) -> tuple[bytes, str]:
    """``size`` bytes at file offset ``start`` read by ``read`` and their digest, or as
    ``codes`` has them (then kept there)."""
    got = codes.get((start, size)) if codes is not None else None
    if got is None:
        code = read(start, size)
        got = (code, digest(code))
        if codes is not None:
            codes[(start, size)] = got
    return got


def of_code(code: bytes, start: int, offset: int, build: str = "", digested: str = "",
            arch: str = "x86-64") -> Proof:
    """The proof for file ``offset`` in ``code`` (at file offset ``start``) of the build
    ``build`` ('' for a file that is not ELF: its code alone is checked), machine code
    of ``arch``; ``digested``: the code's digest, when known."""
    digested = digested or digest(code)
    insn = _insn(code, start, offset, digested, arch)
    if insn is None:
        end = decoded(code, digested, arch).end
        stop = f" (capstone stopped {end:#x} bytes in)" if start + end < offset else ""
        raise Unprovable(f"file offset {offset:#x} does not start an instruction of the "
                         f"code from {start:#x}{stop}")
    return Proof(build, start, len(code), digested, insn.hex())


class Opened:
    """A file opened once: checked, attached and checked again through one descriptor,
    whatever is renamed over its path meanwhile. ``path`` names that descriptor for
    the kernel (``/proc/self/fd/N`` resolves to the same inode)."""

    def __init__(self, path: str) -> None:
        self.name = path
        try:
            self.fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            raise BinaryError(f"{path}: no such file",
                              "the file is gone; is the target still installed?") from None
        except OSError as exc:
            raise BinaryError(f"{path}: {exc.strerror or exc}",
                              "noop needs to read the file it probes") from None
        got = stamp(self.fd)
        if got is None:
            os.close(self.fd)
            raise BinaryError(f"{path}: cannot be read", "noop needs to read the file "
                              "it probes")
        self.stamp: Stamp = got
        self._build: str | None = None
        self._arch = (host() or AMD64).name  # a file that is not ELF: this machine's code

    @property
    def path(self) -> str:
        return f"/proc/self/fd/{self.fd}"

    def build(self) -> str:
        """The file's build-id, as ``ElfFile.build_id`` reads it."""
        if self._build is None:
            try:
                with ElfFile(self.path) as elf:
                    self._build = elf.build_id
                    self._arch = elf.arch.name
            except BinaryError as exc:
                self._build = f"none ({exc.message.removeprefix(self.path + ': ')})"
        return self._build

    def read(self, offset: int, size: int) -> bytes:
        """Up to ``size`` bytes at ``offset``; none where the file cannot be read there
        (a directory renamed over the path, an I/O error): that proves nothing."""
        if not (0 < size <= MAX_CODE and 0 <= offset < 1 << 62):
            return b""
        try:
            return os.pread(self.fd, size, offset)
        except OSError:
            return b""

    def check(self, proof: Proof | None, offset: int, codes: Codes | None = None) -> str:
        """Why a uprobe may not go at file ``offset`` ('' when it may); ``codes``: what
        this pass of checks, before any uprobe goes on, has read of the file."""
        if proof is None:
            return "the plan proves nothing about it"
        build = self.build()
        if proof.build and build != proof.build:
            return f"the file is build {build[:20]} now, the plan was made for " \
                f"{proof.build[:20]}"
        if not proof.build and not build.startswith("none ("):
            return "the plan proves a file that is not ELF, and this one is"
        if not 0 < proof.size <= MAX_CODE:
            return f"the plan names {proof.size} bytes of code around it"
        code, digested = _read(self.read, proof.start, proof.size, codes)
        if len(code) != proof.size or digested != proof.digest:
            return f"its code at file offset {proof.start:#x} is not the plan's"
        if not proof.start <= offset < proof.start + proof.size:
            return f"file offset {offset:#x} is outside the code the plan names " \
                f"({proof.start:#x}..{proof.start + proof.size:#x})"
        at = _insn(code, proof.start, offset, digested, self._arch)
        if at is None:
            return f"file offset {offset:#x} does not start an instruction"
        if at.hex() != proof.insn:
            return f"the instruction at file offset {offset:#x} is {at.hex()}, the plan " \
                f"expects {proof.insn[:32]}"
        return ""

    def unchanged(self, proofs: list[Proof]) -> str:
        """Why the code ``proofs`` name is no longer what they say ('' when it is):
        read again after attaching, to catch a write in between."""
        for p in {(p.start, p.size, p.digest): p for p in proofs}.values():
            code = self.read(p.start, p.size)
            if len(code) != p.size or digest(code) != p.digest:
                return f"its code at file offset {p.start:#x} changed while noop attached"
        return ""

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> Opened:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
