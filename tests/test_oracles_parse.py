# Captured tool output is kept verbatim: long lines, and the trailing space
# llvm-dwarfdump prints after a location list's offset.
# ruff: noqa: E501, W291
"""Unit tests of the oracle parsers on text captured from gdb 13 and llvm-dwarfdump 14.

No tool runs here: the samples are kept as they were printed (source paths
shortened), so these tests show what each parser accepts and what it makes
of it.
"""

from __future__ import annotations

from typing import ClassVar

import pytest
from oracles import dwarfdump, gdb
from oracles.dwarfdump import Die, Piece

# gdb -batch -ex 'set language c' -ex "ptype /o struct 'main.Containers'" (Go 1.19)
GDB_GO_CONTAINERS = """\
/* offset      |    size */  type = struct main.Containers {
/*      0      |      16 */    struct string {
/*      0      |       8 */        uint8 *str;
/*      8      |       8 */        int len;

                                   /* total size (bytes):   16 */
                               } Name;
/*     16      |      24 */    struct []string {
/*     16      |       8 */        struct string *array;
/*     24      |       8 */        int len;
/*     32      |       8 */        int cap;

                                   /* total size (bytes):   24 */
                               } Tags;
/*     40      |      24 */    [3][2]int32 Grid;
/*     64      |       8 */    map[string]int Index;
/*     72      |       8 */    chan int Events;
/*     80      |      16 */    interface {} Any;
/*     96      |      16 */    main.Shape Sh;
/*    112      |       8 */    main.Containers *Next;
/*    120      |       1 */    func(int) error cb;
/* XXX  7-byte hole      */
/*    128      |       1 */    func() done;
/* XXX  7-byte hole      */
/*    136      |       5 */    [5]uint8 Bytes;
/*    141      |       1 */    bool Flag;
/* XXX  2-byte padding   */

                               /* total size (bytes):  144 */
                             }
"""

# An anonymous struct member in Go: its type name contains braces and semicolons.
GDB_GO_ORDER_TAIL = """\
type = struct main.Order {
/*      0      |       8 */    main.Base Base;
/*     72      |       1 */    bool Paid;
/* XXX  7-byte hole      */
/*     80      |      16 */    struct struct { main.rev int16; main.stamp int64 } {
/*     80      |       2 */        int16 rev;
/* XXX  6-byte hole      */
/*     88      |       8 */        int64 stamp;

                                   /* total size (bytes):   16 */
                               } meta;

                               /* total size (bytes):   96 */
                             }
"""

GDB_C_FLAGS = """\
/* offset      |    size */  type = struct flags {
/*      0: 0   |       4 */    unsigned int ready : 1;
/*      0: 1   |       4 */    unsigned int mode : 3;
/*      0: 4   |       4 */    unsigned int level : 7;
/*      1: 3   |       4 */    unsigned int wide : 13;
/*      3      |       1 */    unsigned char tail;
/* XXX  4-byte hole      */
/*      8: 0   |       8 */    uint64_t big : 40;
/*     13: 0   |       2 */    int16_t small : 5;
/*     13: 5   |       1 */    signed char sign : 2;
/* XXX  1-bit padding    */
/* XXX  2-byte padding   */

                               /* total size (bytes):   16 */
                             }
"""

GDB_C_UNION = """\
/* offset      |    size */  type = union value {
/*                     8 */    int64_t i;
/*                     8 */    double d;
/*                    12 */    char bytes[12];
/*                     8 */    struct {
/*      0      |       4 */        uint32_t lo;
/*      4      |       4 */        uint32_t hi;

                                   /* total size (bytes):    8 */
                               } parts;

                               /* total size (bytes):   16 */
                             }
"""

