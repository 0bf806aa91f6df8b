"""Testing aids that ship with pybpf: the kernel-vs-emulated differential harness.

``pybpf.testing.differential`` runs one operation sequence on two ``System`` backends and
compares every returned byte and errno; ``pybpf differential`` is its command.
"""

from functools import cache

from ..backends import bpf_allowed

KERNEL_SKIP_REASON = ("bpf(2) is not permitted here (needs Linux with root or CAP_BPF); "
                      "the emulated backend is tested instead")


@cache
def kernel_available() -> bool:
    """True when the kernel backend can run here; never raises (no Linux, no libc, ...)."""
    try:
        return bpf_allowed()
    except Exception:
        return False
