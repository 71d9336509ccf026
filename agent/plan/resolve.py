"""Resolve a spec against its binaries: functions to attach sites, selectors to fetches.

Depends only on the spec and the binaries' bytes. Every problem of the spec is
collected and raised at once as a SpecError carrying file:line:col and the probe.
"""

from __future__ import annotations

import fnmatch
import gc
import hashlib
import json
import os
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from elftools.dwarf.die import DIE

from agent import cache
from agent.binary import debuginfo, proof
from agent.binary.dwarf.damage import damage_said
from agent.binary.dwarf.dies import die_name, origin_of
from agent.binary.dwarf.functions import FunctionVars
from agent.binary.dwarf.locations import Location
from agent.binary.elf import ElfFile
from agent.binary.gometa.scope import Scope, of_pattern
from agent.config.model import (
    DEFAULT_MAX,
    MAX_SITES,
    Probe,
    Spec,
    Step,
    Target,
    Value,
)
from agent.config.reader import Mark, Problem, SpecError
from agent.config.selector import NotRunning, Selector, binary_path, selector_of, through_proc
from agent.errors import NoopError, nearest
from agent.plan import callers, elsewhere, lines, placement, plain
from agent.plan.binary import Binary
from agent.plan.keys import KEY_LIMIT, bound, key_size
from agent.plan.model import (
    Aggregate,
    Column,
    ColumnOp,
    Fetch,
    MetricPlan,
    Op,
    Plan,
    ProbePlan,
    Site,
    TargetPlan,
    ValueSpec,
    metric_kind,
    where_of,
)
from agent.plan.selectors import FIRST_POLL, Future, SelectError


@dataclass
class _Collector:
    problems: list[Problem]

    def add(self, mark: Mark, message: str, hint: str = "", probe: str = "") -> None:
        self.problems.append(Problem(mark, message, hint, probe))


# Where a target's program is read from: its file, and the other files (in other
# containers) of the same build; NotRunning when nothing runs it. Finding processes is
# agent.live's (discover.Locator): resolving reads files alone.
Where = Callable[[Spec, Target], tuple[str, tuple[str, ...]]]


def on_host(spec: Spec, t: Target) -> tuple[str, tuple[str, ...]]:
    """A target named by a path, as that file on this host (no process is looked at)."""
    selector = selector_of(spec, t)
    if selector.path is not None and os.path.lexists(selector.path):
        return selector.path, ()
    raise NotRunning(f"no such file here: {selector.describe()}",
                     "check the path, or start the program (noop run finds processes)",
                     selector)


def resolve(spec: Spec, xmm_readable: bool = False, wait: bool = False,
            where: Where = on_host) -> Plan:
    """The plan for ``spec``; ``xmm_readable``: the kernel has a helper that reads XMM
    registers, so float arguments are read where they are passed; ``wait``: a target
    no process runs is left out, in ``Plan.waiting``, rather than an error; ``where``:
    the file each target is read from."""
    out = _Collector([])
    targets: list[TargetPlan] = []
    waiting: list[tuple[str, Selector]] = []
    found: list[tuple[int, ProbePlan]] = []  # (the probe's place in the spec, its plan)
    for t in spec.targets:
        try:
            path, also = where(spec, t)
            given = debuginfo.Given(
                binary_path(spec, t.debuginfo) if t.debuginfo else None,
                tuple(sorted({p.function: p.signature for p in spec.probes if p.target ==
                              t.name and p.function and p.signature}.items())))
            elf = ElfFile(path)
            # A stripped copy keeps its build-id: its answers from Go metadata are kept
            # apart from its twin's.
            build_id = debuginfo.cache_id(elf, given=given)
        except NotRunning as exc:
            if wait:
                waiting.append((t.name, exc.selector))
                continue
            out.add(t.mark, f"target {t.name}: {exc.message}", exc.hint)
            continue
        except NoopError as exc:
            out.add(t.mark, f"target {t.name}: {exc.message}", exc.hint)
            continue
        pinned = t.binary is not None and not through_proc(path)
        mine = [(n, p) for n, p in enumerate(spec.probes) if p.target == t.name]
        key = _key(mine, xmm_readable)
        kept = _kept(build_id, key) if build_id and key else None
        if kept is None:
            before = len(out.problems)
            try:
                with damage_said(path):
                    b = Binary(path, _scope([p for _n, p in mine]), given)
                    target = b.plan(t.name, None, (), None, pinned)
                    got = [(n, plan) for n, probe in mine
                           if (plan := _probe(b, probe, out, xmm_readable)) is not None]
            except NoopError as exc:  # the binary's own (the probes' are collected)
                out.add(t.mark, f"target {t.name}: {exc.message}", exc.hint)
                continue
            if build_id and key and len(out.problems) == before:
                cache.put(build_id, "plan", key, plain.dump((target, got)))
            # One binary's DWARF in memory at a time: what a plan needs of it is in
            # the plan, and pyelftools' objects hold each other in cycles only a
            # collection frees (20 targets held at once kept ~400 MB resident).
            del b
            gc.collect()
        else:
            target, got = kept
        here = path if through_proc(path) else str(Path(path).resolve())
        targets.append(replace(target, name=t.name, binary=here, pid=t.pid, also=also,
                               selector=selector_of(spec, t), pinned=pinned))
        found += [(n, callers.bind(plan, here, target.build_id, given.debug))
                  for n, plan in got]
    # What a probe may cost is the spec's word, not the binary's: set after the cache.
    probes = [replace(plan, budget=spec.probes[n].budget if spec.probes[n].budget is not None
                      else spec.budget) for n, plan in sorted(found, key=lambda f: f[0])]
    if out.problems:
        raise SpecError(out.problems)
    return Plan(spec.path, tuple(targets), tuple(probes), tuple(waiting))


