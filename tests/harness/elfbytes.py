"""An intact ELF file's section table, read from its bytes (for tests that damage
sections in place)."""

from __future__ import annotations

import struct

SHF_COMPRESSED = 0x800


def sections(data: bytes) -> dict[str, tuple[int, int, int]]:
    """name -> (file offset, size, flags) of each section."""
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shnum, shstrndx = struct.unpack_from("<HH", data, 0x3C)
    heads = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + 64 * i) for i in range(shnum)]
    names = heads[shstrndx]
    out = {}
    for h in heads:
        raw = data[names[4] + h[0]:]
        out[raw[:raw.index(b"\0")].decode()] = (h[4], h[5], h[2])
    return out
