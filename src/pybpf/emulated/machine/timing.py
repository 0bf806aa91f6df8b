"""Modeled time: per-CPU virtual clocks that the emulated machine advances through a cost model.

The emulator does the work a kernel would do (map operations, allocations, RCU callbacks,
program instructions); this module says what that work would cost on a machine described by a
``Profile`` (pybpf.profiles), and keeps one clock per emulated CPU in nanoseconds. It is the one
place where time is modeled; everything that advances a clock calls one of these primitives:

    timing.charge(cpu, "htab_map_update_elem")     work: the profile's cost, n times
    timing.access(cpu, addr, write=False)          a memory access: free in the private cache,
                                                   else the LLC, a line transfer from the CPU
                                                   that modified it, or DRAM by NUMA distance
    timing.atomic(cpu, addr)                       a locked read-modify-write of a shared line
    timing.spin_lock(cpu, lock) / spin_unlock      waits while another CPU holds ``lock``
    timing.wait_until(cpu, t)                      waiting (a queue, a grace period): never back
    timing.rcu_gp_end(t) ; timing.defer(cpu, t, f) RCU: when a grace period that starts after t
                                                   ends; work (callbacks) that runs on ``cpu``
                                                   once its clock reaches t
    timing.sync(cpu)                               a modeled operation begins (see below)

Memory has addresses: ``alloc_region(size, node)`` places an object's memory on a node (the
node is part of the address), and ``slub`` (slub.py, over page_alloc.py) is the slab allocator
under kmalloc and kfree, which hands back the most recently freed object of a cache first (hot)
or a new slab's (recently freed pages, or fresh memory: cold). Caches are simulated
per line: a private LRU cache per CPU and a shared LRU cache per node, with the sizes of the
profile (times ``cache_scale``, so an experiment scaled down k times keeps the ratio of working
set to cache); a line written by a CPU is invalid in every other private cache, and the next
access from another CPU pays a transfer. Loads are assumed not to overlap (pointer chasing).
The caches and the calls on every operation (access, charge, spin_lock, spin_unlock,
locked_access) run in C when the optional pybpf._cache_model is built; the code here is their
reference.

Determinism. Emulated CPUs run as host threads, which interleave as the host pleases. With a
``VirtualTimeScheduler`` attached, a participating CPU's thread runs a modeled operation only
while its clock is the least among the running participants (within ``quantum_ns``; ties go to
the lower CPU number): every ``sync`` hands the baton to whichever CPU is then furthest behind.
So which CPU takes a lock first, whose write invalidates whose line and which allocation reuses
which object follow virtual time, and two runs of the same workload give the same figures
whatever the host's load. Callers must not call ``sync`` while holding a host lock another
participant may need. Without a scheduler (one thread, or figures nobody compares) ``sync`` only
runs due deferred work.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import operator
import threading
import time
from array import array
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any

from ...accelerator import CACHE_MODEL
from ...profiles import SCHEMA, Profile
from .page_alloc import NODE_SHIFT, PAGE, addr_node
from .slub import Slub

# Sections of the profile whose ns values are work ``charge`` can be asked for.
WORK_SECTIONS = ("cpu", "ops", "alloc", "net")
MEMORY_KINDS = ("private_hit", "shared_hit", "dram_local", "dram_remote", "transfer_local",
                "transfer_remote")
HOT_LINES = 64  # the least a scaled cache keeps (4 KiB): a CPU's every-event lines
LOCK_HISTORY = 32  # intervals a lock remembers (the latest half is kept when it is full)
RMW_LINES = 4096  # lines whose atomic RMWs are remembered (the first remembered goes)


def _evict_oldest(cache: OrderedDict) -> int | None:
    """Drop the least recently used line of ``cache``; the line (None if it was empty)."""
    try:
        return cache.popitem(last=False)[0]
    except KeyError:  # emptied by a thread racing on the same cache
        return None


def machine_distances(distances: list[list[int]], nodes: int) -> list[list[int]]:
    """The profile's SLIT matrix for a machine of ``nodes`` nodes: a machine with more nodes
    than the profile describes puts every pair beyond the matrix at its largest distance (a
    one-node profile has none: such nodes are as near as the local one)."""
    far = max(max(row) for row in distances)
    return [[10 if a == b else distances[a][b] if a < len(distances) and b < len(distances)
             else far for b in range(nodes)] for a in range(nodes)]


@dataclass
class SpinLock:
    """A modeled spinlock: its line, and the intervals CPUs held it [start, end), sorted."""

    addr: int
    held: list[tuple[float, float, int]]
    acquired_at: float = 0.0
    holder: int = -1
    last_end: float = 0.0  # the latest end of any interval: a CPU asking later never waits


class Timing:
    """Virtual clocks of the CPUs of one emulated machine, and the cost model."""

    modeled = True  # False: UnmodeledTiming, where work costs nothing

    def __init__(self, profile: Profile, cpu_node: Iterable[int] | None = None, *,
                 cache_scale: float = 1.0) -> None:
        self.profile = profile
        self.cpu_node = list(profile.cpu_node if cpu_node is None else cpu_node)
        num_cpus = len(self.cpu_node)
        self.num_nodes = max(self.cpu_node) + 1
        if not cache_scale > 0:
            raise ValueError(f"cache_scale must be positive, got {cache_scale!r}")
        self.cache_scale = cache_scale
        self.clock = [0.0] * num_cpus
        self.cost: dict[str, float] = {
            p.key: float(profile[p.path]) for p in SCHEMA
            if p.section in WORK_SECTIONS and p.unit == "ns"}
        self.grace_period = float(profile["rcu.grace_period"])
        self.tick = float(profile["rcu.tick"])
        self._spin_lock_ns = self.cost["spin_lock"]
        # Per CPU: work event -> count (its ns is count x cost); memory kinds and waits,
        # whose cost varies, -> [count, ns].
        self.counts: list[dict[str, int]] = [{} for _ in range(num_cpus)]
        self.stats: list[dict[str, list]] = [{} for _ in range(num_cpus)]
        # Per CPU: ns spent in each context other than its task's (``in_context``), and the
        # contexts running now, innermost last: [name, clock at entry, ns of nested ones].
        self.context_ns: list[dict[str, float]] = [{} for _ in range(num_cpus)]
        self._contexts: list[list[list]] = [[] for _ in range(num_cpus)]
        self._lock = threading.Lock()  # model state, for callers without a scheduler
        self._scheduler: VirtualTimeScheduler | None = None  # see ``scheduler``
        self._init_memory()
        self._gps: list[tuple[float, float]] = []  # grace periods (start, end), in order
        self._deferred: list[list] = [[] for _ in range(num_cpus)]  # heaps (at, seq, fn)
        # True once any work has been deferred: until then ``sync`` without a scheduler
        # has nothing to do, and Machine.bpf_syscall skips it without modeled time.
        self.ever_deferred = False
        self._seq = itertools.count()

    def __repr__(self) -> str:
        return f"Timing(profile={self.profile.name!r}, cpus={len(self.clock)})"

    @property
    def scheduler(self) -> VirtualTimeScheduler | None:
        """The virtual-time scheduler attached to this machine (``with scheduler:``), or
        None. The C extension counts the machines that have one: while none has, its map
        cores' sync does not look."""
        return self._scheduler

    @scheduler.setter
    def scheduler(self, scheduler: VirtualTimeScheduler | None) -> None:
        c_extension = self.c_extension
        if c_extension is not None and (scheduler is None) != (self._scheduler is None):
            c_extension.count_schedulers(-1 if scheduler is None else 1)
        self._scheduler = scheduler

    # -- clocks and work -----------------------------------------------------------------------
    def now(self, cpu: int) -> float:
        """The CPU's clock, ns since the machine started."""
        return self.clock[cpu]

    def ktime_get_ns(self, cpu: int) -> int:
        return int(self.clock[cpu])

    def _account(self, cpu: int, event: str, n: int, ns: float) -> None:
        self.clock[cpu] += ns
        entry = self.stats[cpu].get(event)
        if entry is None:
            self.stats[cpu][event] = [n, ns]
        else:
            entry[0] += n
            entry[1] += ns

    def charge(self, cpu: int, event: str, n: int = 1) -> None:
        """Work: ``n`` times the profile's cost of ``event`` (a key of [cpu], [ops], [alloc],
        [net])."""
        cost = self.cost.get(event)
        if cost is None:
            raise ValueError(f"no cost {event!r} in the model; events are {sorted(self.cost)}")
        self.clock[cpu] += cost * n  # the model's hottest call: only a count is kept
        counts = self.counts[cpu]
        counts[event] = counts.get(event, 0) + n

    @contextmanager
    def in_context(self, cpu: int, name: str) -> Iterator[None]:
        """The body runs on ``cpu`` in context ``name`` (softirq, ksoftirqd, hardirq)
        rather than its task's: the time it takes is counted in ``context_ns``, less what
        contexts nested in it took."""
        stack = self._contexts[cpu]
        frame = [name, self.clock[cpu], 0.0]
        stack.append(frame)
        try:
            yield
        finally:
            stack.pop()
            took = self.clock[cpu] - frame[1]
            totals = self.context_ns[cpu]
            totals[name] = totals.get(name, 0.0) + took - frame[2]
            if stack:
                stack[-1][2] += took

    def wait_until(self, cpu: int, t: float, why: str = "wait") -> None:
        """Advance the CPU's clock to ``t`` if it is behind (waiting never goes back)."""
        if t > self.clock[cpu]:
            self._account(cpu, why, 1, t - self.clock[cpu])

    # -- memory --------------------------------------------------------------------------------
    def _init_memory(self) -> None:
        p = self.profile
        line = int(p["memory.line_bytes"])
        self.line_shift = line.bit_length() - 1
        # A scaled-down cache keeps room for the lines touched on every event (locks, list
        # heads, per-CPU data), which stay cached on the real machine at any scale.
        self.private_lines = max(min(HOT_LINES, int(p["memory.private_kib"] * 1024 // line)),
                                 int(p["memory.private_kib"] * 1024 // line * self.cache_scale))
        self.shared_lines = max(min(HOT_LINES, int(p["memory.shared_kib"] * 1024 // line)),
                                int(p["memory.shared_kib"] * 1024 // line * self.cache_scale))
        # private-cache hits per CPU (they cost nothing): int64s the C model adds to in place
        self.hits = array("q", bytes(8 * len(self.clock)))
        self.private_hit = 0.0  # included in the work costs, which were measured hot
        self.shared_hit = float(p["memory.shared_hit"])
        dist = machine_distances(p.distances, self.num_nodes)
        far = max(max(row) for row in dist)
        local, remote = float(p["memory.dram_local"]), float(p["memory.dram_remote"])

        def between(d: int, near: float, farthest: float) -> float:
            return near if far == 10 else near + (farthest - near) * (d - 10) / (far - 10)

        self.dram = [[between(dist[a][b], local, remote) for b in range(len(dist))]
                     for a in range(len(dist))]
        t_local, t_remote = float(p["memory.transfer_local"]), float(p["memory.transfer_remote"])
        self.transfer = [[t_local if a == b else between(dist[a][b], t_local, t_remote)
                          for b in range(len(dist))] for a in range(len(dist))]
        # The caches: the C model (pybpf._cache_model) when it is built, the same step for
        # step, else the reference here: ``access`` with ``_own`` and ``_forget``, and the
        # calls around it on every operation, ``charge``, ``spin_lock``, ``spin_unlock``,
        # ``locked_access``.
        # The C extension the hot paths use (HtabCore...), or None: their Python reference.
        # Where it is set and time is modeled, the model below is the C one too.
        self.c_extension = CACHE_MODEL
        self._cache_model = None
        if CACHE_MODEL is not None and self.modeled:
            self._cache_model = model = CACHE_MODEL.CacheModel(
                cpu_node=self.cpu_node, line_shift=self.line_shift, node_shift=NODE_SHIFT,
                private_lines=self.private_lines, shared_lines=self.shared_lines,
                shared_hit=self.shared_hit, dram=self.dram, transfer=self.transfer,
                spin_lock_ns=self._spin_lock_ns, lock_history=LOCK_HISTORY, cost=self.cost,
                clock=self.clock, hits=self.hits, stats=self.stats, counts=self.counts)
            self.access = model.access  # type: ignore[method-assign]
            self.charge = model.charge  # type: ignore[method-assign]
            self.spin_lock = model.spin_lock  # type: ignore[method-assign]
            self.spin_unlock = model.spin_unlock  # type: ignore[method-assign]
            self.locked_access = model.locked_access  # type: ignore[method-assign]
        else:
            self._private: list[OrderedDict[int, int]] = [OrderedDict() for _ in self.clock]
            self._shared: list[OrderedDict[int, None]] = [OrderedDict()
                                                          for _ in range(self.num_nodes)]
            self._version: dict[int, int] = {}  # line -> bumped whenever another CPU writes it
            self._dirty: dict[int, int] = {}  # line -> the CPU holding it modified
        self._next_addr = [(node << NODE_SHIFT) + PAGE for node in range(len(dist))]
        # line -> the stretches [start, end) of virtual time atomic RMWs held it, sorted
        self._line_rmws: dict[int, list[tuple[float, float]]] = {}
        self.slub = Slub(self)  # after the model: its list locks are new_lock's

    def alloc_region(self, size: int, node: int) -> int:
        """Fresh memory of ``size`` bytes on ``node`` (page aligned): cold in every cache."""
        if not 0 <= node < len(self._next_addr):
            raise ValueError(f"node {node} does not exist in profile {self.profile.name!r}")
        with self._lock:
            addr = self._next_addr[node]
            self._next_addr[node] += max(PAGE, -(-size // PAGE) * PAGE)
        return addr

    def access(self, cpu: int, addr: int, write: bool = False) -> float:
        """One access to the line holding ``addr``; returns (and charges) the stall in ns.
        Address 0 is memory the model does not place (objects made outside a map): free.

        A line's version moves on whenever a CPU writes it without holding it modified, so a
        copy in a private cache is current exactly when it carries the line's version (and
        then no other CPU holds the line modified). The dict operations here are each atomic
        under the GIL and the caches tolerate a racing thread on the same CPU, so the model
        needs no lock of its own.

        This is the reference: when pybpf._cache_model is built, an instance's ``access``,
        ``charge``, ``spin_lock``, ``spin_unlock`` and ``locked_access`` are its C twins, which
        give the same results for any calls.
        """
        if not addr:
            return 0.0
        line = addr >> self.line_shift
        private = self._private[cpu]
        version = self._version.get(line, 0)
        if private.get(line) == version:  # the hot case: a hit in the private cache
            private[line] = private.pop(line, version)  # most recently used now
            self.hits[cpu] += 1
            if write and self._dirty.get(line) != cpu:
                self._own(cpu, line, version, private)
            return 0.0
        node = self.cpu_node[cpu]
        owner = self._dirty.get(line, cpu)
        if owner != cpu and self._private[owner].get(line) == version:
            kind = "transfer_remote" if self.cpu_node[owner] != node else "transfer_local"
            ns = self.transfer[node][self.cpu_node[owner]]
            if not write:
                self._dirty.pop(line, None)  # written back: shared and clean from now on
        else:
            if owner != cpu:  # the owner's copy was evicted, so written back
                self._dirty.pop(line, None)
            shared = self._shared[node]
            if shared.pop(line, False) is None:
                kind, ns = "shared_hit", self.shared_hit
            else:
                home = addr_node(addr)
                kind = "dram_local" if home == node else "dram_remote"
                ns = self.dram[node][home]
            shared[line] = None
            if len(shared) > self.shared_lines:
                self._forget(_evict_oldest(shared))
        private.pop(line, None)  # a stale copy goes: the fresh one is the most recent
        private[line] = version
        if len(private) > self.private_lines:
            _evict_oldest(private)
        if write and self._dirty.get(line) != cpu:
            self._own(cpu, line, version, private)
        self._account(cpu, kind, 1, ns)
        return ns

    def _forget(self, line: int | None) -> None:
        """A line no cache holds any more needs no version or owner: the model's memory
        stays bounded by the caches' sizes, however many objects come and go."""
        if line is None or any(line in cache for cache in self._private) \
                or any(line in cache for cache in self._shared):
            return
        self._version.pop(line, None)
        self._dirty.pop(line, None)

    def _own(self, cpu: int, line: int, version: int, private: OrderedDict) -> None:
        """Read for ownership: every other copy of ``line`` becomes stale."""
        version += 1
        self._version[line] = version
        private[line] = version
        self._dirty[line] = cpu

    @property
    def cache_model(self) -> str:
        """Which implementation of the caches runs: "C" or "Python"."""
        return "Python" if self._cache_model is None else "C"

    def cache_state(self) -> dict[str, Any]:
        """The caches, as the same plain values from either implementation (to compare
        them): "private" per CPU [(line, version)], "shared" per node [line], least recently
        used first; "version" {line: version} and "dirty" {line: the CPU holding it
        modified}."""
        if self._cache_model is not None:
            return self._cache_model.state()
        return {"private": [list(cache.items()) for cache in self._private],
                "shared": [list(cache) for cache in self._shared],
                "version": dict(self._version), "dirty": dict(self._dirty)}

    def atomic(self, cpu: int, addr: int) -> None:
        """A locked read-modify-write of the line holding ``addr`` (a shared counter).

        The line serves one RMW at a time: it must come to this CPU modified and stay there
        until the operation is done, so RMWs of several CPUs on one line run one after
        another, each taking the line's transfer and the operation. This one takes the
        earliest stretch of the line's time, at or after the CPU's clock, that no other
        CPU's RMW holds; the CPU waits until then (``line_wait``). A contended counter then
        runs at the line's rate, not at each CPU's."""
        start = self.clock[cpu]
        self.access(cpu, addr, write=True)
        self.charge(cpu, "atomic")
        busy = self._line_rmws.get(addr >> self.line_shift)
        if busy is None:
            busy = self._line_rmws[addr >> self.line_shift] = []
            if len(self._line_rmws) > RMW_LINES:
                del self._line_rmws[next(iter(self._line_rmws))]  # the first remembered
        took = self.clock[cpu] - start
        at = start
        for other_start, other_end in busy[max(0, bisect.bisect_right(busy, (start,)) - 1):]:
            if other_start >= at + took:
                break
            if other_end > at:
                at = other_end
        if at > start:
            self._account(cpu, "line_wait", 1, at - start)
        bisect.insort(busy, (at, at + took))
        if len(busy) > LOCK_HISTORY:
            del busy[:-LOCK_HISTORY // 2]  # a CPU further behind than these does not wait

    # -- locks ---------------------------------------------------------------------------------
    def new_lock(self, addr: int) -> SpinLock:
        """A modeled spinlock on ``addr``'s line: the C model's own type when it runs (its
        fields in C, the same ones), which its spin_lock and spin_unlock need."""
        if self._cache_model is not None:
            return CACHE_MODEL.SpinLock(addr, [])
        return SpinLock(addr, [])

    def spin_lock(self, cpu: int, lock: SpinLock) -> None:
        """Take ``lock``: wait while another CPU held it at this CPU's time, then the line."""
        t = self.clock[cpu]
        if t < lock.last_end:
            for start, end, holder in lock.held:
                if start <= t < end and holder != cpu:
                    t = end  # intervals are sorted: a later one may start right at this end
            if t > self.clock[cpu]:
                self.wait_until(cpu, t, "lock_wait")
        line = lock.addr >> self.line_shift
        private = self._private[cpu]
        if self._dirty.get(line) == cpu and private.get(line) == self._version.get(line, 0):
            private[line] = private.pop(line)  # the hot case, inline: this CPU holds the line
            self.hits[cpu] += 1
        else:
            self.access(cpu, lock.addr, write=True)
        self.clock[cpu] += self._spin_lock_ns
        counts = self.counts[cpu]
        counts["spin_lock"] = counts.get("spin_lock", 0) + 1
        lock.acquired_at, lock.holder = self.clock[cpu], cpu

    def spin_unlock(self, cpu: int, lock: SpinLock) -> None:
        """Release ``lock``: the interval it was held joins its history. (Threads sharing one
        emulated CPU without a scheduler may interleave here; the interval then starts at
        the release, since the acquire is no longer known.)"""
        end = self.clock[cpu]
        start = lock.acquired_at if lock.holder == cpu else end
        held = lock.held
        if not held or start >= held[-1][0]:
            held.append((start, end, cpu))
        else:
            bisect.insort(held, (start, end, cpu))
        lock.holder = -1
        if end > lock.last_end:
            lock.last_end = end
        if len(held) > LOCK_HISTORY:
            del held[:-LOCK_HISTORY // 2]  # a CPU further behind than these does not wait

    def locked_access(self, cpu: int, lock: SpinLock, addr: int, write: bool = True) -> None:
        """Take ``lock``, touch ``addr``, release: a list push or pop under its lock."""
        self.spin_lock(cpu, lock)
        self.access(cpu, addr, write)
        self.spin_unlock(cpu, lock)

    # -- RCU and deferred work -----------------------------------------------------------------
    def rcu_gp_end(self, t: float) -> float:
        """When the grace period that a callback queued at ``t`` waits for ends: the first
        one starting at or after ``t`` (grace periods run one after another, each
        ``rcu.grace_period`` long, and start only when someone waits for one)."""
        with self._lock:
            gps = self._gps
            if not gps or t >= gps[-1][1]:
                gps.append((t, t + self.grace_period))
                end = gps[-1][1]
            else:
                starts = [s for s, _ in gps]
                i = bisect.bisect_left(starts, t)
                if i < len(gps):
                    end = gps[i][1]
                else:  # t falls inside the last one: the next starts when it ends
                    last = gps[-1][1]
                    gps.append((last, last + self.grace_period))
                    end = gps[-1][1]
            if len(gps) > LOCK_HISTORY:
                del gps[:-LOCK_HISTORY // 2]
        return end

    def defer(self, cpu: int, at: float, work: Callable[[], None]) -> None:
        """Run ``work`` on ``cpu`` once its clock reaches ``at`` (at its next ``sync``); the
        work charges its own costs to ``cpu``."""
        self.ever_deferred = True
        heapq.heappush(self._deferred[cpu], (at, next(self._seq), work))

    def deferred(self, cpu: int) -> int:
        """Work waiting to run on ``cpu``."""
        return len(self._deferred[cpu])

    def deferred_work(self, cpu: int) -> list:
        """``cpu``'s heap of deferred work itself (the native tier reads its length without
        Python; nothing else may change it)."""
        return self._deferred[cpu]

    def run_deferred(self, cpu: int, until: float | None = None) -> int:
        """Run ``cpu``'s deferred work due by ``until`` (default: its clock); how many ran."""
        heap = self._deferred[cpu]
        ran = 0
        while heap and heap[0][0] <= (self.clock[cpu] if until is None else until):
            at, _, work = heapq.heappop(heap)
            self.wait_until(cpu, at, "idle")
            work()
            ran += 1
        return ran

    def run_all_deferred(self, until: float,
                         on_cpu: Callable[[int], AbstractContextManager]) -> int:
        """Run every CPU's deferred work due by ``until`` in virtual-time order across the
        CPUs (work on one CPU may make another's due: RCU's grace periods), each inside
        ``on_cpu(cpu)``; how many ran."""
        ran = 0
        while True:
            due = [(heap[0][0], cpu) for cpu, heap in enumerate(self._deferred) if heap]
            if not due or min(due)[0] > until:
                return ran
            at, cpu = min(due)
            _, _, work = heapq.heappop(self._deferred[cpu])
            self.wait_until(cpu, at, "idle")
            with on_cpu(cpu):
                work()
            ran += 1

    def sync(self, cpu: int) -> None:
        """A modeled operation begins on ``cpu``: take the baton if a scheduler is attached,
        then run the deferred work that is due. (The C extension tells, cheaper than the call,
        when the scheduler's sync would do nothing: ``sync_idle``, modeled time on or off.)"""
        scheduler = self._scheduler
        if scheduler is not None:
            c_extension = self.c_extension
            if c_extension is None or not c_extension.sync_idle(scheduler, self.clock, cpu):
                scheduler.sync(cpu)
        if self._deferred[cpu]:
            self.run_deferred(cpu)

    # -- reports -------------------------------------------------------------------------------
    def breakdown(self, cpu: int) -> dict[str, tuple[int, float]]:
        """{event: (count, ns)} of ``cpu``, most expensive first (private-cache hits, which
        cost nothing, last)."""
        items = [(event, count, count * self.cost[event])
                 for event, count in self.counts[cpu].items()]
        items += [(event, count, ns) for event, (count, ns) in self.stats[cpu].items()]
        out = {event: (count, ns) for event, count, ns in sorted(items, key=lambda i: -i[2])}
        if self.hits[cpu]:
            out["private_hit"] = (self.hits[cpu], 0.0)
        return out

    def snapshot(self, cpu: int) -> tuple[float, dict[str, tuple[int, float]]]:
        """(clock, per-event totals) of ``cpu``, to subtract from a later one."""
        return self.clock[cpu], self.breakdown(cpu)

    def since(self, cpu: int, snap: tuple[float, dict[str, tuple[int, float]]]
              ) -> tuple[float, dict[str, tuple[int, float]]]:
        """ns elapsed on ``cpu`` since ``snap`` and what it was spent on."""
        t0, before = snap
        delta = {}
        for event, (count, ns) in self.breakdown(cpu).items():
            c0, ns0 = before.get(event, (0, 0.0))
            if count != c0:
                delta[event] = (count - c0, ns - ns0)
        return self.clock[cpu] - t0, delta


class UnmodeledTiming(Timing):
    """Modeled time switched off (``Machine(modeled_time=False)``): work costs nothing.

    The clocks, deferred work and memory placement stay (timers and ``Machine.step`` use
    them), but ``charge``, ``access``, ``atomic`` and the spinlocks do nothing, so a clock
    moves only by waiting: deferred work run by ``Machine.step``. What the emulator does
    (map contents, errno, orders) does not depend on the model, only what it would cost; hot
    paths may skip their cost calls altogether when ``modeled`` is False.
    """

    modeled = False

    def __repr__(self) -> str:
        return f"UnmodeledTiming(cpus={len(self.clock)})"

    def charge(self, cpu: int, event: str, n: int = 1) -> None:
        """Nothing: work costs nothing without modeled time."""

    def access(self, cpu: int, addr: int, write: bool = False) -> float:
        return 0.0

    def atomic(self, cpu: int, addr: int) -> None:
        pass

    def spin_lock(self, cpu: int, lock: SpinLock) -> None:
        pass

    def spin_unlock(self, cpu: int, lock: SpinLock) -> None:
        pass

    def locked_access(self, cpu: int, lock: SpinLock, addr: int, write: bool = True) -> None:
        pass


def _swap_dicts(states: list[dict], incoming: list[dict]) -> list[dict]:
    """Each dict of ``states`` takes the contents of its twin in ``incoming``; what they held,
    as new dicts in the same order (the state of the task switched out)."""
    saved = []
    for state, restored in zip(states, incoming, strict=True):
        saved.append(state.copy())
        state.clear()
        state.update(restored)
    return saved


# The reference above, or its C twin (one call instead of a loop of three calls per dict, on
# every hand-over between greenlets).
swap_dicts = _swap_dicts if CACHE_MODEL is None else CACHE_MODEL.swap_dicts


class VirtualTimeScheduler:
    """Conservative virtual-time scheduling of emulated CPUs.

    ``participants`` are the CPUs that take part, all known before any starts (one that
    joined late could find others already ahead). ``with scheduler:`` attaches it to the
    timing model around the experiment; each participant calls ``timing.sync(cpu)`` before
    each modeled operation; only the holder of the baton runs, and ``sync`` passes the baton to
    the participant with the least clock (ties: the lower CPU) unless the caller's clock is
    within ``quantum_ns`` of it. A participant that leaves (it is done) no longer holds anyone
    back.

    Two ways to run the participants, with the same order of operations and so the same
    figures: ``run(bodies)`` runs each body on a greenlet of one host thread when the
    ``greenlet`` package is installed (a hand-over costs about 3 us here, a bare switch 0.2; the
    ``task_locals``, the thread-local state of a task such as the machine's current CPU and
    RCU's read-side nesting, are switched with it), else on a host thread each; a body may
    also run on a thread of its own inside ``with scheduler.running(cpu):`` (a hand-over is
    then a wake-up of another thread, 20-25 us here). With threads, a wait longer than
    ``timeout_s`` of host time raises: some participant is blocked outside the model.
    """

    # slots: the C cache model reads what a sync checks at their offsets (sync_does_nothing)
    __slots__ = ("timing", "quantum_ns", "timeout_s", "_active", "_active_clocks", "_lock",
                 "_turn", "_holder", "handoffs", "_task_locals", "_greenlets",
                 "_greenlet_thread", "_saved", "_locals_of", "_host_ns", "_switched_in",
                 "_run_started", "_local_dicts")

    def __init__(self, timing: Timing, participants: Iterable[int], *, quantum_ns: float = 0.0,
                 timeout_s: float = 120.0, task_locals: Iterable[threading.local] = ()) -> None:
        self.timing = timing
        self.quantum_ns = quantum_ns
        self.timeout_s = timeout_s
        self._active = sorted(set(participants))
        for cpu in self._active:
            if not 0 <= cpu < len(timing.clock):
                raise ValueError(f"CPU {cpu} is not a CPU of the machine")
        self._active_clocks = self._clocks_getter()
        self._lock = threading.Lock()
        self._turn = {cpu: threading.Condition(self._lock) for cpu in self._active}
        self._holder: int | None = None
        self.handoffs = 0
        self._task_locals = list(task_locals)
        self._greenlets: dict[int, Any] = {}  # cpu -> its greenlet, while ``run`` runs them
        self._greenlet_thread: int | None = None
        # cpu (None: the caller of run) -> its task_locals while switched out
        self._saved: dict[int | None, list[dict]] = {}
        self._locals_of: int | None = None  # whose task_locals the thread's now are
        # cpu -> host time its greenlet ran (wall ns: a thread's CPU clock is a syscall of
        # about 0.6 us here, and hand-overs come every few microseconds), and the thread's
        # CPU and wall clocks when the greenlets started, which turn it into CPU time
        self._host_ns: dict[int, int] = {}
        self._switched_in = 0
        self._run_started = (0, 0)
        self._local_dicts: list[dict] = []  # the task-locals' dicts in the greenlets' thread

    def __enter__(self) -> VirtualTimeScheduler:
        """Attach to the timing model for the experiment."""
        if self.timing.scheduler is not None:
            raise RuntimeError("another virtual-time scheduler is attached to this machine")
        self.timing.scheduler = self
        return self

    def __exit__(self, *exc: object) -> None:
        self.timing.scheduler = None

    def _clocks_getter(self) -> Callable[[list[float]], tuple[float, ...]] | None:
        """What reads the participants' clocks, in ``_active``'s order, as one tuple (a C
        call; ``min`` with a key function calls back for each); None for fewer than two."""
        return operator.itemgetter(*self._active) if len(self._active) > 1 else None

    def _leave(self, cpu: int) -> None:
        """``cpu`` is no longer a participant."""
        self._active.remove(cpu)
        self._active_clocks = self._clocks_getter()

    def _least(self) -> int:
        """The participant with the least clock, the lowest CPU of a tie (``_active`` is
        sorted, and ``index`` finds the first of equal clocks)."""
        active = self._active
        if len(active) == 1:
            return active[0]
        clocks = self._active_clocks(self.timing.clock)
        return active[clocks.index(min(clocks))]

    def _pass_to(self, cpu: int) -> None:
        if cpu != self._holder:
            self.handoffs += 1
        self._holder = cpu
        self._turn[cpu].notify()

    def _wait_turn(self, cpu: int) -> None:  # with self._lock held
        if self._holder is None:
            self._pass_to(self._least())
        while self._holder != cpu:
            if not self._turn[cpu].wait(self.timeout_s):
                raise RuntimeError(
                    f"virtual-time scheduler: CPU {cpu} waited {self.timeout_s} s for its turn, "
                    f"held by CPU {self._holder}: is that CPU's thread blocked outside the "
                    "model, or did it end without leaving?")

    # -- running the participants ---------------------------------------------------------------
    def run(self, bodies: dict[int, Callable[[], None]]) -> None:
        """Run each participant's body (``{cpu: body}``, every participant) to its end, in
        virtual-time order, and re-raise the first exception one raised."""
        if sorted(bodies) != self._active or self._holder is not None:
            raise ValueError(f"run needs a body for each participant {self._active}, before "
                             "any has started")
        if self.timing.scheduler is not self:
            raise RuntimeError("the scheduler is not attached: use `with scheduler:` around "
                               "run")
        errors: list[BaseException] = []

        def guarded(cpu: int) -> Callable[[], None]:
            def body() -> None:
                try:
                    bodies[cpu]()
                except BaseException as exc:
                    errors.append(exc)
            return body

        try:
            import greenlet
        except ImportError:
            greenlet = None
        if greenlet is None:
            def on_thread(cpu: int) -> None:
                with self.running(cpu):
                    guarded(cpu)()

            threads = [threading.Thread(target=on_thread, args=(cpu,), name=f"cpu{cpu}")
                       for cpu in bodies]
            for th in threads:
                th.start()
            for th in threads:
                th.join()
        else:
            self._run_greenlets(greenlet, {cpu: guarded(cpu) for cpu in bodies})
        if errors:
            raise errors[0]

    def _run_greenlets(self, greenlet: Any, bodies: dict[int, Callable[[], None]]) -> None:
        """The participants as greenlets of this thread: the loop here starts the one with
        the least clock and takes over whenever one ends; ``sync`` switches between them."""
        # Each task starts with what a new thread would find; the caller's state comes back.
        self._saved = {cpu: self._new_thread_locals() for cpu in bodies}
        self._local_dicts = [loc.__dict__ for loc in self._task_locals]
        self._saved[None] = [dict(state) for state in self._local_dicts]
        self._locals_of = None
        self._host_ns = dict.fromkeys(bodies, 0)
        self._run_started = (time.thread_time_ns(), time.perf_counter_ns())
        self._greenlet_thread = threading.get_ident()
        self._greenlets = {cpu: greenlet.greenlet(body) for cpu, body in bodies.items()}
        try:
            while self._active:
                self._switch_to(self._least())
                # Back here when a greenlet ends: the one that held the baton.
                ended = self._holder
                assert ended is not None and self._greenlets[ended].dead
                self._host_ns[ended] += time.perf_counter_ns() - self._switched_in
                self._leave(ended)
                self._holder = None
        finally:
            self._greenlets = {}
            self._greenlet_thread = None
            self._restore_locals(None)

    def _new_thread_locals(self) -> list[dict]:
        """The task-local state a new host thread starts with (its __init__ run)."""
        state: list[dict] = []
        reader = threading.Thread(target=lambda: state.extend(
            dict(loc.__dict__) for loc in self._task_locals))
        reader.start()
        reader.join()
        return state

    def _switch_to(self, cpu: int) -> None:
        """Hand the baton to ``cpu``'s greenlet with its task-local state; returns when the
        baton comes back to the caller (or, for the loop in ``_run_greenlets``, when that
        greenlet ends)."""
        now = time.perf_counter_ns()
        if self._holder is not None:
            self._host_ns[self._holder] += now - self._switched_in
        if cpu != self._holder:
            self.handoffs += 1
        self._holder = cpu
        self._switched_in = now
        self._restore_locals(cpu)
        self._greenlets[cpu].switch()

    def _restore_locals(self, cpu: int | None) -> None:
        """Make the thread's task-local state ``cpu``'s (``None``: the caller of ``run``),
        keeping the state of the one switched out."""
        owner = self._locals_of
        if owner == cpu:
            return
        self._saved[owner] = swap_dicts(self._local_dicts, self._saved[cpu])
        self._locals_of = cpu

    def host_cpu_ns(self, cpu: int) -> int:
        """Host CPU time the participant ``cpu`` has run so far, for its own figures: on
        greenlets, its share of the thread's wall time since they started, times the
        thread's CPU time over that wall time (call it from the greenlets' thread); on
        threads, the thread's own CPU time."""
        if cpu not in self._host_ns:  # not run on greenlets
            return time.thread_time_ns()
        ran = self._host_ns[cpu]
        now = time.perf_counter_ns()
        if self._greenlet_thread is not None and self._holder == cpu:
            ran += now - self._switched_in
        # its share of the thread's wall time, in the thread's CPU time so far
        cpu_started, wall_started = self._run_started
        wall = now - wall_started
        return ran * (time.thread_time_ns() - cpu_started) // wall if wall > 0 else ran

    @contextmanager
    def running(self, cpu: int) -> Iterator[None]:
        """The body is ``cpu``'s thread: it starts on its turn and leaves when done."""
        if cpu not in self._turn:
            raise ValueError(f"CPU {cpu} is not a participant of this scheduler")
        if self.timing.scheduler is not self:
            raise RuntimeError("the scheduler is not attached: use `with scheduler:` around "
                               "the participants' threads")
        with self._lock:
            self._wait_turn(cpu)
        try:
            yield
        finally:
            with self._lock:
                self._leave(cpu)
                if self._holder == cpu:
                    self._holder = None
                    if self._active:
                        self._pass_to(self._least())

    def is_running(self, cpu: int) -> bool:
        """Whether ``cpu`` is a participant whose thread has not left."""
        return cpu in self._active

    def sync(self, cpu: int) -> None:
        """Let CPUs that are behind ``cpu`` in virtual time go first."""
        if self._greenlet_thread is not None:
            if cpu != self._holder or threading.get_ident() != self._greenlet_thread:
                return  # not a participant (a thread, or a CPU, outside the experiment)
            least = self._least()
            if least != cpu:
                clock = self.timing.clock
                if clock[cpu] > clock[least] + self.quantum_ns:
                    self._switch_to(least)
            return
        with self._lock:
            if self._holder != cpu:
                if cpu not in self._active:
                    return  # not a participant (a thread outside the experiment)
                self._wait_turn(cpu)
                return
            least = self._least()
            if least == cpu:
                return
            clock = self.timing.clock
            if clock[cpu] <= clock[least] + self.quantum_ns:
                return
            self._pass_to(least)
            self._wait_turn(cpu)
