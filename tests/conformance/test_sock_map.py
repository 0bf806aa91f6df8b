"""Conformance of SOCKMAP and SOCKHASH (net/core/sock_map.c), on both backends.

Each test pins one kernel rule and runs against the real kernel (the oracle) and the emulated
backend through the ``backend`` fixture; differential tests (``kmaps`` and ``emaps``
together) compare orders and hash-dependent results that no simple expectation captures.
"""

from __future__ import annotations

import errno
import os
import socket
import struct

import pytest

from helpers import err_of, u32
from pybpf.asm import FP, R0, R1, R2, R3, R4, assemble, encode
from pybpf.asm import builder as b
from pybpf.system import iter_keys
from pybpf.uapi import (
    BPF_ANY,
    BPF_EXIST,
    BPF_F_NO_PREALLOC,
    BPF_F_RDONLY_PROG,
    BPF_NOEXIST,
    ENOTSUPP,
    MapType,
    ProgType,
)


@pytest.fixture
def sockets():
    """Sockets of every kind the sockmap rules look at; closed after the test."""
    made = []

    def make(kind: str):
        if kind == "tcp-established":
            lst = socket.create_server(("127.0.0.1", 0))
            cli = socket.create_connection(lst.getsockname())
            srv, _ = lst.accept()
            made.extend([lst, cli, srv])
            return cli
        if kind == "tcp-listen":
            sock = socket.create_server(("127.0.0.1", 0))
        elif kind == "tcp-unconnected":
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        elif kind == "tcp6-listen":
            sock = socket.create_server(("::1", 0), family=socket.AF_INET6)
        elif kind == "udp":
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            sock.bind(("127.0.0.1", 0))
        elif kind == "udp-unbound":
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        elif kind == "udplite":
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, 136)
        elif kind == "unix-stream-pair":
            sock, other = socket.socketpair()
            made.append(other)
        elif kind == "unix-stream-unconnected":
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        elif kind == "unix-stream-listen":
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.bind(f"\0pybpf-test-{os.getpid()}-{len(made)}")
            sock.listen()
        elif kind == "unix-dgram":
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        elif kind == "unix-seqpacket-pair":
            sock, other = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            made.append(other)
        elif kind == "netlink":
            sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)
        elif kind == "raw-icmp":
            try:
                sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
            except PermissionError:
                pytest.skip("a raw socket needs CAP_NET_RAW, which this process lacks")
        else:
            raise ValueError(kind)
        made.append(sock)
        return sock

    yield make
    for sock in made:
        sock.close()


def cookie(sock: socket.socket) -> bytes:
    return sock.getsockopt(socket.SOL_SOCKET, 57, 8)


def sockval(fd: int, size: int = 8) -> bytes:
    return fd.to_bytes(size, "little")


@pytest.mark.parametrize("map_type, key_size, value_size, max_entries, flags, want", [
    (MapType.SOCKMAP, 4, 8, 0, 0, errno.EINVAL),
    (MapType.SOCKMAP, 8, 8, 1, 0, errno.EINVAL),
    (MapType.SOCKMAP, 4, 6, 1, 0, errno.EINVAL),
    (MapType.SOCKMAP, 4, 8, 1, BPF_F_RDONLY_PROG, errno.EINVAL),
    (MapType.SOCKHASH, 0, 8, 1, 0, errno.EINVAL),
    (MapType.SOCKHASH, 513, 8, 1, 0, errno.E2BIG),
    (MapType.SOCKHASH, 4, 8, 1, BPF_F_NO_PREALLOC, errno.EINVAL),
])
def test_sockmap_create_rejects_bad_attributes(maps, map_type, key_size, value_size,
                                               max_entries, flags, want):
    assert maps.create_errno(map_type, key_size, value_size, max_entries,
                             map_flags=flags) == want


