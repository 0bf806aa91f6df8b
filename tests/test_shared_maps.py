"""pybpf.shared: maps in a shared memory segment (the C extension pybpf._shm_maps).

The emulated Python maps are the reference, and the kernel the oracle where bpf(2) is allowed:
random op sequences on a shared map and on a map of the same type and flags there
(BPF_F_ZERO_SEED, so the bucket order is the same) give the same values, errno and
get_next_key order. Then what only a shared map does: two
processes updating one hash at once lose and duplicate nothing; a segment whose processes
died is reclaimed; a full segment and a full map say which size to raise; without the C
extension the face says what to install and the rest of pybpf works.
"""

from __future__ import annotations

import contextlib
import errno
import json
import mmap
import multiprocessing
import os
import signal
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pybpf
from helpers import forked_results
from pybpf import shared
from pybpf.errors import BPFError, KeyExistsError, KeyNotFoundError, MapFullError
from pybpf.testing import KERNEL_SKIP_REASON, kernel_available
from pybpf.topology import host_topology
from pybpf.uapi import BPF_F_NO_PREALLOC, BPF_F_ZERO_SEED, MapType

pytestmark = pytest.mark.skipif(not shared.available(),
                                reason="pybpf._shm_maps is not built (no C compiler)")

MIB = 1 << 20


@pytest.fixture
def segment_name():
    """A fresh segment name, unlinked after the test whatever happened."""
    name = f"pybpf-test-{uuid.uuid4().hex[:12]}"
    yield name
    try:
        shared.unlink(name)
    except OSError:
        pass


@pytest.fixture(scope="module", params=["emulated", "kernel"])
def reference(request):
    """The emulated Python maps (the reference implementation), and the kernel itself (the
    oracle) where bpf(2) is allowed."""
    if request.param == "kernel":
        if not kernel_available():
            pytest.skip(KERNEL_SKIP_REASON)
        return pybpf.system("kernel")
    return pybpf.system("emulated", modeled_time=False)


# -- jhash ------------------------------------------------------------------------------------

@given(st.binary(max_size=64), st.integers(0, 2**32 - 1))
def test_the_c_jhash_is_the_reference_jhash(key, initval):
    from pybpf.emulated.maps.jhash import htab_map_hash, jhash

    assert shared.SHM.jhash(key, initval) == jhash(key, initval)
    assert shared.SHM.htab_map_hash(key, initval) == htab_map_hash(key, initval)


# -- differential: random op sequences against the emulated Python maps ----------------------

def outcome(call):
    """What a call gave: ("ok", result) or ("errno", n)."""
    try:
        return ("ok", call())
    except OSError as exc:
        return ("errno", exc.errno)


def walk(get_next) -> list:
    """Every key by get_next_key from None, as the map orders them."""
    keys, key = [], None
    while True:
        kind, key = outcome(lambda k=key: get_next(k))
        if kind == "errno":
            return keys
        keys.append(key)


FLAGS = st.sampled_from([0, 0, 0, 1, 2, 3, 4, 5, 8])


def op_strategy(key_size: int, value_size: int, key_pool: list[bytes]):
    key = st.sampled_from(key_pool)
    value = st.binary(min_size=value_size, max_size=value_size)
    return st.one_of(
        st.tuples(st.just("update"), key, value, FLAGS),
        st.tuples(st.just("lookup"), key, st.sampled_from([0, 0, 0, 4, 1])),
        st.tuples(st.just("delete"), key),
        st.tuples(st.just("lookup_and_delete"), key, st.sampled_from([0, 0, 4])),
        st.tuples(st.just("next"), st.one_of(st.none(), key)),
        st.tuples(st.just("walk")),
    )


def run_both(shared_map, ref, fd, op) -> tuple:
    """One op on the shared map (its face, bytes codecs) and on the reference System map."""
    name, *args = op
    m = shared_map
    if name == "update":
        key, value, flags = args
        return (outcome(lambda: m.update(key, value, flags=flags)),
                outcome(lambda: ref.map_update_elem(fd, key, value, flags)))
    if name == "lookup":
        key, flags = args
        return (outcome(lambda: m.lookup(key, flags)),
                outcome(lambda: ref.map_lookup_elem(fd, key, flags)))
    if name == "delete":
        (key,) = args
        return (outcome(lambda: m.delete(key)), outcome(lambda: ref.map_delete_elem(fd, key)))
    if name == "lookup_and_delete":
        key, flags = args
        return (outcome(lambda: m.lookup_and_delete(key, flags)),
                outcome(lambda: ref.map_lookup_and_delete_elem(fd, key, flags)))
    if name == "next":
        (key,) = args
        return (outcome(lambda: m.get_next_key(key)),
                outcome(lambda: ref.map_get_next_key(fd, key)))
    assert name == "walk"
    return (walk(m.get_next_key), walk(lambda k: ref.map_get_next_key(fd, k)))


