"""Every number a user writes goes through one parser (agent.numbers): ASCII decimal
digits only. Every Unicode decimal digit that is not ASCII, other numeric characters,
every whitespace character, underscores and YAML 1.1's octal, sexagesimal and hex
forms are fed to each place a number is read — the parser itself, every numeric flag,
every number of a spec (and its YAML), the web config's YAML, the watchdog's
environment — and each is refused naming the text, or (a spec's plain scalar that a
string key takes) kept as the text it is."""

from __future__ import annotations

import argparse
import sys
import unicodedata
from collections.abc import Callable

import pytest

from agent import cli, numbers
from agent.config import probes as spec
from agent.service.sdnotify import Notifier

# Every non-ASCII character Unicode gives a decimal digit value (Arabic-Indic,
# Devanagari, fullwidth, mathematical bold, ...), one of each value per script
DIGITS = [c for c in map(chr, range(0x80, sys.maxunicode + 1))
          if unicodedata.decimal(c, None) is not None]
# numeric characters that are not decimal digits, and whitespace Python's int() skips
NUMERIC = ["\u00b2", "\u00bd", "\u216b", "\u3007", "\u4e94", "\u0bf0", "\U00010107"]
SPACES = [c for c in map(chr, range(sys.maxunicode + 1)) if c.isspace()]
# forms of ASCII digits that are not a number here (YAML 1.1 reads the first four)
FORMS = ["010", "1:30", "1_000", "0x10", "0o17", "0b101", " 10", "10 ", "1 0", "1e", "nan",
         "inf", "infinity", "+", "", "٣"]


def _texts() -> list[str]:
    out = [*FORMS]
    for c in [*DIGITS, *NUMERIC]:
        out += [c, "1" + c]
    out += [c + "1" for c in SPACES] + ["1" + c for c in SPACES]
    return out


def test_there_are_hundreds_of_digits() -> None:
    assert len(DIGITS) > 600 and "\u0663" in DIGITS and "\uff13" in DIGITS
    assert all(int(c) == unicodedata.decimal(c) for c in DIGITS[:50])  # what int() takes


READERS: list[tuple[str, Callable[[str], object]]] = [
    ("integer", numbers.integer), ("decimal", numbers.decimal), ("address", numbers.address)]


@pytest.mark.parametrize(("name", "read"), READERS, ids=[n for n, _r in READERS])
def test_the_parser_refuses_every_one_naming_it(name: str, read: Callable[[str], object]
                                                ) -> None:
    for text in _texts():
        if name == "address" and text == "0x10":
            continue  # an address may be hex
        with pytest.raises(numbers.NotANumber) as got:
            read(text)
        message = str(got.value)
        assert repr(text) in message and "\n" not in message, message
    assert numbers.address("0x10") == 16


FLAGS: list[tuple[str, Callable[[str], object]]] = [
    ("--pid", cli._pid), ("--mirror-max-series", cli._count),
    ("--max-overhead", cli._share), ("--budget-window", cli._seconds),
    ("--rate", cli._rate), ("--measure", cli._duration), ("--calls", cli._positive),
    ("--address", cli._address)]


@pytest.mark.parametrize(("flag", "read"), FLAGS, ids=[f for f, _r in FLAGS])
def test_every_numeric_flag_refuses_every_one(flag: str, read: Callable[[str], object]
                                              ) -> None:
    for text in _texts():
        if flag == "--max-overhead":
            text += "%"
        if flag == "--address" and text == "0x10":
            continue
        with pytest.raises(argparse.ArgumentTypeError) as got:
            read(text)
        assert repr(text.strip("%") if flag != "--max-overhead" else text) in str(got.value) \
            or repr(text) in str(got.value), (flag, text, str(got.value))


def test_every_numeric_flag_is_wired_to_the_parser() -> None:
    """The flags above are the ones the command line gives those readers."""
    seen: dict[str, object] = {}
    parser = cli.parser()
    for action in _actions(parser):
        for option in action.option_strings:
            seen[option] = action.type
    for flag, read in FLAGS:
        assert seen.get(flag) is read, flag
    # and none reads a number with int or float
    assert not [o for o, t in seen.items() if t in (int, float)]


