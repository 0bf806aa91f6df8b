"""The JIT to Python: ``jit_compile`` translates a program once into Python source (registers
as locals, masks inlined, loops as ``while`` loops, helpers as direct calls), compiles it and
hands back one function per subprogram; it must agree with the reference interpreter
(interpreter.py; tests compare them)."""

from __future__ import annotations

import errno
import re
import struct
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ...accelerator import ATOMIC_RMW, CACHE_MODEL
from ...asm.opcodes import (
    ATOMIC_FETCH,
    OPCODES,
    AluOp,
    AtomicOp,
    Class,
    Instruction,
    JmpOp,
    Kind,
    Source,
)
from ...errors import ProgramFault
from ...uapi import BPF_PSEUDO_CALL, BPF_PSEUDO_KFUNC_CALL, MAX_BPF_STACK, BpfFunc
from .bpf_iter import CALLBACK_HELPERS
from .memory import (
    ACCESS_ERRORS,
    BPF_MAX_LOOPS,
    M32,
    M64,
    SIGN32,
    SIGN64,
    mem_load,
    mem_store,
)
from .semantics import ATOMIC_LOCK, atomic_op, bswap, ld_abs, sdiv, smod, tail_call

if TYPE_CHECKING:
    from .executable import Executable

_LOAD = {1: struct.Struct("<B"), 2: struct.Struct("<H"), 4: struct.Struct("<I"),
         8: struct.Struct("<Q")}


_ALU_JIT64 = {
    AluOp.ADD: "({d} + {s}) & M64",
    AluOp.SUB: "({d} - {s}) & M64",
    AluOp.MUL: "({d} * {s}) & M64",
    AluOp.OR: "{d} | {s}",
    AluOp.AND: "{d} & {s}",
    AluOp.XOR: "{d} ^ {s}",
    AluOp.MOV: "{s}",
}
_ALU_JIT32 = {
    AluOp.ADD: "({d} + {s}) & M32",
    AluOp.SUB: "({d} - {s}) & M32",
    AluOp.MUL: "({d} * {s}) & M32",
    AluOp.OR: "({d} | {s}) & M32",
    AluOp.AND: "{d} & {s} & M32",
    AluOp.XOR: "({d} ^ {s}) & M32",
    AluOp.MOV: "{s} & M32",
}
_JMP_JIT = {
    JmpOp.JEQ: "{d} == {s}", JmpOp.JNE: "{d} != {s}", JmpOp.JGT: "{d} > {s}",
    JmpOp.JGE: "{d} >= {s}", JmpOp.JLT: "{d} < {s}", JmpOp.JLE: "{d} <= {s}",
    JmpOp.JSET: "{d} & {s}",
}
_JMP_SIGNED = {JmpOp.JSGT: ">", JmpOp.JSGE: ">=", JmpOp.JSLT: "<", JmpOp.JSLE: "<="}

_MAX_NESTING = 40  # forward jumps nest as if/else up to this depth, then use ``continue``
_FP_RANGE = 1 << 16  # the offsets from R10 the JIT writes without a mask
JIT_MAX_SLOTS = 100_000  # bigger programs run on the reference interpreter (compile ~3 s)


