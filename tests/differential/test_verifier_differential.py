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
import re
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import verdict
from programs.strategies import assemble_items, constant_branch_programs
from pybpf.asm import assemble_text
from pybpf.emulated.prog.helpers import HELPERS
from pybpf.errors import BPFError
from pybpf.uapi import AttachType, MapType, ProgType

_SETTINGS = dict(deadline=None, derandomize=True, suppress_health_check=[
    HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large])


def verdicts_with_a_map(systems, map_args: tuple, map_kwargs: dict, prog_type: int,
                        text: str, **kwargs) -> list[str]:
    """Each system's verdict on ``text`` (asm naming ``{fd}``) with a map of its own made
    for the load and closed after it."""
    verdicts = []
    for system in systems:
        fd = system.map_create(*map_args, **map_kwargs)
        try:
            verdicts.append(verdict(system, prog_type, asm(text.format(fd=fd)), **kwargs))
        finally:
            system.close(fd)
    return verdicts


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


@settings(max_examples=1000, **_SETTINGS)
@given(items=constant_branch_programs())
def test_generated_programs_get_the_kernels_verdict(kernel, emulated, lookup_maps, items,
                                                   differential_tally):
    verdicts = [verdict(system, ProgType.SOCKET_FILTER,
                        assemble_items(items, lookup_maps[system]))
                for system in (kernel, emulated)]
    differential_tally.add("kernel", "emulated", "verifier: branches", 1, 1,
                           int(verdicts[0] != verdicts[1]))
    assert verdicts[1] == verdicts[0]


# -- linked scalars ------------------------------------------------------------------------------
# sync_linked_regs: a copy (mov, spill) shares its scalar's id, and what a jump proves of one
# copy the others know. Each program reads the never-written R7 only where the branch before
# it is not decided, so "ok" says the copies were refined together.
DEAD_READ = "if r1 == {value} goto +1\nr0 = r7\nr0 = 0\nexit"


@pytest.mark.parametrize("text,ok", [
    # copy, then check the original or the copy
    ("call 7\nr1 = r0\nif r0 != 0 goto +2\n" + DEAD_READ.format(value=0), True),
    ("call 7\nr1 = r0\nif r1 != 0 goto +2\nif r0 == 0 goto +1\nr0 = r7\nr0 = 0\nexit", True),
    ("call 7\nr1 = r0\nr2 = 0\nif r2 != r0 goto +2\n" + DEAD_READ.format(value=0), True),
    ("call 7\nr1 = r0\nif r0 & -8 goto +2\nif r1 < 8 goto +1\nr0 = r7\nr0 = 0\nexit", True),
    # copies of copies, more than the kernel records for precision (all stay linked)
    ("call 7\nr1 = r0\nr2 = r1\nr3 = r0\nr4 = r0\nr5 = r0\nr6 = r0\nr8 = r0\nr9 = r2\n"
     "if r0 != 0 goto +2\nif r9 == 0 goto +1\nr0 = r7\nr0 = 0\nexit", True),
    # an ALU makes a new value: the link is gone
    ("call 7\nr1 = r0\nr1 |= 0\nif r0 != 0 goto +2\n" + DEAD_READ.format(value=0), False),
    ("call 7\nr1 = r0\nr1 = -r1\nif r0 != 0 goto +2\n" + DEAD_READ.format(value=0), False),
    # r1 = r0 + K (BPF_ADD_CONST), once; a 32-bit one only of a value that fits in 32 bits
    ("call 7\nr1 = r0\nr1 += 5\nif r0 != 0 goto +2\n" + DEAD_READ.format(value=5), True),
    ("call 7\nr1 = r0\nr1 -= 5\nif r0 != 0 goto +2\n" + DEAD_READ.format(value=-5), True),
    ("call 7\nr1 = r0\nr1 += 5\nif r1 != 7 goto +2\nif r0 == 2 goto +1\nr0 = r7\nr0 = 0\n"
     "exit", True),
    ("call 7\nr1 = r0\nr1 += 5\nr1 += 1\nif r0 != 0 goto +2\n" + DEAD_READ.format(value=6),
     False),
    ("call 7\nr1 = r0\nr1 += 5\nr2 = r1\nif r2 != 5 goto +2\nif r1 == 5 goto +1\nr0 = r7\n"
     "r0 = 0\nexit", True),
    ("call 7\nr1 = r0\nr1 += 5\nr2 = r1\nif r0 != 0 goto +2\nif r1 == 5 goto +1\nr0 = r7\n"
     "r0 = 0\nexit", False),
    ("call 7\nr0 &= 0xff\nr1 = r0\nw1 += 5\nif r0 != 0 goto +2\n" + DEAD_READ.format(value=5),
     True),
    ("call 7\nr1 = r0\nw1 += 5\nif r0 != 0 goto +2\n" + DEAD_READ.format(value=5), False),
    # 32-bit moves and sign-extending ones link only a value they do not change
    ("call 7\nr0 &= 0xff\nw1 = w0\nif r0 != 0 goto +2\n" + DEAD_READ.format(value=0), True),
    ("call 7\nw1 = w0\nif r0 != 0 goto +2\n" + DEAD_READ.format(value=0), False),
    ("call 7\nr0 &= 0x7f\nr1 = (s8)r0\nif r0 != 0 goto +2\n" + DEAD_READ.format(value=0), True),
    ("call 7\nr0 &= 0xff\nr1 = (s8)r0\nif r0 != 0 goto +2\n" + DEAD_READ.format(value=0),
     False),
    # 32-bit jumps: the low half is known in both copies, the high half is not
    ("call 7\nr1 = r0\nif w0 != 0 goto +2\nif w1 == 0 goto +1\nr0 = r7\nr0 = 0\nexit", True),
    ("call 7\nr1 = r0\nif w0 != 0 goto +2\n" + DEAD_READ.format(value=0), False),
    # spill and fill: the slot keeps the id; a narrowing spill does not
    ("call 7\n*(u64 *)(r10 -8) = r0\nif r0 != 0 goto +3\nr1 = *(u64 *)(r10 -8)\n"
     + DEAD_READ.format(value=0), True),
    ("call 7\n*(u64 *)(r10 -8) = r0\nr1 = *(u64 *)(r10 -8)\nif r1 != 0 goto +2\n"
     "if r0 == 0 goto +1\nr0 = r7\nr0 = 0\nexit", True),
    ("call 7\nr0 &= 0xff\n*(u32 *)(r10 -8) = r0\nif r0 != 0 goto +3\n"
     "r1 = *(u32 *)(r10 -8)\n" + DEAD_READ.format(value=0), True),
    ("call 7\n*(u32 *)(r10 -8) = r0\nif r0 != 0 goto +3\nr1 = *(u32 *)(r10 -8)\n"
     + DEAD_READ.format(value=0), False),
    # pruning: a path where r1 and r6 are not linked is not covered by one where they were
    ("call 7\nr6 = r0\ncall 7\nif r0 == 0 goto +3\nr1 = r6\nr1 |= 0\ngoto +1\nr1 = r6\n"
     "if r6 != 0 goto +2\nif r1 == 0 goto +1\nr0 = r7\nr0 = 0\nexit", False),
    ("call 7\nr6 = r0\ncall 7\nif r0 == 0 goto +3\nr1 = r6\nr1 |= 0\ngoto +1\nr1 = r6\n"
     "if r6 != 0 goto +2\nif r6 == 0 goto +1\nr0 = r7\nr0 = 0\nexit", True),
])
def test_a_jump_refines_every_copy_of_a_scalar(kernel, emulated, text, ok):
    program = asm(text)
    verdicts = [verdict(system, ProgType.SOCKET_FILTER, program) for system in (kernel, emulated)]
    assert verdicts == (["ok", "ok"] if ok else ["EACCES", "EACCES"])


