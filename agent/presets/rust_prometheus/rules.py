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

import bisect
import re
import struct
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from elftools.dwarf.compileunit import CompileUnit
from elftools.dwarf.die import DIE

from agent.binary import debuginfo, guards, sites
from agent.binary.amd64 import full_register
from agent.binary.dwarf.dies import die_name, origin_of
from agent.binary.dwarf.listing import own_name
from agent.binary.dwarf.locations import Piece
from agent.config.model import parse_selector
from agent.config.selector import Selector
from agent.errors import NoopError
from agent.plan import generations
from agent.plan.binary import Binary
from agent.plan.model import Aggregate, Decode, Fetch, Op, Plan, ProbePlan, Site, ValueSpec
from agent.plan.placement import paired_with_swap
from agent.presets.rust_prometheus.facts import (
    DESC_DROP,
    DROPPED,
    MAX_CALLS,
    MAX_LABELS,
    MAX_ROWS,
    SOURCE,
    TARGET,
    columns,
    make_tag,
)

_VALUE = re.compile(r"prometheus::value::Value<prometheus::atomic64::Atomic([FIU]64)>::"
                    r"(inc|inc_by|dec|dec_by|set)(<|$)")
_HIST_INC = "prometheus::histogram::ShardAndCount::inc"
# A local histogram's flush adds its count to the shared one's through inc_by directly.
_HIST_INC_BY = "prometheus::histogram::ShardAndCount::inc_by"
_HIST_FLUSH = "prometheus::histogram::LocalHistogramCore::flush"
# A local counter's flush: GenericCounter::inc_by of its sum, told apart as "flush".
_LOCAL_FLUSH = re.compile(r"prometheus::counter::GenericLocalCounter<[^>]*>::flush(<|$)")
# The method of the program's call: the innermost of these around the Value copy.
_OWNER = re.compile(r"prometheus::(counter|gauge)::Generic(?:Counter|Gauge)<[^>]*>::(\w+)")
_NUMBERS = {"F64": "f64", "I64": "i64", "U64": "u64"}
_DECODE: dict[str, Decode] = {"f64": "float", "i64": "int", "u64": "uint"}
_LOCK_OPS = {"add": 1, "sub": -1, "inc": 1, "dec": -1}
_STORES = ("mov", "movsd", "movq", "xchg")

@dataclass(frozen=True, slots=True)
class Found:
    """One update instruction of the program's own, in the code of ``function``."""

    kind: str  # counter, gauge, histogram
    # the method the program called: inc, inc_by, reset, add, sub, dec, set, observe;
    # flush: a local counter's or histogram's (or its drop's)
    op: str
    number: str  # f64, i64, u64
    function: str
    insns: tuple[sites.Insn, ...]
    n: int  # its index in insns
    base: str
    disp: int
    owner: DIE  # Value<P> or HistogramCore: the metric's own struct
    field: int  # the updated field's offset in it
    around: tuple[tuple[int, int], ...] = ()  # histograms: HistogramCore::observe's code




def links_crate(b: Binary) -> bool:
    return any(n.startswith("prometheus::") for n in b.functions.symbols) or \
        any(_VALUE.match(n) or n == _HIST_INC for n in _inlined(b))


# Where the functions the preset reads are named: each is the crate's (in its namespace)
# or the drop of its Desc (core::ptr's, named after the Desc it drops).
_MENTIONED = (("prometheus",), (own_name(DESC_DROP),))


def _inlined(b: Binary) -> list[str]:
    """The crate's functions that exist only as inlined copies, and the Desc's drop, read
    from the units that mention them."""
    return b.functions.inlined_among(_MENTIONED, lambda n: n.startswith("prometheus::")
                                     or n == DESC_DROP)