def run_sequence(m, reference, fd, ops) -> None:
    """Every op on the shared map and on the reference's map ``fd``: the same outcome each,
    then the same keys in the same order."""
    for op in ops:
        mine, ref = run_both(m, reference, fd, op)
        assert mine == ref, op
    assert walk(m.get_next_key) == walk(lambda k: reference.map_get_next_key(fd, k))


@st.composite
def hash_case(draw):
    key_size = draw(st.sampled_from([1, 3, 4, 8, 13]))
    value_size = draw(st.sampled_from([1, 5, 8, 16]))
    max_entries = draw(st.integers(1, 12))
    flags = BPF_F_ZERO_SEED | draw(st.sampled_from([0, BPF_F_NO_PREALLOC]))
    # A small pool of keys: collisions in buckets, replacements, a map that fills up.
    pool = draw(st.lists(st.binary(min_size=key_size, max_size=key_size), min_size=1,
                         max_size=20, unique=True))
    ops = draw(st.lists(op_strategy(key_size, value_size, pool), max_size=60))
    return key_size, value_size, max_entries, flags, ops


@settings(max_examples=150, database=None)
@given(hash_case())
def test_hash_op_sequences_match_the_reference(reference, case):
    key_size, value_size, max_entries, flags, ops = case
    seg = shared.Segment.create(None, 4 * MIB)
    fd = reference.map_create(MapType.HASH, key_size, value_size, max_entries,
                              map_flags=flags)
    try:
        m = seg.create_map("h", "hash", key_size, value_size, max_entries, flags)
        run_sequence(m, reference, fd, ops)
        assert m.count == len(m)
    finally:
        reference.close(fd)
        seg.close()


@settings(max_examples=60, database=None)
@given(hash_case())
def test_with_a_random_seed_only_the_order_differs(reference, case):
    """Without BPF_F_ZERO_SEED each map draws its own hashrnd: the same contents and errno,
    the keys in another order (get_next_key ops are left out)."""
    key_size, value_size, max_entries, flags, ops = case
    flags &= ~BPF_F_ZERO_SEED
    seg = shared.Segment.create(None, 4 * MIB)
    fd = reference.map_create(MapType.HASH, key_size, value_size, max_entries,
                              map_flags=flags)
    try:
        m = seg.create_map("h", "hash", key_size, value_size, max_entries, flags)
        for op in ops:
            if op[0] not in ("next", "walk"):
                mine, ref = run_both(m, reference, fd, op)
                assert mine == ref, op
        assert sorted(walk(m.get_next_key)) == sorted(
            walk(lambda k: reference.map_get_next_key(fd, k)))
    finally:
        reference.close(fd)
        seg.close()


@st.composite
def array_case(draw):
    value_size = draw(st.sampled_from([1, 5, 8, 12]))
    max_entries = draw(st.integers(1, 6))
    pool = [struct.pack("<I", i) for i in (0, 1, 2, 5, 6, 7, 0xFFFFFFFF)]
    ops = draw(st.lists(op_strategy(4, value_size, pool), max_size=40))
    return value_size, max_entries, ops


@settings(max_examples=80, database=None)
@given(array_case())
def test_array_op_sequences_match_the_reference(reference, case):
    value_size, max_entries, ops = case
    seg = shared.Segment.create(None, MIB)
    fd = reference.map_create(MapType.ARRAY, 4, value_size, max_entries)
    try:
        m = seg.create_map("a", "array", 4, value_size, max_entries, key=bytes)
        for op in ops:
            mine, ref = run_both(m, reference, fd, op)
            assert mine == ref, op
    finally:
        reference.close(fd)
        seg.close()


