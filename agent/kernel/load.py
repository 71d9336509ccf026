"""Load: the generated C compiled (``compile``: BCC in a child process, or the cache),
its maps created and programs loaded through noop's own ``bpfsys`` calls, every site
attached; then the ring buffer drained and the maps read, and everything detached and
closed on the way out. BCC never runs in this process.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from agent.binary.elf import Stamp
from agent.binary.proof import Opened, Proof
from agent.errors import NoopError
from agent.kernel import aggregate, bpfsys, ringbuf
from agent.kernel.attach import (
    BuildChanged,
    Handle,
    LoadError,
    Uprobe,
    attach_kind,
    attach_proven,
    has_links,
    take_off,
)
from agent.kernel.compile import Compiled, compile_c
from agent.kernel.compile import bcc_version as bcc_version
from agent.kernel.prelude import RINGBUF_BYTES
from agent.kernel.program import Program
from agent.plan.model import Plan

P = TypeVar("P")


@dataclass(frozen=True, slots=True)
class Attachment:
    probe: int
    site: int
    binary: str
    address: int
    pid: int  # -1: every process running the binary


def alive(pid: int) -> bool:
    """Whether the process runs (a zombie waiting for its parent does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[:1] not in (["Z"], ["X"])


def check_targets(plan: Plan) -> None:
    """A target named by PID must be running it: say so before spending seconds
    compiling."""
    for t in plan.targets:
        if t.pid is None:
            continue
        why = "" if alive(t.pid) else f"no process {t.pid}"
        if not why and not maps_file(t.pid, t.binary):
            why = f"process {t.pid} does not run {t.binary} ({_exe(t.pid)})"
        if why:
            error = LoadError(f"target {t.name}: {why}",
                              "check the PID, or leave it out to follow every process")
            error.exit_code = 2
            raise error


def maps_file(pid: int, path: str) -> bool:
    """Whether process ``pid`` has file ``path`` mapped (its program, or a library):
    the same device and inode, whatever path it was opened by."""
    try:
        st = os.stat(path)
        maps = Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False
    dev = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}"
    for line in maps.splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) >= 5 and fields[4] == str(st.st_ino) and fields[3] == dev:
            return True
    return False


def _exe(pid: int) -> str:
    try:
        return f"it runs {os.readlink(f'/proc/{pid}/exe')}"
    except OSError:
        return "its program cannot be read: a kernel thread, or another user's"


def check_privileges() -> None:
    """Fail early, in one line, when this process cannot load BPF programs; warn, once
    each, of capabilities without which some targets are out of reach."""
    from agent import logs
    from agent.kernel.privileges import PRIV_FIX, advised_caps, last_cap, missing_caps

    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        status = ""
    kind = attach_kind()
    # Links need fewer capabilities; where a program would not even load for them,
    # what links need is what to name (perf-event uprobes need those and more).
    missing = missing_caps(status, last_cap(), kind.multi or (kind.denied and has_links()))
    if missing:
        raise LoadError("not allowed to load BPF programs: missing " + ", ".join(missing),
                        PRIV_FIX)
    if kind.denied:  # every capability held, and still refused: seccomp, an LSM
        raise LoadError(f"not allowed to load BPF programs: {kind.why}",
                        "a seccomp profile or security module refuses bpf() to these "
                        "capabilities; a container runtime's default profile may allow it "
                        "only with CAP_SYS_ADMIN: give noop a profile that allows bpf() "
                        "with CAP_BPF and perf_event_open() with CAP_PERFMON "
                        "(deploy/kubernetes/seccomp-profile), or add CAP_SYS_ADMIN")
    for name, why in advised_caps(status):
        if name not in _WARNED:
            _WARNED.add(name)
            logs.say(f"warning: without {name}, {why}", logs.WARNING)


_WARNED: set[str] = set()


REPLANS = 2  # plans made again when a file is not what its plan was made from


def settle(made: P, load: Callable[[P], Loaded], again: Callable[[], P] | None,
           say: Callable[[str], None]) -> tuple[P, Loaded]:
    """``load(made)``; when a file turns out not to be what ``made`` was planned from
    (BuildChanged: a new build renamed over its path, a damaged cache entry), what noop
    kept about that build is forgotten and ``again()`` is planned and loaded instead,
    up to REPLANS times; ``say`` hears why."""
    for attempt in range(REPLANS + 1):
        try:
            return made, load(made)
        except BuildChanged as exc:
            if again is None or attempt == REPLANS:
                raise
            exc.distrust()
            say(f"{exc.message}: resolving again")
            made = again()
    raise AssertionError("unreachable")


