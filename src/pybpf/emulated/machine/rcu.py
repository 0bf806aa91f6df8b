"""A deterministic RCU: read-side sections, grace periods, call_rcu callbacks.

Rules this model keeps:
- A grace period ends only when every reader that was inside a read-side section when the
  grace period began has left it; a callback queued with ``call_rcu`` runs after such a
  grace period, never inside a reader that could still see the object.
- Nothing happens behind the caller's back: grace periods advance when someone polls —
  ``poll()`` (what ``Machine.step()`` and ``synchronize_rcu()`` do), an allocator that waits
  for objects to come back, or ``call_rcu`` once more than ``qhimark`` callbacks are queued
  (the kernel then forces quiescent states too). A test can therefore hold a reader open and
  watch a callback stay pending.

Implementation: epochs. Every reader records the epoch current at its entry; every
``call_rcu`` tags its callback with the current epoch and opens a new one, so readers that
enter afterwards cannot delay it. A callback tagged ``e`` may run once no reader with an
epoch <= ``e`` remains.

Modeled time (``timing``): ``call_rcu`` is charged to the calling CPU, and the callback is due
when the grace period it waits for ends in virtual time (``Timing.rcu_gp_end``); it then runs
on that CPU, as the kernel invokes callbacks in the queuing CPU's softirq, once the CPU's clock
gets there (``Timing.defer``), each invocation charged (``rcu_callback``). Polling (``poll``,
``synchronize_rcu``, ``barrier``) still completes grace periods at once, for code that steps
the machine by hand; without modeled time a flood past ``qhimark`` polls too.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .timing import Timing

# kernel/rcu/tree.c: beyond this many queued callbacks RCU pushes grace periods harder.
QHIMARK = 10000


class _ReaderState(threading.local):
    depth = 0
    epoch = 0


class _Callback:
    """A queued callback: its epoch, the CPU that queued it, when its grace period ends."""

    __slots__ = ("epoch", "func", "cpu", "due", "done")

    def __init__(self, epoch: int, func: Callable[[], None], cpu: int, due: float) -> None:
        self.epoch = epoch
        self.func = func
        self.cpu = cpu
        self.due = due
        self.done = False


def _ran_already() -> None:
    """What a callback a poll already ran leaves in its CPU's queue."""


class Rcu:
    """RCU state of one emulated machine."""

    def __init__(self, qhimark: int = QHIMARK, timing: Timing | None = None,
                 current: Any = None) -> None:
        self._lock = threading.Lock()
        self._epoch = 0
        self._readers: dict[int, int] = {}  # epoch -> readers inside a section from it
        # Every queued callback in epoch order, and each CPU's in order of their due time
        # (a CPU's clock only moves on); one that ran is marked done and dropped lazily.
        self._callbacks: deque[_Callback] = deque()
        self._per_cpu: dict[int, deque[_Callback]] = {}
        self._pending = 0
        self._local = _ReaderState()
        self.qhimark = qhimark
        self.timing = timing
        self.current = current  # the machine's per-thread current CPU (``.cpu``)
        # Counters.
        self.grace_periods = 0  # polls that completed a grace period with callbacks to run
        self.callbacks_queued = 0
        self.callbacks_run = 0
        self.max_pending = 0

    # -- readers -------------------------------------------------------------------------------
    def read_lock(self) -> None:
        """rcu_read_lock(): sections nest per thread; the outermost one registers."""
        local = self._local
        if local.depth == 0:
            with self._lock:
                epoch = self._epoch
                self._readers[epoch] = self._readers.get(epoch, 0) + 1
            local.epoch = epoch
        local.depth += 1

    def read_unlock(self) -> None:
        local = self._local
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
        return self._local.depth > 0

    @property
    def readers(self) -> int:
        """Threads inside a read-side section now."""
        with self._lock:
            return sum(self._readers.values())

    # -- updaters ------------------------------------------------------------------------------
    def call_rcu(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` after a grace period (on this CPU when the grace period ends in
        modeled time, or from a poll)."""
        cpu, due = 0, 0.0
        timing = self.timing
        if timing is not None:
            cpu = self.current.cpu
            timing.charge(cpu, "call_rcu")
            due = timing.rcu_gp_end(timing.clock[cpu])
        with self._lock:
            entry = _Callback(self._epoch, callback, cpu, due)
            self._callbacks.append(entry)
            if timing is not None:
                self._per_cpu.setdefault(cpu, deque()).append(entry)
            self._epoch += 1
            self.callbacks_queued += 1
            self._pending += 1
            pending = self._pending
            if pending > self.max_pending:
                self.max_pending = pending
        if timing is not None:
            # In modeled time callbacks run on their own CPU when their grace period ends;
            # a flood does not make another CPU run them.
            timing.defer(cpu, due, lambda: self.invoke_due(cpu))
        elif pending > self.qhimark:
            self.poll()

    def invoke_due(self, cpu: int) -> int:
        """rcu_do_batch on ``cpu``: its callbacks whose grace period has ended by its clock
        (and whose readers are gone) run, each charged; returns how many."""
        now = self.timing.clock[cpu]
        due = []
        with self._lock:
            oldest = min(self._readers, default=None)
            queue = self._per_cpu.get(cpu, ())
            while queue:
                entry = queue[0]
                if not entry.done:
                    if entry.due > now or (oldest is not None and entry.epoch >= oldest):
                        break
                    entry.done = True
                    due.append(entry.func)
                queue.popleft()
            self._ran(due)
        for func in due:
            self.timing.charge(cpu, "rcu_callback")
            func()
        return len(due)

    def _ran(self, due: list) -> None:  # with the lock held
        if due:
            self._pending -= len(due)
            self.grace_periods += 1
            self.callbacks_run += len(due)

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
                    due.append(entry.func)
                    entry.func = _ran_already  # the CPU's queue keeps no freed object alive
            for per_cpu in self._per_cpu.values():
                while per_cpu and per_cpu[0].done:
                    per_cpu.popleft()
            self._ran(due)
        # Callbacks run outside the lock: they may call_rcu or free into allocators.
        for callback in due:
            callback()
        return len(due)

    def synchronize_rcu(self) -> None:
        """Wait for a grace period: every callback queued so far whose readers are gone runs.

        Called from inside a read-side section this would deadlock in the kernel; here it
        raises instead.
        """
        if self._local.depth:
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
        return {"grace_periods": self.grace_periods, "callbacks_queued": self.callbacks_queued,
                "callbacks_run": self.callbacks_run, "callbacks_pending": self.pending,
                "max_pending": self.max_pending}
