"""recvmsg and sendmsg of a socket with a psock (net/ipv4/tcp_bpf.c), on real host sockets.

Rules this module keeps:
- ``tcp_bpf_recvmsg``: what the psock's ``ingress_msg`` holds comes first (data its verdict
  passed, or other sockets redirected to its ingress, in order). With a verdict program
  (tcp_bpf_recvmsg_parser) that is all: the call waits for ``ingress_msg``; data queued on
  the socket before insertion is never returned as it is, but the call sends it through the
  verdict (as measured on 6.18: a recvmsg that finds nothing does); b"" once the peer's FIN
  has been read and nothing is left. Without one (a psock with an SK_MSG program only, say),
  an empty ``ingress_msg`` lets the socket's own queue be read, as tcp_recvmsg would. What a
  dropped psock's ``ingress_msg`` still held is read before the socket's queue.
- ``tcp_bpf_sendmsg``: with an SK_MSG verdict program, each message (up to an sk_msg's
  MAX_MSG_FRAGS pages) goes through the program: SK_PASS sends it on the socket; a redirect
  (bpf_msg_redirect_map/hash) sends it on the target socket (egress) or puts it on the
  target psock's ``ingress_msg`` (BPF_F_INGRESS); anything else drops it: EACCES when
  nothing was sent yet, else the count sent so far. Without one, a plain send.
"""

from __future__ import annotations

import errno
import os
import select
import socket
import time
from typing import Any

from ... import sockio
from ...errors import KernelError
from ...uapi import SK_PASS
from .skmsg import MSG_MAX, PsockTable, SkPsock, build_sk_msg, sock_error, socket_rx_queued

WAIT_SLICE_S = 0.01  # a reader of both the socket and ingress_msg looks at each this often


def _remaining(deadline: float | None) -> float | None:
    return None if deadline is None else max(0.0, deadline - time.monotonic())


def tcp_bpf_recvmsg(table: PsockTable, fd: int, bufsize: int, timeout: float | None) -> bytes:
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        psock = table.lookup_fd(fd)
        leftover = table.leftover
        if leftover:
            with table.lock:
                ino = _ino(fd)
                queue = leftover.get(ino)
                if queue:
                    data = queue.take(bufsize)
                    if not queue:
                        del leftover[ino]
                    return data
        if psock is None:
            return sockio.recv(fd, bufsize, timeout)
        if psock.running():
            psock.armed = True  # a recvmsg runs what waits in the queue through the verdict
        with psock.lock:
            if psock.ingress_msg:
                return psock.ingress_msg.take(bufsize)
            if psock.stopped:  # dropped since the lookup: its leftover comes first
                continue
            error = sock_error(psock)
            if error is not None and not psock.running():
                raise error
            if psock.running() and not psock.stopped:
                if psock.rx_eof:
                    return b""
                left = _remaining(deadline)
                if left == 0:
                    raise KernelError(errno.EAGAIN, f"nothing within {timeout} s")
                psock.lock.wait(left if left is not None else WAIT_SLICE_S * 10)
                continue
        data = _recv_own_queue(psock, fd, bufsize, deadline)
        if data is not None:
            return data
        if _remaining(deadline) == 0:
            raise KernelError(errno.EAGAIN, f"nothing within {timeout} s")


def _recv_own_queue(psock: SkPsock, fd: int, bufsize: int,
                    deadline: float | None) -> bytes | None:
    """The socket's own queue while the receive thread leaves it alone; None: nothing came
    within a slice (look at ingress_msg again)."""
    left = _remaining(deadline)
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    if not poller.poll(1000 * (WAIT_SLICE_S if left is None else min(left, WAIT_SLICE_S))):
        return None
    with psock.rx_lock:
        if psock.running() and not psock.stopped:
            return None  # data_ready fired meanwhile: the receive thread has it
        if psock.ingress_msg or psock.stopped:
            return None  # the receive thread's last skb stayed this socket's, or the psock
            # went with it as leftover: that comes before what the socket holds now
        try:
            data = sockio.recv(fd, bufsize, 0)
        except KernelError as exc:
            if exc.errno == errno.EAGAIN:
                return None
            raise
        psock.rx_seen = socket_rx_queued(fd)
    return data


def _ino(fd: int) -> int:
    try:
        return os.fstat(fd).st_ino
    except OSError:
        return -1


def tcp_bpf_sendmsg(table: PsockTable, fd: int, data: bytes, timeout: float | None) -> int:
    psock = table.lookup_fd(fd)
    prog = None if psock is None else psock.progs.msg_parser
    # Only TCP's proto runs SK_MSG verdicts (tcp_bpf_sendmsg); unix and UDP sockets in a
    # sockmap send as usual.
    if prog is None or psock.family not in (socket.AF_INET, socket.AF_INET6):
        return sockio.send(fd, data, timeout)
    deadline = None if timeout is None else time.monotonic() + timeout
    sent = 0
    for start in range(0, max(len(data), 1), MSG_MAX):
        message = bytearray(data[start:start + MSG_MAX])
        retval, redirect = psock._run(prog, build_sk_msg(psock, message), message)
        table.count(psock.machine.current.cpu, verdicts=1)
        if retval & 0xFFFFFFFF != SK_PASS:
            redirect = False
        if redirect is False:
            table.count(psock.machine.current.cpu, drops=1)
            if sent:
                return sent
            raise KernelError(errno.EACCES, "the SK_MSG verdict program dropped the message")
        if redirect is None:
            _send_all(fd, bytes(message), deadline)
        else:
            _, target, ingress = redirect
            _msg_redirect(target, bytes(message), bool(ingress), deadline)
        sent += len(message)
    return sent


def _msg_redirect(target: Any, message: bytes, ingress: bool, deadline: float | None) -> None:
    """tcp_bpf_sendmsg_redir: bpf_tcp_ingress or tcp_bpf_push on the target socket."""
    psock = getattr(target, "psock", None)
    if psock is None or psock.stopped:
        raise KernelError(errno.EPIPE, "the redirect target has no psock")
    if ingress:
        with psock.lock:
            psock.ingress_msg.append(message)
            psock.lock.notify_all()
        psock.table.count(psock.machine.current.cpu, bytes=len(message))
        return
    _send_all(target.fd, message, deadline)
    psock.table.count(psock.machine.current.cpu, bytes=len(message))


def _send_all(fd: int, message: bytes, deadline: float | None) -> None:
    view = memoryview(message)
    while view:
        n = sockio.send(fd, view, _remaining(deadline))
        view = view[n:]
