"""Command line: ``noop --binary B`` / ``noop --config F`` (trace in the terminal),
``noop check``, ``run``, ``bench``, and the API hunt ``funcs|struct|vars|lines``, plus
``doctor|headers``: the grammar and ``main`` here, what each command does in
``commands``. User mistakes are one line each, never a traceback."""

from __future__ import annotations

import argparse
import atexit
import errno
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from agent import __version__, commands, files, logs, numbers
from agent.errors import NoopError

# What writing the output (stdout: a file, a pipe, a terminal) fails with: said in one
# line. Every file noop writes itself handles its own (the cache skips, with no partial
# file).
_OUTPUT_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO, errno.EROFS,
                  errno.EBADF, errno.ENXIO, errno.EAGAIN}


def _pid(text: str) -> int:
    """A process ID: a positive whole number no larger than the kernel allows."""
    from agent.config.model import PID_MAX
    return int(_number(lambda: numbers.integer(text, f"a process ID (1 to {PID_MAX})", 1,
                                               PID_MAX)))


def _number(read: Callable[[], Any]) -> Any:
    """What ``read`` makes of a flag's text (``agent.numbers``: ASCII digits in
    decimal), its refusal as argparse's."""
    try:
        return read()
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _seconds(text: str) -> float:
    """A positive, finite number of seconds."""
    return float(_number(lambda: numbers.decimal(text, "a positive number of seconds", 0,
                                                 above=True)))


def _count(text: str) -> int:
    """A whole number above 0, in ASCII digits (``1_000`` and ``٣`` are not)."""
    return int(_number(lambda: numbers.integer(text, "a whole number above 0", 1)))


def _share(text: str) -> float:
    """A share of one CPU: ``5%``, or ``none``."""
    from agent.config.model import share
    return float(_number(lambda: share(text)))


def _rate(text: str) -> tuple[str | None, float]:
    """``N`` hits per second of every probe, or ``PROBE=N``."""
    name, _, number = text.rpartition("=")
    value = _number(lambda: numbers.decimal(number, "a rate: hits per second, N or "
                                            "PROBE=N", 0))
    return name or None, float(value)


def _duration(text: str) -> float:
    """Seconds, with or without an s: ``5s``, ``2.5``."""
    return _seconds(text.removesuffix("s") if text.endswith("s") else text)


def _positive(text: str) -> int:
    return int(_number(lambda: numbers.integer(text, "a whole number above 0", 1)))


def _address(text: str) -> int:
    return int(_number(lambda: numbers.address(text)))


