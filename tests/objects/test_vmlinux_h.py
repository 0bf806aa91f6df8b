"""A program written the modern way, against bpftool's vmlinux.h: every struct there is
preserve_access_index, so each packet-header field it reads is a CO-RE relocation, resolved
against the kernel's BTF on the kernel and against the emulated kernel's own BTF
(prog/btf.py's ``PACKET_HEADERS``) on the emulated one. The program
(vmlinux_h/packet_headers.c) reads every header the emulated BTF describes into a global
struct; crafted frames run through it on both backends must leave the same struct, with the
values the frame holds.

vmlinux.h is generated here from this machine's /sys/kernel/btf/vmlinux (the emulated backend
itself never reads the host's BTF); without bpftool or that file the tests skip."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

import pybpf
from pybpf.bpf_object import Object, ObjectSpec
from pybpf.btf import VMLINUX
from pybpf.packet import csum_fold, csum_partial, ethhdr, iphdr, ipv6hdr
from pybpf.testing import KERNEL_SKIP_REASON, kernel_available
from pybpf.testing.clang import CLANG_SKIP_REASON, clang_available, compile_bpf

SOURCE = Path(__file__).parent / "vmlinux_h" / "packet_headers.c"
MAC_A, MAC_B = "02:00:00:00:00:a1", "0a:00:00:00:00:b2"
SRC4, DST4 = bytes([10, 1, 2, 3]), bytes([192, 168, 7, 9])
SRC6 = bytes.fromhex("20010db8000000000000000000000001")
DST6 = bytes.fromhex("fe800000000000000000000000c0ffee")
ETH_P_IP, ETH_P_ARP, ETH_P_8021Q, ETH_P_IPV6 = 0x0800, 0x0806, 0x8100, 0x86DD
XDP_ABORTED, XDP_PASS = 0, 2


@pytest.fixture(scope="module")
def packet_headers_object(tmp_path_factory) -> Path:
    """packet_headers.c compiled against this machine's vmlinux.h."""
    if not clang_available():
        pytest.skip(CLANG_SKIP_REASON)
    if not os.path.exists(VMLINUX):
        pytest.skip(f"{VMLINUX} is missing: no vmlinux.h can be generated on this kernel "
                    "(built without CONFIG_DEBUG_INFO_BTF)")
    bpftool = shutil.which("bpftool")
    if bpftool is None:
        pytest.skip("bpftool is not installed (apt-get install bpftool): vmlinux.h cannot be "
                    "generated")
    out = tmp_path_factory.mktemp("vmlinux-h")
    header = subprocess.run([bpftool, "btf", "dump", "file", VMLINUX, "format", "c"],
                            check=True, capture_output=True, text=True).stdout
    (out / "vmlinux.h").write_text(header)
    return compile_bpf(SOURCE, out, flags=(f"-I{out}",))


def tcp(sport: int, dport: int, seq: int, ack: int, flags: int, *, doff: int = 5,
        res1: int = 0, ae: int = 0, window: int = 1000, check: int = 0x1234,
        urg_ptr: int = 0) -> bytes:
    """A TCP header; its 13th byte holds doff, res1 and ae as the bitfields lay them out."""
    return struct.pack("!HHIIBBHHH", sport, dport, seq, ack, doff << 4 | res1 << 1 | ae,
                       flags, window, check, urg_ptr) + bytes(4 * doff - 20)


def ipv4(proto: int, segment: bytes, *, tos: int = 0, ident: int = 0, ttl: int = 64) -> bytes:
    return iphdr(SRC4, DST4, proto, len(segment), ident=ident, ttl=ttl, tos=tos) + segment


def ipv6(nexthdr: int, segment: bytes, *, tclass: int = 0, flowlabel: int = 0,
         hop_limit: int = 64) -> bytes:
    return ipv6hdr(SRC6, DST6, nexthdr, len(segment), hop_limit=hop_limit, tclass=tclass,
                   flowlabel=flowlabel) + segment


def icmp_echo(kind: int, ident: int, seq: int) -> bytes:
    header = struct.pack("!BBHHH", kind, 0, 0, ident, seq)
    return header[:2] + struct.pack("!H", csum_fold(csum_partial(header))) + header[4:]


def le16(frame: bytes, off: int) -> int:
    """A __be16 or __sum16 field as a program reads it without ntohs (host order)."""
    return struct.unpack_from("<H", frame, off)[0]


