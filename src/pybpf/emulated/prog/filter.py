"""net/core/filter.c: program contexts (which bytes of its context a program type may read or
write, what a load there yields, how narrow loads read; the tracing types' rules are
kernel/trace/bpf_trace.c's) and the helpers of the network's programs (redirects, skb and XDP
packet helpers, checksums).

Rules this module keeps:
- ``is_valid_access`` is each type's ``*_is_valid_access`` (``sk_filter_``, ``tc_cls_act_``,
  ``cg_skb_``, ``lwt_``, ``sk_skb_`` over ``bpf_skb_is_valid_access``; ``xdp_``,
  ``sk_msg_``, ``kprobe_prog_``, ``pe_prog_``, ``tp_prog_``, ``raw_tp_prog_``,
  ``syscall_prog_``), one switch per kernel function, in its order.
- ``ctx_field_type`` is the ``info->reg_type`` such a function sets: the pointer a load of
  that field gives (packet, packet end, a socket), None for a scalar.
- ``narrow_load_offset`` is ``convert_ctx_accesses``' rewrite of a narrow load: the kernel
  loads the whole underlying field (which may be narrower than the 4-byte UAPI slot) and
  shifts and masks only when the load is narrower than that field, so a 1-byte load of
  ``pkt_type`` anywhere in its slot, or a 2-byte load of the upper half of ``protocol``,
  reads the whole field.
- Helpers as helpers.py has them: ``f(rs, r1, r2, r3, r4, r5) -> r0`` on raw register values,
  errors as the kernel's negative errno, return values exactly the kernel's (SK_PASS /
  SK_DROP, XDP and TC actions); their protos are in helpers.py's ``HELPERS``, which imports
  this module, never the other way.
- A redirect helper only records where to (``XdpRedirect``, or the socket, on
  ``rs.redirect``); the data path that ran the program acts on it (net/xdp.py's
  ``xdp_do_redirect``, the psock's verdict).
- The sockmap redirect helpers (bpf_{sk,msg}_redirect_{map,hash}) are net/core/sock_map.c's;
  they are here, not in net/sock_map.py, because prog/ never imports net/ and the helper
  table would have to.
"""

from __future__ import annotations

import errno
import struct

from ...errors import ProgramFault
from ...packet import ETH_ALEN, ETH_HLEN
from ...uapi import (
    BPF_ADJ_ROOM_ENCAP_L2_MASK,
    BPF_ADJ_ROOM_ENCAP_L2_SHIFT,
    BPF_ADJ_ROOM_MAC,
    BPF_ADJ_ROOM_NET,
    BPF_F_ADJ_ROOM_DECAP_L3_IPV4,
    BPF_F_ADJ_ROOM_DECAP_L3_IPV6,
    BPF_F_ADJ_ROOM_ENCAP_L2,
    BPF_F_ADJ_ROOM_ENCAP_L2_ETH,
    BPF_F_ADJ_ROOM_ENCAP_L3_IPV4,
    BPF_F_ADJ_ROOM_ENCAP_L3_IPV6,
    BPF_F_ADJ_ROOM_ENCAP_L4_GRE,
    BPF_F_ADJ_ROOM_ENCAP_L4_UDP,
    BPF_F_ADJ_ROOM_FIXED_GSO,
    BPF_F_ADJ_ROOM_NO_CSUM_RESET,
    BPF_F_BROADCAST,
    BPF_F_EXCLUDE_INGRESS,
    BPF_F_HDR_FIELD_MASK,
    BPF_F_INGRESS,
    BPF_F_INVALIDATE_HASH,
    BPF_F_IPV6,
    BPF_F_MARK_ENFORCE,
    BPF_F_MARK_MANGLED_0,
    BPF_F_PSEUDO_HDR,
    BPF_F_RECOMPUTE_CSUM,
    ENOTSUPP,
    SK_DROP,
    SK_PASS,
    TC_ACT_REDIRECT,
    TC_ACT_SHOT,
    XDP_ABORTED,
    XDP_DROP,
    XDP_PASS,
    XDP_REDIRECT,
    XDP_TX,
    AttachType,
    MapType,
    ProgType,
    map_traits,
    round_up,
)
from ..maps.bpf_map import INT_MAX, BpfMap
from .bpf_trace import BPF_F_CTXLEN_MASK, BPF_F_INDEX_MASK, bpf_event_output
from .memory import (
    M32,
    M64,
    OFF_MASK,
    PACKET_REGION,
    CtxRegion,
    RunState,
    bpf_map_of,
    mem_read,
    mem_write,
)

# struct __sk_buff (include/uapi/linux/bpf.h)
SK_BUFF_SIZE = 192
SKB_LEN, SKB_PKT_TYPE, SKB_MARK, SKB_QUEUE_MAPPING, SKB_PROTOCOL = 0, 4, 8, 12, 16
SKB_VLAN_PRESENT, SKB_VLAN_TCI, SKB_VLAN_PROTO, SKB_PRIORITY = 20, 24, 28, 32
SKB_INGRESS_IFINDEX, SKB_IFINDEX, SKB_TC_INDEX, SKB_CB, SKB_HASH = 36, 40, 44, 48, 68
SKB_TC_CLASSID, SKB_DATA, SKB_DATA_END, SKB_NAPI_ID, SKB_FAMILY = 72, 76, 80, 84, 88
SKB_REMOTE_IP4, SKB_LOCAL_IP4, SKB_REMOTE_IP6, SKB_LOCAL_IP6 = 92, 96, 100, 116
SKB_REMOTE_PORT, SKB_LOCAL_PORT, SKB_DATA_META, SKB_FLOW_KEYS = 132, 136, 140, 144
SKB_TSTAMP, SKB_WIRE_LEN, SKB_GSO_SEGS, SKB_SK, SKB_GSO_SIZE = 152, 160, 164, 168, 176
SKB_TSTAMP_TYPE, SKB_HWTSTAMP = 180, 184
# struct xdp_md
XDP_MD_SIZE = 24
XDP_MD = struct.Struct("<6I")  # the six u32 fields, in order
XDP_MD_DATA, XDP_MD_DATA_END, XDP_MD_DATA_META = 0, 4, 8
XDP_MD_INGRESS_IFINDEX, XDP_MD_RX_QUEUE_INDEX, XDP_MD_EGRESS_IFINDEX = 12, 16, 20
# struct sk_msg_md
SK_MSG_MD_SIZE = 80
SK_MSG_DATA, SK_MSG_DATA_END, SK_MSG_FAMILY, SK_MSG_SIZE, SK_MSG_SK = 0, 8, 16, 68, 72
# struct pt_regs (x86-64) and struct bpf_perf_event_data
PT_REGS_SIZE = 168
PERF_EVENT_DATA_SIZE = 184
PERF_SAMPLE_PERIOD, PERF_ADDR = 168, 176
PERF_MAX_TRACE_SIZE = 8192
MAX_BPF_FUNC_ARGS = 12
U16_MAX = 0xFFFF

# What a load of a pointer field gives (the verifier's register types).
PTR_TO_PACKET, PTR_TO_PACKET_META, PTR_TO_PACKET_END = "pkt", "pkt_meta", "pkt_end"
PTR_TO_SOCK_COMMON_OR_NULL, PTR_TO_SOCKET = "sock_common_or_null", "sock"

SK_BUFF_PROG_TYPES = frozenset({ProgType.SOCKET_FILTER, ProgType.SCHED_CLS, ProgType.SCHED_ACT,
                            ProgType.CGROUP_SKB, ProgType.LWT_IN, ProgType.LWT_OUT,
                            ProgType.LWT_XMIT, ProgType.SK_SKB})
_TC = frozenset({ProgType.SCHED_CLS, ProgType.SCHED_ACT})
_LWT = frozenset({ProgType.LWT_IN, ProgType.LWT_OUT, ProgType.LWT_XMIT})


def _field(start: int, size: int = 4) -> range:
    """bpf_ctx_range: every offset inside a field."""
    return range(start, start + size)


_SK_FIELDS = range(SKB_FAMILY, SKB_LOCAL_PORT + 4)  # family .. local_port (sk_skb only)
_IP_FIELDS = range(SKB_REMOTE_IP4, SKB_LOCAL_IP6 + 16)  # remote_ip4 .. local_ip6[3]
_CB = range(SKB_CB, SKB_CB + 20)


def _in(off: int, *fields: range) -> bool:
    return any(off in f for f in fields)


