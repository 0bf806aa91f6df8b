"""The emulated backend's engines: the reference interpreter, the JIT to Python and, where
llvmlite is installed, the native tier (machine code through LLVM).

Per-op semantics come from a table (program, expected R0) run on every engine; memory faults
and the budget are clean ``ProgramFault``s; random programs and the whole corpus must give the
same results on every engine.
"""

from __future__ import annotations

import errno

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from programs.corpus import CASES, Case
from programs.runner import run_case
from programs.strategies import JMP_CODES, alu_instruction, imm32, value64
from pybpf import asm
from pybpf.asm import (
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
    Instruction,
    JmpOp,
    Source,
)
from pybpf.asm import builder as b
from pybpf.emulated.prog.core import run_prog
from pybpf.emulated.prog.executable import Executable
from pybpf.emulated.prog.helpers import helper_funcs
from pybpf.emulated.prog.jit import jit_source
from pybpf.emulated.prog.memory import CTX_REGION, DYNAMIC_REGION_BASE, RunEnv, RunState
from pybpf.emulated.prog.native import native_missing
from pybpf.errors import ProgramFault

M64 = (1 << 64) - 1
NATIVE_MISSING = native_missing()
# the engines this machine runs (native only with llvmlite); parametrized tests list all three
# and skip native with the reason
ENGINES = ("interp", "jit") if NATIVE_MISSING else ("interp", "jit", "native")
ENGINE_PARAMS = ["interp", "jit", pytest.param("native", marks=pytest.mark.skipif(
    NATIVE_MISSING is not None, reason=str(NATIVE_MISSING)))]


def executable(items) -> Executable:
    return Executable(asm.assemble(items).instructions, helper_funcs())


def run_engine(items, engine: str, ctx=None, budget: int = 1_000_000) -> int:
    rs = RunState(RunEnv(insn_budget=budget, engine=engine))
    if ctx is not None:
        rs.mem[CTX_REGION] = ctx
    return run_prog(executable(items), rs, CTX_REGION << 32)


def r0_of(*body, ctx=None) -> int:
    """R0 after ``body`` + exit on every engine, which must agree."""
    items = [*body, b.exit_()]
    results = {engine: run_engine(items, engine, ctx) for engine in ENGINES}
    assert len(set(results.values())) == 1, results
    return results["jit"]


def imm64(reg, value):
    return b.lddw(reg, value - (1 << 64) if value >> 63 else value)


INT64_MIN = 1 << 63
INT32_MIN = 1 << 31

