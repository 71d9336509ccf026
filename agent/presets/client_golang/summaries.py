"""The client_golang preset's summaries: one without objectives, whose observed value is
new - old of its sum's compare-and-swap (each count site paired with that swap, for
the terminal), and ``summary.Observe`` with objectives, read after it stores the value
into its buffer."""

from __future__ import annotations

from dataclasses import replace

from agent.binary import sites
from agent.plan.binary import Binary
from agent.plan.fetches import Fetch, Op
from agent.plan.model import ProbePlan, Site, ValueSpec
from agent.plan.placement.exits import paired_with_swap
from agent.plan.updates import field_offset
from agent.presets.client_golang.facts import PKG, TARGET, Rule
from agent.presets.client_golang.values import common, receiver, word

MAX_CALLS = 4096  # observations in progress at once: between a count and its sum


def with_sum(b: Binary, probe: ProbePlan) -> ProbePlan:
    """A summary without objectives, for the terminal: its observed value, passed in
    xmm0, is new - old of the compare-and-swap that adds it to the hot counts' sum,
    where no register holds the summary. Each count site is paired with that swap as
    an exit probe's call with its return: the count's site keeps what it reads for the
    goroutine and its stack depth, the swap's makes the event. ``probe`` as it is when
    some site has no such swap."""
    if b.stack_hi_offset is None or probe.values[-1].name != "observed":
        return probe
    out: list[Site] = []
    for site in probe.sites:
        insns = b.instructions(site.function)
        at = next((n for n, i in enumerate(insns) if i.address == site.address), None)
        swaps = [n for n, i in enumerate(insns) if at is not None and n > at
                 and i.lock and i.mnemonic == "cmpxchg"]
        if at is None or not swaps:
            return probe
        m = swaps[0]
        between = insns[at:m + 1]
        if any(i.mnemonic in ("call", "push", "pop", "leave", "ret") or "rsp" in i.writes
               or (i.target is not None and not insns[at].address <= i.target
                   <= insns[m].address) for i in between):
            return probe  # the two would not see one stack pointer, or one call
        src = next((o[1] for o in insns[m].operands if o[0] == "reg"), "")
        end, zf, skip = insns[m + 1] if m + 1 < len(insns) else None, True, 0
        jcc = sites.past_swap_flag(insns, m, ("rax", src))
        if jcc is not None:
            end, zf, skip = jcc, False, sites.ZF
        targets = {i.target for i in insns if i.target is not None}
        if end is None or end.address in targets or \
                sites.handling(end.raw) == sites.REFUSED:
            return probe
        kept, ends = paired_with_swap(site.fetches, src)
        how = sites.handling(end.raw)
        out += [replace(site, fetches=kept, role="call",
                        why=f"{site.why}; kept for the sum's swap at {insns[m].address:#x}"),
                Site(site.function, end.address, b.elf.file_offset(end.address),
                     f"after the lock cmpxchg on the summary's sum at {insns[m].address:#x}"
                     f" (ZF {'clear at the ' + end.mnemonic if jcc else 'set'}: it won), "
                     f"the observed value new - old (rax, {src}) ({how})", ends,
                     when_zf=zf, skip_flags=skip, tag=site.tag, handling=how,
                     role="return")]
    return replace(probe, sites=tuple(out), at="exit", calls=MAX_CALLS)


