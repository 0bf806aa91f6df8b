"""QUEUE and STACK on the emulated backend: the program helpers and a model check."""

from __future__ import annotations

import errno
import threading
from collections import deque

from hypothesis import given, settings
from hypothesis import strategies as st

import pybpf
from helpers import op_errno
from pybpf.uapi import BPF_EXIST, BPF_NOEXIST, MapType


def test_program_push_pop_peek_return_values_or_negative_errno(emulated):
    queue = emulated.map_from_fd(emulated.map_create(MapType.QUEUE, 0, 2, 2))
    assert op_errno(queue.map_pop_elem) == errno.ENOENT
    assert op_errno(queue.map_peek_elem) == errno.ENOENT
    assert op_errno(queue.map_push_elem, b"ab", 0) == 0
    assert op_errno(queue.map_push_elem, b"cd", 0) == 0
    assert op_errno(queue.map_push_elem, b"ef", 0) == errno.E2BIG
    assert op_errno(queue.map_push_elem, b"ef", BPF_NOEXIST) == errno.EINVAL
    assert queue.map_peek_elem() == b"ab"
    assert queue.map_pop_elem() == b"ab"
    assert queue.map_lookup_elem(b"") is None
    assert op_errno(queue.map_update_elem, b"", b"zz", 0) == errno.EINVAL
    assert op_errno(queue.map_delete_elem, b"") == errno.EINVAL


ops = st.lists(st.one_of(
    st.tuples(st.just("push"), st.integers(0, 255), st.sampled_from([0, BPF_EXIST, 3])),
    st.tuples(st.just("pop")), st.tuples(st.just("peek"))), max_size=40)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from([MapType.QUEUE, MapType.STACK]), st.integers(1, 5), ops)
def test_queue_and_stack_match_a_bounded_deque(map_type, capacity, program):
    sys = pybpf.system("emulated", cpus=1)
    fd = sys.map_create(map_type, 0, 1, capacity)
    model: deque[bytes] = deque()
    for op in program:
        if op[0] == "push":
            value, flags = bytes([op[1]]), op[2]
            want = 0
            if flags > BPF_EXIST:
                want = errno.EINVAL
            elif len(model) == capacity and not flags:
                want = errno.E2BIG
            else:
                if len(model) == capacity:
                    model.popleft()
                model.append(value)
            got = 0
            try:
                sys.map_update_elem(fd, None, value, flags)
            except OSError as e:
                got = e.errno
            assert got == want
            continue
        take = model.popleft if map_type == MapType.QUEUE else model.pop
        want = (model[0] if map_type == MapType.QUEUE else model[-1]) if model else None
        try:
            got = (sys.map_lookup_and_delete_elem(fd, None) if op[0] == "pop"
                   else sys.map_lookup_elem(fd, None))
        except OSError as e:
            assert e.errno == errno.ENOENT
            got = None
        assert got == want
        if op[0] == "pop" and model:
            take()


def test_pushes_from_many_threads_are_all_kept():
    sys = pybpf.system("emulated", cpus=4)
    fd = sys.map_create(MapType.QUEUE, 0, 4, 4000)
    queue = sys.map_from_fd(fd)

    results = []  # an assert in a thread would not fail the test: check them here

    def producer(cpu: int) -> None:
        sys.machine.set_cpu(cpu)
        for i in range(1000):
            results.append(op_errno(queue.map_push_elem, (cpu * 1000 + i).to_bytes(4, "little"), 0))

    threads = [threading.Thread(target=producer, args=(cpu,)) for cpu in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [0] * 4000
    got = [int.from_bytes(sys.map_lookup_and_delete_elem(fd, None), "little")
           for _ in range(4000)]
    assert sorted(got) == list(range(4000))
    for cpu in range(4):  # each producer's elements come out in its push order
        mine = [v for v in got if v // 1000 == cpu]
        assert mine == sorted(mine)
