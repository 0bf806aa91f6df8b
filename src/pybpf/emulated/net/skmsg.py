"""The psock of a socket in a sockmap and its data path (net/core/skmsg.c, include/linux/skmsg.h),
on real host sockets.

Rules this module keeps:
- One ``PsockTable`` per emulated machine (``psock_table``), made on first use; psocks are
  found by the inode of the socket an fd names. Counters (``SockmapCpuStats``) are per
  emulated CPU and change under the table's lock; a psock thread's host CPU time goes to the
  emulated CPU it runs as (``BusyMeter``).
- One ``SkPsock`` per socket (by inode), made when the socket first enters a map
  (``sk_psock_init``), holding a dup of the socket's fd (its reference on the socket), the
  programs it took at insertion (``SkPsockProgs``), its map links, ``ingress_skb`` (data on
  its way out of this socket or into its ingress, in order, with the work's offset into the
  head) and ``ingress_msg`` (what ``sock_recv`` reads first, as tcp_bpf_recvmsg does).
- With a verdict program (stream or skb verdict) a receive thread takes over reading the socket
  (it stands for the softirq's ``sk_data_ready``): it runs the stream parser, when attached with
  a stream verdict, then the verdict on each message, with the emulated engine, and applies it
  (``sk_psock_verdict_apply``): SK_PASS -> this socket's ``ingress_msg`` (through
  ``ingress_skb`` when work is pending, to keep the order); a redirect -> the target psock's
  ``ingress_skb`` and its work scheduled (``sk_psock_skb_redirect``); anything else dropped and
  counted. Each read takes what the socket has queued, up to a coalesced skb (``RX_MAX_READ``),
  into the buffer the verdict runs on and the backlog sends: no copy in between, and full-size
  buffers are reused once sent. Data queued on the socket before insertion is left alone until
  new data (or the peer's FIN) arrives, as the kernel's data_ready only fires then, or the
  application calls recvmsg on the socket (measured on 6.18: even one that finds nothing); it
  then goes through the verdict. The application never reads it as it is: a socket with a
  verdict gives only what ``ingress_msg`` holds (tcp_bpf_recvmsg_parser). iperf3's cookie trap:
  a proxy that only waits for its other socket hangs.
- The backlog work (``sk_psock_backlog``) runs in the psock's worker thread:
  ingress entries go to ``ingress_msg`` (while it holds the socket's receive buffer: -EAGAIN,
  retried a jiffy later, as sk_psock_skb_ingress does), egress ones are sent on the socket
  non-blocking, a run of them in one sendmsg; on EAGAIN the entries and the offset reached stay
  at the head and the work waits for write space (at most a jiffy, 4 ms) before it retries:
  nothing is lost or sent twice (the 6.16 fixes). A hard send error stops transmission
  (TX_ENABLED cleared) and drops what is queued, counted.
- Bounds: a receive thread stops reading while the psock it last fed holds
  ``BACKLOG_MAX_BYTES`` on its ingress_skb (kinder than the kernel, whose ingress_skb has no
  bound), or while its own ``ingress_msg`` holds the socket's receive buffer (in the kernel
  SK_PASS data stays charged to the socket). So a peer that stops reading closes the
  sender's TCP window; the process does not grow.
- Where work runs: a psock with a target CPU (``target_cpu``, the map update's binding: the
  user's explicit choice, so it wins) runs its work there; else one with a redirect CPU
  (``redir_cpu``: the 2025 series' kfunc ``bpf_sk_skb_set_redirect_cpu`` sets it on the
  verdict's psock, and a redirect copies the source's onto the target, as
  sk_psock_skb_redirect did there) on that one (sk_psock_schedule_delayed_work); an unbound
  one on the CPU that queued the work (``schedule_delayed_work`` on WORK_CPU_UNBOUND: the
  queuing CPU's kworker). The receive thread runs on the emulated CPU standing for the host
  CPU that processed the socket's last incoming packets (SO_INCOMING_CPU: for loopback the
  sender's). Each thread pins itself (sched_setaffinity) to the host CPU standing for the
  emulated CPU it runs on (``emulated % host CPUs``) and sets the machine's current CPU.
- Modeled time (emulated/machine/timing.py): the kernel work this path stands for is charged to the
  CPU it runs on, through ``_charge``: the verdict's take of each skb (tcp_read_skb, and the
  ACK its tcp_cleanup_rbuf sends), the redirect (sk_psock_skb_redirect), the kworker's wake-up
  and context switches per work run, each send of the backlog (``_charge_sent``: per page
  frag, __skb_send_sock's sendmsg of it, spliced without a copy, whose tcp_push transmits
  it as an skb of its own through loopback, and the receive softirq that loopback runs in
  the sender's context), and each delivery to an ``ingress_msg``.
  The verdict program's instructions are charged by run_prog (prog/core.py).
- Counters per emulated CPU (``SockmapCpuStats``): verdict runs, backlog work runs, bytes
  delivered or sent, EAGAIN retries, drops, and host CPU time of the receive and work threads.
- Teardown: when the psock's last link goes (map delete, replacement, map freed, socket
  closed) it stops; its threads exit and the dup is closed by the last one out. Deliberately
  kinder than the kernel, which purges both queues: when the socket is still open, what
  ``ingress_msg`` held stays readable by ``sock_recv`` and egress data still queued is sent
  before the worker exits (given up, counted as drops, after a second without progress).
  A socket closed by the application (its fd no longer names it) is noticed by the psock's
  threads within ``POLL_S`` and removed from every map, as sock_map_close does.
"""

