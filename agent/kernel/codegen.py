"""Plan -> BPF C: a program per probe site (sites of one shape share one, ``generate``),
built by small emitters over the plan's fetch steps, with the hand-written helpers of
``bpf/noop.h`` included at the top.
The emitters are by part: ``prelude`` the first lines and shared maps, ``bodies`` what
every site's body is made of, ``folds`` and ``exits`` the bodies of aggregates and
exit probes; what the program is made into is ``program.Program``.

Kernel facts enter only as arguments (whether an XMM helper exists), never by looking
at the running system here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import accumulate
from typing import Literal

from agent.binary.arch import by_name
from agent.kernel import aggregate, events, shapes
from agent.kernel.bodies import Ctx, event_c, renew_c
from agent.kernel.events import Layout
from agent.kernel.exits import call_c, call_maps, drop_c, return_c
from agent.kernel.folds import fold_c
from agent.kernel.prelude import XMM_CALL, prelude
from agent.kernel.program import Program
from agent.plan.model import Plan, ProbePlan

Mode = Literal["trace", "run"]  # noop --binary/--config (events) or noop run (aggregates)


def generate(plan: Plan, xmm_helper: str | None = None, mode: Mode = "trace",
             cookies: bool = False) -> Program:
    """The C program for ``plan``. ``xmm_helper`` names a kernel function that reads
    XMM registers from a uprobe (``bpf_get_fp_reg(dst, size, regno)``): a float held
    whole in one is read through it. With None (every upstream kernel today) such a
    value is reported unreadable instead of guessed.

    ``mode`` ``trace``: every hit is an event for the terminal. ``run``: probes fold
    hits into their in-kernel aggregate, and only probes that need every hit in noop
    send events (without waking it: noop drains the ring on a timer); probes with
    neither are left out.

    With ``cookies`` (the kernel has ``bpf_get_attach_cookie``), the sites of a probe
    whose programs differ only in their index, or also in the registers their values
    are in (``shapes``), share one program, which reads the index from the cookie its
    uprobe was attached with: a probe on many functions of one shape compiles and
    verifies once."""
    out = _Made(prelude(plan, xmm_helper, cookies))
    base = list(accumulate((len(p.sites) for p in plan.probes), initial=0))  # probe's first
    for pi, probe in enumerate(plan.probes):
        lay = events.layout(pi, probe)
        out.layouts.append(lay)
        agg = aggregate.layout(pi, probe) \
            if mode == "run" and probe.aggregate is not None else None
        if agg is not None:
            out.aggs[pi] = agg
        out.lines += _probe_maps(probe, lay, agg)
        if mode == "run" and agg is None and not probe.events and not probe.renews:
            continue
        target = plan.target(probe.target)
        if probe.at == "exit":
            out.lines += call_maps(pi, lay, probe)
        for si, site in enumerate(probe.sites):
            # (a renew site's program differs from its probe's others only by index too)
            share = cookies and site.role in ("", "renew") and len(probe.sites) > 1
            ctx = Ctx(pi, si, probe, site, lay, target.goid_offset, xmm_helper,
                      target.stack_hi_offset, site_c="site" if share else str(si),
                      arch=by_name(target.arch))
            _site(out, ctx, agg, mode, plan.targets.index(target), base[pi], share)
    _registers_apart(out)
    all_sites = tuple((pi, si) for pi, p in enumerate(plan.probes) for si in range(len(p.sites)))
    calls = {XMM_CALL: xmm_helper} if xmm_helper is not None else {}
    return Program("\n".join(out.lines) + "\n", tuple(out.layouts), out.aggs,
                   tuple(out.functions), out.unreadable, out.derived, calls, cookies, all_sites)


@dataclass(slots=True)
class _Made:
    """What ``generate`` has made so far: the C's lines, and the program's data."""

    lines: list[str]
    layouts: list[Layout] = field(default_factory=list)
    functions: list[tuple[int, int, str]] = field(default_factory=list)
    aggs: dict[int, aggregate.Layout] = field(default_factory=dict)
    unreadable: dict[tuple[int, int], dict[str, str]] = field(default_factory=dict)
    derived: dict[tuple[int, int], dict[str, str]] = field(default_factory=dict)
    shared: dict[str, _Shared] = field(default_factory=dict)  # by ``shapes.apart``'s text


@dataclass(slots=True)
class _Shared:
    """A program the sites of one shape share: its name, where its lines start in
    ``_Made.lines`` and how many, and each site's registers (``shapes.apart``)."""

    name: str
    at: int
    size: int
    cases: shapes.Cases


