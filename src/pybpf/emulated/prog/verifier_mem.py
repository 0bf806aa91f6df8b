"""The verifier's memory-access checks (kernel/bpf/verifier.c: check_load_mem,
check_store_reg, check_atomic, check_mem_access and the map-value, context and stack access
checks below it), as a part of ``verifier._Verifier``."""

from __future__ import annotations

import errno
from typing import Any

from ...asm.opcodes import (
    AtomicOp,
    Instruction,
    Size,
)
from ...uapi import (
    ENOTSUPP,
    MAX_BPF_STACK,
    MapType,
    ProgType,
)
from ..maps.bpf_map import BPF_MAP_FIELDS, bpf_map_field_at
from . import filter as ctx_rules
from . import tnum
from . import verifier_bounds as vb
from .filter import (
    PTR_TO_PACKET_END,
    PTR_TO_SOCK_COMMON_OR_NULL,
)
from .memory import M32
from .verifier_alu import _coerce
from .verifier_state import (
    _PKT_TYPES,
    _SOCKET_TYPES,
    BPF_F_RDONLY_PROG,
    BPF_F_WRONLY_PROG,
    BPF_MAX_VAR_OFF,
    BPF_REG_SIZE,
    CONST_PTR_TO_DYNPTR,
    CONST_PTR_TO_MAP,
    DIRECT_VALUE_MAP_TYPES,
    DST_OP,
    DST_OP_NO_MARK,
    EMPTY_SLOT,
    PTR_TO_CTX,
    PTR_TO_MAP_KEY,
    PTR_TO_MAP_VALUE,
    PTR_TO_MEM,
    PTR_TO_RDONLY_MEM,
    PTR_TO_RINGBUF_MEM,
    PTR_TO_STACK,
    SCALAR,
    SRC_OP,
    STACK_INVALID,
    STACK_ITER,
    STACK_MISC,
    STACK_SPILL,
    STACK_ZERO,
    UNINIT,
    UNKNOWN,
    Frame,
    Reg,
    Slot,
    State,
    _reg_width,
    _reject,
    _s64,
    _spill,
    _stack_read,
    _tnum_str,
    assign_scalar_id_before_mov,
    scalar,
)

# The kernel struct each map type's object is (its ops' map_btf_id), whose first member is
# its struct bpf_map: what check_ptr_to_map_access's messages name.
MAP_BTF_STRUCTS = {
    **dict.fromkeys((MapType.HASH, MapType.PERCPU_HASH, MapType.LRU_HASH,
                     MapType.LRU_PERCPU_HASH, MapType.HASH_OF_MAPS), "bpf_htab"),
    **dict.fromkeys((MapType.ARRAY, MapType.PERCPU_ARRAY, MapType.PROG_ARRAY,
                     MapType.PERF_EVENT_ARRAY, MapType.CGROUP_ARRAY, MapType.ARRAY_OF_MAPS),
                    "bpf_array"),
    MapType.LPM_TRIE: "lpm_trie", MapType.QUEUE: "bpf_queue_stack",
    MapType.STACK: "bpf_queue_stack", MapType.RINGBUF: "bpf_ringbuf_map",
    MapType.DEVMAP: "bpf_dtab", MapType.DEVMAP_HASH: "bpf_dtab", MapType.CPUMAP: "bpf_cpu_map",
    MapType.SOCKMAP: "bpf_stab", MapType.SOCKHASH: "bpf_shtab",
    MapType.BLOOM_FILTER: "bpf_bloom_filter",
}

# Program types that may write packet data directly (may_access_direct_pkt_data).
DIRECT_WRITE_PROG_TYPES = frozenset({ProgType.SCHED_CLS, ProgType.SCHED_ACT, ProgType.XDP,
                                     ProgType.LWT_XMIT, ProgType.SK_SKB, ProgType.SK_MSG})


_ATOMIC_RMW = frozenset(int(op) | fetch for op in (AtomicOp.ADD, AtomicOp.OR, AtomicOp.AND,
                                                    AtomicOp.XOR) for fetch in (0, 1)) \
    | {int(AtomicOp.XCHG), int(AtomicOp.CMPXCHG)}


# Pointers is_spillable_regtype leaves out: a write of one to the stack is data (STACK_MISC),
# and reads back as a scalar.
_UNSPILLABLE_TYPES = frozenset({CONST_PTR_TO_DYNPTR})


