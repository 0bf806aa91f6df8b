"""The map types of the emulated kernel: kernel/bpf's bpf_types.h as one explicit table.

Each family names the types its class serves (``@map_ops(MapType.X)``); this table lists the
classes, so what the emulated kernel has is read in one place, with no loading by side effect.
"""

from __future__ import annotations

from .maps.arraymap import ArrayOfMaps, BpfArray, BpfPercpuArray, PerfEventArray, ProgArray
from .maps.bloom_filter import BloomFilter
from .maps.bpf_map import BpfMap
from .maps.hashtab import HtabLruMap, HtabLruPercpuMap, HtabMap, HtabOfMaps, HtabPercpuMap
from .maps.lpm_trie import LpmTrie
from .maps.queue_stack_maps import BpfQueue, BpfStack
from .maps.ringbuf import RingBuf, UserRingBuf
from .net.cpumap import CpuMap
from .net.devmap import DevMap, DevMapHash
from .net.sock_map import SockHash, SockMap

_FAMILIES: tuple[type[BpfMap], ...] = (
    HtabMap, HtabPercpuMap, HtabLruMap, HtabLruPercpuMap, HtabOfMaps,
    BpfArray, BpfPercpuArray, ProgArray, PerfEventArray, ArrayOfMaps,
    BpfQueue, BpfStack, LpmTrie, BloomFilter, RingBuf, UserRingBuf,
    DevMap, DevMapHash, CpuMap, SockMap, SockHash,
)

# map type -> the class that is its ops (bpf_map_types[])
MAP_OPS: dict[int, type[BpfMap]] = {int(t): cls for cls in _FAMILIES for t in cls.map_types}
