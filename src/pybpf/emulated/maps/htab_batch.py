"""hashtab.c's batch lookups of a hash map (__htab_map_lookup_and_delete_batch): whole
buckets at a time, the token a u32 bucket index; ``hashtab.HtabMap`` takes them in, and a
hash map in a shared segment (``shared.SharedHtab``) walks the same way with the segment's
buckets.

A bucket is read (and, for lookup_and_delete, emptied) under its bucket lock; the deleted
elements go back only after every lock is dropped, as in the kernel.
"""

from __future__ import annotations

import errno
import struct
from collections.abc import Callable

from ...errors import KernelError
from ...system import BatchLookup
from .batch import check_elem_flags
from .bpf_map import BpfMap
from .bpf_spin_lock import read_map_value
from .htab_elem import HtabElem

# take_bucket(start, room, delete) -> (index, pairs): the first bucket at or after ``start``
# holding elements (None: no bucket does) and its (key, value) pairs, None for the pairs when
# it holds more than ``room`` (nothing taken); with ``delete`` the bucket emptied
BucketStep = Callable[[int, int, bool], tuple[int | None, list[tuple[bytes, bytes]] | None]]


def lookup_and_delete_batch(bpf_map: BpfMap, n_buckets: int, take_bucket: BucketStep,
                            in_batch: bytes | None, count: int, elem_flags: int, flags: int,
                            delete: bool) -> BatchLookup:
    """__htab_map_lookup_and_delete_batch over ``n_buckets`` buckets: whole buckets; tokens
    are bucket indices. ENOSPC where the first bucket holds more than ``count``."""
    check_elem_flags(bpf_map, elem_flags)
    if flags:
        raise KernelError(errno.EINVAL, f"flags {flags:#x}: batch flags must be 0")
    if count == 0:
        return BatchLookup([], [], None, False)
    batch = 0
    if in_batch is not None:
        if len(in_batch) != 4:
            raise KernelError(errno.EINVAL, f"in_batch is {len(in_batch)} bytes: hash "
                              "batches take a 4-byte bucket index")
        (batch,) = struct.unpack("<I", in_batch)
    if batch >= n_buckets:  # ENOENT before anything is written
        return BatchLookup([], [], None, True)
    keys: list[bytes] = []
    values: list[bytes] = []
    end = False
    while True:
        index, pairs = take_bucket(batch, count - len(keys), delete)
        if index is None:
            batch = n_buckets
            end = True
            break
        if pairs is None:
            if not keys:
                raise KernelError(errno.ENOSPC, f"bucket {index} holds more elements than "
                                  f"count={count}", count=0)
            batch = index
            break
        for key, value in pairs:
            keys.append(key)
            values.append(value)
        batch = index + 1
        if batch >= n_buckets:
            end = True
            break
    return BatchLookup(keys, values, struct.pack("<I", batch), end)


class HtabBatchOps:
    """The batch ops of ``HtabMap`` (storage, buckets, locks and the element helpers are its)."""

    def _htab_map_lookup_and_delete_batch(self, in_batch: bytes | None, count: int,
                                          elem_flags: int, flags: int,
                                          delete: bool) -> BatchLookup:
        freed: list[HtabElem] = []

        def take_bucket(start: int, room: int, delete: bool):
            index = self.storage.next_nonempty(start)
            if index is None:
                return None, None
            with self.locks[index & (self.nstripes - 1)]:
                bucket = self.buckets.get(index, [])
                if len(bucket) > room:
                    return index, None
                pairs = []
                for elem in list(bucket):
                    pairs.append((elem.key, self._read_value(elem) if not self.special_fields
                                  else read_map_value(self, elem.value, bool(elem_flags))))
                    if delete:
                        self._unlink(elem)
                        freed.append(elem)
            return index, pairs

        try:
            return lookup_and_delete_batch(self, self.n_buckets, take_bucket, in_batch, count,
                                           elem_flags, flags, delete)
        finally:
            for elem in freed:
                self._release_elem(elem)

    def htab_map_lookup_batch(self, in_batch, count, elem_flags, flags) -> BatchLookup:
        return self._htab_map_lookup_and_delete_batch(in_batch, count, elem_flags, flags,
                                                      delete=False)

    def htab_map_lookup_and_delete_batch(self, in_batch, count, elem_flags,
                                         flags) -> BatchLookup:
        return self._htab_map_lookup_and_delete_batch(in_batch, count, elem_flags, flags,
                                                      delete=True)
