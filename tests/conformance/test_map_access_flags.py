"""A program's access to the values of a map made with BPF_F_RDONLY_PROG or
BPF_F_WRONLY_PROG, on the kernel and on each emulated engine: the verifier refuses a store, or a
helper's write, into a value the program may only read, and a helper's read of a value it may
only write (check_map_access_type, from check_mem_access and check_helper_mem_access), with
EACCES and the same message; what it may do runs the same."""

from __future__ import annotations

import errno

import pytest

from pybpf.asm import FP, R0, R1, R2, R3, R4, R6
from pybpf.asm import builder as b
from pybpf.errors import VerifierError
from pybpf.uapi import BPF_F_RDONLY_PROG, BPF_F_WRONLY_PROG, MapType

from .conftest import load_with_func_info as load

VALUE_SIZE = 48
ETH_FRAME = bytes.fromhex("ffffffffffff" "020000000001" "0800") + bytes(range(50))


def with_value(body: list) -> list:
    """main: R6 = ctx; R0 = the value at key 0 of map m (out, returning 0, if NULL); then
    ``body``, which returns."""
    return [b.mov64(R6, R1), b.st(4, FP, -4, 0), b.ld_map_fd(R1, "m"), b.mov64(R2, FP),
            b.add64(R2, -4), b.call("map_lookup_elem"), b.jne(R0, 0, "found"), b.exit_(),
            b.label("found"), *body]


def load_bytes(off: int, size: int = 8) -> list:
    """bpf_skb_load_bytes(skb, 0, value + off, size); returns 1."""
    return [b.mov64(R3, R0), b.add64(R3, off), b.mov64(R1, R6), b.mov64(R2, 0),
            b.mov64(R4, size), b.call("skb_load_bytes"), b.mov64(R0, 1), b.exit_()]


REFUSALS = [
    ("a store into a read-only value", BPF_F_RDONLY_PROG,
     [b.st(8, R0, 8, 1), b.mov64(R0, 1), b.exit_()],
     "write into map forbidden, value_size=48 off=8 size=8"),
    ("a helper writes a read-only value", BPF_F_RDONLY_PROG, load_bytes(0),
     "write into map forbidden, value_size=48 off=0 size=8"),
    ("a helper writes a read-only value at an offset", BPF_F_RDONLY_PROG, load_bytes(16, 4),
     "write into map forbidden, value_size=48 off=16 size=4"),
    ("a load from a write-only value", BPF_F_WRONLY_PROG,
     [b.ldx(8, R0, R0, 8), b.exit_()], "read from map forbidden, value_size=48 off=8 size=8"),
    ("a helper reads a write-only value", BPF_F_WRONLY_PROG,
     [b.mov64(R1, R0), b.add64(R1, 8), b.mov64(R2, 8), b.call("trace_printk"), b.exit_()],
     "read from map forbidden, value_size=48 off=8 size=8"),
]


@pytest.mark.parametrize("label,map_flags,body,message", REFUSALS,
                         ids=[case[0] for case in REFUSALS])
def test_program_access_against_the_maps_flags_is_refused(sys, label, map_flags, body,
                                                          message):
    fd = sys.map_create(MapType.ARRAY, 4, VALUE_SIZE, 1, map_flags=map_flags)
    try:
        with pytest.raises(VerifierError) as info:
            load(sys, with_value(body), callbacks={}, maps={"m": fd})
        assert (info.value.errno, message in info.value.log) == (errno.EACCES, True), \
            (label, info.value.log)
    finally:
        sys.close(fd)


@pytest.mark.parametrize("map_flags,body,expected,value", [
    # a read-only value is read, by the program and by a helper (its first 4 bytes, 0, the
    # key of a lookup)
    (BPF_F_RDONLY_PROG, [b.ldx(8, R0, R0, 8), b.exit_()], 7, None),
    (BPF_F_RDONLY_PROG, [b.mov64(R2, R0), b.ld_map_fd(R1, "m"), b.call("map_lookup_elem"),
                         b.jne(R0, 0, "hit"), b.exit_(), b.label("hit"), b.ldx(8, R0, R0, 8),
                         b.exit_()], 7, None),
    # a write-only value is written, by the program and by a helper
    (BPF_F_WRONLY_PROG, [b.st(8, R0, 8, 3), b.mov64(R0, 1), b.exit_()], 1,
     bytes(8) + (3).to_bytes(8, "little") + bytes(32)),
    (BPF_F_WRONLY_PROG, load_bytes(8), 1, bytes(8) + ETH_FRAME[:8] + bytes(32)),
    (0, load_bytes(40), 1, bytes(8) + (7).to_bytes(8, "little") + bytes(24) + ETH_FRAME[:8]),
])
def test_program_access_the_maps_flags_allow(sys, map_flags, body, expected, value):
    fd = sys.map_create(MapType.ARRAY, 4, VALUE_SIZE, 1, map_flags=map_flags)
    prog = None
    try:
        sys.map_update_elem(fd, bytes(4), bytes(8) + (7).to_bytes(8, "little") + bytes(32))
        prog = load(sys, with_value(body), callbacks={}, maps={"m": fd})
        assert sys.prog_test_run(prog, ETH_FRAME).retval == expected
        if value is not None:
            assert sys.map_lookup_elem(fd, bytes(4)) == value
    finally:
        if prog is not None:
            sys.close(prog)
        sys.close(fd)
