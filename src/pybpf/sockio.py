"""Plain socket I/O on an fd with a timeout, as recvmsg/sendmsg give it (both backends use it:
the kernel backend for every socket, the emulated one for sockets without a psock)."""

from __future__ import annotations

import errno
import os
import select
from collections.abc import Callable
from typing import Any

from .errors import KernelError


def _wait(fd: int, events: int, timeout: float | None) -> None:
    """Wait until ``fd`` has ``events`` (or an error or hang-up); EAGAIN after ``timeout``."""
    poller = select.poll()
    poller.register(fd, events)
    ms = None if timeout is None else int(timeout * 1000)
    if not poller.poll(ms):
        raise KernelError(errno.EAGAIN, f"nothing within {timeout} s")


def recv(fd: int, bufsize: int, timeout: float | None) -> bytes:
    """Up to ``bufsize`` bytes from socket ``fd`` (b"" at end of stream)."""
    return _when_ready(fd, select.POLLIN, timeout, os.read, bufsize)


def send(fd: int, data: bytes, timeout: float | None) -> int:
    """Write as much of ``data`` as socket ``fd`` takes in one call; the count taken."""
    return _when_ready(fd, select.POLLOUT, timeout, os.write, data)


def _when_ready(fd: int, events: int, timeout: float | None, io: Callable[[int, Any], Any],
                arg: Any) -> Any:
    """``io(fd, arg)`` once ``fd`` has ``events``; an OSError as the KernelError of its errno."""
    try:
        _wait(fd, events, timeout)
        return io(fd, arg)
    except OSError as exc:
        raise KernelError(exc.errno or errno.EIO, exc.strerror or "") from None
