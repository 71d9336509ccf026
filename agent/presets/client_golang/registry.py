"""client_golang's registries in a running Go program, walked from its memory: every
registered collector's dynamic type, each metric object of the ones noop mirrors
(counter, gauge, histogram, both kinds of summary, the ``*Vec``s' children in their
``metricMap``), under the name and labels the program serves it with (a
``wrappingCollector``'s prefix and labels applied), and the collectors noop does not
mirror, with their type.

Registries are found where the program keeps them in its globals: an interface
variable (``DefaultRegisterer``, ``DefaultGatherer``, or the program's own) holding a
``*Registry`` has the itab the linker made for that conversion as its first word; the
program's writable data is read once and searched for those itabs. A registry no global
holds comes from the mirror: one the program gathers (the preset's probe on
``(*Registry).Gather``), walked while its map of collectors is the one it was gathered
with.
"""

from __future__ import annotations

import contextlib
import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache

import xxhash

from agent.binary.elf import ElfFile
from agent.binary.gometa.gotype import INTERFACE, POINTER, SLICE, STRING, STRUCT, GoType
from agent.binary.gometa.rtypes import Types
from agent.live.gomemory import GoMemory
from agent.live.memory import Damaged, Reads, Unreadable
from agent.plan.libraries import CLIENT_GOLANG as PKG
from agent.presets.mirror.model import (
    Family,
    Found,
    ProcessCollector,
    Series,
    Torn,
    Unit,
)

# The metric types noop reads, by their concrete type, and the kind Prometheus gives them.
KINDS = {f"*{PKG}.counter": "counter", f"*{PKG}.gauge": "gauge",
         f"*{PKG}.histogram": "histogram", f"*{PKG}.summary": "summary",
         f"*{PKG}.noObjectivesSummary": "summary"}
VECS = {f"*{PKG}.{v}" for v in ("CounterVec", "GaugeVec", "HistogramVec", "SummaryVec",
                                "MetricVec")}
_ONE_DESC = frozenset(KINDS) | VECS  # collectors registered under their one Desc's id
WRAPPING = f"*{PKG}.wrappingCollector"
PROCESS = f"*{PKG}.processCollector"
GO = f"*{PKG}.goCollector"  # NewGoCollector's (collectors.NewGoCollector's too)
_MAX_GO_DESCS = 512  # Descs of one Go collector read at most (a few dozen by default)
VALUE_FUNC = f"*{PKG}.valueFunc"  # a GaugeFunc's, a CounterFunc's: no value kept
# the functions NewProcessCollector gives a collector as its pidFn without a PidFn option
# (getPIDFn's closure; an inline closure before 1.12)
DEFAULT_PID_FNS = (f"{PKG}.getPIDFn.func1", f"{PKG}.NewProcessCollector.func1")
REGISTRY = f"*{PKG}.Registry"
_REGISTRY_INTERFACES = {f"{PKG}.Registerer", f"{PKG}.Gatherer",
                        f"{PKG}.TransactionalGatherer"}
MAX_COLLECTORS = 1 << 16
_WORD = struct.Struct("<Q")
_TWO = struct.Struct("<QQ")  # an interface value: itab, data
_THREE = struct.Struct("<QQQ")  # a slice: data, len, cap
_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_MASK = (1 << 64) - 1


def _fnv(data: bytes) -> int:
    """FNV-1a, 64 bits: client_golang's hash of a *Vec child's label values (and of a
    Desc, before xxhash)."""
    h = 14695981039346656037
    for b in data:
        h = ((h ^ b) * 1099511628211) & _MASK
    return h


def _joined(parts: list[bytes]) -> bytes:
    return b"".join(p + b"\xff" for p in parts)  # each followed by model.SeparatorByte


def _hashed(want: int, parts: list[bytes]) -> bool:
    """Whether ``want`` is client_golang's hash of ``parts`` (xxhash since 1.12, FNV-1a
    before)."""
    data = _joined(parts)
    return want in (xxhash.xxh64_intdigest(data), _fnv(data))


@dataclass(frozen=True, slots=True)
class Desc:
    """A *Desc as NewDesc made it, its hashes checked against its strings."""

    name: str
    help: str
    const: tuple[tuple[str, str], ...]  # sorted by name
    variable: tuple[str, ...]  # the names of a child's label values, in their order
    id: int


