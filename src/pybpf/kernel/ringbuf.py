"""Reading a kernel BPF ring buffer from user space, as libbpf's ring_buffer__add/__poll do.

Mappings of the map fd (kernel/bpf/ringbuf.c, ringbuf_map_mmap_kern): the consumer page
read-write at offset 0, and from offset one page the producer page and the data area
read-only, the data mapped twice in a row by the kernel, so a record that wraps past the end
reads as one run of bytes. An epoll instance watches the map fd: the kernel reports it
readable while data is there (ringbuf_map_poll_kern) and wakes it when a record is committed
to a consumer that had caught up.

Memory ordering: the producer is the kernel on another CPU. A position is read with acquire
and consumer_pos written with release, as libbpf's smp_load_acquire / smp_store_release.
On x86 (total store order) a plain aligned load is an acquire and a plain store a release,
and each access below is one aligned 4- or 8-byte load or store (memoryview items); other
CPUs get libatomic's atomic_thread_fence around them, and without libatomic the reader is
refused there rather than read records out of order.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import mmap
import platform
import select

from ..errors import KernelError
from ..ringbuf import RingBufReader

_MEMORY_ORDER_ACQUIRE, _MEMORY_ORDER_RELEASE = 2, 3


def _thread_fence():
    """libatomic's atomic_thread_fence(order), or None where loads and stores already order
    as acquire and release (x86) or where libatomic is missing (``_FENCE_MISSING``)."""
    if platform.machine() in ("x86_64", "AMD64", "i386", "i686"):
        return None
    name = ctypes.util.find_library("atomic")
    try:
        fence = ctypes.CDLL(name or "libatomic.so.1").atomic_thread_fence
    except (OSError, AttributeError):
        return None
    fence.argtypes, fence.restype = [ctypes.c_int], None
    return fence


_FENCE = _thread_fence()
_FENCE_MISSING = _FENCE is None and platform.machine() not in ("x86_64", "AMD64", "i386",
                                                               "i686")


class KernelRingBufReader(RingBufReader):
    """The consumer of kernel RINGBUF map ``fd`` whose data area is ``size`` bytes."""

    def __init__(self, fd: int, size: int) -> None:
        if _FENCE_MISSING:
            raise KernelError(errno.EOPNOTSUPP, f"reading a ring buffer on {platform.machine()} "
                              "needs memory barriers from libatomic (libatomic1), which is "
                              "not installed")
        super().__init__(size)
        page = mmap.PAGESIZE
        self._closed = False
        try:
            self._consumer_page = mmap.mmap(fd, page, mmap.MAP_SHARED,
                                            mmap.PROT_READ | mmap.PROT_WRITE)
        except OSError as exc:
            raise KernelError(exc.errno, f"mmap of the consumer page: {exc.strerror}") from None
        try:
            self._producer_area = mmap.mmap(fd, page + 2 * size, mmap.MAP_SHARED,
                                            mmap.PROT_READ, offset=page)
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
        self._epoll.register(fd, select.EPOLLIN)

    def _load_producer_pos(self) -> int:
        pos = self._producer[0]
        if _FENCE is not None:
            _FENCE(_MEMORY_ORDER_ACQUIRE)
        return pos

    def _load_consumer_pos(self) -> int:
        return self._consumer[0]  # only this reader writes it

    def _store_consumer_pos(self, pos: int) -> None:
        if _FENCE is not None:
            _FENCE(_MEMORY_ORDER_RELEASE)
        self._consumer[0] = pos

    def _load_header(self, offset: int) -> int:
        header = self._headers[offset >> 2]
        if _FENCE is not None:
            _FENCE(_MEMORY_ORDER_ACQUIRE)
        return header

    def _payload(self, offset: int, length: int) -> bytes:
        return self._data[offset:offset + length].tobytes()

    def wait(self, timeout: float | None) -> bool:
        return bool(self._epoll.poll(-1 if timeout is None else timeout))

    def fileno(self) -> int:
        return self._epoll.fileno()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for view in (self._consumer, self._producer, self._headers, self._data):
            view.release()
        self._consumer_page.close()
        self._producer_area.close()
        self._epoll.close()
