"""bpf_probe_read_kernel{,_str}, bpf_probe_read_user{,_str}, bpf_get_current_comm and
bpf_xdp_get_buff_len on both backends.

The probe reads (kernel/trace/bpf_trace.c) copy into an 8- or 16-byte stack buffer the
program first fills with 0xff, then store the result and the buffer in a map value; the
values must be equal. Addresses no region holds are classed as x86-64 classes them (a user,
non-canonical or vsyscall address: -ERANGE for a kernel read; an unmapped kernel address:
-EFAULT; the user reads: -EFAULT outside user space), and a fault zeroes the buffer.
Kernel memory the emulated backend has is what programs see: the stack, map values, the
packet. bpf_get_current_comm: the test run's task is the calling thread, on both backends.
bpf_xdp_get_buff_len: the linear part and the frags of a test run whose ctx's data_end is
short of data_in. Then the verifier's side: the program types, GPL, a zero size.
"""

from __future__ import annotations

import errno
import struct

import pytest

from helpers import load, load_error
from pybpf.asm import FP, R0, R1, R2, R3, R4, R6, R7
from pybpf.asm import builder as b
from pybpf.errors import BPFError
from pybpf.uapi import MapType, ProgType

ETH_FRAME = bytes.fromhex("020000000002" "020000000001" "0800") + bytes(range(50))
VALUE_SIZE = 48  # r0 (8 bytes), then the destination buffer (up to 40)
XDP_MD = struct.Struct("<6I")


def _fill(off: int, size: int) -> list:
    """0xff into the stack bytes fp+off .. fp+off+size (size a multiple of 8)."""
    return [b.st(8, FP, off + i, -1) for i in range(0, size, 8)]


def _store_result(dst_off: int, size: int) -> list:
    """value[0:8] = R6 (the helper's r0); value[8:8+size] = the stack at fp+dst_off."""
    items = [b.ld_map_value(R7, "out"), b.stxdw(R7, 0, R6)]
    for i in range(0, size, 8):
        items += [b.ldxdw(R1, FP, dst_off + i), b.stxdw(R7, 8 + i, R1)]
    return [*items, b.mov64(R0, 0), b.exit_()]


def _run(system, prog_type, items, data=ETH_FRAME, ctx=None) -> bytes:
    """Load ``items`` (which use the map "out"), run them once, and return the value."""
    fd = system.map_create(MapType.ARRAY, 4, VALUE_SIZE, 1)
    try:
        prog = load(system, prog_type, items, {"out": fd})
        try:
            if prog_type == ProgType.RAW_TRACEPOINT:
                prog.test_run(ctx=bytes(8))
            else:
                prog.test_run(data, ctx=ctx)
        finally:
            prog.close()
        return system.map_lookup_elem(fd, bytes(4))
    finally:
        system.close(fd)


def _answers(kernel, emulated_engine, prog_type, items, **kw) -> tuple[bytes, bytes]:
    return _run(kernel, prog_type, items, **kw), _run(emulated_engine, prog_type, items, **kw)


# -- probe reads of addresses no region holds ----------------------------------------------------
ADDRESSES = [0, 0x1000, 0x7FFF_FFFF_F000, 0x7FFF_FFFF_FFF8, 0x8000_0000_0000,
             0xFFFF_7FFF_FFFF_0000, 0xFFFF_FFFF_0000_0000, 0xFFFF_FFFF_FF60_0000]
PROBE_READS = ["probe_read_kernel", "probe_read_kernel_str", "probe_read_user",
               "probe_read_user_str"]


def _probe(helper: str, size: int, src: list) -> list:
    """helper(fp-16, size, src) after 0xff fills fp-16..fp; result and buffer to the map."""
    return [*_fill(-16, 16), *src, b.mov64(R1, FP), b.add64(R1, -16), b.mov64(R2, size),
            b.call(helper), b.mov64(R6, R0), *_store_result(-16, 16)]


