"""Which running processes a target names, and the file each one runs.

A target is named by a path, an executable name or a build-id. A process in another
container sees its own mount namespace: ``/proc/PID/exe`` reads as the path inside it,
and ``/proc/PID/root`` + that path reaches the very file from here (``/proc/PID/exe``
too, even when the file was deleted). A uprobe belongs to a file (its inode), so noop
attaches once per distinct file, for every process that runs it, now or later.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from agent.binary.elf import ElfFile, stamp
from agent.config.model import Spec, Target
from agent.config.selector import PROC, NotRunning, Selector, binary_path, selector_of
from agent.errors import NoopError
from agent.live import cgroups

_DELETED = " (deleted)"


@dataclass(frozen=True, slots=True)
class Process:
    pid: int
    exe: str  # the executable's path as the process sees it, in its mount namespace
    path: str  # the same file as noop reaches it
    dev: int
    ino: int
    mtime_ns: int
    size: int

    @property
    def file(self) -> tuple[int, int]:
        """The file's identity, as a path names it (device and inode)."""
        return self.dev, self.ino

    @property
    def name(self) -> str:
        return os.path.basename(self.exe)


def admits(selector: Selector, pid: int, proc: Path = PROC) -> bool:
    """Whether process ``pid`` is in the container and pod, if any, ``selector`` is
    limited to."""
    if selector.container is None and selector.pod is None:
        return True
    w = cgroups.where(pid, proc)
    return w is not None and cgroups.matches(w, selector.container, selector.pod)


def process(pid: int, proc: Path = PROC) -> Process | None:
    """The process ``pid`` and the file it runs; None when it is gone, a kernel thread,
    or out of reach (another user's, without CAP_SYS_PTRACE)."""
    base = proc / str(pid)
    try:
        exe = os.readlink(base / "exe")
        st = os.stat(base / "exe")
    except OSError:
        return None
    deleted = exe.endswith(_DELETED)
    exe = exe.removesuffix(_DELETED)
    # The link reads as a path from noop's root when the file is reachable from there
    # (a chroot): made relative to the process's own root, it is the path it sees.
    try:
        root = os.readlink(base / "root").rstrip("/")
    except OSError:
        root = ""
    if root and exe.startswith(root + "/"):
        exe = exe[len(root):]
    inside = base / "root" / exe.lstrip("/")
    path = str(base / "exe")
    if not deleted:
        try:
            same = os.stat(inside)
            if (same.st_dev, same.st_ino) == (st.st_dev, st.st_ino):
                path = str(inside)
        except OSError:
            pass
    return Process(pid, exe, path, st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)


def processes(proc: Path = PROC) -> Iterator[Process]:
    """Every process whose executable noop can reach, by PID."""
    try:
        pids = sorted(int(e.name) for e in os.scandir(proc) if e.name.isdigit())
    except OSError:
        return
    me = os.getpid()
    for pid in pids:
        if pid == me:
            continue
        p = process(pid, proc)
        if p is not None:
            yield p


class BuildIds:
    """Build-ids of files, read once per file version (device, inode, mtime, size)."""

    def __init__(self) -> None:
        self._known: dict[tuple[int, int, int, int], str | None] = {}

    def of(self, p: Process) -> str | None:
        key = (p.dev, p.ino, p.mtime_ns, p.size)
        if key not in self._known:
            self._known[key] = _build_id(p.path)
        return self._known[key]


def _build_id(path: str) -> str | None:
    try:
        with ElfFile(path) as elf:
            return elf.build_id
    except (NoopError, OSError):
        return None


def find(selector: Selector, pid: int | None = None, proc: Path = PROC,
         ids: BuildIds | None = None, among: list[Process] | None = None) -> list[Process]:
    """The processes (only ``pid``, when given) that run what ``selector`` names, among
    ``among`` when given (one scan of /proc for many targets)."""
    ids = ids or BuildIds()
    version = stamp(selector.path) if selector.path is not None else None
    host = version[:2] if version is not None else None  # the host's file of that path
    if among is not None:
        candidates = [p for p in among if pid is None or p.pid == pid]
    else:
        candidates = ([p] if (p := process(pid, proc)) else []) if pid is not None \
            else list(processes(proc))
    out = []
    for p in candidates:
        if selector.path is not None:
            hit = p.exe == selector.path or p.file == host
        elif selector.exe is not None:
            hit = p.name == selector.exe
        else:
            hit = ids.of(p) == selector.build_id
        if hit and admits(selector, p.pid, proc):
            out.append(p)
    return out


def distinct_files(found: list[Process]) -> list[Process]:
    """One process per file a uprobe attaches to, lowest PID first (``found`` run one
    build). Containers of one image show its file on an overlayfs mount each, every
    mount a device of its own, but with the inode number of the image layer's file: the
    one file the kernel puts a uprobe on (and runs it for every container). Attaching
    once per device would run the probe once per container on every hit."""
    seen: dict[int, Process] = {}
    for p in sorted(found, key=lambda p: p.pid):
        seen.setdefault(p.ino, p)
    return list(seen.values())


class Locator:
    """Where each target of a spec is read from (``agent.plan.resolve.Where``): the
    file its program is read from, and the other files (in other containers) that
    processes run with the same build. A path on this host as it is; else, or when the
    target names an executable or a build-id, what the running processes run, reached
    through /proc. One scan's build-ids serve every target."""

    def __init__(self, proc: Path = PROC) -> None:
        self.proc = proc
        self.ids = BuildIds()

    def __call__(self, spec: Spec, t: Target) -> tuple[str, tuple[str, ...]]:
        if t.binary is not None:
            path = binary_path(spec, t.binary)
            if not Path(t.binary).is_absolute() or os.path.lexists(path):
                return path, ()
        selector = selector_of(spec, t)  # an absolute path not here: as processes see it
        found = distinct_files(find(selector, t.pid, self.proc, ids=self.ids))
        if not found:
            runs = f"process {t.pid} does not run" if t.pid is not None else "no process runs"
            raise NotRunning(("no such file here, and " if t.binary is not None else "") +
                             f"{runs} {selector.describe()}",
                             "start the program first, or check the name (noop looks in "
                             "every process, containers included, through /proc)", selector)
        builds = sorted({self.ids.of(p) or "?" for p in found})
        if len(builds) > 1:
            raise NoopError(f"processes run {len(builds)} builds of {selector.describe()} "
                            f"({', '.join(builds)})", "name one of them by build_id")
        return found[0].path, tuple(p.path for p in found[1:])
