"""The built-in presets behind ``noop --binary`` and ``noop run --binary``: every update
of the program's own Prometheus metrics, for Go's client_golang (or
VictoriaMetrics/metrics) and Rust's prometheus crate, chosen by the binary's language.
Plans are kept in noop's cache by build-id."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from agent import cache, files, heap
from agent.binary import debuginfo, proof
from agent.binary.elf import ElfFile
from agent.config.selector import Selector, through_proc
from agent.errors import NoopError
from agent.plan import plain
from agent.plan.model import Plan
from agent.presets.client_golang import facts as client_golang
from agent.presets.mirror import GATHERED
from agent.presets.rust_prometheus import facts as rust_prometheus

# The library each preset mirrors, by the plan's source (the meta-metrics' label).
RUNTIME = "go runtime"  # the plan of a Go program without client_golang: no probe
VMETRICS = ("VictoriaMetrics/metrics preset", "VictoriaMetrics/metrics")  # (source, library)
MIRRORED = frozenset({"client_golang", rust_prometheus.LIBRARY, VMETRICS[1]})  # from memory
LIBRARIES = {"client_golang preset": "client_golang",
             rust_prometheus.SOURCE: rust_prometheus.LIBRARY, VMETRICS[0]: VMETRICS[1]}


def plan(path: str, pid: int | None = None, aggregate: bool = False,
         debug: str | None = None) -> Plan:
    """The preset's plan for the binary at ``path``; with ``aggregate``, the in-kernel
    aggregates ``noop run`` reads too.

    The plan depends on the binary's bytes alone: it is kept in noop's cache by
    build-id, and a start that finds it opens no DWARF."""
    here = Selector(path=files.resolved(path, "binary"))
    elf = ElfFile(path)
    # A stripped copy keeps its build-id: its answers from Go metadata are kept apart.
    given = debuginfo.Given(debug)
    build_id = debuginfo.cache_id(elf, given=given)
    key = f"aggregate={aggregate}"
    made: Plan | None = cache.get(build_id, "preset", key,
                                  load=lambda data: plain.load(Plan, data)) \
        if build_id else None
    if made is None:
        with heap.paused():
            made = _make(path, aggregate, given)
        if build_id:
            cache.put(build_id, "preset", key, plain.dump(made))
    (target,) = made.targets
    binary = path if through_proc(path) else here.path or path
    return replace(made, targets=(replace(target, binary=binary, pid=pid, selector=here),))


def _make(path: str, aggregate: bool, given: debuginfo.Given) -> Plan:
    from agent.binary.dwarf.damage import damage_said

    with damage_said(path):
        return _preset(path, aggregate, given)


def _preset(path: str, aggregate: bool, given: debuginfo.Given) -> Plan:
    # The rules read DWARF: imported when a plan is made, not by the output's modules
    # that ask a plan's library (a start from a cached plan reads no DWARF).
    from agent.plan.binary import Binary
    from agent.presets.client_golang import rules as golang_rules
    from agent.presets.rust_prometheus import rules as crate_rules

    b = Binary(path, client_golang.SCOPE, given)  # a stripped Go build's metadata: what it reads
    language = b.dwarf.language
    if language in ("go", "rust"):
        try:
            made = golang_rules.make(b, aggregate) if language == "go" else \
                crate_rules.make(b, aggregate)
        except golang_rules.NoMetrics:
            from agent.presets.vmetrics import library as vmetrics
            if not vmetrics.uses(path):
                raise
            from agent.presets.vmetrics import rules as vm_rules
            made = vm_rules.make(b, aggregate)
        else:
            made = _both(b, made)
        try:
            return replace(made, probes=tuple(b.proven(p) for p in made.probes))
        except proof.Unprovable as exc:
            raise NoopError(f"{path}: {exc.message}: noop puts a uprobe only where it can "
                            "show that an instruction starts",
                            "report it, with the binary") from None
    raise Unsupported(f"{path} is a {language.upper()} program: the built-in presets mirror "
                      "Go's client_golang and Rust's prometheus crate",
                      "write a probes.yaml for it and use --config")


def _both(b: Any, made: Plan) -> Plan:
    """``made`` (client_golang's), saying once that the program keeps metrics with
    VictoriaMetrics/metrics as well: those are not mirrored, nor their updates shown."""
    from agent.presets.vmetrics.facts import PKG

    # its Sets or metrics' methods linked (not a dependency's import of the package)
    used = (f"{PKG}.(*Set).", f"{PKG}.(*Counter).", f"{PKG}.(*FloatCounter).",
            f"{PKG}.(*Histogram).", f"{PKG}.(*Summary).")
    if b.dwarf.language != "go" or not made.probes or \
            not any(n.startswith(used) for n in b.functions.symbols):
        return made
    return replace(made, notes=(*made.notes, f"{b.path} keeps metrics with "
                                "VictoriaMetrics/metrics as well as with client_golang: "
                                "noop reads client_golang's only"))


def need_updates(p: Plan, how: str) -> None:
    """Refuses ``how`` (a use of the update probes: noop --binary's lines, --mirror
    both or off) for a program whose architecture's update code the presets do not
    read: its plan holds the mirror's probe alone."""
    arch = p.targets[0].arch if p.targets else "x86-64"
    if library(p) in MIRRORED and all(probe.name == GATHERED for probe in p.probes):
        read = {"client_golang": client_golang.UPDATES_READ,
                rust_prometheus.LIBRARY: rust_prometheus.UPDATES_READ}
        some = arch in read.get(library(p), ())
        err = NoopError(f"{how} probes every update of the program's metrics, and on "
                        f"{arch} noop " + ("reads the update code for noop --binary's "
                                           "lines only, not for noop run's counts yet"
                                           if some else "does not read the update code yet"),
                        "serve the program's own metrics with noop run --binary, which "
                        "reads them from its memory")
        err.exit_code = 2  # the command line asked for what this binary cannot have
        raise err


class Unsupported(NoopError):
    """A program in a language no preset reads (C)."""


def memory_only(p: Plan) -> Plan:
    """The preset's plan for ``noop run --mirror memory``: no probe at all, since the
    program's memory gives every value (``presets.mirror``); a plan of another kind as
    it is."""
    return replace(p, probes=()) if library(p) in MIRRORED else p


def finders_only(p: Plan) -> Plan:
    """The preset's plan for ``noop run --binary``'s default ``--mirror auto``, beside
    the mirror that reads every value from the program's memory: only the probe where
    the program gathers a registry (client_golang's ``(*Registry).Gather``, the crate's
    ``gather``), which finds the registries no global holds (a hit per scrape of the
    program), and none on any update path. A plan of another kind as it is."""
    if library(p) not in MIRRORED:
        return p
    return replace(p, probes=tuple(pr for pr in p.probes if pr.name == GATHERED))


def library(p: Plan) -> str:
    return LIBRARIES.get(p.source, "")
