"""Finding the prometheus crate's updates in a Rust binary: the inlined copies of its
update methods (``Value<P>::inc_by``/``dec_by``/``set``, ``ShardAndCount::inc``, a local
histogram's ``inc_by``), read through DWARF's inlined-subroutine records; in each, the
one instruction that updates the metric's field; the method of the program's call
around the copy (the operation); and the metric's own struct, with the field's offset
in it. Where each is probed is ``places``'s."""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

from elftools.dwarf.die import DIE

from agent.binary import sites
from agent.binary.dwarf.dies import die_name, origin_of
from agent.binary.dwarf.listing import own_name
from agent.plan.binary import Binary
from agent.presets.rust_prometheus.facts import DESC_DROP

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
LOCK_OPS = {"add": 1, "sub": -1, "inc": 1, "dec": -1}
STORES = ("mov", "movsd", "movq", "xchg")

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


@dataclass(frozen=True, slots=True)
class Reader:
    """How an architecture's code holds an update: whether ``insns[n]`` updates a
    Value's field (of ``number``; ``store``: a set), the (register, offset) of the field
    it writes, and whether it is a histogram count's add."""

    is_update: Callable[[tuple[sites.Insn, ...], int, str, bool], bool]
    mem_reg: Callable[[sites.Insn], tuple[str, int] | None]
    counts: Callable[[tuple[sites.Insn, ...], int], bool]


def _x86_counts(insns: tuple[sites.Insn, ...], n: int) -> bool:
    return insns[n].lock and insns[n].mnemonic == "xadd" and mem_reg(insns[n]) is not None


def x86_64() -> Reader:
    """x86-64's: LOCK instructions and stores (``_is_update``), a ``lock xadd``."""
    return Reader(lambda insns, n, number, store: _is_update(insns[n], number, store),
                  mem_reg, _x86_counts)


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


def updates(b: Binary, reader: Reader | None = None) -> tuple[list[Found], list[str]]:
    """Every update instruction of the program's own, and the copies with code that
    have none noop recognises; ``reader``: how the architecture's code holds one
    (default x86-64's)."""
    read = reader or x86_64()
    names = _inlined(b)
    shown = b.functions.display_name
    found: dict[int, Found] = {}
    missed: list[tuple[list[tuple[int, int]], str]] = []
    for name, die, where, ranges in _copies(b, [n for n in names if _VALUE.match(n)]):
        m = _VALUE.match(name)
        assert m is not None
        number, store = _NUMBERS[m.group(1)], m.group(2) == "set"
        insns = b.instructions(where)
        hits = [n for n in indices(insns, ranges) if read.is_update(insns, n, number, store)]
        if hits and all(insns[h].address in found for h in hits):
            continue  # a copy nested in another (Value::inc holds Value::inc_by)
        chain = list(_chain(die, b))
        caller = next((o for o in map(_OWNER.match, chain) if o), None)
        if caller is None:
            continue  # not an update through a counter or gauge (none in the crate today)
        kind, op = caller.group(1), caller.group(2)
        if any(_LOCAL_FLUSH.match(n) for n in chain):
            op = "flush"  # GenericLocalCounter::flush's inc_by of the local sum
        owner = _self_type(b, die)
        field = member(b, owner, "val")
        # One update instruction a copy; several where the compiler unrolled the loop
        # around the call: each an update of the same field (at one displacement from
        # its register), a site each.
        fields = {(read.mem_reg(insns[h]) or ("", 0))[1] for h in hits}
        if owner is None or field is None or len(fields) != 1:
            why = "no DWARF type for its Value" if owner is None else \
                f"{len(hits)} update instructions of {len(fields)} fields in its code" \
                if hits else "no update instruction noop knows in its code"
            missed.append((ranges, f"{kind}.{op} inlined into {shown(where)} at "
                           f"{ranges[0][0]:#x} "
                           f"({why})"))
            continue
        for h in hits:
            found.setdefault(insns[h].address,
                             _found(kind, op, number, where, insns, h, owner, field, read))
    for _name, die, where, ranges in _copies(b, [n for n in names if n == _HIST_INC]):
        frame = _frame(b, b.dwarf.parent(die))  # HistogramCore::observe
        _counted(b, found, missed, "observe", where, ranges, frame, _self_type(b, frame),
                 read)
    for _name, die, where, ranges in _copies(b, [n for n in names if n == _HIST_INC_BY]):
        frame = _frame(b, b.dwarf.parent(die))
        if frame is None or b.functions.function_name(origin_of(frame)) != _HIST_FLUSH:
            continue  # ShardAndCount::inc's (an observation, found above), or none
        _counted(b, found, missed, "flush", where, ranges, frame,
                 _shared_core(b, _self_type(b, frame)), read)
    # Copies nested in others (Value::inc holds Value::inc_by) find the same instruction.
    # Such copies neither of which is read say the same thing: said once.
    unseen = list(dict.fromkeys(why for ranges, why in missed if ranges
                                and not any(_within(a, ranges) for a in found)))
    return [found[a] for a in sorted(found)], unseen


