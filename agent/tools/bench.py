"""``noop bench``: what one probe hit adds to a call, arm by arm (``arms``), on a looping
workload: the runs, their arms' order rotated, and the table of results."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.errors import NoopError, NotFound
from agent.tools.arms import Arm
from agent.tools.workloads import Site, make_site, run_workload

BASELINES = ("empty", "bpftrace")  # the first of these present is the default baseline


@dataclass(frozen=True, slots=True)
class Run:
    """One start of the workload under one arm."""

    arm: str
    repeat: int
    ns_per_call: tuple[float, ...]  # one per round
    calls: int  # calls_total, as the workload counted them
    final: float  # the metric's value as the workload read it at the end
    hits: int | None
    notes: dict[str, float] = field(default_factory=dict)
    where: str = ""


@dataclass(frozen=True, slots=True)
class ArmResult:
    name: str
    ns_per_call: float  # median over every round of every repetition
    added_ns: float | None  # ns_per_call minus that of arm "none"
    ratio: float | None  # added_ns over the baseline arm's added_ns
    hits: int | None  # over all repetitions
    calls: int  # over all repetitions
    runs: tuple[Run, ...]


@dataclass(frozen=True, slots=True)
class Result:
    op: str
    site: Site
    rounds: int
    calls: int  # per round
    repeats: int
    baseline: str | None
    arms: tuple[ArmResult, ...]

    def to_json(self) -> dict[str, Any]:
        site = {"binary": self.site.binary, "function": self.site.function,
                "address": self.site.address, "file_offset": self.site.file_offset}
        arms = [{"name": a.name, "ns_per_call": a.ns_per_call, "added_ns": a.added_ns,
                 "ratio": a.ratio, "hits": a.hits, "calls": a.calls,
                 "runs": [{"repeat": r.repeat, "ns_per_call": list(r.ns_per_call),
                           "calls": r.calls, "final": r.final, "hits": r.hits,
                           **({"notes": r.notes} if r.notes else {}),
                           **({"where": r.where} if r.where else {})}
                          for r in a.runs]} for a in self.arms]
        return {"op": self.op, "site": site, "rounds": self.rounds, "calls": self.calls,
                "repeats": self.repeats, "baseline": self.baseline, "arms": arms}


# -- arms ----------------------------------------------------------------------------------

# -- the harness ---------------------------------------------------------------------------

def _baseline(names: Sequence[str], wanted: str | None) -> str | None:
    if wanted is not None:
        if wanted not in names:
            raise NotFound("baseline arm", wanted, names)
        return wanted
    return next((n for n in BASELINES if n in names), None)


def run(binary: str | Path, op: str, function: str, arms: Sequence[Arm], rounds: int,
        calls: int, *, repeats: int = 3, baseline: str | None = None,
        address: int | None = None, timeout: float | None = None) -> Result:
    """Start the workload ``repeats`` times under every arm (``rounds`` rounds of
    ``calls`` calls of ``op`` each run), the arms' order rotated each repetition so that
    drift hits every arm alike. Every arm probes ``function``'s entry (or ``address``),
    but noop's own arms probe where noop chooses, unless ``address`` is given."""
    names = [a.name for a in arms]
    if not arms or len(set(names)) != len(names):
        raise NoopError("bench needs arms with distinct names", f"got {names}")
    if min(rounds, calls, repeats) <= 0:
        raise NoopError("rounds, calls and repeats must be positive")
    chosen = _baseline(names, baseline)
    site = make_site(binary, function, address)
    limit = timeout if timeout is not None else 60 + 1e-4 * calls * rounds
    runs: dict[str, list[Run]] = {n: [] for n in names}
    for repeat in range(repeats):
        k = repeat % len(arms)
        for a in (*arms[k:], *arms[:k]):
            with a.attach(site) as attached:
                per_call, total, final = run_workload(site, op, calls, rounds, limit)
            runs[a.name].append(Run(a.name, repeat, per_call, total, final, attached.hits,
                                    attached.notes, attached.where))
    medians = {n: statistics.median(x for r in runs[n] for x in r.ns_per_call) for n in names}
    added = {n: medians[n] - medians["none"] if "none" in medians else None for n in names}
    base = added.get(chosen) if chosen is not None else None
    out = []
    for n in names:
        hits = [r.hits for r in runs[n]]
        mine = added[n]
        out.append(ArmResult(
            n, medians[n], mine,
            mine / base if mine is not None and base is not None and base > 0 else None,
            None if None in hits else sum(h for h in hits if h is not None),
            sum(r.calls for r in runs[n]), tuple(runs[n])))
    return Result(op, site, rounds, calls, repeats, chosen, tuple(out))


def _num(x: float | None, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def render(result: Result) -> str:
    """The result as a table of at most 80 columns."""
    s = result.site
    name = s.function if len(s.function) <= 56 else "..." + s.function[-53:]
    head = [f"op {result.op}: {result.repeats} repeats x {result.rounds} rounds x "
            f"{result.calls} calls",
            f"site {name} at {s.address:#x}",
            ""]
    base = result.baseline or "-"
    rows = [f"{'arm':<12} {'ns/call':>10} {'+ns/call':>10} {'x ' + base:>12} "
            f"{'hits':>14} {'calls':>14}"]
    for a in result.arms:
        rows.append(f"{a.name[:12]:<12} {a.ns_per_call:>10.2f} {_num(a.added_ns, '.2f'):>10} "
                    f"{_num(a.ratio, '.2f'):>12} {_num(a.hits, 'd'):>14} {a.calls:>14d}")
    missed = [a.name for a in result.arms if a.hits is not None and a.hits != a.calls]
    tail = [f"hits differ from calls: {', '.join(missed)}"] if missed else []
    for where in sorted({r.where for a in result.arms for r in a.runs} - {""}):
        names = ", ".join(a.name for a in result.arms if any(r.where == where for r in a.runs))
        tail.append(f"{names} probed {where}")
    for a in result.arms:
        read, lost, cpu = (sum(r.notes.get(k, 0.0) for r in a.runs)
                           for k in ("read", "lost", "cpu_s"))
        if any("read" in r.notes for r in a.runs):
            rate = f"{read / cpu / 1e6:.2f} M/s" if cpu > 0 else "-"
            tail.append(f"{a.name}: {read:.0f} records read, {lost:.0f} lost; "
                        f"decoded at {rate} per core")
        if any("value" in r.notes for r in a.runs):
            tail.append(f"{a.name}: argument summed {sum(r.notes['value'] for r in a.runs):g}"
                        f"; the workload's final values {sum(r.final for r in a.runs):g}")
    return "\n".join(line[:80] for line in (*head, *rows, *tail))
