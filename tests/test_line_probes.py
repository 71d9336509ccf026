"""Probes at source lines, against what the program computed.

The lines program (Go 1.19 and newest, GCC -O0/-O2, clang -O2, Rust release) prints,
per item, what process computed. A probe on each marked line (the for header, a line
with a statement, the && condition, each branch, the call of the inlined clamp, and
the line inside clamp, inlined or not) must hit once per pass through the line: the
for header once per iteration and once more for the exit test, the condition once per
item, each branch once per item taking it; and the locals each reads must equal what
the program had. Where noop refuses a line or a value, the refusal must be true by
the oracle (llvm-dwarfdump): a line with no statement row and no inlined call, a
value with no location at the address it names. Privileged: real BPF.
"""

from __future__ import annotations

import re
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from harness.noop import no_probe_left, tracing
from harness.programs import LINES_CLAMP as CLAMP
from harness.programs import LINES_PROCESS as PROCESS
from harness.programs import LINES_SOURCES as SOURCES
from oracles import lines as oracle

ROUNDS = 4  # items per round: 3, 4, 5, 3
LIMIT = 60
# marker -> (the function whose line it is, the values read: name -> the local, and
# the item's field it must equal; None: the probe's own check)
PROBES: dict[str, tuple[str, dict[str, str]]] = {
    "for": ("process", {"round": "round"}),
    "cost": ("process", {}),
    "clamp-call": ("process", {}),
    "and": ("process", {"cost": "cost", "clamped": "clamped"}),
    "accepted": ("process", {"clamped": "clamped"}),
    "rejected": ("process", {}),
    "clamp-low": ("clamp", {"v": "cost"}),
}


def _spec(binary: Path, lang: str, probes: dict[str, dict[str, str]]) -> str:
    name = SOURCES[lang].name
    return yaml.safe_dump({"targets": {"lines": {"binary": str(binary)}}, "probes": [
        {"name": marker.replace("-", "_"),
         "line": f"{name}:{oracle.source_line(SOURCES[lang], marker)}",
         **({"values": values} if values else {})}
        for marker, values in probes.items()]})


def _resolved(binary: Path, lang: str, marker: str, values: dict[str, str]
              ) -> tuple[dict[str, str] | None, list[str]]:
    """The values the probe on ``marker`` keeps once noop's refusals (each checked
    against the oracle) are taken out, or None when the line itself is refused; and
    the refusals."""
    from agent.config import probes as spec
    from agent.config.reader import SpecError
    from agent.plan import resolve

    number = oracle.source_line(SOURCES[lang], marker)
    function = (PROCESS if PROBES[marker][0] == "process" else CLAMP)[lang]
    kept = dict(values)
    said: list[str] = []
    while True:
        try:
            resolve.resolve(spec.parse(_spec(binary, lang, {marker: kept})))
            return kept, said
        except SpecError as exc:
            (problem,) = exc.problems
            said.append(problem.message)
        message = said[-1]
        if "has no code" in message:
            rows = [r for r in oracle.line_rows(str(binary))
                    if r.line == number and r.file.endswith("/" + SOURCES[lang].name)
                    and r.stmt]
            root, _ = oracle.scopes_of(str(binary), PROCESS[lang])
            assert not rows and number not in oracle.call_lines(root), message
            return None, said
        m = re.match(r"(\w+): (\w+) at \S+ \((0x[0-9a-f]+)\): ", message)
        assert m and m.group(1) in kept, message  # nothing else may be refused
        pc = int(m.group(3), 16)
        root, _ = oracle.scopes_of(str(binary), PROCESS[lang])
        where = oracle.vars_at(str(binary), PROCESS[lang] if root.covers(pc) else function,
                               pc)
        assert where.get(m.group(2)) is None, (message, where.get(m.group(2)))
        del kept[m.group(1)]


