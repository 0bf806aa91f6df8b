"""BPF helpers on maps, the redirect helpers, test-run rules, program objects and tracepoints.

Helper return values and test-run errnos are compared with the kernel (``backend`` runs each
test on both); what only the emulator can show (CPUs it declares, sockmap verdicts, trace
output) runs on the emulated backend.
"""

from __future__ import annotations

import errno
import functools
import socket

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pybpf
from pybpf import asm
from pybpf.asm import FP, R0, R1, R2, R3, R4, R6
from pybpf.asm import builder as b
from pybpf.emulated.prog.core import entry_of
from pybpf.emulated.prog.jit import jit_source
from pybpf.emulated.prog.memory import CtxRegion
from pybpf.errors import BPFError, ProgramFault
from pybpf.programs import Program, ProgramSpec
from pybpf.uapi import (
    BPF_ANY,
    BPF_EXIST,
    BPF_F_TEST_RUN_ON_CPU,
    BPF_NOEXIST,
    SK_DROP,
    SK_PASS,
    XDP_ABORTED,
    XDP_PASS,
    XDP_REDIRECT,
    BpfFunc,
    MapType,
    ProgType,
)

U32 = 0xFFFF_FFFF
ETH_FRAME = bytes.fromhex("ffffffffffff" "020000000001" "0800") + bytes(range(50))


def load(system, prog_type, items, maps=None, **spec) -> Program:
    return Program.load(ProgramSpec(prog_type, items, **spec), system, maps=maps or {})


def key_at(off: int, key: int, size: int = 4) -> list:
    """R2 = pointer to ``key`` stored at FP+off."""
    return [b.st(size, FP, off, key), b.mov64(R2, FP), b.add64(R2, off)]


def update(map_name: str, key: int, value: int, flags: int) -> list:
    return [*key_at(-4, key), b.st(8, FP, -16, value), b.mov64(R3, FP), b.add64(R3, -16),
            b.ld_map_fd(R1, map_name), b.mov64(R4, flags), b.call("map_update_elem")]


def errno_ret(err: int) -> int:
    return -err & U32


# -- map helpers: return values as the kernel's ---------------------------------------------------
@pytest.mark.parametrize("map_type", [MapType.HASH, MapType.LRU_HASH])
def test_update_noexist_on_existing_key_returns_minus_eexist(backend, map_type):
    fd = backend.map_create(map_type, 4, 8, 8)
    prog = load(backend, ProgType.SCHED_CLS, [*update("m", 1, 10, BPF_NOEXIST),
                                              *update("m", 1, 11, BPF_NOEXIST), b.exit_()],
                maps={"m": fd})
    assert prog.test_run(ETH_FRAME).retval == errno_ret(errno.EEXIST)
    assert backend.map_lookup_elem(fd, (1).to_bytes(4, "little")) == (10).to_bytes(8, "little")


def test_update_exist_on_missing_key_returns_minus_enoent(backend):
    fd = backend.map_create(MapType.HASH, 4, 8, 8)
    prog = load(backend, ProgType.SCHED_CLS, [*update("m", 1, 10, BPF_EXIST), b.exit_()],
                maps={"m": fd})
    assert prog.test_run(ETH_FRAME).retval == errno_ret(errno.ENOENT)


def test_update_of_a_full_hash_returns_minus_e2big(backend):
    fd = backend.map_create(MapType.HASH, 4, 8, 1)
    prog = load(backend, ProgType.SCHED_CLS, [*update("m", 1, 10, BPF_ANY),
                                              *update("m", 2, 10, BPF_ANY), b.exit_()],
                maps={"m": fd})
    assert prog.test_run(ETH_FRAME).retval == errno_ret(errno.E2BIG)


def test_delete_of_a_missing_key_returns_minus_enoent(backend):
    fd = backend.map_create(MapType.HASH, 4, 8, 4)
    prog = load(backend, ProgType.SCHED_CLS, [*key_at(-4, 3), b.ld_map_fd(R1, "m"),
                                              b.call("map_delete_elem"), b.exit_()],
                maps={"m": fd})
    assert prog.test_run(ETH_FRAME).retval == errno_ret(errno.ENOENT)


def test_lookup_returns_the_live_value(backend):
    fd = backend.map_create(MapType.ARRAY, 4, 8, 4)
    backend.map_update_elem(fd, (2).to_bytes(4, "little"), (40).to_bytes(8, "little"))
    prog = load(backend, ProgType.SCHED_CLS, [
        *key_at(-4, 2), b.ld_map_fd(R1, "m"), b.call("map_lookup_elem"),
        b.jeq(R0, 0, "miss"), b.mov64(R1, 2), b.atomic_add64(R0, 0, R1), b.mov64(R0, 1),
        b.exit_(), b.label("miss"), b.mov64(R0, 0), b.exit_()], maps={"m": fd})
    assert prog.test_run(ETH_FRAME).retval == 1
    assert backend.map_lookup_elem(fd, (2).to_bytes(4, "little")) == (42).to_bytes(8, "little")


@pytest.mark.parametrize(("taken", "expected"), [(0, 2), (1, 1)])
def test_lookup_after_a_join_uses_the_map_r1_holds_on_the_path_taken(backend, taken, expected):
    """The JIT binds the helper to a map only in straight-line code; at a join either map
    may be in R1."""
    fds = {name: backend.map_create(MapType.ARRAY, 4, 8, 1) for name in ("a", "b")}
    for value, fd in enumerate(fds.values(), start=1):
        backend.map_update_elem(fd, bytes(4), value.to_bytes(8, "little"))
    prog = load(backend, ProgType.SCHED_CLS, [
        b.mov64(R6, taken), *key_at(-4, 0), b.ld_map_fd(R1, "a"), b.jeq(R6, 1, "join"),
        b.ld_map_fd(R1, "b"), b.label("join"), b.call("map_lookup_elem"),
        b.jeq(R0, 0, "miss"), b.ldxdw(R0, R0, 0), b.exit_(),
        b.label("miss"), b.mov64(R0, 0), b.exit_()], maps=fds)
    assert prog.test_run(ETH_FRAME).retval == expected