def _bpf_skb_is_valid_access(off: int, size: int, write: bool, ldsx: bool) -> bool:
    if off < 0 or off >= SK_BUFF_SIZE or off % size:
        return False
    if off in _CB:
        return off + size <= _CB.stop
    if _in(off, _field(SKB_DATA), _field(SKB_DATA_META), _field(SKB_DATA_END)):
        return not ldsx and size == 4
    if off in _IP_FIELDS:
        return size == 4
    if off in _field(SKB_FLOW_KEYS, 8):
        return False
    if off in _field(SKB_HWTSTAMP, 8):
        return not write and size == 8
    if off in _field(SKB_TSTAMP, 8):
        return size == 8
    if off in _field(SKB_SK, 8):
        return off == SKB_SK and not write and size == 8
    if off in range(SKB_TSTAMP_TYPE, SKB_HWTSTAMP):  # tstamp_type and the padding after it
        return False
    return size == 4 if write else size <= 4  # narrow reads of a 4-byte field are fine


def _skb_type_allows(prog_type: int, off: int, write: bool) -> bool | None:
    """The part of each skb type's is_valid_access before bpf_skb_is_valid_access: False
    refuses, True accepts outright, None defers to bpf_skb_is_valid_access."""
    if prog_type == ProgType.SOCKET_FILTER:  # sk_filter_is_valid_access
        if _in(off, _field(SKB_TC_CLASSID), _field(SKB_DATA), _field(SKB_DATA_META),
               _field(SKB_DATA_END), _SK_FIELDS, _field(SKB_TSTAMP, 8), _field(SKB_WIRE_LEN),
               _field(SKB_HWTSTAMP, 8)):
            return False
        return False if write and off not in _CB else None
    if prog_type in _TC:  # tc_cls_act_is_valid_access
        if write and not _in(off, _field(SKB_MARK), _field(SKB_TC_INDEX), _field(SKB_PRIORITY),
                             _field(SKB_TC_CLASSID), _CB, _field(SKB_TSTAMP, 8),
                             _field(SKB_QUEUE_MAPPING)):
            return False
        if off in _SK_FIELDS:
            return False
        return None
    if prog_type == ProgType.CGROUP_SKB:  # cg_skb_is_valid_access (CAP_BPF held)
        if _in(off, _field(SKB_TC_CLASSID), _field(SKB_DATA_META), _field(SKB_WIRE_LEN)):
            return False
        if write and not _in(off, _field(SKB_MARK), _field(SKB_PRIORITY), _CB,
                             _field(SKB_TSTAMP, 8)):
            return False
        return None
    if prog_type in _LWT:  # lwt_is_valid_access
        if _in(off, _field(SKB_TC_CLASSID), _SK_FIELDS, _field(SKB_DATA_META),
               _field(SKB_TSTAMP, 8), _field(SKB_WIRE_LEN), _field(SKB_HWTSTAMP, 8)):
            return False
        if write and not _in(off, _field(SKB_MARK), _field(SKB_PRIORITY), _CB):
            return False
        return None
    # sk_skb_is_valid_access
    if _in(off, _field(SKB_TC_CLASSID), _field(SKB_DATA_META), _field(SKB_TSTAMP, 8),
           _field(SKB_WIRE_LEN), _field(SKB_HWTSTAMP, 8)):
        return False
    if write and not _in(off, _field(SKB_TC_INDEX), _field(SKB_PRIORITY)):
        return False
    return False if off in _field(SKB_MARK) else None


def _skb_valid(prog_type: int, off: int, size: int, write: bool, ldsx: bool) -> bool:
    verdict = _skb_type_allows(prog_type, off, write)
    if verdict is not None:
        return verdict
    if prog_type in _TC and off == SKB_TSTAMP_TYPE:  # read-only, one byte
        return size == 1
    return _bpf_skb_is_valid_access(off, size, write, ldsx)


def _xdp_valid(off: int, size: int, write: bool, ldsx: bool, attach_type: int) -> bool:
    if attach_type != AttachType.XDP_DEVMAP and off == XDP_MD_EGRESS_IFINDEX:
        return False
    if write:
        return False  # rx_queue_index is writable only by offloaded programs
    if ldsx and off in (XDP_MD_DATA, XDP_MD_DATA_END, XDP_MD_DATA_META):
        return False
    return 0 <= off < XDP_MD_SIZE and off % size == 0 and size == 4


def _sk_msg_valid(off: int, size: int, write: bool) -> bool:
    if write or off % size:
        return False
    if off in (SK_MSG_DATA, SK_MSG_DATA_END, SK_MSG_SK):
        return size == 8
    return SK_MSG_FAMILY <= off < SK_MSG_SIZE + 4 and size == 4


def _perf_event_valid(off: int, size: int, write: bool) -> bool:
    if off < 0 or off >= PERF_EVENT_DATA_SIZE or write or off % size:
        return False
    if off in _field(PERF_SAMPLE_PERIOD, 8) or off in _field(PERF_ADDR, 8):
        return True  # narrow reads of the u64 fields are fine
    return size == 8


def is_valid_access(prog_type: int, off: int, size: int, write: bool, ldsx: bool = False,
                    attach_type: int = 0) -> bool:
    """Whether a program of ``prog_type`` may read (``ldsx``: with a sign-extending load) or
    write ``size`` bytes of its context at ``off``."""
    if prog_type in SK_BUFF_PROG_TYPES:
        return _skb_valid(prog_type, off, size, write, ldsx)
    if prog_type == ProgType.XDP:
        return _xdp_valid(off, size, write, ldsx, attach_type)
    if prog_type == ProgType.SK_MSG:
        return _sk_msg_valid(off, size, write)
    if prog_type == ProgType.KPROBE:
        return not write and 0 <= off and off % size == 0 and off + size <= PT_REGS_SIZE
    if prog_type == ProgType.PERF_EVENT:
        return _perf_event_valid(off, size, write)
    if prog_type == ProgType.TRACEPOINT:  # "off < sizeof(void *)" is unsigned: off < 0 passes
        return not write and not 0 <= off < 8 and off < PERF_MAX_TRACE_SIZE and off % size == 0
    if prog_type == ProgType.RAW_TRACEPOINT:
        return not write and 0 <= off < 8 * MAX_BPF_FUNC_ARGS and off % size == 0
    if prog_type == ProgType.SYSCALL:
        return 0 <= off < U16_MAX and off % size == 0
    return True


def ctx_field_type(prog_type: int, off: int) -> str | None:
    """The pointer type a (valid) load of the context at ``off`` gives; None: a scalar."""
    if prog_type == ProgType.XDP:
        return {XDP_MD_DATA: PTR_TO_PACKET, XDP_MD_DATA_END: PTR_TO_PACKET_END,
                XDP_MD_DATA_META: PTR_TO_PACKET_META}.get(off)
    if prog_type == ProgType.SK_MSG:
        return {SK_MSG_DATA: PTR_TO_PACKET, SK_MSG_DATA_END: PTR_TO_PACKET_END,
                SK_MSG_SK: PTR_TO_SOCKET}.get(off)
    if prog_type in SK_BUFF_PROG_TYPES:
        return {SKB_DATA: PTR_TO_PACKET, SKB_DATA_END: PTR_TO_PACKET_END,
                SKB_DATA_META: PTR_TO_PACKET_META,
                SKB_SK: PTR_TO_SOCK_COMMON_OR_NULL}.get(off)
    return None


# Bytes of the sk_buff field behind each 4-byte __sk_buff slot a narrow load may read (the
# target size convert_ctx_access sets); pkt_type is a 3-bit field read as one byte.
_SKB_FIELD_BYTES = {SKB_PKT_TYPE: 1, SKB_QUEUE_MAPPING: 2, SKB_PROTOCOL: 2, SKB_VLAN_TCI: 2,
                    SKB_VLAN_PROTO: 2, SKB_TC_INDEX: 2, SKB_TC_CLASSID: 2, SKB_GSO_SEGS: 2,
                    SKB_GSO_SIZE: 2, SKB_FAMILY: 2}


def narrow_load_offset(prog_type: int, off: int, size: int) -> int:
    """The context offset a ``size``-byte load at ``off`` reads after the kernel's rewrite:
    the field's start when the load is at least as wide as the field behind the slot (the
    whole field is read, wherever in the slot the load was), else ``off`` itself (the
    kernel's shift and mask give the bytes a plain load of the slot gives)."""
    if prog_type not in SK_BUFF_PROG_TYPES or size >= 4:
        return off
    slot = off - off % 4
    if slot in _CB or slot in _field(SKB_TSTAMP_TYPE, 1):
        return off
    return slot if size >= _SKB_FIELD_BYTES.get(slot, 4) else off