def make(b: Binary, aggregate: bool) -> Plan:
    """The preset's plan for Rust program ``b``; with ``aggregate``, each probe also folds
    its hits into an in-kernel aggregate by (process, metric object, site) and
    describes each metric object once (for ``noop run``)."""
    _usable(b)
    found, missed = _updates(b)
    dropped, no_drops = _drops(b, found) if aggregate else (None, "")
    if no_drops and found:
        missed.append(f"metric objects are told apart by address only: {no_drops}")
    keys = ("$pid", "object", *((generations.NAME,) if dropped else ()), "$site")
    probes = []
    for name, group in _groups(found):
        # noop run needs a histogram's count only: no pairing with its sum's swap
        layout, out, unplaced = _sites(b, group, pair=not aggregate)
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
                        "(built with line tables only?): the preset reads each metric's "
                        "name and labels through them",
                        "build it with debug = 1 or 2 in its Cargo profile")
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
    here = Selector(path=str(Path(b.path).resolve()))
    return Plan(SOURCE, (b.plan(TARGET, None, selector=here),), tuple(probes))


def _drops(b: Binary, found: list[Found]) -> tuple[ProbePlan | None, str]:
    """For noop run: a site where each metric object's ``Desc`` is dropped (the entry of
    every out-of-line ``drop_in_place::<Desc>``, and of its inlined copies), which starts
    a new generation of the object's address (``plan.generations``): the allocator gives
    a dropped metric's memory to the next one made, and a row of one is never taken for
    a row of the other. A Desc dropped that is no metric's (a registry's copy) only
    starts a generation at an address no live metric object has. None when the
    objects' Descs are not at one offset in them, or there is no such drop, with why."""
    offsets = {_member(b, f.owner, "desc") for f in found}
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
                        "build it with debug = 1 or 2 in its Cargo profile, or give its "
                        "separate debug file")
    if not links_crate(b):
        raise NoopError(f"{b.path} is a Rust program without the prometheus crate (no "
                        "prometheus::value::Value or HistogramCore code in it): the "
                        "preset mirrors that crate's metrics",
                        "write a probes.yaml for it and use --config")


def _chain(die: DIE, b: Binary) -> Iterator[str]:
    """The names of the inlined copies and the function around ``die``, innermost
    first."""
    d = b.dwarf.parent(die)
    while d is not None:
        if d.tag in ("DW_TAG_inlined_subroutine", "DW_TAG_subprogram"):
            yield b.functions.function_name(origin_of(d)) or ""
        if d.tag == "DW_TAG_subprogram":
            return
        d = b.dwarf.parent(d)


def _copies(b: Binary, names: list[str]) -> Iterator[tuple[str, DIE, str, list[tuple[int, int]]]]:
    """(name, copy DIE, function holding it, its address ranges) of each inlined copy."""
    for name in names:
        for copy in b.functions.inlined(name):
            where = b.function_at(copy.entry)
            if where is not None:
                yield name, copy.die, where, b.dwarf.ranges(copy.die)


def _updates(b: Binary) -> tuple[list[Found], list[str]]:
    """Every update instruction of the program's own, and the copies with code that
    have none noop recognises."""
    names = _inlined(b)
    shown = b.functions.display_name
    found: dict[int, Found] = {}
    missed: list[tuple[list[tuple[int, int]], str]] = []
    for name, die, where, ranges in _copies(b, [n for n in names if _VALUE.match(n)]):
        m = _VALUE.match(name)
        assert m is not None
        number, store = _NUMBERS[m.group(1)], m.group(2) == "set"
        insns = b.instructions(where)
        hits = [n for n in _indices(insns, ranges) if _is_update(insns[n], number, store)]
        if len(hits) == 1 and insns[hits[0]].address in found:
            continue  # a copy nested in another (Value::inc holds Value::inc_by)
        chain = list(_chain(die, b))
        caller = next((o for o in map(_OWNER.match, chain) if o), None)
        if caller is None:
            continue  # not an update through a counter or gauge (none in the crate today)
        kind, op = caller.group(1), caller.group(2)
        if any(_LOCAL_FLUSH.match(n) for n in chain):
            op = "flush"  # GenericLocalCounter::flush's inc_by of the local sum
        owner = _self_type(b, die)
        field = _member(b, owner, "val")
        if owner is None or field is None or len(hits) != 1:
            why = "no DWARF type for its Value" if owner is None else \
                f"{len(hits)} update instructions in its code"
            missed.append((ranges, f"{kind}.{op} inlined into {shown(where)} at "
                           f"{ranges[0][0]:#x} "
                           f"({why})"))
            continue
        found.setdefault(insns[hits[0]].address,
                         _found(kind, op, number, where, insns, hits[0], owner, field))
    for _name, die, where, ranges in _copies(b, [n for n in names if n == _HIST_INC]):
        frame = _frame(b, b.dwarf.parent(die))  # HistogramCore::observe
        _counted(b, found, missed, "observe", where, ranges, frame, _self_type(b, frame))
    for _name, die, where, ranges in _copies(b, [n for n in names if n == _HIST_INC_BY]):
        frame = _frame(b, b.dwarf.parent(die))
        if frame is None or b.functions.function_name(origin_of(frame)) != _HIST_FLUSH:
            continue  # ShardAndCount::inc's (an observation, found above), or none
        _counted(b, found, missed, "flush", where, ranges, frame,
                 _shared_core(b, _self_type(b, frame)))
    # Copies nested in others (Value::inc holds Value::inc_by) find the same instruction.
    unseen = [why for ranges, why in missed if ranges
              and not any(_within(a, ranges) for a in found)]
    return [found[a] for a in sorted(found)], unseen


