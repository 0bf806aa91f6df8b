"""bpf_csum_diff and bpf_ktime_get_boot_ns on both backends.

bpf_csum_diff (net/core/filter.c, 6.13+): the sum of ``to`` less the sum of ``from``, from a
32-bit seed, folded to 16 bits; any sizes the verifier allows (the old -EINVAL for sizes not
multiples of 4 or over 512 bytes is gone on 6.18, measured). Random buffers, sizes, offsets
and seeds go through one program on each backend; the answers must be equal. The rest is a
case table: NULL buffers, the verifier's refusal of NULL with a size, packet memory, and the
program types that may call it.

bpf_ktime_get_boot_ns: every program type has it (bpf_base_func_proto); on the emulated
machine, which never suspends, it reads bpf_ktime_get_ns's clock: never behind it, and
never going back.
"""

from __future__ import annotations

import errno
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import load
from pybpf.asm import FP, R0, R1, R2, R3, R4, R5, R6, R7, R8
from pybpf.asm import builder as b
from pybpf.errors import BPFError
from pybpf.uapi import MapType, ProgType

ETH_FRAME = bytes.fromhex("020000000002" "020000000001" "0800") + bytes(range(50))
# The value the random test's program reads: from_size, to_size (u32), seed (u64),
# from and to offsets (u32, 0..7), then the two buffers.
HEADER = struct.Struct("<IIQII")
MAX_SIZE = 2047  # the sizes are masked to this: the verifier checks the largest access
FROM_AT, TO_AT = 64, 64 + 8 + MAX_SIZE + 57  # the buffers, 8-byte aligned before the offset
VALUE_SIZE = TO_AT + 8 + MAX_SIZE + 1
# (from, from_size, to, to_size, seed) -> r0: the sizes and seed from the value, the
# buffers at their offsets in it
CSUM_DIFF = [
    b.ld_map_value(R6, "m"),
    b.ldxw(R1, R6, 16), b.and64(R1, 7), b.mov64(R7, R6), b.add64(R7, FROM_AT),
    b.add64(R7, R1),
    b.ldxw(R3, R6, 20), b.and64(R3, 7), b.mov64(R8, R6), b.add64(R8, TO_AT), b.add64(R8, R3),
    b.ldxw(R2, R6, 0), b.and64(R2, MAX_SIZE), b.ldxw(R4, R6, 4), b.and64(R4, MAX_SIZE),
    b.ldxdw(R5, R6, 8), b.mov64(R1, R7), b.mov64(R3, R8), b.call("csum_diff"), b.exit_()]


@pytest.fixture
def csum_programs(kernel, emulated_engine):
    """(system, map fd, program) on each backend, the emulated one on each of its engines."""
    loaded = []
    for system in (kernel, emulated_engine):
        fd = system.map_create(MapType.ARRAY, 4, VALUE_SIZE, 1)
        loaded.append((system, fd, load(system, ProgType.SCHED_CLS, CSUM_DIFF, {"m": fd})))
    yield loaded
    for system, fd, prog in loaded:
        prog.close()
        system.close(fd)


@st.composite
def csum_inputs(draw) -> bytes:
    """A value: sizes weighted to the edges (0, 1..8, around 4-byte and 8-byte multiples,
    the largest), buffers of random or extreme bytes, any 64-bit seed."""
    sizes = st.one_of(st.sampled_from([0, 0, 1, 2, 3, 4, 5, 7, 8, 20, 40, 64, 80, 512, 513,
                                       MAX_SIZE]), st.integers(0, MAX_SIZE))
    fill = st.sampled_from([b"\0", b"\xff", None, None])
    from_size, to_size = draw(sizes), draw(sizes)
    buffers = []
    for size in (from_size, to_size):
        byte = draw(fill)
        buffers.append(byte * (size + 7) if byte else draw(st.binary(min_size=size + 7,
                                                                    max_size=size + 7)))
    seed = draw(st.one_of(st.sampled_from([0, 0xFFFF, 0xFFFF_FFFF, 1 << 32, (1 << 64) - 1]),
                          st.integers(0, (1 << 64) - 1)))
    value = bytearray(VALUE_SIZE)
    HEADER.pack_into(value, 0, from_size, to_size, seed, draw(st.integers(0, 7)),
                     draw(st.integers(0, 7)))
    value[FROM_AT:FROM_AT + len(buffers[0])] = buffers[0]
    value[TO_AT:TO_AT + len(buffers[1])] = buffers[1]
    return bytes(value)


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(value=csum_inputs())
def test_csum_diff_of_random_buffers_is_the_kernels(csum_programs, value, differential_tally):
    answers = []
    for system, fd, prog in csum_programs:
        system.map_update_elem(fd, bytes(4), value)
        answers.append(prog.test_run(ETH_FRAME).retval)
    differential_tally.add("kernel", "emulated", "bpf_csum_diff", 1, 1,
                           int(answers[0] != answers[1]))
    assert answers[1] == answers[0]


def _buffer(where: str, reg, off: int) -> list:
    """R<reg> = NULL, or the stack buffer at fp+off."""
    return [b.mov64(reg, 0)] if where == "null" else [b.mov64(reg, FP), b.add64(reg, off)]


def _csum_call(from_buf: str, from_size: int, to_buf: str, to_size: int, seed: int) -> list:
    """bpf_csum_diff over 16-byte stack buffers (or NULL), sizes and seed constants."""
    return [b.st(8, FP, -8, 0x11223344), b.st(8, FP, -16, 0x7F00FF01),
            b.st(8, FP, -24, -0x55667788), b.st(8, FP, -32, 0x0BADF00D),
            *_buffer(from_buf, R1, -16), b.mov64(R2, from_size),
            *_buffer(to_buf, R3, -32), b.mov64(R4, to_size), b.lddw(R5, seed),
            b.call("csum_diff"), b.exit_()]


