"""The perf events bpf_perf_event_output writes to (kernel/events/core.c, ring_buffer.c): a
software PERF_COUNT_SW_BPF_OUTPUT event bound to one CPU, with sample_type PERF_SAMPLE_RAW,
a wake-up for every sample and its ring mapped read-write, as libbpf's perf_buffer__new opens
them; and ``EmulatedPerfBufferReader``, pybpf.perf_buffer's reader over those rings.

Rules this module keeps:
- The ring is the kernel's layout in one bytearray (``mapping``): a control page (struct
  perf_event_mmap_page: data_head, data_tail, data_offset, data_size at bytes 1024..1055)
  and 2^n data pages, which the shared ``PerfBufferReader`` walks as it walks a kernel one.
- The producer is perf_output_begin's: a record goes in when CIRC_SPACE(head, tail) (one
  byte always left free) holds it, else -ENOSPC and the ring counts it lost; the next record
  that fits is preceded by a PERF_RECORD_LOST (the event's id and that count) and takes its
  room too. A sample is a header (misc PERF_RECORD_MISC_KERNEL), a u32 size and the raw
  bytes zero-padded so size and bytes end on 8 (perf_sample_save_raw_data).
- Each output wakes the reader's eventfd (wakeup_events 1); the machine knows nothing of the
  maps the events are put in.
"""

from __future__ import annotations

import errno
import itertools
import os
import struct
import threading
from collections.abc import Callable, Mapping

from ...perf_buffer import PERF_EVENT_HEADER, PERF_RECORD_LOST, PERF_RECORD_SAMPLE, PerfBufferReader
from .machine import Machine, eventfd_wait, per_machine

PAGE_SIZE = 4096
PERF_TYPE_SOFTWARE = 1
PERF_COUNT_SW_BPF_OUTPUT = 10
PERF_RECORD_MISC_KERNEL = 1
# struct perf_event_mmap_page: data_head, data_tail, data_offset, data_size (u64 words)
_DATA_HEAD, _DATA_TAIL, _DATA_OFFSET, _DATA_SIZE = (1024 // 8, 1032 // 8, 1040 // 8,
                                                   1048 // 8)
_RAW_SIZE = struct.Struct("<I")
_LOST_EVENT = struct.Struct("<IHHQQ")  # header, id, lost


@per_machine
def _perf_event_ids(machine: Machine) -> itertools.count:
    """perf_event_id: the ids events are given, from 1."""
    return itertools.count(1)


def raw_record_size(size: int) -> int:
    """perf_sample_save_raw_data: the raw size a sample of ``size`` bytes reports (the u32
    size and the bytes rounded up to 8, less the u32)."""
    return -(-(size + _RAW_SIZE.size) // 8) * 8 - _RAW_SIZE.size


class PerfEvent:
    """A BPF output event on ``cpu`` (event->oncpu) and its ring of ``pages`` data pages;
    ``wakeup`` is the eventfd an output signals."""

    attr_type = PERF_TYPE_SOFTWARE
    attr_config = PERF_COUNT_SW_BPF_OUTPUT

    def __init__(self, machine: Machine, cpu: int, pages: int, wakeup: int) -> None:
        machine.check_cpu(cpu)
        self.oncpu = cpu
        self.id = next(_perf_event_ids(machine))
        self.data_size = pages * PAGE_SIZE
        self.mapping = bytearray(PAGE_SIZE + self.data_size)
        self.control = memoryview(self.mapping)[:PAGE_SIZE].cast("Q")
        self.data = memoryview(self.mapping)[PAGE_SIZE:]
        self.control[_DATA_OFFSET] = PAGE_SIZE  # perf_event_init_userpage
        self.control[_DATA_SIZE] = self.data_size
        self.head = 0  # rb->head: data_head once the record is written
        self.lost = 0  # rb->lost: samples dropped since the last PERF_RECORD_LOST
        self.wakeup = wakeup
        self._lock = threading.Lock()  # one writer at a time, as the CPU's nesting allows

    def _write(self, offset: int, record: bytes) -> None:
        start = offset % self.data_size
        first = min(len(record), self.data_size - start)
        self.data[start:start + first] = record[:first]
        self.data[:len(record) - first] = record[first:]

    def perf_event_output(self, raw: bytes) -> int:
        """perf_event_output of a PERF_SAMPLE_RAW sample of ``raw``: 0, or -ENOSPC (the
        ring is full: the sample is counted lost)."""
        padded = raw + bytes(raw_record_size(len(raw)) - len(raw))
        size = PERF_EVENT_HEADER.size + _RAW_SIZE.size + len(padded)
        sample = PERF_EVENT_HEADER.pack(PERF_RECORD_SAMPLE, PERF_RECORD_MISC_KERNEL, size) \
            + _RAW_SIZE.pack(len(padded)) + padded
        with self._lock:
            lost = b""
            if self.lost:
                lost = _LOST_EVENT.pack(PERF_RECORD_LOST, 0, _LOST_EVENT.size, self.id,
                                        self.lost)
            tail = self.control[_DATA_TAIL]
            # ring_buffer_has_space: CIRC_SPACE(head, tail, data_size) >= size
            if (tail - self.head - 1) % self.data_size < len(lost) + len(sample):
                self.lost += 1
                return -errno.ENOSPC
            self._write(self.head, lost + sample)
            self.lost = 0
            self.head += len(lost) + len(sample)
            self.control[_DATA_HEAD] = self.head
        os.eventfd_write(self.wakeup, 1)
        return 0


class EmulatedPerfBufferReader(PerfBufferReader):
    """The reader of emulated ``events`` (CPU -> its event, each woken through ``wakeup``):
    pybpf.perf_buffer's walk over their rings. ``close`` calls ``release`` (which takes the
    events out of the map's slots) once, then closes the eventfd."""

    def __init__(self, events: Mapping[int, PerfEvent], wakeup: int,
                 release: Callable[[], None]) -> None:
        super().__init__(sorted(events), next(iter(events.values())).data_size)
        self._events = dict(events)
        self._wakeup = wakeup
        self._release: Callable[[], None] | None = release

    def _ring(self, cpu: int) -> PerfEvent:
        if self._release is None:  # as the kernel reader's released mapping answers
            raise ValueError("the perf buffer reader is closed")
        return self._events[cpu]

    def _load_head(self, cpu: int) -> int:
        return self._ring(cpu).control[_DATA_HEAD]

    def _load_tail(self, cpu: int) -> int:
        return self._ring(cpu).control[_DATA_TAIL]

    def _store_tail(self, cpu: int, tail: int) -> None:
        self._ring(cpu).control[_DATA_TAIL] = tail

    def _data(self, cpu: int) -> memoryview:
        return self._ring(cpu).data

    def wait(self, timeout: float | None) -> bool:
        return eventfd_wait(self._wakeup, timeout)

    def fileno(self) -> int:
        return self._wakeup

    def close(self) -> None:
        if self._release is None:
            return
        release, self._release = self._release, None
        release()
        os.close(self._wakeup)
