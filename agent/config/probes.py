"""The probe spec: load ``probes.yaml``, validate it, and return frozen ``Spec`` objects
that remember where in the file each part came from.

Every problem in a file is collected and reported at once, each as
``file:line:col: probe NAME: message (hint)``. This module reads YAML only; it knows
nothing of binaries (that is ``resolve``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from agent.config import metrics as spec_metrics
from agent.config.reader import IDENT as _IDENT
from agent.config.reader import Key, Reader
from agent.config.reader import Mark as Mark  # re-exported: spec.Mark, spec.Problem, ...
from agent.config.reader import Problem as Problem
from agent.config.reader import SpecError as SpecError
from agent.errors import NoopError, nearest

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


# ---------------------------------------------------------------------------------------
# The format, as tables: the validator below and the JSON Schema both come from these.

TOP_KEYS = (
    Key("version", "int", f"spec format version; {SPEC_VERSION} if given"),
    Key("targets", "map", "binaries to probe, by a name you choose", required=True),
    Key("probes", "list", "what to read, and where", required=True),
    Key("budget", "str", "the CPU each probe may cost a target process, as a share of one "
        f"CPU (e.g. 1%), unless the probe sets its own; 'none': unbounded (default: "
        f"noop run's --max-overhead, {DEFAULT_BUDGET})"),
)
TARGET_KEYS = (
    Key("binary", "str", "path of the ELF file (relative paths start at this file's "
        "directory); an absolute path not found here is looked up in each process's own "
        "root, as a container sees it"),
    Key("exe", "str", "instead of binary: the executable's file name, in every process "
        "and container"),
    Key("build_id", "str", "instead of binary: the executable's build-id (as noop check "
        "prints it), in every process and container"),
    Key("pid", "int", "only this process (default: every process running the binary)"),
    Key("container", "str", "only processes in this container: its id, or a prefix of it "
        "(as docker ps and crictl ps show it), read from /proc/PID/cgroup"),
    Key("pod", "str", "only processes in this Kubernetes pod: its UID (kubectl get pod NAME "
        "-o jsonpath='{.metadata.uid}')"),
    Key("debuginfo", "str", "the binary's separate debug file (relative paths start at "
        "this file's directory); by default looked for under /usr/lib/debug, by debuglink "
        "and in a debuginfod cache"),
)
PROBE_KEYS = (
    Key("name", "str", "a name for the probe: letters, digits, _", required=True),
    Key("target", "str", "which target (may be left out when there is one)"),
    Key("function", "str", "the function's full name as the binary has it"),
    Key("match", "str", "or: a shell-style pattern over full function names"),
    Key("max_sites", "int", f"with match: the most functions and sites it may resolve to "
        f"(default {MAX_SITES}; each site costs its service on every hit)"),
    Key("line", "str", "instead of the entry: a source line, FILE:LINE (the file as the "
        "binary names it, or a unique tail of its path such as main.go:73), or with "
        "function: its line number; a hit per pass through the line, its values read "
        "from the parameters and locals available there (noop vars BINARY FILE:LINE)"),
    Key("signature", "str", "for a stripped Go binary whose type metadata keeps no "
        "signature of the function: its Go type, e.g. \"func(o *main.Order, n int) "
        "(int, error)\" (a method's without its receiver); ignored where there is DWARF"),
    Key("at", "str", "entry (default): a hit per call, when it starts; exit: a hit per "
        "call, when it returns, with its results, $duration and the state it left"),
    Key("values", "map", "name -> selector (a Go-like path from a parameter or, at exit, "
        "a result: c.desc.fqName, o.Items[0].Qty, err, ~r0) or a built-in ($pid, $tid, "
        "$goid, $timestamp, $duration)"),
    Key("metrics", "list", "metrics made of the values, for noop run (see METRIC_KEYS)"),
    Key("budget", "str", "the CPU this probe may cost a target process, as a share of one "
        "CPU (e.g. 0.5%): over it for 10 s, noop run takes it off for a while; 'none': "
        "unbounded"),
)
VALUE_KEYS = (
    Key("read", "str", "the selector", required=True),
    Key("as", "str", "decode as " + ", ".join(DECODINGS) + " (default: from the type)"),
    Key("max", "int", f"bytes kept of a string or bytes (default {DEFAULT_MAX}, "
        f"at most {MAX_MAX})"),
    Key("at", "str", "in an exit probe, entry reads it when the call starts (default: "
        "through a parameter's pointer at the return, the rest at entry)"),
)


def json_schema() -> dict[str, Any]:
    """The spec format as JSON Schema (draft 2020-12), generated from the key tables."""
    def obj(keys: tuple[Key, ...], extra: dict[str, Any] | None = None) -> dict[str, Any]:
        props: dict[str, Any] = {}
        for k in keys:
            props[k.name] = {"description": k.doc, **(extra or {}).get(k.name, {})}
        return {"type": "object", "additionalProperties": False, "properties": props,
                "required": [k.name for k in keys if k.required]}

    ident = {"type": "string", "pattern": "^" + _IDENT.pattern.removesuffix("\\Z") + "$"}
    budget = {"type": "string", "pattern": r"^(none|[0-9]+(\.[0-9]*)?%)$"}
    value = obj(VALUE_KEYS, {"read": {"type": "string"},
                             "as": {"enum": list(DECODINGS)},
                             "max": {"type": "integer", "minimum": 1, "maximum": MAX_MAX},
                             "at": {"enum": list(AT)}})
    sm = spec_metrics
    label = obj(sm.LABEL_KEYS, {"value": {"type": "string"}, "map": {
        "type": "object", "additionalProperties": {"type": ["string", "number", "boolean"]}},
        "default": {"type": "string"}, "allow": {"type": "string", "format": "regex"},
        "other": {"type": "string"}})
    metric = obj(sm.METRIC_KEYS, {
        "name": {"type": "string", "pattern": "^[a-zA-Z_][a-zA-Z0-9_]*$"},
        "type": {"enum": list(sm.KINDS)}, "help": {"type": "string"},
        "value": {"type": "string"},
        "buckets": {"type": "array", "items": {"type": "number"}, "minItems": 1,
                    "maxItems": sm.MAX_BUCKETS},
        "labels": {"type": "object", "propertyNames": ident,
                   "additionalProperties": {"oneOf": [{"type": "string"}, label]}},
        "max_series": {"type": "integer", "minimum": 1, "maximum": sm.MAX_SERIES},
        "aggregate": {"enum": list(sm.AGGREGATIONS)}})
    probe = obj(PROBE_KEYS, {
        "name": ident, "target": {"type": "string"}, "function": {"type": "string"},
        "match": {"type": "string"},
        "line": {"type": ["string", "integer"], "pattern": r"^(\S.*:)?[1-9][0-9]*$",
                 "minimum": 1},
        "signature": {"type": "string", "pattern": "^func"},
        "max_sites": {"type": "integer", "minimum": 1, "maximum": MAX_SITES_LIMIT},
        "budget": budget,
        "values": {"type": "object", "propertyNames": ident,
                   "additionalProperties": {"oneOf": [{"type": "string"}, value]}},
        "metrics": {"type": "array", "items": metric}})
    probe["oneOf"] = [{"required": ["function"]},
                      {"required": ["match"], "not": {"required": ["line"]}},
                      {"required": ["line"], "not": {"anyOf": [{"required": ["function"]},
                                                               {"required": ["match"]}]}}]
    target = obj(TARGET_KEYS, {"binary": {"type": "string", "minLength": 1},
                               "exe": {"type": "string", "minLength": 1},
                               "build_id": {"type": "string", "minLength": 1},
                               "pid": {"type": "integer", "minimum": 1, "maximum": PID_MAX},
                               "debuginfo": {"type": "string", "minLength": 1},
                               "container": {"type": "string", "pattern": CONTAINER_ID},
                               "pod": {"type": "string", "pattern": POD_UID}})
    target["oneOf"] = [{"required": [k]} for k in _NAMED_BY]
    top = obj(TOP_KEYS, {"version": {"const": SPEC_VERSION},
                         "targets": {"type": "object", "minProperties": 1,
                                     "propertyNames": ident,
                                     "additionalProperties": target},
                         "probes": {"type": "array", "minItems": 1, "items": probe},
                         "budget": budget})
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": "noop probe spec", **top}


# ---------------------------------------------------------------------------------------
# Loading.

def load(path: str | Path) -> Spec:
    """Read and validate a spec file; raise SpecError listing every problem."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise NoopError(f"{path}: no such spec file",
                        "give --config the path of a probes.yaml") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise NoopError(f"{path}: cannot read: {exc}") from None
    return parse(text, str(path))


