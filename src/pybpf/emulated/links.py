"""BPF links of the emulated backend: BPF_LINK_CREATE for XDP on a device (net/core/dev.c
bpf_xdp_link_attach) and BPF_RAW_TRACEPOINT_OPEN (kernel/trace/bpf_trace.c).

Rules this module keeps:
- ``link_create`` checks in kernel/bpf/syscall.c's order: the program fd (EBADF, EINVAL for
  something else), then the attach type against the program's type (EINVAL; BPF_XDP takes
  XDP programs), then bpf_xdp_link_attach: flags outside XDP_FLAGS_MASK (EINVAL), an
  ifindex naming no device of the machine (EINVAL, as the kernel answers), then
  ``dev_xdp_attach``'s own checks.
  Attach types the emulated backend has no link for are EINVAL with a message saying so.
- ``raw_tracepoint_open``: a RAW_TRACEPOINT program (EINVAL otherwise) on a tracepoint that
  exists (ENOENT otherwise: the emulated machine's own, or, where tracefs is mounted, any the
  host kernel has). A program reading past the tracepoint's arguments is EINVAL. The program
  runs, on the CPU that fires it, with the arguments as u64s; pointer arguments (cpumap's
  ``struct xdp_cpumap_stats *``) are passed as 0.
- A link holds a reference on its program; closing its last fd detaches it.
"""

from __future__ import annotations

import errno
import os
import struct
from typing import Any

from ..attrs import LinkCreateRequest
from ..errors import KernelError
from ..uapi import AttachType, ProgType
from .netdev import XDP_FLAGS_MASK

# Tracepoints the emulated machine fires, and how many raw arguments each has.
EMULATED_TRACEPOINTS = {"xdp_cpumap_kthread": 5, "xdp_cpumap_enqueue": 4}
TRACEFS_EVENTS = "/sys/kernel/tracing/events"
# attach_type_to_prog_type for the attach types this backend makes links for
_LINK_PROG_TYPES = {AttachType.XDP: ProgType.XDP}


class BpfXdpLink:
    """struct bpf_xdp_link: an XDP program on a device, for as long as the link is open."""

    def __init__(self, system: Any, prog: Any) -> None:
        self.system = system
        self.prog = prog
        self.dev: Any = None  # set by dev_xdp_attach; None once detached
        self.mode = ""

    def fd_release(self) -> None:
        self.system.machine.net.dev_xdp_detach_link(self)
        self.system.bpf_prog_put(self.prog)


class BpfRawTpLink:
    """A raw tracepoint link: runs the program each time the tracepoint fires."""

    def __init__(self, system: Any, prog: Any, name: str) -> None:
        self.system = system
        self.prog = prog
        self.name = name

    def fire(self, *args: int) -> None:
        self.prog.run(struct.pack(f"<{len(args)}Q", *(a & (2**64 - 1) for a in args)))

    def fd_release(self) -> None:
        callbacks = self.system.machine.net.tracepoints.get(self.name, [])
        if self.fire in callbacks:
            callbacks.remove(self.fire)
        self.system.bpf_prog_put(self.prog)


class LinksMixin:
    """BPF_LINK_CREATE and BPF_RAW_TRACEPOINT_OPEN of the emulated system."""

    def _link_create(self, request: LinkCreateRequest) -> int:
        prog = self.prog_from_fd(request.prog_fd)
        ptype = _LINK_PROG_TYPES.get(request.attach_type)
        if ptype is None:
            raise KernelError(errno.EINVAL, f"attach type {request.attach_type}: the emulated "
                                            "backend makes links for BPF_XDP only")
        if ptype != prog.prog_type:
            raise KernelError(errno.EINVAL, f"{prog.describe()} cannot be attached as "
                                            f"{AttachType(request.attach_type).name}")
        if request.flags & ~XDP_FLAGS_MASK:
            raise KernelError(errno.EINVAL, f"flags {request.flags:#x}: XDP links take only "
                                            "XDP_FLAGS_* bits")
        net = self.machine.net
        dev = net.dev_get_by_index(request.target)
        if dev is None:
            raise KernelError(errno.EINVAL, f"no network device has ifindex {request.target}")
        link = BpfXdpLink(self, prog)
        net.dev_xdp_attach(dev, None, link, flags=request.flags)
        self.bpf_prog_inc(prog)
        return self.fd_install(link)

    def _raw_tracepoint_open(self, name: str, prog_fd: int) -> int:
        prog = self.prog_from_fd(prog_fd)
        if prog.prog_type != ProgType.RAW_TRACEPOINT:
            raise KernelError(errno.EINVAL, f"{prog.describe()} is not a RAW_TRACEPOINT "
                                            "program")
        nargs = EMULATED_TRACEPOINTS.get(name)
        if nargs is None and not _host_has_tracepoint(name):
            raise KernelError(errno.ENOENT, f"no tracepoint {name!r}")
        if nargs is not None and prog.max_ctx_offset > 8 * nargs:
            raise KernelError(errno.EINVAL, f"the program reads {prog.max_ctx_offset} bytes "
                                            f"of arguments; {name} has {nargs}")
        link = BpfRawTpLink(self, prog, name)
        self.bpf_prog_inc(prog)
        self.machine.net.tracepoints.setdefault(name, []).append(link.fire)
        return self.fd_install(link)


def _host_has_tracepoint(name: str) -> bool:
    """Whether tracefs lists a tracepoint ``name`` in some category (False without tracefs)."""
    try:
        categories = os.listdir(TRACEFS_EVENTS)
    except OSError:
        return False
    return any(os.path.isdir(os.path.join(TRACEFS_EVENTS, cat, name)) for cat in categories)