def writable_fields(prog_type: int, ctx_size: int) -> tuple[tuple[int, int], ...]:
    """The (offset, size) ranges of the context a program of ``prog_type`` may store to
    (what ``is_valid_access`` allows for some store), for the run-time context."""
    fields: list[tuple[int, int]] = []
    off = 0
    while off < ctx_size:
        size = next((n for n in (8, 4, 2, 1) if is_valid_access(prog_type, off, n, True)), 0)
        if size:
            fields.append((off, size))
        off += size or 1
    return tuple(fields)


# XDP actions (include/uapi/linux/bpf.h)
_XDP_ACTION_MASK = XDP_ABORTED | XDP_DROP | XDP_PASS | XDP_TX


# -- redirects (net/core/filter.c, net/core/sock_map.c) -----------------------------------------
class XdpRedirect:
    """struct bpf_redirect_info, as an XDP redirect helper leaves it for xdp_do_redirect:
    the target's map type and id, its index and looked-up entry (``tgt_value``), and for a
    broadcast the map and flags. ``map_type`` UNSPEC means "to the device ``tgt_index``"."""

    __slots__ = ("map_type", "map_id", "tgt_index", "tgt_value", "bpf_map", "flags")

    def __init__(self, map_type: int, map_id: int, tgt_index: int, tgt_value: object = None,
                 bpf_map: BpfMap | None = None, flags: int = 0) -> None:
        self.map_type = map_type
        self.map_id = map_id
        self.tgt_index = tgt_index
        self.tgt_value = tgt_value
        self.bpf_map = bpf_map
        self.flags = flags

    @property
    def broadcast(self) -> bool:
        return bool(self.flags & BPF_F_BROADCAST)

    @property
    def exclude_ingress(self) -> bool:
        return bool(self.flags & BPF_F_EXCLUDE_INGRESS)


def bpf_redirect_map(rs: RunState, r1: int, r2: int, r3: int, r4: int, r5: int) -> int:
    """__bpf_xdp_redirect_map: XDP_REDIRECT when the key has a target, else the low bits of
    flags (the default action); flags outside the allowed set give XDP_ABORTED."""
    bpf_map = bpf_map_of(rs, r1, "bpf_redirect_map")
    if not map_traits(bpf_map.map_type).redirect:
        raise ProgramFault(errno.EFAULT, f"bpf_redirect_map: {bpf_map.describe()} is not a "
                           "devmap, cpumap or xskmap")
    flags = r3
    broadcast_ok = bpf_map.map_type in (MapType.DEVMAP, MapType.DEVMAP_HASH)
    allowed = _XDP_ACTION_MASK | (BPF_F_BROADCAST | BPF_F_EXCLUDE_INGRESS if broadcast_ok else 0)
    if flags & ~allowed:
        return XDP_ABORTED
    index = r2 & M32
    target = bpf_map.redirect_target(index)  # __cpu_map_lookup_elem and friends
    if target is None and not flags & BPF_F_BROADCAST:
        rs.redirect = None
        return flags & _XDP_ACTION_MASK
    broadcast = bool(flags & BPF_F_BROADCAST)
    rs.redirect = XdpRedirect(bpf_map.map_type, bpf_map.id, index, target,
                              bpf_map if broadcast else None, flags if broadcast else 0)
    return XDP_REDIRECT


def bpf_xdp_redirect(rs: RunState, r1: int, r2: int, r3: int, r4: int, r5: int) -> int:
    """bpf_redirect(ifindex, flags) in XDP: to the device ``ifindex``; any flag aborts."""
    if r2:
        return XDP_ABORTED
    rs.redirect = XdpRedirect(MapType.UNSPEC, INT_MAX, r1 & M32)
    return XDP_REDIRECT


def bpf_skb_redirect(rs: RunState, r1: int, r2: int, r3: int, r4: int, r5: int) -> int:
    """bpf_redirect(ifindex, flags) in tc and lwt_xmit programs: TC_ACT_REDIRECT, or
    TC_ACT_SHOT for a flag but BPF_F_INGRESS. Only tc's datapath acts on the target (skb_do_
    redirect); the test runs where these programs run here, as the kernel's, do not."""
    if r2 & ~BPF_F_INGRESS:
        return TC_ACT_SHOT
    return TC_ACT_REDIRECT


def _sk_redirect(rs: RunState, bpf_map: BpfMap, key: bytes, flags: int) -> int:
    if not map_traits(bpf_map.map_type).sockets:
        raise ProgramFault(errno.EFAULT, f"sk redirect: {bpf_map.describe()} is not a sockmap")
    if flags & ~BPF_F_INGRESS:
        return SK_DROP
    sock = bpf_map.lookup_sock(key)
    if sock is None or sock.listening:  # sock_map_redirect_allowed
        return SK_DROP
    rs.redirect = (bpf_map, sock, flags & BPF_F_INGRESS)
    return SK_PASS


def bpf_sk_redirect_map(rs: RunState, r1: int, r2: int, r3: int, r4: int, r5: int) -> int:
    bpf_map = bpf_map_of(rs, r2, "bpf_sk_redirect_map")
    return _sk_redirect(rs, bpf_map, (r3 & M32).to_bytes(4, "little"), r4)


def bpf_sk_redirect_hash(rs: RunState, r1: int, r2: int, r3: int, r4: int, r5: int) -> int:
    bpf_map = bpf_map_of(rs, r2, "bpf_sk_redirect_hash")
    return _sk_redirect(rs, bpf_map, mem_read(rs, r3, bpf_map.key_size, "key (R3)"), r4)


def bpf_msg_redirect_map(rs: RunState, r1: int, r2: int, r3: int, r4: int, r5: int) -> int:
    """The message goes to the socket under index R3 (msg->sk_redir, msg->flags)."""
    bpf_map = bpf_map_of(rs, r2, "bpf_msg_redirect_map")
    return _sk_redirect(rs, bpf_map, (r3 & M32).to_bytes(4, "little"), r4)


def bpf_msg_redirect_hash(rs: RunState, r1: int, r2: int, r3: int, r4: int, r5: int) -> int:
    bpf_map = bpf_map_of(rs, r2, "bpf_msg_redirect_hash")
    return _sk_redirect(rs, bpf_map, mem_read(rs, r3, bpf_map.key_size, "key (R3)"), r4)


# -- the sk_buff a program runs on (include/linux/skbuff.h, net/core/skbuff.c) -------------------
ETH_P_8021Q, ETH_P_8021AD = 0x8100, 0x88A8
ETH_P_802_3, ETH_P_802_2, ETH_P_802_3_MIN = 0x0001, 0x0004, 0x0600
ETH_P_IP, ETH_P_IPV6 = 0x0800, 0x86DD
VLAN_HLEN = 4
VLAN_ETH_HLEN = ETH_HLEN + VLAN_HLEN
IPV4_HLEN, IPV6_HLEN = 20, 40
SKB_SHINFO_SIZE = 320  # SKB_DATA_ALIGN(sizeof(struct skb_shared_info)) on 6.18 x86-64
# BPF_SKB_MAX_LEN: SKB_MAX_ALLOC, an order-2 page less the shared info
BPF_SKB_MAX_LEN = (4096 << 2) - SKB_SHINFO_SIZE
PACKET_OTHERHOST = 3  # the last pkt_type bpf_skb_change_type takes (skb_pkt_type_ok)
KMALLOC_MAX_SIZE = 4 << 20  # the largest kmalloc (order 10 pages), an skb head's limit
NET_SKB_PAD = 64  # max(32, L1_CACHE_BYTES) on x86-64; NET_IP_ALIGN is 0 there


def _head_offset(name: str) -> property:
    """An sk_buff header's offset from skb->head: a u16 field, which wraps past 64 KiB
    (None: not set)."""
    slot = "_" + name

    def get(skb: Skb) -> int | None:
        return getattr(skb, slot)

    def set_(skb: Skb, value: int | None) -> None:
        setattr(skb, slot, None if value is None else value & U16_MAX)

    return property(get, set_)