def parse(text: str, path: str = "<spec>") -> Spec:
    r = Reader(path)
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = Mark(path, mark.line + 1, mark.column + 1) if mark else Mark(path, 1, 1)
        raise SpecError([Problem(where, f"not valid YAML: {exc.problem or exc.context}",
                                 "check indentation and quoting")]) from None
    except yaml.reader.ReaderError as exc:  # a character YAML does not allow (NUL, ...)
        before = text[:exc.position]
        where = Mark(path, before.count("\n") + 1, len(before.rpartition("\n")[2]) + 1)
        ch = exc.character
        code = ch if isinstance(ch, int) else ord(ch)
        raise SpecError([Problem(where, f"not valid YAML: character U+{code:04X} is not "
                                 "allowed", "remove it: a spec is plain text")]) from None
    if root is None or (isinstance(root, yaml.ScalarNode) and root.tag.endswith(":null")):
        raise SpecError([Problem(Mark(path, 1, 1), "the spec is empty",
                                 "it needs 'targets' and 'probes'")])
    top = r.mapping(root, "spec", TOP_KEYS) or {}
    if "version" in top:
        vnode = top["version"][1]
        v = r.typed(vnode, int, "version")
        if v is not None and v != SPEC_VERSION:
            r.error(vnode, f"version {v} is not supported", f"this noop reads version "
                    f"{SPEC_VERSION}")
    budget = _budget(r, top["budget"][1]) if "budget" in top else None
    targets = tuple(_targets(r, top["targets"][1])) if "targets" in top else ()
    probes: list[Probe] = []
    if "probes" in top:
        node = top["probes"][1]
        if not isinstance(node, yaml.SequenceNode) or not node.value:
            r.error(node, "probes must be a non-empty list")
        else:
            seen: dict[str, Mark] = {}
            for pnode in node.value:
                probe = _probe(r, pnode, targets)
                if probe is None:
                    continue
                if probe.name in seen:
                    r.probe = probe.name
                    r.error(pnode, f"probe name {probe.name!r} is used twice",
                            f"first at {seen[probe.name]}")
                seen.setdefault(probe.name, probe.mark)
                probes.append(probe)
            _unique_metrics(r, probes)
    if r.problems:
        raise SpecError(r.problems)
    return Spec(path, targets, tuple(probes), budget)


