"""Two functions of one name: tests/programs/c/twins has a static ``twin`` in each of
its two files, local symbols of one name at two addresses (as rustc's copies of one
generic function in two codegen units can be). Both are listed, as nm lists them, the
second as ``twin@0xADDRESS``, and each can be probed by that name: a trace counts the
calls of each as the program made them."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from harness import builds
from harness.noop import tracing
from harness.programs import PROGRAMS, NoopRun, installed, run_build

from agent.binary.demangle import strip_suffix
from agent.binary.elf import ElfFile


@pytest.fixture(scope="module")
def same_names(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cc = installed("gcc")
    src = PROGRAMS / "c" / "twins"
    out = tmp_path_factory.mktemp("twins-c") / "twins"
    flags = ["-g", "-O1"]
    inputs = {"tool": builds.tool(str(cc)), "flags": flags, "sources": builds.tree(src),
              "env": builds.environment(cc)}
    return builds.kept("twins", inputs, lambda d: run_build(
        [str(cc), *flags, "-o", str(d / "twins"), str(src / "a.c"), str(src / "b.c")],
        cwd=d), out)


def _nm(binary: Path) -> list[int]:
    lines = subprocess.run(["nm", str(binary)], capture_output=True, text=True, check=True,
                           timeout=60).stdout.splitlines()
    return sorted(int(f[0], 16) for f in (x.split() for x in lines)
                  if len(f) == 3 and f[1] == "t" and f[2] == "twin")


def test_both_are_listed_as_nm_lists_them(same_names: Path, noop: NoopRun) -> None:
    addresses = _nm(same_names)
    assert len(addresses) == 2
    twins = sorted((s for s in ElfFile(str(same_names)).function_symbols()
                    if strip_suffix(s.name) == "twin"), key=lambda s: s.address)
    assert [s.address for s in twins] == addresses
    assert [s.name for s in twins] == ["twin", f"twin@{addresses[1]:#x}"]
    listed = noop("funcs", same_names, "twin*").stdout.splitlines()
    assert [int(x.split()[0], 16) for x in listed] == addresses


def test_each_is_probed_by_its_own_name(privileged: None, same_names: Path,
                                        tmp_path: Path) -> None:
    second = _nm(same_names)[1]
    spec = tmp_path / "probes.yaml"
    spec.write_text(f"targets: {{t: {{binary: {same_names}}}}}\nprobes:\n"
                    "  - {name: first, function: twin, values: {x: x}}\n"
                    f"  - {{name: second, function: 'twin@{second:#x}', values: {{x: x}}}}\n")
    with tracing(tmp_path, "--config", spec) as noop:
        done = subprocess.run([str(same_names), "-a", "4", "-b", "7"], capture_output=True,
                              text=True, check=True, timeout=60)
    assert noop.exit == 0, noop.stderr
    truth = json.loads(done.stdout)
    seen = {p: [x["values"]["x"] for x in noop.lines if x["probe"] == p]
            for p in ("first", "second")}
    # nm's first twin is a.c's (called from from_a -a times), the second b.c's.
    assert seen == {"first": list(range(truth["a"])), "second": list(range(truth["b"]))}
