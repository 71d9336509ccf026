"""The ``metrics:`` of a probe in ``probes.yaml``: counters, gauges and histograms made
from the probe's values, with labels passed through small decoders. Validates names
and references within the spec; knows nothing of binaries (types are checked by
``resolve``)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import yaml

from agent import numbers
from agent.config.decoders import LabelRule, label_name_problem, metric_name_problem, regex_problem
from agent.config.reader import Key, Mark, Reader
from agent.errors import nearest

KINDS = ("counter", "gauge", "histogram")
AGGREGATIONS = ("kernel", "events")
DEFAULT_SERIES = 1000  # label sets per metric before new ones fold into the overflow series
MAX_SERIES = 1_000_000
MAX_BUCKETS = 32

METRIC_KEYS = (
    Key("name", "str", "the metric's name as exported (counters end in _total)",
        required=True),
    Key("type", "str", "counter (calls, or the sum of an integer value), gauge (the last "
        "value) or histogram (of a value)", required=True),
    Key("help", "str", "the HELP text"),
    Key("value", "str", "the probe value it is made of (gauge, histogram; a counter "
        "without one counts calls)"),
    Key("buckets", "list", f"histogram: upper bounds, increasing (at most {MAX_BUCKETS})"),
    Key("labels", "map", "label name -> a probe value, or {value, map, default, allow, "
        "other}"),
    Key("max_series", "int", f"label sets kept before new ones fold into one overflow "
        f"series (default {DEFAULT_SERIES})"),
    Key("aggregate", "str", "kernel (default: in BPF maps, read at scrape time) or events "
        "(every hit through the ring buffer, aggregated in noop)"),
)
LABEL_KEYS = (
    Key("value", "str", "the probe value the label is read from", required=True),
    Key("map", "map", "raw value -> label value"),
    Key("default", "str", "with map: the label value for raw values not in the map "
        "(default: the raw value)"),
    Key("allow", "str", "a regular expression; values it does not match whole become "
        "'other'"),
    Key("other", "str", "the label value for values allow rejects (default 'other')"),
)


@dataclass(frozen=True, slots=True)
class Label:
    rule: LabelRule
    mark: Mark


@dataclass(frozen=True, slots=True)
class Metric:
    name: str
    kind: str  # counter, gauge, histogram
    help: str
    value: str | None  # a probe value's name
    buckets: tuple[float, ...]
    labels: tuple[Label, ...]
    max_series: int
    aggregate: str
    mark: Mark
    value_mark: Mark


def read(r: Reader, node: yaml.Node, values: dict[str, Mark]) -> Iterator[Metric]:
    """The metrics of one probe whose values (name -> mark) are ``values``."""
    if not isinstance(node, yaml.SequenceNode):
        r.error(node, "metrics must be a list")
        return
    for mnode in node.value:
        metric = _metric(r, mnode, values)
        if metric is not None:
            yield metric


def _str(r: Reader, fields: dict[str, tuple[yaml.Node, yaml.Node]], key: str,
         default: str | None = None) -> str | None:
    if key not in fields:
        return default
    got = r.typed(fields[key][1], str, key)
    return got if isinstance(got, str) else None


def _metric(r: Reader, node: yaml.Node, values: dict[str, Mark]) -> Metric | None:
    fields = r.mapping(node, "metric", METRIC_KEYS)
    if fields is None or "name" not in fields or "type" not in fields:
        return None
    name, kind = _str(r, fields, "name"), _str(r, fields, "type")
    if kind is not None and kind not in KINDS:
        r.error(fields["type"][1], f"unknown metric type {kind!r}", "one of " + ", ".join(KINDS))
        kind = None
    if name is not None and kind is not None:
        problem = metric_name_problem(name, kind)
        if problem:
            r.error(fields["name"][1], f"metric {name!r}: {problem}")
    value = _str(r, fields, "value")
    vnode = fields["value"][1] if "value" in fields else node
    if value is not None:
        value = _reference(r, vnode, value, values, f"metric {name}")
    elif kind in ("gauge", "histogram") and "value" not in fields:
        r.error(node, f"metric {name}: a {kind} needs 'value'", "name one of the probe's "
                "values")
    buckets = _buckets(r, fields, kind, name)
    labels = tuple(_labels(r, fields["labels"][1], values)) if "labels" in fields else ()
    series = DEFAULT_SERIES
    if "max_series" in fields:
        got = r.typed(fields["max_series"][1], int, "max_series")
        if isinstance(got, int) and not 1 <= got <= MAX_SERIES:
            r.error(fields["max_series"][1], f"max_series must be 1..{MAX_SERIES}")
        elif isinstance(got, int):
            series = got
    aggregate = _str(r, fields, "aggregate", "kernel")
    if aggregate is not None and aggregate not in AGGREGATIONS:
        r.error(fields["aggregate"][1], f"unknown aggregate {aggregate!r}",
                "kernel or events")
    if None in (name, kind, aggregate) or (value is None and kind != "counter"):
        return None
    return Metric(str(name), str(kind), _str(r, fields, "help", "") or "", value, buckets,
                  labels, series, str(aggregate), r.mark(node), r.mark(vnode))


def _reference(r: Reader, node: yaml.Node, name: str, values: dict[str, Mark],
               what: str) -> str | None:
    if name == "$duration":
        r.error(node, f"{what}: name one of the probe's values, not $duration itself",
                "read it under values (took: $duration, in a probe with at: exit) and "
                "name that value here")
        return None
    if name not in values:
        near = nearest(name, list(values), 1)
        r.error(node, f"{what}: no value {name!r} in this probe",
                f"did you mean {near[0]!r}?" if near else
                "values: " + (", ".join(values) or "none; add them under values:"))
        return None
    return name


def _buckets(r: Reader, fields: dict[str, tuple[yaml.Node, yaml.Node]], kind: str | None,
             name: str | None) -> tuple[float, ...]:
    if "buckets" not in fields:
        if kind == "histogram":
            r.error(fields["type"][1], f"metric {name}: a histogram needs 'buckets'",
                    "e.g. buckets: [1, 10, 100]")
        return ()
    node = fields["buckets"][1]
    if kind != "histogram":
        r.error(node, f"metric {name}: buckets are for histograms")
        return ()
    raw = r.scalar(node) if isinstance(node, yaml.ScalarNode) else None
    items: list[Any] = []
    if isinstance(node, yaml.SequenceNode):
        items = [r.scalar(n) if isinstance(n, yaml.ScalarNode) else None for n in node.value]
    if raw is not None or not items or not all(
            isinstance(b, int | float) and not isinstance(b, bool) for b in items):
        why = next(((b, w) for b in items if isinstance(b, str)
                    and (w := numbers.odd(b)) is not None), None)
        r.error(node, f"metric {name}: buckets must be a list of numbers" + (
            f": {why[0]!r}: {why[1]}" if why is not None else ""))
        return ()
    try:
        bounds = tuple(float(b) for b in items)
    except OverflowError:
        r.error(node, f"metric {name}: a bucket is too large for a float64")
        return ()
    if len(bounds) > MAX_BUCKETS:
        r.error(node, f"metric {name}: at most {MAX_BUCKETS} buckets")
    elif any(b != b or abs(b) == float("inf") for b in bounds):
        r.error(node, f"metric {name}: buckets are finite numbers (+Inf is always added)")
    elif any(a >= b for a, b in itertools.pairwise(bounds)):
        r.error(node, f"metric {name}: buckets must increase")
    else:
        return bounds
    return ()


def _labels(r: Reader, node: yaml.Node, values: dict[str, Mark]) -> Iterator[Label]:
    for lname, (knode, vnode) in (r.mapping(node, "labels", None) or {}).items():
        problem = label_name_problem(lname)
        if problem:
            r.error(knode, f"label {lname!r}: {problem}")
            continue
        mapping: tuple[tuple[str, str], ...] = ()
        default = allow = None
        other = "other"
        if isinstance(vnode, yaml.MappingNode):
            fields = r.mapping(vnode, f"label {lname!r}", LABEL_KEYS) or {}
            if "value" not in fields:
                continue
            ref = _str(r, fields, "value")
            refnode = fields["value"][1]
            if "map" in fields:
                mapping = tuple(_map(r, fields["map"][1]))
            default = _str(r, fields, "default")
            if default is not None and "map" not in fields:
                r.error(fields["default"][1], f"label {lname!r}: default needs map")
            allow = _str(r, fields, "allow")
            if allow is not None:
                problem = regex_problem(allow)
                if problem:
                    r.error(fields["allow"][1], f"label {lname!r}: allow: {problem}")
            other = _str(r, fields, "other", "other") or "other"
        else:
            ref, refnode = r.typed(vnode, str, f"label {lname!r}"), vnode
        if not isinstance(ref, str):
            continue
        got = _reference(r, refnode, ref, values, f"label {lname}")
        if got is not None:
            yield Label(LabelRule(lname, got, mapping, allow, other, default), r.mark(knode))


def _map(r: Reader, node: yaml.Node) -> Iterator[tuple[str, str]]:
    for key, (_knode, vnode) in (r.mapping(node, "map", None) or {}).items():
        got = r.scalar(vnode) if isinstance(vnode, yaml.ScalarNode) else None
        if got is None or isinstance(got, dict | list):
            r.error(vnode, f"map: {key!r} must map to a label value")
            continue
        yield str(key), str(got).lower() if isinstance(got, bool) else str(got)
