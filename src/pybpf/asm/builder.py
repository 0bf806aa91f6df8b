"""The assembler: mnemonic functions that read like assembly, labels, and ``assemble``.

Rules this module keeps:
- Every mnemonic is made from the one opcode table (``opcodes.OPCODES``): the ALU and jump
  mnemonics are generated from it, memory and atomic ones pick their opcode from it by parts.
- An operand that is a ``Reg`` (``R0``..``R10``) selects the register form (BPF_X); a plain
  int selects the immediate form (BPF_K).
- A jump target is a label name (resolved by ``assemble``) or an int offset (taken as is).
  A resolved 16-bit offset that does not fit raises ``AssemblyError`` (use ``gotol``).
- Map references (``ld_map_fd``, ``ld_map_value``) name a map object (anything with ``fd``),
  a raw fd (int) or a name (str) that ``Program.load(..., maps=)`` resolves; ``assemble``
  leaves them in ``Assembly.map_refs`` and fills the fd in only when it is known.
- A kfunc call (``call_kfunc``) names its kernel function by BTF id (an int, taken as is) or
  by name (a str): ``assemble`` leaves a name in ``Assembly.kfunc_refs`` and ``Program.load``
  puts in the id the system's kernel BTF gives it (``System.kfunc_btf_id``), as libbpf
  resolves a ``__ksym`` extern, so one program names the same kfunc on either backend.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .. import uapi
from ..uapi import BpfFunc
from .opcodes import (
    ATOMIC_FETCH,
    ATOMIC_RMW_OPS,
    LD_IMM64,
    OPCODES,
    SIZE_OF_BYTES,
    AluOp,
    AtomicOp,
    Class,
    Instruction,
    InvalidInstruction,
    JmpOp,
    Kind,
    Mode,
    Reg,
    Size,
    Source,
    check,
)


class AssemblyError(ValueError):
    """A program that cannot be assembled: unknown label, offset out of range, bad operand."""


@dataclass(frozen=True)
class Label:
    """Marks the slot of the next instruction."""

    name: str


@dataclass(frozen=True)
class Ref:
    """An instruction with a field resolved later: a jump/call target or a map reference."""

    insn: Instruction
    target: str | None = None  # label: off (jumps) or imm (gotol, local call, ld_func)
    map: Any = None  # map object, fd or name, for lddw with a map pseudo source
    kfunc: str | None = None  # kernel function name: imm (its BTF id) is put in at load


Item = Instruction | Ref | Label


@dataclass(frozen=True)
class MapRef:
    """lddw at ``index`` (in ``Assembly.instructions``) refers to ``map``."""

    index: int
    map: Any


@dataclass(frozen=True)
class KfuncRef:
    """The kfunc call at ``index`` (in ``Assembly.instructions``) calls kernel function
    ``name``."""

    index: int
    name: str


@dataclass
class Assembly:
    """Assembled program: instructions with labels resolved, where the maps and the kfunc ids
    go."""

    instructions: list[Instruction]
    labels: dict[str, int] = field(default_factory=dict)  # name -> slot
    map_refs: list[MapRef] = field(default_factory=list)
    kfunc_refs: list[KfuncRef] = field(default_factory=list)

    def with_map_fds(self, fd_of) -> list[Instruction]:
        """The instructions with each map reference's fd put in by ``fd_of(map)``."""
        insns = list(self.instructions)
        for ref in self.map_refs:
            insn = insns[ref.index]
            fd = fd_of(ref.map)
            insns[ref.index] = insn._replace(imm=(insn.imm & ~0xFFFFFFFF) | (fd & 0xFFFFFFFF))
        return insns

    def with_kfunc_ids(self, id_of, insns: list[Instruction] | None = None) -> list[Instruction]:
        """``insns`` (default: these instructions) with each kfunc call's imm set to
        ``id_of(name)``, the BTF id of its kernel function."""
        insns = list(self.instructions if insns is None else insns)
        for ref in self.kfunc_refs:
            insns[ref.index] = insns[ref.index]._replace(imm=id_of(ref.name))
        return insns


