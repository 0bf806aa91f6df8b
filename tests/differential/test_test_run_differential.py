"""BPF_PROG_TEST_RUN input checks and outputs (net/bpf/test_run.c) on both backends: the same
errno, or the same retval, data_out and ctx_out, for skb and XDP test runs.

The programs copy what the test run set up (len, pkt_type, protocol, wire_len, gso_segs,
gso_size, ingress device and queue, packet bounds) into cb[] or the return value, so ctx_out
and retval show it. Devices: the emulated machine has only the loopback device, so ifindex
values are 0, 1 or one no host has.
"""

from __future__ import annotations

import errno
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pybpf.asm import assemble_text
from pybpf.errors import BPFError
from pybpf.uapi import ProgType

NO_SUCH_IFINDEX = 0x7FFF_FFF0

# cb[0..4] = len, pkt_type, protocol, gso_segs, gso_size; r0 = ifindex << 16 | ingress_ifindex
SOCKET_FILTER = """
    r2 = *(u32 *)(r1 +0)
    *(u32 *)(r1 +48) = r2
    r2 = *(u32 *)(r1 +4)
    *(u32 *)(r1 +52) = r2
    r2 = *(u32 *)(r1 +16)
    *(u32 *)(r1 +56) = r2
    r2 = *(u32 *)(r1 +164)
    *(u32 *)(r1 +60) = r2
    r2 = *(u32 *)(r1 +176)
    *(u32 *)(r1 +64) = r2
    r0 = *(u32 *)(r1 +40)
    r0 <<= 16
    r2 = *(u32 *)(r1 +36)
    r0 += r2
    exit
"""
# cb[0..4] = wire_len, pkt_type, protocol, gso_size, data_end - data; mark += 1; r0 = len
SKB_DIRECT = """
    r2 = *(u32 *)(r1 +160)
    *(u32 *)(r1 +48) = r2
    r2 = *(u32 *)(r1 +4)
    *(u32 *)(r1 +52) = r2
    r2 = *(u32 *)(r1 +16)
    *(u32 *)(r1 +56) = r2
    r2 = *(u32 *)(r1 +176)
    *(u32 *)(r1 +60) = r2
    r2 = *(u32 *)(r1 +80)
    r3 = *(u32 *)(r1 +76)
    r2 -= r3
    *(u32 *)(r1 +64) = r2
    r0 = *(u32 *)(r1 +0)
    exit
"""
SCHED_CLS = SKB_DIRECT.replace("    r0 = *(u32 *)(r1 +0)", """    r2 = *(u32 *)(r1 +8)
    r2 += 1
    *(u32 *)(r1 +8) = r2
    r0 = *(u32 *)(r1 +0)""")
# cgroup skb and lwt programs may not read wire_len: cb[0] = len there
LWT = SKB_DIRECT.replace("(r1 +160)", "(r1 +0)")
CGROUP_SKB = LWT.replace("    r0 = *(u32 *)(r1 +0)\n", "    r0 = 1\n")
# r0 = rx_queue_index << 24 | ingress_ifindex << 16 | (data_end - data)
XDP = """
    r2 = *(u32 *)(r1 +4)
    r3 = *(u32 *)(r1 +0)
    r2 -= r3
    r0 = *(u32 *)(r1 +12)
    r0 <<= 16
    r0 += r2
    r2 = *(u32 *)(r1 +16)
    r2 <<= 24
    r0 += r2
    exit
"""
PROGRAMS = {ProgType.SOCKET_FILTER: SOCKET_FILTER, ProgType.SCHED_CLS: SCHED_CLS,
            ProgType.CGROUP_SKB: CGROUP_SKB, ProgType.LWT_IN: LWT, ProgType.XDP: XDP}


def _load(system, prog_type: int) -> int:
    insns = b"".join(i.encode() for i in assemble_text(PROGRAMS[prog_type]).instructions)
    return system.prog_load(prog_type, insns)


