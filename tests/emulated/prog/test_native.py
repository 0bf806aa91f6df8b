"""The native engine (prog/native.py): machine code through LLVM against the reference
interpreter and the JIT on random ALU/branch/loop programs (R0, the instruction count, the
budget's fault point), the kernel's division rules at the edges, what it refuses and runs on
the JIT (the error without llvmlite: test_interpreter.py, which runs without it too)."""

from __future__ import annotations

import errno

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from programs.strategies import JMP_CODES, alu_instruction, imm32, value64
from pybpf import asm
from pybpf.asm import FP, OPCODES, R0, R1, R2, R3, R4, R6, Source
from pybpf.asm import builder as b
from pybpf.emulated.prog import core, native
from pybpf.emulated.prog.core import run_prog
from pybpf.emulated.prog.executable import Executable
from pybpf.emulated.prog.helpers import helper_funcs
from pybpf.emulated.prog.memory import RunEnv, RunState
from pybpf.errors import ProgramFault

pytestmark = pytest.mark.skipif(native.native_missing() is not None,
                                reason=str(native.native_missing()))

ENGINES = ("interp", "jit", "native")
WORK_REGS = [int(r) for r in (R0, R1, R2, 3, 4, 5, R6, 7, 8, 9)]
regs = st.sampled_from(WORK_REGS)
body_regs = st.sampled_from([reg for reg in WORK_REGS if reg != 6])  # R6 counts the loop


def executable(items) -> Executable:
    return Executable(asm.assemble(items).instructions, helper_funcs())


def outcome(items, engine: str, budget: int) -> tuple:
    """(R0 or the fault's errno and pc, instructions counted) of one run."""
    rs = RunState(RunEnv(insn_budget=budget, engine=engine))
    try:
        result: tuple = ("r0", run_prog(executable(items), rs, 0))
    except ProgramFault as fault:
        result = ("fault", fault.errno, fault.pc)
    return result, rs.count


@st.composite
def looping_programs(draw) -> list:
    """ALU code with forward jumps and a counted back edge around it (some loops outrun the
    budget), stack stores and loads, every register folded into R0 at the end."""
    items: list = [b.lddw(asm.Reg(reg), draw(value64)) for reg in WORK_REGS]
    items.append(b.mov64(R6, 0))
    body = draw(st.lists(alu_instruction(body_regs), min_size=1, max_size=25))
    items.append(b.label("top"))
    jumps = draw(st.lists(st.tuples(st.integers(0, max(len(body) - 1, 0)), st.integers(1, 5),
                                    st.sampled_from(JMP_CODES), regs, regs, imm32), max_size=5))
    targets: dict[int, list[str]] = {}
    for n, (at, span, *_) in enumerate(jumps):
        targets.setdefault(min(at + span, len(body)), []).append(f"L{n}")
    for i in range(len(body) + 1):
        items += [b.label(name) for name in targets.get(i, [])]
        for n, (at, _, code, dst, src, imm) in enumerate(jumps):
            if at == i:
                info = OPCODES[code]
                operand = asm.Reg(src) if info.source is Source.X else imm
                items.append(getattr(b, info.name)(asm.Reg(dst), operand, f"L{n}"))
        if i < len(body):
            items.append(body[i])
            if draw(st.booleans()):
                size = draw(st.sampled_from([1, 2, 4, 8]))
                off = -size * draw(st.integers(1, 8))
                items += [b.stx(size, FP, off, asm.Reg(body[i].dst)),
                          b.ldx(size, asm.Reg(draw(regs)), FP, off)]
    items += [b.add64(R6, 1), b.jlt(R6, draw(st.integers(1, 40)), "top")]
    for reg in WORK_REGS[1:]:
        items.append(b.xor64(R0, asm.Reg(reg)))
    items.append(b.exit_())
    return items


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(items=looping_programs(), budget=st.integers(50, 1500))
def test_random_loops_agree_with_the_interpreter_to_the_instruction(items, budget):
    """R0 and the count, or ELOOP at the same instruction with the same count."""
    reference = outcome(items, "interp", budget)
    assert outcome(items, "native", budget) == reference
    if reference[0][0] == "r0":  # the JIT stops over the budget at its own block boundaries
        assert outcome(items, "jit", budget) == reference


needs_native_entry = pytest.mark.skipif(
    native.NATIVE_ENTRY is None,
    reason="the C cache model (pybpf._cache_model) is not built: a native program's entry "
           "is Python's run_native")


def runs_through(entry, budget: int, times: int = 3) -> list:
    """(R0 or the fault's errno and pc, the count, the next region) of ``times`` runs through
    ``entry``, each with a RunState of its own."""
    results = []
    for _ in range(times):
        rs = RunState(RunEnv(insn_budget=budget, engine="native"))
        try:
            result: tuple = ("r0", entry(rs, 0, 0, 0, 0, 0))
        except ProgramFault as fault:
            result = ("fault", fault.errno, fault.pc)
        results.append((result, rs.count, rs.next_region))
    return results


