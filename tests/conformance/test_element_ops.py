"""Element, batch, freeze, access-mode, pinning and id commands, errno for errno, on every
backend (the kernel is the oracle); kernel-map-semantics.md §2.3, §2.6-2.13 and §3."""

from __future__ import annotations

import errno
import itertools
import os
import struct

import pytest

import pybpf.asm as asm
from helpers import errno_of, u32
from pybpf.errors import KeyExistsError, KeyNotFoundError
from pybpf.system import iter_keys
from pybpf.uapi import BPF_ANY, BPF_EXIST, BPF_F_LOCK, BPF_NOEXIST, ENOTSUPP, ProgType, round_up
from pybpf.uapi import MapFlags as F
from pybpf.uapi import MapType as T

EINVAL, ENOENT, EEXIST, E2BIG, EPERM, ENOSPC, EBADF, EOPNOTSUPP = (
    errno.EINVAL, errno.ENOENT, errno.EEXIST, errno.E2BIG, errno.EPERM, errno.ENOSPC,
    errno.EBADF, errno.EOPNOTSUPP)

HASHES = [T.HASH, T.PERCPU_HASH, T.LRU_HASH, T.LRU_PERCPU_HASH]
PERCPU = {T.PERCPU_HASH, T.LRU_PERCPU_HASH, T.PERCPU_ARRAY}


@pytest.fixture
def maps(backend):
    """make(map_type, key_size, value_size, max_entries, **kw) -> fd, closed after the test."""
    fds = []

    def make(map_type, key_size=4, value_size=8, max_entries=8, **kw):
        fd = backend.map_create(map_type, key_size, value_size, max_entries, **kw)
        fds.append(fd)
        return fd

    yield make
    for fd in reversed(fds):
        backend.close(fd)


def value_for(backend, map_type, value_size, fill: int) -> bytes:
    """A syscall-shaped value: per-CPU types get one distinct slot per possible CPU."""
    if map_type in PERCPU:
        slot = round_up(value_size, 8)
        return b"".join(bytes([(fill + cpu) & 0xFF]) * slot
                        for cpu in range(backend.num_possible_cpus))
    return bytes([fill]) * value_size


# -- update flags ------------------------------------------------------------------------------

@pytest.mark.parametrize("map_type", HASHES)
def test_hash_update_noexist_on_existing_key_gives_eexist(backend, maps, map_type):
    fd = maps(map_type)
    backend.map_update_elem(fd, u32(1), value_for(backend, map_type, 8, 1), BPF_NOEXIST)
    with pytest.raises(KeyExistsError) as info:
        backend.map_update_elem(fd, u32(1), value_for(backend, map_type, 8, 2), BPF_NOEXIST)
    assert info.value.errno == EEXIST
    assert backend.map_lookup_elem(fd, u32(1)) == value_for(backend, map_type, 8, 1)


@pytest.mark.parametrize("map_type", HASHES)
def test_hash_update_exist_on_absent_key_gives_enoent(backend, maps, map_type):
    fd = maps(map_type)
    value = value_for(backend, map_type, 8, 1)
    assert errno_of(backend.map_update_elem, fd, u32(1), value, BPF_EXIST) == ENOENT
    backend.map_update_elem(fd, u32(1), value, BPF_ANY)
    backend.map_update_elem(fd, u32(1), value_for(backend, map_type, 8, 3), BPF_EXIST)
    assert backend.map_lookup_elem(fd, u32(1)) == value_for(backend, map_type, 8, 3)


@pytest.mark.parametrize("map_type", HASHES + [T.ARRAY, T.PERCPU_ARRAY])
@pytest.mark.parametrize("flags", [3, 8, BPF_F_LOCK, BPF_F_LOCK | BPF_EXIST])
def test_update_with_unknown_or_lock_flags_gives_einval(backend, maps, map_type, flags):
    fd = maps(map_type)
    value = value_for(backend, map_type, 8, 1)
    assert errno_of(backend.map_update_elem, fd, u32(1), value, flags) == EINVAL


@pytest.mark.parametrize("map_type", HASHES + [T.ARRAY])
@pytest.mark.parametrize("flags", [BPF_NOEXIST, BPF_EXIST, BPF_F_LOCK])
def test_lookup_with_flags_other_than_lock_or_lock_without_spin_lock_gives_einval(
        backend, maps, map_type, flags):
    fd = maps(map_type)
    assert errno_of(backend.map_lookup_elem, fd, u32(1), flags) == EINVAL


@pytest.mark.parametrize("map_type", [T.ARRAY, T.PERCPU_ARRAY])
def test_array_update_noexist_gives_eexist_exist_and_any_overwrite(backend, maps, map_type):
    fd = maps(map_type, max_entries=4)
    assert errno_of(backend.map_update_elem, fd, u32(0), value_for(backend, map_type, 8, 1),
                    BPF_NOEXIST) == EEXIST
    for flags, fill in ((BPF_EXIST, 2), (BPF_ANY, 3)):
        backend.map_update_elem(fd, u32(2), value_for(backend, map_type, 8, fill), flags)
        assert backend.map_lookup_elem(fd, u32(2)) == value_for(backend, map_type, 8, fill)