@pytest.mark.parametrize("copy", ["", "*(u64 *)(r10 -16) = r1\nr1 = 0\nr1 = *(u64 *)(r10 -16)\n"],
                         ids=["register", "spilled"])
@pytest.mark.parametrize("load,ok", [("u8", True), ("u64", False)])
def test_a_checked_copy_indexes_a_map_value(kernel, emulated, lookup_maps, copy, load, ok):
    # the check makes r0 (so its copy r1) 3: a constant offset into the 8-byte value
    skip = 6 + copy.count("\n")
    text = ("*(u32 *)(r10 -4) = 0\nr2 = r10\nr2 += -4\nr1 = map[fd:{fd}]\ncall 1\n"
            f"if r0 == 0 goto +{skip}\nr6 = r0\ncall 7\nr1 = r0\n{copy}if r0 != 3 goto +2\n"
            f"r6 += r1\nr0 = *({load} *)(r6 +0)\nr0 = 0\nexit")
    verdicts = [verdict(system, ProgType.SOCKET_FILTER,
                        asm(text.format(fd=lookup_maps[system]["array"])))
                for system in (kernel, emulated)]
    assert verdicts == (["ok", "ok"] if ok else ["EACCES", "EACCES"])


# -- any instruction -----------------------------------------------------------------------------
# r2 = 5, r3 = fp-16, r4 = unknown, r5 = ctx, fp-8 holds r4, fp-12 zeros, r0 = 0
PREAMBLE = (ins(0xBF, 6, 1) + ins(0x85, 0, 0, 0, 5) + ins(0xBF, 4, 0) + ins(0xB7, 2, 0, 0, 5)
            + ins(0xBF, 3, 10) + ins(0x07, 3, 0, 0, -16) + ins(0xBF, 5, 6)
            + ins(0x7B, 10, 4, -8) + ins(0x62, 10, 0, -12, 0) + ins(0xB7, 0, 0, 0, 0))
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


@settings(max_examples=3000, **_SETTINGS)
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
    # BTF id 0 is the void type: it exists, and is neither a VAR nor a FUNC
    (ins(0x18, 0, 3, 0, 0) + ins(0) + ins(0xB7) + ins(0x95),
     "pseudo btf_id 0 in ldimm64 isn't KIND_VAR or KIND_FUNC"),
])
def test_malformed_instructions_are_refused_with_the_kernels_reason(backend, program, reason):
    with pytest.raises(BPFError) as info:
        backend.close(backend.prog_load(ProgType.SOCKET_FILTER, program))
    assert info.value.errno == errno.EINVAL
    assert reason in info.value.log


# -- the context: what each program type may read and write, and what a read gives -----------
# (program type, bytes of its context to try, expected_attach_type)
CONTEXTS = [
    (ProgType.SOCKET_FILTER, 200, 0), (ProgType.SCHED_CLS, 200, 0), (ProgType.SCHED_ACT, 200, 0),
    (ProgType.CGROUP_SKB, 200, 0), (ProgType.LWT_IN, 200, 0), (ProgType.LWT_OUT, 200, 0),
    (ProgType.LWT_XMIT, 200, 0), (ProgType.SK_SKB, 200, 0), (ProgType.SK_MSG, 88, 0),
    (ProgType.XDP, 32, 0), (ProgType.XDP, 32, AttachType.XDP_DEVMAP),
    (ProgType.KPROBE, 176, 0), (ProgType.PERF_EVENT, 192, 0),
    (ProgType.TRACEPOINT, 72, 0), (ProgType.RAW_TRACEPOINT, 104, 0), (ProgType.SYSCALL, 72, 0),
]
_WIDTH = {1: 0x10, 2: 0x08, 4: 0x00, 8: 0x18}
_MODES = ("load", "load_sx", "store_imm", "store_reg")


def ctx_access(size: int, off: int, mode: str) -> bytes | None:
    """A program making one access of the context (R1) at ``off``, then returning 0."""
    if mode == "store_imm":
        return ins(0x62 | _WIDTH[size], 1, 0, off, 1) + EXIT_0
    if mode == "store_reg":
        return ins(0xB7, 2, 0, 0, 1) + ins(0x63 | _WIDTH[size], 1, 2, off) + EXIT_0
    if mode == "load_sx":
        return None if size == 8 else ins(0x81 | _WIDTH[size], 2, 1, off) + EXIT_0
    return ins(0x61 | _WIDTH[size], 2, 1, off) + EXIT_0


