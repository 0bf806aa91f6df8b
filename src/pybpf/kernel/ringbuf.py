"""Reading a kernel BPF ring buffer from user space, as libbpf's ring_buffer__add/__poll do,
and writing a user ring buffer, as libbpf's user_ring_buffer__new/__reserve/__submit do.

Mappings of the map fd (kernel/bpf/ringbuf.c, ringbuf_map_mmap_kern): the consumer page
read-write at offset 0, and from offset one page the producer page and the data area
read-only, the data mapped twice in a row by the kernel, so a record that wraps past the end
reads as one run of bytes. An epoll instance watches the map fd: the kernel reports it
readable while data is there (ringbuf_map_poll_kern) and wakes it when a record is committed
to a consumer that had caught up.

A USER_RINGBUF is mapped the other way round (ringbuf_map_mmap_user): the consumer page
read-only (a writable mapping of it is EPERM), the producer page and the twice-mapped data
read-write; its fd polls writable while the ring has a byte free (ringbuf_map_poll_user),
and a drain that consumed a sample wakes it.

Positions and headers are read with acquire and consumer_pos written with release ordering,
as libbpf's smp_load_acquire / smp_store_release (``barrier.py``); a user ring buffer's
producer_pos and a sample's final length word are written with release ordering.
"""

from __future__ import annotations

import errno
import mmap
import select

from ..errors import KernelError
from ..ringbuf import RingBufReader, UserRingBufProducer
from .barrier import ACQUIRE, FENCE, MISSING, RELEASE


class _MappedRing:
    """The mappings of a ring buffer map's fd, which the consumer and the producer make alike:
    the consumer page (``consumer_prot``), the producer page and the twice-mapped data
    (``producer_prot``), views of the positions, data and record headers, and an epoll
    instance waiting for ``event`` on the fd."""

    def _map(self, fd: int, size: int, consumer_prot: int, producer_prot: int,
             event: int) -> None:
        page = mmap.PAGESIZE
        try:
            self._consumer_page = mmap.mmap(fd, page, mmap.MAP_SHARED, consumer_prot)
        except OSError as exc:
            raise KernelError(exc.errno, f"mmap of the consumer page: {exc.strerror}") from None
        try:
            self._producer_area = mmap.mmap(fd, page + 2 * size, mmap.MAP_SHARED,
                                            producer_prot, offset=page)
        except OSError as exc:
            self._consumer_page.close()
            raise KernelError(exc.errno, f"mmap of the producer page and data: "
                              f"{exc.strerror}") from None
        self._consumer = memoryview(self._consumer_page).cast("Q")
        area = memoryview(self._producer_area)
        self._producer = area[:8].cast("Q")
        self._data = area[page:]
        self._headers = self._data.cast("I")
        area.release()
        self._epoll = select.epoll()
        self._epoll.register(fd, event)

    def wait(self, timeout: float | None) -> bool:
        return bool(self._epoll.poll(-1 if timeout is None else timeout))

    def fileno(self) -> int:
        return self._epoll.fileno()

    def _unmap(self) -> None:
        for view in (self._consumer, self._producer, self._headers, self._data):
            view.release()
        for area in (self._consumer_page, self._producer_area):
            try:
                area.close()
            except BufferError:  # a view taken from a sample is still held: the area is
                pass  # unmapped when the last one goes
        self._epoll.close()


class KernelRingBufReader(_MappedRing, RingBufReader):
    """The consumer of kernel RINGBUF map ``fd`` whose data area is ``size`` bytes."""

    def __init__(self, fd: int, size: int) -> None:
        if MISSING:
            raise KernelError(errno.EOPNOTSUPP, MISSING)
        super().__init__(size)
        self._closed = False
        self._map(fd, size, mmap.PROT_READ | mmap.PROT_WRITE, mmap.PROT_READ, select.EPOLLIN)

    def _load_producer_pos(self) -> int:
        pos = self._producer[0]
        if FENCE is not None:
            FENCE(ACQUIRE)
        return pos

    def _load_consumer_pos(self) -> int:
        return self._consumer[0]  # only this reader writes it

    def _store_consumer_pos(self, pos: int) -> None:
        if FENCE is not None:
            FENCE(RELEASE)
        self._consumer[0] = pos

    def _load_header(self, offset: int) -> int:
        header = self._headers[offset >> 2]
        if FENCE is not None:
            FENCE(ACQUIRE)
        return header

    def _payload(self, offset: int, length: int) -> bytes:
        return self._data[offset:offset + length].tobytes()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._unmap()


class KernelUserRingBufProducer(_MappedRing, UserRingBufProducer):
    """The producer of kernel USER_RINGBUF map ``fd`` whose data area is ``size`` bytes. A
    sample is a view of the mapping itself (the data is mapped twice, so one that wraps is
    one run of bytes)."""

    def __init__(self, fd: int, size: int) -> None:
        if MISSING:
            raise KernelError(errno.EOPNOTSUPP, MISSING)
        super().__init__(size)
        self._map(fd, size, mmap.PROT_READ, mmap.PROT_READ | mmap.PROT_WRITE, select.EPOLLOUT)

    def _load_consumer_pos(self) -> int:
        pos = self._consumer[0]
        if FENCE is not None:
            FENCE(ACQUIRE)
        return pos

    def _load_producer_pos(self) -> int:
        return self._producer[0]  # only this producer writes it

    def _store_producer_pos(self, pos: int) -> None:
        if FENCE is not None:
            FENCE(RELEASE)
        self._producer[0] = pos

    def _store_header(self, offset: int, length: int) -> None:
        self._headers[offset >> 2] = length
        self._headers[(offset >> 2) + 1] = 0

    def _sample(self, offset: int, size: int) -> memoryview:
        return self._data[offset:offset + size]

    def _commit(self, offset: int, sample: memoryview, length: int) -> None:
        if FENCE is not None:  # the sample's bytes, written through the mapping, go first
            FENCE(RELEASE)
        self._headers[offset >> 2] = length

    def _close(self) -> None:
        self._unmap()
