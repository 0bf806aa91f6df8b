"""Conformance of USER_RINGBUF (kernel/bpf/ringbuf.c, libbpf's user_ring_buffer) and
bpf_user_ringbuf_drain, on both backends: creation and element commands, the producer's
sizes, room and timeouts, the drain's results, and the verifier's refusals (the emulated
message in the kernel's log). Expected values are the kernel's, measured on 6.18."""

from __future__ import annotations

import errno
import struct
import threading
import time
from collections.abc import Sequence

import pytest

from helpers import err_of
from pybpf.asm import FP, R0, R1, R2, R3, R4, R5, R6, R7
from pybpf.asm import builder as b
from pybpf.btf import BTF_FUNC_STATIC
from pybpf.errors import VerifierError
from pybpf.maps import Map, UserRingBuf
from pybpf.uapi import (
    BPF_F_NO_PREALLOC,
    BPF_F_NUMA_NODE,
    BPF_F_RDONLY,
    BPF_F_SLEEPABLE,
    BPF_F_WRONLY,
    ENOTSUPP,
    MapType,
    ProgType,
)

from .conftest import load_with_func_info

U32 = 0xFFFF_FFFF
RING = 4096
BPF_RINGBUF_BUSY_BIT = 1 << 31
BPF_RB_NO_WAKEUP, BPF_RB_FORCE_WAKEUP = 1, 2


# -- creation and element commands -----------------------------------------------------------
@pytest.mark.parametrize("max_entries, flags", [(RING, 0), (RING, BPF_F_NUMA_NODE),
                                               (4 * RING, 0)])
def test_user_ringbuf_create(maps, max_entries, flags):
    fd = maps.create(MapType.USER_RINGBUF, 0, 0, max_entries, map_flags=flags)
    info = maps.sys.map_get_info(fd)
    assert (info.type, info.key_size, info.value_size, info.max_entries, info.map_flags) == (
        MapType.USER_RINGBUF, 0, 0, max_entries, flags)


@pytest.mark.parametrize("key_size, value_size, max_entries, flags, want", [
    (0, 0, RING, BPF_F_RDONLY, errno.EINVAL),
    (0, 0, RING, BPF_F_WRONLY, errno.EINVAL),
    (0, 0, RING, BPF_F_NO_PREALLOC, errno.EINVAL),
    (4, 0, RING, 0, errno.EINVAL),
    (0, 4, RING, 0, errno.EINVAL),
    (0, 0, 0, 0, errno.EINVAL),
    (0, 0, 2048, 0, errno.EINVAL),
    (0, 0, 3 * RING, 0, errno.EINVAL),
    (0, 0, U32, 0, errno.EINVAL),
])
def test_user_ringbuf_create_refusals(maps, key_size, value_size, max_entries, flags, want):
    assert maps.create_errno(MapType.USER_RINGBUF, key_size, value_size, max_entries,
                             map_flags=flags) == want


def test_user_ringbuf_element_commands_give_enotsupp(maps):
    sys = maps.sys
    fd = maps.create(MapType.USER_RINGBUF, 0, 0, RING)
    assert err_of(sys.map_lookup_elem, fd, None) == ENOTSUPP
    assert err_of(sys.map_update_elem, fd, None, b"") == ENOTSUPP
    assert err_of(sys.map_delete_elem, fd, None) == ENOTSUPP
    assert err_of(sys.map_get_next_key, fd, None) == ENOTSUPP
    assert err_of(sys.map_lookup_and_delete_elem, fd, None) == ENOTSUPP


def test_a_producer_writes_only_user_ring_buffers(maps):
    fd = maps.create(MapType.RINGBUF, 0, 0, RING)
    assert err_of(maps.sys.user_ringbuf_producer, fd) == errno.EINVAL


# -- the producer ----------------------------------------------------------------------------
@pytest.fixture
def producer(maps):
    fd = maps.create(MapType.USER_RINGBUF, 0, 0, RING)
    with maps.sys.user_ringbuf_producer(fd) as p:
        yield p


@pytest.mark.parametrize("size", [0, 1, RING - 8])  # a header and 4088: the whole ring
def test_reserve_gives_a_writable_sample(producer, size):
    sample = producer.reserve(size)
    assert len(sample) == size and not sample.readonly
    sample[:] = b"\xab" * size


