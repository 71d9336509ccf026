"""``noop run``: resolve, load and attach in the foreground, serve /metrics, reload the
spec on SIGHUP (a bad new spec keeps the old probes running), and detach everything on
SIGTERM or SIGINT before exiting 0. Under systemd (``Type=notify``) it says when it is
ready, reloading and stopping, asks for time while it compiles, and feeds the
watchdog from its main loop (``sdnotify``)."""

from __future__ import annotations

import gc
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry

from agent import aggregate, codegen, logs
from agent.errors import NoopError
from agent.exporter import Exporter, Health, Session
from agent.plan import Plan
from agent.presets.meta import GoMeta
from agent.sdnotify import Notifier
from agent.serve import Server
from agent.usermetrics import UserMetrics
from agent.webconfig import WebConfig

if TYPE_CHECKING:
    from agent.load import Loaded

DRAIN_EVERY = 0.1  # seconds between reads of the ring buffer
PRUNE_EVERY = 2.0  # seconds between sweeps for rows of processes that exited


@dataclass
class Options:
    plan: Callable[[], Plan]  # resolves the spec (again on SIGHUP) or the preset
    first: Plan  # what it gave at start, already checked by the command line
    preset: bool
    listen: str
    web: WebConfig | None
    xmm_helper: str | None


def settled() -> None:
    """Once the plan is resolved and loaded: leave what is alive now (the DWARF
    index, the plan, BCC's objects: long-lived) out of the garbage collector's full
    passes, which would otherwise walk all of it and stall the reader past what the
    ring buffer holds at high rates."""
    gc.collect()
    gc.freeze()


def log(message: str, priority: int = logs.INFO) -> None:
    logs.say(message, priority)


class Daemon:
    def __init__(self, opts: Options) -> None:
        from agent import load

        self.opts = opts
        self.health = Health(xmm_helper=opts.xmm_helper is not None, bcc=load.bcc_version())
        self.exporter = Exporter(self.health)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self.exporter)
        self.loaded: Loaded | None = None
        self.signals: list[int] = []
        self.beat = time.monotonic()
        self.notify = Notifier()

    def healthy(self) -> tuple[bool, str]:
        late = time.monotonic() - self.beat
        return (late < 10, "ok" if late < 10 else f"main loop stalled for {late:.0f}s")

    def ready(self) -> tuple[bool, str]:
        s = self.exporter.session
        if s is None:
            return False, "attaching"
        return True, f"{len(s.maps.attachments)} uprobes attached"

    def _load(self, plan: Plan) -> tuple[Session, Loaded]:
        from agent import load

        program = codegen.generate(plan, self.opts.xmm_helper, mode="run")
        if not program.functions:
            raise NoopError("nothing to export: no probe of the spec has metrics",
                            "add metrics: to a probe (see probes.yaml)")
        try:
            loaded = load.Loaded(plan, program)
        except NoopError:
            self.health.attach_errors += 1
            raise
        target = Path(plan.targets[0].binary).name if self.opts.preset else ""
        session = Session(plan, program, loaded, UserMetrics(plan),
                          GoMeta(plan, target) if self.opts.preset else None)
        return session, loaded

    def _plan(self) -> Plan:
        try:
            return self.opts.plan()
        except NoopError:
            self.health.resolve_errors += 1
            raise

    def start(self) -> None:
        plan = self.opts.first
        for p in plan.probes:
            if not p.metrics and p.aggregate is None:
                log(f"probe {p.name} has no metrics: noop run leaves it out", logs.WARNING)
        session, self.loaded = self._load(plan)
        self.exporter.use(session)
        settled()

    def reload(self) -> None:
        self.notify.reloading()
        self.notify.extending()
        try:
            plan = self._plan()
            session, loaded = self._load(plan)
        except NoopError as exc:
            self.health.reloads_failed += 1
            self.health.last_reload_ok = False
            log(f"reload failed, the running probes stay: {str(exc).splitlines()[0]}",
                logs.ERROR)
            self.notify.ready(self._status())
            return
        old = self.loaded
        self.exporter.use(session)
        self.loaded = loaded
        if old is not None:
            old.close()
        gc.unfreeze()  # the old session's objects may go now
        settled()
        self.health.reloads_ok += 1
        self.health.last_reload_ok = True
        self.health.last_reload_time = time.time()
        log(f"reloaded: {len(session.maps.attachments)} uprobes attached")
        self.notify.ready(self._status())

    def _status(self) -> str:
        n = len(self.loaded.attachments) if self.loaded is not None else 0
        return f"{n} uprobes attached"

    def drain(self) -> int:
        """Fold the records in the ring buffer into the session; how many there were."""
        s, loaded = self.exporter.session, self.loaded
        return loaded.read(s.on_run) if s is not None and loaded is not None else 0

    def prune(self) -> None:
        """Forget the rows and names of processes that exited: memory stays bounded."""
        from agent.load import alive

        s, loaded = self.exporter.session, self.loaded
        if s is None or loaded is None or s.meta is None:
            return
        running: dict[int, bool] = {}
        for pi, lay in s.program.aggregates.items():
            gone = []
            for key, _ in loaded.rows(pi):
                values, _bad = aggregate.decode_key(lay, key)
                if values is None:  # the overflow row stays
                    continue
                pid = int(values["$pid"])
                if pid not in running:
                    running[pid] = alive(pid)
                if not running[pid]:
                    gone.append(key)
            loaded.forget(pi, gone)
        dead = {pid for pid, up in running.items() if not up}
        if dead:
            s.meta.forget(dead)

    def run(self) -> int:
        def on_signal(signum: int, _frame: FrameType | None) -> None:
            self.signals.append(signum)

        old = {s: signal.signal(s, on_signal)
               for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
        server = Server(self.opts.listen, self.registry, self.healthy, self.ready,
                        self.opts.web)
        try:
            log(f"serving {server.scheme}://{server.address}/metrics; attaching")
            self.notify.extending()  # resolving and compiling take seconds
            self.start()
            assert self.loaded is not None
            log(f"ready: {self._status()}")
            self.notify.ready(self._status())
            next_prune = time.monotonic() + PRUNE_EVERY
            while True:
                self.beat = time.monotonic()
                self.notify.beat()
                while self.signals:
                    signum = self.signals.pop(0)
                    if signum == signal.SIGHUP:
                        self.reload()
                    else:
                        log(f"{signal.Signals(signum).name}: detaching")
                        self.notify.stopping()
                        return 0
                self.drain()
                # Events wake noop only now and then (codegen.wake_every): and a timer.
                self.loaded.wait(DRAIN_EVERY)
                if time.monotonic() >= next_prune:
                    self.prune()
                    next_prune = time.monotonic() + PRUNE_EVERY
        finally:
            self.notify.stop_extending()
            server.close()
            if self.loaded is not None:
                self.loaded.close()
            for s, handler in old.items():
                signal.signal(s, handler)
