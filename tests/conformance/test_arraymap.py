"""Conformance of ARRAY, PERCPU_ARRAY, PROG_ARRAY and PERF_EVENT_ARRAY (kernel/bpf/arraymap.c), on
both backends.

Each test pins one kernel rule and runs against the real kernel (the oracle) and the emulated
backend through the ``backend`` fixture.
"""

from __future__ import annotations

import errno
import struct

import pytest

from helpers import err_of, u32
from pybpf.asm import R0, R2, R3, call, exit_, ld_map_fd, mov64
from pybpf.system import iter_keys
from pybpf.uapi import (
    BPF_ANY,
    BPF_EXIST,
    BPF_F_INNER_MAP,
    BPF_F_MMAPABLE,
    BPF_F_NO_PREALLOC,
    BPF_F_NUMA_NODE,
    BPF_F_PRESERVE_ELEMS,
    BPF_F_RDONLY_PROG,
    BPF_F_WRONLY_PROG,
    BPF_NOEXIST,
    ENOTSUPP,
    MapType,
    ProgType,
)

from .conftest import load, returning


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


PACKET = bytes(range(64))


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
