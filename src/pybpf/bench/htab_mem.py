"""``pybpf bench htab-mem``: the kernel selftests' htab-mem benchmark, on both backends.

Rules this module keeps (tools/testing/selftests/bpf/benchs/bench_htab_mem.c and
progs/htab_mem_bench.c; perf-tests-and-suites.md section 2.2):
- One HASH map, 4-byte keys, ``--value-size`` values (default 8),
  max_entries = max(8192, 64 * CPUs), BPF_F_NO_PREALLOC unless preallocated.
- Each program run does OP_BATCH = 64 map operations on keys cpu, cpu + step, ... (step = the
  producer count), so pinned producers work on disjoint keys. Use cases: ``overwrite`` (64
  updates, op += 1), ``batch_add_batch_del`` (64 updates then 64 deletes, op += 2),
  ``add_del_on_diff_cpu`` (producer pairs: the even one adds 64 keys BPF_NOEXIST on getpgid,
  the odd one deletes them on getppid, taking turns; op += 1 each).
- Producers call getpgid (getppid for the deleting half of a pair) in a loop, pinned to CPU
  i. Kernel: each second the op count is sampled: ``per-prod-op`` is op-loops per second per
  producer (k/s); memory is the map's cgroup charge. Emulated: the rates are modeled, as
  map-perf's are: each producer is a task on its emulated CPU under the virtual-time
  scheduler (greenlets of one host thread) and makes ``--loops`` trigger syscalls (the first
  quarter a warm-up); each ``Iter`` is a tenth of the rest, its per-prod-op the op-loops over
  each producer's modeled time, memory the allocator's live elements, the same on every run.
  A pair of add_del_on_diff_cpu is one task taking turns on its two CPUs: each side's pipe
  write wakes the other (a syscall each side and the profile's wake-up latency). Output lines
  follow the selftest: ``Iter``, then ``Summary``.
- Flavours: ``prealloc``, ``bpf_ma`` (non-preallocated: bpf_mem_alloc since 6.1) and, on the
  emulated backend only, ``call_rcu`` (the pre-6.1 design: one call_rcu per freed element,
  nothing reused). The emulated table adds the allocator counters that explain the speed:
  call_rcu callbacks against reused elements.
- The programs use a bounded sequence (64 straight-line operations, as ``bpf_loop`` would run
  them) and ARRAY maps for the shared op counter and the zero value instead of .bss.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import os
import signal
import statistics
import struct
import sys
import time
from collections import deque
from dataclasses import asdict, dataclass, field

from ..asm import (
    add32,
    add64,
    assemble,
    atomic_add64,
    call,
    encode,
    exit_,
    jeq,
    label,
    ld_map_fd,
    mov64,
    rsh32,
    stw,
    stxw,
)
from ..asm.opcodes import FP, R0, R1, R2, R3, R4, R6, R7, R8
from ..backends import default_backend
from ..commands import UsageError
from ..uapi import BPF_NOEXIST, MapFlags, MapType, ProgType
from . import report
from .args import (
    MAX_EMULATED_CPUS,
    MAX_SECONDS,
    emulated_machine,
    int_arg,
    plot_arg,
    profile_arg,
    seconds_arg,
)
from .common import MIB, MemCgroup, read_fdinfo, sys_enter_record

OP_BATCH = 64
PRODUCER_PID_BASE = 1000  # the emulated producers' pids
EMULATED_LOOPS = 400  # per producer: a tenth of a second of modeled time at 4k op-loops/s
SAMPLES = 10  # Iter lines of an emulated run
USE_CASES = ("overwrite", "batch_add_batch_del", "add_del_on_diff_cpu")
KERNEL_FLAVOURS = ("prealloc", "bpf_ma")
EMULATED_FLAVOURS = ("prealloc", "bpf_ma", "call_rcu")


# -- programs ------------------------------------------------------------------------------

def _ptr(reg, off: int) -> list:
    return [mov64(reg, FP), add64(reg, off)]


def _ops(kind: str, step: int, flags: int = 0) -> list:
    """64 updates (value in R7) or deletes of keys R6, R6 + step, ... (u32 arithmetic)."""
    items: list = []
    for _ in range(OP_BATCH):
        items += [stxw(FP, -4, R6), ld_map_fd(R1, "htab"), *_ptr(R2, -4)]
        if kind == "update":
            items += [mov64(R3, R7), mov64(R4, flags), call("map_update_elem")]
        else:
            items += [call("map_delete_elem")]
        items.append(add32(R6, step))
    return items


def _lookup_zero_value() -> list:
    """R7 = &zero[0], the zeroed value every update writes."""
    return [stw(FP, -8, 0), ld_map_fd(R1, "zero"), *_ptr(R2, -8), call("map_lookup_elem"),
            jeq(R0, 0, "out"), mov64(R7, R0)]


def _count(n: int) -> list:
    """__sync_fetch_and_add(&op_cnt, n)."""
    return [stw(FP, -8, 0), ld_map_fd(R1, "op_cnt"), *_ptr(R2, -8), call("map_lookup_elem"),
            jeq(R0, 0, "out"), mov64(R1, n), atomic_add64(R0, 0, R1),
            label("out"), mov64(R0, 0), exit_()]


def htab_mem_program(name: str, producers: int) -> list:
    """The items of overwrite / batch_add_batch_del / add_only / del_only."""
    if name in ("add_only", "del_only"):
        start = [call("get_smp_processor_id"), mov64(R6, R0), rsh32(R6, 1)]
        step = producers // 2
    else:
        start = [call("get_smp_processor_id"), mov64(R6, R0), mov64(R8, R0)]
        step = producers
    if name == "overwrite":
        return start + _lookup_zero_value() + _ops("update", step) + _count(1)
    if name == "batch_add_batch_del":
        return (start + _lookup_zero_value() + _ops("update", step) + [mov64(R6, R8)]
                + _ops("delete", step) + _count(2))
    if name == "add_only":
        return start + _lookup_zero_value() + _ops("update", step, BPF_NOEXIST) + _count(1)
    if name == "del_only":
        return start + _ops("delete", step) + _count(1)
    raise ValueError(f"no htab-mem program {name!r}")


# Programs per use case, and the syscall (tracepoint) each runs on.
USE_CASE_PROGS = {
    "overwrite": (("overwrite", "getpgid"),),
    "batch_add_batch_del": (("batch_add_batch_del", "getpgid"),),
    "add_del_on_diff_cpu": (("add_only", "getpgid"), ("del_only", "getppid")),
}


# -- configuration -------------------------------------------------------------------------

@dataclass
class Config:
    use_cases: list[str] = field(default_factory=lambda: list(USE_CASES))
    flavours: list[str] | None = None  # None: all the backend can run
    producers: int = 0  # 0: the CPUs (even, for add_del_on_diff_cpu)
    value_size: int = 8
    duration: float = 2.0  # kernel: measured seconds
    warmup: float = 1.0  # kernel: warm-up seconds
    loops: int = EMULATED_LOOPS  # emulated: trigger syscalls per producer (modeled time)
    backend: str | None = None
    cpus: int | None = None
    nodes: int | None = None
    profile: str | None = None  # emulated: the machine profile of the modeled time
    json: bool = False
    plot: str | None = None
    progress: bool = True


def configure_parser(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.description = ("Hash map update throughput and memory: preallocated against "
                          "non-preallocated (bpf_mem_alloc), and on the emulated backend "
                          "the pre-6.1 call_rcu design (the selftests' htab-mem).")
    parser.add_argument("--use-case", dest="use_case", default="all",
                        choices=(*USE_CASES, "all"), help="default: all three")
    parser.add_argument("--flavour", dest="flavours", action="append",
                        choices=EMULATED_FLAVOURS,
                        help="prealloc, bpf_ma, call_rcu (emulated only); repeatable; "
                             "default: all the backend has")
    parser.add_argument("--preallocated", action="store_true",
                        help="only the preallocated map (the selftest's flag)")
    parser.add_argument("-p", "--producers", default=0,
                        type=int_arg("--producers", 1, MAX_EMULATED_CPUS, "one per CPU"),
                        help="producer processes/threads, one per CPU (default: CPUs)")
    parser.add_argument("--value-size", dest="value_size", type=_value_size, default=8)
    parser.add_argument("-d", "--duration", type=seconds_arg("--duration", zero_ok=False),
                        default=2.0, help="kernel: measured seconds per run (default 2, at "
                                          f"most {MAX_SECONDS:g})")
    parser.add_argument("-w", "--warmup", type=seconds_arg("--warmup", zero_ok=True),
                        default=1.0, help="kernel: warm-up seconds per run (default 1)")
    parser.add_argument("--loops", type=int_arg("--loops", 8, 10_000_000, "trigger calls"),
                        default=EMULATED_LOOPS,
                        help="emulated: trigger syscalls per producer, in modeled time (the "
                             f"first quarter warms up; default {EMULATED_LOOPS})")
    parser.add_argument("--profile", type=profile_arg, default=None,
                        help="emulated: the machine profile whose costs the modeled time "
                             "uses (default: host)")
    parser.add_argument("--backend", choices=("kernel", "emulated"), default=None)
    parser.add_argument("--cpus", type=int_arg("--cpus", 1, MAX_EMULATED_CPUS,
                                               "one producer thread per CPU"), default=None)
    parser.add_argument("--nodes", type=int_arg("--nodes", 1, MAX_EMULATED_CPUS,
                                                "one CPU per node at least"), default=None)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--plot", metavar="FILE.png", type=plot_arg, default=None)
    parser.add_argument("--no-progress", dest="progress", action="store_false")
    return parser


def _value_size(text: str) -> int:
    value = int_arg("--value-size", 1)(text)
    if value > 4096:
        raise argparse.ArgumentTypeError(f"too big value size {value} (at most 4096)")
    return value


def config_from_args(ns: argparse.Namespace) -> Config:
    flavours = ["prealloc"] if ns.preallocated else ns.flavours
    return Config(use_cases=list(USE_CASES) if ns.use_case == "all" else [ns.use_case],
                  flavours=flavours, producers=ns.producers, value_size=ns.value_size,
                  duration=ns.duration, warmup=ns.warmup, loops=ns.loops,
                  backend=ns.backend, cpus=ns.cpus, nodes=ns.nodes, profile=ns.profile,
                  json=ns.json, plot=ns.plot, progress=ns.progress)


def run_from_args(ns: argparse.Namespace) -> int:
    """``pybpf bench htab-mem``: check what argparse cannot (``UsageError``), run, report."""
    if ns.preallocated and ns.flavours and set(ns.flavours) != {"prealloc"}:
        raise UsageError("--preallocated runs only the prealloc flavour; drop it to run "
                         f"--flavour {' '.join(ns.flavours)}")
    cfg = config_from_args(ns)
    if (cfg.cpus or cfg.nodes or cfg.profile) and cfg.backend == "kernel":
        raise UsageError("--cpus/--nodes/--profile declare an emulated machine; use "
                         "--backend emulated")
    if cfg.producers and cfg.producers % 2 and "add_del_on_diff_cpu" in cfg.use_cases:
        raise UsageError("add_del_on_diff_cpu needs an even number of producers")
    if cfg.cpus or cfg.nodes or cfg.profile:
        cfg.backend = "emulated"
    backend = cfg.backend or default_backend()
    if backend == "emulated":
        try:
            machine = emulated_machine(cfg.cpus, cfg.nodes, cfg.profile)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        ncpus = machine.num_possible_cpus
        if cfg.producers > ncpus:
            raise UsageError(f"-p {cfg.producers}: the emulated machine has {ncpus} CPUs and "
                             "each producer needs one of its own (use --cpus)")
    if backend == "kernel" and cfg.flavours and "call_rcu" in cfg.flavours:
        raise UsageError("the call_rcu flavour is the pre-6.1 design; only the emulated "
                         "backend has it (this kernel's non-preallocated maps use "
                         "bpf_mem_alloc)")
    cfg.backend = backend
    results = run(cfg)
    emit(results, cfg)
    return 0


# -- results -------------------------------------------------------------------------------

@dataclass
class Run:
    """One use case with one flavour."""

    use_case: str
    flavour: str
    producers: int
    samples: list[float] = field(default_factory=list)  # per-prod-op k/s, per second
    memory: list[float] = field(default_factory=list)  # MiB, per second
    peak_memory: float | None = None  # MiB
    memory_source: str = ""
    memlock: int | None = None  # kernel: the map's fdinfo memlock
    counters: dict = field(default_factory=dict)  # emulated: the allocator's counters
    profile: str | None = None  # emulated: the profile the rates are modeled on
    host_ops_k: float | None = None  # emulated: k op-loops per host CPU second per producer

    @property
    def ops_mean(self) -> float:
        return statistics.fmean(self.samples) if self.samples else 0.0

    @property
    def ops_stddev(self) -> float:
        return statistics.stdev(self.samples) if len(self.samples) > 1 else 0.0

    @property
    def mem_mean(self) -> float:
        return statistics.fmean(self.memory) if self.memory else 0.0

    @property
    def mem_stddev(self) -> float:
        return statistics.stdev(self.memory) if len(self.memory) > 1 else 0.0

    def summary(self) -> str:
        peak = f"{self.peak_memory:7.2f}MiB" if self.peak_memory is not None else "    n/a"
        return (f"Summary: per-prod-op {self.ops_mean:7.2f} \u00b1 {self.ops_stddev:7.2f}k/s, "
                f"memory usage {self.mem_mean:7.2f} \u00b1 {self.mem_stddev:7.2f}MiB, "
                f"peak memory usage {peak}")


def iter_line(i: int, drift_us: float, ops_k: float, mem_mib: float) -> str:
    return (f"Iter {i:3d} ({drift_us:7.3f}us): per-prod-op {ops_k:7.2f}k/s, "
            f"memory usage {mem_mib:7.2f}MiB")


def emit(runs: list[Run], cfg: Config) -> None:
    if cfg.json:
        report.dump_json({
            "benchmark": "htab_mem", "backend": cfg.backend,
            "emulated": cfg.backend == "emulated",
            "config": {k: v for k, v in asdict(cfg).items()
                       if k not in ("json", "plot", "progress")},
            "runs": [dict(asdict(r), ops_mean=r.ops_mean, ops_stddev=r.ops_stddev,
                          mem_mean=r.mem_mean, mem_stddev=r.mem_stddev) for r in runs],
        })
    else:
        print(comparison_table(runs, cfg.backend))
    if cfg.plot:
        series = {}
        for r in runs:
            series.setdefault(r.flavour, {})[USE_CASES.index(r.use_case)] = r.ops_mean * 1000
        title = (f"htab-mem ({cfg.backend}): per-producer op-loops/s; x = use case "
                 + ", ".join(f"{i}: {u}" for i, u in enumerate(USE_CASES)))
        report.plot_per_cpu(cfg.plot, title, series, unit="op-loops per sec per producer")


def comparison_table(runs: list[Run], backend: str) -> str:
    """The run script's summary, one row per use case and flavour, plus allocator counters."""
    header = ["use case", "flavour", "per-prod-op k/s", "mem MiB", "peak MiB", "memory from"]
    if backend == "emulated":
        header[2] = "modeled per-prod-op k/s"
        header.insert(3, "host k/s")
    rows = [[r.use_case, r.flavour, f"{r.ops_mean:.2f} \u00b1 {r.ops_stddev:.2f}",
             f"{r.mem_mean:.2f}", "n/a" if r.peak_memory is None else f"{r.peak_memory:.2f}",
             r.memory_source] for r in runs]
    if backend == "emulated":
        for row, r in zip(rows, runs, strict=True):
            row.insert(3, f"{r.host_ops_k:.3f}" if r.host_ops_k is not None else "-")
    text = report.format_table(header, rows)
    if backend == "emulated":
        keys = ["allocated", "freed", "reused", "call_rcu", "cache_hits", "refills",
                "free_bulk", "waiting_for_rcu", "freelist_pops", "freelist_pushes"]
        cheader = ["use case", "flavour", *keys]
        crows = [[r.use_case, r.flavour, *(r.counters.get(k, "-") for k in keys)] for r in runs]
        text += ("\n\nallocator counters (emulated; why one design is faster: call_rcu frees "
                 "each element through an RCU callback, bpf_mem_alloc reuses freed elements "
                 "from per-CPU caches; a preallocated map only moves elements on its "
                 "free list)\n" + report.format_table(cheader, crows))
        text += "".join("\n" + line for line in why_lines(runs))
        text += ("\n# emulated backend: op-loops/s are modeled (per second of each "
                 "producer's CPU clock on the machine's profile, the same on every run; "
                 "host: the interpreter's own op-loops per second of host CPU time); memory "
                 "is live element memory from the allocator")
    return text


