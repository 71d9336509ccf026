"""Probes at a source line: the instructions that together see every pass through a
line exactly once, and the values read there from the parameters and locals DWARF
places at each.

A pass through line X starts when control reaches X's code from somewhere else. A
line often has several statement addresses (a ``for`` header's init, condition and
post; ``a && b``; a loop header the compiler duplicated), and code of X may be reached
from code of X itself (the post statement jumping back to the condition). Each
statement address S of X (in one body: the function's own code, or one inlined copy;
code inlined into the body counts as its call's line) is classed by the statements
that reach it, walking back over instructions that start none:

- reached only from other lines (or from outside the body, or from nowhere noop
  sees: the function's entry, a landing pad): every hit at S starts a pass, so S is a
  site;
- reached only from X itself: no pass starts there;
- reached from both: the passes are the jumps into S from other lines; each such
  predecessor that leads only to S (a jump, or an instruction falling through to S)
  is a site instead, and when one leads elsewhere too the line is refused with why.

A site is then moved forward, while nothing between changes what it reads and nothing
else jumps in, to the first instruction the kernel emulates rather than
single-steps (``sites.handling``); at the function's entry it is the entry probe's
site (a Go stack check's ``jbe``, whose restarts are dropped).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from agent.binary import sites
from agent.binary.dwarf import sitevars
from agent.binary.dwarf import source as src
from agent.binary.dwarf.locations import Piece
from agent.config.model import Probe
from agent.errors import NoopError, nearest
from agent.plan import callers
from agent.plan.binary import Binary
from agent.plan.fetches import Fetch
from agent.plan.flow import Flow
from agent.plan.model import Site, ValueSpec
from agent.plan.placement.entry import entry_site
from agent.plan.placement.reads import registers
from agent.plan.selectors.places import SelectError

_MAX_MOVE = 16  # instructions a site may move forward to reach an emulated one


class LineError(NoopError):
    """A line that cannot be probed, or a value that cannot be read there."""


@dataclass(frozen=True, slots=True, eq=False)
class Chosen:
    """An instruction to probe for a body's line, and why."""

    address: int
    why: str
    site: src.Site  # where its values are looked up
    flow: Flow  # the control flow of the function holding it
    # Counted at a jump into the line (``address``) rather than at the statement
    # (``site``): the values are the statement's when the jump changes none of them,
    # else what DWARF says at the jump itself.
    before: src.Site | None = None


def line_sites(b: Binary, probe: Probe) -> tuple[tuple[ValueSpec, ...], list[Site]]:
    """The value specs and sites of a line probe; LineError (or SelectError) saying
    why when the line cannot be probed or a value read."""
    assert probe.line is not None
    if b.dwarf.from_metadata:
        raise LineError(f"{probe.line}: this stripped Go binary's line table (its pclntab) "
                        "marks no statements, so noop cannot tell where a pass through a "
                        "line starts (noop lines shows its lines all the same)",
                        "give the binary's debug info (debuginfo: in the target, or an "
                        "unstripped build)")
    source = src.Source(b.functions)
    specs: tuple[ValueSpec, ...] | None = None
    out: list[Site] = []
    for chosen in pass_sites(b, probe.line, source):
        got, fetches = _counted(b, source, probe, chosen)
        if specs is not None and got != specs:
            raise LineError(f"{probe.line}: the values have other types at "
                            f"{chosen.address:#x} than at {out[0].address:#x}",
                            "read values whose type is the same in every copy")
        specs = got
        out.append(_emulated(b, source, probe, chosen, got, fetches))
    if specs is None:  # every statement of the line is reached from the line itself
        raise LineError(f"{probe.line}: no pass through the line starts at a statement "
                        "of it that noop can tell", "probe a line before or after it")
    return specs, out


def pass_sites(b: Binary, where: str, source: src.Source | None = None) -> list[Chosen]:
    """The instructions that see each pass through the line ``where`` once, in every
    body holding its code, each with the site its values are read at (what ``noop vars
    FILE:LINE`` shows); LineError saying why when no instruction can."""
    source = source or src.Source(b.functions)
    by_body: dict[int, list[src.Site]] = {}
    for s in source.sites(where):
        by_body.setdefault(s.chain[0].die.offset, []).append(s)
    return [c for group in by_body.values() for c in _passes(b, source, group)]


def counted_sites(b: Binary, where: str, source: src.Source
                  ) -> tuple[list[tuple[int, src.Site, str]], str]:
    """Where a line probe on ``where`` counts passes, for ``noop vars FILE:LINE``: each
    instruction, the site whose values it reads (the statement's, through an
    instruction that changes no value: a jump; else its own), and why; or none and why
    the line is refused."""
    try:
        chosen = pass_sites(b, where, source)
    except LineError as exc:
        return [], exc.message
    return [(c.address, c.site if c.before is None or not _changes(c.flow.at[c.address])
             else c.before, c.why) for c in chosen], ""


