"""struct bpf_spin_lock in map values, on both backends: where BTF may place one, which maps
may hold one, what user space reads and writes around it (BPF_F_LOCK). Every expected errno
was read from the running kernel (6.18)."""

from __future__ import annotations

import errno
import struct

import pytest

from helpers import err_of
from pybpf.btf import Btf, Int, Member, Struct
from pybpf.uapi import BPF_EXIST, BPF_F_LOCK, BPF_NOEXIST, MapFlags, MapType

U32, U64, LOCK, VALUE, PLAIN = range(1, 6)
TYPES = [Int("unsigned int", 4, 0, 0, 32), Int("unsigned long long", 8, 0, 0, 64),
         Struct("bpf_spin_lock", 4, (Member("val", U32, 0),)),
         # struct value { struct bpf_spin_lock lock; u32 cnt; u64 x; }
         Struct("value", 16, (Member("lock", LOCK, 0), Member("cnt", U32, 32),
                              Member("x", U64, 64))),
         # the same layout, a plain u32 where the lock is
         Struct("plain", 16, (Member("cnt", U32, 0), Member("lock", U32, 32),
                              Member("x", U64, 64)))]


def u32(n: int) -> bytes:
    return n.to_bytes(4, "little")


def value(lock: int, cnt: int, x: int) -> bytes:
    return struct.pack("<IIQ", lock, cnt, x)


@pytest.fixture
def btf_fd(maps):
    fd = maps.sys.btf_load(Btf(TYPES).to_bytes())
    maps.fds.append(fd)
    return fd


@pytest.mark.parametrize("label,members,expected", [
    ("two locks in one struct", (Member("a", LOCK, 0), Member("b", LOCK, 32)), errno.E2BIG),
    ("a lock at byte 2", (Member("a", U32, 0), Member("b", LOCK, 16)), errno.EFAULT),
    ("a lock at byte 4", (Member("a", U32, 0), Member("b", LOCK, 32)), 0),
])
def test_btf_load_checks_where_a_struct_holds_its_lock(maps, label, members, expected):
    blob = Btf(TYPES + [Struct("s", 16, members)]).to_bytes()
    if expected:
        assert err_of(maps.sys.btf_load, blob) == expected, label
    else:
        maps.fds.append(maps.sys.btf_load(blob))


@pytest.mark.parametrize("label,map_type,map_flags,value_size,expected", [
    ("hash", MapType.HASH, 0, 16, 0),
    ("hash without preallocation", MapType.HASH, MapFlags.NO_PREALLOC, 16, 0),
    ("array", MapType.ARRAY, 0, 16, 0),
    ("LRU hash", MapType.LRU_HASH, 0, 16, errno.EOPNOTSUPP),
    ("per-CPU hash", MapType.PERCPU_HASH, 0, 16, errno.EOPNOTSUPP),
    ("per-CPU array", MapType.PERCPU_ARRAY, 0, 16, errno.EOPNOTSUPP),
    ("read-only for programs", MapType.HASH, MapFlags.RDONLY_PROG, 16, errno.EACCES),
    ("value_size not the type's", MapType.HASH, 0, 24, errno.EINVAL),
])
def test_which_maps_may_hold_a_spin_lock(maps, btf_fd, label, map_type, map_flags,
                                         value_size, expected):
    kw = dict(btf_fd=btf_fd, btf_key_type_id=U32, btf_value_type_id=VALUE,
              map_flags=map_flags)
    if expected:
        assert maps.create_errno(map_type, 4, value_size, 4, **kw) == expected, label
    else:
        maps.create(map_type, 4, value_size, 4, **kw)


@pytest.mark.parametrize("map_type", [MapType.HASH, MapType.ARRAY])
def test_user_space_never_reads_nor_writes_the_lock_word(maps, btf_fd, map_type):
    sys = maps.sys
    fd = maps.create(map_type, 4, 16, 4, btf_fd=btf_fd, btf_key_type_id=U32,
                     btf_value_type_id=VALUE)
    sys.map_update_elem(fd, u32(1), value(0xDEADBEEF, 5, 7))
    assert sys.map_lookup_elem(fd, u32(1)) == value(0, 5, 7)
    assert sys.map_lookup_elem(fd, u32(1), flags=BPF_F_LOCK) == value(0, 5, 7)
    sys.map_update_elem(fd, u32(1), value(0xFFFFFFFF, 6, 8), flags=BPF_F_LOCK)
    assert sys.map_lookup_elem(fd, u32(1), flags=BPF_F_LOCK) == value(0, 6, 8)


def test_bpf_f_lock_with_the_other_update_flags(maps, btf_fd):
    sys = maps.sys
    kw = dict(btf_fd=btf_fd, btf_key_type_id=U32, btf_value_type_id=VALUE)
    hash_fd = maps.create(MapType.HASH, 4, 16, 4, **kw)
    array_fd = maps.create(MapType.ARRAY, 4, 16, 4, **kw)
    sys.map_update_elem(hash_fd, u32(2), value(0, 1, 1), flags=BPF_F_LOCK | BPF_NOEXIST)
    sys.map_update_elem(hash_fd, u32(2), value(0, 2, 2), flags=BPF_F_LOCK | BPF_EXIST)
    assert sys.map_lookup_elem(hash_fd, u32(2)) == value(0, 2, 2)
    assert err_of(sys.map_update_elem, hash_fd, u32(2), value(0, 3, 3),
                  flags=BPF_F_LOCK | BPF_NOEXIST) == errno.EEXIST
    assert err_of(sys.map_update_elem, hash_fd, u32(3), value(0, 3, 3),
                  flags=BPF_F_LOCK | BPF_EXIST) == errno.ENOENT
    assert err_of(sys.map_update_elem, array_fd, u32(2), value(0, 3, 3),
                  flags=BPF_F_LOCK | BPF_NOEXIST) == errno.EEXIST
    assert err_of(sys.map_update_elem, hash_fd, u32(2), value(0, 3, 3), flags=8) == \
        errno.EINVAL
    assert err_of(sys.map_lookup_elem, hash_fd, u32(3), flags=BPF_F_LOCK) == errno.ENOENT
    assert sys.map_lookup_and_delete_elem(hash_fd, u32(2), flags=BPF_F_LOCK) == \
        value(0, 2, 2)


def test_bpf_f_lock_needs_a_lock_in_the_value(maps, btf_fd):
    sys = maps.sys
    fd = maps.create(MapType.ARRAY, 4, 16, 4, btf_fd=btf_fd, btf_key_type_id=U32,
                     btf_value_type_id=PLAIN)
    assert err_of(sys.map_lookup_elem, fd, u32(1), flags=BPF_F_LOCK) == errno.EINVAL
    assert err_of(sys.map_update_elem, fd, u32(1), bytes(16), flags=BPF_F_LOCK) == \
        errno.EINVAL
    sys.map_update_elem(fd, u32(1), value(0xDEADBEEF, 5, 7))  # a plain u32 is data
    assert sys.map_lookup_elem(fd, u32(1)) == value(0xDEADBEEF, 5, 7)
