"""Human-readable output of the inspection answers: pahole-like layouts, parameter tables."""

from __future__ import annotations

import json
from typing import Any

CACHELINE = 64


def struct(layout: dict[str, Any]) -> str:
    """A pahole-style layout: members with offset and size, holes, cacheline boundaries."""
    kind = {"structure": "struct", "union": "union", "class": "class"}.get(layout["kind"],
                                                                            "struct")
    members = layout["members"]
    width = max((len(m["type"]) for m in members), default=4)
    width = min(max(width, 8), 48)
    name = str(layout["name"])  # C's "struct job" as the user wrote it: one keyword
    lines = [f"{name} {{" if name.startswith(f"{kind} ") else f"{kind} {name} {{"]
    if layout.get("debug", "in the binary") != "in the binary":
        lines.insert(0, f"/* from {layout['debug']} */")
    end = 0  # first byte past the previous member
    line_no = 0
    holes = []
    for m in members:
        off, size = m["offset"], m["size"]
        if kind != "union" and m.get("bit_size") is None and off > end:
            holes.append(off - end)
            lines.append(f"\n\t/* XXX {off - end} byte{'s' if off - end > 1 else ''} hole, "
                         "try to pack */")
        if off // CACHELINE > line_no:
            line_no = off // CACHELINE
            lines.append(f"\t/* --- cacheline {line_no} boundary "
                         f"({line_no * CACHELINE} bytes) --- */")
        name = m["name"]
        if m.get("bit_size") is not None:
            name += f":{m['bit_size']}"
            where = f"{off:5d}:{m['bit_offset']:<2d}{size:4d}"
        else:
            where = f"{off:5d} {size:5d}"
        lines.append(f"\t{m['type']:<{width}} {name + ';':<24} /* {where} */")
        end = max(end, off + size) if m.get("bit_size") is None else max(
            end, off + (m["bit_offset"] + m["bit_size"] + 7) // 8)
    size = layout["size"]
    lines.append("")
    lines.append(f"\t/* size: {size}, cachelines: {-(-size // CACHELINE)}, "
                 f"members: {len(members)} */")
    if holes:
        lines.append(f"\t/* sum members: {sum(m['size'] for m in members)}, "
                     f"holes: {len(holes)}, sum holes: {sum(holes)} */")
    if kind != "union" and size > end:
        lines.append(f"\t/* padding: {size - end} */")
    lines.append("};")
    return "\n".join(lines)


def location(loc: list[dict[str, Any]] | None) -> str:
    if not loc:
        return "<not available>"
    parts = []
    for p in loc:
        if "memory" in p:
            m = p["memory"]
            parts.append(f"[{m['reg']}{m['offset']:+d}]" if m["offset"] else f"[{m['reg']}]")
        elif "reg" in p and p.get("add"):
            parts.append(f"{p['reg']}{p['add']:+d}")
        elif "reg" in p:
            parts.append(p["reg"] if p["size"] >= 8 else f"{p['reg']}[{p['size']}]")
        elif "stack" in p:
            parts.append(f"{p['stack']}(sp)[{p['size']}]")
        else:
            parts.append(f"<optimized out>[{p['size']}]")
    return " ".join(parts)


def vars_table(v: dict[str, Any]) -> str:
    lines = [f"{v['function']}",
             f"  entry {v['address']:#x} (file offset {v['file_offset']:#x}), "
             f"{v['language']}, {v['abi']} ABI" if v["address"] else
             f"  {v['abi']}, {v['language']}: no code of its own; a probe on its entry "
             "is put on each copy"]
    if v.get("debug", "in the binary") != "in the binary":
        lines.append(f"  debug info: {v['debug']}")
    if v.get("note"):
        lines.append(f"  note: {v['note']}")
    rows = [("param", p) for p in v["params"]] + [("result", r) for r in v["results"]]
    if not rows:
        lines.append("  no parameters or results")
    name_w = max((len(r["name"]) for _, r in rows), default=4)
    type_w = min(max((len(r["type"]) for _, r in rows), default=4), 44)
    for role, r in rows:
        where = location(r["location"])
        extra = f"  ({r['note']})" if r.get("note") else ""
        if any(p.get("reg", "").startswith("xmm") for p in r["location"] or []):
            extra += "  (xmm: not in a uprobe's registers)"
        lines.append(f"  {role:<6} {r['name']:<{name_w}}  {r['type']:<{type_w}}  "
                     f"{where:<16} {r['source']}{extra}")
    return "\n".join(lines)


def lines_table(v: dict[str, Any]) -> str:
    """A function's lines as ``perf probe -L`` shows them: each line's number, its
    first statement address (and how many more, in this body and inlined copies) or
    ``-`` when no probe can go there, the functions inlined there, and its text."""
    copies = v["copies"] - (1 if v["out_of_line"] else 0)
    head = [f"{v['function']}  ({v['file']})"]
    if copies:
        head.append(f"  {'out of line and ' if v['out_of_line'] else ''}inlined in "
                    f"{copies} place{'s' if copies != 1 else ''}: a line's addresses are "
                    "in each copy")
    if v["file"] not in v.get("source_found", []):
        head.append("  source not found on this machine (--source DIR): line numbers only")
    if v.get("note"):
        head.append(f"  {v['note']}")
    rows = []
    file = v["file"]
    for e in v["lines"]:
        if e["file"] != file:
            file = e["file"]
            rows.append(("", "", f"  ({file})"))
        sites = e["sites"]
        where = f"{sites[0]['address']:#x}" if sites else "-"
        if len(sites) > 1:
            where += f" +{len(sites) - 1}"
        text = e.get("source", "").rstrip().replace("\t", "    ")
        if e["inlines"]:
            text += f"    [inlines {', '.join(e['inlines'])}]"
        rows.append((str(e["line"]), where, text))
    width = max((len(w) for _n, w, _t in rows), default=1)
    return "\n".join(head + [f"{n:>6}  {w:<{width}}  {t}".rstrip() for n, w, t in rows])


def line_vars_table(v: dict[str, Any]) -> str:
    """What ``perf probe -V`` shows: at each statement address of the line, the values
    available and where each is, and where a line probe counts each pass (what it
    reads); sites with the same answer are shown once."""
    groups: dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]]]] = {}
    for s in v["sites"]:  # the same function, values and role: one group
        key = json.dumps([s["function"], s["vars"], "counts" in s, s.get("statement", True)],
                         sort_keys=True)
        groups.setdefault(key, ([], s["vars"]))[0].append(s)
    out = []
    for sites, vars_ in groups.values():
        first = sites[0]
        into = f", inlined into {first['inlined_into']}" if first.get("inlined_into") else ""
        addrs = ", ".join(f"{s['address']:#x}" for s in sites)
        role = "" if "counts" not in first else \
            " (a line probe counts each pass here)" if first.get("statement", True) else \
            " (not a statement of the line: a line probe counts each pass here)"
        out.append(f"{first['function']} at {first['file'].rsplit('/', 1)[-1]}:"
                   f"{first['line']}{into}: {addrs}{role}")
        if not vars_:
            out.append("  no parameters or locals")
        name_w = max((len(x["name"]) for x in vars_), default=4)
        type_w = min(max((len(x["type"]) for x in vars_), default=4), 44)
        for x in vars_:
            where = location(x["location"]) if x["location"] else "<not available here>"
            note = f"  ({x['note']})" if x.get("note") and x["location"] else ""
            if not x["location"] and x.get("note"):
                where = f"<{x['note']}>"
            out.append(f"  {x['kind']:<6} {x['name']:<{name_w}}  {x['type']:<{type_w}}  "
                       f"{where}{note}")
    if v.get("refused"):
        out.append(f"a line probe here is refused: {v['refused']}")
    return "\n".join(out)


