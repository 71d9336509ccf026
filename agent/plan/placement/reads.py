"""The values a probe reads at a candidate instruction: each value's fetch with the
parameters where a placement says they are there, or the first that cannot be read;
and the registers fetches read.
"""

from __future__ import annotations

from collections.abc import Callable

from elftools.dwarf.die import DIE

from agent.binary.amd64 import is_vector
from agent.binary.dwarf.locations import Location
from agent.config.model import Probe
from agent.plan.binary import Binary
from agent.plan.fetches import Fetch
from agent.plan.model import ValueSpec
from agent.plan.selectors.places import SelectError


def registers(fetches: tuple[Fetch, ...]) -> set[str]:
    """Registers the fetches read."""
    return {r for f in fetches for r in f.regs} | {o.reg for f in fetches for o in f.ops
                                                  if o.reg}


def is_vector_fetch(fetch: Fetch) -> bool:
    """Whether the fetch reads an XMM register, which pt_regs does not hold."""
    return any(is_vector(r) for r in fetch.regs)


def fetches_at(b: Binary, probe: Probe, specs: tuple[ValueSpec, ...],
               types: dict[str, DIE | None], sizes: dict[str, int],
               locate: Callable[[str, int], Location | None], vector_ok: bool = False
               ) -> tuple[Fetch, ...] | str:
    """Each value's fetch with the parameters where ``locate(name, size)`` places
    them, or the name of the first parameter that cannot be read there (``vector_ok``: an XMM
    register counts as readable, to be reported unreadable at run time)."""
    out: list[Fetch] = []
    for v, spec in zip(probe.values, specs, strict=True):
        if v.builtin is not None:
            out.append(Fetch("builtin", builtin=v.builtin))
            continue
        steps = v.steps
        root = str(steps[0][1])
        try:
            sel = b.walker.select(steps, locate(root, sizes.get(root, 8)),
                                     types.get(root), v.decode, v.max)
        except SelectError:
            return root
        if sel.fetch.kind == "unavailable" or (is_vector_fetch(sel.fetch) and not vector_ok) or (
                sel.decode, sel.size, sel.cap) != (spec.decode, spec.size, spec.cap):
            return root
        out.append(sel.fetch)
    return tuple(out)
