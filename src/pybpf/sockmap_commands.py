"""The System commands for sockets in sockmaps (net/core/sock_map.c, net/core/skmsg.c,
net/ipv4/tcp_bpf.c): attaching SK_SKB and SK_MSG programs to a map, and an application's
reads and writes of sockets that may be in one. Part of ``System`` (system.py), with its
rules: arguments normalised here (``pybpf.attrs``), backends only translate, failures turned
into ``BPFError`` by ``System._fail``.
"""

from __future__ import annotations

import abc
import socket
from typing import Any

from .attrs import bytes_arg, fd_arg, sock_fd_arg, timeout_arg, unsigned
from .errors import KernelError


class SockmapCommands(abc.ABC):
    """prog_attach, prog_detach, sock_recv and sock_send, and what a backend translates."""

    _fail: Any  # System's error boundary
    _map_fail: Any

    def prog_attach(self, prog_fd: int, target_fd: int, attach_type: int,
                    attach_flags: int = 0, replace_prog_fd: int = 0) -> None:
        """BPF_PROG_ATTACH of ``prog_fd`` to ``target_fd`` as ``attach_type`` (SK_SKB and
        SK_MSG programs: ``target_fd`` is a SOCKMAP or SOCKHASH fd; sockets inserted after
        the attach take the program)."""
        try:
            self._prog_attach(fd_arg(prog_fd), fd_arg(target_fd),
                              unsigned(attach_type, 32, "attach_type"),
                              unsigned(attach_flags, 32, "attach_flags"),
                              unsigned(replace_prog_fd, 32, "replace_prog_fd"))
        except KernelError as exc:
            raise self._map_fail(exc, "prog_attach", target_fd) from None

    def prog_detach(self, target_fd: int, attach_type: int, prog_fd: int = 0) -> None:
        """BPF_PROG_DETACH of ``prog_fd`` (attached as ``attach_type``) from ``target_fd``."""
        try:
            self._prog_detach(fd_arg(target_fd), unsigned(attach_type, 32, "attach_type"),
                              unsigned(prog_fd, 32, "prog_fd"))
        except KernelError as exc:
            raise self._map_fail(exc, "prog_detach", target_fd) from None

    def sock_recv(self, sock: int | socket.socket, bufsize: int, *,
                  timeout: float | None = None) -> bytes:
        """Read up to ``bufsize`` bytes from a socket as its application does (recvmsg):
        for a socket in a sockmap with a psock, what the psock delivered to it (data passed
        by its verdict, or redirected to its ingress) before the socket's own queue, as
        tcp_bpf_recvmsg reads. b"" at end of stream; ``timeout`` seconds at most (None:
        block; 0: EAGAIN when nothing is there)."""
        try:
            return self._sock_recv(sock_fd_arg(sock), unsigned(bufsize, 31, "bufsize"),
                                   timeout_arg(timeout))
        except KernelError as exc:
            raise self._fail(exc, "sock_recv", f"socket fd {sock!r}") from None

    def sock_send(self, sock: int | socket.socket, data: bytes, *,
                  timeout: float | None = None) -> int:
        """Send ``data`` on a socket as its application does (sendmsg): for a socket in a
        sockmap with an SK_MSG verdict program, the program sees each message first
        (tcp_bpf_sendmsg: pass, drop -> EACCES, or redirect). Returns the bytes taken."""
        try:
            return self._sock_send(sock_fd_arg(sock), bytes_arg(data, "data"),
                                   timeout_arg(timeout))
        except KernelError as exc:
            raise self._fail(exc, "sock_send", f"socket fd {sock!r}") from None

    # -- what a backend translates -----------------------------------------------------------
    @abc.abstractmethod
    def _prog_attach(self, prog_fd: int, target_fd: int, attach_type: int,
                     attach_flags: int, replace_prog_fd: int) -> None: ...

    @abc.abstractmethod
    def _prog_detach(self, target_fd: int, attach_type: int, prog_fd: int) -> None: ...

    @abc.abstractmethod
    def _sock_recv(self, fd: int, bufsize: int, timeout: float | None) -> bytes: ...

    @abc.abstractmethod
    def _sock_send(self, fd: int, data: bytes, timeout: float | None) -> int: ...
