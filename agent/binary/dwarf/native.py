"""The walk of a unit, and the loops over what it kept, in C (``_walk.c``): built with
noop where a C compiler was (pyproject.toml), else the same code runs in Python.
``BUILT`` says whether it is here."""

from __future__ import annotations

try:
    from agent.binary.dwarf._walk import (
        codes,
        fold,
        group,
        origins,
        qualify,
        referring,
        refers,
        walk,
    )
except ImportError:  # pragma: no cover - built without a compiler
    BUILT = False
else:
    BUILT = True

__all__ = ["BUILT", "codes", "fold", "group", "origins", "qualify", "referring", "refers",
           "walk"]
