"""The VictoriaMetrics/metrics preset of ``noop run --binary``: no probe on any update
(the mirror reads every value from memory), one where the program writes a Set
(``(*Set).WritePrometheus``: the receiver in RAX under Go's register ABI), which finds a
Set the program writes without registering it, as client_golang's ``Gather`` probe finds
a registry only a local holds."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from agent.config.selector import Selector
from agent.errors import NoopError
from agent.plan.binary import Binary
from agent.plan.model import Plan, ProbePlan
from agent.plan.placement.entry import entry_site
from agent.presets.client_golang.facts import TARGET
from agent.presets.client_golang.values import register
from agent.presets.mirror import GATHERED
from agent.presets.vmetrics.layout import PKG

SOURCE = "VictoriaMetrics/metrics preset"  # plans.VMETRICS
WRITE = f"{PKG}.(*Set).WritePrometheus"


def make(b: Binary) -> Plan:
    """The preset's plan for ``b``, a Go program that keeps metrics with
    VictoriaMetrics/metrics (``library.uses``): the one probe, where it has code."""
    probes = [p for p in (_written(b),) if p is not None]
    here = Selector(path=str(Path(b.path).resolve()))
    return Plan(SOURCE, (b.plan(TARGET, None, selector=here, modules=b.modules(PKG)),),
                tuple(probes))


def _written(b: Binary) -> ProbePlan | None:
    """``(*Set).WritePrometheus``'s entry: the Set in RAX. None without the register
    ABI, or when no code of it runs on its own (inlined copies would go unseen)."""
    sym = b.functions.symbols.get(WRITE)
    if b.goid_offset is None or sym is None or not sym.size:
        return None
    try:
        if b.functions.inlined(WRITE):
            return None
    except NoopError:
        pass  # no inlining told: its own code is all there is
    value, fetch = register("registry", "rax", "uint", "*Set")
    site = entry_site(b, WRITE, (fetch,))
    return ProbePlan(GATHERED, TARGET, (value,), (replace(site, tag="gathered"),), tells=True)