class FpOffsets(dict):
    """Register -> its offset from R10, for the registers that surely hold R10 plus a small
    constant in straight-line code (``mov rX, r10; add rX, -4``: a stack address). A writer
    clears it where a block begins and tracks each instruction after writing it."""

    def after(self, insn: Instruction, info) -> int | None:
        """The offset from R10 the destination of the 64-bit ALU ``insn`` surely holds after
        it (``mov dst, r10``; adding or subtracting a constant to a register that holds one),
        where it stays small; else None."""
        if not info.is64 or insn.off:
            return None
        if info.op is AluOp.MOV and info.source is Source.X and insn.src == 10:
            return 0
        before = self.get(insn.dst)
        if before is None or info.source is not Source.K or info.op not in (AluOp.ADD,
                                                                          AluOp.SUB):
            return None
        after = before + (insn.imm if info.op is AluOp.ADD else -insn.imm)
        # R10 is (frame << 32) | 512 with frame >= 1: no wrap within this range
        return after if -_FP_RANGE <= after <= _FP_RANGE else None

    def track(self, insn: Instruction) -> None:
        """The offsets after ``insn``: what it may write is forgotten (a helper call, LD_ABS
        and LD_IND clobber R0-R5, an atomic fetch its source and R0), then an ALU instruction
        that leaves its destination near R10 records it."""
        info = OPCODES[insn.opcode]
        kind = info.kind
        if kind is Kind.ALU:
            after = self.after(insn, info)
            if after is None:
                self.pop(insn.dst, None)
            else:
                self[insn.dst] = after
        elif kind in (Kind.NEG, Kind.END, Kind.LDX, Kind.LDX_SX, Kind.LD_IMM64):
            self.pop(insn.dst, None)
        elif kind in (Kind.CALL, Kind.LD_ABS, Kind.LD_IND):
            for reg in range(6):
                self.pop(reg, None)
        elif kind is Kind.ATOMIC:
            self.pop(insn.src, None)
            self.pop(0, None)