class Skb:
    """struct sk_buff as filter.c's helpers see and change it: the linear buffer (``buf``
    from skb->head, the run's packet region, with ``data`` and ``tail`` offsets into it and
    headroom before ``data``), the header offsets from skb->head (u16 fields, as the
    kernel's: ``transport_header`` None until set), skb->protocol and
    the hardware-accelerated VLAN tag (host byte order; ``vlan_proto`` 0: none), pkt_type,
    encapsulation, the GSO size and segments (gso_type is always 0: never TCP or UDP_L4),
    and skb->csum with whether ip_summed is CHECKSUM_COMPLETE (``csum`` keeps its last
    value after that ends: the test run compares it). ``ctx`` is the run's __sk_buff, which
    ``attach`` keeps in step, its packet pointers too where it has them.

    A size change gives a new ``buf`` (the program's memoryviews of the old one stay valid);
    the buffer always ends at ``tail``, as LD_ABS's end of the frame."""

    __slots__ = ("buf", "data", "tail", "_mac_header", "_network_header", "_transport_header",
                 "protocol", "vlan_proto", "vlan_tci", "pkt_type", "encapsulation", "gso_size",
                 "gso_segs", "csum", "csum_complete", "ctx")

    def __init__(self, buf: bytearray, data: int, mac_header: int, network_header: int,
                 protocol: int, pkt_type: int, ctx: CtxRegion) -> None:
        self.buf = buf
        self.data = data
        self.tail = len(buf)
        self.mac_header = mac_header
        self.network_header = network_header
        self.transport_header: int | None = None
        self.protocol = protocol
        self.vlan_proto = self.vlan_tci = 0
        self.pkt_type = pkt_type
        self.encapsulation = False
        self.gso_size = self.gso_segs = 0
        self.csum = 0
        self.csum_complete = False
        self.ctx = ctx

    mac_header = _head_offset("mac_header")
    network_header = _head_offset("network_header")
    transport_header = _head_offset("transport_header")

    @property
    def len(self) -> int:
        return self.tail - self.data

    def attach(self, rs: RunState) -> None:
        """The run's view of the skb after a change (bpf_compute_data_pointers and the
        __sk_buff fields the kernel's loads read from the sk_buff itself)."""
        view = memoryview(self.buf)
        rs.packet = view[self.data:self.tail]
        rs.headers = (view, self.mac_header, self.network_header)
        rs.mem[PACKET_REGION] = self.buf
        ctx = self.ctx.buf
        struct.pack_into("<I", ctx, SKB_LEN, self.len)
        struct.pack_into("<I", ctx, SKB_PKT_TYPE, self.pkt_type)
        ctx[SKB_PROTOCOL:SKB_PROTOCOL + 2] = self.protocol.to_bytes(2, "big")  # __be16
        struct.pack_into("<I", ctx, SKB_VLAN_PRESENT, int(self.vlan_proto != 0))
        struct.pack_into("<I", ctx, SKB_VLAN_TCI, self.vlan_tci)
        ctx[SKB_VLAN_PROTO:SKB_VLAN_PROTO + 2] = self.vlan_proto.to_bytes(2, "big")
        struct.pack_into("<I", ctx, SKB_GSO_SEGS, self.gso_segs)
        struct.pack_into("<I", ctx, SKB_GSO_SIZE, self.gso_size)
        pointers = self.ctx.pointers
        if pointers:  # the program types with direct packet access
            base = PACKET_REGION << 32
            pointers[SKB_DATA] = pointers[SKB_DATA_META] = base | self.data
            pointers[SKB_DATA_END] = base | self.tail

    def checksum(self) -> int:
        """skb_checksum from the network header to the end."""
        return csum_partial(bytes(self.buf[self.network_header:self.tail]), 0)

    def push(self, size: int) -> int:
        """skb_cow_head + __skb_push: ``size`` more bytes before data (what the headroom
        held). Short of headroom, the buffer is made again (__skb_cow's pskb_expand_head)
        with what is missing rounded up to NET_SKB_PAD in front, zeros, and every header
        offset moves by that (skb_headers_offset_update, in u16: past 64 KiB the offsets
        wrap, as the kernel's do); 0, or -ENOMEM where the new buffer and its shared info
        would pass kmalloc's largest (4 MiB)."""
        short = size - self.data
        if short > 0:
            nhead = round_up(short, NET_SKB_PAD)
            if len(self.buf) + nhead + SKB_SHINFO_SIZE > KMALLOC_MAX_SIZE:
                return -errno.ENOMEM
            self.buf = bytearray(nhead) + self.buf
            self.data += nhead
            self.tail += nhead
            self.mac_header += nhead
            self.network_header += nhead
            if self.transport_header is not None:
                self.transport_header += nhead
        self.data -= size
        return 0

    def resize(self, new_len: int) -> None:
        """__skb_grow (zeros) or __skb_trim to ``new_len`` bytes from data."""
        tail = self.data + new_len
        self.buf = self.buf[:tail] + bytes(max(tail - self.tail, 0))
        self.tail = tail

    def postpull_rcsum(self, start: int, size: int) -> None:
        """skb_postpull_rcsum: the ``size`` bytes at ``start`` out of a CHECKSUM_COMPLETE
        skb->csum (as whole 16-bit words, whatever their offset)."""
        if self.csum_complete:
            self.csum = csum_sub(self.csum, csum_partial(bytes(self.buf[start:start + size]), 0))

    def postpush_rcsum(self, start: int, size: int) -> None:
        """skb_postpush_rcsum: the ``size`` bytes at ``start`` into skb->csum."""
        if self.csum_complete:
            self.csum = csum_add(self.csum, csum_partial(bytes(self.buf[start:start + size]), 0))

    def net_hdr_push(self, off: int, size: int) -> int:
        """bpf_skb_net_hdr_push: ``size`` zero bytes inserted ``off`` bytes after data (the
        headers before them move back with the bytes; skb->csum needs no change for zeros);
        0 or push's -ENOMEM."""
        trans_same = self.transport_header == self.network_header
        ret = self.push(size)
        if ret:
            return ret
        buf, data = self.buf, self.data
        buf[data:data + off] = buf[data + size:data + size + off]
        buf[data + off:data + off + size] = bytes(size)
        self.mac_header -= size
        self.network_header -= size
        if trans_same:
            self.transport_header = self.network_header
        return 0

    def net_hdr_pop(self, off: int, size: int) -> int:
        """bpf_skb_net_hdr_pop: the ``size`` bytes ``off`` bytes after data removed; 0, or
        -ENOMEM where the skb is shorter than ``off + size`` (pskb_may_pull)."""
        if off + size > self.len:
            return -errno.ENOMEM
        trans_same = self.transport_header == self.network_header
        data = self.data
        self.postpull_rcsum(data + off, size)
        self.buf[data + size:data + size + off] = self.buf[data:data + off]
        self.data += size
        self.mac_header += size
        self.network_header += size
        if trans_same:
            self.transport_header = self.network_header
        return 0


def skb_of(rs: RunState, helper: str) -> Skb:
    """The run's sk_buff, for a helper that changes its size or headers."""
    skb = rs.skb
    if skb is None:
        raise ProgramFault(errno.EOPNOTSUPP, f"{helper}: this run's skb has no emulated "
                           "sk_buff to change (only test runs have one)")
    return skb


def _complete(rs: RunState) -> Skb | None:
    """The run's skb where its ip_summed is CHECKSUM_COMPLETE (skb->csum to keep right)."""
    skb = rs.skb
    return skb if skb is not None and skb.csum_complete else None


def bpf_skb_load_bytes(rs: RunState, r1: int, r2: int, r3: int, r4: int, r5: int) -> int:
    """bpf_skb_load_bytes(skb, offset, to, len): ``len`` bytes of the packet from ``offset``
    (from skb->data, as LD_ABS reads) into ``to``; past the packet, ``to`` is zeroed and
    -EFAULT returned (skb_header_pointer's failure)."""
    offset, size = r2 & M32, r4 & M32
    packet = rs.packet
    if offset > INT_MAX or offset + size > len(packet):
        mem_write(rs, r3, bytes(size), "to (R3)")
        return -errno.EFAULT & M64
    mem_write(rs, r3, bytes(packet[offset:offset + size]), "to (R3)")
    return 0


