"""RINGBUF and USER_RINGBUF (kernel/bpf/ringbuf.c): creation, the syscall element commands,
the kernel's producer of a RINGBUF and consumer of a USER_RINGBUF.

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
- USER_RINGBUF (``UserRingBuf``) is the same map the other way round: created and refused
  as RINGBUF; user space produces (``UserRingBufWriter``, ``System.user_ringbuf_producer``:
  pybpf.ringbuf's protocol over the positions and data kept here, a sample staged in memory
  of its own until submit copies it in, as a kernel program's reservation is) and programs
  consume with bpf_user_ringbuf_drain, which checks every header as the kernel's
  __bpf_user_ringbuf_peek does (positions 8-aligned, a record inside what was produced and
  inside the ring, at most a dynptr's 2^24 - 1 bytes), skips discarded records, stops at a
  BUSY one, and lets one drain at a time run (-EBUSY). The callback sees a copy of the
  sample (the kernel hands it the ring's pages): a write through its dynptr is not seen in
  the ring, which the producer then reuses anyway.
"""

from __future__ import annotations

import errno
import os
import select
import struct
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ...errors import KernelError
from ...ringbuf import RingBufReader, UserRingBufProducer, record_span
from ...uapi import BPF_F_NUMA_NODE, ENOTSUPP, MapType
from ..machine.machine import MODULE_TASK_LOCALS, eventfd_wait
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
BPF_RB_NO_WAKEUP, BPF_RB_FORCE_WAKEUP = 1, 2
BPF_MAX_USER_RINGBUF_SAMPLES = 128 * 1024
DYNPTR_MAX_SIZE = (1 << 24) - 1  # bpf_dynptr_check_size: a dynptr's size field
_HEADER = struct.Struct("<II")  # struct bpf_ringbuf_hdr: len, pg_off
# id(record memory) -> (its ring, its position, the memory) while reserved: what submit and
# discard find a record's ring by (the kernel: from the header's page offset)
_RESERVED: dict[int, tuple[RingBuf, int, bytearray]] = {}
_reserved_lock = threading.Lock()


# The rings this thread committed to since its last irq_work_run.
_irq_work = threading.local()
MODULE_TASK_LOCALS.append(_irq_work)


_irq_work_used = False  # whether any ring ever queued a wake-up (each run asks)


def irq_work_queue(ring: RingBuf) -> None:
    """Queue the wake-up of ``ring``'s readers for the end of this thread's run."""
    global _irq_work_used
    _irq_work_used = True
    _irq_work.__dict__.setdefault("rings", set()).add(ring)


def irq_work_run() -> None:
    """Wake the readers of the rings this thread's program committed to: the kernel queues
    the wake-up as irq_work, which runs once the program is done (interrupts on again), so a
    reader woken by a run finds all of its records."""
    if not _irq_work_used:  # no thread-local read for the runs of a process without rings
        return
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
        irq_work_queue(self)

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


@map_ops(MapType.USER_RINGBUF)
class UserRingBuf(RingBuf):
    """struct bpf_ringbuf_map of a USER_RINGBUF (user_ringbuf_map_ops): RINGBUF's creation
    and element commands; see the module note on the data path."""

    def __init__(self, attr: MapAttr, machine: Machine, node: int) -> None:
        super().__init__(attr, machine, node)
        self.busy = False  # rb->busy: a drain is running

    def bpf_user_ringbuf_peek(self) -> tuple[int, int, int]:
        """__bpf_user_ringbuf_peek: (0, data offset, size) of the oldest sample, or
        (-errno, 0, 0): -ENODATA none (or BUSY), -EAGAIN a discarded one (skipped here),
        -EINVAL / -E2BIG a header or position that cannot be right."""
        with self.spinlock:
            prod, cons = self.producer_pos, self.consumer_pos
            if prod % 8:
                return -errno.EINVAL, 0, 0
            if cons >= prod:
                return -errno.ENODATA, 0, 0
            hdr_len = int.from_bytes(self.data[cons & self.mask:(cons & self.mask) + 4],
                                     "little")
        flags = hdr_len & (BPF_RINGBUF_BUSY_BIT | BPF_RINGBUF_DISCARD_BIT)
        sample_len = hdr_len & ~flags
        total = record_span(sample_len)
        if total > prod - cons:
            return -errno.EINVAL, 0, 0
        if total > self.mask + 1 or sample_len > DYNPTR_MAX_SIZE:
            return -errno.E2BIG, 0, 0
        if flags & BPF_RINGBUF_DISCARD_BIT:
            with self.spinlock:
                self.consumer_pos = cons + total
            return -errno.EAGAIN, 0, 0
        if flags & BPF_RINGBUF_BUSY_BIT:
            return -errno.ENODATA, 0, 0
        return 0, (cons + BPF_RINGBUF_HDR_SZ) & self.mask, sample_len

    def bpf_user_ringbuf_drain(self, callback: Callable[[bytearray], int], flags: int) -> int:
        """bpf_user_ringbuf_drain: ``callback(sample)`` for each sample, oldest first, until
        it returns non-zero, none is left or BPF_MAX_USER_RINGBUF_SAMPLES were taken; the
        samples taken (discarded ones not counted), or -EINVAL (flags), -EBUSY (a drain is
        running), or a bad header's -EINVAL / -E2BIG (the samples before it stay taken). A
        drain that took a sample, or is asked to (BPF_RB_FORCE_WAKEUP), wakes the producers
        once the program is done, unless BPF_RB_NO_WAKEUP."""
        if flags & ~(BPF_RB_NO_WAKEUP | BPF_RB_FORCE_WAKEUP):
            return -errno.EINVAL
        with self.spinlock:
            if self.busy:
                return -errno.EBUSY
            self.busy = True
        samples = discarded = ret = error = 0
        try:
            while samples < BPF_MAX_USER_RINGBUF_SAMPLES and ret == 0:
                err, offset, size = self.bpf_user_ringbuf_peek()
                if err == -errno.ENODATA:
                    break
                if err and err != -errno.EAGAIN:
                    error = err
                    break
                samples += 1  # the kernel's loop counts every turn, a discarded one too
                if err:
                    discarded += 1
                    continue
                ret = callback(self.sample_copy(offset, size))
                with self.spinlock:  # __bpf_user_ringbuf_sample_release
                    self.consumer_pos += record_span(size)
        finally:
            with self.spinlock:
                self.busy = False
        if flags & BPF_RB_FORCE_WAKEUP or not flags & BPF_RB_NO_WAKEUP and samples > 0:
            irq_work_queue(self)
        return error or samples - discarded

    def sample_copy(self, offset: int, size: int) -> bytearray:
        """The ``size`` bytes at data ``offset`` (past the end: from the start again)."""
        first = self.data[offset:offset + size]
        return first + self.data[:size - len(first)]


