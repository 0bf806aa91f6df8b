"""``pybpf calibrate``: measure this host's costs on the kernel backend and write a profile.

What is measured (every probe once per round, rounds interleaved, pinned to one CPU; the figure
kept is the median over the rounds, with the spread written beside it):

- syscall loops in machine code (bench/trigger.py): getppid and connect(-1) with nothing
  attached, and getppid with an empty program on its entry tracepoint, per second of the
  thread's own CPU time (other processes taking the CPU do not count);
- BPF_PROG_TEST_RUN of small socket-filter programs, whose ``duration`` the kernel measures
  per run without the time the task was preempted: an empty program, 1024 instructions, 64
  helper calls, 64 array and hash lookups (4- and 64-byte keys), 64 updates of an existing key,
  10 x (update, lookup, delete) on a preallocated and on a BPF_F_NO_PREALLOC hash map, 64
  random-key LRU updates into a full map and into an empty one, 32 LPM trie lookups;
- memory, in machine code: a pointer chase through a random cycle of cache lines in a buffer
  of an eighth of the last-level cache (shared_hit) and of 128 MiB (dram_local; remote too,
  from memory first touched on another node, where the host has one), a locked add loop
  (atomic), and a line bounced between two CPUs (transfer_local);
- map_perf_test's tests 0, 2, 8 and 9 on one CPU (bench/map_perf.py), kept in the profile's
  [reference] section in ns per event: what the model on this profile should predict.

How each profile value follows from these is written into its ``source`` (``derive``): the
probes' own instructions are charged at the measured per-instruction cost and taken out, and a
map operation's cost is what is left after what the model charges separately (jhash per key
byte, one spinlock per bucket or free list taken, the allocator's fast path). What user space
cannot measure (irq save/restore, kmalloc, call_rcu, irq_work, grace periods, the [net]
receive path's CPU work) is estimated from measured values, the kernel's configuration or a
cited figure, and says so. No value is chosen by looking at the seed patches' published
results: those are the held-out check.
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import gzip
import mmap
import os
import platform
import random
import re
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .asm import (
    FP,
    R0,
    R1,
    R2,
    R3,
    R4,
    R6,
    add64,
    assemble,
    call,
    encode,
    exit_,
    jeq,
    label,
    ld_map_fd,
    ldxdw,
    ldxw,
    mov64,
    stdw,
    stw,
    stxdw,
    stxw,
)
from .asm.builder import Item, Label
from .bench import report, trigger
from .bench.args import int_arg, profile_arg
from .profiles import Profile, Value, dump_profile, validate
from .profiles.net_cycles import NET_CYCLES, net_source
from .uapi import MapFlags, MapType, ProgType

DEFAULT_OUTPUT = "~/.config/pybpf/profiles/host.toml"
DEFAULT_ROUNDS = 5
MAX_ROUNDS = 100
DATA_IN = bytes(64)  # a socket filter's test run needs at least an Ethernet header
# Not measurable from user space; see the sources these appear in.
IRQ_SAVE_RESTORE_CYCLES = 20
SLAB_FASTPATH_CYCLES = 25
TICKS_PER_GRACE_PERIOD = 2
MAP_PERF_TESTS = (0, 2, 8, 9)  # HASH_PREALLOC, HASH_KMALLOC, ARRAY_LOOKUP, INNER_LRU_HASH
CHECK_TOLERANCE = 0.30  # --check: how far a modeled per-event rate may be from the kernel's
CHASE_DRAM_BYTES = 128 << 20
CHASE_LOADS = 1 << 20


def calibrate_command(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    """``pybpf calibrate`` (cli.COMMANDS)."""
    parser.description = __doc__.split("\n\n")[0]
    parser.add_argument("--output", "-o", default=DEFAULT_OUTPUT,
                        help=f"profile to write (default {DEFAULT_OUTPUT}); use it with "
                             "--profile FILE")
    parser.add_argument("--rounds", type=int_arg("--rounds", 1, MAX_ROUNDS,
                                                 "about 10 s a round"),
                        default=DEFAULT_ROUNDS,
                        help=f"interleaved rounds of every probe (default {DEFAULT_ROUNDS})")
    cpus = os.cpu_count() or 1
    parser.add_argument("--cpu", type=int_arg("--cpu", 0, cpus - 1, "this host's CPUs"),
                        default=0, help="CPU to measure on (default 0)")
    parser.add_argument("--check", action="store_true",
                        help="the round trip, writing nothing: calibrate, then model "
                             "map_perf_test's tests 0, 2, 8 and 9 on that profile beside the "
                             "kernel's figures of the same rounds (exit status 1 when a "
                             f"modeled rate is off by more than {CHECK_TOLERANCE * 100:.0f}%%)")
    parser.add_argument("--profile", type=profile_arg, default=None,
                        help="--check: model with this profile (e.g. the shipped host) and "
                             "measure only the map_perf tests, instead of calibrating first")
    parser.add_argument("--json", action="store_true",
                        help="print the measurements and the profile as one JSON document")
    parser.add_argument("--no-progress", dest="progress", action="store_false",
                        help="no progress lines on stderr")
    return run


def run(ns: argparse.Namespace) -> int:
    from .backends import system

    calib = Calibration(system("kernel"), ns.cpu, ns.rounds, ns.progress)
    if ns.check:
        return check(calib, ns)
    samples = calib.measure()
    profile = host_profile(samples, calib.host)
    dump_profile(profile, ns.output, header=PROFILE_HEADER)
    if ns.json:
        report.dump_json({"profile": str(Path(ns.output).expanduser()),
                          "host": calib.host,
                          "samples": {k: asdict(s) | {"median": s.median}
                                      for k, s in samples.items()},
                          "values": {k: v.value for k, v in profile.values.items()},
                          "reference": {k: v.value for k, v in profile.reference.items()}})
    else:
        print(summary(samples, profile))
        print(f"wrote {Path(ns.output).expanduser()}; use it with --profile "
              f"{Path(ns.output).expanduser()}")
    return 0


def check(calib: Calibration, ns: argparse.Namespace) -> int:
    """The round trip: map_perf_test's tests on the kernel (as calibrate measures them) beside
    the same tests modeled, in ns per event, on a profile calibrated in the same rounds (or on
    ``--profile``, the kernel measured now)."""
    from .bench import map_perf as mp
    from .bench.map_perf.config import DEFAULT_MAX_CNT

    if ns.profile is None:
        profile = host_profile(calib.measure(), calib.host)
        what = "a profile calibrated in the same rounds"
    else:
        progress = report.Progress("calibrate --check (kernel)", calib.rounds,
                                   enabled=calib.progress)
        for _ in range(calib.rounds):
            calib.map_perf()
            progress.advance()
        progress.finish()
        profile = ns.profile
        what = f"profile {ns.profile}"
    rows = []
    for value in MAP_PERF_TESTS:
        test = mp.Test(value)
        measured = calib.samples[f"map_perf_{test.name.lower()}"]
        cfg = mp.Config(test_flags=test.bit, num_procs=1, max_cnt=DEFAULT_MAX_CNT,
                        backend="emulated", profile=profile, json=True,
                        progress=calib.progress)
        result = mp.run(cfg).results[0]
        modeled = 1e9 * mp.TESTS[test].per_event / result.rate
        off = modeled / measured.median - 1
        rows.append({"test": test.name, "kernel_ns_per_event": round(measured.median, 1),
                     "kernel_spread": [round(min(measured.values), 1),
                                       round(max(measured.values), 1)],
                     "modeled_ns_per_event": round(modeled, 1), "off": round(off, 4),
                     "within": abs(off) <= CHECK_TOLERANCE})
    ok = all(row["within"] for row in rows)
    if ns.json:
        report.dump_json({"profile": ns.profile, "host": calib.host, "rounds": calib.rounds,
                          "tolerance": CHECK_TOLERANCE, "tests": rows, "ok": ok})
    else:
        print(f"map_perf_test on CPU {calib.cpu}: the kernel here (median of {calib.rounds} "
              f"rounds, by CPU time) and the model on {what}, ns per event")
        print(report.format_table(
            ["test", "kernel", "spread", "modeled", "off", f"within {CHECK_TOLERANCE:.0%}"],
            [[r["test"], r["kernel_ns_per_event"], "-".join(map(str, r["kernel_spread"])),
              r["modeled_ns_per_event"], f"{r['off']:+.1%}", "yes" if r["within"] else "NO"]
             for r in rows]))
    return 0 if ok else 1


PROFILE_HEADER = """\
Written by `pybpf calibrate`: this host's costs, measured on the kernel backend.
Each value's source says how it was measured or derived; see pybpf/calibrate.py."""


