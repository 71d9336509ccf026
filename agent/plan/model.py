"""The resolved plan: where each probe attaches and how each value is fetched there.

A plan depends only on the spec and the binary's bytes (no PIDs, no kernel facts), so it
can be shown (``noop check``), diffed as JSON and handed to codegen. Plain frozen data.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, cast, get_args

from agent.binary.proof import Proof
from agent.config.decoders import LabelRule
from agent.config.selector import Selector

# The kinds of each part of a plan: mypy (strict equality) refuses a misspelled one
# wherever one is compared or made, and a cached plan holding another is not loaded.
OpKind = Literal["reg", "sp", "deref", "index", "bound", "root", "add", "when", "itype"]
FetchKind = Literal["mem", "mem_slice", "mem_array", "reg", "reg_slice", "builtin", "const",
                    "derived", "addr", "sum", "unavailable", "generation", "gotype",
                    "caller", "root", "later", "saved"]
Decode = Literal["int", "uint", "float", "bool", "string", "bytes", "addr", "variant",
                 "caller", "caller_line", "gotype"]
Role = Literal["", "call", "return", "drop", "renew"]
ColumnOp = Literal["sum", "last", "first", "max", "base", "hist"]
MetricKind = Literal["counter", "gauge", "histogram"]
Where = Literal["kernel", "events"]


def _one_of(kind: Any, name: str, what: str) -> str:
    if name not in get_args(kind):
        raise ValueError(f"not {what}: {name!r}")
    return name


def fetch_kind(name: str) -> FetchKind:
    """``name`` as a fetch kind (one a plan keeps as text: a generation's address)."""
    return cast(FetchKind, _one_of(FetchKind, name, "a fetch kind"))


def decode_of(name: str) -> Decode:
    """``name`` as a decoding (a spec's ``as:``, checked where it is parsed)."""
    return cast(Decode, _one_of(Decode, name, "a decoding"))


def metric_kind(name: str) -> MetricKind:
    """``name`` as a metric type (a spec's ``type:``, checked where it is parsed)."""
    return cast(MetricKind, _one_of(MetricKind, name, "a metric type"))


def where_of(name: str) -> Where:
    """``name`` as where a metric is aggregated (a spec's ``aggregate:``)."""
    return cast(Where, _one_of(Where, name, "where a metric is aggregated"))


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
            return f"rsp{self.offset:+d}"
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
      ``String`` and ``Vec``)
    - ``mem_array``: up to ``cap`` bytes at acc + ``offset`` (fixed-size byte array)
    - ``reg``: the register ``regs[0]`` plus ``offset``, low ``size`` bytes
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
      canonical address, after ``ops``), made the binary's own: less the load bias,
      the site's address in the process less ``base``, its address in the binary

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
        if self.kind == "mem_slice" and self.length is not None:
            return f"{at}: pointer, length at +{self.length}, then the bytes"
        if self.kind == "mem_slice":
            return f"{at}: {{ptr,len}} header, then the bytes"
        if self.kind == "mem_array":
            return f"{at}: byte array"
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


@dataclass(frozen=True, slots=True)
class ValueSpec:
    """A value of a probe's event: its name, how it decodes, and the type it came from."""

    name: str
    # int, uint, float, bool, string, bytes, addr, variant, caller, caller_line, gotype
    decode: Decode
    size: int  # bytes of a scalar (1, 2, 4, 8); strings and bytes: cap
    cap: int
    type: str
    selector: str
    # ``variant``: a Rust enum's discriminant, shown as the name of its variant: the
    # names of the values, and the name of every other value (None: the number).
    names: tuple[tuple[int, str], ...] = ()
    other: str | None = None
    binary: str = ""  # caller, caller_line, gotype: the file whose addresses it holds
    build: str = ""  # that file's build-id when planned: names come from that build alone
    debug: str = ""  # its separate debug file, when the user named one

    def variant(self, raw: int) -> str:
        """The name of the variant whose discriminant is ``raw`` (the low ``size``
        bytes)."""
        bits = raw & ((1 << 8 * (self.size if self.size in (1, 2, 4, 8) else 8)) - 1)
        return next((n for v, n in self.names if v == bits), None) or self.other or str(bits)


