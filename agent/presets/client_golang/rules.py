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
from typing import Any

from agent.binary import sites
from agent.binary.dwarf.dies import die_name
from agent.binary.dwarf.locations import Location, Piece, Unavailable
from agent.config.model import parse_selector
from agent.config.selector import Selector
from agent.errors import NoopError
from agent.plan import generations
from agent.plan.binary import Binary
from agent.plan.model import Aggregate, Column, Decode, Fetch, Op, Plan, ProbePlan, Site, ValueSpec
from agent.plan.placement import entry_site, paired_with_swap
from agent.plan.updates import argument_sites, field_offset
from agent.presets.client_golang.facts import (
    CHEAP_COLUMNS,
    CHEAP_METHODS,
    CHEAP_PROBES,
    COLUMNS,
    MADE,
    MAKERS,
    MAX_LABELS,
    MAX_ROWS,
    PKG,
    RULES,
    TARGET,
    Rule,
    method_op,
)


def _common(b: Binary, recv_type: Any, base: str) -> list[tuple[ValueSpec, Fetch]]:
    """Name, labels and address of the metric whose field ``base`` points into."""
    start: Location = (Piece(8, reg=base),)
    out = []
    wanted = [("metric", "m.desc.fqName", "string", 128)]
    for i in range(MAX_LABELS):
        wanted += [(f"l{i}_name", f"m.labelPairs[{i}].Name", "string", 32),
                   (f"l{i}_value", f"m.labelPairs[{i}].Value", "string", 64)]
    for name, sel, decode, cap in wanted:
        got = b.walker.select(parse_selector(sel), start, recv_type, decode, cap)
        out.append((ValueSpec(name, got.decode, got.size, got.cap, got.type, sel), got.fetch))
    out.append((ValueSpec("object", "addr", 8, 0, "pointer", "m"),
                Fetch("reg", size=8, regs=(base,))))
    return out


def _field(b: Binary, recv_type: Any, base: str, name: str, decode: str
           ) -> tuple[ValueSpec, Fetch]:
    got = b.walker.select(parse_selector(f"m.{name}"), (Piece(8, reg=base),), recv_type,
                          decode, 8)
    return ValueSpec(name, got.decode, got.size, 0, got.type, f"m.{name}"), got.fetch


def _reg(name: str, reg: str, decode: Decode, what: str) -> tuple[ValueSpec, Fetch]:
    # The register differs from site to site; the value's description must not, since
    # all sites of a probe share one event layout.
    return (ValueSpec(name, decode, 8, 0, what, f"register ({name})"),
            Fetch("reg", size=8, regs=(reg,)))


def _observed(b: Binary, function: str, insns: tuple[sites.Insn, ...], site: int
              ) -> tuple[ValueSpec, Fetch]:
    """Histogram.Observe's v: passed in xmm0, which a uprobe cannot read; found where the
    function stored xmm0 on the stack before the site, if DWARF agrees it held v."""
    spec = ValueSpec("observed", "float", 8, 0, "float64", "v")
    reason = "v is passed in xmm0, and this kernel cannot read XMM registers in a uprobe"
    found = sites.spilled(insns, site, "xmm0")
    if found is None:
        return spec, Fetch("unavailable", why=reason)
    offset, store = found
    if b.dwarf.from_metadata:  # no location lists: the code itself must show it
        return spec, (Fetch("mem", ops=(Op("sp", offset=offset),), size=8)
                      if sites.untouched_until(insns, "xmm0", store)
                      else Fetch("unavailable", why=reason))
    _sym, die = b.functions.find(function)
    for child in die.iter_children():
        if child.tag == "DW_TAG_formal_parameter" and die_name(child) == "v":
            expr = b.functions.locations.expression_at(child, store)
            try:
                loc = b.functions.locations.pieces(expr or [], 8, None, at_entry=True)
            except Unavailable:
                break
            if loc == (Piece(8, reg="xmm0"),):
                return spec, Fetch("mem", ops=(Op("sp", offset=offset),), size=8)
    return spec, Fetch("unavailable", why=reason)


