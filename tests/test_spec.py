"""The probe spec (agent.config) and the event records (agent.events), without a binary.

Pure Python: no BPF, no root, no toolchain. Error lines are checked whole, with the
1-based line and column of the node they blame, because that is what the user reads.
"""

from __future__ import annotations

import dataclasses
import json
import re
import struct
from pathlib import Path

import pytest

from agent.config import probes as spec
from agent.config.model import (
    BUILTINS,
    DECODINGS,
    DEFAULT_MAX,
    EXIT_ONLY,
    MAX_MAX,
    Step,
    Target,
    Value,
    parse_selector,
)
from agent.config.schema import PROBE_KEYS, TARGET_KEYS, TOP_KEYS, VALUE_KEYS, json_schema
from agent.errors import NoopError
from agent.kernel import events
from agent.plan.fetches import Fetch
from agent.plan.model import ProbePlan, Site, ValueSpec

REPO = Path(__file__).resolve().parent.parent
F = "p.yaml"  # the path every parsed text is reported under

ONE_TARGET = "targets:\n  t: {binary: /x}\n"
HINT_EXACTLY_ONE = ("(function: exact name; match: a pattern such as 'main.handle*'; or a "
                    "line: FILE:LINE)")
HINT_SELECTOR = ("(write a parameter name followed by .field, .0, [index] and Go's .(TYPE) "
                 "steps (and .Error() last), or len(...) of one)")


def problems(text: str) -> list[str]:
    """The lines of the SpecError that parsing ``text`` raises."""
    with pytest.raises(spec.SpecError) as info:
        spec.parse(text, F)
    return str(info.value).splitlines()


# ---------------------------------------------------------------------------------------
# Good specs.

GOOD = """\
version: 1
targets:
  server:
    binary: build/server
    pid: 4242
  helper:
    binary: /usr/bin/helper
probes:
  - name: order
    target: server
    function: main.placeOrder
    values:
      id: o.ID
      first_qty: " o.Items[0].Qty "
      who: {read: o.Customer, as: string, max: 16}
      raw: {read: o.Blob, as: bytes}
  - name: handlers
    target: helper
    match: 'main.handle*'
    values:
      pid: $pid
      tid: $tid
      goroutine: $goid
      when: $timestamp
      who: $caller
      where: $caller_line
"""


def test_parse_targets() -> None:
    s = spec.parse(GOOD, F)
    assert s.path == F
    assert s.targets == (
        Target("server", "build/server", 4242, spec.Mark(F, 3, 3)),
        Target("helper", "/usr/bin/helper", None, spec.Mark(F, 6, 3)),
    )
    assert s.target("helper").binary == "/usr/bin/helper"


def test_parse_function_probe_and_values() -> None:
    order = spec.parse(GOOD, F).probes[0]
    assert (order.name, order.target, order.function, order.match) == (
        "order", "server", "main.placeOrder", None)
    assert order.mark == spec.Mark(F, 9, 5)
    assert order.function_mark == spec.Mark(F, 11, 15)
    assert order.values == (
        Value("id", "o.ID", None, DEFAULT_MAX, spec.Mark(F, 13, 11)),
        # surrounding blanks are not part of the selector
        Value("first_qty", "o.Items[0].Qty", None, DEFAULT_MAX, spec.Mark(F, 14, 18)),
        # {read, as, max}: the mark is the selector's
        Value("who", "o.Customer", "string", 16, spec.Mark(F, 15, 19)),
        Value("raw", "o.Blob", "bytes", DEFAULT_MAX, spec.Mark(F, 16, 19)),
    )
    assert all(v.builtin is None for v in order.values)


def test_parse_match_probe_and_builtins() -> None:
    handlers = spec.parse(GOOD, F).probes[1]
    assert (handlers.function, handlers.match) == (None, "main.handle*")
    assert handlers.function_mark == spec.Mark(F, 19, 12)
    assert [(v.name, v.selector, v.builtin, v.decode) for v in handlers.values] == [
        ("pid", "$pid", "pid", None),
        ("tid", "$tid", "tid", None),
        ("goroutine", "$goid", "goid", None),
        ("when", "$timestamp", "timestamp", None),
        ("who", "$caller", "caller", None),
        ("where", "$caller_line", "caller_line", None),
    ]
    assert {v.builtin for v in handlers.values} == set(BUILTINS) - set(EXIT_ONLY)