# -- machine code -------------------------------------------------------------------------

# x86-64 System V, assembled by hand; byte offsets in the comments.
#
# long chase(long n, void **p): follow p = *p n times; return p
#   0: mov rsi,[rsi]; 3: dec rdi; 6: jnz 0; 8: mov rax,rsi; b: ret
CHASE = bytes.fromhex("488b3648ffcf75f84889f0c3")
# long lock_add(long n, long *p): n x lock add qword [p],1
#   0: lock add qword [rsi],1; 5: dec rdi; 8: jnz 0; a: ret
LOCK_ADD = bytes.fromhex("f04883060148ffcf75f6c3")
# long ping_pong(long n, long *p, long parity): n times { wait until *p % 2 == parity;
# *p += 1 }: two threads of parities 0 and 1 move the line back and forth 2n times
#   0: pause; 2: mov rax,[rsi]; 5: mov rcx,rax; 8: and ecx,1; b: cmp rcx,rdx; e: jne 0;
#   10: inc rax; 13: mov [rsi],rax; 16: dec rdi; 19: jnz 2 (rel -25); 1b: ret
PING_PONG = bytes.fromhex("f390488b064889c183e1014839d175f048ffc048890648ffcf75e7c3")

# long add_chain(long n): 4n dependent adds (one cycle each): n iterations of 4 cycles
#   0: xor eax,eax; 2: add rax,1 (x4, 16 bytes); 12: dec rdi; 15: jnz 2 (rel -21); 17: ret
ADD_CHAIN = bytes.fromhex("31c0" + "4883c001" * 4 + "48ffcf75ebc3")

