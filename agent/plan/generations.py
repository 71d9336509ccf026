"""Metric objects told apart by more than their address: a program that makes its
metrics again for every request (a registry per request) frees objects whose
addresses its garbage collector or allocator gives to the next ones. A preset adds
``renew`` sites where an address starts holding another object (a maker's return, the
drop of the one there), which note the time as that address's *generation*, and every
update reads the generation of its object's address with the address itself: the pair
names one object, and the in-kernel rows of two objects at one address never mix."""

from __future__ import annotations

from dataclasses import replace
from typing import Final

from agent.plan.fetches import Fetch
from agent.plan.model import ProbePlan, ValueSpec

NAME: Final = "generation"  # the value (and aggregate key) every update probe gains
# A renew probe has no budget (kernel.budget): taken off, an address's new object would
# be counted in its old one's rows, under its name. Its sites run once per object made
# or dropped.
SPEC = ValueSpec(NAME, "uint", 8, 0, "uint64", "the generation of m's address")


def of(address: Fetch) -> Fetch:
    """The generation of the object whose address ``address`` computes (a register plus
    an offset, or pointer hops: fetch kinds ``reg`` and ``addr``)."""
    if address.kind not in ("reg", "addr"):
        raise ValueError(f"not an address: a {address.kind} fetch")
    return Fetch(NAME, address.ops, address.offset, 8, address.regs, formula=address.kind)


def added(probe: ProbePlan, renews: ProbePlan | None, obj: str = "object") -> ProbePlan:
    """``probe`` with, when there are renew sites, the generation of each hit's object
    (whose address is its value ``obj``)."""
    if renews is None:
        return probe
    i = [v.name for v in probe.values].index(obj)
    saved = Fetch("saved", slot=len(probe.values))  # a return's: as its call read it
    return replace(probe, values=(*probe.values, SPEC), sites=tuple(
        replace(s, fetches=(*s.fetches, saved if s.role == "return" else of(s.fetches[i])))
        for s in probe.sites))