@pytest.mark.parametrize("map_type", [T.ARRAY, T.PERCPU_ARRAY])
def test_array_index_rules(backend, maps, map_type):
    fd = maps(map_type, max_entries=4)
    value = value_for(backend, map_type, 8, 1)
    assert backend.map_lookup_elem(fd, u32(3)) == bytes(len(value))  # zero-filled
    assert errno_of(backend.map_lookup_elem, fd, u32(4)) == ENOENT
    assert errno_of(backend.map_update_elem, fd, u32(4), value) == E2BIG
    assert errno_of(backend.map_delete_elem, fd, u32(0)) == EINVAL
    assert errno_of(backend.map_delete_elem, fd, u32(9)) == EINVAL


@pytest.mark.parametrize("flags", [0, F.NO_PREALLOC])
def test_hash_full_gives_e2big_but_replacing_still_works(backend, maps, flags):
    fd = maps(T.HASH, max_entries=2, map_flags=flags)
    backend.map_update_elem(fd, u32(1), b"a" * 8)
    backend.map_update_elem(fd, u32(2), b"b" * 8)
    assert errno_of(backend.map_update_elem, fd, u32(3), b"c" * 8) == E2BIG
    backend.map_update_elem(fd, u32(2), b"B" * 8)
    assert backend.map_lookup_elem(fd, u32(2)) == b"B" * 8
    backend.map_delete_elem(fd, u32(1))
    backend.map_update_elem(fd, u32(3), b"c" * 8)
    assert sorted(iter_keys(backend, fd)) == [u32(2), u32(3)]
    assert backend.map_lookup_elem(fd, u32(3)) == b"c" * 8


@pytest.mark.parametrize("map_type", [T.LRU_HASH, T.LRU_PERCPU_HASH])
def test_lru_full_evicts_instead_of_e2big(backend, maps, map_type):
    fd = maps(map_type, max_entries=4)
    for k in range(32):
        backend.map_update_elem(fd, u32(k), value_for(backend, map_type, 8, k))
    keys = list(iter_keys(backend, fd))
    assert 0 < len(keys) <= 4
    assert u32(31) in keys


@pytest.mark.parametrize("map_type", HASHES)
def test_hash_lookup_and_delete_of_absent_key_gives_enoent(backend, maps, map_type):
    fd = maps(map_type)
    with pytest.raises(KeyNotFoundError):
        backend.map_lookup_elem(fd, u32(7))
    assert errno_of(backend.map_delete_elem, fd, u32(7)) == ENOENT


def test_wrong_key_or_value_length_gives_einval(backend, maps):
    fd = maps(T.HASH)
    assert errno_of(backend.map_update_elem, fd, b"abc", b"v" * 8) == EINVAL
    assert errno_of(backend.map_update_elem, fd, u32(1), b"v" * 7) == EINVAL
    assert errno_of(backend.map_lookup_elem, fd, b"abcde") == EINVAL


def test_closed_fd_gives_ebadf(backend):
    fd = backend.map_create(T.HASH, 4, 8, 4)
    backend.close(fd)
    assert errno_of(backend.map_lookup_elem, fd, u32(1)) == EBADF
    assert errno_of(backend.map_update_elem, fd, u32(1), b"v" * 8) == EBADF


# -- per-CPU value layout (§2.6) ---------------------------------------------------------------

@pytest.mark.parametrize("map_type", sorted(PERCPU))
@pytest.mark.parametrize("value_size", [1, 4, 8, 12])
def test_percpu_value_is_round8_slot_per_possible_cpu_and_padding_round_trips(
        backend, maps, map_type, value_size):
    fd = maps(map_type, value_size=value_size, max_entries=4)
    ncpu = backend.num_possible_cpus
    slot = round_up(value_size, 8)
    value = bytes((cpu * 16 + i) & 0xFF for cpu in range(ncpu) for i in range(slot))
    backend.map_update_elem(fd, u32(1), value)
    got = backend.map_lookup_elem(fd, u32(1))
    assert len(got) == slot * ncpu
    assert got == value
    assert errno_of(backend.map_update_elem, fd, u32(2), value[:value_size]) == (
        0 if slot * ncpu == value_size else EINVAL)


# -- get_next_key (§2.10, §3.1, §3.2) ----------------------------------------------------------

@pytest.mark.parametrize("map_type", HASHES)
def test_hash_get_next_key_ends_and_missing_key_restarts(backend, maps, map_type):
    fd = maps(map_type, map_flags=F.ZERO_SEED if map_type in (T.HASH, T.PERCPU_HASH) else 0)
    assert errno_of(backend.map_get_next_key, fd, None) == ENOENT
    assert errno_of(backend.map_get_next_key, fd, u32(5)) == ENOENT
    for k in (1, 2, 3):
        backend.map_update_elem(fd, u32(k), value_for(backend, map_type, 8, k))
    first = backend.map_get_next_key(fd, None)
    assert backend.map_get_next_key(fd, u32(99)) == first  # missing key -> first key
    keys = list(iter_keys(backend, fd))
    assert sorted(keys) == [u32(1), u32(2), u32(3)]
    assert keys[0] == first
    assert errno_of(backend.map_get_next_key, fd, keys[-1]) == ENOENT


@pytest.mark.parametrize("map_type", [T.ARRAY, T.PERCPU_ARRAY])
def test_array_get_next_key_walks_every_index(backend, maps, map_type):
    fd = maps(map_type, max_entries=3)
    assert backend.map_get_next_key(fd, None) == u32(0)
    assert backend.map_get_next_key(fd, u32(0)) == u32(1)
    assert backend.map_get_next_key(fd, u32(7)) == u32(0)  # index >= max_entries restarts
    assert errno_of(backend.map_get_next_key, fd, u32(2)) == ENOENT
    assert list(iter_keys(backend, fd)) == [u32(0), u32(1), u32(2)]


