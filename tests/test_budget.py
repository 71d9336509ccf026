"""What probes cost their targets, and budgets that bound it: the calibrated cost of a
hit, noop check's prices (--rate, --measure), and noop run taking a probe off that
costs a tight loop more than its budget, then putting it back after a doubling
back-off, while a probe within its budget is never touched."""

from __future__ import annotations

import json
import math
import re
import signal
import statistics
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from harness.example import run_example
from harness.metrics import get, samples
from harness.noop import command, no_probe_left, popen, start

from agent.binary import sites
from agent.config import probes as spec
from agent.config.schema import json_schema
from agent.kernel import cost
from agent.kernel.budget import EVERY, Overhead

REPO = Path(__file__).resolve().parents[1]
WINDOW = 3.0  # --budget-window of the run tests: the first back-off too


# --- the cost of a hit ---------------------------------------------------------------------

@pytest.mark.serial  # calibrates and times hits: alone on the machine
def test_a_single_stepped_hit_costs_more_than_an_emulated_one(privileged: None) -> None:
    """Calibrated in this process: a single-stepped instruction takes two traps and an
    emulated one a single trap, so it costs several times as much; both cost something."""
    got = cost.calibrate()
    assert 0 < got.ns[sites.EMULATED] < got.ns[sites.SINGLE_STEPPED] / 2, got.ns
    assert got.per_hit("") == got.ns[sites.SINGLE_STEPPED]  # unknown: the dearer
    assert got.machine.split()[0] in cost.machine()


@pytest.mark.serial  # calibrates and times hits: alone on the machine
def test_costs_are_kept_per_machine(privileged: None) -> None:
    """Measured once, then read back from the cache (the same figures)."""
    first = cost.costs()
    cost.costs.cache_clear()
    again = cost.costs()
    assert again.cached and again.ns == first.ns
    assert cost.known() == again


# --- the budget, on counts made up ---------------------------------------------------------

def _fake(budgets: list[float | None], renews: bool = False) -> tuple[Any, Any]:
    plan = SimpleNamespace(probes=[
        SimpleNamespace(name=f"p{n}", budget=b, renews=renews,
                        sites=[SimpleNamespace(handling="emulated")])
        for n, b in enumerate(budgets)])
    program = SimpleNamespace(sites=tuple((n, 0) for n in range(len(budgets))))
    return plan, program


COSTS = cost.Costs({sites.EMULATED: 500.0, sites.SINGLE_STEPPED: 10_000.0}, "test")


def test_a_renew_probe_is_never_taken_off() -> None:
    """The probe that notes when metric objects are made or dropped has no budget, whatever
    it costs: taken off, a new object at a freed one's address would be counted in the
    old one's rows."""
    plan, program = _fake([0.01], renews=True)
    o = Overhead(cast(Any, plan), cast(Any, program), COSTS, None, 0.05, now=0.0)
    assert o.look({(0, 7): 1000}, {}, 1.0) == []
    assert o.look({(0, 7): 10**9}, {}, 2.0) == []
    assert o.probes[0].enabled and math.isinf(o.probes[0].budget)