@pytest.mark.parametrize("case", [
    ("stack", 8, "stack", 16, 0),                # diff
    ("null", 0, "stack", 12, 0x1234_5678),       # push: only ``to``
    ("stack", 13, "null", 0, 0xFFFF_FFFF),       # pull: only ``from``, an odd size
    ("null", 0, "null", 0, (1 << 64) - 2),       # nothing: the seed's low half, folded
    ("stack", 16, "stack", 16, 0),               # the same bytes both sides: 0xffff
    ("stack", 0, "stack", 0, 0),
], ids=["diff", "push", "pull_odd", "seed_only", "same_bytes", "all_zero"])
def test_csum_diff_cases_answer_as_the_kernel(kernel, emulated, case):
    items = _csum_call(*case)
    assert load(emulated, ProgType.XDP, items).test_run(ETH_FRAME).retval == \
        load(kernel, ProgType.XDP, items).test_run(ETH_FRAME).retval


@pytest.mark.parametrize("case", [("null", 4, "stack", 4, 0), ("stack", 4, "null", 8, 0)],
                         ids=["from", "to"])
def test_csum_diff_null_with_a_size_is_refused_as_by_the_kernel(kernel, emulated, case):
    """A NULL buffer may only come with size 0: EACCES, 'R1 type=scalar expected=fp'."""
    errors = []
    for system in (kernel, emulated):
        with pytest.raises(BPFError) as info:
            load(system, ProgType.SCHED_CLS, _csum_call(*case))
        errors.append(info.value)
    regno = 1 if case[0] == "null" else 3
    for error in errors:
        assert error.errno == errno.EACCES
        assert f"R{regno} type=scalar expected=fp" in str(error)


def test_csum_diff_sums_packet_memory(kernel, emulated):
    """pkt_access: an XDP program sums the frame's 20 bytes after the Ethernet header."""
    items = [b.ldxw(R2, R1, 0), b.ldxw(R3, R1, 4), b.mov64(R4, R2), b.add64(R4, 34),
             b.jgt(R4, R3, "short"), b.mov64(R3, R2), b.add64(R3, 14), b.mov64(R1, 0),
             b.mov64(R2, 0), b.mov64(R4, 20), b.mov64(R5, 0), b.call("csum_diff"), b.exit_(),
             b.label("short"), b.mov64(R0, 0), b.exit_()]
    for frame in (ETH_FRAME, ETH_FRAME[:34], ETH_FRAME[:33]):
        assert load(emulated, ProgType.XDP, items).test_run(frame).retval == \
            load(kernel, ProgType.XDP, items).test_run(frame).retval


# program types the emulated backend loads; of them csum_diff is tc's, xdp's and lwt's
PROG_TYPES = [ProgType.SOCKET_FILTER, ProgType.SCHED_CLS, ProgType.SCHED_ACT, ProgType.XDP,
              ProgType.CGROUP_SKB, ProgType.LWT_IN, ProgType.LWT_OUT, ProgType.LWT_XMIT,
              ProgType.SK_SKB, ProgType.SK_MSG, ProgType.KPROBE, ProgType.TRACEPOINT]
CSUM_DIFF_TYPES = {ProgType.SCHED_CLS, ProgType.SCHED_ACT, ProgType.XDP, ProgType.LWT_IN,
                   ProgType.LWT_OUT, ProgType.LWT_XMIT}


def _load_errno(system, prog_type, items) -> int:
    try:
        load(system, prog_type, items).close()
    except BPFError as exc:
        return exc.errno
    return 0


@pytest.mark.parametrize("helper", ["csum_diff", "ktime_get_boot_ns"])
@pytest.mark.parametrize("prog_type", PROG_TYPES, ids=[t.name for t in PROG_TYPES])
def test_program_types_that_may_call_the_helper_are_the_kernels(kernel, emulated, helper,
                                                                  prog_type):
    items = _csum_call("stack", 4, "stack", 4, 0) if helper == "csum_diff" else \
        [b.call(helper), b.exit_()]
    items = [*items[:-1], b.mov64(R0, 0), b.exit_()]  # an R0 every program type takes
    allowed = helper == "ktime_get_boot_ns" or prog_type in CSUM_DIFF_TYPES
    assert _load_errno(kernel, prog_type, items) == (0 if allowed else errno.EINVAL)
    assert _load_errno(emulated, prog_type, items) == _load_errno(kernel, prog_type, items)


KTIME = [b.call("ktime_get_ns"), b.mov64(R6, R0), b.call("ktime_get_boot_ns"),
         b.mov64(R7, R0), b.call("ktime_get_boot_ns"), b.mov64(R8, R0),
         b.ld_map_value(R1, "t"), b.stxdw(R1, 0, R6), b.stxdw(R1, 8, R7), b.stxdw(R1, 16, R8),
         b.mov64(R0, 2), b.exit_()]


@pytest.mark.parametrize("prog_type", [ProgType.XDP, ProgType.SOCKET_FILTER,
                                       ProgType.SCHED_CLS])
def test_ktime_get_boot_ns_is_never_behind_ktime_get_ns_nor_goes_back(backend, prog_type):
    fd = backend.map_create(MapType.ARRAY, 4, 24, 1)
    prog = load(backend, prog_type, KTIME, {"t": fd})
    try:
        last = 0
        for _ in range(5):
            prog.test_run(ETH_FRAME)
            mono, boot, again = struct.unpack("<3Q", backend.map_lookup_elem(fd, bytes(4)))
            assert mono <= boot <= again
            assert last <= boot
            last = again
    finally:
        prog.close()
        backend.close(fd)
