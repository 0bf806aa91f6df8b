"""A deterministic RCU: read-side sections, grace periods, call_rcu callbacks.

Rules this model keeps:
- A grace period ends only when every reader that was inside a read-side section when the
  grace period began has left it; a callback queued with ``call_rcu`` runs after such a
  grace period, never inside a reader that could still see the object.
- ``poll()`` (what ``Machine.step()`` and ``synchronize_rcu()`` do) completes a grace period
  at once for whatever the readers allow, for code that steps the machine by hand; without
  modeled time that is the only way, and a flood past ``qhimark`` polls too.

Implementation of the readers: epochs. Every reader records the epoch current at its entry;
every ``call_rcu`` tags its callback with the current epoch and opens a new one, so readers
that enter afterwards cannot delay it. A callback tagged ``e`` may run once no reader with an
epoch <= ``e`` remains.

Modeled time (``timing``): RCU as kernel/rcu/tree.c runs it, in virtual time.
- Each CPU has its ``RcuData``: a segmented callback list (``SegCbList``, the kernel's
  rcu_segcblist: ready, waiting for a numbered grace period, not yet assigned one), its
  ``blimit`` and ``qlen_last_fqs_check``.
- Grace periods are numbered and run one after another. One starts from a CPU's RCU core
  processing when its callbacks need one (or from ``call_rcu`` past ``qhimark``), or right
  after the previous one when more were requested; it needs a quiescent state from every CPU
  busy at its start. A busy CPU passes one only where the kernel sees one on a CPU that is
  not nohz_full (so without context tracking): a context switch (``note_context_switch``:
  ksoftirqd, a kworker; the grace-period kthread on CPU 0 at each grace period's start and
  each scan), or the schedule() its task makes on its way out of a syscall once a
  tick found ``rcu_urgent_qs`` set and set need_resched (``note_syscall``). The grace-period
  kthread's force-quiescent-state scans, every ``fqs_jiffies`` ticks, report idle CPUs (no
  syscall and no RCU softirq work in the last tick, or gone from the virtual-time scheduler)
  and, from the second
  scan on, set ``rcu_urgent_qs`` on the holdouts once the grace period is older than
  ``jiffies_to_sched_qs`` (HZ / 10 ticks) or while callbacks overload a CPU (``qovld``,
  20000 queued): then the first two scans of a grace period run at once and the rest every
  third of the interval (rcu_implicit_dynticks_qs, rcu_gp_fqs_loop). Ticks that land in user
  mode are quiescent states too; emulated tasks spend no modeled time in user mode between
  syscalls, so none is found there. A CPU reports its quiescent state at its next tick (it is
  ``rcu_core``'s check); the last report ends the grace period at that time, and a CPU
  notices the end at its next tick. Under a syscall loop a grace period therefore lasts until
  callbacks overload a CPU or ``jiffies_to_sched_qs`` has passed.
- At a tick, a CPU with callbacks or a quiescent state owed runs RCU_SOFTIRQ: ``rcu_core``
  advances its callbacks past the grace periods it saw end, assigns new ones a grace period,
  and ``rcu_do_batch`` invokes ready ones ``max(blimit, ready >> rcu_divisor)`` at a time
  (``blimit`` 10, 10000 once more than ``qhimark`` callbacks are queued while a grace period
  runs, back to 10 at ``qlowmark``; a batch over 100 stops after ``rcu_resched_ns``). Ready
  callbacks left re-raise the softirq; after ``MAX_SOFTIRQ_RESTART`` rounds or
  ``MAX_SOFTIRQ_TIME_NS`` the rest goes to ksoftirqd, which runs at the CPU's next operation
  (it preempts the task on its way back to user space; the CPU's fair sharing is not modeled
  here) until none are ready. Every round is charged ``rcu_core``, every callback
  ``rcu_callback`` plus what it does, a ksoftirqd run one context switch in and out.
- ``call_rcu(func, size)``: ``size`` is the memory the callback frees; the bytes held by
  queued callbacks are counted over time (``history``), with the queue lengths and each grace
  period's length.
"""