@pytest.mark.parametrize("size", [0, 1, 8, 16])
@pytest.mark.parametrize("addr", ADDRESSES, ids=[hex(a) for a in ADDRESSES])
@pytest.mark.parametrize("helper", PROBE_READS)
def test_probe_read_of_an_address_no_region_holds_is_the_kernels(kernel, emulated_engine,
                                                                  helper, addr, size):
    items = _probe(helper, size, [b.lddw(R3, addr)])
    want, got = _answers(kernel, emulated_engine, ProgType.XDP, items)
    assert got == want


@pytest.mark.parametrize("prog_type", [ProgType.XDP, ProgType.SCHED_CLS,
                                       ProgType.SOCKET_FILTER, ProgType.RAW_TRACEPOINT])
@pytest.mark.parametrize("helper", ["probe_read_kernel", "probe_read_kernel_str"])
def test_probe_read_kernel_of_the_stack_is_the_kernels(kernel, emulated_engine, helper,
                                                       prog_type):
    """A string at fp-40 (NUL at byte 5) read whole, cut short and past its NUL."""
    text = []
    for off, word in ((-40, b"AAabc\0zz"), (-32, b"ABCDEFGH"), (-24, b"IJKLMNOP")):
        text += [b.lddw(R1, int.from_bytes(word, "little")), b.stxdw(FP, off, R1)]
    for size in (3, 5, 6, 8, 16):
        items = [*text, *_probe(helper, size, [b.mov64(R3, FP), b.add64(R3, -40)])]
        want, got = _answers(kernel, emulated_engine, prog_type, items)
        assert got == want, size
    # no NUL within the size: the str variant cuts, its last byte NUL
    items = [*text, *_probe(helper, 16, [b.mov64(R3, FP), b.add64(R3, -32)])]
    want, got = _answers(kernel, emulated_engine, prog_type, items)
    assert got == want


@pytest.mark.parametrize("helper", ["probe_read_kernel", "probe_read_kernel_str"])
def test_probe_read_kernel_of_a_map_value_and_the_packet_is_the_kernels(kernel,
                                                                        emulated_engine,
                                                                        helper):
    """The source a map value (bytes 40.. of "out", zero: an empty string), then the
    packet's bytes 6.. (the source MAC and the EtherType, then 0, 1, ...)."""
    from_value = [b.ld_map_value(R3, "out"), b.add64(R3, 40)]
    want, got = _answers(kernel, emulated_engine, ProgType.XDP,
                         _probe(helper, 8, from_value))
    assert got == want
    from_packet = [b.ldxw(R3, R1, 0), b.ldxw(R2, R1, 4), b.mov64(R4, R3),
                   b.add64(R4, 30), b.jgt(R4, R2, "short"), b.add64(R3, 6)]
    items = [*from_packet, *_probe(helper, 16, []), b.label("short"), b.mov64(R0, 1),
             b.exit_()]
    want, got = _answers(kernel, emulated_engine, ProgType.XDP, items)
    assert got == want


@pytest.mark.parametrize("size", [1, 3, 4, 5, 8, 9, 12, 16])
@pytest.mark.parametrize("text", [b"abc\0defghijklmnopqrstuvw", b"abcdefghij\0klmnopqrstuvw",
                                  b"abcdefghijklmnopqrstuvwxyz", b"\0bcdefghijklmnopqrstuvw"],
                         ids=["nul3", "nul10", "no_nul", "empty"])
