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
from . import verifier_bounds as vb
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
    zero-extended, with their ranges); the low 32 bits of a pointer are an unknown
    scalar."""
    if info.source is Source.K:
        return scalar(insn.imm if info.is64 else insn.imm & M32)
    src = regs[insn.src]
    if info.is64 and not insn.off:
        return src
    if src.type != SCALAR:
        return UNKNOWN if info.is64 else Reg(SCALAR, tnum.cast(tnum.UNKNOWN, 4))
    # a copy that changes no value keeps src's id (_mov_links decides it was given one)
    scalar_id = src.scalar_id if _mov_links(insn, info, src) else 0
    r = vb.of(src)
    if info.is64:
        vb.coerce_reg_to_size_sx(r, insn.off // 8)
    else:
        if insn.off:
            vb.coerce_subreg_to_size_sx(r, insn.off // 8)
        vb.zext_32_to_64(r)
        vb.reg_bounds_sync(r)
    return vb.to_reg(Reg(SCALAR, scalar_id=scalar_id), r)


def _mov_links(insn: Instruction, info, src: Reg) -> bool:
    """check_alu_op's BPF_MOV of a scalar register: whether the copy is the same value, so
    both share an id: a 64-bit mov always, a 32-bit one of a value that fits in 32 bits, a
    sign-extending one of a value whose sign bit (of the narrow width) is clear."""
    if src.type != SCALAR:
        return False
    if insn.off:
        return vb.bounds(src).umax < 1 << (insn.off - 1)
    return info.is64 or _reg_width(src) <= 32


def _coerce(reg: Reg, size: int, sign_extend: bool) -> Reg:
    """A load's ``size`` low bytes of a scalar, zero- or sign-extended, with its ranges
    (coerce_reg_to_size, coerce_reg_to_size_sx): a new value, linked to nothing."""
    r = vb.of(reg)
    if sign_extend:
        vb.coerce_reg_to_size_sx(r, size)
    else:
        vb.coerce_reg_to_size(r, size)
    return vb.to_reg(UNKNOWN, r)


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
    range; none when the variable offset may reach past MAX_PACKET_OFF."""
    if pkt.off < 0 or pkt.off == 0 and right_open:
        return
    umax = vb.bounds(pkt).umax
    if umax > MAX_PACKET_OFF or umax + pkt.off > MAX_PACKET_OFF:
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
    """is_branch_taken: True/False when the known bits and ranges (or a pointer known not
    to be NULL, compared with 0, or one known to be at the packet's end) decide the branch,
    None when both ways are possible (a register compared with itself too: 6.18 decides
    that by its bounds alone)."""
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
    return vb.is_scalar_branch_taken(vb.of(dst), vb.of(src), op, is_jmp32)


# reg_not_null: pointers that are never NULL (a map value once checked, a map, a socket)
# reg_not_null(): PTR_TO_MEM (here: a kfunc's address) is never NULL either
_NOT_NULL_TYPES = frozenset({PTR_TO_MAP_VALUE, CONST_PTR_TO_MAP, PTR_TO_RDONLY_MEM, *_SOCKET_TYPES})


def _low(var: Tnum, is_jmp32: bool) -> Tnum:
    return tnum.subreg(var) if is_jmp32 else var


def _const_in(var: Tnum, is_jmp32: bool) -> bool:
    return _low(var, is_jmp32).is_const


