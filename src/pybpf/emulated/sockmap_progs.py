"""BPF_PROG_ATTACH / DETACH and BPF_LINK_CREATE of sockmap programs, target_cpu updates, and
socket I/O through psocks, for the emulated system (kernel/bpf/syscall.c bpf_prog_attach /
bpf_prog_detach / link_create; net/core/sock_map.c sock_map_get_from_fd,
sock_map_prog_detach, sock_map_link_create).

Rules this module keeps, in the kernel's order (measured on 6.18, see
tests/differential/test_sockmap_attach_differential.py):
- attach: an attach type with no program type -> EINVAL; attach_flags outside
  BPF_F_ATTACH_MASK_BASE -> EINVAL; the program fd (EBADF, EINVAL for a non-program or a
  program of another type); then any attach_flags or replace fd -> EINVAL; the map fd
  (EBADF, EINVAL for a non-map); a map that is not a sockmap -> EOPNOTSUPP; then the map's
  slot rules (sock_map.py). An SK_SKB program's expected_attach_type is not checked.
- detach: attach type -> EINVAL; the map fd; the program fd; its type -> EINVAL; then
  EOPNOTSUPP for a non-sockmap; slot rules (a link's program: EBUSY; another program: ENOENT).
- link_create: the program fd; the attach type against its type (EINVAL); flags -> EINVAL;
  the map fd (EBADF / EINVAL); not a sockmap -> EINVAL; slot rules. Closing the link's last
  fd detaches its program.
- Other attach types (cgroups, flow dissector, ...) are not emulated: EINVAL after the
  program checks, with a message saying so.
- Deliberate difference: the emulated map and psocks hold Python references on their
  programs, not counted ones (the emulated backend has no map uref to break the cycle of
  a verdict program that uses its own map), so an attached program's id goes when its
  last fd does; it keeps running on the sockets that took it.
"""

from __future__ import annotations

import errno
from typing import Any

from ..errors import KernelError
from ..uapi import AttachType, ProgType
from .net.skmsg import SockmapCpuStats, psock_table
from .net.tcp_bpf import tcp_bpf_recvmsg, tcp_bpf_sendmsg

BPF_F_ATTACH_MASK_BASE = 0x7  # ALLOW_OVERRIDE | ALLOW_MULTI | REPLACE
SOCKMAP_ATTACH_PROG_TYPES = {
    AttachType.SK_SKB_STREAM_PARSER: ProgType.SK_SKB,
    AttachType.SK_SKB_STREAM_VERDICT: ProgType.SK_SKB,
    AttachType.SK_SKB_VERDICT: ProgType.SK_SKB,
    AttachType.SK_MSG_VERDICT: ProgType.SK_MSG,
}


def _attach_prog_types() -> dict[int, int]:
    """kernel/bpf/syscall.c attach_type_to_prog_type: the attach types BPF_PROG_ATTACH knows."""
    table: dict[int, int] = dict(SOCKMAP_ATTACH_PROG_TYPES)
    for attach in AttachType:
        name = attach.name
        if name in ("CGROUP_INET_INGRESS", "CGROUP_INET_EGRESS"):
            table[attach] = ProgType.CGROUP_SKB
        elif name in ("CGROUP_INET_SOCK_CREATE", "CGROUP_INET_SOCK_RELEASE",
                      "CGROUP_INET4_POST_BIND", "CGROUP_INET6_POST_BIND"):
            table[attach] = ProgType.CGROUP_SOCK
        elif name.startswith("CGROUP_") and name.endswith(
                ("_BIND", "_CONNECT", "_GETPEERNAME", "_GETSOCKNAME", "_SENDMSG", "_RECVMSG")):
            table[attach] = ProgType.CGROUP_SOCK_ADDR
        elif name in ("CGROUP_GETSOCKOPT", "CGROUP_SETSOCKOPT"):
            table[attach] = ProgType.CGROUP_SOCKOPT
        elif name in ("TRACE_ITER", "TRACE_RAW_TP", "TRACE_FENTRY", "TRACE_FEXIT",
                      "MODIFY_RETURN"):
            table[attach] = ProgType.TRACING
        elif name in ("LSM_MAC", "LSM_CGROUP"):
            table[attach] = ProgType.LSM
        elif name in ("TCX_INGRESS", "TCX_EGRESS", "NETKIT_PRIMARY", "NETKIT_PEER"):
            table[attach] = ProgType.SCHED_CLS
    for attach, ptype in (("CGROUP_SOCK_OPS", "SOCK_OPS"), ("CGROUP_DEVICE", "CGROUP_DEVICE"),
                          ("LIRC_MODE2", "LIRC_MODE2"), ("FLOW_DISSECTOR", "FLOW_DISSECTOR"),
                          ("CGROUP_SYSCTL", "CGROUP_SYSCTL"), ("SK_LOOKUP", "SK_LOOKUP"),
                          ("XDP", "XDP")):
        table[AttachType[attach]] = ProgType[ptype]
    return table


