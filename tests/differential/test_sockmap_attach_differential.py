"""Programs on sockmaps, kernel against emulated: BPF_PROG_ATTACH / DETACH and BPF_LINK_CREATE
of SK_SKB and SK_MSG programs on SOCKMAP and SOCKHASH (net/core/sock_map.c
sock_map_get_from_fd, sock_map_prog_detach, sock_map_prog_update, sock_map_link_create;
kernel/bpf/syscall.c bpf_prog_attach / bpf_prog_detach / link_create). Each scenario runs the
same steps on both backends and records the errno of every step (0: success); the records
must be equal."""

from __future__ import annotations

import socket

import pytest

from helpers import errno_of, u32
from pybpf.asm import R0, assemble, encode, exit_, mov64
from pybpf.uapi import AttachType, MapType, ProgType

SV, SP, SKV, MSG = (AttachType.SK_SKB_STREAM_VERDICT, AttachType.SK_SKB_STREAM_PARSER,
                    AttachType.SK_SKB_VERDICT, AttachType.SK_MSG_VERDICT)
CLOSED_FD = 99_999  # an fd number nothing opens (a closed fd's number would be reused)
RET1 = encode(assemble([mov64(R0, 1), exit_()]).instructions)


class Lab:
    """Maps, programs and sockets of one scenario on one backend, and the errno log."""

    def __init__(self, sys) -> None:
        self.sys = sys
        self.fds: list[int] = []
        self.socks: list[socket.socket] = []
        self.log: list[tuple[str, int]] = []

    def keep(self, fd: int) -> int:
        self.fds.append(fd)
        return fd

    def sockmap(self, map_type=MapType.SOCKMAP, entries=4) -> int:
        return self.keep(self.sys.map_create(map_type, 4, 4, entries))

    def prog(self, prog_type=ProgType.SK_SKB, expected_attach_type=0) -> int:
        return self.keep(self.sys.prog_load(prog_type, RET1,
                                            expected_attach_type=expected_attach_type))

    def step(self, name: str, fn, *args, **kwargs):
        result = None

        def call():
            nonlocal result
            result = fn(*args, **kwargs)

        self.log.append((name, errno_of(call)))
        return result

    def link(self, name: str, prog: int, target: int, attach_type: int, flags: int = 0):
        fd = self.step(name, self.sys.link_create, prog, target, attach_type, flags)
        if fd is not None:
            self.keep(fd)
        return fd

    def tcp_pair(self) -> tuple[socket.socket, socket.socket]:
        lst = socket.create_server(("127.0.0.1", 0))
        cli = socket.create_connection(lst.getsockname())
        srv, _ = lst.accept()
        lst.close()
        self.socks += [cli, srv]
        return cli, srv

    def close(self) -> None:
        for fd in reversed(self.fds):
            try:
                self.sys.close(fd)
            except OSError:
                pass
        for sock in self.socks:
            sock.close()


def attach_rules(lab: Lab) -> None:
    sys = lab.sys
    for map_type in (MapType.SOCKMAP, MapType.SOCKHASH):
        m = lab.sockmap(map_type)
        skb, skb2, msg = lab.prog(), lab.prog(), lab.prog(ProgType.SK_MSG)
        lab.step("verdict", sys.prog_attach, skb, m, SV)
        lab.step("verdict again", sys.prog_attach, skb, m, SV)
        lab.step("verdict replaced", sys.prog_attach, skb2, m, SV)
        lab.step("skb_verdict beside stream_verdict", sys.prog_attach, skb, m, SKV)
        lab.step("parser", sys.prog_attach, skb, m, SP)
        lab.step("msg", sys.prog_attach, msg, m, MSG)
        lab.step("msg prog as verdict", sys.prog_attach, msg, m, SV)
        lab.step("skb prog as msg", sys.prog_attach, skb, m, MSG)
        lab.step("detach other prog", sys.prog_detach, m, SV, skb)
        lab.step("detach verdict", sys.prog_detach, m, SV, skb2)
        lab.step("detach verdict twice", sys.prog_detach, m, SV, skb2)
        lab.step("skb_verdict now", sys.prog_attach, skb, m, SKV)
        lab.step("stream_verdict beside skb_verdict", sys.prog_attach, skb, m, SV)
        lab.step("detach stream_verdict beside skb_verdict", sys.prog_detach, m, SV, skb)
        lab.step("detach skb_verdict", sys.prog_detach, m, SKV, skb)
        lab.step("detach msg with skb prog", sys.prog_detach, m, MSG, skb)
        lab.step("detach msg", sys.prog_detach, m, MSG, msg)
        lab.step("detach parser", sys.prog_detach, m, SP, skb)
        lab.step("detach parser twice", sys.prog_detach, m, SP, skb)


