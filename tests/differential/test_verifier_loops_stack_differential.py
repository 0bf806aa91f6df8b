"""The emulated verifier against the kernel's (6.18) on what a program does as a whole: endless
loops (is_state_visited), the stack its calls use together (check_max_stack_depth), a tail
call in a subprogram without BTF (check_abnormal_return) and a direct map value address
(map_direct_value_addr). Each case runs on each backend and must get the verdict the kernel
gives (accepted, or the errno it refuses with)."""

from __future__ import annotations

import struct

import pytest

from helpers import verdict
from pybpf.asm import assemble_text
from pybpf.uapi import MapType, ProgType


def asm(text: str) -> bytes:
    return b"".join(insn.encode() for insn in assemble_text(text).instructions)


# -- endless loops: an ancestor of the path (a state still being explored) never prunes ----
ENDLESS_LOOPS = {
    # r6 (the context) != 0 always: the loop never ends while r0 changes for 32 rounds
    "a shift each round": ("r6 = r1\ncall 7\nl:\nr0 >>= 1\nif r6 != 0 goto l\nr0 = 0\nexit",
                           "EINVAL"),
    "a 32-bit shift each round": ("r6 = r1\ncall 7\nr5 = r0\nl:\nw5 <<= 6\nif r6 != 0 goto l\n"
                                  "r0 = 0\nexit", "EINVAL"),
    "the same state each round": ("r6 = r1\ncall 7\nl:\nr0 = 0\nif r6 != 0 goto l\nr0 = 0\n"
                                  "exit", "EINVAL"),
    "a spilled copy": ("r6 = r1\ncall 5\nl:\nr4 = r0\n*(u64 *)(r10 -8) = r4\nr0 = 0\n"
                       "if r6 <= 0 goto l\nexit", "EINVAL"),
    "no spill": ("r6 = r1\ncall 5\nl:\nr4 = r0\nr0 = 0\nif r6 <= 0 goto l\nexit", "EINVAL"),
    # bounded loops the kernel walks round by round
    "a counted loop": ("r1 = 0\nl:\nr1 += 1\nif r1 < 100 goto l\nr0 = 0\nexit", "ok"),
    "a shift until zero": ("call 7\nl:\nr0 >>= 1\nif r0 != 0 goto l\nexit", "ok"),
}


@pytest.mark.parametrize("case", sorted(ENDLESS_LOOPS))
def test_an_endless_loop_is_refused_a_bounded_one_walked(backend, case):
    text, expected = ENDLESS_LOOPS[case]
    assert verdict(backend, ProgType.SOCKET_FILTER, asm(text)) == expected


# -- the stack of the calls in progress together (check_max_stack_depth) ------------------
def _two_frames(main_depth: int, callee_depth: int) -> str:
    return (f"*(u64 *)(r10 -{main_depth}) = 0\ncall_local f\nr0 = 0\nexit\n"
            f"f:\n*(u64 *)(r10 -{callee_depth}) = 0\nr0 = 7\nexit")


COMBINED_STACKS = {
    # each frame rounded up to 16 bytes (the JIT's): 256 + 256 fits, 272 + 256 does not
    "256 + 256": (ProgType.XDP, _two_frames(256, 256), "ok"),
    "264 + 256": (ProgType.XDP, _two_frames(264, 256), "EACCES"),
    "512 + 256": (ProgType.XDP, _two_frames(512, 256), "EACCES"),
    "496 + 16": (ProgType.XDP, _two_frames(496, 16), "ok"),
    "504 + 8 (512 before rounding)": (ProgType.XDP, _two_frames(504, 8), "EACCES"),
    "264 + 248 + 8 (three frames)": (
        ProgType.XDP, "*(u64 *)(r10 -264) = 0\ncall_local f\nr0 = 0\nexit\n"
        "f:\n*(u64 *)(r10 -248) = 0\ncall_local g\nr0 = 0\nexit\n"
        "g:\n*(u64 *)(r10 -8) = 0\nr0 = 0\nexit", "EACCES"),
    # no private stack for a kprobe's frames on this kernel (bpf_enable_priv_stack)
    "kprobe 264 + 256": (ProgType.KPROBE, _two_frames(264, 256), "EACCES"),
}


@pytest.mark.parametrize("case", sorted(COMBINED_STACKS))
def test_the_calls_in_progress_share_the_stack(backend, case):
    prog_type, text, expected = COMBINED_STACKS[case]
    assert verdict(backend, prog_type, asm(text)) == expected


# -- a tail call in a subprogram needs BTF (check_abnormal_return) ------------------------
@pytest.mark.parametrize("where,expected", [("main", "ok"), ("subprog", "EINVAL")])
def test_a_subprogram_without_btf_cannot_tail_call(backend, where, expected):
    fd = backend.map_create(MapType.PROG_ARRAY, 4, 4, 4)
    tail_call = f"r2 = map[fd:{fd}]\nr3 = 0\ncall 12\n"
    if where == "main":
        text = f"r6 = r1\ncall_local f\nr1 = r6\n{tail_call}r0 = 0\nexit\nf:\nr0 = 0\nexit"
    else:
        text = f"call_local f\nr0 = 0\nexit\nf:\n{tail_call}r0 = 0\nexit"
    try:
        assert verdict(backend, ProgType.SOCKET_FILTER, asm(text)) == expected
    finally:
        backend.close(fd)


# -- a direct map value address (array_map_direct_value_addr) -----------------------------
@pytest.mark.parametrize("entries,off,expected", [
    (1, 0, "ok"), (1, 7, "ok"), (1, 8, "EINVAL"), (2, 0, "524"), (2, 8, "524")])
def test_a_direct_value_address_is_of_an_array_of_one_element(backend, entries, off,
                                                               expected):
    fd = backend.map_create(MapType.ARRAY, 4, 8, entries)
    lddw = struct.pack("<BBhi", 0x18, 1 | 2 << 4, 0, fd) + struct.pack("<BBhi", 0, 0, 0, off)
    try:
        assert verdict(backend, ProgType.XDP, lddw + asm("r0 = 0\nexit")) == expected
    finally:
        backend.close(fd)
