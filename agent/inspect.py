"""The API hunt: list functions, show a struct's layout, show where parameters live.

Answers are plain JSON-able data, cached by build-id, so a warm query reads one small
file and never imports the DWARF machinery.
"""

from __future__ import annotations

import fnmatch
from typing import Any

from agent import cache
from agent.binary.elf import ElfFile
from agent.errors import NoopError


def struct_layout(binary: str, type_name: str) -> dict[str, Any]:
    elf = ElfFile(binary)
    hit = cache.get(elf.build_id, "struct", type_name)
    if hit is not None:
        return dict(hit)
    from agent.dwarf.lookup import find_type
    from agent.dwarf.reader import Dwarf, tag
    from agent.dwarf.types import TypeNamer, layout_of

    dwarf = Dwarf(elf)
    namer = TypeNamer(dwarf)
    die = find_type(dwarf, type_name)
    target = namer.strip(die)
    if target is None or target.tag not in (
            "DW_TAG_structure_type", "DW_TAG_union_type", "DW_TAG_class_type"):
        what = "void" if target is None else tag(target).removeprefix("DW_TAG_")
        raise NoopError(f"type {type_name!r} is not a struct or union (it is {what}: "
                        f"{namer.name(target)}, {namer.size(target)} bytes)",
                        "name the struct it points to or contains")
    layout = layout_of(dwarf, namer, target, namer.name(die) if die is not target
                       else namer.name(target))
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
    out = {"name": type_name, "kind": layout.kind, "language": layout.language,
           "size": layout.size, "members": members}
    cache.put(elf.build_id, "struct", type_name, out)
    return out


def function_vars(binary: str, function: str) -> dict[str, Any]:
    elf = ElfFile(binary)
    hit = cache.get(elf.build_id, "vars", function)
    if hit is not None:
        return dict(hit)
    from agent.dwarf.functions import Functions
    from agent.dwarf.reader import Dwarf
    from agent.dwarf.types import TypeNamer

    dwarf = Dwarf(elf)
    fv = Functions(dwarf, TypeNamer(dwarf)).vars(function)

    def var(v: Any) -> dict[str, Any]:
        d: dict[str, Any] = {
            "name": v.name, "type": v.type, "size": v.size,
            "location": [p.to_json() for p in v.location] if v.location else None,
            "source": v.source}
        if v.note:
            d["note"] = v.note
        return d

    out = {"function": fv.function, "address": fv.address, "file_offset": fv.file_offset,
           "language": fv.language, "abi": fv.abi, "go_version": elf.go_version,
           "params": [var(v) for v in fv.params], "results": [var(v) for v in fv.results]}
    cache.put(elf.build_id, "vars", function, out)
    return out


def function_list(binary: str, pattern: str | None = None) -> list[dict[str, Any]]:
    elf = ElfFile(binary)
    rows = cache.get(elf.build_id, "funcs", "all")
    if rows is None:
        from agent.dwarf.functions import Functions
        from agent.dwarf.reader import Dwarf
        from agent.dwarf.types import TypeNamer

        dwarf = Dwarf(elf)
        rows = [{"name": f.name, "address": f.address, "size": f.size, "inlined": f.inlined}
                for f in Functions(dwarf, TypeNamer(dwarf)).summaries()]
        cache.put(elf.build_id, "funcs", "all", rows)
    if pattern:
        rows = [r for r in rows if fnmatch.fnmatchcase(r["name"], pattern)]
    return list(rows)
