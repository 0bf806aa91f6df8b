"""BPF helpers of kernel/bpf/helpers.c, and the one helper table of the emulated backend.

The helpers other kernel files define live in those files' modules, and the table imports
them: bpf_trace.py (kernel/trace/bpf_trace.c: the probe reads, bpf_trace_printk), filter.py
(net/core/filter.c: redirects, the skb and XDP packet helpers, checksums), bpf_iter.py
(kernel/bpf/bpf_iter.c: bpf_loop, bpf_for_each_map_elem). Two kernel files' helpers stay
here: kernel/bpf/ringbuf.c's, because maps/ringbuf.py may not import prog/ (and
prog/bpf_iter.py, whose ``callback_of`` bpf_user_ringbuf_drain needs, imports it), and
kernel/bpf/core.c's bpf_tail_call, because prog/core.py imports the engines, which import
this table.

Rules this module keeps:
- A helper is ``f(rs, r1, r2, r3, r4, r5) -> r0``: arguments and result are the raw 64-bit
  register values; errors come back as the kernel's negative errno in two's complement, and
  the return values (SK_PASS / SK_DROP, XDP actions, -EEXIST, ...) are exactly the kernel's.
- Map arguments are map pointers (see interpreter: a region holding the ``BpfMap``); keys and
  values are read from program memory with the map's sizes, so a short buffer faults cleanly.
- ``HELPERS`` is the one table: id -> ``HelperProto`` (name, function, argument types, the
  program types that may call it). The verifier reads it (unknown ids, argument registers
  that must be initialised, per-type availability); the engines call ``proto.func``.
- ``bpf_tail_call`` is in the table for the verifier; the engines run it themselves because
  it does not return to the caller on success.
- Imports go one way: the modules of other files' helpers never import this one (what they
  share, such as ``bpf_map_of``, is memory.py's).
- Modeled time: a helper's call costs its proto's ``cost`` (``helper_call``, or its own
  profile entry such as ``probe_read_user``), charged by the function ``helper_funcs`` hands
  out; the three map helpers instead begin a modeled operation (``Timing.sync``: the
  virtual-time scheduler may let other CPUs go first) and the map op charges its own cost.
"""

from __future__ import annotations

import errno
import functools
from collections.abc import Callable
from dataclasses import dataclass

from ...accelerator import PROBE_READ_USER
from ...errors import KernelError, ProgramFault
from ...uapi import BpfFunc, MapType, ProgType
from ..machine.machine import thread_comm
from ..maps import bpf_spin_lock as spin_lock
from ..maps import bpf_timer as timers
from ..maps import ringbuf
from ..maps.bpf_map import BYTES_AT, BpfMap
from .bpf_iter import (
    BPF_LOOP_INLINED,
    bpf_for_each_map_elem,
    bpf_loop,
    bpf_loop_inlined,
    callback_of,
    timer_runner,
)
from .bpf_trace import (
    bpf_perf_event_output,
    bpf_probe_read_kernel,
    bpf_probe_read_kernel_str,
    bpf_probe_read_user,
    bpf_probe_read_user_str,
    bpf_trace_printk,
)
from .filter import (
    SK_BUFF_PROG_TYPES,
    bpf_csum_diff,
    bpf_l3_csum_replace,
    bpf_l4_csum_replace,
    bpf_msg_redirect_hash,
    bpf_msg_redirect_map,
    bpf_redirect_map,
    bpf_sk_redirect_hash,
    bpf_sk_redirect_map,
    bpf_skb_adjust_room,
    bpf_skb_change_head,
    bpf_skb_change_proto,
    bpf_skb_change_tail,
    bpf_skb_change_type,
    bpf_skb_event_output,
    bpf_skb_load_bytes,
    bpf_skb_pull_data,
    bpf_skb_redirect,
    bpf_skb_store_bytes,
    bpf_skb_vlan_pop,
    bpf_skb_vlan_push,
    bpf_xdp_adjust_head,
    bpf_xdp_adjust_meta,
    bpf_xdp_adjust_tail,
    bpf_xdp_event_output,
    bpf_xdp_get_buff_len,
    bpf_xdp_redirect,
)
from .memory import (
    M32,
    M64,
    MAP_CLASSES,
    OFF_MASK,
    BpfDynptr,
    RunState,
    bpf_map_of,
    mem_read,
    mem_write,
)

# Argument types (enum bpf_arg_type): what the verifier lets a program pass in R1..R5.
ARG_ANYTHING = "anything"  # any initialised value
ARG_CONST_MAP_PTR = "map_ptr"  # a map (lddw of a map fd)
ARG_PTR_TO_MAP_KEY = "map_key"  # memory holding the map's key_size bytes
ARG_PTR_TO_MAP_VALUE = "map_value"  # memory holding value_size bytes, read
ARG_PTR_TO_UNINIT_MAP_VALUE = "uninit_map_value"  # value_size bytes of memory, written
ARG_PTR_TO_MEM = "mem"  # memory whose size the next argument gives, read
ARG_PTR_TO_MEM_OR_NULL = "mem_or_null"  # the same, or NULL when that size is 0 (PTR_MAYBE_NULL)
ARG_PTR_TO_UNINIT_MEM = "uninit_mem"  # the same, written
ARG_CONST_SIZE = "size"  # a scalar, the size of the memory before it (not 0)
ARG_CONST_SIZE_OR_ZERO = "size_or_zero"
ARG_PTR_TO_CTX = "ctx"  # the program's context, unmodified
ARG_PTR_TO_FUNC = "func"  # a callback: the address of a static subprogram (BPF_PSEUDO_FUNC)
ARG_PTR_TO_STACK_OR_NULL = "stack_or_null"  # a pointer into the stack, or NULL
ARG_PTR_TO_SPIN_LOCK = "spin_lock"  # a map value's struct bpf_spin_lock
ARG_PTR_TO_TIMER = "timer"  # a map value's struct bpf_timer
ARG_CONST_ALLOC_SIZE_OR_ZERO = "alloc_size_or_zero"  # a known size of memory to allocate
ARG_PTR_TO_RINGBUF_MEM = "ringbuf_mem"  # a reserved ring buffer record, which it releases
# an initialised struct bpf_dynptr (| MEM_RDONLY: the helper leaves the dynptr itself alone)
ARG_PTR_TO_DYNPTR = "dynptr"


