"""ARRAY, PERCPU_ARRAY, PROG_ARRAY, PERF_EVENT_ARRAY and ARRAY_OF_MAPS (kernel/bpf/arraymap.c).

Rules this module keeps (the kernel's, errno for errno):
- Create (``array_map_alloc_check``): max_entries 0, key_size != 4, value_size 0, a flag outside
  NUMA_NODE|MMAPABLE|ACCESS|PRESERVE_ELEMS|INNER_MAP, RDONLY_PROG+WRONLY_PROG, or a per-CPU
  array with an explicit NUMA node -> EINVAL; MMAPABLE/INNER_MAP on anything but ARRAY and
  PRESERVE_ELEMS on anything but PERF_EVENT_ARRAY -> EINVAL; value_size > INT_MAX, or a per-CPU
  value over 32 KiB -> E2BIG. fd arrays also need value_size 4 and no RDONLY_PROG/WRONLY_PROG.
- Every element exists from the start, zero-filled (materialised on first touch here, so a
  huge array costs nothing until used). Lookup of index >= max_entries -> ENOENT; update of
  index >= max_entries -> E2BIG, BPF_NOEXIST -> EEXIST, unknown flags -> EINVAL; delete ->
  EINVAL; get_next_key walks every index (an index >= max_entries restarts at 0).
- Per-CPU arrays: the syscall side reads and writes all CPUs' slots, each round_up(value_size,
  8) bytes (padding round-trips); programs see the current CPU's slot only.
- PROG_ARRAY holds programs: update takes a prog fd (flags must be BPF_ANY), lookup returns the
  prog id, delete of an empty slot -> ENOENT, of index >= max_entries -> E2BIG; programs cannot
  look it up (only tail-call through it). The first program stored fixes the array's owner
  program type; a program of another type -> EINVAL (``bpf_prog_map_compatible``).
  PERF_EVENT_ARRAY is the same fd array for perf events (see ``PerfEventArray``).
- NUMA: the array's memory lives on the map's node; a per-CPU slot on its CPU's node. Every
  element access from a program or a syscall is counted in ``access_stats``.
"""

from __future__ import annotations

import errno
import struct
from typing import TYPE_CHECKING

from ...errors import KernelError
from ...uapi import (
    BPF_ANY,
    BPF_EXIST,
    BPF_F_ACCESS_MASK,
    BPF_F_INNER_MAP,
    BPF_F_LOCK,
    BPF_F_MMAPABLE,
    BPF_F_NUMA_NODE,
    BPF_F_PRESERVE_ELEMS,
    BPF_F_RDONLY_PROG,
    BPF_F_WRONLY_PROG,
    BPF_NOEXIST,
    ENOTSUPP,
    NUMA_NO_NODE,
    PCPU_MIN_UNIT_SIZE,
    MapType,
    round_up,
)
from ..machine.perf_event import PerfEvent
from .batch import generic_map_lookup_batch, generic_map_update_batch
from .bpf_map import (
    INT_MAX,
    U32_MAX,
    BpfMap,
    MapAttr,
    bpf_map_attr_numa_node,
    bpf_map_flags_access_ok,
    bpf_prog_map_compatible,
    map_ops,
    u32_key,
)
from .bpf_spin_lock import copy_map_value, copy_map_value_locked
from .bpf_timer import bpf_obj_free_fields
from .map_in_map import MapOfMapsMixin, bpf_map_meta_alloc

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..machine.machine import Machine

ARRAY_CREATE_FLAG_MASK = (BPF_F_NUMA_NODE | BPF_F_MMAPABLE | BPF_F_ACCESS_MASK
                          | BPF_F_PRESERVE_ELEMS | BPF_F_INNER_MAP)


unpack_u32 = struct.Struct("<I").unpack_from  # an index read where it lies, no copy


def index_get_next_key(max_entries: int, key: bytes | None) -> bytes:
    """get_next_key of every index-keyed map: all indices in order, restart at 0 when unknown."""
    index = U32_MAX if key is None else u32_key(key)
    if index >= max_entries:
        return b"\0\0\0\0"
    if index == max_entries - 1:
        raise KernelError(errno.ENOENT, f"index {index} is the last one (max_entries "
                                        f"{max_entries})")
    return (index + 1).to_bytes(4, "little")


