"""Conformance of every map family but the hash family, on both backends.

Each test pins one kernel rule and runs against the real kernel (the oracle) and the emulated
backend through the ``backend`` fixture; differential tests (``kernel`` and ``emulated``
together) compare orders and hash-dependent results that no simple expectation captures.
"""

from __future__ import annotations

import errno
import os
import random
import socket
import struct

import pytest

from helpers import err_of, u32
from pybpf.asm import R0, R2, R3, assemble, call, encode, exit_, ld_map_fd, mov64
from pybpf.system import iter_keys
from pybpf.uapi import (
    BPF_ANY,
    BPF_EXIST,
    BPF_F_INNER_MAP,
    BPF_F_MMAPABLE,
    BPF_F_NO_PREALLOC,
    BPF_F_NUMA_NODE,
    BPF_F_PRESERVE_ELEMS,
    BPF_F_RDONLY,
    BPF_F_RDONLY_PROG,
    BPF_F_WRONLY_PROG,
    BPF_F_ZERO_SEED,
    BPF_NOEXIST,
    ENOTSUPP,
    AttachType,
    MapType,
    ProgType,
)

KMALLOC_MAX_SIZE = 4 << 20


class Maps:
    """Creates maps on one backend and closes them when the test ends."""

    def __init__(self, sys) -> None:
        self.sys = sys
        self.fds: list[int] = []

    def create(self, map_type, key_size, value_size, max_entries, **kw) -> int:
        fd = self.sys.map_create(map_type, key_size, value_size, max_entries, **kw)
        self.fds.append(fd)
        return fd

    def create_errno(self, *args, **kw) -> int:
        return err_of(self.create, *args, **kw)

    def close(self) -> None:
        """Close every fd made here; each must still be open (no test closes them), so a
        failing close is a backend that lost or closed an fd behind the test's back."""
        failed = []
        for fd in self.fds:
            try:
                self.sys.close(fd)
            except OSError as exc:
                failed.append((fd, exc.errno))
        assert not failed, f"(fd, errno) of closes that failed: {failed}"


@pytest.fixture
def maps(backend):
    m = Maps(backend)
    yield m
    m.close()


@pytest.fixture
def kmaps(kernel):
    m = Maps(kernel)
    yield m
    m.close()


@pytest.fixture
def emaps(emulated):
    m = Maps(emulated)
    yield m
    m.close()


# ----------------------------------------------------------------------------------------------
# ARRAY / PERCPU_ARRAY
# ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("map_type, key_size, value_size, max_entries, flags, want", [
    (MapType.ARRAY, 4, 4, 0, 0, errno.EINVAL),
    (MapType.ARRAY, 8, 4, 1, 0, errno.EINVAL),
    (MapType.ARRAY, 4, 0, 1, 0, errno.EINVAL),
    (MapType.ARRAY, 4, 4, 1, BPF_F_NO_PREALLOC, errno.EINVAL),
    (MapType.ARRAY, 4, 4, 1, BPF_F_RDONLY_PROG | BPF_F_WRONLY_PROG, errno.EINVAL),
    (MapType.ARRAY, 4, 4, 1, BPF_F_PRESERVE_ELEMS, errno.EINVAL),
    (MapType.ARRAY, 4, 2**31, 1, 0, errno.E2BIG),
    (MapType.PERCPU_ARRAY, 4, 4, 1, BPF_F_MMAPABLE, errno.EINVAL),
    (MapType.PERCPU_ARRAY, 4, 4, 1, BPF_F_INNER_MAP, errno.EINVAL),
    (MapType.PERCPU_ARRAY, 4, 32 * 1024 + 1, 1, 0, errno.E2BIG),
])
def test_array_create_rejects_bad_attributes(maps, map_type, key_size, value_size, max_entries,
                                              flags, want):
    assert maps.create_errno(map_type, key_size, value_size, max_entries,
                             map_flags=flags) == want


def test_array_create_rule_order_key_size_before_e2big(maps):
    assert maps.create_errno(MapType.PERCPU_ARRAY, 8, 64 * 1024, 1) == errno.EINVAL


def test_percpu_array_with_explicit_numa_node_gives_einval(maps):
    assert maps.create_errno(MapType.PERCPU_ARRAY, 4, 8, 4, map_flags=BPF_F_NUMA_NODE,
                             numa_node=0) == errno.EINVAL


def test_array_accepts_numa_node_mmapable_and_inner_map_flags(maps):
    flags = BPF_F_NUMA_NODE | BPF_F_MMAPABLE | BPF_F_INNER_MAP
    fd = maps.create(MapType.ARRAY, 4, 8, 4, map_flags=flags, numa_node=0)
    assert maps.sys.map_get_info(fd).map_flags == flags


def test_array_elements_start_zeroed_and_round_trip(maps):
    fd = maps.create(MapType.ARRAY, 4, 6, 3)
    assert maps.sys.map_lookup_elem(fd, u32(2)) == bytes(6)
    maps.sys.map_update_elem(fd, u32(2), b"abcdef")
    maps.sys.map_update_elem(fd, u32(0), b"zzzzzz", BPF_EXIST)
    assert maps.sys.map_lookup_elem(fd, u32(2)) == b"abcdef"
    assert maps.sys.map_lookup_elem(fd, u32(0)) == b"zzzzzz"


def test_array_lookup_out_of_range_gives_enoent(maps):
    fd = maps.create(MapType.ARRAY, 4, 4, 3)
    assert err_of(maps.sys.map_lookup_elem, fd, u32(3)) == errno.ENOENT


@pytest.mark.parametrize("index, flags, want", [
    (0, BPF_NOEXIST, errno.EEXIST),
    (3, BPF_ANY, errno.E2BIG),
    (3, BPF_NOEXIST, errno.E2BIG),  # the range test comes before NOEXIST
    (0, 3, errno.EINVAL),
    (5, 3, errno.EINVAL),  # unknown flags come first
])
@pytest.mark.parametrize("map_type", [MapType.ARRAY, MapType.PERCPU_ARRAY])
def test_array_update_errors(maps, map_type, index, flags, want):
    fd = maps.create(map_type, 4, 8, 3)
    value = bytes(8 * maps.sys.num_possible_cpus if map_type == MapType.PERCPU_ARRAY else 8)
    assert err_of(maps.sys.map_update_elem, fd, u32(index), value, flags) == want


@pytest.mark.parametrize("map_type", [MapType.ARRAY, MapType.PERCPU_ARRAY])
def test_array_delete_gives_einval_and_lookup_and_delete_enotsupp(maps, map_type):
    fd = maps.create(map_type, 4, 8, 3)
    assert err_of(maps.sys.map_delete_elem, fd, u32(0)) == errno.EINVAL
    assert err_of(maps.sys.map_lookup_and_delete_elem, fd, u32(0)) == ENOTSUPP


def test_array_get_next_key_walks_every_index_and_restarts_out_of_range(maps):
    fd = maps.create(MapType.ARRAY, 4, 4, 3)
    assert list(iter_keys(maps.sys, fd)) == [u32(0), u32(1), u32(2)]
    assert maps.sys.map_get_next_key(fd, u32(7)) == u32(0)
    assert err_of(maps.sys.map_get_next_key, fd, u32(2)) == errno.ENOENT


def test_percpu_array_syscall_value_has_every_cpus_padded_slot(maps):
    ncpus = maps.sys.num_possible_cpus
    fd = maps.create(MapType.PERCPU_ARRAY, 4, 4, 2)
    assert maps.sys.map_lookup_elem(fd, u32(1)) == bytes(8 * ncpus)
    # Padding bytes of each slot are stored and come back.
    value = b"".join(struct.pack("<II", cpu + 1, 0xA0 + cpu) for cpu in range(ncpus))
    maps.sys.map_update_elem(fd, u32(1), value)
    assert maps.sys.map_lookup_elem(fd, u32(1)) == value