# check_ptr_alignment's pointer_desc, for the types whose alignment it checks as generic
# pointers (packet pointers have their own rule; strict alignment is not on for them here)
_ALIGN_DESC = {PTR_TO_STACK: "stack ", PTR_TO_CTX: "context ", PTR_TO_MAP_VALUE: "value ",
               PTR_TO_MAP_KEY: "key ", PTR_TO_MEM: "", PTR_TO_RDONLY_MEM: "",
               PTR_TO_RINGBUF_MEM: ""}


def _tnum_is_aligned(var: tnum.Tnum, size: int) -> bool:
    """tnum_is_aligned: the low bits a ``size``-byte access needs clear are known clear."""
    return not (var.value | var.mask) & (size - 1)


def _stack_byte(off: int) -> tuple[int, int]:
    """The slot (spi) and its slot_type index of the stack byte at ``off`` (< 0)."""
    slot = -off - 1
    return slot // BPF_REG_SIZE, slot % BPF_REG_SIZE


def check_stack_range_initialized(frame: Frame, regno: int, reg: Reg, first: int, end: int,
                                  clobber: bool) -> bool:
    """check_stack_range_initialized for a variable offset, as for a loader the
    uninitialised stack is readable to (allow_uninit_stack) and pointers may leak to: each
    byte in [first, end) is data, zeros, uninitialised or in a spill; an iterator's is
    EACCES. ``clobber`` (a helper writing there): the bytes become data and the spills
    there unknown scalars (their bytes scrubbed to data). Returns whether every byte was a
    zero (mark_reg_stack_read's const zero)."""
    zeros = True
    for i in range(first, end):
        spi, index = _stack_byte(i)
        old = frame.stack.get(spi, EMPTY_SLOT)
        kind = old.types[index]
        zeros = zeros and kind == STACK_ZERO
        if kind == STACK_MISC:
            continue
        if kind in (STACK_ZERO, STACK_INVALID):
            if clobber:
                types = old.types[:index] + STACK_MISC + old.types[index + 1:]
                frame.stack[spi] = old._replace(types=types)
            continue
        if old.types[BPF_REG_SIZE - 1] == STACK_SPILL:
            if clobber:
                types = "".join(t if t == STACK_INVALID else STACK_MISC for t in old.types)
                frame.stack[spi] = Slot(types, UNINIT)
            continue
        raise _reject(errno.EACCES, f"invalid read from stack R{regno} var_off "
                      f"{_tnum_str(reg.var)}+{i - first} size {end - first}")
    return zeros


def _atomic_ptr_type_ok(reg: Reg) -> bool:
    return reg.type not in (PTR_TO_CTX, *_PKT_TYPES, PTR_TO_PACKET_END, *_SOCKET_TYPES)


def check_special_fields_untouched(bpf_map: Any, off: int, size: int,
                                   reg: Reg | None = None) -> None:
    """check_map_access: no load, store or helper reaches a value's bpf_spin_lock or
    bpf_timer (``off`` the fixed offset, ``reg``'s variable one's bounds added where
    given)."""
    lo, hi = off, off + size
    if reg is not None and not reg.wide:
        b = vb.bounds(reg)
        lo, hi = b.smin + off, b.umax + off + size
    for field_off, field_size in bpf_map.special_fields:
        if lo < field_off + field_size and field_off < hi:
            name = "bpf_spin_lock" if field_off == bpf_map.spin_lock_off else "bpf_timer"
            raise _reject(errno.EACCES, f"{name} cannot be accessed directly by load/store")



def map_direct_read(reg: Reg, off: int, size: int) -> Reg:
    """check_mem_access: a read at a known offset of a map the program may only read and
    that is frozen (.rodata once loaded) is the value there (bpf_map_is_rdonly,
    bpf_map_direct_read), so the branches it decides are walked one way only; such a read
    of an array of more than one element is ENOTSUPP, for the kernel reads the value
    through map_direct_value_addr. Any other read of a map value is unknown."""
    bpf_map = reg.map
    if bpf_map is None or not reg.var.is_const or bpf_map.map_type not in DIRECT_VALUE_MAP_TYPES \
            or not bpf_map.map_flags & BPF_F_RDONLY_PROG or not bpf_map.frozen:
        return UNKNOWN
    if bpf_map.max_entries != 1:  # array_map_direct_value_addr: one element or none
        raise _reject(ENOTSUPP, f"{bpf_map.describe()} is read-only for programs and frozen, "
                      f"but its {bpf_map.max_entries} elements have no direct value to read")
    start = off + _s64(reg.var.value)
    value = bpf_map.map_lookup_elem(b"\0\0\0\0")  # the element direct values point into
    return scalar(int.from_bytes(value[start:start + size], "little"))