GDB_C_JOB_AND_PACKET = """\
/* offset      |    size */  type = struct packet {
/*      0      |       2 */    uint16_t kind;
/* XXX  2-byte hole      */
/*      4      |      16 */    union {
/*                     4 */        uint32_t addr4;
/*                    16 */        uint8_t addr6[16];
/* XXX 12-byte padding   */

                                   /* total size (bytes):   16 */
                               };
/* XXX  4-byte hole      */
/*     24      |      16 */    struct {
/*     24      |       1 */        uint8_t ttl;
/* XXX  7-byte hole      */
/*     32      |       8 */        uint64_t seq;

                                   /* total size (bytes):   16 */
                               };
/*     40      |       8 */    void (*done)(struct job *);
/*     48      |      24 */    float weights[3][2];
/*     72      |      32 */    struct job *jobs[4];

                               /* total size (bytes):  104 */
                             }
"""

# Rust printed in C mode: declaration order, gdb's hole comments computed as
# if it were layout order, access labels and template suffixes.
GDB_RUST_OUTER = """\
/* offset      |    size */  type = struct layouts::shapes::Outer {
/*     24      |      16 */    struct layouts::shapes::Inner {
/*     38      |       1 */        bool flag;
/*     24      |       8 */        u64 count;
/* XXX  4-byte hole      */
/*     36      |       2 */        u16 small;
/*     32      |       4 */        f32 ratio;
/* XXX  4-byte padding   */

                                   /* total size (bytes):   16 */
                               } inner;
/*      0      |      16 */    struct (u8, i64) {
/*      0      |       1 */        u8 __0;
/* XXX  7-byte hole      */
/*      8      |       8 */        i64 __1;

                                   /* total size (bytes):   16 */
                               } pair;
/*     16      |       8 */    f64 scale;
/* XXX 16-byte hole      */
/*     40      |       4 */    i32 id;
/* XXX  4-byte padding   */

                               /* total size (bytes):   48 */
                             }
"""

GDB_RUST_STRING = """\
/* offset      |    size */  type = struct alloc::string::String {
                             private:
/*      0      |      24 */    struct alloc::vec::Vec<u8, alloc::alloc::Global> [with T = u8, A = struct alloc::alloc::Global] {
                                 private:
/*      0      |      16 */        struct alloc::raw_vec::RawVec<T, alloc::alloc::Global> [with T = T, A = A] {
                                     private:
/*     16      |       0 */            struct core::marker::PhantomData<T> [with T = T] {
                                           <no data fields>

                                           /* total size (bytes):    0 */
                                       } _marker;

                                       /* total size (bytes):   16 */
                                   } buf;
/*     16      |       8 */        usize len;

                                   /* total size (bytes):   24 */
                               } vec;

                               /* total size (bytes):   24 */
                             }
"""


def test_gdb_go_struct_with_nested_blocks_and_func_members() -> None:
    layout = gdb.parse_ptype_o(GDB_GO_CONTAINERS)
    assert (layout.kind, layout.name, layout.size) == ("struct", "main.Containers", 144)
    assert [(m.name, m.offset, m.size) for m in layout.members] == [
        ("Name", 0, 16), ("Tags", 16, 24), ("Grid", 40, 24), ("Index", 64, 8),
        ("Events", 72, 8), ("Any", 80, 16), ("Sh", 96, 16), ("Next", 112, 8),
        ("cb", 120, 1), ("done", 128, 1), ("Bytes", 136, 5), ("Flag", 141, 1),
    ]
    types = {m.name: m.type for m in layout.members}
    assert types["Name"] == "struct string"
    assert types["Grid"] == "[3][2]int32"
    assert types["Any"] == "interface {}"
    assert types["Next"] == "main.Containers *"
    assert [m.name for m in layout.members if gdb.is_go_func_size_error(m)] == ["cb", "done"]
    assert all(m.bit_size is None and m.bit_offset is None for m in layout.members)


