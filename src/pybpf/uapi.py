"""Every number of the bpf(2) ABI that pybpf uses, in one place.

Values are those of include/uapi/linux/bpf.h as of Linux 6.18. Both backends
and the Pythonic layer take their constants from here, never from literals.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TypeVar


class Cmd(enum.IntEnum):
    """enum bpf_cmd."""

    MAP_CREATE = 0
    MAP_LOOKUP_ELEM = 1
    MAP_UPDATE_ELEM = 2
    MAP_DELETE_ELEM = 3
    MAP_GET_NEXT_KEY = 4
    PROG_LOAD = 5
    OBJ_PIN = 6
    OBJ_GET = 7
    PROG_ATTACH = 8
    PROG_DETACH = 9
    PROG_TEST_RUN = 10
    PROG_GET_NEXT_ID = 11
    MAP_GET_NEXT_ID = 12
    PROG_GET_FD_BY_ID = 13
    MAP_GET_FD_BY_ID = 14
    OBJ_GET_INFO_BY_FD = 15
    PROG_QUERY = 16
    RAW_TRACEPOINT_OPEN = 17
    BTF_LOAD = 18
    BTF_GET_FD_BY_ID = 19
    TASK_FD_QUERY = 20
    MAP_LOOKUP_AND_DELETE_ELEM = 21
    MAP_FREEZE = 22
    BTF_GET_NEXT_ID = 23
    MAP_LOOKUP_BATCH = 24
    MAP_LOOKUP_AND_DELETE_BATCH = 25
    MAP_UPDATE_BATCH = 26
    MAP_DELETE_BATCH = 27
    LINK_CREATE = 28
    LINK_UPDATE = 29
    LINK_GET_FD_BY_ID = 30
    LINK_GET_NEXT_ID = 31
    ENABLE_STATS = 32
    ITER_CREATE = 33
    LINK_DETACH = 34
    PROG_BIND_MAP = 35
    TOKEN_CREATE = 36


class MapType(enum.IntEnum):
    """enum bpf_map_type."""

    UNSPEC = 0
    HASH = 1
    ARRAY = 2
    PROG_ARRAY = 3
    PERF_EVENT_ARRAY = 4
    PERCPU_HASH = 5
    PERCPU_ARRAY = 6
    STACK_TRACE = 7
    CGROUP_ARRAY = 8
    LRU_HASH = 9
    LRU_PERCPU_HASH = 10
    LPM_TRIE = 11
    ARRAY_OF_MAPS = 12
    HASH_OF_MAPS = 13
    DEVMAP = 14
    SOCKMAP = 15
    CPUMAP = 16
    XSKMAP = 17
    SOCKHASH = 18
    CGROUP_STORAGE = 19
    REUSEPORT_SOCKARRAY = 20
    PERCPU_CGROUP_STORAGE = 21
    QUEUE = 22
    STACK = 23
    SK_STORAGE = 24
    DEVMAP_HASH = 25
    STRUCT_OPS = 26
    RINGBUF = 27
    INODE_STORAGE = 28
    TASK_STORAGE = 29
    BLOOM_FILTER = 30
    USER_RINGBUF = 31
    CGRP_STORAGE = 32
    ARENA = 33


# Element-operation flags (attr->flags, batch.elem_flags).
BPF_ANY = 0
BPF_NOEXIST = 1
BPF_EXIST = 2
BPF_F_LOCK = 4
# Sockmap CPU affinity as the reviewers asked for it (Andrii Nakryiko, 2024): this flag on a
# SOCKMAP/SOCKHASH update puts the target CPU of the socket's psock backlog work in the upper
# 32 bits of flags (0 is a CPU). Never merged, so no kernel assigned it a bit: pybpf's value,
# emulated backend only (the kernel answers EINVAL for the unknown flag).
BPF_F_SOCKMAP_TARGET_CPU = 1 << 5

# Redirect helper flags (bpf_sk_redirect_*, bpf_msg_redirect_*): to the target's receive
# queue instead of its transmit path.
BPF_F_INGRESS = 1
# bpf_skb_store_bytes flags
BPF_F_RECOMPUTE_CSUM = 1 << 0  # keep a CHECKSUM_COMPLETE skb->csum right over the bytes
BPF_F_INVALIDATE_HASH = 1 << 1  # skb_clear_hash
# bpf_l3_csum_replace / bpf_l4_csum_replace flags: the low four bits are the size of the
# field replaced (0: ``to`` is a bpf_csum_diff result, 2 or 4 bytes)
BPF_F_HDR_FIELD_MASK = 0xF
BPF_F_PSEUDO_HDR = 1 << 4  # the field is in the pseudo-header too (an address)
BPF_F_MARK_MANGLED_0 = 1 << 5  # a UDP checksum: 0 stays 0 (none), a result of 0 is 0xffff
BPF_F_MARK_ENFORCE = 1 << 6  # with MARK_MANGLED_0: update a checksum of 0 all the same
BPF_F_IPV6 = 1 << 7  # (6.16) an IPv6 packet: a diff to the pseudo-header leaves skb->csum
# bpf_skb_adjust_room: where the room goes (mode) and its flags; ENCAP_L2(len) puts the
# inner MAC header's length in the top byte
BPF_ADJ_ROOM_NET, BPF_ADJ_ROOM_MAC = 0, 1
BPF_F_ADJ_ROOM_FIXED_GSO = 1 << 0
BPF_F_ADJ_ROOM_ENCAP_L3_IPV4 = 1 << 1
BPF_F_ADJ_ROOM_ENCAP_L3_IPV6 = 1 << 2
BPF_F_ADJ_ROOM_ENCAP_L4_GRE = 1 << 3
BPF_F_ADJ_ROOM_ENCAP_L4_UDP = 1 << 4
BPF_F_ADJ_ROOM_NO_CSUM_RESET = 1 << 5
BPF_F_ADJ_ROOM_ENCAP_L2_ETH = 1 << 6
BPF_F_ADJ_ROOM_DECAP_L3_IPV4 = 1 << 7  # (6.3) a shrink leaves this outer IP version
BPF_F_ADJ_ROOM_DECAP_L3_IPV6 = 1 << 8
BPF_ADJ_ROOM_ENCAP_L2_SHIFT, BPF_ADJ_ROOM_ENCAP_L2_MASK = 56, 0xFF


def BPF_F_ADJ_ROOM_ENCAP_L2(length: int) -> int:  # noqa: N802 - the UAPI macro's name
    return (length & BPF_ADJ_ROOM_ENCAP_L2_MASK) << BPF_ADJ_ROOM_ENCAP_L2_SHIFT


# sk_skb / sk_msg verdicts
SK_DROP = 0
SK_PASS = 1
# tc verdicts a helper returns (include/uapi/linux/pkt_cls.h): bpf_redirect's, in tc and
# lwt_xmit programs (where BPF_REDIRECT, 7, is the same value)
TC_ACT_SHOT = 2
TC_ACT_REDIRECT = 7


class MapFlags(enum.IntFlag):
    """map_flags of BPF_MAP_CREATE."""

    NO_PREALLOC = 0x1
    NO_COMMON_LRU = 0x2
    NUMA_NODE = 0x4
    RDONLY = 0x8
    WRONLY = 0x10
    STACK_BUILD_ID = 0x20
    ZERO_SEED = 0x40
    RDONLY_PROG = 0x80
    WRONLY_PROG = 0x100
    CLONE = 0x200
    MMAPABLE = 0x400
    PRESERVE_ELEMS = 0x800
    INNER_MAP = 0x1000
    LINK = 0x2000
    PATH_FD = 0x4000
    VTYPE_BTF_OBJ_FD = 0x8000
    TOKEN_FD = 0x10000
    SEGV_ON_FAULT = 0x20000
    NO_USER_CONV = 0x40000


# Plain ints: ~ of an IntFlag member only complements the defined bits, which would let
# unknown flag bits slip through masks such as ``flags & ~BPF_F_NUMA_NODE``.
BPF_F_NO_PREALLOC = int(MapFlags.NO_PREALLOC)
BPF_F_NO_COMMON_LRU = int(MapFlags.NO_COMMON_LRU)
BPF_F_NUMA_NODE = int(MapFlags.NUMA_NODE)
BPF_F_RDONLY = int(MapFlags.RDONLY)
BPF_F_WRONLY = int(MapFlags.WRONLY)
BPF_F_ZERO_SEED = int(MapFlags.ZERO_SEED)
BPF_F_RDONLY_PROG = int(MapFlags.RDONLY_PROG)
BPF_F_WRONLY_PROG = int(MapFlags.WRONLY_PROG)
BPF_F_MMAPABLE = int(MapFlags.MMAPABLE)
BPF_F_PRESERVE_ELEMS = int(MapFlags.PRESERVE_ELEMS)
BPF_F_INNER_MAP = int(MapFlags.INNER_MAP)

# include/linux/bpf.h: the flags that restrict access from syscalls or programs.
BPF_F_ACCESS_MASK = BPF_F_RDONLY | BPF_F_RDONLY_PROG | BPF_F_WRONLY | BPF_F_WRONLY_PROG

# numa_node value meaning "no preference" (NUMA_NO_NODE as an unsigned field).
NUMA_NO_NODE = -1

BPF_OBJ_NAME_LEN = 16

# errno values the map code returns that the errno module has no name for.
ENOTSUPP = 524

# Kernel limits the map code checks against (x86-64, 4 KiB pages).
KMALLOC_MAX_SIZE = 4 * 1024 * 1024
PCPU_MIN_UNIT_SIZE = 32 * 1024
MAX_BPF_STACK = 512

_E = TypeVar("_E", bound=enum.Enum)


def round_up(value: int, align: int) -> int:
    """Round ``value`` up to a multiple of ``align``."""
    return (value + align - 1) // align * align


def member_named(enum_type: type[_E], name: str, what: str) -> _E:
    """The member of ``enum_type`` called ``name`` (any case); ValueError listing the names."""
    try:
        return enum_type[name.upper()]
    except KeyError:
        raise ValueError(f"unknown {what} {name!r}: one of "
                         f"{', '.join(t.name.lower() for t in enum_type)}") from None


@dataclass(frozen=True)
class MapTraits:
    """What the syscall ABI and user space need to know about a map type, in one table.

    - ``percpu``: a value through the syscall is one ``round_up(value_size, 8)`` slot per
      possible CPU (bpf_map_value_size).
    - ``fd_values``: values are fds on update and object ids on lookup, 4 bytes (IS_FD_MAP).
    - ``map_in_map``: created with an inner-map template (``inner_map_fd``); values are maps.
    - ``indexed``: keys are u32 indices below max_entries, so E2BIG from an update means an
      index past the end, not a full map; user space defaults to int keys.
    - ``htab_batch``: the batch token is a u32 bucket index (hashtab.c's batch ops), not a key.
    - ``keyless``: key_size is 0 and commands take no key (queue, stack, bloom filter).
    - ``sparse``: every index iterates, but an empty slot has no value (ENOENT on lookup).
    - ``lru``: elements are evicted least recently used first when the map is full.
    - ``sockets``: values are sockets (sock_map.c).
    - ``redirect``: an XDP redirect target (bpf_redirect_map).
    """

    percpu: bool = False
    fd_values: bool = False
    map_in_map: bool = False
    indexed: bool = False
    htab_batch: bool = False
    keyless: bool = False
    sparse: bool = False
    lru: bool = False
    sockets: bool = False
    redirect: bool = False


_FD_ARRAY = MapTraits(fd_values=True, indexed=True, sparse=True)
MAP_TRAITS: dict[int, MapTraits] = {
    MapType.HASH: MapTraits(htab_batch=True),
    MapType.PERCPU_HASH: MapTraits(percpu=True, htab_batch=True),
    MapType.LRU_HASH: MapTraits(htab_batch=True, lru=True),
    MapType.LRU_PERCPU_HASH: MapTraits(percpu=True, htab_batch=True, lru=True),
    MapType.HASH_OF_MAPS: MapTraits(fd_values=True, map_in_map=True, htab_batch=True),
    MapType.ARRAY: MapTraits(indexed=True),
    MapType.PERCPU_ARRAY: MapTraits(percpu=True, indexed=True),
    MapType.PROG_ARRAY: _FD_ARRAY,
    MapType.PERF_EVENT_ARRAY: _FD_ARRAY,
    MapType.CGROUP_ARRAY: _FD_ARRAY,
    MapType.ARRAY_OF_MAPS: MapTraits(fd_values=True, map_in_map=True, indexed=True,
                                     sparse=True),
    MapType.PERCPU_CGROUP_STORAGE: MapTraits(percpu=True),
    MapType.DEVMAP: MapTraits(indexed=True, sparse=True, redirect=True),
    MapType.DEVMAP_HASH: MapTraits(redirect=True),
    MapType.CPUMAP: MapTraits(indexed=True, sparse=True, redirect=True),
    MapType.XSKMAP: MapTraits(indexed=True, sparse=True, redirect=True),
    MapType.SOCKMAP: MapTraits(indexed=True, sparse=True, sockets=True),
    MapType.SOCKHASH: MapTraits(sockets=True),
    MapType.QUEUE: MapTraits(keyless=True),
    MapType.STACK: MapTraits(keyless=True),
    MapType.BLOOM_FILTER: MapTraits(keyless=True),
}
_NO_TRAITS = MapTraits()


def map_traits(map_type: int) -> MapTraits:
    """The traits of ``map_type`` (all False for a type not in ``MAP_TRAITS``)."""
    return MAP_TRAITS.get(map_type, _NO_TRAITS)


def syscall_value_size(map_type: int, value_size: int, ncpus: int) -> int:
    """Bytes of a value buffer through the syscall (bpf_map_value_size)."""
    traits = map_traits(map_type)
    if traits.percpu:
        return round_up(value_size, 8) * ncpus
    if traits.fd_values:
        return 4
    return value_size


# -- programs (include/uapi/linux/bpf.h as of Linux 6.18) ------------------------------

class ProgType(enum.IntEnum):
    """enum bpf_prog_type."""

    UNSPEC = 0
    SOCKET_FILTER = 1
    KPROBE = 2
    SCHED_CLS = 3
    SCHED_ACT = 4
    TRACEPOINT = 5
    XDP = 6
    PERF_EVENT = 7
    CGROUP_SKB = 8
    CGROUP_SOCK = 9
    LWT_IN = 10
    LWT_OUT = 11
    LWT_XMIT = 12
    SOCK_OPS = 13
    SK_SKB = 14
    CGROUP_DEVICE = 15
    SK_MSG = 16
    RAW_TRACEPOINT = 17
    CGROUP_SOCK_ADDR = 18
    LWT_SEG6LOCAL = 19
    LIRC_MODE2 = 20
    SK_REUSEPORT = 21
    FLOW_DISSECTOR = 22
    CGROUP_SYSCTL = 23
    RAW_TRACEPOINT_WRITABLE = 24
    CGROUP_SOCKOPT = 25
    TRACING = 26
    STRUCT_OPS = 27
    EXT = 28
    LSM = 29
    SK_LOOKUP = 30
    SYSCALL = 31
    NETFILTER = 32


# prog_flags of BPF_PROG_LOAD: the program may sleep (SYSCALL programs must).
BPF_F_SLEEPABLE = 1 << 4
BPF_F_XDP_HAS_FRAGS = 1 << 5  # an XDP program that handles multi-buffer packets

# flags of BPF_PROG_TEST_RUN
BPF_F_TEST_RUN_ON_CPU = 1 << 0
BPF_F_TEST_XDP_LIVE_FRAMES = 1 << 1  # XDP: the frames really go where the program says
BPF_F_TEST_SKB_CHECKSUM_COMPLETE = 1 << 2


class XdpAction(enum.IntEnum):
    """enum xdp_action: what an XDP program returns."""

    ABORTED = 0
    DROP = 1
    PASS = 2
    TX = 3
    REDIRECT = 4


# The actions as plain ints, for the data paths' comparisons (cheaper than an enum member's).
XDP_ABORTED, XDP_DROP, XDP_PASS, XDP_TX, XDP_REDIRECT = map(int, XdpAction)


class XdpFlags(enum.IntFlag):
    """XDP_FLAGS_* (include/uapi/linux/if_link.h): how an XDP program is attached."""

    UPDATE_IF_NOEXIST = 1 << 0
    SKB_MODE = 1 << 1  # generic XDP, on skbs
    DRV_MODE = 1 << 2  # native, in the driver
    HW_MODE = 1 << 3
    REPLACE = 1 << 4


# flags of bpf_redirect_map for device maps: send to every device of the map (but the ingress)
BPF_F_BROADCAST = 1 << 3
BPF_F_EXCLUDE_INGRESS = 1 << 4


class AttachType(enum.IntEnum):
    """enum bpf_attach_type."""

    CGROUP_INET_INGRESS = 0
    CGROUP_INET_EGRESS = 1
    CGROUP_INET_SOCK_CREATE = 2
    CGROUP_SOCK_OPS = 3
    SK_SKB_STREAM_PARSER = 4
    SK_SKB_STREAM_VERDICT = 5
    CGROUP_DEVICE = 6
    SK_MSG_VERDICT = 7
    CGROUP_INET4_BIND = 8
    CGROUP_INET6_BIND = 9
    CGROUP_INET4_CONNECT = 10
    CGROUP_INET6_CONNECT = 11
    CGROUP_INET4_POST_BIND = 12
    CGROUP_INET6_POST_BIND = 13
    CGROUP_UDP4_SENDMSG = 14
    CGROUP_UDP6_SENDMSG = 15
    LIRC_MODE2 = 16
    FLOW_DISSECTOR = 17
    CGROUP_SYSCTL = 18
    CGROUP_UDP4_RECVMSG = 19
    CGROUP_UDP6_RECVMSG = 20
    CGROUP_GETSOCKOPT = 21
    CGROUP_SETSOCKOPT = 22
    TRACE_RAW_TP = 23
    TRACE_FENTRY = 24
    TRACE_FEXIT = 25
    MODIFY_RETURN = 26
    LSM_MAC = 27
    TRACE_ITER = 28
    CGROUP_INET4_GETPEERNAME = 29
    CGROUP_INET6_GETPEERNAME = 30
    CGROUP_INET4_GETSOCKNAME = 31
    CGROUP_INET6_GETSOCKNAME = 32
    XDP_DEVMAP = 33
    CGROUP_INET_SOCK_RELEASE = 34
    XDP_CPUMAP = 35
    SK_LOOKUP = 36
    XDP = 37
    SK_SKB_VERDICT = 38
    SK_REUSEPORT_SELECT = 39
    SK_REUSEPORT_SELECT_OR_MIGRATE = 40
    PERF_EVENT = 41
    TRACE_KPROBE_MULTI = 42
    LSM_CGROUP = 43
    STRUCT_OPS = 44
    NETFILTER = 45
    TCX_INGRESS = 46
    TCX_EGRESS = 47
    TRACE_UPROBE_MULTI = 48
    CGROUP_UNIX_CONNECT = 49
    CGROUP_UNIX_SENDMSG = 50
    CGROUP_UNIX_RECVMSG = 51
    CGROUP_UNIX_GETPEERNAME = 52
    CGROUP_UNIX_GETSOCKNAME = 53
    NETKIT_PRIMARY = 54
    NETKIT_PEER = 55
    TRACE_KPROBE_SESSION = 56
    TRACE_UPROBE_SESSION = 57


class BpfFunc(enum.IntEnum):
    """enum bpf_func_id: helper numbers (___BPF_FUNC_MAPPER); names drop ``BPF_FUNC_``."""

    unspec = 0
    map_lookup_elem = 1
    map_update_elem = 2
    map_delete_elem = 3
    probe_read = 4
    ktime_get_ns = 5
    trace_printk = 6
    get_prandom_u32 = 7
    get_smp_processor_id = 8
    skb_store_bytes = 9
    l3_csum_replace = 10
    l4_csum_replace = 11
    tail_call = 12
    clone_redirect = 13
    get_current_pid_tgid = 14
    get_current_uid_gid = 15
    get_current_comm = 16
    get_cgroup_classid = 17
    skb_vlan_push = 18
    skb_vlan_pop = 19
    skb_get_tunnel_key = 20
    skb_set_tunnel_key = 21
    perf_event_read = 22
    redirect = 23
    get_route_realm = 24
    perf_event_output = 25
    skb_load_bytes = 26
    get_stackid = 27
    csum_diff = 28
    skb_get_tunnel_opt = 29
    skb_set_tunnel_opt = 30
    skb_change_proto = 31
    skb_change_type = 32
    skb_under_cgroup = 33
    get_hash_recalc = 34
    get_current_task = 35
    probe_write_user = 36
    current_task_under_cgroup = 37
    skb_change_tail = 38
    skb_pull_data = 39
    csum_update = 40
    set_hash_invalid = 41
    get_numa_node_id = 42
    skb_change_head = 43
    xdp_adjust_head = 44
    probe_read_str = 45
    get_socket_cookie = 46
    get_socket_uid = 47
    set_hash = 48
    setsockopt = 49
    skb_adjust_room = 50
    redirect_map = 51
    sk_redirect_map = 52
    sock_map_update = 53
    xdp_adjust_meta = 54
    perf_event_read_value = 55
    perf_prog_read_value = 56
    getsockopt = 57
    override_return = 58
    sock_ops_cb_flags_set = 59
    msg_redirect_map = 60
    msg_apply_bytes = 61
    msg_cork_bytes = 62
    msg_pull_data = 63
    bind = 64
    xdp_adjust_tail = 65
    skb_get_xfrm_state = 66
    get_stack = 67
    skb_load_bytes_relative = 68
    fib_lookup = 69
    sock_hash_update = 70
    msg_redirect_hash = 71
    sk_redirect_hash = 72
    lwt_push_encap = 73
    lwt_seg6_store_bytes = 74
    lwt_seg6_adjust_srh = 75
    lwt_seg6_action = 76
    rc_repeat = 77
    rc_keydown = 78
    skb_cgroup_id = 79
    get_current_cgroup_id = 80
    get_local_storage = 81
    sk_select_reuseport = 82
    skb_ancestor_cgroup_id = 83
    sk_lookup_tcp = 84
    sk_lookup_udp = 85
    sk_release = 86
    map_push_elem = 87
    map_pop_elem = 88
    map_peek_elem = 89
    msg_push_data = 90
    msg_pop_data = 91
    rc_pointer_rel = 92
    spin_lock = 93
    spin_unlock = 94
    sk_fullsock = 95
    tcp_sock = 96
    skb_ecn_set_ce = 97
    get_listener_sock = 98
    skc_lookup_tcp = 99
    tcp_check_syncookie = 100
    sysctl_get_name = 101
    sysctl_get_current_value = 102
    sysctl_get_new_value = 103
    sysctl_set_new_value = 104
    strtol = 105
    strtoul = 106
    sk_storage_get = 107
    sk_storage_delete = 108
    send_signal = 109
    tcp_gen_syncookie = 110
    skb_output = 111
    probe_read_user = 112
    probe_read_kernel = 113
    probe_read_user_str = 114
    probe_read_kernel_str = 115
    tcp_send_ack = 116
    send_signal_thread = 117
    jiffies64 = 118
    read_branch_records = 119
    get_ns_current_pid_tgid = 120
    xdp_output = 121
    get_netns_cookie = 122
    get_current_ancestor_cgroup_id = 123
    sk_assign = 124
    ktime_get_boot_ns = 125
    seq_printf = 126
    seq_write = 127
    sk_cgroup_id = 128
    sk_ancestor_cgroup_id = 129
    ringbuf_output = 130
    ringbuf_reserve = 131
    ringbuf_submit = 132
    ringbuf_discard = 133
    ringbuf_query = 134
    csum_level = 135
    skc_to_tcp6_sock = 136
    skc_to_tcp_sock = 137
    skc_to_tcp_timewait_sock = 138
    skc_to_tcp_request_sock = 139
    skc_to_udp6_sock = 140
    get_task_stack = 141
    load_hdr_opt = 142
    store_hdr_opt = 143
    reserve_hdr_opt = 144
    inode_storage_get = 145
    inode_storage_delete = 146
    d_path = 147
    copy_from_user = 148
    snprintf_btf = 149
    seq_printf_btf = 150
    skb_cgroup_classid = 151
    redirect_neigh = 152
    per_cpu_ptr = 153
    this_cpu_ptr = 154
    redirect_peer = 155
    task_storage_get = 156
    task_storage_delete = 157
    get_current_task_btf = 158
    bprm_opts_set = 159
    ktime_get_coarse_ns = 160
    ima_inode_hash = 161
    sock_from_file = 162
    check_mtu = 163
    for_each_map_elem = 164
    snprintf = 165
    sys_bpf = 166
    btf_find_by_name_kind = 167
    sys_close = 168
    timer_init = 169
    timer_set_callback = 170
    timer_start = 171
    timer_cancel = 172
    get_func_ip = 173
    get_attach_cookie = 174
    task_pt_regs = 175
    get_branch_snapshot = 176
    trace_vprintk = 177
    skc_to_unix_sock = 178
    kallsyms_lookup_name = 179
    find_vma = 180
    loop = 181
    strncmp = 182
    get_func_arg = 183
    get_func_ret = 184
    get_func_arg_cnt = 185
    get_retval = 186
    set_retval = 187
    xdp_get_buff_len = 188
    xdp_load_bytes = 189
    xdp_store_bytes = 190
    copy_from_user_task = 191
    skb_set_tstamp = 192
    ima_file_hash = 193
    kptr_xchg = 194
    map_lookup_percpu_elem = 195
    skc_to_mptcp_sock = 196
    dynptr_from_mem = 197
    ringbuf_reserve_dynptr = 198
    ringbuf_submit_dynptr = 199
    ringbuf_discard_dynptr = 200
    dynptr_read = 201
    dynptr_write = 202
    dynptr_data = 203
    tcp_raw_gen_syncookie_ipv4 = 204
    tcp_raw_gen_syncookie_ipv6 = 205
    tcp_raw_check_syncookie_ipv4 = 206
    tcp_raw_check_syncookie_ipv6 = 207
    ktime_get_tai_ns = 208
    user_ringbuf_drain = 209
    cgrp_storage_get = 210
    cgrp_storage_delete = 211


# insn[0].src_reg of BPF_LD | BPF_IMM | BPF_DW (lddw): what the 64-bit immediate refers to
BPF_PSEUDO_MAP_FD = 1  # imm = map fd; the verifier replaces it with the map address
BPF_PSEUDO_MAP_VALUE = 2  # imm = map fd, insn[1].imm = offset into the value (array maps)
BPF_PSEUDO_BTF_ID = 3  # imm = BTF id of a kernel variable
BPF_PSEUDO_FUNC = 4  # imm = instruction offset of a subprogram (callbacks)
BPF_PSEUDO_MAP_IDX = 5  # imm = index into fd_array
BPF_PSEUDO_MAP_IDX_VALUE = 6  # imm = index into fd_array, insn[1].imm = value offset
# call src_reg: what imm names
BPF_PSEUDO_CALL = 1  # bpf-to-bpf call, imm = pc-relative offset of the callee
BPF_PSEUDO_KFUNC_CALL = 2  # imm = BTF id of a kernel function

# Instruction classes (opcode & 0x07); the other opcode parts are IntEnums in pybpf.asm
BPF_LD = 0x00
BPF_LDX = 0x01
BPF_ST = 0x02
BPF_STX = 0x03
BPF_ALU = 0x04
BPF_JMP = 0x05
BPF_JMP32 = 0x06
BPF_ALU64 = 0x07
