"""Damaged DWARF: what reading it may raise, and the one line noop says instead.

A raw scan raises one of ``SCAN_ERRORS`` on a form or layout it does not know (its
callers then let pyelftools answer); pyelftools raises its own errors of malformed
input, or runs out of stack in a broken tree. ``damage_said`` says those as one line
naming the file, and abbreviation tables are read checked, so that a missing code is
one of pyelftools' errors too rather than a bare KeyError.
"""

from __future__ import annotations

import struct
import traceback
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

from elftools.common.exceptions import DWARFError, ELFError
from elftools.dwarf.abbrevtable import AbbrevDecl, AbbrevTable

from agent.errors import BinaryError

# What reading raw DWARF raises on a form or layout it does not know.
SCAN_ERRORS = (ValueError, IndexError, KeyError, struct.error, AttributeError,
               OverflowError)  # a value past 2**63 in an array of offsets
# What pyelftools raises on malformed input besides its own errors: its structs assert
# (an address size of 0 or 3), its tables are dicts (a form, opcode or operation code it
# has no entry for), its line program divides by line_range, its DWARF 5 line header
# reads whatever formats it is given; and a compressed section that does not inflate.
# Said as damage only when raised inside pyelftools or by zlib (``_damage_in``).
MALFORMED = (AssertionError, KeyError, ZeroDivisionError, AttributeError, TypeError,
             ValueError, IndexError, struct.error, OverflowError, zlib.error)
# What reading a damaged binary's DWARF may raise, beyond noop's own errors.
DAMAGE = (*SCAN_ERRORS, *MALFORMED, ELFError, DWARFError, RecursionError)
# The section a pyelftools module reads (a module that reads from several is named by
# its function, below)
_MODULE_SECTION = {
    "aranges": ".debug_aranges", "lineprogram": ".debug_line", "die": ".debug_info",
    "compileunit": ".debug_info", "abbrevtable": ".debug_abbrev",
    "locationlists": ".debug_loc or .debug_loclists", "ranges": ".debug_ranges or "
    ".debug_rnglists", "callframe": ".debug_frame or .eh_frame", "namelut": ".debug_pubnames",
    "dwarf_expr": "a location expression (in .debug_info or .debug_loc)",
}
_FUNCTION_SECTION = {
    "_parse_line_program_at_offset": ".debug_line", "line_program_for_CU": ".debug_line",
    "_parse_CU_at_offset": ".debug_info", "get_aranges": ".debug_aranges",
    "get_abbrev_table": ".debug_abbrev", "get_string_from_table": ".debug_str",
    "get_string_from_linetable": ".debug_line_str",
}


class CheckedAbbrevs(AbbrevTable):
    """An abbreviation table whose missing code is a DWARFError (pyelftools' own error of
    malformed DWARF, which ``damage_said`` reports) rather than a bare KeyError."""

    def get_abbrev(self, code: int) -> AbbrevDecl:
        got = self._abbrev_map.get(code)
        if got is None:
            raise DWARFError(f"a DIE has abbreviation code {code}, which its unit's table "
                             "does not have")
        return got


@contextmanager
def damage_said(path: str | Path) -> Iterator[None]:
    """pyelftools' own errors of malformed input (ELFError, DWARFError: a reference
    past its unit, a value cut off, an unknown form) as one line naming the file; no
    other exception is touched."""
    try:
        yield
    except (ELFError, DWARFError) as exc:
        raise BinaryError(f"{path}: its debug info is damaged: "
                          f"{' '.join(str(exc).split())}",
                          "rebuild it, or give an intact debug file with --debuginfo"
                          ) from None
    except MALFORMED as exc:
        where = _damage_in(exc)
        if where is None:
            raise  # noop's own code: not the binary's doing
        raise BinaryError(f"{path}: its debug info is damaged: {where}: {_what(exc)}",
                          "rebuild it, or give an intact debug file with --debuginfo"
                          ) from None
    except RecursionError:  # pyelftools walks a DIE's children recursively
        raise BinaryError(f"{path}: its debug info is damaged: its DIEs nest deeper than "
                          "any program's (their tree is broken)",
                          "rebuild it, or give an intact debug file with --debuginfo"
                          ) from None


def _damage_in(exc: BaseException) -> str | None:
    """Where in the DWARF pyelftools (or zlib) failed with ``exc``: the section, and the
    unit where one was being read; None when ``exc`` was raised outside them."""
    frames = [f for f, _line in traceback.walk_tb(exc.__traceback__)]
    if not frames:
        return None
    raised_in = frames[-1].f_globals.get("__name__", "")
    if not raised_in.startswith("elftools.") and not isinstance(exc, zlib.error):
        return None
    return _section(frames) + _unit(frames)


def _section(frames: list[FrameType]) -> str:
    for frame in reversed(frames):
        me = frame.f_locals.get("self")
        name = getattr(me, "name", None)
        if isinstance(name, str) and name.startswith((".debug", ".zdebug", ".eh_frame")):
            return f"its {name}"
        module = frame.f_globals.get("__name__", "").rsplit(".", 1)[-1]
        got = _MODULE_SECTION.get(module) or _FUNCTION_SECTION.get(frame.f_code.co_name)
        if got:
            return got if got.startswith("a ") else f"its {got}"
    return "its DWARF"


def _unit(frames: list[FrameType]) -> str:
    """", the unit at 0x..." of the innermost frame that has a unit at hand."""
    for frame in reversed(frames):
        f_locals = frame.f_locals
        offset = f_locals.get("offset") if frame.f_code.co_name == "_parse_CU_at_offset" \
            else None
        for name in ("cu", "self"):
            offset = offset if isinstance(offset, int) else \
                getattr(f_locals.get(name), "cu_offset", None)
        if isinstance(offset, int):
            return f" (the unit at {offset:#x})"
    return ""


def _what(exc: BaseException) -> str:
    if isinstance(exc, zlib.error):
        return f"compressed data that does not inflate ({exc})"
    if isinstance(exc, KeyError):
        return f"a code it has no meaning for ({exc.args[0]!r})" if exc.args else \
            "a code it has no meaning for"
    if isinstance(exc, ZeroDivisionError):
        return "a field that is never 0 is 0"
    if isinstance(exc, AssertionError):
        return "a field holds a value its format does not allow" + (
            f" ({exc})" if str(exc) else "")
    if isinstance(exc, AttributeError | TypeError):  # a header read with formats of garbage
        return f"a header whose fields do not fit together ({' '.join(str(exc).split())})"
    return " ".join(str(exc).split()) or type(exc).__name__