@pytest.mark.parametrize("map_type, key_size, value_size, max_entries, flags", [
    ("hash", 0, 8, 4, 0), ("hash", 4, 0, 4, 0), ("hash", 4, 8, 0, 0),
    ("hash", 4, 1 << 22, 4, 0), ("hash", 4, 8, 4, 1 << 10),
    ("array", 8, 8, 4, 0), ("array", 4, 0, 4, 0), ("array", 4, 8, 0, 0),
])
def test_bad_create_attributes_give_the_reference_errno(reference, map_type, key_size,
                                                        value_size, max_entries, flags):
    kind = MapType[map_type.upper()]
    expected = outcome(lambda: reference.map_create(kind, key_size, value_size, max_entries,
                                                    map_flags=flags))
    assert expected[0] == "errno"
    with shared.Segment.create(None, MIB) as seg:
        got = outcome(lambda: seg.create_map("m", map_type, key_size, value_size,
                                             max_entries, flags, key=bytes))
    assert got == expected


def test_flags_the_reference_takes_but_shared_maps_do_not_are_refused_clearly():
    with shared.Segment.create(None, MIB) as seg:
        with pytest.raises(BPFError) as info:
            seg.create_map("m", "hash", 4, 8, 4, pybpf.MapFlags.NUMA_NODE)
        assert info.value.errno == errno.EINVAL
        assert "BPF_F_NO_PREALLOC and BPF_F_ZERO_SEED only" in str(info.value)
        with pytest.raises(BPFError, match="LRU_PERCPU_HASH, LPM_TRIE, ARRAY and"):
            seg.create_map("q", "queue", 0, 8, 4)
        # per-CPU maps in a segment are an emulated system's, which knows its CPUs
        for kind in ("percpu_hash", "lru_percpu_hash"):
            with pytest.raises(BPFError, match="EmulatedSystem\\(shared=") as info:
                seg.create_map("p", kind, 4, 8, 4)
            assert info.value.errno == errno.EINVAL


def test_a_wrong_key_length_is_einval_and_no_map_is_touched():
    with shared.Segment.create(None, MIB) as seg:
        m = seg.create_map("h", "hash", 4, 8, 4)
        raw = m._m
        for call in (lambda: raw.lookup(b"abc"), lambda: raw.update(b"abcde", bytes(8)),
                     lambda: raw.delete(b""), lambda: raw.update(b"abcd", bytes(7))):
            assert outcome(call) == ("errno", errno.EINVAL)
        assert list(m) == [] and m.count == 0


# -- the face: names, errors, closing ---------------------------------------------------------

def test_the_face_is_shaped_like_map():
    with shared.Segment.create(None, MIB) as seg:
        m = seg.create_map("counts", "hash", 4, 8, 8, BPF_F_ZERO_SEED, key=int, value=int)
        m[1] = 10
        m.update(2, 20, flags="noexist")
        m.update({3: 30})
        assert m[1] == 10 and m.get(9, "none") == "none" and 2 in m and 9 not in m
        assert dict(m.items()) == {1: 10, 2: 20, 3: 30} and sorted(m.values()) == [10, 20, 30]
        with pytest.raises(KeyExistsError, match="BPF_NOEXIST"):
            m.update(1, 11, flags="noexist")
        with pytest.raises(KeyNotFoundError):
            m.update(7, 70, flags="exist")
        assert m.lookup_and_delete(2) == 20 and 2 not in m
        del m[3]
        with pytest.raises(KeyError):
            del m[3]
        assert list(m) == [1] and len(m) == 1 == m.count
        m.clear()
        assert len(m) == 0
        arr = seg.create_map("arr", "array", 4, 4, 3, value="<i")
        arr[2] = -5
        assert list(arr.items()) == [(0, 0), (1, 0), (2, -5)]
        assert seg.map_names() == ["counts", "arr"]


def test_map_names_are_the_segments_pins():
    with shared.Segment.create(None, MIB) as seg:
        seg.create_map("m", "hash", 4, 8, 4, key=int, value=int)[5] = 6
        with pytest.raises(BPFError) as info:
            seg.create_map("m", "array", 4, 8, 4)
        assert info.value.errno == errno.EEXIST and "open it" in str(info.value)
        assert seg.open_map("m", key=int, value=int)[5] == 6
        with pytest.raises(BPFError) as info:
            seg.open_map("nope")
        assert info.value.errno == errno.ENOENT


def test_a_closed_segment_gives_ebadf():
    seg = shared.Segment.create(None, MIB)
    m = seg.create_map("m", "hash", 4, 8, 4, key=int, value=int)
    seg.close()
    assert seg.closed
    for call in (lambda: m[1], lambda: m.update(1, 2), lambda: list(m), seg.map_names):
        with pytest.raises(BPFError) as info:
            call()
        assert info.value.errno == errno.EBADF


