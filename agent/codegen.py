"""Plan -> BPF C: one program per probe site, built by small emitters over the plan's
fetch steps, with the hand-written helpers of ``bpf/noop.h`` included at the top.

Kernel facts enter only as arguments (whether an XMM helper exists), never by looking
at the running system here.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from agent import events
from agent.arch.amd64 import PT_REGS, is_vector
from agent.events import Layout
from agent.plan import Fetch, Op, Plan, ProbePlan, Site

RINGBUF_PAGES = 256  # 1 MiB of ring buffer


@dataclass(frozen=True, slots=True)
class Program:
    text: str
    layouts: tuple[Layout, ...]
    functions: tuple[tuple[int, int, str], ...]  # (probe, site, BPF function name)
    # (probe, site) -> value name -> why it is never read at that site
    unreadable: dict[tuple[int, int], dict[str, str]]


def helpers_text() -> str:
    """bpf/noop.h, from the installed package or the source tree."""
    try:
        return resources.files("agent.bpf").joinpath("noop.h").read_text()
    except (ModuleNotFoundError, FileNotFoundError):
        return (Path(__file__).resolve().parents[1] / "bpf" / "noop.h").read_text()


def generate(plan: Plan, xmm_helper: str | None = None) -> Program:
    """The C program for ``plan``. ``xmm_helper`` names a kernel helper that reads XMM
    registers from a uprobe; with None (every upstream kernel today) float values
    passed in XMM registers are reported unreadable instead of guessed."""
    lines = [helpers_text().rstrip(), "", "#include <linux/stddef.h>", "",
             *events.c_header_checks(), "",
             f"BPF_RINGBUF_OUTPUT(noop_events, {RINGBUF_PAGES});",
             "BPF_PERCPU_ARRAY(noop_lost, u64, 1);      /* records the ring buffer refused */",
             f"BPF_PERCPU_ARRAY(noop_faults, u64, {max(1, len(plan.probes))});"
             "  /* per probe: user-memory read faults */", ""]
    layouts, functions = [], []
    unreadable: dict[tuple[int, int], dict[str, str]] = {}
    for pi, probe in enumerate(plan.probes):
        lay = events.layout(pi, probe)
        layouts.append(lay)
        lines += [*events.c_struct(lay), ""]
        target = plan.target(probe.target)
        for si, site in enumerate(probe.sites):
            name = f"noop_p{pi}_s{si}"
            functions.append((pi, si, name))
            body, why = _site(pi, si, probe, site, lay, target.goid_offset, xmm_helper)
            if target.pid is not None:
                # A uprobe belongs to the file; perf's own pid filter would follow one
                # thread only, and a Go program's goroutines run on many.
                body = ["if ((bpf_get_current_pid_tgid() >> 32) != "
                        f"{target.pid})  /* only process {target.pid} */", "\treturn 0;",
                        *body]
            unreadable[(pi, si)] = why
            lines += [f"/* probe {probe.name}: {site.function} at {site.address:#x}: "
                      f"{site.why} */", f"int {name}(struct pt_regs *ctx)", "{",
                      *("\t" + b if b else "" for b in body), "}", ""]
    return Program("\n".join(lines) + "\n", tuple(layouts), tuple(functions), unreadable)


def _site(pi: int, si: int, probe: ProbePlan, site: Site, lay: Layout,
          goid_off: int | None, xmm_helper: str | None) -> tuple[list[str], dict[str, str]]:
    body: list[str] = []
    if site.when_zf:
        body += ["if (!(ctx->flags & NOOP_EFLAGS_ZF))  /* the compare-and-swap lost */",
                 "\treturn 0;"]
    body += [f"struct {lay.struct_name} *e = noop_events.ringbuf_reserve(sizeof(*e));",
             "if (!e) {", "\tint zero = 0;", "\tu64 *lost = noop_lost.lookup(&zero);",
             "\tif (lost)", "\t\t(*lost)++;", "\treturn 0;", "}",
             f"noop_header(&e->hdr, {pi}, {si});", "u32 faults = 0, absent = 0;"]
    if probe.wants_goid and goid_off is not None:
        body.append(f"noop_read(&e->hdr.goid, 8, ctx->{PT_REGS['r14']} + {goid_off});"
                    "  /* g (r14) -> goid */")
    why: dict[str, str] = {}
    for slot, fetch in zip(lay.slots, site.fetches, strict=True):
        f = f"e->{slot.c_field}"
        body.append(f"/* {slot.value.name} = {slot.value.selector}: {fetch.describe()} */")
        body.append(f"{f}.len = 0;" if slot.cap else f"{f} = 0;")
        reason = _unreadable(fetch, xmm_helper)
        if reason:
            why[slot.value.name] = reason
            continue
        body += _fetch(fetch, f, 1 << slot.index)
    body += ["e->hdr.faults = faults;", "e->hdr.absent = absent;", "if (faults) {",
             f"\tint probe = {pi};", "\tu64 *n = noop_faults.lookup(&probe);", "\tif (n)",
             "\t\t(*n)++;", "}", "noop_events.ringbuf_submit(e, 0);", "return 0;"]
    return body, why


def _unreadable(fetch: Fetch, xmm_helper: str | None) -> str:
    if fetch.kind == "unavailable":
        return fetch.why
    regs = [r for r in fetch.regs if is_vector(r)]
    if regs and xmm_helper is None:
        return (f"in {regs[0]}: this kernel has no BPF helper to read XMM registers "
                "in a uprobe (see noop doctor)")
    if regs:
        return f"in {regs[0]}: reading it through {xmm_helper} is not supported yet"
    return ""


def _builtin(name: str) -> str:
    return {"pid": "e->hdr.pid", "tid": "e->hdr.tid", "goid": "e->hdr.goid",
            "timestamp": "e->hdr.ts"}[name]


def _fetch(fetch: Fetch, dst: str, bit: int) -> list[str]:
    fault, gone = f"{{ faults |= {bit:#x}; break; }}", f"{{ absent |= {bit:#x}; break; }}"
    if fetch.kind == "builtin":
        return [f"{dst} = {_builtin(fetch.builtin)};"]
    if fetch.kind == "reg":
        reg = f"ctx->{PT_REGS[fetch.regs[0]]}"
        return [f"{dst} = {reg}{f' + ({fetch.offset})' if fetch.offset else ''};"]
    if fetch.kind == "reg_slice":
        ptr, n = (f"ctx->{PT_REGS[r]}" for r in fetch.regs)
        return [f"if (noop_copy(&{dst}, {ptr}, {n}))", f"\tfaults |= {bit:#x};"]
    out = ["do {", "\tu64 a = 0;"]
    out += ["\t" + line for op in fetch.ops for line in _op(op, fault, gone)]
    at = f"a + ({fetch.offset})" if fetch.offset else "a"
    if fetch.kind == "mem":
        out.append(f"\tif (noop_read(&{dst}, {fetch.size}, {at})) {fault}")
    elif fetch.kind == "mem_slice":
        out += ["\tu64 h[2];", f"\tif (noop_read(h, 16, {at})) {fault}",
                f"\tif (noop_copy(&{dst}, h[0], h[1])) {fault}"]
    elif fetch.kind == "mem_array":
        out.append(f"\tif (noop_copy(&{dst}, {at}, sizeof({dst}.s))) {fault}")
    else:
        raise ValueError(f"unknown fetch kind {fetch.kind}")
    return [*out, "} while (0);"]


def _op(op: Op, fault: str, gone: str) -> list[str]:
    if op.op == "reg":
        return [f"a = ctx->{PT_REGS[op.reg]};"]
    if op.op == "sp":
        return [f"a = ctx->{PT_REGS['rsp']} + ({op.offset});"]
    if op.op == "deref":
        return [f"if (noop_read(&a, 8, a + ({op.offset}))) {fault}"]
    if op.op == "bound":
        return [f"if (ctx->{PT_REGS[op.reg]} <= {op.index}) {gone}"]
    if op.op == "index":
        return ["{", "\tu64 s[2];  /* slice header: ptr, len */",
                f"\tif (noop_read(s, 16, a + ({op.offset}))) {fault}",
                f"\tif (s[1] <= {op.index}) {gone}",
                f"\ta = s[0] + {op.index * op.size};", "}"]
    raise ValueError(f"unknown op {op.op}")
