"""The eBPF instruction set (Documentation/bpf/standardization/instruction-set.rst, Linux 6.18).

Rules this module keeps:
- ONE opcode table, ``OPCODES`` (opcode byte -> ``OpInfo``), built from the small opcode-part
  enums below. Encoding, decoding, the disassembler, the assembler's mnemonics and the
  interpreter's dispatch all read it; nothing else lists opcodes.
- An ``Instruction`` is an immutable record of the five fields. ``lddw`` (LD | IMM | DW) is one
  record whose ``imm`` is the whole signed 64-bit immediate; it occupies two slots.
- ``iter_decode`` is the one decoding generator; it rejects what the kernel rejects as
  malformed (unknown opcode, reserved fields not zero, bad second ``lddw`` slot) with
  ``InvalidInstruction``. Verifier-level rules (types, bounds, R10 read-only) are not checked.

Wire format of one 8-byte slot (little-endian)::

    byte 0      byte 1             bytes 2-3     bytes 4-7
    opcode      src:4 | dst:4      off (s16)     imm (s32)

Opcode byte::

    ALU / ALU64 / JMP / JMP32:   op:4 | source:1 | class:3
    LD / LDX / ST / STX:         mode:3 | size:2 | class:3
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import NamedTuple

from .. import uapi

__all__ = ["AluOp", "AtomicOp", "Class", "FP", "Instruction", "InvalidInstruction", "JmpOp", "Kind",
    "Mode", "OPCODES", "OpInfo", "R0", "R1", "R10", "R2", "R3", "R4", "R5", "R6", "R7", "R8", "R9",
    "Reg", "Size", "Source", "check", "decode", "encode", "iter_decode", "slot_table"]


class Class(enum.IntEnum):
    """Bits 0-2: instruction class."""

    LD = uapi.BPF_LD
    LDX = uapi.BPF_LDX
    ST = uapi.BPF_ST
    STX = uapi.BPF_STX
    ALU = uapi.BPF_ALU  # 32-bit arithmetic, results zero-extended
    JMP = uapi.BPF_JMP
    JMP32 = uapi.BPF_JMP32  # compares the low 32 bits
    ALU64 = uapi.BPF_ALU64


class Source(enum.IntEnum):
    """Bit 3 of ALU/JMP opcodes: operand is the immediate (K) or the src register (X).

    For BPF_END in class ALU the same bit picks the byte order: K = to little, X = to big.
    """

    K = 0x00
    X = 0x08


class AluOp(enum.IntEnum):
    """Bits 4-7 of ALU/ALU64 opcodes."""

    ADD = 0x00
    SUB = 0x10
    MUL = 0x20
    DIV = 0x30  # off=1: signed (sdiv)
    OR = 0x40
    AND = 0x50
    LSH = 0x60
    RSH = 0x70
    NEG = 0x80
    MOD = 0x90  # off=1: signed (smod)
    XOR = 0xA0
    MOV = 0xB0  # off=8/16/32 with X: sign-extending move (movsx)
    ARSH = 0xC0
    END = 0xD0  # byte swaps; imm = 16, 32 or 64


class JmpOp(enum.IntEnum):
    """Bits 4-7 of JMP/JMP32 opcodes."""

    JA = 0x00  # JMP: pc += off; JMP32: pc += imm (gotol)
    JEQ = 0x10
    JGT = 0x20
    JGE = 0x30
    JSET = 0x40
    JNE = 0x50
    JSGT = 0x60
    JSGE = 0x70
    CALL = 0x80
    EXIT = 0x90
    JLT = 0xA0
    JLE = 0xB0
    JSLT = 0xC0
    JSLE = 0xD0
    JCOND = 0xE0  # may_goto (src = BPF_MAY_GOTO = 0)


class Size(enum.IntEnum):
    """Bits 3-4 of load/store opcodes."""

    W = 0x00  # 4 bytes
    H = 0x08  # 2 bytes
    B = 0x10  # 1 byte
    DW = 0x18  # 8 bytes


SIZE_BYTES = {Size.B: 1, Size.H: 2, Size.W: 4, Size.DW: 8}
SIZE_OF_BYTES = {n: s for s, n in SIZE_BYTES.items()}


class Mode(enum.IntEnum):
    """Bits 5-7 of load/store opcodes."""

    IMM = 0x00  # only LD | IMM | DW: the 64-bit immediate load (lddw)
    ABS = 0x20  # legacy packet access: r0 = ntoh(*(skb->data + imm))
    IND = 0x40  # legacy packet access: r0 = ntoh(*(skb->data + src + imm))
    MEM = 0x60
    MEMSX = 0x80  # sign-extending load (LDX only)
    ATOMIC = 0xC0  # STX only; the operation is in imm


class AtomicOp(enum.IntEnum):
    """The imm of STX | ATOMIC: the operation (FETCH is a flag on ADD/OR/AND/XOR)."""

    ADD = 0x00
    OR = 0x40
    AND = 0x50
    XOR = 0xA0
    XCHG = 0xE0 | 0x01  # always fetches
    CMPXCHG = 0xF0 | 0x01  # always fetches; compares with r0, old value into r0
    LOAD_ACQ = 0x100  # dst = load_acquire(src + off)
    STORE_REL = 0x110  # store_release(dst + off, src)


ATOMIC_FETCH = 0x01
ATOMIC_RMW_OPS = (AtomicOp.ADD, AtomicOp.OR, AtomicOp.AND, AtomicOp.XOR)
# imm values the kernel accepts on 32/64-bit atomics, and on 8/16-bit ones
ATOMIC_IMMS_WIDE = frozenset(
    [int(op) for op in ATOMIC_RMW_OPS] + [op | ATOMIC_FETCH for op in ATOMIC_RMW_OPS]
    + [AtomicOp.XCHG, AtomicOp.CMPXCHG, AtomicOp.LOAD_ACQ, AtomicOp.STORE_REL])
ATOMIC_IMMS_NARROW = frozenset([AtomicOp.LOAD_ACQ, AtomicOp.STORE_REL])


class Reg(enum.IntEnum):
    """Registers. R0 = return value, R1-R5 = arguments, R6-R9 callee-saved, R10 = frame pointer."""

    R0 = 0
    R1 = 1
    R2 = 2
    R3 = 3
    R4 = 4
    R5 = 5
    R6 = 6
    R7 = 7
    R8 = 8
    R9 = 9
    R10 = 10

    def __repr__(self) -> str:
        return self.name


R0, R1, R2, R3, R4, R5, R6, R7, R8, R9, R10 = Reg
FP = Reg.R10  # the frame pointer, read only


MAX_BPF_REG = 11


class Kind(enum.Enum):
    """What an opcode does, at the granularity the interpreter dispatches on."""

    ALU = "alu"  # dst = dst op src/imm (incl. sdiv/smod, mov/movsx)
    NEG = "neg"
    END = "end"  # le / be / bswap
    JA = "ja"  # goto (JMP: off) / gotol (JMP32: imm)
    JCOND = "jcond"  # may_goto
    JMP = "jmp"  # conditional jump
    CALL = "call"
    EXIT = "exit"
    LD_IMM64 = "ld_imm64"
    LD_ABS = "ld_abs"
    LD_IND = "ld_ind"
    LDX = "ldx"
    LDX_SX = "ldx_sx"
    ST = "st"
    STX = "stx"
    ATOMIC = "atomic"


@dataclass(frozen=True)
class OpInfo:
    """One opcode byte: its parts and its base mnemonic."""

    code: int
    kind: Kind
    cls: Class
    name: str  # base mnemonic, e.g. "add64", "jeq32", "ldxw", "stxdw", "lddw"
    op: AluOp | JmpOp | None = None
    source: Source | None = None
    size: Size | None = None
    mode: Mode | None = None

    @property
    def is64(self) -> bool:
        """ALU64 / JMP (64-bit operands) as opposed to ALU / JMP32."""
        return self.cls in (Class.ALU64, Class.JMP)

    @property
    def nbytes(self) -> int:
        return SIZE_BYTES[self.size] if self.size is not None else 0


OPCODES: dict[int, OpInfo] = {}


def _opcode(kind: Kind, cls: Class, name: str, **parts) -> None:
    code = int(cls)
    for part in parts.values():
        code |= int(part)
    assert code not in OPCODES, hex(code)
    OPCODES[code] = OpInfo(code, kind, cls, name, **parts)


def _build_table() -> None:
    _size_suffix = {Size.B: "b", Size.H: "h", Size.W: "w", Size.DW: "dw"}
    for cls, width in ((Class.ALU, "32"), (Class.ALU64, "64")):
        for op in AluOp:
            for source in Source:
                if op is AluOp.NEG and source is Source.X:
                    continue  # neg takes no operand
                if op is AluOp.END:
                    if cls is Class.ALU64 and source is Source.X:
                        continue  # bswap is ALU64 | K only
                    name = "bswap" if cls is Class.ALU64 else ("be" if source else "le")
                    _opcode(Kind.END, cls, name, op=op, source=source)
                    continue
                kind = Kind.NEG if op is AluOp.NEG else Kind.ALU
                _opcode(kind, cls, op.name.lower() + width, op=op, source=source)
    for cls, width in ((Class.JMP, ""), (Class.JMP32, "32")):
        for op in JmpOp:
            for source in Source:
                if op in (JmpOp.JA, JmpOp.CALL, JmpOp.EXIT, JmpOp.JCOND):
                    if source is Source.X:
                        continue
                    if op is JmpOp.JA:
                        _opcode(Kind.JA, cls, "ja" if cls is Class.JMP else "gotol",
                                op=op, source=source)
                    elif cls is Class.JMP:  # no call/exit/may_goto in JMP32
                        kind = {JmpOp.CALL: Kind.CALL, JmpOp.EXIT: Kind.EXIT,
                                JmpOp.JCOND: Kind.JCOND}[op]
                        name = "may_goto" if op is JmpOp.JCOND else op.name.lower()
                        _opcode(kind, cls, name, op=op, source=source)
                    continue
                _opcode(Kind.JMP, cls, op.name.lower() + width, op=op, source=source)
    _opcode(Kind.LD_IMM64, Class.LD, "lddw", size=Size.DW, mode=Mode.IMM)
    for size in (Size.W, Size.H, Size.B):  # legacy packet loads have no DW form
        _opcode(Kind.LD_ABS, Class.LD, "ldabs" + _size_suffix[size], size=size, mode=Mode.ABS)
        _opcode(Kind.LD_IND, Class.LD, "ldind" + _size_suffix[size], size=size, mode=Mode.IND)
    for size in Size:
        sfx = _size_suffix[size]
        _opcode(Kind.LDX, Class.LDX, "ldx" + sfx, size=size, mode=Mode.MEM)
        if size is not Size.DW:
            _opcode(Kind.LDX_SX, Class.LDX, "ldxs" + sfx, size=size, mode=Mode.MEMSX)
        _opcode(Kind.ST, Class.ST, "st" + sfx, size=size, mode=Mode.MEM)
        _opcode(Kind.STX, Class.STX, "stx" + sfx, size=size, mode=Mode.MEM)
        _opcode(Kind.ATOMIC, Class.STX, "atomic" + sfx, size=size, mode=Mode.ATOMIC)


_build_table()

LD_IMM64 = Class.LD | Size.DW | Mode.IMM  # 0x18


class InvalidInstruction(ValueError):
    """Bytes or fields that are not an instruction the kernel accepts (EINVAL at load)."""

    def __init__(self, message: str, pc: int | None = None) -> None:
        super().__init__(message if pc is None else f"insn {pc}: {message}")
        self.pc = pc


class Instruction(NamedTuple):
    """One eBPF instruction (two slots for lddw, whose imm is the signed 64-bit value)."""

    opcode: int
    dst: int = 0
    src: int = 0
    off: int = 0
    imm: int = 0

    @property
    def info(self) -> OpInfo:
        try:
            return OPCODES[self.opcode]
        except KeyError:
            raise InvalidInstruction(f"unknown opcode {self.opcode:#04x}") from None

    @property
    def slots(self) -> int:
        return 2 if self.opcode == LD_IMM64 else 1

    def encode(self) -> bytes:
        regs = (self.dst & 0xF) | (self.src & 0xF) << 4
        if self.opcode == LD_IMM64:
            lo, hi = self.imm & 0xFFFFFFFF, (self.imm >> 32) & 0xFFFFFFFF
            return _SLOT.pack(self.opcode, regs, self.off, _s32(lo)) + _SLOT.pack(0, 0, 0,
                                                                                   _s32(hi))
        return _SLOT.pack(self.opcode, regs, self.off, self.imm)

    def __repr__(self) -> str:
        try:
            name = self.info.name
        except InvalidInstruction:
            name = "?"
        return (f"Instruction({name}: opcode={self.opcode:#04x}, dst={self.dst}, "
                f"src={self.src}, off={self.off}, imm={self.imm})")


_SLOT = struct.Struct("<BBhi")


def _s32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value


def check(insn: Instruction, pc: int | None = None) -> OpInfo:
    """Raise InvalidInstruction unless ``insn`` is well formed; return its OpInfo."""
    info = OPCODES.get(insn.opcode)
    if info is None:
        raise InvalidInstruction(f"unknown opcode {insn.opcode:#04x}", pc)
    problem = _field_problem(info, insn)
    if problem:
        raise InvalidInstruction(f"{info.name} ({insn.opcode:#04x}): {problem}", pc)
    return info


def _field_problem(info: OpInfo, insn: Instruction) -> str | None:
    """Why the fields are not valid for this opcode (the kernel's reserved-field checks)."""
    _, dst, src, off, imm = insn
    if not (0 <= dst < MAX_BPF_REG and 0 <= src < MAX_BPF_REG):
        return f"register out of range (r{dst}, r{src}): only r0-r10 exist"
    if not -0x8000 <= off <= 0x7FFF:
        return f"off {off} does not fit in 16 signed bits"
    wide = info.kind is Kind.LD_IMM64
    if not (-(1 << 63) <= imm < (1 << 63) if wide else -(1 << 31) <= imm < (1 << 31)):
        return f"imm {imm} does not fit in {64 if wide else 32} signed bits"
    kind = info.kind
    if kind is Kind.ALU:
        if info.source is Source.K and src:
            return "src must be 0 with an immediate operand"
        if info.source is Source.X and imm:
            return "imm must be 0 with a register operand"
        if info.op in (AluOp.DIV, AluOp.MOD):
            allowed = (0, 1)
        elif info.op is AluOp.MOV and info.source is Source.X:
            allowed = (0, 8, 16, 32) if info.is64 else (0, 8, 16)
        else:
            allowed = (0,)
        if off not in allowed:
            return f"off must be one of {allowed}, not {off}"
    elif kind is Kind.NEG:
        if src or off or imm:
            return "src, off and imm must be 0"
    elif kind is Kind.END:
        if src or off:
            return "src and off must be 0"
        if imm not in (16, 32, 64):
            return f"imm (the width) must be 16, 32 or 64, not {imm}"
    elif kind is Kind.JA:
        if dst or src:
            return "dst and src must be 0"
        if info.cls is Class.JMP and imm:
            return "imm must be 0 (use gotol for a 32-bit offset)"
        if info.cls is Class.JMP32 and off:
            return "off must be 0: gotol jumps by imm"
    elif kind is Kind.JCOND:
        if dst or src or imm:
            return "dst, src (BPF_MAY_GOTO) and imm must be 0"
    elif kind is Kind.JMP:
        if info.source is Source.K and src:
            return "src must be 0 with an immediate operand"
        if info.source is Source.X and imm:
            return "imm must be 0 with a register operand"
    elif kind is Kind.CALL:
        if dst:
            return "dst must be 0"
        if src not in (0, uapi.BPF_PSEUDO_CALL, uapi.BPF_PSEUDO_KFUNC_CALL):
            return f"src must be 0 (helper), 1 (bpf-to-bpf) or 2 (kfunc), not {src}"
        if off and src != uapi.BPF_PSEUDO_KFUNC_CALL:
            return "off must be 0 (only kfunc calls use it, for the BTF fd index)"
    elif kind is Kind.EXIT:
        if dst or src or off or imm:
            return "all fields must be 0"
    elif kind is Kind.LD_IMM64:
        if off:
            return "off must be 0"
        if src > uapi.BPF_PSEUDO_MAP_IDX_VALUE:
            return f"src (pseudo source) must be 0-6, not {src}"
        if src in (uapi.BPF_PSEUDO_MAP_FD, uapi.BPF_PSEUDO_MAP_IDX, uapi.BPF_PSEUDO_FUNC) \
                and imm >> 32:
            return "the second slot's imm must be 0 for this pseudo source"
    elif kind is Kind.LD_ABS:
        if dst or src or off:
            return "dst, src and off must be 0"
    elif kind is Kind.LD_IND:
        if dst or off:
            return "dst and off must be 0"
    elif kind in (Kind.LDX, Kind.LDX_SX, Kind.STX):
        if imm:
            return "imm must be 0"
    elif kind is Kind.ST:
        if src:
            return "src must be 0"
    elif kind is Kind.ATOMIC:
        allowed_imms = ATOMIC_IMMS_WIDE if info.size in (Size.W, Size.DW) else ATOMIC_IMMS_NARROW
        if imm not in allowed_imms:
            return f"imm {imm:#x} is not an atomic operation valid for this size"
    return None


def iter_decode(data: bytes) -> Iterator[tuple[int, Instruction]]:
    """The decoding generator: (slot index, Instruction) for each instruction in ``data``."""
    if len(data) % 8:
        raise InvalidInstruction(f"{len(data)} bytes is not a whole number of 8-byte slots")
    nslots = len(data) // 8
    pc = 0
    while pc < nslots:
        code, regs, off, imm = _SLOT.unpack_from(data, pc * 8)
        if code == LD_IMM64:
            if pc + 1 >= nslots:
                raise InvalidInstruction("lddw needs a second slot, the program ends", pc)
            code2, regs2, off2, imm2 = _SLOT.unpack_from(data, pc * 8 + 8)
            if code2 or regs2 or off2:
                raise InvalidInstruction("second slot of lddw must be zero but for imm", pc)
            imm = (imm & 0xFFFFFFFF) | (imm2 << 32)
        insn = Instruction(code, regs & 0xF, regs >> 4, off, imm)
        check(insn, pc)
        yield pc, insn
        pc += insn.slots


def decode(data: bytes) -> list[Instruction]:
    """All instructions in ``data`` (lddw as one record)."""
    return [insn for _, insn in iter_decode(data)]


def encode(insns: Iterable[Instruction]) -> bytes:
    """Little-endian bytes of ``insns``, each checked first."""
    out = bytearray()
    for insn in insns:
        check(insn, len(out) // 8)
        out += insn.encode()
    return bytes(out)


def slot_table(insns: Iterable[Instruction]) -> list[Instruction | None]:
    """Instructions indexed by slot (jump targets count slots): None in lddw's second slot."""
    table: list[Instruction | None] = []
    for insn in insns:
        table.append(insn)
        if insn.slots == 2:
            table.append(None)
    return table