@pytest.mark.parametrize("size, want", [
    (RING - 7, errno.E2BIG), (1 << 30, errno.E2BIG), (1 << 31, errno.E2BIG),
    ((1 << 30) - 1, errno.E2BIG), (-1, errno.EINVAL), (1.5, errno.EINVAL),
    (True, errno.EINVAL), (None, errno.EINVAL),
])
def test_reserve_refuses_sizes(producer, size, want):
    assert err_of(producer.reserve, size) == want


def test_reserve_until_full_then_enospc(producer):
    samples = [producer.reserve(1000) for _ in range(4)]  # 4 x 1008 of 4096
    assert err_of(producer.reserve, 81) == errno.ENOSPC  # 96 > the 64 left
    samples.append(producer.reserve(56))  # 64: the ring is full to the last byte
    assert err_of(producer.reserve, 0) == errno.ENOSPC
    assert [len(s) for s in samples] == [1000] * 4 + [56]
    for sample in samples:
        producer.discard(sample)
    assert err_of(producer.reserve, 0) == errno.ENOSPC  # discarded, not yet drained


def test_wait_answers_whether_the_ring_has_a_byte_free(producer):
    assert producer.wait(0) is True
    sample = producer.reserve(RING - 16)
    assert producer.wait(0) is True  # 8 bytes free: room for no sample, but writable
    producer.reserve(0)
    assert producer.wait(0) is False
    producer.submit(sample)
    assert producer.wait(0.05) is False  # a submit is no drain


def test_reserve_blocking_times_out(producer):
    producer.reserve(RING - 8)
    start = time.monotonic()
    assert err_of(producer.reserve_blocking, 8, 0.2) == errno.ETIMEDOUT
    assert time.monotonic() - start >= 0.2
    assert err_of(producer.reserve_blocking, 8, 0) == errno.ETIMEDOUT
    assert err_of(producer.reserve_blocking, 8, -1) == errno.EINVAL
    assert err_of(producer.reserve_blocking, 8, float("nan")) == errno.EINVAL
    with pytest.raises(TypeError, match="seconds"):
        producer.reserve_blocking(8, "1")
    assert err_of(producer.reserve_blocking, RING, 5) == errno.E2BIG  # at once


def test_close_with_a_view_of_a_sample_still_held(producer):
    """A slice taken from a sample outlives the producer: close succeeds (the kernel
    backend's mapping goes when the slice does) and the producer is closed."""
    part = producer.reserve(16)[2:4]
    producer.close()
    producer.close()
    assert part.nbytes == 2
    with pytest.raises(ValueError, match="closed"):
        producer.reserve(1)


def test_submit_only_what_was_reserved_once(producer):
    sample = producer.reserve(8)
    producer.submit(sample)
    assert err_of(producer.submit, sample) == errno.EINVAL
    assert err_of(producer.discard, memoryview(bytearray(8))) == errno.EINVAL


# -- draining (programs) ---------------------------------------------------------------------
def drain_program(flags: int = 0) -> list:
    """main: *fp-8 = 0; R0 = (bpf_user_ringbuf_drain(m, cb, fp-8, flags) << 16) + *fp-8; cb
    adds each sample's first byte (read with bpf_dynptr_read; 0xff when it fails) to *ctx."""
    return [b.st(8, FP, -8, 0), b.ld_map_fd(R1, "m"), b.ld_func(R2, "cb"), b.mov64(R3, FP),
            b.add64(R3, -8), b.mov64(R4, flags), b.call("user_ringbuf_drain"),
            b.lsh64(R0, 16), b.ldx(8, R1, FP, -8), b.add64(R0, R1), b.exit_(),
            b.label("cb"), b.mov64(R6, R2), b.mov64(R3, R1), b.st(8, FP, -8, 0),
            b.mov64(R1, FP), b.add64(R1, -8), b.mov64(R2, 1), b.mov64(R4, 0), b.mov64(R5, 0),
            b.call("dynptr_read"), b.ldx(1, R1, FP, -8), b.jeq(R0, 0, "add"),
            b.mov64(R1, 0xFF), b.label("add"), b.ldx(8, R2, R6, 0), b.add64(R2, R1),
            b.stx(8, R6, 0, R2), b.mov64(R0, 0), b.exit_()]