def test_gdb_go_anonymous_struct_member() -> None:
    layout = gdb.parse_ptype_o(GDB_GO_ORDER_TAIL)
    assert layout.name == "main.Order" and layout.size == 96
    meta = layout.members[-1]
    assert (meta.name, meta.offset, meta.size) == ("meta", 80, 16)
    assert meta.type == "struct struct { main.rev int16; main.stamp int64 }"
    assert [m.name for m in layout.members] == ["Base", "Paid", "meta"]


def test_gdb_c_bitfields() -> None:
    layout = gdb.parse_ptype_o(GDB_C_FLAGS)
    assert (layout.name, layout.size) == ("flags", 16)
    got = [(m.name, m.offset, m.bit_offset, m.bit_size, m.size) for m in layout.members]
    assert got == [
        ("ready", 0, 0, 1, 4), ("mode", 0, 1, 3, 4), ("level", 0, 4, 7, 4),
        ("wide", 1, 3, 13, 4), ("tail", 3, None, None, 1), ("big", 8, 0, 40, 8),
        ("small", 13, 0, 5, 2), ("sign", 13, 5, 2, 1),
    ]
    assert [m.bit_position for m in layout.members if m.bit_size] == [0, 1, 4, 11, 64, 104, 109]
    assert layout.members[3].type == "unsigned int"


def test_gdb_c_union_members_have_no_offset_column() -> None:
    layout = gdb.parse_ptype_o(GDB_C_UNION)
    assert (layout.kind, layout.name, layout.size) == ("union", "value", 16)
    assert [(m.name, m.offset, m.size) for m in layout.members] == [
        ("i", 0, 8), ("d", 0, 8), ("bytes", 0, 12), ("parts", 0, 8)]
    assert layout.members[2].type == "char[12]"


def test_gdb_c_anonymous_members_function_pointers_arrays() -> None:
    layout = gdb.parse_ptype_o(GDB_C_JOB_AND_PACKET)
    assert [(m.name, m.type, m.offset, m.size) for m in layout.members] == [
        ("kind", "uint16_t", 0, 2),
        ("", "union", 4, 16),
        ("", "struct", 24, 16),
        ("done", "void (*)(struct job *)", 40, 8),
        ("weights", "float[3][2]", 48, 24),
        ("jobs", "struct job *[4]", 72, 32),
    ]


def test_gdb_rust_in_c_mode_keeps_declaration_order() -> None:
    layout = gdb.parse_ptype_o(GDB_RUST_OUTER)
    assert layout.name == "layouts::shapes::Outer" and layout.size == 48
    assert [(m.name, m.offset, m.size) for m in layout.members] == [
        ("inner", 24, 16), ("pair", 0, 16), ("scale", 16, 8), ("id", 40, 4)]


def test_gdb_rust_template_suffixes_access_labels_and_empty_members() -> None:
    layout = gdb.parse_ptype_o(GDB_RUST_STRING)
    assert (layout.name, layout.size) == ("alloc::string::String", 24)
    assert [(m.name, m.offset, m.size) for m in layout.members] == [("vec", 0, 24)]
    assert layout.members[0].type.startswith("struct alloc::vec::Vec<u8, alloc::alloc::Global>")


def test_gdb_header_without_offset_banner() -> None:
    text = ("type = struct {\n/*      0      |       4 */    int x;\n"
            "/*      4      |       4 */    int y;\n\n"
            "                               /* total size (bytes):    8 */\n}\n")
    layout = gdb.parse_ptype_o(text)
    assert (layout.name, layout.size, [m.name for m in layout.members]) == ("", 8, ["x", "y"])


@pytest.mark.parametrize("text", [
    "No struct type named nonexistent.X.\n",
    "type = struct a {\n/*      0      |       4 */    int x;\n",  # cut short
    "type = struct a {\n/*      0      |       4 */    int x;\n}\n",  # no total size
])
def test_gdb_rejects_what_it_cannot_read(text: str) -> None:
    with pytest.raises(ValueError):
        gdb.parse_ptype_o(text)