def _counted(b: Binary, found: dict[int, Found],
             missed: list[tuple[list[tuple[int, int]], str]], op: str, where: str,
             ranges: list[tuple[int, int]], frame: DIE | None, core: DIE | None) -> None:
    """A histogram's count update (``observe``, or a local histogram's ``flush``) in the
    copy at ``ranges`` of ``where``: its one ``lock xadd`` on the HistogramCore's
    ``shard_and_count``, into ``found``; or why not, into ``missed``."""
    count = _member(b, core, "shard_and_count")
    insns = b.instructions(where)
    hits = [n for n in _indices(insns, ranges) if insns[n].lock
            and insns[n].mnemonic == "xadd" and _mem_reg(insns[n]) is not None]
    if core is None or count is None or len(hits) != 1:
        why = "no DWARF type for its HistogramCore" if core is None else \
            "no lock xadd on shard_and_count"
        missed.append((ranges, f"histogram.{op} inlined into "
                       f"{b.functions.display_name(where)} at "
                       f"{ranges[0][0]:#x} ({why})"))
        return
    found.setdefault(insns[hits[0]].address, replace(
        _found("histogram", op, "u64", where, insns, hits[0], core, count),
        around=tuple(b.dwarf.ranges(frame)) if frame is not None else ()))


def _indices(insns: tuple[sites.Insn, ...], ranges: list[tuple[int, int]]) -> list[int]:
    """The indices of the instructions (by address) that start within ``ranges``, in
    order: found by bisection, as a function's copies are many and its code long."""
    out: set[int] = set()
    for lo, hi in ranges:
        first = bisect.bisect_left(insns, lo, key=lambda i: i.address)
        out.update(range(first, bisect.bisect_left(insns, hi, key=lambda i: i.address)))
    return sorted(out)


def _within(address: int, ranges: list[tuple[int, int]]) -> bool:
    return any(lo <= address < hi for lo, hi in ranges)


def _found(kind: str, op: str, number: str, where: str, insns: tuple[sites.Insn, ...],
           n: int, owner: DIE, field: int) -> Found:
    base, disp = _mem_reg(insns[n]) or ("", 0)
    return Found(kind, op, number, where, insns, n, base, disp, owner, field)


def _shared_core(b: Binary, local: DIE | None) -> DIE | None:
    """The ``HistogramCore`` a ``LocalHistogramCore`` flushes into: its
    ``histogram.core``, an ``Arc<HistogramCore>`` (the type it is generic over)."""
    histogram = b.walker.members(local).get("histogram") if local is not None else None
    arc = b.walker.members(histogram[1]).get("core") if histogram is not None else None
    d = b.namer.strip(arc[1]) if arc is not None else None
    if d is None:
        return None
    return next((b.dwarf.ref(c) for c in d.iter_children()
                 if c.tag == "DW_TAG_template_type_param" and die_name(c) == "T"), None)


def _frame(b: Binary, die: DIE | None) -> DIE | None:
    """The inlined copy or function ``die`` is in (itself if it is one)."""
    while die is not None and die.tag not in ("DW_TAG_inlined_subroutine",
                                              "DW_TAG_subprogram"):
        die = b.dwarf.parent(die)
    return die


