"""The verifier's abstract state (kernel/bpf/verifier.c's struct bpf_reg_state,
bpf_func_state, bpf_verifier_state), its stack slots, and what pruning compares: states_equal /
regsafe (``_covers``), the endless-loop check and the widening of is_state_visited; the limits
and errno helper every part of the verifier shares."""

from __future__ import annotations

import errno
import struct
from collections.abc import Callable
from typing import Any, NamedTuple

from ...asm.opcodes import (
    Class,
    Instruction,
    JmpOp,
)
from ...errors import KernelError
from ...uapi import (
    MapType,
    ProgType,
)
from . import tnum
from . import verifier_bounds as vb
from .filter import (
    PTR_TO_PACKET,
    PTR_TO_PACKET_END,
    PTR_TO_PACKET_META,
    PTR_TO_SOCK_COMMON_OR_NULL,
    PTR_TO_SOCKET,
)
from .memory import M64
from .tnum import Tnum

LD_IMM64 = 0x18
EXIT = Class.JMP | JmpOp.EXIT
JA = Class.JMP | JmpOp.JA
GOTOL = Class.JMP32 | JmpOp.JA
# Program types that may use the legacy packet loads (may_access_skb).
LD_ABS_PROG_TYPES = frozenset({ProgType.SOCKET_FILTER, ProgType.SCHED_CLS, ProgType.SCHED_ACT})
# Maps whose values a program may address directly (map_direct_value_addr).
DIRECT_VALUE_MAP_TYPES = frozenset({MapType.ARRAY})
# Maps whose lookups with a constant in-range key cannot fail (can_elide_value_nullness).
ELIDE_NULL_MAP_TYPES = frozenset({MapType.ARRAY, MapType.PERCPU_ARRAY})
BPF_COMPLEXITY_LIMIT_INSNS = 1_000_000
BPF_MAX_VAR_OFF = 1 << 29
BPF_MAX_VAR_SIZ = 1 << 29  # the largest size a helper may be given
BPF_REG_SIZE = 8
BPF_ADDR_SPACE_CAST = 1
BPF_F_RDONLY_PROG = 0x80
BPF_F_WRONLY_PROG = 0x100
MAX_BPF_REG = 11
FP = 10
CALLER_SAVED = (0, 1, 2, 3, 4, 5)
# Explored states kept per instruction for pruning (fewer only means more walking).
STATES_PER_INSN = 8
# Rounds of a loop walked with exact values before what changes is widened to unknown.
LOOP_UNROLL = 1024
# A callback's call site is walked again after each return, an iterator's next call after
# each round of its loop; the kernel's states converge there because scalars no branch or
# pointer needs are imprecise. Without precision marks the values a callback or loop body
# changes are widened sooner, or each round's state would walk the rest of the program on
# its own (three for_each calls in a row: a product of their rounds).
CALLBACK_UNROLL = 8
# Checkpoints back a path's state is compared with to find an endless loop.
LOOP_PERIOD = 8
# is_state_visited keeps a state at a prune point that does not force one (an iterator's
# next call, a callback's call site, may_goto) only once this many jumps and insns were
# processed since the last state it kept anywhere; where the path already kept one at that
# point (a loop's rounds, which differ and seldom help pruning), only once this many.
CHECKPOINT_JMPS, CHECKPOINT_INSNS = 2, 8
LOOP_CHECKPOINT_JMPS, LOOP_CHECKPOINT_INSNS = 20, 100
# (The kernel also forces one past 40 entries of jump history, which counts stack spills
# and fills too; not modelled: it only keeps a loop's states more often.)

_SLOT = struct.Struct("<BBhi")


class VerifierReject(KernelError):
    """The program is rejected; ``log`` is the verifier log."""

    def __init__(self, err: int, message: str) -> None:
        super().__init__(err, message)
        self.log = message + "\n"



def _reject(err: int, message: str) -> VerifierReject:
    return VerifierReject(err, message)