def _test_run(system, fd: int, data: bytes, **kwargs) -> tuple:
    try:
        run = system.prog_test_run(fd, data, **kwargs)
    except BPFError as exc:
        return (errno.errorcode.get(exc.errno, exc.errno),)
    return run.retval, run.data_out, run.ctx_out


@pytest.fixture
def programs(kernel, emulated):
    """prog type -> (kernel fd, emulated fd)."""
    fds = {t: (_load(kernel, t), _load(emulated, t)) for t in PROGRAMS}
    yield fds
    for kernel_fd, emulated_fd in fds.values():
        kernel.close(kernel_fd)
        emulated.close(emulated_fd)


def _frame(dst: bytes, ethertype: bytes, size: int, fill: bytes = b"") -> bytes:
    frame = dst + bytes(range(1, 7)) + ethertype + fill
    return (frame + bytes(max(0, size - len(frame))))[:size]


BROADCAST = b"\xff" * 6


@pytest.mark.parametrize("ethertype,size,ok", [
    (b"\x08\x00", 33, False), (b"\x08\x00", 34, True), (b"\x86\xdd", 53, False),
    (b"\x86\xdd", 54, True), (b"\x08\x06", 14, True),
])
@pytest.mark.parametrize("prog_type", [ProgType.SOCKET_FILTER, ProgType.SCHED_CLS])
def test_an_ip_frame_too_short_for_its_header_is_einval(backend, prog_type, ethertype, size, ok):
    fd = _load(backend, prog_type)
    try:
        result = _test_run(backend, fd, _frame(bytes(6), ethertype, size))
        assert (result[0] != "EINVAL") == ok, result
    finally:
        backend.close(fd)


def _cb(ctx_out: bytes) -> tuple[int, ...]:
    return struct.unpack_from("<5I", ctx_out, 48)


def test_test_run_skb_takes_wire_len_and_truncates_gso_size(backend):
    fd = _load(backend, ProgType.SCHED_CLS)
    try:
        ctx = bytearray(192)
        struct.pack_into("<I", ctx, 160, 1000)  # wire_len: from the skb's length to 64 KiB
        struct.pack_into("<I", ctx, 176, 0x12345)  # gso_size: a u16 in skb_shared_info
        run = backend.prog_test_run(fd, _frame(bytes(6), b"\x08\x06", 60), ctx_in=bytes(ctx))
        wire_len, _, _, gso_size, _ = _cb(run.ctx_out)
        assert (wire_len, gso_size) == (1000, 0x2345)
        struct.pack_into("<I", ctx, 160, 59)  # shorter than the packet
        with pytest.raises(BPFError) as info:
            backend.prog_test_run(fd, _frame(bytes(6), b"\x08\x06", 60), ctx_in=bytes(ctx))
        assert info.value.errno == errno.EINVAL
    finally:
        backend.close(fd)


@pytest.mark.parametrize("dst,pkt_type", [
    (bytes(6), 0), (BROADCAST, 2), (b"\x01\x00\x5e\x00\x00\x01", 2), (b"\x02" + bytes(5), 3),
])
def test_pkt_type_is_the_loopback_devices_view(backend, dst, pkt_type):
    # lo's broadcast address is all zeros, so ff:ff:ff:ff:ff:ff is multicast to it
    fd = _load(backend, ProgType.SOCKET_FILTER)
    try:
        run = backend.prog_test_run(fd, _frame(dst, b"\x08\x06", 42), ctx_size_out=192)
        assert _cb(run.ctx_out)[1] == pkt_type
    finally:
        backend.close(fd)


@pytest.mark.parametrize("ethertype,after,protocol", [
    (b"\x08\x00", b"", 0x0800), (b"\x05\xff", b"\xff\xff", 0x0001), (b"\x00\x40", b"", 0x0004),
])
def test_protocol_of_an_802_3_frame_is_eth_type_trans(backend, ethertype, after, protocol):
    fd = _load(backend, ProgType.SOCKET_FILTER)
    try:
        run = backend.prog_test_run(fd, _frame(bytes(6), ethertype, 60, after),
                                    ctx_size_out=192)
        assert _cb(run.ctx_out)[2] == int.from_bytes(protocol.to_bytes(2, "big"), "little")
    finally:
        backend.close(fd)


