"""DEVMAP and DEVMAP_HASH on the emulated backend: declared network devices, XDP programs in
entries, bucket order and the program-side lookup."""

from __future__ import annotations

import errno
import struct
from types import SimpleNamespace

import pytest

from helpers import op_errno, u32
from pybpf.emulated import net_of
from pybpf.system import iter_keys
from pybpf.uapi import AttachType, MapType, ProgType


def xdp_prog(sys, attach_type: int, prog_id: int) -> int:
    return sys.fd_install(SimpleNamespace(prog_type=ProgType.XDP, prog_flags=0,
                                          expected_attach_type=attach_type, id=prog_id))


def test_only_the_machines_devices_can_be_stored(emulated):
    fd = emulated.map_create(MapType.DEVMAP, 4, 4, 4)
    with pytest.raises(OSError) as info:
        emulated.map_update_elem(fd, u32(0), u32(7))
    assert info.value.errno == errno.EINVAL
    net_of(emulated.machine).add_device("eth7", ifindex=7)
    emulated.map_update_elem(fd, u32(0), u32(7))
    assert emulated.map_lookup_elem(fd, u32(0)) == u32(7)


@pytest.mark.parametrize("map_type", [MapType.DEVMAP, MapType.DEVMAP_HASH])
def test_entry_with_a_devmap_xdp_program_reports_its_id(emulated, map_type):
    fd = emulated.map_create(map_type, 4, 8, 4)
    prog = xdp_prog(emulated, AttachType.XDP_DEVMAP, 33)
    emulated.map_update_elem(fd, u32(1), struct.pack("<Ii", 1, prog))
    assert emulated.map_lookup_elem(fd, u32(1)) == struct.pack("<II", 1, 33)
    wrong = xdp_prog(emulated, AttachType.XDP_CPUMAP, 34)
    with pytest.raises(OSError) as info:
        emulated.map_update_elem(fd, u32(1), struct.pack("<Ii", 1, wrong))
    assert info.value.errno == errno.EINVAL


def test_devmap_hash_buckets_by_key_newest_first(emulated):
    fd = emulated.map_create(MapType.DEVMAP_HASH, 4, 4, 4)
    for key in (1, 5, 2, 9):
        emulated.map_update_elem(fd, u32(key), u32(1))
    assert list(iter_keys(emulated, fd)) == [u32(9), u32(5), u32(1), u32(2)]
    emulated.map_update_elem(fd, u32(1), u32(1))  # a replaced entry moves to the front
    assert list(iter_keys(emulated, fd)) == [u32(1), u32(9), u32(5), u32(2)]


def test_program_lookup_returns_the_entry(emulated):
    fd = emulated.map_create(MapType.DEVMAP, 4, 4, 4)
    emulated.map_update_elem(fd, u32(3), u32(1))
    dev = emulated.map_from_fd(fd)
    assert bytes(dev.map_lookup_elem(u32(3))) == struct.pack("<II", 1, 0)
    assert dev.map_lookup_elem(u32(2)) is None
    assert op_errno(dev.map_delete_elem, u32(9)) == errno.EINVAL