def _self_type(b: Binary, copy: DIE | None) -> DIE | None:
    """The struct a method's ``self`` points to, from the DWARF of its inlined copy (no
    type index to build); None without types (line tables only)."""
    if copy is None or copy.tag not in ("DW_TAG_inlined_subroutine", "DW_TAG_subprogram"):
        return None
    # self is the first parameter (a method's declaration leaves its parameters unnamed)
    param = next((c for c in origin_of(copy).iter_children()
                  if c.tag == "DW_TAG_formal_parameter"), None)
    pointer = b.dwarf.ref(param) if param is not None else None
    return b.dwarf.ref(pointer) if pointer is not None else None


def _member(b: Binary, owner: DIE | None, name: str) -> int | None:
    got = b.walker.members(owner).get(name) if owner is not None else None
    return got[0] if got is not None else None


def _mem_reg(i: sites.Insn) -> tuple[str, int] | None:
    """(base, disp) of an instruction's memory operand: a base register and no index,
    not the stack or rip."""
    mem = next((o for o in i.operands if o[0] == "mem"), None)
    if mem is None or mem[2] or not mem[1] or mem[1] in ("rsp", "rbp", "rip"):
        return None
    return mem[1], mem[3]


def _qword(i: sites.Insn) -> bool:
    """An instruction on 8 bytes: REX.W, or an SSE move of a double."""
    if i.mnemonic in ("movsd", "movq"):
        return True
    raw = i.raw.lstrip(bytes([0xF0, 0x66, 0xF2, 0xF3]))
    return bool(raw) and 0x48 <= raw[0] <= 0x4F


def _is_update(i: sites.Insn, number: str, store: bool) -> bool:
    if _mem_reg(i) is None or not _qword(i):
        return False
    if store:  # a plain or exchanging store of the new value: a register or a constant
        return i.mnemonic in _STORES and i.operands[0][0] == "mem" \
            and len(i.operands) == 2 and i.operands[1][0] in ("reg", "imm")
    if number == "f64":
        return i.lock and i.mnemonic == "cmpxchg"
    return i.lock and i.mnemonic in _LOCK_OPS


def _groups(found: list[Found]) -> Iterator[tuple[str, list[Found]]]:
    """Updates by probe: one per kind and number type (sites of one probe share one
    event layout)."""
    by: dict[str, list[Found]] = {}
    for f in found:
        name = f"{f.kind}_{f.number}" if f.kind != "histogram" else \
            "histogram_flush" if f.op == "flush" else "histogram"
        by.setdefault(name, []).append(f)
    order = ("counter_u64", "counter_i64", "counter_f64", "gauge_i64", "gauge_u64",
             "gauge_f64", "histogram", "histogram_flush")
    yield from sorted(by.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else 99)


def _common(b: Binary, f: Found) -> list[tuple[ValueSpec, Fetch]]:
    """Name, labels and address of the metric whose field is at base + disp."""
    at = f.disp - f.field
    start = (Piece(b.namer.size(f.owner) or 8, reg=f.base, at=at),)
    wanted = [("metric", "m.desc.fq_name", "string", 128)]
    for i in range(MAX_LABELS):
        wanted += [(f"l{i}_name", f"m.label_pairs[{i}].name", "string", 32),
                   (f"l{i}_value", f"m.label_pairs[{i}].value", "string", 64)]
    out = []
    for name, sel, decode, cap in wanted:
        got = b.walker.select(parse_selector(sel), start, f.owner, decode, cap)
        out.append((ValueSpec(name, got.decode, got.size, got.cap, got.type, sel), got.fetch))
    out.append((ValueSpec("object", "addr", 8, 0, "pointer", "m"),
                Fetch("reg", size=8, offset=at, regs=(f.base,))))
    return out


def _field(f: Found) -> Fetch:
    """The updated field itself, in memory."""
    return Fetch("mem", ops=(Op("reg", reg=f.base),), offset=f.disp, size=8)


