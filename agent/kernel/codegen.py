"""Plan -> BPF C: one program per probe site, built by small emitters over the plan's
fetch steps, with the hand-written helpers of ``bpf/noop.h`` included at the top.

Kernel facts enter only as arguments (whether an XMM helper exists), never by looking
at the running system here.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from importlib import resources
from itertools import accumulate
from pathlib import Path
from typing import Literal

from agent.binary.amd64 import PT_REGS
from agent.kernel import aggregate, events, ringbuf
from agent.kernel.events import Layout
from agent.kernel.reads import fetch_c, unreadable
from agent.plan.fetches import Fetch
from agent.plan.model import Plan, ProbePlan, Site, ValueSpec

Mode = Literal["trace", "run"]  # noop --binary/--config (events) or noop run (aggregates)

RINGBUF_PAGES = 256
RINGBUF_BYTES = RINGBUF_PAGES * 4096  # 1 MiB: BCC counts pages of the kernel's (x86) size
CALLS = 65536  # calls in progress kept per exit probe; the least recently used go first
GENERATIONS = 65536  # addresses whose generation is kept; the least recently used go
TRAP_ROWS = 4096  # (site, process) pairs whose hits are counted apart; the rest per site
# BCC compiles calls of kernel helpers only by number, and no call of a kfunc: the C
# calls the XMM reader through this stand-in number, which the loader rewrites into a
# call of the kernel's own function (Program.calls) before the kernel sees it.
XMM_CALL = 0x6E6F6F70


@dataclass(frozen=True, slots=True)
class Program:
    text: str
    layouts: tuple[Layout, ...]
    aggregates: dict[int, aggregate.Layout]  # probe -> its in-kernel aggregate (run mode)
    functions: tuple[tuple[int, int, str], ...]  # (probe, site, BPF function name)
    # (probe, site) -> value name -> why it is never read at that site
    unreadable: dict[tuple[int, int], dict[str, str]]
    # (probe, site) -> value name -> the formula noop derives it by (fetches.FORMULAS)
    derived: dict[tuple[int, int], dict[str, str]]
    # stand-in call number -> the kernel function it calls (helper or kfunc)
    calls: dict[int, str] = field(default_factory=dict)
    # Attach each site with its index as the attach cookie: functions are shared by
    # the sites of one shape (one name in ``functions`` for several sites).
    cookies: bool = False
    # Every site of the plan, in the order of noop_traps' site numbers: (probe, site).
    sites: tuple[tuple[int, int], ...] = ()

    def decode(self, data: bytes) -> events.Event:
        """A ring-buffer record of this program as an event; IndexError or ValueError
        (struct.error) when it is not one."""
        probe, site = events.header(data)
        return events.decode(self.layouts[probe], data, self.unreadable.get((probe, site)),
                             self.derived.get((probe, site)))


def helpers_text() -> str:
    """bpf/noop.h, from the installed package or the source tree."""
    try:
        return resources.files("agent.bpf").joinpath("noop.h").read_text()
    except (ModuleNotFoundError, FileNotFoundError):
        return (Path(__file__).resolve().parents[2] / "bpf" / "noop.h").read_text()


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
    whose programs differ only in their index share one program, which reads the
    index from the cookie its uprobe was attached with: a probe on many functions of
    one shape compiles and verifies once."""
    lines = _prelude(plan, xmm_helper, cookies)
    shared: dict[str, str] = {}  # a program's body -> the function that has it
    layouts, functions = [], []
    all_sites = tuple((pi, si) for pi, p in enumerate(plan.probes) for si in range(len(p.sites)))
    base = list(accumulate((len(p.sites) for p in plan.probes), initial=0))  # probe's first
    aggs: dict[int, aggregate.Layout] = {}
    unreadable: dict[tuple[int, int], dict[str, str]] = {}
    derived: dict[tuple[int, int], dict[str, str]] = {}
    for pi, probe in enumerate(plan.probes):
        lay = events.layout(pi, probe)
        layouts.append(lay)
        agg = aggregate.layout(pi, probe) \
            if mode == "run" and probe.aggregate is not None else None
        if agg is not None:
            aggs[pi] = agg
        lines += _probe_maps(probe, lay, agg)
        if mode == "run" and agg is None and not probe.events and not probe.renews:
            continue
        target = plan.target(probe.target)
        if probe.at == "exit":
            lines += _call_maps(pi, lay, probe)
        for si, site in enumerate(probe.sites):
            name = f"noop_p{pi}_s{si}"
            # (a renew site's program differs from its probe's others only by index too)
            share = cookies and site.role in ("", "renew") and len(probe.sites) > 1
            ctx = _Ctx(pi, si, probe, site, lay, target.goid_offset, xmm_helper,
                       target.stack_hi_offset, site_c="site" if share else str(si))
            body, why = _body(ctx, agg, mode, probe.events)
            gsi = f"{base[pi]} + site" if share else str(base[pi] + si)
            # A uprobe belongs to the file; perf's own pid filter would follow one
            # thread only, and a Go program's goroutines run on many.
            body = [f"if (noop_left_out({plan.targets.index(target)}))"
                    "  /* --pid: another process */", "\treturn 0;", *body]
            # Every trap costs its process, whoever it is for: counted first.
            body = [f"noop_trap({gsi});", *body]
            unreadable[(pi, si)] = why
            derived[(pi, si)] = {v.name: f.formula for v, f in
                                 zip(probe.values, site.fetches, strict=True)
                                 if f.kind == "derived"}
            if share:
                text = "\n".join(body)
                if text in shared:  # another site's program, told this site by cookie
                    functions.append((pi, si, shared[text]))
                    continue
                shared[text] = name
                body = ["u16 site = noop_attach_cookie(ctx);  /* this site's index */",
                        *body]
            functions.append((pi, si, name))
            lines += [f"/* probe {probe.name}: {site.function} at {site.address:#x}: "
                      f"{site.why}{' (and every site of its shape)' if share else ''} */",
                      f"int {name}(struct pt_regs *ctx)", "{",
                      *("\t" + b if b else "" for b in body), "}", ""]
    calls = {XMM_CALL: xmm_helper} if xmm_helper is not None else {}
    return Program("\n".join(lines) + "\n", tuple(layouts), aggs, tuple(functions),
                   unreadable, derived, calls, cookies, all_sites)


