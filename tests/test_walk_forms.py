"""The raw walker of units (``tree.Tree``) on units generated here: random trees of
DIEs (namespaces, types, functions, inlined copies, variables, members) whose
attributes come in every form the walker reads or skips, each possibly written as
DW_FORM_indirect (the form in the DIE, before the value). What it keeps of each DIE
(tag, the DIE it is in, name, what a function refers to, where its code starts, whether
it is a declaration) is what the generated tree says, and the same with or without
indirect forms."""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from agent.binary.dwarf import scan
from agent.binary.dwarf.sections import Text
from agent.binary.dwarf.steps import DECLARED, PARENT, REFERRING
from agent.binary.dwarf.tree import Tree

CU, NAMESPACE, STRUCT, MEMBER, SUBPROGRAM, INLINED, VARIABLE, BLOCK = (
    0x11, 0x39, 0x13, 0x0D, 0x2E, 0x1D, 0x34, 0x0B)
KEPT = {NAMESPACE, STRUCT, SUBPROGRAM, INLINED, BLOCK}
NAME, LOW_PC, ORIGIN, LOCATION, DECL_LINE, DECLARATION = 0x03, 0x11, 0x31, 0x02, 0x3B, 0x3C
STRING, STRP, ADDR, REF4, EXPRLOC, UDATA, DATA1, FLAG_PRESENT, INDIRECT = (
    0x08, 0x0E, 0x01, 0x13, 0x18, 0x0F, 0x0B, 0x19, 0x16)


@dataclass
class Die:
    tag: int
    name: str | None = None
    strp: bool = False  # the name in .debug_str rather than in the DIE
    low: int | None = None
    origin: int | None = None  # the index of an earlier subprogram
    location: bytes | None = None
    line: int | None = None
    declaration: bool = False
    indirect: frozenset[int] = frozenset()  # attributes written as DW_FORM_indirect
    children: list[Die] = field(default_factory=list)


