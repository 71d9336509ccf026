"""``noop run``: resolve, load and attach in the foreground, serve /metrics, reload the
spec on SIGHUP (a bad new spec keeps the old probes running), and detach everything on
SIGTERM or SIGINT before exiting 0. Under systemd (``Type=notify``) it says when it is
ready, reloading and stopping, asks for time while it compiles, and feeds the
watchdog from its main loop (``sdnotify``)."""

from __future__ import annotations

import contextlib
import ctypes
import gc
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry

from agent import logs
from agent.errors import NoopError
from agent.kernel import budget, codegen
from agent.kernel.kfeatures import attach_cookies
from agent.kernel.program import Program
from agent.live import discover
from agent.output import goseries, processes
from agent.output.exporter import Exporter, Health, Session
from agent.output.loop import Every, Loop
from agent.output.page import Block, Bundle
from agent.output.serve import Server
from agent.output.usermetrics import UserMetrics
from agent.plan.model import Plan
from agent.presets.client_golang.facts import GATHERED, Choice
from agent.presets.meta import PresetMeta
from agent.presets.vmetrics import runtime as vmruntime
from agent.service.filewatch import FileWatch
from agent.service.following import Following, log
from agent.service.sdnotify import Notifier
from agent.service.sweep import PRUNE_EVERY, Sweeper
from agent.service.watch import SCAN_EVERY, Watch

if TYPE_CHECKING:
    from agent.kernel.cost import Costs, RunTimes
    from agent.kernel.events import Event
    from agent.kernel.load import Loaded
    from agent.output.webconfig import WebConfig
    from agent.presets.mirror.core import Mirror



@dataclass
class Options:
    plan: Callable[[], Plan]  # resolves the spec (again on SIGHUP) or the preset
    first: Plan  # what it gave at start, already checked by the command line
    preset: bool
    listen: str
    web: WebConfig | None
    xmm_helper: str | None
    resolved: float = 0.0  # seconds the first plan took, said once the daemon starts
    max_overhead: float = 0.05  # budget of probes the spec sets none for (inf: none)
    window: float = budget.WINDOW  # seconds a probe's cost is held to its budget over
    mirror: bool = False  # the preset: the program's own metrics from its memory too
    choice: Choice = field(default_factory=Choice)  # which of them
    debuginfo: str | None = None  # the target's separate debug file (--debuginfo)


def settled() -> None:
    """Once the plan is resolved and loaded: leave what is alive now (the DWARF
    index, the plan, BCC's objects: long-lived) out of the garbage collector's full
    passes, which would otherwise walk all of it and stall the reader past what the
    ring buffer holds at high rates."""
    gc.collect()
    gc.freeze()
    # And hand the heap resolving freed (DWARF read and dropped) back to the system;
    # without glibc's malloc_trim it stays reserved for the process's own reuse.
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).malloc_trim(0)