_FN = ctypes.CFUNCTYPE(ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_long)


class NativeCode:
    """Machine code mapped executable once; ``fns[i]`` calls the i-th blob."""

    def __init__(self, *blobs: bytes) -> None:
        self.page = mmap.mmap(-1, mmap.PAGESIZE,
                              prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
        base = ctypes.addressof(ctypes.c_char.from_buffer(self.page))
        self.fns = []
        for blob in blobs:
            self.fns.append(_FN(base + self.page.tell()))
            self.page.write(blob)


def chase_buffer(size: int, line: int, seed: int = 0) -> tuple[mmap.mmap, int]:
    """A buffer whose lines form one random cycle of pointers; (buffer, address of line 0).
    Huge pages are asked for, so the walk measures caches and DRAM rather than the TLB."""
    buf = mmap.mmap(-1, size)
    if hasattr(buf, "madvise") and hasattr(mmap, "MADV_HUGEPAGE"):
        try:
            buf.madvise(mmap.MADV_HUGEPAGE)
        except OSError:
            pass  # no THP here: the figure then includes TLB misses
    base = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    lines = size // line
    order = list(range(1, lines))
    random.Random(seed).shuffle(order)
    order = [0, *order]
    words = memoryview(buf).cast("Q")
    step = line // 8
    for here, there in zip(order, order[1:] + order[:1], strict=True):
        words[here * step] = base + there * line
    words.release()
    return buf, base


@contextmanager
def pinned(cpu: int) -> Iterator[None]:
    """Run the body on ``cpu`` (this thread), then restore the affinity."""
    old = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpu})
    try:
        yield
    finally:
        os.sched_setaffinity(0, old)


def thread_ns(work: Callable[[], object]) -> int:
    """CPU time this thread spent (user + system) running ``work``."""
    start = time.thread_time_ns()
    work()
    return time.thread_time_ns() - start


# -- probes --------------------------------------------------------------------------------