ATTACH_PROG_TYPES = _attach_prog_types()
# Program types whose BPF_PROG_ATTACH target is a cgroup (is_cgroup_prog_type)
_CGROUP_PROG_TYPES = {ProgType.CGROUP_SKB, ProgType.CGROUP_SOCK, ProgType.CGROUP_SOCK_ADDR,
                      ProgType.SOCK_OPS, ProgType.CGROUP_DEVICE, ProgType.CGROUP_SYSCTL,
                      ProgType.CGROUP_SOCKOPT}
# Types whose programs must be loaded for the attach type (bpf_prog_attach_check_attach_type)
_EXPECTED_ATTACH_CHECKED = {ProgType.CGROUP_SOCK, ProgType.CGROUP_SOCK_ADDR,
                            ProgType.CGROUP_SOCKOPT, ProgType.LSM}


def attach_type_to_prog_type(attach_type: int) -> int | None:
    """The program type an attach type takes; None where BPF_PROG_ATTACH has none (UNSPEC)."""
    return ATTACH_PROG_TYPES.get(attach_type)


def _is_cgroup_attach(attach_type: int) -> bool:
    """is_cgroup_prog_type(ptype, attach_type, false), as bpf_prog_detach asks it: the cgroup
    program types, and every LSM attach type (the check of LSM_CGROUP is left out there)."""
    ptype = attach_type_to_prog_type(attach_type)
    return ptype in _CGROUP_PROG_TYPES or ptype == ProgType.LSM


class BpfSockmapLink:
    """struct sockmap_link: a program in a map's slot for as long as the link is open."""

    def __init__(self, system: Any, prog: Any, bpf_map: Any, attach_type: int) -> None:
        self.system = system
        self.prog = prog
        self.map = bpf_map
        self.attach_type = attach_type

    def fd_release(self) -> None:
        """sock_map_link_release: the slot empties (if this link still holds it)."""
        try:
            self.map.sock_map_prog_update(None, self.prog, self, self.attach_type)
        except KernelError:
            pass
        self.system.bpf_prog_put(self.prog)
        self.system.bpf_map_put(self.map)