def attach_arguments(lab: Lab) -> None:
    sys = lab.sys
    m = lab.sockmap()
    skb = lab.prog()
    array = lab.keep(sys.map_create(MapType.ARRAY, 4, 4, 1))
    xdp = lab.prog(ProgType.XDP)
    sock, _ = lab.tcp_pair()
    closed = CLOSED_FD
    for flags in (1, 2, 4, 8):
        lab.step(f"attach_flags {flags}", sys.prog_attach, skb, m, SV, flags)
        lab.step(f"attach_flags {flags}, closed prog", sys.prog_attach, closed, m, SV, flags)
    lab.step("replace fd", sys.prog_attach, skb, m, SV, 0, skb)
    lab.step("replace fd, closed prog", sys.prog_attach, closed, m, SV, 0, skb)
    lab.step("unknown attach type", sys.prog_attach, skb, m, 250)
    lab.step("xdp attach type", sys.prog_attach, skb, m, AttachType.XDP)
    lab.step("closed prog", sys.prog_attach, closed, m, SV)
    lab.step("map as prog", sys.prog_attach, m, m, SV)
    lab.step("xdp prog", sys.prog_attach, xdp, m, SV)
    lab.step("array target", sys.prog_attach, skb, array, SV)
    lab.step("socket target", sys.prog_attach, skb, sock.fileno(), SV)
    lab.step("closed target", sys.prog_attach, skb, closed, SV)
    lab.step("prog as target", sys.prog_attach, skb, skb, SV)
    lab.step("expected_attach_type verdict as parser", sys.prog_attach,
             lab.prog(expected_attach_type=SKV), m, SP)
    lab.step("expected_attach_type parser as verdict", sys.prog_attach,
             lab.prog(expected_attach_type=SP), m, SV)
    lab.step("detach nothing attached", sys.prog_detach, m, SV, skb)
    lab.step("detach unknown type", sys.prog_detach, m, 250, skb)
    lab.step("detach array", sys.prog_detach, array, SV, skb)
    lab.step("detach closed target", sys.prog_detach, closed, SV, skb)
    lab.step("detach socket target", sys.prog_detach, sock.fileno(), SV, skb)
    lab.step("detach closed prog", sys.prog_detach, m, SV, closed)
    lab.step("detach xdp prog", sys.prog_detach, m, SV, xdp)
    lab.step("detach map as prog", sys.prog_detach, m, SV, m)
    lab.step("detach array, closed prog", sys.prog_detach, array, SV, closed)
    lab.step("detach closed target, closed prog", sys.prog_detach, closed, SV, closed)


def link_rules(lab: Lab) -> None:
    sys = lab.sys
    for map_type in (MapType.SOCKMAP, MapType.SOCKHASH):
        m = lab.sockmap(map_type)
        skb, skb2, msg = lab.prog(), lab.prog(), lab.prog(ProgType.SK_MSG)
        link = lab.link("link verdict", skb, m, SV)
        lab.link("second link verdict", skb2, m, SV)
        lab.step("attach over link", sys.prog_attach, skb2, m, SV)
        lab.step("detach linked prog", sys.prog_detach, m, SV, skb)
        lab.link("link skb_verdict beside", skb, m, SKV)
        lab.step("attach skb_verdict beside link", sys.prog_attach, skb, m, SKV)
        if link is not None:
            sys.close(link)
            lab.fds.remove(link)
        lab.step("attach after link closed", sys.prog_attach, skb2, m, SV)
        lab.link("link over attached prog", skb, m, SV)
        lab.step("detach the attached prog after link", sys.prog_detach, m, SV, skb2)
        lab.link("link msg", msg, m, MSG)
        lab.link("link parser", skb, m, SP)
        lab.link("link msg prog as verdict", msg, m, SKV)
        lab.link("link skb prog as msg", skb, m, MSG)


def link_arguments(lab: Lab) -> None:
    sys = lab.sys
    m = lab.sockmap()
    skb = lab.prog()
    array = lab.keep(sys.map_create(MapType.ARRAY, 4, 4, 1))
    sock, _ = lab.tcp_pair()
    closed = CLOSED_FD
    lab.link("flags", skb, m, SV, 1)
    lab.link("flags, array", skb, array, SV, 1)
    lab.link("array", skb, array, SV)
    lab.link("socket", skb, sock.fileno(), SV)
    lab.link("closed target", skb, closed, SV)
    lab.link("prog as target", skb, skb, SV)
    lab.link("closed prog", closed, m, SV)
    lab.link("unknown type", skb, m, 250)
    lab.link("xdp type", skb, m, AttachType.XDP)


def insert_rules(lab: Lab) -> None:
    """A socket may be in several maps, but only one of them may give it a verdict program
    (sock_map_link: EBUSY), and a socket takes programs when inserted."""
    sys = lab.sys
    a, b = lab.sockmap(), lab.sockmap(MapType.SOCKHASH)
    c = lab.sockmap()
    skb, msg = lab.prog(), lab.prog(ProgType.SK_MSG)
    cli, srv = lab.tcp_pair()
    lab.step("verdict on a", sys.prog_attach, skb, a, SV)
    lab.step("verdict on b", sys.prog_attach, skb, b, SKV)
    lab.step("msg on c", sys.prog_attach, msg, c, MSG)
    lab.step("insert in a", sys.map_update_elem, a, u32(0), u32(cli.fileno()))
    lab.step("insert in b too", sys.map_update_elem, b, u32(0), u32(cli.fileno()))
    lab.step("insert in c too", sys.map_update_elem, c, u32(0), u32(cli.fileno()))
    lab.step("insert in a again", sys.map_update_elem, a, u32(1), u32(cli.fileno()))
    lab.step("other in b", sys.map_update_elem, b, u32(0), u32(srv.fileno()))
    lab.step("delete from a", sys.map_delete_elem, a, u32(0))
    lab.step("delete from a again", sys.map_delete_elem, a, u32(1))
    lab.step("now in b", sys.map_update_elem, b, u32(1), u32(cli.fileno()))


SCENARIOS = [attach_rules, attach_arguments, link_rules, link_arguments, insert_rules]


def run_scenario(sys, scenario) -> list[tuple[str, int]]:
    lab = Lab(sys)
    try:
        scenario(lab)
    finally:
        lab.close()
    return lab.log


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.__name__)
def test_sockmap_programs_match_the_kernel(kernel, emulated, scenario):
    assert run_scenario(emulated, scenario) == run_scenario(kernel, scenario)
