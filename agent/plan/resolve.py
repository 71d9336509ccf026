"""Resolve a spec against its binaries: functions to attach sites, selectors to fetches.

Depends only on the spec and the binaries' bytes. Every problem of the spec is
collected and raised at once as a SpecError carrying file:line:col and the probe.
Here, each target: its file and the plans kept for its build; one probe's plan is
``resolve_probe``'s, its values' and metrics' ``resolve_values``', and a probe on an
async fn is made one on its future's first poll by ``resolve_async``.
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
import re
from collections.abc import Callable
from dataclasses import replace

from agent import cache, files, heap
from agent.binary import debuginfo
from agent.binary.dwarf.damage import damage_said
from agent.binary.elf import ElfFile
from agent.binary.gometa.scope import Scope, of_pattern
from agent.config.model import Probe, Spec, Target
from agent.config.reader import SpecError
from agent.config.selector import NotRunning, Selector, binary_path, selector_of, through_proc
from agent.errors import NoopError
from agent.plan import callers, plain
from agent.plan.binary import Binary
from agent.plan.model import Plan, ProbePlan, TargetPlan
from agent.plan.resolve_probe import probe_plan
from agent.plan.resolve_values import Collector

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
    out = Collector([])
    targets: list[TargetPlan] = []
    waiting: list[tuple[str, Selector]] = []
    found: list[tuple[int, ProbePlan]] = []  # (the probe's place in the spec, its plan)
    for t in spec.targets:
        try:
            path, also, given, build_id = _opened(spec, t, where)
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
        with heap.paused():
            planned = _target(spec, t, path, given, build_id, pinned, xmm_readable, out)
        if planned is None:
            continue
        target, got = planned
        here = path if through_proc(path) else files.resolved(path, "binary")
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


def _opened(spec: Spec, t: Target, where: Where
            ) -> tuple[str, tuple[str, ...], debuginfo.Given, str]:
    """Where target ``t``'s program is read from (its file, the other files of its
    build), what the spec gives of its debug info, and the key of its answers in the
    cache."""
    path, also = where(spec, t)
    given = debuginfo.Given(
        binary_path(spec, t.debuginfo) if t.debuginfo else None,
        tuple(sorted({p.function: p.signature for p in spec.probes if p.target ==
                      t.name and p.function and p.signature}.items())))
    elf = ElfFile(path)
    # A stripped copy keeps its build-id: its answers from Go metadata are kept
    # apart from its twin's.
    build_id = debuginfo.cache_id(elf, given=given)
    return path, also, given, build_id


def _target(spec: Spec, t: Target, path: str, given: debuginfo.Given, build_id: str,
            pinned: bool, xmm_readable: bool, out: Collector
            ) -> tuple[TargetPlan, list[tuple[int, ProbePlan]]] | None:
    """Target ``t``'s plan and its probes' (by their places in the spec), as kept in
    the cache for this build, or made from the file at ``path`` and kept when they
    have no problems; None when the binary itself has one (in ``out``)."""
    mine = [(n, p) for n, p in enumerate(spec.probes) if p.target == t.name]
    key = _key(mine, xmm_readable)
    kept = _kept(build_id, key) if build_id and key else None
    if kept is not None:
        return kept
    before = len(out.problems)
    try:
        with damage_said(path):
            b = Binary(path, _scope([p for _n, p in mine]), given)
            b.functions.prefetch(sorted({p.function for _n, p in mine if p.function}))
            target = b.plan(t.name, None, (), None, pinned)
            got = [(n, plan) for n, probe in mine
                   if (plan := probe_plan(b, probe, out, xmm_readable)) is not None]
    except NoopError as exc:  # the binary's own (the probes' are collected)
        out.add(t.mark, f"target {t.name}: {exc.message}", exc.hint)
        return None
    if build_id and key and len(out.problems) == before:
        cache.put(build_id, "plan", key, plain.dump((target, got)))
    # One binary's DWARF in memory at a time: what a plan needs of it is in
    # the plan, and pyelftools' objects hold each other in cycles only a
    # collection frees (20 targets held at once kept ~400 MB resident).
    del b
    gc.collect()
    return target, got


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
