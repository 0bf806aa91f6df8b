"""The reference interpreter (kernel/bpf/core.c ``___bpf_prog_run``): one instruction at a
time, dispatched on the opcode table's ``Kind``.

Semantics are the kernel's after the verifier's rewrites: registers are unsigned 64-bit;
32-bit ALU results are zero-extended; unsigned division by zero gives 0 and modulo by zero
leaves dst (32-bit: zero-extended); shift amounts are masked (& 63 / & 31); bpf-to-bpf calls
get their own 512-byte stack and keep R6-R9. The JIT (jit.py) must agree with it (tests
compare them).
"""

from __future__ import annotations

import errno
from collections.abc import Callable
from typing import TYPE_CHECKING

from ...asm.opcodes import ATOMIC_FETCH, OPCODES, AluOp, AtomicOp, Class, JmpOp, Kind, Source
from ...errors import ProgramFault
from ...uapi import BPF_PSEUDO_CALL, BPF_PSEUDO_KFUNC_CALL, MAX_BPF_STACK, BpfFunc
from .memory import BPF_MAX_LOOPS, M32, M64, RunState, mem_load, mem_store
from .semantics import atomic_op, bswap, ld_abs, sdiv, smod, tail_call

if TYPE_CHECKING:
    from .executable import Executable

