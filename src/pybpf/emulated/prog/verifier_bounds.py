"""A scalar's value ranges beside its known bits (kernel/bpf/verifier.c's smin/smax,
umin/umax and their 32-bit halves in struct bpf_reg_state): reg_bounds_sync, the ALU
transfer functions of adjust_scalar_min_max_vals, the coercions of narrow loads and
sign-extending movs, is_scalar_branch_taken and regs_refine_cond_op.

A register keeps its ranges in ``Reg.rng``, a ``Bounds``, or None where they are exactly the
ones its known bits imply (``implied``): a constant, or any scalar made from bits alone, so
most registers carry none and two states the kernel holds equal compare equal here. The
functions mirror the kernel's on a small mutable record (``_R``), then ``to_reg`` turns it
back into that form.
"""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

from ...asm.opcodes import AluOp, JmpOp
from . import tnum
from .memory import M32, M64
from .tnum import Tnum

S64_MIN, S64_MAX = -(1 << 63), (1 << 63) - 1
S32_MIN, S32_MAX = -(1 << 31), (1 << 31) - 1
U64_MAX, U32_MAX = M64, M32
_NOT_M32 = M64 & ~M32


def s64(v: int) -> int:
    v &= M64
    return v - (1 << 64) if v >> 63 else v


def s32(v: int) -> int:
    v &= M32
    return v - (1 << 32) if v >> 31 else v


class Bounds(NamedTuple):
    """The eight bounds, signed ones as Python ints of their sign."""

    smin: int
    smax: int
    umin: int
    umax: int
    s32_min: int
    s32_max: int
    u32_min: int
    u32_max: int


UNBOUNDED = Bounds(S64_MIN, S64_MAX, 0, U64_MAX, S32_MIN, S32_MAX, 0, U32_MAX)


class _R:
    """A register's var_off and bounds while a kernel function works on them."""

    __slots__ = ("var", "smin", "smax", "umin", "umax", "s32_min", "s32_max", "u32_min",
                 "u32_max")

    def __init__(self, var: Tnum, b: Bounds) -> None:
        self.var = var
        (self.smin, self.smax, self.umin, self.umax,
         self.s32_min, self.s32_max, self.u32_min, self.u32_max) = b

    def bounds(self) -> Bounds:
        return Bounds(self.smin, self.smax, self.umin, self.umax,
                      self.s32_min, self.s32_max, self.u32_min, self.u32_max)

    def copy(self) -> _R:
        return _R(self.var, self.bounds())

    # ___mark_reg_known / __mark_reg32_known / __mark_reg{32,64}_unbounded
    def mark_known(self, imm: int) -> None:
        imm &= M64
        self.var = Tnum(imm, 0)
        self.smin = self.smax = s64(imm)
        self.umin = self.umax = imm
        self.s32_min = self.s32_max = s32(imm)
        self.u32_min = self.u32_max = imm & M32

    def mark_known32(self, imm: int) -> None:
        imm &= M32
        self.var = Tnum((self.var.value & _NOT_M32) | imm, self.var.mask & _NOT_M32)
        self.s32_min = self.s32_max = s32(imm)
        self.u32_min = self.u32_max = imm

    def unbound64(self) -> None:
        self.smin, self.smax, self.umin, self.umax = S64_MIN, S64_MAX, 0, U64_MAX

    def unbound32(self) -> None:
        self.s32_min, self.s32_max, self.u32_min, self.u32_max = S32_MIN, S32_MAX, 0, U32_MAX

    def unbounded(self) -> None:
        self.unbound64()
        self.unbound32()

    def is_const(self, is_jmp32: bool) -> bool:
        return not (self.var.mask & M32 if is_jmp32 else self.var.mask)

    def const_value(self, is_jmp32: bool) -> int:
        return self.var.value & M32 if is_jmp32 else self.var.value


# -- reg_bounds_sync ---------------------------------------------------------------------------
def _update_reg32_bounds(r: _R) -> None:
    v, m = r.var.value & M32, r.var.mask & M32
    r.s32_min = max(r.s32_min, s32(v | (m & 0x80000000)))
    r.s32_max = min(r.s32_max, s32(v | (m & 0x7FFFFFFF)))
    r.u32_min = max(r.u32_min, v)
    r.u32_max = min(r.u32_max, v | m)


