"""The API hunt: list functions, show a struct's layout, show where parameters live.

Answers are plain JSON-able data, cached by build-id, so a warm query reads one small
file and never imports the DWARF machinery.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from agent import cache, heap
from agent.binary import debuginfo
from agent.binary.elf import ElfFile
from agent.binary.gometa.scope import Scope
from agent.errors import NoopError, NotFound
from agent.tools.answers import SHAPES

if TYPE_CHECKING:
    from agent.binary.dwarf.reader import Dwarf
    from agent.binary.dwarf.types import TypeNamer

Compute = Callable[[ElfFile, "Dwarf", "TypeNamer"], Any]


class _Opened:
    """A binary as the answers read it: its ELF, where its debug info is, its cache key,
    and its DWARF once an answer needed it."""

    def __init__(self, binary: str, given: debuginfo.Given) -> None:
        self.elf = ElfFile(binary)
        self.given = given
        try:
            self.source = debuginfo.locate(self.elf, None, given)
            self.cache_id = debuginfo.cache_id(self.elf, self.source)
        except BaseException:
            self.elf.close()
            raise
        self.readers: dict[Scope | None, tuple[Dwarf, TypeNamer]] = {}

    def reader(self, scope: Scope | None) -> tuple[Dwarf, TypeNamer]:
        """The DWARF an answer reads, with its type namer: for a stripped Go binary,
        made from the metadata ``scope`` names (a struct, a function) for the first
        answer; a caller asking about more (walking every struct) gets the whole
        program's, made once."""
        from agent.binary.dwarf.reader import Dwarf
        from agent.binary.dwarf.types import TypeNamer

        if self.source.kind != debuginfo.GO_METADATA or None in self.readers or \
                (self.readers and scope not in self.readers):
            scope = None
        if scope not in self.readers:
            dwarf = Dwarf(self.elf, self.source if scope is None
                          else debuginfo.locate(self.elf, scope, self.given))
            self.readers[scope] = dwarf, TypeNamer(dwarf)
        return self.readers[scope]

    def close(self) -> None:
        for dwarf, _namer in self.readers.values():
            dwarf.close()
        self.elf.close()


# The binaries asked about last (a few), by path and version: answers about many of
# their types or functions in one process (a caller walking them all, or comparing a
# stripped build with its twin) open and hash each once.
_recent: dict[tuple[str, str | None, tuple[int, int, int, int]], _Opened] = {}
KEEP_OPEN = 4


def close() -> None:
    """Close the binaries kept open for answers in a row (a long-lived caller between
    batches; the next answer opens them again)."""
    for old in _recent.values():
        old.close()
    _recent.clear()


def _opened(binary: str, debug: str | None) -> _Opened:
    """``binary`` opened for answers, with ``debug`` its debug file when one is named."""
    from agent.binary.elf import stamp

    given = debuginfo.Given(debug)
    version = stamp(binary)
    if version is None:
        return _Opened(binary, given)  # gone: ElfFile says so in its words
    key = (binary, debug, version)
    got = _recent.pop(key, None)
    if got is None:
        while len(_recent) >= KEEP_OPEN:  # the least recently asked goes
            _recent.pop(next(iter(_recent))).close()
        got = _Opened(binary, given)
    _recent[key] = got  # last: the most recently asked
    return got


def _answer(binary: str, debug: str | None, kind: str, key: str, compute: Compute,
            scope: Scope | None = None) -> Any:
    """The cached answer for (build-id, kind, key) if it has the shape of its kind,
    else computed from DWARF (for a stripped Go binary, made for ``scope``: what the
    answer reads) and cached."""
    opened = _opened(binary, debug)

    def made() -> Any:
        from agent.binary.dwarf.damage import damage_said

        with damage_said(opened.source.path):
            dwarf, namer = opened.reader(scope)
            return compute(opened.elf, dwarf, namer)
    return _cached(opened, kind, key, made)