# -- the abstract state ------------------------------------------------------------------------
NOT_INIT, SCALAR, PTR_TO_CTX, PTR_TO_STACK = "?", "scalar", "ctx", "fp"
CONST_PTR_TO_MAP, PTR_TO_MAP_VALUE, PTR_TO_MAP_KEY = "map_ptr", "map_value", "map_key"
PTR_TO_RINGBUF_MEM = "ringbuf_mem"  # a reserved ring buffer record, ``Reg.mem_size`` bytes
PTR_TO_MEM = "mem"  # a global subprogram's pointer argument: ``Reg.mem_size`` bytes
PTR_TO_FUNC = "func"  # a callback's address (BPF_PSEUDO_FUNC); ``Reg.map``: its first insn
# a pointer to a struct bpf_dynptr the program did not make (a user ring buffer drain's
# callback argument): only the dynptr helpers take it, at offset 0
CONST_PTR_TO_DYNPTR = "dynptr_ptr"
# PTR_TO_MEM | MEM_RDONLY, ``Reg.mem_size`` bytes: a kfunc's address (size 0), or what a
# kfunc returning ``int *`` gives (bpf_iter_num_next: 4)
PTR_TO_RDONLY_MEM = "rdonly_mem"
_PKT_TYPES = frozenset({PTR_TO_PACKET, PTR_TO_PACKET_META})
# reg_is_pkt_pointer_any: what a helper that changes packet data invalidates
_PKT_ANY_TYPES = _PKT_TYPES | {PTR_TO_PACKET_END}
# A packet pointer's range after a comparison with data_end proved it at the end (pkt >= end)
# or past it (pkt > end): no byte is readable there (is_pkt_ptr_branch_taken uses them).
AT_PKT_END, BEYOND_PKT_END = -1, -2
MAX_PACKET_OFF = 0xFFFF
# Pointer types whose accesses are not checked here (sockets: their fields are not modelled).
_SOCKET_TYPES = frozenset({PTR_TO_SOCKET, "sock_common"})


# enum bpf_iter_state: an iterator's state, as a stack slot's spilled register keeps it
BPF_ITER_STATE_ACTIVE, BPF_ITER_STATE_DRAINED = "active", "drained"


class IterState(NamedTuple):
    """bpf_reg_state.iter: which iterator (its struct, ``bpf_iter_num``), whether its last
    next may have given an element (ACTIVE) or surely gave NULL (DRAINED), and the rounds
    of its loop this path walked (depth: pruning does not compare it, but it keeps one
    round's state from looking like the next one's, an endless loop)."""

    type: str
    state: str = BPF_ITER_STATE_ACTIVE
    depth: int = 0


class Reg(NamedTuple):
    """struct bpf_reg_state, the parts kept here."""

    type: str = NOT_INIT
    var: Tnum = tnum.UNKNOWN  # a scalar's known bits; a pointer's variable offset
    off: int = 0  # a pointer's fixed offset
    map: Any = None  # CONST_PTR_TO_MAP, PTR_TO_MAP_VALUE: the map (None: not known here)
    frame: int = 0  # PTR_TO_STACK: whose stack
    id: int = 0  # not 0: may be NULL (copies share the id until a NULL check)
    mem_size: int = 0  # PTR_TO_RINGBUF_MEM: the bytes it points to
    ref: int = 0  # not 0: the reference it holds (ref_obj_id), released by a helper
    # PTR_TO_PACKET(_META): the kernel's id, shared by the pointers one variable offset made
    # (0: the context's pointer and what constants moved), and ``range``, the bytes from that
    # base (off 0) a comparison with the packet's end proved there (or AT/BEYOND_PKT_END)
    pkt_id: int = 0
    range: int = 0
    iter: IterState | None = None  # the first slot of an iterator on the stack: its state
    # A scalar's id (the kernel keeps it in ``id`` too): not 0, the registers and spilled
    # slots that hold copies of one value (a mov or a spill made them), whose bounds a
    # conditional jump refines together (sync_linked_regs). ``add_const`` (BPF_ADD_CONST32 /
    # 64: 32 or 64, else 0): this copy is the value plus ``delta``, by an ALU of that width.
    scalar_id: int = 0
    add_const: int = 0
    delta: int = 0
    # A scalar's value ranges, or a pointer's variable offset's (verifier_bounds.Bounds):
    # None where they are the ones ``var`` implies (a constant, a value known by its bits)
    rng: vb.Bounds | None = None
    # A pointer whose variable offset a loop's widening made unknown (_widen_reg): the
    # kernel walks such a loop round by round; its accesses are not checked against ranges
    wide: bool = False

    @property
    def is_pointer(self) -> bool:
        return self.type not in (SCALAR, NOT_INIT)

    @property
    def is_const(self) -> bool:
        return self.type == SCALAR and self.var.is_const

    def type_str(self) -> str:
        """reg_type_str: what the kernel's messages call this register's type."""
        if self.id and self.type == "sock_common":
            return PTR_TO_SOCK_COMMON_OR_NULL
        return self.type + ("_or_null" if self.id else "")