def test_jit_binds_map_helpers_to_the_map_loaded_just_before(emulated):
    fd = emulated.map_create(MapType.HASH, 4, 8, 4)
    prog = load(emulated, ProgType.SCHED_CLS, [
        *key_at(-4, 1), b.ld_map_fd(R1, "m"), b.call("map_lookup_elem"), b.exit_()],
        maps={"m": fd})
    source = jit_source(emulated.prog_from_fd(prog.fd).executable)
    assert "r0 = H1_" in source and "H1(" not in source


def test_jit_tells_a_hash_maps_c_helper_which_pointers_are_on_the_stack(emulated):
    """A hash map's helper in C (jit.takes_stack) gets the frame's stack and which of R2 (1)
    and R3 (2) surely point into it: a key on the stack, a value from a map's value."""
    from pybpf.emulated.prog.jit import takes_stack

    fd = emulated.map_create(MapType.HASH, 4, 8, 4)
    prog = load(emulated, ProgType.SCHED_CLS, [
        *key_at(-4, 1), b.ld_map_fd(R1, "m"), b.call("map_lookup_elem"), b.jeq(R0, 0, "out"),
        b.mov64(R3, R0), b.mov64(R2, FP), b.add64(R2, -4), b.ld_map_fd(R1, "m"),
        b.mov64(R4, 0), b.call("map_update_elem"),
        b.st(8, FP, -16, 7), b.mov64(R2, FP), b.add64(R2, -4), b.mov64(R3, FP),
        b.add64(R3, -16),
        b.ld_map_fd(R1, "m"), b.mov64(R4, 0), b.call("map_update_elem"),
        b.label("out"), b.mov64(R0, 0), b.exit_()], maps={"m": fd})
    exe = emulated.prog_from_fd(prog.fd).executable
    source = jit_source(exe)
    calls = [line.strip() for line in source.splitlines() if "r0 = H" in line]
    bound = [name for name in exe.jit_functions["F0"].__globals__ if name.startswith("H1_")]
    if not takes_stack(exe.jit_functions["F0"].__globals__[bound[0]]):
        assert all(call.endswith("(rs, r2, r3, r4, r5)") for call in calls)
        return
    assert [call.split("(", 1)[1] for call in calls] == [
        "rs, r2, r3, r4, r5, stack, 1)", "rs, r2, r3, r4, r5, stack, 1)",
        "rs, r2, r3, r4, r5, stack, 3)"]


def test_lookup_of_a_missing_key_returns_null(backend):
    fd = backend.map_create(MapType.HASH, 4, 8, 4)
    prog = load(backend, ProgType.SCHED_CLS, [
        *key_at(-4, 9), b.ld_map_fd(R1, "m"), b.call("map_lookup_elem"), b.exit_()],
        maps={"m": fd})
    assert prog.test_run(ETH_FRAME).retval == 0


def test_queue_push_pop_peek(backend):
    fd = backend.map_create(MapType.QUEUE, 0, 8, 2)

    def push(value):
        return [b.st(8, FP, -8, value), b.ld_map_fd(R1, "q"), b.mov64(R2, FP),
                b.add64(R2, -8), b.mov64(R3, 0), b.call("map_push_elem")]

    def take(helper):
        return [b.ld_map_fd(R1, "q"), b.mov64(R2, FP), b.add64(R2, -16), b.call(helper)]

    prog = load(backend, ProgType.SCHED_CLS, [
        *push(5), *push(6), *push(7), b.mov64(R6, R0),  # third push: full -> -E2BIG
        *take("map_pop_elem"), *take("map_peek_elem"),  # peek sees 6
        b.ldx(8, R0, FP, -16), b.lsh64(R0, 32), b.or64(R0, R6), b.exit_()], maps={"q": fd})
    run = prog.test_run(ETH_FRAME)
    assert run.retval == errno_ret(errno.E2BIG)
    assert backend.map_lookup_elem(fd, None) == (6).to_bytes(8, "little")


def test_peek_of_an_empty_queue_returns_minus_enoent(backend):
    fd = backend.map_create(MapType.QUEUE, 0, 8, 2)
    prog = load(backend, ProgType.SCHED_CLS, [
        b.ld_map_fd(R1, "q"), b.mov64(R2, FP), b.add64(R2, -8), b.call("map_peek_elem"),
        b.exit_()], maps={"q": fd})
    assert prog.test_run(ETH_FRAME).retval == errno_ret(errno.ENOENT)


def test_smp_processor_id_is_the_cpu_the_run_is_on(backend):
    prog = load(backend, ProgType.RAW_TRACEPOINT, [b.call("get_smp_processor_id"), b.exit_()])
    cpu = backend.num_possible_cpus - 1
    assert prog.test_run(flags=BPF_F_TEST_RUN_ON_CPU, cpu=cpu).retval == cpu


def test_numa_node_id_follows_the_declared_topology():
    system = pybpf.system("emulated", cpus=4, nodes=2)
    prog = load(system, ProgType.RAW_TRACEPOINT, [b.call("get_numa_node_id"), b.exit_()])
    assert [prog.test_run(flags=BPF_F_TEST_RUN_ON_CPU, cpu=cpu).retval
            for cpu in range(4)] == [0, 0, 1, 1]


def test_percpu_lookup_gives_the_current_cpus_slot():
    system = pybpf.system("emulated", cpus=4, nodes=1)
    fd = system.map_create(MapType.PERCPU_ARRAY, 4, 8, 1)
    prog = load(system, ProgType.RAW_TRACEPOINT, [
        *key_at(-4, 0), b.ld_map_fd(R1, "m"), b.call("map_lookup_elem"), b.jeq(R0, 0, "out"),
        b.st(8, R0, 0, 7), b.label("out"), b.mov64(R0, 0), b.exit_()], maps={"m": fd})
    prog.test_run(flags=BPF_F_TEST_RUN_ON_CPU, cpu=2)
    slots = system.map_lookup_elem(fd, bytes(4))
    assert [int.from_bytes(slots[i:i + 8], "little") for i in range(0, 32, 8)] == [0, 0, 7, 0]


def test_ktime_get_ns_does_not_go_backwards(backend):
    prog = load(backend, ProgType.RAW_TRACEPOINT, [
        b.call("ktime_get_ns"), b.mov64(R6, R0), b.call("ktime_get_ns"), b.mov64(R1, R0),
        b.mov64(R0, 1), b.jge(R1, R6, "out"), b.mov64(R0, 0), b.label("out"), b.exit_()])
    assert prog.test_run().retval == 1


