"""A summary's quantiles computed from a copy of its streams (``quantiles``) are Go's
own: beorn7/perks' targeted streams, driven through tests/programs/go/perks, answer
every query of a hypothesis-drawn sequence of inserts and queries (past the 500-sample
buffer, many times over, with repeated values) with the same float64 bits; and the
rotations of a summary's age streams are counted as its Write counts them."""

from __future__ import annotations

import random
import struct
import subprocess
from pathlib import Path

import pytest
from harness.programs import PROGRAMS, go_build, go_toolchain
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.presets.client_golang import quantiles


def _hex(x: float) -> str:
    return format(struct.unpack("<Q", struct.pack("<d", x))[0], "x")


def _float(h: str) -> float:
    return float(struct.unpack("<d", struct.pack("<Q", int(h, 16)))[0])


@pytest.fixture(scope="module")
def perks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return go_build(go_toolchain("1.19"), tmp_path_factory.mktemp("perks") / "perks", None,
                    PROGRAMS / "go" / "perks")


OBJECTIVES = [{0.5: 0.05, 0.9: 0.01, 0.99: 0.001}, {0.5: 0.05}, {0.25: 0.02, 0.75: 0.02},
              {0.999: 0.0001, 0.01: 0.001}]
DRAWS = ["ints", "gauss", "expo", "sorted", "reversed"]


def _values(rng: random.Random, how: str, n: int) -> list[float]:
    if how == "ints":  # many repeated values
        return [float(rng.randint(-20, 20)) for _ in range(n)]
    if how == "gauss":
        return [rng.gauss(100, 30) for _ in range(n)]
    if how == "expo":
        return [rng.expovariate(0.01) for _ in range(n)]
    got = sorted(rng.uniform(0, 1e3) for _ in range(n))
    return got if how == "sorted" else got[::-1]


@pytest.mark.builds  # the Go program it asks
@settings(max_examples=25, deadline=None)
@given(targets=st.sampled_from(OBJECTIVES), seed=st.integers(0, 2**32),
       steps=st.lists(st.tuples(st.integers(0, 4000), st.sampled_from(DRAWS),
                                st.sampled_from([0.01, 0.25, 0.5, 0.9, 0.99, 0.999, 1.0])),
                      min_size=1, max_size=4))
def test_queries_are_gos_own(perks: Path, targets: dict[float, float], seed: int,
                             steps: list[tuple[int, str, float]]) -> None:
    """Inserts past the 500-sample buffer many times over (each merge and compression),
    repeated values, values in order and backwards; queries between them."""
    rng = random.Random(seed)
    mine = quantiles.Stream(0.0, [], [], 500, True, tuple(targets.items()))
    script = ["t " + " ".join(f"{_hex(q)} {_hex(e)}" for q, e in targets.items())]
    want = []
    for n, how, q in steps:
        for v in _values(rng, how, n):
            mine.insert(v)
            script.append(f"i {_hex(v)}")
        script += [f"q {_hex(q)}", "c"]
        want += [_hex(mine.query(q)), str(mine.count())]
    got = subprocess.run([str(perks)], input="\n".join(script) + "\n", text=True,
                         capture_output=True, check=True).stdout.split()
    assert got == want


def test_rotations_are_counted_as_write_counts_them() -> None:
    """Write moves hotBufExpTime a streamDuration at a time past now, then rotates the
    head until its expiry is there: none while now is before the expiry, one a
    duration gone after it."""
    d = 120_000_000_000
    s = quantiles.Summary([], hot_exp=1_000 * d, head_exp=1_000 * d, duration=d, streams=5,
                          head=0, ranks=[])
    assert quantiles.rotations(s, 1_000 * d - 1) == 0
    assert quantiles.rotations(s, 1_000 * d) == 0  # not after it
    assert quantiles.rotations(s, 1_000 * d + 1) == 1
    assert quantiles.rotations(s, 1_002 * d + 5) == 3
    behind = quantiles.Summary([], hot_exp=1_001 * d, head_exp=1_000 * d, duration=d,
                               streams=5, head=0, ranks=[])
    assert quantiles.rotations(behind, 1_000 * d) == 1  # an Observe moved the buffer on


def test_a_summary_whose_head_was_reset_serves_nan() -> None:
    s = quantiles.Summary([1.0, 2.0], 0, 0, 1, 5, 0, [0.5, 0.9])
    assert [r for r, _v in quantiles.served(s, None)] == [0.5, 0.9]
    assert all(v != v for _r, v in quantiles.served(s, None))
