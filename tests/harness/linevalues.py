"""The values ``noop vars FILE:LINE`` places where a line probe counts a line's passes,
as the selectors a spec writes to read them: an integer or a pointer whole, a string,
``len()`` of a string or slice, each integer and string field of a struct, wherever the
pieces each one needs are somewhere at every such site of the line."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agent.tools import inspect

STRINGS = ("string", "&str", "&mut str")  # a pointer, then a length
SCALAR = re.compile(r"^(u?int\d*|uintptr|bool|[iu](8|16|32|64|128|size)|_Bool|size_t|"
                    r"ssize_t|((unsigned|signed|long|short|int|char)( |$))+)$")


def _available(location: list[dict[str, Any]] | None) -> list[tuple[int, int]]:
    """The (offset, size) of each piece of a value that is somewhere."""
    out, at = [], 0
    for piece in location or ():
        if not piece.get("optimized_out"):
            out.append((at, piece["size"]))
        at += piece["size"]
    return out


def _selectors(binary: Path, var: dict[str, Any]) -> Iterator[tuple[str, list[tuple[int, int]]]]:
    """Each selector that reads (a part of) ``var``, with the byte ranges it needs: none
    for a result (read at an exit) or a name no selector can spell (newer Go names the
    words of a decomposed string ``label.ptr``, ``~r0.len``)."""
    name, tname = var["name"], var["type"]
    if var["kind"] == "result" or not re.fullmatch(r"[A-Za-z_]\w*", name):
        return
    if SCALAR.match(tname) or tname.startswith("*") or tname.endswith("*"):
        yield name, [(0, var["size"])]
    elif tname in STRINGS:
        yield name, [(0, 8), (8, 8)]
        yield f"len({name})", [(8, 8)]
    elif tname.startswith(("[]", "&[", "&mut [")):  # a Go slice, a Rust slice
        yield f"len({name})", [(8, 8)]
    else:
        try:
            layout = inspect.struct_layout(str(binary), tname)
        except Exception:
            return
        if layout.get("kind") != "structure":
            return
        for m in layout["members"]:
            at = m["offset"]
            if SCALAR.match(m["type"]):
                yield f"{name}.{m['name']}", [(at, m["size"])]
            elif m["type"] in STRINGS:
                yield f"{name}.{m['name']}", [(at, 8), (at + 8, 8)]


def _readable(needs: list[tuple[int, int]], pieces: list[tuple[int, int]]) -> bool:
    """Whether each range needed is one piece that is somewhere."""
    return all(need in pieces for need in needs)


def line_values(binary: Path, where: str) -> dict[str, str]:
    """The selectors of every value placed at every site where a line probe counts the
    line's passes (noop vars marks them), by a value name."""
    sites = [s for s in inspect.line_vars(str(binary), where)["sites"] if "counts" in s]
    common: dict[str, str] | None = None
    for site in sites:
        here = {}
        for var in site["vars"]:
            pieces = _available(var["location"])
            for selector, needs in _selectors(binary, var):
                if _readable(needs, pieces):
                    here[re.sub(r"\W+", "_", selector).strip("_")] = selector
        common = here if common is None else \
            {k: v for k, v in common.items() if here.get(k) == v}
    return common or {}



def every_line(binary: Path, function: str) -> dict[str, dict[str, str]]:
    listing = inspect.function_lines(str(binary), function)
    out = {}
    for entry in listing["lines"]:
        where = f"{Path(entry['file']).name}:{entry['line']}"
        if entry["sites"] and where not in out:
            out[where] = line_values(binary, where)
    return out


