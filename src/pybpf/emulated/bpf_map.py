"""struct bpf_map and struct bpf_map_ops of the emulated backend.

Every map family (hashtab.py, arraymap.py, ...) subclasses ``BpfMap`` and registers itself for
its map types with ``@map_ops(MapType.X, ...)``; the emulated system dispatches through the
registry, as syscall.c does through ``bpf_map_types[]``.

Rules a family keeps:
- ``alloc_check(attr, machine)`` is pure: it validates and raises ``KernelError``, touching no
  allocator or counter, so a rejected create leaves no trace. ``__init__`` then allocates
  (and may raise what the kernel's map_alloc raises: E2BIG, ENOMEM, ...).
- Syscall-side ops take and return ``bytes`` in the syscall layout (per-CPU values as all
  CPUs' slots, fd maps as 4-byte ids); program-side ops work on live element memory
  (``lookup_elem`` returns the ``bytearray`` a program's pointer refers to, the current CPU's
  slot for per-CPU maps) and return 0 or a negative errno, as the helpers do.
- Errors are ``KernelError(errno, detail)``; the system adds command and map at its boundary.
- Defaults below are the kernel's for an op a type does not have.
"""

from __future__ import annotations

import errno
from typing import TYPE_CHECKING, ClassVar

from ..attrs import MapAttr
from ..errors import KernelError, map_description
from ..uapi import (
    BPF_F_NUMA_NODE,
    BPF_F_RDONLY_PROG,
    BPF_F_WRONLY_PROG,
    ENOTSUPP,
    NUMA_NO_NODE,
    syscall_value_size,
)
from .memory import BYTES_AT

if TYPE_CHECKING:
    from .machine import Machine

INT_MAX = 2**31 - 1  # include/linux/limits.h, for every family
U32_MAX = 2**32 - 1


# include/linux/bpf.h helpers the families' alloc_checks share.
def bpf_map_flags_access_ok(map_flags: int) -> bool:
    """False when a map would be both read-only and write-only for programs."""
    both = BPF_F_RDONLY_PROG | BPF_F_WRONLY_PROG
    return (map_flags & both) != both


def bpf_map_attr_numa_node(attr: MapAttr) -> int:
    """The NUMA node asked for, or NUMA_NO_NODE (only meaningful with BPF_F_NUMA_NODE): the
    u32 field read as the kernel's int."""
    if not attr.map_flags & BPF_F_NUMA_NODE:
        return NUMA_NO_NODE
    return attr.numa_node - (1 << 32) if attr.numa_node > INT_MAX else attr.numa_node


