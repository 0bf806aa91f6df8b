"""Load-time checks of the emulated backend: what the kernel's verifier rejects in simple cases.

Rules this module keeps:
- Checks run in the kernel's phases (kernel/bpf/verifier.c ``bpf_check``), so the same
  problem wins when a program has several: subprograms (call targets, jump ranges, last
  insn, on the raw slots); opcodes, lddw and map fds; the control-flow graph (unreachable
  insns, call depth); then each instruction a path reaches, its checks in the kernel's order
  (reserved fields and helper ids, operand reads, constant divisors and shifts, R10 writes,
  stack, context and map-value access).
- Dataflows to a fixpoint stand in for the kernel's path walk: which registers every path
  initialised ("R<n> !read_ok" otherwise), which hold a known constant (a branch constants
  decide has one successor, and code behind it is not checked, as with is_branch_taken),
  which hold the context pointer (max_ctx_offset, context access rules per program type),
  which may point to a map or into its values (BPF_F_RDONLY_PROG / BPF_F_WRONLY_PROG).
- Messages and errnos are the kernel's (EINVAL mostly; EACCES for register, stack, context
  and map access; E2BIG for a too-deep call stack; EBADF for an fd that is not open).
- What it does NOT do: track value ranges, pointer types in general or packet bounds, follow
  spilled registers, prove termination. A program the kernel rejects for those reasons may
  load here; the interpreter then catches bad accesses (ProgramFault) and endless loops (its
  budget).
"""

from __future__ import annotations

import errno
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..asm.opcodes import (
    OPCODES,
    AluOp,
    AtomicOp,
    Class,
    Instruction,
    InvalidInstruction,
    JmpOp,
    Kind,
    Source,
    check,
)
from ..errors import KernelError
from ..uapi import (
    BPF_PSEUDO_CALL,
    BPF_PSEUDO_FUNC,
    BPF_PSEUDO_KFUNC_CALL,
    BPF_PSEUDO_MAP_FD,
    BPF_PSEUDO_MAP_VALUE,
    MAX_BPF_STACK,
    BpfFunc,
    MapType,
    ProgType,
)
from .helpers import HELPERS
from .interpreter import ALU_REF, JMP_REF
from .memory import M32, M64
from .semantics import MAX_CALL_FRAMES

LD_IMM64 = 0x18
EXIT = Class.JMP | JmpOp.EXIT
JA = Class.JMP | JmpOp.JA
GOTOL = Class.JMP32 | JmpOp.JA
R10_BIT = 1 << 10
ALL_REGS = (1 << 11) - 1
CALLER_SAVED = 0b111110  # R1-R5
# Program types that may use the legacy packet loads (may_access_skb).
LD_ABS_PROG_TYPES = frozenset({ProgType.SOCKET_FILTER, ProgType.SCHED_CLS, ProgType.SCHED_ACT})
# Maps whose values a program may address directly (map_direct_value_addr).
DIRECT_VALUE_MAP_TYPES = frozenset({MapType.ARRAY})

_SLOT = struct.Struct("<BBhi")


class VerifierReject(KernelError):
    """The program is rejected; ``log`` is the verifier log."""

    def __init__(self, err: int, message: str) -> None:
        super().__init__(err, message)
        self.log = message + "\n"


@dataclass
class VerifiedProgram:
    """What loading keeps: instructions, map references by lddw slot, maps in use order."""

    insns: list[Instruction]
    pseudo: dict[int, tuple[str, Any, int]] = field(default_factory=dict)
    maps: list[Any] = field(default_factory=list)
    processed: int = 0
    max_ctx_offset: int = 0  # bytes of the context the program reads or writes (at most)


def _reject(err: int, message: str) -> VerifierReject:
    return VerifierReject(err, message)


def bpf_check(insns: bytes, prog_type: int, map_from_fd: Callable[[int], Any],
              gpl: bool = True) -> VerifiedProgram:
    """Verify ``insns`` for ``prog_type``; ``map_from_fd(fd)`` resolves lddw map fds (raises
    KernelError); ``gpl``: the license is GPL-compatible. Returns the decoded program or
    raises ``VerifierReject``."""
    return _Verifier(insns, prog_type, map_from_fd, gpl).run()