def _update_reg64_bounds(r: _R) -> None:
    v, m = r.var
    r.smin = max(r.smin, s64(v | (m & (1 << 63))))
    r.smax = min(r.smax, s64(v | (m & S64_MAX)))
    r.umin = max(r.umin, v)
    r.umax = min(r.umax, v | m)
    # the u64 range and the known bits may have a single value in common
    umin, umax = r.umin, r.umax
    nxt = tnum.step(r.var, umin)
    umin_in = umin & ~m == v
    if umin_in and nxt > umax:
        r.mark_known(umin)
    elif not umin_in and nxt == v | m:
        r.mark_known(nxt)
    elif not umin_in and nxt <= umax and tnum.step(r.var, nxt) > umax:
        r.mark_known(nxt)


def update_reg_bounds(r: _R) -> None:
    _update_reg32_bounds(r)
    _update_reg64_bounds(r)


def _reg32_deduce_bounds(r: _R) -> None:
    if r.umin >> 32 == r.umax >> 32:
        r.u32_min = max(r.u32_min, r.umin & M32)
        r.u32_max = min(r.u32_max, r.umax & M32)
        if s32(r.umin) <= s32(r.umax):
            r.s32_min = max(r.s32_min, s32(r.umin))
            r.s32_max = min(r.s32_max, s32(r.umax))
    if r.smin >> 32 == r.smax >> 32:
        if r.smin & M32 <= r.smax & M32:
            r.u32_min = max(r.u32_min, r.smin & M32)
            r.u32_max = min(r.u32_max, r.smax & M32)
        if s32(r.smin) <= s32(r.smax):
            r.s32_min = max(r.s32_min, s32(r.smin))
            r.s32_max = min(r.s32_max, s32(r.smax))
    if ((r.umin >> 32) + 1) & M32 == (r.umax >> 32) & M32 \
            and s32(r.umin) < 0 <= s32(r.umax):
        r.s32_min = max(r.s32_min, s32(r.umin))
        r.s32_max = min(r.s32_max, s32(r.umax))
    if ((r.smin >> 32) + 1) & M32 == (r.smax >> 32) & M32 \
            and s32(r.smin) < 0 <= s32(r.smax):
        r.s32_min = max(r.s32_min, s32(r.smin))
        r.s32_max = min(r.s32_max, s32(r.smax))
    if s32(r.u32_min) <= s32(r.u32_max):
        r.s32_min = max(r.s32_min, s32(r.u32_min))
        r.s32_max = min(r.s32_max, s32(r.u32_max))
    if r.s32_min & M32 <= r.s32_max & M32:
        r.u32_min = max(r.u32_min, r.s32_min & M32)
        r.u32_max = min(r.u32_max, r.s32_max & M32)
    elif r.u32_max < r.s32_min & M32:
        # the s32 range crosses the sign boundary, the u32 one overlaps its upper part only
        r.s32_min = s32(r.u32_min)
        r.u32_max = min(r.u32_max, r.s32_max & M32)
    elif r.s32_max & M32 < r.u32_min:
        r.s32_max = s32(r.u32_max)
        r.u32_min = max(r.u32_min, r.s32_min & M32)


def _reg64_deduce_bounds(r: _R) -> None:
    if s64(r.umin) <= s64(r.umax):
        r.smin = max(r.smin, s64(r.umin))
        r.smax = min(r.smax, s64(r.umax))
    if r.smin & M64 <= r.smax & M64:
        r.umin = max(r.umin, r.smin & M64)
        r.umax = min(r.umax, r.smax & M64)
    elif r.umax < r.smin & M64:
        # the s64 range crosses the sign boundary, the u64 one overlaps its upper part only
        r.smin = s64(r.umin)
        r.umax = min(r.umax, r.smax & M64)
    elif r.smax & M64 < r.umin:
        r.smax = s64(r.umax)
        r.umin = max(r.umin, r.smin & M64)


def _reg_deduce_mixed_bounds(r: _R) -> None:
    r.umin = max(r.umin, (r.umin & _NOT_M32) | r.u32_min)
    r.umax = min(r.umax, (r.umax & _NOT_M32) | r.u32_max)
    r.smin = max(r.smin, (r.smin & ~M32) | r.u32_min)
    r.smax = min(r.smax, (r.smax & ~M32) | r.u32_max)
    if r.s32_min >= 0 and r.smin >= S32_MIN and r.smax <= S32_MAX:
        r.smin = r.umin = r.s32_min
        r.smax = r.umax = r.s32_max
        r.var = tnum.intersect(r.var, tnum.tnum_range(r.smin & M64, r.smax & M64))


