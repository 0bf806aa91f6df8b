"""SLUB (mm/slub.c): the slab allocator under kmalloc, kmem_cache_alloc and their frees,
with what each costs in the machine's modeled time.

Rules this module keeps:
- A cache (``KmemCache``) has the kernel's geometry for its object size and CPU count. A CPU
  allocates from its own slab, last freed first; when it is used up ``___slab_alloc`` takes a
  slab off the CPU's partial list, else the node's (under ``list_lock``), else a new one from
  the page allocator (``page_alloc``).
- A free into the CPU's own slab is the fast path; into any other it is ``__slab_free``
  (``slab_free_remote`` and a cmpxchg on the struct slab): a slab that was full goes on the
  freeing CPU's partial list; a full partial list moves to the node's, where empty slabs past
  ``min_partial`` go back to the page allocator (``page_free``). ``kmem_cache_free_bulk``
  gives each slab its group of objects at once.
- The free list lives in the free objects: taking an object reads its line, giving one back
  writes it. The fast-path costs were measured on hot objects; a cold one's stall is the
  access's.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Any, Protocol

from .page_alloc import NODE_SHIFT, PAGE, PageAllocator


class CostModel(Protocol):
    """What the slab needs of the machine's cost model (timing.Timing, which owns it)."""

    clock: list[float]
    cpu_node: list[int]

    def charge(self, cpu: int, event: str, n: int = 1) -> None: ...
    def access(self, cpu: int, addr: int, write: bool = False) -> float: ...
    def atomic(self, cpu: int, addr: int) -> None: ...
    def new_lock(self, addr: int) -> Any: ...
    def spin_lock(self, cpu: int, lock: Any) -> None: ...
    def spin_unlock(self, cpu: int, lock: Any) -> None: ...
    def alloc_region(self, size: int, node: int) -> int: ...

KMALLOC_SIZES = (8, 16, 32, 64, 96, 128, 192, 256, 512, 1024, 2048, 4096, 8192)
SLAB_MAX_ORDER = 3  # PAGE_ALLOC_COSTLY_ORDER: the largest slab calculate_order picks
MEMMAP_OFFSET = 1 << (NODE_SHIFT - 1)  # where a node's struct slabs (the vmemmap) lie


