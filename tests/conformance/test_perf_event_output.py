"""Programs sending records with bpf_perf_event_output into a PERF_EVENT_ARRAY that a perf
buffer reader (System.perf_buffer_reader) filled, on both backends: the records come back
per CPU with the kernel's padding, the helper answers the same r0 for every flag and slot
(kernel/trace/bpf_trace.c's __bpf_perf_event_output, net/core/filter.c's skb and XDP twins),
a full ring counts what it lost, and closing the reader empties the slots."""

from __future__ import annotations

import errno
import os

import pytest

from pybpf.asm import FP, R1, R2, R3, R4, R5, R6
from pybpf.asm import builder as b
from pybpf.errors import VerifierError
from pybpf.perf_buffer import PerfSample
from pybpf.programs import Program, ProgramSpec
from pybpf.uapi import MapType, ProgType

U64 = (1 << 64) - 1
BPF_F_CURRENT_CPU = 0xFFFF_FFFF
CTXLEN = 1 << 32  # BPF_F_CTXLEN_MASK's unit: one byte of the packet
ETH_FRAME = bytes.fromhex("ffffffffffff" "020000000001" "0800") + bytes(range(50))
DATA = bytes(range(0x41, 0x51))  # the 16 bytes each program has on its stack to send


def output(flags: int, size: int) -> list:
    """R0 = bpf_perf_event_output(ctx, m, flags, fp - 16, size), DATA at fp - 16."""
    store = [b.st(4, FP, -16 + off, int.from_bytes(DATA[off:off + 4], "little"))
             for off in range(0, 16, 4)]
    return [b.mov64(R6, R1), *store, b.mov64(R1, R6), b.ld_map_fd(R2, "m"), b.lddw(R3, flags),
            b.mov64(R4, FP), b.add64(R4, -16), b.mov64(R5, size),
            b.call("perf_event_output"), b.exit_()]


def send(sys, fd: int, flags: int = BPF_F_CURRENT_CPU, size: int = 5, cpu: int = 0,
         prog_type: int = ProgType.XDP) -> int:
    """What one run of ``output`` on ``cpu`` returns, as a signed number."""
    prog = Program.load(ProgramSpec(prog_type, output(flags, size)), sys, maps={"m": fd})
    try:
        with sys.on_cpu(cpu):
            if prog_type == ProgType.RAW_TRACEPOINT:
                r0 = prog.test_run(ctx=bytes(8)).retval
            else:
                r0 = prog.test_run(ETH_FRAME).retval
    finally:
        prog.close()
    return r0 - (1 << 32) if r0 >= 1 << 31 else r0


def padded(data: bytes) -> bytes:
    return data + bytes(-(len(data) + 4) % 8)


def two_cpus(sys) -> None:
    if sys.num_possible_cpus < 2 or not {0, 1} <= os.sched_getaffinity(0):
        pytest.skip("needs CPUs 0 and 1 (on the kernel backend, both allowed here)")


@pytest.fixture
def events(sys):
    """A PERF_EVENT_ARRAY with a slot per CPU (at most 2) and a reader of 1-page rings."""
    fd = sys.map_create(MapType.PERF_EVENT_ARRAY, 4, 4, min(2, sys.num_possible_cpus))
    reader = sys.perf_buffer_reader(fd, 1)
    yield fd, reader
    reader.close()
    sys.close(fd)


def test_records_come_back_with_their_cpu_and_padded_bytes(sys, events):
    two_cpus(sys)
    fd, reader = events
    assert reader.cpus == (0, 1) and reader.ring_size == 4096
    assert reader.read() == [] and reader.poll(0) == []
    for cpu, size in [(1, 0), (0, 5), (1, 12), (0, 13), (0, 16)]:
        assert send(sys, fd, size=size, cpu=cpu) == 0
    assert reader.poll(0) == [PerfSample(0, padded(DATA[:5])), PerfSample(0, padded(DATA[:13])),
                              PerfSample(0, padded(DATA)), PerfSample(1, padded(b"")),
                              PerfSample(1, padded(DATA[:12]))]
    assert reader.samples_read == 5 and reader.lost == 0


@pytest.mark.parametrize("prog_type", [ProgType.XDP, ProgType.SCHED_CLS,
                                       ProgType.RAW_TRACEPOINT])
