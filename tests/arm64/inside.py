"""What the emulated arm64 machine runs as its init (tests/arm64-machine): noop's checks
on arm64, from the committed tree (/noop), its pinned dependencies' arm64 wheels
unpacked on the host (/site, beside Debian's BCC) and the programs cross-built on the
host (/programs). Each check prints one
line, ``noop-inside: ok NAME`` or ``noop-inside: FAIL NAME: WHY``, and the last line is
``noop-inside: result N passed, N failed``. Standard library only: the guest has no
pytest.

Each ``noop`` start costs about a minute under emulation, so the builds share the checks
out (``EXAMPLE``), and the builds' checks run two at a time, one a CPU. A ``noop run``
of a spec with an entry probe (the tick's argument, its goroutine's id), an exit probe
(the call's duration) and, with DWARF, a line probe in a loop, on Go 1.19's and the
newest's DWARF builds and the newest's stripped one: attached to the file before the
program starts, then the program makes a known number of ticks and serves its own page;
``$caller`` at the entry, in a leaf and after a prologue saved the link register. Every
count must be the program's (ticks, items), the last tick's argument the one the
program's own gauge was set from, and noop must leave no uprobe behind when it stops.
``noop --binary --json``'s lines on a DWARF and a stripped build: every update seen once
(a counter's increments sum to its value). ``noop run --binary``'s mirror of both
stripped builds (which finds the registry only main holds by the probe where the program
gathers it) and of tests/programs/go/mirror (DefaultRegisterer, read with no probe), and
of the Rust example (the prometheus crate, by Debian's rustc and arm64 standard library;
its noop --binary lines too, as the Go builds', and those of its build for a CPU with
the Large System Extensions, its atomics inlined): every series the program serves is
noop's with its value, and the Go and process collectors' families are served. The
exactly-once check: a plain function called 20,000 times with Go's asynchronous
preemption on, then off (examples/bench/go-loop), counted by an entry probe, beside
bpftrace on the newest Go; the budget taking a probe off a tight loop. And a C program
by Debian's cross compiler (entry, exit, a line).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import math
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

NOOP = Path("/noop")
PROGRAMS = Path("/programs")
PY = sys.executable  # Debian's, whose dist-packages hold BCC
SITE = "/site"  # noop's dependencies
# noop's cache: filled on the host (``prewarm``) but for COLD's spec, which the guest
# resolves as a start with an empty cache does
CACHE = Path("/noop-cache")
COLD = Path("/tmp/go1.19.yaml")
results: list[tuple[str, str]] = []


_SAID = threading.Lock()  # the builds' checks run two at a time (``main``)


def say(line: str) -> None:
    with _SAID:
        print(f"noop-inside: {line}", flush=True)


def check(name: str, ok: bool, why: str = "") -> None:
    with _SAID:
        results.append((name, "" if ok else why or "failed"))
    say(f"ok {name}" if ok else f"FAIL {name}: {why}")


def noop(*args: str, **kw: object) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": f"{NOOP}:{SITE}", "NOOP_CACHE_DIR": str(CACHE),
           "PYTHONFAULTHANDLER": "1"}  # a fatal signal says where
    return subprocess.Popen([PY, "-m", "agent", *args], cwd=NOOP, env=env, text=True,
                            **kw)  # type: ignore[call-overload]


def ready(proc: subprocess.Popen[str], seconds: float) -> tuple[str, list[str]]:
    """Wait for ``noop run``'s "ready: N uprobes attached" (or "ready: mirroring",
    with no uprobe); its address and log."""
    assert proc.stderr is not None
    log: list[str] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        line = proc.stderr.readline()
        if not line:
            break
        log.append(line)
        if re.search(r"ready: (\d+ uprobes? attached|mirroring)", line):
            addr = next(m.group(1) for x in log if (m := re.search(r"//(\S+)/metrics", x)))
            # the rest of its log read on (a full pipe would stop noop), kept in ``log``
            threading.Thread(target=log.extend, args=(iter(proc.stderr.readline, ""),),
                             daemon=True).start()
            return addr, log
    if proc.poll() is None:
        proc.kill()
    rest = proc.stderr.read()
    raise RuntimeError(f"noop run never attached (exit {proc.wait()}): "
                       + "".join(log[-10:]) + rest[-2000:])


def scrape(addr: str) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://{addr}/metrics", timeout=30).read().decode()
    out: dict[str, float] = {}
    for line in text.split("\n"):  # not splitlines: a label value may hold a \r
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[re.sub(r',?(pid|target)="[^"]*"', "", name).replace("{}", "")] = float(value)
    return out


def left_attached(binary: str) -> list[str]:
    events = Path("/sys/kernel/tracing/uprobe_events")
    text = events.read_text() if events.exists() else ""
    return [x for x in text.splitlines() if binary in x]


def stopped(agent: subprocess.Popen[str], tag: str, binary: str, log: list[str],
            how: str = "") -> None:
    """SIGTERM to ``noop run``, then its checks: it exits 0 and leaves no uprobe on
    ``binary`` (``how``: the run's kind, in their names); its log's end said when any
    check so far failed."""
    agent.send_signal(signal.SIGTERM)
    try:
        agent.wait(60)
    except subprocess.TimeoutExpired:
        agent.kill()
    check(f"{tag}: noop exits 0{how}", agent.returncode == 0, f"exit {agent.returncode}")
    if any(why for _n, why in results):
        for line in log[-15:]:
            say(f"{tag}: noop said: {line.rstrip()}")
    check(f"{tag}: no uprobe left{how}", not left_attached(binary),
          str(left_attached(binary)))


SPEC = """version: 1
targets:
  example: {{binary: {binary}}}
probes:
  - name: tick
    function: main.(*metrics).tick
    values: {{n: {n}, g: $goid, who: $caller}}
    metrics:
      - {{name: arm_ticks_total, type: counter}}
      - {{name: arm_last_n, type: gauge, value: n}}
      - {{name: arm_ticks_by_caller_total, type: counter, labels: {{caller: who}}}}
  - name: tick_done
    function: main.(*metrics).tick
    at: exit
    values: {{took: $duration}}
    metrics:
      - {{name: arm_ticks_done_total, type: counter}}
      - {{name: arm_tick_seconds, type: histogram, value: took, buckets: [1e3, 1e6, 1e9]}}
"""
LINE = """  - name: items
    line: main.go:112
    values: {total: total, who: $caller}
    metrics:
      - {name: arm_items_total, type: counter}
      - {name: arm_items_by_caller_total, type: counter, labels: {caller: who}}
  - name: inside
    line: main.go:122
    values: {who: $caller}
    metrics:
      - {name: arm_inside_by_caller_total, type: counter, labels: {caller: who}}
"""
TICKS = 40


def _example(build: Path, ticks: int) -> tuple[str, list[str], int]:
    """The example in ``build`` (Go's or Rust's), its command line for ``ticks`` ticks,
    and its fake_counter's value after them (Rust's: two threads, each making every
    update of a tick)."""
    rust = (build / "rust-prometheus").exists()
    binary = str(build / ("rust-prometheus" if rust else "go-prometheus"))
    return binary, [binary, "-listen", "127.0.0.1:0", "-ticks", str(ticks), "-period",
                    "20ms", "-linger", "600s", *(("-threads", "2") if rust else ())], \
        ticks * (2 if rust else 1)


def _counted_to(addr: str, want: int, tag: str) -> None:
    """Until the program at ``addr`` says its fake_counter is ``want`` (its ticks done),
    a scrape that fails said and tried again."""
    for _ in range(240):
        try:
            if scrape(addr).get("fake_counter") == want:
                return
        except OSError as exc:
            say(f"{tag}: a scrape of the program failed: {exc}")
        time.sleep(0.5)


def example(build: Path) -> None:
    binary = str(build / "go-prometheus")
    tag = build.name
    stripped = tag.endswith("stripped")
    spec = written(build, "example")
    started = time.monotonic()
    agent = noop("run", "--config", str(spec), "--listen", "127.0.0.1:0",
                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    log: list[str] = []
    try:
        addr, log = ready(agent, 600)
        say(f"{tag}: attached in {time.monotonic() - started:.0f} s")
        prog = subprocess.Popen([binary, "-listen", "127.0.0.1:0", "-ticks", str(TICKS),
                                 "-period", "20ms", "-linger", "600s"],
                                stderr=subprocess.PIPE, text=True)
        assert prog.stderr is not None
        own_addr = re.search(r"http://(\S+)/metrics", prog.stderr.readline())
        assert own_addr is not None
        try:
            own: dict[str, float] = {}
            got: dict[str, float] = {}
            for _ in range(300):
                try:
                    own, got = scrape(own_addr.group(1)), scrape(addr)
                except OSError as exc:  # said, and tried again
                    say(f"{tag}: a scrape failed: {exc}")
                    time.sleep(1)
                    continue
                if own.get("fake_counter") == TICKS and \
                        got.get("arm_ticks_done_total") == TICKS:
                    break
                time.sleep(0.5)
            check(f"{tag}: entry probe counts each tick", got.get("arm_ticks_total") == TICKS,
                  f"{got.get('arm_ticks_total')} for {TICKS}")
            check(f"{tag}: exit probe counts each return",
                  got.get("arm_ticks_done_total") == TICKS,
                  f"{got.get('arm_ticks_done_total')} for {TICKS}")
            check(f"{tag}: each call's duration paired", got.get("arm_tick_seconds_count")
                  == TICKS, str(got.get("arm_tick_seconds_count")))
            # the program sets its gauge to 1.5 times the tick's argument
            want_n = own.get("fake_set_gauge", -1) / 1.5
            check(f"{tag}: the argument in x1 is the program's", got.get("arm_last_n") == want_n,
                  f"{got.get('arm_last_n')}, the program's {want_n}")
            # $caller: tick is called by main, its x30 read at the entry
            by = series(addr)
            callers = {k[1]: v for k, v in by.items() if k[0] == "arm_ticks_by_caller_total"}
            check(f"{tag}: $caller at the entry (x30)",
                  callers == {(("caller", "main.main"),): TICKS}, str(callers))
            if not stripped:  # two items an order, summed in placeOrder's loop
                check(f"{tag}: line probe counts each pass", got.get("arm_items_total")
                      == 2 * TICKS, f"{got.get('arm_items_total')} for {2 * TICKS}")
                callers = {k[1]: v for k, v in by.items()
                           if k[0] == "arm_items_by_caller_total"}
                check(f"{tag}: $caller at a line of a leaf (x30)", callers ==
                      {(("caller", "main.(*metrics).tick"),): 2 * TICKS}, str(callers))
                callers = {k[1]: v for k, v in by.items()
                           if k[0] == "arm_inside_by_caller_total"}
                check(f"{tag}: $caller after the prologue (the saved slot)", callers ==
                      {(("caller", "main.main"),): TICKS}, str(callers))
        finally:
            prog.terminate()
            prog.wait()
    finally:
        stopped(agent, tag, binary, log)


Series = dict[tuple[str, tuple[tuple[str, str], ...]], float]
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def series(addr: str) -> Series:
    """A page's samples by name and sorted labels, noop's own (target, pid) left out."""
    text = urllib.request.urlopen(f"http://{addr}/metrics", timeout=30).read().decode()
    out: Series = {}
    for line in text.split("\n"):  # not splitlines: a label value may hold a \r
        if not line or line.startswith("#"):
            continue
        head, _, value = line.rpartition(" ")
        name, _, labels = head.partition("{")
        pairs = tuple(sorted((k, v) for k, v in _LABEL.findall(labels)
                             if k not in ("target", "pid")))
        out[(name, pairs)] = float(value)
    return out


def _family(name: str) -> str:
    return re.sub(r"_(bucket|count|sum|total|created)$", "", name)


def _mirror(tag: str, binary: str, own_addr: str, mode: str, skip: tuple[str, ...],
            until: str) -> None:
    """``noop run --binary`` (``--mirror mode``) on a running program whose own metrics
    no longer change (but those named in ``skip``): every series the program serves is
    noop's, with the program's value; noop's mirror adds none. The Go and process
    collectors' families: each is noop's, ``go_info`` equal, the counters that only
    grow between noop's reads before and after the program's."""
    agent = noop("run", "--binary", binary, "--mirror", mode, "--listen", "127.0.0.1:0",
                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    log: list[str] = []
    try:
        addr, log = ready(agent, 600)
        before: Series = {}
        for _ in range(120):  # the program gathers its registry (a scrape): noop finds it
            try:
                series(own_addr)
                before = series(addr)
            except OSError as exc:  # a first read of its memory, emulated: said, again
                say(f"{tag}: a scrape failed: {exc}")
                continue
            if any(k[0] == until for k in before):
                break
            time.sleep(0.5)
        own, after = series(own_addr), series(addr)
        live = ("go_", "process_", *skip)
        fixed = {k: v for k, v in own.items() if not k[0].startswith(live)}
        check(f"{tag}: the mirror serves the program's own values ({mode})",
              bool(fixed) and {k: after.get(k) for k in fixed} == fixed,
              str({k: (v, after.get(k)) for k, v in fixed.items() if after.get(k) != v})[:600])
        mine = {k for k in after if not k[0].startswith(("noop_", *live))}
        check(f"{tag}: the mirror adds no series ({mode})", mine == set(fixed),
              str(sorted(mine - set(fixed)))[:600])
        runtime = {_family(k[0]) for k in own if k[0].startswith(("go_", "process_"))}
        if runtime:
            served = {_family(k[0]) for k in after}
            check(f"{tag}: the Go and process collectors' families", runtime <= served,
                  str(sorted(runtime - served)))
            info = {k: v for k, v in own.items() if k[0] == "go_info"}
            check(f"{tag}: go_info", {k: after.get(k) for k in info} == info,
                  f"{info} noop {[k for k in after if k[0] == 'go_info']}")
            growing = [k for k in own if k[0] in (
                "go_memstats_alloc_bytes_total", "go_memstats_mallocs_total",
                "go_memstats_frees_total", "go_gc_duration_seconds_count",
                "process_cpu_seconds_total")]
            off = [f"{k[0]}: {before.get(k)} {own[k]} {after.get(k)}" for k in growing
                   if not before.get(k, math.inf) <= own[k] <= after.get(k, -math.inf)]
            check(f"{tag}: the runtime's counters, between noop's reads", bool(growing) and
                  not off, "; ".join(off) or "none served")
    finally:
        stopped(agent, tag, binary, log, f" ({mode})")


# The builds whose histogram's observed value noop --binary does not read: the Rust
# example's exclusive loops (the sum's loop keeps no old bits).
_UNOBSERVED = ("rust-llsc",)


def traced_updates(build: Path) -> None:
    """``noop --binary --json`` on the example (its lines: each update the preset reads
    on arm64), attached before the program starts, then TICKS ticks: each counter's and
    each added gauge's increments sum to the program's own value (every update seen
    once), a set gauge's last line is its value, the histogram has a line per
    observation, and their values sum to its own sum where noop reads the observed
    value (none where it does not: ``_UNOBSERVED``); noop stops leaving no uprobe. The
    Rust example's too (its updates through the compiler's outline atomics)."""
    binary, command, done = _example(build, TICKS)
    tag = f"{build.name} noop --binary"
    out = Path(f"/tmp/{build.name}-updates.json")
    with open(out, "w") as sink:
        agent = noop("--binary", binary, "--json", stdout=sink, stderr=subprocess.PIPE)
    assert agent.stderr is not None
    log: list[str] = []
    end = time.monotonic() + 600
    while time.monotonic() < end and not any(re.search(r"uprobes? on ", x) for x in log):
        line = agent.stderr.readline()
        if not line:
            break
        log.append(line)
    if not any(re.search(r"uprobes? on ", x) for x in log):
        check(f"{tag}: attached", False, "".join(log[-10:]))
        agent.kill()
        agent.wait()
        return
    threading.Thread(target=log.extend, args=(iter(agent.stderr.readline, ""),),
                     daemon=True).start()
    prog = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    assert prog.stderr is not None
    own_addr = re.search(r"http://(\S+)/metrics", prog.stderr.readline())
    assert own_addr is not None
    try:
        _counted_to(own_addr.group(1), done, tag)
        own = series(own_addr.group(1))
        time.sleep(3)  # the ring drained
    finally:
        prog.terminate()
        prog.wait()
    stopped(agent, tag, binary, log)
    printed: list[dict[str, Any]] = [json.loads(x) for x in out.read_text().splitlines()
                                     if x.strip()]
    by: dict[tuple[str, tuple[tuple[str, str], ...]], list[dict[str, Any]]] = {}
    for x in printed:
        pairs = tuple(sorted(x["labels"].items())) if isinstance(x["labels"], dict) else ()
        by.setdefault((str(x["metric"]), pairs), []).append(x)
    wrong = []
    for (metric, pairs), got in sorted(by.items()):
        if got[-1]["kind"] == "histogram":  # a line an observation, with its value
            want = own.get((f"{metric}_count", pairs))
            total = own.get((f"{metric}_sum", pairs))
            seen = [x["value"] for x in got if x["value"] is not None]
            observed = len(seen) == len(got) and total is not None and \
                math.isclose(sum(seen), total)
            ok = want == len(got) and (
                (build.name in _UNOBSERVED and not seen) or observed)
        elif got[-1]["inc"] is None:  # a set: its last value
            want = own.get((metric, pairs))
            ok = want == got[-1]["value"]
        else:  # every update once: the increments sum to the value
            want = own.get((metric, pairs))
            ok = want is not None and math.isclose(sum(float(x["inc"]) for x in got), want)
        if not ok:
            wrong.append(f"{metric}{dict(pairs)}: {len(got)} lines, last "
                         f"{got[-1]}, the program's {want}")
    names = {m for m, _l in by}
    missing = sorted({"fake_counter", "another_fake_counter", "fake_gauge",
                      "another_fake_gauge", "sub_fake_gauge", "dec_fake_gauge",
                      "fake_set_gauge", "fake_float_counter", "fake_int_counter",
                      "fake_histogram"} - names)
    check(f"{tag}: every update method's series has lines", not missing, str(missing))
    check(f"{tag}: each series' lines are the program's values", not wrong and bool(by),
          "; ".join(wrong[:4]))
    say(f"{tag}: {len(printed)} lines, {len(by)} series")


def mirrored_example(build: Path) -> None:
    """The example (Go's, or Rust's: the prometheus crate, read from memory alone on
    arm64), its ticks done: noop run --binary's default mirror, which finds the registry
    only main holds by the probe where the program gathers it."""
    binary, command, done = _example(build, 10)
    prog = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    assert prog.stderr is not None
    own = re.search(r"http://(\S+)/metrics", prog.stderr.readline())
    assert own is not None
    try:
        _counted_to(own.group(1), done, build.name)
        _mirror(build.name, binary, own.group(1), "auto", (), "fake_counter")
    finally:
        prog.terminate()
        prog.wait()


def mirrored_program(build: Path) -> None:
    """tests/programs/go/mirror (DefaultRegisterer, a global: no probe needed): noop run
    --binary --mirror memory, its families and the runtime's."""
    binary = str(build / "mirror")
    prog = subprocess.Popen([binary, "-rounds", "5", "-vec", "20"], stdout=subprocess.PIPE,
                            text=True)
    assert prog.stdout is not None
    line = prog.stdout.readline()
    try:
        own = line.split()[1]
        # its GaugeFunc (not in a metric's memory) and the handler's own counters move
        _mirror(build.name, binary, own, "memory",
                ("mirror_goroutines", "promhttp_"), "mirror_calls_total")
    finally:
        prog.terminate()
        prog.wait()