def ipv4_fields(frame: bytes, l3: int, **fields: int) -> dict[str, int]:
    """What the parser sets for the IPv4 header at ``l3`` (built by ``ipv4``): its fixed
    fields, its checksum field, and the header's sum through bpf_csum_diff (0xffff: right)."""
    return {"eth_proto": ETH_P_IP, "ip_ihl": 5, "ip_version": 4, "ip_ttl": 64,
            "ip_frag_off": 0x4000, "ip_saddr": 0x0A010203, "ip_daddr": 0xC0A80709,
            "ip_addrs_daddr": 0xC0A80709, "ip_check": le16(frame, l3 + 10),
            "ip_tot_len": len(frame) - l3, "ip_csum": 0xFFFF, **fields}


IPV6 = {"eth_proto": ETH_P_IPV6, "ip6_version": 6, "ip6_hop_limit": 64,
        "ip6_saddr32_0": 0x20010DB8, "ip6_daddr8_15": 0xEE, "ip6_addrs_daddr16_7": 0xFFEE}

IPV4_TCP = ethhdr(MAC_B, MAC_A, ETH_P_IP) + ipv4(6, tcp(
    4321, 80, 0x01020304, 0xA0B0C0D0, 0x12, doff=6, res1=5, ae=1, urg_ptr=7), tos=0x28,
    ident=0xBEEF, ttl=0x16)
VLAN_IPV4_UDP = (ethhdr(MAC_B, MAC_A, ETH_P_8021Q) + struct.pack("!HH", 0x2064, ETH_P_IP)
                 + ipv4(17, struct.pack("!HHHH", 53, 5353, 8 + 6, 0xABCD) + b"hello!"))
IPV4_ICMP_ECHO = ethhdr(MAC_B, MAC_A, ETH_P_IP) + ipv4(1, icmp_echo(8, 0x77, 0x1001))
TRUNCATED_TCP = ethhdr(MAC_B, MAC_A, ETH_P_IP) + ipv4(6, tcp(1, 2, 3, 4, 0x10)[:8])
# name -> (frame, the fields it must set, beside the ones every frame sets)
FRAMES: dict[str, tuple[bytes, dict[str, int]]] = {
    "ipv4_tcp": (IPV4_TCP, ipv4_fields(
        IPV4_TCP, 14, ip_tos=0x28, ip_id=0xBEEF, ip_ttl=0x16, ip_protocol=6,
        tcp_source=4321, tcp_dest=80, tcp_seq=0x01020304, tcp_ack_seq=0xA0B0C0D0, tcp_doff=6,
        tcp_res1=5, tcp_ae=1, tcp_flags=0x12, tcp_window=1000, tcp_check=0x3412,
        tcp_urg_ptr=7)),
    "vlan_ipv4_udp": (VLAN_IPV4_UDP, ipv4_fields(
        VLAN_IPV4_UDP, 18, vlan_tci=0x2064, vlan_proto=ETH_P_IP, ip_protocol=17,
        udp_source=53, udp_dest=5353, udp_len=14, udp_check=0xCDAB)),
    "ipv4_icmp_echo": (IPV4_ICMP_ECHO, ipv4_fields(
        IPV4_ICMP_ECHO, 14, ip_protocol=1, icmp_type=8, icmp_checksum=le16(IPV4_ICMP_ECHO, 36),
        icmp_echo_id=0x77, icmp_echo_sequence=0x1001, icmp_gateway=0x00771001)),
    "ipv6_tcp": (ethhdr(MAC_B, MAC_A, ETH_P_IPV6) + ipv6(6, tcp(
        22, 50000, 7, 0, 0xC1, doff=5, window=0xFFFF), tclass=0xB8, flowlabel=0xABCDE,
        hop_limit=3),
        {**IPV6, "ip6_priority": 0xB, "ip6_flow_lbl0": 0x8A, "ip6_flow_lbl2": 0xDE,
         "ip6_payload_len": 20, "ip6_nexthdr": 6, "ip6_hop_limit": 3, "tcp_source": 22,
         "tcp_dest": 50000, "tcp_seq": 7, "tcp_doff": 5, "tcp_flags": 0xC1,
         "tcp_window": 0xFFFF, "tcp_check": 0x3412}),
    # a neighbour advertisement: router, solicited and override are the top bits of the
    # first data byte, bitfields of icmpv6_nd_advt's __u32
    "ipv6_icmp6_na": (ethhdr(MAC_B, MAC_A, ETH_P_IPV6) + ipv6(58, struct.pack(
        "!BBHI", 136, 0, 0x5A5A, 0xE0000000) + DST6),
        {**IPV6, "ip6_payload_len": 24, "ip6_nexthdr": 58, "icmp6_type": 136,
         "icmp6_cksum": 0x5A5A, "icmp6_identifier": 0xE000, "icmp6_data32": 0xE0000000,
         "icmp6_router": 1, "icmp6_solicited": 1, "icmp6_override": 1}),
    # an echo request: its identifier's first byte (0x42) is what u_nd_advt's bits read
    "ipv6_icmp6_echo": (ethhdr(MAC_B, MAC_A, ETH_P_IPV6) + ipv6(58, struct.pack(
        "!BBHHH", 128, 0, 0x0102, 0x4242, 9) + bytes(8)),
        {**IPV6, "ip6_payload_len": 16, "ip6_nexthdr": 58, "icmp6_type": 128,
         "icmp6_cksum": 0x0201, "icmp6_identifier": 0x4242, "icmp6_sequence": 9,
         "icmp6_data32": 0x42420009, "icmp6_solicited": 1}),
    "arp_request": (ethhdr("ff:ff:ff:ff:ff:ff", MAC_A, ETH_P_ARP) + struct.pack(
        "!HHBBH", 1, ETH_P_IP, 6, 4, 1) + bytes(20),
        {"eth_proto": ETH_P_ARP, "eth_dest0": 0xFF, "arp_hrd": 1, "arp_pro": ETH_P_IP,
         "arp_hln": 6, "arp_pln": 4, "arp_op": 1}),
    # a TCP header cut short: the program stops before reading it (an skb test run needs
    # the whole IPv4 header, as the kernel's does)
    "truncated_tcp": (TRUNCATED_TCP, ipv4_fields(TRUNCATED_TCP, 14, ip_protocol=6)),
}
# What every run sets: CO-RE's sizes and offsets of the kernel's types, and the Ethernet
# addresses' bytes
ALWAYS = {"sizes": 14 | 20 << 8 | 40 << 16 | 4 << 24, "exists": 0b111 | 24 << 8 | 14 << 16,
          "eth_dest0": 0x0A, "eth_source5": 0xA1}


