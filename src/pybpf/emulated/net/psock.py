"""What a machine's psocks share (net/core/skmsg.c's data, include/linux/skmsg.h): the table
of psocks by socket inode, the per-CPU counters, ``ingress_msg``'s queue, the skbs on
``ingress_skb``, the receive buffers, and the helpers the psock's threads use.

Rules this module keeps:
- One ``PsockTable`` per emulated machine (``psock_table``), made on first use; psocks are
  found by the inode of the socket an fd names.
- Counters (``SockmapCpuStats``) are per emulated CPU and change under the table's lock.
- A psock thread's host CPU time goes to the emulated CPU it runs as (``BusyMeter``).
- Modeled time goes through ``charge`` (emulated/timing.py's costs, the profile's [net]).
"""

from __future__ import annotations

import fcntl
import os
import select
import socket
import struct
import termios
import threading
import time
from collections import deque
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from ..machine.machine import per_machine

if TYPE_CHECKING:
    from .skmsg import SkPsock

SO_INCOMING_CPU = 49
POLL_S = 0.02  # how often idle psock threads look at their socket
BUSY_FLUSH_S = 0.05  # how often a busy psock thread adds its CPU time to the counters
JIFFY_S = 0.004  # HZ=250: the EAGAIN retry delay
DRAIN_GIVE_UP_S = 1.0
# One verdict run takes what the socket has queued, up to a coalesced skb: loopback skbs are
# 64 KiB (GSO) but tcp_try_coalesce merges queued ones up to MAX_SKB_FRAGS (17) page frags of
# 32 KiB, so a reader that fell behind takes one skb of up to 544 KiB.
RX_MAX_READ = 512 * 1024
# Bytes a psock's ingress_skb may hold before the receive threads feeding it stop reading.
# The kernel has no such bound (ingress_skb grows while the target cannot send); here the
# senders' TCP windows close instead, so a stalled peer cannot grow the process without end.
BACKLOG_MAX_BYTES = 4 << 20
RX_BUFFERS_KEPT = 16  # full-size receive buffers kept for reuse once sent (zeroing one costs)
SEND_BATCH_BYTES = 1 << 20  # at most this much queued egress data goes out in one sendmsg
SEND_BATCH_SKBS = 64
SKB_FRAG = 32 * 1024  # a page frag of tcp_sendmsg's skbs (SKB_FRAG_PAGE_ORDER: 32 KiB pages)
MSG_MAX = 17 * 4096  # an sk_msg's scatterlist: MAX_MSG_FRAGS pages
NO_CPU = -1
SEND_FLAGS = int(socket.MSG_DONTWAIT | socket.MSG_NOSIGNAL)  # an int: IntFlag's | is slow


@dataclass
class SockmapCpuStats:
    """What the psock data path did on one emulated CPU."""

    verdicts: int = 0  # verdict (and parser) program runs
    backlog_runs: int = 0  # sk_psock_backlog runs
    bytes: int = 0  # bytes delivered to an ingress_msg or sent by the work
    eagain_retries: int = 0  # sends that met a full send buffer and were retried later
    drops: int = 0  # messages dropped (SK_DROP, no target, stopped transmission)
    busy_ns: int = 0  # host CPU time of the receive and work threads running as this CPU


class SkPsockProgs:
    """struct sk_psock_progs: a map's programs, or those a psock took, with their links."""

    SLOTS = ("msg_parser", "stream_parser", "stream_verdict", "skb_verdict")

    def __init__(self) -> None:
        self.msg_parser: Any = None
        self.stream_parser: Any = None
        self.stream_verdict: Any = None
        self.skb_verdict: Any = None
        self.links: dict[str, Any] = dict.fromkeys(self.SLOTS)


class SkbEntry:
    """An skb on ingress_skb: its bytes, where the work got to, and which way it goes."""

    __slots__ = ("data", "off", "ingress")

    def __init__(self, data: bytes | bytearray, ingress: bool) -> None:
        self.data = data
        self.off = 0
        self.ingress = ingress


class MsgQueue:
    """Byte strings in order and their total: ``ingress_msg``, and what a dropped psock's
    held. The total bounds the queue as sk_rmem_alloc bounds the kernel's."""

    __slots__ = ("chunks", "nbytes")

    def __init__(self) -> None:
        self.chunks: deque[bytes | bytearray | memoryview] = deque()
        self.nbytes = 0

    def __bool__(self) -> bool:
        return bool(self.chunks)

    def append(self, data: bytes | bytearray) -> None:
        self.chunks.append(data)
        self.nbytes += len(data)

    def extend(self, other: MsgQueue) -> None:
        self.chunks.extend(other.chunks)
        self.nbytes += other.nbytes

    def clear(self) -> None:
        self.chunks.clear()
        self.nbytes = 0

    def take(self, bufsize: int) -> bytes:
        """Up to ``bufsize`` bytes off the front; the rest of a chunk read in part stays as a
        view (small reads of a large chunk copy each byte once)."""
        out = bytearray()
        chunks = self.chunks
        while chunks and len(out) < bufsize:
            head = chunks[0]
            want = bufsize - len(out)
            if len(head) <= want:
                out += chunks.popleft()
            else:
                view = memoryview(head)
                out += view[:want]
                chunks[0] = view[want:]
        self.nbytes -= len(out)
        return bytes(out)


