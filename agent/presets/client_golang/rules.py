"""The built-in client_golang preset: every update of a counter, gauge or histogram of
``github.com/prometheus/client_golang``, with its name, labels and value.

Where it probes, and why: an update of a metric is one atomic instruction on the
metric's own struct (``lock xadd`` on ``counter.valInt`` and ``histogram.countAndHotIdx``,
``lock cmpxchg`` on ``valBits``, ``xchg`` for ``Gauge.Set``). noop finds those
instructions in the methods' machine code and probes them, not the methods' entries:

- one user-level update is one hit, whatever was inlined into what (``Dec`` calling
  ``Add(-1)`` runs one successful compare-and-swap);
- the new and old float64 values sit in general registers there (``Add(v)`` passes
  ``v`` in xmm0, which a uprobe cannot read), so values are exact, not reconstructed;
- x86 uprobes refuse instructions with a LOCK prefix, so the probe sits on the
  instruction after the ``lock`` one; there ``xadd`` has left the field's old value in
  its register, and a compare-and-swap that lost a race (and will be retried) has
  cleared the zero flag, so only hits with ZF set count.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from agent.binary import passes, sites
from agent.config.selector import Selector
from agent.errors import NoopError
from agent.plan import generations
from agent.plan.binary import Binary
from agent.plan.fetches import Fetch, Op
from agent.plan.model import Aggregate, Column, Plan, ProbePlan, Site, TargetPlan, ValueSpec
from agent.plan.placement.entry import entry_site
from agent.plan.updates import field_offset
from agent.presets.client_golang import joins as joined
from agent.presets.client_golang.cheap import cheap_probe, counter_add
from agent.presets.client_golang.facts import (
    CHEAP_COLUMNS,
    CHEAP_METHODS,
    COLUMNS,
    GATHER,
    GATHERED,
    MADE,
    MAKERS,
    MAX_ROWS,
    PKG,
    RULES,
    TARGET,
    UPDATES_FOLDED,
    UPDATES_READ,
    Rule,
    method_op,
)
from agent.presets.client_golang.summaries import buffered, with_sum
from agent.presets.client_golang.values import (
    common,
    inlined,
    receiver,
    regions,
    register,
    specific,
    word,
)


def make(b: Binary, aggregate: bool) -> Plan:
    """The preset's plan for Go program ``b``; with ``aggregate``, each probe also folds
    its hits into an in-kernel aggregate by (process, metric object, site) and
    describes each metric object once (for ``noop run``). On an architecture whose
    update code the rules do not read (``UPDATES_READ``), or do not fold in the kernel
    (``UPDATES_FOLDED``) where ``aggregate``: the mirror's plan only."""
    if b.arch.name not in (UPDATES_FOLDED if aggregate else UPDATES_READ):
        return _finders(b)
    if b.arch.name != "x86-64":  # arm64's atomics, where their two paths join
        plan = joined.make(b)
        if plan is None:
            raise NoMetrics(f"{b.path} does not update client_golang metrics that noop "
                            f"reads on {b.arch.name} (no {PKG} counter, gauge or histogram "
                            "update found)", "write a probes.yaml for it and use --config",
                            b.plan(TARGET, None, selector=Selector(
                                path=str(Path(b.path).resolve())), modules=b.modules(PKG)))
        return plan
    path = b.path
    probes = []
    modules = b.modules(PKG)
    made = _makers(b) if aggregate else None
    keys = ("$pid", "object", *((generations.NAME,) if made else ()), "$site")
    unseen: list[str] = []

    def folded(probe: ProbePlan, columns: tuple[Column, ...]) -> ProbePlan:
        """noop run's: its hits folded into rows by (process, object, generation, site)."""
        return replace(generations.added(probe, made),
                       aggregate=Aggregate(keys, columns, MAX_ROWS, True))

    def counted(cheap: ProbePlan) -> ProbePlan:
        return folded(cheap, CHEAP_COLUMNS[cheap.name]) if aggregate else cheap

    for rule in RULES:
        cheap = cheap_probe(b, rule) if aggregate else None
        if cheap is not None:
            probes.append(counted(cheap))
            rule = replace(rule, methods=tuple(m for m in rule.methods
                                               if m not in CHEAP_METHODS[rule.probe]))
        probe, joins = buffered(b, rule) if rule.mnemonic == "movsd" else _rule(b, rule)
        if joins and cheap is None and rule.probe == "counter_int":
            # Add inlined where the instruction after its xadd is also reached from its
            # float path: at the jump before the xadd instead
            cheap = counter_add(b, joins)
            if cheap is not None:
                probes.append(counted(cheap))
                joins = set()
        unseen += [f"the {rule.mnemonic} on {rule.struct}.{rule.field} at {a:#x}: another "
                   "path joins the instruction after it, and no site before it reads the "
                   "update: not counted" for a in sorted(joins)]
        if probe is not None and aggregate:
            probe = folded(probe, COLUMNS[rule.probe])
        elif probe is not None and rule.probe == "summary_atomic":
            probe = with_sum(b, probe)
        if probe is not None:
            probes.append(probe)
        elif cheap is None:
            _unrecognised(b, rule, modules)
    if not probes:
        raise NoMetrics(f"{path} does not update client_golang metrics (no {PKG} counter, "
                        "gauge or histogram methods found)",
                        "write a probes.yaml for it and use --config",
                        b.plan(TARGET, None, selector=Selector(path=str(Path(path).resolve())),
                               modules=modules))
    if unseen:  # said once, with the first probe
        probes[0] = replace(probes[0], unseen=(*probes[0].unseen, *unseen))
    if made is not None:
        probes.append(made)
    gathered = _gathered(b) if aggregate else None
    if gathered is not None:
        probes.append(gathered)
    # Watched like a spec's target named by this path (noop run: up, a new build).
    here = Selector(path=str(Path(path).resolve()))
    return Plan("client_golang preset", (b.plan(TARGET, None, selector=here, modules=modules),),
                tuple(probes))