def _sites(b: Binary, group: list[Found], pair: bool = True
           ) -> tuple[tuple[ValueSpec, ...], list[Site], list[str]]:
    """The sites of one probe's updates, and the updates left without one (why). With
    ``pair``, a histogram's count site is paired with its sum's swap, for the observed
    value (one more hit an observation)."""
    number = group[0].number
    decode: Decode = "uint" if group[0].kind == "histogram" else _DECODE[number]
    what = {"f64": "f64 bits", "i64": "i64", "u64": "u64"}[number]
    specs = (ValueSpec("delta", decode, 8, 0, what, "the increment"),
             ValueSpec("value", decode, 8, 0, what, "the value after the update"),
             ValueSpec("before", decode, 8, 0, what, "the value before the update"),
             ValueSpec("observed", "float", 8, 0, "f64", "v"),
             ValueSpec("now", decode, 8, 0, what, "the field just after the update"))
    layout: tuple[ValueSpec, ...] | None = None
    out: list[tuple[int, int, Site]] = []
    unplaced: list[str] = []
    for f in group:
        # A flush's increment (the observations flushed) is in the xadd's register only
        # before it: it is always probed there.
        flush = f.kind == "histogram" and f.op == "flush"
        placed = None if flush else _place(b, f)
        flags = (0, 0)  # skip, keep: see Site
        before: guards.Before | str | None = None
        if placed is None and f.insns[f.n].lock and \
                (flush or f.insns[f.n].mnemonic in _LOCK_OPS):
            before = _guarded(f)
        if isinstance(before, guards.Before):
            placed = _place_flush(f, before) if flush else _place_before(f, before)
            flags = (before.skip_flags, before.keep_flags)
        if placed is None:
            unplaced.append(f"{f.kind}.{f.op} in {b.functions.display_name(f.function)} at "
                            f"{f.insns[f.n].address:#x}: "
                            "no instruction after it to probe (another path joins there, "
                            "or the kernel refuses it)"
                            + (f", and before it {before}" if isinstance(before, str) else ""))
            continue
        site, fetches, why, tag = placed
        pairs = _common(b, f)
        if isinstance(before, guards.Before):
            base = before.reg(f.base)
            pairs = [(v, _rebase(x, f.base, base)) for v, x in pairs]
        mine = specs[:4] if flush else specs[2:4] if f.kind == "histogram" else \
            (*specs[:3], specs[4]) if number == "f64" else specs[:3]
        values = tuple(v for v, _ in pairs) + mine
        if layout is None:
            layout = values
        k = sites.index_at(f.insns, site)
        assert k is not None  # a site is one of the function's instructions
        at = f.insns[k]
        swap = _sum_swap(f, site) if pair and f.kind == "histogram" else None
        if swap is not None:  # the count here, kept for the observed value at the swap
            out += _paired(b, f, at, swap, tuple(x for _, x in pairs) + fetches, tag, why,
                           flags)
            continue
        out.append((site, -f.insns[f.n].address, Site(
            b.functions.display_name(f.function), site, b.elf.file_offset(site), why,
            tuple(x for _, x in pairs) + fetches, when_zf=f.insns[f.n].mnemonic == "cmpxchg",
            tag=tag, handling=sites.handling(at.raw), skip_flags=flags[0],
            keep_flags=flags[1])))
    # Updates that share a site (LOCK instructions in a row) are attached later one
    # first: the kernel runs a probed address's consumers newest first, so their
    # events come in the program's order.
    return layout or (), [s for *_k, s in sorted(out, key=lambda o: o[:2])], unplaced


