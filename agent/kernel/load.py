"""Load: the generated C compiled and its programs loaded (``objects``: BCC in a child
process, or the cache; maps and programs made through noop's own ``bpfsys`` calls),
every site attached; then the ring buffer drained and the maps read (``tables``), and
everything detached and closed on the way out; a plan made again when a file is not
the build it was made from (``settle``). BCC never runs in this process.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from agent.binary.elf import Stamp
from agent.binary.proof import Opened
from agent.errors import NoopError
from agent.kernel import ringbuf
from agent.kernel.attach import BuildChanged, Handle, Uprobe, attach_proven, take_off
from agent.kernel.objects import Object, build
from agent.kernel.preflight import check_arch, check_privileges, check_targets
from agent.kernel.prelude import RINGBUF_BYTES
from agent.kernel.program import Program
from agent.kernel.tables import Tables
from agent.plan.model import Plan

P = TypeVar("P")


@dataclass(frozen=True, slots=True)
class Attachment:
    probe: int
    site: int
    binary: str
    address: int
    pid: int  # -1: every process running the binary


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


class Loaded(Tables):
    """A compiled program with its uprobes attached. Use as a context manager: leaving
    it detaches every probe and frees the maps, whatever happened inside."""

    def __init__(self, plan: Plan, program: Program,
                 progress: Callable[[str], None] | None = None) -> None:
        check_arch(plan)
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
        # files not probed for now (a process exited, a limit reached): why; a watch
        # offers them again at its next pass
        self.unattached: dict[str, str] = {}
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
                n = len(program.functions)
                progress(f"attaching {n} uprobe{'s' * (n != 1)}")
            self._attach_all()
        except BaseException:
            self.close()
            raise

    def _attach_all(self) -> None:
        """Every target's files. A copy of the target's build elsewhere (another
        container's) whose code is not the plan's, its build-id the same, is refused
        alone (``refused``): planning again would give the same plan. A copy that
        cannot be attached for another reason (its process exited, a limit reached) is
        left out for now (``unattached``) and the others attached. The target's own file
        failing, or a copy of another build, fails the load (to be planned again)."""
        for target in self.plan.targets:
            for n, path in enumerate(target.files):
                try:
                    self.attach_file(target.name, path)
                except BuildChanged as exc:
                    if n == 0 or exc.changed:
                        raise
                    self.refused[path] = exc.message
                except NoopError as exc:
                    if n == 0:
                        raise
                    self.unattached[path] = exc.message

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

    def prog_fds(self, pi: int) -> list[int]:
        """The loaded programs of probe ``pi``."""
        assert self.obj is not None
        return [self.obj.progs[fn] for fn in
                dict.fromkeys(fn for p, _si, fn in self.program.functions if p == pi)]

    def files(self, target: str) -> set[str]:
        """The files ``target``'s probes are on (or would be, those taken off)."""
        return set(self._files.get(target, ()))

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