def _finders(b: Binary) -> Plan:
    """The plan of noop run's mirror alone: the probe where the program gathers a
    registry (finding those no global holds), when there is code of Gather's to put it
    on. NoMetrics when the program links none of client_golang's metrics."""
    here = Selector(path=str(Path(b.path).resolve()))
    modules = b.modules(PKG)
    target = b.plan(TARGET, None, selector=here, modules=modules)
    kinds = ("counter", "gauge", "histogram", "summary", "Registry")
    if not any(n.startswith(tuple(f"{PKG}.(*{k})." for k in kinds)) and sym.size
               for n, sym in b.functions.symbols.items()):
        raise NoMetrics(f"{b.path} does not keep client_golang metrics (no {PKG} counter, "
                        "gauge, histogram, summary or registry methods found)",
                        "write a probes.yaml for it and use --config", target)
    gathered = _gathered(b)
    return Plan("client_golang preset", (target,), (gathered,) if gathered else ())


class NoMetrics(NoopError):
    """A Go program with no client_golang metrics: nothing to probe; ``noop run``
    serves its process series all the same (``target``: the program, as a plan has it)."""

    def __init__(self, message: str, hint: str, target: TargetPlan) -> None:
        super().__init__(message, hint)
        self.target = target


def _makers(b: Binary) -> ProbePlan | None:
    """For noop run: a site at every RET of every function that makes a metric object,
    where the new object's address starts a new generation (``plan.generations``): the
    garbage collector gives freed metric objects' addresses to new ones, and a row of
    one is never taken for a row of another. None without the register ABI (results on
    the stack)."""
    if b.goid_offset is None:
        return None
    out: list[Site] = []
    unseen: list[str] = []
    fetch = Fetch("reg", size=8, regs=("rbx",))
    for fn in sorted(n for n in b.functions.symbols if MAKERS.fullmatch(n)):
        sym = b.functions.symbols[fn]
        if not sym.size:
            continue
        start = b.start_of(fn)
        for e in passes.exits(b.instructions(fn), sym.address, sym.address + sym.size):
            if e.tail:  # another function's results: not one of ours to note
                unseen.append(f"{fn}: a tail jump at {e.insn.address:#x}")
                continue
            how = sites.handling(e.insn.raw)
            out.append(Site(fn, e.insn.address, b.elf.file_offset(e.insn.address),
                            f"made: ret at +{e.insn.address - start:#x}, the new metric in rbx "
                            f"({how})", (fetch,), handling=how, role="renew", tag="made"))
        unseen += [f"{fn} inlined at {c.entry:#x}: the objects it makes there are known "
                   "by address only" for c in inlined(b, fn)]
    if not out:
        return None
    value = ValueSpec("object", "addr", 8, 0, "pointer", "the new metric")
    # No budget takes it off (kernel.budget): while it were off, an object made at a
    # freed one's address would be counted in the old one's rows.
    return ProbePlan(MADE, TARGET, (value,), tuple(out), unseen=tuple(unseen))


