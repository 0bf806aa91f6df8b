"""``pybpf map-perf``: the kernel's samples/bpf/map_perf_test, on both backends.

Rules this module keeps (the sample's, see perf-tests-and-suites.md section 1):
- Arguments ``TEST_FLAGS [NUM_PROCS] [NUM_ENTRIES] [MAX_CNT]`` mean what they mean there:
  TEST_FLAGS is a bitmask of tests (0 = all), NUM_PROCS defaults to the online CPUs,
  NUM_ENTRIES > 0 resizes the maps of the enabled tests (and the run-time inner LRU maps),
  MAX_CNT (default 10000) is the number of trigger syscalls per test per CPU.
- The per-event map work is the modern sample's (10 update/lookup/delete rounds for the hash
  tests, 32 LPM lookups, 64 hash/array lookups, one LRU update, 32 LRU lookups); the programs
  are in ``map_perf_progs``. The LPM trie is really filled (the sample fills the wrong map).
- Output lines are the sample's, e.g. ``5:inner_lru_hash_map_perf pre-alloc 1628380 events per
  sec``; rate = MAX_CNT * 1e9 (* 64 for the two lookup tests) // elapsed ns, integer.
- Kernel backend: programs on syscall tracepoints, one forked process per CPU pinned with
  sched_setaffinity, each calling the trigger syscall MAX_CNT times per test. ``--trigger``
  picks the loop (trigger.py): ``native`` (x86-64: machine code, no Python per event; the
  default where it works) or ``python`` (CPython's itertools loop, ~30-190 ns more per event).
  ``--baseline`` times the bare loop, ``--c-trigger`` compares with a C loop on the same CPU.
- Emulated backend: one thread per emulated CPU (``on_cpu``), each running the same programs
  through the interpreter via ``trigger_tracepoint``; rates are wall-clock interpreter figures,
  labelled emulated, never scaled. The NUMA test adds each CPU's remote-access share of its
  inner map, from the machine's NUMA accounting.
"""

from __future__ import annotations

import argparse
import enum
import itertools
import json
import os
import re
import select
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

from .. import uapi
from ..uapi import MapFlags, MapType
from . import report, trigger

MAX_NR_CPUS = 1024  # slots of array_of_lru_hashs, as in the sample
DEFAULT_MAX_CNT = 10000  # the sample's default since Sept 2022
LRU_LOOKUP_BATCH = 32  # keys looked up per LRU_HASH_LOOKUP event
EMULATED_LABEL = "[emulated]"
COMPARE_ROUNDS = 5  # --c-trigger: the C and pybpf loops alternated this many times


class Test(enum.IntEnum):
    """enum test_type of map_perf_test_user.c; TEST_FLAGS bit t selects test t."""

    HASH_PREALLOC = 0
    PERCPU_HASH_PREALLOC = 1
    HASH_KMALLOC = 2
    PERCPU_HASH_KMALLOC = 3
    LRU_HASH_PREALLOC = 4
    NOCOMMON_LRU_HASH_PREALLOC = 5
    LPM_KMALLOC = 6
    HASH_LOOKUP = 7
    ARRAY_LOOKUP = 8
    INNER_LRU_HASH_PREALLOC = 9
    LRU_HASH_LOOKUP = 10

    @property
    def bit(self) -> int:
        return 1 << self.value


ALL_TESTS_MASK = (1 << len(Test)) - 1


@dataclass(frozen=True)
class MapDef:
    """A map of map_perf_test.bpf.c, as declared there (before NUM_ENTRIES resizing)."""

    name: str
    map_type: MapType
    key_size: int
    value_size: int
    max_entries: int
    map_flags: int = 0


MAP_DEFS: dict[str, MapDef] = {m.name: m for m in (
    MapDef("hash_map", MapType.HASH, 4, 8, 1000),
    MapDef("lru_hash_map", MapType.LRU_HASH, 4, 8, 10000),
    MapDef("nocommon_lru_hash_map", MapType.LRU_HASH, 4, 8, 10000, MapFlags.NO_COMMON_LRU),
    # The sample declares BPF_F_NUMA_NODE, node 0; --numa-node decides here (see numa_for_cpu).
    MapDef("inner_lru_hash_map", MapType.LRU_HASH, 4, 8, 1000),
    MapDef("array_of_lru_hashs", MapType.ARRAY_OF_MAPS, 4, 4, MAX_NR_CPUS),
    MapDef("percpu_hash_map", MapType.PERCPU_HASH, 4, 8, 1000),
    MapDef("hash_map_alloc", MapType.HASH, 4, 8, 1000, MapFlags.NO_PREALLOC),
    MapDef("percpu_hash_map_alloc", MapType.PERCPU_HASH, 4, 8, 1000, MapFlags.NO_PREALLOC),
    MapDef("lpm_trie_map_alloc", MapType.LPM_TRIE, 8, 8, 10000, MapFlags.NO_PREALLOC),
    MapDef("array_map", MapType.ARRAY, 4, 8, 1000),
    MapDef("lru_hash_lookup_map", MapType.LRU_HASH, 4, 8, 1000),
)}


@dataclass(frozen=True)
class TestDef:
    """One row of the sample: its map, trigger, program and output line."""

    test: Test
    map_name: str  # test_map_names[]: the map NUM_ENTRIES resizes
    maps: tuple[str, ...]  # every map the program uses
    syscall: str  # the program runs on tracepoint syscalls/sys_enter_<syscall>
    prog: str  # program name in map_perf_progs
    label: str  # the output line between "cpu:" and the rate
    unit: str = "events"
    per_event: int = 1  # the lookup tests print lookups: rate * 64
    tcase: int | None = None  # connect() test case of the LRU tests

    def line(self, cpu: int, rate: int) -> str:
        return f"{cpu}:{self.label} {rate} {self.unit} per sec"


