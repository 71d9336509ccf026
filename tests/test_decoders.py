"""Label decoders: raw values to label text, map then allow, and metric and label names."""

import re

import pytest

from agent.config.decoders import (
    UNREAD,
    LabelRule,
    compile_rule,
    go_float,
    label_name_problem,
    label_value,
    metric_name_problem,
    regex_problem,
    rule_problems,
    text,
)

NOT_UTF8 = b"ok\xff\xfe".decode("utf-8", "surrogateescape")


def rule(**kw: object) -> LabelRule:
    return LabelRule(name="method", value="m", **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(("raw", "want"), [
    (None, UNREAD),
    (True, "true"),
    (False, "false"),  # a bool is an int in Python: it must not become "0"
    (0, "0"),
    (-42, "-42"),
    (2**64 - 1, "18446744073709551615"),
    (-(2**63), "-9223372036854775808"),
    ("GET", "GET"),
    ("", ""),
    ("héllo wörld", "héllo wörld"),
    ("a\x00b\x00", "ab"),
    (NOT_UTF8, "ok\ufffd\ufffd"),
    ("\ud800x", "\ufffdx"),
    ("\ufffd", "\ufffd"),  # already replaced when the event was decoded: kept
    (b"\x00\xff\x10", "00ff10"),
    (b"", ""),
    (bytearray(b"\xab"), "ab"),
    (memoryview(b"\x01\x02"), "0102"),
    (1.0, "1"),
    (float("nan"), "NaN"),
    (float("inf"), "+Inf"),
    (float("-inf"), "-Inf"),
])
def test_text(raw: object, want: str) -> None:
    got = text(raw)
    assert got == want
    assert "\x00" not in got
    got.encode("utf-8")  # strict: raises on anything that is not valid UTF-8


# Expected values printed by Go's strconv.FormatFloat(x, 'g', -1, 64).
@pytest.mark.parametrize(("x", "want"), [
    (0.0, "0"),
    (-0.0, "-0"),
    (1.0, "1"),
    (-1.0, "-1"),
    (0.5, "0.5"),
    (2.5, "2.5"),
    (100000.0, "100000"),
    (123456.0, "123456"),
    (123456.789, "123456.789"),
    (1234567.0, "1.234567e+06"),
    (-1234567.5, "-1.2345675e+06"),
    (1e6, "1e+06"),
    (1e15, "1e+15"),
    (1e20, "1e+20"),
    (1e21, "1e+21"),
    (1e100, "1e+100"),
    (1e-4, "0.0001"),
    (0.00012345, "0.00012345"),
    (1e-5, "1e-05"),
    (1.5e-7, "1.5e-07"),
    (0.1 + 0.2, "0.30000000000000004"),
    (3.14159, "3.14159"),
    (5e-324, "5e-324"),
    (1.7976931348623157e308, "1.7976931348623157e+308"),
    (12345678901234567890.0, "1.2345678901234567e+19"),
])
def test_go_float(x: float, want: str) -> None:
    assert go_float(x) == want
    assert text(x) == want


@pytest.mark.parametrize("raw", [object(), [1], {"a": 1}, 1j])
def test_text_refuses_other_types(raw: object) -> None:
    with pytest.raises(TypeError, match="no label text"):
        text(raw)


CODES = (("200", "ok"), ("404", "missing"))


@pytest.mark.parametrize(("r", "raw", "want"), [
    (rule(map=CODES), 200, "ok"),  # hit, from an int
    (rule(map=CODES), "404", "missing"),  # hit, from a str
    (rule(map=CODES), 500, "500"),  # miss, no default: the raw text stays
    (rule(map=CODES, default="other_code"), 500, "other_code"),  # miss: the default
    (rule(map=CODES, default="other_code"), 200, "ok"),  # a hit ignores the default
    (rule(default="x"), 500, "500"),  # no map: the default is not used
    (rule(map=(("unread", "n/a"),)), None, "n/a"),  # an unread value can be mapped
    (rule(map=(("true", "yes"),)), True, "yes"),
    (rule(map=(("00ff", "blob"),)), b"\x00\xff", "blob"),
    (rule(map=(("ab", "joined"),)), "a\x00b", "joined"),  # cleaned before the lookup
    (rule(map=(("1", "a\x00b"),)), 1, "ab"),  # map values are cleaned too
])
def test_map(r: LabelRule, raw: object, want: str) -> None:
    assert label_value(r, raw) == want


@pytest.mark.parametrize(("r", "raw", "want"), [
    (rule(allow="GET|POST"), "GET", "GET"),
    (rule(allow="GET|POST"), "POST", "POST"),
    (rule(allow="GET|POST"), "PUT", "other"),
    (rule(allow="GET|POST"), "GETX", "other"),  # a prefix match is not enough
    (rule(allow="GET|POST"), "xPOST", "other"),  # nor a match inside
    (rule(allow="GET|POST"), "GETPOST", "other"),
    (rule(allow="[a-z]+"), "", "other"),
    (rule(allow="[a-z]*"), "", ""),
    (rule(allow="[0-9]+"), 42, "42"),
    (rule(allow="[0-9]+"), -42, "other"),
    (rule(allow="[0-9]+", other="-"), "x", "-"),  # a chosen other
    (rule(allow="[a-z]+"), None, UNREAD),
    (rule(allow="[a-z]+"), NOT_UTF8, "other"),
    (rule(allow="ok.*"), NOT_UTF8, "ok\ufffd\ufffd"),
    (rule(allow="a\u00e9"), "a\u00e9", "a\u00e9"),
])
def test_allow(r: LabelRule, raw: object, want: str) -> None:
    assert label_value(r, raw) == want


METHODS = (("1", "GET"), ("2", "POST"), ("3", "DELETE"))


@pytest.mark.parametrize(("r", "raw", "want"), [
    # allow first would turn "1" into other: the map comes first
    (rule(map=METHODS, allow="GET|POST"), 1, "GET"),
    (rule(map=METHODS, allow="GET|POST"), 2, "POST"),
    (rule(map=METHODS, allow="GET|POST"), 3, "other"),  # a mapped value still passes allow
    (rule(map=METHODS, allow="GET|POST"), 9, "other"),  # a miss kept raw, then refused
    (rule(map=METHODS, allow="GET|POST", default="POST"), 9, "POST"),
    (rule(map=METHODS, allow="GET|POST", default="weird"), 9, "other"),  # the default too
    (rule(map=METHODS, allow="[0-9]"), 1, "other"),  # allow sees the mapped value only
])
def test_map_then_allow(r: LabelRule, raw: object, want: str) -> None:
    assert label_value(r, raw) == want


def test_compiled_once(monkeypatch: pytest.MonkeyPatch) -> None:
    r = rule(map=METHODS, allow="GET|POST")
    decode = compile_rule(r)
    assert compile_rule(r) is decode
    assert compile_rule(rule(map=METHODS, allow="GET|POST")) is decode  # equal rules too

    def refuse(*_a: object, **_k: object) -> None:
        raise AssertionError("a pattern compiled while decoding")

    for name in ("compile", "fullmatch", "match", "search"):
        monkeypatch.setattr(re, name, refuse)
    assert [decode(raw) for raw in (1, 2, 3, None)] == ["GET", "POST", "other", "other"]


def test_invalid_allow_is_refused_when_compiled() -> None:
    r = rule(allow="(GET")
    assert rule_problems(r) == ("invalid regular expression '(GET': missing ), unterminated"
                                " subpattern at position 0",)
    with pytest.raises(ValueError, match="invalid regular expression"):
        compile_rule(r)
    with pytest.raises(ValueError, match="invalid regular expression"):
        label_value(r, "GET")


@pytest.mark.parametrize(("r", "want"), [
    (rule(), ()),
    (rule(allow="GET|POST"), ()),
    (LabelRule(name="le", value="m", allow="("), (
        "label name 'le' is reserved", "invalid regular expression '('")),
    (LabelRule(name="a-b", value="m"), ("label name 'a-b' has '-'",)),
])
def test_rule_problems(r: LabelRule, want: tuple[str, ...]) -> None:
    got = rule_problems(r)
    assert len(got) == len(want)
    for message, start in zip(got, want, strict=True):
        assert message.startswith(start)


@pytest.mark.parametrize(("name", "kind"), [
    ("http_requests_total", "counter"),
    ("_hidden_total", "counter"),
    ("A1_total", "counter"),
    ("noopish_total", "counter"),  # only the "noop_" prefix is reserved
    ("my_noop_total", "counter"),
    ("bytes_created_total", "counter"),
    ("queue_depth", "gauge"),
    ("total", "gauge"),
    ("items_totals", "gauge"),
    ("sum_of_things", "gauge"),
    ("request_seconds", "histogram"),
    ("_", "gauge"),
])
def test_metric_name_accepted(name: str, kind: str) -> None:
    assert metric_name_problem(name, kind) is None


@pytest.mark.parametrize(("name", "kind", "parts"), [
    ("http:requests_total", "counter", ("':'", "recording rules")),
    ("job:rate5m", "gauge", ("':'", "recording rules")),
    ("http-requests_total", "counter", ("'-'", "ASCII letters, digits and '_'")),
    ("a b", "gauge", ("' '",)),
    ("héllo", "gauge", ("'é'",)),
    ("", "gauge", ("metric name is empty",)),
    ("1st_total", "counter", ("starts with a digit", "start with a letter or '_'")),
    ("__hits_total", "counter", ("starts with '__'", "reserved")),
    ("__depth", "gauge", ("starts with '__'",)),
    ("noop_hits_total", "counter", ("'noop_'", "noop's own metrics")),
    ("noop_depth", "gauge", ("'noop_'",)),
    ("requests", "counter", ("counter 'requests'", "'_total'", "e.g. requests_total")),
    ("requests_count", "counter", ("'_total'", "e.g. requests_count_total")),
    ("_total", "counter", ("'_total'", "e.g. hits_total")),
    ("depth_total", "gauge", ("gauge 'depth_total'", "only counters", "drop the suffix")),
    ("seconds_total", "histogram", ("histogram 'seconds_total'", "only counters")),
    ("depth_count", "gauge", ("'_count'", "reserved for the series of histograms")),
    ("depth_sum", "gauge", ("'_sum'", "reserved")),
    ("depth_bucket", "gauge", ("'_bucket'", "reserved")),
    ("depth_created", "gauge", ("'_created'", "reserved")),
    ("seconds_count", "histogram", ("histogram 'seconds_count'", "'_count'")),
    ("seconds_sum", "histogram", ("'_sum'",)),
    ("seconds_bucket", "histogram", ("'_bucket'",)),
    ("seconds_created", "histogram", ("'_created'",)),
    ("x", "summary", ("unknown metric kind 'summary'", "counter, gauge, histogram")),
])
def test_metric_name_rejected(name: str, kind: str, parts: tuple[str, ...]) -> None:
    problem = metric_name_problem(name, kind)
    assert problem is not None
    for part in parts:
        assert part in problem
    assert "\n" not in problem


@pytest.mark.parametrize("name", ["method", "_x", "Method2", "le_bucket", "Le", "quantiles",
                                  "_"])
def test_label_name_accepted(name: str) -> None:
    assert label_name_problem(name) is None


@pytest.mark.parametrize(("name", "parts"), [
    ("le", ("label name 'le' is reserved", "histograms")),
    ("quantile", ("label name 'quantile' is reserved", "summaries")),
    ("__name__", ("starts with '__'", "reserved")),
    ("__x", ("starts with '__'",)),
    ("a:b", ("label name 'a:b' has ':'",)),
    ("a-b", ("has '-'", "ASCII letters, digits and '_'")),
    ("é", ("has 'é'",)),
    ("1a", ("starts with a digit",)),
    ("", ("label name is empty",)),
])
def test_label_name_rejected(name: str, parts: tuple[str, ...]) -> None:
    problem = label_name_problem(name)
    assert problem is not None
    for part in parts:
        assert part in problem


@pytest.mark.parametrize("pattern", ["GET|POST", "[a-z]+", "", ".*", r"\d{1,3}", "(?i)get"])
def test_regex_accepted(pattern: str) -> None:
    assert regex_problem(pattern) is None


@pytest.mark.parametrize(("pattern", "parts"), [
    ("(", ("invalid regular expression '('", "missing )")),
    ("[z-a]", ("'[z-a]'", "bad character range")),
    ("*", ("nothing to repeat",)),
    ("(?P<1>x)", ("bad character in group name",)),
    ("a{99999999999}", ("repetition number is too large",)),
    ("(\nGET", ("missing )", "line 1")),  # one line even for a pattern over two
])
def test_regex_rejected(pattern: str, parts: tuple[str, ...]) -> None:
    problem = regex_problem(pattern)
    assert problem is not None
    for part in parts:
        assert part in problem
    assert problem.count("\n") == 0
