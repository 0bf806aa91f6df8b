"""map-perf's tests, maps and arguments: the sample's test table (enum test_type, the maps of
map_perf_test.bpf.c, which program and output line each test has), the run's ``Config``, and
the command line that fills it (checked before anything runs)."""

from __future__ import annotations

import argparse
import enum
import os
import re
from dataclasses import dataclass
from typing import Any

from ...emulated import ENGINES, HTAB_MEM_DESIGNS, native_missing
from ...uapi import MapFlags, MapType
from .. import trigger
from ..args import (
    MAX_EMULATED_CPUS,
    U32_MAX,
    emulated_machine,
    int_arg,
    plot_arg,
    profile_arg,
    profile_help,
)

__all__ = ["ALL_TESTS_MASK", "COMPARE_ROUNDS", "Config", "EMULATED_LABEL", "MAP_DEFS",
    "MAX_NR_CPUS", "NUMA_AUTO", "NUMA_NONE", "TESTS", "TRIGGER_AUTO",
    "TRIGGER_NATIVE", "TRIGGER_PYTHON", "Test", "configure_parser"]

MAX_NR_CPUS = 1024  # slots of array_of_lru_hashs, as in the sample
MAX_NUMNODES = 1024  # the kernel's largest (CONFIG_NODES_SHIFT 10)
DEFAULT_MAX_CNT = 10000  # the sample's default since Sept 2022
LRU_LOOKUP_BATCH = 32  # keys looked up per LRU_HASH_LOOKUP event
EMULATED_LABEL = "[emulated]"
COMPARE_ROUNDS = 5  # --c-trigger: the C and pybpf loops alternated this many times
# The line tools/map_perf_trigger.c prints: wall-clock rate, then rate per CPU-second.
C_TRIGGER_LINE = re.compile(r" (\d+) (?:events|lookups) per sec \(C trigger; (\d+) per CPU")


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
    prog: str  # program name in progs.BUILDERS
    label: str  # the output line between "cpu:" and the rate
    unit: str = "events"
    per_event: int = 1  # the lookup tests print lookups: rate * 64
    tcase: int | None = None  # connect() test case of the LRU tests

    def line(self, cpu: int | str, rate: int) -> str:
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
    htab_mem: str | None = None  # emulated: one of memalloc.HTAB_MEM_DESIGNS
    progress: bool = True
    profile: Any = None  # emulated: the machine profile (a name, a file or a Profile)
    cache_scale: float = 1.0  # emulated: modeled caches scaled with a scaled-down experiment
    object: str | None = None  # a clang-built object whose programs replace the assembled
    engine: str | None = None  # emulated: what runs the programs (default: the system's, jit)
    modeled_time: bool = True  # emulated: rates on the timing model; False: host rates only
    processes: bool = False  # emulated: each CPU's task in a forked process, maps shared
    # emulated --processes: the last this many lock holds of each test and process, recorded
    # (pybpf.shared.lock_trace) into RunResult.lock_traces; 0: none recorded
    lock_trace: int = 0

    def max_entries(self, name: str) -> int:
        """The sample's fixup_map: NUM_ENTRIES resizes the enabled tests' maps."""
        if self.num_map_entries > 0 and any(TESTS[t].map_name == name for t in self.tests):
            return self.num_map_entries
        return MAP_DEFS[name].max_entries

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
    valid = (f"use 0 for all, or a sum of bits 1<<t for t in 0-{len(Test) - 1} "
             f"(1 to {ALL_TESTS_MASK}; e.g. 512 = INNER_LRU_HASH_PREALLOC)")
    if value < 0:
        raise argparse.ArgumentTypeError(f"TEST_FLAGS {value} is negative: {valid}")
    if value & ~ALL_TESTS_MASK:
        raise argparse.ArgumentTypeError(
            f"TEST_FLAGS {value} has bits outside the {len(Test)} tests "
            f"({value & ~ALL_TESTS_MASK:#x}): {valid}")
    return value