def kmalloc_size(size: int) -> int:
    """The kmalloc cache an object of ``size`` bytes comes from (larger: whole pages)."""
    i = bisect.bisect_left(KMALLOC_SIZES, size)
    return KMALLOC_SIZES[i] if i < len(KMALLOC_SIZES) else -(-size // PAGE) * PAGE


class KmemCache:
    """A SLUB cache (mm/slub.c) of one size class on one node.

    Its geometry follows the kernel's rules: a slab is the smallest order up to
    PAGE_ALLOC_COSTLY_ORDER (3) holding ``4 * (fls(nr_cpu_ids) + 1)`` objects
    (calculate_order's min_objects); a CPU keeps up to ``cpu_partial_slabs`` partial slabs
    (set_cpu_partial: 120 objects below 256 bytes, 52 below 1024, 24 below a page, 6 above,
    twice that in slabs); a node keeps ``min_partial`` (ilog2(size) / 2, within 5..10)
    partial slabs before empty ones are discarded."""

    __slots__ = ("size", "slab_bytes", "objects", "cpu_partial_slabs", "min_partial",
                 "cpu_slab", "cpu_partial", "node_partial", "list_lock")

    def __init__(self, size: int, num_cpus: int, list_lock: Any = None) -> None:
        self.size = size
        min_objects = 4 * (num_cpus.bit_length() + 1)
        order = 0
        while order < SLAB_MAX_ORDER and (PAGE << order) // size < min_objects:
            order += 1
        self.slab_bytes = max(PAGE << order, size)
        self.objects = self.slab_bytes // size
        nr_objects = 120 if size < 256 else 52 if size < 1024 else 24 if size < PAGE else 6
        self.cpu_partial_slabs = -(-nr_objects * 2 // self.objects)
        self.min_partial = min(max((size.bit_length() - 1) // 2, 5), 10)
        self.cpu_slab: list[Slab | None] = [None] * num_cpus
        self.cpu_partial: list[list[Slab]] = [[] for _ in range(num_cpus)]
        self.node_partial: list[Slab] = []
        # kmem_cache_node.list_lock (Timing.new_lock's, for the model's C twin; None where
        # only the geometry is wanted)
        self.list_lock = list_lock


@dataclass(eq=False)
class Slab:
    """One slab: its objects' free list (last freed first), the CPU whose slab it is (SLUB's
    frozen slab; None: none), the partial list it is on ("cpu", "node" or "") and the address
    of its struct slab in the node's memory map."""

    cache: KmemCache
    start: int
    meta: int
    free: list[int]
    owner: int | None = None
    listed: str = ""


class Slub:
    """The slab caches of one machine (by name, node and object size), charged to
    ``timing``'s clocks, over the page allocator ``pages``."""

    def __init__(self, timing: CostModel) -> None:
        self._timing = timing
        self._num_cpus = len(timing.clock)
        self.pages = PageAllocator(self._num_cpus, timing.alloc_region)
        # (cache name, node, object size) -> the cache
        self._caches: dict[tuple[str, int, int], KmemCache] = {}
        self.slab_of_page: dict[int, Slab] = {}  # page number -> the slab it belongs to

    def kmalloc(self, cpu: int, size: int, node: int | None = None,
                account: bool = False) -> int:
        """``kmalloc``: an object of the kmalloc size class for ``size`` (``slab_alloc``).
        ``account``: __GFP_ACCOUNT, charged to the memory cgroup (``memcg_charge``), as map
        memory is. The fast-path costs were measured on hot objects; a cold one's stall is
        the access's."""
        self._timing.charge(cpu, "kmalloc")
        if account:
            self._timing.charge(cpu, "memcg_charge")
        return self.slab_alloc(cpu, "kmalloc", kmalloc_size(size), node)

    def kfree(self, cpu: int, addr: int, account: bool = False) -> None:
        """``kfree`` of a kmalloc'd object (``slab_free``). ``account``: an object kmalloc'd
        with ``account``, whose charge goes back to its memory cgroup (``memcg_uncharge``)."""
        self._timing.charge(cpu, "kfree")
        if account:
            self._timing.charge(cpu, "memcg_uncharge")
        self.slab_free(cpu, addr)

    def slab_alloc(self, cpu: int, cache_name: str, size: int, node: int | None = None) -> int:
        """An object from SLUB's cache ``cache_name`` of ``size``-byte objects on ``node``
        (see ``KmemCache``): the CPU's slab's freelist, last freed first; when it is empty
        ``___slab_alloc`` takes a partial slab (``slab_refill`` and a cmpxchg on the slab's
        struct) or a new one from the page allocator (``page_alloc``: fresh memory, cold in
        every cache). The free list lives in the free objects, so taking one reads its line.
        The caller charges its own call (kmalloc, a bulk allocation's share)."""
        node = self._timing.cpu_node[cpu] if node is None else node
        cache = self._kmem_cache(cache_name, node, size)
        slab = cache.cpu_slab[cpu]
        if slab is None or not slab.free:
            slab = self._slab_refill(cpu, cache, node)
        addr = slab.free.pop()
        # get_freepointer_safe: the next free object's address is in it
        self._timing.access(cpu, addr)
        return addr

    def slab_free(self, cpu: int, addr: int) -> None:
        """Give a slab object back. Into the CPU's own slab it is the fast path; into any
        other slab it is ``__slab_free`` (``slab_free_remote`` and a cmpxchg on the slab's
        struct), which puts a slab that was full on this CPU's partial list, and gives an
        empty one back to the page allocator when its node has partial slabs enough
        (``page_free``). Either way the object's line is written: it holds the free list's
        next pointer. The caller charges its own call (kfree, a bulk free's share)."""
        slab = self.slab_of_page.get(addr // PAGE) if addr else None
        if slab is not None:
            self._timing.access(cpu, addr, write=True)  # set_freepointer: the list is in the object
            self._do_slab_free(cpu, slab, [addr])

    def slab_free_bulk(self, cpu: int, addrs: list[int]) -> None:
        """``kmem_cache_free_bulk``: build_detached_freelist starts from the last object not
        yet freed and gathers, looking back, every object of the same slab until a third
        object of another slab; each slab's group goes back at once (do_slab_free with its
        count: one ``__slab_free`` and one cmpxchg for a slab that is not the CPU's). Each
        object's line is written (set_freepointer). The caller charges the call's share."""
        left: list[int | None] = [a if a and a // PAGE in self.slab_of_page else None
                                  for a in addrs]
        size = len(left)
        while size:
            size -= 1
            first = left[size]
            if first is None:
                continue
            slab = self.slab_of_page[first // PAGE]
            group = [first]
            left[size] = None
            lookahead, resume = 3, 0
            i = size
            while i:
                i -= 1
                addr = left[i]
                if addr is None:
                    continue
                if self.slab_of_page[addr // PAGE] is slab:
                    group.append(addr)
                    left[i] = None
                    continue
                lookahead -= 1
                if not lookahead:
                    break
                if not resume:
                    resume = i + 1
            for addr in group:
                self._timing.access(cpu, addr, write=True)
            self._do_slab_free(cpu, slab, group)
            size = resume if resume else size

    def _do_slab_free(self, cpu: int, slab: Slab, addrs: list[int]) -> None:
        """do_slab_free of objects of one slab: the CPU's own slab takes them on its freelist;
        any other slab by ``__slab_free``."""
        if slab.owner == cpu:
            slab.free.extend(addrs)
            return
        self._timing.charge(cpu, "slab_free_remote")
        self._timing.atomic(cpu, slab.meta)
        was_full = not slab.free
        slab.free.extend(addrs)
        if slab.owner is not None:
            return  # another CPU's slab: that CPU takes the object with its freelist
        cache = slab.cache
        if was_full:
            self._put_cpu_partial(cpu, cache, slab)
        elif len(slab.free) == cache.objects and slab.listed == "node" \
                and len(cache.node_partial) > cache.min_partial:
            cache.node_partial.remove(slab)
            self._discard_slab(cpu, slab)

    def _kmem_cache(self, name: str, node: int, size: int) -> KmemCache:
        key = (name, node, size)
        cache = self._caches.get(key)
        if cache is None:
            cache = self._caches[key] = KmemCache(
                size, self._num_cpus, self._timing.new_lock(0))  # (the list lock's line: unplaced)
        return cache

    def _slab_refill(self, cpu: int, cache: KmemCache, node: int) -> Slab:
        """___slab_alloc: the CPU's slab is used up; the next comes from its partial list,
        its node's (under the node's list_lock), or the page allocator."""
        old = cache.cpu_slab[cpu]
        if old is not None:
            old.owner = None  # deactivated full: on no list until an object comes back
        if cache.cpu_partial[cpu]:
            slab = cache.cpu_partial[cpu].pop()
        elif cache.node_partial:
            self._timing.spin_lock(cpu, cache.list_lock)
            slab = cache.node_partial.pop()
            self._timing.spin_unlock(cpu, cache.list_lock)
        else:
            slab = self._new_slab(cpu, cache, node)
        if slab.listed:
            self._timing.charge(cpu, "slab_refill")
            self._timing.atomic(cpu, slab.meta)  # get_freelist's cmpxchg takes the slab's objects
        slab.listed = ""
        slab.owner = cpu
        cache.cpu_slab[cpu] = slab
        return slab

    def _new_slab(self, cpu: int, cache: KmemCache, node: int) -> Slab:
        self._timing.charge(cpu, "page_alloc")
        nbytes = cache.slab_bytes
        start = self.pages.alloc_pages(cpu, node, nbytes)
        meta = (node << NODE_SHIFT) + MEMMAP_OFFSET + (start - (node << NODE_SHIFT)) // PAGE * 64
        self._timing.access(cpu, meta, write=True)  # allocate_slab initialises the struct slab
        # The freelist hands out the lowest address first.
        free = list(range(start + (cache.objects - 1) * cache.size, start - 1, -cache.size))
        slab = Slab(cache, start, meta, free)
        for page in range(start // PAGE, (start + nbytes) // PAGE):
            self.slab_of_page[page] = slab
        return slab

    def _put_cpu_partial(self, cpu: int, cache: KmemCache, slab: Slab) -> None:
        """put_cpu_partial: a full list is first moved to the node's partial list
        (__put_partials), where empty slabs beyond ``min_partial`` are discarded."""
        partial = cache.cpu_partial[cpu]
        if len(partial) >= cache.cpu_partial_slabs:
            self._timing.spin_lock(cpu, cache.list_lock)
            for old in partial:
                if len(old.free) == cache.objects and \
                        len(cache.node_partial) >= cache.min_partial:
                    self._discard_slab(cpu, old)
                else:
                    old.listed = "node"
                    cache.node_partial.append(old)
            self._timing.spin_unlock(cpu, cache.list_lock)
            partial.clear()
        slab.listed = "cpu"
        partial.append(slab)

    def _discard_slab(self, cpu: int, slab: Slab) -> None:
        self._timing.charge(cpu, "page_free")
        nbytes = slab.cache.slab_bytes
        for page in range(slab.start // PAGE, (slab.start + nbytes) // PAGE):
            del self.slab_of_page[page]
        self.pages.free_pages(cpu, slab.start, nbytes)
