"""Hash family of the emulated backend: semantics, order, program-side ops, counters.

Order tests run on both backends (the kernel is the oracle: with BPF_F_ZERO_SEED the order
is deterministic).
"""

from __future__ import annotations

import errno
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import errno_of, op_errno, u32
from pybpf import system
from pybpf.emulated.maps.jhash import htab_map_hash, jhash, jhash2
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

T = MapType


def hmap(sys, map_type=T.HASH, key_size=4, value_size=8, max_entries=8, flags=0):
    return sys.map_create(map_type, key_size, value_size, max_entries,
                          map_flags=flags | BPF_F_ZERO_SEED)


def test_jhash_of_empty_input_is_the_init_value_plus_seed():
    assert jhash(b"", 0) == 0xDEADBEEF
    assert jhash2((), 5) == 0xDEADBEEF + 5


def test_htab_hash_uses_jhash2_for_word_sized_keys():
    key = struct.pack("<II", 7, 9)
    assert htab_map_hash(key, 3) == jhash2((7, 9), 3)
    assert htab_map_hash(b"abc", 3) == jhash(b"abc", 3)


@pytest.mark.parametrize("key_size", [1, 3, 4, 5, 8, 12, 13, 16, 25])
def test_zero_seed_iteration_order_matches_the_kernel(kernel, key_size):
    emulated = system("emulated", cpus=kernel.num_possible_cpus)
    keys = [bytes((i * 37 + j) & 0xFF for j in range(key_size)) for i in range(12)]
    orders = []
    for sys in (kernel, emulated):
        fd = hmap(sys, key_size=key_size, max_entries=16)
        for key in keys:
            sys.map_update_elem(fd, key, bytes(8))
        orders.append(list(iter_keys(sys, fd)))
        sys.close(fd)
    assert sorted(orders[0]) == sorted(keys)
    assert orders[1] == orders[0]


def _same_bucket_keys(n_buckets, count):
    by_bucket: dict[int, list[bytes]] = {}
    for i in range(1000):
        by_bucket.setdefault(htab_map_hash(u32(i), 0) & (n_buckets - 1), []).append(u32(i))
        for keys in by_bucket.values():
            if len(keys) == count:
                return keys
    raise AssertionError("no collision found")


@pytest.mark.parametrize("map_type,moves", [(T.HASH, True), (T.LRU_HASH, True),
                                            (T.PERCPU_HASH, False)])
def test_replace_moves_the_key_to_the_bucket_front_except_per_cpu(backend, map_type, moves):
    first, second = _same_bucket_keys(4, 2)
    fd = hmap(backend, map_type, max_entries=4)
    width = 8 * backend.num_possible_cpus if map_type == T.PERCPU_HASH else 8
    backend.map_update_elem(fd, first, bytes(width))
    backend.map_update_elem(fd, second, bytes(width))
    assert list(iter_keys(backend, fd)) == [second, first]  # newest first
    backend.map_update_elem(fd, first, b"x" * width)
    assert list(iter_keys(backend, fd)) == ([first, second] if moves else [second, first])


def test_full_hash_gives_e2big_for_a_new_key_but_replaces_existing(backend):
    fd = hmap(backend, max_entries=4)
    for i in range(4):
        backend.map_update_elem(fd, u32(i), bytes(8))
    assert errno_of(backend.map_update_elem, fd, u32(9), bytes(8)) == errno.E2BIG
    for _ in range(3):  # replacing in a full map uses the per-CPU spare element
        backend.map_update_elem(fd, u32(2), b"r" * 8)
    assert backend.map_lookup_elem(fd, u32(2)) == b"r" * 8


@pytest.mark.parametrize("flags", [0, BPF_F_NO_PREALLOC])
def test_update_flags_give_eexist_enoent_einval(backend, flags):
    fd = hmap(backend, flags=flags)
    backend.map_update_elem(fd, u32(1), bytes(8), BPF_NOEXIST)
    assert errno_of(backend.map_update_elem, fd, u32(1), bytes(8), BPF_NOEXIST) == errno.EEXIST
    assert errno_of(backend.map_update_elem, fd, u32(2), bytes(8), BPF_EXIST) == errno.ENOENT
    assert errno_of(backend.map_update_elem, fd, u32(2), bytes(8), 3) == errno.EINVAL
    backend.map_update_elem(fd, u32(1), b"e" * 8, BPF_EXIST)
    assert backend.map_lookup_elem(fd, u32(1)) == b"e" * 8