def why_lines(runs: list[Run]) -> list[str]:
    """Per use case, the two non-preallocated designs side by side, in their own counters."""
    lines = []
    for use_case in USE_CASES:
        by = {r.flavour: r.counters for r in runs if r.use_case == use_case}
        old, new = by.get("call_rcu"), by.get("bpf_ma")
        if not old or not new:
            continue
        lines.append(
            f"{use_case}: call_rcu design: {old.get('call_rcu', 0)} RCU callbacks for "
            f"{old.get('free_calls', 0)} frees, {old.get('reused', 0)} reused, "
            f"{old.get('allocated', 0)} new elements; bpf_mem_alloc: "
            f"{new.get('call_rcu', 0)} RCU callbacks for {new.get('free_calls', 0)} frees, "
            f"{new.get('cache_hits', 0)} allocations from per-CPU caches, "
            f"{new.get('reused', 0)} reused from the RCU lists, "
            f"{new.get('allocated', 0)} new elements")
    return lines


# -- the run -------------------------------------------------------------------------------

def run(cfg: Config) -> list[Run]:
    from ..backends import system

    flavours = cfg.flavours or list(EMULATED_FLAVOURS if cfg.backend == "emulated"
                                    else KERNEL_FLAVOURS)
    runs = []
    total = len(cfg.use_cases) * len(flavours)
    # No heartbeat thread: the kernel producers are forked; measure() reports each second.
    progress = report.Progress("htab-mem runs", total, enabled=cfg.progress)
    for use_case in cfg.use_cases:
        for flavour in flavours:
            if cfg.backend == "emulated":
                kwargs = {"htab_mem": "call_rcu"} if flavour == "call_rcu" else {}
                kwargs.update({k: v for k, v in (("cpus", cfg.cpus), ("nodes", cfg.nodes),
                                                 ("profile", cfg.profile)) if v})
                bench = EmulatedBench(system("emulated", **kwargs), cfg, use_case, flavour,
                                      progress=progress)
            else:
                bench = KernelBench(system("kernel"), cfg, use_case, flavour,
                                    progress=progress)
            if not cfg.json:
                print(f"== {use_case} / {flavour} ({cfg.backend}) ==", flush=True)
            runs.append(bench.run())
            progress.advance(note=f"{use_case}/{flavour}")
    progress.finish()
    return runs