@dataclass
class Samples:
    """One probe's figures, one per round."""

    name: str
    unit: str  # what one figure is: "ns/run", "ns/call", "ns/load", "ns/event"
    values: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    def describe(self) -> str:
        return (f"median {self.median:.2f} {self.unit} over {len(self.values)} rounds "
                f"(spread {min(self.values):.2f}-{max(self.values):.2f})")


@dataclass(frozen=True)
class TestRunProbe:
    """A socket-filter program timed with BPF_PROG_TEST_RUN; ``build`` creates its maps and
    returns (program items, map fds) afresh for every measurement."""

    name: str
    repeat: int
    count: int  # operations per run that the probe is about
    build: Callable[[object], tuple[list[Item], list[int]]]
    helper_calls: int = 0  # calls charged as helper_call (get_prandom_u32 in the LRU ones)


def executed(items: list[Item]) -> int:
    """Instructions a straight-line program executes: every one (a lddw counts once)."""
    return sum(1 for item in items if not isinstance(item, Label))


RET = [mov64(R0, 0), exit_()]
# On sys_enter_connect: bpf_probe_read_user(fp-16, 16, uservaddr), as map_perf's LRU program.
READ_SOCKADDR = [mov64(R6, R1), ldxdw(R3, R6, 24), mov64(R1, FP), add64(R1, -16),
                 mov64(R2, 16), call("probe_read_user"), *RET]
KEY1 = [stw(FP, -4, 1), stdw(FP, -16, 1)]  # key 1 at fp-4, value 1 at fp-16


def _key_ptr(off: int) -> list[Item]:
    return [mov64(R2, FP), add64(R2, off)]


def _lookups(fd: int, count: int, key_off: int = -4) -> list[Item]:
    out: list[Item] = []
    for _ in range(count):
        out += [ld_map_fd(R1, fd), *_key_ptr(key_off), call("map_lookup_elem")]
    return out


def _updates(fd: int, count: int, random_key: bool = False) -> list[Item]:
    out: list[Item] = []
    for _ in range(count):
        if random_key:
            out += [call("get_prandom_u32"), stxw(FP, -4, R0)]
        out += [ld_map_fd(R1, fd), *_key_ptr(-4), mov64(R3, FP), add64(R3, -16),
                mov64(R4, 0), call("map_update_elem")]
    return out


def _triples(fd: int) -> list[Item]:
    """map_perf's hash event: 10 x (update, lookup, delete if found) of key 1."""
    out = list(KEY1)
    for i in range(10):
        out += [*_updates(fd, 1), *_lookups(fd, 1), jeq(R0, 0, f"next{i}"),
                ld_map_fd(R1, fd), *_key_ptr(-4), call("map_delete_elem"), label(f"next{i}")]
    return out + RET


def _instruction_mix() -> list[Item]:
    """1024 instructions of the kinds map_perf's programs are made of (8 per block)."""
    out: list[Item] = []
    for _ in range(128):
        out += [mov64(R1, FP), add64(R1, -8), stdw(FP, -16, 1), mov64(R2, 7),
                stxw(FP, -4, R2), stxdw(FP, -24, R2), ldxw(R3, FP, -4), jeq(R3, 0, "out")]
    return [*out, label("out"), *RET]


def _u32(x: int) -> bytes:
    return x.to_bytes(4, "little")


def _u64(x: int) -> bytes:
    return x.to_bytes(8, "little")


def _map(sys_, fds: list[int], map_type: int, key_size: int, max_entries: int,
         flags: int = 0) -> int:
    fd = sys_.map_create(map_type, key_size, 8, max_entries, map_flags=flags)
    fds.append(fd)
    return fd