def make(b: Binary, aggregate: bool) -> Plan:
    """The preset's plan for Go program ``b``; with ``aggregate``, each probe also folds
    its hits into an in-kernel aggregate by (process, metric object, site) and
    describes each metric object once (for ``noop run``)."""
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
        cheap = _cheap(b, rule) if aggregate else None
        if cheap is not None:
            probes.append(counted(cheap))
            rule = replace(rule, methods=tuple(m for m in rule.methods
                                               if m not in CHEAP_METHODS[rule.probe]))
        probe, joins = _buffered(b, rule) if rule.mnemonic == "movsd" else _rule(b, rule)
        if joins and cheap is None and rule.probe == "counter_int":
            # Add inlined where the instruction after its xadd is also reached from its
            # float path: at the jump before the xadd instead
            cheap = _counter_add(b, joins)
            if cheap is not None:
                probes.append(counted(cheap))
                joins = set()
        unseen += [f"the {rule.mnemonic} on {rule.struct}.{rule.field} at {a:#x}: another "
                   "path joins the instruction after it, and no site before it reads the "
                   "update: not counted" for a in sorted(joins)]
        if probe is not None and aggregate:
            probe = folded(probe, COLUMNS[rule.probe])
        elif probe is not None and rule.probe == "summary_atomic":
            probe = _with_sum(b, probe)
        if probe is not None:
            probes.append(probe)
        elif cheap is None:
            _unrecognised(b, rule, modules)
    if not probes:
        raise NoopError(f"{path} does not update client_golang metrics (no {PKG} counter, "
                        "gauge or histogram methods found)",
                        "write a probes.yaml for it and use --config")
    if unseen:  # said once, with the first probe
        probes[0] = replace(probes[0], unseen=(*probes[0].unseen, *unseen))
    if made is not None:
        probes.append(made)
    # Watched like a spec's target named by this path (noop run: up, a new build).
    here = Selector(path=str(Path(path).resolve()))
    return Plan("client_golang preset", (b.plan(TARGET, None, selector=here, modules=modules),),
                tuple(probes))




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
        for e in sites.exits(b.instructions(fn), sym.address, sym.address + sym.size):
            if e.tail:  # another function's results: not one of ours to note
                unseen.append(f"{fn}: a tail jump at {e.insn.address:#x}")
                continue
            how = sites.handling(e.insn.raw)
            out.append(Site(fn, e.insn.address, b.elf.file_offset(e.insn.address),
                            f"made: ret at +{e.insn.address - start:#x}, the new metric in rbx "
                            f"({how})", (fetch,), handling=how, role="renew", tag="made"))
        unseen += [f"{fn} inlined at {c.entry:#x}: the objects it makes there are known "
                   "by address only" for c in _inlined(b, fn)]
    if not out:
        return None
    value = ValueSpec("object", "addr", 8, 0, "pointer", "the new metric")
    # No budget takes it off (kernel.budget): while it were off, an object made at a
    # freed one's address would be counted in the old one's rows.
    return ProbePlan(MADE, TARGET, (value,), tuple(out), unseen=tuple(unseen))


def _inlined(b: Binary, fn: str) -> tuple[Any, ...]:
    try:
        return b.functions.inlined(fn)
    except NoopError:
        return ()


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


Region = tuple[str, str, tuple[sites.Insn, ...], list[tuple[int, int]]]


def _regions(b: Binary, rule: Rule) -> list[Region]:
    """Where ``rule``'s methods run: (method, the function whose code it is, that
    function's instructions, the address ranges of the method in it). Each method's own
    code first (with what is inlined into it: ``Inc`` holds a copy of ``Add``), then its
    copies inlined into other functions (``AddWithExemplar``'s ``Add``, the Go
    collector's ``Set``), which the program runs as well."""
    own: list[Region] = []
    copies: list[Region] = []
    for method in rule.methods:
        fn = f"{PKG}.(*{rule.struct}).{method}"
        sym = b.functions.symbols.get(fn)
        if sym is None:
            continue
        if sym.size:
            own.append((method, fn, b.instructions(fn), [(sym.address, sym.address + sym.size)]))
        for copy in _inlined(b, fn):
            caller = b.function_at(copy.entry)
            if caller is not None:
                copies.append((method, caller, b.instructions(caller), b.dwarf.ranges(copy.die)))
    return own + copies


def _receiver(b: Binary, rule: Rule) -> Any:
    """The type of the receiver of ``rule``'s methods (``*counter``, ...), or None."""
    for method in rule.methods:
        fn = f"{PKG}.(*{rule.struct}).{method}"
        if fn in b.functions.symbols:
            recv = next(iter(b.functions.param_types(fn).values()), None)
            if recv is not None:
                return recv
    return None


def _rule(b: Binary, rule: Rule) -> tuple[ProbePlan | None, set[int]]:
    """The probe of ``rule``'s updates, and the atomic instructions it found whose site
    after them another path joins (its hits would not all be updates): those are left
    to a site before them (``_counter_add``) or go unseen."""
    layout: tuple[ValueSpec, ...] | None = None
    out: list[Site] = []
    joins: set[int] = set()
    offset = field_offset(b, rule.struct, rule.field)
    recv = _receiver(b, rule)
    if recv is None or offset is None:
        return None, joins
    seen: set[int] = set()
    for method, fn, insns, ranges in _regions(b, rule):
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
            pairs = _common(b, recv, a.base) + _specific(b, rule, recv, a, fn, insns, address)
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


