"""The verifier's helper-call checks (kernel/bpf/verifier.c: check_helper_call,
check_func_arg, check_helper_mem_access, check_map_func_compatibility) and their tables, and
its kfunc-call checks (add_kfunc_call, check_kfunc_call, check_kfunc_args) against the
emulated kernel's kfuncs (``kfuncs.KFUNCS``, by BTF id: ``btf.vmlinux_kfuncs``), as a part of
``verifier._Verifier``."""

from __future__ import annotations

import errno
from typing import Any

from ...asm.opcodes import Class, Instruction, JmpOp
from ...uapi import (
    BPF_F_INNER_MAP,
    BPF_PSEUDO_KFUNC_CALL,
    ENOTSUPP,
    MAX_BPF_STACK,
    BpfFunc,
    MapType,
    ProgType,
    map_traits,
)
from . import tnum
from . import verifier_bounds as vb
from .bpf_iter import CALLBACK_HELPERS
from .btf import vmlinux_kfuncs
from .filter import (
    PTR_TO_PACKET,
    PTR_TO_PACKET_META,
    PTR_TO_SOCKET,
)
from .helpers import (
    ARG_ANYTHING,
    ARG_CONST_ALLOC_SIZE_OR_ZERO,
    ARG_CONST_MAP_PTR,
    ARG_CONST_SIZE,
    ARG_CONST_SIZE_OR_ZERO,
    ARG_PTR_TO_CTX,
    ARG_PTR_TO_DYNPTR,
    ARG_PTR_TO_FUNC,
    ARG_PTR_TO_MAP_KEY,
    ARG_PTR_TO_MAP_VALUE,
    ARG_PTR_TO_MEM,
    ARG_PTR_TO_MEM_OR_NULL,
    ARG_PTR_TO_RINGBUF_MEM,
    ARG_PTR_TO_SPIN_LOCK,
    ARG_PTR_TO_STACK_OR_NULL,
    ARG_PTR_TO_TIMER,
    ARG_PTR_TO_UNINIT_MAP_VALUE,
    ARG_PTR_TO_UNINIT_MEM,
    HELPERS,
)
from .kfuncs import (
    KF_ARG_PTR_TO_ITER,
    KF_ARG_SCALAR,
    KF_ITER_DESTROY,
    KF_ITER_NEW,
    KF_ITER_NEXT,
    KF_RET_INT,
    KF_RET_INT_PTR,
    KF_RET_NULL,
    KfuncProto,
)
from .semantics import MAX_CALL_FRAMES
from .verifier_mem import (
    MEM_INVALID,
    MemoryChecks,
    check_map_access,
    check_mem_region_access,
    check_packet_access,
    check_stack_range_initialized,
)
from .verifier_state import (
    _PKT_TYPES,
    BPF_F_RDONLY_PROG,
    BPF_ITER_STATE_ACTIVE,
    BPF_ITER_STATE_DRAINED,
    BPF_MAX_VAR_SIZ,
    BPF_REG_SIZE,
    CALLER_SAVED,
    CONST_PTR_TO_DYNPTR,
    CONST_PTR_TO_MAP,
    ELIDE_NULL_MAP_TYPES,
    EMPTY_SLOT,
    FP,
    MAX_BPF_REG,
    PTR_TO_CTX,
    PTR_TO_FUNC,
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
    IterState,
    Reg,
    Slot,
    State,
    _reject,
    _s64,
    _tnum_str,
    clear_all_pkt_pointers,
    release_reference,
    scalar,
)

_ARG_SOCK_COMMON = "sock_common"  # a sockmap's value argument (ARG_PTR_TO_BTF_ID_SOCK_COMMON)
_MEM_TYPES = (PTR_TO_STACK, PTR_TO_PACKET, PTR_TO_PACKET_META, PTR_TO_MAP_KEY, PTR_TO_MAP_VALUE,
              PTR_TO_MEM, PTR_TO_RINGBUF_MEM, "buf", "trusted_ptr_")