@pytest.fixture(scope="module")
def loaded(packet_headers_object):
    """The object loaded once on each backend that can run here (kernel: None where bpf(2)
    is not allowed): the kernel's load relocates against its whole vmlinux BTF."""
    objects = {name: ObjectSpec.from_file(packet_headers_object).load(pybpf.system(name))
               for name in ("kernel", "emulated") if name != "kernel" or kernel_available()}
    yield objects
    for obj in objects.values():
        obj.close()


def run_frame(obj: Object, section: str, frame: bytes) -> tuple[int, dict[str, int]]:
    retval = obj.programs[section].test_run(frame).retval
    return retval, obj.globals["parsed"]._asdict()


@pytest.mark.parametrize("section", ["parse_xdp", "parse_tc"])
@pytest.mark.parametrize("name", list(FRAMES))
def test_vmlinux_h_parser_reads_the_same_fields_on_both_backends(loaded, section, name):
    if "kernel" not in loaded:
        pytest.skip(KERNEL_SKIP_REASON)
    frame, fields = FRAMES[name]
    expected_retval = (XDP_PASS if section == "parse_xdp" else 0) \
        if name != "truncated_tcp" else (XDP_ABORTED if section == "parse_xdp" else 1)
    on_kernel = run_frame(loaded["kernel"], section, frame)
    on_emulated = run_frame(loaded["emulated"], section, frame)
    assert on_emulated == on_kernel
    retval, parsed = on_kernel
    assert retval == expected_retval
    assert {key: value for key, value in parsed.items() if value} == \
        {key: value for key, value in {**ALWAYS, **fields}.items() if value}


def test_vmlinux_h_parser_runs_on_the_emulated_backend_alone(loaded):
    """Where bpf(2) is not allowed the emulated backend still relocates and runs it."""
    frame, fields = FRAMES["ipv4_tcp"]
    retval, parsed = run_frame(loaded["emulated"], "parse_xdp", frame)
    assert retval == XDP_PASS
    assert {key: parsed[key] for key in fields} == fields