def bpf_skb_pull_data(rs: RunState, r1: int, r2: int, r3: int, r4: int, r5: int) -> int:
    """bpf_skb_pull_data(skb, len) (and sk_skb_pull_data, its sk_skb twin): make the first
    ``len`` bytes (0: skb_headlen) linear and writable, skb_ensure_writable. The emulated
    skb's bytes (``rs.packet``, from skb->data) are all linear and its own: any ``len`` up
    to skb->len succeeds, a longer one fails pskb_may_pull, -ENOMEM. The verifier has
    forgotten the program's packet pointers (a helper that changes packet data)."""
    if r2 & M32 > len(rs.packet):
        return -errno.ENOMEM & M64
    return 0


def bpf_skb_store_bytes(rs: RunState, r1: int, r2: int, r3: int, r4: int, r5: int) -> int:
    """bpf_skb_store_bytes(skb, offset, from, len, flags) (__bpf_skb_store_bytes): ``len``
    bytes from ``from`` into the packet at ``offset`` (from skb->data). -EINVAL for a flag
    but BPF_F_RECOMPUTE_CSUM and BPF_F_INVALIDATE_HASH; -EFAULT for an offset over INT_MAX
    or bytes past skb->len (bpf_try_make_writable). BPF_F_RECOMPUTE_CSUM takes the old bytes
    out of a CHECKSUM_COMPLETE skb->csum and the new ones in; BPF_F_INVALIDATE_HASH's
    skb_clear_hash has nothing to clear, the emulated skbs' hash being 0."""
    offset, size, flags = r2 & M32, r4 & M32, r5
    if flags & ~(BPF_F_RECOMPUTE_CSUM | BPF_F_INVALIDATE_HASH):
        return -errno.EINVAL & M64
    packet = rs.packet
    if offset > INT_MAX or offset + size > len(packet):
        return -errno.EFAULT & M64
    data = mem_read(rs, r3, size, "from (R3)")
    skb = _complete(rs) if flags & BPF_F_RECOMPUTE_CSUM else None
    if skb is not None:  # __skb_postpull_rcsum
        skb.csum = csum_block_sub(skb.csum, csum_partial(bytes(packet[offset:offset + size]), 0),
                                  offset)
    packet[offset:offset + size] = data
    if skb is not None:  # __skb_postpush_rcsum
        skb.csum = csum_block_add(skb.csum, csum_partial(data, 0), offset)
    return 0


# -- skb size and header changes (net/core/filter.c) -----------------------------------------------
def bpf_skb_change_tail(rs: RunState, r1: int, r2: int, r3: int, r4: int, r5: int) -> int:
    """bpf_skb_change_tail(skb, len, flags) (__bpf_skb_change_tail): skb->len becomes
    ``len``, grown with zeros or trimmed. -EINVAL for flags, a length over BPF_SKB_MAX_LEN or
    under __bpf_skb_min_len (the network header's offset, the transport header's once set);
    -ENOTSUPP for an encapsulated skb. A change ends CHECKSUM_COMPLETE (__skb_grow_rcsum,
    __skb_trim_rcsum: skb->csum is left as it was); GSO is reset."""
    skb = skb_of(rs, "bpf_skb_change_tail")
    new_len = r2 & M32
    header = skb.network_header if skb.transport_header is None else skb.transport_header
    min_len = (header - skb.data) & M32
    ret = 0
    if r3 or new_len > BPF_SKB_MAX_LEN or new_len < min_len:
        ret = -errno.EINVAL
    elif skb.encapsulation:
        ret = -ENOTSUPP
    else:
        if new_len != skb.len:
            skb.resize(new_len)
            skb.csum_complete = False
        if skb.gso_size:  # skb_is_gso: skb_gso_reset
            skb.gso_size = skb.gso_segs = 0
    skb.attach(rs)
    return ret & M64


def bpf_skb_change_head(rs: RunState, r1: int, r2: int, r3: int, r4: int, r5: int) -> int:
    """bpf_skb_change_head(skb, head_room, flags): ``head_room`` zero bytes before data, the
    MAC header reset to them (the network header stays). -EINVAL for flags, or a length
    over BPF_SKB_MAX_LEN (a GSO skb has no limit but kmalloc's, push's -ENOMEM) or past
    2^32."""
    skb = skb_of(rs, "bpf_skb_change_head")
    head_room = r2 & M32
    new_len = skb.len + head_room
    ret = 0
    # a head_room past INT_MAX is a negative delta to skb_cow: -EINVAL (measured on 6.18)
    if r3 or (not skb.gso_size and new_len > BPF_SKB_MAX_LEN) or new_len > M32 \
            or head_room > INT_MAX:
        ret = -errno.EINVAL
    else:
        ret = skb.push(head_room)
    if not ret:
        skb.buf[skb.data:skb.data + head_room] = bytes(head_room)
        skb.mac_header = skb.data  # skb_reset_mac_header
    skb.attach(rs)
    return ret & M64


_ADJ_ROOM_ENCAP_L3 = BPF_F_ADJ_ROOM_ENCAP_L3_IPV4 | BPF_F_ADJ_ROOM_ENCAP_L3_IPV6
_ADJ_ROOM_DECAP_L3 = BPF_F_ADJ_ROOM_DECAP_L3_IPV4 | BPF_F_ADJ_ROOM_DECAP_L3_IPV6
_ADJ_ROOM_MASK = (BPF_F_ADJ_ROOM_FIXED_GSO | _ADJ_ROOM_ENCAP_L3 | BPF_F_ADJ_ROOM_ENCAP_L4_GRE
                  | BPF_F_ADJ_ROOM_ENCAP_L4_UDP | BPF_F_ADJ_ROOM_ENCAP_L2_ETH
                  | BPF_F_ADJ_ROOM_ENCAP_L2(BPF_ADJ_ROOM_ENCAP_L2_MASK) | _ADJ_ROOM_DECAP_L3)


def _net_base_len(protocol: int) -> int:
    """bpf_skb_net_base_len: the IP header's fixed length, ~0 for any other protocol."""
    return {ETH_P_IP: IPV4_HLEN, ETH_P_IPV6: IPV6_HLEN}.get(protocol, M32)


def _net_shrink(skb: Skb, off: int, len_diff: int, flags: int) -> int:
    """bpf_skb_net_shrink: the room out; a decapsulation's flag makes skb->protocol the
    inner IP version."""
    if flags & ~(BPF_F_ADJ_ROOM_FIXED_GSO | _ADJ_ROOM_DECAP_L3 | BPF_F_ADJ_ROOM_NO_CSUM_RESET):
        return -errno.EINVAL
    if skb.gso_size:  # neither TCP nor UDP_L4 GSO
        return -ENOTSUPP
    ret = skb.net_hdr_pop(off, len_diff)
    if ret:
        return ret
    if skb.protocol == ETH_P_IP and flags & BPF_F_ADJ_ROOM_DECAP_L3_IPV6:
        skb.protocol = ETH_P_IPV6
    elif skb.protocol == ETH_P_IPV6 and flags & BPF_F_ADJ_ROOM_DECAP_L3_IPV4:
        skb.protocol = ETH_P_IP
    return 0


def _net_grow(skb: Skb, off: int, len_diff: int, flags: int) -> int:
    """bpf_skb_net_grow: the room, and for an encapsulation (an ENCAP_L3 flag) the skb
    marked encapsulated, its outer network (and with GRE or UDP, transport) header set and
    skb->protocol the outer IP version."""
    inner_mac_len = flags >> BPF_ADJ_ROOM_ENCAP_L2_SHIFT & BPF_ADJ_ROOM_ENCAP_L2_MASK
    encap = flags & _ADJ_ROOM_ENCAP_L3
    if skb.gso_size:
        return -ENOTSUPP
    mac_len = skb.network_header - skb.mac_header
    if encap:
        if flags & _ADJ_ROOM_ENCAP_L3 == _ADJ_ROOM_ENCAP_L3 \
                or flags & BPF_F_ADJ_ROOM_ENCAP_L4_GRE and flags & BPF_F_ADJ_ROOM_ENCAP_L4_UDP \
                or flags & BPF_F_ADJ_ROOM_ENCAP_L2_ETH and inner_mac_len < ETH_HLEN:
            return -errno.EINVAL
        if skb.encapsulation:
            return -errno.EALREADY
        if inner_mac_len > len_diff:
            return -errno.EINVAL
    ret = skb.net_hdr_push(off, len_diff)
    if ret:
        return ret
    if encap:
        skb.encapsulation = True
        skb.network_header = skb.data + mac_len
        if flags & (BPF_F_ADJ_ROOM_ENCAP_L4_GRE | BPF_F_ADJ_ROOM_ENCAP_L4_UDP):
            ipv6 = flags & BPF_F_ADJ_ROOM_ENCAP_L3_IPV6
            skb.transport_header = skb.network_header + (IPV6_HLEN if ipv6 else IPV4_HLEN)
        if skb.protocol == ETH_P_IP and flags & BPF_F_ADJ_ROOM_ENCAP_L3_IPV6:
            skb.protocol = ETH_P_IPV6
        elif skb.protocol == ETH_P_IPV6 and flags & BPF_F_ADJ_ROOM_ENCAP_L3_IPV4:
            skb.protocol = ETH_P_IP
    return 0