# (name, body, expected R0)
SEMANTICS = [
    ("add64_wraps", [imm64(R0, M64), b.add64(R0, 2)], 1),
    ("sub64_wraps", [b.mov64(R0, 0), b.sub64(R0, 1)], M64),
    ("mul64_keeps_low_64_bits", [imm64(R0, 1 << 63), b.mul64(R0, 2)], 0),
    ("add32_zero_extends", [imm64(R0, M64), b.add32(R0, 1)], 0),
    ("mov32_clears_high_half", [imm64(R1, 0x1234_5678_9ABC_DEF0), b.mov32(R0, R1)],
     0x9ABC_DEF0),
    ("div64_by_zero_register_gives_zero", [b.mov64(R0, 7), b.mov64(R1, 0), b.div64(R0, R1)], 0),
    ("mod64_by_zero_register_leaves_dst", [b.mov64(R0, 7), b.mov64(R1, 0), b.mod64(R0, R1)], 7),
    ("mod32_by_zero_zero_extends_dst", [imm64(R0, M64), b.mov64(R1, 0), b.mod32(R0, R1)],
     0xFFFF_FFFF),
    ("div32_uses_low_halves", [imm64(R0, 0x1_0000_0010), imm64(R1, 0x1_0000_0004),
                               b.div32(R0, R1)], 4),
    ("div64_imm_is_sign_extended", [imm64(R0, M64), b.div64(R0, -1)], 1),
    ("sdiv64_truncates_toward_zero", [b.mov64(R0, -7), b.sdiv64(R0, 2)], (-3) & M64),
    ("sdiv64_int_min_by_minus_one_wraps", [imm64(R0, INT64_MIN), b.sdiv64(R0, -1)], INT64_MIN),
    ("smod64_int_min_by_minus_one_is_zero", [imm64(R0, INT64_MIN), b.smod64(R0, -1)], 0),
    ("smod64_takes_the_dividends_sign", [b.mov64(R0, -7), b.smod64(R0, 3)], (-1) & M64),
    ("sdiv64_by_zero_register_gives_zero", [b.mov64(R0, -7), b.mov64(R1, 0),
                                            b.sdiv64(R0, R1)], 0),
    ("smod64_by_zero_register_leaves_dst", [b.mov64(R0, -7), b.mov64(R1, 0),
                                            b.smod64(R0, R1)], (-7) & M64),
    ("sdiv32_int_min_by_minus_one_wraps", [b.mov32(R0, INT32_MIN - (1 << 32)),
                                           b.sdiv32(R0, -1)], INT32_MIN),
    ("smod32_by_zero_zero_extends", [b.mov64(R0, -7), b.mov64(R1, 0), b.smod32(R0, R1)],
     (-7) & 0xFFFF_FFFF),
    ("lsh64_register_amount_is_masked", [b.mov64(R0, 1), b.mov64(R1, 65), b.lsh64(R0, R1)], 2),
    ("lsh32_register_amount_is_masked", [b.mov64(R0, 1), b.mov64(R1, 33), b.lsh32(R0, R1)], 2),
    ("rsh32_ignores_high_half", [imm64(R0, 0xFFFF_FFFF_0000_0010), b.rsh32(R0, 4)], 1),
    ("arsh64_copies_the_sign", [imm64(R0, INT64_MIN), b.arsh64(R0, 63)], M64),
    ("arsh32_sign_is_bit_31", [b.mov32(R0, -INT32_MIN), b.arsh32(R0, 31)], 0xFFFF_FFFF),
    ("neg64", [b.mov64(R0, 5), b.neg64(R0)], (-5) & M64),
    ("neg32_zero_extends", [b.mov64(R0, 5), b.neg32(R0)], (-5) & 0xFFFF_FFFF),
    ("bswap16", [imm64(R0, 0x1122_3344_5566_7788), b.bswap(R0, 16)], 0x8877),
    ("bswap32", [imm64(R0, 0x1122_3344_5566_7788), b.bswap(R0, 32)], 0x8877_6655),
    ("bswap64", [imm64(R0, 0x1122_3344_5566_7788), b.bswap(R0, 64)], 0x8877_6655_4433_2211),
    ("be16_swaps_and_truncates", [imm64(R0, 0x1122_3344_5566_7788), b.be(R0, 16)], 0x8877),
    ("be64", [imm64(R0, 0x1122_3344_5566_7788), b.be(R0, 64)], 0x8877_6655_4433_2211),
    ("le32_truncates", [imm64(R0, 0x1122_3344_5566_7788), b.le(R0, 32)], 0x5566_7788),
    ("le64_is_identity", [imm64(R0, 0x1122_3344_5566_7788), b.le(R0, 64)],
     0x1122_3344_5566_7788),
    ("movsx64_8", [b.mov64(R1, 0x80), b.movsx64(R0, R1, 8)], (-128) & M64),
    ("movsx64_16", [b.mov64(R1, 0x7FFF), b.movsx64(R0, R1, 16)], 0x7FFF),
    ("movsx64_32", [b.mov64(R1, -1), b.movsx64(R0, R1, 32)], M64),
    ("movsx32_8_zero_extends", [b.mov64(R1, 0xFF), b.movsx32(R0, R1, 8)], 0xFFFF_FFFF),
    ("ldxsb_sign_extends", [b.st(1, FP, -1, 0xFE), b.ldxs(1, R0, FP, -1)], (-2) & M64),
    ("ldxsh_sign_extends", [b.st(2, FP, -2, 0x8000), b.ldxs(2, R0, FP, -2)], (-32768) & M64),
    ("ldxsw_sign_extends", [b.st(4, FP, -4, -5), b.ldxs(4, R0, FP, -4)], (-5) & M64),
    ("stdw_imm_is_sign_extended", [b.st(8, FP, -8, -1), b.ldx(8, R0, FP, -8)], M64),
    ("stb_truncates", [b.mov64(R1, 0x1FF), b.stx(1, FP, -1, R1), b.ldx(1, R0, FP, -1)], 0xFF),
    ("lddw_loads_64_bits", [imm64(R0, 0xDEAD_BEEF_0BAD_F00D)], 0xDEAD_BEEF_0BAD_F00D),
    ("jmp32_compares_low_halves", [imm64(R1, 0x1_0000_0005), b.mov64(R0, 0),
                                   b.jeq32(R1, 5, "yes"), b.exit_(), b.label("yes"),
                                   b.mov64(R0, 1)], 1),
    ("jsgt_is_signed", [b.mov64(R1, -1), b.mov64(R0, 0), b.jsgt(R1, 0, "yes"),
                        b.mov64(R0, 2), b.exit_(), b.label("yes"), b.mov64(R0, 1)], 2),
    ("jgt_is_unsigned", [b.mov64(R1, -1), b.mov64(R0, 0), b.jgt(R1, 0, "yes"),
                         b.exit_(), b.label("yes"), b.mov64(R0, 1)], 1),
    ("jslt32_register", [b.mov32(R1, -1), b.mov64(R2, 0), b.mov64(R0, 0),
                         b.jslt32(R1, R2, "yes"), b.exit_(), b.label("yes"), b.mov64(R0, 1)],
     1),
    ("jset", [b.mov64(R1, 6), b.mov64(R0, 0), b.jset(R1, 2, "yes"), b.exit_(),
              b.label("yes"), b.mov64(R0, 1)], 1),
    ("gotol_jumps_by_imm", [b.mov64(R0, 1), b.gotol("out"), b.mov64(R0, 2), b.label("out")], 1),
    ("loop_sums", [b.mov64(R0, 0), b.mov64(R1, 10), b.label("loop"), b.add64(R0, R1),
                   b.sub64(R1, 1), b.jne(R1, 0, "loop")], 55),
    ("atomic_fetch_add64_returns_old", [b.st(8, FP, -8, 40), b.mov64(R1, 2),
                                        b.atomic_fetch_add64(FP, -8, R1), b.ldx(8, R0, FP, -8),
                                        b.lsh64(R0, 8), b.or64(R0, R1)], (42 << 8) | 40),
    ("atomic_add32_wraps_in_32_bits", [b.st(4, FP, -4, -1), b.mov64(R1, 1),
                                       b.atomic_add32(FP, -4, R1), b.ldx(8, R0, FP, -8)], 0),
    ("atomic_fetch_or32_zero_extends_old", [b.st(4, FP, -4, -1), b.mov64(R1, 1),
                                            b.atomic_fetch_or32(FP, -4, R1),
                                            b.mov64(R0, R1)], 0xFFFF_FFFF),
    ("atomic_and_xor", [b.st(8, FP, -8, 0b1100), b.mov64(R1, 0b1010),
                        b.atomic_and64(FP, -8, R1), b.mov64(R1, 1), b.atomic_xor64(FP, -8, R1),
                        b.ldx(8, R0, FP, -8)], 0b1001),
    ("atomic_xchg", [b.st(8, FP, -8, 5), b.mov64(R1, 9), b.atomic_xchg64(FP, -8, R1),
                     b.ldx(8, R0, FP, -8), b.lsh64(R0, 8), b.or64(R0, R1)], (9 << 8) | 5),
    ("atomic_cmpxchg_success", [b.st(8, FP, -8, 5), b.mov64(R0, 5), b.mov64(R1, 9),
                                b.atomic_cmpxchg64(FP, -8, R1), b.ldx(8, R1, FP, -8),
                                b.lsh64(R1, 8), b.or64(R0, R1)], (9 << 8) | 5),
    ("atomic_cmpxchg_failure_keeps_memory", [b.st(8, FP, -8, 5), b.mov64(R0, 6),
                                             b.mov64(R1, 9), b.atomic_cmpxchg64(FP, -8, R1),
                                             b.ldx(8, R1, FP, -8), b.lsh64(R1, 8),
                                             b.or64(R0, R1)], (5 << 8) | 5),
    ("load_acquire_store_release", [b.mov64(R1, 77), b.store_release64(FP, -8, R1),
                                    b.load_acquire64(R0, FP, -8)], 77),
    ("may_goto_falls_through_while_budget_lasts", [b.mov64(R0, 1), b.may_goto("out"),
                                                   b.mov64(R0, 2), b.label("out")], 2),
]