@pytest.mark.parametrize("prog_type,span,attach_type", CONTEXTS,
                         ids=[c[0].name.lower() + ("-devmap" if c[2] else "") for c in CONTEXTS])
def test_every_context_access_gets_the_kernels_verdict(kernel, emulated, prog_type, span,
                                                       attach_type, differential_tally):
    flags = 1 << 4 if prog_type == ProgType.SYSCALL else 0  # syscall programs are sleepable
    disagreements = []
    for off in range(-8, span):
        for size in (1, 2, 4, 8):
            for mode in _MODES:
                program = ctx_access(size, off, mode)
                if program is None:
                    continue
                verdicts = [verdict(system, prog_type, program, prog_flags=flags,
                                    expected_attach_type=attach_type)
                            for system in (kernel, emulated)]
                if verdicts[0] != verdicts[1]:
                    disagreements.append((off, size, mode, *verdicts))
    differential_tally.add("kernel", "emulated", "verifier: context", 1, (span + 8) * 15,
                           len(disagreements))
    assert not disagreements


# A test run's context: a multicast IPv4 frame, a __sk_buff with every field a test run takes
_FRAME = b"\x01\x00\x5e\x00\x00\x01" + bytes(range(1, 7)) + b"\x08\x00" + bytes(range(46))
_SK_BUFF = bytearray(192)
for _off, _value in ((8, 0x11223344), (32, 0x55667788), (36, 1), (40, 1), (48, 0x01020304),
                     (52, 0xA0B0C0D0), (56, 7), (60, 8), (64, 9), (164, 0x1234),
                     (176, 0x12345)):
    struct.pack_into("<I", _SK_BUFF, _off, _value)
struct.pack_into("<QQ", _SK_BUFF, 152, 0x0102030405060708, 0)
struct.pack_into("<I", _SK_BUFF, 160, 100)  # wire_len
struct.pack_into("<Q", _SK_BUFF, 184, 0x1122334455667788)
_RAW_ARGS = bytes(range(1, 97))
# program type -> how its test run is called, and whether the value comes back in ctx_out
# (written to cb[0] and cb[1], low and high half) or as the return value (two runs)
VALUE_CONTEXTS = {
    ProgType.SOCKET_FILTER: "skb", ProgType.SCHED_CLS: "skb", ProgType.CGROUP_SKB: "skb",
    ProgType.LWT_IN: "skb", ProgType.XDP: "xdp", ProgType.RAW_TRACEPOINT: "args",
    ProgType.SYSCALL: "args",
}


def _read_value(system, prog_type: int, load: bytes) -> int | str:
    """What a test run's context gives ``load`` (an instruction loading it into r2)."""
    how = VALUE_CONTEXTS[prog_type]
    flags = 1 << 4 if prog_type == ProgType.SYSCALL else 0
    if how == "skb":  # cb[0], cb[1] = low, high half
        program = (load + ins(0x63, 1, 2, 48) + ins(0x77, 2, 0, 0, 32) + ins(0x63, 1, 2, 52)
                   + ins(0xB7, 0, 0, 0, 1) + ins(0x95))
        fd = system.prog_load(prog_type, program)
        try:
            run = system.prog_test_run(fd, _FRAME, ctx_in=bytes(_SK_BUFF))
        finally:
            system.close(fd)
        return struct.unpack_from("<Q", run.ctx_out, 48)[0]
    value = 0
    for shift in (0, 32):
        program = load + ins(0xBF, 0, 2) + ins(0x77, 0, 0, 0, shift) + ins(0x95)
        fd = system.prog_load(prog_type, program, prog_flags=flags)
        try:
            if how == "xdp":
                run = system.prog_test_run(fd, _FRAME)
            else:
                run = system.prog_test_run(fd, ctx_in=_RAW_ARGS, ctx_size_out=0, repeat=0,
                                           data_size_out=0)
        finally:
            system.close(fd)
        value |= run.retval << shift
    return value


_POINTER_FIELDS = {ProgType.XDP: [range(0, 12)]}  # data, data_end, data_meta: addresses
_SKB_POINTERS = [range(76, 84), range(140, 152), range(168, 176)]  # data(_end), meta, sk


@pytest.mark.parametrize("prog_type", sorted(VALUE_CONTEXTS),
                         ids=[t.name.lower() for t in sorted(VALUE_CONTEXTS)])
def test_every_context_read_gives_the_kernels_value(kernel, emulated, prog_type,
                                                    differential_tally):
    span = {"skb": 192, "xdp": 24, "args": 96}[VALUE_CONTEXTS[prog_type]]
    pointers = _POINTER_FIELDS.get(prog_type, _SKB_POINTERS
                                   if VALUE_CONTEXTS[prog_type] == "skb" else [])
    flags = 1 << 4 if prog_type == ProgType.SYSCALL else 0
    compared, disagreements = 0, []
    for off in range(span):
        if any(off in field for field in pointers):
            continue
        for size in (1, 2, 4, 8):
            for code in (0x61 | _WIDTH[size], 0x81 | _WIDTH[size]):
                if size == 8 and code & 0xE0 == 0x80:
                    continue  # no 8-byte sign-extending load
                load = ins(code, 2, 1, off)
                if verdict(kernel, prog_type, load + EXIT_0, prog_flags=flags) != "ok":
                    continue
                values = [_read_value(system, prog_type, load) for system in (kernel, emulated)]
                compared += 1
                if values[0] != values[1]:
                    disagreements.append((off, size, hex(code), *map(hex, values)))
    differential_tally.add("kernel", "emulated", "verifier: context values", 1, compared,
                           len(disagreements))
    assert compared and not disagreements, disagreements[:40]


@pytest.mark.parametrize("prog_type", [ProgType.SOCKET_FILTER, ProgType.SCHED_CLS])
def test_a_test_runs_skb_has_a_socket(kernel, emulated, prog_type):
    # r0 = skb->sk != NULL (the NULL check the kernel requires before any use)
    program = asm("r2 = *(u64 *)(r1 +168)\nr0 = 0\nif r2 == 0 goto +1\nr0 = 1\nexit")
    for system in (kernel, emulated):
        fd = system.prog_load(prog_type, program)
        try:
            assert system.prog_test_run(fd, _FRAME).retval == 1
        finally:
            system.close(fd)


