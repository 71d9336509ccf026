"""What of a stripped Go program's metadata a reader needs made into DWARF."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Scope:
    """What of a stripped Go program's metadata a reader needs as DWARF: the functions
    ``functions`` names, with every function that inlines one of them, and the types
    ``types`` names (whole names), with the types those functions and types refer to.
    A function's name ending in a dot (``pkg.``) stands for every name it begins, as
    one ending in ``*`` does (without the star). DWARF made for a scope answers for
    these alone; ``None`` where a scope is asked for is the whole program."""

    functions: tuple[str, ...] = ()
    types: tuple[str, ...] = ()
    _whole: frozenset[str] = field(init=False, repr=False, compare=False)
    _begins: tuple[str, ...] = field(init=False, repr=False, compare=False)

    @property
    def key(self) -> str:
        text = json.dumps([sorted(set(self.functions)), sorted(set(self.types))])
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def wants_function(self, name: str) -> bool:
        return name in self._whole or name.startswith(self._begins)

    def __post_init__(self) -> None:  # asked of every function of a program
        object.__setattr__(self, "_whole", frozenset(self.functions))
        object.__setattr__(self, "_begins", tuple(
            n[:-1] if n.endswith("*") else n for n in self.functions if n.endswith((".", "*"))))


def of_pattern(pattern: str | None) -> Scope | None:
    """The scope of the functions a shell-style ``pattern`` can match: those its
    literal beginning begins (None, the whole program, when it has none)."""
    wild = re.search(r"[*?[]", pattern or "")
    literal = pattern[:wild.start()] if pattern and wild else pattern
    if not literal:
        return None
    return Scope(functions=(literal if literal == pattern else literal + "*",))
