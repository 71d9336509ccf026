"""Go interface values and maps, against what the program passed and returned.

tests/programs/go/ifaces (Go 1.19 and the newest Go, whose maps are swiss tables)
calls check(call, v any, tags map[string]string) (int, error) with v holding a
*main.Order, an int or nothing, and returns nil, an *errors.errorString, a
*fmt.wrapError or a *main.CodeError; it prints what it passed and got. A probe must
read each interface as its dynamic type's name (Go's %T), a type assertion's field
only when the interface holds that type, err.Error() for the error types whose
message is a field, and len() of the map; an in-kernel counter labelled by the
error's type must count each. Privileged: real BPF.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from harness.noop import Agent, no_probe_left, settle, start, tracing
from harness.programs import PROGRAMS, go_build, go_toolchain

CALLS = 9
MESSAGES = ("*errors.errorString", "*fmt.wrapError")  # what err.Error() reads


@pytest.fixture(scope="module", params=["1.19", "newest"])
def ifaces(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("ifaces-go" + request.param)
    return go_build(go_toolchain(request.param), out / "ifaces", out / "gocache",
                    PROGRAMS / "go" / "ifaces")


def _spec(binary: Path, probes: list[dict[str, Any]]) -> str:
    return yaml.safe_dump({"targets": {"ifaces": {"binary": str(binary)}}, "probes": probes})


PROBES = [
    {"name": "call", "function": "main.check",
     "values": {"call": "call", "v": "v", "id": "v.(*main.Order).ID", "n": "len(tags)"}},
    {"name": "ret", "function": "main.check", "at": "exit",
     "values": {"call": "call", "err": "~r1", "msg": "~r1.Error()",
                "code": "~r1.(*main.CodeError).Code", "text": "~r1.(*main.CodeError).Text"}},
]


def test_interfaces_and_maps_read_as_the_program_had_them(privileged: None, ifaces: Path,
                                                           tmp_path: Path) -> None:
    spec = tmp_path / "probes.yaml"
    spec.write_text(_spec(ifaces, PROBES))
    with tracing(tmp_path, "--config", spec) as session:
        done = subprocess.run([str(ifaces), "-calls", str(CALLS)], capture_output=True,
                              text=True, timeout=60, check=True)
        time.sleep(1.5)
    assert session.exit == 0, session.stderr
    no_probe_left(session.pid)
    truth = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(truth) == CALLS
    calls = [x["values"] for x in session.lines if x["probe"] == "call"]
    rets = [x["values"] for x in session.lines if x["probe"] == "ret"]
    assert calls == [{"call": t["call"], "v": t["value"], "n": t["tags"],
                      "id": t["order_id"] if t["value"] == "*main.Order" else None}
                     for t in truth]
    assert rets == [{"call": t["call"], "err": t["kind"],
                     "msg": t["message"] if t["kind"] in MESSAGES else None,
                     "code": t["code"] if t["kind"] == "*main.CodeError" else None,
                     "text": "bad" if t["kind"] == "*main.CodeError" else None}
                    for t in truth]
    assert {t["kind"] for t in truth} == {"nil", *MESSAGES, "*main.CodeError"}


def test_an_error_type_as_a_label_kept_in_the_kernel(privileged: None, ifaces: Path,
                                                     tmp_path: Path,
                                                     agent_cleanup: list[Agent]) -> None:
    """The key holds the type descriptor's address; its name is the scrape's."""
    spec = tmp_path / "probes.yaml"
    spec.write_text(_spec(ifaces, [
        {"name": "ret", "function": "main.check", "at": "exit", "values": {"err": "~r1"},
         "metrics": [{"name": "check_errors_total", "type": "counter",
                      "labels": {"type": "err"}, "aggregate": "kernel"}]}]))
    agent = start("--config", spec)
    agent_cleanup.append(agent)
    done = subprocess.run([str(ifaces), "-calls", str(CALLS)], capture_output=True,
                          text=True, timeout=60, check=True)
    want: dict[str, int] = {}
    for line in done.stdout.splitlines():
        kind = json.loads(line)["kind"]
        want[kind] = want.get(kind, 0) + 1
    got = settle(agent, "check_errors_total", {"type": "nil"}, want["nil"])
    assert {dict(k[1])["type"]: v for k, v in got.items()
            if k[0] == "check_errors_total"} == want
    code, err = agent.stop()
    assert code == 0, err


def test_bad_interface_and_map_reads_say_why(ifaces: Path) -> None:
    from agent.config import probes as spec
    from agent.config.reader import SpecError
    from agent.plan import resolve

    text = _spec(ifaces, [{"name": "p", "function": "main.check", "values": {
        "a": "v.(*main.Nope).ID", "b": "call.(int)", "c": "tags", "d": "call.Error()"}}])
    with pytest.raises(SpecError) as info:
        resolve.resolve(spec.parse(text, "p.yaml"))
    got = {p.message.split(":", 1)[0]: (p.message, p.hint) for p in info.value.problems}
    assert got["a"][0].startswith("a: v.(*main.Nope): type '*main.Nope' not found"), got["a"]
    assert "did you mean" in got["a"][0] or "did you mean" in got["a"][1], got["a"]
    assert got["b"][0] == ("b: call is int, not a Go interface: the type assertion .(int) "
                           "needs one"), got["b"]
    assert got["c"][0] == "c: tags is map[string]string: a map has no single value"
    assert got["c"][1] == ("read len(tags) for its number of entries, or as: addr for its "
                           "address")
    assert got["d"][0] == "d: call is int, not a Go interface: .Error() needs one"
    assert len(info.value.problems) == 4
