"""Event layouts: one definition drives both the C struct the BPF program fills and the
Python decoder that reads the ring-buffer record back.

Every value slot is 8-byte aligned (a u64, two for a value noop derives from two
words, or a length word and a byte array rounded up to 8), so C's layout and this one
agree without packing; codegen still asserts each offset with ``_Static_assert`` so a
mismatch fails at compile time, not in the output.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from agent.plan.model import ProbePlan, ValueSpec

CALLERS = ("caller", "caller_line")
RESOLVED = (*CALLERS, "gotype")  # decodings resolved through the binary

# struct noop_hdr in bpf/noop.h: (name, struct format, offset)
HEADER_FIELDS = (("ts", "Q", 0), ("goid", "Q", 8), ("pid", "I", 16), ("tid", "I", 20),
                 ("probe", "H", 24), ("site", "H", 26), ("faults", "I", 28),
                 ("absent", "I", 32))
HEADER = struct.Struct("<QQIIHHIII")
HEADER_SIZE = HEADER.size  # 40
MAX_VALUES = 32  # one bit each in the header's faults and absent words


def _round8(n: int) -> int:
    return (n + 7) & ~7


@dataclass(frozen=True, slots=True)
class Slot:
    """Where one value sits in the record: a u64 (``words`` of them for a value derived
    from two), or a length word plus ``cap`` bytes."""

    value: ValueSpec
    index: int
    offset: int
    size: int
    cap: int  # 0 for a scalar
    words: int = 1

    @property
    def c_field(self) -> str:
        return f"v{self.index}"


@dataclass(frozen=True, slots=True)
class Layout:
    probe: int
    struct_name: str
    slots: tuple[Slot, ...]
    size: int


def layout(index: int, probe: ProbePlan) -> Layout:
    slots: list[Slot] = []
    off = HEADER_SIZE
    for i, v in enumerate(probe.values):
        if v.decode in ("string", "bytes"):
            size = 8 + _round8(v.cap)
            slots.append(Slot(v, i, off, size, _round8(v.cap)))
        else:
            words = max((site.fetches[i].words for site in probe.sites), default=1)
            size = 8 * words
            slots.append(Slot(v, i, off, size, 0, words))
        off += size
    return Layout(index, f"noop_ev_{index}", tuple(slots), off)


def c_struct(lay: Layout) -> list[str]:
    """The C declaration of the record, with compile-time checks of every offset."""
    lines = [f"struct {lay.struct_name} {{", "\tstruct noop_hdr hdr;"]
    for s in lay.slots:
        decl = f"NOOP_BYTES({s.cap}) {s.c_field};" if s.cap else \
            f"u64 {s.c_field}[{s.words}];" if s.words > 1 else f"u64 {s.c_field};"
        lines.append(f"\t{decl:<28}/* {s.value.name}: {s.value.selector} */")
    lines.append("};")
    checks = [(f"sizeof(struct {lay.struct_name})", lay.size)]
    checks += [(f"offsetof(struct {lay.struct_name}, {s.c_field})", s.offset)
               for s in lay.slots]
    lines += [f'_Static_assert({expr} == {val}, "event layout");' for expr, val in checks]
    return lines


def c_header_checks() -> list[str]:
    out = [f'_Static_assert(sizeof(struct noop_hdr) == {HEADER_SIZE}, "header layout");']
    out += [f'_Static_assert(offsetof(struct noop_hdr, {name}) == {off}, "header layout");'
            for name, _fmt, off in HEADER_FIELDS]
    return out


@dataclass(frozen=True, slots=True)
class Event:
    """A decoded record. ``values`` holds None for a value that was not read."""

    probe: int
    site: int
    ts: int  # CLOCK_MONOTONIC nanoseconds
    pid: int
    tid: int
    goid: int
    values: dict[str, Any]
    faults: tuple[str, ...]  # values whose read faulted
    absent: tuple[str, ...]  # values past the end of a slice
    truncated: tuple[str, ...]  # strings longer than their cap
    unreadable: dict[str, str]  # values never read at this site, and why


def header(data: bytes) -> tuple[int, int]:
    """(probe, site) of a record, to pick its layout."""
    _ts, _g, _p, _t, probe, site, *_ = HEADER.unpack_from(data)
    return probe, site


def decode(lay: Layout, data: bytes, unreadable: dict[str, str] | None = None,
           derived: dict[str, str] | None = None) -> Event:
    """The record ``data``; ``unreadable``: the values its site never reads, and why;
    ``derived``: the values its site derives, by formula."""
    ts, goid, pid, tid, probe, site, faults, absent, _pad = HEADER.unpack_from(data)
    values: dict[str, Any] = {}
    bad: list[str] = []
    gone: list[str] = []
    cut: list[str] = []
    unreadable = unreadable or {}
    for s in lay.slots:
        bit = 1 << s.index
        name = s.value.name
        if faults & bit or absent & bit or name in unreadable:
            if name not in unreadable:
                (bad if faults & bit else gone).append(name)
            values[name] = None
            continue
        if s.cap:
            (length,) = struct.unpack_from("<I", data, s.offset)
            raw = bytes(data[s.offset + 8: s.offset + 8 + min(length, s.value.cap)])
            if length > s.value.cap:
                cut.append(name)
            values[name] = raw.decode("utf-8", "replace") if s.value.decode == "string" \
                else raw
        elif derived and name in derived:
            words = struct.unpack_from(f"<{s.words}Q", data, s.offset)
            values[name] = derive(derived[name], words)
        else:
            (raw64,) = struct.unpack_from("<Q", data, s.offset)
            values[name] = scalar(s.value, raw64)
    return Event(probe, site, ts, pid, tid, goid, values, tuple(bad), tuple(gone),
                 tuple(cut), unreadable)


def scalar(v: ValueSpec, raw: int) -> Any:
    """A u64 slot as the value's decoding says (low ``size`` bytes are the value)."""
    size = v.size if v.size in (1, 2, 4, 8) else 8
    bits = raw & ((1 << (8 * size)) - 1)
    if v.decode == "int":
        return bits - (1 << (8 * size)) if bits >> (8 * size - 1) else bits
    if v.decode == "float":
        return struct.unpack("<d" if size == 8 else "<f", bits.to_bytes(size, "little"))[0]
    if v.decode == "bool":
        return bits != 0
    if v.decode == "variant":
        return v.variant(bits)
    if v.decode in CALLERS:  # what names them reads DWARF: imported when one comes
        from agent.binary import callers
        return callers.name(v.binary, v.build, bits, v.decode == "caller_line", v.debug)
    if v.decode == "gotype":
        from agent.binary import gotypes
        return gotypes.name(v.binary, v.build, bits)
    return bits


