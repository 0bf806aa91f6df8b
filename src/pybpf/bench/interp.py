"""``python -m pybpf.bench.interp`` (``pybpf bench interp``): eBPF execution speed.

Rules this module keeps:
- Loop-heavy programs (ALU and stack work; a map lookup and an atomic add per iteration) run
  on the emulated backend's engines, the reference interpreter, the JIT to Python and (with
  llvmlite) the native tier, and, when bpf(2) works, on the kernel through
  BPF_PROG_TEST_RUN: the same bytes everywhere.
- Instructions per run are counted by the emulator (every executed instruction); every rate
  uses that count.
- ns/run is host time: for the emulator, perf_counter_ns around its test run divided by
  ``repeat`` (the duration it reports is the timing model's modeled clock, not host time);
  for the kernel, the ``duration`` it reports. Programs are compiled at load, outside the
  timing; nothing is estimated or scaled.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import asdict, dataclass

from ..asm import (
    add64,
    assemble,
    atomic_add64,
    call,
    encode,
    exit_,
    jeq,
    jlt,
    label,
    ld_map_fd,
    lddw,
    ldxdw,
    mov64,
    rsh64,
    st,
    stxdw,
    xor64,
)
from ..asm.opcodes import FP, R0, R1, R2, R3, R4, R6, R7
from ..commands import run_standalone
from ..uapi import MapType, ProgType
from .args import S32_MAX, U32_MAX, int_arg
from .report import Progress, dump_json, format_table

PACKET = bytes(64)
REPEAT_WHY = "BPF_PROG_TEST_RUN's repeat is a u32"


def alu_loop(iterations: int) -> list:
    """Hashing-style ALU and stack work: 9 instructions per iteration."""
    return [
        mov64(R0, 0), mov64(R1, 0), lddw(R2, 0x9E37_79B9_7F4A_7C15),
        label("loop"),
        add64(R0, R1), xor64(R0, R2), mov64(R3, R0), rsh64(R3, 7), add64(R0, R3),
        stxdw(FP, -8, R0), ldxdw(R4, FP, -8), add64(R1, 1),
        jlt(R1, iterations, "loop"),
        exit_(),
    ]


def map_loop(iterations: int) -> list:
    """A map lookup and an atomic add per iteration (helper calls in the hot loop)."""
    return [
        mov64(R6, 0), mov64(R7, 0), st(4, FP, -4, 0),
        label("loop"),
        ld_map_fd(R1, "counters"), mov64(R2, FP), add64(R2, -4), call("map_lookup_elem"),
        jeq(R0, 0, "next"), mov64(R1, 1), atomic_add64(R0, 0, R1), add64(R7, 1),
        label("next"), add64(R6, 1), jlt(R6, iterations, "loop"),
        mov64(R0, R7), exit_(),
    ]


def hash_loop(iterations: int) -> list:
    """map-loop on a hash map holding the key, without the count of lookups that found it
    (so the verifiers' two ways through the NULL check meet and are pruned)."""
    return [
        mov64(R6, 0), st(4, FP, -4, 0),
        label("loop"),
        ld_map_fd(R1, "counters"), mov64(R2, FP), add64(R2, -4), call("map_lookup_elem"),
        jeq(R0, 0, "next"), mov64(R1, 1), atomic_add64(R0, 0, R1),
        label("next"), mov64(R0, 0), mov64(R1, 0), add64(R6, 1), jlt(R6, iterations, "loop"),
        mov64(R0, R6), exit_(),
    ]


def helper_loop(iterations: int) -> list:
    """A call of bpf_get_smp_processor_id per iteration: what a helper call costs an engine
    (on the native tier, the way into Python and back)."""
    return [
        mov64(R6, 0),
        label("loop"), call("get_smp_processor_id"), add64(R6, 1), jlt(R6, iterations, "loop"),
        mov64(R0, R6), exit_(),
    ]


PROGRAMS = {"alu-loop": alu_loop, "map-loop": map_loop, "hash-loop": hash_loop,
            "helper-loop": helper_loop}


@dataclass
class Row:
    program: str
    engine: str
    insns_per_run: int
    runs: int
    ns_per_run: int
    insns_per_sec: float


def _load(system, program: str, iterations: int):
    """Load ``program`` on ``system``; (prog fd, the map fds to close)."""
    items = PROGRAMS[program](iterations)
    maps = {}
    if program == "map-loop":
        maps["counters"] = system.map_create(MapType.ARRAY, 4, 8, 1)
    elif program == "hash-loop":
        maps["counters"] = system.map_create(MapType.HASH, 4, 8, 1)
        system.map_update_elem(maps["counters"], bytes(4), bytes(8))
    insns = encode(assemble(items).with_map_fds(lambda name: maps[name]))
    return system.prog_load(ProgType.SCHED_CLS, insns, prog_name=program.replace("-", "_")
                            .encode()), list(maps.values())


def count_insns(program: str, iterations: int) -> int:
    """Instructions one run executes, as the emulator counts them (both engines agree)."""
    from ..backends import system as make_system

    emulated = make_system("emulated")
    emulated.insn_budget = 1 << 62
    fd, map_fds = _load(emulated, program, iterations)
    rs = emulated.prog_from_fd(fd).run(bytearray(192), engine="jit")
    for obj in (fd, *map_fds):
        emulated.close(obj)
    return rs.count


def measure(system, engine: str, program: str, iterations: int, repeat: int) -> Row:
    if engine != "kernel":
        system.bpf_engine = engine  # before the load, which compiles for the engine
        system.insn_budget = 1 << 62
    fd, map_fds = _load(system, program, iterations)
    try:
        start = time.perf_counter_ns()
        result = system.prog_test_run(fd, PACKET, repeat=repeat)
        host_ns = (time.perf_counter_ns() - start) // repeat
    finally:
        for obj in (fd, *map_fds):
            system.close(obj)
    insns = count_insns(program, iterations)
    ns = result.duration if engine == "kernel" else host_ns
    return Row(program, engine, insns, repeat, ns, insns * 1e9 / max(ns, 1))


ABOUT = ("eBPF execution speed: the emulator's interpreter, JIT and native tier beside the "
         "kernel's BPF_PROG_TEST_RUN on loop-heavy programs")


def configure_parser(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.description = ABOUT
    parser.add_argument("--iterations", default=20_000,
                        type=int_arg("--iterations", 1, S32_MAX, "the loop bound is an imm32"),
                        help="loop iterations per run (the kernel's verifier walks every "
                             "iteration: keep it under ~100k; default 20000)")
    parser.add_argument("--programs", nargs="+", choices=sorted(PROGRAMS),
                        default=sorted(PROGRAMS), help="which programs (default: all)")
    parser.add_argument("--interp-repeat", type=int_arg("--interp-repeat", 1, U32_MAX, REPEAT_WHY),
                        default=1, help="runs on the reference interpreter (default 1)")
    parser.add_argument("--jit-repeat", type=int_arg("--jit-repeat", 1, U32_MAX, REPEAT_WHY),
                        default=10, help="runs on the JIT (default 10)")
    parser.add_argument("--native-repeat", default=10,
                        type=int_arg("--native-repeat", 1, U32_MAX, REPEAT_WHY),
                        help="runs on the native tier (default 10; skipped without llvmlite)")
    parser.add_argument("--kernel-repeat", type=int_arg("--kernel-repeat", 1, U32_MAX, REPEAT_WHY),
                        default=1000, help="BPF_PROG_TEST_RUN repeat on the kernel (default 1000)")
    parser.add_argument("--modeled-time", choices=("on", "off"), default=None,
                        help="the emulated machine's modeled time (default: on unless "
                             "PYBPF_NO_MODELED_TIME is set); without it nothing is charged, "
                             "and the native tier also looks hash maps up without Python")
    parser.add_argument("--no-kernel", action="store_true", help="skip the kernel")
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
    parser.add_argument("--no-progress", dest="progress", action="store_false",
                        help="no progress lines on stderr")
    return parser


def run_from_args(ns: argparse.Namespace) -> int:
    from ..backends import bpf_allowed
    from ..backends import system as make_system
    from ..emulated import native_missing

    kernel = None
    kernel_note = "skipped (--no-kernel)"
    if not ns.no_kernel:
        if bpf_allowed():
            kernel = make_system("kernel")
        else:
            kernel_note = "bpf(2) is not allowed here: kernel figures skipped"
    emulated = make_system("emulated", modeled_time=None if ns.modeled_time is None
                           else ns.modeled_time == "on")
    modeled = "on" if emulated.machine.modeled_time else "off"
    refused: dict[str, str] = {}  # program -> why the kernel refused it
    if kernel is not None:
        # The kernel's verifier walks every iteration: let it refuse a program now (E2BIG past
        # about a million instructions) rather than after the emulated runs.
        for program in ns.programs:
            try:
                fd, map_fds = _load(kernel, program, ns.iterations)
            except OSError as exc:
                refused[program] = (f"the kernel refused {program} at {ns.iterations} "
                                    f"iterations ({exc}); fewer --iterations make it load")
                continue
            for obj in (fd, *map_fds):
                kernel.close(obj)
    native_note = native_missing()
    plan = [(program, engine, repeat) for program in ns.programs
            for engine, repeat in (("interp", ns.interp_repeat), ("jit", ns.jit_repeat),
                                   ("native", ns.native_repeat), ("kernel", ns.kernel_repeat))
            if (engine != "kernel" or (kernel is not None and program not in refused))
            and (engine != "native" or native_note is None)]
    rows = []
    with Progress("bench interp runs", len(plan), enabled=ns.progress) as progress:
        for program, engine, repeat in plan:
            progress.update(progress.done, f"{program} on {engine}")
            system = kernel if engine == "kernel" else emulated
            rows.append(measure(system, engine, program, ns.iterations, repeat))
            progress.advance(note=f"{program} on {engine}")
    if ns.json:
        dump_json({"iterations": ns.iterations, "modeled_time": modeled,
                   "kernel_refused": refused,
                   "kernel": kernel_note if kernel is None
                   else "measured", "native": native_note or "measured",
                   "rows": [asdict(r) for r in rows]})
        return 0
    print(f"eBPF execution speed, {ns.iterations} loop iterations per run, modeled time "
          f"{modeled} (instructions counted by the emulator; ns/run is host time: the "
          "emulator's test run timed around it, the kernel's as it reports)")
    names = {"interp": "emulated: reference interpreter", "jit": "emulated: JIT to Python",
             "native": "emulated: native (LLVM)", "kernel": "kernel: BPF_PROG_TEST_RUN"}
    print(format_table(
        ["program", "engine", "insns/run", "runs", "ns/run", "M insns/s"],
        [[r.program, names[r.engine], r.insns_per_run, r.runs, r.ns_per_run,
          round(r.insns_per_sec / 1e6, 2)] for r in rows]))
    by_key = {(r.program, r.engine): r for r in rows}
    for program in ns.programs:
        jit, interp = by_key[(program, "jit")], by_key[(program, "interp")]
        line = f"{program}: JIT {jit.insns_per_sec / interp.insns_per_sec:.1f}x the interpreter"
        if (program, "native") in by_key:
            native_rate = by_key[(program, "native")].insns_per_sec
            line += f"; native {native_rate / jit.insns_per_sec:.1f}x the JIT"
        if (program, "kernel") in by_key:
            kernel_rate = by_key[(program, "kernel")].insns_per_sec
            line += f"; kernel {kernel_rate / jit.insns_per_sec:.0f}x the JIT"
        print(line)
    if kernel is None:
        print(kernel_note)
    for note in refused.values():
        print(note)
    if native_note is not None:
        print(f"native tier skipped: {native_note}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m pybpf.bench.interp`` (README; a test calls it): ``pybpf bench interp``."""
    return run_standalone("pybpf bench interp", configure_parser, run_from_args, argv)


if __name__ == "__main__":
    sys.exit(main())
