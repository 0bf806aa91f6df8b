"""BLOOM_FILTER (kernel/bpf/bloom_filter.c).

Rules this module keeps:
- Create: value_size over KMALLOC_MAX_SIZE -> E2BIG (``bloom_map_alloc_check``); then key_size
  != 0, value_size 0, max_entries 0, a flag outside NUMA_NODE|ZERO_SEED|ACCESS,
  RDONLY_PROG+WRONLY_PROG, or a map_extra bit above the low 4 -> EINVAL. ``map_extra`` & 0xF is
  the number of hash functions k (0 means 5). BPF_F_ZERO_SEED needs no privilege here.
- The bit array has ``n = (max_entries * k / 5) * 7`` bits rounded up to a power of two (at
  least 64; 2^32 when the product overflows u32 or exceeds 2^31). Hash i of a value is
  ``jhash2(value words, seed + i)`` when value_size is a multiple of 4, else
  ``jhash(value, seed + i)``, masked to the array; seed 0 with BPF_F_ZERO_SEED, random
  otherwise. The same bits as the kernel's, so a value tests the same way on both backends.
- Keyless. UPDATE is push (flags other than BPF_ANY -> EINVAL): sets the k bits. LOOKUP is
  peek: the value is *input*; all k bits set -> success (maybe present; the value comes back
  unchanged), else ENOENT. DELETE and GET_NEXT_KEY -> EOPNOTSUPP (95); LOOKUP_AND_DELETE and
  batches -> ENOTSUPP (524). Programs use push/peek; their lookup finds nothing and update
  is -EINVAL (BpfMap's defaults); pop is -EOPNOTSUPP.
"""

from __future__ import annotations

import errno
import random
import struct
from typing import TYPE_CHECKING

from ...errors import KernelError
from ...uapi import (
    BPF_ANY,
    BPF_F_ACCESS_MASK,
    BPF_F_NUMA_NODE,
    BPF_F_ZERO_SEED,
    KMALLOC_MAX_SIZE,
    MapType,
)
from .bpf_map import U32_MAX, BpfMap, MapAttr, bpf_map_flags_access_ok, map_ops, roundup_pow_of_two
from .jhash import jhash, jhash2

if TYPE_CHECKING:
    from ..machine.machine import Machine

BLOOM_CREATE_FLAG_MASK = BPF_F_NUMA_NODE | BPF_F_ZERO_SEED | BPF_F_ACCESS_MASK
BLOOM_DEFAULT_HASHES = 5
BITS_PER_LONG = 64