@dataclass(frozen=True, slots=True)
class Site:
    """An instruction to put a uprobe on, the values fetched there, and why it was chosen.

    ``when_zf`` keeps only hits where the zero flag is set (the instruction just before
    was a compare-and-swap that succeeded). ``skip_flags`` drops hits where any of
    these flags is set (at a Go stack check's ``jbe``: CF|ZF, the branch to morestack
    that restarts the call); ``keep_flags`` keeps only hits where one of these is set
    (at a conditional jump, the hits that go the way of the update it guards).
    ``handling`` is how the kernel runs the probed instruction (``sites.handling``).
    ``tag`` is free for the plan's maker.

    ``role`` is empty for a site where each hit is a hit of the probe. An exit probe
    has a ``call`` site, its function's entry, that keeps what the call starts with,
    and a ``return`` site at each RET (or tail jump), where the hits are. A ``renew``
    site is where the address its first fetch computes starts holding another object
    (a RET of a function that makes one and returns its address, or the drop of the
    one there): each hit notes the time as the address's generation, which
    ``generation`` fetches of other probes read back; it makes no event and no row.

    ``gate`` keeps only hits where the value it reads is one of ``gate_values`` (a
    Rust future's state at its poll: a call of an async function is its first poll).
    ``key``, when set, is the address that pairs a call with its end in place of the
    thread and stack pointer: an async fn's call is its future's, which moves between
    threads and polls (the address of its state). An async fn's exit probe has, with
    that key, ``call`` sites at its first poll, ``return`` sites where its state
    becomes ``Returned``, and ``drop`` sites where a future is dropped (before it
    completed: the call was cancelled).

    ``proof`` is what the file must hold for a uprobe to go at ``file_offset``: its
    build, the code around it and the instruction there (``agent.binary.proof``),
    checked before every attach.
    """

    function: str
    address: int
    file_offset: int
    why: str
    fetches: tuple[Fetch, ...]
    when_zf: bool = False
    tag: str = ""
    skip_flags: int = 0
    handling: str = ""
    keep_flags: int = 0
    role: Role = ""
    gate: Fetch | None = None
    gate_values: tuple[int, ...] = ()
    key: Fetch | None = None
    proof: Proof | None = None

    def to_json(self, values: tuple[ValueSpec, ...]) -> dict[str, Any]:
        return {"function": self.function, "address": f"{self.address:#x}",
                "file_offset": f"{self.file_offset:#x}", "why": self.why,
                **({"role": self.role} if self.role else {}),
                **({"handling": self.handling} if self.handling else {}),
                **({"when": "zero flag set"} if self.when_zf else {}),
                **({"skip": f"flags & {self.skip_flags:#x}"} if self.skip_flags else {}),
                **({"keep": f"flags & {self.keep_flags:#x}"} if self.keep_flags else {}),
                **({"tag": self.tag} if self.tag else {}),
                **({"gate": {**self.gate.to_json(), "values": list(self.gate_values)}}
                   if self.gate is not None else {}),
                **({"key": self.key.to_json()} if self.key is not None else {}),
                **({"instruction": self.proof.insn} if self.proof is not None else {}),
                "values": {v.name: f.to_json() for v, f in zip(values, self.fetches,
                                                               strict=True)}}


@dataclass(frozen=True, slots=True)
class Column:
    """One column of an in-kernel aggregate row (every row also counts its hits).

    - ``sum``: adds the integer ``value``
    - ``last``/``first``: the ``value`` of the latest/earliest hit, with its time
    - ``max``: the largest ``(value & mask) + add`` (``mask`` 0: the whole value)
    - ``base``: ``(value & mask) + add`` at each CPU's first hit of the row (read only
      then); merged, the smallest of them
    ``first`` and ``base`` read their value only on a CPU's first hit of the row.
    - ``hist``: counts per bucket, ``value`` <= bound; ``bounds`` are the bucket bounds
      in the value's order-preserving u64 form (see ``keys.sortable``); plus the sum
    """

    name: str
    op: ColumnOp
    value: str
    bounds: tuple[int, ...] = ()
    mask: int = 0
    add: int = 0

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "op": self.op, "value": self.value}
        if self.op == "hist":
            out["buckets"] = len(self.bounds)
        if self.mask:
            out["mask"] = f"{self.mask:#x}"
        if self.add:
            out["add"] = self.add
        return out


@dataclass(frozen=True, slots=True)
class Aggregate:
    """An in-kernel aggregate of a probe: a per-CPU BPF hash whose key is made of some of
    the probe's values (or ``$pid``, ``$site``), read at scrape time. Beyond
    ``max_series`` keys, hits fold into one overflow row. With ``describe``, the first hit
    of a key also sends the probe's whole event through the ring buffer."""

    keys: tuple[str, ...]
    columns: tuple[Column, ...]
    max_series: int
    describe: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"keys": list(self.keys), "columns": [c.to_json() for c in self.columns],
                "max_series": self.max_series, "describe": self.describe}


@dataclass(frozen=True, slots=True)
class MetricPlan:
    """A user metric: what it is made of and where it is aggregated (``kernel``: from
    ``column`` of the probe's aggregate; ``events``: in noop, from ring-buffer events)."""

    name: str
    kind: MetricKind
    help: str
    value: str | None
    buckets: tuple[float, ...]
    labels: tuple[LabelRule, ...]
    max_series: int
    where: Where
    column: str = ""
    why: str = ""  # why it is aggregated where it is, when not as asked

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "type": self.kind, "value": self.value,
                "labels": {r.name: r.value for r in self.labels},
                **({"buckets": list(self.buckets)} if self.buckets else {}),
                "max_series": self.max_series, "aggregated": self.where,
                **({"column": self.column} if self.column else {}),
                **({"why": self.why} if self.why else {})}