def _counted(b: Binary, found: dict[int, Found],
             missed: list[tuple[list[tuple[int, int]], str]], op: str, where: str,
             ranges: list[tuple[int, int]], frame: DIE | None, core: DIE | None,
             read: Reader) -> None:
    """A histogram's count update (``observe``, or a local histogram's ``flush``) in the
    copy at ``ranges`` of ``where``: its one add on the HistogramCore's
    ``shard_and_count`` (x86-64's ``lock xadd``), into ``found``; or why not, into
    ``missed``."""
    count = member(b, core, "shard_and_count")
    insns = b.instructions(where)
    hits = [n for n in indices(insns, ranges) if read.counts(insns, n)]
    if core is None or count is None or len(hits) != 1:
        why = "no DWARF type for its HistogramCore" if core is None else \
            "no atomic add on shard_and_count" if not hits else \
            f"{len(hits)} atomic adds on shard_and_count (an unrolled loop): its sum's " \
            "swaps are not told apart"
        missed.append((ranges, f"histogram.{op} inlined into "
                       f"{b.functions.display_name(where)} at "
                       f"{ranges[0][0]:#x} ({why})"))
        return
    found.setdefault(insns[hits[0]].address, replace(
        _found("histogram", op, "u64", where, insns, hits[0], core, count, read),
        around=tuple(b.dwarf.ranges(frame)) if frame is not None else ()))


def indices(insns: tuple[sites.Insn, ...], ranges: list[tuple[int, int]]) -> list[int]:
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
           n: int, owner: DIE, field: int, read: Reader) -> Found:
    base, disp = read.mem_reg(insns[n]) or ("", 0)
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


def member(b: Binary, owner: DIE | None, name: str) -> int | None:
    got = b.walker.members(owner).get(name) if owner is not None else None
    return got[0] if got is not None else None


def mem_reg(i: sites.Insn) -> tuple[str, int] | None:
    """(base, disp) of an instruction's memory operand: a base register and no index,
    not the stack or rip."""
    mem = next((o for o in i.operands if o[0] == "mem"), None)
    if mem is None or mem[2] or not mem[1] or mem[1] in ("rsp", "rbp", "rip"):
        return None
    return mem[1], mem[3]


def qword(i: sites.Insn) -> bool:
    """An instruction on 8 bytes: REX.W, or an SSE move of a double."""
    if i.mnemonic in ("movsd", "movq"):
        return True
    raw = i.raw.lstrip(bytes([0xF0, 0x66, 0xF2, 0xF3]))
    return bool(raw) and 0x48 <= raw[0] <= 0x4F


def _is_update(i: sites.Insn, number: str, store: bool) -> bool:
    if mem_reg(i) is None or not qword(i):
        return False
    if store:  # a plain or exchanging store of the new value: a register or a constant
        return i.mnemonic in STORES and i.operands[0][0] == "mem" \
            and len(i.operands) == 2 and i.operands[1][0] in ("reg", "imm")
    if number == "f64":
        return i.lock and i.mnemonic == "cmpxchg"
    return i.lock and i.mnemonic in LOCK_OPS