from __future__ import annotations

import errno
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
from typing import Any

from ...errors import KernelError
from ...uapi import SK_PASS, ProgType
from ..machine.machine import per_machine
from ..prog.core import run_prog
from ..prog.filter import (
    SK_BUFF_SIZE,
    SK_MSG_DATA,
    SK_MSG_DATA_END,
    SK_MSG_FAMILY,
    SK_MSG_MD_SIZE,
    SK_MSG_SIZE,
    SKB_DATA,
    SKB_DATA_END,
    SKB_FAMILY,
    SKB_LEN,
    SKB_LOCAL_IP4,
    SKB_LOCAL_PORT,
    SKB_REMOTE_IP4,
    SKB_REMOTE_PORT,
    writable_fields,
)
from ..prog.kfuncs import BPF_SK_REDIR_CPU_UNSET
from ..prog.memory import CTX_REGION, PACKET_REGION, CtxRegion, RunState

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

    def forget_locked(self, psock: SkPsock) -> None:
        """Take ``psock`` out of the table (``self.lock`` held)."""
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


# enum __sk_action: what a verdict becomes (__SK_DROP, __SK_PASS, __SK_REDIRECT)
SK_VERDICT_DROP, SK_VERDICT_PASS, SK_VERDICT_REDIRECT = 0, 1, 2
_SKB_WRITABLE = writable_fields(ProgType.SK_SKB, SK_BUFF_SIZE)