def check_mem_region_access(regno: int, reg: Reg, off: int, size: int, mem_size: int,
                            invalid: str, zero_size_allowed: bool = False) -> None:
    """check_mem_region_access: ``size`` bytes at ``off`` (the fixed offset) plus each of
    the variable offset's least (smin) and greatest (umax) values lie within ``mem_size``
    bytes; a least one that may be negative, or a greatest one of BPF_MAX_VAR_OFF or more,
    is refused as such. ``invalid``: __check_mem_access's line for this memory, formatted
    with mem_size, off and size. A pointer a loop's widening left (``Reg.wide``) is not
    checked."""
    if reg.wide:
        return
    b = vb.bounds(reg)
    smin = b.smin
    if smin < 0 and (smin == vb.S64_MIN or not vb.S32_MIN <= off + smin <= vb.S32_MAX
                     or smin + off < 0):
        raise _reject(errno.EACCES, f"R{regno} min value is negative, either use unsigned "
                      "index or do a if (index >=0) check.")
    size_ok = size > 0 or size == 0 and zero_size_allowed
    at = smin + off
    if not (at >= 0 and size_ok and at + size <= mem_size):
        raise _reject(errno.EACCES, invalid.format(mem_size=mem_size, off=at, size=size)
                      + f"\nR{regno} min value is outside of the allowed memory range")
    if b.umax >= BPF_MAX_VAR_OFF:
        raise _reject(errno.EACCES, f"R{regno} unbounded memory access, make sure to bounds "
                      "check any such access")
    at = b.umax + off
    if not (at >= 0 and size_ok and at + size <= mem_size):
        raise _reject(errno.EACCES, invalid.format(mem_size=mem_size, off=at, size=size)
                      + f"\nR{regno} max value is outside of the allowed memory range")


MAP_VALUE_INVALID = "invalid access to map value, value_size={mem_size} off={off} size={size}"
MAP_KEY_INVALID = "invalid access to map key, key_size={mem_size} off={off} size={size}"
MEM_INVALID = "invalid access to memory, mem_size={mem_size} off={off} size={size}"


def check_packet_access(regno: int, reg: Reg, off: int, size: int,
                        zero_size_allowed: bool = False) -> None:
    """check_packet_access: ``size`` bytes at ``off`` (the insn's offset and the pointer's
    fixed one) lie within the range a comparison with the packet's end proved for the
    pointer's base (which covers the variable offset), and the variable offset's least
    value is not negative."""
    if not reg.wide and vb.bounds(reg).smin < 0:
        raise _reject(errno.EACCES, f"R{regno} min value is negative, either use unsigned "
                      "index or do a if (index >=0) check.")
    outside = f"R{regno} offset is outside of the packet"
    if reg.range < 0:  # at or past the end
        raise _reject(errno.EINVAL, outside)
    size_ok = size > 0 or size == 0 and zero_size_allowed
    if off < 0 or not size_ok or off + size > reg.range:
        raise _reject(errno.EACCES, f"invalid access to packet, off={off} size={size}, "
                      f"R{regno}(id={reg.pkt_id},off={off},r={reg.range})\n{outside}")


def check_map_access(regno: int, reg: Reg, off: int, size: int,
                     zero_size_allowed: bool = False) -> None:
    """check_map_access: within the map's value, and clear of its special fields."""
    bpf_map = reg.map
    check_mem_region_access(regno, reg, off, size, bpf_map.value_size, MAP_VALUE_INVALID,
                            zero_size_allowed)
    check_special_fields_untouched(bpf_map, off, size, reg)


