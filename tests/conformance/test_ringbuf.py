"""Conformance of RINGBUF (kernel/bpf/ringbuf.c), on both backends.

Each test pins one kernel rule and runs against the real kernel (the oracle) and the emulated
backend through the ``backend`` fixture.
"""

from __future__ import annotations

import errno

import pytest

from helpers import err_of
from pybpf.uapi import BPF_F_NO_PREALLOC, BPF_F_NUMA_NODE, BPF_F_RDONLY, ENOTSUPP, MapType


@pytest.mark.parametrize("key_size, value_size, max_entries, flags, want", [
    (0, 0, 4096, BPF_F_RDONLY, errno.EINVAL),
    (0, 0, 4096, BPF_F_NO_PREALLOC, errno.EINVAL),
    (4, 0, 4096, 0, errno.EINVAL),
    (0, 4, 4096, 0, errno.EINVAL),
    (0, 0, 0, 0, errno.EINVAL),
    (0, 0, 2048, 0, errno.EINVAL),
    (0, 0, 3 * 4096, 0, errno.EINVAL),
])
def test_ringbuf_create_rejects_bad_attributes(maps, key_size, value_size, max_entries, flags,
                                               want):
    assert maps.create_errno(MapType.RINGBUF, key_size, value_size, max_entries,
                             map_flags=flags) == want


def test_ringbuf_element_commands_give_enotsupp(maps):
    sys = maps.sys
    fd = maps.create(MapType.RINGBUF, 0, 0, 4096, map_flags=BPF_F_NUMA_NODE, numa_node=0)
    assert err_of(sys.map_lookup_elem, fd, None) == ENOTSUPP
    assert err_of(sys.map_update_elem, fd, None, b"") == ENOTSUPP
    assert err_of(sys.map_delete_elem, fd, None) == ENOTSUPP
    assert err_of(sys.map_get_next_key, fd, None) == ENOTSUPP
    assert err_of(sys.map_lookup_and_delete_elem, fd, None) == ENOTSUPP