from __future__ import annotations

import bisect
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .timing import Timing

# kernel/rcu/tree.c's defaults (module parameters rcutree.*).
BLIMIT = 10               # DEFAULT_RCU_BLIMIT: callbacks per rcu_do_batch
MAX_BLIMIT = 10000        # DEFAULT_MAX_RCU_BLIMIT: blimit while callbacks flood
QHIMARK = 10000           # DEFAULT_RCU_QHIMARK: queued callbacks that raise blimit
QOVLD = 2 * QHIMARK       # DEFAULT_RCU_QOVLD: queued callbacks that overload a CPU (cbovld)
QLOWMARK = 100            # DEFAULT_RCU_QLOMARK: queued callbacks that restore it
RCU_DIVISOR = 7           # a batch takes at least ready >> rcu_divisor
RCU_RESCHED_NS = 3_000_000  # rcu_resched_ns: time limit of a batch over 100 callbacks
TIMED_BATCH = 100         # batches larger than this get the time limit
CLOCK_CHECK_EVERY = 32    # rcu_do_batch_check_time reads the clock once per 32 callbacks
FQS_DIV = 256             # RCU_JIFFIES_FQS_DIV
GP_KTHREAD_CPU = 0  # where the grace-period kthread runs: it started there and its timers stay
OVERLOAD_SCANS_AT_ONCE = 2  # scans of an overloaded grace period that do not wait (1fca4d12f463)
# kernel/softirq.c: __do_softirq restarts at most this often, for at most this long.
MAX_SOFTIRQ_RESTART = 10
MAX_SOFTIRQ_TIME_NS = 2_000_000


def settle_ns(tick: float, cpus: int) -> float:
    """How long RCU needs in modeled time to run what is queued now: the grace period in
    progress and the next, each at most one force-quiescent-state scan past a tick, and the
    tick after."""
    return 3 * (fqs_jiffies(1e9 / tick, cpus) * tick + tick)


