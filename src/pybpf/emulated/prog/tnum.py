"""Tracked numbers: what the verifier knows of a scalar's bits (kernel/bpf/tnum.c).

A tnum is ``(value, mask)`` over 64 bits: a bit set in ``mask`` is unknown, the others are
``value``'s (``value & mask`` is always 0). A constant has ``mask == 0``. The operations are
the kernel's, so the emulated verifier knows exactly the bits the kernel's knows (the value
ranges it keeps beside them are verifier_bounds'; the ones here are what the bits imply).
"""

from __future__ import annotations

from typing import NamedTuple

from .memory import M32, M64


class Tnum(NamedTuple):
    value: int
    mask: int

    @property
    def is_const(self) -> bool:
        return not self.mask

    def contains(self, other: Tnum) -> bool:
        """tnum_in: every value ``other`` may have, this one may have too."""
        if other.mask & ~self.mask:
            return False
        return self.value == other.value & ~self.mask

    # -- the bounds the known bits imply (__update_reg64_bounds / __update_reg32_bounds) -------
    def umin(self) -> int:
        return self.value

    def umax(self) -> int:
        return self.value | self.mask

    def smin(self, bits: int = 64) -> int:
        sign = 1 << (bits - 1)
        return _signed(self.value | (self.mask & sign), bits)

    def smax(self, bits: int = 64) -> int:
        sign = 1 << (bits - 1)
        return _signed(self.value | (self.mask & (sign - 1)), bits)


UNKNOWN = Tnum(0, M64)


def const(value: int) -> Tnum:
    return Tnum(value & M64, 0)


def _signed(value: int, bits: int) -> int:
    return value - (1 << bits) if value >> (bits - 1) & 1 else value


def tnum_range(lo: int, hi: int) -> Tnum:
    """The tnum of every value from ``lo`` to ``hi`` (unsigned)."""
    chi = lo ^ hi
    bits = chi.bit_length()
    if bits > 63:
        return UNKNOWN
    delta = (1 << bits) - 1
    return Tnum(lo & ~delta & M64, delta)


def lshift(a: Tnum, shift: int) -> Tnum:
    return Tnum(a.value << shift & M64, a.mask << shift & M64)


def rshift(a: Tnum, shift: int) -> Tnum:
    return Tnum(a.value >> shift, a.mask >> shift)


def arshift(a: Tnum, shift: int, bits: int) -> Tnum:
    mask = (1 << bits) - 1
    return Tnum(_signed(a.value, bits) >> shift & mask, _signed(a.mask, bits) >> shift & mask)


def add(a: Tnum, b: Tnum) -> Tnum:
    sm = (a.mask + b.mask) & M64
    sv = (a.value + b.value) & M64
    sigma = (sm + sv) & M64
    chi = sigma ^ sv
    mu = chi | a.mask | b.mask
    return Tnum(sv & ~mu & M64, mu)


def sub(a: Tnum, b: Tnum) -> Tnum:
    dv = (a.value - b.value) & M64
    alpha = (dv + a.mask) & M64
    beta = (dv - b.mask) & M64
    chi = alpha ^ beta
    mu = chi | a.mask | b.mask
    return Tnum(dv & ~mu & M64, mu)


def neg(a: Tnum) -> Tnum:
    return sub(Tnum(0, 0), a)


def and_(a: Tnum, b: Tnum) -> Tnum:
    alpha = a.value | a.mask
    beta = b.value | b.mask
    v = a.value & b.value
    return Tnum(v, alpha & beta & ~v & M64)


def or_(a: Tnum, b: Tnum) -> Tnum:
    v = a.value | b.value
    return Tnum(v, (a.mask | b.mask) & ~v & M64)


def xor(a: Tnum, b: Tnum) -> Tnum:
    v = a.value ^ b.value
    mu = a.mask | b.mask
    return Tnum(v & ~mu & M64, mu)


def union(a: Tnum, b: Tnum) -> Tnum:
    """tnum_union: every value either may have."""
    v = a.value & b.value
    mu = (a.value ^ b.value) | a.mask | b.mask
    return Tnum(v & ~mu & M64, mu & M64)


def mul(a: Tnum, b: Tnum) -> Tnum:
    """tnum_mul: ``b`` shifted and added for each bit of ``a`` known 1, and the union of
    adding it and not for each unknown one."""
    if not a.mask and not b.mask:
        return const(a.value * b.value)
    acc = Tnum(0, 0)
    while a.value or a.mask:
        if a.value & 1:
            acc = add(acc, b)
        elif a.mask & 1:
            acc = union(acc, add(acc, b))
        a = rshift(a, 1)
        b = lshift(b, 1)
    return acc


def step(t: Tnum, z: int) -> int:
    """tnum_step: the least value ``t`` may have above ``z`` (``t``'s least where ``z`` is
    below it, its greatest where ``z`` is not below that)."""
    tmax = t.value | t.mask
    if z >= tmax:
        return tmax
    if z < t.value:
        return t.value
    d = z - t.value
    carry = (1 << (d & ~t.mask & M64).bit_length()) - 1
    filled = d | carry | (~t.mask & M64)
    return t.value | ((filled + 1) & t.mask)


def bswap(a: Tnum, bits: int) -> Tnum:
    """The low ``bits`` bits with their bytes reversed (be16/32/64, bswap), zero-extended."""
    size = bits // 8

    def swap(v: int) -> int:
        return int.from_bytes((v & ((1 << bits) - 1)).to_bytes(size, "little"), "big")

    return Tnum(swap(a.value), swap(a.mask))


def intersect(a: Tnum, b: Tnum) -> Tnum:
    v = a.value | b.value
    mu = a.mask & b.mask
    return Tnum(v & ~mu & M64, mu)


def cast(a: Tnum, size: int) -> Tnum:
    """tnum_cast: the low ``size`` bytes, zero-extended."""
    mask = (1 << (8 * size)) - 1
    return Tnum(a.value & mask, a.mask & mask)


def subreg(a: Tnum) -> Tnum:
    return cast(a, 4)


def with_subreg(reg: Tnum, low: Tnum) -> Tnum:
    """tnum_with_subreg: ``reg``'s upper 32 bits with ``low`` as the lower ones."""
    return or_(Tnum(reg.value & ~M32 & M64, reg.mask & ~M32 & M64), subreg(low))
