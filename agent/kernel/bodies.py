"""The body of a site's BPF program, by the emitters every kind of site shares: the
site's context (``Ctx``), the checks of its flags and gate, an event filled and sent
through the ring buffer, a renew site's new generation, and the per-probe counters
they bump. Aggregates' bodies are ``folds``'s, exit probes' ``exits``'s."""

from __future__ import annotations

from dataclasses import dataclass

from agent.binary.arch import AMD64, Arch
from agent.kernel import ringbuf
from agent.kernel.events import Layout
from agent.kernel.prelude import RINGBUF_BYTES
from agent.kernel.reads import fetch_c, unreadable
from agent.plan.model import ProbePlan, Site


@dataclass(frozen=True, slots=True)
class Ctx:
    pi: int
    si: int
    probe: ProbePlan
    site: Site
    lay: Layout
    goid_off: int | None
    xmm_helper: str | None
    stack_hi_off: int | None = None
    # Inside a return site's program: leave through its label (which forgets the call),
    # and start from the faults of what the call's entry read.
    leave: str = "return 0;"
    flags: str = "u32 faults = 0, absent = 0;"
    site_c: str = ""  # C for the site's index: its number, or the cookie's variable
    arch: Arch = AMD64  # whose pt_regs the program reads (the target's, the kernel's)


def builtins_c(ctx: Ctx) -> dict[str, str]:
    """Built-ins outside an event record."""
    goid = "0"
    if ctx.goid_off is not None:
        goid = f"noop_goid({ctx.arch.c_g} + {ctx.goid_off})"
    return {"pid": "(bpf_get_current_pid_tgid() >> 32)",
            "tid": "(u32)bpf_get_current_pid_tgid()", "goid": goid,
            "timestamp": "bpf_ktime_get_ns()",
            "duration": "(bpf_ktime_get_ns() - c->ts)"}  # only in a return's program


_EVENT_BUILTINS = {"pid": "e->hdr.pid", "tid": "e->hdr.tid", "goid": "e->hdr.goid",
                   "timestamp": "e->hdr.ts"}


def zf_c(ctx: Ctx) -> list[str]:
    out = []
    if ctx.site.skip_flags:
        out += [f"if ({ctx.arch.taken_c(ctx.site.skip_flags)})  /* the jump here is taken: not "
                "a hit (the site's why above says which) */", "\treturn 0;"]
    if ctx.site.when_zf:
        out += [f"if (!({ctx.arch.c_flags} & NOOP_EFLAGS_ZF))  /* the compare-and-swap lost */",
                "\treturn 0;"]
    if ctx.site.keep_flags:
        out += [f"if (!({ctx.arch.c_flags} & {ctx.site.keep_flags:#x}))  /* the jump here goes the "
                "other way: not a hit (the site's why above says which) */", "\treturn 0;"]
    if ctx.site.gate is not None:
        g = ctx.site.gate
        mask = (1 << 8 * g.size) - 1 if g.size < 8 else (1 << 64) - 1
        test = " || ".join(f"(gate & {mask:#x}ULL) == {v & mask:#x}ULL"
                           for v in ctx.site.gate_values) or "0"
        out += ["{  /* the gate: " + g.describe().replace("*/", "* /") + " */",
                "\tu32 faults = 0, absent = 0;", "\tu64 gate = 0;",
                *("\t" + line for line in fetch_c(g, "gate", 1, builtins_c(ctx), ctx.arch)),
                f"\tif (faults || absent || !({test}))", "\t\treturn 0;", "}"]
    return out


def bump_c(counters: str, pi: int) -> list[str]:
    """Add one to probe ``pi``'s slot of a per-CPU array of counters."""
    return [f"int probe = {pi};", f"u64 *n = {counters}.lookup(&probe);", "if (n)",
            "\t(*n)++;"]


def count_faults_c(pi: int, faults: str = "faults") -> list[str]:
    """Count the hit in noop_faults when a read faulted. ``faults`` is best read back
    from memory: the verifier knows the local's value on each path, and a branch on
    it would make it keep a state for every combination of faulted reads."""
    return [f"if ({faults}) {{", *("\t" + b for b in bump_c("noop_faults", pi)), "}"]