# compatible_reg_types: the register types each argument type takes (the kernel's list, in
# its order, names the message prints; types this verifier never gives are names only)
_ARG_TYPES = {
    ARG_CONST_MAP_PTR: (CONST_PTR_TO_MAP,), ARG_PTR_TO_CTX: (PTR_TO_CTX,),
    ARG_PTR_TO_MAP_KEY: _MEM_TYPES, ARG_PTR_TO_MAP_VALUE: _MEM_TYPES,
    ARG_PTR_TO_UNINIT_MAP_VALUE: _MEM_TYPES, ARG_PTR_TO_MEM: _MEM_TYPES,
    ARG_PTR_TO_MEM_OR_NULL: _MEM_TYPES,
    ARG_PTR_TO_UNINIT_MEM: _MEM_TYPES, ARG_CONST_SIZE: (SCALAR,),
    ARG_CONST_SIZE_OR_ZERO: (SCALAR,), ARG_PTR_TO_FUNC: (PTR_TO_FUNC,),
    ARG_PTR_TO_STACK_OR_NULL: (PTR_TO_STACK,), ARG_PTR_TO_SPIN_LOCK: (PTR_TO_MAP_VALUE, "ptr_"),
    ARG_PTR_TO_TIMER: (PTR_TO_MAP_VALUE,),
    ARG_CONST_ALLOC_SIZE_OR_ZERO: (SCALAR,), ARG_PTR_TO_RINGBUF_MEM: (PTR_TO_RINGBUF_MEM,),
    ARG_PTR_TO_DYNPTR: (PTR_TO_STACK, CONST_PTR_TO_DYNPTR),
    _ARG_SOCK_COMMON: ("sock_common", PTR_TO_SOCKET, "tcp_sock", "xdp_sock", "ptr_",
                       "trusted_ptr_"),
}
# check_map_func_compatibility: the helpers (of those emulated) a map type may be passed to,
# where it is restricted, and the map types a helper takes, where it is
_MAP_FUNCS = {
    MapType.PROG_ARRAY: {BpfFunc.tail_call}, MapType.PERF_EVENT_ARRAY: {BpfFunc.perf_event_output},
    MapType.RINGBUF: {BpfFunc.ringbuf_output, BpfFunc.ringbuf_reserve, BpfFunc.ringbuf_query},
    MapType.USER_RINGBUF: {BpfFunc.user_ringbuf_drain},
    MapType.CPUMAP: {BpfFunc.redirect_map},
    MapType.DEVMAP: {BpfFunc.redirect_map, BpfFunc.map_lookup_elem},
    MapType.DEVMAP_HASH: {BpfFunc.redirect_map, BpfFunc.map_lookup_elem},
    MapType.XSKMAP: {BpfFunc.redirect_map, BpfFunc.map_lookup_elem},
    MapType.QUEUE: {BpfFunc.map_push_elem, BpfFunc.map_pop_elem, BpfFunc.map_peek_elem},
    MapType.STACK: {BpfFunc.map_push_elem, BpfFunc.map_pop_elem, BpfFunc.map_peek_elem},
    MapType.BLOOM_FILTER: {BpfFunc.map_push_elem, BpfFunc.map_peek_elem},
    MapType.SOCKMAP: {BpfFunc.sk_redirect_map, BpfFunc.msg_redirect_map,
                      BpfFunc.map_delete_elem, BpfFunc.map_lookup_elem,
                      BpfFunc.map_update_elem},
    MapType.SOCKHASH: {BpfFunc.sk_redirect_hash, BpfFunc.msg_redirect_hash,
                       BpfFunc.map_delete_elem, BpfFunc.map_lookup_elem,
                       BpfFunc.map_update_elem},
    MapType.ARRAY_OF_MAPS: {BpfFunc.map_lookup_elem},
    MapType.HASH_OF_MAPS: {BpfFunc.map_lookup_elem},
}
_FUNC_MAPS = {
    BpfFunc.redirect_map: {MapType.DEVMAP, MapType.DEVMAP_HASH, MapType.CPUMAP, MapType.XSKMAP},
    BpfFunc.sk_redirect_map: {MapType.SOCKMAP}, BpfFunc.sk_redirect_hash: {MapType.SOCKHASH},
    BpfFunc.msg_redirect_map: {MapType.SOCKMAP}, BpfFunc.msg_redirect_hash: {MapType.SOCKHASH},
    BpfFunc.map_lookup_percpu_elem: {MapType.PERCPU_HASH, MapType.PERCPU_ARRAY,
                                     MapType.LRU_PERCPU_HASH},
    BpfFunc.map_pop_elem: {MapType.QUEUE, MapType.STACK},
    BpfFunc.map_peek_elem: {MapType.QUEUE, MapType.STACK, MapType.BLOOM_FILTER},
    BpfFunc.map_push_elem: {MapType.QUEUE, MapType.STACK, MapType.BLOOM_FILTER},
    BpfFunc.ringbuf_output: {MapType.RINGBUF}, BpfFunc.ringbuf_reserve: {MapType.RINGBUF},
    BpfFunc.ringbuf_query: {MapType.RINGBUF},
    BpfFunc.user_ringbuf_drain: {MapType.USER_RINGBUF},
    BpfFunc.perf_event_output: {MapType.PERF_EVENT_ARRAY},
}


# may_update_sockmap: the program types (of those emulated) that may update or delete a
# sockmap/sockhash element, since none of them runs holding a socket's lock
_SOCKMAP_UPDATERS = frozenset({ProgType.SOCKET_FILTER, ProgType.SCHED_CLS, ProgType.SCHED_ACT,
                               ProgType.XDP})


def resolve_map_arg_type(func_id: int, bpf_map: Any, arg: str) -> str:
    """resolve_map_arg_type: a map value argument as the map's type takes it. A sockmap's
    value is a socket (and no helper may write one); a bloom filter's peek reads the value it
    tests, where a queue's or stack's peek writes the one it returns."""
    if bpf_map is None:
        return arg
    if map_traits(bpf_map.map_type).sockets:
        if arg == ARG_PTR_TO_UNINIT_MAP_VALUE:
            raise _reject(errno.EINVAL, "invalid arg_type for sockmap/sockhash")
        return _ARG_SOCK_COMMON
    if bpf_map.map_type == MapType.BLOOM_FILTER and func_id == BpfFunc.map_peek_elem:
        return ARG_PTR_TO_MAP_VALUE
    return arg

def can_elide_value_nullness(bpf_map: Any) -> bool:
    """can_elide_value_nullness: an array's lookup with a constant in-range key cannot fail,
    unless the array is (or is the template of) inner arrays of any size (BPF_F_INNER_MAP)."""
    return not bpf_map.map_flags & BPF_F_INNER_MAP and bpf_map.map_type in ELIDE_NULL_MAP_TYPES

def _check_map_func_compatibility(bpf_map: Any, func_id: int, name: str,
                                  prog_type: int) -> None:
    funcs = _MAP_FUNCS.get(bpf_map.map_type)
    maps = _FUNC_MAPS.get(func_id)
    refused = funcs is not None and func_id not in funcs \
        or maps is not None and bpf_map.map_type not in maps
    why = ""
    if not refused and map_traits(bpf_map.map_type).sockets \
            and func_id in (BpfFunc.map_update_elem, BpfFunc.map_delete_elem) \
            and prog_type not in _SOCKMAP_UPDATERS:
        refused, why = True, "cannot update sockmap in this context\n"
    if refused:
        raise _reject(errno.EINVAL, f"{why}cannot pass map_type {bpf_map.map_type} into func "
                      f"{name}#{func_id}")


def is_callback_calling(insn: Instruction) -> bool:
    """A call of a helper that calls back into the program (the kernel's calls_callback)."""
    return insn.opcode == Class.JMP | JmpOp.CALL and insn.src == 0 \
        and insn.imm in CALLBACK_HELPERS


