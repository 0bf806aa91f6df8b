"""Ethernet, IPv4, IPv6, UDP and TCP headers: build frames with valid checksums, read them back.

What the traffic generators, the emulated receive path (GRO, the stack) and the tests share.

Rules this module keeps:
- Frames are ``bytes`` exactly as on the wire; every multi-byte field is big-endian.
- Built frames carry valid checksums (IPv4 header; UDP and TCP over their pseudo-header)
  unless asked otherwise (``udp_csum=False`` leaves the UDP checksum 0, "none" on IPv4).
- ``parse`` never raises on a short or odd frame: it answers None, or a ``Headers`` whose
  fields say how far it could read (``l4_proto`` 0 when the L4 header is missing).
"""

from __future__ import annotations

import ipaddress
import struct
from dataclasses import dataclass

ETH_HLEN = 14
ETH_ALEN = 6
ETH_P_IP = 0x0800
ETH_P_IPV6 = 0x86DD
IPPROTO_TCP = 6
IPPROTO_UDP = 17
IP_DF = 0x4000
IP_MF = 0x2000
IP_OFFSET = 0x1FFF
IPV4_HLEN = 20
IPV6_HLEN = 40
UDP_HLEN = 8
TCP_HLEN = 20
# TCP flags (the low byte of the flags word)
TCP_FIN, TCP_SYN, TCP_RST, TCP_PSH, TCP_ACK, TCP_URG, TCP_ECE, TCP_CWR = (
    1 << n for n in range(8))

_ETH = struct.Struct("!6s6sH")
_IPV4 = struct.Struct("!BBHHHBBH4s4s")
_IPV6 = struct.Struct("!IHBB16s16s")
_UDP = struct.Struct("!HHHH")
_TCP = struct.Struct("!HHIIBBHHH")


def csum_partial(data: bytes | bytearray | memoryview, initial: int = 0) -> int:
    """The ones' complement sum of ``data`` as 16-bit big-endian words, not yet folded."""
    if len(data) % 2:
        data = bytes(data) + b"\0"
    return initial + sum(struct.unpack(f"!{len(data) // 2}H", data))


def csum_fold(total: int) -> int:
    """Fold a partial sum to 16 bits and complement it (the checksum field's value)."""
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def pseudo_header_sum(saddr: bytes, daddr: bytes, proto: int, length: int) -> int:
    """Partial sum of the IPv4 or IPv6 pseudo-header (by the address length)."""
    if len(saddr) == 4:
        return csum_partial(saddr + daddr + struct.pack("!BBH", 0, proto, length))
    return csum_partial(saddr + daddr + struct.pack("!IxxxB", length, proto))


def l4_checksum(saddr: bytes, daddr: bytes, proto: int, segment: bytes | bytearray) -> int:
    """The UDP or TCP checksum of ``segment`` (its checksum field counted as it stands);
    a UDP result of 0 is sent as 0xFFFF, since 0 means "no checksum"."""
    value = csum_fold(csum_partial(segment, pseudo_header_sum(saddr, daddr, proto,
                                                              len(segment))))
    return 0xFFFF if proto == IPPROTO_UDP and value == 0 else value


def addr_bytes(addr: str | bytes | ipaddress.IPv4Address | ipaddress.IPv6Address) -> bytes:
    """An IPv4 or IPv6 address as its 4 or 16 bytes."""
    if isinstance(addr, bytes) and len(addr) in (4, 16):
        return addr
    return ipaddress.ip_address(addr).packed


def mac_bytes(mac: str | bytes) -> bytes:
    """A MAC address (``"02:00:00:00:00:01"`` or 6 bytes) as 6 bytes."""
    if isinstance(mac, bytes):
        if len(mac) != ETH_ALEN:
            raise ValueError(f"a MAC address is 6 bytes, got {len(mac)}")
        return mac
    raw = bytes.fromhex(mac.replace(":", "").replace("-", ""))
    if len(raw) != ETH_ALEN:
        raise ValueError(f"MAC address {mac!r}: six hex pairs, like 02:00:00:00:00:01")
    return raw


def ethhdr(dst: str | bytes, src: str | bytes, proto: int) -> bytes:
    return _ETH.pack(mac_bytes(dst), mac_bytes(src), proto)


def iphdr(saddr: bytes, daddr: bytes, proto: int, payload_len: int, *, ident: int = 0,
          df: bool = True, ttl: int = 64, tos: int = 0) -> bytes:
    """A 20-byte IPv4 header with its checksum."""
    fields = [0x45, tos, IPV4_HLEN + payload_len, ident & 0xFFFF, IP_DF if df else 0, ttl,
              proto, 0, saddr, daddr]
    fields[7] = csum_fold(csum_partial(_IPV4.pack(*fields)))
    return _IPV4.pack(*fields)


def ipv6hdr(saddr: bytes, daddr: bytes, nexthdr: int, payload_len: int, *,
            hop_limit: int = 64, tclass: int = 0, flowlabel: int = 0) -> bytes:
    first = (6 << 28) | (tclass << 20) | (flowlabel & 0xFFFFF)
    return _IPV6.pack(first, payload_len, nexthdr, hop_limit, saddr, daddr)


def _ip_frame(dst_mac: str | bytes, src_mac: str | bytes, saddr: str | bytes,
              daddr: str | bytes, proto: int, segment: bytearray, csum_at: int | None,
              ident: int, df: bool, ttl: int) -> bytes:
    src, dst = addr_bytes(saddr), addr_bytes(daddr)
    if len(src) != len(dst):
        raise ValueError("source and destination must both be IPv4 or both IPv6")
    if csum_at is not None:
        struct.pack_into("!H", segment, csum_at, l4_checksum(src, dst, proto, segment))
    if len(src) == 4:
        return (ethhdr(dst_mac, src_mac, ETH_P_IP)
                + iphdr(src, dst, proto, len(segment), ident=ident, df=df, ttl=ttl)
                + segment)
    return (ethhdr(dst_mac, src_mac, ETH_P_IPV6)
            + ipv6hdr(src, dst, proto, len(segment), hop_limit=ttl) + segment)


