"""The Prometheus collector of ``noop run``: on every scrape it reads the in-kernel
aggregates of the running session and yields the user metrics, the preset's
meta-metrics and noop's own health. Reads BPF maps only through the session's loader."""

from __future__ import annotations

import platform
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from agent import __version__
from agent.kernel import aggregate, events, ringbuf
from agent.kernel.aggregate import Row
from agent.kernel.events import Event
from agent.kernel.program import Program
from agent.output import undecodable
from agent.output.undecodable import Tally
from agent.output.usermetrics import UserMetrics, faulty
from agent.plan.model import Plan

if TYPE_CHECKING:
    from agent.kernel.budget import Overhead


# A metric object of a preset's: (pid, address, its generation: plan.generations).
Object = tuple[int, int, int]


class Meta(Protocol):
    """What the collector and the daemon need of a preset's meta-metrics (each preset's
    ``presets.meta.PresetMeta``): names learnt from events, rows folded at a scrape,
    and rows of objects that are gone moved out of the kernel's maps."""

    renews: bool  # the rows say their object's generation

    def on_event(self, probe_index: int, event: Event) -> None: ...
    def families(self, rows: dict[int, list[Row]], tally: Tally) -> Iterator[Metric]: ...
    def retire(self, rows: dict[int, list[Row]], tally: Tally) -> None: ...
    def superseded(self, keys: set[Object]) -> set[Object]: ...
    def forget(self, pids: set[int]) -> None: ...


class Maps(Protocol):
    """What the collector needs of a loaded program (``load.Loaded`` is one)."""

    attachments: list[Any]

    def rows(self, probe: int) -> list[tuple[bytes, list[bytes]]]: ...
    def produced(self) -> dict[int, int]: ...
    def lost_by_probe(self) -> dict[int, int]: ...
    def faults(self) -> dict[int, int]: ...
    def unpaired(self) -> dict[int, int]: ...

    def cancelled(self) -> dict[int, int]: ...


