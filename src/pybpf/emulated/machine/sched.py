"""Per-CPU scheduling in virtual time: which context runs on each emulated CPU, and when.

The kernel's analogue is kernel/sched/ (core.c, fair.c) with the two rules of
kernel/softirq.c and kernel/workqueue.c that decide where deferred work runs. Where
timing.py prices each event alone, this module lets contexts contend for a CPU: a
discrete-event loop in virtual nanoseconds runs contexts written as generators that yield
``Run(ns)`` (work on their CPU, preemptible between and, by a softirq or a tick, within) or
``SLEEP`` (block until ``wake_up``). Between yields a context may call ``raise_softirq``,
``queue_work``/``queue_work_on`` and ``wake_up``.

Rules this module keeps (each with its kernel source):
- Priorities: a hard interrupt (``raise_irq``) runs before anything else on its CPU and is
  not preempted; softirqs it raises run at its exit (irq_exit), unless it interrupted a
  softirq, whose restart loop takes them. A pending softirq runs before any task on its CPU.
  Raised by the CPU's own context (loopback's netif_rx under rcu_read_lock_bh), it runs at
  the next step boundary, as local_bh_enable runs do_softirq; raised from another CPU it
  interrupts at once (the IPI's irq_exit). Interrupt time is not a task's runtime
  (CONFIG_IRQ_TIME_ACCOUNTING, as distribution kernels build).
- __do_softirq's budget: a round runs every vector pending at its start; it restarts while
  more is pending, for at most MAX_SOFTIRQ_RESTART rounds and MAX_SOFTIRQ_TIME and while no
  task needs the CPU (need_resched); what is left wakes the CPU's ksoftirqd, a normal
  (fair-class) task that runs the same loop. Since 6.5 (d15121be7485, the revert of
  "softirq: Let ksoftirqd do its job") softirqs keep running inline while ksoftirqd is awake.
- Fair sharing (CFS, kernel/sched/fair.c before 6.6's EEVDF): runnable tasks by virtual
  runtime (all nice 0, so ns for ns); the running one keeps the CPU for its slice,
  max(sched_latency / nr_running, min_granularity), then yields to a task with less vruntime;
  a woken task is placed at max(its vruntime, min_vruntime - sched_latency / 2)
  (GENTLE_FAIR_SLEEPERS) and preempts the running one when it is more than
  wakeup_granularity behind. Preemption takes effect at the next step boundary (the kernel's
  preemption points); a tick's takes effect at once.
- Costs: every switch between contexts (idle included) costs the profile's
  ``sched.context_switch``; a task woken onto an idle CPU starts ``sched.wakeup_latency``
  later (the IPI and the idle state's exit).
- Work queues: ``queue_work(work)`` is WORK_CPU_UNBOUND, which queues on the calling CPU
  (__queue_work: wq_select_unbound_cpu gives the local CPU when it is in
  wq_unbound_cpumask); ``queue_work_on`` on the chosen one; a work already pending is not
  queued again (WORK_STRUCT_PENDING); the pending bit clears before the work runs
  (process_one_work), so it may queue itself again. Each CPU's kworker runs its list in order.
- Deterministic: events at the same time run in the order they were scheduled; the same
  inputs give the same figures.
- Accounting per CPU: time by context (user, kthread, kworker, ksoftirqd, softirq, hardirq,
  switch, wakeup, idle), time tasks spent runnable but waiting, preemptions (a task switched
  out while still runnable), hard interrupts, softirq entries and ksoftirqd wake-ups.
- Timeline (off unless ``record_timeline`` asks): per CPU, the intervals of one window of
  virtual time with the state each was spent in, as the accounting credits it, so they add
  up to the window's elapsed time; bounded (``max_intervals`` per CPU, then it stops and
  says so).
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import deque
from collections.abc import Callable, Generator, Iterable
from dataclasses import dataclass, field

# kernel/sched/fair.c (CFS, 4.x-6.5): sysctl_sched_latency 6 ms, sysctl_sched_min_granularity
# 0.75 ms, sysctl_sched_wakeup_granularity 1 ms, each scaled by 1 + ilog2(min(CPUs, 8))
# (SCHED_TUNABLESCALING_LOG, get_update_sysctl_factor).
SCHED_LATENCY_NS = 6_000_000
MIN_GRANULARITY_NS = 750_000
WAKEUP_GRANULARITY_NS = 1_000_000
# kernel/softirq.c: MAX_SOFTIRQ_TIME msecs_to_jiffies(2) (2 ms at HZ=1000; a jiffy is the
# least it can be at lower HZ), MAX_SOFTIRQ_RESTART 10.
MAX_SOFTIRQ_TIME_NS = 2_000_000
MAX_SOFTIRQ_RESTART = 10

KINDS = ("user", "kthread", "kworker", "ksoftirqd")  # tasks' kinds
CPU_STATES = ("user", "kthread", "kworker", "ksoftirqd", "softirq", "hardirq", "switch", "wakeup",
              "idle")


@dataclass(frozen=True)
class Run:
    """Work of ``ns`` on the context's CPU."""

    ns: float


