"""Programs on sockmaps (net/core/sock_map.c, net/core/skmsg.c, net/ipv4/tcp_bpf.c) and the
bytes they move, on both backends; the real kernel (6.18) is the oracle.

Only the backend-blind API is used: System commands, SockMap / SockHash, Program, and
``System.sock_recv`` / ``sock_send`` for every read and write of a socket (the emulated
backend delivers what its psocks pass or redirect there). Every read has a timeout and every
thread is joined with one: a hang is a failure, never a stuck run.

Rules pinned here (measured on Linux 6.18; errno in the order the kernel checks):

BPF_PROG_ATTACH (syscall.c bpf_prog_attach, then sock_map_get_from_fd):
  1. attach_type not one of a program type's -> EINVAL (XDP or 1000 on a sockmap: EINVAL)
  2. attach_flags outside ALLOW_OVERRIDE|ALLOW_MULTI|REPLACE (1|2|4) -> EINVAL
  3. prog fd: closed -> EBADF; not a program, or a program of another type than the
     attach type's (SK_MSG as a stream verdict, SK_SKB as msg_verdict, XDP) -> EINVAL.
     expected_attach_type is not checked: an SK_SKB program loaded with any expected type
     attaches to any SK_SKB slot (and loads with any, XDP's included)
  4. attach_flags (even 1, 2) or replace_bpf_fd non-zero -> EINVAL
  5. target fd: closed -> EBADF; not a map (a pipe) -> EINVAL
  6. a map other than SOCKMAP/SOCKHASH -> EOPNOTSUPP
  7. STREAM_VERDICT while an SKB_VERDICT is attached (or the reverse) -> EBUSY; the parser
     combines with either verdict
  8. a link holds the slot -> EBUSY
  9. otherwise the slot takes the program, replacing (silently) any attached one, the
     same program included
BPF_PROG_DETACH (sock_map_prog_detach):
  1. attach_type unknown -> EINVAL
  2. target fd: closed -> EBADF, not a map -> EINVAL (before the prog fd is looked at)
  3. prog fd: closed -> EBADF; not a program, or of the wrong type -> EINVAL (prog_fd=0 is
     fd 0, not "any": EINVAL)
  4. not a sock map -> EOPNOTSUPP; the other verdict attached -> EBUSY (even with the slot
     empty); a link holds the slot -> EBUSY (whichever program is named)
  5. the slot holds another program, or none -> ENOENT
BPF_LINK_CREATE (sock_map_link_create, Linux 6.10+):
  prog fd closed -> EBADF; prog type not the attach type's -> EINVAL; flags != 0 -> EINVAL
  (before the map fd); map fd closed -> EBADF; not a map -> EINVAL; a map of another type ->
  EINVAL (not EOPNOTSUPP); a link already in the slot -> EBUSY; the other verdict -> EBUSY.
  A link replaces a program attached by PROG_ATTACH; PROG_ATTACH over a link -> EBUSY;
  closing the link's fd empties the slot (PROG_DETACH then -> ENOENT, PROG_ATTACH works).
Sockets and programs:
  - A psock takes the map's programs when its socket is inserted. Sockets inserted before
    the attach are not redirected (their data reaches the application as plain TCP); deleted
    and inserted again, they are.
  - Detaching leaves the sockets already in the map running the program; sockets inserted
    afterwards are not redirected.
  - sk_redirect_map / _hash to an empty key is SK_DROP: the bytes are gone.
  - SK_PASS delivers to the socket itself (read by its application); SK_DROP drops them.
  - SK_MSG verdict on TCP: sendmsg through it: SK_DROP is EACCES for the sender, SK_PASS
    sends, msg_redirect_map / _hash sends on the target (egress) or queues to its receive
    side (BPF_F_INGRESS). AF_UNIX stream sockets take SK_SKB verdicts (both kinds, egress
    and ingress) but no SK_MSG verdict: their sends go to the peer untouched.
  - Lookups give the cookie (SO_COOKIE); 4-byte values give ENOSPC.
  - Faults under load (8 MiB through an egress or ingress redirect, the fault after 1 MiB):
    deleting the source socket from the map: the rest arrives at the source as plain TCP,
    the target's part plus the source's part is exactly what was sent; deleting the target:
    the rest is dropped; closing the target (egress): its peer sees end of stream; closing
    the source: the sender gets EPIPE or ECONNRESET. In every case what arrived is a prefix
    of what was sent (nothing duplicated, reordered or corrupted) and nothing hangs.
Kernel only: ``target_cpu=`` (the 2024 patch's attr field) and BPF_F_SOCKMAP_TARGET_CPU
  (the CPU in flags' upper 32 bits) are EINVAL, the message naming the missing feature.
"""

