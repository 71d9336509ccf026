"""A probe's values checked against the function they are read in: each value's spec
and fetch (a parameter, a result at an exit, a builtin), with the problems of those
that cannot be read; and its metrics' plans, their labels and values checked against
the values' decodings, with the in-kernel aggregate of those kept there.
"""

from __future__ import annotations

from dataclasses import dataclass

from elftools.dwarf.die import DIE

from agent.binary.dwarf.functions import FunctionVars
from agent.binary.dwarf.locations import Location
from agent.config.model import Probe, Step, Value
from agent.config.reader import Mark, Problem
from agent.errors import nearest
from agent.plan import callers
from agent.plan.binary import Binary
from agent.plan.fetches import Fetch, Op
from agent.plan.keys import KEY_LIMIT, bound, key_size
from agent.plan.model import (
    Aggregate,
    Column,
    ColumnOp,
    MetricPlan,
    ValueSpec,
    metric_kind,
    where_of,
)
from agent.plan.selectors.places import SelectError


@dataclass
class Collector:
    """A spec's problems, collected to be raised at once."""

    problems: list[Problem]

    def add(self, mark: Mark, message: str, hint: str = "", probe: str = "") -> None:
        self.problems.append(Problem(mark, message, hint, probe))


def _signed(b: Binary, function: str) -> bool:
    """Whether the function has a signature: in the metadata, or given by the spec."""
    _sym, die = b.functions.find(function)
    return bool(die.attributes.get("DW_AT_prototyped") and
                die.attributes["DW_AT_prototyped"].value)


def value_of(b: Binary, fv: FunctionVars, types: dict[str, DIE | None], v: Value,
             out: Collector, probe: Probe) -> tuple[ValueSpec, Fetch] | None:
    """Value ``v``'s spec and its fetch in the function ``fv`` tells of: a builtin, a
    parameter, or at an exit a result; None with its problem in ``out``."""
    if v.builtin is not None:
        return callers.builtin(v)
    steps = v.steps
    root = str(steps[0][1])
    var = next((p for p in fv.params if p.name == root), None)
    tdie = types.get(root)
    if var is None:
        var = next((r for r in fv.results if r.name == root), None)
        tdie = b.functions.result_types(fv.function).get(root)
        if var is not None and (probe.at != "exit" or v.at == "entry"):
            out.add(v.mark, f"{v.name}: {root} is a result, known only when the call "
                    "returns", "read it in a probe with at: exit" if probe.at != "exit"
                    else "drop at: entry", probe.name)
            return None
    if var is None and b.dwarf.from_metadata and not _signed(b, fv.function):
        # A stripped Go binary: the metadata names no parameter, and has no signature of
        # this function at all.
        known = "its receiver p0 only" if fv.params else "no parameter"
        out.add(v.mark, f"{v.name}: {fv.function} is in a stripped binary whose Go type "
                f"metadata keeps no signature of it ({known}), so {root!r} is unknown",
                "give the probe its signature: \"func(...) (...)\", or the binary's debug "
                "info (--debuginfo)", probe.name)
        return None
    missing = b.functions.no_values(fv.function) if var is None else ""
    if missing:
        from agent.binary.dwarf.symtab import NO_VALUES

        out.add(v.mark, f"{v.name}: {fv.function} has no known parameters: {missing}",
                NO_VALUES, probe.name)
        return None
    if var is None:
        names = [p.name for p in fv.params]
        results = [r.name for r in fv.results] if probe.at == "exit" else []
        near = nearest(root, names + results, 1)
        out.add(v.mark, f"{fv.function} has no parameter {'or result ' * bool(results)}"
                f"{root!r}", (f"did you mean {near[0]!r}? " if near else "")
                + "parameters: " + (", ".join(names) or "none")
                + (f"; results: {', '.join(results)}" if results else ""), probe.name)
        return None
    got = _select(b, steps, var.location, tdie, v, var.note, out, probe.name)
    if got is not None and v.at == "exit" and var in fv.params and split_root(got[1]) is None:
        out.add(v.mark, f"{v.name}: {v.selector} is the parameter's own value, not reached "
                "through a pointer; the call cannot change it for its caller",
                "drop at: exit; it is read at entry", probe.name)
        return None
    return got