class Object:
    """A compiled program in the kernel: its maps created, its functions loaded (the
    stand-in calls of ``calls`` linked first). ``close`` frees all of it."""

    def __init__(self, compiled: Compiled, functions: list[str],
                 calls: Mapping[int, tuple[int, int]] | None = None) -> None:
        self.maps: dict[str, bpfsys.Map] = {}
        self.progs: dict[str, int] = {}
        try:
            for d in compiled.maps:
                self.maps[d.name] = bpfsys.Map(d)
            for name in functions:
                fn = compiled.functions.get(name)
                if fn is None:
                    raise LoadError(f"BCC compiled no function {name}",
                                    "run 'noop check --emit-c'")
                code = bytearray(fn.insns)
                for at, m in fn.maps:  # the map's fd into its lddw, as BCC's loader does
                    struct.pack_into("<i", code, at * 8 + 4, self.maps[m].fd)
                link_calls(code, calls or {})
                self.progs[name] = bpfsys.load_program(
                    name, bytes(code), compiled.license, compiled.kern_version,
                    bpfsys.ATTACH_UPROBE_MULTI if attach_kind().multi else 0)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        for fd in self.progs.values():
            bpfsys.close_fd(fd)
        self.progs.clear()
        for m in self.maps.values():
            m.close()
        self.maps.clear()

    def __enter__(self) -> Object:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def build(text: str, functions: list[str], calls: Mapping[int, str] | None = None,
          progress: Callable[[str], None] | None = None) -> Object:
    """Compile (or find in the cache) ``text`` and load ``functions`` of it."""
    n = len(functions)
    compiled = compile_c(text, f"compiling {n} BPF program{'s' * (n != 1)}", progress)
    if progress is not None:
        progress(f"loading {n} BPF program{'s' * (n != 1)}"
                 + (" (compiled before)" if compiled.cached else ""))
    return Object(compiled, functions, kernel_calls(calls or {}))