def test_percpu_hash_values_have_one_rounded_slot_per_cpu(backend):
    ncpu = backend.num_possible_cpus
    fd = hmap(backend, T.PERCPU_HASH, value_size=3)
    value = bytes(range(8 * ncpu))
    backend.map_update_elem(fd, u32(5), value)
    assert backend.map_lookup_elem(fd, u32(5)) == value  # padding round-trips
    assert backend.map_lookup_and_delete_elem(fd, u32(5)) == value
    assert errno_of(backend.map_lookup_elem, fd, u32(5)) == errno.ENOENT


def test_get_next_key_of_a_missing_key_restarts_at_the_first(backend):
    fd = hmap(backend)
    for i in range(5):
        backend.map_update_elem(fd, u32(i), bytes(8))
    first = backend.map_get_next_key(fd, None)
    assert backend.map_get_next_key(fd, u32(77)) == first
    last = list(iter_keys(backend, fd))[-1]
    assert errno_of(backend.map_get_next_key, fd, last) == errno.ENOENT


class _ShrinkingBucket(list):
    """A bucket that loses its last element right after get_next_key finds its key's place,
    as when another CPU deletes that element between the two reads."""

    def index(self, *args):
        pos = super().index(*args)
        self.pop()
        return pos


def test_get_next_key_survives_a_concurrent_delete_in_the_same_bucket():
    sys = system("emulated")
    fd = hmap(sys, max_entries=4)
    same_bucket = [k for k in range(64) if htab_map_hash(u32(k), 0) & 3 == 0][:3]
    for k in same_bucket:
        sys.map_update_elem(fd, u32(k), bytes(8))
    m = sys.map_from_fd(fd)
    m.buckets[0] = _ShrinkingBucket(m.buckets[0])
    # Newest first: the copy get_next_key reads still holds the oldest key after the middle one.
    newest, middle, oldest = reversed(same_bucket)
    assert sys.map_get_next_key(fd, u32(middle)) == u32(oldest)


def test_htab_lookup_batch_walks_buckets_and_returns_bucket_tokens(backend):
    fd = hmap(backend, max_entries=16)
    for i in range(10):
        backend.map_update_elem(fd, u32(i), u32(i) * 2)
    seen, token = [], None
    while True:
        result = backend.map_lookup_batch(fd, token, 3)
        seen += result.keys
        if result.end:
            break
        token = result.out_batch
        assert len(token) == 4
    assert seen == list(iter_keys(backend, fd))


def test_lookup_and_delete_batch_empties_the_map(backend):
    fd = hmap(backend, T.LRU_HASH, max_entries=16)
    for i in range(6):
        backend.map_update_elem(fd, u32(i), bytes(8))
    result = backend.map_lookup_and_delete_batch(fd, None, 64)
    assert result.end and sorted(result.keys) == [u32(i) for i in range(6)]
    assert errno_of(backend.map_get_next_key, fd, None) == errno.ENOENT


def test_lru_with_no_prealloc_gives_enotsupp(backend):
    assert errno_of(backend.map_create, T.LRU_HASH, 4, 8, 8, BPF_F_NO_PREALLOC) == ENOTSUPP


def test_no_common_lru_rounds_max_entries_to_the_cpus(backend):
    ncpu = backend.num_possible_cpus
    fd = backend.map_create(T.LRU_HASH, 4, 8, ncpu * 3 + 1, map_flags=0x2)
    assert backend.map_get_info(fd).max_entries == ncpu * 4


# -- emulated-only: program-side ops, counters, invariants ------------------------------------

