"""What each command of the command line does (``cli`` parses them): the API hunt
(``funcs``, ``struct``, ``vars``, ``lines``), ``check``, the trace in the terminal,
``run``, ``bench``, ``doctor``, ``headers`` and ``install-service``. A user's mistake
raises NoopError, which ``cli.main`` says in one line."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from agent import logs
from agent.errors import NoopError


def _emit(args: argparse.Namespace, data: Any, human: Callable[[Any], str]) -> int:
    if args.json:
        json.dump(data, sys.stdout, indent=None if isinstance(data, list) else 2)
        sys.stdout.write("\n")
    else:
        print(human(data))
    return 0


def cmd_funcs(args: argparse.Namespace) -> int:
    from agent.tools import inspect, render
    rows = inspect.function_list(args.binary, args.glob, args.debuginfo)
    if not rows and args.glob:
        raise NoopError(f"no function matches {args.glob!r}",
                        "globs match whole names: try '*" + args.glob.strip("*") + "*'")
    if args.json:  # with what the build says of itself: Go and module versions
        return _emit(args, {**inspect.build_facts(args.binary, args.debuginfo),
                            "functions": rows},
                     render.funcs_table)
    return _emit(args, rows, render.funcs_table)


def cmd_struct(args: argparse.Namespace) -> int:
    from agent.tools import inspect, render
    return _emit(args, inspect.struct_layout(args.binary, args.type, args.debuginfo),
                 render.struct)


def cmd_vars(args: argparse.Namespace) -> int:
    from agent.tools import inspect, render
    if _at_line(args.function):
        return _emit(args, inspect.line_vars(args.binary, args.function, args.debuginfo),
                     render.line_vars_table)
    return _emit(args, inspect.function_vars(args.binary, args.function, args.debuginfo),
                 render.vars_table)


def _at_line(text: str) -> bool:
    """Whether a vars argument names a line (FUNCTION:LINE, FILE:LINE)."""
    head, sep, tail = text.rpartition(":")
    return bool(sep and head and tail.isdigit() and not head.endswith(":"))


def cmd_lines(args: argparse.Namespace) -> int:
    from agent.tools import inspect, render
    return _emit(args, inspect.function_lines(args.binary, args.function, args.source,
                                              args.debuginfo), render.lines_table)


def cmd_doctor(args: argparse.Namespace) -> int:
    from agent.tools import doctor
    return doctor.main(["--json"] if args.json else [])


def cmd_headers(args: argparse.Namespace) -> int:
    from agent.kernel import kheaders
    return kheaders.main_prepare([])


def _plan(args: argparse.Namespace, aggregate: bool = False) -> Any:
    """The plan named on the command line: a spec (--config) or the preset (--binary);
    ``aggregate``: the preset's in-kernel aggregates too (noop run)."""
    if args.config:
        from agent.config import probes as spec
        from agent.config.model import override
        from agent.plan import resolve
        loaded = spec.load(args.config)
        if args.binary or args.pid or args.debuginfo:
            loaded = override(loaded, args.binary, args.pid, args.debuginfo)
        from agent.kernel.kfeatures import xmm_helper_available
        from agent.live.discover import Locator
        # noop run waits for targets no process runs yet; the other commands say so.
        plan = resolve.resolve(loaded, xmm_helper_available() is not None, wait=aggregate,
                               where=Locator())
        for warning in plan.warnings:
            logs.say(f"warning: {warning}", logs.WARNING)
        return plan
    if args.binary:
        from agent.presets import plans as presets
        from agent.presets.client_golang.rules import NoMetrics
        mode = _mirror_mode(args) if aggregate else "off"
        try:
            plan = presets.plan(args.binary, args.pid, aggregate, args.debuginfo)
        except NoMetrics as exc:
            if mode == "off":
                exc.exit_code = 2
                raise
            # noop run: the program's process series all the same, no probe
            logs.say(f"{args.binary} has no client_golang metrics: serving its Go "
                     "runtime's and its process's series", logs.WARNING)
            from dataclasses import replace

            from agent.plan.model import Plan
            return Plan(presets.RUNTIME, (replace(exc.target, pid=args.pid),), ())
        except NoopError as exc:
            exc.exit_code = 2  # the command line named something noop cannot use
            raise
        if mode in ("memory", "auto") and not _mirrorable(args, plan):
            args.mirror = mode = "off"  # said: every update is probed instead
        if mode in ("off", "both"):  # the update probes: refused where none are read
            command = "noop check" if args.command == "check" else \
                "noop run" if aggregate else "noop"
            presets.need_updates(plan, f"{command} --binary" +
                                 (f" --mirror {mode}" if aggregate else ""))
        if mode == "memory":
            plan = presets.memory_only(plan)  # the mirror reads every value
        elif mode == "auto":  # the mirror reads every value; a probe finds registries
            plan = presets.finders_only(plan)
        for warning in plan.warnings:  # updates the preset cannot see, said once
            logs.say(f"warning: {warning}", logs.WARNING)
        return plan
    raise NoopError("nothing to probe", "give --binary BIN (the preset for client_golang "
                    "or the prometheus crate) or --config probes.yaml")


