"""The user-space side of ``bpf_perf_event_output`` (libbpf's perf_buffer): the per-CPU perf
rings behind a BPF_MAP_TYPE_PERF_EVENT_ARRAY and ``PerfBufferReader``, the reader
``System.perf_buffer_reader(fd)`` hands out.

The layout is the kernel's (include/uapi/linux/perf_event.h): one ring per CPU, a control
page (struct perf_event_mmap_page; ``data_head`` and ``data_tail`` at bytes 1024 and 1032)
and a data area of 2^n pages that holds each record once, so a record may wrap past its end.
A record is a struct perf_event_header (u32 type, u16 misc, u16 size: the whole record) and
its body: for PERF_RECORD_SAMPLE with PERF_SAMPLE_RAW a u32 size and the raw bytes, which are
what the program output followed by zero padding to a multiple of 8 (libbpf hands the padded
size to its callback too); for PERF_RECORD_LOST a u64 id and a u64 count of samples the
kernel dropped because the ring was full.

Rules every reader keeps (libbpf's perf_event_read_simple; the walk is written once, here):
- per CPU, records come out in the order the kernel wrote them, as ``PerfSample(cpu, data)``;
  ``read`` takes the CPUs in order; lost counts go to ``lost`` and ``lost_by_cpu``;
- ``data_head`` is read with acquire ordering and ``data_tail`` written with release ordering
  once the records up to it are copied out (the backend's ``_load_head`` / ``_store_tail``).
"""

from __future__ import annotations

import abc
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType

PERF_RECORD_LOST = 2
PERF_RECORD_SAMPLE = 9
PERF_EVENT_HEADER = struct.Struct("<IHH")
_RAW_SIZE = struct.Struct("<I")
_LOST = struct.Struct("<QQ")


@dataclass(frozen=True)
class PerfSample:
    """One ``bpf_perf_event_output`` record: the CPU whose ring held it and its raw bytes
    (zero-padded as the kernel pads them)."""

    cpu: int
    data: bytes


class PerfBufferReader(abc.ABC):
    """The reader of one PERF_EVENT_ARRAY's per-CPU rings (libbpf's ``struct perf_buffer``).

    ``read`` gives the records there now, ``poll`` waits for some first; ``fileno()`` is a
    descriptor readable when a ring may hold records. ``close`` (or a ``with`` block) releases
    the rings and their events.
    """

    def __init__(self, cpus: Sequence[int], ring_size: int) -> None:
        self.cpus = tuple(cpus)
        self.ring_size = ring_size
        self._mask = ring_size - 1
        self.samples_read = 0
        self.lost = 0
        self.lost_by_cpu = dict.fromkeys(self.cpus, 0)

    # -- what a backend gives ----------------------------------------------------------------
    @abc.abstractmethod
    def _load_head(self, cpu: int) -> int:
        """The ring's data_head, with acquire ordering (the records before it are visible)."""

    @abc.abstractmethod
    def _load_tail(self, cpu: int) -> int: ...

    @abc.abstractmethod
    def _store_tail(self, cpu: int, tail: int) -> None:
        """data_tail = ``tail``, with release ordering (after the records were copied)."""

    @abc.abstractmethod
    def _data(self, cpu: int) -> memoryview:
        """The ring's data area (``ring_size`` bytes)."""

    @abc.abstractmethod
    def wait(self, timeout: float | None) -> bool:
        """Wait until a ring may hold records (True), or ``timeout`` seconds (None: no
        limit; 0: just ask) pass (False)."""

    @abc.abstractmethod
    def fileno(self) -> int: ...

    @abc.abstractmethod
    def close(self) -> None:
        """Release the rings and events (idempotent)."""

    # -- the walk (perf_event_read_simple) ---------------------------------------------------
    def _copy(self, data: memoryview, pos: int, length: int) -> bytes:
        start = pos & self._mask
        end = start + length
        if end <= self.ring_size:
            return data[start:end].tobytes()
        return data[start:].tobytes() + data[:end - self.ring_size].tobytes()

    def read_cpu(self, cpu: int) -> list[PerfSample]:
        """The records in ``cpu``'s ring now, oldest first."""
        head = self._load_head(cpu)
        tail = self._load_tail(cpu)
        if head == tail:
            return []
        data = self._data(cpu)
        samples = []
        while tail < head:
            kind, _misc, size = PERF_EVENT_HEADER.unpack(
                self._copy(data, tail, PERF_EVENT_HEADER.size))
            if size < PERF_EVENT_HEADER.size:  # the kernel never writes one: not a ring
                raise ValueError(f"CPU {cpu}'s perf ring holds a {size}-byte record at "
                                 f"{tail}: corrupted")
            body = self._copy(data, tail + PERF_EVENT_HEADER.size,
                              size - PERF_EVENT_HEADER.size)
            if kind == PERF_RECORD_SAMPLE:
                raw_size = _RAW_SIZE.unpack_from(body)[0]
                samples.append(PerfSample(cpu, body[4:4 + raw_size]))
            elif kind == PERF_RECORD_LOST:
                lost = _LOST.unpack_from(body)[1]
                self.lost += lost
                self.lost_by_cpu[cpu] += lost
            tail += size
        self._store_tail(cpu, tail)
        self.samples_read += len(samples)
        return samples

    def read(self) -> list[PerfSample]:
        """The records in every ring now: CPU by CPU, each CPU's oldest first."""
        return [sample for cpu in self.cpus for sample in self.read_cpu(cpu)]

    def poll(self, timeout: float | None = None) -> list[PerfSample]:
        """libbpf's perf_buffer__poll: the records there now, or, when there are none, those
        that come within ``timeout`` seconds (None: wait for some); [] on timeout."""
        samples = self.read()
        if samples or not self.wait(timeout):
            return samples
        return self.read()

    def __enter__(self) -> PerfBufferReader:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
