"""The DIEs of the DWARF noop writes from a stripped Go binary's runtime metadata: each
kind's abbreviation (its tag, whether it has children, its attributes and their
forms), and what every unit's top DIE says: Go's language code, and the producer
string that tells readers where this DWARF came from.
"""

from __future__ import annotations

PRODUCER = "noop from Go runtime metadata (pclntab, type descriptors); regabi"
GO_LANGUAGE = 0x16

# (tag, children, ((attribute, form), …)) by abbreviation code
ABBREVS: dict[str, tuple[str, bool, tuple[tuple[str, str], ...]]] = {
    "cu": ("compile_unit", True, (("name", "string"), ("language", "data2"),
                                   ("producer", "string"), ("low_pc", "addr"))),
    "cu_ranges": ("compile_unit", True, (("name", "string"), ("language", "data2"),
                                         ("producer", "string"), ("low_pc", "addr"),
                                         ("ranges", "sec_offset"),
                                         ("stmt_list", "sec_offset"))),
    "base": ("base_type", False, (("name", "string"), ("encoding", "data1"),
                                  ("byte_size", "udata"), ("go_kind", "data1"))),
    "struct": ("structure_type", True, (("name", "string"), ("byte_size", "udata"),
                                        ("go_kind", "data1"))),
    "struct_empty": ("structure_type", False, (("name", "string"), ("byte_size", "udata"),
                                               ("go_kind", "data1"))),
    "slice": ("structure_type", True, (("name", "string"), ("byte_size", "udata"),
                                       ("go_kind", "data1"), ("go_elem", "ref_addr"))),
    "member": ("member", False, (("name", "string"), ("data_member_location", "udata"),
                                 ("type", "ref_addr"), ("go_embedded", "flag"))),
    "pointer": ("pointer_type", False, (("name", "string"), ("type", "ref_addr"),
                                        ("go_kind", "data1"))),
    "void_pointer": ("pointer_type", False, (("name", "string"), ("go_kind", "data1"))),
    "typedef": ("typedef", False, (("name", "string"), ("type", "ref_addr"),
                                   ("go_kind", "data1"))),
    "array": ("array_type", True, (("name", "string"), ("type", "ref_addr"),
                                   ("byte_size", "udata"), ("go_kind", "data1"))),
    "subrange": ("subrange_type", False, (("count", "udata"),)),
    "func_type": ("subroutine_type", False, (("name", "string"), ("byte_size", "udata"),
                                             ("go_kind", "data1"))),
    "subprogram": ("subprogram", True, (("name", "string"), ("low_pc", "addr"),
                                        ("high_pc", "data8"), ("external", "flag_present"),
                                        ("prototyped", "flag"))),
    "abstract": ("subprogram", False, (("name", "string"), ("inline", "data1"))),
    "param": ("formal_parameter", False, (("name", "string"), ("type", "ref_addr"),
                                          ("variable_parameter", "flag"))),
    "inlined": ("inlined_subroutine", True, (("abstract_origin", "ref_addr"),
                                             ("ranges", "sec_offset"), ("call_file", "udata"),
                                             ("call_line", "udata"))),
}
