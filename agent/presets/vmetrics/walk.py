"""VictoriaMetrics/metrics' Sets as the mirror reads them: each registered ``Set``'s
slice of named metrics (``a``: every name the program writes, the summaries' quantile
lines too), each named metric's object by the type its interface holds, and each histogram's
decimal bucket arrays (its members: made as observations reach a decade).

Every sample line the program writes is a series of an untyped family of its own name
(the library writes no TYPE lines): a counter's and a float counter's; a histogram's
``_bucket{vmrange=...}`` (each bucket of each decade made, written while not zero),
``_sum`` and ``_count``; a summary's ``_sum`` and ``_count`` and each of its quantiles
(a named metric of its own). A callback gauge holds no value: listed unmirrored, with
its function's name.
"""

from __future__ import annotations

import bisect
import struct
from dataclasses import dataclass, field
from typing import Any

from agent.live.gomemory import GoMemory
from agent.live.memory import Damaged, Reads, Unreadable
from agent.output.page import labels_of
from agent.presets.mirror import model
from agent.presets.mirror.model import Found, Key, Last, Now, Series, Unit
from agent.presets.vmetrics.layout import BUCKETS_PER_DECADE, DECADES, Layout, vmrange

_NM = struct.Struct("<QQQQB")  # a namedMetric: name (data, len), metric (itab, data), isAux
_METRIC = struct.Struct("<QQ")  # its metric, 16 bytes in (layout checks it is there)
MAX_NAME = 1 << 16
MAX_NAMED = 1 << 22  # named metrics of one Set
SPINS = 16  # reads of the Sets' mutexes, at most, before a pass starts
WALK_TRIES = 32  # passes a walk makes, at most, while a Set's mutex is held
LOWER, UPPER = -1, DECADES * BUCKETS_PER_DECADE  # the buckets below and above every decade


