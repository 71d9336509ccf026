"""Sites of one probe whose programs differ only in the registers their values are in
(a method inlined into three callers, its receiver in rax, rcx or rbx) share one
program: it takes each of those registers by the site's index, which the attach
cookie gives, and the rest of its text is the sites' own. A probe on many such sites
compiles one program rather than one each (the client_golang preset's trace program:
7 programs of 1,324 lines, not 11 of 2,080).

``apart`` writes a site's body with each general register it reads numbered in the
order it first appears (in its code, ``ctx->ax``, and its comments, ``rax``): two
sites whose texts are then equal are the same program but for those registers.
``program`` writes the shared one: a register all its sites agree on is read as
before; the others are read once, by a switch on the site's index.
"""

from __future__ import annotations

import re

from agent.binary.amd64 import PT_REGS

# What a site's values may be in: every register of pt_regs but the stack and
# instruction pointers (a site's own, never one of its values' places).
_FIELDS = {name: f for name, f in PT_REGS.items() if name not in ("rsp", "rip")}
_NAMES = {f: name for name, f in _FIELDS.items()}
_CODE = r"\bctx->(" + "|".join(_FIELDS.values()) + r")\b"
_READ = re.compile(_CODE + r"|/\*.*?\*/", re.S)
_NAMED = re.compile(r"\b(" + "|".join(_FIELDS) + r")\b")
_SLOT = re.compile("\0([CN])(\\d+)\0")  # a numbered register in code (C) or a comment (N)
Cases = list[tuple[int, tuple[str, ...]]]  # (site index, pt_regs field of each number)


def apart(text: str) -> tuple[str, tuple[str, ...]]:
    """``text`` with each register it reads numbered by first appearance, and the
    pt_regs field of each number."""
    order: dict[str, int] = {}

    def number(field: str, kind: str) -> str:
        return f"\0{kind}{order.setdefault(field, len(order))}\0"

    def one(m: re.Match[str]) -> str:
        if m.group(1):
            return number(m.group(1), "C")
        return _NAMED.sub(lambda n: number(_FIELDS[n.group(1)], "N"), m.group())

    return _READ.sub(one, text), tuple(order)


def program(marked: str, cases: Cases) -> tuple[list[str], str]:
    """The lines that read the registers the sites of ``cases`` (each site's index and
    fields, as ``apart`` gave them) do not agree on, by the site's index (``site``,
    declared before them), and ``marked`` with every numbered register read as it
    must be: directly where they agree, else from what those lines read."""
    fields = cases[0][1]
    agreed = {k: f for k, f in enumerate(fields) if all(c[k] == f for _si, c in cases)}

    def back(m: re.Match[str]) -> str:
        k = int(m.group(2))
        if k in agreed:
            return f"ctx->{agreed[k]}" if m.group(1) == "C" else _NAMES[agreed[k]]
        return f"noop_reg{k}"

    text = _SLOT.sub(back, marked)
    varying = [k for k in range(len(fields)) if k not in agreed]
    if not varying:
        return [], text
    by_regs: dict[tuple[str, ...], list[int]] = {}
    for si, regs in cases:
        by_regs.setdefault(tuple(regs[k] for k in varying), []).append(si)
    every = sorted({f for regs in by_regs for f in regs}, key=list(_NAMES).index)
    lines = [f"u64 {', '.join(f'noop_reg{k} = 0' for k in varying)};"
             "  /* the registers this site's values are in */", "{",
             # clang makes a switch of reads of ctx one read at an offset that varies,
             # which the verifier refuses: each is read once, where it is, and kept
             f"	volatile u64 {', '.join(f'noop_{f} = ctx->{f}' for f in every)};",
             "	switch (site) {"]
    for regs, sites in by_regs.items():
        lines.append("	" + " ".join(f"case {si}:" for si in sites) + " " +
                     " ".join(f"noop_reg{k} = noop_{f};" for k, f in zip(varying, regs,
                                                                      strict=True))
                     + " break;")
    return [*lines, "	}", "}"], text
