"""Damaged DWARF, section by section, in C (DWARF 5 and 4), Go and Rust binaries: every
DWARF section zeroed, cut, overwritten with random bytes; its units' lengths made to
overrun, versions and address sizes no compiler writes, abbreviations whose forms are
out of range or whose tables are cut, references past their unit and sibling pointers
that loop, line-table headers whose line_range or
opcode_base is 0, and random runs drawn by hypothesis. Each is asked ``funcs``,
``struct``, ``vars``, ``lines`` and ``check`` through the C walk and through the
pure-Python walk: only results or noop's one-line errors (never an internal error),
the same answer from both, each within ten times its time on the intact binary."""

from __future__ import annotations

import json
import os
import random
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness import elfbytes
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parent.parent

# What each binary is asked: (a funcs pattern, a struct, a function with parameters)
ASKS = {
    "c": ("*", "struct job", "handle"),
    "c4": ("*", "struct job", "handle"),
    "go": ("main.*", "main.Order", "main.manyInts"),
    "rust": ("layouts::*", "layouts::shapes::Header", "layouts::add_ints"),
}
UNIT_SECTIONS = (".debug_info", ".debug_line", ".debug_aranges", ".debug_rnglists",
                 ".debug_loclists", ".debug_addr", ".debug_str_offsets")
SLACK = 0.5  # seconds beside 10x: timings of a tenth of a second are noisy

# One process per walk, answering commands on files: in-process, fresh cache each time
_DRIVER = r"""
import contextlib, hashlib, io, json, os, sys, time
if sys.argv[1] == "python":
    sys.modules["agent.binary.dwarf._walk"] = None
from agent.binary.dwarf import native
assert native.BUILT == (sys.argv[1] == "c"), native.BUILT
from agent.cli import main
for line in sys.stdin:
    argv = json.loads(line)
    out, err = io.StringIO(), io.StringIO()
    t = time.monotonic()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 2
    took = time.monotonic() - t
    print(json.dumps({"code": code, "out": hashlib.sha256(out.getvalue().encode()).hexdigest(),
                      "err": err.getvalue()[-2000:], "took": took}), flush=True)
"""


class _Walk:
    def __init__(self, walk: str, cache: Path) -> None:
        env = {**os.environ, "NOOP_NO_CACHE": "1", "NOOP_CACHE_DIR": str(cache),
               "PYTHONPATH": str(REPO)}
        self.proc = subprocess.Popen([sys.executable, "-c", _DRIVER, walk], cwd=REPO, env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def ask(self, argv: list[str]) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(argv) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, f"the {argv} walk ended"
        return dict(json.loads(line))

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


@pytest.fixture(scope="module")
def walks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, _Walk]]:
    got = {w: _Walk(w, tmp_path_factory.mktemp(f"cache-{w}")) for w in ("c", "python")}
    try:
        yield got
    finally:
        for w in got.values():
            w.close()


@pytest.fixture(scope="module")
def binaries(tmp_path_factory: pytest.TempPathFactory, go_layouts_119: Path,
             rust_layouts: Path) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("damage-c")
    src = REPO / "tests" / "programs" / "c" / "layouts.c"
    out = {"go": go_layouts_119, "rust": rust_layouts}
    for name, flags in (("c", ["-gdwarf-5", "-O1"]), ("c4", ["-gdwarf-4", "-O2"])):
        subprocess.run(["gcc", "-g", *flags, "-o", d / name, src], check=True)
        out[name] = d / name
    return out


def _sections(data: bytes) -> dict[str, tuple[int, int, bool]]:
    """name -> (file offset, size, compressed) of each section."""
    return {name: (off, size, bool(flags & elfbytes.SHF_COMPRESSED)
                   or name.startswith(".zdebug"))
            for name, (off, size, flags) in elfbytes.sections(data).items()}


