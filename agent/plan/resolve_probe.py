"""One probe's plan on one binary: the functions it names or its pattern matches (a
match's problems folded by kind), the sites of each (its entry's, its exits', its
inlined copies', an async fn's first poll), each proven, with its values' fetches
there, its metrics and what it leaves unseen.
"""

from __future__ import annotations

import fnmatch
import re
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import NamedTuple

from elftools.dwarf.die import DIE

from agent.binary import proof
from agent.binary.dwarf.functions import FunctionVars
from agent.config.model import MAX_SITES, Probe
from agent.config.reader import Mark, Problem
from agent.errors import NoopError
from agent.plan import callers, elsewhere, lines
from agent.plan.binary import Binary
from agent.plan.fetches import Fetch, Op
from agent.plan.model import ProbePlan, Site, ValueSpec
from agent.plan.placement.entry import entry_site, entry_sites
from agent.plan.placement.exits import exit_sites
from agent.plan.resolve_async import (
    async_body,
    async_exit,
    first_poll,
    first_state,
    gated_sites,
)
from agent.plan.resolve_values import Collector, metric_plans, split_root, value_of
from agent.plan.selectors.places import SelectError
from agent.plan.selectors.rust import Future


@dataclass
class _Gathered:
    """What a probe's functions gave so far: the values' specs (every site's the same),
    its sites, the pointers an exit probe keeps, and each function's inlined calls
    that are not probed, with why."""

    specs: tuple[ValueSpec, ...] | None = None
    sites: list[Site] = field(default_factory=list)
    roots: int = 0
    missed: dict[str, Counter[str]] = field(default_factory=dict)


def probe_plan(b: Binary, probe: Probe, out: Collector, xmm_readable: bool = False
               ) -> ProbePlan | None:
    """``probe``'s plan on ``b``, or None with its problems in ``out``: its line's sites,
    or each function's it names or matches (a match's problems folded by kind)."""
    got = _Gathered()
    fns: list[str] = []
    bare: list[str] = []
    if probe.line is not None:
        try:
            got.specs, got.sites = lines.line_sites(b, probe)
        except (NoopError, SelectError) as exc:
            out.add(probe.function_mark, exc.message, exc.hint, probe.name)
            return None
    else:
        fns, bare = _functions(b, probe, out)
    whole = out
    unprobed = out  # a function's sites that cannot be probed: for a pattern, a warning
    if probe.match is not None:  # problems of each matched function, folded below
        out, unprobed = Collector([]), Collector([])
    problems: list[tuple[str, Problem]] = []  # (the matched function, its problem)
    skipped: list[tuple[str, Problem]] = []
    for fn in fns:
        _function(b, probe, fn, got, out, xmm_readable, unprobed)
        problems += [(fn, p) for p in out.problems[len(problems):]]
        skipped += [(fn, p) for p in unprobed.problems[len(skipped):]]
    left: tuple[str, ...] = ()
    if out is not whole:
        whole.problems += _folded(problems, probe.match or "")
        folded = _folded(skipped, probe.match or "")
        if got.sites:  # a pattern probes what it can, and says what it left out
            left = tuple(f"left out: {p.message}" + (f" ({p.hint})" if p.hint else "")
                         for p in folded)
        else:
            whole.problems += folded
    return _planned(b, probe, got, bare, whole, left)


def _functions(b: Binary, probe: Probe, out: Collector) -> tuple[list[str], list[str]]:
    """The functions a probe names, and those its pattern matched that have no DWARF
    entry (assembly, cgo stubs), left out."""
    if probe.function is not None:
        try:
            b.functions.find(probe.function)
        except NoopError as exc:  # not found, or found without DWARF
            out.add(probe.function_mark, exc.message, exc.hint, probe.name)
            return [], []
        return [probe.function, *b.functions.copies(probe.function)], []
    pattern = probe.match or ""
    shown = b.functions.display_name
    names = [*(n for n in b.functions.symbols if shown(n) == n),  # not mangled aliases
             *b.functions.inlined_names()]
    found = sorted({n for n in names if fnmatch.fnmatchcase(n, pattern)})
    limit = probe.max_sites or MAX_SITES
    if len(found) > limit:
        out.add(probe.function_mark, f"match {pattern!r} matches {len(found)} functions, "
                f"more than max_sites ({limit})", "narrow the pattern, or raise max_sites: "
                "if every one is wanted: each is a uprobe its service pays for on every "
                "call", probe.name)
        return [], []
    bare = [n for n in found if (sym := b.functions.symbols.get(n)) is not None
            and b.dwarf.subprogram_at(sym.address) is None]
    found = [n for n in found if n not in bare]
    found += [c for n in found for c in b.functions.copies(n)]
    if not found:
        out.add(probe.function_mark, f"no function matches {pattern!r}" + (
                f" with debug info ({len(bare)} without: assembly or C without -g)"
                if bare else ""),
                "patterns match whole names; '(' '*' '[' need [(] [*] [[] to be literal",
                probe.name)
    return found, bare