def _select(b: Binary, steps: tuple[Step, ...], start: Location | None, tdie: DIE | None,
            v: Value, note: str, out: Collector, probe: str
            ) -> tuple[ValueSpec, Fetch] | None:
    try:
        sel = b.walker.select(steps, start, tdie, v.decode, v.max, note)
    except SelectError as exc:
        out.add(v.mark, f"{v.name}: {exc.message}", exc.hint, probe)
        return None
    return (ValueSpec(v.name, sel.decode, sel.size, sel.cap, sel.type, v.selector,
                      sel.names, sel.other), sel.fetch)


_MEMORY = ("mem", "mem_slice", "mem_array")


def split_root(fetch: Fetch) -> tuple[tuple[Op, ...], tuple[Op, ...]] | None:
    """Split a fetch reaching memory through a parameter's pointer into the ops that
    find the pointer (at entry) and the rest (at the return); None when the value is
    the parameter's own (in its registers or its stack slot), which a call cannot
    change for its caller."""
    if fetch.kind not in _MEMORY or not fetch.ops:
        return None
    ops = fetch.ops
    if ops[0].op == "reg":
        cut = 1
    elif ops[0].op == "sp":
        cut = next((n + 1 for n, o in enumerate(ops) if o.op == "deref"), 0)
        if not cut:
            return None
    else:
        return None
    if any(o.op in ("reg", "bound", "sp") or (o.op == "when" and o.reg) for o in ops[cut:]):
        return None
    return ops[:cut], ops[cut:]


_LABEL_DECODINGS = ("string", "bytes", "int", "uint", "bool", "addr", "variant", "caller",
                    "caller_line", "gotype")
_NUMBERS = ("int", "uint", "float", "bool", "addr")


def metric_plans(probe: Probe, specs: tuple[ValueSpec, ...], out: Collector
                 ) -> tuple[tuple[MetricPlan, ...], Aggregate | None]:
    """Each metric's plan, and the probe's in-kernel aggregate for those kept there: one
    per-CPU hash keyed by every label those metrics use."""
    by_name = {v.name: v for v in specs}
    plans: list[MetricPlan] = []
    for n, m in enumerate(probe.metrics):
        bad = False
        for lab in m.labels:
            v = by_name[lab.rule.value]
            if v.decode not in _LABEL_DECODINGS:
                out.add(lab.mark, f"label {lab.rule.name}: {v.name} is a {v.decode}; labels "
                        "come from strings, integers and booleans", "use it as a value",
                        probe.name)
                bad = True
        value = by_name[m.value] if m.value else None
        if value is not None and value.decode not in _NUMBERS:
            out.add(m.value_mark, f"metric {m.name}: {value.name} is a {value.decode}, not a "
                    "number", "a label can hold it", probe.name)
            bad = True
        if bad:
            continue
        where, why = m.aggregate, ""
        if where == "kernel" and value is not None and value.decode == "float" \
                and m.kind != "gauge":
            where, why = "events", "a BPF program has no floating point to add floats"
        column = f"m{n}" if where == "kernel" and value is not None else ""
        plans.append(MetricPlan(m.name, metric_kind(m.kind), m.help, m.value, m.buckets,
                                tuple(lab.rule for lab in m.labels), m.max_series,
                                where_of(where), column, why))
    kernel = [p for p in plans if p.where == "kernel"]
    if not kernel:
        return tuple(plans), None
    used = {r.value for p in kernel for r in p.labels}
    # Which process hit comes first: a series carries its container's labels, and the
    # rows of a process that exited are folded in noop and deleted from the map.
    keys = ("$pid", *(v.name for v in specs if v.name in used))
    columns = []
    for p in kernel:
        if not p.column or p.value is None:
            continue
        v = by_name[p.value]
        op: ColumnOp = "sum" if p.kind == "counter" else "last" if p.kind == "gauge" \
            else "hist"
        bounds = tuple(bound(v, b) for b in p.buckets) if op == "hist" else ()
        columns.append(Column(p.column, op, p.value, bounds))
    agg = Aggregate(keys, tuple(columns), max(p.max_series for p in kernel))
    size = key_size(keys, by_name)
    if size > KEY_LIMIT:
        first = next(m for m in probe.metrics if m.labels and m.aggregate == "kernel")
        out.add(first.mark, f"the labels of this probe's metrics take {size} bytes in the "
                f"kernel's key; at most {KEY_LIMIT}",
                "lower max: of the string values used as labels", probe.name)
    return tuple(plans), agg