@dataclass
class Session:
    """One loaded plan: its program, maps, and what noop aggregates from its events."""

    plan: Plan
    program: Program
    maps: Maps
    users: UserMetrics
    meta: Meta | None
    seen: dict[int, int] = field(default_factory=dict)  # records read, per probe
    # hits of rows moved out of the kernel's map (of processes that exited, and of
    # metric objects that are gone: the preset's), per probe
    retired_hits: dict[int, int] = field(default_factory=dict)
    overhead: Overhead | None = None  # what its probes cost, and their budgets (noop run)
    # probes whose events another part of noop takes, by name (None: no one, dropped):
    # the preset's registry_gathered, the mirror's
    taps: dict[str, Callable[[Event], None] | None] = field(default_factory=dict)
    # held while reading rows into metrics, and while moving rows (of exited processes,
    # of gone metric objects) from the kernel's maps into noop
    lock: threading.Lock = field(default_factory=threading.Lock)
    _formats: dict[tuple[int, int], events.Records | None] = field(default_factory=dict)

    @property
    def undecodable(self) -> Tally:
        """What the session could not decode: one tally, kept by its user metrics (the
        daemon hands them the rows of exited processes)."""
        return self.users.undecodable

    def on_run(self, run: ringbuf.Run) -> None:
        """A run of ring records of one probe: folded all at once when the probe only
        feeds user metrics and every value was read; else record by record."""
        probe = run.probe
        if probe is None or not 0 <= probe < len(self.program.layouts) \
                or run.length < self.program.layouts[probe].size:
            for record in ringbuf.records(run):
                self.on_record(record)  # each counted as what it is
            return
        try:
            spec = self._records(probe, run.stride)
        except ValueError:  # a stride its layout does not fit: one by one, each counted
            spec = None
        if spec is None:
            for record in ringbuf.records(run):
                self.on_record(record)
            return
        try:
            records = list(spec.struct.iter_unpack(run.data))
            sites = len(self.plan.probes[probe].sites)
            # values read as None, or a site not the probe's: one by one, as events
            bad = set(faulty(records))
            bad.update(i for i, r in enumerate(records) if r[events.SITE] >= sites)
            good = [r for i, r in enumerate(records) if i not in bad]
            self.users.on_records(probe, spec, spec.finish(good))
        except Exception:  # nothing was folded: each record on its own, counted if bad
            for record in ringbuf.records(run):
                self.on_record(record)
            return
        self.seen[probe] = self.seen.get(probe, 0) + len(good)
        for i in sorted(bad):
            self.on_record(ringbuf.record(run, i))

    def _records(self, probe: int, stride: int) -> events.Records | None:
        """How to unpack runs of ``probe`` at once; None: one by one (the preset learns
        names from its events, and a value unreadable at a site decodes as None)."""
        key = (probe, stride)
        if key not in self._formats:
            ok = self.meta is None and not any(
                why for (p, _site), why in self.program.unreadable.items() if p == probe)
            derived = {s: d for (p, s), d in self.program.derived.items() if p == probe}
            self._formats[key] = events.records(self.program.layouts[probe], stride,
                                                derived) if ok else None
        return self._formats[key]

    def on_record(self, data: bytes) -> None:
        """One record: decoded and folded, or counted as undecodable and dropped."""
        name = ""
        if len(data) >= events.HEADER_SIZE:  # read, whether or not it decodes
            index, _site = events.header(data)
            if index < len(self.plan.probes):
                self.seen[index] = self.seen.get(index, 0) + 1
        try:
            event = undecodable.record(self.program, self.plan, data)
            probe = self.plan.probes[event.probe]
            name = probe.name
            if name in self.taps:
                tap = self.taps[name]
                if tap is not None:
                    tap(event)
            elif self.meta is not None:
                self.meta.on_event(event.probe, event)
            else:
                self.users.on_event(probe, event)
        except Exception as exc:  # never into the reader: counted, said once, dropped
            self.undecodable.add(undecodable.why(exc, name, f"record {bytes(data[:64]).hex()}"))

    def rows(self) -> dict[int, list[Row]]:
        """Each aggregated probe's rows, merged over CPUs; a row that cannot be read is
        left out (and counted)."""
        return {pi: self._merged(pi, self.maps.rows(pi)) for pi in self.program.aggregates}

    def _merged(self, pi: int, raw: list[tuple[bytes, list[bytes]]]) -> list[Row]:
        lay = self.program.aggregates[pi]
        out = []
        for k, vs in raw:
            try:
                out.append(aggregate.merge(lay, k, vs))
            except Exception as exc:  # that row only: the scrape goes on
                name = self.plan.probes[pi].name if pi < len(self.plan.probes) else ""
                self.undecodable.row(undecodable.why(exc, name, f"row key {k.hex()}"),
                                     (pi, bytes(k)), 1)
        return out

    def retire(self, pi: int, raw: list[tuple[bytes, list[bytes]]]) -> None:
        """Rows of processes that exited, about to be deleted from the kernel's map:
        their hits stay counted, and a user metric's series go on (the preset's
        meta-metrics of a process end with it). Called with ``lock`` held."""
        rows = self._merged(pi, raw)
        self.retired_hits[pi] = self.retired_hits.get(pi, 0) + sum(r.hits for r in rows)
        if self.meta is None:
            self.users.retire(pi, rows)

    def renew(self, raw: dict[int, list[tuple[bytes, list[bytes]]]]) -> None:
        """Rows of metric objects that newer objects of their series replaced, taken
        from the kernel's map: counted in their series. Called with ``lock`` held."""
        assert self.meta is not None
        rows = {pi: self._merged(pi, r) for pi, r in raw.items()}
        for pi, got in rows.items():
            self.retired_hits[pi] = self.retired_hits.get(pi, 0) + sum(r.hits for r in got)
        self.meta.retire(rows, self.undecodable)