def test_parse_line_probes() -> None:
    s = spec.parse(ONE_TARGET + "probes:\n"
                   "  - {name: a, line: 'main.go:73', values: {c: cost}}\n"
                   "  - {name: b, function: main.process, line: 51}\n"
                   "  - {name: c, line: ' internal/x/y.go:7 '}\n", F)
    a, b, c = s.probes
    assert (a.line, a.function, a.match, a.at) == ("main.go:73", None, None, "entry")
    assert a.values[0].selector == "cost"
    assert (b.line, b.function) == ("main.process:51", "main.process")
    assert c.line == "internal/x/y.go:7"


def test_single_target_is_implied() -> None:
    s = spec.parse(ONE_TARGET + "probes:\n  - name: a\n    function: main.f\n", F)
    assert [p.target for p in s.probes] == ["t"]
    assert s.probes[0].values == ()


def test_version_is_optional_and_1_is_accepted() -> None:
    body = ONE_TARGET + "probes:\n  - {name: a, function: f}\n"
    for text in (body, "version: 1\n" + body):
        s = spec.parse(text, F)
        assert [(p.name, p.target, p.function) for p in s.probes] == [("a", "t", "f")]


@pytest.mark.parametrize("part", ["spec", "target", "probe", "value", "mark"])
def test_results_are_frozen(part: str) -> None:
    s = spec.parse(GOOD, F)
    obj = {"spec": s, "target": s.targets[0], "probe": s.probes[0],
           "value": s.probes[0].values[0], "mark": s.probes[0].mark}[part]
    assert dataclasses.is_dataclass(obj)
    field = dataclasses.fields(obj)[0].name
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(obj, field, "changed")


def test_collections_are_tuples() -> None:
    s = spec.parse(GOOD, F)
    assert isinstance(s.targets, tuple)
    assert isinstance(s.probes, tuple)
    assert all(isinstance(p.values, tuple) for p in s.probes)


def test_repository_probes_yaml_loads() -> None:
    s = spec.load(REPO / "probes.yaml")
    assert [t.name for t in s.targets] == ["example"]
    assert s.targets[0].binary == "build/go-prometheus"
    assert [p.name for p in s.probes] == ["order", "order_done", "counter_inc", "gauge_add"]
    assert [p.at for p in s.probes] == ["entry", "exit", "entry", "entry"]
    assert all(p.target == "example" and p.function and p.match is None for p in s.probes)
    order = s.probes[0]
    assert order.function == "main.placeOrder"
    assert {v.name: v.selector for v in order.values} == {
        "id": "o.ID", "customer": "o.Customer", "first_sku": "o.Items[0].SKU",
        "first_qty": "o.Items[0].Qty", "lines": "len(o.Items)", "goroutine": "$goid"}
    now = next(v for v in s.probes[3].values if v.name == "now")
    assert (now.selector, now.decode, now.max) == ("g.valBits", "float", DEFAULT_MAX)
    # Marks point into the file itself.
    lines = (REPO / "probes.yaml").read_text(encoding="utf-8").splitlines()
    for p in s.probes:
        assert lines[p.mark.line - 1][p.mark.col - 1:].startswith(f"name: {p.name}")
        assert lines[p.function_mark.line - 1][p.function_mark.col - 1:] == p.function


def test_load_of_a_missing_file_is_a_plain_noop_error(tmp_path: Path) -> None:
    with pytest.raises(NoopError) as info:
        spec.load(tmp_path / "nope.yaml")
    assert not isinstance(info.value, spec.SpecError)
    assert "no such spec file" in str(info.value)


# ---------------------------------------------------------------------------------------
# Bad specs: every problem, one line each, at the node to blame.

def _probe(body: str, targets: str = ONE_TARGET) -> str:
    """A spec whose only probe is ``body`` (lines indented 4, after "  - ")."""
    return targets + "probes:\n  - name: a\n" + body


