"""What both engines share for the rare, wide operations: signed division and modulo, byte
swaps, atomics, legacy packet loads and tail calls (kernel/bpf/core.c's semantics after the
verifier's rewrites: signed division (off=1) truncates toward zero and INT_MIN / -1 wraps to
INT_MIN (INT_MIN % -1 = 0); tail calls replace the running frame, at most 33 per run)."""

from __future__ import annotations

import errno
import threading
from typing import TYPE_CHECKING

from ...accelerator import ATOMIC_RMW
from ...asm.opcodes import ATOMIC_FETCH, AtomicOp
from ...errors import ProgramFault
from .memory import M32, OFF_MASK, SIGN32, RunState, mem_load, mem_store

if TYPE_CHECKING:
    from .executable import Executable

MAX_TAIL_CALL_CNT = 33
MAX_CALL_FRAMES = 8


class RunAbort(Exception):  # noqa: N818 (control flow, not an error)
    """A legacy packet load (LD_ABS/LD_IND) fell outside the packet: the program returns 0."""


def sdiv(dst: int, src: int, bits: int) -> int:
    """Signed division truncating toward zero; by 0 gives 0; INT_MIN / -1 wraps."""
    mask = (1 << bits) - 1
    sign = 1 << (bits - 1)
    a = ((dst & mask) ^ sign) - sign
    b = ((src & mask) ^ sign) - sign
    if b == 0:
        return 0
    q = abs(a) // abs(b)
    return (-q if (a < 0) != (b < 0) else q) & mask


def smod(dst: int, src: int, bits: int) -> int:
    """Signed remainder with the dividend's sign; by 0 leaves dst (zero-extended)."""
    mask = (1 << bits) - 1
    sign = 1 << (bits - 1)
    a = ((dst & mask) ^ sign) - sign
    b = ((src & mask) ^ sign) - sign
    if b == 0:
        return dst & mask
    r = abs(a) % abs(b)
    return (-r if a < 0 else r) & mask


def bswap(value: int, bits: int) -> int:
    """Reverse the bytes of the low ``bits`` of ``value``."""
    nbytes = bits // 8
    return int.from_bytes((value & ((1 << bits) - 1)).to_bytes(nbytes, "little"), "big")


# Atomics the hardware cannot do as one (no C accelerator, or a misaligned word) take this
# lock; an aligned word of plain memory is one hardware atomic (ATOMIC_RMW), as compiled
# programs do it, so no engine loses another's update.
ATOMIC_LOCK = threading.Lock()


def atomic_op(rs: RunState, addr: int, size: int, imm: int, src: int, r0: int,
              pc: int) -> int:
    """BPF_STX | BPF_ATOMIC: returns the old value (for fetch / xchg / cmpxchg)."""
    if imm == AtomicOp.LOAD_ACQ:
        return mem_load(rs, addr, size, pc)
    if ATOMIC_RMW is not None and imm != AtomicOp.STORE_REL and addr >= 0:
        try:
            return ATOMIC_RMW(rs.mem.get(addr >> 32), addr & OFF_MASK, size, imm, src, r0)
        except TypeError:
            pass  # not an aligned word of plain memory: the checked path says why
    mask = (1 << (8 * size)) - 1
    with ATOMIC_LOCK:
        if imm == AtomicOp.STORE_REL:
            mem_store(rs, addr, size, src, pc)
            return 0
        old = mem_load(rs, addr, size, pc)
        op = imm & ~ATOMIC_FETCH
        if imm == AtomicOp.CMPXCHG:
            if old == r0 & mask:
                mem_store(rs, addr, size, src, pc)
        elif imm == AtomicOp.XCHG:
            mem_store(rs, addr, size, src, pc)
        elif op == AtomicOp.ADD:
            mem_store(rs, addr, size, old + src, pc)
        elif op == AtomicOp.OR:
            mem_store(rs, addr, size, old | src, pc)
        elif op == AtomicOp.AND:
            mem_store(rs, addr, size, old & src, pc)
        elif op == AtomicOp.XOR:
            mem_store(rs, addr, size, old ^ src, pc)
        return old


SKF_NET_OFF, SKF_LL_OFF = -0x100000, -0x200000  # include/uapi/linux/filter.h


def ld_abs(rs: RunState, offset: int, size: int) -> int:
    """Legacy packet load: big-endian ``size`` bytes at skb->data + offset, else abort with 0.
    A negative offset is bpf_internal_load_pointer_neg_helper's: from SKF_NET_OFF on, that
    far into the network header, from SKF_LL_OFF on, into the MAC header (``rs.headers``:
    where a run knows them), up to the end of the frame."""
    packet = rs.packet
    offset = ((offset & M32) ^ SIGN32) - SIGN32
    if offset < 0:
        if rs.headers is None or offset < SKF_LL_OFF:
            raise RunAbort
        packet, mac, network = rs.headers
        offset += network - SKF_NET_OFF if offset >= SKF_NET_OFF else mac - SKF_LL_OFF
    if offset + size > len(packet):
        raise RunAbort
    return int.from_bytes(packet[offset:offset + size], "big")


def tail_call(rs: RunState, ctx: int, map_ptr: int, index: int) -> Executable | None:
    """bpf_tail_call: the program to continue with, or None to fall through."""
    prog_array = rs.mem.get(map_ptr >> 32)
    target_of = getattr(prog_array, "tail_call_target", None)
    if target_of is None:
        raise ProgramFault(errno.EFAULT, "bpf_tail_call: R2 is not a PROG_ARRAY map pointer")
    index &= M32
    if rs.tail_calls >= MAX_TAIL_CALL_CNT:
        return None
    prog = target_of(index)
    if prog is None:
        return None
    rs.tail_calls += 1
    exe = prog.executable
    rs.mem.update(exe.static_regions)
    return exe