def _reg_deduce_bounds(r: _R) -> None:
    _reg32_deduce_bounds(r)
    _reg64_deduce_bounds(r)
    _reg_deduce_mixed_bounds(r)
    _reg64_deduce_bounds(r)


def _reg_bound_offset(r: _R) -> None:
    var64 = tnum.intersect(r.var, tnum.tnum_range(r.umin, r.umax))
    var32 = tnum.intersect(tnum.subreg(var64), tnum.tnum_range(r.u32_min, r.u32_max))
    r.var = Tnum((var64.value & _NOT_M32) | var32.value, (var64.mask & _NOT_M32) | var32.mask)


def reg_bounds_sync(r: _R) -> None:
    update_reg_bounds(r)
    _reg_deduce_bounds(r)
    _reg_deduce_bounds(r)
    _reg_deduce_bounds(r)
    _reg_bound_offset(r)
    update_reg_bounds(r)


def valid(r: _R) -> bool:
    """reg_bounds_sanity_check's range part: no bound crosses its counterpart."""
    return r.umin <= r.umax and r.smin <= r.smax and r.u32_min <= r.u32_max \
        and r.s32_min <= r.s32_max


def unknown_within(**limits: int) -> _R:
    """An unknown scalar with some of its bounds set (``Bounds``' field names), synced: what
    do_refine_retval_range makes of R0 after a helper whose result it knows more of."""
    r = _R(tnum.UNKNOWN, UNBOUNDED._replace(**limits))
    reg_bounds_sync(r)
    return r


@lru_cache(maxsize=4096)
def implied(var: Tnum) -> Bounds:
    """The bounds a register with these known bits and no other knowledge has once synced
    (what ``Reg.rng`` None stands for)."""
    r = _R(var, UNBOUNDED)
    reg_bounds_sync(r)
    return r.bounds()


def bounds(reg) -> Bounds:
    """A register's bounds: its own, or the ones its known bits imply."""
    return reg.rng if reg.rng is not None else implied(reg.var)


def of(reg) -> _R:
    return _R(reg.var, reg.rng if reg.rng is not None else implied(reg.var))


def to_reg(reg, r: _R):
    """``reg`` with ``r``'s known bits and bounds (None where they are the implied ones)."""
    b = r.bounds()
    return reg._replace(var=r.var, rng=None if b == implied(r.var) else b)


def range_within(old: Bounds, cur: Bounds) -> bool:
    return old.umin <= cur.umin and old.umax >= cur.umax and old.smin <= cur.smin \
        and old.smax >= cur.smax and old.u32_min <= cur.u32_min \
        and old.u32_max >= cur.u32_max and old.s32_min <= cur.s32_min \
        and old.s32_max >= cur.s32_max


# -- adjust_scalar_min_max_vals ----------------------------------------------------------------
def _add32(d: _R, s: _R) -> None:
    smin, smax = d.s32_min + s.s32_min, d.s32_max + s.s32_max
    if not S32_MIN <= smin <= S32_MAX or not S32_MIN <= smax <= S32_MAX:
        d.s32_min, d.s32_max = S32_MIN, S32_MAX
    else:
        d.s32_min, d.s32_max = smin, smax
    umin, umax = d.u32_min + s.u32_min, d.u32_max + s.u32_max
    d.u32_min, d.u32_max = umin & M32, umax & M32
    if umin <= U32_MAX < umax:
        d.u32_min, d.u32_max = 0, U32_MAX


def _add64(d: _R, s: _R) -> None:
    smin, smax = d.smin + s.smin, d.smax + s.smax
    if not S64_MIN <= smin <= S64_MAX or not S64_MIN <= smax <= S64_MAX:
        d.smin, d.smax = S64_MIN, S64_MAX
    else:
        d.smin, d.smax = smin, smax
    umin, umax = d.umin + s.umin, d.umax + s.umax
    d.umin, d.umax = umin & M64, umax & M64
    if umin <= U64_MAX < umax:
        d.umin, d.umax = 0, U64_MAX


