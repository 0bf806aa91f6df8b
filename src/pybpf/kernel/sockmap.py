"""The sockmap commands of the kernel backend: BPF_PROG_ATTACH / DETACH of SK_SKB and SK_MSG
programs, the socket I/O of an application, and the CPU binding the kernel never merged
(sent as the 2024 patch's attr field, so the kernel itself refuses it; its 2025 kfunc is not
in the kernel's BTF, and ``UNMERGED_KFUNCS`` says why when a program names it)."""

from __future__ import annotations

import ctypes
import errno

from .. import sockio
from ..errors import KernelError
from ..uapi import Cmd
from .syscall import MapElemTargetCpuAttr, ProgAttachAttr, bpf

# Why a sockmap CPU binding is refused here, in both of its designs.
NO_TARGET_CPU = ("sockmap CPU affinity (Jiayuan Chen's 2024 patch, and the flag its review "
                  "asked for) was never merged into Linux; the emulated backend has it, and "
                  "RPS on the receiving device (pybpf.testing.rps) is the kernel's knob")
# Kfuncs proposed for Linux and never merged, and what to use instead.
UNMERGED_KFUNCS = {
    "bpf_sk_skb_set_redirect_cpu": (
        "bpf_sk_skb_set_redirect_cpu (sockmap CPU affinity as a kfunc for SK_SKB programs) was "
        "proposed in April 2025 (Jiayuan Chen, \"bpf, sockmap: Improve performance with CPU "
        "affinity\") and never merged into Linux, so this kernel's BTF has no such function; "
        "the alternatives: RPS on the receiving device (pybpf.testing.rps.rps_cpus), or the "
        "emulated backend (pybpf.system('emulated')), which offers the kfunc"),
}


class SockMapMixin:
    """KernelSystem's sockmap translations."""

    def _prog_attach(self, prog_fd: int, target_fd: int, attach_type: int,
                     attach_flags: int, replace_prog_fd: int) -> None:
        ret = bpf(Cmd.PROG_ATTACH, ProgAttachAttr(
            target_fd=target_fd, attach_bpf_fd=prog_fd, attach_type=attach_type,
            attach_flags=attach_flags, replace_bpf_fd=replace_prog_fd))
        if ret < 0:
            raise KernelError(-ret)

    def _prog_detach(self, target_fd: int, attach_type: int, prog_fd: int) -> None:
        ret = bpf(Cmd.PROG_DETACH, ProgAttachAttr(target_fd=target_fd, attach_bpf_fd=prog_fd,
                                                  attach_type=attach_type))
        if ret < 0:
            raise KernelError(-ret)

    def _map_update_elem_target_cpu(self, fd: int, key: bytes | None, value: bytes,
                                    flags: int, target_cpu: int) -> None:
        cpu = ctypes.c_uint64(target_cpu)
        ret = bpf(Cmd.MAP_UPDATE_ELEM, MapElemTargetCpuAttr(
            map_fd=fd, key=key, value=value, flags=flags,
            target_cpu=ctypes.addressof(cpu)))
        if ret < 0:
            detail = ""
            if ret == -errno.EINVAL:
                detail = "this kernel has no target_cpu for sockmap updates: " + NO_TARGET_CPU
            raise KernelError(-ret, detail)

    def _sock_recv(self, fd: int, bufsize: int, timeout: float | None) -> bytes:
        return sockio.recv(fd, bufsize, timeout)

    def _sock_send(self, fd: int, data: bytes, timeout: float | None) -> int:
        return sockio.send(fd, data, timeout)
