"""Threads on different emulated CPUs hammering one map: no lost updates, invariants hold."""

from __future__ import annotations

import errno
import socket
import struct
import sys as sys_module
import threading

import pytest

from helpers import u32
from pybpf import system
from pybpf.system import iter_keys
from pybpf.uapi import BPF_F_NO_COMMON_LRU, BPF_F_NO_PREALLOC, BPF_NOEXIST, MapType

T = MapType
THREADS = 4
ROUNDS = 300


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
            slot = m.map_lookup_elem(u32(0))  # what a program does: its CPU's slot
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
                m.map_lookup_elem(key)
            if i % 11 == 0:
                try:
                    sys.map_delete_elem(fd, key)
                except OSError as exc:
                    assert exc.errno == 2

    hammer(sys, worker)
    m.check_invariants()  # membership, counters, in-use nodes == elements
    assert 0 < len(m.table) <= m.max_entries


@pytest.fixture
def fast_thread_switches():
    """Switch threads every microsecond, so that races show within a short run."""
    interval = sys_module.getswitchinterval()
    sys_module.setswitchinterval(1e-6)
    yield
    sys_module.setswitchinterval(interval)


@pytest.mark.parametrize("map_type,flags", [(T.HASH, 0), (T.HASH, BPF_F_NO_PREALLOC),
                                            (T.LRU_HASH, 0)])
def test_threads_sharing_a_cpu_replace_keys_without_corrupting_the_map(
        map_type, flags, fast_thread_switches):
    # Unpinned threads all run on CPU 0: they share its spare element, and an element
    # found without a bucket lock may be recycled for another key meanwhile.
    sys = system("emulated", cpus=2)
    fd = sys.map_create(map_type, 4, 8, 64, map_flags=flags)
    for k in range(64):
        sys.map_update_elem(fd, u32(k), bytes(8))
    errors = []

    def update(k, value):
        try:
            sys.map_update_elem(fd, u32(k), value)
        except OSError as exc:
            # A freed element is given back after its bucket lock is dropped (as in the
            # kernel), so a concurrent insert may briefly find the map full.
            if exc.errno != errno.E2BIG:
                raise

    def worker(seed):
        try:
            for i in range(1500):
                k = (i * 7 + seed * 13) % 64
                update(k, struct.pack("<Q", i))
                if k % THREADS == seed and i % 5 == 0:  # only this thread deletes k
                    try:
                        sys.map_lookup_and_delete_elem(fd, u32(k))
                    except OSError as exc:  # its re-insert found the map full (above)
                        if exc.errno != errno.ENOENT:
                            raise
                    update(k, bytes(8))
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(seed,)) for seed in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]
    m = sys.map_from_fd(fd)
    m.check_invariants()  # one element per key, each in its key's bucket, none lost
    assert sorted(iter_keys(sys, fd)) == sorted(m.table)


@pytest.mark.parametrize("map_type", [T.DEVMAP_HASH, T.SOCKHASH])
def test_hashed_fd_maps_keep_their_buckets_under_concurrent_updates_and_deletes(
        map_type, fast_thread_switches):
    sys = system("emulated", cpus=2)
    fd = sys.map_create(map_type, 4, 4, 8)
    pair = socket.socketpair()
    value = u32(1 if map_type == T.DEVMAP_HASH else pair[0].fileno())
    errors = []

    def worker(seed):
        try:
            for i in range(1500):
                key = u32((i + seed) % 4)
                try:
                    sys.map_update_elem(fd, key, value)
                    sys.map_delete_elem(fd, key)
                except OSError as exc:
                    if exc.errno != errno.ENOENT:  # another thread deleted it first
                        raise
                if i % 50 == 0:
                    list(iter_keys(sys, fd))
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(seed,)) for seed in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    pair[0].close()
    pair[1].close()
    assert not errors, errors[:3]
    buckets = sys.map_from_fd(fd).index if map_type == T.DEVMAP_HASH else \
        sys.map_from_fd(fd).table
    assert buckets.count == sum(len(b) for b in buckets.buckets.values())
