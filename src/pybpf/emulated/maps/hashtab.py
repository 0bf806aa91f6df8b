"""HASH, PERCPU_HASH, LRU_HASH, LRU_PERCPU_HASH and HASH_OF_MAPS (kernel/bpf/hashtab.c).

Rules this module keeps:
- Create: ``htab_map_alloc_check``'s order (flags, NO_COMMON_LRU, LRU+NO_PREALLOC -> ENOTSUPP,
  node with per-CPU, zero sizes, E2BIG limits), then ``htab_map_alloc`` (NO_COMMON_LRU rounds
  max_entries to the CPUs; > 2^31 or > 2^27 buckets -> E2BIG).
- Order: ``n_buckets = roundup_pow_of_two(max_entries)``; a key's bucket is
  ``htab_map_hash(key, hashrnd) & (n_buckets - 1)`` with ``hashrnd`` 0 under BPF_F_ZERO_SEED
  (random otherwise); a bucket lists its elements newest first. Replacing a key in HASH or
  LRU_HASH puts a new element at the front; per-CPU maps and (6.16+) HASH_OF_MAPS update in
  place. get_next_key and the batches walk buckets in index order and each bucket front to
  back, so with ZERO_SEED the order is the kernel's.
- Batches: ``htab_batch.HtabBatchOps`` (whole buckets, bucket-index tokens).
- Storage: ``htab_buckets.HtabBuckets`` (the buckets, a dict for lookups, an index of the
  non-empty buckets for the order); element memory: ``htab_elem.HtabElemMemory``.
- Locks: striped bucket locks; the LRU has its own (the free lists' pops and pushes are
  single list operations, percpu_freelist.py). Lock order is
  LRU -> bucket; LRU nodes are given back only after the bucket lock is dropped. A key's
  bucket always comes from hashing the key: an element reached without its bucket lock may
  be recycled for another key at any time.
- Syscall lookups never set LRU reference bits; program lookups do.
- Modeled time: each op charges its profile cost (``htab_map_lookup_elem``, ...) and jhash per
  key byte, takes the bucket's spinlock (the lock lives in the bucket's line) around its
  writes, and touches the bucket's line and each element of the chain up to the key; the
  element's memory and the allocator charge what they do (htab_elem.py, memalloc.py,
  bpf_lru_list.py, percpu_freelist.py).
- Where pybpf._cache_model is built, a HASH, PERCPU_HASH or LRU_HASH map's lookup, update and
  delete (and the map helpers bound to it) are its ``HtabCore``'s (src/pybpf/_hashtab.c),
  which does these methods' steps in C and hands them back what it does not do; they stay the
  reference. With modeled time it charges the C cache model; without, nothing (a machine
  whose modeled time runs on the Python caches keeps these methods).
"""

from __future__ import annotations

import errno
import functools
import threading
from typing import TYPE_CHECKING, NoReturn

from ...accelerator import HTAB_MAP_HASH, HostLock
from ...errors import KernelError
from ...uapi import (
    BPF_EXIST,
    BPF_F_ACCESS_MASK,
    BPF_F_LOCK,
    BPF_NOEXIST,
    ENOTSUPP,
    KMALLOC_MAX_SIZE,
    NUMA_NO_NODE,
    PCPU_MIN_UNIT_SIZE,
    MapFlags,
    MapType,
    round_up,
)
from ..machine.timing import SpinLock
from .batch import generic_map_delete_batch, generic_map_update_batch
from .bpf_lru_list import LruNode
from .bpf_map import (
    U32_MAX,
    BpfMap,
    MapAttr,
    bpf_map_attr_numa_node,
    bpf_map_flags_access_ok,
    map_ops,
    roundup_pow_of_two,
    u32_key,
)
from .bpf_spin_lock import check_and_init_map_value, copy_map_value_locked
from .htab_batch import HtabBatchOps
from .htab_buckets import HtabBuckets
from .htab_elem import HTAB_ELEM_SIZE, HtabElem, HtabElemMemory
from .jhash import htab_map_hash
from .map_in_map import MapOfMapsMixin, bpf_map_meta_alloc

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..machine.machine import Machine

HTAB_CREATE_FLAG_MASK = int(MapFlags.NO_PREALLOC | MapFlags.NO_COMMON_LRU | MapFlags.NUMA_NODE
                            | BPF_F_ACCESS_MASK | MapFlags.ZERO_SEED)
BUCKET_SIZE = 16  # sizeof(struct bucket)
LOCK_STRIPES = 64
HASH_CACHE_SIZE = 1 << 16


