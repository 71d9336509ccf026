"""Functions by name: find one by the name the binary gives it (or the name a user
writes), list all, and find the copies of each inlined into others.

A function's symbol gives its code; its DWARF entry is found from that address. A
function that exists only as inlined copies has no symbol: its copies are found
through the DIE that names it, from the units that mention the name when the raw
reader can read them, else from an index of every copy (one walk over all of DWARF,
cached by build-id). ``functions.Functions`` adds where each one's values live.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from functools import cached_property

from elftools.dwarf.die import DIE

from agent import cache
from agent.binary.demangle import demangle, strip_suffix
from agent.binary.dwarf import spread
from agent.binary.dwarf.dies import attr, die_name, origin_of
from agent.binary.dwarf.reader import Dwarf
from agent.binary.dwarf.types import TypeNamer
from agent.binary.elf import Symbol
from agent.errors import NoopError, NotFound


@dataclass(frozen=True, slots=True)
class Inlined:
    """A copy of a function compiled into another one (DW_TAG_inlined_subroutine)."""

    entry: int  # DW_AT_entry_pc, else the lowest address of the copy
    die: DIE


@dataclass(frozen=True, slots=True)
class FunctionSummary:
    name: str
    address: int
    size: int
    inlined: int  # DW_TAG_inlined_subroutine instances of this function


_offsets = cache.shaped(dict[str, list[int]])  # DIE offsets by name, as cached


def _by_offset(value: object) -> dict[int, list[int]]:
    """The cached inlined index: DIE offsets by a DIE offset (JSON writes it in
    decimal)."""
    index: dict[str, list[int]] = _offsets(value)
    if not all(k.isascii() and k.isdigit() and str(int(k)) == k for k in index):
        raise ValueError("an inlined index keyed by other than offsets")
    return {int(k): v for k, v in index.items()}


class Listing:
    """Function lookups over one binary: by name, all of them, and inlined copies."""

    def __init__(self, dwarf: Dwarf, namer: TypeNamer) -> None:
        self.dwarf = dwarf
        self.namer = namer
        self._index: dict[int, list[int]] | None = None
        self._names: dict[str, list[int]] | None = None
        # What questions about a few functions found, reading only the units they need:
        # a function's name-holding DIEs with copies, and each such DIE's copies.
        self._keys: dict[str, list[int]] = {}
        self._copies: dict[int, list[int]] = {}
        self._plain: dict[str, str] = {}  # symbol -> display_name, of those in ``symbols``

    @cached_property
    def symbols(self) -> dict[str, Symbol]:
        """Function symbols by the name a user writes (Rust's names demangled)."""
        out: dict[str, Symbol] = {}
        for sym in self.dwarf.elf.function_symbols():
            out.setdefault(sym.name, sym)
            plain = self._plain[sym.name] = self.display_name(sym.name)
            if plain != sym.name:
                out.setdefault(plain, sym)
        return out

    def find(self, name: str) -> tuple[Symbol, DIE]:
        """The function's symbol and DWARF entry. A function that exists only as
        inlined copies has a symbol of address 0 and size 0 (``only_inlined``) and the
        DIE that names it."""
        sym = self.symbols.get(name)
        if sym is None and name.startswith(("struct ", "fn ")):
            sym = self.symbols.get(name.split(" ", 1)[1])
        if sym is None and self.only_inlined(name):
            return Symbol(name, 0, 0), self.dwarf.die_at(self._keys_of(name)[0])
        if sym is None:
            raise NotFound("function", name, self._every_name())
        die = self.dwarf.subprogram_at(sym.address)
        if die is None:
            raise NoopError(f"function {name!r} has a symbol but no DWARF entry",
                            "it may come from assembly or a library built without -g")
        return sym, die

    def _inlined_index(self, keep: bool = True) -> dict[int, list[int]]:
        """Offsets of every inlined copy, by the offset of the function's abstract DIE:
        one walk over all of DWARF (a second on a large Rust binary), cached by build-id
        (``keep``: the listing, itself cached whole, does not keep it)."""
        if self._index is not None:
            return self._index
        build_id = self.dwarf.cache_id
        index = cache.get(build_id, "inlined", "v1", load=_by_offset) if build_id else None
        if index is None:
            index = self.dwarf.inlined_index()
            if build_id and keep:
                cache.put_aside(build_id, "inlined", "v1", index)
        self._index = index
        return index

    def _named(self) -> dict[str, list[int]]:
        """The DIEs naming inlined functions (keys of the inlined index), by the name a
        user writes; rustc writes a function's DIE again in each unit it is inlined
        in. One pass over the index, cached by build-id."""
        if self._names is not None:
            return self._names
        build_id = self.dwarf.cache_id
        got = cache.get(build_id, "inlined-names", "v1", load=_offsets) if build_id else None
        if got is None:
            got = {}
            for key, name in self._key_names(self._inlined_index()):
                got.setdefault(name, []).append(key)
            if build_id:
                cache.put_aside(build_id, "inlined-names", "v1", got)
        self._names = got
        return got

    def _key_names(self, index: dict[int, list[int]]) -> Iterator[tuple[int, str]]:
        """Each key of ``index`` (a DIE holding a function's name), ascending, with the
        name a user writes; those without one left out."""
        keys = sorted(index)
        fast = self.dwarf.names_at(set(keys))
        for key in keys:
            name = fast.get(key) if fast is not None else \
                self.function_name(self.dwarf.die_at(key))
            if name:
                yield key, name

    def copies(self, name: str) -> list[str]:
        """The symbols of other copies of function ``name``: the same mangled symbol but
        for LLVM's ``.llvm.N`` (rustc's copies of one function in several codegen units:
        its hash says it is the same function), at other addresses, by their own
        symbol names. Two C functions of one name (statics of two files) are not
        copies of each other."""
        first = self.symbols.get(name)
        if first is None or not first.name.startswith(("_ZN", "_R")):
            return []
        seen = {first.address}
        out = []
        for sym in self._by_base.get(strip_suffix(first.name), ()):
            if sym.address not in seen:
                seen.add(sym.address)
                out.append(sym.name)
        return out

    @cached_property
    def _by_base(self) -> dict[str, list[Symbol]]:
        """Rust's function symbols with code, by their name without LLVM's or noop's
        suffix, in the symbol table's order (``copies``: one pass for every question)."""
        out: dict[str, list[Symbol]] = {}
        for sym in self.dwarf.elf.function_symbols():
            if sym.size and sym.name.startswith(("_ZN", "_R")):
                out.setdefault(strip_suffix(sym.name), []).append(sym)
        return out

    def dwarf_name(self, name: str) -> str:
        """The name DWARF gives function ``name`` (a symbol's name may differ: rustc's
        legacy symbols write a closure as ``{{closure}}``, DWARF as ``{async_fn_env#0}``
        or ``{closure#0}``); '' when DWARF has none."""
        sym = self.symbols.get(name)
        die = self.dwarf.subprogram_at(sym.address) if sym is not None else None
        return self.function_name(origin_of(die)) if die is not None else ""

    def only_inlined(self, name: str) -> bool:
        """Whether ``name`` exists only as copies inlined into other functions."""
        return name not in self.symbols and bool(self._keys_of(name))

    def inlined_names(self) -> list[str]:
        """Functions that exist only as inlined copies."""
        return [n for n in self._named() if n not in self.symbols]

    def inlined_among(self, names: Collection[tuple[str, ...]], keep: Callable[[str], bool]
                      ) -> list[str]:
        """The functions that exist only as inlined copies and whose name ``keep``
        accepts, among those whose own name and the namespaces and types they are in
        name all parts of one of ``names``: read from the units that mention them (and
        those their copies are in), not from every unit."""
        got = self._targeted(names, keep)
        if got is None:
            return [n for n in self.inlined_names() if keep(n)]
        return [n for n in got if n not in self.symbols]

    def _every_name(self) -> Iterator[str]:
        """Every function's name, the inlined-only ones read when first asked for."""
        yield from self.symbols
        yield from self._named()

    def prefetch(self, names: Collection[str]) -> None:
        """Reads at once, spread over the CPUs, what ``_keys_of`` will read for
        functions ``names`` (a spec's, asked about one probe at a time): for each that
        is not a symbol (``only_inlined``) and, but in Go (which names a function
        once), under its display name (``inlined``)."""
        if self._names is not None:
            return
        go = self.dwarf.language == "go"
        asked = {n for n in names if n not in self.symbols}
        if not go:
            asked |= {self.display_name(n) for n in names}
        if len(asked) > 1:
            self.dwarf.prefetch_functions(
                [(n,) if go else name_parts(n) for n in sorted(asked)])

    def _keys_of(self, name: str) -> list[int]:
        """The DIEs holding function ``name`` that inlined copies lead to."""
        if self._names is not None:
            return self._names.get(name, [])
        go = self.dwarf.language == "go"
        if name not in self._keys:
            got = self._targeted([name_parts(name) if not go else (name,)],
                                 lambda n: n == name, own=True)
            # C++'s conversion operators name a type, whose "::" no scope splits
            if got is not None and (go or (_balanced(name) and "operator" not in name)):
                self._keys.setdefault(name, [])  # no unit names it: there is none
        if name not in self._keys:  # the raw reader could not say: every unit
            self._keys[name] = self._named().get(name, [])
        return self._keys[name]

    def _targeted(self, names: Collection[tuple[str, ...]], keep: Callable[[str], bool],
                  own: bool = False) -> dict[str, list[int]] | None:
        """The name-holding DIEs with copies of the functions ``keep`` accepts among
        those ``names`` mention (``Tree.keys``), kept for later questions; None when the
        raw reader cannot read them."""
        keys = self.dwarf.function_keys(names, keep, own)
        index = self.dwarf.copies([k for ks in keys.values() for k in ks]) \
            if keys is not None else None
        if keys is None or index is None:
            return None
        self._copies.update(index)
        # a function named so with no copies has none: said, not asked again
        self._keys.update({n: [k for k in ks if index.get(k)] for n, ks in keys.items()})
        # in the whole index's order: by each name's first DIE with copies
        return {n: self._keys[n] for n in sorted((n for n in keys if self._keys[n]),
                                                 key=lambda n: min(self._keys[n]))}

    def _copies_of(self, key: int) -> list[int]:
        """The inlined copies of the function whose name-holding DIE is at ``key``."""
        if self._index is not None:
            return self._index.get(key, [])
        if key not in self._copies:
            got = self.dwarf.copies([key])
            if got is None:
                return self._inlined_index().get(key, [])
            self._copies[key] = got.get(key, [])
        return self._copies[key]

    def inlined(self, name: str) -> tuple[Inlined, ...]:
        """The function's inlined copies with code, by entry address."""
        _sym, die = self.find(name)
        keys = {origin_of(die).offset}
        if self.dwarf.unit_language(die.cu) != "go":  # Go names a function once
            keys.update(self._keys_of(self.display_name(name)))
        out = []
        for offset in (o for k in sorted(keys) for o in self._copies_of(k)):
            copy = self.dwarf.die_at(offset)
            entry = attr(copy, "DW_AT_entry_pc")
            ranges = self.dwarf.ranges(copy)
            if isinstance(entry, int) and ranges and \
                    copy.attributes["DW_AT_entry_pc"].form.startswith("DW_FORM_data"):
                entry += ranges[0][0]  # DWARF 5: an offset from the copy's first address
            if not isinstance(entry, int) or not entry:
                entry = min((lo for lo, _hi in ranges), default=0)
            if entry:
                out.append(Inlined(entry, copy))
        return tuple(sorted(out, key=lambda c: c.entry))

    def display_name(self, symbol: str) -> str:
        """A symbol as a user writes it (Rust's names demangled, LLVM's suffixes off)."""
        got = self._plain.get(symbol)
        return got if got is not None else demangle(symbol) or symbol

    def summaries(self) -> tuple[FunctionSummary, ...]:
        """Every function symbol with its inlined-instance count, then the functions
        that exist only inlined (address and size 0), from the inlined index."""
        if self._names is not None:
            index = self._inlined_index()
            return self._rows({name: sum(len(index.get(k, ())) for k in keys)
                               for name, keys in self._names.items()})
        # counted in one pass, kept by no one: the listing is cached whole (the index,
        # 6 MB, and the names, 27 MB on a 130 MB Rust binary, would hold up its exit);
        # the symbols demangled meanwhile by another CPU (9,681 Rust ones: 0.15 s)
        syms = self.dwarf.elf.function_symbols()
        asked = "symbols" not in self.__dict__
        rust = sum(s.name.startswith(("_ZN", "_R")) for s in syms) if asked else 0
        with spread.beside(lambda: [self.display_name(s.name) for s in syms],
                           rust // _DEMANGLED) as shown:
            index = self._inlined_index(keep=False)
            counts: dict[str, int] = {}
            get = counts.get
            names = self.dwarf.names_at(set(index))
            if names is None:
                for key, name in self._key_names(index):
                    counts[name] = get(name, 0) + len(index[key])
            else:  # the same, by map and zip: 130,000 keys
                for named, n in zip(map(names.get, index), map(len, index.values()),
                                    strict=True):
                    if named:
                        counts[named] = get(named, 0) + n
            if asked:
                self._plain.update(zip((s.name for s in syms), shown(), strict=True))
        return self._rows(counts)

    def summaries_of(self, pattern: str) -> tuple[FunctionSummary, ...] | None:
        """``summaries``' rows whose name ``pattern`` (fnmatch's) matches, read only from
        the units that mention the whole parts its literal beginning names (a crate, a
        module, a type: ``literal_parts``) and those their copies are in; None when it
        names no part whole, in Go (whose names are not nested), or when the raw
        reader cannot read them (then every unit is read)."""
        parts = literal_parts(pattern)
        if not parts or self._index is not None or self.dwarf.language == "go":
            return None
        share = self.dwarf.mentioned_share([parts])
        if share is None or share > _NARROW:
            return None  # most units mention it (core::ptr): one walk of all is cheaper

        def keep(name: str) -> bool:
            return fnmatch.fnmatchcase(name, pattern)
        keys = self._targeted([parts], keep)
        if keys is None:
            return None
        return self._rows({name: sum(len(self._copies_of(k)) for k in ks)
                           for name, ks in keys.items()}, keep)

    def _rows(self, inlined: dict[str, int], keep: Callable[[str], bool] | None = None
              ) -> tuple[FunctionSummary, ...]:
        """The rows of the function symbols whose display name ``keep`` accepts (all:
        None), by address, each with its count of ``inlined`` copies, then those of
        ``inlined`` that have no symbol (address and size 0)."""
        symbols = self.symbols  # each symbol's display name demangled once, here
        syms = sorted(self.dwarf.elf.function_symbols(), key=lambda s: (s.address, s.name))
        out = [FunctionSummary(shown, s.address, s.size, inlined.get(shown, 0))
               for s in syms for shown in [self.display_name(s.name)]
               if keep is None or keep(shown)]
        named = {f.name for f in out}
        out += [FunctionSummary(n, 0, 0, count) for n, count in sorted(inlined.items())
                if n and n not in named and n not in symbols]
        return tuple(out)

    def function_name(self, decl: DIE) -> str:
        """The name a user writes: Go's DW_AT_name is already qualified, Rust's is not."""
        if self.dwarf.unit_language(decl.cu) == "go":
            return die_name(decl) or ""
        return self.namer.qualified(decl)


def name_parts(name: str) -> tuple[str, ...]:
    """The parts of a qualified name (``a::B<c::D>::f`` -> ``a``, ``B<c::D>``, ``f``: the
    DW_AT_names of a DIE and the scopes it is in), ``::`` inside brackets not counted."""
    depth = last = i = 0
    parts = []
    while i < len(name):
        if name.startswith("->", i):
            i += 2
            continue
        c = name[i]
        if c in "<([":
            depth += 1
        elif c in ">)]":
            depth -= 1
        elif depth == 0 and name.startswith("::", i):
            parts.append(name[last:i])
            last = i = i + 2
            continue
        i += 1
    return (*parts, name[last:])


# A pattern is answered from the units that mention its parts when they hold at most
# this share of .debug_info; beyond, following every function's copies one by one
# costs more than reading every unit once.
_NARROW = 0.9
# Rust symbols whose demangling pays for a fork (30 ms on this 130 MB binary's process).
_DEMANGLED = 2000


def literal_parts(pattern: str) -> tuple[str, ...]:
    """The parts of a qualified name that a shell pattern writes whole before its first
    wildcard (``rust_large::c07::gr*`` -> ``rust_large``, ``c07``): every name it
    matches has these parts, in this order, first."""
    try:
        pattern.encode()
    except UnicodeEncodeError:  # bytes from the command line that are no text
        return ()
    cut = min((i for i, c in enumerate(pattern) if c in "*?["), default=len(pattern))
    # without a wildcard every part is whole; else the last runs on into it
    whole = name_parts(pattern) if cut == len(pattern) else name_parts(pattern[:cut])[:-1]
    # C++'s conversion operators name a type, whose "::" no scope splits: none from there
    whole = whole[:next((i for i, p in enumerate(whole) if "operator" in p), len(whole))]
    return whole if _balanced("::".join(whole)) and all(whole) else ()


def _balanced(name: str) -> bool:
    """Whether every bracket of ``name`` closes (then ``name_parts`` splits it as
    DWARF's names nest)."""
    depth = 0
    for c in name.replace("->", ""):
        depth += (c in "<([") - (c in ">)]")
        if depth < 0:
            return False
    return depth == 0


def own_name(name: str) -> str:
    """The last part of a qualified name: what its DIE's DW_AT_name holds."""
    return name_parts(name)[-1]
