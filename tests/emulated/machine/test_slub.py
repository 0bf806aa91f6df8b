"""SLUB (emulated/machine/slub.py, mm/slub.c): caches, slabs, the fast and slow paths."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pybpf.emulated.machine.page_alloc import NODE_SHIFT
from pybpf.emulated.machine.slub import KmemCache, kmalloc_size
from pybpf.emulated.machine.timing import Timing
from pybpf.profiles import load_profile

PROFILE = load_profile("haswell-ep-2s")  # 20 CPUs: 0-9 on node 0, 10-19 on node 1
REMOTE_CPU = 10


def timing() -> Timing:
    return Timing(PROFILE)


def test_kmalloc_hands_back_the_last_freed_object_of_its_class():
    t = timing()
    a = t.slub.kmalloc(0, 48)
    t.slub.kfree(0, a)
    assert t.slub.kmalloc(0, 60) == a  # same 64-byte class
    assert t.slub.kmalloc(0, 60) != a
    assert kmalloc_size(65) == 96 and kmalloc_size(5000) == 8192
    assert t.slub.kmalloc(REMOTE_CPU, 64) >> NODE_SHIFT == 1


@pytest.mark.parametrize("size,cpus,objects,cpu_partial_slabs,min_partial", [
    (64, 2, 64, 4, 5),      # order 0 holds min_objects 4 * (fls(2) + 1) = 12
    (256, 20, 32, 4, 5),    # 20 CPUs: min_objects 24; order 0 holds 16, so order 1
    (1024, 20, 32, 2, 5),   # order 3: 32 objects
    (8192, 2, 4, 3, 6),     # order 3 is the largest: 4 objects
])
def test_slub_geometry_follows_the_kernels_rules(size, cpus, objects, cpu_partial_slabs,
                                                 min_partial):
    cache = KmemCache(size, cpus)
    assert cache.objects == objects
    assert cache.cpu_partial_slabs == cpu_partial_slabs
    assert cache.min_partial == min_partial


def test_kfree_into_another_cpus_slab_is_the_slow_path_and_the_slab_comes_back_partial():
    t = timing()
    objects = KmemCache(64, len(t.clock)).objects
    mine = [t.slub.kmalloc(0, 64) for _ in range(objects)]  # CPU 0's first slab, used up
    t.slub.kmalloc(0, 64)  # the next slab: the first is deactivated, full, on no list
    assert "slab_free_remote" not in t.breakdown(1)
    t.slub.kfree(1, mine[5])
    assert t.breakdown(1)["slab_free_remote"][0] == 1
    assert t.breakdown(1)["atomic"][0] == 1  # __slab_free's cmpxchg on the struct slab
    for addr in mine[6:9]:
        t.slub.kfree(1, addr)
    assert t.breakdown(1)["slab_free_remote"][0] == 4
    # Full when the first object came back: it went to CPU 1's partial list, so CPU 1's
    # first allocation takes it (last freed first) instead of a new page.
    assert t.slub.kmalloc(1, 64) == mine[8]
    assert "page_alloc" not in t.breakdown(1)
    assert t.breakdown(1)["slab_refill"][0] == 1


def test_kmalloc_reads_and_kfree_writes_the_objects_line():
    """SLUB keeps its free list in the free objects: taking one reads its free pointer,
    giving one back writes it, so a cold object stalls either way."""
    t = timing()
    a = t.slub.kmalloc(0, 64)
    assert t.breakdown(0)["dram_local"][0] == 2  # a new slab: its struct slab and the object
    assert t.access(0, a) == 0
    t.slub.kfree(1, a)
    assert "shared_hit" in t.breakdown(1) or "transfer_local" in t.breakdown(1)
    assert t.access(1, a) == 0


def test_bulk_free_gives_each_slab_its_objects_at_once():
    """kmem_cache_free_bulk: one __slab_free (one cmpxchg) per slab's group, the groups built
    as build_detached_freelist does: looking back from the last object, past at most two
    objects of other slabs."""
    t = timing()
    objects = KmemCache(64, len(t.clock)).objects
    a = [t.slub.slab_alloc(0, "test", 64) for _ in range(objects)]  # CPU 0's first slab, used up
    b = [t.slub.slab_alloc(0, "test", 64) for _ in range(objects)]  # its second
    t.slub.slab_alloc(0, "test", 64)  # a third: the first two are no longer the CPU's
    t.slub.slab_free_bulk(1, [a[0], b[0], a[1], b[1], a[2], b[2]])
    assert t.breakdown(1)["slab_free_remote"][0] == 2
    assert t.breakdown(1)["atomic"][0] == 2
    # a[3] is three objects of other slabs away from a[4]: a group of its own.
    c = [t.slub.slab_alloc(0, "test", 64) for _ in range(objects)]
    t.slub.slab_alloc(0, "test", 64)
    t.slub.slab_free_bulk(1, [a[3], b[3], c[0], c[1], a[4]])
    assert t.breakdown(1)["slab_free_remote"][0] == 2 + 4  # {a4}, {c1, c0}, {b3}, {a3}
    # Into the CPU's own slab it is the fast path, and every object's line is written.
    own = [t.slub.slab_alloc(2, "test", 64) for _ in range(3)]
    t.slub.slab_free_bulk(2, own)
    assert "slab_free_remote" not in t.breakdown(2)
    assert all(t.access(2, addr) == 0 for addr in own)
    assert t.slub.slab_alloc(2, "test", 64) in own


def test_kfree_into_the_cpus_own_slab_is_the_fast_path():
    t = timing()
    a = t.slub.kmalloc(0, 64)
    t.slub.kfree(0, a)
    assert "slab_free_remote" not in t.breakdown(0)
    assert t.breakdown(0)["page_alloc"][0] == 1  # the first slab only


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([0, 1, 10]), st.sampled_from(["alloc", "free", "bulk"]),
                          st.sampled_from([32, 64, 512])), max_size=300))
def test_slab_objects_are_never_handed_out_twice_nor_lost(ops):
    """Whatever CPUs allocate and free, one at a time or in bulk, a live object is never
    handed out again, and every freed object stays in some slab (the pages in use account
    for all of them)."""
    t = timing()
    live: dict[int, int] = {}
    for cpu, op, size in ops:
        if op == "free" and live:
            addr = next(iter(live))
            del live[addr]
            t.slub.kfree(cpu, addr)
        elif op == "bulk" and live:  # up to 40 objects of the oldest one's cache
            cls = next(iter(live.values()))
            addrs = [a for a, c in live.items() if c == cls][:40]
            for addr in addrs:
                del live[addr]
            t.slub.slab_free_bulk(cpu, addrs)
        else:
            addr = t.slub.kmalloc(cpu, size)
            assert addr not in live
            live[addr] = kmalloc_size(size)
    slabs = {id(slab): slab for slab in t.slub.slab_of_page.values()}.values()
    free = sum(len(slab.free) for slab in slabs)
    total = sum(slab.cache.objects for slab in slabs)
    assert free + len(live) == total
    for slab in slabs:
        assert len(set(slab.free)) == len(slab.free) and not set(slab.free) & set(live)