# -- helpers and the maps they are given ----------------------------------------------------------
# (key_size, value_size, max_entries) of each map type both backends create
HELPER_MAPS = {
    MapType.HASH: (4, 8, 4), MapType.ARRAY: (4, 8, 4), MapType.PROG_ARRAY: (4, 4, 4),
    MapType.PERF_EVENT_ARRAY: (4, 4, 4), MapType.PERCPU_HASH: (4, 8, 4),
    MapType.PERCPU_ARRAY: (4, 8, 4), MapType.LRU_HASH: (4, 8, 4),
    MapType.LRU_PERCPU_HASH: (4, 8, 4), MapType.LPM_TRIE: (8, 8, 4), MapType.DEVMAP: (4, 4, 4),
    MapType.SOCKMAP: (4, 4, 4), MapType.CPUMAP: (4, 4, 4), MapType.SOCKHASH: (4, 4, 4),
    MapType.QUEUE: (0, 8, 4), MapType.STACK: (0, 8, 4), MapType.DEVMAP_HASH: (4, 4, 4),
    MapType.RINGBUF: (0, 0, 4096), MapType.BLOOM_FILTER: (0, 8, 4),
}
_KEY = "r2 = r10\nr2 += -8\n*(u64 *)(r10 -8) = 0\n"
# helper -> (program with the map's fd to fill in, program type)
HELPER_CALLS = {
    "map_lookup_elem": (f"r1 = map[fd:{{fd}}]\n{_KEY}call 1\nr0 = 0\nexit", ProgType.SOCKET_FILTER),
    "map_lookup_elem, NULL checked": (f"r1 = map[fd:{{fd}}]\n{_KEY}call 1\nif r0 != 0 goto +1\n"
                                      "exit\nr0 = 0\nexit", ProgType.SOCKET_FILTER),
    "map_update_elem": (f"r1 = map[fd:{{fd}}]\n{_KEY}*(u64 *)(r10 -16) = 0\nr3 = r10\n"
                        "r3 += -16\nr4 = 0\ncall 2\nr0 = 0\nexit", ProgType.SOCKET_FILTER),
    "map_delete_elem": (f"r1 = map[fd:{{fd}}]\n{_KEY}call 3\nr0 = 0\nexit",
                        ProgType.SOCKET_FILTER),
    "map_push_elem": (f"r1 = map[fd:{{fd}}]\n{_KEY}r3 = 0\ncall 87\nr0 = 0\nexit",
                      ProgType.SOCKET_FILTER),
    "map_pop_elem": ("r1 = map[fd:{fd}]\nr2 = r10\nr2 += -8\ncall 88\nr0 = 0\nexit",
                     ProgType.SOCKET_FILTER),
    "map_peek_elem": ("r1 = map[fd:{fd}]\nr2 = r10\nr2 += -8\ncall 89\nr0 = 0\nexit",
                      ProgType.SOCKET_FILTER),
    "map_lookup_percpu_elem": (f"r1 = map[fd:{{fd}}]\n{_KEY}r3 = 0\ncall 195\nr0 = 0\nexit",
                               ProgType.SOCKET_FILTER),
    "tail_call": ("r2 = map[fd:{fd}]\nr3 = 0\ncall 12\nr0 = 0\nexit", ProgType.SOCKET_FILTER),
    "redirect_map": ("r1 = map[fd:{fd}]\nr2 = 0\nr3 = 0\ncall 51\nexit", ProgType.XDP),
    "sk_redirect_map": ("r2 = map[fd:{fd}]\nr3 = 0\nr4 = 0\ncall 52\nexit", ProgType.SK_SKB),
    "sk_redirect_hash": ("r2 = map[fd:{fd}]\nr3 = r10\nr3 += -8\n*(u64 *)(r10 -8) = 0\nr4 = 0\n"
                         "call 72\nexit", ProgType.SK_SKB),
    "trace_printk, R1 the context": ("r2 = 8\ncall 6\nr0 = 0\nexit", ProgType.SOCKET_FILTER),
    "map_lookup_elem, R1 the context": (f"{_KEY}call 1\nr0 = 0\nexit", ProgType.SOCKET_FILTER),
    "map_lookup_elem, a key past the frame": ("r1 = map[fd:{fd}]\nr2 = r10\nr2 += -2\ncall 1\n"
                                              "r0 = 0\nexit", ProgType.SOCKET_FILTER),
    "xdp_adjust_head, a modified context": ("r1 += 8\nr2 = 0\ncall 44\nr0 = 0\nexit",
                                            ProgType.XDP),
    # resolve_map_arg_type: only a map value argument is checked against a socket map's type
    "ringbuf_reserve, R2 a map pointer": ("r1 = map[fd:{fd}]\nr2 = r1\nr3 = 0\ncall 131\n"
                                          "r0 = 0\nexit", ProgType.SOCKET_FILTER),
    "for_each_map_elem, R2 the context": ("r6 = r1\nr1 = map[fd:{fd}]\nr2 = r6\nr3 = 0\nr4 = 0\n"
                                          "call 164\nr0 = 0\nexit", ProgType.SOCKET_FILTER),
    # check_stack_slot_within_bounds: memory starting at the frame's top is EACCES, even empty
    "map_lookup_elem, a key at the frame's top": ("r1 = map[fd:{fd}]\nr2 = r10\ncall 1\n"
                                                  "r0 = 0\nexit", ProgType.SOCKET_FILTER),
    "ringbuf_output, 0 bytes at the frame's top": ("r1 = map[fd:{fd}]\nr2 = r10\nr3 = 0\n"
                                                   "r4 = 0\ncall 130\nr0 = 0\nexit",
                                                   ProgType.SOCKET_FILTER),
}


