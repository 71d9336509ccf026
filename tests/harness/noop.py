"""The one way the tests run noop: a command to its end (``run``), ``noop run`` in the
background until its probes are attached (``start``), or a trace in the background
(``tracing``); each is stopped with SIGTERM and checked to leave nothing attached.

Every noop started here inherits the session's cache (``NOOP_CACHE_DIR``, set by the
conftest) unless the test names its own with ``cache``.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from harness.metrics import Samples, get, samples

REPO = Path(__file__).resolve().parent.parent.parent
UPROBE_EVENTS = Path("/sys/kernel/tracing/uprobe_events")


def command(*args: str | Path) -> list[str]:
    """``noop ARGS`` as this checkout's code runs it."""
    return [sys.executable, "-m", "agent", *map(str, args)]


def environment(cache: Path | None = None, **extra: str) -> dict[str, str]:
    env = {**os.environ, **extra}
    if cache is not None:
        env["NOOP_CACHE_DIR"] = str(cache)
    return env


def run(*args: str | Path, cache: Path | None = None, env: dict[str, str] | None = None,
        timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``noop ARGS`` to its end, its output captured (``env``: added to the test's)."""
    return subprocess.run(command(*args), cwd=REPO, env=environment(cache, **(env or {})),
                          capture_output=True, text=True, timeout=timeout, check=False)


def popen(*args: str | Path, cache: Path | None = None, env: dict[str, str] | None = None,
          wrap: Sequence[str] = (), **kw: Any) -> subprocess.Popen[str]:
    """``noop ARGS`` in the background (``wrap``: a command that runs it, as capsh does);
    ``kw`` as subprocess.Popen takes them (its streams: text)."""
    proc = subprocess.Popen([*wrap, *command(*args)], cwd=REPO,
                            env=environment(cache, **(env or {})), text=True, **kw)
    _NAMED[proc.pid] = _named_files(args)
    return proc


def wait_for(stream: Any, pattern: str, timeout: float) -> list[str]:
    """Lines read from ``stream`` up to the first matching ``pattern``; the test fails
    with what was read when the stream ends or ``timeout`` passes first."""
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = stream.readline()
        if not line:
            break
        seen.append(line)
        if re.search(pattern, line):
            return seen
    pytest.fail(f"never saw {pattern!r}; got:\n{''.join(seen)}", pytrace=False)


def one_line_each(stderr: str) -> list[str]:
    """An error's lines: at least one, and no traceback."""
    lines = stderr.strip().splitlines()
    assert lines, "no message"
    assert not any("Traceback" in x for x in lines), stderr
    return lines


# noop's PID -> the files its command line names (--binary, a --config's targets)
_NAMED: dict[int, tuple[str, ...]] = {}


def _named_files(args: Sequence[str | Path]) -> tuple[str, ...]:
    import yaml

    out: list[str] = []
    words = [str(a) for a in args]
    for flag, value in itertools.pairwise(words):
        if flag == "--binary":
            out.append(value)
        elif flag == "--config":
            try:
                spec = yaml.safe_load(Path(value).read_text())
                out += [str(t["binary"]) for t in spec["targets"].values()
                        if isinstance(t, dict) and "binary" in t]
            except (OSError, yaml.YAMLError, KeyError, TypeError, AttributeError):
                pass  # a spec a test made broken on purpose names nothing
    return tuple(os.path.realpath(f) for f in out)


def attached_to(*files: str | Path) -> list[str]:
    """What holds uprobes on ``files`` now: a uprobe_multi link on one (the kernel lists
    every link), or a tracefs entry naming one (BCC's and bpftrace's). A perf-event
    uprobe noop made through the uprobe PMU is listed nowhere: only the target's code
    shows it (an int3 at the site), and it goes when the last descriptor of its event
    is closed."""
    from agent.kernel import uprobes

    wanted = {os.path.realpath(f) for f in files}
    out = [line for line in UPROBE_EVENTS.read_text().splitlines()
           if any(f in line for f in wanted)]
    out += [f"link {link.id}: {link.count} uprobes on {link.path}"
            for link in uprobes.uprobe_multi_links() if os.path.realpath(link.path) in wanted]
    return out


def no_probe_left(pid: int, *files: str | Path) -> None:
    """No uprobe the noop whose PID this was made is on: none BCC named after it in
    tracefs, and none on the files its command line named (and ``files``), however
    made. Only that noop's own are looked at, so that other tests' noops may run."""
    events = UPROBE_EVENTS.read_text()
    assert f"bcc_{pid}" not in events, f"uprobes of noop {pid} left behind:\n{events}"
    left = attached_to(*_NAMED.get(pid, ()), *files)
    assert not left, f"noop {pid} left uprobes behind: {left}"


@dataclass
class Agent:
    """A ``noop run`` serving /metrics."""

    proc: subprocess.Popen[str]
    url: str  # http(s)://host:port
    log: list[str]

    def metrics(self) -> Samples:
        return samples(get(self.url + "/metrics"))

    def stop(self) -> tuple[int, str]:
        """SIGTERM, then its exit code and everything it logged."""
        self.proc.send_signal(signal.SIGTERM)
        _out, err = self.proc.communicate(timeout=30)
        return self.proc.returncode, "".join(self.log) + (err or "")


READY = r"ready: \d+ uprobes? attached"


def start(*args: str | Path, scheme: str = "http", cache: Path | None = None,
          env: dict[str, str] | None = None, wrap: Sequence[str] = (),
          ready: str = READY) -> Agent:
    """``noop run --listen 127.0.0.1:0 ARGS``, returned once its log says ``ready``
    (by default: its uprobes are attached). ``wrap``: a command that runs noop (capsh)."""
    proc = popen("run", "--listen", "127.0.0.1:0", *args, cache=cache, env=env, wrap=wrap,
                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert proc.stderr is not None
    try:
        log = wait_for(proc.stderr, ready, 180)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    addr = next(m.group(1) for line in log if (m := re.search(r"//(\S+)/metrics", line)))
    return Agent(proc, f"{scheme}://{addr}", log)


def stopped(agent: Agent) -> str:
    """Stop ``agent``: it must exit 0 and leave no uprobe. Its log."""
    code, err = agent.stop()
    assert code == 0, err
    no_probe_left(agent.proc.pid)
    return err


def drained(got: Samples) -> bool:
    """Whether noop has read every record its probes made (read + lost = produced, per
    probe): what the ring held when the target stopped is counted everywhere."""
    made = {k[1]: v for k, v in got.items() if k[0] == "noop_events_produced_total"}
    return all(got.get(("noop_events_total", labels), 0)
               + got.get(("noop_events_lost_total", labels), 0) == n
               for labels, n in made.items())


def settle(agent: Agent, name: str, labels: dict[str, str], want: float) -> Samples:
    """Scrape until a sample reaches ``want`` and the ring buffer is drained (it is read
    on a timer); the last scrape either way."""
    key = (name, tuple(sorted(labels.items())))
    got: Samples = {}
    for _ in range(50):
        got = agent.metrics()
        if got.get(key) == want and drained(got):
            break
        time.sleep(0.2)
    return got


@dataclass
class Session:
    """A noop trace (``--json``) in the background; filled in when it has stopped."""

    pid: int
    lines: list[dict[str, Any]] = field(default_factory=list)
    stderr: str = ""
    exit: int | None = None


@contextmanager
def tracing(tmp_path: Path, *noop_args: str | Path) -> Iterator[Session]:
    """Start noop (--json) and return once its uprobes are on; on leaving, stop it with
    SIGTERM and read what it printed."""
    out = tmp_path / "noop.out"
    with open(out, "w") as sink:
        noop = popen(*noop_args, "--json", stdout=sink, stderr=subprocess.PIPE)
    assert noop.stderr is not None
    session = Session(noop.pid)
    try:
        wait_for(noop.stderr, r"uprobes? on ", 180)
        yield session
        noop.send_signal(signal.SIGTERM)
        _stdout, session.stderr = noop.communicate(timeout=30)
        session.exit = noop.returncode
    finally:
        if noop.poll() is None:
            noop.kill()
            noop.wait()
    session.lines = [json.loads(line) for line in out.read_text().splitlines()]


def target_byte(pid: int, address: int) -> int:
    """The byte process ``pid`` holds at ``address`` now (a uprobe's int3 reads 0xcc)."""
    with open(f"/proc/{pid}/mem", "rb") as mem:
        mem.seek(address)
        return mem.read(1)[0]
