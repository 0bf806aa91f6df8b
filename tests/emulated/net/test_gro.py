"""GRO on the emulated backend: which frames merge, what a merged skb looks like, where merged
heads go. Each rule is the kernel's (net/core/gro.c and the inet/udp/tcp offloads)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pybpf.emulated.machine.machine import Machine
from pybpf.emulated.net.gro import GRO_NORMAL_BATCH, UDP_GRO_CNT_MAX, GroNode
from pybpf.emulated.net.netdev import net_of
from pybpf.emulated.net.skbuff import SkBuff
from pybpf.emulated.net.xdp import eth_type_trans
from pybpf.packet import (
    TCP_ACK,
    TCP_PSH,
    ipv4_header_ok,
    l4_checksum_ok,
    parse,
    tcp_frame,
    udp_frame,
)

SRC_MAC = "02:00:00:00:00:aa"


class Lab:
    """A device, a GRO node on it, what reached the stack and which heads came back."""

    def __init__(self, *, gro: bool = True, sock_gro: bool | None = True) -> None:
        self.net = net_of(Machine(cpus=2))
        self.dev = self.net.add_device("eth0")
        self.dev.set_gro(gro)
        self.up: list[SkBuff] = []
        self.heads: list[SkBuff] = []
        self.node = GroNode(self.up.extend, self.heads.append, lambda skb, h: sock_gro,
                            self.net.charge)

    def skb(self, frame: bytes) -> SkBuff:
        skb = SkBuff()
        skb.data = bytearray(frame)
        skb.dev = self.dev
        skb.protocol = eth_type_trans(skb, self.dev)
        return skb

    def feed(self, frames: list[bytes]) -> list[SkBuff]:
        for frame in frames:
            self.node.receive(self.skb(frame))
        self.node.flush()
        return self.up


def udp(payload: bytes = b"x" * 18, *, ident: int = 0, df: bool = True, sport: int = 1000,
        v6: bool = False, **kw) -> bytes:
    src, dst = ("fd00::1", "fd00::2") if v6 else ("10.0.0.1", "10.0.0.2")
    return udp_frame("02:00:00:00:00:01", SRC_MAC, src, dst, sport, 9000, payload,
                     ident=ident, df=df, **kw)


def flow(n: int, size: int = 18, **kw) -> list[bytes]:
    return [udp(bytes([i]) * size, ident=i, **kw) for i in range(n)]


def test_sixteen_frames_of_a_udp_flow_become_one_skb_and_fifteen_heads_come_back():
    lab = Lab()
    up = lab.feed(flow(16))
    assert len(up) == 1 and up[0].gso_segs == 16 and up[0].gso_size == 18
    assert len(lab.heads) == 15 and up[0] not in lab.heads
    assert lab.node.stats.as_dict() == {"received": 16, "merged": 15, "held": 1,
                                        "completed": 1, "normal": 0, "delivered_skbs": 1,
                                        "delivered_segs": 16}


def test_a_merged_skb_carries_every_payload_in_order_behind_fixed_headers():
    lab = Lab()
    frames = flow(5)
    merged = lab.feed(frames)[0]
    frame = merged.linearize()
    h = parse(frame)
    assert frame[h.payload:h.end] == b"".join(f[42:] for f in frames)
    assert struct.unpack_from("!H", frame, 16)[0] == len(frame) - 14  # IP tot_len
    assert struct.unpack_from("!H", frame, 38)[0] == len(frame) - 34  # UDP len
    assert ipv4_header_ok(frame, h)


@pytest.mark.parametrize("frames,why", [
    (flow(4, udp_csum=False), "UDP GRO needs a non-zero checksum"),
    ([udp(ident=0, df=False) for _ in range(4)], "no DF and IDs that do not increase"),
    ([udp(ident=i * 2, df=False) for i in range(4)], "IDs that skip without DF"),
])
def test_frames_that_break_the_kernels_conditions_do_not_merge(frames, why):
    lab = Lab()
    up = lab.feed(frames)
    assert [skb.gso_segs for skb in up] == [0] * len(frames), why
    assert lab.heads == []


def test_incrementing_ids_merge_without_df_and_fixed_ids_merge_with_df():
    assert len(Lab().feed(flow(8, df=False))) == 1
    assert len(Lab().feed([udp(ident=5) for _ in range(8)])) == 1


def test_a_bad_udp_checksum_is_not_merged_and_goes_up_unverified():
    lab = Lab()
    bad = bytearray(udp(ident=1))
    bad[-1] ^= 0xFF
    up = lab.feed([udp(ident=0), bytes(bad), udp(ident=2)])
    assert [skb.gso_segs for skb in up] == [0, 0, 0]
    assert up[0].data == bad  # it went up at once, before the flow it interrupted
    assert not l4_checksum_ok(up[0].data, parse(up[0].data))


def test_udp_merges_only_for_a_gro_socket_or_gro_forwarding():
    assert len(Lab(sock_gro=False).feed(flow(4))) == 4  # a plain socket
    assert len(Lab(sock_gro=None).feed(flow(4))) == 4  # no socket, no forwarding
    lab = Lab(sock_gro=None)
    lab.dev.gro_udp_fwd = True
    assert len(lab.feed(flow(4))) == 1


def test_gro_off_passes_skbs_up_in_batches_of_eight():
    lab = Lab(gro=False)
    for frame in flow(GRO_NORMAL_BATCH - 1):
        lab.node.receive(lab.skb(frame))
    assert lab.up == []
    lab.node.receive(lab.skb(udp(ident=99)))
    assert len(lab.up) == GRO_NORMAL_BATCH and lab.heads == []


def test_a_shorter_segment_ends_the_skb_and_a_longer_one_starts_a_new_one():
    lab = Lab()
    frames = [udp(b"a" * 18, ident=0), udp(b"b" * 18, ident=1), udp(b"c" * 10, ident=2),
              udp(b"d" * 18, ident=3), udp(b"e" * 30, ident=4)]
    up = lab.feed(frames)
    assert [skb.gso_segs for skb in up] == [3, 0, 0]


def test_udp_skbs_stop_at_64_segments_and_64_kib():
    assert [s.gso_segs for s in Lab().feed(flow(UDP_GRO_CNT_MAX + 3))] == [64, 3]
    big = Lab().feed(flow(50, size=1400))
    assert [s.gso_segs for s in big] == [46, 4]  # 46 * 1400 + headers < 64 KiB


def test_flows_differing_in_ports_or_family_are_held_apart():
    lab = Lab()
    frames = [f for i in range(4) for f in (udp(ident=i, sport=1), udp(ident=i, sport=2),
                                           udp(v6=True))]
    up = lab.feed(frames)
    assert sorted(skb.gso_segs for skb in up) == [4, 4, 4]


def test_tcp_in_sequence_segments_merge_and_psh_completes_the_skb():
    lab = Lab()

    def seg(i: int, flags: int = TCP_ACK, seq: int | None = None) -> bytes:
        return tcp_frame("02:00:00:00:00:01", SRC_MAC, "10.0.0.1", "10.0.0.2", 5000, 80,
                         bytes([i]) * 100, seq=100 * i if seq is None else seq, ack=1,
                         flags=flags, ident=i)

    up = lab.feed([seg(0), seg(1), seg(2, TCP_ACK | TCP_PSH), seg(3), seg(4, seq=999)])
    assert [skb.gso_segs for skb in up] == [3, 0, 0]
    assert up[0].linearize()[54:] == bytes([0]) * 100 + bytes([1]) * 100 + bytes([2]) * 100


@given(st.lists(st.binary(min_size=30, max_size=30), min_size=1, max_size=70))
def test_merging_never_loses_reorders_or_changes_a_payload(payloads):
    lab = Lab()
    up = lab.feed([udp(p, ident=i) for i, p in enumerate(payloads)])
    got = []
    for skb in up:
        frame = skb.linearize()
        h = parse(frame)
        data = frame[h.payload:h.end]
        size = skb.gso_size if skb.gso_segs > 1 else len(data)
        got += [data[i:i + size] for i in range(0, len(data), size)]
    assert got == payloads
    assert len(lab.heads) == len(payloads) - len(up)