@pytest.mark.parametrize("call", sorted(HELPER_CALLS))
def test_a_helper_takes_the_arguments_and_maps_the_kernel_lets_it(kernel, emulated, call,
                                                                   differential_tally):
    """Argument types, the memory a key or value lies in, which map types each helper
    takes (check_map_func_compatibility), and socket references a lookup holds."""
    text, prog_type = HELPER_CALLS[call]
    disagreements = []
    for map_type, (key_size, value_size, entries) in HELPER_MAPS.items():
        # a fresh map: the kernel ties some to a program type
        verdicts = verdicts_with_a_map(
            (kernel, emulated), (map_type, key_size, value_size, entries),
            {"map_flags": 1 if map_type == MapType.LPM_TRIE else 0}, prog_type, text)
        if verdicts[0] != verdicts[1]:
            disagreements.append((map_type.name, *verdicts))
    differential_tally.add("kernel", "emulated", "verifier: helpers", 1, len(HELPER_MAPS),
                           len(disagreements))
    assert not disagreements


# -- any helper call: arguments of every kind, on every program type ------------------------------
# The prologue leaves r6 = the context, r8 = an array value (key 0: never NULL), r9 = a hash
# value not NULL-checked, fp-16..fp-1 zeros; each argument register is then set to one of
# these (a scalar the array value holds: unknown, or bounded by a mask)
_HELPER_PROLOGUE = ("r6 = r1\n*(u64 *)(r10 -8) = 0\n*(u64 *)(r10 -16) = 0\n"
                    "r1 = map[fd:{ARRAY}]\nr2 = r10\nr2 += -8\ncall 1\nr8 = r0\n"
                    "r1 = map[fd:{HASH}]\nr2 = r10\nr2 += -8\ncall 1\nr9 = r0\n")
_HELPER_ARGS = {
    "ctx": "rX = r6", "fp-16": "rX = r10\nrX += -16", "fp-64": "rX = r10\nrX += -64",
    "fp-4": "rX = r10\nrX += -4", "fp": "rX = r10", "value": "rX = r8",
    "value_or_null": "rX = r9",
    **{str(value): f"rX = {value}" for value in (0, 1, 4, 8, 16, 64, -1, 1 << 30)},
    **{f"unknown & {mask}": f"rX = *(u64 *)(r8 +0)\nrX &= {mask}" for mask in (15, 63, 127)},
    "unknown": "rX = *(u64 *)(r8 +0)",
    **{f"map {map_type.name}": f"rX = map[fd:{{{map_type.name}}}]" for map_type in HELPER_MAPS},
}


@settings(max_examples=400, **_SETTINGS)
@given(func_id=st.sampled_from(sorted(HELPERS)),
       args=st.lists(st.sampled_from(sorted(_HELPER_ARGS)), min_size=5, max_size=5),
       prog_type=st.sampled_from(sorted({prog_type for prog_type, _, _ in CONTEXTS})))
def test_any_helper_call_gets_the_kernels_verdict(kernel, emulated, func_id, args, prog_type,
                                                  differential_tally):
    """Argument types and memory, map compatibility and each type's helpers at once (the
    kind of program that found resolve_map_arg_type's, the stack top's, may_update_sockmap's
    and the base helpers' rules)."""
    text = _HELPER_PROLOGUE + "".join(_HELPER_ARGS[arg].replace("rX", f"r{regno}") + "\n"
                                      for regno, arg in enumerate(args, 1))
    text += f"call {func_id}\nr0 = 0\nexit"
    flags = 1 << 4 if prog_type == ProgType.SYSCALL else 0
    verdicts = []
    for system in (kernel, emulated):  # fresh maps: the kernel ties some to a program type
        fds = {map_type.name: system.map_create(map_type, *spec, map_flags=int(
            map_type == MapType.LPM_TRIE)) for map_type, spec in HELPER_MAPS.items()}
        try:
            verdicts.append(verdict(system, prog_type, asm(text.format(**fds)),
                                    prog_flags=flags))
        finally:
            for fd in fds.values():
                system.close(fd)
    differential_tally.add("kernel", "emulated", "verifier: helper calls", 1, 1,
                           int(verdicts[0] != verdicts[1]))
    assert verdicts[1] == verdicts[0]


# -- which program types may call a helper (each type's func_proto) ------------------------------
# helper -> a call of it with good arguments (R1 the context)
AVAILABILITY_CALLS = {
    "probe_read_user": "r1 = r10\nr1 += -16\nr2 = 16\nr3 = 0\ncall 112\nr0 = 0\nexit",
    "get_current_pid_tgid": "call 14\nr0 = 0\nexit",
    "skb_load_bytes": "r2 = 0\nr3 = r10\nr3 += -16\nr4 = 16\ncall 26\nr0 = 0\nexit",
    "xdp_adjust_head": "r2 = 0\ncall 44\nr0 = 0\nexit",
    "redirect": "r1 = 1\nr2 = 0\ncall 23\nr0 = 0\nexit",
}


@pytest.mark.parametrize("helper", sorted(AVAILABILITY_CALLS))
def test_a_helper_is_available_to_the_program_types_the_kernel_gives_it(kernel, emulated, helper,
                                                                       differential_tally):
    """bpf_base_func_proto's helpers (those of a CAP_PERFMON loader) to every type; the
    others to the types whose func_proto names them."""
    types = sorted({prog_type for prog_type, _, _ in CONTEXTS})
    disagreements = {}
    for prog_type in types:
        flags = 1 << 4 if prog_type == ProgType.SYSCALL else 0
        verdicts = tuple(verdict(system, prog_type, asm(AVAILABILITY_CALLS[helper]),
                                 prog_flags=flags) for system in (kernel, emulated))
        if verdicts[0] != verdicts[1]:
            disagreements[helper, prog_type] = verdicts
    differential_tally.add("kernel", "emulated", "verifier: helper availability", 1, len(types),
                           len(disagreements))
    assert not disagreements


@pytest.mark.parametrize("map_type", [MapType.SOCKMAP, MapType.SOCKHASH],
                         ids=["sockmap", "sockhash"])
