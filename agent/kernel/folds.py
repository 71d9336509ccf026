"""The body of a site's program in ``noop run``: its hit folded into the probe's
in-kernel aggregate, the per-CPU row of its key (made on the key's first hit, which
also describes it in an event; the overflow row when the map is full), each column
updated from the values read."""

from __future__ import annotations

from agent.kernel import aggregate
from agent.kernel.bodies import Ctx, builtins_c, count_faults_c, event_c, zf_c
from agent.kernel.reads import fetch_c, unreadable
from agent.plan.fetches import Fetch
from agent.plan.model import ValueSpec


def fold_c(ctx: Ctx, agg: aggregate.Layout, events_too: bool
           ) -> tuple[list[str], dict[str, str]]:
    """Fold the hit into the probe's per-CPU hash row for its key."""
    pi, probe = ctx.pi, ctx.probe
    fetch_of = {v.name: (i, v, f) for i, (v, f) in
                enumerate(zip(probe.values, ctx.site.fetches, strict=True))}
    body = [*zf_c(ctx), ctx.flags, f"struct {agg.key_struct} k;",
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
        describe, _ = event_c(ctx, wakeup=True, tail=False)
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


def _count(ctx: Ctx, agg: aggregate.Layout, fetch_of: dict[str, tuple[int, ValueSpec, Fetch]],
           events_too: bool, why: dict[str, str]) -> list[str]:
    """With ``row`` found: count the hit, fold its values into the columns."""
    body = ["if (!row->born)", "\trow->born = bpf_ktime_get_ns();", "row->hits++;"]
    for f in agg.fields:
        if f.column.op in LAZY:
            body += _lazy(ctx, f, fetch_of, why)
        else:
            body += _column(f, fetch_of)
    body += count_faults_c(ctx.pi)
    if events_too:
        ev, _ = event_c(ctx, wakeup=False, tail=False)
        body += ["do {  /* and the whole event, for what is aggregated in noop */",
                 *("\t" + b for b in ev), "} while (0);"]
    return [*body, ctx.leave]


def _read(ctx: Ctx, fetch: Fetch, name: str, dst: str, index: int, why: dict[str, str]
          ) -> list[str]:
    """Fetch value ``index`` into ``dst``; one never readable at this site is marked
    absent instead, with the reason kept in ``why``."""
    reason = unreadable(fetch, ctx.xmm_helper)
    if reason:
        why[name] = reason
        return [f"absent |= {1 << index:#x};  /* {reason} */"]
    return fetch_c(fetch, dst, 1 << index, builtins_c(ctx), ctx.arch)


def _lazy(ctx: Ctx, f: aggregate.RowField,
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
