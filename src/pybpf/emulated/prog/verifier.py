"""Load-time checks of the emulated backend: the kernel's verifier (kernel/bpf/verifier.c).

Rules this module keeps:
- Checks run in the kernel's phases (``bpf_check``), so the same problem wins when a program
  has several: subprograms (call targets, jump ranges, last insn, on the raw slots); opcodes,
  lddw and map fds; the control-flow graph (unreachable insns, jumps into an lddw); then
  ``do_check`` (which also finds a call stack too deep, as it follows the calls).
- ``do_check`` walks every path as the kernel does: depth first, a conditional jump's
  fall-through first and its target pushed, calls of static subprograms followed into the
  callee with a frame of their own. A global subprogram (BTF_FUNC_GLOBAL in func_info;
  without func_info every subprogram is static) is not followed: the call is checked
  against its BTF signature and returns an unknown scalar, and once the main program is
  done each global subprogram a walked call reached is walked on its own, from arguments
  its signature gives (do_check_subprogs; ``btf.btf_prepare_func_args``). Each
  instruction's checks run in the kernel's order on an abstract state: per register its
  type (scalar, context, stack, map, map value, packet, socket, a global subprogram's
  memory argument: ``mem`` of its size, a kfunc's address: ``rdonly_mem`` of size 0, what
  ``bpf_ksym_exists`` tests) and, for a
  scalar, the bits known of it (``tnum.py``, the kernel's tnums) and its value ranges
  (``verifier_bounds``: smin/smax, umin/umax and their 32-bit halves); for a pointer its
  fixed offset, its variable offset's bits and ranges, and whether it may still be NULL;
  for a packet pointer its id and range
  (the bytes a comparison with the packet's end proved there, ``find_good_pkt_pointers``);
  per stack slot the kernel's slot types and spilled register. A read at a known offset of
  a frozen read-only map (.rodata) is a known value. A branch the known bits (or a non-NULL
  pointer, or a packet pointer known past the end) and ranges decide has one successor
  (``is_branch_taken``), so code behind it is never checked, as in the kernel. A
  state that an explored state at the same instruction covers is pruned; states are kept
  at the kernel's prune points by is_state_visited's rule (forced at some, elsewhere after
  enough jumps and insns since the last one kept), and one equal to a state the same path
  kept there is an endless loop; a loop still changing after LOOP_UNROLL rounds has what
  changes widened to unknown (ranges too; a pointer whose offset was widened, ``Reg.wide``,
  is not checked against ranges, where the kernel would walk on round by round: the
  interpreter catches a bad access at run time, ``ProgramFault``). Memory accesses, pointer
  arithmetic, helper sizes and return values are checked against the ranges as the kernel
  checks them (``check_mem_region_access``, ``check_reg_sane_offset``,
  ``check_mem_size_reg``, ``retval_range_within``); precision marks are not kept (every
  scalar is precise, which only prunes less). Helper arguments are checked as the kernel
  checks them (``check_func_arg``, ``check_map_func_compatibility``).
- Messages and errnos are the kernel's (EINVAL mostly; EACCES for register, stack, context,
  packet and map access; E2BIG for a too-deep call stack or too many instructions walked;
  EBADF for an fd that is not open).
- The result keeps what loading changes: instructions with narrow context loads rewritten as
  ``convert_ctx_accesses`` does (``filter.narrow_load_offset``) and dead code as ``goto -1``
  (its fields were never checked), the maps by lddw slot, and ``max_ctx_offset``.

This module holds the phases and do_check's walk; the parts verifier.c keeps apart are modules
of their own: the abstract state and pruning (``verifier_state``), ALU and jumps
(``verifier_alu``), memory access (``verifier_mem``), helper and kfunc calls and their tables
(``verifier_helpers``).
"""

from __future__ import annotations

import errno
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ... import uapi
from ...asm.opcodes import (
    OPCODES,
    AluOp,
    Class,
    Instruction,
    JmpOp,
    Kind,
    Mode,
    Source,
)
from ...btf import BTF_FUNC_GLOBAL, BTF_FUNC_STATIC, Enum, Int
from ...errors import KernelError
from ...uapi import (
    ENOTSUPP,
    MAX_BPF_STACK,
    AttachType,
    BpfFunc,
    ProgType,
)
from . import filter as ctx_rules
from . import tnum
from . import verifier_bounds as vb
from .bpf_iter import BPF_LOOP_INLINED
from .btf import (
    ARG_ANYTHING,
    ARG_PTR_TO_CTX,
    FuncInfo,
    SubprogArg,
    btf_prepare_func_args,
    vmlinux_btf_types,
    vmlinux_kfuncs,
)
from .semantics import MAX_CALL_FRAMES
from .verifier_alu import AluChecks
from .verifier_helpers import (
    HelperCallChecks,
    is_callback_calling,
    is_iter_next_call,
    next_arg_iter_state,
)
from .verifier_mem import MemoryChecks
from .verifier_state import (
    _SLOT,
    BPF_COMPLEXITY_LIMIT_INSNS,
    BPF_ITER_STATE_ACTIVE,
    BPF_REG_SIZE,
    CALLBACK_UNROLL,
    CALLER_SAVED,
    CHECKPOINT_INSNS,
    CHECKPOINT_JMPS,
    CONST_PTR_TO_MAP,
    DIRECT_VALUE_MAP_TYPES,
    DST_OP,
    EXIT,
    FP,
    GOTOL,
    JA,
    LD_ABS_PROG_TYPES,
    LD_IMM64,
    LOOP_CHECKPOINT_INSNS,
    LOOP_CHECKPOINT_JMPS,
    LOOP_PERIOD,
    LOOP_UNROLL,
    MAX_BPF_REG,
    NOT_INIT,
    PTR_TO_CTX,
    PTR_TO_FUNC,
    PTR_TO_MAP_VALUE,
    PTR_TO_MEM,
    PTR_TO_RDONLY_MEM,
    PTR_TO_STACK,
    SCALAR,
    SRC_OP,
    STATES_PER_INSN,
    UNINIT,
    UNKNOWN,
    Frame,
    Reg,
    State,
    VerifierReject,
    _check_endless_loop,
    _Checkpoint,
    _covers,
    _jump_target,
    _reject,
    _Visit,
    _widen,
    scalar,
)

__all__ = ["VerifiedProgram", "VerifierReject", "bpf_check"]

# is_tracing_prog_type
_TRACING_PROG_TYPES = frozenset({ProgType.KPROBE, ProgType.TRACEPOINT, ProgType.PERF_EVENT,
                                 ProgType.RAW_TRACEPOINT, ProgType.RAW_TRACEPOINT_WRITABLE})


