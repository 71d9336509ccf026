"""Where a binary's DWARF comes from: the binary itself, a separate debug file that
belongs to it, or, for a stripped Go program, DWARF noop makes from the Go runtime's
own metadata.

Separate debug files are looked for where distributions and debuggers put them, in
order: a file named for the binary (``--debuginfo``, a target's ``debuginfo:``),
``DIR/.build-id/xx/rest.debug`` under each debug directory (``/usr/lib/debug``, or
``NOOP_DEBUG_DIRS``, colon-separated), the ``.gnu_debuglink`` file beside the binary,
in its ``.debug/`` or under each debug directory, and a debuginfod client's cache
(``$DEBUGINFOD_CACHE_PATH`` or ``~/.cache/debuginfod_client``). A debug file must
belong to the binary: the same GNU build-id, the same Go build ID, or the CRC its
debuglink names; any other is refused.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import zlib
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from agent import cache, files
from agent.binary.elf import ElfFile
from agent.binary.gometa.scope import Scope
from agent.errors import BinaryError, NoDebugInfo

SELF, SEPARATE, GO_METADATA, SYMBOLS = "binary", "separate", "go-metadata", "symbols"


@dataclass(frozen=True, slots=True)
class Given:
    """What the user gave noop about a binary: its separate debug file (``--debuginfo``,
    a target's ``debuginfo:``), and the signatures (Go function types, by function) a
    spec gives for a stripped Go binary whose type metadata keeps none (used only when
    its DWARF is made from metadata)."""

    debug: str | None = None
    signatures: tuple[tuple[str, str], ...] = ()


NOTHING = Given()


@dataclass(frozen=True, slots=True)
class Source:
    """Where the DWARF of a binary is read: ``path``, found as ``how`` says. DWARF made
    from Go metadata is written at ``path`` when first opened (``ready``), for the
    ``signatures`` a spec gives and the ``scope`` a reader needs."""

    kind: str  # SELF, SEPARATE, GO_METADATA or SYMBOLS
    path: str
    how: str
    signatures: tuple[tuple[str, str], ...] = ()
    scope: Scope | None = None

    @property
    def cache_tag(self) -> str:
        """What keeps answers from different sources apart in the build-id cache."""
        if self.kind == SYMBOLS:
            return "+symtab"
        if self.kind != GO_METADATA:
            return ""
        # the signatures' hash and the scope's, as the made file's name has them
        return "+gometa" + "".join(f"-{part}" for part in Path(self.path).name.split(".")
                                   if part[:1] in "sw" and len(part) == 17)

    def ready(self, elf: ElfFile) -> Source:
        """This source, its DWARF made if it is made from metadata and not made yet
        (kept in noop's cache; where the cache cannot hold it, in a private directory:
        the source then names that)."""
        if self.kind != GO_METADATA or _is_file(Path(self.path)):
            return self
        return replace(self, path=str(_made(
            elf, Path(self.path),
            lambda out: _synthesize(elf, out, dict(self.signatures), self.scope))))


def cache_id(elf: ElfFile, source: Source | None = None, given: Given = NOTHING) -> str:
    """The key of ``elf``'s answers in noop's cache ('' for a binary without build-id:
    nothing is kept): its build-id, the digest of its bytes and of a separate debug
    file's (a copy with the same build-id but other bytes is another binary), and
    where its DWARF came from."""
    if not elf.build_id:
        return ""
    source = source or locate(elf, None, given)
    parts = [elf.build_id, cache.fingerprint(elf.path)]
    if source.kind == SEPARATE:
        parts.append(cache.fingerprint(source.path))
    return "-".join(parts) + source.cache_tag


def forget(path: str) -> None:
    """Forget what noop's cache keeps about the binary at ``path``: its answers, from
    whatever DWARF, and the DWARF noop made for it (when a plan made from them did not
    hold for the file)."""
    try:
        with ElfFile(path) as elf:
            build = elf.build_id
            cache.drop(f"{build}-{cache.fingerprint(path)}")
    except (BinaryError, OSError):
        return
    for kind in ("gometa", "symtab"):
        for made in (cache.cache_dir() / kind).glob(f"{build}.v*.debug"):
            with contextlib.suppress(OSError):
                made.unlink()


def locate(elf: ElfFile, scope: Scope | None = None, given: Given = NOTHING) -> Source:
    """Where ``elf``'s DWARF is (``given``: what the user named for it); NoDebugInfo when
    nowhere. For a stripped Go program, DWARF made from its metadata for ``scope`` (the
    whole program without one), made when first opened."""
    named = given.debug
    if named is not None:
        why = _refusal(elf, Path(named))
        if why:
            raise BinaryError(f"{named}: {why}",
                              f"name the debug file made from this very build of {elf.path}")
        return Source(SEPARATE, named, f"--debuginfo {named}")
    if elf.has_dwarf:
        return Source(SELF, str(elf.path), "in the binary")
    for path, how in _candidates(elf):
        if path.is_file() and not _refusal(elf, path):
            return Source(SEPARATE, str(path), how)
    if _is_go(elf):
        signed = dict(given.signatures)
        return Source(GO_METADATA, str(_synthesized(elf, signed, scope)),
                      "Go runtime metadata (pclntab, type descriptors)" +
                      (", signatures from the spec" if signed else ""),
                      tuple(sorted(signed.items())), scope)
    from agent.binary.dwarf import symtab

    if elf.function_symbols() and symtab.is_rust(elf):
        return Source(SYMBOLS, str(_from_symbols(elf)),
                      "the symbol table only: a Rust build without debug info")
    raise NoDebugInfo(
        f"{elf.path}: no DWARF debug information (the binary is stripped), and no debug "
        "file for it was found",
        "rebuild it with -g (C) or with debuginfo (Rust), or name its debug file with "
        "--debuginfo FILE (or install it under /usr/lib/debug/.build-id)")


def _is_go(elf: ElfFile) -> bool:
    """Whether ``elf`` is a Go program: its sections say so, or, when it has none left,
    a valid pclntab is among the bytes it loads."""
    if elf.section(".gopclntab") is not None or elf.section(".go.buildinfo") is not None:
        return True
    if elf.sections:
        return elf.go_version is not None
    from agent.binary.gometa.image import Corrupt, Image
    from agent.binary.gometa.pclntab import find_header

    try:
        find_header(Image(elf))
    except Corrupt:
        return False
    return True


def _debug_dirs() -> list[Path]:
    return [Path(d) for d in os.environ.get("NOOP_DEBUG_DIRS", "/usr/lib/debug").split(":")
            if d]


def _candidates(elf: ElfFile) -> list[tuple[Path, str]]:
    out: list[tuple[Path, str]] = []
    gnu = elf.gnu_build_id
    if gnu and len(gnu) > 2:
        for d in _debug_dirs():
            out.append((d / ".build-id" / gnu[:2] / f"{gnu[2:]}.debug", f"build-id, in {d}"))
    link = elf.debuglink
    if link is not None:
        here = elf.path.resolve().parent
        out += [(here / link[0], "debuglink, beside the binary"),
                (here / ".debug" / link[0], "debuglink, in .debug/")]
        out += [(d / str(here).lstrip("/") / link[0], f"debuglink, in {d}")
                for d in _debug_dirs()]
    if gnu:
        root = os.environ.get("DEBUGINFOD_CACHE_PATH") or \
            str(Path.home() / ".cache" / "debuginfod_client")
        out.append((Path(root) / gnu / "debuginfo", "debuginfod client cache"))
    return out


def _refusal(elf: ElfFile, path: Path) -> str:
    """Why the debug file at ``path`` does not belong to ``elf`` ('' when it does)."""
    try:
        debug = ElfFile(path)
    except BinaryError as exc:
        return exc.message.removeprefix(f"{path}: ")
    with debug:
        if not debug.has_dwarf:
            return "has no DWARF debug information"
        for mine, theirs, what in ((elf.gnu_build_id, debug.gnu_build_id, "GNU build-id"),
                                   (elf.go_build_id, debug.go_build_id, "Go build ID")):
            if mine and theirs:
                return "" if mine == theirs else \
                    f"its {what} {theirs[:16]}… is not the binary's {mine[:16]}…"
        link = elf.debuglink
        if link is not None:
            crc = zlib.crc32(path.read_bytes()) & 0xFFFFFFFF
            return "" if crc == link[1] else \
                f"its CRC {crc:#010x} is not the {link[1]:#010x} the binary's debuglink names"
        return "shares no build-id with the binary, and the binary has no debuglink"


def _synthesized(elf: ElfFile, signatures: dict[str, str], scope: Scope | None) -> Path:
    """Where the DWARF made from the Go runtime metadata of ``elf`` (and the signatures
    a spec gives, for ``scope``) is kept in noop's cache: one file per build-id,
    signatures and scope."""
    from agent.binary.gometa import FORMAT

    signed = ""
    if signatures:
        text = json.dumps(signatures, sort_keys=True).encode()
        signed = ".s" + hashlib.sha256(text).hexdigest()[:16]
    scoped = f".w{scope.key}" if scope is not None else ""
    return cache.cache_dir() / "gometa" / f"{elf.build_id}.v{FORMAT}{signed}{scoped}.debug"


def _synthesize(elf: ElfFile, path: Path, signatures: dict[str, str],
                scope: Scope | None) -> None:
    from agent.binary.gometa import synth
    from agent.binary.gometa.program import GoProgram

    program = GoProgram(elf)
    path.parent.mkdir(parents=True, exist_ok=True)
    synth.write(program, path, signatures, scope)


def _from_symbols(elf: ElfFile) -> Path:
    """The DWARF file made from the symbol table of ``elf``, made once per build-id and
    kept in noop's cache."""
    from agent.binary.dwarf import symtab

    path = cache.cache_dir() / "symtab" / f"{elf.build_id}.v{symtab.FORMAT}.debug"
    if _is_file(path):
        return path

    def make(out: Path) -> None:
        out.parent.mkdir(parents=True, exist_ok=True)
        symtab.write(elf, out)

    return _made(elf, path, make)


def _is_file(path: Path) -> bool:
    """Whether a regular file is at ``path`` (any OS error on the way: no)."""
    try:
        return path.is_file()
    except (OSError, ValueError):
        return False


def _made(elf: ElfFile, path: Path, make: Callable[[Path], None]) -> Path:
    """Where the debug info ``make`` writes for ``elf`` is: ``path`` in the cache, or,
    when the cache cannot hold it (a full disk), the same name in a private directory
    removed at exit; a one-line error when neither can."""
    try:
        make(path)
        return path
    except OSError as exc:
        cache.unwritable(path.parent, exc)
    except ValueError:  # a NUL in NOOP_CACHE_DIR
        cache.unwritable(path.parent, OSError(22, "not a file name"))
    spare = cache.private(path.parent.name) / path.name
    try:
        if not _is_file(spare):
            make(spare)
        return spare
    except OSError as exc:
        raise BinaryError(f"{elf.path}: cannot write the debug info noop makes for it "
                          f"in {path.parent} or {spare.parent}: {files.why(exc)}",
                          "free some space, or set NOOP_CACHE_DIR to a directory with "
                          "room") from None
