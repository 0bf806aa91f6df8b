"""The emulated verifier's memory-access checks against the kernel's (6.18): load-acquire and
store-release (check_atomic_load, check_atomic_store) and variable-offset stack accesses
(check_stack_access_within_bounds, check_stack_read_var_off, check_stack_write_var_off), and
a ring buffer record released where it was moved (check_func_arg_reg_off), and the stack a
helper writes (what is data after it) get the same verdict, accepted or refused with the same
errno."""

from __future__ import annotations

import pytest

from helpers import verdict
from pybpf.asm import assemble_text
from pybpf.uapi import MapType, ProgType


def text_verdict(system, prog_type: int, text: str, map_fd: int | None = None) -> str:
    """The verdict on ``text`` (``{fd}`` in it: ``map_fd``)."""
    return verdict(system, prog_type, b"".join(
        insn.encode() for insn in assemble_text(text.format(fd=map_fd)).instructions))


def assert_same_verdict(kernel, emulated, prog_type: int, text: str, expected: str,
                        differential_tally, family: str, map_args: tuple | None = None) -> None:
    verdicts = []
    for system in (kernel, emulated):
        map_fd = system.map_create(*map_args) if map_args else None
        try:
            verdicts.append(text_verdict(system, prog_type, text, map_fd))
        finally:
            if map_fd is not None:
                system.close(map_fd)
    differential_tally.add("kernel", "emulated", f"verifier: {family}", 1, 1,
                           int(verdicts[0] != verdicts[1]))
    assert verdicts == [expected, expected]


# -- load-acquire, store-release ----------------------------------------------------------------
@pytest.mark.parametrize("text,expected", [
    # check_atomic_load: the source's type first, so dst == src cannot hide the context
    ("r1 = load_acquire((u32 *)(r1 +0))\nr0 = r1\nexit", "EACCES"),
    ("r2 = load_acquire((u32 *)(r1 +0))\nr0 = r2\nexit", "EACCES"),
    ("r2 = load_acquire((u32 *)(r1 +3))\nr0 = r2\nexit", "EACCES"),  # not a ctx field either
    ("r1 += 4\nr2 = load_acquire((u32 *)(r1 +0))\nr0 = r2\nexit", "EACCES"),  # modified ctx
    ("r1 = load_acquire((u32 *)(r5 +0))\nr0 = 0\nexit", "EACCES"),  # R5 !read_ok
    # check_atomic_store: the store (strictly aligned) first, then the type
    ("r2 = 0\nstore_release((u32 *)(r1 +3), r2)\nr0 = 0\nexit", "EACCES"),
    ("r2 = 0\nstore_release((u32 *)(r1 +0), r2)\nr0 = 0\nexit", "EACCES"),
    ("r2 = 0\nstore_release((u64 *)(r10 -8), r2)\nr0 = *(u64 *)(r10 -8)\nexit", "ok"),
])
@pytest.mark.parametrize("prog_type", [ProgType.SOCKET_FILTER, ProgType.SCHED_CLS,
                                       ProgType.KPROBE])
def test_an_atomic_load_or_store_checks_the_pointer_type_where_the_kernel_does(
        kernel, emulated, prog_type, text, expected, differential_tally):
    assert_same_verdict(kernel, emulated, prog_type, text, expected, differential_tally,
                        "atomic load/store")


_MAP_VALUE = ("*(u32 *)(r10 -4) = 0\nr2 = r10\nr2 += -4\nr1 = map[fd:{fd}]\ncall 1\n"
              "if r0 == 0 goto out\nr1 = 1\n")


@pytest.mark.parametrize("access,expected", [
    ("r1 = load_acquire((u64 *)(r0 +4))", "EACCES"),
    ("r1 = load_acquire((u32 *)(r0 +1))", "EACCES"),
    ("r1 = load_acquire((u16 *)(r0 +1))", "EACCES"),
    ("r1 = load_acquire((u8 *)(r0 +1))", "ok"),
    ("r1 = load_acquire((u32 *)(r0 +4))", "ok"),
    ("store_release((u32 *)(r0 +2), r1)", "EACCES"),
    ("store_release((u64 *)(r0 +8), r1)", "ok"),
    ("lock *(u64 *)(r0 +4) += r1", "EACCES"),
    # a variable offset whose known low bits make it misaligned
    ("r2 = *(u32 *)(r0 +0)\nr2 &= 4\nr0 += r2\nr1 = load_acquire((u64 *)(r0 +0))", "EACCES"),
    ("r2 = *(u32 *)(r0 +0)\nr2 &= 8\nr0 += r2\nr1 = load_acquire((u64 *)(r0 +0))", "ok"),
])
def test_an_atomic_load_or_store_is_strictly_aligned(kernel, emulated, access, expected,
                                                     differential_tally):
    """check_atomic_load / check_atomic_store pass strict_alignment_once: a misaligned map
    value access is refused even where unaligned accesses are efficient."""
    assert_same_verdict(kernel, emulated, ProgType.XDP,
                        f"{_MAP_VALUE}{access}\nout:\nr0 = 0\nexit", expected,
                        differential_tally, "atomic alignment", (MapType.ARRAY, 4, 32, 1))


