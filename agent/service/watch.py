"""``noop run`` following its targets: processes that start, exit and restart, files
that appear in new containers or change on disk.

Every ``SCAN_EVERY`` seconds one pass over /proc says, for each target, which files of
its build processes run now. A file no process ran before gets the probes (a restarted
target's file too: its probes went when its last process exited); a file no process
runs any more loses them, unless the spec names it by a path on this host (then it
stays probed, so that even a short-lived process is seen from its first instruction).
A process running another build, a waiting target that starts, or a probed file that
changed on disk means the plan is made again: offsets found in one build are never
used on another.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from agent.binary import elf
from agent.binary.elf import Stamp
from agent.live import discover
from agent.plan.model import Plan, TargetPlan

SCAN_EVERY = 1.0  # seconds between passes over /proc
RETRY, MAX_RETRY = 5.0, 600.0  # seconds before making a failed plan again: first, most


@dataclass(frozen=True, slots=True)
class Step:
    """What one pass found to do."""

    replan: str = ""  # why the plan must be made again; "" when it need not
    attach: tuple[tuple[str, str], ...] = ()  # (target, path) to probe as well
    detach: tuple[str, ...] = ()  # paths to take the probes off
    processes: dict[str, int] = field(default_factory=dict)  # per target: running it


class Watch:
    """Compares what runs with what a plan's probes are on, pass after pass."""

    def __init__(self) -> None:
        self.ids = discover.BuildIds()
        self._plan: Plan | None = None
        self._pinned: dict[str, Stamp | None] = {}
        self._files: dict[str, Stamp] = {}  # probed path -> its stamp
        self._state: object = None  # what ran at the last pass: builds per target
        self._refused: object = None  # what ran when making the plan again failed
        self._retry_at = 0.0  # when to try it again all the same (monotonic seconds)
        self._backoff = 0.0  # seconds until then: doubled at each failure, up to MAX
        # files refused a plan's probes (their code is not the plan's): as they were,
        # and the plan
        self._refused_files: dict[str, tuple[Stamp, Plan]] = {}

    def step(self, plan: Plan, attached: Callable[[str], set[str]],
             procs: list[discover.Process] | None = None,
             stamp: Callable[[str], Stamp | None] | None = None) -> Step:
        """One pass, for ``plan`` with its probes on ``attached(target)``; ``stamp(path)``
        is the version of the file attached at ``path`` as it was opened to attach (a
        file renamed over the path since is another version), else read now."""
        def version(path: str) -> Stamp | None:
            return (stamp(path) if stamp is not None else None) or elf.stamp(path)

        if plan is not self._plan:  # a new plan: what its files are now
            self._plan = plan
            self._pinned = {t.binary: version(t.binary) for t in plan.targets if t.pinned}
            self._files = {}
            self._refused = None
        procs = list(discover.processes()) if procs is None else procs
        counts: dict[str, int] = {}
        attach: list[tuple[str, str]] = []
        detach: list[str] = []
        why = ""
        state: list[tuple[str, frozenset[str | None]]] = []
        for name, selector in plan.waiting:
            counts[name] = len(discover.find(selector, ids=self.ids, among=procs))
            state.append((name, frozenset([None]) if counts[name] else frozenset()))
            if counts[name] and not why:
                why = f"target {name} started ({selector.describe()})"
        for t in plan.targets:
            if t.selector is None:
                continue
            found = discover.find(t.selector, t.pid, ids=self.ids, among=procs)
            every = frozenset(self.ids.of(p) for p in found)
            state.append((t.name, every))
            builds = every - {t.build_id}
            mine = [p for p in found if self.ids.of(p) == t.build_id]
            counts[t.name] = len(mine)
            if builds and not why:
                why = (f"target {t.name}: a process runs another build "
                       f"({', '.join(sorted(b or '?' for b in builds))})")
            if t.pinned:
                now_stamp = elf.stamp(t.binary)
                state.append((t.binary, frozenset([str(now_stamp)])))
                if now_stamp != self._pinned.get(t.binary) and not why:
                    why = f"target {t.name}: {t.binary} changed on disk"
            # by inode number: one file in every container of an image (distinct_files)
            running = {p.ino: p for p in discover.distinct_files(mine)}
            rewritten = self._compare(t, plan, running, attached(t.name), version, attach,
                                      detach)
            why = why or rewritten
        self._state = tuple(state)
        if self._state != self._refused:
            self._backoff = 0.0  # what runs changed: a failure from now on waits 5 s
        if why and self._state == self._refused and time.monotonic() < self._retry_at:
            why = ""  # it failed with these builds running: wait, or until that changes
        return Step(why, tuple(attach), tuple(detach), counts)

    def _compare(self, t: TargetPlan, plan: Plan, running: dict[int, discover.Process],
                 on: set[str], version: Callable[[str], Stamp | None],
                 attach: list[tuple[str, str]], detach: list[str]) -> str:
        """Adds to ``attach`` the files of target ``t`` that processes run and its
        probes are not on, to ``detach`` the probed files no process runs any more;
        returns why to plan again (a probed file rewritten), or ''."""
        why = ""
        for path in on:
            if path not in self._files:
                got = version(path)  # the file, while a process still runs it
                if got is not None:
                    self._files[path] = got
        have = {self._files[p][1] for p in on if p in self._files}
        for f, p in running.items():
            if f not in have and not self._turned_away(p, plan):
                attach.append((t.name, p.path))
        for path in on:
            if t.pinned and path == t.binary:
                continue  # named on this host: probed whether or not it runs
            was = self._files.get(path)
            now = running.get(was[1]) if was is not None else None
            if was is None or now is None:
                detach.append(path)  # no process runs it any more
            elif (now.mtime_ns, now.size) != was[2:] and not why:
                why = f"target {t.name}: {now.exe} of process {now.pid} was rewritten"
        return why

    def refuse(self) -> float:
        """Making the plan again failed for what the last pass saw: do not ask again
        until something else runs, or a while has passed (a failure may pass: a limit
        of open files, a process exiting under it): 5 s, doubled at each failure in a
        row, up to 10 minutes. The seconds until then."""
        self._backoff = min(self._backoff * 2, MAX_RETRY) if self._backoff else RETRY
        self._refused = self._state
        self._retry_at = time.monotonic() + self._backoff
        return self._backoff

    def refuse_file(self, path: str, version: Stamp | None, plan: Plan) -> None:
        """The file at ``path`` cannot take ``plan``'s probes: not offered again for
        that plan while the file stays this version (``version``: None, as it is now)."""
        got = version or elf.stamp(path)
        self._refused_files = {p: r for p, r in self._refused_files.items()
                               if r[1] is plan}  # those of older plans are moot
        if got is not None:
            self._refused_files[path] = (got, plan)

    def _turned_away(self, p: discover.Process, plan: Plan) -> bool:
        """Whether the file ``p`` runs was refused ``plan``'s probes as it is now."""
        got = self._refused_files.get(p.path)
        return got is not None and got[1] is plan and \
            got[0] == (p.dev, p.ino, p.mtime_ns, p.size)

    def forget(self, path: str) -> None:
        """``path`` lost its probes."""
        self._files.pop(path, None)