def test_program_lookup_returns_the_live_value_buffer():
    sys = system("emulated", cpus=2)
    fd = hmap(sys)
    sys.map_update_elem(fd, u32(1), bytes(8))
    m = sys.map_from_fd(fd)
    buf = m.map_lookup_elem(u32(1))
    buf[0:4] = b"live"
    assert sys.map_lookup_elem(fd, u32(1)) == b"live" + bytes(4)
    assert m.map_lookup_elem(u32(2)) is None


@pytest.mark.parametrize("map_type", [T.HASH, T.LRU_HASH])
def test_a_bound_lookup_gives_a_value_its_region_once_per_run_as_the_python_helper(map_type):
    """bpf_map_lookup_elem bound to a hash map (its C helper where built, else the Python
    one) against the Python helper: a value found gets the run's next region the first time
    (RunState.region_of), the same pointer after, another value the region after; a miss is
    NULL."""
    from pybpf.emulated.prog.helpers import bpf_map_lookup_elem, map_lookup_elem
    from pybpf.emulated.prog.memory import RunState

    sys = system("emulated", cpus=1, modeled_time=False)
    fd = hmap(sys, map_type)
    for k in (1, 2):
        sys.map_update_elem(fd, u32(k), bytes(8))
    m = sys.map_from_fd(fd)
    runs = []
    for helper in (bpf_map_lookup_elem.bind_map(m), lambda rs, r2, *_: map_lookup_elem(m, rs, r2)):
        rs = RunState(sys.run_env)
        with sys.on_cpu(0):
            rs.cpu = 0
            stack = rs.mem[5] = bytearray(16)
            stack[0:4], stack[4:8], stack[8:12] = u32(1), u32(2), u32(3)
            pointers = [helper(rs, (5 << 32) | at, 0, 0, 0) for at in (0, 4, 0, 8, 4)]
        runs.append((pointers, rs.next_region, {r: id(v) for r, v in rs.mem.items() if r != 5}))
    assert runs[0] == runs[1]
    first = runs[0][0][0] >> 32
    assert runs[0][0] == [first << 32, (first + 1) << 32, first << 32, 0, (first + 1) << 32]
    assert runs[0][1] == first + 2


@pytest.mark.parametrize("map_type", [T.HASH, T.LRU_HASH, T.PERCPU_HASH])
def test_an_emptied_bucket_keeps_its_list_and_leaves_the_index(map_type):
    """A bucket's list is made when it first takes an element and kept when it empties: the
    non-empty index and the walks skip it, a new element goes into it."""
    sys = system("emulated", cpus=2)
    fd = hmap(sys, map_type)
    m = sys.map_from_fd(fd)
    for k in (1, 2):
        sys.map_update_elem(fd, u32(k), bytes(8) if map_type != T.PERCPU_HASH else bytes(16))
    lists = {i: bucket for i, bucket in m.buckets.items()}
    sys.map_delete_elem(fd, u32(1))
    sys.map_delete_elem(fd, u32(2))
    assert m.buckets == {i: [] for i in lists} and not any(m.storage.nonempty)
    assert list(iter_keys(sys, fd)) == [] and m.storage.problems(m._hash) == []
    sys.map_update_elem(fd, u32(2), bytes(8) if map_type != T.PERCPU_HASH else bytes(16))
    index = m.table[u32(2)].hash & m.mask
    assert m.buckets[index] is lists[index] and m.storage.nonempty[index] == 1
    assert list(iter_keys(sys, fd)) == [u32(2)] and m.storage.problems(m._hash) == []


def test_program_update_and_delete_return_negative_errno():
    sys = system("emulated", cpus=2)
    m = sys.map_from_fd(hmap(sys, max_entries=1))
    assert op_errno(m.map_update_elem, u32(1), bytes(8), BPF_ANY) == 0
    assert op_errno(m.map_update_elem, u32(1), bytes(8), BPF_NOEXIST) == errno.EEXIST
    assert op_errno(m.map_update_elem, u32(2), bytes(8), BPF_ANY) == errno.E2BIG
    assert op_errno(m.map_delete_elem, u32(2)) == errno.ENOENT
    assert op_errno(m.map_delete_elem, u32(1)) == 0


