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

from agent.live.gomemory import GoMemory
from agent.live.memory import Damaged, Reads
from agent.presets.client_golang.registry import MAX_COLLECTORS, Reg, Vec
from agent.presets.mirror import model
from agent.presets.mirror.model import Found, Last, Now

_TWO = struct.Struct("<QQ")
_THREE = struct.Struct("<QQQ")
_MAX_CHILDREN = 1 << 16  # of one hash (a collision's slice)

def read(gm: GoMemory, found: Found, vecs: list[Vec], last: Last | None = None,
         once: bool = False) -> tuple[Now, Last | None]:
    """The members of ``found``'s registries and of ``vecs`` now, and the read to give
    the next call as ``last``. When every range ``last`` read holds the same bytes in
    two reads of them all, the members are ``last``'s (two batched reads, nothing
    parsed: a scrape of a program whose members did not change); ``once``: in one read,
    for a caller that reads them again after (a scrape, after its values)."""
    return model.members(gm.memory, found, vecs,
                         lambda reads: _once(gm, found.regs, vecs, reads), last, once)


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