def test_array_batch_lookup_and_delete_batch_is_enotsupp(maps):
    fd = maps.create(MapType.ARRAY, 4, 4, 3)
    assert err_of(maps.sys.map_lookup_and_delete_batch, fd, None, 3) == ENOTSUPP
    assert err_of(maps.sys.map_delete_batch, fd, [u32(0)]) == ENOTSUPP


# ----------------------------------------------------------------------------------------------
# PROG_ARRAY and ARRAY_OF_MAPS (fd arrays)
# ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("map_type", [MapType.PROG_ARRAY, MapType.ARRAY_OF_MAPS])
def test_fd_array_needs_value_size_4(maps, map_type):
    inner = maps.create(MapType.ARRAY, 4, 4, 1)
    assert maps.create_errno(map_type, 4, 8, 4, inner_map_fd=inner) == errno.EINVAL


def test_prog_array_rejects_prog_access_flags(maps):
    assert maps.create_errno(MapType.PROG_ARRAY, 4, 4, 4,
                             map_flags=BPF_F_RDONLY_PROG) == errno.EINVAL


def test_prog_array_empty_slot_lookup_and_delete(maps):
    fd = maps.create(MapType.PROG_ARRAY, 4, 4, 2)
    assert err_of(maps.sys.map_lookup_elem, fd, u32(0)) == errno.ENOENT
    assert err_of(maps.sys.map_delete_elem, fd, u32(0)) == errno.ENOENT
    assert err_of(maps.sys.map_delete_elem, fd, u32(2)) == errno.E2BIG
    assert err_of(maps.sys.map_lookup_elem, fd, u32(2)) == errno.ENOENT


def test_prog_array_update_checks_flags_then_range_then_fd(maps):
    fd = maps.create(MapType.PROG_ARRAY, 4, 4, 2)
    not_a_prog = maps.create(MapType.ARRAY, 4, 4, 1)
    assert err_of(maps.sys.map_update_elem, fd, u32(0), u32(not_a_prog), BPF_NOEXIST) \
        == errno.EINVAL
    assert err_of(maps.sys.map_update_elem, fd, u32(2), u32(not_a_prog)) == errno.E2BIG
    assert err_of(maps.sys.map_update_elem, fd, u32(0), u32(not_a_prog)) == errno.EINVAL


def test_array_of_maps_create_checks_inner_map(maps):
    prog_array = maps.create(MapType.PROG_ARRAY, 4, 4, 1)
    assert maps.create_errno(MapType.ARRAY_OF_MAPS, 4, 4, 2,
                             inner_map_fd=prog_array) == ENOTSUPP
    inner = maps.create(MapType.ARRAY, 4, 4, 1)
    outer = maps.create(MapType.ARRAY_OF_MAPS, 4, 4, 2, inner_map_fd=inner)
    assert maps.create_errno(MapType.ARRAY_OF_MAPS, 4, 4, 2, inner_map_fd=outer) == errno.EINVAL
    assert maps.create_errno(MapType.ARRAY_OF_MAPS, 4, 4, 2,
                             inner_map_fd=999_999) == errno.EBADF


def test_array_of_maps_value_size_error_wins_over_inner_fd(maps):
    assert maps.create_errno(MapType.ARRAY_OF_MAPS, 4, 8, 2,
                             inner_map_fd=999_999) == errno.EINVAL


def test_array_of_maps_lookup_gives_inner_id_and_holds_a_reference(maps):
    sys = maps.sys
    template = maps.create(MapType.ARRAY, 4, 4, 1)
    outer = maps.create(MapType.ARRAY_OF_MAPS, 4, 4, 2, inner_map_fd=template)
    inner = sys.map_create(MapType.ARRAY, 4, 4, 1)
    inner_id = sys.map_get_info(inner).id
    sys.map_update_elem(outer, u32(1), u32(inner))
    sys.close(inner)  # the outer map keeps the inner one alive
    assert sys.map_lookup_elem(outer, u32(1)) == u32(inner_id)
    again = sys.map_get_fd_by_id(inner_id)
    maps.fds.append(again)
    assert err_of(sys.map_lookup_elem, outer, u32(0)) == errno.ENOENT
    sys.map_delete_elem(outer, u32(1))
    assert err_of(sys.map_delete_elem, outer, u32(1)) == errno.ENOENT
    assert err_of(sys.map_delete_elem, outer, u32(2)) == errno.E2BIG


def test_array_of_maps_inner_array_max_entries_must_match_unless_inner_map_flag(maps):
    sys = maps.sys
    strict = maps.create(MapType.ARRAY, 4, 4, 4)
    outer = maps.create(MapType.ARRAY_OF_MAPS, 4, 4, 2, inner_map_fd=strict)
    bigger = maps.create(MapType.ARRAY, 4, 4, 8)
    assert err_of(sys.map_update_elem, outer, u32(0), u32(bigger)) == errno.EINVAL
    loose = maps.create(MapType.ARRAY, 4, 4, 4, map_flags=BPF_F_INNER_MAP)
    outer2 = maps.create(MapType.ARRAY_OF_MAPS, 4, 4, 2, inner_map_fd=loose)
    bigger_loose = maps.create(MapType.ARRAY, 4, 4, 8, map_flags=BPF_F_INNER_MAP)
    sys.map_update_elem(outer2, u32(0), u32(bigger_loose))
    # Flags must still match exactly.
    assert err_of(sys.map_update_elem, outer2, u32(0), u32(bigger)) == errno.EINVAL


def test_array_of_maps_inner_of_other_shape_gives_einval(maps):
    sys = maps.sys
    template = maps.create(MapType.ARRAY, 4, 4, 4)
    outer = maps.create(MapType.ARRAY_OF_MAPS, 4, 4, 2, inner_map_fd=template)
    other_value = maps.create(MapType.ARRAY, 4, 8, 4)
    queue = maps.create(MapType.QUEUE, 0, 4, 4)
    assert err_of(sys.map_update_elem, outer, u32(0), u32(other_value)) == errno.EINVAL
    assert err_of(sys.map_update_elem, outer, u32(0), u32(queue)) == errno.EINVAL
    assert err_of(sys.map_update_elem, outer, u32(0), u32(999_999)) == errno.EBADF


def test_array_of_maps_update_flags_and_range(maps):
    sys = maps.sys
    template = maps.create(MapType.ARRAY, 4, 4, 4)
    outer = maps.create(MapType.ARRAY_OF_MAPS, 4, 4, 2, inner_map_fd=template)
    assert err_of(sys.map_update_elem, outer, u32(0), u32(template), BPF_EXIST) == errno.EINVAL
    assert err_of(sys.map_update_elem, outer, u32(2), u32(template)) == errno.E2BIG
    assert err_of(sys.map_update_elem, outer, u32(2), u32(999_999)) == errno.E2BIG


def test_inner_map_of_any_non_array_type_may_differ_in_max_entries(maps):
    sys = maps.sys
    template = maps.create(MapType.QUEUE, 0, 4, 4)
    outer = maps.create(MapType.ARRAY_OF_MAPS, 4, 4, 2, inner_map_fd=template)
    bigger = maps.create(MapType.QUEUE, 0, 4, 64)
    sys.map_update_elem(outer, u32(0), u32(bigger))
    assert sys.map_lookup_elem(outer, u32(0)) == u32(sys.map_get_info(bigger).id)


