"""Damaged DWARF: what reading it may raise, and the one line noop says instead.

A raw scan raises one of ``SCAN_ERRORS`` on a form or layout it does not know (its
callers then let pyelftools answer); pyelftools raises its own errors of malformed
input, or runs out of stack in a broken tree. ``damage_said`` says those as one line
naming the file, and abbreviation tables are read checked, so that a missing code is
one of pyelftools' errors too rather than a bare KeyError.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from elftools.common.exceptions import DWARFError, ELFError
from elftools.dwarf.abbrevtable import AbbrevDecl, AbbrevTable

from agent.errors import BinaryError

# What reading raw DWARF raises on a form or layout it does not know.
SCAN_ERRORS = (ValueError, IndexError, KeyError, struct.error, AttributeError,
               OverflowError)  # a value past 2**63 in an array of offsets
# What reading a damaged binary's DWARF may raise, beyond noop's own errors.
DAMAGE = (*SCAN_ERRORS, ELFError, DWARFError, RecursionError)


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
    except RecursionError:  # pyelftools walks a DIE's children recursively
        raise BinaryError(f"{path}: its debug info is damaged: its DIEs nest deeper than "
                          "any program's (their tree is broken)",
                          "rebuild it, or give an intact debug file with --debuginfo"
                          ) from None
