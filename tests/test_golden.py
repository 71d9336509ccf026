"""The C noop generates, kept in tests/golden/: any change in what BCC is handed shows
in review as a diff of these files.

Each is what ``noop check --emit-c`` prints (``--run``: as ``noop run`` loads it) for
the example spec and for each preset on its example, built by the tests as setup.sh
builds it, with the kernel's facts fixed (no XMM helper, attach cookies), so that the
text depends on the binary and noop alone. After a change to codegen that is meant:
``NOOP_UPDATE_GOLDEN=1 python -m pytest tests/test_golden.py`` writes them again.
"""

from __future__ import annotations

import difflib
import os
import re
from pathlib import Path

import pytest

from agent.config import probes as spec
from agent.kernel import codegen
from agent.plan import resolve
from agent.presets import plans as presets

GOLDEN = Path(__file__).resolve().parent / "golden"
REPO = GOLDEN.parent.parent
ONE_COMPILER = pytest.mark.parametrize("example", ["go1.19"], indirect=True)


def _addresses_out(text: str) -> str:
    """The text with the code addresses its comments name replaced by ``0x…``: they
    move with every byte of the build (a client_golang patch release), while what
    the C does stays; offsets the code uses are kept."""
    return re.sub(r"(/\*.*?\*/)",
                  lambda m: re.sub(r"\b0x[0-9a-f]{5,}\b", "0x…", m.group(1)), text)


def _same(name: str, text: str) -> None:
    text = _addresses_out(text)
    path = GOLDEN / name
    if os.environ.get("NOOP_UPDATE_GOLDEN"):
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
    want = path.read_text() if path.is_file() else ""
    if text != want:
        diff = "".join(difflib.unified_diff(want.splitlines(True), text.splitlines(True),
                                            f"tests/golden/{name}", "generated now", n=2))
        pytest.fail(f"the generated C differs from tests/golden/{name} (if meant: "
                    f"NOOP_UPDATE_GOLDEN=1 python -m pytest tests/test_golden.py):\n"
                    f"{diff[:6000]}", pytrace=False)


@ONE_COMPILER
@pytest.mark.parametrize("mode", ["trace", "run"])
def test_the_example_spec(example: Path, mode: str) -> None:
    text = (REPO / "probes.yaml").read_text().replace("build/go-prometheus", str(example))
    plan = resolve.resolve(spec.parse(text, str(REPO / "probes.yaml")), False,
                           wait=mode == "run")
    _same(f"probes-{mode}.c", codegen.generate(plan, None, mode, True).text)


@ONE_COMPILER
def test_the_client_golang_preset(example: Path) -> None:
    plan = presets.plan(str(example))
    _same("client_golang-trace.c", codegen.generate(plan, None, "trace", True).text)


def test_the_prometheus_crate_preset(rust_example: Path) -> None:
    plan = presets.plan(str(rust_example))
    _same("rust_prometheus-trace.c", codegen.generate(plan, None, "trace", True).text)


@ONE_COMPILER
def test_the_process_is_not_in_the_c(example: Path) -> None:
    """A plan limited to one process (``--pid``) compiles to the same text as for every
    process: the process is set in a map when loading, so one compile serves all."""
    every = presets.plan(str(example))
    one = presets.plan(str(example), pid=os.getpid())
    assert one.targets[0].pid == os.getpid() and every.targets[0].pid is None
    for mode in ("trace", "run"):
        assert codegen.generate(one, None, mode, True).text == \
            codegen.generate(every, None, mode, True).text
