"""Which container (and Kubernetes pod) a process runs in, from ``/proc/PID/cgroup``.

Container runtimes name a container's cgroup after its 64-hex id: ``docker-ID.scope``,
``libpod-ID``, ``crio-ID.scope``, ``cri-containerd-ID.scope``, or the bare id under
``/docker/`` or a pod's cgroup. The kubelet names a pod's cgroup ``podUID`` (cgroupfs
driver) or ``kubepods-QOS-podUID.slice`` with the UID's dashes as underscores (systemd
driver). Both are read from the unified hierarchy's line (``0::``) when it holds a path,
else from the first v1 hierarchy that does. A process on the host has neither.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")

_CONTAINER = re.compile(
    r"^(?:(?:docker|libpod|crio|cri-containerd|containerd|cri-o)-)?([0-9a-f]{64})(?:\.scope)?$")
_POD = re.compile(r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_]"
                  r"[0-9a-f]{12})(?:\.slice)?$")


@dataclass(frozen=True, slots=True)
class Where:
    """A process's container id and pod UID; "" where it has none."""

    container: str = ""
    pod: str = ""

    def labels(self) -> tuple[tuple[str, str], ...]:
        """The labels a series from this process carries: none on the host."""
        out = []
        if self.container:
            out.append(("container_id", self.container))
        if self.pod:
            out.append(("pod_uid", self.pod))
        return tuple(out)


HOST = Where()


def parse(text: str) -> Where:
    """The container and pod a ``/proc/PID/cgroup`` text names."""
    paths = []
    for line in text.splitlines():
        hierarchy, _, rest = line.partition(":")
        _controllers, _, path = rest.partition(":")
        if path and path != "/":
            paths.append((hierarchy != "0", path))  # the unified hierarchy's first
    if not paths:
        return HOST
    path = min(paths, key=lambda p: p[0])[1]
    container = pod = ""
    for part in path.split("/"):
        if m := _CONTAINER.match(part):
            container = m.group(1)  # the deepest: a container inside another's cgroup
        elif m := _POD.search(part):
            pod = m.group(1).replace("_", "-")
    return Where(container, pod)


def where(pid: int, proc: Path = PROC) -> Where | None:
    """The container and pod of process ``pid``; None when it is gone."""
    try:
        return parse((proc / str(pid) / "cgroup").read_text())
    except OSError:
        return None


def matches(w: Where, container: str | None, pod: str | None) -> bool:
    """Whether a process in ``w`` is one a target limited to ``container`` (an id or a
    prefix of one, as ``docker ps`` and ``crictl ps`` shorten them) and ``pod`` (a
    UID) may count."""
    if container is not None and not (w.container and w.container.startswith(container)):
        return False
    return pod is None or w.pod == pod


class Processes:
    """Where each process runs, read once per process (a series keeps the labels of its
    process after it exits), and which processes each probe's target admits."""

    def __init__(self, limits: dict[int, tuple[str | None, str | None]] | None = None,
                 proc: Path = PROC) -> None:
        self._limits = {pi: lim for pi, lim in (limits or {}).items() if lim != (None, None)}
        self._proc = proc
        self._known: dict[int, Where] = {}
        self._gone: set[int] = set()  # exited before noop looked: not read again

    def of(self, pid: int) -> Where | None:
        """Where ``pid`` runs; None when it exited before noop could look."""
        w = self._known.get(pid)
        if w is None and pid not in self._gone:
            w = where(pid, self._proc)
            if w is not None:
                self._known[pid] = w
            else:
                if len(self._gone) >= 4096:  # bounded; and a number comes back one day
                    self._gone.clear()
                self._gone.add(pid)
        return w

    def labels(self, pid: int) -> tuple[tuple[str, str], ...]:
        w = self.of(pid)
        return w.labels() if w is not None else ()

    def limited(self, probe: int) -> bool:
        """Whether ``probe``'s target is limited to a container or a pod."""
        return probe in self._limits

    def admits(self, probe: int, pid: int) -> bool:
        """Whether a hit of ``probe`` in ``pid`` counts: its target is limited to no
        container and pod, or ``pid`` runs in them (one that exited unseen does not)."""
        limit = self._limits.get(probe)
        if limit is None:
            return True
        w = self.of(pid)
        return w is not None and matches(w, *limit)

    def forget(self, pids: set[int]) -> None:
        for pid in pids:
            self._known.pop(pid, None)
            self._gone.discard(pid)  # the number may be a new process's next
