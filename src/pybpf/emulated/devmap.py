"""DEVMAP and DEVMAP_HASH (kernel/bpf/devmap.c): creation and element rules.

Rules this module keeps:
- Values are ``struct bpf_devmap_val { u32 ifindex; union { int fd; u32 id; } bpf_prog; }``
  cut to value_size (4: ifindex only, 8: with an XDP program fd on update, its id on lookup).
- Create (``dev_map_init_map``): max_entries 0, key_size != 4, value_size not 4 or 8, a flag
  outside NUMA_NODE|RDONLY|WRONLY -> EINVAL; DEVMAP_HASH with max_entries over 2^31 (its
  bucket count overflows) -> EINVAL. The kernel then adds BPF_F_RDONLY_PROG to map_flags
  (programs get a pointer into the device entry and must not write it).
- Devices: an ifindex must name a network device of the machine, else EINVAL (the kernel's
  ``dev_get_by_index`` failure). The emulated machine has the devices in
  ``machine.ifindexes`` when it declares them, else just the loopback device, ifindex 1.
  A program fd > 0 must be an XDP program loaded with expected_attach_type XDP_DEVMAP, else
  EINVAL.
- DEVMAP: update flags > BPF_EXIST -> EINVAL, index >= max_entries -> E2BIG, BPF_NOEXIST ->
  EEXIST; ifindex 0 clears the slot (a prog fd with it -> EINVAL). Lookup of an empty slot or
  an index >= max_entries -> ENOENT. Delete of index >= max_entries -> EINVAL, else 0 even when
  empty. get_next_key walks every index.
- DEVMAP_HASH: flags > BPF_EXIST or ifindex 0 -> EINVAL; present + BPF_NOEXIST -> EEXIST;
  device/program checks (EINVAL) come before the capacity check (a new key beyond
  max_entries -> E2BIG); BPF_EXIST on an absent key inserts it. Buckets are indexed by the key
  itself (``key & (n_buckets - 1)``, no hash), new and replaced entries go to the front, and
  get_next_key walks buckets in order (a missing key restarts at the first).
- LOOKUP_AND_DELETE and batches -> ENOTSUPP. The redirect data path is not emulated yet.
"""

from __future__ import annotations

import errno
import struct
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from ..errors import KernelError
from ..uapi import (
    BPF_EXIST,
    BPF_F_NUMA_NODE,
    BPF_F_RDONLY,
    BPF_F_RDONLY_PROG,
    BPF_F_WRONLY,
    BPF_NOEXIST,
    AttachType,
    MapType,
    ProgType,
)
from .arraymap import index_get_next_key
from .bpf_map import BpfMap, MapAttr, map_ops, roundup_pow_of_two, u32_key

if TYPE_CHECKING:
    from .machine import Machine

DEV_CREATE_FLAG_MASK = BPF_F_NUMA_NODE | BPF_F_RDONLY | BPF_F_WRONLY
# The emulated machine's network devices when it declares none: the loopback device.
DEFAULT_IFINDEXES = frozenset({1})


def machine_ifindexes(machine: Machine) -> frozenset[int]:
    """The ifindexes of the machine's network devices."""
    return frozenset(getattr(machine, "ifindexes", DEFAULT_IFINDEXES))


def resolve_xdp_prog(system, fd: int, attach_type: int) -> object | None:
    """An XDP program fd stored with a devmap/cpumap entry; None when the check fails."""
    try:
        prog = system.prog_from_fd(fd)
    except KernelError:
        return None
    if prog.prog_type != ProgType.XDP or prog.expected_attach_type != attach_type:
        return None
    return prog