def _numa_arg(text: str) -> str:
    if text in (NUMA_AUTO, NUMA_NONE):
        return text
    try:
        node = int(text)
    except ValueError:
        node = -1
    if not 0 <= node < MAX_NUMNODES:
        raise argparse.ArgumentTypeError(
            f"--numa-node takes 'auto', 'none' or a node number 0-{MAX_NUMNODES - 1}, "
            f"got {text!r}")
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
                        type=int_arg("NUM_PROCS", 0, MAX_NR_CPUS, "the outer map's slots"),
                        default=0, help="processes, one per CPU 0..N-1 (default, 0: online "
                                        f"CPUs; at most {MAX_NR_CPUS})")
    parser.add_argument("num_map_entries", metavar="NUM_ENTRIES", nargs="?",
                        type=int_arg("NUM_ENTRIES", 0, U32_MAX, "max_entries is a u32"),
                        default=0,
                        help="max_entries of the enabled tests' maps (default, 0: as declared)")
    parser.add_argument("max_cnt", metavar="MAX_CNT", nargs="?",
                        type=int_arg("MAX_CNT", 1, U32_MAX, "the sample's u32 max_cnt"),
                        default=DEFAULT_MAX_CNT,
                        help=f"trigger syscalls per test per CPU (default {DEFAULT_MAX_CNT})")
    parser.add_argument("--backend", choices=("kernel", "emulated"), default=None,
                        help="default: kernel where bpf(2) is allowed, else emulated")
    parser.add_argument("--cpus", type=int_arg("--cpus", 1, MAX_EMULATED_CPUS,
                                               "the outer map's slots"), default=None,
                        help="emulated: CPUs of the declared machine (at most "
                             f"{MAX_EMULATED_CPUS})")
    parser.add_argument("--nodes", type=int_arg("--nodes", 1, MAX_EMULATED_CPUS,
                                                "one CPU per node at least"), default=None,
                        help="emulated: NUMA nodes of the declared machine")
    parser.add_argument("--numa-node", dest="numa_node", type=_numa_arg, default=NUMA_AUTO,
                        help="inner LRU maps: 'auto' each on its CPU's node (the 2017 patch), "
                             "'none' where created (before it), or node N")
    parser.add_argument("--parent-cpu", dest="parent_cpu", type=int_arg("--parent-cpu", 0),
                        default=None, help="CPU the parent runs on while creating the maps "
                                           "(the patch's 'taskset -c 10')")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--plot", metavar="FILE.png", type=plot_arg, default=None,
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
    parser.add_argument("--htab-mem", dest="htab_mem", choices=HTAB_MEM_DESIGNS,
                        default=None, help="emulated: element memory of non-preallocated "
                                           "hash maps: bpf_mem_alloc (6.1+), the older "
                                           "kmalloc + call_rcu per free, or bpf_mem_alloc with "
                                           "call_rcu per free (the 2022 series before "
                                           "0fd7c5d43339)")
    parser.add_argument("--profile", type=profile_arg, default=None, help=profile_help())
    parser.add_argument("--cache-scale", dest="cache_scale", type=_cache_scale_arg,
                        default=1.0, help="emulated: multiply the profile's cache sizes by "
                                          "this (0 < x <= 1), for NUM_ENTRIES scaled down as "
                                          "much, so working set and caches keep their ratio")
    parser.add_argument("--object", metavar="FILE.o", default=None,
                        help="load the programs from this clang-built BPF object (the C "
                             "twin: tests/objects/map_perf.c) instead of the assembled ones")
    parser.add_argument("--engine", choices=ENGINES, default=None,
                        help="emulated: what runs the programs: the JIT (default), the "
                             "reference interpreter, or the native tier (needs llvmlite); "
                             "modeled rates are the same on each, host rates are not")
    parser.add_argument("--modeled-time", dest="modeled_time", choices=("on", "off"),
                        default="on",
                        help="emulated: 'on' (default): rates are modeled time on --profile; "
                             "'off': no timing model, each rate is events per second of the "
                             "host CPU time the CPU's task ran (the emulator's own speed)")
    parser.add_argument("--processes", action="store_true",
                        help="emulated, with --modeled-time off: run each CPU's task in a "
                             "forked process of its own, pinned to a host CPU, the maps in a "
                             "shared-memory segment (pybpf.shared), so the run uses the host's "
                             "CPUs")
    parser.add_argument("--no-progress", dest="progress", action="store_false",
                        help="no progress lines on stderr")
    return parser


