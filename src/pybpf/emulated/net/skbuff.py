"""sk_buff heads and where they come from (net/core/skbuff.c): the slab cache and the per-CPU
NAPI cache.

Rules this module keeps:
- An ``SkBuff`` is the head (struct sk_buff) plus the frame it describes: ``data`` holds the
  linear bytes from the MAC header on, ``frags`` the payloads GRO appended (in order).
- Heads come from the ``skbuff_head_cache`` slab (``kmem_cache_alloc_bulk``: every head is a
  new object) or from the per-CPU NAPI cache (``napi_skb_cache_get_bulk``, 6.15+): take from
  the cache when it holds ``n``; else refill it with ``min(NAPI_SKB_CACHE_SIZE - count,
  NAPI_SKB_CACHE_BULK)`` heads from the slab first; else allocate the rest from the slab
  directly. The cache is a stack: the most recently returned heads go out first.
- Heads come back to the NAPI cache only through ``napi_skb_cache_put`` (GRO freeing a merged
  skb's stolen head, ``napi_consume_skb``); a full cache (``NAPI_SKB_CACHE_SIZE``) gives its
  upper half back to the slab first. Everything else frees to the slab (``kfree_skb``).
- Every head knows whether it is new from the slab or ``recycled`` through the NAPI cache, and
  the counters say how many of each went out: with GRO merging 16 frames per skb, 15 of
  every 16 heads cpumap takes are recycled ones.
- Modeled time (emulated/machine/timing.py), charged to the calling thread's CPU: a slab head
  costs ``kmem_cache_alloc_bulk`` (or ``kmem_cache_free_bulk`` when a full cache spills, which
  gives each slab its objects at once) per object, a NAPI cache head ``napi_skb_cache_get`` /
  ``napi_skb_cache_put``, a head freed alone ``kfree``. Heads have addresses (``addr``) in
  SLUB's ``skbuff_head_cache`` (``Timing.slub``): a CPU takes heads from
  its own slab, last freed first; a head freed on another CPU (the reader's) goes back by
  ``__slab_free``'s slow path and returns to the allocating CPU only through the partial
  lists; a recycled head comes back hot.
"""

from __future__ import annotations

import threading
from typing import Any

from ..machine.timing import Timing

NAPI_SKB_CACHE_SIZE = 64
NAPI_SKB_CACHE_BULK = 16
NAPI_SKB_CACHE_HALF = NAPI_SKB_CACHE_SIZE // 2
SKB_HEAD_CACHE = "skbuff_head_cache"

# include/linux/skbuff.h
CHECKSUM_NONE, CHECKSUM_UNNECESSARY, CHECKSUM_COMPLETE, CHECKSUM_PARTIAL = range(4)
PACKET_HOST, PACKET_BROADCAST, PACKET_MULTICAST, PACKET_OTHERHOST = range(4)
SKB_DATA_ALIGN = 64  # SMP_CACHE_BYTES on x86-64
SKB_HEAD_SIZE = 256  # SKB_DATA_ALIGN(sizeof(struct sk_buff))
SKB_ZEROED = 192  # offsetof(struct sk_buff, tail): what a head's zeroing writes


