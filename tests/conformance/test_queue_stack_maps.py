"""Conformance of QUEUE and STACK (kernel/bpf/queue_stack_maps.c), on both backends.

Each test pins one kernel rule and runs against the real kernel (the oracle) and the emulated
backend through the ``backend`` fixture.
"""

from __future__ import annotations

import errno

import pytest

from helpers import err_of, u32
from pybpf.asm import (
    FP,
    R0,
    R1,
    R2,
    R6,
    add64,
    assemble,
    call,
    encode,
    exit_,
    ld_map_fd,
    ldxdw,
    mov64,
    st,
)
from pybpf.uapi import (
    BPF_EXIST,
    BPF_F_NO_PREALLOC,
    BPF_F_RDONLY_PROG,
    BPF_F_WRONLY_PROG,
    BPF_NOEXIST,
    ENOTSUPP,
    MapType,
    ProgType,
)

from .conftest import KMALLOC_MAX_SIZE


@pytest.mark.parametrize("map_type", [MapType.QUEUE, MapType.STACK])
@pytest.mark.parametrize("key_size, value_size, max_entries, flags, want", [
    (0, 4, 0, 0, errno.EINVAL),
    (4, 4, 1, 0, errno.EINVAL),
    (0, 0, 1, 0, errno.EINVAL),
    (0, 4, 1, BPF_F_NO_PREALLOC, errno.EINVAL),
    (0, 4, 1, BPF_F_RDONLY_PROG | BPF_F_WRONLY_PROG, errno.EINVAL),
    (0, KMALLOC_MAX_SIZE + 1, 1, 0, errno.E2BIG),
])
def test_queue_stack_create_rejects_bad_attributes(maps, map_type, key_size, value_size,
                                                   max_entries, flags, want):
    assert maps.create_errno(map_type, key_size, value_size, max_entries,
                             map_flags=flags) == want


@pytest.mark.parametrize("map_type, order", [(MapType.QUEUE, [1, 2, 3]),
                                             (MapType.STACK, [3, 2, 1])])
def test_queue_stack_pop_order(maps, map_type, order):
    sys = maps.sys
    fd = maps.create(map_type, 0, 4, 3)
    for i in (1, 2, 3):
        sys.map_update_elem(fd, None, u32(i))
    assert sys.map_lookup_elem(fd, None) == u32(order[0])  # peek leaves it there
    assert [sys.map_lookup_and_delete_elem(fd, None) for _ in range(3)] == \
        [u32(i) for i in order]
    assert err_of(sys.map_lookup_and_delete_elem, fd, None) == errno.ENOENT
    assert err_of(sys.map_lookup_elem, fd, None) == errno.ENOENT


@pytest.mark.parametrize("map_type, after", [(MapType.QUEUE, [2, 3, 4]),
                                             (MapType.STACK, [4, 3, 2])])
def test_queue_stack_full_gives_e2big_unless_exist_drops_oldest(maps, map_type, after):
    sys = maps.sys
    fd = maps.create(map_type, 0, 4, 3)
    for i in (1, 2, 3):
        sys.map_update_elem(fd, None, u32(i))
    assert err_of(sys.map_update_elem, fd, None, u32(4)) == errno.E2BIG
    sys.map_update_elem(fd, None, u32(4), BPF_EXIST)
    assert [sys.map_lookup_and_delete_elem(fd, None) for _ in range(3)] == \
        [u32(i) for i in after]


@pytest.mark.parametrize("map_type", [MapType.QUEUE, MapType.STACK])
def test_queue_stack_element_errors(maps, map_type):
    sys = maps.sys
    fd = maps.create(map_type, 0, 4, 3)
    assert err_of(sys.map_update_elem, fd, None, u32(1), BPF_NOEXIST) == errno.EINVAL
    assert err_of(sys.map_update_elem, fd, None, u32(1), 3) == errno.EINVAL
    assert err_of(sys.map_delete_elem, fd, None) == errno.EINVAL
    assert err_of(sys.map_get_next_key, fd, None) == errno.EINVAL
    sys.map_update_elem(fd, None, u32(1))
    assert err_of(sys.map_lookup_and_delete_elem, fd, None, 4) == errno.EINVAL
    assert err_of(sys.map_lookup_batch, fd, None, 4) == ENOTSUPP


@pytest.mark.parametrize("map_type", [MapType.QUEUE, MapType.STACK])
@pytest.mark.parametrize("helper", ["map_pop_elem", "map_peek_elem"])
def test_pop_or_peek_on_an_empty_map_zeroes_the_programs_buffer(sys, map_type, helper):
    """__queue_map_get / __stack_map_get: an empty map gives -ENOENT and a zeroed value
    buffer; a full one the value."""
    fd = sys.map_create(map_type, 0, 8, 4)
    items = [st(8, FP, -8, 0x1111), ld_map_fd(R1, "m"), mov64(R2, FP), add64(R2, -8),
             call(helper), mov64(R6, R0), ldxdw(R0, FP, -8), add64(R0, R6), exit_()]
    prog = sys.prog_load(ProgType.XDP, encode(assemble(items).with_map_fds(lambda name: fd)))
    assert sys.prog_test_run(prog, bytes(64)).retval == (-errno.ENOENT) & 0xFFFFFFFF
    sys.map_update_elem(fd, None, (0x2222).to_bytes(8, "little"))
    assert sys.prog_test_run(prog, bytes(64)).retval == 0x2222
    sys.close(prog)
    sys.close(fd)