def array_map_alloc_check(attr: MapAttr, machine: Machine) -> None:
    percpu = attr.map_type == MapType.PERCPU_ARRAY
    if attr.max_entries == 0:
        raise KernelError(errno.EINVAL, "max_entries must be at least 1")
    if attr.key_size != 4:
        raise KernelError(errno.EINVAL, f"array keys are u32 indices: key_size must be 4, "
                                        f"got {attr.key_size}")
    if attr.value_size == 0:
        raise KernelError(errno.EINVAL, "value_size must be at least 1")
    if attr.map_flags & ~ARRAY_CREATE_FLAG_MASK:
        raise KernelError(errno.EINVAL, f"map_flags {attr.map_flags:#x} has bits arrays do not "
                                        f"accept ({attr.map_flags & ~ARRAY_CREATE_FLAG_MASK:#x})")
    if not bpf_map_flags_access_ok(attr.map_flags):
        raise KernelError(errno.EINVAL, "BPF_F_RDONLY_PROG and BPF_F_WRONLY_PROG exclude each "
                                        "other")
    if percpu and bpf_map_attr_numa_node(attr) != NUMA_NO_NODE:
        raise KernelError(errno.EINVAL, "a per-CPU array cannot be placed on one NUMA node: "
                                        "drop BPF_F_NUMA_NODE")
    if attr.map_type != MapType.ARRAY and attr.map_flags & (BPF_F_MMAPABLE | BPF_F_INNER_MAP):
        raise KernelError(errno.EINVAL, "BPF_F_MMAPABLE and BPF_F_INNER_MAP are for "
                                        "BPF_MAP_TYPE_ARRAY only")
    if attr.map_type != MapType.PERF_EVENT_ARRAY and attr.map_flags & BPF_F_PRESERVE_ELEMS:
        raise KernelError(errno.EINVAL, "BPF_F_PRESERVE_ELEMS is for PERF_EVENT_ARRAY only")
    if attr.value_size > INT_MAX:
        raise KernelError(errno.E2BIG, f"value_size {attr.value_size} is over INT_MAX")
    if percpu and attr.value_size > PCPU_MIN_UNIT_SIZE:
        raise KernelError(errno.E2BIG, f"per-CPU values are limited to {PCPU_MIN_UNIT_SIZE} "
                                       f"bytes, got {attr.value_size}")


def fd_array_map_alloc_check(attr: MapAttr, machine: Machine) -> None:
    if attr.value_size != 4:
        raise KernelError(errno.EINVAL, f"fd arrays hold 4-byte fds: value_size must be 4, got "
                                        f"{attr.value_size}")
    if attr.map_flags & (BPF_F_RDONLY_PROG | BPF_F_WRONLY_PROG):
        raise KernelError(errno.EINVAL, "BPF_F_RDONLY_PROG/BPF_F_WRONLY_PROG are not supported "
                                        "by fd arrays")
    array_map_alloc_check(attr, machine)


_UPDATE_ERRORS = {
    errno.EINVAL: "flags must be BPF_ANY or BPF_EXIST (BPF_F_LOCK needs a value with a "
                  "bpf_spin_lock)",
    errno.E2BIG: "index is out of range: arrays have exactly max_entries elements",
    errno.EEXIST: "every array element always exists, so BPF_NOEXIST always fails",
}


def check_array_update_flags(flags: int, index: int, max_entries: int,
                             has_spin_lock: bool = False) -> None:
    """array_map_update_elem's checks, in its order."""
    err = 0
    if (flags & ~BPF_F_LOCK) > BPF_EXIST:
        err = errno.EINVAL
    elif index >= max_entries:
        err = errno.E2BIG
    elif flags & BPF_NOEXIST:
        err = errno.EEXIST
    elif flags & BPF_F_LOCK and not has_spin_lock:
        err = errno.EINVAL
    if err:
        raise KernelError(err, f"index {index} (max_entries {max_entries}): "
                          f"{_UPDATE_ERRORS[err]}")