@dataclass(frozen=True, slots=True)
class ProbePlan:
    name: str
    target: str
    values: tuple[ValueSpec, ...]
    sites: tuple[Site, ...]
    wants_goid: bool = False
    metrics: tuple[MetricPlan, ...] = ()
    aggregate: Aggregate | None = None
    at: str = "entry"
    roots: int = 0  # exit probes: pointers the call's entry keeps for the return
    unseen: tuple[str, ...] = ()  # call sites the probe cannot see (inlined copies), why
    # The CPU it may cost each target process, a share of one CPU (inf: unbounded);
    # None: noop run's --max-overhead.
    budget: float | None = None
    calls: int = 0  # exit probes: calls in progress kept at once (0: codegen's default)

    @property
    def events(self) -> bool:
        """Whether ``noop run`` needs this probe's every hit as an event."""
        return any(m.where == "events" for m in self.metrics)

    @property
    def renews(self) -> bool:
        """Whether its sites note new generations of objects' addresses (``renew``)."""
        return any(s.role == "renew" for s in self.sites)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "target": self.target,
                **({"at": self.at, "roots": self.roots} if self.at != "entry" else {}),
                **({"calls": self.calls} if self.calls else {}),
                **({"unseen": list(self.unseen)} if self.unseen else {}),
                **({"budget": self.budget if self.budget != float("inf") else "none"}
                   if self.budget is not None else {}),
                **({"metrics": [m.to_json() for m in self.metrics]} if self.metrics else {}),
                **({"aggregate": self.aggregate.to_json()} if self.aggregate else {}),
                "values": [{"name": v.name, "decode": v.decode, "type": v.type,
                            "selector": v.selector,
                            **({"max": v.cap} if v.decode in ("string", "bytes") else {})}
                           for v in self.values],
                "sites": [s.to_json(self.values) for s in self.sites]}


@dataclass(frozen=True, slots=True)
class TargetPlan:
    name: str
    binary: str  # absolute path
    build_id: str
    language: str
    pid: int | None
    goid_offset: int | None  # runtime.g.goid, for Go programs with g in r14
    stack_hi_offset: int | None = None  # runtime.g.stack.hi: pairs a Go call's exits
    # other files of the same build that processes run (in other containers)
    also: tuple[str, ...] = ()
    # how the spec names the program (None: the preset's path); ``pinned``: a file on
    # this host, probed whether or not a process runs it
    selector: Selector | None = None
    pinned: bool = True
    debug: str = "in the binary"  # where its DWARF came from (agent.binary.debuginfo)
    go_version: str | None = None
    modules: tuple[tuple[str, str], ...] = ()  # (module, version) the plan depends on

    @property
    def files(self) -> tuple[str, ...]:
        """Every file to attach the target's probes to."""
        return (self.binary, *self.also)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "binary": self.binary, "build_id": self.build_id,
                "language": self.language, "pid": self.pid,
                "goid_offset": self.goid_offset, "stack_hi_offset": self.stack_hi_offset,
                "debug": self.debug, "go_version": self.go_version,
                **({"modules": [{"path": p, "version": v} for p, v in self.modules]}
                   if self.modules else {}),
                **({"also": list(self.also)} if self.also else {})}


@dataclass(frozen=True, slots=True)
class Plan:
    source: str  # the spec file, or the preset's name
    targets: tuple[TargetPlan, ...]
    probes: tuple[ProbePlan, ...]
    # targets no process runs yet (noop run waits for them), and how each is named
    waiting: tuple[tuple[str, Selector], ...] = ()

    def target(self, name: str) -> TargetPlan:
        return next(t for t in self.targets if t.name == name)

    def limits(self) -> dict[int, tuple[str | None, str | None]]:
        """Per probe (by index) whose target is limited to a container or a pod: them."""
        out = {}
        for pi, probe in enumerate(self.probes):
            sel = next((t.selector for t in self.targets if t.name == probe.target), None)
            if sel is not None and (sel.container is not None or sel.pod is not None):
                out[pi] = (sel.container, sel.pod)
        return out

    @property
    def warnings(self) -> tuple[str, ...]:
        return tuple(f"probe {p.name}: {u}" for p in self.probes for u in p.unseen)

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "targets": [t.to_json() for t in self.targets],
                "probes": [p.to_json() for p in self.probes],
                **({"waiting": [n for n, _ in self.waiting]} if self.waiting else {})}
