"""Terminal output of a trace: one line per event, as text (under 80 columns where the
values allow) or as one JSON object per line. An event that cannot be shown raises
Undecodable before anything of it is written."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TextIO

from agent.kernel.events import Event
from agent.live.cgroups import Processes
from agent.output.undecodable import probe_of, shown, why
from agent.plan.model import Plan, ProbePlan

# CLOCK_MONOTONIC (bpf_ktime_get_ns) -> wall clock, fixed once at start.
_EPOCH_OFFSET = time.time_ns() - time.monotonic_ns()


def wall_ns(ts: int) -> int:
    return ts + _EPOCH_OFFSET


def _clock(ts: int) -> str:
    ns = wall_ns(ts)
    return time.strftime("%H:%M:%S", time.localtime(ns // 10**9)) + f".{ns % 10**9 // 1000:06d}"


def _iso(ts: int) -> str:
    ns = wall_ns(ts)
    return datetime.fromtimestamp(ns // 10**9, UTC).strftime(
        "%Y-%m-%dT%H:%M:%S") + f".{ns % 10**9:09d}Z"


def number(x: float | int | None) -> str:
    """A number the way Prometheus' text format prints it (shortest round-trip)."""
    if x is None:
        return "?"
    if isinstance(x, int):
        return str(x)
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "+Inf" if x > 0 else "-Inf"
    return str(int(x)) if x.is_integer() and abs(x) < 1e15 else repr(x)


def _text_value(event: Event, name: str, value: Any) -> str:
    if name in event.unreadable:
        return "<unreadable>"
    if name in event.faults:
        return "<fault>"
    if name in event.absent:
        return "<absent>"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False) + ("..." if name in event.truncated
                                                        else "")
    if isinstance(value, bytes):
        return value.hex() + ("..." if name in event.truncated else "")
    if isinstance(value, float):
        return number(value)
    return str(value)


def _json_value(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return str(value)
    return value


Sink = Callable[[Event], None]


def _spec_line(e: Event, probe: ProbePlan, processes: Processes, as_json: bool) -> str:
    if as_json:
        obj = {"time": _iso(e.ts), "probe": probe.name,
               "function": probe.sites[e.site].function, "pid": e.pid, "tid": e.tid,
               **dict(processes.labels(e.pid)),
               "values": {k: _json_value(v) for k, v in e.values.items()}}
        for key in ("faults", "absent", "truncated"):
            if getattr(e, key):
                obj[key] = list(getattr(e, key))
        if e.unreadable:
            obj["unreadable"] = e.unreadable
        return json.dumps(obj) + "\n"
    pairs = " ".join(f"{k}={_text_value(e, k, v)}" for k, v in e.values.items())
    return f"{_clock(e.ts)} {probe.name} {e.pid}/{e.tid} {pairs}\n"


def spec_printer(plan: Plan, out: TextIO, as_json: bool) -> Sink:
    """Lines for probes of a spec: time, probe, pid/tid, then name=value pairs; hits in
    processes outside the container or pod a target is limited to are left out."""
    told: set[tuple[int, int]] = set()
    processes = Processes(plan.limits())

    def emit(e: Event) -> None:
        probe = probe_of(plan, e)
        if not processes.admits(e.probe, e.pid):
            return
        try:
            line = _spec_line(e, probe, processes, as_json)
        except Exception as exc:  # a value noop cannot show: counted by the caller
            raise why(exc, probe.name, shown(e)) from exc
        out.write(line)
        if not as_json and e.unreadable and (e.probe, e.site) not in told:
            told.add((e.probe, e.site))
            for k, why_not in e.unreadable.items():
                out.write(f"  note: {probe.name}.{k} is <unreadable>: {why_not}\n")
        out.flush()

    return emit
