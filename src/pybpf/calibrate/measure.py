"""The run: every probe, rounds interleaved, on one CPU of the kernel backend, and the host
facts (sysfs, /proc) the profile's topology and memory sections come from."""

from __future__ import annotations

import ctypes
import datetime
import gzip
import os
import platform
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..asm import (
    assemble,
    encode,
)
from ..asm.builder import Item
from ..bench import report, trigger
from ..uapi import ProgType
from .native import (
    ADD_CHAIN,
    CHASE,
    CHASE_DRAM_BYTES,
    CHASE_LOADS,
    LOCK_ADD,
    PING_PONG,
    NativeCode,
    chase_buffer,
    pinned,
    thread_ns,
)
from .probes import DATA_IN, READ_SOCKADDR, RET, TEST_RUN_PROBES, Samples, TestRunProbe

MAP_PERF_TESTS = (0, 2, 8, 9)  # HASH_PREALLOC, HASH_KMALLOC, ARRAY_LOOKUP, INNER_LRU_HASH




# -- the run -------------------------------------------------------------------------------

class Calibration:
    """Every probe, ``rounds`` times interleaved, on one CPU of the kernel backend."""

    def __init__(self, sys_, cpu: int, rounds: int, progress: bool = True) -> None:
        self.sys = sys_
        self.cpu = cpu
        self.rounds = rounds
        self.progress = progress
        self.host = host_facts()
        self.samples: dict[str, Samples] = {}

    def record(self, name: str, unit: str, value: float) -> None:
        self.samples.setdefault(name, Samples(name, unit)).values.append(value)

    def measure(self) -> dict[str, Samples]:
        code = NativeCode(CHASE, LOCK_ADD, PING_PONG, ADD_CHAIN)
        line = self.host["line_bytes"]
        llc_buf = chase_buffer(max(self.host["shared_kib"] * 1024 // 8, 64 * line), line)
        with pinned(self.cpu):
            dram_buf = chase_buffer(CHASE_DRAM_BYTES, line, seed=1)
        remote_buf = self.remote_buffer(line)
        steps = [*(lambda p=p: self.test_run(p) for p in TEST_RUN_PROBES),
                 self.syscalls, lambda: self.memory(code, llc_buf, dram_buf, remote_buf),
                 lambda: self.transfer(code), self.map_perf]
        progress = report.Progress("calibrate", self.rounds * len(steps),
                                   enabled=self.progress)
        for round_ in range(self.rounds):
            for step in steps:
                step()
                progress.advance(note=f"round {round_ + 1}")
        progress.finish()
        return self.samples

    def test_run(self, probe: TestRunProbe) -> None:
        items, fds = probe.build(self.sys)
        try:
            prog = self.sys.prog_load(ProgType.SOCKET_FILTER,
                                      encode(assemble(items).with_map_fds(lambda fd: fd)),
                                      license="GPL", prog_name=b"pybpf_calibrate")
            fds.append(prog)
            with pinned(self.cpu):
                duration = self.sys.prog_test_run(prog, DATA_IN, repeat=probe.repeat).duration
        finally:
            for fd in reversed(fds):
                self.sys.close(fd)
        self.record(probe.name, "ns/run", float(duration))

    def syscalls(self) -> None:
        from ..bench.map_perf.testbed import sockaddr_in6

        n = 100000
        getppid = trigger.native_syscall_loop("getppid")
        connect = trigger.native_connect_loop(sockaddr_in6(0, 0), 0)
        with pinned(self.cpu):
            self.record("syscall_getppid", "ns/call", thread_ns(lambda: getppid(n)) / n)
            self.record("syscall_connect", "ns/call", thread_ns(lambda: connect(n)) / n)
            for name, syscall, loop, items in (
                    ("tracepoint_getppid", "getppid", getppid, RET),
                    ("tracepoint_connect", "connect", connect, RET),
                    ("probe_read_user_connect", "connect", connect, READ_SOCKADDR)):
                with self.attached(items, syscall):
                    self.record(name, "ns/call", thread_ns(lambda f=loop: f(n)) / n)

    @contextmanager
    def attached(self, items: list[Item], syscall: str) -> Iterator[None]:
        prog = self.sys.prog_load(ProgType.TRACEPOINT, encode(assemble(items).instructions),
                                  license="GPL", prog_name=b"pybpf_calibrate")
        try:
            link = self.sys.attach_tracepoint(prog, "syscalls", f"sys_enter_{syscall}")
            try:
                yield
            finally:
                self.sys.close(link)
        finally:
            self.sys.close(prog)

    def remote_buffer(self, line: int):
        """A DRAM-sized chase buffer first touched (so placed) on another node, or None."""
        node_cpus = self.host["node_cpus"]
        home = self.host["cpu_node"][self.cpu]
        far = next((cpus[0] for node, cpus in enumerate(node_cpus) if node != home and cpus),
                   None)
        if far is None:
            return None
        with pinned(far):
            return chase_buffer(CHASE_DRAM_BYTES, line, seed=2)

    def memory(self, code: NativeCode, llc_buf, dram_buf, remote_buf) -> None:
        chase, lock_add = code.fns[:2]
        counter = ctypes.c_long(0)
        with pinned(self.cpu):
            for name, (_, start) in (("chase_llc", llc_buf), ("chase_dram", dram_buf),
                                     *((("chase_remote", remote_buf),) if remote_buf else ())):
                chase(CHASE_LOADS // 8, start, 0)  # warm the caches and TLB on the way
                self.record(name, "ns/load",
                            thread_ns(lambda s=start: chase(CHASE_LOADS, s, 0)) / CHASE_LOADS)
            n = 1 << 20
            self.record("lock_add", "ns/op",
                        thread_ns(lambda: lock_add(n, ctypes.addressof(counter), 0)) / n)
            add_chain = code.fns[3]
            self.record("clock", "GHz", 4 * n / thread_ns(lambda: add_chain(n, None, 0)))

    def transfer(self, code: NativeCode) -> None:
        """Bounce a line between this CPU and the next one (of the same node where there is
        one), ``n`` times each way; wall time over 2n transfers."""
        others = [c for c in sorted(os.sched_getaffinity(0)) if c != self.cpu]
        if not others:
            return
        same = [c for c in others if self.host["cpu_node"][c] == self.host["cpu_node"][self.cpu]]
        peer = (same or others)[0]
        ping_pong = code.fns[2]
        n = 20000
        line = ctypes.create_string_buffer(128)
        addr = (ctypes.addressof(line) + 63) & ~63
        ctypes.c_long.from_address(addr).value = 0
        start_line = threading.Barrier(2)

        def side(cpu: int, parity: int) -> None:
            os.sched_setaffinity(0, {cpu})
            start_line.wait()
            ping_pong(n, addr, parity)

        other = threading.Thread(target=side, args=(peer, 1))
        other.start()
        old = os.sched_getaffinity(0)
        try:
            t0 = time.perf_counter_ns()
            side(self.cpu, 0)
            other.join()
            elapsed = time.perf_counter_ns() - t0
        finally:
            os.sched_setaffinity(0, old)
        self.record("transfer_same_node" if same else "transfer_other_node", "ns/transfer",
                    elapsed / (2 * n))

    def map_perf(self) -> None:
        """map_perf_test's maps, programs and trigger loop (bench/map_perf.py), run in this
        process on the calibration CPU and timed by its CPU time: events as the sample makes
        them, undisturbed by other processes."""
        from ..bench.map_perf.config import DEFAULT_MAX_CNT, TRIGGER_NATIVE, Config, Test
        from ..bench.map_perf.kernel_run import kernel_trigger
        from ..bench.map_perf.testbed import Setup

        for value in MAP_PERF_TESTS:
            test = Test(value)
            cfg = Config(test_flags=test.bit, num_procs=1, max_cnt=DEFAULT_MAX_CNT,
                         backend="kernel", progress=False)
            setup = Setup(self.sys, cfg)
            try:
                setup.create_maps(self.host["cpu_node"][self.cpu])
                setup.load_and_attach()
                setup.fill_lpm_trie()
                setup.pre_test()
                run_n = kernel_trigger(test, setup.lru_hash_lookup_test_entries, TRIGGER_NATIVE)
                with pinned(self.cpu):
                    ns = thread_ns(lambda: run_n(cfg.max_cnt))  # noqa: B023 (called now)
            finally:
                setup.close()
            self.record(f"map_perf_{test.name.lower()}", "ns/event", ns / cfg.max_cnt)


def host_facts() -> dict:
    """What the profile's topology and memory sections come from: sysfs, /proc."""
    from ..topology import host_topology

    cache = Path("/sys/devices/system/cpu/cpu0/cache")
    sizes: dict[int, int] = {}
    line = 64
    for index in sorted(cache.glob("index*")):
        level = int((index / "level").read_text())
        kind = (index / "type").read_text().strip()
        if kind in ("Unified", "Data"):
            sizes[level] = _kib((index / "size").read_text())
            line = int((index / "coherency_line_size").read_text())
    topo = host_topology()
    nodes = topo.num_nodes
    distances = []
    for node in range(nodes):
        path = Path(f"/sys/devices/system/node/node{node}/distance")
        row = [int(x) for x in path.read_text().split()] if path.exists() else []
        distances.append(row[:nodes] if len(row) >= nodes else
                         [10 if j == node else 20 for j in range(nodes)])
    cpuinfo = Path("/proc/cpuinfo").read_text()
    model = re.search(r"model name\s*:\s*(.*)", cpuinfo)
    mhz = re.search(r"cpu MHz\s*:\s*([\d.]+)", cpuinfo)
    return {
        "hostname": platform.node(),
        "cpu_model": model.group(1).strip() if model else platform.processor() or "unknown",
        "mhz": float(mhz.group(1)) if mhz else None,
        "kernel": platform.release(),
        "date": datetime.date.today().isoformat(),
        "cpus": len(topo.cpu_node),
        "nodes": nodes,
        "cpu_node": list(topo.cpu_node),
        "node_cpus": [topo.cpus_of_node(n) for n in range(nodes)],
        "distances": distances,
        "line_bytes": line,
        "private_kib": sizes.get(2, sizes.get(1, 32)),
        "shared_kib": sizes.get(max(sizes), 1024) if sizes else 1024,
        "config_hz": config_hz(),
    }


def _kib(text: str) -> int:
    text = text.strip()
    scale = {"K": 1, "M": 1024, "G": 1024 * 1024}.get(text[-1:], None)
    return int(text[:-1]) * scale if scale else int(text) // 1024


def config_hz() -> int | None:
    """CONFIG_HZ of the running kernel, from /proc/config.gz, or None."""
    try:
        with gzip.open("/proc/config.gz", "rt") as f:
            for config_line in f:
                if config_line.startswith("CONFIG_HZ="):
                    return int(config_line.split("=")[1])
    except OSError:
        return None
    return None