class _Verifier:
    def __init__(self, data: bytes, prog_type: int, map_from_fd: Callable[[int], Any],
                 gpl: bool = True) -> None:
        self.data = data
        self.gpl = gpl
        self.prog_type = prog_type
        self.map_from_fd = map_from_fd
        self.n = len(data) // 8
        self.raw = [_SLOT.unpack_from(data, 8 * i) for i in range(self.n)]
        self.slots: list[Instruction | None] = []
        self.subprogs: list[int] = [0]

    def run(self) -> VerifiedProgram:
        self.decode_slots()
        self.add_subprog_and_kfunc()
        self.check_subprogs()
        program = self.resolve_pseudo_ldimm64()
        reachable = self.check_cfg()
        self.check_max_stack_depth()
        self.do_check(reachable, program)
        program.processed = len(reachable)
        program.max_ctx_offset = self.max_ctx_offset()
        return program

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
            if insn is not None and insn.opcode == LD_IMM64 and insn.src == BPF_PSEUDO_FUNC:
                target = _callback_target(pc, insn)
                if not 0 <= target < self.n:
                    raise _reject(errno.EINVAL, "call to invalid destination")
                starts.add(target)  # a callback: a subprogram of its own
                continue
            if insn is None or insn.opcode != Class.JMP | JmpOp.CALL:
                continue
            if insn.src == BPF_PSEUDO_KFUNC_CALL:
                raise _reject(errno.EINVAL, f"kernel btf_id {insn.imm} is not a function")
            if insn.src == BPF_PSEUDO_CALL:
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

    def subprog_of(self, pc: int) -> int:
        return max(s for s in self.subprogs if s <= pc)

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
            if pc + 1 >= self.n or code2 or regs2 or off2 or insn.off:
                raise _reject(errno.EINVAL, "invalid bpf_ld_imm64 insn")
            src = insn.src
            if src == 0:
                continue
            if src == BPF_PSEUDO_FUNC:
                continue  # refused by do_check, as the kernel does without BTF
            if src not in (BPF_PSEUDO_MAP_FD, BPF_PSEUDO_MAP_VALUE):
                raise _reject(errno.EINVAL, f"unrecognized bpf_ld_imm64 insn (src {src} is not "
                              "supported by the emulated backend: map fd or map value only)")
            fd = insn.imm & 0xFFFFFFFF
            fd = fd - (1 << 32) if fd >> 31 else fd
            try:
                bpf_map = self.map_from_fd(fd)
            except KernelError as exc:
                raise _reject(exc.errno, f"fd {fd} is not pointing to valid bpf_map") from None
            if bpf_map not in maps:
                maps.append(bpf_map)
            if src == BPF_PSEUDO_MAP_FD:
                pseudo[pc] = ("map", bpf_map, 0)
                continue
            off = (insn.imm >> 32) & 0xFFFFFFFF
            if bpf_map.map_type not in DIRECT_VALUE_MAP_TYPES:
                raise _reject(errno.EINVAL, "no direct value access support for this map type")
            if off >= bpf_map.value_size:
                raise _reject(errno.EINVAL, f"invalid access to map value pointer, value_size="
                              f"{bpf_map.value_size} off={off}")
            value = bpf_map.map_lookup_elem(b"\0\0\0\0")
            pseudo[pc] = ("map_value", value, off)
        return VerifiedProgram(insns, pseudo, maps)

    # -- phase 4: control flow -------------------------------------------------------------------
    def successors(self, pc: int) -> list[int]:
        insn = self.slots[pc]
        info = OPCODES[insn.opcode]
        if info.kind is Kind.EXIT:
            return []
        nxt = pc + insn.slots if insn.opcode == LD_IMM64 else pc + 1
        if info.kind is Kind.JA:
            return [_jump_target(pc, insn)]
        if info.kind in (Kind.JMP, Kind.JCOND):
            return [nxt, _jump_target(pc, insn)]
        if info.kind is Kind.CALL and insn.src == BPF_PSEUDO_CALL:
            return [nxt, pc + insn.imm + 1]
        if insn.opcode == LD_IMM64 and insn.src == BPF_PSEUDO_FUNC:
            return [nxt, _callback_target(pc, insn)]  # the callback is reached from here
        return [nxt]

    def check_cfg(self) -> list[int]:
        seen = [False] * self.n
        stack = [0]
        seen[0] = True
        while stack:
            pc = stack.pop()
            if self.slots[pc] is None:  # a jump into lddw's second slot
                continue
            for succ in self.successors(pc):
                if succ < self.n and not seen[succ]:
                    seen[succ] = True
                    stack.append(succ)
        for pc in range(self.n):
            if self.slots[pc] is None:
                if seen[pc - 1]:
                    continue
            if not seen[pc]:
                raise _reject(errno.EINVAL, f"unreachable insn {pc}")
        return [pc for pc in range(self.n) if self.slots[pc] is not None]

    def check_max_stack_depth(self) -> None:
        callees: dict[int, set[int]] = {s: set() for s in self.subprogs}
        for pc, insn in enumerate(self.slots):
            if insn is not None and insn.opcode == Class.JMP | JmpOp.CALL \
                    and insn.src == BPF_PSEUDO_CALL:
                callees[self.subprog_of(pc)].add(pc + insn.imm + 1)
            elif insn is not None and insn.opcode == LD_IMM64 and insn.src == BPF_PSEUDO_FUNC:
                callees[self.subprog_of(pc)].add(_callback_target(pc, insn))

        def depth(sub: int, frames: int) -> None:
            if frames > MAX_CALL_FRAMES:
                raise _reject(errno.E2BIG, f"the call stack of {frames} frames is too deep")
            for callee in callees[sub]:
                depth(callee, frames + 1)

        depth(0, 1)

    # -- phase 5: each instruction, and the registers' dataflow ----------------------------------
    def do_check(self, reachable: list[int], program: VerifiedProgram) -> None:
        init = self.register_dataflow()
        pointers = self.map_pointer_dataflow(program)
        for pc in reachable:
            if init[pc] is None:
                continue  # behind a branch constants decide: never runs, never checked
            insn = self.slots[pc]
            reads = _reads(insn)
            if OPCODES[insn.opcode].kind is Kind.JMP:  # check_cond_jmp_op reads dst first
                self.check_reads(reads[:1], init[pc])
                reads = reads[1:]
            self.check_fields(pc, insn)
            self.check_reads(reads, init[pc])
            self.check_insn(pc, insn)
            self.check_map_access(insn, pointers[pc])

    # -- which registers may point to a map or into a map's value --------------------------------
    def map_pointer_dataflow(self, program: VerifiedProgram) -> list[tuple | None]:
        """Per slot, per register: the set of ("map", map) / ("value", map, off) it may hold
        (a may-analysis; ``off`` None once unknown). Enough to apply BPF_F_RDONLY_PROG and
        BPF_F_WRONLY_PROG as the kernel does; spills to the stack are not followed."""
        empty = frozenset()
        state: list[tuple | None] = [None] * self.n
        work = []
        for start in self.subprogs:
            state[start] = (empty,) * 16  # src/dst fields hold 0-15
            work.append(start)
        while work:
            pc = work.pop()
            insn = self.slots[pc]
            if insn is None:
                continue
            out = _pointer_transfer(insn, state[pc], program.pseudo.get(pc))
            for succ in self.successors(pc):
                if succ >= self.n or (succ in self.subprogs and succ != pc + 1):
                    continue
                old = state[succ]
                if old is None:
                    new = out
                else:  # widen: an offset not seen here before becomes unknown
                    new = tuple(a | frozenset(t if t in a or t[0] == "map" else t[:2] + (None,)
                                              for t in b) for a, b in zip(old, out, strict=True))
                if new != old:
                    state[succ] = new
                    work.append(succ)
        return state

    def check_map_access(self, insn: Instruction, regs: tuple | None) -> None:
        if regs is None:
            return
        info = OPCODES[insn.opcode]
        kind = info.kind
        if kind is Kind.CALL and insn.src == 0 and insn.imm in _MAP_WRITING_HELPERS:
            for tag in regs[1]:
                if tag[0] == "map" and tag[1].map_flags & BPF_F_RDONLY_PROG:
                    raise _reject(errno.EACCES, "write into map forbidden")
            return
        accesses = []
        if kind in (Kind.LDX, Kind.LDX_SX):
            accesses = [(insn.src, "read from")]
        elif kind in (Kind.ST, Kind.STX):
            accesses = [(insn.dst, "write into")]
        elif kind is Kind.ATOMIC and insn.imm == AtomicOp.LOAD_ACQ:
            accesses = [(insn.src, "read from")]
        elif kind is Kind.ATOMIC:
            accesses = [(insn.dst, "read from"), (insn.dst, "write into")]
        for reg, access in accesses:
            for tag in regs[reg]:
                if tag[0] != "value":
                    continue
                bpf_map, off = tag[1], tag[2]
                flag = BPF_F_WRONLY_PROG if access == "read from" else BPF_F_RDONLY_PROG
                if bpf_map.map_flags & flag:
                    where = insn.off + (off or 0)
                    raise _reject(errno.EACCES, f"{access} map forbidden, value_size="
                                  f"{bpf_map.value_size} off={where} size={info.nbytes}")

    def check_fields(self, pc: int, insn: Instruction) -> None:
        """What the kernel checks before reading operands: registers, reserved fields, the
        helper id, whether legacy packet loads are allowed here."""
        info = OPCODES[insn.opcode]
        kind = info.kind
        for reg in (insn.dst, insn.src):
            if reg > 10:
                raise _reject(errno.EINVAL, f"R{reg} is invalid")
        try:
            check(insn, pc)
        except InvalidInstruction:
            raise _reject(errno.EINVAL, _reserved_message(info, insn)) from None
        if kind in (Kind.LD_ABS, Kind.LD_IND):
            if self.prog_type not in LD_ABS_PROG_TYPES:
                raise _reject(errno.EINVAL, "BPF_LD_[ABS|IND] instructions not allowed for this "
                              "program type")
            if len(self.subprogs) > 1:
                raise _reject(errno.EINVAL, "BPF_LD_[ABS|IND] instructions cannot be mixed with "
                              "bpf-to-bpf calls")
        if kind is Kind.CALL and insn.src == 0:
            self.check_helper(insn.imm)

    def check_insn(self, pc: int, insn: Instruction) -> None:
        """What the kernel checks once the operands are readable: constant divisors and
        shifts, the destination (R10 is read-only), stack bounds, callbacks."""
        info = OPCODES[insn.opcode]
        kind = info.kind
        if kind is Kind.ALU and info.source is Source.K:
            if info.op in (AluOp.DIV, AluOp.MOD) and insn.imm == 0:
                raise _reject(errno.EINVAL, "div by zero")
            bits = 64 if info.is64 else 32
            if info.op in (AluOp.LSH, AluOp.RSH, AluOp.ARSH) and not 0 <= insn.imm < bits:
                raise _reject(errno.EINVAL, f"invalid shift {insn.imm}")
        if insn.dst == 10 and _writes_dst(info, insn):
            raise _reject(errno.EACCES, "frame pointer is read only")
        if kind in (Kind.LDX, Kind.LDX_SX) and insn.src == 10:
            self.check_stack(insn.off, info.nbytes, "read from")
        if kind in (Kind.ST, Kind.STX, Kind.ATOMIC) and insn.dst == 10:
            self.check_stack(insn.off, info.nbytes, "write to")
        if kind is Kind.LD_IMM64 and insn.src == BPF_PSEUDO_FUNC:
            # callbacks (bpf_loop, timers, ...) need BTF func_info, which loads here do not pass
            raise _reject(errno.EINVAL, "missing btf func_info")

    @staticmethod
    def check_stack(off: int, size: int, access: str) -> None:
        if off % size:
            raise _reject(errno.EACCES, f"misaligned stack access off 0+0+{off} size {size}")
        if off < -MAX_BPF_STACK or off + size > 0:
            raise _reject(errno.EACCES, f"invalid {access} stack R10 off={off} size={size}")

    def check_helper(self, func_id: int) -> None:
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

    @staticmethod
    def check_reads(regs: list[int], init: int) -> None:
        for reg in regs:
            if not init >> reg & 1:
                raise _reject(errno.EACCES, f"R{reg} !read_ok")

    def max_ctx_offset(self) -> int:
        """prog->aux->max_ctx_offset: the end of the furthest context access of the main
        program, following which registers surely hold the context pointer (R1 at entry).
        Each such access must be one the program type's context allows (EACCES)."""
        holds = [ALL_REGS] * self.n
        visited = [False] * self.n
        holds[0], visited[0] = 0b10, True
        end = self.subprogs[1] if len(self.subprogs) > 1 else self.n
        work = [0]
        while work:
            pc = work.pop()
            insn = self.slots[pc]
            if insn is None:
                continue
            out = _ctx_transfer(insn, holds[pc])
            for succ in self.successors(pc):
                if succ >= end:
                    continue
                new = out if not visited[succ] else holds[succ] & out
                if not visited[succ] or new != holds[succ]:
                    holds[succ], visited[succ] = new, True
                    work.append(succ)
        furthest = 0
        for pc in range(end):
            insn = self.slots[pc]
            if insn is None or not visited[pc]:
                continue
            info = OPCODES.get(insn.opcode)
            if info is None:
                continue
            write = info.kind in (Kind.ST, Kind.STX, Kind.ATOMIC)
            base = insn.src if info.kind in (Kind.LDX, Kind.LDX_SX) else (
                insn.dst if write else None)
            if base is not None and base <= 10 and holds[pc] >> base & 1:
                if not ctx_access_ok(self.prog_type, insn.off, info.nbytes, write):
                    raise _reject(errno.EACCES, f"invalid bpf_context access off={insn.off} "
                                  f"size={info.nbytes}")
                furthest = max(furthest, insn.off + info.nbytes)
        return furthest

    def register_dataflow(self) -> list[int | None]:
        """Registers initialised on every path into each slot (a must-analysis to a fixpoint),
        None for slots no path reaches. Registers holding a known constant are followed too,
        so a branch decided by constants has one successor, as in the kernel's
        is_branch_taken: code behind it is not checked."""
        unknown = (None,) * 16
        state: list[tuple[int, tuple] | None] = [None] * self.n
        entry = {s: (0b10 | R10_BIT) if s == 0 else (CALLER_SAVED | R10_BIT)
                 for s in self.subprogs}
        work = list(entry)
        for start, regs in entry.items():
            state[start] = (regs, unknown)
        while work:
            pc = work.pop()
            insn = self.slots[pc]
            if insn is None:
                continue
            init, consts = state[pc]
            out = (_transfer(insn, init), _const_transfer(insn, consts))
            for succ in self.taken_successors(pc, insn, consts):
                if succ >= self.n or succ in entry and succ != pc + insn.slots:
                    continue  # an edge into a callee or callback: it has its own entry state
                old = state[succ]
                new = out if old is None else (old[0] & out[0], tuple(
                    a if a == b else None for a, b in zip(old[1], out[1], strict=True)))
                if new != old:
                    state[succ] = new
                    work.append(succ)
        return [None if st is None else st[0] for st in state]

    def taken_successors(self, pc: int, insn: Instruction, consts: tuple) -> list[int]:
        info = OPCODES[insn.opcode]
        if info.kind is Kind.JMP:
            dst = consts[insn.dst]
            src = consts[insn.src] if info.source is Source.X else insn.imm
            if dst is not None and src is not None:
                bits = 64 if info.is64 else 32
                mask = (1 << bits) - 1
                taken = JMP_REF[info.op](dst & mask, src & mask, bits)
                return [_jump_target(pc, insn)] if taken else [pc + 1]
        return self.successors(pc)


