"""The spec format as tables of keys (what each key of ``probes.yaml`` holds, what it
is for, whether it is required) and, generated from them, as JSON Schema
(``noop check --schema``). Loading validates with the same tables (``probes``).
"""

from __future__ import annotations

from typing import Any

from agent.config import metrics as spec_metrics
from agent.config.model import (
    AT,
    CONTAINER_ID,
    DECODINGS,
    DEFAULT_BUDGET,
    DEFAULT_MAX,
    MAX_MAX,
    MAX_SITES,
    MAX_SITES_LIMIT,
    NAMED_BY,
    PID_MAX,
    POD_UID,
    SPEC_VERSION,
)
from agent.config.reader import IDENT, Key

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
    ident = {"type": "string", "pattern": "^" + IDENT.pattern.removesuffix("\\Z") + "$"}
    budget = {"type": "string", "pattern": r"^(none|[0-9]+(\.[0-9]*)?%)$"}
    top = _object(TOP_KEYS, {"version": {"const": SPEC_VERSION},
                             "targets": {"type": "object", "minProperties": 1,
                                         "propertyNames": ident,
                                         "additionalProperties": _target()},
                             "probes": {"type": "array", "minItems": 1,
                                        "items": _probe(ident, budget)},
                             "budget": budget})
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": "noop probe spec", **top}


def _object(keys: tuple[Key, ...], extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """An object of the table's ``keys``, each described by its doc and constrained by
    ``extra``'s schema for it; no other key allowed."""
    props: dict[str, Any] = {}
    for k in keys:
        props[k.name] = {"description": k.doc, **(extra or {}).get(k.name, {})}
    return {"type": "object", "additionalProperties": False, "properties": props,
            "required": [k.name for k in keys if k.required]}


def _target() -> dict[str, Any]:
    """A target: named by exactly one of binary, exe and build_id."""
    target = _object(TARGET_KEYS, {"binary": {"type": "string", "minLength": 1},
                                   "exe": {"type": "string", "minLength": 1},
                                   "build_id": {"type": "string", "minLength": 1},
                                   "pid": {"type": "integer", "minimum": 1,
                                           "maximum": PID_MAX},
                                   "debuginfo": {"type": "string", "minLength": 1},
                                   "container": {"type": "string", "pattern": CONTAINER_ID},
                                   "pod": {"type": "string", "pattern": POD_UID}})
    target["oneOf"] = [{"required": [k]} for k in NAMED_BY]
    return target


def _probe(ident: dict[str, Any], budget: dict[str, Any]) -> dict[str, Any]:
    """A probe, with its values and metrics: exactly one of function, match and line
    (or function with a line number)."""
    value = _object(VALUE_KEYS, {"read": {"type": "string"},
                                 "as": {"enum": list(DECODINGS)},
                                 "max": {"type": "integer", "minimum": 1, "maximum": MAX_MAX},
                                 "at": {"enum": list(AT)}})
    probe = _object(PROBE_KEYS, {
        "name": ident, "target": {"type": "string"}, "function": {"type": "string"},
        "match": {"type": "string"},
        "line": {"type": ["string", "integer"], "pattern": r"^(\S.*:)?[1-9][0-9]*$",
                 "minimum": 1},
        "signature": {"type": "string", "pattern": "^func"},
        "max_sites": {"type": "integer", "minimum": 1, "maximum": MAX_SITES_LIMIT},
        "budget": budget,
        "values": {"type": "object", "propertyNames": ident,
                   "additionalProperties": {"oneOf": [{"type": "string"}, value]}},
        "metrics": {"type": "array", "items": _metric(ident)}})
    probe["oneOf"] = [{"required": ["function"]},
                      {"required": ["match"], "not": {"required": ["line"]}},
                      {"required": ["line"], "not": {"anyOf": [{"required": ["function"]},
                                                               {"required": ["match"]}]}}]
    return probe


def _metric(ident: dict[str, Any]) -> dict[str, Any]:
    """A metric of a probe, with its labels (a value's name, or a label's own keys)."""
    sm = spec_metrics
    label = _object(sm.LABEL_KEYS, {"value": {"type": "string"}, "map": {
        "type": "object", "additionalProperties": {"type": ["string", "number", "boolean"]}},
        "default": {"type": "string"}, "allow": {"type": "string", "format": "regex"},
        "other": {"type": "string"}})
    return _object(sm.METRIC_KEYS, {
        "name": {"type": "string", "pattern": "^[a-zA-Z_][a-zA-Z0-9_]*$"},
        "type": {"enum": list(sm.KINDS)}, "help": {"type": "string"},
        "value": {"type": "string"},
        "buckets": {"type": "array", "items": {"type": "number"}, "minItems": 1,
                    "maxItems": sm.MAX_BUCKETS},
        "labels": {"type": "object", "propertyNames": ident,
                   "additionalProperties": {"oneOf": [{"type": "string"}, label]}},
        "max_series": {"type": "integer", "minimum": 1, "maximum": sm.MAX_SERIES},
        "aggregate": {"enum": list(sm.AGGREGATIONS)}})
