"""The storage of a hash map: hashtab.c's array of ``struct bucket`` (hlist_nulls heads), as
the emulation keeps it.

Rules this module keeps:
- A bucket lists its elements newest first (``hlist_nulls_add_head_rcu``); only non-empty
  buckets exist, and a byte per bucket (``nonempty``, 1 while it has elements) lets walks go
  in bucket order to the next one with ``bytearray.find`` (get_next_key and the batches)
  where a linked element costs one byte write: a sorted index of them cost a list insert or
  delete, which moves every later entry, each time a bucket filled or emptied.
- Beside the buckets, ``table`` maps a key to its element (the lookup), and ``values`` (kept
  for maps whose value is one buffer) a key to its live value buffer, for the Map layer's
  direct reads (``System.fast_ops``). The three always agree (``problems`` says where not).
- Writers hold the bucket's lock (the map's stripe of it), which also guards its byte;
  readers walk without locks, as the kernel walks under RCU, each bucket through a copy, so
  a concurrent update or delete cannot shrink it between two reads.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class HtabBuckets:
    """The buckets of one hash map, ``n_buckets`` of them (a power of two)."""

    def __init__(self, n_buckets: int, with_values: bool) -> None:
        self.mask = n_buckets - 1
        self.table: dict[bytes, Any] = {}
        self.values: dict[bytes, bytearray] | None = {} if with_values else None
        # a bucket's list, made when it first takes an element and kept when it empties (a
        # map's churn then neither makes nor drops one; at most one per bucket ever used)
        self.buckets: dict[int, list[Any]] = {}
        self.nonempty = bytearray(n_buckets)  # 1 where a bucket has elements

    def link(self, elem: Any) -> None:
        """hlist_nulls_add_head_rcu: ``elem`` at its bucket's front."""
        index = elem.hash & self.mask
        bucket = self.buckets.get(index)
        if bucket is None:
            bucket = self.buckets[index] = []
        if not bucket:
            self.nonempty[index] = 1
        bucket.insert(0, elem)
        self.table[elem.key] = elem
        if self.values is not None:
            self.values[elem.key] = elem.value

    def unlink(self, elem: Any) -> None:
        """hlist_nulls_del_rcu."""
        index = elem.hash & self.mask
        bucket = self.buckets[index]
        bucket.remove(elem)
        if not bucket:
            self.nonempty[index] = 0
        if self.table.get(elem.key) is elem:
            del self.table[elem.key]
            if self.values is not None:
                del self.values[elem.key]

    def replace(self, old: Any, new: Any) -> None:
        """Link ``new`` at the front and unlink ``old`` (same key, same bucket)."""
        bucket = self.buckets[old.hash & self.mask]
        bucket.remove(old)
        bucket.insert(0, new)
        self.table[new.key] = new
        if self.values is not None:
            self.values[new.key] = new.value

    def bucket(self, index: int) -> tuple[Any, ...]:
        """A copy of bucket ``index`` (empty if it has no element)."""
        return tuple(self.buckets.get(index, ()))

    def next_nonempty(self, start: int) -> int | None:
        """The first non-empty bucket at or after ``start``, or None."""
        at = self.nonempty.find(1, start)
        return at if at >= 0 else None

    def next_key(self, elem: Any | None, index: int) -> bytes | None:
        """The key after ``elem`` (in bucket ``index``; None: from the start of the
        buckets), or None past the last."""
        start = 0
        if elem is not None:
            bucket = self.bucket(index)
            pos = bucket.index(elem) if elem in bucket else len(bucket)
            if pos + 1 < len(bucket):
                return bucket[pos + 1].key
            start = index + 1
        while (index := self.next_nonempty(start)) is not None:
            bucket = self.bucket(index)
            if bucket:
                return bucket[0].key
            start = index + 1  # emptied meanwhile
        return None

    def clear(self) -> list[Any]:
        """Empty the storage; returns the elements it held."""
        elems = list(self.table.values())
        self.table.clear()
        if self.values is not None:
            self.values.clear()
        self.buckets.clear()
        self.nonempty[:] = bytes(len(self.nonempty))  # in place: the C core holds it
        return elems

    def problems(self, hash_of: Callable[[bytes], int]) -> list[str]:
        """Where buckets, table, values and index disagree (``hash_of`` is the map's hash)."""
        problems = []
        linked = [elem for bucket in self.buckets.values() for elem in bucket]
        if len(linked) != len(self.table):
            problems.append(f"{len(linked)} linked elements but {len(self.table)} in the table")
        for elem in linked:
            if self.table.get(elem.key) is not elem:
                problems.append(f"element {elem.key!r} linked but not in the table")
            if hash_of(elem.key) != elem.hash:
                problems.append(f"element {elem.key!r} carries a wrong hash")
        if self.values is not None and (self.values.keys() != self.table.keys() or any(
                self.values[k] is not e.value for k, e in self.table.items())):
            problems.append("the value table disagrees with the element table")
        if sorted(i for i, bucket in self.buckets.items() if bucket) != [
                i for i, used in enumerate(self.nonempty) if used]:
            problems.append("the non-empty bucket index is out of date")
        return problems