def _sub32(d: _R, s: _R) -> None:
    smin, smax = d.s32_min - s.s32_max, d.s32_max - s.s32_min
    if not S32_MIN <= smin <= S32_MAX or not S32_MIN <= smax <= S32_MAX:
        d.s32_min, d.s32_max = S32_MIN, S32_MAX
    else:
        d.s32_min, d.s32_max = smin, smax
    umin, umax = d.u32_min - s.u32_max, d.u32_max - s.u32_min
    d.u32_min, d.u32_max = umin & M32, umax & M32
    if umin < 0 <= umax:
        d.u32_min, d.u32_max = 0, U32_MAX


def _sub64(d: _R, s: _R) -> None:
    smin, smax = d.smin - s.smax, d.smax - s.smin
    if not S64_MIN <= smin <= S64_MAX or not S64_MIN <= smax <= S64_MAX:
        d.smin, d.smax = S64_MIN, S64_MAX
    else:
        d.smin, d.smax = smin, smax
    umin, umax = d.umin - s.umax, d.umax - s.umin
    d.umin, d.umax = umin & M64, umax & M64
    if umin < 0 <= umax:
        d.umin, d.umax = 0, U64_MAX


def _mul32(d: _R, s: _R) -> None:
    umax, umin = d.u32_max * s.u32_max, d.u32_min * s.u32_min
    if umax > U32_MAX or umin > U32_MAX:
        d.u32_min, d.u32_max = 0, U32_MAX
    else:
        d.u32_min, d.u32_max = umin, umax
    prods = [a * b for a in (d.s32_min, d.s32_max) for b in (s.s32_min, s.s32_max)]
    if any(not S32_MIN <= p <= S32_MAX for p in prods):
        d.s32_min, d.s32_max = S32_MIN, S32_MAX
    else:
        d.s32_min, d.s32_max = min(prods), max(prods)


def _mul64(d: _R, s: _R) -> None:
    umax, umin = d.umax * s.umax, d.umin * s.umin
    if umax > U64_MAX or umin > U64_MAX:
        d.umin, d.umax = 0, U64_MAX
    else:
        d.umin, d.umax = umin, umax
    prods = [a * b for a in (d.smin, d.smax) for b in (s.smin, s.smax)]
    if any(not S64_MIN <= p <= S64_MAX for p in prods):
        d.smin, d.smax = S64_MIN, S64_MAX
    else:
        d.smin, d.smax = min(prods), max(prods)


def _signed32_from_unsigned(d: _R) -> None:
    if s32(d.u32_min) <= s32(d.u32_max):
        d.s32_min, d.s32_max = s32(d.u32_min), s32(d.u32_max)
    else:
        d.s32_min, d.s32_max = S32_MIN, S32_MAX


def _signed64_from_unsigned(d: _R) -> None:
    if s64(d.umin) <= s64(d.umax):
        d.smin, d.smax = s64(d.umin), s64(d.umax)
    else:
        d.smin, d.smax = S64_MIN, S64_MAX


def _bitwise32(op: AluOp, d: _R, s: _R) -> None:
    """scalar32_min_max_and / _or / _xor (d.var already the result's)."""
    v32 = tnum.subreg(d.var)
    if not s.var.mask & M32 and not v32.mask:
        d.mark_known32(v32.value)
        return
    if op is AluOp.AND:
        d.u32_min, d.u32_max = v32.value, min(d.u32_max, s.u32_max)
    elif op is AluOp.OR:
        d.u32_min, d.u32_max = max(d.u32_min, s.u32_min), v32.value | v32.mask
    else:
        d.u32_min, d.u32_max = v32.value, v32.value | v32.mask
    _signed32_from_unsigned(d)


def _bitwise64(op: AluOp, d: _R, s: _R) -> None:
    if not s.var.mask and not d.var.mask:
        d.mark_known(d.var.value)
        return
    v = d.var
    if op is AluOp.AND:
        d.umin, d.umax = v.value, min(d.umax, s.umax)
    elif op is AluOp.OR:
        d.umin, d.umax = max(d.umin, s.umin), v.value | v.mask
    else:
        d.umin, d.umax = v.value, v.value | v.mask
    _signed64_from_unsigned(d)
    update_reg_bounds(d)


def _lsh32_bounds(d: _R, umin_val: int, umax_val: int) -> None:
    d.s32_min, d.s32_max = S32_MIN, S32_MAX
    if umax_val > 31 or d.u32_max > 1 << (31 - umax_val):
        d.u32_min, d.u32_max = 0, U32_MAX
    else:
        d.u32_min = d.u32_min << umin_val & M32
        d.u32_max = d.u32_max << umax_val & M32


