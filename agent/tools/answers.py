"""The shapes of the API hunt's answers (``noop funcs``, ``struct``, ``vars``, ``lines``):
what ``inspect`` computes and caches and ``render`` reads. A cached answer of any other
shape is computed again (``cache.check``; a key not named here is refused)."""

from __future__ import annotations

from typing import Any, TypedDict


class _Memory(TypedDict):
    reg: str
    offset: int


class _PieceParts(TypedDict, total=False):
    memory: _Memory
    reg: str
    add: int
    stack: int
    optimized_out: bool


class _Piece(_PieceParts):
    """One piece of a location (``Piece.to_json``)."""

    size: int


class _Noted(TypedDict, total=False):
    note: str


class _Var(_Noted):
    name: str
    type: str
    size: int
    location: list[_Piece] | None
    source: str


class _Vars(_Noted):
    function: str
    address: int
    file_offset: int
    language: str
    abi: str
    go_version: str | None
    params: list[_Var]
    results: list[_Var]
    debug: str


class _MemberParts(TypedDict, total=False):
    discriminant: bool
    discr_value: int


class _Member(_MemberParts):
    name: str
    type: str
    offset: int
    size: int


class _Bitfield(_Member):
    bit_offset: int  # render reads it whenever bit_size is there
    bit_size: int


class _Struct(TypedDict):
    name: str
    kind: str
    language: str
    size: int
    members: list[_Member | _Bitfield]
    debug: str


class _FuncParts(TypedDict, total=False):
    only_inlined: bool


class _Func(_FuncParts):
    name: str
    address: int
    size: int
    inlined: int


class _LineSite(TypedDict):
    address: int


_LineSiteIn = TypedDict("_LineSiteIn", {"address": int, "in": str})


class _Line(TypedDict):
    file: str
    line: int
    sites: list[_LineSite | _LineSiteIn]
    inlines: list[str]


class _Lines(TypedDict):
    function: str
    file: str
    copies: int
    out_of_line: bool
    lines: list[_Line]


class _LineVar(_Noted):
    name: str
    kind: str
    type: str
    size: int
    location: list[_Piece] | None


class _IntoParts(TypedDict, total=False):
    inlined_into: str


class _Counted(_IntoParts, total=False):
    counts: str  # a line probe counts passes here, and why
    statement: bool  # False: not a statement of the line, the jump into one


class _LineVarsSite(_Counted):
    address: int
    file_offset: int
    file: str
    line: int
    function: str
    vars: list[_LineVar]


class _Refused(TypedDict, total=False):
    refused: str  # why a line probe here is refused


class _LineVars(_Refused):
    line: str
    sites: list[_LineVarsSite]
    debug: str


SHAPES: dict[str, Any] = {"struct": _Struct, "vars": _Vars, "funcs": list[_Func],
                          "lines": _Lines, "line-vars": _LineVars}
