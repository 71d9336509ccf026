"""``noop run``'s port under a flood: 1,000 clients hold connections open, sending
nothing or trickling their headers (a slowloris), more than noop's own descriptor limit
allows. /metrics, /healthz and /readyz are answered within 2 s all along; a target
process started during the flood is still followed (its series come); once the clients
go, noop holds the descriptors and threads it held before and about the memory."""

from __future__ import annotations

import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from harness.flood import Flood
from harness.noop import start, stopped
from harness.programs import EXAMPLE, go_build, go_toolchain

from agent.output import front

pytestmark = pytest.mark.serial  # deadlines, while the machine is flooded

CLIENTS = 1000
NOFILE = 1024  # noop's own descriptor limit: fewer than the clients
ANSWER_WITHIN = 2.0


def _timed(url: str) -> tuple[float, str]:
    t = time.monotonic()
    with urllib.request.urlopen(url, timeout=5) as r:
        body = r.read().decode()
    return time.monotonic() - t, body


def _held(pid: int) -> tuple[int, int, int]:
    """(descriptors, threads, resident kB) of ``pid``."""
    fds = len(list(Path(f"/proc/{pid}/fd").iterdir()))
    threads = len(list(Path(f"/proc/{pid}/task").iterdir()))
    rss = next(int(line.split()[1]) for line in Path(f"/proc/{pid}/status").read_text()
               .splitlines() if line.startswith("VmRSS:"))
    return fds, threads, rss


def _running(binary: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen([str(binary), "-listen", "127.0.0.1:0"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@pytest.mark.parametrize("mode", ["idle", "trickle"])
def test_noop_answers_while_a_thousand_clients_hold_its_port(
        mode: str, tmp_path: Path, privileged: None) -> None:
    example = go_build(go_toolchain("1.19"), tmp_path / "go-prometheus", None, EXAMPLE)
    first = _running(example)
    agent = start("--binary", example, cache=tmp_path / "cache",
                  wrap=("prlimit", f"--nofile={NOFILE}:{NOFILE}", "--"))
    second: subprocess.Popen[bytes] | None = None
    try:
        url = agent.url
        deadline = time.monotonic() + 30
        while f'pid="{first.pid}"' not in _timed(url + "/metrics")[1]:
            assert time.monotonic() < deadline
            time.sleep(0.2)
        for _ in range(3):  # warm: the mirror's first walks and pages
            _timed(url + "/metrics")
        before = _held(agent.proc.pid)
        slow: list[tuple[str, float]] = []
        with Flood(url.split("//", 1)[1], CLIENTS, mode) as flood:
            assert flood.opened >= CLIENTS
            for _ in range(5):
                for path in ("/metrics", "/healthz", "/readyz"):
                    took, _body = _timed(url + path)
                    if took > ANSWER_WITHIN:
                        slow.append((path, took))
                time.sleep(0.2)
            # a target that starts now is followed all the same: descriptors are kept
            # for it (its /proc files, its memory, its probes)
            second = _running(example)
            deadline = time.monotonic() + 30
            while f'pid="{second.pid}"' not in (page := _timed(url + "/metrics")[1]):
                assert time.monotonic() < deadline, "a target started during the flood " \
                    "was not followed"
                time.sleep(0.5)
            assert f'process_open_fds{{pid="{second.pid}"' in page
            during = _held(agent.proc.pid)
            opened = flood.opened
        assert not slow, slow
        # noop held at most its share of descriptors, and the flood was closed and came
        # again (more connections than it holds)
        held = max(8, min(front.CEILING, (NOFILE - front.RESERVED) // 2))  # noop's share
        assert during[0] <= before[0] + held + 64, (before, during)
        assert opened > CLIENTS
        time.sleep(front.HEAD_TIMEOUT + 1)
        after = _held(agent.proc.pid)
        assert after[0] <= before[0] + 2, (before, after)  # the second target's files
        # no thread per connection: the application's pool grows to its bound at most
        # (it had started one before the flood)
        assert during[1] <= before[1] + front.WORKERS - 1, (before, during)
        assert after[1] <= before[1] + front.WORKERS - 1, (before, after)
        assert after[2] <= before[2] * 1.10 + 4096, (before, after)
    finally:
        for p in (first, second):
            if p is not None:
                p.kill()
                p.wait()
        stopped(agent)
