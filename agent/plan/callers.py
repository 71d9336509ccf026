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
        return Fetch("unavailable", why=f"on {b.arch.name} noop does not find the return "
                     "address yet (the link register, or where the function saved it)")
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
