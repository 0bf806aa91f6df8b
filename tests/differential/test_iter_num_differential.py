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

from helpers import ENGINES
from pybpf.emulated.prog.memory import BPF_MAX_LOOPS
from pybpf.errors import BPFError
from pybpf.programs import Program, ProgramSpec
from pybpf.uapi import MapType, ProgType

INT_MIN, INT_MAX = -(1 << 31), (1 << 31) - 1
FRAME = bytes(64)  # a socket filter's test run needs a frame; the programs do not read it


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


# -- an iterator loop writing a map, nested iterators ---------------------------------------------
# for i in [0, 5): for j in [i, 5): pairs[i << 8 | j] = i * j + 1 (bpf_map_update_elem with key
# and value on the stack); then count = the elements the inner loops visited, in an array map
NESTED_UPDATE = f"""
r6 = 0
{it_at(-16)}r2 = 0
r3 = 5
{NEW}outer:
{it_at(-16)}{NEXT}if r0 == 0 goto outer_done
r7 = *(u32 *)(r0 +0)
{it_at(-24)}r2 = r7
r3 = 5
{NEW}inner:
{it_at(-24)}{NEXT}if r0 == 0 goto inner_done
r8 = *(u32 *)(r0 +0)
r1 = r7
r1 <<= 8
r1 |= r8
*(u32 *)(r10 -4) = r1
r1 = r7
r1 *= r8
r1 += 1
*(u64 *)(r10 -32) = r1
r1 = map[pairs]
r2 = r10
r2 += -4
r3 = r10
r3 += -32
r4 = 0
call map_update_elem
r6 += 1
goto inner
inner_done:
{it_at(-24)}{DESTROY}goto outer
outer_done:
{it_at(-16)}{DESTROY}*(u32 *)(r10 -4) = 0
*(u64 *)(r10 -32) = r6
r1 = map[count]
r2 = r10
r2 += -4
r3 = r10
r3 += -32
r4 = 0
call map_update_elem
r0 = 0
exit
"""


def nested_update_result(system) -> tuple[dict[int, int], int]:
    pairs = system.map_create(MapType.HASH, 4, 8, 64)
    count = system.map_create(MapType.ARRAY, 4, 8, 1)
    try:
        with load(system, NESTED_UPDATE, pairs=pairs, count=count) as prog:
            assert prog.test_run(FRAME).retval == 0
        table, key = {}, None
        while True:
            try:
                key = system.map_get_next_key(pairs, key)
            except BPFError as exc:
                assert exc.errno == errno.ENOENT
                break
            table[struct.unpack("<I", key)[0]] = struct.unpack(
                "<Q", system.map_lookup_elem(pairs, key))[0]
        return table, struct.unpack("<Q", system.map_lookup_elem(count, bytes(4)))[0]
    finally:
        system.close(pairs)
        system.close(count)


@pytest.mark.parametrize("engine", ENGINES)
def test_nested_iterator_loops_write_the_kernels_map(kernel, emulated, engine):
    emulated.bpf_engine = engine
    on_kernel = nested_update_result(kernel)
    assert on_kernel == ({i << 8 | j: i * j + 1 for i in range(5) for j in range(i, 5)}, 15)
    assert nested_update_result(emulated) == on_kernel


# -- the verifier's rules -----------------------------------------------------------------------
INIT = f"{it_at()}r2 = 0\nr3 = 10\n{NEW}"
EXIT_0 = "r0 = 0\nexit\n"
NOT_INITIALIZED = "expected an initialized iter_num as arg #0"
LEAK = "Unreleased reference id=1 alloc_insn=4\nBPF_EXIT instruction in main prog would lead " \
       "to reference leak"