def _callback_target(pc: int, insn: Instruction) -> int:
    """The first slot of the subprogram a BPF_PSEUDO_FUNC lddw points to (low imm: offset)."""
    offset = insn.imm & 0xFFFFFFFF
    return pc + (offset - (1 << 32) if offset >> 31 else offset) + 1


def _jump_target(pc: int, insn: Instruction | None) -> int | None:
    info = OPCODES.get(insn.opcode) if insn is not None else None
    if info is None:
        return None
    if info.kind is Kind.JA:
        return pc + (insn.imm if info.cls is Class.JMP32 else insn.off) + 1
    if info.kind in (Kind.JMP, Kind.JCOND):
        return pc + insn.off + 1
    return None


def _writes_dst(info, insn: Instruction) -> bool:
    kind = info.kind
    if kind in (Kind.ALU, Kind.NEG, Kind.END, Kind.LD_IMM64, Kind.LDX, Kind.LDX_SX):
        return True
    return kind is Kind.ATOMIC and insn.imm == AtomicOp.LOAD_ACQ


def _reads(insn: Instruction) -> list[int]:
    """Registers ``insn`` reads, in the order the kernel checks them (src before dst, but for
    conditional jumps)."""
    info = OPCODES[insn.opcode]
    kind = info.kind
    if kind is Kind.ALU:
        regs = [] if info.op is AluOp.MOV else [insn.dst]
        return [insn.src] + regs if info.source is Source.X else regs
    if kind in (Kind.NEG, Kind.END):
        return [insn.dst]
    if kind is Kind.JMP:
        return [insn.dst, insn.src] if info.source is Source.X else [insn.dst]
    if kind in (Kind.LDX, Kind.LDX_SX):
        return [insn.src]
    if kind is Kind.ST:
        return [insn.dst]
    if kind is Kind.STX:
        return [insn.src, insn.dst]
    if kind is Kind.ATOMIC:
        if insn.imm == AtomicOp.LOAD_ACQ:
            return [insn.src]
        regs = [insn.src, insn.dst]
        return regs + [0] if insn.imm == AtomicOp.CMPXCHG else regs
    if kind is Kind.CALL:
        if insn.src == BPF_PSEUDO_CALL:
            return []
        proto = HELPERS.get(insn.imm)
        return list(range(1, proto.nargs + 1)) if proto else []
    if kind is Kind.EXIT:
        return [0]
    if kind is Kind.LD_ABS:
        return [6]
    if kind is Kind.LD_IND:
        return [6, insn.src]
    return []