@pytest.mark.parametrize("kind, want", [
    ("tcp-established", 0), ("tcp-listen", 0), ("tcp6-listen", 0), ("udp", 0),
    ("unix-stream-pair", 0), ("unix-dgram", 0), ("tcp-unconnected", errno.EOPNOTSUPP),
    ("udp-unbound", errno.EOPNOTSUPP), ("udplite", errno.EOPNOTSUPP),
    ("unix-stream-unconnected", errno.EOPNOTSUPP), ("unix-stream-listen", errno.EOPNOTSUPP),
    ("unix-seqpacket-pair", errno.EOPNOTSUPP), ("raw-icmp", errno.EOPNOTSUPP),
    ("netlink", errno.EOPNOTSUPP),
])
@pytest.mark.parametrize("map_type", [MapType.SOCKMAP, MapType.SOCKHASH])
def test_sockmap_accepts_only_supported_sockets_in_allowed_states(maps, sockets, map_type,
                                                                  kind, want):
    sys = maps.sys
    fd = maps.create(map_type, 4, 8, 4)
    sock = sockets(kind)
    if want:
        assert err_of(sys.map_update_elem, fd, u32(0), sockval(sock.fileno())) == want
    else:
        sys.map_update_elem(fd, u32(0), sockval(sock.fileno()))
        assert sys.map_lookup_elem(fd, u32(0)) == cookie(sock)


@pytest.mark.parametrize("map_type", [MapType.SOCKMAP, MapType.SOCKHASH])
def test_sockmap_update_fd_errors(maps, map_type):
    sys = maps.sys
    fd = maps.create(map_type, 4, 8, 4)
    read_end, write_end = os.pipe()
    try:
        assert err_of(sys.map_update_elem, fd, u32(0), sockval(read_end)) == errno.ENOTSOCK
    finally:
        os.close(read_end)
        os.close(write_end)
    closed = os.open("/dev/null", os.O_RDONLY)
    os.close(closed)
    assert err_of(sys.map_update_elem, fd, u32(0), sockval(closed)) == errno.EBADF
    assert err_of(sys.map_update_elem, fd, u32(0), sockval(2**31)) == errno.EINVAL


def test_sockmap_update_flags_range_and_delete(maps, sockets):
    sys = maps.sys
    fd = maps.create(MapType.SOCKMAP, 4, 8, 2)
    sock = sockets("udp").fileno()
    assert err_of(sys.map_update_elem, fd, u32(0), sockval(sock), 3) == errno.EINVAL
    assert err_of(sys.map_update_elem, fd, u32(2), sockval(sock)) == errno.E2BIG
    assert err_of(sys.map_update_elem, fd, u32(0), sockval(sock), BPF_EXIST) == errno.ENOENT
    sys.map_update_elem(fd, u32(0), sockval(sock), BPF_NOEXIST)
    assert err_of(sys.map_update_elem, fd, u32(0), sockval(sock), BPF_NOEXIST) == errno.EEXIST
    sys.map_update_elem(fd, u32(0), sockval(sock), BPF_EXIST)
    assert err_of(sys.map_delete_elem, fd, u32(1)) == errno.EINVAL  # empty slot
    assert err_of(sys.map_delete_elem, fd, u32(2)) == errno.EINVAL
    sys.map_delete_elem(fd, u32(0))
    assert err_of(sys.map_lookup_elem, fd, u32(0)) == errno.ENOENT
    assert list(iter_keys(sys, fd)) == [u32(0), u32(1)]
    assert err_of(sys.map_lookup_and_delete_elem, fd, u32(0)) == ENOTSUPP


@pytest.mark.parametrize("map_type", [MapType.SOCKMAP, MapType.SOCKHASH])
def test_sockmap_lookup_with_4_byte_values_gives_enospc(maps, sockets, map_type):
    sys = maps.sys
    fd = maps.create(map_type, 4, 4, 2)
    sys.map_update_elem(fd, u32(0), sockval(sockets("udp").fileno(), 4))
    assert err_of(sys.map_lookup_elem, fd, u32(0)) == errno.ENOSPC
    assert err_of(sys.map_lookup_elem, fd, u32(1)) == errno.ENOSPC


