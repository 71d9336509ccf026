"""The raw reader of units (``tree``) against pyelftools and against the whole index:
a question about a few functions, answered from the units that mention them, gives
what the walk of every unit gives; parents, a function's DIE at its address and the
units' languages as pyelftools finds them; sections read through windows on the file
byte for byte as pyelftools copies them; instructions read lazily as capstone's full
decode has them. On every kind of binary the tests build (Go, Rust, C by GCC and by
clang, whose DWARF 5 names strings by index)."""

from __future__ import annotations

import fnmatch
from pathlib import Path

import capstone
import pytest
from capstone import x86
from elftools.elf.elffile import ELFFile
from harness.forks import counted, spread_over

from agent.binary import sites
from agent.binary.dwarf import lookup
from agent.binary.dwarf.dies import attr
from agent.binary.dwarf.functions import Functions
from agent.binary.dwarf.listing import name_parts, own_name
from agent.binary.dwarf.reader import Dwarf, open_dwarf
from agent.binary.dwarf.sections import section_bytes
from agent.binary.dwarf.types import TypeNamer
from agent.binary.elf import ElfFile

_KINDS = ["rust_layouts", "rust_dropped", "rust_handler", "c_layouts_o2",
          "c_dropped_clang", "c_dropped_gcc"]


def _binary(which: str, request: pytest.FixtureRequest) -> Path:
    """A test program by fixture name ("go_layouts_new": Go's newest, with DWARF 5)."""
    return Path(request.getfixturevalue(which))


def _functions(binary: Path) -> Functions:
    dwarf = open_dwarf(binary)
    return Functions(dwarf, TypeNamer(dwarf))


def _copies(fns: Functions, name: str) -> list[int]:
    return [c.die.offset for c in fns.inlined(name)]


_INLINING = [k for k in _KINDS if k != "c_layouts_o2"] + ["go_layouts_119", "go_layouts_new"]


