"""Every number a user writes to noop — in a spec, a flag, a web config, an environment
variable — read by one parser: ASCII digits only, in decimal.

Python's ``int()`` and ``float()`` take any Unicode decimal digit (``int("٣") == 3``),
underscores between digits and spaces around them, and ``float()`` takes ``"nan"`` and
``"infinity"``; YAML 1.1 (pyyaml's SafeLoader) reads ``010`` as octal 8, ``1:30`` as
sexagesimal 90, ``1_000`` as 1000 and ``0x10`` as 16. None of these is read as a number
here: each is refused, naming the text and what is wrong with it. A spec's plain scalar
in one of those forms stays the text it is (a label value ``010`` is ``"010"``), and a
key that wants a number says why it is not one.
"""

from __future__ import annotations

import math
import re
import unicodedata
from functools import cache
from typing import Any

INTEGER = re.compile(r"[+-]?(?:0|[1-9][0-9]*)\Z")
DECIMAL = re.compile(r"[+-]?(?:(?:0|[1-9][0-9]*)(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\Z")
HEX = re.compile(r"0[xX][0-9a-fA-F]+\Z")


class NotANumber(ValueError):
    """Text that is not a number as noop reads them: the message names it and says
    why (a ValueError, so that the places that took ``int()``'s still catch it)."""


def why_not(text: str) -> str:
    """What keeps ``text`` from being a number noop reads."""
    for c in text:
        if not c.isascii() and (c.isdigit() or c.isnumeric() or c.isspace()):
            name = unicodedata.name(c, f"U+{ord(c):04X}")
            kind = "a space" if c.isspace() else "not an ASCII digit"
            return f"{c!r} ({name}) is {kind}: write numbers in ASCII digits 0-9"
    if text != text.strip():
        return "spaces around it: write the number alone"
    if not text:
        return "it is empty"
    if "_" in text and re.fullmatch(r"[+-]?[0-9_.eE+-]+", text):
        return "underscores are not read in numbers: write the digits alone"
    if re.fullmatch(r"[+-]?0[0-9]+", text):
        return f"a leading 0 is not read (YAML 1.1 reads {text} as octal): write " \
               f"{text.lstrip('+-').lstrip('0') or '0'}"
    if re.fullmatch(r"[+-]?[0-9]+(?::[0-5]?[0-9])+(?:\.[0-9]*)?", text):
        return "a sexagesimal number is not read (YAML 1.1 reads 1:30 as 90): write " \
               "it in decimal"
    if re.fullmatch(r"[+-]?0[xXoObB][0-9a-fA-F]+", text):
        return "write it in decimal"
    return GENERIC


GENERIC = "not a number in decimal digits"


def odd(text: str) -> str | None:
    """Why ``text``, which looks like a number, is not read as one (a non-ASCII digit,
    spaces, underscores, a leading 0, a sexagesimal or hex number); None for text that
    is a number or no number at all (a word: the caller's own message says enough)."""
    if INTEGER.match(text) or DECIMAL.match(text):
        return None
    why = why_not(text)
    return None if why == GENERIC else why


def integer(text: str, what: str = "a whole number", lo: int | None = None,
            hi: int | None = None) -> int:
    """``text`` as a whole number in [lo, hi]; NotANumber naming it otherwise."""
    if not isinstance(text, str) or not INTEGER.match(text):
        raise NotANumber(f"{text!r} is not {what}: {why_not(str(text))}")
    n = int(text)
    _bounded(text, n, what, lo, hi)
    return n


def decimal(text: str, what: str = "a number", lo: float | None = None,
            hi: float | None = None, above: bool = False) -> float:
    """``text`` as a finite number in [lo, hi] (``above``: more than ``lo``, not equal);
    NotANumber naming it otherwise."""
    if not isinstance(text, str) or not DECIMAL.match(text):
        raise NotANumber(f"{text!r} is not {what}: {why_not(str(text))}")
    x = float(text)
    if not math.isfinite(x):
        raise NotANumber(f"{text!r} is not {what}: it is too large")
    if above and lo is not None and not x > lo:
        raise NotANumber(f"{text!r} is not {what}: it must be more than {lo:g}")
    _bounded(text, x, what, None if above else lo, hi)
    return x


def address(text: str, what: str = "an address") -> int:
    """An address: 0x and hex digits, or decimal digits."""
    if isinstance(text, str) and HEX.match(text):
        return int(text, 16)
    try:
        return integer(text, what, 0)
    except NotANumber:
        raise NotANumber(f"{text!r} is not {what}: give 0x and hex digits") from None


def _bounded(text: str, x: float, what: str, lo: float | None, hi: float | None) -> None:
    if lo is not None and x < lo:
        raise NotANumber(f"{text!r} is not {what}: it must be at least {lo:g}")
    if hi is not None and x > hi:
        raise NotANumber(f"{text!r} is not {what}: it must be at most {hi:g}")


@cache
def yaml_loader() -> Any:
    """The YAML loader noop reads specs and web configs with (made at first use: yaml is
    not imported by a start that reads no YAML): SafeLoader with numbers in decimal only
    (a plain ``010``, ``1:30``, ``1_000`` or ``0x10`` is the text it is), an explicit
    ``!!int``/``!!float`` held to the same."""
    import yaml

    def construct_int(loader: Any, node: Any) -> int:
        text = str(loader.construct_scalar(node))
        try:
            return integer(text)
        except NotANumber as exc:
            raise yaml.constructor.ConstructorError(
                None, None, str(exc), node.start_mark) from None

    def construct_float(loader: Any, node: Any) -> float:
        text = str(loader.construct_scalar(node))
        if text.lower() in (".inf", "+.inf", "-.inf", ".nan"):
            return float(text.lower().replace(".", ""))
        try:
            return float(text) if DECIMAL.match(text) else decimal(text)
        except NotANumber as exc:
            raise yaml.constructor.ConstructorError(
                None, None, str(exc), node.start_mark) from None

    class StrictLoader(yaml.SafeLoader):
        pass

    # YAML 1.1's int and float resolvers replaced by decimal ones (YAML 1.2's core
    # schema, without a leading 0)
    StrictLoader.yaml_implicit_resolvers = {
        first: [(tag, rx) for tag, rx in resolvers
                if tag not in ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
    StrictLoader.add_implicit_resolver(
        "tag:yaml.org,2002:int", re.compile(r"^[-+]?(?:0|[1-9][0-9]*)$"),
        list("-+0123456789"))
    StrictLoader.add_implicit_resolver(
        "tag:yaml.org,2002:float",
        re.compile(r"^(?:[-+]?(?:(?:0|[1-9][0-9]*)(?:\.[0-9]*)?|\.[0-9]+)"
                   r"(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"),
        list("-+0123456789."))
    StrictLoader.add_constructor("tag:yaml.org,2002:int", construct_int)
    StrictLoader.add_constructor("tag:yaml.org,2002:float", construct_float)
    return StrictLoader
