"""examples/go-prometheus under test: run for ``TICKS`` ticks, traced by noop, and the
specs the tests give noop for it."""

from __future__ import annotations

import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.metrics import Samples, one, scrape
from harness.noop import Agent, settle, tracing, wait_for

TICKS = 23  # prime: no two metrics' expected counts coincide by accident


def run_example(example: Path, ticks: int = TICKS) -> tuple[subprocess.Popen[str], str]:
    """The example, run until its last tick (then it lingers, serving): the process and
    its /metrics URL."""
    ex, url, _log = run_logged(example, ticks)
    return ex, url


def run_logged(example: Path, ticks: int = TICKS
               ) -> tuple[subprocess.Popen[str], str, list[str]]:
    """``run_example``, and what the program said up to its last tick."""
    ex = subprocess.Popen([str(example), "-listen", "127.0.0.1:0", "-period", "30ms",
                           "-ticks", str(ticks), "-linger", "60s"],
                          stderr=subprocess.PIPE, text=True)
    assert ex.stderr is not None
    try:
        log = wait_for(ex.stderr, rf"tick {ticks}$", 60)
    except BaseException:
        ex.kill()
        ex.wait()
        raise
    url = next(m.group(1) for line in log if (m := re.search(r"(http://\S+/metrics)", line)))
    return ex, url, log


@dataclass
class Traced:
    lines: list[dict[str, Any]]
    metrics: dict[str, float]
    pid: int
    noop_stderr: str
    noop_exit: int
    noop_pid: int
    log: list[str]  # what the program said up to its last tick


def trace(tmp_path: Path, example: Path, *noop_args: str | Path) -> Traced:
    """Start noop, then the example for TICKS ticks; scrape its /metrics after the last
    tick, stop noop, and return both sides."""
    with tracing(tmp_path, *noop_args) as session:
        ex, url, log = run_logged(example)
        try:
            metrics = scrape(url)
            time.sleep(1.0)  # let noop drain the ring buffer
        finally:
            ex.terminate()
            ex.wait(timeout=10)
    return Traced(session.lines, metrics, ex.pid, session.stderr, session.exit or 0,
                  session.pid, log)


# noop run's spec for the example: a probe on main.placeOrder with a metric of each kind.
SPEC = """
targets:
  example: {{binary: {binary}}}
probes:
  - name: order
    function: main.placeOrder
    values:
      id: o.ID
      customer: o.Customer
      qty: o.Items[0].Qty
    metrics:
      - name: shop_orders_total
        type: counter
        help: Orders, by customer
        labels: {{customer: customer}}
      - name: shop_order_ids_total
        type: counter
        value: id
      - name: shop_first_qty
        type: histogram
        value: qty
        buckets: [5, 10, 20]
      - name: shop_last_order_id
        type: gauge
        value: id
      - name: shop_tiers_total
        type: counter
        labels:
          tier: {{value: customer, map: {{acme: gold}}, default: standard}}
          known: {{value: customer, allow: "acme|globex"}}
      - name: shop_capped_total
        type: counter
        max_series: 2
        labels: {{customer: customer}}
      - name: shop_orders_events_total
        type: counter
        aggregate: events
        labels: {{customer: customer}}
"""

# Mirrors of the example's float updates (the arguments live in XMM registers).
FLOATS = """
targets:
  example: {{binary: {binary}}}
probes:
  - name: counter_add
    function: github.com/prometheus/client_golang/prometheus.(*counter).Add
    values: {{metric: c.desc.fqName, v: v}}
    metrics:
      - {{name: mirror_added_total, type: counter, value: v, labels: {{metric: metric}}}}
  - name: gauge_add           # with its copies inlined into Inc, Dec and Sub
    function: github.com/prometheus/client_golang/prometheus.(*gauge).Add
    values: {{metric: g.desc.fqName, delta: val}}
    metrics:                  # the sum of the increments: the gauge itself
      - {{name: mirror_changes, type: histogram, value: delta, buckets: [0],
         labels: {{metric: metric}}}}
  - name: gauge_set
    function: github.com/prometheus/client_golang/prometheus.(*gauge).Set
    values: {{metric: g.desc.fqName, to: val}}
    metrics:
      - {{name: mirror_set, type: gauge, value: to, labels: {{metric: metric}}}}
  - name: observe
    function: github.com/prometheus/client_golang/prometheus.(*histogram).Observe
    values: {{v: v}}
    metrics:
      - {{name: mirror_observed, type: histogram, value: v, buckets: [1, 2.5, 5, 7.5]}}
"""


def mirrors_equal(agent: Agent, own: Samples) -> None:
    """What noop run with ``FLOATS`` exports equals the example's own ``/metrics``."""
    got = settle(agent, "mirror_observed_count", {}, TICKS)
    for name in ("fake_float_counter", "fake_int_counter"):
        assert one(got, "mirror_added_total", metric=name) == one(own, name + "_total") > 0
    for name in ("fake_gauge", "another_fake_gauge", "sub_fake_gauge", "dec_fake_gauge"):
        assert one(got, "mirror_changes_sum", metric=name) == one(own, name) != 0
        assert one(got, "mirror_changes_count", metric=name) == TICKS
    assert one(got, "mirror_set", metric="fake_set_gauge") == one(own, "fake_set_gauge")
    for le in ("1", "2.5", "5", "7.5", "+Inf"):
        assert one(got, "mirror_observed_bucket", le=le) == \
            one(own, "fake_histogram_bucket", le=le)
    assert one(got, "mirror_observed_sum") == one(own, "fake_histogram_sum")
