"""The example service does what noop's truth tests will rely on: after N ticks its own
/metrics shows exactly the updates it made."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest
from harness.metrics import scrape

REPO = Path(__file__).resolve().parent.parent
TICKS = 7  # prime, so that no two metrics' expected values coincide by accident


def test_metrics_after_n_ticks(example: Path) -> None:
    p = subprocess.Popen([str(example), "-listen", "127.0.0.1:0", "-period", "20ms",
                          "-ticks", str(TICKS), "-linger", "30s"],
                         stderr=subprocess.PIPE, text=True)
    try:
        assert p.stderr is not None
        url = None
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            line = p.stderr.readline()
            m = re.search(r"serving (http://\S+/metrics)", line)
            url = url or (m.group(1) if m else None)
            if line.rstrip().endswith(f"tick {TICKS}"):
                break
        assert url, "the example never said where it serves /metrics"
        m = scrape(url)
    finally:
        p.terminate()
        p.wait(timeout=5)
    assert p.returncode == 0  # SIGTERM is a clean shutdown
    assert m["fake_counter"] == TICKS
    assert m["another_fake_counter"] == 2 * TICKS
    assert m["fake_gauge"] == TICKS
    assert m["another_fake_gauge"] == 5 * TICKS
    assert m["sub_fake_gauge"] == -7 * TICKS
    assert m["dec_fake_gauge"] == -TICKS
    assert m["fake_set_gauge"] == 1.5 * TICKS
    assert m["fake_float_counter"] == 0.25 * TICKS
    assert m["fake_int_counter"] == 3 * TICKS
    assert m["fake_histogram_count"] == TICKS
    assert m["fake_histogram_sum"] == sum(n % 10 for n in range(1, TICKS + 1))
    vec = {k: v for k, v in m.items() if k.startswith("fake_requests_total{")}
    assert sum(vec.values()) == TICKS
    assert len(vec) == 6  # 2 methods x 3 codes, all reached within 7 ticks


def test_stops_by_itself_after_n_ticks(example: Path) -> None:
    done = subprocess.run([str(example), "-listen", "127.0.0.1:0", "-period", "10ms",
                           "-ticks", "3"], capture_output=True, text=True, timeout=20,
                          check=False)
    assert done.returncode == 0
    assert re.findall(r"go-prometheus: tick (\d+)$", done.stderr, re.M) == ["1", "2", "3"]


def test_rejects_a_bad_period(example: Path) -> None:
    done = subprocess.run([str(example), "-period", "0s"], capture_output=True, text=True,
                          timeout=10, check=False)
    assert done.returncode == 2
    assert "period must be positive" in done.stderr


@pytest.mark.serial  # exit within 3 s is timed
def test_sigterm_stops_an_endless_run(example: Path) -> None:
    """Without -ticks the example runs until signalled, then exits 0 promptly."""
    p = subprocess.Popen([str(example), "-listen", "127.0.0.1:0", "-period", "10ms"],
                         stderr=subprocess.PIPE, text=True)
    assert p.stderr is not None
    assert "tick 1" in p.stderr.readline() + p.stderr.readline()
    started = time.monotonic()
    p.terminate()
    assert p.wait(timeout=10) == 0
    assert time.monotonic() - started < 3