def _place(b: Binary, f: Found) -> tuple[int, tuple[Fetch, ...], str, str] | None:
    """Where to probe update ``f``, what to read there, why, and the site's tag."""
    insns, i = f.insns, f.insns[f.n]
    gone = Fetch("unavailable", why="not held anywhere at this site")
    field = "count" if f.kind == "histogram" else "value"
    what = f"{'lock ' * i.lock}{i.mnemonic} on the {f.kind}'s {field} at {i.address:#x}"
    targets = sites.branch_targets(insns)
    src = next((o[1] for o in i.operands if o[0] == "reg"), None)
    imm = next((o[1] for o in i.operands if o[0] == "imm"), None)
    if not i.lock and i.mnemonic in _STORES:
        if imm is not None:  # at the store of a constant (reset's 0): the new value
            new = Fetch("const", offset=imm & 2**64 - 1)
            return (i.address, (gone, new, _field(f), *_now(f, new)),
                    f"at the store of the constant {imm:#x} ({what})",
                    make_tag(f.kind, f.op, store=True))
        if src is not None and src.startswith("r"):  # at the store: new in a register
            new = Fetch("reg", size=8, regs=(src,))
            return (i.address, (gone, new, _field(f), *_now(f, new)),
                    f"at the store of the new value ({what}) from {src}",
                    make_tag(f.kind, f.op, store=True))
        after = _after(insns, f.n, targets)
        if after is None:
            return None
        return (insns[after].address, (gone, _field(f), gone, *_now(f, _field(f))),
                f"after the store of the new value ({what}), read back from memory",
                make_tag(f.kind, f.op, store=True))
    after = _after(insns, f.n, targets)
    if after is None:
        return None
    site = insns[after].address
    if f.kind == "histogram":  # xadd left the count before in src
        return (site, (Fetch("reg", size=8, regs=(src,)) if src else gone,
                       Fetch("unavailable", why="v is passed in xmm0, and this kernel "
                             "cannot read XMM registers in a uprobe")),
                f"after the {what}: the count before it in {src}", make_tag("histogram", "observe"))
    if i.mnemonic == "cmpxchg":  # old bits in rax, new in src; ZF: the swap won
        delta = _constant_delta(b, insns, f.n, src or "")
        return (site, (Fetch("const", offset=delta) if delta is not None else Fetch(
                    "unavailable", why="computed at run time: the increment is new - old"),
                       Fetch("reg", size=8, regs=(src,)) if src else gone,
                       Fetch("reg", size=8, regs=("rax",)), *_now(f, _field(f))),
                f"after the {what}: a successful swap (ZF), old bits in rax, new in {src}"
                + (", the increment a constant of the loop" if delta is not None else ""),
                make_tag(f.kind, f.op))
    sign = _LOCK_OPS[i.mnemonic]
    if i.mnemonic in ("inc", "dec"):
        delta_fetch, reg_sign = Fetch("const", offset=sign & 2**64 - 1), 1
    elif imm is not None:
        delta_fetch, reg_sign = Fetch("const", offset=(sign * imm) & 2**64 - 1), 1
    else:
        delta_fetch, reg_sign = Fetch("reg", size=8, regs=(src or "",)), sign
    adjust = _later(insns, f.n, after, f.base, f.disp)
    if adjust is None:
        return None
    return (site, (delta_fetch, _field(f), gone),
            f"after the {what} (the kernel refuses a LOCK instruction): the value read "
            "back from memory, the increment from the instruction", make_tag(f.kind, f.op,
                                                                        reg_sign, adjust))


def _guarded(f: Found) -> guards.Before | str:
    """The site before LOCK update ``f`` (``guards.before``), where its base register
    and the register of its increment are read; a string: why there is none."""
    i = f.insns[f.n]
    src = next((o[1] for o in i.operands if o[0] == "reg"), None)
    return guards.before(f.insns, f.n, (f.base, *((src,) if src else ())),
                         plain=(src,) if src else ())


def _place_before(f: Found, at: guards.Before) -> tuple[int, tuple[Fetch, ...], str, str]:
    """Like ``_place``, at a site before the LOCK update ``f``: the increment from the
    instruction, the value it leaves as the field read there plus the increment, and
    the value before it."""
    i = f.insns[f.n]
    base = at.reg(f.base)
    field = _rebase(_field(f), f.base, base)
    src = next((o[1] for o in i.operands if o[0] == "reg"), None)
    imm = next((o[1] for o in i.operands if o[0] == "imm"), None)
    sign = _LOCK_OPS[i.mnemonic]
    if src is None:  # inc, dec, or a constant operand
        step = sign * (1 if imm is None else imm) & 2**64 - 1
        delta, value = Fetch("const", offset=step), replace(field, kind="sum", base=step)
        reg_sign = 1
    else:
        reg = at.reg(src).reg
        delta = Fetch("reg", size=8, regs=(reg,))
        value = replace(field, kind="sum", regs=(reg,), formula="-" if sign < 0 else "")
        reg_sign = sign
    what = f"lock {i.mnemonic} on the {f.kind}'s value at {i.address:#x}"
    return (at.site.address, (delta, value, field),
            f"before the {what} (after it another path joins, or the kernel refuses the "
            f"instruction): {at.why}; the value before it read from memory, the increment "
            "from the instruction", make_tag(f.kind, f.op, reg_sign))