# -- full maps and full segments ---------------------------------------------------------------

@pytest.mark.parametrize("flags", [0, BPF_F_NO_PREALLOC])
def test_a_full_hash_is_e2big_and_takes_replacements(flags):
    with shared.Segment.create(None, MIB) as seg:
        m = seg.create_map("m", "hash", 4, 8, 3, flags, key=int, value=int)
        for k in range(3):
            m[k] = k
        with pytest.raises(MapFullError) as info:
            m[3] = 3
        assert info.value.errno == errno.E2BIG and "larger max_entries" in str(info.value)
        m[1] = 100  # a replacement needs no new element
        del m[0]
        m[3] = 3
        assert dict(m.items()) == {1: 100, 2: 2, 3: 3} and m.count == 3


def _fill_on_one_cpu(m, cpu: int, n: int, out) -> None:
    os.sched_setaffinity(0, {cpu})
    for k in range(n):
        m[k] = k
    try:
        m[n] = n
        out.put("no E2BIG")
    except MapFullError:
        out.put(m.count)


@pytest.mark.parametrize("flags", [0, BPF_F_NO_PREALLOC])
def test_a_process_on_one_cpu_takes_every_element_and_the_count_is_the_maps(flags):
    """Free elements are kept per CPU (the kernel's pcpu_freelist): a preallocated map's are
    spread over the CPUs' lists at create. A process pinned to one CPU still fills the whole
    map, taking from the other CPUs' lists once its own is empty, then gets E2BIG; the
    count, kept per CPU, is the map's wherever it is read, and deletes on another CPU
    bring it down."""
    ctx = multiprocessing.get_context("fork")
    with shared.Segment.create(None, MIB) as seg:
        m = seg.create_map("m", "hash", 4, 8, 100, flags, key=int, value=int)
        out = ctx.Queue()
        child = ctx.Process(target=_fill_on_one_cpu,
                            args=(m, max(os.sched_getaffinity(0)), 100, out))
        child.start()
        assert out.get(timeout=60) == 100
        child.join(timeout=60)
        assert child.exitcode == 0
        assert m.count == len(m) == 100
        for k in range(0, 100, 2):
            del m[k]
        assert m.count == len(m) == 50
        m[1000] = 1
        assert m.count == 51


def test_a_map_that_does_not_fit_is_enomem_naming_the_size_to_ask_for():
    with shared.Segment.create(None, MIB) as seg:
        with pytest.raises(BPFError) as info:
            seg.create_map("big", "hash", 4, 8, 1 << 20)
        assert info.value.errno == errno.ENOMEM
        wanted = int(str(info.value).rsplit(">= ", 1)[1])
        assert wanted > MIB
        free = seg.usage().free
        seg.create_map("small", "array", 4, 8, 16)  # what fits still fits
        assert seg.usage().free < free
    with shared.Segment.create(None, wanted) as seg:
        seg.create_map("big", "hash", 4, 8, 1 << 20)


def test_a_no_prealloc_hash_grows_until_the_segment_is_full():
    with shared.Segment.create(None, 4 * MIB) as seg:  # the buckets take 2 MiB
        m = seg.create_map("m", "hash", 4, 64, 100_000, BPF_F_NO_PREALLOC, key=int)
        n = 0
        with pytest.raises(BPFError) as info:
            while True:
                m[n] = bytes(64)
                n += 1
        assert info.value.errno == errno.ENOMEM and "larger size" in str(info.value)
        assert 1000 < n < 100_000 and m.count == n == len(m)
        del m[0]
        m[n] = bytes(64)  # a freed element is reused without more memory


# -- processes --------------------------------------------------------------------------------

def _hammer(name: str, map_name: str, worker: int, keys: int, rounds: int, out) -> None:
    """One process's share of the concurrent test: see the test."""
    seg = shared.Segment.attach(name)
    m = seg.open_map(map_name, key=int, value=int)
    own = range(worker * keys, (worker + 1) * keys)       # disjoint: this worker's alone
    common = range(10 * keys, 11 * keys)                  # overlapping: both workers'
    inserted = taken = 0
    taken_values = []
    for _ in range(rounds):
        for k in own:
            m[k] = k
        for k in own:
            assert m[k] == k
        for k in own:
            del m[k]
        for k in common:
            try:
                m.update(k, worker, flags="noexist")
                inserted += 1
            except KeyExistsError:
                pass
        for k in common:
            try:
                taken_values.append(m.lookup_and_delete(k))
                taken += 1
            except KeyNotFoundError:
                pass
    for k in own:  # leave this worker's keys in, for the final count
        m[k] = k
    out.put((worker, inserted, taken, sorted(set(taken_values)), os.getpid()))
    seg.close()


