"""ARRAY_OF_MAPS and HASH_OF_MAPS (kernel/bpf/map_in_map.c, arraymap.c, hashtab.c).

Rules this module keeps:
- Create: the outer map's own checks first (value_size must be 4: the value is a map fd), then
  ``bpf_map_meta_alloc`` on ``inner_map_fd`` (resolved by the system: not open -> EBADF, not a
  map -> EINVAL): an inner map that is itself a map-in-map -> EINVAL; an inner type with no
  ``map_meta_equal`` (PROG_ARRAY) -> ENOTSUPP. The inner map is only a template: its type,
  key_size, value_size, map_flags and max_entries are copied into the outer map's meta.
- A map stored later must match the template (``bpf_map_meta_equal``): same type, key_size,
  value_size and map_flags; an inner ARRAY must also have the same max_entries unless the
  template had BPF_F_INNER_MAP. Mismatch -> EINVAL.
- Values are map fds on update and map ids on lookup (4 bytes); programs get the inner map
  itself. An outer map holds a reference on every inner map it stores; replacing, deleting
  or freeing the outer map drops it.
- ARRAY_OF_MAPS: update flags must be BPF_ANY (else EINVAL), index >= max_entries -> E2BIG;
  delete of index >= max_entries -> E2BIG, of an empty slot -> ENOENT; lookup of an empty slot
  -> ENOENT; batches: generic lookup and update.
- HASH_OF_MAPS: value_size must be 4, then the hash map's create checks; on update the inner
  fd is resolved first, then hash semantics (EINVAL flags, EEXIST, ENOENT, E2BIG) and the
  hash order; replacing an inner map updates the element in place (it keeps its position,
  ``htab_map_update_elem_in_place``); batches: all four (the hash map's, values are inner map
  ids); lookup_and_delete -> ENOTSUPP.
"""

from __future__ import annotations

import errno
import threading
from typing import TYPE_CHECKING

from ..errors import KernelError
from ..uapi import BPF_F_INNER_MAP, ENOTSUPP, MapType, map_traits
from .arraymap import FdArray, u32_key
from .batch import generic_map_lookup_batch, generic_map_update_batch
from .bpf_map import BpfMap, MapAttr, map_ops
from .hashtab import HtabElem, HtabMap

if TYPE_CHECKING:
    from .machine import Machine

# Map types whose ops have no map_meta_equal: they cannot be inner maps.
NO_META_EQUAL_TYPES = frozenset({MapType.PROG_ARRAY, MapType.ARRAY_OF_MAPS,
                                 MapType.HASH_OF_MAPS})


class MapMeta:
    """The inner-map template (``inner_map_meta``): the fields ``map_meta_equal`` compares."""

    __slots__ = ("map_type", "key_size", "value_size", "map_flags", "max_entries")

    def __init__(self, inner: BpfMap) -> None:
        self.map_type = inner.map_type
        self.key_size = inner.key_size
        self.value_size = inner.value_size
        self.map_flags = inner.map_flags
        self.max_entries = inner.max_entries

    def mismatch(self, candidate: BpfMap) -> str:
        """Why ``candidate`` cannot be stored ('' when it can): bpf_map_meta_equal and
        array_map_meta_equal."""
        for field in ("map_type", "key_size", "value_size", "map_flags"):
            want, got = getattr(self, field), getattr(candidate, field)
            if want != got:
                return f"{field} {got} differs from the inner map template's {want}"
        if (self.map_type == MapType.ARRAY and not self.map_flags & BPF_F_INNER_MAP
                and self.max_entries != candidate.max_entries):
            return (f"max_entries {candidate.max_entries} differs from the template's "
                    f"{self.max_entries} (create the template with BPF_F_INNER_MAP to allow "
                    f"inner arrays of any size)")
        return ""


def bpf_map_meta_alloc(inner: BpfMap) -> MapMeta:
    """The template an outer map keeps of ``inner`` (resolved from inner_map_fd)."""
    if map_traits(inner.map_type).map_in_map:
        raise KernelError(errno.EINVAL, "maps of maps nest one level only: the inner map "
                                        "cannot itself be a map of maps")
    if inner.map_type in NO_META_EQUAL_TYPES:
        raise KernelError(ENOTSUPP, f"{MapType(inner.map_type).name} maps cannot be inner maps")
    return MapMeta(inner)