# -- redirects ------------------------------------------------------------------------------------
@pytest.mark.parametrize("key,flags,action", [
    (0, 0, XDP_REDIRECT),          # the slot holds a device
    (1, XDP_PASS, XDP_PASS),       # empty slot: the low bits of flags are the action
    (1, 0, XDP_ABORTED),
    (0, 1 << 5, XDP_ABORTED),      # flags outside the accepted set
])
def test_redirect_map_returns_the_kernels_action(backend, key, flags, action):
    fd = backend.map_create(MapType.DEVMAP, 4, 4, 2)
    backend.map_update_elem(fd, bytes(4), (1).to_bytes(4, "little"))  # lo
    prog = load(backend, ProgType.XDP, [b.ld_map_fd(R1, "d"), b.mov64(R2, key),
                                        b.mov64(R3, flags), b.call("redirect_map"), b.exit_()],
                maps={"d": fd})
    assert prog.test_run(ETH_FRAME).retval == action


@pytest.mark.parametrize("in_map,flags,verdict", [(True, 0, SK_PASS), (False, 0, SK_DROP),
                                                  (True, 2, SK_DROP)])
def test_sk_redirect_map_verdict(emulated, in_map, flags, verdict):
    fd = emulated.map_create(MapType.SOCKMAP, 4, 4, 2)
    left, right = socket.socketpair()
    try:
        if in_map:
            emulated.map_update_elem(fd, bytes(4), left.fileno().to_bytes(4, "little"))
        prog = load(emulated, ProgType.SK_SKB, [
            b.ld_map_fd(R2, "s"), b.mov64(R3, 0), b.mov64(R4, flags),
            b.call("sk_redirect_map"), b.exit_()], maps={"s": fd})
        rs = emulated.prog_from_fd(prog.fd).run(CtxRegion("__sk_buff", bytearray(192)))
        assert rs.retval == verdict
        assert (rs.redirect is not None) == (verdict == SK_PASS)
    finally:
        left.close()
        right.close()


def test_trace_printk_formats_into_the_run_trace(emulated):
    fmt = b"n=%d u=%u\0"
    items = [b.lddw(R1, int.from_bytes(fmt[:8], "little")), b.stx(8, FP, -16, R1),
             b.st(2, FP, -8, int.from_bytes(fmt[8:], "little")),
             b.mov64(R1, FP), b.add64(R1, -16), b.mov64(R2, len(fmt)), b.mov64(R3, -5),
             b.mov64(R4, 7), b.call("trace_printk"), b.exit_()]
    prog = load(emulated, ProgType.RAW_TRACEPOINT, items)
    rs = emulated.prog_from_fd(prog.fd).run(bytes(8))
    assert rs.trace == [b"n=-5 u=7"]
    assert rs.retval == len(b"n=-5 u=7")


# -- test-run rules -------------------------------------------------------------------------------
RET_2 = [b.mov64(R0, 2), b.exit_()]


@pytest.mark.parametrize("prog_type,kwargs,err", [
    (ProgType.SOCKET_FILTER, {"data": bytes(13)}, errno.EINVAL),
    (ProgType.SOCKET_FILTER, {"data": bytes(3713)}, errno.EINVAL),
    (ProgType.SOCKET_FILTER, {"data": ETH_FRAME, "flags": 1}, errno.EINVAL),
    (ProgType.SOCKET_FILTER, {"data": ETH_FRAME, "cpu": 1}, errno.EINVAL),
    (ProgType.SOCKET_FILTER, {"data": ETH_FRAME, "data_size_out": 10}, errno.ENOSPC),
    (ProgType.SOCKET_FILTER, {"data": ETH_FRAME, "ctx": bytes(20)}, errno.ENOSPC),
    (ProgType.SOCKET_FILTER, {"data": ETH_FRAME, "ctx": bytes(4) + b"\1" + bytes(187)},
     errno.EINVAL),
    (ProgType.SOCKET_FILTER, {"data": ETH_FRAME, "ctx": bytes(192) + b"\1"}, errno.E2BIG),
    (ProgType.XDP, {"data": bytes(13)}, errno.EINVAL),
    (ProgType.XDP, {"data": ETH_FRAME, "flags": 1}, errno.EINVAL),
    (ProgType.XDP, {"data": ETH_FRAME, "ctx": (0).to_bytes(4, "little") * 5 + b"\1\0\0\0"},
     errno.EINVAL),
    (ProgType.RAW_TRACEPOINT, {"repeat": 1}, errno.EINVAL),
    (ProgType.RAW_TRACEPOINT, {"cpu": 1}, errno.EINVAL),
    (ProgType.RAW_TRACEPOINT, {"ctx": bytes(104)}, errno.EINVAL),
    (ProgType.TRACEPOINT, {"data": ETH_FRAME}, 524),
])
def test_test_run_refuses_what_the_kernel_refuses(backend, prog_type, kwargs, err):
    prog = load(backend, prog_type, RET_2)
    with pytest.raises(BPFError) as info:
        prog.test_run(**kwargs)
    assert info.value.errno == err


def test_socket_filter_data_out_has_the_ethernet_header_zeroed(backend):
    run = load(backend, ProgType.SOCKET_FILTER, RET_2).test_run(ETH_FRAME)
    assert run.retval == 2
    assert run.data_out == bytes(14) + ETH_FRAME[14:]


def test_ld_abs_reads_after_the_ethernet_header_in_a_socket_filter(backend):
    prog = load(backend, ProgType.SOCKET_FILTER, [b.mov64(R6, R1), b.ld_abs(2, 0), b.exit_()])
    assert prog.test_run(ETH_FRAME).retval == int.from_bytes(ETH_FRAME[14:16], "big")


def test_ld_abs_past_the_packet_returns_zero(backend):
    prog = load(backend, ProgType.SOCKET_FILTER, [b.mov64(R6, R1), b.ld_abs(4, 1000),
                                                  b.mov64(R0, 9), b.exit_()])
    assert prog.test_run(ETH_FRAME).retval == 0


