"""Uprobes only on proven instruction boundaries of the very build a plan was made for.

A uprobe is a breakpoint written over the first byte at its file offset. These tests try
to make noop put one anywhere else: plans with offsets, code, instructions and build-ids
corrupted field by field (cached with a valid digest, as a noop with a bug would write
them), and a binary replaced at each step between resolving and attaching. Whatever
happens, every byte a probed process holds of the file's code must equal the file's,
but at instruction boundaries (objdump's) where a breakpoint or the kernel's optimized
call sits, the target's own counts must stay exact, and noop must probe the right
build or say why not. Privileged where they attach: real BPF.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from harness.metrics import scrape
from harness.noop import Agent, start, wait_for
from harness.programs import EXAMPLE, go_build, go_toolchain
from oracles import machine

from agent import cache
from agent.binary import debuginfo, proof
from agent.binary.elf import ElfFile
from agent.config.selector import Selector
from agent.kernel import attach, codegen, load, objects
from agent.kernel.kfeatures import attach_cookies
from agent.kernel.program import Program
from agent.plan import plain
from agent.plan.model import Plan, Site
from agent.presets import plans as presets

# attach: the tests whose subject is what gets attached run again through perf-event
# uprobes (--attach both); a kept plan's corruption is the plan's, read once. Never side
# by side (setup.sh runs a test file on one worker): they start copies of one build at
# replaced paths, which another of these tests' noop run, following its build, could find.
ATTACH = pytest.mark.attach

REPO = Path(__file__).resolve().parent.parent
TICKS = 23
NOP5 = bytes.fromhex("0f1f440000")
ONE_COMPILER = pytest.mark.parametrize("example", ["go1.19"], indirect=True)


@pytest.fixture(scope="module", autouse=True)
def own_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """These tests damage cached plans on purpose: in a cache of their own, never the
    one every other test shares (conftest's session_cache)."""
    path = tmp_path_factory.mktemp("proof-cache")
    shared = os.environ["NOOP_CACHE_DIR"]
    os.environ["NOOP_CACHE_DIR"] = str(path)
    yield path
    os.environ["NOOP_CACHE_DIR"] = shared


# --- the oracle: what a process holds of a file's code ------------------------------


def boundaries(binary: Path) -> set[int]:
    """File offsets where objdump decodes an instruction of the binary's code."""
    with ElfFile(binary) as elf:
        return {elf.file_offset(i.address) for i in machine.disassemble(binary)}


@dataclass(frozen=True)
class Snap:
    """A file as a process started it: its bytes and its device and inode (the path
    may name another file by now)."""

    data: bytes
    dev: int
    ino: int


def snap(path: Path) -> Snap:
    st = os.stat(path)
    return Snap(path.read_bytes(), st.st_dev, st.st_ino)


def _code_maps(pid: int, file: Snap) -> list[tuple[int, int, int]]:
    """(start, end, file offset) of each executable mapping of ``file`` in ``pid``."""
    dev = f"{os.major(file.dev):02x}:{os.minor(file.dev):02x}"
    out = []
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        f = line.split(maxsplit=5)
        if len(f) >= 5 and f[4] == str(file.ino) and f[3] == dev and "x" in f[1]:
            lo, hi = (int(x, 16) for x in f[0].split("-"))
            out.append((lo, hi, int(f[2], 16)))
    assert out, f"process {pid} does not run that file"
    return out


def written(pid: int, file: Snap | Path) -> dict[int, bytes]:
    """Where the code process ``pid`` runs of ``file`` differs from the file's bytes,
    by file offset: each run of differing bytes (up to 5)."""
    file = snap(file) if isinstance(file, Path) else file
    out: dict[int, bytes] = {}
    with open(f"/proc/{pid}/mem", "rb") as mem:
        for lo, hi, off in _code_maps(pid, file):
            mem.seek(lo)
            got = mem.read(hi - lo)
            want = file.data[off:off + len(got)]
            i = 0
            while i < len(got):
                if i < len(want) and got[i] == want[i]:
                    i += 1
                    continue
                j = i
                while j < len(got) and (j >= len(want) or got[j] != want[j]) and j - i < 5:
                    j += 1
                out[off + i] = got[i:j]
                i = j
    return out


def assert_on_boundaries(pid: int, file: Snap | Path, starts: set[int]) -> dict[int, bytes]:
    """Every byte noop's uprobes changed in ``pid``'s copy of the code is a breakpoint
    (int3) or the kernel's optimized call over a 5-byte nop, at an instruction start."""
    file = snap(file) if isinstance(file, Path) else file
    changed = written(pid, file)
    for offset, got in changed.items():
        assert offset in starts, f"a breakpoint inside an instruction at {offset:#x}: {got.hex()}"
        assert got == b"\xcc" or (got[0] == 0xE8 and file.data[offset:offset + 5] == NOP5), \
            f"{offset:#x}: {got.hex()} over {file.data[offset:offset + len(got)].hex()}"
    return changed


# --- builds, plans, programs --------------------------------------------------------


@pytest.fixture(scope="module")
def other_build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example built by the newest Go: the same program, other code at the
    offsets Debian's Go build has."""
    out = tmp_path_factory.mktemp("proof-newest")
    return go_build(go_toolchain("newest"), out / "go-prometheus", out / "gocache", EXAMPLE)


def _preset(binary: Path | str) -> Plan:
    return presets.plan(str(binary), None, aggregate=True)


def _program(plan: Plan) -> Program:
    return codegen.generate(plan, None, mode="run", cookies=attach_cookies())


@contextmanager
def held(binary: Path) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """The example, waiting for SIGUSR1 before its first tick; its /metrics URL."""
    ex = subprocess.Popen([str(binary), "-listen", "127.0.0.1:0", "-period", "10ms",
                           "-ticks", str(TICKS), "-linger", "60s", "-hold"],
                          stderr=subprocess.PIPE, text=True)
    try:
        assert ex.stderr is not None
        log = wait_for(ex.stderr, "holding until SIGUSR1", 60)
        url = next(m.group(1) for line in log if (m := re.search(r"(http://\S+/metrics)", line)))
        yield ex, url
    finally:
        ex.kill()
        ex.wait()


def ticked(ex: subprocess.Popen[str]) -> None:
    """Let the held example run its ticks, and wait for the last."""
    ex.send_signal(signal.SIGUSR1)
    wait_for(ex.stderr, rf"tick {TICKS}$", 60)


def own_counts_exact(url: str) -> dict[str, float]:
    """The example's own /metrics after its ticks: what its code counted, as it must."""
    got = scrape(url)
    want = {"fake_counter": TICKS, "another_fake_counter": 2 * TICKS, "fake_gauge": TICKS,
            "another_fake_gauge": 5 * TICKS, "sub_fake_gauge": -7 * TICKS,
            "dec_fake_gauge": -TICKS, "fake_set_gauge": 1.5 * TICKS,
            "fake_float_counter": 0.25 * TICKS, "fake_int_counter": 3 * TICKS,
            "fake_histogram_count": TICKS}
    assert {k: got.get(k) for k in want} == want
    return got


# --- proofs, without attaching --------------------------------------------------------


@ONE_COMPILER
@pytest.mark.parametrize("which", ["go1.19", "go-newest", "rust"])
def test_proofs_decode_as_objdump_does(which: str, example: Path, other_build: Path,
                                       rust_example: Path) -> None:
    """Every site of the preset's plan is proven, and the instruction starts its proof
    decodes in the code around it are exactly objdump's."""
    binary = {"go1.19": example, "go-newest": other_build, "rust": rust_example}[which]
    plan = presets.plan(str(binary), None, aggregate=False)
    theirs = boundaries(binary)
    data = binary.read_bytes()
    with ElfFile(binary) as elf:
        build = elf.build_id
    sites = [s for p in plan.probes for s in p.sites]
    assert sites
    for s in sites:
        assert s.proof is not None and s.proof.build == build
        table = proof.decoded(data[s.proof.start:s.proof.start + s.proof.size])
        mine = {s.proof.start + i for i, n in enumerate(table.lengths) if n}
        span = {o for o in theirs if s.proof.start <= o < s.proof.start + s.proof.size}
        assert mine == span, s.function
        assert s.file_offset in span


@ONE_COMPILER
def test_a_corrupted_site_is_refused_unless_it_is_an_instruction(example: Path) -> None:
    """Each site's offset moved by 1 to 15 bytes either way, and each field of its proof
    changed in turn: the check refuses every one, except an offset that lands on
    another instruction with the very bytes expected (harmless), and accepts the
    plan's own. A pass of checks that reads each function's code once answers each as
    a check alone does."""
    plan = _preset(example)
    starts = boundaries(example)
    checked = 0
    codes: proof.Codes = {}
    with proof.Opened(str(example)) as opened:
        def check(p: proof.Proof | None, offset: int) -> str:
            alone = opened.check(p, offset)
            assert opened.check(p, offset, codes) == alone, (p, offset)
            return alone

        for site in (s for p in plan.probes for s in p.sites):
            p = site.proof
            assert p is not None
            assert check(p, site.file_offset) == ""
            for delta in (*range(-15, 0), *range(1, 16)):
                why = check(p, site.file_offset + delta)
                checked += 1
                if not why:
                    assert site.file_offset + delta in starts
                    assert bytes.fromhex(p.insn) == opened.read(site.file_offset + delta,
                                                                len(p.insn) // 2)
            for bad in (replace(p, start=p.start + 1), replace(p, start=p.start - 1),
                        replace(p, size=p.size + 1), replace(p, size=p.size - 1),
                        replace(p, size=0), replace(p, size=1 << 40),
                        replace(p, start=-1), replace(p, start=1 << 62),
                        replace(p, digest="0" * 32), replace(p, insn="90"),
                        replace(p, insn=p.insn + "00"), replace(p, insn="zz"),
                        replace(p, build="go-" + "0" * 40)):
                assert check(bad, site.file_offset), bad
                checked += 1
            assert check(None, site.file_offset)
    assert checked > 300 and codes


@ONE_COMPILER
def test_code_written_after_the_checks_is_seen_after_attaching(example: Path,
                                                                tmp_path: Path) -> None:
    """A pass of checks reads each function once; what attaching reads after is the file
    again: a byte of a site's function written in place (the same inode) between the
    two is caught, whatever the checks kept."""
    plan = _preset(example)
    copy = tmp_path / "copy"
    shutil.copyfile(example, copy)
    sites = [s for p in plan.probes for s in p.sites]
    proofs = [s.proof for s in sites if s.proof is not None]
    assert proofs and len(proofs) == len(sites)
    codes: proof.Codes = {}
    with proof.Opened(str(copy)) as opened:
        assert all(opened.check(s.proof, s.file_offset, codes) == "" for s in sites)
        assert codes and opened.unchanged(proofs) == ""
        last = proofs[-1]
        with open(copy, "r+b") as f:  # in place: the very inode attached through
            f.seek(last.start + last.size - 1)
            byte = f.read(1)
            f.seek(last.start + last.size - 1)
            f.write(bytes([byte[0] ^ 0xFF]))
        assert f"{last.start:#x} changed" in opened.unchanged(proofs)
        assert opened.check(last, sites[-1].file_offset, codes) == ""  # what it kept
        assert opened.check(last, sites[-1].file_offset)  # the file now


def test_an_offset_inside_an_instruction_cannot_be_proven(example: Path) -> None:
    """A plan is never made with a site that does not start an instruction."""
    plan = _preset(example)
    site = next(s for p in plan.probes for s in p.sites if len(s.proof.insn) > 2)  # type: ignore[union-attr]
    with ElfFile(example) as elf:
        start = site.proof.start  # type: ignore[union-attr]
        first = next(a for a in range(site.address - (site.file_offset - start), site.address + 1)
                     if elf.file_offset(a) == start)
        code = (first, site.proof.size)  # type: ignore[union-attr]
        proof.make(elf, code, site.address)
        with pytest.raises(proof.Unprovable, match="does not start an instruction"):
            proof.make(elf, code, site.address + 1)
        with pytest.raises(proof.Unprovable, match="outside"):
            proof.make(elf, code, first + code[1])


# --- attaching -------------------------------------------------------------------------


def _attachments_proven(loaded: load.Loaded, binary: Path) -> None:
    with ElfFile(binary) as elf:
        build = elf.build_id
    for a in loaded.attachments:
        site = loaded.plan.probes[a.probe].sites[a.site]
        assert site.proof is not None and site.proof.build == build


@ATTACH
@ONE_COMPILER
def test_refused_sites_attach_nothing(privileged: None, example: Path) -> None:
    """A plan with one site moved inside an instruction: the file is refused before any
    uprobe goes on (none of the others either), and the running target is untouched;
    the plan as made puts breakpoints only at instruction starts, and the target
    counts exactly."""
    plan = _preset(example)
    program = _program(plan)
    starts = boundaries(example)
    with held(example) as (ex, url):
        for pi, probe in enumerate(plan.probes):
            site = probe.sites[0]
            bad = replace(plan, probes=tuple(
                replace(p, sites=(replace(site, file_offset=site.file_offset + 1),
                                  *p.sites[1:])) if n == pi else p
                for n, p in enumerate(plan.probes)))
            with pytest.raises(attach.BuildChanged, match=r"does not hold|not start"):
                load.Loaded(bad, program)
            assert written(ex.pid, example) == {}
        with load.Loaded(plan, program) as loaded:
            assert loaded.attachments
            changed = assert_on_boundaries(ex.pid, example, starts)
            assert set(changed) == {plan.probes[a.probe].sites[a.site].file_offset
                                    for a in loaded.attachments}
            ticked(ex)
            own_counts_exact(url)
        assert written(ex.pid, example) == {}


def _kept_plan(binary: Path) -> tuple[str, str, dict[str, Any]]:
    """The preset's plan for ``binary`` as noop run keeps it: (cache id, key, value)."""
    _preset(binary)
    with ElfFile(binary) as elf:
        cid = debuginfo.cache_id(elf)
    key = "aggregate=True"
    value = cache.get(cid, "preset", key)
    assert value is not None
    return cid, key, value


def _sites(value: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for p in value["probes"]:
        yield from p["sites"]


def _corrupt_offset(delta: int) -> Callable[[dict[str, Any], Plan], None]:
    def corrupt(value: dict[str, Any], _other: Plan) -> None:
        for s in _sites(value):
            s["file_offset"] += delta
    return corrupt


def _swap_offsets(value: dict[str, Any], _other: Plan) -> None:
    sites = list(_sites(value))
    sites[0]["file_offset"], sites[-1]["file_offset"] = \
        sites[-1]["file_offset"], sites[0]["file_offset"]


def _build_id(value: dict[str, Any], _other: Plan) -> None:
    value["targets"][0]["build_id"] = "go-" + "1" * 40
    for s in _sites(value):
        s["proof"]["build"] = "go-" + "1" * 40


def _proof_digest(value: dict[str, Any], _other: Plan) -> None:
    for s in _sites(value):
        s["file_offset"] += 2
        s["proof"]["insn"] = "00"


def _another_builds(value: dict[str, Any], other: Plan) -> None:
    value.clear()
    value.update(plain.dump(other))


CORRUPTIONS = {"offsets+1": _corrupt_offset(1), "offsets-1": _corrupt_offset(-1),
               "offsets+7": _corrupt_offset(7), "swapped": _swap_offsets,
               "build-id": _build_id, "instruction": _proof_digest,
               "another build's plan": _another_builds}


@ONE_COMPILER
@pytest.mark.parametrize("how", sorted(CORRUPTIONS))
def test_noop_run_resolves_a_corrupted_plan_again(privileged: None, example: Path,
                                                  other_build: Path, agent_cleanup: list[Agent],
                                                  how: str) -> None:
    """A kept plan corrupted as a noop with a bug would write it (its digest valid):
    ``noop run --binary`` says it does not hold, resolves the binary again and mirrors
    the target exactly; no breakpoint lands off an instruction boundary meanwhile."""
    cid, key, value = _kept_plan(example)
    CORRUPTIONS[how](value, _preset(other_build))
    cache.put(cid, "preset", key, value)
    assert cache.get(cid, "preset", key) == value
    starts = boundaries(example)
    with held(example) as (ex, url):
        agent = start("--binary", example, "--mirror", "both")
        agent_cleanup.append(agent)
        said = "".join(agent.log)
        assert re.search(r"(does not hold|build changed under noop).*resolving again", said), said
        changed = assert_on_boundaries(ex.pid, example, starts)
        assert changed
        ticked(ex)
        own = own_counts_exact(url)
        mirrored = _mirrored(agent, {"fake_counter", "another_fake_gauge", "fake_set_gauge",
                                     "fake_float_counter", "fake_int_counter"})
        for name in ("fake_counter", "another_fake_gauge", "fake_set_gauge",
                     "fake_float_counter", "fake_int_counter"):
            assert mirrored.get(name) == own[name], (name, mirrored)
        code, err = agent.stop()
        assert code == 0, err
    assert cache.get(cid, "preset", key) != value  # the corrupted plan is gone


def _mirrored(agent: Agent, names: set[str]) -> dict[str, float]:
    """The preset's mirrored values in noop run's /metrics, by metric name (series
    without labels), once each of ``names`` is there and nothing changes."""
    last: dict[str, float] = {}
    for _ in range(60):
        got = {dict(labels)["metric"]: v for (name, labels), v in agent.metrics().items()
               if name == "noop_metric_value" and dict(labels).get("labels") == ""}
        if names <= set(got) and got == last:
            return got
        last = got
        time.sleep(0.25)
    return last


# --- a binary replaced under noop ---------------------------------------------------


@contextmanager
def path_of(first: Path, tmp_path: Path, name: str = "svc", file: str = "go-prometheus"
            ) -> Iterator[Path]:
    """A copy of ``first`` at a path of its own, which tests then replace."""
    where = tmp_path / name
    where.mkdir(exist_ok=True)
    path = where / file
    shutil.copy2(first, path)
    yield path


def replace_with(path: Path, build: Path) -> None:
    """Another build renamed over ``path``, as a package manager installs one."""
    tmp = path.with_suffix(".new")
    shutil.copy2(build, tmp)
    os.replace(tmp, path)


def _settle(path: Path, hook: Callable[[], None] | None = None
            ) -> tuple[tuple[Plan, Program], load.Loaded, list[str]]:
    said: list[str] = []
    first = _preset(path)
    if hook is not None:
        hook()

    def again() -> tuple[Plan, Program]:
        plan = _preset(path)
        return plan, _program(plan)

    made, loaded = load.settle((first, _program(first)),
                               lambda m: load.Loaded(m[0], m[1]), again, said.append)
    return made, loaded, said


@ATTACH
@ONE_COMPILER
@pytest.mark.parametrize("when", ["after resolve", "after compile"])
def test_a_binary_replaced_before_attaching(privileged: None, example: Path,
                                            other_build: Path, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch, when: str) -> None:
    """The build at the path changes after noop resolved it (or compiled its program):
    noop says so and probes the build that is there now; a process still running the
    old build is left untouched, one running the new build is probed at instruction
    starts only, and counts exactly."""
    with path_of(example, tmp_path) as path:
        old = snap(path)
        with held(path) as (old_ex, _url):
            hook = None
            if when == "after resolve":
                def hook() -> None:
                    replace_with(path, other_build)
            else:
                build = load.build
                swapped: list[bool] = []

                def late(*a: Any, **k: Any) -> objects.Object:
                    got = build(*a, **k)
                    if not swapped:
                        swapped.append(True)
                        replace_with(path, other_build)
                    return got
                monkeypatch.setattr(load, "build", late)
            _made, loaded, said = _settle(path, hook)
            with loaded:
                assert any("build changed under noop" in s for s in said), said
                _attachments_proven(loaded, other_build)
                assert written(old_ex.pid, old) == {}
                with held(path) as (new_ex, url):
                    assert_on_boundaries(new_ex.pid, path, boundaries(other_build))
                    ticked(new_ex)
                    own_counts_exact(url)
                assert written(old_ex.pid, old) == {}


@ATTACH
@ONE_COMPILER
def test_a_file_replaced_between_two_files_attaches(privileged: None, example: Path,
                                                    other_build: Path, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Two files of one build (two containers, say): the second is replaced after the
    first is attached. Nothing of the refused load stays on the first; the plan made
    again is proven on what it attaches to; the replaced file is never probed with the
    old build's offsets."""
    with path_of(example, tmp_path, "a") as first, path_of(example, tmp_path, "b") as second:
        plan = _preset(first)
        (target,) = plan.targets
        plan = replace(plan, targets=(replace(target, also=(str(second),)),))
        attach_file = load.Loaded.attach_file
        calls: list[str] = []

        def between(self: load.Loaded, name: str, path: str) -> int:
            calls.append(path)
            n = attach_file(self, name, path)
            if len(calls) == 1:
                replace_with(second, other_build)
            return n
        monkeypatch.setattr(load.Loaded, "attach_file", between)
        old = snap(second)
        with held(first) as (ex1, url), held(second) as (ex2, _u2):
            with pytest.raises(attach.BuildChanged, match="build changed under noop"):
                load.Loaded(plan, _program(plan))
            monkeypatch.setattr(load.Loaded, "attach_file", attach_file)
            assert calls == [str(first), str(second)]
            assert written(ex1.pid, first) == {}  # the refused load left nothing on
            assert written(ex2.pid, old) == {}
            _made, loaded, _said = _settle(first)
            with loaded:
                assert {a.binary for a in loaded.attachments} == {str(first)}
                assert_on_boundaries(ex1.pid, first, boundaries(example))
                assert written(ex2.pid, old) == {}
                ticked(ex1)
                own_counts_exact(url)


@ATTACH
@ONE_COMPILER
def test_noop_run_re_resolving_while_the_binary_changes(privileged: None, example: Path,
                                                        other_build: Path,
                                                        tmp_path: Path) -> None:
    """noop run makes its plan again (SIGHUP, or what runs changed) and the file is
    replaced right after it resolved: it resolves once more and probes the build that
    is there, never the one it read first."""
    from agent.kernel.kfeatures import xmm_helper_available
    from agent.service import daemon

    with path_of(example, tmp_path) as path:
        resolved: list[str] = []

        def plan() -> Plan:
            got = _preset(path)
            resolved.append(got.targets[0].build_id)
            if len(resolved) == 2:  # the re-resolve: the file changes under it
                replace_with(path, other_build)
            return got

        first = plan()
        opts = daemon.Options(plan, first, True, "127.0.0.1:0", None, xmm_helper_available())
        d = daemon.Daemon(opts)
        try:
            d.start()
            assert d.loaded is not None
            _attachments_proven(d.loaded, example)
            d.reload("a test asked")
            assert len(resolved) == 3 and resolved[1] != resolved[2]
            assert d.loaded is not None and d.loaded.attachments
            _attachments_proven(d.loaded, other_build)
            with held(path) as (ex, url):
                assert_on_boundaries(ex.pid, path, boundaries(other_build))
                ticked(ex)
                own_counts_exact(url)
        finally:
            if d.loaded is not None:
                d.loaded.close()


def test_the_plan_shows_each_sites_instruction(example: Path) -> None:
    """noop check --json shows the instruction each site was proven at."""
    plan = _preset(example)
    shown = json.loads(json.dumps(plan.to_json()))
    for p, probe in zip(shown["probes"], plan.probes, strict=True):
        for s, site in zip(p["sites"], probe.sites, strict=True):
            assert isinstance(site, Site) and site.proof is not None
            assert s["instruction"] == site.proof.insn


# --- a copy of the build that does not hold the plan's code -------------------------


def _altered(example: Path, plan: Plan, where: Path, name: str = "go-prometheus") -> Path:
    """A copy of ``example`` with its build-id, one byte of a probed function's code
    changed (never run: it is only proven)."""
    where.mkdir()
    copy = where / name
    data = bytearray(example.read_bytes())
    p = plan.probes[0].sites[0].proof
    assert p is not None
    data[p.start + p.size - 1] ^= 0xFF
    copy.write_bytes(bytes(data))
    return copy


@ATTACH
@ONE_COMPILER
def test_a_copy_of_the_build_with_other_code_is_refused_alone(privileged: None,
                                                               example: Path,
                                                               tmp_path: Path) -> None:
    """Another container's file with the target's build-id but not its code: the load
    probes the target's own file and leaves that one out, saying why in one line;
    the target's own file failing fails the load."""
    plan = _preset(example)
    copy = _altered(example, plan, tmp_path / "other")
    (target,) = plan.targets
    with_copy = replace(plan, targets=(replace(target, also=(str(copy),)),))
    with load.Loaded(with_copy, _program(with_copy)) as loaded:
        assert {a.binary for a in loaded.attachments} == {target.binary}
        (why,) = loaded.refused.values()
        assert str(copy) in why and "does not hold" in why and "\n" not in why
    first = replace(plan, targets=(replace(target, binary=str(copy),
                                           also=(target.binary,)),))
    with pytest.raises(attach.BuildChanged, match="does not hold"):
        load.Loaded(first, _program(first))


def test_the_watch_leaves_a_refused_file_until_it_changes(tmp_path: Path) -> None:
    """A file refused a plan's probes is not offered again to that plan while it stays
    as it is; once it changes, or for another plan, it is."""
    from agent.live import discover
    from agent.plan.model import TargetPlan
    from agent.service import watch
    a, b = tmp_path / "a", tmp_path / "b"
    a.write_bytes(b"a")
    b.write_bytes(b"a")

    def proc(pid: int, path: Path) -> discover.Process:
        st = path.stat()
        return discover.Process(pid, "/app/shop", str(path), st.st_dev, st.st_ino,
                                st.st_mtime_ns, st.st_size)

    target = TargetPlan("shop", str(a), "A", "go", None, None,
                        selector=Selector(exe="shop"), pinned=False)
    plan = Plan("<t>", (target,), ())
    w = watch.Watch()
    w.ids.of = lambda p: "A"  # type: ignore[method-assign]
    on = {str(a)}
    assert w.step(plan, lambda _t: on, [proc(1, a), proc(2, b)]).attach == (("shop", str(b)),)
    w.refuse_file(str(b), None, plan)
    assert w.step(plan, lambda _t: on, [proc(1, a), proc(2, b)]).attach == ()
    other = replace(plan)
    assert w.step(other, lambda _t: on, [proc(1, a), proc(2, b)]).attach == (("shop", str(b)),)
    w.refuse_file(str(b), None, other)
    b.write_bytes(b"a2")  # a new version of the file
    assert w.step(other, lambda _t: on, [proc(1, a), proc(3, b)]).attach == (("shop", str(b)),)


def test_the_watch_compares_with_the_file_as_attached(tmp_path: Path) -> None:
    """A pinned file renamed over after noop attached to it, before the watch's first
    look: the watch compares with the file as it was opened to attach, sees it changed
    and asks for a new plan (read now, it would take the new file for the probed one)."""
    from agent.binary.elf import stamp
    from agent.plan.model import TargetPlan
    from agent.service import watch
    a = tmp_path / "shop"
    a.write_bytes(b"old")
    attached = stamp(str(a))
    staged = tmp_path / "shop.new"
    staged.write_bytes(b"new build")
    os.replace(staged, a)
    target = TargetPlan("shop", str(a), "A", "go", None, None,
                        selector=Selector(path=str(a)), pinned=True)
    plan = Plan("<t>", (target,), ())
    step = watch.Watch().step(plan, lambda _t: {str(a)}, [], stamp=lambda _p: attached)
    assert step.replan == f"target shop: {a} changed on disk"
    assert watch.Watch().step(plan, lambda _t: {str(a)}, []).replan == ""  # as it was


@ATTACH
@ONE_COMPILER
def test_noop_run_refuses_another_containers_copy_without_planning_again(
        privileged: None, example: Path, tmp_path: Path) -> None:
    """noop run finds a process running a copy of the build whose code is not the
    plan's: it says so once and leaves that file unprobed, without making the plan
    again, pass after pass; the target's own process stays probed and counted."""
    from agent.kernel.kfeatures import xmm_helper_available
    from agent.live import discover
    from agent.service import daemon

    name = f"svc{os.getpid()}"  # followed by name: no other test's process has it
    with path_of(example, tmp_path, "a", name) as own:
        plan = _preset(own)
        (target,) = plan.targets
        plan = replace(plan, targets=(replace(
            target, selector=Selector(exe=name), pinned=False),))
        copy = _altered(example, plan, tmp_path / "b", name)
        copy.chmod(0o755)
        said: list[str] = []
        opts = daemon.Options(lambda: plan, plan, True, "127.0.0.1:0", None,
                              xmm_helper_available())
        d = daemon.Daemon(opts)
        from agent.service import following

        original_log = daemon.log

        def say(message: str, priority: int = 0) -> None:
            said.append(message)

        daemon.log = following.log = say  # type: ignore[assignment]
        try:
            d.start()
            with held(own) as (ex, url):
                idle = subprocess.Popen(["sleep", "60"])  # stands in for the copy's process
                try:
                    d.watch.ids.of = lambda p: target.build_id  # type: ignore[method-assign]
                    fake = discover.Process(idle.pid, str(copy), str(copy),
                                            *[getattr(copy.stat(), k) for k in
                                              ("st_dev", "st_ino", "st_mtime_ns",
                                               "st_size")])
                    d.watch.step = _with(d.watch.step, fake)  # type: ignore[method-assign]
                    for _ in range(3):
                        d.rescan()
                finally:
                    idle.kill()
                    idle.wait()
                assert d.health.replans == 0
                assert [m for m in said if "does not hold" in m and str(copy) in m] \
                    and len([m for m in said if str(copy) in m]) == 1, said
                assert d.loaded is not None
                assert {a.binary for a in d.loaded.attachments} == {str(own)}
                ticked(ex)
                own_counts_exact(url)
        finally:
            daemon.log = following.log = original_log  # type: ignore[assignment]
            if d.loaded is not None:
                d.loaded.close()


def _with(step: Callable[..., Any], extra: Any) -> Callable[..., Any]:
    """Watch.step seeing ``extra`` among the processes it finds."""
    from agent.live import discover

    def stepped(plan: Plan, attached: Callable[[str], set[str]], procs: Any = None,
                stamp: Any = None) -> Any:
        return step(plan, attached, [*discover.processes(), extra], stamp=stamp)
    return stepped


# push rbp; mov rbp, rsp; mov eax, 1; pop rbp; ret
_CODE = bytes.fromhex("554889e5b8010000005dc3")


def test_a_decoded_table_is_kept_and_checked(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The instruction boundaries of a function's code are kept by its digest: a warm
    start proves its sites without capstone (a fresh interpreter imports none), and a
    kept table that is not one linear decoding of the code is not used."""
    import base64
    import sys
    import zlib

    monkeypatch.setenv("NOOP_CACHE_DIR", str(tmp_path))
    proof._DECODED.clear()
    first = proof.decoded(_CODE)
    assert [i for i, n in enumerate(first.lengths) if n] == [0, 1, 4, 9, 10]
    code = ("import sys\nfrom agent.binary import proof\n"
            f"d = proof.decoded(bytes.fromhex({_CODE.hex()!r}))\n"
            "print(list(d.lengths), d.end, 'capstone' in sys.modules)")
    warm = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, env={**os.environ, "NOOP_CACHE_DIR": str(tmp_path)},
                          cwd=Path(proof.__file__).parents[2]).stdout.split(" ")
    assert " ".join(warm).strip() == f"{list(first.lengths)} {first.end} False"

    def kept(lengths: bytes, end: int) -> dict[str, object]:
        return {"lengths": base64.b64encode(zlib.compress(lengths)).decode(), "end": end}

    good = bytes(first.lengths)
    assert proof._kept(kept(good, first.end), len(_CODE)) == first
    bad = [kept(good[:-1], first.end),  # another size
           kept(bytes([2]) + good[1:], first.end),  # a start inside an instruction
           kept(good[:3] + bytes([1]) + good[4:], first.end),  # an extra start
           kept(good, first.end - 1), {"lengths": "!", "end": 0}, [], None]
    for value in bad:
        with pytest.raises((ValueError, TypeError, zlib.error)):
            proof._kept(value, len(_CODE))