@dataclass(frozen=True)
class HelperProto:
    """struct bpf_func_proto, the parts the emulator uses."""

    func_id: int
    func: Callable[..., int]
    args: tuple[str, ...]  # arg1_type.. (R1.. must be initialised and of these types)
    prog_types: frozenset[int] | None = None  # None: every program type
    gpl_only: bool = False  # only programs with a GPL-compatible license may call it
    cost: str | None = "helper_call"  # what a call costs (a profile entry); None: the op's
    pkt_access: bool = False  # a memory argument may point into the packet

    @property
    def name(self) -> str:
        return f"bpf_{BpfFunc(self.func_id).name}"

    @property
    def nargs(self) -> int:
        return len(self.args)


# -- map helpers (kernel/bpf/helpers.c) ----------------------------------------------------------
# Program memory a key or value is read from in place: the stack and map values (the native
# tier's frames are views of its arena).
PLAIN_MEMORY = frozenset((bytearray, memoryview))


# The hot three have a core taking the resolved map, ``(bpf_map, rs, r2, r3, r4, r5) -> r0``,
# so the JIT can bind it to a map a program loads (``bind_map``) and skip resolving R1.
def _read(rs: RunState, ptr: int, size: int, what: str) -> bytes:
    """``mem_read`` with plain memory (the stack, mostly) inline."""
    region = rs.mem.get(ptr >> 32)
    off = ptr & OFF_MASK
    if type(region) in PLAIN_MEMORY and off + size <= len(region):
        return BYTES_AT[size](region, off)[0]
    return mem_read(rs, ptr, size, what)


def map_lookup_elem(bpf_map: BpfMap, rs: RunState, r2: int, r3: int = 0, r4: int = 0,
                    r5: int = 0) -> int:
    bpf_map.timing.sync(bpf_map.machine.current.cpu)
    return map_lookup_elem_synced(bpf_map, rs, r2)


def map_lookup_elem_synced(bpf_map: BpfMap, rs: RunState, r2: int) -> int:
    """map_lookup_elem after its ``Timing.sync`` (the native tier syncs before it reads a
    hash map's table, and may then need Python for the rest)."""
    mem = rs.mem.get(r2 >> 32)
    off = r2 & OFF_MASK
    if type(mem) in PLAIN_MEMORY and off + bpf_map.key_size <= len(mem):
        value = bpf_map.map_lookup_elem_at(mem, off)
    else:
        value = bpf_map.map_lookup_elem(mem_read(rs, r2, bpf_map.key_size, "key (R2)"))
    if value is None:
        return 0
    pointer = rs.value_regions.get(id(value))
    return rs.region_of(value) if pointer is None else pointer


def map_update_elem(bpf_map: BpfMap, rs: RunState, r2: int, r3: int, r4: int,
                    r5: int = 0) -> int:
    bpf_map.timing.sync(bpf_map.machine.current.cpu)
    key = _read(rs, r2, bpf_map.key_size, "key (R2)")
    try:
        # the map's map_update_elem takes the value pointer itself where it is a socket
        bpf_map.map_update_elem(key, r3 if bpf_map.value_is_socket
                                else _read(rs, r3, bpf_map.value_size, "value (R3)"), r4)
    except KernelError as exc:
        return -exc.errno & M64
    return 0


def map_delete_elem(bpf_map: BpfMap, rs: RunState, r2: int, r3: int = 0, r4: int = 0,
                    r5: int = 0) -> int:
    bpf_map.timing.sync(bpf_map.machine.current.cpu)
    try:
        bpf_map.map_delete_elem(_read(rs, r2, bpf_map.key_size, "key (R2)"))
    except KernelError as exc:
        return -exc.errno & M64
    return 0


def _resolve(rs: RunState, r1: int, helper: str) -> BpfMap:
    # the common case (a map pointer at offset 0) inline
    bpf_map = rs.mem.get(r1 >> 32)
    if type(bpf_map) not in MAP_CLASSES or r1 & OFF_MASK:
        bpf_map = bpf_map_of(rs, r1, helper)
    return bpf_map


def bpf_map_lookup_elem(rs: RunState, r1: int, r2: int, r3: int, r4: int, r5: int) -> int:
    return map_lookup_elem(_resolve(rs, r1, "bpf_map_lookup_elem"), rs, r2)


def bpf_map_update_elem(rs: RunState, r1: int, r2: int, r3: int, r4: int, r5: int) -> int:
    return map_update_elem(_resolve(rs, r1, "bpf_map_update_elem"), rs, r2, r3, r4)


def bpf_map_delete_elem(rs: RunState, r1: int, r2: int, r3: int, r4: int, r5: int) -> int:
    return map_delete_elem(_resolve(rs, r1, "bpf_map_delete_elem"), rs, r2)


