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

from agent.errors import NoopError
from agent.target import cgroups
from agent.target.elf import ElfFile

PROC = Path("/proc")
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


@dataclass(frozen=True, slots=True)
class Selector:
    """How a target names its executable: exactly one of the three is set."""

    path: str | None = None  # as the host or the process's own container sees it
    exe: str | None = None  # the executable's file name
    build_id: str | None = None  # as ``noop check`` prints it
    # and, whichever names it, only processes in this container (an id or a prefix of
    # one) and this Kubernetes pod (a UID), as /proc/PID/cgroup says
    container: str | None = None
    pod: str | None = None

    def describe(self) -> str:
        if self.path is not None:
            what = self.path
        elif self.exe is not None:
            what = f"an executable named {self.exe}"
        else:
            what = f"build-id {self.build_id}"
        if self.container is not None:
            what += f" in container {self.container}"
        if self.pod is not None:
            what += f" in pod {self.pod}"
        return what

    def admits(self, pid: int, proc: Path = PROC) -> bool:
        """Whether process ``pid`` is in the container and pod, if any, it is limited to."""
        if self.container is None and self.pod is None:
            return True
        w = cgroups.where(pid, proc)
        return w is not None and cgroups.matches(w, self.container, self.pod)


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


Stamp = tuple[int, int, int, int]  # a file's version: device, inode, mtime, size


def stamp(path: str | int) -> Stamp | None:
    """A file's version (of a path, or of an open descriptor); None when it is gone."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size


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
        if hit and selector.admits(p.pid, proc):
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