def skb_data_align(size: int) -> int:
    return -(-size // SKB_DATA_ALIGN) * SKB_DATA_ALIGN


class SkBuff:
    """struct sk_buff: a head and the frame it carries."""

    __slots__ = ("data", "frags", "dev", "protocol", "pkt_type", "ip_summed", "gso_size",
                 "gso_segs", "hash", "skb_iif", "rx_queue", "metasize", "truesize",
                 "recycled", "redirected", "gro", "addr")

    def __init__(self, addr: int = 0) -> None:
        self.recycled = False
        self.addr = addr  # the head's modeled memory (0: not placed)
        self.reset()

    def reset(self) -> None:
        """What ``memset(skb, 0, offsetof(struct sk_buff, tail))`` clears."""
        self.data = bytearray()
        self.frags: list[bytes] = []
        self.dev: Any = None
        self.protocol = 0
        self.pkt_type = PACKET_HOST
        self.ip_summed = CHECKSUM_NONE
        self.gso_size = 0
        self.gso_segs = 0
        self.hash = 0
        self.skb_iif = 0
        self.rx_queue = 0
        self.metasize = 0
        self.truesize = 0
        self.redirected = False  # skb_is_redirected: generic XDP leaves it alone
        self.gro: Any = None  # NAPI_GRO_CB(skb) while GRO looks at it

    @property
    def len(self) -> int:
        """Bytes of the frame, MAC header included (linear part plus frags)."""
        return len(self.data) + sum(len(frag) for frag in self.frags)

    def linearize(self) -> bytes:
        """The whole frame as one bytes object (skb_copy_bits over the head and the frags)."""
        return bytes(self.data) + b"".join(self.frags) if self.frags else bytes(self.data)


class Counters:
    """A fixed set of integer counters (a subclass names them in ``__slots__``), all 0 at
    first; ``as_dict`` reads them out."""

    __slots__: tuple[str, ...] = ()

    def __init__(self) -> None:
        for name in self.__slots__:
            setattr(self, name, 0)

    def as_dict(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in self.__slots__}


class NapiCacheStats(Counters):
    """What one CPU's NAPI cache did, in heads: handed out by napi_skb_cache_get_bulk
    (``get``), of which had come back through napi_skb_cache_put (``recycled``); moved from
    the slab by refills (``refill``) or allocated from it when a refill was not enough
    (``slab_direct``); given back (``put``); spilled back to the slab by a full cache
    (``flushed``)."""

    __slots__ = ("get", "recycled", "refill", "slab_direct", "put", "flushed")


class SkbHeadCache:
    """skbuff_head_cache and the per-CPU ``napi_alloc_cache`` skb caches of one machine."""

    def __init__(self, num_cpus: int, timing: Timing, current: Any) -> None:
        self._lock = threading.Lock()  # the slab and its counters
        self.slab_alloc = 0  # heads allocated from the slab, by any path
        self.slab_free = 0
        # Per CPU: the cached heads (a stack) and its lock (bh_lock; host threads standing for
        # the same CPU may overlap here, as BH-disabled code never does in the kernel).
        self.caches: list[list[SkBuff]] = [[] for _ in range(num_cpus)]
        self.cache_locks = [threading.Lock() for _ in range(num_cpus)]
        self.stats = [NapiCacheStats() for _ in range(num_cpus)]
        self.timing = timing
        self.current = current  # the machine's per-thread current CPU

    # -- the slab -----------------------------------------------------------------------------
    def kmem_cache_alloc_bulk(self, n: int) -> list[SkBuff]:
        """``n`` new zeroed heads from the slab."""
        cpu = self.current.cpu
        self.timing.charge(cpu, "kmem_cache_alloc_bulk", n)
        with self._lock:
            self.slab_alloc += n
            return [SkBuff(self.timing.slub.slab_alloc(cpu, SKB_HEAD_CACHE, SKB_HEAD_SIZE))
                    for _ in range(n)]

    def _slab_put(self, cpu: int, skb: SkBuff) -> None:
        """A head back to its slab."""
        skb.reset()
        with self._lock:
            self.slab_free += 1
            self.timing.slub.slab_free(cpu, skb.addr)

    def kmem_cache_free(self, skb: SkBuff) -> None:
        """kfree_skbmem: the head goes back to the slab."""
        cpu = self.current.cpu
        self.timing.charge(cpu, "kfree")
        self._slab_put(cpu, skb)

    # -- the per-CPU NAPI cache ---------------------------------------------------------------
    def napi_skb_cache_get_bulk(self, cpu: int, n: int) -> list[SkBuff]:
        """Up to ``n`` zeroed heads for ``cpu``, the cache first (see the module rules)."""
        cache, stats = self.caches[cpu], self.stats[cpu]
        with self.cache_locks[cpu]:
            if len(cache) < n:
                bulk = min(NAPI_SKB_CACHE_SIZE - len(cache), NAPI_SKB_CACHE_BULK)
                cache.extend(self.kmem_cache_alloc_bulk(bulk))
                stats.refill += bulk
            direct = []
            if len(cache) < n:
                direct = self.kmem_cache_alloc_bulk(n - len(cache))
                stats.slab_direct += len(direct)
            take = min(n, len(cache))
            heads = cache[len(cache) - take:]
            del cache[len(cache) - take:]
        self.timing.charge(self.current.cpu, "napi_skb_cache_get", take)
        heads += direct
        recycled = 0
        for skb in heads:
            if skb.recycled:
                recycled += 1
                skb.reset()
        stats.get += len(heads)
        stats.recycled += recycled
        return heads

    def napi_skb_cache_put(self, cpu: int, skb: SkBuff) -> None:
        """Give a head back to ``cpu``'s cache (GRO's stolen heads, napi_consume_skb)."""
        cache, stats = self.caches[cpu], self.stats[cpu]
        skb.recycled = True
        skb.data = bytearray()
        skb.frags = []
        spill: list[SkBuff] = []
        self.timing.charge(cpu, "napi_skb_cache_put")
        with self.cache_locks[cpu]:
            cache.append(skb)
            stats.put += 1
            if len(cache) == NAPI_SKB_CACHE_SIZE:
                spill = cache[NAPI_SKB_CACHE_HALF:]
                del cache[NAPI_SKB_CACHE_HALF:]
                stats.flushed += len(spill)
        if spill:
            self.timing.charge(cpu, "kmem_cache_free_bulk", len(spill))
            for head in spill:
                head.reset()
            with self._lock:
                self.slab_free += len(spill)
                self.timing.slub.slab_free_bulk(cpu, [head.addr for head in spill])

    # -- counters -----------------------------------------------------------------------------
    def counters(self) -> dict[str, Any]:
        """Slab totals and, per CPU that used its cache, the NAPI cache counters."""
        with self._lock:
            out: dict[str, Any] = {"slab_alloc": self.slab_alloc, "slab_free": self.slab_free}
        out["napi_cache"] = {cpu: s.as_dict() for cpu, s in enumerate(self.stats)
                             if s.get or s.put}
        return out