def test_over_budget_comes_off_and_back_with_a_doubling_back_off() -> None:
    """1% over a 10 s window is 100 ms: 1000 hits (0.5 ms) pass, 300 000 more (150 ms)
    do not. Back on after 10 s, off again for 20 s, then (having stayed on within
    budget for 20 s) the back-off is 10 s again. The probe within budget (5%, the
    default) and the unbounded one are never touched."""
    plan, program = _fake([0.01, None, float("inf")])
    o = Overhead(cast(Any, plan), cast(Any, program), COSTS, None, 0.05, now=0.0)
    assert o.look({(0, 7): 1000, (1, 7): 10, (2, 7): 10**9}, {}, 1.0) == []
    (off,) = o.look({(0, 7): 301_000, (1, 7): 20, (2, 7): 2 * 10**9}, {}, 2.0)
    assert (off.probe, off.on) == (0, False)
    assert re.search(r"probe p0: 150,500 hits/s in process 7 cost it 7\.5% of a CPU over "
                     r"the last 2 s, over its budget of 1\.0%: detached for 10 s", off.message)
    o.done(off, 2.0)
    assert o.detached_seconds(0, 5.0) == 3.0
    assert o.look({(0, 7): 301_000}, {}, 11.9) == []
    (on,) = o.look({(0, 7): 301_000}, {}, 12.0)
    assert on.on and "back on after 10 s" in on.message
    o.done(on, 12.0)
    (off,) = o.look({(0, 7): 601_000}, {}, 13.0)
    assert not off.on and "detached for 20 s" in off.message
    o.done(off, 13.0)
    assert o.detached_seconds(0, 100.0) == 10.0 + 87.0
    (on,) = o.look({(0, 7): 601_000}, {}, 33.0)
    o.done(on, 33.0)
    for t in range(34, 75):  # on, within budget, for 40 s: the back-off starts over
        assert o.look({(0, 7): 601_000 + t}, {}, float(t)) == []
    assert o.probes[0].backoff == 10.0
    assert [p.enabled for p in o.probes] == [True, True, True]
    assert o.probes[1].cost_ns == 20 * 500.0 and o.detached_seconds(1, 75.0) == 0


def test_a_budget_is_per_process_and_counts_the_programs_run_time() -> None:
    """Two processes at 0.8% each stay within a 1% budget; the programs' run time is
    shared among the processes by their hits; a row made again starts from zero."""
    plan, program = _fake([0.01])
    o = Overhead(cast(Any, plan), cast(Any, program), COSTS, None, 0.05, now=0.0)
    assert o.look({(0, 1): 80_000, (0, 2): 80_000}, {0: 1_000_000}, 5.0) == []
    assert o.probes[0].cost_ns == 160_000 * 500.0 + 1_000_000
    assert o.look({(0, 1): 10, (0, 2): 80_000}, {0: 1_000_000}, 6.0) == []  # 1's row anew
    assert o.probes[0].hits == 160_010
    (off,) = o.look({(0, 1): 10, (0, 2): 200_000}, {0: 3_000_000}, 7.0)
    assert "in process 2" in off.message


def test_without_costs_nothing_is_taken_off() -> None:
    plan, program = _fake([0.01])
    o = Overhead(cast(Any, plan), cast(Any, program), None, None, 0.05, now=0.0)
    assert o.look({(0, 1): 10**9}, {}, 1.0) == []
    assert o.probes[0].hits == 10**9


# --- the spec and the command line -------------------------------------------------------

SPEC = """
targets: {{t: {{binary: {binary}}}}}
{top}
probes:
  - name: hot
    function: main.hot
    metrics: [{{name: hot_calls_total, type: counter}}]
  - name: cold
    function: main.cold
    {cold}
    metrics: [{{name: cold_calls_total, type: counter}}]
"""


@pytest.mark.parametrize(("top", "cold", "message"), [
    ("budget: 5", "", "'5' is not a share of a CPU: write it with %"),
    ("budget: 200%", "", "'200%' is not a share of one CPU"),
    ("", "budget: -1%", "'-1%' is not a share of one CPU"),
    ("", "budget: [1%]", "budget must be a share of one CPU"),
    ("budget: 1 %%", "", "is not a share of one CPU"),
])
def test_bad_budgets_are_one_line_each(top: str, cold: str, message: str) -> None:
    with pytest.raises(spec.SpecError) as e:
        spec.parse(SPEC.format(binary="/bin/true", top=top, cold=cold))
    assert message in str(e.value) and len(str(e.value).splitlines()) == 1


