"""The emulated verifier's value ranges against the kernel's (6.18): the same program gets the
same verdict, and where it is refused for a range, the same reason.

- A map value indexed by a scalar the program bounds (or does not): check_mem_region_access's
  smin and umax, check_reg_sane_offset's pointer arithmetic.
- A branch the ranges prove dead is not walked (its uninitialised read never refused).
- 32-bit bounds: jmp32 refinement and alu32 zero-extension.
- A helper's size argument bounded by a range (check_mem_size_reg).
- A return value bounded by a range (CGROUP_SKB's [0, 1], [0, 3] on egress).
- A helper's result as the kernel bounds it (do_refine_retval_range): the CPU id below the
  machine's CPUs, a string read's length at most its size.
- Random ALU and branch sequences, then a map value access indexed by their result
  (hypothesis, fixed seeds).
"""

from __future__ import annotations

import errno
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conformance.conftest import load_with_func_info
from pybpf.asm import FP, R0, R1, R2, R3, R4, assemble_text
from pybpf.asm import builder as b
from pybpf.errors import BPFError
from pybpf.uapi import AttachType, MapType, ProgType

_SETTINGS = dict(deadline=None, derandomize=True, suppress_health_check=[
    HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large])

VALUE_SIZE = 64
# The lines of a refusal that say why a range did not do (ids and offsets of other messages
# are left to the errno)
_RANGE_REFUSALS = re.compile(
    r"R\d+ min value is negative.*|R\d+ (min|max) value is outside of the allowed memory range"
    r"|R\d+ unbounded memory access.*|invalid access to map value.*"
    r"|math between .* is not allowed|value -?\d+ makes .* pointer be out of bounds"
    r"|\w+ pointer offset -?\d+ is not allowed"
    r"|R\d+ invalid zero-sized read.*|At (program exit|callback return) the register R0 .*"
    r"|invalid (unbounded )?variable-offset.*|R\d+ !read_ok")


def asm(text: str) -> bytes:
    return b"".join(insn.encode() for insn in assemble_text(text).instructions)


def range_verdict(system, prog_type: int, text: str, **kwargs) -> tuple[str, ...]:
    """The errno's name and the lines saying why the load failed, or ("ok",)."""
    try:
        system.close(system.prog_load(prog_type, asm(text), **kwargs))
    except BPFError as exc:
        reasons = [m.group(0) for m in _RANGE_REFUSALS.finditer(exc.log or "")]
        return (errno.errorcode.get(exc.errno, str(exc.errno)), *reasons)
    return ("ok",)


@pytest.fixture
def value_maps(kernel, emulated):
    """An ARRAY of one VALUE_SIZE-byte value on each backend: system -> fd."""
    fds = {system: system.map_create(MapType.ARRAY, 4, VALUE_SIZE, 1)
           for system in (kernel, emulated)}
    yield fds
    for system, fd in fds.items():
        system.close(fd)


def jumps_out(lines: str, after: int) -> str:
    """``lines`` with each ``goto +{out}`` aimed past the rest of them and ``after``
    instructions more."""
    split = lines.split("\n")
    return "\n".join(line.replace("{out}", str(len(split) - 1 - i + after))
                     for i, line in enumerate(split))


# r6 = the map value (NULL checked), r2 = its first 8 bytes, r3 = the next 4: unknown values
_LOOKUP = ("*(u32 *)(r10 -4) = 0\nr2 = r10\nr2 += -4\nr1 = map[fd:{fd}]\ncall 1\n"
           "if r0 != 0 goto +2\nr0 = 0\nexit\nr6 = r0\nr2 = *(u64 *)(r6 +0)\n"
           "r3 = *(u32 *)(r6 +8)\n")


def verdicts_on_value(kernel, emulated, value_maps, body: str,
                      prog_type: int = ProgType.SOCKET_FILTER, **kwargs) -> list[tuple]:
    text = _LOOKUP + body
    return [range_verdict(system, prog_type, text.format(fd=value_maps[system]), **kwargs)
            for system in (kernel, emulated)]