def c_entry_counting(program, python_runs: list):
    """A NativeEntry of ``program``'s main function whose calls of the Python run_native
    (what is not its common path) are counted in ``python_runs``."""
    python_entry = program.python_entry(0)

    def python(*args):
        python_runs.append(args)
        return python_entry(*args)

    return native.NATIVE_ENTRY(program.functions[0], program.free, python, program.failed,
                               native._ENTRY_LAYOUT, program.keeps_gil, program.reads_task,
                               native.NATIVE_VALUES)


@needs_native_entry
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(items=looping_programs(), budget=st.integers(50, 1500))
def test_the_c_entry_runs_as_python_run_native_does(items, budget):
    """NativeEntry, a run's common path in C, against the Python run_native, the reference:
    the same R0 (or ELOOP at the same instruction), count and next region, run after run;
    only the first run, which makes the run's state, is Python's."""
    program = native.native_compile(executable(items))
    assert type(program.entry(0)) is native.NATIVE_ENTRY
    python_runs: list = []
    through_c = runs_through(c_entry_counting(program, python_runs), budget)
    assert through_c == runs_through(program.python_entry(0), budget)
    assert len(python_runs) == 1


@needs_native_entry
def test_what_a_run_raises_through_the_c_entry_is_python_run_natives():
    """A fault Python raised in a callback (a load at address 0) stops the run with that
    fault, the run's state back in the free list for the next run."""
    program = native.native_compile(executable([b.ldx(8, R0, R1, 0), b.exit_()]))
    python_runs: list = []
    through_c = runs_through(c_entry_counting(program, python_runs), 100)
    assert through_c == runs_through(program.python_entry(0), 100)
    assert through_c[0][0][:2] == ("fault", errno.EFAULT)
    assert len(python_runs) == 1 and len(program.free) == 1


def test_a_loop_whose_trip_count_the_optimizer_divides_in_128_bits_runs():
    """Found by the random loops: LLVM's loop analysis gave this one a call to libgcc's
    __udivti3, which MCJIT could not resolve by itself; every external call of the module
    (the frame's memset first) then jumped to address 0 and the process died."""
    R4, R9 = asm.Reg(4), asm.Reg(9)
    items = [b.lddw(R2, -1), b.label("top"), b.movsx64(R9, R3, 32), b.sub64(R3, -1),
             b.sdiv32(R1, 0x7FFF_FFFF), b.stx(4, FP, -8, R1), b.ldx(4, R6, FP, -8),
             b.and64(R9, R4), b.stx(4, FP, -12, R9), b.ldx(4, R4, FP, -12),
             b.mov32(R9, R2), b.stx(1, FP, -7, R9), b.ldx(1, R2, FP, -7), b.add64(R6, 1),
             b.jlt(R6, 31, "top"), b.exit_()]
    assert outcome(items, "native", 1094) == outcome(items, "interp", 1094)


EDGES = [0, 1, 2, 0x7FFF_FFFF, 0x8000_0000, 0xFFFF_FFFF, 1 << 63, (1 << 64) - 1, 0x1_0000_0001]


@pytest.mark.parametrize("op", ["div", "mod", "sdiv", "smod"])
@pytest.mark.parametrize("bits", [32, 64])
def test_division_edges_follow_the_kernels_rules(op, bits):
    """By zero, by -1 and INT_MIN / -1 on every engine, every pair of edge values."""
    make = getattr(b, f"{op}{bits}")
    for dividend in EDGES:
        for divisor in EDGES:
            items = [b.lddw(R0, dividend - (1 << 64) if dividend >> 63 else dividend),
                     b.lddw(R1, divisor - (1 << 64) if divisor >> 63 else divisor),
                     make(R0, R1), b.exit_()]
            results = {engine: outcome(items, engine, 100) for engine in ENGINES}
            assert len(set(results.values())) == 1, (dividend, divisor, results)


@pytest.mark.parametrize("access", [b.stx(8, FP, 0, R0), b.ldx(4, R1, FP, -514),
                                    b.ldx(8, R1, FP, -600)])
def test_stack_fault_is_the_interpreters_with_its_count_and_message(access):
    items = [b.mov64(R0, 1), b.add64(R0, 2), access, b.exit_()]
    reference = outcome(items, "interp", 100)
    assert reference[0] == ("fault", errno.EFAULT, 2)
    assert outcome(items, "native", 100) == reference
    messages = set()
    for engine in ("interp", "native"):
        with pytest.raises(ProgramFault) as info:
            run_prog(executable(items), RunState(RunEnv(engine=engine)), 0)
        messages.add(str(info.value))
    assert len(messages) == 1, messages


def test_a_pointer_to_the_callers_stack_reaches_it_through_the_frame_table():
    items = [b.st(8, FP, -8, 3), b.mov64(R1, FP), b.add64(R1, -8), b.call_local("sub"),
             b.ldx(8, R0, FP, -8), b.exit_(),
             b.label("sub"), b.ldx(8, R2, R1, 0), b.add64(R2, 39), b.stx(8, R1, 0, R2),
             b.mov64(R0, 0), b.exit_()]
    exe = executable(items)
    rs = RunState(RunEnv(engine="native"))
    assert run_prog(exe, rs, 0) == 42
    assert exe.native is not None and rs.count == 11


