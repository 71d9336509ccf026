"""The probe spec's data: the frozen ``Spec`` a ``probes.yaml`` loads into (its targets,
probes and values, each remembering where in the file it came from), the format's
limits and names, a budget read as a share of one CPU, a selector split into the steps
resolving walks, and a spec's one target replaced from the command line. Loading and
validating a file is ``probes``'s; the format's key tables and JSON Schema are
``schema``'s.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from agent import files, numbers
from agent.errors import NoopError

if TYPE_CHECKING:  # a spec's parts, named in annotations only: no YAML reader to start
    from agent.config import metrics as spec_metrics
    from agent.config.reader import Mark

SPEC_VERSION = 1
MAX_INDEX = 2**31 - 1  # the largest [index] or .N a selector may name
MAX_SITES = 200  # a match: resolving to more is refused unless max_sites: raises it
MAX_SITES_LIMIT = 100_000
DEFAULT_BUDGET = "5%"  # of one CPU per target process, for probes the spec sets none for
PID_MAX = 4194304  # the kernel's largest pid_max (PID_MAX_LIMIT on 64-bit)
DECODINGS = ("int", "uint", "float", "bool", "string", "bytes", "addr")
BUILTINS = {"pid": "process id (the tgid)", "tid": "thread id",
            "goid": "Go goroutine id, from the g in r14 and runtime.g.goid",
            "timestamp": "time of the hit, nanoseconds since the epoch",
            "duration": "nanoseconds from the call's entry to its return (at: exit)",
            "caller": "the function that called the probed one (inlining-aware; a label)",
            "caller_line": "the file:line of that call"}
AT = ("entry", "exit")
EXIT_ONLY = ("duration",)
DEFAULT_MAX = 64  # bytes kept of a string or byte slice
MAX_MAX = 256
CONTAINER_ID = "^[0-9a-f]{1,64}$"
POD_UID = "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
NAMED_BY = ("binary", "exe", "build_id")  # how a target names its program: exactly one


@dataclass(frozen=True, slots=True)
class Target:
    """A program to probe, named by exactly one of: its path (``binary``), its
    executable's name (``exe``) or its build-id."""

    name: str
    binary: str | None  # absolute, or relative to the spec file's directory when given so
    pid: int | None
    mark: Mark
    exe: str | None = None
    build_id: str | None = None
    debuginfo: str | None = None  # its separate debug file, when it is stripped
    container: str | None = None  # only processes in this container (an id, or a prefix)
    pod: str | None = None  # only processes in this Kubernetes pod (its UID)


@dataclass(frozen=True, slots=True)
class Value:
    """A value a probe reads: a selector on a parameter, or a built-in (``$pid``)."""

    name: str
    selector: str
    decode: str | None  # None: from the type found in DWARF
    max: int
    mark: Mark
    at: str | None = None  # entry or exit; None: where the probe is
    # the selector's steps, parsed once here: what resolving walks
    steps: tuple[Step, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "steps", parse_selector(self.selector))

    @property
    def root(self) -> str:
        """The parameter, local or result the selector starts from (``o`` of ``o.ID``)."""
        return str(self.steps[0][1]) if self.steps else ""

    @property
    def builtin(self) -> str | None:
        return self.selector[1:] if self.selector.startswith("$") else None

    @property
    def result(self) -> bool:
        """Whether the selector starts at a result (``~r0``: the first unnamed one)."""
        return self.selector.startswith("~")


@dataclass(frozen=True, slots=True)
class Probe:
    name: str
    target: str
    function: str | None
    match: str | None  # a shell-style glob over full function names
    values: tuple[Value, ...]
    mark: Mark
    function_mark: Mark
    metrics: tuple[spec_metrics.Metric, ...] = ()
    at: str = "entry"  # exit: one hit per return, values read there (or saved at entry)
    signature: str | None = None  # for a stripped Go binary whose metadata has none
    max_sites: int = 0  # for match: the most sites it may resolve to (0: MAX_SITES)
    budget: float | None = None  # share of one CPU per process; None: the spec's default
    line: str | None = None  # a source line: "FILE:LINE", or "FUNCTION:N" with function


@dataclass(frozen=True, slots=True)
class Spec:
    path: str
    targets: tuple[Target, ...]
    probes: tuple[Probe, ...]
    budget: float | None = None  # every probe's that sets none; None: noop run's cap

    def target(self, name: str) -> Target:
        return next(t for t in self.targets if t.name == name)


def share(text: str) -> float:
    """A budget: a share of one CPU written as a percentage (``1%``, ``0.5%``), or
    ``none`` (unbounded: inf). ValueError saying what is wrong otherwise."""
    t = text  # spaces around it are no share: refused with the reason
    if t.lower() == "none":
        return float("inf")
    if not t.endswith("%"):
        raise ValueError(f"{text!r} is not a share of a CPU: write it with %, e.g. 1%, "
                         "or none")
    try:
        value = numbers.decimal(t[:-1], "a share of one CPU", 0, 100, above=True)
    except numbers.NotANumber as exc:
        raise ValueError(f"{text!r} is not a share of one CPU: more than 0% and at most "
                         f"100%, or none ({str(exc).partition(': ')[2]})") from None
    return value / 100


def override(s: Spec, binary: str | None, pid: int | None, debuginfo: str | None = None
             ) -> Spec:
    """The spec with its one target's binary (relative to the working directory), PID or
    debug file replaced from the command line."""
    if len(s.targets) != 1:
        raise NoopError("--binary and --pid need a spec with exactly one target",
                        "set binary and pid in the spec's targets instead")
    t = s.targets[0]
    if binary:  # the command line's path replaces however the spec named the program
        t = replace(t, binary=files.resolved(binary, "binary"), exe=None, build_id=None)
    t = replace(t, pid=pid if pid is not None else t.pid)
    if debuginfo:
        t = replace(t, debuginfo=files.resolved(debuginfo, "debug file"))
    return replace(s, targets=(t,))



# A selector, split into steps: ("name", "c"), ("field", "desc"), ("index", 0).
Step = tuple[str, str | int]


def parse_selector(text: str) -> tuple[Step, ...]:
    """``o.Items[0].Qty`` -> (("name","o"), ("field","Items"), ("index",0), ("field","Qty"));
    ``len(o.Items)`` ends in ("len", 0); a tuple's ``t.0`` is ("field", "0"); Go's
    ``err.(*errors.errorString)`` is ("assert", "*errors.errorString") and a last
    ``.Error()`` ("error", 0)."""
    steps: list[Step] = []
    inner = re.fullmatch(r"len\(\s*(.*?)\s*\)", text.strip())
    for m in re.finditer(r"\[([0-9]+)\]|\.\(([^()\s]+)\)|\.(Error)\(\)|\.([0-9]+)"
                         r"|\.?(~[rp][0-9]+|[A-Za-z_][A-Za-z0-9_]*)",
                         inner.group(1) if inner else text):
        if m.group(1) is not None:
            steps.append(("index", int(m.group(1))))
        elif m.group(2) is not None:
            steps.append(("assert", m.group(2)))
        elif m.group(3) is not None:
            steps.append(("error", 0))
        elif m.group(4) is not None:
            steps.append(("field", m.group(4)))
        else:
            steps.append(("field" if steps else "name", m.group(5)))
    if inner:
        steps.append(("len", 0))
    return tuple(steps)

