"""Sites whose programs differ only in the registers their values are in share one
program (``kernel.shapes``): generated bodies, each site with registers of its own, are
one text apart from their registers, and the shared program, with the registers its
switch reads for a site put back, is that site's own body again."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from agent.binary.amd64 import PT_REGS
from agent.kernel import shapes

_REGS = [name for name in PT_REGS if name not in ("rsp", "rip")]


def _write(template: list[tuple[str, int]], regs: tuple[str, ...]) -> str:
    """A body: each line's text with its register slot filled by ``regs`` (a read in
    code, and its name in a comment)."""
    return "\n".join(f"/* v{n} = {regs[k]} -> *(+8) */\n{{ u64 a = ctx->{PT_REGS[regs[k]]};"
                     f" {text} }}" for n, (text, k) in enumerate(template))


@st.composite
def _sites(draw: st.DrawFn) -> tuple[list[tuple[str, int]], list[tuple[str, ...]]]:
    slots = draw(st.integers(1, 10))  # past 8: a number's name is no register's (r8)
    template = draw(st.lists(st.tuples(st.sampled_from(
        ["noop_read(&a, 8, a + 8);", "a += ctx->sp;", "if (ctx->flags & 0x40) return 0;",
         "e->v0 = a;"]), st.integers(0, slots - 1)), min_size=slots, max_size=12))
    used = sorted({k for _t, k in template})
    template = [(t, used.index(k)) for t, k in template]  # slots numbered as they are used
    sites = draw(st.lists(st.permutations(_REGS).map(lambda p: tuple(p[:len(used)])),
                          min_size=1, max_size=6))
    return template, sites


@settings(max_examples=300, deadline=None)
@given(_sites())
def test_a_shared_program_is_each_sites_own_with_its_registers(
        made: tuple[list[tuple[str, int]], list[tuple[str, ...]]]) -> None:
    template, sites = made
    bodies = [_write(template, regs) for regs in sites]
    parts = [shapes.apart(b) for b in bodies]
    assert len({marked for marked, _f in parts}) == 1  # one shape
    marked = parts[0][0]
    cases = [(si, fields) for si, (_m, fields) in enumerate(parts)]
    switch, text = shapes.program(marked, cases)
    if len(set(sites)) == 1:
        assert switch == [] and text == bodies[0]  # one site's registers: as it wrote it
    declared = [re.findall(r"(noop_\w+) = ", line) for line in switch if "u64" in line]
    if switch:  # the numbers' names, then the registers' copies: C has each once
        names = [n for names in declared for n in names]
        assert len(declared) == 2 and len(set(names)) == len(names), switch
    reads = {int(si): dict(re.findall(r"(noop_reg\d+) = noop_(\w+);", line))
             for line in switch for si in re.findall(r"case (\d+):", line)}
    for si, body in enumerate(bodies):
        own = re.sub(r"/\*.*?\*/", "", text)
        for var, field in reads.get(si, {}).items():
            own = re.sub(rf"\b{var}\b", f"ctx->{field}", own)
        assert own == re.sub(r"/\*.*?\*/", "", body), (si, switch)


def test_sites_that_differ_otherwise_are_not_one_shape() -> None:
    a = shapes.apart("a = ctx->ax; noop_read(&a, 8, a + 8);")[0]
    b = shapes.apart("a = ctx->ax; noop_read(&a, 8, a + 16);")[0]
    c = shapes.apart("a = ctx->ax; b = ctx->ax;")[0]
    d = shapes.apart("a = ctx->ax; b = ctx->bx;")[0]
    e = shapes.apart("a = ctx->sp + 8;")[0]
    f = shapes.apart("a = ctx->sp + 16;")[0]
    assert a != b and c != d and e != f  # offsets, a register read twice, the stack


def test_only_ctx_itself_is_a_register_read() -> None:
    """``myctx->ax`` (any name ending in ctx) is no read of the site's registers."""
    marked, fields = shapes.apart("b = myctx->ax; a = ctx->bx;")
    assert fields == ("bx",) and "myctx->ax" in marked
