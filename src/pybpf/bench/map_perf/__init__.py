"""``pybpf map-perf``: the kernel's samples/bpf/map_perf_test, on both backends.

Rules this package keeps (the sample's, see perf-tests-and-suites.md section 1):
- Arguments ``TEST_FLAGS [NUM_PROCS] [NUM_ENTRIES] [MAX_CNT]`` mean what they mean there:
  TEST_FLAGS is a bitmask of tests (0 = all), NUM_PROCS defaults to the online CPUs,
  NUM_ENTRIES > 0 resizes the maps of the enabled tests (and the run-time inner LRU maps),
  MAX_CNT (default 10000) is the number of trigger syscalls per test per CPU.
- The per-event map work is the modern sample's (10 update/lookup/delete rounds for the hash
  tests, 32 LPM lookups, 64 hash/array lookups, one LRU update, 32 LRU lookups); the programs
  are in ``progs``. The LPM trie is really filled (the sample fills the wrong map).
- Output lines are the sample's, e.g. ``5:inner_lru_hash_map_perf pre-alloc 1628380 events per
  sec``; rate = MAX_CNT * 1e9 (* 64 for the two lookup tests) // elapsed ns, integer.
- Kernel backend: programs on syscall tracepoints, one forked process per CPU pinned with
  sched_setaffinity, each calling the trigger syscall MAX_CNT times per test. ``--trigger``
  picks the loop (trigger.py): ``native`` (x86-64: machine code, no Python per event; the
  default where it works) or ``python`` (CPython's itertools loop, ~30-190 ns more per event).
  ``--baseline`` times the bare loop, ``--c-trigger`` compares with a C loop on the same CPU.
- Emulated backend: one task per emulated CPU (``on_cpu``) under the virtual-time scheduler,
  each running the same programs via ``trigger_tracepoint``; rates are modeled events per
  second of each CPU's virtual clock, labelled emulated, with the host's own rate beside.
  The NUMA test adds each CPU's remote-access share of its inner map, from the machine's NUMA
  accounting. ``--modeled-time off`` runs them with the timing model off: the rates are then
  the host's, events per second of the host CPU time each CPU's task ran; with
  ``--processes`` too, each CPU's task runs in a forked process pinned to a host CPU, the
  maps in a shared segment (tests whose maps a segment holds), and each test's aggregate
  rate over all processes is reported (emulated_run.py).

Modules: ``config`` (the test table, ``Config``, the arguments), ``testbed`` (maps and programs
through the System interface), ``kernel_run``, ``emulated_run``, ``results`` (lines, tables,
JSON, plot) and ``progs`` (the BPF programs). ``Config`` and ``run(cfg)`` are the API.
"""

from __future__ import annotations

import argparse

from ...commands import UsageError
from . import config as _config
from .config import *  # noqa: F403  (its __all__: the tests, their defaults, Config)
from .config import Config, backend_of, config_from_args, validate
from .emulated_run import EmulatedRun, shared_segment_size
from .kernel_run import KernelRun
from .results import Result, RunResult, emit, rate_of, result_line

__all__ = [*_config.__all__, "Result", "RunResult", "rate_of", "result_line", "run",
           "run_from_args"]


def run(cfg: Config) -> RunResult:
    """One map-perf run on the backend ``cfg`` names (``--cpus``/``--nodes``/``--htab-mem``/
    ``--profile``/``--cache-scale`` imply the emulated one)."""
    from ...backends import system

    kwargs = {}
    if cfg.cpus is not None:
        kwargs["cpus"] = cfg.cpus
    if cfg.nodes is not None:
        kwargs["nodes"] = cfg.nodes
    if cfg.htab_mem is not None:
        kwargs["htab_mem"] = cfg.htab_mem
    if cfg.profile is not None:
        kwargs["profile"] = cfg.profile
    if cfg.cache_scale != 1.0:
        kwargs["cache_scale"] = cfg.cache_scale
    cfg.backend = backend_of(cfg)
    if cfg.backend == "emulated":
        # its rates are modeled time unless --modeled-time off (PYBPF_NO_MODELED_TIME aside)
        kwargs["modeled_time"] = cfg.modeled_time
        if cfg.processes:
            from ... import shared
            from ..args import emulated_machine

            ncpus = emulated_machine(cfg.cpus, cfg.nodes).num_possible_cpus
            kwargs["shared"] = shared.Segment.create(None, shared_segment_size(cfg, ncpus))
    sys_ = system(cfg.backend, **kwargs)
    if sys_.name == "kernel":
        return KernelRun(sys_, cfg).run()
    return EmulatedRun(sys_, cfg).run()


def run_from_args(ns: argparse.Namespace) -> int:
    """``pybpf map-perf``: validate what argparse cannot (a ``UsageError``: exit status 2),
    run, report."""
    cfg = config_from_args(ns)
    cfg.backend = backend_of(cfg)
    problem = validate(cfg)
    if problem:
        raise UsageError(problem)
    result = run(cfg)
    emit(result, cfg)
    return 0
