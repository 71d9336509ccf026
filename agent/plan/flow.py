"""The control flow of the function holding a body of a line's code, as the body's
lines see it: its instructions with their successors and predecessors (a call that
does not come back has none), the statements of each line, the loops (back edges and
the heads of the loops holding each instruction), and whether reaching a statement
starts a pass through its line (``agent.plan.lines``).
"""

from __future__ import annotations

from elftools.dwarf.die import DIE

from agent.binary import sites
from agent.binary.dwarf import source as src
from agent.binary.dwarf.lines import Scope
from agent.plan.binary import Binary

# Calls that do not come back: the instruction after one is not reached through it.
_NO_RETURN_PREFIXES = ("runtime.morestack", "runtime.panic", "runtime.goPanic",
                       "runtime.throw", "runtime.fatal", "runtime.gopanic",
                       "core::panicking::", "core::slice::index::slice_", "core::result::"
                       "unwrap_failed", "core::option::unwrap_failed",
                       "core::option::expect_failed", "alloc::alloc::handle_alloc_error",
                       "std::process::abort", "std::process::exit")
_NO_RETURN = frozenset(("_Unwind_Resume", "abort", "exit", "_exit", "__stack_chk_fail",
                        "__assert_fail", "__fortify_fail", "pthread_exit"))


def _no_return(name: str) -> bool:
    return name in _NO_RETURN or name.startswith(_NO_RETURN_PREFIXES)


class Flow:
    """The control flow of the function holding a body, as the body's lines see it."""

    def __init__(self, b: Binary, source: src.Source, site: src.Site) -> None:
        self.b = b
        self.source = source
        self.body: Scope = site.chain[0]
        self.sub: DIE = site.subprogram
        self.holder = b.function_at(site.address) or ""
        self.insns = b.instructions(self.holder) if self.holder else ()
        self.at = {i.address: i for i in self.insns}
        self.entry = self.insns[0].address if self.insns else -1
        self.succs: dict[int, tuple[int, ...]] = {}
        self.preds: dict[int, list[int]] = {i.address: [] for i in self.insns}
        for i in self.insns:
            nxt = tuple(a for a in self._successors(i) if a in self.preds)
            self.succs[i.address] = nxt
            for a in nxt:
                self.preds[a].append(i.address)
        self._lines: dict[int, tuple[str, int] | None] = {}
        # The lines whose statements start at each address (several may: views of
        # lines whose code is empty there); in code inlined into the body, the call's.
        self.stmts: dict[int, set[tuple[str, int]]] = {}
        table = source.lines.table(self.body.die.cu)
        inner = list(self.body.inner_bodies())
        for lo, hi in self.body.ranges:
            for r in (table.within(lo, hi) if table else []):
                if r.stmt:
                    called = any(c.covers(r.address) for c in inner)
                    self.stmts.setdefault(r.address, set()).add(
                        self.line(r.address) or (r.file, r.line) if called
                        else (r.file, r.line))
        # A call inlined into the body starts a statement of its line where DWARF
        # says where it is entered.
        for copy in inner:
            entry = src.entry_pc(copy)
            line = self.line(entry) if entry is not None else None
            if entry is not None and line is not None:
                self.stmts.setdefault(entry, set()).add(line)
        self._loops()

    def _successors(self, i: sites.Insn) -> tuple[int, ...]:
        kind = i.kind
        if kind in (sites.RETURN, sites.STOP):
            return ()
        if kind == sites.JUMP:
            return (i.target,) if i.target is not None else ()
        if kind == sites.BRANCH:  # conditional: taken and not
            return (i.target, i.end) if i.target is not None else (i.end,)
        if kind == sites.CALL and i.target is not None and \
                _no_return(self.b.symbol_name(i.target)):
            return ()
        return (i.end,)

    def line(self, address: int) -> tuple[str, int] | None:
        if address not in self._lines:
            self._lines[address] = self.source.line_in(self.body, address)
        return self._lines[address]

    def _loops(self) -> None:
        """The back edges (a depth-first walk from the entry meets an instruction still
        on its path) and, for each instruction, the heads of the loops holding it."""
        self.back: set[tuple[int, int]] = set()
        state: dict[int, int] = {}  # 1: on the walk's path, 2: done
        roots = [self.entry] + [a for a in self.preds if not self.preds[a]]
        for root in roots:
            if root in state:
                continue
            stack = [(root, iter(self.succs.get(root, ())))]
            state[root] = 1
            while stack:
                node, it = stack[-1]
                nxt = next(it, None)
                if nxt is None:
                    state[node] = 2
                    stack.pop()
                elif state.get(nxt) == 1:
                    self.back.add((node, nxt))
                elif nxt not in state:
                    state[nxt] = 1
                    stack.append((nxt, iter(self.succs.get(nxt, ()))))
        self.heads: dict[int, set[int]] = {}
        for latch, head in self.back:
            body = {head}
            todo = [latch]
            while todo:
                a = todo.pop()
                if a in body:
                    continue
                body.add(a)
                todo.extend(self.preds.get(a, ()))
            for a in body:
                self.heads.setdefault(a, set()).add(head)

    def starts_pass(self, s: int, p: int | None, x: tuple[str, int]) -> bool:
        """Whether reaching statement ``s`` of line ``x`` (from ``p``; None: by a call
        of the function) starts a pass through the line rather than going on with one.

        It goes on with one when, walking back from ``p`` without taking a loop's
        back edge and without leaving the current iteration of the loops holding
        ``s``, every way meets a statement of ``x`` first: the line's code resumed
        after code of other lines the compiler scheduled among it, or the other side
        of an ``if`` joining (so a line counts once however its code is spread). A
        way that meets the head of a loop holding ``s`` first, or the function's
        entry, or code outside the body, starts a new pass."""
        if p is None:
            return True
        heads = self.heads.get(s, set())
        todo, seen = [p], set()
        while todo:
            a = todo.pop()
            if a in seen:
                continue
            seen.add(a)
            if self.line(a) is None or a in heads or a == self.entry:
                if a in self.stmts and x in self.stmts[a] and a not in heads:
                    continue  # the entry is a statement of the line: it goes on
                return True
            if a in self.stmts and x in self.stmts[a]:
                continue
            preds = [q for q in self.preds.get(a, ()) if (q, a) not in self.back]
            if not preds:
                return True
            todo.extend(preds)
        return False
