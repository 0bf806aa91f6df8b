"""The generic batch ops of syscall.c, built from a map's element ops.

A family opts in by setting class attributes, as the kernel's ops tables do::

    map_lookup_batch = generic_map_lookup_batch
    map_update_batch = generic_map_update_batch
    map_delete_batch = generic_map_delete_batch

Handlers raise ``KernelError`` for an error that returns nothing; update and delete return
``(count_done, error_or_None)`` because the kernel reports how far a failed batch got.
"""

from __future__ import annotations

import errno
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..errors import KernelError
from ..system import BatchLookup
from ..uapi import BPF_F_LOCK

if TYPE_CHECKING:
    from .bpf_map import BpfMap


def check_elem_flags(elem_flags: int) -> None:
    """elem_flags may only hold BPF_F_LOCK, which needs a bpf_spin_lock (never here)."""
    if elem_flags & ~BPF_F_LOCK:
        raise KernelError(errno.EINVAL, f"elem_flags {elem_flags:#x}: only BPF_F_LOCK is "
                          "accepted in batch element flags")
    if elem_flags:
        raise KernelError(errno.EINVAL, "BPF_F_LOCK needs a bpf_spin_lock in the value")


def check_batch_key(bpf_map: BpfMap, key: bytes, index: int) -> bytes:
    if not isinstance(key, (bytes, bytearray, memoryview)):
        raise KernelError(errno.EINVAL, f"key {index} must be bytes")
    key = bytes(key)
    if len(key) != bpf_map.key_size:
        raise KernelError(errno.EINVAL, f"key {index} is {len(key)} bytes, the map's "
                          f"key_size is {bpf_map.key_size}")
    return key


def check_batch_value(bpf_map: BpfMap, value: bytes, index: int) -> bytes:
    size = bpf_map.sys_value_size
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise KernelError(errno.EINVAL, f"value {index} must be bytes")
    value = bytes(value)
    if len(value) != size:
        raise KernelError(errno.EINVAL, f"value {index} is {len(value)} bytes, this map "
                          f"takes {size}")
    return value


def generic_map_lookup_batch(bpf_map: BpfMap, in_batch: bytes | None, count: int,
                             elem_flags: int, flags: int) -> BatchLookup:
    """Walk with get_next_key from the key in ``in_batch``; tokens are keys."""
    check_elem_flags(elem_flags)
    if count == 0:
        return BatchLookup([], [], None, False)
    prev = None if in_batch is None else check_batch_key(bpf_map, in_batch, 0)
    keys: list[bytes] = []
    values: list[bytes] = []
    end = False
    while len(keys) < count:
        try:
            key = bpf_map.get_next_key(prev)
        except KernelError as exc:
            if exc.errno != errno.ENOENT:
                raise
            end = True
            break
        try:
            value = bpf_map.lookup_elem_sys(key, elem_flags)
        except KernelError as exc:
            if exc.errno != errno.ENOENT:
                raise
            prev = key  # 6.14+: a key that vanished is skipped
            continue
        keys.append(key)
        values.append(value)
        prev = key
    # out_batch is the last key visited (a skipped, vanished key included), as syscall.c does.
    return BatchLookup(keys, values, prev if keys else None, end)


def generic_map_update_batch(bpf_map: BpfMap, keys: Sequence[bytes], values: Sequence[bytes],
                             elem_flags: int, flags: int) -> tuple[int, KernelError | None]:
    check_elem_flags(elem_flags)
    done = 0
    for done, (key, value) in enumerate(zip(keys, values, strict=True)):
        try:
            bpf_map.update_elem_sys(check_batch_key(bpf_map, key, done),
                                    check_batch_value(bpf_map, value, done), elem_flags)
        except KernelError as exc:
            return done, exc
    return len(keys), None


def generic_map_delete_batch(bpf_map: BpfMap, keys: Sequence[bytes], elem_flags: int,
                             flags: int) -> tuple[int, KernelError | None]:
    check_elem_flags(elem_flags)
    for done, key in enumerate(keys):
        try:
            bpf_map.delete_elem_sys(check_batch_key(bpf_map, key, done))
        except KernelError as exc:
            return done, exc
    return len(keys), None
