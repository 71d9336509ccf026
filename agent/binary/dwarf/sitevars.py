"""The parameters and locals available at a site (a source line's instruction): each
where it is when that instruction is about to run (registers, stack slots through the
frame base or the CFA, pieces), its value when DWARF gives the value itself, or why it
is not there (optimized away, only at other lines, only as its entry value)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from elftools.dwarf.die import DIE

from agent.binary.dwarf.dies import attr, die_name, origin_of
from agent.binary.dwarf.functions import frame_base
from agent.binary.dwarf.locations import Location, Unavailable
from agent.binary.dwarf.source import VAR_TAGS, Site, Var
from agent.errors import NoopError

if TYPE_CHECKING:
    from agent.binary.dwarf.source import Source


def vars_at(source: Source, site: Site) -> list[Var]:
    """The parameters and locals of the site's body and blocks, each where it is
    when the instruction at the site is about to run (or why it is not there)."""
    base = frame_base(site.subprogram)
    rule = source.dwarf.frames.cfa_rule_at(site.address)
    entry = _at_entry(source, site)
    out = []
    for scope in site.chain:
        declared = [c for c in scope.die.iter_children() if c.tag in VAR_TAGS]
        origin = origin_of(scope.die)
        if scope.body and origin is not scope.die:
            # An inlined copy lists only the values it has: the others are gone.
            have = {origin_of(c).offset for c in declared}
            declared += [c for c in origin.iter_children()
                         if c.tag in VAR_TAGS and c.offset not in have]
        for child in declared:
            decl = origin_of(child)
            name = die_name(decl) or die_name(child)
            if not name:
                continue
            tdie = source.dwarf.ref(decl) or source.dwarf.ref(child)
            kind = "local" if decl.tag == "DW_TAG_variable" else (
                "result" if attr(decl, "DW_AT_variable_parameter") else "param")
            size = source.functions.namer.size(tdie) or 0
            constant = None
            if entry is not None and scope.die.offset == site.subprogram.offset:
                # its first instruction: nothing of the body has run
                loc, note = entry.get(name, (None, "not set yet: the function's first "
                                             "instruction runs before any of its code"))
            elif child is decl and scope.body and origin is not scope.die:
                loc, note = None, "optimized away: this copy keeps no location"
            else:
                loc, note, constant = _located(source, child, site, base, rule, size)
            out.append(Var(name, kind, source.functions.namer.name(tdie), size, loc, note,
                           tdie, constant))
    return out


def _at_entry(source: Source, site: Site) -> dict[str, tuple[Location | None, str]] | None:
    """At a function's first instruction, where its parameters are as ``noop vars
    FUNCTION`` places them (the calling convention's registers and stack, where DWARF
    may name frame slots the prologue has not written yet), by name; None elsewhere."""
    low = site.subprogram.attributes.get("DW_AT_low_pc")
    if low is None or low.value != site.address:
        return None
    try:
        fv = source.functions.vars(site.into or site.function)
    except NoopError:
        return None
    if fv.address != site.address:
        return None
    return {v.name: (v.location, v.note) for v in fv.params}


def _located(source: Source, var: DIE, site: Site, frame_base: list[int] | None,
             rule: tuple[str, int] | None, size: int
             ) -> tuple[Location | None, str, int | None]:
    """Where a variable is at the site, or why it is not there; and its value when
    DWARF gives the value itself (a constant)."""
    if "DW_AT_const_value" in var.attributes:
        value = attr(var, "DW_AT_const_value")
        return None, f"always {value!r} (a constant)", \
            value if isinstance(value, int) else None
    reader = source.functions.locations
    expr = reader.expression_at(var, site.address)
    if not expr:
        if "DW_AT_location" not in var.attributes:
            return None, "optimized away: no location anywhere", None
        return None, _elsewhere(source, var, site), None
    constant = _constant(source.dwarf, expr)
    if constant is not None:
        return None, f"the constant {constant} here (DWARF gives the value itself)", \
            constant
    reg, cfa = rule if rule is not None else ("rsp", None)
    try:
        loc = reader.pieces(expr, size, frame_base, at_entry=False, cfa=cfa, cfa_reg=reg)
    except Unavailable as why:
        if "DW_OP_entry_value" in str(why):
            return None, ("not available here: DWARF describes it only as the value "
                          "it had at the function's entry (DW_OP_entry_value)"), None
        return None, f"not available here: {why}", None
    if not all(p.reg is not None or p.stack is not None for p in loc):
        if any(p.reg is not None or p.stack is not None for p in loc):
            return loc, "in part optimized away here", None
        return None, "optimized away here", None
    return loc, "", None


def _elsewhere(source: Source, var: DIE, site: Site) -> str:
    """"not available here", with the lines (of this body) where it is."""
    table = source.lines.table(site.chain[0].die.cu)
    here = set()
    body = site.chain[0]
    for lo, _hi, _e in source.functions.locations.ranges(var):
        if table is None or not body.covers(lo):
            continue
        r = table.row_at(lo)
        if r is not None and r.file == site.file:
            here.add(r.line)
    if not here:
        return "not available here"
    shown = ", ".join(map(str, sorted(here)[:6])) + (", …" if len(here) > 6 else "")
    return f"not available here (it is at line{'s' if len(here) > 1 else ''} {shown})"


def _constant(dwarf: Any, expr: list[int]) -> int | None:
    """The value of a location that is a constant (``DW_OP_lit3``/``DW_OP_constu 0``,
    ``DW_OP_stack_value``), else None."""
    from elftools.dwarf.dwarf_expr import DWARFExprParser

    ops = DWARFExprParser(dwarf.info.structs).parse_expr(expr)
    if len(ops) != 2 or ops[1].op_name != "DW_OP_stack_value":
        return None
    name = ops[0].op_name
    if name.startswith("DW_OP_lit") and name[9:].isdigit():
        return int(name[9:])
    if name.startswith("DW_OP_const") and ops[0].args:
        return int(ops[0].args[0])
    return None