def _refine(taken: list[Reg], fallthrough: list[Reg], insn: Instruction, op: JmpOp,
            is_jmp32: bool) -> None:
    """reg_set_min_max: what each branch tells of the two scalars compared (the jump's
    condition, or its reverse on the fall-through), their bounds synced after. A register
    compared with itself is both of them at once, as 6.18 passes it (a strict compare's
    reverse, ``r < r`` on one side, takes one off its max and adds one to its min). Bounds
    that cross (a branch the known bits and ranges did not prove dead, but is) are
    forgotten, as reg_bounds_sanity_check does."""
    dst, src_reg = insn.dst, insn.src if insn.opcode & Source.X else None
    for regs, cond in ((fallthrough, vb.REV[op]), (taken, op)):
        r1 = vb.of(regs[dst])
        if src_reg is None:
            r2 = vb._R(tnum.UNKNOWN, vb.UNBOUNDED)
            r2.mark_known(insn.imm)  # the instruction's imm, sign-extended
        elif src_reg == dst:
            r2 = r1
        else:
            r2 = vb.of(regs[src_reg])
        vb.regs_refine_cond_op(r1, r2, cond, is_jmp32)
        for r in (r1, r2):  # one register: synced twice, as the kernel syncs it
            vb.reg_bounds_sync(r)
        for r in (r1, r2):
            if not vb.valid(r):
                r.unbounded()
        regs[dst] = vb.to_reg(regs[dst], r1)
        if src_reg is not None:
            regs[src_reg] = vb.to_reg(regs[src_reg], r2)


def _maybe_fork_scalars(regs: list[Reg], regno: int) -> Reg | None:
    """maybe_fork_scalars: a scalar in [-1, 0] (or whose low half is), ANDed or ORed with a
    constant, is -1 on this path and 0 on one walked later (from the same instruction),
    each then exact. Returns the 0 one, or None where dst is not in [-1, 0]."""
    reg = regs[regno]
    b = vb.bounds(reg)
    if b.smin == -1 and b.smax == 0:
        alu32 = False
    elif b.s32_min == -1 and b.s32_max == 0:
        alu32 = True
    else:
        return None
    minus, zero = vb.of(reg), vb.of(reg)
    if alu32:
        minus.mark_known32(M32)
        zero.mark_known32(0)
    else:
        minus.mark_known(M64)
        zero.mark_known(0)
        reg = reg._replace(scalar_id=0, add_const=0, delta=0)
    regs[regno] = vb.to_reg(reg, minus)
    return vb.to_reg(reg, zero)


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


