"""KernelSystem behaviour only the real kernel shows: CPUs, threads, fd caching, programs,
test runs and tracepoint attachment. Programs are hand-assembled so these tests depend on
nothing but the kernel backend."""

from __future__ import annotations

import errno
import mmap
import os
import struct
import threading

import pytest

from pybpf.errors import NotSupportedError, VerifierError
from pybpf.kernel.syscall import num_possible_cpus
from pybpf.uapi import MapFlags, MapType, ProgType


def insn(op: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
    return struct.pack("<BBhi", op, dst | (src << 4), off, imm)


MOV64_IMM, MOV64_REG, ADD64_IMM, ST_MEM_W, LDDW = 0xB7, 0xBF, 0x07, 0x62, 0x18
MOV32_REG, CALL, JEQ_IMM, JNE_IMM, ATOMIC_DW, EXIT = 0xBC, 0x85, 0x15, 0x55, 0xDB, 0x95
BPF_PSEUDO_MAP_FD, BPF_FUNC_map_lookup_elem, BPF_FUNC_get_current_pid_tgid = 1, 1, 14
XDP_PASS = 2


def ret(value: int) -> bytes:
    return insn(MOV64_IMM, 0, imm=value) + insn(EXIT)


def count_into(map_fd: int) -> bytes:
    """value[0] += 1 in an ARRAY map of u64, then return 0."""
    return b"".join([
        insn(ST_MEM_W, 10, off=-4, imm=0),                  # *(u32 *)(r10 - 4) = 0
        insn(MOV64_REG, 2, 10), insn(ADD64_IMM, 2, imm=-4),  # r2 = &key
        insn(LDDW, 1, BPF_PSEUDO_MAP_FD, imm=map_fd), insn(0),  # r1 = map
        insn(CALL, imm=BPF_FUNC_map_lookup_elem),
        insn(JEQ_IMM, 0, off=2, imm=0),                     # if !r0 goto out
        insn(MOV64_IMM, 1, imm=1),
        insn(ATOMIC_DW, 0, 1),                              # lock *(u64 *)r0 += r1
        ret(0),                                             # out:
    ])


# -- machine -----------------------------------------------------------------------------------

def test_num_possible_cpus_and_topology(kernel):
    assert kernel.num_possible_cpus == num_possible_cpus() >= 1
    topology = kernel.topology
    assert topology.num_cpus == kernel.num_possible_cpus
    assert all(0 <= node < topology.num_nodes for node in topology.cpu_node)


def test_on_cpu_pins_the_thread_and_restores_affinity(kernel):
    before = os.sched_getaffinity(0)
    for cpu in sorted(before):
        with kernel.on_cpu(cpu):
            assert os.sched_getaffinity(0) == {cpu}
            assert kernel.current_cpu() == cpu
        assert os.sched_getaffinity(0) == before


def test_on_cpu_of_missing_cpu_gives_einval_and_keeps_affinity(kernel):
    before = os.sched_getaffinity(0)
    with pytest.raises(OSError) as info, kernel.on_cpu(4096):
        pass
    assert info.value.errno == errno.EINVAL and "CPU 4096" in str(info.value)
    assert os.sched_getaffinity(0) == before


# -- element path details ----------------------------------------------------------------------

def test_threads_looking_up_maps_of_different_value_sizes_get_their_own_bytes(kernel):
    maps = []
    for size in (4, 8, 40, 1000):
        fd = kernel.map_create(MapType.HASH, 4, size, 4)
        kernel.map_update_elem(fd, b"\0\0\0\0", bytes([size % 251]) * size)
        maps.append((fd, size))
    failures = []

    def worker(fd: int, size: int) -> None:
        fast = kernel.fast_ops(fd).lookup
        for _ in range(2000):
            for got in (kernel.map_lookup_elem(fd, b"\0\0\0\0"), fast(b"\0\0\0\0")):
                if got != bytes([size % 251]) * size:
                    failures.append((fd, size, got[:8]))

    threads = [threading.Thread(target=worker, args=m) for m in maps]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for fd, _ in maps:
        kernel.close(fd)
    assert failures == []


def test_reused_fd_number_gets_the_new_maps_sizes(kernel, no_gc):
    fd = kernel.map_create(MapType.HASH, 4, 4, 4)
    kernel.close(fd)
    again = kernel.map_create(MapType.HASH, 8, 64, 4)
    try:
        assert again == fd  # the lowest free fd comes back
        kernel.map_update_elem(again, b"k" * 8, b"v" * 64)
        assert kernel.map_lookup_elem(again, b"k" * 8) == b"v" * 64
    finally:
        kernel.close(again)


def test_keys_may_be_bytearray_or_memoryview(kernel):
    fd = kernel.map_create(MapType.HASH, 4, 4, 4)
    try:
        kernel.map_update_elem(fd, bytearray(b"abcd"), memoryview(b"wxyz"))
        assert kernel.map_lookup_elem(fd, memoryview(b"abcd")) == b"wxyz"
        assert kernel.fast_ops(fd).lookup(bytearray(b"abcd")) == b"wxyz"
    finally:
        kernel.close(fd)


def test_fast_ops_lookup_fails_like_map_lookup_elem(kernel):
    fd = kernel.map_create(MapType.HASH, 4, 4, 4, map_name=b"fast")
    try:
        with pytest.raises(KeyError) as slow:
            kernel.map_lookup_elem(fd, b"none")
        with pytest.raises(KeyError) as fast:
            kernel.fast_ops(fd).lookup(b"none")
        assert str(fast.value) == str(slow.value)
        assert "hash map 'fast' (id " in str(fast.value)
    finally:
        kernel.close(fd)


def test_element_command_on_a_non_map_fd_gives_einval(kernel):
    read_end, write_end = os.pipe()
    try:
        with pytest.raises(OSError) as info:
            kernel.map_lookup_elem(read_end, b"\0\0\0\0")
        assert info.value.errno == errno.EINVAL and "not a BPF map" in str(info.value)
    finally:
        os.close(read_end)
        os.close(write_end)


def test_freeze_with_a_writable_mmap_gives_ebusy(kernel):
    fd = kernel.map_create(MapType.ARRAY, 4, 8, 512, map_flags=MapFlags.MMAPABLE)
    try:
        region = mmap.mmap(fd, 4096, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        region[0:8] = b"mmapped!"
        assert kernel.map_lookup_elem(fd, b"\0\0\0\0") == b"mmapped!"
        with pytest.raises(OSError) as info:
            kernel.map_freeze(fd)
        assert info.value.errno == errno.EBUSY
        region.close()
        kernel.map_freeze(fd)
    finally:
        kernel.close(fd)


# -- programs ----------------------------------------------------------------------------------

@pytest.fixture
def counter(kernel):
    fd = kernel.map_create(MapType.ARRAY, 4, 8, 1, map_name=b"counter")
    yield fd
    kernel.close(fd)


def test_prog_load_test_run_and_info(kernel, counter):
    fd = kernel.prog_load(ProgType.XDP, count_into(counter)[:-16] + ret(XDP_PASS),
                          prog_name=b"count_pass")
    try:
        packet = bytes(range(64))
        run = kernel.prog_test_run(fd, packet, repeat=5)
        assert run.retval == XDP_PASS and run.data_out == packet
        assert kernel.map_lookup_elem(counter, b"\0\0\0\0") == struct.pack("<Q", 5)
        info = kernel.prog_get_info(fd)
        assert (info.type, info.name) == (ProgType.XDP, "count_pass")
        assert info.map_ids == (kernel.map_get_info(counter).id,)
        assert len(info.tag) == 8 and info.xlated_prog_len > 0
        again = kernel.prog_get_fd_by_id(info.id)
        assert kernel.prog_get_info(again).id == info.id
        kernel.close(again)
    finally:
        kernel.close(fd)


def test_prog_test_run_small_data_out_gives_enospc(kernel):
    fd = kernel.prog_load(ProgType.XDP, ret(XDP_PASS))
    try:
        with pytest.raises(OSError) as info:
            kernel.prog_test_run(fd, bytes(64), data_size_out=16)
        assert info.value.errno == errno.ENOSPC
    finally:
        kernel.close(fd)


def test_prog_test_run_unsupported_type_gives_enotsupp(kernel):
    fd = kernel.prog_load(ProgType.TRACEPOINT, ret(0))
    try:
        with pytest.raises(NotSupportedError):
            kernel.prog_test_run(fd)
    finally:
        kernel.close(fd)


def test_rejected_program_raises_verifier_error_with_log(kernel):
    with pytest.raises(VerifierError) as info:
        kernel.prog_load(ProgType.SOCKET_FILTER, insn(EXIT), prog_name=b"no_r0")
    assert info.value.errno == errno.EACCES
    assert "R0 !read_ok" in info.value.log
    assert "verifier: R0 !read_ok" in str(info.value)


def test_prog_load_rejects_partial_instruction(kernel):
    with pytest.raises(OSError) as info:
        kernel.prog_load(ProgType.SOCKET_FILTER, ret(0) + b"\0\0\0")
    assert info.value.errno == errno.EINVAL and "multiple of 8" in str(info.value)


def count_this_thread_into(map_fd: int) -> bytes:
    """count_into, for calls made by this thread only (so no other process's run counts)."""
    counting = count_into(map_fd)
    return b"".join([
        insn(CALL, imm=BPF_FUNC_get_current_pid_tgid),
        insn(MOV32_REG, 0, 0),                              # r0 = thread id (low 32 bits)
        insn(JNE_IMM, 0, off=len(counting) // 8 - 2, imm=threading.get_native_id()),
        counting,                                           # jumps to its final ret(0)
    ])


def test_tracepoint_program_runs_until_its_handle_is_closed(kernel, counter):
    def count() -> int:
        return struct.unpack("<Q", kernel.map_lookup_elem(counter, b"\0\0\0\0"))[0]

    prog = kernel.prog_load(ProgType.TRACEPOINT, count_this_thread_into(counter))
    try:
        handle = kernel.attach_tracepoint(prog, "syscalls", "sys_enter_getpid")
        for _ in range(10):
            os.getpid()
        assert count() == 10
        kernel.close(handle)
        for _ in range(10):
            os.getpid()
        assert count() == 10
    finally:
        kernel.close(prog)


def test_attach_to_missing_tracepoint_gives_enoent_with_where_it_looked(kernel):
    prog = kernel.prog_load(ProgType.TRACEPOINT, ret(0))
    try:
        with pytest.raises(OSError) as info:
            kernel.attach_tracepoint(prog, "syscalls", "sys_enter_no_such_call")
        assert info.value.errno == errno.ENOENT and "tracefs" in str(info.value)
    finally:
        kernel.close(prog)


def test_syscall_program_writing_its_ctx_leaves_the_callers_bytes_untouched(kernel):
    # The kernel copies a syscall program's ctx back into ctx_in: that must land in a
    # private buffer, never in the caller's immutable bytes object.
    from pybpf.asm import R0, R1, encode, exit_, mov64, stw
    from pybpf.uapi import BPF_F_SLEEPABLE

    insns = encode([stw(R1, 0, 0x41414141), mov64(R0, 0), exit_()])
    fd = kernel.prog_load(ProgType.SYSCALL, insns, prog_flags=BPF_F_SLEEPABLE)
    try:
        ctx = b"zzzzzzzz"
        kernel.prog_test_run(fd, ctx_in=ctx, ctx_size_out=0, repeat=0)
        assert ctx == b"zzzzzzzz"
    finally:
        kernel.close(fd)


@pytest.mark.parametrize("attrs, errno_, says", [
    (dict(map_type=MapType.LRU_HASH, map_flags=MapFlags.NO_PREALLOC), 524, "BPF_F_NO_PREALLOC"),
    (dict(map_type=MapType.HASH, map_flags=MapFlags.NUMA_NODE, numa_node=64), errno.EINVAL,
     "numa_node 64"),
    (dict(map_type=MapType.ARRAY, key_size=8), errno.EINVAL, "key_size"),
    (dict(map_type=MapType.HASH, map_extra=1), errno.EINVAL, "map_extra"),
])
def test_refused_create_names_the_attribute(kernel, attrs, errno_, says):
    # The kernel says only EINVAL/ENOTSUPP; the emulated checks, run in the same order, say why.
    args = dict(key_size=4, value_size=8, max_entries=4) | attrs
    with pytest.raises(OSError) as exc:
        kernel.map_create(**args)
    assert exc.value.errno == errno_
    assert says in str(exc.value) and says in exc.value.detail


def test_ids_fds_and_counts_beyond_their_fields_are_refused_not_wrapped(kernel):
    # ctypes wraps an int into a u32 field: id + 2**32 would open the map with that id.
    fd = kernel.map_create(MapType.HASH, 4, 8, 4)
    try:
        map_id = kernel.map_get_info(fd).id
        with pytest.raises(OSError) as info:
            kernel.map_get_fd_by_id(map_id + (1 << 32))
        assert info.value.errno == errno.ENOENT
        with pytest.raises(OSError) as info:
            kernel.map_get_info(fd + (1 << 32))
        assert info.value.errno == errno.EBADFD
        with pytest.raises(OSError) as info:
            kernel.map_lookup_elem(fd + (1 << 32), bytes(4))
        assert info.value.errno == errno.EBADF
        with pytest.raises(OSError, match="not an unsigned 32-bit integer") as info:
            kernel.map_lookup_batch(fd, None, (1 << 32) + 1)
        assert info.value.errno == errno.EINVAL
        for call in (lambda: kernel.map_freeze(fd + (1 << 32)),
                     lambda: kernel.obj_pin(fd + (1 << 32), "/sys/fs/bpf/pybpf_never_pinned"),
                     lambda: kernel.prog_test_run(fd + (1 << 32), bytes(64)),
                     lambda: kernel.attach_tracepoint(fd + (1 << 32), "syscalls",
                                                      "sys_enter_getpid"),
                     lambda: kernel.close(fd + (1 << 32)), lambda: kernel.close("3")):
            with pytest.raises(OSError) as info:
                call()
            assert info.value.errno == errno.EBADF
        assert not os.path.exists("/sys/fs/bpf/pybpf_never_pinned")
        kernel.map_update_elem(fd, bytes(4), bytes(8))  # not frozen by the wrapped fd
    finally:
        kernel.close(fd)