def test_budgets_read() -> None:
    got = spec.parse(SPEC.format(binary="/bin/true", top="budget: 0.5%", cold="budget: none"))
    assert got.budget == 0.005 and got.probes[0].budget is None
    assert got.probes[1].budget == float("inf")
    schema = json_schema()
    assert "budget" in schema["properties"]


def _spec(tmp: Path, binary: Path, top: str = "budget: 1%", cold: str = "") -> Path:
    path = tmp / "probes.yaml"
    path.write_text(SPEC.format(binary=binary, top=top, cold=cold))
    return path


@pytest.mark.serial  # calibrates and times hits: alone on the machine
def test_check_prices_a_rate(privileged: None, go_hotloop: Path, tmp_path: Path,
                             noop: Any) -> None:
    """Each site's cost is its class's; a rate makes a share of a CPU, flagged (exit 1)
    over the probe's budget."""
    config = _spec(tmp_path, go_hotloop, cold="budget: 10%")
    done = noop("check", "--config", config, "--rate", "1000000", "--rate", "cold=3000",
                "--json")
    assert done.returncode == 1, done.stderr
    est = json.loads(done.stdout)["estimate"]
    per = est["per_hit_ns"]
    hot, cold = est["probes"]
    for p, rate in ((hot, 1_000_000), (cold, 3000)):
        (handling,) = p["sites"]
        assert p["ns_per_hit"] == p["sites_ns"][0] == per[handling]
        assert p["rate"] == rate and p["share"] == pytest.approx(rate * p["ns_per_hit"] / 1e9)
        assert p["over"] == (p["share"] > p["budget"])
    assert hot["budget"] == 0.01 and cold["budget"] == 0.1
    assert hot["over"], "a million hits a second cost more than 1% of a CPU anywhere"
    done = noop("check", "--config", config, "--rate", "1")
    assert done.returncode == 0, done.stderr
    assert re.search(r"cost: 1 hits/s x ~[\d,]+ ns = 0\.\d\d% of a CPU per process, "
                     r"budget 1%\n", done.stdout)
    assert re.search(r"file offset 0x[0-9a-f]+, bytes [0-9a-f]+, "
                     r"(emulated|single-stepped), ~[\d,]+ ns a hit",
                     done.stdout)


@pytest.mark.parametrize(("args", "message"), [
    (["--rate", "nosuch=5"], "probe 'nosuch' not found"),
    (["--rate", "fast"], "'fast' is not a rate"),
    (["--measure", "0s"], "is not a positive number of seconds"),
    (["--max-overhead", "5"], "write it with %"),
])
def test_check_bad_flags(go_hotloop: Path, tmp_path: Path, noop: Any, args: list[str],
                         message: str) -> None:
    done = noop("check", "--config", _spec(tmp_path, go_hotloop), *args)
    assert done.returncode != 0 and message in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


