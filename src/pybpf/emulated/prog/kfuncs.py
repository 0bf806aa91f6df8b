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
- Parameters are of three kinds, as check_kfunc_args sees them: the program's context
  (``KF_ARG_PTR_TO_CTX``, a pointer to the context struct ``ctx_struct``), an iterator on
  the program's stack (``KF_ARG_PTR_TO_ITER``, a pointer to ``iter_struct``, always the
  first argument) and a scalar (``KF_ARG_SCALAR``, a C ``int``). The return is a C
  ``int`` (R0 a scalar after the call), an ``int *`` (read-only memory of 4 bytes) or
  nothing (R0 not readable after). ``flags`` are the kernel's BTF_ID_FLAGS (KF_*): an
  iterator's new, next and destroy, a return that may be NULL.
- ``prog_types`` None: the kfunc is in a set registered for BPF_PROG_TYPE_UNSPEC, which
  every program type may call (the common set: bpf_iter_num_*).
- An implementation is ``f(rs, r1, r2, r3, r4, r5) -> r0`` like a helper's: raw 64-bit
  register values in, the kernel's negative errno in two's complement out.
"""

from __future__ import annotations

import ctypes
import errno
from collections.abc import Callable
from dataclasses import dataclass

from ...uapi import ProgType
from .bpf_iter import bpf_iter_num_destroy, bpf_iter_num_new, bpf_iter_num_next
from .helpers import charged
from .memory import M64, RunState

KF_ARG_PTR_TO_CTX = "ctx"  # the program's context, unmodified
KF_ARG_SCALAR = "scalar"  # any scalar (a C int)
KF_ARG_PTR_TO_ITER = "iter"  # an iterator's state on the program's stack
KF_RET_INT, KF_RET_INT_PTR, KF_RET_VOID = "int", "int *", "void"  # what R0 is after a call
# include/linux/btf.h: the kfunc flags used here
KF_RET_NULL = 1 << 2  # the returned pointer may be NULL
KF_ITER_NEW = 1 << 8  # initialises an iterator (its argument must not be one yet)
KF_ITER_NEXT = 1 << 9  # an iterator's next element, or NULL when done
KF_ITER_DESTROY = 1 << 10  # ends an iterator (the reference its new took is released)

BPF_SK_REDIR_CPU_UNSET = -1  # include/linux/skmsg.h of the 2025 series: no redirect CPU


@dataclass(frozen=True)
class KfuncProto:
    """A kfunc: what the verifier checks a call against and what the engines call."""

    name: str
    func: Callable[..., int]
    params: tuple[tuple[str, str], ...]  # (name, KF_ARG_*) per argument, R1 first
    prog_types: frozenset[int] | None  # the program types whose kfunc set holds it (None: all)
    ctx_struct: str = ""  # the context struct a KF_ARG_PTR_TO_CTX parameter points to
    iter_struct: str = ""  # the iterator struct a KF_ARG_PTR_TO_ITER parameter points to
    ret: str = KF_RET_INT  # KF_RET_*
    flags: int = 0  # KF_*


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
    KfuncProto("bpf_iter_num_new", bpf_iter_num_new,
               (("it", KF_ARG_PTR_TO_ITER), ("start", KF_ARG_SCALAR), ("end", KF_ARG_SCALAR)),
               None, iter_struct="bpf_iter_num", flags=KF_ITER_NEW),
    KfuncProto("bpf_iter_num_next", bpf_iter_num_next, (("it", KF_ARG_PTR_TO_ITER),),
               None, iter_struct="bpf_iter_num", ret=KF_RET_INT_PTR,
               flags=KF_ITER_NEXT | KF_RET_NULL),
    KfuncProto("bpf_iter_num_destroy", bpf_iter_num_destroy, (("it", KF_ARG_PTR_TO_ITER),),
               None, iter_struct="bpf_iter_num", ret=KF_RET_VOID, flags=KF_ITER_DESTROY),
)}


def kfunc_funcs(by_btf_id: dict[int, KfuncProto]) -> dict[int, Callable[..., int]]:
    """BTF id -> function, what the engines call for a kfunc call (each charged as a helper
    call: a kfunc call is a direct call, as cheap as one)."""
    return {btf_id: charged(proto.func, "helper_call") for btf_id, proto in by_btf_id.items()}