class UserRingBufWriter(UserRingBufProducer):
    """The user-space producer of an emulated USER_RINGBUF (``System.user_ringbuf_producer``):
    pybpf.ringbuf's protocol over the positions and data the map keeps, a sample staged in a
    buffer of its own (a copy of the ring's bytes where it lies) until submit. It holds a
    reference on the map (as a mapping does) until ``close``; its eventfd is signalled by each
    drain that wakes producers, and ``wait`` answers as epoll on the kernel's map fd does. The
    eventfd itself (``fileno``) is readable only once a drain signalled it, where the kernel's
    epoll fd is readable for as long as the producer is on its ready list with room."""

    def __init__(self, ring: UserRingBuf, release: Callable[[], None]) -> None:
        super().__init__(len(ring.data))
        self.ring = ring
        self._release = release
        self._event = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        with ring.spinlock:
            ring.wakeups.add(self._event)
            # on epoll's ready list: ep_insert's look at the map found room
            self._ready = ring.producer_pos - ring.consumer_pos < len(ring.data)

    def _load_consumer_pos(self) -> int:
        with self.ring.spinlock:
            return self.ring.consumer_pos

    def _load_producer_pos(self) -> int:
        return self.ring.producer_pos  # only this producer writes it

    def _store_producer_pos(self, pos: int) -> None:
        with self.ring.spinlock:  # the drain reads it under the lock
            self.ring.producer_pos = pos

    def _store_header(self, offset: int, length: int) -> None:
        with self.ring.spinlock:
            _HEADER.pack_into(self.ring.data, offset, length, 0)

    def _sample(self, offset: int, size: int) -> memoryview:
        # libbpf's sample is the mapped ring itself: before the producer writes it, it holds
        # what earlier records left there, not zeros
        return memoryview(self.ring.sample_copy(offset, size))

    def _commit(self, offset: int, sample: memoryview, length: int) -> None:
        data, start = self.ring.data, (offset + BPF_RINGBUF_HDR_SZ) & self.ring.mask
        first = min(len(sample), len(data) - start)
        data[start:start + first] = sample[:first]
        data[:len(sample) - first] = sample[first:]
        with self.ring.spinlock:
            data[offset:offset + 4] = length.to_bytes(4, "little")

    def wait(self, timeout: float | None) -> bool:
        """What epoll_wait on the map fd answers (ringbuf_map_poll_user, level-triggered):
        True while the producer is on epoll's ready list and the ring has a byte free; a
        look that finds it full takes it off the list, and only a drain's wake-up puts it
        back (so room a BPF_RB_NO_WAKEUP drain made is not seen until then, and a
        BPF_RB_FORCE_WAKEUP of a full ring is looked at and waited on). False when
        ``timeout`` seconds pass first."""
        ring = self.ring
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if self._ready:
                self._take_wakeups()  # a wake-up before this look is answered by it
                with ring.spinlock:
                    if ring.producer_pos - ring.consumer_pos < len(ring.data):
                        return True
                self._ready = False
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not select.select([self._event], [], [], remaining)[0]:
                return False
            self._ready = True

    def _take_wakeups(self) -> None:
        try:
            os.eventfd_read(self._event)
        except BlockingIOError:  # none came
            pass

    def fileno(self) -> int:
        return self._event

    def _close(self) -> None:
        with self.ring.spinlock:
            self.ring.wakeups.discard(self._event)
        os.close(self._event)
        self._release()


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
        return eventfd_wait(self._event, timeout)

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
