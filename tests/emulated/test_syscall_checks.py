"""The emulated system's command checks: order of errors, fds, ids, refcounts, pins."""

from __future__ import annotations

import errno

import pytest

from helpers import errno_of, u32
from pybpf import system
from pybpf.errors import BPFError, KeyNotFoundError
from pybpf.uapi import (
    BPF_F_NUMA_NODE,
    BPF_F_RDONLY,
    BPF_F_WRONLY,
    ENOTSUPP,
    MapType,
)

T = MapType


@pytest.fixture
def sys():
    return system("emulated", cpus=2)


def test_lookup_flags_are_checked_before_the_fd(sys):
    assert errno_of(sys.map_lookup_elem, 999, u32(0), 8) == errno.EINVAL
    assert errno_of(sys.map_lookup_elem, 999, u32(0)) == errno.EBADF


def test_an_fd_that_is_not_a_map_gives_einval(sys):
    fd = sys.fd_install(object())
    assert errno_of(sys.map_lookup_elem, fd, u32(0)) == errno.EINVAL


def test_wrong_key_or_value_length_gives_einval_with_the_expected_size(sys):
    fd = sys.map_create(T.HASH, 4, 8, 4)
    with pytest.raises(BPFError) as info:
        sys.map_update_elem(fd, b"abc", bytes(8))
    assert info.value.errno == errno.EINVAL and "key_size is 4" in str(info.value)
    with pytest.raises(BPFError) as info:
        sys.map_update_elem(fd, u32(0), bytes(7))
    assert info.value.errno == errno.EINVAL and "takes 8" in str(info.value)
    pfd = sys.map_create(T.PERCPU_HASH, 4, 3, 4)
    with pytest.raises(BPFError, match="round_up"):
        sys.map_update_elem(pfd, u32(0), bytes(3))


def test_errors_name_the_command_and_the_map(sys):
    fd = sys.map_create(T.HASH, 4, 8, 4, map_name=b"flows")
    with pytest.raises(KeyNotFoundError) as info:
        sys.map_lookup_elem(fd, u32(1))
    text = str(info.value)
    assert "map lookup elem" in text and "'flows'" in text and "ENOENT" in text


def test_rdonly_and_wronly_fds_and_frozen_maps_give_eperm(sys):
    ro = sys.map_create(T.HASH, 4, 8, 4, map_flags=BPF_F_RDONLY)
    wo = sys.map_create(T.HASH, 4, 8, 4, map_flags=BPF_F_WRONLY)
    assert errno_of(sys.map_update_elem, ro, u32(0), bytes(8)) == errno.EPERM
    assert errno_of(sys.map_lookup_elem, wo, u32(0)) == errno.EPERM
    assert errno_of(sys.map_get_next_key, wo, None) == errno.EPERM
    assert errno_of(sys.map_lookup_and_delete_elem, ro, u32(0)) == errno.EPERM
    assert sys.map_get_info(ro).map_flags == 0  # RDONLY/WRONLY are not kept
    rw = sys.map_get_fd_by_id(sys.map_get_info(ro).id)  # another fd, read-write
    sys.map_update_elem(rw, u32(0), bytes(8))
    sys.map_freeze(rw)
    assert errno_of(sys.map_update_elem, rw, u32(1), bytes(8)) == errno.EPERM
    assert errno_of(sys.map_freeze, rw) == errno.EPERM


@pytest.mark.parametrize("kwargs,err", [
    # map_extra is checked before RDONLY+WRONLY, which is checked before NUMA, before the type
    (dict(map_type=T.HASH, map_flags=BPF_F_RDONLY | BPF_F_WRONLY, map_extra=1), errno.EINVAL),
    (dict(map_type=999, map_flags=BPF_F_NUMA_NODE, numa_node=5), errno.EINVAL),
    (dict(map_type=T.HASH, map_flags=BPF_F_NUMA_NODE, numa_node=1), errno.EINVAL),
    (dict(map_type=T.HASH, numa_node=7), 0),  # ignored without the flag
    (dict(map_type=T.HASH, map_flags=BPF_F_NUMA_NODE, numa_node=0xFFFFFFFF), 0),
    # the name is checked after allocation: a type error wins over a bad name
    (dict(map_type=T.HASH, max_entries=0, map_name=b"bad name"), errno.EINVAL),
    (dict(map_type=T.HASH, max_entries=1 << 28, map_name=b"bad name"), errno.E2BIG),
    (dict(map_type=T.HASH, map_name=b"bad name"), errno.EINVAL),
    (dict(map_type=T.HASH, map_name=b"x" * 16), errno.EINVAL),
    (dict(map_type=T.LRU_HASH, map_flags=1), ENOTSUPP),
    (dict(map_type=T.PERCPU_HASH, map_flags=BPF_F_NUMA_NODE, numa_node=0), errno.EINVAL),
])
def test_map_create_checks_in_the_kernels_order(sys, kwargs, err):
    args = dict(key_size=4, value_size=8, max_entries=4) | kwargs
    map_type = args.pop("map_type")
    assert errno_of(sys.map_create, map_type, args.pop("key_size"), args.pop("value_size"),
                  args.pop("max_entries"), **args) == err