@pytest.mark.parametrize("taken", [0, 1])
def test_a_register_holding_a_stack_address_is_used_as_one_only_where_it_surely_does(taken):
    """``mov r2, r10; add r2, -8`` leaves R2 a known stack slot, which loads and stores
    through it reach directly (FpOffsets); where two paths meet, or the register was
    written since, the address is found at run time: each store lands where the
    interpreter puts it."""
    items = [b.mov64(R3, taken), b.mov64(R2, FP), b.add64(R2, -8), b.st(8, R2, 0, 5),
             b.jeq(R3, 0, "meet"), b.mov64(R2, FP), b.sub64(R2, 16),
             b.label("meet"), b.st(8, R2, 0, 7), b.st(8, R2, -8, 11),  # R2: -8 or -16
             b.mov64(R4, R2), b.add64(R4, 4), b.st(4, R4, -4, 13),  # R2's slot again
             b.ldx(8, R0, FP, -8), b.ldx(8, R1, FP, -16), b.mul64(R1, 100), b.add64(R0, R1),
             b.ldx(8, R1, FP, -24), b.mul64(R1, 10000), b.add64(R0, R1), b.exit_()]
    reference = outcome(items, "interp", 100)
    assert reference[0] == ("r0", 13 + 1100 if not taken else 5 + 1300 + 110000)
    assert outcome(items, "native", 100) == reference


def test_helpers_run_through_the_callback_and_see_the_stack():
    # bpf_get_prandom_u32 is not deterministic; bpf_trace_printk reads its format string from
    # the stack (a frame registered in rs.mem during the callback)
    items = [b.st(4, FP, -8, int.from_bytes(b"hi\n\0", "little")), b.mov64(R1, FP),
             b.add64(R1, -8), b.mov64(R2, 4), b.call("trace_printk"), b.exit_()]
    results = {}
    for engine in ENGINES:
        rs = RunState(RunEnv(engine=engine))
        exe = executable(items)
        results[engine] = (run_prog(exe, rs, 0), rs.count, rs.trace)
    assert exe.native is not None
    assert len({repr(r) for r in results.values()}) == 1, results


def test_tail_calls_are_refused_and_run_on_the_jit():
    exe = executable([b.mov64(R2, 0), b.mov64(R3, 0), b.call("tail_call"), b.mov64(R0, 7),
                      b.exit_()])
    core.native_entry(exe, 0)
    assert exe.native is None
    assert "tail call" in exe.native_refused
    assert exe.entries["native", 0] is core.jit_entry(exe, 0)


def test_recursion_is_refused():
    exe = executable([b.call_local("f"), b.exit_(), b.label("f"), b.call_local("f"),
                      b.exit_()])
    with pytest.raises(native.NativeRefused, match="recursive"):
        native.check_compilable(exe)


def test_smp_processor_id_without_a_machine_is_cpu_0_on_every_engine():
    items = [b.mov64(R0, 7), b.call("get_smp_processor_id"), b.exit_()]
    assert {engine: outcome(items, engine, 100) for engine in ENGINES} == \
        dict.fromkeys(ENGINES, (("r0", 0), 3))


def test_without_the_accelerators_call_native_programs_run_through_ctypes(monkeypatch):
    items = [b.mov64(R0, 5), b.mov64(R2, 7), b.mul64(R0, R2), b.add64(R0, R1), b.exit_()]
    expected = outcome(items, "native", 100)
    monkeypatch.setattr(native, "CALL_NATIVE", None)
    assert outcome(items, "native", 100) == expected == (("r0", 35), 5)


def test_the_native_tier_runs_its_inlined_helper_without_the_c_extensions():
    """bpf_get_smp_processor_id compiled inline calls the C cache model's charge only where
    that is built: without the extensions (PYBPF_NO_ACCEL=1, a child process) its machine
    code referenced the missing symbol, which left every call of the module a jump to
    address 0 (a crash); now the run gives the CPU, modeled or not."""
    import os
    import subprocess
    import sys

    code = (
        "import pybpf\n"
        "from pybpf import asm\n"
        "from pybpf.asm import builder as b\n"
        "from pybpf.uapi import ProgType\n"
        "for modeled in (True, False):\n"
        "    emu = pybpf.system('emulated', cpus=2, modeled_time=modeled)\n"
        "    insns = asm.encode(asm.assemble([b.call('get_smp_processor_id'), b.exit_()])"
        ".instructions)\n"
        "    prog = emu.prog_from_fd(emu.prog_load(ProgType.SOCKET_FILTER, insns, "
        "license='GPL'))\n"
        "    with emu.on_cpu(1):\n"
        "        print(prog.run(bytearray(64), engine='native').retval)\n")
    env = dict(os.environ, PYBPF_NO_ACCEL="1")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["1", "1"]
