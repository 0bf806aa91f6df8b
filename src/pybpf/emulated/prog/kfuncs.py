"""Kernel functions (kfuncs) the emulated kernel offers to BPF programs: the BTF_KFUNCS sets a
kernel registers per program type (register_btf_kfunc_id_set), with their implementations.

Rules this module keeps:
- ``KFUNCS`` is the one table: name -> ``KfuncProto`` (implementation, parameters, the
  program types whose set holds it). A second kfunc is one entry here.
- A kfunc is named in a program as in the kernel: a call with src = BPF_PSEUDO_KFUNC_CALL
  and imm = the BTF id of its FUNC in the kernel's BTF. The emulated kernel's BTF
  (``btf.vmlinux_btf_types``) gets one FUNC per entry, after every other type, in the
  table's order, so the ids are fixed and no other type's id moves; ``System.kfunc_btf_id``
  finds one by name on either backend, the assembler's ``call_kfunc("name")`` is resolved
  with it at ``Program.load``.
- Parameters are of two kinds, as check_kfunc_args sees them: the program's context
  (``KF_ARG_PTR_TO_CTX``, a pointer to the context struct ``ctx_struct``) and a scalar
  (``KF_ARG_SCALAR``, a C ``int``); every kfunc here returns an ``int`` (R0 a scalar after
  the call).
- An implementation is ``f(rs, r1, r2, r3, r4, r5) -> r0`` like a helper's: raw 64-bit
  register values in, the kernel's negative errno in two's complement out.
"""

from __future__ import annotations

import ctypes
import errno
from collections.abc import Callable
from dataclasses import dataclass

from ...uapi import ProgType
from .helpers import charged
from .memory import M64, RunState

KF_ARG_PTR_TO_CTX = "ctx"  # the program's context, unmodified
KF_ARG_SCALAR = "scalar"  # any scalar (a C int)

BPF_SK_REDIR_CPU_UNSET = -1  # include/linux/skmsg.h of the 2025 series: no redirect CPU


@dataclass(frozen=True)
class KfuncProto:
    """A kfunc: what the verifier checks a call against and what the engines call."""

    name: str
    func: Callable[..., int]
    params: tuple[tuple[str, str], ...]  # (name, KF_ARG_*) per argument, R1 first
    prog_types: frozenset[int]  # the program types whose kfunc set holds it
    ctx_struct: str = ""  # the context struct a KF_ARG_PTR_TO_CTX parameter points to


def bpf_sk_skb_set_redirect_cpu(rs: RunState, r1: int, r2: int, r3: int, r4: int,
                                r5: int) -> int:
    """The psock of the skb's socket runs its redirect work on ``redir_cpu`` (R2). Returns
    0; -EINVAL for a CPU the machine does not have (BPF_SK_REDIR_CPU_UNSET, -1, clears it:
    the series checked only the upper end, so any negative CPU passed; here only -1 does);
    -ENOENT when the socket has no psock (a run outside a psock, or one being dropped)."""
    redir_cpu = ctypes.c_int32(r2).value  # the C int the kfunc takes: R2's low 32 bits
    num_cpus = rs.machine.num_cpus
    if redir_cpu >= num_cpus or redir_cpu < BPF_SK_REDIR_CPU_UNSET:
        return -errno.EINVAL & M64
    psock = rs.psock
    if psock is None or psock.stopped:
        return -errno.ENOENT & M64
    psock.redir_cpu = redir_cpu
    return 0


KFUNCS: dict[str, KfuncProto] = {proto.name: proto for proto in (
    KfuncProto("bpf_sk_skb_set_redirect_cpu", bpf_sk_skb_set_redirect_cpu,
               (("s", KF_ARG_PTR_TO_CTX), ("redir_cpu", KF_ARG_SCALAR)),
               frozenset({ProgType.SK_SKB}), ctx_struct="__sk_buff"),
)}


def kfunc_funcs(by_btf_id: dict[int, KfuncProto]) -> dict[int, Callable[..., int]]:
    """BTF id -> function, what the engines call for a kfunc call (each charged as a helper
    call: a kfunc call is a direct call, as cheap as one)."""
    return {btf_id: charged(proto.func, "helper_call") for btf_id, proto in by_btf_id.items()}