def test_only_some_program_types_may_delete_from_a_socket_map(kernel, emulated, map_type,
                                                             differential_tally):
    """may_update_sockmap: of the types both load, socket filter, tc and XDP programs."""
    types = sorted({prog_type for prog_type, _, _ in CONTEXTS})
    text = f"r1 = map[fd:{{fd}}]\n{_KEY}call 3\nr0 = 0\nexit"
    disagreements = []
    for prog_type in types:
        flags = 1 << 4 if prog_type == ProgType.SYSCALL else 0
        verdicts = verdicts_with_a_map((kernel, emulated), (map_type, 4, 4, 4), {}, prog_type,
                                       text, prog_flags=flags)
        if verdicts[0] != verdicts[1]:
            disagreements.append((prog_type.name, *verdicts))
    differential_tally.add("kernel", "emulated", "verifier: helper availability", 1, len(types),
                           len(disagreements))
    assert not disagreements


# -- the size argument of a helper that reads into memory -----------------------------------------
@pytest.mark.parametrize("size", [1, 8, 9, 512, 513, (1 << 29) - 1, 1 << 29, 1 << 34, 1 << 40,
                                  (1 << 63) - 1, -1])
@pytest.mark.parametrize("dst_off", [-8, -512])
def test_a_constant_size_gets_the_kernels_verdict(kernel, emulated, size, dst_off):
    """check_mem_size_reg: a size of BPF_MAX_VAR_SIZ (2^29) or more is an unbounded access
    (EACCES) before the buffer is checked; a smaller one must fit the stack (EINVAL past the
    frame's top)."""
    text = (f"r1 = r10\nr1 += {dst_off}\nr2 = {size} ll\nr3 = 0\ncall 112\nr0 = 0\nexit")
    assert verdict(emulated, ProgType.TRACEPOINT, asm(text)) == \
        verdict(kernel, ProgType.TRACEPOINT, asm(text))


# -- packet bounds: what a comparison with the packet's end proves ---------------------------------
# Each program starts with r2 = the packet pointer and r3 = what bounds it: data and data_end,
# or data_meta and data (the context's offsets differ between XDP and tc).
PACKET_HEADS = {
    (ProgType.XDP, "data"): "r2 = *(u32 *)(r1 +0)\nr3 = *(u32 *)(r1 +4)\n",
    (ProgType.XDP, "meta"): "r2 = *(u32 *)(r1 +8)\nr3 = *(u32 *)(r1 +0)\n",
    (ProgType.SCHED_CLS, "data"): "r2 = *(u32 *)(r1 +76)\nr3 = *(u32 *)(r1 +80)\n",
    (ProgType.SCHED_CLS, "meta"): "r2 = *(u32 *)(r1 +140)\nr3 = *(u32 *)(r1 +76)\n",
}
# r4 = r2 + 14 compared with r3 in each order and operator the kernel matches
COMPARE_FORMS = ["r4 > r3", "r4 < r3", "r4 >= r3", "r4 <= r3",
                 "r3 > r4", "r3 < r4", "r3 >= r4", "r3 <= r4"]
# The lines of a refusal that say why (ids left out: the kernel counts ids for more things)
_PACKET_REFUSALS = re.compile(r"invalid access to packet.*|R\d+ offset is outside of the packet"
                              r"|R\d+ invalid mem access '\w+'|R\d+ min value is negative.*"
                              r"|helper access to the packet is not allowed")


def packet_verdict(system, prog_type: int, text: str) -> tuple[str, ...]:
    """The errno's name and the lines saying why the load failed, or ("ok",)."""
    try:
        system.close(system.prog_load(prog_type, asm(text)))
    except BPFError as exc:
        reasons = [re.sub(r"id=\d+", "id=_", m.group(0))
                   for m in _PACKET_REFUSALS.finditer(exc.log or "")]
        return (errno.errorcode.get(exc.errno, str(exc.errno)), *reasons)
    return ("ok",)


def assert_same_packet_verdicts(kernel, emulated, prog_type, programs, tally, family):
    """Each program gets the kernel's verdict and reason; the refusals and acceptances both
    occur among them (so the programs test a boundary)."""
    disagreements, verdicts = [], set()
    for text in programs:
        on_kernel = packet_verdict(kernel, prog_type, text)
        on_emulated = packet_verdict(emulated, prog_type, text)
        verdicts.add(on_kernel[0])
        if on_kernel != on_emulated:
            disagreements.append((text, on_kernel, on_emulated))
    tally.add("kernel", "emulated", f"verifier: packet {family}", 1, len(programs),
              len(disagreements))
    assert not disagreements, disagreements[:5]
    return verdicts


@pytest.mark.parametrize("prog_type,pointer", sorted(PACKET_HEADS),
                         ids=[f"{t.name.lower()}-{p}" for t, p in sorted(PACKET_HEADS)])
def test_a_packet_read_is_allowed_where_a_comparison_proved_it_in_range(
        kernel, emulated, prog_type, pointer, differential_tally):
    """Every compare form, each of its branches, reads at the bound and either side of it,
    through the checked pointer and through the one compared (find_good_pkt_pointers,
    check_packet_access)."""
    programs = []
    for form in COMPARE_FORMS:
        for taken in (False, True):
            for base, first in (("r2", 12), ("r4", -2)):
                for off in range(first, first + 3):
                    for width in ("u8", "u16"):
                        read = f"r0 = *({width} *)({base} {off:+d})"
                        fall, jump = ("r0 = 0", read) if taken else (read, "r0 = 0")
                        programs.append(f"{PACKET_HEADS[prog_type, pointer]}r4 = r2\n"
                                        f"r4 += 14\nif {form} goto +2\n{fall}\nexit\n"
                                        f"{jump}\nexit")
    verdicts = assert_same_packet_verdicts(kernel, emulated, prog_type, programs,
                                           differential_tally, "compare forms")
    assert {"ok", "EACCES"} <= verdicts


