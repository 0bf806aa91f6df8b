"""Resources of the emulated backend come back without the user's help (issue 9)."""

from __future__ import annotations

import gc
import os
import weakref

import pytest

from pybpf.emulated.system import EmulatedSystem
from pybpf.uapi import BPF_F_NO_PREALLOC, MapType, ProgType

RETURN_0 = bytes.fromhex("b700000000000000" "9500000000000000")


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_dropped_system_with_open_fds_closes_its_host_fds():
    gc.collect()  # systems earlier tests dropped
    before = _open_fds()
    for _ in range(200):
        sys = EmulatedSystem(cpus=2, nodes=1)
        sys.map_create(MapType.HASH, 4, 8, 4)
        sys.prog_load(ProgType.SOCKET_FILTER, RETURN_0)
        del sys
    gc.collect()
    assert _open_fds() == before


def test_a_dropped_system_is_freed():
    sys = EmulatedSystem(cpus=2, nodes=1)
    sys.map_create(MapType.ARRAY, 4, 8, 4)
    ref = weakref.ref(sys)
    del sys
    gc.collect()
    assert ref() is None


@pytest.mark.parametrize("map_type", [MapType.HASH, MapType.PERCPU_HASH])
def test_closed_no_prealloc_maps_are_freed_without_stepping_the_machine(map_type):
    sys = EmulatedSystem(cpus=2, nodes=1)
    value = bytes(8 if map_type == MapType.HASH else 8 * sys.num_possible_cpus)
    refs = []
    for _ in range(3):
        fd = sys.map_create(map_type, 4, 8, 1000, BPF_F_NO_PREALLOC)
        for k in range(1000):
            sys.map_update_elem(fd, k.to_bytes(4, "little"), value)
        refs.append(weakref.ref(sys.fd_get(fd).map))
        sys.close(fd)
    gc.collect()
    assert sys.machine.rcu.pending == 0
    assert [r() for r in refs] == [None, None, None]


def test_a_reader_still_holds_back_the_free_until_it_leaves():
    sys = EmulatedSystem(cpus=2, nodes=1)
    fd = sys.map_create(MapType.HASH, 4, 8, 16, BPF_F_NO_PREALLOC)
    sys.map_update_elem(fd, bytes(4), bytes(8))
    ref = weakref.ref(sys.fd_get(fd).map)
    rcu = sys.machine.rcu
    with rcu.read_section():
        sys.close(fd)
        gc.collect()
        assert rcu.pending and ref() is not None  # a reader could still see the map
    rcu.poll()
    gc.collect()
    assert ref() is None