UNINIT = Reg()
UNKNOWN = Reg(SCALAR)


def scalar(value: int) -> Reg:
    return Reg(SCALAR, tnum.const(value))


# Stack slot types, by byte (kernel's STACK_INVALID / SPILL / MISC / ZERO / ITER); index i of a
# slot's 8 is slot_type[i], the byte at -(8 * spi + i + 1) from the frame pointer. An
# iterator's slots (STACK_ITER) are neither read as data nor compared as such; a write over
# them makes them data and leaves the iterator broken (its reference still held).
STACK_INVALID, STACK_SPILL, STACK_MISC, STACK_ZERO, STACK_ITER = "?", "s", "m", "z", "i"


class Slot(NamedTuple):
    types: str = STACK_INVALID * BPF_REG_SIZE
    spilled: Reg = UNINIT


EMPTY_SLOT = Slot()


class Frame:
    """struct bpf_func_state: registers, stack slots and where the call returns to;
    ``callback_depth``: the calls of a bpf_loop callback this frame's path has walked (not
    compared by pruning)."""

    __slots__ = ("regs", "stack", "callsite", "frameno", "callback_depth")

    def __init__(self, regs: list[Reg], stack: dict[int, Slot], callsite: int,
                 frameno: int, callback_depth: int = 0) -> None:
        self.regs = regs
        self.stack = stack
        self.callsite = callsite
        self.frameno = frameno
        self.callback_depth = callback_depth

    def copy(self) -> Frame:
        return Frame(list(self.regs), dict(self.stack), self.callsite, self.frameno,
                     self.callback_depth)

    def key(self, scalar_ids: dict[int, int] | None = None, live: int = -1) -> tuple:
        """Registers, stack slots and call site; scalar ids renumbered in order of first
        appearance (``scalar_ids``: the numbering, shared by a state's frames), so states that
        differ only in which ids were drawn compare equal, as check_ids would find them.
        ``live``: the registers that count (the others are left out, as uninitialised)."""
        canon = scalar_ids if scalar_ids is not None else {}
        regs = tuple(_canon_scalar_id(reg, canon) if live >> regno & 1 else UNINIT
                     for regno, reg in enumerate(self.regs))
        stack = tuple((spi, slot._replace(spilled=_canon_scalar_id(slot.spilled, canon))
                       if slot.spilled.scalar_id else slot)
                      for spi, slot in sorted(self.stack.items()))
        return regs, stack, self.callsite


class State:
    """struct bpf_verifier_state: the frames of the calls in progress, innermost last, and
    the references the program holds (acquired sockets not yet found NULL);
    ``callback_unroll``: the callback calls walked on this path (callback_unroll_depth: a
    state seen in an earlier call of a callback is no endless loop)."""

    __slots__ = ("frames", "refs", "callback_unroll", "active_lock")

    def __init__(self, frames: list[Frame], refs: set[int] | None = None,
                 callback_unroll: int = 0, active_lock: Any = None) -> None:
        self.frames = frames
        self.refs = refs if refs is not None else set()
        self.callback_unroll = callback_unroll
        self.active_lock = active_lock  # the map whose bpf_spin_lock is held (None: none)

    @property
    def cur(self) -> Frame:
        return self.frames[-1]

    def copy(self) -> State:
        return State([f.copy() for f in self.frames], set(self.refs), self.callback_unroll,
                     self.active_lock)

    def key(self, live: int = -1) -> tuple:
        """The frames', then what the program holds: references and the lock (pruning needs
        the same held). ``live``: the innermost frame's registers that count."""
        held = tuple(sorted(self.refs))
        if self.active_lock is not None:
            held += (("spin_lock", id(self.active_lock)),)
        scalar_ids: dict[int, int] = {}
        inner = len(self.frames) - 1
        return tuple(f.key(scalar_ids, live if depth == inner else -1)
                     for depth, f in enumerate(self.frames)) + (held,)


def _canon_scalar_id(reg: Reg, canon: dict[int, int]) -> Reg:
    if not reg.scalar_id:
        return reg
    return reg._replace(scalar_id=canon.setdefault(reg.scalar_id, len(canon) + 1))