def _prelude(plan: Plan, xmm_helper: str | None, cookies: bool) -> list[str]:
    """The program's first lines: noop's helpers, the event header's checks, the maps
    every program shares (the ring, per-probe counts, hits, the process filter, the
    generations), and the helpers a kernel fact adds (attach cookies, XMM reads)."""
    n = max(1, len(plan.probes))
    lines = [helpers_text().rstrip(), "", "#include <linux/stddef.h>", "",
             *events.c_header_checks(), "",
             f"BPF_RINGBUF_OUTPUT(noop_events, {RINGBUF_PAGES});",
             f"BPF_PERCPU_ARRAY(noop_produced, u64, {n});  /* per probe: records made */",
             f"BPF_PERCPU_ARRAY(noop_lost, u64, {n});"
             "  /* per probe: records the ring buffer refused */",
             f"BPF_PERCPU_ARRAY(noop_faults, u64, {n});"
             "  /* per probe: user-memory read faults */",
             f"BPF_PERCPU_ARRAY(noop_unpaired, u64, {n});"
             "  /* per exit probe: returns without their call's entry */",
             f"BPF_PERCPU_ARRAY(noop_cancelled, u64, {n});"
             "  /* per exit probe on an async fn: futures dropped before they completed */",
             "", *traps_c(plan), *only_c(plan), *generations_c(plan)]
    if cookies:
        lines += ["/* bpf_get_attach_cookie (UAPI helper 174): the site index noop attached "
                  "the uprobe with */",
                  "static u64 (*noop_attach_cookie)(void *ctx) = (void *)174;", ""]
    if xmm_helper is not None:
        lines += [f"/* {xmm_helper}(dst, size, regno): the kernel's reader of the user's "
                  "XMM registers, called through a stand-in number noop links to it */",
                  "static long (*noop_xmm_read)(void *dst, u32 size, u32 regno) = "
                  f"(void *){XMM_CALL:#x};", ""]
    return lines


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


def _body(ctx: _Ctx, agg: aggregate.Layout | None, mode: Mode, events_too: bool
          ) -> tuple[list[str], dict[str, str]]:
    """A site's program body, by its role (an exit probe's call or return, a renew or
    drop site, an update) and where its hits go (events, or the aggregate)."""
    role = ctx.site.role
    if role == "call":
        return _call(ctx)
    if role == "return":
        return _return(ctx, agg, wakeup=mode == "trace")
    if role == "drop":
        return _drop(ctx), {}
    if role == "renew":
        return _renew(ctx), {}
    if agg is None:
        return _event(ctx, wakeup=mode == "trace")
    return _aggregate(ctx, agg, events_too=events_too)


