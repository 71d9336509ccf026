"""A running Rust program's values as the prometheus crate keeps them, read from its
memory by the build's ``layout``: words, ``String``s, ``Vec``s and std ``HashMap``s
(hashbrown's tables: the control bytes, one per bucket, a byte below 0x80 a full
one; the buckets laid out below the control bytes, bucket i ending at ``ctrl - i *
size``).

It only reads, and a read sees memory while the program runs: every length read is
bounded, a table is taken only when its full buckets are as many as its item count,
and callers validate what they take (an object's id is the hash of its name).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

from agent.live.memory import Damaged, Memory, Reads, load_bias
from agent.presets.rust_prometheus.layout import Table, Text

MAX_STRING = 1 << 16  # bytes of a string read at most: a name, a help, a label value
MAX_BUCKETS = 1 << 20  # buckets of one table read at most
MAX_ITEMS = 1 << 16  # elements of a Vec read at most (label pairs, bounds, buckets)
_GROUP = 16  # control bytes past the last bucket's: a copy of the first group's
_WORD = struct.Struct("<Q")
_FULL = 0x80  # a control byte with this bit clear: its bucket is full


@dataclass
class CrateMemory:
    """Process ``memory``, whose binary is loaded ``bias`` past its link-time
    addresses."""

    memory: Memory
    bias: int = 0

    def word(self, address: int) -> int:
        return int(_WORD.unpack(self.memory.read(address, 8))[0])

    def text(self, address: int, t: Text) -> bytes:
        """The bytes of the String (or Vec<u8>) at ``address``."""
        return self.vec(address, t, 1, MAX_STRING)

    def vec(self, address: int, t: Text, size: int, limit: int = MAX_ITEMS) -> bytes:
        """The elements (``size`` bytes each) of the Vec at ``address``, as bytes."""
        raw = self.memory.read(address, max(t.ptr, t.len) + 8)
        ptr, n = _WORD.unpack_from(raw, t.ptr)[0], _WORD.unpack_from(raw, t.len)[0]
        if n == 0:
            return b""
        if n > limit or ptr == 0:
            raise Damaged(f"a Vec at {address:#x} of {n} elements at {ptr:#x}", "")
        return self.memory.read(ptr, n * size)


def open_process(pid: int, path: str, segments: tuple[tuple[int, int], ...],
                 pie: bool) -> CrateMemory:
    """The memory of process ``pid``, which runs the binary at ``path`` (whose PT_LOAD
    (address, file offset) are ``segments``), with its load bias when it is
    position-independent."""
    import os

    bias = 0
    if pie:
        st = os.stat(path)
        bias = load_bias(pid, (st.st_dev, st.st_ino), min(a - o for a, o in segments))
    return CrateMemory(Memory(pid), bias)


def _span(t: Table) -> tuple[int, int]:
    """The bytes of a table's header fields (ctrl, mask, items, the hasher's keys)
    relative to where the table's owner is: (first, size)."""
    fields = (t.ctrl, t.mask, t.items, t.k0, t.k1)
    return min(fields), max(fields) + 8 - min(fields)


def tables(tabs: Sequence[tuple[int, Table]], reads: Reads
           ) -> list[tuple[tuple[int, int], list[bytes]] | Damaged]:
    """Each table at (its owner's address, its ``Table``): its hasher's keys (which
    say which map it is) and its full buckets' bytes, in two batched reads (the headers,
    then each table's buckets and control bytes in one range); Damaged for one whose
    header or buckets are not those of a table, or cannot be read."""
    spans = [_span(t) for _a, t in tabs]
    heads = reads.many([(a + first, n) for (a, _t), (first, n) in zip(tabs, spans, strict=True)])
    out: list[tuple[tuple[int, int], list[bytes]] | Damaged] = []
    wanted: list[tuple[int, int]] = []
    plan: list[tuple[int, int, int, int, Table]] = []  # (index, ctrl, buckets, items, t)
    for i, ((address, t), (first, _n), head) in enumerate(zip(tabs, spans, heads, strict=True)):
        if head is None:
            out.append(Damaged(f"a table at {address:#x} cannot be read", ""))
            continue

        def at(off: int, raw: bytes = head, first: int = first) -> int:
            return int(_WORD.unpack_from(raw, off - first)[0])

        ctrl, mask, items = at(t.ctrl), at(t.mask), at(t.items)
        keys = (at(t.k0), at(t.k1))
        buckets = mask + 1
        if buckets & mask or buckets > MAX_BUCKETS or items > buckets or not ctrl or \
                ctrl % 8:
            out.append(Damaged(f"a table at {address:#x}: {items} items in {buckets} "
                               f"buckets at {ctrl:#x}", ""))
            continue
        out.append((keys, []))
        if not items:
            continue  # the empty singleton, or a table emptied: nothing to read
        plan.append((i, ctrl, buckets, items, t))
        wanted.append((ctrl - buckets * t.size, buckets * t.size + buckets + _GROUP))
    for (i, ctrl, buckets, items, t), raw in zip(plan, reads.many(wanted), strict=True):
        if raw is None:
            out[i] = Damaged(f"the buckets of a table at {ctrl:#x} cannot be read", "")
            continue
        control = raw[buckets * t.size:buckets * t.size + buckets]
        full = [j for j, c in enumerate(control) if c < _FULL]
        if len(full) != items:  # written meanwhile
            out[i] = Damaged(f"a table at {ctrl:#x}: {len(full)} full buckets, {items} "
                             "items", "")
            continue
        got = out[i]
        assert not isinstance(got, Damaged)
        got[1].extend(raw[(buckets - j - 1) * t.size:(buckets - j) * t.size] for j in full)
    return out


def u64(raw: bytes, at: int) -> int:
    return int(_WORD.unpack_from(raw, at)[0])
