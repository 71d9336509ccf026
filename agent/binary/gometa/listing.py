"""A stripped Go program's function listing (``noop funcs``) straight from its runtime
metadata: what the DWARF made from that metadata would list, without making it."""

from __future__ import annotations

from collections import defaultdict

from agent.binary.gometa.pclntab import node_ranges
from agent.binary.gometa.program import GoProgram


def rows(program: GoProgram) -> list[dict[str, object]]:
    """Every function (name, address, size) with its inlined copies that have code, by
    address, then the functions that exist only inlined (address 0), by name: a copy
    has code where pclntab's inlining index names it or a copy inlined into it."""
    counts: dict[str, int] = defaultdict(int)
    pcl, gofunc = program.pclntab, program.module.gofunc
    for f in program.functions:
        tree, index = pcl.inlining(f.func, gofunc)
        code = node_ranges(tree, index)
        for n in tree:
            if n.index in code:
                counts[n.name.replace("·", ".")] += 1
    named = {f.name for f in program.functions}
    out: list[dict[str, object]] = [
        {"name": f.name, "address": f.entry, "size": f.size, "inlined": counts.get(f.name, 0)}
        for f in sorted(program.functions, key=lambda f: (f.entry, f.name))]
    out += [{"name": n, "address": 0, "size": 0, "inlined": c, "only_inlined": True}
            for n, c in sorted(counts.items()) if n and n not in named]
    return out
