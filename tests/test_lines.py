"""`noop lines` and `noop vars FUNCTION:LINE` against llvm-dwarfdump and readelf.

On the lines program in Go (1.19 and the newest), C (GCC at -O0 and -O2, clang at
-O2) and Rust (a release build with debug info): a function's probeable lines and
their statement addresses are the line table's statement rows in the function's own
code; the calls inlined on each line are its inlined copies' call lines; and at each
statement address of a line the values available, and where each is there, are the
DIE tree's (the innermost function or inlined copy holding the address, its blocks
holding it, each location list at the address, the frame address from readelf's
call-frame table).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from harness.programs import LINES_CLAMP as CLAMP
from harness.programs import LINES_PROCESS as PROCESS
from harness.programs import LINES_SOURCES as SOURCES
from harness.programs import PROGRAMS, go_build, go_toolchain
from oracles import lines as oracle

# Lines a probe in process would be put on, by their marker comment.
MARKERS = ("for", "cost", "and", "accepted", "rejected", "return")


@pytest.fixture
def program(lines_program: tuple[str, Path]) -> tuple[str, Path]:
    """(language, binary): each build of the lines program."""
    return lines_program


def test_lines_are_the_line_tables_statements(program: tuple[str, Path],
                                              noop_json: Any) -> None:
    lang, binary = program
    got = noop_json("lines", "--json", binary, PROCESS[lang])
    home = SOURCES[lang].name
    assert got["file"].endswith("/" + home)
    mine = {e["line"]: {s["address"] for s in e["sites"] if "in" not in s}
            for e in got["lines"] if e["file"] == got["file"]}
    want = oracle.stmt_sites(str(binary), PROCESS[lang], home)
    assert {n: a for n, a in mine.items() if a} == want
    root, _ = oracle.scopes_of(str(binary), PROCESS[lang])
    inlines = {e["line"] for e in got["lines"] if e["inlines"] and e["file"] == got["file"]}
    assert inlines == oracle.call_lines(root)
    text = SOURCES[lang].read_text().splitlines()
    for e in got["lines"]:
        if e["file"] == got["file"]:
            assert e["source"] == text[e["line"] - 1]
    # the lines a probe would name have a statement of their own in every build but
    # where the compiler merged them: what noop lists is what the table has
    assert mine[oracle.source_line(SOURCES[lang], "cost")] or lang == "c"


def _compare_vars(binary: Path, function: str, site: dict[str, Any]) -> int:
    """Assert noop's values at a site are the oracle's; return how many were compared
    (the oracle does not evaluate every form)."""
    want = oracle.vars_at(str(binary), function, site["address"])
    mine = {v["name"]: v for v in site["vars"]}
    compared = 0
    for name, where in want.items():
        assert name in mine, (site["address"], name, sorted(mine))
        got = mine[name]["location"]
        if where == "unsupported":
            continue
        compared += 1
        placed = [p for p in got or [] if not p.get("optimized_out")]
        assert (placed or None) == (where or None), (hex(site["address"]), name, got, where)
        if got is None:
            assert mine[name].get("note"), name
    for name, v in mine.items():
        if name not in want:
            assert v["location"] is None and v.get("note"), (name, v)
    return compared


def test_vars_at_a_line_are_the_dies(program: tuple[str, Path], noop_json: Any) -> None:
    lang, binary = program
    compared = 0
    for marker in MARKERS:
        number = oracle.source_line(SOURCES[lang], marker)
        want = oracle.stmt_sites(str(binary), PROCESS[lang], SOURCES[lang].name).get(number)
        if not want:
            continue  # no statement of its own here: test_lines_are_... checked that
        got = noop_json("vars", "--json", binary, f"{PROCESS[lang]}:{number}")
        # the statements; beside them, where a line probe counts passes when that is
        # not a statement (what it reads there: test_line_vars)
        stmts = [s for s in got["sites"] if s.get("statement", True)]
        assert {s["address"] for s in stmts} == want
        for site in stmts:
            assert site["line"] == number and site["function"] == PROCESS[lang]
            compared += _compare_vars(binary, PROCESS[lang], site)
    assert compared >= 5  # clang -O2 keeps the fewest: six


def test_file_line_inside_inlined_copies(program: tuple[str, Path], noop_json: Any) -> None:
    """FILE:LINE finds a line of the inlined helper in each copy, and the helper's own
    values there (not its caller's)."""
    lang, binary = program
    number = oracle.source_line(SOURCES[lang], "clamp-low")
    want = {r.address for r in oracle.line_rows(str(binary))
            if r.stmt and r.line == number and r.file == SOURCES[lang].name}
    got = noop_json("vars", "--json", binary, f"{SOURCES[lang].name}:{number}")
    stmts = [s for s in got["sites"] if s.get("statement", True)]
    assert {s["address"] for s in stmts} == want
    for site in stmts:
        assert site["function"] == CLAMP[lang]
        if site.get("inlined_into"):
            assert site["inlined_into"] == PROCESS[lang]
            _compare_vars(binary, PROCESS[lang], site)
            assert {v["name"] for v in site["vars"]} >= {"v", "hi"}


def test_source_from_another_directory(go_lines: Path, noop: Any, tmp_path: Path) -> None:
    """--source DIR: the text is read from there (the longest tail of the binary's path
    found under DIR), not from where the binary was built."""
    copy = tmp_path / "lines" / "main.go"
    copy.parent.mkdir()
    shutil.copy(SOURCES["go"], copy)
    text = copy.read_text().replace("// at: and", "// at: and (the copy)")
    copy.write_text(text)
    done = noop("lines", go_lines, "main.process", "--source", tmp_path)
    assert done.returncode == 0, done.stderr
    assert "(the copy)" in done.stdout


@pytest.mark.parametrize("where, says", [
    ("main.process:45", "has no code"),
    ("main.process:9999", "has no code in the binary"),
    ("nosuch.go:10", "no code of the binary comes from a file of that name"),
    ("mian.go:47", "did you mean"),
    ("main.nosuch:10", "not found"),
    ("main.process:0", "is not FUNCTION:LINE"),
])
def test_bad_lines_are_one_line(go_lines: Path, noop: Any, where: str, says: str) -> None:
    done = noop("vars", go_lines, where)
    assert done.returncode != 0
    assert says in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr


def test_unavailable_local_says_where_it_is(go_lines: Path, noop_json: Any) -> None:
    """A local that no location covers at the line is "not available here", with the
    lines where it is."""
    number = oracle.source_line(SOURCES["go"], "cost")
    got = noop_json("vars", "--json", go_lines, f"main.process:{number}")
    notes = {v["name"]: v.get("note", "") for s in got["sites"] for v in s["vars"]
             if v["location"] is None}
    assert any("not available here" in n for n in notes.values()), notes


def test_builds_without_lines_say_what_would_help(rust_ledger_nodebug: Path,
                                                  noop: Any) -> None:
    """A build with no line table (Cargo's release default) says why in one line; a
    stripped Go binary has its pclntab's (test_stripped_go_lines_come_from_pclntab)."""
    for args in (("lines", rust_ledger_nodebug, "ledger::classify"),
                 ("vars", rust_ledger_nodebug, "main.rs:10")):
        done = noop(*args)
        assert done.returncode == 1, done.stderr
        line = done.stderr.strip()
        assert len(line.splitlines()) == 1 and "Traceback" not in line, line
        assert "symbol table only" in line, line


@pytest.fixture(scope="module", params=["1.19", "newest"])
def go_lines_twins(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
                   ) -> tuple[Path, Path]:
    """The Go lines program and its stripped twin (-ldflags='-s -w'), one toolchain."""
    go = go_toolchain(request.param)
    out = tmp_path_factory.mktemp(f"lines-twins-{request.param}")
    plain = go_build(go, out / "lines", out / "gocache", PROGRAMS / "go" / "lines")
    stripped = go_build(go, out / "lines-stripped", out / "gocache", PROGRAMS / "go" / "lines",
                        ("-ldflags=-s -w",))
    return plain, stripped


def test_stripped_go_lines_come_from_pclntab(go_lines_twins: tuple[Path, Path],
                                             noop_json: Any) -> None:
    """A stripped Go binary's lines, read from pclntab, are its unstripped twin's: every
    address noop lists for a line has that line in the twin's DWARF line table, the
    lines with code are the twin's, and the calls inlined on each line are too; a line
    probe there is refused (pclntab marks no statements) in one line."""
    plain, stripped = go_lines_twins
    got = noop_json("lines", "--json", stripped, "main.process")
    assert got["file"].endswith("/main.go")
    rows = [r for r in oracle.line_rows(str(plain)) if r.file == "main.go"]
    root, _ = oracle.scopes_of(str(plain), "main.process")
    inlined = oracle.inlined_ranges(root)
    own = [r for r in rows if root.covers(r.address)
           and not any(lo <= r.address < hi for lo, hi in inlined)]
    starts = sorted({r.address for r in oracle.line_rows(str(plain))})

    def line_at(address: int) -> int:
        at = max(a for a in starts if a <= address)
        return [r.line for r in oracle.line_rows(str(plain)) if r.address == at][-1]

    mine = {e["line"]: [int(s["address"]) for s in e["sites"]] for e in got["lines"]
            if e["file"] == got["file"] and e["sites"]}
    assert mine, got
    for line, addresses in mine.items():
        assert all(line_at(a) == line for a in addresses), (line, addresses)
    assert set(mine) == {r.line for r in own if r.line}
    inlines = {e["line"] for e in got["lines"] if e["inlines"] and e["file"] == got["file"]}
    assert inlines == oracle.call_lines(root)
    spec_text = (f"targets: {{t: {{binary: {stripped}}}}}\n"
                 "probes: [{name: p, line: 'main.go:51'}]\n")
    from agent.config import probes as spec
    from agent.config.reader import SpecError
    from agent.plan import resolve
    with pytest.raises(SpecError) as info:
        resolve.resolve(spec.parse(spec_text, "p.yaml"))
    (problem,) = info.value.problems
    assert "marks no statements" in problem.message, problem.message
