"""The sockmap data path, on both backends: sockets on loopback, a verdict program that
redirects, bytes checked by content (net/core/skmsg.c, net/ipv4/tcp_bpf.c; on the emulated
backend emulated/net/skmsg.py and tcp_bpf.py). The application reads and writes through
``sock_recv`` / ``sock_send``."""

from __future__ import annotations

import errno
import time

import pytest

from helpers import err_of, u32
from pybpf.asm import (
    FP,
    R0,
    R1,
    R2,
    R3,
    R4,
    R6,
    add64,
    assemble,
    call,
    encode,
    exit_,
    ld_map_fd,
    ldxw,
    mov64,
    stw,
    stxw,
)
from pybpf.uapi import BPF_F_INGRESS, SK_PASS, AttachType, MapType, ProgType
from sockmap_lab import (
    SKB_LEN_PARSER,
    Proxy,
    msg_verdict_insns,
    pattern,
    returning,
    tcp_pair,
)

SKB_REMOTE_PORT, SKB_LOCAL_PORT = 132, 136  # struct __sk_buff
MESSAGE = 1000  # the fixed-size parser's message length


@pytest.fixture
def proxies():
    made = []

    def make(sys, **kw) -> Proxy:
        proxy = Proxy(sys, **kw)
        made.append(proxy)
        return proxy

    yield make
    for proxy in made:
        proxy.close()


@pytest.mark.parametrize("map_type", [MapType.SOCKMAP, MapType.SOCKHASH], ids=["map", "hash"])
@pytest.mark.parametrize("mode", ["egress", "ingress"])
@pytest.mark.parametrize("parser", [None, "len", "fixed"])
@pytest.mark.parametrize("writes", ["large", "small"])
def test_redirect_moves_bytes_intact(backend, proxies, map_type, mode, parser, writes):
    code = {None: None, "len": SKB_LEN_PARSER, "fixed": returning(MESSAGE)}[parser]
    proxy = proxies(backend, map_type=map_type, mode=mode, parser=code)
    total, write_size = (2000 * MESSAGE, 256 << 10) if writes == "large" else (21 * MESSAGE, 7)
    data = pattern(total, seed=map_type)
    sender = proxy.send_in_thread(data, write_size)
    assert proxy.receive(total) == data
    sender.join(10)
    assert err_of(backend.sock_recv, proxy.c2, 1 << 16, timeout=0.05) == errno.EAGAIN


def test_data_queued_before_insertion_waits_for_new_data(backend, proxies):
    """iperf3's cookie trap: bytes that arrived before the socket entered the map wait, and
    go through the verdict with the next data."""
    proxy = proxies(backend, insert=False)
    proxy.c1.sendall(b"cookie")
    time.sleep(0.05)
    proxy.insert()
    assert err_of(backend.sock_recv, proxy.c2, 100, timeout=0.1) == errno.EAGAIN
    proxy.c1.sendall(b"+data")
    assert proxy.receive(11) == b"cookie+data"


def test_a_recv_on_the_socket_sends_queued_data_through_the_verdict(backend, proxies):
    """A recvmsg on the verdict's socket finds nothing to return, but what waited in its
    queue since before the insertion goes through the verdict then."""
    proxy = proxies(backend, insert=False)
    proxy.c1.sendall(b"cookie")
    time.sleep(0.05)
    proxy.insert()
    assert err_of(backend.sock_recv, proxy.p1, 100, timeout=0.1) == errno.EAGAIN
    assert proxy.receive(6) == b"cookie"


def test_sockets_inserted_before_the_attach_are_not_redirected(backend, proxies):
    proxy = proxies(backend, insert=False)
    backend.prog_detach(proxy.map, AttachType.SK_SKB_VERDICT, proxy.verdict)
    proxy.insert()
    backend.prog_attach(proxy.verdict, proxy.map, AttachType.SK_SKB_VERDICT)
    proxy.c1.sendall(b"plain")
    assert proxy.receive(5, sock=proxy.p1) == b"plain"
    assert err_of(backend.sock_recv, proxy.c2, 100, timeout=0.1) == errno.EAGAIN


@pytest.mark.parametrize("verdict", [0, 7], ids=["SK_DROP", "unknown"])
def test_a_verdict_other_than_pass_drops(backend, proxies, verdict):
    proxy = proxies(backend, verdict=returning(verdict))
    proxy.c1.sendall(b"x" * 5000)
    assert err_of(backend.sock_recv, proxy.p1, 100, timeout=0.1) == errno.EAGAIN
    assert err_of(backend.sock_recv, proxy.c2, 100, timeout=0.05) == errno.EAGAIN


def test_sk_pass_delivers_to_the_socket_itself(backend, proxies):
    proxy = proxies(backend, verdict=returning(1))
    data = pattern(300_000)
    sender = proxy.send_in_thread(data, 4096)
    assert proxy.receive(len(data), sock=proxy.p1) == data
    sender.join(10)


def test_a_redirect_to_an_empty_key_drops(backend, proxies):
    proxy = proxies(backend, insert=False)
    backend.map_update_elem(proxy.map, u32(0), u32(proxy.p1.fileno()))
    proxy.c1.sendall(b"lost")
    assert err_of(backend.sock_recv, proxy.p1, 100, timeout=0.1) == errno.EAGAIN