class Bench:
    """Maps and programs shared by both backends (all through the System interface)."""

    def __init__(self, sys_, cfg: Config, use_case: str, flavour: str, *,
                 progress: report.Progress | None = None) -> None:
        self.sys = sys_
        self.cfg = cfg
        self.progress = progress or report.Progress("htab-mem", 1, enabled=False)
        self.use_case = use_case
        self.flavour = flavour
        ncpus = sys_.num_possible_cpus
        producers = cfg.producers or ncpus
        if use_case == "add_del_on_diff_cpu" and producers % 2:
            producers += 1
        self.producers = producers
        self.max_entries = max(8192, 64 * ncpus)
        self.fds: dict[str, int] = {}
        self.prog_fds: list[int] = []
        self.links: list[int] = []

    def setup(self) -> None:
        flags = 0 if self.flavour == "prealloc" else int(MapFlags.NO_PREALLOC)
        s = self.sys
        self.fds["htab"] = s.map_create(MapType.HASH, 4, self.cfg.value_size, self.max_entries,
                                        map_flags=flags, map_name=b"htab")
        self.fds["op_cnt"] = s.map_create(MapType.ARRAY, 4, 8, 1, map_name=b"op_cnt")
        self.fds["zero"] = s.map_create(MapType.ARRAY, 4, self.cfg.value_size, 1,
                                        map_name=b"zero")
        for name, syscall in USE_CASE_PROGS[self.use_case]:
            assembly = assemble(htab_mem_program(name, self.producers))
            insns = encode(assembly.with_map_fds(lambda m: self.fds[m]))
            fd = s.prog_load(ProgType.TRACEPOINT, insns, license="GPL",
                             prog_name=name.encode()[:15])
            self.prog_fds.append(fd)
            self.links.append(s.attach_tracepoint(fd, "syscalls", f"sys_enter_{syscall}"))

    def op_count(self) -> int:
        return struct.unpack("=Q", self.sys.map_lookup_elem(self.fds["op_cnt"],
                                                              struct.pack("=I", 0)))[0]

    def teardown(self) -> None:
        for fd in [*self.links, *self.prog_fds, *self.fds.values()]:
            try:
                self.sys.close(fd)
            except OSError:
                pass