MAX_CALLS = 4096  # observations in progress at once: between a count and its sum


def _with_sum(b: Binary, probe: ProbePlan) -> ProbePlan:
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


def _buffered(b: Binary, rule: Rule) -> tuple[ProbePlan | None, set[int]]:
    """``summary.Observe`` (a summary with objectives): after the store of the value into
    ``hotBuf``'s new last element, where it holds the lock. The receiver is the base of
    the store of hotBuf's new length just before; the value was loaded from the stack
    slot the function spilled its argument ``v`` to at entry. Values: the name, labels,
    the observed value, and the count so far: ``cnt`` (flushed), ``len(coldBuf)`` (being
    flushed) and ``len(hotBuf)`` (buffered, this one included)."""
    fn = f"{PKG}.(*{rule.struct}).{rule.methods[0]}"
    sym = b.functions.symbols.get(fn)
    recv = _receiver(b, rule)
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
        pairs = [*_common(b, recv, base),
                 (ValueSpec("observed", "float", 8, 0, "float64", "v"),
                  Fetch("mem", ops=(Op("sp", offset=slot),), size=8)),
                 _word(base, cnt, "cnt", "m.cnt"),
                 _word(base, cold + 8, "cold", "len(m.coldBuf)"),
                 _word(base, hot + 8, "hot", "len(m.hotBuf)")]
        layout = tuple(v for v, _ in pairs)
        how = sites.handling(site.raw)
        out.append(Site(fn, site.address, b.elf.file_offset(site.address),
                        f"after the store of v into summary.hotBuf at {i.address:#x} "
                        f"({how})", tuple(f for _, f in pairs), handling=how,
                        tag=f"{rule.kind}.Observe"))
    if layout is None or len(out) != 1:
        return None, set()  # none, or more than one append: not a summary noop knows
    return ProbePlan(rule.probe, TARGET, layout, tuple(out)), set()


def _word(base: str, offset: int, name: str, what: str) -> tuple[ValueSpec, Fetch]:
    """An unsigned word of the struct ``base`` points to."""
    return (ValueSpec(name, "uint", 8, 0, "int", what),
            Fetch("mem", ops=(Op("reg", reg=base),), offset=offset, size=8))


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


def _specific(b: Binary, rule: Rule, recv: Any, a: sites.Atomic, fn: str,
              insns: tuple[sites.Insn, ...], address: int) -> list[tuple[ValueSpec, Fetch]]:
    if rule.probe == "counter_int":  # after xadd: src holds valInt's old value
        return [_reg("before", a.src, "uint", "uint64"),
                _field(b, recv, a.base, "valInt", "uint"),
                _field(b, recv, a.base, "valBits", "float")]
    if rule.probe == "counter_float":
        return [_reg("old", "rax", "float", "float64"), _reg("new", a.src, "float", "float64"),
                _field(b, recv, a.base, "valInt", "uint")]
    if rule.probe == "gauge_add":
        return [_reg("old", "rax", "float", "float64"), _reg("new", a.src, "float", "float64")]
    if rule.probe == "gauge_set":
        return [_reg("new", a.src, "float", "float64"),
                _field(b, recv, a.base, "valBits", "float")]
    return [_reg("before", a.src, "uint", "uint64"),  # countAndHotIdx's old value
            _observed(b, fn, insns, address)]


def _cheap(b: Binary, rule: Rule) -> ProbePlan | None:
    """For noop run: the rule's updates at a cheaper site than the one after them, or
    None when there is none (or nothing to gain)."""
    if rule.probe == "counter_int":
        return _counter_add(b)
    if rule.probe == "histogram":
        return _observe_entry(b)
    return None


def _counter_add(b: Binary, only: set[int] | None = None) -> ProbePlan | None:
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
        pairs = [*_common(b, recv, a.receiver),
                 _reg("delta", a.fetch.regs[0], "uint", "uint64"),
                 _field(b, recv, a.receiver, "valInt", "uint"),
                 _field(b, recv, a.receiver, "valBits", "float")]
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
    count = _field(b, recv, receiver, "countAndHotIdx", "uint")
    before = (replace(count[0], name="before"), count[1])
    pairs = [*_common(b, recv, receiver), before]
    site = entry_site(b, fn, tuple(f for _, f in pairs))
    if not site.skip_flags and site.handling != sites.EMULATED:
        return None  # no cheaper than after the xadd
    return ProbePlan("histogram", TARGET, tuple(v for v, _ in pairs),
                     (replace(site, tag="histogram.Observe"),))

