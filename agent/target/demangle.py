"""Demangle Rust's legacy symbol names (``_ZN...17h<hash>E``) into ``crate::path::name``.

rustc still mangles a crate's own functions this way by default; the v0 scheme
(``_R...``) is left as is, and such functions are found through DWARF instead.
"""

from __future__ import annotations

import re

_ESCAPES = {"$LT$": "<", "$GT$": ">", "$RF$": "&", "$BP$": "*", "$C$": ",", "$SP$": "@",
            "$LP$": "(", "$RP$": ")", "$u20$": " ", "$u27$": "'", "$u5b$": "[",
            "$u5d$": "]", "$u7b$": "{", "$u7d$": "}", "$u7e$": "~", "$u3b$": ";",
            "$u2b$": "+", "$u22$": '"'}
_ESCAPE_RE = re.compile(r"\$(?:LT|GT|RF|BP|C|SP|LP|RP|u[0-9a-f]{2})\$")
_HASH_RE = re.compile(r"h[0-9a-f]{16}")


def demangle_rust_legacy(symbol: str) -> str | None:
    """``_ZN1m6shapes1P3get17h63cb5a0094254cadE`` -> ``m::shapes::P::get``; None otherwise."""
    if not symbol.startswith("_ZN") or not symbol.endswith("E"):
        return None
    pos, end = 3, len(symbol) - 1
    parts: list[str] = []
    while pos < end:
        m = re.match(r"\d+", symbol[pos:end])
        if m is None:
            return None
        n = int(m.group())
        pos += len(m.group())
        if n == 0 or pos + n > end:
            return None
        parts.append(symbol[pos:pos + n])
        pos += n
    if len(parts) < 2 or not _HASH_RE.fullmatch(parts[-1]):
        return None
    return "::".join(_unescape(p) for p in parts[:-1])


def _unescape(part: str) -> str:
    if part.startswith("_$"):
        part = part[1:]
    part = part.replace("..", "::")
    return _ESCAPE_RE.sub(lambda m: _ESCAPES.get(m.group(), m.group()), part)
