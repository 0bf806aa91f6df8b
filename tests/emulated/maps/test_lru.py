"""The LRU: list moves, eviction choice (against the kernel on one pinned CPU), invariants."""

from __future__ import annotations

import errno

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import u32
from pybpf import system
from pybpf.emulated.maps.bpf_lru_list import (
    ACTIVE,
    FREE,
    INACTIVE,
    LEGAL_MOVES,
    LOCAL_PENDING,
    BpfLru,
    LruNode,
    lru_target_free,
)
from pybpf.system import iter_keys
from pybpf.uapi import BPF_EXIST, BPF_F_NO_COMMON_LRU, BPF_F_ZERO_SEED, BPF_NOEXIST, MapType

T = MapType


def lru_map(sys, max_entries, map_type=T.LRU_HASH, flags=0):
    return sys.map_create(map_type, 4, 8, max_entries, map_flags=flags | BPF_F_ZERO_SEED)


def value_for(sys, map_type):
    return bytes(8 * sys.num_possible_cpus if map_type == T.LRU_PERCPU_HASH else 8)


@pytest.mark.parametrize("max_entries,ncpu,target", [(4, 1, 2), (4, 2, 1), (1000, 2, 128),
                                                     (10, 20, 1)])
def test_target_free_is_clamped_half_share(max_entries, ncpu, target):
    assert lru_target_free(max_entries, ncpu) == target


def test_reference_example_one_cpu_four_entries():
    """§5.5 on a 6.16+ kernel with one CPU: E flushes A..D and evicts A and B, ..."""
    sys = system("emulated", cpus=1)
    fd = lru_map(sys, 4)
    for name in "ABCDE":
        sys.map_update_elem(fd, name.encode() * 4, bytes(8))
    assert sorted(iter_keys(sys, fd)) == [b"CCCC", b"DDDD", b"EEEE"]
    sys.map_update_elem(fd, b"FFFF", bytes(8))
    assert sorted(iter_keys(sys, fd)) == [b"CCCC", b"DDDD", b"EEEE", b"FFFF"]
    sys.map_update_elem(fd, b"GGGG", bytes(8))
    assert sorted(iter_keys(sys, fd)) == [b"EEEE", b"FFFF", b"GGGG"]
    sys.map_from_fd(fd).check_invariants()


def test_a_new_key_waits_on_the_pending_list_until_the_next_refill():
    sys = system("emulated", cpus=1)
    fd = lru_map(sys, 8)
    sys.map_update_elem(fd, u32(1), bytes(8))
    lru = sys.map_from_fd(fd).lru_list
    pending = lru.lists()["cpu0.LOCAL_PENDING"]
    assert len(pending) == 1 and pending[0].type == LOCAL_PENDING


def test_updating_an_existing_key_sets_its_reference_bit_and_protects_it():
    sys = system("emulated", cpus=1)
    fd = lru_map(sys, 4)
    for i in range(4):
        sys.map_update_elem(fd, u32(i), bytes(8))
    sys.map_update_elem(fd, u32(0), b"x" * 8)  # 0 is now referenced
    for i in range(10, 13):
        sys.map_update_elem(fd, u32(i), bytes(8))
    assert u32(0) in set(iter_keys(sys, fd))


def test_program_lookups_set_the_ref_bit_and_syscall_lookups_do_not():
    sys = system("emulated", cpus=1)
    fd = lru_map(sys, 8)
    sys.map_update_elem(fd, u32(1), bytes(8))
    sys.map_update_elem(fd, u32(2), bytes(8))
    m = sys.map_from_fd(fd)
    sys.map_lookup_elem(fd, u32(1))
    assert m.table[u32(1)].ref == 0
    m.map_lookup_elem(u32(2))
    assert m.table[u32(2)].ref == 1


def test_lru_percpu_exist_update_takes_no_node():
    sys = system("emulated", cpus=1)
    fd = lru_map(sys, 4, T.LRU_PERCPU_HASH)
    m = sys.map_from_fd(fd)
    pops = m.lru_list.pops
    with pytest.raises(OSError) as info:
        sys.map_update_elem(fd, u32(1), bytes(8), BPF_EXIST)
    assert info.value.errno == errno.ENOENT and m.lru_list.pops == pops


def test_failed_noexist_update_still_takes_and_returns_a_node():
    sys = system("emulated", cpus=1)
    fd = lru_map(sys, 4)
    sys.map_update_elem(fd, u32(1), bytes(8))
    m = sys.map_from_fd(fd)
    pops, pushes = m.lru_list.pops, m.lru_list.pushes
    with pytest.raises(OSError) as info:
        sys.map_update_elem(fd, u32(1), bytes(8), BPF_NOEXIST)
    assert info.value.errno == errno.EEXIST
    assert (m.lru_list.pops, m.lru_list.pushes) == (pops + 1, pushes + 1)
    m.check_invariants()