@pytest.mark.parametrize(("declaration", "expected"), [
    ("int64 B;", ("int64", "B", None)),
    ("func() time.Time now;", ("func() time.Time", "now", None)),
    ("func(*int) error cb;", ("func(*int) error", "cb", None)),
    ("map[string]int Index;", ("map[string]int", "Index", None)),
    ("[2]*github.com/x/prometheus.histogramCounts counts;",
     ("[2]*github.com/x/prometheus.histogramCounts", "counts", None)),
    ("int (*handlers[4])(void *, int);", ("int (*[4])(void *, int)", "handlers", None)),
    ("unsigned int wide : 13;", ("unsigned int", "wide", 13)),
    ("u8 *data_ptr;", ("u8 *", "data_ptr", None)),
    ("T __0;", ("T", "__0", None)),
])
def test_split_declaration(declaration: str, expected: tuple[str, str, int | None]) -> None:
    assert gdb.split_declaration(declaration) == expected


# llvm-dwarfdump --debug-info=OFFSET --show-children, Go 1.27: main.mixed
DWARF_GO_MIXED = """\
layouts:\tfile format elf64-x86-64

.debug_info contents:

0x00005c54: DW_TAG_subprogram
              DW_AT_name\t("main.mixed")
              DW_AT_low_pc\t(0x0000000000777e00)
              DW_AT_high_pc\t(0x0000000000777ecd)
              DW_AT_frame_base\t(DW_OP_call_frame_cfa)
              DW_AT_decl_file\t("main.go")
              DW_AT_decl_line\t(138)
              DW_AT_external\t(0x01)

0x00005c6c:   DW_TAG_formal_parameter
                DW_AT_name\t("a")
                DW_AT_variable_parameter\t(0x00)
                DW_AT_decl_line\t(138)
                DW_AT_type\t(0x00000000000ef5f0 "int")
                DW_AT_location\t(0x00001c3e: 
                   [0x0000000000777e00, 0x0000000000777e31): DW_OP_reg0 RAX)

0x00005c7a:   DW_TAG_formal_parameter
                DW_AT_name\t("s")
                DW_AT_variable_parameter\t(0x00)
                DW_AT_decl_line\t(138)
                DW_AT_type\t(0x00000000000ef820 "string")
                DW_AT_location\t(0x00001c46: 
                   [0x0000000000777e00, 0x0000000000777e38): DW_OP_reg3 RBX, DW_OP_piece 0x8, DW_OP_reg2 RCX, DW_OP_piece 0x8
                   [0x0000000000777e38, 0x0000000000777e3d): DW_OP_fbreg +8, DW_OP_piece 0x8, DW_OP_fbreg +16, DW_OP_piece 0x8
                   [0x0000000000777e91, 0x0000000000777e93): DW_OP_piece 0x8, DW_OP_reg2 RCX, DW_OP_piece 0x8)

0x00005c88:   DW_TAG_formal_parameter
                DW_AT_name\t("x")
                DW_AT_variable_parameter\t(0x00)
                DW_AT_decl_line\t(138)
                DW_AT_type\t(0x00000000000f0b35 "float64")
                DW_AT_location\t(0x00001c83: 
                   [0x0000000000777e00, 0x0000000000777e45): DW_OP_reg17 XMM0)

0x00005c96:   DW_TAG_formal_parameter
                DW_AT_name\t("~r0")
                DW_AT_variable_parameter\t(0x01)
                DW_AT_decl_line\t(138)
                DW_AT_type\t(0x00000000000ef5f0 "int")
                DW_AT_location\t(<empty>)

0x00005ca3:   DW_TAG_formal_parameter
                DW_AT_name\t("~r1")
                DW_AT_variable_parameter\t(0x01)
                DW_AT_decl_line\t(138)
                DW_AT_type\t(0x00000000000f0095 "error")
                DW_AT_location\t(<empty>)

0x00005cb0:   DW_TAG_inlined_subroutine
                DW_AT_abstract_origin\t(0x0000000000189842 "errors.New")
                DW_AT_ranges\t(0x000005d0
                   [0x0000000000777e2c, 0x0000000000777e70))
                DW_AT_call_line\t(140)

0x00005cbf:     DW_TAG_formal_parameter
                  DW_AT_abstract_origin\t(0x0000000000189851 "text")
                  DW_AT_location\t(0x00001c8b: 
                     [0x0000000000777e00, 0x0000000000777e38): DW_OP_reg3 RBX, DW_OP_piece 0x8, DW_OP_reg2 RCX, DW_OP_piece 0x8)

0x00005cc8:     NULL

0x00005cc9:   NULL
"""