BAD = [
    pytest.param("", [f"{F}:1:1: the spec is empty (it needs 'targets' and 'probes')"],
                 id="empty-file"),
    pytest.param("# only a comment\n",
                 [f"{F}:1:1: the spec is empty (it needs 'targets' and 'probes')"],
                 id="only-comments"),
    pytest.param("- a\n- b\n", [f"{F}:1:1: spec must be a mapping"], id="top-is-a-list"),
    pytest.param("just text\n", [f"{F}:1:1: spec must be a mapping"], id="top-is-a-scalar"),
    pytest.param(
        ONE_TARGET + "probe:\n  - name: a\n    function: f\n",
        [f"{F}:3:1: spec: unknown key 'probe' (did you mean 'probes'?)",
         f"{F}:1:1: spec: missing key 'probes' (what to read, and where)"],
        id="unknown-top-key"),
    pytest.param(
        "probes:\n  - name: a\n    function: f\n",
        [f"{F}:1:1: spec: missing key 'targets' (binaries to probe, by a name you choose)"],
        id="missing-targets"),
    pytest.param(
        _probe("    function: f\n    valuse: {x: y}\n"),
        [f"{F}:6:5: probe a: probe: unknown key 'valuse' (did you mean 'values'?)"],
        id="unknown-probe-key"),
    pytest.param(
        ONE_TARGET + "probes:\n  - function: f\n",
        [f"{F}:4:5: probe: missing key 'name' (a name for the probe: letters, digits, _)"],
        id="missing-name"),
    pytest.param(
        _probe("    function: f\n    match: 'g*'\n"),
        [f"{F}:4:5: probe a: a probe needs exactly one of 'function' and 'match' "
         + HINT_EXACTLY_ONE],
        id="function-and-match"),
    pytest.param(
        _probe("    values: {x: y}\n"),
        [f"{F}:4:5: probe a: a probe needs exactly one of 'function' and 'match' "
         + HINT_EXACTLY_ONE],
        id="neither-function-nor-match"),
    pytest.param(
        _probe("    target: sever\n    function: f\n", "targets:\n  server: {binary: /x}\n"),
        [f"{F}:5:13: probe a: unknown target 'sever' (did you mean 'server'?)"],
        id="unknown-target"),
    pytest.param(
        _probe("    function: f\n", "targets:\n  one: {binary: /x}\n  two: {binary: /y}\n"),
        [f"{F}:5:5: probe a: which target? there are several (add target: one of one, two)"],
        id="several-targets-no-target"),
    pytest.param(
        _probe("    function: f\n    values:\n      first-qty: o.Qty\n"),
        [f"{F}:7:7: probe a: value name 'first-qty' must be letters, digits and _"],
        id="bad-value-name"),
    pytest.param(
        _probe("    function: f\n    values:\n      x: c..x\n"),
        [f"{F}:7:10: probe a: value 'x': 'c..x' is not a selector " + HINT_SELECTOR],
        id="selector-double-dot"),
    pytest.param(
        _probe("    function: f\n    values:\n      x: c[x]\n"),
        [f"{F}:7:10: probe a: value 'x': 'c[x]' is not a selector " + HINT_SELECTOR],
        id="selector-non-numeric-index"),
    pytest.param(
        _probe("    function: f\n    values:\n      x: {read: '[0].a'}\n"),
        [f"{F}:7:17: probe a: value 'x': '[0].a' is not a selector " + HINT_SELECTOR],
        id="selector-without-parameter"),
    pytest.param(
        _probe("    function: f\n    values:\n      g: $gid\n"),
        [f"{F}:7:10: probe a: unknown built-in '$gid' (did you mean '$goid'?)"],
        id="unknown-builtin"),
    pytest.param(
        _probe("    function: f\n    values:\n      g: {read: x, as: flaot}\n"),
        [f"{F}:7:24: probe a: unknown decoding 'flaot' (did you mean 'float'?)"],
        id="unknown-decoding"),
    pytest.param(
        _probe("    function: f\n    values:\n      g: {read: x, max: 300}\n"
               "      h: {read: x, max: 0}\n"),
        [f"{F}:7:25: probe a: max must be 1..256",
         f"{F}:8:25: probe a: max must be 1..256"],
        id="max-out-of-range"),
    pytest.param(
        _probe("    function: f\n    values:\n      g: {read: x, max: yes}\n"),
        [f"{F}:7:25: probe a: max must be an integer"],
        id="max-not-an-integer"),
    pytest.param(
        _probe("    function: f\n    values:\n      g: {max: 8}\n"),
        [f"{F}:7:10: probe a: value 'g': missing key 'read' (the selector)"],
        id="value-without-read"),
    pytest.param(
        _probe("    function: f\n  - name: a\n    function: g\n"),
        [f"{F}:6:5: probe a: probe name 'a' is used twice (first at {F}:4:5)"],
        id="duplicate-probe-names"),
    pytest.param(
        _probe("    function: f\n    function: g\n"),
        [f"{F}:6:5: probe a: probe: key 'function' given twice"],
        id="duplicate-probe-key"),
    pytest.param(
        _probe("    function: f\n    values:\n      x: o.a\n      x: o.b\n"),
        [f"{F}:8:7: probe a: values: key 'x' given twice"],
        id="duplicate-value-name"),
    pytest.param(
        "targets:\n  t: {binary: /x}\n  t: {binary: /y}\nprobes:\n  - {name: a, function: f}\n",
        [f"{F}:3:3: targets: key 't' given twice"],
        id="duplicate-target-name"),
    pytest.param(
        "version: 2\n" + _probe("    function: f\n"),
        [f"{F}:1:10: version 2 is not supported (this noop reads version 1)"],
        id="version-2"),
    pytest.param(
        _probe("    function: f\n", "targets:\n  t: {binary: /x, pid: 0}\n"),
        [f"{F}:2:24: pid must be a process id, 1 to 4194304"],
        id="pid-zero"),
    pytest.param(
        _probe("    function: f\n", "targets:\n  t:\n    binary: /x\n    pid: -7\n"),
        [f"{F}:4:10: pid must be a process id, 1 to 4194304"],
        id="pid-negative"),
    pytest.param(
        _probe("    function: f\n", "targets:\n  t: {binary: /x, pid: '12'}\n"),
        [f"{F}:2:24: pid must be an integer"],
        id="pid-not-an-integer"),
    pytest.param(
        _probe("    function: f\n", "targets:\n  t: {pid: 12}\n"),
        [f"{F}:2:6: target 't': missing binary (give one of binary (a path), exe (a "
         "file name) or build_id)"],
        id="target-without-binary"),
    pytest.param(
        _probe("    function: f\n    values: {d: $duration}\n"),
        [f"{F}:6:17: probe a: value 'd': $duration needs an exit probe (add at: exit to "
         "the probe)"], id="duration-at-entry"),
    pytest.param(
        _probe("    function: f\n    values: {r: ~r0.x}\n"),
        [f"{F}:6:17: probe a: value 'r': the result ~r0 needs an exit probe (add at: exit "
         "to the probe)"], id="result-at-entry"),
    pytest.param(
        _probe("    function: f\n    values: {v: {read: p.x, at: exit}}\n"),
        [f"{F}:6:24: probe a: value 'v': at: exit needs an exit probe (add at: exit to the "
         "probe)"], id="value-at-exit-in-an-entry-probe"),
    pytest.param(
        _probe("    function: f\n    at: later\n"),
        [f"{F}:6:9: probe a: at: 'later' is neither entry nor exit"], id="bad-probe-at"),
    pytest.param(
        _probe("    function: f\n    at: exit\n    values: {v: {read: p.x, at: soon}}\n"),
        [f"{F}:7:33: probe a: at: 'soon' is neither entry nor exit"], id="bad-value-at"),
    pytest.param(
        _probe("    line: main.go\n"),
        [f"{F}:5:11: probe a: line: 'main.go' is not FILE:LINE or a line number (e.g. line: "
         "main.go:73, or function: main.process with line: 73)"], id="line-without-number"),
    pytest.param(
        _probe("    line: main.go:0\n"),
        [f"{F}:5:11: probe a: line: 'main.go:0' is not FILE:LINE or a line number (e.g. "
         "line: main.go:73, or function: main.process with line: 73)"], id="line-zero"),
    pytest.param(
        _probe("    line: 73\n"),
        [f"{F}:5:11: probe a: line: 73 needs its file or function (line: FILE:73 (e.g. "
         "main.go:73), or add function:)"], id="line-number-alone"),
    pytest.param(
        _probe("    function: main.f\n    line: main.go:73\n"),
        [f"{F}:6:11: probe a: with function:, line: is the line number alone (line: 73 (or "
         "drop function: and keep line: main.go:73))"], id="line-file-with-function"),
    pytest.param(
        _probe("    match: 'main.*'\n    line: 73\n"),
        [f"{F}:6:11: probe a: line: is for one function or file, not a match: pattern "
         "(give function: and its line number, or line: FILE:LINE alone)"],
        id="line-with-match"),
    pytest.param(
        _probe("    line: main.go:73\n    at: exit\n"),
        [f"{F}:6:9: probe a: at: exit is for a function's return; a line probe has a hit "
         "per pass through its line (drop at:, or probe the function's exit in another "
         "probe)"], id="line-at-exit"),
    pytest.param(
        _probe("    line: [main.go, 73]\n"),
        [f"{F}:5:11: probe a: line must be FILE:LINE, or a line number with function:"],
        id="line-is-a-list"),
]