def _binder(core: Callable[..., int],
            name: str) -> Callable[[object], Callable[..., int] | None]:
    """``bind_map``: the core bound to a map, or the map's helper of that ``name`` in C
    (``BpfMap.c_helpers``), which hands what it does not do to the core."""
    def bind_map(obj: object) -> Callable[..., int] | None:
        if not isinstance(obj, BpfMap):
            return None
        bound = functools.partial(core, obj)
        in_c = obj.c_helpers.get(name)
        return bound if in_c is None else functools.partial(in_c, bound)
    return bind_map


bpf_map_lookup_elem.bind_map = _binder(map_lookup_elem, "lookup")
bpf_map_update_elem.bind_map = _binder(map_update_elem, "update")
bpf_map_delete_elem.bind_map = _binder(map_delete_elem, "delete")


def bpf_map_push_elem(rs: RunState, r1: int, r2: int, r3: int, r4: int, r5: int) -> int:
    bpf_map = bpf_map_of(rs, r1, "bpf_map_push_elem")
    try:
        bpf_map.map_push_elem(mem_read(rs, r2, bpf_map.value_size, "value (R2)"), r3)
    except KernelError as exc:
        return -exc.errno & M64
    return 0


def _pop_or_peek(rs: RunState, op: Callable[[], bytes], r2: int, value_size: int) -> int:
    """Copy what pop/peek gives into the program's buffer at R2; 0 or the -errno. An empty
    queue or stack zeroes the buffer (__queue_map_get, __stack_map_get)."""
    try:
        got = op()
    except KernelError as exc:
        if exc.errno == errno.ENOENT:
            mem_write(rs, r2, bytes(value_size), "value (R2)")
        return -exc.errno & M64
    mem_write(rs, r2, got, "value (R2)")
    return 0


def bpf_map_pop_elem(rs: RunState, r1: int, r2: int, r3: int, r4: int, r5: int) -> int:
    bpf_map = bpf_map_of(rs, r1, "bpf_map_pop_elem")
    mem_read(rs, r2, bpf_map.value_size, "value (R2)")  # the buffer must be there first
    return _pop_or_peek(rs, bpf_map.map_pop_elem, r2, bpf_map.value_size)


def bpf_map_peek_elem(rs: RunState, r1: int, r2: int, r3: int, r4: int, r5: int) -> int:
    bpf_map = bpf_map_of(rs, r1, "bpf_map_peek_elem")
    value = mem_read(rs, r2, bpf_map.value_size, "value (R2)")
    if bpf_map.map_type == MapType.BLOOM_FILTER:  # peek is "is this value in the filter"
        try:
            bpf_map.map_peek_elem(value)
        except KernelError as exc:
            return -exc.errno & M64
        return 0
    return _pop_or_peek(rs, bpf_map.map_peek_elem, r2, bpf_map.value_size)


def bpf_map_lookup_percpu_elem(rs: RunState, r1: int, r2: int, r3: int, r4: int,
                               r5: int) -> int:
    bpf_map = bpf_map_of(rs, r1, "bpf_map_lookup_percpu_elem")
    lookup = getattr(bpf_map, "map_lookup_percpu_elem", None)
    if lookup is None:
        raise ProgramFault(errno.EFAULT, "bpf_map_lookup_percpu_elem needs a per-CPU map")
    value = lookup(mem_read(rs, r2, bpf_map.key_size, "key (R2)"), r3 & M32)
    return 0 if value is None else rs.region_of(value)


# -- machine helpers (kernel/bpf/helpers.c) -------------------------------------------------------
def bpf_get_smp_processor_id(rs: RunState, r1: int, r2: int, r3: int, r4: int, r5: int) -> int:
    machine = rs.machine
    return machine.current_cpu() if machine is not None else 0


def bpf_get_numa_node_id(rs: RunState, r1: int, r2: int, r3: int, r4: int, r5: int) -> int:
    machine = rs.machine
    return machine.numa_node_id() if machine is not None else 0


def bpf_ktime_get_ns(rs: RunState, r1: int, r2: int, r3: int, r4: int, r5: int) -> int:
    machine = rs.machine
    return machine.ktime_get_ns() if machine is not None else 0


def bpf_get_prandom_u32(rs: RunState, r1: int, r2: int, r3: int, r4: int, r5: int) -> int:
    machine = rs.machine
    return machine.prandom_u32(rs.cpu) if machine is not None else 0


def bpf_get_current_pid_tgid(rs: RunState, r1: int, r2: int, r3: int, r4: int, r5: int) -> int:
    machine = rs.machine
    return machine.current_pid_tgid() if machine is not None else 0


def bpf_get_current_comm(rs: RunState, r1: int, r2: int, r3: int, r4: int, r5: int) -> int:
    """bpf_get_current_comm(buf, size): strscpy_pad of the current task's comm into the R2
    bytes at R1 (the verifier makes R2 at least 1): at most R2 - 1 bytes of it, then NULs to
    the end. The current task is the machine's (``Machine.current_comm``)."""
    size = r2 & M32
    machine = rs.machine
    comm = machine.current_comm() if machine is not None else thread_comm()
    comm = comm[:size - 1]
    mem_write(rs, r1, comm + bytes(size - len(comm)), "buf (R1)")
    return 0


