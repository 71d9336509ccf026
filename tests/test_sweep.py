"""When ``noop run`` sweeps a probe whose rows are metric objects (the preset's) before
its timed sweep: once a quarter of the probe's map was made since the last sweep, each
new row told by one event. The real sweep, under a program that makes its metrics again
for every request, is tests/test_churn.py."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from agent.plan.model import Aggregate, Column, MetricPlan, ProbePlan
from agent.service.sweep import PRESSURE, Sweeper

ROWS = 4096


def _probe(describe: bool = True, events: bool = False) -> ProbePlan:
    metrics = (MetricPlan("m", "counter", "", None, (), (), 10, "events"),) if events else ()
    return ProbePlan("p", "main", (), (), metrics=metrics, aggregate=Aggregate(
        ("$pid",), (Column("c", "sum", "n"),), ROWS, describe=describe))


@dataclass
class _Meta:
    renews: bool


@dataclass
class _Plan:
    probes: tuple[ProbePlan, ...]


@dataclass
class _Session:  # what a sweep's pressure reads of a Session
    plan: _Plan
    meta: _Meta | None
    seen: dict[int, int] = field(default_factory=dict)


def test_pressed_by_a_quarter_of_a_probes_rows_since_the_last_sweep() -> None:
    s = _Session(_Plan((_probe(False), _probe())), _Meta(True))
    sweeper = Sweeper()
    assert not sweeper.pressed(s)  # type: ignore[arg-type]
    s.seen = {0: 10 * ROWS, 1: ROWS // PRESSURE - 1}  # probe 0 describes no rows
    assert not sweeper.pressed(s)  # type: ignore[arg-type]
    s.seen[1] += 1
    assert sweeper.pressed(s)  # type: ignore[arg-type]
    sweeper._swept(s)  # type: ignore[arg-type]
    assert not sweeper.pressed(s)  # type: ignore[arg-type]
    s.seen[1] += ROWS // PRESSURE - 1
    assert not sweeper.pressed(s)  # type: ignore[arg-type]
    s.seen[1] += 1
    assert sweeper.pressed(s)  # type: ignore[arg-type]


@pytest.mark.parametrize("session", [
    _Session(_Plan((_probe(),)), None, {0: ROWS}),  # no preset
    _Session(_Plan((_probe(),)), _Meta(False), {0: ROWS}),  # objects never replaced
    _Session(_Plan((_probe(events=True),)), _Meta(True), {0: ROWS}),  # an event a hit
], ids=["no-preset", "no-renewal", "events"])
def test_not_pressed_where_events_are_not_new_rows(session: _Session) -> None:
    assert not Sweeper().pressed(session)  # type: ignore[arg-type]
    assert not Sweeper().pressed(None)
