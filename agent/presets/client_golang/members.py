"""Which of the metric objects a walk found are members now, read at every scrape: each
registry's map of collectors and unchecked collectors, and each *Vec's map of children,
read through their bucket arrays (or tables) in a few batched reads for all of them,
then read again whole. When the second read finds every byte as the first did, what
they hold is one set that existed at an instant between the two (a change undone
between them aside): the page is that set. A child made since the walk is read then
(its labels); a collector the walk did not find asks for a walk; one deleted,
unregistered or reset is left out, though its memory is intact until the program's
garbage collector frees it.

Go's maps keep no count of their changes (a delete then a make keeps the count, the
bucket pointer and the seed; a delete from a hash collision's slice does not change the
count), so nothing short of their contents tells a change: the contents are what is
read.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from agent.live.gomemory import Damaged, GoMemory, Reads
from agent.presets.client_golang.registry import MAX_COLLECTORS, Found, Reg, Vec

TRIES = 4  # reads of the members before each map is taken as two in a row agreed
_TWO = struct.Struct("<QQ")
_THREE = struct.Struct("<QQQ")
_MAX_CHILDREN = 1 << 16  # of one hash (a collision's slice)

Key = tuple[int, int, int]  # (id or hash, itab, data)


@dataclass
class Now:
    """The members at one instant: each registry's collectors (None: the registry is
    not itself any more, or cannot be read) and each *Vec's children (None: its map
    cannot be read), by the *Vec's ``id``."""

    regs: list[set[Key] | None] = field(default_factory=list)
    children: dict[int, list[Key] | None] = field(default_factory=dict)
    settled: bool = True  # False: the maps changed at every try; each as two agreed


def vecs_of(found: Found) -> list[Vec]:
    """Every *Vec the walk found, once."""
    out: dict[int, Vec] = {}
    for r in found.regs:
        for u in r.units.values():
            for v in u.vecs:
                out.setdefault(id(v), v)
    return list(out.values())


@dataclass
class Last:
    """A settled read of the members: of which walk and *Vecs, the ranges it read and
    their bytes, and what they held."""

    found: Found  # held: the walk it was of (its id is not another's while held)
    vecs: list[Vec]
    ranges: list[tuple[int, int]]
    got: list[bytes | None]
    now: Now


def read(gm: GoMemory, found: Found, vecs: list[Vec], last: Last | None = None,
         once: bool = False) -> tuple[Now, Last | None]:
    """The members of ``found``'s registries and of ``vecs`` now, and the read to give
    the next call as ``last``. When every range ``last`` read holds the same bytes in
    two reads of them all, the members are ``last``'s (two batched reads, nothing
    parsed: a scrape of a program whose members did not change); ``once``: in one read,
    for a caller that reads them again after (a scrape, after its values)."""
    if last is not None and last.found is found and len(last.vecs) == len(vecs) and \
            all(a is b for a, b in zip(last.vecs, vecs, strict=True)) and \
            gm.memory.read_many(last.ranges) == last.got and \
            (once or gm.memory.read_many(last.ranges) == last.got):
        return last.now, last
    tries: list[Now] = []
    for _ in range(TRIES):
        reads = Reads(gm.memory)
        now = _once(gm, found.regs, vecs, reads)
        if reads.held():
            return now, Last(found, list(vecs), reads.ranges, reads.got, now)
        tries.append(now)
    return _common(tries), None


def _once(gm: GoMemory, regs: list[Reg], vecs: list[Vec], reads: Reads) -> Now:
    now = Now()
    firsts = reads.many([w for r in regs for w in ((r.header + 8, 8), (r.unchecked, 24))])
    pairs = gm.map_pairs([(r.header, r.by_id) for r in regs] + [(v.header, v.type)
                                                                  for v in vecs], reads)
    arrays: list[tuple[int, int]] = []  # unchecked collectors' arrays, children's slices
    plan: list[tuple[int, int, int]] = []  # (registry or -1 - vec, hash, count)
    for i, r in enumerate(regs):
        second, head = firsts[2 * i], firsts[2 * i + 1]
        got = pairs[i]
        if second is None or head is None or isinstance(got, Damaged) or \
                gm.seed_of(struct.unpack("<Q", second)[0]) != r.seed:
            now.regs.append(None)  # another map at its address: not the registry
            continue
        now.regs.append({(struct.unpack("<Q", k)[0], *_TWO.unpack(v)) for k, v in got})
        data, n, cap = _THREE.unpack(head)
        if n > cap or n > MAX_COLLECTORS or (n and not data):
            now.regs[-1] = None
        elif n:
            arrays.append((data, 16 * n))
            plan.append((i, -1, n))
    for j, v in enumerate(vecs):
        got = pairs[len(regs) + j]
        if isinstance(got, Damaged):
            now.children[id(v)] = None
            continue
        now.children[id(v)] = []
        for k, value in got:
            data, n, cap = _THREE.unpack(value)
            if n > cap or n > _MAX_CHILDREN or (n and not data):
                now.children[id(v)] = None
                break
            if n:
                arrays.append((data, n * v.elem_size))
                plan.append((-1 - j, struct.unpack("<Q", k)[0], n))
    for (who, hash_, n), raw in zip(plan, reads.many(arrays), strict=True):
        if who >= 0:
            members = now.regs[who]
            if members is None:
                continue
            if raw is None:
                now.regs[who] = None
                continue
            members.update((-1, *_TWO.unpack_from(raw, 16 * i)) for i in range(n))
            continue
        v = vecs[-1 - who]
        children = now.children[id(v)]
        if children is None:
            continue
        if raw is None:
            now.children[id(v)] = None
            continue
        children += [(hash_, *_TWO.unpack_from(raw, i * v.elem_size + v.metric_at))
                     for i in range(n)]
    return now


def _common(tries: list[Now]) -> Now:
    """Of reads that never agreed as a whole, each map as two reads in a row found it
    (the latest such pair): a map that changed between every two reads is left out
    (None), as is what one read of it alone found (a slot copied while it was written
    may pair a key with another entry's value)."""
    out = Now(settled=False)
    pairs = list(zip(tries[-2::-1], tries[:0:-1], strict=True))  # (earlier, later), latest first
    for i in range(len(tries[-1].regs)):
        out.regs.append(next((b.regs[i] for a, b in pairs
                              if a.regs[i] is not None and a.regs[i] == b.regs[i]), None))
    for vid in tries[-1].children:
        out.children[vid] = next((b.children[vid] for a, b in pairs
                                  if a.children.get(vid) is not None and
                                  a.children.get(vid) == b.children.get(vid)), None)
    return out