# ----------------------------------------------------------------------------------------------
# QUEUE / STACK
# ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("map_type", [MapType.QUEUE, MapType.STACK])
@pytest.mark.parametrize("key_size, value_size, max_entries, flags, want", [
    (0, 4, 0, 0, errno.EINVAL),
    (4, 4, 1, 0, errno.EINVAL),
    (0, 0, 1, 0, errno.EINVAL),
    (0, 4, 1, BPF_F_NO_PREALLOC, errno.EINVAL),
    (0, 4, 1, BPF_F_RDONLY_PROG | BPF_F_WRONLY_PROG, errno.EINVAL),
    (0, KMALLOC_MAX_SIZE + 1, 1, 0, errno.E2BIG),
])
def test_queue_stack_create_rejects_bad_attributes(maps, map_type, key_size, value_size,
                                                   max_entries, flags, want):
    assert maps.create_errno(map_type, key_size, value_size, max_entries,
                             map_flags=flags) == want


@pytest.mark.parametrize("map_type, order", [(MapType.QUEUE, [1, 2, 3]),
                                             (MapType.STACK, [3, 2, 1])])
def test_queue_stack_pop_order(maps, map_type, order):
    sys = maps.sys
    fd = maps.create(map_type, 0, 4, 3)
    for i in (1, 2, 3):
        sys.map_update_elem(fd, None, u32(i))
    assert sys.map_lookup_elem(fd, None) == u32(order[0])  # peek leaves it there
    assert [sys.map_lookup_and_delete_elem(fd, None) for _ in range(3)] == \
        [u32(i) for i in order]
    assert err_of(sys.map_lookup_and_delete_elem, fd, None) == errno.ENOENT
    assert err_of(sys.map_lookup_elem, fd, None) == errno.ENOENT


@pytest.mark.parametrize("map_type, after", [(MapType.QUEUE, [2, 3, 4]),
                                             (MapType.STACK, [4, 3, 2])])
def test_queue_stack_full_gives_e2big_unless_exist_drops_oldest(maps, map_type, after):
    sys = maps.sys
    fd = maps.create(map_type, 0, 4, 3)
    for i in (1, 2, 3):
        sys.map_update_elem(fd, None, u32(i))
    assert err_of(sys.map_update_elem, fd, None, u32(4)) == errno.E2BIG
    sys.map_update_elem(fd, None, u32(4), BPF_EXIST)
    assert [sys.map_lookup_and_delete_elem(fd, None) for _ in range(3)] == \
        [u32(i) for i in after]


@pytest.mark.parametrize("map_type", [MapType.QUEUE, MapType.STACK])
def test_queue_stack_element_errors(maps, map_type):
    sys = maps.sys
    fd = maps.create(map_type, 0, 4, 3)
    assert err_of(sys.map_update_elem, fd, None, u32(1), BPF_NOEXIST) == errno.EINVAL
    assert err_of(sys.map_update_elem, fd, None, u32(1), 3) == errno.EINVAL
    assert err_of(sys.map_delete_elem, fd, None) == errno.EINVAL
    assert err_of(sys.map_get_next_key, fd, None) == errno.EINVAL
    sys.map_update_elem(fd, None, u32(1))
    assert err_of(sys.map_lookup_and_delete_elem, fd, None, 4) == errno.EINVAL
    assert err_of(sys.map_lookup_batch, fd, None, 4) == ENOTSUPP


# ----------------------------------------------------------------------------------------------
# LPM_TRIE
# ----------------------------------------------------------------------------------------------

def lpm_key(prefixlen: int, *octets: int) -> bytes:
    return struct.pack("<I", prefixlen) + bytes(octets)


@pytest.mark.parametrize("key_size, value_size, max_entries, flags, want", [
    (8, 4, 1, 0, errno.EINVAL),  # BPF_F_NO_PREALLOC is required
    (8, 4, 0, BPF_F_NO_PREALLOC, errno.EINVAL),
    (4, 4, 1, BPF_F_NO_PREALLOC, errno.EINVAL),
    (261, 4, 1, BPF_F_NO_PREALLOC, errno.EINVAL),
    (8, 0, 1, BPF_F_NO_PREALLOC, errno.EINVAL),
    (8, KMALLOC_MAX_SIZE, 1, BPF_F_NO_PREALLOC, errno.EINVAL),
    (8, 4, 1, BPF_F_NO_PREALLOC | BPF_F_ZERO_SEED, errno.EINVAL),
])
def test_lpm_create_rejects_bad_attributes(maps, key_size, value_size, max_entries, flags, want):
    assert maps.create_errno(MapType.LPM_TRIE, key_size, value_size, max_entries,
                             map_flags=flags) == want


def test_lpm_lookup_is_longest_prefix_match(maps):
    sys = maps.sys
    fd = maps.create(MapType.LPM_TRIE, 8, 4, 16, map_flags=BPF_F_NO_PREALLOC)
    sys.map_update_elem(fd, lpm_key(16, 192, 168, 0, 0), b"p16\0")
    sys.map_update_elem(fd, lpm_key(24, 192, 168, 1, 0), b"p24\0")
    assert sys.map_lookup_elem(fd, lpm_key(32, 192, 168, 1, 9)) == b"p24\0"
    assert sys.map_lookup_elem(fd, lpm_key(32, 192, 168, 2, 9)) == b"p16\0"
    assert sys.map_lookup_elem(fd, lpm_key(20, 192, 168, 1, 9)) == b"p16\0"
    assert err_of(sys.map_lookup_elem, fd, lpm_key(32, 10, 0, 0, 1)) == errno.ENOENT
    assert err_of(sys.map_lookup_elem, fd, lpm_key(33, 192, 168, 1, 9)) == errno.ENOENT


def test_lpm_update_flags_capacity_and_replace(maps):
    sys = maps.sys
    fd = maps.create(MapType.LPM_TRIE, 8, 4, 2, map_flags=BPF_F_NO_PREALLOC)
    a, b, c = lpm_key(8, 10, 0, 0, 0), lpm_key(16, 10, 1, 0, 0), lpm_key(16, 10, 2, 0, 0)
    assert err_of(sys.map_update_elem, fd, a, b"xxxx", 4 | BPF_NOEXIST) == errno.EINVAL
    assert err_of(sys.map_update_elem, fd, lpm_key(33, 0, 0, 0, 0), b"xxxx") == errno.EINVAL
    assert err_of(sys.map_update_elem, fd, a, b"aaaa", BPF_EXIST) == errno.ENOENT
    sys.map_update_elem(fd, a, b"aaaa", BPF_NOEXIST)
    assert err_of(sys.map_update_elem, fd, a, b"AAAA", BPF_NOEXIST) == errno.EEXIST
    sys.map_update_elem(fd, b, b"bbbb")
    assert err_of(sys.map_update_elem, fd, c, b"cccc") == errno.ENOSPC
    sys.map_update_elem(fd, a, b"AAAA", BPF_EXIST)  # replacing works when full
    assert sys.map_lookup_elem(fd, a) == b"AAAA"


def test_lpm_delete_needs_exact_prefix(maps):
    sys = maps.sys
    fd = maps.create(MapType.LPM_TRIE, 8, 4, 4, map_flags=BPF_F_NO_PREALLOC)
    sys.map_update_elem(fd, lpm_key(16, 10, 1, 0, 0), b"bbbb")
    assert err_of(sys.map_delete_elem, fd, lpm_key(24, 10, 1, 0, 0)) == errno.ENOENT
    assert err_of(sys.map_delete_elem, fd, lpm_key(40, 10, 1, 0, 0)) == errno.EINVAL
    sys.map_delete_elem(fd, lpm_key(16, 10, 1, 99, 99))  # bits past the prefix do not count
    assert err_of(sys.map_get_next_key, fd, None) == errno.ENOENT


