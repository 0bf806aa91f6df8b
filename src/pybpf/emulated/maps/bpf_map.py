"""struct bpf_map and struct bpf_map_ops of the emulated backend.

Every map family (hashtab.py, arraymap.py, ...) subclasses ``BpfMap`` and registers itself for
its map types with ``@map_ops(MapType.X, ...)``; ``emulated/bpf_types.py`` lists every family
in one table, as bpf_types.h does, and the emulated system dispatches through it, as syscall.c
does through ``bpf_map_types[]``.

Rules a family keeps:
- ``map_alloc_check(attr, machine)`` is pure: it validates and raises ``KernelError``, touching no
  allocator or counter, so a rejected create leaves no trace. ``__init__`` then allocates
  (and may raise what the kernel's map_alloc raises: E2BIG, ENOMEM, ...).
- The ops are ``struct bpf_map_ops``'s, one set for both sides as in the kernel:
  ``map_lookup_elem`` returns live element memory (the ``bytearray`` a program's pointer
  refers to, the current CPU's slot for per-CPU maps), ``map_update_elem`` serves programs
  and syscalls. Where syscall.c reads or writes a type another way, the type overrides
  ``bpf_map_copy_value`` / ``bpf_map_update_value`` with the kernel's function (per-CPU
  values in the syscall layout, all CPUs' slots; fd maps: fds in, 4-byte ids out).
- Each method carries the name of the kernel function it implements, and each class ends with
  its ops table (``map_update_elem = htab_map_update_elem``), so the C and the Python read
  side by side.
- Errors are ``KernelError(errno, detail)`` on both sides; the helpers turn them into a
  program's negative errno, ``System`` into the public error.
"""

from __future__ import annotations

import errno
import struct
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, ClassVar

from ...attrs import MapAttr
from ...errors import KernelError, map_description
from ...uapi import (
    BPF_F_NUMA_NODE,
    BPF_F_RDONLY_PROG,
    BPF_F_WRONLY_PROG,
    BPF_F_XDP_HAS_FRAGS,
    ENOTSUPP,
    NUMA_NO_NODE,
    MapType,
    syscall_value_size,
)

if TYPE_CHECKING:
    from ..machine.machine import Machine

INT_MAX = 2**31 - 1  # include/linux/limits.h, for every family
U32_MAX = 2**32 - 1


# include/linux/bpf.h helpers the families' alloc_checks share.
def bpf_map_flags_access_ok(map_flags: int) -> bool:
    """False when a map would be both read-only and write-only for programs."""
    both = BPF_F_RDONLY_PROG | BPF_F_WRONLY_PROG
    return (map_flags & both) != both


def u32_key(key: bytes) -> int:
    """A 4-byte little-endian key (array index, CPU, ifindex...)."""
    return int.from_bytes(key[:4], "little")


def roundup_pow_of_two(n: int) -> int:
    return 1 << (n - 1).bit_length() if n > 1 else 1


def bpf_map_attr_numa_node(attr: MapAttr) -> int:
    """The NUMA node asked for, or NUMA_NO_NODE (only meaningful with BPF_F_NUMA_NODE): the
    u32 field read as the kernel's int."""
    if not attr.map_flags & BPF_F_NUMA_NODE:
        return NUMA_NO_NODE
    return attr.numa_node - (1 << 32) if attr.numa_node > INT_MAX else attr.numa_node


# map_type_contains_progs: maps whose programs must all be alike (tail calls, devmap and
# cpumap programs), checked at load (bpf_check_tail_call) and when a program is stored.
MAPS_CONTAINING_PROGS = frozenset({MapType.PROG_ARRAY, MapType.DEVMAP, MapType.CPUMAP})


def bpf_prog_map_compatible(bpf_map: BpfMap, prog: object) -> bool:
    """__bpf_prog_map_compatible: the first program a map meets fixes its owner; every later
    one must have the owner's type and xdp_has_frags, and, in a prog array, its
    expected_attach_type. Called for the maps of MAPS_CONTAINING_PROGS a program uses (at
    load) and for the programs stored in a prog array, devmap, devmap hash or cpumap."""
    owner = (prog.prog_type, bool(prog.prog_flags & BPF_F_XDP_HAS_FRAGS),  # type: ignore
             prog.expected_attach_type if bpf_map.map_type == MapType.PROG_ARRAY  # type: ignore
             else None)
    if bpf_map.owner is None:
        bpf_map.owner = owner
    return bpf_map.owner == owner



class _BytesAt(dict):
    """size -> ``unpack_from`` of that many bytes: ``BYTES_AT[size](mem, off)[0]`` copies a
    key or value out of program memory in one C call (a slice then ``bytes`` costs ~3x)."""

    def __missing__(self, size: int) -> Callable:
        unpack = self[size] = struct.Struct(f"{size}s").unpack_from
        return unpack


BYTES_AT = _BytesAt()

