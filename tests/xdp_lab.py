"""A small emulated network for the XDP data path tests: programs, a veth pair, traffic."""

from __future__ import annotations

import struct

import pybpf
from pybpf.asm import FP, R0, R1, R2, R3, R6
from pybpf.asm import builder as b
from pybpf.emulated import XdpBuff, bpf_test_run_xdp_live, net_of
from pybpf.packet import udp_frame
from pybpf.programs import Program, ProgramSpec
from pybpf.uapi import AttachType, MapType, ProgType

XDP_ABORTED, XDP_DROP, XDP_PASS, XDP_TX, XDP_REDIRECT = range(5)
PORT = 9000


def u32(value: int) -> bytes:
    return value.to_bytes(4, "little")


def xdp(system, items, maps=None, attach=AttachType.XDP) -> Program:
    return Program.load(ProgramSpec(ProgType.XDP, items, expected_attach_type=attach),
                        system, maps=maps or {})


def redirect_prog(system, map_fd: int, key: int, flags: int = 0) -> Program:
    return xdp(system, [b.ld_map_fd(R1, "m"), b.mov64(R2, key), b.mov64(R3, flags),
                        b.call("redirect_map"), b.exit_()], {"m": map_fd})


def action_prog(system, action: int, attach=AttachType.XDP) -> Program:
    return xdp(system, [b.mov64(R0, action), b.exit_()], attach=attach)


def cpu_recorder(system, array_fd: int, action: int = XDP_PASS) -> Program:
    """A cpumap program that stores the CPU it runs on in array[0] and counts in array[1]."""
    return xdp(system, [
        b.call("get_smp_processor_id"), b.mov64(R6, R0),
        b.st(4, FP, -4, 0), b.mov64(R2, FP), b.add64(R2, -4), b.ld_map_fd(R1, "a"),
        b.call("map_lookup_elem"), b.jeq(R0, 0, "out"), b.stx(4, R0, 0, R6),
        b.st(4, FP, -4, 1), b.mov64(R2, FP), b.add64(R2, -4), b.ld_map_fd(R1, "a"),
        b.call("map_lookup_elem"), b.jeq(R0, 0, "out"), b.mov64(R1, 1),
        b.atomic(4, 0, R0, 0, R1),
        b.label("out"), b.mov64(R0, action), b.exit_()],
        {"a": array_fd}, attach=AttachType.XDP_CPUMAP)


class Lab:
    """An emulated machine with vA <-> vB (vB 10.0.0.2) and a UDP socket on vB's port."""

    def __init__(self, cpus: int = 2, *, gro: bool = True, sock_gro: bool = True,
                 rcvbuf: int = 212992, **system_options) -> None:
        self.system = pybpf.system("emulated", cpus=cpus, **system_options)
        self.net = net_of(self.system.machine)
        self.vA, self.vB = self.net.add_veth("vA", "vB")
        self.vB.add_address("10.0.0.2")
        self.vB.set_gro(gro)
        self.sock = self.net.stack.udp_socket(PORT, gro=sock_gro, rcvbuf=rcvbuf)
        self.progs: list[Program] = []

    def frame(self, payload: bytes = b"x" * 18, ident: int = 0, **kw) -> bytes:
        return udp_frame(self.vB.mac, self.vA.mac, "10.0.0.1", "10.0.0.2", 1234, PORT,
                         payload, ident=ident, **kw)

    def cpumap(self, max_entries: int = 2) -> int:
        return self.system.map_create(MapType.CPUMAP, 4, 8, max_entries)

    def set_entry(self, fd: int, cpu: int, qsize: int, prog: Program | None = None) -> None:
        self.system.map_update_elem(fd, u32(cpu), struct.pack("<Ii", qsize,
                                                               prog.fd if prog else 0))

    def entry(self, fd: int, cpu: int):
        return self.system.map_from_fd(fd).cpu_map[cpu]

    def attach(self, dev, prog: Program, flags: int = 0) -> None:
        self.net.dev_xdp_attach(dev, self.system.prog_from_fd(prog.fd), flags=flags)

    def live(self, prog: Program, frame: bytes, repeat: int, batch: int = 64,
             dev=None, queue: int = 0) -> None:
        """Live-frames test runs of ``prog`` on ``frame`` arriving at ``dev`` (vB)."""
        template = XdpBuff.from_bytes(frame, dev or self.vB, queue)
        bpf_test_run_xdp_live(self.system.prog_from_fd(prog.fd), template, repeat, batch)

    def close(self) -> None:
        """Remove the devices (their XDP programs go) and close every fd the lab's system
        holds: maps go, and their kthreads with them."""
        for dev in list(self.net.devices.values()):
            if dev.ifindex != 1:
                self.net.del_device(dev)
        for fd in self.system.open_fds():
            self.system.close(fd)

    def drain(self) -> list[bytes]:
        """Every UDP datagram the socket holds, GRO skbs cut back into datagrams."""
        out = []
        while (dgram := self.sock.recv()) is not None:
            out += dgram.segments()
        return out