def test_lpm_get_next_key_is_post_order_with_stored_bits(maps):
    sys = maps.sys
    fd = maps.create(MapType.LPM_TRIE, 8, 4, 8, map_flags=BPF_F_NO_PREALLOC)
    for key in (lpm_key(16, 192, 168, 0, 0), lpm_key(24, 192, 168, 0, 0),
                lpm_key(24, 192, 168, 128, 0), lpm_key(24, 192, 168, 1, 77)):
        sys.map_update_elem(fd, key, b"vvvv")
    assert list(iter_keys(sys, fd)) == [lpm_key(24, 192, 168, 0, 0),
                                        lpm_key(24, 192, 168, 1, 77),
                                        lpm_key(24, 192, 168, 128, 0),
                                        lpm_key(16, 192, 168, 0, 0)]
    # A key that is not exactly present restarts at the leftmost element.
    assert sys.map_get_next_key(fd, lpm_key(8, 1, 2, 3, 4)) == lpm_key(24, 192, 168, 0, 0)
    assert sys.map_get_next_key(fd, lpm_key(99, 1, 2, 3, 4)) == lpm_key(24, 192, 168, 0, 0)


def test_lpm_lookup_and_delete_is_enotsupp(maps):
    fd = maps.create(MapType.LPM_TRIE, 8, 4, 2, map_flags=BPF_F_NO_PREALLOC)
    assert err_of(maps.sys.map_lookup_and_delete_elem, fd, lpm_key(8, 1, 0, 0, 0)) == ENOTSUPP


def _lpm_random_ops(sys, fd, seed: int, data_size: int) -> list:
    """Apply a seeded mix of updates and deletes; record every outcome and the final walk."""
    rng = random.Random(seed)
    log = []
    for _ in range(120):
        prefixlen = rng.randrange(0, 8 * data_size + 1)
        data = bytes(rng.choice((0, 0x80, 0xC0, 0xFF, rng.randrange(256)))
                     for _ in range(data_size))
        key = struct.pack("<I", prefixlen) + data
        op = rng.random()
        try:
            if op < 0.6:
                sys.map_update_elem(fd, key, struct.pack("<I", rng.randrange(1 << 32)),
                                    rng.choice((BPF_ANY, BPF_ANY, BPF_NOEXIST, BPF_EXIST)))
            elif op < 0.85:
                sys.map_delete_elem(fd, key)
            else:
                log.append(("lookup", sys.map_lookup_elem(fd, key)))
                continue
            log.append(("ok",))
        except OSError as e:
            log.append(("err", e.errno))
    log.append(("walk", list(iter_keys(sys, fd))))
    probes = [struct.pack("<I", 8 * data_size) + bytes(rng.randrange(256)
                                                       for _ in range(data_size))
              for _ in range(60)]
    for probe in probes:
        try:
            log.append(("probe", sys.map_lookup_elem(fd, probe)))
        except OSError as e:
            log.append(("probe-err", e.errno))
    return log


@pytest.mark.parametrize("seed", range(6))
def test_lpm_random_operations_match_the_kernel(kmaps, emaps, seed):
    logs = []
    for m in (kmaps, emaps):
        fd = m.create(MapType.LPM_TRIE, 6, 4, 24, map_flags=BPF_F_NO_PREALLOC)
        logs.append(_lpm_random_ops(m.sys, fd, seed, data_size=2))
    assert logs[1] == logs[0]


# ----------------------------------------------------------------------------------------------
# BLOOM_FILTER
# ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("map_type, key_size, value_size, max_entries, flags, extra, want", [
    (MapType.BLOOM_FILTER, 4, 4, 8, 0, 0, errno.EINVAL),
    (MapType.BLOOM_FILTER, 0, 0, 8, 0, 0, errno.EINVAL),
    (MapType.BLOOM_FILTER, 0, 4, 0, 0, 0, errno.EINVAL),
    (MapType.BLOOM_FILTER, 0, 4, 8, BPF_F_NO_PREALLOC, 0, errno.EINVAL),
    (MapType.BLOOM_FILTER, 0, 4, 8, 0, 0x10, errno.EINVAL),
    (MapType.BLOOM_FILTER, 4, KMALLOC_MAX_SIZE + 1, 8, 0, 0, errno.E2BIG),
    (MapType.ARRAY, 4, 4, 8, 0, 3, errno.EINVAL),  # map_extra is for bloom filters only
])
def test_bloom_create_rejects_bad_attributes(maps, map_type, key_size, value_size, max_entries,
                                             flags, extra, want):
    assert maps.create_errno(map_type, key_size, value_size, max_entries, map_flags=flags,
                             map_extra=extra) == want


def test_bloom_push_and_peek(maps):
    sys = maps.sys
    fd = maps.create(MapType.BLOOM_FILTER, 0, 8, 1000, map_extra=3)
    sys.map_update_elem(fd, None, b"present!")
    assert sys.map_lookup_elem(fd, None, value=b"present!") == b"present!"
    assert err_of(sys.map_lookup_elem, fd, None, value=b"missing!") == errno.ENOENT
    assert err_of(sys.map_update_elem, fd, None, b"xxxxxxxx", BPF_NOEXIST) == errno.EINVAL
    assert err_of(sys.map_update_elem, fd, None, b"xxxxxxxx", BPF_EXIST) == errno.EINVAL


def test_bloom_delete_and_get_next_key_give_eopnotsupp_lookup_and_delete_enotsupp(maps):
    sys = maps.sys
    fd = maps.create(MapType.BLOOM_FILTER, 0, 4, 8)
    assert err_of(sys.map_delete_elem, fd, None) == errno.EOPNOTSUPP
    assert err_of(sys.map_get_next_key, fd, None) == errno.EOPNOTSUPP
    assert err_of(sys.map_lookup_and_delete_elem, fd, None) == ENOTSUPP
    assert err_of(sys.map_lookup_batch, fd, None, 4) == ENOTSUPP


@pytest.mark.parametrize("value_size, max_entries, nr_hashes", [(4, 3, 1), (8, 5, 2),
                                                                (5, 4, 1), (3, 40, 4)])
def test_bloom_zero_seed_false_positives_match_the_kernel(kmaps, emaps, value_size,
                                                          max_entries, nr_hashes):
    """With BPF_F_ZERO_SEED both set the same bits: the same values test positive."""
    rng = random.Random(value_size * 1000 + max_entries)
    pushed = [rng.randbytes(value_size) for _ in range(max_entries)]
    probes = [rng.randbytes(value_size) for _ in range(300)]
    answers = []
    for m in (kmaps, emaps):
        fd = m.create(MapType.BLOOM_FILTER, 0, value_size, max_entries,
                      map_flags=BPF_F_ZERO_SEED, map_extra=nr_hashes)
        for value in pushed:
            m.sys.map_update_elem(fd, None, value)
        hits = []
        for probe in probes:
            try:
                m.sys.map_lookup_elem(fd, None, value=probe)
                hits.append(True)
            except OSError as e:
                assert e.errno == errno.ENOENT
                hits.append(False)
        answers.append(hits)
    assert answers[1] == answers[0]
    assert any(answers[0]) and not all(answers[0])  # the probes exercise both outcomes


# ----------------------------------------------------------------------------------------------
# RINGBUF
# ----------------------------------------------------------------------------------------------

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


# ----------------------------------------------------------------------------------------------
# DEVMAP / DEVMAP_HASH
# ----------------------------------------------------------------------------------------------

LO = 1  # the loopback device, on the host and on the emulated machine


def devval(ifindex: int, prog: int = 0, size: int = 8) -> bytes:
    return struct.pack("<Ii", ifindex, prog)[:size]