def _probe_lookup(map_type: int, key_size: int, count: int) -> Callable:
    def build(sys_) -> tuple[list[Item], list[int]]:
        fds: list[int] = []
        fd = _map(sys_, fds, map_type, key_size, 1000)
        key = _u32(1) if key_size == 4 else _u64(1) + bytes(key_size - 8)
        sys_.map_update_elem(fd, key, _u64(1))
        if key_size == 4:
            setup = [stw(FP, -4, 1)]
            return [*setup, *_lookups(fd, count), *RET], fds
        off = -key_size
        setup = [stdw(FP, off + 8 * i, 1 if i == 0 else 0) for i in range(key_size // 8)]
        return [*setup, *_lookups(fd, count, off), *RET], fds
    return build


def _probe_update_existing(sys_) -> tuple[list[Item], list[int]]:
    fds: list[int] = []
    fd = _map(sys_, fds, MapType.HASH, 4, 1000)
    sys_.map_update_elem(fd, _u32(1), _u64(1))
    return [*KEY1, *_updates(fd, 64), *RET], fds


def _probe_triples(flags: int) -> Callable:
    def build(sys_) -> tuple[list[Item], list[int]]:
        fds: list[int] = []
        return _triples(_map(sys_, fds, MapType.HASH, 4, 1000, flags)), fds
    return build


def _probe_lru(full: bool) -> Callable:
    """64 random-key updates into a full 1000-entry LRU map (each evicts), or into an empty
    8192-entry one (run 64 times: 4096 updates, none evicts)."""
    def build(sys_) -> tuple[list[Item], list[int]]:
        fds: list[int] = []
        fd = _map(sys_, fds, MapType.LRU_HASH, 4, 1000 if full else 8192)
        if full:
            for k in range(1000):
                sys_.map_update_elem(fd, _u32(k + (1 << 20)), _u64(1))
        return [stdw(FP, -16, 1), *_updates(fd, 64, random_key=True), *RET], fds
    return build


LPM_KEY = (32).to_bytes(4, "little") + bytes([192, 168, 0, 1])


def _probe_trie(sys_) -> tuple[list[Item], list[int]]:
    """32 lookups of 192.168.0.1/32 in a trie of 512 random prefixes (map_perf's test 6)."""
    fds: list[int] = []
    fd = _map(sys_, fds, MapType.LPM_TRIE, 8, 10000, MapFlags.NO_PREALLOC)
    rng = random.Random(0)
    for _ in range(512):
        sys_.map_update_elem(fd, _u32(rng.randrange(33)) + rng.randbytes(4), _u64(1))
    sys_.map_update_elem(fd, LPM_KEY, _u64(128))
    setup = [stw(FP, -8, 32), stw(FP, -4, int.from_bytes(LPM_KEY[4:], "little", signed=True))]
    return [*setup, *_lookups(fd, 32, -8), *RET], fds


def _no_maps(items: list[Item]) -> Callable:
    return lambda sys_: (items, [])


TEST_RUN_PROBES = (
    TestRunProbe("empty", 100000, 1, _no_maps(RET)),
    TestRunProbe("insns_1024", 20000, 1024, _no_maps(_instruction_mix())),
    TestRunProbe("helper_64", 10000, 64,
                 _no_maps([*(call("get_numa_node_id") for _ in range(64)), *RET])),
    TestRunProbe("array_lookup_64", 10000, 64, _probe_lookup(MapType.ARRAY, 4, 64)),
    TestRunProbe("htab_lookup_64", 10000, 64, _probe_lookup(MapType.HASH, 4, 64)),
    TestRunProbe("htab_lookup_64_key64", 10000, 64, _probe_lookup(MapType.HASH, 64, 64)),
    TestRunProbe("htab_update_existing_64", 10000, 64, _probe_update_existing),
    TestRunProbe("htab_triples_prealloc", 10000, 10, _probe_triples(0)),
    TestRunProbe("htab_triples_kmalloc", 10000, 10, _probe_triples(MapFlags.NO_PREALLOC)),
    TestRunProbe("lru_evict_64", 10000, 64, _probe_lru(True), helper_calls=64),
    TestRunProbe("lru_fill_64", 64, 64, _probe_lru(False), helper_calls=64),
    TestRunProbe("trie_lookup_32", 5000, 32, _probe_trie),
)


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
        from .bench.map_perf.testbed import sockaddr_in6

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
        from .bench.map_perf.config import DEFAULT_MAX_CNT, TRIGGER_NATIVE, Config, Test
        from .bench.map_perf.kernel_run import kernel_trigger
        from .bench.map_perf.testbed import Setup

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
    from .topology import host_topology

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


# -- from measurements to a profile --------------------------------------------------------

def host_profile(samples: dict[str, Samples], host: dict) -> Profile:
    """The host profile: every value and how it follows from ``samples``."""
    values, reference = derive(samples, host)
    name = "host"
    description = (f"{host['hostname']}: {host['cpu_model']}, {host['cpus']} CPUs, "
                   f"{host['nodes']} NUMA node(s), Linux {host['kernel']}; calibrated "
                   f"{host['date']}")
    return validate(name, description, values, reference=reference)


def derive(samples: dict[str, Samples], host: dict) -> tuple[dict[str, Value], dict[str, Value]]:
    """(profile values, reference figures) from the medians, each with its derivation."""
    where = f"calibrated on {host['hostname']} by pybpf calibrate on {host['date']}"
    med = {name: s.median for name, s in samples.items()}
    values: dict[str, Value] = {}

    def put(path: str, value: float, how: str) -> None:
        if value < 0:
            how += f"; came out {value:.2f}, below the noise, so 0"
            value = 0.0
        values[path] = Value(round(value, 3) if isinstance(value, float) else value,
                             f"{where}: {how}")

    def cite(path: str, value, how: str) -> None:
        values[path] = Value(round(value, 3) if isinstance(value, float) else value, how)

    def seen(name: str) -> str:
        return f"{name} {samples[name].describe()}"

    # Instructions and calls, from the empty program up.
    ex = {p.name: p for p in TEST_RUN_PROBES}
    ins = {name: _executed_of(name) for name in ex}
    insn = (med["insns_1024"] - med["empty"]) / (ins["insns_1024"] - ins["empty"])
    put("cpu.bpf_insn", insn, f"(insns_1024 - empty) / {ins['insns_1024'] - ins['empty']} "
        f"instructions; {seen('insns_1024')}; {seen('empty')}")
    put("cpu.prog_test_run", med["empty"] - ins["empty"] * insn,
        f"empty program ({ins['empty']} instructions) less its instructions; {seen('empty')}")

    def per_op(name: str, helper_call: float = 0.0) -> float:
        p = ex[name]
        rest = (ins[name] - ins["empty"]) * insn + p.helper_calls * helper_call
        return (med[name] - med["empty"] - rest) / p.count

    helper = per_op("helper_64")
    put("cpu.helper_call", helper, f"64 bpf_get_numa_node_id calls less their instructions; "
        f"{seen('helper_64')}")
    put("ops.array_map_lookup_elem", per_op("array_lookup_64"),
        f"per lookup of 64, less the program's instructions; {seen('array_lookup_64')}")
    jhash = (per_op("htab_lookup_64_key64") - per_op("htab_lookup_64")) / 60
    put("cpu.jhash_byte", jhash, "(lookup with a 64-byte key - with a 4-byte key) / 60 bytes "
        f"(hash and key compare); {seen('htab_lookup_64_key64')}; {seen('htab_lookup_64')}")
    lookup = per_op("htab_lookup_64") - 4 * jhash
    put("ops.htab_map_lookup_elem", lookup,
        f"per lookup of 64 (4-byte key, hit), less 4 x jhash_byte; {seen('htab_lookup_64')}")

    atomic = med["lock_add"]
    put("cpu.atomic", atomic, f"lock add loop; {seen('lock_add')}")
    ghz = med["clock"]
    put("cpu.clock_ghz", ghz, "a chain of dependent adds (one per cycle) per ns of CPU time; "
        f"/proc/cpuinfo says {host['mhz']} MHz; {seen('clock')}")
    spin = atomic + IRQ_SAVE_RESTORE_CYCLES / ghz
    put("cpu.spin_lock", spin, f"estimate: atomic (the lock's locked op; the unlock is a plain "
        f"store on x86) + {IRQ_SAVE_RESTORE_CYCLES} cycles for pushf/cli/popf, which user "
        "space cannot time")
    update = per_op("htab_update_existing_64") - 4 * jhash - spin
    put("ops.htab_map_update_elem", update,
        "per update of an existing key of 64 (preallocated map: the new element is the CPU's "
        "spare, the old one becomes it, no free list), less 4 x jhash_byte and the bucket's "
        "spin_lock; " + seen("htab_update_existing_64"))
    triple_p = per_op("htab_triples_prealloc")
    put("ops.htab_map_delete_elem", triple_p - update - lookup - 12 * jhash - 4 * spin,
        "per (update, lookup, delete) of 10 on a preallocated map, less update and lookup, "
        "3 x 4 x jhash_byte and 4 x spin_lock (2 buckets, free-list pop and push); "
        + seen("htab_triples_prealloc"))
    triple_k = per_op("htab_triples_kmalloc")
    mem_cache = (triple_k - triple_p + 2 * spin) / 2
    put("alloc.bpf_mem_cache", mem_cache,
        "((update, lookup, delete) on a BPF_F_NO_PREALLOC map - on a preallocated one + 2 x "
        "spin_lock of the free list) / 2 (one unit_alloc, one unit_free); "
        + seen("htab_triples_kmalloc"))
    fill = per_op("lru_fill_64", helper) - 4 * jhash - 2 * spin
    put("ops.htab_lru_map_update_elem", fill,
        "per random-key update of 64 into an empty 8192-entry LRU map (64 runs), less "
        "helper_call (get_prandom_u32), 4 x jhash_byte, 2 x spin_lock (bucket, LRU list); "
        + seen("lru_fill_64"))
    put("ops.bpf_lru_evict",
        per_op("lru_evict_64", helper) - per_op("lru_fill_64", helper) - spin,
        "per update into a full 1000-entry LRU map (each evicts one node) - per update into "
        "an empty one, less the spin_lock of the evicted node's bucket; "
        + seen("lru_evict_64"))
    put("ops.trie_lookup_elem", per_op("trie_lookup_32"),
        f"per lookup of 32 in a 513-prefix trie; {seen('trie_lookup_32')}")

    put("cpu.syscall_entry", med["syscall_getppid"],
        f"native getppid loop through glibc syscall(); {seen('syscall_getppid')}")
    put("cpu.syscall_connect", med["syscall_connect"],
        f"native connect(-1, sockaddr_in6, 28) loop; {seen('syscall_connect')}")
    put("cpu.tracepoint_entry",
        med["tracepoint_getppid"] - med["syscall_getppid"] - 2 * insn,
        "getppid loop with a 2-instruction program on sys_enter_getppid - without; "
        + seen("tracepoint_getppid"))
    put("cpu.probe_read_user", med["probe_read_user_connect"] - med["tracepoint_connect"]
        - (executed(READ_SOCKADDR) - executed(RET)) * insn,
        "connect loop with a program reading 16 bytes of the sockaddr with "
        "bpf_probe_read_user - with an empty program, less the extra instructions; "
        + seen("probe_read_user_connect"))
    put("cpu.irq_work", 2 * med["syscall_getppid"],
        "estimate: a self-IPI's interrupt entry and exit, taken as 2 x syscall_entry (not "
        "measurable from user space)")

    # Latencies are idle latencies: other tenants' traffic in the shared cache and memory
    # only adds to a round, so the least disturbed round is the estimate.
    idle = {name: min(samples[name].values) for name in ("chase_llc", "chase_dram",
                                                         "chase_remote") if name in samples}
    put("memory.shared_hit", idle["chase_llc"], f"pointer chase over {host['shared_kib'] // 8} "
        f"KiB, the least disturbed round; {seen('chase_llc')}")
    put("memory.dram_local", idle["chase_dram"], f"pointer chase over "
        f"{CHASE_DRAM_BYTES >> 20} MiB, the least disturbed round; {seen('chase_dram')}")
    if "chase_remote" in idle:
        put("memory.dram_remote", idle["chase_remote"], "pointer chase over "
            f"{CHASE_DRAM_BYTES >> 20} MiB first touched on another node, the least disturbed "
            f"round; {seen('chase_remote')}")
    else:
        put("memory.dram_remote", idle["chase_dram"],
            "this host has one NUMA node: no remote memory, so equal to dram_local")
    same = samples.get("transfer_same_node")
    if same:
        put("memory.transfer_local", min(same.values), "line bounced between two CPUs of the "
            "node (ping-pong, wall time per one-way transfer), the least disturbed round: a "
            f"bounce needs both CPUs running; {same.describe()}")
    else:
        put("memory.transfer_local", 2 * med["chase_llc"],
            "estimate (no second CPU on the node to measure with): 2 x shared_hit")
    other = samples.get("transfer_other_node")
    if other:
        put("memory.transfer_remote", min(other.values), "line bounced between CPUs of two "
            f"nodes, the least disturbed round; {other.describe()}")
    else:
        put("memory.transfer_remote", values["memory.transfer_local"].value,
            "this host has one NUMA node: equal to transfer_local")

    slab = SLAB_FASTPATH_CYCLES / ghz
    for key in ("kmalloc", "kfree"):
        cite(f"alloc.{key}", slab,
             f"estimate: {SLAB_FASTPATH_CYCLES} cycles at {ghz:.2f} GHz, half of the ~45-50 "
             "cycles Jesper Dangaard Brouer measured for a SLUB kmem_cache_alloc + free pair "
             "on the fast path (slab bulk-API series, Linux 4.3-4.4, 2015)")
    put("alloc.call_rcu", mem_cache,
        "estimate: __call_rcu_common's fast path is interrupts off, one per-CPU list push "
        "(rcu_segcblist_enqueue), interrupts on: the same work as bpf_mem_cache")
    put("alloc.rcu_callback", helper + mem_cache,
        "estimate: rcu_do_batch per callback dequeues one entry and makes one indirect "
        "call: helper_call + bpf_mem_cache")
    for key, (cycles, what) in NET_CYCLES.items():
        cite(f"net.{key}", cycles / ghz, net_source(cycles, ghz, what))
    hz = host["config_hz"]
    gp_hz = hz or 250
    cite("rcu.grace_period", TICKS_PER_GRACE_PERIOD * 1e9 / gp_hz,
         f"estimate: {TICKS_PER_GRACE_PERIOD} ticks at CONFIG_HZ={gp_hz} "
         f"({'from /proc/config.gz' if hz else 'assumed: /proc/config.gz not readable'}): "
         "one for every busy CPU to report a quiescent state at its tick from user mode, one "
         "for the grace-period kthread (kernel/rcu/tree.c jiffies_till_first_fqs)")

    sysfs = f"{where}: sysfs"
    cite("topology.cpus", host["cpus"], f"{sysfs} (/sys/devices/system/cpu/possible)")
    cite("topology.nodes", host["nodes"], f"{sysfs} (/sys/devices/system/node)")
    cite("topology.distances", host["distances"], f"{sysfs} (node*/distance)")
    cite("memory.line_bytes", host["line_bytes"], f"{sysfs} (cache/index*/coherency_line_size)")
    cite("memory.private_kib", host["private_kib"], f"{sysfs} (L2 cache/index*/size)")
    cite("memory.shared_kib", host["shared_kib"], f"{sysfs} (last-level cache/index*/size)")

    reference = {name: Value(round(s.median, 1), f"{where}: map_perf_test {name[9:]} on one "
                             f"CPU, ns of the thread's CPU time per event; {s.describe()}")
                 for name, s in samples.items() if name.startswith("map_perf_")}
    return values, reference


def _executed_of(name: str) -> int:
    """Instructions the probe program executes (built against placeholder map fds)."""
    probe = next(p for p in TEST_RUN_PROBES if p.name == name)
    items, _ = probe.build(_NoMaps())
    return executed(items)


class _NoMaps:
    """Stands in for a System when only a probe's instruction count is wanted."""

    def map_create(self, *args, **kwargs) -> int:
        return 0

    def map_update_elem(self, *args, **kwargs) -> None:
        return None


def summary(samples: dict[str, Samples], profile: Profile) -> str:
    rows = [[name, f"{s.median:.2f}", s.unit, f"{min(s.values):.2f}-{max(s.values):.2f}"]
            for name, s in samples.items()]
    out = ["measurements (medians over interleaved rounds)",
           report.format_table(["probe", "median", "unit", "spread"], rows), "",
           f"profile {profile.name!r}: {profile.description}"]
    rows = [[path, v.value] for path, v in profile.values.items()]
    out.append(report.format_table(["value", "ns / count"], rows))
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    from .cli import main as cli_main

    return cli_main(["calibrate", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
