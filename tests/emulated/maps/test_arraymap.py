"""ARRAY, PERCPU_ARRAY and PROG_ARRAY on the emulated backend: program-side ops, per-CPU
slots, NUMA accounting, lazy memory. (The syscall rules are in tests/conformance.)"""

from __future__ import annotations

import errno
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pybpf
from helpers import op_errno, u32
from pybpf.uapi import BPF_EXIST, BPF_F_NUMA_NODE, BPF_NOEXIST, MapType, ProgType


def emap(sys, fd):
    """The emulated map object behind ``fd``."""
    return sys.map_from_fd(fd)


def test_array_program_lookup_returns_live_memory_seen_by_syscalls(emulated):
    fd = emulated.map_create(MapType.ARRAY, 4, 6, 4)
    array = emap(emulated, fd)
    value = array.map_lookup_elem(u32(2))
    value[:6] = b"abcdef"
    assert array.map_lookup_elem(u32(2)) is value
    assert emulated.map_lookup_elem(fd, u32(2)) == b"abcdef"
    assert array.map_lookup_elem(u32(4)) is None


def test_array_program_update_returns_negative_errno(emulated):
    array = emap(emulated, emulated.map_create(MapType.ARRAY, 4, 4, 2))
    assert op_errno(array.map_update_elem, u32(0), b"wxyz", BPF_EXIST) == 0
    assert op_errno(array.map_update_elem, u32(0), b"wxyz", BPF_NOEXIST) == errno.EEXIST
    assert op_errno(array.map_update_elem, u32(2), b"wxyz", 0) == errno.E2BIG
    assert op_errno(array.map_update_elem, u32(0), b"wxyz", 3) == errno.EINVAL
    assert op_errno(array.map_delete_elem, u32(0)) == errno.EINVAL
    assert bytes(array.map_lookup_elem(u32(0))[:4]) == b"wxyz"


def test_percpu_array_programs_see_their_cpus_slot():
    sys = pybpf.system("emulated", cpus=4)
    fd = sys.map_create(MapType.PERCPU_ARRAY, 4, 4, 2)
    array = emap(sys, fd)
    for cpu in range(4):
        with sys.on_cpu(cpu):
            assert op_errno(array.map_update_elem, u32(1), u32(10 + cpu), 0) == 0
    with sys.on_cpu(2):
        assert bytes(array.map_lookup_elem(u32(1))[:4]) == u32(12)
    assert bytes(array.map_lookup_percpu_elem(u32(1), 3)[:4]) == u32(13)
    assert array.map_lookup_percpu_elem(u32(1), 4) is None
    value = sys.map_lookup_elem(fd, u32(1))
    assert value == b"".join(u32(10 + cpu) + bytes(4) for cpu in range(4))


def test_array_accesses_are_counted_local_or_remote_by_node():
    sys = pybpf.system("emulated", cpus=4, nodes=2)
    fd = sys.map_create(MapType.ARRAY, 4, 8, 4, map_flags=BPF_F_NUMA_NODE, numa_node=1)
    array = emap(sys, fd)
    with sys.on_cpu(0):
        array.map_lookup_elem(u32(0))
    with sys.on_cpu(3):
        array.map_lookup_elem(u32(0))
        array.map_lookup_elem(u32(1))
    stats = sys.map_stats(fd)
    assert stats["numa_node"] == 1
    assert stats["access_by_cpu"] == {0: (0, 1), 3: (2, 0)}


def test_percpu_array_program_accesses_are_always_local():
    sys = pybpf.system("emulated", cpus=4, nodes=2)
    array = emap(sys, sys.map_create(MapType.PERCPU_ARRAY, 4, 8, 4))
    for cpu in range(4):
        with sys.on_cpu(cpu):
            array.map_lookup_elem(u32(0))
    assert array.access_stats.totals() == (4, 0)


def test_huge_array_costs_nothing_until_touched(emulated):
    fd = emulated.map_create(MapType.ARRAY, 4, 8, 2**32 - 1)
    last = u32(2**32 - 2)
    emulated.map_update_elem(fd, last, b"12345678")
    assert emulated.map_lookup_elem(fd, last) == b"12345678"
    assert emulated.map_lookup_elem(fd, u32(7)) == bytes(8)
    assert len(emap(emulated, fd).elems) == 1  # reading an untouched element allocates nothing


