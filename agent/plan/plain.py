"""Plan data as plain JSON and back, for the cache: every dataclass of the plan is made
of strings, numbers, flags, tuples, optional values and other such dataclasses, so
one walk over the field types writes and reads all of them. A value that does not fit
its type is a ValueError: the cache then resolves again."""

from __future__ import annotations

import dataclasses
import types
import typing
from functools import cache
from typing import Any


def dump(obj: Any) -> Any:
    """``obj`` as JSON-ready lists, dicts, strings, numbers, booleans and None."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: dump(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (tuple, list)):
        return [dump(x) for x in obj]
    if isinstance(obj, dict):
        return {str(k): dump(v) for k, v in obj.items()}
    if obj is None or isinstance(obj, (str, int, float, bool)):
        return obj
    raise ValueError(f"cannot keep a {type(obj).__name__} in the cache")


def load(kind: Any, data: Any) -> Any:
    """The value of type ``kind`` that ``dump`` made ``data`` of."""
    origin = typing.get_origin(kind)
    if origin is typing.Literal:  # a kind: one of the names the plan's types allow
        if isinstance(data, str) and data in typing.get_args(kind):
            return data
        raise ValueError(f"{data!r} is none of {typing.get_args(kind)}")
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(kind)
        if data is None and type(None) in options:
            return None
        for option in options:
            if option is type(None):
                continue
            try:
                return load(option, data)
            except (ValueError, TypeError, KeyError):
                continue
        raise ValueError(f"{data!r} is none of {kind}")
    if origin is tuple:
        args = typing.get_args(kind)
        if not isinstance(data, list):
            raise ValueError(f"{data!r} is not a list")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(load(args[0], x) for x in data)
        if len(args) != len(data):
            raise ValueError(f"{data!r} does not have {len(args)} items")
        return tuple(load(a, x) for a, x in zip(args, data, strict=True))
    if origin is dict:
        key, value = typing.get_args(kind)
        if not isinstance(data, dict):
            raise ValueError(f"{data!r} is not a mapping")
        return {load(key, k): load(value, v) for k, v in data.items()}
    if isinstance(kind, type) and dataclasses.is_dataclass(kind):
        if not isinstance(data, dict):
            raise ValueError(f"{data!r} is not a {kind.__name__}")
        hints = _hints(kind)
        fields = [f for f in dataclasses.fields(kind) if f.init]
        missing = [f.name for f in fields if f.name not in data]
        if missing:
            raise ValueError(f"a {kind.__name__} without {', '.join(missing)}")
        return kind(**{f.name: load(hints[f.name], data[f.name]) for f in fields})
    if kind is float and isinstance(data, (int, float)) and not isinstance(data, bool):
        return float(data)
    if kind in (str, int, bool) and type(data) is kind:
        return data
    if kind is Any:
        return data
    raise ValueError(f"{data!r} is not a {kind}")


@cache
def _hints(kind: type) -> dict[str, Any]:
    return typing.get_type_hints(kind)