@pytest.mark.parametrize("flags,retval", [(0, 7), (1, 7), (2, 2), (1 << 32, 2)])
@pytest.mark.parametrize("prog_type", [ProgType.SCHED_CLS, ProgType.SCHED_ACT, ProgType.LWT_XMIT])
def test_bpf_redirect_in_an_skb_program_returns_its_verdict(kernel, emulated, prog_type, flags,
                                                             retval):
    """tc's and lwt_xmit's bpf_redirect: TC_ACT_REDIRECT (BPF_REDIRECT), or TC_ACT_SHOT for a
    flag but BPF_F_INGRESS; a test run returns it and redirects nothing."""
    program = b"".join(i.encode() for i in assemble_text(
        f"r1 = 1\nr2 = {flags} ll\ncall 23\nexit").instructions)
    results = []
    for system in (kernel, emulated):
        fd = system.prog_load(prog_type, program)
        try:
            results.append(_test_run(system, fd, _frame(bytes(6), b"\x08\x06", 60)))
        finally:
            system.close(fd)
    assert results[1] == results[0]
    assert results[0][0] == retval


# -- random inputs: same errno or same outputs ----------------------------------------------------
ETHERTYPES = [b"\x08\x00", b"\x86\xdd", b"\x08\x06", b"\x81\x00", b"\x00\x40", b"\x05\xff",
              b"\x06\x00", b"\xff\xff"]
DESTINATIONS = [bytes(6), BROADCAST, b"\x01\x00\x5e\x00\x00\x01", b"\x02" + bytes(5),
                b"\x33\x33\x00\x00\x00\x01"]
SIZES = [0, 13, 14, 15, 16, 33, 34, 53, 54, 60, 1500, 3711, 3712, 3713, 4000, 5000]


@st.composite
def frames(draw) -> bytes:
    size = draw(st.one_of(st.sampled_from(SIZES), st.integers(0, 200)))
    ethertype = draw(st.one_of(st.sampled_from(ETHERTYPES), st.binary(min_size=2, max_size=2)))
    return _frame(draw(st.sampled_from(DESTINATIONS)), ethertype, size,
                  draw(st.binary(max_size=48)))


def _u32(values: list[int]) -> st.SearchStrategy[int]:
    return st.one_of(st.sampled_from(values), st.integers(0, (1 << 32) - 1))


@st.composite
def sk_buff_ctx(draw, size: int) -> bytes | None:
    """A __sk_buff for ctx_in: the fields a test run takes, sometimes a byte it does not,
    sometimes cut short or with a tail."""
    if draw(st.booleans()):
        return None
    ctx = bytearray(192)
    fields = {8: _u32([0, 1]), 32: _u32([0, 7]), 36: _u32([0, 1]),
              40: st.sampled_from([0, 1, NO_SUCH_IFINDEX]),
              160: _u32([0, size, size - 1, size + 1, size - 14, 65536, 65537]),
              164: _u32([0, 1, 65535, 65536]), 176: _u32([0, 1400, 65535, 65536])}
    for off, values in fields.items():
        if draw(st.booleans()):
            struct.pack_into("<I", ctx, off, draw(values) % (1 << 32))
    for off, length in ((48, 20), (152, 8), (184, 8)):
        if draw(st.booleans()):
            ctx[off:off + length] = draw(st.binary(min_size=length, max_size=length))
    if draw(st.integers(0, 9)) == 0:
        ctx[draw(st.integers(0, 191))] = draw(st.integers(1, 255))
    length = draw(st.sampled_from([192, 192, 191, 200, 8]))
    if length > 192:
        return bytes(ctx) + bytes(length - 193) + bytes([draw(st.integers(0, 1))])
    return bytes(ctx[:length])