def test_hash_zero_seed_iteration_order_is_deterministic(backend, maps):
    orders = []
    for _ in range(2):
        fd = maps(T.HASH, max_entries=64, map_flags=F.ZERO_SEED)
        for k in range(40):
            backend.map_update_elem(fd, u32(k * 7919), bytes(8))
        orders.append(list(iter_keys(backend, fd)))
    assert orders[0] == orders[1]
    assert sorted(orders[0]) == sorted(u32(k * 7919) for k in range(40))


# -- lookup_and_delete (§2.11) -----------------------------------------------------------------

@pytest.mark.parametrize("map_type", HASHES)
def test_hash_lookup_and_delete_returns_value_and_removes_key(backend, maps, map_type):
    fd = maps(map_type)
    value = value_for(backend, map_type, 8, 5)
    backend.map_update_elem(fd, u32(1), value)
    assert backend.map_lookup_and_delete_elem(fd, u32(1)) == value
    assert errno_of(backend.map_lookup_elem, fd, u32(1)) == ENOENT
    assert errno_of(backend.map_lookup_and_delete_elem, fd, u32(1)) == ENOENT


@pytest.mark.parametrize("map_type,kw", [
    (T.ARRAY, {}), (T.PERCPU_ARRAY, {}),
    (T.LPM_TRIE, dict(key_size=8, map_flags=F.NO_PREALLOC)),
])
def test_lookup_and_delete_unsupported_type_gives_enotsupp(backend, maps, map_type, kw):
    fd = maps(map_type, **kw)
    key = bytes(kw.get("key_size", 4))
    assert errno_of(backend.map_lookup_and_delete_elem, fd, key) == ENOTSUPP


def test_lookup_and_delete_flags_other_than_lock_give_einval(backend, maps):
    fd = maps(T.HASH)
    backend.map_update_elem(fd, u32(1), bytes(8))
    assert errno_of(backend.map_lookup_and_delete_elem, fd, u32(1), BPF_EXIST) == EINVAL
    assert errno_of(backend.map_lookup_and_delete_elem, fd, u32(1), BPF_F_LOCK) == EINVAL
    assert backend.map_lookup_elem(fd, u32(1)) == bytes(8)


# -- queue / stack (§3.7) ----------------------------------------------------------------------

@pytest.mark.parametrize("map_type,order", [(T.QUEUE, [1, 2, 3]), (T.STACK, [3, 2, 1])])
def test_queue_stack_push_peek_pop(backend, maps, map_type, order):
    fd = maps(map_type, key_size=0, value_size=4, max_entries=3)
    for v in (1, 2, 3):
        backend.map_update_elem(fd, None, u32(v))
    assert errno_of(backend.map_update_elem, fd, None, u32(4)) == E2BIG
    assert backend.map_lookup_elem(fd, None) == u32(order[0])
    assert [backend.map_lookup_and_delete_elem(fd, None) for _ in range(3)] == \
        [u32(v) for v in order]
    assert errno_of(backend.map_lookup_and_delete_elem, fd, None) == ENOENT
    assert errno_of(backend.map_lookup_elem, fd, None) == ENOENT


@pytest.mark.parametrize("map_type", [T.QUEUE, T.STACK])
def test_queue_stack_full_with_exist_drops_oldest(backend, maps, map_type):
    fd = maps(map_type, key_size=0, value_size=4, max_entries=2)
    for v in (1, 2, 3):
        backend.map_update_elem(fd, None, u32(v), BPF_EXIST)
    popped = [backend.map_lookup_and_delete_elem(fd, None) for _ in range(2)]
    assert sorted(popped) == [u32(2), u32(3)]


@pytest.mark.parametrize("map_type", [T.QUEUE, T.STACK])
def test_queue_stack_rejections(backend, maps, map_type):
    fd = maps(map_type, key_size=0, value_size=4, max_entries=2)
    assert errno_of(backend.map_update_elem, fd, None, u32(1), BPF_NOEXIST) == EINVAL
    assert errno_of(backend.map_delete_elem, fd, None) == EINVAL
    assert errno_of(backend.map_get_next_key, fd, None) == EINVAL
    backend.map_update_elem(fd, None, u32(1))
    assert errno_of(backend.map_lookup_and_delete_elem, fd, None, BPF_F_LOCK) == EINVAL


# -- bloom filter (§3.9) -----------------------------------------------------------------------

def test_bloom_filter_push_and_peek_by_value(backend, maps):
    fd = maps(T.BLOOM_FILTER, key_size=0, value_size=4, max_entries=16, map_flags=F.ZERO_SEED)
    backend.map_update_elem(fd, None, u32(42))
    assert backend.map_lookup_elem(fd, None, value=u32(42)) == u32(42)
    assert errno_of(backend.map_lookup_elem, fd, None, value=u32(43)) == ENOENT
    assert errno_of(backend.map_update_elem, fd, None, u32(1), BPF_EXIST) == EINVAL
    assert errno_of(backend.map_delete_elem, fd, None) == EOPNOTSUPP
    assert errno_of(backend.map_get_next_key, fd, None) == EOPNOTSUPP
    assert errno_of(backend.map_lookup_and_delete_elem, fd, None) == ENOTSUPP