# -- a map value indexed by a variable -------------------------------------------------------------
@pytest.mark.parametrize("index,access,expected", [
    ("r2 &= 63", "r0 = *(u8 *)(r6 +0)", "ok"),
    ("r2 &= 63", "r0 = *(u64 *)(r6 +0)", "EACCES"),  # max 63 + 8 bytes: past the value
    ("r2 &= 63", "r0 = *(u8 *)(r6 +1)", "EACCES"),
    ("r2 &= 0x38", "r0 = *(u64 *)(r6 +0)", "ok"),
    ("if r2 > 56 goto +{out}", "r0 = *(u64 *)(r6 +0)", "ok"),
    ("if r2 >= 57 goto +{out}", "r0 = *(u64 *)(r6 +0)", "ok"),
    ("if r2 > 57 goto +{out}", "r0 = *(u64 *)(r6 +0)", "EACCES"),
    ("if r2 s> 56 goto +{out}", "r0 = *(u64 *)(r6 +0)", "EINVAL"),  # smin unbounded
    ("if r2 s> 56 goto +{out}\nif r2 s< 0 goto +{out}", "r0 = *(u64 *)(r6 +0)", "ok"),
    # smin -8 + 8 is in, but [-8, 56] as unsigned is unbounded
    ("if r2 s> 56 goto +{out}\nif r2 s< -8 goto +{out}", "r0 = *(u64 *)(r6 +8)", "EACCES"),
    ("if r2 s> 56 goto +{out}\nif r2 s< -8 goto +{out}", "r0 = *(u64 *)(r6 +0)", "EACCES"),
    ("if r2 s> 56 goto +{out}\nif r2 s< -9 goto +{out}", "r0 = *(u64 *)(r6 +8)", "EACCES"),
    ("r2 = r3", "r0 = *(u8 *)(r6 +0)", "EACCES"),  # a u32: unbounded memory access
    ("r2 = r3\nr2 >>= 26", "r0 = *(u8 *)(r6 +0)", "ok"),  # [0, 63]
    ("r2 = r3\nr2 >>= 25", "r0 = *(u8 *)(r6 +0)", "EACCES"),
    ("r2 >>= 1", "r0 = *(u8 *)(r6 +0)", "EACCES"),  # smin 0, umax 2^63 - 1
    ("", "r0 = *(u8 *)(r6 +0)", "EINVAL"),  # unbounded min value
    ("r2 &= 7\nr2 *= 8", "r0 = *(u64 *)(r6 +0)", "ok"),
    ("r2 &= 7\nr2 <<= 3", "r0 = *(u64 *)(r6 +0)", "ok"),
    ("r2 &= 7\nr2 <<= 4", "r0 = *(u64 *)(r6 +0)", "EACCES"),
    ("r2 &= 15\nr2 -= 8", "r0 = *(u8 *)(r6 +8)", "EACCES"),  # umin wraps: unbounded
    ("r2 &= 15\nr2 -= 8", "r0 = *(u8 *)(r6 +7)", "EACCES"),
    ("r2 &= 15\nr2 -= 8\nif r2 s< 0 goto +{out}", "r0 = *(u8 *)(r6 +0)", "ok"),
    ("r2 |= 1\nr2 &= 31", "r0 = *(u32 *)(r6 +28)", "ok"),
    ("r2 |= 1\nr2 &= 31", "r0 = *(u32 *)(r6 +32)", "EACCES"),
    ("r2 &= 31\nr2 ^= 32", "r0 = *(u64 *)(r6 +0)", "EACCES"),
    ("r2 &= 255\nr2 s>>= 2", "r0 = *(u8 *)(r6 +0)", "ok"),
    ("r2 = -r2\nr2 &= 31", "r0 = *(u8 *)(r6 +0)", "ok"),
    ("if r2 == 3 goto +1\ngoto +{out}", "r0 = *(u8 *)(r6 +0)", "ok"),
    ("if r2 != 0 goto +{out}", "r0 = *(u64 *)(r6 +56)", "ok"),
    ("r4 = r2\nr4 &= 31\nr2 &= 31\nr2 += r4", "r0 = *(u8 *)(r6 +0)", "ok"),
    ("r4 = r2\nr4 &= 31\nr2 &= 31\nr2 += r4", "r0 = *(u8 *)(r6 +2)", "EACCES"),
    ("r2 = (s8)r3\nif r2 s< 0 goto +{out}", "r0 = *(u8 *)(r6 +0)", "EACCES"),  # [0, 127]
    ("r2 = (s8)r3\nr2 &= 63", "r0 = *(u8 *)(r6 +0)", "ok"),
])
def test_a_map_value_indexed_by_a_variable_gets_the_kernels_verdict(
        kernel, emulated, value_maps, index, access, expected):
    body = f"{jumps_out(index, 2)}\nr6 += r2\n{access}\nr0 = 0\nexit"
    verdicts = verdicts_on_value(kernel, emulated, value_maps, body)
    assert verdicts[1] == verdicts[0]
    assert verdicts[0][0] == expected


def test_an_unbounded_index_is_refused_with_the_kernels_message(kernel, emulated, value_maps):
    body = "r2 = r3\nr6 += r2\nr0 = *(u8 *)(r6 +0)\nr0 = 0\nexit"
    verdicts = verdicts_on_value(kernel, emulated, value_maps, body)
    assert verdicts[0] == verdicts[1] == (
        "EACCES", "R6 unbounded memory access, make sure to bounds check any such access")


def test_a_negative_min_is_refused_with_the_kernels_message(kernel, emulated, value_maps):
    body = ("if r2 s> 8 goto +3\nif r2 s< -8 goto +2\nr6 += r2\nr0 = *(u8 *)(r6 +0)\n"
            "r0 = 0\nexit")
    verdicts = verdicts_on_value(kernel, emulated, value_maps, body)
    assert verdicts[0] == verdicts[1] == (
        "EACCES", "R6 min value is negative, either use unsigned index or do a if (index >=0) "
        "check.")


def test_a_max_past_the_value_is_refused_with_the_kernels_message(kernel, emulated,
                                                                  value_maps):
    body = "r2 &= 127\nr6 += r2\nr0 = *(u8 *)(r6 +0)\nr0 = 0\nexit"
    verdicts = verdicts_on_value(kernel, emulated, value_maps, body)
    assert verdicts[0] == verdicts[1] == (
        "EACCES", "invalid access to map value, value_size=64 off=127 size=1",
        "R6 max value is outside of the allowed memory range")


