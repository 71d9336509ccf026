"""The suite's tiers, given to each test by what it uses: ``privileged`` (root and
real BPF), ``builds`` (a program built from tests/programs or the examples), ``slow``
(soaks, benchmarks, containers, measured timing; marked by hand) and ``fast``: none
of these, seconds for all of them together.

Apart from the tiers, ``serial``: a test that times itself or the machine (a deadline,
a calibration, a budget, memory growth, a benchmark) or holds it (containers) runs
alone, after the parallel pass (``setup.sh test``); marked by hand. A slow test that
is neither (the soak) runs in the parallel pass.

A test is ``builds`` when it uses a fixture that builds; one that builds without
being marked so is stopped by ``builds.kept`` (``guard``), so the fast tier never
silently grows a build.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

# Fixtures that build a program (the conftest's and the test modules' own).
BUILDING = frozenset({
    "go_layouts_119", "go_layouts_new", "go_hotloop", "go_lines", "lines_program",
    "example", "go_allops", "stripped_example", "rust_layouts", "c_layouts",
    "c_layouts_o2", "c_dropped_gcc", "c_dropped_clang", "rust_dropped", "rust_ledger",
    "rust_ledger_nodebug", "rust_ledger_lines", "rust_handler", "rust_example",
    "rust_allops", "rust_branches", "rust_churn", "go_churn", "rust_deferred",
    "rust_example_nodebug", "rust_example_lines",
    "rust_example_unoptimized", "rust_mirror", "rust_mirror_limited", "rust_mirror_mixed",
    "calls", "two_builds", "go_lines_twins", "other_build", "twins", "ifaces", "workloads",
    "hotloop", "program", "example_image", "noop_image", "small", "same_names",
    "go_formatter", "go_many", "go_locals", "locals_program", "go_paced", "go_paced_119",
    "vm_program",
})
TIERS = ("privileged", "builds", "slow", "fast")


def classify(items: list[pytest.Item]) -> None:
    """Give every collected test its tiers."""
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        spec = getattr(item, "callspec", None)  # fixtures asked for by name, as params
        names |= {v for v in (spec.params.values() if spec is not None else ())
                  if isinstance(v, str)}
        if "privileged" in names:
            item.add_marker(pytest.mark.privileged)
        if names & BUILDING:
            item.add_marker(pytest.mark.builds)
        if not any(item.get_closest_marker(t) for t in TIERS[:3]):
            item.add_marker(pytest.mark.fast)



_current: list[pytest.Item] = []


def entering(item: pytest.Item | None) -> None:
    """The test whose fixtures and body run now (None: between tests)."""
    _current[:] = [item] if item is not None else []


def guard() -> None:
    """Called before a program is built or copied: a test of the fast tier must not."""
    if _current and _current[0].get_closest_marker("fast"):
        name = _current[0].nodeid
        _current.clear()  # said once
        pytest.fail(f"{name} builds a program but is in the fast tier: add the fixture "
                    "that builds to tests/harness/tiers.py BUILDING, or mark the test "
                    "pytest.mark.builds", pytrace=False)


# The parallel pass (setup.sh test: pytest-xdist, --dist loadfile). A test file is one
# unit of work, whole on one worker: its module fixtures are made once and its tests,
# which may follow the same programs, never run side by side. A file named here is a
# unit per test instead: its tests are long and share nothing (the soaks).
PER_TEST = frozenset({"tests/test_soak.py"})

# What each unit took in a recent run (seconds, tests/durations.json, written by a run
# with NOOP_RECORD_DURATIONS=1): the longest start first, so none is left running alone
# at the end of the pass. A unit not in it is estimated by its tests' tiers. Only the
# order depends on it, never a result.
DURATIONS = Path(__file__).resolve().parent.parent / "durations.json"
COST = {"slow": 120.0, "privileged": 2.0, "builds": 1.0}


def cost(item: pytest.Item) -> float:
    """A test's estimated seconds, by its tiers."""
    return sum(c for tier, c in COST.items() if item.get_closest_marker(tier)) or 0.02


