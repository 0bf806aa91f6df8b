"""map-perf on the emulated backend: one task per emulated CPU, bound to it with ``on_cpu``,
makes the trigger syscall (``enter_syscall``) MAX_CNT times per test.

Rates are modeled: events per second of the CPU's virtual clock (emulated/machine/timing.py) on the
machine's profile. The tasks run under a virtual-time scheduler (as greenlets of one host
thread, or host threads without the greenlet package), so the figures are the same on every
run whatever the host's load. Each worker stands for a task of its own (pid
``TASK_PID_BASE + cpu``), as the sample's forked children do. The interpreter's own speed is
kept beside each rate (events per second of the host CPU time the task ran), labelled as the
host's.

With modeled time off (``Config.modeled_time`` False) the machine charges nothing and its clocks
stand still, so the CPUs' tasks run one after another on one host thread, with no scheduler
(whose only part would be to ask at every operation whether to hand over), and each rate is
that host rate: how fast the emulator itself runs the sample.

``--processes`` (modeled time off) runs them as the sample runs its children: each CPU's task
in a process forked once the maps and programs are made, pinned to a host CPU (CPU i on the
i-th CPU the run may use, round robin), the maps in an anonymous shared segment
(``EmulatedSystem(shared=...)``, which holds every map of the sample but its array of maps,
each process's copy), so the tasks update the same maps at once on the host's CPUs. The
children start each test together from a barrier and send their results back through a
pipe; the run also reports each test's aggregate: the events of all children over the wall
time from that start to the last child's end of the test.
"""

from __future__ import annotations

import functools
import gc
import itertools
import multiprocessing
import os
import pickle
import selectors
import sys
import threading
import time
from collections.abc import Callable

from ... import shared
from ...emulated import VirtualTimeScheduler
from ...uapi import MapType
from .. import report
from ..common import sys_enter_record
from .config import MAP_DEFS, NUMA_AUTO, TESTS, Config, Test, TestDef, test_maps
from .results import LockTrace, Result, RunResult, allocator_counters, rate_of, result_line
from .testbed import Setup, lru_lookup_keys, sockaddr_in6

TASK_PID_BASE = 1000  # the workers' pids: a fixed base, so hash keys repeat across runs


