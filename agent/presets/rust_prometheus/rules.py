"""The built-in preset for Rust's ``prometheus`` crate: every update of a counter, gauge
or histogram the program makes, with the metric's name, labels and value.

Where it probes, and why. In an optimized build the crate's update methods exist only
as copies inlined into the program's own code (``IntCounter::inc``, ``Gauge::add``,
...). Each copy of ``Value<P>::inc_by``/``dec_by``/``set`` comes down to one instruction
on the metric's ``Value.val``, found in the copy's code through DWARF's inlined-
subroutine records; the copy's callers there (``GenericCounter::inc``,
``GenericGauge::sub``, ...) name the operation the program called:

- integers (``IntCounter``, ``IntGauge``): ``lock add``/``sub``/``inc``/``dec`` on
  memory. The increment is the instruction's operand (a constant, or a register that
  the instruction leaves as it was); no register holds the value, so it is read from
  memory just after the update. x86 uprobes refuse LOCK-prefixed instructions, so the
  probe sits on the first instruction after them; where another path joins there (an
  update made only when a condition holds), before the update instead
  (``guards.before``): at the conditional jump that guards it, keeping the hits whose
  flags go the update's way, with the value read as the field plus the increment.
- floats (``Counter``, ``Gauge``): a compare-and-swap loop on the f64's bits; after the
  ``lock cmpxchg`` the bits before are in rax and the bits after in its source
  register, and ZF says the swap won. The increment is the loop's constant when the
  program passed one (read from the binary), else new - old.
- ``set`` (and ``reset``, a set of 0): a plain store, probed where the new value is a
  general register or the instruction's constant (the store itself, with the old
  value still in memory) or else just after it.
- histograms: ``HistogramCore::observe`` counts in ``shard_and_count`` with a ``lock
  xadd`` whose old value is left in its register: the count is exact. The observed
  value (in xmm0) is new - old of the sum's compare-and-swap, whose registers do not
  hold the metric: the count's site keeps what it read for the thread, and the swap's
  makes the event (the two pair as an exit probe's call and return). A timer's
  observation (``observe_duration``, ``stop_and_record``, a timer dropped) and
  ``observe_closure_duration`` go through the same ``observe``: op ``observe``.
- local metrics (``counter.local()``, ``histogram.local()``) update the shared metric
  only when flushed (op ``flush``). A local counter's flush is ``GenericCounter::inc_by``
  of its sum: a counter update as above, its increment the sum. A local histogram's
  (``LocalHistogramCore::flush``, also run by its drop) adds its count to the shared
  ``shard_and_count`` with ``ShardAndCount::inc_by``'s ``lock xadd``, outside
  ``observe``; its metric is the ``HistogramCore`` of the local's ``histogram.core``.
  After the xadd its register holds the count before, so the probe sits before it
  (``guards.before``), where the register holds the observations flushed: the
  event's increment. The count after it is the field read there plus them, and the
  sum flushed is new - old of the shard's sum swap, paired as ``observe``'s.

A scrape (``HistogramCore::proto``) folds the cold shard into the hot one through the
crate's atomics directly, not through these methods: those are not counted.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from elftools.dwarf.compileunit import CompileUnit

from agent.binary import debuginfo, sites
from agent.config.selector import Selector
from agent.errors import NoopError
from agent.plan import generations
from agent.plan.binary import Binary
from agent.plan.fetches import Fetch, Op
from agent.plan.model import Aggregate, Plan, ProbePlan, Site, ValueSpec
from agent.plan.placement.entry import entry_site
from agent.presets.mirror import GATHERED
from agent.presets.rust_prometheus.copies import Found, links_crate, member, updates
from agent.presets.rust_prometheus.facts import (
    DESC_DROP,
    DROPPED,
    MAX_CALLS,
    MAX_ROWS,
    SOURCE,
    TARGET,
    UPDATES_FOLDED,
    UPDATES_READ,
    columns,
)
from agent.presets.rust_prometheus.probes import groups, reader, sites_of


def make(b: Binary, aggregate: bool) -> Plan:
    """The preset's plan for Rust program ``b``; with ``aggregate``, each probe also folds
    its hits into an in-kernel aggregate by (process, metric object, site) and
    describes each metric object once (for ``noop run``). On an architecture whose
    update code the rules read for noop --binary's lines only (``UPDATES_READ``, not
    ``UPDATES_FOLDED``), noop run's plan is the mirror's alone: its probe where the
    program gathers a registry."""
    _usable(b)
    if b.arch.name not in (UPDATES_FOLDED if aggregate else UPDATES_READ):
        if not aggregate:
            raise NoopError(f"{b.path} is an {b.arch.name} Rust program: noop does not "
                            f"read the prometheus crate's update code on {b.arch.name}",
                            "serve its metrics with noop run --binary (read from its "
                            f"memory), or write a probes.yaml for it (entry, exit and line "
                            f"probes work on {b.arch.name}) and use --config")
        gathered = _gathered(b)
        here = Selector(path=str(Path(b.path).resolve()))
        return Plan(SOURCE, (b.plan(TARGET, None, selector=here),),
                    (gathered,) if gathered else ())
    found, missed = updates(b, reader(b))
    dropped, no_drops = _drops(b, found) if aggregate else (None, "")
    if no_drops and found:
        missed.append(f"metric objects are told apart by address only: {no_drops}")
    keys = ("$pid", "object", *((generations.NAME,) if dropped else ()), "$site")
    probes = []
    for name, group in groups(found):
        # noop run needs a histogram's count only: no pairing with its sum's swap
        layout, out, unplaced = sites_of(b, group, pair=not aggregate)
        missed += unplaced
        if out:
            paired = any(s.role for s in out)
            probes.append(generations.added(ProbePlan(
                name, TARGET, layout, tuple(out), aggregate=Aggregate(
                    keys, columns(group[0].kind, group[0].number, group[0].op), MAX_ROWS,
                    True)
                if aggregate else None, at="exit" if paired else "entry",
                calls=MAX_CALLS if paired else 0), dropped))
    if not probes and (_typeless(missed) or _line_tables_only(b)):
        raise NoopError(f"{b.path} has the prometheus crate's update code but no DWARF types "
                        "(built with debug = 1 or line tables only?): the preset reads each "
                        "metric's name, labels and value through them, in its memory or "
                        "at its updates",
                        "build it with debug = 2 in its Cargo profile")
    if not probes and any(re.match(r"prometheus::value::Value<[^:]*>::(inc|dec|set)", n)
                          for n in b.functions.symbols):
        raise NoopError(f"{b.path}: the prometheus crate's update methods are compiled out "
                        "of line here (an unoptimized build?): the preset reads the updates "
                        "an optimized build inlines into the program's code",
                        "build it with optimizations (cargo build --release), or write a "
                        "probes.yaml for it and use --config")
    if not probes:
        raise NoopError(f"{b.path} does not update prometheus crate metrics: no inlined "
                        "copy of its update methods (Value::inc_by, dec_by, set; "
                        "HistogramCore::observe) holds an update noop knows"
                        + (f" ({missed[0]})" if missed else ""),
                        "write a probes.yaml for it and use --config")
    if missed:  # said once, with the first probe
        probes[0] = replace(probes[0], unseen=tuple(missed))
    if dropped is not None:
        probes.append(dropped)
    gathered = _gathered(b) if aggregate else None
    if gathered is not None:
        probes.append(gathered)
    here = Selector(path=str(Path(b.path).resolve()))
    return Plan(SOURCE, (b.plan(TARGET, None, selector=here),), tuple(probes))


# Where the program gathers a registry (its scrape), the first out of line: the value
# read there, and how it names the registry (``CrateLibrary.gathered``).
_GATHERERS = (("prometheus::registry::RegistryCore::gather", "core"),
              ("prometheus::registry::Registry::gather", "registry"))


def _gathered(b: Binary) -> ProbePlan | None:
    """For noop run's mirror: the entry of the first of ``_GATHERERS`` with code of its
    own, where ``self`` names the registry the program gathers (each scrape of it): its
    ``RegistryCore`` (or its ``Registry``'s ArcInner) and its map of collectors' hasher
    keys, read as the call starts (a registry dropped later may have its memory
    reused). None where each is only inlined (a registry then found by its statics
    only), or the crate's layout cannot be read."""
    from agent.presets.rust_prometheus.layout import NoLayout, layout

    try:
        lay = layout(b.dwarf, b.namer)
    except NoLayout:
        return None
    for fn, what in _GATHERERS:
        sym = b.functions.symbols.get(fn)
        if sym is None or not sym.size:
            continue
        try:
            self_ = next((v for v in b.functions.vars(fn).params if v.name == "self"), None)
        except NoopError:
            continue
        loc = self_.location if self_ is not None else None
        if not loc or len(loc) != 1 or loc[0].reg is None or loc[0].at is not None or \
                loc[0].add:
            continue
        reg = loc[0].reg
        base = (Op("reg", reg=reg),) if what == "core" else \
            (Op("reg", reg=reg), Op("deref", offset=lay.registry_arc))
        at = 0 if what == "core" else lay.core
        fetches = ((ValueSpec(what, "uint", 8, 0, "pointer", "self" if what == "core"
                              else "self.r (its ArcInner)"),
                    Fetch("reg", size=8, regs=(reg,)) if what == "core" else
                    Fetch("mem", ops=base[:1], offset=lay.registry_arc, size=8)),
                   (ValueSpec("collectors", "uint", 8, 0, "int",
                              "the hasher's k0 of its collectors_by_id"),
                    Fetch("mem", ops=base, offset=at + lay.collectors.k0, size=8)),
                   (ValueSpec("seed", "uint", 8, 0, "int",
                              "the hasher's k1 of its collectors_by_id"),
                    Fetch("mem", ops=base, offset=at + lay.collectors.k1, size=8)))
        site = entry_site(b, fn, tuple(f for _v, f in fetches))
        return ProbePlan(GATHERED, TARGET, tuple(v for v, _f in fetches),
                         (replace(site, tag="gathered"),), tells=True)
    return None


def _drops(b: Binary, found: list[Found]) -> tuple[ProbePlan | None, str]:
    """For noop run: a site where each metric object's ``Desc`` is dropped (the entry of
    every out-of-line ``drop_in_place::<Desc>``, and of its inlined copies), which starts
    a new generation of the object's address (``plan.generations``): the allocator gives
    a dropped metric's memory to the next one made, and a row of one is never taken for
    a row of the other. A Desc dropped that is no metric's (a registry's copy) only
    starts a generation at an address no live metric object has. None when the
    objects' Descs are not at one offset in them, or there is no such drop, with why."""
    offsets = {member(b, f.owner, "desc") for f in found}
    if len(offsets) != 1 or None in offsets:
        return None, f"their Descs are at offsets {sorted(map(str, offsets))} in them"
    (offset,) = offsets
    assert offset is not None
    out: list[Site] = []
    unseen: list[str] = []
    for sym in b.elf.function_symbols():
        if not sym.size or b.functions.display_name(sym.name) != DESC_DROP:
            continue
        insns = sites.disassemble(b.elf, sym.address, min(sym.size, 16))
        how = sites.handling(insns[0].raw) if insns else sites.REFUSED
        if how == sites.REFUSED:
            unseen.append(f"{DESC_DROP} at {sym.address:#x}: its entry cannot be probed")
            continue
        out.append(Site(DESC_DROP, sym.address, b.elf.file_offset(sym.address),
                        f"dropped: the entry, the metric's Desc in rdi ({how})",
                        (Fetch("reg", size=8, offset=-offset, regs=("rdi",)),),
                        handling=how, role="renew", tag="dropped"))
    try:
        copies = b.functions.inlined(DESC_DROP)
    except NoopError:
        copies = ()
    for c in copies:
        loc = b.functions.inlined_location(c, "~p0", 8)
        insns = sites.disassemble(b.elf, c.entry, 16)
        how = sites.handling(insns[0].raw) if insns else sites.REFUSED
        if loc is None or len(loc) != 1 or loc[0].reg is None or loc[0].stack is not None \
                or loc[0].at is not None or how == sites.REFUSED:
            unseen.append(f"{DESC_DROP} inlined at {c.entry:#x}: the metric dropped there "
                          "is known by its address only")
            continue
        where = b.function_at(c.entry) or DESC_DROP
        out.append(Site(where, c.entry, b.elf.file_offset(c.entry),
                        f"dropped: {DESC_DROP} inlined, the metric's Desc at {loc[0].reg} "
                        f"+ {loc[0].add} ({how})",
                        (Fetch("reg", size=8, offset=loc[0].add - offset,
                               regs=(loc[0].reg,)),), handling=how, role="renew",
                        tag="dropped"))
    if not out:
        return None, f"no {DESC_DROP} to probe"
    return ProbePlan(DROPPED, TARGET, (ValueSpec("object", "addr", 8, 0, "pointer",
                                                 "the dropped metric"),), tuple(out),
                     unseen=tuple(unseen)), ""


def _line_tables_only(b: Binary) -> bool:
    """A build with line tables only: its own units name functions, and have no types
    (asked only once nothing was found: it reads every unit's top level). The standard
    library's units are not the program's: a toolchain may ship them with full debug
    info (Debian's does)."""
    return not any(c.tag == "DW_TAG_base_type" for cu in b.dwarf.units
                   if not _toolchains(cu) for c in cu.get_top_DIE().iter_children())


# Where a Rust toolchain's standard library was built (rustup's /rustc/<commit>,
# Debian's /usr/src/rustc-<version>) and the crates it vendors for it (/rust/deps).
_TOOLCHAIN_DIRS = ("/rustc/", "/usr/src/rustc-", "/rust/deps/")


def _toolchains(cu: CompileUnit) -> bool:
    """Whether unit ``cu`` is the toolchain's standard library, not the program's."""
    top = cu.get_top_DIE()
    for attr in ("DW_AT_comp_dir", "DW_AT_name"):
        value = top.attributes.get(attr)
        if value is not None and isinstance(value.value, bytes) and \
                value.value.decode(errors="replace").startswith(_TOOLCHAIN_DIRS):
            return True
    return False


def _typeless(missed: list[str]) -> bool:
    """Whether every copy went unread for want of DWARF types."""
    return bool(missed) and all("no DWARF type" in m for m in missed)


def _usable(b: Binary) -> None:
    """Refuses a Rust binary the preset cannot read, saying what it looks for."""
    if b.dwarf.source.kind == debuginfo.SYMBOLS:
        raise NoopError(f"{b.path} is a Rust program built without debug info: the preset "
                        "finds the prometheus crate's inlined update code and its Value "
                        "layout in DWARF",
                        "build it with debug = 2 in its Cargo profile, or give its "
                        "separate debug file")
    if not links_crate(b):
        raise NoopError(f"{b.path} is a Rust program without the prometheus crate (no "
                        "prometheus::value::Value or HistogramCore code in it): the "
                        "preset mirrors that crate's metrics",
                        "write a probes.yaml for it and use --config")