def bloom_bitset_mask(max_entries: int, nr_hash_funcs: int) -> int:
    """bitset_mask of bloom_map_alloc: the bit array's size minus one."""
    nr_bits = max_entries * nr_hash_funcs
    if nr_bits > U32_MAX:
        return U32_MAX
    nr_bits = (nr_bits // 5) * 7
    if nr_bits > U32_MAX or nr_bits > 1 << 31:
        return U32_MAX
    if nr_bits <= BITS_PER_LONG:
        return BITS_PER_LONG - 1
    return roundup_pow_of_two(nr_bits) - 1


@map_ops(MapType.BLOOM_FILTER)
class BloomFilter(BpfMap):
    """struct bpf_bloom_filter."""

    @staticmethod
    def bloom_map_alloc_check(attr: MapAttr, machine: Machine) -> None:
        if attr.value_size > KMALLOC_MAX_SIZE:
            raise KernelError(errno.E2BIG, f"value_size {attr.value_size} is over "
                                           f"KMALLOC_MAX_SIZE ({KMALLOC_MAX_SIZE})")
        if attr.key_size != 0:
            raise KernelError(errno.EINVAL, f"bloom filters have no keys: key_size must be 0, "
                                            f"got {attr.key_size}")
        if attr.value_size == 0:
            raise KernelError(errno.EINVAL, "value_size must be at least 1")
        if attr.max_entries == 0:
            raise KernelError(errno.EINVAL, "max_entries (the expected element count) must be "
                                            "at least 1")
        if attr.map_flags & ~BLOOM_CREATE_FLAG_MASK:
            raise KernelError(errno.EINVAL, f"map_flags {attr.map_flags:#x}: bloom filters accept "
                                            f"only NUMA_NODE, ZERO_SEED and the access flags")
        if not bpf_map_flags_access_ok(attr.map_flags):
            raise KernelError(errno.EINVAL, "BPF_F_RDONLY_PROG and BPF_F_WRONLY_PROG exclude "
                                            "each other")
        if attr.map_extra & ~0xF:
            raise KernelError(errno.EINVAL, f"map_extra {attr.map_extra:#x}: only bits 0-3 (the "
                                            f"number of hash functions) are defined")

    def __init__(self, attr: MapAttr, machine: Machine, node: int) -> None:
        """bloom_map_alloc."""
        super().__init__(attr, machine, node)
        self.nr_hash_funcs = attr.map_extra or BLOOM_DEFAULT_HASHES
        self.bitset_mask = bloom_bitset_mask(attr.max_entries, self.nr_hash_funcs)
        # Words of a u32-aligned value (jhash2), else 0 (jhash over bytes).
        self.aligned_u32_count = attr.value_size // 4 if attr.value_size % 4 == 0 else 0
        self.hash_seed = 0 if attr.map_flags & BPF_F_ZERO_SEED else random.getrandbits(32)
        # The set bits (memory follows use; the kernel's array can be 512 MiB).
        self.bitset: set[int] = set()

    def _hashes(self, value: bytes) -> list[int]:
        value = bytes(value[:self.value_size])
        mask = self.bitset_mask
        seed = self.hash_seed
        if self.aligned_u32_count:
            words = struct.unpack(f"<{self.aligned_u32_count}I", value)
            return [jhash2(words, (seed + i) & U32_MAX) & mask
                    for i in range(self.nr_hash_funcs)]
        return [jhash(value, (seed + i) & U32_MAX) & mask for i in range(self.nr_hash_funcs)]

    def bloom_map_push_elem(self, value: bytes, flags: int) -> None:
        if flags != BPF_ANY:
            raise KernelError(errno.EINVAL, f"flags {flags:#x}: bloom filter pushes take "
                                            f"BPF_ANY only")
        self.access_stats.access(self.machine.current_cpu(), self.numa_node)
        self.bitset.update(self._hashes(value))

    def bloom_map_peek_elem(self, value: bytes) -> None:
        """Returns when every bit of ``value`` is set, else ENOENT."""
        self.access_stats.access(self.machine.current_cpu(), self.numa_node)
        bitset = self.bitset
        for h in self._hashes(value):
            if h not in bitset:
                raise KernelError(errno.ENOENT, "the value is certainly not in the filter")

    def bloom_map_pop_elem(self) -> bytes:
        raise KernelError(errno.EOPNOTSUPP, "values cannot be removed from a bloom filter")

    def bloom_map_delete_elem(self, key: bytes | None) -> None:
        raise KernelError(errno.EOPNOTSUPP, "values cannot be removed from a bloom filter")

    def bloom_map_get_next_key(self, key: bytes | None) -> bytes:
        raise KernelError(errno.EOPNOTSUPP, "a bloom filter has no keys to iterate")

    def bloom_map_update_elem(self, key: bytes | None, value: bytes, flags: int) -> None:
        raise KernelError(errno.EINVAL, "programs add to a bloom filter with map_push_elem")

    def bloom_map_lookup_elem(self, key: bytes | None) -> bytearray | None:
        raise KernelError(errno.EOPNOTSUPP, "look up by value: map_lookup_elem(fd, None, "
                                            "value=...)")

    def bloom_map_copy_value(self, key: bytes | None, flags: int = 0,
                             value: bytes | None = None) -> bytes:
        """bpf_map_copy_value of a bloom filter: map_peek_elem of ``value`` (read from the
        caller, as the kernel reads attr->value). Without one the test is of an all-zero
        value, as with the kernel backend's zeroed buffer."""
        if value is None:
            value = bytes(self.value_size)
        self.bloom_map_peek_elem(value)
        return bytes(value[:self.value_size])

    def bloom_map_update_value(self, key: bytes | None, value: bytes, flags: int) -> None:
        """bpf_map_update_value of a bloom filter: map_push_elem."""
        self.bloom_map_push_elem(value, flags)

    # struct bpf_map_ops bloom_filter_map_ops
    map_alloc_check = bloom_map_alloc_check
    map_lookup_elem = bloom_map_lookup_elem
    map_update_elem = bloom_map_update_elem
    map_delete_elem = bloom_map_delete_elem
    map_get_next_key = bloom_map_get_next_key
    map_push_elem = bloom_map_push_elem
    map_pop_elem = bloom_map_pop_elem
    map_peek_elem = bloom_map_peek_elem
    bpf_map_copy_value = bloom_map_copy_value
    bpf_map_update_value = bloom_map_update_value
