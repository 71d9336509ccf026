"""Reading a running process's memory, never writing it: ``process_vm_readv`` in
batches (one system call for up to ``IOV_MAX`` ranges), each range read whole or not
at all, and where each ELF file is loaded (the bias to add to its link-time
addresses). Reading another process needs ptrace access to it (root with
CAP_SYS_PTRACE, and Yama's ptrace_scope allowing it); ``check`` says in one line when
it is missing.

Nothing here stops or attaches to the process: a read sees the memory as it is at that
moment, and what it means (a torn or freed object) is the reader's to validate.
"""

from __future__ import annotations

import bisect
import ctypes
import ctypes.util
import errno
import itertools
import os
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from agent.errors import NoopError

IOV_MAX = 1024  # ranges one process_vm_readv call takes (Linux's UIO_MAXIOV)
_MAX_READ = 1 << 24  # bytes one range may ask: a bound on a damaged length read from memory


class _Iovec(ctypes.Structure):
    _fields_ = [("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t)]


_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_readv = _libc.process_vm_readv
_readv.restype = ctypes.c_ssize_t
_readv.argtypes = [ctypes.c_int, ctypes.POINTER(_Iovec), ctypes.c_ulong,
                   ctypes.POINTER(_Iovec), ctypes.c_ulong, ctypes.c_ulong]


class Unreadable(NoopError):
    """The process's memory cannot be read: it exited, or noop may not read it."""


class Damaged(Unreadable):
    """What was read is not a value of the type it should be (a torn or freed object)."""


class Reads:
    """Reads of one process's memory made in one pass, kept so that the pass can be
    checked by reading them all again: the same bytes everywhere, and what they say
    held at one instant between the two (a change undone between them aside)."""

    def __init__(self, memory: Memory) -> None:
        self.memory = memory
        self.ranges: list[tuple[int, int]] = []
        self.got: list[bytes | None] = []

    def many(self, ranges: Sequence[tuple[int, int]]) -> list[bytes | None]:
        got = self.memory.read_many(ranges)
        self.ranges += ranges
        self.got += got
        return got

    def held(self) -> bool:
        """Whether every range reads as it did (one batched read)."""
        return self.memory.read_many(self.ranges) == self.got


class Memory:
    """The memory of process ``pid``, read in ranges."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.reads = 0  # system calls made, for the costs noop states
        # lists of ranges read again and again (a scrape's, while the members are the
        # same), by the list's id: the list, and each batch's iovecs and buffer made once
        self._prepared: dict[int, tuple[Sequence[tuple[int, int]], list[_Prepared]]] = {}

    def read(self, address: int, size: int) -> bytes:
        """``size`` bytes at ``address``; Unreadable when any of them cannot be read."""
        got = self.read_many([(address, size)])[0]
        if got is None:
            raise Unreadable(f"process {self.pid}: {size} bytes at {address:#x} cannot be "
                             "read", "the object is gone or the address is wrong")
        return got

    def read_many(self, ranges: Sequence[tuple[int, int]]) -> list[bytes | None]:
        """Each range's bytes, or None for a range not readable whole (unmapped, or past
        a bound on its size). Unreadable when the process cannot be read at all. A list
        read before (the same object, unchanged) reads through what was prepared for it
        then."""
        out: list[bytes | None] = [None] * len(ranges)
        known = self._prepared.get(id(ranges))
        if known is not None and known[0] is ranges:
            for batch in known[1]:
                if not self._again(batch, out):
                    self._batch(ranges, batch.lo, batch.hi, out)
            return out
        for start in range(0, len(ranges), IOV_MAX):
            self._batch(ranges, start, min(start + IOV_MAX, len(ranges)), out)
        if isinstance(ranges, list) and len(ranges) >= _PREPARE_FROM:
            if len(self._prepared) >= _PREPARED:
                self._prepared.pop(next(iter(self._prepared)))
            self._prepared[id(ranges)] = (ranges, [
                _Prepared.made(ranges, lo, min(lo + IOV_MAX, len(ranges)))
                for lo in range(0, len(ranges), IOV_MAX)])
        return out

    def read_joined(self, ranges: list[tuple[int, int]]) -> bytes | None:
        """Every range's bytes one after another, when each reads whole (records of one
        size, unpacked at once by the caller); None when one does not (``read_many``
        says which)."""
        known = self._prepared.get(id(ranges))
        if known is None or known[0] is not ranges:
            got = self.read_many(ranges)  # prepares the list for the next time
            return None if None in got else b"".join(got)  # type: ignore[arg-type]
        parts = []
        for batch in known[1]:
            raw = self._whole(batch)
            if raw is None:
                return None
            parts.append(raw)
        return b"".join(parts)

    def _whole(self, batch: _Prepared) -> bytes | None:
        """The bytes of one prepared batch, every range of it read whole; None when it
        cannot be (a range that is not to be read, or not mapped now)."""
        if batch.buf is None:
            return None
        self.reads += 1
        done = _readv(self.pid, batch.local, batch.k, batch.remote, batch.k, 0)
        if done != batch.starts[-1]:
            if done < 0 and ctypes.get_errno() not in (errno.EFAULT,):
                raise _refused(self.pid, ctypes.get_errno())
            return None
        return batch.buf.raw[:done]

    def _again(self, batch: _Prepared, out: list[bytes | None]) -> bool:
        """One prepared batch read whole into ``out``; False when it cannot be (a range
        that is not to be read, or not mapped now: the general way then)."""
        raw = self._whole(batch)
        if raw is None:
            return False
        starts = batch.starts
        out[batch.lo:batch.hi] = [raw[a:b] for a, b in itertools.pairwise(starts)]
        return True

    def _batch(self, ranges: Sequence[tuple[int, int]], lo: int, hi: int,
               out: list[bytes | None]) -> None:
        # The kernel reads the ranges in order into one buffer and stops at the first it
        # cannot read whole: the next call starts after that one.
        # the ranges noop will not ask for (a damaged address or length): left None
        bad = [lo + k for k, (a, n) in enumerate(ranges[lo:hi])
               if not (a > 0 and 0 < n <= _MAX_READ)]
        bad.append(hi)
        i = lo
        while i < hi:
            j = bad[bisect.bisect_left(bad, i)]  # the first one from i on
            if j == i:
                i += 1
                continue
            wanted = ranges[i:j]
            k = len(wanted)
            starts = list(itertools.accumulate((n for _a, n in wanted), initial=0))
            buf = ctypes.create_string_buffer(starts[-1])
            base = ctypes.addressof(buf)
            words = list(itertools.chain.from_iterable(wanted))  # address, length, ...
            remote = (_Iovec * k).from_buffer_copy(struct.pack(f"<{2 * k}Q", *words))
            words[0::2] = [base + o for o in starts[:-1]]  # the same lengths, in buf
            local = (_Iovec * k).from_buffer_copy(struct.pack(f"<{2 * k}Q", *words))
            self.reads += 1
            done = _readv(self.pid, local, k, remote, k, 0)
            if done < 0:
                err = ctypes.get_errno()
                if err != errno.EFAULT:
                    raise _refused(self.pid, err)
                i += 1  # the first range is not mapped
                continue
            raw = buf.raw[:done]
            m = bisect.bisect_right(starts, done) - 1  # the ranges read whole
            out[i:i + m] = [raw[a:b] for a, b in itertools.pairwise(starts[:m + 1])]
            i += m if m == k else m + 1  # range m was read short: not whole


_PREPARE_FROM = 64  # ranges in a list worth preparing
_PREPARED = 64  # lists prepared per process (a scrape reads one a thousand histograms)


@dataclass(eq=False)
class _Prepared:
    """One batch of a list of ranges, ready to read again: its iovecs and buffer (none
    when a range of it is not one noop reads)."""

    lo: int
    hi: int
    k: int
    starts: list[int]
    buf: ctypes.Array[ctypes.c_char] | None
    local: ctypes.Array[_Iovec] | None
    remote: ctypes.Array[_Iovec] | None

    @classmethod
    def made(cls, ranges: Sequence[tuple[int, int]], lo: int, hi: int) -> _Prepared:
        wanted = ranges[lo:hi]
        k = len(wanted)
        starts = list(itertools.accumulate((n for _a, n in wanted), initial=0))
        if any(not (a > 0 and 0 < n <= _MAX_READ) for a, n in wanted):
            return cls(lo, hi, k, starts, None, None, None)
        buf = ctypes.create_string_buffer(max(starts[-1], 1))
        base = ctypes.addressof(buf)
        words = list(itertools.chain.from_iterable(wanted))
        remote = (_Iovec * k).from_buffer_copy(struct.pack(f"<{2 * k}Q", *words))
        words[0::2] = [base + o for o in starts[:-1]]
        local = (_Iovec * k).from_buffer_copy(struct.pack(f"<{2 * k}Q", *words))
        return cls(lo, hi, k, starts, buf, local, remote)


def _refused(pid: int, err: int) -> Unreadable:
    if err == errno.ESRCH:
        return Unreadable(f"process {pid} exited", "")
    if err == errno.EPERM:
        return Unreadable(f"may not read the memory of process {pid}",
                          "run noop as root with CAP_SYS_PTRACE (the DaemonSet grants it), "
                          "and with kernel.yama.ptrace_scope at most 2")
    return Unreadable(f"reading the memory of process {pid}: {os.strerror(err)}", "")


def check(pid: int) -> None:
    """Unreadable, in one line, when noop may not read process ``pid``'s memory."""
    Memory(pid).read_many([(_a_mapped_address(pid), 1)])