def _transfer(insn: Instruction, regs: int) -> int:
    """Registers initialised after ``insn`` given those before."""
    info = OPCODES[insn.opcode]
    kind = info.kind
    if _writes_dst(info, insn):
        return regs | 1 << insn.dst
    if kind is Kind.ATOMIC:
        if insn.imm == AtomicOp.CMPXCHG:
            return regs | 1
        if insn.imm & 1:  # fetch variants and xchg load into src
            return regs | 1 << insn.src
        return regs
    if kind is Kind.CALL:
        regs &= ~CALLER_SAVED
        if insn.src == 0 and insn.imm == BpfFunc.tail_call:
            return regs & ~1  # RET_VOID: R0 is not readable after a failed tail call
        return regs | 1
    if kind in (Kind.LD_ABS, Kind.LD_IND):
        return (regs & ~CALLER_SAVED) | 1
    return regs


# -- what each program type's context lets a program read and write -------------------------------
# struct __sk_buff: 4-byte fields readable by every skb program type; what direct packet access
# types add; pointer fields (4-byte loads only); 8-byte fields; writable fields.
_SKB_READ = frozenset(range(0, 72, 4)) | {84, 164, 176}
_SKB_READ_TC = _SKB_READ | {72, 76, 80, 140, 160}
_SKB_POINTERS = frozenset({76, 80, 140})
_SKB_READ_8 = frozenset({152, 184})
_SKB_CB = range(48, 68)
_SKB_WRITE_TC = frozenset({8, 12, 32, 44, 72})  # mark, queue_mapping, priority, tc_index,
_SKB_WRITE_CGROUP = frozenset({8, 32})  # tc_classid; cgroup skb: mark, priority
_TC_TYPES = frozenset({ProgType.SCHED_CLS, ProgType.SCHED_ACT})
_SKB_TYPES = frozenset({ProgType.SOCKET_FILTER, ProgType.SCHED_CLS, ProgType.SCHED_ACT,
                        ProgType.CGROUP_SKB, ProgType.LWT_IN, ProgType.LWT_OUT,
                        ProgType.LWT_XMIT})