@pytest.mark.parametrize("arith", [
    "w2 &= 0x7fffffff\nr6 -= r2",  # the result's smin: map_value pointer offset ... is not allowed
    "w2 &= 0x3fffffff\nr6 -= r2",
    "w2 &= 0x1fffffff\nr6 -= r2",
    "w2 |= 1\nr6 -= r2",
    "w2 &= 0x7fffffff\nr6 += 8\nr6 -= r2",
    "w2 &= 0x7fffffff\nr2 = -r2\nr6 += r2",  # the scalar's smin: value ... makes ...
    "w2 &= 0x7fffffff\nr6 += r2",
    "r2 &= 1\nr2 += 0x10000000\nr6 += r2\nr6 += r2",  # the pointer's, then the result's
    "r3 &= 1\nr6 -= r3\nr2 >>= 1\nr6 -= r2",  # a least offset of S64_MIN
    "r3 &= 1\nr6 -= r3\nr2 >>= 1\nr2 += 2\nr6 -= r2",  # the scalar's smin unbounded
    "r6 += 0x1ffffff0\nr6 += 0x10",  # the fixed offset
    "r6 += 0x1ffffff0\nr2 &= 0x1f\nr6 += r2",
    "r2 &= 0x1f\nr2 += 0x1ffffff0\nr6 -= r2\nr6 += 1",
])
def test_pointer_arithmetic_out_of_bounds_is_refused_with_the_kernels_message(
        kernel, emulated, value_maps, arith):
    """6.18's check_reg_sane_offset_scalar and check_reg_sane_offset_ptr: a scalar added to a
    pointer is refused for its value, a pointer (before the ALU, and its result) for its
    offsets, each with its own message."""
    body = f"{arith}\nr0 = 0\nexit"
    verdicts = verdicts_on_value(kernel, emulated, value_maps, body)
    assert verdicts[1] == verdicts[0]


# -- a branch the ranges prove dead ----------------------------------------------------------------
@pytest.mark.parametrize("text", [
    "call 5\nr2 = r0\nr2 &= 0xff\nr2 += 1\nif r2 > 300 goto +2\nr0 = 0\nexit\nr0 = r3\nexit",
    "call 5\nr2 = r0\nr2 &= 0xff\nr2 += 1\nif r2 > 256 goto +2\nr0 = 0\nexit\nr0 = r3\nexit",
    "call 5\nr2 = r0\nr2 &= 0xff\nr2 += 1\nif r2 > 255 goto +2\nr0 = 0\nexit\nr0 = r3\nexit",
    "call 5\nr2 = r0\nr2 &= 0xff\nr2 += 1\nif r2 == 0 goto +2\nr0 = 0\nexit\nr0 = r3\nexit",
    "call 5\nr2 = r0\nr2 &= 0xff\nr2 -= 1\nif r2 s< -1 goto +2\nr0 = 0\nexit\nr0 = r3\nexit",
    "call 5\nr2 = r0\nr2 &= 0xff\nr2 -= 1\nif r2 s< 0 goto +2\nr0 = 0\nexit\nr0 = r3\nexit",
    "call 5\nr2 = r0\nif r2 > 10 goto +3\nif r2 < 11 goto +1\nr0 = r3\nr0 = 0\nexit",
    "call 5\nr2 = r0\nif r2 > 10 goto +3\nif r2 < 10 goto +1\nr0 = r3\nr0 = 0\nexit",
    "call 5\nr2 = r0\nr2 %= 7\nif r2 < 7 goto +1\nr0 = r3\nr0 = 0\nexit",
    "call 5\nr2 = r0\nr2 >>= 60\nr2 *= 3\nif r2 > 45 goto +2\nr0 = 0\nexit\nr0 = r3\nexit",
    "call 5\nr2 = r0\nr2 >>= 60\nr2 *= 3\nif r2 > 44 goto +2\nr0 = 0\nexit\nr0 = r3\nexit",
    "call 5\nr2 = r0\nr2 s>>= 60\nif r2 s< -8 goto +2\nr0 = 0\nexit\nr0 = r3\nexit",
    "call 5\nr2 = r0\nr2 &= 0xf0\nr2 |= 3\nif r2 < 3 goto +2\nr0 = 0\nexit\nr0 = r3\nexit",
    "call 5\nr2 = r0\nr3 = r0\nr2 &= 7\nr3 &= 7\nr2 += r3\nif r2 > 14 goto +2\nr0 = 0\nexit\n"
    "r0 = r4\nexit",
    "call 5\nr2 = r0\nif r2 s> 5 goto +4\nif r2 s< 2 goto +3\nif r2 != 2 goto +1\nr0 = r3\n"
    "r0 = 0\nexit",
    "call 5\nr2 = r0\nif r2 s> 5 goto +4\nif r2 s< 2 goto +3\nr2 -= 2\nif r2 > 3 goto +2\n"
    "r0 = 0\nexit\nr0 = r3\nexit",
    # a register compared with itself: decided by its bounds only, as any two (6.18 walks
    # both sides of r2 > r2)
    "call 5\nr2 = r0\nif r2 > r2 goto +2\nr0 = 0\nexit\nr0 = r3\nexit",
    "call 5\nr2 = r0\nif r2 >= r2 goto +2\nr0 = r3\nexit\nr0 = 0\nexit",
    "call 5\nr2 = r0\nif w2 s< w2 goto +2\nr0 = 0\nexit\nr0 = r3\nexit",
    "call 5\nr2 = r0\nr2 |= 1\nif r2 & r2 goto +2\nr0 = r3\nexit\nr0 = 0\nexit",
    "call 5\nr2 = r0\nif r2 & r2 goto +2\nr0 = 0\nexit\nr0 = r3\nexit",
])
def test_a_branch_the_ranges_prove_dead_is_not_walked(kernel, emulated, text):
    verdicts = [range_verdict(system, ProgType.SOCKET_FILTER, text)
                for system in (kernel, emulated)]
    assert verdicts[1] == verdicts[0]


