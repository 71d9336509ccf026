"""Reading a YAML spec node by node: where each part is in the file (``Mark``), the
problems found (``Problem``, ``SpecError``), the key tables a format is described by
(``Key``), and a ``Reader`` that collects every problem instead of stopping at the
first. Knows no spec format itself (``spec`` and ``spec_metrics`` do)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import yaml

from agent.errors import NoopError, nearest

IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
INVALID = object()  # a scalar that could not be constructed (already reported)


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



class Reader:
    """Walks the composed YAML node tree, collecting problems instead of stopping."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.problems: list[Problem] = []
        self.probe = ""
        self._constructor = yaml.SafeLoader("")

    def mark(self, node: yaml.Node) -> Mark:
        return Mark(self.path, node.start_mark.line + 1, node.start_mark.column + 1)

    def error(self, node: yaml.Node, message: str, hint: str = "") -> None:
        self.error_at(self.mark(node), message, hint)

    def error_at(self, mark: Mark, message: str, hint: str = "") -> None:
        self.problems.append(Problem(mark, message, hint, self.probe))

    def scalar(self, node: yaml.Node) -> Any:
        try:
            return self._constructor.construct_object(node, deep=True)
        except (yaml.YAMLError, ValueError, TypeError) as exc:
            self.error(node, f"cannot read this value ({node.tag}): {exc}",
                       "leave out YAML tags such as !!int")
            return INVALID

    def mapping(self, node: yaml.Node, what: str, keys: tuple[Key, ...] | None
                ) -> dict[str, tuple[yaml.Node, yaml.Node]] | None:
        """A mapping's items by key; unknown and duplicate keys are problems."""
        if not isinstance(node, yaml.MappingNode):
            self.error(node, f"{what} must be a mapping")
            return None
        out: dict[str, tuple[yaml.Node, yaml.Node]] = {}
        names = [k.name for k in keys] if keys is not None else []
        for knode, vnode in node.value:
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

    def typed(self, node: yaml.Node, kind: type, what: str) -> Any:
        value = self.scalar(node) if isinstance(node, yaml.ScalarNode) else node
        if value is INVALID:
            return None
        if (kind is int and isinstance(value, bool)) or not isinstance(value, kind):
            self.error(node, f"{what} must be {'a string' if kind is str else 'an integer'}")
            return None
        return value


