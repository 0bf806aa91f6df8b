"""Helpers that call back into the program (kernel/bpf/bpf_iter.c): ``bpf_loop`` and
``bpf_for_each_map_elem`` (which walks the map with its type's ``map_for_each_callback``);
and the open-coded numeric iterator's kfuncs (``bpf_iter_num_new`` / ``_next`` /
``_destroy``, what libbpf's ``bpf_for`` and ``bpf_repeat`` expand to).

Rules this module keeps:
- A callback's address is what a BPF_PSEUDO_FUNC lddw loads: a pointer to a region holding a
  ``BpfCallback`` (the program's executable and the subprogram's first slot), made when the
  program is resolved (``executable.Executable``). A helper runs it on the run's engine
  through ``rs.entry_of``, in a frame of its own, counting its
  instructions in the run's budget.
- The run's budget (an emulator's guard against endless loops) bounds each call of a callback
  as it bounded the program when it called the helper: what a call ran is counted in the
  run's instructions and added to its budget, so a verified bpf_loop of 2^23 calls runs to
  the end, on either engine, as on the kernel.
- Results are the kernel's: the number of iterations (or elements) the callback saw, a stop
  when it returns non-zero, -EINVAL for flags, -E2BIG past BPF_MAX_LOOPS.
- A numeric iterator is the program's 8 bytes of stack, ``struct bpf_iter_num_kern``: the
  current value (inclusive; one before the start until the first next) and the end
  (exclusive), both C ints. A failed new and a drained or destroyed iterator hold 0, 0,
  so next gives NULL from then on; the verifier sees to it that only new touches one
  before it is initialised and nothing after it is destroyed.
"""

from __future__ import annotations

import errno
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...errors import KernelError, ProgramFault
from ...uapi import BpfFunc
from ..maps.bpf_timer import BpfTimer
from ..maps.ringbuf import irq_work_run
from .memory import BPF_MAX_LOOPS, M32, M64, OFF_MASK, RunState, bpf_map_of, mem_read, mem_write

# Not a helper id: what the verifier puts in place of a bpf_loop call it inlines.
BPF_LOOP_INLINED = 1 << 16
# The calls that run callbacks (the verifier's is_callback_calling_function, as far as
# emulated, and the inlined loop): the JIT keeps the run's count and budget current around them.
# (bpf_user_ringbuf_drain, a ring buffer helper, lives in helpers.py.)
CALLBACK_HELPERS = frozenset({BpfFunc.loop, BpfFunc.for_each_map_elem,
                              BpfFunc.user_ringbuf_drain, BPF_LOOP_INLINED})


@dataclass(frozen=True, eq=False)
class BpfCallback:
    """The target of a BPF_PSEUDO_FUNC lddw: subprogram ``start`` of ``exe``."""

    exe: Any  # the Executable holding the subprogram
    start: int

    def __call__(self, rs: RunState, r1: int, r2: int, r3: int = 0, r4: int = 0,
                 r5: int = 0) -> int:
        before = rs.count
        try:
            return rs.entry_of(self.exe, self.start)(rs, r1, r2, r3, r4, r5) & M64
        finally:
            rs.budget += rs.count - before


def callback_of(rs: RunState, ptr: int, helper: str) -> BpfCallback:
    """The callback a ``callback_fn`` argument points to."""
    obj = rs.mem.get(ptr >> 32) if ptr >= 0 else None
    if not isinstance(obj, BpfCallback) or ptr & OFF_MASK:
        raise ProgramFault(errno.EFAULT, f"{helper}: the callback argument is not a BPF "
                           f"function ({ptr:#x})")
    return obj


def timer_runner(rs: RunState, callback: BpfCallback) -> Callable[[BpfTimer], None]:
    """What a timer runs when it fires (the kernel's bpf_timer_cb, in the arming CPU's
    softirq): ``callback(map, key, value)`` in a run of its own, on the engine of the
    program that set it."""
    env, entry_of = rs.env, rs.entry_of
    static_regions = callback.exe.static_regions

    def fire(timer: BpfTimer) -> None:
        run = RunState(env)
        run.entry_of = entry_of
        run.mem.update(static_regions)
        try:
            callback(run, run.add_region(timer.bpf_map), run.add_region(bytes(timer.key)),
                     run.region_of(timer.value))
        finally:
            irq_work_run()

    return fire


