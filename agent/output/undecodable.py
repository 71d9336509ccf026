"""Events and aggregate rows noop cannot decode: each is counted by (probe, reason), said
once per (probe, reason) with what was seen, and dropped. Every decoding path (the
terminal, noop run's events, its scrape-time rows) goes through here, so that nothing
a target sends stops a reader, the exporter or the terminal. Imports no BPF."""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any, Literal

from agent import logs
from agent.kernel import events
from agent.kernel.aggregate import Row
from agent.kernel.events import Event
from agent.kernel.program import Program
from agent.plan.model import Plan, ProbePlan

if TYPE_CHECKING:
    from prometheus_client.core import CounterMetricFamily

# What went wrong, when noop knows; otherwise the reason is the class name of the
# exception the decoder raised (``reason``: a bounded set, the exceptions of noop's own
# code and the standard library's).
Kind = Literal["too_short", "probe_out_of_range", "site_out_of_range", "unexpected_op",
               "missing_value", "bad_value"]
FAMILY = "noop_events_undecodable"
SEEN_MAX = 240  # characters of what was seen, in the one message per (probe, reason)
ROWS_MAX = 4096  # undecodable aggregate rows whose hits are followed across scrapes


class Undecodable(Exception):
    """An event or row noop cannot decode: ``reason`` a ``Kind`` or an exception's class
    name, ``seen`` what it was (for the message), ``probe`` its probe's name ("" when
    it names none)."""

    def __init__(self, reason: Kind, seen: str, probe: str = "") -> None:
        self._set(reason, seen, probe)

    def _set(self, reason: str, seen: str, probe: str) -> None:
        super().__init__(f"{reason}: {seen}")
        self.reason = reason
        self.seen = seen
        self.probe = probe

    @classmethod
    def raised(cls, exc: Exception, seen: str, probe: str) -> Undecodable:
        """What a decoder's exception ``exc`` says: its reason is the class's name."""
        err = cls.__new__(cls)
        err._set(reason(exc), f"{seen}: {exc!r}", probe)
        return err


def why(exc: Exception, probe: str, seen: str) -> Undecodable:
    """``exc``, raised while decoding something of ``probe``, as an Undecodable: its
    own (given the probe if it had none), or one named by the exception's class."""
    if isinstance(exc, Undecodable):
        if not exc.probe:
            exc.probe = probe
        return exc
    return Undecodable.raised(exc, seen, probe)


def reason(exc: Exception) -> str:
    """An exception's reason: its class's name (``struct.error`` outside builtins)."""
    cls = type(exc)
    return cls.__qualname__ if cls.__module__ == "builtins" else \
        f"{cls.__module__.rsplit('.', 1)[-1]}.{cls.__qualname__}"


def shown(event: Event) -> str:
    """What an event held, for a message."""
    return f"site {event.site}, values {event.values!r}"


def value(event: Event, name: str) -> Any:
    """Value ``name`` of the event: None when it was not read (a fault, absent, never
    read at its site); Undecodable when the event has none, or None without saying
    why."""
    if name not in event.values:
        raise Undecodable("missing_value", f"no value {name!r}: {shown(event)}")
    x = event.values[name]
    if x is None and name not in event.faults and name not in event.absent \
            and name not in event.unreadable:
        raise Undecodable("missing_value", f"{name} is None, not said unread: "
                          f"{shown(event)}")
    return x


def row_ident(probe: int, row: Row) -> Hashable:
    """The same in-kernel row at every scrape: its probe and key."""
    return probe, repr(row.key)


def probe_of(plan: Plan, event: Event) -> ProbePlan:
    """The probe an event is of; Undecodable when its probe or site index is not the
    plan's."""
    if not 0 <= event.probe < len(plan.probes):
        raise Undecodable("probe_out_of_range", f"probe index {event.probe} of "
                          f"{len(plan.probes)} probes")
    probe = plan.probes[event.probe]
    if not 0 <= event.site < len(probe.sites):
        raise Undecodable("site_out_of_range", f"site index {event.site} of "
                          f"{len(probe.sites)} sites", probe.name)
    return probe


def record(program: Program, plan: Plan, data: bytes) -> Event:
    """The event of ring record ``data`` (its header and values checked against the
    program and plan); Undecodable when it is not one of theirs."""
    if len(data) < events.HEADER_SIZE:
        raise Undecodable("too_short", f"a record of {len(data)} bytes, shorter than the "
                          f"{events.HEADER_SIZE}-byte header")
    probe, site = events.header(data)
    if probe >= min(len(program.layouts), len(plan.probes)):
        raise Undecodable("probe_out_of_range", f"probe index {probe} of "
                          f"{len(plan.probes)} probes")
    p = plan.probes[probe]
    if site >= len(p.sites):
        raise Undecodable("site_out_of_range", f"site index {site} of {len(p.sites)} "
                          "sites", p.name)
    size = program.layouts[probe].size
    if len(data) < size:
        raise Undecodable("too_short", f"a record of {len(data)} bytes, its layout "
                          f"{size}", p.name)
    try:
        return program.decode(data)
    except Exception as exc:  # a value's decoding failed: counted, never raised
        raise why(exc, p.name, f"a record of site {site} ({bytes(data[:64]).hex()}...)"
                  ) from exc


class Tally:
    """``noop_events_undecodable_total{probe,reason}``: what could not be decoded, said
    once per (probe, reason) through ``say``. Safe to use from several threads."""

    def __init__(self, say: Callable[[str], None] | None = None) -> None:
        self._say = say or (lambda message: logs.say(message, logs.WARNING))
        self._lock = threading.Lock()
        self._counts: dict[tuple[str, str], int] = {}
        self._rows: dict[Hashable, int] = {}  # a bad row's hits counted so far

    def add(self, err: Undecodable, n: int = 1) -> None:
        """``n`` events of one kind that ``err`` says could not be decoded."""
        key = (err.probe, err.reason)
        with self._lock:
            first = key not in self._counts
            self._counts[key] = self._counts.get(key, 0) + n
        if first:
            seen = err.seen if len(err.seen) <= SEEN_MAX else err.seen[:SEEN_MAX] + "..."
            self._say(f"probe {err.probe or '(none)'}: an event noop cannot decode "
                      f"({err.reason}): {seen}; such events are dropped and counted in "
                      f"{FAMILY}_total (said once)")

    def row(self, err: Undecodable, ident: Hashable, hits: int) -> None:
        """An aggregate row (``ident``: the same row at every scrape) that could not be
        decoded at a scrape: its hits are events noop cannot decode, counted once each
        however often it is scraped (at least one per row). Beyond ROWS_MAX such rows,
        new ones are left uncounted (the counter must not count a row twice)."""
        with self._lock:
            before = self._rows.get(ident)
            if before is None and len(self._rows) >= ROWS_MAX:
                return  # too many bad rows to follow: the ones followed still count
            now = max(hits, 1, before or 0)
            self._rows[ident] = now
        if now > (before or 0):
            self.add(err, now - (before or 0))

    def counts(self) -> dict[tuple[str, str], int]:
        with self._lock:
            return dict(self._counts)

    def total(self) -> int:
        with self._lock:
            return sum(self._counts.values())

    def family(self) -> CounterMetricFamily:
        # imported here: the terminal counts through a Tally too, and serves nothing
        from prometheus_client.core import CounterMetricFamily

        fam = CounterMetricFamily(FAMILY, "Events (records, or in-kernel rows' hits) noop "
                                  "could not decode and dropped, by probe and reason",
                                  labels=["probe", "reason"])
        for (probe, cause), n in sorted(self.counts().items()):
            fam.add_metric([probe, cause], n)
        return fam