from __future__ import annotations

import errno
import socket
import struct
import threading
import time

import pytest

from helpers import err_of
from pybpf.asm import FP, R0, R1, R2, R6, R7
from pybpf.asm import builder as b
from pybpf.maps import ArrayMap, Map, MapSpec
from pybpf.programs import Link, Program, ProgramSpec, sockmap_attach_type
from pybpf.sock_maps import SockHash, SockMap, len_parser, redirect_verdict, target_cpu_flags
from pybpf.uapi import BPF_F_INGRESS, SK_DROP, SK_PASS, AttachType, MapType, ProgType

PARSER = AttachType.SK_SKB_STREAM_PARSER
STREAM_VERDICT = AttachType.SK_SKB_STREAM_VERDICT
SKB_VERDICT = AttachType.SK_SKB_VERDICT
MSG_VERDICT = AttachType.SK_MSG_VERDICT
CLOSED_FD = 999_999
STALL = 10.0  # seconds without progress that fail a transfer


# -- helpers ------------------------------------------------------------------------------------
def load(system, prog_type, items, maps=None, expected_attach_type=0) -> Program:
    return Program.load(ProgramSpec(prog_type, items, expected_attach_type=expected_attach_type),
                        system, maps=maps or {})


def returning(system, prog_type, verdict, expected_attach_type=0) -> Program:
    return load(system, prog_type, [b.mov64(R0, verdict), b.exit_()],
                expected_attach_type=expected_attach_type)


def counting(system, prog_type, counters, tail) -> Program:
    """A program adding the bytes it sees (skb->len, or sk_msg size) to counters[0], then
    running ``tail`` (items ending in exit) with the context back in r1."""
    size_off = 0 if prog_type == ProgType.SK_SKB else 68  # __sk_buff.len, sk_msg_md.size
    return load(system, prog_type, [
        b.mov64(R6, R1), b.ldx(4, R7, R1, size_off), b.st(4, FP, -4, 0), b.mov64(R2, FP),
        b.add64(R2, -4), b.ld_map_fd(R1, "counters"), b.call("map_lookup_elem"),
        b.jeq(R0, 0, "out"), b.atomic(8, 0, R0, 0, R7), b.label("out"), b.mov64(R1, R6),
        *tail], {"counters": counters})


