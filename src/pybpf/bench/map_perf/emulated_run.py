"""map-perf on the emulated backend: one thread per emulated CPU, bound to it with ``on_cpu``,
fires the programs through ``trigger_tracepoint`` MAX_CNT times per test; rates are
interpreter figures per second of each worker's own CPU time, never scaled."""

from __future__ import annotations

import itertools
import sys
import threading
import time

from .. import report
from ..common import sys_enter_record
from .config import NUMA_AUTO, TESTS, Config, Test, TestDef
from .results import Result, RunResult, allocator_counters, rate_of, result_line
from .testbed import Setup, lru_lookup_keys, sockaddr_in6


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
