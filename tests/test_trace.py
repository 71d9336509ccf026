"""End to end, against the truth: noop traces examples/go-prometheus (started after noop),
and what it prints must equal what the example itself says on /metrics.

Privileged: these load BPF programs and attach uprobes for real.
"""

from __future__ import annotations

import re
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from harness.example import TICKS, Traced, trace
from harness.metrics import series_name
from harness.noop import no_probe_left

pytestmark = pytest.mark.attach  # run again through perf-event uprobes (--attach both)

REPO = Path(__file__).resolve().parent.parent
CUSTOMERS = ["acme", "globex", "initech"]


@pytest.fixture(scope="module", params=["dwarf", "stripped"])
def preset(privileged: None, example: Path, request: pytest.FixtureRequest,
           tmp_path_factory: pytest.TempPathFactory) -> Traced:
    """The preset's trace of the example, and of its -s -w twin (no DWARF, no symbol
    table): the stripped build must get every line the other gets."""
    binary = example if request.param == "dwarf" else request.getfixturevalue(
        "stripped_example")
    return trace(tmp_path_factory.mktemp("preset"), binary, "--binary", binary)


def test_preset_values_equal_the_programs_own_metrics(preset: Traced) -> None:
    assert preset.noop_exit == 0, preset.noop_stderr
    last: dict[str, float] = {}
    for line in preset.lines:
        assert line["pid"] == preset.pid
        if line["kind"] in ("counter", "gauge"):
            last[series_name(line["metric"], line["labels"])] = line["value"]
    truth = {k: v for k, v in preset.metrics.items()
             if k.startswith(("fake_", "another_", "sub_", "dec_", "shop_"))
             and not k.startswith("fake_histogram")}
    assert truth, "the example's /metrics had no series"
    assert last == truth


def test_preset_one_line_per_update(preset: Traced) -> None:
    per_metric = Counter(line["metric"] for line in preset.lines)
    assert per_metric == {
        "fake_counter": TICKS, "another_fake_counter": 2 * TICKS, "fake_gauge": TICKS,
        "another_fake_gauge": TICKS, "sub_fake_gauge": TICKS, "dec_fake_gauge": TICKS,
        "fake_histogram": TICKS, "fake_requests_total": TICKS, "fake_set_gauge": TICKS,
        "fake_float_counter": TICKS, "fake_int_counter": TICKS, "shop_orders_total": TICKS}
    vecs = ("fake_requests_total", "shop_orders_total")
    per_child = Counter(series_name(x["metric"], x["labels"]) for x in preset.lines
                       if x["metric"] in vecs)
    assert {k: float(v) for k, v in per_child.items()} == {
        k: v for k, v in preset.metrics.items() if k.startswith(vecs)}


def test_preset_ops_and_increments(preset: Traced) -> None:
    ops: dict[str, set[tuple[str, float | None]]] = {}
    for x in preset.lines:
        if x["kind"] != "histogram":
            ops.setdefault(x["metric"], set()).add((x["op"], x["inc"]))
    assert ops["fake_counter"] == {("Inc", 1)}
    assert ops["fake_gauge"] == {("Inc", 1)}
    assert ops["another_fake_gauge"] == {("Add", 5)}
    assert ops["sub_fake_gauge"] == {("Sub", -7)}
    assert ops["dec_fake_gauge"] == {("Dec", -1)}
    assert ops["fake_set_gauge"] == {("Set", None)}
    assert ops["fake_float_counter"] == {("Add", 0.25)}
    assert ops["fake_int_counter"] == {("Add", 3)}


def test_preset_histogram_observations(preset: Traced) -> None:
    seen = [(x["value"], x["note"]) for x in preset.lines if x["metric"] == "fake_histogram"]
    assert [v for v, _ in seen] == [float(n % 10) for n in range(1, TICKS + 1)]
    assert [n for _, n in seen] == [f"count {n}" for n in range(1, TICKS + 1)]
    assert preset.metrics["fake_histogram_count"] == TICKS


def test_preset_detaches_everything(preset: Traced) -> None:
    assert re.search(r"SIGTERM: detached; \d+ events, 0 lost", preset.noop_stderr), \
        preset.noop_stderr
    no_probe_left(preset.noop_pid)  # BCC names its uprobes after noop's PID


def test_preset_plan_covers_every_update_method(noop_json: Any, example: Path) -> None:
    """Every method of counter, gauge and histogram that updates the value has a site,
    however its compiler laid it out (and whatever it inlined)."""
    plan = noop_json("check", "--binary", example, "--json")
    tags = {s["tag"] for p in plan["probes"] for s in p["sites"]}
    assert tags == {"counter.Inc", "counter.Add", "gauge.Set", "gauge.SetToCurrentTime",
                    "gauge.Inc", "gauge.Dec", "gauge.Add", "gauge.Sub", "histogram.Observe"}


FLOAT_SPEC = """
targets:
  example: {{binary: {binary}}}
probes:
  - {{name: add, function: "{pkg}.(*gauge).Add", values: {{delta: val, m: g.desc.fqName}}}}
  - {{name: obs, function: "{pkg}.(*histogram).Observe", values: {{v: v}}}}
"""