@dataclass
class Vec:
    """A *Vec's map of children (``metricMap.metrics``, a map[uint64] of
    []metricWithLabelValues), read again at every scrape: its children by (hash of
    their label values, itab, object) as the last reads found them."""

    header: int  # the map's header (made once with the *Vec)
    type: GoType  # the map's type
    elem_size: int  # of a metricWithLabelValues
    metric_at: int  # its Metric interface's offset in it
    family: str  # the name the children are served under
    help: str
    kind: str  # counter, gauge, ... ("" until a child says)
    desc: int  # its *Desc, every child's
    prefix: str  # a wrapping's, for the children's Descs
    labels: tuple[tuple[str, str], ...]  # a wrapping's
    children: dict[tuple[int, int, int], Series | None] = field(default_factory=dict)


@dataclass
class Reg:
    """A registry as its walk found it: its map of collectors (header, seed) and its
    unchecked collectors' slice, and the unit each collector, by (id, itab, data)
    (unchecked ones: id -1), holds."""

    address: int
    header: int
    seed: int
    by_id: GoType
    unchecked: int  # the slice header's address
    units: dict[tuple[int, int, int], Unit] = field(default_factory=dict)


def _wanted(gm: GoMemory) -> tuple[set[int], set[int]]:
    """The run-time addresses of the itabs of *Registry as a Registerer or Gatherer,
    and of every itab."""
    wanted, itabs = _registry_itabs(gm.types)
    return {a + gm.bias for a in wanted}, {a + gm.bias for a in itabs}


@lru_cache(maxsize=8)
def _registry_itabs(types: Types) -> tuple[frozenset[int], frozenset[int]]:
    """``_wanted``'s itabs at their link-time addresses: read once per binary (every
    walk of every process running it asks again)."""
    registry = types.find(REGISTRY)  # by binary search; then only its itabs are named
    wanted: set[int] = set()
    itabs: set[int] = set()
    for itab, inter, typ in types.itabs():
        itabs.add(itab)
        if registry is not None and typ == registry.address and inter and \
                types.name(types.at(inter)) in _REGISTRY_INTERFACES:
            wanted.add(itab)
    return frozenset(wanted), frozenset(itabs)


def registries(gm: GoMemory, elf: ElfFile) -> list[int]:
    """The ``*Registry`` values the program's global interface variables hold
    (``DefaultRegisterer``, ``DefaultGatherer``, the program's own)."""
    wanted, itabs = _wanted(gm)
    found: list[int] = []
    for name in (".data", ".bss"):  # an interface holds a pointer: never in .noptr*
        sec = elf.section(name)
        if wanted and sec is not None and 0 < sec.size <= 1 << 28:
            _scan(gm, sec.addr + gm.bias, sec.size, wanted, itabs, found)
    return found


_CHUNK = 16 << 20  # bytes of the program's data read at a time


def _scan(gm: GoMemory, start: int, size: int, wanted: set[int], itabs: set[int],
          found: list[int]) -> None:
    """Adds to ``found`` the word after each 8-aligned ``wanted`` itab in
    [start, start + size): the data word of an interface value holding a *Registry."""
    patterns = [w.to_bytes(8, "little") for w in wanted]
    for at in range(start, start + size, _CHUNK):
        n = min(_CHUNK + 8, start + size - at)  # the word after a chunk's last one too
        raw = gm.memory.read_many([(at, n)])[0]
        if raw is None:
            continue
        for pattern in patterns:
            i = raw.find(pattern)
            while 0 <= i <= len(raw) - 16:
                if (at + i) % 8 == 0:
                    reg = int.from_bytes(raw[i + 8:i + 16], "little")
                    # the runtime's table of itabs has them one after another: not a value
                    if reg and reg not in found and reg not in itabs:
                        found.append(reg)
                i = raw.find(pattern, i + 1)


