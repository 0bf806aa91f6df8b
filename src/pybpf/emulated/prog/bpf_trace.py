"""BPF helpers of kernel/trace/bpf_trace.c: the probe reads (bpf_probe_read_{user,kernel}
{,_str}), bpf_trace_printk and bpf_perf_event_output.

Rules this module keeps:
- Helpers as helpers.py has them: ``f(rs, r1, r2, r3, r4, r5) -> r0`` on raw register values,
  errors as the kernel's negative errno; their protos are in helpers.py's ``HELPERS`` (the
  probe reads and bpf_trace_printk are ``gpl_only`` there), which imports this module, never
  the other way.
- Two address spaces, as x86-64 has them: user memory is the machine's ``user_memory``;
  the emulated kernel's memory is what programs reach through the run's regions
  (``_kernel_memory``). A kernel address in no region is classed by x86's checks
  (copy_from_kernel_nofault_allowed: user, non-canonical, vsyscall) for the kernel's errno.
- A failed probe read zeroes the destination, as the kernel's do; bpf_trace_printk reads the
  memory its ``%s`` and ``%p`` conversions print through ``_kernel_memory`` too.
- bpf_perf_event_output writes into the event in the PERF_EVENT_ARRAY's slot
  (machine/perf_event.py), which must be the current CPU's; the skb and XDP programs' twins
  (filter.py) append packet bytes through ``bpf_event_output``, as filter.c calls it.
"""

from __future__ import annotations

import errno
import functools

from ..maps.bpf_map import BpfMap
from .bprintf import MAX_BPRINTF_BUF, BprintfError, bprintf
from .memory import M32, M64, OFF_MASK, CtxRegion, RunState, bpf_map_of, mem_read, mem_write

# -- probe reads (mm/maccess.c, lib/strncpy_from_user.c) ------------------------------------------
# The address space the probe reads see, x86-64 with 48-bit virtual addresses (this host's):
# user space ends at TASK_SIZE_MAX; the kernel's half starts at the canonical bound.
TASK_SIZE_MAX = 0x7FFF_FFFF_F000
_PAGE_SIZE = 4096
_KERNEL_HALF = 0xFFFF_8000_0000_0000  # the lowest canonical kernel address
_VSYSCALL_PAGE = 0xFFFF_FFFF_FF60_0000
_WORD = 8  # sizeof(unsigned long): strncpy_from_user copies a word at a time


def _user_read(rs: RunState, addr: int, size: int) -> bytes | None:
    """``size`` bytes of the tasks' user memory at ``addr`` (the machine's ``user_memory``),
    or None where that faults."""
    machine = rs.machine
    return machine.user_memory.read(addr, size) if machine is not None else None


def _user_access_ok(addr: int, size: int) -> bool:
    """__access_ok: the range lies below the end of user space (it may still fault)."""
    return addr + size <= TASK_SIZE_MAX


def bpf_probe_read_user(rs: RunState, r1: int, r2: int, r3: int, r4: int, r5: int) -> int:
    """bpf_probe_read_user_common: copy R2 bytes of user memory at R3 to R1
    (copy_from_user_nofault). A range outside user space, or one that faults, zeroes the
    buffer and gives -EFAULT; 0 bytes from a user address copy nothing and succeed."""
    size = r2 & M32
    data = _user_read(rs, r3, size) if size else b""
    if not _user_access_ok(r3, size) or data is None:
        mem_write(rs, r1, bytes(size), "dst (R1)")
        return -errno.EFAULT & M64
    mem_write(rs, r1, data, "dst (R1)")
    return 0