PERF_MAX_TRACE_SIZE = 8192
MAX_BPF_FUNC_ARGS = 12


def ctx_access_ok(prog_type: int, off: int, size: int, write: bool) -> bool:
    """Whether a program of ``prog_type`` may read (or write) ``size`` bytes of its context at
    ``off`` (the types' is_valid_access; types not modelled here are not checked)."""
    if off < 0 or off % size:
        return False
    if prog_type == ProgType.XDP:
        return not write and size == 4 and off < 20  # egress_ifindex: devmap programs only
    if prog_type == ProgType.TRACEPOINT:
        return not write and 8 <= off < PERF_MAX_TRACE_SIZE
    if prog_type == ProgType.RAW_TRACEPOINT:
        return not write and off < 8 * MAX_BPF_FUNC_ARGS
    if prog_type == ProgType.SYSCALL:
        return off < 0xFFFF
    if prog_type not in _SKB_TYPES:
        return True
    if off in _SKB_READ_8 or off - 4 in _SKB_READ_8:
        return size == 8 and off in _SKB_READ_8 and (
            not write or (off == 152 and prog_type in _TC_TYPES))
    if write:
        if off in _SKB_CB:
            return off + size <= _SKB_CB.stop
        writable = _SKB_WRITE_TC if prog_type in _TC_TYPES else (
            _SKB_WRITE_CGROUP if prog_type == ProgType.CGROUP_SKB else frozenset())
        return size == 4 and off in writable
    field = off - off % 4
    readable = _SKB_READ_TC if prog_type in _TC_TYPES else _SKB_READ
    if field not in readable or (field in _SKB_POINTERS and size != 4):
        return False
    return size <= 4 or off in _SKB_CB and off + size <= _SKB_CB.stop