def wait_for(predicate, what: str, timeout: float = STALL) -> None:
    """Poll ``predicate`` until it holds; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"{what} did not happen within {timeout} s"
        time.sleep(0.005)


def pattern(size: int) -> bytes:
    """Bytes whose every 8-byte word is its own offset: a lost, doubled or moved byte shows."""
    return b"".join(struct.pack(">Q", i) for i in range(0, size, 8))[:size]


def assert_prefix(got: bytes, data: bytes) -> None:
    assert len(got) <= len(data), f"{len(got) - len(data)} bytes more than were sent"
    if data[:len(got)] != got:
        first = next(i for i, (x, y) in enumerate(zip(got, data, strict=False)) if x != y)
        raise AssertionError(f"byte {first} of {len(got)} differs from what was sent")


def recv_some(system, sock, timeout: float = STALL) -> bytes:
    """One read; b"" at end of stream or on a reset connection."""
    try:
        return system.sock_recv(sock, 1 << 20, timeout=timeout)
    except OSError as exc:
        if exc.errno == errno.ECONNRESET:
            return b""
        raise


def recv_exactly(system, sock, size: int) -> bytes:
    got = bytearray()
    while len(got) < size:
        chunk = recv_some(system, sock)
        if not chunk:
            break
        got += chunk
    return bytes(got)


def assert_nothing_to_read(system, sock) -> None:
    assert err_of(system.sock_recv, sock, 1 << 16, timeout=0) == errno.EAGAIN


class Sender(threading.Thread):
    """Sends ``data`` on ``sock`` in ``chunk``-byte writes (each with a timeout); records how
    much went and the errno that stopped it; shuts the write side down at the end."""

    def __init__(self, system, sock, data: bytes, chunk: int) -> None:
        super().__init__(daemon=True)
        self.system, self.sock, self.data, self.chunk = system, sock, data, chunk
        self.sent = 0
        self.error: int | None = None

    def run(self) -> None:
        try:
            while self.sent < len(self.data):
                self.sent += self.system.sock_send(
                    self.sock, self.data[self.sent:self.sent + self.chunk], timeout=STALL)
            self.sock.shutdown(socket.SHUT_WR)
        except OSError as exc:
            self.error = exc.errno

    def finish(self) -> None:
        self.join(STALL * 3)
        assert not self.is_alive(), f"the sender hung after {self.sent} bytes"


class Reader(threading.Thread):
    """Reads ``sock`` to end of stream (each read with a timeout) into ``got``."""

    def __init__(self, system, sock) -> None:
        super().__init__(daemon=True)
        self.system, self.sock = system, sock
        self.got = bytearray()
        self.error: int | None = None

    def run(self) -> None:
        try:
            while chunk := recv_some(self.system, self.sock):
                self.got += chunk
        except OSError as exc:
            self.error = exc.errno

    def finish(self) -> bytes:
        self.join(STALL * 3)
        assert not self.is_alive(), f"the reader hung after {len(self.got)} bytes"
        return bytes(self.got)


@pytest.fixture
def sockets():
    """``sockets("tcp")`` / ``sockets("unix")``: a connected stream pair (closed at the end)."""
    made: list[socket.socket] = []

    def make(kind: str = "tcp") -> tuple[socket.socket, socket.socket]:
        if kind == "unix":
            pair = socket.socketpair()
        else:
            with socket.create_server(("127.0.0.1", 0)) as server:
                client = socket.create_connection(server.getsockname())
                pair = (client, server.accept()[0])
        made.extend(pair)
        return pair

    yield make
    for sock in made:
        sock.close()


def make_map(system, kind: str, max_entries: int = 4):
    return (SockMap if kind == "sockmap" else SockHash)(max_entries, system=system)


def cookie(sock: socket.socket) -> int:
    return int.from_bytes(sock.getsockopt(socket.SOL_SOCKET, 57, 8), "little")


# -- attaching: PROG_ATTACH / PROG_DETACH --------------------------------------------------------
@pytest.mark.parametrize("kind", ["sockmap", "sockhash"])
@pytest.mark.parametrize("name, attach_type, prog_type", [
    ("stream_parser", PARSER, ProgType.SK_SKB),
    ("stream_verdict", STREAM_VERDICT, ProgType.SK_SKB),
    ("skb_verdict", SKB_VERDICT, ProgType.SK_SKB),
    ("msg_verdict", MSG_VERDICT, ProgType.SK_MSG),
])
def test_each_sockmap_attach_type_attaches_and_detaches(backend, kind, name, attach_type,
                                                        prog_type):
    m = make_map(backend, kind)
    prog = returning(backend, prog_type, SK_PASS)
    m.attach(prog, name)
    m.detach(prog, attach_type)
    assert err_of(m.detach, prog, attach_type) == errno.ENOENT
    backend.prog_attach(prog.fd, m.fd, attach_type)
    backend.prog_detach(m.fd, attach_type, prog.fd)


@pytest.mark.parametrize("attach_type, prog_type", [
    (PARSER, ProgType.SK_SKB), (STREAM_VERDICT, ProgType.SK_SKB),
    (SKB_VERDICT, ProgType.SK_SKB), (MSG_VERDICT, ProgType.SK_MSG)])
def test_attaching_again_replaces_the_program(backend, attach_type, prog_type):
    m = SockMap(2, system=backend)
    first, second = (returning(backend, prog_type, SK_PASS) for _ in range(2))
    m.attach(first, attach_type)
    m.attach(first, attach_type)  # the same program again: fine
    m.attach(second, attach_type)
    assert err_of(m.detach, first, attach_type) == errno.ENOENT
    m.detach(second, attach_type)
    assert err_of(m.detach, second, attach_type) == errno.ENOENT


@pytest.mark.parametrize("kind", ["sockmap", "sockhash"])
def test_stream_verdict_and_skb_verdict_exclude_each_other(backend, kind):
    m = make_map(backend, kind)
    prog, parser = (returning(backend, ProgType.SK_SKB, SK_PASS) for _ in range(2))
    m.attach(prog, STREAM_VERDICT)
    assert err_of(m.attach, prog, SKB_VERDICT) == errno.EBUSY
    assert err_of(m.detach, prog, SKB_VERDICT) == errno.EBUSY  # empty, but excluded
    m.attach(parser, PARSER)
    m.detach(prog, STREAM_VERDICT)
    m.attach(prog, SKB_VERDICT)  # the parser stays: it combines with either verdict
    assert err_of(m.attach, prog, STREAM_VERDICT) == errno.EBUSY
    assert err_of(m.detach, prog, STREAM_VERDICT) == errno.EBUSY
    m.detach(prog, SKB_VERDICT)
    m.detach(parser, PARSER)


def test_program_type_must_match_and_expected_attach_type_is_not_checked(backend):
    m = SockMap(2, system=backend)
    msg = returning(backend, ProgType.SK_MSG, SK_PASS)
    skb = returning(backend, ProgType.SK_SKB, SK_PASS)
    xdp = returning(backend, ProgType.XDP, 2)
    assert err_of(m.attach, msg, STREAM_VERDICT) == errno.EINVAL
    assert err_of(m.attach, skb, MSG_VERDICT) == errno.EINVAL
    assert err_of(m.attach, xdp, SKB_VERDICT) == errno.EINVAL
    assert err_of(m.attach, skb, AttachType.XDP) == errno.EINVAL
    assert err_of(m.attach, skb, 1000) == errno.EINVAL
    odd = returning(backend, ProgType.SK_SKB, SK_PASS, expected_attach_type=AttachType.XDP)
    for attach_type in (PARSER, STREAM_VERDICT):
        m.attach(odd, attach_type)
        m.detach(odd, attach_type)
    odd_msg = returning(backend, ProgType.SK_MSG, SK_PASS, expected_attach_type=SKB_VERDICT)
    m.attach(odd_msg, MSG_VERDICT)
    m.detach(odd_msg, MSG_VERDICT)


def test_prog_attach_checks_in_syscall_order(backend, sockets):
    sys = backend
    m = SockMap(2, system=sys)
    skb = returning(sys, ProgType.SK_SKB, SK_PASS)
    msg = returning(sys, ProgType.SK_MSG, SK_PASS)
    array = ArrayMap(1, int, int, key_size=4, value_size=8, system=sys)
    pipe_end, _ = sockets("unix")
    attach = sys.prog_attach
    assert err_of(attach, skb.fd, m.fd, 1000, 16) == errno.EINVAL  # type before flags
    assert err_of(attach, CLOSED_FD, CLOSED_FD, STREAM_VERDICT, 16) == errno.EINVAL
    assert err_of(attach, CLOSED_FD, CLOSED_FD, STREAM_VERDICT) == errno.EBADF  # prog first
    assert err_of(attach, CLOSED_FD, m.fd, STREAM_VERDICT, 1) == errno.EBADF
    assert err_of(attach, m.fd, m.fd, STREAM_VERDICT) == errno.EINVAL  # a map, not a prog
    assert err_of(attach, msg.fd, CLOSED_FD, STREAM_VERDICT) == errno.EINVAL
    assert err_of(attach, skb.fd, CLOSED_FD, STREAM_VERDICT, 2) == errno.EINVAL
    assert err_of(attach, skb.fd, CLOSED_FD, STREAM_VERDICT, 0, skb.fd) == errno.EINVAL
    assert err_of(attach, skb.fd, m.fd, STREAM_VERDICT, 4, skb.fd) == errno.EINVAL
    assert err_of(attach, skb.fd, CLOSED_FD, STREAM_VERDICT) == errno.EBADF
    assert err_of(attach, skb.fd, pipe_end.fileno(), STREAM_VERDICT) == errno.EINVAL
    assert err_of(attach, skb.fd, array.fd, STREAM_VERDICT) == errno.EOPNOTSUPP
    assert err_of(attach, skb.fd, array.fd, STREAM_VERDICT, 1) == errno.EINVAL


def test_prog_detach_checks_in_syscall_order(backend, sockets):
    sys = backend
    m = SockMap(2, system=sys)
    skb = returning(sys, ProgType.SK_SKB, SK_PASS)
    msg = returning(sys, ProgType.SK_MSG, SK_PASS)
    array = ArrayMap(1, int, int, key_size=4, value_size=8, system=sys)
    pipe_end, _ = sockets("unix")
    detach = sys.prog_detach
    assert err_of(detach, CLOSED_FD, 1000, CLOSED_FD) == errno.EINVAL
    assert err_of(detach, m.fd, AttachType.XDP, skb.fd) == errno.EINVAL
    assert err_of(detach, CLOSED_FD, STREAM_VERDICT, CLOSED_FD) == errno.EBADF
    assert err_of(detach, CLOSED_FD, STREAM_VERDICT, msg.fd) == errno.EBADF  # map first
    assert err_of(detach, pipe_end.fileno(), STREAM_VERDICT, CLOSED_FD) == errno.EINVAL
    assert err_of(detach, m.fd, STREAM_VERDICT, CLOSED_FD) == errno.EBADF
    assert err_of(detach, m.fd, STREAM_VERDICT, 0) == errno.EINVAL  # fd 0 is no program
    assert err_of(detach, m.fd, STREAM_VERDICT, msg.fd) == errno.EINVAL
    assert err_of(detach, m.fd, MSG_VERDICT, skb.fd) == errno.EINVAL
    assert err_of(detach, array.fd, STREAM_VERDICT, skb.fd) == errno.EOPNOTSUPP
    assert err_of(detach, array.fd, STREAM_VERDICT, msg.fd) == errno.EINVAL
    assert err_of(detach, m.fd, STREAM_VERDICT, skb.fd) == errno.ENOENT


# -- links ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["sockmap", "sockhash"])
@pytest.mark.parametrize("name, attach_type, prog_type", [
    ("stream_parser", PARSER, ProgType.SK_SKB),
    ("stream_verdict", STREAM_VERDICT, ProgType.SK_SKB),
    ("skb_verdict", SKB_VERDICT, ProgType.SK_SKB),
    ("msg_verdict", MSG_VERDICT, ProgType.SK_MSG),
])
def test_links_hold_their_slot_until_closed(backend, kind, name, attach_type, prog_type):
    m = make_map(backend, kind)
    prog, other = (returning(backend, prog_type, SK_PASS) for _ in range(2))
    link = prog.attach_sockmap(m, name)
    assert isinstance(link, Link) and not link.closed
    assert err_of(backend.link_create, prog.fd, m.fd, attach_type) == errno.EBUSY
    assert err_of(m.attach, prog, attach_type) == errno.EBUSY
    assert err_of(m.attach, other, attach_type) == errno.EBUSY
    assert err_of(m.detach, prog, attach_type) == errno.EBUSY
    assert err_of(m.detach, other, attach_type) == errno.EBUSY
    assert err_of(backend.link_create, prog.fd, m.fd, attach_type, 1) == errno.EINVAL
    link.close()
    assert err_of(m.detach, prog, attach_type) == errno.ENOENT
    m.attach(other, attach_type)
    with prog.attach_sockmap(m, attach_type):  # a link takes over from PROG_ATTACH
        assert err_of(m.detach, other, attach_type) == errno.EBUSY
    assert err_of(m.detach, other, attach_type) == errno.ENOENT


def test_link_create_checks_in_syscall_order(backend, sockets):
    sys = backend
    m = SockMap(2, system=sys)
    skb = returning(sys, ProgType.SK_SKB, SK_PASS)
    msg = returning(sys, ProgType.SK_MSG, SK_PASS)
    hash_map = Map(MapSpec(MapType.HASH, 4, 8, 1), sys)
    pipe_end, _ = sockets("unix")
    create = sys.link_create
    assert err_of(create, CLOSED_FD, CLOSED_FD, STREAM_VERDICT) == errno.EBADF
    assert err_of(create, msg.fd, CLOSED_FD, STREAM_VERDICT) == errno.EINVAL
    assert err_of(create, skb.fd, m.fd, 1000) == errno.EINVAL
    assert err_of(create, skb.fd, CLOSED_FD, STREAM_VERDICT, 1) == errno.EINVAL
    assert err_of(create, skb.fd, CLOSED_FD, STREAM_VERDICT) == errno.EBADF
    assert err_of(create, skb.fd, pipe_end.fileno(), STREAM_VERDICT) == errno.EINVAL
    assert err_of(create, skb.fd, hash_map.fd, STREAM_VERDICT) == errno.EINVAL
    with skb.attach_sockmap(m, STREAM_VERDICT):
        assert err_of(create, skb.fd, m.fd, SKB_VERDICT) == errno.EBUSY
        assert err_of(m.attach, skb, SKB_VERDICT) == errno.EBUSY
        with skb.attach_sockmap(m, PARSER), msg.attach_sockmap(m, "msg_verdict"):
            pass
    with skb.attach_sockmap(m, SKB_VERDICT):
        assert err_of(create, skb.fd, m.fd, STREAM_VERDICT) == errno.EBUSY


def test_attach_type_names_and_their_errors():
    assert sockmap_attach_type("stream_verdict") == STREAM_VERDICT
    assert sockmap_attach_type("SK_SKB_VERDICT") == SKB_VERDICT
    assert sockmap_attach_type("bpf_sk_msg_verdict") == MSG_VERDICT
    assert sockmap_attach_type("sk_skb_stream_parser") == PARSER
    assert sockmap_attach_type(38) == SKB_VERDICT
    with pytest.raises(ValueError, match="stream_verdict"):
        sockmap_attach_type("verdict")
    with pytest.raises(TypeError):
        sockmap_attach_type(None)
