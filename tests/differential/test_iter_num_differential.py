"""The open-coded numeric iterator (bpf_iter_num_new / _next / _destroy, what libbpf's
``bpf_for`` and ``bpf_repeat`` expand to) on the emulated backend against the kernel (6.18):

- what a loop over [start, end) sees, for any ints: new's error (-EINVAL for start > end,
  -E2BIG past BPF_MAX_LOOPS), the values next gives, in order, and none once it is done;
  on every emulated engine;
- an iterator loop writing a map, and nested iterators, leave the same map;
- the verifier's rules for iterators on the stack: the same programs loaded or refused
  with the same errno and the same reason (a missing destroy, a use after destroy, new over
  a live iterator, its slot read or overwritten as data, next's int * used as it may not).
"""

from __future__ import annotations

import errno
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pybpf.emulated.prog.memory import BPF_MAX_LOOPS
from pybpf.emulated.prog.native import native_missing
from pybpf.errors import BPFError
from pybpf.programs import Program, ProgramSpec
from pybpf.uapi import MapType, ProgType

INT_MIN, INT_MAX = -(1 << 31), (1 << 31) - 1
FRAME = bytes(64)  # a socket filter's test run needs a frame; the programs do not read it
ENGINES = ["jit", "interp", pytest.param("native", marks=pytest.mark.skipif(
    native_missing() is not None, reason=str(native_missing())))]


def it_at(off: int = -16) -> str:
    """R1 = the iterator's address on the stack."""
    return f"r1 = r10\nr1 += {off}\n"


NEW = "call kernel-function bpf_iter_num_new\n"
NEXT = "call kernel-function bpf_iter_num_next\n"
DESTROY = "call kernel-function bpf_iter_num_destroy\n"


def load(system, text: str, **maps) -> Program:
    return Program.load(ProgramSpec(ProgType.SOCKET_FILTER, text, maps=maps), system)


def load_error(system, text: str) -> tuple[int, str] | None:
    """(errno, log) of the refused load, None when it loads."""
    try:
        load(system, text).close()
    except BPFError as exc:
        return exc.errno, getattr(exc, "log", "") or str(exc)
    return None


# -- what a loop sees ----------------------------------------------------------------------------
# The range's ends come from the map (value: start, end as s32), and the loop leaves there
# new's return, the values it saw, their sum and the last one (u64 each, from offset 8).
RANGE_LOOP = f"""
*(u32 *)(r10 -4) = 0
r2 = r10
r2 += -4
r1 = map[range]
call map_lookup_elem
if r0 == 0 goto out
r9 = r0
{it_at()}r2 = *(u32 *)(r9 +0)
r3 = *(u32 *)(r9 +4)
{NEW}*(u64 *)(r9 +8) = r0
r7 = 0
r8 = 0
loop:
{it_at()}{NEXT}if r0 == 0 goto done
r1 = *(u32 *)(r0 +0)
r1 <<= 32
r1 s>>= 32
r8 += r1
r7 += 1
*(u64 *)(r9 +32) = r1
goto loop
done:
*(u64 *)(r9 +16) = r7
*(u64 *)(r9 +24) = r8
{it_at()}{DESTROY}out:
r0 = 0
exit
"""
RANGE_VALUE = struct.Struct("<iiQQqq")  # start, end | err, count, sum, last


class RangeLoop:
    """RANGE_LOOP loaded on a system: ``run(start, end)`` -> (err, count, sum, last)."""

    def __init__(self, system) -> None:
        self.system = system
        self.map_fd = system.map_create(MapType.ARRAY, 4, RANGE_VALUE.size, 1)
        self.prog = load(system, RANGE_LOOP, range=self.map_fd)

    def run(self, start: int, end: int) -> tuple[int, int, int, int]:
        key = struct.pack("<I", 0)
        self.system.map_update_elem(self.map_fd, key, RANGE_VALUE.pack(start, end, 0, 0, 0, -1))
        assert self.prog.test_run(FRAME).retval == 0
        return RANGE_VALUE.unpack(self.system.map_lookup_elem(self.map_fd, key))[2:]

    def close(self) -> None:
        self.prog.close()
        self.system.close(self.map_fd)


@pytest.fixture
def range_loops(kernel, emulated, request):
    loops = [RangeLoop(kernel), RangeLoop(emulated)]
    yield loops
    for loop in loops:
        loop.close()


def expected_loop(start: int, end: int) -> tuple[int, int, int, int]:
    """What bpf_iter_num_new/next give for [start, end): kernel/bpf/bpf_iter.c's rules (new's
    error an int: R0 holds it zero-extended)."""
    if start > end:
        return -errno.EINVAL & 0xFFFFFFFF, 0, 0, -1
    if end - start > BPF_MAX_LOOPS:
        return -errno.E2BIG & 0xFFFFFFFF, 0, 0, -1
    return 0, end - start, sum(range(start, end)), end - 1 if end > start else -1


# the ends of the int range, empty ranges, start > end, and ranges past BPF_MAX_LOOPS
EDGES = [(0, 0), (7, 7), (0, 1), (5, 2), (-3, 3), (INT_MAX - 2, INT_MAX), (INT_MIN, INT_MIN + 3),
         (INT_MAX, INT_MIN), (INT_MIN, INT_MAX), (0, BPF_MAX_LOOPS + 1), (-1, BPF_MAX_LOOPS)]


@pytest.mark.parametrize("engine", ENGINES)
def test_a_loop_sees_the_kernels_values_at_the_edges(range_loops, engine):
    kernel_loop, emulated_loop = range_loops
    emulated_loop.system.bpf_engine = engine
    for start, end in EDGES:
        on_kernel = kernel_loop.run(start, end)
        assert on_kernel == expected_loop(start, end), (start, end)
        assert emulated_loop.run(start, end) == on_kernel, (start, end)


@settings(max_examples=200, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(start=st.integers(INT_MIN, INT_MAX), length=st.integers(-40, 40))
def test_any_range_gives_what_the_kernel_gives(range_loops, start, length, differential_tally):
    end = min(max(start + length, INT_MIN), INT_MAX)
    kernel_loop, emulated_loop = range_loops
    on_kernel, on_emulated = kernel_loop.run(start, end), emulated_loop.run(start, end)
    differential_tally.add("kernel", "emulated", "bpf_iter_num: ranges", 1, 1,
                           int(on_kernel != on_emulated))
    assert on_emulated == on_kernel == expected_loop(start, end)