@dataclass
class Health:
    """What the daemon tells the collector outside any one session."""

    reloads_ok: int = 0
    reloads_failed: int = 0
    last_reload_ok: bool = True
    last_reload_time: float = 0.0
    resolve_errors: int = 0
    attach_errors: int = 0
    xmm_helper: bool = False
    bcc: str = "unknown"  # the version of the distribution's BCC in use
    processes: dict[str, int] = field(default_factory=dict)  # per target: running it
    replans: int = 0  # plans made again for what runs (new build, target started)


class Exporter(Collector):
    def __init__(self, health: Health) -> None:
        self.health = health
        self.session: Session | None = None
        # Held for a whole scrape: a session given up (a reload, a new build) is closed
        # only once no scrape reads its maps any more.
        self._lock = threading.Lock()

    def use(self, session: Session | None) -> None:
        """Scrapes read ``session`` from now on; returns once none reads the one before
        (whose maps the caller may then close)."""
        with self._lock:
            self.session = session

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            yield from self._collect(self.session)

    def _collect(self, s: Session | None) -> Iterator[Metric]:
        produced = s.maps.produced() if s is not None else {}
        yield from self._self(s, produced)
        if s is None:
            return
        with s.lock:
            rows = s.rows()
            families = [*_hits(s, rows, produced),
                        *(s.meta.families(rows, s.undecodable) if s.meta else ()),
                        *s.users.families(rows)]
        yield from families
        over = CounterMetricFamily(
            "noop_overflow_updates", "Updates of label sets beyond a metric's max_series, "
            "folded into its overflow series", labels=["metric"])
        series = GaugeMetricFamily("noop_series", "Label sets a metric keeps",
                                   labels=["metric"])
        for name, n in sorted(s.users.overflow_updates().items()):
            over.add_metric([name], n)
        for name, n in sorted(s.users.series().items()):
            series.add_metric([name], n)
        yield from (over, series)

    def _self(self, s: Session | None, produced: dict[int, int]) -> Iterator[Metric]:
        h = self.health
        info = GaugeMetricFamily("noop_build_info", "noop's version; always 1",
                                 labels=["version", "python", "bcc"])
        info.add_metric([__version__, platform.python_version(), h.bcc], 1)
        yield info
        yield GaugeMetricFamily("noop_xmm_helper_available", "1 if the kernel has a BPF "
                                "helper that reads XMM registers in a uprobe",
                                value=int(h.xmm_helper))
        reloads = CounterMetricFamily("noop_reloads", "Spec reloads (SIGHUP), by result",
                                      labels=["result"])
        reloads.add_metric(["success"], h.reloads_ok)
        reloads.add_metric(["failure"], h.reloads_failed)
        yield reloads
        yield GaugeMetricFamily("noop_config_last_reload_successful", "1 if the last "
                                "reload worked (a failed one keeps the probes running)",
                                value=int(h.last_reload_ok))
        yield CounterMetricFamily("noop_resolve_errors", "Specs noop could not resolve "
                                  "against their binaries", value=h.resolve_errors)
        yield CounterMetricFamily("noop_attach_errors", "Loads the kernel refused "
                                  "(compile, load or attach)", value=h.attach_errors)
        up = GaugeMetricFamily("noop_target_up", "1 while a process runs the target's "
                               "build with noop's probes on it, 0 when none does",
                               labels=["target"])
        procs = GaugeMetricFamily("noop_target_processes", "Processes running the target's "
                                  "probed build", labels=["target"])
        for name, n in sorted(h.processes.items()):
            up.add_metric([name], int(n > 0))
            procs.add_metric([name], n)
        yield from (up, procs)
        yield CounterMetricFamily("noop_replans", "Plans made again for what runs: a target "
                                  "that started, a new build, a file changed on disk",
                                  value=h.replans)
        yield _attached(s)
        if s is not None:
            yield from _per_probe(s, produced)