# Go 1.27, main.manyInts' stack arguments and main.bigByValue's struct (trimmed)
DWARF_GO_STACK = """\
0x00005afc: DW_TAG_subprogram
              DW_AT_name\t("main.manyInts")
              DW_AT_low_pc\t(0x0000000000777d60)
              DW_AT_high_pc\t(0x0000000000777db8)
              DW_AT_frame_base\t(DW_OP_call_frame_cfa)

0x00005b8a:   DW_TAG_formal_parameter
                DW_AT_name\t("j")
                DW_AT_variable_parameter\t(0x00)
                DW_AT_type\t(0x00000000000ef5f0 "int")
                DW_AT_location\t(0x00001be4: 
                   [0x0000000000777d60, 0x0000000000777db8): DW_OP_call_frame_cfa)

0x00005b97:   DW_TAG_formal_parameter
                DW_AT_name\t("k")
                DW_AT_variable_parameter\t(0x00)
                DW_AT_type\t(0x00000000000ef5f0 "int")
                DW_AT_location\t(0x00001bec: 
                   [0x0000000000777d60, 0x0000000000777db8): DW_OP_fbreg +8)

0x00005e42:   DW_TAG_formal_parameter
                DW_AT_name\t("o")
                DW_AT_variable_parameter\t(0x00)
                DW_AT_type\t(0x00000000001543ed "main.Order")
                DW_AT_location\t(DW_OP_call_frame_cfa)

0x00005ba4:   NULL
"""

# Go 1.19: the out-of-line copy of an inlinable method names nothing itself.
DWARF_GO_OUT_OF_LINE = """\
0x00005b8f: DW_TAG_subprogram
              DW_AT_abstract_origin\t(0x0000000000004667 "github.com/prometheus/client_golang/prometheus.(*counter).Add")
              DW_AT_low_pc\t(0x0000000000707840)
              DW_AT_high_pc\t(0x0000000000707955)
              DW_AT_frame_base\t(DW_OP_call_frame_cfa)

0x00005ba6:   DW_TAG_formal_parameter
                DW_AT_abstract_origin\t(0x00000000000046a8 "c")
                DW_AT_location\t(0x00006e92: 
                   [0x0000000000707840, 0x00000000007078d4): DW_OP_reg0 RAX)

0x00005baf:   DW_TAG_formal_parameter
                DW_AT_abstract_origin\t(0x00000000000046b0 "v")
                DW_AT_location\t(0x00006ec5: 
                   [0x0000000000707840, 0x0000000000707882): DW_OP_reg17 XMM0)

0x00005bb8:   DW_TAG_variable
                DW_AT_abstract_origin\t(0x00000000000046b8 "ival")
                DW_AT_location\t(0x00006ef8: 
                   [0x000000000070788f, 0x00000000007078a4): DW_OP_reg2 RCX)

0x00005bd8:   NULL
"""

