"""Writes to probed files, seen as they begin (inotify, in a thread of its own).

A uprobe belongs to a file and an offset. When a file with uprobes is rewritten in
place (``cp new old`` truncates the same inode, and Linux allows it once no process
runs the file), the next process started from it would meet breakpoints at the old
build's offsets, in the middle of other instructions: it would crash. The first
event of such a write (the truncation, or the first block written) reaches noop
within a millisecond or so, well before a copy of a binary completes, and noop takes
the file's probes off at once; the scan over /proc then resolves the new build.
"""

from __future__ import annotations

import ctypes
import os
import select
import struct
import threading
from collections.abc import Callable, Iterable

IN_MODIFY = 0x2  # written or truncated
IN_NONBLOCK, IN_CLOEXEC = 0o4000, 0o2000000
_EVENT = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len (+ name)


class FileWatch:
    """Calls ``on_write(path)`` from its thread when a watched file is written."""

    def __init__(self, on_write: Callable[[str], None]) -> None:
        self._libc = ctypes.CDLL(None, use_errno=True)
        fd = self._libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"inotify_init1: {os.strerror(err)}")
        self.fd = fd
        self.on_write = on_write
        self._wd: dict[str, int] = {}  # path -> watch; paths naming one inode share it
        self._lock = threading.Lock()
        self._stop_r, self._stop_w = os.pipe()
        self._thread = threading.Thread(target=self._loop, name="noop-filewatch",
                                        daemon=True)
        self._thread.start()

    def sync(self, paths: Iterable[str]) -> None:
        """Watch exactly ``paths`` (a path gone already is left to the scan)."""
        wanted = set(paths)
        with self._lock:
            for path in set(self._wd) - wanted:
                wd = self._wd.pop(path)
                if wd not in self._wd.values():
                    self._libc.inotify_rm_watch(self.fd, wd)
            for path in wanted - set(self._wd):
                wd = self._libc.inotify_add_watch(self.fd, os.fsencode(path), IN_MODIFY)
                if wd >= 0:
                    self._wd[path] = wd

    def watched(self) -> set[str]:
        with self._lock:
            return set(self._wd)

    def _loop(self) -> None:
        while True:
            ready, _, _ = select.select([self.fd, self._stop_r], [], [])
            if self._stop_r in ready:
                return
            try:
                data = os.read(self.fd, 65536)
            except BlockingIOError:
                continue
            hit: set[int] = set()
            pos = 0
            while pos + _EVENT.size <= len(data):
                wd, mask, _cookie, length = _EVENT.unpack_from(data, pos)
                pos += _EVENT.size + length
                if mask & IN_MODIFY:
                    hit.add(wd)
            with self._lock:
                paths = [p for p, wd in self._wd.items() if wd in hit]
            for path in paths:
                self.on_write(path)

    def close(self) -> None:
        os.write(self._stop_w, b"x")
        self._thread.join()
        for fd in (self.fd, self._stop_r, self._stop_w):
            os.close(fd)