class Loaded:
    """A compiled program with its uprobes attached. Use as a context manager: leaving
    it detaches every probe and frees the maps, whatever happened inside."""

    def __init__(self, plan: Plan, program: Program,
                 progress: Callable[[str], None] | None = None) -> None:
        check_privileges()
        check_targets(plan)
        self.plan = plan
        self.program = program
        self.attachments: list[Attachment] = []
        self._probes: list[Handle] = []  # one per attachment; a link serves several
        self.off: set[int] = set()  # probes taken off (their budget): not attached
        # target -> the files it is attached to, each open: checked and attached through
        # the descriptor, so that whatever is renamed over the path later is not used
        self._files: dict[str, dict[str, Opened]] = {}
        self.refused: dict[str, str] = {}  # files not probed: why, in a line
        self.obj: Object | None = None
        self.ring: ringbuf.Ring | None = None
        names = list(dict.fromkeys(fn for _pi, _si, fn in program.functions))
        self.obj = build(program.text, names, program.calls, progress)
        try:
            self.ring = ringbuf.Ring(self.obj.maps["noop_events"].fd, RINGBUF_BYTES)
            self._overflow_rows()
            self._trap_rows()
            self._only()
            if progress is not None:
                progress(f"attaching {len(program.functions)} uprobes")
            self._attach_all()
        except BaseException:
            self.close()
            raise

    def _attach_all(self) -> None:
        """Every target's files. A copy of the target's build elsewhere (another
        container's) whose code is not the plan's, its build-id the same, is refused
        alone (``refused``): planning again would give the same plan. The target's own
        file failing, or a copy of another build, fails the load (to be planned again)."""
        for target in self.plan.targets:
            for n, path in enumerate(target.files):
                try:
                    self.attach_file(target.name, path)
                except BuildChanged as exc:
                    if n == 0 or exc.changed:
                        raise
                    self.refused[path] = exc.message

    def attach_file(self, target: str, path: str) -> int:
        """Put every probe of ``target`` on the file at ``path`` too (one of the same
        build, run by other processes); the number of uprobes. Every process running
        the file is probed: a --pid filter is in the program. The file is opened once
        and kept open: every site is proven on it, and attached through it
        (BuildChanged when a site cannot be proven there)."""
        assert self.obj is not None
        files = self._files.setdefault(target, {})
        opened = files.get(path)
        fresh = opened is None
        if opened is None:
            opened = Opened(path)
        try:
            n = self._attach(path, opened, lambda pi: self.plan.probes[pi].target == target
                             and pi not in self.off)
        except BaseException:
            if fresh:
                opened.close()
            raise
        files[path] = opened
        return n

    def stamp(self, path: str) -> Stamp | None:
        """(device, inode, mtime, size) of the file attached at ``path``, as opened."""
        return next((f[path].stamp for f in self._files.values() if path in f), None)

    def _attach(self, path: str, opened: Opened, which: Callable[[int], bool]) -> int:
        assert self.obj is not None
        chosen: list[tuple[Attachment, Uprobe]] = []
        for pi, si, fn in self.program.functions:
            if not which(pi):
                continue
            probe = self.plan.probes[pi]
            site = probe.sites[si]
            pid = self.plan.target(probe.target).pid
            chosen.append((Attachment(pi, si, path, site.address,
                                      pid if pid is not None else -1),
                           Uprobe(site.file_offset, site.proof, self.obj.progs[fn],
                                  f"{probe.name} at {site.function} ({site.address:#x})",
                                  si if self.program.cookies else None, pi, pid or 0)))
        probes = attach_proven(path, opened, [u for _a, u in chosen])
        self.attachments += [a for a, _u in chosen]
        self._probes += probes
        return len(probes)

    def detach_file(self, path: str) -> int:
        """Take every uprobe off the file at ``path``; how many there were."""
        n = self._detach(lambda a: a.binary == path)
        for files in self._files.values():
            opened = files.pop(path, None)
            if opened is not None:
                opened.close()
        return n

    def _detach(self, which: Callable[[Attachment], bool]) -> int:
        """Take the uprobes ``which`` picks off; how many there were."""
        pairs = list(zip(self.attachments, self._probes, strict=True))
        gone = [probe for a, probe in pairs if which(a)]
        # Off the lists first: a scrape in between counts them gone, as they soon are.
        self.attachments = [a for a, _ in pairs if not which(a)]
        self._probes = [probe for a, probe in pairs if not which(a)]
        kept = {id(h) for h in self._probes}
        # A link holds the sites of one probe on one file: every way of picking takes
        # all of them, so no link is shared by what goes and what stays.
        assert not any(id(h) in kept for h in gone), "a link split between kept and gone"
        take_off(gone)
        return len(gone)

    def detach_probe(self, pi: int) -> int:
        """Take every uprobe of probe ``pi`` off (until ``attach_probe``); how many."""
        self.off.add(pi)
        return self._detach(lambda a: a.probe == pi)

    def attach_probe(self, pi: int) -> int:
        """Put probe ``pi`` back on every file its target's probes are on; how many
        uprobes. A file whose process exited meanwhile is left to the next pass."""
        self.off.discard(pi)
        n = 0
        files = self._files.get(self.plan.probes[pi].target, {})
        for path in sorted(files):
            try:
                n += self._attach(path, files[path], lambda p: p == pi)
            except BuildChanged as exc:  # written in place meanwhile: off it entirely
                self.detach_file(path)
                self.refused[path] = exc.message
            except NoopError:
                continue
        return n

    def traps(self) -> dict[tuple[int, int], int]:
        """Hits per (site, process) since loading, as the programs counted them: every
        trap, also of processes a --pid filter then leaves out (process 0: those the
        map had no room for). Sites are numbered as ``Program.sites``."""
        return trap_counts(self._map("noop_traps"))

    def forget_traps(self, pids: set[int]) -> None:
        """Delete the hit counts of processes that exited."""
        table = self._map("noop_traps")
        for k in table.listed():
            if struct.unpack("<II", k)[1] in pids:
                table.delete(k)

    def prog_fds(self, pi: int) -> list[int]:
        """The loaded programs of probe ``pi``."""
        assert self.obj is not None
        return [self.obj.progs[fn] for fn in
                dict.fromkeys(fn for p, _si, fn in self.program.functions if p == pi)]

    def files(self, target: str) -> set[str]:
        """The files ``target``'s probes are on (or would be, those taken off)."""
        return set(self._files.get(target, ()))

    def wait(self, timeout: float) -> None:
        """Block up to ``timeout`` seconds, or until a record that wakes readers."""
        assert self.ring is not None
        self.ring.wait(timeout)

    def read(self, on_run: Callable[[ringbuf.Run], None]) -> int:
        """Hand every record committed so far to ``on_run``, in runs of one probe; the
        number of records."""
        assert self.ring is not None
        n = 0
        for run in self.ring.batch():
            on_run(run)
            n += run.count
        return n

    def _map(self, name: str) -> bpfsys.Map:
        assert self.obj is not None
        return self.obj.maps[name]

    def _per_probe(self, name: str) -> dict[int, int]:
        table = self._map(name)
        out = {}
        for pi in range(len(self.plan.probes)):
            out[pi] = sum(int.from_bytes(row[:8], "little")
                          for row in table.rows(pi.to_bytes(4, "little")))
        return out

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

    def cancelled(self) -> dict[int, int]:
        """Calls of async fns whose future was dropped before it completed, per probe."""
        return self._per_probe("noop_cancelled")

    def rows(self, probe: int) -> list[tuple[bytes, list[bytes]]]:
        """A probe's in-kernel aggregate: every key with its per-CPU rows, as raw bytes
        (``aggregate.merge`` reads them)."""
        table = self._map(f"noop_agg_{probe}")
        lay = self.program.aggregates[probe]
        if lay.keyless:  # an array of one row: its key is the one a hash would have
            return [(bytes(lay.key_size), table.rows(bytes(4)))]
        out = []
        for k in table.listed():
            got = table.rows(k)
            if got:  # deleted since the keys were listed: gone
                out.append((k, got))
        return out

    def forget(self, probe: int, keys: list[bytes]) -> None:
        """Delete rows (of processes that exited) from a probe's aggregate."""
        if self.program.aggregates[probe].keyless:
            return  # no key, no process: nothing to forget
        table = self._map(f"noop_agg_{probe}")
        for raw in keys:
            table.delete(raw)

    def take(self, probe: int, keys: list[bytes]) -> list[tuple[bytes, list[bytes]]]:
        """Rows of a probe's aggregate, each read and deleted at once: what each held
        last, no hit lost between the two."""
        table = self._map(f"noop_agg_{probe}")
        return [(raw, got) for raw in keys if (got := table.take(raw))]

    def _overflow_rows(self) -> None:
        """Create each aggregate's overflow row now, so that a full map still has it."""
        for pi, lay in self.program.aggregates.items():
            if lay.keyless:
                continue
            table = self._map(f"noop_agg_{pi}")
            table.update(bytes([aggregate.OVERFLOW]) * lay.key_size,
                         bytes(table.d.value_size))  # zeroes on every CPU

    def _trap_rows(self) -> None:
        """Create each site's row of process 0 now: hits of processes past the map's
        room are counted there."""
        table = self._map("noop_traps")
        zero = bytes(table.d.value_size)
        for n in range(len(self.program.sites)):
            table.update(struct.pack("<II", n, 0), zero)

    def _only(self) -> None:
        """The process each target is limited to, where it is (``prelude.only_c``)."""
        table = self._map("noop_only")
        for ti, target in enumerate(self.plan.targets):
            if target.pid is not None:
                table.update(struct.pack("<I", ti), struct.pack("<I", target.pid))

    def close(self) -> None:
        take_off(self._probes)
        self._probes.clear()
        for files in self._files.values():
            for opened in files.values():
                opened.close()
        self._files.clear()
        if self.ring is not None:
            self.ring.close()
            self.ring = None
        if self.obj is not None:
            self.obj.close()
            self.obj = None
        self.attachments.clear()

    def __enter__(self) -> Loaded:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Bare:
    """A hand-written BPF program attached at one instruction (``offset`` in the file)
    of every process running ``binary``: what ``noop bench`` measures noop's generated
    programs against. ``text`` None: the empty program (``return 0``), loaded as its
    two instructions with no compiler. Use as a context manager; leaving it
    detaches."""

    def __init__(self, text: str | None, binary: str, offset: int, function: str,
                 proof: Proof | None) -> None:
        check_privileges()
        self.obj: Object | None = None
        self.fd = -1
        self.probe: Handle | None = None
        try:
            if text is None:
                self.fd = bpfsys.load_program(
                    function[:15], bpfsys.EMPTY, "GPL", 0,
                    bpfsys.ATTACH_UPROBE_MULTI if attach_kind().multi else 0)
                prog = self.fd
            else:
                self.obj = build(text, [function])
                prog = self.obj.progs[function]
            with Opened(binary) as opened:
                (self.probe,) = attach_proven(binary, opened, [Uprobe(
                    offset, proof, prog, f"at file offset {offset:#x} of {binary}")])
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self.probe is not None:
            self.probe.close()
            self.probe = None
        if self.obj is not None:
            self.obj.close()
            self.obj = None
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> Bare:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def trap_counts(table: bpfsys.Map) -> dict[tuple[int, int], int]:
    """A noop_traps map's hits, per (site, process), summed over the CPUs."""
    out = {}
    for k in table.listed():
        site, pid = struct.unpack("<II", k)
        out[(site, pid)] = sum(int.from_bytes(v[:8], "little") for v in table.rows(k))
    return out


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


def link_calls(code: bytearray, calls: Mapping[int, tuple[int, int]]) -> int:
    """Rewrite, in compiled code before it is loaded, each helper call of a stand-in
    number in ``calls`` into a call of the kernel function it stands for (src_reg,
    imm): BCC's compiler refuses kfunc declarations. The number of calls rewritten."""
    n = 0
    for at in range(0, len(code) - 7, 8):  # a lddw's second half has opcode 0: never a call
        imm = int.from_bytes(bytes(code[at + 4:at + 8]), "little", signed=True)
        if code[at] != _CALL or code[at + 1] >> 4 or imm not in calls:
            continue
        src, target = calls[imm]
        code[at + 1] = (code[at + 1] & 0x0F) | (src << 4)
        code[at + 2] = code[at + 3] = 0  # off 0: a kfunc of vmlinux, not of a module
        code[at + 4:at + 8] = target.to_bytes(4, "little", signed=True)
        n += 1
    return n


