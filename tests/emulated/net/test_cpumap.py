"""CPUMAP on the emulated backend: the machine's CPUs decide which keys exist."""

from __future__ import annotations

import errno
import struct
from types import SimpleNamespace

import pytest

import pybpf
from helpers import op_errno, u32
from pybpf.emulated.net.cpumap import host_nr_cpus
from pybpf.uapi import AttachType, MapType, ProgType


def test_keys_beyond_the_declared_cpus_give_enodev():
    sys = pybpf.system("emulated", cpus=4)
    fd = sys.map_create(MapType.CPUMAP, 4, 4, 8)
    sys.map_update_elem(fd, u32(3), u32(128))
    with pytest.raises(OSError) as info:
        sys.map_update_elem(fd, u32(4), u32(128))
    assert info.value.errno == errno.ENODEV


def test_a_machine_with_more_cpus_than_the_host_kernel_allows_larger_maps():
    cpus = host_nr_cpus() + 8
    sys = pybpf.system("emulated", cpus=cpus)
    fd = sys.map_create(MapType.CPUMAP, 4, 4, cpus)
    sys.map_update_elem(fd, u32(cpus - 1), u32(16))
    assert sys.map_lookup_elem(fd, u32(cpus - 1)) == u32(16)


def test_entry_with_a_cpumap_xdp_program_reports_its_id(emulated):
    fd = emulated.map_create(MapType.CPUMAP, 4, 8, 2)
    prog = emulated.fd_install(SimpleNamespace(prog_type=ProgType.XDP, id=12, prog_flags=0,
                                               expected_attach_type=AttachType.XDP_CPUMAP))
    emulated.map_update_elem(fd, u32(1), struct.pack("<Ii", 256, prog))
    assert emulated.map_lookup_elem(fd, u32(1)) == struct.pack("<II", 256, 12)
    cpumap = emulated.map_from_fd(fd)
    assert bytes(cpumap.map_lookup_elem(u32(1))) == struct.pack("<II", 256, 12)
    assert op_errno(cpumap.map_delete_elem, u32(1)) == 0
    assert cpumap.map_lookup_elem(u32(1)) is None