class Hotloop:
    """tests/programs/go/hotloop, running: its calls of hot per second, as it prints them."""

    def __init__(self, binary: Path, workers: int) -> None:
        self.proc = subprocess.Popen([str(binary), "-workers", str(workers)],
                                     stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        first = self.proc.stdout.readline()
        assert first.startswith("ready"), first
        self.rates: list[tuple[float, float]] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("rate "):
                self.rates.append((time.monotonic(), float(line.split()[1])))

    def rate(self, seconds: float) -> float:
        """The median rate over the next ``seconds``."""
        t0 = time.monotonic()
        time.sleep(seconds)
        got = [r for t, r in self.rates if t > t0 + 0.26]  # intervals wholly inside
        assert len(got) >= 3, self.rates[-5:]
        return statistics.median(got)

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def hotloop(go_hotloop: Path, request: pytest.FixtureRequest) -> Iterator[Hotloop]:
    h = Hotloop(go_hotloop, getattr(request, "param", 1))
    yield h
    h.stop()


class Run:
    """noop run in the background, its log read as it comes."""

    def __init__(self, *args: str | Path) -> None:
        self.proc = popen("run", "--listen", "127.0.0.1:0", *args,
                          stderr=subprocess.PIPE)
        self.lines: list[tuple[float, str]] = []
        threading.Thread(target=self._read, daemon=True).start()
        _t, line = self.wait(r"serving http://\S+/metrics", 60)
        self.url = "http://" + re.search(r"//(\S+)/metrics", line).group(1)  # type: ignore[union-attr]

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append((time.monotonic(), line))

    def wait(self, pattern: str, timeout: float, after: float = 0.0) -> tuple[float, str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for t, line in list(self.lines):
                if t >= after and re.search(pattern, line):
                    return t, line
            if self.proc.poll() is not None and not any(
                    re.search(pattern, line) for _t, line in self.lines):
                time.sleep(0.2)  # the reader's last lines
                break
            time.sleep(0.05)
        pytest.fail(f"noop never logged {pattern!r} in {timeout:.0f} s:\n"
                    + "".join(line for _t, line in self.lines), pytrace=False)

    def metrics(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        return samples(get(self.url + "/metrics"))

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=30)
        return self.proc.returncode


def _m(got: dict[Any, float], name: str, probe: str) -> float:
    return got[(name, (("probe", probe),))]


@pytest.mark.serial  # calibrates and times hits: alone on the machine
@pytest.mark.parametrize("hotloop", [1, 3], indirect=True, ids=["one goroutine", "three"])
def test_a_probe_over_budget_is_taken_off_and_put_back(
        privileged: None, hotloop: Hotloop, tmp_path: Path) -> None:
    """hot, called in a tight loop, costs its process most of a CPU once probed: under a
    1% budget it comes off within the window, and while it is off the loop goes on
    calling hot and the probe sees none of it (its hits stay where they were: it is
    detached, not just dropping events); it is put back after the back-off (then off
    again for twice as long). cold, called ten times a second, is never touched."""
    config = _spec(tmp_path, Path(hotloop.proc.args[0]))
    run = Run("--config", config, "--budget-window", str(WINDOW))
    try:
        ready, _ = run.wait(r"ready: 2 uprobes attached", 180)
        off, line = run.wait(r"probe hot: .* over its budget", WINDOW + EVERY + 2)
        assert off - ready <= WINDOW + EVERY + 1, line
        pid = hotloop.proc.pid
        assert re.search(rf"probe hot: [\d,]+ hits/s in process {pid} cost it [\d.]+% of a "
                         rf"CPU over the last \d+ s, over its budget of 1\.0%: detached for "
                         rf"{WINDOW:.0f} s", line), line
        got = run.metrics()
        assert _m(got, "noop_probe_enabled", "hot") == 0
        assert _m(got, "noop_probe_enabled", "cold") == 1
        before = _m(got, "noop_probe_hits_total", "hot")
        calls = hotloop.rate(2.0)
        after = _m(run.metrics(), "noop_probe_hits_total", "hot")
        assert calls > 0 and before > 0 and after == before, (calls, before, after)
        back, line = run.wait(r"probe hot: back on after 3 s off", WINDOW + 2, after=off)
        assert back - off >= WINDOW, line
        _again, line = run.wait(r"probe hot: .* detached for 6 s", WINDOW + EVERY + 2,
                               after=back)
        time.sleep(EVERY + 0.5)  # the look after the detach has counted its last hits
        got = run.metrics()
        assert _m(got, "noop_probe_detached_seconds_total", "hot") >= WINDOW
        assert _m(got, "noop_probe_detached_seconds_total", "cold") == 0
        assert _m(got, "noop_probe_enabled", "cold") == 1
        hits = _m(got, "noop_probe_hits_total", "hot")
        per_hit = cost.known()
        assert per_hit is not None
        (site,) = [s for s in json.loads(subprocess.run(
            command("check", "--config", config, "--json"),
            cwd=REPO, capture_output=True, text=True, check=True).stdout)["probes"][0]["sites"]]
        floor = hits * per_hit.per_hit(site["handling"]) / 1e9
        assert hits > 0 and _m(got, "noop_probe_overhead_seconds_total", "hot") >= floor
        assert _m(got, "noop_probe_overhead_seconds_total", "cold") > 0
        assert not [line for _t, line in run.lines if "probe cold" in line]
    finally:
        code = run.stop()
    assert code == 0
    no_probe_left(run.proc.pid)


@pytest.mark.serial  # calibrates and times hits: alone on the machine
def test_check_measure_stops_at_the_budget(privileged: None, hotloop: Hotloop,
                                           tmp_path: Path, noop: Any) -> None:
    """--measure counts hits with a bare counter: hot's count costs more than its 1% of
    the time within a fraction of a second and stops there; cold is counted throughout."""
    config = _spec(tmp_path, Path(hotloop.proc.args[0]))
    done = noop("check", "--config", config, "--measure", "2s", "--json")
    assert done.returncode == 1, done.stderr
    hot, cold = json.loads(done.stdout)["estimate"]["probes"]
    assert hot["over"] and "over its budget after" in hot["measured"]["stopped"]
    assert hot["measured"]["seconds"] < 1.0 and hot["measured"]["hits"] > 0
    assert hot["share"] > 0.01
    assert not cold["over"] and cold["measured"]["seconds"] >= 2.0
    assert cold["measured"]["hits"] > 0 and cold["measured"]["processes"] == 1
    assert "probe hot: over its budget" in done.stderr


@pytest.mark.serial  # calibrates and times hits: alone on the machine
def test_trace_holds_the_default_budget(privileged: None, hotloop: Hotloop, tmp_path: Path,
                                        noop: Any) -> None:
    """noop in the terminal holds probes to --max-overhead (5%) too, and its summary
    says what the probes cost and how often one came off."""
    config = _spec(tmp_path, Path(hotloop.proc.args[0]), top="")
    done = noop("--config", config, "--duration", "4", "--budget-window", "2",
                timeout=120)
    assert done.returncode == 0, done.stderr
    assert re.search(r"noop: probe hot: [\d,]+ hits/s in process \d+ cost it [\d.]+% of a "
                     r"CPU over the last \d+ s, over its budget of 5\.0%: detached for 2 s",
                     done.stderr), done.stderr
    assert re.search(r"detached; \d+ events, \d+ lost, the probes cost the targets ~[\d.e-]+ "
                     r"s of CPU, probes taken off [12] times \(their budget\)", done.stderr)
    assert "probe cold" not in done.stderr


@pytest.mark.serial  # calibrates and times hits: alone on the machine
def test_the_presets_probes_are_priced(privileged: None, example: Path, tmp_path: Path,
                                       agent_cleanup: list[Any]) -> None:
    """Under noop run --binary, every preset probe the example hit has a cost of at
    least its hits at the cheaper class, and stays on (the example is far within 5%)."""
    agent = start("--binary", example, "--mirror", "both")
    agent_cleanup.append(agent)
    ex, _url = run_example(example)
    try:
        time.sleep(EVERY + 1.0)  # a look at the counts after the last tick
        got = agent.metrics()
    finally:
        ex.terminate()
        ex.wait(timeout=10)
    costs = cost.known()
    assert costs is not None
    hit = {dict(k)["probe"]: v for (n, k), v in got.items() if n == "noop_probe_hits_total"}
    assert sum(hit.values()) > 0, hit
    for probe, hits in hit.items():
        spent = _m(got, "noop_probe_overhead_seconds_total", probe)
        assert spent >= hits * costs.ns[sites.EMULATED] / 1e9, (probe, hits, spent)
        assert _m(got, "noop_probe_enabled", probe) == 1
        assert _m(got, "noop_probe_detached_seconds_total", probe) == 0
    code, err = agent.stop()
    assert code == 0 and "over its budget" not in err, err