def _attached(s: Session | None) -> Metric:
    attached = GaugeMetricFamily("noop_probes_attached", "uprobes attached, per target",
                                 labels=["target"])
    if s is not None:
        per: dict[str, int] = {t.name: 0 for t in s.plan.targets}
        for a in s.maps.attachments:
            name = s.plan.probes[a.probe].target
            per[name] = per.get(name, 0) + 1
        for name, n in sorted(per.items()):
            attached.add_metric([name], n)
    return attached


def _per_probe(s: Session, produced: dict[int, int]) -> Iterator[Metric]:
    """What each probe of the session's plan did: records, losses, faults, unpaired
    exits, cancelled async calls; what went undecodable; what the probes cost."""
    for metric, doc, values in (
        ("noop_events", "Ring-buffer records noop read, per probe", s.seen),
        ("noop_events_lost", "Records the ring buffer had no room for (counted in the "
         "kernel)", s.maps.lost_by_probe()),
        ("noop_events_produced", "Records the BPF programs made: read + lost + not yet "
         "read (counted in the kernel)", produced),
        ("noop_read_faults", "Hits where reading user memory faulted",
         s.maps.faults()),
        ("noop_exits_unpaired", "Returns an exit probe saw without their call's entry "
         "(calls in progress when noop attached, or more than it keeps at once)",
         s.maps.unpaired()),
        ("noop_async_cancelled", "Calls of an async fn whose future was dropped before "
         "it completed (cancelled, timed out), per exit probe on it",
         s.maps.cancelled()),
    ):
        fam = CounterMetricFamily(metric, doc, labels=["probe"])
        for pi, probe in enumerate(s.plan.probes):
            if metric == "noop_async_cancelled" and not any(
                    site.role == "drop" for site in probe.sites):
                continue
            if metric != "noop_exits_unpaired" or probe.at == "exit":
                fam.add_metric([probe.name], values.get(pi, 0))
        yield fam
    yield s.undecodable.family()
    if s.overhead is not None:
        yield from _overhead(s.overhead)


def _overhead(o: Overhead) -> Iterator[Metric]:
    now = time.monotonic()
    families = []
    if o.costs is not None:
        cost = CounterMetricFamily(
            "noop_probe_overhead_seconds", "CPU time the probe's hits cost its target "
            "processes, estimated: hits x the measured cost of a hit at each site's "
            "class, plus the kernel's run time of its BPF programs", labels=["probe"])
        for p in o.probes:
            cost.add_metric([p.name], p.cost_ns / 1e9)
        families.append(cost)
    enabled = GaugeMetricFamily("noop_probe_enabled", "1 while the probe is attached, 0 "
                                "while it is off for exceeding its budget", labels=["probe"])
    off = CounterMetricFamily("noop_probe_detached_seconds", "Time the probe was off for "
                              "its budget: its metrics undercount what happened meanwhile",
                              labels=["probe"])
    for pi, p in enumerate(o.probes):
        enabled.add_metric([p.name], int(p.enabled))
        off.add_metric([p.name], o.detached_seconds(pi, now))
    yield from (*families, enabled, off)


def _hits(s: Session, rows: dict[int, list[Row]], produced: dict[int, int]
          ) -> Iterator[Metric]:
    fam = CounterMetricFamily("noop_probe_hits", "Hits of a probe: folded into its "
                              "in-kernel aggregate, or else records it made", labels=["probe"])
    kept = GaugeMetricFamily("noop_aggregate_rows", "Rows a probe's in-kernel aggregate "
                             "holds now (rows of processes that exited and of objects "
                             "replaced by newer ones leave it)", labels=["probe"])
    for pi, probe in enumerate(s.plan.probes):
        if pi in rows:  # the rows in the kernel, and those moved out of it
            fam.add_metric([probe.name], sum(r.hits for r in rows[pi])
                           + s.retired_hits.get(pi, 0))
            kept.add_metric([probe.name], len(rows[pi]))
        elif probe.events:
            fam.add_metric([probe.name], produced.get(pi, 0))
    yield from (fam, kept)