def test_bloom_filter_lookup_without_a_value_tests_zeros(backend, maps):
    # The value is the lookup's input; none given must not mean "whatever a buffer held".
    bloom = maps(T.BLOOM_FILTER, key_size=0, value_size=4, max_entries=16, map_flags=F.ZERO_SEED)
    array = maps(T.ARRAY, value_size=4, max_entries=1)
    backend.map_update_elem(bloom, None, u32(42))
    backend.map_update_elem(array, u32(0), u32(42))
    assert backend.map_lookup_elem(array, u32(0)) == u32(42)  # leaves 42 in a 4-byte buffer
    assert errno_of(backend.map_lookup_elem, bloom, None) == ENOENT
    backend.map_update_elem(bloom, None, u32(0))
    assert backend.map_lookup_elem(bloom, None) == u32(0)


def test_ringbuf_element_commands_give_enotsupp(backend, maps):
    fd = maps(T.RINGBUF, key_size=0, value_size=0, max_entries=4096)
    assert errno_of(backend.map_lookup_elem, fd, None) == ENOTSUPP
    assert errno_of(backend.map_get_next_key, fd, None) == ENOTSUPP
    assert errno_of(backend.map_delete_elem, fd, None) == ENOTSUPP


# -- freeze (§2.12) and access modes (§2.3) ----------------------------------------------------

def test_freeze_blocks_syscall_writes_and_second_freeze_gives_eperm(backend, maps):
    # map_freeze checks write permission before "already frozen" (EBUSY), and a frozen
    # map has lost write permission for syscalls: the second freeze is EPERM.
    fd = maps(T.HASH)
    backend.map_update_elem(fd, u32(1), b"a" * 8)
    backend.map_freeze(fd)
    assert errno_of(backend.map_update_elem, fd, u32(2), b"b" * 8) == EPERM
    assert errno_of(backend.map_delete_elem, fd, u32(1)) == EPERM
    assert errno_of(backend.map_lookup_and_delete_elem, fd, u32(1)) == EPERM
    assert backend.map_lookup_elem(fd, u32(1)) == b"a" * 8
    assert backend.map_get_next_key(fd, None) == u32(1)
    assert errno_of(backend.map_freeze, fd) == EPERM


def test_rdonly_map_reads_but_writes_give_eperm(backend, maps):
    fd = maps(T.HASH, map_flags=F.RDONLY)
    assert errno_of(backend.map_update_elem, fd, u32(1), b"a" * 8) == EPERM
    assert errno_of(backend.map_delete_elem, fd, u32(1)) == EPERM
    assert errno_of(backend.map_lookup_and_delete_elem, fd, u32(1)) == EPERM
    assert errno_of(backend.map_update_batch, fd, [u32(1)], [b"a" * 8]) == EPERM
    assert errno_of(backend.map_lookup_elem, fd, u32(1)) == ENOENT
    assert errno_of(backend.map_get_next_key, fd, None) == ENOENT
    assert errno_of(backend.map_freeze, fd) == EPERM


def test_wronly_map_writes_but_reads_give_eperm(backend, maps):
    fd = maps(T.HASH, map_flags=F.WRONLY)
    backend.map_update_elem(fd, u32(1), b"a" * 8)
    assert errno_of(backend.map_lookup_elem, fd, u32(1)) == EPERM
    assert errno_of(backend.map_get_next_key, fd, None) == EPERM
    assert errno_of(backend.map_lookup_and_delete_elem, fd, u32(1)) == EPERM
    assert errno_of(backend.map_lookup_batch, fd, None, 4) == EPERM
    backend.map_delete_elem(fd, u32(1))
    assert errno_of(backend.map_delete_elem, fd, u32(1)) == ENOENT  # the first one removed it


def test_permission_errors_name_the_map(backend, maps):
    # A write refused by the fd's or the map's permissions still says which map it was.
    frozen = maps(T.HASH)
    backend.map_freeze(frozen)
    wronly = maps(T.HASH, map_flags=F.WRONLY)
    calls = [(frozen, backend.map_update_elem, (u32(1), b"a" * 8)),
             (frozen, backend.map_delete_elem, (u32(1),)),
             (frozen, backend.map_update_batch, ([u32(1)], [b"a" * 8])),
             (frozen, backend.map_delete_batch, ([u32(1)],)),
             (wronly, backend.map_lookup_batch, (None, 4))]
    for fd, call, args in calls:
        with pytest.raises(OSError) as info:
            call(fd, *args)
        assert info.value.errno == EPERM
        assert f"(id {backend.map_get_info(fd).id})" in str(info.value), call.__name__


def test_rdonly_fd_by_id_of_writable_map(backend, maps):
    fd = maps(T.HASH)
    backend.map_update_elem(fd, u32(1), b"a" * 8)
    ro = backend.map_get_fd_by_id(backend.map_get_info(fd).id, F.RDONLY)
    try:
        assert backend.map_lookup_elem(ro, u32(1)) == b"a" * 8
        assert errno_of(backend.map_update_elem, ro, u32(1), b"b" * 8) == EPERM
    finally:
        backend.close(ro)
    backend.map_update_elem(fd, u32(1), b"b" * 8)
    assert backend.map_lookup_elem(fd, u32(1)) == b"b" * 8


# -- batches (§2.13) ---------------------------------------------------------------------------

def _fill(backend, fd, keys, map_type=T.HASH, value_size=8):
    for k in keys:
        backend.map_update_elem(fd, u32(k), value_for(backend, map_type, value_size, k))