def _target_flags(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("--binary", metavar="BIN",
                    help="the program to probe (alone: the built-in preset for Go's "
                    "client_golang or Rust's prometheus crate)")
    sp.add_argument("--config", metavar="FILE", help="a probe spec (probes.yaml)")
    sp.add_argument("--pid", type=_pid, help="only this process (default: every process "
                    "running the binary, started before or after noop)")
    _debuginfo_flag(sp)


def _debuginfo_flag(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("--debuginfo", metavar="FILE",
                    help="the binary's separate debug file (default: looked for under "
                    "/usr/lib/debug, by debuglink and in a debuginfod cache)")


def _max_overhead_flag(sp: argparse.ArgumentParser) -> None:
    from agent.config.model import DEFAULT_BUDGET
    sp.add_argument("--max-overhead", metavar="SHARE", type=_share,
                    default=_share(DEFAULT_BUDGET),
                    help="the CPU a probe may cost each target process, a share of one "
                    "CPU, for probes whose spec sets no budget (default "
                    f"{DEFAULT_BUDGET.replace('%', '%%')}; none: unbounded)")  # % for argparse


def _mirror_flag(sp: argparse.ArgumentParser, run: bool = False) -> None:
    from agent.presets.client_golang.facts import MAX_MIRRORED
    sp.add_argument("--mirror", choices=("auto", "memory", "both", "off", "counts"),
                    default="auto", metavar="{auto,memory,both,off}",
                    help="noop run --binary on a Go program: export the program's own "
                    "client_golang metrics under their own names, read from its memory at "
                    "each scrape (needs CAP_SYS_PTRACE), with no probe on any update path "
                    "and one where the program gathers a registry, which finds those no "
                    "global holds (auto, the default; without the privileges to load BPF, "
                    "as memory); with no probe at all and no BPF (memory); beside every "
                    "update's probe, for the updates by operation and gauges' update counts "
                    "(both); or only the probes (off)")
    if run:
        sp.add_argument("--mirror-include", action="append", default=[], metavar="GLOB",
                        help="mirror only the families whose names a GLOB matches "
                        "(repeatable; default: all)")
        sp.add_argument("--mirror-exclude", action="append", default=[], metavar="GLOB",
                        help="do not mirror the families whose names GLOB matches "
                        "(repeatable)")
        sp.add_argument("--mirror-max-series", type=_count, default=MAX_MIRRORED,
                        metavar="N", help="mirror at most N series of each process, "
                        f"families in order of their names (default {MAX_MIRRORED}); the "
                        "rest are counted in noop_mirror_capped_series")


def _budget_flags(sp: argparse.ArgumentParser) -> None:
    from agent.kernel.budget import WINDOW
    _max_overhead_flag(sp)
    sp.add_argument("--budget-window", metavar="SECONDS", type=_seconds, default=WINDOW,
                    help="a probe over its budget for this long is taken off for a while "
                    f"(default {WINDOW:g})")


class _Parser(argparse.ArgumentParser):
    """Command-line mistakes in one line, as noop's other errors are (exit code 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


_Add = Callable[..., argparse.ArgumentParser]


def parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="noop", description="uprobe metrics agent for compiled services (Go, Rust, C)")
    p.add_argument("--version", action="version", version=f"noop {__version__}")
    _target_flags(p)
    p.add_argument("--duration", type=_seconds, metavar="SECONDS",
                   help="stop after this long")
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    _budget_flags(p)
    p.set_defaults(func=commands.cmd_trace)
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    def add(name: str, fn: Callable[[argparse.Namespace], int], help_: str,
            json_flag: bool = True) -> argparse.ArgumentParser:
        sp = sub.add_parser(name, help=help_, description=help_)
        sp.set_defaults(func=fn)
        if json_flag:
            sp.add_argument("--json", action="store_true", help="machine-readable output")
        return sp

    _inspection_commands(add)
    _probing_commands(add)
    _top_command(add)
    _bench_command(add)
    add("doctor", commands.cmd_doctor, "check that this machine can run noop")
    add("headers", commands.cmd_headers, "prepare kernel headers for BCC", json_flag=False)
    sp = add("install-service", commands.cmd_install_service, "install the systemd unit that runs "
             "this noop (noop run --config /etc/noop/probes.yaml), and a starting config "
             "when there is none", json_flag=False)
    sp.add_argument("--root", metavar="DIR", default="/",
                    help="write under DIR instead of / (staging); systemd is not reloaded")
    return p


def _leave(code: int) -> NoReturn:
    atexit._run_exitfuncs()
    sys.stderr.flush()
    os._exit(code)


def _inspection_commands(add: _Add) -> None:
    """The API hunt: funcs, struct, vars, lines (``answers``: ``main`` may leave at once
    after them)."""
    def answer(*a: Any) -> argparse.ArgumentParser:
        sp = add(*a)
        sp.set_defaults(answers=True)
        return sp

    sp = answer("funcs", commands.cmd_funcs, "list functions: address, size, inlined instances")
    sp.add_argument("binary")
    sp.add_argument("glob", nargs="?", help="shell-style pattern on the full name")
    _debuginfo_flag(sp)
    sp = answer("struct", commands.cmd_struct, "show a struct's layout: offsets, sizes, holes")
    sp.add_argument("binary")
    sp.add_argument("type", help="type name as the binary has it, e.g. main.Order")
    _debuginfo_flag(sp)
    sp = answer("vars", commands.cmd_vars, "show where a function's parameters and results "
                "live at its entry, or the parameters and locals available at a line")
    sp.add_argument("binary")
    sp.add_argument("function", help="function name as the binary has it, or "
                    "FUNCTION:LINE, or FILE:LINE (main.go:51)")
    _debuginfo_flag(sp)
    sp = answer("lines", commands.cmd_lines, "show a function's source lines: which can be "
                "probed, at which addresses, and where calls were inlined")
    sp.add_argument("binary")
    sp.add_argument("function", help="function name as the binary has it")
    sp.add_argument("--source", metavar="DIR",
                    help="where the sources are, when not at the paths the binary names")
    _debuginfo_flag(sp)


def _probing_commands(add: _Add) -> None:
    """check and run (the trace is the command line without a command)."""
    sp = add("check", commands.cmd_check, "resolve a spec (or the preset) and show the plan; "
             "loads nothing")
    _target_flags(sp)
    sp.add_argument("--emit-c", action="store_true", help="print the C handed to BCC")
    sp.add_argument("--run", action="store_true",
                    help="as noop run loads it: in-kernel aggregates, metrics only")
    _mirror_flag(sp)
    sp.add_argument("--schema", action="store_true",
                    help="print the spec format as JSON Schema")
    sp.add_argument("--coverage", action="store_true",
                    help="with --binary: what noop run serves of the running program's own "
                    "metrics, and which of its collectors it does not read")
    sp.add_argument("--url", metavar="URL", help="with --coverage: the program's own "
                    "/metrics, each of its families said mirrored, partly or not, and why")
    sp.add_argument("--rate", type=_rate, action="append", metavar="[PROBE=]N",
                    help="hits per second to price (every probe, or one): its share of "
                    "a CPU against its budget")
    sp.add_argument("--measure", type=_duration, metavar="SECONDS",
                    help="count each probe's hits with a bare in-kernel counter this long "
                    "(e.g. 5s) and price them; a probe over its budget is counted no longer")
    _max_overhead_flag(sp)
    sp = add("run", commands.cmd_run, "serve the spec's metrics (or, with --binary alone, the "
             "meta-metrics of the program's own metrics) on /metrics until SIGTERM; SIGHUP "
             "reloads the spec", json_flag=False)
    _target_flags(sp)
    from agent.output import DEFAULT_LISTEN
    sp.add_argument("--listen", metavar="HOST:PORT", default=DEFAULT_LISTEN,
                    help=f"where to serve /metrics, /healthz, /readyz (default "
                    f"{DEFAULT_LISTEN})")
    sp.add_argument("--web.config.file", dest="web_config", metavar="FILE",
                    help="TLS settings, in the format of Prometheus' web config file")
    _mirror_flag(sp, run=True)
    _budget_flags(sp)


def _top_command(add: _Add) -> None:
    from agent.top.command import cmd_top
    from agent.top.model import COLUMNS
    sp = add("top", cmd_top, "which of a running program's series move fastest, read from "
             "its memory with no probe on any update path: full screen on a terminal, one "
             "interval's table otherwise", json_flag=False)
    _target_flags(sp)
    sp.add_argument("-d", "--delay", type=_seconds, default=1.0, metavar="SECONDS",
                    help="seconds between refreshes: the interval rates are taken over "
                    "(default 1)")
    sp.add_argument("--once", action="store_true", help="print one interval's table and "
                    "exit (what noop top does when its output is not a terminal)")
    sp.add_argument("--json", action="store_true", help="with --once: one JSON object")
    sp.add_argument("--sort", choices=COLUMNS, default="rate",
                    help="the column rows are ordered by (default rate: fastest moving "
                    "first)")
    sp.add_argument("--reverse", action="store_true", help="the other way round")
    sp.add_argument("--filter", metavar="PATTERN", help="only the series a glob matches "
                    "(on the family's name, or on name{labels}), or /a regex/ finds; "
                    "!PATTERN: those it does not")
    sp.add_argument("--fold", action="store_true",
                    help="each family's series as one row (summed)")
    sp.add_argument("-n", "--limit", type=_count, metavar="N",
                    help="with --once: the first N rows")
    sp.add_argument("--probes", action="store_true",
                    help="also count each series' updates with a uprobe on every update "
                    "path (a trap per update, under --max-overhead's budget)")
    _budget_flags(sp)


def _bench_command(add: _Add) -> None:
    from agent.tools.arms import ARMS
    from agent.tools.workloads import KINDS, OPS
    sp = add("bench", commands.cmd_bench, "measure what one probe hit adds to a call: no probe, "
             "an empty BPF program, noop's probes and bpftrace at the same site")
    sp.add_argument("--workload", choices=KINDS, default="go",
                    help="which of noop's looping workloads to build and run (default go)")
    sp.add_argument("--binary", metavar="BIN", help="a workload already built")
    sp.add_argument("--op", choices=OPS, help="what the workload calls (default: "
                    "counter.Inc for go, counter.inc for rust, func for c)")
    sp.add_argument("--function", help="probe this function (default: the op's own)")
    sp.add_argument("--address", metavar="ADDR", type=_address,
                    help="probe this address inside the function (default: its entry)")
    sp.add_argument("--arms", help=f"comma-separated, of {', '.join(ARMS)} (default: "
                    "all; preset, default and mirror not on the c workload)")
    sp.add_argument("--baseline", help="the arm the ratios compare with (default: empty)")
    sp.add_argument("--calls", type=_positive, default=200_000, help="calls per round")
    sp.add_argument("--rounds", type=_positive, default=3, help="rounds per run")
    sp.add_argument("--repeats", type=_positive, default=3,
                    help="runs of each arm, their order rotated each time")


def entry() -> int:
    """The ``noop`` command and ``python -m agent``: ``main``, leaving at once after an
    answer of the API hunt."""
    return main(leave=True)


def main(argv: Sequence[str] | None = None, leave: bool = False) -> int:
    """noop's command line: the exit status. With ``leave``, an answer of the API hunt
    (``funcs``, ``struct``, ``vars``, ``lines``) printed, the process ends at once:
    atexit's work done (the cache's writers waited for), the interpreter's teardown,
    which frees each of a large answer's millions of objects one by one (0.2 s on a
    130 MB Rust binary's listing), skipped. Nothing of these is attached or open."""
    p = parser()
    args = p.parse_args(argv)
    if args.command is None and not (args.binary or args.config):
        p.print_help(sys.stderr)
        return 2
    try:
        if getattr(args, "debuginfo", None) and not getattr(args, "binary", None):
            raise NoopError("--debuginfo needs --binary: name it in the spec's target as "
                            "debuginfo: FILE")
        code = int(args.func(args))
        sys.stdout.flush()  # here, where a full disk is one line, not at exit
        if leave and getattr(args, "answers", False):
            _leave(code)
        return code
    except NoopError as exc:
        logs.say(str(exc), logs.ERROR)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as exc:
        if exc.filename is None and exc.errno in _OUTPUT_ERRNOS:  # writing stdout
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            logs.say(f"cannot write the output: {files.why(exc)}", logs.ERROR)
            return 1
        if os.environ.get("NOOP_DEBUG"):
            traceback.print_exc()
        logs.say(f"internal error: {type(exc).__name__}: {exc} "
                 "(set NOOP_DEBUG=1 for a traceback and report it)", logs.ERROR)
        return 70
    except Exception as exc:  # a bug in noop, not the user's mistake
        if os.environ.get("NOOP_DEBUG"):
            traceback.print_exc()
        logs.say(f"internal error: {type(exc).__name__}: {exc} "
                 "(set NOOP_DEBUG=1 for a traceback and report it)", logs.ERROR)
        return 70
