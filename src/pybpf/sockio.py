"""Plain socket I/O on an fd with a timeout, as recvmsg/sendmsg give it (both backends use it:
the kernel backend for every socket, the emulated one for sockets without a psock).

The calls never block past ``timeout``: each waits with poll, then reads or writes with
MSG_DONTWAIT, and waits again when readiness was taken away in between (a psock's verdict may
take the bytes poll saw, and a timeout of 0 must answer EAGAIN, never wait)."""

from __future__ import annotations

import errno
import select
import socket
import time
from collections.abc import Callable
from typing import Any

from .errors import KernelError


def recv(fd: int, bufsize: int, timeout: float | None) -> bytes:
    """Up to ``bufsize`` bytes from socket ``fd`` (b"" at end of stream)."""
    return _when_ready(fd, select.POLLIN, timeout,
                       lambda sock: sock.recv(bufsize, socket.MSG_DONTWAIT))


def send(fd: int, data: bytes, timeout: float | None) -> int:
    """Write as much of ``data`` as socket ``fd`` takes in one call; the count taken."""
    return _when_ready(fd, select.POLLOUT, timeout,
                       lambda sock: sock.send(data, socket.MSG_DONTWAIT | socket.MSG_NOSIGNAL))


def _when_ready(fd: int, events: int, timeout: float | None,
                io: Callable[[socket.socket], Any]) -> Any:
    """``io`` on ``fd`` once it has ``events``; EAGAIN after ``timeout`` seconds; an OSError
    as the KernelError of its errno."""
    deadline = None if timeout is None else time.monotonic() + timeout
    poller = select.poll()
    poller.register(fd, events)
    try:
        sock = socket.socket(fileno=fd)  # the caller's fd, not a copy: detached below
    except OSError as exc:
        raise KernelError(exc.errno or errno.EIO, exc.strerror or "") from None
    try:
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready = poller.poll(None if left is None else int(left * 1000))
            if ready:
                try:
                    return io(sock)
                except BlockingIOError:
                    pass  # taken by someone else since poll said ready: wait again
            if left is not None and time.monotonic() >= deadline:
                raise KernelError(errno.EAGAIN, f"nothing within {timeout} s")
    except OSError as exc:
        raise KernelError(exc.errno or errno.EIO, exc.strerror or "") from None
    finally:
        sock.detach()