@pytest.mark.parametrize("helper", ["probe_read_user", "probe_read_user_str"])
def test_probe_read_user_of_user_memory_is_the_kernels(kernel, emulated_engine, helper, text,
                                                      size):
    """The source: this process's memory for the kernel (a test run's current task is the
    caller), the same bytes mapped into the emulated tasks' user memory for the emulated
    backend; its address comes from the value. The str variant stores the word holding the
    NUL with its bytes from the NUL on zeroed (do_strncpy_from_user), as the kernel does."""
    import ctypes

    host = ctypes.create_string_buffer(text, 64)
    answers = []
    for system in (kernel, emulated_engine):
        src = ctypes.addressof(host) if system is kernel else \
            system.machine.user_memory.map(host.raw)
        fd = system.map_create(MapType.ARRAY, 4, VALUE_SIZE, 1)
        try:
            system.map_update_elem(fd, bytes(4), bytes(40) + struct.pack("<Q", src))
            items = _probe(helper, size, [b.ld_map_value(R3, "out"), b.ldxdw(R3, R3, 40)])
            prog = load(system, ProgType.XDP, items, {"out": fd})
            prog.test_run(ETH_FRAME)
            prog.close()
            answers.append(system.map_lookup_elem(fd, bytes(4))[:24])
        finally:
            system.close(fd)
    assert answers[1] == answers[0]


# -- bpf_get_current_comm ------------------------------------------------------------------------
@pytest.mark.parametrize("size", [1, 2, 4, 8, 15, 16, 17, 24, 40])
@pytest.mark.parametrize("prog_type", [ProgType.XDP, ProgType.SCHED_CLS,
                                       ProgType.RAW_TRACEPOINT])