# gcc 12 -O2: add_ints (a 7th integer argument on the stack) and with_job,
# whose union argument DWARF puts below the entry SP.
DWARF_C_O2 = """\
0x0000085f: DW_TAG_subprogram
              DW_AT_external\t(true)
              DW_AT_name\t("add_ints")
              DW_AT_prototyped\t(true)
              DW_AT_type\t(0x000000a5 "long int")
              DW_AT_low_pc\t(0x0000000000001390)
              DW_AT_high_pc\t(0x00000000000013b4)
              DW_AT_frame_base\t(DW_OP_call_frame_cfa)
              DW_AT_call_all_calls\t(true)

0x0000087d:   DW_TAG_formal_parameter
                DW_AT_name\t("a")
                DW_AT_decl_line\t(90)
                DW_AT_type\t(0x00000086 "int")
                DW_AT_location\t(0x00000172: 
                   [0x0000000000001390, 0x00000000000013a1): DW_OP_reg5 RDI
                   [0x00000000000013a1, 0x00000000000013b4): DW_OP_entry_value(DW_OP_reg5 RDI), DW_OP_stack_value)
                DW_AT_GNU_locviews\t(0x0000016e)

0x0000088e:   DW_TAG_formal_parameter
                DW_AT_name\t("q")
                DW_AT_type\t(0x00000435 "pair")
                DW_AT_location\t(DW_OP_reg4 RSI, DW_OP_piece 0x8, DW_OP_reg17 XMM0, DW_OP_piece 0x8)

0x000008c5:   DW_TAG_formal_parameter
                DW_AT_name\t("g")
                DW_AT_type\t(0x000000a5 "long int")
                DW_AT_location\t(DW_OP_fbreg +0)

0x0000078d:   DW_TAG_formal_parameter
                DW_AT_name\t("v")
                DW_AT_type\t(0x000002b8 "value")
                DW_AT_location\t(DW_OP_fbreg -24)

0x000008d0:   DW_TAG_formal_parameter
                DW_AT_name\t("gone")
                DW_AT_type\t(0x00000086 "int")

0x000008d1:   NULL
"""

# rustc 1.95 -C opt-level=0: the frame base is RSP as the prologue leaves it.
DWARF_RUST_O0 = """\
0x000071c2: DW_TAG_subprogram
              DW_AT_low_pc\t(0x000000000001bb30)
              DW_AT_high_pc\t(0x000000000001bc9c)
              DW_AT_frame_base\t(DW_OP_reg7 RSP)
              DW_AT_linkage_name\t("_ZN7layouts8add_ints17hf65d95b647a25a88E")
              DW_AT_name\t("add_ints")

0x000071df:   DW_TAG_formal_parameter
                DW_AT_location\t(DW_OP_fbreg +96)
                DW_AT_name\t("a")
                DW_AT_type\t(0x00000dcb "i64")

0x000071ee:   NULL
"""


class FakeResolver:
    """Type sizes and abstract origins for the samples above."""

    sizes: ClassVar[dict[int, int]] = {0xEF5F0: 8, 0xF0B35: 8, 0x1543ED: 96, 0xA5: 8, 0x86: 4, 0x2B8: 16, 0xDCB: 8,
             0x56A8: 8, 0x56B0: 8}
    origins: ClassVar[dict[int, Die]] = {
        0x46A8: Die(0x46A8, "DW_TAG_formal_parameter", 2, {
            "DW_AT_name": '("c")', "DW_AT_variable_parameter": "(0x00)",
            "DW_AT_type": '(0x00000000000056a8 "github.com/prometheus/client_golang/prometheus.counter *")'}),
        0x46B0: Die(0x46B0, "DW_TAG_formal_parameter", 2, {
            "DW_AT_name": '("v")', "DW_AT_variable_parameter": "(0x00)",
            "DW_AT_type": '(0x00000000000056b0 "float64")'}),
    }

    def type_size(self, offset: int) -> int:
        return self.sizes[offset]

    def die(self, offset: int) -> Die:
        return self.origins[offset]


