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
import os
import struct
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from agent.binary.arch import AMD64, host
from agent.errors import NoopError

# this machine's numbers (x86-64's where noop does not know the machine: it fails then)
_HOST = host() or AMD64
_SYS_BPF = _HOST.nr_bpf
_SYS_PERF_EVENT_OPEN = _HOST.nr_perf_event_open
_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long

MAP_CREATE, MAP_LOOKUP, MAP_UPDATE, MAP_DELETE, MAP_NEXT_KEY, PROG_LOAD = 0, 1, 2, 3, 4, 5
MAP_LOOKUP_AND_DELETE = 21  # hash maps since Linux 5.14
OBJ_GET_INFO_BY_FD, LINK_CREATE, LINK_GET_FD_BY_ID, LINK_GET_NEXT_ID = 15, 28, 30, 31
ENABLE_STATS = 32
STATS_RUN_TIME = 0
_PROG_INFO_BYTES = 232  # struct bpf_prog_info up to attach_btf_id
_RUN_TIME_AT = 192  # bpf_prog_info.run_time_ns, then run_cnt
PROG_TYPE_KPROBE = 2
ATTACH_UPROBE_MULTI = 48  # BPF_TRACE_UPROBE_MULTI (Linux 6.6)
_EXPECTED_ATTACH_AT = 68  # bpf_attr.expected_attach_type, for BPF_PROG_LOAD
# Map types whose values the kernel keeps one per possible CPU.
PERCPU = {5, 6, 10}  # percpu hash, percpu array, lru percpu hash
RINGBUF = 27

_PERF_FLAG_FD_CLOEXEC = 8
LOG_BYTES = 1 << 20


class BpfError(NoopError):
    """A bpf() or perf_event_open() call the kernel refused."""


def bpf_call(cmd: int, attr: ctypes.Array[ctypes.c_char]) -> int:
    ret = _libc.syscall(_SYS_BPF, cmd, attr, len(attr))
    if ret < 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    return int(ret)


def perf_event_open(attr: ctypes.Array[ctypes.c_char]) -> int:
    """``perf_event_open(attr, pid -1, cpu 0, no group, CLOEXEC)``: a perf event of every
    process on CPU 0's list (a uprobe's is every CPU's); its fd, or OSError."""
    fd = _libc.syscall(_SYS_PERF_EVENT_OPEN, attr, -1, 0, -1, _PERF_FLAG_FD_CLOEXEC)
    if fd < 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    return int(fd)


def zeroed(size: int = 128) -> ctypes.Array[ctypes.c_char]:
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
        attr = zeroed()
        struct.pack_into("<IIIII", attr, 0, d.type, d.key_size, d.value_size,
                         d.max_entries, d.flags)
        struct.pack_into("15s", attr, 28, d.name.encode()[:15])
        try:
            self.fd = bpf_call(MAP_CREATE, attr)
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
        attr = zeroed(32)
        struct.pack_into("<IIQQQ", attr, 0, self.fd, 0, ctypes.addressof(k),
                         ctypes.addressof(value) if value is not None else 0, flags)
        return bpf_call(cmd, attr)

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
        attr = zeroed(32)
        key: ctypes.Array[ctypes.c_char] | None = None
        while True:
            struct.pack_into("<IIQQ", attr, 0, self.fd, 0,
                             ctypes.addressof(key) if key is not None else 0,
                             ctypes.addressof(nxt))
            try:
                bpf_call(MAP_NEXT_KEY, attr)
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
            return bpf_call(PROG_LOAD, program_attr(insns, license, attach_type, name,
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


def program_attr(insns: bytes, license: str, attach_type: int, name: str = "",
                  kern_version: int = 0, log: ctypes.Array[ctypes.c_char] | None = None
                  ) -> ctypes.Array[ctypes.c_char]:
    """BPF_PROG_LOAD's attributes for a kprobe-type program (``log``: the verifier's,
    at level 1), kept alive with the buffers they point to."""
    attr = zeroed()
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


def close_fd(fd: int) -> None:
    if fd >= 0:
        os.close(fd)


def enable_run_time_stats() -> int:
    """Have the kernel time every BPF program it runs (``BPF_ENABLE_STATS``) for as long
    as the returned descriptor is open: what ``prog_run_time`` reads. Raises OSError
    where the kernel has no such command (before 5.8)."""
    attr = zeroed(8)
    struct.pack_into("<I", attr, 0, STATS_RUN_TIME)
    return bpf_call(ENABLE_STATS, attr)


def prog_run_time(prog_fd: int) -> tuple[int, int]:
    """A loaded program's (run_time_ns, run_cnt): how long the kernel ran it, and how
    often, while run-time stats were on."""
    info = zeroed(_PROG_INFO_BYTES)
    attr = zeroed(16)
    struct.pack_into("<IIQ", attr, 0, prog_fd, len(info), ctypes.addressof(info))
    bpf_call(OBJ_GET_INFO_BY_FD, attr)
    got = struct.unpack_from("<I", attr, 4)[0]  # what the kernel filled in
    if got < _RUN_TIME_AT + 16:
        return 0, 0
    ns, count = struct.unpack_from("<QQ", info, _RUN_TIME_AT)
    return int(ns), int(count)
