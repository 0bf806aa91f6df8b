"""The psock's backlog work (net/core/skmsg.c's sk_psock_backlog and the kworker that runs
it), a part of ``SkPsock`` (emulated/skmsg.py).

Rules this module keeps:
- The work runs in the psock's worker thread, on the CPU it was queued for (the target CPU
  of a bound psock, else the CPU that queued it), pinned to the host CPU standing for it.
- ``ingress_skb`` drains in order: an ingress entry goes to ``ingress_msg`` (while that holds
  the socket's receive buffer: -EAGAIN and a retry a jiffy later); a run of egress entries
  goes out in one non-blocking sendmsg, and on EAGAIN the entries and the offset reached
  stay at the head until write space comes (at most a jiffy): nothing is lost or sent twice.
- A hard send error stops transmission (TX_ENABLED cleared) and drops what is queued; a
  stopped psock still sends what it holds, giving up after ``DRAIN_GIVE_UP_S`` without
  progress.
"""

from __future__ import annotations

import errno
import time
from typing import Any

from .psock import (
    DRAIN_GIVE_UP_S,
    JIFFY_S,
    NO_CPU,
    POLL_S,
    SEND_BATCH_BYTES,
    SEND_BATCH_SKBS,
    SEND_FLAGS,
    SKB_FRAG,
    BusyMeter,
    MsgQueue,
    SkbEntry,
    charge,
    pin_thread,
    wait_writable,
)


class SkPsockBacklog:
    """sk_psock_backlog and its worker: the methods ``SkPsock`` takes from here (they use its
    queues, lock and socket)."""

    table: Any
    machine: Any
    lock: Any
    sock: Any
    fd: int
    ref: Any
    ino: int

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
            self.sk_psock_backlog(cpu)
            self.table.count(cpu, backlog_runs=1)

    def _charge_sent(self, cpu: int, nbytes: int, nskbs: int) -> None:
        """skb_send_sock of ``nskbs`` skbs, ``nbytes`` in all: tcp_sendmsg_locked splicing
        their page frags (no copy), the transmit through loopback, and the receiving socket's
        softirq, which loopback runs on this, the sending, CPU."""
        charge(self.machine, cpu, "tcp_sendmsg_skb", "tcp_write_xmit_skb", "tcp_v4_rcv_skb",
                n=nskbs)
        charge(self.machine, cpu, "skb_send_sock_frag", n=-(-nbytes // SKB_FRAG))

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
                finished = self._advance(batch, sent)
            self._charge_sent(cpu, sent, finished)
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
        skbs it finished."""
        finished = 0
        for entry in batch:
            if not self.ingress_skb or self.ingress_skb[0] is not entry:
                break
            step = min(sent, len(entry.data) - entry.off)
            entry.off += step
            sent -= step
            self._backlog_done(step)
            if entry.off < len(entry.data):
                break
            self.ingress_skb.popleft()
            self.table.recycle(entry.data)
            finished += 1
        return finished