def drain(sys, map_fd: int, flags: int = 0) -> tuple[int, int]:
    """One drain: (its result as a C int, the sum of first bytes the callback saw)."""
    fd = load_with_func_info(sys, drain_program(flags), maps={"m": map_fd})
    try:
        retval = sys.prog_test_run(fd, bytes(64)).retval
    finally:
        sys.close(fd)
    high = retval >> 16
    return (high - 0x10000 if high & 0x8000 else high), retval & 0xFFFF


@pytest.fixture
def ring(sys):
    fd = sys.map_create(MapType.USER_RINGBUF, 0, 0, RING)
    with sys.user_ringbuf_producer(fd) as producer:
        yield sys, fd, producer
    sys.close(fd)


def submit(producer, data: bytes) -> None:
    sample = producer.reserve(len(data))
    sample[:] = data
    producer.submit(sample)


def test_drain_takes_samples_in_order_skipping_discarded(ring):
    sys, fd, producer = ring
    submit(producer, b"\x01abc")
    producer.discard(producer.reserve(5))
    submit(producer, b"\x02")
    submit(producer, b"")  # an empty sample: bpf_dynptr_read of 1 byte fails (-E2BIG)
    submit(producer, b"\x04" * 100)
    assert drain(sys, fd) == (4, 1 + 2 + 0xFF + 4)
    assert drain(sys, fd) == (0, 0)


def test_a_busy_sample_holds_back_those_after_it(ring):
    sys, fd, producer = ring
    submit(producer, b"\x01")
    held = producer.reserve(1)
    held[0] = 2
    submit(producer, b"\x03")
    assert drain(sys, fd) == (1, 1)
    producer.submit(held)
    assert drain(sys, fd) == (2, 2 + 3)


def test_drain_frees_room_for_the_producer(ring):
    sys, fd, producer = ring
    for _ in range(4):
        submit(producer, b"\x01" * 1000)
    assert err_of(producer.reserve, 1000) == errno.ENOSPC
    assert drain(sys, fd) == (4, 4)
    assert [len(producer.reserve(1000)) for _ in range(4)] == [1000] * 4


def test_drain_with_bad_flags(ring):
    sys, fd, producer = ring
    submit(producer, b"\x01")
    assert drain(sys, fd, flags=4) == (-errno.EINVAL, 0)
    assert drain(sys, fd, flags=BPF_RB_NO_WAKEUP | BPF_RB_FORCE_WAKEUP) == (1, 1)


def test_a_sample_wrapping_past_the_end_reads_as_one(ring):
    sys, fd, producer = ring
    submit(producer, b"\x01" * (RING - 64))
    assert drain(sys, fd) == (1, 1)
    submit(producer, bytes([7]) + b"\x00" * 199)  # from 4032: header, then the wrap
    assert drain(sys, fd) == (1, 7)


@pytest.mark.parametrize("label, header, producer_advance, expected", [
    # a length reaching past producer_pos: -EINVAL (the sample before it is taken)
    ("past producer_pos", 100, 16, -errno.EINVAL),
    # inside what was produced, but larger than the ring: -E2BIG
    ("larger than the ring", RING, RING + 8, -errno.E2BIG),
    # producer_pos not 8-aligned: -EINVAL before any header is read
    ("unaligned producer_pos", 8, 12, -errno.EINVAL),
])
def test_a_bad_header_stops_the_drain(ring, label, header, producer_advance, expected):
    """A producer that breaks the protocol (a C program writing the mapping could): the
    header after a good sample says ``header`` bytes and producer_pos moves
    ``producer_advance`` past it. Both backends' producers are driven through their own
    header and position stores."""
    sys, fd, producer = ring
    submit(producer, b"\x05")
    pos = producer._load_producer_pos()
    producer._store_header(pos % RING, header)
    producer._store_producer_pos(pos + producer_advance)
    got = drain(sys, fd)
    if label == "unaligned producer_pos":
        assert got == (expected, 0), label  # nothing taken
    else:
        assert got == (expected, 5), label  # the good sample first
    assert drain(sys, fd)[0] == expected, label  # it stays there