def _fits(value: int, bits: int) -> bool:
    return -(1 << (bits - 1)) <= value < (1 << (bits - 1))


def assemble(items: Iterable[Item]) -> Assembly:
    """Resolve labels and collect map references; every instruction is checked."""
    items = list(items)
    labels: dict[str, int] = {}
    slot = 0
    for item in items:
        if isinstance(item, Label):
            if item.name in labels:
                raise AssemblyError(f"label {item.name!r} defined twice")
            labels[item.name] = slot
        else:
            slot += _insn_of(item).slots
    insns: list[Instruction] = []
    map_refs: list[MapRef] = []
    kfunc_refs: list[KfuncRef] = []
    slot = 0
    for item in items:
        if isinstance(item, Label):
            continue
        insn = _insn_of(item)
        if isinstance(item, Ref):
            if item.target is not None:
                insn = _resolve_target(insn, item.target, labels, slot)
            if item.map is not None:
                map_refs.append(MapRef(len(insns), item.map))
                # the fd, when already known (an int, or an open map's); else load fills it
                fd = item.map if isinstance(item.map, int) else getattr(item.map, "fd", -1)
                if isinstance(fd, int) and 0 <= fd <= 0xFFFFFFFF:
                    insn = insn._replace(imm=(insn.imm & ~0xFFFFFFFF) | fd)
            if item.kfunc is not None:
                kfunc_refs.append(KfuncRef(len(insns), item.kfunc))
        try:
            check(insn, slot)
        except InvalidInstruction as exc:
            raise AssemblyError(str(exc)) from None
        insns.append(insn)
        slot += insn.slots
    return Assembly(insns, labels, map_refs, kfunc_refs)


def _insn_of(item: Item) -> Instruction:
    if isinstance(item, Ref):
        return item.insn
    if isinstance(item, Instruction):
        return item
    raise AssemblyError(f"not an instruction or label: {item!r}")


def _resolve_target(insn: Instruction, target: str, labels: dict[str, int],
                    slot: int) -> Instruction:
    if target not in labels:
        raise AssemblyError(f"insn {slot}: unknown label {target!r}")
    delta = labels[target] - (slot + 1)
    info = OPCODES[insn.opcode]
    uses_imm = (info.kind is Kind.JA and info.cls is Class.JMP32) or info.kind in (
        Kind.CALL, Kind.LD_IMM64)
    if uses_imm:
        if not _fits(delta, 32):
            raise AssemblyError(f"insn {slot}: label {target!r} is {delta} slots away")
        if info.kind is Kind.LD_IMM64:  # pseudo func: the offset is the first slot's s32
            delta &= 0xFFFFFFFF
        return insn._replace(imm=delta)
    if not _fits(delta, 16):
        raise AssemblyError(f"insn {slot}: label {target!r} is {delta} slots away, more than "
                            "a 16-bit offset reaches; use gotol (JMP32 | JA) for long jumps")
    return insn._replace(off=delta)


def _with_target(insn: Instruction, target: str | int, field_name: str = "off") -> Item:
    if isinstance(target, str):
        return Ref(insn, target=target)
    if isinstance(target, bool) or not isinstance(target, int):
        raise AssemblyError(f"a jump target is a label name or an int offset, not {target!r}")
    return insn._replace(**{field_name: target})


def _reg(value: Any, what: str) -> int:
    if not isinstance(value, Reg):
        raise AssemblyError(f"{what} must be a register (R0-R10), not {value!r}")
    return int(value)


def _opcode(**parts) -> int:
    """The opcode byte with these parts (must be in the table)."""
    code = 0
    for part in parts.values():
        code |= int(part)
    if code not in OPCODES:
        raise AssemblyError(f"no such instruction: {parts}")
    return code


def _operand(cls: Class, op: AluOp | JmpOp, operand: Any) -> tuple[int, int, int]:
    """(opcode, src, imm) for a register or immediate operand."""
    if isinstance(operand, Reg):
        return _opcode(cls=cls, op=op, source=Source.X), int(operand), 0
    if isinstance(operand, bool) or not isinstance(operand, int):
        raise AssemblyError(f"operand must be a register or an int, not {operand!r}")
    return _opcode(cls=cls, op=op, source=Source.K), 0, operand