TESTS: dict[Test, TestDef] = {t.test: t for t in (
    TestDef(Test.HASH_PREALLOC, "hash_map", ("hash_map",), "getuid", "stress_hmap",
            "hash_map_perf pre-alloc"),
    TestDef(Test.PERCPU_HASH_PREALLOC, "percpu_hash_map", ("percpu_hash_map",), "geteuid",
            "stress_percpu_hmap", "percpu_hash_map_perf pre-alloc"),
    TestDef(Test.HASH_KMALLOC, "hash_map_alloc", ("hash_map_alloc",), "getgid",
            "stress_hmap_alloc", "hash_map_perf kmalloc"),
    TestDef(Test.PERCPU_HASH_KMALLOC, "percpu_hash_map_alloc", ("percpu_hash_map_alloc",),
            "getegid", "stress_percpu_hmap_alloc", "percpu_hash_map_perf kmalloc"),
    TestDef(Test.LRU_HASH_PREALLOC, "lru_hash_map", ("lru_hash_map",), "connect",
            "stress_lru_hmap_alloc", "lru_hash_map_perf pre-alloc", tcase=0),
    TestDef(Test.NOCOMMON_LRU_HASH_PREALLOC, "nocommon_lru_hash_map",
            ("nocommon_lru_hash_map",), "connect", "stress_lru_hmap_alloc",
            "nocommon_lru_hash_map_perf pre-alloc", tcase=1),
    TestDef(Test.LPM_KMALLOC, "lpm_trie_map_alloc", ("lpm_trie_map_alloc",), "gettid",
            "stress_lpm_trie_map_alloc", "lpm_perf kmalloc"),
    TestDef(Test.HASH_LOOKUP, "hash_map", ("hash_map",), "getpgid", "stress_hash_map_lookup",
            "hash_lookup", unit="lookups", per_event=64),
    TestDef(Test.ARRAY_LOOKUP, "array_map", ("array_map",), "getppid",
            "stress_array_map_lookup", "array_lookup", unit="lookups", per_event=64),
    TestDef(Test.INNER_LRU_HASH_PREALLOC, "inner_lru_hash_map",
            ("inner_lru_hash_map", "array_of_lru_hashs"), "connect", "stress_lru_hmap_alloc",
            "inner_lru_hash_map_perf pre-alloc", tcase=2),
    TestDef(Test.LRU_HASH_LOOKUP, "lru_hash_lookup_map", ("lru_hash_lookup_map",), "connect",
            "stress_lru_hmap_alloc", "lru_hash_lookup_perf pre-alloc", tcase=3),
)}

# The connect() program serves all four LRU tests and so needs all their maps.
LRU_PROG_MAPS = ("lru_hash_map", "nocommon_lru_hash_map", "array_of_lru_hashs",
                 "lru_hash_lookup_map")


# -- arguments -----------------------------------------------------------------------------

NUMA_AUTO = "auto"
NUMA_NONE = "none"
TRIGGER_NATIVE = "native"
TRIGGER_PYTHON = "python"
TRIGGER_AUTO = "auto"


@dataclass
class Config:
    """A map-perf run: the sample's four arguments plus pybpf's options."""

    test_flags: int = ALL_TESTS_MASK
    num_procs: int = 0  # 0: the online CPUs (emulated: the machine's CPUs)
    num_map_entries: int = 0
    max_cnt: int = DEFAULT_MAX_CNT
    backend: str | None = None
    cpus: int | None = None
    nodes: int | None = None
    numa_node: str = NUMA_AUTO  # "auto", "none" or a node number
    parent_cpu: int | None = None
    json: bool = False
    plot: str | None = None
    baseline: bool = False
    c_trigger: str | None = None
    trigger: str = TRIGGER_AUTO
    htab_mem: str | None = None  # emulated: "bpf_mem_alloc" (default) or "call_rcu"
    progress: bool = True

    @property
    def tests(self) -> list[Test]:
        return [t for t in Test if self.test_flags & t.bit]


def _test_flags_arg(text: str) -> int:
    try:
        value = int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"TEST_FLAGS must be an integer bitmask, got {text!r}") from None
    if value == 0 or value == -1:  # the sample: atoi() ?: ~0
        return ALL_TESTS_MASK
    if value < 0 or not value & ALL_TESTS_MASK or value & ~ALL_TESTS_MASK:
        raise argparse.ArgumentTypeError(
            f"TEST_FLAGS {value} selects no test: use 0 for all, or a sum of bits 1<<t for "
            f"t in 0-{len(Test) - 1} (e.g. 512 = INNER_LRU_HASH_PREALLOC)")
    return value


def _numa_arg(text: str) -> str:
    if text in (NUMA_AUTO, NUMA_NONE):
        return text
    try:
        node = int(text)
    except ValueError:
        node = -1
    if node < 0:
        raise argparse.ArgumentTypeError(
            f"--numa-node takes 'auto', 'none' or a node number, got {text!r}")
    return str(node)


def test_list_epilog() -> str:
    rows = [f"  {t.bit:5d}  {t.name:28s} {TESTS[t].label} (sys_enter_{TESTS[t].syscall})"
            for t in Test]
    return "tests (TEST_FLAGS bits):\n" + "\n".join(rows)