class MemoryChecks:
    """check_mem_access and what leads to it, for ``_Verifier``."""

    # -- memory ------------------------------------------------------------------------------
    def check_load_mem(self, pc: int, insn: Instruction, info, state: State,
                       ldsx: bool, strict: bool = False) -> None:
        regs = state.cur.regs
        self.check_reg_arg(regs, insn.src, SRC_OP)
        self.check_reg_arg(regs, insn.dst, DST_OP_NO_MARK)
        base = regs[insn.src]
        self.check_mem_access(pc, insn, info, state, insn.src, False, insn.dst, ldsx=ldsx,
                              strict=strict)
        self.save_aux_ptr_type(pc, base)

    def check_store_reg(self, pc: int, insn: Instruction, info, state: State,
                        strict: bool = False) -> None:
        regs = state.cur.regs
        self.check_reg_arg(regs, insn.src, SRC_OP)
        self.check_reg_arg(regs, insn.dst, SRC_OP)
        base = regs[insn.dst]
        self.check_mem_access(pc, insn, info, state, insn.dst, True, insn.src, strict=strict)
        self.save_aux_ptr_type(pc, base)

    def check_atomic(self, pc: int, insn: Instruction, info, state: State) -> None:
        regs = state.cur.regs
        imm = insn.imm
        # check_atomic_load refuses the source's type before the load (which may overwrite
        # it: dst == src); check_atomic_store, after the store. Both align strictly
        # (strict_alignment_once).
        if imm == AtomicOp.LOAD_ACQ:
            if not _atomic_ptr_type_ok(regs[insn.src]):
                raise _reject(errno.EACCES, f"BPF_ATOMIC loads from R{insn.src} "
                              f"{regs[insn.src].type_str()} is not allowed")
            self.check_load_mem(pc, insn, info, state, False, strict=True)
            return
        if imm == AtomicOp.STORE_REL:
            self.check_store_reg(pc, insn, info, state, strict=True)
            if not _atomic_ptr_type_ok(regs[insn.dst]):
                raise _reject(errno.EACCES, f"BPF_ATOMIC stores into R{insn.dst} "
                              f"{regs[insn.dst].type_str()} is not allowed")
            return
        if imm not in _ATOMIC_RMW:
            raise _reject(errno.EINVAL, f"BPF_ATOMIC uses invalid atomic opcode "
                          f"{imm & M32:02x}")
        if info.size not in (Size.W, Size.DW):
            raise _reject(errno.EINVAL, "invalid atomic operand size")
        self.check_reg_arg(regs, insn.src, SRC_OP)
        self.check_reg_arg(regs, insn.dst, SRC_OP)
        if imm == AtomicOp.CMPXCHG:
            self.check_reg_arg(regs, 0, SRC_OP)
        if not _atomic_ptr_type_ok(regs[insn.dst]):
            raise _reject(errno.EACCES, f"BPF_ATOMIC stores into R{insn.dst} "
                          f"{regs[insn.dst].type_str()} is not allowed")
        load_reg = None
        if imm & 1:  # fetch: the old value goes to src (to R0 for cmpxchg)
            load_reg = 0 if imm == AtomicOp.CMPXCHG else insn.src
            self.check_reg_arg(regs, load_reg, DST_OP)
        # check_atomic_rmw: a read with no register to fill (which a variable stack
        # offset may not have), then the fill, then the write
        self.check_mem_access(pc, insn, info, state, insn.dst, False, None, strict=True)
        if load_reg is not None:
            self.check_mem_access(pc, insn, info, state, insn.dst, False, load_reg,
                                  strict=True)
        self.check_mem_access(pc, insn, info, state, insn.dst, True, None, strict=True)

    def save_aux_ptr_type(self, pc: int, base: Reg) -> None:
        """The same instruction may not access the context on one path and other memory on
        another (its context accesses are rewritten)."""
        ctx = base.type == PTR_TO_CTX
        known = base.type in (PTR_TO_STACK, PTR_TO_MAP_VALUE, *_PKT_TYPES)
        if not ctx and not known:
            return
        if self.ctx_insns.setdefault(pc, ctx) != ctx:
            raise _reject(errno.EINVAL, "same insn cannot be used with different pointers")

    def check_mem_access(self, pc: int, insn: Instruction, info, state: State, regno: int,
                         write: bool, value_regno: int | None, *, ldsx: bool = False,
                         imm: int | None = None, strict: bool = False) -> None:
        """check_mem_access: ``regno`` + insn.off, ``info.nbytes`` bytes; a read's result
        goes to ``value_regno`` (None: none), a write's value comes from it (or ``imm``)."""
        regs = state.cur.regs
        reg = regs[regno]
        size = info.nbytes
        off = insn.off + reg.off
        if reg.type == PTR_TO_STACK or strict and reg.type in _ALIGN_DESC:
            # check_generic_ptr_alignment: every offset the known bits allow is aligned
            # (the stack's always, check_ptr_alignment). A variable offset of which no bit
            # is known is one a loop's widening left unknown here (_widen_reg): not checked.
            if not reg.wide \
                    and not _tnum_is_aligned(tnum.add(reg.var, tnum.const(off)), size):
                raise _reject(errno.EACCES, f"misaligned {_ALIGN_DESC[reg.type]}access off "
                              f"{_tnum_str(reg.var)}+{reg.off}+{insn.off} size {size}")
        result = UNKNOWN
        if reg.type == PTR_TO_MAP_VALUE and not reg.id:
            self.check_map_value_access(regno, reg, off, size, write)
            if not write:
                result = map_direct_read(reg, off, size)
        elif reg.type == PTR_TO_CTX:
            result = self.check_ctx_access(regno, reg, off, size, write, ldsx)
        elif reg.type == PTR_TO_STACK:
            if not reg.var.is_const:
                value = regs[value_regno] if write and value_regno is not None else None
                result = self.check_stack_var_off_access(state, regno, reg, off, size, write,
                                                         value_regno, value, imm)
            else:
                off += _s64(reg.var.value)
                self.check_stack_access_within_bounds(regno, off, size, write)
                frame = state.frames[reg.frame]
                if write:
                    value = regs[value_regno] if value_regno is not None else None
                    if value is not None and value.type == SCALAR and off % BPF_REG_SIZE == 0:
                        # check_stack_write_fixed_off: the spill of a value that fits is a
                        # copy linked to the register; a narrowing one is linked to nothing
                        if _reg_width(value) <= 8 * size:
                            value = assign_scalar_id_before_mov(value, self.new_id)
                            regs[value_regno] = value
                        else:
                            value = value._replace(scalar_id=0, add_const=0, delta=0)
                    self.check_stack_write(frame, state.cur, off, size, value, imm)
                else:
                    result = _stack_read(frame, off, size)
        elif reg.type == CONST_PTR_TO_MAP:
            self.check_ptr_to_map_access(regno, reg, off, size, write)
        elif reg.type == PTR_TO_MAP_KEY:  # a for_each callback's key: the map's memory
            self.check_map_key_access(regno, reg, off, size, write)
        elif reg.type in (PTR_TO_RINGBUF_MEM, PTR_TO_MEM) and not reg.id:
            self.check_mem_region_access(regno, reg, off, size)
        elif reg.type == PTR_TO_RDONLY_MEM and not reg.id:
            if write:
                raise _reject(errno.EACCES, f"R{regno} cannot write into {reg.type}")
            self.check_mem_region_access(regno, reg, off, size)
        elif reg.type in _PKT_TYPES:
            if write and self.prog_type not in DIRECT_WRITE_PROG_TYPES:
                raise _reject(errno.EACCES, "cannot write into packet")
            check_packet_access(regno, reg, off, size)
        elif reg.type in (SCALAR, PTR_TO_PACKET_END, CONST_PTR_TO_DYNPTR) or reg.id:
            raise _reject(errno.EACCES, f"R{regno} invalid mem access '{reg.type_str()}'")
        if write or value_regno is None:
            return
        if result.type == SCALAR and size < BPF_REG_SIZE \
                and not (result.scalar_id and not ldsx and _reg_width(result) <= 8 * size):
            # (check_stack_read_fixed_off: a narrow fill of a spilled value that fits is the
            # value, still linked; any other narrow read is a new value)
            result = _coerce(result, size, ldsx)
        regs[value_regno] = result

    @staticmethod
    def check_mem_region_access(regno: int, reg: Reg, off: int, size: int) -> None:
        """Within the memory's mem_size bytes."""
        check_mem_region_access(regno, reg, off, size, reg.mem_size, MEM_INVALID)

    @staticmethod
    def check_ptr_to_map_access(regno: int, reg: Reg, off: int, size: int,
                                write: bool) -> None:
        """check_ptr_to_map_access: a read of the map object's fields (the struct its type
        is, struct bpf_map first), which the emulated map has values for only in
        ``BPF_MAP_FIELDS`` (a read elsewhere, which the kernel may allow, is refused here
        rather than answered with invented bytes). The value read is a scalar."""
        bpf_map = reg.map
        if bpf_map is None:
            return  # a map not known here
        tname = MAP_BTF_STRUCTS.get(bpf_map.map_type)
        if tname is None:
            raise _reject(ENOTSUPP, f"map_ptr access not supported for map type "
                          f"{bpf_map.map_type}")
        if off < 0:
            raise _reject(errno.EACCES, f"R{regno} is {tname} invalid negative access: "
                          f"off={off}")
        if write:
            raise _reject(errno.EACCES, f"only read from {tname} is supported")
        if bpf_map_field_at(off, size) is None:
            raise _reject(ENOTSUPP, f"the emulated map has no value for struct {tname} at "
                          f"off={off} size={size}: it keeps struct bpf_map's " + ", ".join(
                              name for name, _, _, _ in BPF_MAP_FIELDS))

    @staticmethod
    def check_map_key_access(regno: int, reg: Reg, off: int, size: int, write: bool) -> None:
        """The key is read-only, and read within key_size (check_mem_region_access)."""
        if write:
            raise _reject(errno.EACCES, f"write to change key R{regno} not allowed")
        check_mem_region_access(regno, reg, off, size, reg.map.key_size, MAP_KEY_INVALID)

    @staticmethod
    def check_map_access_type(bpf_map: Any, off: int, size: int, write: bool) -> None:
        """check_map_access_type: the program writes no map value it may only read
        (BPF_F_RDONLY_PROG) and reads none it may only write (BPF_F_WRONLY_PROG); ``off`` is
        the fixed offset, without the variable one, as the kernel says it."""
        flag = BPF_F_RDONLY_PROG if write else BPF_F_WRONLY_PROG
        if bpf_map.map_flags & flag:
            access = "write into" if write else "read from"
            raise _reject(errno.EACCES, f"{access} map forbidden, value_size="
                          f"{bpf_map.value_size} off={off} size={size}")

    def check_map_value_access(self, regno: int, reg: Reg, off: int, size: int,
                               write: bool) -> None:
        bpf_map = reg.map
        if bpf_map is None:
            return
        self.check_map_access_type(bpf_map, off, size, write)
        check_map_access(regno, reg, off, size)

    def check_ctx_access(self, regno: int, reg: Reg, off: int, size: int, write: bool,
                         ldsx: bool) -> Reg:
        self.check_ptr_off_reg(regno, reg)
        if not ctx_rules.is_valid_access(self.prog_type, off, size, write, ldsx,
                                         self.attach_type):
            raise _reject(errno.EACCES, f"invalid bpf_context access off={off} size={size}")
        self.max_ctx = max(self.max_ctx, off + size)
        ptr = ctx_rules.ctx_field_type(self.prog_type, off)
        if write or ptr is None:
            return UNKNOWN
        if ptr == PTR_TO_SOCK_COMMON_OR_NULL:
            return Reg("sock_common", tnum.const(0), id=self.new_id())
        return Reg(ptr, tnum.const(0))

    @staticmethod
    def check_stack_access_within_bounds(regno: int, off: int, size: int,
                                         write: bool) -> None:
        """``size`` bytes at ``off`` from the frame's top: a first byte outside the stack is
        EACCES (check_stack_slot_within_bounds; the uninitialised stack is readable, as for
        a CAP_PERFMON loader), a last one past the top EINVAL."""
        if off < -MAX_BPF_STACK or off > -1 or off + size > 0:
            err = errno.EINVAL if -MAX_BPF_STACK <= off < 0 else errno.EACCES
            access = "write to" if write else "read from"
            raise _reject(err, f"invalid {access} stack R{regno} off={off} size={size}")

    def check_stack_var_off_access(self, state: State, regno: int, reg: Reg, off: int,
                                   size: int, write: bool, value_regno: int | None,
                                   value: Reg | None, imm: int | None) -> Reg:
        """check_stack_read / check_stack_write with a variable offset: in bounds, then a
        read (check_stack_read_var_off) needs every byte it may reach readable and gives an
        unknown scalar (0 where all are zeros); a write (check_stack_write_var_off) makes
        every byte it may reach data, erasing the spills there (but a spilled 0 under a
        written 0). An offset a loop's widening left unknown (_widen_reg) is not
        checked."""
        if reg.wide:
            return UNKNOWN
        first, end = self.check_stack_var_off_within_bounds(regno, reg, off, size, write)
        frame = state.frames[reg.frame]
        if not write:
            if value_regno is None:
                raise _reject(errno.EACCES, "variable offset stack pointer cannot be passed "
                              f"into helper function; var_off={_tnum_str(reg.var)} off={off} "
                              f"size={size}")
            zeros = check_stack_range_initialized(frame, regno, reg, first, end, False)
            return scalar(0) if zeros else UNKNOWN
        writing_zero = value.is_const and value.var.value == 0 if value is not None \
            else imm == 0
        for i in range(first, end):
            spi, index = _stack_byte(i)
            old = frame.stack.get(spi, EMPTY_SLOT)
            if writing_zero and old.types[index] == STACK_SPILL \
                    and old.spilled.type == SCALAR and old.spilled.var == tnum.const(0):
                continue  # the spilled 0 stays
            new = STACK_ZERO if writing_zero and old.types[index] == STACK_ZERO else STACK_MISC
            types = old.types[:index] + new + old.types[index + 1:]
            frame.stack[spi] = Slot(types, UNINIT)  # spilled_ptr.type = NOT_INIT
        return UNKNOWN

    @staticmethod
    def check_stack_var_off_within_bounds(regno: int, reg: Reg, off: int, size: int,
                                          write: bool) -> tuple[int, int]:
        """check_stack_access_within_bounds for a variable offset: its smin and smax, within
        BPF_MAX_VAR_OFF, put the first byte within the stack (else EACCES) and the last
        below the top (else EINVAL). Returns the stack bytes [first, end) the access may
        reach."""
        b = vb.bounds(reg)
        access = "write to" if write else "read from"
        if b.smax >= BPF_MAX_VAR_OFF or b.smin <= -BPF_MAX_VAR_OFF:
            raise _reject(errno.EACCES, f"invalid unbounded variable-offset {access} stack "
                          f"R{regno}")
        lo, hi = b.smin + off, b.smax + off
        err = errno.EACCES if lo > -1 or lo < -MAX_BPF_STACK \
            else errno.EINVAL if hi + size > 0 else 0
        if err:
            raise _reject(err, f"invalid variable-offset {access} stack R{regno} "
                          f"var_off={_tnum_str(reg.var)} off={off} size={size}")
        return max(lo, -MAX_BPF_STACK), min(hi + size, 0)

    @staticmethod
    def check_stack_write(frame: Frame, cur: Frame, off: int, size: int, value: Reg | None,
                          imm: int | None) -> None:
        """check_stack_write_fixed_off: spill a register (or BPF_ST's immediate) to an
        aligned slot, or mark the bytes written as data (zeros when the value is 0)."""
        slot = -off - 1
        spi = slot // BPF_REG_SIZE
        old = frame.stack.get(spi, EMPTY_SLOT)
        if value is not None and off % BPF_REG_SIZE == 0 and value.type == SCALAR \
                or value is None and imm is not None and off % BPF_REG_SIZE == 0:
            frame.stack[spi] = _spill(old, value if value is not None else scalar(imm), size)
            return
        if value is not None and value.is_pointer and value.type not in _UNSPILLABLE_TYPES:
            if size != BPF_REG_SIZE:
                raise _reject(errno.EACCES, "invalid size of register spill")
            if frame is not cur and value.type == PTR_TO_STACK:
                raise _reject(errno.EINVAL, "cannot spill pointers to stack into stack frame "
                              "of the caller")
            frame.stack[spi] = _spill(old, value, size)
            return
        zero = value.type == SCALAR and value.var == tnum.const(0) if value is not None \
            else imm == 0
        types = list(old.types)
        if types[BPF_REG_SIZE - 1] in (STACK_SPILL, STACK_ITER):
            # the spill (or iterator) is gone: its bytes are data (is_stack_slot_special)
            types = [t if t == STACK_INVALID else STACK_MISC for t in types]
        for i in range(size):
            types[(slot - i) % BPF_REG_SIZE] = STACK_ZERO if zero else STACK_MISC
        frame.stack[spi] = Slot("".join(types), UNINIT)