def test_skb_ctx_out_carries_what_the_program_wrote(backend):
    prog = load(backend, ProgType.SCHED_CLS, [b.st(4, R1, 8, 0x1234), b.st(4, R1, 48, 7),
                                              *RET_2])
    run = prog.test_run(ETH_FRAME, ctx=bytes(192))
    assert run.ctx_out[8:12] == (0x1234).to_bytes(4, "little")  # mark
    assert run.ctx_out[48:52] == (7).to_bytes(4, "little")  # cb[0]
    assert run.ctx_out[40:44] == (1).to_bytes(4, "little")  # ifindex: loopback
    assert run.ctx_out[160:164] == len(ETH_FRAME).to_bytes(4, "little")  # wire_len


def test_skb_ctx_gives_len_and_direct_packet_pointers(backend):
    prog = load(backend, ProgType.SCHED_CLS, [
        b.ldx(4, R2, R1, 76), b.ldx(4, R3, R1, 80), b.mov64(R0, R3), b.sub64(R0, R2),
        b.ldx(4, R4, R1, 0), b.lsh64(R4, 16), b.or64(R0, R4), b.exit_()])
    assert prog.test_run(ETH_FRAME).retval == len(ETH_FRAME) << 16 | len(ETH_FRAME)


def test_xdp_program_writes_the_packet(backend):
    prog = load(backend, ProgType.XDP, [
        b.ldx(4, R2, R1, 0), b.ldx(4, R3, R1, 4), b.mov64(R4, R2), b.add64(R4, 1),
        b.jgt(R4, R3, "out"), b.st(1, R2, 0, 0x5A), b.label("out"), *RET_2])
    assert prog.test_run(ETH_FRAME).data_out == b"\x5a" + ETH_FRAME[1:]


def test_xdp_ctx_in_metadata_comes_before_data(backend):
    meta = 8
    data = bytes(range(meta)) + ETH_FRAME
    ctx = b"".join(v.to_bytes(4, "little") for v in (meta, len(data), 0, 0, 0, 0))
    prog = load(backend, ProgType.XDP, [  # R0 = data - data_meta
        b.ldx(4, R2, R1, 0), b.ldx(4, R3, R1, 8), b.mov64(R0, R2), b.sub64(R0, R3), b.exit_()])
    run = prog.test_run(data, ctx=ctx)
    assert run.retval == meta
    assert run.data_out == data
    assert run.ctx_out == ctx


def test_repeat_runs_the_program_that_many_times(backend):
    fd = backend.map_create(MapType.ARRAY, 4, 8, 1)
    prog = load(backend, ProgType.SCHED_CLS, [
        *key_at(-4, 0), b.ld_map_fd(R1, "m"), b.call("map_lookup_elem"), b.jeq(R0, 0, "out"),
        b.mov64(R1, 1), b.atomic_add64(R0, 0, R1), b.label("out"), *RET_2], maps={"m": fd})
    run = prog.test_run(ETH_FRAME, repeat=25)
    assert isinstance(run.duration, int)
    assert backend.map_lookup_elem(fd, bytes(4)) == (25).to_bytes(8, "little")


# -- program objects ------------------------------------------------------------------------------
def test_tag_and_map_ids_match_the_kernels(kernel, emulated):
    infos = []
    for system in (kernel, emulated):
        fd = system.map_create(MapType.HASH, 4, 8, 4)
        prog = load(system, ProgType.SCHED_CLS, [*update("m", 1, 2, BPF_ANY), *RET_2],
                    maps={"m": fd}, name="tagged")
        info = prog.info()
        assert info.map_ids == (system.map_get_info(fd).id,)
        assert info.name == "tagged"
        assert info.type == ProgType.SCHED_CLS
        infos.append(info)
    assert infos[0].tag == infos[1].tag


@pytest.mark.parametrize("name,ok", [(b"ok_name.1", True), (b"bad-name", False),
                                     (b"x" * 16, False), (b"x" * 15, True)])
def test_program_name_rules_are_the_kernels(backend, name, ok):
    if ok:
        fd = backend.prog_load(ProgType.SOCKET_FILTER, asm.encode(asm.assemble(RET_2)
                                                                  .instructions),
                               prog_name=name)
        assert backend.prog_get_info(fd).name == name.decode()
        backend.close(fd)
        return
    with pytest.raises(BPFError) as info:
        backend.prog_load(ProgType.SOCKET_FILTER, asm.encode(asm.assemble(RET_2).instructions),
                          prog_name=name)
    assert info.value.errno == errno.EINVAL


def test_prog_get_fd_by_id_opens_the_same_program(backend):
    prog = load(backend, ProgType.SOCKET_FILTER, RET_2)
    prog_id = prog.info().id
    fd = backend.prog_get_fd_by_id(prog_id)
    assert backend.prog_get_info(fd).id == prog_id
    backend.close(fd)


def test_last_close_frees_the_id_and_the_maps(emulated):
    map_fd = emulated.map_create(MapType.HASH, 4, 8, 4)
    map_id = emulated.map_get_info(map_fd).id
    prog = load(emulated, ProgType.SCHED_CLS, [*update("m", 1, 2, BPF_ANY), *RET_2],
                maps={"m": map_fd})
    prog_id = prog.info().id
    emulated.close(map_fd)
    kept = emulated.map_get_fd_by_id(map_id)  # the program holds the map
    emulated.close(kept)
    prog.close()
    for command, obj_id in ((emulated.prog_get_fd_by_id, prog_id),
                            (emulated.map_get_fd_by_id, map_id)):
        with pytest.raises(BPFError) as info:
            command(obj_id)
        assert info.value.errno == errno.ENOENT


# -- tracepoints ----------------------------------------------------------------------------------
def counting_tracepoint(system) -> tuple[Program, int]:
    fd = system.map_create(MapType.ARRAY, 4, 8, 1)
    prog = load(system, ProgType.TRACEPOINT, [
        *key_at(-4, 0), b.ld_map_fd(R1, "m"), b.call("map_lookup_elem"), b.jeq(R0, 0, "out"),
        b.mov64(R1, 1), b.atomic_add64(R0, 0, R1), b.label("out"), b.mov64(R0, 0), b.exit_()],
        maps={"m": fd})
    return prog, fd