BPF_F_RDONLY_PROG = 0x80
BPF_F_WRONLY_PROG = 0x100
_MAP_WRITING_HELPERS = frozenset({BpfFunc.map_update_elem, BpfFunc.map_delete_elem,
                                  BpfFunc.map_push_elem, BpfFunc.map_pop_elem})
_VALUE_RETURNING_HELPERS = frozenset({BpfFunc.map_lookup_elem,
                                      BpfFunc.map_lookup_percpu_elem})
_NO_POINTER: frozenset = frozenset()


def _pointer_transfer(insn: Instruction, regs: tuple, pseudo: tuple | None) -> tuple:
    """map_pointer_dataflow's step: which map pointers each register may hold after."""
    info = OPCODES[insn.opcode]
    kind = info.kind
    out = list(regs)
    if kind is Kind.LD_IMM64:
        if pseudo is None:
            out[insn.dst] = _NO_POINTER
        elif pseudo[0] == "map":
            out[insn.dst] = frozenset({("map", pseudo[1])})
        else:
            out[insn.dst] = _NO_POINTER  # direct value: the verifier's map is not kept here
        return tuple(out)
    if kind is Kind.ALU:
        if info.is64 and info.op is AluOp.MOV and info.source is Source.X and not insn.off:
            out[insn.dst] = regs[insn.src]
        elif info.is64 and info.op in (AluOp.ADD, AluOp.SUB):
            delta = None
            if info.source is Source.K:
                delta = insn.imm if info.op is AluOp.ADD else -insn.imm
            out[insn.dst] = frozenset(
                ("value", t[1], None if delta is None or t[2] is None else t[2] + delta)
                for t in regs[insn.dst] if t[0] == "value")
        else:
            out[insn.dst] = _NO_POINTER
        return tuple(out)
    if kind is Kind.CALL:
        result = _NO_POINTER
        if insn.src == 0 and insn.imm in _VALUE_RETURNING_HELPERS:
            result = frozenset(("value", t[1], 0) for t in regs[1] if t[0] == "map")
        out[0] = result
        for reg in range(1, 6):
            out[reg] = _NO_POINTER
        return tuple(out)
    if kind in (Kind.LD_ABS, Kind.LD_IND):
        for reg in range(0, 6):
            out[reg] = _NO_POINTER
        return tuple(out)
    if _writes_dst(info, insn):
        out[insn.dst] = _NO_POINTER
    elif kind is Kind.ATOMIC and insn.imm & 1:
        out[0 if insn.imm == AtomicOp.CMPXCHG else insn.src] = _NO_POINTER
    return tuple(out)