def bpf_probe_read_user_str(rs: RunState, r1: int, r2: int, r3: int, r4: int, r5: int) -> int:
    """bpf_probe_read_user_str_common: strncpy_from_user_nofault of at most R2 bytes from the
    user address R3 into R1. Returns the length with the NUL (a string of R2 bytes or more
    is cut to R2 - 1 and a NUL); a fault zeroes R1's R2 bytes and gives -EFAULT. The copy is
    do_strncpy_from_user's: a word at a time while 8 bytes of the count are left (the word
    holding the NUL is stored with its bytes from the NUL on zeroed), then byte by byte
    (also where a word would fault)."""
    count = r2 & M32
    if not count:
        return 0
    src = r3
    out = bytearray()
    found = False
    if src < TASK_SIZE_MAX:
        limit = min(count, TASK_SIZE_MAX - src)
        res = 0
        while limit - res >= _WORD:
            word = _user_read(rs, src + res, _WORD)
            if word is None:
                break  # byte_at_a_time
            nul = word.find(0)
            if nul >= 0:
                out += word[:nul] + bytes(_WORD - nul)
                res += nul
                found = True
                break
            out += word
            res += _WORD
        while not found and res < limit:
            byte = _user_read(rs, src + res, 1)
            if byte is None:
                break
            out += byte
            if not byte[0]:
                found = True
                break
            res += 1
        ret = res if found or res >= count else -errno.EFAULT
    else:
        ret = -errno.EFAULT
    if ret < 0:
        mem_write(rs, r1, bytes(count), "dst (R1)")
        return ret & M64
    if ret >= count:  # no NUL within the count: cut, and terminated
        ret = count
        out[count - 1:] = b"\0"
        out = out[:count]
    else:
        ret += 1
    mem_write(rs, r1, bytes(out), "dst (R1)")
    return ret


def _kernel_read_allowed(addr: int) -> bool:
    """copy_from_kernel_nofault_allowed (x86): no user address (nor the guard page after
    user space), not the vsyscall page, and canonical."""
    return addr >= TASK_SIZE_MAX + _PAGE_SIZE and addr & ~(_PAGE_SIZE - 1) != _VSYSCALL_PAGE \
        and addr >= _KERNEL_HALF


def _kernel_memory(rs: RunState, addr: int) -> tuple[bytes | bytearray | memoryview, int] | None:
    """The emulated kernel memory at ``addr`` and the offset there: program-visible memory
    (the stack, map values, the packet, a context's UAPI struct), or None where ``addr`` is
    in no region. Regions are ``region << 32 | offset`` addresses, which the x86 checks above
    would take for user (or non-canonical) ones: a region is looked up first."""
    region = rs.mem.get(addr >> 32) if 0 <= addr <= M64 else None
    if type(region) is CtxRegion:
        region = region.buf
    if not isinstance(region, (bytes, bytearray, memoryview)):
        return None
    return region, addr & OFF_MASK


def bpf_probe_read_kernel(rs: RunState, r1: int, r2: int, r3: int, r4: int, r5: int) -> int:
    """bpf_probe_read_kernel_common: copy_from_kernel_nofault of R2 bytes at R3 into R1.

    The emulated kernel's memory is what programs reach through the run's regions; reading
    past a region's end faults (-EFAULT). An address in no region is classed as on x86: a
    user, non-canonical or vsyscall address gives -ERANGE (even for 0 bytes), any other
    kernel address faults (-EFAULT) unless 0 bytes are asked for. On error R1 is zeroed."""
    size = r2 & M32
    found = _kernel_memory(rs, r3)
    if found is not None:
        region, off = found
        if off + size <= len(region):
            mem_write(rs, r1, bytes(region[off:off + size]), "dst (R1)")
            return 0
        ret = -errno.EFAULT
    elif not _kernel_read_allowed(r3):
        ret = -errno.ERANGE
    else:
        ret = -errno.EFAULT if size else 0
    mem_write(rs, r1, bytes(size), "dst (R1)")
    return ret & M64


def bpf_probe_read_kernel_str(rs: RunState, r1: int, r2: int, r3: int, r4: int,
                              r5: int) -> int:
    """bpf_probe_read_kernel_str_common: strncpy_from_kernel_nofault of at most R2 bytes at
    R3 into R1: the bytes up to and with the NUL (R1's later bytes are left as they were),
    their count returned; a string of R2 bytes or more is cut, its last byte made NUL.
    0 bytes: 0, nothing read. A fault (a region's end before the NUL, an unmapped kernel
    address) gives -EFAULT, an address the kernel may not read -ERANGE; both zero R1's R2
    bytes. Memory as bpf_probe_read_kernel sees it."""
    count = r2 & M32
    if not count:
        return 0
    found = _kernel_memory(rs, r3)
    if found is not None:
        region, off = found
        text = bytes(region[off:off + count])
        nul = text.find(0)
        if nul >= 0:
            mem_write(rs, r1, text[:nul + 1], "dst (R1)")
            return nul + 1
        if len(text) == count:
            mem_write(rs, r1, text[:-1] + b"\0", "dst (R1)")
            return count
        ret = -errno.EFAULT
    else:
        ret = -errno.EFAULT if _kernel_read_allowed(r3) else -errno.ERANGE
    mem_write(rs, r1, bytes(count), "dst (R1)")
    return ret & M64