def _cached(opened: _Opened, kind: str, key: str, make: Callable[[], Any]) -> Any:
    """The cached answer for (build-id, kind, key) if it has the shape of its kind,
    else ``make``'s, cached."""
    hit = cache.get(opened.cache_id, kind, key, load=cache.shaped(SHAPES[kind]))
    if hit is not None:
        return hit
    with heap.paused():
        value = make()
    cache.put_aside(opened.cache_id, kind, key, value)
    return value


def struct_layout(binary: str, type_name: str, debug: str | None = None) -> dict[str, Any]:
    def compute(elf: ElfFile, dwarf: Dwarf, namer: TypeNamer) -> dict[str, Any]:
        from agent.binary.dwarf.dies import tag
        from agent.binary.dwarf.lookup import find_type
        from agent.binary.dwarf.types import layout_of

        try:
            die = find_type(dwarf, type_name)
        except NotFound:
            if dwarf.source.kind == "symbols":
                from agent.binary.dwarf.symtab import NO_VALUES

                raise NoopError(f"type {type_name!r}: the binary is a Rust build without "
                                "debug info, which keeps no types", NO_VALUES) from None
            if not dwarf.from_metadata:
                raise
            from agent.binary.gometa.program import GoProgram
            from agent.errors import nearest

            # The DWARF made for this one type names few others: the nearest of all, of
            # its package or of its own name (ranking every name takes seconds).
            package, _dot, own = type_name.lstrip("*").rpartition(".")
            every = [t.name for t in GoProgram(elf).types.all]
            named = nearest(type_name, [n for n in every if n.lstrip("*").startswith(
                package + ".") or n.endswith("." + own)] or every)
            near = f"; did you mean {', '.join(named)}?" if named else ""
            raise NoopError(
                f"type {type_name!r} has no type descriptor in this stripped Go binary, so "
                "its layout is unknown (only the types a program puts in an interface or "
                f"reflects on keep one){near}",
                "give the binary's debug info (--debuginfo)") from None
        target = namer.strip(die)
        if target is None or target.tag not in (
                "DW_TAG_structure_type", "DW_TAG_union_type", "DW_TAG_class_type"):
            what = "void" if target is None else tag(target).removeprefix("DW_TAG_")
            raise NoopError(f"type {type_name!r} is not a struct or union (it is {what}: "
                            f"{namer.name(target)}, {namer.size(target)} bytes)",
                            "name the struct it points to or contains")
        layout = layout_of(dwarf, namer, target, namer.name(die))
        members = []
        for m in layout.members:
            entry: dict[str, Any] = {"name": m.name, "type": m.type, "offset": m.offset,
                                     "size": m.size}
            if m.bit_size is not None:
                entry["bit_offset"] = m.bit_offset
                entry["bit_size"] = m.bit_size
            if m.discriminant:
                entry["discriminant"] = True
            if m.discr_value is not None:
                entry["discr_value"] = m.discr_value
            members.append(entry)
        return {"name": type_name, "kind": layout.kind, "language": layout.language,
                "size": layout.size, "members": members,
                "debug": "Go type descriptors" if dwarf.from_metadata else dwarf.source.how}

    return dict(_answer(binary, debug, "struct", type_name, compute,
                        Scope(types=(type_name,))))


def function_vars(binary: str, function: str, debug: str | None = None) -> dict[str, Any]:
    def var(v: Any) -> dict[str, Any]:
        d: dict[str, Any] = {
            "name": v.name, "type": v.type, "size": v.size,
            "location": [p.to_json() for p in v.location] if v.location else None,
            "source": v.source}
        if v.note:
            d["note"] = v.note
        return d

    def compute(elf: ElfFile, dwarf: Dwarf, namer: TypeNamer) -> dict[str, Any]:
        from agent.binary.dwarf.functions import Functions

        functions = Functions(dwarf, namer)
        fv = functions.vars(function)
        out = {"function": fv.function, "address": fv.address,
               "file_offset": fv.file_offset, "language": fv.language, "abi": fv.abi,
               "go_version": elf.go_version, "params": [var(v) for v in fv.params],
               "results": [var(v) for v in fv.results], "debug": dwarf.source.how}
        if dwarf.from_metadata:
            _from_metadata(out, functions, function)
        missing = functions.no_values(function)
        if missing:
            from agent.binary.dwarf.symtab import NO_VALUES

            out["note"] = f"{missing}; to see its parameters, {NO_VALUES}"
        return out

    return dict(_answer(binary, debug, "vars", function, compute,
                        Scope(functions=(function,))))


