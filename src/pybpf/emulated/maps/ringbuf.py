"""RINGBUF (kernel/bpf/ringbuf.c): creation and the syscall element commands.

Rules this module keeps:
- Create (``ringbuf_map_alloc``): a flag other than BPF_F_NUMA_NODE (RDONLY/WRONLY included)
  -> EINVAL; key_size or value_size non-zero, max_entries (the data size in bytes) not a
  power of two or not a multiple of the 4 KiB page -> EINVAL; over RINGBUF_MAX_DATA_SZ ->
  E2BIG (unreachable with a u32 max_entries on 64-bit, as in the kernel).
- Every element command -> ENOTSUPP (524): lookup, update, delete, get_next_key; batches and
  lookup_and_delete have no handler (524 too). Records move through mmap and epoll only.
- The producer side is the kernel's (__bpf_ringbuf_reserve, bpf_ringbuf_commit): a record is
  an 8-byte header (length with the BUSY and DISCARD bits, page offset) and its data rounded
  up to 8, at producer_pos in a data area of max_entries bytes that wraps; a reservation
  fails when the producer would run more than max_entries - 1 ahead of the consumer or of
  the oldest record still reserved. A reserved record is memory of its own, which the
  program writes and commit copies into the ring (the kernel maps the data area twice so a
  record may wrap; here the copy wraps).
- The consumer is ``RingBufConsumer`` (``System.ringbuf_reader``): pybpf.ringbuf's walk over
  the positions and data kept here, woken by an eventfd at each commit.
"""

from __future__ import annotations

import errno
import os
import select
import struct
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from ...errors import KernelError
from ...ringbuf import RingBufReader
from ...uapi import BPF_F_NUMA_NODE, ENOTSUPP, MapType
from .bpf_map import BpfMap, MapAttr, map_ops

if TYPE_CHECKING:
    from ..machine.machine import Machine

PAGE_SIZE = 4096
RINGBUF_CREATE_FLAG_MASK = BPF_F_NUMA_NODE
# (2^24 - 2 - RINGBUF_PGOFF) pages: the largest data area a record header's page offset fits.
RINGBUF_PGOFF = 1
RINGBUF_MAX_DATA_SZ = ((1 << 24) - 2 - RINGBUF_PGOFF) * PAGE_SIZE

_NOT_SUPPORTED = "ring buffers have no elements: records are read through mmap"
BPF_RINGBUF_BUSY_BIT = 1 << 31
BPF_RINGBUF_DISCARD_BIT = 1 << 30
BPF_RINGBUF_HDR_SZ = 8
RINGBUF_MAX_RECORD_SZ = 0xFFFFFFFF // 4
# Pages before the data area: the map's own, then the consumer's and the producer's.
RINGBUF_DATA_PGOFF = RINGBUF_PGOFF + 2
BPF_RB_AVAIL_DATA, BPF_RB_RING_SIZE, BPF_RB_CONS_POS, BPF_RB_PROD_POS = range(4)
_HEADER = struct.Struct("<II")  # struct bpf_ringbuf_hdr: len, pg_off
# id(record memory) -> (its ring, its position, the memory) while reserved: what submit and
# discard find a record's ring by (the kernel: from the header's page offset)
_RESERVED: dict[int, tuple[RingBuf, int, bytearray]] = {}
_reserved_lock = threading.Lock()


# The rings this thread committed to since its last irq_work_run.
_irq_work = threading.local()


def irq_work_run() -> None:
    """Wake the readers of the rings this thread's program committed to: the kernel queues
    the wake-up as irq_work, which runs once the program is done (interrupts on again), so a
    reader woken by a run finds all of its records."""
    rings = getattr(_irq_work, "rings", None)
    if rings:
        _irq_work.rings = set()
        for ring in rings:
            ring.wake_readers()


