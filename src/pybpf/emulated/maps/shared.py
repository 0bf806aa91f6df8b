"""Hash and array maps of an emulated system that live in a ``pybpf.shared`` segment.

``EmulatedSystem(shared=segment)`` puts its HASH, PERCPU_HASH, LRU_HASH, LRU_PERCPU_HASH,
LPM_TRIE, ARRAY and PERCPU_ARRAY maps in ``segment`` (pybpf/_shm_maps.c holds them: the layout,
the locks, the kernel's semantics; _shm_lru.h an LRU map's lists, the emulated CPUs' as the
reference's; _shm_lpm.h a trie),
so processes forked after the maps were made (an emulated CPU each, say) run programs and
syscalls on the same maps, in parallel on the host's CPUs; every other map type stays
process-local. The families here are the emulated ops of those maps:

- A program's lookup points into the segment, at the live element (``Map.value_offset``),
  as the kernel's lookup points at the element; writes through it land in the shared map,
  and an atomic instruction is one on the shared word. The memory of a deleted element is
  reused by a later insert, as the kernel's preallocated elements are.
- Updates, deletes, get_next_key and lookup_and_delete are the segment's, atomic per element
  across processes (each holds its bucket's or element's spin lock in the segment); a
  syscall lookup is its untorn copy. A program's map helpers read their key and value and
  call the segment's methods in C (the C extension's OpsHelpers) where it is built.
- Not modelled: the segment charges no modeled time, keeps no NUMA access counts and has no
  allocator model, so a system with a segment runs without modeled time. A value with a
  bpf_spin_lock or bpf_timer, and BPF_F_MMAPABLE and BPF_F_INNER_MAP arrays are refused
  (EINVAL, saying so). A hash map's batch lookups take whole buckets of the segment
  (``Map.bucket_batch``, htab_batch's walk); the other batch ops are syscall.c's generic ones.
- A map's memory stays in the segment until the segment goes (pybpf.shared's rule). Its name
  there is ``emulated-PID-N-NAME`` (the creating process, a count, the map's name), so
  another process attached to a named segment finds it (``Segment.map_names``, ``open_map``).
- Pins of these maps are names in the segment too (``pin:PATH``, PATH the bpffs path as the
  pinning process resolved it), not entries of the process's bpffs: an emulated system in
  any process on the segment gets (``obj_get``) and unpins them. The bpffs's directories
  stay each process's own, so a pin's directory is checked where it is pinned only.
"""

from __future__ import annotations

import errno
import itertools
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

from ...accelerator import OpsHelpers
from ...attrs import MapAttr
from ...errors import KernelError
from ...uapi import BPF_F_INNER_MAP, BPF_F_MMAPABLE, MapFlags, MapType, round_up
from .arraymap import ArrayBase, array_map_alloc_check
from .batch import generic_map_delete_batch, generic_map_lookup_batch, generic_map_update_batch
from .bpf_map import BpfMap, roundup_pow_of_two
from .hashtab import HtabMap
from .htab_batch import lookup_and_delete_batch
from .lpm_trie import LpmTrie

if TYPE_CHECKING:
    from ..machine.machine import Machine

# the map flags the segment's maps hold; the others (NUMA placement, program access) are the
# emulated map's, read where the kernel reads them
SEGMENT_FLAGS = int(MapFlags.NO_PREALLOC | MapFlags.NO_COMMON_LRU | MapFlags.ZERO_SEED)
_names = itertools.count()
# a map's own name in the segment (emulated-PID-N-NAME), and a pin's (pin:/sys/fs/bpf/...)
NAME_PREFIX, PIN_PREFIX = "emulated-", "pin:"


def _kernel_error(err: int, command: str, detail: str) -> KernelError:
    return KernelError(err, detail)