@pytest.mark.parametrize("body,expected", [pytest.param(body, want, id=name)
                                           for name, body, want in SEMANTICS])
def test_instruction_semantics_match_the_kernels(body, expected):
    assert r0_of(*body) == expected


def test_bpf_to_bpf_call_keeps_callee_saved_registers_and_has_its_own_stack():
    items = [b.mov64(R6, 6), b.mov64(R9, 9), b.st(8, FP, -8, 100), b.mov64(R1, 5),
             b.call_local("sub"),
             # R0 = 5*2 from the callee; R6, R9 and the caller's stack are intact
             b.ldx(8, R1, FP, -8), b.add64(R0, R1), b.add64(R0, R6), b.add64(R0, R9), b.exit_(),
             b.label("sub"), b.mov64(R6, 1000), b.mov64(R9, 1000), b.st(8, FP, -8, 7),
             b.mov64(R0, R1), b.mul64(R0, 2), b.exit_()]
    results = {engine: run_engine(items, engine) for engine in ENGINES}
    assert results == dict.fromkeys(ENGINES, 10 + 100 + 6 + 9)


def test_callee_can_use_a_pointer_to_the_callers_stack():
    items = [b.st(8, FP, -8, 3), b.mov64(R1, FP), b.add64(R1, -8), b.call_local("sub"),
             b.ldx(8, R0, FP, -8), b.exit_(),
             b.label("sub"), b.mov64(R2, 39), b.atomic_add64(R1, 0, R2), b.mov64(R0, 0),
             b.exit_()]
    assert {engine: run_engine(items, engine) for engine in ENGINES} == dict.fromkeys(ENGINES,
                                                                                     42)


