"""Histograms and summaries read from memory are never torn: a program
(tests/programs/go/torn; tests/programs/rust/mirror's ``torn``, the prometheus crate's
histogram) observes 1.0 into a histogram, a summary without objectives and one with,
from two threads each, while another gathers its registry in a loop (each Write folds a
histogram's cold half into its hot one: the count first, then the buckets, the sum last;
the crate's collect moves the buckets, then the count, the sum last, under its lock).
10,000 reads of each keep every identity of ones observed: _sum == _count == +Inf,
le="2" = _count, le="0.5" = 0."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from harness.programs import PROGRAMS, go_build, go_toolchain

from agent.presets.mirror.model import Histogram, Summary

READS = 10_000


@pytest.mark.parametrize("version", ["1.19", "newest", "rust"])
def test_histograms_and_summaries_read_whole_under_writes_and_observations(
        version: str, tmp_path: Path, privileged: None, request: pytest.FixtureRequest
) -> None:
    from agent.presets.mirror.core import Mirror

    if version == "rust":
        binary = request.getfixturevalue("rust_mirror")
        command = [str(binary), "torn"]
    else:
        binary = go_build(go_toolchain(version), tmp_path / "torn", None,
                          PROGRAMS / "go" / "torn", ("-ldflags=-s -w",))
        command = [str(binary)]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    taken: dict[str, int] = {}
    broken: list[tuple[str, object]] = []
    try:
        mirror = Mirror("torn", str(binary), walk_every=3600, find=lambda: [proc.pid])
        try:
            mirror.render()
            (p,) = mirror._processes.values()
            assert p.reader is not None
            current = mirror._current(p)
            names = {s.address: f.name for f in current.families.values() for s in f.series}
            assert sorted(names.values()) == (["torn_histogram"] if version == "rust" else
                                              ["torn_histogram", "torn_plain_summary",
                                               "torn_summary"])
            torn = 0
            while min((taken.get(n, 0) for n in names.values()), default=0) < READS:
                read = p.reader.read(current)
                torn += len(read.torn)
                for address, v in read.values.items():
                    name = names[address]
                    taken[name] = taken.get(name, 0) + 1
                    if isinstance(v, Histogram):
                        bounds = dict(v.buckets)
                        ok = v.sum == v.count == bounds[float("inf")] == bounds[2.0] and \
                            bounds[0.5] == 0
                    else:
                        ok = isinstance(v, Summary) and v.sum == v.count
                    if not ok:
                        broken.append((name, v))
        finally:
            mirror.close()
    finally:
        proc.terminate()
        proc.wait()
    assert not broken, f"{len(broken)} torn reads: {broken[:3]}"
    assert all(n >= READS for n in taken.values()), taken
    assert torn  # the reads raced the program's writes and observations


@pytest.mark.parametrize("family", ["torn_histogram", "torn_plain_summary"])
def test_a_histogram_caught_midway_through_its_programs_write_is_read_again(
        family: str, tmp_path: Path, privileged: None) -> None:
    """Every state a histogram (or a summary without objectives) passes through while
    its program's Write folds the cold half into the hot one (the hot index flipped; the
    count added, the cold count zeroed; each bucket added and zeroed; the sum added and
    zeroed), read as it would be from memory: each is read again or read whole, never a
    count without its buckets or its sum."""
    import struct

    from agent.presets.mirror.core import Mirror
    from agent.presets.mirror.model import Read

    binary = go_build(go_toolchain("1.19"), tmp_path / "torn", None, PROGRAMS / "go" / "torn",
                      ("-ldflags=-s -w",))
    proc = subprocess.Popen([str(binary), "-observers", "0", "-gatherers", "0"],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    try:
        mirror = Mirror("torn", str(binary), walk_every=3600, find=lambda: [proc.pid])
        try:
            mirror.render()
            (p,) = mirror._processes.values()
            reader = p.reader
            assert reader is not None
            (s,) = [s for f in mirror._current(p).families.values() for s in f.series
                    if f.name == family]
            raw = p.gm.read(s.address, reader._layout(s.type).size)
        finally:
            mirror.close()
    finally:
        proc.terminate()
        proc.wait()
    h = reader._halves_of(s.type)
    half_a, half_b, buckets_a, buckets_b = 0x10000, 0x20000, 0x30000, 0x40000
    n_buckets = 2 if h.buckets_at >= 0 else 0  # 0.5, 2 (+Inf is the count)
    observed = 5  # ones, in bucket le=2

    def half(count: int, sum_: float, at: int) -> bytearray:
        b = bytearray(h.half_size)
        struct.pack_into("<Q", b, h.count_at, count)
        struct.pack_into("<d", b, h.sum_at, sum_)
        if n_buckets:
            struct.pack_into("<QQQ", b, h.buckets_at, at, n_buckets, n_buckets)
        return b

    # before the Write: A hot with everything, B cold and empty
    state = {"a": half(observed, 1.0 * observed, buckets_a), "b": half(0, 0.0, buckets_b),
             "ab": [0, observed][:n_buckets], "bb": [0, 0][:n_buckets], "n": observed}
    states = []

    def snap() -> None:
        states.append({k: (bytes(v) if isinstance(v, bytearray) else list(v)
                           if isinstance(v, list) else v) for k, v in state.items()})

    def put(k: str, field: int, value: int | float) -> None:
        struct.pack_into("<d" if isinstance(value, float) else "<Q", state[k], field, value)

    def get_(k: str, field: int, fmt: str = "<Q") -> int | float:
        return struct.unpack_from(fmt, state[k], field)[0]

    snap()
    state["n"] = observed | 1 << 63  # flipped: B hot, A cold
    snap()
    put("b", h.count_at, int(get_("b", h.count_at)) + int(get_("a", h.count_at)))
    snap()
    put("a", h.count_at, 0)
    snap()
    for i in range(n_buckets):
        state["bb"][i] += state["ab"][i]
        snap()
        state["ab"][i] = 0
        snap()
    put("b", h.sum_at, float(get_("b", h.sum_at, "<d")) + float(get_("a", h.sum_at, "<d")))
    snap()
    put("a", h.sum_at, 0.0)
    snap()

    for k, st in enumerate(states):
        obj = bytearray(raw)
        struct.pack_into("<QQ", obj, h.counts_at, half_a, half_b)
        struct.pack_into("<Q", obj, h.hot_at, st["n"])
        memory = {half_a: st["a"], half_b: st["b"],
                  buckets_a: struct.pack(f"<{n_buckets}Q", *st["ab"]),
                  buckets_b: struct.pack(f"<{n_buckets}Q", *st["bb"]),
                  s.address + h.hot_at: struct.pack("<Q", st["n"])}

        def read_many(ranges: object, memory: dict[int, bytes] = memory) -> list[bytes | None]:
            assert isinstance(ranges, list)
            return [memory[a][:n] if a in memory else None for a, n in ranges]

        reader.gm.memory.read_many = read_many  # type: ignore[method-assign]
        out = Read()
        again = reader._halves([(s, bytes(obj))], out)
        v = out.values.get(s.address)
        assert again or isinstance(v, Histogram | Summary), k
        if isinstance(v, Summary):
            assert v.count == observed and v.sum == observed, (k, v)
        if isinstance(v, Histogram):
            bounds = dict(v.buckets)
            assert v.count == observed and v.sum == observed and \
                bounds[2.0] == observed and bounds[0.5] == 0, (k, v)


def test_a_crate_histogram_caught_midway_through_its_collect_is_read_again(
        rust_mirror: Path, privileged: None) -> None:
    """Every state the prometheus crate's histogram passes through while its own
    collect (``HistogramCore::proto``) folds the cold shard into the hot one (the lock
    taken; the hot index flipped; the cold count zeroed once it equals the count; the
    cold sum swapped out; each bucket moved; the count, then the sum added to the hot
    shard; the lock freed), and with an observation half-done, read as it would be from
    memory: each is read again or read whole, never a count without its buckets or its
    sum."""
    import struct

    from agent.presets.mirror.core import Mirror
    from agent.presets.mirror.model import Read

    proc = subprocess.Popen([str(rust_mirror), "torn", "-observers", "0", "-gatherers", "0"],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    try:
        mirror = Mirror("torn", str(rust_mirror), walk_every=3600, find=lambda: [proc.pid])
        try:
            mirror.render()
            (p,) = mirror._processes.values()
            reader = p.reader
            assert reader is not None
            (s,) = [s for f in mirror._current(p).families.values() for s in f.series]
            k = s.type
            raw = p.gm.memory.read(s.address, k.size)
        finally:
            mirror.close()
    finally:
        proc.terminate()
        proc.wait()
    vec = reader.layout.vec
    d = k.data
    buckets = {0: 0x10000, 1: 0x20000}  # each shard's buckets (0.5, 2), faked
    observed = 5  # ones: in bucket le=2

    def core(st: dict[str, object]) -> bytes:
        b = bytearray(raw)
        for i in (0, 1):
            at = d + k.shards + i * k.shard_size
            struct.pack_into("<Q", b, at + k.count, st[f"c{i}"])
            struct.pack_into("<d", b, at + k.sum, st[f"s{i}"])
            struct.pack_into("<Q", b, at + k.buckets + vec.ptr, buckets[i])
            struct.pack_into("<Q", b, at + k.buckets + vec.len, 2)
        struct.pack_into("<Q", b, d + k.hot, st["n"])
        struct.pack_into("<I", b, d + k.lock, st["lock"])
        return bytes(b)

    state: dict[str, object] = {"c0": observed, "s0": 1.0 * observed, "b0": [0, observed],
                                "c1": 0, "s1": 0.0, "b1": [0, 0], "n": observed, "lock": 0}
    states = []

    def snap(**change: object) -> None:
        state.update(change)
        states.append({k: list(v) if isinstance(v, list) else v for k, v in state.items()})

    snap()
    snap(n=observed + 1)  # an observation begun: counted in shard_and_count first
    snap(b0=[0, observed + 1])  # its bucket
    snap(s0=observed + 1.0)  # its sum
    snap(c0=observed + 1)  # done
    total = observed + 1
    snap(lock=1)
    snap(n=total | 1 << 63)  # flipped: shard 1 hot, 0 cold
    snap(c0=0)
    snap(s0=0.0)
    snap(b0=[0, 0])
    snap(b1=[0, total])
    snap(c1=total)
    snap(s1=float(total))  # the collect's last write
    snap(lock=0)
    for n, st in enumerate(states):
        before = core(st)
        memory = {s.address: before, buckets[0]: struct.pack("<2Q", *st["b0"]),  # type: ignore[misc]
                  buckets[1]: struct.pack("<2Q", *st["b1"])}  # type: ignore[misc]

        def read_many(ranges: object, memory: dict[int, bytes] = memory) -> list[bytes | None]:
            assert isinstance(ranges, list)
            out: list[bytes | None] = []
            for a, size in ranges:
                base = next((b for b in memory if b <= a and a + size <= b + len(memory[b])),
                            None)
                out.append(None if base is None else memory[base][a - base:a - base + size])
            return out

        reader.mem.memory.read_many = read_many  # type: ignore[method-assign]
        out = Read()
        again = reader._histograms([s], reader._ranges([s]), out)
        v = out.values.get(s.address)
        assert again or isinstance(v, Histogram), n
        if isinstance(v, Histogram):
            bounds = dict(v.buckets)
            assert v.count == v.sum == bounds[2.0] == bounds[float("inf")] and \
                bounds[0.5] == 0 and v.count in (observed, total), (n, v)
