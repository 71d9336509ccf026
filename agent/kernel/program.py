"""The program ``codegen`` makes of a plan: its C text, and what loading it and reading
what it sends need: each probe's event layout and in-kernel aggregate, the BPF
function of each site, the values never read at a site (why) or derived in noop, and
the kernel functions its stand-in calls name."""

from __future__ import annotations

from dataclasses import dataclass, field

from agent.kernel import aggregate, events
from agent.kernel.events import Layout


@dataclass(frozen=True, slots=True)
class Program:
    text: str
    layouts: tuple[Layout, ...]
    aggregates: dict[int, aggregate.Layout]  # probe -> its in-kernel aggregate (run mode)
    functions: tuple[tuple[int, int, str], ...]  # (probe, site, BPF function name)
    # (probe, site) -> value name -> why it is never read at that site
    unreadable: dict[tuple[int, int], dict[str, str]]
    # (probe, site) -> value name -> the formula noop derives it by (plan.FORMULAS)
    derived: dict[tuple[int, int], dict[str, str]]
    # stand-in call number -> the kernel function it calls (helper or kfunc)
    calls: dict[int, str] = field(default_factory=dict)
    # Attach each site with its index as the attach cookie: functions are shared by
    # the sites of one shape (one name in ``functions`` for several sites).
    cookies: bool = False
    # Every site of the plan, in the order of noop_traps' site numbers: (probe, site).
    sites: tuple[tuple[int, int], ...] = ()

    def decode(self, data: bytes) -> events.Event:
        """A ring-buffer record of this program as an event; IndexError or ValueError
        (struct.error) when it is not one."""
        probe, site = events.header(data)
        return events.decode(self.layouts[probe], data, self.unreadable.get((probe, site)),
                             self.derived.get((probe, site)))
