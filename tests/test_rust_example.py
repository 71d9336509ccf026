"""The Rust example service (examples/rust-prometheus): what it says about itself is
what it did, so that what noop reads of it can be checked against its /metrics.

It updates the prometheus crate's counters, gauges, a histogram and a vec from
several threads on every tick; after N ticks with T threads its own /metrics must
hold exactly the counts those updates make. And a release build is what the preset
has to work with: the crate's update methods exist only inlined, each copy listed.
"""

from __future__ import annotations

import re
import subprocess
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.noop import wait_for

TICKS, THREADS = 7, 3


def _scrape(url: str) -> dict[str, float]:
    with urllib.request.urlopen(url, timeout=10) as r:
        text = r.read().decode()
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
            for line in text.splitlines() if line and not line.startswith("#")}


def test_its_metrics_are_what_it_did(rust_example: Path) -> None:
    ex = subprocess.Popen([str(rust_example), "-listen", "127.0.0.1:0", "-period", "20ms",
                           "-ticks", str(TICKS), "-threads", str(THREADS), "-linger", "30s"],
                          stderr=subprocess.PIPE, text=True)
    try:
        assert ex.stderr is not None
        log = wait_for(ex.stderr, rf"tick {TICKS}$", 60)
        url = next(m.group(1) for line in log if (m := re.search(r"(http://\S+/metrics)", line)))
        got = _scrape(url)
    finally:
        ex.kill()
        ex.wait()
    n = TICKS * THREADS  # each thread makes every update of a tick
    assert got["fake_counter"] == n
    assert got["another_fake_counter"] == 2 * n
    assert got["fake_gauge"] == n
    assert got["another_fake_gauge"] == 5 * n
    assert got["sub_fake_gauge"] == -7 * n
    assert got["dec_fake_gauge"] == -n
    assert got["fake_set_gauge"] == 1.5 * TICKS
    assert got["fake_set_int_gauge"] == TICKS
    assert got["fake_add_int_gauge"] == 3 * n
    assert got["fake_float_counter"] == 0.25 * n
    assert got["fake_int_counter"] == 3 * n
    assert got['fake_tick_float_counter{source="tick"}'] == \
        THREADS * sum(t * 0.5 for t in range(1, TICKS + 1))
    assert got["fake_dec_float_gauge"] == -n
    assert got["fake_inc_int_gauge"] == n
    assert got["fake_histogram_count"] == n
    assert got["fake_histogram_sum"] == THREADS * sum(t % 10 for t in range(1, TICKS + 1))
    requests = {k: v for k, v in got.items() if k.startswith("fake_requests_total{")}
    assert sum(requests.values()) == n and len(requests) == min(TICKS, 6)


def test_its_update_methods_exist_only_inlined(rust_example: Path,
                                               noop_json: Callable[..., Any]) -> None:
    """What the preset must work with: the crate's counter and gauge updates have no
    code of their own in a release build, only copies inlined into the example."""
    got = noop_json("funcs", rust_example, "prometheus::*", "--json")["functions"]
    rows = {r["name"]: r for r in got}
    inc = rows["prometheus::counter::GenericCounter<prometheus::atomic64::AtomicU64>::inc"
               "<prometheus::atomic64::AtomicU64>"]
    assert inc["only_inlined"] and inc["inlined"] >= 1
    assert any(r["name"].startswith("prometheus::histogram::Histogram::observe")
               and not r.get("only_inlined") for r in got)