def wake_every(size: int) -> int:
    """Records of one CPU between wakeups of noop when it drains on a timer: a power of
    two at most a sixteenth of the ring, so a burst is read long before the ring fills
    (a wakeup costs microseconds; one per record would dominate)."""
    fits = RINGBUF_BYTES // ringbuf.stride(size)
    return 1 << max(0, (fits // 16).bit_length() - 1)


def event_c(ctx: Ctx, wakeup: bool, tail: bool = True) -> tuple[list[str], dict[str, str]]:
    """Reserve a ring-buffer record, fill it with every value, submit it. Without
    ``tail`` it is a block inside a larger program (wrap it in ``do { } while (0)``):
    no zero-flag check, no fault count, and a full ring breaks out instead of
    returning."""
    lay = ctx.lay
    body = [*(zf_c(ctx) if tail else []),
            f"int probe_{ctx.pi} = {ctx.pi};",
            f"u64 *made = noop_produced.lookup(&probe_{ctx.pi});",
            "if (made)", "\t(*made)++;",
            f"struct {lay.struct_name} *e = noop_events.ringbuf_reserve(sizeof(*e));",
            "if (!e) {", f"\tu64 *lost = noop_lost.lookup(&probe_{ctx.pi});",
            "\tif (lost)", "\t\t(*lost)++;", f"\t{ctx.leave}" if tail else "\tbreak;", "}",
            f"noop_header(&e->hdr, {ctx.pi}, {ctx.site_c or ctx.si});", ctx.flags]
    if ctx.probe.wants_goid and ctx.goid_off is not None:
        body.append(f"noop_read(&e->hdr.goid, 8, {ctx.arch.c_g} + {ctx.goid_off});"
                    f"  /* g ({ctx.arch.go_g_reg}) -> goid */")
    fill, why = fill_c(ctx, "e", {**builtins_c(ctx), **_EVENT_BUILTINS})
    body += fill
    every = wake_every(lay.size)
    flags = "0" if wakeup else (
        f"(made && !(*made & {every - 1})) ? BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP"
        f"  /* noop drains the ring on a timer, and on every {every}th record of a CPU */")
    body += ["e->hdr.faults = faults;", "e->hdr.absent = absent;",
             *(count_faults_c(ctx.pi, "*(volatile u32 *)&e->hdr.faults") if tail else []),
             f"noop_events.ringbuf_submit(e, {flags});", *([ctx.leave] if tail else [])]
    return body, why


def fill_c(ctx: Ctx, record: str, builtins: dict[str, str]
           ) -> tuple[list[str], dict[str, str]]:
    """Fill every value slot of the event ``record`` (``e``, or ``c->e`` at an exit
    probe's call); the values never readable here are left zero, with the reason."""
    body: list[str] = []
    why: dict[str, str] = {}
    for slot, fetch in zip(ctx.lay.slots, ctx.site.fetches, strict=True):
        whole = f"{record}->{slot.c_field}" if record == "e" else f"{record}.{slot.c_field}"
        f = f"{whole}[0]" if slot.words > 1 else whole
        body.append(f"/* {slot.value.name} = {slot.value.selector}: {fetch.describe()} */")
        if fetch.kind == "root":  # a pointer the call's returns read through
            body += [f"c->root[{fetch.slot}] = 0;",
                     *fetch_c(fetch, f"c->root[{fetch.slot}]", 1 << slot.index, {},
                              ctx.arch)]
            continue
        # A string's unused bytes too: the ring holds an older record's there, and noop
        # groups records by their raw label bytes.
        body.append(f"__builtin_memset(&{whole}, 0, sizeof({whole}));"
                    if slot.cap or slot.words > 1 else f"{f} = 0;")
        if fetch.kind == "later":  # read at the return
            continue
        if fetch.kind == "derived":  # the words noop computes the value from
            body += [f"{whole}[{n}] = {ctx.arch.c_reg(r)};" if slot.words > 1 else
                     f"{whole} = {ctx.arch.c_reg(r)};" for n, r in enumerate(fetch.regs)]
            continue
        reason = unreadable(fetch, ctx.xmm_helper)
        if reason:
            why[slot.value.name] = reason
            continue
        body += fetch_c(fetch, f, 1 << slot.index, builtins, ctx.arch)
    return body, why


def renew_c(ctx: Ctx) -> list[str]:
    """The address the site's first fetch computes holds another object from now on."""
    out = ["u32 faults = 0, absent = 0;", "u64 o = 0;",
           *fetch_c(ctx.site.fetches[0], "o", 1, builtins_c(ctx), ctx.arch),
           "if (faults | absent)", "\treturn 0;",
           "struct noop_genkey gk = {.pid = bpf_get_current_pid_tgid() >> 32, .object = o};",
           "u64 now = bpf_ktime_get_ns();", "noop_generations.update(&gk, &now);", "return 0;"]
    return out