def is_iter_next_call(insn: Instruction) -> bool:
    """A call of an iterator's next kfunc (is_iter_next_insn)."""
    if insn.opcode != Class.JMP | JmpOp.CALL or insn.src != BPF_PSEUDO_KFUNC_CALL:
        return False
    proto = vmlinux_kfuncs().get(insn.imm)
    return proto is not None and bool(proto.flags & KF_ITER_NEXT)


_VOID_HELPERS = frozenset({BpfFunc.tail_call, BpfFunc.spin_lock, BpfFunc.spin_unlock,
                           BpfFunc.ringbuf_submit, BpfFunc.ringbuf_discard})
_RELEASE_HELPERS = frozenset({BpfFunc.ringbuf_submit, BpfFunc.ringbuf_discard})
_MAP_WRITING_HELPERS = frozenset({BpfFunc.map_update_elem, BpfFunc.map_delete_elem,
                                  BpfFunc.map_push_elem, BpfFunc.map_pop_elem})
_VALUE_RETURNING_HELPERS = frozenset({BpfFunc.map_lookup_elem,
                                      BpfFunc.map_lookup_percpu_elem})
# do_refine_retval_range: helpers returning how many bytes they wrote (at most their size
# argument) or a negative errno (the kernel's list; not all of them are emulated)
_LENGTH_RETURNING_HELPERS = frozenset({
    BpfFunc.get_stack, BpfFunc.get_task_stack, BpfFunc.probe_read_str,
    BpfFunc.probe_read_kernel_str, BpfFunc.probe_read_user_str})
MAX_ERRNO = 4095
# bpf_helper_changes_pkt_data (net/core/filter.c): the packet may move or change length, so
# every packet pointer is invalid after a call (the kernel's whole list: most of these
# helpers are not emulated, and a call of one is refused before this matters)
_PKT_DATA_CHANGING_HELPERS = frozenset({
    BpfFunc.clone_redirect, BpfFunc.l3_csum_replace, BpfFunc.l4_csum_replace,
    BpfFunc.lwt_push_encap, BpfFunc.lwt_seg6_action, BpfFunc.lwt_seg6_adjust_srh,
    BpfFunc.lwt_seg6_store_bytes, BpfFunc.msg_pop_data, BpfFunc.msg_pull_data,
    BpfFunc.msg_push_data, BpfFunc.skb_adjust_room, BpfFunc.skb_change_head,
    BpfFunc.skb_change_proto, BpfFunc.skb_change_tail, BpfFunc.skb_pull_data,
    BpfFunc.skb_store_bytes, BpfFunc.skb_vlan_pop, BpfFunc.skb_vlan_push,
    BpfFunc.store_hdr_opt, BpfFunc.xdp_adjust_head, BpfFunc.xdp_adjust_meta,
    BpfFunc.xdp_adjust_tail})