def test_triggered_tracepoint_runs_attached_programs_until_detached(emulated):
    prog, fd = counting_tracepoint(emulated)
    link = prog.attach_tracepoint("syscalls", "sys_enter_getpid")
    for _ in range(3):
        assert emulated.trigger_tracepoint("syscalls", "sys_enter_getpid", bytes(64)) == [0]
    link.close()
    assert emulated.trigger_tracepoint("syscalls", "sys_enter_getpid", bytes(64)) == []
    assert emulated.map_lookup_elem(fd, bytes(4)) == (3).to_bytes(8, "little")


def test_a_tracepoints_programs_run_in_attach_order_through_attach_and_detach(emulated):
    """Each firing runs the programs attached then, in attach order; closing one link
    leaves the others (and their order); a program is on a tracepoint once (EEXIST)."""
    progs = [load(emulated, ProgType.TRACEPOINT, [b.mov64(R0, k), b.exit_()])
             for k in (1, 2, 3)]
    links = [prog.attach_tracepoint("syscalls", "sys_enter_getpid") for prog in progs]
    fire = functools.partial(emulated.trigger_tracepoint, "syscalls", "sys_enter_getpid")
    assert fire(bytes(64)) == [1, 2, 3]
    assert emulated.enter_syscall("getpid", bytes(64)) == [1, 2, 3]
    assert emulated.enter_syscall("getppid", bytes(64)) == []  # another tracepoint
    with pytest.raises(BPFError) as info:
        progs[0].attach_tracepoint("syscalls", "sys_enter_getpid")
    assert info.value.errno == errno.EEXIST
    links[1].close()
    assert fire(bytearray(64)) == [1, 3]
    links[1] = progs[1].attach_tracepoint("syscalls", "sys_enter_getpid")
    assert fire(bytes(64)) == [1, 3, 2]
    for link in links:
        link.close()
    assert fire(bytes(64)) == [] and emulated.enter_syscall("getpid") == []
    with pytest.raises(TypeError):  # the record is made bytes with or without programs
        fire("not bytes")


@pytest.mark.parametrize("modeled", [True, False])
def test_a_syscall_charges_its_entry_then_each_programs_tracepoint_entry(modeled):
    """enter_syscall: syscall_entry (syscall_connect for connect), then tracepoint_entry
    and the instructions of each attached program; without modeled time, nothing."""
    system = pybpf.system("emulated", cpus=1, modeled_time=modeled)
    progs = [load(system, ProgType.TRACEPOINT, [b.mov64(R0, k), b.exit_()]) for k in (1, 2)]
    links = [prog.attach_tracepoint("syscalls", "sys_enter_connect") for prog in progs]
    timing = system.machine.timing
    with system.on_cpu(0):
        before, clock = dict(timing.counts[0]), timing.clock[0]
        assert system.enter_syscall("connect", bytes(64)) == [1, 2]
        assert system.enter_syscall("getpid", bytes(64)) == []
    counts = {event: n - before.get(event, 0) for event, n in timing.counts[0].items()
              if n != before.get(event, 0)}
    if modeled:
        assert counts == {"syscall_connect": 1, "syscall_entry": 1, "tracepoint_entry": 2,
                          "bpf_insn": 4}
        assert timing.clock[0] > clock
    else:
        assert counts == {} and timing.clock[0] == clock
    for link in links:
        link.close()


def test_a_tracepoint_run_state_is_a_fresh_copy_of_the_systems_prototype():
    """trace_call_bpf's RunState (the accelerator's, where built): each slot what
    RunState(run_env) holds, its dicts and lists its own; a new engine or budget makes a new
    prototype."""
    from pybpf.accelerator import CACHE_MODEL
    from pybpf.emulated.prog.memory import RunState

    if CACHE_MODEL is None or not hasattr(CACHE_MODEL, "trace_call_bpf"):
        pytest.skip("the C extension (pybpf._cache_model) is not built")
    system = pybpf.system("emulated", cpus=1, modeled_time=False)
    seen: list[RunState] = []
    prog = load(system, ProgType.TRACEPOINT, [b.mov64(R0, 7), b.exit_()])
    link = prog.attach_tracepoint("syscalls", "sys_enter_getpid")
    links = system._tracepoints["syscalls", "sys_enter_getpid"]

    def run_prog(exe, rs):
        seen.append(rs)
        return 7

    proto = system._run_state()
    assert CACHE_MODEL.trace_call_bpf(links, b"rec", proto, 5, run_prog, None, None) == [7]
    assert CACHE_MODEL.trace_call_bpf(links, b"rec", proto, 5, run_prog, None, None) == [7]
    fresh = RunState(system.run_env)
    for rs in seen:
        for slot in RunState.__slots__:
            value = getattr(rs, slot)
            if slot == "mem":
                assert value == {5: b"rec"} and value is not proto.mem
            elif isinstance(value, (dict, list)):
                assert value == getattr(fresh, slot) and value is not getattr(proto, slot)
            elif slot == "entry_of":  # the engine's, as run_prog gives it
                assert value is entry_of(system.bpf_engine)
            else:
                assert value == getattr(fresh, slot), slot
    assert seen[0].mem is not seen[1].mem and seen[0].trace is not seen[1].trace
    assert proto.mem == {}
    system.insn_budget = 123
    assert system._run_state().budget == 123 and system._run_state().env is system.run_env
    system.bpf_engine = "interp"
    assert system._run_state().env.engine == "interp"
    link.close()


