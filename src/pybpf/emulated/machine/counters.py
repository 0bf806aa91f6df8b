"""Statistics counters kept in an int64 array, which the C hot paths add to in place.

A counter that is a Python int attribute takes a new int object at every increment (an
allocation and a free, most of what counting costs in C); kept in an ``array("q")`` it is
added to where it lies (``pybpf._cache_model`` holds the array's buffer). ``Counter`` gives
Python code the same attribute, an int read and written: ``stats.pops += 1``.
"""

from __future__ import annotations

from array import array
from typing import Any


def counter_array(n: int) -> array:
    """``n`` counters at 0."""
    return array("q", bytes(8 * n))


class Counter:
    """An int attribute that is item ``index`` of its owner's array ``tally``."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        return self if obj is None else obj.tally[self.index]

    def __set__(self, obj: Any, value: int) -> None:
        obj.tally[self.index] = value
