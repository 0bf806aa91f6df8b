"""struct htab_elem and where a hash map's element memory comes from (kernel/bpf/hashtab.c:
prealloc_init, alloc_htab_elem, free_htab_elem, pcpu_init_value / pcpu_copy_value).

Rules this module keeps:
- Preallocated maps take elements from a ``PcpuFreelist`` (HASH keeps one spare element per
  CPU, ``extra_elems``, so a replacement never fails) or, for LRU maps, from the ``BpfLru``;
  NO_PREALLOC maps from ``BpfMemAlloc`` (or ``KmallocRcu``, the pre-6.1 design, when the
  system was made with ``htab_mem="call_rcu"``), counting elements against max_entries.
- Preallocated elements are created lazily: a free list holds a count of not-yet-materialised
  elements, which is unobservable.
- An element records the NUMA node of its memory; writing its value is an access, counted as
  a lookup's read is.
- Modeled time: preallocated elements sit in one region on the map's node (max_entries plus
  one spare per CPU, as prealloc_init allocates them); an allocator's new element is a
  kmalloc on the node asked for. Filling an element writes its line. The element count of a
  NO_PREALLOC map is a percpu_counter when max_entries / 2 > CPUs x 32 (6.1+), else one
  atomic_t on a line every CPU writes.
"""

from __future__ import annotations

import errno
import itertools
from typing import TYPE_CHECKING, Any, NoReturn

from ...accelerator import HostLock
from ...errors import KernelError
from ...uapi import NUMA_NO_NODE, round_up
from ..machine.counters import Counter, counter_array
from ..machine.memalloc import BpfMemAlloc, KmallocRcu
from ..machine.timing import SpinLock
from .bpf_lru_list import BpfLru, LruNode, lru_target_free
from .bpf_map import MapAttr, bpf_map_attr_numa_node
from .bpf_timer import bpf_obj_free_fields
from .percpu_freelist import PcpuFreelist

if TYPE_CHECKING:
    from ..machine.machine import Machine

HTAB_ELEM_SIZE = 48  # sizeof(struct htab_elem) on x86-64
PERCPU_COUNTER_BATCH = 32


class HtabElem(LruNode):
    """struct htab_elem (the LRU node is embedded, as in the kernel)."""

    __slots__ = ("key", "value", "hash", "node")

    def __init__(self, value: Any, node: int) -> None:
        super().__init__()
        self.key = b""
        self.value = value  # bytearray; per-CPU maps: one bytearray per CPU
        self.hash = 0
        self.node = node  # NUMA node of the element's memory