@map_ops(MapType.HASH)
class HtabMap(HtabElemMemory, HtabBatchOps, BpfMap):
    """BPF_MAP_TYPE_HASH; the other three types subclass it."""

    percpu = False
    lru = False
    fd_htab = False

    # -- creation -----------------------------------------------------------------------------
    @classmethod
    def htab_map_alloc_check(cls, attr: MapAttr, machine: Machine) -> None:
        flags = attr.map_flags
        lru = attr.map_type in (MapType.LRU_HASH, MapType.LRU_PERCPU_HASH)
        percpu = attr.map_type in (MapType.PERCPU_HASH, MapType.LRU_PERCPU_HASH)
        percpu_lru = bool(flags & MapFlags.NO_COMMON_LRU)
        prealloc = not flags & MapFlags.NO_PREALLOC
        if flags & ~HTAB_CREATE_FLAG_MASK:
            raise KernelError(errno.EINVAL, f"map_flags {flags & ~HTAB_CREATE_FLAG_MASK:#x} "
                              "are not accepted by hash maps")
        if not bpf_map_flags_access_ok(flags):
            raise KernelError(errno.EINVAL, "BPF_F_RDONLY_PROG and BPF_F_WRONLY_PROG exclude "
                              "each other")
        if not lru and percpu_lru:
            raise KernelError(errno.EINVAL, "BPF_F_NO_COMMON_LRU is only for LRU maps")
        if lru and not prealloc:
            raise KernelError(ENOTSUPP, "LRU maps are always preallocated: drop "
                              "BPF_F_NO_PREALLOC")
        if bpf_map_attr_numa_node(attr) != NUMA_NO_NODE and (percpu or percpu_lru):
            raise KernelError(errno.EINVAL, "per-CPU hash maps and BPF_F_NO_COMMON_LRU maps "
                              "cannot be placed on a NUMA node")
        if attr.max_entries == 0 or attr.key_size == 0 or attr.value_size == 0:
            raise KernelError(errno.EINVAL, "max_entries, key_size and value_size must be > 0")
        if attr.key_size + attr.value_size >= KMALLOC_MAX_SIZE - HTAB_ELEM_SIZE:
            raise KernelError(errno.E2BIG, f"key_size + value_size must stay below "
                              f"{KMALLOC_MAX_SIZE - HTAB_ELEM_SIZE}")
        if percpu and round_up(attr.value_size, 8) > PCPU_MIN_UNIT_SIZE:
            raise KernelError(errno.E2BIG, f"per-CPU values are limited to "
                              f"{PCPU_MIN_UNIT_SIZE} bytes")

    def __init__(self, attr: MapAttr, machine: Machine, node: int) -> None:
        """htab_map_alloc."""
        super().__init__(attr, machine, node)
        ncpus = machine.num_cpus
        self.prealloc = not attr.map_flags & MapFlags.NO_PREALLOC
        self.percpu_lru = bool(attr.map_flags & MapFlags.NO_COMMON_LRU)
        if self.percpu_lru:
            rounded = round_up(self.max_entries, ncpus)
            self.max_entries = rounded if rounded <= U32_MAX else \
                self.max_entries // ncpus * ncpus
        if self.max_entries > 1 << 31:
            raise KernelError(errno.E2BIG, "max_entries is over 2^31")
        self.n_buckets = roundup_pow_of_two(self.max_entries)
        if self.n_buckets > U32_MAX // BUCKET_SIZE:
            raise KernelError(errno.E2BIG, f"max_entries {self.max_entries} needs "
                              f"{self.n_buckets} buckets, over the kernel's limit")
        self.mask = self.n_buckets - 1
        self.hashrnd = 0 if attr.map_flags & MapFlags.ZERO_SEED else \
            machine.random.getrandbits(32)
        self.slot_size = round_up(self.value_size, 8)
        self._current = machine.current  # ``.cpu``: the hot paths read it without a call
        self.prealloc_init(attr, machine)

        # Per-CPU values are assembled per lookup, so they have no live value table.
        self.storage = HtabBuckets(self.n_buckets, with_values=not self.percpu)
        self.table: dict[bytes, HtabElem] = self.storage.table  # the hot paths read these
        self.values = self.storage.values
        self.buckets = self.storage.buckets
        self._link, self._unlink = self.storage.link, self.storage.unlink
        self._replace = self.storage.replace
        # jhash costs microseconds in Python; keys come back often (delete, re-insert).
        self._hash_cached = functools.lru_cache(maxsize=HASH_CACHE_SIZE)(
            functools.partial(htab_map_hash, hashrnd=self.hashrnd) if HTAB_MAP_HASH is None
            else lambda key, hashrnd=self.hashrnd: HTAB_MAP_HASH(key, hashrnd))
        self.nstripes = min(self.n_buckets, LOCK_STRIPES)
        self.locks = [HostLock() for _ in range(self.nstripes)]
        self.stripe_mask = self.nstripes - 1  # both powers of two: hash & mask & stripe_mask
        # The bucket array's memory, and each used bucket's spinlock, for the timing model.
        self.bucket_base = self.timing.alloc_region(self.n_buckets * BUCKET_SIZE, node)
        self._c_model = self.timing._cache_model  # None: the costs in Python, the reference
        self._bucket_locks: dict[int, SpinLock] = {}
        c_extension = self.timing.c_extension
        self._core = None
        if c_extension is not None and not (self.fd_htab or (self.lru and self.percpu)):
            # The hot ops run in C (HtabCore), charged to the C model (or to nothing), with
            # the methods here as their reference and for the cases they hand back.
            core = self._core = c_extension.HtabCore(self, BUCKET_SIZE,
                                                     type(self).map_update_elem,
                                                     type(self).map_delete_elem)
            self.map_lookup_elem = core.lookup
            self.map_update_elem = core.update
            self.map_delete_elem = core.delete
            if not self.percpu:  # a per-CPU map's syscall update writes every slot: Python
                self.bpf_map_update_value = core.update
            self.c_helpers = {"lookup": core.helper_lookup, "update": core.helper_update,
                              "delete": core.helper_delete}
            if self.lru:  # the LRU's eviction callback
                self.lru_list.del_from_htab = core.delete_node

    def set_special_fields(self, spin_lock_off: int, timer_off: int) -> None:
        super().set_special_fields(spin_lock_off, timer_off)
        if self._core is not None:  # its ops then hand such values to the methods here
            self._core.special_fields = bool(self.special_fields)

    def _hash(self, key: bytes) -> int:
        """htab_map_hash of ``key``, always from the key: an element found without its bucket
        lock may be recycled for another key meanwhile, so its ``hash`` cannot be trusted."""
        return self._hash_cached(key)

    def _lock(self, hash_: int) -> threading.Lock:
        return self.locks[hash_ & self.stripe_mask]

    # -- modeled time -----------------------------------------------------------------------
    def _walk_cost(self, cpu: int, key: bytes, hash_: int) -> None:
        """What finding ``key`` costs: the bucket's line, then each element of its chain up
        to the key (every one when it is absent). The C cache model, where built, does this
        and ``_op_cost`` in one call each (``htab_walk_cost``, ``htab_op_cost``)."""
        if self._c_model is not None:
            self._c_model.htab_walk_cost(self, BUCKET_SIZE, cpu, key, hash_)
            return
        timing = self.timing
        index = hash_ & self.mask
        timing.access(cpu, self.bucket_base + index * BUCKET_SIZE)
        for elem in self.buckets.get(index, ()):
            timing.access(cpu, elem.addr)
            if elem.key == key:
                break

    def _op_cost(self, cpu: int, op: str, key: bytes, hash_: int) -> None:
        """An op's own work, jhash of the key, and the walk to it."""
        if self._c_model is not None:
            self._c_model.htab_op_cost(self, BUCKET_SIZE, cpu, op, key, hash_)
            return
        timing = self.timing
        timing.charge(cpu, op)
        timing.charge(cpu, "jhash_byte", self.key_size)
        self._walk_cost(cpu, key, hash_)

    def _bucket_lock(self, hash_: int) -> SpinLock:
        """The modeled raw spinlock of ``hash_``'s bucket (in the bucket's line)."""
        index = hash_ & self.mask
        lock = self._bucket_locks.get(index)
        if lock is None:
            lock = self._bucket_locks.setdefault(
                index, self.timing.new_lock(self.bucket_base + index * BUCKET_SIZE))
        return lock

    # -- update and delete (both sides, as the kernel's ops) -----------------------------------
    def check_update_flags(self, flags: int) -> None:
        """Every htab update's first check: BPF_ANY, BPF_NOEXIST or BPF_EXIST (BPF_F_LOCK needs
        a bpf_spin_lock in the value)."""
        if (flags & ~BPF_F_LOCK) > BPF_EXIST:
            raise KernelError(errno.EINVAL, f"flags {flags:#x}: use BPF_ANY, BPF_NOEXIST or "
                              "BPF_EXIST")
        if flags & BPF_F_LOCK and self.spin_lock_off < 0:
            raise KernelError(errno.EINVAL, "BPF_F_LOCK needs a bpf_spin_lock in the value")

    @staticmethod
    def check_flags(old: HtabElem | None, flags: int) -> None:
        """check_flags: EEXIST / ENOENT (BPF_F_LOCK aside)."""
        if old is not None and flags & ~BPF_F_LOCK == BPF_NOEXIST:
            raise KernelError(errno.EEXIST, "the key exists (BPF_NOEXIST)")
        if old is None and flags & ~BPF_F_LOCK == BPF_EXIST:
            raise KernelError(errno.ENOENT, "the key does not exist (BPF_EXIST)")

    def htab_map_update_elem(self, key: bytes, value: bytes, flags: int) -> None:
        """htab_map_update_elem."""
        if flags:
            self.check_update_flags(flags)
            if flags & BPF_F_LOCK:  # an existing element is written in place, under its lock
                old = self.table.get(key)
                self.check_flags(old, flags)
                if old is not None:
                    copy_map_value_locked(self, old.value, value)
                    return
        if self.special_fields:  # a new element's lock starts free, its timer unset
            value = check_and_init_map_value(self, value)
        # Hot path: the hash an existing element carries saves hashing the key, but that
        # element was found without a lock and may have been recycled for another key; it
        # is trusted only if, under the lock it chose, it is still key's with that hash.
        old = self.table.get(key)
        if old is not None:
            hash_ = old.hash
            lock = self.locks[hash_ & self.stripe_mask]
            lock.acquire()
            if self.table.get(key) is not old or old.hash != hash_:
                lock.release()
                old = None
        if old is None:
            hash_ = self._hash_cached(key)
            lock = self.locks[hash_ & self.stripe_mask]
            lock.acquire()
        cpu = self._current.cpu
        timing = self.timing
        modeled = timing.modeled  # without modeled time the hot path skips every cost call
        if modeled:
            timing.charge(cpu, "htab_map_update_elem")
            timing.charge(cpu, "jhash_byte", self.key_size)
            tlock = self._bucket_lock(hash_)
            timing.spin_lock(cpu, tlock)
        try:
            if modeled:
                self._walk_cost(cpu, key, hash_)
            old = self.table.get(key)
            if flags:  # BPF_ANY passes check_flags
                self.check_flags(old, flags)
            if old is not None and flags & BPF_F_LOCK:  # it appeared since the first look
                copy_map_value_locked(self, old.value, value)
                return
            new = self.alloc_htab_elem(key, value, hash_, old, False, cpu)
            if old is None:
                self._link(new)
            else:
                self._replace(old, new)
        finally:
            if modeled:
                timing.spin_unlock(cpu, tlock)
            lock.release()
        if old is not None:
            self._retire_replaced(old, cpu)

    def _retire_replaced(self, old: HtabElem, cpu: int) -> None:
        """An element an update replaced, unlinked now: a preallocated map's CPU keeps it as
        its spare; another map's goes back to the allocator."""
        self.htab_put_fd_value(old)
        if self.prealloc:
            self.extra_elems[cpu].append(old)
        else:
            with self.count_lock:
                self.count -= 1
            self.ma.free(old)

    def htab_map_update_elem_in_place(self, key: bytes, value: bytes, flags: int,
                                      onallcpus: bool) -> None:
        """htab_map_update_elem_in_place: per-CPU maps, and (6.16+) maps of maps, overwrite
        an existing element's value where it is, so its bucket position does not change."""
        self.check_update_flags(flags)
        hash_ = self._hash(key)
        cpu = self._current.cpu
        tlock = self._bucket_lock(hash_)
        with self._lock(hash_):
            self.timing.spin_lock(cpu, tlock)
            try:
                self._op_cost(cpu, "htab_map_update_elem", key, hash_)
                old = self.table.get(key)
                self.check_flags(old, flags)
                if old is None:
                    self._link(self.alloc_htab_elem(key, value, hash_, None, onallcpus, cpu))
                elif self.percpu:
                    self._fill_value(old, value, onallcpus, cpu, init=False)
                else:
                    self.htab_put_fd_value(old)  # the value it replaces (an inner map) goes
                    old.value[:] = value
            finally:
                self.timing.spin_unlock(cpu, tlock)

    def htab_map_delete_elem(self, key: bytes, read: bool = False) -> bytes | None:
        """htab_map_delete_elem (htab_lru_map_delete_elem: the element goes back to the LRU):
        unlink ``key``'s element under its bucket lock (ENOENT when absent) and release it;
        with ``read``, its value is read first and returned (lookup_and_delete)."""
        hash_ = self._hash_cached(key)
        timing = self.timing
        modeled = timing.modeled  # without modeled time the hot path skips every cost call
        lock = self.locks[hash_ & self.stripe_mask]
        lock.acquire()
        if modeled:
            cpu = self._current.cpu
            tlock = self._bucket_lock(hash_)
            timing.spin_lock(cpu, tlock)
        try:
            if modeled:
                self._op_cost(cpu, "htab_map_delete_elem", key, hash_)
            elem = self.table.get(key)
            if elem is None:
                self._key_not_found()
            data = self._read_value(elem) if read else None
            self._unlink(elem)
        finally:
            if modeled:
                timing.spin_unlock(cpu, tlock)
            lock.release()
        self._release_elem(elem)
        return data

    @staticmethod
    def _key_not_found() -> NoReturn:
        """The ENOENT of an op on a missing key (HtabCore raises it through this too)."""
        raise KernelError(errno.ENOENT, "key not found")

    _release_elem = HtabElemMemory.free_htab_elem  # where a deleted element goes (LRU maps:
    # back to the LRU)

    # -- reads ----------------------------------------------------------------------------------
    def _read_value(self, elem: HtabElem) -> bytes:
        if self.percpu:
            return b"".join(elem.value)
        return bytes(elem.value)

    def _lookup(self, key: bytes) -> HtabElem | None:
        """__htab_map_lookup_elem: the element (its access counted and costed), or None."""
        cpu = self._current.cpu
        if self.timing.modeled:
            self._op_cost(cpu, "htab_map_lookup_elem", key, self._hash_cached(key))
        elem = self.table.get(key)
        if elem is not None:
            self.access_stats.access(cpu, elem.node)
        return elem

    def htab_map_lookup_elem(self, key: bytes) -> bytearray | None:
        """htab_map_lookup_elem: the live value (counted as an access from this CPU)."""
        elem = self._lookup(key)
        return None if elem is None else elem.value

    def htab_map_copy_value(self, key: bytes, flags: int = 0) -> bytes:
        """bpf_map_copy_value of a hash map: htab_map_lookup_elem (an LRU map's
        htab_lru_map_lookup_elem_sys, which leaves the reference bit alone) and the copy;
        bpf_percpu_hash_copy for per-CPU maps (every CPU's slot)."""
        elem = self._lookup(key)
        if elem is None:
            self._key_not_found()
        return b"".join(elem.value) if self.percpu else bytes(elem.value)

    def htab_map_lookup_and_delete_elem(self, key: bytes | None, flags: int) -> bytes:
        """htab_map_lookup_and_delete_elem (and its LRU and per-CPU variants)."""
        return self.htab_map_delete_elem(key, read=True)

    def htab_map_get_next_key(self, key: bytes | None) -> bytes:
        """htab_map_get_next_key: a missing key restarts from the first element.

        No bucket lock is taken (the kernel walks under RCU), so each bucket is read through
        a copy: a concurrent update or delete cannot shrink it between two reads.
        """
        elem = None if key is None else self.table.get(key)
        next_key = self.storage.next_key(elem, self._hash(key) & self.mask if elem else 0)
        if next_key is None:
            raise KernelError(errno.ENOENT, "no next key")
        return next_key

    def bpf_for_each_hash_elem(self, callback: Callable[[bytes, bytearray], int],
                               flags: int) -> int:
        """bpf_for_each_hash_elem: every element in bucket order (a bucket as it was when the
        walk reached it), this CPU's slot of a per-CPU value; stops when the callback
        returns non-zero. Returns the elements visited."""
        if flags:
            raise KernelError(errno.EINVAL, f"flags {flags:#x}: must be 0")
        visited = 0
        index = self.storage.next_nonempty(0)
        while index is not None:
            for elem in self.storage.bucket(index):
                visited += 1
                value = elem.value[self._current.cpu] if self.percpu else elem.value
                if callback(elem.key, value):
                    return visited
            index = self.storage.next_nonempty(index + 1)
        return visited

    def key_of_value(self, value: bytearray) -> bytes:
        """The key of the element whose value ``value`` is (a walk: bpf_timer_init only)."""
        for key, elem in list(self.table.items()):
            if elem.value is value:
                return key
        raise KernelError(errno.ENOENT, "the value is no element's")

    # -- bookkeeping --------------------------------------------------------------------------
    def sys_lookup_table(self) -> dict[bytes, bytearray] | None:
        """A live dict whose ``get(key)`` is what a syscall lookup returns (None: per-CPU, or a
        value with special fields, which a syscall lookup zeroes)."""
        return None if self.special_fields else self.values

    def elements(self) -> int:
        return len(self.table)

    def check_invariants(self) -> None:
        """Table, buckets, index and free lists agree; raises RuntimeError if not."""
        problems = self.storage.problems(self._hash)
        if len(self.table) > self.max_entries:
            problems.append(f"{len(self.table)} elements in a map of {self.max_entries}")
        if self.freelist is not None:
            free = self.freelist.available()
            if free + len(self.table) != self.max_entries:
                problems.append(f"{free} free + {len(self.table)} used != max_entries "
                                f"{self.max_entries}")
        if self.lru_list is not None:
            self.lru_list.check_invariants()
            used = self.lru_list.in_use()
            if used != len(self.table):
                problems.append(f"{used} LRU nodes in use but {len(self.table)} elements")
        if not self.prealloc and self.count != len(self.table):
            problems.append(f"element count {self.count} but {len(self.table)} elements")
        if problems:
            raise RuntimeError(f"{self.describe()}: " + "; ".join(problems))

    def mem_stats(self) -> dict:
        stats = super().mem_stats()
        stats.update(elements=len(self.table), max_entries=self.max_entries,
                     n_buckets=self.n_buckets, prealloc=self.prealloc)
        if self.freelist is not None:
            stats.update(self.freelist.stats())
        if self.lru_list is not None:
            stats.update(self.lru_list.stats())
        if self.ma is not None:
            stats.update(self.ma.stats())
        return stats

    def htab_map_free(self) -> None:
        """htab_map_free: give every element back; NO_PREALLOC maps destroy their allocator."""
        elems = self.storage.clear()
        for elem in elems:
            self.htab_put_fd_value(elem)
        if self.ma is not None:
            for elem in elems:
                self.ma.free(elem)
            self.count = 0
            self.ma.destroy()

    # struct bpf_map_ops htab_map_ops
    map_alloc_check = htab_map_alloc_check
    map_free = htab_map_free
    map_get_next_key = htab_map_get_next_key
    map_lookup_elem = htab_map_lookup_elem
    map_lookup_and_delete_elem = htab_map_lookup_and_delete_elem
    map_update_elem = htab_map_update_elem
    map_delete_elem = htab_map_delete_elem
    map_lookup_batch = HtabBatchOps.htab_map_lookup_batch
    map_lookup_and_delete_batch = HtabBatchOps.htab_map_lookup_and_delete_batch
    map_update_batch = generic_map_update_batch
    map_delete_batch = generic_map_delete_batch
    map_for_each_callback = bpf_for_each_hash_elem
    # syscall.c's reads and writes of a hash map
    bpf_map_copy_value = htab_map_copy_value
    bpf_map_update_value = htab_map_update_elem


