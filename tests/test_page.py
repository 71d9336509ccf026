"""Every page noop serves is one valid exposition (``agent.output.page``): parts that
collide in every way a generator can make them (a family in two parts, of one type or
two, a sample twice, a family named as another's ``_sum``, label values with quotes,
backslashes, newlines, carriage returns) give a page with each family's HELP and TYPE
once and each sample once, the first one served kept, and every drop counted."""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from agent.output.page import Pages

NAMES = ("a", "a_total", "a_sum", "a_count", "a_bucket", "b")
TYPES = ("counter", "gauge", "histogram", "summary", "untyped")
VALUES = ("x", 'q"uote', "back\\slash", "new\nline", "cr\rhere", "", "ü")


@dataclass(frozen=True)
class Fam:
    name: str
    type: str
    help: str
    samples: tuple[tuple[str, tuple[tuple[str, str], ...], int], ...]  # name, labels, v


def _escape(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(labels: tuple[tuple[str, str], ...]) -> str:
    inner = ",".join(f'{k}="{_escape(v)}"' for k, v in labels)
    return "{" + inner + "}" if inner else ""


def _text(fams: list[Fam]) -> bytes:
    out = []
    for f in fams:
        out.append(f"# HELP {f.name} {f.help}\n# TYPE {f.name} {f.type}\n")
        out += [f"{n}{_labels(lab)} {v}\n" for n, lab, v in f.samples]
    return "".join(out).encode()


@st.composite
def family(draw: st.DrawFn) -> Fam:
    name, kind = draw(st.sampled_from(NAMES)), draw(st.sampled_from(TYPES))
    label_sets = draw(st.lists(st.lists(st.tuples(st.sampled_from(("k", "pid", "target")),
                                                  st.sampled_from(VALUES)),
                                        max_size=2, unique_by=lambda kv: kv[0]),
                               max_size=4))
    samples = []
    for labels in label_sets:
        lab = tuple(sorted(labels))
        if kind == "histogram":
            for le in ("1", "+Inf"):
                samples.append((f"{name}_bucket", tuple(sorted((*lab, ("le", le)))),
                                draw(st.integers(0, 9))))
        if kind in ("histogram", "summary"):
            samples += [(f"{name}_sum", lab, draw(st.integers(0, 9))),
                        (f"{name}_count", lab, draw(st.integers(0, 9)))]
        else:
            samples.append((name, lab, draw(st.integers(0, 9))))
    return Fam(name, kind, draw(st.sampled_from(("help", "other help", ""))), tuple(samples))


def _parsed(page: bytes) -> tuple[list[tuple[str, str]], list[tuple[str, str, str]]]:
    """A page's headers (kind, family) and samples (family, key, value), in order."""
    headers, samples = [], []
    family = ""
    for line in page.decode().split("\n"):
        if m := re.fullmatch(r"# (HELP|TYPE) (\S+)(?: .*)?", line):
            headers.append((m.group(1), m.group(2)))
            family = m.group(2)
        elif line:
            key, _, value = line.rpartition(" ")
            samples.append((family, key, value))
    return headers, samples


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(family(), max_size=4), min_size=1, max_size=4))
def test_a_page_of_colliding_parts_is_one_valid_exposition(parts: list[list[Fam]]) -> None:
    pages = Pages()
    page = pages.unique([_text(p) for p in parts])
    headers, samples = _parsed(page)
    assert len(headers) == len(set(headers))  # each family's HELP and TYPE once
    keys = [k for _f, k, _v in samples]
    assert len(keys) == len(set(keys))  # each sample once
    typed = {}
    for line in page.decode().split("\n"):
        if m := re.fullmatch(r"# TYPE (\S+) (\S+)", line):
            typed[m.group(1)] = m.group(2)
    assert {f for which, f in headers if which == "HELP"} == set(typed)
    mine = [s for s in samples if s[0] != "noop_page_dropped_samples_total"]
    # The first of each sample in the families served with that name and type, and
    # every one of them: none other dropped.
    first: dict[str, str] = {}
    given_n = 0
    for f in (f for p in parts for f in p):
        given_n += len(f.samples)
        if typed.get(f.name) == f.type:
            for n, lab, v in f.samples:
                first.setdefault(f"{n}{_labels(lab)}", str(v))
    assert {k: v for _f, k, v in mine} == first
    dropped = {dict(re.findall(r'(\w+)="([^"]*)"', k))["reason"]: int(v)
               for f, k, v in samples if f == "noop_page_dropped_samples_total"}
    assert sum(dropped.values()) == given_n - len(mine)
    assert dropped == pages.dropped | {r: 0 for r in ("duplicate", "family")
                                        if r not in pages.dropped}
    promtool = shutil.which("promtool")
    assert promtool, "promtool not found: run ./setup.sh"
    lint = subprocess.run([promtool, "check", "metrics"], input=page, capture_output=True)
    assert b"error while linting" not in lint.stdout + lint.stderr, lint


def test_what_is_dropped_is_said_once_a_family(capsys: object) -> None:
    import pytest
    assert isinstance(capsys, pytest.CaptureFixture)
    pages = Pages()
    twice = b"# HELP x_total x\n# TYPE x_total counter\nx_total 1\nx_total 2\n"
    for _ in range(3):
        page = pages.unique([twice, twice])
    assert page.count(b"\nx_total ") == 1 and b"x_total 1\n" in page
    assert pages.dropped == {"duplicate": 9}
    said = [line for line in capsys.readouterr().err.splitlines() if "x_total" in line]
    assert len(said) == 1 and "the first one served is kept" in said[0], said


def test_a_page_without_type_lines_is_a_family_per_sample_name() -> None:
    """As VictoriaMetrics/metrics writes a page (no HELP, no TYPE): each sample name an
    untyped family of its own, in the order met, its samples together; samples after a
    TYPE line are that family's."""
    from agent.output.page import text_families

    page = (b'a_total{x="1"} 1\nb_seconds_bucket{vmrange="1...2"} 3\nb_seconds_sum 4\n'
            b'a_total{x="2"} 2\nb_seconds_count 3\n# TYPE c gauge\nc 5\n')
    got = [(n, t, k) for n, _h, t, _text, k in text_families(page)]
    assert got == [(b"a_total", b"untyped", [b'a_total{x="1"}', b'a_total{x="2"}']),
                   (b"b_seconds_bucket", b"untyped", [b'b_seconds_bucket{vmrange="1...2"}']),
                   (b"b_seconds_sum", b"untyped", [b"b_seconds_sum"]),
                   (b"b_seconds_count", b"untyped", [b"b_seconds_count"]),
                   (b"c", b"gauge", [b"c"])]
