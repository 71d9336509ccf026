"""The daemon's following of what runs: at each pass over /proc, probes onto the files
of the targets' builds that processes started running and off those no process runs
any more, the plan made again when the builds changed; probes off a file at once when
it is written (``filewatch``), and files refused or not attached for now said."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from agent import logs
from agent.errors import NoopError
from agent.kernel.attach import BuildChanged
from agent.output.exporter import Health
from agent.plan.model import Plan
from agent.service.filewatch import FileWatch
from agent.service.watch import Watch

if TYPE_CHECKING:
    from agent.kernel.load import Loaded


def log(message: str, priority: int = logs.INFO) -> None:
    logs.say(message, priority)


class Following:
    """What the daemon holds that following needs; ``reload`` makes the plan again."""

    watch: Watch
    lock: threading.Lock
    written: set[str]  # probed files written since the plan was made
    files: FileWatch | None
    loaded: Loaded | None
    plan: Plan
    health: Health

    def reload(self, reason: str = "") -> None:
        raise NotImplementedError

    def rescan(self) -> None:
        """One pass of ``watch``: probes onto files that started running, off those no
        process runs any more; the plan made again when the builds changed."""
        loaded = self.loaded
        with self.lock:
            written = sorted(self.written)
        if written:  # its probes are off already (filewatch): read what it holds now
            self.reload(f"{written[0]} was written")
            return
        with self.lock:
            step = self.watch.step(self.plan, loaded.files if loaded is not None
                                   else lambda _t: set(),
                                   stamp=loaded.stamp if loaded is not None else None)
        self.health.processes = step.processes
        if step.replan:
            self.reload(step.replan)
            return
        if loaded is None:
            return
        with self.lock:
            for path in step.detach:
                n = loaded.detach_file(path)
                self.watch.forget(path)
                log(f"detached {n} uprobe{'s' * (n != 1)} from {path}: no process runs it")
            changed = None
            for target, path in step.attach:
                try:
                    n = loaded.attach_file(target, path)
                except BuildChanged as exc:
                    if exc.changed:  # another build: plan it again
                        changed = exc
                        break
                    self._refuse(path, exc.message)  # this build, other code: not it
                    continue
                except NoopError as exc:  # its process exited meanwhile: the next pass
                    loaded.detach_file(path)
                    log(f"target {target}: cannot attach to {path}: {exc.message}",
                        logs.WARNING)
                    continue
                log(f"target {target}: attached {n} uprobe{'s' * (n != 1)} to {path}")
        self._files_changed()
        if changed is not None:
            changed.distrust()
            self.reload(changed.message)

    def _refuse(self, path: str, why: str) -> None:
        """Leave the file at ``path`` unprobed while it stays as it is, said once."""
        self.watch.refuse_file(path, None, self.plan)
        log(f"{why}: that file is not probed", logs.WARNING)

    def _refused_at_load(self) -> None:
        """Files the load left unprobed (``Loaded.refused``), said and remembered; those
        it could not attach for now, said (the next pass tries them again)."""
        if self.loaded is not None:
            for path, why in sorted(self.loaded.refused.items()):
                self._refuse(path, why)
            for path, why in sorted(self.loaded.unattached.items()):
                log(f"cannot attach to {path} now: {why} (tried again at the next pass)",
                    logs.WARNING)

    def _files_changed(self) -> None:
        """Watch for writes exactly the files probes are on now."""
        if self.files is not None:
            with self.lock:
                # a probe off for its budget keeps its files watched, to come back on
                paths = set().union(*(self.loaded.files(t.name) for t in self.plan.targets)
                                    ) if self.loaded else set()
            self.files.sync(paths)

    def _written(self, path: str) -> None:
        """From filewatch's thread: ``path`` is being written. Its probes come off now;
        the next pass over /proc sees the file changed and resolves it again."""
        with self.lock:
            self.written.add(path)
            n = self.loaded.detach_file(path) if self.loaded is not None else 0
            self.watch.forget(path)
        if n:
            log(f"{path} is being written: detached {n} uprobe{'s' * (n != 1)}", logs.WARNING)