class _FunctionWriter:
    """Python source of one subprogram [start, end): a block dispatch loop over its regions."""

    def __init__(self, exe: Executable, start: int, end: int,
                 bound: dict[str, Callable] | None = None) -> None:
        self.exe = exe
        self.start = start
        self.end = end
        self.bound = bound or {}
        self.map_in_r1: int | None = None  # region of the map R1 surely points to, if any
        # the registers that surely hold a stack address: the JIT writes ``add rX, -4`` on
        # one as ``rX = r10 - 4``, one small int operation where a 64-bit add with its mask
        # is two on a 65-bit int
        self.fp_offset = FpOffsets()
        self.lines: list[str] = []
        # (line, register) of the last stack address written, which the next may replace
        self.stack_line: tuple[int, int] | None = None
        targets: set[int] = {start}
        block_starts: set[int] = {start}
        self.back_targets: set[int] = set()
        for pc in range(start, end):
            insn = exe.slots[pc]
            if insn is None:
                continue
            target = _jump_target(pc, insn)
            if target is not None:
                targets.add(target)
                block_starts.update((target, pc + 1))
                if target <= pc:
                    self.back_targets.add(target)
            elif insn.opcode == (Class.JMP | JmpOp.EXIT):
                block_starts.add(pc + 1)
        self.regions = sorted(t for t in targets if start <= t < end)
        self.block_starts = block_starts

    def emit(self, depth: int, line: str) -> None:
        self.lines.append("    " * depth + line)

    def write(self, name: str) -> list[str]:
        emit = self.emit
        emit(0, f"def {name}(rs, r1, r2, r3, r4, r5):")
        emit(1, "mem = rs.mem")
        emit(1, "frame = rs.next_region")
        emit(1, "rs.next_region = frame + 1")
        emit(1, "stack = bytearray(512)")
        emit(1, "mem[frame] = stack")
        emit(1, "r10 = (frame << 32) | 512")
        emit(1, "r0 = r6 = r7 = r8 = r9 = 0")
        emit(1, "n = rs.count")
        emit(1, "limit = rs.budget")
        emit(1, "may_goto = BPF_MAX_LOOPS")
        emit(1, f"b = {self.start}")
        emit(1, "while True:")
        for i, region in enumerate(self.regions):
            end = self.regions[i + 1] if i + 1 < len(self.regions) else self.end
            emit(2, f"if b == {region}:")
            self.write_region(region, end)
        # Only a jump that no region answers gets here without ``continue``: a verified
        # program never does, an unverified one faults instead of spinning.
        emit(2, f"if b not in {set(self.regions)!r}:")
        emit(3, "rs.count = n")
        emit(3, f"raise bad_jump(b, {self.start})")
        return self.lines

    def write_region(self, region: int, end: int) -> None:
        loops = any(self._target(pc) == region for pc in range(region, end))
        depth = 3
        if loops:
            self.emit(depth, "while True:")
            depth += 1
        pc = region
        while pc < end:
            insn = self.exe.slots[pc]
            if pc in self.block_starts or pc == region:
                self.map_in_r1 = None
                self.fp_offset.clear()
                count = self._block_length(pc, end)
                self.emit(depth, f"n += {count}")
                if pc == region and region in self.back_targets:
                    self.emit(depth, f"if n > limit: rs.count = n; raise rs.over_budget({pc})")
            depth = self.write_insn(pc, insn, depth, region, loops)
            self.map_in_r1 = self.exe.map_in_r1_after(pc, self.map_in_r1)
            self.fp_offset.track(insn)
            if depth < 0:  # control does not reach the next instruction
                return
            pc += insn.slots
        # falls through into the next region
        if loops:
            self.emit(depth, f"b = {end}")
            self.emit(depth, "break")
        else:
            self.emit(depth, f"b = {end}")

    def _target(self, pc: int) -> int | None:
        insn = self.exe.slots[pc]
        return None if insn is None else _jump_target(pc, insn)

    def _block_length(self, pc: int, end: int) -> int:
        count = 0
        while pc < end:
            insn = self.exe.slots[pc]
            count += 1
            if _jump_target(pc, insn) is not None or insn.opcode == (Class.JMP | JmpOp.EXIT):
                break
            pc += insn.slots
            if pc in self.block_starts:
                break
        return count

    def jump(self, depth: int, target: int, region: int, loops: bool) -> None:
        """Code to go to ``target``; the caller stops or nests after it."""
        emit = self.emit
        if loops:
            if target == region:
                emit(depth, "continue")
            else:
                emit(depth, f"b = {target}")
                emit(depth, "break")
        else:
            emit(depth, f"b = {target}")
            if target <= region:
                emit(depth, "continue")

    def write_insn(self, pc: int, insn: Instruction, depth: int, region: int,
                   loops: bool) -> int:
        """Emit one instruction; returns the depth for the next, or -1 if it never runs."""
        info = OPCODES[insn.opcode]
        kind = info.kind
        emit = self.emit
        d = f"r{insn.dst}"
        src = f"r{insn.src}"
        imm = insn.imm
        bits = 64 if info.is64 else 32
        if kind is Kind.ALU:
            stack_address = self.stack_address(insn, info)
            if stack_address is not None:
                if self.stack_line == (len(self.lines) - 1, insn.dst):
                    # the line before gave dst the address this one moves (``mov rX, r10``
                    # before ``add rX, -4``): nothing can see that value, only this one
                    self.lines.pop()
                emit(depth, f"{d} = {stack_address}")
                self.stack_line = (len(self.lines) - 1, insn.dst)
                return depth
            s = src if info.source is Source.X else str(imm & (M64 if bits == 64 else M32))
            emit(depth, f"{d} = {_alu_expr(info.op, insn.off, d, s, bits)}")
        elif kind is Kind.NEG:
            emit(depth, f"{d} = -{d} & {'M64' if bits == 64 else 'M32'}")
        elif kind is Kind.END:
            if info.cls is Class.ALU and info.source is Source.K:
                emit(depth, f"{d} &= {(1 << imm) - 1}")
            elif imm == 16:
                emit(depth, f"{d} = (({d} & 0xff) << 8) | (({d} >> 8) & 0xff)")
            else:
                emit(depth, f"{d} = bswap({d}, {imm})")
        elif kind is Kind.JA:
            target = _jump_target(pc, insn)
            self.jump(depth, target, region, loops)
            return -1
        elif kind is Kind.JCOND:
            emit(depth, "if may_goto == 0:")
            self.jump(depth + 1, _jump_target(pc, insn), region, loops)
            if not loops and _jump_target(pc, insn) > region:
                if depth < _MAX_NESTING:
                    emit(depth, "else:")
                    emit(depth + 1, "may_goto -= 1")
                    return depth + 1
                emit(depth + 1, "continue")
            emit(depth, "may_goto -= 1")
        elif kind is Kind.JMP:
            target = _jump_target(pc, insn)
            emit(depth, f"if {_cond_expr(info, insn, bits)}:")
            self.jump(depth + 1, target, region, loops)
            if not loops and target > region:
                if depth < _MAX_NESTING:
                    emit(depth, "else:")
                    return depth + 1
                emit(depth + 1, "continue")
        elif kind is Kind.CALL:
            if insn.src == BPF_PSEUDO_CALL:
                callee = pc + imm + 1
                emit(depth, "rs.count = n")
                emit(depth, f"r0 = F{callee}(rs, r1, r2, r3, r4, r5)")
                emit(depth, "n = rs.count")
            elif insn.src == BPF_PSEUDO_KFUNC_CALL:
                emit(depth, f"r0 = K{imm}(rs, r1, r2, r3, r4, r5)")
            elif imm == BpfFunc.tail_call:
                emit(depth, "t = tail_call(rs, r1, r2, r3)")
                emit(depth, "if t is not None:")
                emit(depth + 1, "rs.count = n")
                emit(depth + 1, "del mem[frame]")
                emit(depth + 1, "return rs.entry_of(t, 0)(rs, r1, 0, 0, 0, 0)")
            elif bound_name(imm, self.map_in_r1) in self.bound:
                # R1 is a known map: the helper bound to it skips resolving the map pointer
                name = bound_name(imm, self.map_in_r1)
                on_stack = self.stack_args() if takes_stack(self.bound[name]) else 0
                extra = f", stack, {on_stack}" if on_stack else ""
                emit(depth, f"r0 = {name}(rs, r2, r3, r4, r5{extra})")
            elif imm in CALLBACK_HELPERS:
                # the callback counts its instructions in rs.count and raises rs.budget
                emit(depth, "rs.count = n")
                emit(depth, f"r0 = H{imm}(rs, r1, r2, r3, r4, r5)")
                emit(depth, "n = rs.count")
                emit(depth, "limit = rs.budget")
            else:
                emit(depth, f"r0 = H{imm}(rs, r1, r2, r3, r4, r5)")
        elif kind is Kind.EXIT:
            emit(depth, "rs.count = n")
            emit(depth, "del mem[frame]")
            emit(depth, "return r0")
            return -1
        elif kind is Kind.LD_IMM64:
            emit(depth, f"{d} = {self.exe.ld_imm[pc]}")
        elif kind in (Kind.LDX, Kind.LDX_SX):
            self.write_load(pc, insn, info, depth)
        elif kind in (Kind.ST, Kind.STX):
            value = src if kind is Kind.STX else str(imm & M64)
            self.write_store(pc, insn, info, depth, value)
        elif kind is Kind.ATOMIC:
            size = info.nbytes
            if imm == AtomicOp.LOAD_ACQ:
                emit(depth, f"{d} = atomic_op(rs, {src} + {insn.off}, {size}, {imm}, 0, 0, {pc})")
            elif imm == AtomicOp.CMPXCHG:
                emit(depth, f"r0 = atomic_op(rs, {d} + {insn.off}, {size}, {imm}, {src}, r0, "
                            f"{pc})")
            elif imm == AtomicOp.STORE_REL:
                emit(depth, f"atomic_op(rs, {d} + {insn.off}, {size}, {imm}, {src}, r0, {pc})")
            else:
                self.write_atomic_rmw(pc, insn, size, depth)
        elif kind is Kind.LD_ABS:
            emit(depth, f"r0 = ld_abs(rs, {imm}, {info.nbytes})")
        elif kind is Kind.LD_IND:
            emit(depth, f"r0 = ld_abs(rs, {src} + {imm}, {info.nbytes})")
        else:  # pragma: no cover
            raise ValueError(f"insn {pc}: the JIT cannot translate {info.name}")
        return depth

    def stack_address(self, insn: Instruction, info) -> str | None:
        """``r10`` or ``r10 +/- k`` for an ALU instruction that leaves its destination a
        small offset from R10, else None."""
        after = self.fp_offset.after(insn, info)
        if after is None:
            return None
        return "r10" if after == 0 else f"r10 + {after}" if after > 0 else f"r10 - {-after}"

    def stack_args(self) -> int:
        """Which of R2 (1) and R3 (2) surely point into this frame's stack now."""
        offsets = self.fp_offset
        return (1 if 2 in offsets else 0) | (2 if 3 in offsets else 0)

    def write_atomic_rmw(self, pc: int, insn: Instruction, size: int, depth: int) -> None:
        """add/or/and/xor (with or without fetch) and xchg, inline: one hardware atomic (under
        the atomic lock without the C accelerator); a region that is not plain memory, or a
        misaligned word, takes atomic_op's checked path."""
        emit = self.emit
        d, src, imm = f"r{insn.dst}", f"r{insn.src}", insn.imm
        emit(depth, "try:")
        emit(depth + 1, f"a = {_address(d, insn.off)}")
        emit(depth + 1, "m = mem[a >> 32]")
        emit(depth + 1, "o = a & 0xffffffff")
        if ATOMIC_RMW is not None:  # one hardware atomic, as compiled programs do it
            emit(depth + 1, f"old = ATOMIC_RMW(m, o, {size}, {imm}, {src}, 0)")
        else:
            mask = (1 << (8 * size)) - 1
            new = {AtomicOp.ADD: f"(old + {src}) & {mask}",
                   AtomicOp.OR: f"old | ({src} & {mask})", AtomicOp.AND: f"old & {src}",
                   AtomicOp.XOR: f"(old ^ {src}) & {mask}",
                   AtomicOp.XCHG & ~ATOMIC_FETCH: f"{src} & {mask}"}[imm & ~ATOMIC_FETCH]
            emit(depth + 1, "with ATOMIC_LOCK:")
            emit(depth + 2, f"old = L{size}(m, o)[0]")
            emit(depth + 2, f"S{size}(m, o, {new})")
        emit(depth, "except ACCESS_ERRORS:")
        emit(depth + 1, f"old = atomic_op(rs, {d} + {insn.off}, {size}, {imm}, {src}, r0, {pc})")
        if imm & ATOMIC_FETCH:
            emit(depth, f"{src} = old")

    def write_load(self, pc: int, insn: Instruction, info, depth: int) -> None:
        size = info.nbytes
        d = f"r{insn.dst}"
        self.write_access(depth, insn.src, insn.off, size, f"{d} = L{size}({{buf}}, {{at}})[0]",
                          f"{d} = mem_load(rs, r{insn.src} + {insn.off}, {size}, {pc})")
        if info.kind is Kind.LDX_SX:
            sign = 1 << (8 * size - 1)
            self.emit(depth, f"{d} = (({d} ^ {sign}) - {sign}) & M64")

    def write_store(self, pc: int, insn: Instruction, info, depth: int, value: str) -> None:
        size = info.nbytes
        masked = value if size == 8 else (
            str(int(value) & ((1 << (8 * size)) - 1)) if value.isdigit()
            else f"{value} & {(1 << (8 * size)) - 1}")
        self.write_access(depth, insn.dst, insn.off, size, f"S{size}({{buf}}, {{at}}, {masked})",
                          f"mem_store(rs, r{insn.dst} + {insn.off}, {size}, {value}, {pc})")

    def write_access(self, depth: int, base: int, off: int, size: int, access: str,
                     checked: str) -> None:
        """A load or store of ``size`` bytes at ``r{base} + off``: ``access`` with ``{buf}``
        and ``{at}`` filled in. A fixed offset from the frame pointer is one in this frame's
        stack (the frame pointer is constant); anything else tries the region the address
        names and falls back on ``checked``, the slow path that raises the fault."""
        emit = self.emit
        stack_off = MAX_BPF_STACK + off
        if base == 10 and 0 <= stack_off <= MAX_BPF_STACK - size:
            emit(depth, access.format(buf="stack", at=stack_off))
        else:
            emit(depth, "try:")
            emit(depth + 1, f"a = {_address(f'r{base}', off)}")
            emit(depth + 1, access.format(buf="mem[a >> 32]", at="a & 0xffffffff"))
            emit(depth, "except ACCESS_ERRORS:")
            emit(depth + 1, checked)