@map_ops(MapType.PERCPU_HASH)
class HtabPercpuMap(HtabMap):
    """BPF_MAP_TYPE_PERCPU_HASH: values updated in place, one slot per CPU."""

    percpu = True

    def htab_percpu_map_lookup_elem(self, key: bytes) -> bytearray | None:
        """htab_percpu_map_lookup_elem: this CPU's slot."""
        cpu = self._current.cpu
        self._op_cost(cpu, "htab_map_lookup_elem", key, self._hash_cached(key))
        elem = self.table.get(key)
        if elem is None:
            return None
        self.access_stats.local[cpu] += 1  # a CPU's own slot lives on its node
        return elem.value[cpu]

    def htab_percpu_map_lookup_percpu_elem(self, key: bytes, cpu: int) -> bytearray | None:
        """htab_percpu_map_lookup_percpu_elem (bpf_map_lookup_percpu_elem): ``cpu``'s slot,
        None for a CPU the machine lacks; an LRU map's element gets its reference bit
        (htab_lru_percpu_map_lookup_percpu_elem)."""
        if cpu >= self.machine.num_cpus:
            return None
        current = self._current.cpu
        self._op_cost(current, "htab_map_lookup_elem", key, self._hash_cached(key))
        elem = self.table.get(key)
        if elem is None:
            return None
        if self.lru and not elem.ref:
            elem.ref = 1
        self.access_stats.access(current, self.machine.cpu_node[cpu])
        return elem.value[cpu]

    def htab_percpu_map_update_elem(self, key: bytes, value: bytes, flags: int) -> None:
        """htab_percpu_map_update_elem: a program writes its own CPU's slot
        (__htab_percpu_map_update_elem, onallcpus false)."""
        self.htab_map_update_elem_in_place(key, value, flags, onallcpus=False)

    def bpf_percpu_hash_update(self, key: bytes, value: bytes, flags: int) -> None:
        """bpf_percpu_hash_update: a syscall writes every CPU's slot."""
        self.htab_map_update_elem_in_place(key, value, flags, onallcpus=True)

    # struct bpf_map_ops htab_percpu_map_ops
    map_lookup_elem = htab_percpu_map_lookup_elem
    map_lookup_percpu_elem = htab_percpu_map_lookup_percpu_elem
    map_update_elem = htab_percpu_map_update_elem
    bpf_map_update_value = bpf_percpu_hash_update