def _lsh64_bounds(d: _R, umin_val: int, umax_val: int) -> None:
    # <<= 32 (the compiler's sign extension, with s>>= 32): the s32 range, shifted
    # (measured on 6.18: negative bounds too)
    if umin_val == 32 and umax_val == 32:
        d.smin, d.smax = d.s32_min << 32, d.s32_max << 32
    else:
        d.smin, d.smax = S64_MIN, S64_MAX
    if d.umax > 1 << (63 - umax_val):
        d.umin, d.umax = 0, U64_MAX
    else:
        d.umin = d.umin << umin_val & M64
        d.umax = d.umax << umax_val & M64


def _shift(op: AluOp, d: _R, s: _R, alu32: bool) -> None:
    if alu32:
        umin_val, umax_val = s.u32_min, s.u32_max
        sub = tnum.subreg(d.var)
        if op is AluOp.LSH:
            _lsh32_bounds(d, umin_val, umax_val)
            d.var = tnum.subreg(tnum.lshift(sub, umin_val))
        elif op is AluOp.RSH:
            d.s32_min, d.s32_max = S32_MIN, S32_MAX
            d.var = tnum.rshift(sub, umin_val)
            d.u32_min >>= umax_val
            d.u32_max >>= umin_val
        else:
            d.s32_min = s32(d.s32_min >> umin_val)
            d.s32_max = s32(d.s32_max >> umin_val)
            d.var = tnum.arshift(sub, umin_val, 32)
            d.u32_min, d.u32_max = 0, U32_MAX
        d.unbound64()
        _update_reg32_bounds(d)
        return
    umin_val, umax_val = s.umin, s.umax
    if op is AluOp.LSH:
        _lsh64_bounds(d, umin_val, umax_val)
        _lsh32_bounds(d, umin_val, umax_val)
        d.var = tnum.lshift(d.var, umin_val)
    elif op is AluOp.RSH:
        d.smin, d.smax = S64_MIN, S64_MAX
        d.var = tnum.rshift(d.var, umin_val)
        d.umin >>= umax_val
        d.umax >>= umin_val
        d.unbound32()
    else:
        d.smin >>= umin_val
        d.smax >>= umin_val
        d.var = tnum.arshift(d.var, umin_val, 64)
        d.umin, d.umax = 0, U64_MAX
        d.unbound32()
    update_reg_bounds(d)


def _safe_to_compute(op: AluOp, s: _R, alu32: bool) -> bool:
    """is_safe_to_compute_dst_reg_range."""
    if op in (AluOp.ADD, AluOp.SUB, AluOp.AND, AluOp.XOR, AluOp.OR, AluOp.MUL):
        return True
    if op in (AluOp.LSH, AluOp.RSH, AluOp.ARSH):
        if alu32:
            known = not s.var.mask & M32 and s.s32_min == s.s32_max and s.u32_min == s.u32_max
        else:
            known = not s.var.mask and s.smin == s.smax and s.umin == s.umax
        return known and s.umax < (32 if alu32 else 64)
    return False


def zext_32_to_64(d: _R) -> None:
    """zext_32_to_64 (__reg_assign_32_into_64)."""
    d.var = tnum.subreg(d.var)
    d.umin, d.umax = d.u32_min, d.u32_max
    if 0 <= d.s32_min and 0 <= d.s32_max:
        d.smin, d.smax = d.s32_min, d.s32_max
    else:
        d.smin, d.smax = 0, U32_MAX


def scalar_alu(op: AluOp, d: _R, s: _R, alu32: bool) -> bool:
    """adjust_scalar_min_max_vals on ``d`` (changed in place); False where the result is an
    unknown scalar (nothing to compute: a division, a modulo, a shift by an amount not
    known to be in range)."""
    if not _safe_to_compute(op, s, alu32):
        return False
    if op is AluOp.ADD:
        _add32(d, s)
        _add64(d, s)
        d.var = tnum.add(d.var, s.var)
    elif op is AluOp.SUB:
        _sub32(d, s)
        _sub64(d, s)
        d.var = tnum.sub(d.var, s.var)
    elif op is AluOp.MUL:
        d.var = tnum.mul(d.var, s.var)
        _mul32(d, s)
        _mul64(d, s)
    elif op in (AluOp.AND, AluOp.OR, AluOp.XOR):
        d.var = {AluOp.AND: tnum.and_, AluOp.OR: tnum.or_, AluOp.XOR: tnum.xor}[op](d.var, s.var)
        _bitwise32(op, d, s)
        _bitwise64(op, d, s)
    else:
        _shift(op, d, s, alu32)
    if alu32:
        zext_32_to_64(d)
    reg_bounds_sync(d)
    return True