# (program, errno of the kernel's refusal or None, what its log says), as measured on 6.18
VERIFIER_CASES = {
    "create_and_destroy": (INIT + it_at() + DESTROY + EXIT_0, None, ""),
    "stack_reused_after_destroy": (INIT + it_at() + DESTROY + INIT + it_at() + DESTROY + EXIT_0,
                                   None, ""),
    "loop_until_drained": (INIT + f"l:\n{it_at()}{NEXT}if r0 == 0 goto d\ngoto l\nd:\n"
                           + it_at() + DESTROY + EXIT_0, None, ""),
    "missing_destroy": (INIT + EXIT_0, errno.EINVAL, LEAK),
    "missing_destroy_after_a_loop": (INIT + f"l:\n{it_at()}{NEXT}if r0 != 0 goto l\n" + EXIT_0,
                                     errno.EINVAL, LEAK),
    "next_after_destroy": (INIT + it_at() + DESTROY + it_at() + NEXT + EXIT_0, errno.EINVAL,
                           NOT_INITIALIZED),
    "destroy_twice": (INIT + it_at() + DESTROY + it_at() + DESTROY + EXIT_0, errno.EINVAL,
                      NOT_INITIALIZED),
    "destroy_without_new": (it_at() + DESTROY + EXIT_0, errno.EINVAL, NOT_INITIALIZED),
    "next_without_new": (it_at() + NEXT + EXIT_0, errno.EINVAL, NOT_INITIALIZED),
    "new_over_a_live_iterator": (INIT + INIT + it_at() + DESTROY + EXIT_0, errno.EINVAL,
                                 "expected uninitialized iter_num as arg #0"),
    "slot_read_as_data": (INIT + "r6 = *(u64 *)(r10 -16)\n" + it_at() + DESTROY + EXIT_0,
                          errno.EACCES, "invalid read from stack off -16+0 size 8"),
    "slot_half_read": (INIT + "r6 = *(u32 *)(r10 -12)\n" + it_at() + DESTROY + EXIT_0,
                       errno.EACCES, "invalid read from stack off -12+0 size 4"),
    "slot_overwritten_then_destroyed": (INIT + "*(u64 *)(r10 -16) = r0\n" + it_at() + DESTROY
                                        + EXIT_0, errno.EINVAL, NOT_INITIALIZED),
    "slot_half_overwritten_then_destroyed": (INIT + "*(u32 *)(r10 -12) = 0\n" + it_at()
                                             + DESTROY + EXIT_0, errno.EINVAL, NOT_INITIALIZED),
    "slot_overwritten_and_not_destroyed": (INIT + "*(u64 *)(r10 -16) = r0\n" + EXIT_0,
                                           errno.EINVAL, LEAK),
    "slot_overwritten_inside_the_loop": (INIT + f"l:\n{it_at()}{NEXT}if r0 == 0 goto d\n"
                                         "*(u64 *)(r10 -16) = 0\ngoto l\nd:\n" + it_at()
                                         + DESTROY + EXIT_0, errno.EINVAL, NOT_INITIALIZED),
    "null_iterator": ("r1 = 0\nr2 = 0\nr3 = 10\n" + NEW + EXIT_0, errno.EACCES,
                      "Possibly NULL pointer passed to trusted arg0"),
    "context_as_iterator": ("r2 = 0\nr3 = 10\n" + NEW + EXIT_0, errno.EINVAL,
                            "arg#0 expected pointer to an iterator on stack"),
    "misaligned_iterator": (f"{it_at(-12)}r2 = 0\nr3 = 10\n{NEW}{it_at(-12)}{DESTROY}" + EXIT_0,
                            errno.EINVAL, "cannot pass in iter at an offset=-12\nexpected "
                            "uninitialized iter_num as arg #0"),
    "iterator_at_a_variable_offset": ("r6 = *(u32 *)(r1 +0)\nr6 &= 8\nr1 = r10\nr1 += -16\n"
                                      f"r1 += r6\nr2 = 0\nr3 = 10\n{NEW}" + EXIT_0,
                                      errno.EINVAL, "iter has to be at a constant offset\n"
                                      "expected uninitialized iter_num as arg #0"),
    "iterator_below_the_stack": (f"{it_at(-520)}r2 = 0\nr3 = 10\n{NEW}" + EXIT_0, errno.EACCES,
                                 "invalid write to stack R1 off=-520 size=8"),
    "pointer_as_start": (f"{it_at()}r2 = r10\nr3 = 10\n{NEW}{it_at()}{DESTROY}" + EXIT_0,
                         errno.EINVAL, "R2 is not a scalar"),
    "r0_after_destroy": (INIT + it_at() + DESTROY + "exit\n", errno.EACCES, "R0 !read_ok"),
    "next_value_written": (INIT + it_at() + NEXT + "if r0 == 0 goto +1\n*(u32 *)(r0 +0) = 1\n"
                           + it_at() + DESTROY + EXIT_0, errno.EACCES,
                           "R0 cannot write into rdonly_mem"),
    "next_value_read_unchecked": (INIT + it_at() + NEXT + "r6 = *(u32 *)(r0 +0)\n" + it_at()
                                  + DESTROY + EXIT_0, errno.EACCES,
                                  "R0 invalid mem access 'scalar'"),
    "next_value_read_as_u64": (INIT + it_at() + NEXT + "if r0 == 0 goto +1\n"
                               "r6 = *(u64 *)(r0 +0)\n" + it_at() + DESTROY + EXIT_0,
                               errno.EACCES, "invalid access to memory, mem_size=4 off=0 size=8"),
    "next_value_read_past_its_int": (INIT + it_at() + NEXT + "if r0 == 0 goto +1\n"
                                     "r6 = *(u32 *)(r0 +4)\n" + it_at() + DESTROY + EXIT_0,
                                     errno.EACCES,
                                     "invalid access to memory, mem_size=4 off=4 size=4"),
    # next called for ever, after the iterator is drained: is_state_visited keeps a state at
    # the forced checkpoint of each next call (a DRAINED iterator's own earlier round is no
    # hit there, nor is the infinite-loop check made), and the counters it resets there
    # keep it from ever keeping one at the loop's head, where the repeat would be seen: the
    # walk goes on to the 1M insn limit (no reason: System.prog_load keeps no log for E2BIG)
    "next_called_forever": (INIT + f"l:\n{it_at()}{NEXT}goto l\n", errno.E2BIG, ""),
}


@pytest.mark.parametrize("name", sorted(VERIFIER_CASES))
def test_iterator_programs_get_the_kernels_verdict_and_reason(kernel, emulated, name):
    text, err, reason = VERIFIER_CASES[name]
    on_kernel, on_emulated = load_error(kernel, text), load_error(emulated, text)
    if err is None:
        assert on_kernel is None and on_emulated is None, (on_kernel, on_emulated)
        return
    assert on_kernel is not None and on_kernel[0] == err and reason in on_kernel[1], on_kernel
    assert on_emulated is not None and on_emulated[0] == err and reason in on_emulated[1], \
        on_emulated