class ArrayBase(BpfMap):
    """What every array-shaped map shares: u32 index keys and get_next_key over all indices."""

    def __init__(self, attr: MapAttr, machine: Machine, node: int) -> None:
        """array_map_alloc."""
        super().__init__(attr, machine, node)
        self.elem_size = round_up(attr.value_size, 8)
        # The value array's memory on the map's node (fd arrays: the pointer array).
        self.value_base = self.timing.alloc_region(attr.max_entries * self.elem_size, node)

    def array_cost(self, index: int, write: bool = False) -> None:
        """What reaching element ``index`` costs: ``array_map_lookup_elem`` (the JIT's inlined
        lookup; a write is charged the same) and the element's line. (Modeled time.)"""
        cpu = self.machine.current.cpu
        self.timing.charge(cpu, "array_map_lookup_elem")
        self.timing.access(cpu, self.value_base + index * self.elem_size, write)

    def bpf_for_each_array_elem(self, callback: Callable[[bytes, bytearray], int],
                                flags: int) -> int:
        """bpf_for_each_array_elem: every index from 0 (the key a u32 on the kernel's stack,
        read-only), this CPU's slot of a per-CPU array (``elem_of_this_cpu``: the ops
        tables that list it have one); stops when the callback returns non-zero. Returns
        the elements visited."""
        if flags:
            raise KernelError(errno.EINVAL, f"flags {flags:#x}: must be 0")
        for index in range(self.max_entries):
            if callback(index.to_bytes(4, "little"), self.elem_of_this_cpu(index)):
                return index + 1
        return self.max_entries

    def array_map_get_next_key(self, key: bytes | None) -> bytes:
        return index_get_next_key(self.max_entries, key)

    def array_map_delete_elem(self, key: bytes) -> None:
        raise KernelError(errno.EINVAL, "array elements cannot be deleted (they always exist); "
                                        "write zeros instead")

    map_alloc_check = staticmethod(array_map_alloc_check)
    map_get_next_key = array_map_get_next_key
    map_delete_elem = array_map_delete_elem
    map_lookup_batch = generic_map_lookup_batch
    map_update_batch = generic_map_update_batch


@map_ops(MapType.ARRAY)
class BpfArray(ArrayBase):
    """struct bpf_array for BPF_MAP_TYPE_ARRAY: one value buffer per index."""

    def __init__(self, attr: MapAttr, machine: Machine, node: int) -> None:
        super().__init__(attr, machine, node)
        # index -> element memory (elem_size bytes); absent means still all zeros.
        self.elems: dict[int, bytearray] = {}
        # The program lookup is the interpreter's hot path: bind what it needs once.
        self._current = machine.current
        self._local = [cpu_node == node for cpu_node in machine.cpu_node]

    def elem(self, index: int) -> bytearray:
        value = self.elems.get(index)
        if value is None:
            # setdefault: threads touching a fresh element at once must share one buffer,
            # or writes through a pointer a program holds would land in a lost copy.
            value = self.elems.setdefault(index, bytearray(self.elem_size))
        return value

    def array_map_lookup_elem(self, key: bytes) -> bytearray | None:
        return self.map_lookup_elem_at(key, 0)

    def map_lookup_elem_at(self, mem: bytes | bytearray, off: int) -> bytearray | None:
        """array_map_lookup_elem with the index read where it lies (array_map_gen_lookup)."""
        index = unpack_u32(mem, off)[0]  # key_size is 4
        if index >= self.max_entries:
            return None
        self.array_cost(index)
        cpu = self._current.cpu
        stats = self.access_stats
        if self._local[cpu]:
            stats.local[cpu] += 1
        else:
            stats.remote[cpu] += 1
        value = self.elems.get(index)
        return self.elem(index) if value is None else value

    def array_map_copy_value(self, key: bytes, flags: int = 0) -> bytes:
        """bpf_map_copy_value of an array: array_map_lookup_elem and the copy (an element
        never written reads as zeros without being made)."""
        index = u32_key(key)
        if index >= self.max_entries:
            raise KernelError(errno.ENOENT, f"index {index} is out of range (max_entries "
                                            f"{self.max_entries})")
        self.array_cost(index)
        self.access_stats.access(self.machine.current_cpu(), self.numa_node)
        value = self.elems.get(index)
        return bytes(self.value_size) if value is None else bytes(value[:self.value_size])

    def array_map_update_elem(self, key: bytes, value: bytes, flags: int) -> None:
        index = u32_key(key)
        check_array_update_flags(flags, index, self.max_entries, self.spin_lock_off >= 0)
        self.array_cost(index, write=True)
        self.access_stats.access(self.machine.current_cpu(), self.numa_node)
        if not self.special_fields:
            self.elem(index)[:self.value_size] = value[:self.value_size]
        elif flags & BPF_F_LOCK:
            copy_map_value_locked(self, self.elem(index), value)
        else:
            copy_map_value(self, self.elem(index), value)
        if self.timer_off >= 0:  # the old value's timer goes
            bpf_obj_free_fields(self.elem(index))

    def key_of_value(self, value: bytearray) -> bytes:
        """The index whose memory ``value`` is (a walk: bpf_timer_init only)."""
        for index, elem in list(self.elems.items()):
            if elem is value:
                return index.to_bytes(4, "little")
        raise KernelError(errno.ENOENT, "the value is no element's")

    def array_map_free(self) -> None:
        """array_map_free: the values' timers are cancelled."""
        for elem in list(self.elems.values()):
            bpf_obj_free_fields(elem)

    elem_of_this_cpu = elem

    # struct bpf_map_ops array_map_ops
    map_free = array_map_free
    map_lookup_elem = array_map_lookup_elem
    map_update_elem = array_map_update_elem
    bpf_map_copy_value = array_map_copy_value
    map_for_each_callback = ArrayBase.bpf_for_each_array_elem


