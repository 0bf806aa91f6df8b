"""hashtab.c's batch lookups of a hash map (__htab_map_lookup_and_delete_batch): whole
buckets at a time, the token a u32 bucket index; ``hashtab.HtabMap`` takes them in.

A bucket is read (and, for lookup_and_delete, emptied) under its bucket lock; the deleted
elements go back only after every lock is dropped, as in the kernel.
"""

from __future__ import annotations

import errno
import struct

from ...errors import KernelError
from ...system import BatchLookup
from .batch import check_elem_flags
from .bpf_spin_lock import read_map_value
from .htab_elem import HtabElem


class HtabBatchOps:
    """The batch ops of ``HtabMap`` (storage, buckets, locks and the element helpers are its)."""

    def _htab_map_lookup_and_delete_batch(self, in_batch: bytes | None, count: int,
                                          elem_flags: int, flags: int,
                                          delete: bool) -> BatchLookup:
        """__htab_map_lookup_and_delete_batch: whole buckets; tokens are bucket indices."""
        check_elem_flags(self, elem_flags)
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
        if batch >= self.n_buckets:  # ENOENT before anything is written
            return BatchLookup([], [], None, True)
        keys: list[bytes] = []
        values: list[bytes] = []
        freed: list[HtabElem] = []
        end = False
        while True:
            index = self.storage.next_nonempty(batch)
            if index is None:
                batch = self.n_buckets
                end = True
                break
            batch = index
            with self.locks[index & (self.nstripes - 1)]:
                bucket = self.buckets.get(index, [])
                if len(bucket) > count - len(keys):
                    if not keys:
                        raise KernelError(errno.ENOSPC, f"bucket {index} holds {len(bucket)} "
                                          f"elements, more than count={count}", count=0)
                    break
                for elem in list(bucket):
                    keys.append(elem.key)
                    values.append(self._read_value(elem) if not self.special_fields else
                                  read_map_value(self, elem.value, bool(elem_flags)))
                    if delete:
                        self._unlink(elem)
                        freed.append(elem)
            batch = index + 1
            if batch >= self.n_buckets:
                end = True
                break
        for elem in freed:
            self._release_elem(elem)
        return BatchLookup(keys, values, struct.pack("<I", batch), end)

    def htab_map_lookup_batch(self, in_batch, count, elem_flags, flags) -> BatchLookup:
        return self._htab_map_lookup_and_delete_batch(in_batch, count, elem_flags, flags,
                                                      delete=False)

    def htab_map_lookup_and_delete_batch(self, in_batch, count, elem_flags,
                                         flags) -> BatchLookup:
        return self._htab_map_lookup_and_delete_batch(in_batch, count, elem_flags, flags,
                                                      delete=True)
