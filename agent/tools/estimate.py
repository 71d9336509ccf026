"""``noop check``'s cost estimate: what each site's hit costs here, and with a rate
(given with ``--rate``, or counted for a while with ``--measure``) what share of a
CPU each probe will take of a target process, against its budget."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

from agent import logs
from agent.binary import sites
from agent.errors import NoopError
from agent.kernel.cost import Costs
from agent.plan.model import Plan, ProbePlan

LOOK_EVERY = 0.1  # seconds between looks at the counts while measuring


def probe_ns(probe: ProbePlan, costs: Costs) -> float:
    """What one hit of the probe costs at most: its dearest site's (at an exit probe, a
    call's entry and its dearest return)."""
    each = [(s.role, costs.per_hit(s.handling)) for s in probe.sites]
    calls = [ns for role, ns in each if role == "call"]
    rest = [ns for role, ns in each if role != "call"]
    return max(calls, default=0.0) + max(rest, default=0.0)


def rates(given: list[tuple[str | None, float]], plan: Plan) -> dict[str, float]:
    """``--rate`` as given (``N`` for every probe, ``PROBE=N`` for one) by probe."""
    names = [p.name for p in plan.probes]
    out: dict[str, float] = {}
    for name, rate in given:
        if name is None:
            out.update({n: rate for n in names if n not in out})
        elif name not in names:
            from agent.errors import NotFound
            raise NotFound("probe", name, names)
        else:
            out[name] = rate
    return out


def budget_of(probe: ProbePlan, default: float) -> float:
    return probe.budget if probe.budget is not None else default


def estimate(plan: Plan, costs: Costs | None, rate: dict[str, float],
             measured: dict[str, dict[str, Any]], default: float) -> dict[str, Any]:
    """The estimate, as JSON: per probe its sites' costs, and its share of a CPU where
    a rate is known."""
    probes = []
    for p in plan.probes:
        budget = budget_of(p, default)
        entry: dict[str, Any] = {"probe": p.name,
                                 "budget": None if math.isinf(budget) else budget,
                                 "sites": [s.handling or sites.SINGLE_STEPPED
                                           for s in p.sites]}
        if costs is not None:
            entry["sites_ns"] = [costs.per_hit(s.handling) for s in p.sites]
            entry["ns_per_hit"] = probe_ns(p, costs)
        m = measured.get(p.name)
        hz = m["rate"] if m is not None else rate.get(p.name)
        if m is not None:
            entry["measured"] = m
        if hz is not None:
            entry["rate"] = hz
            if costs is not None:
                share = hz * probe_ns(p, costs) / 1e9
                entry["share"] = share
                entry["over"] = share > budget or bool(m and m.get("stopped"))
        probes.append(entry)
    out: dict[str, Any] = {"probes": probes}
    if costs is not None:
        out["per_hit_ns"] = dict(costs.ns)
        out["machine"] = costs.machine
    return out


def measure(plan: Plan, seconds: float, costs: Costs, default: float
            ) -> dict[str, dict[str, Any]]:
    """Count every probe's hits for ``seconds`` with a bare in-kernel counter on each
    of its sites (nothing read, nothing sent): per probe the busiest process's hits
    per second. A probe whose count already costs more than its budget's share of the
    time is taken off at once, and said so (``stopped``)."""
    from agent.kernel import attach, objects, preflight, prelude, tables

    preflight.check_arch(plan)
    preflight.check_privileges()
    preflight.check_targets(plan)
    index = [(pi, si) for pi, p in enumerate(plan.probes) for si in range(len(p.sites))]
    text = "\n".join([prelude.helpers_text().rstrip(), "", *prelude.traps_c(plan)]
                     + [f"int noop_count_{n}(struct pt_regs *ctx)\n{{\n\tnoop_trap({n});"
                        "\n\treturn 0;\n}\n" for n in range(len(index))])
    names = [f"noop_count_{n}" for n in range(len(index))]
    obj = objects.build(text, names)
    attached: dict[int, list[attach.Handle]] = {}
    started: dict[int, float] = {}
    stopped: dict[int, float] = {}
    try:
        table = obj.maps["noop_traps"]
        for n in range(len(index)):
            table.update(n.to_bytes(4, "little") + bytes(4), bytes(8))
        _attach_counters(plan, index, obj, names, attached)
        t0 = time.monotonic()
        started = {pi: t0 for pi in attached}
        while (now := time.monotonic()) - t0 < seconds:
            time.sleep(min(LOOK_EVERY, max(0.0, seconds - (now - t0))))
            now = time.monotonic()
            for pi, ns in _cost(plan, index, tables.trap_counts(table), costs).items():
                budget = budget_of(plan.probes[pi], default)
                if pi in attached and pi not in stopped and ns > budget * seconds * 1e9:
                    for probe in attached.pop(pi):
                        probe.close()
                    stopped[pi] = now
        end = time.monotonic()
        counts = tables.trap_counts(table)
    finally:
        for probes in attached.values():
            for probe in probes:
                probe.close()
        obj.close()
    return _rates(plan, index, counts, started, stopped, end)