class SockMapMixin:
    """The emulated system's sockmap commands and socket I/O."""

    def _sockmap_prog(self, prog_fd: int, attach_type: int) -> Any:
        """bpf_prog_get_type for ``attach_type``'s program type."""
        ptype = attach_type_to_prog_type(attach_type)
        prog = self.prog_from_fd(prog_fd)
        if prog.prog_type != ptype:
            raise KernelError(errno.EINVAL, f"{prog.describe()} cannot be attached as "
                                            f"{AttachType(attach_type).name}")
        return prog

    def _sockmap_of(self, target_fd: int, missing: int) -> Any:
        bpf_map = self.map_from_fd(target_fd)
        if not hasattr(bpf_map, "sock_map_prog_update"):
            raise KernelError(missing, f"{bpf_map.describe()} is not a SOCKMAP or SOCKHASH")
        return bpf_map

    def _prog_attach(self, prog_fd: int, target_fd: int, attach_type: int,
                     attach_flags: int, replace_prog_fd: int) -> None:
        self.machine.bpf_syscall()
        if attach_type_to_prog_type(attach_type) is None:
            raise KernelError(errno.EINVAL, f"attach type {attach_type} is unknown")
        if attach_flags & ~BPF_F_ATTACH_MASK_BASE:
            raise KernelError(errno.EINVAL, f"attach_flags {attach_flags:#x}: only "
                                            "BPF_F_ALLOW_OVERRIDE|ALLOW_MULTI|REPLACE exist")
        prog = self._sockmap_prog(prog_fd, attach_type)
        ptype = attach_type_to_prog_type(attach_type)
        if ptype in _EXPECTED_ATTACH_CHECKED and prog.expected_attach_type != attach_type:
            raise KernelError(errno.EINVAL, f"{prog.describe()} was loaded for another "
                                            "attach type")
        if ptype in _CGROUP_PROG_TYPES or attach_type == AttachType.LSM_CGROUP:
            raise KernelError(errno.EBADF, f"fd {target_fd} is not a cgroup (the emulated "
                                           "backend has no cgroups)")
        if attach_type not in SOCKMAP_ATTACH_PROG_TYPES:
            raise KernelError(errno.EINVAL, f"the emulated backend attaches only sockmap "
                                            f"programs, not {AttachType(attach_type).name}")
        if attach_flags or replace_prog_fd:  # sock_map_get_from_fd
            raise KernelError(errno.EINVAL, "sockmap programs take no attach_flags and no "
                                            "replace fd")
        bpf_map = self._sockmap_of(target_fd, errno.EOPNOTSUPP)
        bpf_map.sock_map_prog_update(prog, None, None, attach_type)

    def _prog_detach(self, target_fd: int, attach_type: int, prog_fd: int) -> None:
        self.machine.bpf_syscall()
        if attach_type_to_prog_type(attach_type) is None:
            raise KernelError(errno.EINVAL, f"attach type {attach_type} is unknown")
        if _is_cgroup_attach(attach_type):  # cgroup_bpf_prog_detach: cgroup_get_from_fd first
            raise KernelError(errno.EBADF, f"fd {target_fd} is not a cgroup (the emulated "
                                           "backend has no cgroups)")
        if attach_type not in SOCKMAP_ATTACH_PROG_TYPES:
            raise KernelError(errno.EINVAL, f"attach type {attach_type}: the emulated backend "
                                            "detaches only sockmap programs")
        bpf_map = self.map_from_fd(target_fd)  # sock_map_prog_detach
        prog = self._sockmap_prog(prog_fd, attach_type)
        if not hasattr(bpf_map, "sock_map_prog_update"):
            raise KernelError(errno.EOPNOTSUPP, f"{bpf_map.describe()} is not a SOCKMAP or "
                                                "SOCKHASH")
        bpf_map.sock_map_prog_update(None, prog, None, attach_type)

    def sock_map_link_create(self, prog: Any, target_fd: int, attach_type: int,
                             flags: int) -> int:
        if flags:
            raise KernelError(errno.EINVAL, f"flags {flags:#x}: sockmap links take none")
        bpf_map = self._sockmap_of(target_fd, errno.EINVAL)
        link = BpfSockmapLink(self, prog, bpf_map, attach_type)
        bpf_map.sock_map_prog_update(prog, None, link, attach_type)
        self.bpf_prog_inc(prog)
        self.bpf_map_inc(bpf_map)
        return self.fd_install(link)

    def _sock_recv(self, fd: int, bufsize: int, timeout: float | None) -> bytes:
        return tcp_bpf_recvmsg(psock_table(self.machine), fd, bufsize, timeout)

    def _sock_send(self, fd: int, data: bytes, timeout: float | None) -> int:
        return tcp_bpf_sendmsg(psock_table(self.machine), fd, data, timeout)

    def sockmap_stats(self) -> dict[int, SockmapCpuStats]:
        """What the psock data path did on each emulated CPU: ``verdicts``, ``backlog_runs``,
        ``bytes``, ``eagain_retries``, ``drops``, ``busy_ns`` (SockmapCpuStats)."""
        return psock_table(self.machine).snapshot()
