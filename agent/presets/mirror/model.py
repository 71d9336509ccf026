"""What a walk of a program's registries finds and what a scrape reads, whatever the
library: families of series (each a metric object at an address), the units each
registered collector holds, the members read at an instant, the values read.

A library (``client_golang``, ``rust_prometheus``) fills these from its own objects;
the mirror (``mirror.core``) reads them again at every scrape and writes the page.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any, Protocol

from agent.live.memory import Damaged, Memory, Reads

TRIES = 4  # reads of the members before each map is taken as two in a row agreed

Key = tuple[int, int, int]  # a member: (id or hash, type word, object)


class Torn(Damaged):
    """What was read of an object is not what the program made it with (its memory was
    another's meanwhile): read again at the next scrape, never kept."""


@dataclass(frozen=True, slots=True)
class Series:
    """One metric object: its labels as served (sorted by name), its address and type
    (the library's), and the id of what names it (a Desc's address, or its id), which
    must still be its own when it is read; ``marks``, where that id is not the
    object's alone (a *Vec's children share their Desc), memory of the object's own
    that must hold these bytes before and after its value is read (its label values:
    an allocator gives a freed child's memory to the next child made)."""

    labels: tuple[tuple[str, str], ...]
    address: int
    type: Any
    desc: int
    marks: tuple[tuple[int, bytes], ...] = ()


@dataclass
class Family:
    name: str
    help: str
    kind: str
    series: list[Series] = field(default_factory=list)


class Vec(Protocol):
    """A *Vec as the mirror sees it: its children by key, as the last reads found them
    (None: a child of a type not mirrored), under the family they are served in."""

    family: str
    help: str
    kind: str
    children: dict[Key, Series | None]


@dataclass(frozen=True)
class ProcessCollector:
    """A ``processCollector`` (or, ``kind`` "go", a ``goCollector``) registered in the
    program: the names and help its Descs give its series (a Namespace's prefix, a
    wrapping's prefix and labels in them), and the run-time address of its ``pidFn``'s
    code (the process's own pid or not; 0 for a Go collector)."""

    series: tuple[tuple[str, str], ...]  # (name, help) in its struct's order
    labels: tuple[tuple[str, str], ...]  # a wrapping's
    pid_fn: int
    kind: str = "process"


@dataclass
class Unit:
    """What one collector registered in a registry holds: its metric objects and *Vecs
    (through any wrapping)."""

    series: list[tuple[str, Series]] = field(default_factory=list)  # (family, series)
    vecs: list[Any] = field(default_factory=list)  # the library's Vecs
    # each family's help as this collector's Descs say (another collector's of that
    # name, read while its memory held something else, is not this one's)
    helps: dict[str, str] = field(default_factory=dict)
    processes: list[ProcessCollector] = field(default_factory=list)


class Reg(Protocol):
    """A registry as its walk found it: the unit each of its collectors holds, by key."""

    units: dict[Key, Unit]


@dataclass
class Found:
    """What the registries hold: families by name, and the collectors not mirrored
    (their type, by how many)."""

    registries: list[int] = field(default_factory=list)
    families: dict[str, Family] = field(default_factory=dict)
    unmirrored: dict[str, int] = field(default_factory=dict)
    damaged: list[str] = field(default_factory=list)  # what could not be read, and why
    funcs: set[str] = field(default_factory=set)  # the families of GaugeFuncs, CounterFuncs
    regs: list[Any] = field(default_factory=list)  # the library's Regs: read at each scrape
    considered: set[int] = field(default_factory=set)  # registries the walk was given
    processes: list[ProcessCollector] = field(default_factory=list)  # of a scrape's members


@dataclass(frozen=True, slots=True)
class Histogram:
    buckets: tuple[tuple[float, int], ...]  # (upper bound, cumulative count), +Inf last
    count: int
    sum: float


@dataclass(frozen=True, slots=True)
class Summary:
    count: int
    sum: float
    quantiles: tuple[tuple[float, float], ...] = ()  # (rank, value), a summary with objectives


Value = float | Histogram | Summary


@dataclass
class Read:
    values: dict[int, Value] = field(default_factory=dict)  # by the series' address
    gone: list[Series] = field(default_factory=list)  # no longer the object it was
    torn: list[Series] = field(default_factory=list)  # changing at every try


@dataclass
class Now:
    """The members at one instant: each registry's collectors (None: the registry is
    not itself any more, or cannot be read) and each *Vec's children (None: its map
    cannot be read), by the *Vec's ``id``."""

    regs: list[set[Key] | None] = field(default_factory=list)
    children: dict[int, list[Key] | None] = field(default_factory=dict)
    settled: bool = True  # False: the maps changed at every try; each as two agreed


@dataclass
class Last:
    """A settled read of the members: of which walk and *Vecs, the ranges it read and
    their bytes, and what they held."""

    found: Found  # held: the walk it was of (its id is not another's while held)
    vecs: list[Any]
    ranges: list[tuple[int, int]]
    got: list[bytes | None]
    now: Now


def vecs_of(found: Found) -> list[Any]:
    """Every *Vec the walk found, once."""
    out: dict[int, Any] = {}
    for r in found.regs:
        for u in r.units.values():
            for v in u.vecs:
                out.setdefault(id(v), v)
    return list(out.values())


def common(tries: list[Now]) -> Now:
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


def same(a: Iterable[Any], b: Iterable[Any]) -> bool:
    """Whether two lists hold the very same objects, in order."""
    x, y = list(a), list(b)
    return len(x) == len(y) and all(p is q for p, q in zip(x, y, strict=True))


def members(memory: Memory, found: Found, vecs: list[Any], once_read: Callable[[Reads], Now],
            last: Last | None = None, once: bool = False) -> tuple[Now, Last | None]:
    """The members of ``found``'s registries and of ``vecs`` now (``once_read``: one read
    of them all, through the Reads it is given), and the read to give the next call as
    ``last``. When every range ``last`` read holds the same bytes in two reads of them
    all, the members are ``last``'s (two batched reads, nothing parsed: a scrape of a
    program whose members did not change); ``once``: in one read, for a caller that
    reads them again after (a scrape, after its values). Else read until two reads
    agree, ``TRIES`` at most, then each map as two in a row found it (``common``)."""
    if last is not None and last.found is found and same(last.vecs, vecs) and \
            memory.read_many(last.ranges) == last.got and \
            (once or memory.read_many(last.ranges) == last.got):
        return last.now, last
    tries: list[Now] = []
    for _ in range(TRIES):
        reads = Reads(memory)
        now = once_read(reads)
        if reads.held():
            return now, Last(found, list(vecs), reads.ranges, reads.got, now)
        tries.append(now)
    return common(tries), None


def histogram(bounds: list[float], each: bytes, count: int, total: float) -> Histogram:
    """A histogram of ``count`` observations summing to ``total``, whose buckets below
    ``bounds`` counted what ``each`` holds (one u64 a bucket, not cumulative)."""
    k = min(len(bounds), len(each) // 8)
    cumulative = list(zip(bounds[:k], accumulate(struct.unpack_from(f"<{k}Q", each)),
                          strict=True))
    cumulative.append((math.inf, count))
    return Histogram(tuple(cumulative), count, total)