def _damages(data: bytes) -> Iterator[tuple[str, str, list[tuple[int, bytes]]]]:
    """(section, kind, patches) for every DWARF section: the kinds any section takes,
    and those of its header's fields."""
    rnd = random.Random(60)
    for name, (off, size, compressed) in _sections(data).items():
        if not name.startswith((".debug_", ".zdebug_")) or size < 8:
            continue
        yield name, "zero", [(off, bytes(size))]
        yield name, "random head", [(off, rnd.randbytes(min(32, size)))]
        at = rnd.randrange(0, size - min(64, size) + 1)
        yield name, "random run", [(off + at, rnd.randbytes(min(64, size)))]
        if compressed:
            yield name, "compressed size past", [(off + 8, struct.pack("<Q", 1 << 40))]
            yield name, "compressed type", [(off, struct.pack("<I", 7))]
            continue
        if name in UNIT_SECTIONS:
            yield name, "length overruns", [(off, struct.pack("<I", size + 64))]
            yield name, "length reserved", [(off, struct.pack("<I", 0xFFFFFFF3))]
            yield name, "64-bit length huge", [(off, struct.pack("<IQ", 0xFFFFFFFF, 1 << 60))]
            yield name, "version 99", [(off + 4, struct.pack("<H", 99))]
        version = struct.unpack_from("<H", data, off + 4)[0]
        if name == ".debug_info":
            addr = 7 if version >= 5 else 10
            yield name, "address size 3", [(off + addr, b"\x03")]
            abbrev = 8 if version >= 5 else 6
            yield name, "abbrev offset past", [(off + abbrev, struct.pack("<I", 1 << 30))]
            yield name, "abbrev offset mid-entry", [(off + abbrev, struct.pack("<I", 1))]
            yield name, "a DIE's abbrev code unknown", [(off + (12 if version >= 5 else 11),
                                                         b"\x7e")]
        if name == ".debug_abbrev":
            # the first abbreviation: code, tag, children, then (attribute, form) pairs
            yield name, "a form out of range", [(off + 4, b"\x7f")]
            yield name, "no end of table", [(off + size - 2, b"\x01\x01")]
        if name == ".debug_line":
            base = 12 if version >= 5 else 10
            fields = ["min_inst", *(["max_ops"] if version >= 4 else []), "default_is_stmt",
                      "line_base", "line_range", "opcode_base"]
            yield name, "line_range 0", [(off + base + fields.index("line_range"), b"\x00")]
            yield name, "opcode_base 0", [(off + base + fields.index("opcode_base"),
                                           b"\x00")]
            yield name, "header length past", [(off + base - 4, struct.pack("<I", size))]
        if name == ".debug_aranges":
            yield name, "unit offset past", [(off + 6, struct.pack("<I", 1 << 30))]
            yield name, "address size 3", [(off + 10, b"\x03")]


def _references(path: Path, data: bytes) -> Iterator[tuple[str, str, list[tuple[int, bytes]]]]:
    """A DIE's reference (DW_FORM_ref4) made to point past its unit, and a sibling
    pointer made to point at its own DIE (a walk that follows it loops), read with
    pyelftools from the intact binary (an uncompressed .debug_info only)."""
    from elftools.elf.elffile import ELFFile

    info = elfbytes.sections(data).get(".debug_info")
    if info is None or info[2] & elfbytes.SHF_COMPRESSED:
        return
    with path.open("rb") as f:
        dwarf = ELFFile(f).get_dwarf_info(relocate_dwarf_sections=False)
        ref = sibling = itself = None
        for cu in dwarf.iter_CUs():
            for die in cu.iter_DIEs():
                for name, a in die.attributes.items():
                    if a.form != "DW_FORM_ref4":
                        continue
                    if name == "DW_AT_sibling" and sibling is None:
                        sibling = (a.offset, die.offset - cu.cu_offset)
                    elif name != "DW_AT_sibling" and ref is None:
                        ref = a.offset
                    if name == "DW_AT_type" and die.tag == "DW_TAG_member" and itself is None:
                        itself = (a.offset, die.offset - cu.cu_offset)
                if ref is not None and sibling is not None and itself is not None:
                    break
            break
    if ref is not None:
        yield ".debug_info", "a reference past its unit", [
            (info[0] + ref, struct.pack("<I", 0x7FFFFFF0))]
    if sibling is not None:
        yield ".debug_info", "a sibling pointer to its own DIE", [
            (info[0] + sibling[0], struct.pack("<I", sibling[1]))]
    if itself is not None:
        yield ".debug_info", "a member whose type is itself", [
            (info[0] + itself[0], struct.pack("<I", itself[1]))]


def _commands(kind: str, path: Path, spec: Path) -> list[list[str]]:
    pattern, type_, function = ASKS[kind]
    return [["funcs", str(path), pattern], ["struct", str(path), type_],
            ["vars", str(path), function], ["lines", str(path), function],
            ["check", "--config", str(spec)]]


def _spec(path: Path, kind: str) -> Path:
    spec = path.with_suffix(".yaml")
    spec.write_text(f"targets:\n  t: {{binary: {path}}}\nprobes:\n  - name: p\n"
                    f"    function: {ASKS[kind][2]}\n")
    return spec