class HashBuckets:
    """hlist buckets as devmap_hash and sockhash keep them: front insertion, per-bucket order.

    ``roundup_pow_of_two(max_entries)`` buckets; a key goes to bucket ``key_hash(key) &
    (n_buckets - 1)``; entries are ``[key, obj]``. Writers hold the owning map's lock;
    readers take none (RCU in the kernel), so they read buckets through copies.
    """

    def __init__(self, max_entries: int, key_hash: Callable[[bytes], int]) -> None:
        mask = roundup_pow_of_two(max_entries) - 1
        self.bucket_of = lambda key: key_hash(key) & mask
        self.buckets: dict[int, list[list]] = {}  # only non-empty buckets
        self.count = 0

    def find(self, key: bytes) -> list | None:
        for entry in tuple(self.buckets.get(self.bucket_of(key), ())):
            if entry[0] == key:
                return entry
        return None

    def add_head(self, key: bytes, obj: object) -> None:
        self.buckets.setdefault(self.bucket_of(key), []).insert(0, [key, obj])
        self.count += 1

    def remove(self, entry: list) -> None:
        index = self.bucket_of(entry[0])
        bucket = self.buckets[index]
        del bucket[next(pos for pos, e in enumerate(bucket) if e is entry)]
        if not bucket:
            del self.buckets[index]
        self.count -= 1

    def entries(self) -> Iterator[list]:
        for index in sorted(self.buckets):
            yield from tuple(self.buckets.get(index, ()))

    def _first_from(self, start: int) -> bytes:
        while True:
            later = [index for index in list(self.buckets) if index >= start]
            if not later:
                raise KernelError(errno.ENOENT, "no more keys")
            index = min(later)
            bucket = tuple(self.buckets.get(index, ()))
            if bucket:
                return bucket[0][0]
            start = index + 1  # emptied meanwhile

    def get_next_key(self, key: bytes | None) -> bytes:
        """The hash maps' get_next_key: next in the bucket, then the next non-empty bucket."""
        if key is None:
            return self._first_from(0)
        index = self.bucket_of(key)
        bucket = tuple(self.buckets.get(index, ()))
        for pos, entry in enumerate(bucket):
            if entry[0] == key:
                if pos + 1 < len(bucket):
                    return bucket[pos + 1][0]
                return self._first_from(index + 1)
        return self._first_from(0)


class DevMapBase(BpfMap):
    """What DEVMAP and DEVMAP_HASH share: creation, value parsing, the device check."""

    @staticmethod
    def dev_map_alloc_check(attr: MapAttr, machine: Machine) -> None:
        """dev_map_alloc's checks, made before it allocates."""
        if attr.max_entries == 0:
            raise KernelError(errno.EINVAL, "max_entries must be at least 1")
        if attr.key_size != 4:
            raise KernelError(errno.EINVAL, f"devmap keys are u32: key_size must be 4, got "
                                            f"{attr.key_size}")
        if attr.value_size not in (4, 8):
            raise KernelError(errno.EINVAL, f"value_size {attr.value_size}: a devmap value is a "
                                            f"u32 ifindex (4) or ifindex + XDP prog fd (8)")
        if attr.map_flags & ~DEV_CREATE_FLAG_MASK:
            raise KernelError(errno.EINVAL, f"map_flags {attr.map_flags:#x}: devmaps accept only "
                                            f"NUMA_NODE, RDONLY and WRONLY")

    def __init__(self, attr: MapAttr, machine: Machine, node: int) -> None:
        """dev_map_alloc."""
        super().__init__(attr, machine, node)
        self.map_flags |= BPF_F_RDONLY_PROG

    def _parse_value(self, value: bytes) -> tuple[int, int]:
        ifindex = int.from_bytes(value[:4], "little")
        prog_fd = struct.unpack("<i", value[4:8])[0] if self.value_size == 8 else 0
        return ifindex, prog_fd

    def dev_map_alloc_node(self, ifindex: int, prog_fd: int) -> bytearray:
        """__dev_map_alloc_node: the entry's live ``bpf_devmap_val`` (ifindex, prog id)."""
        if ifindex not in machine_ifindexes(self.machine):
            raise KernelError(errno.EINVAL, f"no network device has ifindex {ifindex}")
        prog_id = 0
        if prog_fd > 0:
            prog = resolve_xdp_prog(self.system, prog_fd, AttachType.XDP_DEVMAP)
            if prog is None:
                raise KernelError(errno.EINVAL, f"fd {prog_fd} is not an XDP program loaded "
                                                f"with expected_attach_type BPF_XDP_DEVMAP")
            prog_id = prog.id
        return bytearray(struct.pack("<II", ifindex, prog_id))

    def _count(self) -> None:
        self.access_stats.access(self.machine.current_cpu(), self.numa_node)


