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
  3. prog fd: closed -> EBADF; not a program, or of the wrong type -> EINVAL (there is no
     "any program": prog_fd 0 is fd 0)
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
  - A psock holds one program per slot: inserting a socket whose psock already has a program
    in a slot the map also fills (stream parser, msg verdict, or either skb verdict against
    either) is EBUSY, at another key, at its own key again, or in another map; a map
    without programs, or one filling other slots only (msg verdict beside a stream
    verdict), takes it. A parser alone starts nothing: the data reaches the application.
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


# -- helpers -----------------------------------------------------------------------------------
def load(system, prog_type, items, maps=None, expected_attach_type=0) -> Program:
    return Program.load(ProgramSpec(prog_type, items, expected_attach_type=expected_attach_type),
                        system, maps=maps or {})


def returning(system, prog_type, verdict, expected_attach_type=0) -> Program:
    return load(system, prog_type, [b.mov64(R0, verdict), b.exit_()],
                expected_attach_type=expected_attach_type)


def counting(system, counters, tail) -> Program:
    """An SK_SKB program adding the bytes it sees (skb->len) to counters[0], then running
    ``tail`` (items ending in exit) with the context back in r1."""
    return load(system, ProgType.SK_SKB, [
        b.mov64(R6, R1), b.ldx(4, R7, R1, 0), b.st(4, FP, -4, 0), b.mov64(R2, FP),
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
    """No data waits on ``sock`` (nothing yet, or the end of stream)."""
    try:
        got = system.sock_recv(sock, 1 << 16, timeout=0)
    except OSError as exc:
        assert exc.errno == errno.EAGAIN
        return
    assert got == b"", f"{len(got)} bytes reached this socket's application"


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


# -- attaching: PROG_ATTACH / PROG_DETACH ------------------------------------------------------
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
    assert err_of(detach, m.fd, STREAM_VERDICT, pipe_end.fileno()) == errno.EINVAL
    assert err_of(detach, m.fd, STREAM_VERDICT, msg.fd) == errno.EINVAL
    assert err_of(detach, m.fd, MSG_VERDICT, skb.fd) == errno.EINVAL
    assert err_of(detach, array.fd, STREAM_VERDICT, skb.fd) == errno.EOPNOTSUPP
    assert err_of(detach, array.fd, STREAM_VERDICT, msg.fd) == errno.EINVAL
    assert err_of(detach, m.fd, STREAM_VERDICT, skb.fd) == errno.ENOENT


# -- links -------------------------------------------------------------------------------------
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


# -- bytes through redirects -------------------------------------------------------------------
class Proxy:
    """c1 <-> p1 and c2 <-> p2, two connected stream pairs. p1 sits at key 0 of the map with
    the verdict program; key 1 is the redirect target: p2 (egress: p2 sends, c2 receives) or
    c2 itself (ingress: the bytes go to c2's receive side). The application writes c1 and
    reads c2."""

    def __init__(self, system, sockets, *, kind="sockmap", ingress=False, attach=STREAM_VERDICT,
                 parser=False, family="tcp") -> None:
        self.system = system
        self.map = make_map(system, kind)
        flags = BPF_F_INGRESS if ingress else 0
        self.verdict = load(system, ProgType.SK_SKB, redirect_verdict(self.map, 1, flags))
        self.map.attach(self.verdict, attach)
        if parser:
            self.parser = load(system, ProgType.SK_SKB, len_parser())
            self.map.attach(self.parser, PARSER)
        self.c1, self.p1 = sockets(family)
        self.c2, self.p2 = sockets(family)
        self.target = self.c2 if ingress else self.p2
        self.map[0] = self.p1
        self.map[1] = self.target


def transfer(system, proxy: Proxy, data: bytes, chunk: int) -> bytes:
    sender = Sender(system, proxy.c1, data, chunk)
    sender.start()
    got = recv_exactly(system, proxy.c2, len(data))
    sender.finish()
    assert sender.error is None, f"send failed with errno {sender.error}"
    return got


MODES = [pytest.param(STREAM_VERDICT, False, id="stream_verdict"),
         pytest.param(STREAM_VERDICT, True, id="stream_verdict+parser"),
         pytest.param(SKB_VERDICT, False, id="skb_verdict")]
SIZES = [pytest.param(24 << 10, 7, id="24KiB-in-7B-writes"),
         pytest.param(4 << 20, 256 << 10, id="4MiB-in-256KiB-writes")]


@pytest.mark.parametrize("size, chunk", SIZES)
@pytest.mark.parametrize("attach, parser", MODES)
@pytest.mark.parametrize("ingress", [False, True], ids=["egress", "ingress"])
@pytest.mark.parametrize("kind", ["sockmap", "sockhash"])
def test_redirect_moves_bytes_intact(backend, sockets, kind, ingress, attach, parser, size,
                                     chunk):
    proxy = Proxy(backend, sockets, kind=kind, ingress=ingress, attach=attach, parser=parser)
    data = pattern(size)
    got = transfer(backend, proxy, data, chunk)
    assert_prefix(got, data)
    assert len(got) == len(data)
    assert_nothing_to_read(backend, proxy.p1)  # nothing leaked to the source's application


@pytest.mark.parametrize("attach", [STREAM_VERDICT, SKB_VERDICT], ids=["stream", "skb"])
@pytest.mark.parametrize("ingress", [False, True], ids=["egress", "ingress"])
def test_redirect_between_unix_socketpairs(backend, sockets, ingress, attach):
    proxy = Proxy(backend, sockets, ingress=ingress, attach=attach, family="unix")
    data = pattern(1 << 20)
    got = transfer(backend, proxy, data, 64 << 10)
    assert got == data


@pytest.mark.parametrize("kind", ["sockmap", "sockhash"])
def test_sk_pass_delivers_to_the_socket_itself(backend, sockets, kind):
    m = make_map(backend, kind)
    counters = ArrayMap(1, int, int, key_size=4, value_size=8, system=backend)
    m.attach(counting(backend, counters, [b.mov64(R0, SK_PASS), b.exit_()]),
             "stream_verdict")
    client, server = sockets()
    m[0] = server
    data = pattern(1 << 20)
    sender = Sender(backend, client, data, 64 << 10)
    sender.start()
    assert recv_exactly(backend, server, len(data)) == data
    sender.finish()
    assert counters[0] == len(data)  # the verdict saw every byte


def test_sk_drop_drops_what_the_verdict_saw(backend, sockets):
    m = SockMap(1, system=backend)
    counters = ArrayMap(1, int, int, key_size=4, value_size=8, system=backend)
    m.attach(counting(backend, counters, [b.mov64(R0, SK_DROP), b.exit_()]),
             SKB_VERDICT)
    client, server = sockets()
    m[0] = server
    data = pattern(256 << 10)
    sender = Sender(backend, client, data, 16 << 10)
    sender.start()
    sender.finish()
    assert sender.error is None
    wait_for(lambda: counters[0] == len(data), "the verdict seeing every byte")
    assert_nothing_to_read(backend, server)


def test_redirect_to_an_empty_key_drops(backend, sockets):
    m = SockMap(2, system=backend)
    counters = ArrayMap(1, int, int, key_size=4, value_size=8, system=backend)
    m.attach(counting(backend, counters, redirect_verdict(m, 1)),
             STREAM_VERDICT)
    c1, p1 = sockets()
    c2, p2 = sockets()
    m[0] = p1
    lost = b"lost" * 1000
    assert backend.sock_send(c1, lost, timeout=STALL) == len(lost)
    wait_for(lambda: counters[0] == len(lost), "the verdict seeing the first bytes")
    m[1] = p2
    kept = pattern(64 << 10)
    sender = Sender(backend, c1, kept, 8 << 10)
    sender.start()
    assert recv_exactly(backend, c2, len(kept)) == kept  # the dropped bytes never came
    sender.finish()
    assert_nothing_to_read(backend, p1)


@pytest.mark.parametrize("held, other", [
    ("stream_verdict", "stream_verdict"), ("skb_verdict", "skb_verdict"),
    ("stream_verdict", "skb_verdict"), ("skb_verdict", "stream_verdict"),
    ("stream_parser", "stream_parser"), ("msg_verdict", "msg_verdict")])
def test_a_socket_takes_one_program_per_slot(backend, sockets, held, other):
    def prog(name):
        kind = ProgType.SK_MSG if name == "msg_verdict" else ProgType.SK_SKB
        return returning(backend, kind, SK_PASS)

    first, second, bare = (SockMap(4, system=backend) for _ in range(3))
    first.attach(prog(held), held)
    second.attach(prog(other), other)
    _, sock = sockets()
    first[0] = sock
    assert err_of(first.update, 1, sock) == errno.EBUSY
    assert err_of(first.update, 0, sock) == errno.EBUSY
    assert err_of(second.update, 0, sock) == errno.EBUSY
    bare[0] = sock
    assert first[0] == bare[0] == cookie(sock)


def test_other_slots_combine_and_a_parser_alone_passes_data(backend, sockets):
    verdicts, messages, parsers = (SockMap(2, system=backend) for _ in range(3))
    verdicts.attach(returning(backend, ProgType.SK_SKB, SK_PASS), "stream_verdict")
    messages.attach(returning(backend, ProgType.SK_MSG, SK_PASS), "msg_verdict")
    parsers.attach(load(backend, ProgType.SK_SKB, len_parser()), "stream_parser")
    client, server = sockets()
    verdicts[0] = server
    messages[0] = server
    other_client, other_server = sockets()
    parsers[0] = other_server
    assert backend.sock_send(other_client, b"parsed by nobody", timeout=STALL) == 16
    assert recv_exactly(backend, other_server, 16) == b"parsed by nobody"


def test_sockets_inserted_before_the_attach_are_not_redirected(backend, sockets):
    m = SockMap(2, system=backend)
    c1, p1 = sockets()
    c2, p2 = sockets()
    m[0], m[1] = p1, p2
    m.attach(load(backend, ProgType.SK_SKB, redirect_verdict(m, 1)), STREAM_VERDICT)
    plain = b"plain tcp" * 100
    assert backend.sock_send(c1, plain, timeout=STALL) == len(plain)
    assert recv_exactly(backend, p1, len(plain)) == plain
    assert_nothing_to_read(backend, c2)  # no program ran, so nothing can come later
    del m[0]
    m[0] = p1  # inserted again after the attach: now it takes the program
    data = pattern(64 << 10)
    sender = Sender(backend, c1, data, 8 << 10)
    sender.start()
    assert recv_exactly(backend, c2, len(data)) == data
    sender.finish()
    assert_nothing_to_read(backend, p1)


def test_detach_leaves_inserted_sockets_running_the_program(backend, sockets):
    m = SockMap(4, system=backend)
    verdict = load(backend, ProgType.SK_SKB, redirect_verdict(m, 1))
    m.attach(verdict, STREAM_VERDICT)
    c1, p1 = sockets()
    c2, p2 = sockets()
    c3, p3 = sockets()
    m[0], m[1] = p1, p2
    m.detach(verdict, STREAM_VERDICT)
    m[2] = p3  # inserted after the detach: no program
    first = pattern(64 << 10)
    sender = Sender(backend, c1, first, 8 << 10)
    sender.start()
    assert recv_exactly(backend, c2, len(first)) == first
    sender.finish()
    later = b"not redirected" * 50
    assert backend.sock_send(c3, later, timeout=STALL) == len(later)
    assert recv_exactly(backend, p3, len(later)) == later


# -- SK_MSG ------------------------------------------------------------------------------------
@pytest.mark.parametrize("size, chunk", SIZES)
@pytest.mark.parametrize("ingress", [False, True], ids=["egress", "ingress"])
@pytest.mark.parametrize("kind", ["sockmap", "sockhash"])
def test_msg_verdict_redirects_what_the_application_sends(backend, sockets, kind, ingress,
                                                          size, chunk):
    m = make_map(backend, kind)
    flags = BPF_F_INGRESS if ingress else 0
    m.attach(load(backend, ProgType.SK_MSG, redirect_verdict(m, 1, flags, msg=True)),
             "msg_verdict")
    c1, p1 = sockets()
    c2, p2 = sockets()
    m[0] = c1  # the sender's own socket: its sendmsg runs the program
    m[1] = c2 if ingress else p2
    data = pattern(size)
    sender = Sender(backend, c1, data, chunk)
    sender.start()
    got = recv_exactly(backend, c2, len(data))
    sender.finish()
    assert sender.error is None
    assert_prefix(got, data)
    assert len(got) == len(data)
    assert_nothing_to_read(backend, p1)


def test_msg_verdict_drop_is_eacces_and_pass_sends(backend, sockets):
    for verdict, want in ((SK_DROP, errno.EACCES), (SK_PASS, 0)):
        m = SockMap(1, system=backend)
        m.attach(returning(backend, ProgType.SK_MSG, verdict), MSG_VERDICT)
        client, server = sockets()
        m[0] = client
        if want:
            assert err_of(backend.sock_send, client, b"refused", timeout=STALL) == want
            assert_nothing_to_read(backend, server)
        else:
            assert backend.sock_send(client, b"passed", timeout=STALL) == 6
            assert recv_exactly(backend, server, 6) == b"passed"


def test_msg_verdict_does_not_run_on_unix_sockets(backend, sockets):
    m = SockMap(2, system=backend)
    m.attach(load(backend, ProgType.SK_MSG, redirect_verdict(m, 1, msg=True)), MSG_VERDICT)
    c1, p1 = sockets("unix")
    c2, p2 = sockets("unix")
    m[0], m[1] = c1, p2
    assert backend.sock_send(c1, b"straight to the peer", timeout=STALL) == 20
    assert recv_exactly(backend, p1, 20) == b"straight to the peer"
    assert_nothing_to_read(backend, c2)


# -- faults under load -------------------------------------------------------------------------
FAULTS = [("delete-source", False), ("delete-source", True), ("delete-target", False),
          ("delete-target", True), ("close-target", False), ("close-source", False),
          ("close-source", True)]


@pytest.mark.parametrize("fault, ingress", FAULTS,
                         ids=[f"{f}-{'ingress' if i else 'egress'}" for f, i in FAULTS])
def test_faults_under_load_never_hang_duplicate_or_reorder(backend, sockets, fault, ingress):
    proxy = Proxy(backend, sockets, ingress=ingress)
    data = pattern(8 << 20)
    sender = Sender(backend, proxy.c1, data, 64 << 10)
    source_reader = Reader(backend, proxy.p1)  # after a delete, the source gets plain TCP
    got = bytearray()
    sender.start()
    if fault == "delete-source":
        source_reader.start()
    while len(got) < 1 << 20:
        chunk = recv_some(backend, proxy.c2)
        assert chunk, f"end of stream after {len(got)} bytes, before the fault"
        got += chunk
    if fault == "delete-source":
        del proxy.map[0]
    elif fault == "delete-target":
        del proxy.map[1]
    elif fault == "close-target":
        proxy.p2.close()
    else:
        proxy.p1.close()
    if fault == "delete-source":
        # The target's part and the source's part together are what was sent, once each.
        sender.finish()
        assert sender.error is None
        source_reader.join(STALL * 3)
        deadline = time.monotonic() + STALL
        while len(got) + len(source_reader.got) < sender.sent or source_reader.is_alive():
            assert time.monotonic() < deadline, "bytes missing after the source's delete"
            try:
                got += backend.sock_recv(proxy.c2, 1 << 20, timeout=0.05)
            except OSError as exc:
                assert exc.errno == errno.EAGAIN
        assert source_reader.finish() is not None
        assert bytes(got) + bytes(source_reader.got) == data[:sender.sent]
        return
    sender.finish()
    if fault == "close-source":
        assert sender.error in (None, errno.EPIPE, errno.ECONNRESET)
    else:
        assert sender.error is None  # the rest was dropped, not refused
    if fault != "close-target":
        proxy.p2.close()  # c2 sees the end of stream once its queue is read
    while chunk := recv_some(backend, proxy.c2):
        got += chunk
    assert_prefix(bytes(got), data)


# -- values: sockets in, cookies out -----------------------------------------------------------
@pytest.mark.parametrize("kind", ["sockmap", "sockhash"])
def test_lookup_gives_the_socket_cookie(backend, sockets, kind):
    m = make_map(backend, kind)
    a, b_ = sockets()
    m[0] = a
    m.update(3, b_.fileno(), flags="noexist")
    assert m[0] == cookie(a) and m[3] == cookie(b_)
    assert dict(m.items()) == {0: cookie(a), 3: cookie(b_)}
    assert err_of(m.update, 0, b_, flags="noexist") == errno.EEXIST
    small = (SockMap if kind == "sockmap" else SockHash)(2, value_size=4, system=backend)
    small[1] = a
    assert err_of(small.lookup, 1) == errno.ENOSPC


def test_map_create_gives_the_typed_socket_maps(backend, sockets):
    sock, _ = sockets()
    for map_type, klass in ((MapType.SOCKMAP, SockMap), (MapType.SOCKHASH, SockHash)):
        with Map.create(MapSpec(map_type, 4, 8, 2), backend) as m:
            assert type(m) is klass
            m.update(1, sock)
            assert m.lookup(1) == cookie(sock)


def test_socket_values_are_checked_before_the_syscall(backend, sockets):
    m = SockMap(2, system=backend)
    sock, _ = sockets()
    with pytest.raises(TypeError, match="socket"):
        m[0] = "not a socket"
    closed = socket.socket()
    closed.close()
    with pytest.raises(ValueError, match="closed"):
        m[0] = closed
    with pytest.raises(ValueError, match="4 or 8"):
        SockMap(2, value_size=6, system=backend)
    with pytest.raises(TypeError, match="target_cpu"):
        m.update(0, sock, target_cpu="1")


# -- target CPU: the unmerged designs (the emulated backend has them) --------------------------
def test_target_cpu_flags_put_the_cpu_in_the_upper_32_bits():
    assert target_cpu_flags(0) == 1 << 5
    assert target_cpu_flags(3, "exist") == 3 << 32 | 1 << 5 | 2
    with pytest.raises(ValueError):
        target_cpu_flags(-1)


@pytest.mark.parametrize("kind", ["sockmap", "sockhash"])
def test_kernel_refuses_both_target_cpu_designs_naming_the_feature(kernel, sockets, kind):
    m = make_map(kernel, kind)
    sock, _ = sockets()
    for attempt in (lambda: m.update(0, sock, target_cpu=0),
                    lambda: m.update(0, sock, flags=target_cpu_flags(1))):
        with pytest.raises(OSError) as info:
            attempt()
        assert info.value.errno == errno.EINVAL
        assert "never merged" in str(info.value) and "affinity" in str(info.value)
    assert err_of(m.lookup, 0) == errno.ENOENT  # nothing was inserted