def _folded(problems: list[tuple[str, Problem]], pattern: str) -> list[Problem]:
    """A match probe's problems, one line for each that recurs over matched functions
    (with how many, and the first of them), the others as they are."""
    groups: dict[tuple[Mark, str], list[tuple[str, Problem]]] = {}
    for fn, p in problems:  # alike but for the function's name and numbers
        shape = re.sub(r"\d+", "#", p.message.replace(fn, "\0") if fn else p.message)
        groups.setdefault((p.mark, shape), []).append((fn, p))
    out = []
    for got in groups.values():
        fn, first = got[0]
        if len(got) == 1 or not fn:
            out += [p for _f, p in got]
            continue
        out.append(replace(first, message=first.message.replace(fn, "<function>") +
                           f", for {len(got)} functions matched by {pattern!r} "
                           f"(the first: {fn})"))
    return out


def _function(b: Binary, user: Probe, fn: str, got: _Gathered, out: Collector,
              xmm_readable: bool, unprobed: Collector) -> None:
    """The sites of ``user`` in function ``fn`` (its entry's or its exits', an async fn's
    first poll, its inlined copies), added to ``got``; the problems of its values to
    ``out``, those of its sites (the function cannot be probed) to ``unprobed``."""
    probe = user
    body = async_body(b, fn)
    future: Future | None = None
    if body is not None and b.arch.name != "x86-64":
        raise NoopError(f"{fn} is an async fn: noop follows a future's polls on x86-64 "
                        f"only for now, not on {b.arch.name}",
                        "probe a plain function it calls")
    if body is not None:
        polled = first_poll(b, fn, body, user, out)
        if polled is None:
            return
        (probe, future), fn = polled, body
    read = _read(b, probe, fn, got, out)
    if read is None:
        return
    found = _sites(b, probe, fn, read, got, unprobed, xmm_readable, body is not None)
    if found is None:
        return
    these = read.specs
    if found and future is not None:
        found = gated_sites(found, first_state(these[-1]))
        these = these[:-1]
        if probe.at == "exit":
            found = async_exit(b, fn, user, future, found, out)
        if got.specs is not None and these != got.specs:
            return
    if found:
        got.specs = these
        got.sites += found
    elif b.functions.only_inlined(fn):
        why = got.missed.pop(fn, Counter())
        unprobed.add(probe.function_mark, f"{fn} exists only inlined, and no copy can be "
                "probed: " + ("; ".join(f"{r} ({n})" for r, n in why.items())
                              or "no copy has code"),
                "probe the functions it is inlined into", probe.name)


class _Values(NamedTuple):
    """What a function gives a probe's values: its variables, their types, and each
    value's spec and fetch."""

    fv: FunctionVars
    types: dict[str, DIE | None]
    specs: tuple[ValueSpec, ...]
    fetches: tuple[Fetch, ...]


def _read(b: Binary, probe: Probe, fn: str, got: _Gathered, out: Collector) -> _Values | None:
    """``probe``'s values in function ``fn``; None, with the problems in ``out``, when
    one cannot be read or their types are not those of the functions before it."""
    try:
        fv = b.functions.vars(fn)
        types = b.functions.param_types(fn)
    except NoopError as exc:
        out.add(probe.function_mark, f"{fn}: {exc.message}", exc.hint, probe.name)
        return None
    pairs = [value_of(b, fv, types, v, out, probe) for v in probe.values]
    if any(p is None for p in pairs):
        return None
    read = [p for p in pairs if p is not None]
    these = tuple(p[0] for p in read)
    if got.specs is not None and these != got.specs:
        out.add(probe.function_mark, f"{fn}: the values have other types here than in "
                f"{got.sites[0].function}", "narrow the pattern so the values agree, or "
                "name one copy by its symbol", probe.name)
        return None
    return _Values(fv, types, these, tuple(p[1] for p in read))


def _sites(b: Binary, probe: Probe, fn: str, read: _Values, got: _Gathered, out: Collector,
           xmm_readable: bool, async_fn: bool) -> list[Site] | None:
    """``probe``'s sites in ``fn``: its exits' (an exit probe on a function of its own;
    the pointers kept and the inlined calls not seen go to ``got``) or its entry's
    (``async_fn``: ``fn`` is an async fn's body, whose sites are gated on its future's
    state); None with the problem in ``out``."""
    fv, types, these, fetches = read
    try:
        if probe.at == "exit" and not async_fn and b.functions.only_inlined(fn):
            raise NoopError(f"{fn} exists only inlined ({len(b.functions.inlined(fn))} "
                            "copies): a copy has no return of its own to probe",
                            "probe its entry, or an exit of the function it is inlined "
                            "into")
        if probe.at == "exit" and not async_fn:
            found, n = _exit(b, fn, fv, probe, fetches, out)
            got.roots = max(got.roots, n)
            copies = len(b.functions.inlined(fn))
            if copies:
                got.missed[fn] = Counter({"an exit probe sees only calls of the function's "
                                          "own code": copies})
        else:
            found, why = entry_sites(
                b, fn, probe, these, fetches, fv, types, xmm_readable,
                gated=first_state(these[-1]) if async_fn else ())
            if why:
                got.missed[fn] = why
    except NoopError as exc:
        out.add(probe.function_mark, exc.message, exc.hint, probe.name)
        return None
    return found


