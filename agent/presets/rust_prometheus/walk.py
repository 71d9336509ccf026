"""The prometheus crate's registries in a running Rust program, walked from its memory:
every registered collector's concrete type (its ``Box<dyn Collector>``'s vtable,
named by the build's DWARF), each metric object of the ones noop mirrors (counters
and gauges of each number, histograms, the children of every ``*Vec``), under the
name and labels the program serves it with (the registry's prefix and common labels
applied), and the collectors noop does not mirror, with their type.

Registries are found in the statics that hold one (the crate's default registry, the
program's ``OnceLock<Registry>``, ``Lazy<Registry>``), and from the mirror: one the
program gathers (the preset's probe where it gathers one), walked while its map of
collectors is the one it was gathered with (the same hasher keys).

What is read is checked before it is kept: a Desc's ``id`` and ``dim_hash`` are the
crate's hashes of its name, help and labels; a collector's key in the registry is the
sum of its Descs' ids; a child's key in its *Vec is the hash of its label values. What
fails is Torn: read again at the next scrape.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass, field

from agent.live.memory import Damaged, Reads, Unreadable
from agent.presets.mirror.model import Family, Found, Key, Series, Torn, Unit
from agent.presets.rust_prometheus.layout import STANDARD, Kind, Layout, Table
from agent.presets.rust_prometheus.memory import CrateMemory, tables, u64

MAX_COLLECTORS = 1 << 16
TRIES = 4  # reads of a table being written before the walk leaves it for later
_MASK = (1 << 64) - 1
_SEPARATOR = b"\xff"
_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
UNDESCRIBED = "a collector of a type the binary's DWARF does not describe"


def fnv(data: bytes, h: int = 14695981039346656037) -> int:
    """FNV-1a, 64 bits: the crate's hash of a Desc and of a child's label values."""
    for b in data:
        h = ((h ^ b) * 1099511628211) & _MASK
    return h


@dataclass(frozen=True, slots=True)
class Desc:
    """A Desc as ``Desc::new`` made it, its hashes checked against its strings."""

    name: str
    help: str
    const: tuple[tuple[str, str], ...]  # sorted by name
    variable: tuple[str, ...]  # a child's label names, in their order
    id: int


@dataclass
class Reg:
    """A registry as its walk found it: its ArcInner, its map of collectors' hasher keys
    (who the map is), and the unit each collector, by (id, vtable, object), holds."""

    address: int
    keys: tuple[int, int]
    prefix: str
    labels: tuple[tuple[str, str], ...]
    units: dict[Key, Unit] = field(default_factory=dict)


@dataclass
class Vec:
    """A *Vec's children (its ``MetricVecCore``'s map), read again at every scrape: each
    by (hash of its label values, 0, its object's ArcInner)."""

    core: int  # the MetricVecCore's address (its ArcInner's data)
    keys: tuple[int, int]  # its map's hasher keys
    table: Table
    child: Kind
    family: str
    help: str
    kind: str
    desc: Desc
    labels: tuple[tuple[str, str], ...]  # the registry's common labels
    children: dict[Key, Series | None] = field(default_factory=dict)


class Walker:
    """Walks registries into a ``Found``."""

    def __init__(self, mem: CrateMemory, layout: Layout, found: Found | None = None) -> None:
        self.mem = mem
        self.layout = layout
        self.found = found if found is not None else Found()
        self._kinds = dict(layout.kinds)
        self._vtables = dict(layout.vtables)
        self._drops = dict(layout.drops)
        self._standard = frozenset(STANDARD)
        self._unit = Unit()
        self._reg: Reg | None = None  # the registry being walked (its prefix, labels)

    # --- registries ---------------------------------------------------------------------

    def registry(self, address: int, was: tuple[int, int] | None = None) -> None:
        """The registry whose ``ArcInner`` is at ``address``; with ``was`` (its map of
        collectors' hasher keys), only while its map is still that one."""
        lay, mem = self.layout, self.mem
        core = address + lay.core
        keys, buckets = self._table(core, lay.collectors)
        if was is not None and keys != tuple(was):
            return
        if u64(mem.memory.read(address, 8), 0) == 0:
            raise Damaged(f"a registry at {address:#x} no Arc holds", "")
        reg = Reg(address, keys, self._prefix(core), self._labels(core))
        self.found.registries.append(address)
        self.found.regs.append(reg)
        t = lay.collectors
        for raw in buckets:
            id_, data, vtable = u64(raw, t.key), u64(raw, t.value), u64(raw, t.value + 8)
            with contextlib.suppress(Torn):  # left out: a scrape walks it alone
                reg.units[(id_, vtable, data)] = self.unit(vtable, data, id_, reg)

    def _table(self, at: int, t: Table) -> tuple[tuple[int, int], list[bytes]]:
        """The table at ``at``, read again while it is being written (its full buckets
        not as many as its items); Damaged after ``TRIES`` reads."""
        last = Damaged(f"a table at {at:#x} not read", "")
        for _try in range(TRIES):
            got = tables([(at, t)], Reads(self.mem.memory))[0]
            if not isinstance(got, Damaged):
                return got
            last = got
        raise last

    def _prefix(self, core: int) -> str:
        lay = self.layout
        where, size, none = lay.prefix
        discr = int.from_bytes(self.mem.memory.read(core + where, size), "little")
        if discr == none:
            return ""
        return self._str(core + lay.prefix_some)

    def _labels(self, core: int) -> tuple[tuple[str, str], ...]:
        lay = self.layout
        where, size, none = lay.labels
        at = core + lay.labels_some
        discr = int.from_bytes(self.mem.memory.read(core + where, size), "little")
        if discr == none:
            return ()
        got = tables([(at, lay.label_table)], Reads(self.mem.memory))[0]
        if isinstance(got, Damaged):
            raise got
        t = lay.label_table
        out = []
        for raw in got[1]:
            out.append((self._str_in(raw, t.key), self._str_in(raw, t.value)))
        return tuple(sorted(out))

    def _str_in(self, raw: bytes, at: int) -> str:
        return self._bytes_in(raw, at)[1].decode(errors="replace")

    def _bytes_in(self, raw: bytes, at: int) -> tuple[int, bytes]:
        """The String whose (ptr, cap, len) is at ``at`` in ``raw``: where its bytes
        are, and they."""
        t = self.layout.text
        ptr, n = u64(raw, at + t.ptr), u64(raw, at + t.len)
        if n > 1 << 16 or (n and not ptr):
            raise Damaged(f"a string of {n} bytes at {ptr:#x}", "")
        return ptr, self.mem.memory.read(ptr, n) if n else b""

    def _str(self, address: int) -> str:
        return self.mem.text(address, self.layout.text).decode(errors="replace")

    # --- collectors ---------------------------------------------------------------------

    def unit(self, itab: int, data: int, id_: int = -1, reg: object = None) -> Unit:
        """The unit of the collector whose ``Box<dyn Collector>`` is (data, vtable
        ``itab``), registered under ``id_``; Torn when its Desc is not of that id (its
        memory was another's meanwhile)."""
        reg = reg if isinstance(reg, Reg) else Reg(0, (0, 0), "", ())
        self._unit = unit = Unit()
        name = self._vtables.get(itab - self.mem.bias)
        try:
            if name is None:
                name = self._by_drop(itab)
            kind = self._kinds.get(name) if name is not None else None
            if kind is None and name is not None and name.startswith("prometheus::") and \
                    name in self._standard:
                self._unmirrored(f"{name} (the binary's DWARF has no layout of it)")
            elif kind is None:
                self._unmirrored(name or UNDESCRIBED)
            elif kind.children is not None:
                self._vec(data, kind, reg, id_)
            else:
                self._metric(self.mem.word(data + kind.arc), kind, reg, id_)
        except Torn:
            raise
        except Damaged as exc:  # written while read: not kept, walked again at a scrape
            raise Torn(exc.message, "") from None
        except Unreadable as exc:
            self.found.damaged.append(exc.message)
        return unit

    def _by_drop(self, vtable: int) -> str:
        """The collector type of a vtable the DWARF does not describe, by its first
        slot (its drop_in_place<T>, as relocated in memory): T where one type's drop is
        there; else why it is not named (several types' folded into one, or none)."""
        drop = self.mem.word(vtable) - self.mem.bias
        types = self._drops.get(drop, ())
        if len(types) == 1:
            return types[0]
        if types:
            return f"one of {len(types)} types whose drop is one function ({types[0]}, ...)"
        return UNDESCRIBED

    def _unmirrored(self, name: str) -> None:
        self.found.unmirrored[name] = self.found.unmirrored.get(name, 0) + 1

    def _desc(self, at: int) -> Desc:
        """The Desc at ``at``, if its id and dim_hash are the hashes of what it holds
        (its name and constant labels' values; its help and label names): else Torn."""
        lay, d = self.layout, self.layout.descs
        raw_name = self.mem.text(at + d.fq_name, lay.text)
        name = raw_name.decode(errors="replace")
        if not _METRIC_NAME.fullmatch(name):
            raise Torn(f"a Desc at {at:#x} whose name {name[:40]!r} is no metric's", "")
        raw_help = self.mem.text(at + d.help, lay.text)
        const = self._pairs(at + d.const_pairs)
        variable = [self._str_in(raw, 0) for raw in _chunks(
            self.mem.vec(at + d.variable, lay.vec, lay.string_size, 256), lay.string_size)]
        head = self.mem.memory.read(at + d.id, 8)
        dim = self.mem.memory.read(at + d.dim_hash, 8)
        id_, dim_hash = u64(head, 0), u64(dim, 0)
        values = raw_name + _SEPARATOR + b"".join(v.encode() + _SEPARATOR
                                                  for _k, v in sorted(const))
        if fnv(values) != id_:
            raise Torn(f"a Desc at {at:#x} whose id is not its name's", "")
        names = sorted([k.encode() for k, _v in const] + [b"$" + k.encode() for k in variable])
        if fnv(raw_help + _SEPARATOR + b"".join(n + _SEPARATOR for n in names)) != dim_hash:
            raise Torn(f"a Desc at {at:#x} whose dim_hash is not its help's", "")
        return Desc(name, raw_help.decode(errors="replace"), tuple(sorted(const)),
                    tuple(variable), id_)

    def _pairs(self, at: int) -> list[tuple[str, str]]:
        """A ``Vec<LabelPair>`` at ``at``: (name, value) of each."""
        return [(name, value) for name, value, _v in self._pairs_where(at)]

    def _pairs_where(self, at: int) -> list[tuple[str, str, tuple[int, bytes]]]:
        """``_pairs``, with where each value's bytes are, and they."""
        d = self.layout.descs
        raw = self.mem.vec(at, self.layout.vec, d.pair_size, 256)
        out = []
        for p in _chunks(raw, d.pair_size):
            where = self._bytes_in(p, d.pair_value)
            out.append((self._str_in(p, d.pair_name), where[1].decode(errors="replace"),
                        where))
        return out

    def _family(self, name: str, help_: str, kind: str) -> Family:
        f = self.found.families.get(name)
        if f is None:
            f = self.found.families[name] = Family(name, help_, kind)
        return f

    def _name(self, reg: Reg, name: str) -> str:
        return f"{reg.prefix}_{name}" if reg.prefix else name

    def _metric(self, obj: int, kind: Kind, reg: Reg, id_: int) -> None:
        """A counter, gauge or histogram whose ArcInner is at ``obj``."""
        at = obj + kind.data
        desc = self._desc(at + kind.desc)
        if id_ != -1 and desc.id != id_:
            raise Torn(f"a collector at {obj:#x} not of its id", "")
        own = tuple(sorted(self._pairs(at + kind.pairs)))
        if own != desc.const:
            raise Torn(f"a metric at {obj:#x} not labelled as its Desc says", "")
        name = self._name(reg, desc.name)
        f = self._family(name, desc.help, kind.kind)
        series = Series(_labelled(own, reg.labels), obj, kind, desc.id)
        f.series.append(series)
        self._unit.series.append((f.name, series))
        self._unit.helps.setdefault(f.name, desc.help)

    def _vec(self, data: int, kind: Kind, reg: Reg, id_: int) -> None:
        assert kind.children is not None
        obj = self.mem.word(data + kind.arc)
        core = obj + kind.data
        desc = self._desc(core + kind.desc)
        if id_ != -1 and desc.id != id_:
            raise Torn(f"a collector at {data:#x} not of its id", "")
        child = self._kinds.get(kind.child)
        if child is None:
            self._unmirrored(f"prometheus::vec::MetricVec of {kind.child}")
            return
        name = self._name(reg, desc.name)
        keys, buckets = self._table(core, kind.children)
        node = Vec(core, keys, kind.children, child, name, desc.help, kind.kind, desc,
                   reg.labels)
        self._unit.vecs.append(node)
        self._family(name, desc.help, kind.kind)
        t = kind.children
        for raw in buckets:
            # not kept: a scrape reads it again (a child freed meanwhile reads as anything)
            with contextlib.suppress(Unreadable):
                self.child(node, u64(raw, t.key), 0, u64(raw, t.value))

    def child(self, vec: Vec, hash_: int, itab: int, data: int) -> Series | None:
        """The *Vec's child whose ArcInner is ``data``, under the hash of its label
        values: its series, kept in ``vec.children``; Torn (and not kept) when what was
        read is not what the child was made with."""
        kind = vec.child
        at = data + kind.data
        pairs = self._pairs_where(at + kind.pairs)
        own = [(name, value) for name, value, _w in pairs]
        values = dict(own)
        d = vec.desc
        head = self.mem.memory.read(at + kind.desc + self.layout.descs.id, 8)
        if u64(head, 0) != d.id or len(values) != len(own) or \
                len(own) != len(d.const) + len(d.variable) or \
                any(values.get(k) != v for k, v in d.const) or \
                any(k not in values for k in d.variable) or \
                fnv(b"".join(values[k].encode() for k in d.variable)) != hash_:
            raise Torn(f"a child at {data:#x} not labelled as its *Vec holds it", "")
        family = self._family(vec.family, vec.help, vec.kind)
        # its Desc id is every child's: its own label values (strings it owns, their
        # bytes clobbered by the allocator once freed) say it is itself when read
        marks = tuple((ptr, raw) for name, _v, (ptr, raw) in pairs
                      if raw and name in d.variable)
        series = Series(_labelled(tuple(sorted(own)), vec.labels), data, kind, d.id, marks)
        family.series.append(series)
        vec.children[(hash_, itab, data)] = series
        return series


def _chunks(raw: bytes, size: int) -> list[bytes]:
    return [raw[i:i + size] for i in range(0, len(raw), size)] if size else []


def _labelled(own: tuple[tuple[str, str], ...], common: tuple[tuple[str, str], ...]
              ) -> tuple[tuple[str, str], ...]:
    """A series' labels: its own and its registry's common ones, sorted by name."""
    if not common:
        return own
    return tuple(sorted({**dict(common), **dict(own)}.items()))


def walk(mem: CrateMemory, layout: Layout, holders: list[int],
         gathered: dict[int, tuple[int, int]] | None = None) -> Found:
    """Every registry ``holders`` (the statics' registries) name, and those of
    ``gathered`` (a registry's address: its map's hasher keys when it was gathered) that
    are still themselves, walked; a collector in two of them once."""
    w = Walker(mem, layout)
    wanted: list[tuple[int, tuple[int, int] | None]] = [(reg, None) for reg in holders]
    wanted += [(reg, was) for reg, was in sorted((gathered or {}).items())
               if reg not in holders]
    w.found.considered = {reg for reg, _was in wanted}
    for reg, was in wanted:
        try:
            w.registry(reg, was)
        except Damaged as exc:  # not a registry (yet), or one written at every read
            w.found.damaged.append(exc.message)
            w.found.considered.discard(reg)  # looked at again by the next look for them
        except Unreadable as exc:
            w.found.damaged.append(exc.message)
    return w.found
