"""A target rebuilt in place under ``noop run`` (other code, the same path): the names
of ``$caller`` and of an interface's dynamic type, resolved when scraped, must come
from the build that ran, not from the build noop read first.

tests/programs/go/rebuilt is built as it is (work called from main.callAlpha with a
*main.Alpha) and with every Alpha written Beta and one more function first (other
code at other addresses); the second build's bytes are written over the first's file.
Privileged: real BPF."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import yaml
from harness.noop import Agent, settle, start, stopped, wait_for
from harness.programs import PROGRAMS, go_build, go_toolchain

SHIFT = """//go:noinline
func shift(xs []int) int {
	s := 0
	for i, x := range xs {
		s += i * x
		if s > 1000 {
			s -= 3 * x
		}
	}
	return s
}

"""


def _source(tmp: Path, name: str) -> Path:
    src = tmp / f"src-{name}"
    src.mkdir()
    text = (PROGRAMS / "go" / "rebuilt" / "main.go").read_text()
    if name != "Alpha":
        text = text.replace("Alpha", name).replace(
            f"type {name} struct", SHIFT + f"type {name} struct").replace(
            "\tflag.Parse()\n", "\tflag.Parse()\n\tif *calls < 0 {\n\t\tfmt.Println(shift(nil))"
            "\n\t}\n")
    (src / "main.go").write_text(text)
    return src


def _calls(agent: Agent, target: Path, n: int, name: str) -> dict[tuple[str, str], float]:
    subprocess.run([str(target), "-calls", str(n)], check=True, capture_output=True,
                   timeout=60)
    got = settle(agent, "work_calls_total", {"caller": f"main.call{name}",
                                             "type": f"*main.{name}"}, n)
    return {(dict(k[1])["caller"], dict(k[1])["type"]): v for k, v in got.items()
            if k[0] == "work_calls_total"}


def test_names_come_from_the_build_that_ran(privileged: None, tmp_path: Path,
                                            agent_cleanup: list[Agent]) -> None:
    go = go_toolchain("1.19")
    builds = {name: go_build(go, tmp_path / name / "rebuilt", None, _source(tmp_path, name))
              for name in ("Alpha", "Beta")}
    target = tmp_path / "rebuilt"
    shutil.copyfile(builds["Alpha"], target)
    target.chmod(0o755)
    spec = tmp_path / "probes.yaml"
    spec.write_text(yaml.safe_dump({"targets": {"rebuilt": {"binary": str(target)}},
                                    "probes": [{
                                        "name": "work", "function": "main.work",
                                        "values": {"who": "$caller", "type": "v"},
                                        "metrics": [{"name": "work_calls_total",
                                                     "type": "counter", "aggregate": "kernel",
                                                     "labels": {"caller": "who",
                                                                "type": "type"}}]}]}))
    agent = start("--config", spec)
    agent_cleanup.append(agent)
    assert _calls(agent, target, 3, "Alpha") == {("main.callAlpha", "*main.Alpha"): 3}
    shutil.copyfile(builds["Beta"], target)  # the same file, other bytes
    assert agent.proc.stderr is not None
    wait_for(agent.proc.stderr, r"re-resolved", 60)
    got = _calls(agent, target, 4, "Beta")
    assert got.get(("main.callBeta", "*main.Beta")) == 4, got
    assert set(got) <= {("main.callAlpha", "*main.Alpha"), ("main.callBeta", "*main.Beta")}, got
    stopped(agent)
