"""The suite's result in one line, for all of ``./setup.sh test``'s passes together: the
tests, read from the JUnit XML each pytest pass writes, and the checks around them
(ruff, mypy, systemd-analyze), each counted as one.

    python tests/harness/results.py DIR [CHECK=STATUS ...]

It names every test and check that failed, then prints, last, ``N passed, N failed``
(``, N skipped`` after it when a test skipped), and writes that line to ``DIR/summary``
for tests/fresh-machine to print after it has removed its root. A test that failed
because a registry could not be reached (deploy/fetch-retry's ``registry trouble: ...``)
is not a failure of noop's: it is counted apart, ``N not run: registry trouble``.
Exit status: 0 when nothing failed, 75 when registry trouble alone kept tests from
running, 1 otherwise. Standard library only: it runs when anything else may be broken.
"""

from __future__ import annotations

import re
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

REGISTRY_TROUBLE = "registry trouble"  # how deploy/fetch-retry's last line starts
TEMPFAIL = 75
# A failure that is that line itself, as a test hands it on (pytest.fail(line)) and
# pytest writes it in the report's message: never a message that merely mentions it
# (a test of fetch-retry whose assertion failed is a failure).
_TROUBLE = re.compile(r'(failed on (setup|teardown) with ")?(Failed: )?registry trouble: '
                      r".* could not download after 3 tries")


@dataclass(frozen=True, slots=True)
class Outcome:
    name: str
    state: str  # passed, failed, skipped, registry
    why: str = ""


def outcomes(report: Path) -> list[Outcome]:
    """Each test case of one JUnit XML report once: failed if any of its phases failed."""
    try:
        root = ET.parse(report).getroot()
    except (OSError, ET.ParseError) as exc:  # a pass that died before writing it
        return [Outcome(report.name, "failed", f"no readable report: {exc}")]
    found = []
    for case in root.iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        bad = [e for e in case if e.tag in ("failure", "error")]
        if bad:
            why = " ".join((bad[0].get("message") or bad[0].text or "").split())
            state = "registry" if all(
                _TROUBLE.match(e.get("message") or "") for e in bad) else "failed"
            found.append(Outcome(name, state, why[:160]))
        elif case.find("skipped") is not None:
            found.append(Outcome(name, "skipped"))
        else:
            found.append(Outcome(name, "passed"))
    return found


def summary(states: Counter[str]) -> str:
    line = f"{states['passed']} passed, {states['failed']} failed"
    if states["skipped"]:
        line += f", {states['skipped']} skipped"
    if states["registry"]:
        line += f", {states['registry']} not run: {REGISTRY_TROUBLE}"
    return line


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    folder = Path(argv[0])
    everything = [o for report in sorted(folder.glob("*.xml")) for o in outcomes(report)]
    for check in argv[1:]:
        name, _, status = check.partition("=")
        everything.append(Outcome(name, "passed" if status == "0" else "failed",
                                  f"exit status {status}"))
    if not any(o.name.startswith("tests") or "::" in o.name for o in everything):
        everything.append(Outcome("the tests", "failed", f"no report in {folder}"))
    for o in everything:
        if o.state in ("failed", "registry"):
            print(f"{'FAILED' if o.state == 'failed' else 'NOT RUN'} {o.name}: {o.why}")
    states = Counter(o.state for o in everything)
    line = summary(states)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "summary").write_text(line + "\n")
    print(line)
    if states["failed"] or not states["passed"]:
        return 1
    return TEMPFAIL if states["registry"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
