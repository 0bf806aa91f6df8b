"""Load-time checks: the emulated verifier rejects what the kernel's rejects, with its errno and
message (run on both backends; the kernel's log must hold the same message)."""

from __future__ import annotations

import errno
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pybpf.emulated.prog.verifier import VerifierReject, bpf_check
from pybpf.errors import BPFError, VerifierError
from pybpf.uapi import ProgType


def ins(code: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
    return struct.pack("<BBhi", code, dst | src << 4, off, imm)


EXIT = ins(0x95)
R0_0 = ins(0xB7, 0, 0, 0, 0)

# (name, program, errno, message the log holds)
REJECTIONS = [
    ("unknown_opcode", ins(0x8D) + EXIT, errno.EINVAL, "unknown opcode 8d"),
    ("neg_with_register_source", ins(0x8F) + EXIT, errno.EINVAL, "unknown opcode 8f"),
    ("jump_out_of_range", R0_0 + ins(0x05, off=10) + EXIT, errno.EINVAL,
     "jump out of range from insn 1 to 12"),
    ("unknown_helper", ins(0x85, imm=999) + EXIT, errno.EINVAL, "invalid func unknown#999"),
    ("helper_of_another_program_type", ins(0x85, imm=51) + EXIT, errno.EINVAL,
     "program of this type cannot use helper bpf_redirect_map#51"),
    ("uninitialised_register_read", ins(0xBF, 0, 2) + EXIT, errno.EACCES, "R2 !read_ok"),
    ("r0_unset_at_exit", EXIT, errno.EACCES, "R0 !read_ok"),
    ("r0_unset_on_one_path", ins(0x15, 1, 0, 1, 0) + EXIT + ins(0x05, off=-3),
     errno.EACCES, "R0 !read_ok"),
    ("argument_registers_clobbered_by_call", ins(0x85, imm=7) + ins(0xBF, 0, 1) + EXIT,
     errno.EACCES, "R1 !read_ok"),
    ("ld_abs_needs_r6", ins(0x30) + EXIT, errno.EACCES, "R6 !read_ok"),
    ("frame_pointer_write", ins(0xB7, 10, 0, 0, 1) + R0_0 + EXIT, errno.EACCES,
     "frame pointer is read only"),
    ("no_exit_at_the_end", R0_0, errno.EINVAL, "last insn is not an exit or jmp"),
    ("lddw_cut_off_at_the_end", R0_0 + EXIT + ins(0x18, 1, 0, 0, 1), errno.EINVAL,
     "last insn is not an exit or jmp"),
    ("stack_write_above_the_frame", ins(0x7A, 10, 0, 8, 1) + R0_0 + EXIT, errno.EACCES,
     "invalid write to stack R10 off=8 size=8"),
    ("stack_read_at_the_frame_pointer", ins(0x79, 0, 10, 0) + EXIT, errno.EACCES,
     "invalid read from stack R10 off=0 size=8"),
    ("misaligned_stack_access", ins(0x7A, 10, 0, -516, 1) + R0_0 + EXIT, errno.EACCES,
     "misaligned stack access off 0+0+-516 size 8"),
    ("division_by_constant_zero", ins(0xB7, 0, 0, 0, 1) + ins(0x37) + EXIT, errno.EINVAL,
     "div by zero"),
    ("shift_by_64", ins(0xB7, 0, 0, 0, 1) + ins(0x67, imm=64) + EXIT, errno.EINVAL,
     "invalid shift 64"),
    ("shift32_by_32", ins(0xB7, 0, 0, 0, 1) + ins(0x64, imm=32) + EXIT, errno.EINVAL,
     "invalid shift 32"),
    ("unreachable_code", R0_0 + EXIT + R0_0 + EXIT, errno.EINVAL, "unreachable insn 2"),
    ("jump_into_the_middle_of_lddw", ins(0x05, off=1) + ins(0x18, 1, 0, 0, 1) + ins(0)
     + R0_0 + EXIT, errno.EINVAL, "unreachable insn 1"),
    ("reserved_field_in_mov", ins(0xB7, 0, 1) + EXIT, errno.EINVAL,
     "BPF_MOV uses reserved fields"),
    ("reserved_field_in_ldx", ins(0x61, 0, 1, 0, 5) + EXIT, errno.EINVAL,
     "BPF_LDX uses reserved fields"),
    ("reserved_field_in_exit", R0_0 + ins(0x95, imm=1), errno.EINVAL,
     "BPF_EXIT uses reserved fields"),
    ("register_eleven", ins(0xB7, 11) + EXIT, errno.EINVAL, "R11 is invalid"),
    ("map_fd_not_open", ins(0x18, 1, 1, 0, 999) + ins(0) + R0_0 + EXIT, errno.EBADF,
     "fd 999 is not pointing to valid bpf_map"),
    ("call_outside_the_program", ins(0x85, 0, 1, 0, 10) + EXIT, errno.EINVAL,
     "call to invalid destination"),
    ("jump_out_of_a_subprogram", ins(0x85, 0, 1, 0, 1) + EXIT + R0_0 + ins(0x05, off=-4)
     + EXIT, errno.EINVAL, "jump out of range from insn 3 to 0"),
    ("recursion", ins(0x85, 0, 1, 0, -1) + EXIT, errno.E2BIG,
     "the call stack of 9 frames is too deep"),
    ("kfunc_call", ins(0x85, 0, 2, 0, 5) + R0_0 + EXIT, errno.EINVAL,
     "kernel btf_id 5 is not a function"),
    ("empty_program", b"", errno.E2BIG, ""),
    ("callback_without_btf", ins(0x18, 2, 4, 0, 3) + ins(0) + R0_0 + EXIT + R0_0 + EXIT,
     errno.EINVAL, "missing btf func_info"),
]


@pytest.mark.parametrize("program,err,message", [pytest.param(p, e, m, id=name)
                                                 for name, p, e, m in REJECTIONS])
def test_verifier_rejects_as_the_kernel_does(backend, program, err, message):
    with pytest.raises(BPFError) as info:
        fd = backend.prog_load(ProgType.SOCKET_FILTER, program)
        backend.close(fd)
    assert info.value.errno == err
    if isinstance(info.value, VerifierError):
        assert message in info.value.log
        assert message in str(info.value)


def test_rejection_log_is_the_verifier_message():
    with pytest.raises(VerifierReject) as info:
        bpf_check(ins(0xBF, 0, 2) + EXIT, ProgType.SOCKET_FILTER, lambda fd: None,
                  nr_cpu_ids=1)
    assert info.value.log == "R2 !read_ok\n"
    assert info.value.errno == errno.EACCES


ACCEPTED = [
    ("bounded_loop", ins(0xB7, 0, 0, 0, 0) + ins(0x07, 0, 0, 0, 1) + ins(0xA5, 0, 0, -2, 10)
     + EXIT),
    ("both_paths_set_r0", ins(0x15, 1, 0, 2, 0) + ins(0xB7, 0, 0, 0, 1) + ins(0x05, off=1)
     + ins(0xB7, 0, 0, 0, 2) + EXIT),
    ("subprogram_call", ins(0xB7, 1, 0, 0, 3) + ins(0x85, 0, 1, 0, 1) + EXIT
     + ins(0xBF, 0, 1) + EXIT),
    ("stack_round_trip", ins(0x7A, 10, 0, -512, 1) + ins(0x79, 0, 10, -512) + EXIT),
    ("helper_with_no_arguments", ins(0x85, imm=8) + EXIT),
]


@pytest.mark.parametrize("program", [pytest.param(p, id=name) for name, p in ACCEPTED])
def test_verifier_accepts_what_the_kernel_accepts(backend, program):
    fd = backend.prog_load(ProgType.SOCKET_FILTER, program)
    try:
        assert backend.prog_get_info(fd).type == ProgType.SOCKET_FILTER
    finally:
        backend.close(fd)


def test_max_ctx_offset_follows_copies_of_the_context_pointer():
    # r6 = r1; r0 = *(u64 *)(r6 + 16); r1 is clobbered, so r1 + 40 is not the context
    program = (ins(0xBF, 6, 1) + ins(0x79, 0, 6, 16) + ins(0x85, imm=8) + ins(0xBF, 1, 0)
               + EXIT)
    verified = bpf_check(program, ProgType.RAW_TRACEPOINT, lambda fd: None, nr_cpu_ids=1)
    assert verified.max_ctx_offset == 24


@pytest.mark.parametrize("ctx_size,ok", [(8, False), (16, True)])
def test_raw_tracepoint_ctx_must_cover_what_the_program_reads(backend, ctx_size, ok):
    fd = backend.prog_load(ProgType.RAW_TRACEPOINT, ins(0x79, 0, 1, 8) + EXIT)
    try:
        ctx = bytes(8) + (7).to_bytes(8, "little")
        if ok:
            run = backend.prog_test_run(fd, ctx_in=ctx[:ctx_size], ctx_size_out=0, repeat=0)
            assert run.retval == 7
        else:
            with pytest.raises(BPFError) as info:
                backend.prog_test_run(fd, ctx_in=ctx[:ctx_size], ctx_size_out=0, repeat=0)
            assert info.value.errno == errno.EINVAL
    finally:
        backend.close(fd)


@pytest.mark.parametrize("license,ok", [("GPL", True), ("Dual BSD/GPL", True), ("MIT", False)])
def test_gpl_only_helper_needs_a_gpl_compatible_license(backend, license, ok):
    program = (ins(0x7A, 10, 0, -8, 0) + ins(0xBF, 1, 10) + ins(0x07, 1, 0, 0, -8)
               + ins(0xB7, 2, 0, 0, 1) + ins(0x85, imm=6) + EXIT)  # trace_printk("", 1)
    if ok:
        backend.close(backend.prog_load(ProgType.RAW_TRACEPOINT, program, license=license))
        return
    with pytest.raises(VerifierError) as info:
        backend.prog_load(ProgType.RAW_TRACEPOINT, program, license=license)
    assert info.value.errno == errno.EINVAL
    assert "cannot call GPL-restricted function from non-GPL compatible program" in \
        info.value.log


def test_syscall_programs_must_be_sleepable(backend):
    with pytest.raises(VerifierError) as info:
        backend.prog_load(ProgType.SYSCALL, R0_0 + EXIT)
    assert info.value.errno == errno.EINVAL
    assert "Syscall programs can only be sleepable" in info.value.log


def _lookup_then(map_fd: int, *access: bytes) -> bytes:
    """key 0 on the stack, r0 = lookup(map, &key); if r0: <access>; r0 = 0; exit."""
    body = b"".join(access)
    return (ins(0x62, 10, 0, -4, 0) + ins(0xBF, 2, 10) + ins(0x07, 2, 0, 0, -4)
            + ins(0x18, 1, 1, 0, map_fd) + ins(0) + ins(0x85, imm=1)
            + ins(0x15, 0, 0, len(body) // 8, 0) + body + R0_0 + EXIT)


@pytest.mark.parametrize("flag,access,message", [
    (0x100, ins(0x79, 3, 0, 0), "read from map forbidden, value_size=8 off=0 size=8"),
    (0x80, ins(0x62, 0, 0, 4, 1), "write into map forbidden, value_size=8 off=4 size=4"),
    (0x80, ins(0xBF, 3, 0) + ins(0x07, 3, 0, 0, 2) + ins(0x73, 3, 0, 1, 0),
     "write into map forbidden, value_size=8 off=3 size=1"),
])
def test_prog_access_flags_of_a_map_are_enforced_at_load(backend, flag, access, message):
    map_fd = backend.map_create(2, 4, 8, 1, map_flags=flag)  # ARRAY
    with pytest.raises(VerifierError) as info:
        backend.prog_load(ProgType.SOCKET_FILTER, _lookup_then(map_fd, access))
    assert info.value.errno == errno.EACCES
    assert message in info.value.log


def test_update_helper_on_a_rdonly_prog_map_is_refused(backend):
    map_fd = backend.map_create(1, 4, 8, 1, map_flags=0x80)  # HASH
    program = (ins(0x62, 10, 0, -4, 0) + ins(0xBF, 2, 10) + ins(0x07, 2, 0, 0, -4)
               + ins(0x18, 1, 1, 0, map_fd) + ins(0) + ins(0x85, imm=3) + EXIT)
    with pytest.raises(VerifierError) as info:
        backend.prog_load(ProgType.SOCKET_FILTER, program)
    assert info.value.errno == errno.EACCES
    assert "write into map forbidden" in info.value.log


def test_reading_a_rdonly_prog_map_is_allowed(backend):
    map_fd = backend.map_create(2, 4, 8, 1, map_flags=0x80)
    fd = backend.prog_load(ProgType.SOCKET_FILTER, _lookup_then(map_fd, ins(0x79, 3, 0, 0)))
    try:
        assert backend.prog_get_info(fd).map_ids == (backend.map_get_info(map_fd).id,)
    finally:
        backend.close(fd)
        backend.close(map_fd)


def _ctx_access(size: int, off: int, write: bool) -> bytes:
    width = {1: 0x10, 2: 0x08, 4: 0x00, 8: 0x18}[size]
    if write:
        return ins(0x62 | width, 1, 0, off, 1) + R0_0 + EXIT  # *(size *)(r1 + off) = 1
    return ins(0x61 | width, 0, 1, off) + EXIT  # r0 = *(size *)(r1 + off)


CTX_ACCESSES = [
    (ProgType.XDP, 4, 0, False), (ProgType.XDP, 4, 20, False), (ProgType.XDP, 4, 24, False),
    (ProgType.XDP, 8, 0, False), (ProgType.XDP, 2, 12, False), (ProgType.XDP, 4, 0, True),
    (ProgType.SOCKET_FILTER, 4, 0, False), (ProgType.SOCKET_FILTER, 4, 76, False),
    (ProgType.SOCKET_FILTER, 4, 2, False), (ProgType.SOCKET_FILTER, 4, 8, True),
    (ProgType.SOCKET_FILTER, 1, 48, True), (ProgType.SOCKET_FILTER, 8, 48, True),
    (ProgType.SOCKET_FILTER, 4, 164, False), (ProgType.SOCKET_FILTER, 4, 160, False),
    (ProgType.SCHED_CLS, 4, 76, False), (ProgType.SCHED_CLS, 4, 140, False),
    (ProgType.SCHED_CLS, 4, 192, False), (ProgType.SCHED_CLS, 2, 0, False),
    (ProgType.SCHED_CLS, 8, 152, False), (ProgType.SCHED_CLS, 4, 152, False),
    (ProgType.SCHED_CLS, 8, 152, True), (ProgType.SCHED_CLS, 4, 8, True),
    (ProgType.SCHED_CLS, 2, 8, True), (ProgType.SCHED_CLS, 4, 0, True),
    (ProgType.SCHED_CLS, 4, 72, True), (ProgType.SCHED_CLS, 4, 16, True),
    (ProgType.TRACEPOINT, 8, 0, False), (ProgType.TRACEPOINT, 8, 8, False),
    (ProgType.TRACEPOINT, 4, 12, False), (ProgType.TRACEPOINT, 8, 8192, False),
    (ProgType.TRACEPOINT, 4, 8, True),
    (ProgType.RAW_TRACEPOINT, 4, 0, False), (ProgType.RAW_TRACEPOINT, 8, 88, False),
    (ProgType.RAW_TRACEPOINT, 8, 96, False), (ProgType.RAW_TRACEPOINT, 8, 0, True),
]


@pytest.mark.parametrize("prog_type,size,off,write", [
    pytest.param(*case, id=f"{case[0].name.lower()}-{'w' if case[3] else 'r'}{case[1]}@{case[2]}")
    for case in CTX_ACCESSES])
def test_context_access_is_checked_at_load_as_the_kernel_does(kernel, emulated, prog_type,
                                                              size, off, write):
    results = []
    for system in (kernel, emulated):
        try:
            system.close(system.prog_load(prog_type, _ctx_access(size, off, write)))
            results.append("ok")
        except BPFError as exc:
            results.append((exc.errno, getattr(exc, "log", "").strip().splitlines()[-1:]))
    kernel_result, emulated_result = results
    if kernel_result == "ok":
        assert emulated_result == "ok"
    else:
        assert emulated_result != "ok" and emulated_result[0] == kernel_result[0]
        assert f"invalid bpf_context access off={off} size={size}" in emulated_result[1][0]


# -- random programs: the emulated verifier's verdict is the kernel's -----------------------------
_ALU_OPS = [0x07, 0x0F, 0x17, 0x1F, 0x27, 0x2F, 0x37, 0x3F, 0x47, 0x4F, 0x57, 0x5F, 0x67, 0x6F,
            0x77, 0x7F, 0x87, 0x97, 0x9F, 0xA7, 0xAF, 0xB7, 0xBF, 0xC7, 0xCF,
            0x04, 0x0C, 0x24, 0x2C, 0x34, 0x3C, 0x64, 0x6C, 0x94, 0x9C, 0xB4, 0xBC, 0xC4]


@st.composite
def scalar_programs(draw) -> bytes:
    """ALU on R0-R9 (set or not) and R10-relative stack loads/stores, in or out of bounds.
    R1 starts as a scalar: pointer arithmetic on the context is not modelled."""
    program = ins(0xB7, 1, 0, 0, 0)
    for _ in range(draw(st.integers(1, 12))):
        if draw(st.booleans()):
            code = draw(st.sampled_from(_ALU_OPS))
            dst, src = draw(st.integers(0, 9)), draw(st.integers(0, 9))
            imm = draw(st.sampled_from([0, 1, 7, 31, 32, 63, 64, -1]))
            if code & 0x08:  # register source
                program += ins(code, dst, src)
            elif code & 0xF0 == 0x80:  # neg
                program += ins(code, dst)
            else:
                program += ins(code, dst, 0, 0, imm)
        elif draw(st.integers(0, 3)) == 0:  # a forward jump, a helper call
            if draw(st.booleans()):
                code = draw(st.sampled_from([0x15, 0x55, 0x25, 0x65, 0x16, 0x1D, 0x5D]))
                program += ins(code, draw(st.integers(0, 9)), draw(st.integers(0, 9)),
                               draw(st.integers(0, 2)), draw(st.sampled_from([0, 1, -1])))
            else:
                program += ins(0x85, imm=draw(st.sampled_from([7, 8, 5])))
        else:
            size = draw(st.sampled_from([1, 2, 4, 8]))
            width = {1: 0x10, 2: 0x08, 4: 0x00, 8: 0x18}[size]
            off = draw(st.sampled_from([-520, -516, -512, -9, -8, -4, -3, -1, 0, 8]))
            reg = draw(st.integers(0, 9))
            kind = draw(st.sampled_from(["ldx", "st", "stx"]))
            if kind == "ldx":
                program += ins(0x61 | width, reg, 10, off)
            elif kind == "st":
                program += ins(0x62 | width, 10, 0, off, 1)
            else:
                program += ins(0x63 | width, 10, reg, off)
    return program + R0_0 + R0_0 + ins(0x95)  # room for jumps to land


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(program=scalar_programs())
def test_random_program_gets_the_kernels_verdict(kernel, emulated, program):
    verdicts = []
    for system in (kernel, emulated):
        try:
            system.close(system.prog_load(ProgType.SOCKET_FILTER, program))
            verdicts.append("accepted")
        except BPFError as exc:
            log = getattr(exc, "log", "").strip().splitlines()
            reason = [line for line in log if not line.startswith("processed ")][-1:]
            verdicts.append((exc.errno, reason))
    assert verdicts[0] == verdicts[1]


# An iterator over [0, 10) at fp-16, then a loop that calls next for ever (never testing R0).
NEXT_FOREVER = ("r1 = r10\nr1 += -16\nr2 = 0\nr3 = 10\ncall kernel-function bpf_iter_num_new\n"
                "l:\nr1 = r10\nr1 += -16\ncall kernel-function bpf_iter_num_next\ngoto l\n")


def test_a_drained_iterators_endless_loop_walks_to_the_insn_limit(emulated, monkeypatch):
    """The next call forces a checkpoint each round, where the path's own DRAINED round is no
    hit, and the counters it resets keep a state from ever being kept at the loop's head,
    where the repeat would be an infinite loop: as in the kernel, the walk goes on to the
    instruction limit (lowered here: the 1M walk takes seconds)."""
    from pybpf.emulated.prog import verifier
    from pybpf.programs import Program, ProgramSpec

    monkeypatch.setattr(verifier, "BPF_COMPLEXITY_LIMIT_INSNS", 10_000)
    with pytest.raises(BPFError) as info:
        Program.load(ProgramSpec(ProgType.SOCKET_FILTER, NEXT_FOREVER), emulated).close()
    assert info.value.errno == errno.E2BIG
    assert "BPF program is too large. Processed 10001 insn" in str(info.value)


def test_an_endless_loop_without_a_forced_checkpoint_is_found_at_its_head(backend):
    """Without a next call in it, the loop's head gets a checkpoint once 2 jumps and 8 insns
    were walked since the last one, and the next round finds its state repeated. (Its first
    round, R1 the context, is no checkpoint: had it been kept, it would cover the next ones,
    R1 being dead there, and the loop would be taken for one already explored.)"""
    from pybpf.programs import Program, ProgramSpec

    with pytest.raises(BPFError) as info:
        Program.load(ProgramSpec(ProgType.SOCKET_FILTER, "l:\nr1 = r10\ngoto l\n"),
                     backend).close()
    assert info.value.errno == errno.EINVAL
    assert "infinite loop detected at insn 0" in info.value.log


@pytest.mark.parametrize("cpus", [1, 3, 64, 512])
def test_the_cpu_id_is_bounded_by_the_emulated_machines_cpus(cpus):
    """bpf_get_smp_processor_id's result is in [0, nr_cpu_ids - 1] for the machine the program
    runs on, which may have more CPUs than the host: a branch past its last CPU is dead (the
    uninitialised R7 behind it never read), one to its last CPU is walked."""
    from pybpf import system
    from pybpf.programs import Program, ProgramSpec

    machine = system("emulated", cpus=cpus)
    dead = f"call 8\nif r0 > {cpus - 1} goto +2\nr0 = 0\nexit\nr0 = r7\nexit\n"
    Program.load(ProgramSpec(ProgType.SOCKET_FILTER, dead), machine).close()
    walked = f"call 8\nif r0 == {cpus - 1} goto +2\nr0 = 0\nexit\nr0 = r7\nexit\n"
    with pytest.raises(BPFError) as info:
        Program.load(ProgramSpec(ProgType.SOCKET_FILTER, walked), machine).close()
    assert "R7 !read_ok" in info.value.log
