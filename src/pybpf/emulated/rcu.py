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
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager

# kernel/rcu/tree.c: beyond this many queued callbacks RCU pushes grace periods harder.
QHIMARK = 10000


class _ReaderState(threading.local):
    depth = 0
    epoch = 0


class Rcu:
    """RCU state of one emulated machine."""

    def __init__(self, qhimark: int = QHIMARK) -> None:
        self._lock = threading.Lock()
        self._epoch = 0
        self._readers: dict[int, int] = {}  # epoch -> readers inside a section from it
        self._callbacks: deque[tuple[int, Callable[[], None]]] = deque()
        self._local = _ReaderState()
        self.qhimark = qhimark
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
        """Run ``callback`` after a grace period (from a later poll)."""
        with self._lock:
            self._callbacks.append((self._epoch, callback))
            self._epoch += 1
            self.callbacks_queued += 1
            pending = len(self._callbacks)
            if pending > self.max_pending:
                self.max_pending = pending
        if pending > self.qhimark:
            self.poll()

    @property
    def pending(self) -> int:
        """Callbacks waiting for a grace period."""
        return len(self._callbacks)

    def poll(self) -> int:
        """Complete a grace period if the readers allow it; run due callbacks; return how many."""
        with self._lock:
            oldest = min(self._readers, default=None)
            due = []
            while self._callbacks and (oldest is None or self._callbacks[0][0] < oldest):
                due.append(self._callbacks.popleft()[1])
            if due:
                self.grace_periods += 1
                self.callbacks_run += len(due)
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