@dataclass
class VerifiedProgram:
    """What loading keeps: instructions, map references by lddw slot, maps in use order."""

    insns: list[Instruction]
    pseudo: dict[int, tuple[str, Any, int]] = field(default_factory=dict)
    maps: list[Any] = field(default_factory=list)
    processed: int = 0
    max_ctx_offset: int = 0  # bytes of the context the program reads or writes (at most)



def bpf_check(insns: bytes, prog_type: int, map_from_fd: Callable[[int], Any],
              gpl: bool = True, expected_attach_type: int = 0,
              check_attach_btf_id: Callable[[], None] | None = None,
              func_info: FuncInfo | None = None, *, nr_cpu_ids: int) -> VerifiedProgram:
    """Verify ``insns`` for ``prog_type``; ``map_from_fd(fd)`` resolves lddw map fds (raises
    KernelError); ``gpl``: the license is GPL-compatible; ``check_attach_btf_id`` (the
    loader's checks of the program's kind: sleepable) runs where the kernel's does, after
    check_cfg; ``func_info``: each subprogram's BTF FUNC, when the load gave func_info
    (callbacks and global subprograms need it); ``nr_cpu_ids``: the machine's possible CPUs
    (what bounds bpf_get_smp_processor_id's result). Returns the decoded program or raises
    ``VerifierReject``."""
    verifier = _Verifier(insns, prog_type, map_from_fd, nr_cpu_ids, gpl, expected_attach_type)
    verifier.check_attach_btf_id = check_attach_btf_id
    verifier.func_info = func_info
    return verifier.run()


def _is_tail_call(code: int, regs: int, imm: int) -> bool:
    """Whether a raw slot calls the bpf_tail_call helper."""
    return code == Class.JMP | JmpOp.CALL and not regs >> 4 and imm == BpfFunc.tail_call