def test_output_answers_as_the_kernel_for_each_slot_and_flag(sys, events, prog_type):
    two_cpus(sys)
    fd, reader = events
    packet_flags = prog_type != ProgType.RAW_TRACEPOINT
    cases = [  # (flags, cpu it runs on, r0)
        (BPF_F_CURRENT_CPU, 1, 0),
        (1, 1, 0),  # the index of the CPU it runs on
        (1, 0, -errno.EOPNOTSUPP),  # another CPU's event
        (2, 0, -errno.E2BIG),  # past max_entries
        (BPF_F_CURRENT_CPU - 1, 0, -errno.E2BIG),
        (1 << 52, 0, -errno.EINVAL),  # past BPF_F_CTXLEN_MASK
        (8 * CTXLEN | BPF_F_CURRENT_CPU, 0, 0 if packet_flags else -errno.EINVAL),
        (100 * CTXLEN, 0, -errno.EFAULT if packet_flags else -errno.EINVAL),
    ]
    got = [send(sys, fd, flags, cpu=cpu, prog_type=prog_type) for flags, cpu, _ in cases]
    assert got == [r0 for _, _, r0 in cases]
    expected = [PerfSample(1, padded(DATA[:5]))] * 2
    if packet_flags:  # the packet's first 8 bytes after the data (from the MAC header)
        expected.insert(0, PerfSample(0, padded(DATA[:5] + ETH_FRAME[:8])))
    assert reader.read() == expected


def test_an_empty_slot_gives_enoent_and_closing_the_reader_empties_them(sys):
    fd = sys.map_create(MapType.PERF_EVENT_ARRAY, 4, 4, 1)
    try:
        assert send(sys, fd) == -errno.ENOENT
        reader = sys.perf_buffer_reader(fd, 1)
        assert reader.cpus == (0,)
        assert send(sys, fd) == 0
        assert reader.read() == [PerfSample(0, padded(DATA[:5]))]
        reader.close()
        reader.close()  # idempotent
        assert send(sys, fd) == -errno.ENOENT
        with pytest.raises(OSError) as info:
            sys.map_delete_elem(fd, (0).to_bytes(4, "little"))
        assert info.value.errno == errno.ENOENT
    finally:
        sys.close(fd)


def test_a_cpu_past_the_maps_slots_gets_e2big(sys):
    two_cpus(sys)
    fd = sys.map_create(MapType.PERF_EVENT_ARRAY, 4, 4, 1)
    reader = sys.perf_buffer_reader(fd, 1)
    try:
        assert send(sys, fd, cpu=1) == -errno.E2BIG
    finally:
        reader.close()
        sys.close(fd)


def test_a_full_ring_drops_samples_then_says_how_many_it_lost(sys, events):
    """100-byte samples take 112 bytes of a 4096-byte ring, which keeps a byte free: 36 fit.
    The next one that fits after a read comes after a PERF_RECORD_LOST of the 4 dropped."""
    fd, reader = events
    prog = Program.load(ProgramSpec(ProgType.XDP, [
        *[b.st(8, FP, -off, 0) for off in range(8, 105, 8)], b.mov64(R6, R1),
        b.mov64(R1, R6), b.ld_map_fd(R2, "m"), b.lddw(R3, BPF_F_CURRENT_CPU), b.mov64(R4, FP),
        b.add64(R4, -104), b.mov64(R5, 100), b.call("perf_event_output"), b.exit_()]),
        sys, maps={"m": fd})
    try:
        with sys.on_cpu(0):
            r0s = [prog.test_run(ETH_FRAME).retval for _ in range(40)]
            assert r0s == [0] * 36 + [-errno.ENOSPC & 0xFFFF_FFFF] * 4
            assert len(reader.read()) == 36 and reader.lost == 0
            assert prog.test_run(ETH_FRAME).retval == 0
            assert reader.read() == [PerfSample(0, padded(bytes(100)))]
    finally:
        prog.close()
    assert (reader.lost, reader.lost_by_cpu[0]) == (4, 4)


def test_the_verifier_wants_a_perf_event_array_and_a_gpl_program(sys):
    fd = sys.map_create(MapType.HASH, 4, 8, 4)
    try:
        with pytest.raises(VerifierError) as info:
            Program.load(ProgramSpec(ProgType.XDP, output(0, 4)), sys, maps={"m": fd})
        assert info.value.errno == errno.EINVAL
        assert "cannot pass map_type 1 into func bpf_perf_event_output#25" in info.value.log
    finally:
        sys.close(fd)
    fd = sys.map_create(MapType.PERF_EVENT_ARRAY, 4, 4, 1)
    try:
        with pytest.raises(VerifierError) as info:
            Program.load(ProgramSpec(ProgType.XDP, output(0, 4), license="MIT"), sys,
                         maps={"m": fd})
        assert info.value.errno == errno.EINVAL
        assert "cannot call GPL-restricted function from non-GPL compatible program" \
            in info.value.log
    finally:
        sys.close(fd)
