"""Property-based: whatever bytes or text noop is given, it answers, or it raises one of
its own errors (a NoopError, which the command line prints as one line) — never
another exception, which would be an "internal error".

Specs: the example's probes.yaml mutated byte by byte, and specs built from the
format's own keys with values of every YAML type, through the loader and the
resolver. Binaries: a small C program with debug info, with random bytes of its ELF
header, section table and DWARF sections changed, through funcs, struct and vars.
"""

from __future__ import annotations

import contextlib
import os
import struct
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from harness import elfbytes
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.binary.dwarf import intact
from agent.config import probes as spec
from agent.config.schema import PROBE_KEYS
from agent.errors import NoopError
from agent.plan import resolve
from agent.tools import inspect

REPO = Path(__file__).resolve().parent.parent
SETTINGS = settings(max_examples=60, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])

SOURCE = """\
struct point { int x; long y; const char *name; };
struct shape { struct point corners[4]; unsigned n; double area; };
__attribute__((noinline)) long area(struct shape *s, int scale) {
    return s->corners[0].y * scale + (long)s->area + s->n;
}
int main(int argc, char **argv) {
    struct shape s = {{{1, 2, "a"}}, 1, 2.5};
    (void)argv;
    return (int)area(&s, argc);
}
"""


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    d = tmp_path_factory.mktemp("fuzz")
    (d / "s.c").write_text(SOURCE)
    subprocess.run(["gcc", "-g", "-O1", "-o", d / "s", d / "s.c"], check=True)
    return (d / "s").read_bytes()


def _sections(elf: bytes) -> dict[str, tuple[int, int]]:
    """name -> (offset, size) from the section table (an intact binary's)."""
    out = {name: (off, size) for name, (off, size, _flags) in elfbytes.sections(elf).items()}
    shoff, = struct.unpack_from("<Q", elf, 0x28)
    shnum, = struct.unpack_from("<H", elf, 0x3C)
    out["(elf header)"] = (0, 64)
    out["(section table)"] = (shoff, 64 * shnum)
    return out


AREAS = ("(elf header)", "(section table)", ".debug_info", ".debug_abbrev", ".debug_str",
         ".debug_line", ".debug_loclists", ".debug_rnglists", ".symtab", ".strtab")


@st.composite
def mutations(draw: Any, elf: bytes) -> list[tuple[int, int]]:
    """A few (offset, new byte) in one of the areas noop reads."""
    where = _sections(elf)
    area = draw(st.sampled_from([a for a in AREAS if a in where and where[a][1]]))
    start, size = where[area]
    n = draw(st.integers(1, 8))
    return [(start + draw(st.integers(0, size - 1)), draw(st.integers(0, 255)))
            for _ in range(n)]


def _ask(path: Path, data: bytes, pattern: str | None = None, struct: str = "struct shape",
         function: str = "area") -> None:
    """``data`` as the binary at ``path``, asked funcs, struct and vars as the commands
    ask them: each a result or a NoopError."""
    path.write_bytes(data)
    os.utime(path)
    p = str(path)
    for call in (lambda: inspect.function_list(p, pattern),
                 lambda: inspect.struct_layout(p, struct),
                 lambda: inspect.function_vars(p, function)):
        with contextlib.suppress(NoopError):  # one of noop's errors: a line, exit 1 or 2
            call()


