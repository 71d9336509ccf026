"""One probe of the prometheus crate preset: the updates found (``copies``) grouped by
kind and number type, and each one's site (``places``) with what it reads there: the
metric's name, labels and address through the metric's struct, then the update's own
values, in one event layout for every site of the probe."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from agent.binary import guards, sites
from agent.binary.dwarf.locations import Piece
from agent.config.model import parse_selector
from agent.plan.binary import Binary
from agent.plan.fetches import Decode, Fetch
from agent.plan.model import Site, ValueSpec
from agent.presets.rust_prometheus import arm64
from agent.presets.rust_prometheus.copies import LOCK_OPS, Found, Reader, x86_64
from agent.presets.rust_prometheus.facts import MAX_LABELS
from agent.presets.rust_prometheus.places import (
    Placed,
    guarded,
    paired,
    place,
    place_before,
    place_flush,
    rebase,
    sum_swap,
)

_DECODE: dict[str, Decode] = {"f64": "float", "i64": "int", "u64": "uint"}
# Each architecture's reading of the crate's update code, but x86-64's (``copies`` and
# ``places``): how its code holds an update, and where one is probed (or why not).
_ARCHES: dict[str, tuple[Callable[[Binary], Reader],
                         Callable[[Binary, Found],
                                  tuple[Placed | None, guards.Before | str]]]] = {
    "arm64": (arm64.reader, arm64.place)}


def reader(b: Binary) -> Reader:
    """How ``b``'s architecture's code holds an update (``copies.updates``)."""
    other = _ARCHES.get(b.arch.name)
    return other[0](b) if other else x86_64()


def groups(found: list[Found]) -> Iterator[tuple[str, list[Found]]]:
    """Updates by probe: one per kind and number type (sites of one probe share one
    event layout)."""
    by: dict[str, list[Found]] = {}
    for f in found:
        name = f"{f.kind}_{f.number}" if f.kind != "histogram" else \
            "histogram_flush" if f.op == "flush" else "histogram"
        by.setdefault(name, []).append(f)
    order = ("counter_u64", "counter_i64", "counter_f64", "gauge_i64", "gauge_u64",
             "gauge_f64", "histogram", "histogram_flush")
    yield from sorted(by.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else 99)


def _common(b: Binary, f: Found) -> list[tuple[ValueSpec, Fetch]]:
    """Name, labels and address of the metric whose field is at base + disp."""
    at = f.disp - f.field
    start = (Piece(b.namer.size(f.owner) or 8, reg=f.base, at=at),)
    wanted = [("metric", "m.desc.fq_name", "string", 128)]
    for i in range(MAX_LABELS):
        wanted += [(f"l{i}_name", f"m.label_pairs[{i}].name", "string", 32),
                   (f"l{i}_value", f"m.label_pairs[{i}].value", "string", 64)]
    out = []
    for name, sel, decode, cap in wanted:
        got = b.walker.select(parse_selector(sel), start, f.owner, decode, cap)
        out.append((ValueSpec(name, got.decode, got.size, got.cap, got.type, sel), got.fetch))
    out.append((ValueSpec("object", "addr", 8, 0, "pointer", "m"),
                Fetch("reg", size=8, offset=at, regs=(f.base,))))
    return out


def sites_of(b: Binary, group: list[Found], pair: bool = True
             ) -> tuple[tuple[ValueSpec, ...], list[Site], list[str]]:
    """The sites of one probe's updates, and the updates left without one (why). With
    ``pair``, a histogram's count site is paired with its sum's swap, for the observed
    value (one more hit an observation)."""
    number = group[0].number
    specs = _specs(group[0])
    layout: tuple[ValueSpec, ...] | None = None
    out: list[tuple[int, int, Site]] = []
    unplaced: list[str] = []
    for f in group:
        placed, before = _placed(b, f)
        if placed is None:
            why = before if b.arch.name in _ARCHES else \
                "no instruction after it to probe (another path joins there, or the " \
                "kernel refuses it)" + (f", and before it {before}"
                                        if isinstance(before, str) else "")
            unplaced.append(f"{f.kind}.{f.op} in {b.functions.display_name(f.function)} at "
                            f"{f.insns[f.n].address:#x}: {why}")
            continue
        pairs = _common(b, f)
        if isinstance(before, guards.Before):
            base = before.reg(f.base)
            pairs = [(v, rebase(x, f.base, base)) for v, x in pairs]
        flush = f.kind == "histogram" and f.op == "flush"
        mine = specs[:4] if flush else specs[2:4] if f.kind == "histogram" else \
            (*specs[:3], specs[4]) if number == "f64" else specs[:3]
        values = tuple(v for v, _ in pairs) + mine
        if layout is None:
            layout = values
        out += _made(b, f, placed, tuple(x for _, x in pairs), before, pair)
    # Updates that share a site (LOCK instructions in a row) are attached later one
    # first: the kernel runs a probed address's consumers newest first, so their
    # events come in the program's order.
    return layout or (), [s for *_k, s in sorted(out, key=lambda o: o[:2])], unplaced


def _specs(first: Found) -> tuple[ValueSpec, ...]:
    """Every value an update of the probe of ``first`` may read, after the metric's:
    each site reads those of its kind (``sites_of``)."""
    number = first.number
    decode: Decode = "uint" if first.kind == "histogram" else _DECODE[number]
    what = {"f64": "f64 bits", "i64": "i64", "u64": "u64"}[number]
    return (ValueSpec("delta", decode, 8, 0, what, "the increment"),
            ValueSpec("value", decode, 8, 0, what, "the value after the update"),
            ValueSpec("before", decode, 8, 0, what, "the value before the update"),
            ValueSpec("observed", "float", 8, 0, "f64", "v"),
            ValueSpec("now", decode, 8, 0, what, "the field just after the update"))


def _placed(b: Binary, f: Found) -> tuple[Placed | None, guards.Before | str | None]:
    """Where to probe update ``f`` (``place``); for a LOCK update with no site after it,
    the site before it (``guards.before``), with which, or why there is none. On
    another architecture: its own placing's site (``_ARCHES``), or why there is none."""
    # A flush's increment (the observations flushed) is in the xadd's register only
    # before it: it is always probed there.
    flush = f.kind == "histogram" and f.op == "flush"
    other = _ARCHES.get(b.arch.name)
    if other is not None:
        if flush:
            return None, f"a local histogram's flush is not read on {b.arch.name} yet"
        return other[1](b, f)
    placed = None if flush else place(b, f)
    before: guards.Before | str | None = None
    if placed is None and f.insns[f.n].lock and \
            (flush or f.insns[f.n].mnemonic in LOCK_OPS):
        before = guarded(f)
    if isinstance(before, guards.Before):
        placed = place_flush(f, before) if flush else place_before(f, before)
    return placed, before