class Walker:
    """Walks registries into a ``Found``."""

    def __init__(self, gm: GoMemory, found: Found | None = None) -> None:
        """``found``: what an earlier walk found, to add to (a collector registered
        since, a *Vec's new child); else a new ``Found``."""
        self.gm = gm
        self.found = found if found is not None else Found()
        # collectors walked, under a wrapping's prefix and labels (one may be in two
        # registries): the unit each holds
        self._seen: dict[tuple[int, str, tuple[tuple[str, str], ...]], Unit] = {}
        self._descs: dict[int, Desc] = {}  # a walk's Descs, by address
        self._types: dict[str, GoType] = {}  # _type's
        self._unit = Unit()  # the unit of the collector being walked

    def registry(self, address: int, was: tuple[int, int] | None = None) -> None:
        """The registry at ``address``; with ``was`` (its map of collectors' header and
        hash seed), only while its map is still that one (else the registry is gone:
        another object, or another registry, may be at its address now)."""
        gm = self.gm
        t = self._type(REGISTRY)
        by_id = gm.field_type(t, "collectorsByID")
        header = gm.word(address + gm.field(t, "collectorsByID"))
        seed = gm.map_seed(header) if header else 0
        if was is not None and (header != was[0] or not header or seed != was[1]):
            return
        reg = Reg(address, header, seed, by_id, address + gm.field(t, "uncheckedCollectors"))
        pairs = gm.map_pairs([(header, by_id)], Reads(gm.memory))[0]
        if isinstance(pairs, Damaged):
            raise pairs
        collectors = [(_WORD.unpack(k)[0], *_TWO.unpack(v)) for k, v in pairs]
        data, n = gm.slice(reg.unchecked, MAX_COLLECTORS)
        collectors += [(-1, *gm.words(data + 16 * i, 2)) for i in range(n)]
        self.found.registries.append(address)
        self.found.regs.append(reg)
        for key in collectors:
            with contextlib.suppress(Torn):  # left out: a scrape walks it alone
                reg.units[key] = self.unit(key[1], key[2], key[0])

    def unit(self, itab: int, data: int, id_: int = -1, reg: object = None) -> Unit:
        """The unit of the collector whose interface value is (itab, data), registered
        under ``id_`` (-1: unchecked) in registry ``reg`` (a Go registry adds nothing to
        its collectors' names); Torn when a metric's or *Vec's Desc is not of that id
        (its memory was another's meanwhile)."""
        self._unit = unit = Unit()
        self._collector(itab, data, "", ())
        if id_ != -1 and (t := self.gm.iface_type(itab) if itab else None) is not None and \
                self.gm.types.name(t) in _ONE_DESC:
            descs = [s.desc for _n, s in unit.series] + [v.desc for v in unit.vecs]
            if len(descs) == 1 and self._descs[descs[0]].id != id_:
                raise Torn(f"a collector at {data:#x} not of its id", "")
        return unit

    def collector(self, iface_at: int, prefix: str, labels: tuple[tuple[str, str], ...]
                  ) -> None:
        """The Collector interface value at ``iface_at``, under a wrapping's ``prefix``
        and ``labels``."""
        try:
            itab, data = self.gm.words(iface_at, 2)
        except Unreadable as exc:
            self.found.damaged.append(exc.message)
            return
        self._collector(itab, data, prefix, labels)

    def _collector(self, itab: int, data: int, prefix: str,
                   labels: tuple[tuple[str, str], ...]) -> None:
        gm = self.gm
        try:
            t = gm.iface_type(itab) if itab else None
            if t is None or data == 0:
                self._unmirrored("a collector of a type made at run time")
                return
            name = gm.types.name(t)
            seen = self._seen.get((data, prefix, labels))
            if seen is not None:  # in two registries, or wrapped twice alike
                if seen is not self._unit:
                    self._unit.series += seen.series
                    self._unit.vecs += seen.vecs
                    self._unit.helps.update(seen.helps)
                    self._unit.processes += seen.processes
                return
            self._seen[(data, prefix, labels)] = self._unit
            try:
                if name == WRAPPING:
                    self._wrapping(data, t, prefix, labels)
                elif name in KINDS:
                    self._metric(data, t, KINDS[name], prefix, labels, None)
                elif name in VECS:
                    self._vec(data, t, prefix, labels)
                elif name == PROCESS:
                    self._process(data, t, prefix, labels)
                elif name == GO:
                    self._go(data, t, prefix, labels)
                else:
                    self._unmirrored(name)
                    if name == VALUE_FUNC:  # its name, to say why it is not mirrored
                        d = self._desc(self.gm.word(data + self.gm.field(t, "desc")))
                        self.found.funcs.add(prefix + d.name)
            except Torn:
                del self._seen[(data, prefix, labels)]  # nothing of it kept
                raise
        except Torn:
            raise
        except Unreadable as exc:
            self.found.damaged.append(exc.message)

    def _unmirrored(self, name: str) -> None:
        self.found.unmirrored[name] = self.found.unmirrored.get(name, 0) + 1

    def _process(self, at: int, t: GoType, prefix: str,
                 labels: tuple[tuple[str, str], ...]) -> None:
        """A process collector: the names its Descs hold (every *Desc field, in its
        struct's order: client_golang >= 1.20 has two more) and its pidFn."""
        gm = self.gm
        fields = t.elem.fields if t.elem is not None else []
        descs = [f for f in fields if f.type.kind == POINTER and f.type.elem is not None
                 and gm.types.name(f.type) == f"*{PKG}.Desc"]
        series = []
        for f in descs:
            d = self._desc(gm.word(at + f.offset))
            series.append((prefix + d.name, d.help))
        fn = gm.word(at + gm.field(t, "pidFn"))
        self._unit.processes.append(ProcessCollector(tuple(series), labels,
                                                     gm.word(fn) if fn else 0))

    def _go(self, at: int, t: GoType, prefix: str,
            labels: tuple[tuple[str, str], ...]) -> None:
        """A Go collector: the names and help of every Desc it holds (its base
        collector's, its MemStats metrics', the runtime/metrics ones its options
        exposed), whatever version of it the program links."""
        series: dict[str, str] = {}
        if t.elem is not None:
            for desc in self._descs_in(at, t.elem, 0):
                d = self._desc(desc)
                series.setdefault(prefix + d.name, d.help)
        self._unit.processes.append(ProcessCollector(tuple(series.items()), labels, 0, "go"))

    def _descs_in(self, at: int, t: GoType, depth: int) -> list[int]:
        """The *Desc values a struct at ``at`` holds: in its fields, its struct fields,
        the elements of its slices of structs, and the objects its slices of interfaces
        point to (a runtime/metrics gauge, counter or histogram)."""
        gm, out = self.gm, []
        desc = f"*{PKG}.Desc"
        for f in t.fields:
            ft = f.type
            if ft.kind == POINTER and gm.types.name(ft) == desc:
                if word := gm.word(at + f.offset):
                    out.append(word)
            elif depth > 2:
                continue
            elif ft.kind == STRUCT:
                out += self._descs_in(at + f.offset, ft, depth + 1)
            elif ft.kind == SLICE and ft.elem is not None and \
                    ft.elem.kind in (STRUCT, INTERFACE):
                data, n = gm.slice(at + f.offset, _MAX_GO_DESCS)
                for i in range(n):
                    item = data + i * ft.elem.size
                    if ft.elem.kind == STRUCT:
                        out += self._descs_in(item, ft.elem, depth + 1)
                        continue
                    got = gm.iface(item)
                    if got.type is not None and got.type.kind == POINTER and \
                            got.type.elem is not None and got.type.elem.kind == STRUCT:
                        out += self._descs_in(got.data, got.type.elem, depth + 1)
        return out[:_MAX_GO_DESCS]

    def _wrapping(self, at: int, t: GoType, prefix: str,
                  labels: tuple[tuple[str, str], ...]) -> None:
        gm = self.gm
        own = gm.string(at + gm.field(t, "prefix"))
        lt = gm.field_type(t, "labels")
        more = [(gm.string(k), gm.string(v)) for k, v in
                gm.map_entries(gm.word(at + gm.field(t, "labels")), lt)]
        # An outer wrapping's prefix goes before an inner one's, its labels beside them.
        self.collector(at + gm.field(t, "wrappedCollector"), prefix + own,
                       tuple(sorted({**dict(more), **dict(labels)}.items())))

    def _desc(self, desc: int) -> Desc:
        got = self._descs.get(desc)  # every child of a *Vec has its family's
        if got is None:
            got = self._descs[desc] = self._read_desc(desc)
        return got

    def _read_desc(self, desc: int) -> Desc:
        """The Desc at ``desc``, if its id and dimHash are the hashes of what it holds
        (its name and constant labels' values; its help and label names): else Torn."""
        gm = self.gm
        t = self._type(f"*{PKG}.Desc")
        raw_name = gm.string_bytes(desc + gm.field(t, "fqName"))
        name = raw_name.decode(errors="replace")
        if not _METRIC_NAME.fullmatch(name):  # client_golang registers no other
            raise Torn(f"a Desc at {desc:#x} whose name {name[:40]!r} is no metric's", "")
        raw_help = gm.string_bytes(desc + gm.field(t, "help"))
        const = self._pairs(desc + gm.field(t, "constLabelPairs"))
        variable = self._variable(desc + gm.field(t, "variableLabels"),
                                  gm.field_type(t, "variableLabels"))
        id_ = gm.word(desc + gm.field(t, "id"))
        dim = gm.word(desc + gm.field(t, "dimHash"))
        if not _hashed(id_, [raw_name, *(v.encode() for _k, v in const)]):
            raise Torn(f"a Desc at {desc:#x} whose id is not its name's", "")
        if variable is not None and not _hashed(dim, [raw_help, *sorted(
                [k.encode() for k, _v in const] + [b"$" + k.encode() for k in variable])]):
            raise Torn(f"a Desc at {desc:#x} whose dimHash is not its help's", "")
        return Desc(name, raw_help.decode(errors="replace"), tuple(sorted(const)),
                    tuple(variable or ()), id_)

    def _variable(self, at: int, t: GoType) -> list[str] | None:
        """A Desc's variable label names (``[]string``; ``[]ConstrainedLabel``, each's
        Name; ``*compiledLabels``, its names); None in a shape of no version known."""
        gm = self.gm
        if t.kind == POINTER and t.elem is not None and t.elem.kind == STRUCT:
            at = gm.word(at)
            if not at:
                return []
            names = next((f for f in t.elem.fields if f.name == "names"), None)
            if names is None:
                return None
            at, t = at + names.offset, names.type
        if t.kind != SLICE or t.elem is None:
            return None
        data, n = gm.slice(at, 256)
        if t.elem.kind == STRING:
            return [gm.string(data + 16 * i) for i in range(n)]
        name = next((f for f in t.elem.fields if f.name == "Name"), None)
        if t.elem.kind != STRUCT or name is None or name.type.kind != STRING:
            return None
        return [gm.string(data + i * t.elem.size + name.offset) for i in range(n)]

    def _type(self, name: str) -> GoType:
        """The library's type called ``name``, looked up once a walk."""
        got = self._types.get(name)
        if got is None:
            found = self.gm.types.find(name)
            if found is None:
                raise Damaged(f"the binary has no {name} type", "")
            got = self._types[name] = found
        return got

    def _pairs(self, at: int) -> list[tuple[str, str]]:
        """A ``[]*dto.LabelPair`` at ``at``: (name, value) of each."""
        gm = self.gm
        data, n = gm.slice(at, 256)
        out: list[tuple[str, str]] = []
        if not n:
            return out
        pair = self._type("*github.com/prometheus/client_model/go.LabelPair")
        name_at, value_at = gm.field(pair, "Name"), gm.field(pair, "Value")
        for p in gm.words(data, n):
            name_p = gm.word(p + name_at)
            value_p = gm.word(p + value_at)
            out.append((gm.string(name_p) if name_p else "", gm.string(value_p) if value_p else ""))
        return out

    def _family(self, name: str, help_: str, kind: str) -> Family:
        f = self.found.families.get(name)
        if f is None:
            f = self.found.families[name] = Family(name, help_, kind)
        return f

    def _metric(self, at: int, t: GoType, kind: str, prefix: str,
                labels: tuple[tuple[str, str], ...], family: Family | None,
                child: tuple[Vec, int] | None = None) -> Series:
        """The metric object at ``at``: a series of ``family`` (``child``: a *Vec's, and
        the hash of its label values), or one the unit holds in the family its Desc
        names. Its labels must be the ones it was made with (Torn): its Desc's constant
        labels, and a child's values those the *Vec's map holds it under."""
        gm = self.gm
        desc_at = gm.word(at + gm.field(t, "desc"))
        desc = self._desc(desc_at)
        own = tuple(sorted(self._pairs(at + gm.field(t, "labelPairs"))))
        if child is None:
            if own != desc.const:
                raise Torn(f"a metric at {at:#x} not labelled as its Desc says", "")
        else:
            vec, hash_ = child
            values = dict(own)
            if desc_at != vec.desc or len(values) != len(own) or \
                    len(own) != len(desc.const) + len(desc.variable) or \
                    any(values.get(k) != v for k, v in desc.const) or \
                    any(k not in values for k in desc.variable) or \
                    _fnv(_joined([values[k].encode() for k in desc.variable])) != hash_:
                raise Torn(f"a child at {at:#x} not labelled as its *Vec holds it", "")
        f = family or self._family(prefix + desc.name, desc.help, kind)
        series = Series(tuple(sorted({**dict(own), **dict(labels)}.items())), at, t, desc_at)
        f.series.append(series)
        if family is None:
            self._unit.series.append((f.name, series))
            self._unit.helps.setdefault(f.name, desc.help)
        return series

    def _vec(self, at: int, t: GoType, prefix: str,
             labels: tuple[tuple[str, str], ...]) -> None:
        gm = self.gm
        # CounterVec{*MetricVec}, MetricVec{*metricMap, ...}, metricMap{metrics, desc}
        vec = at
        vt = t
        if gm.types.name(vt) != f"*{PKG}.MetricVec":
            vec = gm.word(at + gm.field(vt, "MetricVec"))
            vt = gm.field_type(vt, "MetricVec")
        mm = gm.word(vec + gm.field(vt, "metricMap"))
        mt = gm.field_type(vt, "metricMap")
        desc_at = gm.word(mm + gm.field(mt, "desc"))
        desc = self._desc(desc_at)
        name, help_ = desc.name, desc.help
        kind = {"CounterVec": "counter", "GaugeVec": "gauge", "HistogramVec": "histogram",
                "SummaryVec": "summary"}.get(gm.types.name(t).rsplit(".", 1)[-1], "")
        metrics_t = gm.field_type(mt, "metrics")
        # []metricWithLabelValues: {values []string; metric Metric}
        elem = metrics_t.elem.elem if metrics_t.elem and metrics_t.elem.elem else None
        if elem is None:
            raise Damaged("a metricMap's children of no type", "")
        node = Vec(gm.word(mm + gm.field(mt, "metrics")), metrics_t, elem.size,
                   gm.field(elem, "metric"), prefix + name, help_, kind, desc_at, prefix,
                   labels)
        self._unit.vecs.append(node)
        if kind:
            self._family(node.family, help_, kind)
        pairs = gm.map_pairs([(node.header, node.type)], Reads(gm.memory))[0]
        if isinstance(pairs, Damaged):  # written while read: the collector walked again
            raise Torn(pairs.message, "")  # at a scrape, not kept without its children
        for key, value in pairs:
            data, n, _cap = _THREE.unpack(value)
            if n > 1 << 16 or (n and not data):
                raise Damaged(f"a metricMap's children at {data:#x}: {n} of them", "")
            raw = gm.read(data, n * node.elem_size) if n else b""
            for i in range(n):
                itab, child = _TWO.unpack_from(raw, i * node.elem_size + node.metric_at)
                try:
                    self.child(node, _WORD.unpack(key)[0], itab, child)
                except Unreadable:  # torn, or freed meanwhile and read as anything
                    continue  # not kept: a scrape reads it again

    def child(self, vec: Vec, hash_: int, itab: int, data: int) -> Series | None:
        """The *Vec's child (itab, data) under the hash of its label values: its series
        (None: of a type noop does not mirror), kept in ``vec.children``; Torn (and not
        kept) when what was read is not what the child was made with."""
        t = self.gm.iface_type(itab) if itab else None
        cname = self.gm.types.name(t) if t is not None else ""
        got: Series | None = None
        if cname not in KINDS or t is None:
            self._unmirrored(cname or "a child of a type made at run time")
        else:
            if not vec.kind:
                vec.kind = KINDS[cname]
            family = self._family(vec.family, vec.help, vec.kind)
            got = self._metric(data, t, vec.kind, vec.prefix, vec.labels, family,
                               (vec, hash_))
        vec.children[(hash_, itab, data)] = got
        return got


def walk(gm: GoMemory, elf: ElfFile, gathered: Mapping[int, tuple[int, int]] | None = None
         ) -> Found:
    """Every registry the program's globals hold, and those of ``gathered`` (a registry's
    address: its map of collectors' header and hash seed when it was gathered) that are
    still themselves, walked; a collector in two of them once."""
    w = Walker(gm)
    found = registries(gm, elf)
    wanted: list[tuple[int, tuple[int, int] | None]] = [(reg, None) for reg in found]
    wanted += [(reg, was) for reg, was in sorted((gathered or {}).items()) if reg not in found]
    w.found.considered = {reg for reg, _was in wanted}
    for reg, was in wanted:
        try:
            w.registry(reg, was)
        except Damaged:  # not a registry: a word that looked like the itab's
            continue
        except Unreadable as exc:
            w.found.damaged.append(exc.message)
    return w.found