def configure_parser(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add map-perf's arguments to ``parser`` (a subcommand's or a standalone one)."""
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.description = ("Run the kernel's samples/bpf/map_perf_test: per-CPU events/s of "
                          "BPF programs doing map work on syscall tracepoints.")
    parser.epilog = test_list_epilog()
    parser.add_argument("test_flags", metavar="TEST_FLAGS", nargs="?", type=_test_flags_arg,
                        default=ALL_TESTS_MASK, help="bitmask of tests, 0 = all (default)")
    parser.add_argument("num_procs", metavar="NUM_PROCS", nargs="?",
                        type=report.int_arg("NUM_PROCS", 0), default=0,
                        help="processes, one per CPU 0..N-1 (default, 0: online CPUs)")
    parser.add_argument("num_map_entries", metavar="NUM_ENTRIES", nargs="?",
                        type=report.int_arg("NUM_ENTRIES", 0), default=0,
                        help="max_entries of the enabled tests' maps (default, 0: as declared)")
    parser.add_argument("max_cnt", metavar="MAX_CNT", nargs="?", type=report.int_arg("MAX_CNT", 1),
                        default=DEFAULT_MAX_CNT,
                        help=f"trigger syscalls per test per CPU (default {DEFAULT_MAX_CNT})")
    parser.add_argument("--backend", choices=("kernel", "emulated"), default=None,
                        help="default: kernel where bpf(2) is allowed, else emulated")
    parser.add_argument("--cpus", type=report.int_arg("--cpus", 1), default=None,
                        help="emulated: CPUs of the declared machine")
    parser.add_argument("--nodes", type=report.int_arg("--nodes", 1), default=None,
                        help="emulated: NUMA nodes of the declared machine")
    parser.add_argument("--numa-node", dest="numa_node", type=_numa_arg, default=NUMA_AUTO,
                        help="inner LRU maps: 'auto' each on its CPU's node (the 2017 patch), "
                             "'none' where created (before it), or node N")
    parser.add_argument("--parent-cpu", dest="parent_cpu", type=report.int_arg("--parent-cpu", 0),
                        default=None, help="CPU the parent runs on while creating the maps "
                                           "(the patch's 'taskset -c 10')")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--plot", metavar="FILE.png", default=None,
                        help="bar chart of per-CPU rates (needs matplotlib)")
    parser.add_argument("--baseline", action="store_true",
                        help="kernel: also time each trigger loop with no program attached")
    parser.add_argument("--c-trigger", dest="c_trigger", metavar="PATH", default=None,
                        help="kernel: after each trigger loop, run the C one "
                             "(tools/map_perf_trigger.c) on the same CPU and compare")
    parser.add_argument("--trigger", choices=(TRIGGER_AUTO, TRIGGER_NATIVE, TRIGGER_PYTHON),
                        default=TRIGGER_AUTO,
                        help="kernel: the trigger loop: native machine code (x86-64) or "
                             "CPython's; auto = native where it works")
    parser.add_argument("--htab-mem", dest="htab_mem", choices=("bpf_mem_alloc", "call_rcu"),
                        default=None, help="emulated: element memory of non-preallocated "
                                           "hash maps: bpf_mem_alloc (6.1+) or the older "
                                           "kmalloc + call_rcu per free")
    parser.add_argument("--no-progress", dest="progress", action="store_false",
                        help="no progress lines on stderr")
    return parser


def config_from_args(ns: argparse.Namespace) -> Config:
    return Config(test_flags=ns.test_flags, num_procs=ns.num_procs,
                  num_map_entries=ns.num_map_entries, max_cnt=ns.max_cnt,
                  backend=ns.backend, cpus=ns.cpus, nodes=ns.nodes, numa_node=ns.numa_node,
                  parent_cpu=ns.parent_cpu, json=ns.json, plot=ns.plot,
                  baseline=ns.baseline, c_trigger=ns.c_trigger, trigger=ns.trigger,
                  htab_mem=ns.htab_mem, progress=ns.progress)


def map_perf_command(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    """``pybpf map-perf`` (cli.COMMANDS)."""
    configure_parser(parser)
    return lambda ns: run_from_args(ns, parser)


def main(argv: Sequence[str] | None = None) -> int:
    """The standalone entry point: the same as the ``pybpf`` subcommand."""
    from ..cli import main as cli_main

    return cli_main(["map-perf", *(sys.argv[1:] if argv is None else argv)])



def run_from_args(ns: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Validate what argparse cannot, run, report. Usage errors exit 2 via ``parser.error``."""
    cfg = config_from_args(ns)
    problem = validate(cfg)
    if problem:
        parser.error(problem)
    result = run(cfg)
    emit(result, cfg)
    return 0


def validate(cfg: Config) -> str | None:
    """What is wrong with the combination of arguments, or None."""
    if cfg.backend == "kernel" and (cfg.cpus is not None or cfg.nodes is not None):
        return "--cpus/--nodes declare an emulated machine; drop them or use --backend emulated"
    if cfg.cpus is not None and cfg.nodes is not None and cfg.nodes > cfg.cpus:
        return f"--nodes {cfg.nodes} exceeds --cpus {cfg.cpus}: every node needs a CPU"
    if cfg.htab_mem and cfg.backend == "kernel":
        return ("--htab-mem picks the emulated allocator design; this kernel's "
                "non-preallocated maps use bpf_mem_alloc")
    if (cfg.baseline or cfg.c_trigger) and cfg.backend == "emulated":
        return "--baseline and --c-trigger measure the kernel's trigger loop; drop them"
    if cfg.trigger == TRIGGER_NATIVE and not trigger.native_available():
        return f"--trigger native: {trigger.native_unavailable_reason()}"
    if cfg.c_trigger and not os.access(cfg.c_trigger, os.X_OK):
        return (f"--c-trigger {cfg.c_trigger}: not an executable; build it with "
                "cc -O2 -o map_perf_trigger tools/map_perf_trigger.c")
    if cfg.num_procs > MAX_NR_CPUS:
        return f"NUM_PROCS {cfg.num_procs} exceeds {MAX_NR_CPUS}, the outer map's slots"
    cpus = cfg.cpus if cfg.cpus is not None else os.cpu_count()
    if cfg.parent_cpu is not None and cpus and cfg.parent_cpu >= cpus:
        return f"--parent-cpu {cfg.parent_cpu}: the machine has CPUs 0-{cpus - 1}"
    return None


# -- results -------------------------------------------------------------------------------

@dataclass
class Result:
    """One test on one CPU."""

    cpu: int
    test: str
    line: str
    rate: int
    unit: str
    events: int
    elapsed_ns: int
    # NUMA test: the inner map's placement and (emulated) its accesses from this CPU.
    map_flags: int | None = None
    numa_node: int | None = None
    map_node: int | None = None
    local_accesses: int | None = None
    remote_accesses: int | None = None
    # emulated: events per wall-clock second while all workers ran (``rate`` is per second
    # of the worker thread's CPU time, ``elapsed_ns`` that CPU time).
    wall_rate: int | None = None
    # --baseline (kernel): the same trigger loop with no program attached.
    baseline_rate: int | None = None
    # --c-trigger (kernel): best rates of the C and of pybpf's trigger loop, alternated, per
    # wall-clock second and per second of the process's own CPU time.
    c_trigger_rate: int | None = None
    pybpf_best_rate: int | None = None
    c_trigger_cpu_rate: int | None = None
    pybpf_best_cpu_rate: int | None = None

    @property
    def remote_share(self) -> float | None:
        if self.local_accesses is None or self.remote_accesses is None:
            return None
        total = self.local_accesses + self.remote_accesses
        return self.remote_accesses / total if total else 0.0


