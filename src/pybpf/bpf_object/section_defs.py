"""Program section names: libbpf's ``section_defs`` table (tools/lib/bpf/libbpf.c).

A program's ELF section name says its program type, its expected attach type, its load
flags and how libbpf attaches it (``SEC("tracepoint/syscalls/sys_enter_getpid")``). The
table and the matching rules are libbpf's, restricted to the attach types of Linux 6.18:
- ``"type"`` matches exactly that name;
- ``"type/"`` matches any name starting with it;
- ``"type+"`` matches ``"type"`` or ``"type/anything"``.
The first match wins, so the order of the table matters (``xdp.frags/devmap`` before
``xdp``). A leading ``?`` (``SEC("?xdp")``) means "do not load by default" and is not part
of the name that is matched.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from ..uapi import BPF_F_SLEEPABLE, BPF_F_XDP_HAS_FRAGS, AttachType, ProgType


class SecFlag(enum.IntFlag):
    """enum sec_def_flags."""

    NONE = 0
    EXP_ATTACH_OPT = 1     # expected_attach_type may be dropped on old kernels
    ATTACHABLE = 2
    ATTACHABLE_OPT = 3
    ATTACH_BTF = 4         # the target is a BTF id (fentry/..., tp_btf/..., lsm/...)
    SLEEPABLE = 8          # BPF_F_SLEEPABLE
    XDP_FRAGS = 16         # BPF_F_XDP_HAS_FRAGS
    USDT = 32


@dataclass(frozen=True)
class SectionDef:
    """One row of the table: ``attach`` names libbpf's auto-attach function (None: the
    program is attached by hand, e.g. XDP to an interface)."""

    sec: str
    prog_type: ProgType
    expected_attach_type: int = 0
    flags: SecFlag = SecFlag.NONE
    attach: str | None = None

    def matches(self, name: str) -> bool:
        """sec_def_matches()."""
        if self.sec.endswith("/"):
            return name.startswith(self.sec)
        if self.sec.endswith("+"):
            prefix = self.sec[:-1]
            return name == prefix or name.startswith(prefix + "/")
        return name == self.sec

    @property
    def prog_flags(self) -> int:
        """The BPF_PROG_LOAD prog_flags this section asks for."""
        flags = BPF_F_SLEEPABLE if self.flags & SecFlag.SLEEPABLE else 0
        if self.prog_type == ProgType.XDP and self.flags & SecFlag.XDP_FRAGS:
            flags |= BPF_F_XDP_HAS_FRAGS
        return flags

    def target(self, name: str) -> str:
        """What follows the section's own prefix: ``syscalls/sys_enter_getpid`` of
        ``tracepoint/syscalls/sys_enter_getpid`` (empty when there is nothing)."""
        prefix = self.sec.rstrip("+")
        return name[len(prefix):].lstrip("/") if name.startswith(prefix) else ""


def _defs() -> tuple[SectionDef, ...]:
    P, A, F = ProgType, AttachType, SecFlag  # noqa: N806 - short names keep the table a table
    n, att, opt, btf, sl = F.NONE, F.ATTACHABLE, F.ATTACHABLE_OPT, F.ATTACH_BTF, F.SLEEPABLE
    rows = [
        ("socket", P.SOCKET_FILTER, 0, n, None),
        ("sk_reuseport/migrate", P.SK_REUSEPORT, A.SK_REUSEPORT_SELECT_OR_MIGRATE, att, None),
        ("sk_reuseport", P.SK_REUSEPORT, A.SK_REUSEPORT_SELECT, att, None),
        ("kprobe+", P.KPROBE, 0, n, "kprobe"),
        ("uprobe+", P.KPROBE, 0, n, "uprobe"),
        ("uprobe.s+", P.KPROBE, 0, sl, "uprobe"),
        ("kretprobe+", P.KPROBE, 0, n, "kprobe"),
        ("uretprobe+", P.KPROBE, 0, n, "uprobe"),
        ("uretprobe.s+", P.KPROBE, 0, sl, "uprobe"),
        ("kprobe.multi+", P.KPROBE, A.TRACE_KPROBE_MULTI, n, "kprobe_multi"),
        ("kretprobe.multi+", P.KPROBE, A.TRACE_KPROBE_MULTI, n, "kprobe_multi"),
        ("kprobe.session+", P.KPROBE, A.TRACE_KPROBE_SESSION, n, "kprobe_session"),
        ("uprobe.multi+", P.KPROBE, A.TRACE_UPROBE_MULTI, n, "uprobe_multi"),
        ("uretprobe.multi+", P.KPROBE, A.TRACE_UPROBE_MULTI, n, "uprobe_multi"),
        ("uprobe.session+", P.KPROBE, A.TRACE_UPROBE_SESSION, n, "uprobe_multi"),
        ("uprobe.multi.s+", P.KPROBE, A.TRACE_UPROBE_MULTI, sl, "uprobe_multi"),
        ("uretprobe.multi.s+", P.KPROBE, A.TRACE_UPROBE_MULTI, sl, "uprobe_multi"),
        ("uprobe.session.s+", P.KPROBE, A.TRACE_UPROBE_SESSION, sl, "uprobe_multi"),
        ("ksyscall+", P.KPROBE, 0, n, "ksyscall"),
        ("kretsyscall+", P.KPROBE, 0, n, "ksyscall"),
        ("usdt+", P.KPROBE, 0, F.USDT, "usdt"),
        ("usdt.s+", P.KPROBE, 0, F.USDT | sl, "usdt"),
        ("tc/ingress", P.SCHED_CLS, A.TCX_INGRESS, n, None),
        ("tc/egress", P.SCHED_CLS, A.TCX_EGRESS, n, None),
        ("tcx/ingress", P.SCHED_CLS, A.TCX_INGRESS, n, None),
        ("tcx/egress", P.SCHED_CLS, A.TCX_EGRESS, n, None),
        ("tc", P.SCHED_CLS, 0, n, None),
        ("classifier", P.SCHED_CLS, 0, n, None),
        ("action", P.SCHED_ACT, 0, n, None),
        ("netkit/primary", P.SCHED_CLS, A.NETKIT_PRIMARY, n, None),
        ("netkit/peer", P.SCHED_CLS, A.NETKIT_PEER, n, None),
        ("tracepoint+", P.TRACEPOINT, 0, n, "tp"),
        ("tp+", P.TRACEPOINT, 0, n, "tp"),
        ("tracepoint.s+", P.TRACEPOINT, 0, sl, "tp"),
        ("tp.s+", P.TRACEPOINT, 0, sl, "tp"),
        ("raw_tracepoint+", P.RAW_TRACEPOINT, 0, n, "raw_tp"),
        ("raw_tp+", P.RAW_TRACEPOINT, 0, n, "raw_tp"),
        ("raw_tracepoint.s+", P.RAW_TRACEPOINT, 0, sl, "raw_tp"),
        ("raw_tp.s+", P.RAW_TRACEPOINT, 0, sl, "raw_tp"),
        ("raw_tracepoint.w+", P.RAW_TRACEPOINT_WRITABLE, 0, n, "raw_tp"),
        ("raw_tp.w+", P.RAW_TRACEPOINT_WRITABLE, 0, n, "raw_tp"),
        ("tp_btf+", P.TRACING, A.TRACE_RAW_TP, btf, "trace"),
        ("tp_btf.s+", P.TRACING, A.TRACE_RAW_TP, btf | sl, "trace"),
        ("fentry+", P.TRACING, A.TRACE_FENTRY, btf, "trace"),
        ("fmod_ret+", P.TRACING, A.MODIFY_RETURN, btf, "trace"),
        ("fexit+", P.TRACING, A.TRACE_FEXIT, btf, "trace"),
        ("fentry.s+", P.TRACING, A.TRACE_FENTRY, btf | sl, "trace"),
        ("fmod_ret.s+", P.TRACING, A.MODIFY_RETURN, btf | sl, "trace"),
        ("fexit.s+", P.TRACING, A.TRACE_FEXIT, btf | sl, "trace"),
        ("freplace+", P.EXT, 0, btf, "trace"),
        ("lsm+", P.LSM, A.LSM_MAC, btf, "lsm"),
        ("lsm.s+", P.LSM, A.LSM_MAC, btf | sl, "lsm"),
        ("lsm_cgroup+", P.LSM, A.LSM_CGROUP, btf, None),
        ("iter+", P.TRACING, A.TRACE_ITER, btf, "iter"),
        ("iter.s+", P.TRACING, A.TRACE_ITER, btf | sl, "iter"),
        ("syscall", P.SYSCALL, 0, sl, None),
        ("xdp.frags/devmap", P.XDP, A.XDP_DEVMAP, F.XDP_FRAGS, None),
        ("xdp/devmap", P.XDP, A.XDP_DEVMAP, att, None),
        ("xdp.frags/cpumap", P.XDP, A.XDP_CPUMAP, F.XDP_FRAGS, None),
        ("xdp/cpumap", P.XDP, A.XDP_CPUMAP, att, None),
        ("xdp.frags", P.XDP, A.XDP, F.XDP_FRAGS, None),
        ("xdp", P.XDP, A.XDP, opt, None),
        ("perf_event", P.PERF_EVENT, 0, n, None),
        ("lwt_in", P.LWT_IN, 0, n, None),
        ("lwt_out", P.LWT_OUT, 0, n, None),
        ("lwt_xmit", P.LWT_XMIT, 0, n, None),
        ("lwt_seg6local", P.LWT_SEG6LOCAL, 0, n, None),
        ("sockops", P.SOCK_OPS, A.CGROUP_SOCK_OPS, opt, None),
        ("sk_skb/stream_parser", P.SK_SKB, A.SK_SKB_STREAM_PARSER, opt, None),
        ("sk_skb/stream_verdict", P.SK_SKB, A.SK_SKB_STREAM_VERDICT, opt, None),
        ("sk_skb/verdict", P.SK_SKB, A.SK_SKB_VERDICT, opt, None),
        ("sk_skb", P.SK_SKB, 0, n, None),
        ("sk_msg", P.SK_MSG, A.SK_MSG_VERDICT, opt, None),
        ("lirc_mode2", P.LIRC_MODE2, A.LIRC_MODE2, opt, None),
        ("flow_dissector", P.FLOW_DISSECTOR, A.FLOW_DISSECTOR, opt, None),
        ("cgroup_skb/ingress", P.CGROUP_SKB, A.CGROUP_INET_INGRESS, opt, None),
        ("cgroup_skb/egress", P.CGROUP_SKB, A.CGROUP_INET_EGRESS, opt, None),
        ("cgroup/skb", P.CGROUP_SKB, 0, n, None),
        ("cgroup/sock_create", P.CGROUP_SOCK, A.CGROUP_INET_SOCK_CREATE, att, None),
        ("cgroup/sock_release", P.CGROUP_SOCK, A.CGROUP_INET_SOCK_RELEASE, att, None),
        ("cgroup/sock", P.CGROUP_SOCK, A.CGROUP_INET_SOCK_CREATE, opt, None),
        ("cgroup/post_bind4", P.CGROUP_SOCK, A.CGROUP_INET4_POST_BIND, att, None),
        ("cgroup/post_bind6", P.CGROUP_SOCK, A.CGROUP_INET6_POST_BIND, att, None),
        ("cgroup/bind4", P.CGROUP_SOCK_ADDR, A.CGROUP_INET4_BIND, att, None),
        ("cgroup/bind6", P.CGROUP_SOCK_ADDR, A.CGROUP_INET6_BIND, att, None),
        ("cgroup/connect4", P.CGROUP_SOCK_ADDR, A.CGROUP_INET4_CONNECT, att, None),
        ("cgroup/connect6", P.CGROUP_SOCK_ADDR, A.CGROUP_INET6_CONNECT, att, None),
        ("cgroup/connect_unix", P.CGROUP_SOCK_ADDR, A.CGROUP_UNIX_CONNECT, att, None),
        ("cgroup/sendmsg4", P.CGROUP_SOCK_ADDR, A.CGROUP_UDP4_SENDMSG, att, None),
        ("cgroup/sendmsg6", P.CGROUP_SOCK_ADDR, A.CGROUP_UDP6_SENDMSG, att, None),
        ("cgroup/sendmsg_unix", P.CGROUP_SOCK_ADDR, A.CGROUP_UNIX_SENDMSG, att, None),
        ("cgroup/recvmsg4", P.CGROUP_SOCK_ADDR, A.CGROUP_UDP4_RECVMSG, att, None),
        ("cgroup/recvmsg6", P.CGROUP_SOCK_ADDR, A.CGROUP_UDP6_RECVMSG, att, None),
        ("cgroup/recvmsg_unix", P.CGROUP_SOCK_ADDR, A.CGROUP_UNIX_RECVMSG, att, None),
        ("cgroup/getpeername4", P.CGROUP_SOCK_ADDR, A.CGROUP_INET4_GETPEERNAME, att, None),
        ("cgroup/getpeername6", P.CGROUP_SOCK_ADDR, A.CGROUP_INET6_GETPEERNAME, att, None),
        ("cgroup/getpeername_unix", P.CGROUP_SOCK_ADDR, A.CGROUP_UNIX_GETPEERNAME, att,
         None),
        ("cgroup/getsockname4", P.CGROUP_SOCK_ADDR, A.CGROUP_INET4_GETSOCKNAME, att, None),
        ("cgroup/getsockname6", P.CGROUP_SOCK_ADDR, A.CGROUP_INET6_GETSOCKNAME, att, None),
        ("cgroup/getsockname_unix", P.CGROUP_SOCK_ADDR, A.CGROUP_UNIX_GETSOCKNAME, att,
         None),
        ("cgroup/sysctl", P.CGROUP_SYSCTL, A.CGROUP_SYSCTL, att, None),
        ("cgroup/getsockopt", P.CGROUP_SOCKOPT, A.CGROUP_GETSOCKOPT, att, None),
        ("cgroup/setsockopt", P.CGROUP_SOCKOPT, A.CGROUP_SETSOCKOPT, att, None),
        ("cgroup/dev", P.CGROUP_DEVICE, A.CGROUP_DEVICE, opt, None),
        ("struct_ops+", P.STRUCT_OPS, 0, n, None),
        ("struct_ops.s+", P.STRUCT_OPS, 0, sl, None),
        ("sk_lookup", P.SK_LOOKUP, A.SK_LOOKUP, att, None),
        ("netfilter", P.NETFILTER, A.NETFILTER, n, None),
    ]
    return tuple(SectionDef(sec, ptype, int(atype), flags, attach)
                 for sec, ptype, atype, flags, attach in rows)


SECTION_DEFS = _defs()


def find_section_def(name: str) -> SectionDef | None:
    """The row for section ``name`` (without a leading ``?``), or None (find_sec_def)."""
    for sec_def in SECTION_DEFS:
        if sec_def.matches(name):
            return sec_def
    return None