def test_drain_inside_a_drain_is_ebusy(ring):
    """The callback drains the same map: -EBUSY, which it stores in *ctx."""
    sys, fd, producer = ring
    submit(producer, b"\x01")
    items = [b.st(8, FP, -8, 0), b.ld_map_fd(R1, "m"), b.ld_func(R2, "cb"), b.mov64(R3, FP),
             b.add64(R3, -8), b.mov64(R4, 0), b.call("user_ringbuf_drain"),
             b.ldx(8, R1, FP, -8), b.lsh64(R1, 8), b.add64(R0, R1), b.exit_(),
             b.label("cb"), b.mov64(R6, R2), b.ld_map_fd(R1, "m"), b.ld_func(R2, "inner"),
             b.mov64(R3, 0), b.mov64(R4, 0), b.call("user_ringbuf_drain"),
             b.stx(8, R6, 0, R0), b.mov64(R0, 0), b.exit_(),
             b.label("inner"), b.mov64(R0, 0), b.exit_()]
    prog = load_with_func_info(sys, items, maps={"m": fd},
                               callbacks={"cb": BTF_FUNC_STATIC, "inner": BTF_FUNC_STATIC})
    try:
        assert sys.prog_test_run(prog, bytes(64)).retval == (1 + (-errno.EBUSY << 8)) & U32
    finally:
        sys.close(prog)


def test_the_callback_stops_the_drain(ring):
    sys, fd, producer = ring
    for _ in range(3):
        submit(producer, b"\x01")
    items = [b.ld_map_fd(R1, "m"), b.ld_func(R2, "cb"), b.mov64(R3, 0), b.mov64(R4, 0),
             b.call("user_ringbuf_drain"), b.exit_(), b.label("cb"), b.mov64(R0, 1),
             b.exit_()]
    prog = load_with_func_info(sys, items, maps={"m": fd})
    try:
        assert [sys.prog_test_run(prog, bytes(64)).retval for _ in range(4)] == [1, 1, 1, 0]
    finally:
        sys.close(prog)


# -- waking a blocked producer ---------------------------------------------------------------
def test_a_producer_learns_of_room_from_a_wakeup(ring):
    """What the map's poll says, as epoll reports it: a producer whose last wait found the
    ring full is told of room only by a drain's wake-up. BPF_RB_FORCE_WAKEUP wakes it though
    the drain took nothing (the one sample is still BUSY and fills the ring): woken, it finds
    no room and waits on; a drain with BPF_RB_NO_WAKEUP frees the ring without telling it."""
    sys, fd, producer = ring
    held = producer.reserve(RING - 8)
    assert drain(sys, fd, BPF_RB_FORCE_WAKEUP) == (0, 0)
    assert producer.wait(0.1) is False
    producer.submit(held)
    assert drain(sys, fd, BPF_RB_NO_WAKEUP) == (1, 0)  # its bytes were never written: 0
    assert producer.wait(0.1) is False  # room, but no wake-up since the ring was full
    assert drain(sys, fd, BPF_RB_FORCE_WAKEUP) == (0, 0)
    assert producer.wait(0) is True
    assert producer.wait(0) is True  # still writable: it stays reported while it has room


def test_a_producer_made_on_a_full_ring_waits_for_a_wakeup(ring):
    sys, fd, producer = ring
    producer.reserve(RING - 8)
    with sys.user_ringbuf_producer(fd) as second:
        assert second.wait(0) is False
    fd2 = sys.map_create(MapType.USER_RINGBUF, 0, 0, RING)
    try:
        with sys.user_ringbuf_producer(fd2) as first:
            submit(first, b"\x03" * (RING - 8))
            with sys.user_ringbuf_producer(fd2) as second:
                assert drain(sys, fd2, BPF_RB_NO_WAKEUP) == (1, 3)
                assert second.wait(0) is False  # made on a full ring, never woken since
                assert first.wait(0) is True  # on the ready list since it was made
    finally:
        sys.close(fd2)


@pytest.mark.parametrize("flags, woken", [(0, True), (BPF_RB_NO_WAKEUP, False)])
def test_a_drain_wakes_a_blocked_producer_unless_told_not_to(ring, flags, woken):
    """A producer blocked on a full ring: a drain that took a sample wakes it at once; with
    BPF_RB_NO_WAKEUP it sleeps out its timeout and gets the room on its last try."""
    sys, fd, producer = ring
    submit(producer, b"\x01" * (RING - 8))
    timeout = 1.5
    result: dict = {}

    def blocked() -> None:
        start = time.monotonic()
        sample = producer.reserve_blocking(8, timeout)
        result["waited"] = time.monotonic() - start
        result["size"] = len(sample)

    thread = threading.Thread(target=blocked)
    thread.start()
    time.sleep(0.2)  # let it block
    assert drain(sys, fd, flags) == (1, 1)
    thread.join(10)
    assert result["size"] == 8
    if woken:
        assert result["waited"] < timeout - 0.5
    else:
        assert result["waited"] >= timeout