def derive(formula: str, words: tuple[int, ...]) -> float:
    """A derived value (``fetches.FORMULAS``) from the words its site read."""
    if formula == "uint":
        return float(words[0])
    old, new = (float(struct.unpack("<d", w.to_bytes(8, "little"))[0]) for w in words[:2])
    return new - old if formula == "new-old" else old - new


# -- many records at once ------------------------------------------------------------------

_SCALAR = {("int", 1): "b", ("int", 2): "h", ("int", 4): "i", ("int", 8): "q",
           ("float", 4): "f", ("float", 8): "d"}
_UNSIGNED = {1: "B", 2: "H", 4: "I", 8: "Q"}
TS, PID, SITE, FAULTS, ABSENT = 1, 3, 6, 7, 8  # fields of every record in a Records tuple


@dataclass(frozen=True, slots=True)
class Records:
    """A format that unpacks a run of one probe's ring records (ring header included, at
    their stride) with ``struct.iter_unpack``, scalars already decoded: ``fields`` says
    where each value is in the tuple (a string or bytes value: its length word, then
    its bytes, which ``text`` turns into the value ``decode`` gives)."""

    layout: Layout
    struct: struct.Struct
    fields: dict[str, int]
    slots: dict[str, Slot]
    # values of two words: (tuple field, words, value, formula by site); ``finish``
    # turns the words into the value, derived at a site with a formula, else the first
    derived: tuple[tuple[int, int, ValueSpec, dict[int, str]], ...] = ()

    def finish(self, records: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        """The unpacked ``records`` with each value of two words made one value, in
        the field ``fields`` names."""
        if not self.derived:
            return records
        out = []
        for rec in records:
            r = list(rec)
            for i, words, v, formulas in self.derived:
                formula = formulas.get(rec[SITE])
                r[i] = derive(formula, rec[i:i + words]) if formula else scalar(v, rec[i])
            out.append(tuple(r))
        return out

    def width(self, name: str) -> int:
        """Tuple fields of a value: a string's length word and bytes, or one."""
        return 2 if self.slots[name].cap else 1

    def value(self, name: str, record: tuple[Any, ...]) -> Any:
        i = self.fields[name]
        slot = self.slots[name]
        if slot.cap:
            return _text(slot.value, record[i], record[i + 1])
        if slot.value.decode == "variant":
            return slot.value.variant(record[i])
        if slot.value.decode in RESOLVED:
            return scalar(slot.value, record[i])
        return bool(record[i]) if slot.value.decode == "bool" else record[i]


def _text(v: ValueSpec, length: int, raw: bytes) -> str | bytes:
    raw = raw[:min(length, v.cap)]
    return raw.decode("utf-8", "replace") if v.decode == "string" else raw


def records(lay: Layout, stride: int, derived: dict[int, dict[str, str]] | None = None
            ) -> Records:
    """The ``Records`` of ``lay`` in the ring, where each takes ``stride`` bytes;
    ``derived``: by site, the values derived there and their formulas."""
    fmt = "<I4x" + HEADER.format.lstrip("<")
    fields: dict[str, int] = {}
    wide = []
    n = 1 + len(HEADER_FIELDS) + 1
    for s in lay.slots:
        fields[s.value.name] = n
        if s.cap:
            fmt += f"I4x{s.cap}s"
            n += 2
            continue
        if s.words > 1:
            formulas = {site: d[s.value.name] for site, d in (derived or {}).items()
                        if s.value.name in d}
            wide.append((n, s.words, s.value, formulas))
            fmt += "Q" * s.words
            n += s.words
            continue
        size = s.value.size if s.value.size in (1, 2, 4, 8) else 8
        code = _SCALAR.get((s.value.decode, size)) or _UNSIGNED[size]
        fmt += code + (f"{8 - struct.calcsize(code)}x" if struct.calcsize(code) < 8 else "")
        n += 1
    used = struct.calcsize(fmt)
    if used > stride:
        raise ValueError(f"records of {lay.struct_name} take {used} bytes, not {stride}")
    return Records(lay, struct.Struct(fmt + (f"{stride - used}x" if stride > used else "")),
                   fields, {sl.value.name: sl for sl in lay.slots}, tuple(wide))
