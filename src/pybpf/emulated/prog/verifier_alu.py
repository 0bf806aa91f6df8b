"""The verifier's ALU and conditional-jump checks (kernel/bpf/verifier.c: check_alu_op,
adjust_reg_min_max_vals / adjust_ptr_min_max_vals, check_cond_jmp_op, is_branch_taken and
the refinement of both branches), as a part of ``verifier._Verifier``."""

from __future__ import annotations

import errno

from ...asm.opcodes import (
    AluOp,
    Instruction,
    JmpOp,
    Kind,
    Source,
)
from . import tnum
from .filter import PTR_TO_PACKET, PTR_TO_PACKET_END, PTR_TO_PACKET_META
from .memory import M32, M64
from .tnum import Tnum
from .verifier_state import (
    _PKT_ANY_TYPES,
    _PKT_TYPES,
    _SOCKET_TYPES,
    AT_PKT_END,
    BEYOND_PKT_END,
    BPF_ADDR_SPACE_CAST,
    BPF_MAX_VAR_OFF,
    CONST_PTR_TO_MAP,
    DST_OP,
    DST_OP_NO_MARK,
    MAX_PACKET_OFF,
    PTR_TO_MAP_VALUE,
    PTR_TO_RDONLY_MEM,
    PTR_TO_STACK,
    SCALAR,
    SRC_OP,
    UNKNOWN,
    Reg,
    State,
    _jump_target,
    _mark_ptr_or_null_regs,
    _ptr_at,
    _reg_width,
    _reject,
    _s64,
    assign_scalar_id_before_mov,
    scalar,
    sync_linked_regs,
    update_each_reg,
)

_ALU_TEXT = {AluOp.ADD: "+=", AluOp.SUB: "-=", AluOp.MUL: "*=", AluOp.DIV: "/=",
             AluOp.OR: "|=", AluOp.AND: "&=", AluOp.LSH: "<<=", AluOp.RSH: ">>=",
             AluOp.MOD: "%=", AluOp.XOR: "^=", AluOp.ARSH: "s>>="}


