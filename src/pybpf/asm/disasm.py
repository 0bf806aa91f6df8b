"""Disassembler: text like bpftool's ``prog dump xlated`` (the kernel's kernel/bpf/disasm.c).

``format_insn`` is total over every instruction ``opcodes.check`` accepts. Map references
print as ``map[fd:N]`` for raw (not yet loaded) instructions, or whatever ``map_name`` says
(bpftool shows ``map[id:N]``); a kfunc call as ``call kernel-function#<BTF id>``, or by its
name (``call kernel-function <name>``) when an ``Assembly`` still names it. ``mnemonic``
gives the full name of an instruction's variant (``sdiv64``, ``movsx32``,
``atomic_fetch_add64``, ``load_acquire8`` ...).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from .. import uapi
from ..uapi import BpfFunc
from .builder import Assembly
from .opcodes import (
    ATOMIC_FETCH,
    AluOp,
    AtomicOp,
    Instruction,
    JmpOp,
    Kind,
    Mode,
    Source,
    check,
    iter_decode,
)

__all__ = ["disassemble", "format_insn", "helper_name", "mnemonic"]

ALU_OP_TEXT = {
    AluOp.ADD: "+=", AluOp.SUB: "-=", AluOp.MUL: "*=", AluOp.DIV: "/=", AluOp.OR: "|=",
    AluOp.AND: "&=", AluOp.LSH: "<<=", AluOp.RSH: ">>=", AluOp.MOD: "%=", AluOp.XOR: "^=",
    AluOp.MOV: "=", AluOp.ARSH: "s>>=",
}
JMP_OP_TEXT = {
    JmpOp.JEQ: "==", JmpOp.JGT: ">", JmpOp.JGE: ">=", JmpOp.JSET: "&", JmpOp.JNE: "!=",
    JmpOp.JSGT: "s>", JmpOp.JSGE: "s>=", JmpOp.JLT: "<", JmpOp.JLE: "<=", JmpOp.JSLT: "s<",
    JmpOp.JSLE: "s<=",
}
ATOMIC_OP_TEXT = {AtomicOp.ADD: "+=", AtomicOp.AND: "&=", AtomicOp.OR: "|=",
                  AtomicOp.XOR: "^="}

MapNamer = Callable[[Instruction], "str | None"]


def mnemonic(insn: Instruction) -> str:
    """The full mnemonic of the instruction's variant (the assembler function's name)."""
    info = check(insn)
    if info.kind is Kind.ALU:
        if insn.off and info.op in (AluOp.DIV, AluOp.MOD):
            return "s" + info.name
        if insn.off and info.op is AluOp.MOV:
            return "movsx" + info.name[-2:]
        return info.name
    if info.kind is Kind.ATOMIC:
        bits = info.nbytes * 8
        if insn.imm == AtomicOp.LOAD_ACQ:
            return f"load_acquire{bits}"
        if insn.imm == AtomicOp.STORE_REL:
            return f"store_release{bits}"
        fetch = "fetch_" if insn.imm & ATOMIC_FETCH and insn.imm not in (
            AtomicOp.XCHG, AtomicOp.CMPXCHG) else ""
        op = AtomicOp(insn.imm & ~ATOMIC_FETCH if fetch else insn.imm)
        return f"atomic_{fetch}{op.name.lower()}{bits}"
    if info.kind is Kind.CALL:
        return {0: "call", uapi.BPF_PSEUDO_CALL: "call_local",
                uapi.BPF_PSEUDO_KFUNC_CALL: "call_kfunc"}[insn.src]
    if info.kind is Kind.EXIT:
        return "exit_"
    if info.kind is Kind.LD_IMM64:
        return _LD_IMM64_MNEMONICS[insn.src]
    return info.name


_LD_IMM64_MNEMONICS = {
    0: "lddw", uapi.BPF_PSEUDO_MAP_FD: "ld_map_fd", uapi.BPF_PSEUDO_MAP_VALUE: "ld_map_value",
    uapi.BPF_PSEUDO_BTF_ID: "ld_btf_id", uapi.BPF_PSEUDO_FUNC: "ld_func",
    uapi.BPF_PSEUDO_MAP_IDX: "ld_map_idx",
    uapi.BPF_PSEUDO_MAP_IDX_VALUE: "ld_map_idx_value",
}


def helper_name(func_id: int) -> str:
    try:
        return "bpf_" + BpfFunc(func_id).name
    except ValueError:
        return "unknown"


def _mem_type(nbytes: int, signed: bool = False) -> str:
    return f"{'s' if signed else 'u'}{nbytes * 8}"


def _imm64_text(insn: Instruction, map_name: MapNamer | None) -> str:
    named = map_name(insn) if map_name is not None else None
    lo, hi = insn.imm & 0xFFFFFFFF, (insn.imm >> 32) & 0xFFFFFFFF
    if insn.src == uapi.BPF_PSEUDO_MAP_FD:
        return named or f"map[fd:{lo}]"
    if insn.src == uapi.BPF_PSEUDO_MAP_VALUE:
        return f"{named or f'map[fd:{lo}]'}[0]+{hi}"
    if insn.src == uapi.BPF_PSEUDO_MAP_IDX:
        return f"map[idx:{lo}]"
    if insn.src == uapi.BPF_PSEUDO_MAP_IDX_VALUE:
        return f"map[idx:{lo}]+{hi}"
    if insn.src == uapi.BPF_PSEUDO_BTF_ID:  # the second slot's imm is the module BTF's fd
        return f"btf_id[{lo}]" + (f"[btf_fd:{hi}]" if hi else "")
    if insn.src == uapi.BPF_PSEUDO_FUNC:
        return f"func[pc{lo - (1 << 32) if lo >> 31 else lo:+d}]"
    return f"{insn.imm & 0xFFFFFFFFFFFFFFFF:#x}"


def format_insn(insn: Instruction, *, map_name: MapNamer | None = None,
                kfunc_name: str | None = None) -> str:
    """``(b7) r0 = 0``: opcode in hex, then the statement, as disasm.c prints it;
    ``kfunc_name``: the kernel function a kfunc call names (its imm not yet its BTF id)."""
    info = check(insn)
    kind, code = info.kind, f"({insn.opcode:02x})"
    dst, src, off, imm = insn.dst, insn.src, insn.off, insn.imm
    reg = "r" if info.is64 else "w"
    if kind is Kind.ALU:
        if info.source is Source.X:
            if info.op is AluOp.MOV and off:
                return f"{code} {reg}{dst} = (s{off}){reg}{src}"
            operand = f"{reg}{src}"
        else:
            operand = str(imm)
        text = ALU_OP_TEXT[info.op]
        if off and info.op in (AluOp.DIV, AluOp.MOD):
            text = "s" + text
        return f"{code} {reg}{dst} {text} {operand}"
    if kind is Kind.NEG:
        return f"{code} {reg}{dst} = -{reg}{dst}"
    if kind is Kind.END:
        return f"{code} r{dst} = {info.name}{imm} r{dst}"
    if kind is Kind.JA:
        if info.name == "gotol":
            return f"{code} gotol pc{imm:+d}"
        return f"{code} goto pc{off:+d}"
    if kind is Kind.JCOND:
        return f"{code} may_goto pc{off:+d}"
    if kind is Kind.JMP:
        operand = f"{reg}{src}" if info.source is Source.X else f"{imm & 0xFFFFFFFF:#x}"
        return f"{code} if {reg}{dst} {JMP_OP_TEXT[info.op]} {operand} goto pc{off:+d}"
    if kind is Kind.CALL:
        if src == uapi.BPF_PSEUDO_CALL:
            return f"{code} call pc{imm:+d}"
        if src == uapi.BPF_PSEUDO_KFUNC_CALL:
            callee = f" {kfunc_name}" if kfunc_name is not None else f"#{imm}"
            return f"{code} call kernel-function{callee}" + (f"@{off}" if off else "")
        return f"{code} call {helper_name(imm)}#{imm}"
    if kind is Kind.EXIT:
        return f"{code} exit"
    if kind is Kind.LD_IMM64:
        return f"{code} r{dst} = {_imm64_text(insn, map_name)}"
    mem = _mem_type(info.nbytes, kind is Kind.LDX_SX)
    if kind is Kind.LD_ABS:
        return f"{code} r0 = *({mem} *)skb[{imm}]"
    if kind is Kind.LD_IND:
        return f"{code} r0 = *({mem} *)skb[r{src} + {imm}]"
    if kind in (Kind.LDX, Kind.LDX_SX):
        return f"{code} r{dst} = *({mem} *)(r{src} {off:+d})"
    if kind is Kind.ST:
        return f"{code} *({mem} *)(r{dst} {off:+d}) = {imm}"
    if kind is Kind.STX:
        return f"{code} *({mem} *)(r{dst} {off:+d}) = r{src}"
    assert kind is Kind.ATOMIC and info.mode is Mode.ATOMIC
    width = "64" if info.nbytes == 8 else ""
    where = f"({mem} *)(r{dst} {off:+d})"
    if imm == AtomicOp.LOAD_ACQ:
        return f"{code} r{dst} = load_acquire(({mem} *)(r{src} {off:+d}))"
    if imm == AtomicOp.STORE_REL:
        return f"{code} store_release({where}, r{src})"
    if imm == AtomicOp.XCHG:
        return f"{code} r{src} = atomic{width}_xchg({where}, r{src})"
    if imm == AtomicOp.CMPXCHG:
        return f"{code} r0 = atomic{width}_cmpxchg({where}, r0, r{src})"
    if imm & ATOMIC_FETCH:
        name = AtomicOp(imm & ~ATOMIC_FETCH).name.lower()
        return f"{code} r{src} = atomic{width}_fetch_{name}({where}, r{src})"
    return f"{code} lock *{where} {ATOMIC_OP_TEXT[AtomicOp(imm)]} r{src}"


def disassemble(program: bytes | Iterable[Instruction] | Assembly, *,
                map_name: MapNamer | None = None) -> str:
    """Listing with slot numbers, like ``bpftool prog dump xlated``: ``0: (b7) r0 = 0``.

    An ``Assembly`` prints its maps referred to by name as ``map[name]`` and its kfuncs
    called by name as ``kernel-function <name>`` (which the text assembler reads back)."""
    names: dict[int, str] = {}
    kfuncs: dict[int, str] = {}
    if isinstance(program, Assembly):
        names = {ref.index: f"map[{ref.map}]" for ref in program.map_refs
                 if isinstance(ref.map, str)}
        kfuncs = {ref.index: ref.name for ref in program.kfunc_refs}
        program = program.instructions
    if isinstance(program, (bytes, bytearray, memoryview)):
        pairs = list(iter_decode(bytes(program)))
    else:
        pairs, pc = [], 0
        for insn in program:
            pairs.append((pc, insn))
            pc += insn.slots
    width = len(str(pairs[-1][0])) if pairs else 1
    lines = []
    for index, (pc, insn) in enumerate(pairs):
        namer = map_name
        if index in names:
            namer = lambda _insn, name=names[index]: name  # noqa: E731
        text = format_insn(insn, map_name=namer, kfunc_name=kfuncs.get(index))
        lines.append(f"{pc:>{width}}: {text}")
    return "\n".join(lines)