# -- spin locks (kernel/bpf/helpers.c; maps/bpf_spin_lock.py) ------------------------------------
def _spin_lock_word(rs: RunState, ptr: int, helper: str) -> tuple[bytearray, int]:
    """The map value memory and offset a bpf_spin_lock argument points to."""
    region = rs.mem.get(ptr >> 32) if ptr >= 0 else None
    off = ptr & OFF_MASK
    if type(region) is not bytearray or off + spin_lock.BPF_SPIN_LOCK_SIZE > len(region):
        raise ProgramFault(errno.EFAULT, f"{helper}: R1 ({ptr:#x}) is not a lock in a map "
                           "value")
    return region, off


def bpf_spin_lock(rs: RunState, r1: int, r2: int, r3: int, r4: int, r5: int) -> int:
    """Take the lock (other emulated CPUs running the program wait for it)."""
    spin_lock.bpf_spin_lock(*_spin_lock_word(rs, r1, "bpf_spin_lock"), rs.machine)
    return 0


def bpf_spin_unlock(rs: RunState, r1: int, r2: int, r3: int, r4: int, r5: int) -> int:
    spin_lock.bpf_spin_unlock(*_spin_lock_word(rs, r1, "bpf_spin_unlock"))
    return 0


# -- timers (kernel/bpf/helpers.c; maps/bpf_timer.py) --------------------------------------------
def _timer_value(rs: RunState, ptr: int, helper: str) -> bytearray:
    """The map value memory a timer argument lies in (the timer is the value's)."""
    region = rs.mem.get(ptr >> 32) if ptr >= 0 else None
    if type(region) is not bytearray:
        raise ProgramFault(errno.EFAULT, f"{helper}: R1 ({ptr:#x}) is not a timer in a map "
                           "value")
    return region


def bpf_timer_init(rs: RunState, r1: int, r2: int, r3: int, r4: int, r5: int) -> int:
    value = _timer_value(rs, r1, "bpf_timer_init")
    return timers.bpf_timer_init(bpf_map_of(rs, r2, "bpf_timer_init"), value, r3) & M64


def bpf_timer_set_callback(rs: RunState, r1: int, r2: int, r3: int, r4: int, r5: int) -> int:
    timer = timers.timer_of(_timer_value(rs, r1, "bpf_timer_set_callback"))
    callback = callback_of(rs, r2, "bpf_timer_set_callback")
    return timers.bpf_timer_set_callback(timer, callback, timer_runner(rs, callback)) & M64


def bpf_timer_start(rs: RunState, r1: int, r2: int, r3: int, r4: int, r5: int) -> int:
    timer = timers.timer_of(_timer_value(rs, r1, "bpf_timer_start"))
    return timers.bpf_timer_start(timer, r2, r3) & M64


def bpf_timer_cancel(rs: RunState, r1: int, r2: int, r3: int, r4: int, r5: int) -> int:
    timer = timers.timer_of(_timer_value(rs, r1, "bpf_timer_cancel"))
    machine = rs.machine
    return timers.bpf_timer_cancel(timer, machine.current.cpu if machine else 0) & M64


# -- ring buffers (kernel/bpf/ringbuf.c) ---------------------------------------------------------
BPF_RB_NO_WAKEUP, BPF_RB_FORCE_WAKEUP = ringbuf.BPF_RB_NO_WAKEUP, ringbuf.BPF_RB_FORCE_WAKEUP


def bpf_ringbuf_output(rs: RunState, r1: int, r2: int, r3: int, r4: int, r5: int) -> int:
    """A record of the ``r3`` bytes at ``r2``: 0, -EINVAL for flags, -EAGAIN for no room."""
    ring = bpf_map_of(rs, r1, "bpf_ringbuf_output")
    if r4 & ~(BPF_RB_NO_WAKEUP | BPF_RB_FORCE_WAKEUP):
        return -errno.EINVAL & M64
    data = mem_read(rs, r2, r3, "data (R2)")
    record = ring.bpf_ringbuf_reserve(r3)
    if record is None:
        return -errno.EAGAIN & M64
    record[:] = data
    ringbuf.bpf_ringbuf_commit(record, discard=False)
    return 0


def bpf_ringbuf_reserve(rs: RunState, r1: int, r2: int, r3: int, r4: int, r5: int) -> int:
    """A pointer to a new record of ``r2`` bytes, or NULL (flags, no room)."""
    ring = bpf_map_of(rs, r1, "bpf_ringbuf_reserve")
    record = None if r3 else ring.bpf_ringbuf_reserve(r2)
    return 0 if record is None else rs.add_region(record)


def _ringbuf_commit(rs: RunState, ptr: int, discard: bool, helper: str) -> int:
    record = rs.mem.get(ptr >> 32) if ptr >= 0 else None
    if type(record) is not bytearray or ptr & OFF_MASK \
            or not ringbuf.bpf_ringbuf_commit(record, discard):
        raise ProgramFault(errno.EFAULT, f"{helper}: R1 ({ptr:#x}) is not a reserved ring "
                           "buffer record")
    return 0


def bpf_ringbuf_submit(rs: RunState, r1: int, r2: int, r3: int, r4: int, r5: int) -> int:
    return _ringbuf_commit(rs, r1, False, "bpf_ringbuf_submit")


def bpf_ringbuf_discard(rs: RunState, r1: int, r2: int, r3: int, r4: int, r5: int) -> int:
    return _ringbuf_commit(rs, r1, True, "bpf_ringbuf_discard")


def bpf_ringbuf_query(rs: RunState, r1: int, r2: int, r3: int, r4: int, r5: int) -> int:
    return bpf_map_of(rs, r1, "bpf_ringbuf_query").bpf_ringbuf_query(r2)


