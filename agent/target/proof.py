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

import hashlib
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass
from functools import cache
from typing import Any

from agent.errors import BinaryError, NoopError
from agent.target.elf import ElfFile

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


@cache
def _lite() -> Any:
    import capstone  # 40 ms: only when a site is proven, not whenever a plan is read

    return capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)


_STARTS: OrderedDict[tuple[str, int], tuple[dict[int, int], int]] = OrderedDict()
_STARTS_KEPT = 256
_lock = threading.Lock()


def starts(code: bytes, start: int) -> tuple[dict[int, int], int]:
    """The file offsets where instructions begin when ``code`` (at file offset ``start``)
    is decoded from its first byte, with each one's length, and where decoding
    stopped: past the end, or at
    the first byte capstone cannot decode. Kept for the last few hundred pieces of code
    (by digest): many files of one build, and many sites in one function."""
    key = (digest(code), start)
    with _lock:
        got = _STARTS.get(key)
        if got is not None:
            _STARTS.move_to_end(key)
            return got
    found = {}
    end = start
    for address, size, _mnemonic, _operands in _lite().disasm_lite(code, start):
        found[address] = size
        end = address + size
    got = (found, end)
    with _lock:
        _STARTS[key] = got
        while len(_STARTS) > _STARTS_KEPT:
            _STARTS.popitem(last=False)
    return got


def make(elf: ElfFile, code: tuple[int, int], address: int) -> Proof:
    """The proof for a site at virtual ``address`` inside the code ``(first address,
    size)`` of ``elf``; Unprovable when the code does not decode to an instruction
    starting there."""
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
    return of_code(elf.read(start, size), start, offset, elf.build_id)


def of_code(code: bytes, start: int, offset: int, build: str = "") -> Proof:
    """The proof for file ``offset`` in ``code`` (at file offset ``start``) of the build
    ``build`` ('' for a file that is not ELF: its code alone is checked)."""
    found, end = starts(code, start)
    if offset not in found:
        stop = f" (capstone stopped {end - start:#x} bytes in)" if end < offset else ""
        raise Unprovable(f"file offset {offset:#x} does not start an instruction of the "
                         f"code from {start:#x}{stop}")
    return Proof(build, start, len(code), digest(code),
                 code[offset - start:offset - start + found[offset]].hex())


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
        st = os.fstat(self.fd)
        self.stamp = (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)
        self._build: str | None = None

    @property
    def path(self) -> str:
        return f"/proc/self/fd/{self.fd}"

    def build(self) -> str:
        """The file's build-id, as ``ElfFile.build_id`` reads it."""
        if self._build is None:
            try:
                with ElfFile(self.path) as elf:
                    self._build = elf.build_id
            except BinaryError as exc:
                self._build = f"none ({exc.message.removeprefix(self.path + ': ')})"
        return self._build

    def read(self, offset: int, size: int) -> bytes:
        if not (0 < size <= MAX_CODE and 0 <= offset < 1 << 62):
            return b""
        return os.pread(self.fd, size, offset)

    def check(self, proof: Proof | None, offset: int) -> str:
        """Why a uprobe may not go at file ``offset`` ('' when it may)."""
        if proof is None:
            return "the plan proves nothing about it"
        build = self.build() if proof.build else ""
        if build != proof.build:
            return f"the file is build {build[:20]} now, the plan was made for " \
                f"{proof.build[:20]}"
        if not 0 < proof.size <= MAX_CODE:
            return f"the plan names {proof.size} bytes of code around it"
        code = self.read(proof.start, proof.size)
        if len(code) != proof.size or digest(code) != proof.digest:
            return f"its code at file offset {proof.start:#x} is not the plan's"
        if not proof.start <= offset < proof.start + proof.size:
            return f"file offset {offset:#x} is outside the code the plan names " \
                f"({proof.start:#x}..{proof.start + proof.size:#x})"
        found, _end = starts(code, proof.start)
        if offset not in found:
            return f"file offset {offset:#x} does not start an instruction"
        at = code[offset - proof.start:offset - proof.start + found[offset]]
        if at.hex() != proof.insn:
            return f"the instruction at file offset {offset:#x} is {at.hex() or 'none'}, " \
                f"the plan expects {proof.insn[:32]}"
        return ""

    def unchanged(self, proofs: list[Proof]) -> str:
        """Why the code ``proofs`` name is no longer what they say ('' when it is):
        read again after attaching, to catch a write in between."""
        for p in dict.fromkeys(proofs):
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