def _mov(insn: Instruction, info, regs: list[Reg]) -> Reg:
    """What a mov leaves in dst: the immediate, a copy of src, or src's low bits (sign- or
    zero-extended); the low 32 bits of a pointer are an unknown scalar."""
    if info.source is Source.K:
        return scalar(insn.imm if info.is64 else insn.imm & M32)
    src = regs[insn.src]
    if info.is64 and not insn.off:
        return src
    if src.type != SCALAR:
        return UNKNOWN if info.is64 else Reg(SCALAR, tnum.cast(tnum.UNKNOWN, 4))
    # a copy that changes no value keeps src's id (_mov_links decides it was given one)
    scalar_id = src.scalar_id if _mov_links(insn, info, src) else 0
    if not insn.off:
        return Reg(SCALAR, tnum.cast(src.var, 4), scalar_id=scalar_id)
    var = _coerce(src.var, insn.off // 8, True)
    return Reg(SCALAR, var if info.is64 else tnum.cast(var if var.is_const else tnum.UNKNOWN, 4),
               scalar_id=scalar_id)


def _mov_links(insn: Instruction, info, src: Reg) -> bool:
    """check_alu_op's BPF_MOV of a scalar register: whether the copy is the same value, so
    both share an id: a 64-bit mov always, a 32-bit one of a value that fits in 32 bits, a
    sign-extending one of a value whose sign bit (of the narrow width) is clear."""
    if src.type != SCALAR:
        return False
    if insn.off:
        return src.var.umax() < 1 << (insn.off - 1)
    return info.is64 or _reg_width(src) <= 32


def _coerce(var: Tnum, size: int, sign_extend: bool) -> Tnum:
    """A load's (or movsx's) ``size`` low bytes, zero- or sign-extended (coerce_reg_to_size,
    coerce_reg_to_size_sx)."""
    bits = 8 * size
    if not sign_extend:
        return tnum.cast(var, size)
    if var.is_const:
        return tnum.const(tnum._signed(var.value & ((1 << bits) - 1), bits))
    smin, smax = var.smin(), var.smax()
    if smin >> bits != smax >> bits:
        return tnum.UNKNOWN
    low = sorted(tnum._signed(v & ((1 << bits) - 1), bits) for v in (smin, smax))
    if (low[0] >= 0) != (low[1] >= 0):
        return tnum.UNKNOWN
    return tnum.tnum_range(low[0] & M64, low[1] & M64)


def _scalar_alu(op: AluOp, dst: Tnum, src: Tnum, bits: int) -> Tnum:
    """adjust_scalar_min_max_vals on the known bits: the kernel's tnum operations; a shift by
    an amount not known to be in range, a division or a modulo leave nothing known."""
    if op in (AluOp.LSH, AluOp.RSH, AluOp.ARSH):
        if not src.is_const or src.value >= bits:
            return tnum.UNKNOWN
        if op is AluOp.LSH:
            result = tnum.lshift(dst if bits == 64 else tnum.subreg(dst), src.value)
        elif op is AluOp.RSH:
            result = tnum.rshift(dst if bits == 64 else tnum.subreg(dst), src.value)
        else:
            result = tnum.arshift(dst if bits == 64 else tnum.subreg(dst), src.value, bits)
    elif op in (AluOp.DIV, AluOp.MOD):
        return tnum.UNKNOWN
    else:
        result = {AluOp.ADD: tnum.add, AluOp.SUB: tnum.sub, AluOp.MUL: tnum.mul,
                  AluOp.AND: tnum.and_, AluOp.OR: tnum.or_, AluOp.XOR: tnum.xor}[op](dst, src)
    return result if bits == 64 else tnum.subreg(result)


# flip_opcode, for the comparisons of a packet pointer with the end: b OP a is a FLIP[OP] b
_FLIP = {JmpOp.JGT: JmpOp.JLT, JmpOp.JLT: JmpOp.JGT, JmpOp.JGE: JmpOp.JLE,
         JmpOp.JLE: JmpOp.JGE}
# try_match_pkt_pointers, as ``pkt OP end``: whether the taken branch (else the fall-through)
# is the one where pkt is within the packet, and whether that side's bound is open (pkt < end:
# the byte at pkt is in too); on the other side pkt is at the end or, where the bound is
# closed, past it (mark_pkt_end)
_PKT_END_COMPARE = {JmpOp.JGT: (False, False), JmpOp.JLT: (True, True),
                    JmpOp.JGE: (False, True), JmpOp.JLE: (True, False)}


def _is_pkt_ptr_branch_taken(dst: Reg, src: Reg, op: JmpOp) -> bool | None:
    """is_pkt_ptr_branch_taken: a pointer known to be at (or past) the packet's end,
    compared with the end again."""
    if src.type == PTR_TO_PACKET_END:
        pkt = dst
    elif dst.type == PTR_TO_PACKET_END:
        pkt, op = src, _FLIP.get(op, op)
    else:
        return None
    if pkt.range >= 0:
        return None
    if op in (JmpOp.JLE, JmpOp.JGT) and pkt.range == BEYOND_PKT_END:
        return op is JmpOp.JGT
    if op in (JmpOp.JLT, JmpOp.JGE):
        return op is JmpOp.JGE
    return None


def _is_init_pkt_pointer(reg: Reg, ptr_type: str) -> bool:
    """reg_is_init_pkt_pointer: the pointer as the context gave it."""
    return reg.type == ptr_type and reg.off == 0 and reg.var == tnum.const(0)


def _find_good_pkt_pointers(state: State, pkt: Reg, right_open: bool) -> None:
    """find_good_pkt_pointers: ``pkt`` is within the packet (``right_open``: before its
    end), so every pointer with its base has at least the bytes up to ``pkt``'s offset in
    range. The kernel gives no range when the variable offset may reach past
    MAX_PACKET_OFF; that maximum is a value range, so here only offsets the known bits put
    past it for sure give none."""
    if pkt.off < 0 or pkt.off == 0 and right_open:
        return
    if pkt.var.umin() + pkt.off > MAX_PACKET_OFF:
        return
    new_range = pkt.off + 1 if right_open else pkt.off

    def give_range(reg: Reg) -> Reg:
        if reg.type != pkt.type or reg.pkt_id != pkt.pkt_id or reg.range >= new_range:
            return reg
        return reg._replace(range=new_range)

    update_each_reg(state, give_range)


def _mark_pkt_end(state: State, regno: int, beyond: bool) -> None:
    """mark_pkt_end: the register (data, not data_meta) is at the packet's end, or past it."""
    reg = state.cur.regs[regno]
    if reg.type == PTR_TO_PACKET:
        state.cur.regs[regno] = reg._replace(range=BEYOND_PKT_END if beyond else AT_PKT_END)


def _try_match_pkt_pointers(insn: Instruction, info, this_branch: State,
                            other_branch: State) -> None:
    """try_match_pkt_pointers: a 64-bit comparison of a packet pointer with the packet's
    end (or of a data_meta pointer with data as the context gave it), in either order, gives
    the pointer's base a range on the side where it is within."""
    if info.source is not Source.X or not info.is64 or info.op not in _PKT_END_COMPARE:
        return
    dst, src = this_branch.cur.regs[insn.dst], this_branch.cur.regs[insn.src]
    if dst.type == PTR_TO_PACKET and src.type == PTR_TO_PACKET_END \
            or dst.type == PTR_TO_PACKET_META and _is_init_pkt_pointer(src, PTR_TO_PACKET):
        regno, op = insn.dst, info.op
    elif dst.type == PTR_TO_PACKET_END and src.type == PTR_TO_PACKET \
            or _is_init_pkt_pointer(dst, PTR_TO_PACKET) and src.type == PTR_TO_PACKET_META:
        regno, op = insn.src, _FLIP[info.op]
    else:
        return
    good_when_taken, right_open = _PKT_END_COMPARE[op]
    good, at_end = (other_branch, this_branch) if good_when_taken \
        else (this_branch, other_branch)
    _find_good_pkt_pointers(good, good.cur.regs[regno], right_open)
    _mark_pkt_end(at_end, regno, beyond=not right_open)


def _is_branch_taken(dst: Reg, src: Reg, op: JmpOp, is_jmp32: bool) -> bool | None:
    """is_branch_taken: True/False when the known bits (or a pointer known not to be NULL,
    compared with 0, or one known to be at the packet's end) decide the branch, None when
    both ways are possible."""
    if dst.type in _PKT_ANY_TYPES and src.type in _PKT_ANY_TYPES and not is_jmp32:
        return _is_pkt_ptr_branch_taken(dst, src, op)
    if dst.is_pointer or src.is_pointer:
        ptr, other = (dst, src) if src.type == SCALAR else (src, dst)
        if other.type != SCALAR or not _const_in(other.var, is_jmp32) or ptr.id \
                or ptr.type not in _NOT_NULL_TYPES:
            return None
        if _low(other.var, is_jmp32).value:
            return None
        return {JmpOp.JEQ: False, JmpOp.JNE: True}.get(op)
    t1, t2 = _low(dst.var, is_jmp32), _low(src.var, is_jmp32)
    bits = 32 if is_jmp32 else 64
    if op in (JmpOp.JEQ, JmpOp.JNE):
        equal = None
        if t1.is_const and t2.is_const:
            equal = t1.value == t2.value
        elif (t1.value ^ t2.value) & ~(t1.mask | t2.mask) \
                or t1.umin() > t2.umax() or t1.umax() < t2.umin() \
                or t1.smin(bits) > t2.smax(bits) or t1.smax(bits) < t2.smin(bits):
            equal = False
        if equal is None:
            return None
        return equal if op is JmpOp.JEQ else not equal
    if op is JmpOp.JSET:
        if not t2.is_const:
            t1, t2 = t2, t1
        if not t2.is_const:
            return None
        if t1.value & t2.value:
            return True
        if not (t1.mask | t1.value) & t2.value:
            return False
        return None
    signed = op in (JmpOp.JSGT, JmpOp.JSGE, JmpOp.JSLT, JmpOp.JSLE)
    lo1, hi1 = (t1.smin(bits), t1.smax(bits)) if signed else (t1.umin(), t1.umax())
    lo2, hi2 = (t2.smin(bits), t2.smax(bits)) if signed else (t2.umin(), t2.umax())
    if op in (JmpOp.JGT, JmpOp.JSGT):
        return True if lo1 > hi2 else False if hi1 <= lo2 else None
    if op in (JmpOp.JGE, JmpOp.JSGE):
        return True if lo1 >= hi2 else False if hi1 < lo2 else None
    if op in (JmpOp.JLT, JmpOp.JSLT):
        return True if hi1 < lo2 else False if lo1 >= hi2 else None
    return True if hi1 <= lo2 else False if lo1 > hi2 else None  # JLE, JSLE


# reg_not_null: pointers that are never NULL (a map value once checked, a map, a socket)
# reg_not_null(): PTR_TO_MEM (here: a kfunc's address) is never NULL either
_NOT_NULL_TYPES = frozenset({PTR_TO_MAP_VALUE, CONST_PTR_TO_MAP, PTR_TO_RDONLY_MEM, *_SOCKET_TYPES})


def _low(var: Tnum, is_jmp32: bool) -> Tnum:
    return tnum.subreg(var) if is_jmp32 else var


def _const_in(var: Tnum, is_jmp32: bool) -> bool:
    return _low(var, is_jmp32).is_const


def _refine(taken: list[Reg], fallthrough: list[Reg], insn: Instruction, op: JmpOp,
            is_jmp32: bool) -> None:
    """regs_refine_cond_op, for the known bits: where a branch says two scalars are equal
    (JEQ taken, JNE not) both get the bits either has; where JSET with a constant says bits
    are clear, they are known 0, and where it says a single bit is set, that bit is 1."""
    dst, src_reg = insn.dst, insn.src if insn.opcode & Source.X else None

    def same(regs: list[Reg]) -> None:
        a = regs[dst].var
        b = regs[src_reg].var if src_reg is not None else tnum.const(_imm(insn, is_jmp32))
        if is_jmp32:
            both = tnum.intersect(tnum.subreg(a), tnum.subreg(b))
            regs[dst] = regs[dst]._replace(var=tnum.with_subreg(a, both))
            if src_reg is not None:
                regs[src_reg] = regs[src_reg]._replace(var=tnum.with_subreg(b, both))
        else:
            regs[dst] = regs[dst]._replace(var=tnum.intersect(a, b))
            if src_reg is not None:
                regs[src_reg] = regs[src_reg]._replace(var=regs[dst].var)

    def bits(regs: list[Reg], regno: int, combine, value: int) -> None:
        var = regs[regno].var
        if is_jmp32:
            var = tnum.with_subreg(var, combine(tnum.subreg(var), tnum.const(value & M32)))
        else:
            var = combine(var, tnum.const(value))
        regs[regno] = regs[regno]._replace(var=var)

    if op is JmpOp.JEQ:
        same(taken)
    elif op is JmpOp.JNE:
        same(fallthrough)
    elif op is JmpOp.JSET:
        regno, mask = dst, None  # the register tested against a constant mask
        if src_reg is None:
            mask = _imm(insn, is_jmp32)
        elif _const_in(fallthrough[src_reg].var, is_jmp32):
            mask = _low(fallthrough[src_reg].var, is_jmp32).value
        elif _const_in(fallthrough[dst].var, is_jmp32):
            regno, mask = src_reg, _low(fallthrough[dst].var, is_jmp32).value
        if mask is None:
            return
        if mask and not mask & (mask - 1):
            bits(taken, regno, tnum.or_, mask)
        bits(fallthrough, regno, tnum.and_, ~mask & M64)


def _link_add_const(op: AluOp, info, dst: Reg, src: Reg, result: Reg) -> Reg:
    """adjust_reg_min_max_vals: ``rX += K`` (or ``-= K``, K within s32) on a linked scalar
    keeps it linked, as the value plus K (BPF_ADD_CONST); once only, and a 32-bit one only
    of a value that fits in 32 bits. Any other ALU leaves a new value, linked to nothing."""
    alu32 = not info.is64
    if op not in (AluOp.ADD, AluOp.SUB) or not dst.scalar_id \
            or not _const_in(src.var, alu32) or dst.add_const:
        return result
    value = _low(src.var, alu32).value
    if alu32:
        if _reg_width(dst) > 32:
            return result
        off = tnum._signed(value, 32)
    else:
        off = _s64(value)
        if not -(1 << 31) <= off < 1 << 31:
            return result
    if op is AluOp.SUB:
        if off == -(1 << 31):
            return result
        off = -off
    return result._replace(scalar_id=dst.scalar_id, add_const=32 if alu32 else 64, delta=off)


def _imm(insn: Instruction, is_jmp32: bool) -> int:
    return insn.imm & (M32 if is_jmp32 else M64)




class AluChecks:
    """check_alu_op and check_cond_jmp_op, for ``_Verifier``."""

    # -- ALU ---------------------------------------------------------------------------------
    def check_alu_op(self, insn: Instruction, info, regs: list[Reg]) -> None:
        op, k = info.op, info.source is Source.K
        bits = 64 if info.is64 else 32
        dst = insn.dst
        if info.kind in (Kind.NEG, Kind.END):
            if info.kind is Kind.NEG:
                if not k or insn.src or insn.off or insn.imm:
                    raise _reject(errno.EINVAL, "BPF_NEG uses reserved fields")
            elif insn.src or insn.off or insn.imm not in (16, 32, 64) \
                    or (info.is64 and not k):
                raise _reject(errno.EINVAL, "BPF_END uses reserved fields")
            self.check_reg_arg(regs, dst, SRC_OP)
            if regs[dst].type != SCALAR:
                self.check_reg_arg(regs, dst, DST_OP)
                return
            self.check_reg_arg(regs, dst, DST_OP_NO_MARK)
            var = regs[dst].var
            if info.kind is Kind.NEG:
                var = tnum.cast(tnum.neg(var), bits // 8)
            elif k and not info.is64:  # le: the low bits, as they are on a little-endian CPU
                var = tnum.cast(var, insn.imm // 8)
            else:
                var = tnum.bswap(var, insn.imm)
            regs[dst] = Reg(SCALAR, var)
            return
        if op is AluOp.MOV:
            if not k:
                allowed = (0, 8, 16, 32) if info.is64 else (0, 8, 16)
                if info.is64 and insn.off == BPF_ADDR_SPACE_CAST:
                    if insn.imm not in (1, 1 << 16):
                        raise _reject(errno.EINVAL, "addr_space_cast insn can only convert "
                                      "between address space 1 and 0")
                    raise _reject(errno.EINVAL, "addr_space_cast insn can only be used in a "
                                  "program that has an associated arena")
                if insn.off not in allowed or insn.imm:
                    raise _reject(errno.EINVAL, "BPF_MOV uses reserved fields")
                self.check_reg_arg(regs, insn.src, SRC_OP)
            elif insn.src or insn.off:
                raise _reject(errno.EINVAL, "BPF_MOV uses reserved fields")
            self.check_reg_arg(regs, dst, DST_OP_NO_MARK)
            if not k and _mov_links(insn, info, regs[insn.src]):
                regs[insn.src] = assign_scalar_id_before_mov(regs[insn.src], self.new_id)
            regs[dst] = _mov(insn, info, regs)
            return
        if op not in _ALU_TEXT:
            raise _reject(errno.EINVAL, f"invalid BPF_ALU opcode {op >> 4:x}")
        if not k and (insn.imm or insn.off not in (0, 1)) \
                or k and (insn.src or insn.off not in (0, 1)) \
                or insn.off == 1 and op not in (AluOp.DIV, AluOp.MOD):
            raise _reject(errno.EINVAL, "BPF_ALU uses reserved fields")
        if not k:
            self.check_reg_arg(regs, insn.src, SRC_OP)
        self.check_reg_arg(regs, dst, SRC_OP)
        if k and op in (AluOp.DIV, AluOp.MOD) and insn.imm == 0:
            raise _reject(errno.EINVAL, "div by zero")
        if k and op in (AluOp.LSH, AluOp.RSH, AluOp.ARSH) and not 0 <= insn.imm < bits:
            raise _reject(errno.EINVAL, f"invalid shift {insn.imm}")
        self.check_reg_arg(regs, dst, DST_OP_NO_MARK)
        src = scalar(insn.imm) if k else regs[insn.src]
        regs[dst] = self.adjust_reg_min_max_vals(insn, info, regs[dst], src)

    def adjust_reg_min_max_vals(self, insn: Instruction, info, dst: Reg, src: Reg) -> Reg:
        op = info.op
        if src.is_pointer:
            if dst.is_pointer:
                if op is AluOp.SUB:  # pointer difference (allowed: the loader may leak)
                    return UNKNOWN
                raise _reject(errno.EACCES, f"R{insn.dst} pointer {_ALU_TEXT[op]} pointer "
                              "prohibited")
            return self.adjust_ptr_min_max_vals(insn, info, src, dst, scalar_dst=True)
        if dst.is_pointer:
            return self.adjust_ptr_min_max_vals(insn, info, dst, src, scalar_dst=False)
        result = Reg(SCALAR, _scalar_alu(op, dst.var, src.var, 64 if info.is64 else 32))
        return _link_add_const(op, info, dst, src, result)

    def adjust_ptr_min_max_vals(self, insn: Instruction, info, ptr: Reg, off_reg: Reg,
                                scalar_dst: bool) -> Reg:
        dst, op = insn.dst, info.op
        known = off_reg.var.is_const
        if not info.is64:
            if op is AluOp.SUB:
                return UNKNOWN
            raise _reject(errno.EACCES, f"R{dst} 32-bit pointer arithmetic prohibited")
        if ptr.id:
            raise _reject(errno.EACCES, f"R{dst} pointer arithmetic on {ptr.type_str()} "
                          "prohibited, null-check it first")
        if ptr.type == CONST_PTR_TO_MAP and not (known and off_reg.var.value == 0
                                                 and op is AluOp.ADD) \
                or ptr.type in _SOCKET_TYPES or ptr.type == PTR_TO_PACKET_END:
            raise _reject(errno.EACCES, f"R{dst} pointer arithmetic on {ptr.type_str()} "
                          "prohibited")
        value = _s64(off_reg.var.value)
        if known and not -BPF_MAX_VAR_OFF < value < BPF_MAX_VAR_OFF:
            raise _reject(errno.EINVAL, f"math between {ptr.type_str()} pointer and {value} "
                          "is not allowed")
        if op is AluOp.ADD:
            if known:
                return _ptr_at(ptr, ptr.off + value)
            moved = ptr._replace(var=tnum.add(ptr.var, off_reg.var))
            if ptr.type in _PKT_TYPES:  # a new base, of which nothing is known in range yet
                return moved._replace(pkt_id=self.new_id(), range=0)
            return moved
        if op is AluOp.SUB:
            if scalar_dst:
                raise _reject(errno.EACCES, f"R{dst} tried to subtract pointer from scalar")
            if ptr.type == PTR_TO_STACK:
                raise _reject(errno.EACCES, f"R{dst} subtraction from stack pointer "
                              "prohibited")
            if known:
                return _ptr_at(ptr, ptr.off - value)
            moved = ptr._replace(var=tnum.sub(ptr.var, off_reg.var))
            if ptr.type in _PKT_TYPES:
                # a new base; the old range still holds unless the subtrahend may be
                # negative (the kernel's smin, a value range: here only when the known bits
                # make it negative for sure)
                negative = off_reg.var.smax() < 0
                return moved._replace(pkt_id=self.new_id(), range=0 if negative else ptr.range)
            return moved
        if op in (AluOp.AND, AluOp.OR, AluOp.XOR):
            raise _reject(errno.EACCES, f"R{dst} bitwise operator {_ALU_TEXT[op]} on pointer "
                          "prohibited")
        raise _reject(errno.EACCES, f"R{dst} pointer arithmetic with {_ALU_TEXT[op]} operator "
                      "prohibited")

    # -- jumps -------------------------------------------------------------------------------
    def check_cond_jmp_op(self, pc: int, insn: Instruction, info,
                          state: State) -> tuple[int, list]:
        if info.kind is Kind.JCOND:
            if insn.src or insn.dst or insn.imm:
                raise _reject(errno.EINVAL, f"invalid may_goto imm {insn.imm}")
            return _jump_target(pc, insn), [(pc + 1, state.copy())]
        regs = state.cur.regs
        self.check_reg_arg(regs, insn.dst, SRC_OP)
        if info.source is Source.X:
            if insn.imm:
                raise _reject(errno.EINVAL, "BPF_JMP/JMP32 uses reserved fields")
            self.check_reg_arg(regs, insn.src, SRC_OP)
            src = regs[insn.src]
        else:
            if insn.src:
                raise _reject(errno.EINVAL, "BPF_JMP/JMP32 uses reserved fields")
            src = scalar(insn.imm)
        dst = regs[insn.dst]
        is_jmp32 = not info.is64
        target = pc + insn.off + 1
        taken = _is_branch_taken(dst, src, info.op, is_jmp32)
        if taken is not None:
            return (target if taken else pc + 1), []
        other = state.copy()
        other_regs = other.cur.regs
        if dst.type == SCALAR and src.type == SCALAR:
            _refine(other_regs, regs, insn, info.op, is_jmp32)
            # sync_linked_regs: what the jump told of each register, its copies know too
            linked = [insn.src] if info.source is Source.X else []
            for regno in [*linked, insn.dst]:
                if regs[regno].scalar_id:
                    sync_linked_regs(state, regs[regno])
                    sync_linked_regs(other, other_regs[regno])
        if not is_jmp32 and info.source is Source.K and insn.imm == 0 \
                and info.op in (JmpOp.JEQ, JmpOp.JNE) and dst.id:
            _mark_ptr_or_null_regs(state, dst.id, is_null=info.op is JmpOp.JNE)
            _mark_ptr_or_null_regs(other, dst.id, is_null=info.op is JmpOp.JEQ)
        else:
            _try_match_pkt_pointers(insn, info, state, other)
        return pc + 1, [(target, other)]
