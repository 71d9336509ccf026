"""For noop run: the client_golang preset's updates at sites cheaper for the kernel than
the instruction after each atomic update: ``Counter.Add``'s integer path at the
conditional jump just before its ``lock xadd``, and ``histogram.observe`` at its entry;
none where a copy cannot be probed there, or nothing would be gained."""

from __future__ import annotations

from dataclasses import replace

from agent.binary import sites
from agent.plan.binary import Binary
from agent.plan.model import ProbePlan, Site, ValueSpec
from agent.plan.placement.entry import entry_site
from agent.plan.updates import argument_sites, field_offset
from agent.presets.client_golang.facts import CHEAP_PROBES, PKG, TARGET, Rule
from agent.presets.client_golang.values import common, field, register


def cheap_probe(b: Binary, rule: Rule) -> ProbePlan | None:
    """For noop run: the rule's updates at a cheaper site than the one after them, or
    None when there is none (or nothing to gain)."""
    if rule.probe == "counter_int":
        return counter_add(b)
    if rule.probe == "histogram":
        return _observe_entry(b)
    return None


def counter_add(b: Binary, only: set[int] | None = None) -> ProbePlan | None:
    """``Counter.Add``'s integer path, at the conditional jump just before its ``lock
    xadd`` (emulated), in the method and in every copy of it inlined elsewhere: the
    argument is there as a whole unsigned number, and valInt not yet changed. With
    ``only``, just before those xadds (the rest have their sites after them)."""
    fn = f"{PKG}.(*counter).Add"
    if fn not in b.functions.symbols:
        return None
    found, missed = argument_sites(b, fn)
    found = [a for a in found if a.fetch.formula == "uint"]
    if only is not None:
        found = [a for a in found if _next(b, a.function, a.address) in only]
        missed = len(only) - len(found)
    recv = next(iter(b.functions.param_types(fn).values()), None)
    if not found or missed or recv is None:
        return None  # a copy noop cannot probe there: the sites after every xadd instead
    out: list[Site] = []
    layout: tuple[ValueSpec, ...] = ()
    for a in found:  # name, labels and object first: read once per object, to describe it
        pairs = [*common(b, recv, a.receiver),
                 register("delta", a.fetch.regs[0], "uint", "uint64"),
                 field(b, recv, a.receiver, "valInt", "uint"),
                 field(b, recv, a.receiver, "valBits", "float")]
        layout = tuple(v for v, _ in pairs)
        out.append(Site(a.function, a.address, b.elf.file_offset(a.address), a.why,
                        tuple(f for _, f in pairs), when_zf=a.when_zf,
                        skip_flags=a.skip_flags, handling=a.handling, tag="counter.Add"))
    return ProbePlan(CHEAP_PROBES["counter_int"], TARGET, layout, tuple(out))


def _next(b: Binary, function: str, address: int) -> int | None:
    """The address of the instruction after the one at ``address``."""
    return next((i.end for i in b.instructions(function) if i.address == address), None)


def _observe_entry(b: Binary) -> ProbePlan | None:
    """``histogram.observe``, the one function every observation of a histogram runs
    (``Observe``, ``ObserveWithExemplar``), at its entry: the stack check's ``jbe``
    (emulated) of its own code, before its ``lock xadd`` on countAndHotIdx. None when
    it is inlined anywhere (those copies would go unseen)."""
    fn = f"{PKG}.(*histogram).observe"
    if fn not in b.functions.symbols or b.functions.inlined(fn):
        return None
    recv = next(iter(b.functions.param_types(fn).values()), None)
    if recv is None or field_offset(b, "histogram", "countAndHotIdx") is None:
        return None
    receiver = "rax"  # Go's register ABI: the first integer argument
    count = field(b, recv, receiver, "countAndHotIdx", "uint")
    before = (replace(count[0], name="before"), count[1])
    pairs = [*common(b, recv, receiver), before]
    site = entry_site(b, fn, tuple(f for _, f in pairs))
    if not site.skip_flags and site.handling != sites.EMULATED:
        return None  # no cheaper than after the xadd
    return ProbePlan("histogram", TARGET, tuple(v for v, _ in pairs),
                     (replace(site, tag="histogram.Observe"),))