def _const_transfer(insn: Instruction, consts: tuple) -> tuple:
    """Known constant register values after ``insn`` (None: not known)."""
    info = OPCODES[insn.opcode]
    kind = info.kind
    out = list(consts)
    if kind is Kind.LD_IMM64:
        out[insn.dst] = insn.imm & ((1 << 64) - 1) if insn.src == 0 else None
    elif kind is Kind.ALU:
        bits = 64 if info.is64 else 32
        mask = (1 << bits) - 1
        src = consts[insn.src] if info.source is Source.X else insn.imm
        dst = 0 if info.op is AluOp.MOV else consts[insn.dst]
        out[insn.dst] = None if src is None or dst is None else \
            ALU_REF[info.op](dst & mask, src & mask, insn.off, bits) & mask
    elif kind is Kind.NEG:
        dst = consts[insn.dst]
        out[insn.dst] = None if dst is None else -dst & (M64 if info.is64 else M32)
    elif kind is Kind.CALL or kind in (Kind.LD_ABS, Kind.LD_IND):
        for reg in range(6):
            out[reg] = None
    elif _writes_dst(info, insn) or kind is Kind.END:
        out[insn.dst] = None
    elif kind is Kind.ATOMIC and insn.imm & 1:
        out[0 if insn.imm == AtomicOp.CMPXCHG else insn.src] = None
    return tuple(out)