class EmulatedRun:
    """One task per emulated CPU, each bound to its CPU, running the programs through the
    interpreter under a virtual-time scheduler; rates are modeled."""

    def __init__(self, sys_, cfg: Config) -> None:
        if cfg.modeled_time:
            sys_.machine.require_modeled_time("map-perf's emulated rates")
        self.sys = sys_
        self.cfg = cfg
        if cfg.engine is not None:
            sys_.bpf_engine = cfg.engine  # before the programs load, which compiles them
        self.nprocs = cfg.num_procs or sys_.num_possible_cpus
        if self.nprocs > sys_.num_possible_cpus:
            raise SystemExit(f"pybpf map-perf: NUM_PROCS {self.nprocs} exceeds the emulated "
                             f"machine's {sys_.num_possible_cpus} CPUs (use --cpus)")

    def run(self) -> RunResult:
        cfg = self.cfg
        machine = self.sys.machine
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
            if Test.INNER_LRU_HASH_PREALLOC in cfg.tests:
                # Each child makes its inner map on its own CPU (placed on that CPU's node).
                for cpu in range(1, self.nprocs):
                    with self.sys.on_cpu(cpu):
                        setup.create_inner_map(cpu, cpu_node[cpu])
            # The children start together: every clock moves on to the latest one.
            start = max(machine.timing.clock)
            for cpu in range(self.nprocs):
                machine.timing.wait_until(cpu, start, "idle")
            # The maps made for every test are frozen out of the garbage collector while the
            # tests run: a full collection (over all of them) would land in whichever test
            # happens to be running and charge its host rate; each test's own garbage is
            # still collected.
            gc.collect()
            gc.freeze()
            try:
                if cfg.processes:
                    result.results = self.run_processes(setup, result)
                else:
                    result.results = self.run_workers(setup)
            finally:
                gc.unfreeze()
            machine.step()  # let the grace periods end, as they would by now
            if not cfg.processes:  # a segment's maps have no allocator model
                result.alloc_stats = {name: allocator_counters(self.sys.map_stats(fd))
                                      for name, fd in setup.no_prealloc_fds().items()}
            if cfg.modeled_time:  # RCU samples and grace periods on virtual time
                result.rcu_samples = list(machine.rcu.samples)
                result.grace_periods = list(machine.rcu.gps)
        finally:
            setup.close()
        machine_text = (f"emulated backend: {len(cpu_node)} CPUs on {max(cpu_node) + 1} NUMA "
                        f"node(s)")
        if not cfg.modeled_time:
            result.notes.append(
                f"{machine_text}, modeled time off, programs on the {self.sys.bpf_engine} "
                "engine: each rate is events per second of the host CPU time that CPU's task "
                "ran (the emulator's own speed, which varies from run to run), not a modeled "
                "or a kernel figure")
            return result
        result.notes.append(
            f"{machine_text}, profile {machine.profile.name}, programs on the "
            f"{self.sys.bpf_engine} engine: each rate is modeled events per second of that "
            "CPU's virtual clock (the same on every run); 'host' is the interpreter's own rate "
            "per second of the host CPU time its task ran. Modeled figures are predictions, not "
            "kernel measurements")
        return result

    def run_workers(self, setup: Setup) -> list[Result]:
        cfg = self.cfg
        results: list[Result] = []
        errors: list[BaseException] = []
        done = [0] * self.nprocs
        machine = self.sys.machine
        # Without modeled time nothing is charged, so the scheduler would only run the tasks
        # one after another, asking at every operation whether to hand over: they run one
        # after another on the runner thread, each timed by that thread's CPU clock.
        scheduler = VirtualTimeScheduler(machine.timing, range(self.nprocs),
                                         task_locals=machine.task_locals()) \
            if cfg.modeled_time else None
        host_cpu_ns = scheduler.host_cpu_ns if scheduler is not None \
            else lambda cpu: time.thread_time_ns()

        def worker(cpu: int) -> None:
            with self.sys.on_cpu(cpu):
                machine.set_task(TASK_PID_BASE + cpu)
                for t in cfg.tests:
                    res = self.run_test(setup, t, cpu, done, host_cpu_ns)
                    results.append(res)
                    if not cfg.json:
                        sys.stdout.write(result_line(res, "emulated") + "\n")
                        sys.stdout.flush()

        def run_all() -> None:
            try:
                if scheduler is None:
                    for cpu in range(self.nprocs):
                        worker(cpu)
                    return
                with scheduler:
                    scheduler.run({cpu: functools.partial(worker, cpu)
                                   for cpu in range(self.nprocs)})
            except BaseException as exc:
                errors.append(exc)

        total = self.nprocs * len(cfg.tests) * cfg.max_cnt
        progress = report.Progress("map-perf (emulated) events", total, enabled=cfg.progress)
        runner = threading.Thread(target=run_all, name="map-perf-cpus")
        runner.start()
        while runner.is_alive():
            runner.join(0.1)
            progress.update(sum(done))
        progress.update(sum(done))
        progress.finish()
        if errors:
            raise errors[0]
        return results

    def run_processes(self, setup: Setup, result: RunResult) -> list[Result]:
        """Each CPU's task in a forked child (see the module's doc); the children's results,
        printed by CPU once all are in, and each test's aggregate rate."""
        cfg = self.cfg
        host_cpus = sorted(os.sched_getaffinity(0))
        pinned = [host_cpus[cpu % len(host_cpus)] for cpu in range(self.nprocs)]
        # every test starts in all children at once, so its aggregate is theirs together
        barrier = multiprocessing.get_context("fork").Barrier(self.nprocs)
        children: list[tuple[int, int]] = []
        sys.stdout.flush()
        sys.stderr.flush()
        for cpu in range(self.nprocs):
            out_read, out_write = os.pipe()
            pid = os.fork()
            if pid == 0:  # the child: run, send its results and spans, exit without cleanup
                os.close(out_read)
                status = 0
                try:
                    os.sched_setaffinity(0, {pinned[cpu]})
                    payload = pickle.dumps(self.child_results(setup, cpu, barrier))
                except BaseException as exc:  # noqa: BLE001 - reported by the parent
                    barrier.abort()  # the others stop waiting for this one
                    payload = pickle.dumps(f"{type(exc).__name__}: {exc}")
                    status = 1
                with os.fdopen(out_write, "wb") as out:
                    out.write(payload)
                os._exit(status)
            os.close(out_write)
            children.append((pid, out_read))
        results: list[Result] = []
        spans: dict[str, list[tuple[int, int]]] = {}
        waits: dict[str, list[int]] = {t.name: [0, 0] for t in cfg.tests}
        failures: list[str] = []
        for cpu, payload in enumerate(self.collect(children, barrier)):
            got = pickle.loads(payload) if payload else "it died without a report"
            if isinstance(got, str):
                failures.append(f"CPU {cpu}'s process: {got}")
                continue
            for res, span, (lock_waits, read_waits), trace in got:
                results.append(res)
                spans.setdefault(res.test, []).append(span)
                waits[res.test][0] += lock_waits
                waits[res.test][1] += read_waits
                if trace is not None:
                    result.lock_traces.setdefault(res.test, []).append(trace)
        if failures:
            raise RuntimeError("map-perf --processes: " + "; ".join(failures))
        if not cfg.json:
            for res in sorted(results, key=lambda r: (r.cpu, Test[r.test].value)):
                sys.stdout.write(result_line(res, "emulated") + "\n")
            sys.stdout.flush()
        cpus = sorted(set(pinned))
        for t in cfg.tests:
            td = TESTS[t]
            wall = max(end for _, end in spans[t.name]) - min(start for start, _ in spans[t.name])
            events = cfg.max_cnt * self.nprocs
            rate = rate_of(events, wall, td.per_event)
            result.aggregate_rates[t.name] = rate
            lock_waits, read_waits = result.waits[t.name] = tuple(waits[t.name])
            result.notes.append(
                f"{td.line('all', rate)} over {self.nprocs} processes on host CPUs {cpus}, "
                f"maps in a shared segment: {events} events in {wall / 1e9:.3f} s of wall "
                "time from the test's common start to the last process's end; the processes "
                f"waited {lock_waits} times for a lock another held and read again "
                f"{read_waits} times as another wrote ({1000 * lock_waits / events:.2f} and "
                f"{1000 * read_waits / events:.2f} per 1000 events)")
        return results

    @staticmethod
    def collect(children: list[tuple[int, int]], barrier: threading.Barrier) -> list[bytes]:
        """Each child's report, read from all pipes at once (a report never waits on a full
        pipe); a child that ends without one (killed) breaks the barrier, so the others stop
        waiting for it and report their own failure."""
        payloads = {fd: bytearray() for _, fd in children}
        pid_of = {fd: pid for pid, fd in children}
        with selectors.DefaultSelector() as selector:
            for fd in payloads:
                selector.register(fd, selectors.EVENT_READ)
            while selector.get_map():
                for key, _ in selector.select():
                    chunk = os.read(key.fd, 1 << 16)
                    if chunk:
                        payloads[key.fd] += chunk
                        continue
                    selector.unregister(key.fd)
                    os.close(key.fd)
                    _, status = os.waitpid(pid_of[key.fd], 0)
                    if status and not payloads[key.fd]:
                        barrier.abort()
        return [bytes(payloads[fd]) for _, fd in children]

    def child_results(self, setup: Setup, cpu: int, barrier: threading.Barrier
                      ) -> list[tuple[Result, tuple[int, int], tuple[int, int],
                                      LockTrace | None]]:
        """A forked child's run: CPU ``cpu``'s task, every test (each from ``barrier``,
        timed by its CPU clock), with each test's span in wall-clock ns, what it waited
        for on the segment (shared.waits: locks held by another process, lookups read
        again) and, with ``Config.lock_trace``, its lock holds."""
        machine = self.sys.machine
        done = [0] * self.nprocs
        out = []
        with self.sys.on_cpu(cpu):
            machine.set_task(TASK_PID_BASE + cpu)
            for t in self.cfg.tests:
                barrier.wait()
                if self.cfg.lock_trace:
                    shared.lock_trace(self.cfg.lock_trace)
                before = shared.waits()
                start = time.monotonic_ns()
                res = self.run_test(setup, t, cpu, done, lambda _cpu: time.thread_time_ns())
                end = time.monotonic_ns()
                after = shared.waits()
                trace = LockTrace(*shared.lock_trace(0), events=self.cfg.max_cnt) \
                    if self.cfg.lock_trace else None
                out.append((res, (start, end),
                            (after.locks - before.locks, after.reads - before.reads), trace))
        return out

    def run_test(self, setup: Setup, t: Test, cpu: int, done: list[int],
                 host_cpu_ns: Callable[[int], int]) -> Result:
        """Test ``t``'s events on ``cpu``; ``host_cpu_ns(cpu)`` is the host CPU time the CPU's
        task has run so far."""
        cfg = self.cfg
        td = TESTS[t]
        machine = self.sys.machine
        extra: dict = {}
        if t == Test.INNER_LRU_HASH_PREALLOC:
            flags, node = setup.inner_numa[cpu]
            extra["map_flags"] = self.sys.map_get_info(setup.inner_fds[cpu]).map_flags
            extra["numa_node"] = node
        enter = self.sys.enter_syscall
        events = emulated_events(td, setup.lru_hash_lookup_test_entries, machine.user_memory)
        chunk = max(1, min(1000, cfg.max_cnt // 20))
        left = cfg.max_cnt
        snap = machine.timing.snapshot(cpu)
        contexts_before = dict(machine.timing.context_ns[cpu])
        start, cpu_start = time.monotonic_ns(), host_cpu_ns(cpu)
        while left:
            n = min(chunk, left)
            for record in itertools.islice(events, n):
                enter(td.syscall, record)
            left -= n
            done[cpu] += n
        elapsed = time.monotonic_ns() - start
        busy = host_cpu_ns(cpu) - cpu_start
        modeled, spent = machine.timing.since(cpu, snap)
        if t == Test.INNER_LRU_HASH_PREALLOC:
            # Only this CPU uses its inner map, so its counts are final now.
            stats = self.sys.map_stats(setup.inner_fds[cpu])
            extra["map_node"] = stats["numa_node"]
            extra["local_accesses"], extra["remote_accesses"] = \
                stats["access_by_cpu"].get(cpu, (0, 0))
        host_rate = rate_of(cfg.max_cnt, busy, td.per_event)
        if not cfg.modeled_time:
            return Result(cpu, t.name, td.line(cpu, host_rate), host_rate, td.unit, cfg.max_cnt,
                          busy, host_rate=host_rate,
                          wall_rate=rate_of(cfg.max_cnt, elapsed, td.per_event), **extra)
        top = sorted(spent.items(), key=lambda kv: -kv[1][1])
        rate = rate_of(cfg.max_cnt, int(modeled), td.per_event)
        return Result(cpu, t.name, td.line(cpu, rate), rate, td.unit, cfg.max_cnt, int(modeled),
                      profile=machine.profile.name,
                      host_rate=host_rate,
                      wall_rate=rate_of(cfg.max_cnt, elapsed, td.per_event),
                      breakdown={event: round(ns / cfg.max_cnt, 3) for event, (_, ns) in top},
                      contexts={name: round((ns - contexts_before.get(name, 0.0))
                                            / cfg.max_cnt, 3)
                                for name, ns in machine.timing.context_ns[cpu].items()},
                      **extra)


def shared_segment_size(cfg: Config, ncpus: int) -> int:
    """Bytes of the segment the maps of ``cfg``'s tests fit in, on a machine of ``ncpus``
    CPUs: each element (the segment's header words, key and value, a per-CPU value for each
    CPU, 8-byte aligned), a hash's buckets and free lists, an LRU's nodes and lists, a trie's
    nodes, and room for the maps' headers and a BPF_F_NO_PREALLOC map's last chunk. The inner
    LRU test makes an inner map per CPU."""
    size = 1 << 20
    names = {name for t in cfg.tests for name in test_maps(t)}
    if "array_of_lru_hashs" in names:  # each process's own; its inner maps are the segment's
        names.remove("array_of_lru_hashs")
        names.add("inner_lru_hash_map")
    for name in names:
        m = MAP_DEFS[name]
        entries = cfg.max_entries(name)
        value = -(-m.value_size // 8) * 8 * (ncpus if m.map_type in (
            MapType.PERCPU_HASH, MapType.PERCPU_ARRAY, MapType.LRU_PERCPU_HASH) else 1)
        element = 16 + -(-m.key_size // 8) * 8 + value
        if m.map_type == MapType.LPM_TRIE:  # a node per element and per split between them
            entries *= 2
        copies = ncpus if name == "inner_lru_hash_map" else 1
        size += copies * entries * element
        if m.map_type not in (MapType.ARRAY, MapType.PERCPU_ARRAY):
            size += copies * ((1 << max(0, entries - 1).bit_length()) * 16 + 64 * (64 + element))
        if m.map_type in (MapType.LRU_HASH, MapType.LRU_PERCPU_HASH):
            size += copies * (16 * (entries + 3 * ncpus + 3) + 192 * ncpus + 256)
    return size


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