def _made(b: Binary, f: Found, placed: Placed, common: tuple[Fetch, ...],
          before: guards.Before | str | None, pair: bool) -> list[tuple[int, int, Site]]:
    """The site of update ``f`` where it was ``placed``, reading the metric's ``common``
    values, then its own (two paired sites for a histogram's count, with ``pair``);
    each with what orders sites at one address (``sites_of``)."""
    site, fetches, why, tag = placed
    flags = (0, 0)  # skip, keep: see Site
    if isinstance(before, guards.Before):
        flags = (before.skip_flags, before.keep_flags)
    k = sites.index_at(f.insns, site)
    assert k is not None  # a site is one of the function's instructions
    at = f.insns[k]
    if pair and f.kind == "histogram" and b.arch.name == "arm64":
        two = arm64.paired(b, f, at, common + fetches, tag, why)
        if two is not None:
            return two
    swap = sum_swap(f, site) if pair and f.kind == "histogram" and \
        b.arch.name == "x86-64" else None
    if swap is not None:  # the count here, kept for the observed value at the swap
        return paired(b, f, at, swap, common + fetches, tag, why, flags)
    return [(site, -f.insns[f.n].address, Site(
        b.functions.display_name(f.function), site, b.elf.file_offset(site), why,
        common + fetches, when_zf=f.insns[f.n].mnemonic == "cmpxchg",
        tag=tag, handling=b.isa.handling_at(f.insns, k), skip_flags=flags[0],
        keep_flags=flags[1]))]