# -- the verifier ----------------------------------------------------------------------------
def refusal(sys, items: Sequence, maps: dict, **kw) -> tuple[int, str]:
    with pytest.raises(OSError) as info:
        load_with_func_info(sys, items, maps=maps, **kw)
    assert isinstance(info.value, VerifierError), info.value
    return info.value.errno, info.value.log


def with_callback(body: list, map_name: str = "m") -> list:
    return [b.ld_map_fd(R1, map_name), b.ld_func(R2, "cb"), b.mov64(R3, 0), b.mov64(R4, 0),
            b.call("user_ringbuf_drain"), b.exit_(), b.label("cb"), *body]


READ_8 = [b.mov64(R1, FP), b.add64(R1, -8), b.mov64(R2, 8), b.mov64(R4, 0), b.mov64(R5, 0),
          b.call("dynptr_read"), b.mov64(R0, 0), b.exit_()]


@pytest.mark.parametrize("label, body, map_name, err, message", [
    ("callback returns 2", [b.mov64(R0, 2), b.exit_()], "m", errno.EINVAL,
     "At callback return the register R0 has smin=2 smax=2 should have been in [0, 1]"),
    ("a RINGBUF map", [b.mov64(R0, 0), b.exit_()], "r", errno.EINVAL,
     "cannot pass map_type 27 into func bpf_user_ringbuf_drain#209"),
    ("a load through the dynptr", [b.ldx(8, R0, R1, 0), b.mov64(R0, 0), b.exit_()], "m",
     errno.EACCES, "R1 invalid mem access 'dynptr_ptr'"),
    ("a store through the dynptr", [b.st(8, R1, 0, 0), b.mov64(R0, 0), b.exit_()], "m",
     errno.EACCES, "R1 invalid mem access 'dynptr_ptr'"),
    ("the dynptr moved", [b.mov64(R3, R1), b.add64(R3, 8), *READ_8], "m", errno.EACCES,
     "dereference of modified dynptr_ptr ptr R3 off=8 disallowed"),
    ("stack that holds no dynptr", [b.mov64(R3, FP), b.add64(R3, -16), *READ_8], "m",
     errno.EINVAL, "Expected an initialized dynptr as arg #2"),
    ("a read past the buffer", [b.mov64(R3, R1), *READ_8[:2], b.mov64(R2, 9), *READ_8[3:]],
     "m", errno.EINVAL, "invalid write to stack R1 off=-8 size=9"),
    ("the dynptr spilled and filled: data, not a pointer",
     [b.stx(8, FP, -16, R1), b.ldx(8, R3, FP, -16), *READ_8], "m", errno.EACCES,
     "R3 type=scalar expected=fp, dynptr_ptr"),
    ("the dynptr as a map key", [b.mov64(R2, R1), b.ld_map_fd(R1, "r"),
                                 b.call("map_lookup_elem"), b.mov64(R0, 0), b.exit_()],
     "m", errno.EACCES, "R2 type=dynptr_ptr expected=fp, pkt, pkt_meta, map_key, map_value, "
     "mem, ringbuf_mem, buf, trusted_ptr_"),
    ("the dynptr returned", [b.mov64(R0, R1), b.exit_()], "m", errno.EACCES,
     "R0 not a scalar value"),
    ("dynptr_data of a length not known",
     [b.mov64(R6, R1), b.call("get_prandom_u32"), b.mov64(R3, R0), b.mov64(R1, R6),
      b.mov64(R2, 0), b.call("dynptr_data"), b.mov64(R0, 0), b.exit_()], "m", errno.EACCES,
     "R3 is not a known constant'"),
    ("a read past dynptr_data's slice",
     [b.mov64(R2, 0), b.mov64(R3, 8), b.call("dynptr_data"), b.jeq(R0, 0, "out"),
      b.ldx(8, R0, R0, 4), b.label("out"), b.mov64(R0, 0), b.exit_()], "m", errno.EACCES,
     "invalid access to memory, mem_size=8 off=4 size=8"),
    ("dynptr_data not checked for NULL",
     [b.mov64(R2, 0), b.mov64(R3, 8), b.call("dynptr_data"), b.ldx(8, R0, R0, 0),
      b.mov64(R0, 0), b.exit_()], "m", errno.EACCES, "R0 invalid mem access 'mem_or_null'"),
])
def test_drain_verifier_refusals(sys, label, body, map_name, err, message):
    fd = sys.map_create(MapType.USER_RINGBUF, 0, 0, RING)
    rb = sys.map_create(MapType.RINGBUF, 0, 0, RING)
    try:
        got_errno, log = refusal(sys, with_callback(body, map_name), {"m": fd, "r": rb})
        assert got_errno == err, (label, log)
        assert message in log, (label, log)
    finally:
        sys.close(fd)
        sys.close(rb)


