"""Element memory for maps that do not preallocate: bpf_mem_alloc (kernel/bpf/memalloc.c,
Linux 6.1+) and, for comparison, the design it replaced (kmalloc plus one call_rcu per
freed element) and the step between them.

Rules this module keeps:
- ``BpfMemAlloc``: one cache per CPU. ``alloc`` pops from the current CPU's free list;
  when fewer than ``low`` objects remain the refill (irq_work in the kernel, run at once
  here) takes a batch: first objects parked for RCU (``free_by_rcu_ttrace``, then
  ``waiting_for_gp_ttrace``: they are type-stable, so the kernel reuses them), then new ones.
  ``free`` pushes onto the current CPU's list (reusable at once); above ``high`` the
  excess down to ``(low + high) / 2`` is moved to ``free_by_rcu_ttrace`` and handed to RCU
  with a single ``call_rcu`` per batch (none while one is in flight: what is parked then
  waits for the next free_bulk); after the grace period what was not reused is freed.
- ``BpfMemAlloc(free_through_rcu=True)``: the hash map of the 2022 series before "bpf:
  Optimize call_rcu in non-preallocated hash map" (0fd7c5d43339, patch 7 of 16): ``free``
  first waits a grace period (one ``call_rcu`` per object, whose callback does the
  unit_free), and the caches are the allocator as patch 1 (7c8199e24fa0) made it: a refill
  always takes new objects (alloc_bulk called ``__alloc`` for each), and free_bulk gives what
  it trims straight back to the slab (``free_one``): the grace period has already passed.
  Parking trimmed objects for a ``call_rcu`` per batch came with patch 9, when the
  per-object ``call_rcu`` was gone.
- ``KmallocRcu``: every ``alloc`` is a new object, every ``free`` one ``call_rcu`` whose
  callback frees it; nothing is reused.
- All count what they do (``stats()``): ``allocated`` (new objects), ``freed`` (objects
  given back for good), ``reused``, ``call_rcu``, ``refills``/``bulk_allocated``
  (batches and objects taken in bulk), ``free_bulk``, ``cache_hits`` ... The counts are the
  mechanism the 2022 patch changed.
- Modeled time (the machine's ``timing``): unit_alloc and unit_free cost ``bpf_mem_cache`` and
  touch the object's line, as every llist operation on an object does (the list's node is in
  the object: the refill's, free_bulk's and do_call_rcu's moves too); a refill or a free_bulk
  runs as an irq_work on the CPU; new objects come from the ``new_object`` factory, which
  charges their kmalloc; objects given back for good are kfree'd on the CPU whose callback
  frees them. Both are accounted to the map's memory cgroup (alloc_bulk's __GFP_ACCOUNT; the
  map's objcg since 5.11), as every element is. An object's memory is its ``addr`` attribute
  where it has one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from ...accelerator import HostLock
from .counters import Counter, counter_array
from .machine import Machine

LLIST_NODE_SIZE = 8
# EmulatedSystem(htab_mem=...): how NO_PREALLOC hash maps get element memory.
HTAB_MEM_DESIGNS = ("bpf_mem_alloc", "bpf_mem_alloc_call_rcu", "call_rcu")


def addr_of(obj: Any) -> int:
    """The modeled address of an allocator's object (0: not placed, free to touch)."""
    return getattr(obj, "addr", 0)