@pytest.mark.parametrize("map_type", [T.HASH, T.ARRAY])
def test_batch_count_zero_returns_nothing(backend, maps, map_type):
    fd = maps(map_type, max_entries=4)
    _fill(backend, fd, [0, 1])
    result = backend.map_lookup_batch(fd, None, 0)
    assert (result.keys, result.values, result.out_batch) == ([], [], None)
    assert not result.end


@pytest.mark.parametrize("map_type", HASHES)
def test_htab_lookup_batch_walks_all_and_ends_with_enoent(backend, maps, map_type):
    fd = maps(map_type, max_entries=64)
    _fill(backend, fd, range(20), map_type)
    seen, token = {}, None
    for _ in range(100):
        result = backend.map_lookup_batch(fd, token, 8)
        assert len(result.keys) <= 8
        seen.update(zip(result.keys, result.values, strict=True))
        if result.end:
            break
        assert len(result.out_batch) == 4  # htab token: a u32 bucket index
        token = result.out_batch
    assert result.end
    assert seen == {u32(k): value_for(backend, map_type, 8, k) for k in range(20)}


def test_htab_lookup_batch_ending_may_carry_elements(backend, maps):
    fd = maps(T.HASH, max_entries=8)
    _fill(backend, fd, range(3))
    result = backend.map_lookup_batch(fd, None, 100)
    assert result.end and len(result.keys) == 3
    assert result.out_batch == u32(8)  # n_buckets


def test_htab_lookup_batch_start_past_last_bucket_gives_end_without_token(backend, maps):
    fd = maps(T.HASH, max_entries=8)
    _fill(backend, fd, range(3))
    result = backend.map_lookup_batch(fd, u32(8), 4)
    assert result.end and result.keys == [] and result.out_batch is None


def test_htab_batch_flags_must_be_zero(backend, maps):
    fd = maps(T.HASH)
    _fill(backend, fd, [1])
    assert errno_of(backend.map_lookup_batch, fd, None, 4, 0, 1) == EINVAL
    assert errno_of(backend.map_lookup_batch, fd, None, 4, BPF_EXIST) == EINVAL


def test_htab_lookup_batch_bucket_bigger_than_count_gives_enospc(backend, maps):
    # With ZERO_SEED and two buckets, some key shares key 0's bucket; a batch of one
    # element cannot take that bucket whole.
    for k in range(1, 64):
        fd = maps(T.HASH, max_entries=2, map_flags=F.ZERO_SEED)
        _fill(backend, fd, [0, k])
        try:
            result = backend.map_lookup_batch(fd, None, 1)
        except OSError as exc:
            assert exc.errno == ENOSPC
            assert exc.count == 0
            return
        assert len(result.keys) == 1
    pytest.fail("no two keys shared a bucket")


def test_htab_lookup_and_delete_batch_empties_the_map(backend, maps):
    fd = maps(T.HASH, max_entries=16)
    _fill(backend, fd, range(10))
    taken, token = [], None
    while True:
        result = backend.map_lookup_and_delete_batch(fd, token, 4)
        taken += result.keys
        if result.end:
            break
        token = result.out_batch
    assert sorted(taken) == [u32(k) for k in range(10)]
    assert list(iter_keys(backend, fd)) == []


def test_array_lookup_batch_token_is_the_last_key(backend, maps):
    fd = maps(T.ARRAY, value_size=4, max_entries=5)
    first = backend.map_lookup_batch(fd, None, 3)
    assert first.keys == [u32(0), u32(1), u32(2)] and not first.end
    assert first.out_batch == u32(2)
    rest = backend.map_lookup_batch(fd, first.out_batch, 3)
    assert rest.keys == [u32(3), u32(4)] and rest.end  # ENOENT with elements
    assert rest.out_batch == u32(4)
    done = backend.map_lookup_batch(fd, rest.out_batch, 3)
    assert done.end and done.keys == [] and done.out_batch is None


@pytest.mark.parametrize("map_type", [T.ARRAY, T.PERCPU_ARRAY])
def test_array_lookup_and_delete_and_delete_batch_give_enotsupp(backend, maps, map_type):
    fd = maps(map_type, max_entries=4)
    assert errno_of(backend.map_lookup_and_delete_batch, fd, None, 4) == ENOTSUPP
    assert errno_of(backend.map_delete_batch, fd, [u32(0)]) == ENOTSUPP


@pytest.mark.parametrize("map_type,kw", [
    (T.QUEUE, dict(key_size=0)), (T.BLOOM_FILTER, dict(key_size=0)),
    (T.DEVMAP, dict(value_size=4)),
])
def test_batch_on_type_without_handler_gives_enotsupp(backend, maps, map_type, kw):
    fd = maps(map_type, **kw)
    assert errno_of(backend.map_lookup_batch, fd, None, 4) == ENOTSUPP


def test_update_batch_stops_at_first_error_with_count(backend, maps):
    fd = maps(T.ARRAY, value_size=4, max_entries=4)
    keys = [u32(0), u32(1), u32(9), u32(2)]
    with pytest.raises(OSError) as info:
        backend.map_update_batch(fd, keys, [u32(7)] * 4)
    assert (info.value.errno, info.value.count) == (E2BIG, 2)
    assert backend.map_lookup_elem(fd, u32(1)) == u32(7)
    assert backend.map_lookup_elem(fd, u32(2)) == u32(0)
    assert backend.map_update_batch(fd, keys[:2], [u32(8)] * 2) == 2


