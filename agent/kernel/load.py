"""Load: compile the generated C with BCC, attach every site, drain the ring buffer, and
detach everything on the way out. The only module that imports ``bcc``.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.errors import NoopError
from agent.kernel import aggregate, kheaders, ringbuf
from agent.kernel.codegen import RINGBUF_BYTES, Program
from agent.plan.model import Plan


class LoadError(NoopError):
    """The kernel or BCC refused: no privileges, no headers, no uprobes."""


@dataclass(frozen=True, slots=True)
class Attachment:
    probe: int
    site: int
    binary: str
    address: int
    pid: int  # -1: every process running the binary
    event: str = ""  # BCC's name for the uprobe: what detaches it


def alive(pid: int) -> bool:
    """Whether the process runs (a zombie waiting for its parent does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[:1] not in (["Z"], ["X"])


def bcc_version() -> str:
    """The version of the distribution's BCC, for noop_build_info."""
    try:
        import bcc
    except ImportError:
        return "missing"
    return str(getattr(bcc, "__version__", "unknown"))


def check_targets(plan: Plan) -> None:
    """A target named by PID must be running: say so before spending seconds compiling."""
    for t in plan.targets:
        if t.pid is not None and not alive(t.pid):
            raise LoadError(f"target {t.name}: no process {t.pid}",
                            "check the PID, or leave it out to follow every process")


def check_privileges() -> None:
    """Fail early, in one line, when this process cannot load BPF programs; warn, once
    each, of capabilities without which some targets are out of reach."""
    from agent import logs
    from agent.kernel.privileges import PRIV_FIX, advised_caps, missing_caps

    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        status = ""
    missing = missing_caps(status)
    if missing:
        raise LoadError("not allowed to load BPF programs: missing " + ", ".join(missing),
                        PRIV_FIX)
    for name, why in advised_caps(status):
        if name not in _WARNED:
            _WARNED.add(name)
            logs.say(f"warning: without {name}, {why}", logs.WARNING)


_WARNED: set[str] = set()


def check_headers() -> None:
    kheaders.ensure_bcc_env()
    source = kheaders.find_headers()
    if not source.usable:
        raise LoadError(f"no kernel headers for BCC: {source.detail}", kheaders.INSTALL_HINT
                        + "; then run 'noop headers'")


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[Path]:
    """BCC's compiler writes to fd 2; keep it for the error message instead."""
    import tempfile

    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        os.dup2(tmp.fileno(), 2)
        path = Path(f"/proc/self/fd/{tmp.fileno()}")
        try:
            yield path
        finally:
            os.dup2(saved, 2)
            os.close(saved)


class Loaded:
    """A compiled program with its uprobes attached. Use as a context manager: leaving
    it detaches every probe and frees the maps, whatever happened inside."""

    def __init__(self, plan: Plan, program: Program) -> None:
        check_privileges()
        check_headers()
        check_targets(plan)
        import bcc  # the distribution's BCC; never the PyPI project of that name

        self.plan = plan
        self.program = program
        self.attachments: list[Attachment] = []
        self._bcc = bcc
        self.bpf = _compile(bcc, program.text, "the generated program",
                            "run 'noop doctor'; 'noop check --emit-c' shows the C")
        try:
            events = self._table("noop_events")
            self.ring = ringbuf.Ring(events.map_fd, RINGBUF_BYTES)
            self._overflow_rows()
            calls = kernel_calls(program.calls)
            for _pi, _si, fn in program.functions:
                link_calls(bcc, self.bpf, fn, calls)
            self._attach_all()
        except BaseException:
            self.close()
            raise

    def _attach_all(self) -> None:
        for target in self.plan.targets:
            for path in target.files:
                self.attach_file(target.name, path)

    def attach_file(self, target: str, path: str) -> int:
        """Put every probe of ``target`` on the file at ``path`` too (one of the same
        build, run by other processes); the number of uprobes. Every process running
        the file is probed: a --pid filter is in the program."""
        n = 0
        for pi, si, fn in self.program.functions:
            probe = self.plan.probes[pi]
            if probe.target != target:
                continue
            site = probe.sites[si]
            pid = self.plan.target(target).pid
            event = _attach(self.bpf, path, site.address, fn,
                            f"{probe.name} at {site.function} ({site.address:#x})")
            self.attachments.append(Attachment(pi, si, path, site.address,
                                               pid if pid is not None else -1, event))
            n += 1
        return n

    def detach_file(self, path: str) -> int:
        """Take every uprobe off the file at ``path``; how many there were."""
        gone = [a for a in self.attachments if a.binary == path]
        self.attachments = [a for a in self.attachments if a.binary != path]
        for a in gone:
            with contextlib.suppress(Exception):  # already gone with its file: fine
                self.bpf.detach_uprobe_event(a.event.encode())
        return len(gone)

    def files(self, target: str) -> set[str]:
        """The files ``target``'s probes are on."""
        return {a.binary for a in self.attachments
                if self.plan.probes[a.probe].target == target}

    def wait(self, timeout: float) -> None:
        """Block up to ``timeout`` seconds, or until a record that wakes readers."""
        self.ring.wait(timeout)

    def read(self, on_run: Callable[[ringbuf.Run], None]) -> int:
        """Hand every record committed so far to ``on_run``, in runs of one probe; the
        number of records."""
        n = 0
        for run in self.ring.batch():
            on_run(run)
            n += run.count
        return n

    def _table(self, name: str) -> Any:
        return self.bpf[name.encode()]  # BCC names its tables in bytes

    def _per_probe(self, name: str) -> dict[int, int]:
        table = self._table(name)
        return {pi: sum(int(v) for v in table[pi]) for pi in range(len(self.plan.probes))}

    def lost(self) -> int:
        return sum(self.lost_by_probe().values())

    def lost_by_probe(self) -> dict[int, int]:
        """Records the ring buffer had no room for, per probe (counted in the kernel)."""
        return self._per_probe("noop_lost")

    def produced(self) -> dict[int, int]:
        """Records the BPF programs made, sent or lost, per probe (counted in the kernel)."""
        return self._per_probe("noop_produced")

    def faults(self) -> dict[int, int]:
        return self._per_probe("noop_faults")

    def unpaired(self) -> dict[int, int]:
        """Returns of exit probes whose call's entry was not seen, per probe."""
        return self._per_probe("noop_unpaired")

    def rows(self, probe: int) -> list[tuple[bytes, list[bytes]]]:
        """A probe's in-kernel aggregate: every key with its per-CPU rows, as raw bytes
        (``aggregate.merge`` reads them)."""
        table = self._table(f"noop_agg_{probe}")
        lay = self.program.aggregates[probe]
        # A label-less aggregate is an array of one row: its key is the one a hash would have.
        return [(bytes(lay.key_size) if lay.keyless else bytes(k), [bytes(v) for v in vs])
                for k, vs in table.items()]

    def forget(self, probe: int, keys: list[bytes]) -> None:
        """Delete rows (of processes that exited) from a probe's aggregate."""
        if self.program.aggregates[probe].keyless:
            return  # no key, no process: nothing to forget
        table = self._table(f"noop_agg_{probe}")
        for raw in keys:
            with contextlib.suppress(KeyError):
                del table[table.Key.from_buffer_copy(raw)]

    def _overflow_rows(self) -> None:
        """Create each aggregate's overflow row now, so that a full map still has it."""
        for pi, lay in self.program.aggregates.items():
            if lay.keyless:
                continue
            table = self._table(f"noop_agg_{pi}")
            key = table.Key.from_buffer_copy(bytes([aggregate.OVERFLOW]) * lay.key_size)
            table[key] = table.Leaf()  # zeroes on every CPU

    def close(self) -> None:
        ring = getattr(self, "ring", None)
        if ring is not None:
            ring.close()
        bpf = getattr(self, "bpf", None)
        if bpf is not None:
            bpf.cleanup()
            self.bpf = None
        self.attachments.clear()

    def __enter__(self) -> Loaded:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Bare:
    """A hand-written BPF program attached at one instruction of every process running
    ``binary``: what ``noop bench`` measures noop's generated programs against. Use as
    a context manager; leaving it detaches."""

    def __init__(self, text: str, binary: str, address: int, function: str) -> None:
        check_privileges()
        check_headers()
        import bcc

        self.bpf = _compile(bcc, text, "the program", "run 'noop doctor'")
        try:
            _attach(self.bpf, binary, address, function, f"at {address:#x} in {binary}")
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if getattr(self, "bpf", None) is not None:
            self.bpf.cleanup()
            self.bpf = None

    def __enter__(self) -> Bare:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def kernel_calls(calls: Mapping[int, str]) -> dict[int, tuple[int, int]]:
    """For each stand-in call number of a program, how the kernel names the function
    it stands for (``kfeatures.call_of``)."""
    if not calls:
        return {}
    from agent.kernel import kfeatures

    facts = kfeatures.vmlinux_btf()
    out = {}
    for number, name in calls.items():
        found = kfeatures.call_of(name, facts) if facts is not None else None
        if found is None:
            raise LoadError(f"the kernel has no {name} to call", "run 'noop doctor'")
        out[number] = found
    return out


_CALL = 0x85  # BPF_JMP | BPF_CALL


def link_calls(bcc: Any, bpf: Any, fn: str, calls: Mapping[int, tuple[int, int]]) -> int:
    """Rewrite, in BCC's compiled code of ``fn`` before it is loaded, each helper call
    of a stand-in number in ``calls`` into a call of the kernel function it stands for
    (src_reg, imm): BCC's compiler refuses kfunc declarations. The number of calls
    rewritten."""
    if not calls:
        return 0
    start = bcc.lib.bpf_function_start(bpf.module, fn.encode())
    size = bcc.lib.bpf_function_size(bpf.module, fn.encode())
    if not start:
        raise LoadError(f"BCC compiled no function {fn}", "run 'noop check --emit-c'")
    code = (ctypes.c_uint8 * size).from_address(start)
    n = 0
    for at in range(0, size - 7, 8):  # a lddw's second half has opcode 0: never a call
        imm = int.from_bytes(bytes(code[at + 4:at + 8]), "little", signed=True)
        if code[at] != _CALL or code[at + 1] >> 4 or imm not in calls:
            continue
        src, target = calls[imm]
        code[at + 1] = (code[at + 1] & 0x0F) | (src << 4)
        code[at + 2] = code[at + 3] = 0  # off 0: a kfunc of vmlinux, not of a module
        code[at + 4:at + 8] = list(target.to_bytes(4, "little", signed=True))
        n += 1
    return n


def _compile(bcc: Any, text: str, what: str, hint: str) -> Any:
    """BCC's BPF object for ``text``; its compiler's first error in one line if not."""
    with _quiet_stderr() as err:
        try:
            return bcc.BPF(text=text.encode(), cflags=["-Wno-unused-variable"])
        except Exception as exc:
            raise LoadError(f"BCC could not compile {what}: {_compiler_message(err) or exc}",
                            hint) from None


def _attach(bpf: Any, binary: str, address: int, fn: str, what: str) -> str:
    """A uprobe running ``fn`` at ``address`` of every process of ``binary``; BCC's
    name for it."""
    before = set(bpf.uprobe_fds)
    with _quiet_stderr() as err:
        try:
            bpf.attach_uprobe(name=binary.encode(), addr=address, fn_name=fn.encode(), pid=-1)
        except Exception as exc:
            said = err.read_text(errors="replace")
            hint = ("the kernel will not probe the instruction there (x86 refuses "
                    "LOCK-prefixed ones); probe another function" if "error 524" in said
                    else "run 'noop doctor' to check uprobe support")
            raise LoadError(f"cannot attach {what}: {exc}", hint) from None
    new = set(bpf.uprobe_fds) - before
    return new.pop().decode() if len(new) == 1 else ""


def _compiler_message(path: Path) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    errors = [line for line in text.splitlines() if "error:" in line]
    return (errors[0].split("error:", 1)[1].strip() if errors else "").strip()
