"""The probes in machine code (a pointer chase, a locked add, a line bounced between CPUs,
an add chain), their buffers, and how they are timed: pinned to a CPU, by the thread's CPU time."""

from __future__ import annotations

import ctypes
import mmap
import os
import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

CHASE_DRAM_BYTES = 128 << 20
CHASE_LOADS = 1 << 20

# -- machine code -------------------------------------------------------------------------

# x86-64 System V, assembled by hand; byte offsets in the comments.
#
# long chase(long n, void **p): follow p = *p n times; return p
#   0: mov rsi,[rsi]; 3: dec rdi; 6: jnz 0; 8: mov rax,rsi; b: ret
CHASE = bytes.fromhex("488b3648ffcf75f84889f0c3")
# long lock_add(long n, long *p): n x lock add qword [p],1
#   0: lock add qword [rsi],1; 5: dec rdi; 8: jnz 0; a: ret
LOCK_ADD = bytes.fromhex("f04883060148ffcf75f6c3")
# long ping_pong(long n, long *p, long parity): n times { wait until *p % 2 == parity;
# *p += 1 }: two threads of parities 0 and 1 move the line back and forth 2n times
#   0: pause; 2: mov rax,[rsi]; 5: mov rcx,rax; 8: and ecx,1; b: cmp rcx,rdx; e: jne 0;
#   10: inc rax; 13: mov [rsi],rax; 16: dec rdi; 19: jnz 2 (rel -25); 1b: ret
PING_PONG = bytes.fromhex("f390488b064889c183e1014839d175f048ffc048890648ffcf75e7c3")

# long add_chain(long n): 4n dependent adds (one cycle each): n iterations of 4 cycles
#   0: xor eax,eax; 2: add rax,1 (x4, 16 bytes); 12: dec rdi; 15: jnz 2 (rel -21); 17: ret
ADD_CHAIN = bytes.fromhex("31c0" + "4883c001" * 4 + "48ffcf75ebc3")

_FN = ctypes.CFUNCTYPE(ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_long)


class NativeCode:
    """Machine code mapped executable once; ``fns[i]`` calls the i-th blob."""

    def __init__(self, *blobs: bytes) -> None:
        self.page = mmap.mmap(-1, mmap.PAGESIZE,
                              prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
        base = ctypes.addressof(ctypes.c_char.from_buffer(self.page))
        self.fns = []
        for blob in blobs:
            self.fns.append(_FN(base + self.page.tell()))
            self.page.write(blob)


def chase_buffer(size: int, line: int, seed: int = 0) -> tuple[mmap.mmap, int]:
    """A buffer whose lines form one random cycle of pointers; (buffer, address of line 0).
    Huge pages are asked for, so the walk measures caches and DRAM rather than the TLB."""
    buf = mmap.mmap(-1, size)
    if hasattr(buf, "madvise") and hasattr(mmap, "MADV_HUGEPAGE"):
        try:
            buf.madvise(mmap.MADV_HUGEPAGE)
        except OSError:
            pass  # no THP here: the figure then includes TLB misses
    base = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    lines = size // line
    order = list(range(1, lines))
    random.Random(seed).shuffle(order)
    order = [0, *order]
    words = memoryview(buf).cast("Q")
    step = line // 8
    for here, there in zip(order, order[1:] + order[:1], strict=True):
        words[here * step] = base + there * line
    words.release()
    return buf, base


@contextmanager
def pinned(cpu: int) -> Iterator[None]:
    """Run the body on ``cpu`` (this thread), then restore the affinity."""
    old = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpu})
    try:
        yield
    finally:
        os.sched_setaffinity(0, old)


def thread_ns(work: Callable[[], object]) -> int:
    """CPU time this thread spent (user + system) running ``work``."""
    start = time.thread_time_ns()
    work()
    return time.thread_time_ns() - start
