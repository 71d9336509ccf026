"""How a plan reads each value at a site: the fetch, the ops that compute its address,
and the kinds of both and of a value's decoding. Plain frozen data, as the plan that
holds them (``agent.plan.model``): codegen turns a fetch into the C that reads the value,
and ``noop check`` shows what it reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, cast, get_args

# The kinds of a fetch's parts and of a decoding: mypy (strict equality) refuses a
# misspelled one wherever one is compared or made, and a cached plan holding another is
# not loaded.
OpKind = Literal["reg", "sp", "deref", "index", "bound", "root", "add", "when", "itype"]
FetchKind = Literal["mem", "mem_slice", "mem_array", "reg", "reg_slice", "builtin", "const",
                    "derived", "addr", "sum", "unavailable", "generation", "gotype",
                    "caller", "root", "later", "saved"]
Decode = Literal["int", "uint", "float", "bool", "string", "bytes", "addr", "variant",
                 "caller", "caller_line", "gotype"]


def one_of(kind: Any, name: str, what: str) -> str:
    """``name`` when it is one of the Literal ``kind``'s names; ValueError otherwise."""
    if name not in get_args(kind):
        raise ValueError(f"not {what}: {name!r}")
    return name


def fetch_kind(name: str) -> FetchKind:
    """``name`` as a fetch kind (one a plan keeps as text: a generation's address)."""
    return cast(FetchKind, one_of(FetchKind, name, "a fetch kind"))


def decode_of(name: str) -> Decode:
    """``name`` as a decoding (a spec's ``as:``, checked where it is parsed)."""
    return cast(Decode, one_of(Decode, name, "a decoding"))


@dataclass(frozen=True, slots=True)
class Op:
    """One step computing an address in the BPF program (``acc`` is a u64).

    - ``reg``:   acc = the register ``reg`` (a pointer held in a register)
    - ``sp``:    acc = rsp + offset (a stack slot at the probed instruction)
    - ``deref``: acc = *(u64 *)(acc + offset) (follow a pointer)
    - ``index``: read the slice header {ptr, len} at acc + offset; if index >= len the
      value is absent; else acc = ptr + index * size
      (``length``, when set: the length is at acc + ``length``, not after the pointer:
      a Rust ``Vec``)
    - ``bound``: if index >= the register ``reg`` (a slice length) the value is absent
    - ``when``: the ``size``-byte discriminant at acc + ``offset`` (or in the register
      ``reg``) is one of ``values`` (with ``negate``: none of them), else the value is
      absent: the active variant of a Rust enum, ``Some`` of an ``Option``
    - ``itype``: the Go interface at acc + ``offset`` (its first word in the register
      ``reg``) holds a value of one of the types whose descriptors are at ``values``
      (``index`` 1: an interface with methods, whose first word is an itab with the
      type at +8), else the value is absent (nil too): a type assertion
    - ``root``: acc = pointer ``index`` saved by the call's entry (exit probes)
    - ``add``: acc += offset (an address inside what acc points to)
    """

    op: OpKind
    reg: str = ""
    offset: int = 0
    index: int = 0
    size: int = 0
    length: int | None = None
    values: tuple[int, ...] = ()
    negate: bool = False

    def to_json(self) -> dict[str, Any]:
        keep = {"reg": ("reg",), "sp": ("offset",), "deref": ("offset",),
                "index": ("offset", "index", "size"), "bound": ("reg", "index"),
                "root": ("index",), "add": ("offset",),
                "when": ("reg", "offset", "size", "values", "negate"),
                "itype": ("reg", "offset", "index", "values")}[self.op]
        out = {"op": self.op, **{k: getattr(self, k) for k in keep}}
        if self.op in ("when", "itype"):
            out["values"] = list(self.values)
            if self.reg:
                del out["offset"]
            else:
                del out["reg"]
        if self.length is not None:
            out["length"] = self.length
        return out

    def __str__(self) -> str:
        if self.op == "reg":
            return self.reg
        if self.op == "sp":
            return f"sp{self.offset:+d}"  # the stack pointer (rsp, sp)
        if self.op == "deref":
            return f"*(+{self.offset})" if self.offset >= 0 else f"*({self.offset})"
        if self.op == "index":
            return f"[{self.index}] of slice at +{self.offset} (elem {self.size})"
        if self.op == "root":
            return f"pointer {self.index} saved at entry"
        if self.op == "add":
            return f"+{self.offset}"
        if self.op == "itype":
            where = self.reg or f"+{self.offset}"
            types = ", ".join(f"{v:#x}" for v in self.values)
            return (f"if the interface at {where} holds type {types} "
                    f"({'through its itab' if self.index else 'its type word'})")
        if self.op == "when":
            where = self.reg or f"+{self.offset}"
            return (f"if {where}[{self.size}] {'not in' if self.negate else 'in'} "
                    f"{{{', '.join(map(str, self.values))}}}")
        return f"check {self.index} < {self.reg}"