@pytest.mark.parametrize("elem_flags", [BPF_NOEXIST, BPF_EXIST])
def test_update_batch_elem_flags_other_than_lock_give_einval(backend, maps, elem_flags):
    fd = maps(T.HASH)
    assert errno_of(backend.map_update_batch, fd, [u32(1)], [bytes(8)], elem_flags) == EINVAL


def test_delete_batch_missing_key_gives_enoent_with_count(backend, maps):
    fd = maps(T.HASH)
    _fill(backend, fd, [1, 2, 3])
    with pytest.raises(OSError) as info:
        backend.map_delete_batch(fd, [u32(1), u32(2), u32(9), u32(3)])
    assert (info.value.errno, info.value.count) == (ENOENT, 2)
    assert list(iter_keys(backend, fd)) == [u32(3)]


# -- map-in-map (§3.3) -------------------------------------------------------------------------

@pytest.mark.parametrize("outer_type", [T.ARRAY_OF_MAPS, T.HASH_OF_MAPS])
def test_map_in_map_update_takes_fd_lookup_gives_id(backend, maps, outer_type):
    inner = maps(T.ARRAY, value_size=4, max_entries=4)
    outer = maps(outer_type, value_size=4, max_entries=4, inner_map_fd=inner)
    other = maps(T.ARRAY, value_size=4, max_entries=4)
    assert errno_of(backend.map_lookup_elem, outer, u32(1)) == ENOENT
    backend.map_update_elem(outer, u32(1), u32(other))
    assert backend.map_lookup_elem(outer, u32(1)) == u32(backend.map_get_info(other).id)


@pytest.mark.parametrize("outer_type", [T.ARRAY_OF_MAPS, T.HASH_OF_MAPS])
def test_map_in_map_incompatible_or_bad_inner_fd(backend, maps, outer_type):
    inner = maps(T.ARRAY, value_size=4, max_entries=4)
    outer = maps(outer_type, value_size=4, max_entries=4, inner_map_fd=inner)
    wrong_size = maps(T.ARRAY, value_size=8, max_entries=4)
    wrong_type = maps(T.HASH, value_size=4, max_entries=4)
    assert errno_of(backend.map_update_elem, outer, u32(0), u32(wrong_size)) == EINVAL
    assert errno_of(backend.map_update_elem, outer, u32(0), u32(wrong_type)) == EINVAL
    closed = backend.map_create(T.ARRAY, 4, 4, 4)
    backend.close(closed)
    assert errno_of(backend.map_update_elem, outer, u32(0), u32(closed)) == EBADF


def test_array_of_maps_update_flags_must_be_any(backend, maps):
    inner = maps(T.ARRAY, value_size=4, max_entries=4)
    outer = maps(T.ARRAY_OF_MAPS, value_size=4, max_entries=4, inner_map_fd=inner)
    assert errno_of(backend.map_update_elem, outer, u32(0), u32(inner), BPF_EXIST) == EINVAL
    assert errno_of(backend.map_update_elem, outer, u32(4), u32(inner)) == E2BIG


def test_array_inner_max_entries_must_match_unless_inner_map_flag(backend, maps):
    template = maps(T.ARRAY, value_size=4, max_entries=4)
    outer = maps(T.ARRAY_OF_MAPS, value_size=4, max_entries=2, inner_map_fd=template)
    bigger = maps(T.ARRAY, value_size=4, max_entries=8)
    assert errno_of(backend.map_update_elem, outer, u32(0), u32(bigger)) == EINVAL
    flexible = maps(T.ARRAY, value_size=4, max_entries=4, map_flags=F.INNER_MAP)
    outer2 = maps(T.ARRAY_OF_MAPS, value_size=4, max_entries=2, inner_map_fd=flexible)
    bigger2 = maps(T.ARRAY, value_size=4, max_entries=8, map_flags=F.INNER_MAP)
    backend.map_update_elem(outer2, u32(0), u32(bigger2))
    assert backend.map_lookup_elem(outer2, u32(0)) == u32(backend.map_get_info(bigger2).id)


# -- ids and info ------------------------------------------------------------------------------

def test_map_get_fd_by_id_opens_the_same_map(backend, maps):
    fd = maps(T.HASH, map_name=b"byid")
    info = backend.map_get_info(fd)
    again = backend.map_get_fd_by_id(info.id)
    try:
        assert again != fd
        assert backend.map_get_info(again) == info
        backend.map_update_elem(again, u32(1), b"x" * 8)
        assert backend.map_lookup_elem(fd, u32(1)) == b"x" * 8
    finally:
        backend.close(again)


def test_map_get_fd_by_unknown_id_gives_enoent(backend):
    assert errno_of(backend.map_get_fd_by_id, 0x7FFFFFF0) == ENOENT


def test_map_get_next_id_reaches_a_new_map(backend, maps):
    fd = maps(T.ARRAY, value_size=4, max_entries=1)
    map_id = backend.map_get_info(fd).id
    assert backend.map_get_next_id(map_id - 1) == map_id
    assert errno_of(backend.map_get_next_id, 0x7FFFFFF0) == ENOENT


# -- pinning -----------------------------------------------------------------------------------

_pin_counter = itertools.count()