class SkPsock:
    """struct sk_psock (see the module docstring)."""

    def __init__(self, table: PsockTable, ref: Any) -> None:
        self.table = table
        self.machine = table.machine
        self.ref = ref
        self.ino = ref.ino
        self.sock: socket.socket | None = None  # a dup of the socket while a thread runs
        self.fd = -1
        self.refcnt = 0
        self.links: list[tuple[Any, Any]] = []  # (map, link_raw)
        self.progs = SkPsockProgs()
        self.target_cpu: int | None = None
        self.redir_cpu = BPF_SK_REDIR_CPU_UNSET
        self.lock = threading.Condition()
        self.ingress_skb: deque[SkbEntry] = deque()
        self.backlog_bytes = 0  # of ingress_skb, not yet delivered or sent
        self.backlog_waiters = 0  # receive threads waiting for backlog_bytes to fall
        self.ingress_msg = MsgQueue()
        self.tx_enabled = True
        self.stopped = False  # sk_psock_drop: the last link went
        self.closed = False  # the application closed the socket
        self.rx_error = 0
        self.rx_eof = False
        self.work_pending = False
        self.work_cpu = NO_CPU
        self.rx_lock = threading.Lock()  # whoever reads the socket itself holds it
        self.armed = False  # data_ready fired since the verdict started
        self.rx_seen = 0  # bytes queued on the socket when last looked at
        self.receiver: threading.Thread | None = None
        self.receiver_stop = False
        self._fd_users = 0  # running threads: the last one out closes the dup
        self.worker: threading.Thread | None = None
        sock = socket.socket(fileno=ref.fd)
        try:
            self.family = sock.family
            self.local = sock.getsockname() if sock.family != socket.AF_UNIX else None
            try:
                self.remote = sock.getpeername() if sock.family != socket.AF_UNIX else None
            except OSError:
                self.remote = None
        finally:
            sock.detach()
        self._skb_fields = self._sock_fields()

    # -- lifetime -----------------------------------------------------------------------------
    def _start(self, target, what: str) -> threading.Thread:
        """A thread of this psock, with the psock's dup of the socket open while it runs (a
        thread of its own, so that an idle psock keeps nothing open: a socket the application
        closes goes at once, as in the kernel)."""
        with self.lock:
            if self.sock is None:
                self.sock = socket.socket(fileno=os.dup(self.ref.fd))
                self.fd = self.sock.fileno()
            self._fd_users += 1
        thread = threading.Thread(target=self._thread_main, args=(target,),
                                  name=f"psock-{what}-{self.ino}", daemon=True)
        thread.start()
        return thread

    def _thread_main(self, target) -> None:
        """Run ``target(meter)``: the thread's loop, with the meter of its CPU time."""
        meter = BusyMeter(self.table)
        try:
            target(meter)
        finally:
            meter.flush()
            self._fd_put()

    def _fd_put(self) -> None:
        with self.lock:
            self._fd_users -= 1
            if self._fd_users == 0 and self.sock is not None:
                self.sock.close()
                self.sock, self.fd = None, -1

    def running(self) -> bool:
        """Whether the verdict owns the socket's receive side (its receive thread runs)."""
        return self.receiver is not None and not self.receiver_stop

    def sk_psock_put(self) -> None:
        with self.lock:
            self.refcnt -= 1
            last = self.refcnt == 0
        if last:
            self.sk_psock_drop()

    def sk_psock_start_verdict(self) -> None:
        if self.stopped or self.running():
            return
        if self.receiver is not None:  # a verdict stopped earlier: its thread is ending
            self.receiver.join(POLL_S * 5)
        self.receiver_stop = False
        with self.rx_lock:
            self.rx_seen = socket_rx_queued(self.ref.fd)
            self.armed = self.rx_seen == 0
        self.receiver = self._start(self._sk_psock_verdict_data_ready, "rx")

    def sk_psock_stop_verdict(self) -> None:
        """The verdict programs go and the socket is read as a plain one again."""
        self.progs.stream_verdict = self.progs.skb_verdict = None
        self.receiver_stop = True
        self._quiesce_receiver()
        with self.lock:
            self.lock.notify_all()

    def _quiesce_receiver(self) -> None:
        """Wait out a chunk the receive thread holds (read, not yet delivered): once the
        kernel's delete returns no verdict runs on the socket, so what the application reads
        next from the socket itself comes after everything the verdict took."""
        if threading.current_thread() is not self.receiver:
            with self.rx_lock:
                pass

    def sk_psock_drop(self) -> None:
        """The last link went: stop; the threads finish and exit. What ``ingress_msg``
        still holds becomes the socket's leftover, read before its own queue, in the same
        step that takes the psock out of the table: a reader finds one or the other."""
        self.receiver_stop = True
        self._quiesce_receiver()
        with self.lock:
            self.stopped = True
            self.receiver_stop = True
            if self.closed or not self.ref.alive():
                self.closed = True
                self._purge()
            with self.table.lock:
                if self.ingress_msg:
                    self.table.leftover.setdefault(self.ino, MsgQueue()).extend(self.ingress_msg)
                    self.ingress_msg.clear()
                self.table.forget_locked(self)
            self.lock.notify_all()

    def _purge(self) -> None:
        """__sk_psock_purge_ingress_msg and the ingress_skb purge (with self.lock held)."""
        dropped = len(self.ingress_skb)
        self.ingress_skb.clear()
        self._backlog_done(self.backlog_bytes)
        self.ingress_msg.clear()
        if dropped:
            self.table.count(self.machine.current.cpu, drops=dropped)

    def _check_alive(self) -> bool:
        """sock_map_close when the application has closed the socket."""
        if self.ref.alive():
            return True
        with self.lock:
            self.closed = True
        self.table.sock_map_close(self)
        return False

    # -- receive: sk_psock_verdict_data_ready / strparser --------------------------------------
    def _sk_psock_verdict_data_ready(self, meter: BusyMeter) -> None:
        """The receive thread's loop: wait for data, read an skb, run the verdict on it."""
        poller = select.poll()
        poller.register(self.fd, select.POLLIN | select.POLLRDHUP)
        strp = bytearray()
        host_cpu = -1
        fed: SkPsock | None = None  # the psock whose backlog the last skb joined
        full = False  # the last read filled a whole buffer: more is queued, no poll needed
        checked = 0.0  # when the socket was last seen open (at most POLL_S ago)
        incoming, incoming_at = -1, 0.0  # SO_INCOMING_CPU: read after a poll, or per POLL_S
        while not self.receiver_stop:
            if self._rx_throttled(fed):
                if not self._check_alive():
                    break
                continue
            if not full:
                meter.flush()
            events = [(self.fd, select.POLLIN)] if full else poller.poll(POLL_S * 1000)
            polled, full = not full, False
            if self.receiver_stop:
                break
            now = time.monotonic()
            if not events or now - checked >= POLL_S:
                if not self._check_alive():
                    break
                checked = now
            if not events:
                continue
            with self.rx_lock:
                if self.receiver_stop:  # stopped while this thread waited for the lock
                    break
                if not self.armed:
                    queued = socket_rx_queued(self.fd)
                    if queued > self.rx_seen or events[0][1] & (select.POLLRDHUP | select.POLLHUP):
                        self.armed = True
                    else:
                        self.rx_seen = queued
                if not self.armed:
                    time.sleep(POLL_S / 4)  # old data only: wait for data_ready
                    continue
                try:
                    data = self._read_skb()
                except BlockingIOError:
                    continue
                except OSError as exc:
                    self._rx_done(exc.errno or errno.EIO)
                    break
                if not data:
                    self._rx_done(0)
                    break
                full = len(data) == RX_MAX_READ
                if polled or now - incoming_at >= POLL_S:
                    incoming = self.sock.getsockopt(socket.SOL_SOCKET, SO_INCOMING_CPU)
                    incoming_at = now
                cpu = self.table.emulated_cpu(incoming) if incoming >= 0 else \
                    self.machine.current.cpu
                if self.table.host_cpu(cpu) != host_cpu:
                    host_cpu = self.table.host_cpu(cpu)
                    pin_thread(host_cpu)
                self.machine.set_cpu(cpu)
                meter.running_as(cpu)
                if self.progs.stream_parser is not None and self.progs.stream_verdict is not None:
                    strp += data
                    fed = self._strp_recv(strp, cpu)
                else:
                    fed = self._sk_psock_verdict_recv(data, cpu)

    def _read_skb(self) -> bytearray:
        """The next skb (tcp_read_skb): what the socket has queued, up to RX_MAX_READ, read
        into the buffer the verdict then runs on and the backlog sends (no copy between).
        A short read keeps a copy of its bytes and gives the buffer back (asking first how
        much is queued would cost an ioctl that takes the socket's lock, with the
        interpreter's lock held, each time)."""
        buf = self.table.rx_buffer()
        n = self.sock.recv_into(buf, RX_MAX_READ, socket.MSG_DONTWAIT)
        if n >= RX_MAX_READ // 2:
            del buf[n:]  # a shrink by less than half keeps the allocation: no copy
            return buf
        data = buf[:n]
        self.table.recycle(buf)
        return data

    def _rx_throttled(self, fed: SkPsock | None) -> bool:
        """Whether the receive thread must wait (a jiffy at most) before reading more: the
        psock it last fed holds BACKLOG_MAX_BYTES, or this socket's ingress_msg holds its
        receive buffer (SK_PASS data stays charged to the socket in the kernel, so its TCP
        window closes until the application reads)."""
        if fed is not None and fed.backlog_bytes >= BACKLOG_MAX_BYTES:
            with fed.lock:
                if fed.backlog_bytes >= BACKLOG_MAX_BYTES and not fed.stopped and \
                        fed.tx_enabled and not self.receiver_stop:
                    fed.backlog_waiters += 1
                    fed.lock.wait(JIFFY_S)
                    fed.backlog_waiters -= 1
                    return True
        if self.ingress_msg.nbytes and self.ingress_msg.nbytes >= (rcvbuf := self._rcvbuf()):
            with self.lock:
                if self.ingress_msg.nbytes >= rcvbuf and not self.receiver_stop:
                    self.lock.wait(JIFFY_S)
                    return True
        return False

    def _rcvbuf(self) -> int:
        try:
            return self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
        except OSError:
            return 0

    def _rx_done(self, err: int) -> None:
        with self.lock:
            self.rx_eof = True
            self.rx_error = err
            self.lock.notify_all()

    def _strp_recv(self, buf: bytearray, cpu: int) -> SkPsock | None:
        """strp_data_ready: the parser says how long the next message is; whole messages go
        to the verdict; a negative length aborts the parser (the error goes to the socket).
        Returns the psock the last message was queued on, if any."""
        fed = None
        while buf:
            verdict_prog = self.progs.stream_verdict
            parser = self.progs.stream_parser
            if verdict_prog is None or parser is None:
                fed = self._sk_psock_verdict_recv(bytearray(buf), cpu)
                buf.clear()
                return fed
            retval, _ = self._run_skb(parser, bytearray(buf))
            self.table.count(cpu, verdicts=1)
            length = _s32(retval)
            if length < 0:
                self.table.count(cpu, drops=1)
                buf.clear()
                self._rx_done(-length)
                self.receiver_stop = True
                return fed
            if length == 0 or length > len(buf):
                return fed  # wait for more
            message = buf[:length]
            del buf[:length]
            fed = self._sk_psock_verdict_recv(message, cpu) or fed
        return fed

    def _sk_psock_verdict_recv(self, packet: bytearray, cpu: int) -> SkPsock | None:
        """Run the verdict on ``packet`` (the program may rewrite it) and apply it; returns
        the psock whose backlog took it, if one did."""
        charge(self.machine, cpu, "tcp_read_skb", "tcp_ack")
        prog = self.progs.stream_verdict or self.progs.skb_verdict
        if prog is None:  # the verdict went: the data stays this socket's
            return self._ingress_self(packet, cpu)
        retval, redirect = self._run_skb(prog, packet)
        self.table.count(cpu, verdicts=1)
        verdict = sk_psock_map_verd(retval & 0xFFFFFFFF, redirect is not None)
        return self.sk_psock_verdict_apply(packet, verdict, redirect, cpu)

    def _run_skb(self, prog: Any, packet: bytearray) -> tuple[int, Any]:
        """Run an SK_SKB program on ``packet`` as the skb (data .. data_end)."""
        skb = bytearray(self._skb_fields)
        struct.pack_into("<I", skb, SKB_LEN, len(packet))
        base = PACKET_REGION << 32
        ctx = CtxRegion("__sk_buff", skb, {SKB_DATA: base, SKB_DATA_END: base | len(packet)},
                        _SKB_WRITABLE)
        return self._run(prog, ctx, packet)

    def _run(self, prog: Any, ctx: CtxRegion, packet: bytearray) -> tuple[int, Any]:
        rs = RunState(prog.run_env, packet)
        rs.psock = self
        rs.mem[CTX_REGION] = ctx
        rs.mem[PACKET_REGION] = packet
        retval = run_prog(prog.executable, rs)
        return retval, rs.redirect

    def _sock_fields(self) -> bytes:
        """An __sk_buff with the socket's family, addresses and ports filled in
        (sk_skb_convert_ctx_access): the fields every skb of this socket shares."""
        skb = bytearray(SK_BUFF_SIZE)
        struct.pack_into("<I", skb, SKB_FAMILY, int(self.family))
        if self.family == socket.AF_INET and self.local and self.remote:
            skb[SKB_REMOTE_IP4:SKB_REMOTE_IP4 + 4] = socket.inet_aton(self.remote[0])
            skb[SKB_LOCAL_IP4:SKB_LOCAL_IP4 + 4] = socket.inet_aton(self.local[0])
        if self.family in (socket.AF_INET, socket.AF_INET6) and self.local and self.remote:
            # remote_port: the __be16 skc_dport shifted into the upper half on little-endian
            # machines (bpf_convert_ctx_access's BPF_LSH 16); local_port: host order
            skb[SKB_REMOTE_PORT + 2:SKB_REMOTE_PORT + 4] = self.remote[1].to_bytes(2, "big")
            struct.pack_into("<I", skb, SKB_LOCAL_PORT, self.local[1])
        return bytes(skb)

    # -- sk_psock_verdict_apply ----------------------------------------------------------------
    def sk_psock_verdict_apply(self, data: bytearray, verdict: int, redirect: Any,
                               cpu: int) -> SkPsock | None:
        """Apply a verdict; returns the psock whose backlog took the skb, if one did."""
        if verdict == SK_VERDICT_PASS:
            return self._ingress_self(data, cpu)
        if verdict == SK_VERDICT_REDIRECT:
            _, target, ingress = redirect
            return sk_psock_skb_redirect(self, getattr(target, "psock", None), data, bool(ingress),
                                         cpu)
        self.table.count(cpu, drops=1)
        return None

    def _ingress_self(self, data: bytearray, cpu: int) -> SkPsock | None:
        """SK_PASS: straight to ingress_msg, unless work is queued (the order must hold)."""
        with self.lock:
            if self.stopped:
                with self.table.lock:
                    self.table.leftover.setdefault(self.ino, MsgQueue()).append(data)
                self.lock.notify_all()
                return None
            if self.ingress_skb:
                self._queue(SkbEntry(data, True), cpu)
                return self
            self.ingress_msg.append(data)
            charge(self.machine, cpu, "sk_psock_ingress_msg")
            self.lock.notify_all()
        self.table.count(cpu, bytes=len(data))
        return None

    def _queue(self, entry: SkbEntry, cpu: int) -> None:
        """skb_queue_tail(&psock->ingress_skb) and the work scheduled (self.lock held)."""
        self.ingress_skb.append(entry)
        self.backlog_bytes += len(entry.data)
        self._schedule(cpu)

    def _backlog_done(self, nbytes: int) -> None:
        """``nbytes`` of ingress_skb delivered, sent or purged (self.lock held): wake the
        receive threads waiting for room."""
        self.backlog_bytes -= nbytes
        if self.backlog_waiters and self.backlog_bytes < BACKLOG_MAX_BYTES:
            self.lock.notify_all()

    def _schedule(self, cpu: int) -> None:
        """schedule_delayed_work(&psock->work, 0), with self.lock held: pending work keeps the
        CPU it was first queued on; a bound psock's work goes to its target CPU, else to its
        redirect CPU when one is set (sk_psock_schedule_delayed_work)."""
        if not self.work_pending:
            self.work_pending = True
            if self.target_cpu is not None:
                self.work_cpu = self.target_cpu
            elif self.redir_cpu != BPF_SK_REDIR_CPU_UNSET:
                self.work_cpu = self.redir_cpu
            else:
                self.work_cpu = cpu
        if self.worker is None or not self.worker.is_alive():
            self.worker = self._start(self._sk_psock_work, "work")
        self.lock.notify_all()

    # -- sk_psock_backlog and its worker ----------------------------------------------------------
    def _sk_psock_work(self, meter: BusyMeter) -> None:
        """The worker's loop: wait for the work to be scheduled, run sk_psock_backlog."""
        host_cpu = -1
        while True:
            with self.lock:
                if not self.work_pending and not self.stopped:
                    meter.flush()
                    self.lock.wait(POLL_S)
                if self.stopped and (self.closed or not self.ingress_skb):
                    return
                pending = self.work_pending or self.stopped  # stopped: drain what is queued
                cpu = self.work_cpu if self.work_cpu != NO_CPU else self.machine.current.cpu
                self.work_pending = False
            if not pending:
                self._check_alive()
                continue
            if self.table.host_cpu(cpu) != host_cpu:
                host_cpu = self.table.host_cpu(cpu)
                pin_thread(host_cpu)
            self.machine.set_cpu(cpu)
            meter.running_as(cpu)
            charge(self.machine, cpu, "kworker_wakeup")
            self.machine.rcu.note_context_switch(cpu)
            self.sk_psock_backlog(cpu)
            self.table.count(cpu, backlog_runs=1)

    def _charge_sent(self, cpu: int, frags: int) -> None:
        """skb_send_sock of ``frags`` page frags. Until 2025 __skb_send_sock
        made one sendmsg per frag, without MSG_MORE (a bvec of all of them, or MSG_MORE on
        all but the last, was proposed in June 2025 by Feng Yang: "what previously required
        multiple transmissions now only needs a single transmission"). So each frag is
        a sendmsg (lock_sock, tcp_sendmsg_locked splicing the page, no copy; release_sock)
        whose tcp_push sends it as an skb of its own: the loopback transmit, and the
        receiving socket's softirq, which loopback runs on this, the sending, CPU."""
        if frags:
            charge(self.machine, cpu, "skb_send_sock_frag", "tcp_sendmsg_skb",
                   "tcp_write_xmit_skb", "tcp_v4_rcv_skb", n=frags)

    def sk_psock_backlog(self, cpu: int) -> None:
        """Drain ingress_skb in order; keep the head and its offset on EAGAIN. A run of
        egress skbs at the head goes out in one sendmsg (the kernel sends skb by skb: the
        same bytes in the same order, with fewer trips through the interpreter's lock)."""
        moved = 0
        stalled_since = None
        while True:
            with self.lock:
                if not self.ingress_skb or (self.stopped and self.closed):
                    break
                entry = self.ingress_skb[0]
                if entry.ingress:
                    if not self.stopped and self.ingress_msg.nbytes >= self._rcvbuf() > 0:
                        # sk_psock_skb_ingress: the socket's receive buffer is full: -EAGAIN,
                        # and the work retries a jiffy later
                        self.table.count(cpu, eagain_retries=1)
                        self.lock.wait(JIFFY_S)
                        continue
                    self.ingress_skb.popleft()
                    self._backlog_done(len(entry.data))
                    if self.stopped:
                        with self.table.lock:
                            self.table.leftover.setdefault(self.ino, MsgQueue()).append(
                                entry.data)
                    else:
                        self.ingress_msg.append(entry.data)
                        charge(self.machine, cpu, "sk_psock_ingress_msg")
                    self.lock.notify_all()
                    moved += len(entry.data)
                    continue
                if not self.tx_enabled:
                    self._purge()
                    break
                batch = self._egress_run()
            try:
                sent = self.sock.sendmsg([memoryview(e.data)[e.off:] for e in batch], (),
                                         SEND_FLAGS)
            except BlockingIOError:
                self.table.count(cpu, eagain_retries=1)
                now = time.monotonic()
                stalled_since = stalled_since or now
                if self.stopped and now - stalled_since > DRAIN_GIVE_UP_S:
                    with self.lock:
                        self._purge()
                    break
                if not self.ref.alive() and not self.stopped:
                    break  # the socket is going: the close path purges
                wait_writable(self.fd, JIFFY_S)  # sk_psock_write_space or the 1-jiffy retry
                continue
            except OSError as exc:  # sk_psock_report_error; TX_ENABLED cleared
                with self.lock:
                    self.tx_enabled = False
                    self.rx_error = self.rx_error or exc.errno or errno.EPIPE
                    self._purge()
                break
            stalled_since = None
            moved += sent
            with self.lock:
                frags = self._advance(batch, sent)
            self._charge_sent(cpu, frags)
        if moved:
            self.table.count(cpu, bytes=moved)

    def _egress_run(self) -> list[SkbEntry]:
        """The egress skbs at the head of ingress_skb, up to the next ingress one or a batch's
        bound (self.lock held)."""
        batch: list[SkbEntry] = []
        size = 0
        for entry in self.ingress_skb:
            if entry.ingress or len(batch) == SEND_BATCH_SKBS or size >= SEND_BATCH_BYTES:
                break
            batch.append(entry)
            size += len(entry.data) - entry.off
        return batch

    def _advance(self, batch: list[SkbEntry], sent: int) -> int:
        """``sent`` bytes of ``batch`` went out: move the offsets on and unlink finished skbs
        (self.lock held; a purge meanwhile has unlinked them already). Returns how many
        page frags (SKB_FRAG each, from the skb's start) the bytes sent touched: the
        kernel's sendmsg calls for them."""
        frags = 0
        for entry in batch:
            if not self.ingress_skb or self.ingress_skb[0] is not entry:
                break
            step = min(sent, len(entry.data) - entry.off)
            if step:
                frags += -(-(entry.off + step) // SKB_FRAG) - entry.off // SKB_FRAG
            entry.off += step
            sent -= step
            self._backlog_done(step)
            if entry.off < len(entry.data):
                break
            self.ingress_skb.popleft()
            self.table.recycle(entry.data)
        return frags


def sk_psock_init(table: PsockTable, ref: Any) -> SkPsock:
    """The socket's psock, made on its first insertion into a map, and in ``table``."""
    psock = SkPsock(table, ref)
    table.register(psock)
    return psock


def sk_psock_map_verd(verdict: int, redir: bool) -> int:
    if verdict == SK_PASS:
        return SK_VERDICT_REDIRECT if redir else SK_VERDICT_PASS
    return SK_VERDICT_DROP


def sk_psock_skb_redirect(source: SkPsock, target: SkPsock | None, data: bytearray,
                          ingress: bool, cpu: int) -> SkPsock | None:
    """Queue on the target's ingress_skb and schedule its work (returns the target); a
    target without a psock or with transmission stopped drops the skb. The target takes the
    source's redirect CPU."""
    if target is None:
        return None
    charge(target.machine, cpu, "sk_psock_skb_redirect")
    target.redir_cpu = source.redir_cpu
    with target.lock:
        if not target.stopped and target.tx_enabled:
            target._queue(SkbEntry(data, ingress), cpu)
            return target
    target.table.count(cpu, drops=1)
    return None


def build_sk_msg(psock: SkPsock, data: bytearray) -> CtxRegion:
    """struct sk_msg_md of a message being sent on ``psock``'s socket."""
    md = bytearray(SK_MSG_MD_SIZE)
    struct.pack_into("<I", md, SK_MSG_FAMILY, int(psock.family))
    struct.pack_into("<I", md, SK_MSG_SIZE, len(data))
    base = PACKET_REGION << 32
    return CtxRegion("sk_msg_md", md, {SK_MSG_DATA: base, SK_MSG_DATA_END: base | len(data)})


def _s32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value & 0x8000_0000 else value


def sock_error(psock: SkPsock) -> KernelError | None:
    if psock.rx_error:
        return KernelError(psock.rx_error, f"the socket's psock stopped: "
                                           f"{os.strerror(psock.rx_error)}")
    return None