def _covers(old: tuple, cur: tuple, live: int) -> bool:
    """is_state_visited's states_equal: every path from ``cur`` is one from ``old`` (which
    was explored, or is being), so ``cur`` needs no walk of its own. ``live``: registers of
    the innermost frame that may still be read."""
    if len(old) != len(cur) or len(old[-1]) != len(cur[-1]):
        return False  # other calls in progress, or other references held
    ids: dict[int, int] = {}
    frames = len(old) - 1
    for depth, ((old_regs, old_stack, old_call), (regs, stack, call)) in enumerate(
            zip(old[:frames], cur[:frames], strict=True)):
        if old_call != call:
            return False
        inner = depth == frames - 1
        for regno, (a, b) in enumerate(zip(old_regs, regs, strict=True)):
            if inner and not live >> regno & 1:
                continue
            if not _reg_covers(a, b, ids):
                return False
        cur_slots = dict(stack)
        for spi, slot in old_stack:
            if all(t in (STACK_INVALID, STACK_MISC) for t in slot.types):
                continue  # the old walk read nothing from here it could rely on
            other = cur_slots.get(spi, EMPTY_SLOT)
            if slot.types != other.types or not _reg_covers(slot.spilled, other.spilled, ids):
                return False
    return all(ids.get(ref, ref) in cur[-1] for ref in old[-1])


def _reg_covers(old: Reg, cur: Reg, ids: dict[int, int]) -> bool:
    """regsafe: ``old`` allows every value ``cur`` may have (maybe-NULL ids map one to one)."""
    if old.type == NOT_INIT:
        return True  # old never read it (a read would have failed), nor will cur's paths
    if old.type != cur.type:
        return False
    if old.type == SCALAR:
        # linked copies: old's links (and offsets) must hold in cur, which may have more
        if old.scalar_id and old.add_const != cur.add_const \
                or old.add_const and old.delta != cur.delta:
            return False
        return _var_covers(old, cur) \
            and _check_scalar_ids(old.scalar_id, cur.scalar_id, ids)
    if old.type in _PKT_TYPES:
        # what old could read cur can (at least its range, from the same offset), and the
        # pointers that share a base in old share one in cur
        return old.range <= cur.range and old.off == cur.off and _var_covers(old, cur) \
            and _check_ids(old.pkt_id, cur.pkt_id, ids)
    if (old.off, old.map, old.frame) != (cur.off, cur.map, cur.frame) \
            or not _var_covers(old, cur):
        return False
    if bool(old.id) != bool(cur.id) or bool(old.ref) != bool(cur.ref) \
            or old.mem_size != cur.mem_size:
        return False
    if old.ref and ids.setdefault(old.ref, cur.ref) != cur.ref:
        return False
    if old.iter is not None and (cur.iter is None or old.iter[:2] != cur.iter[:2]):
        return False  # stacksafe's STACK_ITER: the same iterator in the same state, any depth
    return not old.id or ids.setdefault(old.id, cur.id) == cur.id


def _var_covers(old: Reg, cur: Reg) -> bool:
    """range_within and tnum_in: every value cur may have, old may have. Bounds synced with
    the known bits lie within the ones those bits imply, which are monotonic in them: old
    with no bounds of its own needs only the bits compared."""
    if not old.var.contains(cur.var):
        return False
    return old.rng is None or vb.range_within(old.rng, vb.bounds(cur))


def _check_scalar_ids(old_id: int, cur_id: int, ids: dict) -> bool:
    """check_scalar_ids: an old scalar id always seen with the same current one; a current
    scalar without one stands for an id of its own (linked to nothing)."""
    if not old_id:
        return True
    return ids.setdefault(old_id, cur_id or object()) == cur_id


def _check_ids(old_id: int, cur_id: int, ids: dict[int, int]) -> bool:
    """check_ids: both 0, or an old id always seen with the same current one."""
    if bool(old_id) != bool(cur_id):
        return False
    return not old_id or ids.setdefault(old_id, cur_id) == cur_id



SRC_OP, DST_OP, DST_OP_NO_MARK = 0, 1, 2


class _Checkpoint(NamedTuple):
    """A state a path kept at a prune point (is_state_visited's new_sl), as the path's later
    visits of that point see it: an ancestor of theirs."""

    key: tuple
    widened: bool
    callback_unroll: int