class PsockTable:
    """The machine's psocks by socket inode, the per-CPU counters and the host CPUs."""

    def __init__(self, machine: Any) -> None:
        self.machine = machine
        self.lock = threading.Lock()
        self.by_ino: dict[int, SkPsock] = {}
        self.leftover: dict[int, MsgQueue] = {}  # what dropped psocks' ingress_msg held
        self.stats = [SockmapCpuStats() for _ in range(machine.num_cpus)]
        self.host_cpus = sorted(os.sched_getaffinity(0))
        # Full-size receive buffers whose bytes went out (the emulator's skb cache): a fresh
        # bytearray is zeroed, under the interpreter's lock, which costs as much as the copy.
        self.rx_buffers: deque[bytearray] = deque(maxlen=RX_BUFFERS_KEPT)

    def rx_buffer(self) -> bytearray:
        try:
            return self.rx_buffers.pop()
        except IndexError:
            return bytearray(RX_MAX_READ)

    def recycle(self, data: Any) -> None:
        """An egress skb's buffer after its last byte went out (nothing else refers to it)."""
        if type(data) is bytearray and len(data) == RX_MAX_READ:
            self.rx_buffers.append(data)

    def count(self, cpu: int, **deltas: int) -> None:
        record = self.stats[cpu]
        with self.lock:
            for name, n in deltas.items():
                setattr(record, name, getattr(record, name) + n)

    def snapshot(self) -> dict[int, SockmapCpuStats]:
        with self.lock:
            return {cpu: SockmapCpuStats(**{f.name: getattr(s, f.name) for f in fields(s)})
                    for cpu, s in enumerate(self.stats)}

    def host_cpu(self, cpu: int) -> int:
        """The host CPU standing for emulated ``cpu``."""
        return self.host_cpus[cpu % len(self.host_cpus)]

    def emulated_cpu(self, host_cpu: int) -> int:
        """The emulated CPU standing for ``host_cpu`` (itself when the machine has it)."""
        return host_cpu if 0 <= host_cpu < self.machine.num_cpus else host_cpu % \
            self.machine.num_cpus

    def lookup_fd(self, fd: int) -> SkPsock | None:
        try:
            ino = os.fstat(fd).st_ino
        except OSError:
            return None
        return self.by_ino.get(ino)

    def register(self, psock: SkPsock) -> None:
        with self.lock:
            self.by_ino[psock.ino] = psock

    def sock_map_close(self, psock: SkPsock) -> None:
        """The socket went: out of every map it is in (sock_map_remove_links)."""
        for bpf_map, link_raw in list(psock.links):
            bpf_map.sock_map_delete_from_link(psock.ref, link_raw)

    def forget(self, psock: SkPsock) -> None:
        with self.lock:
            if self.by_ino.get(psock.ino) is psock:
                del self.by_ino[psock.ino]


# psock_table(machine): the psocks of ``machine``, made on first use.
psock_table = per_machine(PsockTable)


class BusyMeter:
    """Host CPU time of one psock thread, counted to the emulated CPU it runs as. Reading a
    thread's CPU time is a system call made with the interpreter's lock held, so a busy
    thread reads it every BUSY_FLUSH_S, when it changes CPU and before it waits, not per skb."""

    __slots__ = ("table", "cpu", "since", "due")

    def __init__(self, table: PsockTable) -> None:
        self.table = table
        self.cpu = NO_CPU
        self.since = time.thread_time_ns()
        self.due = time.monotonic() + BUSY_FLUSH_S

    def running_as(self, cpu: int) -> None:
        if cpu != self.cpu:
            self.flush()
            self.cpu = cpu
        elif time.monotonic() >= self.due:
            self.flush()

    def flush(self) -> None:
        now = time.thread_time_ns()
        if self.cpu != NO_CPU and now > self.since:
            self.table.count(self.cpu, busy_ns=now - self.since)
        self.since = now
        self.due = time.monotonic() + BUSY_FLUSH_S


def pin_thread(host_cpu: int) -> None:
    """Pin the calling thread to ``host_cpu``."""
    try:
        os.sched_setaffinity(0, {host_cpu})
    except OSError:  # a CPU outside this process's cpuset: leave the thread where it is
        pass


def charge(machine: Any, cpu: int, *events: str, n: int = 1) -> None:
    """Modeled time: ``n`` times each of ``events`` (profile [net] costs) on ``cpu``."""
    for event in events:
        machine.timing.charge(cpu, event, n)


def socket_rx_queued(fd: int) -> int:
    """SIOCINQ: bytes waiting in the socket's receive queue."""
    try:
        return struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]
    except OSError:
        return 0


def wait_writable(fd: int, timeout: float) -> None:
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    poller.poll(timeout * 1000)