def _gathered(b: Binary) -> ProbePlan | None:
    """For noop run's mirror: ``(*Registry).Gather``'s entry, the registry in the first
    argument register (Go's register ABI: rax, x0), an event each time the program
    gathers one (each scrape of it: a registry it serves, wherever it keeps it). None
    without the register ABI, or when no code of Gather's runs on its own (inlined
    copies would go unseen: a registry the mirror then finds by its globals only)."""
    if b.goid_offset is None or GATHER not in b.functions.symbols or \
            not b.functions.symbols[GATHER].size or inlined(b, GATHER):
        return None
    by_id = field_offset(b, "Registry", "collectorsByID")
    if by_id is None:
        return None
    # The registry, its map of collectors and the map's random seed, read as Gather
    # starts: together they tell one registry from another the garbage collector later
    # puts at the same address (read later, by the mirror as the event comes, the
    # memory may already be the next registry's).
    first = b.arch.go_int_regs[0]  # the receiver: rax, x0
    pairs = [register("registry", first, "uint", "*Registry"),
             word(first, by_id, "collectors", "r.collectorsByID (its map's header)"),
             (ValueSpec("seed", "uint", 8, 0, "int", "the second word of "
                        "r.collectorsByID's header (its hash seed)"),
              Fetch("mem", ops=(Op("reg", reg=first), Op("deref", offset=by_id)), offset=8,
                    size=8))]
    site = entry_site(b, GATHER, tuple(f for _, f in pairs))
    return ProbePlan(GATHERED, TARGET, tuple(v for v, _ in pairs),
                     (replace(site, tag="gathered"),), tells=True)


def _unrecognised(b: Binary, rule: Rule, modules: tuple[tuple[str, str], ...]) -> None:
    """Refuses a client_golang whose update methods do not do what ``rule`` reads (it
    found no site): one of them has code, and none has the atomic update it looks for."""
    present = [m for m in rule.methods
               if (s := b.functions.symbols.get(f"{PKG}.(*{rule.struct}).{m}")) and s.size]
    if not present:
        return
    version = next((v for _p, v in modules), "version unknown")
    raise NoopError(f"{b.path}: client_golang {version}: (*{rule.struct}).{present[0]} "
                    f"has no {rule.mnemonic} on {rule.struct}.{rule.field}: noop does not know "
                    "these update methods and will not guess",
                    "write a probes.yaml for this program and use --config")


def _rule(b: Binary, rule: Rule) -> tuple[ProbePlan | None, set[int]]:
    """The probe of ``rule``'s updates, and the atomic instructions it found whose site
    after them another path joins (its hits would not all be updates): those are left
    to a site before them (``counter_add``) or go unseen."""
    layout: tuple[ValueSpec, ...] | None = None
    out: list[Site] = []
    joins: set[int] = set()
    offset = field_offset(b, rule.struct, rule.field)
    recv = receiver(b, rule)
    if recv is None or offset is None:
        return None, joins
    seen: set[int] = set()
    for method, fn, ranges, _own, _in_rule in regions(b, rule):
        insns = b.instructions(fn)
        targets = {i.target for i in insns if i.target is not None}
        for a in sites.atomics(insns, rule.mnemonic, offset):
            if a.insn.address in seen or not any(lo <= a.insn.address < hi
                                                 for lo, hi in ranges):
                continue
            seen.add(a.insn.address)
            address = a.insn.end if rule.after else a.insn.address
            zf, skip, past = rule.zf, 0, ""
            jcc = sites.past_swap_flag(insns, insns.index(a.insn), ("rax", a.src, a.base)) \
                if rule.zf else None
            if jcc is not None:  # emulated where the sete after the cmpxchg is not
                address, zf, skip = jcc.address, False, sites.ZF
                past = f", at the {jcc.mnemonic} after its sete and test (ZF clear)"
            if rule.after and address in targets:
                joins.add(a.insn.address)
                continue
            pairs = common(b, recv, a.base) + specific(b, rule, recv, a, fn, insns, address)
            values = tuple(v for v, _ in pairs)
            if layout is not None and values != layout:
                continue  # same rule, other types: not a client_golang we know
            layout = values
            how = ("after the " if rule.after else "at the ") + \
                f"{'lock ' * a.insn.lock}{rule.mnemonic} on {rule.struct}.{rule.field} " \
                f"at {a.insn.address:#x}{past}"
            if fn != f"{PKG}.(*{rule.struct}).{method}":
                how += f" ({method} inlined into {fn})"
            at = next((i for i in insns if i.address == address), None)
            out.append(Site(fn, address, b.elf.file_offset(address), how,
                            tuple(f for _, f in pairs), when_zf=zf, skip_flags=skip,
                            tag=f"{rule.kind}.{method_op(method)}",
                            handling=sites.handling(at.raw) if at is not None else ""))
    if not out or layout is None:
        return None, joins
    return ProbePlan(rule.probe, "main", layout, tuple(out)), joins
