"""The VictoriaMetrics/metrics preset: the probes on its updates (``probes``: every
update in ``noop --binary``'s terminal lines, the update counts of ``noop run --mirror
both``), and for ``noop run`` the one where the program writes a Set
(``(*Set).WritePrometheus``: the receiver in the first argument register), which finds a
Set the program writes without registering it, as client_golang's ``Gather`` probe finds
a registry only a local holds. By default (``--mirror auto``) only that one is kept: the
mirror reads every value from memory."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from agent.config.selector import Selector
from agent.errors import NoopError
from agent.plan.binary import Binary
from agent.plan.model import Plan, ProbePlan
from agent.plan.placement.entry import entry_site
from agent.presets.client_golang.facts import OTHERS_READ, TARGET
from agent.presets.client_golang.values import register
from agent.presets.mirror import GATHERED
from agent.presets.vmetrics.facts import PKG
from agent.presets.vmetrics.probes import probes as updates

SOURCE = "VictoriaMetrics/metrics preset"  # plans.VMETRICS
WRITE = f"{PKG}.(*Set).WritePrometheus"


def make(b: Binary, aggregate: bool) -> Plan:
    """The preset's plan for ``b``, a Go program that keeps metrics with
    VictoriaMetrics/metrics (``library.uses``): its update probes (with ``aggregate``,
    folding hits into rows, and the Set writer's probe beside them). No update found
    in the terminal: one line, what to do."""
    from agent.binary.gometa.program import GoProgram
    from agent.presets.vmetrics.layout import NoLayout, layout

    here = Selector(path=str(Path(b.path).resolve()))
    target = b.plan(TARGET, None, selector=here, modules=b.modules(PKG))
    try:
        lay = layout(GoProgram(b.elf))
    except NoLayout as exc:
        if aggregate:  # the mirror says why, once; nothing to probe
            return Plan(SOURCE, (target,), ())
        raise NoopError(f"{b.path}: its VictoriaMetrics/metrics updates cannot be probed: "
                        f"{exc.message}", "noop reads the library's 1.x layouts it can "
                        "verify in the binary's type descriptors") from None
    if b.arch.name not in OTHERS_READ:  # noop run's mirror only (plans.need_updates)
        written = _written(b)
        return Plan(SOURCE, (target,), (written,) if written else ())
    probes, unseen = updates(b, lay, aggregate)
    if not probes and not aggregate:
        raise NoopError(f"{b.path} keeps metrics with VictoriaMetrics/metrics but none of "
                        "its counter, float counter, histogram or summary updates was "
                        "found in its code", "noop run --binary mirrors its series from "
                        "its memory")
    if probes and unseen:  # said once, with the first probe
        probes[0] = replace(probes[0], unseen=(*probes[0].unseen, *unseen))
    written = _written(b) if aggregate else None
    if written is not None:
        probes.append(written)
    # updates none of whose probes could be made: said once all the same
    notes = tuple(f"VictoriaMetrics/metrics: {u}" for u in unseen) if not probes else ()
    return Plan(SOURCE, (target,), tuple(probes), notes=notes)


def _written(b: Binary) -> ProbePlan | None:
    """``(*Set).WritePrometheus``'s entry: the Set in the first argument register
    (rax, x0). None without the register
    ABI, or when no code of it runs on its own (inlined copies would go unseen)."""
    sym = b.functions.symbols.get(WRITE)
    if b.goid_offset is None or sym is None or not sym.size:
        return None
    try:
        if b.functions.inlined(WRITE):
            return None
    except NoopError:
        pass  # no inlining told: its own code is all there is
    value, fetch = register("registry", b.arch.go_int_regs[0], "uint", "*Set")
    site = entry_site(b, WRITE, (fetch,))
    return ProbePlan(GATHERED, TARGET, (value,), (replace(site, tag="gathered"),), tells=True)