def test_ctx_is_readable_and_writable_memory():
    ctx = bytearray(range(16))
    items = [b.ldx(4, R0, R1, 4), b.st(1, R1, 15, 0xAA), b.exit_()]
    for engine in ENGINES:
        assert run_engine(items, engine, ctx) == int.from_bytes(bytes(range(4, 8)), "little")
    assert ctx[15] == 0xAA


# -- faults --------------------------------------------------------------------------------------
FAULTS = [
    ("null_deref", [b.mov64(R1, 0), b.ldx(8, R0, R1, 0), b.exit_()], 1),
    ("store_past_the_stack", [b.mov64(R1, FP), b.st(8, R1, 0, 1), b.mov64(R0, 0), b.exit_()],
     1),
    ("load_before_the_stack", [b.mov64(R1, FP), b.add64(R1, -520), b.ldx(8, R0, R1, 0),
                               b.exit_()], 2),
    ("load_past_the_ctx", [b.ldx(8, R0, R1, 12), b.exit_()], 0),
    ("wild_pointer", [imm64(R1, 0x4141_4141_4141_4141), b.st(4, R1, 0, 1), b.mov64(R0, 0),
                      b.exit_()], 2),  # lddw takes slots 0 and 1
]


@pytest.mark.parametrize("engine", ENGINE_PARAMS)
@pytest.mark.parametrize("items,pc", [pytest.param(items, pc, id=name)
                                      for name, items, pc in FAULTS])
def test_bad_memory_access_is_a_program_fault_naming_the_insn(items, pc, engine):
    with pytest.raises(ProgramFault) as info:
        run_engine(items, engine, bytearray(16))
    assert info.value.errno == errno.EFAULT
    assert info.value.pc == pc
    assert f"insn {pc}" in str(info.value)