@pytest.mark.parametrize("map_type", [MapType.SOCKMAP, MapType.SOCKHASH])
def test_closing_a_socket_removes_it_from_the_map(maps, map_type):
    sys = maps.sys
    fd = maps.create(map_type, 4, 8, 2)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sys.map_update_elem(fd, u32(1), sockval(sock.fileno()))
    sock.close()
    assert err_of(sys.map_lookup_elem, fd, u32(1)) == errno.ENOENT


def test_sockhash_capacity_and_delete(maps, sockets):
    sys = maps.sys
    fd = maps.create(MapType.SOCKHASH, 4, 8, 2)
    sock = sockets("udp").fileno()
    sys.map_update_elem(fd, u32(10), sockval(sock))
    sys.map_update_elem(fd, u32(11), sockval(sock))
    assert err_of(sys.map_update_elem, fd, u32(12), sockval(sock)) == errno.E2BIG
    sys.map_update_elem(fd, u32(11), sockval(sock))  # replacing works when full
    assert err_of(sys.map_delete_elem, fd, u32(12)) == errno.ENOENT
    sys.map_delete_elem(fd, u32(11))
    assert list(iter_keys(sys, fd)) == [u32(10)]


def test_sockhash_iteration_order_matches_the_kernel(kmaps, emaps, sockets):
    sock = sockets("udp").fileno()
    walks = []
    for m in (kmaps, emaps):
        fd = m.create(MapType.SOCKHASH, 6, 8, 16)
        for i in range(12):
            m.sys.map_update_elem(fd, struct.pack("<HI", i, i * 7919), sockval(sock))
        m.sys.map_update_elem(fd, struct.pack("<HI", 3, 3 * 7919), sockval(sock))
        walks.append(list(iter_keys(m.sys, fd)))
    assert walks[1] == walks[0]


SKB_SK = 168  # offsetof(struct __sk_buff, sk)
ETH_FRAME = bytes.fromhex("ffffffffffff" "020000000001" "0800") + bytes(range(50))


@pytest.mark.parametrize("prog_type", [ProgType.SCHED_CLS, ProgType.SCHED_ACT,
                                       ProgType.SOCKET_FILTER],
                         ids=lambda t: ProgType(t).name)
@pytest.mark.parametrize("map_type", [MapType.SOCKMAP, MapType.SOCKHASH],
                         ids=lambda t: MapType(t).name)
def test_program_updates_a_sockmap_with_the_test_runs_socket(sys, map_type, prog_type):
    """selftests verifier_sockmap_mutate: bpf_map_update_elem(map, &key, skb->sk, BPF_ANY)
    takes the socket pointer itself as the value (resolve_map_arg_type), and at run time
    sock_map_update_elem refuses the test run's dummy socket (no protocol a sockmap takes:
    sock_map_sk_is_suitable) with EOPNOTSUPP; the program returns the helper's result."""
    fd = sys.map_create(map_type, 4, 8, 1)
    prog = None
    try:
        items = [b.ldx(8, R3, R1, SKB_SK), b.mov64(R0, 1), b.jeq(R3, 0, "out"),
                 b.st(4, FP, -4, 0), b.ld_map_fd(R1, "m"), b.mov64(R2, FP), b.add64(R2, -4),
                 b.mov64(R4, BPF_ANY), b.call("map_update_elem"), b.label("out"), b.exit_()]
        insns = assemble(items).with_map_fds(lambda name: fd)
        prog = sys.prog_load(prog_type, encode(insns))
        assert sys.prog_test_run(prog, ETH_FRAME).retval == -errno.EOPNOTSUPP & 0xFFFF_FFFF
        assert err_of(sys.map_lookup_elem, fd, u32(0)) == errno.ENOENT  # nothing stored
    finally:
        if prog is not None:
            sys.close(prog)
        sys.close(fd)