def bpf_user_ringbuf_drain(rs: RunState, r1: int, r2: int, r3: int, r4: int, r5: int) -> int:
    """bpf_user_ringbuf_drain(map, callback_fn, callback_ctx, flags): ``callback_fn(dynptr,
    ctx)`` per sample user space submitted, the dynptr a LOCAL one over the sample's bytes
    (a copy: see maps/ringbuf.py), alive for that call only; what the map's drain returns."""
    ring = bpf_map_of(rs, r1, "bpf_user_ringbuf_drain")
    callback = callback_of(rs, r2, "bpf_user_ringbuf_drain")

    def call(sample: bytearray) -> int:
        dynptr = rs.add_region(BpfDynptr(sample, 0, len(sample)))
        try:
            return callback(rs, dynptr, r3)
        finally:
            del rs.mem[dynptr >> 32]

    return ring.bpf_user_ringbuf_drain(call, r4) & M64


# -- dynptrs (kernel/bpf/helpers.c) ---------------------------------------------------------------
def _dynptr_of(rs: RunState, ptr: int, helper: str) -> BpfDynptr:
    dynptr = rs.mem.get(ptr >> 32) if ptr >= 0 else None
    if type(dynptr) is not BpfDynptr or ptr & OFF_MASK:
        raise ProgramFault(errno.EFAULT, f"{helper}: {ptr:#x} is not a struct bpf_dynptr")
    return dynptr


def _dynptr_fits(dynptr: BpfDynptr, offset: int, length: int) -> bool:
    """bpf_dynptr_check_off_len (its -E2BIG when False)."""
    return length <= dynptr.size and offset <= dynptr.size - length


def bpf_dynptr_read(rs: RunState, r1: int, r2: int, r3: int, r4: int, r5: int) -> int:
    """bpf_dynptr_read(dst, len, src, offset, flags): 0, -EINVAL for flags, -E2BIG past the
    dynptr's end (dst left as it was)."""
    src = _dynptr_of(rs, r3, "bpf_dynptr_read")
    length, offset = r2 & M32, r4 & M32
    if r5:
        return -errno.EINVAL & M64
    if not _dynptr_fits(src, offset, length):
        return -errno.E2BIG & M64
    start = src.offset + offset
    mem_write(rs, r1, bytes(src.data[start:start + length]), "dst (R1)")
    return 0


def bpf_dynptr_write(rs: RunState, r1: int, r2: int, r3: int, r4: int, r5: int) -> int:
    """bpf_dynptr_write(dst, offset, src, len, flags): 0, -E2BIG past the dynptr's end,
    -EINVAL for flags."""
    dst = _dynptr_of(rs, r1, "bpf_dynptr_write")
    offset, length = r2 & M32, r4 & M32
    if not _dynptr_fits(dst, offset, length):
        return -errno.E2BIG & M64
    if r5:
        return -errno.EINVAL & M64
    start = dst.offset + offset
    dst.data[start:start + length] = mem_read(rs, r3, length, "src (R3)")
    return 0


def bpf_dynptr_data(rs: RunState, r1: int, r2: int, r3: int, r4: int, r5: int) -> int:
    """bpf_dynptr_data(ptr, offset, len): a pointer to the ``len`` bytes at ``offset`` in the
    dynptr's memory, or NULL past its end."""
    dynptr = _dynptr_of(rs, r1, "bpf_dynptr_data")
    offset, length = r2 & M32, r3 & M32
    if not _dynptr_fits(dynptr, offset, length):
        return 0
    return rs.region_of(dynptr.data) + dynptr.offset + offset


# -- tail calls (kernel/bpf/core.c; the engines run them: semantics.tail_call) --------------------
def bpf_tail_call(rs: RunState, r1: int, r2: int, r3: int, r4: int, r5: int) -> int:
    raise AssertionError("the engines run bpf_tail_call themselves")  # pragma: no cover


# -- the table ------------------------------------------------------------------------------------
_XDP = frozenset({ProgType.XDP})
# tc_cls_act_func_proto alone has bpf_skb_vlan_push, bpf_skb_vlan_pop, bpf_skb_change_proto
# and bpf_skb_change_type
_TC = frozenset({ProgType.SCHED_CLS, ProgType.SCHED_ACT})
_SK_SKB = frozenset({ProgType.SK_SKB})
_SK_MSG = frozenset({ProgType.SK_MSG})
# the programs whose func_proto has bpf_skb_pull_data (tc_cls_act, lwt_out and the lwt types
# built on it) or sk_skb_pull_data (sk_skb)
_SKB_PULL_DATA = frozenset({ProgType.SCHED_CLS, ProgType.SCHED_ACT, ProgType.LWT_IN,
                            ProgType.LWT_OUT, ProgType.LWT_XMIT, ProgType.LWT_SEG6LOCAL,
                            ProgType.SK_SKB})
# the programs whose func_proto has bpf_csum_diff (tc_cls_act, xdp, lwt_in/out/xmit/seg6local)
_CSUM_DIFF = frozenset({ProgType.SCHED_CLS, ProgType.SCHED_ACT, ProgType.XDP, ProgType.LWT_IN,
                        ProgType.LWT_OUT, ProgType.LWT_XMIT, ProgType.LWT_SEG6LOCAL})