@map_ops(MapType.LRU_HASH)
class HtabLruMap(HtabMap):
    """BPF_MAP_TYPE_LRU_HASH: a node comes from the LRU first, which may evict."""

    lru = True

    def htab_lru_map_delete_node(self, node: LruNode) -> bool:
        """htab_lru_map_delete_node: the eviction callback; unhash the node's key."""
        assert isinstance(node, HtabElem)
        cpu = self._current.cpu
        tlock = self._bucket_lock(node.hash)
        with self._lock(node.hash):
            self.timing.spin_lock(cpu, tlock)
            try:
                self._walk_cost(cpu, node.key, node.hash)
                if self.table.get(node.key) is not node:
                    return False
                self._unlink(node)
            finally:
                self.timing.spin_unlock(cpu, tlock)
        self.htab_put_fd_value(node)
        return True

    def prealloc_lru_pop(self) -> HtabElem:
        """prealloc_lru_pop: a free node, evicting if it must (ENOMEM when none)."""
        node = self.lru_list.pop_free()
        if node is None:
            self._no_free_node()
        return node  # type: ignore[return-value]

    @staticmethod
    def _no_free_node() -> NoReturn:
        raise KernelError(errno.ENOMEM, "the LRU has no free node (all are in use on "
                          "other CPUs)")

    def htab_lru_push_free(self, elem: HtabElem) -> None:
        self.htab_put_fd_value(elem)
        self.lru_list.push_free(elem)

    _release_elem = htab_lru_push_free

    def htab_lru_map_update_elem(self, key: bytes, value: bytes, flags: int) -> None:
        """htab_lru_map_update_elem."""
        self.check_update_flags(flags)
        hash_ = self._hash(key)
        cpu = self._current.cpu
        timing = self.timing
        timing.charge(cpu, "htab_lru_map_update_elem")
        timing.charge(cpu, "jhash_byte", self.key_size)
        node = self.prealloc_lru_pop()
        node.key = key
        node.hash = hash_
        self._fill_value(node, value, False, cpu)
        tlock = self._bucket_lock(hash_)
        with self._lock(hash_):
            timing.spin_lock(cpu, tlock)
            self._walk_cost(cpu, key, hash_)
            old = self.table.get(key)
            try:
                self.check_flags(old, flags)
            except KernelError as exc:
                error = exc
            else:
                error = None
                if old is None:
                    self._link(node)
                else:
                    node.ref = 1
                    self._replace(old, node)
            timing.spin_unlock(cpu, tlock)
        if error is not None:  # the node goes back, but what it evicted stays evicted
            self.lru_list.push_free(node)
            raise error
        if old is not None:
            self._release_elem(old)

    def htab_lru_map_lookup_elem(self, key: bytes) -> bytearray | None:
        """htab_lru_map_lookup_elem: sets the reference bit (the syscall read does not)."""
        elem = self._lookup(key)
        if elem is None:
            return None
        if not elem.ref:
            elem.ref = 1
            self.timing.access(self._current.cpu, elem.addr, write=True)
        return elem.value

    # struct bpf_map_ops htab_lru_map_ops
    map_lookup_elem = htab_lru_map_lookup_elem
    map_update_elem = htab_lru_map_update_elem
    bpf_map_update_value = htab_lru_map_update_elem