def trap_rows(plan: Plan) -> int:
    """Rows of noop_traps: a row per (site, process) up to TRAP_ROWS, and one per site
    (process 0) for the hits of processes past that."""
    n = sum(len(p.sites) for p in plan.probes)
    return n + min(TRAP_ROWS, 16 * n)


def traps_c(plan: Plan) -> list[str]:
    """The hit counter every program starts with: what the probes cost their targets
    (``cost``). Per site and process, in a per-CPU hash (exact whatever the threads);
    a process the map has no room for is counted in its site's row of process 0,
    which noop creates at load."""
    return ["struct noop_trapkey {", "\tu32 site;", "\tu32 pid;", "};",
            f"BPF_PERCPU_HASH(noop_traps, struct noop_trapkey, u64, {trap_rows(plan)});"
            "  /* hits per site and process */",
            "static __always_inline void noop_trap(u32 site)", "{",
            "\tstruct noop_trapkey k = {.site = site, .pid = bpf_get_current_pid_tgid() >> 32};",
            "\tu64 *n = noop_traps.lookup(&k);", "\tif (!n) {", "\t\tu64 one = 1;",
            "\t\tif (!noop_traps.insert(&k, &one))", "\t\t\treturn;",
            "\t\tn = noop_traps.lookup(&k);  /* another CPU made it meanwhile */",
            "\t}", "\tif (!n) {  /* no room: the site's row of process 0 */", "\t\tk.pid = 0;",
            "\t\tn = noop_traps.lookup(&k);", "\t}", "\tif (n)", "\t\t(*n)++;", "}", ""]


def only_c(plan: Plan) -> list[str]:
    """The process each target is limited to (``--pid``, a target's ``pid:``), set when
    loading (``agent.kernel.load``): the program is the same whatever the process, so
    one compile serves every one."""
    return [f"BPF_ARRAY(noop_only, u32, {max(1, len(plan.targets))});"
            "  /* per target: the one process probed; 0: every one */",
            "static __always_inline int noop_left_out(u32 target)", "{",
            "\tu32 *only = noop_only.lookup(&target);",
            "\treturn only && *only && (bpf_get_current_pid_tgid() >> 32) != *only;", "}", ""]


def generations_c(plan: Plan) -> list[str]:
    """The table of each address's generation, by process: when a renew site last saw
    it given to or taken from an object; what ``generation`` fetches read (none when the
    plan has no renew site)."""
    if not any(p.renews for p in plan.probes):
        return []
    return ["struct noop_genkey {", "\tu64 pid;", "\tu64 object;", "};",
            f'BPF_TABLE("lru_hash", struct noop_genkey, u64, noop_generations, {GENERATIONS});'
            "  /* (process, address) -> when another object's time there began */", ""]


def _renew(ctx: _Ctx) -> list[str]:
    """The address the site's first fetch computes holds another object from now on."""
    out = ["u32 faults = 0, absent = 0;", "u64 o = 0;",
           *fetch_c(ctx.site.fetches[0], "o", 1, _builtins(ctx)),
           "if (faults | absent)", "\treturn 0;",
           "struct noop_genkey gk = {.pid = bpf_get_current_pid_tgid() >> 32, .object = o};",
           "u64 now = bpf_ktime_get_ns();", "noop_generations.update(&gk, &now);", "return 0;"]
    return out


@dataclass(frozen=True, slots=True)
class _Ctx:
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


# --- exit probes: the call's entry keeps a record, each return reads it ----------------

def _call_maps(pi: int, lay: Layout, probe: ProbePlan) -> list[str]:
    return [f"struct noop_call_{pi} {{", "\tu64 ts;  /* bpf_ktime_get_ns() at the entry */",
            f"\tu64 root[{max(1, probe.roots)}];  /* pointers kept for the return */",
            f"\tstruct {lay.struct_name} e;  /* the values read at the entry */", "};",
            f'BPF_TABLE("lru_hash", struct noop_callkey, struct noop_call_{pi}, '
            f"noop_calls_{pi}, {probe.calls or CALLS});  /* calls in progress */",
            f"BPF_PERCPU_ARRAY(noop_callzero_{pi}, struct noop_call_{pi}, 1);"
            "  /* an empty record, never written */", ""]


