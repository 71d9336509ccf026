"""Uprobes running loaded programs, made with the few calls ``bpfsys`` has: one perf
event per uprobe (``Probe``: ``perf_event_open`` with the uprobe PMU, the program set
on it by ioctl or through a link with a cookie), or every uprobe of a program on a file
through one uprobe_multi link (``MultiLink``, Linux 6.6), what this kernel supports of
those, and the links it holds (``uprobe_multi_links``: what shows none was left).
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import struct
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from agent.kernel import bpfsys

_IOC_SET_BPF = 0x40042408
_IOC_ENABLE = 0x2400
_ATTR_DISABLED = 1  # perf_event_attr's first flag bit
_LINK_CREATE_BYTES = 64  # bpf_attr up to link_create.uprobe_multi.pid
ATTACH_PERF_EVENT = 41
LINK_TYPE_UPROBE_MULTI = 12


@cache
def _uprobe_type() -> int:
    try:
        return int(Path("/sys/bus/event_source/devices/uprobe/type").read_text())
    except (OSError, ValueError):
        raise bpfsys.BpfError("this kernel has no uprobe perf events",
                       "run 'noop doctor' to check uprobe support") from None


class Probe:
    """A uprobe at ``offset`` of the file at ``path`` in every process, running the
    program ``prog_fd``, with ``cookie`` for it to read (through a BPF link; None: the
    older ioctl, no cookie). Closing it takes the uprobe off."""

    def __init__(self, path: str, offset: int, prog_fd: int, cookie: int | None = None
                 ) -> None:
        cpath = ctypes.create_string_buffer(os.fsencode(path))
        attr = bpfsys.zeroed(112)
        struct.pack_into("<IIQ", attr, 0, _uprobe_type(), 112, 0)
        struct.pack_into("<Q", attr, 40, _ATTR_DISABLED)
        struct.pack_into("<QQ", attr, 56, ctypes.addressof(cpath), offset)
        self.fd, self.link = bpfsys.perf_event_open(attr), -1
        try:
            if cookie is not None:
                link = bpfsys.zeroed(64)
                struct.pack_into("<IIIIQ", link, 0, prog_fd, self.fd, ATTACH_PERF_EVENT, 0,
                                 cookie)
                self.link = bpfsys.bpf_call(bpfsys.LINK_CREATE, link)
            else:
                fcntl.ioctl(self.fd, _IOC_SET_BPF, prog_fd)
            fcntl.ioctl(self.fd, _IOC_ENABLE, 0)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        for fd in (self.link, self.fd):
            if fd >= 0:
                os.close(fd)
        self.fd = self.link = -1

    def __enter__(self) -> Probe:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class MultiLink:
    """Uprobes at ``offsets`` of the file at ``path`` running the program ``prog_fd``
    (loaded for bpfsys.ATTACH_UPROBE_MULTI), each with its cookie, all through one BPF link
    (``BPF_LINK_CREATE``, Linux 6.6): no perf events, so neither CAP_SYS_ADMIN nor a
    kernel synchronization per probe when they come off. ``pid`` > 0: only that
    process's threads run it. Closing it takes every one of them off at once."""

    def __init__(self, path: str, offsets: list[int], prog_fd: int, cookies: list[int],
                 pid: int = 0) -> None:
        n = len(offsets)
        cpath = ctypes.create_string_buffer(os.fsencode(path))
        offs = (ctypes.c_uint64 * n)(*offsets)
        cooks = (ctypes.c_uint64 * n)(*cookies)
        attr = bpfsys.zeroed(_LINK_CREATE_BYTES)
        struct.pack_into("<iiII", attr, 0, prog_fd, 0, bpfsys.ATTACH_UPROBE_MULTI, 0)
        struct.pack_into("<QQQQIIi", attr, 16, ctypes.addressof(cpath), ctypes.addressof(offs),
                         0, ctypes.addressof(cooks), n, 0, pid)
        self.fd = bpfsys.bpf_call(bpfsys.LINK_CREATE, attr)
        self.count = n

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> MultiLink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True)
class MultiSupport:
    """What this kernel does with uprobe_multi links, found by trying (as libbpf does):
    ``links`` whether it makes them for this process; ``pid_filter`` whether a link's
    pid runs the program in every thread of that process (older kernels: one thread
    only, which a Go program's goroutines move off); ``why`` not, when not."""

    links: bool
    pid_filter: bool
    why: str = ""
    denied: bool = False  # the kernel would not load a program for this process


