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

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache

from agent.binary.elf import ElfFile
from agent.binary.gometa.gotype import GoType
from agent.binary.gometa.rtypes import Types
from agent.live.gomemory import Damaged, GoMemory
from agent.live.memory import Unreadable
from agent.plan.libraries import CLIENT_GOLANG as PKG

# The metric types noop reads, by their concrete type, and the kind Prometheus gives them.
KINDS = {f"*{PKG}.counter": "counter", f"*{PKG}.gauge": "gauge",
         f"*{PKG}.histogram": "histogram", f"*{PKG}.summary": "summary",
         f"*{PKG}.noObjectivesSummary": "summary"}
VECS = {f"*{PKG}.{v}" for v in ("CounterVec", "GaugeVec", "HistogramVec", "SummaryVec",
                                "MetricVec")}
WRAPPING = f"*{PKG}.wrappingCollector"
REGISTRY = f"*{PKG}.Registry"
_REGISTRY_INTERFACES = {f"{PKG}.Registerer", f"{PKG}.Gatherer",
                        f"{PKG}.TransactionalGatherer"}
MAX_COLLECTORS = 1 << 16
_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


@dataclass(frozen=True, slots=True)
class Series:
    """One metric object: its labels as served (sorted by name), its address and type."""

    labels: tuple[tuple[str, str], ...]
    address: int
    type: GoType
    desc: int  # its *Desc, which must still be its own when it is read


@dataclass
class Family:
    name: str
    help: str
    kind: str
    series: list[Series] = field(default_factory=list)


