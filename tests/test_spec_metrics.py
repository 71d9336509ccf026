"""The ``metrics:`` of a probe (agent.spec_metrics): parsing, every problem with the
file:line:col it blames, the JSON Schema, and the checks made against a binary's types
(agent.resolve).

Error lines are checked whole, as the user reads them.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent.config import metrics as spec_metrics
from agent.config import probes as spec
from agent.config.decoders import LabelRule
from agent.config.metrics import Label, Metric
from agent.config.schema import json_schema
from agent.plan import keys, resolve
from agent.plan.model import Column, MetricPlan

F = "p.yaml"  # the path every parsed text is reported under
M = spec.Mark

# ---------------------------------------------------------------------------------------
# A good metrics section.

VALID = """\
targets:
  t: {binary: /x}
probes:
  - name: order
    function: main.placeOrder
    values:
      id: o.ID
      who: o.Customer
      qty: o.Items[0].Qty
    metrics:
      - name: orders_total
        type: counter
        help: Orders placed.
        labels:
          customer: who
      - name: order_qty
        type: histogram
        value: qty
        buckets: [1, 2.5, 10]
        labels:
          tier:
            value: who
            map: {acme: gold, globex: silver, 7: 7}
            default: bronze
          shape:
            value: who
            allow: '[a-z]+'
            other: odd
        max_series: 50
        aggregate: events
      - name: last_order_id
        type: gauge
        value: id
      - name: items_total
        type: counter
        value: qty