def share(text: str) -> float:
    """A budget: a share of one CPU written as a percentage (``1%``, ``0.5%``), or
    ``none`` (unbounded: inf). ValueError saying what is wrong otherwise."""
    t = text.strip()
    if t.lower() == "none":
        return float("inf")
    if not t.endswith("%"):
        raise ValueError(f"{text!r} is not a share of a CPU: write it with %, e.g. 1%, "
                         "or none")
    try:
        value = float(t[:-1])
    except ValueError:
        value = -1.0
    if not t.isascii() or not 0 < value <= 100:
        raise ValueError(f"{text!r} is not a share of one CPU: more than 0% and at "
                         "most 100%, or none")
    return value / 100


def _budget(r: Reader, node: yaml.Node) -> float | None:
    if not isinstance(node, yaml.ScalarNode) or node.tag.endswith((":map", ":seq")):
        r.error(node, "budget must be a share of one CPU, e.g. 1%")
        return None
    try:
        return share(str(node.value))
    except ValueError as exc:
        r.error(node, f"budget: {exc}")
        return None


def _unique_metrics(r: Reader, probes: list[Probe]) -> None:
    first: dict[str, Mark] = {}
    for p in probes:
        for m in p.metrics:
            if m.name in first:
                r.problems.append(Problem(m.mark, f"metric {m.name!r} is declared twice",
                                          f"first at {first[m.name]}", p.name))
            first.setdefault(m.name, m.mark)


