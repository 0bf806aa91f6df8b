"""Counters in an int64 array (emulated/machine/counters.py), which the C hot paths add to."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pybpf.emulated.machine.counters import Counter, counter_array


class Owner:
    __slots__ = ("tally",)
    hits, misses = (Counter(i) for i in range(2))

    def __init__(self) -> None:
        self.tally = counter_array(2)


@given(st.lists(st.tuples(st.booleans(), st.integers(-5, 5))))
def test_a_counter_reads_and_writes_its_item_as_an_int(steps):
    owner, expected = Owner(), [0, 0]
    for hit, delta in steps:
        if hit:
            owner.hits += delta
        else:
            owner.misses += delta
        expected[0 if hit else 1] += delta
    assert (owner.hits, owner.misses) == tuple(expected) == tuple(owner.tally)
    assert type(owner.hits) is int and isinstance(Owner.hits, Counter)


def test_a_counter_holds_int64():
    owner = Owner()
    owner.hits = 2**63 - 1
    with pytest.raises(OverflowError):
        owner.hits += 1
    assert owner.hits == 2**63 - 1


def test_the_c_core_finds_the_counters_by_name_and_refuses_another_array():
    """counts_bind (pybpf._cache_model) takes an owner's tally by its Counters' names: a map
    whose free list's tally is not int64 is refused when its core is made."""
    from array import array

    from pybpf import system
    from pybpf.accelerator import CACHE_MODEL
    from pybpf.uapi import MapType

    if CACHE_MODEL is None:
        pytest.skip("the C extension (pybpf._cache_model) is not built")
    emu = system("emulated", cpus=1, modeled_time=False)
    bpf_map = emu.map_from_fd(emu.map_create(MapType.HASH, 4, 8, 4))
    bpf_map.map_update_elem(b"\x01\0\0\0", bytes(8), 0)
    assert bpf_map.freelist.pops == 1
    bpf_map.freelist.tally = array("i", [0, 0, 0, 0])
    with pytest.raises(TypeError, match="PcpuFreelist.tally is not an array of int64"):
        CACHE_MODEL.HtabCore(bpf_map, 64, bpf_map.htab_map_update_elem,
                             bpf_map.htab_map_delete_elem)