@map_ops(MapType.RINGBUF)
class RingBuf(BpfMap):
    """struct bpf_ringbuf_map (the map object; see the module note on the data path)."""

    @staticmethod
    def ringbuf_map_alloc_check(attr: MapAttr, machine: Machine) -> None:
        if attr.map_flags & ~RINGBUF_CREATE_FLAG_MASK:
            raise KernelError(errno.EINVAL, f"map_flags {attr.map_flags:#x}: ring buffers accept "
                                            f"only BPF_F_NUMA_NODE")
        size = attr.max_entries
        if attr.key_size or attr.value_size:
            raise KernelError(errno.EINVAL, "ring buffers take key_size 0 and value_size 0 (the "
                                            "size goes in max_entries)")
        if size == 0 or size & (size - 1) or size % PAGE_SIZE:
            raise KernelError(errno.EINVAL, f"max_entries {size} must be a power of two and a "
                                            f"multiple of the page size ({PAGE_SIZE})")
        if size > RINGBUF_MAX_DATA_SZ:
            raise KernelError(errno.E2BIG, f"max_entries {size} is over {RINGBUF_MAX_DATA_SZ}")

    def __init__(self, attr: MapAttr, machine: Machine, node: int) -> None:
        super().__init__(attr, machine, node)
        self.data = bytearray(attr.max_entries)
        self.mask = attr.max_entries - 1
        self.consumer_pos = self.producer_pos = self.pending_pos = 0
        self.spinlock = threading.Lock()
        self.wakeups: set[int] = set()  # the eventfds of this ring's readers

    # -- the producer side (programs) ---------------------------------------------------------
    def bpf_ringbuf_reserve(self, size: int) -> bytearray | None:
        """__bpf_ringbuf_reserve: memory for a record of ``size`` bytes, or None (too big, or
        no room)."""
        if size > RINGBUF_MAX_RECORD_SZ:
            return None
        length = (size + BPF_RINGBUF_HDR_SZ + 7) & ~7
        if length > self.mask + 1:
            return None
        with self.spinlock:
            pending, prod = self.pending_pos, self.producer_pos
            while pending < prod:  # skip the records committed since
                hdr_len = _HEADER.unpack_from(self.data, pending & self.mask)[0]
                if hdr_len & BPF_RINGBUF_BUSY_BIT:
                    break
                pending += ((hdr_len & ~BPF_RINGBUF_DISCARD_BIT) + BPF_RINGBUF_HDR_SZ + 7) & ~7
            self.pending_pos = pending
            new_prod = prod + length
            if new_prod - self.consumer_pos > self.mask or new_prod - pending > self.mask:
                return None
            at = prod & self.mask
            _HEADER.pack_into(self.data, at, size | BPF_RINGBUF_BUSY_BIT,
                              RINGBUF_DATA_PGOFF + at // PAGE_SIZE)
            self.producer_pos = new_prod
        record = bytearray(size)
        with _reserved_lock:
            _RESERVED[id(record)] = (self, at, record)
        return record

    def bpf_ringbuf_commit(self, at: int, record: bytearray, discard: bool) -> None:
        """bpf_ringbuf_commit: the record's data into the ring, then its header without the
        BUSY bit (with DISCARD for a discarded one)."""
        start = (at + BPF_RINGBUF_HDR_SZ) & self.mask
        first = min(len(record), len(self.data) - start)
        self.data[start:start + first] = record[:first]
        self.data[:len(record) - first] = record[first:]
        length = len(record) | (BPF_RINGBUF_DISCARD_BIT if discard else 0)
        with self.spinlock:  # the kernel's xchg of hdr->len
            self.data[at:at + 4] = length.to_bytes(4, "little")
        # the kernel's irq_work wakes the waiters once the program is done
        _irq_work.__dict__.setdefault("rings", set()).add(self)

    def wake_readers(self) -> None:
        with self.spinlock:
            wakeups = tuple(self.wakeups)
        for event in wakeups:
            os.eventfd_write(event, 1)

    def bpf_ringbuf_query(self, flags: int) -> int:
        return {BPF_RB_AVAIL_DATA: self.producer_pos - self.consumer_pos,
                BPF_RB_RING_SIZE: self.mask + 1, BPF_RB_CONS_POS: self.consumer_pos,
                BPF_RB_PROD_POS: self.producer_pos}.get(flags, 0)

    def ringbuf_map_lookup_elem(self, key: bytes | None) -> bytearray | None:
        raise KernelError(ENOTSUPP, _NOT_SUPPORTED)

    def ringbuf_map_update_elem(self, key: bytes | None, value: bytes, flags: int) -> None:
        raise KernelError(ENOTSUPP, _NOT_SUPPORTED)

    def ringbuf_map_delete_elem(self, key: bytes | None) -> None:
        raise KernelError(ENOTSUPP, _NOT_SUPPORTED)

    def ringbuf_map_get_next_key(self, key: bytes | None) -> bytes:
        raise KernelError(ENOTSUPP, _NOT_SUPPORTED)

    # struct bpf_map_ops ringbuf_map_ops
    map_alloc_check = ringbuf_map_alloc_check
    map_lookup_elem = ringbuf_map_lookup_elem
    map_update_elem = ringbuf_map_update_elem
    map_delete_elem = ringbuf_map_delete_elem
    map_get_next_key = ringbuf_map_get_next_key


def bpf_ringbuf_commit(record: bytearray, discard: bool) -> bool:
    """Submit (or discard) a reserved ``record``; False if it is not one."""
    with _reserved_lock:
        found = _RESERVED.pop(id(record), None)
    if found is None or found[2] is not record:
        return False
    ring, at, _ = found
    ring.bpf_ringbuf_commit(at, record, discard)
    return True


class RingBufConsumer(RingBufReader):
    """The user-space consumer of an emulated ring (``System.ringbuf_reader``): the walk is
    ``pybpf.ringbuf``'s, over the positions and data the map keeps, as the kernel's reader
    walks the pages it maps. It holds a reference on the map (as a mapping does) until
    ``close``. Every commit wakes it (the kernel wakes a reader only once it has caught up, or
    on BPF_RB_FORCE_WAKEUP: an extra wake-up finds the same records)."""

    def __init__(self, ring: RingBuf, release: Callable[[], None]) -> None:
        super().__init__(len(ring.data))
        self.ring = ring
        self._release: Callable[[], None] | None = release
        self._event = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        with ring.spinlock:
            ring.wakeups.add(self._event)

    def _load_producer_pos(self) -> int:
        self._check_open()
        return self.ring.producer_pos

    def _load_consumer_pos(self) -> int:
        self._check_open()
        return self.ring.consumer_pos

    def _check_open(self) -> None:
        if self._release is None:  # as the kernel reader's released mapping answers
            raise ValueError("the ring buffer reader is closed")

    def _store_consumer_pos(self, pos: int) -> None:
        with self.ring.spinlock:  # the producer's space check reads it under the lock
            self.ring.consumer_pos = pos

    def _load_header(self, offset: int) -> int:
        with self.ring.spinlock:  # the commit writes the header under it
            return int.from_bytes(self.ring.data[offset:offset + 4], "little")

    def _payload(self, offset: int, length: int) -> bytes:
        data, start = self.ring.data, offset & self.ring.mask
        first = data[start:start + length]
        return bytes(first + data[:length - len(first)])

    def wait(self, timeout: float | None) -> bool:
        ready, _, _ = select.select([self._event], [], [], timeout)
        if not ready:
            return False
        try:
            os.eventfd_read(self._event)
        except BlockingIOError:  # another waiter took it
            pass
        return True

    def fileno(self) -> int:
        return self._event

    def close(self) -> None:
        if self._release is None:
            return
        with self.ring.spinlock:
            self.ring.wakeups.discard(self._event)
        os.close(self._event)
        release, self._release = self._release, None
        release()
