"""The arms of ``noop bench``: each a way of running the workload with something
attached at the site (nothing, an empty BPF program, noop's counters, the preset, the
mirror, bpftrace), as a context manager that attaches on entry, returns once it is live
and detaches on exit."""

from __future__ import annotations

import json
import os
import re
import selectors
import shutil
import signal
import statistics
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

from agent.errors import NoopError, NotFound
from agent.plan.model import Plan, TargetPlan
from agent.tools.workloads import FLOAT_PARAMS, Site

READY = "noop-bench-ready"


@dataclass(slots=True)
class Attached:
    """What an arm yields while it is attached. The arm sets ``hits`` as it detaches
    (the hits it saw at the site); None: this arm does not count. Mutable on purpose:
    the count only exists once the workload has finished."""

    hits: int | None = None
    notes: dict[str, float] = field(default_factory=dict)  # what else the arm measured
    where: str = ""  # the arm's own site, when it is not the bench's


Attach = Callable[[Site], AbstractContextManager[Attached]]


@dataclass(frozen=True, slots=True)
class Arm:
    """One way of running the workload: ``attach(site)`` is a context manager that
    attaches something at the site on entry (returning once it is live) and detaches on
    exit, filling in the ``Attached`` it yielded."""

    name: str
    attach: Attach
    about: str = ""


@contextmanager
def _nothing(_site: Site) -> Iterator[Attached]:
    yield Attached()


def _bpftrace_program(site: Site, read: bool = False) -> str:
    """``@[probe] = count()`` at the site; ``read``: the hits counted per receiver
    (rax: Go's first argument register, at a function's entry) and the word it points to
    read and kept per receiver: as much as the preset reads of a metric object."""
    if not re.fullmatch(r"[\w./+-]+", site.binary):
        raise NoopError(f"bpftrace cannot name the path {site.binary!r}",
                        "copy the workload to a path of letters, digits and ./_-+")
    body = '@[reg("ax")] = count(); @word[reg("ax")] = *(uint64 *)reg("ax");' if read \
        else "@[probe] = count();"
    return (f'BEGIN {{ printf("{READY}\\n") }} '
            f"uprobe:{site.binary}:{site.address:#x} {{ {body} }}")


def _lines(data: bytes) -> list[dict[str, Any]]:
    out = []
    for line in data.decode(errors="replace").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            out.append(record)
    return out


def _why(stderr: bytes) -> str:
    lines = [x for x in stderr.decode(errors="replace").splitlines()
             if x.strip() and "RLIMIT_MEMLOCK" not in x]
    return lines[-1] if lines else "no message"


