"""Label decoders: a value read by a probe to a label value; metric and label name checks."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from functools import lru_cache

UNREAD = "unread"  # the text of a value the probe could not read (a fault, or absent)
KINDS = ("counter", "gauge", "histogram")
RESERVED_SUFFIXES = ("_total", "_count", "_sum", "_bucket", "_created")
RESERVED_LABELS = ("le", "quantile")
_NOT_NAME = re.compile(r"[^A-Za-z0-9_]")
_SURROGATE = re.compile("[\ud800-\udfff]")


@dataclass(frozen=True, slots=True)
class LabelRule:
    """Label ``name`` from probe value ``value``: its ``text``, then ``map`` (a miss becomes
    ``default``, or stays when that is None; an empty map maps nothing), then ``allow``
    (a value the regular expression does not match in full becomes ``other``)."""

    name: str
    value: str
    map: tuple[tuple[str, str], ...] = ()
    allow: str | None = None
    other: str = "other"
    default: str | None = None


def text(raw: object) -> str:
    """``raw`` as label text: None (not read) is ``UNREAD``; a bool ``true``/``false``;
    an int decimal; a float as Prometheus writes it (``go_float``); bytes lowercase hex
    without ``0x``; a str as it is, made valid UTF-8 (``clean``)."""
    if raw is None:
        return UNREAD
    if isinstance(raw, bool):
        return "true" if raw else "false"
    if isinstance(raw, int):
        return str(int(raw))
    if isinstance(raw, float):
        return go_float(raw)
    if isinstance(raw, str):
        return clean(raw)
    if isinstance(raw, bytes | bytearray | memoryview):
        return bytes(raw).hex()
    raise TypeError(f"no label text for a {type(raw).__name__}")


def go_float(x: float) -> str:
    """``x`` as Go's ``strconv.FormatFloat(x, 'g', -1, 64)`` writes it, as Prometheus
    does: the shortest digits that read back as ``x``, an exponent (``1e+06``, ``1e-05``)
    from 1e6 up and below 1e-4; ``NaN``, ``+Inf``, ``-Inf``."""
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "+Inf" if x > 0 else "-Inf"
    minus, ds, point = _digits(x)
    if not -4 <= point - 1 < 6:
        return f"{minus}{ds[0]}{'.' if ds[1:] else ''}{ds[1:]}e{point - 1:+03d}"
    return _positional(minus, ds, point)


def _digits(x: float) -> tuple[str, str, int]:
    """A finite ``x``'s sign ("-" or ""), its shortest digits that read back as ``x``
    (Python's repr, Go's and Rust's shortest formats alike), and how many of them come
    before the decimal point (0 or less: zeros come first)."""
    sign, digits, exponent = Decimal(repr(x)).normalize().as_tuple()
    assert isinstance(exponent, int)  # x is finite
    ds = "".join(map(str, digits))
    return "-" if sign else "", ds, len(ds) + exponent


def _positional(minus: str, ds: str, point: int) -> str:
    if point <= 0:
        return f"{minus}0.{'0' * -point}{ds}"
    whole, frac = ds[:point].ljust(point, "0"), ds[point:]
    return f"{minus}{whole}{'.' if frac else ''}{frac}"


def rust_float(x: float) -> str:
    """``x`` as Rust's ``f64`` Display writes it (the prometheus crate's bucket bounds):
    the shortest digits that read back as ``x``, never an exponent (``1e21`` is
    ``1000000000000000000000``, ``1e-7`` is ``0.0000001``); ``NaN``, ``inf``, ``-inf``."""
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return _positional(*_digits(x))


def clean(s: str) -> str:
    """``s`` as valid UTF-8 for a label value: NUL characters dropped, lone surrogates
    (bytes that were not UTF-8, kept by ``surrogateescape``) replaced by U+FFFD."""
    return _SURROGATE.sub("\ufffd", s.replace("\x00", ""))


@lru_cache(maxsize=1024)
def compile_rule(rule: LabelRule) -> Callable[[object], str]:
    """The decoder of ``rule``, built once per rule: its pattern is compiled here, never
    while decoding. Check ``rule_problems`` first: an invalid ``allow`` raises ValueError."""
    if rule.allow is not None and (problem := regex_problem(rule.allow)):
        raise ValueError(problem)
    allow = None if rule.allow is None else re.compile(rule.allow).fullmatch
    table = {clean(k): clean(v) for k, v in rule.map}
    default = None if rule.default is None else clean(rule.default)
    other = clean(rule.other)

    def decode(raw: object) -> str:
        value = text(raw)
        if table:
            value = table.get(value, value if default is None else default)
        return other if allow is not None and allow(value) is None else value

    return decode


def label_value(rule: LabelRule, raw: object) -> str:
    """The label value ``rule`` gives the raw value ``raw``: text, then map, then allow."""
    return compile_rule(rule)(raw)


def _shape_problem(what: str, name: str) -> str | None:
    if not name:
        return f"{what} is empty"
    if bad := _NOT_NAME.search(name):
        return f"{what} {name!r} has {bad.group()!r} (use ASCII letters, digits and '_')"
    if name[0].isdigit():
        return f"{what} {name!r} starts with a digit (start with a letter or '_')"
    if name.startswith("__"):
        return f"{what} {name!r} starts with '__' (reserved for Prometheus' own names)"
    return None


def metric_name_problem(name: str, kind: str) -> str | None:
    """Why ``name`` cannot name a user metric of ``kind`` (one of ``KINDS``), as
    ``message (hint)``; None when it can."""
    if kind not in KINDS:
        return f"unknown metric kind {kind!r} (use one of: {', '.join(KINDS)})"
    if ":" in name:
        return f"metric name {name!r} has ':' (colons are for recording rules; use '_')"
    if problem := _shape_problem("metric name", name):
        return problem
    if name.startswith("noop_"):
        return f"metric name {name!r} starts with 'noop_' (reserved for noop's own metrics)"
    if kind == "counter":
        if name.endswith("_total") and name != "_total":
            return None
        stem = name.removesuffix("_total") or "hits"
        return f"counter {name!r} must be a name followed by '_total' (e.g. {stem}_total)"
    suffix = next((s for s in RESERVED_SUFFIXES if name.endswith(s)), None)
    if suffix == "_total":
        return f"{kind} {name!r} ends in '_total' (only counters do; drop the suffix)"
    if suffix:
        return (f"{kind} {name!r} ends in {suffix!r} (reserved for the series of histograms"
                " and counters; drop the suffix)")
    return None


def label_name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a label, as ``message (hint)``; None when it can."""
    if problem := _shape_problem("label name", name):
        return problem
    if name in RESERVED_LABELS:
        return (f"label name {name!r} is reserved (histograms use 'le', summaries"
                " 'quantile'; choose another)")
    return None


def regex_problem(pattern: str) -> str | None:
    """Why ``pattern`` is not a valid regular expression, in one line; None when it is."""
    try:
        re.compile(pattern)
    except (re.error, OverflowError, RecursionError) as e:
        return f"invalid regular expression {pattern!r}: {' '.join(str(e).split())}"
    return None


def rule_problems(rule: LabelRule) -> tuple[str, ...]:
    """Every problem of ``rule`` that would stop it from decoding or exporting."""
    found = (label_name_problem(rule.name),
             None if rule.allow is None else regex_problem(rule.allow))
    return tuple(p for p in found if p)