def test_the_dead_branch_after_and_and_add_is_not_walked(kernel, emulated):
    """``r2 &= 0xff; r2 += 1`` is at most 256: ``if r2 > 300`` never jumps, so the
    uninitialised read past it is never refused."""
    text = ("call 5\nr2 = r0\nr2 &= 0xff\nr2 += 1\nif r2 > 300 goto +2\nr0 = 0\nexit\n"
            "r0 = r3\nexit")
    assert range_verdict(kernel, ProgType.SOCKET_FILTER, text) == ("ok",)
    assert range_verdict(emulated, ProgType.SOCKET_FILTER, text) == ("ok",)


@pytest.mark.parametrize("compare", [
    "if r2 s>= r2 goto +0", "if r2 s> r2 goto +0", "if r2 >= r2 goto +0", "if r2 > r2 goto +0",
    "if r2 < r2 goto +0", "if r2 <= r2 goto +0", "if r2 s< r2 goto +0", "if w2 >= w2 goto +0",
    "if w2 s> w2 goto +0", "if w2 < w2 goto +0", "if r2 == r2 goto +0", "if r2 != r2 goto +0",
    "if r2 & r2 goto +0", "if r2 s>= r2 goto +2", "if r2 >= r2 goto +2",
])
@pytest.mark.parametrize("value", ["r2 = r3", "r2 &= 63", "w2 = w3\nw2 += 8", "r2 &= 1"])
@pytest.mark.parametrize("access", ["r0 = *(u64 *)(r6 +56)", "r0 = *(u8 *)(r6 +0)"])
def test_a_register_compared_with_itself_narrows_its_ranges_as_6_18_does(
        kernel, emulated, value_maps, compare, value, access):
    """6.18's reg_set_min_max refines a register compared with itself as two aliases of one
    register (a strict compare's reverse takes one off its max and adds one to its min),
    so the path on from the jump sees the narrowed ranges (or, where they cross, none)."""
    body = f"{value}\n{compare}\nr6 += r2\n{access}\nr0 = 0\nexit"
    verdicts = verdicts_on_value(kernel, emulated, value_maps, body)
    assert verdicts[1] == verdicts[0]


# -- 32-bit bounds ---------------------------------------------------------------------------------
@pytest.mark.parametrize("index,expected", [
    ("if w2 > 56 goto +{out}", "EINVAL"),  # the upper half unknown
    ("w2 = w2\nif w2 > 56 goto +{out}", "ok"),  # zero-extended
    ("if w2 > 56 goto +{out}\nr2 <<= 32\nr2 >>= 32", "ok"),
    ("if w2 > 56 goto +{out}\nr2 &= 0xffffffff", "EINVAL"),  # the imm is -1: a no-op
    ("w2 &= 63", "ok"),
    ("w2 += 1\nw2 &= 63", "ok"),
    ("w2 = w3\nif w2 s> 56 goto +{out}", "EACCES"),  # s32 >= -2^31 but u32 up to 2^32 - 1
    ("w2 = w3\nif w2 s> 56 goto +{out}\nif w2 s< 0 goto +{out}", "ok"),
    ("w2 = w3\nw2 -= 1\nif w2 < 57 goto +1\ngoto +{out}", "ok"),
    ("r2 = r3\nr2 += 0xffffffff\nw2 = w2\nif w2 > 56 goto +{out}", "ok"),
    ("w2 = (s8)w3\nif w2 s< 0 goto +{out}", "EACCES"),  # [0, 127], zero-extended
    ("w2 = (s8)w3\nif w2 s< 0 goto +{out}\nif w2 > 56 goto +{out}", "ok"),
    ("w2 = w3\nw2 <<= 4\nw2 >>= 26", "ok"),
    ("w2 = w3\nw2 s>>= 26", "EACCES"),
    ("r2 = r3\nr2 <<= 32\nr2 s>>= 58", "EACCES"),
])
def test_32bit_bounds_get_the_kernels_verdict(kernel, emulated, value_maps, index, expected):
    body = f"{jumps_out(index, 2)}\nr6 += r2\nr0 = *(u8 *)(r6 +0)\nr0 = 0\nexit"
    verdicts = verdicts_on_value(kernel, emulated, value_maps, body)
    assert verdicts[1] == verdicts[0]
    assert verdicts[0][0] == expected


# -- a helper's size argument ----------------------------------------------------------------------
@pytest.mark.parametrize("size", [
    "r2 &= 63", "r2 &= 64", "r2 &= 127", "r2 >>= 1", "r2 = r2", "r2 &= 63\nr2 -= 1",
    "if r2 > 64 goto +{out}", "if r2 > 65 goto +{out}", "if r2 s> 64 goto +{out}",
    "if r2 s> 64 goto +{out}\nif r2 s< 0 goto +{out}",
    "if r2 s> 64 goto +{out}\nif r2 s< 1 goto +{out}",
    "w2 = w2\nif w2 > 64 goto +{out}",
])
@pytest.mark.parametrize("func", [112, 113])  # probe_read_user (size may be 0), _kernel
def test_a_helper_size_bounded_by_a_range_gets_the_kernels_verdict(kernel, emulated, size,
                                                                   func):
    text = (f"call 5\nr2 = r0\n{jumps_out(size, 4)}\nr1 = r10\nr1 += -64\nr3 = 0\ncall {func}\n"
            "r0 = 0\nexit")
    verdicts = [range_verdict(system, ProgType.TRACEPOINT, text)
                for system in (kernel, emulated)]
    assert verdicts[1] == verdicts[0]