# A Go type a selector names: an interface's assertion to it, .(T) or .(*T).
_ASSERTED = re.compile(r"\.\(\s*(\*?[^()\s]+)\s*\)")


def _scope(probes: list[Probe]) -> Scope | None:
    """What of a stripped Go binary's metadata ``probes`` read, for the DWARF made of
    it: the functions they name or their patterns' literal beginnings begin, the types
    their selectors assert and the goroutine's; None (all of it) for a line probe, a
    pattern with no literal beginning, or a ``$caller`` (at an inlined copy its value
    names the copy's entry in the DWARF the plan is made from, which the resolver of
    callers opens whole)."""
    functions: list[str] = []
    types = ["runtime.g"]
    for p in probes:
        within = of_pattern(p.match) if p.match else None
        if p.line is not None or (p.function is None and within is None):
            return None
        functions += [p.function] if p.function is not None else \
            list(within.functions if within is not None else ())
        for v in p.values:
            if v.selector.startswith("$caller"):
                return None
            for name in _ASSERTED.findall(v.selector):
                types += [name, name.lstrip("*")]
    return Scope(tuple(functions), tuple(types))


def _key(probes: list[tuple[int, Probe]], xmm_readable: bool) -> str | None:
    """What a target's probe plans depend on besides its binary's bytes (its build-id)
    and noop's own code (the cache's stamp): the probes as the spec gives them, their
    places in it, and whether the kernel reads XMM registers. None: not keepable."""
    try:
        text = json.dumps([xmm_readable, plain.dump(probes)], sort_keys=True)
    except (ValueError, TypeError):
        return None
    return hashlib.sha256(text.encode()).hexdigest()


def _kept(build_id: str, key: str) -> tuple[TargetPlan, list[tuple[int, ProbePlan]]] | None:
    """A target's plan and its probes' plans as a start with the same spec and build
    made them; None when there are none (or they do not read back)."""
    kept = cache.get(build_id, "plan", key, load=lambda data: plain.load(
        tuple[TargetPlan, tuple[tuple[int, ProbePlan], ...]], data))
    if kept is None:
        return None
    target, got = kept
    return target, list(got)


def _functions(b: Binary, probe: Probe, out: _Collector) -> tuple[list[str], list[str]]:
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


_GATE = "__first_poll"  # the value that gates an async fn's probe: its future's state


def _async_body(b: Binary, fn: str) -> str | None:
    """For an async fn, the function its future's poll runs its body in (the
    constructor ``fn`` only builds the future); None for any other function."""
    if b.dwarf.language != "rust":
        return None
    try:
        _sym, die = b.functions.find(fn)
    except NoopError:
        return None
    made = b.dwarf.ref(origin_of(die))
    if made is None or not (die_name(made) or "").startswith("{async_fn_env#"):
        return None
    for body in (f"{fn}::{{async_fn#0}}", f"{fn}::{{{{closure}}}}", f"{fn}::{{closure#0}}"):
        if body in b.functions.symbols or b.functions.only_inlined(body):
            return body
    return None