WORK = """version: 1
targets:
  loop: {{binary: {binary}}}
probes:
  - name: work
    function: main.work
    metrics: [{{name: arm_work_calls_total, type: counter}}]
"""


CALLS = ("-n", "4000", "-rounds", "5")  # 20,000 calls a run of the loop


def _calls(binary: str, op: str, preempt: str = "on") -> int:
    """The loop run once (``op``, Go's asynchronous preemption ``preempt``): the calls
    it made, as it says."""
    env = {**os.environ, "GODEBUG": f"asyncpreemptoff={int(preempt == 'off')}"}
    done = subprocess.run([binary, "-op", op, *CALLS], capture_output=True, text=True,
                          env=env, check=True)
    return int(json.loads(done.stdout.strip().splitlines()[-1])["calls_total"])


def _counted(addr: str, metric: str, before: float, calls: int) -> float:
    """``metric``'s count since ``before``, once it reaches ``calls`` (or 30 s on)."""
    got = 0.0
    for _ in range(60):
        got = scrape(addr).get(metric, 0.0) - before
        if got >= calls:
            break
        time.sleep(0.5)
    return got


def exactly_once(build: Path) -> None:
    """main.work called 20,000 times with asynchronous preemption on (Go's default),
    then 20,000 with it off, under one noop run: its entry probe's count of each."""
    binary = str(build / "go-loop")
    spec = written(build, "work")
    # every call counted: no budget (a trap per call of a tight loop is far past one)
    agent = noop("run", "--config", str(spec), "--listen", "127.0.0.1:0",
                 "--max-overhead", "none", stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        addr, _log = ready(agent, 600)
        for preempt in ("on", "off"):
            before = scrape(addr).get("arm_work_calls_total", 0.0)
            calls = _calls(binary, "func", preempt)
            got = _counted(addr, "arm_work_calls_total", before, calls)
            check(f"{build.name}: exactly once, asynchronous preemption {preempt}",
                  got == calls, f"{got:.0f} hits for {calls} calls")
    finally:
        agent.send_signal(signal.SIGTERM)
        agent.wait(60)


def budget(build: Path) -> None:
    """With the default budget (5 % of a CPU), a trap per call of a tight loop is far
    past it: the probe comes off, fewer calls are counted, and noop says so."""
    binary = str(build / "go-loop")
    spec = written(build, "work")
    agent = noop("run", "--config", str(spec), "--listen", "127.0.0.1:0",
                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        addr, log = ready(agent, 600)
        calls = _calls(binary, "func")
        time.sleep(2)
        got = scrape(addr).get("arm_work_calls_total", 0.0)
        said = [x for x in log if "budget" in x]
        check(f"{build.name}: the budget takes the probe off", 0 < got < calls and
              bool(said), f"{got:.0f} hits for {calls} calls; said: {said[:2]}")
    finally:
        agent.send_signal(signal.SIGTERM)
        agent.wait(60)


VEC = "github.com/prometheus/client_golang/prometheus.(*CounterVec).WithLabelValues"
BOTH = """version: 1
targets:
  loop: {{binary: {binary}}}
probes:
  - name: work
    function: main.work
    metrics: [{{name: arm_work_calls_total, type: counter}}]
  - name: vec
    function: {vec}
    metrics: [{{name: arm_vec_calls_total, type: counter}}]
"""


def _bpftrace(binary: str, functions: tuple[str, ...]
             ) -> tuple[subprocess.Popen[str], list[str]]:
    """bpftrace counting hits of each of ``functions``' symbols (their first
    instructions) in @c0, @c1, ...: its output lines kept as they come; returned once it
    has attached."""
    text = " ".join(f'uprobe:{binary}:"{f}" {{ @c{i} = count(); }}'
                    for i, f in enumerate(functions))
    bt = subprocess.Popen(["bpftrace", "-e", text], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
    assert bt.stdout is not None
    out: list[str] = []
    end = time.monotonic() + 300
    while time.monotonic() < end:
        line = bt.stdout.readline()
        if not line:
            break
        out.append(line)
        if "Attaching" in line:
            threading.Thread(target=out.extend, args=(iter(bt.stdout.readline, ""),),
                             daemon=True).start()
            time.sleep(1)  # attached as it says so; a moment for the last of it
            return bt, out
    raise RuntimeError("bpftrace never attached: " + "".join(out[-5:]))


def beside_bpftrace(build: Path) -> None:
    """The over-count bpftrace and BCC showed under asynchronous preemption, looked at
    with noop and bpftrace on the same program at once: noop's entry probes (main.work:
    a leaf, probed at its first instruction; WithLabelValues: probed at its stack
    check's b.ls) and bpftrace's uprobe on each symbol (the first instruction: for
    WithLabelValues the stack check's load, which a call run again after morestack
    passes again), one bpftrace for each setting of preemption. Each pair of counts is
    said; noop's must be the calls (its exactly-once check on the newest Go)."""
    binary = str(build / "go-loop")
    spec = written(build, "both")
    ops = (("func", "main.work", "arm_work_calls_total"),
           ("countervec.Inc", VEC, "arm_vec_calls_total"))
    agent = noop("run", "--config", str(spec), "--listen", "127.0.0.1:0",
                 "--max-overhead", "none", stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        addr, _log = ready(agent, 600)
        for preempt in ("on", "off"):
            bt, said = _bpftrace(binary, tuple(f for _op, f, _m in ops))
            runs = []
            for op, _function, metric in ops:
                before = scrape(addr).get(metric, 0.0)
                calls = _calls(binary, op, preempt)
                calls += op == "countervec.Inc"  # its final read looks the child up again
                runs.append((op, metric, calls, _counted(addr, metric, before, calls)))
            bt.send_signal(signal.SIGINT)
            bt.wait(120)
            time.sleep(0.5)
            for i, (op, _metric, calls, got) in enumerate(runs):
                counted = next((int(m.group(1)) for x in reversed(said)
                                if (m := re.match(rf"@c{i}: (\d+)", x))), None)
                say(f"{build.name}: {op}, asynchronous preemption {preempt}: {calls} calls, "
                    f"noop {got:.0f}, bpftrace {counted}")
                check(f"{build.name}: noop beside bpftrace, {op}, preemption {preempt}",
                      got == calls, f"noop {got:.0f}, bpftrace {counted}, calls {calls}")
    finally:
        agent.send_signal(signal.SIGTERM)
        agent.wait(60)


C_SPEC = """version: 1
targets:
  c: {{binary: {binary}}}
probes:
  - name: process
    function: process
    metrics: [{{name: arm_c_calls_total, type: counter}}]
  - name: process_done
    function: process
    at: exit
    metrics: [{{name: arm_c_returns_total, type: counter}}]
  - name: accepted
    line: lines.c:{accepted}
    values: {{round: round}}
    metrics:
      - {{name: arm_c_accepted_total, type: counter}}
      - {{name: arm_c_last_round, type: gauge, value: round}}
"""


def c_program(build: Path) -> None:
    """tests/programs/c/lines.c by gcc-aarch64-linux-gnu at -O0: each call of process,
    each return, each pass through the accepted line and the round there (in the
    frame, where DWARF places it after the prologue) are what the program printed."""
    binary = str(build / "lines")
    spec = written(build, "c")
    agent = noop("run", "--config", str(spec), "--listen", "127.0.0.1:0",
                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        addr, _log = ready(agent, 600)
        rounds = 50
        done = subprocess.run([binary, str(rounds)], capture_output=True, text=True,
                              check=True)
        items = [json.loads(x) for x in done.stdout.splitlines()]
        accepted = [x for x in items if x["accepted"]]
        want = {"arm_c_calls_total": rounds, "arm_c_returns_total": rounds,
                "arm_c_accepted_total": len(accepted),
                "arm_c_last_round": accepted[-1]["round"]}  # read from its frame slot
        got: dict[str, float] = {}
        for _ in range(60):
            got = scrape(addr)
            if all(got.get(k) == v for k, v in want.items()):
                break
            time.sleep(0.5)
        for name, value in want.items():
            check(f"{build.name}: {name}", got.get(name) == value,
                  f"{got.get(name)}, the program's {value}")
    finally:
        agent.send_signal(signal.SIGTERM)
        agent.wait(60)
    check(f"{build.name}: noop exits 0", agent.returncode == 0, f"exit {agent.returncode}")
    check(f"{build.name}: no uprobe left", not left_attached(binary),
          str(left_attached(binary)))


# What each build of the example runs (each noop start costs a minute under emulation):
# the spec's run on both toolchains' DWARF builds (line probes) and on a stripped one,
# noop --binary's lines on a DWARF and a stripped build, the default mirror (the probe
# where the program gathers its registry) on both stripped builds.
EXAMPLE: dict[str, tuple[Any, ...]] = {
    "go1.19": (example,),
    "go1.19-stripped": (traced_updates, mirrored_example),
    "gonewest": (example, traced_updates),
    "gonewest-stripped": (example, mirrored_example),
}


def specs(programs: Path = PROGRAMS, noop_tree: Path = NOOP
           ) -> dict[tuple[str, str], tuple[Path, str]]:
    """Every spec the guest's runs are given, by (build, kind): its path in the guest
    and its text, naming the builds under /programs (``programs``: where they are
    listed; ``noop_tree``: the tree whose C source the C spec's line is counted in)."""
    out: dict[tuple[str, str], tuple[Path, str]] = {}
    for build in sorted(programs.iterdir()):
        here = PROGRAMS / build.name
        if (build / "go-prometheus").exists():
            stripped = build.name.endswith("stripped")
            out[(build.name, "example")] = (Path(f"/tmp/{build.name}.yaml"), SPEC.format(
                binary=here / "go-prometheus", n="p1" if stripped else "n")
                + ("" if stripped else LINE))
        elif (build / "go-loop").exists():
            out[(build.name, "work")] = (Path(f"/tmp/work-{build.name}.yaml"),
                                         WORK.format(binary=here / "go-loop"))
            out[(build.name, "both")] = (Path(f"/tmp/both-{build.name}.yaml"),
                                         BOTH.format(binary=here / "go-loop", vec=VEC))
        elif (build / "lines").exists():
            source = (noop_tree / "tests/programs/c/lines.c").read_text().splitlines()
            accepted = next(n for n, line in enumerate(source, 1) if "at: accepted" in line)
            out[(build.name, "c")] = (Path("/tmp/c.yaml"), C_SPEC.format(
                binary=here / "lines", accepted=accepted))
    return out


def written(build: Path, kind: str) -> Path:
    """The spec of ``kind`` for ``build``, written where ``specs`` says."""
    path, text = specs()[(build.name, kind)]
    path.write_text(text)
    return path


def prewarm(programs: Path, noop_tree: Path) -> None:
    """On the host, before the guest boots (with the guest's tree first on PYTHONPATH,
    NOOP_CACHE_DIR its cache): what the guest's runs resolve, resolved here into noop's
    cache, which is kept by each binary's build-id and noop's code (the same files, so
    the same stamp, which the guest checks): every spec's plan (for either answer the
    guest's kernel gives on reading XMM registers) but COLD's, and the preset's plans of
    every Go build. Resolving is the same Python on either machine; under emulation it
    is ~25 times slower (a stripped build's took 2 min of each start)."""
    from agent import cache
    from agent.config import probes
    from agent.plan import resolve
    from agent.presets import plans

    def host(target: Any) -> str:
        return str(programs / Path(target.binary).relative_to(PROGRAMS))

    for path, text in specs(programs, noop_tree).values():
        if path != COLD:
            spec = probes.parse(text, str(path))
            for xmm in (False, True):
                resolve.resolve(spec, xmm, wait=True, where=lambda _s, t: (host(t), ()))
    for build in sorted(programs.iterdir()):
        for name in ("go-prometheus", "mirror"):
            if (build / name).exists():
                for aggregate in (False, True):
                    plans.plan(str(build / name), aggregate=aggregate)
        if (build / "rust-prometheus").exists():
            for aggregate in (False, True):
                plans.plan(str(build / "rust-prometheus"), aggregate=aggregate)
    (Path(os.environ["NOOP_CACHE_DIR"]) / "STAMP").write_text(cache._SCHEMA)


def cache_stamped() -> None:
    """Whether the host's cache is this tree's (its stamp this noop's): said."""
    stamp = subprocess.run([PY, "-c", "from agent import cache; print(cache._SCHEMA)"],
                           cwd=NOOP, env={**os.environ, "PYTHONPATH": f"{NOOP}:{SITE}"},
                           capture_output=True, text=True, check=False).stdout.strip()
    kept = (CACHE / "STAMP").read_text() if (CACHE / "STAMP").exists() else ""
    check("noop's cache, filled on the host, is this tree's", bool(stamp) and stamp == kept,
          f"the guest's stamp {stamp!r}, the host's {kept!r}")


def compiled_out(shipped: set[str]) -> None:
    """BCC's programs this run compiled (noop's compile cache, less the entries the
    host shipped), each said on the console (``noop-bpf NAME GZIP-BASE64``) for the
    host to keep with the image: a later run's start that finds its program there
    compiles nothing."""
    import base64
    import gzip

    made = sorted(p for p in (CACHE / "bpf").glob("*.json") if p.name not in shipped)
    say(f"BCC's compile: {len(shipped)} programs from earlier runs, {len(made)} compiled now")
    for path in made:
        data = base64.b64encode(gzip.compress(path.read_bytes())).decode()
        print(f"noop-bpf {path.name} {data}", flush=True)


# About how long each kind of build's checks take (seconds, the emulated machine):
# the longest go first, so that the two lanes end together.
_LASTS = {"loop": 110, "rust": 150, "gonewest": 90, "gonewest-stripped": 80,
          "rust-lse": 70, "rust-llsc": 100, "go1.19-stripped": 65, "go1.19": 45,
          "mirror": 35, "c": 20}


def _kind(build: Path) -> str:
    for name, kind in (("go-loop", "loop"), ("mirror", "mirror"), ("lines", "c")):
        if (build / name).exists():
            return kind
    return build.name  # the example's builds, Go's and Rust's


def checked(build: Path) -> None:
    """Every check of one build, its time said; a failure the next build's all the
    same."""
    began = time.monotonic()
    try:
        if (build / "go-prometheus").exists():
            for run in EXAMPLE[build.name]:
                run(build)
        elif (build / "mirror").exists():
            mirrored_program(build)
        elif (build / "rust-prometheus").exists():
            traced_updates(build)
            if build.name == "rust":  # the other builds' mirrors would be the same
                mirrored_example(build)
        elif (build / "go-loop").exists():
            if build.name.startswith("gonewest"):
                beside_bpftrace(build)  # noop's exactly-once checks among them
            else:
                exactly_once(build)
            budget(build)
        elif (build / "lines").exists():
            c_program(build)
    except Exception as exc:  # the next build all the same
        check(f"{build.name}: its run", False, f"{type(exc).__name__}: {exc}")
    say(f"{build.name}: {time.monotonic() - began:.0f} s")


def main() -> int:
    started = time.monotonic()
    shipped = {p.name for p in (CACHE / "bpf").glob("*.json")}
    try:
        say(f"uname {os.uname().release} {os.uname().machine}; set up in "
            f"{time.monotonic() - started:.0f} s")
        doctor = noop("doctor", stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        said = doctor.communicate(timeout=600)[0]
        for line in said.splitlines():
            say(f"doctor: {line}")
        say(f"doctor: exit {doctor.returncode}, {len(said)} characters")
        # the calibration runs a loop of arm64's own instructions, proven as arm64 code
        # agent/binary/dwarf/_walk.c, cross-built on the host against this Python
        check("doctor: the DWARF walk in C loads",
              re.search(r"^ok +DWARF walk in C +built", said, re.M) is not None,
              next((x for x in said.splitlines() if "DWARF walk" in x), "not said"))
        check("doctor: uprobe hit costs calibrated",
              re.search(r"^ok +uprobe hit cost", said, re.M) is not None,
              next((x for x in said.splitlines() if "uprobe hit cost" in x), "not said"))
        cache_stamped()
        # The builds' checks two at a time (the guest's two CPUs, each a thread of the
        # host's), the longest first: each check is of one binary (its own uprobes,
        # ports, specs), and a count is exact whatever else runs.
        builds = sorted(PROGRAMS.iterdir(), key=lambda b: (-_LASTS.get(_kind(b), 60), b.name))
        with concurrent.futures.ThreadPoolExecutor(2) as lanes:
            list(lanes.map(checked, builds))
    except Exception as exc:  # the run goes on to its result line
        check("the guest's run", False, f"{type(exc).__name__}: {exc}")
    with contextlib.suppress(OSError):
        compiled_out(shipped)
    failed = sum(1 for _n, why in results if why)
    say(f"took {time.monotonic() - started:.0f} s")
    say(f"result {len(results) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--prewarm"]:
        prewarm(Path(sys.argv[2]), Path(sys.argv[3]))
        sys.exit(0)
    sys.exit(main())