@pytest.mark.parametrize("which", _INLINING)
def test_a_few_functions_copies_as_every_unit_has_them(which: str,
                                                       request: pytest.FixtureRequest
                                                       ) -> None:
    """Each inlined function's copies, asked alone of a fresh reader (the units that
    name it and those referring to it), equal the whole index's; so does a question
    about a group of them by a namespace, and whether a function exists only inlined.
    A name no unit has is answered too."""
    binary = _binary(which, request)
    whole = _functions(binary)
    names = sorted(whole._named())
    assert names
    step = max(1, len(names) // 20)
    for name in names[::step]:
        alone = _functions(binary)
        assert _copies(alone, name) == _copies(whole, name), name
        assert alone.only_inlined(name) == whole.only_inlined(name), name
        assert alone.dwarf.tree is not None and \
            len(alone.dwarf.tree.walked) <= len(whole.dwarf.units)
    first = names[len(names) // 2].split("::")[0]
    if "::" in names[len(names) // 2]:
        group = _functions(binary).inlined_among([(first,)],
                                                 lambda n: n.startswith(first + "::"))
        assert sorted(group) == sorted(n for n in whole.inlined_names()
                                       if n.startswith(first + "::"))
    assert not _functions(binary).only_inlined("no_such_function_anywhere")


def test_name_parts() -> None:
    assert name_parts("a::B<c::D>::f<e::F>") == ("a", "B<c::D>", "f<e::F>")
    assert own_name("a::B<c::D>::f<e::F>") == "f<e::F>"
    assert own_name("core::ptr::drop_in_place<prometheus::desc::Desc>") == \
        "drop_in_place<prometheus::desc::Desc>"
    assert own_name("x::Y::operator<") == "operator<"
    assert own_name("f<fn() -> u32>::{closure#0}") == "{closure#0}"
    assert own_name("main.(*T).M") == "main.(*T).M"
    assert own_name("tally") == "tally"


@pytest.mark.parametrize("which", _INLINING)
def test_functions_read_together_as_each_alone(which: str, request: pytest.FixtureRequest,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A spec's functions prefetched at once (their searches and units spread over
    forked children, however few) and then asked one at a time: the copies a fresh
    reader finds for each alone, and the same units found for every part of a name,
    with no search made again for a name prefetched."""
    binary = _binary(which, request)
    whole = _functions(binary)
    names = sorted(whole._named())
    names = [*names[::max(1, len(names) // 12)], "no_such_function_anywhere",
             "no_such::scope::anywhere"]
    spread_over(monkeypatch, 3)
    together = _functions(binary)
    with monkeypatch.context() as m:
        forks = counted(m)
        together.prefetch(names)
    tree = together.dwarf.tree
    assert tree is not None and tree.walked and forks
    mentioned = dict(tree.mentions._mentioned)
    assert mentioned
    go = together.dwarf.language == "go"
    for name in names:
        alone = _functions(binary)
        with monkeypatch.context() as m:
            if not go or name not in together.symbols:  # prefetched: nothing searched
                m.setattr(tree.mentions, "_patterns", lambda *a: pytest.fail(f"{a} searched"))
            assert together._keys_of(name) == alone._keys_of(name), name
            assert together.only_inlined(name) == alone.only_inlined(name), name
        if not name.startswith("no_such"):
            assert _copies(together, name) == _copies(alone, name), name
        mentions = alone.dwarf.tree.mentions  # type: ignore[union-attr]
        for part in name_parts(name):
            if part in mentioned:
                assert mentions._mentions(part) == mentioned[part], (name, part)
                assert mentions.places(part) == tree.mentions.places(part), (name, part)


@pytest.mark.parametrize("which", _INLINING)
@pytest.mark.parametrize("many", [64, 2], ids=["searched", "read"])
def test_a_pattern_s_functions_as_the_whole_listing_has_them(
        which: str, many: int, request: pytest.FixtureRequest,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``noop funcs BIN PATTERN``'s rows read from the units its literal parts lead to
    equal the whole listing's rows the pattern matches, in order: patterns made of
    each name's parts, whole or cut inside a part, and none naming a part whole; with
    the units referring to many functions searched for each, or read whole (``many``:
    mentions._MANY)."""
    from agent.binary.dwarf import listing as names
    from agent.binary.dwarf import mentions
    from agent.tools import inspect

    binary = _binary(which, request)
    dwarf = open_dwarf(binary)
    whole = inspect.listing(dwarf, TypeNamer(dwarf))
    monkeypatch.setattr(names, "_NARROW", 1.0)
    monkeypatch.setattr(mentions, "_MANY", many)
    shown = sorted({r["name"] for r in whole})
    patterns = {"*", "no_such::*", "*::new"}
    for name in shown[::max(1, len(shown) // 7)]:
        parts = name_parts(name)
        patterns |= {name, "::".join(parts[:-1]) + "::*", name[:len(name) * 2 // 3] + "*",
                     "::".join(parts[:1]) + "::*"}
    narrowed = 0
    for pattern in sorted(patterns):
        fresh = open_dwarf(binary)
        got = inspect.listing(fresh, TypeNamer(fresh), pattern)
        assert got == [r for r in whole if fnmatch.fnmatchcase(r["name"], pattern)], pattern
        narrowed += bool(names.literal_parts(pattern)) and fresh.tree is not None and \
            len(fresh.tree.walked) < len(fresh.units)
    assert narrowed or which.startswith(("go", "c_"))  # C: one unit; Go: not nested


@pytest.mark.parametrize("which", ["rust_layouts", "rust_dropped", "c_dropped_gcc"])
def test_many_references_looked_for_by_reading_their_units(
        which: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """The units that may refer to the DIEs of one unit: searched for each DIE, or, for
    many DIEs, every other unit they could be in (their object's, for LLVM) read: a
    superset of what the searches find."""
    from agent.binary.dwarf import mentions as m

    binary = _binary(which, request)
    checked = 0
    runs = open_dwarf(binary).tree.mentions._runs  # type: ignore[union-attr]
    shared = [i for i, run in enumerate(runs) if runs.count(run) > 1]  # LLVM's objects
    for first in [0, *shared[:5]]:
        answers = []
        for many in (1 << 30, 1):
            tree = open_dwarf(binary).tree
            assert tree is not None
            unit = tree.starts[first]
            tree.walk([unit])
            targets = [at for at, _tag, _name in tree.kept.items([unit])][:40]
            monkeypatch.setattr(m, "_MANY", many)
            answers.append(tree.mentions.referring(targets))
        searched, read = answers
        assert searched <= read
        if tree.mentions.cross and targets:
            lo, hi = tree.mentions._runs[first] if tree.mentions._llvm(first) else \
                (0, len(tree.info))
            assert read == {u for u in tree.starts if lo <= u < hi} - {unit}
            checked += 1
    assert checked or not open_dwarf(binary).tree.mentions.cross  # type: ignore[union-attr]
    assert shared or not which.startswith("rust")  # an object of several units


def test_the_whole_parts_a_pattern_names() -> None:
    from agent.binary.dwarf.listing import literal_parts

    assert literal_parts("a::b::*") == ("a", "b")
    assert literal_parts("a::b::c*") == ("a", "b")
    assert literal_parts("a::b::c") == ("a", "b", "c")
    assert literal_parts("a::B<c::D>::*") == ("a", "B<c::D>")
    assert literal_parts("a::B<c::*") == ("a",)
    assert literal_parts("a::[bc]::*") == ("a",)
    assert literal_parts("*::new") == literal_parts("f*") == literal_parts("?") == ()
    assert literal_parts("a::?::b") == ("a",)
    assert literal_parts("a<b") == () and literal_parts("a::b<c>") == ("a", "b<c>")
    assert literal_parts("") == literal_parts("::") == literal_parts("a::") == ()
    assert literal_parts("::a") == literal_parts("[") == ()
    assert literal_parts("ns::C::operator std::*") == ("ns", "C")
    assert literal_parts("a::\udcff::*") == ()  # not text: no part searched for


@pytest.mark.parametrize("which", [*_KINDS, "go_layouts_119", "go_layouts_new"])
def test_parents_and_starts_as_pyelftools_has_them(which: str,
                                                   request: pytest.FixtureRequest) -> None:
    """The DIE each function, copy, block, namespace and type is in, from the tree,
    is pyelftools' (which parses the unit up to it); the subprogram DIE whose code
    starts at each function symbol's address is the one pyelftools' walk finds; the
    binary's language is the one pyelftools' unit DIEs give."""
    binary = _binary(which, request)
    dwarf, mine = open_dwarf(binary), open_dwarf(binary)
    checked = 0
    for cu in dwarf.units[:6]:
        for die in cu.iter_DIEs():
            if die.tag in ("DW_TAG_subprogram", "DW_TAG_inlined_subroutine",
                           "DW_TAG_lexical_block", "DW_TAG_namespace",
                           "DW_TAG_structure_type") or die.has_children:
                got, theirs = mine.parent(mine.die_at(die.offset)), die.get_parent()
                assert mine.tree is not None and die.offset in mine.tree.kept
                assert (got.offset if got else None) == \
                    (theirs.offset if theirs else None), hex(die.offset)
                checked += 1
    assert checked >= 10
    ranges = dwarf._unit_ranges  # every unit's own ranges: what .debug_aranges narrows
    for sym in list(dwarf.elf.function_symbols())[::21]:
        got = mine.subprogram_at(sym.address)
        assert (got.offset if got else None) == _walked_start(dwarf, sym.address), sym.name
        unit = mine.unit_at(sym.address)
        held = [r.cu_offset for r in ranges if r.low <= sym.address < r.high]
        assert (unit.cu_offset if unit else None) == (held[0] if held else None), sym.name
    plain = open_dwarf(binary)
    plain.__dict__["tree"] = None
    assert mine.language == plain.language


def _walked_start(dwarf: Dwarf, address: int) -> int | None:
    cu = dwarf.unit_at(address)
    if cu is None:
        return None

    def walk(die: object) -> object:
        for child in die.iter_children():  # type: ignore[attr-defined]
            yield child
            if child.tag in ("DW_TAG_namespace", "DW_TAG_structure_type", "DW_TAG_class_type",
                             "DW_TAG_union_type", "DW_TAG_enumeration_type") \
                    and child.has_children:
                yield from walk(child)  # type: ignore[misc]
    for die in walk(cu.get_top_DIE()):  # type: ignore[attr-defined]
        if die.tag == "DW_TAG_subprogram" and attr(die, "DW_AT_low_pc") == address:
            return int(die.offset)
    return None


@pytest.mark.parametrize("which", [*_KINDS, "go_layouts_119", "go_layouts_new"])
def test_sections_through_windows_as_pyelftools_copies_them(
        which: str, request: pytest.FixtureRequest) -> None:
    binary = _binary(which, request)
    mine = open_dwarf(binary).info
    with open(binary, "rb") as f:
        theirs = ELFFile(f).get_dwarf_info()
        names = [n for n in vars(theirs) if n.endswith("_sec")]
        assert names
        for name in names:
            a, b = getattr(mine, name), getattr(theirs, name)
            assert (a is None) == (b is None), name
            if a is not None:
                b.stream.seek(0)
                assert section_bytes(a) == b.stream.read(), name
                a.stream.seek(3)
                assert a.stream.read(5) == section_bytes(b)[3:8]


@pytest.mark.parametrize("which", [*_KINDS, "go_layouts_119", "go_layouts_new"])
def test_instructions_as_the_full_decode_has_them(which: str,
                                                  request: pytest.FixtureRequest) -> None:
    """Every instruction of a sample of functions: address, size, mnemonic, target
    (from the light pass), operands, LOCK and registers written (decoded when asked)
    equal capstone's full decode, as noop made them before."""
    binary = _binary(which, request)
    md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
    md.detail = True
    elf = ElfFile(binary)
    syms = [s for s in elf.function_symbols() if s.size][::13]
    assert syms
    for sym in syms:
        code = elf.read_vaddr(sym.address, sym.size)
        assert _light(code, sym.address) == _full(md, code, sym.address), sym.name
    # what compilers seldom emit: loop (no jump group: no target), xbegin (one),
    # jrcxz, a far call through memory, lock-prefixed and plain adds
    odd = bytes.fromhex("e2fe" "e1fc" "e0fa" "c7f810000000" "e3f0" "ff1425000000"
                        "f0480fc107" "4801c8" "e8f0ffffff" "0f84e0ffffff")
    assert _light(odd, 0x401000) == _full(md, odd, 0x401000)


def _light(code: bytes, address: int) -> list[tuple[object, ...]]:
    return [(i.address, i.size, i.mnemonic, i.lock, i.operands, i.target, i.raw, i.writes)
            for i in sites.decode(code, address)]


def _full(md: capstone.Cs, code: bytes, address: int) -> list[tuple[object, ...]]:
    """capstone's full decode, as noop made instructions before the light pass: the
    target of a jump or call from capstone's groups, the rest as sites.detail reads
    it (what is checked here is the light pass and the laziness)."""
    want = []
    for i in md.disasm(code, address):
        ops, writes, lock = sites.detail(md, i)
        target = next((o.imm for o in i.operands if o.type == x86.X86_OP_IMM), None) \
            if i.group(capstone.CS_GRP_JUMP) or i.group(capstone.CS_GRP_CALL) else None
        want.append((i.address, i.size, i.mnemonic.removeprefix("lock "), lock, ops, target,
                     bytes(i.bytes), writes))
    return want


@pytest.mark.parametrize("which", [*_KINDS, "go_layouts_119", "go_layouts_new"])
def test_types_as_every_unit_walked_by_pyelftools_has_them(
        which: str, request: pytest.FixtureRequest) -> None:
    """The index of every named type, from the tree, is the one pyelftools' walk of
    each unit's children makes (same names, offsets, order); a type looked up alone
    (the units that mention its name) is the one the whole index gives."""
    binary = _binary(which, request)
    mine = lookup._index(open_dwarf(binary), True)
    plain = open_dwarf(binary)
    plain.__dict__["tree"] = None
    theirs = lookup._index(plain, True)
    assert mine == theirs and len(mine) > 2
    dwarf = open_dwarf(binary)
    if dwarf.language == "go":
        return  # Go's types are looked up in its types unit, not by units mentioning them
    for name in sorted(mine)[::max(1, len(mine) // 30)]:
        alone = open_dwarf(binary)
        got = lookup.find_type(alone, name)
        assert alone.type_indexes == {}  # not the whole index
        want = lookup._lookup(dwarf, name, mine)
        assert want is not None and got.offset == want.offset, name
