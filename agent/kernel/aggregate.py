"""In-kernel aggregate layouts: one definition drives the C key and row structs of a
probe's BPF hash and the Python code that reads them back at scrape time.

A key is ``u32 faults, u32 absent`` (which key values could not be read) followed by one
8-aligned slot per key part; a row is ``u64 hits, u64 born`` (time of its first hit)
followed by its columns. The row is per CPU: ``merge`` folds the CPUs' copies into one.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from agent.kernel.events import scalar
from agent.plan.keys import slot_size
from agent.plan.model import Aggregate, Column, ProbePlan, ValueSpec

OVERFLOW = 0xFF  # every byte of the overflow row's key


@dataclass(frozen=True, slots=True)
class KeyPart:
    name: str  # a value's name, "$pid" or "$site"
    field: str  # C field
    offset: int
    cap: int  # string/bytes: bytes kept; 0: a u64
    value: ValueSpec | None  # None for $pid and $site
    bit: int  # the value's bit in faults/absent (0 for $pid and $site)


@dataclass(frozen=True, slots=True)
class RowField:
    column: Column
    field: str
    offset: int
    words: int


@dataclass(frozen=True, slots=True)
class Layout:
    probe: int
    key_struct: str
    row_struct: str
    parts: tuple[KeyPart, ...]
    key_size: int
    fields: tuple[RowField, ...]
    row_size: int

    @property
    def keyless(self) -> bool:
        """One row for every hit: a per-CPU array of one, cheaper than a hash lookup."""
        return not self.parts


def words(column: Column) -> int:
    """u64 words a column takes in the row."""
    return {"sum": 1, "max": 1, "base": 2, "last": 2, "first": 2}.get(column.op,
                                                                    len(column.bounds) + 2)


def layout(index: int, probe: ProbePlan) -> Layout:
    agg = probe.aggregate
    assert agg is not None
    values = {v.name: (i, v) for i, v in enumerate(probe.values)}
    parts, off = [], 8
    for n, name in enumerate(agg.keys):
        i, v = values.get(name, (-1, None))
        size = slot_size(v)
        parts.append(KeyPart(name, f"k{n}", off, size - 8, v, 1 << i if i >= 0 else 0))
        off += size
    fields, roff = [], 16
    for n, c in enumerate(agg.columns):
        fields.append(RowField(c, f"c{n}", roff, words(c)))
        roff += 8 * words(c)
    return Layout(index, f"noop_key_{index}", f"noop_row_{index}", tuple(parts), off,
                  tuple(fields), roff)


def c_structs(lay: Layout) -> list[str]:
    lines = [f"struct {lay.key_struct} {{", "\tu32 faults;", "\tu32 absent;"]
    for p in lay.parts:
        lines.append(f"\t{f'NOOP_BYTES({p.cap})' if p.cap else 'u64'} {p.field};  /* {p.name} */")
    lines += ["};", f"struct {lay.row_struct} {{", "\tu64 hits;",
              "\tu64 born;  /* bpf_ktime_get_ns() of the row's first hit on this CPU */"]
    for f in lay.fields:
        c = f.column
        decl = f"u64 {f.field}[{f.words}]" if f.words > 1 else f"u64 {f.field}"
        lines.append(f"\t{decl};  /* {c.op} {c.value} */")
    lines.append("};")
    checks = [(f"sizeof(struct {lay.key_struct})", lay.key_size),
              (f"sizeof(struct {lay.row_struct})", lay.row_size)]
    checks += [(f"offsetof(struct {lay.key_struct}, {p.field})", p.offset) for p in lay.parts]
    checks += [(f"offsetof(struct {lay.row_struct}, {f.field})", f.offset) for f in lay.fields]
    return lines + [f'_Static_assert({e} == {v}, "aggregate layout");' for e, v in checks]


def c_sortable(v: ValueSpec, expr: str) -> str:
    """C for ``sortable`` of the u64 ``expr`` holding the value's bits."""
    bits = 8 * (v.size if v.size in (1, 2, 4, 8) else 8)
    mask = "" if bits == 64 else f" & {(1 << bits) - 1:#x}ULL"
    top = f"{1 << (bits - 1):#x}ULL"
    shift = f" << {64 - bits}" if bits < 64 else ""
    x = f"(({expr}){mask})"
    if v.decode == "float":
        return f"((({x} & {top}) ? (~{x}{mask}) : ({x} | {top})){shift})"
    if v.decode == "int":
        return f"(({x} ^ {top}){shift})"
    return x


@dataclass(frozen=True, slots=True)
class Row:
    """One key's row, merged over CPUs; ``key`` is None for the overflow row."""

    key: dict[str, Any] | None
    faults: tuple[str, ...]  # key values that could not be read
    hits: int
    born: int  # time of the first hit (0: never hit)
    columns: dict[str, Any]  # column name -> merged value (see merge)


def decode_key(lay: Layout, raw: bytes) -> tuple[dict[str, Any] | None, tuple[str, ...]]:
    if raw[:lay.key_size] == bytes([OVERFLOW]) * lay.key_size:
        return None, ()
    faults, absent = struct.unpack_from("<II", raw)
    out: dict[str, Any] = {}
    bad = []
    for p in lay.parts:
        if p.bit and (faults | absent) & p.bit:
            out[p.name] = None
            bad.append(p.name)
        elif p.cap:
            (n,) = struct.unpack_from("<I", raw, p.offset)
            assert p.value is not None
            body = bytes(raw[p.offset + 8: p.offset + 8 + min(n, p.value.cap)])
            out[p.name] = body.decode("utf-8", "replace") if p.value.decode == "string" \
                else body
        else:
            (word,) = struct.unpack_from("<Q", raw, p.offset)
            out[p.name] = scalar(p.value, word) if p.value is not None else word
    return out, tuple(bad)


def merge(lay: Layout, key: bytes, per_cpu: list[bytes]) -> Row:
    """Fold the per-CPU copies of one row: hits, sums and buckets add; ``last`` keeps the
    latest hit's value, ``first`` the earliest; ``max`` the largest, ``base`` the
    smallest of the CPUs' first. A ``last``/``first``/``base`` column never hit is
    None."""
    values, bad = decode_key(lay, key)
    hits = born = 0
    acc: dict[str, Any] = {}
    for raw in per_cpu:
        n, first = struct.unpack_from("<QQ", raw)
        hits += n
        if first and (not born or first < born):
            born = first
        for f in lay.fields:
            w = struct.unpack_from(f"<{f.words}Q", raw, f.offset)
            c, got = f.column, acc.get(f.column.name)
            if c.op == "sum":
                acc[c.name] = ((got or 0) + w[0]) & (2**64 - 1)
            elif c.op == "max":
                acc[c.name] = w[0] if got is None else max(got, w[0])
            elif c.op == "base":  # (value, seen): a CPU that never saw one has no say
                if w[1] and (got is None or w[0] < got):
                    acc[c.name] = w[0]
            elif c.op in ("last", "first"):
                if w[1] and (got is None or (w[1] > got[1]) == (c.op == "last")):
                    acc[c.name] = (w[0], w[1])
            else:
                acc[c.name] = list(w) if got is None else [a + b for a, b in zip(
                    got, w, strict=True)]
    return Row(values, bad, hits, born, acc)


def describe(agg: Aggregate) -> str:
    cols = "".join(f", {c.op}({c.value})" for c in agg.columns)
    return f"per-CPU hash by ({', '.join(agg.keys) or 'nothing'}): hits{cols}"