@st.composite
def xdp_md_ctx(draw, size: int) -> bytes | None:
    if draw(st.booleans()):
        return None
    data = draw(st.sampled_from([0, 0, 3, 4, 8, 32, 36, 252, 256, size]))
    data_end = draw(st.sampled_from([size, size, size - 1, size + 1, data, 0, 14]))
    fields = (data, data_end, draw(st.sampled_from([0, 0, 0, 4])),
              draw(st.sampled_from([0, 0, 1, NO_SUCH_IFINDEX])), draw(st.sampled_from([0, 0, 1])),
              draw(st.sampled_from([0, 0, 0, 1])))
    ctx = struct.pack("<6I", *(v % (1 << 32) for v in fields))
    length = draw(st.sampled_from([24, 24, 20, 28]))
    return ctx[:length] if length <= 24 else ctx + bytes(length - 24)


@st.composite
def run_inputs(draw) -> tuple:
    prog_type = draw(st.sampled_from(sorted(PROGRAMS)))
    data = draw(frames())
    ctx = draw(xdp_md_ctx(len(data)) if prog_type == ProgType.XDP else sk_buff_ctx(len(data)))
    kwargs = {"ctx_in": ctx}
    ctx_size = 24 if prog_type == ProgType.XDP else 192
    ctx_size_out = draw(st.sampled_from([None, 0, ctx_size, 8]))
    if ctx_size_out is not None:
        kwargs["ctx_size_out"] = ctx_size_out
    data_size_out = draw(st.sampled_from([None, None, 0, 8, len(data)]))
    if data_size_out is not None:
        kwargs["data_size_out"] = data_size_out
    if prog_type != ProgType.XDP and draw(st.integers(0, 4)) == 0:
        kwargs["flags"] = 4  # BPF_F_TEST_SKB_CHECKSUM_COMPLETE
    return prog_type, data, kwargs


@settings(max_examples=400, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(case=run_inputs())
def test_random_test_run_inputs_get_the_kernels_answer(programs, kernel, emulated, case,
                                                       differential_tally):
    prog_type, data, kwargs = case
    kernel_fd, emulated_fd = programs[prog_type]
    on_kernel = _test_run(kernel, kernel_fd, data, **kwargs)
    on_emulator = _test_run(emulated, emulated_fd, data, **kwargs)
    differential_tally.add("kernel", "emulated", "test_run inputs", 1, 1,
                           int(on_kernel != on_emulator))
    assert on_emulator == on_kernel


SKF_NET_OFF, SKF_LL_OFF = -0x100000, -0x200000
LD_ABS_SIZES = {1: "u8", 2: "u16", 4: "u32"}


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(prog_type=st.sampled_from([ProgType.SOCKET_FILTER, ProgType.SCHED_CLS]),
       base=st.sampled_from([SKF_LL_OFF, SKF_NET_OFF, 0]),
       delta=st.integers(-3, 70), size=st.sampled_from(sorted(LD_ABS_SIZES)),
       indirect=st.booleans(), frame=st.binary(min_size=34, max_size=64))
def test_ld_abs_and_ld_ind_reach_the_mac_and_network_headers(kernel, emulated_engine, prog_type,
                                                             base, delta, size, indirect,
                                                             frame, differential_tally):
    """bpf_internal_load_pointer_neg_helper: SKF_LL_OFF + k reads the MAC header's byte k,
    SKF_NET_OFF + k the network header's, up to the frame's end; anything else past it
    ends the run with 0."""
    frame = frame[:12] + b"\x08\x00" + frame[14:]  # IPv4, so the test run takes it
    load = (f"r2 = {base + delta}\n    r0 = *({LD_ABS_SIZES[size]} *)skb[r2 + 0]" if indirect
            else f"r0 = *({LD_ABS_SIZES[size]} *)skb[{base + delta}]")
    text = f"r6 = r1\n    {load}\n    r0 += 1000\n    exit"
    results = []
    for system in (kernel, emulated_engine):
        fd = system.prog_load(prog_type, b"".join(
            i.encode() for i in assemble_text(text).instructions))
        results.append(system.prog_test_run(fd, frame).retval)
        system.close(fd)
    differential_tally.add("kernel", "emulated", "ld_abs offsets", 1, 1,
                           int(results[0] != results[1]))
    assert results[1] == results[0]
