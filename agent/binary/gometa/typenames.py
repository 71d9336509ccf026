"""A Go type's name as Go's DWARF writes it, from its decoded descriptor
(``rtypes.GoType``): a named type's package path in full, composite types spelled out
(``*T``, ``[]T``, ``map[K]V``, ``func(...) ...``, ``struct { ... }``, ``interface { ... }``)."""

from __future__ import annotations

from collections.abc import Callable

from agent.binary.gometa.gotype import (
    ARRAY,
    BOOL,
    CHAN,
    COMPLEX64,
    COMPLEX128,
    FLOAT32,
    FLOAT64,
    FUNC,
    INT,
    INT8,
    INT16,
    INT32,
    INT64,
    INTERFACE,
    MAP,
    POINTER,
    SLICE,
    STRING,
    STRUCT,
    UINT,
    UINT8,
    UINT16,
    UINT32,
    UINT64,
    UINTPTR,
    UNSAFE_POINTER,
    GoType,
)

BASIC_NAMES = {BOOL: "bool", INT: "int", INT8: "int8", INT16: "int16", INT32: "int32",
                INT64: "int64", UINT: "uint", UINT8: "uint8", UINT16: "uint16",
                UINT32: "uint32", UINT64: "uint64", UINTPTR: "uintptr", FLOAT32: "float32",
                FLOAT64: "float64", COMPLEX64: "complex64", COMPLEX128: "complex128",
                STRING: "string", UNSAFE_POINTER: "unsafe.Pointer"}


def full_name(t: GoType, seen: set[int], qualify: Callable[[str], str]) -> str:
    """``t``'s name as Go's DWARF gives it: package paths in full (``qualify`` makes a
    descriptor's short qualifiers full), composite types spelled out (``seen``: the types
    being named, against cycles)."""
    if t.name:
        return t.name
    if t.named:
        if not t.pkgpath:
            return t.short  # int, string, error, …
        # Qualify the name with its package's full path: "prometheus.counter" in the
        # descriptor, "github.com/…/prometheus.counter" in DWARF; so are the packages
        # of the type arguments of a generic type.
        last = t.pkgpath.rsplit("/", 1)[-1]
        rest = t.short[len(last) + 1:] if t.short.startswith(last + ".") \
            else t.short.rsplit(".", 1)[-1]
        head, bracket, args = rest.partition("[")
        return f"{t.pkgpath}.{head}{bracket}{qualify(args) if bracket else ''}"
    if t.address in seen:
        return t.short
    seen = seen | {t.address}

    def n(x: GoType | None) -> str:
        return full_name(x, seen, qualify) if x is not None else "?"

    k = t.kind
    if k in BASIC_NAMES:
        return BASIC_NAMES[k]
    if k == POINTER:
        return "*" + n(t.elem)
    if k == SLICE:
        return "[]" + n(t.elem)
    if k == ARRAY:
        return f"[{t.length}]{n(t.elem)}"
    if k == MAP:
        return f"map[{n(t.key)}]{n(t.elem)}"
    if k == CHAN:
        return {1: "<-chan ", 2: "chan<- "}.get(t.chan_dir, "chan ") + n(t.elem)
    return _composite(t, n)


def _composite(t: GoType, n: Callable[[GoType | None], str]) -> str:
    """A func, struct or interface type's name, its parts named by ``n``."""
    k = t.kind
    if k == FUNC:
        params = [n(p) for p in t.params]
        if t.variadic and params:
            params[-1] = "..." + params[-1].removeprefix("[]")
        results = [n(r) for r in t.results]
        out = f"func({', '.join(params)})"
        if len(results) == 1:
            out += " " + results[0]
        elif results:
            out += f" ({', '.join(results)})"
        return out
    if k == STRUCT:
        if not t.fields:
            return "struct {}"
        # DWARF qualifies an unexported field's name with the struct's package.
        return "struct { " + "; ".join(
            n(f.type) if f.embedded else
            f"{f.name if f.name[:1].isupper() or not t.pkgpath else t.pkgpath + '.' + f.name}"
            f" {n(f.type)}" for f in t.fields) + " }"
    if k == INTERFACE:
        if not t.imethods:
            return "interface {}"
        return "interface { " + "; ".join(
            f"{m}{n(s).removeprefix('func')}" for m, s in t.imethods) + " }"
    return t.short
