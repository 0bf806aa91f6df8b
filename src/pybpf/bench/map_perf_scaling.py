"""``python -m pybpf.bench.map_perf_scaling`` (``pybpf bench map-perf-scaling``): emulated
map-perf on 1 host CPU and on N, beside what the host gives N processes and the kernel.

Rules this module keeps:
- The emulated runs are ``pybpf map-perf TESTS P 0 MAX_CNT --processes --modeled-time off``
  (emulated_run.py: each CPU's task a forked process pinned to a host CPU, the maps in a
  shared segment), P = 1 and P = N; a test's figure is its aggregate: all
  processes' events over the wall time from the test's common start to the last end.
- Beside them, in the same rounds: the reference, a pure-Python loop (dict lookups) in 1 and
  in N forked processes, the most the host gives N processes of Python; and, where bpf(2)
  is allowed, the kernel's map-perf with 1 and N processes (its aggregate: the processes'
  rates summed, as they run at once), so each emulated process's rate has the kernel's
  beside it, and the emulated N / 1 the kernel's. With ``--jit-beside``, the same run of 1
  process on the JIT too, and the engine's rate over the JIT's. Beside each test's N / 1,
  what its N processes waited for on the segment (pybpf.shared.waits: locks another
  process held, lookups read again as another wrote), per 1000 events over the rounds.
- Rounds interleave every run; each figure is the median of ``--rounds`` with its range,
  each ratio a ratio of medians with the larger spread of the two as its noise (and the
  ratio of the best rounds beside it: on a shared host the best round is the one least
  disturbed). A test's
  N / 1 is also given as a share of the reference's N / 1 ("of the reference's"): on a host
  whose other CPUs are busy with other work, Python itself gains less than N.
- ``--simulate N,...``: the N / 1 on more CPUs than the host has, by simulation of the
  processes' contention on the segment's locks (shm_contention.py: its rules say what is
  replayed and what is left out), from one more run of the N processes in each round with
  their lock holds recorded and the time a cache line takes to move between two host CPUs,
  both measured in that round (what one recording gives varies: a common LRU's lists'
  lock was held a median 8 us in some runs and 22 us in others; the rounds' median and
  range show it); beside the measured N / 1, the simulation's own N / 1, which checks it
  against the host.
- Nothing here is used by the tests to time anything.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from dataclasses import dataclass, field
from types import ModuleType

from .. import shared
from ..backends import bpf_allowed
from ..commands import CommandError, run_standalone
from ..emulated import ENGINES, native_missing
from .args import MAX_EMULATED_CPUS, int_arg
from .map_perf import ALL_TESTS_MASK, TESTS, Config, Test, run
from .report import format_table, spread

ABOUT = ("emulated map-perf with its CPUs as processes (--processes) on 1 host CPU and on N: "
         "each test's aggregate rate and N/1, beside a Python loop in 1 and N processes and "
         "the kernel's map-perf")
REFERENCE_OPS = 2_000_000  # dict lookups per process and reference run


def reference_rate(procs: int) -> float:
    """Dict lookups per second of wall time by ``procs`` forked processes at once, each
    pinned to a host CPU of its own (round robin)."""
    host_cpus = sorted(os.sched_getaffinity(0))
    start = time.monotonic_ns()
    pids = []
    for k in range(procs):
        pid = os.fork()
        if pid == 0:
            os.sched_setaffinity(0, {host_cpus[k % len(host_cpus)]})
            table = {i: i for i in range(512)}
            total = 0
            for i in range(REFERENCE_OPS):
                total += table[i & 511]
            os._exit(0 if total >= 0 else 1)
        pids.append(pid)
    failed = [pid for pid in pids if os.waitpid(pid, 0)[1]]
    if failed:
        raise CommandError(f"the reference's processes {failed} failed")
    return procs * REFERENCE_OPS * 1e9 / (time.monotonic_ns() - start)


def emulated_config(tests: list[Test], procs: int, max_cnt: int, engine: str | None
                    ) -> Config:
    """The emulated map-perf run of ``tests`` with ``procs`` processes."""
    return Config(test_flags=sum(t.bit for t in tests), num_procs=procs, max_cnt=max_cnt,
                  backend="emulated", json=True, progress=False, cpus=procs,
                  modeled_time=False, processes=True, engine=engine)


def map_perf_rates(tests: list[Test], procs: int, max_cnt: int, backend: str,
                   engine: str | None = None, waits: dict | None = None) -> dict[str, float]:
    """Each test's aggregate rate of one map-perf run with ``procs`` processes (the emulated
    programs on ``engine``); an emulated run adds what its processes waited for, per test,
    to ``waits`` ({test: [locks, reads, events]})."""
    cfg = emulated_config(tests, procs, max_cnt, engine) if backend == "emulated" else Config(
        test_flags=sum(t.bit for t in tests), num_procs=procs, max_cnt=max_cnt,
        backend=backend, json=True, progress=False)
    result = run(cfg)
    if backend == "emulated":
        for name, (locks, reads) in result.waits.items():
            if waits is not None:
                total = waits.setdefault(name, [0, 0, 0])
                total[0] += locks
                total[1] += reads
                total[2] += max_cnt * procs
        return dict(result.aggregate_rates)
    return {name: sum(r.rate for r in rows) for name, rows in result.by_test().items()}


def _fmt(values: list[float]) -> str:
    return f"{statistics.median(values):,.0f} [{min(values):,.0f}-{max(values):,.0f}]"


def scaling(mine: list[float], ref: list[float]) -> float:
    return statistics.median(mine) / statistics.median(ref)


def _best_ratio(mine: list[float], ref: list[float]) -> str:
    return f"{max(mine) / max(ref):.2f}x"


def _ratio(mine: list[float], ref: list[float]) -> str:
    return f"{scaling(mine, ref):.2f}x ±{100 * max(spread(mine), spread(ref)):.0f}%"


@dataclass
class Simulations:
    """``--simulate``'s rounds: each test's simulated N / 1 (shm_contention.Simulated) for
    the measured N then each of the counts, a list per round; the line moves measured; the
    holds recorded and those written over before them."""

    by_test: dict[str, list[list]] = field(default_factory=dict)
    handoffs: list[float] = field(default_factory=list)
    holds: int = 0
    lost: int = 0


def simulation_module() -> ModuleType:
    """bench/shm_contention.py, which needs SimPy: a CommandError saying how to install it
    where it is missing."""
    try:
        from . import shm_contention
    except ImportError as exc:
        raise CommandError(f"--simulate needs SimPy ({exc}): pip install 'pybpf[simulate]'"
                           ) from None
    return shm_contention


def simulate_round(tests: list[Test], procs: int, max_cnt: int, engine: str,
                   counts: list[int], window: int, into: Simulations) -> None:
    """One round of ``--simulate`` into ``into``: the time a line takes to move between
    two of the host's CPUs (median of 3), and each test's simulated N / 1 for ``procs`` and
    each of ``counts``, replaying the lock holds of a recorded run of ``procs`` processes
    (the last ``window`` holds of each process's test)."""
    shm_contention = simulation_module()
    host_cpus = sorted(os.sched_getaffinity(0))
    handoff = statistics.median(shared.handoff_ns(host_cpus[0], host_cpus[1])
                                for _ in range(3))
    into.handoffs.append(handoff)
    cfg = emulated_config(tests, procs, max_cnt, engine)
    cfg.lock_trace = window
    recorded = run(cfg).lock_traces
    for t in tests:
        traces = recorded.get(t.name, [])
        into.holds += sum(len(trace.holds) for trace in traces)
        into.lost += sum(trace.lost for trace in traces)
        timelines = [shm_contention.timeline(trace.holds, trace.read_ns) for trace in traces]
        into.by_test.setdefault(t.name, []).append(
            [shm_contention.simulate(timelines, n, handoff) for n in (procs, *counts)])


def counts_arg(text: str) -> list[int]:
    """``--simulate``'s N,...: process counts of 2 to MAX_EMULATED_CPUS."""
    parse = int_arg("--simulate", 2, MAX_EMULATED_CPUS)
    parts = [part for part in text.split(",") if part.strip()]
    if not parts:
        raise argparse.ArgumentTypeError("--simulate takes process counts, such as 4,8,16")
    return sorted({parse(part) for part in parts})


def configure_parser(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.description = ABOUT
    parser.add_argument("--tests", type=int_arg("--tests", 1, ALL_TESTS_MASK),
                        default=ALL_TESTS_MASK,
                        help=f"TEST_FLAGS of the tests to run (default {ALL_TESTS_MASK}: "
                             "every test)")
    parser.add_argument("--procs", type=int_arg("--procs", 2, 1024), default=None,
                        help="N, the processes of the scaled run (default: the host CPUs this "
                             "run may use)")
    parser.add_argument("--max-cnt", dest="max_cnt", type=int_arg("--max-cnt", 1),
                        default=30000, help="events per test and process (default 30000)")
    parser.add_argument("--rounds", type=int_arg("--rounds", 1, 100), default=5,
                        help="interleaved rounds (default 5)")
    parser.add_argument("--engine", choices=ENGINES, default=None,
                        help="what runs the emulated programs (default: native where "
                             "llvmlite is installed, else the JIT)")
    parser.add_argument("--backend-kernel", dest="kernel", choices=("auto", "on", "off"),
                        default="auto", help="the kernel's map-perf beside (auto: where "
                                             "bpf(2) is allowed)")
    parser.add_argument("--jit-beside", dest="jit_beside", action="store_true",
                        help="also run 1 process on the JIT in each round, and give the "
                             "engine's rate over the JIT's")
    parser.add_argument("--simulate", type=counts_arg, default=None, metavar="N,...",
                        help="also each test's N / 1 for these process counts by simulation "
                             "of their contention on the segment's locks (needs SimPy and 2 "
                             "host CPUs), beside the simulation's N / 1 for the measured N")
    parser.add_argument("--window", type=int_arg("--window", 100, 10_000_000), default=20000,
                        help="--simulate: the lock holds recorded of each process's test, "
                             "its last ones, which each simulated process replays (default "
                             "20000)")
    return parser


def run_from_args(args: argparse.Namespace) -> int:
    tests = [t for t in Test if args.tests & t.bit]
    host_cpus = len(os.sched_getaffinity(0))
    procs = args.procs or host_cpus
    if procs < 2:
        raise CommandError("this run may use 1 host CPU: give --procs N (N >= 2) to run N "
                           "processes on it anyway, or run where it may use more")
    kernel = args.kernel == "on" or (args.kernel == "auto" and bpf_allowed())
    engine = args.engine or ("jit" if native_missing() else "native")
    if engine == "native" and native_missing():
        raise CommandError(f"--engine native: {native_missing()}")
    emulated: dict[int, list[dict[str, float]]] = {1: [], procs: []}
    kernel_rates: dict[int, list[dict[str, float]]] = {1: [], procs: []}
    reference: dict[int, list[float]] = {1: [], procs: []}
    if args.simulate:
        if host_cpus < 2:
            raise CommandError("--simulate measures a cache line's move between two host "
                               "CPUs: run where this run may use 2 or more")
        simulation_module()  # before the rounds: a missing SimPy is said at once
    sims = Simulations()
    jit = args.jit_beside and engine != "jit"
    jit_rates: list[dict[str, float]] = []
    waits: dict[str, list[int]] = {}  # the N-process runs': [locks, reads, events]
    for _ in range(args.rounds):
        for n in (1, procs):
            emulated[n].append(map_perf_rates(tests, n, args.max_cnt, "emulated", engine,
                                              waits if n > 1 else None))
            reference[n].append(reference_rate(n))
            if kernel:
                kernel_rates[n].append(map_perf_rates(tests, n, args.max_cnt, "kernel"))
        if jit:
            jit_rates.append(map_perf_rates(tests, 1, args.max_cnt, "emulated", "jit"))
        if args.simulate:
            simulate_round(tests, procs, args.max_cnt, engine, args.simulate, args.window,
                           sims)
    print(f"emulated map-perf --processes --modeled-time off --engine {engine}, "
          f"{args.rounds} interleaved rounds, {args.max_cnt} events per test and process; "
          f"the host lets this run use {host_cpus} CPUs; median [range], events (lookups for "
          "the lookup tests) per second of wall time of all processes together")
    rows = []
    for t in tests:
        one = [r[t.name] for r in emulated[1]]
        many = [r[t.name] for r in emulated[procs]]
        locks, reads, events = waits.get(t.name, (0, 0, 0))
        row = [f"{t.value}:{TESTS[t].label}", _fmt(one), _fmt(many), _ratio(many, one),
               _best_ratio(many, one),
               f"{scaling(many, one) / scaling(reference[procs], reference[1]):.2f}",
               f"{1000 * locks / max(events, 1):.2f} / {1000 * reads / max(events, 1):.2f}"]
        if kernel:
            k_one = [r[t.name] for r in kernel_rates[1]]
            k_many = [r[t.name] for r in kernel_rates[procs]]
            row += [_fmt(k_one), _ratio(k_one, one), _ratio(k_many, k_one)]
        if jit:
            jit_one = [r[t.name] for r in jit_rates]
            row += [_fmt(jit_one), _ratio(one, jit_one)]
        rows.append(row)
    header = ["test", "1 process", f"{procs} processes", f"{procs} / 1",
              f"{procs} / 1 (bests)", "of the reference's",
              f"waits per 1000 events ({procs} processes): locks / reads"]
    if kernel:
        header += ["kernel, 1 process", "kernel / emulated (1 process)",
                   f"kernel {procs} / 1"]
    if jit:
        header += ["JIT, 1 process", f"{engine} / JIT"]
    rows.append(["reference: dict lookups, a process each", _fmt(reference[1]),
                 _fmt(reference[procs]), _ratio(reference[procs], reference[1]),
                 _best_ratio(reference[procs], reference[1]), "1.00", ""]
                + (["", "", ""] if kernel else []) + (["", ""] if jit else []))
    print(format_table(header, rows))
    if args.simulate:
        print_simulated(tests, procs, emulated, args.simulate, args.window, sims)
    return 0


def print_simulated(tests: list[Test], procs: int, emulated: dict[int, list[dict]],
                    counts: list[int], window: int, sims: Simulations) -> None:
    """``--simulate``'s table: each test's measured N / 1 beside the simulation's, then the
    simulated N / 1 for each of ``counts``: medians [range] over the rounds, and the
    takes per process that waited for another's hold / moved the lock's line (medians)."""
    host_cpus = sorted(os.sched_getaffinity(0))
    print(f"\nsimulated: N processes replaying the lock holds of {procs} (bench/"
          f"shm_contention.py), recorded in each round: {sims.holds} holds in all (the last "
          f"{window} of each test in each process; {sims.lost} before them not); a cache "
          f"line's move between host CPUs {host_cpus[0]} and {host_cpus[1]} "
          f"{_fmt_ns(sims.handoffs)}; N / 1 median [range], (takes per process that waited "
          "for another's hold / moved the lock's line)")
    header = ["test", f"{procs} / 1 measured", f"{procs} / 1 simulated",
              *(f"{n} / 1 simulated" for n in counts)]
    rows = []
    for t in tests:
        one = [r[t.name] for r in emulated[1]]
        many = [r[t.name] for r in emulated[procs]]
        rounds = sims.by_test[t.name]
        cells = []
        for i in range(1 + len(counts)):
            got = [r[i] for r in rounds]
            speedups = [s.speedup for s in got]
            cells.append(f"{statistics.median(speedups):.2f}x [{min(speedups):.2f}-"
                         f"{max(speedups):.2f}] ({statistics.median(s.waits for s in got):.0f}"
                         f" / {statistics.median(s.moves for s in got):.0f})")
        rows.append([f"{t.value}:{TESTS[t].label}", _ratio(many, one), *cells])
    print(format_table(header, rows))


def _fmt_ns(values: list[float]) -> str:
    return f"{statistics.median(values):.1f} ns [{min(values):.1f}-{max(values):.1f}]"


def main(argv: list[str] | None = None) -> int:
    return run_standalone("pybpf bench map-perf-scaling", configure_parser, run_from_args,
                          argv)


if __name__ == "__main__":
    raise SystemExit(main())