def _wait_ready(proc: subprocess.Popen[bytes], timeout: float, hint: str) -> None:
    """Return once bpftrace has attached its probes and run BEGIN (which it runs after)."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    seen = b""
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise NoopError(f"bpftrace did not attach within {timeout:.0f} s",
                                "is another tracer holding the machine?")
            if not sel.select(left):
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                _, err = proc.communicate(timeout=10)
                raise NoopError(f"bpftrace failed: {_why(err)}", hint)
            seen += chunk
            records = _lines(seen[:seen.rfind(b"\n") + 1])
            attached = any(r.get("type") == "attached_probes" for r in records)
            if attached and any(r.get("data") == READY + "\n" for r in records):
                return


@contextmanager
def _bpftrace(site: Site, read: bool = False) -> Iterator[Attached]:
    tool = shutil.which("bpftrace")
    if tool is None:
        raise NoopError("bpftrace not found", "apt-get install bpftrace")
    # Inside a function, bpftrace wants --unsafe (and a build that allows it).
    command = [tool, "-f", "json", *(() if site.entry else ("--unsafe",)),
               "-e", _bpftrace_program(site, read)]
    proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, bufsize=0)
    attached = Attached()
    try:
        _wait_ready(proc, 60, "run as root, with tracefs mounted" if site.entry else
                    "this bpftrace may probe only a function's first instruction")
        yield attached
        out, err = _interrupt(proc)
        if proc.returncode != 0:
            raise NoopError(f"bpftrace exited {proc.returncode}: {_why(err)}")
        maps = [r["data"] for r in _lines(out) if r.get("type") == "map"]
        attached.hits = sum(int(n) for m in maps for name, counts in m.items()
                            if name == "@" for n in counts.values())
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _interrupt(proc: subprocess.Popen[bytes], tries: int = 3, wait: float = 20
               ) -> tuple[bytes, bytes]:
    """SIGINT bpftrace and read what it prints as it exits. A SIGINT it has not acted
    on within ``wait`` seconds is sent again (seen once: bpftrace 0.17 sat idle after
    the first); one that never works is an error, not a hang."""
    for _ in range(tries):
        proc.send_signal(signal.SIGINT)
        try:
            return proc.communicate(timeout=wait)
        except subprocess.TimeoutExpired:
            continue  # communicate() keeps what was read; asking again loses nothing
    raise NoopError(f"bpftrace did not exit after {tries} SIGINTs in {tries * wait:.0f} s",
                    "is the machine overloaded? run the bench again")


@contextmanager
def _empty(site: Site) -> Iterator[Attached]:
    from agent.kernel import objects
    from agent.kernel.cost import EMPTY_C

    with objects.Bare(EMPTY_C, site.binary, site.file_offset, "noop_bench_empty", site.proof):
        yield Attached()


def bench_plan(site: Site, aggregate: str, first: bool = False, value: str | None = None
               ) -> Plan:
    """noop's plan for a counter of calls (and with ``value``, a counter summing that
    parameter): the spec a user would write, resolved. Its site is noop's own choice,
    unless the bench's address was asked for or ``first`` (the site every other arm
    probes: by default the first instruction)."""
    from agent.config import probes as spec
    from agent.kernel.kfeatures import xmm_helper_available
    from agent.plan import resolve

    probe_spec: dict[str, Any] = {"name": "bench", "function": site.function, "metrics": [
        {"name": "bench_calls_total", "type": "counter", "aggregate": aggregate,
         "help": "calls seen at the bench's site"}]}
    if value is not None:
        probe_spec["values"] = {"v": value}
        probe_spec["metrics"].append({"name": "bench_value_total", "type": "counter",
                                      "value": "v", "help": f"the sum of {value}"})
    text = json.dumps({"version": 1, "targets": {"bench": {"binary": site.binary}},
                       "probes": [probe_spec]})
    plan = resolve.resolve(spec.parse(text, "<bench>"), xmm_helper_available() is not None)
    (probe,) = plan.probes
    chosen = probe.sites[0]
    if chosen.address == site.address or not (first or site.fixed):
        return plan
    moved = replace(chosen, address=site.address, file_offset=site.file_offset,
                    why="the bench's site", skip_flags=0, handling="", proof=site.proof)
    return replace(plan, probes=(replace(probe, sites=(moved,)),))


def _where(site: Site, plan: Plan) -> str:
    """Where noop's arm probed, when that is not the bench's site."""
    chosen = plan.probes[0].sites
    if [s.address for s in chosen] == [site.address]:
        return ""
    how = "stack-check branch" if chosen[0].why.startswith("the stack check's") \
        else "instruction"
    more = f" and {len(chosen) - 1} more" if len(chosen) > 1 else ""
    return f"{chosen[0].address:#x} ({chosen[0].handling} {how}){more}"


@contextmanager
def _noop(site: Site, aggregate: str, first: bool = False, value: bool = False,
          way: str | None = None) -> Iterator[Attached]:
    """noop's counter of calls, aggregated as ``aggregate`` says; with ``value``, beside
    a counter summing the method's float argument (in noop, from every hit's record),
    read where noop reads it (its fallback sites without an XMM helper); ``way``: how
    its uprobe goes on (perf, multi), else as noop run chooses."""
    from agent.kernel import attach, load

    if way is not None:
        with attach.attaching(way), _noop(site, aggregate, first, value) as attached:
            yield attached
        return
    from agent.kernel import aggregate as agg
    from agent.kernel import codegen
    from agent.kernel.kfeatures import attach_cookies, xmm_helper_available

    param = FLOAT_PARAMS.get(site.function) if value else None
    if value and param is None:
        raise NoopError(f"noop-value: {site.function} has no float argument",
                        "use --op counter.Add, gauge.Add, gauge.Set or histogram.Observe")
    plan = bench_plan(site, aggregate, first, param)
    program = codegen.generate(plan, xmm_helper_available(), mode="run",
                               cookies=attach_cookies())
    attached = Attached(where=_where(site, plan))
    with load.Loaded(plan, program) as loaded:
        def kernel_hits() -> int:
            lay = program.aggregates[0]
            return sum(agg.merge(lay, k, vs).hits for k, vs in loaded.rows(0))

        if aggregate == "kernel" and param is None:
            yield attached
            attached.hits = kernel_hits()
            return
        with _Reader(plan, program, loaded) as reader:
            yield attached
        read, lost = reader.session.seen.get(0, 0), loaded.lost_by_probe()[0]
        attached.notes.update({"read": read, "lost": lost, "cpu_s": reader.cpu})
        if param is not None:  # the calls are counted in the kernel, the sum in noop
            attached.hits = kernel_hits()
            attached.notes["value"] = reader.counted("bench_value")
            return
        attached.hits = loaded.produced()[0]
        attached.notes["counted"] = reader.counted()
        if read + lost != attached.hits:
            raise NoopError(f"ring buffer: {read} read + {lost} lost != {attached.hits} made")


class _Reader:
    """Drains the ring buffer in a thread while the workload runs, the way noop run
    does, and keeps the CPU time that took."""

    def __init__(self, plan: Plan, program: Any, loaded: Any) -> None:
        from agent.output.exporter import Session
        from agent.output.usermetrics import UserMetrics

        self.session = Session(plan, program, loaded, UserMetrics(plan), None)
        self.loaded = loaded
        self.cpu = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="noop-bench-reader",
                                        daemon=True)

    def _read(self) -> int:
        t0 = time.thread_time()
        n = int(self.loaded.read(self.session.on_run))
        self.cpu += time.thread_time() - t0
        return n

    def _loop(self) -> None:
        from agent.output.loop import DRAIN_EVERY

        while not self._stop.is_set():
            self._read()
            self.loaded.wait(DRAIN_EVERY)
        self._read()

    def counted(self, name: str = "bench_calls") -> float:
        """The counter ``name``'s value as noop would export it."""
        return float(sum(s.value for family in self.session.users.families({})
                         if family.name == name for s in family.samples
                         if s.name.endswith("_total")))

    def __enter__(self) -> _Reader:
        from agent.service.daemon import settled

        settled()  # as noop run does once attached
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