def bpf_loop(rs: RunState, r1: int, r2: int, r3: int, r4: int, r5: int) -> int:
    """bpf_loop(nr_loops, callback_fn, callback_ctx, flags), the helper: ``callback_fn(i,
    ctx)`` for i from 0 while it returns 0; the number of calls made. nr_loops is the
    helper's u32; an error is its long (-EINVAL for flags, -E2BIG past BPF_MAX_LOOPS)."""
    if r4:
        return -errno.EINVAL & M64
    return _loop(rs, r1 & M32, r2, r3, -errno.E2BIG & M64)


def bpf_loop_inlined(rs: RunState, r1: int, r2: int, r3: int, r4: int, r5: int) -> int:
    """The loop the verifier writes in place of a bpf_loop call whose flags are a known 0
    on every walk, with one callback (inline_bpf_loop): nr_loops compared in 64 bits, and
    -E2BIG set with a 32-bit move (0xfffffff9)."""
    return _loop(rs, r1, r2, r3, -errno.E2BIG & M32)


def _loop(rs: RunState, nr_loops: int, callback_fn: int, ctx: int, too_many: int) -> int:
    if nr_loops > BPF_MAX_LOOPS:
        return too_many
    callback = callback_of(rs, callback_fn, "bpf_loop")
    for index in range(nr_loops):
        if callback(rs, index, ctx):
            return index + 1
    return nr_loops


def bpf_for_each_map_elem(rs: RunState, r1: int, r2: int, r3: int, r4: int, r5: int) -> int:
    """bpf_for_each_map_elem(map, callback_fn, callback_ctx, flags): ``callback_fn(map, key,
    value, ctx)`` per element until it returns non-zero; the elements visited. The value is
    the element's memory (the pointer a lookup gives); the key is read-only."""
    bpf_map = bpf_map_of(rs, r1, "bpf_for_each_map_elem")
    callback = callback_of(rs, r2, "bpf_for_each_map_elem")

    def visit(key: bytes, value: bytearray) -> int:
        key_ptr = rs.add_region(bytes(key))
        try:
            return callback(rs, r1, key_ptr, rs.region_of(value), r3)
        finally:
            del rs.mem[key_ptr >> 32]

    try:
        return bpf_map.map_for_each_callback(visit, r4)
    except KernelError as exc:
        return -exc.errno & M64


_ITER_NUM = struct.Struct("<ii")  # struct bpf_iter_num_kern: int cur, int end


def _int(value: int) -> int:
    """The C int in a register's low 32 bits (or a wrapped int sum)."""
    value &= M32
    return value - (1 << 32) if value >> 31 else value


def bpf_iter_num_new(rs: RunState, r1: int, r2: int, r3: int, r4: int, r5: int) -> int:
    """bpf_iter_num_new(it, start, end): ``it`` yields start .. end - 1. Returns 0; -EINVAL
    when start > end, -E2BIG for a range of more than BPF_MAX_LOOPS, the iterator then
    empty (start == end is an empty range, no error). The error is the C int in R0's low
    half, zero-extended (as the kernel's R0 holds it, measured on 6.18)."""
    start, end = _int(r2), _int(r3)
    if start > end:
        mem_write(rs, r1, _ITER_NUM.pack(0, 0), "bpf_iter_num_new it")
        return -errno.EINVAL & M32
    if end - start > BPF_MAX_LOOPS:  # in 64 bits: INT_MIN .. INT_MAX does not overflow
        mem_write(rs, r1, _ITER_NUM.pack(0, 0), "bpf_iter_num_new it")
        return -errno.E2BIG & M32
    mem_write(rs, r1, _ITER_NUM.pack(_int(start - 1), end), "bpf_iter_num_new it")
    return 0


def bpf_iter_num_next(rs: RunState, r1: int, r2: int, r3: int, r4: int, r5: int) -> int:
    """bpf_iter_num_next(it): a pointer to the next value (the iterator's own ``cur``), or
    NULL (0) once the range is done, which also empties the iterator."""
    cur, end = _ITER_NUM.unpack(mem_read(rs, r1, _ITER_NUM.size, "bpf_iter_num_next it"))
    nxt = _int(cur + 1)  # an int sum, wrapping as the kernel's (built -fno-strict-overflow)
    if nxt >= end:
        mem_write(rs, r1, _ITER_NUM.pack(0, 0), "bpf_iter_num_next it")
        return 0
    mem_write(rs, r1, _ITER_NUM.pack(nxt, end), "bpf_iter_num_next it")
    return r1


def bpf_iter_num_destroy(rs: RunState, r1: int, r2: int, r3: int, r4: int, r5: int) -> int:
    """bpf_iter_num_destroy(it): the iterator emptied (a void kfunc: R0 is not read)."""
    mem_write(rs, r1, _ITER_NUM.pack(0, 0), "bpf_iter_num_destroy it")
    return 0