@pytest.mark.parametrize("flags", [0, BPF_F_NO_PREALLOC], ids=["prealloc", "no_prealloc"])
def test_two_processes_on_one_hash_lose_and_duplicate_nothing(segment_name, flags):
    """Two processes: each inserts, reads and deletes its own keys, and both race to insert
    (BPF_NOEXIST) and to take (lookup_and_delete) the same common keys. Every successful
    insert of a common key is taken exactly once or is still there at the end, no key is
    listed twice, and the own keys are all there: about 200k operations. Without
    preallocation both processes also grow the map (chunk by chunk) at once."""
    keys, rounds = 1000, 20
    with shared.Segment.create(segment_name, 8 * MIB) as seg:
        m = seg.create_map("h", "hash", 8, 8, 4 * keys, flags, key=int, value=int)
        results = forked_results(_hammer, [(segment_name, "h", w, keys, rounds)
                                           for w in range(2)])
        inserted = sum(r[1] for r in results)
        taken = sum(r[2] for r in results)
        listed = list(m)
        left = [k for k in listed if k >= 10 * keys]
        assert len(set(listed)) == len(listed) == m.count
        assert inserted == taken + len(left)
        assert inserted >= keys * rounds  # every round inserted each common key at least once
        assert {v for r in results for v in r[3]} <= {0, 1}
        assert sorted(k for k in listed if k < 10 * keys) == list(range(2 * keys))
        assert all(m[k] == k for k in range(2 * keys))


def _rewrite(name: str, stop) -> None:
    """The writer of the torn-value test: values of one repeated byte, changing all along."""
    seg = shared.Segment.attach(name)
    h, a = seg.open_map("h").raw, seg.open_map("a").raw
    keys = [bytes([k]) * 4 for k in range(4)]
    i = 0
    while not stop.is_set():
        value = bytes([i & 0xFF]) * 256
        for k in keys:
            h.update(k, value)
            a.update(k[:1] + bytes(3), value)
        i += 1
    seg.close()


def test_a_reader_never_sees_a_torn_value(segment_name):
    """One process rewrites 256-byte values (each one byte repeated) of a hash, in place, and
    of an array; this one reads them meanwhile, for a second: every value read is one byte
    repeated."""
    ctx = multiprocessing.get_context("fork")
    with shared.Segment.create(segment_name, MIB) as seg:
        h = seg.create_map("h", "hash", 4, 256, 4).raw
        a = seg.create_map("a", "array", 4, 256, 4).raw
        keys = [bytes([k]) * 4 for k in range(4)]
        for k in keys:
            h.update(k, bytes(256))
        stop = ctx.Event()
        p = ctx.Process(target=_rewrite, args=(segment_name, stop))
        p.start()
        reads = torn = 0
        end = time.monotonic() + 1.0
        try:
            while time.monotonic() < end:
                for k in keys:
                    for value in (h.lookup(k), a.lookup(k[:1] + bytes(3))):
                        reads += 1
                        torn += value.count(value[:1]) != len(value)
        finally:
            stop.set()
            p.join(timeout=60)
        assert p.exitcode == 0 and reads > 0 and torn == 0


def _spawned_child(name: str, conn) -> None:
    seg = shared.Segment.attach(name)
    m = seg.open_map("m", key=int, value=int)
    conn.send((m[1], sorted(seg.pids())))
    m[2] = 22
    conn.send("written")
    conn.recv()  # hold the segment until told
    seg.close()


def test_another_process_attaches_by_name(segment_name):
    ctx = multiprocessing.get_context("spawn")
    with shared.Segment.create(segment_name, MIB) as seg:
        m = seg.create_map("m", "hash", 4, 8, 8, key=int, value=int)
        m[1] = 11
        parent, child = ctx.Pipe()
        p = ctx.Process(target=_spawned_child, args=(segment_name, child))
        p.start()
        value, pids = parent.recv()
        assert value == 11 and pids == sorted([os.getpid(), p.pid])
        assert parent.recv() == "written" and m[2] == 22
        parent.send("done")
        p.join(timeout=60)
        assert p.exitcode == 0
        assert seg.pids() == [os.getpid()]


