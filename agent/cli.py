"""Command line: ``noop funcs|struct|vars|doctor|headers``; user mistakes are one line, never
a traceback."""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import Any

from agent import __version__
from agent.errors import NoopError


def _emit(args: argparse.Namespace, data: Any, human: Callable[[Any], str]) -> int:
    if args.json:
        json.dump(data, sys.stdout, indent=None if isinstance(data, list) else 2)
        sys.stdout.write("\n")
    else:
        print(human(data))
    return 0


def cmd_funcs(args: argparse.Namespace) -> int:
    from agent import inspect, render
    rows = inspect.function_list(args.binary, args.glob)
    if not rows and args.glob:
        raise NoopError(f"no function matches {args.glob!r}",
                        "globs match whole names: try '*" + args.glob.strip("*") + "*'")
    return _emit(args, rows, render.funcs_table)


def cmd_struct(args: argparse.Namespace) -> int:
    from agent import inspect, render
    return _emit(args, inspect.struct_layout(args.binary, args.type), render.struct)


def cmd_vars(args: argparse.Namespace) -> int:
    from agent import inspect, render
    return _emit(args, inspect.function_vars(args.binary, args.function), render.vars_table)


def cmd_doctor(args: argparse.Namespace) -> int:
    from agent import doctor
    return doctor.main(["--json"] if args.json else [])


def cmd_headers(args: argparse.Namespace) -> int:
    from agent import kheaders
    return kheaders.main_prepare([])


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="noop", description="uprobe metrics agent for compiled services (Go, Rust, C)")
    p.add_argument("--version", action="version", version=f"noop {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    def add(name: str, fn: Callable[[argparse.Namespace], int], help_: str,
            json_flag: bool = True) -> argparse.ArgumentParser:
        sp = sub.add_parser(name, help=help_, description=help_)
        sp.set_defaults(func=fn)
        if json_flag:
            sp.add_argument("--json", action="store_true", help="machine-readable output")
        return sp

    sp = add("funcs", cmd_funcs, "list functions: address, size, inlined instances")
    sp.add_argument("binary")
    sp.add_argument("glob", nargs="?", help="shell-style pattern on the full name")
    sp = add("struct", cmd_struct, "show a struct's layout: offsets, sizes, holes")
    sp.add_argument("binary")
    sp.add_argument("type", help="type name as the binary has it, e.g. main.Order")
    sp = add("vars", cmd_vars, "show where a function's parameters and results live")
    sp.add_argument("binary")
    sp.add_argument("function", help="function name as the binary has it")
    add("doctor", cmd_doctor, "check that this machine can run noop")
    add("headers", cmd_headers, "prepare kernel headers for BCC", json_flag=False)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    if not getattr(args, "func", None):
        p.print_help(sys.stderr)
        return 2
    try:
        return int(args.func(args))
    except NoopError as exc:
        print(f"noop: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as exc:  # a bug in noop, not the user's mistake
        if os.environ.get("NOOP_DEBUG"):
            traceback.print_exc()
        print(f"noop: internal error: {type(exc).__name__}: {exc} "
              "(set NOOP_DEBUG=1 for a traceback and report it)", file=sys.stderr)
        return 70
