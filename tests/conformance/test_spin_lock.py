"""struct bpf_spin_lock in map values, on both backends: where BTF may place one, which maps
may hold one, what user space reads and writes around it (BPF_F_LOCK). Every expected errno
was read from the running kernel (6.18)."""

from __future__ import annotations

import errno
import struct
import sys as sys_module
import threading

import pytest

from helpers import err_of
from pybpf.asm import FP, R0, R1, R2, R6, R7, R8
from pybpf.asm import builder as b
from pybpf.btf import Btf, Int, Member, Struct
from pybpf.errors import VerifierError
from pybpf.programs import Program, ProgramSpec
from pybpf.uapi import BPF_EXIST, BPF_F_LOCK, BPF_NOEXIST, MapFlags, MapType, ProgType

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


@pytest.mark.parametrize("map_type", [MapType.HASH, MapType.ARRAY])
def test_batches_read_and_write_around_the_lock_word(maps, btf_fd, map_type):
    sys = maps.sys
    fd = maps.create(map_type, 4, 16, 4, btf_fd=btf_fd, btf_key_type_id=U32,
                     btf_value_type_id=VALUE)
    keys = [u32(0), u32(1)]
    assert sys.map_update_batch(fd, keys, [value(7, 1, 2), value(9, 3, 4)],
                                elem_flags=BPF_F_LOCK) == 2
    for elem_flags in (0, BPF_F_LOCK):
        batch = sys.map_lookup_batch(fd, None, 4, elem_flags=elem_flags)
        found = dict(zip(batch.keys, batch.values, strict=True))
        assert (found[u32(0)], found[u32(1)]) == (value(0, 1, 2), value(0, 3, 4))


def test_bpf_f_lock_needs_a_lock_in_the_value(maps, btf_fd):
    sys = maps.sys
    fd = maps.create(MapType.ARRAY, 4, 16, 4, btf_fd=btf_fd, btf_key_type_id=U32,
                     btf_value_type_id=PLAIN)
    assert err_of(sys.map_lookup_elem, fd, u32(1), flags=BPF_F_LOCK) == errno.EINVAL
    assert err_of(sys.map_update_elem, fd, u32(1), bytes(16), flags=BPF_F_LOCK) == \
        errno.EINVAL
    sys.map_update_elem(fd, u32(1), value(0xDEADBEEF, 5, 7))  # a plain u32 is data
    assert sys.map_lookup_elem(fd, u32(1)) == value(0xDEADBEEF, 5, 7)


# -- programs: bpf_spin_lock / bpf_spin_unlock -------------------------------------------------
ETH_FRAME = bytes.fromhex("ffffffffffff" "020000000001" "0800") + bytes(range(50))


def lookup_0() -> list:
    """R6 = &m[0] (exit with 0 when NULL)."""
    return [b.st(4, FP, -4, 0), b.ld_map_fd(R1, "m"), b.mov64(R2, FP), b.add64(R2, -4),
            b.call("map_lookup_elem"), b.mov64(R6, R0), b.jeq(R0, 0, "out")]


def locked(*body, lock_off: int = 0) -> list:
    """lock(&v->lock); body; unlock(&v->lock) with R6 = v."""
    return [b.mov64(R1, R6), b.add64(R1, lock_off), b.call("spin_lock"), *body,
            b.mov64(R1, R6), b.call("spin_unlock")]


INCREMENT = [b.ldx(4, R7, R6, 4), b.add64(R7, 1), b.stx(4, R6, 4, R7)]
EXIT_0 = [b.label("out"), b.mov64(R0, 0), b.exit_()]


def counter_map(sys, type_id: int = VALUE, **kw) -> int:
    btf = sys.btf_load(Btf(TYPES).to_bytes())
    try:
        return sys.map_create(MapType.ARRAY, 4, 16, 1, btf_fd=btf, btf_key_type_id=U32,
                              btf_value_type_id=type_id, **kw)
    finally:
        sys.close(btf)


def load(sys, items: list, fd: int, prog_type: int = ProgType.SCHED_CLS) -> Program:
    return Program.load(ProgramSpec(prog_type, items), sys, maps={"m": fd})


def test_locked_increment(backend):
    fd = counter_map(backend)
    try:
        prog = load(backend, [*lookup_0(), *locked(*INCREMENT), b.ldx(4, R0, R6, 4),
                              b.exit_(), *EXIT_0], fd)
        assert [prog.test_run(ETH_FRAME).retval for _ in range(3)] == [1, 2, 3]
        assert backend.map_lookup_elem(fd, u32(0)) == value(0, 3, 0)
        prog.close()
    finally:
        backend.close(fd)


