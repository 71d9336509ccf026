"""prometheusnoop's terminal lines for a preset's events: one per metric update."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import TYPE_CHECKING, TextIO

from agent.kernel.events import Event
from agent.output.printer import Sink, _clock, _iso, number
from agent.output.undecodable import probe_of, shown, why
from agent.plan.model import Plan
from agent.presets import updates
from agent.presets.common import Update
from agent.presets.plans import library

if TYPE_CHECKING:
    from agent.presets.vmetrics.names import Names


def preset_printer(plan: Plan, out: TextIO, as_json: bool) -> Sink:
    """prometheusnoop's lines: one per metric update. A value read from the metric's
    memory apart from the update (it may include another thread's) is shown ``~N``,
    ``"racy": true`` in JSON. A metric whose name noop has not found (a
    VictoriaMetrics/metrics Set it did not walk) is ``?``."""
    lib = library(plan)
    header = [] if as_json else [
        f"{'TIME':<15} {'PID':>7} {'OBJECT':<14} {'OP':<9} METRIC VALUE (INC)\n"]
    names = _names(plan) if getattr(updates.decoder(lib), "UNNAMED", False) else None

    def emit(e: Event) -> None:
        probe = probe_of(plan, e)
        try:
            u = updates.update(e, probe, lib)
            if names is not None and u.metric == "?":
                got = names.name(e.pid, u.object)
                if got is not None:
                    u = replace(u, metric=got[0], labels=got[1])
            line = _preset_line(u, e, as_json)
        except Exception as exc:  # an update noop cannot show: counted by the caller
            raise why(exc, probe.name, shown(e)) from exc
        if header:
            out.write(header.pop())
        out.write(line)
        out.flush()

    return emit


_NAMES: dict[tuple[str, str], Names] = {}  # one per build: a trace made again keeps it


def _names(plan: Plan) -> Names:
    """Where a library's updates carry no name (VictoriaMetrics/metrics), the names its
    Sets give the objects, walked in the process's memory."""
    from agent.presets.vmetrics.names import Names

    (target,) = plan.targets
    key = (target.binary, target.build_id)  # a new build: walked afresh
    if key not in _NAMES:
        _NAMES[key] = Names(target.name, target.binary)
    return _NAMES[key]


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