def _disassembly(binary: Path, start: int, stop: int) -> dict[int, str]:
    dump = subprocess.run(["objdump", "-d", "--no-show-raw-insn", f"--start-address={start:#x}",
                           f"--stop-address={stop:#x}", str(binary)],
                          capture_output=True, text=True, check=True).stdout
    return {int(m.group(1), 16): m.group(2).strip() for line in dump.splitlines()
            if (m := re.match(r"\s+([0-9a-f]+):\s+(.*)", line))}


def test_float_argument_sites_agree_with_objdump(noop_json: Any, example: Path,
                                                 tmp_path: Path) -> None:
    """Where noop reads a float argument that arrives in xmm0, checked against objdump:
    Gauge.Add's val after each lock cmpxchg on the gauge (its own and those of its
    copies in Inc, Dec and Sub), at the conditional jump after the swap's sete and
    test, keeping the hits with ZF clear (the swap won), from rax (old) and the
    cmpxchg's source (new), neither of which the sete writes; Observe's v in the stack
    slot a movsd stored xmm0 to, before the site."""
    spec = tmp_path / "floats.yaml"
    spec.write_text(FLOAT_SPEC.format(binary=example, pkg="github.com/prometheus/"
                                      "client_golang/prometheus"))
    plan = noop_json("check", "--config", spec, "--json")
    add, obs = plan["probes"]
    callers = set()
    for site in add["sites"]:
        at = int(site["address"], 16)
        code = _disassembly(example, at - 24, at + 8)
        cas, sete, test = (code[a] for a in sorted(a for a in code if a < at)[-3:])
        new = re.fullmatch(r"lock cmpxchg %(\w+),\(%(\w+)\)", cas)
        flag = re.fullmatch(r"sete\s+%(\w+)", sete)
        assert new and flag, (cas, sete)
        assert re.fullmatch(rf"test\s+%{flag.group(1)},%{flag.group(1)}", test), test
        assert re.fullmatch(r"j(e|ne)\s+.*", code[at]), code[at]
        assert flag.group(1)[0] not in ("a", new.group(1)[1]), "sete kept rax and new"
        assert "when" not in site and site["skip"] == "flags & 0x40"
        assert site["values"]["delta"]["formula"] == "new-old"
        assert site["values"]["delta"]["regs"] == ["rax", new.group(1)]
        assert site["values"]["m"]["ops"][0] == {"op": "reg", "reg": new.group(2)}
        callers.add(re.search(r"\(\*gauge\)\.(\w+) \(", site["why"]).group(1))
    assert callers == {"Add", "Inc", "Dec", "Sub"}
    (site,) = obs["sites"]
    at = int(site["address"], 16)
    v = site["values"]["v"]
    assert v["kind"] == "mem" and v["ops"][0]["op"] == "sp"
    code = _disassembly(example, at - 32, at)
    stores = [t for t in code.values() if re.fullmatch(r"movsd\s+%xmm0,0x[0-9a-f]+\(%rsp\)", t)]
    assert stores and stores[-1].endswith(f"{v['ops'][0]['offset']:#x}(%rsp)"), code


def test_spec_probes_read_what_the_program_passed(privileged: None, example: Path,
                                                  tmp_path: Path) -> None:
    got = trace(tmp_path, example, "--config", REPO / "probes.yaml", "--binary", example)
    assert got.noop_exit == 0, got.noop_stderr
    no_probe_left(got.noop_pid)
    orders = [x["values"] for x in got.lines if x["probe"] == "order"]
    assert [o["id"] for o in orders] == list(range(1, TICKS + 1))
    assert [o["customer"] for o in orders] == [CUSTOMERS[n % 3] for n in range(1, TICKS + 1)]
    assert {o["first_sku"] for o in orders} == {"sku-1"}
    assert [o["first_qty"] for o in orders] == list(range(1, TICKS + 1))
    assert {o["lines"] for o in orders} == {2}  # len(o.Items): two items per order
    done = [x["values"] for x in got.lines if x["probe"] == "order_done"]
    assert [d["customer"] for d in done] == [CUSTOMERS[n % 3] for n in range(1, TICKS + 1)]
    assert [d["items"] for d in done] == [3 * n for n in range(1, TICKS + 1)]  # n + 2n
    assert all(0 < d["took"] < 10**9 for d in done)
    goids = {o["goroutine"] for o in orders}
    assert len(goids) == 1 and goids.pop() > 0  # tick runs on one goroutine (main's)
    incs = Counter(x["values"]["metric"] for x in got.lines if x["probe"] == "counter_inc")
    assert incs == {"fake_counter": TICKS, "another_fake_counter": 2 * TICKS,
                    "fake_requests_total": TICKS, "shop_orders_total": TICKS}
    adds = [x["values"] for x in got.lines if x["probe"] == "gauge_add"]
    by = {m: [(a["delta"], a["now"]) for a in adds if a["metric"] == m]
          for m in {a["metric"] for a in adds}}
    # Add(5) through its own code; Inc, Dec and Sub(7) through the copies of Add
    # inlined into them. delta is Add's own val (xmm0), now the gauge after the update.
    assert by == {"another_fake_gauge": [(5.0, 5.0 * n) for n in range(1, TICKS + 1)],
                  "sub_fake_gauge": [(-7.0, -7.0 * n) for n in range(1, TICKS + 1)],
                  "fake_gauge": [(1.0, 1.0 * n) for n in range(1, TICKS + 1)],
                  "dec_fake_gauge": [(-1.0, -1.0 * n) for n in range(1, TICKS + 1)]}