@map_ops(MapType.PERCPU_ARRAY)
class BpfPercpuArray(ArrayBase):
    """BPF_MAP_TYPE_PERCPU_ARRAY: one elem_size slot per possible CPU per index."""

    def __init__(self, attr: MapAttr, machine: Machine, node: int) -> None:
        super().__init__(attr, machine, node)
        self.num_cpus = machine.num_cpus
        self._current = machine.current
        # index -> one slot per CPU; absent means all zeros.
        self.elems: dict[int, list[bytearray]] = {}

    def slots(self, index: int) -> list[bytearray]:
        slots = self.elems.get(index)
        if slots is None:  # setdefault, as in BpfArray.elem
            slots = self.elems.setdefault(index, [bytearray(self.elem_size)
                                                  for _ in range(self.num_cpus)])
        return slots

    # -- syscall side: every CPU's slot ---------------------------------------------------------
    def bpf_percpu_array_copy(self, key: bytes, flags: int = 0) -> bytes:
        index = u32_key(key)
        if index >= self.max_entries:
            raise KernelError(errno.ENOENT, f"index {index} is out of range (max_entries "
                                            f"{self.max_entries})")
        slots = self.elems.get(index)
        if slots is None:
            return bytes(self.elem_size * self.num_cpus)
        self._count_all_cpus()
        return b"".join(slots)

    def bpf_percpu_array_update(self, key: bytes, value: bytes, flags: int) -> None:
        index = u32_key(key)
        check_array_update_flags(flags, index, self.max_entries)
        size = self.elem_size
        for cpu, slot in enumerate(self.slots(index)):
            slot[:] = value[cpu * size:(cpu + 1) * size]
        self._count_all_cpus()

    def _count_all_cpus(self) -> None:
        cpu = self.machine.current_cpu()
        for node in self.machine.cpu_node:
            self.access_stats.access(cpu, node)

    # -- program side: this CPU's slot --------------------------------------------------------
    def percpu_array_map_lookup_elem(self, key: bytes) -> bytearray | None:
        return self.map_lookup_elem_at(key, 0)

    def map_lookup_elem_at(self, mem: bytes | bytearray, off: int) -> bytearray | None:
        """percpu_array_map_lookup_elem with the index read where it lies."""
        index = unpack_u32(mem, off)[0]  # key_size is 4
        if index >= self.max_entries:
            return None
        cpu = self._current.cpu
        self.timing.charge(cpu, "array_map_lookup_elem")
        self.access_stats.local[cpu] += 1  # a CPU's own slot is on its own node
        slots = self.elems.get(index)
        return (self.slots(index) if slots is None else slots)[cpu]

    def array_map_update_elem(self, key: bytes, value: bytes, flags: int) -> None:
        """array_map_update_elem of a per-CPU array: a program writes its CPU's slot."""
        index = u32_key(key)
        check_array_update_flags(flags, index, self.max_entries)
        cpu = self.machine.current_cpu()
        self.timing.charge(cpu, "array_map_lookup_elem")
        self.access_stats.access(cpu, self.machine.cpu_node[cpu])
        self.slots(index)[cpu][:self.value_size] = value[:self.value_size]

    def percpu_array_map_lookup_percpu_elem(self, key: bytes, cpu: int) -> bytearray | None:
        """``cpu``'s slot, None for a bad index or CPU."""
        index = u32_key(key)
        if cpu >= self.num_cpus or index >= self.max_entries:
            return None
        self.access_stats.access(self.machine.current_cpu(), self.machine.cpu_node[cpu])
        return self.slots(index)[cpu]

    def elem_of_this_cpu(self, index: int) -> bytearray:
        return self.slots(index)[self._current.cpu]

    # struct bpf_map_ops percpu_array_map_ops
    map_for_each_callback = ArrayBase.bpf_for_each_array_elem
    map_lookup_elem = percpu_array_map_lookup_elem
    map_update_elem = array_map_update_elem
    map_lookup_percpu_elem = percpu_array_map_lookup_percpu_elem
    bpf_map_copy_value = bpf_percpu_array_copy
    bpf_map_update_value = bpf_percpu_array_update