def test_damaged_binaries(small: bytes, tmp_path: Path,
                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NOOP_NO_CACHE", "1")
    path = tmp_path / "s"

    @SETTINGS
    @given(st.data())
    def check(data: Any) -> None:
        damaged = bytearray(small)
        for at, byte in data.draw(mutations(small)):
            damaged[at] = byte
        _ask(path, bytes(damaged))

    check()


def test_truncated_binaries(small: bytes, tmp_path: Path,
                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NOOP_NO_CACHE", "1")
    path = tmp_path / "s"

    @SETTINGS
    @given(st.integers(0, len(small) - 1))
    def check(size: int) -> None:
        _ask(path, small[:size])

    check()


# Sections whose damage changes names rather than structure: overwritten, they gave a
# listing of empty or garbled names, or "stripped", with exit 0.
NAMED = (".debug_str", ".debug_line_str", ".shstrtab")


@st.composite
def overwritten(draw: Any, elf: bytes) -> tuple[str, list[tuple[int, int]]]:
    """One of the ``NAMED`` sections, and (offset, byte) pairs that damage it as a
    class of damage does: a run of zeros, a run of random bytes, its last NUL gone."""
    where = _sections(elf)
    area = draw(st.sampled_from([a for a in NAMED if a in where and where[a][1] > 1]))
    start, size = where[area]
    kind = draw(st.sampled_from(("zeros", "garbage", "unterminated")))
    if kind == "unterminated":
        return area, [(start + size - 1, draw(st.integers(0x21, 0x7E)))]
    n = draw(st.integers(min(size, intact.RUN), min(size, 4096)))
    at = start + draw(st.integers(0, size - n))
    new = bytes(n) if kind == "zeros" else draw(st.binary(min_size=n, max_size=n))
    return area, list(enumerate(new, at))


def test_overwritten_names_are_named(small: bytes, tmp_path: Path,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A string section or the section-name table overwritten is named as damaged by
    every command (which section, what is wrong), never listed as empty names, nor
    taken for a stripped binary."""
    monkeypatch.setenv("NOOP_NO_CACHE", "1")
    path = tmp_path / "s"

    @SETTINGS
    @given(st.data())
    def check(data: Any) -> None:
        area, changes = data.draw(overwritten(small))
        damaged = bytearray(small)
        for at, byte in changes:
            damaged[at] = byte
        if damaged == small:
            return
        path.write_bytes(damaged)
        os.utime(path)
        p = str(path)
        for call in (lambda: inspect.function_list(p, None),
                     lambda: inspect.struct_layout(p, "struct shape"),
                     lambda: inspect.function_vars(p, "area")):
            with pytest.raises(NoopError) as caught:
                call()
            said = caught.value.message
            assert "damaged" in said and (area in said or "section" in said), said

    check()


# -- specs ------------------------------------------------------------------------------

def _resolve(text: str) -> None:
    try:
        loaded = spec.parse(text, "fuzz.yaml")
    except NoopError:
        return
    with contextlib.suppress(NoopError):
        resolve.resolve(loaded, False)


def test_mutated_example_spec(example: Path) -> None:
    """The example's probes.yaml, a few bytes changed, dropped or inserted."""
    text = (REPO / "probes.yaml").read_text().replace("build/go-prometheus", str(example))

    @SETTINGS
    @given(st.lists(st.tuples(st.integers(0, len(text) - 1), st.sampled_from(
        ["", " ", "\t", "\n", ":", "-", "[", "]", "{", "}", "'", '"', "$", "*", ".", "0",
         "\x00", "é", "~r0", "len(", ")", "#", "&a", "!!int "])), min_size=1, max_size=4))
    def check(edits: list[tuple[int, str]]) -> None:
        t = text
        for at, s in sorted(edits, reverse=True):
            t = t[:at] + s + t[at + 1:]
        _resolve(t)

    check()


SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
                    st.floats(allow_nan=True), st.text(max_size=12),
                    st.sampled_from(["main.placeOrder", "o.Items[0].SKU", "$duration",
                                     "len(o.Items)", "~r0", "exit", "counter", "*"]))


def _values(leaf: Any) -> Any:
    return st.recursive(leaf, lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.sampled_from(["read", "as", "max", "at", "name", "type",
                                         "value", "labels", "buckets", "x"]),
                        inner, max_size=3)), max_leaves=6)


def test_specs_of_every_shape(example: Path) -> None:
    """Specs made of the format's own keys, each with a value of any YAML type."""
    probe_keys = [k.name for k in PROBE_KEYS]

    @SETTINGS
    @given(st.dictionaries(st.sampled_from(probe_keys), _values(SCALARS), max_size=6),
           st.booleans())
    def check(probe: dict[str, Any], named: bool) -> None:
        if named:
            probe = {"name": "p", "function": "main.placeOrder", **probe}
        doc = {"version": 1, "targets": {"ex": {"binary": str(example)}}, "probes": [probe]}
        _resolve(yaml.safe_dump(doc, allow_unicode=True))

    check()


def test_damaged_go_metadata(stripped_example: Path, tmp_path: Path,
                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A stripped Go binary read from its runtime metadata: bytes of its pclntab, its
    type data (.rodata, .typelink) and its build info changed."""
    monkeypatch.setenv("NOOP_NO_CACHE", "1")
    whole = stripped_example.read_bytes()
    where = _sections(whole)
    areas = [a for a in (".gopclntab", ".rodata", ".typelink", ".go.buildinfo",
                         ".noptrdata") if a in where and where[a][1]]
    path = tmp_path / "example"

    @settings(SETTINGS, max_examples=8)
    @given(st.sampled_from(areas), st.data())
    def check(area: str, data: Any) -> None:
        start, size = where[area]
        damaged = bytearray(whole)
        for _ in range(data.draw(st.integers(1, 8))):
            damaged[start + data.draw(st.integers(0, size - 1))] = \
                data.draw(st.integers(0, 255))
        _ask(path, bytes(damaged), "main.*", "main.Order", "main.placeOrder")

    check()