# Derived values (Fetch kind ``derived``): how noop computes the float from the words
# read, with the text ``noop check`` shows for them.
FORMULAS = {
    "new-old": "{1} - {0} as float64s (new value - old value)",
    "old-new": "{0} - {1} as float64s (old value - new value)",
    "uint": "{0} as an unsigned integer, converted to float64",
}


@dataclass(frozen=True, slots=True)
class Fetch:
    """How one value is read at one site.

    ``kind`` is where the final bytes are:
    - ``mem``: ``size`` bytes at acc + ``offset``
    - ``mem_slice``: a {ptr, len} header at acc + ``offset``, then up to ``cap`` bytes
      (Go string, []byte); with ``length``, the length is at acc + ``length`` (Rust's
      ``String`` and ``Vec``); with ``regs``, one word is that register, the other
      at acc + ``offset``: ``slot`` 0 the pointer is the register, 1 the length (a Go
      string whose words a line's code keeps one in a register, one on the stack)
    - ``mem_array``: up to ``cap`` bytes at acc + ``offset`` (fixed-size byte array)
    - ``reg``: the register ``regs[0]`` plus ``offset``, low ``size`` bytes (``formula``
      ``-``: less the register ``regs[1]``: an atomic add's old value, from the new one
      and the amount added, where both paths of an arm64 add join; ``+``: plus it, the
      new value from the old one an outline atomic returned and the amount added)
    - ``reg_slice``: pointer in ``regs[0]``, length in ``regs[1]``
    - ``builtin``: ``builtin`` (pid, tid, goid, timestamp, duration)
    - ``const``: the 8 bytes ``offset`` (a value the code holds as a constant: an
      instruction's operand, a double it loads from the binary)
    - ``derived``: a float computed in noop from the registers ``regs`` (one or two
      words), as ``formula`` says (``FORMULAS``): for a float argument that never
      leaves its XMM register, from the values the function computes with it
    - ``addr``: acc + ``offset`` itself (an address the code loads before using it)
    - ``sum``: the 8 bytes at acc + ``offset`` plus the register ``regs[0]`` (``formula``
      ``-``: less it), or without a register plus the constant ``base`` (mod 2**64): the
      value an update of that field leaves, read before the update
    - ``unavailable``: cannot be read here; ``why`` says so
    - ``generation``: the generation of the object at the address that the fetch of
      kind ``formula`` (``reg`` or ``addr``) with these ops, registers and offset
      computes: the time (``bpf_ktime_get_ns()``) a ``renew`` site last saw that
      address given to a new object or taken from an old one, or 0 (never). With the
      address, it tells apart the objects a program makes one after another at one
      address (a garbage collector or an allocator reuses it)
    - ``gotype``: the address of the dynamic type's descriptor of the Go interface
      whose first word is at acc + ``offset`` (or in ``regs[0]``); ``slot`` 1: the
      first word is an itab (the type at +8); 0 when the interface is nil
    - ``caller``: the return address, 8 bytes at acc + ``offset`` (acc the frame's
      canonical address, after ``ops``), or in ``regs[0]`` (arm64's link register,
      before the function saves it), made the binary's own: less the load bias, the
      site's address in the process less ``base``, its address in the binary

    The two halves of an exit probe add:
    - ``root`` (at the call's entry): keep acc, after ``ops``, as pointer ``slot``
    - ``later`` (at the call's entry): nothing; the value is read at the return
    - ``saved`` (at a return): value ``slot`` as the call's entry read it
    """

    kind: FetchKind
    ops: tuple[Op, ...] = ()
    offset: int = 0
    size: int = 8
    regs: tuple[str, ...] = ()
    builtin: str = ""
    why: str = ""
    slot: int = 0
    formula: str = ""
    length: int | None = None
    base: int = 0

    @property
    def words(self) -> int:
        """u64 words the value takes in an event: two for a value derived from two."""
        return len(self.regs) if self.kind == "derived" else 1

    def describe(self) -> str:
        path = " -> ".join(map(str, self.ops))
        at = f"{path} +{self.offset}" if path else ""
        if self.kind == "mem":
            return f"{at}: {self.size} bytes"
        if self.kind == "mem_slice" and self.regs:
            word, other = ("pointer", "length") if self.slot == 0 else ("length", "pointer")
            return f"{at}: {other}, {word} in {self.regs[0]}, then the bytes"
        if self.kind == "mem_slice" and self.length is not None:
            return f"{at}: pointer, length at +{self.length}, then the bytes"
        if self.kind == "mem_slice":
            return f"{at}: {{ptr,len}} header, then the bytes"
        if self.kind == "mem_array":
            return f"{at}: byte array"
        if self.kind == "reg" and self.formula in ("-", "+"):
            return (f"{path} -> " if path else "") + \
                f"{self.regs[0]} {self.formula} {self.regs[1]}"
        if self.kind == "reg":
            extra = f" {self.offset:+d}" if self.offset else ""
            low = f" (low {self.size} bytes)" if self.size < 8 else ""
            return (f"{path} -> " if path else "") + f"{self.regs[0]}{extra}{low}"
        if self.kind == "reg_slice":
            return (f"{path} -> " if path else "") + \
                f"bytes at {self.regs[0]}, length {self.regs[1]}"
        if self.kind == "builtin":
            return f"${self.builtin}"
        if self.kind == "const":
            return f"the constant {self.offset:#x} (in the code)"
        if self.kind == "addr":
            return f"{at or 'acc'}: the address"
        if self.kind == "sum":
            plus = (f"{'-' if self.formula == '-' else '+'} {self.regs[0]}" if self.regs
                    else f"+ {self.base:#x}")
            return f"{at}: 8 bytes {plus}"
        if self.kind == "derived":
            return FORMULAS[self.formula].format(*self.regs)
        if self.kind == "gotype":
            word = self.regs[0] if self.regs else f"{at or 'acc'}"
            return (f"the dynamic type of the interface at {word}" +
                    (" (through its itab)" if self.slot else ""))
        if self.kind == "caller" and self.regs:
            return f"the return address in {self.regs[0]} (the link register), less the " \
                "load bias"
        if self.kind == "caller":
            reg = self.ops[0].reg if self.ops and self.ops[0].op == "reg" else "rsp"
            return (f"the return address at {reg} {self.offset:+d} (the frame's canonical "
                    "address - 8), less the load bias")
        if self.kind == "root":
            return f"{path}: kept as pointer {self.slot}"
        if self.kind == "generation":
            at = Fetch(fetch_kind(self.formula), self.ops, self.offset, 8,
                       self.regs).describe()
            return f"the generation of the object at {at} (0: none seen)"
        if self.kind == "later":
            return "read at the return"
        if self.kind == "saved":
            return "as read at the call's entry"
        return f"unavailable: {self.why}"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind}
        if self.ops:
            out["ops"] = [o.to_json() for o in self.ops]
        if self.kind in ("mem", "mem_slice", "mem_array", "reg", "const", "caller", "addr",
                         "sum"):
            out["offset"] = self.offset
        if self.base:
            out["base"] = f"{self.base:#x}"
        if self.length is not None:
            out["length"] = self.length
        if self.kind in ("mem", "reg"):
            out["size"] = self.size
        if self.regs:
            out["regs"] = list(self.regs)
        if self.builtin:
            out["builtin"] = self.builtin
        if self.why:
            out["why"] = self.why
        if self.kind in ("root", "saved", "gotype"):
            out["slot"] = self.slot
        if self.formula:
            out["formula"] = self.formula
        out["steps"] = self.describe()
        return out
