"""Typed errors that the CLI turns into one line for the user (never a traceback)."""

from __future__ import annotations

from collections.abc import Iterable


class NoopError(Exception):
    """An error caused by the user's input or environment, with a hint for the fix."""

    exit_code = 1

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message} ({self.hint})" if self.hint else self.message


class BinaryError(NoopError):
    """The binary cannot be used: missing, not ELF, wrong architecture, unreadable."""


class NoDebugInfo(BinaryError):
    """The binary carries no DWARF (stripped, or built with -ldflags=-w / -s)."""


class NotFound(NoopError):
    """A name (type, function) does not exist in the binary."""

    def __init__(self, what: str, name: str, candidates: Iterable[str] = ()) -> None:
        super().__init__(f"{what} {name!r} not found")
        self._name = name
        self._candidates = candidates
        self._near: tuple[str, ...] | None = None

    @property
    def suggestions(self) -> tuple[str, ...]:
        """The names closest to the one not found: worked out only when asked (a
        caller that expects the miss never pays for comparing every name)."""
        if self._near is None:
            self._near = tuple(nearest(self._name, self._candidates))
        return self._near

    @property  # NoopError's plain attribute, computed here
    def hint(self) -> str:
        near = self.suggestions
        return "did you mean " + ", ".join(near) + "?" if near else ""

    @hint.setter
    def hint(self, value: str) -> None:
        pass  # NoopError's __init__ sets it; the suggestions make it


def nearest(name: str, candidates: Iterable[str], limit: int = 3) -> list[str]:
    """Names closest to ``name``: first those it is a path-less suffix of (the user often
    omits the package path), then the compiler's renamed copies of it (``tally.isra.0``),
    then the closest by spelling."""
    import difflib  # only on the error path: keeps the warm path's start-up short

    pool = list(dict.fromkeys(candidates))
    if not pool:
        return []
    wanted = name.strip()
    suffix = sorted((c for c in pool if c != wanted and c.endswith(wanted)
                     and c[-len(wanted) - 1] in "/.:"), key=len)
    clones = sorted(c for c in pool if c.startswith(wanted + "."))
    close = difflib.get_close_matches(wanted, pool, n=limit, cutoff=0.6)
    return list(dict.fromkeys([*suffix, *clones, *close]))[:limit]
