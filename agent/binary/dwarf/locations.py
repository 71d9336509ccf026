"""Where a value lives at a given PC: DWARF location expressions and lists, as pieces.

A location is a tuple of pieces, each a register, a stack slot (offset from the stack
pointer at the function's first instruction), memory at a register plus an offset
(rustc passes a large value by reference and says so), a register plus an offset as
the value itself (an address LLVM computes from another), or nothing (optimized out). Only the
forms compilers emit for variables are evaluated; anything else is "not available"
and the caller falls back to the ABI.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from elftools.dwarf.die import DIE
from elftools.dwarf.dwarf_expr import DWARFExprParser
from elftools.dwarf.locationlists import BaseAddressEntry, LocationEntry

from agent.binary.dwarf.dies import attr
from agent.binary.dwarf.reader import Dwarf


@dataclass(frozen=True, slots=True)
class Piece:
    """One piece of a value: in ``reg``, at ``stack`` (SP-relative at entry), in memory
    at ``reg`` + ``at``, or none of these."""

    size: int
    reg: str | None = None
    stack: int | None = None
    at: int | None = None
    add: int = 0  # with ``reg``: the value is the register plus this (an address)

    def to_json(self) -> dict[str, Any]:
        if self.reg is not None and self.at is not None:
            return {"memory": {"reg": self.reg, "offset": self.at}, "size": self.size}
        if self.reg is not None and self.add:
            return {"reg": self.reg, "add": self.add, "size": self.size}
        if self.reg is not None:
            return {"reg": self.reg, "size": self.size}
        if self.stack is not None:
            return {"stack": self.stack, "size": self.size}
        return {"optimized_out": True, "size": self.size}

    def __str__(self) -> str:
        if self.reg is not None and self.at is not None:
            return f"[{self.reg}{self.at:+d}]" if self.at else f"[{self.reg}]"
        if self.reg is not None and self.add:
            return f"{self.reg}{self.add:+d}"
        if self.reg is not None:
            return self.reg if self.size >= 8 else f"{self.reg}[{self.size}]"
        if self.stack is not None:
            return f"{self.stack}(sp)" + (f"[{self.size}]" if self.size != 8 else "")
        return f"<optimized out>[{self.size}]"


Location = tuple[Piece, ...]


class Unavailable(Exception):
    """The expression cannot be turned into pieces valid at the function's entry."""


