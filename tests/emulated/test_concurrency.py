"""Threads on different emulated CPUs hammering one map: no lost updates, invariants hold."""

from __future__ import annotations

import struct
import threading

import pytest

from pybpf import system
from pybpf.uapi import BPF_F_NO_COMMON_LRU, BPF_F_NO_PREALLOC, BPF_NOEXIST, MapType

T = MapType
THREADS = 4
ROUNDS = 300


def u32(i):
    return struct.pack("<I", i)


def hammer(sys, worker):
    errors = []
    start = threading.Barrier(THREADS)

    def run(cpu):
        try:
            with sys.on_cpu(cpu):
                start.wait()
                worker(cpu)
        except BaseException as exc:  # reported below, with the thread's CPU
            errors.append((cpu, exc))
            start.abort()  # threads still at the barrier stop waiting for this one

    threads = [threading.Thread(target=run, args=(cpu,)) for cpu in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


@pytest.mark.parametrize("flags", [0, BPF_F_NO_PREALLOC])
def test_disjoint_keys_from_each_cpu_are_all_kept(flags):
    sys = system("emulated", cpus=THREADS)
    fd = sys.map_create(T.HASH, 4, 8, THREADS * ROUNDS, map_flags=flags)

    def worker(cpu):
        for i in range(ROUNDS):
            sys.map_update_elem(fd, u32(cpu * ROUNDS + i), struct.pack("<Q", cpu), BPF_NOEXIST)

    hammer(sys, worker)
    m = sys.map_from_fd(fd)
    m.check_invariants()
    assert len(m.table) == THREADS * ROUNDS
    for cpu in range(THREADS):
        assert sys.map_lookup_elem(fd, u32(cpu * ROUNDS)) == struct.pack("<Q", cpu)


@pytest.mark.parametrize("flags", [0, BPF_F_NO_PREALLOC])
def test_insert_delete_churn_on_shared_keys_keeps_the_free_lists_exact(flags):
    sys = system("emulated", cpus=THREADS)
    fd = sys.map_create(T.HASH, 4, 8, 32, map_flags=flags)

    def worker(cpu):
        for i in range(ROUNDS):
            key = u32((i * 7 + cpu) % 48)
            try:
                if i % 3 == 2:
                    sys.map_delete_elem(fd, key)
                else:
                    sys.map_update_elem(fd, key, bytes(8))
            except OSError as exc:
                assert exc.errno in (2, 7)  # ENOENT, E2BIG when full

    hammer(sys, worker)
    m = sys.map_from_fd(fd)
    m.check_invariants()  # free + used == max_entries, buckets agree with the table


def test_per_cpu_counters_lose_no_update():
    sys = system("emulated", cpus=THREADS)
    fd = sys.map_create(T.PERCPU_HASH, 4, 8, 4)
    sys.map_update_elem(fd, u32(0), bytes(8 * THREADS))
    m = sys.map_from_fd(fd)

    def worker(cpu):
        for _ in range(ROUNDS):
            slot = m.lookup_elem(u32(0))  # what a program does: its CPU's slot
            slot[0:8] = struct.pack("<Q", struct.unpack_from("<Q", slot)[0] + 1)

    hammer(sys, worker)
    raw = sys.map_lookup_elem(fd, u32(0))
    assert [struct.unpack_from("<Q", raw, 8 * c)[0] for c in range(THREADS)] == [ROUNDS] * 4


@pytest.mark.parametrize("map_type,flags", [(T.LRU_HASH, 0), (T.LRU_HASH, BPF_F_NO_COMMON_LRU),
                                            (T.LRU_PERCPU_HASH, 0)])
def test_lru_under_contention_keeps_every_node_on_one_list(map_type, flags):
    sys = system("emulated", cpus=THREADS)
    fd = sys.map_create(map_type, 4, 8, 64, map_flags=flags)
    width = 8 * THREADS if map_type == T.LRU_PERCPU_HASH else 8
    m = sys.map_from_fd(fd)

    def worker(cpu):
        for i in range(ROUNDS):
            key = u32(cpu * 1000 + i % 100)
            try:
                sys.map_update_elem(fd, key, bytes(width))
            except OSError as exc:
                assert exc.errno == 12  # ENOMEM: every node held by other CPUs
            if i % 5 == 0:
                m.lookup_elem(key)
            if i % 11 == 0:
                try:
                    sys.map_delete_elem(fd, key)
                except OSError as exc:
                    assert exc.errno == 2

    hammer(sys, worker)
    m.check_invariants()  # membership, counters, in-use nodes == elements
    assert 0 < len(m.table) <= m.max_entries