def _targets(r: Reader, node: yaml.Node) -> Iterator[Target]:
    items = r.mapping(node, "targets", None)
    if items is not None and not items:
        r.error(node, "targets is empty", "name at least one binary")
    for name, (knode, vnode) in (items or {}).items():
        if not _IDENT.match(name):
            r.error(knode, f"target name {name!r} must be letters, digits and _")
        fields = r.mapping(vnode, f"target {name!r}", TARGET_KEYS)
        if fields is None:
            continue
        named = [k for k in _NAMED_BY if k in fields]
        if len(named) != 1:
            r.error(vnode, f"target {name!r}: " + ("names its program twice: " + " and "
                    .join(named) if named else "missing binary"),
                    "give one of binary (a path), exe (a file name) or build_id")
            continue
        (key,) = named
        how = r.typed(fields[key][1], str, key)
        pid = r.typed(fields["pid"][1], int, "pid") if "pid" in fields else None
        if pid is not None and not 0 < pid <= PID_MAX:
            r.error(fields["pid"][1], f"pid must be a process id, 1 to {PID_MAX}")
            pid = None
        if how == "":
            r.error(fields[key][1], f"{key} is empty", "give the path of the executable"
                    if key == "binary" else f"give the executable's {key.replace('_', '-')}")
        elif how and key == "exe" and "/" in how:
            r.error(fields[key][1], "exe is a file name, without /",
                    "give a path as binary instead")
        elif how:
            debug = r.typed(fields["debuginfo"][1], str, "debuginfo") \
                if "debuginfo" in fields else None
            yield Target(name, how if key == "binary" else None, pid, r.mark(knode),
                         **({key: how} if key != "binary" else {}), debuginfo=debug or None,
                         **_where(r, fields))


def _probe(r: Reader, node: yaml.Node, targets: tuple[Target, ...]) -> Probe | None:
    r.probe = ""
    if isinstance(node, yaml.MappingNode):
        for knode, vnode in node.value:
            if getattr(knode, "value", None) == "name" and isinstance(vnode, yaml.ScalarNode):
                r.probe = str(vnode.value)
    fields = r.mapping(node, "probe", PROBE_KEYS)
    if fields is None or "name" not in fields:
        return None
    name = r.typed(fields["name"][1], str, "name")
    if name is not None and not _IDENT.match(name):
        r.error(fields["name"][1], f"probe name {name!r} must be letters, digits and _")
    function = r.typed(fields["function"][1], str, "function") if "function" in fields else None
    match = r.typed(fields["match"][1], str, "match") if "match" in fields else None
    line = _line(r, fields, function, match)
    if ("function" in fields) == ("match" in fields) and not (
            "line" in fields and "function" not in fields and "match" not in fields):
        r.error(node, "a probe needs exactly one of 'function' and 'match'",
                "function: exact name; match: a pattern such as 'main.handle*'; or a "
                "line: FILE:LINE")
    target = _probe_target(r, fields, node, targets)
    at = _at(r, fields["at"][1]) if "at" in fields else "entry"
    if line is not None and at == "exit":
        r.error(fields["at"][1], "at: exit is for a function's return; a line probe "
                "has a hit per pass through its line", "drop at:, or probe the function's "
                "exit in another probe")
    values = tuple(_values(r, fields["values"][1])) if "values" in fields else ()
    if at != "exit":
        for v in values:
            if v.builtin in EXIT_ONLY or v.result or v.at == "exit":
                what = (f"${v.builtin}" if v.builtin in EXIT_ONLY else
                        f"the result {v.selector.split('.')[0]}" if v.result else "at: exit")
                r.error_at(v.mark, f"value {v.name!r}: {what} needs an exit probe",
                           "add at: exit to the probe")
    metrics = tuple(spec_metrics.read(r, fields["metrics"][1], {v.name: v.mark for v in values})
                    ) if "metrics" in fields else ()
    fnode = (fields.get("line") or fields.get("function") or fields.get("match")
             or (node, node))[1]
    signature = r.typed(fields["signature"][1], str, "signature") \
        if "signature" in fields else None
    if signature is not None and (match is not None or not signature.startswith("func(")):
        r.error(fields["signature"][1],
                "signature: needs function: and a Go function type" if match is None else
                "signature: is for one function, not a match: pattern",
                'write it as Go does: "func(o *main.Order, n int) (int, error)"')
        signature = None
    max_sites = 0
    if "max_sites" in fields:
        got = r.typed(fields["max_sites"][1], int, "max_sites")
        if match is None:
            r.error(fields["max_sites"][1], "max_sites: is for a match: pattern",
                    "drop it: function: names one function")
        elif got is not None and not 0 < got <= MAX_SITES_LIMIT:
            r.error(fields["max_sites"][1], f"max_sites must be 1 to {MAX_SITES_LIMIT}")
        elif got is not None:
            max_sites = got
    budget = _budget(r, fields["budget"][1]) if "budget" in fields else None
    if name is None or target is None or (function is None and match is None
                                          and line is None):
        return None
    return Probe(name, target, function, match, values, r.mark(node), r.mark(fnode), metrics,
                 at or "entry", signature, max_sites, budget, line)


