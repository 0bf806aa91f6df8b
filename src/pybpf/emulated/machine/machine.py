"""The emulated machine: CPUs, NUMA nodes, the current CPU and task of each thread, modeled
time, RCU, and NUMA access accounting.

Rules this module keeps:
- The topology is this host's (read from /sys) unless declared: ``Machine(cpus=20, nodes=2)``
  puts CPUs 0-9 on node 0 and 10-19 on node 1 (nodes are spread contiguously; a node count
  that does not divide the CPUs gives the first nodes one CPU fewer). A profile given without
  cpus/nodes brings its own topology.
- Time is modeled (``timing``, timing.py): every CPU has a virtual clock that the work the
  emulator does advances, at the costs of a machine profile (the shipped ``host`` one unless
  another is given). ``bpf_ktime_get_ns`` reads the current CPU's clock.
  ``modeled_time=False`` (or ``PYBPF_NO_MODELED_TIME`` set, when the argument is not given)
  switches the cost model off, for runs that want the emulator's results, not its figures:
  work is free (``UnmodeledTiming``), clocks move only when ``step`` runs deferred work (a
  timer fires there), and RCU completes grace periods by polling (``step``,
  ``synchronize_rcu``, or a flood of callbacks) instead of at modeled ticks. Contents, errno
  and orders are the same either way.
- The current CPU is per thread (``on_cpu``); a thread that never chose one runs on CPU 0. A
  thread may also stand for a task with its own pid (``set_task``), which
  bpf_get_current_pid_tgid reports; otherwise the host's ids. The task's name (``comm``,
  bpf_get_current_comm) is the one ``set_task`` gave, else the host thread's own
  (/proc/thread-self/comm): the thread that runs a test run is the kernel's current there.
- Randomness the kernel draws (hash seeds, bpf_get_prandom_u32 per CPU) comes from generators
  seeded by ``seed``, so a run can be repeated exactly.
- Memory records its node; every element access from a CPU is counted as local (same node)
  or remote, per map and per CPU, by ``AccessStats``, beside what the accesses cost.
"""

from __future__ import annotations

import bisect
import os
import random
import select
import threading
import weakref
from array import array
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from ...profiles import Profile, load_profile
from ...topology import Topology, host_topology
from .rcu import Rcu, settle_ns
from .timing import Timing, UnmodeledTiming

DEFAULT_PROFILE = "host"
NO_MODELED_TIME_ENV = "PYBPF_NO_MODELED_TIME"  # set (non-empty): modeled time off by default


def modeled_time_default() -> bool:
    """Whether a machine models time when not told: yes, unless PYBPF_NO_MODELED_TIME is set."""
    return not os.environ.get(NO_MODELED_TIME_ENV)

T = TypeVar("T")


def per_machine(factory: Callable[[Machine], T]) -> Callable[[Machine], T]:
    """A side table: the returned ``get(machine)`` gives the one ``factory(machine)`` made for
    that machine on first use. The floors above keep their per-machine state so (the network,
    the psock table), so the machine owns nothing that stands on it; an entry goes with its
    machine."""
    table: weakref.WeakKeyDictionary[Machine, T] = weakref.WeakKeyDictionary()
    lock = threading.Lock()

    def get(machine: Machine) -> T:
        obj = table.get(machine)
        if obj is None:
            with lock:  # two threads asking first make one object
                obj = table.get(machine)
                if obj is None:
                    obj = table[machine] = factory(machine)
        return obj

    return get


