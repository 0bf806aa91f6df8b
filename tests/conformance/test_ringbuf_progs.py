"""Programs producing into a BPF_MAP_TYPE_RINGBUF (bpf_ringbuf_output / reserve / submit /
discard / query) on both backends: the same results and positions, and the same refusals of
the verifier's reference tracking. (No consumer reads the records here: the consumer
position stays 0, so the ring fills up.)"""

from __future__ import annotations

import errno

import pytest

from pybpf.asm import FP, R0, R1, R2, R3, R4, R6
from pybpf.asm import builder as b
from pybpf.errors import VerifierError
from pybpf.programs import Program, ProgramSpec
from pybpf.uapi import MapType, ProgType

U32 = 0xFFFF_FFFF
ETH_FRAME = bytes.fromhex("ffffffffffff" "020000000001" "0800") + bytes(range(50))
RING_SIZE = 4096
BPF_RB_AVAIL_DATA, BPF_RB_RING_SIZE, BPF_RB_CONS_POS, BPF_RB_PROD_POS = range(4)


@pytest.fixture
def ring(backend):
    fd = backend.map_create(MapType.RINGBUF, 0, 0, RING_SIZE)
    yield fd
    backend.close(fd)


def load(sys, items: list, fd: int) -> Program:
    return Program.load(ProgramSpec(ProgType.SCHED_CLS, items), sys, maps={"m": fd})


def retval(prog: Program) -> int:
    return prog.test_run(ETH_FRAME).retval


def query(sys, fd: int, flags: int) -> int:
    prog = load(sys, [b.ld_map_fd(R1, "m"), b.mov64(R2, flags), b.call("ringbuf_query"),
                      b.exit_()], fd)
    try:
        return retval(prog)
    finally:
        prog.close()


def output(size: int, flags: int = 0) -> list:
    """R0 = bpf_ringbuf_output(m, fp - size, size, flags) (the bytes zeroed first)."""
    zero = [b.st(8, FP, -off, 0) for off in range(8, size + 1, 8)]
    return [*zero, b.ld_map_fd(R1, "m"), b.mov64(R2, FP), b.add64(R2, -size),
            b.mov64(R3, size), b.mov64(R4, flags), b.call("ringbuf_output"), b.exit_()]


def reserve(size: int, flags: int = 0) -> list:
    """R6 = bpf_ringbuf_reserve(m, size, flags); exit with 1 when NULL."""
    return [b.ld_map_fd(R1, "m"), b.mov64(R2, size), b.mov64(R3, flags),
            b.call("ringbuf_reserve"), b.mov64(R6, R0), b.mov64(R0, 1), b.jeq(R6, 0, "out")]


def commit(helper: str = "ringbuf_submit") -> list:
    return [b.mov64(R1, R6), b.mov64(R2, 0), b.call(helper)]


OUT = [b.mov64(R0, 0), b.label("out"), b.exit_()]


def test_output_fills_the_ring_then_answers_eagain(backend, ring):
    """100-byte records take 112 bytes (header, rounded to 8): 36 fit below 4096."""
    prog = load(backend, output(100), ring)
    assert [retval(prog) for _ in range(38)] == [0] * 36 + [-errno.EAGAIN & U32] * 2
    prog.close()
    assert [query(backend, ring, flags) for flags in range(5)] == [36 * 112, RING_SIZE, 0,
                                                                   36 * 112, 0]


def test_output_flags(backend, ring):
    for flags, expected in [(1, 0), (2, 0), (4, -errno.EINVAL & U32)]:
        prog = load(backend, output(8, flags), ring)
        assert retval(prog) == expected, flags
        prog.close()
    assert query(backend, ring, BPF_RB_PROD_POS) == 2 * 16


@pytest.mark.parametrize("label,items,expected,prod_pos", [
    ("submit", [*reserve(16), b.st(8, R6, 8, 7), *commit(), *OUT], 0, 24),
    ("discard", [*reserve(20), *commit("ringbuf_discard"), *OUT], 0, 32),
    ("flags make it NULL", [*reserve(16, flags=1), *commit(), *OUT], 1, 0),
    ("over the ring's size", [*reserve(RING_SIZE), *commit(), *OUT], 1, 0),
])
def test_reserve_then_commit(backend, ring, label, items, expected, prod_pos):
    prog = load(backend, items, ring)
    assert retval(prog) == expected, label
    prog.close()
    assert query(backend, ring, BPF_RB_PROD_POS) == prod_pos, label


REFUSALS = [
    ("a reserved record not committed", [*reserve(16), *OUT], errno.EINVAL,
     "BPF_EXIT instruction in main prog would lead to reference leak"),
    ("a record that may be NULL", [b.ld_map_fd(R1, "m"), b.mov64(R2, 8), b.mov64(R3, 0),
                                   b.call("ringbuf_reserve"), b.mov64(R1, R0), b.mov64(R2, 0),
                                   b.call("ringbuf_submit"), *OUT],
     errno.EACCES, "R1 type=ringbuf_mem_or_null expected=ringbuf_mem"),
    ("a record submitted twice", [*reserve(16), *commit(), *commit(), *OUT], errno.EACCES,
     "R1 type=scalar expected=ringbuf_mem"),
    ("a write past the record", [*reserve(16), b.st(8, R6, 16, 1), *commit(), *OUT],
     errno.EACCES, "invalid access to memory, mem_size=16 off=16 size=8"),
    ("a size not known", [b.ld_map_fd(R1, "m"), b.mov64(R2, R1), b.mov64(R3, 0),
                          b.call("ringbuf_reserve"), *OUT], errno.EACCES,
     "R2 type=map_ptr expected=scalar"),
    ("a record's middle", [*reserve(16), b.add64(R6, 8), *commit(), *OUT], errno.EINVAL,
     "R1 must have zero offset when passed to release func"),
    ("map_lookup_elem on a ring", [b.st(4, FP, -4, 0), b.ld_map_fd(R1, "m"), b.mov64(R2, FP),
                                   b.add64(R2, -4), b.call("map_lookup_elem"), *OUT],
     errno.EACCES, "invalid zero-sized read"),  # its key_size 0, before the map type
]


@pytest.mark.parametrize("label,items,expected,message", REFUSALS,
                         ids=[case[0] for case in REFUSALS])
def test_ringbuf_refusals(backend, ring, label, items, expected, message):
    with pytest.raises(VerifierError) as info:
        load(backend, items, ring)
    assert (info.value.errno, message in info.value.log) == (expected, True), \
        (label, info.value.log)


def test_ringbuf_output_on_a_hash_map(backend):
    fd = backend.map_create(MapType.HASH, 4, 8, 4)
    try:
        with pytest.raises(VerifierError) as info:
            load(backend, output(8), fd)
        assert info.value.errno == errno.EINVAL
        assert "cannot pass map_type 1 into func bpf_ringbuf_output#130" in info.value.log
    finally:
        backend.close(fd)
