"""map-perf on the kernel backend: the sample's process model. The parent creates the maps and
attaches the programs; one child per CPU, pinned there, calls the trigger syscall MAX_CNT times
per test and reports each rate over a pipe (``--baseline``, ``--c-trigger`` add the bare and
the C trigger loop on the same CPU)."""

from __future__ import annotations

import json
import os
import select
import sys
import time
from collections.abc import Callable
from dataclasses import asdict

from ...commands import CommandError
from .. import report, trigger
from ..common import getcpu, pin_to_cpu, read_fdinfo
from ..report import Ratio
from .config import (
    C_TRIGGER_LINE,
    COMPARE_ROUNDS,
    LRU_LOOKUP_BATCH,
    NUMA_AUTO,
    TESTS,
    TRIGGER_AUTO,
    TRIGGER_NATIVE,
    TRIGGER_PYTHON,
    Config,
    Test,
)
from .results import Result, RunResult, c_trigger_notes, overhead_notes, rate_of
from .testbed import Setup, lru_lookup_keys, sockaddr_in6


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
        online = _online_cpus()
        if self.nprocs > online:
            # The sample forks NUM_PROCS children all the same; those past the online CPUs
            # fail to pin and share the CPUs there are.
            extra = (f"child {online} runs" if self.nprocs == online + 1
                     else f"children {online}-{self.nprocs - 1} run")
            note = (f"NUM_PROCS {self.nprocs} exceeds the {online} online CPUs: {extra} "
                    "unpinned, as in the sample; their lines are numbered by child, not by CPU")
            print(f"map-perf: {note}", file=sys.stderr, flush=True)
            result.notes.append(note)
        if cfg.parent_cpu is not None:
            pin_to_cpu(cfg.parent_cpu)
        _, parent_node = getcpu()
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
        # The heartbeat thread ends before the children are forked.
        progress = report.Progress("map-perf (kernel) bare trigger loops",
                                   self.nprocs * len(self.cfg.tests), enabled=self.cfg.progress)
        try:
            with progress:
                for cpu in range(self.nprocs):
                    pin_to_cpu(cpu)
                    for t in self.cfg.tests:
                        progress.note = f"{t.name} on CPU {cpu}"
                        run_n = kernel_trigger(t, setup.lru_hash_lookup_test_entries,
                                               self.trigger)
                        start = time.monotonic_ns()
                        run_n(self.cfg.max_cnt)
                        out[(t.name, cpu)] = rate_of(self.cfg.max_cnt,
                                                     time.monotonic_ns() - start)
                        progress.advance(note=progress.note)
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
                except BrokenPipeError:  # `pybpf map-perf | head`: stop quietly, as the parent
                    status = 0
                except BaseException as exc:  # report, then leave without cleanup
                    sys.stderr.write(f"{cpu}: map-perf child failed: {exc!r}\n")
                finally:
                    try:
                        sys.stdout.flush()
                        sys.stderr.flush()
                    finally:
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
            raise CommandError(f"map-perf: the children for CPUs {failed} failed (their "
                               "errors are above)")
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
        # The rounds' noise, on time per event (report.Ratio's figures: lower is better).
        res.c_trigger_noise, res.c_trigger_cpu_noise = (
            Ratio.of([1 / p[i] for p in pybpf], [1 / r[i] for r in c]).noise for i in (0, 1))

    def child(self, setup: Setup, cpu: int, out_fd: int) -> int:
        cfg = self.cfg
        pin_to_cpu(cpu)  # like the sample, a CPU that does not exist leaves the child unpinned
        for t in cfg.tests:
            td = TESTS[t]
            extra: dict = {}
            if t == Test.INNER_LRU_HASH_PREALLOC:
                if cpu:
                    _, node = getcpu()
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
    match = C_TRIGGER_LINE.search(out)
    if match is None:
        raise RuntimeError(f"{path} printed no rate: {out!r}")
    return int(match.group(1)), int(match.group(2))


def _collect(read_fd: int, progress: report.Progress) -> list[Result]:
    """Read the children's result records until every child has closed the pipe."""
    buf = b""
    results: list[Result] = []
    with os.fdopen(read_fd, "rb", buffering=0) as f:
        while True:
            ready, _, _ = select.select([f], [], [], 1.0)
            if not ready:  # the children are still in a test: say so every few seconds
                progress.update(len(results), progress.note)
                continue
            chunk = f.read(65536)
            if chunk == b"":
                break
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for line in lines:
                results.append(Result(**json.loads(line)))
                progress.update(len(results), note=results[-1].test)
    return results


