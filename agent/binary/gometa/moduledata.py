"""``runtime.firstmoduledata``: the one record that ties a Go binary's runtime tables
together (pclntab, the text and type regions, typelinks and itabs), found without a
symbol table as the record whose first word points at pclntab.

Its layout changes across Go versions; each known layout is checked against what the
other fields must be before it is used.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from agent.binary.gometa.image import Corrupt, Image


@dataclass(frozen=True, slots=True)
class _Layout:
    since: str
    types: int
    etypes: int
    gofunc: int
    typelinks: int | None  # a []int32 of offsets from types (to Go 1.26)
    itablinks: int | None  # a []*itab (to Go 1.26)
    typedesclen: int | None = None  # Go 1.27: descriptors walked from types + 8
    itab_region: int | None = None  # Go 1.27: itaboffset, itabsize


# Offsets in runtime.moduledata (runtime/symtab.go), newest first.
_LAYOUTS = (
    _Layout("1.27", types=296, typedesclen=304, etypes=312, itab_region=320, gofunc=344,
            typelinks=None, itablinks=None),
    _Layout("1.26", types=296, etypes=304, gofunc=320, typelinks=360, itablinks=384),
    _Layout("1.20", types=296, etypes=304, gofunc=320, typelinks=352, itablinks=376),
    _Layout("1.18", types=280, etypes=288, gofunc=304, typelinks=336, itablinks=360),
)
_TEXT = 176  # text, etext: the same from Go 1.18 on


@dataclass(frozen=True, slots=True)
class ModuleData:
    """What noop reads of the module data."""

    address: int
    text: int
    etext: int
    types: int
    etypes: int
    gofunc: int
    typelinks: tuple[int, ...]  # type descriptor addresses
    itabs: tuple[int, ...]  # itab addresses
    layout: str  # the Go version that introduced it
    typedesclen: int = 0  # Go 1.27: typelinks are the descriptors in [types + 8, + this)
    itab_offset: int = 0  # Go 1.27: the itabs in [types + itab_offset, + itab_size)
    itab_size: int = 0


def find(image: Image, pclntab: int, go_version: str | None) -> ModuleData:
    """The module data of the binary whose pclntab is at ``pclntab``."""
    places = sorted({at for at, v in image.relocations.items() if v == pclntab}
                    | set(image.find(struct.pack("<Q", pclntab), align=8, writable=True)))
    wanted = _wanted(go_version)
    for at in places:
        for layout in wanted:
            got = _read(image, at, layout)
            if got is not None:
                return got
    raise Corrupt(f"{image.elf.path}: the Go module data was not found (no record points "
                  f"at pclntab {pclntab:#x} with a layout noop knows)",
                  "the binary is damaged, or built by a Go newer than noop knows")


def _wanted(go_version: str | None) -> tuple[_Layout, ...]:
    """The layouts to try: the version's own first, when build info names one."""
    v = _version(go_version)
    if v is None:
        return _LAYOUTS
    own = next((lay for lay in _LAYOUTS if v >= _version("go" + lay.since)  # type: ignore[operator]
                ), _LAYOUTS[-1])
    return (own, *(lay for lay in _LAYOUTS if lay is not own))


def _version(v: str | None) -> tuple[int, int] | None:
    if not v or not v.startswith("go"):
        return None
    parts = v[2:].split(".")
    try:
        return int(parts[0]), int("".join(c for c in parts[1] if c.isdigit()) or 0)
    except (IndexError, ValueError):
        return None


def _read(image: Image, at: int, lay: _Layout) -> ModuleData | None:
    try:
        text, etext = image.words(at + _TEXT, 2)
        types, etypes, gofunc = (image.pointer(at + lay.types), image.pointer(at + lay.etypes),
                                 image.pointer(at + lay.gofunc))
        if not (text < etext and types < etypes and etypes - types < 1 << 31
                and image.segment(types) and image.segment(gofunc)):
            return None
        if lay.typelinks is not None and lay.itablinks is not None:
            tl_ptr, tl_len, tl_cap = image.words(at + lay.typelinks, 3)
            it_ptr, it_len, it_cap = image.words(at + lay.itablinks, 3)
            if tl_len != tl_cap or it_len != it_cap or tl_len > 1 << 22 or it_len > 1 << 22:
                return None
            offsets = struct.unpack(f"<{tl_len}i", image.read(tl_ptr, 4 * tl_len, "typelinks")) \
                if tl_len else ()
            typelinks = tuple(types + o for o in offsets)
            itabs = tuple(image.pointer(it_ptr + 8 * i) for i in range(it_len))
        else:
            assert lay.typedesclen is not None and lay.itab_region is not None
            desclen = image.pointer(at + lay.typedesclen)
            itab_off, itab_size = image.words(at + lay.itab_region, 2)
            span = etypes - types
            if desclen > span or itab_off + itab_size > span:
                return None
            # Walked by the type reader, which knows each descriptor's size.
            return ModuleData(at, text, etext, types, etypes, gofunc, (), (), lay.since,
                              desclen, itab_off, itab_size)
    except Corrupt:
        return None
    if any(not types <= t < etypes for t in typelinks):
        return None
    return ModuleData(at, text, etext, types, etypes, gofunc, typelinks, itabs, lay.since)