@pytest.mark.parametrize(("text", "expected"), BAD)
def test_bad_spec(text: str, expected: list[str]) -> None:
    with pytest.raises(spec.SpecError) as info:
        spec.parse(text, F)
    err = info.value
    assert str(err).splitlines() == expected
    assert [str(p) for p in err.problems] == expected
    assert err.exit_code == 2


MALFORMED = [
    # (text, line, column) of the token PyYAML stops at
    pytest.param("targets:\n  t:\n    binary: /x\n   pid: 3\nprobes: []\n", 4, 4,
                 id="bad-indentation"),
    pytest.param("targets: {t: {binary: /x}\nprobes:\n  - name: a\n", 2, 1,
                 id="unclosed-brace"),
    pytest.param(ONE_TARGET + "probes: [\n", 4, 1, id="unclosed-bracket"),
    pytest.param("targets:\n\tt: {binary: /x}\n", 2, 1, id="tab"),
]


@pytest.mark.parametrize(("text", "line", "col"), MALFORMED)
def test_malformed_yaml(text: str, line: int, col: int) -> None:
    with pytest.raises(spec.SpecError) as info:
        spec.parse(text, F)
    (only,) = str(info.value).splitlines()
    assert re.fullmatch(rf"{re.escape(F)}:{line}:{col}: not valid YAML: \S.* "
                        r"\(check indentation and quoting\)", only), only
    assert info.value.exit_code == 2