SPIN_LOCK_REFUSALS = [
    ("a second lock", [*lookup_0(), *locked(b.mov64(R1, R6), b.call("spin_lock")), *EXIT_0],
     {}, errno.EINVAL, "function calls are not allowed while holding a lock"),
    ("unlock without lock", [*lookup_0(), b.mov64(R1, R6), b.call("spin_unlock"), *EXIT_0],
     {}, errno.EINVAL, "bpf_spin_unlock without taking a lock"),
    ("exit holding the lock", [*lookup_0(), b.mov64(R1, R6), b.call("spin_lock"), *EXIT_0],
     {}, errno.EINVAL,
     "BPF_EXIT instruction in main prog cannot be used inside bpf_spin_lock-ed region"),
    ("a helper call holding the lock", [*lookup_0(), *locked(b.call("ktime_get_ns")),
                                        *EXIT_0],
     {}, errno.EINVAL, "function calls are not allowed while holding a lock"),
    ("a lock at the wrong offset", [*lookup_0(), *locked(lock_off=4), *EXIT_0], {},
     errno.EINVAL, "off 4 doesn't point to 'struct bpf_spin_lock' that is at 0"),
    ("a load of the lock word", [*lookup_0(), b.ldx(4, R0, R6, 0), *EXIT_0], {},
     errno.EACCES, "bpf_spin_lock cannot be accessed directly by load/store"),
    ("a store over the lock word", [*lookup_0(), b.st(8, R6, 0, 0), *EXIT_0], {},
     errno.EACCES, "bpf_spin_lock cannot be accessed directly by load/store"),
    ("a value without a lock", [*lookup_0(), *locked(), *EXIT_0], dict(type_id=PLAIN),
     errno.EINVAL, "map 'counter' has no valid bpf_spin_lock"),
    ("a map without BTF", [*lookup_0(), *locked(), *EXIT_0], dict(type_id=0),
     errno.EINVAL, "map 'counter' has to have BTF in order to use bpf_spin_lock"),
    ("a lock on the stack", [b.mov64(R1, FP), b.add64(R1, -8), b.call("spin_lock"),
                             *EXIT_0], {}, errno.EACCES, "R1 type=fp expected=map_value"),
    ("R0 after bpf_spin_lock", [*lookup_0(), *locked(b.mov64(R7, R0)), *EXIT_0], {},
     errno.EACCES, "R0 !read_ok"),
    ("a socket filter", [*lookup_0(), *locked(), *EXIT_0], dict(prog_type=ProgType.SOCKET_FILTER),
     errno.EINVAL, "socket filter progs cannot use bpf_spin_lock yet"),
]


@pytest.mark.parametrize("label,items,kw,expected,message", SPIN_LOCK_REFUSALS,
                         ids=[case[0] for case in SPIN_LOCK_REFUSALS])
def test_spin_lock_refusals(backend, label, items, kw, expected, message):
    prog_type = kw.get("prog_type", ProgType.SCHED_CLS)
    type_id = kw.get("type_id", VALUE)
    if type_id:
        fd = counter_map(backend, type_id, map_name="counter")
    else:
        fd = backend.map_create(MapType.ARRAY, 4, 16, 1, map_name="counter")
    try:
        with pytest.raises(VerifierError) as info:
            load(backend, items, fd, prog_type)
        assert (info.value.errno, message in info.value.log) == (expected, True), \
            (label, info.value.log)
    finally:
        backend.close(fd)


def test_locked_increments_from_several_cpus_lose_none(four_cpus):
    """Four emulated CPUs (threads) run a locked read-modify-write of one counter, with a
    loop inside the critical section to widen it (and a short thread switch interval), so
    the threads do interleave there: no increment is lost."""
    sys = four_cpus
    rounds = 200
    fd = counter_map(sys)
    window = [b.mov64(R8, 0), b.label("spin"), b.add64(R8, 1), b.jlt(R8, 20, "spin")]
    prog = load(sys, [*lookup_0(), *locked(b.ldx(4, R7, R6, 4), *window, b.add64(R7, 1),
                                           b.stx(4, R6, 4, R7)), *EXIT_0], fd)
    errors = []
    start = threading.Barrier(4)

    def run(cpu: int) -> None:
        try:
            with sys.on_cpu(cpu):
                start.wait()
                for _ in range(rounds):
                    prog.test_run(ETH_FRAME)
        except BaseException as exc:  # reported below
            errors.append(exc)
            start.abort()

    interval = sys_module.getswitchinterval()
    sys_module.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=run, args=(cpu,)) for cpu in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys_module.setswitchinterval(interval)
    assert not errors
    assert sys.map_lookup_elem(fd, u32(0)) == value(0, 4 * rounds, 0)