def build_facts(binary: str, debug: str | None = None) -> dict[str, Any]:
    """Where the binary's DWARF comes from, and for Go its toolchain and modules."""
    from agent.binary.gometa import buildinfo
    from agent.binary.gometa.image import Image

    elf = ElfFile(binary)
    info = buildinfo.read(Image(elf))
    return {"debug": debuginfo.locate(elf, None, debuginfo.Given(debug)).how,
            "go_version": info.go_version if info else None,
            "main": info.main.path if info and info.main else None,
            "modules": [{"path": m.path, "version": m.version} for m in info.deps]
            if info else []}


METADATA_SOURCE = "abi (signature from type metadata)"


def _from_metadata(out: dict[str, Any], functions: Any, function: str) -> None:
    """A stripped Go binary's answer: each location is the ABI's, from a signature the
    type metadata keeps for methods reachable through an interface or reflection."""
    from agent.binary.dwarf.dies import attr

    _sym, die = functions.find(function)
    signed = attr(die, "DW_AT_prototyped")
    for v in out["params"] + out["results"]:
        if v["source"] == "abi":
            v["source"] = METADATA_SOURCE if signed else "abi (receiver type from the name)"
            if v.get("note", "").startswith("dwarf: no location"):
                del v["note"]  # there is no DWARF to have one
    if not signed:
        known = "its receiver only, from its name" if out["params"] else "nothing"
        out["note"] = (f"the binary keeps no signature for this function ({known}): the "
                       "type metadata has signatures only for methods reachable through an "
                       "interface or reflection; its debug info (--debuginfo) would give "
                       "the rest")


def listing(dwarf: Dwarf, namer: TypeNamer, pattern: str | None = None
            ) -> list[dict[str, Any]]:
    """``noop funcs``' rows from DWARF: every function with its inlined copies, then
    those that exist only inlined; with ``pattern``, those it matches (read from the
    units its literal beginning leads to, where it names a part whole)."""
    from agent.binary.dwarf.functions import Functions

    functions = Functions(dwarf, namer)
    found = functions.summaries_of(pattern) if pattern else None
    listed = found if found is not None else functions.summaries()
    rows: list[dict[str, Any]] = [
        {"name": f.name, "address": f.address, "size": f.size, "inlined": f.inlined}
        if f.address else {"name": f.name, "address": 0, "size": f.size,
                           "inlined": f.inlined, "only_inlined": True} for f in listed]
    if pattern and found is None:
        if dwarf.cache_id:  # every function was listed: kept for the next pattern too
            cache.put_aside(dwarf.cache_id, "funcs", "all", rows)
        rows = [r for f, r in zip(listed, rows, strict=True)
                if fnmatch.fnmatchcase(f.name, pattern)]
    return rows


def _narrows(pattern: str) -> bool:
    """Whether ``pattern`` names a part of the names it matches whole (a crate, a module,
    a type), which leads to the units that can hold them."""
    from agent.binary.dwarf.listing import literal_parts

    return bool(literal_parts(pattern))


