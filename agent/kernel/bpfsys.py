"""The few ``bpf()`` and ``perf_event_open()`` calls noop needs to run programs BCC has
compiled: create maps, load programs, put them on uprobes, and read and write map
entries. Through these the agent runs without BCC (and the LLVM it maps) in its own
process: BCC compiles, in a short-lived child (``compile``), and this loads.

The attribute layouts are the kernel's UAPI (``include/uapi/linux/bpf.h`` and
``perf_event.h``) for x86-64; each call takes a zeroed buffer as large as the kernel
reads, so fields added later stay zero.
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

from agent.errors import NoopError

_SYS_BPF = 321
_SYS_PERF_EVENT_OPEN = 298
_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long

MAP_CREATE, MAP_LOOKUP, MAP_UPDATE, MAP_DELETE, MAP_NEXT_KEY, PROG_LOAD = 0, 1, 2, 3, 4, 5
MAP_LOOKUP_AND_DELETE = 21  # hash maps since Linux 5.14
OBJ_GET_INFO_BY_FD, LINK_CREATE, LINK_GET_FD_BY_ID, LINK_GET_NEXT_ID = 15, 28, 30, 31
ENABLE_STATS = 32
LINK_TYPE_UPROBE_MULTI = 12
STATS_RUN_TIME = 0
_PROG_INFO_BYTES = 232  # struct bpf_prog_info up to attach_btf_id
_RUN_TIME_AT = 192  # bpf_prog_info.run_time_ns, then run_cnt
PROG_TYPE_KPROBE = 2
ATTACH_PERF_EVENT = 41
ATTACH_UPROBE_MULTI = 48  # BPF_TRACE_UPROBE_MULTI (Linux 6.6)
_EXPECTED_ATTACH_AT = 68  # bpf_attr.expected_attach_type, for BPF_PROG_LOAD
_LINK_CREATE_BYTES = 64  # bpf_attr up to link_create.uprobe_multi.pid
# Map types whose values the kernel keeps one per possible CPU.
PERCPU = {5, 6, 10}  # percpu hash, percpu array, lru percpu hash
RINGBUF = 27

_PERF_FLAG_FD_CLOEXEC = 8
_IOC_ENABLE = 0x2400
_IOC_SET_BPF = 0x40042408
_ATTR_DISABLED = 1  # perf_event_attr's first flag bit
LOG_BYTES = 1 << 20


class BpfError(NoopError):
    """A bpf() or perf_event_open() call the kernel refused."""


def _call(cmd: int, attr: ctypes.Array[ctypes.c_char]) -> int:
    ret = _libc.syscall(_SYS_BPF, cmd, attr, len(attr))
    if ret < 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    return int(ret)


def _attr(size: int = 128) -> ctypes.Array[ctypes.c_char]:
    return ctypes.create_string_buffer(size)


@cache
def possible_cpus() -> int:
    """The CPUs the kernel keeps per-CPU values for (``/sys/devices/system/cpu/possible``)."""
    text = Path("/sys/devices/system/cpu/possible").read_text().strip()
    n = 0
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        n = max(n, int(hi or lo) + 1)
    return n


@dataclass(frozen=True, slots=True)
class MapDef:
    name: str
    type: int
    key_size: int
    value_size: int
    max_entries: int
    flags: int


class Map:
    """A map this process created; its file descriptor closes with ``close``."""

    def __init__(self, d: MapDef) -> None:
        self.d = d
        attr = _attr()
        struct.pack_into("<IIIII", attr, 0, d.type, d.key_size, d.value_size,
                         d.max_entries, d.flags)
        struct.pack_into("15s", attr, 28, d.name.encode()[:15])
        try:
            self.fd = _call(MAP_CREATE, attr)
        except OSError as exc:
            raise BpfError(f"the kernel refused map {d.name}: {exc.strerror}",
                           "run 'noop doctor'; a locked-memory or map limit may be too "
                           "low") from None
        self.percpu = d.type in PERCPU
        self.slot = (d.value_size + 7) & ~7  # one CPU's value in a per-CPU lookup

    @property
    def value_bytes(self) -> int:
        return self.slot * possible_cpus() if self.percpu else self.d.value_size

    def _kv(self, cmd: int, key: bytes, value: ctypes.Array[ctypes.c_char] | None,
            flags: int = 0) -> int:
        k = ctypes.create_string_buffer(key, len(key))
        attr = _attr(32)
        struct.pack_into("<IIQQQ", attr, 0, self.fd, 0, ctypes.addressof(k),
                         ctypes.addressof(value) if value is not None else 0, flags)
        return _call(cmd, attr)

    def lookup(self, key: bytes) -> bytes | None:
        """The value (every CPU's, one after another, for a per-CPU map), or None."""
        out = ctypes.create_string_buffer(self.value_bytes)
        try:
            self._kv(MAP_LOOKUP, key, out)
        except OSError as exc:
            if exc.errno == errno.ENOENT:
                return None
            raise
        return out.raw

    def rows(self, key: bytes) -> list[bytes]:
        """A per-CPU map's value for ``key``, one CPU a row ([] when absent)."""
        raw = self.lookup(key)
        if raw is None:
            return []
        return [raw[i * self.slot:i * self.slot + self.d.value_size]
                for i in range(len(raw) // self.slot)]

    def take(self, key: bytes) -> list[bytes]:
        """A per-CPU map's value for ``key``, one CPU a row, deleted in the same system
        call, so that no update lands between the read and the delete ([] when
        absent). Before Linux 5.14 (no lookup-and-delete of a hash map), read, then
        delete."""
        out = ctypes.create_string_buffer(self.value_bytes)
        try:
            self._kv(MAP_LOOKUP_AND_DELETE, key, out)
        except OSError as exc:
            if exc.errno == errno.ENOENT:
                return []
            if exc.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
                raise
            got = self.rows(key)
            return got if got and self.delete(key) else []
        raw = out.raw
        return [raw[i * self.slot:i * self.slot + self.d.value_size]
                for i in range(len(raw) // self.slot)]

    def update(self, key: bytes, value: bytes) -> None:
        """Set ``key``; ``value`` is one CPU's, copied to every CPU of a per-CPU map."""
        if self.percpu:
            value = value.ljust(self.slot, b"\0") * possible_cpus()
        self._kv(MAP_UPDATE, key, ctypes.create_string_buffer(value, len(value)))

    def delete(self, key: bytes) -> bool:
        try:
            self._kv(MAP_DELETE, key, None)
        except OSError as exc:
            if exc.errno == errno.ENOENT:
                return False
            raise
        return True

    def listed(self) -> list[bytes]:
        """Every key, as the kernel iterates them (a snapshot of a changing map)."""
        out: list[bytes] = []
        size = self.d.key_size
        nxt = ctypes.create_string_buffer(size)
        attr = _attr(32)
        key: ctypes.Array[ctypes.c_char] | None = None
        while True:
            struct.pack_into("<IIQQ", attr, 0, self.fd, 0,
                             ctypes.addressof(key) if key is not None else 0,
                             ctypes.addressof(nxt))
            try:
                _call(MAP_NEXT_KEY, attr)
            except OSError as exc:
                if exc.errno == errno.ENOENT:
                    return out
                raise
            out.append(nxt.raw)
            key = ctypes.create_string_buffer(nxt.raw, size)
            if len(out) > self.d.max_entries + 1:  # a map changing under us: enough
                return out

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


LOAD_ATTEMPTS = 8  # a load the verifier left for a signal is tried again, this often


def load_program(name: str, insns: bytes, license: str, kern_version: int,
                 attach_type: int = 0) -> int:
    """Load a kprobe-type program (a uprobe's); its fd. ``attach_type``
    ATTACH_UPROBE_MULTI: for uprobe_multi links (then for those only). On refusal the
    verifier's last lines say why."""
    log: ctypes.Array[ctypes.c_char] | None = None
    interrupted = 0
    while True:
        try:  # after a refusal, the same program again to hear the verifier say why
            return _call(PROG_LOAD, _program_attr(insns, license, attach_type, name,
                                                  kern_version, log))
        except OSError as exc:
            if exc.errno in (errno.EAGAIN, errno.EINTR) and interrupted < LOAD_ATTEMPTS:
                interrupted += 1  # a signal came while the verifier ran: it stops
                continue
            if log is None:
                log, first = ctypes.create_string_buffer(LOG_BYTES), exc
                continue
            break
    said = [ln for ln in log.value.decode(errors="replace").splitlines() if ln.strip()]
    raise BpfError(f"the kernel refused program {name}: {first.strerror}"
                   + (f"; {'; '.join(said[-3:])}" if said else ""),
                   "run 'noop doctor'; 'noop check --emit-c' shows the C")


def _program_attr(insns: bytes, license: str, attach_type: int, name: str = "",
                  kern_version: int = 0, log: ctypes.Array[ctypes.c_char] | None = None
                  ) -> ctypes.Array[ctypes.c_char]:
    """BPF_PROG_LOAD's attributes for a kprobe-type program (``log``: the verifier's,
    at level 1), kept alive with the buffers they point to."""
    attr = _attr()
    code = ctypes.create_string_buffer(insns, len(insns))
    lic = ctypes.create_string_buffer(license.encode())
    struct.pack_into("<IIQQIIQI", attr, 0, PROG_TYPE_KPROBE, len(insns) // 8,
                     ctypes.addressof(code), ctypes.addressof(lic), 1 if log else 0,
                     len(log) if log else 0, ctypes.addressof(log) if log else 0,
                     kern_version)
    struct.pack_into("15s", attr, 48, name.encode()[:15])
    struct.pack_into("<I", attr, _EXPECTED_ATTACH_AT, attach_type)
    attr._keep = (code, lic, log)  # type: ignore[attr-defined]
    return attr


@cache
def _uprobe_type() -> int:
    try:
        return int(Path("/sys/bus/event_source/devices/uprobe/type").read_text())
    except (OSError, ValueError):
        raise BpfError("this kernel has no uprobe perf events",
                       "run 'noop doctor' to check uprobe support") from None


class Probe:
    """A uprobe at ``offset`` of the file at ``path`` in every process, running the
    program ``prog_fd``, with ``cookie`` for it to read (through a BPF link; None: the
    older ioctl, no cookie). Closing it takes the uprobe off."""

    def __init__(self, path: str, offset: int, prog_fd: int, cookie: int | None = None
                 ) -> None:
        cpath = ctypes.create_string_buffer(os.fsencode(path))
        attr = _attr(112)
        struct.pack_into("<IIQ", attr, 0, _uprobe_type(), 112, 0)
        struct.pack_into("<Q", attr, 40, _ATTR_DISABLED)
        struct.pack_into("<QQ", attr, 56, ctypes.addressof(cpath), offset)
        fd = _libc.syscall(_SYS_PERF_EVENT_OPEN, attr, -1, 0, -1, _PERF_FLAG_FD_CLOEXEC)
        if fd < 0:
            raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
        self.fd, self.link = int(fd), -1
        try:
            if cookie is not None:
                link = _attr(64)
                struct.pack_into("<IIIIQ", link, 0, prog_fd, self.fd, ATTACH_PERF_EVENT, 0,
                                 cookie)
                self.link = _call(LINK_CREATE, link)
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
    (loaded for ATTACH_UPROBE_MULTI), each with its cookie, all through one BPF link
    (``BPF_LINK_CREATE``, Linux 6.6): no perf events, so neither CAP_SYS_ADMIN nor a
    kernel synchronization per probe when they come off. ``pid`` > 0: only that
    process's threads run it. Closing it takes every one of them off at once."""

    def __init__(self, path: str, offsets: list[int], prog_fd: int, cookies: list[int],
                 pid: int = 0) -> None:
        n = len(offsets)
        cpath = ctypes.create_string_buffer(os.fsencode(path))
        offs = (ctypes.c_uint64 * n)(*offsets)
        cooks = (ctypes.c_uint64 * n)(*cookies)
        attr = _attr(_LINK_CREATE_BYTES)
        struct.pack_into("<iiII", attr, 0, prog_fd, 0, ATTACH_UPROBE_MULTI, 0)
        struct.pack_into("<QQQQIIi", attr, 16, ctypes.addressof(cpath), ctypes.addressof(offs),
                         0, ctypes.addressof(cooks), n, 0, pid)
        self.fd = _call(LINK_CREATE, attr)
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
        prog = _call(PROG_LOAD, _program_attr(_RETURN_0, "GPL", ATTACH_UPROBE_MULTI))
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
        attr = _attr(12)
        struct.pack_into("<I", attr, 0, at)
        try:
            _call(LINK_GET_NEXT_ID, attr)
        except OSError as exc:
            if exc.errno == errno.ENOENT:
                return out
            raise
        at = struct.unpack_from("<I", attr, 4)[0]
        struct.pack_into("<II", attr, 0, at, 0)
        try:
            fd = _call(LINK_GET_FD_BY_ID, attr)
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.EAGAIN):  # gone, or going, meanwhile
                continue
            raise
        try:
            path = ctypes.create_string_buffer(4096)
            info = _attr(64)
            struct.pack_into("<QQQQI", info, 16, ctypes.addressof(path), 0, 0, 0, len(path))
            get = _attr(16)
            struct.pack_into("<IIQ", get, 0, fd, len(info), ctypes.addressof(info))
            _call(OBJ_GET_INFO_BY_FD, get)
            kind, = struct.unpack_from("<I", info, 0)
            if kind == LINK_TYPE_UPROBE_MULTI:
                count, _flags, pid = struct.unpack_from("<IIi", info, 52)
                out.append(LinkOnFile(at, os.fsdecode(path.value), count, pid))
        finally:
            os.close(fd)


def close_fd(fd: int) -> None:
    if fd >= 0:
        os.close(fd)


def enable_run_time_stats() -> int:
    """Have the kernel time every BPF program it runs (``BPF_ENABLE_STATS``) for as long
    as the returned descriptor is open: what ``prog_run_time`` reads. Raises OSError
    where the kernel has no such command (before 5.8)."""
    attr = _attr(8)
    struct.pack_into("<I", attr, 0, STATS_RUN_TIME)
    return _call(ENABLE_STATS, attr)


def prog_run_time(prog_fd: int) -> tuple[int, int]:
    """A loaded program's (run_time_ns, run_cnt): how long the kernel ran it, and how
    often, while run-time stats were on."""
    info = _attr(_PROG_INFO_BYTES)
    attr = _attr(16)
    struct.pack_into("<IIQ", attr, 0, prog_fd, len(info), ctypes.addressof(info))
    _call(OBJ_GET_INFO_BY_FD, attr)
    got = struct.unpack_from("<I", attr, 4)[0]  # what the kernel filled in
    if got < _RUN_TIME_AT + 16:
        return 0, 0
    ns, count = struct.unpack_from("<QQ", info, _RUN_TIME_AT)
    return int(ns), int(count)
