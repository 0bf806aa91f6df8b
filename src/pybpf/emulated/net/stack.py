"""The receive path above the devices and the UDP sockets at its end (net/core/dev.c
netif_receive_skb with generic XDP, net/ipv4/ip_input.c, net/ipv6/ip6_input.c,
net/ipv4/udp.c).

Rules this module keeps:
- An skb a device, GRO or cpumap passes up first meets the device's generic-mode XDP program,
  if any (``do_xdp_generic``: PASS goes on, DROP frees, TX sends it back out the device,
  REDIRECT hands it to a cpumap entry or a device). Then IPv4 or IPv6; anything else is
  counted on the device (``rx_nohandler``) and freed.
- IP: a frame for another host's MAC (PACKET_OTHERHOST) is dropped and counted on the device;
  a bad IPv4 header (version, length, checksum) is ``InHdrErrors``; a destination that is
  none of the machine's addresses is ``InAddrErrors`` (no forwarding); Ethernet padding is
  trimmed; UDP and TCP are delivered, other protocols are ``InUnknownProtos``.
- UDP: a short or padded-out datagram is ``InErrors``; a checksum GRO did not already verify
  is checked (a bad one: ``InCsumErrors`` and ``InErrors``; IPv6 needs one); no socket bound
  to the port is ``NoPorts``. A GRO skb reaching a socket without UDP_GRO is split back into
  its datagrams (``udp_rcv_segment``). A socket holding more than its ``rcvbuf`` (counted in
  skb truesize, as ``sk_rmem_alloc``) drops: ``RcvbufErrors`` and ``InErrors``.
  ``InDatagrams`` counts datagrams the application read, as udp_recvmsg does.
- TCP has no sockets here: segments are counted (``InSegs``, GRO segments included) and a
  ``TcpSink`` bound to the port keeps their payloads in arrival order.
- Every skb ends freed to the slab (``kmem_cache_free``): when dropped, or when read.
- Modeled time: each skb up the stack costs ``netif_receive_skb`` (IP and UDP to the socket
  included) on the CPU that passes it up, and a socket's queue line is written by the CPU
  that enqueues and by the one that reads (a reader on another CPU pulls it over each time).
"""

from __future__ import annotations

import collections
import ipaddress
import struct
import threading
from typing import Any, NamedTuple

from ...packet import (
    ETH_P_IP,
    ETH_P_IPV6,
    IP_MF,
    IP_OFFSET,
    IPPROTO_TCP,
    IPPROTO_UDP,
    UDP_HLEN,
    Headers,
    ipv4_header_ok,
    l4_checksum_ok,
    parse,
    udp_frame,
)
from .skbuff import CHECKSUM_UNNECESSARY, PACKET_OTHERHOST, SkBuff

RMEM_DEFAULT = 212992  # net.core.rmem_default
AF_INET, AF_INET6 = 2, 10

SNMP_FIELDS = {
    "Ip": ("InReceives", "InHdrErrors", "InAddrErrors", "InUnknownProtos", "InDiscards",
           "InDelivers"),
    "Udp": ("InDatagrams", "NoPorts", "InErrors", "RcvbufErrors", "InCsumErrors"),
    "Tcp": ("InSegs",),
}


class Datagram(NamedTuple):
    """What one recvmsg on a UDP socket returns: the payload, the UDP_GRO segment size (0
    for a plain datagram), the source address and port."""

    data: bytes
    gso_size: int
    addr: tuple[str, int]

    def segments(self) -> list[bytes]:
        """The datagrams a GRO skb was made of (the payload cut at ``gso_size``)."""
        if not self.gso_size:
            return [self.data]
        size = self.gso_size
        return [self.data[i:i + size] for i in range(0, len(self.data), size)]