# -- ALU --------------------------------------------------------------------------------------

def _make_alu(info_name: str, cls: Class, op: AluOp, off: int = 0):
    def mnemonic(dst: Reg, operand: Reg | int) -> Instruction:
        code, src, imm = _operand(cls, op, operand)
        return Instruction(code, _reg(dst, "dst"), src, off, imm)

    mnemonic.__name__ = info_name
    mnemonic.__doc__ = f"{info_name} dst, src|imm  ({cls.name} | {op.name}, off={off})"
    return mnemonic


def neg64(dst: Reg) -> Instruction:
    """dst = -dst"""
    return Instruction(_opcode(cls=Class.ALU64, op=AluOp.NEG, source=Source.K), _reg(dst, "dst"))


def neg32(dst: Reg) -> Instruction:
    """dst = (u32)-dst"""
    return Instruction(_opcode(cls=Class.ALU, op=AluOp.NEG, source=Source.K), _reg(dst, "dst"))


def movsx64(dst: Reg, src: Reg, bits: int) -> Instruction:
    """dst = (s64)(s<bits>)src, bits 8, 16 or 32."""
    return Instruction(_opcode(cls=Class.ALU64, op=AluOp.MOV, source=Source.X),
                       _reg(dst, "dst"), _reg(src, "src"), bits)


def movsx32(dst: Reg, src: Reg, bits: int) -> Instruction:
    """dst = (u32)(s32)(s<bits>)src, bits 8 or 16."""
    return Instruction(_opcode(cls=Class.ALU, op=AluOp.MOV, source=Source.X),
                       _reg(dst, "dst"), _reg(src, "src"), bits)


def le(dst: Reg, bits: int) -> Instruction:
    """dst = htole<bits>(dst) (truncates to the width on a little-endian machine)."""
    return Instruction(_opcode(cls=Class.ALU, op=AluOp.END, source=Source.K), _reg(dst, "dst"),
                       imm=bits)


def be(dst: Reg, bits: int) -> Instruction:
    """dst = htobe<bits>(dst)."""
    return Instruction(_opcode(cls=Class.ALU, op=AluOp.END, source=Source.X), _reg(dst, "dst"),
                       imm=bits)


def bswap(dst: Reg, bits: int) -> Instruction:
    """dst = bswap<bits>(dst), unconditional (ALU64 | END)."""
    return Instruction(_opcode(cls=Class.ALU64, op=AluOp.END, source=Source.K),
                       _reg(dst, "dst"), imm=bits)


# -- jumps ------------------------------------------------------------------------------------

def _make_jump(info_name: str, cls: Class, op: JmpOp):
    def mnemonic(dst: Reg, operand: Reg | int, target: str | int) -> Item:
        code, src, imm = _operand(cls, op, operand)
        return _with_target(Instruction(code, _reg(dst, "dst"), src, 0, imm), target)

    mnemonic.__name__ = info_name
    mnemonic.__doc__ = f"if dst {op.name} src|imm goto target  ({cls.name} | {op.name})"
    return mnemonic


def ja(target: str | int) -> Item:
    """goto target (16-bit offset)."""
    return _with_target(Instruction(_opcode(cls=Class.JMP, op=JmpOp.JA)), target)


def gotol(target: str | int) -> Item:
    """goto target with a 32-bit offset (JMP32 | JA, imm)."""
    return _with_target(Instruction(_opcode(cls=Class.JMP32, op=JmpOp.JA)), target, "imm")


def may_goto(target: str | int) -> Item:
    """Jump to target once the loop budget is spent (JMP | JCOND)."""
    return _with_target(Instruction(_opcode(cls=Class.JMP, op=JmpOp.JCOND)), target)


def call(helper: str | int) -> Instruction:
    """Call a helper by name ("map_lookup_elem" or "bpf_map_lookup_elem") or id."""
    if isinstance(helper, str):
        name = helper.removeprefix("bpf_")
        try:
            helper = BpfFunc[name]
        except KeyError:
            raise AssemblyError(f"unknown helper {helper!r}") from None
    return Instruction(_opcode(cls=Class.JMP, op=JmpOp.CALL), imm=int(helper))


