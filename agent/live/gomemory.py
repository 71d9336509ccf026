"""A running Go program's values, read from its memory through its own type
descriptors (``binary.gometa.rtypes``, there stripped or not): struct fields by name,
strings, slices, interfaces (an itab's or an empty interface's dynamic type), and
every entry of a map, bucketed (before Go 1.24) or a Swiss table (after).

It only reads, and a read sees memory while the program runs: every length read is
bounded, a pointer that is not mapped reads as Unreadable, and a map walked while it
grows can miss or repeat an entry; callers validate what they take (the object points
back at itself, its id is the one it had).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from agent.binary.gometa.gotype import MAP, POINTER, GoType
from agent.binary.gometa.rtypes import Types
from agent.live.memory import Damaged, Memory, Reads, load_bias

MAX_STRING = 1 << 16  # bytes of a string read at most: a name, a label value
MAX_ENTRIES = 1 << 20  # entries of one map walked at most
_MIN_TOP_HASH = 5  # a bucketed map's tophash below this: an empty or evacuated slot
_EVACUATED = (2, 3, 4)  # evacuatedX, evacuatedY, evacuatedEmpty: an old bucket moved
_SAME_SIZE_GROW = 8  # hmap.flags: growing to as many buckets (only overflow is shed)
_CTRL_EMPTY_BIT = 0x80  # a Swiss group's control byte with it set: empty or deleted


@dataclass(frozen=True, slots=True)
class Interface:
    """An interface value: its dynamic type (None when its descriptor is not in the
    binary: a type made at run time) and the word of its data."""

    type: GoType | None
    data: int


class GoMemory:
    """The values of one Go process, with the types of the binary it runs, whose
    link-time addresses are ``bias`` below the process's."""

    def __init__(self, memory: Memory, types: Types, bias: int = 0) -> None:
        self.memory = memory
        self.types = types
        self.bias = bias

    def read(self, address: int, size: int) -> bytes:
        return self.memory.read(address, size)

    def word(self, address: int) -> int:
        return int(struct.unpack("<Q", self.memory.read(address, 8))[0])

    def words(self, address: int, n: int) -> tuple[int, ...]:
        return struct.unpack(f"<{n}Q", self.memory.read(address, 8 * n))

    def string(self, address: int) -> str:
        """The Go string whose header (data, len) is at ``address``."""
        return self.string_bytes(address).decode(errors="replace")

    def string_bytes(self, address: int) -> bytes:
        """The bytes of the Go string whose header (data, len) is at ``address``."""
        data, n = self.words(address, 2)
        if n == 0:
            return b""
        if n > MAX_STRING or data == 0:
            raise Damaged(f"a string at {address:#x} of {n} bytes at {data:#x}", "")
        return self.memory.read(data, n)

    def slice(self, address: int, limit: int = MAX_ENTRIES) -> tuple[int, int]:
        """(data, len) of the slice whose header is at ``address``."""
        data, n, cap = self.words(address, 3)
        if n > cap or n > limit or (n and not data):
            raise Damaged(f"a slice at {address:#x}: len {n}, cap {cap}", "")
        return data, n

    def type_at(self, runtime: int) -> GoType | None:
        """The type whose descriptor the program has at ``runtime`` (None: not one of the
        binary's own descriptors)."""
        link = runtime - self.bias
        md = self.types.md
        if not md.types <= link < md.etypes:
            return None
        return self.types.at(link)

    def iface(self, address: int) -> Interface:
        """The non-empty interface value at ``address`` (itab, data): its itab's type."""
        itab, data = self.words(address, 2)
        if itab == 0:
            return Interface(None, 0)
        return Interface(self.iface_type(itab), data)

    def iface_type(self, itab: int) -> GoType | None:
        """The concrete type of the itab at ``itab`` (a run-time address)."""
        _inter, typ = self.words(itab, 2)
        return self.type_at(typ)

    def eface(self, address: int) -> Interface:
        """The empty interface value at ``address`` (type, data)."""
        typ, data = self.words(address, 2)
        return Interface(self.type_at(typ) if typ else None, data)

    # -- maps ---------------------------------------------------------------------

    def map_entries(self, pointer: int, t: GoType) -> Iterator[tuple[int, int]]:
        """(key address, value address) of every entry of the map of type ``t`` whose
        header is at ``pointer`` (the map value itself is that pointer)."""
        if t.kind != MAP:
            raise TypeError(f"{t.short} is not a map")
        if pointer == 0:
            return iter(())
        bucket = self.types.bucket(t)
        if bucket is None:
            raise Damaged(f"the map type {t.short} has no bucket type", "")
        return self._swiss(pointer, t, bucket) if self.types.swiss else \
            self._bucketed(pointer, t, bucket)

    def map_seed(self, pointer: int) -> int:
        """The hash seed of the map whose header is at ``pointer``: random for each map
        made, so it tells a map from another made later at the same address (a bucketed
        map's hash0, the upper half of its header's second word; a Swiss table's seed,
        that whole word)."""
        return self.seed_of(self.words(pointer, 2)[1])

    def seed_of(self, second: int) -> int:
        """A map's hash seed from its header's second word (``map_seed``)."""
        return second if self.types.swiss else second >> 32

    def _indirect(self, slot: GoType | None, wanted: GoType | None) -> bool:
        """Whether a slot holds a pointer to the key or value (larger than 128 bytes)."""
        return slot is not None and wanted is not None and slot is not wanted and \
            slot.kind == POINTER and slot.elem is wanted

    def _entry(self, key: int, elem: int, kind: tuple[bool, bool]) -> tuple[int, int]:
        return (self.word(key) if kind[0] else key, self.word(elem) if kind[1] else elem)

    def _bucketed(self, hmap: int, t: GoType, b: GoType) -> Iterator[tuple[int, int]]:
        """runtime/map.go (Go 1.23 and before): ``2^B`` buckets of 8 slots chained by
        ``overflow``; while growing, the old buckets not yet evacuated hold entries too."""
        count, flags_b, buckets, oldbuckets = self.words(hmap, 4)
        big_b = (flags_b >> 8) & 0xFF
        flags = flags_b & 0xFF
        if count > MAX_ENTRIES or big_b > 30:
            raise Damaged(f"a map at {hmap:#x}: count {count}, B {big_b}", "")
        f = {x.name: x for x in b.fields}
        keys, elems, over = f.get("keys"), f.get("elems"), f.get("overflow")
        if keys is None or elems is None or over is None or keys.type.elem is None \
                or elems.type.elem is None:
            raise Damaged(f"a map bucket type {b.short} without keys, elems, overflow", "")
        kind = (self._indirect(keys.type.elem, t.key), self._indirect(elems.type.elem, t.elem))
        ks, es = keys.type.elem.size, elems.type.elem.size
        seen = 0

        def chain(first: int) -> Iterator[tuple[int, int]]:
            nonlocal seen
            at, hops = first, 0
            while at:
                raw = self.read(at, b.size)
                for i in range(8):
                    if raw[i] >= _MIN_TOP_HASH:
                        seen += 1
                        if seen > MAX_ENTRIES:
                            raise Damaged(f"a map at {hmap:#x} has more than its count", "")
                        yield self._entry(at + keys.offset + i * ks,
                                          at + elems.offset + i * es, kind)
                at = struct.unpack_from("<Q", raw, over.offset)[0]
                hops += 1
                if hops > MAX_ENTRIES:
                    raise Damaged(f"a map at {hmap:#x}: an overflow chain in a loop", "")

        for i in range(1 << big_b):
            yield from chain(buckets + i * b.size)
        if oldbuckets:
            old = 1 << big_b if flags & _SAME_SIZE_GROW else 1 << max(big_b - 1, 0)
            for i in range(old):
                first = oldbuckets + i * b.size
                if self.read(first, 1)[0] not in _EVACUATED:
                    yield from chain(first)

    def _swiss(self, m: int, t: GoType, g: GoType) -> Iterator[tuple[int, int]]:
        """internal/runtime/maps (Go 1.24 and after): a small map is one group at
        ``dirPtr``; a larger one a directory of tables, each of groups of 8 slots with a
        control byte each (high bit clear: full)."""
        used, _seed, dir_ptr, dir_len = self.words(m, 4)
        if used > MAX_ENTRIES or dir_len > MAX_ENTRIES:
            raise Damaged(f"a map at {m:#x}: used {used}, directory {dir_len}", "")
        slots = self._slots(g, t)
        if dir_len == 0:
            if dir_ptr:
                yield from self._group(dir_ptr, g, slots)
            return
        tables = dict.fromkeys(self.words(dir_ptr, dir_len))  # in order, each once
        for table in tables:
            data, mask = self.words(table + 16, 2)
            if mask + 1 > MAX_ENTRIES:
                raise Damaged(f"a map table at {table:#x} of {mask + 1} groups", "")
            for i in range(mask + 1):
                yield from self._group(data + i * g.size, g, slots)

    def _slots(self, g: GoType, t: GoType) -> tuple[int, int, int, int, tuple[bool, bool]]:
        """(first key's offset, key stride, first value's offset, value stride,
        indirect) in a group: interleaved ``slots`` of ``key`` and ``elem``, or split
        ``keys`` and ``elems`` arrays."""
        f = {x.name: x for x in g.fields}
        if "slots" in f and f["slots"].type.elem is not None:
            slot = f["slots"].type.elem
            s = {x.name: x for x in slot.fields}
            if "key" in s and "elem" in s:
                kind = (self._indirect(s["key"].type, t.key),
                        self._indirect(s["elem"].type, t.elem))
                base = f["slots"].offset
                return (base + s["key"].offset, slot.size, base + s["elem"].offset,
                        slot.size, kind)
        if "keys" in f and "elems" in f and f["keys"].type.elem and f["elems"].type.elem:
            k, e = f["keys"].type.elem, f["elems"].type.elem
            kind = (self._indirect(k, t.key), self._indirect(e, t.elem))
            return f["keys"].offset, k.size, f["elems"].offset, e.size, kind
        raise Damaged(f"a map group type {g.short} without slots", "")

    def _group(self, at: int, g: GoType, slots: tuple[int, int, int, int, tuple[bool, bool]]
               ) -> Iterator[tuple[int, int]]:
        ctrl = self.read(at, 8)
        koff, kstride, eoff, estride, kind = slots
        for i in range(8):
            if not ctrl[i] & _CTRL_EMPTY_BIT:
                yield self._entry(at + koff + i * kstride, at + eoff + i * estride, kind)

    def map_pairs(self, maps: Sequence[tuple[int, GoType]], reads: Reads
                  ) -> list[list[tuple[bytes, bytes]] | Damaged]:
        """The (key, value) bytes of every entry of each map (its header's address and
        type), for maps whose keys and values are held in their slots: read level by
        level for all of them at once (headers, then bucket arrays or tables, then
        overflow buckets), each read through ``reads``. A map that cannot be walked is
        the reason why, in its place."""
        out: list[list[tuple[bytes, bytes]] | Damaged] = [[] for _ in maps]
        layouts: list[tuple[int, int, int, int, int, int, int, int] | None] = []
        for i, (_pointer, t) in enumerate(maps):
            try:
                layouts.append(self._pair_layout(t))
            except Damaged as exc:
                out[i] = exc
                layouts.append(None)
        live = [i for i, (pointer, _t) in enumerate(maps) if pointer and layouts[i]]
        heads = reads.many([(maps[i][0], 48) for i in live])
        groups: list[tuple[int, int, int, bool]] = []  # (map, address, count, old)
        tables: list[tuple[int, int, int]] = []  # (map, directory's address, its length)
        for i, head in zip(live, heads, strict=True):
            lay = layouts[i]
            assert lay is not None
            size = lay[0]
            if head is None:
                out[i] = Damaged(f"a map at {maps[i][0]:#x} cannot be read", "")
                continue
            w = struct.unpack("<6Q", head)
            if self.types.swiss:
                used, dir_ptr, dir_len = w[0], w[2], w[3]
                if used > MAX_ENTRIES or dir_len > MAX_ENTRIES:
                    out[i] = Damaged(f"a map at {maps[i][0]:#x}: used {used}, directory "
                                     f"{dir_len}", "")
                elif dir_len == 0 and dir_ptr:
                    groups.append((i, dir_ptr, 1, False))
                elif dir_len:
                    tables.append((i, dir_ptr, dir_len))
                continue
            count, flags_b, buckets, oldbuckets = w[:4]
            big_b, flags = (flags_b >> 8) & 0xFF, flags_b & 0xFF
            if count > MAX_ENTRIES or big_b > 20 or (size << big_b) > 1 << 28:
                out[i] = Damaged(f"a map at {maps[i][0]:#x}: count {count}, B {big_b}", "")
                continue
            if buckets:
                groups.append((i, buckets, 1 << big_b, False))
            if oldbuckets:
                old = 1 << big_b if flags & _SAME_SIZE_GROW else 1 << max(big_b - 1, 0)
                groups.append((i, oldbuckets, old, True))
        if tables:
            dirs = reads.many([(at, 8 * n) for _i, at, n in tables])
            firsts: list[tuple[int, int]] = []
            for (i, _at, n), raw in zip(tables, dirs, strict=True):
                if raw is None:
                    out[i] = Damaged(f"a map at {maps[i][0]:#x}: its directory cannot be "
                                     "read", "")
                    continue
                firsts += [(i, table) for table in dict.fromkeys(struct.unpack(f"<{n}Q", raw))]
            heads = reads.many([(table + 16, 16) for _i, table in firsts])
            for (i, table), raw in zip(firsts, heads, strict=True):
                lay = layouts[i]
                assert lay is not None
                data, mask = struct.unpack("<2Q", raw) if raw else (0, 0)
                if raw is None or mask + 1 > MAX_ENTRIES or not data:
                    out[i] = Damaged(f"a map table at {table:#x} cannot be read", "")
                    continue
                groups.append((i, data, mask + 1, False))
        groups = [g for g in groups if not isinstance(out[g[0]], Damaged)]
        arrays = reads.many([(at, n * self._pair_size(layouts[i])) for i, at, n, _o in groups])
        pending: list[tuple[int, bytes, bool]] = []  # (map, bucket's bytes, old)
        for (i, _at, n, old), raw in zip(groups, arrays, strict=True):
            if raw is None:
                out[i] = Damaged(f"a map at {maps[i][0]:#x}: its buckets cannot be read", "")
                continue
            size = self._pair_size(layouts[i])
            pending += [(i, raw[k * size:(k + 1) * size], old) for k in range(n)]
        hops = 0
        while pending:
            more: list[tuple[int, int, bool]] = []
            for i, raw, old in pending:
                lay = layouts[i]
                result = out[i]
                if lay is None or isinstance(result, Damaged):
                    continue
                if old and raw[0] in _EVACUATED:
                    continue  # moved to the new buckets: its entries are there
                result += self._pairs_in(raw, lay)
                if len(result) > MAX_ENTRIES:
                    out[i] = Damaged(f"a map at {maps[i][0]:#x} has too many entries", "")
                    continue
                if not self.types.swiss:
                    (nxt,) = struct.unpack_from("<Q", raw, lay[5])
                    if nxt:
                        more.append((i, nxt, old))
            hops += 1
            if hops > 64:  # overflow chains that long: a loop
                for i, _at, _old in more:
                    out[i] = Damaged(f"a map at {maps[i][0]:#x}: an overflow chain in a loop",
                                     "")
                break
            got = reads.many([(at, self._pair_size(layouts[i])) for i, at, _o in more])
            pending = []
            for (i, _at, old), raw in zip(more, got, strict=True):
                if raw is None:
                    out[i] = Damaged(f"a map at {maps[i][0]:#x}: an overflow bucket cannot "
                                     "be read", "")
                    continue
                pending.append((i, raw, old))
        return out

    def _pair_layout(self, t: GoType) -> tuple[int, int, int, int, int, int, int, int]:
        """(bucket or group size, first key's offset, key stride, first value's offset,
        value stride, overflow pointer's offset (bucketed maps), key size, value size)
        of a map whose slots hold its keys and values."""
        if t.kind != MAP or t.key is None or t.elem is None:
            raise Damaged(f"{t.short} is not a map", "")
        b = self.types.bucket(t)
        if b is None:
            raise Damaged(f"the map type {t.short} has no bucket type", "")
        if self.types.swiss:
            koff, ks, eoff, es, kind = self._slots(b, t)
            over = 0
        else:
            f = {x.name: x for x in b.fields}
            keys, elems, ov = f.get("keys"), f.get("elems"), f.get("overflow")
            if keys is None or elems is None or ov is None or keys.type.elem is None \
                    or elems.type.elem is None:
                raise Damaged(f"a map bucket type {b.short} without keys, elems, overflow",
                              "")
            kind = (self._indirect(keys.type.elem, t.key),
                    self._indirect(elems.type.elem, t.elem))
            koff, ks = keys.offset, keys.type.elem.size
            eoff, es = elems.offset, elems.type.elem.size
            over = ov.offset
        if kind != (False, False):
            raise Damaged(f"the map type {t.short} keeps its keys or values apart", "")
        assert t.key is not None and t.elem is not None
        return b.size, koff, ks, eoff, es, over, t.key.size, t.elem.size

    @staticmethod
    def _pair_size(lay: tuple[int, int, int, int, int, int, int, int] | None) -> int:
        return lay[0] if lay is not None else 0

    def _pairs_in(self, raw: bytes, lay: tuple[int, int, int, int, int, int, int, int]
                  ) -> list[tuple[bytes, bytes]]:
        """The (key, value) bytes of the full slots of one bucket or group."""
        _size, koff, ks, eoff, es, _over, kn, en = lay
        if self.types.swiss:
            full = [i for i in range(8) if not raw[i] & _CTRL_EMPTY_BIT]
        else:
            full = [i for i in range(8) if raw[i] >= _MIN_TOP_HASH]
        return [(raw[koff + i * ks:koff + i * ks + kn], raw[eoff + i * es:eoff + i * es + en])
                for i in full]

    # -- structs ------------------------------------------------------------------

    @staticmethod
    def field(t: GoType, name: str) -> int:
        """The offset of field ``name`` of struct ``t`` (or of the struct ``t`` points
        to); Damaged when it has none (another version of the library)."""
        s = t.elem if t.kind == POINTER and t.elem is not None else t
        for f in s.fields:
            if f.name == name:
                return f.offset
        raise Damaged(f"{s.short} has no field {name}", "")

    @staticmethod
    def field_type(t: GoType, name: str) -> GoType:
        s = t.elem if t.kind == POINTER and t.elem is not None else t
        for f in s.fields:
            if f.name == name:
                return f.type
        raise Damaged(f"{s.short} has no field {name}", "")


def open_process(pid: int, path: str, types: Types, segments: tuple[tuple[int, int], ...],
                 pie: bool) -> GoMemory:
    """The values of process ``pid``, which runs the Go binary at ``path`` (whose
    ``types`` and PT_LOAD (address, file offset) ``segments`` are given): its load
    bias read from the process's mappings when the binary is position-independent."""
    bias = 0
    if pie:
        st = os.stat(path)
        bias = load_bias(pid, (st.st_dev, st.st_ino), min(a - o for a, o in segments))
    return GoMemory(Memory(pid), types, bias)
