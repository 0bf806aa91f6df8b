"""Conformance of LPM_TRIE (kernel/bpf/lpm_trie.c), on both backends.

Each test pins one kernel rule and runs against the real kernel (the oracle) and the emulated
backend through the ``backend`` fixture; differential tests (``kmaps`` and ``emaps``
together) compare orders and hash-dependent results that no simple expectation captures.
"""

from __future__ import annotations

import errno
import random
import struct

import pytest

from helpers import err_of
from pybpf.system import iter_keys
from pybpf.uapi import (
    BPF_ANY,
    BPF_EXIST,
    BPF_F_NO_PREALLOC,
    BPF_F_ZERO_SEED,
    BPF_NOEXIST,
    ENOTSUPP,
    MapType,
)

from .conftest import KMALLOC_MAX_SIZE


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


def test_lpm_batches_lookup_update_delete(maps):
    sys = maps.sys
    fd = maps.create(MapType.LPM_TRIE, 8, 4, 8, map_flags=BPF_F_NO_PREALLOC)
    keys = [lpm_key(8, 10, 0, 0, 0), lpm_key(16, 10, 1, 0, 0), lpm_key(24, 10, 1, 2, 0)]
    assert sys.map_update_batch(fd, keys, [b"aaaa", b"bbbb", b"cccc"]) == 3
    got = sys.map_lookup_batch(fd, None, 8)
    assert got.keys == list(iter_keys(sys, fd)) and got.end
    assert sys.map_delete_batch(fd, keys[:2]) == 2
    assert err_of(sys.map_lookup_and_delete_batch, fd, None, 8) == ENOTSUPP