def test_a_helper_size_into_a_map_value_gets_the_kernels_verdict(kernel, emulated,
                                                                 value_maps):
    for bound, offset in [(64, 0), (65, 0), (56, 8), (57, 8)]:
        body = (f"r2 = r3\nif r2 > {bound} goto +4\nr1 = r6\nr1 += {offset}\nr3 = 0\n"
                "call 113\nr0 = 0\nexit")
        verdicts = verdicts_on_value(kernel, emulated, value_maps, body,
                                     prog_type=ProgType.TRACEPOINT)
        assert verdicts[1] == verdicts[0], (bound, offset)


# -- return values ---------------------------------------------------------------------------------
@pytest.mark.parametrize("ret", [
    "r0 &= 1", "r0 &= 3", "r0 &= 2", "r0 &= 4", "r0 >>= 62", "r0 >>= 63", "",
    "if r0 > 1 goto +1\ngoto +1\nr0 = 1", "r0 s>>= 63", "r0 s>>= 63\nr0 += 1",
    "r0 &= 1\nr0 -= 1", "w0 &= 3",
])
@pytest.mark.parametrize("attach", [AttachType.CGROUP_INET_INGRESS,
                                    AttachType.CGROUP_INET_EGRESS])
def test_a_return_value_range_gets_the_kernels_verdict(kernel, emulated, ret, attach):
    text = f"call 7\n{ret}\nexit"  # bpf_get_prandom_u32: any u32
    verdicts = [range_verdict(system, ProgType.CGROUP_SKB, text, expected_attach_type=attach)
                for system in (kernel, emulated)]
    assert verdicts[1] == verdicts[0]


# -- helper return values -------------------------------------------------------------------------
@pytest.fixture
def emulated_like_kernel(kernel):
    """The emulated backend on a machine of the host's possible CPUs (the kernel's
    nr_cpu_ids), which bounds bpf_get_smp_processor_id's result."""
    from pybpf import system

    return system("emulated", cpus=kernel.num_possible_cpus)


@pytest.fixture
def cpu_value_maps(kernel, emulated_like_kernel):
    fds = {system: system.map_create(MapType.ARRAY, 4, VALUE_SIZE, 1)
           for system in (kernel, emulated_like_kernel)}
    yield fds
    for system, fd in fds.items():
        system.close(fd)


@pytest.mark.parametrize("use,expected", [
    # the last CPU's byte is the value's last: [0, nr_cpu_ids - 1] (do_refine_retval_range)
    ("r6 += r0\nr0 = *(u8 *)(r6 +{last_byte})", "ok"),
    ("r6 += r0\nr0 = *(u8 *)(r6 +{past_last_byte})", "EACCES"),
    ("r0 <<= 3\nr6 += r0\nr0 = *(u64 *)(r6 +0)", "ok"),
    ("w0 += 1\nr6 += r0\nr0 = *(u8 *)(r6 +{past_last_byte})", "EACCES"),
    ("r0 = -r0\nr6 += r0\nr0 = *(u8 *)(r6 +63)", "EACCES"),
    ("if r0 >= {cpus} goto +1\ngoto +1\nr0 = r7", "ok"),  # r7: not initialised
    ("if r0 >= {last_cpu} goto +1\ngoto +1\nr0 = r7", "EACCES"),
    ("if w0 s> {last_cpu} goto +1\ngoto +1\nr0 = r7", "ok"),
    ("if r0 s< 0 goto +1\ngoto +1\nr0 = r7", "ok"),
])
def test_the_cpu_id_is_below_the_machines_cpus_as_the_kernel_knows(
        kernel, emulated_like_kernel, cpu_value_maps, use, expected):
    """bpf_get_smp_processor_id is in [0, nr_cpu_ids - 1]: an index bounded by nothing else
    reaches the value's last byte, no further; a branch past it is dead."""
    cpus = kernel.num_possible_cpus
    body = "call 8\n" + use.format(cpus=cpus, last_cpu=cpus - 1, last_byte=VALUE_SIZE - cpus,
                                    past_last_byte=VALUE_SIZE - cpus + 1) + "\nr0 = 0\nexit"
    verdicts = [range_verdict(system, ProgType.SOCKET_FILTER,
                              (_LOOKUP + body).format(fd=cpu_value_maps[system]))
                for system in (kernel, emulated_like_kernel)]
    assert verdicts[1] == verdicts[0]
    if cpus * 8 <= VALUE_SIZE:  # small machines: what the kernel answered on 2 CPUs
        assert verdicts[0][0] == expected


@pytest.mark.parametrize("ret", ["", "r0 += 1", "r0 &= 1", "w0 -= 1"])
@pytest.mark.parametrize("attach", [AttachType.CGROUP_INET_INGRESS,
                                    AttachType.CGROUP_INET_EGRESS])
