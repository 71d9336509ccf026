"""Go function types as a spec writes them: ``func(o *main.Order, n int) (int, error)``,
parameters named or not (named ones may share a type: ``a, b int``)."""

from __future__ import annotations

import re

from agent.errors import NoopError

_NAME = re.compile(r"^[A-Za-z_]\w*$")
_NAMED = re.compile(r"^([A-Za-z_]\w*)\s+(\S.*)$")
_KEYWORDS = frozenset({"chan", "func", "interface", "map", "struct"})

Params = list[tuple[str | None, str]]


def parse(text: str, where: str) -> tuple[Params, Params]:
    """(params, results) of the Go function type ``text``; each (name or None, type)."""
    text = text.strip()
    if not text.startswith("func("):
        raise _bad(where, text, "it does not start with func(")
    end = _closing(text, 4, where)
    params = _list(text[5:end], where, text)
    rest = text[end + 1:].strip()
    if not rest:
        results: Params = []
    elif rest.startswith("("):
        close = _closing(rest, 0, where)
        if rest[close + 1:].strip():
            raise _bad(where, text, f"{rest[close + 1:].strip()!r} after the results")
        results = _list(rest[1:close], where, text)
    else:
        results = [(None, rest)]
    return params, results


def _closing(text: str, start: int, where: str) -> int:
    depth = 0
    for i in range(start, len(text)):
        if text[i] in "([{":
            depth += 1
        elif text[i] in ")]}":
            depth -= 1
            if depth == 0:
                return i
    raise _bad(where, text, "its brackets do not close")


def _list(body: str, where: str, text: str) -> Params:
    items, depth, start = [], 0, 0
    for i, c in enumerate(body):
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == "," and depth == 0:
            items.append(body[start:i].strip())
            start = i + 1
    if body.strip():
        items.append(body[start:].strip())
    if any(not i for i in items):
        raise _bad(where, text, "an empty parameter")
    named = [m for i in items if (m := _NAMED.match(i)) and m[1] not in _KEYWORDS]
    if not named:
        return [(None, i) for i in items]
    # Named parameters: a bare name shares the type of the next named one (a, b int).
    out: Params = []
    pending: list[str] = []
    for item in items:
        m = _NAMED.match(item)
        if m is not None and m[1] not in _KEYWORDS:
            out += [(p, m[2].strip()) for p in pending] + [(m[1], m[2].strip())]
            pending = []
        elif _NAME.match(item):
            pending.append(item)
        else:
            raise _bad(where, text, f"{item!r} has no name where the others have one")
    if pending:
        raise _bad(where, text, f"{', '.join(pending)} has no type")
    return out


def _bad(where: str, text: str, why: str) -> NoopError:
    return NoopError(f"signature of {where}: {text!r} is not a Go function type: {why}",
                     'write it as Go does: "func(o *main.Order, n int) (int, error)"')