def _cost(plan: Plan, index: list[tuple[int, int]], counts: dict[tuple[int, int], int],
          costs: Costs) -> dict[int, float]:
    """Per probe, what its busiest process paid so far (ns)."""
    per: dict[tuple[int, int], float] = {}
    for (n, pid), hits in counts.items():
        pi, si = index[n]
        ns = hits * costs.per_hit(plan.probes[pi].sites[si].handling)
        per[(pi, pid)] = per.get((pi, pid), 0.0) + ns
    out: dict[int, float] = {}
    for (pi, _pid), ns in per.items():
        out[pi] = max(out.get(pi, 0.0), ns)
    return out


def costs_ahead(calibrate: bool) -> Callable[[], Costs | None]:
    """``costs_or_none``, measured in a thread beside what the caller does meanwhile
    (resolving a plan): the returned function waits for it. The measurement times its
    own thread's CPU, so the work beside it does not count in it."""
    import threading

    got: list[Costs | None] = [None]
    thread = threading.Thread(target=lambda: got.__setitem__(0, costs_or_none(calibrate)),
                              name="noop-calibrate", daemon=True)
    thread.start()

    def wait() -> Costs | None:
        thread.join()
        return got[0]
    return wait


def costs_or_none(calibrate: bool) -> Costs | None:
    """The machine's costs: cached, else measured now when ``calibrate`` (root)."""
    from agent.kernel import cost

    got = cost.known()
    if got is not None or not calibrate:
        return got
    try:
        return cost.costs()
    except NoopError as exc:
        logs.say(f"{exc.message}: costs are not estimated", logs.WARNING)
        return None


def _attach_counters(plan: Plan, index: list[tuple[int, int]], obj: Any, names: list[str],
                     attached: dict[int, list[Any]]) -> None:
    """Each site's counter program on every file of its probe's target (into
    ``attached``, by probe, so that a probe can come off alone)."""
    from agent.binary.proof import Opened
    from agent.kernel import attach

    for target in plan.targets:
        for path in target.files:
            with Opened(path) as opened:  # proven and attached through one descriptor
                for n, (pi, si) in enumerate(index):
                    site = plan.probes[pi].sites[si]
                    if target.name == plan.probes[pi].target:
                        attached.setdefault(pi, []).extend(attach.attach_proven(
                            path, opened, [attach.Uprobe(
                                site.file_offset, site.proof, obj.progs[names[n]],
                                f"{plan.probes[pi].name} at {site.function} "
                                f"({site.address:#x})")]))


def _rates(plan: Plan, index: list[tuple[int, int]], counts: dict[tuple[int, int], int],
           started: dict[int, float], stopped: dict[int, float], end: float
           ) -> dict[str, dict[str, Any]]:
    """Per probe counted: how long, its hits, its processes and its busiest process's
    hits per second; said when it was taken off for its budget."""
    out: dict[str, dict[str, Any]] = {}
    for pi, p in enumerate(plan.probes):
        if pi not in started:
            continue
        took = (stopped.get(pi, end)) - started[pi]
        per_pid: dict[int, int] = {}
        for (n, pid), hits in counts.items():
            if index[n][0] == pi:
                per_pid[pid] = per_pid.get(pid, 0) + hits
        busiest = max(per_pid.values(), default=0)
        out[p.name] = {"seconds": round(took, 3), "hits": sum(per_pid.values()),
                       "processes": len([x for x in per_pid if x]),
                       "rate": busiest / took if took > 0 else 0.0,
                       **({"stopped": f"over its budget after {took:.2f} s: counting "
                           "stopped"} if pi in stopped else {})}
        if pi in stopped:
            logs.say(f"probe {p.name}: over its budget after {took:.2f} s of measuring; "
                     "taken off", logs.WARNING)
    return out
