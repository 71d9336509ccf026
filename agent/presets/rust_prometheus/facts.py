"""What the prometheus crate's preset knows of the crate without reading a binary: its
names, the in-kernel columns of each kind, the tags its sites carry (``Tag``), and
the drop that ends a metric object. The plan's side (``rules``) finds the updates in
a binary; the output's side decodes and folds what they read. Imports no DWARF
reader."""

from __future__ import annotations

from dataclasses import dataclass

from agent.plan.model import Column

TARGET = "main"
LIBRARY = "rust-prometheus"
SOURCE = "prometheus crate preset"
# The architectures whose update code the preset reads (x86-64's LOCK instructions;
# arm64's calls of outline atomics: ``arm64``), and those whose updates it folds into
# noop run's in-kernel rows; elsewhere noop run's mirror reads every value from memory.
UPDATES_READ = ("x86-64", "arm64")
UPDATES_FOLDED = ("x86-64",)
MAX_LABELS = 4  # label pairs read per metric (the crate keeps them sorted by name)
MAX_ROWS = 4096  # in-kernel rows per probe: (process, metric object, site)
MAX_CALLS = 4096  # observations in progress at once (between a count and its sum)
COUNT_MASK = 2**63 - 1  # ShardAndCount: the count below the hot-shard bit

# The copies whose code holds an update: Value<P>'s methods (P: the atomic), and the
# histogram's count.


# noop run: what each probe keeps per (process, metric object, site) in the kernel.
# - The latest value: counters only grow, so the largest seen; a gauge's latest, as read
#   from memory after the update (``now``; for integers that is the value itself): of
#   racing updates, the one read last has them all, where float gauges' new values in
#   registers would be ordered by when each probe ran.
# - For the increments since noop first saw the series: integers sum the increments
#   (exact: the values read from memory may hold other threads' updates); a float's
#   constant increment times the hits is exact too. Otherwise the value before the
#   first update: float counters the smallest old value any CPU saw first (they only
#   grow), gauges the old value (or the value less its increment) of the earliest hit.
# - A histogram's count: the count before the update plus one (``observe``), or the
#   count after it (``flush``: the count before plus the observations flushed), and the
#   count before the first update.
def columns(kind: str, number: str, op: str = "") -> tuple[Column, ...]:
    if kind == "histogram" and op == "flush":
        return (Column("count", "max", "value", mask=COUNT_MASK),
                Column("first", "first", "before"))
    if kind == "histogram":
        return (Column("count", "max", "before", mask=COUNT_MASK, add=1),
                Column("first", "first", "before"))
    latest = Column("value", "max", "value") if kind == "counter" else \
        Column("value", "last", "now" if number == "f64" else "value")
    since = (Column("added", "sum", "delta"),) if number != "f64" else \
        (Column("low", "base", "before"),) if kind == "counter" else ()
    return (latest, Column("first", "first", "value"), Column("first_delta", "first", "delta"),
            Column("first_before", "first", "before"), *since)


KINDS = ("counter", "gauge", "histogram")


@dataclass(frozen=True, slots=True)
class Tag:
    """What a site's tag says of its updates: the kind and the method the program
    called; ``sign`` -1 when the increment is the negation of the register read
    (``lock sub``); ``adjust``, what later updates of the same field by constants add
    before the memory read (subtracted back); ``store``, a store of the new value (a
    set: no increment)."""

    kind: str
    op: str
    sign: int = 1
    adjust: int = 0
    store: bool = False


def make_tag(kind: str, op: str, sign: int = 1, adjust: int = 0, store: bool = False) -> str:
    """A site's tag: kind.op, then its flags (``Tag``): ``neg``, ``adjust=N``, ``set``."""
    extra = ("" if sign > 0 else ";neg") + (f";adjust={adjust}" if adjust else "") + \
        (";set" if store else "")
    return f"{kind}.{op}{extra}"


def parse_tag(tag: str) -> Tag:
    """What a site's tag says; ValueError when it is not one."""
    head, *flags = tag.split(";")
    kind, dot, op = head.partition(".")
    if not dot:
        raise ValueError(f"no kind.op in tag {tag!r}")
    sign, adjust, store = 1, 0, False
    for f in flags:
        if f == "neg":
            sign = -1
        elif f.startswith("adjust="):
            adjust = int(f.removeprefix("adjust="))
        elif f == "set":
            store = True
    return Tag(kind, op, sign, adjust, store)


# Every metric object of the crate (a Value<P>, a HistogramCore) holds its Desc, which
# its drop drops first: where the object's address stops being its.
DESC_DROP = "core::ptr::drop_in_place<prometheus::desc::Desc>"
DROPPED = "metric_dropped"  # the probe at those drops
