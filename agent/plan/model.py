"""The resolved plan: where each probe attaches and how each value is fetched there
(the fetches themselves: ``agent.plan.fetches``).

A plan depends only on the spec and the binary's bytes (no PIDs, no kernel facts), so it
can be shown (``noop check``), diffed as JSON and handed to codegen. Plain frozen data.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, cast

from agent.binary.proof import Proof
from agent.config.decoders import LabelRule
from agent.config.selector import Selector
from agent.plan.fetches import Decode, Fetch, one_of

# The kinds of a plan's parts beyond its fetches' (``agent.plan.fetches``): mypy
# (strict equality) refuses a misspelled one, and a cached plan holding another is not
# loaded.
Role = Literal["", "call", "return", "drop", "renew"]
ColumnOp = Literal["sum", "last", "first", "max", "base", "hist"]
MetricKind = Literal["counter", "gauge", "histogram"]
Where = Literal["kernel", "events"]


def metric_kind(name: str) -> MetricKind:
    """``name`` as a metric type (a spec's ``type:``, checked where it is parsed)."""
    return cast(MetricKind, one_of(MetricKind, name, "a metric type"))


def where_of(name: str) -> Where:
    """``name`` as where a metric is aggregated (a spec's ``aggregate:``)."""
    return cast(Where, one_of(Where, name, "where a metric is aggregated"))


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
                **({"skip": _skip(self.skip_flags)} if self.skip_flags else {}),
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
    # noop run: every hit an event for another part of noop, with no metric of its own
    # (the preset's registry_gathered, for the mirror)
    tells: bool = False

    @property
    def events(self) -> bool:
        """Whether ``noop run`` needs this probe's every hit as an event."""
        return self.tells or any(m.where == "events" for m in self.metrics)

    @property
    def renews(self) -> bool:
        """Whether its sites note new generations of objects' addresses (``renew``)."""
        return any(s.role == "renew" for s in self.sites)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "target": self.target,
                **({"at": self.at, "roots": self.roots} if self.at != "entry" else {}),
                **({"calls": self.calls} if self.calls else {}),
                **({"tells": True} if self.tells else {}),
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
    arch: str = "x86-64"  # the binary's architecture (``Arch.name``): its pt_regs

    @property
    def files(self) -> tuple[str, ...]:
        """Every file to attach the target's probes to."""
        return (self.binary, *self.also)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "binary": self.binary, "build_id": self.build_id,
                "language": self.language, "pid": self.pid,
                "goid_offset": self.goid_offset, "stack_hi_offset": self.stack_hi_offset,
                "debug": self.debug, "go_version": self.go_version,
                **({"arch": self.arch} if self.arch != "x86-64" else {}),
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
    notes: tuple[str, ...] = ()  # about the program, whichever probes are kept

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
        return (*self.notes,
                *(f"probe {p.name}: {u}" for p in self.probes for u in p.unseen))

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "targets": [t.to_json() for t in self.targets],
                "probes": [p.to_json() for p in self.probes],
                **({"waiting": [n for n, _ in self.waiting]} if self.waiting else {})}


def _skip(flags: int) -> str:
    """When a site's hits are dropped, said as the architecture reads it: x86-64's
    eflags, or an arm64 condition of pstate's NZCV."""
    from agent.binary.arch import CONDITION, condition_name

    if flags & CONDITION:
        return f"condition {condition_name(flags & 0xF)} holds"
    return f"flags & {flags:#x}"
