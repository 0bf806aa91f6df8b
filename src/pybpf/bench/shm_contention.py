"""The N / 1 of emulated map-perf's processes on more CPUs than the host has, by simulation of
their contention on the shared segment's locks (``pybpf bench map-perf-scaling --simulate``).

Rules this module keeps:
- What it replays is measured: the last lock holds of each process of a run of P
  processes, P the measured N (map-perf ``Config.lock_trace``: each hold's lock, and the
  CLOCK_MONOTONIC ns at which it was taken and let go, ``pybpf.shared.lock_trace``), and
  the time a cache line takes to move between two of the host's CPUs
  (``pybpf.shared.handoff_ns``). Nothing is fitted.
- A process's timeline is its holds in order: the work between two of its lock events runs
  as it ran (on a CPU of its own, beside the others'); a take waits while another process
  holds the lock, then costs one line move more where another process let the lock go last
  (the lock's line comes from that CPU's cache). A lock more than one recorded process took
  is one lock for all N (the common LRU lists', a bucket's); a lock only one took is that
  process's own (its CPU's LRU lists), one per simulated process.
- N processes replay the recorded timelines in turn (process k the (k mod P)-th of P
  recorded), each the whole timeline from a point of its own (spread evenly over it, always
  where the process held no lock), wrapping round. N / 1 = the sum over the processes of
  the time a process's replay takes alone over the time it takes beside the others (each
  one's speed as a share of its speed alone); 1 process gives exactly 1.
- Not simulated (what the curve leaves out): memory bandwidth, shared caches and SMT; the
  lines a hold reads or writes besides its lock's (a bucket's chain, an LRU node), and lines
  written outside a lock (an LRU node's reference bit, a value); lookups read again as a
  writer changed what they read; a bucket only one recorded process happened to take
  counts as that process's own. Recording adds two clock reads to every hold: each gap is
  taken less what a clock read cost (measured as the trace began), so a hold that nests
  others (a common LRU list's, round its evictions' buckets) is not made longer by them.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import simpy

# A lock event of a timeline: (ns since the process's previous lock event, True for a take
# and False for a let-go, the lock's address)
Step = tuple[float, bool, int]


@dataclass(frozen=True)
class Timeline:
    """One process's lock events in order (``steps``), and the indexes where it held no
    lock (``free_at``, ascending: where a replay may begin; 0 among them)."""

    steps: tuple[Step, ...]
    free_at: tuple[int, ...]

    @property
    def locks(self) -> set[int]:
        return {lock for _, _, lock in self.steps}


def timeline(holds: Iterable[tuple[int, int, int]], read_ns: float = 0.0) -> Timeline:
    """A process's timeline from its recorded holds (lock, taken ns, let-go ns; a hold
    still held, let go at 0, is left out), each gap less the ``read_ns`` that the clock
    read ending it added (the recorder's own cost, not the process's work)."""
    events = sorted((at, not take, lock) for lock, taken, released in holds if released
                    for at, take in ((taken, True), (released, False)))
    steps: list[Step] = []
    free_at = [0]
    held = 0
    last = events[0][0] if events else 0
    for at, let_go, lock in events:
        steps.append((max(at - last - read_ns, 0) if steps else 0, not let_go, lock))
        last = at
        held += -1 if let_go else 1
        if held == 0:
            free_at.append(len(steps))
    if free_at[-1] == len(steps):  # the end is the beginning again
        free_at.pop()
    return Timeline(tuple(steps), tuple(free_at))


def shared_locks(timelines: Sequence[Timeline]) -> set[int]:
    """The locks more than one recorded process took: one lock for every simulated
    process."""
    seen: set[int] = set()
    shared: set[int] = set()
    for tl in timelines:
        locks = tl.locks
        shared |= seen & locks
        seen |= locks
    return shared


def replay_steps(tl: Timeline, start: int) -> Iterator[Step]:
    """The lock events of ``tl`` from index ``start`` (where no lock is held), wrapping round
    to it."""
    n = len(tl.steps)
    for i in range(n):
        gap, take, lock = tl.steps[(start + i) % n]
        # the first event of the timeline has no gap before it: at a wrap, the gap the
        # timeline's last let-go came after stands for it
        yield (gap if (start + i) % n else tl.steps[-1][0]) if i else 0, take, lock


@dataclass(frozen=True)
class Simulated:
    """N processes' replay: ``speedup`` (the sum of each one's time alone over its time beside
    the others), ``waits`` (takes that found the lock held) and ``moves`` (takes that moved
    the lock's line from another process's CPU), per process."""

    speedup: float
    waits: float
    moves: float


def simulate(timelines: Sequence[Timeline], nprocs: int, handoff_ns: float) -> Simulated:
    """``nprocs`` processes replaying ``timelines`` (see the module's rules) with a line move
    costing ``handoff_ns``."""
    if nprocs < 1 or not timelines:
        raise ValueError("a simulation needs at least one process and one timeline")
    env = simpy.Environment()
    shared = shared_locks(timelines)
    locks: dict[object, simpy.Resource] = {}
    last_holder: dict[object, int] = {}
    alone = [0.0] * nprocs
    finished = [0.0] * nprocs
    counts = {"waits": 0, "moves": 0}

    def replay(k: int, steps: Iterator[Step]) -> Iterator[simpy.Event]:
        held: dict[object, simpy.resources.resource.Request] = {}
        for gap, take, lock in steps:
            alone[k] += gap
            if gap:
                yield env.timeout(gap)
            key = lock if lock in shared else (lock, k)
            if not take:
                if key in held:
                    locks[key].release(held.pop(key))
                    last_holder[key] = k
                continue
            resource = locks.get(key)
            if resource is None:
                resource = locks[key] = simpy.Resource(env, capacity=1)
            if resource.count:
                counts["waits"] += 1
            request = resource.request()
            yield request
            held[key] = request
            if last_holder.get(key, k) != k:
                counts["moves"] += 1
                yield env.timeout(handoff_ns)
        finished[k] = env.now

    for k in range(nprocs):
        tl = timelines[k % len(timelines)]
        if not tl.steps:
            continue
        # the m-th of the r processes replaying this timeline begins m / r of the way in
        m = k // len(timelines)
        r = len(range(k % len(timelines), nprocs, len(timelines)))
        start = tl.free_at[bisect.bisect_left(tl.free_at, m * len(tl.steps) // r)
                           % len(tl.free_at)]
        env.process(replay(k, replay_steps(tl, start)))
    env.run()
    # each process's speed beside the others' as a share of its speed alone, summed
    speedup = sum(a / f if f else 1.0 for a, f in zip(alone, finished, strict=True))
    return Simulated(speedup, counts["waits"] / nprocs, counts["moves"] / nprocs)