def test_every_problem_of_a_file_is_reported_at_once() -> None:
    text = (
        "version: 2\n"                              # 1: unsupported version
        "targets:\n"
        "  t: {binary: /x, pid: -4}\n"              # 3: pid not positive
        "probes:\n"
        "  - name: a\n"
        "    function: f\n"
        "    values: {g: $gid}\n"                   # 7: unknown built-in
    )
    assert problems(text) == [
        f"{F}:1:10: version 2 is not supported (this noop reads version 1)",
        f"{F}:3:24: pid must be a process id, 1 to 4194304",
        f"{F}:7:17: probe a: unknown built-in '$gid' (did you mean '$goid'?)",
    ]


def test_problems_in_several_probes_name_their_probe() -> None:
    text = ONE_TARGET + (
        "probes:\n"
        "  - name: first\n"
        "    function: f\n"
        "    values: {x: c..x}\n"
        "  - name: second\n"
        "    match: 'm*'\n"
        "    values: {y: {read: y, as: flaot}}\n"
        "  - name: third\n"
        "    target: nope\n"
        "    function: h\n"
    )
    assert problems(text) == [
        f"{F}:6:17: probe first: value 'x': 'c..x' is not a selector " + HINT_SELECTOR,
        f"{F}:9:31: probe second: unknown decoding 'flaot' (did you mean 'float'?)",
        f"{F}:11:13: probe third: unknown target 'nope' (targets: t)",
    ]


def test_spec_error_is_a_noop_error_with_exit_code_2() -> None:
    assert spec.SpecError.exit_code == 2
    with pytest.raises(NoopError) as info:
        spec.parse("", F)
    assert isinstance(info.value, spec.SpecError)
    assert info.value.exit_code == 2
    (problem,) = info.value.problems
    assert problem.mark == spec.Mark(F, 1, 1)


def test_problem_format() -> None:
    mark = spec.Mark("a/b.yaml", 3, 7)
    assert str(spec.Problem(mark, "bad", "fix", "p1")) == "a/b.yaml:3:7: probe p1: bad (fix)"
    assert str(spec.Problem(mark, "bad")) == "a/b.yaml:3:7: bad"


def test_empty_binary_is_a_problem() -> None:
    lines = problems(_probe("    function: f\n", "targets:\n  t: {binary: ''}\n"))
    assert lines
    assert lines[0].startswith(f"{F}:2:15: ")


@pytest.mark.parametrize(("targets", "col"), [
    pytest.param("targets:\n  t: {binary: !foo /x}\n", 15, id="unknown-tag"),
    pytest.param("targets:\n  t: {binary: /x, pid: !!int abc}\n", 24, id="bad-int-tag"),
])
def test_explicit_tags_are_spec_errors(targets: str, col: int) -> None:
    lines = problems(_probe("    function: f\n", targets))
    assert lines[0].startswith(f"{F}:2:{col}: ")


# ---------------------------------------------------------------------------------------
# Selectors.

@pytest.mark.parametrize(("text", "steps"), [
    ("o.Items[0].Qty", (("name", "o"), ("field", "Items"), ("index", 0), ("field", "Qty"))),
    ("c.desc.fqName", (("name", "c"), ("field", "desc"), ("field", "fqName"))),
    ("val", (("name", "val"),)),
    ("m[12][3]", (("name", "m"), ("index", 12), ("index", 3))),
    ("_p.x_1[7]", (("name", "_p"), ("field", "x_1"), ("index", 7))),
])
def test_parse_selector(text: str, steps: tuple[Step, ...]) -> None:
    assert parse_selector(text) == steps


# ---------------------------------------------------------------------------------------
# JSON Schema.