def test_a_forked_child_is_recorded_in_the_segment():
    with shared.Segment.create(f"pybpf-test-{uuid.uuid4().hex[:12]}", MIB) as seg:
        try:
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:  # the child: report the pids the segment records, then go
                os.write(w, repr(sorted(seg.pids())).encode())
                os._exit(0)
            os.close(w)
            seen = os.read(r, 4096).decode()
            os.close(r)
            os.waitpid(pid, 0)
            assert seen == repr(sorted([os.getpid(), pid]))
        finally:
            seg.unlink()


def _owner(name: str, ready) -> None:
    seg = shared.Segment.create(name, MIB)
    seg.create_map("m", "hash", 4, 8, 8, key=int, value=int)[1] = 1
    ready.send(os.getpid())
    time.sleep(300)


@pytest.mark.parametrize("reap", [True, False], ids=["reaped", "zombie"])
def test_a_segment_whose_processes_died_is_reclaimed(segment_name, reap):
    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe()
    p = ctx.Process(target=_owner, args=(segment_name, child))
    p.start()
    try:
        owner = parent.recv()
        with pytest.raises(BPFError) as info:
            shared.Segment.create(segment_name, MIB)
        assert info.value.errno == errno.EEXIST and str(owner) in str(info.value)
        os.kill(owner, signal.SIGKILL)
        if reap:
            p.join(timeout=60)
        else:  # killed, not yet waited for: a zombie is dead too
            while open(f"/proc/{owner}/stat").read().rsplit(")", 1)[1].split()[0] != "Z":
                time.sleep(0.01)
        with shared.Segment.create(segment_name, MIB) as seg:
            assert seg.map_names() == [] and seg.pids() == [os.getpid()]
    finally:
        p.kill()
        p.join(timeout=60)


MARKER = b"\x5a\xa5PYBPF!"


@contextlib.contextmanager
def element_words(segment_name: str) -> Iterator[tuple]:
    """White box: a one-element array holding MARKER in a new named segment, and its lock
    word and count (the 8 bytes before its value, _shm_maps.c's struct aelem) as two u32s,
    each changed by one aligned 32-bit store (struct.pack_into zero-fills first: a reader
    could see the count at 0)."""
    with shared.Segment.create(segment_name, MIB) as seg:
        a = seg.create_map("a", "array", 4, 8, 1, value=bytes)
        a[0] = MARKER
        with open(f"/dev/shm/{segment_name}", "r+b") as f, mmap.mmap(f.fileno(), 0) as mem:
            at = mem.find(MARKER)
            assert at > 8 and mem.find(MARKER, at + 1) == -1
            words = memoryview(mem)[at - 8:at].cast("I")
            try:
                yield a, words
            finally:
                words.release()


def test_a_lock_held_by_a_dead_process_is_eownerdead_not_a_hang(segment_name):
    """A process killed inside an operation leaves its element's lock taken and its count
    odd; they are set here as a dead process would leave them."""
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)  # a pid that no process has now
    with element_words(segment_name) as (a, words):
        words[0], words[1] = pid, words[1] + 1
        for call in (lambda: a[0], lambda: a.update(0, bytes(8))):
            with pytest.raises(BPFError) as info:
                call()
            assert info.value.errno == errno.EOWNERDEAD and str(pid) in str(info.value)


def test_attaching_to_a_missing_segment_says_how_to_make_one():
    with pytest.raises(BPFError) as info:
        shared.Segment.attach(f"pybpf-test-missing-{uuid.uuid4().hex[:8]}")
    assert info.value.errno == errno.ENOENT and "Segment.create" in str(info.value)


# -- without the C extension -------------------------------------------------------------------

def test_without_the_extension_the_face_names_what_to_install_and_pybpf_works():
    """The import of pybpf._shm_maps fails (as where no C compiler built it)."""
    code = "\n".join([
        "import sys",
        "sys.modules['pybpf._shm_maps'] = None  # import pybpf._shm_maps -> ImportError",
        "import pybpf",
        "from pybpf import shared",
        "from pybpf.maps import HashMap",
        "assert not shared.available()",
        "try:",
        "    shared.Segment.create(None, 1 << 20)",
        "except shared.SharedMapsUnavailable as exc:",
        "    print(exc)",
        "with HashMap(4, '<I', '<Q', system=pybpf.system('emulated')) as m:",
        "    m[1] = 2",
        "    print('emulated map', m[1])",
    ])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "apt-get install gcc python3-dev" in run.stdout
    assert "emulated map 2" in run.stdout