class _Sleep:
    def __repr__(self) -> str:
        return "SLEEP"


SLEEP = _Sleep()  # block until wake_up (tasks only)

Body = Generator[object, None, None]


def tunable_scale(cpus: int) -> int:
    """The factor sched_latency and the granularities are scaled by on ``cpus`` CPUs."""
    return 1 + (min(cpus, 8).bit_length() - 1)


@dataclass
class Task:
    """A schedulable context: a user thread or a kernel thread, bound to one CPU."""

    name: str
    kind: str
    cpu: int
    body: Body | None = None
    vruntime: float = 0.0
    state: str = "sleeping"  # running, runnable, sleeping, done
    exec_ns: float = 0.0
    wait_ns: float = 0.0
    preempted: int = 0
    wakeups: int = 0
    remaining: float = 0.0  # of the Run in progress
    runnable_since: float = 0.0


@dataclass
class Work:
    """A work item: ``fn(cpu)`` gives the generator that runs in the kworker."""

    name: str
    fn: Callable[[int], Body]
    pending: bool = False


@dataclass
class CpuStats:
    """What one CPU's time went on, and how often its tasks were preempted."""

    time: dict[str, float] = field(default_factory=lambda: dict.fromkeys(CPU_STATES, 0.0))
    waiting: float = 0.0  # runnable tasks' time waiting for this CPU, summed over tasks
    preemptions: int = 0
    switches: int = 0
    softirq_entries: int = 0
    ksoftirqd_wakeups: int = 0
    irqs: int = 0

    def copy(self) -> CpuStats:
        return CpuStats(dict(self.time), self.waiting, self.preemptions, self.switches,
                        self.softirq_entries, self.ksoftirqd_wakeups, self.irqs)

    def since(self, before: CpuStats) -> CpuStats:
        return CpuStats({k: v - before.time[k] for k, v in self.time.items()},
                        self.waiting - before.waiting, self.preemptions - before.preemptions,
                        self.switches - before.switches,
                        self.softirq_entries - before.softirq_entries,
                        self.ksoftirqd_wakeups - before.ksoftirqd_wakeups,
                        self.irqs - before.irqs)


@dataclass
class _Irq:
    """A hard interrupt's handler running on a CPU."""

    body: Body
    remaining: float = 0.0


@dataclass
class _Softirq:
    """__do_softirq in progress on a CPU (inline, or inside ksoftirqd)."""

    started: float
    rounds: int = 0
    round: deque = field(default_factory=deque)  # handlers of the round not yet started
    body: Body | None = None  # the handler running
    remaining: float = 0.0


class _RunQueue:
    def __init__(self, cpu: int) -> None:
        self.cpu = cpu
        self.curr: Task | None = None
        self.queue: list[Task] = []  # runnable, not running
        self.min_vruntime = 0.0
        self.pending: deque[Callable[[int], Body]] = deque()  # raised softirq handlers
        self.irqs: deque[Callable[[int], Body]] = deque()  # raised hard interrupts
        self.hardirq: _Irq | None = None  # the one running
        self.softirq: _Softirq | None = None  # inline __do_softirq
        self.softirq_due = False  # raised where do_softirq follows (not inside softirq)
        self.need_resched = False
        self.busy_until = 0.0  # a switch or an idle exit in progress ends then
        self.busy_kind = "switch"  # which of the two
        self.tick = 0  # the armed slice check (a newer one supersedes it)
        self.token = 0  # invalidates a scheduled completion or tick
        self.run_started = 0.0  # when the running Run (or busy period) began
        self.running = False  # a completion event is scheduled
        self.stint_exec = 0.0  # curr.exec_ns when it was switched in
        self.last = 0.0
        self.stats = CpuStats()
        self.worklist: deque[Work] = deque()
        self.kworker: Task | None = None
        self.ksoftirqd: Task | None = None