def scalar_neg(d: _R, alu32: bool) -> None:
    """BPF_NEG: 0 - dst."""
    old = d.copy()
    d.mark_known(0)
    _sub32(d, old)
    _sub64(d, old)
    d.var = tnum.neg(old.var)
    if alu32:
        zext_32_to_64(d)
    reg_bounds_sync(d)


# -- coercions ----------------------------------------------------------------------------------
def coerce_reg_to_size(d: _R, size: int) -> None:
    """A narrow load's zero extension."""
    d.var = tnum.cast(d.var, size)
    mask = (1 << (size * 8)) - 1
    if d.umin & ~mask == d.umax & ~mask:
        d.umin &= mask
        d.umax &= mask
    else:
        d.umin, d.umax = 0, mask
    d.smin, d.smax = d.umin, d.umax
    if size < 4:
        d.unbound32()
    reg_bounds_sync(d)


def _sext(v: int, bits: int) -> int:
    v &= (1 << bits) - 1
    return v - (1 << bits) if v >> (bits - 1) else v


def coerce_reg_to_size_sx(d: _R, size: int) -> None:
    """A sign-extending load's or movsx's extension to 64 bits."""
    bits = size * 8
    if not d.var.mask:
        d.mark_known(_sext(d.var.value, bits))
        return
    if (d.smax & M64) >> bits == (d.smin & M64) >> bits:
        a, b = _sext(d.smax, bits), _sext(d.smin, bits)
        lo, hi = min(a, b), max(a, b)
        if (hi >= 0) == (lo >= 0):
            d.smin, d.smax = lo, hi
            d.s32_min, d.s32_max = s32(lo), s32(hi)
            d.umin, d.umax = lo & M64, hi & M64
            d.u32_min, d.u32_max = lo & M32, hi & M32
            d.var = tnum.tnum_range(lo & M64, hi & M64)
            return
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    keep32 = size == 4 or lo <= d.s32_min and d.s32_max <= hi
    s32_min, s32_max, u32_min, u32_max = d.s32_min, d.s32_max, d.u32_min, d.u32_max
    d.smin = d.s32_min = lo
    d.smax = d.s32_max = hi
    d.umin = d.u32_min = 0
    d.umax, d.u32_max = U64_MAX, U32_MAX
    d.var = tnum.UNKNOWN
    if keep32:
        # the low 32 bits come through unchanged (a (s32) extension, or a value whose s32
        # range fits the narrow type): their bounds hold, and the 64-bit signed range is
        # theirs (measured on 6.18, as is the sync after: (s8) of a value whose s32 range
        # is [-8, 7] is [-8, 7]; (s32) of one whose u32 range is [1, 2^32 - 1] has umin 1)
        d.s32_min, d.s32_max, d.u32_min, d.u32_max = s32_min, s32_max, u32_min, u32_max
        d.smin, d.smax = s32_min, s32_max
    reg_bounds_sync(d)


def coerce_subreg_to_size_sx(d: _R, size: int) -> None:
    """``w = (s8/s16) w``'s extension to 32 bits (zext_32_to_64 and a sync follow)."""
    bits = size * 8
    if not d.var.mask:
        value = _sext(d.var.value, bits) & M64
        d.var = Tnum(value, 0)
        d.s32_min = d.s32_max = s32(value)
        d.u32_min = d.u32_max = value & M32
        return
    if (d.s32_max & M32) >> bits == (d.s32_min & M32) >> bits:
        a, b = _sext(d.s32_max, bits), _sext(d.s32_min, bits)
        lo, hi = min(a, b), max(a, b)
        if (lo >= 0) == (hi >= 0):
            d.s32_min, d.s32_max = lo, hi
            d.u32_min, d.u32_max = lo & M32, hi & M32
            d.var = tnum.subreg(tnum.tnum_range(lo & M64, hi & M64))
            return
    d.s32_min, d.s32_max = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    d.u32_min, d.u32_max = 0, U32_MAX
    d.var = tnum.subreg(tnum.UNKNOWN)