# the programs of skbs whose func_proto has bpf_redirect (tc_cls_act, lwt_xmit), and
# bpf_l3_csum_replace and bpf_l4_csum_replace
_SKB_REDIRECT = frozenset({ProgType.SCHED_CLS, ProgType.SCHED_ACT, ProgType.LWT_XMIT})
# the programs whose func_proto has bpf_skb_store_bytes, bpf_skb_change_tail and
# bpf_skb_change_head (tc_cls_act, lwt_xmit; sk_skb, the last two as its sk_skb_ variants)
_SKB_STORE_BYTES = _SKB_REDIRECT | _SK_SKB
# the programs whose func_proto has bpf_skb_adjust_room (tc_cls_act; sk_skb_adjust_room)
_SKB_ADJUST_ROOM = _TC | _SK_SKB
# the programs whose func_proto has bpf_perf_event_output: the tracing ones, sk_msg (as
# bpf_event_output_data, the same here), the skb ones (bpf_skb_event_output) and XDP
_PERF_EVENT_OUTPUT = frozenset({ProgType.KPROBE, ProgType.TRACEPOINT, ProgType.PERF_EVENT,
                                ProgType.RAW_TRACEPOINT, ProgType.SK_MSG}) \
    | SK_BUFF_PROG_TYPES | _XDP
# helper id -> its function in C (the accelerator's, which hands what it does not do to the
# proto's own, its reference)
_C_FUNCS = {} if PROBE_READ_USER is None else {BpfFunc.probe_read_user: PROBE_READ_USER}
# helper id -> {program type: the function it is there}, where a type's get_func_proto
# gives the id a proto of its own (the table's function is the other types')
_FUNCS_BY_PROG_TYPE = {BpfFunc.redirect: dict.fromkeys(_SKB_REDIRECT, bpf_skb_redirect),
                       BpfFunc.perf_event_output: {
                           **dict.fromkeys(SK_BUFF_PROG_TYPES, bpf_skb_event_output),
                           ProgType.XDP: bpf_xdp_event_output}}


