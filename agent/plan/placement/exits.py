"""Where an exit probe's returns are: every RET of a function and every jump out of
it (a tail call); and a count site paired with the compare-and-swap that adds to a
sum, as an exit probe's call and return.
"""

from __future__ import annotations

from agent.binary import sites
from agent.errors import NoopError
from agent.plan.binary import Binary
from agent.plan.fetches import Fetch
from agent.plan.model import Site


def exit_sites(b: Binary, function: str, fetches: tuple[Fetch, ...],
               tail_fetches: tuple[Fetch, ...]) -> tuple[Site, ...]:
    """A site at every RET of the function, and at every jump out of it (a tail
    call: there the results are the callee's, so ``tail_fetches``)."""
    sym, _die = b.functions.find(function)
    out = []
    for e in b.isa.exits(b.instructions(function), sym.address, sym.address + sym.size):
        how = b.isa.handling(e.insn)
        if how == sites.REFUSED:  # arm64's authenticated returns (retaa, retab)
            raise NoopError(f"{function}: the kernel cannot put a uprobe on its "
                            f"{e.insn.mnemonic} at +{e.insn.address - sym.address:#x}, "
                            "so its exits cannot all be probed", "probe its entry instead")
        if e.tail:
            why = f"exit: tail jump to {b.symbol_name(e.insn.target or 0)} ({how})"
        else:
            why = f"exit: {e.insn.mnemonic} at +{e.insn.address - sym.address:#x} ({how})"
        out.append(Site(function, e.insn.address, b.elf.file_offset(e.insn.address),
                        why, tail_fetches if e.tail else fetches, handling=how,
                        role="return"))
    return tuple(out)


def paired_with_swap(fetches: tuple[Fetch, ...], src: str, old: str = "rax"
                     ) -> tuple[tuple[Fetch, ...], tuple[Fetch, ...]]:
    """A count site paired with the compare-and-swap that adds the observed value to a
    sum, as an exit probe's call and return: the call's fetches (all but the last
    value, the observed one, which is read at the return) and the return's (what the
    call read, and the observed value as new - old: the register ``old`` (x86-64's
    rax) and the swap's ``src``)."""
    kept = (*fetches[:-1], Fetch("later"))
    ends = (*(Fetch("saved", slot=k) for k in range(len(fetches) - 1)),
            Fetch("derived", regs=(old, src), formula="new-old"))
    return kept, ends