@pytest.mark.parametrize("prog_type, flags", [
    (ProgType.SOCKET_FILTER, 0), (ProgType.KPROBE, 0), (ProgType.SCHED_CLS, 0),
    (ProgType.SCHED_ACT, 0), (ProgType.TRACEPOINT, 0), (ProgType.XDP, 0),
    (ProgType.PERF_EVENT, 0), (ProgType.LWT_IN, 0), (ProgType.SK_SKB, 0),
    (ProgType.SK_MSG, 0), (ProgType.RAW_TRACEPOINT, 0), (ProgType.SYSCALL, BPF_F_SLEEPABLE),
])
def test_every_program_type_may_drain(sys, prog_type, flags):
    """bpf_user_ringbuf_drain is in bpf_base_func_proto (for CAP_BPF), which every program
    type falls back to: no type the emulated backend loads is refused it."""
    fd = sys.map_create(MapType.USER_RINGBUF, 0, 0, RING)
    try:
        prog = load_with_func_info(sys, with_callback([b.mov64(R0, 0), b.exit_()]),
                                   maps={"m": fd}, prog_type=prog_type, prog_flags=flags)
        sys.close(prog)
    finally:
        sys.close(fd)


def test_dynptr_data_and_write_in_the_callback(ring):
    """bpf_dynptr_data gives the sample's bytes (NULL past its end); bpf_dynptr_write writes
    them (-E2BIG past the end, -EINVAL for flags): the callback stores into *ctx the first
    byte it read through the slice after writing 9 there, or 0xee for a NULL slice, and the
    write's results."""
    sys, fd, producer = ring
    submit(producer, b"\x01\x02\x03\x04")
    submit(producer, b"\x01")
    cb = [b.mov64(R6, R2), b.mov64(R7, R1),
          b.st(8, FP, -8, 9), b.mov64(R2, 0), b.mov64(R3, FP), b.add64(R3, -8),
          b.mov64(R4, 1), b.mov64(R5, 0), b.call("dynptr_write"),  # byte 0 = 9
          b.stx(1, R6, 1, R0),
          b.mov64(R1, R7), b.mov64(R2, 4), b.mov64(R3, FP), b.add64(R3, -8),
          b.mov64(R4, 2), b.mov64(R5, 0), b.call("dynptr_write"),  # past the end: -E2BIG
          b.stx(1, R6, 2, R0),
          b.mov64(R1, R7), b.mov64(R2, 0), b.mov64(R3, FP), b.add64(R3, -8),
          b.mov64(R4, 1), b.mov64(R5, 1), b.call("dynptr_write"),  # flags: -EINVAL
          b.stx(1, R6, 3, R0),
          b.mov64(R1, R7), b.mov64(R2, 0), b.mov64(R3, 4), b.call("dynptr_data"),
          b.mov64(R1, 0xEE), b.jeq(R0, 0, "store"), b.ldx(1, R1, R0, 0),
          b.label("store"), b.stx(1, R6, 0, R1), b.mov64(R0, 1), b.exit_()]
    items = [b.st(8, FP, -8, 0), b.ld_map_fd(R1, "m"), b.ld_func(R2, "cb"), b.mov64(R3, FP),
             b.add64(R3, -8), b.mov64(R4, 0), b.call("user_ringbuf_drain"),
             b.ldx(4, R0, FP, -8), b.exit_(), b.label("cb"), *cb]
    prog = load_with_func_info(sys, items, maps={"m": fd})
    try:
        runs = [struct.pack("<I", sys.prog_test_run(prog, bytes(64)).retval) for _ in range(2)]
    finally:
        sys.close(prog)
    e2big, einval = -errno.E2BIG & 0xFF, -errno.EINVAL & 0xFF
    assert runs == [bytes([9, 0, e2big, einval]), bytes([0xEE, 0, e2big, einval])]