@pytest.mark.parametrize("text", [
    "r0 = *(u8 *)(r2 +0)\nexit",  # no check at all
    "r4 = r2\nr4 += 14\nif w4 > w3 goto +2\nr0 = *(u8 *)(r2 +0)\nexit\nr0 = 0\nexit",  # 32 bits
    "r4 = r2\nr4 += 14\nif r4 > r2 goto +2\nr0 = *(u8 *)(r2 +0)\nexit\nr0 = 0\nexit",  # not end
    "r4 = r2\nr4 += 14\nif r4 > r3 goto +3\n*(u32 *)(r2 +10) = 1\nr0 = 0\nexit\nr0 = 0\nexit",
    "r4 = r2\nr4 += 14\nif r4 > r3 goto +3\n*(u32 *)(r2 +11) = 1\nr0 = 0\nexit\nr0 = 0\nexit",
    # a spilled copy gets the range too
    "*(u64 *)(r10 -8) = r2\nr4 = r2\nr4 += 14\nif r4 > r3 goto +3\nr5 = *(u64 *)(r10 -8)\n"
    "r0 = *(u8 *)(r5 +13)\nexit\nr0 = 0\nexit",
    # at the end (r4 >= end) nothing past r4 is readable, and past it neither
    "r4 = r2\nr4 += 14\nif r4 >= r3 goto +2\nr0 = 0\nexit\nr0 = *(u8 *)(r4 +0)\nexit",
    "r4 = r2\nr4 += 14\nif r4 > r3 goto +2\nr0 = 0\nexit\nr0 = *(u8 *)(r4 -14)\nexit",
    # a pointer known past the end, compared again: the branch is decided (the other side
    # reads r7, never set)
    "r4 = r2\nr4 += 14\nif r4 > r3 goto +2\nr0 = 0\nexit\nif r4 <= r3 goto +1\nexit\nr0 = r7\n"
    "exit",
    "r4 = r2\nr4 += 14\nif r4 >= r3 goto +2\nr0 = 0\nexit\nif r3 > r4 goto +1\nexit\nr0 = r7\n"
    "exit",
    "r4 = r2\nr4 += 14\nif r3 <= r4 goto +2\nr0 = 0\nexit\nif r4 >= r3 goto +2\nr0 = r7\nexit\n"
    "r0 = 0\nexit",
    "r4 = r2\nr4 += 14\nif r4 >= r3 goto +2\nr0 = 0\nexit\nif r4 > r3 goto +2\nr0 = 0\nexit\n"
    "r0 = r7\nexit",
])
@pytest.mark.parametrize("prog_type", [ProgType.XDP, ProgType.SCHED_CLS])
def test_a_packet_access_gets_the_kernels_verdict_and_reason(kernel, emulated, prog_type, text,
                                                             differential_tally):
    program = PACKET_HEADS[prog_type, "data"] + text
    assert_same_packet_verdicts(kernel, emulated, prog_type, [program], differential_tally,
                                "accesses")


# A variable offset (a byte of the packet) with bounds its known bits give, so that both
# verifiers have them: at most 15, 255, 0xff00; or at least 0xfff0, which a comparison cannot
# bound within MAX_PACKET_OFF (0xffff)
@pytest.mark.parametrize("offset", ["r5 &= 15", "r5 &= 255", "r5 <<= 8",
                                    "r5 &= 15\nr5 |= 0xfff0"])
def test_a_variable_offset_makes_a_new_base_with_nothing_in_range(kernel, emulated, offset,
                                                                  differential_tally):
    """pkt += var: a new id with range 0, bounded by a comparison of its own, which gives
    no range where the offset may pass MAX_PACKET_OFF; the old base keeps its range."""
    head = (PACKET_HEADS[ProgType.XDP, "data"] + "r4 = r2\nr4 += 4\nif r4 > r3 goto out\n"
            f"r5 = *(u8 *)(r2 +0)\n{offset}\nr6 = r2\nr6 += r5\n")
    checked = "r7 = r6\nr7 += 16\nif r7 > r3 goto out\n"
    reads = ["r0 = *(u8 *)(r6 +0)",  # not compared yet
             "r0 = *(u8 *)(r2 +3)", "r0 = *(u8 *)(r2 +4)",  # the old base's range
             f"{checked}r0 = *(u8 *)(r6 +15)", f"{checked}r0 = *(u16 *)(r6 +15)",
             f"{checked}r0 = *(u8 *)(r2 +3)", f"{checked}r0 = *(u8 *)(r2 +5)"]
    programs = [f"{head}{read}\nexit\nout:\nr0 = 0\nexit" for read in reads]
    verdicts = assert_same_packet_verdicts(kernel, emulated, ProgType.XDP, programs,
                                           differential_tally, "variable offsets")
    assert {"ok", "EACCES"} <= verdicts


@pytest.mark.parametrize("helper", [44, 54, 65])  # xdp_adjust_head, _meta, _tail
@pytest.mark.parametrize("use", [
    "r0 = *(u8 *)(r6 +0)", "r0 = *(u8 *)(r8 +0)",  # a packet pointer, its end
    "r9 = *(u64 *)(r10 -8)\nr0 = *(u8 *)(r9 +0)",  # a spilled packet pointer
    "r2 = *(u32 *)(r7 +0)\nr0 = *(u8 *)(r2 +0)",  # data again, not checked
    "r2 = *(u32 *)(r7 +0)\nr3 = *(u32 *)(r7 +4)\nr4 = r2\nr4 += 1\nif r4 > r3 goto out\n"
    "r0 = *(u8 *)(r2 +0)",  # data again, checked
])
def test_a_helper_that_changes_packet_data_invalidates_every_packet_pointer(
        kernel, emulated, helper, use, differential_tally):
    program = (PACKET_HEADS[ProgType.XDP, "data"]
               + "r4 = r2\nr4 += 14\nif r4 > r3 goto out\nr6 = r2\nr7 = r1\nr8 = r3\n"
               f"*(u64 *)(r10 -8) = r2\nr2 = 0\ncall {helper}\nr0 = 0\n{use}\nexit\n"
               "out:\nr0 = 0\nexit")
    assert_same_packet_verdicts(kernel, emulated, ProgType.XDP, [program], differential_tally,
                                "invalidation")


def test_pruning_keeps_a_path_with_less_of_the_packet_in_range(kernel, emulated,
                                                               differential_tally):
    """regsafe: a state where the pointer has 20 bytes in range does not cover one where it
    has none; the path with none is walked, and its read refused."""
    program = (PACKET_HEADS[ProgType.XDP, "data"]
               + "r4 = r2\nr4 += 20\nif r4 > r3 goto out\nr6 = *(u8 *)(r2 +0)\n"
               "if r6 != 0 goto reload\ngoto read\nreload:\nr2 = *(u32 *)(r1 +0)\nread:\n"
               "r0 = *(u8 *)(r2 +10)\nexit\nout:\nr0 = 0\nexit")
    verdicts = assert_same_packet_verdicts(kernel, emulated, ProgType.XDP, [program],
                                           differential_tally, "pruning")
    assert verdicts == {"EACCES"}