def _ctx_transfer(insn: Instruction, holds: int) -> int:
    """Registers holding the context pointer after ``insn``: kept by ``mov64 rX, rY`` of a
    holder, lost by any other write (and by calls, for R0-R5)."""
    info = OPCODES[insn.opcode]
    if info.kind is Kind.ALU and info.op is AluOp.MOV and info.is64 \
            and info.source is Source.X and not insn.off:
        if holds >> insn.src & 1:
            return holds | 1 << insn.dst
        return holds & ~(1 << insn.dst)
    if info.kind is Kind.CALL or info.kind in (Kind.LD_ABS, Kind.LD_IND):
        return holds & ~(CALLER_SAVED | 1)
    if _writes_dst(info, insn):
        return holds & ~(1 << insn.dst)
    if info.kind is Kind.ATOMIC and insn.imm & 1:
        return holds & ~(1 << (0 if insn.imm == AtomicOp.CMPXCHG else insn.src))
    return holds


def _reserved_message(info, insn: Instruction) -> str:
    kind = info.kind
    if kind is Kind.ALU:
        return "BPF_MOV uses reserved fields" if info.op is AluOp.MOV else \
            "BPF_ALU uses reserved fields"
    names = {Kind.NEG: "BPF_NEG", Kind.END: "BPF_END", Kind.JA: "BPF_JA", Kind.CALL: "BPF_CALL",
             Kind.EXIT: "BPF_EXIT", Kind.JMP: "BPF_JMP/JMP32", Kind.JCOND: "BPF_JCOND",
             Kind.LDX: "BPF_LDX", Kind.LDX_SX: "BPF_LDX", Kind.ST: "BPF_ST",
             Kind.STX: "BPF_STX", Kind.LD_ABS: "BPF_LD_[ABS|IND]",
             Kind.LD_IND: "BPF_LD_[ABS|IND]"}
    if kind is Kind.ATOMIC:
        return f"BPF_ATOMIC uses invalid atomic opcode {insn.imm:02x}"
    if kind is Kind.LD_IMM64:
        return "invalid BPF_LD_IMM insn"
    return f"{names[kind]} uses reserved fields"