class BpfMap:
    """One map object (struct bpf_map). Subclasses implement a family's ops."""

    # Set by @map_ops on each registered class.
    map_types: ClassVar[tuple[int, ...]] = ()

    def __init__(self, attr: MapAttr, machine: Machine, node: int) -> None:
        self.map_type = attr.map_type
        self.key_size = attr.key_size
        self.value_size = attr.value_size
        self.max_entries = attr.max_entries
        self.map_flags = attr.map_flags
        self.map_extra = attr.map_extra
        self.name = attr.map_name.split(b"\0", 1)[0].decode(errors="replace")
        self.machine = machine
        # NUMA node the map's memory lives on (bpf_map_attr_numa_node, or the creating CPU's
        # node when none was given, as the kernel's allocator places it).
        self.numa_node = node
        self.id = 0  # assigned by the system when the map gets its id
        self.frozen = False
        # References (fds, pins, programs, outer maps); release() runs when the last goes.
        self.refcnt = 0
        # The EmulatedSystem that owns the map, set right after creation: fd-holding maps
        # resolve the fds in their values through it (system.fd_get / map_from_fd).
        self.system = None
        # Bytes of a value through the syscall (bpf_map_value_size).
        self.sys_value_size = syscall_value_size(attr.map_type, attr.value_size,
                                                 machine.num_cpus)
        # Local/remote element accesses per CPU (machine.AccessStats).
        self.access_stats = machine.new_access_stats()

    # -- creation -----------------------------------------------------------------------------
    @classmethod
    def alloc_check(cls, attr: MapAttr, machine: Machine) -> None:
        """map_alloc_check: validate attr; raise KernelError(EINVAL, why) and allocate nothing."""

    # -- syscall side (bytes in, bytes out) ---------------------------------------------------
    def lookup_elem_sys(self, key: bytes, flags: int = 0) -> bytes:
        raise KernelError(ENOTSUPP, "lookup is not supported by this map type")

    def update_elem_sys(self, key: bytes, value: bytes, flags: int) -> None:
        raise KernelError(ENOTSUPP, "update is not supported by this map type")

    def delete_elem_sys(self, key: bytes) -> None:
        raise KernelError(ENOTSUPP, "delete is not supported by this map type")

    def get_next_key(self, key: bytes | None) -> bytes:
        raise KernelError(ENOTSUPP, "get_next_key is not supported by this map type")

    def lookup_and_delete_elem_sys(self, key: bytes | None, flags: int) -> bytes:
        raise KernelError(ENOTSUPP, "lookup_and_delete is not supported by this map type")

    # Batch ops: None means "no handler" (the system answers ENOTSUPP); families set these
    # to the generic implementations or to their own, as the kernel's ops tables do.
    map_lookup_batch: ClassVar[object] = None
    map_lookup_and_delete_batch: ClassVar[object] = None
    map_update_batch: ClassVar[object] = None
    map_delete_batch: ClassVar[object] = None

    # -- program side (live memory, negative errno) -------------------------------------------
    def lookup_elem(self, key: bytes) -> bytearray | None:
        """bpf_map_lookup_elem from a program: the live value buffer, or None."""
        return None

    def lookup_elem_at(self, mem: bytes | bytearray, off: int) -> bytearray | None:
        """lookup_elem with the key read where it lies (``key_size`` bytes of program memory
        at ``off``, bounds already checked); families whose keys need no copy override it."""
        return self.lookup_elem(BYTES_AT[self.key_size](mem, off)[0])

    def update_elem(self, key: bytes, value: bytes, flags: int) -> int:
        return -errno.EINVAL

    def delete_elem(self, key: bytes) -> int:
        return -errno.EINVAL

    def push_elem(self, value: bytes, flags: int) -> int:
        return -ENOTSUPP

    def pop_elem(self) -> bytes | int:
        return -ENOTSUPP

    def peek_elem(self) -> bytes | int:
        return -ENOTSUPP

    # -- bookkeeping --------------------------------------------------------------------------
    def sys_lookup_table(self) -> dict | None:
        """A live dict whose ``get(key)`` equals the syscall lookup's bytes (missing: ENOENT),
        for the Map layer's hot path (``System.fast_ops``); None when the type has none."""
        return None

    def release(self) -> None:
        """Called when the last reference goes (map_free): return memory to allocators."""

    def mem_stats(self) -> dict:
        """Memory counters: the map's node, NUMA accesses; families add allocator counters."""
        local, remote = self.access_stats.totals()
        return {"numa_node": self.numa_node, "local_accesses": local,
                "remote_accesses": remote, "access_by_cpu": self.access_stats.by_cpu()}

    def describe(self) -> str:
        return map_description(self.map_type, self.name, self.id)


# Program-side ops for types whose kernel op serves both sides (one map_update_elem or
# map_delete_elem in the ops table): run the syscall-side op, give 0 or its negative errno.
# A family sets them as it sets the generic batch ops (``update_elem = update_elem_via_sys``).
def update_elem_via_sys(self: BpfMap, key: bytes, value: bytes, flags: int) -> int:
    try:
        self.update_elem_sys(key, value, flags)
    except KernelError as e:
        return -e.errno
    return 0


def delete_elem_via_sys(self: BpfMap, key: bytes) -> int:
    try:
        self.delete_elem_sys(key)
    except KernelError as e:
        return -e.errno
    return 0


MAP_OPS: dict[int, type[BpfMap]] = {}


def map_ops(*types: int):
    """Register a BpfMap subclass as the ops of the given map types."""

    def register(cls: type[BpfMap]) -> type[BpfMap]:
        cls.map_types = tuple(types)
        for t in types:
            MAP_OPS[int(t)] = cls
        return cls

    return register