def split(name: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    """A VictoriaMetrics name (``foo{a="b"}``): the family and its labels, sorted."""
    brace = name.find("{")
    if brace < 0:
        return name, ()
    return name[:brace], tuple(sorted(labels_of(name[brace:]).items()))


@dataclass(eq=False)
class Reg:
    """A Set: the unit of each of its named metrics, by (namedMetric, itab, object)."""

    address: int
    units: dict[Key, Unit] = field(default_factory=dict)


@dataclass(eq=False)
class Buckets:
    """A histogram's buckets, as a *Vec of children to the mirror: the family
    ``NAME_bucket`` and the histogram's labels; its children by (bucket index, 0,
    the bucket's counter), one for each bucket of each decade made and the two outside
    them."""

    family: str
    labels: tuple[tuple[str, str], ...]
    histogram: int
    name: int  # the namedMetric: what names the series
    check: tuple[bytes, bytes] = (b"", b"")  # what it held, and its name (walk.Check)
    help: str = ""
    kind: str = ""
    children: dict[Key, Series | None] = field(default_factory=dict)


class Walker:
    """The units of named metrics and the children of histograms' buckets."""

    def __init__(self, gm: GoMemory, lay: Layout, found: Found | None = None,
                 known: dict[int, tuple[int, int]] | None = None) -> None:
        """``known``: the named metrics the members' reads know (``members``): one found
        not to be what they knew (the garbage collector gave a freed one's address to
        another) is forgotten, read again at the next read of the members."""
        self.gm, self.lay = gm, lay
        self.found = found if found is not None else Found()
        self.known = known

    def unit(self, itab: int, data: int, id_: int = -1, reg: Any = None) -> Unit:
        """The unit of the named metric at ``id_`` whose interface holds (``itab``,
        ``data``)."""
        gm, lay = self.gm, self.lay
        unit = Unit()
        try:  # a name in memory the program gave back (unmapped) is no member's any more
            raw = gm.read(id_, _NM.size)
            name_at, n, itab_now, data_now, _aux = _NM.unpack(raw)
            if (itab_now, data_now) != (itab, data) or n > MAX_NAME or (n and not name_at):
                raise model.Torn(f"a named metric at {id_:#x} is not itself", "")
            name_bytes = gm.read(name_at, n) if n else b""
            name = name_bytes.decode(errors="replace")
        except (model.Torn, Unreadable) as exc:
            if self.known is not None:
                self.known.pop(id_, None)
            raise model.Torn(f"a named metric at {id_:#x} is not itself", "") from exc
        family, labels = split(name)
        check = (raw[:32], name_bytes)  # what each read checks it still is (values.Reader)
        t = gm.iface_type(itab) if itab else None
        kind = lay.kind(gm.types.name(t)) if t is not None else None
        if kind == "counter":
            unit.series.append((family, Series(labels, data + lay.counter_n, ("u64", check),
                                               id_)))
        elif kind == "float":
            unit.series.append((family, Series(labels, data + lay.float_n, ("f64", check),
                                               id_)))
        elif kind == "histogram":
            unit.vecs.append(Buckets(family + "_bucket", labels, data, id_, check))
            unit.series += [
                (family + "_sum", Series(labels, data + lay.h_sum, ("hsum", data, check),
                                         id_)),
                (family + "_count", Series(labels, data, ("hcount", data, check), id_))]
        elif kind == "summary":
            unit.series += [
                (family + "_sum", Series(labels, data + lay.s_sum, ("ssum", data, check),
                                         id_)),
                (family + "_count", Series(labels, data + lay.s_count, ("scount", data, check),
                                           id_))]
        elif kind == "quantile":
            sm, idx = gm.words(data, 2)
            qs, nq = gm.slice(sm + lay.s_quantiles)
            if not 0 <= idx < nq:
                raise model.Torn(f"a quantile value at {data:#x}: index {idx} of {nq}", "")
            phi = struct.unpack("<d", gm.read(qs + 8 * idx, 8))[0]
            unit.series.append((family, Series(labels, data, ("q", sm, phi, check), id_)))
        elif kind == "gauge":
            self._unmirrored(f"*{lay.pkg}.Gauge ({self._func(gm.word(data))})")
            self.found.funcs.add(family)
        else:
            self._unmirrored(gm.types.name(t) if t is not None else "a type made at run time")
        return unit

    def _unmirrored(self, what: str) -> None:
        self.found.unmirrored[what] = self.found.unmirrored.get(what, 0) + 1

    def _func(self, funcval: int) -> str:
        """The name of the function a func value calls (its code pointer's)."""
        if not funcval:
            return "nil"
        pc = self.gm.word(funcval) - self.gm.bias
        entries, names = self.lay.functions
        i = bisect.bisect_right(entries, pc) - 1
        return names[i] if i >= 0 else f"{pc:#x}"

    def child(self, vec: Any, hash_: int, itab: int, data: int) -> Series | None:
        """The series of bucket ``hash_`` (its index) of histogram ``vec``, whose counter
        is at ``data``."""
        assert isinstance(vec, Buckets)
        labels = tuple(sorted((*vec.labels, ("vmrange", vmrange(hash_)))))
        return Series(labels, data, ("bucket", vec.histogram, vec.check), vec.name)


def walk(gm: GoMemory, lay: Layout, sets: list[int], written: list[int] | None = None
         ) -> Found:
    """Every Set of ``sets`` (their addresses, registered) and of ``written`` (Sets the
    program was seen writing: one whose memory is no Set any more, a named metric of a
    type not the library's in it, is left out), walked."""
    w = Walker(gm, lay)
    written = written or []
    everyone = [*sets, *written]
    w.found.considered = set(everyone)
    regs = [Reg(s) for s in everyone]
    now = _once(gm, lay, regs, [], Reads(gm.memory))
    for _try in range(WALK_TRIES):  # a Set whose mutex was held: read again
        if all(keys is not None for keys in now.regs):
            break
        again = _once(gm, lay, regs, [], Reads(gm.memory))
        now.regs = [keys if keys is not None else more
                    for keys, more in zip(now.regs, again.regs, strict=True)]
    for s, keys in zip(everyone, now.regs, strict=True):
        if keys is not None and s in written and not all(_ours(gm, lay, itab)
                                                         for _nm, itab, _d in keys):
            keys = None
        if keys is None:
            w.found.damaged.append(f"the Set at {s:#x} cannot be read")
            w.found.considered.discard(s)
            continue
        reg = Reg(s)
        w.found.registries.append(s)
        w.found.regs.append(reg)
        for key in sorted(keys):
            try:
                reg.units[key] = w.unit(key[1], key[2], key[0], reg)
            except Damaged:
                continue  # torn: walked alone at a scrape
    return w.found


Named = dict[int, tuple[int, int]]  # a namedMetric's address -> its metric (itab, data)


def _ours(gm: GoMemory, lay: Layout, itab: int) -> bool:
    """Whether ``itab`` is one of the library's metric types' (read from memory that
    may be another's: unreadable is not)."""
    try:
        t = gm.iface_type(itab) if itab else None
    except Unreadable:
        return False
    return t is not None and lay.kind(gm.types.name(t)) is not None


def members(gm: GoMemory, lay: Layout, found: Found, vecs: list[Any], last: Last | None,
            once: bool, named: Named | None = None) -> tuple[Now, Last | None]:
    """The members now (``model.members``); ``named``: the named metrics read before, by
    address (a named metric never changes while it is a member: only those not known
    are read, so that a pass is two small reads a Set, and two passes agree even while
    the program makes a series a millisecond), kept to those still members."""
    known: Named = named if named is not None else {}
    if known:  # each known one still itself (an address the collector gave another: not)
        addrs = list(known)
        for nm, raw in zip(addrs, gm.memory.read_many([(nm + 16, 16) for nm in addrs]),
                           strict=True):
            if raw is None or _METRIC.unpack(raw) != known[nm]:
                del known[nm]
    got = model.members(gm.memory, found, vecs,
                        lambda reads: _once(gm, lay, found.regs, vecs, reads, known), last,
                        once)
    if not got[0].settled:
        _one_read(gm, lay, found.regs, vecs, known, got[0])
    live = {key[0] for keys in got[0].regs if keys is not None for key in keys}
    for nm in [nm for nm in known if nm not in live]:
        del known[nm]
    return got


def _one_read(gm: GoMemory, lay: Layout, regs: list[Reg], vecs: list[Any], known: Named,
              now: Now) -> None:
    """A Set (or histogram) no two reads agreed on, as one read found it, between two
    reads of its mutex that found it free: the program only appends to its slice, sorts
    it or removes from it under that mutex, every word of it a named metric's pointer
    all along, so one read holds members only (one moved at that moment may be missed;
    one removed since is left out by the scrape's read after its values). Counted
    unsettled still: a member the program never stops changing is not lost from every
    page."""
    one = _once(gm, lay, regs, vecs, Reads(gm.memory), known)
    after = gm.memory.read_many([(r.address + lay.set_mu, 4) for r in regs])
    for i, (mine, raw) in enumerate(zip(one.regs, after, strict=True)):
        if now.regs[i] is None and mine is not None and raw is not None and \
                not struct.unpack("<I", raw)[0] & 1:
            now.regs[i] = mine
    for v in vecs:
        if now.children.get(id(v)) is None:
            now.children[id(v)] = one.children.get(id(v))


def _once(gm: GoMemory, lay: Layout, regs: list[Reg], vecs: list[Any], reads: Reads,
          known: Named | None = None) -> Now:
    """The named metrics of each Set (its slice ``a``, read while its mutex is free: the
    program appends to it and sorts it in place under it) and the buckets of each
    histogram of ``vecs`` (its decades made now)."""
    known = known if known is not None else {}
    now = Now()
    sets = [(r.address, lay.set_a + 24) for r in regs]
    for _ in range(SPINS):  # the program holds a Set's mutex a moment at each lookup
        if not any(raw is not None and struct.unpack_from("<I", raw, lay.set_mu)[0] & 1
                   for raw in gm.memory.read_many(sets)):
            break
    heads = reads.many(sets + [(v.histogram + lay.h_decades, 8 * DECADES) for v in vecs])
    arrays: list[tuple[int, int]] = []
    plan: list[int] = []
    for i, raw in enumerate(heads[:len(regs)]):
        if raw is None:
            now.regs.append(None)
            continue
        (state,) = struct.unpack_from("<I", raw, lay.set_mu)
        data, n, cap = struct.unpack_from("<QQQ", raw, lay.set_a)
        if state & 1 or n > cap or n > MAX_NAMED or (n and not data):
            now.regs.append(None)  # being written (or not a Set): the next try
            continue
        now.regs.append(set())
        if n:
            arrays.append((data, 8 * n))
            plan.append(i)
    named: list[tuple[int, int]] = []
    for i, raw in zip(plan, reads.many(arrays), strict=True):
        members = now.regs[i]
        if raw is None or members is None:
            now.regs[i] = None
            continue
        for nm in struct.unpack(f"<{len(raw) // 8}Q", raw):
            metric = known.get(nm)
            if metric is not None:
                members.add((nm, *metric))
            elif nm:
                named.append((i, nm))
    for (i, nm), raw in zip(named, reads.many([(nm, _NM.size) for _i, nm in named]),
                            strict=True):
        members = now.regs[i]
        if members is None:
            continue
        if raw is None:
            now.regs[i] = None
            continue
        _name, _n, itab, data, _aux = _NM.unpack(raw)
        members.add((nm, itab, data))
        known[nm] = (itab, data)
    for v, raw in zip(vecs, heads[len(regs):], strict=True):
        if raw is None:
            now.children[id(v)] = None
            continue
        keys: list[Key] = [(LOWER, 0, v.histogram + lay.h_lower),
                           (UPPER, 0, v.histogram + lay.h_upper)]
        for d, array in enumerate(struct.unpack(f"<{DECADES}Q", raw)):
            if array:
                keys += [(d * BUCKETS_PER_DECADE + i, 0, array + 8 * i)
                         for i in range(BUCKETS_PER_DECADE)]
        now.children[id(v)] = keys
    return now