def test_a_cgroup_skb_program_may_return_the_cpu_id_where_its_range_fits(
        kernel, emulated_like_kernel, ret, attach):
    """[0, nr_cpu_ids - 1] against CGROUP_SKB's [0, 1] ([0, 3] on egress)."""
    text = f"call 8\n{ret}\nexit"
    verdicts = [range_verdict(system, ProgType.CGROUP_SKB, text, expected_attach_type=attach)
                for system in (kernel, emulated_like_kernel)]
    assert verdicts[1] == verdicts[0]


@pytest.mark.parametrize("size", ["64", "63", "0", "1", "r2 &= 63", "r2 &= 31\nr2 += 1"])
@pytest.mark.parametrize("use", [
    "r6 += r0\nr0 = *(u8 *)(r6 +0)",  # smin -MAX_ERRNO: refused
    "if r0 s< 0 goto +{out}\nr6 += r0\nr0 = *(u8 *)(r6 +0)",  # [0, size]
    "if r0 > 64 goto +{out}\nr6 += r0\nr0 = *(u8 *)(r6 +0)",
    "if w0 s< 0 goto +{out}\nw0 = w0\nr6 += r0\nr0 = *(u8 *)(r6 +0)",  # the s32 bounds
    "if r0 s< 0 goto +{out}\nr1 = r10\nr1 += -64\nr1 += r0\nr0 = *(u8 *)(r1 -1)",
    "if r0 s< 1 goto +{out}\nr2 = r0\nr1 = r10\nr1 += -64\nr3 = 0\ncall 113",
    "r2 = r0\nr1 = r10\nr1 += -64\nr3 = 0\ncall 113",  # a size that may be negative
    "if r0 != {size_max} goto +{out}\nr0 = r7",  # the size is reachable
    "if r0 s> {size_max} goto +1\ngoto +{out}\nr0 = r7",  # beyond it is not
])
@pytest.mark.parametrize("func", [114, 115])  # probe_read_user_str, probe_read_kernel_str
def test_a_string_reads_length_is_at_most_its_size_as_the_kernel_knows(
        kernel, emulated, value_maps, size, use, func):
    """The length a string read returns is in [-MAX_ERRNO, the size's umax]: its use as an
    index or a size is checked against those bounds."""
    size_max = {"r2 &= 63": 63, "r2 &= 31\nr2 += 1": 32}.get(size, size)
    set_size = f"r2 = {size}" if size.isdigit() else size
    body = (f"{set_size}\nr1 = r10\nr1 += -64\nr3 = 0\ncall {func}\n"
            + jumps_out(use.replace("{size_max}", str(size_max)), 0) + "\nr0 = 0\nexit")
    verdicts = verdicts_on_value(kernel, emulated, value_maps, body,
                                 prog_type=ProgType.TRACEPOINT)
    assert verdicts[1] == verdicts[0]


def _loop_calling(callback: list) -> list:
    """main: bpf_loop(3, cb, fp-8, 0), then 0; ``callback`` the body of cb."""
    return [b.st(8, FP, -8, 0), b.mov64(R1, 3), b.ld_func(R2, "cb"), b.mov64(R3, FP),
            b.add64(R3, -8), b.mov64(R4, 0), b.call("loop"), b.mov64(R0, 0), b.exit_(),
            b.label("cb"), *callback, b.exit_()]


_READ_ONE = [b.mov64(R1, FP), b.add64(R1, -8), b.mov64(R2, 1), b.mov64(R3, 0),
             b.call("probe_read_kernel_str")]


@pytest.mark.parametrize("label,callback", [
    ("the CPU id", [b.call("get_smp_processor_id")]),
    ("the CPU id, 1 past", [b.call("get_smp_processor_id"), b.add64(R0, 1)]),
    ("a string's length", _READ_ONE),  # [-MAX_ERRNO, 1]
    ("a string's length, not negative", [*_READ_ONE, b.jsge(R0, 0, "out"), b.mov64(R0, 0),
                                         b.label("out")]),
])
def test_a_callback_returning_a_helpers_result_gets_the_kernels_verdict(
        kernel, emulated_like_kernel, label, callback):
    """A callback must return a value in [0, 1]: a helper's result the kernel bounds may be
    returned as it is where its bounds are in there (the CPU id on up to 2 CPUs)."""
    verdicts = []
    for system in (kernel, emulated_like_kernel):
        try:
            system.close(load_with_func_info(system, _loop_calling(callback),
                                             prog_type=ProgType.SOCKET_FILTER))
            verdicts.append(("ok",))
        except BPFError as exc:
            verdicts.append((exc.errno, *[m.group(0) for m in _RANGE_REFUSALS.finditer(
                exc.log or "")]))
    assert verdicts[1] == verdicts[0], label


# -- random ALU and branch sequences ---------------------------------------------------------------
_ALU = ["+=", "-=", "*=", "&=", "|=", "^=", "<<=", ">>=", "s>>="]
_JMP = [">", ">=", "<", "<=", "s>", "s>=", "s<", "s<=", "==", "!=", "&"]
_IMMS = st.one_of(st.sampled_from([0, 1, 2, 3, 7, 8, 15, 16, 31, 32, 56, 63, 64, 255, 0x7fffffff,
                                   -1, -2, -8, -64, -0x80000000]),
                  st.integers(-300, 300))