class SharedSegmentMap(BpfMap):
    """A map whose elements are a ``pybpf.shared`` segment's (``self.shm``). ``segment`` is
    the ``pybpf.shared.Segment`` (its ``handle`` the C segment), which this floor does not
    import: pybpf.shared stands on the Map layer, above the backends. A per-CPU map's
    element holds a value for each CPU of the machine, ``round_up(value_size, 8)`` apart
    (the syscall's layout): a program reads and writes its CPU's."""

    percpu: ClassVar[bool] = False
    lru: ClassVar[bool] = False  # its inserts take a node from the running CPU's LRU lists

    def __init__(self, attr: MapAttr, machine: Machine, node: int, segment: Any,
                 shm: Any = None) -> None:
        """A new map in ``segment``, or the one ``shm`` is (a pin another process made:
        ``open_pinned``)."""
        super().__init__(attr, machine, node)
        self.segment = segment
        if shm is not None:
            if self.percpu and shm.ncpus != machine.num_cpus:
                raise KernelError(errno.EINVAL, f"the per-CPU map has a value for {shm.ncpus} "
                                  f"CPUs, this machine has {machine.num_cpus}")
            if self.lru and shm.lru_cpus != machine.num_cpus:
                raise KernelError(errno.EINVAL, f"the LRU map has lists for {shm.lru_cpus} "
                                  f"CPUs, this machine has {machine.num_cpus}")
            self.hashrnd = shm.hashrnd
            self.shm = shm
        else:
            self.hashrnd = 0 if attr.map_flags & MapFlags.ZERO_SEED else \
                machine.random.getrandbits(32)
            # the map's name as bpf_obj_name_cpy keeps it (it checks the name after this)
            name = "".join(c for c in self.name if c.isascii() and (c.isalnum() or c in "_."))
            if attr.map_flags & MapFlags.NO_COMMON_LRU:  # htab_map_alloc: a CPU's share each
                ncpus = machine.num_cpus
                rounded = round_up(self.max_entries, ncpus)
                self.max_entries = rounded if rounded < 1 << 32 else \
                    self.max_entries // ncpus * ncpus
            try:
                self.shm = segment.handle.create_map(
                    f"{NAME_PREFIX}{os.getpid()}-{next(_names)}-{name}", int(attr.map_type),
                    attr.key_size, attr.value_size, self.max_entries,
                    attr.map_flags & SEGMENT_FLAGS, self.hashrnd,
                    machine.num_cpus if self.percpu or self.lru else 1)
            except OSError as exc:
                raise KernelError(exc.errno or errno.ENOMEM,
                                  f"{exc.strerror} (in the {segment.describe()} of this "
                                  "emulated system)") from None
        self.shm._set_errors(_kernel_error)
        self._current = machine.current  # ``.cpu``: the running CPU
        self.stride = round_up(attr.value_size, 8)
        # the element ops a program's helpers call are the segment's C methods themselves
        # (their keys and values are bytes of the right sizes; a per-CPU map's update
        # writes the running CPU's value, an LRU map's takes the running CPU's nodes)
        if not (self.percpu or self.lru):
            self.map_update_elem = self.shm.update
        self.map_delete_elem = self.shm.delete
        self.map_get_next_key = self.shm.get_next_key
        self._memory = memoryview(segment.handle)
        # the whole segment as one value, which the native tier registers once per run and
        # points its lookups into (a pointer's offset has 32 bits: not for a larger segment)
        self.segment_region: dict[int, Any] | None = \
            {0: self._memory} if len(self._memory) < 1 << 32 else None
        # the values looked up (views_at's), by index (arrays: the native tier's too) or by
        # where they lie in the segment (hash maps, tries)
        self.elems: dict[int, Any] = {}
        if OpsHelpers is not None:  # a program's helpers read their bytes and call these in C
            helpers = OpsHelpers(attr.key_size, attr.value_size, self.map_lookup_elem,
                                 self.map_update_elem, self.shm.delete, KernelError)
            self.c_helpers = {"lookup": helpers.helper_lookup, "update": helpers.helper_update,
                              "delete": helpers.helper_delete}

    def map_lookup_elem(self, key: bytes) -> memoryview | None:
        """The live value (a per-CPU map's running CPU's): its view in ``elems`` by where it
        lies in the segment, one per element, so a value keeps its pointer within a run (the
        native tier points into ``segment_region`` instead)."""
        off = self.shm.value_offset(key)
        if off < 0:
            return None
        found = self.elems.get(off)
        if found is None:
            found = self.elems[off] = self.views_at(off)
        return self.this_cpu(found)

    def check_invariants(self) -> None:
        """The segment's chains, count, free slots, LRU lists or trie agree, with no
        operation in flight (Map.check); raises RuntimeError if not."""
        problems = self.shm.check()
        if problems:
            raise RuntimeError(f"{self.describe()}: " + "; ".join(problems))

    def views_at(self, off: int) -> Any:
        """The view of the value that begins at ``off`` in the segment; a per-CPU map's: the
        list of its CPUs' views."""
        if not self.percpu:
            return self._memory[off:off + self.value_size]
        return [self._memory[at:at + self.value_size]
                for at in range(off, off + self.stride * self.machine.num_cpus, self.stride)]

    def map_free(self) -> None:
        """The views go; the elements stay in the segment (its memory is never given back)."""
        self.elems.clear()
        self.segment_region = None
        self._memory.release()

    def this_cpu(self, found: Any) -> memoryview | None:
        """What a program's lookup gives of ``found`` (``views_at``'s, or None): a per-CPU
        map's running CPU's value."""
        return found[self._current.cpu] if self.percpu and found is not None else found

    def map_update_elem(self, key: bytes, value: bytes, flags: int) -> None:
        """A program's update on the running CPU: a per-CPU map's writes that CPU's value (a
        new element's others zero), an LRU map's takes a node from that CPU's lists."""
        cpu = self._current.cpu
        self.shm.update(key, value, flags, cpu if self.percpu else -1, cpu)

    def bpf_map_update_value(self, key: bytes | None, value: bytes, flags: int) -> None:
        """A syscall's update: every CPU's value; an LRU map's node from the current CPU's
        lists."""
        self.shm.update(bytes(key), bytes(value), flags, -1, self._current.cpu)

    def bpf_map_copy_value(self, key: bytes | None, flags: int) -> bytes:
        """The segment's lookup: a copy read between two equal sequence counts (untorn)."""
        return self.shm.lookup(key)

    def set_special_fields(self, spin_lock_off: int, timer_off: int) -> None:
        if spin_lock_off >= 0 or timer_off >= 0:
            raise KernelError(errno.EINVAL, "a bpf_spin_lock or bpf_timer in the value of a "
                              "map in a shared segment is not supported: create the map on "
                              "an emulated system without shared=")

    def mem_stats(self) -> dict:
        return {**super().mem_stats(), "shared_segment": self.segment.describe()}


