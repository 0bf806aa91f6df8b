"""Conformance of DEVMAP and DEVMAP_HASH (kernel/bpf/devmap.c), on both backends.

Each test pins one kernel rule and runs against the real kernel (the oracle) and the emulated
backend through the ``backend`` fixture; differential tests (``kmaps`` and ``emaps``
together) compare orders and hash-dependent results that no simple expectation captures.
"""

from __future__ import annotations

import errno
import struct

import pytest

from helpers import err_of, u32
from pybpf.asm import R1, assemble, encode, ld_map_fd
from pybpf.system import iter_keys
from pybpf.uapi import (
    BPF_EXIST,
    BPF_F_NO_PREALLOC,
    BPF_F_RDONLY,
    BPF_F_RDONLY_PROG,
    BPF_F_XDP_HAS_FRAGS,
    BPF_NOEXIST,
    AttachType,
    MapType,
    ProgType,
)

from .conftest import load, returning

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


@pytest.mark.parametrize("map_type", [MapType.DEVMAP, MapType.DEVMAP_HASH])
@pytest.mark.parametrize("first_frags", [False, True])
def test_devmap_entry_programs_must_match_the_owners_xdp_has_frags(maps, map_type, first_frags):
    """__dev_map_alloc_node -> bpf_prog_map_compatible: the first entry program is the map's
    owner; one loaded with the other BPF_F_XDP_HAS_FRAGS setting is refused (EINVAL), and
    the map is left as it was."""
    sys = maps.sys
    fd = maps.create(map_type, 4, 8, 4)
    first, other = (load(maps, ProgType.XDP, returning(2), AttachType.XDP_DEVMAP,
                         BPF_F_XDP_HAS_FRAGS if frags else 0)
                    for frags in (first_frags, not first_frags))
    sys.map_update_elem(fd, u32(0), devval(LO, first))
    assert err_of(sys.map_update_elem, fd, u32(1), devval(LO, other)) == errno.EINVAL
    assert err_of(sys.map_lookup_elem, fd, u32(1)) == errno.ENOENT
    sys.map_update_elem(fd, u32(1), devval(LO, first))  # the owner's kind still goes in


def test_devmap_owner_made_at_load_binds_its_entry_programs(maps):
    """A program using a devmap makes the map's owner at load (bpf_check_tail_call), and an
    entry program with the other xdp_has_frags is refused; one using a devmap whose entries
    lack frags cannot be loaded with them."""
    sys = maps.sys
    owned = maps.create(MapType.DEVMAP, 4, 8, 4)
    user = assemble([ld_map_fd(R1, "m"), *returning(2)]).with_map_fds(lambda name: owned)
    maps.fds.append(sys.prog_load(ProgType.XDP, encode(user), prog_flags=BPF_F_XDP_HAS_FRAGS))
    plain = load(maps, ProgType.XDP, returning(2), AttachType.XDP_DEVMAP)
    assert err_of(sys.map_update_elem, owned, u32(0), devval(LO, plain)) == errno.EINVAL

    fd = maps.create(MapType.DEVMAP, 4, 8, 4)
    sys.map_update_elem(fd, u32(0), devval(LO, plain))
    user = assemble([ld_map_fd(R1, "m"), *returning(2)]).with_map_fds(lambda name: fd)
    assert err_of(sys.prog_load, ProgType.XDP, encode(user),
                  prog_flags=BPF_F_XDP_HAS_FRAGS) == errno.EINVAL


@pytest.mark.parametrize("map_type", [MapType.DEVMAP, MapType.DEVMAP_HASH])
def test_devmap_entry_program_must_be_attached_as_xdp_devmap(maps, map_type):
    sys = maps.sys
    fd = maps.create(map_type, 4, 8, 4)
    prog = load(maps, ProgType.XDP, returning(2), AttachType.XDP_DEVMAP)
    sys.map_update_elem(fd, u32(1), devval(LO, prog))
    assert sys.map_lookup_elem(fd, u32(1)) == struct.pack("<II", LO, sys.prog_get_info(prog).id)
    plain = load(maps, ProgType.XDP, returning(2))
    assert err_of(sys.map_update_elem, fd, u32(1), devval(LO, plain)) == errno.EINVAL