# -- the typed map (pybpf.maps.UserRingBuf) --------------------------------------------------
def test_a_user_ring_buffer_made_from_python(backend):
    with UserRingBuf(RING, system=backend) as ring:
        same = backend.map_get_fd_by_id(backend.map_get_info(ring.fd).id)
        with Map.from_fd(same, system=backend) as typed:
            assert isinstance(typed, UserRingBuf)
        ring.write(b"\x01" * 100)
        ring.discard(ring.reserve(8))
        sample = ring.reserve_blocking(RING - 136, 0)
        ring.submit(sample)
        assert err_of(ring.reserve, 0) == errno.ENOSPC
        producer = ring.producer
    assert ring._producer is None
    with pytest.raises(ValueError):
        producer.reserve(1)  # closed with its map


def test_a_producer_keeps_the_emulated_map_alive_and_lets_it_go_when_closed(emulated):
    ring = UserRingBuf(RING, system=emulated)
    map_id = emulated.map_get_info(ring.fd).id
    producer = emulated.user_ringbuf_producer(ring.fd)
    ring.close()
    emulated.close(emulated.map_get_fd_by_id(map_id))  # still there: the producer holds it
    producer.close()
    assert err_of(emulated.map_get_fd_by_id, map_id) == errno.ENOENT


# -- a producer thread against drains --------------------------------------------------------
def test_a_producer_thread_and_drains_see_every_sample_once_in_order(ring):
    """A thread writes 1500 numbered samples of 4 to 300 bytes (the ring wraps many times and
    fills: reserve_blocking waits for the drains) while the test drains again and again. The
    callback checks each number against the next it expects (an array map's one value:
    expected, out of order); at the end every sample was taken once, in order."""
    sys, fd, producer = ring
    state = sys.map_create(MapType.ARRAY, 4, 16, 1)
    items = [b.ld_map_fd(R1, "m"), b.ld_func(R2, "cb"), b.mov64(R3, 0), b.mov64(R4, 0),
             b.call("user_ringbuf_drain"), b.exit_(),
             b.label("cb"), b.mov64(R3, R1), b.st(8, FP, -8, 0), b.mov64(R1, FP),
             b.add64(R1, -8), b.mov64(R2, 4), b.mov64(R4, 0), b.mov64(R5, 0),
             b.call("dynptr_read"), b.ld_map_fd(R1, "s"), b.mov64(R2, FP), b.add64(R2, -16),
             b.st(4, FP, -16, 0), b.call("map_lookup_elem"), b.jeq(R0, 0, "out"),
             b.ldx(8, R1, R0, 0), b.ldx(4, R2, FP, -8), b.jeq(R1, R2, "next"),
             b.ldx(8, R3, R0, 8), b.add64(R3, 1), b.stx(8, R0, 8, R3),
             b.label("next"), b.add64(R2, 1), b.stx(8, R0, 0, R2),
             b.label("out"), b.mov64(R0, 0), b.exit_()]
    prog = load_with_func_info(sys, items, maps={"m": fd, "s": state})
    total = 1500
    errors: list[BaseException] = []

    def produce() -> None:
        try:
            for seq in range(total):
                sample = producer.reserve_blocking(4 + seq * 37 % 297, 10)
                sample[:4] = struct.pack("<I", seq)
                producer.submit(sample)
        except BaseException as exc:  # noqa: BLE001 - reported by the test below
            errors.append(exc)

    thread = threading.Thread(target=produce)
    thread.start()
    drained = 0
    deadline = time.monotonic() + 60
    try:
        while drained < total and time.monotonic() < deadline and not errors:
            drained += sys.prog_test_run(prog, bytes(64)).retval
        thread.join(10)
        expected, out_of_order = struct.unpack("<QQ", sys.map_lookup_elem(state, bytes(4)))
    finally:
        sys.close(prog)
        sys.close(state)
    assert not errors
    assert (drained, expected, out_of_order) == (total, total, 0)
