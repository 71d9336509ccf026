"""The units of functions in the DWARF noop writes from a stripped Go binary's runtime
metadata: a unit per package, with its line table from pclntab, a subprogram per
function written, its inlined copies (``DW_TAG_inlined_subroutine`` with the ranges
pclntab's inlining tree gives, and the file and line of each call) and, for a method
whose signature the type metadata keeps (or a function a spec gives one of), its
parameters and results with types and no locations; an abstract entry for every
other function named as inlined.
"""

from __future__ import annotations

from collections import defaultdict

from agent.binary.dwarf.writer import Info, LineRow, line_program
from agent.binary.gometa import gotype as gt
from agent.binary.gometa.abbrevs import GO_LANGUAGE, PRODUCER
from agent.binary.gometa.pclntab import PCDATA_INLTREE_INDEX, InlinedCall, node_ranges
from agent.binary.gometa.program import Function, GoProgram, Signature
from agent.binary.gometa.typeunit import Declared, Known, package_of, receiver_of
from agent.errors import NoopError


def functions_units(info: Info, program: GoProgram, functions: list[Function],
                     trees: dict[str, list[InlinedCall]], declared: dict[str, Declared],
                     lines: bytearray, by_name: Known) -> None:
    """A unit per package of the ``functions`` written, each function with its inlined
    copies; every other function named as inlined gets an abstract entry in a unit of
    its package."""
    by_package: dict[str, list[Function]] = defaultdict(list)
    for f in functions:
        by_package[package_of(f.name)].append(f)
    inlined_names: set[str] = set()
    for tree in trees.values():
        inlined_names.update(n.name.replace("·", ".") for n in tree)
    written = {f.name for f in functions}
    abstract: dict[str, list[str]] = defaultdict(list)  # not written here, by package
    for name in inlined_names - written:
        abstract[package_of(name)].append(name)
    for pkg in sorted(by_package.keys() | abstract.keys()):
        funcs = by_package.get(pkg, [])
        start = info.begin_unit()
        if not funcs:
            info.die("cu", pkg, GO_LANGUAGE, PRODUCER, 0)
        else:
            spans = _merge([(f.entry, f.entry + max(f.size, 1)) for f in funcs])
            # The unit's line table, from each function's pcfile and pcln tables.
            files: dict[str, int] = {}
            rows = {f.name: [(lo, hi, files.setdefault(name, len(files) + 1), line)
                             for lo, hi, name, line in program.pclntab.lines(f.func)]
                    for f in funcs}
            stmt_list = len(lines)
            lines += line_program(list(files), [rows[f.name] for f in
                                                sorted(funcs, key=lambda f: f.entry)])
            info.die("cu_ranges", pkg, GO_LANGUAGE, PRODUCER, 0, info.range_list(spans),
                     stmt_list)
        for f in funcs:
            sig = by_name.signature(f)
            receiver = receiver_of(f.name, by_name) if sig is None else sig.receiver
            given = declared.get(f.name)
            if given is not None and sig is not None:
                _agree(f.name, given, sig)
            info.die("subprogram", f.name, f.entry, f.size, 1 if sig or given else 0,
                     key=("fn", f.name))
            _params(info, sig, receiver, given)
            tree = trees.get(f.name, [])
            code = node_ranges(tree, program.pclntab.pcdata(f.func, PCDATA_INLTREE_INDEX)) \
                if tree else {}
            for node in (n for n in tree if n.parent < 0):
                _inlined(info, tree, node, code, rows[f.name])
            info.end_children()
        for name in sorted(abstract.get(pkg, ())):
            info.die("abstract", name, 1, key=("fn", name))
        info.end_children()
        info.unit(start)


def _agree(fn: str, given: Declared, sig: Signature) -> None:
    """A spec's signature must be the one the type metadata keeps, where it keeps one."""
    mine = ([t for _n, _r, t in given[0]], [t for _n, _r, t in given[1]])
    theirs = ([p.name for p in sig.func.params], [r.name for r in sig.func.results])
    if mine != theirs:
        raise NoopError(f"signature of {fn}: the binary's type metadata says "
                        f"{sig.func.name}, not the spec's",
                        "leave signature: out for this function, or correct it")


def _params(info: Info, sig: Signature | None, receiver: gt.GoType | None,
            given: Declared | None) -> None:
    if receiver is not None:
        info.die("param", "p0", receiver.address, 0)
    if given is not None:
        for name, ref, _t in given[0]:
            info.die("param", name, ref, 0)
        for name, ref, _t in given[1]:
            info.die("param", name, ref, 1)
        return
    if sig is None:
        return
    for i, p in enumerate(sig.func.params, start=1):
        info.die("param", f"p{i}", p.address, 0)
    for i, r in enumerate(sig.func.results):
        info.die("param", f"~r{i}", r.address, 1)


def _inlined(info: Info, tree: list[InlinedCall], node: InlinedCall,
             code: dict[int, list[tuple[int, int]]], rows: list[LineRow]) -> None:
    """The inlined copy ``node`` of a function (its ``tree``, each node's ``code``), with
    the copies inlined into it, each with the file and line of its call: those of its
    ``parent_pc`` in the function's ``rows``."""
    def emit(n: InlinedCall) -> None:
        got = _merge(code.get(n.index, []))
        if not got:
            return
        name = n.name.replace("·", ".")
        at = next(((file, line) for lo, hi, file, line in rows if lo <= n.parent_pc < hi),
                  (0, 0))
        info.die("inlined", ("fn", name), info.range_list(got), *at)
        for child in tree:
            if child.parent == n.index:
                emit(child)
        info.end_children()

    emit(node)


def _merge(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(hi, out[-1][1]))
        else:
            out.append((lo, hi))
    return out