def _mirrorable(args: argparse.Namespace, plan: Any) -> bool:
    """Whether a Rust program's metrics can be read from its memory (the crate's layout
    in its DWARF); when not, said once, and its updates are probed instead (a Go
    program's: always, as its type descriptors are there)."""
    if not plan.targets or plan.targets[0].language != "rust":
        return True
    from agent.presets.mirror.core import library_of
    try:
        library_of(plan.targets[0].binary, args.debuginfo).close()
    except NoopError as exc:
        logs.say(f"warning: {exc.message}: every update is probed instead (as --mirror off)",
                 logs.WARNING)
        return False
    return True


def _mirror_mode(args: argparse.Namespace) -> str:
    """``--mirror``'s mode; ``counts`` (once the default, which probed every gauge's
    update) said once and taken as ``auto``."""
    mode = str(getattr(args, "mirror", "off"))
    if mode == "counts":
        logs.say("warning: --mirror counts is gone: by default (auto) no probe is on any "
                 "update path; gauges' update counts come with --mirror both", logs.WARNING)
        mode = args.mirror = "auto"
    return mode


def cmd_check(args: argparse.Namespace) -> int:
    if args.schema:
        from agent.config.schema import json_schema
        print(json.dumps(json_schema(), indent=2))
        return 0
    if args.coverage or args.url:
        return _coverage(args)
    from agent.tools import estimate
    costs_later = None if args.emit_c or args.measure else \
        estimate.costs_ahead(calibrate=os.geteuid() == 0)  # beside resolving: no wait
    try:
        plan = _plan(args, args.run)
        from agent.kernel.preflight import check_targets
        check_targets(plan)  # a --pid (or a spec's pid) must run the target, as for run
    except BaseException:
        if costs_later is not None:
            costs_later()  # its loop file is removed before noop exits
        raise
    from agent.kernel import codegen
    from agent.kernel.kfeatures import attach_cookies, xmm_helper_available
    from agent.tools import render
    if args.emit_c:
        sys.stdout.write(codegen.generate(plan, xmm_helper_available(),
                                          "run" if args.run else "trace",
                                          attach_cookies()).text)
        return 0
    rates = estimate.rates(args.rate or [], plan)
    if args.measure:
        from agent.kernel.preflight import check_privileges
        check_privileges()  # counting attaches uprobes: say so before anything else
    costs = costs_later() if costs_later is not None else \
        estimate.costs_or_none(calibrate=os.geteuid() == 0 or bool(args.measure))
    measured = {}
    if args.measure:
        if costs is None:
            raise NoopError("noop check --measure needs the cost of a hit on this machine",
                            "run it as root")
        measured = estimate.measure(plan, args.measure, costs, args.max_overhead)
    data = plan.to_json()
    data["estimate"] = estimate.estimate(plan, costs, rates, measured, args.max_overhead)
    code = _emit(args, data, render.plan)
    return 1 if any(p.get("over") for p in data["estimate"]["probes"]) else code


def _coverage(args: argparse.Namespace) -> int:
    """``noop check --binary B --coverage [--url URL]``: what noop run serves of a
    running Go or Rust program's own page."""
    if not args.binary or args.config:
        raise NoopError("noop check --coverage reads a running Go program's metrics",
                        "give --binary (and --pid, or let noop find its process)")
    from agent.presets import plans as presets
    from agent.presets.client_golang.rules import NoMetrics
    client_golang = True
    try:
        t = presets.plan(args.binary, args.pid, True, args.debuginfo).targets[0]
    except NoMetrics as exc:  # its runtime's and process's series all the same
        t, client_golang = exc.target, False
    if t.language not in ("go", "rust"):
        raise NoopError(f"{args.binary} is neither a Go nor a Rust program: its own "
                        "metrics are not mirrored", "--coverage reads client_golang's and "
                        "the prometheus crate's metrics")
    from agent.presets.mirror.core import running
    from agent.tools import coverage
    pids = [args.pid] if args.pid else sorted(running(t)())
    if not pids:
        raise NoopError(f"no process runs {args.binary}", "start it, or give --pid")
    data = coverage.coverage(t.binary, pids[0], args.url, client_golang, t.language,
                             args.debuginfo)
    return _emit(args, data, coverage.render)