# -- variable-offset stack accesses -------------------------------------------------------------
# r2: a random number masked to known bits (so both verifiers have the same bounds), added to
# the frame pointer in r1
_VAR = "call 7\nr2 = r0\nr2 &= {mask}\nr1 = r10\nr1 += r2\n"
_ZEROED = "*(u64 *)(r10 -8) = 0\n*(u64 *)(r10 -16) = 0\n"


@pytest.mark.parametrize("head,access,expected", [
    # check_stack_access_within_bounds: every offset past the top, or below the stack
    ("", "r0 = *(u8 *)(r1 +0)", "EACCES"),
    ("", "r0 = *(u64 *)(r1 -528)", "EACCES"),
    ("", "*(u64 *)(r1 -528) = 0", "EACCES"),
    ("", "r0 = *(u64 *)(r1 -16)", "ok"),
    ("", "r0 = *(u64 *)(r1 -512)", "ok"),
    ("", "*(u64 *)(r1 -16) = 0", "ok"),
    # check_ptr_alignment: the stack is strict, the known bits decide
    ("", "r0 = *(u16 *)(r1 -8)", "EACCES"),
    # an atomic read with no register to fill may not have a variable offset
    (_ZEROED, "r3 = 1\nlock *(u64 *)(r1 -16) += r3", "EACCES"),
    (_ZEROED, "r3 = 1\nr3 = atomic64_fetch_add((u64 *)(r1 -16), r3)", "EACCES"),
    # check_stack_read_var_off: a spilled 0 there reads as unknown (the other side of the
    # branch reads r9, never set)
    (_ZEROED, "r0 = *(u64 *)(r1 -16)\nif r0 == 0 goto +1\nr0 = r9", "EACCES"),
    ("*(u64 *)(r10 -8) = r1\n*(u64 *)(r10 -16) = 0\n",
     "r0 = *(u64 *)(r1 -16)\nif r0 == 0 goto +1\nr0 = r9", "EACCES"),
    # check_stack_write_var_off: a spilled pointer it may reach is data afterwards
    ("*(u64 *)(r10 -8) = r1\n*(u64 *)(r10 -16) = 0\n",
     "r3 = 0x1234\n*(u64 *)(r1 -16) = r3\nr3 = *(u64 *)(r10 -8)\nr0 = *(u32 *)(r3 +0)",
     "EACCES"),
    ("*(u64 *)(r10 -24) = r1\n",
     "r3 = 0x1234\n*(u64 *)(r1 -16) = r3\nr3 = *(u64 *)(r10 -24)\nr0 = *(u32 *)(r3 +0)", "ok"),
    # ... and a zero written over zeros or a spilled 0 leaves them 0
    (_ZEROED, "r3 = 0\n*(u64 *)(r1 -16) = r3\nr0 = *(u64 *)(r10 -8)\nif r0 == 0 goto +1\n"
     "r0 = r9", "ok"),
])
def test_a_variable_offset_stack_access_gets_the_kernels_verdict(kernel, emulated, head, access,
                                                                 expected, differential_tally):
    mask = 7 if "u8" in access.split("\n")[0] or "u16" in access else 8
    text = f"{head}{_VAR.format(mask=mask)}{access}\nr0 = 0\nexit"
    assert_same_verdict(kernel, emulated, ProgType.SOCKET_FILTER, text, expected,
                        differential_tally, "variable-offset stack")


@pytest.mark.parametrize("head,then,expected", [
    ("", "", "ok"),
    ("*(u64 *)(r10 -16) = r1\n", "", "ok"),
    # the helper reads memory: a spilled pointer there stays one
    ("*(u64 *)(r10 -16) = r6\n", "r3 = *(u64 *)(r10 -16)\nr0 = *(u32 *)(r3 +0)\n", "ok"),
])
def test_a_helper_reads_stack_memory_at_a_variable_offset(kernel, emulated, head, then,
                                                          expected, differential_tally):
    """check_helper_mem_access -> check_stack_range_initialized with a variable offset."""
    text = (f"r6 = r1\n{head}{_VAR.format(mask=8)}r2 = r1\nr2 += -16\nr1 = map[fd:{{fd}}]\n"
            f"r3 = 8\nr4 = 0\ncall 130\n{then}r0 = 0\nexit")
    assert_same_verdict(kernel, emulated, ProgType.SOCKET_FILTER, text, expected,
                        differential_tally, "variable-offset stack", (MapType.RINGBUF, 0, 0, 4096))