def test_a_systems_firings_follow_its_links_and_engine_between_them():
    """What the C firing keeps on the system between firings (_fire_path: the links last
    fired, the prototype's engine, the key's hash) follows every change: a program attached
    or detached runs or stops at the next firing, a new engine runs the program on it (its
    main entry made; the native engine first, whose entry a stale engine would run); two
    systems keep their own."""
    from pybpf.emulated.prog.native import native_missing

    engines = ([] if native_missing() else ["native"]) + ["interp", "jit"]
    systems = [pybpf.system("emulated", cpus=1, modeled_time=False) for _ in range(2)]
    counters = [counting_tracepoint(system) for system in systems]
    links = [prog.attach_tracepoint("syscalls", "sys_enter_getpid") for prog, _ in counters]
    counts = [0, 0]
    for engine in engines * 2:
        for i, system in enumerate(systems):
            system.bpf_engine = engine
            assert system.enter_syscall("getpid", bytes(64)) == [0]
            counts[i] += 1
            exe = system._tracepoints["syscalls", "sys_enter_getpid"][0].prog.executable
            assert engine in exe.main_entries
    second = load(systems[0], ProgType.TRACEPOINT, [b.mov64(R0, 5), b.exit_()])
    extra = second.attach_tracepoint("syscalls", "sys_enter_getpid")
    assert systems[0].enter_syscall("getpid", bytes(64)) == [0, 5]
    assert systems[1].enter_syscall("getpid", bytes(64)) == [0]
    counts = [counts[0] + 1, counts[1] + 1]
    links[0].close()
    assert systems[0].enter_syscall("getpid", bytes(64)) == [5]
    for (_, fd), system, n in zip(counters, systems, counts, strict=True):
        assert system.map_lookup_elem(fd, bytes(4)) == n.to_bytes(8, "little")
    extra.close()
    links[1].close()


@pytest.mark.parametrize("modeled", [False, True])
@pytest.mark.parametrize("engine", ["native", "jit"])
def test_a_tracepoints_programs_run_on_the_firing_threads_cpu(engine, modeled):
    """A firing's runs are on the CPU its thread is on now (the C firing keeps the last
    reading thread's own dict of machine.current): the same thread moved between CPUs,
    threads one after another (a thread's ident is often its predecessor's), and a thread
    that never chose a CPU (CPU 0)."""
    import threading

    from pybpf.emulated.prog.native import native_missing

    if engine == "native" and native_missing():
        pytest.skip(native_missing())
    system = pybpf.system("emulated", cpus=4, modeled_time=modeled)
    system.bpf_engine = engine
    prog = load(system, ProgType.TRACEPOINT, [b.call("get_smp_processor_id"), b.exit_()])
    link = prog.attach_tracepoint("syscalls", "sys_enter_getpid")
    for cpu in (2, 3, 1):
        with system.on_cpu(cpu):
            assert system.enter_syscall("getpid", bytes(8)) == [cpu]
    seen = []

    def fire(cpu):
        if cpu is None:
            seen.append(system.enter_syscall("getpid", bytes(8)))
            return
        with system.on_cpu(cpu):
            seen.append(system.enter_syscall("getpid", bytes(8)))

    cpus = [1, 3, None, 2, 0, 3, None]
    for cpu in cpus:
        thread = threading.Thread(target=fire, args=(cpu,))
        thread.start()
        thread.join()
    assert seen == [[0 if cpu is None else cpu] for cpu in cpus]
    link.close()


@pytest.mark.parametrize("engine", ["native", "jit"])
@pytest.mark.parametrize("regions_added", [1, 40])
def test_each_firing_runs_in_a_run_state_as_fresh_as_a_copy_of_the_prototype(engine,
                                                                             regions_added,
                                                                             monkeypatch):
    """Every run of a tracepoint's program starts from what RunState(run_env) holds plus its
    record and static regions, whether the firing made its RunState anew or made the last
    run's one again (trace_call_bpf keeps a native run's RunState nothing held): a region,
    a trace line, a value region or a redirect a run left is not in the next run, whether
    the run added a few regions (taken out by number) or many (found by a scan)."""
    import dataclasses

    from pybpf.emulated.prog import helpers
    from pybpf.emulated.prog.memory import CTX_REGION, DYNAMIC_REGION_BASE, RunState
    from pybpf.emulated.prog.native import native_missing

    if engine == "native" and native_missing():
        pytest.skip(native_missing())
    seen = []

    def leave_things_behind(rs, r1, r2, r3, r4, r5):
        seen.append((dict(rs.mem), list(rs.trace), dict(rs.value_regions), rs.redirect,
                     rs.count <= 4, rs.retval))
        for _ in range(regions_added):
            rs.add_region(bytearray(8))
        rs.region_of(bytearray(4))
        rs.trace.append(b"left")
        rs.redirect, rs.retval = ("somewhere", 1), 99
        return 0

    proto = helpers.HELPERS[BpfFunc.trace_printk]
    monkeypatch.setitem(helpers.HELPERS, BpfFunc.trace_printk,
                        dataclasses.replace(proto, func=leave_things_behind))
    system = pybpf.system("emulated", cpus=1, modeled_time=False)
    system.bpf_engine = engine
    fd = system.map_create(MapType.ARRAY, 4, 8, 1)
    progs = [load(system, ProgType.TRACEPOINT, [
        b.ld_map_fd(R1, "m"), b.mov64(R1, FP), b.add64(R1, -8), b.st(8, FP, -8, 0),
        b.mov64(R2, 8), b.call("trace_printk"), b.mov64(R0, k), b.exit_()], maps={"m": fd})
        for k in (3, 4)]  # two on the tracepoint: each keeps its own RunState
    links = [prog.attach_tracepoint("syscalls", "sys_enter_getpid") for prog in progs]
    records = [bytes([n]) * 16 for n in range(4)]
    for record in records:
        assert system.enter_syscall("getpid", record) == [3, 4]
    fresh = RunState(system.run_env)
    statics = [link.prog.executable.static_regions
               for link in system._tracepoints["syscalls", "sys_enter_getpid"]]
    runs = [(record, statics[i]) for record in records for i in range(2)]
    for (record, regions), (mem, trace, value_regions, redirect, counted, retval) in zip(
            runs, seen, strict=True):
        assert {r: v for r, v in mem.items() if r < DYNAMIC_REGION_BASE} == {
            CTX_REGION: record, **regions}
        # of the dynamic regions, only the run's stack frame: what the last run added is gone
        assert len([r for r in mem if r >= DYNAMIC_REGION_BASE]) == 1
        assert (trace, value_regions, redirect, retval) == (
            fresh.trace, fresh.value_regions, fresh.redirect, fresh.retval)
        assert counted  # the count began at the prototype's
    for link in links:
        link.close()