@map_ops(MapType.DEVMAP)
class DevMap(DevMapBase):
    """BPF_MAP_TYPE_DEVMAP: an array of devices."""

    def __init__(self, attr: MapAttr, machine: Machine, node: int) -> None:
        super().__init__(attr, machine, node)
        self.netdev_map: dict[int, bytearray] = {}

    def dev_map_lookup_elem(self, key: bytes) -> bytearray | None:
        self._count()
        return self.netdev_map.get(u32_key(key))

    def dev_map_update_elem(self, key: bytes, value: bytes, flags: int) -> None:
        index = u32_key(key)
        if flags > BPF_EXIST:
            raise KernelError(errno.EINVAL, f"flags {flags:#x}: use BPF_ANY or BPF_EXIST")
        if index >= self.max_entries:
            raise KernelError(errno.E2BIG, f"index {index} is out of range (max_entries "
                                           f"{self.max_entries})")
        if flags == BPF_NOEXIST:
            raise KernelError(errno.EEXIST, "every devmap slot exists, so BPF_NOEXIST always "
                                            "fails")
        ifindex, prog_fd = self._parse_value(value)
        if not ifindex:
            if prog_fd > 0:
                raise KernelError(errno.EINVAL, "a program fd needs a device: ifindex is 0")
            self.netdev_map.pop(index, None)
            return
        self.netdev_map[index] = self.dev_map_alloc_node(ifindex, prog_fd)
        self._count()

    def dev_map_delete_elem(self, key: bytes) -> None:
        index = u32_key(key)
        if index >= self.max_entries:
            raise KernelError(errno.EINVAL, f"index {index} is out of range (max_entries "
                                            f"{self.max_entries})")
        self.netdev_map.pop(index, None)

    def dev_map_get_next_key(self, key: bytes | None) -> bytes:
        return index_get_next_key(self.max_entries, key)

    # struct bpf_map_ops dev_map_ops
    map_alloc_check = DevMapBase.dev_map_alloc_check
    map_lookup_elem = dev_map_lookup_elem
    map_update_elem = dev_map_update_elem
    map_delete_elem = dev_map_delete_elem
    map_get_next_key = dev_map_get_next_key


@map_ops(MapType.DEVMAP_HASH)
class DevMapHash(DevMapBase):
    """BPF_MAP_TYPE_DEVMAP_HASH: devices keyed by any u32 (usually the ifindex)."""

    @staticmethod
    def dev_map_hash_alloc_check(attr: MapAttr, machine: Machine) -> None:
        DevMapBase.dev_map_alloc_check(attr, machine)
        if attr.max_entries > 1 << 31:
            raise KernelError(errno.EINVAL, f"max_entries {attr.max_entries}: the bucket count "
                                            f"(next power of two) would overflow u32")

    def __init__(self, attr: MapAttr, machine: Machine, node: int) -> None:
        super().__init__(attr, machine, node)
        self.index = HashBuckets(attr.max_entries, u32_key)
        self.index_lock = threading.Lock()  # dtab->index_lock: updates and deletes

    def dev_map_hash_lookup_elem(self, key: bytes) -> bytearray | None:
        self._count()
        entry = self.index.find(key)
        return None if entry is None else entry[1]

    def dev_map_hash_update_elem(self, key: bytes, value: bytes, flags: int) -> None:
        ifindex, prog_fd = self._parse_value(value)
        if flags > BPF_EXIST or not ifindex:
            raise KernelError(errno.EINVAL, f"flags {flags:#x} / ifindex {ifindex}: use BPF_ANY, "
                                            f"BPF_NOEXIST or BPF_EXIST and a non-zero ifindex")
        with self.index_lock:
            old = self.index.find(key)
            if old is not None and flags & BPF_NOEXIST:
                raise KernelError(errno.EEXIST, f"key {u32_key(key)} is present and "
                                                f"BPF_NOEXIST was given")
            dev = self.dev_map_alloc_node(ifindex, prog_fd)
            if old is not None:
                self.index.remove(old)
            elif self.index.count >= self.max_entries:
                raise KernelError(errno.E2BIG, f"the map is full ({self.max_entries} devices)")
            self.index.add_head(key, dev)
        self._count()

    def dev_map_hash_delete_elem(self, key: bytes) -> None:
        with self.index_lock:
            entry = self.index.find(key)
            if entry is None:
                raise KernelError(errno.ENOENT, f"no device under key {u32_key(key)}")
            self.index.remove(entry)

    def dev_map_hash_get_next_key(self, key: bytes | None) -> bytes:
        return self.index.get_next_key(key)

    # struct bpf_map_ops dev_map_hash_ops
    map_alloc_check = dev_map_hash_alloc_check
    map_lookup_elem = dev_map_hash_lookup_elem
    map_update_elem = dev_map_hash_update_elem
    map_delete_elem = dev_map_hash_delete_elem
    map_get_next_key = dev_map_hash_get_next_key