@map_ops(MapType.LRU_PERCPU_HASH)
class HtabLruPercpuMap(HtabLruMap):
    """BPF_MAP_TYPE_LRU_PERCPU_HASH: in-place updates; BPF_EXIST takes no node."""

    percpu = True

    def _htab_lru_percpu_map_update_elem(self, key: bytes, value: bytes, flags: int,
                                         onallcpus: bool) -> None:
        """__htab_lru_percpu_map_update_elem."""
        self.check_update_flags(flags)
        hash_ = self._hash(key)
        cpu = self._current.cpu
        self.timing.charge(cpu, "htab_lru_map_update_elem")
        self.timing.charge(cpu, "jhash_byte", self.key_size)
        node = self.prealloc_lru_pop() if flags != BPF_EXIST else None
        error: KernelError | None = None
        tlock = self._bucket_lock(hash_)
        with self._lock(hash_):
            self.timing.spin_lock(cpu, tlock)
            self._walk_cost(cpu, key, hash_)
            old = self.table.get(key)
            try:
                self.check_flags(old, flags)
            except KernelError as exc:
                error = exc
            else:
                if old is not None:
                    old.ref = 1
                    self._fill_value(old, value, onallcpus, cpu, init=False)
                else:
                    node.key = key
                    node.hash = hash_
                    self._fill_value(node, value, onallcpus, cpu)
                    self._link(node)
                    node = None
            self.timing.spin_unlock(cpu, tlock)
        if node is not None:
            self.lru_list.push_free(node)
        if error is not None:
            raise error

    def htab_lru_percpu_map_update_elem(self, key: bytes, value: bytes, flags: int) -> None:
        self._htab_lru_percpu_map_update_elem(key, value, flags, onallcpus=False)

    def bpf_percpu_hash_update(self, key: bytes, value: bytes, flags: int) -> None:
        """bpf_percpu_hash_update: a syscall writes every CPU's slot."""
        self._htab_lru_percpu_map_update_elem(key, value, flags, onallcpus=True)

    def htab_lru_percpu_map_lookup_elem(self, key: bytes) -> bytearray | None:
        cpu = self._current.cpu
        self._op_cost(cpu, "htab_map_lookup_elem", key, self._hash_cached(key))
        elem = self.table.get(key)
        if elem is None:
            return None
        if not elem.ref:
            elem.ref = 1
        self.access_stats.local[cpu] += 1
        return elem.value[cpu]

    # struct bpf_map_ops htab_lru_percpu_map_ops
    map_lookup_elem = htab_lru_percpu_map_lookup_elem
    map_lookup_percpu_elem = HtabPercpuMap.htab_percpu_map_lookup_percpu_elem
    map_update_elem = htab_lru_percpu_map_update_elem
    bpf_map_update_value = bpf_percpu_hash_update