def test_get_current_comm_is_the_kernels(kernel, emulated_engine, prog_type, size):
    """strscpy_pad: at most size - 1 bytes of the calling thread's comm, NULs to the end;
    the buffer's 0xff fill is all overwritten."""
    rounded = -(-size // 8) * 8
    items = [*_fill(-rounded, rounded), b.mov64(R1, FP), b.add64(R1, -rounded),
             b.mov64(R2, size), b.call("get_current_comm"), b.mov64(R6, R0),
             *_store_result(-rounded, rounded)]
    want, got = _answers(kernel, emulated_engine, prog_type, items)
    assert got == want


def test_get_current_comm_reports_the_emulated_task_set_task_names(emulated):
    items = [*_fill(-16, 16), b.mov64(R1, FP), b.add64(R1, -16), b.mov64(R2, 16),
             b.call("get_current_comm"), b.mov64(R6, R0), *_store_result(-16, 16)]
    machine = emulated.machine
    machine.set_task(4242, comm=b"a-very-long-task-name")
    try:
        value = _run(emulated, ProgType.XDP, items)
    finally:
        machine.current.task = machine.current.comm = None
    assert value[:8] == bytes(8)
    assert value[8:24] == b"a-very-long-tas\0"


# -- bpf_xdp_get_buff_len ------------------------------------------------------------------------
GET_BUFF_LEN = [b.mov64(R6, R1), b.call("xdp_get_buff_len"), b.mov64(R7, R0),
                b.ld_map_value(R1, "out"), b.stxdw(R1, 0, R7), b.mov64(R0, 2), b.exit_()]


@pytest.mark.parametrize("size,linear", [(14, None), (64, None), (1500, None), (3000, None),
                                         (64, 14), (200, 60), (3000, 1000), (9000, 3000)])
def test_xdp_get_buff_len_counts_linear_and_frags_as_the_kernel(kernel, emulated_engine, size,
                                                                linear):
    data = bytes(range(256)) * (size // 256) + bytes(size % 256)
    ctx = None if linear is None else XDP_MD.pack(0, linear, 0, 0, 0, 0)
    want, got = _answers(kernel, emulated_engine, ProgType.XDP, GET_BUFF_LEN, data=data,
                         ctx=ctx)
    assert got == want
    assert struct.unpack_from("<Q", got)[0] == size


@pytest.mark.parametrize("adjust,offset", [("xdp_adjust_head", 10), ("xdp_adjust_head", -20),
                                           ("xdp_adjust_tail", -10), ("xdp_adjust_tail", 30)])
def test_xdp_get_buff_len_follows_head_and_tail_adjustments(kernel, emulated_engine, adjust,
                                                            offset):
    items = [b.mov64(R6, R1), b.mov64(R2, offset), b.call(adjust), b.mov64(R1, R6),
             *GET_BUFF_LEN[1:]]
    want, got = _answers(kernel, emulated_engine, ProgType.XDP, items)
    assert got == want


# -- the verifier --------------------------------------------------------------------------------
PROG_TYPES = [ProgType.SOCKET_FILTER, ProgType.SCHED_CLS, ProgType.SCHED_ACT, ProgType.XDP,
              ProgType.CGROUP_SKB, ProgType.LWT_IN, ProgType.LWT_OUT, ProgType.LWT_XMIT,
              ProgType.SK_SKB, ProgType.SK_MSG, ProgType.KPROBE, ProgType.TRACEPOINT,
              ProgType.RAW_TRACEPOINT]


def _into_stack(helper: str) -> list:
    """helper(fp-16, 8, NULL), or for get_current_comm helper(fp-16, 16)."""
    args = [b.mov64(R2, 16)] if helper == "get_current_comm" else \
        [b.mov64(R2, 8), b.mov64(R3, 0)]
    return [b.mov64(R1, FP), b.add64(R1, -16), *args, b.call(helper)]


CALLS = {helper: _into_stack(helper) for helper in ("probe_read_kernel",
                                                    "probe_read_kernel_str",
                                                    "probe_read_user_str", "get_current_comm")}
CALLS["xdp_get_buff_len"] = [b.call("xdp_get_buff_len")]


@pytest.mark.parametrize("helper", list(CALLS))
@pytest.mark.parametrize("prog_type", PROG_TYPES, ids=[t.name for t in PROG_TYPES])
def test_program_types_that_may_call_the_helper_are_the_kernels(kernel, emulated, helper,
                                                                  prog_type):
    """The probe reads and get_current_comm are bpf_base_func_proto's (CAP_PERFMON): every
    type; bpf_xdp_get_buff_len is XDP's."""
    want = load_error(kernel, prog_type, CALLS[helper])
    got = load_error(emulated, prog_type, CALLS[helper])
    allowed = helper != "xdp_get_buff_len" or prog_type == ProgType.XDP
    assert want[0] == (0 if allowed else errno.EINVAL)
    assert got[0] == want[0]
    if not allowed:
        assert f"program of this type cannot use helper bpf_{helper}#" in got[1]
        assert "does not implement" not in got[1]


@pytest.mark.parametrize("helper", ["probe_read_kernel", "probe_read_kernel_str",
                                    "probe_read_user_str", "get_current_comm"])
def test_gpl_only_probe_reads_are_refused_to_other_licenses(kernel, emulated, helper):
    want = load_error(kernel, ProgType.KPROBE, CALLS[helper], license="MIT")
    got = load_error(emulated, ProgType.KPROBE, CALLS[helper], license="MIT")
    assert got[0] == want[0] == (0 if helper == "get_current_comm" else errno.EINVAL)
    if got[0]:
        assert "cannot call GPL-restricted function" in got[1]


def test_get_current_comm_of_zero_bytes_is_refused_as_by_the_kernel(kernel, emulated):
    items = [b.mov64(R1, FP), b.add64(R1, -16), b.mov64(R2, 0), b.call("get_current_comm")]
    want = load_error(kernel, ProgType.XDP, items)
    got = load_error(emulated, ProgType.XDP, items)
    assert want[0] == errno.EACCES
    assert got[0] == want[0]


def test_probe_read_kernel_leaves_no_spilled_value_behind(kernel, emulated):
    """The buffer is written: a pointer spilled there is a scalar after the call, so loading
    through it is refused on both backends."""
    items = [b.ld_map_value(R6, "out"), b.stxdw(FP, -8, R6), b.mov64(R1, FP), b.add64(R1, -8),
             b.mov64(R2, 8), b.mov64(R3, 0), b.call("probe_read_kernel"), b.ldxdw(R1, FP, -8),
             b.ldxdw(R0, R1, 0)]
    errors = []
    for system in (kernel, emulated):
        fd = system.map_create(MapType.ARRAY, 4, VALUE_SIZE, 1)
        try:
            with pytest.raises(BPFError) as info:
                load(system, ProgType.XDP, [*items, b.exit_()], {"out": fd})
            errors.append(info.value.errno)
        finally:
            system.close(fd)
    assert errors[1] == errors[0] == errno.EACCES


# -- bpf_skb_pull_data ---------------------------------------------------------------------------
def _pull(length: int) -> list:
    """bpf_skb_pull_data(skb, length); then value = r0, data_end - data (read again: the
    verifier forgot the packet pointers), the first packet byte or 0x100 when none."""
    return [b.mov64(R6, R1), b.lddw(R2, length), b.call("skb_pull_data"), b.mov64(R7, R0),
            b.ld_map_value(R3, "out"), b.stxdw(R3, 0, R7),
            b.ldxw(R1, R6, 76), b.ldxw(R2, R6, 80), b.mov64(R4, R2), b.sub64(R4, R1),
            b.stxdw(R3, 8, R4), b.mov64(R4, 0x100), b.mov64(R0, R1), b.add64(R0, 1),
            b.jgt(R0, R2, "empty"), b.ldxb(R4, R1, 0), b.label("empty"), b.stxdw(R3, 16, R4),
            b.mov64(R0, 0), b.exit_()]


@pytest.mark.parametrize("length", [0, 1, 14, 63, 64, 65, 1500, 0xFFFF_FFFF, 1 << 32,
                                    (1 << 32) + 65])
@pytest.mark.parametrize("prog_type", [ProgType.SCHED_CLS, ProgType.SCHED_ACT,
                                       ProgType.LWT_IN, ProgType.LWT_XMIT])
def test_skb_pull_data_is_the_kernels(kernel, emulated_engine, prog_type, length):
    """Up to skb->len: 0 (the test run's skb is linear); past it: -ENOMEM; only the low 32
    bits of the length count."""
    want, got = _answers(kernel, emulated_engine, prog_type, _pull(length))
    assert got == want


def test_skb_pull_data_forgets_the_packet_pointers_as_the_kernel(kernel, emulated):
    """A packet pointer checked before the call may not be used after it."""
    items = [b.mov64(R6, R1), b.ldxw(R7, R1, 76), b.ldxw(R2, R1, 80), b.mov64(R3, R7),
             b.add64(R3, 1), b.jgt(R3, R2, "out"), b.mov64(R1, R6), b.mov64(R2, 0),
             b.call("skb_pull_data"), b.ldxb(R0, R7, 0), b.label("out"), b.mov64(R0, 0),
             b.exit_()]
    want = load_error(kernel, ProgType.SCHED_CLS, items[:-2])
    got = load_error(emulated, ProgType.SCHED_CLS, items[:-2])
    assert want[0] == errno.EACCES
    assert got[0] == want[0]


SKB_PULL_TYPES = {ProgType.SCHED_CLS, ProgType.SCHED_ACT, ProgType.LWT_IN, ProgType.LWT_OUT,
                  ProgType.LWT_XMIT, ProgType.SK_SKB}


@pytest.mark.parametrize("prog_type", PROG_TYPES, ids=[t.name for t in PROG_TYPES])
def test_program_types_that_may_call_skb_pull_data_are_the_kernels(kernel, emulated,
                                                                     prog_type):
    items = [b.mov64(R2, 0), b.call("skb_pull_data")]
    want = load_error(kernel, prog_type, items)
    got = load_error(emulated, prog_type, items)
    assert want[0] == (0 if prog_type in SKB_PULL_TYPES else errno.EINVAL)
    assert got[0] == want[0]