@st.composite
def _alu_branch_ops(draw) -> list[str]:
    """Up to 8 instructions on r2 and r3 (both unknown): ALU ops of either width with an
    immediate or the other register, movs (sign-extending too), negations and forward
    conditional jumps to a later one of them (or to the access)."""
    ops: list[str] = []
    count = draw(st.integers(1, 8))
    for _ in range(count):
        kind = draw(st.sampled_from(["alu", "alu", "alu", "jmp", "jmp", "mov", "neg"]))
        wide = draw(st.booleans())
        r = "r" if wide else "w"
        dst, src = draw(st.sampled_from([("2", "3"), ("3", "2"), ("2", "2")]))
        if kind == "alu":
            op = draw(st.sampled_from(_ALU))
            if op in ("<<=", ">>=", "s>>=") and draw(st.booleans()):
                operand = str(draw(st.integers(0, 63 if wide else 31)))
            elif draw(st.booleans()):
                operand = f"{r}{src}"
            else:
                operand = str(draw(_IMMS))
            ops.append(f"{r}{dst} {op} {operand}")
        elif kind == "mov":
            ext = draw(st.sampled_from(["", "(s8)", "(s16)"] + (["(s32)"] if wide else [])))
            ops.append(f"{r}{dst} = {ext}{r}{src}")
        elif kind == "neg":
            ops.append(f"{r}{dst} = -{r}{dst}")
        else:
            op = draw(st.sampled_from(_JMP))
            operand = f"{r}{src}" if draw(st.booleans()) and src != dst else str(draw(_IMMS))
            ops.append(f"if {r}{dst} {op} {operand} goto +{{skip}}")
    # each jump skips some of the instructions after it (the access at most)
    out = []
    for i, op in enumerate(ops):
        if "{skip}" in op:
            op = op.format(skip=draw(st.integers(0, len(ops) - i - 1)))
        out.append(op)
    return out


@settings(max_examples=300, **_SETTINGS)
@given(ops=_alu_branch_ops(), access=st.sampled_from(
    ["r0 = *(u8 *)(r6 +0)", "r0 = *(u32 *)(r6 +0)", "r0 = *(u64 *)(r6 +8)",
     "r0 = *(u8 *)(r6 -8)"]))
def test_random_alu_and_branches_then_an_indexed_access_get_the_kernels_verdict(
        kernel, emulated, value_maps, ops, access, differential_tally):
    body = "\n".join(ops) + f"\nr6 += r2\n{access}\nr0 = 0\nexit"
    verdicts = verdicts_on_value(kernel, emulated, value_maps, body)
    differential_tally.add("kernel", "emulated", "verifier: ranges", 1, 1,
                           int(verdicts[0] != verdicts[1]))
    assert verdicts[1] == verdicts[0], body


# -- random helper calls, then their results used -------------------------------------------------
# What a helper call leaves in R0: the helpers whose result the kernel bounds (the CPU id, the
# string reads' lengths) and ones it does not (a random u32, the time, the pid, the node, a
# read's 0 or errno), sizes constant or bounded by a mask
_CALLS = ["call 8", "call 7", "call 5", "call 14", "call 42", "call 16"]
_READS = [112, 113, 114, 115]
_SIZES = st.one_of(st.sampled_from(["0", "1", "8", "32", "63", "64", "65"]).map(
    lambda n: f"r2 = {n}"), st.tuples(st.sampled_from("789"), st.sampled_from(
        ["", "\nr2 &= 15", "\nr2 &= 63", "\nr2 &= 127", "\nw2 = w2"])).map(
    lambda rm: f"r2 = r{rm[0]}{rm[1]}"))
_USES = ["r6 += {r}\nr0 = *(u8 *)(r6 +0)", "r6 += {r}\nr0 = *(u64 *)(r6 +56)",
         "r6 += {r}\nr0 = *(u32 *)(r6 -4)", "r1 = r10\nr1 += -64\nr1 += {r}\n"
         "r0 = *(u8 *)(r1 +0)", "r2 = {r}\nr1 = r10\nr1 += -64\nr3 = 0\ncall 113",
         "r2 = {r}\nr1 = r6\nr3 = 0\ncall 115", "r0 = {r}\nif r0 s> 63 goto +1\nr0 = r4",
         "r0 = *(u32 *)({r} +60)"]
_LOG_STATS = re.compile(r"^(processed \d+ insns|verification time|stack depth).*", re.M)


def key_verdict(system, prog_type: int, text: str) -> tuple[str, str]:
    """("ok", ""), or the errno's name and the last line of the refusal's message."""
    try:
        system.close(system.prog_load(prog_type, asm(text)))
    except BPFError as exc:
        lines = _LOG_STATS.sub("", exc.log or "").strip().splitlines()
        return errno.errorcode.get(exc.errno, str(exc.errno)), lines[-1] if lines else ""
    return "ok", ""