class LocationReader:
    """Evaluates DW_AT_location of variables at a PC, for one binary."""

    def __init__(self, dwarf: Dwarf) -> None:
        self.dwarf = dwarf
        self._lists = dwarf.info.location_lists()
        arch = dwarf.elf.arch  # its registers' DWARF numbers, the CFA at entry
        self._regs, self._sp, self._entry_cfa = arch.dwarf_regs, arch.sp, arch.cfa_at_entry

    def expression_at(self, var: DIE, pc: int) -> list[int] | None:
        """The raw location expression of ``var`` valid at ``pc``, or None if none covers it."""
        a = var.attributes.get("DW_AT_location")
        if a is None:
            return None
        if a.form == "DW_FORM_exprloc" or (a.form.startswith("DW_FORM_block")):
            return list(a.value)
        return next((expr for lo, hi, expr in self.ranges(var) if lo <= pc < hi), None)

    def ranges(self, var: DIE) -> list[tuple[int, int, list[int]]]:
        """The [low, high) address ranges of ``var``'s location list, each with its
        expression; empty for a single expression (valid everywhere) or none."""
        a = var.attributes.get("DW_AT_location")
        if a is None or self._lists is None or a.form == "DW_FORM_exprloc" or \
                a.form.startswith("DW_FORM_block"):
            return []
        offset = a.value
        if a.form == "DW_FORM_loclistx":
            # The index is the raw value (pyelftools may already have turned the value
            # into an offset, or may not).
            offset = _loclistx_offset(self.dwarf, var, a.raw_value)
        base = attr(var.cu.get_top_DIE(), "DW_AT_low_pc", 0) or 0
        out = []
        for entry in self._lists.get_location_list_at_offset(offset, die=var):
            if isinstance(entry, BaseAddressEntry):
                base = entry.base_address
            elif isinstance(entry, LocationEntry):
                lo, hi = entry.begin_offset, entry.end_offset
                if not entry.is_absolute:
                    lo, hi = lo + base, hi + base
                out.append((lo, hi, list(entry.loc_expr)))
        return out

    def pieces(self, expr: list[int], size: int, frame_base: list[int] | None,
               at_entry: bool, cfa: int | None = None, cfa_reg: str = "rsp") -> Location:
        """Evaluate ``expr`` into pieces; raise Unavailable for what is not valid at entry.

        With ``cfa`` (the canonical frame address as an offset from rsp at the PC the
        expression was taken at, from the call-frame information), stack pieces are
        rsp-relative at that PC instead of at entry. With ``cfa_reg`` another register
        (rbp, once a prologue has set up a frame pointer), the CFA is that register
        plus ``cfa``, and a frame slot is memory at that register plus an offset."""
        ops = DWARFExprParser(self.dwarf.info.structs).parse_expr(expr)
        pieces: list[Piece] = []
        pending: list[Any] = []  # ops since the last DW_OP_piece
        for op in ops:
            if op.op_name == "DW_OP_piece":
                pieces.append(self._one(pending, op.args[0], frame_base, at_entry, cfa,
                                        cfa_reg))
                pending = []
            else:
                pending.append(op)
        if pending or not pieces:
            used = sum(p.size for p in pieces)
            pieces.append(self._one(pending, max(size - used, 0) or size, frame_base, at_entry,
                                    cfa, cfa_reg))
        return tuple(pieces)

    def _one(self, ops: list[Any], size: int, frame_base: list[int] | None,
             at_entry: bool, cfa: int | None, cfa_reg: str = "rsp") -> Piece:
        if not ops:
            return Piece(size)
        first = ops[0].op_name
        if len(ops) == 1 and first.startswith("DW_OP_reg"):
            num = ops[0].args[0] if first == "DW_OP_regx" else int(first[9:])
            return Piece(size, reg=self._regs.get(num, f"dwarf{num}"))
        if len(ops) == 2 and first.startswith("DW_OP_breg") \
                and ops[1].op_name == "DW_OP_stack_value":
            num = ops[0].args[0] if first == "DW_OP_bregx" else int(first[10:])
            if num != self._sp and num in self._regs:  # the value is reg + offset
                return Piece(size, reg=self._regs[num], add=ops[0].args[-1])
        if len(ops) == 1 and first.startswith("DW_OP_breg"):
            num = ops[0].args[0] if first == "DW_OP_bregx" else int(first[10:])
            if num != self._sp and num in self._regs:  # in memory at reg + offset
                return Piece(size, reg=self._regs[num], at=ops[0].args[-1])
        base, offset = self._stack_address(ops, frame_base, at_entry, cfa, cfa_reg)
        if base != "sp":
            return Piece(size, reg=base, at=offset)
        return Piece(size, stack=offset)

    def _stack_address(self, ops: list[Any], frame_base: list[int] | None,
                       at_entry: bool, cfa: int | None = None, cfa_reg: str = "rsp"
                       ) -> tuple[str, int]:
        """The address a memory-location expression computes: ("sp", offset) relative
        to the stack pointer (at entry, or where ``cfa`` was taken), or (register,
        offset) relative to the frame register the CFA or frame base is kept in."""
        stack: list[tuple[str, int]] = []  # (base, offset): base "sp", a register, or ""
        here = cfa if cfa is not None else self._entry_cfa
        cfa_base = "sp" if cfa_reg in ("rsp", "sp") else cfa_reg
        sp = self._sp
        for op in ops:
            name, args = op.op_name, op.args
            if name == "DW_OP_call_frame_cfa":
                stack.append((cfa_base, here))
            elif name == "DW_OP_fbreg":
                if frame_base is None:
                    raise Unavailable("DW_OP_fbreg without a frame base")
                base, off = self._frame_base(frame_base, at_entry, here, cfa_base)
                stack.append((base, off + args[0]))
            elif name == f"DW_OP_breg{sp}" or (name == "DW_OP_bregx" and args[0] == sp):
                if not at_entry and cfa is None:
                    raise Unavailable("rsp-relative location away from entry")
                stack.append(("sp", args[-1]))
            elif name.startswith("DW_OP_lit"):
                stack.append(("", int(name[9:])))
            elif name in ("DW_OP_consts", "DW_OP_constu") or name.startswith("DW_OP_const"):
                stack.append(("", args[0]))
            elif name == "DW_OP_plus_uconst" and stack:
                b, o = stack.pop()
                stack.append((b, o + args[0]))
            elif name in ("DW_OP_plus", "DW_OP_minus") and len(stack) >= 2:
                (b2, o2), (b1, o1) = stack.pop(), stack.pop()
                if name == "DW_OP_plus" and not (b1 and b2):
                    stack.append((b1 or b2, o1 + o2))
                elif name == "DW_OP_minus" and not b2:
                    stack.append((b1, o1 - o2))
                else:
                    raise Unavailable(f"cannot evaluate {name}")
            else:
                raise Unavailable(f"{name} is not a location noop evaluates")
        if len(stack) != 1 or not stack[0][0]:
            raise Unavailable("not a stack address")
        base, offset = stack[0]
        if at_entry and offset < self._entry_cfa:
            # Below the return address: the callee's own frame, written by its prologue.
            raise Unavailable(f"frame slot {offset - self._entry_cfa:+d}(cfa) is filled "
                              "by the prologue")
        return base, offset

    def _frame_base(self, expr: list[int], at_entry: bool, cfa: int | None = None,
                    cfa_base: str = "sp") -> tuple[str, int]:
        cfa = self._entry_cfa if cfa is None else cfa
        ops = DWARFExprParser(self.dwarf.info.structs).parse_expr(expr)
        if len(ops) == 1 and ops[0].op_name == "DW_OP_call_frame_cfa":
            return cfa_base, cfa
        number = ops[0].op_name[9:] if len(ops) == 1 and \
            ops[0].op_name.startswith("DW_OP_reg") else ""
        sp = self._sp
        if not at_entry and number.isdigit() and int(number) != sp and \
                int(number) in self._regs:
            # A frame pointer (rbp at -O0): valid inside the body, after the prologue.
            return self._regs[int(number)], 0
        if not at_entry and len(ops) == 1 and ops[0].op_name == f"DW_OP_reg{sp}":
            # The frame base is rsp itself at the PC (inside the function's body, as at
            # an inlined copy; a single expression for a whole -O0 function is valid
            # only after the prologue, not at entry).
            return "sp", 0
        if at_entry and len(ops) == 1 and ops[0].op_name == f"DW_OP_breg{sp}":
            return "sp", ops[0].args[0]
        # rbp- or post-prologue rsp-based frames say nothing about the first instruction.
        raise Unavailable("frame base is set up by the prologue")


def _loclistx_offset(dwarf: Dwarf, die: DIE, index: int) -> int:
    """DWARF 5 DW_FORM_loclistx: an index into the unit's offset table."""
    top = die.cu.get_top_DIE()
    base = attr(top, "DW_AT_loclists_base", 0)
    sec = dwarf.info.debug_loclists_sec
    if sec is None:
        raise Unavailable("no .debug_loclists")
    sec.stream.seek(base + index * 4)
    rel = int.from_bytes(sec.stream.read(4), "little")
    return int(base + rel)