@dataclass
class Found:
    """What the registries hold: families by name, and the collectors not mirrored
    (their type, by how many)."""

    registries: list[int] = field(default_factory=list)
    families: dict[str, Family] = field(default_factory=dict)
    unmirrored: dict[str, int] = field(default_factory=dict)
    damaged: list[str] = field(default_factory=list)  # what could not be read, and why
    # (address, value) of the words that change when a collector or a child is added or
    # removed: each registry's and each *Vec's map count, each registry's unchecked
    # collectors' length. Read at a scrape: one that moved means walk again.
    counts: list[tuple[int, int]] = field(default_factory=list)


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

    def __init__(self, gm: GoMemory) -> None:
        self.gm = gm
        self.found = Found()
        # collectors walked, under a wrapping's prefix and labels (one may be in two
        # registries)
        self._seen: set[tuple[int, str, tuple[tuple[str, str], ...]]] = set()
        self._descs: dict[int, tuple[str, str]] = {}  # a walk's Descs, by address
        self._types: dict[str, GoType] = {}  # _type's

    def registry(self, address: int, was: tuple[int, int] | None = None) -> None:
        """The registry at ``address``; with ``was`` (its map of collectors' header and
        hash seed), only while its map is still that one (else the registry is gone:
        another object, or another registry, may be at its address now)."""
        gm = self.gm
        t = self._type(REGISTRY)
        by_id = gm.field_type(t, "collectorsByID")
        header = gm.word(address + gm.field(t, "collectorsByID"))
        if was is not None and (header != was[0] or not header or
                                gm.map_seed(header) != was[1]):
            return
        collectors = [value for _k, value in gm.map_entries(header, by_id)]
        unchecked = address + gm.field(t, "uncheckedCollectors")
        data, n = gm.slice(unchecked, MAX_COLLECTORS)
        collectors += [data + 16 * i for i in range(n)]
        self.found.registries.append(address)
        self._count(header)
        self.found.counts.append((unchecked + 8, n))
        for at in collectors:
            self.collector(at, "", ())

    def collector(self, iface_at: int, prefix: str, labels: tuple[tuple[str, str], ...]
                  ) -> None:
        """The Collector interface value at ``iface_at``, under a wrapping's ``prefix``
        and ``labels``."""
        gm = self.gm
        try:
            c = gm.iface(iface_at)
            if c.type is None or c.data == 0:
                self._unmirrored("a collector of a type made at run time")
                return
            name = gm.types.name(c.type)
            if (c.data, prefix, labels) in self._seen:
                return
            self._seen.add((c.data, prefix, labels))
            if name == WRAPPING:
                self._wrapping(c.data, c.type, prefix, labels)
            elif name in KINDS:
                self._metric(c.data, c.type, KINDS[name], prefix, labels, None)
            elif name in VECS:
                self._vec(c.data, c.type, prefix, labels)
            else:
                self._unmirrored(name)
        except Unreadable as exc:
            self.found.damaged.append(exc.message)

    def _count(self, header: int) -> None:
        """Keep a map's count (its header's first word, before Go 1.24 and after)."""
        if header:
            self.found.counts.append((header, self.gm.word(header)))

    def _unmirrored(self, name: str) -> None:
        self.found.unmirrored[name] = self.found.unmirrored.get(name, 0) + 1

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

    def _desc(self, desc: int) -> tuple[str, str]:
        got = self._descs.get(desc)  # every child of a *Vec has its family's
        if got is None:
            got = self._descs[desc] = self._read_desc(desc)
        return got

    def _read_desc(self, desc: int) -> tuple[str, str]:
        gm = self.gm
        t = self._type(f"*{PKG}.Desc")
        name = gm.string(desc + gm.field(t, "fqName"))
        if not _METRIC_NAME.fullmatch(name):  # client_golang registers no other
            raise Damaged(f"a Desc at {desc:#x} whose name {name[:40]!r} is no metric's", "")
        return name, gm.string(desc + gm.field(t, "help"))

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
                labels: tuple[tuple[str, str], ...], family: Family | None) -> None:
        gm = self.gm
        desc = gm.word(at + gm.field(t, "desc"))
        name, help_ = self._desc(desc)
        own = self._pairs(at + gm.field(t, "labelPairs"))
        f = family or self._family(prefix + name, help_, kind)
        f.series.append(Series(tuple(sorted({**dict(own), **dict(labels)}.items())), at, t,
                               desc))

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
        name, help_ = self._desc(gm.word(mm + gm.field(mt, "desc")))
        kind = {"CounterVec": "counter", "GaugeVec": "gauge", "HistogramVec": "histogram",
                "SummaryVec": "summary"}.get(gm.types.name(t).rsplit(".", 1)[-1], "")
        family = self._family(prefix + name, help_, kind) if kind else None
        metrics_t = gm.field_type(mt, "metrics")
        header = gm.word(mm + gm.field(mt, "metrics"))
        self._count(header)
        # []metricWithLabelValues: {values []string; metric Metric}
        elem = metrics_t.elem.elem if metrics_t.elem and metrics_t.elem.elem else None
        if elem is None:
            raise Damaged("a metricMap's children of no type", "")
        metric_at = gm.field(elem, "metric")
        for _k, children in gm.map_entries(header, metrics_t):
            data, n = gm.slice(children, 1 << 16)
            for i in range(n):
                child = gm.iface(data + i * elem.size + metric_at)
                cname = gm.types.name(child.type) if child.type is not None else ""
                if cname not in KINDS or child.type is None:
                    self._unmirrored(cname or "a child of a type made at run time")
                    continue
                if family is None:
                    family = self._family(prefix + name, help_, KINDS[cname])
                self._metric(child.data, child.type, KINDS[cname], prefix, labels, family)


def walk(gm: GoMemory, elf: ElfFile, gathered: Mapping[int, tuple[int, int]] | None = None
         ) -> Found:
    """Every registry the program's globals hold, and those of ``gathered`` (a registry's
    address: its map of collectors' header and hash seed when it was gathered) that are
    still themselves, walked; a collector in two of them once."""
    w = Walker(gm)
    found = registries(gm, elf)
    wanted: list[tuple[int, tuple[int, int] | None]] = [(reg, None) for reg in found]
    wanted += [(reg, was) for reg, was in sorted((gathered or {}).items()) if reg not in found]
    for reg, was in wanted:
        try:
            w.registry(reg, was)
        except Damaged:  # not a registry: a word that looked like the itab's
            continue
        except Unreadable as exc:
            w.found.damaged.append(exc.message)
    return w.found
