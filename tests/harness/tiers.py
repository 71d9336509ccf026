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

import pytest

# Fixtures that build a program (the conftest's and the test modules' own).
BUILDING = frozenset({
    "go_layouts_119", "go_layouts_new", "go_hotloop", "go_lines", "lines_program",
    "example", "go_allops", "stripped_example", "rust_layouts", "c_layouts",
    "c_layouts_o2", "c_dropped_gcc", "c_dropped_clang", "rust_dropped", "rust_ledger",
    "rust_ledger_nodebug", "rust_ledger_lines", "rust_handler", "rust_example",
    "rust_allops", "rust_example_nodebug", "rust_example_lines", "rust_example_unoptimized",
    "calls", "two_builds", "go_lines_twins", "other_build", "twins", "ifaces", "workloads",
    "hotloop", "program", "example_image", "noop_image", "small",
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
