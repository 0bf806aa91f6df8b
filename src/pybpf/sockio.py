"""Plain socket I/O on an fd with a timeout, as recvmsg/sendmsg give it (both backends use it:
the kernel backend for every socket, the emulated one for sockets without a psock).

Reads and writes are non-blocking after a poll, so the timeout holds even where poll and
recvmsg disagree: a kernel socket whose sockmap verdict holds data that arrived before its
insertion polls readable, but tcp_bpf_recvmsg_parser has nothing to give it."""

from __future__ import annotations

import errno
import select
import socket
import time

from .errors import KernelError

SPURIOUS_WAKE_S = 0.001  # readable by poll, nothing to read: look again a little later


def _wait(fd: int, events: int, deadline: float | None, timeout: float | None) -> None:
    """Wait until ``fd`` has ``events`` (or an error or hang-up); EAGAIN after the deadline."""
    poller = select.poll()
    poller.register(fd, events)
    left = None if deadline is None else max(0.0, deadline - time.monotonic())
    if not poller.poll(None if left is None else int(left * 1000)):
        raise KernelError(errno.EAGAIN, f"nothing within {timeout} s")


def _io(fd: int, events: int, timeout: float | None, op) -> object:
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        sock = socket.socket(fileno=fd)
    except OSError as exc:
        raise KernelError(exc.errno or errno.ENOTSOCK, f"fd {fd}: {exc.strerror}") from None
    try:
        while True:
            _wait(fd, events, deadline, timeout)
            try:
                return op(sock)
            except BlockingIOError:
                if deadline is not None and time.monotonic() >= deadline:
                    raise KernelError(errno.EAGAIN, f"nothing within {timeout} s") from None
                time.sleep(SPURIOUS_WAKE_S)
            except OSError as exc:
                raise KernelError(exc.errno or errno.EIO, exc.strerror or "") from None
    finally:
        sock.detach()


def recv(fd: int, bufsize: int, timeout: float | None) -> bytes:
    """Up to ``bufsize`` bytes from socket ``fd`` (b"" at end of stream)."""
    return _io(fd, select.POLLIN, timeout,
               lambda sock: sock.recv(bufsize, socket.MSG_DONTWAIT))  # type: ignore[return-value]


def send(fd: int, data: bytes | memoryview, timeout: float | None) -> int:
    """Write as much of ``data`` as socket ``fd`` takes in one call; the count taken."""
    return _io(fd, select.POLLOUT, timeout, lambda sock: sock.send(
        data, socket.MSG_DONTWAIT | socket.MSG_NOSIGNAL))  # type: ignore[return-value]
