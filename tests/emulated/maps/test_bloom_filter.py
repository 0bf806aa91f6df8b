"""BLOOM_FILTER on the emulated backend: the kernel's bit-array sizing and hash choice, no
false negatives, and the program helpers."""

from __future__ import annotations

import errno

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pybpf
from helpers import op_errno
from pybpf.emulated.maps.bloom_filter import bloom_bitset_mask
from pybpf.emulated.maps.jhash import jhash, jhash2
from pybpf.uapi import BPF_F_ZERO_SEED, MapType


@pytest.mark.parametrize("max_entries, k, bits", [
    (1, 5, 64),            # 7 bits, at least BITS_PER_LONG
    (100, 5, 1024),        # 700 -> next power of two
    (10, 3, 64),           # 30 / 5 * 7 = 42
    (1000, 1, 2048),       # 1400
    (2**31, 5, 2**32),     # product overflows u32
    (2**29, 3, 2**32),     # 2^29 * 3 / 5 * 7 > 2^31
])
def test_bitset_size_follows_the_kernel(max_entries, k, bits):
    assert bloom_bitset_mask(max_entries, k) == bits - 1


def test_hash_uses_jhash2_for_word_values_and_jhash_otherwise(emulated):
    words = emulated.map_from_fd(emulated.map_create(MapType.BLOOM_FILTER, 0, 8, 100,
                                                     map_flags=BPF_F_ZERO_SEED, map_extra=2))
    value = bytes(range(8))
    w = (int.from_bytes(value[:4], "little"), int.from_bytes(value[4:], "little"))
    assert words.bitset_mask == 511  # 100 * 2 / 5 * 7 = 280 bits -> 512
    assert words._hashes(value) == [jhash2(w, i) & 511 for i in range(2)]
    odd = emulated.map_from_fd(emulated.map_create(MapType.BLOOM_FILTER, 0, 3, 100,
                                                   map_flags=BPF_F_ZERO_SEED, map_extra=2))
    assert odd._hashes(b"abc") == [jhash(b"abc", i) & 511 for i in range(2)]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.binary(min_size=6, max_size=6), min_size=1, max_size=50),
       st.integers(1, 15))
def test_no_false_negatives(values, nr_hashes):
    sys = pybpf.system("emulated", cpus=1)
    fd = sys.map_create(MapType.BLOOM_FILTER, 0, 6, 16, map_extra=nr_hashes)
    for value in values:
        sys.map_update_elem(fd, None, value)
    for value in values:
        assert sys.map_lookup_elem(fd, None, value=value) == value


def test_program_helpers(emulated):
    bloom = emulated.map_from_fd(emulated.map_create(MapType.BLOOM_FILTER, 0, 4, 100))
    assert op_errno(bloom.map_push_elem, b"abcd", 0) == 0
    assert op_errno(bloom.map_push_elem, b"abcd", 1) == errno.EINVAL
    assert op_errno(bloom.map_peek_elem, b"abcd") == 0
    assert op_errno(bloom.map_pop_elem) == errno.EOPNOTSUPP
    assert op_errno(bloom.map_lookup_elem, b"") == errno.EOPNOTSUPP
    assert op_errno(bloom.map_update_elem, b"", b"abcd", 0) == errno.EINVAL
    assert op_errno(bloom.map_delete_elem, b"") == errno.EOPNOTSUPP


def test_without_zero_seed_each_filter_draws_its_own_seed(emulated):
    seeds = {emulated.map_from_fd(emulated.map_create(MapType.BLOOM_FILTER, 0, 4, 8)).hash_seed
             for _ in range(4)}
    assert len(seeds) > 1