# -- the benchmark's plumbing (its figures are printed, never checked here) ----------------------

def test_bench_shm_runs_and_its_stress_run_counts_nothing_lost():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    run = subprocess.run([sys.executable, "-m", "pybpf", "bench", "shm", "--n", "2000",
                          "--entries", "200", "--repeat", "1", "--scale-n", "2000",
                          "--stress-ops", "20000", "--no-kernel", "--json"],
                         capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr
    doc = json.loads(run.stdout)
    paths = {row["path"] for row in doc["one_process"]}
    assert {"dict", "shared map m[k]", "shared map raw", "emulated System (model off)"} <= paths
    assert [row["op"] for row in doc["scaling"]] == ["dict lookup", "lookup", "update", "delete"]
    stress = doc["stress"]
    assert stress["ops"] >= 20000 and stress["lost"] == stress["duplicated"] == 0
    assert stress["inserted"] == stress["taken"] + stress["left"]


def test_an_lpm_trie_in_a_segment_matches_the_longest_prefix_for_every_process():
    """A trie made through the face: a lookup finds the longest prefix holding the key, a
    forked process's update is seen, get_next_key goes in post-order (more specific
    first), and a key no prefix holds is ENOENT."""
    def key(prefixlen: int, *octets: int) -> bytes:
        return struct.pack("<I", prefixlen) + bytes(octets)

    with shared.Segment.create(None, MIB) as seg:
        routes = seg.create_map("routes", "lpm_trie", 8, 8, 16, pybpf.MapFlags.NO_PREALLOC,
                                value=int)
        routes[key(8, 10, 0, 0, 0)] = 8
        pid = os.fork()
        if pid == 0:
            routes[key(16, 10, 1, 0, 0)] = 16
            os._exit(0)
        assert os.waitpid(pid, 0)[1] == 0
        assert routes[key(32, 10, 1, 2, 3)] == 16
        assert routes[key(32, 10, 9, 2, 3)] == 8
        assert list(routes) == [key(16, 10, 1, 0, 0), key(8, 10, 0, 0, 0)]
        with pytest.raises(BPFError) as info:
            routes[key(32, 11, 1, 2, 3)]
        assert info.value.errno == errno.ENOENT and "no prefix" in str(info.value)
        assert routes.count == 2


def _lru_inserts(segment: str, worker: int, out) -> None:
    seg = shared.Segment.attach(segment)
    cache = seg.open_map("cache", key=int, value=int)
    for i in range(5000):
        cache[worker * 100_000 + i] = i
    out.put(worker)


def test_an_lru_hash_through_the_face_evicts_and_two_processes_keep_it_whole(segment_name):
    """An LRU hash made through the face (lists per possible CPU): filling it past
    max_entries from one CPU evicts the oldest keys, a BPF_F_NO_COMMON_LRU one has
    max_entries rounded up to the possible CPUs as htab_map_alloc rounds it, and two
    processes inserting 5000 keys each into one map of 64 at once leave its chains, count
    and lists consistent (Map.check)."""
    with shared.Segment.create(segment_name, 4 * MIB) as seg:
        cache = seg.create_map("cache", "lru_hash", 4, 8, 64, key=int, value=int)
        cpus = os.sched_getaffinity(0)
        os.sched_setaffinity(0, {min(cpus)})  # one CPU's lists: the oldest keys go first
        try:
            for i in range(200):
                cache[i] = i
        finally:
            os.sched_setaffinity(0, cpus)
        assert cache.count == len(list(cache)) <= 64 and 199 in cache and 0 not in cache
        possible = host_topology().num_cpus  # the possible CPUs, as the kernel counts them
        per_cpu = seg.create_map("per_cpu", "lru_hash", 4, 8, possible + 1,
                                 pybpf.MapFlags.NO_COMMON_LRU)
        assert per_cpu._m.max_entries == 2 * possible
        assert sorted(forked_results(_lru_inserts, [(segment_name, w) for w in range(2)])) \
            == [0, 1]
        assert cache._m.check() == []
        keys = list(cache)
        assert len(keys) == len(set(keys)) == cache.count <= 64
        assert all(cache[k] == k % 100_000 for k in keys)


def test_waits_count_a_lock_another_process_holds_and_a_value_it_is_writing(segment_name):
    """An array element's lock word and count set as a live process mid-write leaves them
    (the child's pid, an odd count). A lookup waits for the count to turn even, an update
    for the lock; shared.waits() counts both, and the child, which lets go of each in
    turn, counts nothing."""
    with element_words(segment_name) as (a, words):
        count = words[1]
        ready, go = multiprocessing.Pipe()
        pid = os.fork()
        if pid == 0:  # each change half a second after the parent says it is about to
            go.recv()  # read
            time.sleep(0.5)
            words[1] = count + 2  # the write is over: the count even again
            go.recv()  # update
            time.sleep(0.5)
            words[0] = 0  # and the lock let go
            os._exit(0)
        words[0], words[1] = pid, count + 1
        before = shared.waits()
        ready.send("read")
        assert a._m.lookup(bytes(4)) == MARKER  # the C map's one lookup, and update
        ready.send("update")
        a._m.update(bytes(4), bytes(8))
        after = shared.waits()
        assert os.waitpid(pid, 0)[1] == 0
    assert (after.locks - before.locks, after.reads - before.reads) == (1, 1)


@st.composite
def lru_case(draw):
    key_size = draw(st.sampled_from([4, 8]))
    max_entries = draw(st.integers(1, 12))
    flags = BPF_F_ZERO_SEED | draw(st.sampled_from([0, pybpf.MapFlags.NO_COMMON_LRU]))
    # more keys than entries: the map fills and evicts
    pool = draw(st.lists(st.binary(min_size=key_size, max_size=key_size), min_size=1,
                         max_size=30, unique=True))
    ops = draw(st.lists(op_strategy(key_size, 8, pool), max_size=80))
    return key_size, max_entries, int(flags), ops


@settings(max_examples=100, database=None)
@given(lru_case())
def test_lru_op_sequences_match_the_reference_on_one_cpu(reference, case):
    """An LRU hash through the face, this process pinned to CPU 0 (its inserts take CPU 0's
    lists, as the kernel's take the lists of the CPU the syscall runs on, and the emulated
    system's its current CPU, 0): the same values, errno, evictions and order as the
    reference's, the kernel's included where bpf(2) is allowed."""
    key_size, max_entries, flags, ops = case
    cpus = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(cpus)})
    seg = shared.Segment.create(None, 4 * MIB)
    fd = reference.map_create(MapType.LRU_HASH, key_size, 8, max_entries, map_flags=flags)
    try:
        m = seg.create_map("lru", "lru_hash", key_size, 8, max_entries, flags)
        run_sequence(m, reference, fd, ops)
        assert m._m.check() == []
    finally:
        os.sched_setaffinity(0, cpus)
        reference.close(fd)
        seg.close()


