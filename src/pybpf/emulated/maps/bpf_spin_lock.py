"""``struct bpf_spin_lock`` in map values (kernel/bpf/helpers.c: __bpf_spin_lock,
copy_map_value_locked; include/linux/bpf.h: copy_map_value, check_and_init_map_value).

Rules this module keeps:
- The lock is the value's own 4-byte word at ``bpf_map.spin_lock_off`` (found through BTF at
  map_create): 0 free, 1 held. Taking it is a test-and-set under one process-wide lock, so
  emulated CPUs (threads) that run programs at once exclude each other for real; a waiter
  spins, charging the spin to its CPU's virtual clock and giving way to CPUs behind it
  (``Timing.sync``), so a virtual-time schedule cannot stop the holder.
- User space never sees nor writes the word, nor any special field of the value (the map's
  ``special_fields``: the lock, a bpf_timer): reads copy the value with them zeroed, writes
  copy around them (BPF_F_LOCK: while holding the lock).
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterator

    from .bpf_map import BpfMap

BPF_SPIN_LOCK_SIZE = 4
_WORD_LOCK = threading.Lock()  # makes the word's test-and-set atomic between threads
_FREE = bytes(BPF_SPIN_LOCK_SIZE)
_HELD = (1).to_bytes(BPF_SPIN_LOCK_SIZE, "little")


def bpf_spin_trylock(word: bytearray | memoryview, off: int) -> bool:
    """Take the lock at ``word[off:off + 4]`` if it is free."""
    with _WORD_LOCK:
        if word[off:off + BPF_SPIN_LOCK_SIZE] != _FREE:
            return False
        word[off:off + BPF_SPIN_LOCK_SIZE] = _HELD
        return True


def bpf_spin_lock(word: bytearray | memoryview, off: int, machine: Any = None) -> None:
    """__bpf_spin_lock: spin until the lock is ours."""
    while not bpf_spin_trylock(word, off):
        if machine is not None:
            cpu = machine.current.cpu
            machine.timing.charge(cpu, "helper_call")
            machine.timing.sync(cpu)
        time.sleep(0)  # let the holder's thread run


def bpf_spin_unlock(word: bytearray | memoryview, off: int) -> None:
    with _WORD_LOCK:
        word[off:off + BPF_SPIN_LOCK_SIZE] = _FREE


@contextmanager
def value_locked(bpf_map: BpfMap, value: bytearray) -> Iterator[None]:
    """The body runs holding ``value``'s lock (copy_map_value_locked)."""
    bpf_spin_lock(value, bpf_map.spin_lock_off, bpf_map.machine)
    try:
        yield
    finally:
        bpf_spin_unlock(value, bpf_map.spin_lock_off)


def check_and_init_map_value(bpf_map: BpfMap, data: bytes) -> bytes:
    """``data`` (a value's bytes) with the special fields zeroed, as user space sees it and
    as a new element starts."""
    out = bytearray(data)
    for off, size in bpf_map.special_fields:
        out[off:off + size] = bytes(size)
    return bytes(out)


def copy_map_value(bpf_map: BpfMap, dst: bytearray, src: bytes) -> None:
    """Write ``src`` (value_size bytes) over ``dst``, around its special fields."""
    start = 0
    for off, size in bpf_map.special_fields:
        dst[start:off] = src[start:off]
        start = off + size
    dst[start:bpf_map.value_size] = src[start:bpf_map.value_size]


def copy_map_value_locked(bpf_map: BpfMap, dst: bytearray, src: bytes) -> None:
    """copy_map_value holding ``dst``'s lock (an update with BPF_F_LOCK)."""
    with value_locked(bpf_map, dst):
        copy_map_value(bpf_map, dst, src)


def read_map_value(bpf_map: BpfMap, value: bytearray, locked: bool) -> bytes:
    """A user-space read of ``value``: under its lock for BPF_F_LOCK, the special fields
    zeroed."""
    if locked:
        with value_locked(bpf_map, value):
            data = bytes(value[:bpf_map.value_size])
    else:
        data = bytes(value[:bpf_map.value_size])
    return check_and_init_map_value(bpf_map, data)