def _cache_scale_arg(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--cache-scale takes a number, got {text!r}") from None
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"--cache-scale must be in (0, 1], got {text}")
    return value


def config_from_args(ns: argparse.Namespace) -> Config:
    return Config(test_flags=ns.test_flags, num_procs=ns.num_procs,
                  num_map_entries=ns.num_map_entries, max_cnt=ns.max_cnt,
                  backend=ns.backend, cpus=ns.cpus, nodes=ns.nodes, numa_node=ns.numa_node,
                  parent_cpu=ns.parent_cpu, json=ns.json, plot=ns.plot,
                  baseline=ns.baseline, c_trigger=ns.c_trigger, trigger=ns.trigger,
                  htab_mem=ns.htab_mem, progress=ns.progress, object=ns.object,
                  profile=ns.profile, cache_scale=ns.cache_scale, engine=ns.engine,
                  modeled_time=ns.modeled_time == "on", processes=ns.processes)


def backend_of(cfg: Config) -> str:
    """The backend a run uses: ``--backend``, else the emulated one where an emulated machine
    or allocator is asked for, else the default (PYBPF_BACKEND, else kernel where allowed)."""
    if cfg.backend is not None:
        return cfg.backend
    if cfg.cpus is not None or cfg.nodes is not None or cfg.htab_mem is not None \
            or cfg.profile is not None or cfg.cache_scale != 1.0 or cfg.engine is not None \
            or not cfg.modeled_time or cfg.processes:
        return "emulated"
    from ...backends import default_backend

    return default_backend()


def validate(cfg: Config) -> str | None:
    """What is wrong with the combination of arguments (``cfg.backend`` resolved), or None.
    Runs before anything is created or run; checks that need a program run (the C trigger)
    come last."""
    if cfg.backend == "kernel":
        if cfg.cpus is not None or cfg.nodes is not None:
            return ("--cpus/--nodes declare an emulated machine; drop them or use --backend "
                    "emulated")
        if cfg.htab_mem:
            return ("--htab-mem picks the emulated allocator design; this kernel's "
                    "non-preallocated maps use bpf_mem_alloc")
        if cfg.profile is not None or cfg.cache_scale != 1.0:
            return ("--profile and --cache-scale shape the emulated machine's modeled time; "
                    "drop them or use --backend emulated")
        if cfg.engine is not None:
            return "--engine picks what runs the emulated programs; drop it or use --backend " \
                   "emulated"
        if not cfg.modeled_time:
            return ("--modeled-time off switches the emulated machine's timing model off; drop "
                    "it or use --backend emulated")
        if cfg.processes:
            return ("--processes runs the emulated CPUs as processes (the kernel backend's "
                    "CPUs are processes already); drop it or use --backend emulated")
        cpus = os.cpu_count() or 1
    else:
        if cfg.baseline or cfg.c_trigger:
            return "--baseline and --c-trigger measure the kernel's trigger loop; drop them"
        if not cfg.modeled_time and (cfg.profile is not None or cfg.cache_scale != 1.0):
            return ("--profile and --cache-scale shape modeled time, which --modeled-time off "
                    "switches off: drop them (--cpus/--nodes declare the machine)")
        if cfg.processes:
            problem = processes_problem(cfg)
            if problem:
                return problem
        if cfg.engine == "native" and native_missing():
            return f"--engine native: {native_missing()}"
        try:
            cpus = emulated_machine(cfg.cpus, cfg.nodes, cfg.profile).num_possible_cpus
        except ValueError as exc:
            return str(exc)
        if cfg.num_procs > cpus:
            return (f"NUM_PROCS {cfg.num_procs} exceeds the emulated machine's {cpus} CPUs: "
                    f"give --cpus {cfg.num_procs} or fewer processes")
    if cfg.parent_cpu is not None and cfg.parent_cpu >= cpus:
        return f"--parent-cpu {cfg.parent_cpu}: the machine has CPUs 0-{cpus - 1}"
    if cfg.trigger == TRIGGER_NATIVE and not trigger.native_available():
        return f"--trigger native: {trigger.native_unavailable_reason()}"
    if cfg.object:
        problem = object_problem(cfg.object, cfg.tests)
        if problem:
            return problem
    if cfg.c_trigger:
        return c_trigger_problem(cfg.c_trigger)
    return None