@pytest.mark.parametrize("map_type", [MapType.DEVMAP, MapType.DEVMAP_HASH])
@pytest.mark.parametrize("key_size, value_size, max_entries, flags, want", [
    (4, 4, 0, 0, errno.EINVAL),
    (8, 4, 1, 0, errno.EINVAL),
    (4, 6, 1, 0, errno.EINVAL),
    (4, 4, 1, BPF_F_RDONLY_PROG, errno.EINVAL),
    (4, 4, 1, BPF_F_NO_PREALLOC, errno.EINVAL),
])
def test_devmap_create_rejects_bad_attributes(maps, map_type, key_size, value_size,
                                              max_entries, flags, want):
    assert maps.create_errno(map_type, key_size, value_size, max_entries,
                             map_flags=flags) == want


@pytest.mark.parametrize("map_type", [MapType.DEVMAP, MapType.DEVMAP_HASH])
def test_devmap_gets_rdonly_prog_added_to_its_flags(maps, map_type):
    fd = maps.create(map_type, 4, 4, 4, map_flags=BPF_F_RDONLY)
    assert maps.sys.map_get_info(fd).map_flags == BPF_F_RDONLY_PROG


@pytest.mark.parametrize("value_size", [4, 8])
def test_devmap_update_lookup_delete(maps, value_size):
    sys = maps.sys
    fd = maps.create(MapType.DEVMAP, 4, value_size, 4)
    assert err_of(sys.map_lookup_elem, fd, u32(1)) == errno.ENOENT
    sys.map_update_elem(fd, u32(1), devval(LO, size=value_size))
    assert sys.map_lookup_elem(fd, u32(1)) == devval(LO, size=value_size)
    sys.map_update_elem(fd, u32(1), devval(0, size=value_size))  # ifindex 0 clears the slot
    assert err_of(sys.map_lookup_elem, fd, u32(1)) == errno.ENOENT
    sys.map_delete_elem(fd, u32(2))  # deleting an empty slot is fine
    assert err_of(sys.map_delete_elem, fd, u32(4)) == errno.EINVAL
    assert err_of(sys.map_lookup_elem, fd, u32(4)) == errno.ENOENT


def test_devmap_update_errors_in_kernel_order(maps):
    sys = maps.sys
    fd = maps.create(MapType.DEVMAP, 4, 8, 4)
    not_a_prog = maps.create(MapType.ARRAY, 4, 4, 1)
    assert err_of(sys.map_update_elem, fd, u32(9), devval(LO), 3) == errno.EINVAL
    assert err_of(sys.map_update_elem, fd, u32(9), devval(LO)) == errno.E2BIG
    assert err_of(sys.map_update_elem, fd, u32(0), devval(LO), BPF_NOEXIST) == errno.EEXIST
    assert err_of(sys.map_update_elem, fd, u32(0), devval(0, not_a_prog)) == errno.EINVAL
    assert err_of(sys.map_update_elem, fd, u32(0), devval(999_999)) == errno.EINVAL
    assert err_of(sys.map_update_elem, fd, u32(0), devval(LO, not_a_prog)) == errno.EINVAL


def test_devmap_get_next_key_walks_every_index(maps):
    fd = maps.create(MapType.DEVMAP, 4, 4, 3)
    assert list(iter_keys(maps.sys, fd)) == [u32(0), u32(1), u32(2)]


def test_devmap_hash_update_rules(maps):
    sys = maps.sys
    fd = maps.create(MapType.DEVMAP_HASH, 4, 4, 2)
    assert err_of(sys.map_update_elem, fd, u32(7), devval(0, size=4)) == errno.EINVAL
    assert err_of(sys.map_update_elem, fd, u32(7), devval(LO, size=4), 3) == errno.EINVAL
    sys.map_update_elem(fd, u32(7), devval(LO, size=4), BPF_EXIST)  # EXIST inserts
    assert err_of(sys.map_update_elem, fd, u32(7), devval(LO, size=4), BPF_NOEXIST) \
        == errno.EEXIST
    sys.map_update_elem(fd, u32(8), devval(LO, size=4))
    assert err_of(sys.map_update_elem, fd, u32(9), devval(999_999, size=4)) == errno.EINVAL
    assert err_of(sys.map_update_elem, fd, u32(9), devval(LO, size=4)) == errno.E2BIG
    sys.map_update_elem(fd, u32(8), devval(LO, size=4))  # replacing works when full
    assert err_of(sys.map_delete_elem, fd, u32(9)) == errno.ENOENT
    assert err_of(sys.map_lookup_elem, fd, u32(9)) == errno.ENOENT
    sys.map_delete_elem(fd, u32(7))
    assert list(iter_keys(sys, fd)) == [u32(8)]


def test_devmap_hash_iteration_order_matches_the_kernel(kmaps, emaps):
    walks = []
    for m in (kmaps, emaps):
        fd = m.create(MapType.DEVMAP_HASH, 4, 4, 8)
        for key in (1, 9, 17, 3, 2, 25, 9):
            m.sys.map_update_elem(fd, u32(key), devval(LO, size=4))
        walks.append(list(iter_keys(m.sys, fd)))
        walks.append(m.sys.map_get_next_key(fd, u32(4)))  # missing key: first again
    assert walks[2:] == walks[:2]


# ----------------------------------------------------------------------------------------------
# CPUMAP
# ----------------------------------------------------------------------------------------------

def host_nr_cpus() -> int:
    with open("/sys/devices/system/cpu/kernel_max") as f:
        return int(f.read()) + 1


@pytest.mark.parametrize("key_size, value_size, max_entries, flags, want", [
    (4, 4, 0, 0, errno.EINVAL),
    (8, 4, 1, 0, errno.EINVAL),
    (4, 12, 1, 0, errno.EINVAL),
    (4, 4, 1, BPF_F_RDONLY, errno.EINVAL),
    (4, 4, 1, BPF_F_NO_PREALLOC, errno.EINVAL),
])
def test_cpumap_create_rejects_bad_attributes(maps, key_size, value_size, max_entries, flags,
                                              want):
    assert maps.create_errno(MapType.CPUMAP, key_size, value_size, max_entries,
                             map_flags=flags) == want


def test_cpumap_more_entries_than_nr_cpus_gives_e2big(maps):
    nr = host_nr_cpus()
    maps.create(MapType.CPUMAP, 4, 4, nr)
    assert maps.create_errno(MapType.CPUMAP, 4, 4, nr + 1) == errno.E2BIG


def test_cpumap_update_lookup_delete(maps):
    sys = maps.sys
    ncpus = sys.num_possible_cpus
    fd = maps.create(MapType.CPUMAP, 4, 8, ncpus + 2)
    sys.map_update_elem(fd, u32(0), struct.pack("<Ii", 64, 0))
    assert sys.map_lookup_elem(fd, u32(0)) == struct.pack("<II", 64, 0)
    assert err_of(sys.map_lookup_elem, fd, u32(1 % ncpus + ncpus)) == errno.ENOENT
    sys.map_update_elem(fd, u32(0), struct.pack("<Ii", 0, 0))  # qsize 0 removes the entry
    assert err_of(sys.map_lookup_elem, fd, u32(0)) == errno.ENOENT
    sys.map_delete_elem(fd, u32(1))
    assert err_of(sys.map_delete_elem, fd, u32(ncpus + 2)) == errno.EINVAL
    assert list(iter_keys(sys, fd)) == [u32(i) for i in range(ncpus + 2)]


