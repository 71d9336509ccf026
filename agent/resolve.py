"""Resolve a spec against its binaries: functions to attach sites, selectors to fetches.

Depends only on the spec and the binaries' bytes. Every problem of the spec is
collected and raised at once as a SpecError carrying file:line:col and the probe.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from elftools.dwarf.die import DIE

from agent import aggregate
from agent.binary.elf import ElfFile
from agent.dwarf.functions import Functions, FunctionVars
from agent.dwarf.lookup import find_type
from agent.dwarf.reader import Dwarf
from agent.dwarf.types import TypeNamer
from agent.errors import NoDebugInfo, NoopError, nearest
from agent.plan import (
    Aggregate,
    Column,
    Fetch,
    MetricPlan,
    Plan,
    ProbePlan,
    Site,
    TargetPlan,
    ValueSpec,
)
from agent.selectors import SelectError, Walker
from agent.spec import Probe, Spec, Value, parse_selector
from agent.specread import Mark, Problem, SpecError


class Binary:
    """One target binary opened for resolving: ELF, DWARF, functions, type walker."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.elf = ElfFile(path)
        if not self.elf.has_dwarf:
            raise NoDebugInfo(f"{path}: no DWARF debug info (stripped?)",
                              "build without -ldflags=-s/-w, or point noop at the unstripped "
                              "binary")
        self.dwarf = Dwarf(self.elf)
        self.namer = TypeNamer(self.dwarf)
        self.functions = Functions(self.dwarf, self.namer)
        self.walker = Walker(self.dwarf, self.namer)

    @cached_property
    def goid_offset(self) -> int | None:
        """Offset of runtime.g.goid when the program keeps g in r14 (Go register ABI)."""
        if self.dwarf.language != "go":
            return None
        try:
            g = find_type(self.dwarf, "runtime.g")
        except NoopError:
            return None
        goid = self.walker.members(g).get("goid")
        return goid[0] if goid is not None else None

    def entry_site(self, function: str, fetches: tuple[Fetch, ...]) -> Site:
        sym, _die = self.functions.find(function)
        return Site(function, sym.address, self.elf.file_offset(sym.address),
                    "entry: the function's first instruction", fetches)

    def plan(self, name: str, pid: int | None) -> TargetPlan:
        return TargetPlan(name, str(Path(self.path).resolve()), self.elf.build_id,
                          self.dwarf.language, pid, self.goid_offset)


@dataclass
class _Collector:
    problems: list[Problem]

    def add(self, mark: Mark, message: str, hint: str = "", probe: str = "") -> None:
        self.problems.append(Problem(mark, message, hint, probe))


def binary_path(spec: Spec, binary: str) -> str:
    """A target's binary: absolute as given, else relative to the spec file's directory."""
    p = Path(binary)
    if p.is_absolute() or spec.path.startswith("<"):
        return str(p)
    return str(Path(spec.path).parent / p)


def resolve(spec: Spec) -> Plan:
    out = _Collector([])
    binaries: dict[str, Binary] = {}
    targets: list[TargetPlan] = []
    for t in spec.targets:
        try:
            b = Binary(binary_path(spec, t.binary))
        except NoopError as exc:
            out.add(t.mark, f"target {t.name}: {exc.message}", exc.hint)
            continue
        binaries[t.name] = b
        targets.append(b.plan(t.name, t.pid))
    probes: list[ProbePlan] = []
    for probe in spec.probes:
        binary = binaries.get(probe.target)
        if binary is None:
            continue
        plan = _probe(binary, probe, out)
        if plan is not None:
            probes.append(plan)
    if out.problems:
        raise SpecError(out.problems)
    return Plan(spec.path, tuple(targets), tuple(probes))


def _functions(b: Binary, probe: Probe, out: _Collector) -> list[str]:
    if probe.function is not None:
        try:
            b.functions.find(probe.function)
        except NoopError as exc:  # not found, or found without DWARF
            out.add(probe.function_mark, exc.message, exc.hint, probe.name)
            return []
        return [probe.function]
    pattern = probe.match or ""
    found = sorted(n for n in b.functions.symbols if fnmatch.fnmatchcase(n, pattern))
    if not found:
        out.add(probe.function_mark, f"no function matches {pattern!r}",
                "patterns match whole names; '(' '*' '[' need [(] [*] [[] to be literal",
                probe.name)
    return found