def _key(ctx: _Ctx) -> list[str]:
    """The call's key, the same at its entry and at its return: for Go the goroutine
    (g in r14) and the frame's depth below the top of its stack (Go moves stacks, so
    the stack pointer itself changes; the depth does not); else the thread and rsp."""
    sp = f"ctx->{PT_REGS['rsp']}"
    if ctx.site.key is not None:  # a future's: the address of its state, in this process
        return ["struct noop_callkey key = {};", "key.a = bpf_get_current_pid_tgid() >> 32;",
                "{", "\tu32 faults = 0, absent = 0;", "\tu64 at = 0;",
                *("\t" + line for line in fetch_c(ctx.site.key, "at", 1, {})),
                "\tif (faults | absent)", f"\t\t{ctx.leave}", "\tkey.b = at;", "}"]
    if ctx.stack_hi_off is not None:
        g = f"ctx->{PT_REGS['r14']}"
        return ["struct noop_callkey key = {};", "u64 hi = 0;",
                f"bpf_probe_read_user(&hi, 8, (const void *)({g} + {ctx.stack_hi_off}));"
                "  /* g.stack.hi */", f"key.a = {g};", f"key.b = hi - {sp};"]
    return ["struct noop_callkey key = {};", "key.a = bpf_get_current_pid_tgid();",
            f"key.b = {sp};"]


def _call(ctx: _Ctx) -> tuple[list[str], dict[str, str]]:
    """The entry of an exit probe's call: keep what the returns need."""
    pi = ctx.pi
    body = [*_zf(ctx), *_key(ctx), f"struct noop_call_{pi} *c = noop_calls_{pi}.lookup(&key);",
            "if (!c) {", "\tint zero = 0;",
            f"\tstruct noop_call_{pi} *empty = noop_callzero_{pi}.lookup(&zero);",
            "\tif (!empty)", "\t\treturn 0;", f"\tnoop_calls_{pi}.update(&key, empty);",
            f"\tc = noop_calls_{pi}.lookup(&key);", "\tif (!c)", "\t\treturn 0;", "}",
            "u32 faults = 0, absent = 0;", "c->ts = bpf_ktime_get_ns();"]
    fill, why = _fill(ctx, "c->e", _builtins(ctx))
    return [*body, *fill, "c->e.hdr.faults = faults;", "c->e.hdr.absent = absent;",
            "return 0;"], why


def _return(ctx: _Ctx, agg: aggregate.Layout | None, wakeup: bool
            ) -> tuple[list[str], dict[str, str]]:
    """A return of an exit probe's call: the hit, with its call's record in ``c``."""
    pi = ctx.pi
    inner = replace(ctx, leave="goto done;",
                    flags="u32 faults = c->e.hdr.faults, absent = c->e.hdr.absent;")
    if agg is None:
        body, why = _event(inner, wakeup=wakeup)
    else:
        body, why = _aggregate(inner, agg, events_too=ctx.probe.events)
    # A future's end is found by its state's store, which may be another future's:
    # no record is then no call of this one, not an unpaired return.
    unpaired = [] if ctx.site.key is not None else _bump("noop_unpaired", pi)
    return [*_key(replace(ctx, leave="return 0;")),
            f"struct noop_call_{pi} *c = noop_calls_{pi}.lookup(&key);",
            "if (!c) {  /* its entry was not seen (noop attached during the call) */",
            *("\t" + b for b in unpaired), "\treturn 0;", "}", "{",
            *("\t" + b if b else "" for b in body),
            "}", "done:", f"noop_calls_{pi}.delete(&key);", "return 0;"], why


def _drop(ctx: _Ctx) -> list[str]:
    """A future dropped: if its call is in progress (no end seen), it was cancelled."""
    pi = ctx.pi
    return [*_key(ctx), f"if (!noop_calls_{pi}.lookup(&key))  /* completed, or never polled */",
            "\treturn 0;", *_bump("noop_cancelled", pi), f"noop_calls_{pi}.delete(&key);",
            "return 0;"]