class HtabElemMemory:
    """The element memory of a hash map (``HtabMap`` mixes it in)."""

    # What the hash map provides.
    percpu: bool
    lru: bool
    fd_htab: bool
    prealloc: bool
    percpu_lru: bool
    max_entries: int
    key_size: int
    value_size: int
    slot_size: int
    numa_node: int
    machine: Machine
    access_stats: Any
    _current: Any
    timer_off: int
    # the NO_PREALLOC element count (inc_elem_count / dec_elem_count), in ``tally``
    count = Counter(0)

    def prealloc_init(self, attr: MapAttr, machine: Machine) -> None:
        """Where elements will come from: the LRU, a free list, or an allocator (placing
        what it allocates on the node the map asked for, else the allocating CPU's)."""
        self.count_lock = HostLock()
        self.tally = counter_array(1)  # ``count``'s, where the C hash map core counts
        timing = self.timing
        self.elem_size = round_up(self.key_size, 8) + HTAB_ELEM_SIZE + (
            8 if self.percpu else round_up(self.value_size, 8))
        self.use_percpu_counter = (machine.htab_mem != "call_rcu" and
                                   self.max_entries // 2 > machine.num_cpus
                                   * PERCPU_COUNTER_BATCH)
        self.count_addr = timing.alloc_region(64, self.numa_node)  # htab->count's line
        self.elem_slots = 0
        if self.prealloc:
            self.elem_slots = self.max_entries + machine.num_cpus
            self.elem_base = timing.alloc_region(self.elem_slots * self.elem_size,
                                                 self.numa_node)
        self._next_slot = itertools.count()

        self.freelist: PcpuFreelist | None = None
        self.lru_list: BpfLru | None = None
        self.ma: BpfMemAlloc | KmallocRcu | None = None
        # Per CPU, the spare elements a replacement takes (one each, as the kernel's
        # extra_elems); a second thread replacing on the same CPU finds none and makes one.
        self.extra_elems: list[list[HtabElem]] = []
        lists_timing = timing if timing.modeled else None  # the lists' idiom for "no costs"
        if self.lru:
            self.lru_list = BpfLru(machine.num_cpus, self.percpu_lru,
                                   self.htab_lru_map_delete_node,
                                   lru_target_free(self.max_entries, machine.num_cpus),
                                   machine.current_cpu, lists_timing, self.numa_node)
            self.lru_list.populate_lazy(self.max_entries, self._new_elem_on_home)
        elif self.prealloc:
            self.freelist = PcpuFreelist(machine.num_cpus, machine.current_cpu, lists_timing)
            self.freelist.populate_lazy(self.max_entries, self._new_elem_on_home)
            if self.htab_has_extra_elems():  # replacing allocates: one spare per CPU makes a
                # replacement in a full map succeed
                self.extra_elems = [[self._new_elem_on_home()]
                                    for _ in range(machine.num_cpus)]
        else:
            self.ma = self._new_mem_alloc(machine, bpf_map_attr_numa_node(attr))

    def htab_has_extra_elems(self) -> bool:
        """Types that replace an element with a new one (the others update in place)."""
        return not (self.percpu or self.lru or self.fd_htab)

    def _new_mem_alloc(self, machine: Machine, node: int) -> BpfMemAlloc | KmallocRcu:
        if machine.htab_mem == "call_rcu":
            return KmallocRcu(machine, node, self._new_elem, self.elem_size)
        return BpfMemAlloc(machine, self.elem_size, self._new_elem,
                           free_through_rcu=machine.htab_mem == "bpf_mem_alloc_call_rcu")

    def _new_value(self) -> Any:
        if self.percpu:
            return [bytearray(self.slot_size) for _ in range(self.machine.num_cpus)]
        return bytearray(self.value_size)

    def _new_elem(self, node: int) -> HtabElem:
        """An allocator's new element: a kmalloc on ``node`` (the allocating CPU's if none)."""
        if node == NUMA_NO_NODE:
            node = self.machine.numa_node_id()
        elem = HtabElem(self._new_value(), node)
        elem.addr = self.timing.slub.kmalloc(self._current.cpu, self.elem_size, node, account=True)
        return elem

    def _new_elem_on_home(self) -> HtabElem:
        """A preallocated element: the next slot of the map's element region."""
        elem = HtabElem(self._new_value(), self.numa_node)
        slot = next(self._next_slot)
        elem.addr = (self.elem_base + slot * self.elem_size if slot < self.elem_slots
                     else self.timing.slub.kmalloc(self._current.cpu, self.elem_size,
                                                   self.numa_node, account=True))
        return elem

    def count_elem(self, delta: int) -> None:
        """inc_elem_count / dec_elem_count's cost: a percpu_counter stays on this CPU; an
        atomic_t is a locked add on the map's shared line."""
        if not self.use_percpu_counter:
            self.timing.atomic(self._current.cpu, self.count_addr)

    def new_bucket_lock(self, addr: int) -> SpinLock:
        return self.timing.new_lock(addr)

    def _fill_value(self, elem: HtabElem, value: bytes, onallcpus: bool, cpu: int,
                    init: bool = True) -> None:
        """pcpu_init_value (``init``: a new element) or pcpu_copy_value (an existing one), by
        ``cpu`` (the current CPU, which the caller has read).

        From the syscall (``onallcpus``) every CPU's slot is written; from a program only the
        current CPU's, and a new element gets zeros on the other CPUs (5.11+).
        """
        if self.timing.modeled:
            self.timing.access(cpu, elem.addr, write=True)
        if not self.percpu:
            # Writing the element is an access to its memory, like a lookup's read.
            self.access_stats.access(cpu, elem.node)
            elem.value[:] = value
        elif onallcpus:
            size = self.slot_size
            for slot_cpu, slot in enumerate(elem.value):
                slot[:] = value[slot_cpu * size:(slot_cpu + 1) * size]
        else:
            elem.value[cpu][:self.value_size] = value[:self.value_size]
            if init:
                zeros = bytes(self.slot_size)
                for other, slot in enumerate(elem.value):
                    if other != cpu:
                        slot[:] = zeros

    def alloc_htab_elem(self, key: bytes, value: bytes, hash_: int, old: HtabElem | None,
                        onallcpus: bool, cpu: int) -> HtabElem:
        """alloc_htab_elem on ``cpu`` (the current CPU): E2BIG when full (new keys only),
        ENOMEM when out of memory."""
        if self.prealloc:
            if old is not None and self.extra_elems:
                # The kernel swaps its CPU's spare for old with preemption off; here several
                # threads may share an emulated CPU, so the spare is taken now (list.pop is
                # atomic) and old is given back once unlinked (htab_map_update_elem).
                try:
                    elem = self.extra_elems[cpu].pop()
                except IndexError:
                    elem = self._new_elem_on_home()
            else:
                elem = self.freelist.pop(cpu)
                if elem is None:
                    raise KernelError(errno.E2BIG, f"the map is full ({self.max_entries} "
                                      "elements)")
        else:
            with self.count_lock:
                if self.count >= self.max_entries and old is None:
                    raise KernelError(errno.E2BIG, f"the map is full ({self.max_entries} "
                                      "elements)")
                self.count += 1
            self.count_elem(+1)
            elem = self.ma.alloc()
            if elem is None:
                self._alloc_failed()
        elem.key = key
        elem.hash = hash_
        self._fill_value(elem, value, onallcpus, cpu)
        return elem

    def _alloc_failed(self) -> NoReturn:
        """The allocator had no element: the one counted for it is not made (ENOMEM)."""
        with self.count_lock:
            self.count -= 1
        raise KernelError(errno.ENOMEM, "bpf_mem_alloc had no free element")

    def free_htab_elem(self, elem: HtabElem) -> None:
        """free_htab_elem: back to the free list, or to the allocator."""
        self.htab_put_fd_value(elem)
        if self.prealloc:
            self.freelist.push(elem, self._current.cpu)
        else:
            with self.count_lock:
                self.count -= 1
            self.count_elem(-1)
            self.ma.free(elem)

    def htab_put_fd_value(self, elem: HtabElem) -> None:
        """An element leaves the table: its timer is cancelled and freed; fd-holding
        subclasses drop their reference here."""
        if self.timer_off >= 0:
            bpf_obj_free_fields(elem.value)