class Scheduler:
    """The CPUs of one machine in virtual time. ``context_switch_ns`` and
    ``wakeup_latency_ns`` are the profile's [sched] costs; the CFS tunables are scaled for
    ``num_cpus`` (or ``tunable_cpus``, the machine's when simulating some of its CPUs)."""

    def __init__(self, num_cpus: int, *, context_switch_ns: float, wakeup_latency_ns: float,
                 tunable_cpus: int | None = None) -> None:
        if num_cpus < 1:
            raise ValueError(f"a scheduler needs at least one CPU, got {num_cpus}")
        if context_switch_ns < 0 or wakeup_latency_ns < 0:
            raise ValueError("context_switch_ns and wakeup_latency_ns must be >= 0")
        self.now = 0.0
        self.context_switch_ns = float(context_switch_ns)
        self.wakeup_latency_ns = float(wakeup_latency_ns)
        scale = tunable_scale(tunable_cpus or num_cpus)
        self.sched_latency = SCHED_LATENCY_NS * scale
        self.min_granularity = MIN_GRANULARITY_NS * scale
        self.wakeup_granularity = WAKEUP_GRANULARITY_NS * scale
        self._rqs = [_RunQueue(cpu) for cpu in range(num_cpus)]
        self._events: list[tuple[float, int, Callable[..., None], tuple]] = []
        self._seq = itertools.count()
        self._stepping: _RunQueue | None = None  # the CPU whose context is between yields
        self._window: tuple[float, float] | None = None  # record_timeline's
        self._timeline_max = 0
        self._timelines: list[list[tuple[float, float, str]]] = [[] for _ in self._rqs]
        self.timeline_truncated = False

    @classmethod
    def for_profile(cls, profile, num_cpus: int | None = None) -> Scheduler:
        """A scheduler with ``profile``'s [sched] costs (all its CPUs unless ``num_cpus``)."""
        return cls(num_cpus or profile.num_cpus,
                   context_switch_ns=profile["sched.context_switch"],
                   wakeup_latency_ns=profile["sched.wakeup_latency"],
                   tunable_cpus=profile.num_cpus)

    @property
    def num_cpus(self) -> int:
        return len(self._rqs)

    def _rq(self, cpu: int) -> _RunQueue:
        if not 0 <= cpu < len(self._rqs):
            raise ValueError(f"CPU {cpu} is not a CPU of this scheduler (0-{len(self._rqs) - 1})")
        return self._rqs[cpu]

    # -- the event loop --------------------------------------------------------------------
    def at(self, t: float, fn: Callable[..., None], *args: object) -> None:
        """Call ``fn(*args)`` at virtual time ``t`` (never before now)."""
        heapq.heappush(self._events, (max(t, self.now), next(self._seq), fn, args))

    def run(self, until: float | None = None, stop: Callable[[], bool] | None = None) -> None:
        """Run events until none is left, virtual time ``until`` or ``stop()`` is true."""
        events = self._events
        while events and not (stop is not None and stop()):
            if until is not None and events[0][0] > until:
                break
            t, _, fn, args = heapq.heappop(events)
            self.now = t
            fn(*args)
        if until is not None and self.now < until and not (stop is not None and stop()):
            self.now = until
        for rq in self._rqs:
            self._account(rq)

    # -- contexts --------------------------------------------------------------------------
    def spawn(self, name: str, cpu: int, body: Body, kind: str = "user") -> Task:
        """A task on ``cpu`` running ``body``; it starts runnable now."""
        if kind not in KINDS:
            raise ValueError(f"task kind must be one of {KINDS}, got {kind!r}")
        rq = self._rq(cpu)
        task = Task(name, kind, cpu, body, vruntime=rq.min_vruntime)
        self._enqueue(rq, task, remote=False)
        return task

    def wake_up(self, task: Task) -> bool:
        """try_to_wake_up: a sleeping task becomes runnable (False if it was not asleep)."""
        if task.state != "sleeping":
            return False
        rq = self._rqs[task.cpu]
        self._account(rq)
        # place_entity with GENTLE_FAIR_SLEEPERS: a sleeper gets at most half a latency of
        # credit.
        task.vruntime = max(task.vruntime, rq.min_vruntime - self.sched_latency / 2)
        task.wakeups += 1
        self._enqueue(rq, task, remote=self._stepping is not rq)
        return True

    def raise_irq(self, cpu: int, handler: Callable[[int], Body]) -> None:
        """A hard interrupt on ``cpu`` (a device's, or an IPI): ``handler`` runs there
        before anything else, at once (at the step boundary when raised by that CPU)."""
        rq = self._rq(cpu)
        rq.irqs.append(handler)
        self._kick(rq)

    def raise_softirq(self, cpu: int, handler: Callable[[int], Body]) -> None:
        """Mark ``handler`` pending on ``cpu``: it runs in softirq context there (see the
        module's rules for when)."""
        rq = self._rq(cpu)
        rq.pending.append(handler)
        if self._stepping is rq and (rq.softirq is not None or self._in_ksoftirqd(rq)):
            return  # raised inside __do_softirq: its restart loop (or ksoftirqd) takes it
        rq.softirq_due = True  # a local_bh_enable or an irq_exit will run it
        self._kick(rq)

    def queue_work(self, work: Work) -> bool:
        """queue_work(system_wq, work) from the running context: WORK_CPU_UNBOUND, so on
        that context's CPU; False if it was already pending."""
        if self._stepping is None:
            raise RuntimeError("queue_work is called by a running context (its CPU is where "
                               "the work goes); use queue_work_on(cpu, work) from outside")
        return self.queue_work_on(self._stepping.cpu, work)

    def queue_work_on(self, cpu: int, work: Work) -> bool:
        """Queue ``work`` on ``cpu``'s kworker; False if it was already pending."""
        if work.pending:
            return False
        work.pending = True
        self._insert_work(self._rq(cpu), work)
        return True

    def queue_delayed_work_on(self, cpu: int, work: Work, delay_ns: float) -> bool:
        """Queue ``work`` on ``cpu`` once ``delay_ns`` has passed; it is pending
        meanwhile, so queueing it again does nothing (a delayed work's timer holds
        WORK_STRUCT_PENDING); False if it was already pending."""
        if delay_ns <= 0:
            return self.queue_work_on(cpu, work)
        if work.pending:
            return False
        work.pending = True
        self.at(self.now + delay_ns, self._insert_work, self._rq(cpu), work)
        return True

    def _insert_work(self, rq: _RunQueue, work: Work) -> None:
        """insert_work: on the CPU's list, its kworker woken."""
        rq.worklist.append(work)
        if rq.kworker is None:
            rq.kworker = self._kthread(rq, "kworker", self._worker_thread(rq))
        self.wake_up(rq.kworker)

    def record_timeline(self, start: float, end: float, max_intervals: int = 10_000) -> None:
        """Record, per CPU, what it did from ``start`` to ``end`` (virtual ns; ``timeline``).
        ``start`` is now or later: a CPU's time since its last change is credited at its
        next accounting, so the window's first interval is whole."""
        if not self.now <= start <= end:
            raise ValueError(f"a timeline window needs now ({self.now}) <= start <= end, got "
                             f"{start}, {end}")
        if max_intervals < 1:
            raise ValueError(f"max_intervals must be >= 1, got {max_intervals}")
        self._window = (float(start), float(end))
        self._timeline_max = max_intervals
        self._timelines = [[] for _ in self._rqs]
        self.timeline_truncated = False

    def timeline(self, cpu: int) -> list[tuple[float, float, str]]:
        """``cpu``'s recorded (start, end, state) intervals so far, in order; consecutive
        ones of the same state are merged."""
        rq = self._rq(cpu)
        self._account(rq)
        return list(self._timelines[cpu])

    def _record(self, cpu: int, t0: float, t1: float, state: str) -> None:
        """An accounted interval, clipped to the window."""
        start, end = self._window
        t0, t1 = max(t0, start), min(t1, end)
        if t1 <= t0:
            return
        intervals = self._timelines[cpu]
        if intervals and intervals[-1][2] == state and intervals[-1][1] == t0:
            intervals[-1] = (intervals[-1][0], t1, state)
        elif len(intervals) < self._timeline_max:
            intervals.append((t0, t1, state))
        else:
            self.timeline_truncated = True

    def cpu_stats(self, cpu: int) -> CpuStats:
        """``cpu``'s totals so far (a copy)."""
        rq = self._rq(cpu)
        self._account(rq)
        return rq.stats.copy()

    # -- kernel threads --------------------------------------------------------------------
    def _worker_thread(self, rq: _RunQueue) -> Body:
        """worker_thread: run the CPU's work list in order, sleep when it is empty."""
        while True:
            while rq.worklist:
                work = rq.worklist.popleft()
                work.pending = False  # process_one_work clears it before the function runs
                yield from work.fn(rq.cpu)
            yield SLEEP

    def _run_ksoftirqd(self, rq: _RunQueue) -> Body:
        """run_ksoftirqd: __do_softirq in task context while anything is pending."""
        while True:
            while rq.pending:
                state = _Softirq(self.now)
                while True:
                    handlers = list(rq.pending)
                    rq.pending.clear()
                    rq.softirq_due = False
                    state.rounds += 1
                    for handler in handlers:
                        yield from handler(rq.cpu)
                    if not rq.pending or not self._may_restart(rq, state):
                        break
            yield SLEEP

    def _may_restart(self, rq: _RunQueue, state: _Softirq) -> bool:
        return (self.now - state.started < MAX_SOFTIRQ_TIME_NS and not rq.need_resched
                and state.rounds < MAX_SOFTIRQ_RESTART)

    def _wakeup_softirqd(self, rq: _RunQueue) -> None:
        rq.stats.ksoftirqd_wakeups += 1
        if rq.ksoftirqd is None:
            rq.ksoftirqd = self._kthread(rq, "ksoftirqd", self._run_ksoftirqd(rq))
        self.wake_up(rq.ksoftirqd)

    @staticmethod
    def _kthread(rq: _RunQueue, kind: str, body: Body) -> Task:
        """A per-CPU kernel thread, asleep since boot: its first wake-up is a sleeper's
        (made when first needed, so a CPU that never uses one has none to report)."""
        return Task(f"{kind}/{rq.cpu}", kind, rq.cpu, body, vruntime=-math.inf)

    # -- the per-CPU machinery -------------------------------------------------------------
    def _account(self, rq: _RunQueue) -> None:
        """Credit the time since the last change to what the CPU was doing."""
        dt = self.now - rq.last
        if dt <= 0:
            return
        # A busy period (switch, idle exit) that ended inside dt gets only its part.
        busy = min(max(rq.busy_until - rq.last, 0.0), dt)
        if busy:
            rq.stats.time[rq.busy_kind] += busy
            if self._window is not None:
                self._record(rq.cpu, rq.last, rq.last + busy, rq.busy_kind)
        rest = dt - busy
        if rest:
            state = ("hardirq" if rq.hardirq is not None else
                     "softirq" if rq.softirq is not None else
                     rq.curr.kind if rq.curr is not None else "idle")
            rq.stats.time[state] += rest
            if self._window is not None:
                self._record(rq.cpu, rq.last + busy, self.now, state)
            if rq.curr is not None and rq.softirq is None and rq.hardirq is None:
                rq.curr.exec_ns += rest
                rq.curr.vruntime += rest
        rq.stats.waiting += dt * len(rq.queue)
        rq.last = self.now
        self._update_min_vruntime(rq)

    def _update_min_vruntime(self, rq: _RunQueue) -> None:
        candidates = [t.vruntime for t in rq.queue]
        if rq.curr is not None:
            candidates.append(rq.curr.vruntime)
        if candidates:
            rq.min_vruntime = max(rq.min_vruntime, min(candidates))

    def _enqueue(self, rq: _RunQueue, task: Task, remote: bool) -> None:
        task.state = "runnable"
        task.runnable_since = self.now
        rq.queue.append(task)
        curr = rq.curr
        if curr is None:
            if rq.busy_until <= self.now and not rq.running and rq.softirq is None \
                    and rq.hardirq is None:
                # An idle CPU: a remote wake-up pays the IPI and the idle exit.
                if remote:
                    rq.busy_until = self.now + self.wakeup_latency_ns
                    rq.busy_kind = "wakeup"
                    self.at(rq.busy_until, self._dispatch, rq)
                    return
            self._kick(rq)
            return
        if curr.vruntime - task.vruntime > self.wakeup_granularity:
            rq.need_resched = True  # check_preempt_wakeup
            self._kick(rq)
        else:
            self._arm_tick(rq)

    def _slice(self, rq: _RunQueue) -> float:
        nr = len(rq.queue) + (rq.curr is not None)
        return max(self.sched_latency / max(nr, 1), self.min_granularity)

    def _arm_tick(self, rq: _RunQueue) -> None:
        """Check the running task's slice when it would end (others are runnable)."""
        if rq.curr is None or not rq.queue:
            return
        left = self._slice(rq) - (rq.curr.exec_ns - rq.stint_exec)
        rq.tick += 1
        self.at(self.now + max(left, 0.0), self._tick, rq, rq.tick)

    def _tick(self, rq: _RunQueue, tick: int) -> None:
        """check_preempt_tick: the running task has had its slice: reschedule."""
        if tick != rq.tick or rq.curr is None or not rq.queue:
            return
        self._account(rq)
        if rq.curr.exec_ns - rq.stint_exec + 1e-6 < self._slice(rq):
            self._arm_tick(rq)  # softirqs took some of the slice's time
            return
        rq.need_resched = True
        self._kick(rq)

    def _kick(self, rq: _RunQueue) -> None:
        """Something changed on ``rq``: the CPU running a step acts at its boundary;
        another is interrupted now (an IPI)."""
        if rq is self._stepping:
            return
        if rq.busy_until > self.now:
            return  # a switch or idle exit in progress: the dispatch at its end sees it
        self._interrupt(rq)
        self._dispatch(rq)

    def _interrupt(self, rq: _RunQueue) -> None:
        """Stop the running Run, keeping what is left of it."""
        if not rq.running:
            return
        self._account(rq)
        frame = self._running_frame(rq)
        frame.remaining = max(frame.remaining - (self.now - rq.run_started), 0.0)
        rq.running = False
        rq.token += 1

    @staticmethod
    def _running_frame(rq: _RunQueue) -> _Irq | _Softirq | Task:
        """What the running Run belongs to: the hard interrupt, else the softirq, else the
        task."""
        return rq.hardirq or rq.softirq or rq.curr

    def _run_done(self, rq: _RunQueue, token: int) -> None:
        if token != rq.token:
            return
        self._account(rq)
        self._running_frame(rq).remaining = 0.0
        rq.running = False
        rq.token += 1
        self._dispatch(rq)

    def _dispatch(self, rq: _RunQueue) -> None:
        """Decide what runs on ``rq`` now and start it."""
        self._account(rq)
        if rq.running or rq.busy_until > self.now:
            return
        while True:
            if rq.hardirq is None and rq.irqs:
                rq.hardirq = _Irq(rq.irqs.popleft()(rq.cpu))
                rq.stats.irqs += 1
            if rq.hardirq is not None:
                irq = rq.hardirq
                if irq.remaining > 0:
                    self._start(rq, irq.remaining)
                    return
                cmd = self._step_body(rq, irq.body)
                if cmd is SLEEP:
                    raise RuntimeError("an interrupt handler cannot sleep")
                if cmd is None:
                    rq.hardirq = None  # irq_exit: pending softirqs run next
                else:
                    irq.remaining = cmd.ns
                continue
            if rq.softirq is None and rq.softirq_due and not self._in_ksoftirqd(rq):
                rq.softirq = _Softirq(self.now)  # do_softirq: the pending vectors run now
                rq.stats.softirq_entries += 1
                self._softirq_round(rq)
            if rq.softirq is not None:
                sirq = rq.softirq
                if sirq.remaining > 0:
                    self._start(rq, sirq.remaining)
                    return
                self._softirq_step(rq)
                continue
            curr = rq.curr
            if curr is None or curr.state != "running" or rq.need_resched:
                if self._switch(rq):
                    return  # the switch's cost runs first; its end dispatches again
                if rq.curr is None:
                    return  # idle
                continue
            if curr.remaining > 0:
                self._start(rq, curr.remaining)
                return
            self._task_step(rq, curr)

    def _in_ksoftirqd(self, rq: _RunQueue) -> bool:
        return rq.curr is not None and rq.curr is rq.ksoftirqd and rq.curr.state == "running"

    def _start(self, rq: _RunQueue, ns: float) -> None:
        rq.running = True
        rq.run_started = self.now
        rq.token += 1
        self.at(self.now + ns, self._run_done, rq, rq.token)

    def _softirq_round(self, rq: _RunQueue) -> None:
        sirq = rq.softirq
        sirq.round.extend(rq.pending)
        rq.pending.clear()
        rq.softirq_due = False
        sirq.rounds += 1

    def _softirq_step(self, rq: _RunQueue) -> None:
        """Advance the inline softirq: its handler's next Run, the next handler, a restart,
        or the end (handing what is left to ksoftirqd)."""
        sirq = rq.softirq
        while True:
            if sirq.body is None:
                if sirq.round:
                    sirq.body = sirq.round.popleft()(rq.cpu)
                elif rq.pending and self._may_restart(rq, sirq):
                    self._softirq_round(rq)
                    continue
                else:
                    rq.softirq = None
                    if rq.pending:
                        self._wakeup_softirqd(rq)
                    return
            cmd = self._step_body(rq, sirq.body)
            if cmd is None:
                sirq.body = None
                continue
            if cmd is SLEEP:
                raise RuntimeError("a softirq handler cannot sleep")
            sirq.remaining = cmd.ns
            return

    def _task_step(self, rq: _RunQueue, task: Task) -> None:
        cmd = self._step_body(rq, task.body)
        if cmd is None:
            task.state = "done"
        elif cmd is SLEEP:
            task.state = "sleeping"
        else:
            task.remaining = cmd.ns

    def _step_body(self, rq: _RunQueue, body: Body) -> Run | _Sleep | None:
        """The body's next command (None when it has ended), skipping empty Runs."""
        self._stepping = rq
        try:
            while True:
                cmd = next(body)
                if cmd is SLEEP or (isinstance(cmd, Run) and cmd.ns > 0):
                    return cmd
                if not isinstance(cmd, Run):
                    raise TypeError(f"a context yields Run(ns) or SLEEP, got {cmd!r}")
        except StopIteration:
            return None
        finally:
            self._stepping = None

    def _switch(self, rq: _RunQueue) -> bool:
        """__schedule: put the running task back (if still runnable), pick the runnable one
        with the least vruntime; True when a switch's cost now runs."""
        prev = rq.curr
        rq.need_resched = False
        if prev is not None and prev.state == "running":
            # put_prev_entity then the leftmost: on a tie the one put back goes right
            if not rq.queue or min(t.vruntime for t in rq.queue) > prev.vruntime:
                rq.stint_exec = prev.exec_ns  # it keeps the CPU for another slice
                self._arm_tick(rq)
                return False
            prev.state = "runnable"
            prev.runnable_since = self.now
            prev.preempted += 1
            rq.stats.preemptions += 1
            rq.queue.append(prev)
        nxt = min(rq.queue, key=lambda t: t.vruntime) if rq.queue else None
        if nxt is not None:
            rq.queue.remove(nxt)
            nxt.wait_ns += self.now - nxt.runnable_since
            nxt.state = "running"
        rq.curr = nxt
        self._update_min_vruntime(rq)
        if nxt is prev or (prev is None and nxt is None):
            return False
        rq.stats.switches += 1
        if nxt is not None:
            rq.stint_exec = nxt.exec_ns
            self._arm_tick(rq)
        if self.context_switch_ns:
            rq.busy_until = self.now + self.context_switch_ns
            rq.busy_kind = "switch"
            self.at(rq.busy_until, self._dispatch, rq)
            return True
        return False

    # -- reports ---------------------------------------------------------------------------
    def tasks(self, cpu: int) -> Iterable[Task]:
        rq = self._rq(cpu)
        return [t for t in (rq.curr, *rq.queue) if t is not None]
