"""Values that no site of a probe can read: one problem each, with where the value can
be read instead (a later instruction where DWARF places it, the calls that pass it).

Depends only on the binary and the plan's sites; it reads no process.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterator, Sequence

from agent.config.model import Probe, Value
from agent.errors import NoopError
from agent.plan.binary import Binary
from agent.plan.model import Site

# Fetch kinds that stand for a read made at another site of the same call.
_DEFERRED = ("later", "saved")
_CALL_REL32 = re.compile(b"\xe8")


def never_read(b: Binary, probe: Probe, sites: Sequence[Site]
               ) -> Iterator[tuple[Value, str, str]]:
    """Each value of ``probe`` that none of its ``sites`` can read, with a message and a
    hint saying where it can be read, if anywhere."""
    for i, v in enumerate(probe.values):
        whys = [s.fetches[i].why for s in sites if s.fetches[i].kind not in _DEFERRED]
        if not whys or any(s.fetches[i].kind not in (*_DEFERRED, "unavailable")
                           for s in sites):
            continue
        functions = sorted({s.function for s in sites})
        where = functions[0] if len(functions) == 1 else f"{len(functions)} functions"
        root = v.root
        hint = _instead(b, functions[0], root) if len(functions) == 1 else ""
        yield (v, f"{v.name}: {v.selector} cannot be read at any site of {where}: {whys[0]}",
               hint or "noop reads only what the binary says is there: drop the value")


def _instead(b: Binary, function: str, param: str) -> str:
    """Where ``param`` of ``function`` may be read instead: later in the function, where
    DWARF places it, or where it is called."""
    out = []
    later = _later(b, function, param)
    if later:
        out.append(later)
    callers = _callers(b, function)
    if callers:
        out.append("look where it is called: " + ", ".join(callers))
    return "; ".join(out)


def _later(b: Binary, function: str, param: str) -> str:
    """The first instruction after the entry where DWARF places ``param``."""
    try:
        sym, die = b.functions.find(function)
    except NoopError:
        return ""
    var = next((p for p in b.functions.vars(function).params if p.name == param), None)
    if var is None:
        return ""
    for pc in b.functions.location_starts(die, param):
        cfa = b.dwarf.frames.cfa_at(pc)
        if pc <= sym.address or cfa is None:
            continue
        loc = b.functions.location_at(die, pc, cfa, param, var.size)
        if loc is not None:
            line = b.dwarf.line_at(pc)
            return (f"DWARF places {param} in {' '.join(map(str, loc))} from "
                    f"+{pc - sym.address:#x}" + (f" ({line})" if line else ""))
    return ""


def _callers(b: Binary, function: str, limit: int = 3) -> list[str]:
    """Up to ``limit`` direct calls of ``function``: the caller and its source line."""
    sym = b.functions.symbols.get(function)
    text = b.elf.section(".text")
    if sym is None or text is None:
        return []
    data = b.elf.section_data(text)
    out = []
    for m in _CALL_REL32.finditer(data):
        at = m.start()
        if at + 5 > len(data):
            break
        if text.addr + at + 5 + struct.unpack_from("<i", data, at + 1)[0] != sym.address:
            continue
        address = text.addr + at
        caller = b.function_at(address)
        try:
            insns = b.instructions(caller) if caller is not None else ()
        except NoopError:  # a caller without DWARF: its code is still read by address
            insns = ()
        if caller is None or not any(i.address == address and i.mnemonic == "call"
                                     for i in insns):
            continue  # the bytes of another instruction, not a call
        line = b.dwarf.line_at(address)
        shown = b.functions.display_name(caller)
        out.append(f"{shown} at {line}" if line else f"{shown} at {address:#x}")
        if len(out) == limit:
            break
    return out
