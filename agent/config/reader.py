"""Reading a YAML spec node by node: where each part is in the file (``Mark``), the
problems found (``Problem``, ``SpecError``), the key tables a format is described by
(``Key``), and a ``Reader`` that collects every problem instead of stopping at the
first. Knows no spec format itself (``spec`` and ``spec_metrics`` do)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import yaml

from agent import numbers
from agent.errors import NoopError, nearest

IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
INVALID = object()  # a scalar that could not be constructed (already reported)
MERGE = "tag:yaml.org,2002:merge"  # the key << of a merge (YAML 1.1's merge key type)
MAX_DEPTH = 64  # mappings and lists nested in a spec at most


@dataclass(frozen=True, slots=True)
class Mark:
    """Where something is in the spec file (1-based line and column)."""

    file: str
    line: int
    col: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


@dataclass(frozen=True, slots=True)
class Problem:
    mark: Mark
    message: str
    hint: str = ""
    probe: str = ""

    def __str__(self) -> str:
        where = f"probe {self.probe}: " if self.probe else ""
        hint = f" ({self.hint})" if self.hint else ""
        return f"{self.mark}: {where}{self.message}{hint}"


class SpecError(NoopError):
    """One or more problems in a spec; printed one per line. Exit code 2."""

    exit_code = 2

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = tuple(problems)
        super().__init__("\n".join(map(str, problems)))

    def __str__(self) -> str:
        return self.message



@dataclass(frozen=True, slots=True)
class Key:
    name: str
    kind: str  # "str", "int", "map", "list", "value"
    doc: str
    required: bool = False



def too_deep(root: yaml.Node) -> yaml.Node | None:
    """The first node nested deeper than ``MAX_DEPTH`` (walked without recursion:
    aliases may make the tree a graph, each node is walked once)."""
    seen: set[int] = set()
    todo: list[tuple[yaml.Node, int]] = [(root, 0)]
    while todo:
        node, depth = todo.pop()
        if depth > MAX_DEPTH:
            return node
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            todo += [(n, depth + 1) for pair in node.value for n in pair]
        elif isinstance(node, yaml.SequenceNode):
            todo += [(n, depth + 1) for n in node.value]
    return None


class Reader:
    """Walks the composed YAML node tree, collecting problems instead of stopping."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.problems: list[Problem] = []
        self.probe = ""
        self._constructor = numbers.yaml_loader()("")

    def mark(self, node: yaml.Node) -> Mark:
        return Mark(self.path, node.start_mark.line + 1, node.start_mark.column + 1)

    def error(self, node: yaml.Node, message: str, hint: str = "") -> None:
        self.error_at(self.mark(node), message, hint)

    def error_at(self, mark: Mark, message: str, hint: str = "") -> None:
        self.problems.append(Problem(mark, message, hint, self.probe))

    def scalar(self, node: yaml.Node) -> Any:
        if node.tag.startswith("!") and not node.tag.startswith("!!"):
            self.error(node, f"unknown YAML tag {node.tag}",
                       "a spec takes plain values: leave the tag out")
            return INVALID
        try:
            return self._constructor.construct_object(node, deep=True)
        except (yaml.YAMLError, ValueError, TypeError) as exc:
            why = exc.problem if isinstance(exc, yaml.MarkedYAMLError) and exc.problem \
                else str(exc)
            self.error(node, f"cannot read this value ({node.tag}): "
                       f"{' '.join(str(why).split())}", "leave out YAML tags such as !!int")
            return INVALID

    def mapping(self, node: yaml.Node, what: str, keys: tuple[Key, ...] | None
                ) -> dict[str, tuple[yaml.Node, yaml.Node]] | None:
        """A mapping's items by key; unknown and duplicate keys are problems."""
        if not isinstance(node, yaml.MappingNode):
            self.error(node, f"{what} must be a mapping")
            return None
        out: dict[str, tuple[yaml.Node, yaml.Node]] = {}
        names = [k.name for k in keys] if keys is not None else []
        for knode, vnode in self._merged(node, what):
            key = knode.value if isinstance(knode, yaml.ScalarNode) else None
            if not isinstance(key, str) or not key:
                self.error(knode, f"{what}: keys must be names")
                continue
            if key in out:
                self.error(knode, f"{what}: key {key!r} given twice")
                continue
            if keys is not None and key not in names:
                near = nearest(key, names, 1)
                self.error(knode, f"{what}: unknown key {key!r}",
                           f"did you mean {near[0]!r}?" if near
                           else "expected one of " + ", ".join(names))
                continue
            out[key] = (knode, vnode)
        if keys is not None:
            for k in keys:
                if k.required and k.name not in out:
                    self.error(node, f"{what}: missing key {k.name!r}", k.doc)
        return out

    def _merged(self, node: yaml.MappingNode, what: str
                ) -> list[tuple[yaml.Node, yaml.Node]]:
        """A mapping's own items, then those its merge keys (``<<: *defaults``, or a
        list of them: the first given wins) bring that it does not set itself; each item
        keeps its own place in the file, for the messages about it."""
        own: list[tuple[yaml.Node, yaml.Node]] = []
        merged: list[tuple[yaml.Node, yaml.Node]] = []
        for knode, vnode in node.value:
            if knode.tag != MERGE:
                own.append((knode, vnode))
                continue
            sources = vnode.value if isinstance(vnode, yaml.SequenceNode) else [vnode]
            for source in sources:
                if not isinstance(source, yaml.MappingNode):
                    self.error(source, f"{what}: '<<' merges only mappings",
                               "give it an alias of a mapping (<<: *defaults)")
                    continue
                merged += self._merged(source, what)
        have = {k.value for k, _v in own if isinstance(k, yaml.ScalarNode)}
        for knode, vnode in merged:
            key = knode.value if isinstance(knode, yaml.ScalarNode) else None
            if key not in have:
                have.add(key)
                own.append((knode, vnode))
        return own

    def typed(self, node: yaml.Node, kind: type, what: str) -> Any:
        value = self.scalar(node) if isinstance(node, yaml.ScalarNode) else node
        if value is INVALID:
            return None
        why = numbers.odd(value) if kind is int and isinstance(value, str) else None
        if why is not None:  # 010, 1_000, 1:30, ٣: read as text, and why
            self.error(node, f"{what} must be an integer: {value!r}: {why}")
            return None
        if (kind is int and isinstance(value, bool)) or not isinstance(value, kind):
            self.error(node, f"{what} must be {'a string' if kind is str else 'an integer'}")
            return None
        return value


