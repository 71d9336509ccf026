"""prometheusnoop's terminal lines for a preset's events: one per metric update."""

from __future__ import annotations

import json
from typing import TextIO

from agent.kernel.events import Event
from agent.output.printer import Sink, _clock, _iso, number
from agent.output.undecodable import probe_of, shown, why
from agent.plan.model import Plan
from agent.presets import updates
from agent.presets.common import Update
from agent.presets.plans import library


def preset_printer(plan: Plan, out: TextIO, as_json: bool) -> Sink:
    """prometheusnoop's lines: one per metric update. A value read from the metric's
    memory apart from the update (it may include another thread's) is shown ``~N``,
    ``"racy": true`` in JSON."""
    lib = library(plan)
    header = [] if as_json else [
        f"{'TIME':<15} {'PID':>7} {'OBJECT':<14} {'OP':<9} METRIC VALUE (INC)\n"]

    def emit(e: Event) -> None:
        probe = probe_of(plan, e)
        try:
            line = _preset_line(updates.update(e, probe, lib), e, as_json)
        except Exception as exc:  # an update noop cannot show: counted by the caller
            raise why(exc, probe.name, shown(e)) from exc
        if header:
            out.write(header.pop())
        out.write(line)
        out.flush()

    return emit


def _preset_line(u: Update, e: Event, as_json: bool) -> str:
    if as_json:
        obj = {"time": _iso(e.ts), "pid": e.pid, "tid": e.tid,
               "object": f"{u.object:#x}", "kind": u.kind, "metric": u.metric,
               "labels": u.labels, "op": u.op, "value": u.value, "inc": u.inc}
        if u.racy:
            obj["racy"] = True
        if u.note:
            obj["note"] = u.note
        return json.dumps(obj) + "\n"
    labels = ",".join(f'{k}="{v}"' for k, v in sorted(u.labels.items()))
    name = u.metric + (f"{{{labels}}}" if labels else "")
    inc = "" if u.inc is None else f" ({'+' if u.inc >= 0 else ''}{number(u.inc)})"
    note = f"  [{u.note}]" if u.note else ""
    return (f"{_clock(e.ts)} {e.pid:>7} {u.object:#014x} {u.kind[0]}.{u.op:<7} "
            f"{name} {'~' * u.racy}{number(u.value)}{inc}{note}\n")