def test_each_pass_through_a_line_is_one_hit(privileged: None,
                                             lines_program: tuple[str, Path],
                                             noop: Any, tmp_path: Path) -> None:
    lang, binary = lines_program
    probes: dict[str, dict[str, str]] = {}
    refused: list[str] = []
    for marker, (_function, values) in PROBES.items():
        kept, said = _resolved(binary, lang, marker, {v: v for v in values})
        refused += said
        if kept is not None:
            probes[marker] = kept
    # the shapes the test is for are there in every build
    assert {"for", "and", "clamp-low"} <= set(probes), refused
    # and values are read in every build (clang -O2 keeps fewest: round, clamped)
    assert sum(len(v) for v in probes.values()) >= 2, refused
    spec = tmp_path / "probes.yaml"
    spec.write_text(_spec(binary, lang, probes))
    checked = noop("check", "--json", "--config", spec)
    assert checked.returncode == 0, checked.stderr
    import json
    plan = json.loads(checked.stdout)
    for p in plan["probes"]:
        assert p["sites"] and all(s["why"].startswith("line ") for s in p["sites"]), p
    args = ["-rounds", str(ROUNDS), "-limit", str(LIMIT)] if lang == "go" \
        else [str(ROUNDS), "0", str(LIMIT)]
    with tracing(tmp_path, "--config", spec) as session:
        done = subprocess.run([str(binary), *args], capture_output=True, text=True,
                              timeout=60, check=True)
        import time
        time.sleep(1.5)  # let noop drain the ring buffer
    assert session.exit == 0, session.stderr
    no_probe_left(session.pid)
    items = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(items) == sum(3 + r % 3 for r in range(ROUNDS))
    hits: dict[str, list[dict[str, Any]]] = {}
    for line in session.lines:
        hits.setdefault(line["probe"], []).append(line.get("values", {}))
    per_round = Counter(i["round"] for i in items)
    want = {
        "for": [{"round": r} for r in range(ROUNDS) for _ in range(per_round[r] + 1)],
        "cost": [{} for _ in items],
        "clamp-call": [{} for _ in items],
        "and": [{"cost": i["cost"], "clamped": i["clamped"]} for i in items],
        "accepted": [{"clamped": i["clamped"]} for i in items if i["accepted"]],
        "rejected": [{} for i in items if not i["accepted"]],
        "clamp-low": [{"v": i["cost"]} for i in items],
    }
    for marker, values in probes.items():
        got = [{k: h[k] for k in values} for h in hits.get(marker.replace("-", "_"), [])]
        expected = [{k: w[k] for k in values} for w in want[marker]]
        assert got == expected, (marker, refused)


def _problems(binary: Path, probes: str) -> list[str]:
    from agent.config import probes as spec
    from agent.config.reader import SpecError
    from agent.plan import resolve

    text = f"targets: {{t: {{binary: {binary}}}}}\nprobes:\n{probes}"
    with pytest.raises(SpecError) as info:
        resolve.resolve(spec.parse(text, "p.yaml"))
    return [f"{p.message} ({p.hint})" if p.hint else p.message for p in info.value.problems]


def test_bad_lines_and_values_say_why(go_lines: Path) -> None:
    """Each bad line or value: one line saying what is wrong and what is there."""
    src = SOURCES["go"]
    blank = next(n for n, t in enumerate(src.read_text().splitlines(), 1)
                 if t.startswith("// clamp is small"))
    cost = oracle.source_line(src, "cost")
    both = oracle.source_line(src, "and")
    got = _problems(go_lines, f"""
  - {{name: nocode, line: "main.go:{blank}"}}
  - {{name: nofile, line: "mian.go:{both}"}}
  - {{name: nolocal, line: "main.go:{both}", values: {{x: nosuch}}}}
  - {{name: early, line: "main.go:{cost}", values: {{c: clamped}}}}
  - {{name: nofn, function: main.proces, line: {both}}}
""")
    assert got[0].startswith(f"main.go:{blank}: line {blank} has no code in the binary; "
                             "the nearest lines with code: "), got[0]
    assert got[1].startswith("mian.go: no code of the binary comes from a file of that "
                             "name (did you mean main.go"), got[1]
    assert re.match(rf"x: no parameter or local 'nosuch' is in scope at main\.go:{both} "
                        r"\(0x[0-9a-f]+\), or the compiler kept nothing of it", got[2]), got[2]
    # clamped is assigned on the line after: DWARF places it from the line of the && on
    assert re.match(rf"c: clamped at main\.go:{cost} \(0x[0-9a-f]+\): not available here "
                        rf"\(it is at lines? [0-9, ]*{both}[0-9, ]*\)", got[3]), got[3]
    assert got[4].startswith("function 'main.proces' not found (did you mean"), got[4]
    assert len(got) == 5
