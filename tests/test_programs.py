"""ProgramSpec / Program on both backends, and the corpus through the assembler and the
disassembler."""

from __future__ import annotations

import errno
import gc
import os
import threading
import weakref

import pytest

from programs.corpus import CASES, PACKET
from programs.runner import spec_of
from pybpf.asm import (
    FP,
    MNEMONICS,
    OPCODES,
    R0,
    R1,
    R2,
    assemble,
    assemble_text,
    atomic_add64,
    call,
    decode,
    disassemble,
    encode,
    exit_,
    jeq,
    jne,
    label,
    ld_map_fd,
    mnemonic,
    mov32,
    mov64,
    stw,
)
from pybpf.asm import add64 as add64_
from pybpf.errors import BPFError, VerifierError
from pybpf.maps import Map, MapSpec
from pybpf.programs import Program, ProgramSpec
from pybpf.uapi import MapType, ProgType


def _all_instructions():
    for case in CASES:
        yield case, spec_of(case).assembly().instructions
        for _, (_, items) in case.progs.items():
            yield case, assemble(items).instructions


# -- the corpus through the assembler and disassembler --------------------------------------------

def test_corpus_names_are_unique():
    assert len({case.name for case in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=str)
def test_corpus_program_round_trips_through_bytes_and_text(case):
    insns = spec_of(case).assembly().instructions
    raw = encode(insns)
    assert decode(raw) == insns
    assert encode(decode(raw)) == raw
    assert assemble_text(disassemble(raw)).instructions == insns


def test_corpus_uses_every_opcode():
    used = {insn.opcode for _, insns in _all_instructions() for insn in insns}
    missing = sorted(OPCODES[code].name for code in set(OPCODES) - used)
    assert not missing, f"no corpus program uses {missing}"


def test_corpus_uses_every_alu_jump_memory_and_atomic_variant():
    used = {mnemonic(insn) for _, insns in _all_instructions() for insn in insns}
    not_runnable = {"call_kfunc"}  # needs BTF ids of this kernel's functions
    variants = {name for name in MNEMONICS if name[-2:] in ("32", "64") or name.startswith(
        ("ld", "st", "j", "atomic_", "load_", "store_"))}
    # the generic forms (ldx, st, atomic, ...) take the size as an argument
    generic = {"ldx", "ldxs", "st", "stx", "ld_abs", "ld_ind", "load_acquire", "store_release"}
    # pseudo lddw sources that need BTF, callbacks or an fd_array
    not_runnable |= {"ld_btf_id", "ld_func", "ld_map_idx", "ld_map_idx_value"}
    missing = sorted(variants - used - not_runnable - generic)
    assert not missing, f"no corpus program uses {missing}"


# -- Program on either backend -------------------------------------------------------------------

def _counter_spec(map_ref) -> ProgramSpec:
    """XDP: counts[0] += 1, returns 2 (XDP_PASS)."""
    return ProgramSpec(ProgType.XDP, [
        ld_map_fd(R1, map_ref), stw(FP, -4, 0), mov64(R2, FP), add64_(R2, -4),
        call("map_lookup_elem"), jeq(R0, 0, "out"), mov64(R1, 1), atomic_add64(R0, 0, R1),
        label("out"), mov64(R0, 2), exit_()], name="counter")


def _counts(system) -> Map:
    return Map(MapSpec(MapType.ARRAY, 4, 8, 1, key=int, value=int), system)


def test_program_loads_runs_and_updates_the_map_it_references(backend):
    counts = _counts(backend)
    with Program.load(_counter_spec(counts), backend) as prog:
        for _ in range(3):
            assert prog.test_run(PACKET).retval == 2
    assert counts[0] == 3


def test_program_keeps_referenced_maps_alive(backend):
    counts = _counts(backend)
    ref = weakref.ref(counts)
    prog = Program.load(_counter_spec("counts"), backend, maps={"counts": counts})
    del counts
    gc.collect()
    assert ref() is not None
    assert prog.test_run(PACKET).retval == 2
    assert ref()[0] == 1
    prog.close()
    gc.collect()
    assert ref() is None


def test_map_names_bind_at_load(backend):
    counts = _counts(backend)
    spec = _counter_spec("counts")
    with Program.load(spec, backend, maps={"counts": counts}) as prog:
        prog.test_run(PACKET)
    assert counts[0] == 1
    with pytest.raises(BPFError, match="not bound") as err:
        Program.load(spec, backend)
    assert err.value.errno == errno.EINVAL


def test_map_of_another_system_is_refused(kernel, emulated):
    counts = _counts(emulated)
    with pytest.raises(BPFError, match="belongs to the emulated system") as err:
        Program.load(_counter_spec(counts), kernel)
    assert err.value.errno == errno.EINVAL


def test_closed_map_is_refused(backend):
    counts = _counts(backend)
    counts.close()
    with pytest.raises(BPFError, match="no open fd") as err:
        Program.load(_counter_spec(counts), backend)
    assert err.value.errno == errno.EBADF


def test_map_binding_that_is_not_a_map_is_type_error(backend):
    with pytest.raises(TypeError, match="must be a Map"):
        Program.load(ProgramSpec(ProgType.XDP, [ld_map_fd(R1, "m"), mov64(R0, 0), exit_()]),
                     backend, maps={"m": "counts"})


def test_program_spec_takes_a_type_name_and_refuses_an_unknown_one():
    assert ProgramSpec("xdp", [exit_()]).prog_type is ProgType.XDP
    with pytest.raises(ValueError, match="unknown program type 'xdpp'"):
        ProgramSpec("xdpp", [exit_()])
    with pytest.raises(TypeError, match="instructions must be"):
        ProgramSpec(ProgType.XDP, 5)
    with pytest.raises(ValueError, match="prog_flags must be an unsigned 32-bit int"):
        ProgramSpec(ProgType.XDP, [exit_()], prog_flags=-1)


@pytest.mark.parametrize("kwargs,error,match", [
    ({"data": "packet"}, TypeError, "data must be bytes"),
    ({"data": PACKET, "ctx": 5}, TypeError, "ctx must be bytes"),
    ({"data": PACKET, "repeat": -1}, ValueError, "repeat must be an unsigned 32-bit int"),
    ({"data": PACKET, "cpu": 1 << 32}, ValueError, "cpu must be an unsigned 32-bit int"),
])
def test_test_run_bad_arguments_are_clear_errors(backend, kwargs, error, match):
    with Program.load(ProgramSpec(ProgType.XDP, [mov64(R0, 2), exit_()]), backend) as prog:
        with pytest.raises(error, match=match):
            prog.test_run(**kwargs)


def test_program_from_fd_that_is_not_an_int_is_type_error(backend):
    with pytest.raises(TypeError, match="needs an open program fd"):
        Program.from_fd("3", backend)


def test_map_info_of_a_program_fd_and_program_info_of_a_map_fd_are_einval(backend):
    # The kernel fills whichever info the fd's object has: a program's must not read as a map's.
    counts = _counts(backend)
    with Program.load(ProgramSpec(ProgType.XDP, [mov64(R0, 2), exit_()]), backend) as prog:
        for call in (lambda: backend.map_get_info(prog.fd),
                     lambda: backend.prog_get_info(counts.fd)):
            with pytest.raises(BPFError) as err:
                call()
            assert err.value.errno == errno.EINVAL


def test_empty_program_is_e2big_saying_why(backend):
    with pytest.raises(BPFError, match="instructions") as err:
        Program.load(ProgramSpec(ProgType.XDP, []), backend)
    assert err.value.errno == errno.E2BIG


def test_verifier_rejection_carries_the_log(backend):
    spec = ProgramSpec(ProgType.XDP, [exit_()], name="no_r0")
    with pytest.raises(VerifierError) as err:
        Program.load(spec, backend)
    assert err.value.errno == errno.EACCES
    assert "R0 !read_ok" in err.value.log


def test_info_id_and_from_id(backend):
    counts = _counts(backend)
    with Program.load(_counter_spec(counts), backend) as prog:
        info = prog.info()
        assert info.type == ProgType.XDP and info.name == "counter"
        assert info.id == prog.id > 0
        assert counts.id in info.map_ids
        with Program.from_id(prog.id, backend) as again:
            assert again.fd != prog.fd
            assert again.info().id == prog.id
            again.test_run(PACKET)
    assert counts[0] == 1


def test_text_program_loads(backend):
    spec = ProgramSpec(ProgType.XDP, """
        r0 = 0
        r1 = 1
    loop:
        r0 += r1
        r1 += 1
        if r1 <= 100 goto loop
        exit
    """)
    with Program.load(spec, backend) as prog:
        assert prog.test_run(PACKET).retval == 5050


def test_encoded_program_loads(backend):
    raw = encode([mov64(R0, 40), add64_(R0, 2), exit_()])
    with Program.load(ProgramSpec(ProgType.XDP, raw), backend) as prog:
        assert prog.test_run(PACKET).retval == 42


def test_closed_program_gives_ebadf(backend):
    prog = Program.load(ProgramSpec(ProgType.XDP, [mov64(R0, 2), exit_()]), backend)
    prog.close()
    prog.close()  # idempotent
    assert prog.closed
    with pytest.raises(BPFError) as err:
        prog.test_run(PACKET)
    assert err.value.errno == errno.EBADF


def test_tracepoint_link_runs_the_program_until_closed(kernel):
    counts = _counts(kernel)
    # Only this thread's calls count: another process's run could land at any time.
    spec = ProgramSpec(ProgType.TRACEPOINT, [
        call("get_current_pid_tgid"), mov32(R0, R0),  # r0 = thread id (low 32 bits)
        jne(R0, threading.get_native_id(), "out"), *_counter_spec(counts).instructions],
        name="getpid")
    with Program.load(spec, kernel) as prog:
        with prog.attach_tracepoint("syscalls", "sys_enter_getpid") as link:
            assert not link.closed
            for _ in range(5):
                os.getpid()
            assert counts[0] == 5
        assert link.closed
        os.getpid()
        assert counts[0] == 5


@pytest.mark.parametrize("backend_name", ["kernel", "emulated"])
def test_every_python_example_of_the_guide_runs_as_written(kernel, monkeypatch, capsys,
                                                          backend_name):
    import pathlib
    import re

    monkeypatch.setenv("PYBPF_BACKEND", backend_name)
    monkeypatch.setattr("pybpf.backends._default_system", None)
    root = pathlib.Path(__file__).parent.parent
    ran = 0
    for guide in ("README.md", "docs/networking.md"):  # the user guide and its network part
        blocks = re.findall(r"```python\n(.*?)```", (root / guide).read_text(), re.S)
        assert blocks, guide
        for number, code in enumerate(blocks):
            exec(compile(code, f"{guide} python block {number}", "exec"), {})
        ran += len(blocks)
    assert ran >= 6
    capsys.readouterr()


def test_readme_program_example_runs_and_counts_on_both_backends(kernel, capsys):
    import pathlib
    import re

    readme = (pathlib.Path(__file__).parent.parent / "README.md").read_text()
    section = readme[readme.index("## Programs: assemble"):]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    exec(compile(code, "README.md", "exec"), {})
    lines = capsys.readouterr().out.splitlines()
    assert lines[:2] == ["kernel 2 3", "emulated 2 3"]
    assert lines[2].strip() == "0: (18) r1 = map[counts]"


@pytest.mark.parametrize("field", ["repeat", "cpu", "flags", "data_size_out", "ctx_size_out"])
@pytest.mark.parametrize("value", [-1, 1 << 32, "3"])
def test_test_run_integer_outside_u32_gives_einval(backend, field, value):
    from pybpf.asm import encode

    fd = backend.prog_load(ProgType.XDP, encode([mov64(R0, 2), exit_()]))
    try:
        with pytest.raises(BPFError) as exc:
            backend.prog_test_run(fd, bytes(64), **{field: value})
        assert exc.value.errno == errno.EINVAL and field in str(exc.value)
    finally:
        backend.close(fd)
