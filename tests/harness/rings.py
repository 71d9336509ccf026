"""Ring buffer bytes made by hand, as a BPF producer leaves them."""

from __future__ import annotations

import random
import struct
from dataclasses import dataclass


@dataclass(frozen=True)
class Rec:
    """One record as a producer left it: its body, and whether it is busy or discarded."""

    body: bytes
    flags: int = 0


def noop_body(probe: int | None, length: int, fill: int = 0xA5) -> bytes:
    """A record body of ``length`` bytes with the u16 probe number at 24 (when it fits)."""
    body = bytearray([fill]) * length
    if probe is not None:
        assert length >= 26
        body[24:26] = probe.to_bytes(2, "little")
    return bytes(body)


def ring(recs: list[Rec], junk: random.Random | None = None) -> bytes:
    """The ring bytes of ``recs``, in order: header, body, padding to 8 bytes. With
    ``junk``, the page-offset word and the padding hold random bytes."""
    out = bytearray()
    for r in recs:
        pad = -len(r.body) % 8
        page = junk.randrange(1 << 32) if junk else 0
        out += struct.pack("<II", len(r.body) | r.flags, page) + r.body
        out += junk.randbytes(pad) if junk else bytes(pad)
    return bytes(out)
