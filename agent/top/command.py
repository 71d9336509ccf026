"""``noop top``: which of a running program's series move fastest, read from its memory
(the mirror of ``noop run --binary``), with no probe on any update path: full screen
on a terminal, one interval's table (or JSON) otherwise."""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from agent import logs
from agent.errors import NoopError


def cmd_top(args: argparse.Namespace) -> int:
    from agent.top import live

    logs.shown = logs.WARNING  # what noop run says as it starts is not for this screen
    top = session(args)
    try:
        if sys.stdout.isatty() and sys.stdin.isatty() and not args.once and not args.json:
            from agent.top import screen

            print("noop: loading; the full screen follows", file=sys.stderr, flush=True)
            return live.interactive(top, screen.run)
        return live.once(top, args.json)
    finally:
        top.close()


def session(args: argparse.Namespace) -> Any:
    """The ``live.Top`` the command line asks for, not yet loaded (``begin``)."""
    from agent.kernel.kfeatures import xmm_helper_available
    from agent.kernel.preflight import check_targets
    from agent.presets.client_golang.facts import Choice
    from agent.service import daemon
    from agent.top import live
    from agent.top.model import Filter

    if not (args.binary or args.config or args.pid):
        raise _usage("noop top: nothing to show", "give --binary BIN, --pid PID or --config "
                     "probes.yaml")
    try:
        shown = Filter(args.filter or "")
    except ValueError as exc:
        raise _usage(f"--filter {exc}", "a glob (http_*), or /a regex/") from None
    _can_read()
    view = live.View(delay=args.delay, sort=args.sort, reverse=args.reverse, filter=shown,
                     fold=args.fold, limit=args.limit, probes=args.probes)
    notes: list[str] = []
    plan, named = _plan(args, notes)
    check_targets(plan)
    plan = _loadable(plan, args.probes, notes)
    opts = daemon.Options(lambda: _plan(args, [])[0], plan, True, "", None,
                          xmm_helper_available(), 0.0, args.max_overhead, args.budget_window,
                          mirror=True, choice=Choice(), debuginfo=args.debuginfo)
    return live.Top(opts, view, notes, named)


def _usage(message: str, hint: str) -> NoopError:
    exc = NoopError(message, hint)
    exc.exit_code = 2
    return exc


def _can_read() -> None:
    """noop top reads the program's memory: say so before anything loads."""
    from agent.kernel.privileges import can_read_memory

    if not can_read_memory(Path("/proc/self/status").read_text()):
        raise NoopError("noop top reads the program's metrics from its memory, which needs "
                        "CAP_SYS_PTRACE", "run it as root, or with CAP_SYS_PTRACE (and "
                        "CAP_BPF, CAP_PERFMON for the probe that finds registries only a "
                        "local holds)")


def _plan(args: argparse.Namespace, notes: list[str]) -> tuple[Any, str]:
    """The plan of what the command line names (each target's preset: the Gather probe
    alone, or with ``--probes`` every update's), and its name for the title; what noop
    cannot show of it added to ``notes``."""
    if args.config:
        return _spec_plan(args, notes)
    if not args.binary:  # --pid alone: the program it runs
        exe = f"/proc/{args.pid}/exe"
        try:
            named = Path(os.readlink(exe)).name.removesuffix(" (deleted)")
        except OSError:
            raise _usage(f"no process {args.pid}", "give the PID of a running program") \
                from None
        return _preset(args, exe, args.pid, args.debuginfo, notes), f"{named} ({args.pid})"
    return _preset(args, args.binary, args.pid, args.debuginfo, notes), \
        Path(args.binary).name + (f" ({args.pid})" if args.pid else "")


