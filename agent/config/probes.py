"""Loading the probe spec: read ``probes.yaml``, validate it, and return the frozen
``Spec`` (``model``) that remembers where in the file each part came from.

Every problem in a file is collected and reported at once, each as
``file:line:col: probe NAME: message (hint)``. This module reads YAML only; it knows
nothing of binaries (that is ``resolve``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import yaml

from agent import files, numbers
from agent.config import metrics as spec_metrics
from agent.config.model import (
    AT,
    BUILTINS,
    CONTAINER_ID,
    DECODINGS,
    DEFAULT_MAX,
    EXIT_ONLY,
    MAX_INDEX,
    MAX_MAX,
    MAX_SITES_LIMIT,
    NAMED_BY,
    PID_MAX,
    POD_UID,
    SPEC_VERSION,
    Probe,
    Spec,
    Target,
    Value,
    share,
)
from agent.config.reader import IDENT as _IDENT
from agent.config.reader import MAX_DEPTH, Reader, too_deep
from agent.config.reader import Mark as Mark  # re-exported: spec.Mark, spec.Problem, ...
from agent.config.reader import Problem as Problem
from agent.config.reader import SpecError as SpecError
from agent.config.schema import PROBE_KEYS, TARGET_KEYS, TOP_KEYS, VALUE_KEYS
from agent.errors import NoopError, nearest


def load(path: str | Path) -> Spec:
    """Read and validate a spec file; raise SpecError listing every problem."""
    if not files.exists(path):
        raise NoopError(f"{path}: no such spec file",
                        "give --config the path of a probes.yaml")
    return parse(files.read_text(path, "spec"), str(path))


def parse(text: str, path: str = "<spec>") -> Spec:
    r = Reader(path)
    try:
        root = yaml.compose(text, Loader=numbers.yaml_loader())
    except RecursionError:  # the composer recurses once a level
        raise SpecError([Problem(Mark(path, 1, 1), "nested too deep to be a spec",
                                 f"a spec nests at most {MAX_DEPTH} levels")]) from None
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
    deep = too_deep(root) if root is not None else None
    if deep is not None:
        raise SpecError([Problem(r.mark(deep), "nested too deep to be a spec",
                                 f"a spec nests at most {MAX_DEPTH} levels")])
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
        named = [k for k in NAMED_BY if k in fields]
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
    r.probe = _probe_name(node)
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
        _exit_only(r, values)
    metrics = tuple(spec_metrics.read(r, fields["metrics"][1], {v.name: v.mark for v in values})
                    ) if "metrics" in fields else ()
    fnode = (fields.get("line") or fields.get("function") or fields.get("match")
             or (node, node))[1]
    signature = _signature(r, fields, match)
    max_sites = _max_sites(r, fields, match)
    budget = _budget(r, fields["budget"][1]) if "budget" in fields else None
    if name is None or target is None or (function is None and match is None
                                          and line is None):
        return None
    return Probe(name, target, function, match, values, r.mark(node), r.mark(fnode), metrics,
                 at or "entry", signature, max_sites, budget, line)


def _probe_name(node: yaml.Node) -> str:
    """The probe's name as written, for its problems' messages ('' without one)."""
    name = ""
    if isinstance(node, yaml.MappingNode):
        for knode, vnode in node.value:
            if getattr(knode, "value", None) == "name" and isinstance(vnode, yaml.ScalarNode):
                name = str(vnode.value)
    return name


def _exit_only(r: Reader, values: tuple[Value, ...]) -> None:
    """In a probe at entry: a problem for each value only an exit probe can read."""
    for v in values:
        if v.builtin in EXIT_ONLY or v.result or v.at == "exit":
            what = (f"${v.builtin}" if v.builtin in EXIT_ONLY else
                    f"the result {v.selector.split('.')[0]}" if v.result else "at: exit")
            r.error_at(v.mark, f"value {v.name!r}: {what} needs an exit probe",
                       "add at: exit to the probe")


def _signature(r: Reader, fields: dict[str, tuple[yaml.Node, yaml.Node]], match: str | None
               ) -> str | None:
    """A probe's signature: a Go function type, for one function (None without one, or,
    with a problem, when it is not one)."""
    signature = r.typed(fields["signature"][1], str, "signature") \
        if "signature" in fields else None
    if signature is not None and (match is not None or not signature.startswith("func(")):
        r.error(fields["signature"][1],
                "signature: needs function: and a Go function type" if match is None else
                "signature: is for one function, not a match: pattern",
                'write it as Go does: "func(o *main.Order, n int) (int, error)"')
        signature = None
    return signature


def _max_sites(r: Reader, fields: dict[str, tuple[yaml.Node, yaml.Node]], match: str | None
               ) -> int:
    """A match's max_sites (0: MAX_SITES, also when it is wrong, with a problem)."""
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
    return max_sites


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
    why = numbers.odd(number)
    if why is not None:
        r.error(node, f"line: {text!r}: {number!r} is not a line number: {why}",
                "e.g. line: main.go:73, or function: main.process with line: 73")
        return None
    if not numbers.INTEGER.match(number) or int(number) <= 0 or (sep and not head.strip()):
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


_PATH = (r"(~r[0-9]+|[A-Za-z_][A-Za-z0-9_]*)(\[[0-9]+\]|\.[A-Za-z_][A-Za-z0-9_]*|\.[0-9]+"
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
        elif (odd := next(((i, w) for i in re.findall(r"\[([^\]]*)\]|\.(?=[^A-Za-z_(])"
                                                  r"([^.\[]+)", selector)
                           for i in i if i and (w := numbers.odd(i)) is not None), None)):
            r.error(snode, f"value {name!r}: {odd[0]!r} in {selector!r} is not an index: "
                    f"{odd[1]}")
            continue
        elif not _SELECTOR.match(selector):
            r.error(snode, f"value {name!r}: {selector!r} is not a selector",
                    "write a parameter name followed by .field, .0, [index] and Go's "
                    ".(TYPE) steps (and .Error() last), or len(...) of one")
            continue
        elif any(int(i) > MAX_INDEX for i in re.findall(r"\[([0-9]+)\]|\.([0-9]+)", selector)
                 for i in i if i):
            r.error(snode, f"value {name!r}: an index in {selector!r} is past {MAX_INDEX}",
                    "no slice, array or tuple of a running program is that long")
            continue
        yield Value(name, selector, decode, max_len, r.mark(snode), at)


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
