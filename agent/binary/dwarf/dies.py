"""One DIE's own facts, as pyelftools reads them: its tag, an attribute's value, its
name, the DIE an attribute refers to (and through a copy's references, the DIE that
holds its name and type), and where its code ends. Every reader of DWARF here needs
them, with or without a ``Dwarf``.
"""

from __future__ import annotations

from typing import Any

from elftools.common.exceptions import DWARFError
from elftools.dwarf.die import DIE

# Go's own DWARF attributes (cmd/internal/dwarf): the reflect kind of a type.
DW_AT_GO_KIND = 0x2900

# The DIEs whose children are named inside them: namespaces, and the types that hold
# Rust's and C++'s methods.
NAMESPACE_TAGS = frozenset({"DW_TAG_namespace", "DW_TAG_structure_type",
                            "DW_TAG_class_type", "DW_TAG_union_type",
                            "DW_TAG_enumeration_type"})


def tag(die: DIE) -> str:
    """The DIE's tag name (pyelftools gives an int for tags it does not know)."""
    if isinstance(die.tag, str):
        return die.tag
    return f"DW_TAG_{die.tag:#x}" if isinstance(die.tag, int) else "DW_TAG_null"


def attr(die: DIE, name: str | int, default: Any = None) -> Any:
    a = die.attributes.get(name)  # type: ignore[arg-type]  # Go's own codes are ints
    return default if a is None else a.value


_REF_FORMS = frozenset({"DW_FORM_ref1", "DW_FORM_ref2", "DW_FORM_ref4", "DW_FORM_ref8",
                        "DW_FORM_ref_udata", "DW_FORM_ref_addr", "DW_FORM_ref_sig8",
                        "DW_FORM_ref_sup4", "DW_FORM_ref_sup8", "DW_FORM_GNU_ref_alt"})


def die_name(die: DIE) -> str | None:
    v = attr(die, "DW_AT_name")
    return v.decode(errors="replace") if isinstance(v, bytes) else None


# What DW_AT_type never refers to in DWARF a compiler writes: a type's own members,
# variables and code (a reference bent to one of them is damage)
_NOT_TYPES = frozenset({
    "DW_TAG_member", "DW_TAG_variable", "DW_TAG_formal_parameter", "DW_TAG_subprogram",
    "DW_TAG_compile_unit", "DW_TAG_partial_unit", "DW_TAG_type_unit",
    "DW_TAG_lexical_block", "DW_TAG_inlined_subroutine", "DW_TAG_label",
    "DW_TAG_call_site", "DW_TAG_GNU_call_site", "DW_TAG_enumerator", "DW_TAG_namespace"})


def referred(die: DIE, name: str) -> DIE | None:
    """The DIE attribute ``name`` refers to (None without one); a DWARFError when its
    form is not a reference (damaged DWARF: pyelftools fails in its own message)."""
    got = die.attributes.get(name)
    if got is None:
        return None
    if got.form not in _REF_FORMS or not isinstance(got.raw_value, int):
        raise DWARFError(f"{name} of the DIE at +{die.offset:#x} has form {got.form}, "
                         "not a reference")
    target = die.get_DIE_from_attribute(name)
    if name == "DW_AT_type" and target.tag in _NOT_TYPES:  # a member typed by itself
        raise DWARFError(f"the type of the DIE at +{die.offset:#x} is the "
                         f"{target.tag} at +{target.offset:#x}, not a type")
    return target


def origin_of(die: DIE) -> DIE:
    """The DIE holding name and type: follow abstract_origin / specification."""
    for _ in range(4):
        nxt = referred(die, "DW_AT_abstract_origin") or referred(die, "DW_AT_specification")
        if nxt is None:
            break
        die = nxt
    return die


def high_pc(die: DIE) -> int:
    """DW_AT_high_pc as an address (DWARF ≥ 4 may store it as a length)."""
    a = die.attributes["DW_AT_high_pc"]
    low = attr(die, "DW_AT_low_pc", 0)
    if a.form in ("DW_FORM_addr", "DW_FORM_addrx", "DW_FORM_addrx1", "DW_FORM_addrx2",
                  "DW_FORM_addrx4"):
        return int(a.value)
    return int(low) + int(a.value)
