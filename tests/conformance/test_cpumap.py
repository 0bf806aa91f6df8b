"""Conformance of CPUMAP (kernel/bpf/cpumap.c), on both backends.

Each test pins one kernel rule and runs against the real kernel (the oracle) and the emulated
backend through the ``backend`` fixture.
"""

from __future__ import annotations

import errno
import struct

import pytest

from helpers import err_of, u32
from pybpf.system import iter_keys
from pybpf.uapi import (
    BPF_F_NO_PREALLOC,
    BPF_F_RDONLY,
    BPF_F_XDP_HAS_FRAGS,
    BPF_NOEXIST,
    AttachType,
    MapType,
    ProgType,
)

from .conftest import load, returning


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


@pytest.mark.parametrize("first_frags", [False, True])
def test_cpumap_entry_programs_must_match_the_owners_xdp_has_frags(maps, first_frags):
    """__cpu_map_load_bpf_program -> bpf_prog_map_compatible: an entry program with the other
    BPF_F_XDP_HAS_FRAGS than the map's owner (the first stored) is refused; the entry
    cannot be made, which cpu_map_update_elem reports as ENOMEM; the old entry stays."""
    sys = maps.sys
    fd = maps.create(MapType.CPUMAP, 4, 8, 1)
    first, other = (load(maps, ProgType.XDP, returning(2), AttachType.XDP_CPUMAP,
                         BPF_F_XDP_HAS_FRAGS if frags else 0)
                    for frags in (first_frags, not first_frags))
    sys.map_update_elem(fd, u32(0), struct.pack("<Ii", 32, first))
    assert err_of(sys.map_update_elem, fd, u32(0), struct.pack("<Ii", 64, other)) \
        == errno.ENOMEM
    assert sys.map_lookup_elem(fd, u32(0)) == struct.pack("<II", 32,
                                                          sys.prog_get_info(first).id)


def test_cpumap_entry_program_must_be_attached_as_xdp_cpumap(maps):
    sys = maps.sys
    fd = maps.create(MapType.CPUMAP, 4, 8, 1)
    prog = load(maps, ProgType.XDP, returning(2), AttachType.XDP_CPUMAP)
    sys.map_update_elem(fd, u32(0), struct.pack("<Ii", 32, prog))
    assert sys.map_lookup_elem(fd, u32(0)) == struct.pack("<II", 32, sys.prog_get_info(prog).id)
    plain = load(maps, ProgType.XDP, returning(2))
    assert err_of(sys.map_update_elem, fd, u32(0), struct.pack("<Ii", 32, plain)) \
        == errno.ENOMEM