def test_json_schema_structure() -> None:
    schema = json_schema()
    assert isinstance(schema, dict)
    assert schema["$schema"].startswith("https://json-schema.org/")
    assert schema["type"] == "object"
    assert schema["required"] == ["targets", "probes"]
    assert schema["additionalProperties"] is False
    assert set(schema["properties"]) == {k.name for k in TOP_KEYS}
    json.dumps(schema)  # plain JSON data

    targets = schema["properties"]["targets"]
    target = targets["additionalProperties"]
    assert set(target["properties"]) == {k.name for k in TARGET_KEYS}
    assert target["required"] == []
    assert target["oneOf"] == [{"required": [k]} for k in ("binary", "exe", "build_id")]

    probe = schema["properties"]["probes"]["items"]
    assert set(probe["properties"]) == {k.name for k in PROBE_KEYS}
    for key in PROBE_KEYS:
        assert probe["properties"][key.name]["description"] == key.doc
    assert probe["required"] == ["name"]
    assert probe["oneOf"] == [
        {"required": ["function"]}, {"required": ["match"], "not": {"required": ["line"]}},
        {"required": ["line"], "not": {"anyOf": [{"required": ["function"]},
                                                 {"required": ["match"]}]}}]

    value = probe["properties"]["values"]["additionalProperties"]["oneOf"][1]
    assert set(value["properties"]) == {k.name for k in VALUE_KEYS}
    assert value["properties"]["as"]["enum"] == list(DECODINGS)
    assert value["properties"]["max"]["maximum"] == MAX_MAX


@pytest.mark.parametrize(("probe", "valid"), [
    ({"name": "a", "line": "main.go:73"}, True),
    ({"name": "a", "function": "main.f", "line": 73}, True),
    ({"name": "a", "line": "main.go"}, False),
    ({"name": "a", "line": 0}, False),
    ({"name": "a", "match": "main.*", "line": "main.go:73"}, False),
    ({"name": "a"}, False),
])
def test_json_schema_line_probes(probe: dict[str, object], valid: bool) -> None:
    """The schema takes a line probe as the parser does (editors check specs with it)."""
    import jsonschema
    doc = {"targets": {"t": {"binary": "/x"}}, "probes": [probe]}
    errors = list(jsonschema.Draft202012Validator(json_schema()).iter_errors(doc))
    assert (not errors) == valid, errors
    try:
        spec.parse(json.dumps(doc), F)
        parsed = True
    except spec.SpecError:
        parsed = False
    assert parsed == valid


def test_json_schema_name_pattern_is_anchored() -> None:
    probe = json_schema()["properties"]["probes"]["items"]
    pattern = probe["properties"]["name"]["pattern"]
    assert re.search(pattern, "first_qty")
    for bad in ("9abc", "first-qty", "a b"):
        assert re.search(pattern, bad) is None, bad


# ---------------------------------------------------------------------------------------
# Event records.

def _vs(name: str, decode: str, size: int, cap: int = 0) -> ValueSpec:
    return ValueSpec(name, decode, size, cap, f"type of {name}", f"x.{name}")


VALUES = (
    _vs("neg", "int", 4),
    _vs("big", "uint", 8),
    _vs("f64", "float", 8),
    _vs("f32", "float", 4),
    _vs("flag", "bool", 1),
    _vs("ptr", "addr", 8),
    _vs("short", "string", 16, 16),
    _vs("long", "string", 16, 16),
    _vs("blob", "bytes", 5, 5),
    _vs("faulted", "uint", 8),
    _vs("gone", "int", 8),
    _vs("never", "uint", 8),
)
IDX = {v.name: i for i, v in enumerate(VALUES)}


def _plan() -> ProbePlan:
    fetches = tuple(Fetch("reg", regs=("rax",)) for _ in VALUES)
    site = Site("main.f", 0x401000, 0x1000, "function entry", fetches)
    return ProbePlan("p", "t", VALUES, (site,), wants_goid=True)


def test_layout_offsets() -> None:
    lay = events.layout(3, _plan())
    assert events.HEADER.size == events.HEADER_SIZE == 40
    assert (lay.probe, lay.struct_name) == (3, "noop_ev_3")
    assert [s.value for s in lay.slots] == list(VALUES)
    assert [s.index for s in lay.slots] == list(range(len(VALUES)))
    assert all(s.offset % 8 == 0 and s.size % 8 == 0 for s in lay.slots)
    assert lay.slots[0].offset == events.HEADER_SIZE
    for a, b in zip(lay.slots, lay.slots[1:], strict=False):
        assert b.offset == a.offset + a.size
    assert lay.size == events.HEADER_SIZE + sum(s.size for s in lay.slots)
    by = {s.value.name: s for s in lay.slots}
    assert (by["short"].size, by["short"].cap) == (24, 16)
    assert (by["blob"].size, by["blob"].cap) == (16, 8)  # 5 bytes, rounded up to 8
    assert all(by[n].cap == 0 and by[n].size == 8 for n in ("neg", "f32", "flag", "ptr"))