def order(items: list[pytest.Item]) -> None:
    """Units by their cost, the dearest first; tests keep their order within a unit.
    Every worker orders the same collection the same way, as xdist requires."""
    try:
        known = {str(k): float(v) for k, v in json.loads(DURATIONS.read_text()).items()}
    except (OSError, ValueError, AttributeError):
        known = {}
    total: dict[str, float] = {}
    for item in items:
        unit = scope(item.nodeid)
        total[unit] = total.get(unit, 0.0) + cost(item)
    total.update((u, known[u]) for u in total if u in known)
    rank = {u: i for i, u in enumerate(sorted(total, key=lambda u: (-total[u], u)))}
    items.sort(key=lambda item: rank[scope(item.nodeid)])


class Durations:
    """Each unit's time in this run (setup, call and teardown of its tests), written to
    DURATIONS at the end when NOOP_RECORD_DURATIONS is set; units this run did not
    run keep their old figure."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        unit = scope(report.nodeid)
        self.seconds[unit] = self.seconds.get(unit, 0.0) + report.duration

    def pytest_sessionfinish(self) -> None:
        try:
            old = json.loads(DURATIONS.read_text())
        except (OSError, ValueError):
            old = {}
        old.update((u, round(s, 1)) for u, s in self.seconds.items())
        DURATIONS.write_text(json.dumps(dict(sorted(old.items())), indent=1) + "\n")


def scope(nodeid: str) -> str:
    """The unit of work a test belongs to: its file, or itself in a PER_TEST file. A
    file's second run (``--attach both``) is in its file's unit: on the worker that runs
    the first, after it, never beside it (the two follow the same programs)."""
    file = nodeid.split("::", 1)[0].removesuffix(SECOND)
    return nodeid if file in PER_TEST else file


# ``--attach both`` (setup.sh test's first pass): every test once as the kernel allows
# (uprobe_multi links here), and the tests marked attach, whose subject is attaching,
# once more through the perf-event uprobes noop falls back on, in one session: a test
# file collected a second time as a module of its own, named FILE@perf, whose module
# fixtures are all made again under NOOP_ATTACH=perf (conftest's attach_way_of_module).
SECOND = "@perf"
SECOND_RUN = ("attach", "privileged")  # markers a test needs to run twice
NOT_TWICE = ("slow",)  # markers that keep it to one run (a serial test marked attach
# runs twice in the serial pass, which is given --attach both too)


def is_test_file(path: Path) -> bool:
    return path.name.startswith("test_") and path.suffix == ".py"


def second_module(path: Path, parent: pytest.Collector) -> pytest.Module:
    from _pytest.nodes import NodeId  # pytest 9 names nodes by this

    where = path.relative_to(parent.config.rootpath).as_posix() + SECOND
    return pytest.Module.from_parent(parent, path=path, name=path.name + SECOND,
                                     nodeid=NodeId(path=where))


def second_run(nodeid: str) -> bool:
    return nodeid.split("::", 1)[0].endswith(SECOND)


def keep_second_runs_of_attach_tests(items: list[pytest.Item]) -> list[pytest.Item]:
    """Of the second modules' tests, only those whose subject is attaching stay; the
    others are given back, deselected."""
    kept, dropped = [], []
    for item in items:
        twice = all(item.get_closest_marker(m) for m in SECOND_RUN) and not any(
            item.get_closest_marker(m) for m in NOT_TWICE)
        (kept if twice or not second_run(item.nodeid) else dropped).append(item)
    items[:] = kept
    return dropped


def scheduler(config: pytest.Config, log: object) -> object:
    """xdist's file scheduling with PER_TEST's units, in the collection's order
    (order(): the dearest first) rather than by the number of tests in each."""
    from xdist.scheduler import LoadFileScheduling

    class Units(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return scope(nodeid)

    config.option.loadscopereorder = False
    return Units(config, log)  # type: ignore[arg-type]
