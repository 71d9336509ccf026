"""A line probe reads every value ``noop vars FILE:LINE`` places where it counts passes.

For every line of the test programs' functions (the lines program in each language and
compiler, and tests/programs/go/locals, whose strings, slice and struct live in stack
slots, a string's two words apart or one in a register), every parameter and local
that ``noop vars`` gives a location at each site where a line probe counts the line's
passes (a statement of the line, or the instruction leading into one) is turned into the
selectors that read it (an integer or a pointer whole, a string, ``len()`` of a string
or slice, each integer and string field of a struct) wherever the pieces it needs are
there; a line probe with all of them must resolve. Then, on the locals program, what
such probes read at each marked line must equal what the program had there.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

from harness.linevalues import every_line, line_values
from harness.noop import no_probe_left, tracing
from harness.programs import LINES_PROCESS, PROGRAMS

LOCALS = PROGRAMS / "go" / "locals" / "main.go"
def _resolves(binary: Path, probes: dict[str, dict[str, str]]) -> list[str]:
    """The problems resolving one probe per line with those values gives."""
    from agent.config import probes as spec
    from agent.config.reader import SpecError
    from agent.plan import resolve

    text = json.dumps({"targets": {"t": {"binary": str(binary)}}, "probes": [
        {"name": f"l{n}", "line": where, **({"values": v} if v else {})}
        for n, (where, v) in enumerate(probes.items())]})
    try:
        resolve.resolve(spec.parse(text, "p.yaml"))
    except SpecError as exc:
        return [str(p) for p in exc.problems]
    return []


def _all_read(program: Path, function: str) -> None:
    lines = every_line(program, function)
    assert sum(len(v) for v in lines.values()) >= 3, lines
    problems = _resolves(program, lines)
    assert not problems, "\n".join(problems)


def test_every_placed_value_is_read_by_a_line_probe(lines_program: tuple[str, Path]) -> None:
    """Every line of the lines program's function, in each language and compiler: a
    probe reading all that noop vars places there resolves."""
    lang, binary = lines_program
    _all_read(binary, LINES_PROCESS[lang])


def test_every_placed_local_in_stack_slots_is_read(go_locals: Path) -> None:
    """The same on the locals program's function, whose strings, slice and struct live
    in stack slots and registers mixed."""
    _all_read(go_locals, "main.handle")


# What the locals program prints at a marked line, for the selectors a probe reads.
_PRINTED = {"name": "name", "n": "n", "status": "status", "label": "label",
            "total": "total", "p_X": "x", "p_Tag": "tag", "len_parts": "parts"}


def _marked(source: Path) -> dict[str, int]:
    return {m.group(1): n for n, text in enumerate(source.read_text().splitlines(), 1)
            if not text.lstrip().startswith("//") and (m := re.search(r"// at: (\w+)$", text))}


def test_what_a_line_probe_reads_is_what_the_program_had(
        privileged: None, go_locals: Path, tmp_path: Path) -> None:
    """At each marked line of the locals program, every value noop vars places there
    (strings in stack slots, a string split between a slot and a register, a struct's
    fields, a slice's length) is read, per call, as the program printed it."""
    marks = _marked(LOCALS)
    probes = {f"main.go:{line}": line_values(go_locals, f"main.go:{line}")
              for line in marks.values()}
    read = {k for v in probes.values() for k in v}
    # the shapes the test is for are read in both toolchains' builds
    assert {"name", "status", "label", "len_status", "p_Tag"} <= read, probes
    spec = tmp_path / "p.yaml"
    spec.write_text(json.dumps({"targets": {"t": {"binary": str(go_locals)}}, "probes": [
        {"name": mark, "line": f"main.go:{line}", "values": probes[f"main.go:{line}"]}
        for mark, line in marks.items()]}))
    with tracing(tmp_path, "--config", spec) as session:
        done = subprocess.run([str(go_locals), "-calls", "6"], capture_output=True,
                              text=True, timeout=60, check=True)
        time.sleep(1.5)  # let noop drain the ring buffer
    assert session.exit == 0, session.stderr
    no_probe_left(session.pid)
    printed = [json.loads(line) for line in done.stdout.splitlines()]
    for mark in marks:
        want = [p for p in printed if p["at"] == mark]
        got = [h.get("values", {}) for h in session.lines if h["probe"] == mark]
        assert len(got) == len(want) == 6, (mark, got)
        for g, w in zip(got, want, strict=True):
            for key, value in g.items():
                if key in _PRINTED:
                    assert value == w[_PRINTED[key]], (mark, key, g, w)
                elif key.startswith("len_") and key[4:] in _PRINTED:
                    assert value == len(w[_PRINTED[key[4:]]]), (mark, key, g, w)