@dataclass
class RunResult:
    backend: str
    config: Config
    cpu_node: list[int]
    results: list[Result] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    trigger: str | None = None  # kernel: the trigger loop used (native or python)
    # Non-preallocated maps of the run: {name: counters} (emulated: the allocator's;
    # kernel: fdinfo's memlock), read when the workers are done.
    alloc_stats: dict[str, dict] = field(default_factory=dict)

    def by_test(self) -> dict[str, list[Result]]:
        out: dict[str, list[Result]] = {}
        for r in sorted(self.results, key=lambda r: (Test[r.test].value, r.cpu)):
            out.setdefault(r.test, []).append(r)
        return out


def rate_of(events: int, elapsed_ns: int, per_event: int = 1) -> int:
    """The sample's integer arithmetic: events * 1e9 (* 64) / elapsed ns."""
    return events * 1_000_000_000 * per_event // max(1, elapsed_ns)


def result_line(res: Result, backend: str) -> str:
    """The sample's line; emulated lines say so, and NUMA ones add the remote share."""
    line = res.line
    if backend == "emulated":
        line += f" {EMULATED_LABEL}"
        share = res.remote_share
        if share is not None:
            line += (f" remote {100 * share:.1f}% of "
                     f"{res.local_accesses + res.remote_accesses} accesses")
    return line


def emit(run_result: RunResult, cfg: Config) -> None:
    """Print the JSON document or the summary (the lines were printed as tests finished)."""
    if cfg.json:
        report.dump_json(to_json(run_result))
    else:
        for summary in (numa_summary(run_result), alloc_summary(run_result)):
            if summary:
                print(summary)
        for note in run_result.notes:
            print(f"# {note}")
    if cfg.plot:
        plot(run_result, cfg.plot)


def to_json(run_result: RunResult) -> dict:
    cfg = run_result.config
    return {
        "benchmark": "map_perf",
        "backend": run_result.backend,
        "emulated": run_result.backend == "emulated",
        "cpu_node": run_result.cpu_node,
        "config": {k: v for k, v in asdict(cfg).items() if k not in ("json", "plot", "progress")},
        "tests": [t.name for t in cfg.tests],
        "results": [dict(asdict(r), remote_share=r.remote_share) for r in run_result.results],
        "lines": [result_line(r, run_result.backend) for r in
                  sorted(run_result.results, key=lambda r: (Test[r.test].value, r.cpu))],
        "notes": run_result.notes,
        "trigger": run_result.trigger,
        "alloc_stats": run_result.alloc_stats,
    }


def numa_summary(run_result: RunResult) -> str:
    """The NUMA test as a table: CPU, its node, its inner map's node, events/s, remote %."""
    rows = run_result.by_test().get(Test.INNER_LRU_HASH_PREALLOC.name)
    if not rows:
        return ""
    header = ["cpu", "cpu node", "map node", "map_flags", "events/s", "remote %"]
    table = []
    for r in rows:
        share = r.remote_share
        table.append([r.cpu, run_result.cpu_node[r.cpu] if r.cpu < len(run_result.cpu_node)
                      else "?", "?" if r.map_node is None else r.map_node,
                      "?" if r.map_flags is None else hex(r.map_flags), r.rate,
                      "n/a" if share is None else f"{100 * share:.1f}"])
    title = (f"inner_lru_hash_map placement (--numa-node {run_result.config.numa_node}, "
             f"{run_result.backend} backend)")
    return title + "\n" + report.format_table(header, table)


ALLOC_COUNTERS = ("mem_design", "alloc_calls", "free_calls", "call_rcu", "cache_hits",
                  "reused", "allocated", "freed", "waiting_for_rcu")


def allocator_counters(stats: dict) -> dict:
    return {k: stats[k] for k in ALLOC_COUNTERS if k in stats}


def alloc_summary(run_result: RunResult) -> str:
    """The allocator behind the kmalloc tests: why HASH_KMALLOC runs at the speed it does."""
    if not run_result.alloc_stats:
        return ""
    if run_result.backend == "kernel":
        return "\n".join(f"{name}: memlock {c['memlock']} bytes (fdinfo; this kernel's "
                         "non-preallocated maps use bpf_mem_alloc)"
                         for name, c in run_result.alloc_stats.items())
    header = ["map", *ALLOC_COUNTERS]
    rows = [[name, *(c.get(k, "-") for k in ALLOC_COUNTERS)]
            for name, c in run_result.alloc_stats.items()]
    return ("element allocator of the non-preallocated maps (emulated counters: call_rcu = "
            "RCU callbacks queued, cache_hits = allocations served by reusing freed "
            "elements from a per-CPU cache)\n" + report.format_table(header, rows))


def plot(run_result: RunResult, path: str) -> None:
    series: dict[str, dict[int, float]] = {}
    shares: dict[str, dict[int, float]] = {}
    for test, rows in run_result.by_test().items():
        label = TESTS[Test[test]].label
        series[label] = {r.cpu: r.rate for r in rows}
        known = {r.cpu: r.remote_share for r in rows if r.remote_share is not None}
        if known:
            shares[label] = known
    title = f"map_perf ({run_result.backend} backend)"
    if run_result.backend == "emulated":
        title += ": interpreter figures"
    report.plot_per_cpu(path, title, series, unit="events (or lookups) per sec",
                        remote_share=shares or None)


# -- the run -------------------------------------------------------------------------------

def run(cfg: Config) -> RunResult:
    from ..backends import system

    kwargs = {}
    if cfg.cpus is not None:
        kwargs["cpus"] = cfg.cpus
    if cfg.nodes is not None:
        kwargs["nodes"] = cfg.nodes
    if cfg.htab_mem is not None:
        kwargs["htab_mem"] = cfg.htab_mem
    if kwargs and cfg.backend is None:
        cfg.backend = "emulated"
    sys_ = system(cfg.backend, **kwargs)
    if sys_.name == "kernel":
        return KernelRun(sys_, cfg).run()
    return EmulatedRun(sys_, cfg).run()


def lru_lookup_keys(test_entries: int) -> list[int]:
    """The start keys s6_addr32[3] takes, in order, before it wraps to 0 (the sample's loop)."""
    keys = [0]
    while keys[-1] < test_entries - LRU_LOOKUP_BATCH:
        keys.append(keys[-1] + LRU_LOOKUP_BATCH)
    return keys