def bpf_skb_adjust_room(rs: RunState, r1: int, r2: int, r3: int, r4: int, r5: int) -> int:
    """bpf_skb_adjust_room(skb, len_diff, mode, flags): ``len_diff`` (s32) zero bytes
    inserted after the MAC header (BPF_ADJ_ROOM_MAC) or after the fixed IP header
    (BPF_ADJ_ROOM_NET), or removed from there. -EINVAL for flags (a shrink takes only
    FIXED_GSO, NO_CSUM_RESET and one DECAP_L3 flag, which only a shrink takes), -EFAULT
    past 0xfff bytes, -ENOTSUPP for a protocol but IPv4 and IPv6, another mode, a shrink
    into the (inner) IP header or a length past BPF_SKB_MAX_LEN; an encapsulation's flags
    as bpf_skb_net_grow checks them."""
    skb = skb_of(rs, "bpf_skb_adjust_room")
    len_diff, mode, flags = _s32(r2), r3 & M32, r4
    len_diff_abs = abs(len_diff)
    len_min = _net_base_len(skb.protocol)
    if flags & BPF_F_ADJ_ROOM_DECAP_L3_IPV4:  # what is left must hold the inner header
        len_min = IPV4_HLEN
    elif flags & BPF_F_ADJ_ROOM_DECAP_L3_IPV6:
        len_min = IPV6_HLEN
    off = skb.network_header - skb.mac_header  # skb_mac_header_len
    len_cur = (skb.len - (skb.network_header - skb.data)) & M32
    shrink = len_diff < 0
    if flags & ~(_ADJ_ROOM_MASK | BPF_F_ADJ_ROOM_NO_CSUM_RESET):
        ret = -errno.EINVAL
    elif len_diff_abs > 0xFFF:
        ret = -errno.EFAULT
    elif skb.protocol not in (ETH_P_IP, ETH_P_IPV6) or mode not in (BPF_ADJ_ROOM_NET,
                                                                      BPF_ADJ_ROOM_MAC):
        ret = -ENOTSUPP
    elif flags & _ADJ_ROOM_DECAP_L3 and (not shrink or flags & _ADJ_ROOM_DECAP_L3
                                         == _ADJ_ROOM_DECAP_L3):
        ret = -errno.EINVAL  # a decapsulation is a shrink, to one IP version
    elif shrink and (len_diff_abs >= len_cur or len_cur - len_diff_abs < len_min) or (
            not shrink and skb.len + len_diff_abs > BPF_SKB_MAX_LEN and not skb.gso_size):
        ret = -ENOTSUPP
    else:
        off += _net_base_len(skb.protocol) if mode == BPF_ADJ_ROOM_NET else 0
        ret = (_net_shrink if shrink else _net_grow)(skb, off, len_diff_abs, flags)
    skb.attach(rs)
    return ret & M64


def _eth_type_vlan(protocol: int) -> bool:
    return protocol in (ETH_P_8021Q, ETH_P_8021AD)


def bpf_skb_vlan_push(rs: RunState, r1: int, r2: int, r3: int, r4: int, r5: int) -> int:
    """bpf_skb_vlan_push(skb, vlan_proto, vlan_tci) (skb_vlan_push): the tag becomes the
    skb's hardware-accelerated one (any vlan_proto but 802.1Q and 802.1ad is 802.1Q); a tag
    already there goes into the frame first (__vlan_insert_tag after the MAC addresses,
    skb->protocol its proto, its four bytes added to skb->csum)."""
    skb = skb_of(rs, "bpf_skb_vlan_push")
    vlan_proto = int.from_bytes((r2 & U16_MAX).to_bytes(2, "little"), "big")  # a __be16
    if not _eth_type_vlan(vlan_proto):
        vlan_proto = ETH_P_8021Q
    if skb.vlan_proto:
        ret = skb.push(VLAN_HLEN)
        if ret:
            skb.attach(rs)
            return ret & M64
        buf, data = skb.buf, skb.data
        buf[data:data + 2 * ETH_ALEN] = buf[data + VLAN_HLEN:data + VLAN_HLEN + 2 * ETH_ALEN]
        skb.mac_header -= VLAN_HLEN
        skb.network_header -= VLAN_HLEN  # at the tag's TCI (measured on 6.18)
        buf[data + 2 * ETH_ALEN:data + ETH_HLEN] = skb.vlan_proto.to_bytes(2, "big")
        buf[data + ETH_HLEN:data + VLAN_ETH_HLEN - 2] = skb.vlan_tci.to_bytes(2, "big")
        skb.protocol = skb.vlan_proto
        skb.postpush_rcsum(data + 2 * ETH_ALEN, VLAN_HLEN)
    skb.vlan_proto, skb.vlan_tci = vlan_proto, r3 & U16_MAX
    skb.attach(rs)
    return 0


def _skb_vlan_pop_frame(skb: Skb) -> tuple[int, int]:
    """__skb_vlan_pop: the frame's outer tag out (its four bytes out of skb->csum),
    skb->protocol the type it carried (vlan_set_encap_proto: an 802.3 length is raw IPX's
    ETH_P_802_3 when 0xFFFF follows, else 802.2), the network header at least ETH_HLEN in;
    (0, the tag's TCI), or (-ENOMEM, 0) for a frame shorter than VLAN_ETH_HLEN."""
    if skb.len < VLAN_ETH_HLEN:
        return -errno.ENOMEM, 0
    buf, data = skb.buf, skb.data
    skb.postpull_rcsum(data + 2 * ETH_ALEN, VLAN_HLEN)
    vlan_tci = int.from_bytes(buf[data + ETH_HLEN:data + ETH_HLEN + 2], "big")
    proto = int.from_bytes(buf[data + VLAN_ETH_HLEN - 2:data + VLAN_ETH_HLEN], "big")
    buf[data + VLAN_HLEN:data + VLAN_HLEN + 2 * ETH_ALEN] = buf[data:data + 2 * ETH_ALEN]
    if proto < ETH_P_802_3_MIN:  # past the frame the kernel reads the zeroed shared info
        raw = buf[data + VLAN_ETH_HLEN:data + VLAN_ETH_HLEN + 2]
        proto = ETH_P_802_3 if raw == b"\xff\xff" else ETH_P_802_2
    skb.protocol = proto
    skb.data += VLAN_HLEN
    skb.mac_header += VLAN_HLEN
    if skb.network_header - skb.data < ETH_HLEN:
        skb.network_header = skb.data + ETH_HLEN
    return 0, vlan_tci


def _skb_vlan_pop(skb: Skb) -> int:
    """skb_vlan_pop: the hardware-accelerated tag, else the frame's; then a tag the frame
    still has moves into the hardware-accelerated one."""
    if skb.vlan_proto:
        skb.vlan_proto = skb.vlan_tci = 0
    elif not _eth_type_vlan(skb.protocol):
        return 0
    else:
        err, _ = _skb_vlan_pop_frame(skb)
        if err:
            return err
    if not _eth_type_vlan(skb.protocol):
        return 0
    vlan_proto = skb.protocol
    err, vlan_tci = _skb_vlan_pop_frame(skb)
    if not err:
        skb.vlan_proto, skb.vlan_tci = vlan_proto, vlan_tci
    return err


def bpf_skb_vlan_pop(rs: RunState, r1: int, r2: int, r3: int, r4: int, r5: int) -> int:
    """bpf_skb_vlan_pop(skb): skb_vlan_pop; -ENOMEM where a tag to pop from the frame is
    cut short."""
    skb = skb_of(rs, "bpf_skb_vlan_pop")
    ret = _skb_vlan_pop(skb)
    skb.attach(rs)
    return ret & M64