class SharedHtab(SharedSegmentMap):
    """BPF_MAP_TYPE_HASH in the segment. ``elems`` holds each value as looked up, by where
    it lies in the segment (its views_at)."""

    map_types = (MapType.HASH,)

    @classmethod
    def map_alloc_check(cls, attr: MapAttr, machine: Machine) -> None:
        HtabMap.htab_map_alloc_check(attr, machine)

    def _batch(self, in_batch: bytes | None, count: int, elem_flags: int, flags: int,
               delete: bool) -> Any:
        """__htab_map_lookup_and_delete_batch on the segment's buckets."""
        n_buckets = roundup_pow_of_two(self.max_entries)

        def take_bucket(start: int, room: int, delete: bool) -> tuple[int | None, Any]:
            index, pairs = self.shm.bucket_batch(start, room, delete)
            return (None, None) if index >= n_buckets else (index, pairs)

        return lookup_and_delete_batch(self, n_buckets, take_bucket, in_batch, count,
                                       elem_flags, flags, delete)

    def map_lookup_batch(self, in_batch: bytes | None, count: int, elem_flags: int,
                         flags: int) -> Any:
        return self._batch(in_batch, count, elem_flags, flags, delete=False)

    def map_lookup_and_delete_batch(self, in_batch: bytes | None, count: int,
                                    elem_flags: int, flags: int) -> Any:
        return self._batch(in_batch, count, elem_flags, flags, delete=True)

    map_update_batch = generic_map_update_batch
    map_delete_batch = generic_map_delete_batch

    def map_lookup_and_delete_elem(self, key: bytes | None, flags: int) -> bytes:
        if flags:
            raise KernelError(errno.EINVAL, f"flags {flags:#x}: BPF_F_LOCK needs a "
                              "bpf_spin_lock in the value (maps in a segment have none)")
        return self.shm.lookup_and_delete(key)

    def map_for_each_callback(self, callback: Callable[[bytes, Any], int], flags: int) -> int:
        """bpf_for_each_hash_elem over the elements present when it began, in the kernel's
        order (buckets in order, each newest first); one deleted meanwhile is skipped."""
        if flags:
            raise KernelError(errno.EINVAL, f"flags {flags:#x}: must be 0")
        keys = []
        key = None
        while True:
            try:
                key = self.shm.get_next_key(key)
            except KernelError:
                break
            keys.append(key)
        visited = 0
        for key in keys:
            value = self.map_lookup_elem(key)
            if value is None:
                continue
            visited += 1
            if callback(key, value):
                break
        return visited


class SharedLruHtab(SharedHtab):
    """BPF_MAP_TYPE_LRU_HASH in the segment: a program's lookup sets the element's
    reference bit (a syscall's does not), an insert takes a node from the LRU, evicting
    through its lists as the kernel's (_shm_lru.h, the reference's bpf_lru_list.py)."""

    map_types = (MapType.LRU_HASH,)
    lru = True


class SharedLruPercpuHtab(SharedLruHtab):
    """BPF_MAP_TYPE_LRU_PERCPU_HASH in the segment: updates of an existing key in place, and
    BPF_EXIST takes no node."""

    map_types = (MapType.LRU_PERCPU_HASH,)
    percpu = True