@pytest.mark.parametrize("engine", ENGINE_PARAMS)
def test_store_into_read_only_memory_faults(engine):
    with pytest.raises(ProgramFault, match="read-only"):
        run_engine([b.st(4, R1, 0, 1), b.mov64(R0, 0), b.exit_()], engine, bytes(16))


@pytest.mark.parametrize("engine", ENGINE_PARAMS)
def test_endless_loop_stops_at_the_budget(engine):
    with pytest.raises(ProgramFault) as info:
        run_engine([b.mov64(R0, 0), b.label("loop"), b.add64(R0, 1), b.ja("loop"), b.exit_()],
                   engine, budget=10_000)
    assert info.value.errno == errno.ELOOP
    assert "budget of 10000" in str(info.value)


@pytest.mark.parametrize("engine", ENGINE_PARAMS)
def test_budget_counts_every_instruction(engine):
    items = [b.mov64(R0, 0), b.label("loop"), b.add64(R0, 1), b.jlt(R0, 100, "loop"), b.exit_()]
    rs = RunState(RunEnv(insn_budget=1_000, engine=engine))
    assert run_prog(executable(items), rs, 0) == 100
    assert rs.count == 1 + 2 * 100 + 1


def test_instruction_count_includes_called_subprograms():
    items = [b.mov64(R6, 0), b.label("loop"), b.mov64(R1, R6), b.call_local("sub"),
             b.add64(R6, 1), b.jlt(R6, 3, "loop"), b.exit_(),
             b.label("sub"), b.mov64(R0, R1), b.exit_()]
    for engine in ENGINES:
        rs = RunState(RunEnv(engine=engine))
        run_prog(executable(items), rs, 0)
        assert rs.count == 1 + 3 * (4 + 2) + 1


def test_stack_regions_are_released_when_frames_return():
    items = [b.mov64(R6, 0), b.label("loop"), b.call_local("sub"), b.add64(R6, 1),
             b.jlt(R6, 50, "loop"), b.mov64(R0, 0), b.exit_(),
             b.label("sub"), b.mov64(R0, 0), b.exit_()]
    for engine in ENGINES:
        rs = RunState(RunEnv(engine=engine))
        run_prog(executable(items), rs, 0)
        assert all(region < DYNAMIC_REGION_BASE for region in rs.mem)


def test_many_forward_branches_nest_past_the_jit_limit():
    # 60 conditional forward jumps in one region: deeper than the JIT's if/else nesting
    body = [b.mov64(R0, 0), b.mov64(R1, 1)]
    for i in range(60):
        body += [b.jeq(R1, 0, f"skip{i}"), b.add64(R0, 1), b.label(f"skip{i}")]
    assert r0_of(*body) == 60


def test_jit_translates_a_self_loop_into_a_python_while_loop():
    source = jit_source(executable([b.mov64(R0, 0), b.label("loop"), b.add64(R0, 1),
                                    b.jlt(R0, 10, "loop"), b.exit_()]))
    assert "while True:\n                n += 2" in source


# -- random programs: both engines agree ---------------------------------------------------------
WORK_REGS = [R0, R1, R2, R3, R4, R5, R6, R7, R8, R9]
regs = st.sampled_from([int(r) for r in WORK_REGS])
reg_names = st.sampled_from(WORK_REGS)