def bpf_skb_change_proto(rs: RunState, r1: int, r2: int, r3: int, r4: int, r5: int) -> int:
    """bpf_skb_change_proto(skb, proto, flags) (bpf_skb_proto_xlat): IPv4 to IPv6 inserts
    the headers' difference (20 zero bytes) after the MAC header, IPv6 to IPv4 removes it
    (-ENOMEM for a shorter frame); skb->protocol follows. -EINVAL for flags, -ENOTSUPP for
    any other pair."""
    skb = skb_of(rs, "bpf_skb_change_proto")
    to_proto = int.from_bytes((r2 & U16_MAX).to_bytes(2, "little"), "big")  # a __be16
    off = skb.network_header - skb.mac_header  # skb_mac_header_len
    len_diff = IPV6_HLEN - IPV4_HLEN
    ret = 0
    if r3:
        ret = -errno.EINVAL
    elif skb.protocol == ETH_P_IP and to_proto == ETH_P_IPV6:
        ret = skb.net_hdr_push(off, len_diff)
        if not ret:
            skb.protocol = ETH_P_IPV6
    elif skb.protocol == ETH_P_IPV6 and to_proto == ETH_P_IP:
        ret = skb.net_hdr_pop(off, len_diff)
        if not ret:
            skb.protocol = ETH_P_IP
    else:
        ret = -ENOTSUPP
    skb.attach(rs)
    return ret & M64


def bpf_skb_change_type(rs: RunState, r1: int, r2: int, r3: int, r4: int, r5: int) -> int:
    """bpf_skb_change_type(skb, pkt_type): -EINVAL unless both the skb's pkt_type and the
    new one are up to PACKET_OTHERHOST (skb_pkt_type_ok)."""
    skb = skb_of(rs, "bpf_skb_change_type")
    pkt_type = r2 & M32
    if skb.pkt_type > PACKET_OTHERHOST or pkt_type > PACKET_OTHERHOST:
        return -errno.EINVAL & M64
    skb.pkt_type = pkt_type
    skb.attach(rs)
    return 0


# -- perf event output of packets (net/core/filter.c; bpf_trace.py) ------------------------------
def bpf_skb_event_output(rs: RunState, r1: int, r2: int, r3: int, r4: int, r5: int) -> int:
    """bpf_skb_event_output(skb, map, flags, meta, meta_size): bpf_perf_event_output of the
    ``meta_size`` bytes at ``meta`` and then the packet's first ``flags``' BPF_F_CTXLEN_MASK
    bytes (from skb->data, bpf_skb_copy); other flags: -EINVAL; more than skb->len: -EFAULT."""
    skb_size = (r3 & BPF_F_CTXLEN_MASK) >> 32
    if r3 & ~(BPF_F_CTXLEN_MASK | BPF_F_INDEX_MASK):
        return -errno.EINVAL & M64
    packet = rs.packet
    if skb_size > len(packet):
        return -errno.EFAULT & M64
    return bpf_event_output(rs, bpf_map_of(rs, r2, "bpf_skb_event_output"), r3,
                            mem_read(rs, r4, r5, "meta (R4)"), bytes(packet[:skb_size]))


def bpf_xdp_event_output(rs: RunState, r1: int, r2: int, r3: int, r4: int, r5: int) -> int:
    """bpf_xdp_event_output: bpf_skb_event_output's twin for an xdp_buff, its bytes from
    data (bpf_xdp_copy); more than xdp_get_buff_len: -EFAULT. The emulated buffer keeps only
    the size of its frags, not their bytes: copying from them is a fault."""
    xdp_size = (r3 & BPF_F_CTXLEN_MASK) >> 32
    if r3 & ~(BPF_F_CTXLEN_MASK | BPF_F_INDEX_MASK):
        return -errno.EINVAL & M64
    ptrs, packet = _xdp_buff(rs, r1, "bpf_xdp_event_output")
    data, data_end = ptrs[XDP_MD_DATA] & OFF_MASK, ptrs[XDP_MD_DATA_END] & OFF_MASK
    if xdp_size > data_end - data + rs.xdp_frags_size:
        return -errno.EFAULT & M64
    if xdp_size > data_end - data:
        raise ProgramFault(errno.EOPNOTSUPP, f"bpf_xdp_event_output: {xdp_size} bytes reach "
                           "into the buffer's frags, whose bytes the emulated run does not keep")
    return bpf_event_output(rs, bpf_map_of(rs, r2, "bpf_xdp_event_output"), r3,
                            mem_read(rs, r4, r5, "meta (R4)"), bytes(packet[data:data + xdp_size]))


# -- checksums (net/core/filter.c, arch/x86/lib/csum-partial_64.c, include/net/checksum.h) ------
def csum_partial(data: bytes, seed: int) -> int:
    """x86-64's csum_partial: ``data`` as little-endian 64-bit words (the tail zero-padded)
    added to the 32-bit ``seed`` with end-around carry, folded to 32 bits as
    csum_finalize_sum folds it ((sum + ror64(sum, 32)) >> 32)."""
    padded = data + bytes(-len(data) % 8)
    total = seed + sum(struct.unpack(f"<{len(padded) // 8}Q", padded))
    while total >> 64:
        total = (total & M64) + (total >> 64)
    return ((total + (total >> 32 | total << 32 & M64)) >> 32) & M32


def csum_add(csum: int, addend: int) -> int:
    """csum_add: 32-bit addition with end-around carry."""
    total = (csum + addend) & M32
    return total + (total < addend)


def csum_from32to16(csum: int) -> int:
    """csum_from32to16: the 32-bit sum folded to 16 bits (not complemented)."""
    csum = (csum + (csum >> 16 | csum << 16 & M32)) & M32
    return csum >> 16


def csum_sub(csum: int, addend: int) -> int:
    return csum_add(csum, ~addend & M32)


def csum_fold(csum: int) -> int:
    """csum_fold: the 32-bit sum folded to 16 bits and complemented (a __sum16)."""
    return ~csum_from32to16(csum) & U16_MAX


def csum_block_add(csum: int, csum2: int, offset: int) -> int:
    """csum_block_add: ``csum2``, the sum of bytes at ``offset``, rotated a byte when the
    offset is odd (csum_shift), added to ``csum``."""
    if offset & 1:
        csum2 = (csum2 >> 8 | csum2 << 24) & M32
    return csum_add(csum, csum2)


def csum_block_sub(csum: int, csum2: int, offset: int) -> int:
    return csum_block_add(csum, ~csum2 & M32, offset)


def csum16_add(csum: int, addend: int) -> int:
    """csum16_add: 16-bit addition with end-around carry."""
    total = (csum + addend) & U16_MAX
    return total + (total < addend)


def csum_replace4(csum: int, old: int, new: int) -> int:
    """csum_replace4 on a __sum16's value: the 32-bit field ``old`` became ``new``."""
    return csum_fold(csum_add(csum_sub(~csum & M32, old), new))  # ~ of the unfolded u32


def csum_replace2(csum: int, old: int, new: int) -> int:
    """csum_replace2 (RFC 1624's HC' = ~(~HC + ~m + m')): the 16-bit field ``old`` became
    ``new``."""
    return ~csum16_add(csum16_add(~csum & U16_MAX, ~old & U16_MAX), new) & U16_MAX


def csum_replace_by_diff(csum: int, diff: int) -> int:
    """csum_replace_by_diff: ``diff`` (a bpf_csum_diff result) added to the checksum."""
    return csum_fold(csum_add(diff, ~csum & M32))


def bpf_csum_diff(rs: RunState, r1: int, r2: int, r3: int, r4: int, r5: int) -> int:
    """bpf_csum_diff(from, from_size, to, to_size, seed) as 6.13+ computes it: the sum of
    ``to`` less that of ``from`` (either may be empty, then NULL), from the 32-bit seed,
    folded to 16 bits, so the same on every architecture. Any sizes the verifier lets
    through are taken: the old scratch buffer's -EINVAL (sizes not multiples of 4, more
    than 512 bytes in all) went with it."""
    from_size, to_size, ret = r2 & M32, r4 & M32, r5 & M32
    if from_size and to_size:
        to = csum_partial(mem_read(rs, r3, to_size, "to (R3)"), ret)
        ret = csum_add(to, ~csum_partial(mem_read(rs, r1, from_size, "from (R1)"), 0) & M32)
    elif to_size:
        ret = csum_partial(mem_read(rs, r3, to_size, "to (R3)"), ret)
    elif from_size:
        ret = ~csum_partial(mem_read(rs, r1, from_size, "from (R1)"), ~ret & M32) & M32
    return csum_from32to16(ret)