class _RacingElems(dict):
    """Element memory where another thread materialises an element between this thread's
    miss and its store: the first miss runs ``touch`` (the other thread) before answering."""

    def __init__(self, touch):
        super().__init__()
        self.touch = touch

    def get(self, index, default=None):
        value = super().get(index, default)
        if value is None and self.touch is not None:
            touch, self.touch = self.touch, None
            touch(index)
        return value


@pytest.mark.parametrize("map_type", [MapType.ARRAY, MapType.PERCPU_ARRAY])
def test_array_element_first_touched_by_two_threads_is_one_buffer(emulated, map_type):
    fd = emulated.map_create(map_type, 4, 8, 4)
    m = emulated.map_from_fd(fd)
    materialise = m.elem if map_type == MapType.ARRAY else m.slots
    other = []
    m.elems = _RacingElems(lambda index: other.append(materialise(index)))
    mine = materialise(2)
    assert mine is other[0] is m.elems[2]  # both threads write the same memory


def test_rejected_array_create_leaves_no_map(emulated):
    with pytest.raises(OSError) as info:
        emulated.map_create(MapType.ARRAY, 4, 0, 4)
    assert info.value.errno == errno.EINVAL
    with pytest.raises(OSError) as info:
        emulated.map_get_next_id(0)
    assert info.value.errno == errno.ENOENT


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 9), st.binary(min_size=4, max_size=4),
                          st.sampled_from([0, BPF_NOEXIST, BPF_EXIST])), max_size=30))
def test_array_behaves_like_a_fixed_list_of_values(ops):
    sys = pybpf.system("emulated", cpus=1)
    fd = sys.map_create(MapType.ARRAY, 4, 4, 8)
    model = [bytes(4)] * 8
    for index, value, flags in ops:
        try:
            sys.map_update_elem(fd, u32(index), value, flags)
            outcome = 0
        except OSError as e:
            outcome = e.errno
        if index >= 8:
            assert outcome == errno.E2BIG
        elif flags == BPF_NOEXIST:
            assert outcome == errno.EEXIST
        else:
            assert outcome == 0
            model[index] = value
    assert [sys.map_lookup_elem(fd, u32(i)) for i in range(8)] == model


def stand_in_prog(sys, prog_type: int, prog_id: int) -> int:
    """An fd on a program-shaped object (what the fd table holds for a loaded program)."""
    return sys.fd_install(SimpleNamespace(prog_type=prog_type, expected_attach_type=0,
                                          prog_flags=0, id=prog_id))


def test_prog_array_stores_programs_by_fd_and_reports_ids(emulated):
    fd = emulated.map_create(MapType.PROG_ARRAY, 4, 4, 4)
    prog = stand_in_prog(emulated, ProgType.XDP, 41)
    emulated.map_update_elem(fd, u32(2), u32(prog))
    assert emulated.map_lookup_elem(fd, u32(2)) == u32(41)
    table = emap(emulated, fd)
    assert table.tail_call_target(2) is emulated.fd_get(prog)
    assert table.tail_call_target(1) is None
    assert table.tail_call_target(4) is None
    # programs cannot look into a prog array (fd_array_map_lookup_elem)
    assert op_errno(table.map_lookup_elem, u32(2)) == errno.EOPNOTSUPP


def test_prog_array_first_program_fixes_the_owner_type(emulated):
    fd = emulated.map_create(MapType.PROG_ARRAY, 4, 4, 4)
    emulated.map_update_elem(fd, u32(0), u32(stand_in_prog(emulated, ProgType.XDP, 1)))
    emulated.map_delete_elem(fd, u32(0))  # the owner type stays
    other = stand_in_prog(emulated, ProgType.SOCKET_FILTER, 2)
    with pytest.raises(OSError) as info:
        emulated.map_update_elem(fd, u32(1), u32(other))
    assert info.value.errno == errno.EINVAL


def test_prog_array_holds_a_program_reference_until_released(emulated):
    fd = emulated.map_create(MapType.PROG_ARRAY, 4, 4, 2)
    prog_fd = stand_in_prog(emulated, ProgType.XDP, 5)
    prog = emulated.fd_get(prog_fd)
    emulated.map_update_elem(fd, u32(0), u32(prog_fd))
    emulated.map_update_elem(fd, u32(1), u32(prog_fd))
    assert prog.refcnt == 2
    emulated.map_update_elem(fd, u32(1), u32(prog_fd))  # replacing drops the old reference
    assert prog.refcnt == 2
    emulated.close(fd)  # freeing the array releases what it holds
    assert prog.refcnt == 0
