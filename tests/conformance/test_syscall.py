"""Conformance of the generic map commands of kernel/bpf/syscall.c across these families: batches
without a handler, the generic lookup batch, create flags and size limits, on both backends.

Each test pins one kernel rule and runs against the real kernel (the oracle) and the emulated
backend through the ``backend`` fixture.
"""

from __future__ import annotations

import errno

import pytest

from helpers import err_of, u32
from pybpf.uapi import BPF_F_NO_PREALLOC, BPF_F_NUMA_NODE, ENOTSUPP, MapType

from .conftest import KMALLOC_MAX_SIZE


@pytest.mark.parametrize("map_type, key_size, value_size, max_entries, flags", [
    (MapType.PROG_ARRAY, 4, 4, 2, 0),
    (MapType.QUEUE, 0, 4, 2, 0),
    (MapType.BLOOM_FILTER, 0, 4, 2, 0),
    (MapType.RINGBUF, 0, 0, 4096, 0),
    (MapType.DEVMAP, 4, 4, 2, 0),
    (MapType.DEVMAP_HASH, 4, 4, 2, 0),
    (MapType.CPUMAP, 4, 4, 2, 0),
    (MapType.SOCKMAP, 4, 8, 2, 0),
    (MapType.SOCKHASH, 4, 8, 2, 0),
])
def test_batch_commands_without_a_handler_give_enotsupp(maps, map_type, key_size, value_size,
                                                        max_entries, flags):
    sys = maps.sys
    fd = maps.create(map_type, key_size, value_size, max_entries, map_flags=flags)
    assert err_of(sys.map_lookup_batch, fd, None, 2) == ENOTSUPP
    assert err_of(sys.map_lookup_and_delete_batch, fd, None, 2) == ENOTSUPP
    assert err_of(sys.map_delete_batch, fd, []) == ENOTSUPP


@pytest.mark.parametrize("map_type, key_size, value_size, max_entries, base_flags", [
    (MapType.ARRAY, 4, 4, 1, 0), (MapType.PERCPU_ARRAY, 4, 4, 1, 0),
    (MapType.PROG_ARRAY, 4, 4, 1, 0), (MapType.QUEUE, 0, 4, 1, 0), (MapType.STACK, 0, 4, 1, 0),
    (MapType.LPM_TRIE, 8, 4, 1, BPF_F_NO_PREALLOC), (MapType.BLOOM_FILTER, 0, 4, 1, 0),
    (MapType.RINGBUF, 0, 0, 4096, 0), (MapType.DEVMAP, 4, 4, 1, 0),
    (MapType.DEVMAP_HASH, 4, 4, 1, 0), (MapType.CPUMAP, 4, 4, 1, 0),
    (MapType.SOCKMAP, 4, 8, 1, 0), (MapType.SOCKHASH, 4, 8, 1, 0),
])
@pytest.mark.parametrize("unknown", [1 << 19, 1 << 22, 1 << 24, 1 << 31])
def test_create_with_a_flag_bit_no_type_knows_gives_einval(maps, map_type, key_size, value_size,
                                                          max_entries, base_flags, unknown):
    assert maps.create_errno(map_type, key_size, value_size, max_entries,
                             map_flags=base_flags | unknown) == errno.EINVAL


def test_lookup_batch_token_is_the_last_key_visited_even_if_skipped(maps):
    sys = maps.sys
    template = maps.create(MapType.ARRAY, 4, 4, 1)
    outer = maps.create(MapType.ARRAY_OF_MAPS, 4, 4, 8, inner_map_fd=template)
    sys.map_update_elem(outer, u32(2), u32(template))
    got = sys.map_lookup_batch(outer, None, 4)
    assert got.keys == [u32(2)] and got.end
    assert got.out_batch == u32(7)


@pytest.mark.parametrize("map_type, key_size, value_size, max_entries, flags, numa_node, want", [
    (MapType.PERCPU_ARRAY, 4, 8, 4, BPF_F_NUMA_NODE, 0xFFFFFFFF, 0),  # "no node" is fine
    (MapType.DEVMAP_HASH, 4, 4, 2**31 + 1, 0, 0, errno.EINVAL),  # bucket count overflows
    (MapType.SOCKHASH, 4, 8, 2**28 + 1, 0, 0, errno.EINVAL),  # bucket array too big
    (MapType.QUEUE, 0, KMALLOC_MAX_SIZE, 1, 0, 0, 0),
    (MapType.BLOOM_FILTER, 0, KMALLOC_MAX_SIZE, 1, 0, 0, 0),
    (MapType.LPM_TRIE, 8, KMALLOC_MAX_SIZE - 256 - 24, 1, BPF_F_NO_PREALLOC, 0, 0),
    (MapType.LPM_TRIE, 8, KMALLOC_MAX_SIZE - 256 - 23, 1, BPF_F_NO_PREALLOC, 0, errno.EINVAL),
    (MapType.CPUMAP, 4, 4, 2**32 - 1, 0, 0, errno.E2BIG),
])
def test_create_size_limits(maps, map_type, key_size, value_size, max_entries, flags, numa_node,
                            want):
    kw = dict(map_flags=flags, numa_node=numa_node)
    if want:
        assert maps.create_errno(map_type, key_size, value_size, max_entries, **kw) == want
    else:
        maps.create(map_type, key_size, value_size, max_entries, **kw)