def test_maps(test: Test) -> tuple[str, ...]:
    """Every map test ``test``'s program uses."""
    td = TESTS[test]
    return LRU_PROG_MAPS if td.syscall == "connect" else td.maps


def processes_problem(cfg: Config) -> str | None:
    """What stops ``--processes`` (the emulated backend's), or None. Every map of the
    sample lives in the shared segment but array_of_lru_hashs, which stays each process's
    (a copy made at the fork): the programs only read it and a CPU's task writes only its
    own slot, whose inner map is the segment's."""
    from ... import shared

    if cfg.modeled_time:
        return ("--processes needs --modeled-time off: the CPUs' modeled clocks run on one "
                "scheduler, in one process")
    if not shared.available():
        return f"--processes: {shared.INSTALL_HINT}"
    if not hasattr(os, "fork") or not hasattr(os, "sched_setaffinity"):
        return "--processes needs fork() and sched_setaffinity() (Linux)"
    return None


def object_problem(path: str, tests: list[Test]) -> str | None:
    """Whether ``path`` is an object with the tests' programs, each on its tracepoint and
    using only maps of the sample (by name)."""
    from ...bpf_object import ObjectError, ObjectSpec

    try:
        spec = ObjectSpec.from_file(path)
    except (OSError, ObjectError) as exc:
        return f"--object {path}: {exc}"
    for test in tests:
        td = TESTS[test]
        prog = spec.programs.get(td.prog)
        want = f"syscalls/sys_enter_{td.syscall}"
        if prog is None or prog.attach_target != want:
            return (f"--object {path}: test {test.name} needs a program {td.prog} in "
                    f"SEC(\"tracepoint/{want}\"); compile tests/objects/map_perf.c")
        unknown = sorted(set(prog.maps) - set(MAP_DEFS))
        if unknown:
            return (f"--object {path}: program {td.prog} uses maps {unknown} that "
                    "map_perf_test does not have")
    return None


def c_trigger_problem(path: str) -> str | None:
    """Whether ``path`` is tools/map_perf_trigger.c built: one trigger call of HASH_PREALLOC on
    CPU 0 must print its rate line."""
    import subprocess

    build = "build it with cc -O2 -o map_perf_trigger tools/map_perf_trigger.c"
    if not os.access(path, os.X_OK) or os.path.isdir(path):
        return f"--c-trigger {path}: not an executable; {build}"
    try:
        out = subprocess.run([path, str(Test.HASH_PREALLOC.value), "0", "1",
                              str(LRU_LOOKUP_BATCH)], capture_output=True, text=True,
                             timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"--c-trigger {path}: cannot run it ({exc}); {build}"
    if out.returncode or C_TRIGGER_LINE.search(out.stdout) is None:
        return (f"--c-trigger {path}: a trial run (TEST 0, CPU 0, MAX_CNT 1) printed no "
                f"map-perf rate line (exit status {out.returncode}); {build}")
    return None