@pytest.fixture
def pin_path(backend):
    """A fresh path under /sys/fs/bpf; the kernel's pin is removed after the test (the
    emulated backend pins into its own namespace, which goes with the system)."""
    if backend.name == "kernel" and not os.path.ismount("/sys/fs/bpf"):
        pytest.skip("bpffs is not mounted at /sys/fs/bpf (mount -t bpf bpf /sys/fs/bpf)")
    path = f"/sys/fs/bpf/pybpf_test_{os.getpid()}_{next(_pin_counter)}"
    yield path
    if backend.name == "kernel" and os.path.exists(path):
        os.unlink(path)


def test_obj_pin_and_get_round_trip(backend, maps, pin_path):
    fd = maps(T.HASH, map_name=b"pinned")
    backend.map_update_elem(fd, u32(1), b"p" * 8)
    backend.obj_pin(fd, pin_path)
    again = backend.obj_get(pin_path)
    try:
        assert backend.map_get_info(again).id == backend.map_get_info(fd).id
        assert backend.map_lookup_elem(again, u32(1)) == b"p" * 8
    finally:
        backend.close(again)
    assert errno_of(backend.obj_pin, fd, pin_path) == EEXIST


def test_pin_keeps_map_alive_after_last_fd_closes(backend, pin_path):
    fd = backend.map_create(T.ARRAY, 4, 4, 2)
    backend.map_update_elem(fd, u32(1), u32(77))
    backend.obj_pin(fd, pin_path)
    backend.close(fd)
    again = backend.obj_get(pin_path)
    try:
        assert backend.map_lookup_elem(again, u32(1)) == u32(77)
    finally:
        backend.close(again)


def test_obj_get_rdonly_gives_read_only_fd(backend, maps, pin_path):
    fd = maps(T.HASH)
    backend.obj_pin(fd, pin_path)
    ro = backend.obj_get(pin_path, F.RDONLY)
    try:
        assert errno_of(backend.map_update_elem, ro, u32(1), bytes(8)) == EPERM
        assert errno_of(backend.map_lookup_elem, ro, u32(1)) == ENOENT
    finally:
        backend.close(ro)


def test_obj_get_missing_path_gives_enoent(backend, pin_path):
    assert errno_of(backend.obj_get, pin_path) == ENOENT


def test_pin_into_a_missing_directory_gives_enoent(backend, maps, pin_path):
    fd = maps(T.HASH)
    assert errno_of(backend.obj_pin, fd, pin_path + "_nodir/obj") == ENOENT


def test_pin_outside_bpffs_gives_eperm(backend, maps):
    fd = maps(T.HASH)
    assert errno_of(backend.obj_pin, fd, f"/tmp/pybpf_not_bpffs_{os.getpid()}") == EPERM


# -- kernel vs emulated: deterministic order with BPF_F_ZERO_SEED ------------------------------

def _zero_seed_walks(system, map_type, key_size):
    """Iteration order and batch chunks after inserts, a replacement and deletes."""
    fd = system.map_create(map_type, key_size, 8, 32, map_flags=F.ZERO_SEED)
    try:
        keys = [struct.pack("<Q", k * 2654435761 % 2**48)[:key_size] for k in range(24)]
        value = value_for(system, map_type, 8, 1)
        for key in keys:
            system.map_update_elem(fd, key, value)
        system.map_update_elem(fd, keys[3], value)  # replacement: HASH moves it to the front
        for key in keys[10:14]:
            system.map_delete_elem(fd, key)
        order = list(iter_keys(system, fd))
        chunks, token = [], None
        while True:
            try:
                result = system.map_lookup_batch(fd, token, 3)
            except OSError as exc:
                chunks.append(("error", exc.errno))
                break
            chunks.append((result.keys, result.out_batch, result.end))
            if result.end:
                break
            token = result.out_batch
        return order, chunks
    finally:
        system.close(fd)


@pytest.mark.parametrize("map_type", [T.HASH, T.PERCPU_HASH])
@pytest.mark.parametrize("key_size", [4, 6, 8])
def test_zero_seed_order_and_batches_match_between_backends(kernel, emulated, map_type,
                                                            key_size):
    assert _zero_seed_walks(kernel, map_type, key_size) == \
        _zero_seed_walks(emulated, map_type, key_size)


# -- batches on map-in-map and LPM tries (§2.13 handler table) ---------------------------------

def test_hash_of_maps_batches_take_fds_and_give_ids(backend, maps):
    inner = [maps(T.ARRAY, value_size=4, max_entries=2) for _ in range(3)]
    outer = maps(T.HASH_OF_MAPS, value_size=4, max_entries=8, inner_map_fd=inner[0])
    assert backend.map_update_batch(outer, [u32(k) for k in range(3)],
                                    [u32(fd) for fd in inner]) == 3
    result = backend.map_lookup_batch(outer, None, 8)
    assert result.end
    ids = {backend.map_get_info(fd).id for fd in inner}
    assert dict(zip(result.keys, result.values, strict=True)) == {
        u32(k): u32(backend.map_get_info(fd).id) for k, fd in enumerate(inner)}
    assert {struct.unpack("<I", v)[0] for v in result.values} == ids
    assert backend.map_delete_batch(outer, [u32(0), u32(1)]) == 2
    assert list(iter_keys(backend, outer)) == [u32(2)]


def lpm_key(prefixlen: int, *octets: int) -> bytes:
    return struct.pack("<I", prefixlen) + bytes(octets)