"""


def test_parse_metrics() -> None:
    (probe,) = spec.parse(VALID, F).probes
    assert probe.metrics == (
        Metric("orders_total", "counter", "Orders placed.", None, (),
               (Label(LabelRule("customer", "who"), M(F, 15, 11)),),
               1000, "kernel", M(F, 11, 9), M(F, 11, 9)),
        Metric("order_qty", "histogram", "", "qty", (1.0, 2.5, 10.0),
               (Label(LabelRule("tier", "who", (("acme", "gold"), ("globex", "silver"),
                                                ("7", "7")), None, "other", "bronze"),
                      M(F, 21, 11)),
                Label(LabelRule("shape", "who", (), "[a-z]+", "odd", None), M(F, 25, 11))),
               50, "events", M(F, 16, 9), M(F, 18, 16)),
        Metric("last_order_id", "gauge", "", "id", (), (), 1000, "kernel",
               M(F, 31, 9), M(F, 33, 16)),
        Metric("items_total", "counter", "", "qty", (), (), 1000, "kernel",
               M(F, 34, 9), M(F, 36, 16)),
    )


def test_parsed_metric_fields_have_their_types() -> None:
    hist = spec.parse(VALID, F).probes[0].metrics[1]
    assert all(type(b) is float for b in hist.buckets)
    assert isinstance(hist.labels, tuple)
    assert hist.labels[0].rule.map == (("acme", "gold"), ("globex", "silver"), ("7", "7"))
    assert spec_metrics.DEFAULT_SERIES == 1000


def test_a_probe_without_metrics_has_none() -> None:
    text = "targets:\n  t: {binary: /x}\nprobes:\n  - {name: a, function: f}\n"
    assert spec.parse(text, F).probes[0].metrics == ()
    empty = text.replace("function: f}", "function: f, metrics: []}")
    assert spec.parse(empty, F).probes[0].metrics == ()


# ---------------------------------------------------------------------------------------
# Bad metrics: one line each, at the node to blame. Every metric below is on line 8 and
# its flow mapping opens at column 9.

HEAD = (
    "targets:\n"
    "  t: {binary: /x}\n"
    "probes:\n"
    "  - name: a\n"
    "    function: f\n"
    "    values: {id: o.ID, who: o.Customer, qty: o.Qty}\n"
    "    metrics:\n"
)
HINT_DURATION = ("(read it under values (took: $duration, in a probe with at: exit) and "
                 "name that value here)")
NEEDS_VALUE = "(name one of the probe's values)"


def _numbers(n: int) -> str:
    """0, 1, ... n-1, for a YAML list."""
    return ", ".join(map(str, range(n)))


def _bad(metric: str, expected: list[str], id: str) -> Any:
    return pytest.param(HEAD + "      - " + metric + "\n", expected, id=id)


BAD = [
    _bad("{name: a_total, type: counter, vaule: id}",
         [f"{F}:8:40: probe a: metric: unknown key 'vaule' (did you mean 'value'?)"],
         "unknown-key"),
    _bad("{name: a_total, type: countr}",
         [f"{F}:8:31: probe a: unknown metric type 'countr' (one of counter, gauge, "
          "histogram)"],
         "unknown-type"),
    _bad("{type: counter}",
         [f"{F}:8:9: probe a: metric: missing key 'name' (the metric's name as exported "
          "(counters end in _total))"],
         "missing-name"),
    _bad("5",
         [f"{F}:8:9: probe a: metric must be a mapping"],
         "metric-not-a-mapping"),
    _bad("{name: orders, type: counter}",
         [f"{F}:8:16: probe a: metric 'orders': counter 'orders' must be a name followed "
          "by '_total' (e.g. orders_total)"],
         "counter-without-total"),
    _bad("{name: g_total, type: gauge, value: id}",
         [f"{F}:8:16: probe a: metric 'g_total': gauge 'g_total' ends in '_total' (only "
          "counters do; drop the suffix)"],
         "gauge-with-total"),
    _bad("{name: g_count, type: gauge, value: id}",
         [f"{F}:8:16: probe a: metric 'g_count': gauge 'g_count' ends in '_count' "
          "(reserved for the series of histograms and counters; drop the suffix)"],
         "gauge-with-count"),
    _bad("{name: noop_x_total, type: counter}",
         [f"{F}:8:16: probe a: metric 'noop_x_total': metric name 'noop_x_total' starts "
          "with 'noop_' (reserved for noop's own metrics)"],
         "noop-prefix"),
    _bad("{name: 'a:b_total', type: counter}",
         [f"{F}:8:16: probe a: metric 'a:b_total': metric name 'a:b_total' has ':' "
          "(colons are for recording rules; use '_')"],
         "colon"),
    _bad("{name: g, type: gauge}",
         [f"{F}:8:9: probe a: metric g: a gauge needs 'value' {NEEDS_VALUE}"],
         "gauge-without-value"),
    _bad("{name: h, type: histogram, buckets: [1]}",
         [f"{F}:8:9: probe a: metric h: a histogram needs 'value' {NEEDS_VALUE}"],
         "histogram-without-value"),
    _bad("{name: h, type: histogram, value: id}",
         [f"{F}:8:25: probe a: metric h: a histogram needs 'buckets' (e.g. buckets: "
          "[1, 10, 100])"],
         "histogram-without-buckets"),
    _bad("{name: c_total, type: counter, buckets: [1, 2]}",
         [f"{F}:8:49: probe a: metric c_total: buckets are for histograms"],
         "buckets-on-a-counter"),
    _bad("{name: h, type: histogram, value: id, buckets: 5}",
         [f"{F}:8:56: probe a: metric h: buckets must be a list of numbers"],
         "buckets-not-a-list"),
    _bad("{name: h, type: histogram, value: id, buckets: [1, x]}",
         [f"{F}:8:56: probe a: metric h: buckets must be a list of numbers"],
         "buckets-with-a-string"),
    _bad("{name: h, type: histogram, value: id, buckets: [true]}",
         [f"{F}:8:56: probe a: metric h: buckets must be a list of numbers"],
         "buckets-with-a-bool"),
    _bad("{name: h, type: histogram, value: id, buckets: []}",
         [f"{F}:8:56: probe a: metric h: buckets must be a list of numbers"],
         "buckets-empty"),
    _bad("{name: h, type: histogram, value: id, buckets: [1, 1]}",
         [f"{F}:8:56: probe a: metric h: buckets must increase"],
         "buckets-equal"),
    _bad("{name: h, type: histogram, value: id, buckets: [5, 2]}",
         [f"{F}:8:56: probe a: metric h: buckets must increase"],
         "buckets-decreasing"),
    _bad("{name: h, type: histogram, value: id, buckets: [1, .inf]}",
         [f"{F}:8:56: probe a: metric h: buckets are finite numbers (+Inf is always added)"],
         "buckets-inf"),
    _bad("{name: h, type: histogram, value: id, buckets: [.nan]}",
         [f"{F}:8:56: probe a: metric h: buckets are finite numbers (+Inf is always added)"],
         "buckets-nan"),
    _bad(f"{{name: h, type: histogram, value: id, buckets: [{_numbers(33)}]}}",
         [f"{F}:8:56: probe a: metric h: at most 32 buckets"],
         "33-buckets"),
    _bad("{name: g, type: gauge, value: ids}",
         [f"{F}:8:39: probe a: metric g: no value 'ids' in this probe (did you mean 'id'?)"],
         "value-missing-near"),
    _bad("{name: g, type: gauge, value: zzzzz}",
         [f"{F}:8:39: probe a: metric g: no value 'zzzzz' in this probe (values: id, who, "
          "qty)"],
         "value-missing-far"),
    _bad("{name: h, type: histogram, value: $duration, buckets: [1]}",
         [f"{F}:8:43: probe a: metric h: name one of the probe's values, not $duration "
          f"itself {HINT_DURATION}"],
         "value-duration"),
    _bad("{name: c_total, type: counter, labels: {le: who}}",
         [f"{F}:8:49: probe a: label 'le': label name 'le' is reserved (histograms use "
          "'le', summaries 'quantile'; choose another)"],
         "label-le"),
    _bad("{name: c_total, type: counter, labels: {__x: who}}",
         [f"{F}:8:49: probe a: label '__x': label name '__x' starts with '__' (reserved "
          "for Prometheus' own names)"],
         "label-dunder"),
    _bad("{name: c_total, type: counter, labels: {w: whom}}",
         [f"{F}:8:52: probe a: label w: no value 'whom' in this probe (did you mean "
          "'who'?)"],
         "label-value-missing"),
    _bad("{name: c_total, type: counter, labels: {w: $duration}}",
         [f"{F}:8:52: probe a: label w: name one of the probe's values, not $duration "
          f"itself {HINT_DURATION}"],
         "label-duration"),
    _bad("{name: c_total, type: counter, labels: {w: {map: {a: b}}}}",
         [f"{F}:8:52: probe a: label 'w': missing key 'value' (the probe value the label "
          "is read from)"],
         "label-mapping-without-value"),
    _bad("{name: c_total, type: counter, labels: {w: {value: who, alow: x}}}",
         [f"{F}:8:65: probe a: label 'w': unknown key 'alow' (did you mean 'allow'?)"],
         "label-unknown-key"),
    _bad("{name: c_total, type: counter, labels: {w: {value: who, default: x}}}",
         [f"{F}:8:74: probe a: label 'w': default needs map"],
         "default-without-map"),
    _bad("{name: c_total, type: counter, labels: {w: {value: who, allow: '(a'}}}",
         [f"{F}:8:72: probe a: label 'w': allow: invalid regular expression '(a': "
          "missing ), unterminated subpattern at position 0"],
         "allow-invalid"),
    _bad("{name: c_total, type: counter, labels: {w: {value: who, map: {a: [1]}}}}",
         [f"{F}:8:74: probe a: map: 'a' must map to a label value"],
         "map-to-a-list"),
    _bad("{name: c_total, type: counter, labels: [who]}",
         [f"{F}:8:48: probe a: labels must be a mapping"],
         "labels-not-a-mapping"),
    _bad("{name: c_total, type: counter, max_series: 0}",
         [f"{F}:8:52: probe a: max_series must be 1..1000000"],
         "max-series-zero"),
    _bad("{name: c_total, type: counter, max_series: 1000001}",
         [f"{F}:8:52: probe a: max_series must be 1..1000000"],
         "max-series-too-big"),
    _bad("{name: c_total, type: counter, max_series: many}",
         [f"{F}:8:52: probe a: max_series must be an integer"],
         "max-series-not-an-integer"),
    _bad("{name: c_total, type: counter, aggregate: kernal}",
         [f"{F}:8:51: probe a: unknown aggregate 'kernal' (kernel or events)"],
         "unknown-aggregate"),
    pytest.param(HEAD.replace("    metrics:\n", "    metrics: {a: b}\n"),
                 [f"{F}:7:14: probe a: metrics must be a list"],
                 id="metrics-not-a-list"),
]


@pytest.mark.parametrize(("text", "expected"), BAD)
def test_bad_metrics(text: str, expected: list[str]) -> None:
    with pytest.raises(spec.SpecError) as info:
        spec.parse(text, F)
    err = info.value
    assert str(err).splitlines() == expected
    assert [str(p) for p in err.problems] == expected
    assert {p.probe for p in err.problems} == {"a"}
    assert err.exit_code == 2


def test_bucket_limit_is_32() -> None:
    text = HEAD + f"      - {{name: h, type: histogram, value: id, buckets: [{_numbers(32)}]}}\n"
    (metric,) = spec.parse(text, F).probes[0].metrics
    assert metric.buckets == tuple(float(b) for b in range(32))
    assert spec_metrics.MAX_BUCKETS == 32


def test_max_series_bounds_are_accepted() -> None:
    for n in (1, 1_000_000):
        text = HEAD + f"      - {{name: c_total, type: counter, max_series: {n}}}\n"
        assert spec.parse(text, F).probes[0].metrics[0].max_series == n


def test_same_metric_in_two_probes() -> None:
    text = (
        "targets:\n"
        "  t: {binary: /x}\n"
        "probes:\n"
        "  - name: a\n"
        "    function: f\n"
        "    metrics:\n"
        "      - {name: calls_total, type: counter}\n"      # 7: first
        "  - name: b\n"
        "    function: g\n"
        "    metrics:\n"
        "      - {name: other_total, type: counter}\n"
        "      - {name: calls_total, type: counter}\n"      # 12: again
    )
    with pytest.raises(spec.SpecError) as info:
        spec.parse(text, F)
    (problem,) = info.value.problems
    assert str(problem) == (f"{F}:12:9: probe b: metric 'calls_total' is declared twice "
                            f"(first at {F}:7:9)")
    assert (problem.mark, problem.probe) == (M(F, 12, 9), "b")


def test_every_metrics_problem_of_a_file_is_reported_at_once() -> None:
    text = (
        "targets:\n"
        "  t: {binary: /x}\n"
        "probes:\n"
        "  - name: a\n"
        "    function: f\n"
        "    values: {id: o.ID, who: o.Customer}\n"
        "    metrics:\n"
        "      - name: hits_total\n"
        "        type: counter\n"
        "        labels: {le: who}\n"                       # 10: reserved label
        "      - name: size\n"
        "        type: histogram\n"
        "        value: idd\n"                              # 13: no such value
        "        buckets: [3, 2]\n"                         # 14: not increasing
        "        aggregate: later\n"                        # 15: unknown aggregate
        "  - name: b\n"
        "    function: g\n"
        "    metrics:\n"
        "      - name: hits_total\n"                        # 19: declared twice
        "        type: counter\n"
        "      - name: gauge_total\n"                       # 21: gauge ending _total
        "        type: gauge\n"
        "        value: $duration\n"                        # 23: durations
        "        max_series: -1\n"                          # 24: out of range
    )
    with pytest.raises(spec.SpecError) as info:
        spec.parse(text, F)
    assert str(info.value).splitlines() == [
        f"{F}:10:18: probe a: label 'le': label name 'le' is reserved (histograms use 'le', "
        "summaries 'quantile'; choose another)",
        f"{F}:13:16: probe a: metric size: no value 'idd' in this probe (did you mean "
        "'id'?)",
        f"{F}:14:18: probe a: metric size: buckets must increase",
        f"{F}:15:20: probe a: unknown aggregate 'later' (kernel or events)",
        f"{F}:21:15: probe b: metric 'gauge_total': gauge 'gauge_total' ends in '_total' "
        "(only counters do; drop the suffix)",
        f"{F}:23:16: probe b: metric gauge_total: name one of the probe's values, not "
        f"$duration itself {HINT_DURATION}",
        f"{F}:24:21: probe b: max_series must be 1..1000000",
        f"{F}:19:9: probe b: metric 'hits_total' is declared twice (first at {F}:8:9)",
    ]


# ---------------------------------------------------------------------------------------
# JSON Schema.

_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,), "array": (list,), "string": (str,), "boolean": (bool,),
    "integer": (int,), "number": (int, float)}


def _is(instance: Any, name: str) -> bool:
    if name in ("integer", "number") and isinstance(instance, bool):
        return False
    return isinstance(instance, _TYPES[name])


def _errors(instance: Any, schema: dict[str, Any], at: str = "$") -> list[str]:
    """Where ``instance`` breaks ``schema``: the part of JSON Schema the spec schema uses
    (type, enum, const, required, properties, additionalProperties, propertyNames,
    pattern, items, min/maxItems, minProperties, minimum/maximum, oneOf)."""
    out: list[str] = []
    types = schema.get("type")
    if types is not None:
        names = [types] if isinstance(types, str) else types
        if not any(_is(instance, t) for t in names):
            return [f"{at}: not {types}"]
    if "enum" in schema and instance not in schema["enum"]:
        out.append(f"{at}: not one of {schema['enum']}")
    if "const" in schema and instance != schema["const"]:
        out.append(f"{at}: not {schema['const']}")
    if isinstance(instance, str) and "pattern" in schema \
            and re.search(schema["pattern"], instance) is None:
        out.append(f"{at}: does not match {schema['pattern']}")
    if isinstance(instance, int | float) and not isinstance(instance, bool) and not (
            schema.get("minimum", instance) <= instance <= schema.get("maximum", instance)):
        out.append(f"{at}: out of range")
    if isinstance(instance, list):
        if not schema.get("minItems", 0) <= len(instance) <= schema.get("maxItems", 1 << 30):
            out.append(f"{at}: wrong length")
        for i, item in enumerate(instance):
            out += _errors(item, schema.get("items", {}), f"{at}[{i}]")
    if isinstance(instance, dict):
        out += [f"{at}: missing {k}" for k in schema.get("required", ()) if k not in instance]
        if len(instance) < schema.get("minProperties", 0):
            out.append(f"{at}: too few properties")
        props = schema.get("properties", {})
        for k, v in instance.items():
            out += _errors(k, schema.get("propertyNames", {}), f"{at}.{k}(name)")
            if k in props:
                out += _errors(v, props[k], f"{at}.{k}")
            elif schema.get("additionalProperties") is False:
                out.append(f"{at}: unknown property {k}")
            elif isinstance(schema.get("additionalProperties"), dict):
                out += _errors(v, schema["additionalProperties"], f"{at}.{k}")
    if "oneOf" in schema:
        passing = [s for s in schema["oneOf"] if not _errors(instance, s, at)]
        if len(passing) != 1:
            out.append(f"{at}: matches {len(passing)} of oneOf")
    return out


def test_json_schema_has_the_metrics() -> None:
    probe = json_schema()["properties"]["probes"]["items"]
    assert "metrics" in probe["properties"]
    metrics = probe["properties"]["metrics"]
    assert metrics["type"] == "array"
    metric = metrics["items"]
    assert list(metric["properties"]) == [k.name for k in spec_metrics.METRIC_KEYS]
    assert list(metric["properties"]) == ["name", "type", "help", "value", "buckets",
                                          "labels", "max_series", "aggregate"]
    for key in spec_metrics.METRIC_KEYS:
        assert metric["properties"][key.name]["description"] == key.doc
    assert metric["required"] == ["name", "type"]
    assert metric["additionalProperties"] is False
    props = metric["properties"]
    assert props["type"]["enum"] == ["counter", "gauge", "histogram"]
    assert props["aggregate"]["enum"] == ["kernel", "events"]
    assert (props["buckets"]["minItems"], props["buckets"]["maxItems"]) == (1, 32)
    assert (props["max_series"]["minimum"], props["max_series"]["maximum"]) == (1, 1_000_000)
    plain, label = props["labels"]["additionalProperties"]["oneOf"]
    assert plain == {"type": "string"}
    assert list(label["properties"]) == [k.name for k in spec_metrics.LABEL_KEYS]
    assert label["required"] == ["value"]
    assert label["additionalProperties"] is False


def test_json_schema_accepts_the_valid_spec_and_rejects_bad_metrics() -> None:
    schema = json_schema()
    json.dumps(schema)  # plain JSON data
    good = yaml.safe_load(VALID)
    assert _errors(good, schema) == []
    metric = good["probes"][0]["metrics"][0]
    cases: list[tuple[dict[str, Any], str]] = [
        ({"vaule": "id"}, "$.probes[0].metrics[0]: unknown property vaule"),
        ({"type": "summary"}, "$.probes[0].metrics[0].type: not one of "
                              "['counter', 'gauge', 'histogram']"),
        ({"aggregate": "later"}, "$.probes[0].metrics[0].aggregate: not one of "
                                 "['kernel', 'events']"),
        ({"max_series": 0}, "$.probes[0].metrics[0].max_series: out of range"),
        ({"buckets": list(range(33))}, "$.probes[0].metrics[0].buckets: wrong length"),
        ({"labels": {"w": {"map": {"a": "b"}}}},
         "$.probes[0].metrics[0].labels.w: matches 0 of oneOf"),
    ]
    for change, where in cases:
        bad = json.loads(json.dumps(good))
        bad["probes"][0]["metrics"][0] = {**metric, **change}
        assert where in _errors(bad, schema), change
    if importlib.util.find_spec("jsonschema") is not None:  # a second opinion, when there
        jsonschema = importlib.import_module("jsonschema")
        jsonschema.Draft202012Validator(schema).validate(good)


# ---------------------------------------------------------------------------------------
# Against a binary: examples/go-prometheus, main.placeOrder(o *order).

def _resolve(binary: Path, body: str) -> Any:
    """Resolve a spec whose one probe is on main.placeOrder; ``body`` (its values and
    metrics) starts on line 6."""
    text = (
        "targets:\n"
        f"  ex: {{binary: {json.dumps(str(binary))}}}\n"
        "probes:\n"
        "  - name: order\n"
        "    function: main.placeOrder\n"
        + body
    )
    return resolve.resolve(spec.parse(text, "m.yaml"))


def _rejected(binary: Path, body: str) -> list[str]:
    with pytest.raises(spec.SpecError) as info:
        _resolve(binary, body)
    assert info.value.exit_code == 2
    return [str(p) for p in info.value.problems]


def test_label_from_a_float_is_rejected(example: Path) -> None:
    assert _rejected(example, (
        "    values:\n"
        "      f: {read: o.ID, as: float}\n"
        "    metrics:\n"
        "      - name: calls_total\n"
        "        type: counter\n"
        "        labels:\n"
        "          fl: f\n"                                 # 12
    )) == ["m.yaml:12:11: probe order: label fl: f is a float; labels come from strings, "
           "integers and booleans (use it as a value)"]


def test_metric_value_that_is_a_string_is_rejected(example: Path) -> None:
    assert _rejected(example, (
        "    values:\n"
        "      who: o.Customer\n"
        "    metrics:\n"
        "      - name: customer\n"
        "        type: gauge\n"
        "        value: who\n"                              # 11
    )) == ["m.yaml:11:16: probe order: metric customer: who is a string, not a number "
           "(a label can hold it)"]


def test_float_histogram_is_aggregated_from_events(example: Path) -> None:
    plan = _resolve(example, (
        "    values:\n"
        "      f: {read: o.ID, as: float}\n"
        "    metrics:\n"
        "      - name: order_id\n"
        "        type: histogram\n"
        "        value: f\n"
        "        buckets: [1, 2.5]\n"
    ))
    (probe,) = plan.probes
    assert probe.metrics == (
        MetricPlan("order_id", "histogram", "", "f", (1.0, 2.5), (), 1000, "events", "",
                   "a BPF program has no floating point to add floats"),)
    assert probe.aggregate is None  # nothing left for the kernel


def test_int_histogram_is_aggregated_in_the_kernel(example: Path) -> None:
    plan = _resolve(example, (
        "    values:\n"
        "      id: o.ID\n"
        "      who: o.Customer\n"
        "    metrics:\n"
        "      - name: order_id\n"
        "        type: histogram\n"
        "        value: id\n"
        "        buckets: [1, 2.5]\n"
        "        labels: {customer: who}\n"
        "        max_series: 20\n"
    ))
    (probe,) = plan.probes
    assert [(v.name, v.decode) for v in probe.values] == [("id", "int"), ("who", "string")]
    assert probe.metrics == (
        MetricPlan("order_id", "histogram", "", "id", (1.0, 2.5),
                   (LabelRule("customer", "who"),), 20, "kernel", "m0", ""),)
    agg = probe.aggregate
    assert agg is not None
    assert (agg.keys, agg.max_series) == (("$pid", "who"), 20)  # $pid: whose hit
    (column,) = agg.columns
    assert (column.name, column.op, column.value) == ("m0", "hist", "id")
    # Integer bounds: 2.5 holds the integers up to 2, one more than 1 does.
    low, high = column.bounds
    assert high - low == 1
    assert column == Column("m0", "hist", "id", (keys.bound(probe.values[0], 1.0),
                                                 keys.bound(probe.values[0], 2.5)))


def test_key_too_large_is_rejected(example: Path) -> None:
    assert _rejected(example, (
        "    values:\n"
        "      who: {read: o.Customer, max: 256}\n"
        "      sku: {read: 'o.Items[0].SKU', max: 256}\n"
        "      id: o.ID\n"
        "    metrics:\n"
        "      - name: orders_total\n"                      # 11
        "        type: counter\n"
        "        labels: {customer: who, sku: sku, id: id}\n"
    )) == [
        # 8 bytes of flags, 8 for the process, then 8 + 256 per string and 8 for the integer
        "m.yaml:11:9: probe order: the labels of this probe's metrics take 552 bytes in the "
        "kernel's key; at most 256 (lower max: of the string values used as labels)"]
    assert keys.KEY_LIMIT == 256


def test_string_labels_of_the_default_size_fit(example: Path) -> None:
    plan = _resolve(example, (
        "    values:\n"
        "      who: o.Customer\n"
        "      sku: 'o.Items[0].SKU'\n"
        "    metrics:\n"
        "      - name: orders_total\n"
        "        type: counter\n"
        "        labels: {customer: who, sku: sku}\n"
    ))
    (probe,) = plan.probes
    assert probe.aggregate is not None
    assert probe.aggregate.keys == ("$pid", "who", "sku")
    assert probe.aggregate.columns == ()  # a counter of calls: the row's hits