def _table() -> dict[int, HelperProto]:
    map_key = (ARG_CONST_MAP_PTR, ARG_PTR_TO_MAP_KEY)
    entries = [
        (BpfFunc.map_lookup_elem, bpf_map_lookup_elem, map_key, None),
        (BpfFunc.map_update_elem, bpf_map_update_elem,
         (*map_key, ARG_PTR_TO_MAP_VALUE, ARG_ANYTHING), None),
        (BpfFunc.map_delete_elem, bpf_map_delete_elem, map_key, None),
        (BpfFunc.map_push_elem, bpf_map_push_elem,
         (ARG_CONST_MAP_PTR, ARG_PTR_TO_MAP_VALUE, ARG_ANYTHING), None),
        (BpfFunc.map_pop_elem, bpf_map_pop_elem,
         (ARG_CONST_MAP_PTR, ARG_PTR_TO_UNINIT_MAP_VALUE), None),
        (BpfFunc.map_peek_elem, bpf_map_peek_elem,
         (ARG_CONST_MAP_PTR, ARG_PTR_TO_UNINIT_MAP_VALUE), None),
        (BpfFunc.map_lookup_percpu_elem, bpf_map_lookup_percpu_elem, (*map_key, ARG_ANYTHING),
         None),
        (BpfFunc.ktime_get_ns, bpf_ktime_get_ns, (), None),
        # CLOCK_BOOTTIME also counts time suspended: the emulated machine never suspends
        (BpfFunc.ktime_get_boot_ns, bpf_ktime_get_ns, (), None),
        (BpfFunc.trace_printk, bpf_trace_printk, (ARG_PTR_TO_MEM, ARG_CONST_SIZE), None),
        (BpfFunc.get_prandom_u32, bpf_get_prandom_u32, (), None),
        (BpfFunc.get_smp_processor_id, bpf_get_smp_processor_id, (), None),
        (BpfFunc.tail_call, bpf_tail_call, (ARG_PTR_TO_CTX, ARG_CONST_MAP_PTR, ARG_ANYTHING),
         None),
        (BpfFunc.get_current_pid_tgid, bpf_get_current_pid_tgid, (), None),
        (BpfFunc.get_numa_node_id, bpf_get_numa_node_id, (), None),
        # bpf_base_func_proto: every program type of a CAP_PERFMON loader has them
        (BpfFunc.probe_read_user, bpf_probe_read_user,
         (ARG_PTR_TO_UNINIT_MEM, ARG_CONST_SIZE_OR_ZERO, ARG_ANYTHING), None),
        (BpfFunc.probe_read_user_str, bpf_probe_read_user_str,
         (ARG_PTR_TO_UNINIT_MEM, ARG_CONST_SIZE_OR_ZERO, ARG_ANYTHING), None),
        (BpfFunc.probe_read_kernel, bpf_probe_read_kernel,
         (ARG_PTR_TO_UNINIT_MEM, ARG_CONST_SIZE_OR_ZERO, ARG_ANYTHING), None),
        (BpfFunc.probe_read_kernel_str, bpf_probe_read_kernel_str,
         (ARG_PTR_TO_UNINIT_MEM, ARG_CONST_SIZE_OR_ZERO, ARG_ANYTHING), None),
        (BpfFunc.get_current_comm, bpf_get_current_comm,
         (ARG_PTR_TO_UNINIT_MEM, ARG_CONST_SIZE), None),
        (BpfFunc.perf_event_output, bpf_perf_event_output,
         (ARG_PTR_TO_CTX, ARG_CONST_MAP_PTR, ARG_ANYTHING, ARG_PTR_TO_MEM,
          ARG_CONST_SIZE_OR_ZERO), _PERF_EVENT_OUTPUT),
        # the programs of skbs (sk_filter_func_proto, tc_cls_act_func_proto, cg_skb, lwt, sk_skb)
        (BpfFunc.skb_load_bytes, bpf_skb_load_bytes,
         (ARG_PTR_TO_CTX, ARG_ANYTHING, ARG_PTR_TO_UNINIT_MEM, ARG_CONST_SIZE),
         SK_BUFF_PROG_TYPES),
        (BpfFunc.skb_pull_data, bpf_skb_pull_data, (ARG_PTR_TO_CTX, ARG_ANYTHING),
         _SKB_PULL_DATA),
        # ARG_PTR_TO_MEM | MEM_RDONLY: the bytes are read
        (BpfFunc.skb_store_bytes, bpf_skb_store_bytes,
         (ARG_PTR_TO_CTX, ARG_ANYTHING, ARG_PTR_TO_MEM, ARG_CONST_SIZE, ARG_ANYTHING),
         _SKB_STORE_BYTES),
        (BpfFunc.l3_csum_replace, bpf_l3_csum_replace, (ARG_PTR_TO_CTX, *[ARG_ANYTHING] * 4),
         _SKB_REDIRECT),
        (BpfFunc.l4_csum_replace, bpf_l4_csum_replace, (ARG_PTR_TO_CTX, *[ARG_ANYTHING] * 4),
         _SKB_REDIRECT),
        (BpfFunc.skb_change_tail, bpf_skb_change_tail, (ARG_PTR_TO_CTX, *[ARG_ANYTHING] * 2),
         _SKB_STORE_BYTES),
        (BpfFunc.skb_change_head, bpf_skb_change_head, (ARG_PTR_TO_CTX, *[ARG_ANYTHING] * 2),
         _SKB_STORE_BYTES),
        (BpfFunc.skb_adjust_room, bpf_skb_adjust_room, (ARG_PTR_TO_CTX, *[ARG_ANYTHING] * 3),
         _SKB_ADJUST_ROOM),
        (BpfFunc.skb_vlan_push, bpf_skb_vlan_push, (ARG_PTR_TO_CTX, *[ARG_ANYTHING] * 2), _TC),
        (BpfFunc.skb_vlan_pop, bpf_skb_vlan_pop, (ARG_PTR_TO_CTX,), _TC),
        (BpfFunc.skb_change_proto, bpf_skb_change_proto, (ARG_PTR_TO_CTX, *[ARG_ANYTHING] * 2),
         _TC),
        (BpfFunc.skb_change_type, bpf_skb_change_type, (ARG_PTR_TO_CTX, ARG_ANYTHING), _TC),
        (BpfFunc.csum_diff, bpf_csum_diff,
         (ARG_PTR_TO_MEM_OR_NULL, ARG_CONST_SIZE_OR_ZERO, ARG_PTR_TO_MEM_OR_NULL,
          ARG_CONST_SIZE_OR_ZERO, ARG_ANYTHING), _CSUM_DIFF),
        (BpfFunc.redirect, bpf_xdp_redirect, (ARG_ANYTHING, ARG_ANYTHING), _XDP | _SKB_REDIRECT),
        (BpfFunc.redirect_map, bpf_redirect_map, (ARG_CONST_MAP_PTR, ARG_ANYTHING, ARG_ANYTHING),
         _XDP),
        (BpfFunc.xdp_adjust_head, bpf_xdp_adjust_head, (ARG_PTR_TO_CTX, ARG_ANYTHING), _XDP),
        (BpfFunc.xdp_adjust_tail, bpf_xdp_adjust_tail, (ARG_PTR_TO_CTX, ARG_ANYTHING), _XDP),
        (BpfFunc.xdp_adjust_meta, bpf_xdp_adjust_meta, (ARG_PTR_TO_CTX, ARG_ANYTHING), _XDP),
        (BpfFunc.xdp_get_buff_len, bpf_xdp_get_buff_len, (ARG_PTR_TO_CTX,), _XDP),
        (BpfFunc.sk_redirect_map, bpf_sk_redirect_map,
         (ARG_PTR_TO_CTX, ARG_CONST_MAP_PTR, ARG_ANYTHING, ARG_ANYTHING), _SK_SKB),
        (BpfFunc.sk_redirect_hash, bpf_sk_redirect_hash,
         (ARG_PTR_TO_CTX, ARG_CONST_MAP_PTR, ARG_PTR_TO_MAP_KEY, ARG_ANYTHING), _SK_SKB),
        (BpfFunc.msg_redirect_map, bpf_msg_redirect_map,
         (ARG_PTR_TO_CTX, ARG_CONST_MAP_PTR, ARG_ANYTHING, ARG_ANYTHING), _SK_MSG),
        (BpfFunc.msg_redirect_hash, bpf_msg_redirect_hash,
         (ARG_PTR_TO_CTX, ARG_CONST_MAP_PTR, ARG_PTR_TO_MAP_KEY, ARG_ANYTHING), _SK_MSG),
        (BpfFunc.ringbuf_output, bpf_ringbuf_output,
         (ARG_CONST_MAP_PTR, ARG_PTR_TO_MEM, ARG_CONST_SIZE_OR_ZERO, ARG_ANYTHING), None),
        (BpfFunc.ringbuf_reserve, bpf_ringbuf_reserve,
         (ARG_CONST_MAP_PTR, ARG_CONST_ALLOC_SIZE_OR_ZERO, ARG_ANYTHING), None),
        (BpfFunc.ringbuf_submit, bpf_ringbuf_submit, (ARG_PTR_TO_RINGBUF_MEM, ARG_ANYTHING),
         None),
        (BpfFunc.ringbuf_discard, bpf_ringbuf_discard, (ARG_PTR_TO_RINGBUF_MEM, ARG_ANYTHING),
         None),
        (BpfFunc.ringbuf_query, bpf_ringbuf_query, (ARG_CONST_MAP_PTR, ARG_ANYTHING), None),
        (BpfFunc.timer_init, bpf_timer_init, (ARG_PTR_TO_TIMER, ARG_CONST_MAP_PTR, ARG_ANYTHING),
         None),
        (BpfFunc.timer_set_callback, bpf_timer_set_callback,
         (ARG_PTR_TO_TIMER, ARG_PTR_TO_FUNC), None),
        (BpfFunc.timer_start, bpf_timer_start, (ARG_PTR_TO_TIMER, ARG_ANYTHING, ARG_ANYTHING),
         None),
        (BpfFunc.timer_cancel, bpf_timer_cancel, (ARG_PTR_TO_TIMER,), None),
        (BpfFunc.spin_lock, bpf_spin_lock, (ARG_PTR_TO_SPIN_LOCK,), None),
        (BpfFunc.spin_unlock, bpf_spin_unlock, (ARG_PTR_TO_SPIN_LOCK,), None),
        (BpfFunc.for_each_map_elem, bpf_for_each_map_elem,
         (ARG_CONST_MAP_PTR, ARG_PTR_TO_FUNC, ARG_PTR_TO_STACK_OR_NULL, ARG_ANYTHING), None),
        (BpfFunc.loop, bpf_loop,
         (ARG_ANYTHING, ARG_PTR_TO_FUNC, ARG_PTR_TO_STACK_OR_NULL, ARG_ANYTHING), None),
        # bpf_base_func_proto's (CAP_BPF): every program type
        (BpfFunc.user_ringbuf_drain, bpf_user_ringbuf_drain,
         (ARG_CONST_MAP_PTR, ARG_PTR_TO_FUNC, ARG_PTR_TO_STACK_OR_NULL, ARG_ANYTHING), None),
        (BpfFunc.dynptr_read, bpf_dynptr_read,
         (ARG_PTR_TO_UNINIT_MEM, ARG_CONST_SIZE_OR_ZERO, ARG_PTR_TO_DYNPTR, ARG_ANYTHING,
          ARG_ANYTHING), None),
        (BpfFunc.dynptr_write, bpf_dynptr_write,
         (ARG_PTR_TO_DYNPTR, ARG_ANYTHING, ARG_PTR_TO_MEM, ARG_CONST_SIZE_OR_ZERO,
          ARG_ANYTHING), None),
        (BpfFunc.dynptr_data, bpf_dynptr_data,
         (ARG_PTR_TO_DYNPTR, ARG_ANYTHING, ARG_CONST_ALLOC_SIZE_OR_ZERO), None),
    ]
    # bpf_probe_read_{user,kernel}{,_str}_proto are .gpl_only (kernel/trace/bpf_trace.c)
    gpl_only = {BpfFunc.trace_printk, BpfFunc.probe_read_user, BpfFunc.probe_read_user_str,
                BpfFunc.probe_read_kernel, BpfFunc.probe_read_kernel_str,
                BpfFunc.perf_event_output}
    # .pkt_access: the helpers that may read (or write) the packet through a memory argument
    pkt_access = {BpfFunc.map_lookup_elem, BpfFunc.map_update_elem, BpfFunc.map_delete_elem,
                  BpfFunc.map_push_elem, BpfFunc.map_lookup_percpu_elem, BpfFunc.csum_diff}
    # The map ops charge themselves; the engines run tail calls.
    own_cost = {BpfFunc.map_lookup_elem: None, BpfFunc.map_update_elem: None,
                BpfFunc.map_delete_elem: None, BpfFunc.tail_call: None,
                BpfFunc.probe_read_user: "probe_read_user"}
    return {int(fid): HelperProto(int(fid), func, args, types, fid in gpl_only,
                                  own_cost.get(fid, "helper_call"), fid in pkt_access)
            for fid, func, args, types in entries}