def _preset(args: argparse.Namespace, binary: str, pid: int | None, debuginfo: str | None,
            notes: list[str]) -> Any:
    """The preset's plan for ``binary``: the Gather probe alone (``--probes``: every
    update's probe too); none where the library's layout cannot be read (said)."""
    from agent.plan.model import Plan
    from agent.presets import plans as presets
    from agent.presets.client_golang.rules import NoMetrics
    from agent.presets.mirror.core import library_of

    try:
        plan = presets.plan(binary, pid, True, debuginfo)
    except NoMetrics as exc:  # its runtime's and process's series all the same
        from agent.presets.vmetrics.library import uses
        if not uses(binary):  # VictoriaMetrics/metrics: mirrored, with no probe
            notes.append(f"{Path(binary).name} keeps no client_golang metrics: its "
                         "runtime's and process's series only")
        return Plan(presets.RUNTIME, (replace(exc.target, pid=pid),), ())
    except presets.Unsupported:
        raise _usage(f"{binary} is neither a Go nor a Rust program", "noop top shows the "
                     "metrics a Go program keeps with client_golang or a Rust one with the "
                     "prometheus crate") from None
    except NoopError as exc:
        exc.exit_code = 2  # the command line named something noop cannot use
        raise
    if plan.targets[0].language == "rust":
        try:
            library_of(binary, debuginfo).close()
        except NoopError as exc:
            notes.append(f"{Path(binary).name}: its own metrics are not shown: {exc.message}")
            return plan if args.probes else presets.memory_only(plan)
    if args.probes:
        presets.need_updates(plan, "noop top --probes")
        for warning in plan.warnings:  # updates the preset cannot see, said once
            logs.say(f"warning: {warning}", logs.WARNING)
        return plan
    return presets.finders_only(plan)


def _spec_plan(args: argparse.Namespace, notes: list[str]) -> tuple[Any, str]:
    """Every target of the spec (not its probes): each one's preset, merged."""
    from agent.config import probes as spec
    from agent.config.model import override
    from agent.kernel.kfeatures import xmm_helper_available
    from agent.live.discover import Locator
    from agent.plan import resolve
    from agent.plan.model import Plan

    loaded = spec.load(args.config)
    if args.binary or args.pid or args.debuginfo:
        loaded = override(loaded, args.binary, args.pid, args.debuginfo)
    if args.probes and len(loaded.targets) != 1:
        raise _usage("--probes counts the updates of one program", "give --binary, or a "
                     "spec with one target")
    where = resolve.resolve(replace(loaded, probes=()), xmm_helper_available() is not None,
                            wait=True, where=Locator())
    for name, selector in where.waiting:
        notes.append(f"target {name}: no process runs {selector.describe()} yet (not "
                     "followed: start noop top again once one does)")
    targets: list[Any] = []
    probes: list[Any] = []
    source = ""
    for t in where.targets:
        debug = loaded.target(t.name).debuginfo
        try:
            one = _preset(args, t.binary, t.pid, debug, notes)
        except NoopError as exc:
            notes.append(f"target {t.name}: {exc.message}")
            continue
        (made,) = one.targets
        source = source or one.source
        targets.append(replace(made, name=t.name, selector=t.selector or made.selector))
        probes += [replace(p, target=t.name) for p in one.probes]
    if not targets:
        raise NoopError(f"{args.config}: no target noop top can show",
                        "; ".join(notes) or "name a Go or Rust program in its targets")
    return Plan(source, tuple(targets), tuple(probes)), ", ".join(t.name for t in targets)


def _loadable(plan: Any, probes: bool, notes: list[str]) -> Any:
    """``plan``, or none of its probes when noop may not load BPF (said): the mirror
    alone, as ``noop run --mirror memory``; ``--probes`` cannot do without them."""
    from agent.kernel.preflight import check_privileges
    from agent.presets import plans as presets

    if not plan.probes:
        return plan
    try:
        check_privileges()
    except NoopError as exc:
        if probes:
            raise
        notes.append(f"{exc.message}: registries only a local variable holds are not found "
                     "(the Gather probe needs BPF)")
        return replace(plan, probes=()) if presets.library(plan) else plan
    return plan