class MsgLab:
    def __init__(self, sys, map_type: int, code=None, flags: int = 0) -> None:
        self.sys = sys
        self.map = sys.map_create(map_type, 4, 4, 2)
        insns = code if code is not None else msg_verdict_insns(self.map, map_type, 1, flags)
        self.prog = sys.prog_load(ProgType.SK_MSG, insns)
        sys.prog_attach(self.prog, self.map, AttachType.SK_MSG_VERDICT)
        self.a, self.b = tcp_pair()
        self.c, self.d = tcp_pair()
        sys.map_update_elem(self.map, u32(0), u32(self.a.fileno()))
        sys.map_update_elem(self.map, u32(1), u32(self.c.fileno()))

    def close(self) -> None:
        for sock in (self.a, self.b, self.c, self.d):
            sock.close()
        self.sys.close(self.prog)
        self.sys.close(self.map)


@pytest.fixture
def msg_lab():
    made = []

    def make(*args, **kw) -> MsgLab:
        made.append(MsgLab(*args, **kw))
        return made[-1]

    yield make
    for lab in made:
        lab.close()


def test_sk_msg_pass_sends_and_drop_is_eacces(backend, msg_lab):
    passing = msg_lab(backend, MapType.SOCKMAP, returning(1))
    assert backend.sock_send(passing.a, b"hello") == 5
    assert backend.sock_recv(passing.b, 100, timeout=2) == b"hello"
    dropping = msg_lab(backend, MapType.SOCKMAP, returning(0))
    assert err_of(backend.sock_send, dropping.a, b"hello") == errno.EACCES
    assert err_of(backend.sock_recv, dropping.b, 100, timeout=0.1) == errno.EAGAIN


@pytest.mark.parametrize("map_type", [MapType.SOCKMAP, MapType.SOCKHASH], ids=["map", "hash"])
@pytest.mark.parametrize("ingress", [False, True], ids=["egress", "ingress"])
def test_sk_msg_redirect(backend, msg_lab, map_type, ingress):
    lab = msg_lab(backend, map_type, flags=BPF_F_INGRESS if ingress else 0)
    data = pattern(200_000)
    assert backend.sock_send(lab.a, data) == len(data)
    reader, other = (lab.c, lab.d) if ingress else (lab.d, lab.c)
    got = bytearray()
    while len(got) < len(data):
        got += backend.sock_recv(reader, 1 << 20, timeout=2)
    assert got == data
    assert err_of(backend.sock_recv, other, 100, timeout=0.05) == errno.EAGAIN
    assert err_of(backend.sock_recv, lab.b, 100, timeout=0.05) == errno.EAGAIN
    backend.map_delete_elem(lab.map, u32(1))
    assert err_of(backend.sock_send, lab.a, b"nowhere") == errno.EACCES


def test_a_socket_that_left_its_verdict_map_takes_another_maps_verdict(backend, proxies):
    """Leaving the map stops its verdict (sock_map_del_link); entering a map with a dropping
    verdict starts that one."""
    proxy = proxies(backend)
    backend.map_delete_elem(proxy.map, u32(0))
    proxy.c1.sendall(b"plain")
    assert proxy.receive(5, sock=proxy.p1) == b"plain"
    dropping = proxies(backend, verdict=returning(0), insert=False)
    backend.map_update_elem(dropping.map, u32(0), u32(proxy.p1.fileno()))
    proxy.c1.sendall(b"dropped")
    assert err_of(backend.sock_recv, proxy.p1, 100, timeout=0.2) == errno.EAGAIN


def test_the_verdict_reads_the_socket_ports_as_the_kernel_lays_them_out(backend, proxies):
    """__sk_buff.local_port is host order; remote_port is the network-order port in the
    upper half of the u32 (the kernel shifts skc_dport left by 16 on little-endian)."""
    ports = backend.map_create(MapType.ARRAY, 4, 8, 1)
    try:
        code = encode(assemble([
            mov64(R6, R1),
            ldxw(R2, R6, SKB_LOCAL_PORT), stxw(FP, -8, R2),
            ldxw(R2, R6, SKB_REMOTE_PORT), stxw(FP, -4, R2),
            stw(FP, -12, 0),
            ld_map_fd(R1, ports), mov64(R2, FP), add64(R2, -12), mov64(R3, FP), add64(R3, -8),
            mov64(R4, 0), call("map_update_elem"), mov64(R0, SK_PASS), exit_()]).instructions)
        proxy = proxies(backend, verdict=code)
        proxy.c1.sendall(b"x")
        deadline = time.monotonic() + 10
        while (value := backend.map_lookup_elem(ports, u32(0))) == bytes(8) \
                and time.monotonic() < deadline:
            time.sleep(0.01)
        local, remote = proxy.p1.getsockname()[1], proxy.p1.getpeername()[1]
        assert value == local.to_bytes(4, "little") + b"\0\0" + remote.to_bytes(2, "big")
    finally:
        backend.close(ports)
