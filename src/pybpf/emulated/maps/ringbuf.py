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
- Deliberate gap: no consumer yet (no mmap of the consumer and producer pages, no epoll):
  consumer_pos stays 0, so a ring fills up; ``bpf_ringbuf_query`` shows the positions.
"""

from __future__ import annotations

import errno
import struct
import threading
from typing import TYPE_CHECKING

from ...errors import KernelError
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
