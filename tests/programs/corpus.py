"""The program corpus: one table of programs with their input and the result they must give.

The same entries feed the assembler and disassembler tests (tests/test_asm.py,
tests/test_programs.py), the kernel's BPF_PROG_TEST_RUN and the emulated interpreter
(tests/differential/test_programs_differential.py). Expected values are written out by hand
from the ISA document's rules and checked against the real kernel by the differential test.

Program types are ones the kernel's test_run accepts without attaching: XDP and socket
filters (data = a packet of at least ETH_HLEN bytes), raw tracepoints and syscall programs
(ctx = bytes). Arithmetic results wider than the 32-bit retval are written into the packet
(the first 8 bytes per result) of an XDP program, so ``data_out`` shows all 64 bits.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pybpf.asm import (
    FP,
    MNEMONICS,
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
    Item,
    Reg,
    add32,
    add64,
    and32,
    and64,
    arsh32,
    arsh64,
    atomic_add32,
    atomic_add64,
    atomic_and32,
    atomic_and64,
    atomic_cmpxchg32,
    atomic_cmpxchg64,
    atomic_fetch_add32,
    atomic_fetch_add64,
    atomic_fetch_and32,
    atomic_fetch_and64,
    atomic_fetch_or32,
    atomic_fetch_or64,
    atomic_fetch_xor32,
    atomic_fetch_xor64,
    atomic_or32,
    atomic_or64,
    atomic_xchg32,
    atomic_xchg64,
    atomic_xor32,
    atomic_xor64,
    be,
    bswap,
    call,
    call_local,
    div32,
    div64,
    exit_,
    gotol,
    ja,
    jeq,
    jne,
    label,
    ld_map_fd,
    ld_map_value,
    ldabsb,
    ldabsh,
    ldabsw,
    lddw,
    ldindb,
    ldindh,
    ldindw,
    ldxb,
    ldxdw,
    ldxh,
    ldxsb,
    ldxsh,
    ldxsw,
    ldxw,
    le,
    load_acquire8,
    load_acquire16,
    load_acquire32,
    load_acquire64,
    lsh32,
    lsh64,
    may_goto,
    mod32,
    mod64,
    mov32,
    mov64,
    movsx32,
    movsx64,
    mul32,
    mul64,
    neg32,
    neg64,
    or32,
    or64,
    rsh32,
    rsh64,
    sdiv32,
    sdiv64,
    smod32,
    smod64,
    stb,
    stdw,
    sth,
    store_release8,
    store_release16,
    store_release32,
    store_release64,
    stw,
    stxb,
    stxdw,
    stxh,
    stxw,
    sub32,
    sub64,
    xor32,
    xor64,
)
from pybpf.uapi import BPF_ANY, BPF_EXIST, BPF_NOEXIST, MapType, ProgType

XDP_DROP, XDP_PASS = 1, 2
BPF_F_SLEEPABLE = 1 << 4  # syscall programs must be sleepable
M64 = (1 << 64) - 1
EINVAL, ENOENT, EEXIST, E2BIG = 22, 2, 17, 7


@dataclass(frozen=True)
class ProgRef:
    """A map value that is the fd of a corpus program (prog arrays)."""

    name: str


@dataclass(frozen=True)
class MapFdRef:
    """A map value that is the fd of another corpus map (map-in-map)."""

    name: str


@dataclass(frozen=True)
class MapDef:
    """A map the case creates before loading; ``init`` are syscall updates (key None: push)."""

    name: str
    type: MapType
    key_size: int
    value_size: int
    max_entries: int
    flags: int = 0
    inner: str | None = None  # map-in-map: the MapDef whose map is the inner template
    init: tuple[tuple[bytes | None, bytes | ProgRef | MapFdRef], ...] = ()


@dataclass(frozen=True)
class PerCpu:
    """Expected per-CPU value: ``cpu0`` on CPU 0 (where the test runs), zeros elsewhere."""

    cpu0: bytes


@dataclass(frozen=True)
class Case:
    name: str
    prog_type: ProgType
    program: tuple[Item, ...]
    retval: int
    data: bytes = b""
    ctx: bytes | None = None
    data_out: bytes | None = None  # None: not checked against a literal (still compared)
    maps: tuple[MapDef, ...] = ()
    expect_maps: Mapping[str, Any] = field(default_factory=dict)
    progs: Mapping[str, tuple[ProgType, tuple[Item, ...]]] = field(default_factory=dict)
    prog_flags: int = 0

    def __str__(self) -> str:
        return self.name


CASES: list[Case] = []
PACKET = bytes(range(0x40, 0x60))  # 32 bytes: room for four 64-bit results


def u64(value: int) -> bytes:
    return (value & M64).to_bytes(8, "little")


def u32(value: int) -> bytes:
    return (value & 0xFFFFFFFF).to_bytes(4, "little")


def _add(case: Case) -> Case:
    assert all(c.name != case.name for c in CASES), case.name
    CASES.append(case)
    return case


def packet_results(body: Sequence[Item], results: Sequence[Reg]) -> tuple[Item, ...]:
    """An XDP program: run ``body`` (R1-R5, R9, R0 free; R6 = packet data), store each
    register of ``results`` as a u64 into the packet, return the low 32 bits of the first."""
    room = 8 * len(results)
    return (
        ldxw(R6, R1, 0),  # xdp_md->data
        ldxw(R7, R1, 4),  # xdp_md->data_end
        mov64(R8, R6),
        add64(R8, room),
        jgt_(R8, R7, "short"),
        *body,
        *(stxdw(R6, 8 * i, reg) for i, reg in enumerate(results)),
        mov32(R0, results[0]),
        exit_(),
        label("short"),
        mov64(R0, XDP_DROP),
        exit_(),
    )


def jgt_(dst: Reg, src: Reg | int, target: str) -> Item:
    return MNEMONICS["jgt"](dst, src, target)


def result_case(name: str, body: Sequence[Item], results: Sequence[Reg],
                expected: Sequence[int], **kw) -> Case:
    data_out = b"".join(u64(v) for v in expected) + PACKET[8 * len(expected):]
    return _add(Case(name, ProgType.XDP, packet_results(body, results),
                     retval=expected[0] & 0xFFFFFFFF, data=PACKET, data_out=data_out, **kw))


# -- ALU: every operation, 32 and 64 bits, register and immediate forms ---------------------------
# (name, op, a, b, expected): R2 = a, R3 = b (lddw), then op(R2, R3) or op(R2, imm); result R2.

Op = Callable[..., Item]
X, K = "x", "k"
INT64_MIN, INT32_MIN = 1 << 63, 1 << 31

ALU_TABLE: list[tuple[str, Op, str, int, int, int]] = [
    ("add64_wraps", add64, X, M64, 1, 0),
    ("add64_negative_imm_sign_extends", add64, K, 5, -7, -2),
    ("add32_wraps_and_zero_extends", add32, X, 0xFFFFFFFF, 1, 0),
    ("add32_clears_upper_half", add32, X, 0x1_0000_0001, 1, 2),
    ("sub64_below_zero", sub64, X, 0, 1, M64),
    ("sub32_below_zero_zero_extends", sub32, K, 0, 1, 0xFFFFFFFF),
    ("mul64_overflow", mul64, X, 1 << 32, 1 << 32, 0),
    ("mul64_by_three", mul64, K, M64, 3, M64 - 2),
    ("mul32_overflow", mul32, X, 0x10000, 0x10000, 0),
    ("mul32_minus_one_squared", mul32, K, 0xFFFFFFFF, -1, 1),
    ("div64", div64, X, 7, 2, 3),
    ("div64_is_unsigned", div64, K, M64, 2, (1 << 63) - 1),
    ("div64_by_zero_gives_zero", div64, X, 12345, 0, 0),
    ("div32_uses_low_halves", div32, X, 0x1_0000_0008, 0x1_0000_0002, 4),
    ("div32_by_zero_gives_zero", div32, X, 0xFFFF_FFFF_FFFF_FFFF, 0, 0),
    ("sdiv64_truncates_toward_zero", sdiv64, X, -7, 2, -3),
    ("sdiv64_negative_imm", sdiv64, K, 7, -2, -3),
    ("sdiv64_int_min_by_minus_one", sdiv64, X, INT64_MIN, -1, INT64_MIN),
    ("sdiv64_int_min_by_minus_one_imm", sdiv64, K, INT64_MIN, -1, INT64_MIN),
    ("sdiv64_by_zero_gives_zero", sdiv64, X, -5, 0, 0),
    ("sdiv32_truncates_toward_zero", sdiv32, X, 0xFFFFFFF9, 2, 0xFFFFFFFD),
    ("sdiv32_int_min_by_minus_one", sdiv32, X, INT32_MIN, 0xFFFFFFFF, INT32_MIN),
    ("sdiv32_by_zero_gives_zero", sdiv32, X, 0xFFFF_FFFF_0000_0009, 0, 0),
    ("mod64", mod64, X, 7, 3, 1),
    ("mod64_by_zero_keeps_dst", mod64, X, 0x1234_5678_9ABC_DEF0, 0, 0x1234_5678_9ABC_DEF0),
    ("mod32", mod32, K, 0x1_0000_0007, 3, 1),
    ("mod32_by_zero_keeps_low_half", mod32, X, 0xAAAA_AAAA_0000_0007, 0, 7),
    ("smod64_takes_dividend_sign", smod64, X, -7, 2, -1),
    ("smod64_negative_divisor", smod64, K, 7, -2, 1),
    ("smod64_int_min_by_minus_one", smod64, X, INT64_MIN, -1, 0),
    ("smod64_by_zero_keeps_dst", smod64, X, -9, 0, -9),
    ("smod32_takes_dividend_sign", smod32, X, 0xFFFFFFF9, 2, 0xFFFFFFFF),
    ("smod32_int_min_by_minus_one", smod32, K, INT32_MIN, -1, 0),
    ("smod32_by_zero_keeps_low_half", smod32, X, 0xFFFF_FFFF_FFFF_FFF7, 0, 0xFFFFFFF7),
    ("or64", or64, X, 0xF0F0_0000_0000_0000, 0x0F, 0xF0F0_0000_0000_000F),
    ("or32_clears_upper_half", or32, K, 0xFFFF_FFFF_0000_0000, 1, 1),
    ("and64_imm_sign_extends", and64, K, 0xFFFF_FFFF_1234_5678, -1, 0xFFFF_FFFF_1234_5678),
    ("and32_imm", and32, K, 0xFFFF_FFFF_1234_5678, 0xFF00, 0x5600),
    ("xor64_imm_minus_one_inverts", xor64, K, 0x0123_4567_89AB_CDEF, -1, 0xFEDC_BA98_7654_3210),
    ("xor32", xor32, X, 0xFFFF_FFFF_FFFF_0000, 0xFFFF_FFFF, 0xFFFF),
    ("lsh64_to_top_bit", lsh64, K, 1, 63, 1 << 63),
    ("lsh64_amount_masked_to_6_bits", lsh64, X, 1, 65, 2),
    ("lsh32_to_top_bit", lsh32, K, 1, 31, 1 << 31),
    ("lsh32_amount_masked_to_5_bits", lsh32, X, 1, 33, 2),
    ("lsh32_drops_upper_half", lsh32, K, 0x1_0000_0001, 1, 2),
    ("rsh64_is_logical", rsh64, K, 1 << 63, 63, 1),
    ("rsh64_amount_masked", rsh64, X, 0x100, 64 + 4, 0x10),
    ("rsh32_uses_low_half", rsh32, K, 0xFFFF_FFFF_8000_0000, 31, 1),
    ("rsh32_amount_masked", rsh32, X, 0x100, 32 + 4, 0x10),
    ("arsh64_copies_sign", arsh64, K, 1 << 63, 63, M64),
    ("arsh64_amount_masked", arsh64, X, -256, 64 + 4, -16),
    ("arsh32_copies_sign_and_zero_extends", arsh32, K, 0x8000_0000, 31, 0xFFFFFFFF),
    ("arsh32_amount_masked", arsh32, X, 0xFFFF_FF00, 32 + 4, 0xFFFF_FFF0),
    ("add32_imm", add32, K, 0xFFFF_FFFF_FFFF_FFF0, 0x20, 0x10),
    ("sub64_imm", sub64, K, 10, 20, -10),
    ("sub32_reg_clears_upper_half", sub32, X, 0x5_0000_0003, 0x1_0000_0001, 2),
    ("div32_imm", div32, K, 0xFFFF_FFFF_0000_0064, 7, 14),
    ("or64_imm_sign_extends", or64, K, 0x1234, -0x10000, 0xFFFF_FFFF_FFFF_1234),
    ("or32_reg", or32, X, 0xAAAA_0000_0000_0F00, 0xFFFF_0000_0000_00F0, 0xFF0),
    ("and64_reg", and64, X, 0xFF00_FF00_FF00_FF00, 0x0FF0_0FF0_0FF0_0FF0,
     0x0F00_0F00_0F00_0F00),
    ("and32_reg_clears_upper_half", and32, X, M64, 0xFFFF_FFFF_0000_FFFF, 0xFFFF),
    ("xor64_reg", xor64, X, 0xFFFF_0000_FFFF_0000, 0xFF00_FF00_FF00_FF00,
     0x00FF_FF00_00FF_FF00),
    ("xor32_imm_minus_one", xor32, K, 0x1234_5678_0000_FFFF, -1, 0xFFFF_0000),
    ("mov64_imm_sign_extends", mov64, K, 0x55, -1, M64),
    ("mov64_reg", mov64, X, 0, 0x8877_6655_4433_2211, 0x8877_6655_4433_2211),
    ("mov32_imm_zero_extends", mov32, K, 0x55, -1, 0xFFFFFFFF),
    ("mov32_reg_takes_low_half", mov32, X, 0, 0x8877_6655_4433_2211, 0x4433_2211),
]

for _name, _op, _form, _a, _b, _expected in ALU_TABLE:
    _body = [lddw(R2, _a), lddw(R3, _b), _op(R2, R3 if _form == X else _b)]
    result_case(f"alu_{_name}", _body, [R2], [_expected])

UNARY_TABLE: list[tuple[str, Item, int, int]] = [
    ("neg64", neg64(R2), 1, M64),
    ("neg64_int_min", neg64(R2), INT64_MIN, INT64_MIN),
    ("neg32", neg32(R2), 1, 0xFFFFFFFF),
    ("neg32_drops_upper_half", neg32(R2), 0x1_0000_0000, 0),
    ("movsx64_s8", movsx64(R2, R2, 8), 0x80, 0xFFFF_FFFF_FFFF_FF80),
    ("movsx64_s16", movsx64(R2, R2, 16), 0x1_8000, 0xFFFF_FFFF_FFFF_8000),
    ("movsx64_s32", movsx64(R2, R2, 32), 0x8000_0000, 0xFFFF_FFFF_8000_0000),
    ("movsx64_s8_positive", movsx64(R2, R2, 8), 0xFFFF_FF7F, 0x7F),
    ("movsx32_s8_zero_extends", movsx32(R2, R2, 8), 0x1_0000_00FF, 0xFFFF_FFFF),
    ("movsx32_s16", movsx32(R2, R2, 16), 0x7FFF, 0x7FFF),
    ("le16_truncates", le(R2, 16), 0x1122_3344_5566_7788, 0x7788),
    ("le32_truncates", le(R2, 32), 0x1122_3344_5566_7788, 0x5566_7788),
    ("le64_is_identity", le(R2, 64), 0x1122_3344_5566_7788, 0x1122_3344_5566_7788),
    ("be16", be(R2, 16), 0x1122_3344_5566_7788, 0x8877),
    ("be32", be(R2, 32), 0x1122_3344_5566_7788, 0x8877_6655),
    ("be64", be(R2, 64), 0x1122_3344_5566_7788, 0x8877_6655_4433_2211),
    ("bswap16", bswap(R2, 16), 0x1122_3344_5566_7788, 0x8877),
    ("bswap32", bswap(R2, 32), 0x1122_3344_5566_7788, 0x8877_6655),
    ("bswap64", bswap(R2, 64), 0x1122_3344_5566_7788, 0x8877_6655_4433_2211),
]

for _name, _insn, _a, _expected in UNARY_TABLE:
    result_case(f"alu_{_name}", [lddw(R2, _a), _insn], [R2], [_expected])

# -- jumps: every condition, 64 and 32 bits, taken and not taken --------------------------------
# The pairs tell signed from unsigned (-1 vs 1) and 64 from 32 bits (upper halves differ).

JUMP_PAIRS = [(M64, 1), (1, 1), (0x1_0000_0001, 1), (0x7FFF_FFFF, 0x8000_0000), (5, 3)]
_CONDITIONS: dict[str, Callable[[int, int, bool], bool]] = {}


def _signed(v: int, bits: int) -> int:
    v &= (1 << bits) - 1
    return v - (1 << bits) if v >> (bits - 1) else v


def _taken(cond: str, a: int, b: int, bits: int) -> bool:
    ua, ub = a & ((1 << bits) - 1), b & ((1 << bits) - 1)
    sa, sb = _signed(a, bits), _signed(b, bits)
    return {"jeq": ua == ub, "jne": ua != ub, "jgt": ua > ub, "jge": ua >= ub,
            "jlt": ua < ub, "jle": ua <= ub, "jset": bool(ua & ub), "jsgt": sa > sb,
            "jsge": sa >= sb, "jslt": sa < sb, "jsle": sa <= sb}[cond]


for _cond in ("jeq", "jne", "jgt", "jge", "jlt", "jle", "jset", "jsgt", "jsge", "jslt", "jsle"):
    for _bits, _suffix in ((64, ""), (32, "32")):
        for _i, (_a, _b) in enumerate(JUMP_PAIRS):
            for _form in (X, K):
                if _form == K and not -(1 << 31) <= _signed(_b, 32) < (1 << 31):
                    continue
                # the K form compares with imm sign-extended to 64 bits
                _bk = _signed(_b, 32) if _form == K else _b
                _jump = MNEMONICS[_cond + _suffix]
                _add(Case(
                    f"jmp_{_cond}{_suffix}_{_form}_{_i}", ProgType.XDP,
                    (lddw(R2, _a), lddw(R3, _b), mov64(R0, 1),
                     _jump(R2, R3 if _form == X else _signed(_b, 32), "taken"),
                     mov64(R0, 0), label("taken"), exit_()),
                    retval=int(_taken(_cond, _a, _bk, _bits)), data=PACKET, data_out=PACKET))

_add(Case("jmp_ja_forward_and_back", ProgType.XDP,
          (mov64(R0, 1), ja("fwd"), label("back"), exit_(), label("fwd"), add64(R0, 1),
           ja("back")), retval=2, data=PACKET, data_out=PACKET))
_add(Case("jmp_gotol_forward_and_back", ProgType.XDP,
          (mov64(R0, 1), gotol("fwd"), label("back"), exit_(), label("fwd"), add64(R0, 1),
           gotol("back")), retval=2, data=PACKET, data_out=PACKET))
_add(Case("jmp_may_goto_falls_through_while_budget_left", ProgType.XDP,
          (mov64(R0, 1), may_goto("out"), mov64(R0, 2), label("out"), exit_()),
          retval=2, data=PACKET, data_out=PACKET))
_add(Case("jmp_loop_sums_one_to_ten", ProgType.XDP,
          (mov64(R0, 0), mov64(R1, 1), label("loop"), add64(R0, R1), add64(R1, 1),
           MNEMONICS["jle"](R1, 10, "loop"), exit_()),
          retval=55, data=PACKET, data_out=PACKET))

# -- memory on the stack: every size, sign-extending loads, immediate stores -----------------------

result_case("mem_stxdw_then_loads_of_each_size", [
    lddw(R2, 0x8877_6655_4433_2211), stxdw(FP, -8, R2),
    ldxdw(R3, FP, -8), ldxw(R4, FP, -4), ldxh(R5, FP, -6), ldxb(R9, FP, -1),
], [R3, R4, R5, R9], [0x8877_6655_4433_2211, 0x8877_6655, 0x4433, 0x88])
result_case("mem_narrow_stores_compose_little_endian", [
    stdw(FP, -8, 0), stb(FP, -8, 0x11), stb(FP, -7, 0x22), sth(FP, -6, 0x4433),
    stw(FP, -4, 0x77665544), ldxdw(R2, FP, -8),
], [R2], [0x7766_5544_4433_2211])
result_case("mem_stx_of_each_size_truncates", [
    lddw(R2, 0x1122_3344_5566_7788), stdw(FP, -16, 0), stdw(FP, -8, 0),
    stxb(FP, -16, R2), stxh(FP, -14, R2), stxw(FP, -12, R2), stxdw(FP, -8, R2),
    ldxdw(R3, FP, -16), ldxdw(R4, FP, -8),
], [R3, R4], [0x5566_7788_7788_0088, 0x1122_3344_5566_7788])
result_case("mem_stdw_imm_sign_extends", [stdw(FP, -8, -2), ldxdw(R2, FP, -8)], [R2], [M64 - 1])
result_case("mem_stw_imm_keeps_upper_half", [
    stdw(FP, -8, -1), stw(FP, -8, 0), ldxdw(R2, FP, -8)], [R2], [0xFFFF_FFFF_0000_0000])
result_case("mem_sign_extending_loads", [
    lddw(R2, 0x8000_8080_8000_0080), stxdw(FP, -8, R2),
    ldxsb(R3, FP, -8), ldxsh(R4, FP, -6), ldxsw(R5, FP, -4), ldxsb(R9, FP, -7),
], [R3, R4, R5, R9], [0xFFFF_FFFF_FFFF_FF80, 0xFFFF_FFFF_FFFF_8000, 0xFFFF_FFFF_8000_8080, 0])
result_case("mem_sign_extending_loads_of_positive_values", [
    lddw(R2, 0x7FFF_7F7F_7F00_007F), stxdw(FP, -8, R2),
    ldxsb(R3, FP, -8), ldxsh(R4, FP, -6), ldxsw(R5, FP, -4),
], [R3, R4, R5], [0x7F, 0x7F00, 0x7FFF_7F7F])
result_case("mem_packet_bytes_are_readable", [ldxdw(R2, R6, 0)], [R2],
            [int.from_bytes(PACKET[:8], "little")])

# -- atomics on the stack -------------------------------------------------------------------------

result_case("atomic_add64", [
    lddw(R2, 0xFFFF_FFFF), stxdw(FP, -8, R2), mov64(R3, 1), atomic_add64(FP, -8, R3),
    ldxdw(R4, FP, -8)], [R4, R3], [0x1_0000_0000, 1])
result_case("atomic_add32_wraps_in_place", [
    stdw(FP, -8, -1), mov64(R3, 1), atomic_add32(FP, -8, R3), ldxdw(R4, FP, -8)],
    [R4], [0xFFFF_FFFF_0000_0000])
result_case("atomic_or_and_xor64", [
    stdw(FP, -8, 0x0F0), mov64(R3, 0x00F), atomic_or64(FP, -8, R3),
    mov64(R3, 0x0FC), atomic_and64(FP, -8, R3), mov64(R3, 0x101), atomic_xor64(FP, -8, R3),
    ldxdw(R4, FP, -8)], [R4], [0x1FD])
result_case("atomic_and32", [
    stdw(FP, -8, -1), mov64(R3, 0xF0), atomic_and32(FP, -8, R3), ldxdw(R4, FP, -8)],
    [R4], [0xFFFF_FFFF_0000_00F0])
result_case("atomic_fetch_add64_returns_old", [
    stdw(FP, -8, 40), mov64(R3, 2), atomic_fetch_add64(FP, -8, R3), ldxdw(R4, FP, -8)],
    [R3, R4], [40, 42])
result_case("atomic_fetch_add32_zero_extends_old", [
    stdw(FP, -8, -1), mov64(R3, 1), atomic_fetch_add32(FP, -8, R3), ldxdw(R4, FP, -8)],
    [R3, R4], [0xFFFF_FFFF, 0xFFFF_FFFF_0000_0000])
result_case("atomic_fetch_or_and_xor", [
    stdw(FP, -8, 0b1100), mov64(R3, 0b0011), atomic_fetch_or64(FP, -8, R3),
    mov64(R4, 0b0110), atomic_fetch_and64(FP, -8, R4),
    mov64(R5, 0b1111), atomic_fetch_xor64(FP, -8, R5), ldxdw(R9, FP, -8)],
    [R3, R4, R5, R9], [0b1100, 0b1111, 0b0110, 0b1001])
result_case("atomic_fetch_or32_xor32", [
    stdw(FP, -8, 0x10), mov64(R3, 0x01), atomic_fetch_or32(FP, -8, R3),
    mov64(R4, 0x11), atomic_fetch_xor32(FP, -8, R4), ldxdw(R5, FP, -8)],
    [R3, R4, R5], [0x10, 0x11, 0])
result_case("atomic_or_xor32_and_fetch_and32", [
    stdw(FP, -8, -1), stw(FP, -8, 0x0F), mov64(R3, 0x30), atomic_or32(FP, -8, R3),
    mov64(R3, 0x11), atomic_xor32(FP, -8, R3), mov64(R4, 0x0F), atomic_fetch_and32(FP, -8, R4),
    ldxdw(R5, FP, -8)], [R4, R5], [0x2E, 0xFFFF_FFFF_0000_000E])
result_case("load_acquire_of_each_size", [
    lddw(R2, 0x8877_6655_4433_2211), stxdw(FP, -8, R2),
    load_acquire8(R3, FP, -8), load_acquire16(R4, FP, -8), load_acquire32(R5, FP, -8),
    load_acquire64(R9, FP, -8)],
    [R3, R4, R5, R9], [0x11, 0x2211, 0x4433_2211, 0x8877_6655_4433_2211])
result_case("store_release_of_each_size", [
    lddw(R2, 0x8877_6655_4433_2211), stdw(FP, -16, -1), stdw(FP, -8, 0),
    store_release8(FP, -16, R2), store_release16(FP, -14, R2), store_release32(FP, -12, R2),
    store_release64(FP, -8, R2), ldxdw(R3, FP, -16), ldxdw(R4, FP, -8)],
    [R3, R4], [0x4433_2211_2211_FF11, 0x8877_6655_4433_2211])
result_case("atomic_xchg64", [
    stdw(FP, -8, 7), mov64(R3, 9), atomic_xchg64(FP, -8, R3), ldxdw(R4, FP, -8)],
    [R3, R4], [7, 9])
result_case("atomic_xchg32_leaves_upper_half", [
    stdw(FP, -8, -1), mov64(R3, 5), atomic_xchg32(FP, -8, R3), ldxdw(R4, FP, -8)],
    [R3, R4], [0xFFFF_FFFF, 0xFFFF_FFFF_0000_0005])
result_case("atomic_cmpxchg64_succeeds_when_equal", [
    stdw(FP, -8, 7), mov64(R0, 7), mov64(R3, 9), atomic_cmpxchg64(FP, -8, R3),
    mov64(R2, R0), ldxdw(R4, FP, -8)], [R2, R4], [7, 9])
result_case("atomic_cmpxchg64_fails_when_different", [
    stdw(FP, -8, 7), mov64(R0, 8), mov64(R3, 9), atomic_cmpxchg64(FP, -8, R3),
    mov64(R2, R0), ldxdw(R4, FP, -8)], [R2, R4], [7, 7])
result_case("atomic_cmpxchg32_compares_low_halves", [
    stdw(FP, -8, 7), lddw(R0, 0x5_0000_0007), mov64(R3, 9), atomic_cmpxchg32(FP, -8, R3),
    mov64(R2, R0), ldxdw(R4, FP, -8)], [R2, R4], [7, 9])

# -- bpf-to-bpf calls ------------------------------------------------------------------------------

_add(Case("call_local_adds_arguments", ProgType.XDP, (
    mov64(R1, 20), mov64(R2, 22), call_local("sum"), exit_(),
    label("sum"), mov64(R0, R1), add64(R0, R2), exit_()),
    retval=42, data=PACKET, data_out=PACKET))
_add(Case("call_local_keeps_callee_saved_registers_and_own_stack", ProgType.XDP, (
    mov64(R6, 100), stdw(FP, -8, 1000), mov64(R1, 5), call_local("twice"),
    add64(R0, R6), ldxdw(R2, FP, -8), add64(R0, R2), exit_(),
    label("twice"), mov64(R6, 0), stxdw(FP, -8, R1), ldxdw(R0, FP, -8), add64(R0, R1),
    exit_()),
    retval=1110, data=PACKET, data_out=PACKET))
_add(Case("call_local_nested", ProgType.XDP, (
    mov64(R1, 1), call_local("f"), exit_(),
    label("f"), add64(R1, 10), call_local("g"), add64(R0, 1000), exit_(),
    label("g"), mov64(R0, R1), add64(R0, 100), exit_()),
    retval=1111, data=PACKET, data_out=PACKET))

# -- legacy packet loads (LD_ABS / LD_IND: network byte order, r6 = skb) -------------------------

# Ethernet + IPv4 (10.0.0.1 -> 10.0.0.2, ICMP) + 8 bytes of ICMP echo: the kernel's skb test run
# parses the IPv4 header, so it must be whole.
ETH_PACKET = bytes.fromhex("ffffffffffff" "020000000001" "0800"
                           "4500001c00010000400100000a0000010a000002" "0800f7ff00000000")
_add(Case("ld_abs_h_reads_big_endian_ethertype", ProgType.SCHED_CLS,
          (mov64(R6, R1), ldabsh(12), exit_()), retval=0x0800, data=ETH_PACKET,
          data_out=ETH_PACKET))
_add(Case("ld_abs_w_and_b", ProgType.SCHED_CLS,
          (mov64(R6, R1), ldabsw(6), mov64(R7, R0), ldabsb(14), add64(R0, R7), exit_()),
          retval=0x0200_0000 + 0x45, data=ETH_PACKET, data_out=ETH_PACKET))
_add(Case("ld_ind_adds_the_register", ProgType.SCHED_CLS,
          (mov64(R6, R1), mov64(R7, 10), ldindh(R7, 2), mov64(R8, R0), ldindb(R7, 4),
           add64(R0, R8), exit_()), retval=0x0800 + 0x45, data=ETH_PACKET,
          data_out=ETH_PACKET))
_add(Case("ld_ind_w", ProgType.SCHED_CLS,
          (mov64(R6, R1), mov64(R7, 26), ldindw(R7, 4), exit_()), retval=0x0A00_0002,
          data=ETH_PACKET, data_out=ETH_PACKET))
_add(Case("ld_abs_out_of_bounds_exits_with_zero", ProgType.SCHED_CLS,
          (mov64(R6, R1), mov64(R0, 7), ldabsw(100), mov64(R0, 9), exit_()), retval=0,
          data=ETH_PACKET, data_out=ETH_PACKET))
# A socket filter's skb starts at the network header: offset 12 is the IPv4 source address.
# (The kernel hands back the packet with the Ethernet header zeroed: data_out is only
# compared between the backends.)
_add(Case("ld_abs_in_socket_filter_is_relative_to_network_header", ProgType.SOCKET_FILTER,
          (mov64(R6, R1), ldabsh(12), exit_()), retval=0x0A00, data=ETH_PACKET))

# -- context programs: raw tracepoint and syscall -------------------------------------------------

_add(Case("raw_tracepoint_reads_ctx_args", ProgType.RAW_TRACEPOINT,
          (ldxdw(R2, R1, 0), ldxdw(R0, R1, 8), sub64(R0, R2), exit_()),
          retval=0xFFFF_FFFF & (300 - 100), ctx=u64(100) + u64(300)))
_add(Case("syscall_program_reads_ctx", ProgType.SYSCALL,
          (ldxw(R0, R1, 4), ldxw(R2, R1, 0), mul64(R0, R2), exit_()),
          retval=6 * 7, ctx=u32(6) + u32(7), prog_flags=BPF_F_SLEEPABLE))


# -- maps ------------------------------------------------------------------------------------------

def _key_on_stack(key: int, off: int = -4) -> tuple[Item, ...]:
    """R2 = pointer to a u32 key on the stack."""
    return (stw(FP, off, key), mov64(R2, FP), add64(R2, off))


def _lookup(map_name: str, key: int) -> tuple[Item, ...]:
    """R0 = bpf_map_lookup_elem(map, &key)"""
    return (ld_map_fd(R1, map_name), *_key_on_stack(key), call("map_lookup_elem"))


def _update(map_name: str, key: int, value: int, flags: int, *, value_off: int = -16,
            key_off: int = -4) -> tuple[Item, ...]:
    """R0 = bpf_map_update_elem(map, &key (u32), &value (u64), flags)"""
    return (lddw(R3, value), stxdw(FP, value_off, R3), ld_map_fd(R1, map_name),
            *_key_on_stack(key, key_off), mov64(R3, FP), add64(R3, value_off),
            mov64(R4, flags), call("map_update_elem"))


def _map_case(name: str, maps: Sequence[MapDef], body: Sequence[Item], retval: int,
              expect_maps: Mapping[str, Any], **kw) -> Case:
    return _add(Case(name, ProgType.XDP, tuple(body), retval=retval & 0xFFFFFFFF,
                     data=PACKET, data_out=PACKET, maps=tuple(maps),
                     expect_maps=expect_maps, **kw))


def _count_in(map_name: str, key: int, *, per_cpu: bool = False) -> tuple[Item, ...]:
    """lookup(key); if found, atomically add 1 to its u64 value (plain add if per-CPU);
    return the value seen before."""
    update = (ldxdw(R2, R0, 0), mov64(R9, R2), add64(R2, 1), stxdw(R0, 0, R2)) if per_cpu \
        else (mov64(R9, 1), atomic_fetch_add64(R0, 0, R9))
    return (*_lookup(map_name, key), mov64(R1, R0), mov64(R0, 0xFFFF), jeq(R1, 0, "out"),
            mov64(R0, R1), *update, mov64(R0, R9), label("out"), exit_())


_array = MapDef("counts", MapType.ARRAY, 4, 8, 4, init=((u32(1), u64(41)),))
_map_case("map_array_lookup_and_atomic_increment", [_array], _count_in("counts", 1),
          retval=41, expect_maps={"counts": {u32(0): u64(0), u32(1): u64(42), u32(2): u64(0),
                                             u32(3): u64(0)}})
_map_case("map_array_lookup_out_of_range_is_null", [_array], _count_in("counts", 4),
          retval=0xFFFF, expect_maps={"counts": {u32(0): u64(0), u32(1): u64(41),
                                                 u32(2): u64(0), u32(3): u64(0)}})
_map_case("map_array_update_from_program", [_array],
          (*_update("counts", 2, 0x1234_5678_9ABC, BPF_ANY), exit_()),
          retval=0, expect_maps={"counts": {u32(0): u64(0), u32(1): u64(41),
                                            u32(2): u64(0x1234_5678_9ABC), u32(3): u64(0)}})
_map_case("map_array_update_noexist_gives_eexist", [_array],
          (*_update("counts", 2, 5, BPF_NOEXIST), exit_()), retval=-EEXIST,
          expect_maps={"counts": {u32(0): u64(0), u32(1): u64(41), u32(2): u64(0),
                                  u32(3): u64(0)}})
_map_case("map_array_delete_gives_einval", [_array],
          (ld_map_fd(R1, "counts"), *_key_on_stack(1), call("map_delete_elem"), exit_()),
          retval=-EINVAL, expect_maps={"counts": {u32(0): u64(0), u32(1): u64(41),
                                                  u32(2): u64(0), u32(3): u64(0)}})

_global = MapDef("glob", MapType.ARRAY, 4, 16, 1, init=((u32(0), u64(1) + u64(99)),))
_map_case("map_value_address_loaded_directly", [_global], (
    ld_map_value(R1, "glob", 8), ldxdw(R0, R1, 0), add64(R0, 1), stxdw(R1, 0, R0), exit_()),
    retval=100, expect_maps={"glob": {u32(0): u64(1) + u64(100)}})

_hash = MapDef("table", MapType.HASH, 4, 8, 8, init=((u32(7), u64(70)),))
_map_case("map_hash_update_lookup_delete", [_hash], (
    *_update("table", 1, 100, BPF_NOEXIST), mov64(R7, R0),
    *_update("table", 1, 101, BPF_NOEXIST), mov64(R8, R0),  # -EEXIST
    *_update("table", 2, 200, BPF_EXIST), add64(R8, R0),  # -ENOENT
    ld_map_fd(R1, "table"), *_key_on_stack(7), call("map_delete_elem"), add64(R7, R0),
    ld_map_fd(R1, "table"), *_key_on_stack(7), call("map_delete_elem"), add64(R8, R0),
    *_lookup("table", 1), jeq(R0, 0, "missing"), ldxdw(R0, R0, 0),
    add64(R0, R7), add64(R0, R8), exit_(),
    label("missing"), mov64(R0, 1), exit_()),
    retval=100 - EEXIST - ENOENT - ENOENT, expect_maps={"table": {u32(1): u64(100)}})
_map_case("map_hash_full_gives_e2big", [MapDef("tiny", MapType.HASH, 4, 8, 1)], (
    *_update("tiny", 1, 1, BPF_ANY), mov64(R7, R0),
    *_update("tiny", 2, 2, BPF_ANY), add64(R0, R7), exit_()),
    retval=-E2BIG, expect_maps={"tiny": {u32(1): u64(1)}})
_map_case("map_lru_hash_update_and_lookup",
          [MapDef("lru", MapType.LRU_HASH, 4, 8, 64)], (
              *_update("lru", 3, 30, BPF_ANY), *_update("lru", 4, 40, BPF_ANY),
              *_lookup("lru", 3), jeq(R0, 0, "missing"), ldxdw(R0, R0, 0), exit_(),
              label("missing"), mov64(R0, 1), exit_()),
          retval=30, expect_maps={"lru": {u32(3): u64(30), u32(4): u64(40)}})
_map_case("map_percpu_array_counts_on_this_cpu",
          [MapDef("pcpu", MapType.PERCPU_ARRAY, 4, 8, 2)],
          _count_in("pcpu", 1, per_cpu=True), retval=0,
          expect_maps={"pcpu": {u32(0): PerCpu(u64(0)), u32(1): PerCpu(u64(1))}})
_map_case("map_percpu_hash_update_sets_this_cpu_only",
          [MapDef("phash", MapType.PERCPU_HASH, 4, 8, 4)], (
              *_update("phash", 9, 99, BPF_ANY), mov64(R7, R0),
              *_lookup("phash", 9), jeq(R0, 0, "missing"), ldxdw(R0, R0, 0), add64(R0, R7),
              exit_(), label("missing"), mov64(R0, 1), exit_()),
          retval=99, expect_maps={"phash": {u32(9): PerCpu(u64(99))}})
_map_case("map_lru_percpu_hash_update",
          [MapDef("lpcpu", MapType.LRU_PERCPU_HASH, 4, 8, 16)],
          (*_update("lpcpu", 5, 55, BPF_ANY), exit_()),
          retval=0, expect_maps={"lpcpu": {u32(5): PerCpu(u64(55))}})


def _push(map_name: str, value: int, flags: int = 0) -> tuple[Item, ...]:
    """R0 = bpf_map_push_elem(map, &value (u64), flags)"""
    return (lddw(R3, value), stxdw(FP, -16, R3), ld_map_fd(R1, map_name), mov64(R2, FP),
            add64(R2, -16), mov64(R3, flags), call("map_push_elem"))


def _pop_or_peek(map_name: str, helper: str) -> tuple[Item, ...]:
    """R0 = the u64 popped/peeked, or 0xdead if the helper failed."""
    return (stdw(FP, -24, 0), ld_map_fd(R1, map_name), mov64(R2, FP), add64(R2, -24),
            call(helper), mov64(R1, R0), mov64(R0, 0xDEAD), jne(R1, 0, f"fail{id(helper)}"),
            ldxdw(R0, FP, -24), label(f"fail{id(helper)}"))


def _queue_case(kind: MapType, name: str, retval: int, remaining: list[int]) -> None:
    qname = kind.name.lower()
    _map_case(name, [MapDef(qname, kind, 0, 8, 4, init=((None, u64(1)),))], (
        *_push(qname, 2), *_push(qname, 3), mov64(R7, R0),
        *_pop_or_peek(qname, "map_pop_elem"), mov64(R8, R0),
        *_pop_or_peek(qname, "map_peek_elem"),
        lsh64(R8, 8), add64(R0, R8), add64(R0, R7), exit_()),
        retval=retval, expect_maps={qname: [u64(v) for v in remaining]})


_queue_case(MapType.QUEUE, "map_queue_push_pop_peek_is_fifo", 0x0102, [2, 3])
_queue_case(MapType.STACK, "map_stack_push_pop_peek_is_lifo", 0x0302, [2, 1])
_map_case("map_queue_push_full_gives_e2big_and_bpf_exist_rotates",
          [MapDef("q", MapType.QUEUE, 0, 8, 2)], (
              *_push("q", 1), *_push("q", 2), *_push("q", 3), mov64(R7, R0),
              *_push("q", 4, flags=BPF_EXIST), add64(R0, R7), exit_()),
          retval=-E2BIG, expect_maps={"q": [u64(2), u64(4)]})
_map_case("map_queue_pop_empty_gives_enoent", [MapDef("q", MapType.QUEUE, 0, 8, 2)], (
    stdw(FP, -8, 0), ld_map_fd(R1, "q"), mov64(R2, FP), add64(R2, -8),
    call("map_pop_elem"), exit_()), retval=-ENOENT, expect_maps={"q": []})

_inner = MapDef("inner", MapType.ARRAY, 4, 8, 2, init=((u32(0), u64(5)),))
_outer = MapDef("outer", MapType.ARRAY_OF_MAPS, 4, 4, 2, inner="inner",
                init=((u32(1), MapFdRef("inner")),))
_map_case("map_in_map_lookup_then_inner_lookup", [_inner, _outer], (
    *_lookup("outer", 1), jeq(R0, 0, "none"),
    mov64(R1, R0), *_key_on_stack(0, -8), call("map_lookup_elem"), jeq(R0, 0, "none"),
    mov64(R9, 10), atomic_fetch_add64(R0, 0, R9), mov64(R0, R9), exit_(),
    label("none"), mov64(R0, 0xFFFF), exit_()),
    retval=5, expect_maps={"inner": {u32(0): u64(15), u32(1): u64(0)}})
_map_case("map_in_map_empty_slot_is_null", [_inner, _outer], (
    *_lookup("outer", 0), jeq(R0, 0, "none"), mov64(R0, 1), exit_(),
    label("none"), mov64(R0, 0xFFFF), exit_()),
    retval=0xFFFF, expect_maps={"inner": {u32(0): u64(5), u32(1): u64(0)}})



def _inner_change(inner: str, outer: str) -> tuple[Item, ...]:
    """Through the inner map outer[0]: key 2 = 9, again with BPF_NOEXIST (-EEXIST), key 1
    deleted, again (-ENOENT): R0 the sum of the four results (the native tier's updates
    and deletes of a map a program found at run time: write_dynamic_htab_op)."""
    inner_op = (mov64(R1, R6), *_key_on_stack(2), mov64(R3, FP), add64(R3, -16))
    return (*_lookup(outer, 0), jeq(R0, 0, "none"), mov64(R6, R0),
            lddw(R3, 9), stxdw(FP, -16, R3),
            *inner_op, mov64(R4, BPF_ANY), call("map_update_elem"), mov64(R7, R0),
            *inner_op, mov64(R4, BPF_NOEXIST), call("map_update_elem"), add64(R7, R0),
            mov64(R1, R6), *_key_on_stack(1), call("map_delete_elem"), add64(R7, R0),
            mov64(R1, R6), *_key_on_stack(1), call("map_delete_elem"), add64(R0, R7), exit_(),
            label("none"), mov64(R0, 0xFFFF), exit_())


for _type, _name in ((MapType.HASH, "hash"), (MapType.LRU_HASH, "lru_hash")):
    _inner_map = MapDef(f"inner_{_name}", _type, 4, 8, 8, init=((u32(1), u64(7)),))
    _outer_map = MapDef(f"outer_{_name}", MapType.ARRAY_OF_MAPS, 4, 4, 1,
                        inner=f"inner_{_name}", init=((u32(0), MapFdRef(f"inner_{_name}")),))
    _map_case(f"map_in_map_update_and_delete_in_an_inner_{_name}", [_inner_map, _outer_map],
              _inner_change(f"inner_{_name}", f"outer_{_name}"), retval=-EEXIST - ENOENT,
              expect_maps={f"inner_{_name}": {u32(2): u64(9)}})

# -- tail calls ----------------------------------------------------------------------------------

_jump_table = MapDef("jumps", MapType.PROG_ARRAY, 4, 4, 4, init=((u32(2), ProgRef("callee")),))


def _tail_call(index: int) -> tuple[Item, ...]:
    return (mov64(R6, R1), stdw(FP, -8, 0), ld_map_fd(R2, "jumps"), mov64(R3, index),
            call("tail_call"), mov64(R0, 7), exit_())


_CALLEE = (ProgType.XDP, (mov64(R0, 42), exit_()))
_map_case("tail_call_jumps_to_the_program", [_jump_table], _tail_call(2), retval=42,
          expect_maps={}, progs={"callee": _CALLEE})
_map_case("tail_call_to_empty_slot_falls_through", [_jump_table], _tail_call(1), retval=7,
          expect_maps={}, progs={"callee": _CALLEE})
_map_case("tail_call_out_of_range_falls_through", [_jump_table], _tail_call(9), retval=7,
          expect_maps={}, progs={"callee": _CALLEE})
_map_case("tail_call_chain_counts_in_a_map", [
    MapDef("hits", MapType.ARRAY, 4, 8, 1),
    MapDef("jumps", MapType.PROG_ARRAY, 4, 4, 4, init=((u32(0), ProgRef("counter")),)),
], _tail_call(0), retval=33, expect_maps={"hits": {u32(0): u64(33)}}, progs={
    # counts itself in hits[0] and tail-calls itself: the kernel allows 33 tail calls a run
    "counter": (ProgType.XDP, (
        mov64(R6, R1), *_lookup("hits", 0), jeq(R0, 0, "out"),
        mov64(R9, 1), atomic_fetch_add64(R0, 0, R9), add64(R9, 1), stxdw(FP, -16, R9),
        mov64(R1, R6), ld_map_fd(R2, "jumps"), mov64(R3, 0), call("tail_call"),
        ldxdw(R0, FP, -16), label("out"), exit_()))})

BY_NAME = {case.name: case for case in CASES}
