"""pcpu_freelist (kernel/bpf/percpu_freelist.c): preallocated objects on per-CPU free lists.

Rules this module keeps:
- ``populate`` spreads the objects over the CPUs' lists, ``nr / ncpu + 1`` per CPU in CPU
  order, as pcpu_freelist_populate does.
- ``pop`` takes from the current CPU's list, else walks the other CPUs in order (wrapping)
  and takes from the first non-empty one (a steal); ``None`` when every list is empty.
- ``push`` puts an object on the current CPU's list; it is reusable at once (preallocated
  hash elements are recycled without waiting for RCU, as in the kernel).
- The lists take no host lock: a pop or push is one ``list.pop`` or ``list.append``, atomic
  on its own; each CPU's count of objects not created yet has its own lock.
- Modeled time (``timing``, when given): a pop or push takes that CPU's lock (a spinlock on a
  line of the CPU's node) and touches the object's line (the list link lives in it); an
  object's memory is its ``addr`` attribute where it has one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..machine.counters import Counter, counter_array

if TYPE_CHECKING:
    from ..machine.timing import Timing


class PcpuFreelist:
    __slots__ = ("ncpus", "current_cpu", "timing", "tlocks", "lists", "unmade", "factory",
                 "unmade_locks", "tally")
    # in ``tally``, where the C hash map core (pybpf._cache_model) counts pops and pushes
    pops, pushes, steals, empty_pops = (Counter(i) for i in range(4))

    def __init__(self, ncpus: int, current_cpu: Callable[[], int],
                 timing: Timing | None = None) -> None:
        self.ncpus = ncpus
        self.current_cpu = current_cpu
        self.timing = timing
        self.tlocks = [] if timing is None else [
            timing.new_lock(timing.alloc_region(64, timing.cpu_node[cpu]))
            for cpu in range(ncpus)]
        self.lists: list[list[Any]] = [[] for _ in range(ncpus)]
        self.unmade = [0] * ncpus  # objects of each CPU's share not created yet
        self.factory: Callable[[], Any] | None = None
        self.unmade_locks = [threading.Lock() for _ in range(ncpus)]
        self.tally = counter_array(4)

    def populate(self, objects: list[Any]) -> None:
        per_cpu = len(objects) // self.ncpus + 1
        for i, obj in enumerate(objects):
            self.lists[i // per_cpu].append(obj)

    def populate_lazy(self, count: int, factory: Callable[[], Any]) -> None:
        """Like ``populate`` with ``count`` objects that ``factory`` makes when first popped.

        Which object a pop returns is unobservable, so objects that were never handed out
        need not exist yet; each CPU's share is kept as a count.
        """
        per_cpu = count // self.ncpus + 1
        self.factory = factory
        for cpu in range(self.ncpus):
            self.unmade[cpu] = max(0, min(per_cpu, count - cpu * per_cpu))

    def pop(self, cpu: int | None = None) -> Any | None:
        """An object from ``cpu``'s list (default: the current CPU's), else a steal."""
        if cpu is None:
            cpu = self.current_cpu()
        orig = cpu
        while True:
            lst = self.lists[cpu]
            if lst or self.unmade[cpu]:
                try:
                    obj = lst.pop()
                except IndexError:  # taken meanwhile, or never made: make one if any is left
                    with self.unmade_locks[cpu]:
                        if self.unmade[cpu]:
                            self.unmade[cpu] -= 1
                            obj = self.factory()
                        else:
                            obj = None
                if obj is not None:
                    self.pops += 1
                    if cpu != orig:
                        self.steals += 1
                    if self.timing is not None:
                        self._cost(orig, cpu, obj)
                    return obj
            cpu = (cpu + 1) % self.ncpus
            if cpu == orig:
                self.empty_pops += 1
                return None

    def push(self, obj: Any, cpu: int | None = None) -> None:
        """``obj`` onto ``cpu``'s list (default: the current CPU's)."""
        if cpu is None:
            cpu = self.current_cpu()
        self.lists[cpu].append(obj)
        self.pushes += 1
        if self.timing is not None:
            self._cost(cpu, cpu, obj)

    def _cost(self, cpu: int, owner: int, obj: Any) -> None:
        """``cpu`` took ``owner``'s list lock and moved ``obj`` (modeled time)."""
        self.timing.locked_access(cpu, self.tlocks[owner], getattr(obj, "addr", 0))

    def free_counts(self) -> list[int]:
        """Objects on each CPU's list (those not created yet included)."""
        return [len(lst) + unmade for lst, unmade in zip(self.lists, self.unmade, strict=True)]

    def available(self) -> int:
        return sum(self.free_counts())

    def stats(self) -> dict[str, int]:
        return {"freelist_pops": self.pops, "freelist_pushes": self.pushes,
                "freelist_steals": self.steals, "freelist_empty_pops": self.empty_pops,
                "freelist_free": self.available()}
