"""``struct bpf_timer`` in map values (kernel/bpf/helpers.c: bpf_timer_init, _set_callback,
_start, _cancel, bpf_timer_cancel_and_free).

Rules this module keeps:
- A value's timer is a ``BpfTimer`` kept by the value's memory (``_TIMERS``: the kernel keeps
  a pointer in the value's 16 bytes, which stay zero here), made by bpf_timer_init.
- Started, it fires on the CPU that armed it, once that CPU's clock reaches the expiry
  (``Timing.defer``: at the CPU's next modeled operation, or ``Machine.step()``), running the
  callback set by bpf_timer_set_callback (``fire``: the program layer's runner, which calls
  the BPF function with the map, the element's key and its value). A timer fires once per
  start (HRTIMER_NORESTART); the callback may start it again.
- Cancelling drops the armed firing (a generation count); an element that leaves its map
  (deleted, replaced, evicted, an array element updated) and a freed map cancel and free
  their timers (bpf_obj_free_fields).
- Errors are the kernel's: -EBUSY for a second init, -EINVAL for a timer not initialised or
  without a callback or for unknown flags, -EDEADLK for a cancel from the timer's own
  callback.
"""

from __future__ import annotations

import errno
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .bpf_map import BpfMap

BPF_TIMER_SIZE = 16
CLOCK_REALTIME, CLOCK_MONOTONIC, CLOCK_BOOTTIME = 0, 1, 7
MAX_CLOCKS = 16
BPF_F_TIMER_ABS, BPF_F_TIMER_CPU_PIN = 1, 2
_timers_lock = threading.Lock()  # the kernel's per-timer lock, one for all here
_TIMERS: dict[int, BpfTimer] = {}  # id(value memory) -> its timer (which keeps the memory)


class BpfTimer:
    """struct bpf_hrtimer: the timer of one map value."""

    def __init__(self, bpf_map: BpfMap, value: bytearray, key: bytes, clockid: int) -> None:
        self.bpf_map = bpf_map
        self.value = value
        self.key = key  # the element's key (what the callback gets)
        self.clockid = clockid
        self.fire: Callable[[BpfTimer], None] | None = None  # the callback's runner
        self.callback_id: Any = None  # which BPF function (set_callback replaces it)
        self.generation = 0  # a start or cancel makes the armed firing stale
        self.armed = False
        self.running_on: int | None = None  # the CPU running its callback now

    def start(self, nsecs: int, flags: int) -> None:
        machine = self.bpf_map.machine
        cpu = machine.current.cpu
        timing = machine.timing
        at = nsecs if flags & BPF_F_TIMER_ABS else timing.now(cpu) + nsecs
        self.generation += 1
        self.armed = True
        generation = self.generation
        timing.defer(cpu, at, lambda: self.expire(generation, cpu))

    def expire(self, generation: int, cpu: int) -> None:
        """bpf_timer_cb: run the callback unless the firing was cancelled or re-armed."""
        with _timers_lock:
            if generation != self.generation or not self.armed or self.fire is None:
                return
            self.armed = False
            self.running_on = cpu
        try:
            self.fire(self)
        finally:
            self.running_on = None

    def cancel(self, cpu: int) -> int:
        """1 if it was armed, 0 if not; -EDEADLK from its own callback."""
        if self.running_on == cpu:
            return -errno.EDEADLK
        was = self.armed
        self.armed = False
        self.generation += 1
        return int(was)


def bpf_timer_init(bpf_map: BpfMap, value: bytearray, flags: int) -> int:
    clockid = flags & (MAX_CLOCKS - 1)
    if flags >= MAX_CLOCKS or clockid not in (CLOCK_MONOTONIC, CLOCK_REALTIME, CLOCK_BOOTTIME):
        return -errno.EINVAL
    with _timers_lock:
        if id(value) in _TIMERS:
            return -errno.EBUSY
        _TIMERS[id(value)] = BpfTimer(bpf_map, value, bpf_map.key_of_value(value), clockid)
    return 0


def timer_of(value: Any) -> BpfTimer | None:
    """The timer of a value's memory (None: not initialised)."""
    return _TIMERS.get(id(value))


def bpf_timer_set_callback(timer: BpfTimer | None, callback_id: Any,
                           fire: Callable[[BpfTimer], None]) -> int:
    if timer is None:
        return -errno.EINVAL
    with _timers_lock:
        timer.callback_id, timer.fire = callback_id, fire
    return 0


def bpf_timer_start(timer: BpfTimer | None, nsecs: int, flags: int) -> int:
    if flags & ~(BPF_F_TIMER_ABS | BPF_F_TIMER_CPU_PIN):
        return -errno.EINVAL
    with _timers_lock:
        if timer is None or timer.fire is None:
            return -errno.EINVAL
        timer.start(nsecs, flags)
    return 0


def bpf_timer_cancel(timer: BpfTimer | None, cpu: int) -> int:
    if timer is None:
        return -errno.EINVAL
    with _timers_lock:
        return timer.cancel(cpu)


def bpf_obj_free_fields(value: Any) -> None:
    """bpf_timer_cancel_and_free: the value's timer (if any) is cancelled and gone."""
    with _timers_lock:
        timer = _TIMERS.pop(id(value), None)
        if timer is not None:
            timer.armed = False
            timer.generation += 1
