"""Whether a C or Rust function is still called by its platform's convention, and so
whether the ABI may say where a value is when DWARF does not (Go's is always kept).

Compilers rewrite the convention of functions internal to a program: LLVM removes
unused arguments and passes fields instead of pointers (dead-argument elimination,
argument promotion) and marks the function DW_CC_nocall; GCC makes clones with new
signatures (``foo.isra.0``, ``foo.constprop.0``, ``foo.part.0``). LLVM also leaves
the register of an argument its callee never uses as it was, even where the signature
stays. The ABI's answer is then whatever the register holds, so noop gives none.

Pure DWARF facts: this module reads DIEs and shapes, never memory or the kernel.
"""

from __future__ import annotations

from collections.abc import Sequence

from elftools.dwarf.die import DIE

from agent.binary.abi.shape import Shape
from agent.binary.dwarf.dies import attr, referred

DW_CC_NOCALL = 0x3
# Suffixes of the copies GCC (isra, constprop, part, cold) and LLVM (llvm: a local
# function made global by link-time optimisation, free to be rewritten) give new names.
CLONE_SUFFIXES = (".isra", ".constprop", ".part", ".cold", ".llvm.")


def changed(symbol: str, die: DIE, origin: DIE) -> str:
    """Why the function at ``symbol`` (its concrete DIE ``die``, its declaration
    ``origin``) may not be called by the platform's convention; '' when nothing says so."""
    if DW_CC_NOCALL in (attr(die, "DW_AT_calling_convention"),
                        attr(origin, "DW_AT_calling_convention")):
        return "DW_CC_nocall: the compiler changed how it is called"
    suffix = next((s for s in CLONE_SUFFIXES if s in symbol), None)
    if suffix is not None:
        return (f"{symbol} is a compiler clone ({suffix.strip('.')}): its arguments may be "
                "removed or replaced")
    if origin is not die:
        declared = [c for c in origin.iter_children() if c.tag == "DW_TAG_formal_parameter"]
        carried = [c for c in die.iter_children() if c.tag == "DW_TAG_formal_parameter"]
        if "DW_AT_specification" in die.attributes:
            # A definition of a declared method (rustc's, C++'s): its parameters are its
            # own DIEs, with the declaration's types.
            same = [_type_offset(c) for c in carried] == [_type_offset(c) for c in declared]
        else:
            same = [_origin_offset(c) for c in carried] == [c.offset for c in declared]
        if not same:
            return "a copy that does not carry its declaration's parameters in order"
    return ""


def _type_offset(die: DIE) -> int | None:
    t = referred(die, "DW_AT_type")
    return None if t is None else t.offset


def _origin_offset(die: DIE) -> int:
    origin = referred(die, "DW_AT_abstract_origin")
    return die.offset if origin is None else origin.offset


def built_by_llvm(die: DIE) -> bool:
    """Whether the unit of ``die`` was compiled by LLVM (clang, rustc, ...)."""
    producer = attr(die.cu.get_top_DIE(), "DW_AT_producer", b"") or b""
    return b"clang" in producer or b"LLVM" in producer or b"rustc" in producer


def unused_by_llvm(param: DIE) -> str:
    """Why an LLVM-built parameter with no location anywhere cannot be read from its
    register: the function never uses it, and LLVM's dead-argument elimination lets
    callers in the same module leave that register as it was; '' otherwise."""
    if "DW_AT_location" in param.attributes or "DW_AT_const_value" in param.attributes:
        return ""
    if not built_by_llvm(param):
        return ""
    return "the function never uses it, and callers compiled by LLVM need not pass it"


def rust_unplaced(args: Sequence[Shape], names: Sequence[str]) -> list[str]:
    """Per argument, why the System V placement may not be where rustc passes it ('' when
    it is): rustc's own ABI passes scalars and pointers as System V does, but a tuple of
    two u32 in two registers, a struct of two f32 in two XMM registers and any other
    aggregate over eight bytes by reference. Only scalars, thin pointers, fat pointers
    (``&str``, ``&[T]``, ``&dyn T``: two words) and zero-sized values are placed; every
    argument after one that is not is left unplaced too, since it may have taken
    registers the others would have used."""
    out: list[str] = []
    after = ""
    for shape, name in zip(args, names, strict=True):
        if after:
            out.append(after)
            continue
        if shape.size == 0 or _scalar(shape) or _fat_pointer(shape, name):
            out.append("")
            continue
        out.append(f"rustc's ABI for {name} is not System V's, and noop does not model it")
        after = f"it comes after {name}, whose registers noop does not model"
    return out


def rust_result_unplaced(result: Shape | None, name: str) -> str:
    """Why noop cannot say where rustc returns ``result`` ('' when it can: a scalar or a
    thin pointer, in rax or xmm0; over 16 bytes, in memory whose address is in rax at
    the return; or nothing)."""
    if result is None or result.size == 0 or _scalar(result) or result.size > 16:
        return ""
    return f"rustc returns {name} its own way, which noop does not model"


def _scalar(s: Shape) -> bool:
    return s.kind in ("int", "float") and 0 < s.size <= 8


def _fat_pointer(s: Shape, name: str) -> bool:
    words = [(off, leaf.size) for off, leaf in s.leaves()]
    return name.startswith(("&", "*const ", "*mut ")) and words == [(0, 8), (8, 8)]


def result_unreadable(lang: str, result: Shape) -> str:
    """Why a C or Rust result is nowhere a uprobe can read it as a value ('' when it is
    in registers, or in memory whose address rax holds at the return: System V's MEMORY
    class, rustc's results over 16 bytes): a long double on the x87 stack."""
    if lang != "rust" and result.kind == "x87":
        return "returned in st0, an x87 register a uprobe cannot read"
    return ""