def _same_answers(walks: dict[str, _Walk], kind: str, path: Path, intact: dict[str, float],
                  what: str) -> list[str]:
    """What is wrong with the answers about the damaged ``path``: an internal error, the
    walks disagreeing, a run past ten times the intact one's."""
    wrong = []
    for argv in _commands(kind, path, _spec(path, kind)):
        got = {w: walk.ask(argv) for w, walk in walks.items()}
        for w, g in got.items():
            err = g["err"]
            if "internal error" in err or "Traceback" in err or g["code"] not in (0, 1, 2):
                wrong.append(f"{what}: {argv[0]} ({w} walk): {err.strip()[-300:]}")
            elif (g["code"] and not err.startswith("noop: ")) or err.count("\nnoop: ") > 3:
                wrong.append(f"{what}: {argv[0]} ({w} walk): not one line: {err[-300:]}")
            limit = 10 * intact[argv[0]] + SLACK
            if g["took"] > limit:
                wrong.append(f"{what}: {argv[0]} ({w} walk) took {g['took']:.2f} s, "
                             f"more than {limit:.2f}")
        c, p = got["c"], got["python"]
        if argv[0] == "check":  # its plan has the hit costs it measured each time
            c, p = {**c, "out": ""}, {**p, "out": ""}
        if (c["code"], c["out"], c["err"]) != (p["code"], p["out"], p["err"]):
            wrong.append(f"{what}: {argv[0]}: the walks disagree: C {c['code']} "
                         f"{c['err'].strip()[-200:]!r}, Python {p['code']} "
                         f"{p['err'].strip()[-200:]!r}")
    return wrong


def _intact(walks: dict[str, _Walk], kind: str, path: Path) -> dict[str, float]:
    """Each command's time on the intact binary (the slower walk's)."""
    out = {}
    for argv in _commands(kind, path, _spec(path, kind)):
        times = []
        for walk in walks.values():
            g = walk.ask(argv)
            assert g["code"] == 0, (argv, g["err"])
            times.append(g["took"])
        out[argv[0]] = max(times)
    return out


def _answers(walk: _Walk, kind: str, path: Path) -> dict[str, tuple[int, str]]:
    """(exit status, output digest) of each command but check (whose plan has the hit
    costs it measured)."""
    return {argv[0]: (g["code"], g["out"]) for argv in _commands(kind, path, _spec(path, kind))
            if argv[0] != "check" for g in [walk.ask(argv)]}


@pytest.mark.parametrize("kind", list(ASKS))
def test_every_damage_of_every_section_is_an_answer_or_one_line(
        kind: str, binaries: dict[str, Path], walks: dict[str, _Walk],
        tmp_path: Path) -> None:
    original = binaries[kind]
    data = original.read_bytes()
    intact_copy = tmp_path / f"{kind}-intact"
    intact_copy.write_bytes(data)
    intact = _intact(walks, kind, intact_copy)
    whole = _answers(walks["c"], kind, intact_copy)
    wrong: list[str] = []
    for i, (section, damage, patches) in enumerate(
            [*_damages(data), *_references(original, data)]):
        damaged = bytearray(data)
        for at, new in patches:
            damaged[at:at + len(new)] = new
        path = tmp_path / f"{kind}-{i}"
        path.write_bytes(bytes(damaged))
        wrong += _same_answers(walks, kind, path, intact, f"{section} {damage}")
        # .debug_aranges is an index only: where it is damaged the units' own ranges
        # answer, the same
        if section in (".debug_aranges", ".zdebug_aranges") and \
                _answers(walks["c"], kind, path) != whole:
            wrong.append(f"{section} {damage}: not the intact binary's answers")
    # (each answer's time is bounded by the intact one's, measured in the same run: a
    # total in seconds would measure the machine)
    assert not wrong, "\n".join(wrong[:20])


@pytest.mark.parametrize("kind", ["c", "go"])
def test_random_runs_of_any_section(kind: str, binaries: dict[str, Path],
                                    walks: dict[str, _Walk], tmp_path: Path) -> None:
    """hypothesis: a run of random bytes anywhere in a DWARF section."""
    data = binaries[kind].read_bytes()
    intact_copy = tmp_path / f"{kind}-intact"
    intact_copy.write_bytes(data)
    intact = _intact(walks, kind, intact_copy)
    sections = {n: (o, s) for n, (o, s, _c) in _sections(data).items()
                if n.startswith((".debug_", ".zdebug_")) and s}
    n = iter(range(1 << 30))

    @settings(max_examples=12, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.sampled_from(sorted(sections)), st.data())
    def check(section: str, draw: Any) -> None:
        off, size = sections[section]
        length = draw.draw(st.integers(1, min(256, size)))
        at = draw.draw(st.integers(0, size - length))
        new = draw.draw(st.binary(min_size=length, max_size=length))
        damaged = bytearray(data)
        damaged[off + at:off + at + length] = new
        path = tmp_path / f"{kind}-r{next(n)}"
        path.write_bytes(bytes(damaged))
        wrong = _same_answers(walks, kind, path, intact, f"{section} +{at:#x} random")
        path.unlink()
        assert not wrong, "\n".join(wrong)

    check()