# -- which instructions see each pass once ----------------------------------------------

def _passes(b: Binary, source: src.Source, group: list[src.Site]) -> list[Chosen]:
    """The instructions of one body that see each pass through the line of ``group``
    (its statement sites in that body) once."""
    flow = Flow(b, source, group[0])
    x = (group[0].file, group[0].line)
    where = f"{x[0].rsplit('/', 1)[-1]}:{x[1]}"
    if not flow.insns:
        raise LineError(f"{where}: its code is in no function noop can read",
                        "probe the function holding it")
    copy = f" (inlined into {b.functions.display_name(flow.holder)})" \
        if group[0].into else ""
    out: list[Chosen] = []
    candidates = sorted(a for a, lines in flow.stmts.items() if x in lines and a in flow.at)
    for s in candidates:
        off = f"+{s - flow.entry:#x}"
        ways: list[int | None] = list(flow.preds[s])
        if s == flow.entry or not ways:
            ways.append(None)  # called, or reached in a way noop does not see
        new = [p for p in ways if flow.starts_pass(s, p, x)]
        if not new:
            continue  # within a pass
        if len(new) == len(ways):
            out.append(Chosen(s, f"line {where}{copy}: the statement at {off} "
                              f"({flow.at[s].mnemonic}) starts a pass each time it runs",
                              source.site_in(flow.body, s, flow.sub), flow))
            continue
        for p in new:
            if p is None:
                raise LineError(f"{where}: the function's first instruction is also reached "
                                "from within a pass through the line: noop cannot tell a new "
                                "call from a jump back", "probe another line")
            if flow.succs[p] != (s,):
                raise LineError(f"{where}: the statement at {off} starts a pass when reached "
                                f"from +{p - flow.entry:#x}, but not when reached otherwise, "
                                f"and the jump at +{p - flow.entry:#x} also goes elsewhere: no "
                                "instruction sees each pass once",
                                "probe a line inside the loop, or before it")
            origin = flow.line(p)
            from_line = f"line {origin[1]}" if origin else "outside the copy"
            out.append(Chosen(p, f"line {where}{copy}: the statement at {off} starts a pass "
                              f"only when reached from +{p - flow.entry:#x} "
                              f"({flow.at[p].mnemonic}, in {from_line}), which leads only "
                              "to it, so the pass is counted there",
                              source.site_in(flow.body, s, flow.sub), flow,
                              source.site_in(flow.body, p, flow.sub)
                              if origin is not None else _outside(group[0], p)))
    return out


def _outside(site: src.Site, address: int) -> src.Site:
    """A site outside the body: none of its values can be read there."""
    return replace(site, address=address, chain=())


# -- the values at a site ---------------------------------------------------------------

def _values(b: Binary, source: src.Source, probe: Probe, site: src.Site
            ) -> tuple[tuple[ValueSpec, ...], tuple[Fetch, ...]]:
    """Each value's spec and its fetch at ``site``, from the variables there."""
    variables = {v.name: v for v in sitevars.vars_at(source, site)} if site.chain else {}
    specs, fetches = [], []
    for v in probe.values:
        if v.builtin is not None:
            spec, fetch = callers.builtin(v)
            specs.append(spec)
            fetches.append(fetch)
            continue
        steps = v.steps
        root = str(steps[0][1])
        var = variables.get(root)
        line = f"{site.file.rsplit('/', 1)[-1]}:{site.line}"
        if var is None:
            near = nearest(root, list(variables), 1)
            raise LineError(f"{v.name}: no parameter or local {root!r} is in scope at "
                            f"{line} ({site.address:#x}), or the compiler kept nothing of it",
                            (f"did you mean {near[0]!r}? " if near else "") + "in scope: "
                            + (", ".join(variables) or "none")
                            + f"; see noop vars BINARY {probe.line}")
        constant = var.constant if len(steps) == 1 else None
        try:
            sel = b.walker.select(steps, var.location if constant is None else
                                  (Piece(var.size or 8, reg="rax"),), var.tdie, v.decode,
                                  v.max, var.note)
            if constant is not None:  # the value the code holds as a constant here
                sel = replace(sel, fetch=Fetch("const", offset=constant & 2**64 - 1,
                                               size=sel.fetch.size,
                                               why=f"the constant {constant} here"))
        except SelectError as exc:
            if var.location is None:
                raise LineError(f"{v.name}: {root} at {line} ({site.address:#x}): "
                                f"{var.note}", "read it at a line where it is available "
                                f"(noop vars BINARY {probe.line}), or drop it") from None
            raise LineError(f"{v.name}: {exc.message}", exc.hint) from None
        if sel.fetch.kind == "unavailable":
            raise LineError(f"{v.name}: {root} at {line} ({site.address:#x}): "
                            f"{var.note or sel.fetch.why or 'not available'}",
                            f"read it at a line where it is available (noop vars BINARY "
                            f"{probe.line}), or drop it")
        specs.append(ValueSpec(v.name, sel.decode, sel.size, sel.cap, sel.type, v.selector,
                               sel.names, sel.other))
        fetches.append(sel.fetch)
    return tuple(specs), tuple(fetches)


