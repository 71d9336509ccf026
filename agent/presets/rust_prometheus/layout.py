"""Where the prometheus crate keeps a program's metrics, read from the binary's DWARF
once per build (kept in noop's cache by build-id): the offsets the mirror
(``rust_prometheus.mirror``) reads a registry, its collectors and their values at.

Nothing here is a table of numbers copied from one build: every offset is a member's
``DW_AT_data_member_location`` along a path of the crate's own types, reached from
the types the binary describes — each collector type through its vtable
(``<T as prometheus::metrics::Collector>::{vtable}``, a static whose type's
``DW_AT_containing_type`` is T), the registry from ``prometheus::registry::Registry``.
Layouts differ with the crate's features, the compiler and the standard library
(``Vec``'s fields moved in 1.67 and 1.80, hashbrown's in 0.13): each is read from the
build itself.

A build without DWARF types (``debug = 1``, ``0``, stripped) has none of this:
``NoLayout`` says so in one line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from elftools.dwarf.die import DIE

from agent import cache
from agent.binary.dwarf.dies import attr, die_name
from agent.binary.dwarf.reader import Dwarf
from agent.binary.dwarf.statics import Static, statics
from agent.binary.dwarf.types import TypeNamer, member_offset
from agent.errors import NoopError
from agent.plan import plain

FORMAT = 5  # of the cached layout: a change of what is kept changes it
COLLECTOR = "prometheus::metrics::Collector"
REGISTRY = "prometheus::registry::Registry"
_VTABLE = re.compile(r"<(.+) as " + re.escape(COLLECTOR) + r">::\{vtable\}")
_ATOMICS = {"prometheus::atomic64::AtomicU64": "u64", "prometheus::atomic64::AtomicI64": "i64",
            "prometheus::atomic64::AtomicF64": "f64"}
_SCALARS = {"prometheus::counter::GenericCounter": "counter",
            "prometheus::gauge::GenericGauge": "gauge"}
_BUILDERS = {"prometheus::counter::CounterVecBuilder": "counter",
             "prometheus::gauge::GaugeVecBuilder": "gauge"}
HISTOGRAM = "prometheus::histogram::Histogram"
_HISTOGRAM_VEC = "prometheus::histogram::HistogramVecBuilder"
# The crate's collector types, named as rustc names them (each's Kind found by name
# where no vtable in DWARF names it)
_U64, _I64, _F64 = (f"prometheus::atomic64::Atomic{n}" for n in ("U64", "I64", "F64"))
STANDARD = (f"prometheus::counter::GenericCounter<{_U64}>",
             f"prometheus::counter::GenericCounter<{_F64}>",
             f"prometheus::gauge::GenericGauge<{_I64}>",
             f"prometheus::gauge::GenericGauge<{_F64}>", HISTOGRAM,
             f"prometheus::vec::MetricVec<prometheus::counter::CounterVecBuilder<{_U64}>>",
             f"prometheus::vec::MetricVec<prometheus::counter::CounterVecBuilder<{_F64}>>",
             f"prometheus::vec::MetricVec<prometheus::gauge::GaugeVecBuilder<{_I64}>>",
             f"prometheus::vec::MetricVec<prometheus::gauge::GaugeVecBuilder<{_F64}>>",
             f"prometheus::vec::MetricVec<{_HISTOGRAM_VEC}>")
_DROP = re.compile(r"core::ptr::drop_in_place<(.+)>")
_IMPL = re.compile(r"<(.+) as " + re.escape(COLLECTOR) + r">::")
_MAX_DEPTH = 12  # members followed from a static to the Registry it holds


class NoLayout(NoopError):
    """The binary does not describe the crate's types: nothing can be mirrored."""


@dataclass(frozen=True, slots=True)
class Text:
    """A ``String``'s (or any ``Vec``'s) pointer and length, by offset in it."""

    ptr: int
    len: int


@dataclass(frozen=True, slots=True)
class Table:
    """A ``HashMap`` (hashbrown's ``RawTable``) at some offset: where its control bytes'
    pointer, bucket mask and item count are, its hasher's two keys (random per map: who
    it is), and its buckets' size and the offsets of key and value in one."""

    ctrl: int
    mask: int
    items: int
    k0: int
    k1: int
    size: int
    key: int
    value: int