def test_dwarf_go_register_pieces_and_results() -> None:
    function = dwarfdump.parse_function(DWARF_GO_MIXED, FakeResolver())
    assert (function.name, function.low_pc, function.die_offset) == ("main.mixed", 0x777E00, 0x5C54)
    assert [(p.name, p.is_result, p.type_name) for p in function.params] == [
        ("a", False, "int"), ("s", False, "string"), ("x", False, "float64"),
        ("~r0", True, "int"), ("~r1", True, "error")]
    a, s, x = function.arguments
    assert a.location_json() == [{"reg": "rax", "size": 8}]
    assert s.location_json() == [{"reg": "rbx", "size": 8}, {"reg": "rcx", "size": 8}]
    assert x.location_json() == [{"reg": "xmm0", "size": 8}]
    assert all(p.valid_at_entry for p in function.arguments)
    assert [(r.status, r.pieces, r.valid_at_entry) for r in function.results] == [
        ("none", (), False), ("none", (), False)]


def test_dwarf_go_stack_arguments_are_past_the_return_address() -> None:
    function = dwarfdump.parse_function(DWARF_GO_STACK, FakeResolver())
    assert [(p.name, p.location_json()) for p in function.params] == [
        ("j", [{"stack": 8, "size": 8}]),
        ("k", [{"stack": 16, "size": 8}]),
        ("o", [{"stack": 8, "size": 96}]),
    ]


def test_dwarf_out_of_line_copy_takes_names_and_types_from_its_origin() -> None:
    function = dwarfdump.parse_function(DWARF_GO_OUT_OF_LINE, FakeResolver())
    assert function.name == "github.com/prometheus/client_golang/prometheus.(*counter).Add"
    assert [(p.name, p.type_name, p.location_json()) for p in function.params] == [
        ("c", "github.com/prometheus/client_golang/prometheus.counter *", [{"reg": "rax", "size": 8}]),
        ("v", "float64", [{"reg": "xmm0", "size": 8}]),
    ]


def test_dwarf_c_o2_entry_entries_plain_expressions_and_missing_locations() -> None:
    function = dwarfdump.parse_function(DWARF_C_O2, FakeResolver())
    got = {p.name: (p.status, p.location_json(), p.valid_at_entry) for p in function.params}
    assert got == {
        "a": ("ok", [{"reg": "rdi", "size": 4}], True),
        "q": ("ok", [{"reg": "rsi", "size": 8}, {"reg": "xmm0", "size": 8}], True),
        "g": ("ok", [{"stack": 8, "size": 8}], True),
        "v": ("ok", [{"stack": -16, "size": 16}], False),  # below SP at the entry
        "gone": ("none", [], False),
    }
    assert not any(p.is_result for p in function.params)


def test_dwarf_rust_frame_base_rsp_is_not_evaluated_at_entry() -> None:
    function = dwarfdump.parse_function(DWARF_RUST_O0, FakeResolver())
    (a,) = function.params
    assert function.name == "add_ints"
    assert (a.name, a.status, a.expression, a.valid_at_entry) == ("a", "frame", "DW_OP_fbreg +96", False)


@pytest.mark.parametrize(("location", "pc", "expected"), [
    (None, 0x10, None),
    ("(<empty>)", 0x10, None),
    ("(DW_OP_reg5 RDI)", 0x10, "DW_OP_reg5 RDI"),
    ("(0x0000011e: \n[0x13c0, 0x13c6): DW_OP_reg5 RDI\n[0x13c6, 0x13f6): DW_OP_reg3 RBX)",
     0x13C0, "DW_OP_reg5 RDI"),
    ("(0x0000011e: \n[0x13c0, 0x13c6): DW_OP_reg5 RDI\n[0x13c6, 0x13f6): DW_OP_reg3 RBX)",
     0x13C6, "DW_OP_reg3 RBX"),
    # An empty range covers nothing; a list that starts later says nothing at entry.
    ("(0x00005e6d: \n[0x71bf55, 0x71bf55): DW_OP_reg1 RDX\n[0x71bf55, 0x71bf5e): DW_OP_reg1 RDX)",
     0x71BF40, None),
])
def test_entry_expression(location: str | None, pc: int, expected: str | None) -> None:
    assert dwarfdump.entry_expression(location, pc) == expected