def _zf(ctx: _Ctx) -> list[str]:
    out = []
    if ctx.site.skip_flags:
        out += [f"if (ctx->flags & {ctx.site.skip_flags:#x})  /* the jump here is taken: not "
                "a hit (the site's why above says which) */", "\treturn 0;"]
    if ctx.site.when_zf:
        out += ["if (!(ctx->flags & NOOP_EFLAGS_ZF))  /* the compare-and-swap lost */",
                "\treturn 0;"]
    if ctx.site.keep_flags:
        out += [f"if (!(ctx->flags & {ctx.site.keep_flags:#x}))  /* the jump here goes the "
                "other way: not a hit (the site's why above says which) */", "\treturn 0;"]
    if ctx.site.gate is not None:
        g = ctx.site.gate
        mask = (1 << 8 * g.size) - 1 if g.size < 8 else (1 << 64) - 1
        test = " || ".join(f"(gate & {mask:#x}ULL) == {v & mask:#x}ULL"
                           for v in ctx.site.gate_values) or "0"
        out += ["{  /* the gate: " + g.describe().replace("*/", "* /") + " */",
                "\tu32 faults = 0, absent = 0;", "\tu64 gate = 0;",
                *("\t" + line for line in fetch_c(g, "gate", 1, _builtins(ctx))),
                f"\tif (faults || absent || !({test}))", "\t\treturn 0;", "}"]
    return out


def _bump(counters: str, pi: int) -> list[str]:
    """Add one to probe ``pi``'s slot of a per-CPU array of counters."""
    return [f"int probe = {pi};", f"u64 *n = {counters}.lookup(&probe);", "if (n)",
            "\t(*n)++;"]


def _count_faults(pi: int, faults: str = "faults") -> list[str]:
    """Count the hit in noop_faults when a read faulted. ``faults`` is best read back
    from memory: the verifier knows the local's value on each path, and a branch on
    it would make it keep a state for every combination of faulted reads."""
    return [f"if ({faults}) {{", *("\t" + b for b in _bump("noop_faults", pi)), "}"]