# -- a reserved ring buffer record, released ------------------------------------------------------
@pytest.mark.parametrize("moved,expected", [
    ("", "ok"),
    ("r6 += 4\n", "EINVAL"),  # must have zero offset when passed to release func
    ("r6 += -4\n", "EINVAL"),
    ("r6 += 4\nr6 += -4\n", "ok"),
    ("call 7\nr0 &= 7\nr6 += r0\n", "EACCES"),  # variable ringbuf_mem access ... disallowed
    ("call 7\nr0 &= 7\nr6 += r0\nr6 += 4\n", "EINVAL"),
    ("call 7\nr0 &= 0\nr6 += r0\n", "ok"),
])
def test_a_released_record_is_the_pointer_reserve_gave(kernel, emulated, moved, expected,
                                                       differential_tally):
    """check_func_arg_reg_off for a release argument: a fixed offset is EINVAL, a variable
    one EACCES (__check_ptr_off_reg), in that order."""
    text = ("r1 = map[fd:{fd}]\nr2 = 8\nr3 = 0\ncall 131\nif r0 != 0 goto +2\nr0 = 0\nexit\n"
            f"r6 = r0\n{moved}r1 = r6\nr2 = 0\ncall 132\nr0 = 0\nexit")
    assert_same_verdict(kernel, emulated, ProgType.SOCKET_FILTER, text, expected,
                        differential_tally, "ring buffer release", (MapType.RINGBUF, 0, 0, 4096))


# -- stack memory a helper writes ----------------------------------------------------------------
_KEY_AFTER = ("r2 = r10\nr2 += -4\nr1 = map[fd:{fd}]\ncall 1\nr0 = *(u32 *)(r0 +0)\n"
              "r0 = 0\nexit")


@pytest.mark.parametrize("write,expected", [
    # a size the helper may write: its bytes up to the size's umax become data, no further
    # (the array key at fp-4 stays a known 0, so the lookup's value is not NULL)
    ("r1 = r10\nr1 += -64\nr2 &= 15", "ok"),
    ("r1 = r10\nr1 += -64\nr2 = 8", "ok"),
    ("r1 = r10\nr1 += -16\nr2 &= 15", "EACCES"),  # reaches the key: NULL not ruled out
    ("r1 = r10\nr1 += -16\nr2 &= 7", "ok"),
    ("r1 = r10\nr1 += -16\nr2 &= 7\nr2 += 5", "EACCES"),
    ("r1 = r10\nr1 += -16\nr2 = 12", "EACCES"),
    # a variable offset: from its least to its greatest plus the size
    ("r2 &= 8\nr1 = r10\nr1 += -24\nr1 += r2\nr2 = 8", "ok"),
    ("r2 &= 8\nr1 = r10\nr1 += -16\nr1 += r2\nr2 = 4", "EACCES"),
    ("r2 &= 4\nr1 = r10\nr1 += -16\nr1 += r2\nr2 = 7", "EACCES"),  # the key's slot: all data
    ("r2 &= 4\nr1 = r10\nr1 += -24\nr1 += r2\nr2 = 4", "ok"),
])
@pytest.mark.parametrize("func", [113, 115])  # probe_read_kernel, _str
def test_a_helper_writes_the_stack_up_to_its_sizes_umax(kernel, emulated, write, expected,
                                                        func, differential_tally):
    """check_stack_range_initialized for a helper's buffer on the stack (a raw-mode write
    byte by byte for a constant size and offset, the range of both otherwise): what it
    may write is data afterwards, a spilled 0 there no longer a known 0; beyond it the
    stack is as it was."""
    text = (f"*(u64 *)(r10 -8) = 0\n*(u64 *)(r10 -16) = 0\n*(u64 *)(r10 -24) = 0\n"
            f"call 7\nr2 = r0\n{write}\nr3 = 0\ncall {func}\n{_KEY_AFTER}")
    assert_same_verdict(kernel, emulated, ProgType.TRACEPOINT, text, expected,
                        differential_tally, "helper stack writes", (MapType.ARRAY, 4, 8, 1))