@dataclass(frozen=True, slots=True)
class Descs:
    """``prometheus::desc::Desc``'s strings, label pairs, ids; a ``LabelPair``'s."""

    fq_name: int
    help: int
    const_pairs: int
    variable: int
    id: int
    dim_hash: int
    pair_size: int
    pair_name: int
    pair_value: int


@dataclass(frozen=True, slots=True)
class Kind:
    """A metric type the mirror reads, by the collector's type name: how its ``Arc`` is
    held (``arc``: offset of the pointer in the collector), where its object is in the
    ``ArcInner`` (``data``) and what the object holds. ``kind``: counter, gauge,
    histogram; ``number``: u64, i64, f64 (a histogram: f64). A ``*Vec``'s children are
    of kind ``child`` (its name), in ``children``."""

    kind: str
    number: str
    arc: int
    data: int
    desc: int
    pairs: int  # a metric's label pairs (a vec: -1)
    val: int = -1  # counters and gauges
    # histograms: the two shards, each's buckets, sum and count; the bounds; the lock
    # the crate's own collect holds; shard_and_count (the hot shard in bit 63)
    shards: int = -1
    shard_size: int = 0
    buckets: int = -1
    sum: int = -1
    count: int = -1
    bounds: int = -1
    lock: int = -1  # the futex word of the std Mutex (0: unlocked)
    hot: int = -1
    size: int = 0  # of the ArcInner: what one read of an object takes
    # vecs
    child: str = ""
    children: Table | None = None


@dataclass(frozen=True, slots=True)
class Holder:
    """A static that holds a Registry: its name, link-time address and where the
    registry's ``Arc`` pointer is in it (0 there: not made yet)."""

    name: str
    address: int
    arc: int


@dataclass(frozen=True, slots=True)
class Layout:
    """All the mirror reads of a build."""

    text: Text  # String
    string_size: int
    vec: Text  # Vec<T> (checked the same for every T read)
    descs: Descs
    core: int  # RegistryCore in ArcInner<RwLock<RegistryCore>>
    registry_arc: int  # the Arc pointer in a Registry
    prefix: tuple[int, int, int]  # Option<String>: discriminant at, its size, None's value
    prefix_some: int  # the String in the Some
    labels: tuple[int, int, int]  # Option<HashMap<String, String>>, the same
    labels_some: int
    label_table: Table  # its buckets: (String, String)
    collectors: Table  # collectors_by_id: (u64, Box<dyn Collector>)
    kinds: tuple[tuple[str, Kind], ...]
    vtables: tuple[tuple[int, str], ...]  # link-time vtable address -> the collector type
    holders: tuple[Holder, ...]
    # A vtable the DWARF does not describe (the crate that made it built with less debug
    # info) is named by its first slot, a drop_in_place<T>: link-time address -> every
    # T whose drop is there (several: identical code folded into one)
    drops: tuple[tuple[int, tuple[str, ...]], ...] = ()


def layout(dwarf: Dwarf, namer: TypeNamer) -> Layout:
    """The build's layout, from noop's cache or its DWARF; NoLayout without types."""
    key = f"v{FORMAT}"
    got: Layout | None = cache.get(dwarf.cache_id, "rust-mirror", key,
                                   load=lambda d: plain.load(Layout, d))
    if got is not None:
        return got
    made = _Reader(dwarf, namer).layout()
    cache.put(dwarf.cache_id, "rust-mirror", key, plain.dump(made))
    return made


def _moved(t: Table, by: int) -> Table:
    """Table ``t`` as a member ``by`` bytes into its owner."""
    return Table(t.ctrl + by, t.mask + by, t.items + by, t.k0 + by, t.k1 + by, t.size,
                 t.key, t.value)


