"""BPF_LINK_CREATE of the emulated backend: XDP programs on the machine's devices
(net/core/dev.c bpf_xdp_link_attach) and sockmap programs on SOCKMAP / SOCKHASH
(sockmap_progs.py, net/core/sock_map.c sock_map_link_create).

Rules this module keeps:
- ``link_create`` checks in kernel/bpf/syscall.c's order: the program fd (EBADF, EINVAL for
  something else), then the attach type against the program's type (EINVAL; BPF_XDP takes
  XDP programs, the sockmap types SK_SKB / SK_MSG ones: sock_map_link_create follows), then
  bpf_xdp_link_attach: flags outside XDP_FLAGS_MASK (EINVAL), an
  ifindex naming no device of the machine (EINVAL, as the kernel answers), then
  ``dev_xdp_attach``'s own checks.
  Attach types the emulated backend has no link for are EINVAL with a message saying so.
- A link holds a reference on its program; closing its last fd detaches it.
"""

from __future__ import annotations

import errno
from typing import Any

from ..errors import KernelError
from ..uapi import AttachType, ProgType
from .net.netdev import XDP_FLAGS_MASK, net_of
from .sockmap_progs import SOCKMAP_ATTACH_PROG_TYPES

# attach_type_to_prog_type for the attach types this backend makes links for
_LINK_PROG_TYPES = {AttachType.XDP: ProgType.XDP, **SOCKMAP_ATTACH_PROG_TYPES}


class BpfXdpLink:
    """struct bpf_xdp_link: an XDP program on a device, for as long as the link is open."""

    def __init__(self, system: Any, prog: Any) -> None:
        self.system = system
        self.prog = prog
        self.dev: Any = None  # set by dev_xdp_attach; None once detached
        self.mode = ""

    def fd_release(self) -> None:
        net_of(self.system.machine).dev_xdp_detach_link(self)
        self.system.bpf_prog_put(self.prog)


class LinksMixin:
    """BPF_LINK_CREATE of the emulated system."""

    def _link_create(self, prog_fd: int, target_fd: int, attach_type: int, flags: int) -> int:
        prog = self.prog_from_fd(prog_fd)
        ptype = _LINK_PROG_TYPES.get(attach_type)
        if ptype is None:
            raise KernelError(errno.EINVAL, f"attach type {attach_type}: the emulated "
                                            "backend makes links for BPF_XDP and sockmap "
                                            "programs only")
        if ptype != prog.prog_type:
            raise KernelError(errno.EINVAL, f"{prog.describe()} cannot be attached as "
                                            f"{AttachType(attach_type).name}")
        if ptype != ProgType.XDP:
            return self.sock_map_link_create(prog, target_fd, attach_type, flags)
        if flags & ~XDP_FLAGS_MASK:
            raise KernelError(errno.EINVAL, f"flags {flags:#x}: XDP links take only "
                                            "XDP_FLAGS_* bits")
        net = net_of(self.machine)
        dev = net.dev_get_by_index(target_fd)
        if dev is None:
            raise KernelError(errno.EINVAL, f"no network device has ifindex {target_fd}")
        link = BpfXdpLink(self, prog)
        net.dev_xdp_attach(dev, None, link, flags=flags)
        self.bpf_prog_inc(prog)
        return self.fd_install(link)