def _round_up_stack_depth(depth: int) -> int:
    """round_up_stack_depth with the JIT on: a frame's stack in 16-byte steps."""
    return -(-depth // 16) * 16


class _Verifier(AluChecks, MemoryChecks, HelperCallChecks):
    def __init__(self, data: bytes, prog_type: int, map_from_fd: Callable[[int], Any],
                 nr_cpu_ids: int, gpl: bool = True, attach_type: int = 0) -> None:
        self.data = data
        self.nr_cpu_ids = nr_cpu_ids
        self.gpl = gpl
        self.prog_type = prog_type
        self.attach_type = attach_type
        self.map_from_fd = map_from_fd
        self.check_attach_btf_id: Callable[[], None] | None = None
        self.n = len(data) // 8
        self.raw = [_SLOT.unpack_from(data, 8 * i) for i in range(self.n)]
        self.slots: list[Instruction | None] = []
        self.subprogs: list[int] = [0]
        self.pseudo_map: dict[int, Any] = {}  # lddw slot of a direct map value -> its map
        self.func_info: FuncInfo | None = None
        self.subprog_args: dict[int, tuple[SubprogArg, ...]] = {}  # args_cached, by start
        self.called_globals: set[int] = set()  # global subprograms a walked call reached
        self.global_walk = 0  # the global subprogram being walked on its own (0: none)

    def run(self) -> VerifiedProgram:
        self.decode_slots()
        self.add_subprog_and_kfunc()
        self.check_subprogs()
        self.check_abnormal_return()
        program = self.resolve_pseudo_ldimm64()
        self.check_cfg()
        if self.check_attach_btf_id is not None:
            self.check_attach_btf_id()
        self.do_check(program)
        self.check_max_stack_depth()
        program.insns = self.converted_insns()
        program.processed = self.processed
        program.max_ctx_offset = self.max_ctx
        return program

    def converted_insns(self) -> list[Instruction]:
        """What the engines get: dead code (never walked: no field of it was checked) as
        ``goto -1``, as sanitize_dead_code leaves it; narrow context loads reading where the
        kernel's rewrite (convert_ctx_accesses) reads; bpf_loop calls fit for inlining as the
        inlined loop (optimize_bpf_loop)."""
        insns = []
        for pc, insn in enumerate(self.slots):
            if insn is None:
                continue
            info = OPCODES[insn.opcode]
            if pc not in self.walked and info.kind is not Kind.LD_IMM64:
                insn = Instruction(JA, off=-1)
            elif self.ctx_insns.get(pc) and info.kind in (Kind.LDX, Kind.LDX_SX):
                insn = insn._replace(off=ctx_rules.narrow_load_offset(
                    self.prog_type, insn.off, info.nbytes))
            elif self.loop_inline.get(pc) is not None:
                insn = insn._replace(imm=BPF_LOOP_INLINED)
            insns.append(insn)
        return insns

    # -- phase 1: slots, subprograms and kfuncs --------------------------------------------------
    def decode_slots(self) -> None:
        """Instructions by slot (None in lddw's second slot); nothing is checked yet."""
        pc = 0
        while pc < self.n:
            code, regs, off, imm = self.raw[pc]
            if code == LD_IMM64 and pc + 1 < self.n:
                _, _, _, imm2 = self.raw[pc + 1]
                imm = (imm & 0xFFFFFFFF) | (imm2 << 32)
                self.slots += [Instruction(code, regs & 0xF, regs >> 4, off, imm), None]
                pc += 2
                continue
            self.slots.append(Instruction(code, regs & 0xF, regs >> 4, off, imm))
            pc += 1

    def add_subprog_and_kfunc(self) -> None:
        starts = {0}
        for pc, insn in enumerate(self.slots):
            if insn is not None and insn.opcode == LD_IMM64 and insn.src == uapi.BPF_PSEUDO_FUNC:
                target = _callback_target(pc, insn)
                if not 0 <= target < self.n:
                    raise _reject(errno.EINVAL, "call to invalid destination")
                starts.add(target)  # a callback: a subprogram of its own
                continue
            if insn is None or insn.opcode != Class.JMP | JmpOp.CALL:
                continue
            if insn.src == uapi.BPF_PSEUDO_KFUNC_CALL:
                self.add_kfunc_call(insn)
                continue
            if insn.src == uapi.BPF_PSEUDO_CALL:
                target = pc + insn.imm + 1
                if not 0 <= target < self.n:
                    raise _reject(errno.EINVAL, "call to invalid destination")
                starts.add(target)
        self.subprogs = sorted(starts)

    # -- phase 2: jumps stay in their subprogram, which ends in exit or ja -----------------------
    def check_subprogs(self) -> None:
        """On the raw slots, as the kernel does (before opcodes are checked)."""
        for i, start in enumerate(self.subprogs):
            end = self.subprogs[i + 1] if i + 1 < len(self.subprogs) else self.n
            for pc in range(start, end):
                code, _, off, imm = self.raw[pc]
                cls, op = code & 0x07, code & 0xF0
                if cls in (Class.JMP, Class.JMP32) and op not in (JmpOp.EXIT, JmpOp.CALL):
                    target = pc + (imm if cls == Class.JMP32 and op == JmpOp.JA else off) + 1
                    if not start <= target < end:
                        raise _reject(errno.EINVAL,
                                      f"jump out of range from insn {pc} to {target}")
            if self.raw[end - 1][0] not in (EXIT, JA, GOTOL):
                raise _reject(errno.EINVAL, "last insn is not an exit or jmp")

    def check_abnormal_return(self) -> None:
        """check_abnormal_return (check_btf_info without func_info) and check_btf_func: a
        subprogram other than the main one may leave the program (LD_ABS, a tail call) only
        where func_info's BTF says it returns an int (or an enum); on the raw slots, as
        check_subprogs marks them."""
        for i, start in enumerate(self.subprogs[1:], 1):
            end = self.subprogs[i + 1] if i + 1 < len(self.subprogs) else self.n
            codes = [self.raw[pc] for pc in range(start, end)]
            for what, found in (
                    ("LD_ABS", any(code & 0x07 == Class.LD and code & 0xE0 in (Mode.ABS, Mode.IND)
                                   for code, _, _, _ in codes)),
                    ("tail_call", any(_is_tail_call(code, regs, imm)
                                      for code, regs, _, imm in codes))):
                if not found:
                    continue
                if self.func_info is None:
                    raise _reject(errno.EINVAL, f"{what} is not allowed in subprogs without "
                                  "BTF")
                if not self.returns_scalar(start):
                    raise _reject(errno.EINVAL, f"{what} is only allowed in functions that "
                                  "return 'int'.")

    def returns_scalar(self, start: int) -> bool:
        """Whether the subprogram at ``start`` returns an integer of at most 8 bytes or an
        enum, by its func_info (btf_type_is_small_int, btf_is_any_enum)."""
        btf = self.func_info.btf
        proto = btf[self.func_info.func(start).type_id]
        if not proto.return_type_id:
            return False
        ret = btf[btf.resolve(proto.return_type_id)]
        return isinstance(ret, Enum) or isinstance(ret, Int) and ret.size <= 8

    # -- phase 3: opcodes, lddw, map fds ---------------------------------------------------------
    def resolve_pseudo_ldimm64(self) -> VerifiedProgram:
        insns: list[Instruction] = []
        pseudo: dict[int, tuple[str, Any, int]] = {}
        maps: list[Any] = []
        for pc, insn in enumerate(self.slots):
            if insn is None:
                continue
            insns.append(insn)
            info = OPCODES.get(insn.opcode)
            if info is None:
                raise _reject(errno.EINVAL, f"unknown opcode {insn.opcode:02x}")
            if info.kind in (Kind.LDX, Kind.LDX_SX) and insn.imm:
                raise _reject(errno.EINVAL, "BPF_LDX uses reserved fields")
            if insn.opcode != LD_IMM64:
                continue
            _, regs2, off2, _ = self.raw[pc + 1] if pc + 1 < self.n else (1, 0, 0, 0)
            code2 = self.raw[pc + 1][0] if pc + 1 < self.n else 1
            if pc + 1 >= self.n or code2 or regs2 or off2:
                raise _reject(errno.EINVAL, "invalid bpf_ld_imm64 insn")
            src = insn.src
            if src == 0:
                continue
            if src == uapi.BPF_PSEUDO_BTF_ID:
                pseudo[pc] = ("kfunc", self.check_pseudo_btf_id(insn), 0)
                continue
            if src == uapi.BPF_PSEUDO_FUNC:  # checked by do_check (check_ld_imm)
                pseudo[pc] = ("func", _callback_target(pc, insn), 0)
                continue
            if src not in (uapi.BPF_PSEUDO_MAP_VALUE, uapi.BPF_PSEUDO_MAP_IDX_VALUE) \
                    and not (src in (uapi.BPF_PSEUDO_MAP_FD, uapi.BPF_PSEUDO_MAP_IDX)
                             and not insn.imm >> 32):
                raise _reject(errno.EINVAL, "unrecognized bpf_ld_imm64 insn")
            if src in (uapi.BPF_PSEUDO_MAP_IDX, uapi.BPF_PSEUDO_MAP_IDX_VALUE):
                raise _reject(errno.EPROTO, "fd_idx without fd_array is invalid")
            fd = insn.imm & 0xFFFFFFFF
            fd = fd - (1 << 32) if fd >> 31 else fd
            try:
                bpf_map = self.map_from_fd(fd)
            except KernelError as exc:
                raise _reject(exc.errno, f"fd {fd} is not pointing to valid bpf_map") from None
            if bpf_map not in maps:
                self.check_map_prog_compatibility(bpf_map)
                maps.append(bpf_map)
            if src == uapi.BPF_PSEUDO_MAP_FD:
                pseudo[pc] = ("map", bpf_map, 0)
                continue
            off = (insn.imm >> 32) & 0xFFFFFFFF
            if bpf_map.map_type not in DIRECT_VALUE_MAP_TYPES:
                raise _reject(errno.EINVAL, "no direct value access support for this map type")
            # array_map_direct_value_addr: one element only (ENOTSUPP), then the offset
            err = ENOTSUPP if bpf_map.max_entries != 1 \
                else errno.EINVAL if off >= bpf_map.value_size else 0
            if err:
                raise _reject(err, f"invalid access to map value pointer, value_size="
                              f"{bpf_map.value_size} off={off}")
            value = bpf_map.map_lookup_elem(b"\0\0\0\0")
            pseudo[pc] = ("map_value", value, off)
            self.pseudo_map[pc] = bpf_map
        return VerifiedProgram(insns, pseudo, maps)

    def check_map_prog_compatibility(self, bpf_map: Any) -> None:
        """Maps whose values hold a bpf_spin_lock are not for socket filters nor tracing,
        those holding a bpf_timer not for tracing."""
        if bpf_map.spin_lock_off >= 0:
            if self.prog_type == ProgType.SOCKET_FILTER:
                raise _reject(errno.EINVAL, "socket filter progs cannot use bpf_spin_lock yet")
            if self.prog_type in _TRACING_PROG_TYPES:
                raise _reject(errno.EINVAL, "tracing progs cannot use bpf_spin_lock yet")
        if bpf_map.timer_off >= 0 and self.prog_type in _TRACING_PROG_TYPES:
            raise _reject(errno.EINVAL, "tracing progs cannot use bpf_timer yet")

    @staticmethod
    def check_pseudo_btf_id(insn: Instruction) -> Any:
        """check_pseudo_btf_id: the kernel's BTF (high imm, a module BTF fd: 0) names a FUNC,
        whose address ``bpf_ksym_exists`` takes; the emulated kernel has no kernel variables
        (a VAR), and its only FUNCs are its kfuncs."""
        btf_id, btf_fd = insn.imm & 0xFFFFFFFF, insn.imm >> 32 & 0xFFFFFFFF
        if btf_fd:  # a module's BTF: the emulated kernel has none
            raise _reject(errno.EINVAL, "invalid module BTF object FD specified.")
        if btf_id >= len(vmlinux_btf_types()):  # id 0 is void: found, not a VAR or FUNC
            raise _reject(errno.ENOENT, f"ldimm64 insn specifies invalid btf_id {btf_id}.")
        proto = vmlinux_kfuncs().get(btf_id)
        if proto is None:
            raise _reject(errno.EINVAL, f"pseudo btf_id {btf_id} in ldimm64 isn't KIND_VAR or "
                          "KIND_FUNC")
        return proto

    # -- phase 4: control flow -------------------------------------------------------------------
    def successors(self, pc: int) -> list[int]:
        insn = self.slots[pc]
        info = OPCODES[insn.opcode]
        if info.kind is Kind.EXIT:
            return []
        nxt = pc + insn.slots
        if info.kind is Kind.JA:
            return [_jump_target(pc, insn)]
        if info.kind in (Kind.JMP, Kind.JCOND):
            return [nxt, _jump_target(pc, insn)]
        if info.kind is Kind.CALL and insn.src == uapi.BPF_PSEUDO_CALL:
            return [nxt, pc + insn.imm + 1]
        if insn.opcode == LD_IMM64 and insn.src == uapi.BPF_PSEUDO_FUNC:
            return [nxt, _callback_target(pc, insn)]  # the callback is reached from here
        return [nxt]

    def check_cfg(self) -> None:
        """Every slot is reached, and no jump lands in an lddw's second slot (which, as in
        the kernel's walk, falls through to the next one)."""
        seen = [False] * self.n
        stack = [0]
        seen[0] = True
        while stack:
            pc = stack.pop()
            for succ in [pc + 1] if self.slots[pc] is None else self.successors(pc):
                if succ < self.n and not seen[succ]:
                    seen[succ] = True
                    stack.append(succ)
        pc = 0
        while pc < self.n:
            if not seen[pc]:
                raise _reject(errno.EINVAL, f"unreachable insn {pc}")
            if self.slots[pc].opcode == LD_IMM64:
                if seen[pc + 1]:
                    raise _reject(errno.EINVAL, f"jump into the middle of ldimm64 insn {pc}")
                pc += 1
            pc += 1

    def live_registers(self) -> list[int]:
        """compute_live_registers: per slot, the registers some path from it may read before
        writing (a bit set); pruning ignores the others."""
        live = [0] * self.n
        use_def = {pc: _use_def(insn) for pc, insn in enumerate(self.slots) if insn is not None}
        changed = True
        while changed:
            changed = False
            for pc in range(self.n - 1, -1, -1):
                if pc not in use_def:
                    continue
                use, define = use_def[pc]
                out = 0
                for succ in self.successors(pc):
                    if succ < self.n:
                        out |= live[succ]
                new = use | (out & ~define)
                if new != live[pc]:
                    live[pc], changed = new, True
        return live

    def prune_points(self) -> set[int]:
        """Where explored states are looked at and kept, the kernel's prune points
        (visit_insn): subprograms' starts, jump targets, conditional jumps, what follows a
        call (or a callback's lddw); and the call itself where it is of a subprogram,
        calls a callback (the lddw naming one too) or is an iterator's next (a helper's
        call otherwise is none: its state is kept, if at all, after it)."""
        points = set(self.subprogs)
        for pc, insn in enumerate(self.slots):
            if insn is None:
                continue
            kind = OPCODES[insn.opcode].kind
            if kind in (Kind.JA, Kind.JMP, Kind.JCOND):
                points.add(_jump_target(pc, insn))
                if kind is not Kind.JA:
                    points.add(pc)
            elif kind is Kind.CALL:
                points.add(pc + 1)
                if insn.src == uapi.BPF_PSEUDO_CALL or is_callback_calling(insn) \
                        or is_iter_next_call(insn) \
                        or insn.src == 0 and insn.imm == BpfFunc.timer_set_callback:
                    points.add(pc)
            elif insn.opcode == LD_IMM64 and insn.src == uapi.BPF_PSEUDO_FUNC:
                points.update((pc, pc + 2))
        return points

    # -- phase 5: every path, every instruction ----------------------------------------------
    def do_check(self, program: VerifiedProgram) -> None:
        """do_check_main (R1 the context), then do_check_subprogs: each global subprogram
        a walked call reached, on its own, in subprogram order, in rounds while a round
        walks one (a global subprogram may call another)."""
        self.pseudo = program.pseudo
        self.id_gen = 0
        self.ref_alloc_insn: dict[int, int] = {}
        self.max_ctx = 0
        self.processed = 0
        self.ctx_insns: dict[int, bool] = {}  # pc -> whether a load/store there used ctx
        self.walked: set[int] = set()
        self.callback_calls = {pc for pc, insn in enumerate(self.slots)
                               if insn is not None and is_callback_calling(insn)}
        # where a loop's rounds converge: callbacks' call sites and iterators' next calls
        # (is_state_visited's calls_callback and is_iter_next_insn)
        self.iter_next_calls = {pc for pc, insn in enumerate(self.slots)
                                if insn is not None and is_iter_next_call(insn)}
        self.loop_calls = self.callback_calls | self.iter_next_calls
        # where is_state_visited always keeps the state (mark_force_checkpoint): a loop's
        # rounds converge there, and may_goto's
        self.force_checkpoints = self.loop_calls | {
            pc for pc, insn in enumerate(self.slots)
            if insn is not None and OPCODES[insn.opcode].kind is Kind.JCOND}
        # insns that count as jumps (env->jmps_processed): the BPF_JMP and BPF_JMP32 class
        self.jmp_insns = {pc for pc, insn in enumerate(self.slots)
                          if insn is not None and OPCODES[insn.opcode].cls in (Class.JMP,
                                                                               Class.JMP32)}
        self.jmps = self.prev_jmps = self.prev_processed = 0
        self.stack_depth = [0] * len(self.subprogs)  # by subprogram, as grow_stack_state
        self.async_cbs: set[int] = set()  # subprograms walked as a timer's callback
        self.loop_inline: dict[int, int | None] = {}
        self.live = self.live_registers()
        self.prune = self.prune_points()
        regs = [UNINIT] * MAX_BPF_REG
        regs[1] = Reg(PTR_TO_CTX, tnum.const(0))
        self.do_check_common(0, regs)
        verified: set[int] = set()
        walked_one = True
        while walked_one:
            walked_one = False
            for subprog, start in enumerate(self.subprogs):
                if start in self.called_globals and start not in verified:
                    self.check_global_subprog(subprog, start)
                    verified.add(start)
                    walked_one = True

    def check_global_subprog(self, subprog: int, start: int) -> None:
        """do_check_common for a global subprogram: its arguments as its BTF signature
        gives them (btf_prepare_func_args, already run at its call); a refusal's log
        names it first, as the kernel's does."""
        regs = [UNINIT] * MAX_BPF_REG
        for regno, arg in enumerate(self.subprog_args[start], 1):
            if arg.arg_type == ARG_PTR_TO_CTX:
                regs[regno] = Reg(PTR_TO_CTX, tnum.const(0))
            elif arg.arg_type == ARG_ANYTHING:
                regs[regno] = UNKNOWN
            else:
                regs[regno] = Reg(PTR_TO_MEM, tnum.const(0), mem_size=arg.mem_size,
                                  id=self.new_id() if arg.maybe_null else 0)
        self.global_walk = start
        try:
            self.do_check_common(start, regs)
        except VerifierReject as exc:
            exc.log = f"Validating {self.func_info.func(start).name}() func#{subprog}...\n" \
                + exc.log
            raise
        finally:
            self.global_walk = 0

    def do_check_common(self, start: int, regs: list[Reg]) -> None:
        """Walk the paths from ``start`` with ``regs`` (R10 the frame pointer) in frame 0,
        depth first as the kernel does. At a prune point a state one explored there covers
        needs no walk of its own (one of this path's own checkpoints, still being explored,
        only where ``state_covered`` says), and the state is kept there (a checkpoint) as
        is_state_visited keeps one: always where the point forces one, else only once
        enough jumps and insns were processed since the last one kept. A state equal to a
        checkpoint this path kept there is an endless loop. A loop that still changes its
        state after LOOP_UNROLL rounds has the values it changes widened to unknown (the
        kernel would walk on, and usually give up at its instruction limit). Instructions
        processed, and the jumps among them, add up over the walks."""
        prune, loop_calls = self.prune, self.loop_calls
        forced, jmp_insns = self.force_checkpoints, self.jmp_insns
        explored: dict[int, list[tuple]] = {}
        # a state kept at each prune point whose paths were all walked (not an ancestor of
        # the path being walked), by its live part: a state the same there is covered. The
        # kernel keeps them all; ``explored`` keeps the last STATES_PER_INSN, which alone
        # cannot prune a path that comes back to a point after many rounds of a loop whose
        # branches the ranges decided. ``open_kept``: the kept states not done yet (this
        # path's ancestors), in the order kept, with the paths pending when each was kept.
        done: dict[int, dict[tuple, tuple]] = {}
        open_kept: list[tuple[int, int, tuple, tuple]] = []
        regs[FP] = Reg(PTR_TO_STACK, tnum.const(0))
        # (pc, state, this path's visits of each prune point)
        pending: list[tuple[int, State, dict[int, _Visit]]] = [
            (start, State([Frame(regs, {}, -1, 0)]), {})]
        processed, jmps = self.processed, self.jmps
        while pending:
            pc, state, visits = pending.pop()
            while open_kept and open_kept[-1][0] > len(pending):
                # a path from before it: its paths are done
                _, at, live_key, key = open_kept.pop()
                done.setdefault(at, {}).setdefault(live_key, key)
            while pc is not None:
                processed += 1
                if processed > BPF_COMPLEXITY_LIMIT_INSNS:
                    raise _reject(errno.E2BIG, f"BPF program is too large. Processed "
                                  f"{processed} insn")
                if pc in prune:
                    key = state.key()
                    last = visits.get(pc)
                    checkpoints = last.checkpoints if last else ()
                    add = pc in forced or jmps - self.prev_jmps >= CHECKPOINT_JMPS \
                        and processed - self.prev_processed >= CHECKPOINT_INSNS
                    if checkpoints:
                        if pc not in loop_calls:  # a loop there converges, rounds differ
                            _check_endless_loop(pc, key, checkpoints, state.callback_unroll)
                        if pc not in forced and jmps - self.prev_jmps < LOOP_CHECKPOINT_JMPS \
                                and processed - self.prev_processed < LOOP_CHECKPOINT_INSNS:
                            add = False
                    states = explored.setdefault(pc, [])
                    same = done.get(pc)
                    live_key = state.key(self.live[pc]) if same else None
                    if self.state_covered(pc, state, key, _with(states, same, live_key),
                                          checkpoints):
                        self.update_stack_depth(pc, state)
                        break  # is_state_visited: a state explored here covers this one
                    unroll = CALLBACK_UNROLL if pc in loop_calls else LOOP_UNROLL
                    widened = last is not None and last.count >= unroll
                    if widened:
                        _widen(state, last.state)
                        key = state.key()
                        live_key = state.key(self.live[pc]) if same else None
                        if self.state_covered(pc, state, key,
                                              _with(states, same, live_key), checkpoints):
                            self.update_stack_depth(pc, state)
                            break
                    if add:
                        states.append(key)
                        if live_key is None:
                            live_key = state.key(self.live[pc])
                        open_kept.append((len(pending), pc, live_key, key))
                        if len(states) > STATES_PER_INSN:
                            del states[0]
                        checkpoints = (_Checkpoint(key, widened, state.callback_unroll),
                                       *checkpoints[:max(STATES_PER_INSN, LOOP_PERIOD) - 1])
                        self.prev_jmps, self.prev_processed = jmps, processed
                    visits[pc] = _Visit(state.copy(), last.count + 1 if last else 1,
                                        checkpoints)
                self.walked.add(pc)
                if pc in jmp_insns:
                    jmps += 1
                    if self.raw[pc][0] == EXIT:
                        self.update_stack_depth(pc, state)
                pc, pushed = self.do_check_insn(pc, state)
                pending.extend((target, other, dict(visits)) for target, other in pushed)
        self.processed, self.jmps = processed, jmps

    def state_covered(self, pc: int, state: State, key: tuple, states: list[tuple],
                      checkpoints: tuple[_Checkpoint, ...]) -> bool:
        """is_state_visited's hit: a state explored at ``pc`` covers this one. A checkpoint
        of this path's own (an ancestor: branches > 0, its paths not all walked) is only
        looked at for an endless loop, never to prune, except where a loop's rounds
        converge: a callback's call site, may_goto, an iterator's next call while the
        iterator is ACTIVE (a DRAINED one gives NULL again, and the kernel walks on, to
        its instruction limit if the loop never ends). A widened checkpoint (this
        module's stand-in for the rounds the kernel walks with ranges) prunes too."""
        live = self.live[pc]
        covering = [old for old in states if old == key or _covers(old, key, live)]
        if not covering:
            return False
        if pc in self.iter_next_calls:
            if next_arg_iter_state(state) == BPF_ITER_STATE_ACTIVE:
                return True
            own = {id(checkpoint.key) for checkpoint in checkpoints}
            return any(id(old) not in own for old in covering)  # widened or not
        if pc in self.force_checkpoints:
            return True
        own_widened = {id(checkpoint.key): checkpoint.widened for checkpoint in checkpoints}
        return any(own_widened.get(id(old), True) for old in covering)

    def update_stack_depth(self, pc: int, state: State) -> None:
        """grow_stack_state's stack_depth: per subprogram, the deepest stack slot a frame of
        it used, taken where a path leaves its frames (an exit, a prune); a frame's
        subprogram is the one holding ``pc`` (the innermost) or the call into the next."""
        where = pc
        for frame in reversed(state.frames):
            subprog = bisect_right(self.subprogs, where) - 1
            if frame.stack:
                depth = (max(frame.stack) + 1) * BPF_REG_SIZE
                self.stack_depth[subprog] = max(self.stack_depth[subprog], depth)
            if frame.frameno == 0 and frame.callsite >= 0:
                self.async_cbs.add(subprog)  # push_async_cb's is_async_cb
            where = frame.callsite

    def check_max_stack_depth(self) -> None:
        """check_max_stack_depth: from the main program and from each timer's callback
        (the last first), along every chain of calls (a callback's lddw one too, a timer's
        callback not: it runs on a stack of its own), the frames' stacks together fit in
        MAX_BPF_STACK, each rounded up to 16 bytes (round_up_stack_depth: the JIT's; no
        private stacks: bpf_enable_priv_stack gives none to the types here); a subprogram
        with a tail call is called with less than 256 bytes below it."""
        for idx in reversed(range(len(self.subprogs))):
            if idx == 0 or idx in self.async_cbs:
                self.check_max_stack_depth_subprog(idx)

    def check_max_stack_depth_subprog(self, idx: int) -> None:
        starts = self.subprogs
        tail_calls = {bisect_right(starts, pc) - 1 for pc, (code, regs, _, imm)
                      in enumerate(self.raw) if _is_tail_call(code, regs, imm)}
        frames: list[tuple[int, int]] = []  # (insn to return to, subprogram), as ret_insn
        depth, pc, entered = 0, starts[idx], True
        while True:
            if entered:  # process_func
                if idx and idx in tail_calls and depth >= 256:
                    raise _reject(errno.EACCES, "tail_calls are not allowed when call stack "
                                  f"of previous frames is {depth} bytes. Too large")
                depth += _round_up_stack_depth(self.stack_depth[idx])
                if depth > MAX_BPF_STACK:
                    raise _reject(errno.EACCES, f"combined stack size of {len(frames) + 1} "
                                  f"calls is {depth}. Too large")
            entered = False
            end = starts[idx + 1] if idx + 1 < len(starts) else self.n
            while pc < end:  # continue_func
                code, regs, _, imm = self.raw[pc]
                call = code == Class.JMP | JmpOp.CALL and regs >> 4 == uapi.BPF_PSEUDO_CALL
                if call or code == LD_IMM64 and regs >> 4 == uapi.BPF_PSEUDO_FUNC:
                    callee = bisect_right(starts, pc + imm + 1) - 1
                    if callee in self.async_cbs and not call:
                        pc += 1
                        continue  # a timer's callback: not called from here
                    frames.append((pc + 1, idx))
                    pc, idx, entered = pc + imm + 1, callee, True
                    if len(frames) >= MAX_CALL_FRAMES:
                        raise _reject(errno.E2BIG, f"the call stack of {len(frames)} frames "
                                      "is too deep !")
                    break
                pc += 1
            if entered:
                continue
            if not frames:
                return
            depth -= _round_up_stack_depth(self.stack_depth[idx])
            pc, idx = frames.pop()

    def do_check_insn(self, pc: int, state: State) -> tuple[int | None, list]:
        """One instruction's checks and effect on ``state``; returns the next pc (None: the
        path ended) and the (pc, state) pairs to walk later."""
        insn = self.slots[pc]
        info = OPCODES[insn.opcode]
        kind = info.kind
        regs = state.cur.regs
        if kind in (Kind.ALU, Kind.NEG, Kind.END):
            zero = self.check_alu_op(insn, info, regs)
            if zero is not None:  # maybe_fork_scalars: dst 0 from this insn, walked later
                other = state.copy()
                other.cur.regs[insn.dst] = zero
                return pc + 1, [(pc, other)]
        elif kind in (Kind.LDX, Kind.LDX_SX):
            self.check_load_mem(pc, insn, info, state, kind is Kind.LDX_SX)
        elif kind is Kind.STX:
            if insn.imm:
                raise _reject(errno.EINVAL, "BPF_STX uses reserved fields")
            self.check_store_reg(pc, insn, info, state)
        elif kind is Kind.ATOMIC:
            self.check_atomic(pc, insn, info, state)
        elif kind is Kind.ST:
            if insn.src:
                raise _reject(errno.EINVAL, "BPF_ST uses reserved fields")
            self.check_reg_arg(regs, insn.dst, SRC_OP)
            self.check_mem_access(pc, insn, info, state, insn.dst, True, None, imm=insn.imm)
            self.save_aux_ptr_type(pc, regs[insn.dst])
        elif kind is Kind.CALL:
            if insn.src not in (0, uapi.BPF_PSEUDO_CALL, uapi.BPF_PSEUDO_KFUNC_CALL) or insn.dst \
                    or insn.off and insn.src != uapi.BPF_PSEUDO_KFUNC_CALL:
                raise _reject(errno.EINVAL, "BPF_CALL uses reserved fields")
            if state.active_lock is not None and (
                    insn.src == 0 and insn.imm != BpfFunc.spin_unlock
                    or insn.src == uapi.BPF_PSEUDO_KFUNC_CALL):
                raise _reject(errno.EINVAL, "function calls are not allowed while holding a "
                              "lock")
            if insn.src == uapi.BPF_PSEUDO_CALL:
                return self.check_func_call(pc, insn, state), []
            if insn.src == uapi.BPF_PSEUDO_KFUNC_CALL:
                return pc + 1, self.check_kfunc_call(pc, insn, state)
            return pc + 1, self.check_helper_call(pc, insn, state)
        elif kind is Kind.JA:
            if insn.src or insn.dst or (insn.off if info.cls is Class.JMP32 else insn.imm):
                raise _reject(errno.EINVAL, "BPF_JA uses reserved fields")
            return _jump_target(pc, insn), []
        elif kind is Kind.EXIT:
            if insn.imm or insn.src or insn.dst:
                raise _reject(errno.EINVAL, "BPF_EXIT uses reserved fields")
            return self.process_exit(state), []
        elif kind in (Kind.JMP, Kind.JCOND):
            return self.check_cond_jmp_op(pc, insn, info, state)
        elif kind in (Kind.LD_ABS, Kind.LD_IND):
            self.check_ld_abs(insn, info, state)
        else:
            self.check_ld_imm(pc, insn, regs)
        return pc + insn.slots, []

    # -- registers ---------------------------------------------------------------------------
    @staticmethod
    def check_reg_arg(regs: list[Reg], regno: int, t: int) -> None:
        if regno >= MAX_BPF_REG:
            raise _reject(errno.EINVAL, f"R{regno} is invalid")
        if t == SRC_OP:
            if regs[regno].type == NOT_INIT:
                raise _reject(errno.EACCES, f"R{regno} !read_ok")
            return
        if regno == FP:
            raise _reject(errno.EACCES, "frame pointer is read only")
        if t == DST_OP:
            regs[regno] = UNKNOWN

    def new_id(self) -> int:
        self.id_gen += 1
        return self.id_gen

    def acquire_reference(self, state: State, pc: int) -> int:
        """acquire_reference: a reference the program now holds, taken at insn ``pc`` (what
        a leak's message names)."""
        ref = self.new_id()
        state.refs.add(ref)
        self.ref_alloc_insn[ref] = pc
        return ref

    def check_func_call(self, pc: int, insn: Instruction, state: State) -> int:
        """A bpf-to-bpf call of a static subprogram: the callee runs in a frame of its own,
        with the caller's R1-R5; the caller's R1-R5 are not readable after it. A global
        subprogram's call is checked against its signature (``check_global_call``)."""
        if len(state.frames) >= MAX_CALL_FRAMES:
            raise _reject(errno.E2BIG, f"the call stack of {len(state.frames) + 1} frames is "
                          "too deep")
        target = pc + insn.imm + 1
        if self.func_info is not None \
                and self.func_info.func(target).linkage == BTF_FUNC_GLOBAL:
            return self.check_global_call(pc, target, state)
        caller = state.cur
        regs = [UNINIT] * MAX_BPF_REG
        regs[1:6] = caller.regs[1:6]
        depth = len(state.frames)
        regs[FP] = Reg(PTR_TO_STACK, tnum.const(0), frame=depth)
        state.frames.append(Frame(regs, {}, pc, depth))
        for regno in range(1, 6):
            caller.regs[regno] = UNINIT
        return target

    def check_global_call(self, pc: int, target: int, state: State) -> int:
        """check_func_call for a global subprogram: the arguments match its signature
        (btf_check_subprog_call), no lock is held; the subprogram is walked on its own
        later, and here returns an unknown scalar in R0, R1-R5 not readable."""
        subprog = self.subprogs.index(target)
        try:
            self.btf_check_func_arg_match(target, state)
            mismatch = None
        except KernelError as exc:
            mismatch = exc
        if state.active_lock is not None:
            raise _reject(errno.EINVAL, "global function calls are not allowed while holding "
                          "a lock,\nuse static function instead")
        if mismatch is not None:
            raise _reject(mismatch.errno, f"{mismatch.detail}\nCaller passes invalid args into "
                          f"func#{subprog} ('{self.func_info.func(target).name}')")
        self.called_globals.add(target)
        regs = state.cur.regs
        for regno in CALLER_SAVED:
            regs[regno] = UNINIT
        regs[0] = UNKNOWN
        return pc + 1

    def btf_check_func_arg_match(self, target: int, state: State) -> None:
        """R1-R5 against the subprogram's arguments: a scalar for a scalar; the unmodified
        context for the context; for memory NULL or a pointer to enough of it
        (check_mem_reg: a failure there is EINVAL), not NULL if tagged ``arg:nonnull``."""
        args = self.subprog_args.get(target)
        if args is None:
            args = btf_prepare_func_args(self.func_info, target, self.prog_type)
            self.subprog_args[target] = args
        regs = state.cur.regs
        for i, arg in enumerate(args):
            regno = i + 1
            reg = regs[regno]
            if arg.arg_type == ARG_ANYTHING:
                if reg.type != SCALAR:
                    raise _reject(errno.EINVAL, f"R{regno} is not a scalar")
                continue
            if reg.type == PTR_TO_CTX:  # check_func_arg_reg_off
                self.check_ptr_off_reg(regno, reg)
            if arg.arg_type == ARG_PTR_TO_CTX:
                if reg.type != PTR_TO_CTX:
                    raise _reject(errno.EINVAL, f"arg#{i} expects pointer to ctx")
                continue
            try:
                self.check_mem_reg(state, regno, arg.mem_size)
            except VerifierReject as exc:
                raise _reject(errno.EINVAL, exc.detail) from None
            if not arg.maybe_null and (reg.id or reg.is_const):
                raise _reject(errno.EINVAL, f"arg#{i} is expected to be non-NULL")

    def process_exit(self, state: State) -> int | None:
        """The main program's exit ends the path (R0 must be readable and, for some
        program types, a known value in range); a callee's returns to its caller."""
        insn_regs = state.cur.regs
        if len(state.frames) > 1:
            callee = state.cur
            r0 = callee.regs[0]
            if r0.type == PTR_TO_STACK:
                raise _reject(errno.EINVAL, "cannot return stack pointer to the caller")
            if callee.callsite in self.callback_calls:
                self.check_callback_return(r0)
                state.frames.pop()
                return callee.callsite  # the helper may call it again: back to the call
            state.frames.pop()
            state.cur.regs[0] = r0
            return callee.callsite + 1
        if state.active_lock is not None:
            raise _reject(errno.EINVAL, "BPF_EXIT instruction in main prog cannot be used "
                          "inside bpf_spin_lock-ed region")
        self.check_reference_leak(state, "BPF_EXIT instruction in main prog")
        self.check_reg_arg(insn_regs, 0, SRC_OP)
        if state.cur.callsite >= 0:  # a timer's callback (frame 0 of a walk of its own)
            self.check_async_callback_return(insn_regs[0])
        elif self.global_walk:
            if insn_regs[0].type != SCALAR:
                raise _reject(errno.EINVAL, "At subprogram exit the register R0 is not a "
                              f"scalar value ({insn_regs[0].type_str()})")
        else:
            self.check_return_code(insn_regs[0])
        return None

    def check_reference_leak(self, state: State, prefix: str) -> None:
        """check_resource_leak's references: none may be held past ``prefix``; the log
        names each one and where it was taken."""
        if state.refs:
            unreleased = "".join(f"Unreleased reference id={ref} alloc_insn="
                                 f"{self.ref_alloc_insn[ref]}\n" for ref in sorted(state.refs))
            raise _reject(errno.EINVAL, f"{unreleased}{prefix} would lead to reference leak")

    @staticmethod
    def check_callback_return(r0: Reg) -> None:
        """prepare_func_exit for a callback: R0 is a scalar within [0, 1]."""
        if r0.type != SCALAR:
            raise _reject(errno.EACCES, "R0 not a scalar value")
        _check_retval_range(r0, "At callback return", 0, 1)

    @staticmethod
    def check_async_callback_return(r0: Reg) -> None:
        """check_return_code for an async callback: R0 is 0."""
        if r0.type != SCALAR:
            raise _reject(errno.EINVAL, "At async callback return the register R0 is not a "
                          f"known value ({r0.type_str()})")
        _check_retval_range(r0, "At async callback return", 0, 0)

    def check_return_code(self, r0: Reg) -> None:
        low, high = 0, 1
        if self.prog_type == ProgType.CGROUP_SKB:
            if self.attach_type == AttachType.CGROUP_INET_EGRESS:
                high = 3
        else:
            return
        if r0.type != SCALAR:
            raise _reject(errno.EINVAL, f"At program exit the register R0 is not a known value "
                          f"({r0.type_str()})")
        _check_retval_range(r0, "At program exit", low, high)

    # -- legacy packet loads and 64-bit immediates -------------------------------------------
    def check_ld_abs(self, insn: Instruction, info, state: State) -> None:
        regs = state.cur.regs
        if self.prog_type not in LD_ABS_PROG_TYPES:
            raise _reject(errno.EINVAL, "BPF_LD_[ABS|IND] instructions not allowed for this "
                          "program type")
        if insn.dst or insn.off or info.kind is Kind.LD_ABS and insn.src:
            raise _reject(errno.EINVAL, "BPF_LD_[ABS|IND] uses reserved fields")
        self.check_reg_arg(regs, 6, SRC_OP)
        if state.active_lock is not None:
            raise _reject(errno.EINVAL, "BPF_LD_[ABS|IND] cannot be used inside "
                          "bpf_spin_lock-ed region")
        self.check_reference_leak(state, "BPF_LD_[ABS|IND]")
        if regs[6].type != PTR_TO_CTX:
            raise _reject(errno.EINVAL, "at the time of BPF_LD_ABS|IND R6 != pointer to skb")
        if info.kind is Kind.LD_IND:
            self.check_reg_arg(regs, insn.src, SRC_OP)
        if regs[6].off:
            raise _reject(errno.EACCES, f"dereference of modified ctx ptr R6 off={regs[6].off} "
                          "disallowed")
        for regno in CALLER_SAVED:
            regs[regno] = UNINIT
        regs[0] = UNKNOWN

    def check_ld_imm(self, pc: int, insn: Instruction, regs: list[Reg]) -> None:
        if insn.off:
            raise _reject(errno.EINVAL, "BPF_LD_IMM64 uses reserved fields")
        self.check_reg_arg(regs, insn.dst, DST_OP)
        if insn.src == 0:
            regs[insn.dst] = scalar(insn.imm)
            return
        kind, target, off = self.pseudo[pc]
        if kind == "func":
            if self.func_info is None:
                raise _reject(errno.EINVAL, "missing btf func_info")
            if self.func_info.func(target).linkage != BTF_FUNC_STATIC:
                raise _reject(errno.EINVAL, "callback function not static")
            regs[insn.dst] = Reg(PTR_TO_FUNC, tnum.const(0), map=target)
            return
        if kind == "map":
            regs[insn.dst] = Reg(CONST_PTR_TO_MAP, tnum.const(0), map=target)
        elif kind == "kfunc":
            regs[insn.dst] = Reg(PTR_TO_RDONLY_MEM, tnum.const(0))
        else:
            regs[insn.dst] = Reg(PTR_TO_MAP_VALUE, tnum.const(0), off=off,
                                 map=self.pseudo_map[pc])




def _with(states: list[tuple], done: dict[tuple, tuple] | None,
          live_key: tuple | None) -> list[tuple]:
    """``states`` and a state kept with this live part whose paths were all walked."""
    key = done.get(live_key) if done else None
    return states if key is None else [*states, key]


def _check_retval_range(r0: Reg, ctx: str, low: int, high: int) -> None:
    """retval_range_within, and verbose_invalid_scalar's message where R0's signed range
    leaves [low, high]."""
    b = vb.bounds(r0)
    if low <= b.smin and b.smax <= high:
        return
    has = (f" smin={b.smin}" if b.smin > vb.S64_MIN else "") \
        + (f" smax={b.smax}" if b.smax < vb.S64_MAX else "")
    raise _reject(errno.EINVAL, f"{ctx} the register R0 has{has or ' unknown scalar value'} "
                  f"should have been in [{low}, {high}]")


def _callback_target(pc: int, insn: Instruction) -> int:
    """The first slot of the subprogram a uapi.BPF_PSEUDO_FUNC lddw points to (low imm: offset)."""
    offset = insn.imm & 0xFFFFFFFF
    return pc + (offset - (1 << 32) if offset >> 31 else offset) + 1



def _use_def(insn: Instruction) -> tuple[int, int]:
    """Registers an instruction may read, and those it surely writes (for liveness)."""
    info = OPCODES.get(insn.opcode)
    if info is None:
        return 0, 0
    kind, bit = info.kind, (lambda r: 1 << r if r < MAX_BPF_REG else 0)
    if kind is Kind.ALU:
        use = bit(insn.src) if info.source is Source.X else 0
        return use | (0 if info.op is AluOp.MOV else bit(insn.dst)), bit(insn.dst)
    if kind in (Kind.NEG, Kind.END):
        return bit(insn.dst), bit(insn.dst)
    if kind in (Kind.LDX, Kind.LDX_SX):
        return bit(insn.src), bit(insn.dst)
    if kind in (Kind.ST, Kind.STX, Kind.ATOMIC, Kind.JMP):
        return bit(insn.dst) | bit(insn.src) | bit(0), 0
    if kind is Kind.CALL:
        return 0b111110, 0b111111
    if kind is Kind.EXIT:
        return 1, 0
    if kind in (Kind.LD_ABS, Kind.LD_IND):
        return bit(6) | bit(insn.src), 0b111111
    if kind is Kind.LD_IMM64:
        return 0, bit(insn.dst)
    return 0, 0