HELPERS: dict[int, HelperProto] = _table()


def charged(func: Callable[..., int], cost: str) -> Callable[..., int]:
    """``func``, charging ``cost`` to the current CPU of the program's machine first (not
    without modeled time, where UnmodeledTiming's charge does nothing)."""
    def helper(rs: RunState, r1: int, r2: int, r3: int, r4: int, r5: int) -> int:
        machine = rs.machine
        if machine is not None:
            timing = machine.timing
            if timing.modeled:
                timing.charge(machine.current.cpu, cost)
        return func(rs, r1, r2, r3, r4, r5)

    return functools.update_wrapper(helper, func)


def helper_funcs(prog_type: int | None = None,
                 modeled: bool = True) -> dict[int, Callable[..., int]]:
    """id -> function, what the engines call in a program of ``prog_type`` (charging the
    call's cost where the proto has one, on a machine with modeled time: without it, which a
    machine is for good, a charge is nothing and the function is called as it is); None:
    each proto's own function."""
    funcs = {}
    for fid, proto in HELPERS.items():
        func = _FUNCS_BY_PROG_TYPE.get(fid, {}).get(prog_type, _C_FUNCS.get(fid, proto.func))
        funcs[fid] = func if proto.cost is None or not modeled else charged(func, proto.cost)
    funcs[BPF_LOOP_INLINED] = bpf_loop_inlined  # inlined: no call to charge
    return funcs