def _constant_map_key(state: State, key: Reg, key_size: int) -> int | None:
    """get_constant_map_key: the key's value when the stack holds it as zeros or as a
    spilled constant of exactly the key's size."""
    if key.type != PTR_TO_STACK or not key.var.is_const:
        return None
    off = key.off + _s64(key.var.value)
    slot = -off - 1
    if not 0 <= slot < MAX_BPF_STACK:
        return None
    stored = state.frames[key.frame].stack.get(slot // BPF_REG_SIZE, EMPTY_SLOT)
    below = stored.types[:slot % BPF_REG_SIZE + 1][::-1]  # from the key's first byte down
    if len(below) - len(below.lstrip(STACK_ZERO)) >= key_size:
        return 0
    if stored.types[BPF_REG_SIZE - 1] != STACK_SPILL or stored.spilled.type != SCALAR:
        return None
    if len(below) - len(below.lstrip(STACK_SPILL)) != key_size \
            or not stored.spilled.var.is_const:
        return None
    return stored.spilled.var.value




def iter_get_spi(reg: Reg, refused: str) -> int | None:
    """stack_slot_obj_get_spi for an iterator of one slot: the slot a stack pointer names
    (None: not one of the stack's, which a write there then refuses); the log says
    ``refused`` after why a pointer that cannot be one is not."""
    if not reg.var.is_const:
        raise _reject(errno.EINVAL, f"iter has to be at a constant offset\n{refused}")
    off = reg.off + _s64(reg.var.value)
    if off % BPF_REG_SIZE:
        raise _reject(errno.EINVAL, f"cannot pass in iter at an offset={off}\n{refused}")
    spi = (-off - 1) // BPF_REG_SIZE
    return spi if 0 <= spi < MAX_BPF_STACK // BPF_REG_SIZE else None


def next_arg_iter_state(state: State) -> str | None:
    """Before an iterator's next call, the state (ACTIVE, DRAINED) of the iterator R1 points
    at, as is_state_visited reads it there (None: R1 points at none; the call refuses it)."""
    reg = state.cur.regs[1]
    if reg.type != PTR_TO_STACK or not reg.var.is_const:
        return None
    off = reg.off + _s64(reg.var.value)
    slot = state.frames[reg.frame].stack.get((-off - 1) // BPF_REG_SIZE)
    it = slot.spilled.iter if slot is not None else None
    return it.state if it is not None else None


class HelperCallChecks:
    """check_helper_call and its argument checks, for ``_Verifier``."""

    # -- calls and exits ---------------------------------------------------------------------
    def check_helper_call(self, pc: int, insn: Instruction, state: State) -> list:
        """The call's checks and effect on ``state``; returns the (pc, state) pairs to walk
        later: a callback's first insn in a frame of its own (push_callback_call)."""
        func_id = insn.imm
        if func_id not in BpfFunc._value2member_map_ or func_id == 0:
            raise _reject(errno.EINVAL, f"invalid func unknown#{func_id}")
        proto = HELPERS.get(func_id)
        name = f"bpf_{BpfFunc(func_id).name}"
        if proto is None:
            raise _reject(errno.EINVAL, f"program of this type cannot use helper {name}#{func_id}"
                          " (the emulated backend does not implement it)")
        if proto.prog_types is not None and self.prog_type not in proto.prog_types:
            raise _reject(errno.EINVAL, f"program of this type cannot use helper {name}#{func_id}")
        if proto.gpl_only and not self.gpl:
            raise _reject(errno.EINVAL, "cannot call GPL-restricted function from non-GPL "
                          "compatible program")
        regs = state.cur.regs
        bpf_map = None  # meta->map_ptr: the map argument, once seen (None: not known here)
        for regno in range(1, len(proto.args) + 1):
            bpf_map = self.check_func_arg(state, func_id, proto.args, regno, bpf_map)
        if bpf_map is not None and func_id in _MAP_WRITING_HELPERS \
                and bpf_map.map_flags & BPF_F_RDONLY_PROG:
            raise _reject(errno.EACCES, "write into map forbidden")
        pushed = []  # the callback comes before the map's compatibility, as in the kernel
        if func_id == BpfFunc.timer_set_callback:
            pushed.append(self.push_async_cb(pc, regs, bpf_map))
        if func_id == BpfFunc.loop:
            self.update_loop_inline_state(pc, regs[4], regs[2])
        if func_id in CALLBACK_HELPERS:
            nr_loops = regs[1]
            # bpf_loop's callback is walked as many times as a known nr_loops says, at most
            if func_id != BpfFunc.loop or not nr_loops.is_const \
                    or state.cur.callback_depth < nr_loops.var.value:
                pushed.append(self.push_callback_call(pc, func_id, state, bpf_map))
            state.cur.callback_depth = 0
        if bpf_map is not None:
            _check_map_func_compatibility(bpf_map, func_id, name, self.prog_type)
        if func_id in _VALUE_RETURNING_HELPERS:
            result = self.map_lookup_result(pc, state, bpf_map, regs[2], func_id)
        elif func_id in _VOID_HELPERS:
            result = UNINIT  # RET_VOID: R0 is not readable after (a failed tail call)
        elif func_id == BpfFunc.ringbuf_reserve:  # RET_PTR_TO_RINGBUF_MEM_OR_NULL, acquired
            ref = self.acquire_reference(state, pc)
            result = Reg(PTR_TO_RINGBUF_MEM, tnum.const(0), id=ref, ref=ref,
                         mem_size=regs[2].var.value)
        elif func_id == BpfFunc.dynptr_data:  # RET_PTR_TO_DYNPTR_MEM_OR_NULL
            result = Reg(PTR_TO_MEM, tnum.const(0), id=self.new_id(),
                         mem_size=regs[3].var.value)
        else:  # RET_INTEGER
            result = self.refine_retval_range(func_id, proto.args, regs)
        if func_id in _RELEASE_HELPERS:
            release_reference(state, regs[1].ref)
        self.clobber_helper_memory(state, func_id, bpf_map, regs)
        for regno in CALLER_SAVED:
            regs[regno] = UNINIT
        regs[0] = result
        if func_id in _PKT_DATA_CHANGING_HELPERS:
            clear_all_pkt_pointers(state)
        return pushed

    def refine_retval_range(self, func_id: int, args: tuple[str, ...], regs: list[Reg]) -> Reg:
        """do_refine_retval_range: R0 of a helper returning an integer, an unknown scalar but
        for the helpers whose result the kernel bounds: a length in [-MAX_ERRNO, the size
        argument's umax] (both widths' signed bounds), a CPU in [0, nr_cpu_ids - 1]."""
        if func_id in _LENGTH_RETURNING_HELPERS:
            # meta->msize_max_value: the size argument's umax, as check_mem_size_reg kept it
            size = vb.bounds(regs[1 + next(i for i, arg in enumerate(args) if arg in (
                ARG_CONST_SIZE, ARG_CONST_SIZE_OR_ZERO))]).umax
            r = vb.unknown_within(smin=-MAX_ERRNO, s32_min=-MAX_ERRNO, smax=vb.s64(size),
                                  s32_max=vb.s32(size))
        elif func_id == BpfFunc.get_smp_processor_id:
            last = self.nr_cpu_ids - 1  # the machine's possible CPUs, not the host's
            r = vb.unknown_within(smax=last, umax=last, s32_min=0, s32_max=last, smin=0,
                                  u32_max=last)
        else:
            return UNKNOWN
        return vb.to_reg(UNKNOWN, r)

    @staticmethod
    def push_async_cb(pc: int, regs: list[Reg], bpf_map: Any) -> tuple[int, State]:
        """push_async_cb_state: a timer's callback is a walk of its own, from a frame 0 whose
        callsite is the call (set_timer_callback_state: the map, key and value)."""
        callee = [UNINIT] * MAX_BPF_REG
        callee[1:4] = [Reg(CONST_PTR_TO_MAP, tnum.const(0), map=bpf_map),
                       Reg(PTR_TO_MAP_KEY, tnum.const(0), map=bpf_map),
                       Reg(PTR_TO_MAP_VALUE, tnum.const(0), map=bpf_map)]
        callee[FP] = Reg(PTR_TO_STACK, tnum.const(0), frame=0)
        return regs[2].map, State([Frame(callee, {}, pc, 0)])

    def update_loop_inline_state(self, pc: int, flags: Reg, callback: Reg) -> None:
        """update_loop_inline_state: a bpf_loop call is inlined when every walk reaches it
        with flags a known 0 and the same callback (``loop_inline``: pc -> the callback's
        first insn, or None once unfit)."""
        fit = flags.is_const and flags.var.value == 0
        if pc not in self.loop_inline:
            self.loop_inline[pc] = callback.map if fit else None
        elif not fit or self.loop_inline[pc] != callback.map:
            self.loop_inline[pc] = None

    def push_callback_call(self, pc: int, func_id: int, state: State,
                           bpf_map: Any) -> tuple[int, State]:
        """The callback's entry: a copy of ``state`` (the caller's registers as at the call,
        where the callback returns to) with the callback's frame on top, its arguments as
        the helper passes them (set_loop_callback_state, set_map_elem_callback_state,
        set_user_ringbuf_callback_state)."""
        if func_id == BpfFunc.for_each_map_elem and bpf_map is not None \
                and bpf_map.ops.map_for_each_callback is None:
            raise _reject(ENOTSUPP, "callback function not allowed for map")
        if len(state.frames) >= MAX_CALL_FRAMES:
            raise _reject(errno.E2BIG, f"the call stack of {len(state.frames) + 1} frames is "
                          "too deep")
        caller = state.cur.regs
        callback = state.copy()
        callback.callback_unroll += 1
        callback.cur.callback_depth += 1
        regs = [UNINIT] * MAX_BPF_REG
        depth = len(state.frames)
        regs[FP] = Reg(PTR_TO_STACK, tnum.const(0), frame=depth)
        if func_id == BpfFunc.loop:  # callback_fn(u64 index, void *callback_ctx)
            regs[1], regs[2] = UNKNOWN, caller[3]
        elif func_id == BpfFunc.user_ringbuf_drain:  # callback_fn(struct bpf_dynptr *, ctx)
            regs[1], regs[2] = Reg(CONST_PTR_TO_DYNPTR, tnum.const(0)), caller[3]
        else:  # callback_fn(struct bpf_map *map, void *key, void *value, void *callback_ctx)
            regs[1:5] = [caller[1], Reg(PTR_TO_MAP_KEY, tnum.const(0), map=bpf_map),
                         Reg(PTR_TO_MAP_VALUE, tnum.const(0), map=bpf_map), caller[3]]
        callback.frames.append(Frame(regs, {}, pc, depth))
        return caller[2].map, callback

    # -- kfunc calls -------------------------------------------------------------------------
    def add_kfunc_call(self, insn: Instruction) -> None:
        """add_kfunc_call (phase 1): the program may call kfuncs, the call names the
        kernel's BTF (no module BTF: no fd_array here) and a FUNC there."""
        if not self.gpl:
            raise _reject(errno.EINVAL, "cannot call kernel function from non-GPL compatible "
                          "program")
        if insn.off < 0:
            raise _reject(errno.EINVAL, "negative offset disallowed for kernel module "
                          "function call\nfailed to find BTF for kernel function")
        if insn.off > 0:
            raise _reject(errno.EPROTO, "kfunc offset > 0 without fd_array is invalid"
                          "\nfailed to find BTF for kernel function")
        if insn.imm not in vmlinux_kfuncs():  # the emulated kernel's only FUNCs are kfuncs
            raise _reject(errno.EINVAL, f"kernel btf_id {insn.imm} is not a function")

    def check_kfunc_call(self, pc: int, insn: Instruction, state: State) -> list:
        """check_kfunc_call: the program type's kfunc set holds it; each argument is what
        its BTF parameter asks (check_kfunc_args); R0 is what the kfunc returns. Returns
        the (pc, state) pairs to walk later: an iterator's next forks (process_iter_next_call)."""
        proto = vmlinux_kfuncs()[insn.imm]
        if proto.prog_types is not None and self.prog_type not in proto.prog_types:
            raise _reject(errno.EACCES, f"calling kernel function {proto.name} is not allowed")
        regs = state.cur.regs
        iterator = None
        for i, (_, kind) in enumerate(proto.params):
            regno = i + 1
            reg = regs[regno]
            if kind == KF_ARG_SCALAR:
                if reg.type != SCALAR:
                    raise _reject(errno.EINVAL, f"R{regno} is not a scalar")
                continue
            if reg.id or reg.is_const and reg.var.value == 0:  # NULL, or a pointer that may be
                raise _reject(errno.EACCES, f"Possibly NULL pointer passed to trusted arg{i}")
            if kind == KF_ARG_PTR_TO_ITER:
                iterator = self.process_iter_arg(pc, state, regno, proto)
            elif reg.type == PTR_TO_CTX:  # check_func_arg_reg_off, then the type
                self.check_ptr_off_reg(regno, reg)
            else:
                raise _reject(errno.EINVAL, f"arg#{i} expected pointer to ctx, but got "
                              f"{reg.type_str()}")
        for regno in CALLER_SAVED:
            regs[regno] = UNINIT
        if proto.ret == KF_RET_INT:
            regs[0] = UNKNOWN
        elif proto.ret == KF_RET_INT_PTR:  # PTR_TO_MEM | MEM_RDONLY of sizeof(int)
            regs[0] = Reg(PTR_TO_RDONLY_MEM, tnum.const(0), mem_size=4,
                          id=self.new_id() if proto.flags & KF_RET_NULL else 0)
        if proto.flags & KF_ITER_NEXT:
            return self.process_iter_next_call(pc, state, iterator)
        return []

    # -- open-coded iterators ----------------------------------------------------------------
    def process_iter_arg(self, pc: int, state: State, regno: int,
                         proto: KfuncProto) -> tuple[int, int]:
        """process_iter_arg: the argument points at the iterator's slot on a stack (one:
        struct bpf_iter_num is 8 bytes); new wants it free and makes it the iterator (a
        reference the program holds until destroy), any other kfunc wants it an iterator
        of this type, which destroy frees. Returns the iterator's (frame, slot)."""
        reg = state.cur.regs[regno]
        arg = regno - 1
        if reg.type != PTR_TO_STACK:
            raise _reject(errno.EINVAL, f"arg#{arg} expected pointer to an iterator on stack")
        iter_type = proto.iter_struct
        name = iter_type.removeprefix("bpf_")  # iter_type_str: "iter_num"
        frame = state.frames[reg.frame]
        if proto.flags & KF_ITER_NEW:  # is_iter_reg_valid_uninit, then a write of it
            spi = iter_get_spi(reg, f"expected uninitialized {name} as arg #{arg}")
            if spi is not None and STACK_ITER in frame.stack.get(spi, EMPTY_SLOT).types:
                raise _reject(errno.EINVAL, f"expected uninitialized {name} as arg #{arg}")
            self.check_stack_access_within_bounds(regno, reg.off + _s64(reg.var.value),
                                                  BPF_REG_SIZE, True)
            ref = self.acquire_reference(state, pc)  # mark_stack_slots_iter
            frame.stack[spi] = Slot(STACK_ITER * BPF_REG_SIZE,
                                    Reg(PTR_TO_STACK, tnum.const(0), ref=ref,
                                        iter=IterState(iter_type)))
            return reg.frame, spi
        refused = f"expected an initialized {name} as arg #{arg}"
        spi = iter_get_spi(reg, refused)
        slot = frame.stack.get(spi, EMPTY_SLOT) if spi is not None else EMPTY_SLOT
        it = slot.spilled.iter  # is_iter_reg_valid_init
        if slot.types != STACK_ITER * BPF_REG_SIZE or not slot.spilled.ref or it is None \
                or it.type != iter_type:
            raise _reject(errno.EINVAL, refused)
        if proto.flags & KF_ITER_DESTROY:  # unmark_stack_slots_iter
            del frame.stack[spi]
            release_reference(state, slot.spilled.ref)
        return reg.frame, spi

    def process_iter_next_call(self, pc: int, state: State,
                               iterator: tuple[int, int]) -> list:
        """process_iter_next_call: an ACTIVE iterator forks the walk, as the loop may go
        round again or end: this path goes on with the iterator DRAINED and R0 NULL; the
        other, pushed after the call, has R0 not NULL and the iterator ACTIVE one round
        deeper. A DRAINED one only gives NULL."""
        frameno, spi = iterator
        slot = state.frames[frameno].stack[spi]
        it = slot.spilled.iter
        pushed = []
        if it.state == BPF_ITER_STATE_ACTIVE:
            queued = state.copy()
            deeper = slot.spilled._replace(iter=it._replace(depth=it.depth + 1))
            queued.frames[frameno].stack[spi] = slot._replace(spilled=deeper)
            queued.cur.regs[0] = queued.cur.regs[0]._replace(id=0)  # mark_ptr_not_null_reg
            pushed.append((pc + 1, queued))
        drained = slot.spilled._replace(iter=it._replace(state=BPF_ITER_STATE_DRAINED))
        state.frames[frameno].stack[spi] = slot._replace(spilled=drained)
        state.cur.regs[0] = scalar(0)
        return pushed

    def check_func_arg(self, state: State, func_id: int, args: tuple[str, ...], regno: int,
                       bpf_map: Any) -> Any:
        """check_func_arg: the argument is readable and of a type ``arg`` takes; memory it
        points to (a key, a value, a sized buffer) lies where the pointer may reach. Returns
        the map argument seen so far."""
        regs = state.cur.regs
        arg = args[regno - 1]
        self.check_reg_arg(regs, regno, SRC_OP)
        if arg == ARG_ANYTHING:
            return bpf_map
        reg = regs[regno]
        if reg.type in _PKT_TYPES and not HELPERS[func_id].pkt_access:
            # may_access_direct_pkt_data with the helper's proto, before the type is checked
            raise _reject(errno.EACCES, "helper access to the packet is not allowed")
        if arg in (ARG_PTR_TO_MAP_VALUE, ARG_PTR_TO_UNINIT_MAP_VALUE):
            arg = resolve_map_arg_type(func_id, bpf_map, arg)
        expected = _ARG_TYPES[arg]
        if arg in (ARG_PTR_TO_STACK_OR_NULL, ARG_PTR_TO_MEM_OR_NULL) and reg.is_const \
                and reg.var.value == 0:
            return bpf_map  # NULL (register_is_null): no type to check
        if reg.id or reg.type not in expected:
            raise _reject(errno.EACCES, f"R{regno} type={reg.type_str()} expected="
                          + ", ".join(expected))
        if arg == ARG_PTR_TO_CTX:
            self.check_ptr_off_reg(regno, reg)
        elif arg == ARG_PTR_TO_SPIN_LOCK:
            self.process_spin_lock(state, regno, func_id == BpfFunc.spin_lock)
        elif arg == ARG_PTR_TO_TIMER:
            bpf_map = self.process_timer_func(regno, reg)
        elif arg == ARG_PTR_TO_DYNPTR:
            self.process_dynptr_func(regno, reg)
        elif arg == ARG_CONST_ALLOC_SIZE_OR_ZERO and not reg.is_const:
            raise _reject(errno.EACCES, f"R{regno} is not a known constant'")
        elif arg == ARG_PTR_TO_RINGBUF_MEM:  # released: the pointer as reserve gave it
            if reg.off:
                raise _reject(errno.EINVAL, f"R{regno} must have zero offset when passed to "
                              "release func or trusted arg to kfunc")
            self.check_ptr_off_reg(regno, reg)  # a variable offset: EACCES
        elif arg == ARG_CONST_MAP_PTR:
            if bpf_map is not None and reg.map is not bpf_map:  # the timer's map (map_uid 0)
                raise _reject(errno.EINVAL, f"timer pointer in R{regno - 1} map_uid=0 doesn't "
                              f"match map pointer in R{regno} map_uid=0")
            bpf_map = reg.map
            if func_id == BpfFunc.tail_call and bpf_map is not None \
                    and bpf_map.map_type != MapType.PROG_ARRAY:
                raise _reject(errno.EINVAL, "expected prog array map for tail call")
        elif arg == ARG_PTR_TO_MAP_KEY and bpf_map is not None:
            self.check_helper_mem_access(state, regno, bpf_map.key_size, False, False)
        elif arg in (ARG_PTR_TO_MAP_VALUE, ARG_PTR_TO_UNINIT_MAP_VALUE) and bpf_map is not None:
            self.check_helper_mem_access(state, regno, bpf_map.value_size,
                                         arg == ARG_PTR_TO_UNINIT_MAP_VALUE, False)
        elif arg in (ARG_CONST_SIZE, ARG_CONST_SIZE_OR_ZERO):
            # check_mem_size_reg, its checks in the kernel's order: the memory is checked
            # for the size's greatest value
            b = vb.bounds(reg)
            if b.smin < 0:
                raise _reject(errno.EACCES, f"R{regno} min value is negative, either use "
                              "unsigned or 'var &= const'")
            if not b.umin and arg == ARG_CONST_SIZE:
                raise _reject(errno.EACCES, f"R{regno} invalid zero-sized read: u64="
                              f"[{_s64(b.umin)},{_s64(b.umax)}]")
            if b.umax >= BPF_MAX_VAR_SIZ:
                raise _reject(errno.EACCES, f"R{regno} unbounded memory access, use 'var &= "
                              "const' or 'if (var < const)'")
            self.check_helper_mem_access(state, regno - 1, b.umax,
                                         args[regno - 2] == ARG_PTR_TO_UNINIT_MEM, True)
        return bpf_map

    def process_dynptr_func(self, regno: int, reg: Reg) -> None:
        """check_func_arg_reg_off and process_dynptr_func for a helper reading an initialised
        dynptr: a drain callback's pointer, unmodified, or a stack slot holding one. No stack
        slot ever does here: the helpers that make a dynptr on the stack
        (bpf_dynptr_from_mem, bpf_ringbuf_reserve_dynptr) are not emulated."""
        if reg.type == CONST_PTR_TO_DYNPTR:
            self.check_ptr_off_reg(regno, reg)
            return
        if not reg.var.is_const:
            raise _reject(errno.EINVAL, "dynptr has to be at a constant offset")
        off = reg.off + _s64(reg.var.value)
        if off % BPF_REG_SIZE:
            raise _reject(errno.EINVAL, f"cannot pass in dynptr at an offset={off}")
        raise _reject(errno.EINVAL, f"Expected an initialized dynptr as arg #{regno - 1}")

    @staticmethod
    def process_timer_func(regno: int, reg: Reg) -> Any:
        """process_timer_func: the register points at its map value's bpf_timer (a known
        offset). Returns the map (meta->map_ptr), which a map argument must then be."""
        if not reg.var.is_const:
            raise _reject(errno.EINVAL, f"R{regno} doesn't have constant offset. bpf_timer has "
                          "to be at the constant offset")
        bpf_map = reg.map
        if bpf_map is None:
            return None  # a value of a map not known here
        if bpf_map.btf is None:
            raise _reject(errno.EINVAL, f"map '{bpf_map.name}' has to have BTF in order to use "
                          "bpf_timer")
        if bpf_map.timer_off < 0:
            raise _reject(errno.EINVAL, f"map '{bpf_map.name}' has no valid bpf_timer")
        off = _s64(reg.var.value) + reg.off
        if off != bpf_map.timer_off:
            raise _reject(errno.EINVAL, f"off {off} doesn't point to 'struct bpf_timer' that "
                          f"is at {bpf_map.timer_off}")
        return bpf_map

    @staticmethod
    def process_spin_lock(state: State, regno: int, is_lock: bool) -> None:
        """process_spin_lock: the register points at its map value's bpf_spin_lock (a known
        offset); one lock is held at a time, and released where it was taken. (Which lock
        is which map's: the kernel also tells two elements of one map apart.)"""
        reg = state.cur.regs[regno]
        if not reg.var.is_const:
            raise _reject(errno.EINVAL, f"R{regno} doesn't have constant offset. bpf_spin_lock "
                          "has to be at the constant offset")
        bpf_map = reg.map
        if bpf_map is None:
            return  # a value of a map not known here
        if bpf_map.btf is None:
            raise _reject(errno.EINVAL, f"map '{bpf_map.name}' has to have BTF in order to use "
                          "bpf_spin_lock")
        if bpf_map.spin_lock_off < 0:
            raise _reject(errno.EINVAL, f"map '{bpf_map.name}' has no valid bpf_spin_lock")
        off = _s64(reg.var.value) + reg.off
        if off != bpf_map.spin_lock_off:
            raise _reject(errno.EINVAL, f"off {off} doesn't point to 'struct bpf_spin_lock' "
                          f"that is at {bpf_map.spin_lock_off}")
        if is_lock:
            if state.active_lock is not None:
                raise _reject(errno.EINVAL, "Locking two bpf_spin_locks are not allowed")
            state.active_lock = bpf_map
            return
        if state.active_lock is None:
            raise _reject(errno.EINVAL, "bpf_spin_unlock without taking a lock")
        if state.active_lock is not bpf_map:
            raise _reject(errno.EINVAL, "bpf_spin_unlock of different lock")
        state.active_lock = None

    @staticmethod
    def check_helper_mem_access(state: State, regno: int, size: int, write: bool,
                                zero_size_allowed: bool) -> None:
        """The ``size`` bytes a helper reads or writes at a stack pointer, map value or
        memory with a known offset, or at a packet pointer, are all there; a helper writes no
        map key, nor a map value the program may only read, nor reads one it may only write
        (check_map_access_type)."""
        reg = state.cur.regs[regno]
        if reg.type in _PKT_TYPES:  # the fixed offset only: the range covers the variable one
            check_packet_access(regno, reg, reg.off, size, zero_size_allowed)
            return
        if reg.type == SCALAR:  # NULL, where the argument may be NULL: no bytes from it
            if zero_size_allowed and not size and reg.is_const and not reg.var.value:
                return
            raise _reject(errno.EACCES, f"R{regno} type={reg.type_str()} "
                          f"expected={PTR_TO_STACK}")
        if reg.type == PTR_TO_MAP_KEY:  # a for_each callback's key: the map's, read-only
            if write:
                raise _reject(errno.EACCES, f"R{regno} cannot write into {reg.type}")
            MemoryChecks.check_map_key_access(regno, reg, reg.off, size, write)
            return
        if reg.type == PTR_TO_MAP_VALUE and reg.map is not None:
            MemoryChecks.check_map_access_type(reg.map, reg.off, size, write)
            check_map_access(regno, reg, reg.off, size, zero_size_allowed)
            return
        if reg.type in (PTR_TO_MEM, PTR_TO_RINGBUF_MEM, PTR_TO_RDONLY_MEM):
            check_mem_region_access(regno, reg, reg.off, size, reg.mem_size, MEM_INVALID,
                                    zero_size_allowed)
            return
        if reg.type == PTR_TO_STACK and not reg.var.is_const and not reg.wide:
            if not size and not zero_size_allowed:
                raise _reject(errno.EACCES, "invalid zero-sized read")
            first, end = MemoryChecks.check_stack_var_off_within_bounds(regno, reg, reg.off,
                                                                        size, write)
            check_stack_range_initialized(state.frames[reg.frame], regno, reg, first, end,
                                          write)
            return
        if not reg.var.is_const:
            return  # a stack offset a loop's widening left unknown (Reg.wide)
        off = reg.off + _s64(reg.var.value)
        if reg.type == PTR_TO_STACK:
            if not size and not zero_size_allowed:
                raise _reject(errno.EACCES, "invalid zero-sized read")
            MemoryChecks.check_stack_access_within_bounds(regno, off, size, write)

    def check_mem_reg(self, state: State, regno: int, size: int) -> None:
        """check_mem_reg, for a global subprogram's pointer argument: NULL, or ``size`` bytes
        it may read and then write (a pointer that may be NULL is checked as if it were
        not)."""
        reg = state.cur.regs[regno]
        if reg.is_const and not reg.var.value:  # register_is_null
            return
        for write in (False, True):
            if reg.type == PTR_TO_MAP_VALUE:
                self.check_map_value_access(regno, reg, reg.off, size, write)
            elif reg.type == PTR_TO_MAP_KEY and write:
                raise _reject(errno.EACCES, f"R{regno} cannot write into {reg.type}")
            elif reg.type == PTR_TO_MAP_KEY:
                self.check_map_key_access(regno, reg, reg.off, size, write)
            elif reg.type in (PTR_TO_STACK, PTR_TO_MEM, PTR_TO_RINGBUF_MEM, PTR_TO_RDONLY_MEM):
                self.check_helper_mem_access(state, regno, size, write, True)
            elif reg.type not in (PTR_TO_PACKET, PTR_TO_PACKET_META):  # packet bounds are
                # ranges, not kept here
                raise _reject(errno.EACCES, f"R{regno} type={reg._replace(id=0).type_str()} "
                              f"expected={PTR_TO_STACK}")

    def check_ptr_off_reg(self, regno: int, reg: Reg) -> None:
        """check_ptr_off_reg: a pointer used only as it came, unmodified (the context, a
        dynptr's)."""
        kind = reg.type_str()
        if reg.off < 0:
            raise _reject(errno.EACCES, f"negative offset {kind} ptr R{regno} off={reg.off} "
                          "disallowed")
        if reg.off:
            raise _reject(errno.EACCES, f"dereference of modified {kind} ptr R{regno} "
                          f"off={reg.off} disallowed")
        if reg.var != tnum.const(0):
            raise _reject(errno.EACCES, f"variable {kind} access var_off={_tnum_str(reg.var)} "
                          "disallowed")

    def map_lookup_result(self, pc: int, state: State, bpf_map: Any, key: Reg,
                          func_id: int) -> Reg:
        """A map value pointer, which may be NULL unless the map is an array and the key a
        constant on the stack that is in range (the kernel elides the check)."""
        if bpf_map is not None and map_traits(bpf_map.map_type).map_in_map:
            # the inner map as the verifier knows it: the outer map's template
            return Reg(CONST_PTR_TO_MAP, tnum.const(0), id=self.new_id(),
                       map=bpf_map.inner_map_meta)
        if bpf_map is not None and map_traits(bpf_map.map_type).sockets:
            ref = self.acquire_reference(state, pc)  # held until it is NULL or released
            return Reg(PTR_TO_SOCKET, tnum.const(0), id=ref)
        if func_id == BpfFunc.map_lookup_elem and bpf_map is not None \
                and can_elide_value_nullness(bpf_map):
            value = _constant_map_key(state, key, bpf_map.key_size)
            if value is not None and 0 <= _s64(value) < bpf_map.max_entries:
                return Reg(PTR_TO_MAP_VALUE, tnum.const(0), map=bpf_map)
        return Reg(PTR_TO_MAP_VALUE, tnum.const(0), map=bpf_map, id=self.new_id())

    @staticmethod
    def clobber_helper_memory(state: State, func_id: int, bpf_map: Any,
                              regs: list[Reg]) -> None:
        """Helpers that write into stack memory leave data there the program does not know:
        from the buffer's least offset to its greatest plus the size's umax
        (check_stack_range_initialized, or for a constant size and offset check_helper_call's
        byte-by-byte writes, to the same effect); a spilled register there is data, all its
        slot's bytes (scrub_spilled_slot)."""
        if func_id in (BpfFunc.probe_read_user, BpfFunc.probe_read_user_str,
                       BpfFunc.probe_read_kernel, BpfFunc.probe_read_kernel_str,
                       BpfFunc.get_current_comm, BpfFunc.dynptr_read):
            buf, size = regs[1], vb.bounds(regs[2]).umax
        elif func_id in (BpfFunc.map_pop_elem, BpfFunc.map_peek_elem) and resolve_map_arg_type(
                func_id, bpf_map, ARG_PTR_TO_UNINIT_MAP_VALUE) == ARG_PTR_TO_UNINIT_MAP_VALUE:
            buf, size = regs[2], bpf_map.value_size if bpf_map is not None else None
        else:
            return
        if buf.type != PTR_TO_STACK or buf.wide:
            return
        frame = state.frames[buf.frame]
        offsets = vb.bounds(buf)  # the pointer's variable offset
        end = 0 if size is None else min(0, buf.off + offsets.smax + size)
        for byte in range(max(buf.off + offsets.smin, -MAX_BPF_STACK), end):
            slot = -byte - 1
            spi = slot // BPF_REG_SIZE
            old = frame.stack.get(spi, EMPTY_SLOT)
            types = list(old.types)
            if STACK_SPILL in types:
                types = [t if t == STACK_INVALID else STACK_MISC for t in types]
            types[slot % BPF_REG_SIZE] = STACK_MISC
            frame.stack[spi] = Slot("".join(types), UNINIT)
