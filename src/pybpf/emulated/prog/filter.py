"""Program contexts: which bytes of its context a program type may read or write, what a
load there yields, and how narrow loads read (net/core/filter.c, kernel/trace/bpf_trace.c).

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
"""

from __future__ import annotations

import struct

from ...uapi import AttachType, ProgType

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
