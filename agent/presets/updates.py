"""Metric updates as the presets' events tell them (client_golang's, the prometheus
crate's, VictoriaMetrics/metrics'): the metric, its labels, the value and the
increment. What is a set, an add or an increment comes from each preset's own rules and
site tags (its ``decode``); an event they do not describe is Undecodable."""

from __future__ import annotations

from functools import lru_cache
from types import ModuleType

from agent.kernel.events import Event
from agent.output.undecodable import Undecodable, shown, why
from agent.plan.model import ProbePlan
from agent.presets.client_golang import decode as client_golang
from agent.presets.common import Update
from agent.presets.rust_prometheus import decode as rust_prometheus
from agent.presets.vmetrics import decode as vmetrics

# Each preset's decoder, by the library it mirrors: ``operation(probe, tag)``,
# ``update(event, probe, kind, op)`` and ``fold(probe, site, object, columns, hits)``.
DECODERS: dict[str, ModuleType] = {m.LIBRARY: m for m in (client_golang, rust_prometheus,
                                                           vmetrics)}


def decoder(library: str) -> ModuleType:
    return DECODERS.get(library, client_golang)


def update(event: Event, probe: ProbePlan, library: str = "client_golang") -> Update:
    """The update an event of ``probe``, of the preset for ``library``, tells; Undecodable
    when it tells none (a site, operation or value the preset does not make)."""
    kind, op = operation(probe, event.site, library)
    try:
        u: Update = decoder(library).update(event, probe, kind, op)
        return u
    except Exception as exc:  # any decoder's failure: one kind of undecodable event
        raise why(exc, probe.name, f"tag {probe.sites[event.site].tag!r}, {shown(event)}"
                  ) from exc


def operation(probe: ProbePlan, site: int, library: str = "client_golang"
              ) -> tuple[str, str]:
    """(kind, op) of the updates at a site of the preset's ``probe``: client_golang's by
    its probe's rule (``client_golang.facts.RULES``), the crate's by the site's tag;
    Undecodable when that is not an update the preset makes."""
    if not 0 <= site < len(probe.sites):
        raise Undecodable("site_out_of_range", f"site index {site} of "
                          f"{len(probe.sites)} sites", probe.name)
    return _operation(probe.name, probe.sites[site].tag, library)


@lru_cache(maxsize=4096)  # a plan's few (probe, tag) pairs, asked once per event
def _operation(probe: str, tag: str, library: str) -> tuple[str, str]:
    got: tuple[str, str] = decoder(library).operation(probe, tag)
    return got
