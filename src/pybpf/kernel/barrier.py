"""Memory ordering for rings shared with the kernel (include/asm-generic/barrier.h's
smp_load_acquire / smp_store_release, as libbpf uses them on ring buffer positions).

Each shared word is read or written with one aligned 4- or 8-byte load or store (a
memoryview item). On x86 (total store order) such a load is already an acquire and such a
store a release, so ``FENCE`` is None there. Elsewhere ``FENCE(order)`` is libatomic's
atomic_thread_fence: called with ``ACQUIRE`` after a load and with ``RELEASE`` before a
store; ``MISSING`` says in words why a reader cannot be made (no libatomic), or is "".
"""

from __future__ import annotations

import ctypes
import ctypes.util
import platform
from collections.abc import Callable

ACQUIRE, RELEASE = 2, 3  # __ATOMIC_ACQUIRE, __ATOMIC_RELEASE
_TOTAL_STORE_ORDER = ("x86_64", "AMD64", "i386", "i686")


def _thread_fence() -> tuple[Callable[[int], None] | None, str]:
    machine = platform.machine()
    if machine in _TOTAL_STORE_ORDER:
        return None, ""
    try:
        fence = ctypes.CDLL(ctypes.util.find_library("atomic") or "libatomic.so.1"
                            ).atomic_thread_fence
    except (OSError, AttributeError):
        return None, (f"reading a ring shared with the kernel on {machine} needs memory "
                      "barriers from libatomic (libatomic1), which is not installed")
    fence.argtypes, fence.restype = [ctypes.c_int], None
    return fence, ""


FENCE, MISSING = _thread_fence()