# -- kernel backend ------------------------------------------------------------------------

class KernelBench(Bench):
    """Producers are forked processes pinned to CPU i, calling the trigger until stopped."""

    def run(self) -> Run:
        run_ = Run(self.use_case, self.flavour, self.producers)
        # One cgroup per process: concurrent runs must not charge each other's maps.
        cgroup = MemCgroup(f"pybpf_htab_mem.{os.getpid()}")
        joined = cgroup.join()
        pids: list[int] = []
        try:
            self.setup()
            fdinfo = read_fdinfo(self.fds["htab"])
            run_.memlock = int(fdinfo.get("memlock", "0"))
            pids = self.start_producers()
            run_.memory_source = (cgroup.label if joined
                                  else "fdinfo memlock (no memory cgroup here)")

            def memory() -> float:
                if joined:
                    return cgroup.read(cgroup.current_file) or 0.0
                return int(read_fdinfo(self.fds["htab"]).get("memlock", "0")) / MIB

            self.measure(run_, memory)
            run_.peak_memory = cgroup.read(cgroup.peak_file) if joined else None
        finally:
            for pid in pids:
                os.kill(pid, signal.SIGKILL)
            for pid in pids:
                os.waitpid(pid, 0)
            self.teardown()
            cgroup.leave()
        if not self.cfg.json:
            print(run_.summary() + f" (map memlock {run_.memlock} bytes)", flush=True)
        return run_

    def measure(self, run_: Run, memory) -> None:
        """Warm up, then sample op count and memory once a second, printing Iter lines (each
        with its drift from the interval, as the selftests' bench prints it)."""
        cfg = self.cfg
        name = f"{self.use_case}/{self.flavour}"
        warm_until = time.monotonic() + cfg.warmup
        while (left := warm_until - time.monotonic()) > 0:
            self.progress.update(self.progress.done, f"{name}: warming up, {left:.0f}s left")
            time.sleep(min(left, 1.0))
        last_ops, last_t = self.op_count(), time.monotonic_ns()
        seconds = max(1, round(cfg.duration))
        interval_ns = min(1.0, cfg.duration) * 1e9   # a shorter run samples once, after it
        for i in range(seconds):
            self.progress.update(self.progress.done, f"{name}: second {i + 1}/{seconds}")
            time.sleep(interval_ns / 1e9)
            ops, t = self.op_count(), time.monotonic_ns()
            delta_ns = t - last_t
            hits = (ops - last_ops) / self.producers
            ops_k = hits / 1000.0 / (delta_ns / 1e9)
            mem = memory()
            run_.samples.append(ops_k)
            run_.memory.append(mem)
            if not cfg.json:
                print(iter_line(i, (delta_ns - interval_ns) / 1000.0, ops_k, mem), flush=True)
            last_ops, last_t = ops, t

    def start_producers(self) -> list[int]:
        pids = []
        pairs = [os.pipe() + os.pipe() for _ in range(self.producers // 2)] \
            if self.use_case == "add_del_on_diff_cpu" else []
        sys.stdout.flush()
        for i in range(self.producers):
            pid = os.fork()
            if pid == 0:
                try:
                    os.sched_setaffinity(0, {i % os.cpu_count()})
                    if pairs:
                        _ping_pong(i, pairs[i // 2])
                    else:
                        while True:
                            deque(itertools.starmap(os.getpgid, itertools.repeat((0,), 4096)),
                                  maxlen=0)
                finally:
                    os._exit(0)
            pids.append(pid)
        for fds in pairs:
            for fd in fds:
                os.close(fd)
        return pids


def _ping_pong(i: int, fds: tuple[int, int, int, int]) -> None:
    """The pair's barrier dance over two pipes: add (getpgid), then delete (getppid)."""
    to_del_r, to_del_w, to_add_r, to_add_w = fds
    if i % 2 == 0:
        while True:
            os.getpgid(0)
            os.write(to_del_w, b"a")
            os.read(to_add_r, 1)
    else:
        while True:
            os.read(to_del_r, 1)
            os.getppid()
            os.write(to_add_w, b"d")


# -- emulated backend ----------------------------------------------------------------------

class EmulatedBench(Bench):
    """Producers are tasks on their emulated CPUs under the virtual-time scheduler, running
    the programs in the interpreter; rates are modeled (see the module's rules)."""

    def __init__(self, sys_, cfg: Config, use_case: str, flavour: str, *,
                 progress: report.Progress | None = None) -> None:
        super().__init__(sys_, cfg, use_case, flavour, progress=progress)
        self.peak_elements = 0

    def run(self) -> Run:
        from ..emulated import VirtualTimeScheduler

        machine = self.sys.machine
        machine.require_modeled_time("htab-mem's emulated rates")
        if self.producers > self.sys.num_possible_cpus:
            raise ValueError(f"{self.producers} producers need as many emulated CPUs "
                             f"(the machine has {self.sys.num_possible_cpus})")
        run_ = Run(self.use_case, self.flavour, self.producers, profile=machine.profile.name,
                   memory_source="allocator live elements x element size (emulated)")
        pairs = self.use_case == "add_del_on_diff_cpu"
        tasks = range(0, self.producers, 2) if pairs else range(self.producers)
        loops = self.cfg.loops
        warm = loops // 4
        marks = sorted({warm + (loops - warm) * (j + 1) // SAMPLES for j in range(SAMPLES)})
        timing = machine.timing
        # per producer CPU: its clock at the warm-up's end and at each mark
        clocks: dict[int, list[float]] = {cpu: [] for cpu in range(self.producers)}
        memory: list[float] = []
        elem_size = self.element_size()
        self.setup()
        try:
            start = max(timing.clock)  # the producers start together
            for cpu in range(self.producers):
                timing.wait_until(cpu, start, "idle")
            scheduler = VirtualTimeScheduler(timing, tasks, task_locals=machine.task_locals())
            host_ns: dict[int, int] = {}

            def observe(cpus: tuple[int, ...], done: int, first: bool) -> None:
                if done == warm or done in marks:
                    for cpu in cpus:
                        clocks[cpu].append(timing.clock[cpu])
                    live = self.live_elements()
                    if first and done != warm:
                        memory.append(live * elem_size / MIB)

            def producer(cpu: int) -> None:
                record = sys_enter_record("getpgid", (0,))
                with self.sys.on_cpu(cpu):
                    machine.set_task(PRODUCER_PID_BASE + cpu)
                    observe((cpu,), 0, False)
                    for done in range(1, loops + 1):
                        self.sys.enter_syscall("getpgid", record)
                        observe((cpu,), done, cpu == 0)
                host_ns[cpu] = scheduler.host_cpu_ns(cpu)

            def pair(adder: int) -> None:
                deleter = adder + 1
                add, delete = sys_enter_record("getpgid", (0,)), sys_enter_record("getppid")
                observe((adder, deleter), 0, False)
                for done in range(1, loops + 1):
                    with self.sys.on_cpu(adder):
                        machine.set_task(PRODUCER_PID_BASE + adder)
                        self.sys.enter_syscall("getpgid", add)
                        self._wake(adder, deleter)
                    with self.sys.on_cpu(deleter):
                        machine.set_task(PRODUCER_PID_BASE + deleter)
                        self.sys.enter_syscall("getppid", delete)
                        self._wake(deleter, adder)
                    observe((adder, deleter), done, adder == 0)
                host_ns[adder] = host_ns[deleter] = scheduler.host_cpu_ns(adder) // 2

            body = pair if pairs else producer
            with scheduler:
                scheduler.run({cpu: functools.partial(body, cpu) for cpu in tasks})
            machine.step()  # the grace periods end, as they would by now
            run_.counters = {k: v for k, v in self.sys.map_stats(self.fds["htab"]).items()
                             if isinstance(v, int | str) and k != "numa_node"}
        finally:
            self.teardown()
        ops_per_loop = 2 if self.use_case == "batch_add_batch_del" else 1
        steps = [b - a for a, b in itertools.pairwise([warm, *marks])]
        for j, (loops_in, mem) in enumerate(zip(steps, memory, strict=True)):
            rates = [loops_in * ops_per_loop / ((c[j + 1] - c[j]) / 1e9) / 1000
                     for c in clocks.values()]
            ops_k = statistics.fmean(rates)
            run_.samples.append(ops_k)
            run_.memory.append(mem)
            if not self.cfg.json:  # no drift: a modeled sample is taken at its mark
                print(iter_line(j, 0.0, ops_k, mem), flush=True)
        run_.peak_memory = self.peak_elements * elem_size / MIB
        busy = statistics.fmean(host_ns.values())
        run_.host_ops_k = loops * ops_per_loop / (busy / 1e9) / 1000 if busy else None
        if not self.cfg.json:
            print(run_.summary() + f" (modeled on {run_.profile})", flush=True)
        return run_

    def _wake(self, writer: int, reader: int) -> None:
        """``writer`` writes the pair's pipe (a syscall) and the reader, asleep on its read,
        runs on once woken (the profile's wake-up latency) and back from its read."""
        timing = self.sys.machine.timing
        self.sys.machine.bpf_syscall("syscall_entry")
        timing.wait_until(reader, timing.clock[writer] + self.sys.machine.profile[
            "sched.wakeup_latency"], "wakeup")
        with self.sys.on_cpu(reader):
            self.sys.machine.bpf_syscall("syscall_entry")

    def element_size(self) -> int:
        from ..emulated import HTAB_ELEM_SIZE
        from ..uapi import round_up

        return round_up(4, 8) + HTAB_ELEM_SIZE + round_up(self.cfg.value_size, 8)

    def live_elements(self) -> int:
        stats = self.sys.map_stats(self.fds["htab"])
        if self.flavour == "prealloc":
            live = self.max_entries  # allocated up front by the kernel
        else:
            live = stats.get("allocated", 0) - stats.get("freed", 0)
        self.peak_elements = max(self.peak_elements, live)
        return live