def _address(reg: str, off: int) -> str:
    """The expression of ``reg + off`` (most accesses are at offset 0)."""
    return f"{reg} + {off}" if off else reg


def _jump_target(pc: int, insn: Instruction) -> int | None:
    """Where a jump goes (None for anything that is not a jump)."""
    info = OPCODES.get(insn.opcode)
    if info is None:
        return None
    if info.kind is Kind.JA:
        return pc + (insn.imm if info.cls is Class.JMP32 else insn.off) + 1
    if info.kind in (Kind.JMP, Kind.JCOND):
        return pc + insn.off + 1
    return None


def _alu_expr(op: AluOp, off: int, d: str, s: str, bits: int) -> str:
    """The Python expression of ``d op s`` for 64- or 32-bit ALU, result masked."""
    table, mask, sign, shift = ((_ALU_JIT64, "M64", "SIGN64", 63) if bits == 64
                                else (_ALU_JIT32, "M32", "SIGN32", 31))
    if op in table and not (op is AluOp.MOV and off):
        return table[op].format(d=d, s=s)
    # 32-bit operands are the low halves of the registers
    dm, sm = (d, s) if bits == 64 else (f"({d} & M32)", f"({s} & M32)")
    if op is AluOp.MOV:
        sign_bit = 1 << (off - 1)
        return f"((({s} & {(1 << off) - 1}) ^ {sign_bit}) - {sign_bit}) & {mask}"
    if op is AluOp.LSH:
        return f"({d} << ({s} & {shift})) & {mask}"
    if op is AluOp.RSH:
        return f"{dm} >> ({s} & {shift})"
    if op is AluOp.ARSH:
        return f"((({dm} ^ {sign}) - {sign}) >> ({s} & {shift})) & {mask}"
    if op is AluOp.DIV:
        return f"sdiv({d}, {s}, {bits})" if off else f"({dm} // {sm} if {sm} else 0)"
    if op is AluOp.MOD:
        return f"smod({d}, {s}, {bits})" if off else f"({dm} % {sm} if {sm} else {dm})"
    raise ValueError(f"no ALU expression for {op!r}")


