"""The call-frame information of a binary: where the canonical frame address is at a
pc, as an offset from rsp (or from rbp once a prologue has set up a frame pointer).

The entry that covers a pc is found in ``.debug_frame`` by a scan of the entries'
headers and parsed alone (pyelftools parses every entry to list them: seconds for a
large Go binary), else in the full list (``.eh_frame`` too); each answer is kept in
noop's cache by build-id.
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Callable
from functools import cached_property
from typing import Any

from elftools.dwarf.callframe import FDE, CallFrameInfo
from elftools.dwarf.dwarfinfo import DWARFInfo

from agent import cache
from agent.binary.amd64 import DWARF_REGS
from agent.binary.dwarf import scan
from agent.binary.dwarf.sections import section_bytes


class CallFrames:
    """The call-frame information of one binary, each entry parsed when a pc needs it."""

    def __init__(self, info: DWARFInfo, key: Callable[[], str]) -> None:
        self.info = info
        self.key = key  # the binary's key in noop's cache ('' keeps nothing): Dwarf.cache_id

    def _fde_at(self, pc: int) -> FDE | None:
        """The FDE covering ``pc``: from .debug_frame, found by a scan of the entries'
        headers and parsed alone (pyelftools parses every entry to list them: seconds
        for a large Go binary); else from the full list."""
        sec = self.info.debug_frame_sec if self.info.has_CFI() else None
        if sec is not None:  # x86-64: 8-byte addresses
            try:
                data = section_bytes(sec)
                at = scan.fde_offset(data, pc)
            except (ValueError, IndexError, struct.error):
                at = -1
            if at is not None and at >= 0:
                cfi = CallFrameInfo(stream=sec.stream, size=sec.size, address=sec.address,
                                    base_structs=self.info.structs)
                entry = cfi._parse_entry_at(at)
                if isinstance(entry, FDE) and entry.header["initial_location"] <= pc < (
                        entry.header["initial_location"] + entry.header["address_range"]):
                    return entry
                at = -1  # not what the header scan took it for: the full list decides
            if at is None:
                return None
        fdes = self._fdes
        i = bisect.bisect_right(self._fde_starts, pc) - 1
        if i < 0 or not fdes[i][0] <= pc < fdes[i][1]:
            return None
        return fdes[i][2]

    @cached_property
    def _fdes(self) -> list[tuple[int, int, FDE]]:
        entries = (self.info.CFI_entries() if self.info.has_CFI() else
                   self.info.EH_CFI_entries() if self.info.has_EH_CFI() else [])
        return sorted(((e["initial_location"], e["initial_location"] + e["address_range"], e)
                       for e in entries if isinstance(e, FDE)), key=lambda t: t[0])

    @cached_property
    def _fde_starts(self) -> list[int]:
        return [f[0] for f in self._fdes]

    def cfa_at(self, pc: int) -> int | None:
        """The canonical frame address at ``pc`` as an offset from rsp there (8 at a
        function's first instruction), from the call-frame information; None when it is
        not rsp-based or not described."""
        rule = self.cfa_rule_at(pc)
        return rule[1] if rule is not None and rule[0] == "rsp" else None

    def cfa_rule_at(self, pc: int) -> tuple[str, int] | None:
        """The canonical frame address at ``pc`` as (register, offset): rsp plus the
        frame's size, or rbp + 16 once a prologue has set up a frame pointer; None when
        it is not described. Kept in the build-id cache: pyelftools parses every entry
        of the binary to find one (seconds for a large Go program)."""
        bid = self.key()
        key = f"{pc:#x}"
        if bid:
            hit = cache.get(bid, "cfa-rule", key, load=_cfa_entry)
            if hit is not None:
                return hit[0]
        rule = self._cfa_rule(pc)
        if bid:
            cache.put(bid, "cfa-rule", key, {"rule": list(rule) if rule else None})
        return rule

    def _cfa_rule(self, pc: int) -> tuple[str, int] | None:
        fde = self._fde_at(pc)
        if fde is None:
            return None
        rule = None
        for row in fde.get_decoded().table:
            if row["pc"] > pc:
                break
            rule = row.get("cfa")
        if rule is None or rule.expr is not None or rule.reg not in DWARF_REGS:
            return None
        return DWARF_REGS[rule.reg], int(rule.offset)


def _cfa_entry(value: Any) -> tuple[tuple[str, int] | None]:
    """A cached CFA rule, ``{"rule": [register, offset] | null}``, for ``cache.get``:
    the rule in a 1-tuple (so that no rule is not a miss); anything else raises."""
    rule = cache.check(dict[str, tuple[str, int] | None], value)["rule"]
    if rule is not None and rule[0] not in DWARF_REGS.values():
        raise ValueError(f"no register {rule[0]!r}")
    return ((rule[0], rule[1]) if rule is not None else None,)
