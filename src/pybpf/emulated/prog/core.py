"""Running a program (kernel/bpf/core.c: bpf_prog_select_runtime, bpf_prog_run).

``run_prog`` is the one entry every caller uses: test runs, XDP, cpumap programs, psock
verdicts, tracepoints, benchmarks. The caller gives the ``RunEnv`` (machine, instruction
budget, engine) through the ``RunState``; the run's instructions are charged to the current
CPU of its machine.

Engines: "jit" translates the whole program to Python once (programs over ``JIT_MAX_SLOTS``
run on the interpreter instead), "interp" steps the reference interpreter, "native" compiles
the program to machine code through LLVM (native.py; needs llvmlite) and runs a program it
refuses (a tail call, say) on the JIT, decided once per program. A run stays on its engine
through tail calls and callbacks (``rs.entry_of``).
"""

from __future__ import annotations

import errno
from collections.abc import Callable

from ...errors import ProgramFault
from ..maps.ringbuf import irq_work_run
from .executable import Executable
from .interpreter import Interpreter
from .jit import JIT_MAX_SLOTS, jit_compile
from .memory import CTX_REGION, RunState
from .native import NativeRefused, native_compile
from .semantics import RunAbort

ENGINES = ("jit", "interp", "native")


def interp_entry(exe: Executable, start: int = 0) -> Callable:
    """``f(rs, r1, r2, r3, r4, r5) -> r0`` running the subprogram at ``start`` on the
    reference interpreter."""
    found = exe.entries.get(("interp", start))
    if found is None:
        if exe.interpreter is None:
            exe.interpreter = Interpreter(exe)
        found = exe.entries["interp", start] = exe.interpreter.entry_of(start)
    return found


def jit_entry(exe: Executable, start: int = 0) -> Callable:
    """The same on the JIT, which translates the whole program the first time it is asked."""
    found = exe.entries.get(("jit", start))
    if found is None:
        if len(exe.slots) > JIT_MAX_SLOTS:
            found = interp_entry(exe, start)
        else:
            if exe.jit_functions is None:
                exe.jit_functions = jit_compile(exe)
            found = exe.jit_functions[f"F{start}"]
        exe.entries["jit", start] = found
    return found


def native_entry(exe: Executable, start: int = 0) -> Callable:
    """The same in machine code, compiled the first time it is asked; a program the native
    tier refuses runs on the JIT (``exe.native_refused`` says why)."""
    found = exe.entries.get(("native", start))
    if found is None:
        if exe.native is None and exe.native_refused is None:
            try:
                exe.native = native_compile(exe)
            except NativeRefused as refusal:
                exe.native_refused = str(refusal)
        found = exe.native.entry(start) if exe.native is not None else jit_entry(exe, start)
        exe.entries["native", start] = found
    return found


_ENTRY_OF = {"jit": jit_entry, "interp": interp_entry, "native": native_entry}


def entry_of(engine: str) -> Callable[[Executable, int], Callable]:
    """The entry maker of ``engine`` (ValueError for an unknown one; "native" where llvmlite
    is missing raises it when it first compiles)."""
    make_entry = _ENTRY_OF.get(engine)
    if make_entry is None:
        raise ValueError(f"unknown engine {engine!r}: choose one of {', '.join(ENGINES)}")
    return make_entry


def bpf_prog_select_runtime(exe: Executable, engine: str) -> None:
    """Make the main entry of ``engine`` now (the JIT translates at load), not at the first
    run."""
    entry_of(engine)(exe, 0)


def run_prog(exe: Executable, rs: RunState, ctx: int = CTX_REGION << 32) -> int:
    """Run ``exe`` with R1 = ``ctx`` on the engine of ``rs``'s environment; returns R0 (64
    bits). The instructions it executed are charged to the current CPU of the run's
    machine (without modeled time the charge, UnmodeledTiming's, which does nothing, is
    skipped)."""
    engine = rs.env.engine
    rs.entry_of = _ENTRY_OF.get(engine) or entry_of(engine)  # (which raises for no engine)
    entry = exe.main_entries.get(engine)
    if entry is None:
        entry = exe.main_entries[engine] = rs.entry_of(exe, 0)
    machine = rs.machine
    if machine is not None:
        rs.cpu = machine.current.cpu
    static = exe.static_regions
    if static:
        rs.mem.update(static)
    try:
        return entry(rs, ctx, 0, 0, 0, 0)
    except RunAbort:
        return 0
    except RecursionError:
        raise ProgramFault(errno.EFAULT, "the call stack is too deep") from None
    finally:
        irq_work_run()
        if machine is not None:
            timing = machine.timing
            if timing.modeled:
                timing.charge(rs.cpu, "bpf_insn", rs.count)
