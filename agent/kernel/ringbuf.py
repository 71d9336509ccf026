"""Read a BPF ring buffer by mapping it into memory, in batches rather than one callback
per record.

The kernel's layout (kernel/bpf/ringbuf.c): page 0 holds the consumer position, which
the reader writes; page 1 the producer position; the data pages follow, mapped twice in
a row, so that a record running past the end of the ring is still contiguous. Each
record starts with an 8-byte header: a u32 length whose bit 31 says the producer has
reserved it but not yet committed it (busy) and bit 30 that it discarded it, then a u32
the reader ignores; records are 8-byte aligned. Reading stops at the first busy record.

Records of one probe all have the same length, so a stretch of them is an array of
equal strides: ``runs`` finds those stretches by comparing header bytes a whole stride
apart (C-speed byte slicing), and hands each one over whole, for ``struct.iter_unpack``.
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import select
import struct
from collections.abc import Iterator
from dataclasses import dataclass

HEADER_SIZE = 8
BUSY = 1 << 31
DISCARD = 1 << 30
LENGTH = DISCARD - 1
# The positions are shared with the kernel while it runs, so each is read and written
# with one 8-byte access: struct in native mode ("@") reads so (a standard-size "<Q"
# goes byte by byte), and the consumer position is written through a ctypes u64 (struct's
# pack_into zeroes its target first: for an instant producers would see a full ring).
_POSITION = struct.Struct("@Q")
_U32 = struct.Struct("<I")
# Where a noop record keeps its probe number (struct noop_hdr's u16 at 24), counted from
# the ring header.
PROBE_AT = HEADER_SIZE + 24


def stride(length: int) -> int:
    """The bytes a record of ``length`` takes in the ring, header included."""
    return (length + HEADER_SIZE + 7) & ~7


@dataclass(frozen=True, slots=True)
class Run:
    """``count`` consecutive committed records of one probe and length, as one buffer of
    ``count * stride`` bytes, each starting with its ring header. ``probe`` is None for
    records too short to carry one."""

    probe: int | None
    length: int
    stride: int
    count: int
    data: memoryview
    end: int  # where the run ends in the batch: what is read once it is done


def _same(buf: memoryview, first: int, step: int, limit: int) -> int:
    """How many bytes at ``first``, ``first + step``, ... (at most ``limit``) equal the
    one at ``first``. Compared in windows that double, so that a short run costs
    little however much of the ring follows it."""
    byte = bytes(buf[first:first + 1])
    n, window = 1, 8
    while n < limit:
        take = min(window, limit - n)
        start = first + n * step
        column = bytes(buf[start:start + (take - 1) * step + 1:step])
        same = len(column) - len(column.lstrip(byte))
        n += same
        if same < take:
            break
        window *= 2
    return n


def runs(buf: memoryview) -> Iterator[Run]:
    """The runs of committed records in ``buf`` (a stretch of the ring starting at a
    record), stopping before the first busy one. Discarded records are skipped."""
    off, end = 0, len(buf)
    while off + HEADER_SIZE <= end:
        (word,) = _U32.unpack_from(buf, off)
        if word & BUSY:
            return
        length = word & LENGTH
        step = stride(length)
        if off + step > end:
            return  # cannot happen with a well-formed ring; never read past it
        count = (end - off) // step
        rest = buf[off:]
        probe: int | None = None
        columns = [0, 1, 2, 3]  # the header's length word, busy and discard bits
        if length >= PROBE_AT - HEADER_SIZE + 2:
            probe = int.from_bytes(rest[PROBE_AT:PROBE_AT + 2], "little")
            columns[:0] = [PROBE_AT, PROBE_AT + 1]  # first: where runs mostly end
        for column in columns:  # each looks no further than the shortest so far
            count = _same(rest, column, step, count)
        if not word & DISCARD:
            yield Run(probe, length, step, count, rest[:count * step], off + count * step)
        off += count * step


def record(run: Run, i: int) -> bytes:
    """Record ``i`` of a run, without its ring header."""
    start = i * run.stride + HEADER_SIZE
    return bytes(run.data[start:start + run.length])


def records(run: Run) -> Iterator[bytes]:
    """The records of a run one by one, each without its ring header."""
    for i in range(run.count):
        yield record(run, i)


class Ring:
    """A BPF ring buffer map (by its fd and data size), mapped for reading. ``batch``
    yields the committed records since the last call and frees their space when the
    caller is done with them; ``wait`` blocks until the producer wakes readers."""

    def __init__(self, fd: int, size: int) -> None:
        if size <= 0 or size & (size - 1) or size % mmap.PAGESIZE:
            raise ValueError(f"a ring buffer's size is a power-of-2 number of pages, "
                             f"not {size}")
        page = mmap.PAGESIZE
        self.size = size
        self._mask = size - 1
        self._consumer = mmap.mmap(fd, page, mmap.MAP_SHARED,
                                   mmap.PROT_READ | mmap.PROT_WRITE, offset=0)
        try:
            self._producer = mmap.mmap(fd, page + 2 * size, mmap.MAP_SHARED,
                                       mmap.PROT_READ, offset=page)
        except BaseException:
            self._consumer.close()
            raise
        self._data = page
        self._consumed = ctypes.c_uint64.from_buffer(self._consumer)
        self._poll = select.epoll()
        self._poll.register(fd, select.EPOLLIN | select.EPOLLET)

    def pending(self) -> int:
        """Bytes reserved by producers and not yet read (busy records included)."""
        return self._position(self._producer) - self._position(self._consumer)

    @staticmethod
    def _position(m: mmap.mmap) -> int:
        return int(_POSITION.unpack_from(m, 0)[0])

    def wait(self, timeout: float) -> None:
        """Block up to ``timeout`` seconds, or until producers wake readers (edge
        triggered: records committed without a wakeup do not end the wait)."""
        self._poll.poll(timeout)

    def batch(self) -> Iterator[Run]:
        """The runs of records committed since the last batch. Their space is handed
        back to the producers when the iteration ends (also when it is left early:
        the records already yielded count as read), so copy what is kept."""
        consumer = self._position(self._consumer)
        producer = self._position(self._producer)  # read after: x86 keeps the order
        if producer == consumer:
            return
        start = self._data + (consumer & self._mask)
        whole = memoryview(self._producer)
        buf = whole[start:start + (producer - consumer)]
        done = 0
        try:
            for run in runs(buf):
                yield run
                done = run.end
        finally:
            if done:
                self._consumed.value = consumer + done
            buf.release()
            whole.release()

    def close(self) -> None:
        if self._poll.closed:
            return
        self._poll.close()
        del self._consumed  # its hold on the mapping
        for m in (self._consumer, self._producer):
            with contextlib.suppress(BufferError):  # a run's buffer still held: unmapped at exit
                m.close()