def _actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    out = list(parser._actions)
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            for sub in a.choices.values():
                out += _actions(sub)
    return out


# (the spec with NUMBER where the number goes, and the key a refusal names)
TARGET = "targets:\n  t: {binary: /x%s}\nprobes:\n  - name: a\n    function: f\n"
PLACES = [
    ("version: NUMBER\n" + TARGET % "", "version"),
    (TARGET % ", pid: NUMBER", "pid"),
    ("targets:\n  t: {binary: /x}\nprobes:\n  - name: a\n    match: 'f*'\n"
     "    max_sites: NUMBER\n", "max_sites"),
    (TARGET % "" + "    values: {s: {value: s, as: string, max: NUMBER}}\n", "max"),
    ("targets:\n  t: {binary: /x}\nprobes:\n  - name: a\n    line: 'main.go:NUMBER'\n",
     "line"),
    (TARGET % "" + "    values: {q: 'o.Items[NUMBER].Qty'}\n", "o.Items"),
    ("budget: 'NUMBER%'\n" + TARGET % "", "budget"),
    (TARGET % "" + "    values: {v: v}\n    metrics:\n      - {name: h, type: histogram, "
     "value: v, buckets: [1, NUMBER]}\n", "buckets"),
    (TARGET % "" + "    metrics:\n      - {name: c_total, type: counter, "
     "max_series: NUMBER}\n", "max_series"),
]


def _refusal(text: str) -> str | None:
    try:
        spec.parse(text, "p.yaml")
    except spec.SpecError as exc:
        return str(exc)
    return None


@pytest.mark.parametrize(("template", "key"), PLACES, ids=[k for _t, k in PLACES])
def test_every_number_of_a_spec_refuses_every_one(template: str, key: str) -> None:
    """Each text where the spec wants a number: a refusal, one line, at that key (the
    YAML's plain scalar kept as text, then refused as no number)."""
    wrong = []
    for text in _texts():
        if key == "line" and (":" in text or text.strip() != text):
            continue  # main.go:1:30 is line 30 of a file main.go:1; line: is stripped
        if not text or "\n" in text or "\x85" in text or "\u2028" in text or "\u2029" in \
                text or "'" in text or any(unicodedata.category(c) == "Cc" for c in text):
            continue  # not writable in a one-line YAML scalar
        quoted = "'" in template.split("NUMBER")[0].rsplit("\n", 1)[-1]
        said = _refusal(template.replace("NUMBER", text if quoted or text.strip() == text
                                         else f"'{text}'"))
        if said is None or key not in said:
            wrong.append((text, said))
    assert not wrong, wrong[:5]


def test_yaml_keeps_11s_forms_as_the_text_written() -> None:
    load = numbers.yaml_loader()
    import yaml
    got = yaml.load("a: 010\nb: 1:30\nc: 1_000\nd: 0x10\ne: 10\nf: 1.5\ng: .inf\n",
                    Loader=load)
    assert got == {"a": "010", "b": "1:30", "c": "1_000", "d": "0x10", "e": 10, "f": 1.5,
                   "g": float("inf")}
    with pytest.raises(yaml.YAMLError):
        yaml.load("a: !!int 010\n", Loader=load)


def test_a_label_value_written_010_is_010() -> None:
    """A plain 010 where a spec takes text is that text, not 8."""
    got = spec.parse(TARGET % "" + "    values: {v: v}\n    metrics:\n      - {name: c_total, "
                     "type: counter, labels: {l: {value: v, map: {a: 010}}}}\n", "p.yaml")
    rule = got.probes[0].metrics[0].labels[0].rule
    assert dict(rule.map) == {"a": "010"}


def test_the_watchdog_reads_ascii_digits_only() -> None:
    assert Notifier({"WATCHDOG_USEC": "2000000"}).watchdog == 1.0
    for text in _texts():
        assert Notifier({"WATCHDOG_USEC": text}).watchdog is None, text