def _site(out: _Made, ctx: Ctx, agg: aggregate.Layout | None, mode: Mode, target: int,
          first: int, share: bool) -> None:
    """Site ``ctx.si`` of probe ``ctx.pi`` (its target the plan's ``target``-th, its
    number in noop_traps ``first`` + its index): its program, or with ``share`` another
    site's that has the same text, and the values it leaves unread or derives."""
    pi, si, probe, site = ctx.pi, ctx.si, ctx.probe, ctx.site
    name = f"noop_p{pi}_s{si}"
    body, why = _body(ctx, agg, mode, probe.events)
    gsi = f"{first} + site" if share else str(first + si)
    # A uprobe belongs to the file; perf's own pid filter would follow one
    # thread only, and a Go program's goroutines run on many.
    body = [f"if (noop_left_out({target}))"
            "  /* --pid: another process */", "\treturn 0;", *body]
    # Every trap costs its process, whoever it is for: counted first.
    body = [f"noop_trap({gsi});", *body]
    out.unreadable[(pi, si)] = why
    out.derived[(pi, si)] = {v.name: f.formula for v, f in
                             zip(probe.values, site.fetches, strict=True)
                             if f.kind == "derived"}
    if share:
        marked, regs = shapes.apart("\n".join(body))
        same = out.shared.get(marked)
        if same is not None:  # another site's program, told this site by cookie
            same.cases.append((si, regs))
            out.functions.append((pi, si, same.name))
            return
        body = ["u16 site = noop_attach_cookie(ctx);  /* this site's index */", *body]
    out.functions.append((pi, si, name))
    lines = [f"/* probe {probe.name}: {site.function} at {site.address:#x}: "
             f"{site.why}{' (and every site of its shape)' if share else ''} */",
             f"int {name}(struct pt_regs *ctx)", "{",
             *("\t" + b if b else "" for b in body), "}", ""]
    if share:
        out.shared[marked] = _Shared(name, len(out.lines), len(lines), [(si, regs)])
    out.lines += lines


def _registers_apart(out: _Made) -> None:
    """The programs shared by sites that read their values from other registers, made
    to read each site's (``shapes``); the others as their first site wrote them. From
    the last, so that the lines of those before stay where they are."""
    for marked, shared in sorted(out.shared.items(), key=lambda kv: -kv[1].at):
        if len({regs for _si, regs in shared.cases}) < 2:
            continue
        switch, text = shapes.program(marked, shared.cases)
        head = out.lines[shared.at:shared.at + 4]  # comment, signature, "{", the cookie
        out.lines[shared.at:shared.at + shared.size] = [
            *head, *("\t" + b for b in switch),
            *("\t" + b if b else "" for b in text.split("\n")), "}", ""]


def _probe_maps(probe: ProbePlan, lay: events.Layout, agg: aggregate.Layout | None
                ) -> list[str]:
    """A probe's event struct, and its aggregate's structs and maps (``noop run``)."""
    lines = [*events.c_struct(lay), ""]
    if agg is None:
        return lines
    lines += aggregate.c_structs(agg)
    pi = lay.probe
    if agg.keyless:
        return [*lines, f"BPF_PERCPU_ARRAY(noop_agg_{pi}, struct {agg.row_struct}, 1);"
                "  /* no labels: one row */", ""]
    assert probe.aggregate is not None
    return [*lines, f"BPF_PERCPU_HASH(noop_agg_{pi}, struct {agg.key_struct}, "
            f"struct {agg.row_struct}, {probe.aggregate.max_series + 1});"
            "  /* + the overflow row */",
            f"BPF_PERCPU_ARRAY(noop_zero_{pi}, struct {agg.row_struct}, 1);"
            "  /* an empty row, never written */", ""]


def _body(ctx: Ctx, agg: aggregate.Layout | None, mode: Mode, events_too: bool
          ) -> tuple[list[str], dict[str, str]]:
    """A site's program body, by its role (an exit probe's call or return, a renew or
    drop site, an update) and where its hits go (events, or the aggregate)."""
    role = ctx.site.role
    if role == "call":
        return call_c(ctx)
    if role == "return":
        return return_c(ctx, agg, wakeup=mode == "trace")
    if role == "drop":
        return drop_c(ctx), {}
    if role == "renew":
        return renew_c(ctx), {}
    if agg is None:
        return event_c(ctx, wakeup=mode == "trace")
    return fold_c(ctx, agg, events_too=events_too)