@pytest.mark.parametrize("key_off", [9, 10, 11])
def test_a_helper_reads_packet_memory_only_within_the_proved_range(kernel, emulated, lookup_maps,
                                                                   key_off, differential_tally):
    """check_helper_mem_access: a 4-byte key at a packet pointer must lie in its range (14
    bytes here)."""
    text = (PACKET_HEADS[ProgType.XDP, "data"] + "r4 = r2\nr4 += 14\nif r4 > r3 goto out\n"
            f"r2 += {key_off}\nr1 = map[fd:{{fd}}]\ncall 1\nout:\nr0 = 0\nexit")
    verdicts = [packet_verdict(system, ProgType.XDP, text.format(fd=lookup_maps[system]["hash"]))
                for system in (kernel, emulated)]
    differential_tally.add("kernel", "emulated", "verifier: packet helper memory", 1, 1,
                           int(verdicts[0] != verdicts[1]))
    assert verdicts[1] == verdicts[0]
    assert verdicts[0][0] == ("ok" if key_off <= 10 else "EACCES")


@settings(max_examples=400, **_SETTINGS)
@given(head=st.sampled_from(sorted(PACKET_HEADS)), form=st.sampled_from(COMPARE_FORMS),
       taken=st.booleans(), checked=st.integers(-2, 80), off=st.integers(-4, 90),
       width=st.sampled_from(["u8", "u16", "u32", "u64"]), through_checked=st.booleans())
def test_any_checked_packet_read_gets_the_kernels_verdict(kernel, emulated, head, form, taken,
                                                         checked, off, width, through_checked,
                                                         differential_tally):
    """Any bound, read offset, size, compare form and branch: the same verdict and reason."""
    prog_type, _ = head
    read = f"r0 = *({width} *)({'r4' if through_checked else 'r2'} {off:+d})"
    fall, jump = ("r0 = 0", read) if taken else (read, "r0 = 0")
    text = (f"{PACKET_HEADS[head]}r4 = r2\nr4 += {checked}\nif {form} goto +2\n{fall}\nexit\n"
            f"{jump}\nexit")
    verdicts = [packet_verdict(system, prog_type, text) for system in (kernel, emulated)]
    differential_tally.add("kernel", "emulated", "verifier: packet reads", 1, 1,
                           int(verdicts[0] != verdicts[1]))
    assert verdicts[1] == verdicts[0]


_SKB_CHECKED = "r6 = r1\n" + PACKET_HEADS[ProgType.SCHED_CLS, "data"] + \
    "r4 = r2\nr4 += 14\nif r4 > r3 goto out\n"
_XDP_CHECKED = PACKET_HEADS[ProgType.XDP, "data"] + "r4 = r2\nr4 += 14\nif r4 > r3 goto out\n"
# helper -> (program type, the map it is given: (type, key, value, entries) or None, program
# passing it 14 checked bytes of the packet as memory)
PACKET_HELPER_CALLS = {
    "trace_printk": (ProgType.XDP, None, f"{_XDP_CHECKED}r1 = r2\nr2 = 4\ncall 6"),
    "map_update_elem": (ProgType.XDP, (MapType.HASH, 4, 4, 4),
                        f"{_XDP_CHECKED}r1 = map[fd:{{fd}}]\nr3 = r2\nr3 += 4\nr4 = 0\ncall 2"),
    "map_delete_elem": (ProgType.XDP, (MapType.HASH, 4, 4, 4),
                        f"{_XDP_CHECKED}r1 = map[fd:{{fd}}]\ncall 3"),
    "map_lookup_percpu_elem": (ProgType.XDP, (MapType.PERCPU_HASH, 4, 4, 4),
                               f"{_XDP_CHECKED}r1 = map[fd:{{fd}}]\nr3 = 0\ncall 195"),
    "map_push_elem": (ProgType.XDP, (MapType.QUEUE, 0, 4, 4),
                      f"{_XDP_CHECKED}r1 = map[fd:{{fd}}]\nr3 = 0\ncall 87"),
    "map_pop_elem": (ProgType.XDP, (MapType.QUEUE, 0, 4, 4),
                     f"{_XDP_CHECKED}r1 = map[fd:{{fd}}]\ncall 88"),
    "map_peek_elem": (ProgType.XDP, (MapType.QUEUE, 0, 4, 4),
                      f"{_XDP_CHECKED}r1 = map[fd:{{fd}}]\ncall 89"),
    "ringbuf_output": (ProgType.XDP, (MapType.RINGBUF, 0, 0, 4096),
                       f"{_XDP_CHECKED}r1 = map[fd:{{fd}}]\nr3 = 4\nr4 = 0\ncall 130"),
    "skb_load_bytes": (ProgType.SCHED_CLS, None,
                       f"{_SKB_CHECKED}r3 = r2\nr1 = r6\nr2 = 0\nr4 = 4\ncall 26"),
}


@pytest.mark.parametrize("helper", sorted(PACKET_HELPER_CALLS))
def test_only_helpers_with_packet_access_take_packet_memory(kernel, emulated, helper,
                                                            differential_tally):
    """may_access_direct_pkt_data: a helper whose proto has pkt_access takes a packet
    pointer as memory (within its range); any other is refused before its argument types
    are checked."""
    prog_type, map_spec, text = PACKET_HELPER_CALLS[helper]
    verdicts = []
    for system in (kernel, emulated):
        fd = system.map_create(*map_spec) if map_spec else None
        try:
            verdicts.append(packet_verdict(system, prog_type,
                                           f"{text.format(fd=fd)}\nout:\nr0 = 0\nexit"))
        finally:
            if fd is not None:
                system.close(fd)
    differential_tally.add("kernel", "emulated", "verifier: packet helper memory", 1, 1,
                           int(verdicts[0] != verdicts[1]))
    assert verdicts[1] == verdicts[0]
