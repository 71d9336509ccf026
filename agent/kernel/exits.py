"""The bodies of an exit probe's programs: the call's entry keeps a record (what it
read, when, the pointers its returns read through) under the call's key, each return
finds it and makes the hit; a future dropped before it completed counts as cancelled.
And the record's map, per probe."""

from __future__ import annotations

from dataclasses import replace

from agent.kernel import aggregate
from agent.kernel.bodies import Ctx, builtins_c, bump_c, event_c, fill_c, zf_c
from agent.kernel.events import Layout
from agent.kernel.folds import fold_c
from agent.kernel.reads import fetch_c
from agent.plan.model import ProbePlan

CALLS = 65536  # calls in progress kept per exit probe; the least recently used go first


def call_maps(pi: int, lay: Layout, probe: ProbePlan) -> list[str]:
    return [f"struct noop_call_{pi} {{", "\tu64 ts;  /* bpf_ktime_get_ns() at the entry */",
            f"\tu64 root[{max(1, probe.roots)}];  /* pointers kept for the return */",
            f"\tstruct {lay.struct_name} e;  /* the values read at the entry */", "};",
            f'BPF_TABLE("lru_hash", struct noop_callkey, struct noop_call_{pi}, '
            f"noop_calls_{pi}, {probe.calls or CALLS});  /* calls in progress */",
            f"BPF_PERCPU_ARRAY(noop_callzero_{pi}, struct noop_call_{pi}, 1);"
            "  /* an empty record, never written */", ""]


def _key(ctx: Ctx) -> list[str]:
    """The call's key, the same at its entry and at its return: for Go the goroutine
    (g in r14) and the frame's depth below the top of its stack (Go moves stacks, so
    the stack pointer itself changes; the depth does not); else the thread and rsp."""
    sp = ctx.arch.c_sp
    if ctx.site.key is not None:  # a future's: the address of its state, in this process
        return ["struct noop_callkey key = {};", "key.a = bpf_get_current_pid_tgid() >> 32;",
                "{", "\tu32 faults = 0, absent = 0;", "\tu64 at = 0;",
                *("\t" + line for line in fetch_c(ctx.site.key, "at", 1, {}, ctx.arch)),
                "\tif (faults | absent)", f"\t\t{ctx.leave}", "\tkey.b = at;", "}"]
    if ctx.stack_hi_off is not None:
        g = ctx.arch.c_g
        return ["struct noop_callkey key = {};", "u64 hi = 0;",
                f"noop_probe_read_user(&hi, 8, (const void *)({g} + {ctx.stack_hi_off}));"
                "  /* g.stack.hi */", f"key.a = {g};", f"key.b = hi - {sp};"]
    return ["struct noop_callkey key = {};", "key.a = bpf_get_current_pid_tgid();",
            f"key.b = {sp};"]


def call_c(ctx: Ctx) -> tuple[list[str], dict[str, str]]:
    """The entry of an exit probe's call: keep what the returns need."""
    pi = ctx.pi
    body = [*zf_c(ctx), *_key(ctx), f"struct noop_call_{pi} *c = noop_calls_{pi}.lookup(&key);",
            "if (!c) {", "\tint zero = 0;",
            f"\tstruct noop_call_{pi} *empty = noop_callzero_{pi}.lookup(&zero);",
            "\tif (!empty)", "\t\treturn 0;", f"\tnoop_calls_{pi}.update(&key, empty);",
            f"\tc = noop_calls_{pi}.lookup(&key);", "\tif (!c)", "\t\treturn 0;", "}",
            "u32 faults = 0, absent = 0;", "c->ts = bpf_ktime_get_ns();"]
    fill, why = fill_c(ctx, "c->e", builtins_c(ctx))
    return [*body, *fill, "c->e.hdr.faults = faults;", "c->e.hdr.absent = absent;",
            "return 0;"], why


def return_c(ctx: Ctx, agg: aggregate.Layout | None, wakeup: bool
             ) -> tuple[list[str], dict[str, str]]:
    """A return of an exit probe's call: the hit, with its call's record in ``c``."""
    pi = ctx.pi
    inner = replace(ctx, leave="goto done;",
                    flags="u32 faults = c->e.hdr.faults, absent = c->e.hdr.absent;")
    if agg is None:
        body, why = event_c(inner, wakeup=wakeup)
    else:
        body, why = fold_c(inner, agg, events_too=ctx.probe.events)
    # A future's end is found by its state's store, which may be another future's:
    # no record is then no call of this one, not an unpaired return.
    unpaired = [] if ctx.site.key is not None else bump_c("noop_unpaired", pi)
    return [*_key(replace(ctx, leave="return 0;")),
            f"struct noop_call_{pi} *c = noop_calls_{pi}.lookup(&key);",
            "if (!c) {  /* its entry was not seen (noop attached during the call) */",
            *("\t" + b for b in unpaired), "\treturn 0;", "}", "{",
            *("\t" + b if b else "" for b in body),
            "}", "done:", f"noop_calls_{pi}.delete(&key);", "return 0;"], why


def drop_c(ctx: Ctx) -> list[str]:
    """A future dropped: if its call is in progress (no end seen), it was cancelled."""
    pi = ctx.pi
    return [*_key(ctx), f"if (!noop_calls_{pi}.lookup(&key))  /* completed, or never polled */",
            "\treturn 0;", *bump_c("noop_cancelled", pi), f"noop_calls_{pi}.delete(&key);",
            "return 0;"]