def test_program_update_of_a_new_percpu_key_zeroes_other_cpus():
    sys = system("emulated", cpus=3)
    fd = hmap(sys, T.PERCPU_HASH, value_size=8)
    m = sys.map_from_fd(fd)
    with sys.on_cpu(1):
        assert op_errno(m.map_update_elem, u32(1), b"A" * 8, BPF_ANY) == 0
        assert bytes(m.map_lookup_elem(u32(1))) == b"A" * 8
    assert sys.map_lookup_elem(fd, u32(1)) == bytes(8) + b"A" * 8 + bytes(8)
    with sys.on_cpu(2):
        m.map_update_elem(u32(1), b"B" * 8, BPF_EXIST)  # existing: only this CPU's slot
    assert sys.map_lookup_elem(fd, u32(1)) == bytes(8) + b"A" * 8 + b"B" * 8


def test_numa_access_stats_count_remote_reads():
    sys = system("emulated", cpus=4, nodes=2)
    fd = sys.map_create(T.HASH, 4, 8, 8, map_flags=0x4, numa_node=1)
    sys.map_update_elem(fd, u32(1), bytes(8))
    m = sys.map_from_fd(fd)
    with sys.on_cpu(0):
        m.map_lookup_elem(u32(1))
        m.map_lookup_elem(u32(1))
    with sys.on_cpu(3):
        m.map_lookup_elem(u32(1))
    stats = sys.map_stats(fd)
    assert stats["numa_node"] == 1
    # the syscall update from CPU 0 wrote the element too: a remote access
    assert stats["access_by_cpu"] == {0: (0, 3), 3: (1, 0)}
    assert m.access_stats.remote_share(0) == 1.0


def test_map_without_a_node_lives_on_the_creating_cpus_node():
    sys = system("emulated", cpus=4, nodes=2)
    with sys.on_cpu(2):
        fd = sys.map_create(T.HASH, 4, 8, 8)
    assert sys.map_stats(fd)["numa_node"] == 1


def test_prealloc_free_list_and_spares_keep_capacity_exact():
    sys = system("emulated", cpus=2)
    fd = hmap(sys, max_entries=4)
    m = sys.map_from_fd(fd)
    for _round in range(3):
        for i in range(4):
            sys.map_update_elem(fd, u32(i), bytes(8))
            sys.map_update_elem(fd, u32(i), b"x" * 8)
        m.check_invariants()
        for i in range(4):
            sys.map_delete_elem(fd, u32(i))
        m.check_invariants()
    stats = sys.map_stats(fd)
    assert stats["freelist_free"] == 4 and stats["elements"] == 0


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["upd", "del", "lad", "batchdel"]),
                          st.integers(0, 20), st.sampled_from([0, 1, 2])), max_size=60),
       st.sampled_from([T.HASH, T.PERCPU_HASH, T.LRU_HASH, T.LRU_PERCPU_HASH]),
       st.booleans())
def test_invariants_hold_after_any_sequence(ops, map_type, no_prealloc):
    sys = system("emulated", cpus=2)
    lru = map_type in (T.LRU_HASH, T.LRU_PERCPU_HASH)
    flags = BPF_F_NO_PREALLOC if no_prealloc and not lru else 0
    fd = hmap(sys, map_type, max_entries=8, flags=flags)
    m = sys.map_from_fd(fd)
    width = 8 * 2 if map_type in (T.PERCPU_HASH, T.LRU_PERCPU_HASH) else 8
    for op, k, f in ops:
        key = u32(k)
        try:
            if op == "upd":
                sys.map_update_elem(fd, key, bytes([k]) * width, f)
            elif op == "del":
                sys.map_delete_elem(fd, key)
            elif op == "lad":
                sys.map_lookup_and_delete_elem(fd, key)
            else:
                sys.map_lookup_and_delete_batch(fd, None, 4)
        except OSError as exc:
            assert exc.errno in (errno.ENOENT, errno.EEXIST, errno.E2BIG, errno.ENOSPC)
        m.check_invariants()
        for key in m.table:
            assert sys.map_lookup_elem(fd, key)[:1] == key[:1]