def wake_every(size: int) -> int:
    """Records of one CPU between wakeups of noop when it drains on a timer: a power of
    two at most a sixteenth of the ring, so a burst is read long before the ring fills
    (a wakeup costs microseconds; one per record would dominate)."""
    fits = RINGBUF_BYTES // ringbuf.stride(size)
    return 1 << max(0, (fits // 16).bit_length() - 1)


def _event(ctx: _Ctx, wakeup: bool, tail: bool = True) -> tuple[list[str], dict[str, str]]:
    """Reserve a ring-buffer record, fill it with every value, submit it. Without
    ``tail`` it is a block inside a larger program (wrap it in ``do { } while (0)``):
    no zero-flag check, no fault count, and a full ring breaks out instead of
    returning."""
    lay = ctx.lay
    body = [*(_zf(ctx) if tail else []),
            f"int probe_{ctx.pi} = {ctx.pi};",
            f"u64 *made = noop_produced.lookup(&probe_{ctx.pi});",
            "if (made)", "\t(*made)++;",
            f"struct {lay.struct_name} *e = noop_events.ringbuf_reserve(sizeof(*e));",
            "if (!e) {", f"\tu64 *lost = noop_lost.lookup(&probe_{ctx.pi});",
            "\tif (lost)", "\t\t(*lost)++;", f"\t{ctx.leave}" if tail else "\tbreak;", "}",
            f"noop_header(&e->hdr, {ctx.pi}, {ctx.site_c or ctx.si});", ctx.flags]
    if ctx.probe.wants_goid and ctx.goid_off is not None:
        body.append(f"noop_read(&e->hdr.goid, 8, ctx->{PT_REGS['r14']} + {ctx.goid_off});"
                    "  /* g (r14) -> goid */")
    fill, why = _fill(ctx, "e", {**_builtins(ctx), **_EVENT_BUILTINS})
    body += fill
    every = wake_every(lay.size)
    flags = "0" if wakeup else (
        f"(made && !(*made & {every - 1})) ? BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP"
        f"  /* noop drains the ring on a timer, and on every {every}th record of a CPU */")
    body += ["e->hdr.faults = faults;", "e->hdr.absent = absent;",
             *(_count_faults(ctx.pi, "*(volatile u32 *)&e->hdr.faults") if tail else []),
             f"noop_events.ringbuf_submit(e, {flags});", *([ctx.leave] if tail else [])]
    return body, why


def _fill(ctx: _Ctx, record: str, builtins: dict[str, str]
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
                     *fetch_c(fetch, f"c->root[{fetch.slot}]", 1 << slot.index, {})]
            continue
        # A string's unused bytes too: the ring holds an older record's there, and noop
        # groups records by their raw label bytes.
        body.append(f"__builtin_memset(&{whole}, 0, sizeof({whole}));"
                    if slot.cap or slot.words > 1 else f"{f} = 0;")
        if fetch.kind == "later":  # read at the return
            continue
        if fetch.kind == "derived":  # the words noop computes the value from
            body += [f"{whole}[{n}] = ctx->{PT_REGS[r]};" if slot.words > 1 else
                     f"{whole} = ctx->{PT_REGS[r]};" for n, r in enumerate(fetch.regs)]
            continue
        reason = unreadable(fetch, ctx.xmm_helper)
        if reason:
            why[slot.value.name] = reason
            continue
        body += fetch_c(fetch, f, 1 << slot.index, builtins)
    return body, why


def _aggregate(ctx: _Ctx, agg: aggregate.Layout, events_too: bool
               ) -> tuple[list[str], dict[str, str]]:
    """Fold the hit into the probe's per-CPU hash row for its key."""
    pi, probe = ctx.pi, ctx.probe
    fetch_of = {v.name: (i, v, f) for i, (v, f) in
                enumerate(zip(probe.values, ctx.site.fetches, strict=True))}
    body = [*_zf(ctx), ctx.flags, f"struct {agg.key_struct} k;",
            "__builtin_memset(&k, 0, sizeof(k));"]
    why: dict[str, str] = {}
    keymask = 0
    for p in agg.parts:
        if p.name == "$pid":
            body.append(f"k.{p.field} = bpf_get_current_pid_tgid() >> 32;")
        elif p.name == "$site":
            body.append(f"k.{p.field} = {ctx.site_c or ctx.si};")
        else:
            i, v, fetch = fetch_of[p.name]
            body.append(f"/* key {v.name} = {v.selector}: {fetch.describe()} */")
            keymask |= 1 << i
            body += _read(ctx, fetch, v.name, f"k.{p.field}", i, why)
    # A value only first or base columns use is read on a CPU's first hit of the row.
    used = sorted({c.column.value for c in agg.fields if c.column.op not in LAZY} - {""})
    for name in used:
        i, v, fetch = fetch_of[name]
        body += [f"u64 v{i} = 0;  /* {v.name} = {v.selector}: {fetch.describe()} */"]
        body += _read(ctx, fetch, v.name, f"v{i}", i, why)
    if agg.keyless:
        body += ["int slot = 0;", f"struct {agg.row_struct} *row = noop_agg_{pi}.lookup(&slot);",
                 "if (!row)", f"\t{ctx.leave}"]
        return [*body, *_count(ctx, agg, fetch_of, events_too, why)], why
    body += [f"k.faults = faults & {keymask:#x};", f"k.absent = absent & {keymask:#x};",
             f"struct {agg.row_struct} *row = noop_agg_{pi}.lookup(&k);", "if (!row) {",
             "\tint zero = 0;", f"\tstruct {agg.row_struct} *empty = noop_zero_{pi}.lookup(&zero);",
             "\tif (!empty)", f"\t\t{ctx.leave}"]
    if probe.aggregate is not None and probe.aggregate.describe:
        describe, _ = _event(ctx, wakeup=True, tail=False)
        body += [f"\tif (noop_agg_{pi}.insert(&k, empty) == 0) {{"
                 "  /* first hit of this key: say what it is */",
                 "\t\tdo {", *("\t\t\t" + b for b in describe), "\t\t} while (0);", "\t}"]
    else:
        body.append(f"\tnoop_agg_{pi}.insert(&k, empty);")
    body += [f"\trow = noop_agg_{pi}.lookup(&k);", "\tif (!row) {  /* full: the overflow row */",
             f"\t\t__builtin_memset(&k, {aggregate.OVERFLOW:#x}, sizeof(k));",
             f"\t\trow = noop_agg_{pi}.lookup(&k);", "\t\tif (!row)", f"\t\t\t{ctx.leave}",
             "\t}", "}"]
    return [*body, *_count(ctx, agg, fetch_of, events_too, why)], why


LAZY = ("first", "base")  # column ops that read their value only on a row's first hit


def _count(ctx: _Ctx, agg: aggregate.Layout, fetch_of: dict[str, tuple[int, ValueSpec, Fetch]],
           events_too: bool, why: dict[str, str]) -> list[str]:
    """With ``row`` found: count the hit, fold its values into the columns."""
    body = ["if (!row->born)", "\trow->born = bpf_ktime_get_ns();", "row->hits++;"]
    for f in agg.fields:
        if f.column.op in LAZY:
            body += _lazy(ctx, f, fetch_of, why)
        else:
            body += _column(f, fetch_of)
    body += _count_faults(ctx.pi)
    if events_too:
        ev, _ = _event(ctx, wakeup=False, tail=False)
        body += ["do {  /* and the whole event, for what is aggregated in noop */",
                 *("\t" + b for b in ev), "} while (0);"]
    return [*body, ctx.leave]


def _read(ctx: _Ctx, fetch: Fetch, name: str, dst: str, index: int, why: dict[str, str]
          ) -> list[str]:
    """Fetch value ``index`` into ``dst``; one never readable at this site is marked
    absent instead, with the reason kept in ``why``."""
    reason = unreadable(fetch, ctx.xmm_helper)
    if reason:
        why[name] = reason
        return [f"absent |= {1 << index:#x};  /* {reason} */"]
    return fetch_c(fetch, dst, 1 << index, _builtins(ctx))


def _lazy(ctx: _Ctx, f: aggregate.RowField,
          fetch_of: dict[str, tuple[int, ValueSpec, Fetch]], why: dict[str, str]
          ) -> list[str]:
    """A ``first`` or ``base`` column: read its value only while the row has none on
    this CPU (``[1]``: when it was read, or 1)."""
    c = f.column
    i, v, fetch = fetch_of[c.value]
    dst = f"row->{f.field}"
    m = f"((x{f' & {c.mask:#x}ULL' if c.mask else ''}) + {c.add})" if c.op == "base" else "x"
    seen = "bpf_ktime_get_ns()" if c.op == "first" else "1"
    return [f"if (!{dst}[1]) {{  /* {c.op} {v.name}: {fetch.describe()} */", "\tu64 x = 0;",
            *("\t" + b for b in _read(ctx, fetch, v.name, "x", i, why)),
            f"\tif (!((faults | absent) & {1 << i:#x})) {{", f"\t\t{dst}[0] = {m};",
            f"\t\t{dst}[1] = {seen};", "\t}", "}"]


def _column(f: aggregate.RowField, fetch_of: dict[str, tuple[int, ValueSpec, Fetch]]
            ) -> list[str]:
    c = f.column
    i, v, _ = fetch_of[c.value]
    ok = f"!((faults | absent) & {1 << i:#x})"
    x, dst = f"v{i}", f"row->{f.field}"
    if c.op == "sum":
        return [f"if ({ok})", f"\t{dst} += {x};"]
    if c.op == "max":
        m = f"(({x}{f' & {c.mask:#x}ULL' if c.mask else ''}) + {c.add})"
        return [f"if ({ok} && {m} > {dst})", f"\t{dst} = {m};"]
    if c.op == "last":
        return [f"if ({ok}) {{", f"\t{dst}[0] = {x};", f"\t{dst}[1] = bpf_ktime_get_ns();",
                "}"]
    n = len(c.bounds)
    out = [f"if ({ok}) {{", f"\tu64 s = {aggregate.c_sortable(v, x)};", f"\tu32 b = {n};"]
    for j in reversed(range(n)):
        out.append(f"\tif (s <= {c.bounds[j]:#x}ULL)  /* bucket {j} */")
        out.append(f"\t\tb = {j};")
    out += [f"\tif (b <= {n})  /* the verifier wants the index bounded */",
            f"\t\t{dst}[b]++;", f"\t{dst}[{n + 1}] += {x};  /* sum */", "}"]
    return out


_EVENT_BUILTINS = {"pid": "e->hdr.pid", "tid": "e->hdr.tid", "goid": "e->hdr.goid",
                   "timestamp": "e->hdr.ts"}


def _builtins(ctx: _Ctx) -> dict[str, str]:
    """Built-ins outside an event record."""
    goid = "0"
    if ctx.goid_off is not None:
        goid = f"noop_goid(ctx->{PT_REGS['r14']} + {ctx.goid_off})"
    return {"pid": "(bpf_get_current_pid_tgid() >> 32)",
            "tid": "(u32)bpf_get_current_pid_tgid()", "goid": goid,
            "timestamp": "bpf_ktime_get_ns()",
            "duration": "(bpf_ktime_get_ns() - c->ts)"}  # only in a return's program