def _cond_expr(info, insn: Instruction, bits: int) -> str:
    d = f"r{insn.dst}"
    if info.source is Source.X:
        s = f"r{insn.src}"
        if bits == 32:
            s = f"({s} & M32)"
    else:
        s = str(insn.imm & (M64 if bits == 64 else M32))
    if bits == 32:
        d = f"({d} & M32)"
    if info.op in _JMP_JIT:
        return _JMP_JIT[info.op].format(d=d, s=s)
    flip = "SIGN64" if bits == 64 else "SIGN32"
    if info.source is Source.K:
        s = str(int(s) ^ (SIGN64 if bits == 64 else SIGN32))
    else:
        s = f"({s} ^ {flip})"
    return f"({d} ^ {flip}) {_JMP_SIGNED[info.op]} {s}"


def bad_jump(target: int, subprog: int) -> ProgramFault:
    return ProgramFault(errno.EFAULT, f"jump to insn {target}, outside subprogram {subprog} "
                        "or off its end (the program was not verified?)", pc=target)


# Masks as literals: a constant load is cheaper than a global lookup in the hot loop.
_LITERALS = {"SIGN64": hex(SIGN64), "SIGN32": hex(SIGN32), "M64": hex(M64), "M32": hex(M32)}
_LITERAL_RE = re.compile(r"\b(SIGN64|SIGN32|M64|M32)\b")


