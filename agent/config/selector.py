"""How a spec names a target's program: a path, an executable's name or a build-id,
perhaps limited to a container or a pod. Matching running processes against it is
``agent.live.discover``'s; a plan keeps the selector to say what it was made for."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from agent.config.model import Spec, Target
from agent.errors import NoopError

PROC = Path("/proc")  # a path under it reaches a process's own files (its container's)


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


class NotRunning(NoopError):
    """No process runs what a target names (and, named by path, no such file here)."""

    def __init__(self, message: str, hint: str, selector: Selector) -> None:
        super().__init__(message, hint)
        self.selector = selector


def through_proc(path: str) -> bool:
    """Whether ``path`` reaches a process's file through /proc (another container's)."""
    return path.startswith(str(PROC) + "/")


def binary_path(spec: Spec, binary: str) -> str:
    """A target's binary: absolute as given, else relative to the spec file's directory."""
    p = Path(binary)
    if p.is_absolute() or spec.path.startswith("<"):
        return str(p)
    return str(Path(spec.path).parent / p)


def selector_of(spec: Spec, t: Target) -> Selector:
    """How ``t`` names its program, its path made absolute."""
    if t.binary is not None:
        return Selector(path=binary_path(spec, t.binary), container=t.container, pod=t.pod)
    return Selector(exe=t.exe, build_id=t.build_id, container=t.container, pod=t.pod)