class MapOfMapsMixin:
    """What both outer map types share: resolving and releasing inner maps."""

    inner_map_meta: MapMeta
    system: object

    def fd_get_ptr(self, ufd: int) -> BpfMap:
        """bpf_map_fd_get_ptr: the map behind ``ufd``, if it matches the template."""
        inner = self.system.map_from_fd(ufd)
        why = self.inner_map_meta.mismatch(inner)
        if why:
            raise KernelError(errno.EINVAL, f"map fd {ufd} does not fit this map of maps: {why}")
        self.system.bpf_map_inc(inner)
        return inner

    def fd_put_ptr(self, ptr: BpfMap) -> None:
        self.system.bpf_map_put(ptr)

    def fd_sys_lookup_elem(self, ptr: BpfMap) -> int:
        return ptr.id


@map_ops(MapType.ARRAY_OF_MAPS)
class ArrayOfMaps(MapOfMapsMixin, FdArray):
    """BPF_MAP_TYPE_ARRAY_OF_MAPS."""

    map_lookup_batch = generic_map_lookup_batch
    map_update_batch = generic_map_update_batch

    def __init__(self, attr: MapAttr, machine: Machine, node: int, *,
                 inner_map: BpfMap) -> None:
        self.inner_map_meta = bpf_map_meta_alloc(inner_map)
        super().__init__(attr, machine, node)

    def lookup_elem(self, key: bytes) -> BpfMap | None:
        """array_of_map_lookup_elem: the inner map itself, for the program to use."""
        index = u32_key(key)
        if index >= self.max_entries:
            return None
        self.access_stats.access(self.machine.current_cpu(), self.numa_node)
        return self.ptrs.get(index)


@map_ops(MapType.HASH_OF_MAPS)
class HashOfMaps(MapOfMapsMixin, HtabMap):
    """BPF_MAP_TYPE_HASH_OF_MAPS: a hash map whose 4-byte values hold inner maps.

    Each element's value holds the inner map's id (what a syscall lookup and the hash batch
    report, where the kernel keeps a pointer); ``inner_maps`` turns an id back into the map,
    counting how many elements hold it.
    """

    @classmethod
    def alloc_check(cls, attr: MapAttr, machine: Machine) -> None:
        if attr.value_size != 4:
            raise KernelError(errno.EINVAL, f"maps of maps hold 4-byte map fds: value_size must "
                                            f"be 4, got {attr.value_size}")
        super().alloc_check(attr, machine)

    # 6.16+: an existing key's inner map is swapped in place (atomic for lookups), so its
    # bucket position stays and no spare elements are needed.
    _update = HtabMap._update_in_place

    def __init__(self, attr: MapAttr, machine: Machine, node: int, *,
                 inner_map: BpfMap) -> None:
        self.inner_map_meta = bpf_map_meta_alloc(inner_map)
        super().__init__(attr, machine, node)
        self.inner_maps: dict[int, list] = {}  # id -> [map, elements holding it]
        # Elements of different buckets share an entry; taken inside a bucket lock.
        self.inner_maps_lock = threading.Lock()

    def update_elem_sys(self, key: bytes, value: bytes, flags: int) -> None:
        """bpf_fd_htab_map_update_elem: resolve the fd first, then the hash update."""
        inner = self.fd_get_ptr(u32_key(value))
        with self.inner_maps_lock:
            self.inner_maps.setdefault(inner.id, [inner, 0])[1] += 1
        try:
            self._update(key, inner.id.to_bytes(4, "little"), flags, onallcpus=True)
        except KernelError:
            self._drop(inner.id)
            raise

    def put_fd_value(self, elem: HtabElem) -> None:
        self._drop(u32_key(elem.value))

    def _drop(self, inner_id: int) -> None:
        with self.inner_maps_lock:
            held = self.inner_maps[inner_id]
            held[1] -= 1
            if not held[1]:
                del self.inner_maps[inner_id]
        self.fd_put_ptr(held[0])

    def lookup_and_delete_elem_sys(self, key: bytes | None, flags: int) -> bytes:
        raise KernelError(ENOTSUPP, "lookup_and_delete is not supported by maps of maps")

    def lookup_elem(self, key: bytes) -> BpfMap | None:
        """htab_of_map_lookup_elem: the inner map itself, for the program to use.

        Lock-free like the kernel's: an inner map replaced meanwhile may have lost its last
        holder between reading the value and finding the map; the value is then read again.
        """
        while True:
            value = super().lookup_elem(key)
            if value is None:
                return None
            held = self.inner_maps.get(u32_key(value))
            if held is not None:
                return held[0]

    def update_elem(self, key: bytes, value: bytes, flags: int) -> int:
        return -errno.EINVAL  # programs cannot store maps (the verifier refuses)
