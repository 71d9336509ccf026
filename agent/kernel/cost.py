"""What a uprobe hit costs the probed thread, per site class, on this machine.

A hit is a breakpoint trap, the kernel's uprobe handling and the BPF program, all in
the target thread's own kernel time. The trap and handling cost depends on how the
kernel runs the probed instruction (``sites.handling``): an emulated one (a relative
jump or call, a push) is done inside the trap; any other is single-stepped out of
line, a second trap. noop measures both once per kernel and CPU model, in its own
process: it maps a few instructions of its own (a loop over one emulated and one
single-stepped instruction) from a file, puts an empty BPF program on each in turn,
and times the loop with and without it in the thread's CPU time. The answer is kept
in the cache. What noop's own programs add on top is the kernel's run-time count of
each program (``RunTimes``), where the kernel keeps one.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import math
import mmap
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from agent import cache as disk
from agent.binary import proof, sites
from agent.errors import NoopError
from agent.kernel import bpfsys
from agent.plan import plain

EMPTY_C = "int noop_bench_empty(struct pt_regs *ctx)\n{\n\treturn 0;\n}\n"
CLASSES = (sites.EMULATED, sites.SINGLE_STEPPED)
# The loop calibrated: rdi iterations of one emulated and one single-stepped
# instruction, each probed in turn.
#   0: eb 00      jmp 2         (emulated: a relative jump)
#   2: 48 89 f8   mov rax, rdi  (single-stepped)
#   5: 48 ff cf   dec rdi
#   8: 75 f6      jnz 0
#  10: c3         ret
LOOP = bytes.fromhex("eb00" "4889f8" "48ffcf" "75f6" "c3")
AT = {sites.EMULATED: 0, sites.SINGLE_STEPPED: 2}
# arm64's: x0 iterations of one simulated and one single-stepped instruction.
#   0: 14000001  b 4               (simulated: a branch)
#   4: aa0003e1  mov x1, x0        (single-stepped)
#   8: f1000400  subs x0, x0, #1
#  12: 54ffffa1  b.ne 0
#  16: d65f03c0  ret
LOOP_ARM64 = b"".join(w.to_bytes(4, "little") for w in (
    0x14000001, 0xAA0003E1, 0xF1000400, 0x54FFFFA1, 0xD65F03C0))
# each architecture's loop, where its two classes are in it, and its padding (a trap)
_LOOPS = {"x86-64": (LOOP, AT, b"\xcc"),
          "arm64": (LOOP_ARM64, {sites.EMULATED: 0, sites.SINGLE_STEPPED: 4}, b"\0")}
HITS = {sites.EMULATED: 20_000, sites.SINGLE_STEPPED: 4_000}  # ~15 ms and ~40 ms here
ROUNDS = 5


@dataclass(frozen=True, slots=True)
class Costs:
    """Nanoseconds a hit costs the probed thread, per site class (an empty program)."""

    ns: dict[str, float]
    machine: str  # the kernel and CPU model measured on
    cached: bool = False

    def per_hit(self, handling: str) -> float:
        """The cost of a hit at a site the kernel handles as ``handling`` (a site whose
        handling is unknown counts as single-stepped, the dearer)."""
        return self.ns.get(handling, self.ns[sites.SINGLE_STEPPED])

    def describe(self) -> str:
        return ", ".join(f"{c} {self.ns[c]:,.0f} ns" for c in CLASSES)


def machine() -> str:
    """What the costs depend on: the kernel (release and build) and the CPU model."""
    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.partition(":")[2].strip()
                break
    u = platform.uname()
    return f"{u.release} {u.version} | {model or u.machine}"


@cache
def costs() -> Costs:
    """This machine's costs: from the cache, else calibrated now (needs root; under a
    second) and cached."""
    key = machine()
    kept = _kept(key)
    if kept is not None:
        return kept
    measured = calibrate()
    disk.put("machine", "uprobe-costs", key, measured.ns)  # never raises: skipped if full
    return measured


def known() -> Costs | None:
    """The costs if they are cached (or measured already): never calibrates."""
    if costs.cache_info().currsize:
        return costs()
    return _kept(machine())


def _kept(key: str) -> Costs | None:
    """The costs the cache keeps for machine ``key``, if they are ones calibrate gives."""
    got = disk.get("machine", "uprobe-costs", key, load=_ns)
    return Costs(got, key, cached=True) if got is not None else None


def _ns(value: object) -> dict[str, float]:
    """A cached ``Costs.ns``: a finite, non-negative number for each class, else raises."""
    ns: dict[str, float] = plain.load(dict[str, float], value)
    if not all(math.isfinite(ns[c]) and ns[c] >= 0 for c in CLASSES):
        raise ValueError(f"not costs: {value!r}")
    return {c: ns[c] for c in CLASSES}


def calibrate() -> Costs:
    """Measure what a hit costs at each site class, in this process."""
    from agent.binary import isa
    from agent.binary.arch import AMD64, host
    from agent.kernel import objects

    arch = (host() or AMD64).name
    loop, where, _pad = _LOOPS[arch]
    decoded = isa.of(arch).decode(loop, 0)
    for c, at in where.items():  # the loop's bytes are what the names say
        assert isa.of(arch).handling(next(i for i in decoded if i.address == at)) == c, c
    with _loop(arch) as (path, run):
        ns = {}
        for c in CLASSES:
            n = HITS[c]
            run(n)  # fault the page in, warm the caches
            samples = []
            with objects.Bare(None, path, where[c], "noop_bench_empty",  # no compiler: fast
                              proof.of_code(loop, 0, where[c], arch=arch)):
                run(n)
                for _ in range(ROUNDS):
                    samples.append(_time(run, n))
            bare = statistics.median(_time(run, n) for _ in range(ROUNDS))
            ns[c] = max(0.0, (statistics.median(samples) - bare) / n)
    return Costs(ns, machine())


def _time(run: Callable[[int], object], n: int) -> float:
    t0 = time.thread_time_ns()
    run(n)
    return float(time.thread_time_ns() - t0)


@contextlib.contextmanager
def _loop(arch: str = "x86-64") -> Iterator[tuple[str, Callable[[int], object]]]:
    """The loop (``arch``'s) in a file of its own, mapped executable into this process:
    its path and a function running it ``n`` times. A directory mounted noexec is
    skipped."""
    loop, _where, pad = _LOOPS[arch]
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long)
    libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
    why = "no directory to write it in"
    for parent in (disk.cache_dir(), Path(tempfile.gettempdir()), Path("/dev/shm")):
        try:
            parent.mkdir(parents=True, exist_ok=True)
            workdir = tempfile.mkdtemp(prefix="calibrate-", dir=parent)
        except OSError as exc:
            why = f"{parent}: {exc.strerror or exc}"
            continue
        path = os.path.join(workdir, "loop")
        try:
            try:  # a full or read-only disk: the next directory
                with open(path, "wb") as f:
                    f.write(loop.ljust(mmap.PAGESIZE, pad))
                fd = os.open(path, os.O_RDONLY)
            except OSError as exc:
                why = f"{parent}: {exc.strerror or exc}"
                continue
            try:
                addr = libc.mmap(None, mmap.PAGESIZE, mmap.PROT_READ | mmap.PROT_EXEC,
                                 mmap.MAP_PRIVATE, fd, 0)
            finally:
                os.close(fd)
            if addr in (None, ctypes.c_void_p(-1).value):
                why = f"{parent}: {os.strerror(ctypes.get_errno())} (mounted noexec?)"
                continue
            try:
                yield path, ctypes.CFUNCTYPE(None, ctypes.c_long)(addr)
            finally:
                libc.munmap(addr, mmap.PAGESIZE)
            return
        finally:
            with contextlib.suppress(OSError):
                os.unlink(path)
            with contextlib.suppress(OSError):
                os.rmdir(workdir)
    raise NoopError(f"cannot calibrate uprobe costs: {why}",
                    "set NOOP_CACHE_DIR to a directory that allows executables")


STATS_SYSCTL = Path("/proc/sys/kernel/bpf_stats_enabled")


class RunTimes:
    """The kernel's run time of BPF programs, switched on while this is open
    (``BPF_ENABLE_STATS``: the kernel then reads the clock twice per program run, a
    few tens of ns), or already on for every program (the ``kernel.bpf_stats_enabled``
    sysctl). ``available`` is False where neither: before 5.8, or without
    CAP_SYS_ADMIN (which the command needs) and the sysctl off; ``why`` says which."""

    def __init__(self) -> None:
        self.why = ""
        try:
            self.fd = bpfsys.enable_run_time_stats()
        except OSError as exc:
            self.fd = -1
            if self._sysctl_on():
                return
            self.why = ("without CAP_SYS_ADMIN noop cannot have the kernel time BPF "
                        "programs (BPF_ENABLE_STATS), and sysctl kernel.bpf_stats_enabled "
                        "is 0" if exc.errno in (errno.EPERM, errno.EACCES)
                        else "this kernel does not time BPF programs (BPF_ENABLE_STATS)")

    @staticmethod
    def _sysctl_on() -> bool:
        try:
            return STATS_SYSCTL.read_text().strip() == "1"
        except OSError:
            return False

    @property
    def available(self) -> bool:
        return self.fd >= 0 or (not self.why and self._sysctl_on())

    def of(self, prog_fds: list[int]) -> int:
        """Nanoseconds the kernel ran these programs, in all."""
        if not self.available:
            return 0
        total = 0
        for fd in prog_fds:
            with contextlib.suppress(OSError):
                total += bpfsys.prog_run_time(fd)[0]
        return total

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