# r0 = 0; exit: the smallest program a link can be asked for.
_RETURN_0 = bytes.fromhex("b700000000000000" "9500000000000000")
EMPTY = _RETURN_0  # r0 = 0; exit: what an empty C program compiles to


@cache
def uprobe_multi() -> MultiSupport:
    """Whether uprobe_multi links work here, tried with a program that does nothing on
    a path that is no file: a kernel that has them refuses the path (EBADF) after the
    rest; one whose pid filter is fixed (6.10, 6.6.35) refuses pid -1 (EINVAL) first."""
    try:
        prog = bpfsys.bpf_call(bpfsys.PROG_LOAD, bpfsys.program_attr(
            _RETURN_0, "GPL", bpfsys.ATTACH_UPROBE_MULTI))
    except OSError as exc:
        return MultiSupport(False, False, f"a program for them does not load: {exc.strerror}",
                            exc.errno in (errno.EPERM, errno.EACCES))
    try:
        def attempt(pid: int) -> int:
            try:
                MultiLink("/", [0], prog, [0], pid).close()
            except OSError as exc:
                return exc.errno or 0
            return 0

        first = attempt(0)
        if first != errno.EBADF:
            return MultiSupport(False, False, "no uprobe_multi links (Linux < 6.6)"
                                if first in (errno.EINVAL, errno.EOPNOTSUPP, errno.ENOSYS)
                                else f"uprobe_multi links refused: {os.strerror(first)}")
        return MultiSupport(True, attempt(-1) == errno.EINVAL)
    finally:
        os.close(prog)


@dataclass(frozen=True)
class LinkOnFile:
    """A uprobe_multi link the kernel holds: on which file, how many uprobes, for which
    process (0: every one)."""

    id: int
    path: str
    count: int
    pid: int


def uprobe_multi_links() -> list[LinkOnFile]:
    """Every uprobe_multi link on this machine, whoever made it (``BPF_LINK_GET_NEXT_ID``
    and the links' info; Linux 6.8 names their files): what shows that a stopped noop
    left none behind, where uprobes made through links leave no trace in tracefs."""
    out: list[LinkOnFile] = []
    at = 0
    while True:
        attr = bpfsys.zeroed(12)
        struct.pack_into("<I", attr, 0, at)
        try:
            bpfsys.bpf_call(bpfsys.LINK_GET_NEXT_ID, attr)
        except OSError as exc:
            if exc.errno == errno.ENOENT:
                return out
            raise
        at = struct.unpack_from("<I", attr, 4)[0]
        struct.pack_into("<II", attr, 0, at, 0)
        try:
            fd = bpfsys.bpf_call(bpfsys.LINK_GET_FD_BY_ID, attr)
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.EAGAIN):  # gone, or going, meanwhile
                continue
            raise
        try:
            path = ctypes.create_string_buffer(4096)
            info = bpfsys.zeroed(64)
            struct.pack_into("<QQQQI", info, 16, ctypes.addressof(path), 0, 0, 0, len(path))
            get = bpfsys.zeroed(16)
            struct.pack_into("<IIQ", get, 0, fd, len(info), ctypes.addressof(info))
            bpfsys.bpf_call(bpfsys.OBJ_GET_INFO_BY_FD, get)
            kind, = struct.unpack_from("<I", info, 0)
            if kind == LINK_TYPE_UPROBE_MULTI:
                count, _flags, pid = struct.unpack_from("<IIi", info, 52)
                out.append(LinkOnFile(at, os.fsdecode(path.value), count, pid))
        finally:
            os.close(fd)