def _place_flush(f: Found, at: guards.Before) -> tuple[int, tuple[Fetch, ...], str, str]:
    """Where to probe a local histogram's flush ``f`` (its ``lock xadd`` of the local
    count on the shared ``shard_and_count``): at the site before it, where the xadd's
    register still holds the observations flushed; the count after it is the field
    read there plus them. The flushed sum comes later, from the sum's swap."""
    i = f.insns[f.n]
    base = at.reg(f.base)
    field = _rebase(_field(f), f.base, base)
    src = next(o[1] for o in i.operands if o[0] == "reg")
    reg = at.reg(src).reg
    return (at.site.address, (Fetch("reg", size=8, regs=(reg,)),
                              replace(field, kind="sum", regs=(reg,)), field,
                              Fetch("unavailable", why="added to the shard's sum later, "
                                    "by its compare-and-swap")),
            f"before the lock xadd on the histogram's count at {i.address:#x} (a local "
            f"histogram's flush: after it the register holds the count before, no longer "
            f"the observations flushed): {at.why}; the count before it read from memory, "
            f"the observations flushed from {reg}", make_tag("histogram", "flush"))


def _rebase(fetch: Fetch, reg: str, at: guards.Reg) -> Fetch:
    """``fetch``, which starts from register ``reg``, read where ``reg`` is ``at``."""
    if at == guards.Reg(reg):
        return fetch
    chain = (Op("reg", reg=at.reg), *(Op("deref", offset=d) for d in at.derefs))
    if fetch.kind == "reg" and fetch.regs == (reg,) and not fetch.ops:
        if not at.derefs:
            return replace(fetch, regs=(at.reg,), offset=fetch.offset + at.add)
        return Fetch("addr", chain, offset=fetch.offset + at.add)
    if not fetch.ops or fetch.ops[0] != Op("reg", reg=reg):
        raise ValueError(f"{fetch.describe()} does not start from {reg}")
    add = (Op("add", offset=at.add),) if at.add else ()
    return replace(fetch, ops=(*chain, *add, *fetch.ops[1:]))


def _sum_swap(f: Found, site: int) -> int | None:
    """The index of the ``lock cmpxchg`` that adds the observed value to the shard's sum
    in the histogram update ``f``'s ``HistogramCore::observe``, when a probe after it
    pairs with one at ``site`` (the count's): the thread's stack pointer is the same at
    both (nothing between them moves it or calls), and only the swap leads to the
    instruction after it."""
    insns = f.insns
    swaps = [m for m in _indices(insns, list(f.around))
             if insns[m].lock and insns[m].mnemonic == "cmpxchg" and _qword(insns[m])
             and _mem_reg(insns[m])]
    if len(swaps) != 1 or swaps[0] <= f.n or swaps[0] + 1 >= len(insns):
        return None
    m = swaps[0]
    after = insns[m + 1]
    if any(i.target == after.address for i in insns) or \
            sites.handling(after.raw) == sites.REFUSED:
        return None
    span = [i for i in insns if site <= i.address <= insns[m].address]
    if any(i.mnemonic in ("call", "push", "pop", "leave") or "rsp" in i.writes for i in span):
        return None
    return m


def _paired(b: Binary, f: Found, at: sites.Insn, m: int, fetches: tuple[Fetch, ...],
            tag: str, why: str, flags: tuple[int, int] = (0, 0)
            ) -> list[tuple[int, int, Site]]:
    """The histogram update ``f``'s two sites: at the count (``at``), which keeps what it
    reads for the thread, and after the sum's successful swap (``insns[m]``), where the
    observed value is new - old and each observation is a hit."""
    swap, after = f.insns[m], f.insns[m + 1]
    src = next((o[1] for o in swap.operands if o[0] == "reg"), "")
    name = b.functions.display_name(f.function)
    kept, ends = paired_with_swap(fetches, src)
    return [
        (at.address, -f.insns[f.n].address, Site(
            name, at.address, b.elf.file_offset(at.address), why + "; kept for the sum's "
            f"swap at {swap.address:#x}", kept, tag=tag, handling=sites.handling(at.raw),
            role="call", skip_flags=flags[0], keep_flags=flags[1])),
        (after.address, -swap.address, Site(
            name, after.address, b.elf.file_offset(after.address),
            f"after the lock cmpxchg on the histogram's sum at {swap.address:#x}: a "
            f"successful swap (ZF), the {'sum flushed' if f.op == 'flush' else 'observed value'}"
            f" new - old (rax, {src}), the count as the call's count site read it", ends,
            when_zf=True, tag=tag,
            handling=sites.handling(after.raw), role="return"))]