def udp_frame(dst_mac: str | bytes, src_mac: str | bytes, saddr: str | bytes,
              daddr: str | bytes, sport: int, dport: int, payload: bytes = b"", *,
              ident: int = 0, df: bool = True, ttl: int = 64, udp_csum: bool = True) -> bytes:
    """An Ethernet + IPv4/IPv6 + UDP frame (the family follows the addresses)."""
    segment = bytearray(_UDP.pack(sport, dport, UDP_HLEN + len(payload), 0) + payload)
    return _ip_frame(dst_mac, src_mac, saddr, daddr, IPPROTO_UDP, segment,
                     6 if udp_csum else None, ident, df, ttl)


def tcp_frame(dst_mac: str | bytes, src_mac: str | bytes, saddr: str | bytes,
              daddr: str | bytes, sport: int, dport: int, payload: bytes = b"", *,
              seq: int = 0, ack: int = 0, flags: int = TCP_ACK, window: int = 65535,
              ident: int = 0, df: bool = True, ttl: int = 64) -> bytes:
    """An Ethernet + IPv4/IPv6 + TCP frame with a 20-byte TCP header (no options)."""
    segment = bytearray(_TCP.pack(sport, dport, seq & 0xFFFFFFFF, ack & 0xFFFFFFFF,
                                  (TCP_HLEN // 4) << 4, flags, window, 0, 0) + payload)
    return _ip_frame(dst_mac, src_mac, saddr, daddr, IPPROTO_TCP, segment, 16, ident, df, ttl)


@dataclass(frozen=True)
class Headers:
    """Where a frame's headers are and what they say (offsets into the frame)."""

    proto: int  # the Ethernet type
    l3: int  # offset of the IP header
    l4: int  # offset of the UDP/TCP header (0: none)
    l4_proto: int  # IPPROTO_UDP, IPPROTO_TCP, or 0 when not reached
    payload: int  # offset of the L4 payload
    end: int  # offset after the IP datagram (trailing padding excluded)
    saddr: bytes = b""
    daddr: bytes = b""
    sport: int = 0
    dport: int = 0


def parse(frame: bytes | bytearray | memoryview) -> Headers | None:
    """The headers of an Ethernet frame carrying IPv4 or IPv6; None when it does not."""
    if len(frame) < ETH_HLEN:
        return None
    proto = struct.unpack_from("!H", frame, 12)[0]
    l3 = ETH_HLEN
    if proto == ETH_P_IP:
        if len(frame) < l3 + IPV4_HLEN or frame[l3] >> 4 != 4:
            return None
        ihl = (frame[l3] & 0xF) * 4
        tot_len, frag = struct.unpack_from("!H2xH", frame, l3 + 2)
        l4_proto = frame[l3 + 9]
        saddr, daddr = bytes(frame[l3 + 12:l3 + 16]), bytes(frame[l3 + 16:l3 + 20])
        l4, end = l3 + ihl, l3 + tot_len
        if ihl < IPV4_HLEN or end > len(frame) or tot_len < ihl or frag & (IP_MF | IP_OFFSET):
            return Headers(proto, l3, 0, 0, 0, min(end, len(frame)), saddr, daddr)
    elif proto == ETH_P_IPV6:
        if len(frame) < l3 + IPV6_HLEN or frame[l3] >> 4 != 6:
            return None
        payload_len, l4_proto = struct.unpack_from("!HB", frame, l3 + 4)
        saddr, daddr = bytes(frame[l3 + 8:l3 + 24]), bytes(frame[l3 + 24:l3 + 40])
        l4, end = l3 + IPV6_HLEN, l3 + IPV6_HLEN + payload_len
        if end > len(frame):
            return Headers(proto, l3, 0, 0, 0, len(frame), saddr, daddr)
    else:
        return None
    hlen = {IPPROTO_UDP: UDP_HLEN, IPPROTO_TCP: TCP_HLEN}.get(l4_proto)
    if hlen is None or l4 + hlen > end:
        return Headers(proto, l3, 0, 0, 0, end, saddr, daddr)
    sport, dport = struct.unpack_from("!HH", frame, l4)
    if l4_proto == IPPROTO_TCP:
        hlen = (frame[l4 + 12] >> 4) * 4
        if hlen < TCP_HLEN or l4 + hlen > end:
            return Headers(proto, l3, 0, 0, 0, end, saddr, daddr)
    return Headers(proto, l3, l4, l4_proto, l4 + hlen, end, saddr, daddr, sport, dport)


def l4_checksum_ok(frame: bytes | bytearray, h: Headers) -> bool:
    """Whether the UDP/TCP checksum of a parsed frame verifies (a UDP checksum of 0 over
    IPv4 means "none" and passes)."""
    segment = frame[h.l4:h.end]
    if h.l4_proto == IPPROTO_UDP and h.proto == ETH_P_IP and segment[6:8] == b"\0\0":
        return True
    total = csum_partial(segment, pseudo_header_sum(h.saddr, h.daddr, h.l4_proto,
                                                    len(segment)))
    return csum_fold(total) == 0


def ipv4_header_ok(frame: bytes | bytearray, h: Headers) -> bool:
    """Whether the IPv4 header checksum verifies."""
    ihl = (frame[h.l3] & 0xF) * 4
    return csum_fold(csum_partial(frame[h.l3:h.l3 + ihl])) == 0
