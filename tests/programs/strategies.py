"""Hypothesis strategies: well-formed instructions of every opcode, and verifiable programs."""

from __future__ import annotations

from hypothesis import strategies as st

from pybpf.asm import (
    OPCODES,
    AluOp,
    Class,
    Instruction,
    Kind,
    Reg,
    Size,
    Source,
    lddw,
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


# -- programs whose branches constants decide, with array lookups by constant keys -----------------
# Every scalar is a constant (no division, no shift by a register: those leave the kernel's
# verifier knowing nothing), so the kernel decides every branch between scalars and prunes the
# dead side; what stays open is whether a map lookup may return NULL. Dead code holds
# instructions the verifier refuses, each for its own reason.
CONST_REGS = [2, 3, 4, 5, 6, 7]  # r6, r7 survive calls: lookup keys come from them
KNOWN_ALU_CODES = sorted(
    code for code, info in OPCODES.items()
    if info.kind in (Kind.NEG, Kind.END)
    or info.kind is Kind.ALU and info.op not in (AluOp.DIV, AluOp.MOD)
    and not (info.op in (AluOp.LSH, AluOp.RSH, AluOp.ARSH) and info.source is Source.X))
LOOKUP_MAPS = ["array", "percpu_array", "hash"]  # created by the test: 4-byte keys, 4 entries
REFUSED = [
    Instruction(0xBF, 0, 8),  # r0 = r8: R8 is never written (EACCES)
    Instruction(0x7A, 10, 0, 8, 1),  # a store above the frame (EACCES)
    Instruction(0x79, 0, 2, 0),  # a load through a scalar or a stale argument register
    Instruction(0x79, 0, 9, 0),  # an 8-byte load of __sk_buff->len (EACCES)
    Instruction(0xB7, 10, 0, 0, 1),  # the frame pointer is read only (EACCES)
    Instruction(0x37, 2, 0, 0, 0),  # division by a constant zero (EINVAL)
    Instruction(0x7A, 0, 0, 0, 7),  # a store through r0: a map value, maybe NULL, or a scalar
]
_KEY_STORES = [  # (how the key is written, where): spilled constants, zeros, other data
    lambda draw: (Instruction(0x62, 10, 0, -8, draw(st.sampled_from([0, 1, 3, 4, -1]))), -8),
    lambda draw: (Instruction(0x62, 10, 0, -4, draw(st.sampled_from([0, 1, 3]))), -4),
    lambda draw: (Instruction(0x63, 10, draw(st.sampled_from([6, 7])), -8), -8),
    lambda draw: (Instruction(0x7B, 10, draw(st.sampled_from([6, 7])), -8), -8),
    lambda draw: (Instruction(0x63, 10, draw(st.sampled_from([6, 7])), -4), -4),
]


@st.composite
def known_alu_instruction(draw) -> Instruction:
    info = OPCODES[draw(st.sampled_from(KNOWN_ALU_CODES))]
    dst = draw(st.sampled_from(CONST_REGS))
    if info.kind is Kind.NEG:
        return Instruction(info.code, dst)
    if info.kind is Kind.END:
        return Instruction(info.code, dst, imm=draw(st.sampled_from([16, 32, 64])))
    if info.source is Source.X:
        off = 0
        if info.op is AluOp.MOV:
            off = draw(st.sampled_from([0, 8, 16, 32] if info.is64 else [0, 8, 16]))
        return Instruction(info.code, dst, draw(st.sampled_from(CONST_REGS)), off)
    imm = draw(imm32)
    if info.op in (AluOp.LSH, AluOp.RSH, AluOp.ARSH):
        imm %= 64 if info.is64 else 32
    return Instruction(info.code, dst, 0, 0, imm)


@st.composite
def constant_branch_programs(draw) -> list[tuple]:
    """A socket filter as items: ("insns", [...]), ("jump", code, dst, src, imm, to_item),
    ("lookup", key store, key offset, map name); ``assemble_items`` makes the bytes."""
    init = [Instruction(0xBF, 9, 1)]  # r9 = the context
    for reg in CONST_REGS:
        value = draw(st.one_of(st.sampled_from([0, 1, 2, 3, 4, 5, -1, 100]), value64))
        init += [lddw(Reg(reg), value)] if draw(st.booleans()) else [
            Instruction(0xB7, reg, 0, 0, value & 0x7FFF_FFFF)]
    items: list[tuple] = [("insns", init)]
    for _ in range(draw(st.integers(2, 14))):
        choice = draw(st.integers(0, 9))
        if choice < 3:
            items.append(("insns", [draw(known_alu_instruction())]))
        elif choice < 6:
            info = OPCODES[draw(st.sampled_from(JMP_CODES))]
            dst = draw(st.sampled_from(CONST_REGS))
            if info.source is Source.X:
                src, imm = draw(st.sampled_from(CONST_REGS)), 0
            else:
                src, imm = 0, draw(st.one_of(st.sampled_from([0, 1, 2, 3, 5, 100, -1]), imm32))
            items.append(["jump", info.code, dst, src, imm, None])
        elif choice < 8:
            key, key_off = draw(st.sampled_from(_KEY_STORES))(draw)
            items.append(("lookup", key, key_off, draw(st.sampled_from(LOOKUP_MAPS))))
            if draw(st.booleans()):  # the NULL check
                items.append(["jump", draw(st.sampled_from([0x15, 0x55])), 0, 0, 0, None])
            if draw(st.booleans()):
                items.append(("insns", [Instruction(0x7A, 0, 0, 0, 7)]))  # *(u64 *)r0 = 7
        else:
            items.append(("insns", [draw(st.sampled_from(REFUSED))]))
    items.append(("insns", [Instruction(0xB7, 0, 0, 0, 0), Instruction(0x95)]))
    for index, item in enumerate(items):
        if item[0] == "jump":  # forward, to the start of a later item
            item[5] = draw(st.integers(index + 1, len(items) - 1))
    return items


def assemble_items(items: list[tuple], map_fds: dict[str, int]) -> bytes:
    """The bytes of a ``constant_branch_programs`` program, with this system's map fds."""
    def lookup(key: Instruction, key_off: int, name: str) -> list[Instruction]:
        return [key, Instruction(0xBF, 2, 10), Instruction(0x07, 2, 0, 0, key_off),
                Instruction(0x18, 1, 1, 0, map_fds[name]), Instruction(0x85, 0, 0, 0, 1)]

    bodies = [lookup(*item[1:]) if item[0] == "lookup" else
              [Instruction(item[1], item[2], item[3], 0, item[4])] if item[0] == "jump" else
              item[1] for item in items]
    starts, slot = [], 0
    for body in bodies:
        starts.append(slot)
        slot += sum(insn.slots for insn in body)
    out = bytearray()
    for index, (item, body) in enumerate(zip(items, bodies, strict=True)):
        if item[0] == "jump":
            body = [body[0]._replace(off=starts[item[5]] - starts[index] - 1)]
        out += b"".join(insn.encode() for insn in body)
    return bytes(out)