def _counted(b: Binary, source: src.Source, probe: Probe, chosen: Chosen
             ) -> tuple[tuple[ValueSpec, ...], tuple[Fetch, ...]]:
    """The values at ``chosen``: where a pass is counted at the jump (or the one
    instruction falling through) into the statement, the statement's values when that
    instruction changes none of them (what ``noop vars FILE:LINE`` shows there), else
    what DWARF places at the instruction itself."""
    if chosen.before is None:
        return _values(b, source, probe, chosen.site)
    insn = chosen.flow.at[chosen.address]
    try:
        got, fetches = _values(b, source, probe, chosen.site)
    except (LineError, SelectError):
        return _values(b, source, probe, chosen.before)
    touched = _changes(insn, registers(fetches) | {_sp(b)})
    return _values(b, source, probe, chosen.before) if touched else (got, fetches)


def _plain(fetches: tuple[Fetch, ...]) -> tuple[Fetch, ...]:
    return tuple(replace(f, why="") for f in fetches)


def _emulated(b: Binary, source: src.Source, probe: Probe, chosen: Chosen,
              specs: tuple[ValueSpec, ...], fetches: tuple[Fetch, ...]) -> Site:
    """The site for ``chosen``: moved forward to an instruction the kernel emulates
    when one follows with nothing between that changes the values or jumps in."""
    flow = chosen.flow
    function = chosen.site.function or flow.holder
    if chosen.address == flow.entry:
        entry = entry_site(b, flow.holder, fetches)
        return replace(entry, function=function, why=f"{chosen.why}; " + entry.why)
    insns = flow.insns
    n = next(k for k, i in enumerate(insns) if i.address == chosen.address)
    first = insns[n]
    how = b.isa.handling_at(insns, n)
    if how == sites.REFUSED:
        raise LineError(f"{probe.line}: the kernel cannot put a uprobe on the instruction "
                        f"at {first.address:#x} ({first.mnemonic})", "probe another line")
    regs = registers(fetches) | {_sp(b)}
    at, got = first, fetches
    for k, (prev, i) in enumerate(zip(insns[n:n + _MAX_MOVE], insns[n + 1:n + 1 + _MAX_MOVE],
                                      strict=False), start=n + 1):
        if how == sites.EMULATED:
            break
        if prev.kind != sites.NEXT or _changes(prev, regs) or \
                flow.preds[i.address] != [prev.address]:
            break
        if b.isa.handling_at(insns, k) != sites.EMULATED:
            continue
        later = source.site_in(chosen.site.chain[0], i.address, chosen.site.subprogram) \
            if chosen.site.chain and chosen.site.chain[0].covers(i.address) else None
        if later is None:
            break
        try:
            moved_specs, moved = _values(b, source, probe, later)
        except (LineError, SelectError):
            break
        if moved_specs != specs or _plain(moved) != _plain(fetches):
            break
        at, got, how = i, moved, sites.EMULATED
    why = chosen.why + (f"; probed {at.address - first.address} bytes on, at "
                        f"{at.address:#x} ({at.mnemonic}, emulated): nothing between "
                        "changes the values or jumps in" if at is not first else
                        f" ({how})")
    return Site(function, at.address, b.elf.file_offset(at.address), why, got,
                handling=how)


def _changes(i: sites.Insn, regs: set[str] | None = None) -> bool:
    """Whether running ``i`` may change a value read from ``regs`` (None: from any
    register but the program counter) or from memory: a call, push or pop, a store, a
    register written."""
    if i.kind == sites.CALL or i.mnemonic in ("push", "pop") or i.stores:
        return True
    written = set(i.writes) - {"rip", "pc"}
    return bool(written if regs is None else written & regs)


def _sp(b: Binary) -> str:
    """The name of the binary's stack pointer (rsp, sp)."""
    return b.arch.dwarf_regs[b.arch.sp]
