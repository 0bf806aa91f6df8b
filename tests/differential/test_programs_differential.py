"""Every corpus program on both backends, the emulated one on each of its engines (the
reference interpreter, the JIT to Python and, with llvmlite, the native tier): each must give
what the kernel gives (retval, packet out, every map's contents), and both what the corpus
says.

Plus random straight-line ALU programs and branchy ones with stack memory (hypothesis),
compared the same way.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from programs.corpus import CASES, PACKET, Case, packet_results
from programs.runner import Outcome, check_expected, run_case
from programs.strategies import JMP_CODES, alu_instruction, imm32, value64
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
    AtomicOp,
    Instruction,
    Kind,
    Source,
    add64,
    exit_,
    jgt,
    label,
    lddw,
    ldxdw,
    ldxw,
    mov32,
    mov64,
    stdw,
    stxdw,
)
from pybpf.asm.opcodes import ATOMIC_IMMS_NARROW, ATOMIC_IMMS_WIDE
from pybpf.programs import Program, ProgramSpec
from pybpf.uapi import ProgType


def _differences(kernel: Outcome, emulated: Outcome) -> list[str]:
    diffs = []
    if kernel.retval != emulated.retval:
        diffs.append(f"retval: kernel {kernel.retval:#x}, emulated {emulated.retval:#x}")
    if kernel.data_out != emulated.data_out:
        diffs.append(f"data_out: kernel {kernel.data_out.hex()}, emulated "
                     f"{emulated.data_out.hex()}")
    for name in kernel.maps:
        if kernel.maps[name] != emulated.maps.get(name):
            diffs.append(f"map {name}: kernel {kernel.maps[name]}, emulated "
                         f"{emulated.maps.get(name)}")
    return diffs


@pytest.mark.parametrize("case", CASES, ids=str)
def test_corpus_program_gives_the_kernels_result_on_every_engine(case: Case, kernel,
                                                                  emulated_engine,
                                                                  differential_tally):
    emulated, side = emulated_engine, f"emulated {emulated_engine.bpf_engine}"
    assert kernel.num_possible_cpus == emulated.num_possible_cpus
    on_kernel = run_case(case, kernel)
    check_expected(case, on_kernel, kernel.num_possible_cpus)
    try:
        on_emulator = run_case(case, emulated)
    except Exception:
        differential_tally.add("kernel", side, "programs", 1, 1, 1)
        raise
    diffs = _differences(on_kernel, on_emulator)
    differential_tally.add("kernel", side, "programs", 1, 1, int(bool(diffs)))
    assert not diffs, f"{case.name}: " + "; ".join(diffs)
    check_expected(case, on_emulator, emulated.num_possible_cpus)


# -- random programs: straight-line ALU, then with forward jumps and stack memory ------------------

WORK_REGS = [R0, R1, R2, R3, R4, R5, R9]  # R6-R8 hold the packet bounds in packet_results
regs = st.sampled_from([int(r) for r in WORK_REGS])


@st.composite
def alu_programs(draw) -> tuple:
    init = [lddw(reg, draw(value64)) for reg in WORK_REGS]
    body = draw(st.lists(alu_instruction(regs), min_size=1, max_size=30))
    return packet_results([*init, *body], WORK_REGS)


PACKET_7 = PACKET + bytes(24)  # room for the seven result registers


def _run(system, program) -> tuple[int, bytes]:
    with Program.load(ProgramSpec(ProgType.XDP, program, name="random_alu"), system) as prog:
        run = prog.test_run(PACKET_7)
    return run.retval, run.data_out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                         HealthCheck.function_scoped_fixture])
@given(program=alu_programs())
def test_random_alu_program_gives_the_same_registers_on_every_engine(program, kernel,
                                                                     emulated_engine,
                                                                     differential_tally):
    side = f"emulated {emulated_engine.bpf_engine}"
    on_kernel = _run(kernel, program)
    try:
        on_emulator = _run(emulated_engine, program)
    except Exception:
        differential_tally.add("kernel", side, "random alu programs", 1, 1, 1)
        raise
    differential_tally.add("kernel", side, "random alu programs", 1, 1,
                           int(on_kernel != on_emulator))
    assert on_emulator == on_kernel


STACK_SLOTS = 8  # fp-64 .. fp-1, zeroed first so every load reads initialised bytes
MEM_CODES = sorted(code for code, info in OPCODES.items()
                   if info.kind in (Kind.LDX, Kind.LDX_SX, Kind.ST, Kind.STX, Kind.ATOMIC))


@st.composite
def stack_instruction(draw) -> Instruction:
    """A load, store or atomic on an aligned, initialised stack slot."""
    info = OPCODES[draw(st.sampled_from(MEM_CODES))]
    size = info.nbytes
    off = -size * draw(st.integers(1, STACK_SLOTS * 8 // size))
    if info.kind in (Kind.LDX, Kind.LDX_SX):
        return Instruction(info.code, draw(regs), int(FP), off)
    if info.kind is Kind.ST:
        return Instruction(info.code, int(FP), 0, off, draw(imm32))
    if info.kind is Kind.STX:
        return Instruction(info.code, int(FP), draw(regs), off)
    imms = ATOMIC_IMMS_WIDE if size >= 4 else ATOMIC_IMMS_NARROW
    imm = draw(st.sampled_from(sorted(int(i) for i in imms)))
    if imm == AtomicOp.LOAD_ACQ:
        return Instruction(info.code, draw(regs), int(FP), off, imm)
    return Instruction(info.code, int(FP), draw(regs), off, imm)


@st.composite
def branchy_programs(draw) -> tuple:
    """ALU and stack instructions with forward conditional jumps; all registers and the
    stack are written into the packet at the end."""
    init = [lddw(reg, draw(value64)) for reg in WORK_REGS]
    init += [stdw(FP, -8 * (i + 1), 0) for i in range(STACK_SLOTS)]
    body = draw(st.lists(st.one_of(alu_instruction(regs), stack_instruction()), min_size=1,
                         max_size=30))
    for _ in range(draw(st.integers(0, 6))):
        at = draw(st.integers(0, len(body)))
        info = OPCODES[draw(st.sampled_from(JMP_CODES))]
        src, imm = (draw(regs), 0) if info.source is Source.X else (0, draw(imm32))
        skip = draw(st.integers(0, len(body) - at))  # forward, at most to the body's end
        body.insert(at, Instruction(info.code, draw(regs), src, skip, imm))
    room = 8 * (len(WORK_REGS) + STACK_SLOTS)
    out = [stxdw(R6, 8 * i, reg) for i, reg in enumerate(WORK_REGS)]
    for i in range(STACK_SLOTS):
        out += [ldxdw(R1, FP, -8 * (i + 1)), stxdw(R6, 8 * (len(WORK_REGS) + i), R1)]
    return (ldxw(R6, R1, 0), ldxw(R7, R1, 4), mov64(R8, R6), add64(R8, room),
            jgt(R8, R7, "short"), *init, *body, *out, mov32(R0, R0), exit_(),
            label("short"), mov64(R0, 1), exit_())


PACKET_120 = bytes(range(120))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                         HealthCheck.function_scoped_fixture])
@given(program=branchy_programs())
def test_random_program_with_jumps_and_stack_gives_the_same_result_on_every_engine(
        program, kernel, emulated_engine, differential_tally):
    def run(system):
        spec = ProgramSpec(ProgType.XDP, program, name="random_branchy")
        with Program.load(spec, system) as prog:
            result = prog.test_run(PACKET_120)
        return result.retval, result.data_out

    side = f"emulated {emulated_engine.bpf_engine}"
    on_kernel = run(kernel)
    try:
        on_emulator = run(emulated_engine)
    except Exception:
        differential_tally.add("kernel", side, "random branchy programs", 1, 1, 1)
        raise
    differential_tally.add("kernel", side, "random branchy programs", 1, 1,
                           int(on_kernel != on_emulator))
    assert on_emulator == on_kernel