def test_cpumap_update_errors_in_kernel_order(maps):
    sys = maps.sys
    ncpus = sys.num_possible_cpus
    fd = maps.create(MapType.CPUMAP, 4, 8, ncpus + 1)
    not_a_prog = maps.create(MapType.ARRAY, 4, 4, 1)
    assert err_of(sys.map_update_elem, fd, u32(0), struct.pack("<Ii", 16385, 0), 3) \
        == errno.EINVAL
    assert err_of(sys.map_update_elem, fd, u32(ncpus + 1), struct.pack("<Ii", 16385, 0)) \
        == errno.E2BIG
    assert err_of(sys.map_update_elem, fd, u32(0), struct.pack("<Ii", 16, 0), BPF_NOEXIST) \
        == errno.EEXIST
    assert err_of(sys.map_update_elem, fd, u32(ncpus), struct.pack("<Ii", 16385, 0)) \
        == errno.EOVERFLOW
    assert err_of(sys.map_update_elem, fd, u32(ncpus), struct.pack("<Ii", 16, 0)) \
        == errno.ENODEV
    assert err_of(sys.map_update_elem, fd, u32(0), struct.pack("<Ii", 16, not_a_prog)) \
        == errno.ENOMEM


# ----------------------------------------------------------------------------------------------
# SOCKMAP / SOCKHASH
# ----------------------------------------------------------------------------------------------

@pytest.fixture
def sockets():
    """Sockets of every kind the sockmap rules look at; closed after the test."""
    made = []

    def make(kind: str):
        if kind == "tcp-established":
            lst = socket.create_server(("127.0.0.1", 0))
            cli = socket.create_connection(lst.getsockname())
            srv, _ = lst.accept()
            made.extend([lst, cli, srv])
            return cli
        if kind == "tcp-listen":
            sock = socket.create_server(("127.0.0.1", 0))
        elif kind == "tcp-unconnected":
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        elif kind == "tcp6-listen":
            sock = socket.create_server(("::1", 0), family=socket.AF_INET6)
        elif kind == "udp":
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            sock.bind(("127.0.0.1", 0))
        elif kind == "udp-unbound":
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        elif kind == "udplite":
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, 136)
        elif kind == "unix-stream-pair":
            sock, other = socket.socketpair()
            made.append(other)
        elif kind == "unix-stream-unconnected":
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        elif kind == "unix-stream-listen":
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.bind(f"\0pybpf-test-{os.getpid()}-{len(made)}")
            sock.listen()
        elif kind == "unix-dgram":
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        elif kind == "unix-seqpacket-pair":
            sock, other = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            made.append(other)
        elif kind == "netlink":
            sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)
        elif kind == "raw-icmp":
            try:
                sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
            except PermissionError:
                pytest.skip("a raw socket needs CAP_NET_RAW, which this process lacks")
        else:
            raise ValueError(kind)
        made.append(sock)
        return sock

    yield make
    for sock in made:
        sock.close()


def cookie(sock: socket.socket) -> bytes:
    return sock.getsockopt(socket.SOL_SOCKET, 57, 8)


def sockval(fd: int, size: int = 8) -> bytes:
    return fd.to_bytes(size, "little")


@pytest.mark.parametrize("map_type, key_size, value_size, max_entries, flags, want", [
    (MapType.SOCKMAP, 4, 8, 0, 0, errno.EINVAL),
    (MapType.SOCKMAP, 8, 8, 1, 0, errno.EINVAL),
    (MapType.SOCKMAP, 4, 6, 1, 0, errno.EINVAL),
    (MapType.SOCKMAP, 4, 8, 1, BPF_F_RDONLY_PROG, errno.EINVAL),
    (MapType.SOCKHASH, 0, 8, 1, 0, errno.EINVAL),
    (MapType.SOCKHASH, 513, 8, 1, 0, errno.E2BIG),
    (MapType.SOCKHASH, 4, 8, 1, BPF_F_NO_PREALLOC, errno.EINVAL),
])
def test_sockmap_create_rejects_bad_attributes(maps, map_type, key_size, value_size,
                                               max_entries, flags, want):
    assert maps.create_errno(map_type, key_size, value_size, max_entries,
                             map_flags=flags) == want


@pytest.mark.parametrize("kind, want", [
    ("tcp-established", 0), ("tcp-listen", 0), ("tcp6-listen", 0), ("udp", 0),
    ("unix-stream-pair", 0), ("unix-dgram", 0), ("tcp-unconnected", errno.EOPNOTSUPP),
    ("udp-unbound", errno.EOPNOTSUPP), ("udplite", errno.EOPNOTSUPP),
    ("unix-stream-unconnected", errno.EOPNOTSUPP), ("unix-stream-listen", errno.EOPNOTSUPP),
    ("unix-seqpacket-pair", errno.EOPNOTSUPP), ("raw-icmp", errno.EOPNOTSUPP),
    ("netlink", errno.EOPNOTSUPP),
])
@pytest.mark.parametrize("map_type", [MapType.SOCKMAP, MapType.SOCKHASH])
def test_sockmap_accepts_only_supported_sockets_in_allowed_states(maps, sockets, map_type,
                                                                  kind, want):
    sys = maps.sys
    fd = maps.create(map_type, 4, 8, 4)
    sock = sockets(kind)
    if want:
        assert err_of(sys.map_update_elem, fd, u32(0), sockval(sock.fileno())) == want
    else:
        sys.map_update_elem(fd, u32(0), sockval(sock.fileno()))
        assert sys.map_lookup_elem(fd, u32(0)) == cookie(sock)


@pytest.mark.parametrize("map_type", [MapType.SOCKMAP, MapType.SOCKHASH])
def test_sockmap_update_fd_errors(maps, map_type):
    sys = maps.sys
    fd = maps.create(map_type, 4, 8, 4)
    read_end, write_end = os.pipe()
    try:
        assert err_of(sys.map_update_elem, fd, u32(0), sockval(read_end)) == errno.ENOTSOCK
    finally:
        os.close(read_end)
        os.close(write_end)
    closed = os.open("/dev/null", os.O_RDONLY)
    os.close(closed)
    assert err_of(sys.map_update_elem, fd, u32(0), sockval(closed)) == errno.EBADF
    assert err_of(sys.map_update_elem, fd, u32(0), sockval(2**31)) == errno.EINVAL


def test_sockmap_update_flags_range_and_delete(maps, sockets):
    sys = maps.sys
    fd = maps.create(MapType.SOCKMAP, 4, 8, 2)
    sock = sockets("udp").fileno()
    assert err_of(sys.map_update_elem, fd, u32(0), sockval(sock), 3) == errno.EINVAL
    assert err_of(sys.map_update_elem, fd, u32(2), sockval(sock)) == errno.E2BIG
    assert err_of(sys.map_update_elem, fd, u32(0), sockval(sock), BPF_EXIST) == errno.ENOENT
    sys.map_update_elem(fd, u32(0), sockval(sock), BPF_NOEXIST)
    assert err_of(sys.map_update_elem, fd, u32(0), sockval(sock), BPF_NOEXIST) == errno.EEXIST
    sys.map_update_elem(fd, u32(0), sockval(sock), BPF_EXIST)
    assert err_of(sys.map_delete_elem, fd, u32(1)) == errno.EINVAL  # empty slot
    assert err_of(sys.map_delete_elem, fd, u32(2)) == errno.EINVAL
    sys.map_delete_elem(fd, u32(0))
    assert err_of(sys.map_lookup_elem, fd, u32(0)) == errno.ENOENT
    assert list(iter_keys(sys, fd)) == [u32(0), u32(1)]
    assert err_of(sys.map_lookup_and_delete_elem, fd, u32(0)) == ENOTSUPP


@pytest.mark.parametrize("map_type", [MapType.SOCKMAP, MapType.SOCKHASH])
def test_sockmap_lookup_with_4_byte_values_gives_enospc(maps, sockets, map_type):
    sys = maps.sys
    fd = maps.create(map_type, 4, 4, 2)
    sys.map_update_elem(fd, u32(0), sockval(sockets("udp").fileno(), 4))
    assert err_of(sys.map_lookup_elem, fd, u32(0)) == errno.ENOSPC
    assert err_of(sys.map_lookup_elem, fd, u32(1)) == errno.ENOSPC