def _uleb(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


@st.composite
def _dies(draw: st.DrawFn, depth: int = 0) -> Die:
    tag = draw(st.sampled_from([NAMESPACE, STRUCT, MEMBER, SUBPROGRAM, INLINED, VARIABLE,
                                BLOCK]))
    d = Die(tag)
    if tag != BLOCK and draw(st.booleans()):
        d.name = draw(st.text("abcxyz_:<>", min_size=1, max_size=40))
        d.strp = draw(st.booleans())
    if tag == SUBPROGRAM and draw(st.booleans()):
        d.low = draw(st.integers(0x1000, 1 << 40))
    if tag == INLINED:
        d.origin = draw(st.integers(0, 1 << 16))  # made an earlier subprogram's when laid out
    if tag in (VARIABLE, SUBPROGRAM) and draw(st.booleans()):
        # past 127 bytes the length takes two bytes
        d.location = bytes(draw(st.sampled_from([0, 1, 127, 128, 300])))
    if draw(st.booleans()):
        d.line = draw(st.integers(0, 1 << 20))
    d.declaration = tag == STRUCT and draw(st.booleans())
    d.indirect = frozenset(draw(st.sets(st.sampled_from(
        [NAME, LOW_PC, ORIGIN, LOCATION, DECL_LINE, DECLARATION]))))
    if depth < 3 and tag != MEMBER:
        d.children = draw(st.lists(_dies(depth + 1), max_size=4))
    return d


def _flat(root: Die) -> list[tuple[Die, int]]:
    """Every DIE in file order with the index of the DIE it is in (-1: the unit's)."""
    out: list[tuple[Die, int]] = []

    def visit(d: Die, parent: int) -> None:
        out.append((d, parent))
        me = len(out) - 1
        for c in d.children:
            visit(c, me)
    visit(root, -1)
    return out


def _unit(root: Die, indirect: bool) -> tuple[bytes, bytes, bytes, list[int]]:
    """.debug_info, .debug_abbrev and .debug_str of one DWARF 4 unit whose own DIE is
    ``root`` (an abbreviation for each DIE), and each DIE's offset, in file order."""
    strs, abbrev, body = bytearray(b"\0"), bytearray(), bytearray()
    offsets: list[int] = []
    subprograms: list[int] = []

    def emit(d: Die) -> None:
        attrs: list[tuple[int, int, bytes]] = []
        if d.name is not None:
            if d.strp:
                attrs.append((NAME, STRP, len(strs).to_bytes(4, "little")))
                strs.extend(d.name.encode() + b"\0")
            else:
                attrs.append((NAME, STRING, d.name.encode() + b"\0"))
        if d.low is not None:
            attrs.append((LOW_PC, ADDR, d.low.to_bytes(8, "little")))
        if d.origin is not None and subprograms:
            target = subprograms[d.origin % len(subprograms)]
            attrs.append((ORIGIN, REF4, offsets[target].to_bytes(4, "little")))
        if d.location is not None:
            attrs.append((LOCATION, EXPRLOC, _uleb(len(d.location)) + d.location))
        if d.line is not None:
            attrs.append((DECL_LINE, DATA1, bytes([d.line & 0xFF])) if d.line % 2 else
                         (DECL_LINE, UDATA, _uleb(d.line)))
        if d.declaration:
            attrs.append((DECLARATION, FLAG_PRESENT, b""))
        code = len(offsets) + 1
        offsets.append(11 + len(body))
        if d.tag == SUBPROGRAM:
            subprograms.append(code - 1)
        abbrev.extend(_uleb(code) + _uleb(d.tag) + bytes([bool(d.children)]))
        body.extend(_uleb(code))
        for at, form, value in attrs:
            inline = indirect and at in d.indirect
            abbrev.extend(_uleb(at) + _uleb(INDIRECT if inline else form))
            body.extend((_uleb(form) if inline else b"") + value)
        abbrev.extend(b"\0\0")
        for child in d.children:
            emit(child)
        if d.children:
            body.append(0)  # the end of its children

    emit(root)
    abbrev.append(0)
    head = (len(body) + 7).to_bytes(4, "little") + (4).to_bytes(2, "little") + \
        bytes(4) + bytes([8])
    return bytes(head + body), bytes(abbrev), bytes(strs), offsets


def _kept(root: Die, indirect: bool, in_c: bool = True) -> dict[int, tuple[object, ...]]:
    """What the walker keeps of each DIE, by its index in file order (walked in C, or
    in Python)."""
    info, abbrev, strs, offsets = _unit(root, indirect)
    tree = Tree(info, abbrev, scan.Strings(Text(strs)))
    tree.native = in_c
    tree.walk()
    index = {o: i for i, o in enumerate(offsets)}
    (block,) = tree.kept.units.values()
    out: dict[int, tuple[object, ...]] = {}
    for at, tag, parent, _name, ref in zip(*block, strict=True):
        out[index[at]] = (tag, index.get(parent, -1), tree.name(at),
                          index.get(ref, -1), at in tree.inlined)
    (pairs,) = tree.lows.values()
    starts = {index[pairs[i + 1]]: pairs[i] for i in range(0, len(pairs), 2)}
    return {i: (*facts, starts.get(i)) for i, facts in out.items()}


def _expected(dies: list[tuple[Die, int]]) -> dict[int, tuple[object, ...]]:
    """What the generated tree says the walker keeps."""
    subprograms: list[int] = []
    out: dict[int, tuple[object, ...]] = {}
    for i, (d, parent) in enumerate(dies):
        ref = -1
        if d.origin is not None and subprograms:
            ref = subprograms[d.origin % len(subprograms)]
        if d.tag == SUBPROGRAM:
            subprograms.append(i)
        if d.tag in KEPT or d.children or d.tag == CU:
            tag = d.tag | (PARENT if d.children else 0) | (DECLARED if d.declaration else 0)
            out[i] = (tag, parent, d.name, ref if d.tag in REFERRING else -1,
                      d.tag == INLINED, d.low if d.tag == SUBPROGRAM else None)
    return out


@settings(max_examples=200, deadline=None)
@given(st.lists(_dies(), min_size=1, max_size=5), st.booleans())
def test_what_the_walk_keeps_is_what_the_unit_holds(tops: list[Die], indirect: bool) -> None:
    root = Die(CU, name="unit.c", children=tops, indirect=frozenset({NAME}))
    assert _kept(root, indirect) == _kept(root, indirect, in_c=False) == _expected(_flat(root))


def test_a_long_chain_of_indirect_forms_is_skipped_not_recursed_into() -> None:
    """A damaged unit may write DW_FORM_indirect again and again before a form: skipped
    as the walk reads it, without a call per link."""
    u = scan._Unit(0, 2000, 11, 4, 4, 8, 4)
    info = bytes([INDIRECT] * 1200 + [DATA1, 7])
    assert scan._skip(info, 0, INDIRECT, u) == 1202