def bound_name(helper_id: int, region: int | None) -> str:
    return f"H{helper_id}_{region:x}" if region is not None else ""


def core_of(func: Callable, core_type: str) -> Any | None:
    """The C map core (``core_type``, a type of the C cache model: HtabCore, LpmCore) whose
    helper in C ``func``, a map helper bound to a map, is (helpers._binder's
    ``functools.partial(in_c, python)``), else None."""
    core_class = getattr(CACHE_MODEL, core_type, None)
    core = getattr(getattr(func, "func", None), "__self__", None)
    return core if core_class is not None and type(core) is core_class else None


def htab_core_of(func: Callable) -> Any | None:
    """The HtabCore whose helper in C ``func`` is (``core_of``), else None."""
    return core_of(func, "HtabCore")


def takes_stack(func: Callable) -> bool:
    """Whether ``func``, a map helper bound to a map, is a hash map core's helper in C, which
    takes two more arguments after R5: the frame's stack and which of R2 (1) and R3 (2)
    point into it, whose bytes it then reads there without looking their region up."""
    return htab_core_of(func) is not None


def bound_helpers(exe: Executable) -> dict[str, Callable]:
    """Map helpers bound to each map ``exe`` loads: a helper offers ``bind_map(bpf_map)``,
    which gives ``f(rs, r2, r3, r4, r5) -> r0`` (None for objects it does not take)."""
    bound: dict[str, Callable] = {}
    for helper_id, helper in exe.helpers.items():
        bind_map = getattr(helper, "bind_map", None)
        if bind_map is None:
            continue
        for region, obj in exe.static_regions.items():
            func = bind_map(obj)
            if func is not None:
                bound[bound_name(helper_id, region)] = func
    return bound


