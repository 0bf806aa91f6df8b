"""Hypothesis strategies: well-formed instructions of every opcode, and verifiable programs."""

from __future__ import annotations

from hypothesis import strategies as st

from pybpf.asm import (
    OPCODES,
    AluOp,
    Class,
    Instruction,
    Kind,
    Size,
    Source,
)
from pybpf.asm.opcodes import ATOMIC_IMMS_NARROW, ATOMIC_IMMS_WIDE

regs = st.integers(0, 10)
s16 = st.integers(-(1 << 15), (1 << 15) - 1)
s32 = st.integers(-(1 << 31), (1 << 31) - 1)
s64 = st.integers(-(1 << 63), (1 << 63) - 1)
u32 = st.integers(0, (1 << 32) - 1)
_ZERO = st.just(0)


def instructions_of(code: int) -> st.SearchStrategy[Instruction]:
    """Every well-formed instruction with opcode ``code`` (fields the kernel allows)."""
    info = OPCODES[code]
    kind, k = info.kind, info.source is Source.K

    def insn(dst=_ZERO, src=_ZERO, off=_ZERO, imm=_ZERO):
        return st.builds(Instruction, st.just(code), dst, src, off, imm)

    if kind is Kind.ALU:
        if info.op in (AluOp.DIV, AluOp.MOD):
            offs = st.sampled_from([0, 1])
        elif info.op is AluOp.MOV and not k:
            offs = st.sampled_from([0, 8, 16, 32] if info.is64 else [0, 8, 16])
        else:
            offs = st.just(0)
        return insn(regs, st.just(0) if k else regs, offs, s32 if k else st.just(0))
    if kind is Kind.NEG:
        return insn(regs)
    if kind is Kind.END:
        return insn(regs, imm=st.sampled_from([16, 32, 64]))
    if kind is Kind.JA:
        return insn(off=s16) if info.cls is Class.JMP else insn(imm=s32)
    if kind is Kind.JCOND:
        return insn(off=s16)
    if kind is Kind.JMP:
        return insn(regs, st.just(0) if k else regs, s16, s32 if k else st.just(0))
    if kind is Kind.CALL:
        return st.one_of(insn(imm=s32), insn(src=st.just(1), imm=s32),
                         insn(src=st.just(2), off=s16, imm=s32))
    if kind is Kind.EXIT:
        return insn()
    if kind is Kind.LD_IMM64:
        return st.one_of(insn(regs, st.sampled_from([0, 2, 3, 6]), imm=s64),
                         insn(regs, st.sampled_from([1, 4, 5]), imm=u32))
    if kind is Kind.LD_ABS:
        return insn(imm=s32)
    if kind is Kind.LD_IND:
        return insn(src=regs, imm=s32)
    if kind in (Kind.LDX, Kind.LDX_SX, Kind.STX):
        return insn(regs, regs, s16)
    if kind is Kind.ST:
        return insn(regs, off=s16, imm=s32)
    assert kind is Kind.ATOMIC
    imms = ATOMIC_IMMS_WIDE if info.size in (Size.W, Size.DW) else ATOMIC_IMMS_NARROW
    return insn(regs, regs, s16, st.sampled_from(sorted(int(i) for i in imms)))


any_instruction = st.sampled_from(sorted(OPCODES)).flatmap(instructions_of)


# -- verifiable programs: ALU on initialised scalars ----------------------------------------------

ALU_CODES = sorted(code for code, info in OPCODES.items()
                   if info.kind in (Kind.ALU, Kind.NEG, Kind.END))
JMP_CODES = sorted(code for code, info in OPCODES.items() if info.kind is Kind.JMP)
imm32 = st.one_of(s32, st.sampled_from([0, 1, -1, 31, 32, 63, 64, -(1 << 31), (1 << 31) - 1]))
value64 = st.one_of(st.integers(0, (1 << 64) - 1),
                    st.sampled_from([0, 1, (1 << 64) - 1, 1 << 63, (1 << 63) - 1, 1 << 31,
                                     0xFFFF_FFFF, 0x8000_0000]))


@st.composite
def alu_instruction(draw, regs: st.SearchStrategy[int]) -> Instruction:
    """An ALU instruction the verifier accepts on the initialised scalars ``regs``."""
    info = OPCODES[draw(st.sampled_from(ALU_CODES))]
    dst = draw(regs)
    if info.kind is Kind.NEG:
        return Instruction(info.code, dst)
    if info.kind is Kind.END:
        return Instruction(info.code, dst, imm=draw(st.sampled_from([16, 32, 64])))
    off = 0
    if info.op in (AluOp.DIV, AluOp.MOD):
        off = draw(st.sampled_from([0, 1]))
    elif info.op is AluOp.MOV and info.source is Source.X:
        off = draw(st.sampled_from([0, 8, 16, 32] if info.is64 else [0, 8, 16]))
    if info.source is Source.X:
        return Instruction(info.code, dst, draw(regs), off)
    imm = draw(imm32)
    if info.op in (AluOp.DIV, AluOp.MOD) and imm == 0:
        imm = 1  # the verifier refuses a constant zero divisor
    if info.op in (AluOp.LSH, AluOp.RSH, AluOp.ARSH):
        imm %= 64 if info.is64 else 32  # and a constant shift out of range
    return Instruction(info.code, dst, 0, off, imm)