class UdpSocket:
    """An emulated UDP socket: bound to (address, port), UDP_GRO on or off, a receive queue
    limited by ``rcvbuf`` bytes of skb truesize."""

    def __init__(self, stack: Stack, family: int, addr: bytes | None, port: int, gro: bool,
                 rcvbuf: int) -> None:
        self.stack = stack
        self.family = family
        self.addr = addr
        self.port = port
        self.gro = gro
        self.rcvbuf = rcvbuf
        self.rmem = 0  # sk_rmem_alloc
        # Modeled time: the line of the receive queue's lock and sk_rmem_alloc, written by
        # the CPU that enqueues and by the one that reads.
        machine = stack.net.machine
        self.queue_line = machine.timing.alloc_region(64, machine.numa_node_id())
        self.queue: collections.deque[tuple[SkBuff, Headers]] = collections.deque()
        self.cond = threading.Condition()
        self.closed = False

    def enqueue(self, skb: SkBuff, h: Headers) -> bool:
        """__udp_enqueue_schedule_skb: False when the receive buffer is full."""
        self.stack.net.access(self.queue_line, write=True)
        with self.cond:
            if self.closed or self.rmem > self.rcvbuf:
                return False
            self.rmem += skb.truesize
            self.queue.append((skb, h))
            self.cond.notify()
        return True

    def recv(self, timeout: float | None = 0.0) -> Datagram | None:
        """The next datagram; None when none arrives within ``timeout`` seconds (0: do not
        wait; None: wait for ever)."""
        with self.cond:
            if not self.queue and timeout != 0.0:
                self.cond.wait_for(lambda: self.queue or self.closed, timeout)
            if not self.queue:
                return None
            skb, h = self.queue.popleft()
            self.rmem -= skb.truesize
        self.stack.net.access(self.queue_line, write=True)
        frame = skb.linearize()
        snmp = self.stack.udp_mib(h)
        snmp["InDatagrams"] += 1
        data = frame[h.payload:h.end]
        gso_size = skb.gso_size if skb.gso_segs > 1 else 0
        addr = (str(ipaddress.ip_address(h.saddr)), h.sport)
        self.stack.free_skb(skb)
        return Datagram(data, gso_size, addr)

    def pending(self) -> int:
        with self.cond:
            return len(self.queue)

    def close(self) -> None:
        with self.cond:
            self.closed = True
            queued, self.queue = list(self.queue), collections.deque()
            self.rmem = 0
            self.cond.notify_all()
        self.stack.unbind(self)
        for skb, _ in queued:
            self.stack.free_skb(skb)

    def __enter__(self) -> UdpSocket:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class TcpSink:
    """Where TCP segments for one port end up: their payloads, in arrival order."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.segments: list[bytes] = []
        self.skbs = 0
        self.lock = threading.Lock()

    def payload(self) -> bytes:
        with self.lock:
            return b"".join(self.segments)


class Stack:
    """The protocol layers of one emulated network namespace."""

    def __init__(self, net: Any) -> None:
        self.net = net
        self._lock = threading.Lock()
        self.snmp: dict[str, dict[str, int]] = {
            table: dict.fromkeys(fields, 0) for table, fields in SNMP_FIELDS.items()}
        self.snmp6: dict[str, dict[str, int]] = {
            f"{table}6": dict.fromkeys(fields, 0) for table, fields in SNMP_FIELDS.items()}
        self.udp_socks: dict[tuple[int, int], list[UdpSocket]] = {}
        self.gro_socks = 0  # sockets with UDP_GRO (the kernel's udp_encap_needed_key)
        self.tcp_sinks: dict[int, TcpSink] = {}

    # -- sockets ----------------------------------------------------------------------------------
    def udp_socket(self, port: int, addr: str | None = None, *, gro: bool = False,
                   rcvbuf: int = RMEM_DEFAULT, family: int = AF_INET) -> UdpSocket:
        """A UDP socket bound to ``port`` (on ``addr``, or every address)."""
        raw = ipaddress.ip_address(addr).packed if addr else None
        if raw is not None:
            family = AF_INET if len(raw) == 4 else AF_INET6
        sock = UdpSocket(self, family, raw, port, gro, rcvbuf)
        with self._lock:
            self.udp_socks.setdefault((family, port), []).append(sock)
            self.gro_socks += gro
        return sock

    def unbind(self, sock: UdpSocket) -> None:
        with self._lock:
            socks = self.udp_socks.get((sock.family, sock.port), [])
            if sock in socks:
                socks.remove(sock)
                self.gro_socks -= sock.gro

    def udp_lookup(self, h: Headers) -> UdpSocket | None:
        family = AF_INET if h.proto == ETH_P_IP else AF_INET6
        socks = self.udp_socks.get((family, h.dport))
        if not socks:
            return None
        exact = [s for s in socks if s.addr == h.daddr]
        return (exact or [s for s in socks if s.addr is None] or [None])[0]

    def udp_gro_sock(self, skb: SkBuff, h: Headers) -> bool | None:
        """For GRO: whether the socket this flow reaches has UDP_GRO (None: no socket).
        Sockets are looked up only once some socket asked for UDP_GRO, as in the kernel."""
        if not self.gro_socks:
            return None
        sock = self.udp_lookup(h)
        return None if sock is None else sock.gro

    def tcp_sink(self, port: int) -> TcpSink:
        with self._lock:
            return self.tcp_sinks.setdefault(port, TcpSink(port))

    def udp_mib(self, h: Headers) -> dict[str, int]:
        return self.snmp["Udp"] if h.proto == ETH_P_IP else self.snmp6["Udp6"]

    def free_skb(self, skb: SkBuff) -> None:
        self.net.skb_cache.kmem_cache_free(skb)

    # -- receive ----------------------------------------------------------------------------------
    def netif_receive_skb_list(self, skbs: list[SkBuff]) -> None:
        for skb in skbs:
            self.netif_receive_skb(skb)

    def netif_receive_skb(self, skb: SkBuff) -> None:
        self.net.charge("netif_receive_skb")
        dev = skb.dev
        if dev.xdp_generic_prog is not None and not skb.redirected \
                and not self.net.do_xdp_generic(skb):
            return
        if skb.protocol == ETH_P_IP or skb.protocol == ETH_P_IPV6:
            self.ip_rcv(skb)
        else:
            dev.count("rx_nohandler")
            self.free_skb(skb)

    def ip_rcv(self, skb: SkBuff) -> None:
        v4 = skb.protocol == ETH_P_IP
        mib = self.snmp["Ip"] if v4 else self.snmp6["Ip6"]
        if skb.pkt_type == PACKET_OTHERHOST:
            skb.dev.count("rx_otherhost_dropped")
            self.free_skb(skb)
            return
        mib["InReceives"] += 1
        frame = skb.linearize() if skb.frags else skb.data
        h = parse(frame)
        if h is None or (v4 and not ipv4_header_ok(frame, h)):
            mib["InHdrErrors"] += 1
            self.free_skb(skb)
            return
        if len(skb.data) > h.end and not skb.frags:
            del skb.data[h.end:]  # pskb_trim_rcsum: Ethernet padding goes
        if not self.net.is_local_address(h.daddr):
            mib["InAddrErrors"] += 1
            self.free_skb(skb)
            return
        if v4 and struct.unpack_from("!H", skb.data, h.l3 + 6)[0] & (IP_MF | IP_OFFSET):
            mib["InDiscards"] += 1  # fragments are not reassembled here
            self.free_skb(skb)
            return
        mib["InDelivers"] += 1
        if h.l4_proto == IPPROTO_UDP:
            self.udp_rcv(skb, h)
        elif h.l4_proto == IPPROTO_TCP:
            self.tcp_rcv(skb, h)
        else:
            mib["InUnknownProtos"] += 1
            self.free_skb(skb)

    def udp_rcv(self, skb: SkBuff, h: Headers) -> None:
        mib = self.udp_mib(h)
        ulen = struct.unpack_from("!H", skb.data, h.l4 + 4)[0]
        if ulen < UDP_HLEN or ulen > skb.len - h.l4:
            mib["InErrors"] += 1
            self.free_skb(skb)
            return
        if skb.ip_summed != CHECKSUM_UNNECESSARY and not self._udp_csum_ok(skb, h):
            mib["InCsumErrors"] += 1
            mib["InErrors"] += 1
            self.free_skb(skb)
            return
        sock = self.udp_lookup(h)
        if sock is None:
            mib["NoPorts"] += 1
            self.free_skb(skb)
            return
        if skb.gso_segs > 1 and not sock.gro:
            for seg, seg_h in self._udp_rcv_segment(skb, h):
                self._udp_queue(sock, seg, seg_h, mib)
            return
        self._udp_queue(sock, skb, h, mib)

    def _udp_csum_ok(self, skb: SkBuff, h: Headers) -> bool:
        check = skb.data[h.l4 + 6:h.l4 + 8]
        if check == b"\0\0":
            return h.proto == ETH_P_IP  # "no checksum" exists only for IPv4
        return l4_checksum_ok(skb.linearize(), h)

    def _udp_queue(self, sock: UdpSocket, skb: SkBuff, h: Headers, mib: dict) -> None:
        if not sock.enqueue(skb, h):
            mib["RcvbufErrors"] += 1
            mib["InErrors"] += 1
            self.free_skb(skb)

    def _udp_rcv_segment(self, skb: SkBuff, h: Headers) -> list[tuple[SkBuff, Headers]]:
        """__udp_gso_segment: one skb per original datagram, headers rebuilt."""
        frame = skb.linearize()
        payload = frame[h.payload:h.end]
        size = skb.gso_size
        ttl = frame[h.l3 + 8] if h.proto == ETH_P_IP else frame[h.l3 + 7]
        ident = struct.unpack_from("!H", frame, h.l3 + 4)[0] if h.proto == ETH_P_IP else 0
        segments = []
        for n, start in enumerate(range(0, len(payload), size)):
            seg = self.net.skb_cache.kmem_cache_alloc_bulk(1)[0] if n else skb
            data = udp_frame(frame[0:6], frame[6:12], h.saddr, h.daddr, h.sport, h.dport,
                             payload[start:start + size], ident=ident + n, ttl=ttl)
            seg.data, seg.frags = bytearray(data), []
            seg.dev, seg.protocol, seg.gso_size, seg.gso_segs = skb.dev, skb.protocol, 0, 0
            seg.ip_summed = CHECKSUM_UNNECESSARY
            seg.truesize = skb.truesize // max(1, skb.gso_segs)
            segments.append((seg, parse(seg.data)))
        return segments

    def tcp_rcv(self, skb: SkBuff, h: Headers) -> None:
        mib = self.snmp["Tcp"] if h.proto == ETH_P_IP else self.snmp6["Tcp6"]
        mib["InSegs"] += max(1, skb.gso_segs)
        sink = self.tcp_sinks.get(h.dport)
        if sink is not None:
            frame = skb.linearize()
            with sink.lock:
                sink.segments.append(frame[h.payload:h.end])
                sink.skbs += 1
        self.free_skb(skb)

    def counters(self) -> dict[str, dict[str, int]]:
        """The SNMP tables, as /proc/net/snmp and /proc/net/snmp6 show them."""
        return {table: dict(fields) for table, fields in {**self.snmp, **self.snmp6}.items()}

