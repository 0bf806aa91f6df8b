"""skb heads: napi_skb_cache_get_bulk and napi_skb_cache_put, counted (net/core/skbuff.c)."""

from __future__ import annotations

from pybpf.emulated.machine.machine import Machine
from pybpf.emulated.net.skbuff import (
    NAPI_SKB_CACHE_BULK,
    NAPI_SKB_CACHE_HALF,
    NAPI_SKB_CACHE_SIZE,
    SkbHeadCache,
)


def head_cache(cpus: int) -> SkbHeadCache:
    machine = Machine(cpus=cpus)
    return SkbHeadCache(cpus, machine.timing, machine.current)


def test_an_empty_cache_is_refilled_in_one_bulk_then_serves_from_it():
    cache = head_cache(2)
    heads = cache.napi_skb_cache_get_bulk(1, 8)
    assert len(heads) == 8 and not any(h.recycled for h in heads)
    assert cache.slab_alloc == NAPI_SKB_CACHE_BULK and len(cache.caches[1]) == 8
    cache.napi_skb_cache_get_bulk(1, 8)
    assert cache.slab_alloc == NAPI_SKB_CACHE_BULK  # the second eight were cached
    assert cache.stats[1].as_dict() == {"get": 16, "recycled": 0, "refill": 16,
                                        "slab_direct": 0, "put": 0, "flushed": 0}


def test_heads_given_back_go_out_first_and_count_as_recycled():
    cache = head_cache(1)
    first = cache.napi_skb_cache_get_bulk(0, 4)
    for head in first:
        cache.napi_skb_cache_put(0, head)
    again = cache.napi_skb_cache_get_bulk(0, 4)
    assert set(map(id, again)) == set(map(id, first))
    assert cache.stats[0].recycled == 4 and cache.slab_alloc == NAPI_SKB_CACHE_BULK


def test_a_request_beyond_the_refill_is_allocated_straight_from_the_slab():
    cache = head_cache(1)
    heads = cache.napi_skb_cache_get_bulk(0, 40)
    assert len(heads) == 40
    assert cache.stats[0].refill == NAPI_SKB_CACHE_BULK
    assert cache.stats[0].slab_direct == 40 - NAPI_SKB_CACHE_BULK
    assert cache.caches[0] == []


def test_a_full_cache_gives_its_upper_half_back_to_the_slab():
    cache = head_cache(1)
    heads = cache.kmem_cache_alloc_bulk(NAPI_SKB_CACHE_SIZE)
    for head in heads:
        cache.napi_skb_cache_put(0, head)
    assert len(cache.caches[0]) == NAPI_SKB_CACHE_HALF
    assert cache.stats[0].flushed == NAPI_SKB_CACHE_HALF
    assert cache.slab_free == NAPI_SKB_CACHE_HALF


def test_each_cpu_has_its_own_cache():
    cache = head_cache(2)
    head = cache.kmem_cache_alloc_bulk(1)[0]
    cache.napi_skb_cache_put(0, head)
    assert cache.napi_skb_cache_get_bulk(1, 1)[0] is not head
    assert cache.napi_skb_cache_get_bulk(0, 1)[0] is head


def test_heads_live_in_slubs_skbuff_head_cache():
    """A head freed on its own CPU comes back first; one freed by another CPU (the reader's
    kfree_skb) goes back by __slab_free's slow path, and a spill of the NAPI cache gives each
    slab its heads at once."""
    machine = Machine(cpus=2, profile="sapphire-rapids-2s")
    cache = SkbHeadCache(2, machine.timing, machine.current)
    timing = machine.timing
    with machine.on_cpu(1):
        head = cache.kmem_cache_alloc_bulk(1)[0]
        addr = head.addr
        cache.kmem_cache_free(head)
        assert cache.kmem_cache_alloc_bulk(1)[0].addr == addr  # the CPU's slab, LIFO
        heads = cache.kmem_cache_alloc_bulk(NAPI_SKB_CACHE_SIZE + 1)
    assert "slab_free_remote" not in timing.breakdown(1)
    with machine.on_cpu(0):
        cache.kmem_cache_free(heads[0])
    assert timing.breakdown(0)["slab_free_remote"][0] == 1
    with machine.on_cpu(1):
        for head in heads[1:]:
            cache.napi_skb_cache_put(1, head)
    spilled = heads[1 + NAPI_SKB_CACHE_HALF:]  # the cache's upper half
    slabs = {head.addr // 4096 for head in spilled}  # order-0 slabs of 16 heads
    assert cache.stats[1].flushed == NAPI_SKB_CACHE_HALF
    assert 1 < len(slabs) < len(spilled)
    assert 0 < timing.breakdown(1)["slab_free_remote"][0] <= len(slabs)