def _probe(b: Binary, probe: Probe, out: _Collector) -> ProbePlan | None:
    sites: list[Site] = []
    specs: tuple[ValueSpec, ...] | None = None
    for fn in _functions(b, probe, out):
        try:
            fv = b.functions.vars(fn)
            types = b.functions.param_types(fn)
        except NoopError as exc:
            out.add(probe.function_mark, f"{fn}: {exc.message}", exc.hint, probe.name)
            continue
        pairs = [_value(b, fv, types, v, out, probe.name) for v in probe.values]
        if any(p is None for p in pairs):
            continue
        these = tuple(p[0] for p in pairs if p is not None)
        if specs is not None and these != specs:
            out.add(probe.function_mark, f"{fn}: the values have other types here than in "
                    f"{sites[0].function}", "narrow the pattern so the values agree",
                    probe.name)
            continue
        specs = these
        sites.append(b.entry_site(fn, tuple(p[1] for p in pairs if p is not None)))
    if not sites or specs is None:
        return None
    wants_goid = any(v.builtin == "goid" for v in probe.values)
    if wants_goid and b.goid_offset is None:
        out.add(next(v.mark for v in probe.values if v.builtin == "goid"),
                "$goid needs a Go program built with the register ABI (Go >= 1.17)",
                "drop $goid for this target", probe.name)
    metrics, agg = _metrics(probe, specs, out)
    return ProbePlan(probe.name, probe.target, specs, tuple(sites), wants_goid, metrics, agg)


_LABEL_DECODINGS = ("string", "bytes", "int", "uint", "bool", "addr")
_NUMBERS = ("int", "uint", "float", "bool", "addr")


def _metrics(probe: Probe, specs: tuple[ValueSpec, ...], out: _Collector
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
        plans.append(MetricPlan(m.name, m.kind, m.help, m.value, m.buckets,
                                tuple(lab.rule for lab in m.labels), m.max_series, where,
                                column, why))
    kernel = [p for p in plans if p.where == "kernel"]
    if not kernel:
        return tuple(plans), None
    used = {r.value for p in kernel for r in p.labels}
    keys = tuple(v.name for v in specs if v.name in used)
    columns = []
    for p in kernel:
        if not p.column or p.value is None:
            continue
        v = by_name[p.value]
        op = {"counter": "sum", "gauge": "last"}.get(p.kind, "hist")
        bounds = tuple(aggregate.bound(v, b) for b in p.buckets) if op == "hist" else ()
        columns.append(Column(p.column, op, p.value, bounds))
    agg = Aggregate(keys, tuple(columns), max(p.max_series for p in kernel))
    size = aggregate.key_size(keys, by_name)
    if size > aggregate.KEY_LIMIT:
        first = next(m for m in probe.metrics if m.labels and m.aggregate == "kernel")
        out.add(first.mark, f"the labels of this probe's metrics take {size} bytes in the "
                f"kernel's key; at most {aggregate.KEY_LIMIT}",
                "lower max: of the string values used as labels", probe.name)
    return tuple(plans), agg


def _value(b: Binary, fv: FunctionVars, types: dict[str, DIE | None], v: Value,
           out: _Collector, probe: str) -> tuple[ValueSpec, Fetch] | None:
    if v.builtin is not None:
        return (ValueSpec(v.name, "uint", 8, 0, "builtin", v.selector),
                Fetch("builtin", builtin=v.builtin))
    steps = parse_selector(v.selector)
    param = str(steps[0][1])
    var = next((p for p in fv.params if p.name == param), None)
    if var is None:
        names = [p.name for p in fv.params]
        near = nearest(param, names, 1)
        out.add(v.mark, f"{fv.function} has no parameter {param!r}",
                (f"did you mean {near[0]!r}? " if near else "")
                + "parameters: " + (", ".join(names) or "none"), probe)
        return None
    try:
        sel = b.walker.select(steps, var.location, types.get(param), v.decode, v.max,
                              var.note)
    except SelectError as exc:
        out.add(v.mark, f"{v.name}: {exc.message}", exc.hint, probe)
        return None
    return (ValueSpec(v.name, sel.decode, sel.size, sel.cap, sel.type, v.selector),
            sel.fetch)