def test_lpm_batches_are_generic_with_key_tokens(backend, maps):
    fd = maps(T.LPM_TRIE, key_size=8, value_size=4, max_entries=8, map_flags=F.NO_PREALLOC)
    keys = [lpm_key(8, 10, 0, 0, 0), lpm_key(16, 10, 1, 0, 0), lpm_key(24, 10, 1, 2, 0),
            lpm_key(8, 192, 0, 0, 0)]
    assert backend.map_update_batch(fd, keys, [u32(i) for i in range(4)]) == 4
    walk = list(iter_keys(backend, fd))
    first = backend.map_lookup_batch(fd, None, 2)
    assert first.keys == walk[:2] and first.out_batch == walk[1] and not first.end
    rest = backend.map_lookup_batch(fd, first.out_batch, 8)
    assert rest.keys == walk[2:] and rest.end
    assert errno_of(backend.map_lookup_and_delete_batch, fd, None, 4) == ENOTSUPP
    assert backend.map_delete_batch(fd, keys[:2]) == 2
    assert sorted(iter_keys(backend, fd)) == sorted(keys[2:])


@pytest.mark.parametrize("command", ["map_lookup_elem", "map_lookup_and_delete_elem"])
def test_lookup_with_unknown_flag_on_a_closed_fd_gives_einval_before_ebadf(backend, command):
    # map_lookup_elem checks flags & ~BPF_F_LOCK before it resolves the fd.
    with pytest.raises(OSError) as exc:
        getattr(backend, command)(1_000_000, b"\0" * 4, 8)
    assert exc.value.errno == errno.EINVAL


def test_lookup_on_a_closed_fd_gives_ebadf(backend):
    with pytest.raises(OSError) as exc:
        backend.map_lookup_elem(1_000_000, b"\0" * 4)
    assert exc.value.errno == errno.EBADF


def test_write_batch_refused_before_its_first_element_reports_count_zero(backend, maps):
    # Arrays have no delete-batch handler: ENOTSUPP before any element, so none was done.
    fd = maps(T.ARRAY, max_entries=4)
    with pytest.raises(OSError) as exc:
        backend.map_delete_batch(fd, [u32(0), u32(1)])
    assert exc.value.errno == ENOTSUPP
    assert exc.value.count == 0


def test_element_command_on_an_open_non_bpf_fd_gives_einval(backend):
    read_end, write_end = os.pipe()
    try:
        with pytest.raises(OSError) as exc:
            backend.map_lookup_elem(read_end, b"\0" * 4)
        assert exc.value.errno == errno.EINVAL
    finally:
        os.close(read_end)
        os.close(write_end)


@pytest.mark.parametrize("count", [-1, 1 << 32, "3"])
def test_lookup_batch_count_outside_u32_gives_einval(backend, maps, count):
    fd = maps(T.HASH)
    assert errno_of(backend.map_lookup_batch, fd, None, count) == EINVAL


def test_map_name_may_be_given_as_str(backend, maps):
    fd = maps(T.HASH, map_name="counts_v1")
    assert backend.map_get_info(fd).name == "counts_v1"


@pytest.mark.parametrize("map_type", [T.PERCPU_HASH, T.LRU_PERCPU_HASH, T.PERCPU_ARRAY])
def test_lookup_percpu_elem_reads_the_slot_of_the_cpu_asked_for(sys, map_type):
    """bpf_map_lookup_percpu_elem: each CPU's slot of the element (set by the syscall), NULL
    for a CPU past nr_cpu_ids and, in a hash map, for a key it lacks."""
    ncpus = sys.num_possible_cpus
    fd = sys.map_create(map_type, 4, 8, 4)
    sys.map_update_elem(fd, u32(1), b"".join(struct.pack("<Q", 10 * (cpu + 1))
                                              for cpu in range(ncpus)))
    items = [asm.st(4, asm.FP, -4, 1), asm.mov64(asm.R6, 0)]
    for cpu in range(ncpus + 1):
        items += [asm.ld_map_fd(asm.R1, "m"), asm.mov64(asm.R2, asm.FP), asm.add64(asm.R2, -4),
                  asm.mov64(asm.R3, cpu), asm.call("map_lookup_percpu_elem"),
                  asm.jeq(asm.R0, 0, f"null{cpu}"), asm.ldx(8, asm.R1, asm.R0, 0),
                  asm.add64(asm.R6, asm.R1), asm.ja(f"next{cpu}"), asm.label(f"null{cpu}"),
                  asm.add64(asm.R6, 1000), asm.label(f"next{cpu}")]
    items += [asm.st(4, asm.FP, -4, 2), asm.ld_map_fd(asm.R1, "m"), asm.mov64(asm.R2, asm.FP),
              asm.add64(asm.R2, -4), asm.mov64(asm.R3, 0), asm.call("map_lookup_percpu_elem"),
              asm.jne(asm.R0, 0, "done"), asm.add64(asm.R6, 100000), asm.label("done"),
              asm.mov64(asm.R0, asm.R6), asm.exit_()]
    prog = sys.prog_load(ProgType.SCHED_CLS, asm.encode(
        asm.assemble(items).with_map_fds(lambda name: fd)))
    try:
        missing = 0 if map_type == T.PERCPU_ARRAY else 100000  # an index in range is there
        assert sys.prog_test_run(prog, bytes(64)).retval == \
            sum(10 * (cpu + 1) for cpu in range(ncpus)) + 1000 + missing
    finally:
        sys.close(prog)
        sys.close(fd)