class SharedLpmTrie(SharedSegmentMap):
    """BPF_MAP_TYPE_LPM_TRIE in the segment: the kernel's trie shape (so get_next_key's
    post-order), updates and deletes under the trie's lock, lookups (longest prefix match)
    without it. ``elems`` holds each value as looked up, by where it lies."""

    map_types = (MapType.LPM_TRIE,)
    map_alloc_check = LpmTrie.trie_alloc_check
    map_lookup_batch = generic_map_lookup_batch
    map_update_batch = generic_map_update_batch
    map_delete_batch = generic_map_delete_batch


class SharedArray(SharedSegmentMap):
    """BPF_MAP_TYPE_ARRAY in the segment. ``elems`` holds each index's value as looked up
    (its views_at), as BpfArray's holds its buffers (BpfPercpuArray's its slots), so the
    native tier inlines its lookups as an array's (array_map_gen_lookup)."""

    map_types = (MapType.ARRAY,)

    def map_lookup_elem(self, key: bytes) -> memoryview | None:
        """The live value: a per-CPU array's running CPU's."""
        index = int.from_bytes(key[:4], "little")
        found = self.elems.get(index)
        if found is None and index < self.max_entries:
            found = self.elems[index] = self.views_at(self.shm.value_offset(key))
        return self.this_cpu(found)

    def elem_of_this_cpu(self, index: int) -> memoryview | None:
        return self.map_lookup_elem(index.to_bytes(4, "little"))

    @classmethod
    def map_alloc_check(cls, attr: MapAttr, machine: Machine) -> None:
        array_map_alloc_check(attr, machine)
        if attr.map_flags & (BPF_F_MMAPABLE | BPF_F_INNER_MAP):
            raise KernelError(errno.EINVAL, "BPF_F_MMAPABLE and BPF_F_INNER_MAP arrays are not "
                              "supported in a shared segment: create the map on an emulated "
                              "system without shared=")

    map_for_each_callback = ArrayBase.bpf_for_each_array_elem
    map_lookup_batch = generic_map_lookup_batch
    map_update_batch = generic_map_update_batch


class SharedPercpuHtab(SharedHtab):
    """BPF_MAP_TYPE_PERCPU_HASH in the segment."""

    map_types = (MapType.PERCPU_HASH,)
    percpu = True


class SharedPercpuArray(SharedArray):
    """BPF_MAP_TYPE_PERCPU_ARRAY in the segment."""

    map_types = (MapType.PERCPU_ARRAY,)
    percpu = True


# map type -> the family that holds it in a segment (EmulatedSystem(shared=...))
SHARED_OPS: dict[int, type[SharedSegmentMap]] = {
    int(cls.map_types[0]): cls
    for cls in (SharedHtab, SharedArray, SharedPercpuHtab, SharedPercpuArray, SharedLruHtab,
                SharedLruPercpuHtab, SharedLpmTrie)}


# -- pins: the segment's names, so every process on it sees them ---------------------------------
def segment_pin(segment: Any, target: str) -> Any | None:
    """The C map pinned at ``target`` (a normalised bpffs path) in ``segment``, or None."""
    try:
        return segment.handle.open_map(PIN_PREFIX + target)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            return None
        raise KernelError(exc.errno or errno.EIO, exc.strerror) from None


def pin_in_segment(bpf_map: SharedSegmentMap, target: str) -> None:
    """bpf_obj_pin of a map in a segment: the pin is a name of the map there (EEXIST where
    another process pinned there; ENAMETOOLONG past the segment's names' 63 bytes)."""
    try:
        bpf_map.segment.handle.link_name(bpf_map.shm.name, PIN_PREFIX + target)
    except OSError as exc:
        raise KernelError(exc.errno or errno.EIO, f"{exc.strerror} (a pin of a map in the "
                          f"{bpf_map.segment.describe()} is a name there: "
                          f"{PIN_PREFIX}{target})") from None


def unpin_in_segment(segment: Any, target: str) -> bool:
    """Remove the pin at ``target`` from ``segment``; False where there was none."""
    try:
        segment.handle.unlink_name(PIN_PREFIX + target)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            return False
        raise KernelError(exc.errno or errno.EIO, exc.strerror) from None
    return True


def open_pinned(shm: Any, segment: Any, machine: Machine, node: int) -> SharedSegmentMap:
    """The emulated map of ``shm``, a segment's map another process (or this one, earlier)
    pinned: its type, sizes and flags from the segment, its name from its own name there."""
    name = ""
    for own in segment.handle.map_names():
        if own.startswith(NAME_PREFIX) and segment.handle.open_map(own).offset == shm.offset:
            name = own.split("-", 3)[3]
            break
    attr = MapAttr(shm.type, shm.key_size, shm.value_size, shm.max_entries, shm.map_flags,
                   map_name=name.encode())
    return SHARED_OPS[shm.type](attr, machine, node, segment, shm=shm)