@contextmanager
def _preset(site: Site, default: bool = False) -> Iterator[Attached]:
    """The whole client_golang preset as ``noop run --binary --mirror both`` loads it,
    on the workload: what a client_golang update costs under it. With ``default``,
    ``noop run --binary``'s default (``--mirror auto``): only the probe where the program
    gathers a registry, none on any update path, beside the mirror scraped as
    ``_mirror`` scrapes it."""
    from agent.kernel import aggregate as agg
    from agent.kernel import codegen, load
    from agent.kernel.kfeatures import attach_cookies, xmm_helper_available
    from agent.presets import plans as presets

    plan = presets.plan(site.binary, aggregate=True)
    if default:
        plan = presets.finders_only(plan)
        if not plan.probes:  # nothing gathers a registry out of line: no BPF, as noop run
            attached = Attached(where="no probe (the default: no gather to probe)")
            with _scraped(site, attached, plan.targets[0]):
                yield attached
            return
    program = codegen.generate(plan, xmm_helper_available(), mode="run",
                               cookies=attach_cookies())
    op = site.function.rpartition("(*")[2].replace(").", ".")  # (*counter).Add: counter.Add
    mine = [s for p in plan.probes for s in p.sites if s.tag == op]
    where = ", ".join(f"{s.address:#x} ({s.handling or 'single-stepped'})" for s in mine[:2])
    more = f" and {len(mine) - 2} more" if len(mine) > 2 else ""
    how = "the default, --mirror auto" if default else "preset"
    attached = Attached(where=f"{where or 'none of its sites for this op'}{more} ({how})")
    with load.Loaded(plan, program) as loaded, \
            (_scraped(site, attached, plan.targets[0]) if default else nullcontext()):
        yield attached
        attached.hits = sum(agg.merge(program.aggregates[pi], k, vs).hits
                            for pi in program.aggregates for k, vs in loaded.rows(pi))


