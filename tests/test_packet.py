"""pybpf.packet: frames built with valid checksums, parsed back; the kernel accepts them."""

from __future__ import annotations

import socket
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pybpf import netns
from pybpf.packet import (
    ETH_P_IP,
    ETH_P_IPV6,
    IP_DF,
    IPPROTO_TCP,
    IPPROTO_UDP,
    TCP_PSH,
    ipv4_header_ok,
    l4_checksum_ok,
    mac_bytes,
    parse,
    tcp_frame,
    udp_frame,
)

DST, SRC = "02:00:00:00:00:02", "02:00:00:00:00:01"


def test_udp_ipv4_frame_has_the_fields_asked_for_and_valid_checksums():
    frame = udp_frame(DST, SRC, "10.0.0.1", "10.0.0.2", 1234, 9000, b"hello", ident=7)
    h = parse(frame)
    assert (h.proto, h.l3, h.l4, h.l4_proto, h.payload, h.end) == (ETH_P_IP, 14, 34,
                                                                   IPPROTO_UDP, 42, 47)
    assert frame[:6] == mac_bytes(DST) and frame[6:12] == mac_bytes(SRC)
    assert (h.sport, h.dport) == (1234, 9000)
    assert struct.unpack_from("!HH", frame, 18) == (7, IP_DF)
    assert ipv4_header_ok(frame, h) and l4_checksum_ok(frame, h)
    assert frame[h.payload:h.end] == b"hello"


def test_udp_checksum_can_be_left_out_on_ipv4_only_as_zero():
    frame = udp_frame(DST, SRC, "10.0.0.1", "10.0.0.2", 1, 2, b"x", udp_csum=False, df=False)
    h = parse(frame)
    assert frame[h.l4 + 6:h.l4 + 8] == b"\0\0"
    assert struct.unpack_from("!H", frame, 20)[0] == 0  # no DF
    assert l4_checksum_ok(frame, h)  # zero means "none" on IPv4


def test_ipv6_and_tcp_frames_parse_and_verify():
    v6 = udp_frame(DST, SRC, "fd00::1", "fd00::2", 5, 6, b"abc")
    h = parse(v6)
    assert (h.proto, h.l4, h.payload) == (ETH_P_IPV6, 54, 62)
    assert l4_checksum_ok(v6, h)
    tcp = tcp_frame(DST, SRC, "10.0.0.1", "10.0.0.2", 80, 81, b"data", seq=100,
                    flags=TCP_PSH)
    h = parse(tcp)
    assert (h.l4_proto, h.payload - h.l4) == (IPPROTO_TCP, 20)
    assert l4_checksum_ok(tcp, h) and tcp[h.payload:] == b"data"


def test_short_or_foreign_frames_parse_to_none_or_stop_early():
    assert parse(b"\0" * 10) is None
    assert parse(bytes(12) + b"\x08\x06" + bytes(28)) is None  # ARP
    frame = udp_frame(DST, SRC, "10.0.0.1", "10.0.0.2", 1, 2, b"xyz")
    assert parse(frame[:40]).l4 == 0  # the IP datagram is cut short


@given(payload=st.binary(max_size=200), ports=st.tuples(st.integers(0, 65535),
                                                        st.integers(0, 65535)),
       v6=st.booleans(), flip=st.integers(0, 10**6))
def test_any_udp_frame_verifies_and_any_flipped_segment_byte_does_not(payload, ports, v6,
                                                                         flip):
    src, dst = ("fd00::1", "fd00::2") if v6 else ("10.1.2.3", "10.4.5.6")
    frame = bytearray(udp_frame(DST, SRC, src, dst, *ports, payload))
    h = parse(frame)
    assert l4_checksum_ok(frame, h) and frame[h.payload:h.end] == payload
    pos = h.l4 + flip % (h.end - h.l4)
    if pos in (h.l4 + 6, h.l4 + 7) and not v6:
        return  # flipping the checksum itself into 0 could read as "no checksum"
    frame[pos] ^= 0x01
    assert not l4_checksum_ok(frame, h)


@pytest.mark.skipif(netns.unavailable() is not None, reason=str(netns.unavailable()))
def test_the_kernel_delivers_a_built_frame_to_a_udp_socket():
    """Valid checksums as the kernel sees them: a frame sent raw into a veth reaches UDP."""
    with netns.NetNamespace() as ns:
        ns.add_veth("vA", "vB")
        ns.add_address("vB", "10.9.0.2/24")
        with ns.entered():
            rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            rx.bind(("10.9.0.2", 9000))
            rx.settimeout(5)
            tx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
            tx.bind(("vA", 0))
            frame = udp_frame(ns.mac("vB"), ns.mac("vA"), "10.9.0.1", "10.9.0.2", 4321, 9000,
                              b"checked by the kernel")
            tx.send(frame)
            data, addr = rx.recvfrom(100)
            tx.close()
            rx.close()
    assert data == b"checked by the kernel" and addr == ("10.9.0.1", 4321)