@st.composite
def lpm_case(draw):
    data_size = draw(st.sampled_from([1, 4, 9]))
    max_entries = draw(st.integers(1, 8))
    data = st.lists(st.sampled_from([0x00, 0x80, 0xC0, 0x40, 0xFF, 0x0F]),
                    min_size=data_size, max_size=data_size).map(bytes)
    prefixlen = st.one_of(st.integers(0, 8 * data_size + 1), st.sampled_from([0, 1, 2, 8]))
    pool = draw(st.lists(st.builds(lambda p, d: struct.pack("<I", p) + d, prefixlen, data),
                         min_size=1, max_size=12))
    ops = draw(st.lists(op_strategy(4 + data_size, 8, pool), max_size=60))
    return data_size, max_entries, ops


@settings(max_examples=100, database=None)
@given(lpm_case())
def test_lpm_op_sequences_match_the_reference(reference, case):
    """An LPM trie through the face: longest-prefix lookups, updates (ENOSPC when full,
    EINVAL past the maximum prefix), deletes and get_next_key's post-order as the
    reference's, the kernel's included where bpf(2) is allowed."""
    data_size, max_entries, ops = case
    seg = shared.Segment.create(None, 4 * MIB)
    fd = reference.map_create(MapType.LPM_TRIE, 4 + data_size, 8, max_entries,
                              map_flags=BPF_F_NO_PREALLOC)
    try:
        m = seg.create_map("t", "lpm_trie", 4 + data_size, 8, max_entries, BPF_F_NO_PREALLOC)
        run_sequence(m, reference, fd, ops)
        assert m._m.check() == []
    finally:
        reference.close(fd)
        seg.close()