def _first_poll(b: Binary, fn: str, body: str, probe: Probe, out: _Collector
                ) -> tuple[Probe, Future] | None:
    """``probe`` on async fn ``fn`` as a probe on its future's first poll, in ``body``:
    each value read from what the future captured (its ``Unresumed`` state), and a
    last value, the state itself, for the sites' gate; with the future."""
    future = b.walker.future(b.functions.param_types(body).get("~p0"))
    if future is None:
        out.add(probe.function_mark, f"{fn} is an async fn, but noop cannot find the "
                f"state of its future in {body}", "probe the function it awaits instead",
                probe.name)
        return None
    args = future.args
    values = []
    for v in probe.values:
        if v.builtin is not None:
            values.append(v)
            continue
        if v.result:
            out.add(v.mark, f"{v.name}: the result of async fn {fn} is not read yet (it "
                    "leaves in the Poll its future's last poll returns)",
                    "count the calls, time them with $duration, read their arguments",
                    probe.name)
            return None
        root = v.root
        if root not in args:
            near = nearest(root, args, 1)
            out.add(v.mark, f"async fn {fn} has no parameter {root!r}",
                    (f"did you mean {near[0]!r}? " if near else "") + "parameters: "
                    + (", ".join(args) or "none"), probe.name)
            return None
        inner = v.selector.removeprefix("len(")
        at = f"~p0.{FIRST_POLL}.{inner.lstrip()}"
        values.append(replace(v, selector=f"len({at}" if inner != v.selector else at))
    gate = Value(_GATE, "~p0", None, DEFAULT_MAX, probe.mark)
    return replace(probe, function=body, values=(*values, gate)), future


def _first_state(gate: ValueSpec) -> tuple[int, ...]:
    """The value of the gate (a future's state) at a call's first poll: Unresumed."""
    return tuple(v for v, n in gate.names if n == FIRST_POLL)


def _gated(sites: list[Site], first: tuple[int, ...]) -> list[Site]:
    """The sites of an async fn's first poll: the last fetch, the future's state, made
    their gate (a hit counts only while the state is ``first``: still ``Unresumed``)."""
    return [replace(s, fetches=s.fetches[:-1], gate=s.fetches[-1], gate_values=first,
                    why=s.why + "; only a call's first poll (its future still "
                    f"{FIRST_POLL}), so each call counts once")
            for s in sites]


def _async_exit(b: Binary, fn: str, probe: Probe, future: Future, first: list[Site],
                out: _Collector) -> list[Site]:
    """An exit probe on async fn ``fn``, from the sites of its first poll (``first``):
    they keep the call's record, by the address of its future's state; its end is
    where its body stores ``Returned`` into that state (the sites read what the first
    poll kept, and time it), and a future dropped with its record still there was
    cancelled (``drop`` sites, at its drop glue)."""
    body = first[0].function
    done = future.states.get("Returned")
    later = tuple(Fetch("later") if v.builtin is not None and v.at != "entry" else None
                  for v in probe.values)
    calls = []
    for s in first:
        gate = s.gate
        if gate is None or gate.kind != "mem":
            continue  # the state in a register: no address to pair by
        key = Fetch("root", (*gate.ops, Op("add", offset=gate.offset)))
        calls.append(replace(s, role="call", key=key, fetches=tuple(
            lf or f for lf, f in zip(later, s.fetches, strict=True)),
            why="the call's first poll, kept for its end: " + s.why))
    ends = tuple(Fetch("builtin", builtin=v.builtin) if v.builtin is not None
                 and v.at != "entry" else Fetch("saved", slot=i)
                 for i, v in enumerate(probe.values))
    stores = placement.state_stores(b, body, future.state, future.size, done) \
        if done is not None else []
    drops = placement.drop_sites(b, future.type, future.state)
    if not calls or not stores:
        out.add(probe.function_mark, f"{fn} is an async fn, and noop finds no "
                + ("first poll whose future it can tell apart" if not calls else
                   "place where its future's state becomes Returned"),
                "probe its entry (its first poll) instead", probe.name)
        return []
    return [*calls,
            *(Site(body, a, b.elf.file_offset(a), why, ends, role="return", key=k)
              for a, k, why in stores),
            *(Site(f, a, b.elf.file_offset(a), why, tuple(Fetch("later") for _ in ends),
                   role="drop", key=k) for f, a, k, why in drops)]