def _a_mapped_address(pid: int) -> int:
    maps = _maps(pid)
    if not maps:  # a process that exited and is not reaped yet has nothing mapped
        raise Unreadable(f"process {pid} exited", "")
    return int(maps[0].split("-", 1)[0], 16)


def _maps(pid: int) -> list[str]:
    """The lines of /proc/PID/maps: what the process has mapped, and from which files."""
    try:
        return Path(f"/proc/{pid}/maps").read_text().splitlines()
    except FileNotFoundError:
        raise Unreadable(f"process {pid} exited", "") from None
    except OSError as exc:
        raise Unreadable(f"reading /proc/{pid}/maps: {exc.strerror}",
                         "run noop as root with CAP_SYS_PTRACE") from None


def load_bias(pid: int, path_inode: tuple[int, int], first_load: int) -> int:
    """What to add to a link-time address of the ELF file with (device, inode)
    ``path_inode`` to have its address in process ``pid``: where the kernel mapped the
    file's offset 0, less ``first_load`` (the lowest PT_LOAD's address less its file
    offset). 0 for a file linked where it runs (not PIE). Unreadable when the process
    runs no such file."""
    dev, ino = path_inode
    for line in _maps(pid):
        parts = line.split(maxsplit=5)
        if len(parts) < 5 or int(parts[4]) != ino:
            continue
        major, minor = (int(x, 16) for x in parts[3].split(":"))
        if os.makedev(major, minor) != dev:
            continue
        start = int(parts[0].split("-", 1)[0], 16)
        offset = int(parts[2], 16)
        return start - offset - first_load
    raise Unreadable(f"process {pid} does not run the file (inode {ino})", "")