def test_declared_numa_nodes_are_valid_targets():
    sys = system("emulated", cpus=4, nodes=2)
    fd = sys.map_create(T.HASH, 4, 8, 4, map_flags=BPF_F_NUMA_NODE, numa_node=1)
    assert sys.map_stats(fd)["numa_node"] == 1
    assert sys.map_get_info(fd).map_flags == BPF_F_NUMA_NODE


def test_ids_fds_and_refcounts(sys):
    fd = sys.map_create(T.HASH, 4, 8, 4)
    map_id = sys.map_get_info(fd).id
    assert sys.map_get_next_id(0) == map_id
    other = sys.map_get_fd_by_id(map_id, BPF_F_RDONLY)
    assert errno_of(sys.map_update_elem, other, u32(0), bytes(8)) == errno.EPERM
    sys.close(fd)
    assert sys.map_get_info(other).id == map_id  # the second fd keeps it alive
    sys.close(other)
    assert errno_of(sys.map_get_fd_by_id, map_id) == errno.ENOENT
    assert errno_of(sys.close, other) == errno.EBADF
    assert errno_of(sys.map_get_next_id, 0) == errno.ENOENT
    assert errno_of(sys.map_get_fd_by_id, map_id, 0x40) == errno.EINVAL


def test_pins_hold_a_reference_and_follow_bpffs_rules(sys):
    fd = sys.map_create(T.HASH, 4, 8, 4)
    sys.map_update_elem(fd, u32(1), b"p" * 8)
    sys.obj_pin(fd, "/sys/fs/bpf/flows")
    assert errno_of(sys.obj_pin, fd, "/sys/fs/bpf/flows") == errno.EEXIST
    assert errno_of(sys.obj_pin, fd, "/tmp/flows") == errno.EPERM
    assert errno_of(sys.obj_get, "/sys/fs/bpf/missing") == errno.ENOENT
    sys.close(fd)
    again = sys.obj_get("/sys/fs/bpf/flows")
    assert sys.map_lookup_elem(again, u32(1)) == b"p" * 8
    ro = sys.obj_get("/sys/fs/bpf/flows", BPF_F_RDONLY)
    assert errno_of(sys.map_delete_elem, ro, u32(1)) == errno.EPERM
    sys.close(again)
    sys.close(ro)
    map_id = sys.map_get_next_id(0)
    sys.obj_unpin("/sys/fs/bpf/flows")
    assert errno_of(sys.map_get_fd_by_id, map_id) == errno.ENOENT
    assert sys.open_fds() == []


def test_batch_without_a_handler_gives_enotsupp_after_permissions(sys):
    fd = sys.map_create(T.HASH, 4, 8, 4, map_flags=BPF_F_WRONLY)
    assert errno_of(sys.map_lookup_batch, fd, None, 4) == errno.EPERM
    hfd = sys.map_create(T.HASH, 4, 8, 4)
    assert sys.map_update_batch(hfd, [u32(1), u32(2)], [bytes(8)] * 2) == 2
    with pytest.raises(BPFError) as info:
        sys.map_delete_batch(hfd, [u32(1), u32(3), u32(2)])
    assert (info.value.errno, info.value.count) == (errno.ENOENT, 1)
    assert errno_of(sys.map_update_batch, hfd, [u32(1)], [bytes(8)], 1) == errno.EINVAL


def test_system_delegates_cpus_to_the_machine():
    sys = system("emulated", cpus=3, nodes=3)
    assert sys.num_possible_cpus == 3 and sys.topology.num_nodes == 3
    with sys.on_cpu(2):
        assert sys.current_cpu() == 2 and sys.machine.current_cpu() == 2
    with pytest.raises(ValueError):
        with sys.on_cpu(3):
            pass


def test_pinned_program_outlives_its_fd_and_goes_with_the_pin(sys):
    from pybpf.uapi import ProgType

    exit0 = bytes.fromhex("b700000000000000" "9500000000000000")  # r0 = 0; exit
    fd = sys.prog_load(ProgType.SOCKET_FILTER, exit0)
    prog_id = sys.prog_get_info(fd).id
    sys.obj_pin(fd, "/sys/fs/bpf/prog")
    sys.close(fd)
    sys.close(sys.obj_get("/sys/fs/bpf/prog", BPF_F_RDONLY))  # 6.18 takes any access flag
    again = sys.obj_get("/sys/fs/bpf/prog")
    assert sys.prog_get_info(again).id == prog_id
    sys.close(again)
    sys.obj_unpin("/sys/fs/bpf/prog")
    assert sys.prog_ids() == [] and sys.open_fds() == []
