"""Go build info (``.go.buildinfo``): the toolchain's version and the main module's,
each dependency's path and version, and the build settings, as ``go version -m``
prints them (runtime/debug.BuildInfo). Layout of Go 1.18 and later."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from agent.binary.elf import uleb128
from agent.binary.gometa.image import Corrupt, Image

MAGIC = b"\xff Go buildinf:"
_INLINE_STRINGS = 2


@dataclass(frozen=True, slots=True)
class Module:
    path: str
    version: str  # "(devel)" for the main module built from a work tree


@dataclass(frozen=True, slots=True)
class BuildInfo:
    go_version: str
    path: str = ""  # the main package
    main: Module | None = None
    deps: tuple[Module, ...] = ()
    settings: tuple[tuple[str, str], ...] = field(default=())

    @property
    def version(self) -> tuple[int, int] | None:
        """(major, minor) of the Go toolchain."""
        m = re.match(r"go(\d+)\.(\d+)", self.go_version)
        return (int(m[1]), int(m[2])) if m else None

    def module(self, path: str) -> Module | None:
        """The dependency that provides package ``path`` (the longest module path that is
        a prefix of it)."""
        owners = [m for m in (*([self.main] if self.main else []), *self.deps)
                  if path == m.path or path.startswith(m.path + "/")]
        return max(owners, key=lambda m: len(m.path), default=None)


def read(image: Image) -> BuildInfo | None:
    """The binary's build info, or None when it has none (not Go, or Go before 1.18)."""
    sec = image.elf.section(".go.buildinfo")
    places = [sec.addr] if sec is not None and sec.addr else \
        image.find(MAGIC, align=16, writable=True)
    for at in places:
        try:
            head = image.read(at, 32, "build info")
        except Corrupt:
            continue
        if not head.startswith(MAGIC) or not head[15] & _INLINE_STRINGS:
            continue
        seg = image.segment(at)
        assert seg is not None
        data = seg[1][at - seg[0]:]
        try:
            n, pos = uleb128(data, 32)
            version = data[pos:pos + n].decode(errors="replace")
            n, pos = uleb128(data, pos + n)
            mod = data[pos:pos + n]
        except IndexError:
            raise Corrupt(f"{image.elf.path}: Go build info is truncated",
                          "the binary is damaged") from None
        return parse(version, mod[16:-16] if len(mod) >= 33 else b"")
    return None


def parse(version: str, modinfo: bytes) -> BuildInfo:
    """Build info from the version string and the module text between its sentinels."""
    path, main, deps, settings = "", None, [], []
    for line in modinfo.decode(errors="replace").splitlines():
        word, _, rest = line.partition("\t")
        cols = rest.split("\t")
        if word == "path":
            path = rest
        elif word == "mod" and len(cols) >= 2:
            main = Module(cols[0], cols[1])
        elif word == "dep" and len(cols) >= 2:
            deps.append(Module(cols[0], cols[1]))
        elif word == "=>" and deps and len(cols) >= 2:  # the dependency above, replaced
            deps[-1] = Module(deps[-1].path, f"{cols[1]} (replaced by {cols[0]})"
                              if cols[1] else f"replaced by {cols[0]}")
        elif word == "build":
            key, _, value = rest.partition("=")
            settings.append((key, value))
    return BuildInfo(version, path, main, tuple(deps), tuple(settings))
