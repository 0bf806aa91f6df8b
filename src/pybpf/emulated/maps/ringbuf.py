"""RINGBUF (kernel/bpf/ringbuf.c): creation and the syscall element commands.

Rules this module keeps:
- Create (``ringbuf_map_alloc``): a flag other than BPF_F_NUMA_NODE (RDONLY/WRONLY included)
  -> EINVAL; key_size or value_size non-zero, max_entries (the data size in bytes) not a
  power of two or not a multiple of the 4 KiB page -> EINVAL; over RINGBUF_MAX_DATA_SZ ->
  E2BIG (unreachable with a u32 max_entries on 64-bit, as in the kernel).
- Every element command -> ENOTSUPP (524): lookup, update, delete, get_next_key; batches and
  lookup_and_delete have no handler (524 too). Records move through mmap and epoll only.
- Deliberate gap: the emulated backend has no ring buffer data path yet (no reserve/submit/
  output from programs, no consumer); only the map object and its syscall errors exist.
"""

from __future__ import annotations

import errno
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