# -- conditional jumps ---------------------------------------------------------------------------
_FLIP = {JmpOp.JGT: JmpOp.JLT, JmpOp.JLT: JmpOp.JGT, JmpOp.JGE: JmpOp.JLE,
         JmpOp.JLE: JmpOp.JGE, JmpOp.JSGT: JmpOp.JSLT, JmpOp.JSLT: JmpOp.JSGT,
         JmpOp.JSGE: JmpOp.JSLE, JmpOp.JSLE: JmpOp.JSGE}
# rev_opcode: the condition of the fall-through; JSET's is "no bit set" (JSET_NOT here)
JSET_NOT = "jset_not"
REV = {JmpOp.JEQ: JmpOp.JNE, JmpOp.JNE: JmpOp.JEQ, JmpOp.JSET: JSET_NOT,
       JmpOp.JGT: JmpOp.JLE, JmpOp.JLE: JmpOp.JGT, JmpOp.JGE: JmpOp.JLT,
       JmpOp.JLT: JmpOp.JGE, JmpOp.JSGT: JmpOp.JSLE, JmpOp.JSLE: JmpOp.JSGT,
       JmpOp.JSGE: JmpOp.JSLT, JmpOp.JSLT: JmpOp.JSGE}
def is_scalar_branch_taken(r1: _R, r2: _R, op: JmpOp, is_jmp32: bool) -> bool | None:
    """is_scalar_branch_taken: True/False where the known bits and ranges decide the jump,
    None where both ways are possible."""
    if is_jmp32:
        t1, t2 = tnum.subreg(r1.var), tnum.subreg(r2.var)
        umin1, umax1, smin1, smax1 = r1.u32_min, r1.u32_max, r1.s32_min, r1.s32_max
        umin2, umax2, smin2, smax2 = r2.u32_min, r2.u32_max, r2.s32_min, r2.s32_max
    else:
        t1, t2 = r1.var, r2.var
        umin1, umax1, smin1, smax1 = r1.umin, r1.umax, r1.smin, r1.smax
        umin2, umax2, smin2, smax2 = r2.umin, r2.umax, r2.smin, r2.smax
    if op in (JmpOp.JEQ, JmpOp.JNE):
        if not t1.mask and not t2.mask:
            equal = t1.value == t2.value
            return equal if op is JmpOp.JEQ else not equal
        differ = (t1.value ^ t2.value) & ~(t1.mask | t2.mask) \
            or umin1 > umax2 or umax1 < umin2 or smin1 > smax2 or smax1 < smin2 \
            or not is_jmp32 and (r1.u32_min > r2.u32_max or r1.u32_max < r2.u32_min
                                 or r1.s32_min > r2.s32_max or r1.s32_max < r2.s32_min)
        if differ:
            return op is JmpOp.JNE
        return None
    if op is JmpOp.JSET:
        if t2.mask:
            t1, t2 = t2, t1
        if t2.mask:
            return None
        if t1.value & t2.value:
            return True
        if not (t1.mask | t1.value) & t2.value:
            return False
        return None
    if op is JmpOp.JGT:
        return True if umin1 > umax2 else False if umax1 <= umin2 else None
    if op is JmpOp.JSGT:
        return True if smin1 > smax2 else False if smax1 <= smin2 else None
    if op is JmpOp.JLT:
        return True if umax1 < umin2 else False if umin1 >= umax2 else None
    if op is JmpOp.JSLT:
        return True if smax1 < smin2 else False if smin1 >= smax2 else None
    if op is JmpOp.JGE:
        return True if umin1 >= umax2 else False if umax1 < umin2 else None
    if op is JmpOp.JSGE:
        return True if smin1 >= smax2 else False if smax1 < smin2 else None
    if op is JmpOp.JLE:
        return True if umax1 <= umin2 else False if umin1 > umax2 else None
    if op is JmpOp.JSLE:
        return True if smax1 <= smin2 else False if smin1 > smax2 else None
    return None