class AluChecks:
    """check_alu_op and check_cond_jmp_op, for ``_Verifier``."""

    # -- ALU ---------------------------------------------------------------------------------
    def check_alu_op(self, insn: Instruction, info, regs: list[Reg]) -> Reg | None:
        """check_alu_op on ``regs``; returns what dst is on the path maybe_fork_scalars
        leaves to walk later (None: no fork)."""
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
                r = vb.of(regs[dst])
                vb.scalar_neg(r, not info.is64)
                regs[dst] = vb.to_reg(UNKNOWN, r)
                return
            if k and not info.is64:  # le: the low bits, as they are on a little-endian CPU
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
        zero = None
        if op in (AluOp.AND, AluOp.OR) and src.type == SCALAR and src.var.is_const \
                and regs[dst].type == SCALAR:
            zero = _maybe_fork_scalars(regs, dst)
        regs[dst] = self.adjust_reg_min_max_vals(insn, info, regs[dst], src)
        return zero

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
        r = vb.of(dst)
        if not vb.scalar_alu(op, r, vb.of(src), not info.is64):
            return UNKNOWN
        return _link_add_const(op, info, dst, src, vb.to_reg(UNKNOWN, r))

    def adjust_ptr_min_max_vals(self, insn: Instruction, info, ptr: Reg, off_reg: Reg,
                                scalar_dst: bool) -> Reg:
        dst, op = insn.dst, info.op
        known = off_reg.var.is_const
        off = vb.of(off_reg)
        if not vb.valid(off):
            return UNKNOWN  # bounds from a dead branch: the result is tainted
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
        self.check_reg_sane_offset(off_reg, off, ptr)
        if not ptr.wide:
            self.check_reg_sane_offset(ptr, vb.of(ptr), ptr)
        if op is AluOp.ADD:
            if known and ptr.off + off.smin == tnum._signed((ptr.off + off.smin) & M32, 32):
                return _ptr_at(ptr, ptr.off + off.smin)
            moved = self.ptr_var_off(ptr, off, op)
            if ptr.type in _PKT_TYPES:  # a new base, of which nothing is known in range yet
                return moved._replace(pkt_id=self.new_id(), range=0)
            return moved
        if op is AluOp.SUB:
            if scalar_dst:
                raise _reject(errno.EACCES, f"R{dst} tried to subtract pointer from scalar")
            if ptr.type == PTR_TO_STACK:
                raise _reject(errno.EACCES, f"R{dst} subtraction from stack pointer "
                              "prohibited")
            if known and ptr.off - off.smin == tnum._signed((ptr.off - off.smin) & M32, 32):
                return _ptr_at(ptr, ptr.off - off.smin)
            moved = self.ptr_var_off(ptr, off, op)
            if ptr.type in _PKT_TYPES:
                # a new base; the old range still holds unless the subtrahend may be negative
                return moved._replace(pkt_id=self.new_id(),
                                      range=0 if off.smin < 0 else ptr.range)
            return moved
        if op in (AluOp.AND, AluOp.OR, AluOp.XOR):
            raise _reject(errno.EACCES, f"R{dst} bitwise operator {_ALU_TEXT[op]} on pointer "
                          "prohibited")
        raise _reject(errno.EACCES, f"R{dst} pointer arithmetic with {_ALU_TEXT[op]} operator "
                      "prohibited")

    def ptr_var_off(self, ptr: Reg, off: vb._R, op: AluOp) -> Reg:
        """adjust_ptr_min_max_vals' new variable offset: the pointer's bounds plus (minus)
        the scalar's, unbounded where they may overflow, its known bits tnum_add's
        (tnum_sub's); then check_reg_sane_offset on the result and reg_bounds_sync. A
        widened pointer stays one."""
        p = vb.of(ptr)
        d = p.copy()
        d.unbound32()  # pointer types carry no 32-bit bounds
        if op is AluOp.ADD:
            smin, smax = p.smin + off.smin, p.smax + off.smax
            umin, umax = p.umin + off.umin, p.umax + off.umax
            d.var = tnum.add(p.var, off.var)
        else:
            smin, smax = p.smin - off.smax, p.smax - off.smin
            umin, umax = p.umin - off.umax, p.umax - off.umin
            d.var = tnum.sub(p.var, off.var)
        if vb.S64_MIN <= smin <= vb.S64_MAX and vb.S64_MIN <= smax <= vb.S64_MAX:
            d.smin, d.smax = smin, smax
        else:
            d.smin, d.smax = vb.S64_MIN, vb.S64_MAX
        if 0 <= umin and umax <= vb.U64_MAX:
            d.umin, d.umax = umin, umax
        else:
            d.umin, d.umax = 0, vb.U64_MAX
        if ptr.wide:
            return ptr._replace(var=tnum.UNKNOWN, rng=None)
        self.check_reg_sane_offset(ptr, d, ptr)
        vb.reg_bounds_sync(d)
        return vb.to_reg(ptr, d)

    @staticmethod
    def check_reg_sane_offset(reg: Reg, r: vb._R, ptr: Reg) -> None:
        """6.18's check_reg_sane_offset_scalar and check_reg_sane_offset_ptr: a known value,
        the fixed offset and the least value the bounds allow all within BPF_MAX_VAR_OFF; a
        scalar's least value is one at all. A pointer out of them is refused for its
        "pointer offset", a scalar for its value."""
        kind = ptr.type_str()
        if reg.is_pointer:
            for off in (_s64(r.var.value) if not r.var.mask else 0, reg.off, r.smin):
                if not -BPF_MAX_VAR_OFF < off < BPF_MAX_VAR_OFF:
                    raise _reject(errno.EINVAL, f"{kind} pointer offset {off} is not allowed")
            return
        if not r.var.mask:
            value = _s64(r.var.value)
            if not -BPF_MAX_VAR_OFF < value < BPF_MAX_VAR_OFF:
                raise _reject(errno.EINVAL, f"math between {kind} pointer and {value} "
                              "is not allowed")
        if r.smin == vb.S64_MIN:
            raise _reject(errno.EINVAL, f"math between {kind} pointer and register with "
                          "unbounded min value is not allowed")
        if not -BPF_MAX_VAR_OFF < r.smin < BPF_MAX_VAR_OFF:
            raise _reject(errno.EINVAL, f"value {r.smin} makes {kind} pointer be out of "
                          "bounds")

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
