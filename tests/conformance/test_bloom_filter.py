"""Conformance of BLOOM_FILTER (kernel/bpf/bloom_filter.c), on both backends.

Each test pins one kernel rule and runs against the real kernel (the oracle) and the emulated
backend through the ``backend`` fixture; differential tests (``kmaps`` and ``emaps``
together) compare orders and hash-dependent results that no simple expectation captures.
"""

from __future__ import annotations

import errno
import random

import pytest

from helpers import err_of
from pybpf.asm import FP, R0, R1, R2
from pybpf.asm import builder as b
from pybpf.errors import VerifierError
from pybpf.programs import Program, ProgramSpec
from pybpf.uapi import (
    BPF_EXIST,
    BPF_F_NO_PREALLOC,
    BPF_F_ZERO_SEED,
    BPF_NOEXIST,
    ENOTSUPP,
    MapType,
    ProgType,
)

from .conftest import KMALLOC_MAX_SIZE


@pytest.mark.parametrize("map_type, key_size, value_size, max_entries, flags, extra, want", [
    (MapType.BLOOM_FILTER, 4, 4, 8, 0, 0, errno.EINVAL),
    (MapType.BLOOM_FILTER, 0, 0, 8, 0, 0, errno.EINVAL),
    (MapType.BLOOM_FILTER, 0, 4, 0, 0, 0, errno.EINVAL),
    (MapType.BLOOM_FILTER, 0, 4, 8, BPF_F_NO_PREALLOC, 0, errno.EINVAL),
    (MapType.BLOOM_FILTER, 0, 4, 8, 0, 0x10, errno.EINVAL),
    (MapType.BLOOM_FILTER, 4, KMALLOC_MAX_SIZE + 1, 8, 0, 0, errno.E2BIG),
    (MapType.ARRAY, 4, 4, 8, 0, 3, errno.EINVAL),  # map_extra is for bloom filters only
])
def test_bloom_create_rejects_bad_attributes(maps, map_type, key_size, value_size, max_entries,
                                             flags, extra, want):
    assert maps.create_errno(map_type, key_size, value_size, max_entries, map_flags=flags,
                             map_extra=extra) == want


def test_bloom_push_and_peek(maps):
    sys = maps.sys
    fd = maps.create(MapType.BLOOM_FILTER, 0, 8, 1000, map_extra=3)
    sys.map_update_elem(fd, None, b"present!")
    assert sys.map_lookup_elem(fd, None, value=b"present!") == b"present!"
    assert err_of(sys.map_lookup_elem, fd, None, value=b"missing!") == errno.ENOENT
    assert err_of(sys.map_update_elem, fd, None, b"xxxxxxxx", BPF_NOEXIST) == errno.EINVAL
    assert err_of(sys.map_update_elem, fd, None, b"xxxxxxxx", BPF_EXIST) == errno.EINVAL


def test_bloom_delete_and_get_next_key_give_eopnotsupp_lookup_and_delete_enotsupp(maps):
    sys = maps.sys
    fd = maps.create(MapType.BLOOM_FILTER, 0, 4, 8)
    assert err_of(sys.map_delete_elem, fd, None) == errno.EOPNOTSUPP
    assert err_of(sys.map_get_next_key, fd, None) == errno.EOPNOTSUPP
    assert err_of(sys.map_lookup_and_delete_elem, fd, None) == ENOTSUPP
    assert err_of(sys.map_lookup_batch, fd, None, 4) == ENOTSUPP


def peek_program(sys, fd: int) -> Program:
    """Spills the context pointer into fp-8, peeks with fp-8 as the value, then reads the
    context through the pointer reloaded from fp-8: loads only where the peek left it there."""
    items = [b.stx(8, FP, -8, R1), b.ld_map_fd(R1, "m"), b.mov64(R2, FP), b.add64(R2, -8),
             b.call("map_peek_elem"), b.ldx(8, R1, FP, -8), b.ldx(4, R0, R1, 0),
             b.mov64(R0, 2), b.exit_()]
    return Program.load(ProgramSpec(ProgType.XDP, items), sys, maps={"m": fd})


def test_bloom_peek_from_a_program_reads_its_value(sys):
    """resolve_map_arg_type: bpf_map_peek_elem on a bloom filter reads the value it tests (a
    queue's peek writes the one it returns), so a pointer spilled there survives the call."""
    fd = sys.map_create(MapType.BLOOM_FILTER, 0, 8, 4)
    try:
        peek_program(sys, fd).close()
    finally:
        sys.close(fd)
    fd = sys.map_create(MapType.QUEUE, 0, 8, 4)
    try:
        with pytest.raises(VerifierError) as refused:
            peek_program(sys, fd)
        assert refused.value.errno == errno.EACCES
        assert "R1 invalid mem access 'scalar'" in str(refused.value)
    finally:
        sys.close(fd)


def test_bloom_peek_of_a_value_past_the_stack_is_an_invalid_read(sys):
    fd = sys.map_create(MapType.BLOOM_FILTER, 0, 12, 4)
    try:
        with pytest.raises(VerifierError) as refused:
            peek_program(sys, fd)
        assert refused.value.errno == errno.EINVAL
        assert "invalid read from stack R2 off=-8 size=12" in str(refused.value)
    finally:
        sys.close(fd)


@pytest.mark.parametrize("value_size, max_entries, nr_hashes", [(4, 3, 1), (8, 5, 2),
                                                                (5, 4, 1), (3, 40, 4)])
def test_bloom_zero_seed_false_positives_match_the_kernel(kmaps, emaps, value_size,
                                                          max_entries, nr_hashes):
    """With BPF_F_ZERO_SEED both set the same bits: the same values test positive."""
    rng = random.Random(value_size * 1000 + max_entries)
    pushed = [rng.randbytes(value_size) for _ in range(max_entries)]
    probes = [rng.randbytes(value_size) for _ in range(300)]
    answers = []
    for m in (kmaps, emaps):
        fd = m.create(MapType.BLOOM_FILTER, 0, value_size, max_entries,
                      map_flags=BPF_F_ZERO_SEED, map_extra=nr_hashes)
        for value in pushed:
            m.sys.map_update_elem(fd, None, value)
        hits = []
        for probe in probes:
            try:
                m.sys.map_lookup_elem(fd, None, value=probe)
                hits.append(True)
            except OSError as e:
                assert e.errno == errno.ENOENT
                hits.append(False)
        answers.append(hits)
    assert answers[1] == answers[0]
    assert any(answers[0]) and not all(answers[0])  # the probes exercise both outcomes
