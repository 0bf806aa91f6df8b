"""Reading ``bpf_perf_event_output`` records on the kernel, as libbpf's perf_buffer__new and
perf_buffer__poll do.

For each online CPU below the map's max_entries: perf_event_open of a software
PERF_COUNT_SW_BPF_OUTPUT event on that CPU (sample_type PERF_SAMPLE_RAW, a wakeup for every
sample), its ring mapped read-write (a control page and 2^n data pages), the event enabled
and its fd put in the map's slot of that CPU, where ``bpf_perf_event_output(ctx, &map,
BPF_F_CURRENT_CPU, ...)`` finds it. One epoll instance watches every event. The reader keeps
its own fd of the map (a dup: the same open file, which owns the slots it filled), and
``close`` empties those slots, unmaps the rings and closes the events, as perf_buffer__free.
data_head is read with acquire and data_tail written with release ordering (``barrier.py``).
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import mmap
import os
import select

from ..errors import KernelError
from ..perf_buffer import PerfBufferReader
from ..topology import parse_cpu_list
from ..uapi import Cmd
from .barrier import ACQUIRE, FENCE, MISSING, RELEASE
from .perf_event import (
    PERF_EVENT_IOC_ENABLE,
    PERF_FLAG_FD_CLOEXEC,
    PERF_SAMPLE_RAW,
    PerfEventAttr,
    perf_event_open,
)
from .syscall import MapElemAttr, bpf

PERF_TYPE_SOFTWARE = 1
PERF_COUNT_SW_BPF_OUTPUT = 10
SYS_CPU_ONLINE = "/sys/devices/system/cpu/online"
_DATA_HEAD = 1024 // 8  # struct perf_event_mmap_page: data_head, then data_tail (u64 words)
_DATA_TAIL = 1032 // 8


def online_cpus() -> list[int]:
    with open(SYS_CPU_ONLINE) as f:
        return parse_cpu_list(f.read())


def _map_elem(cmd: Cmd, map_fd: int, cpu: int, perf_fd: int | None = None) -> None:
    key = ctypes.c_uint32(cpu)
    value = ctypes.c_uint32(perf_fd or 0)
    attr = MapElemAttr(map_fd=map_fd, key=ctypes.addressof(key),
                       value=ctypes.addressof(value) if perf_fd is not None else 0)
    ret = bpf(cmd, attr)
    if ret < 0:
        raise KernelError(-ret, f"{cmd.name.lower()} of CPU {cpu}'s slot")


class _CpuRing:
    """One CPU's event, its mapping and views of the control words and the data."""

    def __init__(self, cpu: int, pages: int) -> None:
        attr = PerfEventAttr(type=PERF_TYPE_SOFTWARE, size=ctypes.sizeof(PerfEventAttr),
                             config=PERF_COUNT_SW_BPF_OUTPUT, sample_period=1,
                             sample_type=PERF_SAMPLE_RAW, wakeup_events=1)
        try:
            self.fd = perf_event_open(attr, -1, cpu, -1, PERF_FLAG_FD_CLOEXEC)
        except OSError as exc:
            raise KernelError(exc.errno, f"perf_event_open of a BPF output event on CPU "
                              f"{cpu}: {exc.strerror}") from None
        page = mmap.PAGESIZE
        try:
            self.mapping = mmap.mmap(self.fd, page * (pages + 1), mmap.MAP_SHARED,
                                     mmap.PROT_READ | mmap.PROT_WRITE)
            fcntl.ioctl(self.fd, PERF_EVENT_IOC_ENABLE, 0)
        except OSError as exc:
            os.close(self.fd)
            raise KernelError(exc.errno, f"the perf ring of CPU {cpu}: {exc.strerror}") from None
        whole = memoryview(self.mapping)
        self.control = whole[:page].cast("Q")
        self.data = whole[page:]
        whole.release()

    def close(self) -> None:
        self.control.release()
        self.data.release()
        self.mapping.close()
        os.close(self.fd)


class KernelPerfBufferReader(PerfBufferReader):
    """The reader of kernel PERF_EVENT_ARRAY ``map_fd`` (``max_entries`` slots), with a ring
    of ``pages`` pages per CPU."""

    def __init__(self, map_fd: int, max_entries: int, pages: int) -> None:
        if MISSING:
            raise KernelError(errno.EOPNOTSUPP, MISSING)
        super().__init__([cpu for cpu in online_cpus() if cpu < max_entries],
                         pages * mmap.PAGESIZE)
        self._rings: dict[int, _CpuRing] = {}
        self._epoll = select.epoll()
        self._map_fd = os.dup(map_fd)
        try:
            for cpu in self.cpus:
                ring = _CpuRing(cpu, pages)
                self._rings[cpu] = ring
                _map_elem(Cmd.MAP_UPDATE_ELEM, self._map_fd, cpu, ring.fd)
                self._epoll.register(ring.fd, select.EPOLLIN)
        except BaseException:
            self.close()
            raise

    def _load_head(self, cpu: int) -> int:
        head = self._rings[cpu].control[_DATA_HEAD]
        if FENCE is not None:
            FENCE(ACQUIRE)
        return head

    def _load_tail(self, cpu: int) -> int:
        return self._rings[cpu].control[_DATA_TAIL]  # only this reader writes it

    def _store_tail(self, cpu: int, tail: int) -> None:
        if FENCE is not None:
            FENCE(RELEASE)
        self._rings[cpu].control[_DATA_TAIL] = tail

    def _data(self, cpu: int) -> memoryview:
        return self._rings[cpu].data

    def wait(self, timeout: float | None) -> bool:
        return bool(self._epoll.poll(-1 if timeout is None else timeout))

    def fileno(self) -> int:
        return self._epoll.fileno()

    def close(self) -> None:
        if self._map_fd < 0:
            return
        for cpu, ring in self._rings.items():
            try:
                _map_elem(Cmd.MAP_DELETE_ELEM, self._map_fd, cpu)
            except KernelError:
                pass  # never filled (a failed open), or emptied by someone else
            ring.close()
        self._rings.clear()
        self._epoll.close()
        os.close(self._map_fd)
        self._map_fd = -1