def _now(f: Found, fetch: Fetch) -> tuple[Fetch, ...]:
    """The field just after the update, for a float probe's gauges (see ``columns``)."""
    return (fetch,) if f.number == "f64" else ()


def _after(insns: tuple[sites.Insn, ...], n: int, targets: frozenset[int]) -> int | None:
    """The first instruction after ``insns[n]`` and any LOCK instructions right after it,
    if nothing else jumps there and the kernel can probe it."""
    k = n + 1
    while k < len(insns) and insns[k].lock:
        k += 1
    if k >= len(insns) or insns[k].address in targets or \
            sites.handling(insns[k].raw) == sites.REFUSED:
        return None
    return k


def _later(insns: tuple[sites.Insn, ...], n: int, site: int, base: str, disp: int
           ) -> int | None:
    """What the LOCK updates between ``insns[n]`` and the site add to the same field (by
    constants), for the value after ``insns[n]``'s own; None when one adds a register."""
    total = 0
    for i in insns[n + 1:site]:
        if _mem_reg(i) != (base, disp):
            continue
        imm = next((o[1] for o in i.operands if o[0] == "imm"), None)
        if i.mnemonic in ("inc", "dec"):
            total += _LOCK_OPS[i.mnemonic]
        elif i.mnemonic in ("add", "sub") and imm is not None:
            total += _LOCK_OPS[i.mnemonic] * imm
        else:
            return None
    return -total


def _constant_delta(b: Binary, insns: tuple[sites.Insn, ...], n: int, src: str
                    ) -> int | None:
    """The f64 bits of a compare-and-swap loop's increment, when it is a constant: the
    new value is ``addsd``/``subsd`` of the old with a double loaded from the binary."""
    k = n - 1
    moved = src
    while k >= max(0, n - 16):  # back to what computed src
        i = insns[k]
        if i.mnemonic in ("addsd", "subsd") and i.operands[0] == ("reg", moved):
            sign = 1 if i.mnemonic == "addsd" else -1
            other = i.operands[1]
            if other[0] == "mem" and other[1] == "rip":
                return _double(b, i, other[3], sign)
            if other[0] == "reg":
                return _loaded(b, insns, k, n, other[1], sign)
            return None
        if i.mnemonic == "movq" and i.operands[0] == ("reg", moved):
            moved = i.operands[1][1] if i.operands[1][0] == "reg" else ""
        k -= 1
    return None


def _loaded(b: Binary, insns: tuple[sites.Insn, ...], k: int, n: int, reg: str, sign: int
            ) -> int | None:
    """The constant double in ``reg`` at ``insns[k]``: loaded before it, on the only
    path there (jumps into the span come from inside it: the loop's own)."""
    lo = k - 1
    while lo >= 0:
        i = insns[lo]
        if i.mnemonic in ("call", "ret") or i.mnemonic.startswith("j") or \
                full_register(reg) in (full_register(w) for w in i.writes):
            break
        lo -= 1
    if lo < 0:
        return None
    load = insns[lo]
    if load.mnemonic != "movsd" or load.operands[0] != ("reg", reg) or \
            load.operands[1][0] != "mem" or load.operands[1][1] != "rip":
        return None
    span = (load.address, insns[n + 1].address + insns[n + 1].size)
    if any(not span[0] <= a < span[1]
           for a in sites.branches_into(insns, span[0], insns[k].address)):
        return None
    return _double(b, load, load.operands[1][3], sign)


def _double(b: Binary, i: sites.Insn, disp: int, sign: int) -> int | None:
    try:
        raw = b.elf.read_vaddr(i.address + i.size + disp, 8)
    except (ValueError, KeyError, OSError):
        return None
    (x,) = struct.unpack("<d", raw)
    return int.from_bytes(struct.pack("<d", sign * x), "little")