def _record(lay: events.Layout) -> bytes:
    faults = (1 << IDX["faulted"]) | (1 << IDX["never"])  # never: unreadable wins
    absent = 1 << IDX["gone"]
    buf = bytearray(events.HEADER.pack(123456789, 77, 1000, 1001, 3, 2, faults, absent, 0))
    buf += bytes(lay.size - len(buf))
    off = {s.value.name: s.offset for s in lay.slots}

    def u64(name: str, raw: int) -> None:
        struct.pack_into("<Q", buf, off[name], raw)

    def chars(name: str, length: int, data: bytes) -> None:
        struct.pack_into("<II", buf, off[name], length, 0)
        buf[off[name] + 8: off[name] + 8 + len(data)] = data

    u64("neg", (-5) & 0xFFFFFFFF)
    u64("big", 2**64 - 2)
    u64("f64", struct.unpack("<Q", struct.pack("<d", -2.5))[0])
    u64("f32", struct.unpack("<I", struct.pack("<f", 0.75))[0])
    u64("flag", 1)
    u64("ptr", 0xC000012345)
    chars("short", 5, b"hello")
    chars("long", 40, b"abcdefghijklmnop")  # 40 bytes long, the first 16 kept
    chars("blob", 3, b"\x00\x01\xff")
    u64("faulted", 99)
    u64("gone", 98)
    u64("never", 97)
    return bytes(buf)


def test_decode_record() -> None:
    lay = events.layout(3, _plan())
    data = _record(lay)
    assert events.header(data) == (3, 2)
    ev = events.decode(lay, data, {"never": "in xmm0"})
    assert (ev.probe, ev.site, ev.ts, ev.pid, ev.tid, ev.goid) == (3, 2, 123456789, 1000,
                                                                   1001, 77)
    assert ev.values == {
        "neg": -5, "big": 2**64 - 2, "f64": -2.5, "f32": 0.75, "flag": True,
        "ptr": 0xC000012345, "short": "hello", "long": "abcdefghijklmnop",
        "blob": b"\x00\x01\xff", "faulted": None, "gone": None, "never": None,
    }
    assert isinstance(ev.values["f32"], float)
    assert ev.truncated == ("long",)
    assert ev.faults == ("faulted",)
    assert ev.absent == ("gone",)
    assert ev.unreadable == {"never": "in xmm0"}


def test_decode_without_unreadable_reports_every_fault() -> None:
    lay = events.layout(3, _plan())
    ev = events.decode(lay, _record(lay))
    assert ev.faults == ("faulted", "never")
    assert ev.absent == ("gone",)
    assert ev.unreadable == {}


@pytest.mark.parametrize(("v", "raw", "want"), [
    (_vs("i8", "int", 1), 0xFF, -1),
    (_vs("i16", "int", 2), 0x8000, -32768),
    (_vs("i32", "int", 4), 0x7FFFFFFF, 2**31 - 1),
    (_vs("i64", "int", 8), 2**64 - 1, -1),
    (_vs("u32", "uint", 4), 0xDEAD_0000_FFFF_FFFF, 0xFFFFFFFF),  # high bytes ignored
    (_vs("b", "bool", 1), 0x100, False),  # only the low byte is the bool
    (_vs("b", "bool", 1), 2, True),
])
def test_scalar(v: ValueSpec, raw: int, want: object) -> None:
    assert events.scalar(v, raw) == want


def test_c_struct_asserts_size_and_every_offset() -> None:
    lay = events.layout(3, _plan())
    text = "\n".join(events.c_struct(lay))
    assert text.startswith("struct noop_ev_3 {\n\tstruct noop_hdr hdr;\n")
    assert f'_Static_assert(sizeof(struct noop_ev_3) == {lay.size}, "event layout");' in text
    for s in lay.slots:
        assert (f"_Static_assert(offsetof(struct noop_ev_3, v{s.index}) == {s.offset}, "
                '"event layout");') in text
        decl = f"NOOP_BYTES({s.cap}) v{s.index};" if s.cap else f"u64 v{s.index};"
        assert f"\t{decl}" in text
    assert text.count("_Static_assert(") == 1 + len(lay.slots)
    assert "NOOP_BYTES(16) v6;" in text
    assert "NOOP_BYTES(8) v8;" in text


