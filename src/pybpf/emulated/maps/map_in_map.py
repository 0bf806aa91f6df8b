"""Maps of maps (kernel/bpf/map_in_map.c): the inner-map template and the fd ops the two outer
types share. The outer types live with their families, as in the kernel: ARRAY_OF_MAPS in
arraymap.py, HASH_OF_MAPS in hashtab.py.

Rules this module keeps:
- Create: the outer map's own checks first (value_size must be 4: the value is a map fd), then
  ``bpf_map_meta_alloc`` on ``inner_map_fd`` (resolved by the system: not open -> EBADF, not a
  map -> EINVAL): an inner map that is itself a map-in-map -> EINVAL; an inner type with no
  ``map_meta_equal`` (PROG_ARRAY) -> ENOTSUPP. The inner map is only a template: its type,
  key_size, value_size, map_flags and max_entries are copied into the outer map's meta.
- A map stored later must match the template (``bpf_map_meta_equal``): same type, key_size,
  value_size, map_flags and special fields of the value (btf_record_equal: a bpf_spin_lock
  or bpf_timer at the same offsets, or none in both); an inner ARRAY must also have the same
  max_entries unless the template had BPF_F_INNER_MAP. Mismatch -> EINVAL.
- Values are map fds on update and map ids on lookup (4 bytes); programs get the inner map
  itself, which the verifier knows only as the template (``MapMeta``: its type, sizes, flags
  and special fields; no name). An outer map holds a reference on every inner map it stores;
  replacing, deleting or freeing the outer map drops it.
"""

from __future__ import annotations

import errno

from ...errors import KernelError, map_description
from ...uapi import BPF_F_INNER_MAP, ENOTSUPP, MapType, map_traits
from .bpf_map import BpfMap

# Map types whose ops have no map_meta_equal: they cannot be inner maps.
NO_META_EQUAL_TYPES = frozenset({MapType.PROG_ARRAY, MapType.ARRAY_OF_MAPS,
                                 MapType.HASH_OF_MAPS})
# Map types whose ops compare max_entries too (array_map_meta_equal; PERCPU_ARRAY's as well on
# 6.18, measured).
ARRAY_META_EQUAL_TYPES = frozenset({MapType.ARRAY, MapType.PERCPU_ARRAY})


class MapMeta:
    """The inner-map template (``inner_map_meta``): the fields ``map_meta_equal`` compares,
    and what the verifier reads of the map a program's outer lookup returns (the kernel
    verifies inner-map accesses against this template, never against a stored map)."""

    __slots__ = ("map_type", "key_size", "value_size", "map_flags", "max_entries",
                 "map_extra", "ops", "btf", "spin_lock_off", "timer_off", "special_fields")
    # bpf_map_meta_alloc copies neither the name nor the frozen state: the template has none.
    name = ""
    frozen = False

    def __init__(self, inner: BpfMap) -> None:
        self.map_type = inner.map_type
        self.key_size = inner.key_size
        self.value_size = inner.value_size
        self.map_flags = inner.map_flags
        self.max_entries = inner.max_entries
        self.map_extra = inner.map_extra
        self.ops = inner.ops
        self.btf = inner.btf
        self.spin_lock_off = inner.spin_lock_off
        self.timer_off = inner.timer_off
        self.special_fields = inner.special_fields  # its btf_record (btf_record_dup)

    def describe(self) -> str:
        return f"the inner map template ({map_description(self.map_type, '', 0)})"

    def bpf_map_meta_equal(self, candidate: BpfMap) -> str:
        """Why ``candidate`` cannot be stored ('' when it can): bpf_map_meta_equal, and
        array_map_meta_equal for an inner ARRAY or PERCPU_ARRAY."""
        for field in ("map_type", "key_size", "value_size", "map_flags", "special_fields"):
            want, got = getattr(self, field), getattr(candidate, field)
            if want != got:
                return f"{field} {got} differs from the inner map template's {want}"
        if (self.map_type in ARRAY_META_EQUAL_TYPES and not self.map_flags & BPF_F_INNER_MAP
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

    def bpf_map_fd_get_ptr(self, ufd: int) -> BpfMap:
        """bpf_map_fd_get_ptr: the map behind ``ufd``, if it matches the template."""
        inner = self.system.map_from_fd(ufd)
        why = self.inner_map_meta.bpf_map_meta_equal(inner)
        if why:
            raise KernelError(errno.EINVAL, f"map fd {ufd} does not fit this map of maps: {why}")
        self.system.bpf_map_inc(inner)
        return inner

    def bpf_map_fd_put_ptr(self, ptr: BpfMap) -> None:
        self.system.bpf_map_put(ptr)

    def bpf_map_fd_sys_lookup_elem(self, ptr: BpfMap) -> int:
        return ptr.id

    map_fd_get_ptr = bpf_map_fd_get_ptr
    map_fd_put_ptr = bpf_map_fd_put_ptr
    map_fd_sys_lookup_elem = bpf_map_fd_sys_lookup_elem
