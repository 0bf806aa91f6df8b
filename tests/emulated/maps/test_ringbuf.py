"""RINGBUF on the emulated backend: the map object exists, its data path does not (yet)."""

from __future__ import annotations

import errno

import pytest

from helpers import op_errno
from pybpf.emulated.maps.ringbuf import RINGBUF_MAX_DATA_SZ
from pybpf.uapi import ENOTSUPP, MapType


def test_large_power_of_two_sizes_are_accepted_without_allocating(emulated):
    fd = emulated.map_create(MapType.RINGBUF, 0, 0, 1 << 31)
    assert emulated.map_get_info(fd).max_entries == 1 << 31


def test_max_data_size_is_beyond_any_u32_size():
    assert RINGBUF_MAX_DATA_SZ > 2**32


def test_element_errors_say_records_go_through_mmap(emulated):
    fd = emulated.map_create(MapType.RINGBUF, 0, 0, 4096)
    with pytest.raises(OSError) as info:
        emulated.map_lookup_elem(fd, None)
    assert info.value.errno == ENOTSUPP
    assert "mmap" in str(info.value)
    ring = emulated.map_from_fd(fd)
    assert op_errno(ring.map_update_elem, b"", b"", 0) == ENOTSUPP
    assert op_errno(ring.map_delete_elem, b"") == ENOTSUPP
    assert op_errno(ring.map_lookup_elem, b"") == ENOTSUPP


def test_key_given_to_a_keyless_ring_is_einval(emulated):
    fd = emulated.map_create(MapType.RINGBUF, 0, 0, 4096)
    with pytest.raises(OSError) as info:
        emulated.map_lookup_elem(fd, b"\0\0\0\0")
    assert info.value.errno == errno.EINVAL