class FdArray(ArrayBase):
    """An array of kernel objects stored by fd (bpf_fd_array_map_*): PROG_ARRAY,
    PERF_EVENT_ARRAY, ARRAY_OF_MAPS.

    Subclasses say how an fd becomes an object (``map_fd_get_ptr``), how the object is
    released (``map_fd_put_ptr``) and what id a syscall lookup reports
    (``map_fd_sys_lookup_elem``). Fds are resolved in the fd table of ``self.system``, the
    EmulatedSystem that owns the map.
    """

    def __init__(self, attr: MapAttr, machine: Machine, node: int) -> None:
        super().__init__(attr, machine, node)
        self.ptrs: dict[int, object] = {}

    def map_fd_get_ptr(self, ufd: int) -> object:
        raise NotImplementedError

    def map_fd_put_ptr(self, ptr: object) -> None:
        raise NotImplementedError

    def map_fd_sys_lookup_elem(self, ptr: object) -> int:
        raise KernelError(ENOTSUPP, "this map's objects cannot be read from user space")

    def fd_array_map_lookup_elem(self, key: bytes) -> bytearray | None:
        raise KernelError(errno.EOPNOTSUPP, "programs cannot look into an fd array")

    def bpf_fd_array_map_lookup_elem(self, key: bytes, flags: int = 0) -> bytes:
        index = u32_key(key)
        ptr = self.ptrs.get(index) if index < self.max_entries else None
        if ptr is None:
            raise KernelError(errno.ENOENT, f"slot {index} is empty" if index < self.max_entries
                              else f"index {index} is out of range (max_entries "
                                   f"{self.max_entries})")
        return self.map_fd_sys_lookup_elem(ptr).to_bytes(4, "little")

    def bpf_fd_array_map_update_elem(self, key: bytes, value: bytes, flags: int) -> None:
        index = u32_key(key)
        if flags != BPF_ANY:
            raise KernelError(errno.EINVAL, f"flags {flags:#x}: fd arrays take BPF_ANY only")
        if index >= self.max_entries:
            raise KernelError(errno.E2BIG, f"index {index} is out of range (max_entries "
                                           f"{self.max_entries})")
        new_ptr = self.map_fd_get_ptr(u32_key(value))
        self.access_stats.access(self.machine.current_cpu(), self.numa_node)
        old_ptr = self.ptrs.get(index)
        self.ptrs[index] = new_ptr
        if old_ptr is not None:
            self.map_fd_put_ptr(old_ptr)

    def fd_array_map_delete_elem(self, key: bytes) -> None:
        index = u32_key(key)
        if index >= self.max_entries:
            raise KernelError(errno.E2BIG, f"index {index} is out of range (max_entries "
                                           f"{self.max_entries})")
        old_ptr = self.ptrs.pop(index, None)
        if old_ptr is None:
            raise KernelError(errno.ENOENT, f"slot {index} is already empty")
        self.map_fd_put_ptr(old_ptr)

    def bpf_fd_array_map_clear(self) -> None:
        """fd_array_map_free's bpf_fd_array_map_clear: drop every object held."""
        ptrs, self.ptrs = self.ptrs, {}
        for ptr in ptrs.values():
            self.map_fd_put_ptr(ptr)

    map_alloc_check = staticmethod(fd_array_map_alloc_check)
    map_free = bpf_fd_array_map_clear
    map_lookup_elem = fd_array_map_lookup_elem
    map_delete_elem = fd_array_map_delete_elem
    map_lookup_batch = None
    map_update_batch = None
    bpf_map_copy_value = bpf_fd_array_map_lookup_elem
    bpf_map_update_value = bpf_fd_array_map_update_elem


