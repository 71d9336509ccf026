"""Values at addresses as gdb reads them from the running program: the oracle for what a
line probe reads at each pass (``noop vars FILE:LINE`` says where a value is; the probe
reads it there).

``values_at(binary, args, sites)`` runs the program under gdb (batch mode, with gdb's
own Python), stops at every address of ``sites`` (the binary's addresses: a
position-independent executable's are moved by its load bias, read from gdb's
mappings once the program is loaded) and at each stop evaluates that address's
selectors the way a spec writes them: ``x``, ``x.field`` (through a pointer too),
``len(x)``. The program runs without address randomization, as ``without_aslr``
runs it, so that the addresses it holds (pointers, into its stack too) are the same
in both runs. gdb finds each name in the scopes that hold the address, innermost first
(an inlined copy's, then its caller's), works out its location from DWARF with its own
evaluator, and reads the registers and memory of the stopped thread; but at a
function's first instruction its arguments are read where the calling convention
passes them (``entry_arguments``), since DWARF's locations there may name frame slots
the prologue has not written yet (gdb's known error at C -O0). A value gdb
says is optimized out, or cannot read, comes back as None, with why in ``errors``.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

# Run inside gdb: the request and the answer are JSON files named in the environment.
SCRIPT = r'''
import json, os, re
import gdb

req = json.load(open(os.environ["NOOP_GDB_REQUEST"]))
# The program as it runs without gdb (without_aslr): no shell between, and none of
# the variables gdb adds to its environment, so that its stack starts where it would.
for setting in ("pagination off", "confirm off", "print elements 0",
                "startup-with-shell off", "disable-randomization on"):
    gdb.execute("set " + setting)
for name in ("LINES", "COLUMNS", "NOOP_GDB_REQUEST"):  # gdb sets the first two its way
    gdb.execute("unset environment " + name)
for name, value in req["extra"].items():
    gdb.execute("set environment %s=%s" % (name, value))
for sig in ("SIGURG", "SIGPIPE", "SIGUSR1", "SIGUSR2", "SIGCHLD"):
    gdb.execute("handle %s nostop noprint pass" % sig, to_string=True)
gdb.execute("starti " + " ".join(req["args"]), to_string=True)
bias = 0
if req["pie"]:
    for line in gdb.execute("info proc mappings", to_string=True).splitlines():
        parts = line.split()
        if len(parts) >= 6 and parts[-1] == req["binary"] and int(parts[3], 16) == 0:
            bias = int(parts[0], 16)
            break
    else:
        raise SystemExit("no mapping of the binary at offset 0")
wanted = {int(a) + bias: sels for a, sels in req["sites"].items()}
jumps = {a + bias for a in req["jumps"]}
skips = {int(a) + bias: mask for a, mask in req["skips"].items()}
for a in wanted:
    gdb.Breakpoint("*%#x" % a, internal=True)
SELECTOR = re.compile(r"^(?:len\((?P<len>[\w.]+)\)|(?P<path>[\w.]+))$")


def _bytes(address, n):
    if n == 0:
        return ""
    raw = gdb.selected_inferior().read_memory(address, n).tobytes()
    return raw.decode("utf-8", "replace")


def _strip(v):
    while v.type.strip_typedefs().code in (gdb.TYPE_CODE_PTR, gdb.TYPE_CODE_REF) and \
            v.type.strip_typedefs().target().strip_typedefs().code == gdb.TYPE_CODE_STRUCT:
        v = v.dereference()
    return v


def _names(t):
    return [f.name for f in t.fields()] if t.code == gdb.TYPE_CODE_STRUCT else []


def _final(v):
    t = v.type.strip_typedefs()
    if t.code in (gdb.TYPE_CODE_INT, gdb.TYPE_CODE_CHAR, gdb.TYPE_CODE_BOOL,
                  gdb.TYPE_CODE_ENUM, gdb.TYPE_CODE_PTR):
        return int(_whole(v))
    names = _names(t)
    if names == ["str", "len"]:  # a Go string
        return _bytes(int(_whole(v["str"])), int(_whole(v["len"])))
    if names == ["data_ptr", "length"]:  # a Rust &str
        return _bytes(int(_whole(v["data_ptr"])), int(_whole(v["length"])))
    raise ValueError("no plain value for type " + str(t))


def _length(v):
    v = _strip(v)
    names = _names(v.type.strip_typedefs())
    for n in ("len", "length"):
        if n in names:
            return int(_whole(v[n]))
    raise ValueError("no length in type " + str(v.type))


SCALARS = (gdb.TYPE_CODE_INT, gdb.TYPE_CODE_CHAR, gdb.TYPE_CODE_BOOL, gdb.TYPE_CODE_ENUM,
           gdb.TYPE_CODE_PTR)
# The integer registers arguments are passed in, in order: Go's internal register ABI,
# the System V ABI (C, and Rust for integers, pointers and slices).
SYSV = ("rdi", "rsi", "rdx", "rcx", "r8", "r9")
REGS = {"go": ("rax", "rbx", "rcx", "rdi", "rsi", "r8", "r9", "r10", "r11"), "c": SYSV,
        "rust": SYSV}


def entry_arguments(frame):
    """At a function's first instruction: its arguments where the calling convention
    passes them, by name, as (type, words). gdb reads DWARF's locations there, which
    may name frame slots the prologue has not written yet (C at -O0). Integers and
    pointers take a register each, a Go string or a Rust slice two; none is told past
    the first argument of another kind. Empty elsewhere."""
    frame = _outer(frame)  # an inlined copy's first instruction is no call's entry
    block = frame.block()
    while block.function is None:
        block = block.superblock
    if block.start != frame.pc():
        return {}
    regs, out = list(REGS[req["language"]]), {}
    for sym in block:
        if not sym.is_argument or sym.name.startswith("~"):
            continue
        t = sym.type.strip_typedefs()
        n = 1 if t.code in SCALARS and t.sizeof <= 8 else \
            2 if _names(t) in (["str", "len"], ["data_ptr", "length"]) else 0
        if not n or len(regs) < n:
            break
        out[sym.name] = (t, [int(frame.read_register(r)) & (2**64 - 1) for r in regs[:n]])
        del regs[:n]
    return out


def _word(t, word):
    bits = 8 * t.sizeof
    word &= (1 << bits) - 1
    if t.code != gdb.TYPE_CODE_PTR and t.is_signed and word >> (bits - 1):
        word -= 1 << bits
    return word


def evaluate(frame, selector, entry):
    m = SELECTOR.match(selector)
    if m is None:
        raise ValueError("a selector the oracle does not read: " + selector)
    path = (m.group("len") or m.group("path")).split(".")
    if path[0] in entry:
        t, words = entry[path[0]]
        if len(words) == 2:
            if m.group("len") and len(path) == 1:
                return words[1]
            if len(path) == 1:
                return _bytes(words[0], words[1])
            raise ValueError("a field of a two-word argument at entry")
        if len(path) == 1 and not m.group("len"):
            return _word(t, words[0])
        v = gdb.Value(words[0]).cast(t)
    else:
        v = _named(frame, path[0])
    for f in path[1:]:
        v = _strip(v)[f]
    return _length(v) if m.group("len") else _final(v)


def _named(frame, name):
    """The variable ``name`` seen from ``frame``'s code: in an inlined copy's scopes,
    then in those of the functions it is inlined into (gdb shows each copy as a frame
    of its own, whose lookups stop at the copy)."""
    f = frame
    while f is not None:
        sym = gdb.lookup_symbol(name, f.block())[0]
        if sym is not None and (sym.is_variable or sym.is_argument):
            return sym.value(f)
        if f.type() != gdb.INLINE_FRAME:
            break
        f = f.older()
    raise ValueError("no symbol " + name)


def _outer(frame):
    while frame.type() == gdb.INLINE_FRAME:
        frame = frame.older()
    return frame


def _whole(v):
    """``v``, unless gdb has no location for some of it."""
    if v.is_optimized_out:
        raise ValueError("optimized out")
    return v


hits, errors = [], []
while True:
    try:
        gdb.execute("continue", to_string=True)
    except gdb.error:
        break
    if not gdb.selected_inferior().pid or not gdb.selected_thread():
        break
    pc = gdb.selected_frame().pc()
    if pc in skips and int(gdb.parse_and_eval("$eflags")) & skips[pc]:
        continue  # a Go stack check's jbe to morestack: the call starts again
    while pc in wanted:
        at = pc
        if at in jumps:  # a jump into a line: its values as at the statement it leads to
            gdb.execute("stepi", to_string=True)
            pc = gdb.selected_frame().pc()
        frame = gdb.selected_frame()
        values = {}
        entry = entry_arguments(frame)
        for key, selector in wanted[at].items():
            try:
                values[key] = evaluate(frame, selector, entry)
            except (gdb.error, gdb.MemoryError, ValueError) as exc:
                values[key] = None
                errors.append("%#x %s: %s" % (at - bias, selector, exc))
        hits.append({"pc": at - bias, "values": values})
        if at not in jumps:
            break  # else the jump landed on another stop, maybe: continue would skip it
json.dump({"hits": hits, "errors": errors}, open(req["out"], "w"))
'''


# A Go program's goroutines are not preempted by a signal: one that lands as gdb stops
# at a breakpoint makes it stop there twice (the handler returns to the same address).
QUIET = {"go": {"GODEBUG": "asyncpreemptoff=1"}}


def without_aslr(binary: Path, args: list[str], extra: dict[str, str]) -> list[str]:
    """The command that runs the program as gdb does: its addresses not randomized,
    without the two variables gdb sets in its environment (a terminal's size), with
    ``extra`` in it."""
    return ["env", "-u", "LINES", "-u", "COLUMNS", *(f"{k}={v}" for k, v in extra.items()),
            "setarch", "-R", str(binary.resolve()), *args]


@dataclass
class Hits:
    hits: list[tuple[int, dict[str, object]]] = field(default_factory=list)  # (pc, values)
    errors: list[str] = field(default_factory=list)


def values_at(binary: Path, args: list[str], sites: dict[int, dict[str, str]],
              pie: bool, language: str, jumps: set[int], extra: dict[str, str],
              skips: dict[int, int], timeout: float = 180) -> Hits:
    """Every stop of the program (run with ``args``) at an address of ``sites``, in the
    order they came, with what each of that address's selectors (by key) read; at an
    address of ``jumps`` (an instruction that leads into a line, whose values DWARF may
    not cover), once it ran: at the line's statement it leads to. A stop at an address
    of ``skips`` with one of its flags set is none (a Go stack check's ``jbe`` that
    branches to morestack: the call restarts at its entry)."""
    with tempfile.TemporaryDirectory() as tmp:
        request, out, script = Path(tmp, "request.json"), Path(tmp, "out.json"), \
            Path(tmp, "values.py")
        request.write_text(json.dumps({
            "binary": str(binary.resolve()), "args": args, "pie": pie, "out": str(out),
            "language": language, "jumps": sorted(jumps), "extra": extra,
            "skips": {str(a): m for a, m in skips.items()},
            "sites": {str(a): s for a, s in sites.items()}}))
        script.write_text(SCRIPT)
        done = subprocess.run(["gdb", "-nx", "-batch", "-x", str(script),
                               str(binary.resolve())],
                              capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, "NOOP_GDB_REQUEST": str(request)})
        if not out.exists():
            raise RuntimeError(f"gdb gave no answer: {done.stdout[-2000:]}{done.stderr[-2000:]}")
        got = json.loads(out.read_text())
    return Hits([(h["pc"], h["values"]) for h in got["hits"]], got["errors"])