def funcs_table(rows: list[dict[str, Any]]) -> str:
    """Address, size, inlined copies, name; a function with no code of its own (only
    inlined copies) shows ``inlined only`` in place of its address and size."""
    return "\n".join((f"{r['address']:#014x} {r['size']:7d} " if not r.get("only_inlined")
                      else f"{'inlined only':>22} ")
                     + f"{('+' + str(r['inlined']) + ' inl') if r['inlined'] else '':>9}  "
                     f"{r['name']}" for r in rows)


def plan(data: dict[str, Any]) -> str:
    """The resolved plan: targets, then each probe's sites and how each value is fetched."""
    lines = [f"plan from {data['source']}"]
    for t in data["targets"]:
        pid = f", pid {t['pid']}" if t["pid"] else ", every process"
        go = f" {t['go_version']}" if t.get("go_version") else ""
        lines.append(f"target {t['name']}: {t['binary']} ({t['language']}{go}, "
                     f"build-id {t['build_id']}{pid})")
        lines.append(f"  debug info: {t.get('debug', 'in the binary')}")
        lines += [f"  module {m['path']} {m['version']}" for m in t.get("modules", ())]
        lines += [f"  and the same build at {path}" for path in t.get("also", ())]
    est = data.get("estimate") or {}
    if "per_hit_ns" in est:
        lines.append("a hit costs here: " + ", ".join(
            f"{k} {v:,.0f} ns" for k, v in est["per_hit_ns"].items()))
    elif est:
        lines.append("a hit's cost here is not measured yet: noop check as root measures it")
    priced = {e["probe"]: e for e in est.get("probes", ())}
    for p in data["probes"]:
        lines.append("")
        lines.append(f"probe {p['name']} ({len(p['sites'])} site"
                     f"{'s' * (len(p['sites']) != 1)})")
        kinds = {v["name"]: f"{v['type']} as {v['decode']}" for v in p["values"]}
        width = max((len(n) for n in kinds), default=0)
        e = priced.get(p["name"], {})
        for n, s in enumerate(p["sites"]):
            when = (f", when {s['when']}" if "when" in s else "") + \
                (f", not when {s['skip']}" if "skip" in s else "") + \
                (f", only when {s['keep']}" if "keep" in s else "")
            ns = f", ~{e['sites_ns'][n]:,.0f} ns a hit" if "sites_ns" in e else ""
            how = f", {s['handling']}{ns}" if s.get("handling") else \
                f", single-stepped{ns}" if ns else ""
            insn = f", bytes {s['instruction']}" if "instruction" in s else ""
            lines.append(f"  at {s['address']} (file offset {s['file_offset']}{insn}{how}) "
                         f"{s['function']}")
            lines.append(f"     why: {s['why']}{when}")
            for name, f in s["values"].items():
                lines.append(f"     {name:<{width}}  {kinds[name]}: {f['steps']}")
        for u in p.get("unseen", []):
            lines.append(f"  not seen: {u}")
        for m in p.get("metrics", []):
            by = f" by ({', '.join(m['labels'])})" if m["labels"] else ""
            of = f" of {m['value']}" if m["value"] else " of calls"
            where = "in the kernel" if m["aggregated"] == "kernel" else "in noop, from events"
            why = f" ({m['why']})" if "why" in m else ""
            lines.append(f"  metric {m['name']}: {m['type']}{of}{by}; {where}{why}")
        if "aggregate" in p:
            a = p["aggregate"]
            cols = "".join(f", {c['op']}({c['value']})" for c in a["columns"])
            lines.append(f"  in-kernel aggregate (noop run): per-CPU hash by "
                         f"({', '.join(a['keys']) or 'nothing'}), at most {a['max_series']} "
                         f"keys + overflow: hits{cols}")
        if e:
            lines.append(_priced(e))
    return "\n".join(lines)


def _priced(e: dict[str, Any]) -> str:
    """A probe's cost line: its budget, and its share of a CPU at a rate."""
    budget = "none" if e["budget"] is None else f"{e['budget']:.2%}".replace(".00%", "%")
    m = e.get("measured")
    if "rate" not in e:
        return f"  cost: budget {budget} of a CPU per process (--rate or --measure prices it)"
    seen = (f"measured {m['hits']:,} hits in {m['seconds']:g} s"
            f"{', ' + str(m['processes']) + ' processes' if m['processes'] > 1 else ''}; "
            if m else "")
    if "share" not in e:
        return f"  cost: {seen}{e['rate']:,.0f} hits/s, budget {budget} (a hit's cost unknown)"
    over = "  OVER BUDGET" + (f" ({m['stopped']})" if m and m.get("stopped") else "") \
        if e.get("over") else ""
    return (f"  cost: {seen}{e['rate']:,.0f} hits/s x ~{e['ns_per_hit']:,.0f} ns = "
            f"{e['share']:.2%} of a CPU per process, budget {budget}{over}")
