"""The emulated verifier against the kernel's (6.18): the same program gets the same verdict,
accepted or refused with the same errno.

- Programs whose branches constants decide (``constant_branch_programs``): the kernel walks
  only the side a branch takes, so an instruction it would refuse may sit on the other side;
  array lookups with a constant in-range key cannot return NULL, so their NULL check is
  decided too.
- Any instruction: a random 8-byte instruction (every opcode byte, random registers, offset
  and immediate) between a preamble and ``r0 = 0; exit``.
- Fixed seeds (``derandomize``): the budget below is the same set of programs every run.
"""

from __future__ import annotations

import errno
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from programs.strategies import assemble_items, constant_branch_programs
from pybpf.asm import assemble_text
from pybpf.errors import BPFError
from pybpf.uapi import MapType, ProgType

_SETTINGS = dict(deadline=None, derandomize=True, suppress_health_check=[
    HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large])


def verdict(system, prog_type: int, insns: bytes, **kwargs) -> str:
    """"ok", or the errno's name the load failed with."""
    try:
        fd = system.prog_load(prog_type, insns, **kwargs)
    except BPFError as exc:
        return errno.errorcode.get(exc.errno, str(exc.errno))
    system.close(fd)
    return "ok"


def ins(code: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
    return struct.pack("<BBhi", code, dst | src << 4, off, imm)


def asm(text: str) -> bytes:
    return b"".join(insn.encode() for insn in assemble_text(text).instructions)


@pytest.fixture
def lookup_maps(kernel, emulated):
    """The maps generated programs look up, on each backend: name -> fd."""
    specs = {"array": MapType.ARRAY, "percpu_array": MapType.PERCPU_ARRAY, "hash": MapType.HASH}
    fds = {system: {name: system.map_create(kind, 4, 8, 4) for name, kind in specs.items()}
           for system in (kernel, emulated)}
    yield fds
    for system, by_name in fds.items():
        for fd in by_name.values():
            system.close(fd)


# -- branches constants decide ------------------------------------------------------------------
@pytest.mark.parametrize("text", [
    "r2 = 5\nif r2 == 5 goto +1\nr0 = r3\nr0 = 0\nexit",
    "r2 = 0x1234\nr2 = be16 r2\nif r2 == 0x3412 goto +1\nr0 = r3\nr0 = 0\nexit",
    "r2 = 0x12345\nr2 = le16 r2\nif r2 != 0x2345 goto +1\nr0 = 0\nexit",
    "r2 = 1\nr2 = bswap64 r2\nr3 = 0x100000000000000 ll\nif r2 == r3 goto +1\nr0 = r4\nr0 = 0\n"
    "exit",
    "r2 = 5\nr2 = -r2\nif r2 s< 0 goto +1\nr0 = r3\nr0 = 0\nexit",
    "call 5\nr2 = r0\nr2 &= 0\nif r2 == 0 goto +1\nr0 = r3\nr0 = 0\nexit",
    "r2 = *(u32 *)(r1 +0)\nr2 >>= 32\nif r2 == 0 goto +1\nr0 = r3\nr0 = 0\nexit",
    "call 5\nif r0 >= 0 goto +1\nr0 = r3\nr0 = 0\nexit",
    # what the kernel does not know: a quotient, a shift by a register of 64
    "r2 = 10\nr2 /= 3\nif r2 == 3 goto +1\nr0 = r3\nr0 = 0\nexit",
    "r2 = 1\nr4 = 70\nr2 <<= r4\nif r2 == 64 goto +1\nr0 = r3\nr0 = 0\nexit",
])
def test_a_branch_the_known_bits_decide_leaves_the_other_side_unchecked(kernel, emulated, text):
    program = asm(text)
    on_kernel = verdict(kernel, ProgType.SOCKET_FILTER, program)
    assert verdict(emulated, ProgType.SOCKET_FILTER, program) == on_kernel


@pytest.mark.parametrize("map_name,key,ok", [
    ("array", "*(u32 *)(r10 -4) = 0", True), ("array", "*(u32 *)(r10 -8) = 3", True),
    ("array", "*(u32 *)(r10 -8) = 4", False), ("percpu_array", "*(u32 *)(r10 -8) = 1", True),
    ("hash", "*(u32 *)(r10 -8) = 0", False),
])
def test_an_array_lookup_with_a_constant_in_range_key_is_not_null(kernel, emulated,
                                                                  lookup_maps, map_name, key,
                                                                  ok):
    # the NULL branch reads r3, which is never set: only a lookup that may fail reaches it
    offset = -4 if "-4" in key else -8
    text = (f"{key}\nr2 = r10\nr2 += {offset}\nr1 = map[fd:{{fd}}]\ncall 1\n"
            "if r0 != 0 goto +1\nr0 = r3\n*(u64 *)(r0 +0) = 7\nr0 = 0\nexit")
    verdicts = [verdict(system, ProgType.SOCKET_FILTER,
                        asm(text.format(fd=lookup_maps[system][map_name])))
                for system in (kernel, emulated)]
    assert verdicts == (["ok", "ok"] if ok else ["EACCES", "EACCES"])


@settings(max_examples=400, **_SETTINGS)
@given(items=constant_branch_programs())
def test_generated_programs_get_the_kernels_verdict(kernel, emulated, lookup_maps, items,
                                                   differential_tally):
    verdicts = [verdict(system, ProgType.SOCKET_FILTER,
                        assemble_items(items, lookup_maps[system]))
                for system in (kernel, emulated)]
    differential_tally.add("kernel", "emulated", "verifier: branches", 1, 1,
                           int(verdicts[0] != verdicts[1]))
    assert verdicts[1] == verdicts[0]


# -- any instruction -----------------------------------------------------------------------------
# r2 = 5, r3 = fp-16, r4 = unknown, r5 = ctx, fp-8 holds r4, fp-12 zeros, r0 = 0
PREAMBLE = (ins(0xB7, 2, 0, 0, 5) + ins(0xBF, 3, 10) + ins(0x07, 3, 0, 0, -16)
            + ins(0x85, 0, 0, 0, 5) + ins(0xBF, 4, 0) + ins(0xBF, 5, 1) + ins(0x7B, 10, 4, -8)
            + ins(0x62, 10, 0, -12, 0) + ins(0xB7, 0, 0, 0, 0))
EXIT_0 = ins(0xB7, 0, 0, 0, 0) + ins(0x95)
offsets = st.one_of(st.sampled_from([0, 1, -1, 2, 4, 8, -8, -4, -12, -16, 16, -520, 512]),
                    st.integers(-(1 << 15), (1 << 15) - 1))
immediates = st.one_of(st.sampled_from([0, 1, -1, 2, 8, 16, 32, 64, 0x100, 0x110, 0xE1, 0xF1,
                                        0x41, 0xA1, 31, 63, 1 << 29]),
                       st.integers(-(1 << 31), (1 << 31) - 1))


@st.composite
def raw_instructions(draw) -> bytes:
    """Any 8 bytes as an instruction (the second slot too, for lddw)."""
    code = draw(st.integers(0, 255))
    dst, src = draw(st.integers(0, 15)), draw(st.integers(0, 15))
    raw = ins(code, dst, src, draw(offsets), draw(immediates))
    if code == 0x18:
        raw += ins(0, 0, 0, 0, draw(st.sampled_from([0, 1, -1])))
    return raw


@settings(max_examples=1500, **_SETTINGS)
@given(insn=raw_instructions(), preamble=st.booleans(),
       prog_type=st.sampled_from([ProgType.SOCKET_FILTER, ProgType.XDP, ProgType.SCHED_CLS,
                                  ProgType.RAW_TRACEPOINT]))
def test_any_instruction_gets_the_kernels_verdict(kernel, emulated, insn, preamble, prog_type,
                                                  differential_tally):
    program = (PREAMBLE if preamble else b"") + insn + EXIT_0
    verdicts = [verdict(system, prog_type, program) for system in (kernel, emulated)]
    differential_tally.add("kernel", "emulated", "verifier: one insn", 1, 1,
                           int(verdicts[0] != verdicts[1]))
    assert verdicts[1] == verdicts[0]


@pytest.mark.parametrize("program,reason", [
    (ins(0x61, 0, 1, 0) + ins(0x15, 0, 0, 1, 0) + ins(0x18, 0, 0, 0, 1) + ins(0) + ins(0x95),
     "jump into the middle of ldimm64 insn 2"),
    (ins(0xB7, 0, 0, -1, 0) + ins(0x95), "BPF_MOV uses reserved fields"),
    (ins(0xB7, 0, 0, 0, 0) + ins(0x87, 0, 0, -1, 0) + ins(0x95), "BPF_NEG uses reserved fields"),
    (ins(0xB4, 10, 10, -32768, 1) + ins(0x95), "BPF_MOV uses reserved fields"),
])
def test_malformed_instructions_are_refused_with_the_kernels_reason(backend, program, reason):
    with pytest.raises(BPFError) as info:
        backend.close(backend.prog_load(ProgType.SOCKET_FILTER, program))
    assert info.value.errno == errno.EINVAL
    assert reason in info.value.log