def regs_refine_cond_op(r1: _R, r2: _R, op, is_jmp32: bool) -> None:
    """regs_refine_cond_op: what ``r1 op r2`` being true tells of both (in place)."""
    if op in (JmpOp.JGE, JmpOp.JGT, JmpOp.JSGE, JmpOp.JSGT):
        op = _FLIP[op]
        r1, r2 = r2, r1
    if op is JmpOp.JEQ:
        if is_jmp32:
            r1.u32_min = r2.u32_min = max(r1.u32_min, r2.u32_min)
            r1.u32_max = r2.u32_max = min(r1.u32_max, r2.u32_max)
            r1.s32_min = r2.s32_min = max(r1.s32_min, r2.s32_min)
            r1.s32_max = r2.s32_max = min(r1.s32_max, r2.s32_max)
            t = tnum.intersect(tnum.subreg(r1.var), tnum.subreg(r2.var))
            r1.var = tnum.with_subreg(r1.var, t)
            r2.var = tnum.with_subreg(r2.var, t)
        else:
            r1.umin = r2.umin = max(r1.umin, r2.umin)
            r1.umax = r2.umax = min(r1.umax, r2.umax)
            r1.smin = r2.smin = max(r1.smin, r2.smin)
            r1.smax = r2.smax = min(r1.smax, r2.smax)
            r1.var = r2.var = tnum.intersect(r1.var, r2.var)
    elif op is JmpOp.JNE:
        if not r2.is_const(is_jmp32):
            r1, r2 = r2, r1
        if not r2.is_const(is_jmp32):
            return
        val = r2.const_value(is_jmp32)
        if is_jmp32:
            if r1.u32_min == val:
                r1.u32_min += 1
            if r1.u32_max == val:
                r1.u32_max -= 1
            if r1.s32_min == s32(val):
                r1.s32_min += 1
            if r1.s32_max == s32(val):
                r1.s32_max -= 1
        else:
            if r1.umin == val:
                r1.umin += 1
            if r1.umax == val:
                r1.umax -= 1
            if r1.smin == s64(val):
                r1.smin += 1
            if r1.smax == s64(val):
                r1.smax -= 1
    elif op is JmpOp.JSET or op == JSET_NOT:
        if not r2.is_const(is_jmp32):
            r1, r2 = r2, r1
        if not r2.is_const(is_jmp32):
            return
        val = r2.const_value(is_jmp32)
        if op is JmpOp.JSET:
            if not val or val & (val - 1):
                return
            combine, with_bits = tnum.or_, Tnum(val, 0)
        else:
            r1.unbounded()  # forget the ranges before narrowing the bits
            combine, with_bits = tnum.and_, Tnum(~val & (M32 if is_jmp32 else M64), 0)
        if is_jmp32:
            r1.var = tnum.with_subreg(r1.var, combine(tnum.subreg(r1.var), with_bits))
        else:
            r1.var = combine(r1.var, with_bits)
    elif op is JmpOp.JLE:
        if is_jmp32:
            r1.u32_max = min(r1.u32_max, r2.u32_max)
            r2.u32_min = max(r1.u32_min, r2.u32_min)
        else:
            r1.umax = min(r1.umax, r2.umax)
            r2.umin = max(r1.umin, r2.umin)
    elif op is JmpOp.JLT:
        if is_jmp32:
            r1.u32_max = min(r1.u32_max, (r2.u32_max - 1) & M32)
            r2.u32_min = max((r1.u32_min + 1) & M32, r2.u32_min)
        else:
            r1.umax = min(r1.umax, (r2.umax - 1) & M64)
            r2.umin = max((r1.umin + 1) & M64, r2.umin)
    elif op is JmpOp.JSLE:
        if is_jmp32:
            r1.s32_max = min(r1.s32_max, r2.s32_max)
            r2.s32_min = max(r1.s32_min, r2.s32_min)
        else:
            r1.smax = min(r1.smax, r2.smax)
            r2.smin = max(r1.smin, r2.smin)
    elif op is JmpOp.JSLT:
        if is_jmp32:
            r1.s32_max = min(r1.s32_max, s32(r2.s32_max - 1))
            r2.s32_min = max(s32(r1.s32_min + 1), r2.s32_min)
        else:
            r1.smax = min(r1.smax, s64(r2.smax - 1))
            r2.smin = max(s64(r1.smin + 1), r2.smin)


def add_reg(d: _R, s: _R, zext: bool) -> None:
    """sync_linked_regs' ``reg += delta``: scalar32_min_max_add, scalar_min_max_add and
    tnum_add, zero-extended where a link is 32-bit, then synced."""
    _add32(d, s)
    _add64(d, s)
    d.var = tnum.add(d.var, s.var)
    if zext:
        zext_32_to_64(d)
    reg_bounds_sync(d)