def test_c_header_checks_match_the_header() -> None:
    checks = events.c_header_checks()
    assert checks[0] == '_Static_assert(sizeof(struct noop_hdr) == 40, "header layout");'
    for name, _fmt, off in events.HEADER_FIELDS:
        assert (f'_Static_assert(offsetof(struct noop_hdr, {name}) == {off}, '
                '"header layout");') in checks
    # The offsets agree with the struct format the decoder unpacks with.
    fmt = "<" + "".join(f for _n, f, _o in events.HEADER_FIELDS)
    assert struct.calcsize(fmt) + 4 == events.HEADER_SIZE  # + the trailing _pad word


def test_target_limited_to_a_container_and_a_pod() -> None:
    """An id as written (all digits is still an id, not a number); a bad id or UID is
    one problem each, with its place; the JSON Schema agrees."""
    uid = "0b7f9c1e-3d2a-4c5b-9e8f-1a2b3c4d5e6f"
    s = spec.parse(_probe("    function: f\n", "targets:\n  t:\n    binary: /x\n"
                          f"    container: 123456789012\n    pod: {uid}\n"), F)
    (t,) = s.targets
    assert (t.container, t.pod) == ("123456789012", uid)
    assert problems(_probe("    function: f\n", "targets:\n  t:\n    binary: /x\n"
                           "    container: docker://4f1c\n    pod: 42\n")) == [
        f"{F}:4:16: container 'docker://4f1c' is not one (a container id is hex: 1 to 64 "
        "of 0-9a-f)",
        f"{F}:5:10: pod '42' is not one (a pod UID is a UUID: 8-4-4-4-12 hex digits)"]
    import jsonschema
    validator = jsonschema.Draft202012Validator(json_schema())
    doc = {"targets": {"t": {"binary": "/x", "container": "4f1c", "pod": uid}},
           "probes": [{"name": "p", "function": "f"}]}
    assert not list(validator.iter_errors(doc))
    doc["targets"]["t"]["container"] = "4F1C"  # type: ignore[index]
    assert list(validator.iter_errors(doc))


# ---------------------------------------------------------------------------------------
# YAML as operators write it: merge keys, deep nesting, tags.

def test_merge_keys_share_settings_and_keep_each_place() -> None:
    """``<<: *defaults`` (one mapping or a list of them, the first given winning) gives
    a mapping the keys it does not set itself, wherever mappings are read; a problem in
    a merged key is reported where that key is written."""
    merged = ONE_TARGET + """\
probes:
  - &base
    name: a
    function: main.f
    budget: 2%
    values: &shared {n: n}
  - <<: *base
    name: b
    values: {<<: *shared, m: m}
  - <<: [{budget: 3%, at: exit}, *base]
    name: c
    function: main.h
"""
    probes = spec.parse(merged, F).probes
    assert [(p.name, p.function, p.budget, p.at) for p in probes] == [
        ("a", "main.f", 0.02, "entry"), ("b", "main.f", 0.02, "entry"),
        ("c", "main.h", 0.03, "exit")]
    assert {v.name for v in probes[1].values} == {"m", "n"}
    assert probes[1].mark.line == 9  # b, where its mapping starts
    bad = ONE_TARGET + """\
probes:
  - &base
    name: a
    function: main.f
    budget: lots
  - <<: *base
    name: b
"""
    lines = problems(bad)
    assert len(lines) == 2 and all(line.startswith(f"{F}:7:13: ") for line in lines), lines
    (line,) = problems(ONE_TARGET + "probes:\n  - name: a\n    function: main.f\n"
                       "    <<: 3\n")
    assert line == f"{F}:6:9: probe a: probe: '<<' merges only mappings (give it an alias of " \
        "a mapping (<<: *defaults))", line


@pytest.mark.parametrize("depth", [65, 3000, 100_000])
def test_deep_nesting_is_one_line(depth: int) -> None:
    text = ONE_TARGET + "probes:\n  - name: a\n    function: main.f\n    values: " + \
        "[" * depth + "]" * depth + "\n"
    (line,) = problems(text)
    assert "nested too deep to be a spec (a spec nests at most 64 levels)" in line


@pytest.mark.parametrize("tagged", ["!include other.yaml", "!env HOME", "!!python/name:os.system"])
def test_an_unknown_tag_is_one_line(tagged: str) -> None:
    (line,) = problems(ONE_TARGET + f"probes:\n  - name: a\n    function: {tagged}\n")
    assert line.startswith(f"{F}:5:15: "), line