def call_local(target: str | int) -> Item:
    """bpf-to-bpf call of the subprogram at target (src = uapi.BPF_PSEUDO_CALL, imm relative)."""
    return _with_target(Instruction(_opcode(cls=Class.JMP, op=JmpOp.CALL),
                                    src=uapi.BPF_PSEUDO_CALL), target, "imm")


def call_kfunc(func: str | int, btf_fd_index: int = 0) -> Item:
    """Call a kernel function (src = uapi.BPF_PSEUDO_KFUNC_CALL; off = fd_array index) by BTF
    id, or by name ("bpf_sk_skb_set_redirect_cpu"), whose id ``Program.load`` puts in."""
    insn = Instruction(_opcode(cls=Class.JMP, op=JmpOp.CALL), src=uapi.BPF_PSEUDO_KFUNC_CALL,
                       off=btf_fd_index)
    if isinstance(func, str):
        if not func.isidentifier():
            raise AssemblyError(f"a kernel function name is a C identifier, not {func!r}")
        return Ref(insn, kfunc=func)
    if isinstance(func, bool) or not isinstance(func, int):
        raise AssemblyError(f"a kfunc is a name or a BTF id (an int), not {func!r}")
    return insn._replace(imm=func)


def exit_() -> Instruction:
    """return r0"""
    return Instruction(_opcode(cls=Class.JMP, op=JmpOp.EXIT))


# -- 64-bit immediates ------------------------------------------------------------------------

def _imm64(value: int) -> int:
    if not -(1 << 63) <= value < (1 << 64):
        raise AssemblyError(f"{value} does not fit in 64 bits")
    value &= (1 << 64) - 1
    return value - (1 << 64) if value >> 63 else value


def lddw(dst: Reg, value: int) -> Instruction:
    """dst = value (64-bit immediate, two slots)."""
    return Instruction(LD_IMM64, _reg(dst, "dst"), 0, 0, _imm64(value))


def ld_map_fd(dst: Reg, map: Any) -> Item:
    """dst = &map (src = uapi.BPF_PSEUDO_MAP_FD); ``map`` is a map object, an fd or a name."""
    return Ref(Instruction(LD_IMM64, _reg(dst, "dst"), uapi.BPF_PSEUDO_MAP_FD), map=map)


def ld_map_value(dst: Reg, map: Any, offset: int = 0) -> Item:
    """dst = &map's value + offset (src = uapi.BPF_PSEUDO_MAP_VALUE; arrays with one element)."""
    return Ref(Instruction(LD_IMM64, _reg(dst, "dst"), uapi.BPF_PSEUDO_MAP_VALUE, 0,
                           _imm64(offset << 32)), map=map)


def ld_map_idx(dst: Reg, index: int) -> Instruction:
    """dst = &fd_array[index] (src = uapi.BPF_PSEUDO_MAP_IDX)."""
    return Instruction(LD_IMM64, _reg(dst, "dst"), uapi.BPF_PSEUDO_MAP_IDX, 0, index)


def ld_map_idx_value(dst: Reg, index: int, offset: int = 0) -> Instruction:
    """dst = &fd_array[index]'s value + offset (src = uapi.BPF_PSEUDO_MAP_IDX_VALUE)."""
    return Instruction(LD_IMM64, _reg(dst, "dst"), uapi.BPF_PSEUDO_MAP_IDX_VALUE, 0,
                       _imm64(index | offset << 32))


def ld_btf_id(dst: Reg, btf_id: int, btf_fd: int = 0) -> Instruction:
    """dst = address of the kernel variable with this BTF id (src = uapi.BPF_PSEUDO_BTF_ID);
    ``btf_fd`` names a module's BTF (0: vmlinux)."""
    return Instruction(LD_IMM64, _reg(dst, "dst"), uapi.BPF_PSEUDO_BTF_ID, 0,
                       _imm64((btf_id & 0xFFFFFFFF) | btf_fd << 32))