def jit_source(exe: Executable, bound: dict[str, Callable] | None = None) -> str:
    """The Python source the JIT makes of ``exe`` (one function per subprogram)."""
    if bound is None:
        bound = bound_helpers(exe)
    lines: list[str] = []
    for start in exe.subprogs:
        lines += _FunctionWriter(exe, start, exe.subprog_end(start), bound).write(f"F{start}")
        lines.append("")
    return _LITERAL_RE.sub(lambda m: _LITERALS[m.group(1)], "\n".join(lines))


def jit_compile(exe: Executable) -> dict[str, Callable]:
    """Translate ``exe`` to Python once; returns its functions (``F<start>`` per subprogram)."""
    bound = bound_helpers(exe)
    source = jit_source(exe, bound)
    namespace: dict[str, Any] = {
        "M64": M64, "M32": M32, "SIGN64": SIGN64, "SIGN32": SIGN32,
        "BPF_MAX_LOOPS": BPF_MAX_LOOPS, "ACCESS_ERRORS": ACCESS_ERRORS,
        "mem_load": mem_load, "mem_store": mem_store, "atomic_op": atomic_op,
        "ld_abs": ld_abs, "tail_call": tail_call, "bad_jump": bad_jump,
        "ATOMIC_LOCK": ATOMIC_LOCK,
        "ATOMIC_RMW": ATOMIC_RMW,
        "sdiv": sdiv, "smod": smod, "bswap": bswap,
    }
    for size, fmt in _LOAD.items():
        namespace[f"L{size}"] = fmt.unpack_from
        namespace[f"S{size}"] = fmt.pack_into
    for helper_id, helper in exe.helpers.items():
        namespace[f"H{helper_id}"] = helper
    for btf_id, kfunc in exe.kfuncs.items():
        namespace[f"K{btf_id}"] = kfunc
    namespace.update(bound)
    code = compile(source, f"<bpf-jit {getattr(exe.owner, 'name', '') or 'prog'}>", "exec")
    exec(code, namespace)  # noqa: S102 - our own generated source
    return {f"F{start}": namespace[f"F{start}"] for start in exe.subprogs}