def function_list(binary: str, pattern: str | None = None, debug: str | None = None
                  ) -> list[dict[str, Any]]:
    opened = _opened(binary, debug)
    if opened.source.kind == debuginfo.GO_METADATA:
        from agent.binary.gometa import listing as metadata
        from agent.binary.gometa.program import GoProgram

        # A stripped Go binary's: from its metadata, without making DWARF of it.
        rows = _cached(opened, "funcs", "all", lambda: metadata.rows(GoProgram(opened.elf)))
    else:
        rows = None
        if pattern:  # every function's rows, when kept: filtered
            rows = cache.get(opened.cache_id, "funcs", "all", load=cache.shaped(SHAPES["funcs"]))
        if rows is None and pattern and _narrows(pattern):
            rows = _answer(binary, debug, "funcs", f"match {pattern}",
                           lambda _elf, dwarf, namer: listing(dwarf, namer, pattern))
        if rows is None:
            rows = _answer(binary, debug, "funcs", "all",
                           lambda _elf, dwarf, namer: listing(dwarf, namer))
    if pattern:
        rows = [r for r in rows if fnmatch.fnmatchcase(r["name"], pattern)]
    return list(rows)


def function_lines(binary: str, function: str, source_dir: str | None = None,
                   debug: str | None = None) -> dict[str, Any]:
    """A function's source lines: each with its statement addresses (where a probe can
    go) and the functions inlined there, and its text when the file is on this machine
    (at the path the binary names, or under ``source_dir``)."""
    def compute(_elf: ElfFile, dwarf: Dwarf, namer: TypeNamer) -> dict[str, Any]:
        from agent.binary.dwarf.functions import Functions
        from agent.binary.dwarf.source import Source

        return Source(Functions(dwarf, namer)).listing(function)

    got = dict(_answer(binary, debug, "lines", function, compute))
    from agent.binary.dwarf.lines import read_source

    texts: dict[str, list[str] | None] = {}
    for entry in got["lines"]:
        file = entry["file"]
        if file not in texts:
            texts[file] = read_source(file, source_dir)
        text = texts[file]
        if text is not None and 0 < entry["line"] <= len(text):
            entry["source"] = text[entry["line"] - 1]
    got["source_found"] = sorted(f for f, t in texts.items() if t is not None)
    return got


def line_vars(binary: str, where: str, debug: str | None = None) -> dict[str, Any]:
    """The parameters and locals available at ``FUNCTION:LINE`` or ``FILE:LINE``: at
    each statement address of the line (where a debugger stops), each value's type and
    location there; and where a line probe counts passes (``counts``: a statement, or
    the jump into one, ``statement`` false), which reads what is shown there, or why a
    line probe there is refused."""
    from agent.binary.dwarf.source import split_line

    split_line(where)  # a malformed argument is refused before any DWARF is read

    def compute(_elf: ElfFile, dwarf: Dwarf, namer: TypeNamer) -> dict[str, Any]:
        from agent.binary.dwarf import sitevars
        from agent.binary.dwarf.source import Site, Source
        from agent.plan.binary import Binary
        from agent.plan.lines import counted_sites

        b = Binary.opened(dwarf.elf, dwarf, namer)
        source = Source(b.functions)

        def entry(address: int, s: Site, **more: Any) -> dict[str, Any]:
            return {"address": address, "file_offset": dwarf.elf.file_offset(address),
                    "file": s.file, "line": s.line, "function": s.function,
                    **({"inlined_into": s.into} if s.into else {}), **more,
                    "vars": [{"name": v.name, "kind": v.kind, "type": v.type,
                              "size": v.size, "location": [p.to_json() for p in v.location]
                              if v.location else None, **({"note": v.note} if v.note else {})}
                             for v in (sitevars.vars_at(source, s) if s.chain else ())]}

        statements = source.sites(where)
        counted, refused = counted_sites(b, where, source)
        at = {a: (site, why) for a, site, why in counted if site.address == a}
        sites = [entry(s.address, s, **({"counts": at[s.address][1]}
                                         if s.address in at else {}))
                 for s in statements]
        stmts = {s.address for s in statements}
        sites += [entry(a, site, counts=why, statement=False)
                  for a, site, why in counted if a not in stmts or a not in at]
        return {"line": where, "sites": sites, "debug": dwarf.source.how,
                **({"refused": refused} if refused else {})}

    return dict(_answer(binary, debug, "line-vars", where, compute))