def _line(r: Reader, fields: dict[str, tuple[yaml.Node, yaml.Node]], function: str | None,
          match: str | None) -> str | None:
    """A probe's line as FILE:LINE or FUNCTION:N; None (with a problem) when malformed."""
    if "line" not in fields:
        return None
    node = fields["line"][1]
    if not isinstance(node, yaml.ScalarNode) or node.tag.endswith((":map", ":seq", ":null")):
        r.error(node, "line must be FILE:LINE, or a line number with function:")
        return None
    text = str(node.value).strip()
    head, sep, tail = text.rpartition(":")
    number = tail if sep else text
    if not number.isdigit() or int(number) <= 0 or (sep and not head.strip()):
        r.error(node, f"line: {text!r} is not FILE:LINE or a line number",
                "e.g. line: main.go:73, or function: main.process with line: 73")
        return None
    if match is not None:
        r.error(node, "line: is for one function or file, not a match: pattern",
                "give function: and its line number, or line: FILE:LINE alone")
        return None
    if function is not None:
        if sep:
            r.error(node, "with function:, line: is the line number alone",
                    f"line: {int(number)} (or drop function: and keep line: {text})")
            return None
        return f"{function}:{int(number)}"
    if not sep:
        r.error(node, f"line: {text} needs its file or function",
                f"line: FILE:{text} (e.g. main.go:{text}), or add function:")
        return None
    return f"{head.strip()}:{int(number)}"


def _at(r: Reader, node: yaml.Node) -> str | None:
    at = r.typed(node, str, "at")
    if at is not None and at not in AT:
        r.error(node, f"at: {at!r} is neither entry nor exit")
        return None
    return at if isinstance(at, str) else None


def _probe_target(r: Reader, fields: dict[str, tuple[yaml.Node, yaml.Node]],
                  node: yaml.Node, targets: tuple[Target, ...]) -> str | None:
    names = [t.name for t in targets]
    if "target" not in fields:
        if len(names) == 1:
            return names[0]
        if names:
            r.error(node, "which target? there are several", "add target: one of "
                    + ", ".join(names))
        return None
    tnode = fields["target"][1]
    target = r.typed(tnode, str, "target")
    if target is not None and names and target not in names:
        near = nearest(target, names, 1)
        r.error(tnode, f"unknown target {target!r}",
                f"did you mean {near[0]!r}?" if near else "targets: " + ", ".join(names))
        return None
    return target if isinstance(target, str) else None


_PATH = (r"(~r\d+|[A-Za-z_][A-Za-z0-9_]*)(\[\d+\]|\.[A-Za-z_][A-Za-z0-9_]*|\.\d+"
         r"|\.\([^()\s]+\))*(\.Error\(\))?")
_SELECTOR = re.compile(rf"(?:{_PATH}|len\(\s*{_PATH}\s*\))\Z")


