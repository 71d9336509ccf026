"""The call-frame information of a binary: where the canonical frame address is at a
pc, as an offset from rsp (or from rbp once a prologue has set up a frame pointer).

The entry that covers a pc is found in ``.debug_frame`` by a scan of the entries'
headers, or in ``.eh_frame`` by ``.eh_frame_hdr``'s search table, and parsed alone
(pyelftools parses every entry to list them: seconds for a large Go or Rust binary);
else in the full list; each answer is kept in noop's cache by build-id.
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Callable
from functools import cached_property
from typing import Any

from elftools.common.exceptions import DWARFError
from elftools.construct import ConstructError
from elftools.dwarf.callframe import FDE, CallFrameInfo
from elftools.dwarf.dwarfinfo import DWARFInfo

from agent import cache
from agent.binary.arch import AMD64, ARM64
from agent.binary.dwarf import scan
from agent.binary.dwarf.sections import section_bytes


class CallFrames:
    """The call-frame information of one binary, each entry parsed when a pc needs it."""

    def __init__(self, info: DWARFInfo, key: Callable[[], str],
                 eh_index: Callable[[], tuple[int, bytes] | None] = lambda: None,
                 regs: dict[int, str] = AMD64.dwarf_regs) -> None:
        self.info = info
        self.regs = regs  # the architecture's register names by DWARF number
        self.key = key  # the binary's key in noop's cache ('' keeps nothing): Dwarf.cache_id
        # .eh_frame_hdr of the same file, (address, bytes): its table finds an FDE
        self.eh_index = eh_index

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
        elif self.info.has_EH_CFI():
            said, found = self._eh_fde_at(pc)
            if said:
                return found
        fdes = self._fdes
        i = bisect.bisect_right(self._fde_starts, pc) - 1
        if i < 0 or not fdes[i][0] <= pc < fdes[i][1]:
            return None
        return fdes[i][2]

    def _eh_fde_at(self, pc: int) -> tuple[bool, FDE | None]:
        """The FDE covering ``pc`` in .eh_frame (None: no FDE covers it), found by
        .eh_frame_hdr's search table and parsed alone; (False, None) when the table
        cannot say (absent, another encoding, or an entry that is not what the table
        took it for): the full list decides."""
        sec, index = self.info.eh_frame_sec, self._eh_index
        if sec is None or index is None:
            return False, None
        try:
            at = eh_fde_offset(index[1], index[0], pc)
        except (ValueError, IndexError, struct.error):
            return False, None
        if at is None:
            return True, None
        if at < 0:
            return False, None
        try:
            entry = self._eh_cfi._parse_entry_at(at - sec.address)
        except (ConstructError, DWARFError, ValueError, IndexError, KeyError, struct.error):
            return False, None  # not an entry where the table says: the full list
        if not isinstance(entry, FDE):
            return False, None
        lo = entry.header["initial_location"]
        return True, entry if lo <= pc < lo + entry.header["address_range"] else None

    @cached_property
    def _eh_index(self) -> tuple[int, bytes] | None:
        return self.eh_index()

    @cached_property
    def _eh_cfi(self) -> CallFrameInfo:
        """.eh_frame, whose entries pyelftools parses one at a time (a CIE once)."""
        sec = self.info.eh_frame_sec
        assert sec is not None  # asked only when the binary has one
        return CallFrameInfo(stream=sec.stream, size=sec.size, address=sec.address,
                             base_structs=self.info.structs, for_eh_frame=True)

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
        """The canonical frame address at ``pc`` as an offset from the stack pointer
        there (rsp: 8 at a function's first instruction; arm64's sp: 0), from the
        call-frame information; None when it is not based on the stack pointer or not
        described."""
        rule = self.cfa_rule_at(pc)
        return rule[1] if rule is not None and rule[0] in ("rsp", "sp") else None

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
        try:
            table = fde.get_decoded().table
        except (ConstructError, DWARFError, ValueError, KeyError, IndexError, struct.error):
            return None  # instructions pyelftools does not decode: not described, for noop
        for row in table:
            if row["pc"] > pc:
                break
            rule = row.get("cfa")
        if rule is None or rule.expr is not None or rule.reg not in self.regs:
            return None
        return self.regs[rule.reg], int(rule.offset)

    def return_address_at(self, pc: int) -> tuple[str, int] | None:
        """Where the return address is at ``pc``, by the rule of the entry's return
        address column: ("reg", number) while it is still in that register (arm64's
        link register, x30: the rule "same value", or none yet), ("cfa", offset) once
        it is saved at the canonical frame address plus ``offset``; None when not
        described (or by another rule)."""
        from elftools.dwarf.callframe import RegisterRule

        fde = self._fde_at(pc)
        if fde is None:
            return None
        if fde.cie is None:
            return None
        try:
            table = fde.get_decoded().table
            column = int(fde.cie["return_address_register"])
        except (ConstructError, DWARFError, ValueError, KeyError, IndexError, struct.error):
            return None
        rule = None
        for row in table:
            if row["pc"] > pc:
                break
            rule = row.get(column)
        if rule is None or rule.type == RegisterRule.SAME_VALUE:
            return ("reg", column)
        if rule.type == RegisterRule.OFFSET:
            return ("cfa", int(rule.arg))
        return None


_NAMES = frozenset(AMD64.dwarf_regs.values()) | frozenset(ARM64.dwarf_regs.values())


def _cfa_entry(value: Any) -> tuple[tuple[str, int] | None]:
    """A cached CFA rule, ``{"rule": [register, offset] | null}``, for ``cache.get``:
    the rule in a 1-tuple (so that no rule is not a miss); anything else raises."""
    rule = cache.check(dict[str, tuple[str, int] | None], value)["rule"]
    if rule is not None and rule[0] not in _NAMES:
        raise ValueError(f"no register {rule[0]!r}")
    return ((rule[0], rule[1]) if rule is not None else None,)


# The pointer encodings of .eh_frame_hdr (DW_EH_PE_*): a value's size by its format.
_ENCODED_SIZE = {0x00: 8, 0x02: 2, 0x03: 4, 0x04: 8, 0x0A: 2, 0x0B: 4, 0x0C: 8}
_UDATA4, _DATAREL_SDATA4 = 0x03, 0x3B


def eh_fde_offset(hdr: bytes, hdr_address: int, pc: int) -> int | None:
    """The address of the .eh_frame FDE whose range may hold ``pc``: the last entry of
    .eh_frame_hdr's search table (sorted by initial location) starting at or below it;
    None when none does; -1 when the header uses encodings this does not read (the
    linkers write a udata4 count and a datarel sdata4 table)."""
    if len(hdr) < 4 or hdr[0] != 1:
        return -1
    size = _ENCODED_SIZE.get(hdr[1] & 0x0F)
    if size is None or hdr[2] != _UDATA4 or hdr[3] != _DATAREL_SDATA4:
        return -1
    pos = 4 + size  # after the version, the encodings and eh_frame_ptr
    (count,) = struct.unpack_from("<I", hdr, pos)
    pos += 4
    if pos + 8 * count > len(hdr):
        return -1
    table = struct.unpack_from(f"<{2 * count}i", hdr, pos)
    i = bisect.bisect_right(table[0::2], pc - hdr_address) - 1
    return hdr_address + table[2 * i + 1] if i >= 0 else None