class Daemon(Following):
    def __init__(self, opts: Options) -> None:
        from agent.kernel.compile import bcc_version

        self.opts = opts
        self.health = Health(xmm_helper=opts.xmm_helper is not None, bcc=bcc_version())
        self.exporter = Exporter(self.health)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self.exporter)
        self.loaded: Loaded | None = None
        self.plan = opts.first  # the plan in use: its probes are on, its targets watched
        self.started = False
        self.watch = Watch()
        # Probes come off a file being written from another thread (filewatch): the
        # lock keeps that and the main loop's attach and detach apart.
        self.lock = threading.Lock()
        self.written: set[str] = set()  # probed files written since the plan was made
        self.files: FileWatch | None = None
        self.beat = time.monotonic()
        self.notify = Notifier()
        self.costs: Costs | None = None
        self._uncosted = ""  # why costs are not known
        self.run_times: RunTimes | None = None
        self.mirrors: list[Mirror] = []  # the targets' own metrics, from their memory
        self.unmirrored: dict[str, str] = {}  # targets whose are not: why, by name
        self.runtimes = goseries.Runtimes()  # the go_* series of every Go target
        # events some probes send to another part of noop (``Session.taps``), for every
        # session: the preset's registries gathered go to the mirror once it is there
        self.taps: dict[str, Callable[[Event], None] | None] = {GATHERED: None} \
            if opts.preset else {}
        self.sweeper = Sweeper()  # prune's

    def healthy(self) -> tuple[bool, str]:
        late = time.monotonic() - self.beat
        return (late < 10, "ok" if late < 10 else f"main loop stalled for {late:.0f}s")

    def ready(self) -> tuple[bool, str]:
        if not self.started:
            return False, "attaching"
        return True, self._status()  # also with no target on this node: nothing to do

    def _load(self, plan: Plan) -> tuple[Plan, Session | None, Loaded | None]:
        """``plan`` loaded and attached, with its session; when a file turns out not to
        be the build the plan was made from, the plan made again and loaded instead."""
        from agent.kernel import load

        def program_of(plan: Plan) -> Program:
            return codegen.generate(plan, self.opts.xmm_helper, mode="run",
                                    cookies=attach_cookies())

        program = program_of(plan)
        if not program.functions and (plan.waiting or self._memory_only(plan)):
            # every target still to start, or the mirror alone: nothing to load (yet)
            return plan, None, None
        if not program.functions:
            raise NoopError("nothing to export: no probe of the spec has metrics",
                            "add metrics: to a probe (see probes.yaml)")
        progress = logs.Progress(live=False, log=True)
        try:
            (plan, program), loaded = load.settle(
                (plan, program), lambda made: load.Loaded(made[0], made[1], progress.step),
                lambda: (again := self._plan(), program_of(again)),
                lambda why: log(why, logs.WARNING))
        except NoopError:
            self.health.attach_errors += 1
            raise
        finally:
            progress.done()
        target = Path(plan.targets[0].binary).name if self.opts.preset else ""
        users = UserMetrics(plan)
        session = Session(plan, program, loaded, users, PresetMeta(
            plan, target, users.processes, self._served) if self.opts.preset else None,
            taps=self.taps)
        session.overhead = budget.Overhead(plan, program, self.costs, self.run_times,
                                           self.opts.max_overhead, time.monotonic(),
                                           self.opts.window)
        return plan, session, loaded

    def _plan(self) -> Plan:
        try:
            return self.opts.plan()
        except NoopError:
            self.health.resolve_errors += 1
            raise

    def _measure(self) -> None:
        """The kernel's run time of BPF programs: what budgets are measured with, with
        the cost of a hit (``_price``)."""
        from agent.kernel import cost

        self.run_times = cost.RunTimes()
        if not self.run_times.available:
            log(f"{self.run_times.why}: budgets count the traps only, not the "
                "programs' own run time", logs.WARNING)

    def _price(self, session: Session | None) -> None:
        """What a hit costs here (calibrated once per kernel and CPU model, under a
        second): measured once the first probes are on, so that it never delays them;
        budgets are held from then on."""
        from agent.kernel import cost

        try:
            self.costs = cost.costs()
        except NoopError as exc:  # said once the probes are on: a load that fails for
            self._uncosted = exc.message  # the same reason says it alone
        else:
            log(f"a uprobe hit costs {self.costs.describe()} here"
                + (" (measured before)" if self.costs.cached else " (measured now)"))
            if session is not None and session.overhead is not None:
                session.overhead.costs = self.costs

    def _memory_only(self, plan: Plan) -> bool:
        """The mirror alone (--mirror memory): no probe, no BPF program."""
        return self.opts.mirror and not plan.probes and not plan.waiting

    def start(self) -> Session | None:
        """Attach the first plan; its session."""
        plan = self.opts.first
        log(f"resolving took {self.opts.resolved:.2f}s")
        from agent.kernel.attach import attach_kind

        if not self._memory_only(plan):
            kind = attach_kind()
            log(f"uprobes go on through {kind.name}: {kind.why}")
            self._measure()
        for p in plan.probes:
            if not p.metrics and p.aggregate is None and not p.renews and not p.tells:
                log(f"probe {p.name} has no metrics: noop run leaves it out", logs.WARNING)
        self.plan, session, self.loaded = self._load(plan)
        self._refused_at_load()
        self.exporter.use(session)
        self._files_changed()
        self.started = True
        for name, selector in self.plan.waiting:
            log(f"target {name}: waiting for a process running {selector.describe()}")
        settled()
        return session

    def priced(self, session: Session | None) -> None:
        """What a hit costs, once noop is ready (a first start on a machine calibrates:
        half a second): budgets are held from then on."""
        if self._memory_only(self.plan):
            return  # no probe to price
        self._price(session)
        if self._uncosted:
            log(f"{self._uncosted}: probes' costs are not estimated, budgets not enforced",
                logs.WARNING)

    def reload(self, reason: str = "") -> None:
        """Make the plan again and swap the probes: on SIGHUP (the spec may have
        changed), or for ``reason`` (what runs changed: ``watch``). On failure the
        running probes stay."""
        self.notify.reloading()
        self.notify.extending()
        if reason:
            log(f"re-resolving: {reason}")
        with self.lock:
            self.written.clear()  # what is written from now on, the new plan may not know
        try:
            plan, session, loaded = self._load(self._plan())
        except NoopError as exc:
            again = ""
            if reason:  # not again until what runs changes, or after a while
                again = f"; tried again in {self.watch.refuse():.0f} s unless what runs " \
                    "changes first"
            else:
                self.health.reloads_failed += 1
                self.health.last_reload_ok = False
            log(f"{'re-resolving' if reason else 'reload'} failed, the running probes "
                f"stay: {str(exc).splitlines()[0]}{again}", logs.ERROR)
            self.notify.ready(self._status())
            return
        with self.lock:
            old = self.loaded
            self.exporter.use(session)
            self.loaded, self.plan = loaded, plan
            if loaded is not None:
                for path in self.written:  # written while the new plan was being made:
                    loaded.detach_file(path)  # off now, and made again at the next pass
        self._refused_at_load()
        self._files_changed()
        if old is not None:
            old.close()
        gc.unfreeze()  # the old session's objects may go now
        settled()
        if reason:
            self.health.replans += 1
        else:
            self.health.reloads_ok += 1
            self.health.last_reload_ok = True
            self.health.last_reload_time = time.time()
        log(f"{'re-resolved' if reason else 'reloaded'}: {self._status()}")
        self.notify.ready(self._status())

    def _status(self) -> str:
        if self._memory_only(self.plan):
            return "mirroring the program's metrics from its memory, no uprobe"
        n = len(self.loaded.attachments) if self.loaded is not None else 0
        waiting = ", ".join(name for name, _ in self.plan.waiting)
        return f"{n} uprobe{'s' * (n != 1)} attached" + \
            (f"; waiting for {waiting}" if waiting else "")

    def drain(self) -> int:
        """Fold the records in the ring buffer into the session; how many there were."""
        s, loaded = self.exporter.session, self.loaded
        return loaded.read(s.on_run) if s is not None and loaded is not None else 0

    def hold_budgets(self) -> None:
        """Fold the probes' hits into their cost, and take off (or put back) those
        their budget says to."""
        s, loaded = self.exporter.session, self.loaded
        if s is None or loaded is None or s.overhead is None:
            return
        with self.lock:
            if self.loaded is loaded:
                budget.hold(loaded, s.overhead, self.run_times, lambda c: log(
                    c.message, logs.INFO if c.on else logs.WARNING), time.monotonic)

    def prune(self) -> None:
        """Forget the rows and names of processes that exited (``sweep``)."""
        self.sweeper.prune(self.exporter.session, self.loaded, self.drain)

    def run(self) -> int:
        server = Server(self.opts.listen, self.registry, self.healthy, self.ready,
                        self.opts.web, self._parts)
        try:
            with Loop((signal.SIGINT, signal.SIGTERM, signal.SIGHUP)) as loop:
                self.files = FileWatch(self._written)
                log(f"serving {server.scheme}://{server.address}/metrics; attaching")
                self.notify.extending()  # resolving and compiling take seconds
                session = self.start()
                self._mirror()
                log(f"ready: {self._status()}")
                self.notify.ready(self._status())
                self.priced(session)
                loop.run(lambda: self._step(loop), self._wait,
                         [Every(SCAN_EVERY, self.rescan), Every(budget.EVERY, self.hold_budgets),
                          Every(PRUNE_EVERY, self.prune)])
                return 0
        finally:
            self.notify.stop_extending()
            server.close()
            self.close()

    def close(self) -> None:
        """Everything the session holds let go: the file watch, the probes, the run-time
        counters, the mirrors' walks."""
        if self.files is not None:
            self.files.close()
        if self.loaded is not None:
            self.loaded.close()
        if self.run_times is not None:
            self.run_times.close()
        for mirror in self.mirrors:
            mirror.close()

    def _mirror(self) -> None:
        """The preset on a Go or Rust program (``noop top``: on each of its targets): its
        own metrics mirrored from its memory too (``presets.mirror``), for the processes
        running its build at each scrape; why a target's are not, kept in
        ``unmirrored``."""
        if not self.opts.mirror:
            return
        from agent.presets.mirror.core import Mirror, library_of, running

        for i, t in enumerate(self.plan.targets):
            if t.language not in ("go", "rust"):
                continue
            try:
                # labelled as the preset's meta-metrics are: by the binary's name
                mirror = Mirror(Path(t.binary).name, t.binary,
                                find=running(t, self.watch.ids), choice=self.opts.choice,
                                library=library_of(t.binary,
                                                   self.opts.debuginfo if not i else None))
            except NoopError as exc:
                self.unmirrored[t.name] = exc.message
                log(f"the program's own metrics are not mirrored: {exc.message} (--mirror "
                    "both probes every update instead)", logs.WARNING)
                continue
            self.mirrors.append(mirror)
            self.registry.register(mirror)
        self.taps[GATHERED] = self._gathered

    def _gathered(self, event: Event) -> None:
        """A registry a target process gathered: to the mirror of its build (each
        mirror leaves another build's processes alone)."""
        for mirror in self.mirrors:
            mirror.gathered(event)

    def _served(self, pid: int, address: int) -> tuple[str, str] | None:
        """The name and labels the program serves the metric object at ``address``
        under (a wrapping's prefix and labels applied), as the mirror last read it."""
        for mirror in self.mirrors:
            got = mirror.served(pid, address)
            if got is not None:
                return got
        return None

    def _parts(self, mirrored: bool = True) -> list[list[Block] | Bundle]:
        """What /metrics serves after noop's own families: the program's own, mirrored
        (unless not ``mirrored``), then every target process's process_* series and
        every Go target's go_*."""
        parts: list[list[Block] | Bundle] = [m.blocks() for m in self.mirrors] \
            if mirrored else []
        choice = self.opts.choice  # --mirror-include/--mirror-exclude choose these too
        found: list[Block] = []
        try:
            now, own = self._targets(self.mirrors)
            found = processes.blocks([p for p, _g in now])
            found += vmruntime.blocks(own, self.runtimes)
            found += goseries.blocks([g for _p, g in now if g is not None], self.runtimes,
                                     frozenset(pid for t in own for pid in t.pids))
        except (OSError, NoopError) as exc:  # /proc unreadable: the rest is served
            log(f"the targets' process and runtime series are not served: {exc}",
                logs.WARNING)
        return [*parts, [b for b in found if choice.wants(b.name.decode())]]

    def _targets(self, mirrors: list[Mirror]
                 ) -> tuple[list[tuple[processes.Target, goseries.Target | None]],
                            list[vmruntime.Target]]:
        """The targets' processes now: the mirror's own (with what their registries
        hold), the others' from one scan of /proc; a Go target's twice, for its
        process_* and its go_* series. Apart: those of a library that writes its own
        set of both (VictoriaMetrics/metrics)."""
        plan = self.plan
        out: list[tuple[processes.Target, goseries.Target | None]] = []
        own: list[vmruntime.Target] = []
        scan: list[discover.Process] | None = None
        for t in plan.targets:
            go = t.language == "go"
            mirror = next((m for m in mirrors if t.binary == m.path), None)
            if mirror is not None:
                pids = mirror.pids()
                theirs = vmruntime.target_of(mirror.library, mirror.target, t.binary, pids)
                if theirs is not None:
                    own.append(theirs)
                    continue
                out.append((processes.Target(mirror.target, pids, mirror.collectors),
                            goseries.Target(mirror.target, t.binary, pids,
                                            mirror.go_collectors) if go else None))
                continue
            if t.selector is None:
                continue
            scan = scan if scan is not None else list(discover.processes())
            ids = self.watch.ids
            pids = [p.pid for p in discover.find(t.selector, t.pid, ids=ids, among=scan)
                    if ids.of(p) == t.build_id]
            out.append((processes.Target(t.name, pids),
                        goseries.Target(t.name, t.binary, pids) if go else None))
        return out, own

    def _step(self, loop: Loop) -> str | None:
        """The watchdog fed, the signals answered (SIGHUP: reload; the others: stop),
        the ring buffer read."""
        self.beat = time.monotonic()
        self.notify.beat()
        while loop.caught:
            signum = loop.caught.pop(0)
            if signum == signal.SIGHUP:
                self.reload()
            else:
                log(f"{signum.name}: detaching")
                self.notify.stopping()
                return signum.name
        self.drain()
        if self.sweeper.pressed(self.exporter.session):
            self.prune()  # metric objects made fast: their map is swept before it fills
        return None

    def _wait(self, seconds: float) -> None:
        # Events wake noop only now and then (bodies.wake_every): and a timer.
        if self.loaded is not None:
            self.loaded.wait(seconds)
        else:
            time.sleep(seconds)