def _values(r: Reader, node: yaml.Node) -> Iterator[Value]:
    for name, (knode, vnode) in (r.mapping(node, "values", None) or {}).items():
        if not _IDENT.match(name):
            r.error(knode, f"value name {name!r} must be letters, digits and _")
            continue
        decode, max_len, snode, at = None, DEFAULT_MAX, vnode, None
        if isinstance(vnode, yaml.MappingNode):
            fields = r.mapping(vnode, f"value {name!r}", VALUE_KEYS) or {}
            if "read" not in fields:
                continue
            snode = fields["read"][1]
            if "as" in fields:
                decode = r.typed(fields["as"][1], str, "as")
                if decode is not None and decode not in DECODINGS:
                    near = nearest(decode, DECODINGS, 1)
                    r.error(fields["as"][1], f"unknown decoding {decode!r}",
                            f"did you mean {near[0]!r}?" if near
                            else "one of " + ", ".join(DECODINGS))
            if "max" in fields:
                m = r.typed(fields["max"][1], int, "max")
                if m is not None and not 1 <= m <= MAX_MAX:
                    r.error(fields["max"][1], f"max must be 1..{MAX_MAX}")
                max_len = m if isinstance(m, int) else DEFAULT_MAX
            if "at" in fields:
                at = _at(r, fields["at"][1])
        selector = r.typed(snode, str, f"value {name!r}")
        if selector is None:
            continue
        selector = selector.strip()
        if selector.startswith("$"):
            if selector[1:] not in BUILTINS:
                near = nearest(selector[1:], BUILTINS, 1)
                r.error(snode, f"unknown built-in {selector!r}",
                        f"did you mean '${near[0]}'?" if near
                        else "built-ins: " + ", ".join("$" + b for b in BUILTINS))
                continue
        elif not _SELECTOR.match(selector):
            r.error(snode, f"value {name!r}: {selector!r} is not a selector",
                    "write a parameter name followed by .field, .0, [index] and Go's "
                    ".(TYPE) steps (and .Error() last), or len(...) of one")
            continue
        elif any(int(i) > MAX_INDEX for i in re.findall(r"\[(\d+)\]|\.(\d+)", selector)
                 for i in i if i):
            r.error(snode, f"value {name!r}: an index in {selector!r} is past {MAX_INDEX}",
                    "no slice, array or tuple of a running program is that long")
            continue
        yield Value(name, selector, decode, max_len, r.mark(snode), at)


def override(s: Spec, binary: str | None, pid: int | None, debuginfo: str | None = None
             ) -> Spec:
    """The spec with its one target's binary (relative to the working directory), PID or
    debug file replaced from the command line."""
    if len(s.targets) != 1:
        raise NoopError("--binary and --pid need a spec with exactly one target",
                        "set binary and pid in the spec's targets instead")
    t = s.targets[0]
    if binary:  # the command line's path replaces however the spec named the program
        t = replace(t, binary=str(Path(binary).resolve()), exe=None, build_id=None)
    t = replace(t, pid=pid if pid is not None else t.pid)
    if debuginfo:
        t = replace(t, debuginfo=str(Path(debuginfo).resolve()))
    return replace(s, targets=(t,))


CONTAINER_ID = "^[0-9a-f]{1,64}$"
POD_UID = "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"


def _where(r: Reader, fields: dict[str, tuple[yaml.Node, yaml.Node]]) -> dict[str, str]:
    """A target's container and pod limits, checked for their form."""
    out = {}
    for key, pattern, hint in (
            ("container", CONTAINER_ID, "a container id is hex: 1 to 64 of 0-9a-f"),
            ("pod", POD_UID, "a pod UID is a UUID: 8-4-4-4-12 hex digits")):
        if key not in fields:
            continue
        node = fields[key][1]
        # As written: an id that is all digits (or 1e5) is still an id, not a number.
        got = node.value if isinstance(node, yaml.ScalarNode) else r.typed(node, str, key)
        if got is None:
            continue
        if re.match(pattern, got):
            out[key] = got
        else:
            r.error(node, f"{key} {got!r} is not one", hint)
    return out


_NAMED_BY = ("binary", "exe", "build_id")  # how a target names its program: exactly one


# A selector, split into steps: ("name", "c"), ("field", "desc"), ("index", 0).
Step = tuple[str, str | int]


def parse_selector(text: str) -> tuple[Step, ...]:
    """``o.Items[0].Qty`` -> (("name","o"), ("field","Items"), ("index",0), ("field","Qty"));
    ``len(o.Items)`` ends in ("len", 0); a tuple's ``t.0`` is ("field", "0"); Go's
    ``err.(*errors.errorString)`` is ("assert", "*errors.errorString") and a last
    ``.Error()`` ("error", 0)."""
    steps: list[Step] = []
    inner = re.fullmatch(r"len\(\s*(.*?)\s*\)", text.strip())
    for m in re.finditer(r"\[(\d+)\]|\.\(([^()\s]+)\)|\.(Error)\(\)|\.(\d+)"
                         r"|\.?(~[rp]\d+|[A-Za-z_][A-Za-z0-9_]*)",
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