def _csum_field(rs: RunState, offset: int) -> int | None:
    """The offset of the __sum16 the csum_replace helpers update, or None where they answer
    -EFAULT: past 0xffff, odd, or not within skb->len (bpf_try_make_writable)."""
    if offset > U16_MAX or offset & 1 or offset + 2 > len(rs.packet):
        return None
    return offset


def bpf_l3_csum_replace(rs: RunState, r1: int, r2: int, r3: int, r4: int, r5: int) -> int:
    """bpf_l3_csum_replace(skb, offset, from, to, flags): the checksum (an IPv4 header's) at
    ``offset`` updated for a field of ``flags & BPF_F_HDR_FIELD_MASK`` bytes that went from
    ``from`` to ``to`` (2 and 4: their low bytes, in the packet's byte order), or with 0 by
    the diff ``to`` (``from`` must then be 0). skb->csum is left alone: the field and its
    checksum change by opposite amounts, once the program has stored the field too."""
    flags, frm, to = r5, r3, r4
    if flags & ~BPF_F_HDR_FIELD_MASK:
        return -errno.EINVAL & M64
    offset = _csum_field(rs, r2 & M32)
    if offset is None:
        return -errno.EFAULT & M64
    packet = rs.packet
    csum = int.from_bytes(packet[offset:offset + 2], "little")
    size = flags & BPF_F_HDR_FIELD_MASK
    if size == 0 and not frm:
        csum = csum_replace_by_diff(csum, to & M32)
    elif size == 2:
        csum = csum_replace2(csum, frm & U16_MAX, to & U16_MAX)
    elif size == 4:
        csum = csum_replace4(csum, frm & M32, to & M32)
    else:
        return -errno.EINVAL & M64
    packet[offset:offset + 2] = csum.to_bytes(2, "little")
    return 0


CSUM_MANGLED_0 = U16_MAX  # a UDP checksum that came out 0 (0 means "none" there)


def bpf_l4_csum_replace(rs: RunState, r1: int, r2: int, r3: int, r4: int, r5: int) -> int:
    """bpf_l4_csum_replace(skb, offset, from, to, flags): as bpf_l3_csum_replace, for a TCP
    or UDP checksum (inet_proto_csum_replace4 and _by_diff: a 2-byte field is a 4-byte one
    with zeros above). BPF_F_PSEUDO_HDR: the field is an address, also in the pseudo-header,
    so a CHECKSUM_COMPLETE skb->csum takes the change the checksum did not (not for a diff
    with BPF_F_IPV6, whose diff spans the whole address). BPF_F_MARK_MANGLED_0: a checksum
    of 0 (none) stays 0 unless BPF_F_MARK_ENFORCE, a result of 0 becomes CSUM_MANGLED_0."""
    flags, frm, to = r5, r3, r4
    if flags & ~(BPF_F_MARK_MANGLED_0 | BPF_F_MARK_ENFORCE | BPF_F_PSEUDO_HDR
                 | BPF_F_HDR_FIELD_MASK | BPF_F_IPV6):
        return -errno.EINVAL & M64
    offset = _csum_field(rs, r2 & M32)
    if offset is None:
        return -errno.EFAULT & M64
    packet = rs.packet
    csum = int.from_bytes(packet[offset:offset + 2], "little")
    mangled_0 = flags & BPF_F_MARK_MANGLED_0
    if mangled_0 and not flags & BPF_F_MARK_ENFORCE and not csum:
        return 0
    skb = _complete(rs) if flags & BPF_F_PSEUDO_HDR else None
    size = flags & BPF_F_HDR_FIELD_MASK
    if size == 0 and not frm:  # inet_proto_csum_replace_by_diff
        diff = to & M32
        csum = csum_replace_by_diff(csum, diff)
        if skb is not None and not flags & BPF_F_IPV6:
            skb.csum = ~csum_sub(diff, skb.csum) & M32
    elif size in (2, 4):  # inet_proto_csum_replace4 (replace2 widens the fields)
        mask = U16_MAX if size == 2 else M32
        frm, to = frm & mask, to & mask
        csum = csum_replace4(csum, frm, to)
        if skb is not None:
            skb.csum = ~csum_add(csum_sub(~skb.csum & M32, frm), to) & M32
    else:
        return -errno.EINVAL & M64
    if mangled_0 and not csum:
        csum = CSUM_MANGLED_0
    packet[offset:offset + 2] = csum.to_bytes(2, "little")
    return 0


# -- XDP packet adjustments (net/core/filter.c) ---------------------------------------------------
XDP_FRAME_SIZE = 40  # sizeof(struct xdp_frame): the head cannot grow into it
_XDP_HARD_END = 4096 - 320  # frame_sz less the skb_shared_info tailroom


def _xdp_buff(rs: RunState, ctx: int, helper: str) -> tuple[dict[int, int], bytearray]:
    region = rs.mem.get(ctx >> 32) if ctx >= 0 else None
    packet = rs.mem.get(PACKET_REGION)
    if type(region) is not CtxRegion or region.name != "xdp_md" or ctx & OFF_MASK \
            or packet is None:
        raise ProgramFault(errno.EFAULT, f"{helper}: R1 is not the xdp_md context")
    return region.pointers, packet


def _s32(value: int) -> int:
    value &= M32
    return value - (1 << 32) if value >> 31 else value


def bpf_xdp_adjust_head(rs: RunState, r1: int, r2: int, r3: int, r4: int, r5: int) -> int:
    """Move xdp->data by ``offset`` (the metadata moves with it)."""
    ptrs, packet = _xdp_buff(rs, r1, "bpf_xdp_adjust_head")
    offset = _s32(r2)
    base = PACKET_REGION << 32
    data, data_end, meta = ptrs[XDP_MD_DATA], ptrs[XDP_MD_DATA_END], ptrs[XDP_MD_DATA_META]
    metalen = data - meta
    new_data = data + offset
    if new_data < base + XDP_FRAME_SIZE + metalen or new_data > data_end - ETH_HLEN:
        return -errno.EINVAL & M64
    if metalen:
        start = meta & OFF_MASK
        packet[start + offset:start + offset + metalen] = packet[start:start + metalen]
    ptrs[XDP_MD_DATA_META] = meta + offset
    ptrs[XDP_MD_DATA] = new_data
    return 0


def bpf_xdp_adjust_tail(rs: RunState, r1: int, r2: int, r3: int, r4: int, r5: int) -> int:
    """Move xdp->data_end by ``offset``; grown bytes are zeroed."""
    ptrs, packet = _xdp_buff(rs, r1, "bpf_xdp_adjust_tail")
    offset = _s32(r2)
    data_end = ptrs[XDP_MD_DATA_END]
    new_end = data_end + offset
    if new_end > (PACKET_REGION << 32) + _XDP_HARD_END or new_end < ptrs[XDP_MD_DATA] + ETH_HLEN:
        return -errno.EINVAL & M64
    if offset > 0:
        start = data_end & OFF_MASK
        packet[start:start + offset] = bytes(offset)
    ptrs[XDP_MD_DATA_END] = new_end
    return 0


def bpf_xdp_adjust_meta(rs: RunState, r1: int, r2: int, r3: int, r4: int, r5: int) -> int:
    """Move xdp->data_meta by ``offset``: the metadata area before the packet."""
    ptrs, _ = _xdp_buff(rs, r1, "bpf_xdp_adjust_meta")
    meta = ptrs[XDP_MD_DATA_META] + _s32(r2)
    if meta < (PACKET_REGION << 32) + XDP_FRAME_SIZE or meta > ptrs[XDP_MD_DATA]:
        return -errno.EINVAL & M64
    if (ptrs[XDP_MD_DATA] - meta) % 4:
        return -errno.EACCES & M64
    ptrs[XDP_MD_DATA_META] = meta
    return 0


def bpf_xdp_get_buff_len(rs: RunState, r1: int, r2: int, r3: int, r4: int, r5: int) -> int:
    """xdp_get_buff_len: the linear part (data to data_end) and, for a buffer with frags,
    the bytes in them (skb_shared_info.xdp_frags_size)."""
    ptrs, _ = _xdp_buff(rs, r1, "bpf_xdp_get_buff_len")
    return ptrs[XDP_MD_DATA_END] - ptrs[XDP_MD_DATA] + rs.xdp_frags_size