def sockaddr_in6_addr(tcase: int, key: int) -> bytes:
    """sin6_addr as the sample fills it: host-order u16 magic words, test case, u32 key."""
    return struct.pack("=HHHHII", 0xDEAD, 0xBEEF, tcase, 0, 0, key)


def sockaddr_in6(tcase: int, key: int) -> bytes:
    """The whole struct sockaddr_in6 (28 bytes) the sample passes to connect()."""
    return struct.pack("=HHI16sI", socket.AF_INET6, 0, 0, sockaddr_in6_addr(tcase, key), 0)


class Setup:
    """Creates the maps and loads, fills and attaches the programs of the enabled tests.

    Shared by both backends: everything here goes through the System interface.
    """

    def __init__(self, sys_, cfg: Config) -> None:
        self.sys = sys_
        self.cfg = cfg
        self.tests = cfg.tests
        self.fds: dict[str, int] = {}
        self.prog_fds: dict[str, int] = {}
        self.links: list[int] = []
        self.inner_fds: dict[int, int] = {}
        self.inner_numa: dict[int, tuple[int, int | None]] = {}  # cpu: (map_flags, node)
        self.lru_hash_lookup_test_entries = LRU_LOOKUP_BATCH

    # The sample's fixup_map: resize the enabled tests' maps.
    def max_entries(self, name: str) -> int:
        size = MAP_DEFS[name].max_entries
        if self.cfg.num_map_entries > 0:
            if any(TESTS[t].map_name == name for t in self.tests):
                size = self.cfg.num_map_entries
        return size

    @property
    def inner_lru_hash_size(self) -> int:
        return self.cfg.num_map_entries or MAP_DEFS["inner_lru_hash_map"].max_entries

    def numa_for_cpu(self, node_of_caller: int) -> tuple[int, int]:
        """(map_flags, numa_node) of an inner LRU map made by a CPU of ``node_of_caller``."""
        mode = self.cfg.numa_node
        if mode == NUMA_NONE:
            return 0, 0
        if mode == NUMA_AUTO:
            return int(MapFlags.NUMA_NODE), node_of_caller
        return int(MapFlags.NUMA_NODE), int(mode)

    def needed_maps(self) -> list[str]:
        names: list[str] = []
        for t in self.tests:
            td = TESTS[t]
            for name in (LRU_PROG_MAPS if td.syscall == "connect" else td.maps):
                if name not in names:
                    names.append(name)
        if "array_of_lru_hashs" in names and "inner_lru_hash_map" not in names:
            names.insert(names.index("array_of_lru_hashs"), "inner_lru_hash_map")
        return names

    def create_map(self, name: str, max_entries: int, map_flags: int = 0, numa_node: int = 0,
                   inner_map_fd: int = 0) -> int:
        m = MAP_DEFS[name]
        return self.sys.map_create(m.map_type, m.key_size, m.value_size, max_entries,
                                   map_flags=m.map_flags | map_flags, numa_node=numa_node,
                                   inner_map_fd=inner_map_fd, map_name=name.encode()[:15])

    def create_maps(self, cpu0_node: int) -> None:
        for name in self.needed_maps():
            if name == "inner_lru_hash_map":
                # CPU 0's inner map, made by the parent (the sample's static map). The
                # sample hard-codes node 0, which is CPU 0's node; 'auto' says so.
                flags, node = self.numa_for_cpu(cpu0_node)
                fd = self.create_map(name, self.max_entries(name), flags, node)
                self.inner_fds[0] = fd
                self.inner_numa[0] = (flags, node if flags else None)
            elif name == "array_of_lru_hashs":
                fd = self.create_map(name, MAX_NR_CPUS, inner_map_fd=self.fds[
                    "inner_lru_hash_map"])
            else:
                fd = self.create_map(name, self.max_entries(name))
            self.fds[name] = fd
        if "array_of_lru_hashs" in self.fds:
            self.sys.map_update_elem(self.fds["array_of_lru_hashs"], struct.pack("=I", 0),
                                     struct.pack("=I", self.inner_fds[0]))

    def load_and_attach(self) -> None:
        from .map_perf_progs import build_program

        for t in self.tests:
            td = TESTS[t]
            if td.prog in self.prog_fds:
                continue
            prog = build_program(td.prog, self.fds)
            fd = prog.load(self.sys)
            self.prog_fds[td.prog] = fd
            self.links.append(self.sys.attach_tracepoint(fd, "syscalls",
                                                         f"sys_enter_{td.syscall}"))

    def fill_lpm_trie(self) -> None:
        """The sample's fill_lpm_trie, into the trie this time: 512 random prefixes plus
        192.168.0.1/32 -> 128, so the 32 lookups of each event hit a populated trie."""
        fd = self.fds.get("lpm_trie_map_alloc")
        if fd is None:
            return
        import random

        rng = random.Random(0)
        for _ in range(512):
            key = struct.pack("=I4B", rng.randrange(33), *(rng.randrange(256) for _ in range(4)))
            self.sys.map_update_elem(fd, key, struct.pack("=q", 0))
        self.sys.map_update_elem(fd, struct.pack("=I4B", 32, 192, 168, 0, 1),
                                 struct.pack("=q", 128))

    def pre_test(self) -> None:
        """LRU_HASH_LOOKUP's pre-fill: keys 0..entries-1, value 1, BPF_NOEXIST."""
        if Test.LRU_HASH_LOOKUP not in self.tests:
            return
        if self.cfg.num_map_entries > self.lru_hash_lookup_test_entries:
            self.lru_hash_lookup_test_entries = self.cfg.num_map_entries
        fd = self.fds["lru_hash_lookup_map"]
        one = struct.pack("=q", 1)
        for key in range(self.lru_hash_lookup_test_entries):
            self.sys.map_update_elem(fd, struct.pack("=I", key), one, uapi.BPF_NOEXIST)

    def create_inner_map(self, cpu: int, node_of_cpu: int) -> int:
        """A CPU other than 0 makes its own inner LRU map and stores it in outer[cpu]."""
        flags, node = self.numa_for_cpu(node_of_cpu)
        fd = self.create_map("inner_lru_hash_map", self.inner_lru_hash_size, flags, node)
        self.sys.map_update_elem(self.fds["array_of_lru_hashs"], struct.pack("=I", cpu),
                                 struct.pack("=I", fd))
        self.inner_fds[cpu] = fd
        self.inner_numa[cpu] = (flags, node if flags else None)
        return fd

    def no_prealloc_fds(self) -> dict[str, int]:
        """The maps whose elements come from an allocator (BPF_F_NO_PREALLOC hashes)."""
        return {name: fd for name, fd in self.fds.items()
                if MAP_DEFS[name].map_flags & MapFlags.NO_PREALLOC
                and MAP_DEFS[name].map_type in (MapType.HASH, MapType.PERCPU_HASH)}

    def close(self) -> None:
        for fd in self.links + list(self.prog_fds.values()):
            self.sys.close(fd)
        inner = [fd for cpu, fd in self.inner_fds.items() if cpu != 0]
        for fd in inner + list(self.fds.values()):
            try:
                self.sys.close(fd)
            except OSError:
                pass