@pytest.mark.parametrize("map_type", [MapType.SOCKMAP, MapType.SOCKHASH])
def test_closing_a_socket_removes_it_from_the_map(maps, map_type):
    sys = maps.sys
    fd = maps.create(map_type, 4, 8, 2)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sys.map_update_elem(fd, u32(1), sockval(sock.fileno()))
    sock.close()
    assert err_of(sys.map_lookup_elem, fd, u32(1)) == errno.ENOENT


def test_sockhash_capacity_and_delete(maps, sockets):
    sys = maps.sys
    fd = maps.create(MapType.SOCKHASH, 4, 8, 2)
    sock = sockets("udp").fileno()
    sys.map_update_elem(fd, u32(10), sockval(sock))
    sys.map_update_elem(fd, u32(11), sockval(sock))
    assert err_of(sys.map_update_elem, fd, u32(12), sockval(sock)) == errno.E2BIG
    sys.map_update_elem(fd, u32(11), sockval(sock))  # replacing works when full
    assert err_of(sys.map_delete_elem, fd, u32(12)) == errno.ENOENT
    sys.map_delete_elem(fd, u32(11))
    assert list(iter_keys(sys, fd)) == [u32(10)]


def test_sockhash_iteration_order_matches_the_kernel(kmaps, emaps, sockets):
    sock = sockets("udp").fileno()
    walks = []
    for m in (kmaps, emaps):
        fd = m.create(MapType.SOCKHASH, 6, 8, 16)
        for i in range(12):
            m.sys.map_update_elem(fd, struct.pack("<HI", i, i * 7919), sockval(sock))
        m.sys.map_update_elem(fd, struct.pack("<HI", 3, 3 * 7919), sockval(sock))
        walks.append(list(iter_keys(m.sys, fd)))
    assert walks[1] == walks[0]


# ----------------------------------------------------------------------------------------------
# HASH_OF_MAPS
# ----------------------------------------------------------------------------------------------

def test_hash_of_maps_create_checks(maps):
    inner = maps.create(MapType.ARRAY, 4, 4, 1)
    assert maps.create_errno(MapType.HASH_OF_MAPS, 4, 8, 4, inner_map_fd=inner) == errno.EINVAL
    prog_array = maps.create(MapType.PROG_ARRAY, 4, 4, 1)
    assert maps.create_errno(MapType.HASH_OF_MAPS, 4, 4, 4, inner_map_fd=prog_array) == ENOTSUPP
    assert maps.create_errno(MapType.HASH_OF_MAPS, 4, 4, 4, inner_map_fd=999_999) == errno.EBADF


def test_hash_of_maps_resolves_the_fd_before_checking_flags(maps):
    sys = maps.sys
    template = maps.create(MapType.ARRAY, 4, 4, 1)
    outer = maps.create(MapType.HASH_OF_MAPS, 4, 4, 2, inner_map_fd=template)
    assert err_of(sys.map_update_elem, outer, u32(1), u32(999_999), 3) == errno.EBADF
    assert err_of(sys.map_update_elem, outer, u32(1), u32(template), 3) == errno.EINVAL


def test_hash_of_maps_update_rules_and_ids(maps):
    sys = maps.sys
    template = maps.create(MapType.ARRAY, 4, 4, 1)
    outer = maps.create(MapType.HASH_OF_MAPS, 4, 4, 2, inner_map_fd=template)
    inner = sys.map_create(MapType.ARRAY, 4, 4, 1)
    inner_id = sys.map_get_info(inner).id
    assert err_of(sys.map_update_elem, outer, u32(1), u32(inner), BPF_EXIST) == errno.ENOENT
    sys.map_update_elem(outer, u32(1), u32(inner), BPF_NOEXIST)
    sys.close(inner)  # the outer map holds a reference
    assert sys.map_lookup_elem(outer, u32(1)) == u32(inner_id)
    assert err_of(sys.map_update_elem, outer, u32(1), u32(template), BPF_NOEXIST) \
        == errno.EEXIST
    sys.map_update_elem(outer, u32(2), u32(template))
    assert err_of(sys.map_update_elem, outer, u32(3), u32(template)) == errno.E2BIG
    assert err_of(sys.map_lookup_and_delete_elem, outer, u32(1)) == ENOTSUPP
    assert err_of(sys.map_delete_elem, outer, u32(3)) == errno.ENOENT
    assert err_of(sys.map_lookup_elem, outer, u32(3)) == errno.ENOENT
    again = sys.map_get_fd_by_id(inner_id)
    maps.fds.append(again)
    sys.map_delete_elem(outer, u32(1))
    assert err_of(sys.map_lookup_elem, outer, u32(1)) == errno.ENOENT
    assert sys.map_get_info(again).id == inner_id  # the fd taken by id keeps the inner map


def test_hash_of_maps_order_and_batch_match_the_kernel(kmaps, emaps):
    results = []
    for m in (kmaps, emaps):
        sys = m.sys
        template = m.create(MapType.ARRAY, 4, 4, 1)
        outer = m.create(MapType.HASH_OF_MAPS, 4, 4, 16, inner_map_fd=template,
                         map_flags=BPF_F_ZERO_SEED)
        for i in range(10):
            sys.map_update_elem(outer, u32(i * 37), u32(template))
        walk = list(iter_keys(sys, outer))
        batch = sys.map_lookup_batch(outer, None, 16)
        template_id = sys.map_get_info(template).id
        results.append((walk, batch.keys, batch.end,
                        all(v == u32(template_id) for v in batch.values)))
    assert results[1] == results[0]
    assert results[0][3]


# ----------------------------------------------------------------------------------------------
# Batches
# ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("map_type", [MapType.ARRAY, MapType.PERCPU_ARRAY])
def test_array_lookup_batch_walks_indices_with_key_tokens(maps, map_type):
    sys = maps.sys
    fd = maps.create(map_type, 4, 8, 3)
    first = sys.map_lookup_batch(fd, None, 2)
    assert first.keys == [u32(0), u32(1)] and not first.end
    assert first.out_batch == u32(1)
    rest = sys.map_lookup_batch(fd, first.out_batch, 2)
    assert rest.keys == [u32(2)] and rest.end


def test_array_update_batch_stops_at_the_first_error(maps):
    sys = maps.sys
    fd = maps.create(MapType.ARRAY, 4, 4, 2)
    with pytest.raises(OSError) as info:
        sys.map_update_batch(fd, [u32(0), u32(5), u32(1)], [b"aaaa", b"bbbb", b"cccc"])
    assert info.value.errno == errno.E2BIG
    assert info.value.count == 1
    assert sys.map_lookup_elem(fd, u32(0)) == b"aaaa"
    assert sys.map_lookup_elem(fd, u32(1)) == bytes(4)


def test_array_of_maps_lookup_batch_skips_empty_slots(maps):
    sys = maps.sys
    template = maps.create(MapType.ARRAY, 4, 4, 1)
    outer = maps.create(MapType.ARRAY_OF_MAPS, 4, 4, 4, inner_map_fd=template)
    sys.map_update_batch(outer, [u32(1), u32(3)], [u32(template), u32(template)])
    template_id = u32(sys.map_get_info(template).id)
    got = sys.map_lookup_batch(outer, None, 4)
    assert got.keys == [u32(1), u32(3)] and got.values == [template_id, template_id]
    assert got.end


def test_lpm_batches_lookup_update_delete(maps):
    sys = maps.sys
    fd = maps.create(MapType.LPM_TRIE, 8, 4, 8, map_flags=BPF_F_NO_PREALLOC)
    keys = [lpm_key(8, 10, 0, 0, 0), lpm_key(16, 10, 1, 0, 0), lpm_key(24, 10, 1, 2, 0)]
    assert sys.map_update_batch(fd, keys, [b"aaaa", b"bbbb", b"cccc"]) == 3
    got = sys.map_lookup_batch(fd, None, 8)
    assert got.keys == list(iter_keys(sys, fd)) and got.end
    assert sys.map_delete_batch(fd, keys[:2]) == 2
    assert err_of(sys.map_lookup_and_delete_batch, fd, None, 8) == ENOTSUPP


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


