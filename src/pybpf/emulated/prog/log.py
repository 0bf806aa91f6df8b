"""kernel/bpf/log.c: the verifier's log, shared by the verifier and the BTF checker."""

from __future__ import annotations

import errno

from ...errors import KernelError

# BPF_LOG_LEVEL1 | BPF_LOG_LEVEL2 | BPF_LOG_STATS | BPF_LOG_FIXED
BPF_LOG_MASK = 15


def bpf_vlog_init(log_level: int) -> None:
    """bpf_vlog_init (the verifier's and the BTF checker's log): only the known level bits
    (the System always hands a buffer)."""
    if log_level & ~BPF_LOG_MASK:
        raise KernelError(errno.EINVAL, f"log_level {log_level:#x}: only BPF_LOG_LEVEL1, "
                          "BPF_LOG_LEVEL2, BPF_LOG_STATS and BPF_LOG_FIXED (15) are known")