def jiffies_to_sched_qs(hz: float, cpus: int) -> int:
    """Ticks a grace period lasts before its holdouts are asked for a quiescent state
    (``rcu_urgent_qs``): adjust_jiffies_till_sched_qs, the third scan, bounded below by
    HZ / 10 + nr_cpu_ids / RCU_JIFFIES_FQS_DIV."""
    return max(3 * fqs_jiffies(hz, cpus), int(hz) // 10 + cpus // FQS_DIV)


def fqs_jiffies(hz: float, cpus: int) -> int:
    """Ticks between the grace-period kthread's force-quiescent-state scans: the kernel's
    RCU_JIFFIES_TILL_FORCE_QS plus nr_cpu_ids / RCU_JIFFIES_FQS_DIV (rcu_init_geometry)."""
    return 1 + (hz > 250) + (hz > 500) + cpus // FQS_DIV


class _ReaderState(threading.local):
    depth = 0
    epoch = 0


class RcuHead:
    """struct rcu_head: a queued callback, its epoch, the CPU that queued it, the bytes it
    frees."""

    __slots__ = ("epoch", "func", "cpu", "size", "done")

    def __init__(self, epoch: int, func: Callable[[], None], cpu: int, size: int) -> None:
        self.epoch = epoch
        self.func = func
        self.cpu = cpu
        self.size = size
        self.done = False


def _ran_already() -> None:
    """What a callback a poll already ran leaves in its CPU's list."""


class SegCbList:
    """rcu_segcblist: callbacks ready to invoke (DONE), waiting for a numbered grace period
    (WAIT, NEXT_READY: the kernel has two such segments, a list of them here), and queued
    without one yet (NEXT). Grace periods are numbered 1, 2, ... as they end."""

    def __init__(self) -> None:
        self.done: deque[RcuHead] = deque()
        self.waiting: list[tuple[int, deque[RcuHead]]] = []  # (gp, callbacks), gp ascending
        self.next: deque[RcuHead] = deque()

    def __len__(self) -> int:
        return len(self.done) + sum(len(q) for _, q in self.waiting) + len(self.next)

    def enqueue(self, cb: RcuHead) -> None:
        self.next.append(cb)

    def accelerate(self, gp: int) -> None:
        """rcu_segcblist_accelerate: the unassigned callbacks wait for grace period ``gp``
        (joining a segment that already waits for it)."""
        if not self.next:
            return
        if self.waiting and self.waiting[-1][0] >= gp:
            self.waiting[-1][1].extend(self.next)
        else:
            self.waiting.append((gp, self.next))
            self.next = deque()
            return
        self.next.clear()

    def advance(self, completed: int) -> None:
        """rcu_segcblist_advance: segments whose grace period has ended become ready."""
        while self.waiting and self.waiting[0][0] <= completed:
            self.done.extend(self.waiting.pop(0)[1])

    def take(self, n: int, oldest_reader: int | None) -> list[RcuHead]:
        """Up to ``n`` ready callbacks, in order, stopping at one a reader still holds."""
        out: list[RcuHead] = []
        done = self.done
        while done and len(out) < n:
            cb = done[0]
            if oldest_reader is not None and cb.epoch >= oldest_reader:
                break
            cb.done = True  # a poll meanwhile leaves it to this batch
            out.append(done.popleft())
        return out

    def put_back(self, cbs: list[RcuHead]) -> None:
        """rcu_segcblist_insert_done_cbs: what a batch did not invoke goes back in front."""
        for cb in cbs:
            cb.done = False
        self.done.extendleft(reversed(cbs))

    def purge(self) -> None:
        """Drop callbacks a poll already ran."""
        self.done = deque(cb for cb in self.done if not cb.done)
        self.waiting = [(gp, q) for gp, q in ((gp, deque(cb for cb in q if not cb.done))
                                              for gp, q in self.waiting) if q]
        self.next = deque(cb for cb in self.next if not cb.done)


class RcuData:
    """struct rcu_data of one CPU."""

    def __init__(self, cpu: int) -> None:
        self.cpu = cpu
        self.cblist = SegCbList()
        self.blimit = BLIMIT
        self.qlen_last_fqs_check = 0
        self.gp_seq = 0  # grace periods this CPU has seen end
        self.qs_at: float | None = None  # its quiescent state in the current grace period
        self.urgent_qs = False  # rcu_urgent_qs: the next tick asks the task to schedule
        self.need_heavy_qs = False  # rcu_need_heavy_qs: urgency was raised for overload/age
        self.need_resched = False  # set by that tick: schedule() at the syscall's exit
        self.last_seen = float("-inf")  # when its task last entered the kernel
        self.tick_at: float | None = None  # its armed tick
        self.batches = 0
        self.max_batch = 0


class Rcu:
    """RCU state of one emulated machine."""

    def __init__(self, qhimark: int = QHIMARK, timing: Timing | None = None,
                 current: Any = None) -> None:
        self._lock = threading.Lock()
        self._epoch = 0
        self._readers: dict[int, int] = {}  # epoch -> readers inside a section from it
        self._callbacks: deque[RcuHead] = deque()  # every queued callback, epoch order
        self._pending = 0
        self.task_local = _ReaderState()  # a task's read-side nesting, per thread
        self.qhimark = qhimark
        self.timing = timing
        self.current = current  # the machine's per-thread current CPU (``.cpu``)
        # Counters.
        self.grace_periods = 0  # polls that completed a grace period with callbacks to run
        self.callbacks_queued = 0
        self.callbacks_run = 0
        self.max_pending = 0
        self.held_bytes = 0  # memory the queued callbacks will free
        self.max_held_bytes = 0
        if timing is not None:
            self._init_modeled(timing)

    def _init_modeled(self, timing: Timing) -> None:
        cpus = len(timing.clock)
        self.tick = timing.tick
        hz = 1e9 / self.tick
        self.fqs_ns = fqs_jiffies(hz, cpus) * self.tick
        # Under callback overload the scans come every third of the interval, at least a tick.
        self.ovld_fqs_ns = max(1, (fqs_jiffies(hz, cpus) + 2) // 3) * self.tick
        self.jtsq_ns = jiffies_to_sched_qs(hz, cpus) * self.tick
        self._cbovld = False  # rcu_state.cbovld: a CPU was overloaded at the last scan
        self._cbovldnext = False
        self._gp_scans = 0  # force-quiescent-state scans of the current grace period
        self._scans_at_once = 0
        self.cpus = [RcuData(cpu) for cpu in range(cpus)]
        self._completed = 0  # grace periods ended
        self._gp_needed = 0  # the highest grace period a CPU waits for
        self._gp_active = False
        self._gp_start = 0.0
        self._gp_epoch = 0
        self._next_fqs = 0.0
        self._holdouts: set[int] = set()
        self._gp_end: list[float] = []  # end of grace period k at [k - 1]
        self.gps: list[tuple[float, float]] = []  # (start, end) of each grace period
        self.n_force_qs = 0
        self.urgent_qs_raised = 0  # holdouts asked for a quiescent state (rcu_urgent_qs)
        self.resched_qs = 0  # quiescent states from a schedule() that urgency forced
        self.blimit_raised = 0  # times a CPU's blimit went to MAX_BLIMIT
        self.softirq_rounds = 0
        self.ksoftirqd_runs = 0
        # (time, cpu, callbacks queued on it, bytes held machine-wide) at each of its ticks.
        self.samples: list[tuple[float, int, int, int]] = []

    # -- readers -------------------------------------------------------------------------------
    def read_lock(self) -> None:
        """rcu_read_lock(): sections nest per thread; the outermost one registers."""
        local = self.task_local
        if local.depth == 0:
            with self._lock:
                epoch = self._epoch
                self._readers[epoch] = self._readers.get(epoch, 0) + 1
            local.epoch = epoch
        local.depth += 1

    def read_unlock(self) -> None:
        local = self.task_local
        if local.depth == 0:
            raise RuntimeError("rcu_read_unlock() without rcu_read_lock()")
        local.depth -= 1
        if local.depth == 0:
            with self._lock:
                left = self._readers[local.epoch] - 1
                if left:
                    self._readers[local.epoch] = left
                else:
                    del self._readers[local.epoch]

    @contextmanager
    def read_section(self) -> Iterator[None]:
        self.read_lock()
        try:
            yield
        finally:
            self.read_unlock()

    def in_read_section(self) -> bool:
        return self.task_local.depth > 0

    @property
    def readers(self) -> int:
        """Threads inside a read-side section now."""
        with self._lock:
            return sum(self._readers.values())

    # -- updaters ------------------------------------------------------------------------------
    def call_rcu(self, callback: Callable[[], None], size: int = 0) -> None:
        """Run ``callback`` after a grace period (from the queuing CPU's RCU_SOFTIRQ in
        modeled time, or from a poll). ``size``: the bytes it frees, held until then."""
        timing = self.timing
        cpu = 0 if self.current is None else self.current.cpu
        if timing is not None:
            timing.charge(cpu, "call_rcu")
        with self._lock:
            entry = RcuHead(self._epoch, callback, cpu, size)
            self._callbacks.append(entry)
            self._epoch += 1
            self.callbacks_queued += 1
            self._pending += 1
            pending = self._pending
            self.max_pending = max(self.max_pending, pending)
            self.held_bytes += size
            self.max_held_bytes = max(self.max_held_bytes, self.held_bytes)
            if timing is not None:
                self._queue(self.cpus[cpu], entry, timing.clock[cpu])
        if timing is None and pending > self.qhimark:
            self.poll()

    def _queue(self, rdp: RcuData, entry: RcuHead, now: float) -> None:  # lock held
        """__call_rcu_common and __call_rcu_core on the queuing CPU."""
        rdp.cblist.enqueue(entry)
        queued = len(rdp.cblist)
        if queued > rdp.qlen_last_fqs_check + self.qhimark:
            if not self._gp_active:
                self._accelerate(rdp, now)
            else:  # give the grace period a kick
                if rdp.blimit != MAX_BLIMIT:
                    self.blimit_raised += 1
                rdp.blimit = MAX_BLIMIT
                self._force_qs(now)
                rdp.qlen_last_fqs_check = queued
        self._arm_tick(rdp, now)

    def note_syscall(self, cpu: int) -> None:
        """The task on ``cpu`` enters the kernel at its clock: the CPU is busy. If a tick set
        need_resched, the previous syscall ended in schedule(): a quiescent state."""
        now = self.timing.clock[cpu]
        with self._lock:
            rdp = self.cpus[cpu]
            rdp.last_seen = now
            if rdp.need_resched:
                rdp.need_resched = False
                if self._note_qs(rdp, now):
                    self.resched_qs += 1

    def note_context_switch(self, cpu: int) -> None:
        """rcu_note_context_switch: a context switch on ``cpu`` (to ksoftirqd, a kworker) is a
        quiescent state."""
        if self.timing is None:
            return
        with self._lock:
            self._note_qs(self.cpus[cpu], self.timing.clock[cpu])

    def _note_qs(self, rdp: RcuData, now: float) -> bool:  # lock held
        """rcu_qs: the CPU passed a quiescent state at ``now``; it reports it at its next
        tick."""
        if rdp.cpu in self._holdouts and rdp.qs_at is None and now >= self._gp_start:
            rdp.qs_at = now
            self._arm_tick(rdp, now)
            return True
        return False

    # -- grace periods (the grace-period kthread) --------------------------------------------
    def _idle(self, cpu: int, now: float) -> bool:
        """An extended quiescent state at ``now``: no syscall and no RCU softirq work in the
        last tick, or the CPU's task has left the virtual-time scheduler."""
        scheduler = self.timing.scheduler
        if scheduler is not None and not scheduler.is_running(cpu):
            return True
        return self.cpus[cpu].last_seen < now - self.tick

    def _start_gp(self, now: float) -> None:  # lock held
        """rcu_gp_init: every CPU busy now owes a quiescent state. (A CPU behind the last
        grace period's end in virtual time starts the next one at that end.)"""
        if self._gp_end:
            now = max(now, self._gp_end[-1])
        self._gp_active = True
        self._gp_start = now
        self._gp_epoch = self._epoch  # readers from before it hold it
        self._epoch += 1
        self._gp_scans = 0
        # rcu_gp_fqs_loop: a grace period that starts overloaded scans at once, twice.
        self._scans_at_once = OVERLOAD_SCANS_AT_ONCE if self._cbovld else 0
        self._next_fqs = now if self._scans_at_once else now + self.fqs_ns
        self._holdouts = {rdp.cpu for rdp in self.cpus if not self._idle(rdp.cpu, now)}
        for rdp in self.cpus:
            rdp.qs_at = None
            if rdp.cpu in self._holdouts:  # its ticks check for a quiescent state
                self._arm_tick(rdp, now)
        self._gp_kthread_ran(now)
        self._try_end_gp(now)

    def _try_end_gp(self, now: float) -> None:  # lock held
        """The grace period ends once every holdout reported and no reader that entered
        before it began is still inside its section (never before its start: a CPU behind
        it in virtual time reports at the start)."""
        if self._gp_active and not self._holdouts and \
                min(self._readers, default=self._gp_epoch) >= self._gp_epoch:
            self._end_gp(max(now, self._gp_start))

    def _end_gp(self, now: float) -> None:  # lock held
        """rcu_gp_cleanup, and the next grace period if one was requested meanwhile."""
        self._gp_active = False
        self._completed += 1
        self._gp_end.append(now)
        self.gps.append((self._gp_start, now))
        if self._gp_needed > self._completed:
            self._start_gp(now)

    def _report_qs(self, cpu: int, now: float) -> None:  # lock held
        """rcu_report_qs_rdp (and rcu_disable_urgency_upon_qs): the last one may end the
        grace period."""
        rdp = self.cpus[cpu]
        rdp.urgent_qs = rdp.need_heavy_qs = rdp.need_resched = False
        self._holdouts.discard(cpu)
        self._try_end_gp(now)

    def _force_qs(self, now: float) -> None:  # lock held
        """rcu_gp_fqs (force_qs_rnp): report the holdouts that are idle; from the second scan
        of a grace period on, ask the others for a quiescent state once it is older than
        jiffies_to_sched_qs or while a CPU is overloaded with callbacks
        (rcu_implicit_dynticks_qs)."""
        self.n_force_qs += 1
        self._gp_kthread_ran(now)
        self._cbovld = self._cbovldnext
        self._cbovldnext = any(len(rdp.cblist) >= QOVLD for rdp in self.cpus)
        first = self._gp_scans == 0
        self._gp_scans += 1
        if self._scans_at_once:
            self._scans_at_once -= 1
        if self._scans_at_once:
            self._next_fqs = now
        else:
            self._next_fqs = now + (self.ovld_fqs_ns if self._cbovld else self.fqs_ns)
        age = now - self._gp_start
        for cpu in sorted(self._holdouts):
            if not self._gp_active:
                break
            if self._idle(cpu, now):
                self._report_qs(cpu, now)
            elif not first:
                rdp = self.cpus[cpu]
                if not rdp.need_heavy_qs and (age > 2 * self.jtsq_ns or self._cbovld):
                    rdp.need_heavy_qs = True
                    self._raise_urgency(rdp, now)
                elif age > self.jtsq_ns:
                    self._raise_urgency(rdp, now)

    def _gp_kthread_ran(self, now: float) -> None:  # lock held
        """The grace-period kthread was switched in on its CPU (rcu_gp_init also notes its own
        CPU's quiescent state): a quiescent state there."""
        self._note_qs(self.cpus[GP_KTHREAD_CPU], now)

    def _raise_urgency(self, rdp: RcuData, now: float) -> None:  # lock held
        if not rdp.urgent_qs:
            self.urgent_qs_raised += 1
        rdp.urgent_qs = True
        self._arm_tick(rdp, now)

    def _accelerate(self, rdp: RcuData, now: float) -> None:  # lock held
        """rcu_accelerate_cbs: unassigned callbacks wait for the grace period after the
        current one (rcu_seq_snap), which is started if none runs."""
        if not rdp.cblist.next:
            return
        gp = self._completed + (2 if self._gp_active else 1)
        rdp.cblist.accelerate(gp)
        self._gp_needed = max(self._gp_needed, gp)
        if not self._gp_active:
            self._start_gp(now)

    # -- the tick and RCU_SOFTIRQ on each CPU ------------------------------------------------
    def _arm_tick(self, rdp: RcuData, now: float) -> None:  # lock held
        if rdp.tick_at is None:
            at = rdp.tick_at = (now // self.tick + 1) * self.tick
            cpu = rdp.cpu
            self.timing.defer(cpu, at, lambda: self._tick(cpu, at))

    def _tick(self, cpu: int, now: float) -> None:
        """rcu_sched_clock_irq on ``cpu`` at tick ``now`` (run once the CPU's clock has passed
        it: what it decides is stamped ``now``), and RCU_SOFTIRQ when rcu_pending says so."""
        with self._lock:
            rdp = self.cpus[cpu]
            rdp.tick_at = None
            if rdp.urgent_qs:  # rcu_sched_clock_irq: the task is asked to schedule
                rdp.urgent_qs = False
                if not self._idle(cpu, now):
                    rdp.need_resched = True
            # The kthread's scan, woken by this tick's timer, runs after the tick's handler.
            if self._gp_active and now >= self._next_fqs:
                self._force_qs(now)
            pending = cpu in self._holdouts and (
                (rdp.qs_at is not None and rdp.qs_at <= now) or self._idle(cpu, now))
            if pending:
                self._report_qs(cpu, now)
            self._try_end_gp(now)  # a reader that held it may have left
            # note_gp_changes: the grace periods that ended before this tick.
            seen = bisect.bisect_left(self._gp_end, now)
            pending |= seen != rdp.gp_seq or bool(rdp.cblist.next)
            rdp.gp_seq = seen
            rdp.cblist.advance(seen)
            self._accelerate(rdp, now)
            ready = bool(rdp.cblist.done)
            self.samples.append((now, cpu, len(rdp.cblist), self.held_bytes))
        if ready:
            with self.timing.in_context(cpu, "softirq"):
                self._softirq(cpu)
        elif pending:  # rcu_pending raised RCU_SOFTIRQ: rcu_core with no callback to invoke
            with self.timing.in_context(cpu, "softirq"):
                self.timing.charge(cpu, "rcu_core")
        with self._lock:
            if len(rdp.cblist) or cpu in self._holdouts:
                self._arm_tick(rdp, now)

    def _softirq(self, cpu: int) -> None:
        """__do_softirq for RCU_SOFTIRQ: rounds of rcu_core while callbacks stay ready, then
        ksoftirqd."""
        start = self.timing.clock[cpu]
        for _ in range(MAX_SOFTIRQ_RESTART):
            if not self._rcu_core(cpu):
                return
            if self.timing.clock[cpu] - start >= MAX_SOFTIRQ_TIME_NS:
                break
        self.timing.defer(cpu, self.timing.clock[cpu], lambda: self._ksoftirqd(cpu))

    def _ksoftirqd(self, cpu: int) -> None:
        """ksoftirqd, switched in: it runs the softirq until nothing is pending."""
        self.ksoftirqd_runs += 1
        with self.timing.in_context(cpu, "ksoftirqd"):
            self.timing.charge(cpu, "kworker_wakeup")  # two context switches, as a kworker's
            self.note_context_switch(cpu)
            while self._rcu_core(cpu):
                pass

    def _rcu_core(self, cpu: int) -> bool:
        """One RCU_SOFTIRQ round: rcu_core and rcu_do_batch on ``cpu``; whether ready
        callbacks remain (the softirq is raised again)."""
        timing = self.timing
        timing.charge(cpu, "rcu_core")
        with self._lock:
            self.softirq_rounds += 1
            rdp = self.cpus[cpu]
            ready = len(rdp.cblist.done)
            limit = max(rdp.blimit, ready >> RCU_DIVISOR)
            batch = rdp.cblist.take(limit, min(self._readers, default=None))
        deadline = timing.clock[cpu] + RCU_RESCHED_NS if limit > TIMED_BATCH else None
        count = 0
        for cb in batch:
            count += 1
            timing.charge(cpu, "rcu_callback")
            func, cb.func = cb.func, _ran_already  # keep no freed object alive
            func()
            if (deadline is not None and count % CLOCK_CHECK_EVERY == 0
                    and timing.clock[cpu] >= deadline):
                break
        with self._lock:
            rdp.cblist.put_back(batch[count:])
            self._ran(batch[:count])
            rdp.last_seen = max(rdp.last_seen, timing.clock[cpu])  # in the kernel till now
            rdp.batches += 1
            rdp.max_batch = max(rdp.max_batch, count)
            queued = len(rdp.cblist)
            if rdp.blimit >= MAX_BLIMIT and queued <= QLOWMARK:
                rdp.blimit = BLIMIT
            if queued == 0:
                rdp.qlen_last_fqs_check = 0
            elif queued < rdp.qlen_last_fqs_check - self.qhimark:
                rdp.qlen_last_fqs_check = queued
            return bool(count) and bool(rdp.cblist.done)

    def _ran(self, entries: Iterable[RcuHead]) -> int:  # with the lock held
        n = 0
        for entry in entries:
            self.held_bytes -= entry.size
            n += 1
        self._pending -= n
        self.callbacks_run += n
        queue = self._callbacks
        while queue and queue[0].done and queue[0].func is _ran_already:
            queue.popleft()  # what the CPUs' softirqs ran, in the order polls see
        return n

    @property
    def gp_in_progress(self) -> bool:
        """rcu_gp_in_progress() (modeled time)."""
        return self._gp_active

    @property
    def pending(self) -> int:
        """Callbacks waiting for a grace period."""
        return self._pending

    def poll(self) -> int:
        """Complete a grace period if the readers allow it; run due callbacks; return how many."""
        due = []
        with self._lock:
            oldest = min(self._readers, default=None)
            queue = self._callbacks
            while queue and (oldest is None or queue[0].epoch < oldest):
                entry = queue.popleft()
                if not entry.done:
                    entry.done = True
                    due.append(entry)
            if due and self.timing is not None:  # the CPUs' lists drop what ran
                for rdp in self.cpus:
                    rdp.cblist.purge()
            if self._ran(due):
                self.grace_periods += 1
        # Callbacks run outside the lock: they may call_rcu or free into allocators.
        # Without modeled time polls are RCU_SOFTIRQ: each callback runs on the CPU that
        # queued it, as the kernel's does (freed memory goes back to that CPU's cache).
        # (With modeled time the ticks did that; a poll runs what is left where it is.)
        on_queuing_cpu = self.timing is None and self.current is not None
        for entry in due:
            func, entry.func = entry.func, _ran_already  # keep no freed object alive
            if on_queuing_cpu:
                self._run_on(entry.cpu, func)
            else:
                func()
        return len(due)

    def _run_on(self, cpu: int, func: Callable[[], None]) -> None:
        """Run ``func`` with ``cpu`` as the calling thread's current CPU."""
        current = self.current
        previous, current.cpu = current.cpu, cpu
        try:
            func()
        finally:
            current.cpu = previous

    def synchronize_rcu(self) -> None:
        """Wait for a grace period: every callback queued so far whose readers are gone runs.

        Called from inside a read-side section this would deadlock in the kernel; here it
        raises instead.
        """
        if self.task_local.depth:
            raise RuntimeError("synchronize_rcu() inside an RCU read-side section deadlocks")
        with self._lock:
            self._epoch += 1
        self.poll()

    def barrier(self) -> None:
        """rcu_barrier(): run every queued callback (requires no reader to be active)."""
        while self.pending:
            if not self.poll():
                raise RuntimeError(
                    f"rcu_barrier(): {self.readers} reader(s) still inside a read-side section")

    def stats(self) -> dict[str, int]:
        out = {"grace_periods": self.grace_periods, "callbacks_queued": self.callbacks_queued,
               "callbacks_run": self.callbacks_run, "callbacks_pending": self.pending,
               "max_pending": self.max_pending, "held_bytes": self.held_bytes,
               "max_held_bytes": self.max_held_bytes}
        if self.timing is not None:
            lengths = [end - start for start, end in self.gps]
            out.update(gp_completed=self._completed, n_force_qs=self.n_force_qs,
                       gp_max_ns=int(max(lengths, default=0)),
                       gp_mean_ns=int(sum(lengths) / len(lengths)) if lengths else 0,
                       max_queued=max((queued for _, _, queued, _ in self.samples), default=0),
                       blimit_raised=self.blimit_raised, softirq_rounds=self.softirq_rounds,
                       ksoftirqd_runs=self.ksoftirqd_runs,
                       urgent_qs_raised=self.urgent_qs_raised, resched_qs=self.resched_qs,
                       max_batch=max(rdp.max_batch for rdp in self.cpus))
        return out