class _Visit(NamedTuple):
    """A path's visits of a prune point: its state at the latest, how many, and the
    checkpoints it kept there, newest first (the last STATES_PER_INSN: an older one is out of
    the explored states, and LOOP_PERIOD is no longer)."""

    state: State
    count: int
    checkpoints: tuple[_Checkpoint, ...]


def _check_endless_loop(pc: int, key: tuple, checkpoints: tuple[_Checkpoint, ...],
                        callback_unroll: int = 0) -> None:
    """is_state_visited: this path is back at ``pc`` in a state it kept there in one of its
    last LOOP_PERIOD checkpoints (not widened) of the same call of a callback, so it would
    go round forever."""
    for checkpoint in checkpoints[:LOOP_PERIOD]:
        if not checkpoint.widened and checkpoint.key == key \
                and checkpoint.callback_unroll == callback_unroll:
            raise _reject(errno.EINVAL, f"infinite loop detected at insn {pc}")


def _widen(state: State, before: State) -> None:
    """widen_imprecise_scalars: a scalar (or a pointer's offset) that differs from the
    previous round becomes unknown."""
    for frame, old in zip(state.frames, before.frames, strict=False):
        for regno, (reg, was) in enumerate(zip(frame.regs, old.regs, strict=True)):
            frame.regs[regno] = _widen_reg(reg, was)
        for spi, slot in frame.stack.items():
            was = old.stack.get(spi, EMPTY_SLOT).spilled
            frame.stack[spi] = slot._replace(spilled=_widen_reg(slot.spilled, was))


def _widen_reg(reg: Reg, was: Reg) -> Reg:
    if reg == was or reg.type != was.type or reg.type == NOT_INIT or reg.iter is not None:
        return reg  # an iterator's depth is not a value
    if reg.type == SCALAR:
        # regs_exact with an idmap: a value only linked anew is the same value
        return reg if reg.var == was.var and reg.rng == was.rng else UNKNOWN
    if reg.map is not was.map or reg.frame != was.frame:
        return reg
    # the change is in the unknown part
    return reg._replace(off=was.off, var=tnum.UNKNOWN, rng=None, wide=True)




def _jump_target(pc: int, insn: Instruction) -> int:
    if insn.opcode == GOTOL:
        return pc + insn.imm + 1
    return pc + insn.off + 1



def _s64(value: int) -> int:
    value &= M64
    return value - (1 << 64) if value >> 63 else value


def _tnum_str(var: Tnum) -> str:
    return str(_s64(var.value)) if var.is_const else f"(0x{var.value:x}; 0x{var.mask:x})"


def _ptr_at(ptr: Reg, off: int) -> Reg:
    if not -BPF_MAX_VAR_OFF < off < BPF_MAX_VAR_OFF:
        raise _reject(errno.EINVAL, f"{ptr.type_str()} pointer offset {off} is not allowed")
    return ptr._replace(off=off)




def update_each_reg(state: State, update: Callable[[Reg], Reg]) -> None:
    """bpf_for_each_reg_in_vstate: every register and spilled register of every frame
    becomes what ``update`` makes of it (the lists are changed in place: callers hold
    them)."""
    for frame in state.frames:
        for regno, reg in enumerate(frame.regs):
            frame.regs[regno] = update(reg)
        for spi, slot in frame.stack.items():
            spilled = update(slot.spilled)
            if spilled is not slot.spilled:
                frame.stack[spi] = slot._replace(spilled=spilled)


def _reg_width(reg: Reg) -> int:
    """get_reg_width: the bits the scalar's largest value needs."""
    return vb.bounds(reg).umax.bit_length()


def assign_scalar_id_before_mov(reg: Reg, new_id: Callable[[], int]) -> Reg:
    """assign_scalar_id_before_mov: a scalar about to be copied (a mov, a spill) gets an id
    its copy shares, unless it is a constant; one that went through ``rX += K`` loses that
    link first (a copy of a copy plus an offset is not tracked)."""
    if reg.type != SCALAR:
        return reg
    if reg.add_const:
        reg = reg._replace(scalar_id=0, add_const=0, delta=0)
    if not reg.scalar_id and not reg.var.is_const:
        reg = reg._replace(scalar_id=new_id())
    return reg


