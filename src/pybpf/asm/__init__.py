"""pybpf.asm: the eBPF instruction set, an assembler, a disassembler.

``opcodes`` holds the one opcode table and the Instruction record with encode/decode;
``builder`` the mnemonic functions, labels and ``assemble``; ``disasm`` the bpftool-like text.
"""

from . import builder as _builder
from .builder import (
    MNEMONICS,
    Assembler,
    Assembly,
    AssemblyError,
    Item,
    Label,
    MapRef,
    Ref,
    assemble,
)
from .disasm import disassemble, format_insn, helper_name, mnemonic
from .opcodes import (
    FP,
    OPCODES,
    R0,
    R1,
    R2,
    R3,
    R4,
    R5,
    R6,
    R7,
    R8,
    R9,
    R10,
    AluOp,
    AtomicOp,
    Class,
    Instruction,
    InvalidInstruction,
    JmpOp,
    Kind,
    Mode,
    OpInfo,
    Reg,
    Size,
    Source,
    check,
    decode,
    encode,
    iter_decode,
    slot_table,
)
from .text import assemble_text, parse

globals().update({name: getattr(_builder, name) for name in MNEMONICS})

__all__ = [
    "MNEMONICS", "OPCODES", "AluOp", "Assembler", "Assembly", "AssemblyError", "AtomicOp",
    "Class", "FP", "Instruction", "InvalidInstruction", "Item", "JmpOp", "Kind", "Label", "MapRef",
    "Mode", "OpInfo", "R0", "R1", "R10", "R2", "R3", "R4", "R5", "R6", "R7", "R8", "R9", "Ref",
    "Reg", "Size", "Source", "assemble", "assemble_text", "check", "decode", "disassemble",
    "encode", "format_insn", "helper_name", "iter_decode", "mnemonic", "parse", "slot_table",
    *MNEMONICS,
]