def test_a_syscall_tracepoints_links_are_kept_under_the_key_its_syscall_fires(emulated):
    """Attaching to syscalls/sys_enter_<syscall> keeps the links under the very tuple
    enter_syscall fires (the firing's lookup then matches the key by identity), whichever
    came first; other tracepoints' keys are their own."""
    from pybpf.emulated import progs

    prog = load(emulated, ProgType.TRACEPOINT, [b.mov64(R0, 1), b.exit_()])
    links = [prog.attach_tracepoint("syscalls", name)
             for name in ("sys_enter_getpid", "sys_enter_getppid")]
    assert emulated.enter_syscall("getppid", bytes(8)) == [1]
    keys = {key: key for key in emulated._tracepoints}
    for syscall in ("getpid", "getppid"):
        assert keys[("syscalls", f"sys_enter_{syscall}")] is progs._SYSCALL_TRACEPOINTS[syscall]
    for link in links:
        link.close()


def python_syscalls(monkeypatch) -> None:
    """Syscall entries and tracepoint firings through progs.py's Python methods, the
    references (the C ones set aside)."""
    import pybpf.emulated.progs as progs

    reference = getattr(progs.ProgramsMixin, "_enter_syscall_reference", None)
    if reference is not None:
        monkeypatch.setattr(progs.ProgramsMixin, "enter_syscall", reference)
    monkeypatch.setattr(progs, "FIRE_TRACEPOINT", None)


@pytest.mark.parametrize("engine", ["jit", "native"])
@pytest.mark.parametrize("modeled", [True, False])
def test_a_tracepoint_fires_the_same_with_or_without_its_c_loop(modeled, engine, monkeypatch):
    """A syscall's entry and its tracepoint's runs in C (enter_syscall, fire_tracepoint and
    trace_call_bpf; a native entry's without run_prog's Python frame) and in Python: the
    same R0s, map contents, modeled counts and clock, the same fault where a program exceeds
    the budget; the record given by name, or none (an empty one)."""
    from pybpf.emulated.prog.native import native_missing

    if engine == "native" and native_missing():
        pytest.skip(native_missing())
    outcomes = []
    for in_c in (True, False):
        if not in_c:
            python_syscalls(monkeypatch)
        system = pybpf.system("emulated", cpus=2, modeled_time=modeled)
        system.bpf_engine = engine
        counting, fd = counting_tracepoint(system)
        reader = load(system, ProgType.TRACEPOINT, [  # R0: the record's second u64 + 20
            b.ldx(8, R0, R1, 8), b.mov64(R2, 0), b.label("loop"), b.add64(R0, 1),
            b.add64(R2, 1), b.jlt(R2, 20, "loop"), b.exit_()])
        links = [p.attach_tracepoint("syscalls", "sys_enter_getpid") for p in (counting, reader)]
        record = (5).to_bytes(8, "little") + (99).to_bytes(8, "little") + bytes(48)
        timing = system.machine.timing
        with system.on_cpu(1):
            r0s = [system.enter_syscall("getpid", record),
                   system.enter_syscall("getpid", ctx=record),
                   system.enter_syscall(syscall="getpid", ctx=record),
                   system.enter_syscall("getppid")]  # nothing attached there
            system.insn_budget = 30
            with pytest.raises(ProgramFault) as info:
                system.enter_syscall("getpid", record)
        outcomes.append((r0s, system.map_lookup_elem(fd, bytes(4)), dict(timing.counts[1]),
                         timing.clock[1], info.value.errno, str(info.value)))
        for link in links:
            link.close()
    assert outcomes[0] == outcomes[1]
    assert outcomes[0][0] == [[0, 119]] * 3 + [[]]


@pytest.mark.parametrize("in_c", [True, False])
def test_without_modeled_time_a_syscall_runs_deferred_work_due_before_its_programs(
        in_c, monkeypatch):
    """Machine.bpf_syscall's test of whether a syscall's entry has anything to do without
    modeled time (a scheduler, work ever deferred), made again in C by enter_syscall: work
    due runs first, then the tracepoint's programs; a bytearray record is read as bytes."""
    import pybpf.emulated.progs as progs

    if not in_c:
        python_syscalls(monkeypatch)
    elif progs.ENTER_SYSCALL_METHOD is None:
        pytest.skip("the C extension (pybpf._cache_model) is not built")
    system = pybpf.system("emulated", cpus=1, modeled_time=False)
    prog, fd = counting_tracepoint(system)
    link = prog.attach_tracepoint("syscalls", "sys_enter_getpid")
    seen = []
    system.machine.timing.defer(0, 0.0, lambda: seen.append(
        system.map_lookup_elem(fd, bytes(4))))
    with system.on_cpu(0):
        assert system.enter_syscall("getpid", bytearray(64)) == [0]
        assert system.enter_syscall("getppid", bytearray(64)) == []  # nothing attached
    assert seen == [bytes(8)]  # before the program's count
    assert system.map_lookup_elem(fd, bytes(4)) == (1).to_bytes(8, "little")
    link.close()


def test_attach_tracepoint_needs_a_tracepoint_program(backend):
    prog = load(backend, ProgType.SOCKET_FILTER, RET_2)
    with pytest.raises(BPFError) as info:
        prog.attach_tracepoint("syscalls", "sys_enter_getpid")
    assert info.value.errno == errno.EINVAL


def test_tracepoint_program_counts_real_syscalls_on_the_kernel(kernel):
    import os

    prog, fd = counting_tracepoint(kernel)
    with prog.attach_tracepoint("syscalls", "sys_enter_getppid"):
        for _ in range(3):
            os.getppid()
    assert int.from_bytes(kernel.map_lookup_elem(fd, bytes(4)), "little") >= 3


@pytest.mark.parametrize("helper,delta", [
    ("xdp_adjust_head", -216), ("xdp_adjust_head", -217), ("xdp_adjust_head", -8),
    ("xdp_adjust_head", 8), ("xdp_adjust_head", 50), ("xdp_adjust_head", 51),
    ("xdp_adjust_tail", -50), ("xdp_adjust_tail", -51), ("xdp_adjust_tail", 100),
    ("xdp_adjust_tail", 3456), ("xdp_adjust_tail", 3457),
    ("xdp_adjust_meta", -8), ("xdp_adjust_meta", -2), ("xdp_adjust_meta", 4),
    ("xdp_adjust_meta", -216), ("xdp_adjust_meta", -220),
])
def test_xdp_adjustments_give_the_kernels_return_and_packet(kernel, emulated, helper, delta):
    """Return value and data_out (from data_meta); two runs share the buffer, as the
    kernel's repeated runs do."""
    results = []
    for system in (kernel, emulated):
        prog = load(system, ProgType.XDP, [b.mov64(R2, delta), b.call(helper), b.exit_()])
        run = prog.test_run(bytes(range(64)), repeat=2)
        results.append((run.retval, run.data_out))
        prog.close()
    assert results[0] == results[1]


