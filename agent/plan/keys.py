"""What an in-kernel aggregate's key must fit and how histogram bounds compare there:
the limits and orderings a plan is made to, which the kernel side's layouts follow.

A key is ``u32 faults, u32 absent`` followed by one 8-aligned slot per key part; it
is built on the BPF stack, so its size is bounded. Floats and signed integers are
compared in a BPF program as plain u64s in an order-preserving form (``sortable``).
"""

from __future__ import annotations

import struct

from agent.plan.model import ValueSpec

KEY_LIMIT = 256  # bytes: the key is built on the BPF stack (512 bytes in all)


def round8(n: int) -> int:
    return (n + 7) & ~7


def slot_size(v: ValueSpec | None) -> int:
    """Bytes a key part takes: a u64, or a length word and the string's bytes."""
    if v is not None and v.decode in ("string", "bytes"):
        return 8 + round8(v.cap)
    return 8


def key_size(keys: tuple[str, ...], values: dict[str, ValueSpec]) -> int:
    return 8 + sum(slot_size(values.get(k)) for k in keys)


def sortable(v: ValueSpec, raw: int) -> int:
    """The u64 whose unsigned order is the value's order: floats and signed integers
    compare in the BPF program as plain u64s. ``raw`` is the value's bits."""
    size = v.size if v.size in (1, 2, 4, 8) else 8
    bits = raw & ((1 << 8 * size) - 1)
    top = 1 << (8 * size - 1)
    if v.decode == "float":
        bits = (~bits & ((1 << 8 * size) - 1)) if bits & top else bits | top
        return bits << (64 - 8 * size)
    if v.decode == "int":
        return ((bits ^ top) << (64 - 8 * size)) & (2**64 - 1)
    return bits


def bound(v: ValueSpec, b: float) -> int:
    """A histogram bound in the value's sortable form: ``value <= b`` iff
    ``sortable(value) <= bound(b)``."""
    if v.decode == "float":
        fmt = "<d" if v.size == 8 else "<f"
        (raw,) = struct.unpack("<Q" if v.size == 8 else "<I", struct.pack(fmt, b))
        return sortable(v, raw)
    size = v.size if v.size in (1, 2, 4, 8) else 8
    lo, hi = (-(1 << (8 * size - 1)), (1 << (8 * size - 1)) - 1) if v.decode == "int" \
        else (0, (1 << 8 * size) - 1)
    whole = max(lo, min(hi, int(b // 1)))
    return sortable(v, whole & ((1 << 8 * size) - 1))