# ----------------------------------------------------------------------------------------------
# Programs in maps: PROG_ARRAY, DEVMAP and CPUMAP entries
# ----------------------------------------------------------------------------------------------

PACKET = bytes(range(64))


def load(m: Maps, prog_type: int, items, attach_type: int = 0) -> int:
    insns = encode(assemble(items).instructions)
    fd = m.sys.prog_load(prog_type, insns, expected_attach_type=attach_type)
    m.fds.append(fd)
    return fd


def returning(value: int):
    return [mov64(R0, value), exit_()]


def test_prog_array_lookup_gives_the_program_id(maps):
    sys = maps.sys
    table = maps.create(MapType.PROG_ARRAY, 4, 4, 2)
    prog = load(maps, ProgType.XDP, returning(7))
    sys.map_update_elem(table, u32(1), u32(prog))
    assert sys.map_lookup_elem(table, u32(1)) == u32(sys.prog_get_info(prog).id)
    other = load(maps, ProgType.SOCKET_FILTER, returning(0))
    assert err_of(sys.map_update_elem, table, u32(0), u32(other)) == errno.EINVAL


def test_tail_call_runs_the_stored_program_or_falls_through(maps):
    sys = maps.sys
    table = maps.create(MapType.PROG_ARRAY, 4, 4, 2)
    target = load(maps, ProgType.XDP, returning(7))
    caller = load(maps, ProgType.XDP, [ld_map_fd(R2, table), mov64(R3, 0), call("tail_call"),
                                       mov64(R0, 1), exit_()])
    assert sys.prog_test_run(caller, PACKET).retval == 1
    sys.map_update_elem(table, u32(0), u32(target))
    assert sys.prog_test_run(caller, PACKET).retval == 7
    sys.map_delete_elem(table, u32(0))
    assert sys.prog_test_run(caller, PACKET).retval == 1


@pytest.mark.parametrize("map_type", [MapType.DEVMAP, MapType.DEVMAP_HASH])
def test_devmap_entry_program_must_be_attached_as_xdp_devmap(maps, map_type):
    sys = maps.sys
    fd = maps.create(map_type, 4, 8, 4)
    prog = load(maps, ProgType.XDP, returning(2), AttachType.XDP_DEVMAP)
    sys.map_update_elem(fd, u32(1), devval(LO, prog))
    assert sys.map_lookup_elem(fd, u32(1)) == struct.pack("<II", LO, sys.prog_get_info(prog).id)
    plain = load(maps, ProgType.XDP, returning(2))
    assert err_of(sys.map_update_elem, fd, u32(1), devval(LO, plain)) == errno.EINVAL


def test_cpumap_entry_program_must_be_attached_as_xdp_cpumap(maps):
    sys = maps.sys
    fd = maps.create(MapType.CPUMAP, 4, 8, 1)
    prog = load(maps, ProgType.XDP, returning(2), AttachType.XDP_CPUMAP)
    sys.map_update_elem(fd, u32(0), struct.pack("<Ii", 32, prog))
    assert sys.map_lookup_elem(fd, u32(0)) == struct.pack("<II", 32, sys.prog_get_info(prog).id)
    plain = load(maps, ProgType.XDP, returning(2))
    assert err_of(sys.map_update_elem, fd, u32(0), struct.pack("<Ii", 32, plain)) \
        == errno.ENOMEM


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


def test_hash_of_maps_replacement_keeps_the_elements_position(kmaps, emaps):
    walks = []
    for m in (kmaps, emaps):
        sys = m.sys
        template = m.create(MapType.ARRAY, 4, 4, 1)
        outer = m.create(MapType.HASH_OF_MAPS, 4, 4, 1, inner_map_fd=template,
                         map_flags=BPF_F_ZERO_SEED)
        other = m.create(MapType.ARRAY, 4, 4, 1)
        bigger = m.create(MapType.HASH_OF_MAPS, 4, 4, 2, inner_map_fd=template,
                          map_flags=BPF_F_ZERO_SEED)
        for fd in (outer, bigger):
            for key in (1, 2):
                try:
                    sys.map_update_elem(fd, u32(key), u32(template))
                except OSError as e:
                    walks.append(e.errno)
            sys.map_update_elem(fd, u32(1), u32(other))  # replaced in place even when full
            walks.append(list(iter_keys(sys, fd)))
    assert walks[len(walks) // 2:] == walks[:len(walks) // 2]


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


def test_perf_event_array_rules(maps):
    sys = maps.sys
    assert maps.create_errno(MapType.PERF_EVENT_ARRAY, 4, 8, 4) == errno.EINVAL
    assert maps.create_errno(MapType.PERF_EVENT_ARRAY, 4, 4, 4,
                             map_flags=BPF_F_RDONLY_PROG) == errno.EINVAL
    fd = maps.create(MapType.PERF_EVENT_ARRAY, 4, 4, 4, map_flags=BPF_F_PRESERVE_ELEMS)
    not_a_perf_event = maps.create(MapType.ARRAY, 4, 4, 1)
    assert err_of(sys.map_lookup_elem, fd, u32(0)) == ENOTSUPP
    assert err_of(sys.map_lookup_elem, fd, u32(9)) == ENOTSUPP
    assert err_of(sys.map_update_elem, fd, u32(0), u32(not_a_perf_event), BPF_NOEXIST) \
        == errno.EINVAL
    assert err_of(sys.map_update_elem, fd, u32(9), u32(not_a_perf_event)) == errno.E2BIG
    assert err_of(sys.map_update_elem, fd, u32(0), u32(not_a_perf_event)) == errno.EBADF
    assert err_of(sys.map_update_elem, fd, u32(0), u32(999_999)) == errno.EBADF
    assert err_of(sys.map_delete_elem, fd, u32(0)) == errno.ENOENT
    assert err_of(sys.map_delete_elem, fd, u32(9)) == errno.E2BIG
    assert err_of(sys.map_lookup_and_delete_elem, fd, u32(0)) == ENOTSUPP
    assert err_of(sys.map_lookup_batch, fd, None, 4) == ENOTSUPP
    assert list(iter_keys(sys, fd)) == [u32(i) for i in range(4)]


def test_hash_of_maps_lookup_and_delete_batch_gives_ids_and_lets_inner_maps_go(maps):
    sys = maps.sys
    template = maps.create(MapType.ARRAY, 4, 4, 1)
    outer = maps.create(MapType.HASH_OF_MAPS, 4, 4, 4, inner_map_fd=template)
    inner = sys.map_create(MapType.ARRAY, 4, 4, 1)
    inner_id = sys.map_get_info(inner).id
    sys.map_update_batch(outer, [u32(1), u32(2)], [u32(inner), u32(inner)])
    sys.close(inner)
    got = sys.map_lookup_and_delete_batch(outer, None, 4)
    assert sorted(got.keys) == [u32(1), u32(2)] and got.values == [u32(inner_id)] * 2
    assert err_of(sys.map_get_next_key, outer, None) == errno.ENOENT
    assert map_is_freed(sys, inner_id)


def map_is_freed(sys, map_id: int) -> bool:
    """True when no map has ``map_id``. The kernel frees the id as the last reference goes
    (bpf_map_put), before the call that dropped it returns; only the memory waits for RCU."""
    try:
        sys.close(sys.map_get_fd_by_id(map_id))
    except OSError as e:
        assert e.errno == errno.ENOENT
        return True
    return False
