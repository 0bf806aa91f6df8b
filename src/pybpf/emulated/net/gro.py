"""Generic receive offload (net/core/gro.c, net/ipv4/af_inet.c, net/ipv4/udp_offload.c,
net/ipv4/tcp_offload.c, net/ipv6/ip6_offload.c): merge frames of one flow into one skb.

Rules this module keeps (the kernel's conditions, as of 6.18):
- A device whose GRO feature is off, or that runs a generic-mode XDP program
  (``netif_elide_gro``), gets no GRO: skbs go up in batches of ``gro_normal_batch`` (8), yet
  each still goes through gro_receive_skb's entry, the elide test and gro_normal_one's
  rx_list, and the node is still flushed: modeled time charges that machinery either way.
- Held skbs live in ``GRO_HASH_BUCKETS`` lists by ``skb.hash`` (0 for cpumap's skbs, which
  have no hardware hash), at most ``MAX_GRO_SKBS`` per list (the oldest is completed first).
- Same flow: same device and MAC header, same IP protocol, addresses and ports. IPv4 needs a
  20-byte header with a valid checksum, no fragment, ``tot_len`` equal to the bytes received
  (Ethernet padding flushes), the same TTL, TOS and DF, and IDs that increase by one per
  segment or, with DF, stay fixed from the second segment on. IPv6: the same version, flow
  label, next header and addresses; the hop limit and traffic class must match.
- UDP merges only with a non-zero checksum that verifies, a length matching the bytes
  received, and a receiver that asked for it: a local socket with UDP_GRO or, with no socket,
  the device's rx-udp-gro-forwarding feature (fraglist GRO is not modeled). Segments must be
  the first one's size; a shorter one ends the skb; 64 segments at most.
- TCP merges in-sequence segments with the same ACK, options and flags (CWR flushes;
  FIN/PSH/URG/RST/SYN complete the skb), a payload up to the first one's size.
- Everything that does not merge into or start a held skb goes up as it came. An skb may
  grow to 64 KiB. A merged skb's head is given back to this CPU's NAPI cache (a stolen
  head); the held skb carries the payloads as frags. Completion rewrites the IP length and
  checksum and the L4 length and pseudo-header checksum, and records ``gso_size`` (the first
  segment's payload) and ``gso_segs``.
- ``flush()`` completes everything held (a full flush: HZ < 1000, as on the target VM).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from ...packet import (
    ETH_HLEN,
    ETH_P_IP,
    ETH_P_IPV6,
    IP_DF,
    IP_MF,
    IP_OFFSET,
    IPPROTO_UDP,
    TCP_CWR,
    TCP_FIN,
    TCP_PSH,
    TCP_RST,
    TCP_SYN,
    TCP_URG,
    Headers,
    csum_fold,
    csum_partial,
    ipv4_header_ok,
    l4_checksum_ok,
    parse,
    pseudo_header_sum,
)
from .skbuff import CHECKSUM_UNNECESSARY, SKB_HEAD_SIZE, Counters, SkBuff

GRO_HASH_BUCKETS = 8
MAX_GRO_SKBS = 8
GRO_MAX_SIZE = 65536  # gro_max_size: GRO_LEGACY_MAX_SIZE
UDP_GRO_CNT_MAX = 64
GRO_NORMAL_BATCH = 8  # net.core.gro_normal_batch


class GroCb:
    """NAPI_GRO_CB(skb): what GRO keeps about an skb while it looks at it or holds it."""

    __slots__ = ("h", "count", "flush", "same_flow", "fixedid", "payload")

    def __init__(self, h: Headers) -> None:
        self.h = h
        self.count = 1  # segments in a held skb
        self.flush = False
        self.same_flow = False  # held skb: still a candidate; new skb: merged
        self.fixedid = False
        self.payload = h.payload  # where this skb's L4 payload starts


class GroStats(Counters):
    """skbs GRO received, merged into a held one, held, completed, passed on without
    merging; skbs and segments it sent up."""

    __slots__ = ("received", "merged", "held", "completed", "normal", "delivered_skbs",
                 "delivered_segs")


class GroNode:
    """struct gro_node: held skbs, the normal list, and where completed skbs go.

    ``deliver(skbs)`` takes a list up the stack (netif_receive_skb_list); ``put_head(skb)``
    takes a merged skb's head back (napi_skb_cache_put on this CPU); ``udp_gro_sock(skb, h)``
    says whether a local UDP socket with UDP_GRO receives this flow (None: no socket);
    ``charge(event)`` charges modeled work to the calling CPU: ``gro_receive_skb`` per skb
    the node takes (its entry, the netif_elide_gro test and the finish: paid with GRO elided
    too), ``gro_receive`` per skb GRO looks at (none when the device elides GRO),
    ``gro_merge`` per skb merged, ``gro_complete`` per merged skb completed,
    ``gro_normal_one`` per skb queued on the rx_list, ``gro_flush`` per flush."""

    def __init__(self, deliver: Callable[[list[SkBuff]], None],
                 put_head: Callable[[SkBuff], None],
                 udp_gro_sock: Callable[[SkBuff, Headers], bool | None],
                 charge: Callable[[str], None]) -> None:
        self.deliver = deliver
        self.put_head = put_head
        self.udp_gro_sock = udp_gro_sock
        self.charge = charge
        self.hash: list[list[SkBuff]] = [[] for _ in range(GRO_HASH_BUCKETS)]  # oldest first
        self.rx_list: list[SkBuff] = []
        self.rx_count = 0
        self.stats = GroStats()

    @property
    def held(self) -> int:
        return sum(len(bucket) for bucket in self.hash)

    # -- receive --------------------------------------------------------------------------------
    def receive(self, skb: SkBuff) -> None:
        """gro_receive_skb: merge ``skb`` into a held one, hold it, or pass it on."""
        self.stats.received += 1
        self.charge("gro_receive_skb")
        dev = skb.dev
        h = parse(skb.data)
        if not dev.gro or dev.xdp_generic_prog is not None or h is None or not h.l4:
            self.stats.normal += 1
            self.normal_one(skb, 1)
            return
        self.charge("gro_receive")
        cb = skb.gro = GroCb(h)
        bucket = self.hash[skb.hash & (GRO_HASH_BUCKETS - 1)]
        mac = skb.data[:ETH_HLEN]
        for p in bucket:  # gro_list_prepare
            p.gro.same_flow = p.dev is dev and p.data[:ETH_HLEN] == mac
        if h.proto == ETH_P_IP:
            pp = self._inet_gro_receive(bucket, skb, cb)
        else:
            pp = self._ipv6_gro_receive(bucket, skb, cb)
        if pp is not None:
            bucket.remove(pp)
            self._complete(pp)
        if cb.same_flow:  # merged: the head was stolen
            self.charge("gro_merge")
            self.stats.merged += 1
            skb.gro = None
            self.put_head(skb)
            return
        if cb.flush:
            skb.gro = None
            self.stats.normal += 1
            self.normal_one(skb, 1)
            return
        if len(bucket) >= MAX_GRO_SKBS:
            self._complete(bucket.pop(0))
        skb.gso_size = h.end - cb.payload
        bucket.append(skb)
        self.stats.held += 1

    def _inet_gro_receive(self, bucket: list[SkBuff], skb: SkBuff, cb: GroCb) -> SkBuff | None:
        data, h = skb.data, cb.h
        if data[h.l3] != 0x45 or not ipv4_header_ok(data, h):
            cb.flush = True
            return None
        tot_len, frag = struct.unpack_from("!H2xH", data, h.l3 + 2)
        cb.flush = tot_len != len(data) - h.l3 or bool(frag & (IP_MF | IP_OFFSET))
        for p in bucket:
            if p.gro.same_flow:
                h2 = p.gro.h
                if (data[h.l3 + 9] != p.data[h2.l3 + 9] or h.saddr != h2.saddr
                        or h.daddr != h2.daddr):
                    p.gro.same_flow = False
        return self._l4_receive(bucket, skb, cb)

    def _ipv6_gro_receive(self, bucket: list[SkBuff], skb: SkBuff, cb: GroCb) -> SkBuff | None:
        data, h = skb.data, cb.h
        payload_len = struct.unpack_from("!H", data, h.l3 + 4)[0]
        cb.flush = payload_len != len(data) - h.l3 - 40
        first = struct.unpack_from("!I", data, h.l3)[0]
        for p in bucket:
            if p.gro.same_flow:
                h2 = p.gro.h
                first2 = struct.unpack_from("!I", p.data, h2.l3)[0]
                if ((first ^ first2) & 0xF00FFFFF or h.saddr != h2.saddr
                        or h.daddr != h2.daddr or data[h.l3 + 6] != p.data[h2.l3 + 6]):
                    p.gro.same_flow = False
        return self._l4_receive(bucket, skb, cb)

    def _l4_receive(self, bucket: list[SkBuff], skb: SkBuff, cb: GroCb) -> SkBuff | None:
        h = cb.h
        if not cb.flush:  # checksums are checked only when the frame could merge
            if h.l4_proto == IPPROTO_UDP and skb.data[h.l4 + 6:h.l4 + 8] == b"\0\0":
                pass  # no checksum: nothing to validate (and UDP GRO refuses it below)
            elif l4_checksum_ok(skb.data, h):
                skb.ip_summed = CHECKSUM_UNNECESSARY
            else:
                cb.flush = True
                return None
        if h.l4_proto == IPPROTO_UDP:
            return self._udp_gro_receive(bucket, skb, cb)
        return self._tcp_gro_receive(bucket, skb, cb)

    # -- UDP ------------------------------------------------------------------------------------
    def _udp_gro_receive(self, bucket: list[SkBuff], skb: SkBuff, cb: GroCb) -> SkBuff | None:
        sock_gro = self.udp_gro_sock(skb, cb.h)
        if not (sock_gro or (sock_gro is None and skb.dev.gro_udp_fwd)):
            cb.flush = True  # no GRO for this flow: be sure to flush it
            return None
        h, data = cb.h, skb.data
        check, = struct.unpack_from("!H", data, h.l4 + 6)
        ulen, = struct.unpack_from("!H", data, h.l4 + 4)
        if not check or ulen <= 8 or ulen != len(data) - h.l4:
            cb.flush = True  # "requires non zero csum, for symmetry with GSO"; no padding
            return None
        for p in bucket:
            if not p.gro.same_flow:
                continue
            h2 = p.gro.h
            if data[h.l4:h.l4 + 4] != p.data[h2.l4:h2.l4 + 4]:
                p.gro.same_flow = False
                continue
            ulen2, = struct.unpack_from("!H", p.data, h2.l4 + 4)
            if ulen > ulen2 or self._network_flush(p, skb):
                return p
            if (self._merge(p, skb, cb) or ulen != ulen2
                    or p.gro.count >= UDP_GRO_CNT_MAX):
                return p
            return None
        return None

    # -- TCP ------------------------------------------------------------------------------------
    def _tcp_gro_receive(self, bucket: list[SkBuff], skb: SkBuff, cb: GroCb) -> SkBuff | None:
        h, data = cb.h, skb.data
        seg_len = len(data) - h.payload
        flags = data[h.l4 + 13]
        p = None
        for q in bucket:  # tcp_gro_lookup: the first held skb of the same ports
            if q.gro.same_flow:
                if data[h.l4:h.l4 + 4] == q.data[q.gro.h.l4:q.gro.h.l4 + 4]:
                    p = q
                    break
                q.gro.same_flow = False
        mss = 1
        if p is not None:
            h2 = p.gro.h
            th2 = p.data[h2.l4:h2.payload]
            flush = bool(flags & TCP_CWR)
            flush |= bool((flags ^ th2[13]) & ~(TCP_CWR | TCP_FIN | TCP_PSH))
            flush |= data[h.l4 + 8:h.l4 + 12] != th2[8:12]  # ack_seq
            flush |= data[h.l4 + 20:h.payload] != th2[20:]  # options, byte for byte
            flush |= self._network_flush(p, skb)
            mss = p.gso_size
            flush |= seg_len == 0 or seg_len - 1 >= mss
            seq, = struct.unpack_from("!I", data, h.l4 + 4)
            seq2, = struct.unpack_from("!I", th2, 4)
            flush |= (seq2 + _payload_len(p)) & 0xFFFFFFFF != seq
            if flush or self._merge(p, skb, cb):
                mss = 1
            else:
                p.data[h2.l4 + 13] |= flags & (TCP_FIN | TCP_PSH)
        flush = seg_len < mss or bool(flags & (TCP_URG | TCP_PSH | TCP_RST | TCP_SYN | TCP_FIN))
        cb.flush |= flush
        if p is not None and (not cb.same_flow or flush):
            return p
        return None

    # -- shared ---------------------------------------------------------------------------------
    def _network_flush(self, p: SkBuff, skb: SkBuff) -> bool:
        """gro_receive_network_flush: IP fields that must match (inet_gro_flush with its
        fixed-ID rule; for IPv6 the hop limit and traffic class)."""
        h, h2 = skb.gro.h, p.gro.h
        a, b = skb.data, p.data
        if h.proto == ETH_P_IPV6:
            first = struct.unpack_from("!I", a, h.l3)[0] ^ struct.unpack_from("!I", b, h2.l3)[0]
            return a[h.l3 + 7] != b[h2.l3 + 7] or bool(first & 0x0FF00000)
        ident, frag = struct.unpack_from("!HH", a, h.l3 + 4)
        ident2, frag2 = struct.unpack_from("!HH", b, h2.l3 + 4)
        if a[h.l3 + 8] != b[h2.l3 + 8] or a[h.l3 + 1] != b[h2.l3 + 1] \
                or (frag ^ frag2) & IP_DF:
            return True
        offset = (ident - ident2) & 0xFFFF
        count = p.gro.count
        if count == 1 and frag & IP_DF and not offset:
            p.gro.fixedid = True
        return offset != (0 if p.gro.fixedid else count) & 0xFFFF

    def _merge(self, p: SkBuff, skb: SkBuff, cb: GroCb) -> bool:
        """skb_gro_receive: append ``skb``'s payload to ``p``; True when it does not fit."""
        payload = bytes(skb.data[cb.payload:])
        if len(p.data) - p.gro.h.l3 + _frags_len(p) + len(payload) >= GRO_MAX_SIZE:
            return True
        p.frags.append(payload)
        p.truesize += skb.truesize - SKB_HEAD_SIZE
        p.gro.count += 1
        cb.same_flow = True
        return False

    # -- completion and delivery ----------------------------------------------------------------
    def _complete(self, skb: SkBuff) -> None:
        """gro_complete: fix the headers of a merged skb, then send it up."""
        cb = skb.gro
        skb.gro = None
        self.stats.completed += 1
        if cb.count == 1:
            skb.gso_size = 0
            self.normal_one(skb, 1)
            return
        self.charge("gro_complete")
        h, data = cb.h, skb.data
        total = len(data) + _frags_len(skb)
        saddr, daddr = h.saddr, h.daddr
        if h.proto == ETH_P_IP:
            struct.pack_into("!H", data, h.l3 + 2, total - h.l3)
            struct.pack_into("!H", data, h.l3 + 10, 0)
            struct.pack_into("!H", data, h.l3 + 10, csum_fold(csum_partial(data[h.l3:h.l4])))
        else:
            struct.pack_into("!H", data, h.l3 + 4, total - h.l4)
        l4_len = total - h.l4
        pseudo = ~csum_fold(pseudo_header_sum(saddr, daddr, h.l4_proto, l4_len)) & 0xFFFF
        if h.l4_proto == IPPROTO_UDP:
            struct.pack_into("!H", data, h.l4 + 4, l4_len)
            struct.pack_into("!H", data, h.l4 + 6, pseudo)
        else:
            struct.pack_into("!H", data, h.l4 + 16, pseudo)
        skb.gso_segs = cb.count
        skb.ip_summed = CHECKSUM_UNNECESSARY
        self.normal_one(skb, cb.count)

    def normal_one(self, skb: SkBuff, segs: int) -> None:
        """gro_normal_one: queue for the stack; a full batch goes up at once."""
        self.charge("gro_normal_one")
        self.rx_list.append(skb)
        self.rx_count += segs
        if self.rx_count >= GRO_NORMAL_BATCH:
            self.normal_list()

    def normal_list(self) -> None:
        """gro_normal_list: send the queued skbs up the stack."""
        if not self.rx_list:
            return
        skbs, self.rx_list = self.rx_list, []
        self.stats.delivered_skbs += len(skbs)
        self.stats.delivered_segs += self.rx_count
        self.rx_count = 0
        self.deliver(skbs)

    def flush(self) -> None:
        """gro_flush (full) then gro_normal_list."""
        self.charge("gro_flush")
        for bucket in self.hash:
            while bucket:
                self._complete(bucket.pop(0))
        self.normal_list()


def _frags_len(skb: SkBuff) -> int:
    return sum(len(frag) for frag in skb.frags)


def _payload_len(p: SkBuff) -> int:
    """skb_gro_len of a held skb: the L4 payload it carries so far."""
    return len(p.data) - p.gro.payload + _frags_len(p)


def gro_stats_total(nodes: list[GroNode]) -> dict[str, Any]:
    """The counters of several GRO nodes, added up."""
    total = GroStats()
    for node in nodes:
        for name in GroStats.__slots__:
            setattr(total, name, getattr(total, name) + getattr(node.stats, name))
    return total.as_dict()
