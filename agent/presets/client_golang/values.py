"""What the client_golang preset reads at a site: the metric's name, labels and address
through its struct, one of its fields, a register, ``Observe``'s v where the function
spilled xmm0 to the stack, and which of these each rule's update reads
(``specific``)."""

from __future__ import annotations

from typing import Any, NamedTuple

from agent.binary import sites
from agent.binary.dwarf.dies import die_name
from agent.binary.dwarf.locations import Location, Piece, Unavailable
from agent.config.model import parse_selector
from agent.errors import NoopError
from agent.plan.binary import Binary
from agent.plan.fetches import Decode, Fetch, Op
from agent.plan.model import ValueSpec
from agent.presets.client_golang.facts import MAX_LABELS, PKG, Rule


def common(b: Binary, recv_type: Any, base: str, add: int = 0
           ) -> list[tuple[ValueSpec, Fetch]]:
    """Name, labels and address of the metric whose field ``base`` points into (the
    metric at ``base`` + ``add``: arm64's atomics hold the field's own address)."""
    start: Location = (Piece(8, reg=base, add=add),)
    out = []
    wanted = [("metric", "m.desc.fqName", "string", 128)]
    for i in range(MAX_LABELS):
        wanted += [(f"l{i}_name", f"m.labelPairs[{i}].Name", "string", 32),
                   (f"l{i}_value", f"m.labelPairs[{i}].Value", "string", 64)]
    for name, sel, decode, cap in wanted:
        got = b.walker.select(parse_selector(sel), start, recv_type, decode, cap)
        out.append((ValueSpec(name, got.decode, got.size, got.cap, got.type, sel), got.fetch))
    out.append((ValueSpec("object", "addr", 8, 0, "pointer", "m"),
                Fetch("reg", size=8, regs=(base,), offset=add)))
    return out


def field(b: Binary, recv_type: Any, base: str, name: str, decode: str, add: int = 0
          ) -> tuple[ValueSpec, Fetch]:
    got = b.walker.select(parse_selector(f"m.{name}"), (Piece(8, reg=base, add=add),),
                          recv_type, decode, 8)
    return ValueSpec(name, got.decode, got.size, 0, got.type, f"m.{name}"), got.fetch


def register(name: str, reg: str, decode: Decode, what: str) -> tuple[ValueSpec, Fetch]:
    # The register differs from site to site; the value's description must not, since
    # all sites of a probe share one event layout.
    return (ValueSpec(name, decode, 8, 0, what, f"register ({name})"),
            Fetch("reg", size=8, regs=(reg,)))


def word(base: str, offset: int, name: str, what: str) -> tuple[ValueSpec, Fetch]:
    """An unsigned word of the struct ``base`` points to."""
    return (ValueSpec(name, "uint", 8, 0, "int", what),
            Fetch("mem", ops=(Op("reg", reg=base),), offset=offset, size=8))


def _observed(b: Binary, function: str, insns: tuple[sites.Insn, ...], site: int
              ) -> tuple[ValueSpec, Fetch]:
    """Histogram.Observe's v: passed in xmm0, which a uprobe cannot read; found where the
    function stored xmm0 on the stack before the site, if DWARF agrees it held v."""
    reason = "v is passed in xmm0, and this kernel cannot read XMM registers in a uprobe"
    found = sites.spilled(insns, site, "xmm0")
    if found is None or not held_v(b, function, insns, found[1], "xmm0"):
        return OBSERVED, Fetch("unavailable", why=reason)
    return OBSERVED, Fetch("mem", ops=(Op("sp", offset=found[0]),), size=8)


OBSERVED = ValueSpec("observed", "float", 8, 0, "float64", "v")


def held_v(b: Binary, function: str, insns: tuple[sites.Insn, ...], store: int, reg: str
           ) -> bool:
    """Whether ``reg`` held the function's parameter v when the instruction at ``store``
    ran: DWARF's location list says so; without one (a stripped Go build's metadata),
    the code: nothing from the entry to there wrote it (v's register under Go's ABI)."""
    if b.dwarf.from_metadata:
        return sites.untouched_until(insns, reg, store)
    _sym, die = b.functions.find(function)
    for child in die.iter_children():
        if child.tag == "DW_TAG_formal_parameter" and die_name(child) == "v":
            expr = b.functions.locations.expression_at(child, store)
            try:
                loc = b.functions.locations.pieces(expr or [], 8, None, at_entry=True)
            except Unavailable:
                return False
            return loc == (Piece(8, reg=reg),)
    return False


def inlined(b: Binary, fn: str) -> tuple[Any, ...]:
    """The copies of ``fn`` inlined into other functions (none where DWARF cannot
    say)."""
    try:
        return tuple(b.functions.inlined(fn))
    except NoopError:
        return ()


class Region(NamedTuple):
    """Where one of a rule's methods runs: the function whose code it is, the address
    ranges of the method in it, whether that is the method's own code or a copy inlined
    into another function, and whether that function is one of the rule's methods."""

    method: str
    function: str
    ranges: list[tuple[int, int]]
    own: bool
    in_rule: bool


def regions(b: Binary, rule: Rule) -> list[Region]:
    """Where ``rule``'s methods run: each method's own code first (with what is inlined
    into it: ``Inc`` holds a copy of ``Add``), then its copies inlined into other
    functions (``AddWithExemplar``'s ``Add``, the Go collector's ``Set``), which the
    program runs as well."""
    names = {f"{PKG}.(*{rule.struct}).{m}" for m in rule.methods}
    own: list[Region] = []
    copies: list[Region] = []
    for method in rule.methods:
        fn = f"{PKG}.(*{rule.struct}).{method}"
        sym = b.functions.symbols.get(fn)
        if sym is None:
            continue
        if sym.size:
            own.append(Region(method, fn, [(sym.address, sym.address + sym.size)], True, True))
        for copy in inlined(b, fn):
            caller = b.function_at(copy.entry)
            if caller is not None:
                copies.append(Region(method, caller, b.dwarf.ranges(copy.die), False,
                                     caller in names))
    return own + copies


def receiver(b: Binary, rule: Rule) -> Any:
    """The type of the receiver of ``rule``'s methods (``*counter``, ...), or None."""
    for method in rule.methods:
        fn = f"{PKG}.(*{rule.struct}).{method}"
        if fn in b.functions.symbols:
            recv = next(iter(b.functions.param_types(fn).values()), None)
            if recv is not None:
                return recv
    return None


def specific(b: Binary, rule: Rule, recv: Any, a: sites.Atomic, fn: str,
             insns: tuple[sites.Insn, ...], address: int) -> list[tuple[ValueSpec, Fetch]]:
    if rule.probe == "counter_int":  # after xadd: src holds valInt's old value
        return [register("before", a.src, "uint", "uint64"),
                field(b, recv, a.base, "valInt", "uint"),
                field(b, recv, a.base, "valBits", "float")]
    if rule.probe == "counter_float":
        return [register("old", "rax", "float", "float64"),
                register("new", a.src, "float", "float64"),
                field(b, recv, a.base, "valInt", "uint")]
    if rule.probe == "gauge_add":
        return [register("old", "rax", "float", "float64"),
                register("new", a.src, "float", "float64")]
    if rule.probe == "gauge_set":
        return [register("new", a.src, "float", "float64"),
                field(b, recv, a.base, "valBits", "float")]
    return [register("before", a.src, "uint", "uint64"),  # countAndHotIdx's old value
            _observed(b, fn, insns, address)]