@st.composite
def stack_insn(draw) -> Instruction:
    size = draw(st.sampled_from([1, 2, 4, 8]))
    off = -size * draw(st.integers(1, 64 // size))
    kind = draw(st.sampled_from(["ldx", "ldxs", "st", "stx"]))
    if kind == "ldx":
        return b.ldx(size, draw(reg_names), FP, off)
    if kind == "ldxs" and size != 8:
        return b.ldxs(size, draw(reg_names), FP, off)
    if kind == "st":
        return b.st(size, FP, off, draw(imm32))
    return b.stx(size, FP, off, draw(reg_names))


@st.composite
def stack_pointer_insn(draw) -> Instruction:
    """R10 copied to a register, or a constant added to or taken from one (a stack address,
    near the frame or far from it: the JIT writes a small offset from R10 without a mask)."""
    dst = draw(reg_names)
    kind = draw(st.sampled_from(["mov", "add", "sub", "add32"]))
    if kind == "mov":
        return b.mov64(dst, FP)
    imm = draw(st.one_of(st.integers(-600, 600), imm32))
    return {"add": b.add64, "sub": b.sub64, "add32": b.add32}[kind](dst, imm)


@st.composite
def branchy_programs(draw) -> list:
    """Straight-line ALU, stack and stack-address code with forward conditional jumps over
    parts of it."""
    items: list = [b.lddw(reg, draw(value64)) for reg in WORK_REGS]
    body = draw(st.lists(st.one_of(alu_instruction(regs), stack_insn(), stack_pointer_insn()),
                         min_size=1, max_size=40))
    jumps = draw(st.lists(st.tuples(st.integers(0, len(body) - 1), st.integers(1, 6),
                                    st.sampled_from(JMP_CODES), regs, regs, imm32),
                          max_size=6))
    labels: dict[int, list[str]] = {}
    branches: dict[int, list] = {}
    for n, (at, span, code, dst, src, imm) in enumerate(jumps):
        target = min(at + span, len(body))
        labels.setdefault(target, []).append(f"L{n}")
        info = OPCODES[code]
        operand = asm.Reg(src) if info.source is Source.X else imm
        make = getattr(b, info.name)
        branches.setdefault(at, []).append(make(asm.Reg(dst), operand, f"L{n}"))
    for i in range(len(body) + 1):
        items += [b.label(name) for name in labels.get(i, [])]
        items += branches.get(i, [])
        if i < len(body):
            items.append(body[i])
    # fold every register into R0 so any difference shows
    for reg in WORK_REGS[1:]:
        items.append(b.xor64(R0, reg))
    items.append(b.exit_())
    return items


@pytest.mark.parametrize("between", [
    [b.ldx(8, R1, FP, -8)], [b.lddw(R1, 1 << 40)], [b.neg64(R1)], [b.add32(R1, 0)],
    [b.le(R1, 32)], [b.mov64(R1, 7)], [b.call("get_prandom_u32"), b.mov64(R1, R0)],
    [b.mov64(R2, 3), b.atomic_xchg64(FP, -8, R1)], [b.jeq(R2, 1, "next"), b.label("next")],
    [b.add64(R1, 1 << 20)], [], [b.sub64(R1, -4)]], ids=lambda items: ",".join(
        type(i).__name__ if not hasattr(i, "opcode") else OPCODES[i.opcode].name for i in items))
def test_the_jit_forgets_a_stack_address_once_its_register_changes(between):
    """``mov r1, r10; <between>; add r1, -4``: the JIT writes the add as ``r10 - 4`` only
    where R1 surely still holds R10 plus a small constant; whatever else writes R1 (a load, a
    call's clobber, an atomic fetch, a 32-bit op, a far offset), or a jump target between,
    makes it the masked add: every engine gives the same R0."""
    r0_of(b.st(8, FP, -8, 5), b.mov64(R1, FP), b.mov64(R2, 1), *between, b.add64(R1, -4),
          b.mov64(R0, R1))


def test_the_jit_writes_a_stack_address_once_where_nothing_reads_it_between():
    """``mov r1, r10; add r1, -4; add r1, -4`` is one line, ``r1 = r10 - 8``: nothing sees the
    values before; a read between (``mov r2, r1``) keeps the line it reads."""
    def r1_lines(*items) -> list[str]:
        source = jit_source(executable([*items, b.mov64(R0, 0), b.exit_()]))
        return [line.strip() for line in source.splitlines() if line.strip().startswith("r1 =")]

    assert r1_lines(b.mov64(R1, FP), b.add64(R1, -4), b.add64(R1, -4)) == ["r1 = r10 - 8"]
    assert r1_lines(b.mov64(R1, FP), b.mov64(R2, R1), b.add64(R1, -4)) == [
        "r1 = r10", "r1 = r10 - 4"]
    assert r0_of(b.mov64(R1, FP), b.add64(R1, -4), b.add64(R1, -4), b.mov64(R0, R1)) \
        == r0_of(b.mov64(R0, FP), b.sub64(R0, 8))


@pytest.mark.parametrize("taken", [0, 1])
def test_the_jit_forgets_a_stack_address_at_a_jump_target(taken):
    """R1 holds R10 on the fall-through path only: at the jump's target the add is the masked
    one, whichever way control came."""
    assert r0_of(b.mov64(R1, 100), b.mov64(R2, taken), b.jeq(R2, 1, "target"),
                 b.mov64(R1, FP), b.label("target"), b.add64(R1, -4), b.mov64(R0, R1)) \
        == (96 if taken else r0_of(b.mov64(R0, FP), b.add64(R0, -4)))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(items=branchy_programs())
def test_random_programs_give_the_same_result_on_every_engine(items):
    # forward jumps only: a short run, far under this budget; R0 and the instruction count
    results = {}
    for engine in ENGINES:
        rs = RunState(RunEnv(insn_budget=10_000, engine=engine))
        results[engine] = (run_prog(executable(items), rs, 0), rs.count)
    assert len(set(results.values())) == 1, results


@pytest.mark.parametrize("case", CASES, ids=str)
def test_corpus_program_gives_the_same_outcome_on_every_engine(case: Case, emulated):
    outcomes = {}
    for engine in ENGINES:
        emulated.bpf_engine = engine
        outcomes[engine] = run_case(case, emulated)
    assert all(outcome == outcomes["interp"] for outcome in outcomes.values()), outcomes


def test_without_llvmlite_the_native_engine_is_refused_naming_the_package(monkeypatch):
    from pybpf.emulated.prog import native

    monkeypatch.setattr(native, "llvm", None)  # as where it is not installed
    with pytest.raises(ValueError, match="needs the llvmlite package"):
        run_engine([b.mov64(R0, 0), b.exit_()], "native")
    assert run_engine([b.mov64(R0, 5), b.exit_()], "jit") == 5


def test_jump_opcodes_cover_the_table():
    """Every conditional jump opcode has a JIT condition (the random test draws from them)."""
    assert {OPCODES[c].op for c in JMP_CODES} == {op for op in JmpOp if op not in (
        JmpOp.JA, JmpOp.CALL, JmpOp.EXIT, JmpOp.JCOND)}


def test_interp_benchmark_reports_a_program_the_kernel_refuses_and_goes_on(capsys):
    import json

    from pybpf.bench.interp import main
    from pybpf.testing import KERNEL_SKIP_REASON, kernel_available

    if not kernel_available():
        pytest.skip(KERNEL_SKIP_REASON)
    # the kernel's verifier walks each of hash-loop's iterations both ways through the NULL
    # check: past its million instructions at 20000; the emulated engines still run it
    assert main(["--iterations", "20000", "--programs", "hash-loop", "--json",
                 "--jit-repeat", "1", "--native-repeat", "1", "--kernel-repeat", "1"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert "E2BIG" in report["kernel_refused"]["hash-loop"]
    assert {row["engine"] for row in report["rows"]} == set(ENGINES)


@pytest.mark.parametrize("modeled", ["on", "off"])
def test_interp_benchmark_reports_every_engine_with_exact_instruction_counts(capsys, modeled):
    import json

    from pybpf.bench.interp import main

    assert main(["--iterations", "50", "--no-kernel", "--json", "--jit-repeat", "1",
                 "--native-repeat", "1", "--modeled-time", modeled]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["modeled_time"] == modeled
    counts = {(row["program"], row["engine"]): row["insns_per_run"] for row in report["rows"]}
    alu = 3 + 9 * 50 + 1  # mov, mov, lddw; 9 per iteration; exit
    maps = 3 + 10 * 50 + 2  # mov, mov, st; 10 per iteration; mov, exit
    hashes = 2 + 11 * 50 + 2  # mov, st; 11 per iteration; mov, exit
    helpers = 1 + 3 * 50 + 2  # mov; call, add, jlt per iteration; mov, exit
    assert counts == {(program, engine): insns for program, insns in (
        ("alu-loop", alu), ("map-loop", maps), ("hash-loop", hashes),
        ("helper-loop", helpers)) for engine in ENGINES}
    assert report["native"] == (NATIVE_MISSING or "measured")