@dataclass
class _Gathered:
    """What a probe's functions gave so far: the values' specs (every site's the same),
    its sites, the pointers an exit probe keeps, and each function's inlined calls
    that are not probed, with why."""

    specs: tuple[ValueSpec, ...] | None = None
    sites: list[Site] = field(default_factory=list)
    roots: int = 0
    missed: dict[str, Counter[str]] = field(default_factory=dict)


def _probe(b: Binary, probe: Probe, out: _Collector, xmm_readable: bool = False
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
    if probe.match is not None:  # problems of each matched function, folded below
        out = _Collector([])
    problems: list[tuple[str, Problem]] = []  # (the matched function, its problem)
    last = ""
    for fn in fns:
        problems += [(last, p) for p in out.problems[len(problems):]]
        last = fn
        _function(b, probe, fn, got, out, xmm_readable)
    problems += [(last, p) for p in out.problems[len(problems):]]
    if out is not whole:
        whole.problems += _folded(problems, probe.match or "")
    return _planned(b, probe, got, bare, whole)


def _function(b: Binary, user: Probe, fn: str, got: _Gathered, out: _Collector,
              xmm_readable: bool) -> None:
    """The sites of ``user`` in function ``fn`` (its entry's or its exits', an async fn's
    first poll, its inlined copies), added to ``got``; its problems to ``out``."""
    probe = user
    body = _async_body(b, fn)
    future: Future | None = None
    if body is not None:
        polled = _first_poll(b, fn, body, user, out)
        if polled is None:
            return
        (probe, future), fn = polled, body
    try:
        fv = b.functions.vars(fn)
        types = b.functions.param_types(fn)
    except NoopError as exc:
        out.add(probe.function_mark, f"{fn}: {exc.message}", exc.hint, probe.name)
        return
    pairs = [_value(b, fv, types, v, out, probe) for v in probe.values]
    if any(p is None for p in pairs):
        return
    read = [p for p in pairs if p is not None]
    these = tuple(p[0] for p in read)
    if got.specs is not None and these != got.specs:
        out.add(probe.function_mark, f"{fn}: the values have other types here than in "
                f"{got.sites[0].function}", "narrow the pattern so the values agree, or "
                "name one copy by its symbol", probe.name)
        return
    fetches = tuple(p[1] for p in read)
    try:
        if probe.at == "exit" and body is None and b.functions.only_inlined(fn):
            raise NoopError(f"{fn} exists only inlined ({len(b.functions.inlined(fn))} "
                            "copies): a copy has no return of its own to probe",
                            "probe its entry, or an exit of the function it is inlined "
                            "into")
        if probe.at == "exit" and body is None:
            found, n = _exit(b, fn, fv, probe, fetches, out)
            got.roots = max(got.roots, n)
            copies = len(b.functions.inlined(fn))
            if copies:
                got.missed[fn] = Counter({"an exit probe sees only calls of the function's "
                                          "own code": copies})
        else:
            found, why = placement.entry_sites(
                b, fn, probe, these, fetches, fv, types, xmm_readable,
                gated=_first_state(these[-1]) if body is not None else ())
            if why:
                got.missed[fn] = why
    except NoopError as exc:
        out.add(probe.function_mark, exc.message, exc.hint, probe.name)
        return
    if found and future is not None:
        found = _gated(found, _first_state(these[-1]))
        these = these[:-1]
        if probe.at == "exit":
            found = _async_exit(b, fn, user, future, found, out)
        if got.specs is not None and these != got.specs:
            return
    if found:
        got.specs = these
        got.sites += found
    elif b.functions.only_inlined(fn):
        why = got.missed.pop(fn, Counter())
        out.add(probe.function_mark, f"{fn} exists only inlined, and no copy can be "
                "probed: " + ("; ".join(f"{r} ({n})" for r, n in why.items())
                              or "no copy has code"),
                "probe the functions it is inlined into", probe.name)


def _planned(b: Binary, probe: Probe, got: _Gathered, bare: list[str], out: _Collector
             ) -> ProbePlan | None:
    """The plan of what ``probe``'s functions gave: its sites within its limit, each
    proven, with ``$caller`` read there, its metrics and what it leaves unseen."""
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
    metrics, agg = _metrics(probe, specs, out)
    unseen = tuple(f"{sum(why.values())} inlined call site{'s' * (sum(why.values()) != 1)} "
                   f"of {fn} not probed: " + "; ".join(f"{r} ({n})" for r, n in why.items())
                   for fn, why in got.missed.items())
    if bare:
        unseen += (f"{len(bare)} function{'s' * (len(bare) != 1)} matched by "
                   f"{probe.match!r} have no debug info (assembly, or C built without "
                   f"-g) and are left out: {', '.join(bare[:3])}{', ...' * (len(bare) > 3)}",)
    return ProbePlan(probe.name, probe.target, specs, tuple(sites), wants_goid, metrics, agg,
                     probe.at, got.roots, unseen)


_MEMORY = ("mem", "mem_slice", "mem_array")


def _root(fetch: Fetch) -> tuple[tuple[Op, ...], tuple[Op, ...]] | None:
    """Split a fetch reaching memory through a parameter's pointer into the ops that
    find the pointer (at entry) and the rest (at the return); None when the value is
    the parameter's own (in its registers or its stack slot), which a call cannot
    change for its caller."""
    if fetch.kind not in _MEMORY or not fetch.ops:
        return None
    ops = fetch.ops
    if ops[0].op == "reg":
        cut = 1
    elif ops[0].op == "sp":
        cut = next((n + 1 for n, o in enumerate(ops) if o.op == "deref"), 0)
        if not cut:
            return None
    else:
        return None
    if any(o.op in ("reg", "bound", "sp") or (o.op == "when" and o.reg) for o in ops[cut:]):
        return None
    return ops[:cut], ops[cut:]


def _exit(b: Binary, fn: str, fv: FunctionVars, probe: Probe, fetches: tuple[Fetch, ...],
          out: _Collector) -> tuple[list[Site], int]:
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
        split = _root(f) if v.builtin is None and v.at != "entry" else None
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
    entry = placement.entry_site(b, fn, tuple(call))
    exits = placement.exit_sites(b, fn, tuple(ret), tuple(tail))
    if not exits:
        raise NoopError(f"{fn} has no RET and no jump out of it: it never returns",
                        "probe its entry instead")
    return [replace(entry, role="call", why="the call's entry, kept for its returns: "
                    + entry.why), *exits], len(roots)


_LABEL_DECODINGS = ("string", "bytes", "int", "uint", "bool", "addr", "variant", "caller",
                    "caller_line", "gotype")
_NUMBERS = ("int", "uint", "float", "bool", "addr")


def _metrics(probe: Probe, specs: tuple[ValueSpec, ...], out: _Collector
             ) -> tuple[tuple[MetricPlan, ...], Aggregate | None]:
    """Each metric's plan, and the probe's in-kernel aggregate for those kept there: one
    per-CPU hash keyed by every label those metrics use."""
    by_name = {v.name: v for v in specs}
    plans: list[MetricPlan] = []
    for n, m in enumerate(probe.metrics):
        bad = False
        for lab in m.labels:
            v = by_name[lab.rule.value]
            if v.decode not in _LABEL_DECODINGS:
                out.add(lab.mark, f"label {lab.rule.name}: {v.name} is a {v.decode}; labels "
                        "come from strings, integers and booleans", "use it as a value",
                        probe.name)
                bad = True
        value = by_name[m.value] if m.value else None
        if value is not None and value.decode not in _NUMBERS:
            out.add(m.value_mark, f"metric {m.name}: {value.name} is a {value.decode}, not a "
                    "number", "a label can hold it", probe.name)
            bad = True
        if bad:
            continue
        where, why = m.aggregate, ""
        if where == "kernel" and value is not None and value.decode == "float" \
                and m.kind != "gauge":
            where, why = "events", "a BPF program has no floating point to add floats"
        column = f"m{n}" if where == "kernel" and value is not None else ""
        plans.append(MetricPlan(m.name, metric_kind(m.kind), m.help, m.value, m.buckets,
                                tuple(lab.rule for lab in m.labels), m.max_series,
                                where_of(where), column, why))
    kernel = [p for p in plans if p.where == "kernel"]
    if not kernel:
        return tuple(plans), None
    used = {r.value for p in kernel for r in p.labels}
    # Which process hit comes first: a series carries its container's labels, and the
    # rows of a process that exited are folded in noop and deleted from the map.
    keys = ("$pid", *(v.name for v in specs if v.name in used))
    columns = []
    for p in kernel:
        if not p.column or p.value is None:
            continue
        v = by_name[p.value]
        op: ColumnOp = "sum" if p.kind == "counter" else "last" if p.kind == "gauge" \
            else "hist"
        bounds = tuple(bound(v, b) for b in p.buckets) if op == "hist" else ()
        columns.append(Column(p.column, op, p.value, bounds))
    agg = Aggregate(keys, tuple(columns), max(p.max_series for p in kernel))
    size = key_size(keys, by_name)
    if size > KEY_LIMIT:
        first = next(m for m in probe.metrics if m.labels and m.aggregate == "kernel")
        out.add(first.mark, f"the labels of this probe's metrics take {size} bytes in the "
                f"kernel's key; at most {KEY_LIMIT}",
                "lower max: of the string values used as labels", probe.name)
    return tuple(plans), agg


def _signed(b: Binary, function: str) -> bool:
    """Whether the function has a signature: in the metadata, or given by the spec."""
    _sym, die = b.functions.find(function)
    return bool(die.attributes.get("DW_AT_prototyped") and
                die.attributes["DW_AT_prototyped"].value)


def _value(b: Binary, fv: FunctionVars, types: dict[str, DIE | None], v: Value,
           out: _Collector, probe: Probe) -> tuple[ValueSpec, Fetch] | None:
    if v.builtin is not None:
        return callers.builtin(v)
    steps = v.steps
    root = str(steps[0][1])
    var = next((p for p in fv.params if p.name == root), None)
    tdie = types.get(root)
    if var is None:
        var = next((r for r in fv.results if r.name == root), None)
        tdie = b.functions.result_types(fv.function).get(root)
        if var is not None and (probe.at != "exit" or v.at == "entry"):
            out.add(v.mark, f"{v.name}: {root} is a result, known only when the call "
                    "returns", "read it in a probe with at: exit" if probe.at != "exit"
                    else "drop at: entry", probe.name)
            return None
    if var is None and b.dwarf.from_metadata and not _signed(b, fv.function):
        # A stripped Go binary: the metadata names no parameter, and has no signature of
        # this function at all.
        known = "its receiver p0 only" if fv.params else "no parameter"
        out.add(v.mark, f"{v.name}: {fv.function} is in a stripped binary whose Go type "
                f"metadata keeps no signature of it ({known}), so {root!r} is unknown",
                "give the probe its signature: \"func(...) (...)\", or the binary's debug "
                "info (--debuginfo)", probe.name)
        return None
    missing = b.functions.no_values(fv.function) if var is None else ""
    if missing:
        from agent.binary.dwarf.symtab import NO_VALUES

        out.add(v.mark, f"{v.name}: {fv.function} has no known parameters: {missing}",
                NO_VALUES, probe.name)
        return None
    if var is None:
        names = [p.name for p in fv.params]
        results = [r.name for r in fv.results] if probe.at == "exit" else []
        near = nearest(root, names + results, 1)
        out.add(v.mark, f"{fv.function} has no parameter {'or result ' * bool(results)}"
                f"{root!r}", (f"did you mean {near[0]!r}? " if near else "")
                + "parameters: " + (", ".join(names) or "none")
                + (f"; results: {', '.join(results)}" if results else ""), probe.name)
        return None
    got = _select(b, steps, var.location, tdie, v, var.note, out, probe.name)
    if got is not None and v.at == "exit" and var in fv.params and _root(got[1]) is None:
        out.add(v.mark, f"{v.name}: {v.selector} is the parameter's own value, not reached "
                "through a pointer; the call cannot change it for its caller",
                "drop at: exit; it is read at entry", probe.name)
        return None
    return got


def _select(b: Binary, steps: tuple[Step, ...], start: Location | None, tdie: DIE | None,
            v: Value, note: str, out: _Collector, probe: str
            ) -> tuple[ValueSpec, Fetch] | None:
    try:
        sel = b.walker.select(steps, start, tdie, v.decode, v.max, note)
    except SelectError as exc:
        out.add(v.mark, f"{v.name}: {exc.message}", exc.hint, probe)
        return None
    return (ValueSpec(v.name, sel.decode, sel.size, sel.cap, sel.type, v.selector,
                      sel.names, sel.other), sel.fetch)