# -- kernel backend ------------------------------------------------------------------------

def kernel_trigger(test: Test, lookup_entries: int, kind: str) -> Callable[[int], None]:
    """``run(n)``: n trigger syscalls of ``test``, looped natively or by CPython (trigger.py)."""
    td = TESTS[test]
    if td.syscall == "connect":
        if kind == TRIGGER_NATIVE:
            return trigger.native_connect_loop(sockaddr_in6(td.tcase, 0),
                                               lookup_entries - LRU_LOOKUP_BATCH)
        return trigger.python_connect_loop([sockaddr_in6(td.tcase, key)
                                            for key in lru_lookup_keys(lookup_entries)])
    if kind == TRIGGER_NATIVE:
        return trigger.native_syscall_loop(td.syscall)
    return trigger.python_syscall_loop(td.syscall)


def _online_cpus() -> int:
    return os.sysconf("SC_NPROCESSORS_ONLN")


def _getcpu() -> tuple[int, int]:
    """getcpu(2) (glibc's wrapper): (cpu, node) of the caller, as the sample asks."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    cpu, node = ctypes.c_uint(), ctypes.c_uint()
    if libc.getcpu(ctypes.byref(cpu), ctypes.byref(node)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"getcpu: {os.strerror(err)}")
    return cpu.value, node.value


def read_fdinfo(fd: int) -> dict[str, str]:
    """/proc/self/fdinfo/<fd> as a dict (map_type, map_flags, memlock, ...)."""
    out: dict[str, str] = {}
    with open(f"/proc/self/fdinfo/{fd}") as f:
        for line in f:
            key, _, value = line.partition(":")
            out[key.strip()] = value.strip()
    return out


class KernelRun:
    """The sample's process model: fork one child per CPU, pin it, run the enabled tests."""

    def __init__(self, sys_, cfg: Config) -> None:
        self.sys = sys_
        self.cfg = cfg
        self.nprocs = cfg.num_procs or _online_cpus()
        self.trigger = cfg.trigger
        if self.trigger == TRIGGER_AUTO:
            self.trigger = TRIGGER_NATIVE if trigger.native_available() else TRIGGER_PYTHON

    def run(self) -> RunResult:
        cfg = self.cfg
        cpu_node = list(self.sys.topology.cpu_node)
        result = RunResult("kernel", cfg, cpu_node, trigger=self.trigger)
        if cfg.parent_cpu is not None:
            _pin(cfg.parent_cpu)
        _, parent_node = _getcpu()
        setup = Setup(self.sys, cfg)
        cpu0_node = cpu_node[0] if cpu_node else 0
        try:
            setup.create_maps(cpu0_node if cfg.numa_node == NUMA_AUTO else parent_node)
            baseline = self.measure_baseline(setup) if cfg.baseline else {}
            setup.load_and_attach()
            setup.fill_lpm_trie()
            setup.pre_test()
            result.results = self.fork_children(setup)
            result.alloc_stats = {name: {"memlock": int(read_fdinfo(fd).get("memlock", 0))}
                                  for name, fd in setup.no_prealloc_fds().items()}
        finally:
            setup.close()
        for r in result.results:
            r.baseline_rate = baseline.get((r.test, r.cpu))
            if r.test == Test.INNER_LRU_HASH_PREALLOC.name and r.cpu == 0:
                r.map_node = parent_node if not r.map_flags else r.numa_node
        if baseline:
            result.notes.extend(overhead_notes(result.results))
        if cfg.c_trigger:
            result.notes.extend(c_trigger_notes(result.results, self.trigger))
        return result

    def measure_baseline(self, setup: Setup) -> dict[tuple[str, int], int]:
        """Each CPU's trigger loop with nothing attached: what Python + the syscall cost."""
        out: dict[tuple[str, int], int] = {}
        old = os.sched_getaffinity(0)
        try:
            for cpu in range(self.nprocs):
                _pin(cpu)
                for t in self.cfg.tests:
                    run_n = kernel_trigger(t, setup.lru_hash_lookup_test_entries,
                                           self.trigger)
                    start = time.monotonic_ns()
                    run_n(self.cfg.max_cnt)
                    out[(t.name, cpu)] = rate_of(self.cfg.max_cnt, time.monotonic_ns() - start)
        finally:
            os.sched_setaffinity(0, old)
        return out

    def fork_children(self, setup: Setup) -> list[Result]:
        cfg = self.cfg
        read_end, write_end = os.pipe()
        pids = []
        sys.stdout.flush()
        sys.stderr.flush()
        for cpu in range(self.nprocs):
            pid = os.fork()
            if pid == 0:  # the child: never return into the caller's stack
                status = 1
                try:
                    os.close(read_end)
                    status = self.child(setup, cpu, write_end)
                except BaseException as exc:  # report, then leave without cleanup
                    sys.stderr.write(f"{cpu}: map-perf child failed: {exc!r}\n")
                finally:
                    sys.stdout.flush()
                    sys.stderr.flush()
                    os._exit(status)
            pids.append(pid)
        os.close(write_end)
        total = self.nprocs * len(cfg.tests)
        progress = report.Progress("map-perf (kernel)", total, enabled=cfg.progress)
        results = _collect(read_end, progress)
        failed = []
        for cpu, pid in enumerate(pids):
            _, status = os.waitpid(pid, 0)
            if status != 0:
                failed.append(cpu)
        progress.finish()
        if failed:
            raise RuntimeError(f"map-perf children for CPUs {failed} failed (see stderr)")
        return results

    def compare_c_trigger(self, res: Result, run_n: Callable[[int], None], test: Test,
                          cpu: int, lookup_entries: int) -> None:
        """C and pybpf trigger loops, alternated COMPARE_ROUNDS times; the best of each.

        Alternating on the same CPU against the same attached program and maps puts both
        under the same conditions; the best rate of each is the least disturbed one, and the
        rate per second of own CPU time (user + system, where the programs run) is not
        disturbed by other processes at all.
        """
        cfg = self.cfg
        per_event = TESTS[test].per_event
        pybpf, c = [], []
        for round_ in range(COMPARE_ROUNDS):
            c.append(run_c_trigger(cfg.c_trigger, test, cpu, cfg.max_cnt, lookup_entries,
                                   echo=not cfg.json and round_ == 0))
            start, cpu_start = time.monotonic_ns(), time.thread_time_ns()
            run_n(cfg.max_cnt)
            pybpf.append((rate_of(cfg.max_cnt, time.monotonic_ns() - start, per_event),
                          rate_of(cfg.max_cnt, time.thread_time_ns() - cpu_start, per_event)))
        res.pybpf_best_rate = max(r for r, _ in pybpf)
        res.pybpf_best_cpu_rate = max(r for _, r in pybpf)
        res.c_trigger_rate = max(r for r, _ in c)
        res.c_trigger_cpu_rate = max(r for _, r in c)

    def child(self, setup: Setup, cpu: int, out_fd: int) -> int:
        cfg = self.cfg
        _pin(cpu)  # like the sample, a CPU that does not exist leaves the child unpinned
        for t in cfg.tests:
            td = TESTS[t]
            extra: dict = {}
            if t == Test.INNER_LRU_HASH_PREALLOC:
                if cpu:
                    _, node = _getcpu()
                    fd = setup.create_inner_map(cpu, node)
                    extra["map_node"] = node if not setup.inner_numa[cpu][1] else \
                        setup.inner_numa[cpu][1]
                else:
                    fd = setup.inner_fds[0]
                info = read_fdinfo(fd)
                extra["map_flags"] = int(info["map_flags"], 16)
                extra["numa_node"] = setup.inner_numa[cpu][1]
            run_n = kernel_trigger(t, setup.lru_hash_lookup_test_entries, self.trigger)
            start = time.monotonic_ns()
            run_n(cfg.max_cnt)
            elapsed = time.monotonic_ns() - start
            rate = rate_of(cfg.max_cnt, elapsed, td.per_event)
            res = Result(cpu, t.name, td.line(cpu, rate), rate, td.unit, cfg.max_cnt, elapsed,
                         **extra)
            if not cfg.json:
                sys.stdout.write(res.line + "\n")
                sys.stdout.flush()
            if cfg.c_trigger:
                self.compare_c_trigger(res, run_n, t, cpu, setup.lru_hash_lookup_test_entries)
            os.write(out_fd, (json.dumps(asdict(res)) + "\n").encode())
        return 0