# struct bpf_map as 6.18's vmlinux BTF lays it out (bpftool btf dump file
# /sys/kernel/btf/vmlinux), the fields an emulated map has values for: (name, C type, byte
# offset, size). Its other fields (ops, record, btf, the locks and counters) have none here.
# The emulated kernel's BTF describes these (prog/btf.py), and a program reads them through
# a map pointer (``BpfMap.struct_bpf_map_load``).
BPF_MAP_SIZE = 296
BPF_MAP_FIELDS = (
    ("map_type", "enum bpf_map_type", 64, 4), ("key_size", "u32", 68, 4),
    ("value_size", "u32", 72, 4), ("max_entries", "u32", 76, 4), ("map_extra", "u64", 80, 8),
    ("map_flags", "u32", 88, 4), ("id", "u32", 92, 4), ("numa_node", "int", 104, 4),
    ("btf_key_type_id", "u32", 108, 4), ("btf_value_type_id", "u32", 112, 4),
    ("name", "char[16]", 136, 16), ("frozen", "bool", 257, 1))


def bpf_map_field_at(off: int, size: int) -> tuple[str, int] | None:
    """The field of ``BPF_MAP_FIELDS`` the ``size`` bytes at ``off`` lie in, and its offset;
    None when they lie in none (or across two)."""
    for name, _, start, length in BPF_MAP_FIELDS:
        if start <= off and off + size <= start + length:
            return name, start
    return None