# -- bpf_trace_printk (kernel/trace/bpf_trace.c; bprintf.py) --------------------------------------
def bpf_trace_printk(rs: RunState, r1: int, r2: int, r3: int, r4: int, r5: int) -> int:
    """bpf_trace_printk: the format at R1 (R2 bytes, NUL within) printed with R3-R5 as the
    kernel's bprintf prints it (``bprintf.py``), appended to ``rs.trace``; the text's length,
    or -EINVAL / -ENOSPC for a format the kernel refuses."""
    fmt = mem_read(rs, r1, r2, "format (R1)")
    try:
        text = bprintf(fmt, [r3, r4, r5], functools.partial(_readable, rs),
                       functools.partial(_readable_string, rs))
    except BprintfError as exc:
        return -exc.errno & M64
    rs.trace.append(text[:MAX_BPRINTF_BUF - 1])
    return len(text)


def _readable(rs: RunState, ptr: int, size: int) -> bytes | None:
    """``size`` bytes of the emulated kernel memory at ``ptr`` (``_kernel_memory``), or None
    (a kernel copy that faults)."""
    found = _kernel_memory(rs, ptr)
    if found is None or found[1] + size > len(found[0]):
        return None
    region, off = found
    return bytes(region[off:off + size])


def _readable_string(rs: RunState, ptr: int, limit: int) -> bytes | None:
    """The NUL-terminated string at ``ptr`` in the emulated kernel memory, at most ``limit``
    bytes of it (its region's end ends it too), or None where nothing is readable."""
    found = _kernel_memory(rs, ptr)
    if found is None or found[1] >= len(found[0]):
        return None
    region, off = found
    return bytes(region[off:off + limit]).split(b"\0", 1)[0]


# -- bpf_perf_event_output (kernel/trace/bpf_trace.c; machine/perf_event.py) ----------------------
BPF_F_INDEX_MASK = 0xFFFF_FFFF
BPF_F_CURRENT_CPU = BPF_F_INDEX_MASK
BPF_F_CTXLEN_MASK = 0xF_FFFF << 32  # the skb and XDP twins: packet bytes to append


def __bpf_perf_event_output(rs: RunState, bpf_map: BpfMap, flags: int, raw: bytes) -> int:
    """The sample ``raw`` into the event in slot ``flags & BPF_F_INDEX_MASK`` (the current
    CPU's for BPF_F_CURRENT_CPU): -E2BIG past max_entries, -ENOENT for an empty slot,
    -EOPNOTSUPP for an event of another CPU, -ENOSPC for a full ring. (The kernel's -EINVAL
    for an event that is not a BPF output one cannot happen: the machine has no other.)"""
    machine = rs.machine
    cpu = machine.current_cpu() if machine is not None else 0
    index = flags & BPF_F_INDEX_MASK
    if index == BPF_F_CURRENT_CPU:
        index = cpu
    if index >= bpf_map.max_entries:
        return -errno.E2BIG
    event = bpf_map.ptrs.get(index)
    if event is None:
        return -errno.ENOENT
    if event.oncpu != cpu:
        return -errno.EOPNOTSUPP
    return event.perf_event_output(raw)


def bpf_event_output(rs: RunState, bpf_map: BpfMap, flags: int, meta: bytes,
                     ctx_bytes: bytes) -> int:
    """bpf_event_output: a sample of ``meta`` and then ``ctx_bytes`` (the copy of the
    context's bytes its caller made), as its r0."""
    return __bpf_perf_event_output(rs, bpf_map, flags, meta + ctx_bytes) & M64


def bpf_perf_event_output(rs: RunState, r1: int, r2: int, r3: int, r4: int, r5: int) -> int:
    """bpf_perf_event_output(ctx, map, flags, data, size): a sample of the ``size`` bytes
    at ``data``; flags other than the index: -EINVAL."""
    if r3 & ~BPF_F_INDEX_MASK:
        return -errno.EINVAL & M64
    bpf_map = bpf_map_of(rs, r2, "bpf_perf_event_output")
    return bpf_event_output(rs, bpf_map, r3, mem_read(rs, r4, r5, "data (R4)"), b"")