def declared_topology(cpus: int, nodes: int) -> Topology:
    """``cpus`` CPUs spread contiguously over ``nodes`` nodes."""
    for name, value in (("cpus", cpus), ("nodes", nodes)):
        if type(value) is not int:
            raise TypeError(f"{name} must be an int, got {value!r}")
    if cpus < 1:
        raise ValueError(f"a machine needs at least one CPU, got cpus={cpus}")
    if nodes < 1:
        raise ValueError(f"a machine needs at least one NUMA node, got nodes={nodes}")
    if nodes > cpus:
        raise ValueError(f"nodes={nodes} exceeds cpus={cpus}: every node needs a CPU")
    return Topology([cpu * nodes // cpus for cpu in range(cpus)])


# Thread-local state of a task that modules keep for every machine (a thread's pending
# flushes, say): a scheduler that runs several tasks on one host thread switches it with the
# task (``Machine.task_locals``). Each module adds its own here.
MODULE_TASK_LOCALS: list[threading.local] = []


TASK_COMM_LEN = 16  # include/linux/sched.h: a task's comm, its NUL included


def eventfd_wait(fd: int, timeout: float | None) -> bool:
    """Wait up to ``timeout`` seconds for eventfd ``fd`` (a reader's wake-up) and consume it;
    False on timeout. Another waiter may take it first: that still counts as woken."""
    if not select.select([fd], [], [], timeout)[0]:
        return False
    try:
        os.eventfd_read(fd)
    except BlockingIOError:
        pass
    return True


def thread_comm() -> bytes:
    """The calling host thread's comm (/proc/thread-self/comm), without its NUL."""
    try:
        with open("/proc/thread-self/comm", "rb") as f:
            comm = f.read().rstrip(b"\n")
    except OSError:  # no procfs: the name Linux gives a thread of "python3"
        comm = b"python3"
    return comm[:TASK_COMM_LEN - 1]


class _CurrentCpu(threading.local):
    cpu = 0
    task: tuple[int, int] | None = None  # (tgid, pid) this thread stands for, if set
    comm: bytes | None = None  # that task's comm, if set (None: the host thread's)


class AccessStats:
    """Local and remote element accesses of one object (a map), per CPU.

    ``access(cpu, node)`` is the cheap call made on each element access: the memory touched
    lives on ``node``, the access comes from ``cpu``. Python counts into the lists ``local``
    and ``remote``; the C map cores and the native tier count into ``c_local`` and
    ``c_remote``, arrays of int64 they add to where they lie (a list item is a Python int,
    which C would have to make anew at each access, and an array item is one Python would);
    a CPU's count is the sum of both.
    """

    __slots__ = ("cpu_node", "local", "remote", "c_local", "c_remote")

    def __init__(self, cpu_node: list[int]) -> None:
        self.cpu_node = cpu_node
        self.local = [0] * len(cpu_node)
        self.remote = [0] * len(cpu_node)
        self.c_local = array("q", bytes(8 * len(cpu_node)))
        self.c_remote = array("q", bytes(8 * len(cpu_node)))

    def access(self, cpu: int, node: int) -> None:
        if self.cpu_node[cpu] == node:
            self.local[cpu] += 1
        else:
            self.remote[cpu] += 1

    def counts(self) -> tuple[list[int], list[int]]:
        """Local and remote accesses per CPU, Python's and C's together."""
        return ([a + b for a, b in zip(self.local, self.c_local, strict=True)],
                [a + b for a, b in zip(self.remote, self.c_remote, strict=True)])

    def by_cpu(self) -> dict[int, tuple[int, int]]:
        """{cpu: (local, remote)} for every CPU that made an access."""
        pairs = zip(*self.counts(), strict=True)
        return {cpu: (loc, rem) for cpu, (loc, rem) in enumerate(pairs) if loc or rem}

    def remote_share(self, cpu: int | None = None) -> float:
        """Fraction of accesses (of ``cpu``, or of all CPUs) that were remote; 0.0 if none."""
        local, remote = self.counts()
        if cpu is None:
            loc, rem = sum(local), sum(remote)
        else:
            loc, rem = local[cpu], remote[cpu]
        return rem / (loc + rem) if loc + rem else 0.0

    def totals(self) -> tuple[int, int]:
        local, remote = self.counts()
        return sum(local), sum(remote)


class UserMemory:
    """User-space memory of the emulated tasks (one address space), for what programs read
    with bpf_probe_read_user: a syscall tracepoint's record carries user pointers.

    ``map(data)`` places a copy at a fresh page-aligned address and returns it; ``read``
    answers None for an address range that is not (wholly) mapped, i.e. a fault.
    """

    BASE = 0x7F00_0000_0000
    PAGE = 4096
    # bpf_probe_read_user's C path (_bpf_trace.c) reads the lists at their slots' offsets
    __slots__ = ("_starts", "_blocks", "_next", "_lock")

    def __init__(self) -> None:
        self._starts: list[int] = []  # ascending: addresses are handed out in order
        self._blocks: list[bytes] = []
        self._next = self.BASE
        self._lock = threading.Lock()

    def map(self, data: bytes) -> int:
        with self._lock:
            addr = self._next
            self._next += -(-max(1, len(data)) // self.PAGE) * self.PAGE
            self._starts.append(addr)
            self._blocks.append(bytes(data))
        return addr

    def read(self, addr: int, size: int) -> bytes | None:
        i = bisect.bisect_right(self._starts, addr) - 1
        if i < 0:
            return None
        off = addr - self._starts[i]
        block = self._blocks[i]
        return block[off:off + size] if off + size <= len(block) else None


class Machine:
    """CPUs, NUMA nodes, per-thread current CPU, modeled time and RCU.

    ``profile`` is a ``Profile`` or a shipped profile's name or a file (default ``host``);
    ``cache_scale`` shrinks the modeled caches for an experiment scaled down as much;
    ``modeled_time`` False switches the cost model off (default: on unless
    PYBPF_NO_MODELED_TIME is set).
    """

    def __init__(self, cpus: int | None = None, nodes: int | None = None,
                 profile: Profile | str | None = None, cache_scale: float = 1.0,
                 seed: int = 0, modeled_time: bool | None = None) -> None:
        if modeled_time is None:
            modeled_time = modeled_time_default()
        elif not isinstance(modeled_time, bool):
            raise TypeError(f"modeled_time must be True, False or None, got {modeled_time!r}")
        if isinstance(profile, Profile):
            self.profile = profile
        else:
            self.profile = load_profile(DEFAULT_PROFILE if profile is None else profile)
        if cpus is None and nodes is None:
            self.topology = host_topology() if profile is None else declared_topology(
                self.profile.num_cpus, self.profile.num_nodes)
        else:
            self.topology = declared_topology(
                cpus if cpus is not None else len(host_topology().cpu_node),
                nodes if nodes is not None else 1)
        self.cpu_node: list[int] = list(self.topology.cpu_node)
        self.num_cpus = len(self.cpu_node)
        self.num_nodes = self.topology.num_nodes
        # The calling thread's CPU (``current.cpu``); hot paths read it without a call.
        self.current = _CurrentCpu()
        self.modeled_time = modeled_time
        timing_model = Timing if modeled_time else UnmodeledTiming
        self.timing = timing_model(self.profile, self.cpu_node, cache_scale=cache_scale)
        # Without modeled time RCU has no ticks to run at: it polls (Rcu's own rule).
        self.rcu = Rcu(timing=self.timing if modeled_time else None, current=self.current)
        # How far ``step`` moves the clocks: as far as RCU needs to settle what is queued.
        self.settle_ns = settle_ns(self.timing.tick, self.num_cpus)
        self.random = random.Random(seed)  # hash seeds and the like, in creation order
        self._prandom = [random.Random(seed * 1_000_003 + cpu) for cpu in range(self.num_cpus)]
        self.user_memory = UserMemory()
        # Element memory of NO_PREALLOC hash maps: "bpf_mem_alloc" (6.1+) or "call_rcu"
        # (kmalloc + one call_rcu per freed element, before); EmulatedSystem(htab_mem=...).
        self.htab_mem = "bpf_mem_alloc"

    def __repr__(self) -> str:
        return (f"Machine(cpus={self.num_cpus}, nodes={self.num_nodes}, "
                f"profile={self.profile.name!r}"
                + ("" if self.modeled_time else ", modeled_time=False") + ")")

    def cpu_to_node(self, cpu: int) -> int:
        self.check_cpu(cpu)
        return self.cpu_node[cpu]

    def check_cpu(self, cpu: int) -> None:
        if not (isinstance(cpu, int) and 0 <= cpu < self.num_cpus):
            raise ValueError(
                f"CPU {cpu!r} does not exist: this machine has CPUs 0-{self.num_cpus - 1}")

    def current_cpu(self) -> int:
        """smp_processor_id() of the calling thread."""
        return self.current.cpu

    def numa_node_id(self) -> int:
        """The NUMA node of the calling thread's CPU."""
        return self.cpu_node[self.current.cpu]

    @contextmanager
    def on_cpu(self, cpu: int) -> Iterator[None]:
        """Run the body on ``cpu`` (this thread's current CPU), restoring the previous one."""
        self.check_cpu(cpu)
        current = self.current
        previous = current.cpu
        current.cpu = cpu
        try:
            yield
        finally:
            current.cpu = previous

    def set_cpu(self, cpu: int) -> None:
        """Move the calling thread to ``cpu`` for good (worker threads standing for kthreads)."""
        self.check_cpu(cpu)
        self.current.cpu = cpu

    def task_locals(self) -> list[threading.local]:
        """The thread-local state that belongs to the task running on a thread (its CPU,
        its task, RCU's read-side nesting, the modules' own): what a scheduler running
        several tasks on one thread must switch with them."""
        return [self.current, self.rcu.task_local, *MODULE_TASK_LOCALS]

    def set_task(self, pid: int, tgid: int | None = None, comm: bytes | None = None) -> None:
        """The calling thread stands for task ``pid`` of process ``tgid`` (default: its own
        process), as bpf_get_current_pid_tgid reports it, named ``comm`` (default: the host
        thread's name) as bpf_get_current_comm reports it."""
        self.current.task = (pid if tgid is None else tgid, pid)
        self.current.comm = None if comm is None else bytes(comm[:TASK_COMM_LEN - 1])

    def current_comm(self) -> bytes:
        """The current task's comm without its NUL (at most TASK_COMM_LEN - 1 bytes): the one
        ``set_task`` gave, else the calling host thread's (/proc/thread-self/comm)."""
        comm = self.current.comm
        return thread_comm() if comm is None else comm

    def current_pid_tgid(self) -> int:
        """bpf_get_current_pid_tgid(): tgid << 32 | pid of the calling thread's task."""
        task = self.current.task
        if task is None:
            return (os.getpid() << 32) | threading.get_native_id()
        return (task[0] << 32) | task[1]

    def prandom_u32(self, cpu: int | None = None) -> int:
        """bpf_get_prandom_u32(): the generator of ``cpu`` (None: the current CPU; per CPU,
        as the kernel's)."""
        return self._prandom[self.current.cpu if cpu is None else cpu].getrandbits(32)

    def prandom_source(self, cpu: int) -> random.Random:
        """The generator ``prandom_u32`` draws from on ``cpu`` (the native tier calls its
        getrandbits itself)."""
        return self._prandom[cpu]

    def ktime_get_ns(self) -> int:
        """bpf_ktime_get_ns(): the current CPU's modeled clock (ns since the machine began)."""
        return int(self.timing.clock[self.current.cpu])

    def bpf_syscall(self, entry: str = "syscall_entry") -> None:
        """A task on the current CPU enters the kernel: a modeled operation begins (the
        virtual-time scheduler may let other CPUs go first), and the entry is charged.
        Without modeled time only due deferred work (a timer) runs first: none on a machine
        where nothing was ever deferred and no scheduler runs, which then does not even read
        the current CPU (every emulated syscall comes here; the thread-local read would be
        most of what it costs)."""
        timing = self.timing
        if not self.modeled_time:  # (the scheduler's slot: its property is a call)
            if timing._scheduler is not None or timing.ever_deferred:
                timing.sync(self.current.cpu)
            return
        cpu = self.current.cpu
        self.rcu.note_syscall(cpu)  # the CPU is busy; a forced schedule() ended the last
        timing.sync(cpu)
        timing.charge(cpu, entry)

    def require_modeled_time(self, what: str) -> None:
        """ValueError when modeled time is off: ``what`` (a figure) needs it."""
        if not self.modeled_time:
            raise ValueError(
                f"{what}: these figures are modeled time, which is off on this emulated "
                f"machine (modeled_time=False, or {NO_MODELED_TIME_ENV} set): unset "
                f"{NO_MODELED_TIME_ENV} or pass modeled_time=True")

    def new_access_stats(self) -> AccessStats:
        return AccessStats(self.cpu_node)

    def step(self) -> int:
        """Let deferred work advance: the CPUs' clocks move on, in virtual-time order, through
        their pending work (RCU's ticks, grace periods and callbacks, say), which runs, for as
        long as RCU needs to settle what is queued now (``settle_ns``); then a grace period
        completes for whatever the readers allow. Returns how many RCU callbacks ran.

        Without modeled time RCU has no ticks, so grace periods complete by polling, as
        long as the callbacks queue more (an allocator's free_bulk after a freed unit); with
        it, the ticks over ``settle_ns`` have run those."""
        ran = self.rcu.callbacks_run
        self.timing.run_all_deferred(max(self.timing.clock) + self.settle_ns, self.on_cpu)
        while self.rcu.poll() and not self.modeled_time:
            pass
        return self.rcu.callbacks_run - ran
