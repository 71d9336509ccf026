"""A Go type descriptor, decoded (``rtypes`` reads them): its kind (reflect.Kind,
internal/abi.Kind, as the descriptor's kind byte holds it), size, elements, a struct's
fields and a named type's methods."""

from __future__ import annotations

from dataclasses import dataclass, field

BOOL, INT, INT8, INT16, INT32, INT64 = 1, 2, 3, 4, 5, 6
UINT, UINT8, UINT16, UINT32, UINT64, UINTPTR = 7, 8, 9, 10, 11, 12
FLOAT32, FLOAT64, COMPLEX64, COMPLEX128 = 13, 14, 15, 16
ARRAY, CHAN, FUNC, INTERFACE, MAP, POINTER, SLICE, STRING, STRUCT, UNSAFE_POINTER = range(17, 27)


@dataclass(eq=False)
class Field:
    name: str
    type: GoType
    offset: int
    embedded: bool


@dataclass(eq=False)
class Method:
    name: str
    signature: GoType | None  # the func type without receiver; None where the linker
    # dropped it (a method not reachable through an interface or reflection)
    tfn: int  # the method's code for a direct call (0 when dropped)


@dataclass(eq=False)
class GoType:
    """One type descriptor, decoded."""

    address: int
    kind: int
    size: int
    align: int
    named: bool
    short: str  # the descriptor's own string: "*prometheus.counter"
    pkgpath: str = ""
    elem: GoType | None = None  # pointer, slice, array, chan, map value
    key: GoType | None = None  # map
    bucket_at: int = 0  # map: its bucket's (before Go 1.24) or group's descriptor
    length: int = 0  # array
    chan_dir: int = 0
    fields: list[Field] = field(default_factory=list)
    params: list[GoType] = field(default_factory=list)  # func
    results: list[GoType] = field(default_factory=list)
    variadic: bool = False
    methods: list[Method] = field(default_factory=list)
    imethods: list[tuple[str, GoType | None]] = field(default_factory=list)  # interface
    name: str = ""  # as Go's DWARF names it; set once the graph is read
    tflag: int = 0