@map_ops(MapType.PROG_ARRAY)
class ProgArray(FdArray):
    """BPF_MAP_TYPE_PROG_ARRAY: tail-call targets."""

    def prog_fd_array_get_ptr(self, ufd: int) -> object:
        prog = self.system.prog_from_fd(ufd)
        if not bpf_prog_map_compatible(self, prog):
            raise KernelError(errno.EINVAL, f"program type {prog.prog_type} (attach type "
                              f"{prog.expected_attach_type}) is not the array's owner's "
                              f"{self.owner[0]} ({self.owner[2]})")
        self.system.bpf_prog_inc(prog)
        return prog

    def prog_fd_array_put_ptr(self, ptr: object) -> None:
        self.system.bpf_prog_put(ptr)

    def prog_fd_array_sys_lookup_elem(self, ptr: object) -> int:
        return ptr.id

    def tail_call_target(self, index: int) -> object | None:
        """The program bpf_tail_call(ctx, map, index) jumps to, or None (fall through)."""
        if index >= self.max_entries:
            return None
        return self.ptrs.get(index)

    # struct bpf_map_ops prog_array_map_ops
    map_fd_get_ptr = prog_fd_array_get_ptr
    map_fd_put_ptr = prog_fd_array_put_ptr
    map_fd_sys_lookup_elem = prog_fd_array_sys_lookup_elem


@map_ops(MapType.PERF_EVENT_ARRAY)
class PerfEventArray(FdArray):
    """BPF_MAP_TYPE_PERF_EVENT_ARRAY: perf event fds for bpf_perf_event_output.

    Syscall lookups always give ENOTSUPP (the type has no ``map_fd_sys_lookup_elem``). The
    emulated machine's only perf events are the BPF output events of a perf buffer reader
    (``System.perf_buffer_reader``: machine/perf_event.py), which puts them in the slots;
    any other fd is refused as the kernel refuses a file that is not a perf event (EBADF).
    Gap: the kernel also empties the slots a map fd filled when that fd is closed
    (perf_event_fd_array_release); here the reader empties its own when it closes.
    """

    def perf_event_array_copy(self, key: bytes, flags: int = 0) -> bytes:
        raise KernelError(ENOTSUPP, "perf event arrays cannot be read from user space")

    def perf_event_fd_array_get_ptr(self, ufd: int) -> PerfEvent:
        # perf_event_get: EBADF for any fd that is not a perf event (open or not, a host
        # file or a BPF object)
        try:
            event = self.system.fd_get(ufd)
        except KernelError:
            event = None
        if type(event) is not PerfEvent:
            raise KernelError(errno.EBADF, f"fd {ufd} is not a perf event (the emulated "
                                           f"machine's are a perf buffer reader's)")
        return event

    def perf_event_fd_array_put_ptr(self, ptr: object) -> None:
        pass  # the event is the reader's: it lives as long as the reader does

    # struct bpf_map_ops perf_event_array_map_ops
    map_fd_get_ptr = perf_event_fd_array_get_ptr
    map_fd_put_ptr = perf_event_fd_array_put_ptr
    bpf_map_copy_value = perf_event_array_copy


@map_ops(MapType.ARRAY_OF_MAPS)
class ArrayOfMaps(MapOfMapsMixin, FdArray):
    """BPF_MAP_TYPE_ARRAY_OF_MAPS: update flags must be BPF_ANY (else EINVAL), index >=
    max_entries -> E2BIG; delete of index >= max_entries -> E2BIG, of an empty slot -> ENOENT;
    lookup of an empty slot -> ENOENT; batches: generic lookup and update."""

    def __init__(self, attr: MapAttr, machine: Machine, node: int, *,
                 inner_map: BpfMap) -> None:
        """array_of_map_alloc."""
        self.inner_map_meta = bpf_map_meta_alloc(inner_map)
        super().__init__(attr, machine, node)

    def array_of_map_lookup_elem(self, key: bytes) -> BpfMap | None:
        """array_of_map_lookup_elem: the inner map itself, for the program to use."""
        index = u32_key(key)
        if index >= self.max_entries:
            return None
        self.array_cost(index)
        self.access_stats.access(self.machine.current_cpu(), self.numa_node)
        return self.ptrs.get(index)

    # struct bpf_map_ops array_of_maps_map_ops
    map_lookup_elem = array_of_map_lookup_elem
    map_lookup_batch = generic_map_lookup_batch
    map_update_batch = generic_map_update_batch