@st.composite
def _helper_result_programs(draw) -> str:
    """Up to 6 steps on r7, r8 and r9 (first the value's unknown u64 and u32, and 0), and R0
    once a call made it a scalar: a helper call whose result one of them takes (as a u64, or
    its low 32 bits), an ALU op, a copy (sign-extending too) or ``+= K`` (copies share an
    id, and the jumps on one refine all), a spill to the stack or a fill from it, or a jump
    over some of the steps after it; then one of them used as an index into the map value
    or the stack, a helper's size, or a return value."""
    steps: list[list[str]] = []
    names = "789"
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["call", "read", "lookup", "alu", "jmp", "copy", "stack"]))
        regs = st.sampled_from(names)
        dst, src = draw(regs), draw(regs)
        wide = draw(st.booleans())
        r = "r" if wide else "w"
        if kind in ("call", "read"):
            if kind == "call":
                call = draw(st.sampled_from(_CALLS))
                head = ["r1 = r10", "r1 += -16", "r2 = 16"] if call == "call 16" else []
            else:
                head = ["r1 = r10", "r1 += -64", *draw(_SIZES).split("\n"), "r3 = 0"]
                call = f"call {draw(st.sampled_from(_READS))}"
            dst = draw(st.sampled_from("789"))
            steps.append([*head, call, f"{r}{dst} = {r}0"])
            names = "0789"
        elif kind == "lookup":  # a map value or NULL, in R0 and a copy
            steps.append(["r2 = r10", "r2 += -4", "r1 = map[fd:{fd}]", "call 1", f"r{dst} = r0"])
        elif kind == "alu" and draw(st.integers(0, 4)) == 0:  # byte swaps
            swap = draw(st.sampled_from(["be", "le", "bswap"]))
            bits = draw(st.sampled_from([16, 32, 64]))
            steps.append([f"r{dst} = {swap}{bits} r{dst}"])
        elif kind == "alu":
            op = draw(st.sampled_from([*_ALU, "/=", "%=", "s/=", "s%="]))
            operand = f"{r}{src}" if draw(st.booleans()) else str(draw(_IMMS))
            steps.append([f"{r}{dst} {op} {operand}"])
        elif kind == "copy":
            ext = draw(st.sampled_from(["", "", "(s8)", "(s16)"] + (["(s32)"] if wide else [])))
            steps.append([f"{r}{dst} = {ext}{r}{src}"] if draw(st.booleans())
                         else [f"{r}{dst} += {draw(st.integers(-8, 8))}"])
        elif kind == "stack":
            size, off = draw(st.sampled_from([("u64", -72), ("u32", -72), ("u32", -68),
                                              ("u16", -70), ("u8", -72)]))
            how = draw(st.sampled_from(["spill", "fill", "atomic"]))
            if how == "atomic":  # the old value fetched, the slot's new one data
                width = "64" if size == "u64" else ""
                op = draw(st.sampled_from(["fetch_add", "fetch_or", "xchg"]))
                steps.append([f"r{dst} = atomic{width}_{op}(({size if width else 'u32'} *)"
                              f"(r10 {off if size in ('u64', 'u32') else -72}), r{dst})"])
            else:
                steps.append([f"*({size} *)(r10 {off}) = r{src}"] if how == "spill"
                             else [f"r{dst} = *({size} *)(r10 {off})"])
        else:
            op = draw(st.sampled_from(_JMP))
            operand = f"{r}{src}" if draw(st.booleans()) else str(draw(_IMMS))
            steps.append([f"if {r}{dst} {op} {operand} goto +{{skip}}"])
    lines = []
    for i, step in enumerate(steps):
        after = [len(later) + sum("map[" in line for line in later)  # lddw: 2 slots
                 for later in steps[i + 1:]]
        skip = sum(after[:draw(st.integers(0, len(after)))])
        lines += [line.replace("{skip}", str(skip)) for line in step]
    use = draw(st.sampled_from(_USES)).replace("{r}", f"r{draw(st.sampled_from(names))}")
    stack = [f"*(u64 *)(r10 -{8 * i}) = 0" for i in range(1, 10)]
    return "\n".join([*stack, "r7 = r2", "r8 = r3", "r9 = 0", *lines, use, "r0 = 0", "exit"])


def helper_result_verdicts(kernel, emulated, value_maps, body: str) -> list[tuple[str, str]]:
    return [key_verdict(system, ProgType.TRACEPOINT, (_LOOKUP + body).format(
        fd=value_maps[system])) for system in (kernel, emulated)]


@settings(max_examples=400, **_SETTINGS)
@given(body=_helper_result_programs())
def test_random_helper_results_used_get_the_kernels_verdict_and_message(
        kernel, emulated_like_kernel, cpu_value_maps, body, differential_tally):
    verdicts = helper_result_verdicts(kernel, emulated_like_kernel, cpu_value_maps, body)
    differential_tally.add("kernel", "emulated", "verifier: helper results", 1, 1,
                           int(verdicts[0] != verdicts[1]))
    assert verdicts[1] == verdicts[0], body


# -- loops ----------------------------------------------------------------------------------------
def test_a_loop_whose_branch_the_ranges_decide_after_some_rounds_is_accepted(kernel, emulated):
    """1000 rounds of a loop with a branch both ways in its first 26 rounds and taken in the
    rest: each path from an early round comes back to a state a finished path kept many
    rounds before, which covers it (the kernel accepts; a walk pruned only by the last
    STATES_PER_INSN states would go on to 2^26 paths, E2BIG)."""
    text = ("call 5\nr7 = r0\nr6 = 0\nr2 = r7\nr2 &= 0xff\nr2 += r6\nr3 = r2\nr3 <<= 2\n"
            "if r3 > 100 goto +1\nr3 += 1\nr6 += 1\nif r6 < 1000 goto -9\nr0 = 0\nexit")
    assert range_verdict(kernel, ProgType.SOCKET_FILTER, text) == ("ok",)
    assert range_verdict(emulated, ProgType.SOCKET_FILTER, text) == ("ok",)
