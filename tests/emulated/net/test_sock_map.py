"""SOCKMAP and SOCKHASH on the emulated backend: sockets are this process's fds; a map drops
a socket once its fd no longer holds it."""

from __future__ import annotations

import errno
import socket
import struct

import pytest

from helpers import u32
from pybpf.system import iter_keys
from pybpf.uapi import MapType


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    yield a, b
    a.close()
    b.close()


def test_lookup_returns_the_socket_cookie(emulated, pair):
    fd = emulated.map_create(MapType.SOCKHASH, 4, 8, 4)
    emulated.map_update_elem(fd, u32(7), pair[0].fileno().to_bytes(8, "little"))
    cookie = struct.unpack("=Q", pair[0].getsockopt(socket.SOL_SOCKET, 57, 8))[0]
    assert emulated.map_lookup_elem(fd, u32(7)) == cookie.to_bytes(8, "little")


def test_the_map_does_not_keep_a_socket_open(emulated, pair):
    fd = emulated.map_create(MapType.SOCKMAP, 4, 8, 2)
    emulated.map_update_elem(fd, u32(0), pair[0].fileno().to_bytes(8, "little"))
    pair[0].close()
    assert pair[1].recv(1, socket.MSG_DONTWAIT) == b""  # the peer sees the close


def test_closed_sockets_leave_the_hash_iteration(emulated):
    fd = emulated.map_create(MapType.SOCKHASH, 4, 8, 8)
    socks = [socket.socketpair() for _ in range(3)]
    try:
        for i, (a, _b) in enumerate(socks):
            emulated.map_update_elem(fd, u32(i), a.fileno().to_bytes(8, "little"))
        socks[1][0].close()
        assert sorted(iter_keys(emulated, fd)) == [u32(0), u32(2)]
    finally:
        for a, b in socks:
            a.close()
            b.close()


def test_a_reused_fd_number_is_not_the_same_socket(emulated, no_gc):
    fd = emulated.map_create(MapType.SOCKMAP, 4, 8, 2)
    first = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    first.bind(("127.0.0.1", 0))
    number = first.fileno()
    emulated.map_update_elem(fd, u32(0), number.to_bytes(8, "little"))
    first.close()
    second = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        assert second.fileno() == number
        with pytest.raises(OSError) as info:
            emulated.map_lookup_elem(fd, u32(0))
        assert info.value.errno == errno.ENOENT
    finally:
        second.close()