def ld_func(dst: Reg, target: str | int) -> Item:
    """dst = address of the subprogram at target, for callbacks (src = uapi.BPF_PSEUDO_FUNC)."""
    insn = Instruction(LD_IMM64, _reg(dst, "dst"), uapi.BPF_PSEUDO_FUNC)
    if isinstance(target, str):
        return Ref(insn, target=target)
    return insn._replace(imm=int(target) & 0xFFFFFFFF)  # s32 offset in the first slot only


# -- memory -----------------------------------------------------------------------------------

def _size(size: Size | int) -> Size:
    if isinstance(size, Size):
        return size
    if size in SIZE_OF_BYTES:
        return SIZE_OF_BYTES[size]
    raise AssemblyError(f"size must be 1, 2, 4 or 8 bytes, not {size!r}")


def ldx(size: Size | int, dst: Reg, src: Reg, off: int = 0) -> Instruction:
    """dst = *(u<size> *)(src + off)"""
    return Instruction(_opcode(cls=Class.LDX, size=_size(size), mode=Mode.MEM),
                       _reg(dst, "dst"), _reg(src, "src"), off)


def ldxs(size: Size | int, dst: Reg, src: Reg, off: int = 0) -> Instruction:
    """dst = *(s<size> *)(src + off), sign-extended to 64 bits (BPF_MEMSX)."""
    return Instruction(_opcode(cls=Class.LDX, size=_size(size), mode=Mode.MEMSX),
                       _reg(dst, "dst"), _reg(src, "src"), off)


def st(size: Size | int, dst: Reg, off: int, imm: int) -> Instruction:
    """*(u<size> *)(dst + off) = imm"""
    return Instruction(_opcode(cls=Class.ST, size=_size(size), mode=Mode.MEM),
                       _reg(dst, "dst"), 0, off, imm)


def stx(size: Size | int, dst: Reg, off: int, src: Reg) -> Instruction:
    """*(u<size> *)(dst + off) = src"""
    return Instruction(_opcode(cls=Class.STX, size=_size(size), mode=Mode.MEM),
                       _reg(dst, "dst"), _reg(src, "src"), off)


def atomic(size: Size | int, op: AtomicOp | int, dst: Reg, off: int, src: Reg) -> Instruction:
    """STX | ATOMIC: ``op`` (an AtomicOp, with ATOMIC_FETCH or'ed in for fetch) on
    *(dst + off) with src."""
    return Instruction(_opcode(cls=Class.STX, size=_size(size), mode=Mode.ATOMIC),
                       _reg(dst, "dst"), _reg(src, "src"), off, int(op))


def load_acquire(size: Size | int, dst: Reg, src: Reg, off: int = 0) -> Instruction:
    """dst = load_acquire((u<size> *)(src + off))"""
    return atomic(size, AtomicOp.LOAD_ACQ, dst, off, src)


def store_release(size: Size | int, dst: Reg, off: int, src: Reg) -> Instruction:
    """store_release((u<size> *)(dst + off), src)"""
    return atomic(size, AtomicOp.STORE_REL, dst, off, src)


def ld_abs(size: Size | int, imm: int) -> Instruction:
    """r0 = ntoh(*(u<size> *)(skb->data + imm)) (legacy; socket filters)"""
    return Instruction(_opcode(cls=Class.LD, size=_size(size), mode=Mode.ABS), imm=imm)


def ld_ind(size: Size | int, src: Reg, imm: int) -> Instruction:
    """r0 = ntoh(*(u<size> *)(skb->data + src + imm)) (legacy)"""
    return Instruction(_opcode(cls=Class.LD, size=_size(size), mode=Mode.IND),
                       src=_reg(src, "src"), imm=imm)


def label(name: str) -> Label:
    return Label(name)