ALU_REF: dict[int, Callable[[int, int, int, int], int]] = {
    # (dst, src, off, bits) -> result within ``bits``; unsigned operands already masked
    AluOp.ADD: lambda d, s, off, bits: d + s,
    AluOp.SUB: lambda d, s, off, bits: d - s,
    AluOp.MUL: lambda d, s, off, bits: d * s,
    AluOp.DIV: lambda d, s, off, bits: sdiv(d, s, bits) if off else (d // s if s else 0),
    AluOp.OR: lambda d, s, off, bits: d | s,
    AluOp.AND: lambda d, s, off, bits: d & s,
    AluOp.LSH: lambda d, s, off, bits: d << (s & (bits - 1)),
    AluOp.RSH: lambda d, s, off, bits: d >> (s & (bits - 1)),
    AluOp.MOD: lambda d, s, off, bits: smod(d, s, bits) if off else (d % s if s else d),
    AluOp.XOR: lambda d, s, off, bits: d ^ s,
    AluOp.MOV: lambda d, s, off, bits: _sign_extend(s, off) if off else s,
    AluOp.ARSH: lambda d, s, off, bits: _signed(d, bits) >> (s & (bits - 1)),
}

JMP_REF: dict[int, Callable[[int, int, int], bool]] = {
    # (dst, src, bits) -> taken; operands unsigned within ``bits``
    JmpOp.JEQ: lambda d, s, bits: d == s,
    JmpOp.JNE: lambda d, s, bits: d != s,
    JmpOp.JGT: lambda d, s, bits: d > s,
    JmpOp.JGE: lambda d, s, bits: d >= s,
    JmpOp.JLT: lambda d, s, bits: d < s,
    JmpOp.JLE: lambda d, s, bits: d <= s,
    JmpOp.JSET: lambda d, s, bits: bool(d & s),
    JmpOp.JSGT: lambda d, s, bits: _signed(d, bits) > _signed(s, bits),
    JmpOp.JSGE: lambda d, s, bits: _signed(d, bits) >= _signed(s, bits),
    JmpOp.JSLT: lambda d, s, bits: _signed(d, bits) < _signed(s, bits),
    JmpOp.JSLE: lambda d, s, bits: _signed(d, bits) <= _signed(s, bits),
}


def _signed(value: int, bits: int) -> int:
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >> (bits - 1) else value


def _sign_extend(value: int, bits: int) -> int:
    return _signed(value, bits) & M64


class Interpreter:
    """The reference engine: decode-free stepping over ``Executable.slots``."""

    def __init__(self, exe: Executable) -> None:
        self.exe = exe
        # per slot: (info, kind, bits, mask, insn), looked up once rather than every step
        self.steps = [None if insn is None else (
            OPCODES[insn.opcode], OPCODES[insn.opcode].kind,
            64 if OPCODES[insn.opcode].is64 else 32, M64 if OPCODES[insn.opcode].is64 else M32,
            insn) for insn in exe.slots]

    def entry_of(self, start: int) -> Callable:
        """``f(rs, r1, r2, r3, r4, r5) -> r0`` running the subprogram at ``start``."""
        def entry(rs: RunState, r1: int, r2: int, r3: int, r4: int, r5: int) -> int:
            return self.run_frame(rs, start, (r1, r2, r3, r4, r5))

        return entry

    def run_frame(self, rs: RunState, start: int, args: tuple[int, ...]) -> int:
        exe = self.exe
        steps = self.steps
        regs = [0] * 11
        regs[1:6] = args
        stack = bytearray(MAX_BPF_STACK)
        frame = rs.add_region(stack)
        regs[10] = frame | MAX_BPF_STACK
        may_goto = BPF_MAX_LOOPS
        pc = start
        try:
            while True:
                info, kind, bits, mask, insn = steps[pc]
                rs.count += 1
                if rs.count > rs.budget:
                    raise rs.over_budget(pc)
                _, dst, src, off, imm = insn
                if kind is Kind.ALU:
                    s = (regs[src] if info.source is Source.X else imm) & mask
                    regs[dst] = ALU_REF[info.op](regs[dst] & mask, s, off, bits) & mask
                elif kind is Kind.NEG:
                    regs[dst] = -regs[dst] & mask
                elif kind is Kind.END:
                    if info.cls is Class.ALU and info.source is Source.K:  # to little endian
                        regs[dst] &= (1 << imm) - 1
                    else:  # to big endian, or bswap
                        regs[dst] = bswap(regs[dst], imm)
                elif kind is Kind.JA:
                    pc += (imm if info.cls is Class.JMP32 else off) + 1
                    continue
                elif kind is Kind.JCOND:
                    if may_goto == 0:
                        pc += off + 1
                        continue
                    may_goto -= 1
                elif kind is Kind.JMP:
                    d = regs[dst] & mask
                    s = (regs[src] if info.source is Source.X else imm) & mask
                    if JMP_REF[info.op](d, s, bits):
                        pc += off + 1
                        continue
                elif kind is Kind.CALL:
                    if src == BPF_PSEUDO_CALL:
                        regs[0] = self.run_frame(rs, pc + imm + 1, tuple(regs[1:6]))
                    elif src == BPF_PSEUDO_KFUNC_CALL:
                        regs[0] = exe.kfuncs[imm](rs, *regs[1:6]) & M64
                    elif imm == BpfFunc.tail_call:
                        target = tail_call(rs, regs[1], regs[2], regs[3])
                        if target is not None:
                            return rs.entry_of(target, 0)(rs, regs[1], 0, 0, 0, 0)
                    else:
                        regs[0] = exe.helpers[imm](rs, *regs[1:6]) & M64
                elif kind is Kind.EXIT:
                    return regs[0]
                elif kind is Kind.LD_IMM64:
                    regs[dst] = exe.ld_imm[pc]
                    pc += 2
                    continue
                elif kind is Kind.LDX or kind is Kind.LDX_SX:
                    value = mem_load(rs, (regs[src] + off) & M64, info.nbytes, pc)
                    if kind is Kind.LDX_SX:
                        value = _sign_extend(value, 8 * info.nbytes)
                    regs[dst] = value
                elif kind is Kind.ST:
                    mem_store(rs, (regs[dst] + off) & M64, info.nbytes, imm & M64, pc)
                elif kind is Kind.STX:
                    mem_store(rs, (regs[dst] + off) & M64, info.nbytes, regs[src], pc)
                elif kind is Kind.ATOMIC:
                    addr = (regs[dst] + off) & M64
                    if imm == AtomicOp.LOAD_ACQ:
                        regs[dst] = atomic_op(rs, (regs[src] + off) & M64, info.nbytes, imm, 0,
                                              0, pc)
                    else:
                        old = atomic_op(rs, addr, info.nbytes, imm, regs[src], regs[0], pc)
                        if imm == AtomicOp.CMPXCHG:
                            regs[0] = old
                        elif imm & ATOMIC_FETCH:
                            regs[src] = old
                elif kind is Kind.LD_ABS:
                    regs[0] = ld_abs(rs, imm, info.nbytes)
                elif kind is Kind.LD_IND:
                    regs[0] = ld_abs(rs, regs[src] + imm, info.nbytes)
                else:  # pragma: no cover - every Kind is handled above
                    raise ProgramFault(errno.EINVAL, f"insn {pc}: cannot execute {info.name}",
                                       pc=pc)
                pc += 1
        finally:
            del rs.mem[frame >> 32]