@map_ops(MapType.HASH_OF_MAPS)
class HtabOfMaps(MapOfMapsMixin, HtabMap):
    """BPF_MAP_TYPE_HASH_OF_MAPS: a hash map whose 4-byte values hold inner maps.

    Each element's value holds the inner map's id (what a syscall lookup and the hash batch
    report, where the kernel keeps a pointer); ``inner_maps`` turns an id back into the map,
    counting how many elements hold it. Programs cannot store maps (the verifier refuses),
    so there is no map_update_elem; lookup_and_delete is ENOTSUPP.
    """

    fd_htab = True

    @classmethod
    def fd_htab_map_alloc_check(cls, attr: MapAttr, machine: Machine) -> None:
        if attr.value_size != 4:
            raise KernelError(errno.EINVAL, f"maps of maps hold 4-byte map fds: value_size must "
                                            f"be 4, got {attr.value_size}")
        cls.htab_map_alloc_check(attr, machine)

    def __init__(self, attr: MapAttr, machine: Machine, node: int, *,
                 inner_map: BpfMap) -> None:
        """htab_of_map_alloc."""
        self.inner_map_meta = bpf_map_meta_alloc(inner_map)
        super().__init__(attr, machine, node)
        self.inner_maps: dict[int, list] = {}  # id -> [map, elements holding it]
        # Elements of different buckets share an entry; taken inside a bucket lock.
        self.inner_maps_lock = threading.Lock()

    def bpf_fd_htab_map_update_elem(self, key: bytes, value: bytes, flags: int) -> None:
        """bpf_fd_htab_map_update_elem: resolve the fd first, then (6.16+) replace in place,
        atomic for lookups, so the element keeps its bucket position."""
        inner = self.map_fd_get_ptr(u32_key(value))
        with self.inner_maps_lock:
            self.inner_maps.setdefault(inner.id, [inner, 0])[1] += 1
        try:
            self.htab_map_update_elem_in_place(key, inner.id.to_bytes(4, "little"), flags,
                                               onallcpus=False)
        except KernelError:
            self._drop(inner.id)
            raise

    def htab_put_fd_value(self, elem: HtabElem) -> None:
        self._drop(u32_key(elem.value))

    def _drop(self, inner_id: int) -> None:
        with self.inner_maps_lock:
            held = self.inner_maps[inner_id]
            held[1] -= 1
            if not held[1]:
                del self.inner_maps[inner_id]
        self.map_fd_put_ptr(held[0])

    def htab_of_map_lookup_elem(self, key: bytes) -> BpfMap | None:
        """htab_of_map_lookup_elem: the inner map itself, for the program to use.

        Lock-free like the kernel's: an inner map replaced meanwhile may have lost its last
        holder between reading the value and finding the map; the value is then read again.
        """
        while True:
            value = self.htab_map_lookup_elem(key)
            if value is None:
                return None
            held = self.inner_maps.get(u32_key(value))
            if held is not None:
                return held[0]

    # struct bpf_map_ops htab_of_maps_map_ops
    map_alloc_check = fd_htab_map_alloc_check
    map_for_each_callback = None  # htab_of_maps_map_ops has none
    map_lookup_elem = htab_of_map_lookup_elem
    map_lookup_and_delete_elem = BpfMap.map_lookup_and_delete_elem
    map_update_elem = BpfMap.map_update_elem
    # syscall.c: bpf_fd_htab_map_lookup_elem reads the id the element holds
    bpf_map_update_value = bpf_fd_htab_map_update_elem