def test_per_cpu_lru_keeps_nodes_on_their_cpu():
    sys = system("emulated", cpus=2)
    fd = lru_map(sys, 8, flags=BPF_F_NO_COMMON_LRU)
    with sys.on_cpu(1):
        for i in range(10):
            sys.map_update_elem(fd, u32(i), bytes(8))
    m = sys.map_from_fd(fd)
    m.check_invariants()
    lists = m.lru_list.lists()
    assert not lists["cpu0.ACTIVE"] and not lists["cpu0.INACTIVE"]
    assert len(m.table) <= 4  # CPU 1 owns 4 of the 8 nodes


def test_illegal_move_marks_the_lru_broken():
    lru = BpfLru(1, False, lambda node: True)
    node = LruNode()
    node.type = LOCAL_PENDING
    assert (LOCAL_PENDING, FREE) not in LEGAL_MOVES["move"]
    with pytest.raises(RuntimeError):
        lru._move(lru.common, node, FREE)
    assert lru.broken


def test_check_invariants_catches_a_wrong_counter():
    lru = BpfLru(1, False, lambda node: True)
    lru.populate([LruNode() for _ in range(4)])
    lru.check_invariants()
    lru.common.counts[ACTIVE] = 3
    with pytest.raises(RuntimeError, match="counter"):
        lru.check_invariants()


def test_rotation_moves_referenced_inactive_nodes_to_active():
    lru = BpfLru(1, False, lambda node: True)
    nodes = [LruNode() for _ in range(3)]
    lru.populate(nodes)
    for node in nodes:
        lru._move(lru.common, node, INACTIVE)
    nodes[1].ref = 1
    lru._rotate(lru.common)
    assert nodes[1].type == ACTIVE and nodes[1].ref == 0
    lru.check_invariants(nodes)


# -- the kernel is the oracle for which keys get evicted ----------------------------------------

def _run(sys, map_type, max_entries, flags, ops, cpus=None):
    fd = lru_map(sys, max_entries, map_type, flags)
    value = value_for(sys, map_type)
    trace = []
    for i, (op, key, uflags) in enumerate(ops):
        with sys.on_cpu(cpus[i] if cpus else 0):
            try:
                if op == "upd":
                    sys.map_update_elem(fd, u32(key), value, uflags)
                else:
                    sys.map_delete_elem(fd, u32(key))
                result = 0
            except OSError as exc:
                result = exc.errno
        trace.append((result, tuple(iter_keys(sys, fd))))
    sys.close(fd)
    return trace


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["upd", "upd", "upd", "del"]), st.integers(0, 40),
                          st.sampled_from([0, 0, BPF_NOEXIST, BPF_EXIST])),
                min_size=1, max_size=80),
       st.sampled_from([T.LRU_HASH, T.LRU_PERCPU_HASH]),
       st.sampled_from([4, 8, 16]),
       st.sampled_from([0, BPF_F_NO_COMMON_LRU]))
def test_eviction_on_one_pinned_cpu_matches_the_kernel(kernel_sys, ops, map_type, size, flags):
    emulated = system("emulated", cpus=kernel_sys.num_possible_cpus)
    assert _run(emulated, map_type, size, flags, ops) == \
        _run(kernel_sys, map_type, size, flags, ops)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["upd", "upd", "upd", "del"]), st.integers(0, 40),
                          st.sampled_from([0, 0, BPF_NOEXIST, BPF_EXIST]), st.integers(0, 1)),
                min_size=1, max_size=80),
       st.sampled_from([T.LRU_HASH, T.LRU_PERCPU_HASH]),
       st.sampled_from([4, 8, 16]),
       st.sampled_from([0, BPF_F_NO_COMMON_LRU]))
def test_eviction_moving_between_cpus_matches_the_kernel(kernel_sys, ops, map_type, size, flags):
    """One thread, each operation pinned to CPU 0 or 1: local lists, refills and steals."""
    if kernel_sys.num_possible_cpus < 2:
        pytest.skip("needs two CPUs")
    cpus = [op[3] for op in ops]
    ops = [op[:3] for op in ops]
    emulated = system("emulated", cpus=kernel_sys.num_possible_cpus)
    assert _run(emulated, map_type, size, flags, ops, cpus) == \
        _run(kernel_sys, map_type, size, flags, ops, cpus)


@pytest.fixture(scope="module")
def kernel_sys():
    from pybpf.testing import KERNEL_SKIP_REASON, kernel_available

    if not kernel_available():
        pytest.skip(KERNEL_SKIP_REASON)
    return system("kernel")