def buffered(b: Binary, rule: Rule) -> tuple[ProbePlan | None, set[int]]:
    """``summary.Observe`` (a summary with objectives): after the store of the value into
    ``hotBuf``'s new last element, where it holds the lock. The receiver is the base of
    the store of hotBuf's new length just before; the value was loaded from the stack
    slot the function spilled its argument ``v`` to at entry. Values: the name, labels,
    the observed value, and the count so far: ``cnt`` (flushed), ``len(coldBuf)`` (being
    flushed) and ``len(hotBuf)`` (buffered, this one included)."""
    fn = f"{PKG}.(*{rule.struct}).{rule.methods[0]}"
    sym = b.functions.symbols.get(fn)
    recv = receiver(b, rule)
    hot = field_offset(b, rule.struct, "hotBuf")
    cold = field_offset(b, rule.struct, "coldBuf")
    cnt = field_offset(b, rule.struct, "cnt")
    if sym is None or not sym.size or recv is None or None in (hot, cold, cnt):
        return None, set()
    assert hot is not None and cold is not None and cnt is not None
    insns = b.instructions(fn)
    targets = {i.target for i in insns if i.target is not None}
    out: list[Site] = []
    layout: tuple[ValueSpec, ...] | None = None
    for n, i in enumerate(insns[:-1]):
        mem = i.operands[0] if i.operands else None
        if i.mnemonic != "movsd" or mem is None or mem[0] != "mem" or not mem[2] or \
                len(i.operands) != 2 or i.operands[1][0] != "reg":
            continue  # not a store of an XMM register to base + index * 8
        site, xmm = insns[n + 1], i.operands[1][1]
        base = _length_store(insns, n, hot + 8)
        slot = _argument_slot(insns, n, xmm)
        if base is None or slot is None or site.address in targets:
            continue
        pairs = [*common(b, recv, base),
                 (ValueSpec("observed", "float", 8, 0, "float64", "v"),
                  Fetch("mem", ops=(Op("sp", offset=slot),), size=8)),
                 word(base, cnt, "cnt", "m.cnt"),
                 word(base, cold + 8, "cold", "len(m.coldBuf)"),
                 word(base, hot + 8, "hot", "len(m.hotBuf)")]
        layout = tuple(v for v, _ in pairs)
        how = sites.handling(site.raw)
        out.append(Site(fn, site.address, b.elf.file_offset(site.address),
                        f"after the store of v into summary.hotBuf at {i.address:#x} "
                        f"({how})", tuple(f for _, f in pairs), handling=how,
                        tag=f"{rule.kind}.Observe"))
    if layout is None or len(out) != 1:
        return None, set()  # none, or more than one append: not a summary noop knows
    return ProbePlan(rule.probe, TARGET, layout, tuple(out)), set()


def _length_store(insns: tuple[sites.Insn, ...], n: int, disp: int) -> str | None:
    """The register R of ``mov [R + disp], reg`` at most a few instructions before
    ``insns[n]``, when nothing between writes R or branches: the receiver whose field
    at ``disp`` (a slice's length) was stored."""
    for k in range(n - 1, max(n - 6, -1), -1):
        i = insns[k]
        if sites.is_branch(i):
            return None
        mem = i.operands[0] if i.operands else None
        if i.mnemonic == "mov" and mem is not None and mem[0] == "mem" and not mem[2] and \
                mem[3] == disp and mem[1] and mem[1] != "rsp":
            if any(mem[1] in j.writes for j in insns[k + 1:n + 1]):
                return None
            return str(mem[1])
    return None


def _argument_slot(insns: tuple[sites.Insn, ...], n: int, xmm: str) -> int | None:
    """The rsp offset that ``xmm`` was loaded from just before ``insns[n]``, when the
    function stored its argument xmm0 there at its entry and nowhere else stores to it:
    the argument, as it was passed."""
    for k in range(n - 1, max(n - 4, -1), -1):
        i = insns[k]
        if xmm not in i.writes:
            continue
        src = i.operands[1] if len(i.operands) == 2 else None
        if i.mnemonic != "movsd" or src is None or src[0] != "mem" or src[1] != "rsp" or \
                src[2]:
            return None
        slot = int(src[3])
        stores = [j for j in insns if j.operands and j.operands[0][0] == "mem"
                  and j.operands[0][1] == "rsp" and j.operands[0][3] == slot]
        if len(stores) != 1 or stores[0].operands[1:] != (("reg", "xmm0"),) or \
                not sites.untouched_until(insns, "xmm0", stores[0].address):
            return None
        return slot
    return None