class BpfMap:
    """One map object (struct bpf_map). Subclasses implement a family's ops."""

    # Set by @map_ops on each registered class.
    map_types: ClassVar[tuple[int, ...]] = ()
    # a program's bpf_map_update_elem passes the value as a socket pointer, not as memory to
    # copy (sockmap, sockhash: the verifier's resolve_map_arg_type)
    value_is_socket: ClassVar[bool] = False
    # The map helpers that run in C on this map (hashtab.py's HtabCore), by name ("lookup",
    # "update", "delete"): ``f(python, rs, r2, r3, r4, r5) -> r0``, ``python`` the helper
    # bound to the map, which they call for what they do not do
    c_helpers: Mapping[str, Callable[..., int]] = MappingProxyType({})

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
        # bpf_map_owner of a map that holds programs (see bpf_prog_map_compatible)
        self.owner: tuple | None = None
        # References (fds, pins, programs, outer maps); map_free() runs when the last goes.
        self.refcnt = 0
        # The EmulatedSystem that owns the map, set right after creation: fd-holding maps
        # resolve the fds in their values through it (system.fd_get / map_from_fd).
        self.system = None
        # Bytes of a value through the syscall (bpf_map_value_size).
        self.sys_value_size = syscall_value_size(attr.map_type, attr.value_size,
                                                 machine.num_cpus)
        # Local/remote element accesses per CPU (machine.AccessStats).
        self.access_stats = machine.new_access_stats()
        self.timing = machine.timing  # what the ops cost (emulated/machine/timing.py)
        # The BTF object the key and value are described in (map_create with type ids).
        self.btf = None
        self.btf_key_type_id = self.btf_value_type_id = 0
        self.spin_lock_off = -1  # where the value's struct bpf_spin_lock is (-1: none)
        self.timer_off = -1  # where the value's struct bpf_timer is (-1: none)
        # (offset, size) of the value's special fields (the lock, the timer), in offset order:
        # user space never reads nor writes them
        self.special_fields: tuple[tuple[int, int], ...] = ()

    def struct_bpf_map_load(self, off: int, size: int) -> int:
        """A program's ``size``-byte load at ``off`` through a pointer to this map (the
        verifier let it through: it lies in one field of ``BPF_MAP_FIELDS``), as the
        kernel's struct bpf_map holds the field: numa_node NUMA_NO_NODE unless the map was
        created with BPF_F_NUMA_NODE, the name NUL-padded."""
        name, start = bpf_map_field_at(off, size)
        if name == "numa_node":
            raw = (self.numa_node if self.map_flags & BPF_F_NUMA_NODE else NUMA_NO_NODE
                   ).to_bytes(4, "little", signed=True)
        elif name == "name":
            raw = self.name.encode().ljust(16, b"\0")
        else:
            width = {"map_extra": 8, "frozen": 1}.get(name, 4)
            raw = int(getattr(self, name)).to_bytes(width, "little")
        return int.from_bytes(raw[off - start:off - start + size], "little")

    # -- struct bpf_map_ops ------------------------------------------------------------------
    # A family implements these under the kernel's function names and lists its table at the
    # end of its class (``map_update_elem = htab_map_update_elem``). Ops raise KernelError;
    # the helpers turn it into the negative errno a program sees. The defaults are the
    # kernel's answer for an op a type does not have.
    @classmethod
    def map_alloc_check(cls, attr: MapAttr, machine: Machine) -> None:
        """Validate attr; raise KernelError(EINVAL, why) and allocate nothing."""

    def map_free(self) -> None:
        """The last reference went: return memory to the allocators."""

    def map_lookup_elem(self, key: bytes) -> bytearray | None:
        """The live value (what a program's pointer refers to), or None."""
        raise KernelError(ENOTSUPP, "lookup is not supported by this map type")

    def map_lookup_elem_at(self, mem: bytes | bytearray, off: int) -> bytearray | None:
        """map_lookup_elem with the key read where it lies (``key_size`` bytes of program
        memory at ``off``, bounds already checked); families whose keys need no copy
        override it."""
        return self.map_lookup_elem(BYTES_AT[self.key_size](mem, off)[0])

    def map_update_elem(self, key: bytes, value: bytes, flags: int) -> None:
        raise KernelError(ENOTSUPP, "update is not supported by this map type")

    def map_delete_elem(self, key: bytes) -> None:
        raise KernelError(ENOTSUPP, "delete is not supported by this map type")

    def map_get_next_key(self, key: bytes | None) -> bytes:
        raise KernelError(ENOTSUPP, "get_next_key is not supported by this map type")

    def map_lookup_and_delete_elem(self, key: bytes | None, flags: int) -> bytes:
        raise KernelError(ENOTSUPP, "lookup_and_delete is not supported by this map type")

    def map_push_elem(self, value: bytes, flags: int) -> None:
        raise KernelError(ENOTSUPP, "push is not supported by this map type")

    def map_pop_elem(self) -> bytes:
        raise KernelError(ENOTSUPP, "pop is not supported by this map type")

    def map_peek_elem(self) -> bytes:
        raise KernelError(ENOTSUPP, "peek is not supported by this map type")

    # Batch ops: None means "no handler" (the system answers ENOTSUPP); families set these
    # to the generic implementations or to their own, as the kernel's ops tables do.
    map_lookup_batch: ClassVar[object] = None
    map_lookup_and_delete_batch: ClassVar[object] = None
    map_update_batch: ClassVar[object] = None
    map_delete_batch: ClassVar[object] = None
    # map_for_each_callback(self, callback, flags) -> elements visited, for
    # bpf_for_each_map_elem: ``callback(key, value)`` (the element's memory) returns non-zero
    # to stop. None: the type has none (the verifier refuses the helper on it).
    map_for_each_callback: ClassVar[object] = None

    # -- syscall.c's element reads and writes --------------------------------------------------
    def bpf_map_copy_value(self, key: bytes | None, flags: int) -> bytes:
        """A syscall lookup: the type's map_lookup_elem, copied out (ENOENT for none).
        Types syscall.c reads another way (per-CPU, fd maps, queue/stack) override it."""
        value = self.map_lookup_elem(key)
        if value is None:
            raise KernelError(errno.ENOENT, "key not found")
        return bytes(value[:self.value_size])  # copy_map_value: value_size bytes

    def bpf_map_update_value(self, key: bytes | None, value: bytes, flags: int) -> None:
        """A syscall update: the type's map_update_elem, unless syscall.c dispatches the
        type elsewhere (per-CPU values for all CPUs, fds to objects, pushes)."""
        self.map_update_elem(key, value, flags)

    # -- special fields of the value (BTF) ---------------------------------------------------
    def set_special_fields(self, spin_lock_off: int, timer_off: int) -> None:
        """Where map_check_btf found the value's bpf_spin_lock and bpf_timer (-1: none)."""
        self.spin_lock_off, self.timer_off = spin_lock_off, timer_off
        self.special_fields = tuple(sorted(
            (off, size) for off, size in ((spin_lock_off, 4), (timer_off, 16)) if off >= 0))

    def key_of_value(self, value: bytearray) -> bytes:
        """The key of the element whose memory ``value`` is (for a timer's callback); the
        types that may hold a bpf_timer answer."""
        raise KernelError(ENOTSUPP, "this map type holds no bpf_timer")

    # -- bookkeeping --------------------------------------------------------------------------
    def sys_lookup_table(self) -> dict | None:
        """A live dict whose ``get(key)`` equals the syscall lookup's bytes (missing: ENOENT),
        for the Map layer's hot path (``System.fast_ops``); None when the type has none."""
        return None

    def mem_stats(self) -> dict:
        """Memory counters: the map's node, NUMA accesses; families add allocator counters."""
        local, remote = self.access_stats.totals()
        return {"numa_node": self.numa_node, "local_accesses": local,
                "remote_accesses": remote, "access_by_cpu": self.access_stats.by_cpu()}

    def describe(self) -> str:
        return map_description(self.map_type, self.name, self.id)

    @property
    def ops(self) -> type[BpfMap]:
        """The map's ``struct bpf_map_ops``: its class (map_ops registers it per type)."""
        return type(self)


def map_ops(*types: int):
    """Name the map types a BpfMap subclass is the ops of (``const struct bpf_map_ops``);
    ``emulated/bpf_types.py`` lists the classes, as bpf_types.h does."""

    def register(cls: type[BpfMap]) -> type[BpfMap]:
        cls.map_types = tuple(types)
        return cls

    return register
