"""The Procedure Call Standard for the Arm 64-bit Architecture (AAPCS64, "Parameter
passing", the Linux variant) for C.

Arguments go, in order, to the next general register (x0-x7: NGRN) or the next SIMD
and floating-point register (v0-v7: NSRN), else to the stack (NSAA, from SP at entry,
each 8-aligned, 16 for a 16-aligned one):

- an integer or pointer: one general register; a 16-byte one two, from an even one;
- a float, double or long double (IEEE quad): one v register;
- a homogeneous floating-point aggregate (one to four members of one float type, a
  complex number among them): one v register per member while enough are left, else
  the stack, and no v register after it is used;
- another aggregate over 16 bytes: copied by the caller, its address passed as an
  integer (``by_reference``; the location is the copy, where the register points, or
  none, ``()``, when the address went to the stack);
- another aggregate of up to 16 bytes: in one or two general registers (from an even
  one when it is 16-aligned) while enough are left, else the stack, and no general
  register after it is used.

A result comes back where the same rules would put a first argument (x0, x1; v0-v3);
one that would go to memory is written where the caller's x8 points, which the
callee need not keep: its location is none, ``()``.
"""

from __future__ import annotations

from collections.abc import Sequence

from agent.binary.abi.shape import Shape, align_up
from agent.binary.abi.sysv import Assignment
from agent.binary.dwarf.locations import Location, Piece

INT_REGS = tuple(f"x{n}" for n in range(8))
FP_REGS = tuple(f"v{n}" for n in range(8))
_FLOAT_KINDS = ("float", "x87")  # a long double is IEEE quad on arm64, in a v register


def homogeneous(s: Shape) -> tuple[int, int] | None:
    """(members, each one's size) of ``s`` when it is a homogeneous floating-point
    aggregate (a struct, array, union or complex of one to four floats of one size,
    each at its own place), else None."""
    if s.kind not in ("struct", "array", "complex", "union") or not s.size:
        return None
    leaves = s.leaves()
    if not leaves or any(leaf.kind not in _FLOAT_KINDS for _o, leaf in leaves):
        return None
    size = leaves[0][1].size
    offsets = sorted({off for off, _l in leaves})
    if any(leaf.size != size for _o, leaf in leaves) or \
            offsets != [k * size for k in range(len(offsets))] or \
            s.size != size * len(offsets) or not 1 <= len(offsets) <= 4:
        return None
    return len(offsets), size


def _scalar(s: Shape) -> bool:
    return s.kind not in ("struct", "array", "complex", "union", "string", "slice", "iface")


def assign(args: Sequence[Shape], result: Shape | None) -> Assignment:
    ngrn = nsrn = nsaa = 0
    locations: list[Location] = []
    by_ref: list[bool] = []
    results: tuple[Location, ...] = ()
    if result is not None and result.size:
        placed, _g, _s = _registers(result, 0, 0)
        results = (placed if placed is not None else (),)
    for s in args:
        indirect = not _scalar(s) and homogeneous(s) is None and s.size > 16
        shape = Shape("int", 8, 8) if indirect else s
        placed, g, v = _registers(shape, ngrn, nsrn)
        if placed is not None and indirect:  # the copy, where the register points
            locations.append((Piece(s.size, reg=placed[0].reg, at=0),))
            ngrn, nsrn = g, v
        elif placed is not None:
            locations.append(placed)
            ngrn, nsrn = g, v
        else:  # the stack; the register file it would have used is spent
            if shape.kind in _FLOAT_KINDS or homogeneous(shape) is not None:
                nsrn = len(FP_REGS)
                align = 8 if homogeneous(shape) is not None else max(8, shape.align)
            else:
                ngrn = len(INT_REGS)
                align = max(8, min(_alignment(shape), 16))
            nsaa = align_up(nsaa, align)
            # a copy's address on the stack: () (nowhere noop reads it from)
            locations.append(() if indirect else (Piece(shape.size, stack=nsaa),))
            nsaa += align_up(shape.size, 8)
        by_ref.append(indirect)
    return Assignment(tuple(locations), results, tuple(by_ref))


def _alignment(s: Shape) -> int:
    """``s``'s natural alignment, a 16-byte integer's (``__int128``) being 16."""
    return max([s.align, *(16 if leaf.kind == "int" and leaf.size == 16 else leaf.align
                           for _o, leaf in s.leaves())])


def _registers(s: Shape, ngrn: int, nsrn: int) -> tuple[Location | None, int, int]:
    """Where ``s`` goes in registers from NGRN ``ngrn`` and NSRN ``nsrn`` (None: not
    in registers, or not at all for a result over 16 bytes), and the two after it."""
    hfa = homogeneous(s)
    if s.kind in _FLOAT_KINDS or hfa is not None:
        members, size = hfa if hfa is not None else (1, s.size)
        if nsrn + members > len(FP_REGS):
            return None, ngrn, nsrn
        return tuple(Piece(size, reg=FP_REGS[nsrn + k]) for k in range(members)), \
            ngrn, nsrn + members
    if s.size > 16:
        return None, ngrn, nsrn
    words = (s.size + 7) // 8
    if _alignment(s) == 16:
        ngrn += ngrn % 2
    if ngrn + words > len(INT_REGS):
        return None, ngrn, nsrn
    pieces = tuple(Piece(min(8, s.size - 8 * k), reg=INT_REGS[ngrn + k]) for k in range(words))
    return pieces, ngrn + words, nsrn
