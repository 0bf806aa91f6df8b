"""The generic batch ops of syscall.c, built from a map's element ops.

A family opts in by setting class attributes, as the kernel's ops tables do::

    map_lookup_batch = generic_map_lookup_batch
    map_update_batch = generic_map_update_batch
    map_delete_batch = generic_map_delete_batch

Handlers get bytes (``System`` normalised them) and raise ``KernelError``; update and delete
handle one element at a time, as the kernel does, so a failure carries ``count``: the elements
done before it.
"""

from __future__ import annotations

import errno
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ...attrs import length_problem, value_problem
from ...errors import KernelError
from ...system import BatchLookup
from ...uapi import BPF_F_LOCK
from .bpf_spin_lock import read_map_value

if TYPE_CHECKING:
    from .bpf_map import BpfMap


def check_elem_flags(bpf_map: BpfMap, elem_flags: int) -> None:
    """elem_flags may only hold BPF_F_LOCK, which needs a bpf_spin_lock in the value."""
    if elem_flags & ~BPF_F_LOCK:
        raise KernelError(errno.EINVAL, f"elem_flags {elem_flags:#x}: only BPF_F_LOCK is "
                          "accepted in batch element flags")
    if elem_flags and bpf_map.spin_lock_off < 0:
        raise KernelError(errno.EINVAL, "BPF_F_LOCK needs a bpf_spin_lock in the value")


def check_batch_key(bpf_map: BpfMap, key: bytes, what: str, index: int | None = None) -> bytes:
    """The copy of one key of a batch (``what[index]``) or its token (``what``): EINVAL when
    its length is wrong."""
    if len(key) != bpf_map.key_size:
        name = what if index is None else f"{what}[{index}]"
        raise KernelError(errno.EINVAL, length_problem(name, len(key), bpf_map.key_size,
                                                       "the map's key_size is"))
    return key


def check_batch_value(bpf_map: BpfMap, value: bytes, index: int) -> bytes:
    if len(value) != bpf_map.sys_value_size:
        raise KernelError(errno.EINVAL, value_problem(
            bpf_map.map_type, bpf_map.value_size, bpf_map.machine.num_cpus,
            f"values[{index}]", len(value)))
    return value


def batch_copy_value(bpf_map: BpfMap, key: bytes, elem_flags: int) -> bytes:
    """bpf_map_copy_value for a batch: a value with special fields is read around them
    (under its lock for BPF_F_LOCK)."""
    if not bpf_map.special_fields:
        return bpf_map.bpf_map_copy_value(key, elem_flags)
    live = bpf_map.map_lookup_elem(key)
    if live is None:
        raise KernelError(errno.ENOENT, "key not found")
    return read_map_value(bpf_map, live, bool(elem_flags))


def generic_map_lookup_batch(bpf_map: BpfMap, in_batch: bytes | None, count: int,
                             elem_flags: int, flags: int) -> BatchLookup:
    """Walk with get_next_key from the key in ``in_batch``; tokens are keys."""
    check_elem_flags(bpf_map, elem_flags)
    if count == 0:
        return BatchLookup([], [], None, False)
    prev = None if in_batch is None else check_batch_key(bpf_map, in_batch, "in_batch")
    keys: list[bytes] = []
    values: list[bytes] = []
    end = False
    while len(keys) < count:
        try:
            key = bpf_map.map_get_next_key(prev)
        except KernelError as exc:
            if exc.errno != errno.ENOENT:
                raise
            end = True
            break
        try:
            value = batch_copy_value(bpf_map, key, elem_flags)
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
                             elem_flags: int, flags: int) -> int:
    check_elem_flags(bpf_map, elem_flags)
    for done, (key, value) in enumerate(zip(keys, values, strict=True)):
        try:
            bpf_map.bpf_map_update_value(check_batch_key(bpf_map, key, "keys", done),
                                         check_batch_value(bpf_map, value, done), elem_flags)
        except KernelError as exc:
            exc.count = done
            raise
    return len(keys)


def generic_map_delete_batch(bpf_map: BpfMap, keys: Sequence[bytes], elem_flags: int,
                             flags: int) -> int:
    check_elem_flags(bpf_map, elem_flags)
    for done, key in enumerate(keys):
        try:
            bpf_map.map_delete_elem(check_batch_key(bpf_map, key, "keys", done))
        except KernelError as exc:
            exc.count = done
            raise
    return len(keys)
