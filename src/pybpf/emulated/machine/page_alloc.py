"""The page allocator under the slab (mm/page_alloc.c): where a new slab's pages come from and
where an empty slab's go, and the machine's address layout.

Rules this module keeps:
- An address carries its NUMA node in its top bits (``addr_node``); memory comes in pages of
  ``PAGE`` bytes.
- A CPU's per-CPU lists hand out the pages freed last first, so an empty slab given back is
  the next new one, its lines still cached. An empty list takes a batch of ``PCP_BATCH`` pages
  from the node's buddy lists (rmqueue_bulk, last freed first); a list past ``PCP_HIGH`` pages
  gives a batch of its oldest back (free_pcppages_bulk). Fresh memory comes only when both
  are empty. Pages of one slab size are reused by that size only (no split or merge).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

NODE_SHIFT = 56  # an address's NUMA node: addr >> NODE_SHIFT
PAGE = 4096
# A zone's per-CPU page lists move pages to and from the buddy lists PCP_BATCH at a time
# (zone_batchsize: 1/1024 of the zone, at most 1 MiB, quartered and made 2^n - 1: 63 on any
# zone of 1 GiB or more) and hold at most PCP_HIGH (zone_highsize's floor, batch << 2; larger
# zones may set it higher).
PCP_BATCH = 63
PCP_HIGH = PCP_BATCH << 2


def addr_node(addr: int) -> int:
    return addr >> NODE_SHIFT


class PageAllocator:
    """Free pages of one machine, last freed first: per CPU (its per-CPU lists: the pages
    they hold and, per (node, bytes), the regions) and per node (the buddy lists).
    ``fresh(nbytes, node)`` gives memory no CPU has touched (``Timing.alloc_region``)."""

    def __init__(self, num_cpus: int, fresh: Callable[[int, int], int]) -> None:
        self._fresh = fresh
        self._lock = threading.Lock()  # emulated CPUs may run as host threads
        self.pcp_pages = [0] * num_cpus
        self._pcp: list[dict[tuple[int, int], list[int]]] = [{} for _ in range(num_cpus)]
        self._buddy: dict[tuple[int, int], list[int]] = {}

    def alloc_pages(self, cpu: int, node: int, nbytes: int) -> int:
        """``nbytes`` of pages on ``node`` for ``cpu``: its per-CPU lists' last freed, after
        a batch from the buddy lists when they are empty, else fresh memory."""
        key = (node, nbytes)
        with self._lock:
            pcp = self._pcp[cpu].setdefault(key, [])
            if not pcp:
                buddy = self._buddy.get(key)
                while buddy and len(pcp) * nbytes < PCP_BATCH * PAGE:
                    pcp.insert(0, buddy.pop())
                self.pcp_pages[cpu] += len(pcp) * nbytes // PAGE
            if pcp:
                self.pcp_pages[cpu] -= nbytes // PAGE
                return pcp.pop()
        return self._fresh(nbytes, node)

    def free_pages(self, cpu: int, start: int, nbytes: int) -> None:
        """free_unref_page: onto ``cpu``'s per-CPU lists; past PCP_HIGH pages a batch of the
        oldest goes back to the buddy lists (free_pcppages_bulk)."""
        with self._lock:
            self._pcp[cpu].setdefault((addr_node(start), nbytes), []).append(start)
            self.pcp_pages[cpu] += nbytes // PAGE
            if self.pcp_pages[cpu] <= PCP_HIGH:
                return
            freed = 0
            for key, regions in self._pcp[cpu].items():
                while regions and freed < PCP_BATCH:
                    self._buddy.setdefault(key, []).append(regions.pop(0))
                    freed += key[1] // PAGE
            self.pcp_pages[cpu] -= freed