@contextmanager
def _mirror(site: Site) -> Iterator[Attached]:
    """``noop run --binary --mirror memory`` on the workload: no probe, the program's
    metrics read from its memory as a scrape every half second reads them (note
    ``render_ms``: the median scrape's time)."""
    from agent.presets import plans as presets

    plan = presets.memory_only(presets.plan(site.binary, aggregate=True))
    assert not plan.probes
    attached = Attached(where="no probe (mirror)")
    with _scraped(site, attached, plan.targets[0]):
        yield attached  # hits: None, its counts are the program's own, from memory


@contextmanager
def _scraped(site: Site, attached: Attached, target: TargetPlan) -> Iterator[None]:
    """The program's metrics mirrored from its memory (the processes running the
    preset plan's ``target``), scraped every half second while the workload runs; the
    median scrape's time in ``attached.notes["render_ms"]``."""
    from agent.presets.mirror.core import Mirror, running

    mirror = Mirror(Path(site.binary).name, site.binary, find=running(target))
    stop = threading.Event()
    times: list[float] = []

    def scrape() -> None:
        while not stop.wait(0.5):
            t0 = time.perf_counter()
            mirror.render()
            times.append(time.perf_counter() - t0)

    scraper = threading.Thread(target=scrape, name="noop-bench-scrape", daemon=True)
    try:
        scraper.start()
        yield
    finally:
        stop.set()
        if scraper.ident is not None:
            scraper.join()
        mirror.close()
    if times:
        attached.notes["render_ms"] = 1000 * statistics.median(times)


NONE = Arm("none", _nothing, "nothing attached")
EMPTY = Arm("empty", _empty, "a BPF program that returns at once, at the same site")
NOOP_KERNEL = Arm("noop-kernel", partial(_noop, aggregate="kernel"),
                  "noop's counter of calls, aggregated in the kernel")
NOOP_RINGBUF = Arm("noop-ringbuf", partial(_noop, aggregate="events"),
                   "noop's counter of calls, every hit a ring-buffer record read by noop")
NOOP_VALUE = Arm("noop-value", partial(_noop, aggregate="kernel", value=True),
                 "noop-kernel's counter, and the sum of the float argument (in noop)")
NOOP_PERF = Arm("noop-perf", partial(_noop, aggregate="kernel", way="perf"),
                "noop-kernel's counter through a perf-event uprobe (before Linux 6.6)")
NOOP_MULTI = Arm("noop-multi", partial(_noop, aggregate="kernel", way="multi"),
                 "noop-kernel's counter through a uprobe_multi link (Linux 6.6 and later)")
NOOP_FIRST = Arm("noop-first", partial(_noop, aggregate="kernel", first=True),
                 "noop-kernel's program at the bench's site (the first instruction)")
BPFTRACE = Arm("bpftrace", _bpftrace, "bpftrace: @[probe] = count() at the site")
BPFTRACE_READ = Arm("bpftrace-read", partial(_bpftrace, read=True), "bpftrace reading "
                    "as much as the preset: hits counted per receiver, a word of it kept "
                    "per receiver, at the site")
PRESET = Arm("preset", _preset, "the client_golang preset, as noop run --binary --mirror "
             "both loads it: every update probed")
DEFAULT = Arm("default", partial(_preset, default=True), "noop run --binary (--mirror "
              "auto, the default): every value read from memory, the one probe where the "
              "program gathers a registry")
MIRROR = Arm("mirror", _mirror, "noop run --binary --mirror memory: no probe, the "
             "program's metrics read from its memory")
ARMS: dict[str, Arm] = {a.name: a for a in (NONE, EMPTY, NOOP_FIRST, NOOP_KERNEL,
                                            NOOP_MULTI, NOOP_PERF, NOOP_RINGBUF, NOOP_VALUE,
                                            PRESET, DEFAULT, MIRROR, BPFTRACE,
                                            BPFTRACE_READ)}


def arm(name: str) -> Arm:
    """The arm called ``name``."""
    try:
        return ARMS[name]
    except KeyError:
        raise NotFound("arm", name, ARMS) from None