def run_c_trigger(path: str, test: Test, cpu: int, max_cnt: int, lookup_entries: int,
                  echo: bool) -> tuple[int, int]:
    """Run tools/map_perf_trigger for one test on ``cpu``: its (wall, CPU-time) rates."""
    import subprocess

    out = subprocess.run([path, str(test.value), str(cpu), str(max_cnt), str(lookup_entries)],
                         check=True, capture_output=True, text=True).stdout
    if echo:
        sys.stdout.write(out)
        sys.stdout.flush()
    match = re.search(r" (\d+) (?:events|lookups) per sec \(C trigger; (\d+) per CPU", out)
    if match is None:
        raise RuntimeError(f"{path} printed no rate: {out!r}")
    return int(match.group(1)), int(match.group(2))


def c_trigger_notes(results: Sequence[Result], kind: str) -> list[str]:
    """pybpf's rate against the C trigger's, test by test, CPU by CPU."""
    notes = []
    for r in sorted(results, key=lambda r: (Test[r.test].value, r.cpu)):
        if r.c_trigger_rate:
            notes.append(
                f"{r.cpu}:{r.test}: best of {COMPARE_ROUNDS}, pybpf ({kind} trigger) vs C: "
                f"{r.pybpf_best_rate} vs {r.c_trigger_rate} {r.unit}/s "
                f"({100 * r.pybpf_best_rate / r.c_trigger_rate:.1f}%); per CPU-second "
                f"{r.pybpf_best_cpu_rate} vs {r.c_trigger_cpu_rate} "
                f"({100 * r.pybpf_best_cpu_rate / r.c_trigger_cpu_rate:.1f}%)")
    return notes


def _pin(cpu: int) -> None:
    try:
        os.sched_setaffinity(0, {cpu})
    except OSError:
        pass  # the sample ignores sched_setaffinity's result


def _collect(read_fd: int, progress: report.Progress) -> list[Result]:
    """Read the children's result records until every child has closed the pipe."""
    buf = b""
    results: list[Result] = []
    with os.fdopen(read_fd, "rb", buffering=0) as f:
        while True:
            select.select([f], [], [], 1.0)
            chunk = f.read(65536)
            if chunk == b"":
                break
            if chunk is None:
                continue
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for line in lines:
                results.append(Result(**json.loads(line)))
                progress.update(len(results), note=results[-1].test)
    return results


def overhead_notes(results: Sequence[Result]) -> list[str]:
    """How much of each event the trigger loop itself costs, from --baseline."""
    notes = []
    for r in sorted(results, key=lambda r: (Test[r.test].value, r.cpu)):
        if not r.baseline_rate:
            continue
        per_event = TESTS[Test[r.test]].per_event
        event_ns = 1e9 * per_event / r.rate
        empty_ns = 1e9 / r.baseline_rate
        notes.append(f"{r.cpu}:{r.test}: {event_ns:.0f} ns/event with the program, "
                     f"{empty_ns:.0f} ns/event for the bare trigger loop (no program attached)")
    return notes


# -- emulated backend ----------------------------------------------------------------------