def sync_linked_regs(state: State, known: Reg) -> None:
    """sync_linked_regs: after a jump refined ``known``, every register and spilled slot
    linked to it (the same scalar id) knows the same, shifted by the difference of their
    offsets; links made by ALUs of different widths are left alone (the delta does not
    hold across them), and one made by a 32-bit ALU is zero-extended."""
    def linked(reg: Reg) -> Reg:
        if reg.type != SCALAR or reg.scalar_id != known.scalar_id:
            return reg
        if reg.add_const and known.add_const and reg.add_const != known.add_const:
            return reg
        if not reg.add_const and not known.add_const or reg.delta == known.delta:
            return known
        # reg = known; reg += delta (scalar_min_max_add and tnum_add, zero-extended where
        # either link is 32-bit)
        r, fake = vb.of(known), vb.of(scalar(reg.delta - known.delta))
        vb.add_reg(r, fake, 32 in (reg.add_const, known.add_const))
        return vb.to_reg(known, r)._replace(add_const=reg.add_const, delta=reg.delta)

    for frame in state.frames:
        for regno, reg in enumerate(frame.regs):
            frame.regs[regno] = linked(reg)
        for spi, slot in frame.stack.items():
            if slot.types[BPF_REG_SIZE - 1] == STACK_SPILL:
                spilled = linked(slot.spilled)
                if spilled is not slot.spilled:
                    frame.stack[spi] = slot._replace(spilled=spilled)


def release_reference(state: State, ref: int) -> None:
    """release_reference: the reference is gone, and every copy of the pointer that held it
    is an unknown scalar (mark_reg_invalid, as for a loader that may leak pointers)."""
    state.refs.discard(ref)
    update_each_reg(state, lambda reg: UNKNOWN if reg.ref == ref else reg)


def _mark_ptr_or_null_regs(state: State, ptr_id: int, is_null: bool) -> None:
    """After a NULL check, every copy of the pointer is the scalar 0 (and a reference it
    held is gone), or not NULL."""
    if is_null:
        state.refs.discard(ptr_id)

    def checked(reg: Reg) -> Reg:
        if reg.id != ptr_id:
            return reg
        return scalar(0) if is_null else reg._replace(id=0)

    update_each_reg(state, checked)


def clear_all_pkt_pointers(state: State) -> None:
    """clear_all_pkt_pointers: after a helper that changes packet data, no packet pointer
    (data, data_meta, data_end, nor a copy) is one any more: each is an unknown scalar
    (mark_reg_invalid, as for a loader that may leak pointers)."""
    update_each_reg(state, lambda reg: UNKNOWN if reg.type in _PKT_ANY_TYPES else reg)



def _spill(old: Slot, value: Reg, size: int) -> Slot:
    """save_register_state: the top ``size`` bytes of the slot hold the spilled register;
    the bytes below keep what they were, but for spilled bytes, which become data."""
    types = list(old.types)
    for i in range(BPF_REG_SIZE - size, BPF_REG_SIZE):
        types[i] = STACK_SPILL
    for i in range(BPF_REG_SIZE - size):
        if types[i] not in (STACK_ZERO, STACK_INVALID):
            types[i] = STACK_MISC
    return Slot("".join(types), value)


def _stack_read(frame: Frame, off: int, size: int) -> Reg:
    """check_stack_read_fixed_off: a full spill comes back as it went in; a narrow read of a
    spilled scalar at its start, the scalar; zeros read as 0; an iterator's bytes are
    refused; anything else is unknown."""
    slot = -off - 1
    spi = slot // BPF_REG_SIZE
    old = frame.stack.get(spi, EMPTY_SLOT)
    types = old.types
    read = [types[(slot - i) % BPF_REG_SIZE] for i in range(size)]
    if STACK_ITER in read:
        raise _reject(errno.EACCES, f"invalid read from stack off {off}+"
                      f"{read.index(STACK_ITER)} size {size}")
    if types[BPF_REG_SIZE - 1] != STACK_SPILL:
        return scalar(0) if all(t == STACK_ZERO for t in read) else UNKNOWN
    spill_size = len(types) - len(types.rstrip(STACK_SPILL))
    if size == BPF_REG_SIZE and spill_size == BPF_REG_SIZE:
        return old.spilled
    if old.spilled.type != SCALAR:
        raise _reject(errno.EACCES, "invalid size of register fill")
    if size <= spill_size and off % BPF_REG_SIZE == 0:
        return old.spilled
    if all(t == STACK_SPILL for t in read) and old.spilled.var == tnum.const(0) \
            or all(t == STACK_ZERO for t in read):
        return scalar(0)
    return UNKNOWN