def _generate_mnemonics() -> dict[str, Any]:
    """Named mnemonic functions made from the opcode table (one per table name and variant)."""
    made: dict[str, Any] = {}
    for info in OPCODES.values():
        if info.kind is Kind.ALU and info.name not in made:
            made[info.name] = _make_alu(info.name, info.cls, info.op)
            if info.op in (AluOp.DIV, AluOp.MOD):  # off=1: the signed variant
                name = "s" + info.name
                made[name] = _make_alu(name, info.cls, info.op, off=1)
        elif info.kind is Kind.JMP and info.name not in made:
            made[info.name] = _make_jump(info.name, info.cls, info.op)
        elif info.kind in (Kind.LDX, Kind.LDX_SX, Kind.ST, Kind.STX):
            size = info.size
            make = {Kind.LDX: ldx, Kind.LDX_SX: ldxs, Kind.ST: st, Kind.STX: stx}[info.kind]
            made[info.name] = _bind_size(make, size, info.name)
        elif info.kind is Kind.ATOMIC:
            bits = info.nbytes * 8
            made[f"load_acquire{bits}"] = _bind_size(load_acquire, info.size,
                                                     f"load_acquire{bits}")
            made[f"store_release{bits}"] = _bind_size(store_release, info.size,
                                                      f"store_release{bits}")
            if info.size in (Size.W, Size.DW):
                for op in (*ATOMIC_RMW_OPS, AtomicOp.XCHG, AtomicOp.CMPXCHG):
                    opname = op.name.lower()
                    made[f"atomic_{opname}{bits}"] = _bind_atomic(info.size, op,
                                                                  f"atomic_{opname}{bits}")
                    if op in ATOMIC_RMW_OPS:
                        made[f"atomic_fetch_{opname}{bits}"] = _bind_atomic(
                            info.size, op | ATOMIC_FETCH, f"atomic_fetch_{opname}{bits}")
        elif info.kind in (Kind.LD_ABS, Kind.LD_IND):
            make = ld_abs if info.kind is Kind.LD_ABS else ld_ind
            made[info.name] = _bind_size(make, info.size, info.name)
    return made


def _bind_size(make, size: Size, name: str):
    def mnemonic(*args):
        return make(size, *args)

    mnemonic.__name__ = name
    mnemonic.__doc__ = (make.__doc__ or "").replace("<size>", str(size and {
        Size.B: 8, Size.H: 16, Size.W: 32, Size.DW: 64}[size]))
    return mnemonic


def _bind_atomic(size: Size, op: int, name: str):
    def mnemonic(dst: Reg, off: int, src: Reg) -> Instruction:
        return atomic(size, op, dst, off, src)

    mnemonic.__name__ = name
    mnemonic.__doc__ = f"{name} (*(dst + off), src); STX | ATOMIC imm={op:#x}"
    return mnemonic


MNEMONICS: dict[str, Any] = _generate_mnemonics()
MNEMONICS.update({f.__name__: f for f in (
    neg64, neg32, movsx64, movsx32, le, be, bswap, ja, gotol, may_goto, call, call_local,
    call_kfunc, exit_, lddw, ld_map_fd, ld_map_value, ld_map_idx, ld_map_idx_value, ld_btf_id,
    ld_func, ldx, ldxs, st, stx, atomic, load_acquire, store_release, ld_abs, ld_ind, label)})
# the generated ones become module attributes: add64, jeq32, ldxw, atomic_fetch_add64, ...
vars(sys.modules[__name__]).update(MNEMONICS)

__all__ = ["Assembler", "Assembly", "AssemblyError", "Item", "KfuncRef", "Label", "MNEMONICS",
    "MapRef", "Ref", "assemble", *MNEMONICS]


class Assembler:
    """A builder: ``a = Assembler(); a.mov64(R0, 0); a.label("out"); a.exit_()``.

    Every mnemonic in ``MNEMONICS`` is a method that appends what it makes.
    """

    def __init__(self, items: Sequence[Item] = ()) -> None:
        self.items: list[Item] = list(items)

    def __getattr__(self, name: str):
        make = MNEMONICS.get(name)
        if make is None:
            raise AttributeError(f"no mnemonic {name!r}")

        def append(*args, **kwargs):
            item = make(*args, **kwargs)
            self.items.append(item)
            return item

        return append

    def extend(self, items: Iterable[Item]) -> None:
        self.items.extend(items)

    def assemble(self) -> Assembly:
        return assemble(self.items)