class _Reader:
    def __init__(self, dwarf: Dwarf, namer: TypeNamer) -> None:
        self.dwarf, self.namer = dwarf, namer
        self._vec: Text | None = None

    # --- navigation ------------------------------------------------------------------

    def _members(self, die: DIE) -> dict[str, tuple[int, DIE | None]]:
        die = self._strip(die)
        return {die_name(c) or "": (member_offset(c), self.dwarf.ref(c))
                for c in die.iter_children() if c.tag == "DW_TAG_member"}

    def _strip(self, die: DIE | None) -> DIE:
        got = self.namer.strip(die)
        if got is None:
            raise NoLayout("a member of the prometheus crate's types has no type", "")
        return got

    def at(self, die: DIE, path: str) -> tuple[int, DIE]:
        """The offset and type of member ``path`` (dotted) of the type ``die``."""
        offset = 0
        for name in path.split("."):
            members = self._members(die)
            if name not in members:
                raise NoLayout(f"{self.namer.name(die)} has no member {name!r} (a version "
                               "of the prometheus crate or of Rust noop does not read)",
                               "report it, with the binary")
            off, t = members[name]
            offset += off
            die = self._strip(t)
        return offset, die

    def template(self, die: DIE, name: str = "T") -> DIE:
        for c in self._strip(die).iter_children():
            if c.tag == "DW_TAG_template_type_param" and die_name(c) == name:
                return self._strip(self.dwarf.ref(c))
        raise NoLayout(f"{self.namer.name(die)} has no type parameter {name}", "")

    def pointee(self, die: DIE) -> DIE:
        die = self._strip(die)
        if die.tag != "DW_TAG_pointer_type":
            raise NoLayout(f"{self.namer.name(die)} is not a pointer", "")
        return self._strip(self.dwarf.ref(die))

    def arc(self, die: DIE, path: str) -> tuple[int, int, DIE, int]:
        """An ``Arc<T>`` member at ``path``: the offset of its pointer, T's offset in the
        ArcInner, T, and the ArcInner's size."""
        off, arc = self.at(die, path)
        ptr, p = self.at(arc, "ptr.pointer")
        inner = self.pointee(p)
        data, t = self.at(inner, "data")
        return off + ptr, data, t, self.namer.size(inner) or 0

    def text(self, die: DIE) -> Text:
        """A ``Vec``'s (a ``String``'s: its ``vec``'s) pointer and length."""
        die = self._strip(die)
        if "vec" in self._members(die):
            off, v = self.at(die, "vec")
            inner = self._vec_of(v)
            return Text(off + inner.ptr, off + inner.len)
        return self._vec_of(die)

    def _vec_of(self, die: DIE) -> Text:
        length, _t = self.at(die, "len")
        ptr = self._pointer_in(die, "buf", 0)
        if ptr is None:
            raise NoLayout(f"{self.namer.name(die)} has no pointer noop finds", "")
        got = Text(ptr, length)
        if self._vec is None:
            self._vec = got
        elif got != self._vec:  # every Vec alike: one Text for all
            raise NoLayout(f"{self.namer.name(die)} is laid out unlike another Vec", "")
        return got

    def _pointer_in(self, die: DIE, name: str, depth: int) -> int | None:
        """The offset of the pointer under member ``name`` (then ``inner``, ``ptr``,
        ``pointer``): a Vec's buffer, whatever RawVec's version nests it in."""
        members = self._members(die)
        if name not in members or depth > 6:
            return None
        off, t = members[name]
        t = self._strip(t)
        if t.tag == "DW_TAG_pointer_type":
            return off
        for inner in ("inner", "ptr", "pointer"):
            got = self._pointer_in(t, inner, depth + 1)
            if got is not None:
                return off + got
        return None

    def option(self, die: DIE) -> tuple[tuple[int, int, int], int, DIE]:
        """An ``Option<T>``: its discriminant's offset, size and None's value, and the
        offset and type of the Some's T."""
        die = self._strip(die)
        part = next((c for c in die.iter_children() if c.tag == "DW_TAG_variant_part"), None)
        if part is None:
            raise NoLayout(f"{self.namer.name(die)} has no variants in DWARF", "")
        discr = self.dwarf.ref(part, "DW_AT_discr")
        if discr is None:
            raise NoLayout(f"{self.namer.name(die)} has no discriminant", "")
        where = member_offset(discr)
        size = self.namer.size(self.dwarf.ref(discr)) or 8
        none: int | None = None
        some: tuple[int, DIE] | None = None
        for v in part.iter_children():
            if v.tag != "DW_TAG_variant":
                continue
            for m in v.iter_children():
                if m.tag != "DW_TAG_member":
                    continue
                if die_name(m) == "None":
                    none = attr(v, "DW_AT_discr_value")
                elif die_name(m) == "Some":
                    base = member_offset(m)
                    off, t = self.at(self._strip(self.dwarf.ref(m)), "__0")
                    some = (base + off, t)
        if none is None or some is None:
            raise NoLayout(f"{self.namer.name(die)}: no None with a value, or no Some", "")
        return (where, size, none & ((1 << (8 * size)) - 1)), some[0], some[1]

    def table(self, die: DIE) -> tuple[Table, DIE]:
        """A std ``HashMap`` (or hashbrown's): its ``Table``, and its bucket's type."""
        base, hb = self.at(die, "base")
        raw, rt = self.at(hb, "table")
        inner, it = self.at(rt, "table")
        k0, _t = self.at(hb, "hash_builder.k0")
        k1, _t = self.at(hb, "hash_builder.k1")
        bucket = self.template(rt)
        size = self.namer.size(bucket) or 0
        key, _k = self.at(bucket, "__0")
        value, _vt = self.at(bucket, "__1")
        at = base + raw + inner
        return Table(at + self.at(it, "ctrl")[0], at + self.at(it, "bucket_mask")[0],
                     at + self.at(it, "items")[0], base + k0, base + k1, size, key, value), \
            bucket

    # --- the crate's types ------------------------------------------------------------

    def layout(self) -> Layout:
        info, abbrev = self.dwarf.raw
        if not info:
            raise NoLayout("it has no DWARF types (a build with debug = 0 or 1, or "
                           "stripped)", "")
        strs = self.dwarf.info.debug_str_sec
        from agent.binary.dwarf.sections import section_bytes
        try:
            found = statics(info, abbrev, bytes(section_bytes(strs)) if strs else b"")
        except (ValueError, IndexError, KeyError) as exc:
            raise NoLayout(f"its DWARF cannot be read for statics: {exc}", "") from None
        vtables = [(s, m.group(1)) for s in found if (m := _VTABLE.fullmatch(s.name))]
        from agent.binary.dwarf.lookup import find_type
        from agent.errors import NotFound
        try:
            registry = self._strip(find_type(self.dwarf, REGISTRY))
        except NotFound:
            raise NoLayout("the binary's DWARF has no prometheus::registry::Registry type",
                           "") from None
        arc_at, core_in, rw, _size = self.arc(registry, "r")
        data, core = self.at(rw, "data.value")
        p_at, p_t = self.at(core, "prefix")
        (where, size, none), some, ptype = self.option(p_t)
        prefix, prefix_some = (p_at + where, size, none), p_at + some
        l_at, l_t = self.at(core, "labels")
        (where, size, none), some, ltype = self.option(l_t)
        labels, labels_some = (l_at + where, size, none), l_at + some
        label_table, pair = self.table(ltype)
        c_at, c_t = self.at(core, "collectors_by_id")
        collectors = _moved(self.table(c_t)[0], c_at)
        string = self.text(ptype)
        pair_text = self.text(self.at(pair, "__0")[1])
        if pair_text != string:
            raise NoLayout("a label's String is laid out unlike the prefix's", "")
        kinds: dict[str, Kind] = {}
        descs: Descs | None = None
        for _s, name in vtables:
            got = self._kind(name, _s)
            if got is None:
                continue
            kind, d = got
            kinds[name] = kind
            descs = descs or d
            if kind.child and kind.child not in kinds:
                child = self._child(self._collector_type(_s))
                if child is not None:
                    kinds[kind.child] = child
        for name in STANDARD:  # the crate's kinds the vtables did not name, by name
            named = self._kind_named(name) if name not in kinds else None
            if named is not None:
                kind, d, t = named
                kinds[name] = kind
                descs = descs or d
                if kind.child and kind.child not in kinds:
                    child = self._child(t)
                    if child is not None:
                        kinds[kind.child] = child
        if descs is None:
            descs = self._descs_by_name()
        return Layout(string, self.namer.size(ptype) or 0, self._vec or string, descs,
                      core_in + data, arc_at, prefix, prefix_some, labels, labels_some,
                      label_table, collectors, tuple(sorted(kinds.items())),
                      tuple(sorted((s.address, n) for s, n in vtables)),
                      tuple(self._holders(found, registry)), self._drops())

    def _drops(self) -> tuple[tuple[int, tuple[str, ...]], ...]:
        """Where each ``core::ptr::drop_in_place<T>`` of a collector type is (the
        crate's types, and the types with a ``Collector`` impl of their own)."""
        from agent.binary.demangle import demangle, strip_suffix

        named: dict[int, list[str]] = {}
        impls: set[str] = set()
        for sym in self.dwarf.elf.function_symbols():
            name = strip_suffix(demangle(sym.name) or sym.name)
            named.setdefault(sym.address, []).append(name)
            m = _IMPL.match(name)
            if m:
                impls.add(m.group(1))
        out: dict[int, set[str]] = {}
        for address, names in named.items():
            for name in names:
                m = _DROP.fullmatch(name)
                if m and (m.group(1).startswith("prometheus::") or m.group(1) in impls):
                    out.setdefault(address, set()).add(m.group(1))
        return tuple(sorted((a, tuple(sorted(ts))) for a, ts in out.items()))

    def _kind_named(self, name: str) -> tuple[Kind, Descs, DIE] | None:
        """The Kind of the crate's collector type ``name`` from its DWARF type, found by
        name, and that type (None: the binary does not describe it)."""
        from agent.binary.dwarf.lookup import find_type
        from agent.errors import NotFound
        try:
            t = self._strip(find_type(self.dwarf, name))
        except (NotFound, NoLayout):
            return None
        got = self._kind(name, None, t)
        return (*got, t) if got is not None else None

    def _collector_type(self, s: Static) -> DIE | None:
        if s.type < 0:
            return None
        vt = self.dwarf.die_at(s.type)
        t = self.dwarf.ref(vt, "DW_AT_containing_type")
        return self.namer.strip(t) if t is not None else None

    def _kind(self, name: str, s: Static | None, t: DIE | None = None
              ) -> tuple[Kind, Descs] | None:
        """The Kind of collector type ``name`` (None: one noop does not read): of its
        type ``t``, or of the type vtable ``s`` is of."""
        base, _lt, arg = name.partition("<")
        arg = arg.removesuffix(">")
        if t is None and s is not None and ((base in _SCALARS and arg in _ATOMICS)
                                            or name == HISTOGRAM
                                            or base == "prometheus::vec::MetricVec"):
            t = self._collector_type(s)
        if t is None:
            return None
        if base in _SCALARS and arg in _ATOMICS:
            return self._scalar(t, _SCALARS[base], _ATOMICS[arg])
        if name == HISTOGRAM:
            return self._histogram(t)
        builder, _lt, p = arg.partition("<")
        p = p.removesuffix(">")
        if (builder in _BUILDERS and p in _ATOMICS) or arg == _HISTOGRAM_VEC:
            arc, data, core, size = self.arc(t, "v")
            desc, dt = self.at(core, "desc")
            lock, rw = self.at(core, "children")
            held, hm = self.at(rw, "data.value")
            table, bucket = self.table(hm)
            child = self.namer.name(self.at(bucket, "__1")[1])
            kind = "histogram" if arg == _HISTOGRAM_VEC else _BUILDERS[builder]
            number = "f64" if arg == _HISTOGRAM_VEC else _ATOMICS[p]
            shifted = _moved(table, lock + held)
            return Kind(kind, number, arc, data, desc, -1, size=size, child=child,
                        children=shifted), self._descs(dt)
        return None

    def _child(self, t: DIE | None) -> Kind | None:
        """The Kind of a vec's children, from the vec's own type ``t``."""
        if t is None:
            return None
        _arc, _data, core, _size = self.arc(t, "v")
        _lock, rw = self.at(core, "children")
        _held, hm = self.at(rw, "data.value")
        _table, bucket = self.table(hm)
        child = self._strip(self.at(bucket, "__1")[1])
        name = self.namer.name(child)
        base, _lt, arg = name.partition("<")
        arg = arg.removesuffix(">")
        if name == HISTOGRAM:
            return self._histogram(child)[0]
        if base in _SCALARS and arg in _ATOMICS:
            return self._scalar(child, _SCALARS[base], _ATOMICS[arg])[0]
        return None

    def _scalar(self, t: DIE, kind: str, number: str) -> tuple[Kind, Descs]:
        arc, data, value, size = self.arc(t, "v")
        desc, dt = self.at(value, "desc")
        pairs, _p = self.at(value, "label_pairs")
        val, _v = self.at(value, "val.inner")
        return Kind(kind, number, arc, data, desc, pairs, val, size=size), self._descs(dt)

    def _histogram(self, t: DIE) -> tuple[Kind, Descs]:
        arc, data, core, size = self.arc(t, "core")
        desc, dt = self.at(core, "desc")
        pairs, _p = self.at(core, "label_pairs")
        shards, st = self.at(core, "shards")
        shard = self._strip(self.dwarf.ref(st)) if st.tag == "DW_TAG_array_type" else None
        if shard is None:
            raise NoLayout("HistogramCore.shards is not an array", "")
        buckets, bt = self.at(shard, "buckets")
        self.text(bt)
        sum_, _s = self.at(shard, "sum.inner")
        count, _c = self.at(shard, "count.inner")
        bounds, ut = self.at(core, "upper_bounds")
        self.text(ut)
        lock, _l = self.at(core, "collect_lock.inner.futex")
        hot, _h = self.at(core, "shard_and_count.inner")
        return Kind("histogram", "f64", arc, data, desc, pairs, shards=shards,
                    shard_size=self.namer.size(shard) or 0, buckets=buckets, sum=sum_,
                    count=count, bounds=bounds, lock=lock, hot=hot, size=size), \
            self._descs(dt)

    def _descs(self, d: DIE) -> Descs:
        pairs, pt = self.at(d, "const_label_pairs")
        pair = self.template(pt)
        variable, vt = self.at(d, "variable_labels")
        self.text(vt)
        name, nt = self.at(pair, "name")
        value, _v = self.at(pair, "value")
        self.text(nt)
        return Descs(self.at(d, "fq_name")[0], self.at(d, "help")[0], pairs, variable,
                     self.at(d, "id")[0], self.at(d, "dim_hash")[0],
                     self.namer.size(pair) or 0, name, value)

    def _descs_by_name(self) -> Descs:
        from agent.binary.dwarf.lookup import find_type
        from agent.errors import NotFound
        try:
            return self._descs(self._strip(find_type(self.dwarf, "prometheus::desc::Desc")))
        except NotFound:
            raise NoLayout("the binary's DWARF has no prometheus::desc::Desc type",
                           "") from None

    def _holders(self, found: list[Static], registry: DIE) -> list[Holder]:
        """The statics that hold a Registry (the crate's default one, the program's
        ``OnceLock<Registry>``, ``Lazy<Registry>``...), and where its Arc pointer is."""
        out = []
        arc = self.at(registry, "r.ptr.pointer")[0]
        for s in found:
            if s.type < 0 or _VTABLE.fullmatch(s.name):
                continue
            t = self.namer.strip(self.dwarf.die_at(s.type))
            if t is None or REGISTRY not in self.namer.name(t):
                continue
            at = self._registry_in(t, 0)
            if at is not None:
                out.append(Holder(s.name, s.address, at + arc))
        return out

    def _registry_in(self, die: DIE, depth: int) -> int | None:
        """Where a Registry is in a value of type ``die``: through struct and union
        members and enum variants (an Option's Some, a MaybeUninit's value)."""
        if self.namer.name(die) == REGISTRY:
            return 0
        if depth > _MAX_DEPTH or REGISTRY not in self.namer.name(die):
            return None
        for c in die.iter_children():
            if c.tag == "DW_TAG_member":
                t = self.namer.strip(self.dwarf.ref(c))
                got = self._registry_in(t, depth + 1) if t is not None else None
                if got is not None:
                    return member_offset(c) + got
            elif c.tag == "DW_TAG_variant_part":
                for v in c.iter_children():
                    for m in v.iter_children() if v.tag == "DW_TAG_variant" else ():
                        t = self.namer.strip(self.dwarf.ref(m)) \
                            if m.tag == "DW_TAG_member" else None
                        got = self._registry_in(t, depth + 1) \
                            if t is not None else None
                        if got is not None:
                            return member_offset(m) + got
        return None