@pytest.mark.parametrize(("expression", "frame_base", "size", "expected"), [
    ("DW_OP_reg0 RAX", "(DW_OP_call_frame_cfa)", 8, ("ok", (Piece(8, reg="rax"),))),
    ("DW_OP_reg18 XMM1", None, 4, ("ok", (Piece(4, reg="xmm1"),))),
    ("DW_OP_reg13 R13", None, 8, ("ok", (Piece(8, reg="r13"),))),
    ("DW_OP_fbreg -144", "(DW_OP_call_frame_cfa)", 8, ("ok", (Piece(8, stack=-136),))),
    ("DW_OP_call_frame_cfa, DW_OP_piece 0x8, DW_OP_fbreg +8, DW_OP_piece 0x8",
     "(DW_OP_call_frame_cfa)", None, ("ok", (Piece(8, stack=8), Piece(8, stack=16)))),
    ("DW_OP_piece 0x8, DW_OP_reg2 RCX, DW_OP_piece 0x8", "(DW_OP_call_frame_cfa)", None,
     ("ok", (Piece(8), Piece(8, reg="rcx")))),
    ("DW_OP_breg7 RSP+16", "(DW_OP_reg7 RSP)", 8, ("ok", (Piece(8, stack=16),))),
    ("DW_OP_call_frame_cfa, DW_OP_plus_uconst 0x10", "(DW_OP_call_frame_cfa)", 8,
     ("ok", (Piece(8, stack=24),))),
    ("DW_OP_fbreg +96", "(DW_OP_reg7 RSP)", 8, ("frame", ())),
    ("DW_OP_breg5 RDI+0", "(DW_OP_reg7 RSP)", 16, ("unsupported", ())),
    ("DW_OP_entry_value(DW_OP_reg5 RDI), DW_OP_stack_value", "(DW_OP_call_frame_cfa)", 4,
     ("unsupported", ())),
    ("DW_OP_lit1, DW_OP_stack_value, DW_OP_piece 0x8, DW_OP_lit10, DW_OP_stack_value, "
     "DW_OP_piece 0x8", "(DW_OP_reg7 RSP)", None, ("unsupported", ())),
])
def test_evaluate(expression: str, frame_base: str | None, size: int | None,
                  expected: tuple[str, tuple[Piece, ...]]) -> None:
    assert dwarfdump.evaluate(expression, frame_base, size) == expected


def test_evaluate_checks_register_names_against_dwarf_numbers() -> None:
    with pytest.raises(ValueError, match="register 3"):
        dwarfdump.evaluate("DW_OP_reg3 RDX", None, 8)


def test_piece_json() -> None:
    assert Piece(8, reg="rbx").as_json() == {"reg": "rbx", "size": 8}
    assert Piece(64, stack=8).as_json() == {"stack": 8, "size": 64}
    assert Piece(4).as_json() == {"size": 4}


def test_parse_dies_depth_and_multiline_values() -> None:
    dies = dwarfdump.parse_dies(DWARF_GO_MIXED)
    assert [(d.tag, d.depth) for d in dies] == [
        ("DW_TAG_subprogram", 0)] + [("DW_TAG_formal_parameter", 1)] * 5 + [
        ("DW_TAG_inlined_subroutine", 1), ("DW_TAG_formal_parameter", 2)]
    assert dies[2].attrs["DW_AT_location"].count("\n") == 3
    assert dies[6].attrs["DW_AT_ranges"] == "(0x000005d0\n[0x0000000000777e2c, 0x0000000000777e70))"
    assert dies[0].number("DW_AT_external") == 1
    assert dies[1].reference("DW_AT_type") == (0xEF5F0, "int")
