"""``$caller`` and ``$caller_line`` at each site: the return address, read at the site's
canonical frame address - 8 (at a function's entry the top of the stack; later in it
wherever the call-frame information puts the frame: C and Rust release builds keep no
frame pointer, Go's comes from its .debug_frame or, stripped, its pclntab's SP
deltas), or, at a site in an inlined copy, the copy's own call (a token the output
resolves: ``agent.binary.callers``). The value stays an address in the kernel (an
in-kernel aggregate keys on it); names are resolved when it is printed or scraped.
"""

from __future__ import annotations

from dataclasses import replace

from agent.binary.callers import INLINED
from agent.binary.dwarf.dies import origin_of
from agent.binary.dwarf.lines import Lines
from agent.binary.sites import CALL, JUMP, RETURN, STOP
from agent.config.model import Probe, Value
from agent.plan.binary import Binary
from agent.plan.fetches import Decode, Fetch, Op
from agent.plan.model import ProbePlan, Site, ValueSpec

BUILTINS = ("caller", "caller_line")
RESOLVED = (*BUILTINS, "gotype")  # values named through the binary when shown


def builtin(v: Value) -> tuple[ValueSpec, Fetch]:
    """A built-in value's spec and its fetch before the sites are known: ``$caller``
    and ``$caller_line`` are read at each site (``at_sites``), named through the binary
    ``bind`` gives them; the others are the BPF program's own."""
    decode: Decode = "caller" if v.builtin == "caller" else \
        "caller_line" if v.builtin == "caller_line" else "uint"
    return (ValueSpec(v.name, decode, 8, 0, "builtin", v.selector),
            Fetch("builtin", builtin=v.builtin or ""))


def bind(plan: ProbePlan, binary: str, build: str, debug: str | None) -> ProbePlan:
    """``plan`` with its caller values resolved through ``binary`` (the file as this
    run reads it: a plan kept from another run may name another copy), as the build
    ``build`` (its build-id) has them, with ``debug`` its debug file when one is named."""
    if not any(v.decode in RESOLVED for v in plan.values):
        return plan
    return replace(plan, values=tuple(replace(v, binary=binary, build=build, debug=debug or "")
                                      if v.decode in RESOLVED else v for v in plan.values))


def at_sites(b: Binary, probe: Probe, sites: list[Site]) -> list[Site]:
    """``sites`` with each ``$caller``/``$caller_line`` value read as it is there."""
    wanted = [i for i, v in enumerate(probe.values) if v.builtin in BUILTINS]
    if not wanted:
        return sites
    lines = Lines(b.dwarf)
    out = []
    for s in sites:
        fetches = list(s.fetches)
        for i in wanted:
            if fetches[i].kind == "builtin":
                fetches[i] = _fetch(b, lines, s)
        out.append(replace(s, fetches=tuple(fetches)))
    return out


def _fetch(b: Binary, lines: Lines, site: Site) -> Fetch:
    copy = _inlined_copy(b, lines, site)
    if copy is not None:
        return Fetch("const", offset=INLINED | copy,
                     why="inlined: the caller is the function the copy is in")
    if b.arch.name != "x86-64":  # the return address in the link register, or saved
        return _linked(b, site)
    rule = b.dwarf.frames.cfa_rule_at(site.address)
    holder = b.function_at(site.address)
    if rule is None and holder is not None and b.start_of(holder) == site.address:
        rule = ("rsp", 8)  # a function's first instruction: the return address on top
    if rule is None:
        return Fetch("unavailable", why="no call-frame information describes the frame "
                     f"at {site.address:#x}, so the return address cannot be found")
    reg, offset = rule
    ops = (Op("sp", offset=0),) if reg == "rsp" else (Op("reg", reg=reg),)
    return Fetch("caller", ops, offset=offset - 8, size=8, base=site.address)


def _inlined_copy(b: Binary, lines: Lines, site: Site) -> int | None:
    """The DIE offset of the inlined copy of the probed function holding the site,
    when it is one (not the function's own code)."""
    sub = b.dwarf.subprogram_holding(site.address)
    if sub is None:
        return None
    bodies = [s for s in lines.scopes(sub).chain(site.address) if s.body]
    for scope in reversed(bodies):
        if b.functions.function_name(origin_of(scope.die)) == site.function:
            return scope.die.offset if scope.die.tag == "DW_TAG_inlined_subroutine" \
                else None
    inner = bodies[-1]
    return inner.die.offset if inner.die.tag == "DW_TAG_inlined_subroutine" else None


def _linked(b: Binary, site: Site) -> Fetch:
    """On an architecture whose calls leave the return address in a register (arm64's
    link register, x30): there while the function has not saved it, else in its slot
    below the frame's canonical address, as the call-frame information says at the
    site; without call-frame information (a stripped Go build), in the register at a
    ``ret`` or at a site of the function's straight-line start (``_untouched``)."""
    where = b.dwarf.frames.return_address_at(site.address)
    if where is None and _untouched(b, site):
        where = ("reg", b.arch.return_register)
    if where is None:
        return Fetch("unavailable", why="no call-frame information describes where the "
                     f"return address is at {site.address:#x}")
    if where[0] == "reg":
        reg = b.arch.dwarf_regs.get(where[1])
        if reg is None or reg not in b.arch.c_regs:
            return Fetch("unavailable", why=f"the return address is in DWARF register "
                         f"{where[1]}, which a uprobe does not read")
        return Fetch("caller", size=8, regs=(reg,), base=site.address)
    rule = b.dwarf.frames.cfa_rule_at(site.address)
    if rule is None:
        return Fetch("unavailable", why="no call-frame information describes the frame "
                     f"at {site.address:#x}, so the return address cannot be found")
    reg, offset = rule
    ops = (Op("sp", offset=0),) if reg == b.arch.dwarf_regs[b.arch.sp] else \
        (Op("reg", reg=reg),)
    return Fetch("caller", ops, offset=offset + where[1], size=8, base=site.address)


def _untouched(b: Binary, site: Site) -> bool:
    """Whether the link register holds the return address at ``site``: a ``ret``
    through it (which returns there), or a site in the straight line the function
    starts with (its stack check) that no instruction before it writes the register
    in and no later one branches into."""
    holder = b.function_at(site.address)
    if holder is None:
        return False
    start = b.start_of(holder)
    insns = b.instructions(holder)
    link = b.arch.dwarf_regs[b.arch.return_register]
    here = next((i for i in insns if i.address == site.address), None)
    if here is not None and here.kind == RETURN:
        return here.mnemonic == "ret" and here.operands in ((), (("reg", link),))
    before = [i for i in insns if start <= i.address < site.address]
    if len(before) > 16 or any(link in i.writes or i.kind in (CALL, JUMP, RETURN, STOP)
                               for i in before):
        return False
    return not any(i.target is not None and start < i.target <= site.address
                   for i in insns if i.address >= site.address)