def cmd_trace(args: argparse.Namespace) -> int:
    from agent.output import printer, trace
    progress = logs.Progress(live=sys.stderr.isatty() and not args.json)

    def prepare() -> trace.Prepared:
        progress.step("resolving")
        plan = _plan(args)
        from agent.kernel import codegen
        from agent.kernel.kfeatures import attach_cookies, xmm_helper_available
        program = codegen.generate(plan, xmm_helper_available(), cookies=attach_cookies())
        if args.config:
            make = printer.spec_printer
        else:
            from agent.presets.printer import preset_printer as make
        return plan, program, make(plan, sys.stdout, args.json)

    try:
        first = prepare()
    except BaseException:
        progress.done()
        raise
    stats = trace.run(first, args.duration, progress, args.max_overhead,
                      args.budget_window, again=prepare)
    print(trace.summary(stats), file=sys.stderr)
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from agent.kernel.kfeatures import xmm_helper_available
    from agent.service import daemon
    if not (args.binary or args.config):
        raise NoopError("noop run: nothing to probe", "give --config probes.yaml, or "
                        "--binary BIN for the preset's meta-metrics (client_golang, "
                        "prometheus crate)")
    from agent.output.serve import parse_listen
    try:
        parse_listen(args.listen, resolve=True)
    except NoopError as exc:
        exc.exit_code = 2
        raise
    web = None
    if args.web_config:  # its reader (YAML, TLS) only when there is one
        from agent.output import webconfig
        web = webconfig.load(args.web_config)
    _mirror_mode(args)
    if args.binary and not args.config and args.mirror in ("memory", "auto"):
        from pathlib import Path

        from agent.kernel.privileges import can_read_memory
        if not can_read_memory(Path("/proc/self/status").read_text()):
            instead = "off" if args.mirror == "memory" else "both"
            logs.say("without CAP_SYS_PTRACE noop may not read the program's memory: its "
                     "metrics are mirrored through probes on their updates (as --mirror "
                     f"{instead})", logs.WARNING)
            args.mirror = instead
    started = time.monotonic()
    plan = _plan(args, True)  # a mistake in the spec fails here, before anything listens
    resolved = time.monotonic() - started
    mirror = bool(args.binary and not args.config and args.mirror != "off")
    if mirror and args.mirror == "auto" and plan.probes:
        plan = _without_bpf(plan)
    alone = mirror and not plan.probes  # no BPF at all: the memory gives it all

    def made() -> Any:  # the plan again, at each reload
        from agent.presets import plans as presets
        again = _plan(args, True)
        return presets.memory_only(again) if alone else again

    if not any(p.metrics or p.aggregate for p in plan.probes) and not plan.waiting and \
            not mirror:
        err = NoopError("nothing to export: no probe of the spec has metrics",
                        "add metrics: to a probe (see probes.yaml)")
        err.exit_code = 2
        raise err
    if not alone:
        from agent.kernel.preflight import check_arch, check_privileges
        check_arch(plan)
        check_privileges()  # before anything listens: a supervisor sees the failure at once
    from agent.presets.client_golang.facts import Choice
    choice = Choice(tuple(args.mirror_include), tuple(args.mirror_exclude),
                    args.mirror_max_series)
    opts = daemon.Options(made, plan, not args.config, args.listen,
                          web, xmm_helper_available(), resolved, args.max_overhead,
                          args.budget_window, mirror=mirror, choice=choice,
                          debuginfo=args.debuginfo)
    return daemon.Daemon(opts).run()


def _without_bpf(plan: Any) -> Any:
    """``--mirror auto``'s plan, or none of its probes when noop may not load BPF: the
    mirror alone, as ``--mirror memory``, said once."""
    from agent.kernel.preflight import check_privileges
    from agent.presets import plans as presets
    try:
        check_privileges()
    except NoopError as exc:
        logs.say(f"warning: {exc.message}: registries only a local variable holds are not "
                 "found (the probe where the program gathers one needs BPF); mirroring "
                 "those its globals hold, as --mirror memory", logs.WARNING)
        return presets.memory_only(plan)
    return plan


def cmd_install_service(args: argparse.Namespace) -> int:
    from pathlib import Path

    from agent.service.install import install

    for line in install(Path(args.root)):
        print(line)
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from pathlib import Path

    from agent import cache
    from agent.tools import arms, bench, workloads
    names = ([n.strip() for n in args.arms.split(",") if n.strip()] if args.arms else
             [a for a in arms.ARMS if (a not in ("preset", "default", "mirror")
                                       or args.workload != "c")
              and (a != "bpftrace-read" or args.workload == "go")])  # Go's receiver
    chosen = [arms.arm(n) for n in names]
    if args.binary:
        binary = Path(args.binary)
        if not binary.is_file():
            raise NoopError(f"no such workload: {binary}", "build one of examples/bench, "
                            "or leave out --binary to let noop build it")
    else:
        binary = workloads.build_workload(args.workload, cache.cache_dir() / "bench")
    op = args.op or {"c": "func", "rust": "counter.inc"}.get(args.workload, "counter.Inc")
    function = args.function or workloads.workload_function(args.workload, op)
    result = bench.run(binary, op, function, chosen, args.rounds, args.calls,
                       repeats=args.repeats, baseline=args.baseline, address=args.address)
    return _emit(args, result.to_json(), lambda _data: bench.render(result))