def _planned(b: Binary, probe: Probe, got: _Gathered, bare: list[str], out: Collector,
             left: tuple[str, ...] = ()) -> ProbePlan | None:
    """The plan of what ``probe``'s functions gave: its sites within its limit, each
    proven, with ``$caller`` read there, its metrics and what it leaves unseen (``left``:
    the matched functions it could not probe, and why)."""
    limit = probe.max_sites or MAX_SITES
    if probe.match is not None and len(got.sites) > limit:
        out.add(probe.function_mark, f"match {probe.match!r} resolves to {len(got.sites)} "
                f"sites, more than max_sites ({limit})", "narrow the pattern, or raise "
                "max_sites: if every one is wanted", probe.name)
        return None
    specs = got.specs
    if not got.sites or specs is None:
        return None
    sites = callers.at_sites(b, probe, got.sites)
    try:
        sites = [b.prove(s) for s in sites]
    except proof.Unprovable as exc:
        out.add(probe.function_mark, f"{exc.message}: noop puts a uprobe only where it "
                "can show that an instruction starts", "report it, with the binary",
                probe.name)
        return None
    for v, message, hint in elsewhere.never_read(b, probe, sites):
        out.add(v.mark, message, hint, probe.name)
    wants_goid = any(v.builtin == "goid" for v in probe.values)
    if wants_goid and b.goid_offset is None:
        out.add(next(v.mark for v in probe.values if v.builtin == "goid"),
                "$goid needs a Go program built with the register ABI (Go >= 1.17)",
                "drop $goid for this target", probe.name)
    if probe.at == "exit" and b.dwarf.language == "go" and b.stack_hi_offset is None:
        out.add(probe.mark, "exit probes on Go need the register ABI (Go >= 1.17): noop "
                "pairs a call's entry and return by the goroutine in r14",
                "probe the entry instead", probe.name)
    metrics, agg = metric_plans(probe, specs, out)
    unseen = tuple(f"{sum(why.values())} inlined call site{'s' * (sum(why.values()) != 1)} "
                   f"of {fn} not probed: " + "; ".join(f"{r} ({n})" for r, n in why.items())
                   for fn, why in got.missed.items())
    if bare:
        unseen += (f"{len(bare)} function{'s' * (len(bare) != 1)} matched by "
                   f"{probe.match!r} have no debug info (assembly, or C built without "
                   f"-g) and are left out: {', '.join(bare[:3])}{', ...' * (len(bare) > 3)}",)
    unseen += left
    return ProbePlan(probe.name, probe.target, specs, tuple(sites), wants_goid, metrics, agg,
                     probe.at, got.roots, unseen)


def _exit(b: Binary, fn: str, fv: FunctionVars, probe: Probe, fetches: tuple[Fetch, ...],
          out: Collector) -> tuple[list[Site], int]:
    """An exit probe's call site (what the entry keeps) and its return sites."""
    call: list[Fetch] = []
    ret: list[Fetch] = []
    tail: list[Fetch] = []
    roots: dict[tuple[Op, ...], int] = {}
    params = {p.name for p in fv.params}
    for i, (v, f) in enumerate(zip(probe.values, fetches, strict=True)):
        result = v.builtin is None and v.root not in params
        if result or (v.builtin is not None and v.at != "entry"):
            call.append(Fetch("later"))
            ret.append(f)
            tail.append(f if not result else Fetch(
                "unavailable", why="the call leaves by a tail jump: its results are the "
                "callee's"))
            continue
        split = split_root(f) if v.builtin is None and v.at != "entry" else None
        if split is None:
            call.append(f)
            ret.append(Fetch("saved", slot=i))
            tail.append(ret[-1])
            continue
        find, rest = split
        k = roots.setdefault(find, len(roots))
        call.append(Fetch("root", find, slot=k))
        ret.append(replace(f, ops=(Op("root", index=k), *rest)))
        tail.append(ret[-1])
    entry = entry_site(b, fn, tuple(call))
    exits = exit_sites(b, fn, tuple(ret), tuple(tail))
    if not exits:
        raise NoopError(f"{fn} has no RET and no jump out of it: it never returns",
                        "probe its entry instead")
    return [replace(entry, role="call", why="the call's entry, kept for its returns: "
                    + entry.why), *exits], len(roots)