def watermarks(unit_size: int) -> tuple[int, int, int]:
    """(low, high, batch) as prefill_mem_cache / init_refill_work compute them."""
    if unit_size <= 256:
        low, high = 32, 96
    else:
        low = max(32 * 256 // unit_size, 1)
        high = max(96 * 256 // unit_size, 3)
    batch = max((high - low) // 4 * 3, 1)
    return low, high, batch


def _pop_up_to(objects: list[Any], n: int) -> list[Any]:
    """Up to ``n`` objects off the end of ``objects``, last first (as llist_del_first)."""
    if n <= 0 or not objects:
        return []
    taken = objects[-n:][::-1]
    del objects[-n:]
    return taken


class _Cache:
    """struct bpf_mem_cache of one CPU."""

    # The kernel's _ttrace lists wait for an RCU Tasks Trace grace period (sleepable
    # programs); this machine has one RCU flavour, so they wait for its grace period.
    __slots__ = ("cpu", "free", "free_by_rcu_ttrace", "waiting_for_gp_ttrace",
                 "call_rcu_ttrace_in_progress", "lock")

    def __init__(self, cpu: int) -> None:
        self.cpu = cpu
        self.free: list[Any] = []
        self.free_by_rcu_ttrace: list[Any] = []
        self.waiting_for_gp_ttrace: list[Any] = []
        self.call_rcu_ttrace_in_progress = False
        self.lock = HostLock()


class _Counters:
    # in ``tally``, where the C allocator (pybpf._cache_model) counts: new objects created,
    # objects given back for good, handed out again from the RCU lists, call_rcu
    # invocations, unit_alloc and unit_free calls, allocations that found no object, freed
    # memory whose RCU callback has not run yet (and its most), new objects made while freed
    # ones waited for RCU; then allocations served from a per-CPU cache
    NAMES = ("allocated", "freed", "reused", "call_rcu", "alloc_calls", "free_calls",
             "alloc_failures", "held_by_rcu_bytes", "max_held_by_rcu_bytes",
             "kmalloc_while_held")
    (allocated, freed, reused, call_rcu, alloc_calls, free_calls, alloc_failures,
     held_by_rcu_bytes, max_held_by_rcu_bytes, kmalloc_while_held,
     cache_hits) = (Counter(i) for i in range(len(NAMES) + 1))
    __slots__ = ("tally", "_held_samples")

    def __init__(self) -> None:
        self.tally = counter_array(len(self.NAMES) + 1)
        self._held_samples: list[tuple[float, int]] = []

    def as_dict(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in self.NAMES}

    def hold(self, nbytes: int, at: float, every: float) -> None:
        """Freed memory handed to (positive) or released by (negative) an RCU callback at
        modeled time ``at``; sampled at most once per ``every`` ns (``held_over_time``)."""
        self.held_by_rcu_bytes += nbytes
        self.max_held_by_rcu_bytes = max(self.max_held_by_rcu_bytes, self.held_by_rcu_bytes)
        samples = self._held_samples
        if not samples or at >= samples[-1][0] + every:
            samples.append((at, self.held_by_rcu_bytes))

    def held_over_time(self) -> list[tuple[float, int]]:
        """(modeled ns, bytes held by pending RCU callbacks), about one sample a tick."""
        return list(self._held_samples)


class BpfMemAlloc:
    """bpf_mem_alloc in fixed-size mode: per-CPU caches with watermarks and batching."""

    design = "bpf_mem_alloc"

    def __init__(self, machine: Machine, unit_size: int, new_object: Callable[[int], Any],
                 free_through_rcu: bool = False) -> None:
        self.machine = machine
        self.timing = machine.timing
        self.free_through_rcu = free_through_rcu
        if free_through_rcu:
            self.design = "bpf_mem_alloc_call_rcu"
        self.unit_size = unit_size + LLIST_NODE_SIZE
        self.low, self.high, self.batch = watermarks(self.unit_size)
        self.new_object = new_object
        self.caches = [_Cache(cpu) for cpu in range(machine.num_cpus)]
        self.counters = _Counters()
        self.refills = 0
        self.bulk_allocated = 0
        self.free_bulk_runs = 0
        self._count_lock = HostLock()
        prefill = 4 if self.unit_size <= 256 else 1
        for cache in self.caches:
            self._alloc_bulk(cache, prefill)
        self.refills = 0  # the prefill is not a refill
        self.bulk_allocated = 0

    def _alloc_bulk(self, cache: _Cache, count: int) -> None:
        """alloc_bulk: reuse objects parked for RCU (the 2022 allocator parks none), then
        allocate new ones on the CPU's node."""
        with cache.lock:
            taken = _pop_up_to(cache.free_by_rcu_ttrace, count)
            in_flight = _pop_up_to(cache.waiting_for_gp_ttrace, count - len(taken))
            taken += in_flight
        reused = len(taken)
        node = self.machine.cpu_node[cache.cpu]
        fresh = [self.new_object(node) for _ in range(count - reused)]
        self._touch(cache.cpu, taken + fresh)  # __llist_add onto free_llist
        with cache.lock:
            cache.free.extend(taken)
            cache.free.extend(fresh)
        with self._count_lock:
            self._hold(cache.cpu, -len(in_flight) * self.unit_size)  # reused before the callback
            if self.counters.held_by_rcu_bytes and fresh:
                self.counters.kmalloc_while_held += len(fresh)
            self.counters.reused += reused
            self.counters.allocated += len(fresh)
            self.refills += 1
            self.bulk_allocated += count

    def _free_bulk(self, cache: _Cache) -> None:
        """free_bulk: trim the free list to the middle watermark; park what it trims for RCU,
        or, in the 2022 allocator, give it back to the slab at once."""
        target = (self.low + self.high) // 2
        with cache.lock:
            excess = len(cache.free) - target
            if excess <= 0:
                return
            trimmed = cache.free[-excess:]
            del cache.free[-excess:]
            if not self.free_through_rcu:
                cache.free_by_rcu_ttrace.extend(trimmed)
        self._touch(cache.cpu, trimmed)  # __llist_del_first, then free_one or enque_to_free
        with self._count_lock:
            self.free_bulk_runs += 1
        if self.free_through_rcu:
            self._free_all(cache.cpu, trimmed)
        else:
            self._do_call_rcu(cache)

    def _touch(self, cpu: int, objects: list[Any]) -> None:
        """An llist operation on each object: its node (the list's next pointer) is in it."""
        access = self.timing.access
        for obj in objects:
            access(cpu, addr_of(obj), write=True)

    def _hold(self, cpu: int, nbytes: int) -> None:  # with self._count_lock held
        if nbytes:
            self.counters.hold(nbytes, self.timing.clock[cpu], self.timing.tick)

    def _do_call_rcu(self, cache: _Cache) -> None:
        """do_call_rcu_ttrace: one callback per batch; none while one is in flight."""
        with cache.lock:
            if cache.call_rcu_ttrace_in_progress:
                return
            cache.call_rcu_ttrace_in_progress = True
            parked = cache.free_by_rcu_ttrace[:]
            cache.waiting_for_gp_ttrace.extend(parked)
            cache.free_by_rcu_ttrace.clear()
            nbytes = len(cache.waiting_for_gp_ttrace) * self.unit_size
        # llist_for_each_safe moves each parked object onto waiting_for_gp_ttrace
        self._touch(cache.cpu, parked)
        with self._count_lock:
            self.counters.call_rcu += 1
            self._hold(cache.cpu, nbytes)
        # call_rcu_tasks_trace, whose grace period implies an RCU one (rcu_trace_implies_rcu_gp
        # in the default build); the machine has one RCU flavour
        self.machine.rcu.call_rcu(lambda: self._free_rcu(cache), nbytes)

    def _free_rcu(self, cache: _Cache) -> None:
        """__free_rcu: after the grace period, free what was not reused meanwhile.

        Objects parked while this grace period ran stay in ``free_by_rcu_ttrace`` (reusable
        by a refill) until the next free_bulk hands them to RCU: the callback does not
        queue another one.
        """
        with cache.lock:
            gone = cache.waiting_for_gp_ttrace[:]
            cache.waiting_for_gp_ttrace.clear()
            cache.call_rcu_ttrace_in_progress = False
        cpu = self.machine.current.cpu
        with self._count_lock:
            self._hold(cpu, -len(gone) * self.unit_size)
        self._free_all(cpu, gone)

    def _free_all(self, cpu: int, objects: list[Any]) -> None:
        """free_all: each object back to the slab (kfree; its charge back to the memcg)."""
        with self._count_lock:
            self.counters.freed += len(objects)
        for obj in objects:
            self.timing.slub.kfree(cpu, addr_of(obj), account=True)

    def alloc(self) -> Any | None:
        """unit_alloc on the current CPU: an object, or None (the caller answers ENOMEM)."""
        cpu = self.machine.current.cpu
        cache = self.caches[cpu]
        with cache.lock:
            obj = cache.free.pop() if cache.free else None
            left = len(cache.free)
        self.timing.charge(cpu, "bpf_mem_cache")
        with self._count_lock:
            self.counters.alloc_calls += 1
            if obj is None:
                self.counters.alloc_failures += 1
            else:
                self.counters.cache_hits += 1
        if obj is not None:
            self.timing.access(cpu, addr_of(obj), write=True)  # llist_del_first
        if left < self.low:
            self.refill(cache)
        return obj

    def refill(self, cache: _Cache) -> None:
        """bpf_mem_refill, the irq_work unit_alloc queues below the low mark: a batch."""
        with self.timing.in_context(cache.cpu, "hardirq"):
            self.timing.charge(cache.cpu, "irq_work")
            self._alloc_bulk(cache, self.batch)

    def free(self, obj: Any) -> None:
        """unit_free on the current CPU: reusable at once; trimmed above the high mark. With
        ``free_through_rcu`` the unit_free waits for a grace period first."""
        with self._count_lock:
            self.counters.free_calls += 1
        if self.free_through_rcu:
            with self._count_lock:
                self.counters.call_rcu += 1
                self._hold(self.machine.current.cpu, self.unit_size)
            self.machine.rcu.call_rcu(lambda: self._unit_free_after_gp(obj), self.unit_size)
        else:
            self._unit_free(obj)

    def _unit_free_after_gp(self, obj: Any) -> None:
        with self._count_lock:
            self._hold(self.machine.current.cpu, -self.unit_size)
        self._unit_free(obj)

    def _unit_free(self, obj: Any) -> None:
        cpu = self.machine.current.cpu
        cache = self.caches[cpu]
        with cache.lock:
            cache.free.append(obj)
            over = len(cache.free) > self.high
        self.timing.charge(cpu, "bpf_mem_cache")
        self.timing.access(cpu, addr_of(obj), write=True)  # llist_add
        if over:
            self.trim(cache)

    def trim(self, cache: _Cache) -> None:
        """bpf_mem_free_bulk, the irq_work unit_free queues above the high mark."""
        with self.timing.in_context(cache.cpu, "hardirq"):
            self.timing.charge(cache.cpu, "irq_work")
            self._free_bulk(cache)

    def destroy(self) -> None:
        """bpf_mem_alloc_destroy: everything cached is freed after a grace period (deferred,
        as the kernel's free_mem_alloc work does, so a reader still inside a program keeps
        its element)."""
        self.machine.rcu.call_rcu(self._drain)

    def _drain(self) -> None:
        total = 0
        for cache in self.caches:
            with cache.lock:
                total += (len(cache.free) + len(cache.free_by_rcu_ttrace)
                          + len(cache.waiting_for_gp_ttrace))
                cache.free.clear()
                cache.free_by_rcu_ttrace.clear()
                cache.waiting_for_gp_ttrace.clear()
        with self._count_lock:
            self.counters.freed += total

    def stats(self) -> dict[str, int | str]:
        out: dict[str, int | str] = {"mem_design": self.design}
        out.update(self.counters.as_dict())
        out.update(refills=self.refills, bulk_allocated=self.bulk_allocated,
                   free_bulk=self.free_bulk_runs, cache_hits=self.counters.cache_hits,
                   cached=sum(len(c.free) for c in self.caches),
                   waiting_for_rcu=sum(len(c.free_by_rcu_ttrace) + len(c.waiting_for_gp_ttrace)
                                       for c in self.caches),
                   low_watermark=self.low, high_watermark=self.high, batch=self.batch)
        return out


class KmallocRcu:
    """The pre-6.1 design: kmalloc per element, one call_rcu per freed element, no reuse."""

    design = "call_rcu"

    def __init__(self, machine: Machine, node: int, new_object: Callable[[int], Any],
                 unit_size: int = 0) -> None:
        self.machine = machine
        self.node = node  # kmalloc_node(..., map numa_node): the map's node
        self.new_object = new_object
        self.unit_size = unit_size
        self.counters = _Counters()
        self._lock = threading.Lock()

    def alloc(self) -> Any:
        obj = self.new_object(self.node)
        with self._lock:
            self.counters.alloc_calls += 1
            self.counters.allocated += 1
            if self.counters.held_by_rcu_bytes:
                self.counters.kmalloc_while_held += 1
        return obj

    def _hold(self, nbytes: int) -> None:  # with self._lock held
        timing = self.machine.timing
        self.counters.hold(nbytes, timing.clock[self.machine.current.cpu], timing.tick)

    def _free_rcu(self, obj: Any) -> None:
        """The callback: kfree, after a grace period, on the CPU that queued it (it reads the
        rcu_head inside the object)."""
        with self._lock:
            self.counters.freed += 1
            self._hold(-self.unit_size)
        cpu = self.machine.current.cpu
        self.machine.timing.access(cpu, addr_of(obj), write=True)
        self.machine.timing.slub.kfree(cpu, addr_of(obj), account=True)

    def free(self, obj: Any) -> None:
        with self._lock:
            self.counters.free_calls += 1
            self.counters.call_rcu += 1
            self._hold(self.unit_size)
        self.machine.rcu.call_rcu(lambda: self._free_rcu(obj), self.unit_size)

    def destroy(self) -> None:
        """Nothing is cached; callbacks already queued free their elements in time."""

    def stats(self) -> dict[str, int | str]:
        out: dict[str, int | str] = {"mem_design": self.design}
        out.update(self.counters.as_dict())
        c = self.counters
        out["waiting_for_rcu"] = c.call_rcu - c.freed
        return out
