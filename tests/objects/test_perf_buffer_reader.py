"""Reading bpf_perf_event_output records (pybpf.perf_buffer, System.perf_buffer_reader,
maps.PerfEventArray).

The walk over a perf ring (libbpf's perf_event_read_simple) is checked on in-memory rings a
model kernel fills, records wrapping past the end included; each backend's reader on
tests/objects/perf_output.c (tests/conformance/test_perf_event_output.py has the helper's
answers, flag by flag)."""

from __future__ import annotations

import errno
import os
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pybpf.bpf_object import ObjectSpec
from pybpf.errors import BPFError
from pybpf.maps import ArrayMap, PerfEventArray
from pybpf.perf_buffer import (
    PERF_EVENT_HEADER,
    PERF_RECORD_LOST,
    PERF_RECORD_SAMPLE,
    PerfBufferReader,
    PerfSample,
)

SAMPLE = struct.Struct("<II")  # struct sample: seq, len


def _padded(data: bytes) -> bytes:
    """The raw bytes the kernel gives for ``data``: zero-padded so the u32 size and the data
    make a multiple of 8."""
    return data + bytes(-(len(data) + 4) % 8)


class MemoryRings(PerfBufferReader):
    """Per-CPU rings in bytearrays, written as the kernel writes them (perf_output_begin:
    a header, the body, data_head moved past)."""

    def __init__(self, cpus: list[int], size: int) -> None:
        super().__init__(cpus, size)
        self.rings = {cpu: bytearray(size) for cpu in cpus}
        self.head = dict.fromkeys(cpus, 0)
        self.tail = dict.fromkeys(cpus, 0)

    def write(self, cpu: int, kind: int, body: bytes) -> None:
        record = PERF_EVENT_HEADER.pack(kind, 0, PERF_EVENT_HEADER.size + len(body)) + body
        assert self.head[cpu] + len(record) - self.tail[cpu] <= self.ring_size
        for i, byte in enumerate(record):
            self.rings[cpu][(self.head[cpu] + i) & self._mask] = byte
        self.head[cpu] += len(record)

    def sample(self, cpu: int, data: bytes) -> None:
        raw = _padded(data)
        self.write(cpu, PERF_RECORD_SAMPLE, struct.pack("<I", len(raw)) + raw)

    def _load_head(self, cpu: int) -> int:
        return self.head[cpu]

    def _load_tail(self, cpu: int) -> int:
        return self.tail[cpu]

    def _store_tail(self, cpu: int, tail: int) -> None:
        self.tail[cpu] = tail

    def _data(self, cpu: int) -> memoryview:
        return memoryview(self.rings[cpu])

    def wait(self, timeout: float | None) -> bool:
        return False

    def fileno(self) -> int:
        return -1

    def close(self) -> None:
        pass


@given(st.lists(st.tuples(st.sampled_from([0, 3]), st.binary(max_size=50)), max_size=40),
       st.integers(1, 4))
def test_samples_come_out_per_cpu_in_order_across_the_end_of_the_ring(sends, every):
    rings = MemoryRings([0, 3], 256)
    expected, got = [], []
    for i, (cpu, data) in enumerate(sends):
        if rings.head[cpu] + 16 + len(_padded(data)) - rings.tail[cpu] > 256:
            got += rings.read_cpu(cpu)  # the model never overfills: read first
        rings.sample(cpu, data)
        expected.append(PerfSample(cpu, _padded(data)))
        if i % every == 0:
            got += rings.read()
    got += rings.read()
    for cpu in (0, 3):
        assert [s for s in got if s.cpu == cpu] == [s for s in expected if s.cpu == cpu]
    assert rings.samples_read == len(sends) and rings.head == rings.tail


def test_lost_records_are_counted_per_cpu():
    rings = MemoryRings([0, 1], 128)
    rings.sample(1, b"before")
    rings.write(1, PERF_RECORD_LOST, struct.pack("<QQ", 0, 7))
    rings.sample(1, b"after")
    assert rings.read() == [PerfSample(1, _padded(b"before")), PerfSample(1, _padded(b"after"))]
    assert (rings.lost, rings.lost_by_cpu) == (7, {0: 0, 1: 7})


# -- each backend's perf event array ------------------------------------------------------------

def _allowed(cpus: tuple[int, ...]) -> list[int]:
    """The reader's CPUs this test may run on (the ones its affinity allows)."""
    return sorted(set(cpus) & os.sched_getaffinity(0))


@pytest.fixture
def sender(build_object, backend):
    with ObjectSpec.from_file(build_object("perf_output")).load(backend) as obj:
        yield obj


def test_a_perf_event_array_without_max_entries_gets_a_slot_per_cpu(sender, backend):
    samples = sender.maps["samples"]
    assert isinstance(samples, PerfEventArray)
    assert samples.max_entries == backend.num_possible_cpus


def test_samples_arrive_in_the_ring_of_the_cpu_that_sent_them(sender, backend):
    samples, send = sender.maps["samples"], sender.programs["send_samples"]
    assert samples.poll(0.05) == []  # nothing yet: the timeout passes
    cpus = _allowed(samples.reader.cpus)
    for i, cpu in enumerate(cpus):
        with backend.on_cpu(cpu):
            send.test_run(bytes(60 + i))
    got = samples.poll(0)
    assert got == [PerfSample(cpu, part) for i, cpu in enumerate(cpus)
                   for part in (_padded(SAMPLE.pack(i, 60 + i)),
                                _padded(b"odd!" + bytes([60 + i])))]
    assert sender.globals["failed"] == 0 and samples.reader.samples_read == 2 * len(cpus)


def test_a_full_ring_reports_what_it_lost(build_object, backend):
    with ObjectSpec.from_file(build_object("perf_output")).load(backend) as obj:
        samples, send = obj.maps["samples"], obj.programs["send_samples"]
        samples.pages = 1  # 4 KiB a CPU: 24-byte records, about 170 fit
        cpu = _allowed(samples.reader.cpus)[0]
        with backend.on_cpu(cpu):
            for _ in range(150):
                send.test_run(bytes(64))
            got = samples.read()
            send.test_run(bytes(64))  # room again: the kernel first says what it lost
            got += samples.read()
        reader = samples.reader
        assert reader.lost > 0 and reader.lost_by_cpu[cpu] == reader.lost
        assert len(got) + reader.lost == 2 * 151
        seqs = [SAMPLE.unpack(s.data[:8])[0] for s in got if not s.data.startswith(b"odd!")]
        assert seqs == sorted(seqs) and seqs[-1] == 150
        # The program saw each drop too (the helper's -ENOSPC), as many as the LOST record says.
        assert obj.globals["failed"] == reader.lost


def test_closing_the_reader_empties_the_slots(sender):
    samples, send = sender.maps["samples"], sender.programs["send_samples"]
    samples.reader.close()
    send.test_run(bytes(64))
    assert sender.globals["failed"] == 2  # ENOENT: no event in the CPU's slot


def test_only_a_perf_event_array_has_a_perf_buffer(backend):
    with ArrayMap(4, "<I", "<I", system=backend) as other:
        with pytest.raises(BPFError) as info:
            backend.perf_buffer_reader(other.fd)
        assert info.value.errno == errno.EINVAL
        with PerfEventArray(system=backend) as events:
            with pytest.raises(BPFError) as info:
                backend.perf_buffer_reader(events.fd, pages=3)
    assert info.value.errno == errno.EINVAL and "power of two" in info.value.detail