class EmulatedRun:
    """One thread per emulated CPU, each bound to its CPU, running the programs through the
    interpreter. Figures are wall-clock rates of each worker while all run under one GIL."""

    def __init__(self, sys_, cfg: Config) -> None:
        self.sys = sys_
        self.cfg = cfg
        self.nprocs = cfg.num_procs or sys_.num_possible_cpus
        if self.nprocs > sys_.num_possible_cpus:
            raise SystemExit(f"pybpf map-perf: NUM_PROCS {self.nprocs} exceeds the emulated "
                             f"machine's {sys_.num_possible_cpus} CPUs (use --cpus)")

    def run(self) -> RunResult:
        cfg = self.cfg
        cpu_node = list(self.sys.topology.cpu_node)
        result = RunResult("emulated", cfg, cpu_node)
        parent_cpu = cfg.parent_cpu if cfg.parent_cpu is not None else 0
        setup = Setup(self.sys, cfg)
        try:
            with self.sys.on_cpu(parent_cpu):
                setup.create_maps(cpu_node[0] if cfg.numa_node == NUMA_AUTO
                                  else cpu_node[parent_cpu])
                setup.load_and_attach()
                setup.fill_lpm_trie()
                setup.pre_test()
            result.results = self.run_workers(setup)
            self.sys.machine.step()  # let a grace period end, as it would by now
            result.alloc_stats = {name: allocator_counters(self.sys.map_stats(fd))
                                  for name, fd in setup.no_prealloc_fds().items()}
        finally:
            setup.close()
        result.notes.append(
            f"emulated backend: {len(cpu_node)} CPUs on {max(cpu_node) + 1} NUMA node(s); "
            f"{self.nprocs} worker threads share one Python interpreter (one runs at a time), "
            "so each rate is interpreter events per second of that worker's own CPU time "
            "(the JSON has the wall-clock rate too); these are not kernel figures")
        return result

    def run_workers(self, setup: Setup) -> list[Result]:
        cfg = self.cfg
        results: list[Result] = []
        errors: list[BaseException] = []
        done = [0] * self.nprocs
        lock = threading.Lock()
        start_line = threading.Barrier(self.nprocs)

        def worker(cpu: int) -> None:
            try:
                with self.sys.on_cpu(cpu):
                    for t in cfg.tests:
                        res = self.run_test(setup, t, cpu, done, start_line)
                        with lock:
                            results.append(res)
                            if not cfg.json:
                                sys.stdout.write(result_line(res, "emulated") + "\n")
                                sys.stdout.flush()
            except threading.BrokenBarrierError:
                pass  # another worker failed; its error is reported
            except BaseException as exc:
                errors.append(exc)
                start_line.abort()

        threads = [threading.Thread(target=worker, args=(cpu,), name=f"map-perf-cpu{cpu}")
                   for cpu in range(self.nprocs)]
        total = self.nprocs * len(cfg.tests) * cfg.max_cnt
        progress = report.Progress("map-perf (emulated) events", total, enabled=cfg.progress)
        for th in threads:
            th.start()
        while any(th.is_alive() for th in threads):
            time.sleep(0.1)
            progress.update(sum(done))
        for th in threads:
            th.join()
        progress.update(sum(done))
        progress.finish()
        if errors:
            raise errors[0]
        return results

    def run_test(self, setup: Setup, t: Test, cpu: int, done: list[int],
                 start_line: threading.Barrier) -> Result:
        cfg = self.cfg
        td = TESTS[t]
        extra: dict = {}
        if t == Test.INNER_LRU_HASH_PREALLOC:
            if cpu:
                setup.create_inner_map(cpu, self.sys.topology.cpu_node[cpu])
            flags, node = setup.inner_numa[cpu]
            extra["map_flags"] = self.sys.map_get_info(setup.inner_fds[cpu]).map_flags
            extra["numa_node"] = node
        fire = self.sys.trigger_tracepoint
        name = f"sys_enter_{td.syscall}"
        events = emulated_events(td, setup.lru_hash_lookup_test_entries,
                                 getattr(self.sys.machine, "user_memory", None))
        chunk = max(1, min(1000, cfg.max_cnt // 20))
        left = cfg.max_cnt
        start_line.wait()  # every worker starts the timed loop together, as forked children do
        start, cpu_start = time.monotonic_ns(), time.thread_time_ns()
        while left:
            n = min(chunk, left)
            for record in itertools.islice(events, n):
                fire("syscalls", name, record)
            left -= n
            done[cpu] += n
        elapsed = time.monotonic_ns() - start
        busy = time.thread_time_ns() - cpu_start
        if t == Test.INNER_LRU_HASH_PREALLOC:
            # Only this CPU uses its inner map, so its counts are final now.
            stats = self.sys.map_stats(setup.inner_fds[cpu])
            extra["map_node"] = stats["numa_node"]
            extra["local_accesses"], extra["remote_accesses"] = \
                stats["access_by_cpu"].get(cpu, (0, 0))
        # The workers share one interpreter (the GIL runs one at a time), so the rate is per
        # second of this worker's own CPU time; the wall-clock rate is kept beside it.
        rate = rate_of(cfg.max_cnt, busy, td.per_event)
        return Result(cpu, t.name, td.line(cpu, rate), rate, td.unit, cfg.max_cnt, busy,
                      wall_rate=rate_of(cfg.max_cnt, elapsed, td.per_event), **extra)


def sys_enter_record(syscall: str, args: Sequence[int] = ()) -> bytes:
    """The raw record of tracepoint syscalls/sys_enter_<syscall> (trace_event_raw_sys_enter):
    common fields (type, flags, preempt_count, pid), __syscall_nr, args[6]."""
    padded = [a & 0xFFFFFFFFFFFFFFFF for a in args] + [0] * (6 - len(args))
    return struct.pack("=HBBii4x6Q", 0, 0, 0, threading.get_native_id(),
                       trigger.X86_64_NR[syscall], *padded)


def emulated_events(td: TestDef, lookup_entries: int, user_memory=None):
    """The tracepoint record of each event, in order (an endless iterator).

    For connect, each sockaddr_in6 is placed in the emulated machine's user memory and the
    record carries its address, as the kernel's record carries the user pointer.
    """
    if td.syscall == "connect":
        records = []
        for key in lru_lookup_keys(lookup_entries):
            addr = sockaddr_in6(td.tcase, key)
            records.append(sys_enter_record("connect", (-1, user_memory.map(addr), len(addr))))
        return itertools.cycle(records)
    args = (0,) if td.syscall in ("getpgid", "getppid") else ()
    return itertools.repeat(sys_enter_record(td.syscall, args))


if __name__ == "__main__":
    sys.exit(main())