def test_atomic_adds_from_threads_on_several_cpus_lose_nothing():
    import threading

    system = pybpf.system("emulated", cpus=4, nodes=1)
    shared = system.map_create(MapType.ARRAY, 4, 8, 1)
    per_cpu = system.map_create(MapType.PERCPU_ARRAY, 4, 8, 1)

    def bump(name):
        return [*key_at(-4, 0), b.ld_map_fd(R1, name), b.call("map_lookup_elem"),
                b.jeq(R0, 0, f"skip_{name}"), b.mov64(R1, 1), b.atomic_add64(R0, 0, R1),
                b.label(f"skip_{name}")]

    prog = load(system, ProgType.XDP, [*bump("shared"), *bump("per_cpu"), *RET_2],
                maps={"shared": shared, "per_cpu": per_cpu})

    def worker(cpu):
        with system.on_cpu(cpu):
            prog.test_run(ETH_FRAME, repeat=300)

    threads = [threading.Thread(target=worker, args=(cpu,)) for cpu in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert system.map_lookup_elem(shared, bytes(4)) == (1200).to_bytes(8, "little")
    slots = system.map_lookup_elem(per_cpu, bytes(4))
    assert [int.from_bytes(slots[i:i + 8], "little") for i in range(0, 32, 8)] == [300] * 4


# -- bpf_skb_load_bytes ---------------------------------------------------------------------------
@pytest.mark.parametrize("prog_type", [ProgType.SOCKET_FILTER, ProgType.SCHED_CLS])
@pytest.mark.parametrize("offset, size", [(0, 8), (10, 4), (len(ETH_FRAME) - 22, 8),
                                          (len(ETH_FRAME) - 8, 8), (len(ETH_FRAME) - 4, 8),
                                          (200, 8), (0x7FFF_FFFF, 4)])
def test_skb_load_bytes_reads_the_packet_or_zeroes_the_buffer(kernel, emulated, prog_type,
                                                               offset, size):
    """The bytes the kernel's skb_header_pointer finds from skb->data (a socket filter's
    data starts past the Ethernet header, tc's at it), or -EFAULT with the buffer zeroed:
    R0 is the return value xor the buffer's 8 bytes, on both backends alike."""
    items = [b.st(8, FP, -8, 0x5A5A5A5A), b.mov64(R2, offset), b.mov64(R3, FP),
             b.add64(R3, -8), b.mov64(R4, size), b.call("skb_load_bytes"),
             b.ldx(8, R2, FP, -8), b.xor64(R0, R2), b.exit_()]
    assert load(emulated, prog_type, items).test_run(ETH_FRAME).retval == \
        load(kernel, prog_type, items).test_run(ETH_FRAME).retval


@pytest.mark.parametrize("modeled", [True, False])
def test_a_helper_is_charged_only_on_a_machine_with_modeled_time(modeled):
    """A program's helpers charge their call where time is modeled; on a machine without it
    (for good) they are the helpers' own functions, a Python frame less per call, with the
    same result on every engine."""
    from pybpf.emulated.prog.helpers import bpf_get_smp_processor_id
    from pybpf.emulated.prog.native import native_missing

    emu = pybpf.system("emulated", cpus=2, modeled_time=modeled)
    items = [b.call("get_smp_processor_id"), b.exit_()]
    fd = emu.prog_load(ProgType.SOCKET_FILTER, asm.encode(asm.assemble(items).instructions),
                       license="GPL")
    prog = emu.prog_from_fd(fd)
    helper = prog.executable.helpers[BpfFunc.get_smp_processor_id]
    engines = ["interp", "jit"] + (["native"] if native_missing() is None else [])
    assert (helper is bpf_get_smp_processor_id) is not modeled
    assert getattr(helper, "__wrapped__", helper) is bpf_get_smp_processor_id
    for engine in engines:
        with emu.on_cpu(1):
            assert prog.run(bytearray(64), engine=engine).retval == 1


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 3), st.integers(-40, 80), st.sampled_from([0, 1, 7, 8, 16, 40, 1 << 32]),
       st.sampled_from(["stack", "short", "record", "none"]), st.integers(0, 520))
def test_probe_read_user_in_c_does_what_the_python_helper_does(block, offset, size, dst,
                                                              dst_offset):
    """bpf_probe_read_user's C twin (the accelerator's, where built) against the Python
    helper: a read in a block, across its end, before the first, at an address out of user
    space; 0 or 2**32 bytes (R2 is cut to 32 bits); into the stack, a short buffer, the
    read-only record, no region: the same R0 or fault, the same destination after."""
    from pybpf.accelerator import PROBE_READ_USER
    from pybpf.emulated.prog.bpf_trace import TASK_SIZE_MAX, bpf_probe_read_user
    from pybpf.emulated.prog.memory import RunState

    if PROBE_READ_USER is None:
        pytest.skip("the C extension (pybpf._cache_model) is not built")
    emu = pybpf.system("emulated", cpus=1, modeled_time=False)
    memory = emu.machine.user_memory
    starts = [memory.map(bytes(range(i * 10, i * 10 + 30))) for i in range(3)]
    src = TASK_SIZE_MAX - 8 if block == 3 else starts[block] + offset
    outcomes = []
    for helper in (PROBE_READ_USER, bpf_probe_read_user):
        rs = RunState(emu.run_env)
        rs.mem[5] = bytearray(b"\xaa" * 512)
        rs.mem[6] = bytearray(b"\xbb" * 12)
        rs.mem[7] = b"\xcc" * 64
        region = {"stack": 5, "short": 6, "record": 7, "none": 8}[dst]
        try:
            result = helper(rs, (region << 32) | dst_offset, size, src, 0, 0)
        except ProgramFault as fault:
            result = ("fault", fault.errno)
        outcomes.append((result, {r: bytes(rs.mem[r]) for r in (5, 6, 7)}))
    assert outcomes[0] == outcomes[1]
