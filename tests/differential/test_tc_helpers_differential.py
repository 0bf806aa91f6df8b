"""bpf_skb_store_bytes, bpf_l3_csum_replace and bpf_l4_csum_replace on both backends.

The same program bytes, as a tc and as an lwt_xmit program, go through BPF_PROG_TEST_RUN on
each backend (the emulated one on each of its engines), with random packets, offsets,
values and flags, with and without BPF_F_TEST_SKB_CHECKSUM_COMPLETE (where a change
skb->csum did not follow fails the run, EBADMSG): the retval, the packet after and the
run's errno must be the kernel's. The rest is case tables: the program types that may call
each helper, the verifier's checks of their arguments, and the packet pointers it forgets
after each call.
"""

from __future__ import annotations

import errno
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import load, load_error, loaded_on_each
from pybpf.asm import FP, R0, R1, R2, R3, R4, R5, R6, R7
from pybpf.asm import builder as b
from pybpf.uapi import (
    BPF_F_IPV6,
    BPF_F_MARK_ENFORCE,
    BPF_F_MARK_MANGLED_0,
    BPF_F_PSEUDO_HDR,
    BPF_F_RECOMPUTE_CSUM,
    BPF_F_TEST_SKB_CHECKSUM_COMPLETE,
    ProgType,
)

VALUE_SIZE = 80
# bpf_l3_csum_replace / bpf_l4_csum_replace(skb, offset, from, to, flags), the four from
# the value: offset (u32 at 0), from, to, flags (u64 at 8, 16, 24)
CSUM_REPLACE = {helper: [b.mov64(R6, R1), b.ld_map_value(R7, "m"), b.ldxw(R2, R7, 0),
                         b.ldxdw(R3, R7, 8), b.ldxdw(R4, R7, 16), b.ldxdw(R5, R7, 24),
                         b.mov64(R1, R6), b.call(helper), b.exit_()]
                for helper in ("l3_csum_replace", "l4_csum_replace")}
CSUM_REPLACE_ARGS = struct.Struct("<I4xQQQ")
# bpf_skb_store_bytes(skb, offset, from, len, flags): offset (u32 at 0), len (u32 at 4,
# masked to 1..64), flags (u64 at 8), the bytes from 16 on
STORE_BYTES = [b.mov64(R6, R1), b.ld_map_value(R7, "m"), b.ldxw(R2, R7, 0), b.ldxw(R4, R7, 4),
               b.and64(R4, 63), b.add64(R4, 1), b.ldxdw(R5, R7, 8), b.mov64(R3, R7),
               b.add64(R3, 16), b.mov64(R1, R6), b.call("skb_store_bytes"), b.exit_()]
STORE_BYTES_ARGS = struct.Struct("<IIQ64s")
ETH_P_EXPERIMENTAL = bytes.fromhex("88b5")  # no IP header for the test run to check


@pytest.fixture(params=[ProgType.SCHED_CLS, ProgType.LWT_XMIT], ids=["tc", "lwt_xmit"])
def programs(request, kernel, emulated_engine):
    """helper -> [(system, map fd, program)] on each backend, of a tc program (skb->data
    at the Ethernet header) or an lwt_xmit one (at the network header)."""
    with loaded_on_each((kernel, emulated_engine), VALUE_SIZE, {
            helper: (request.param, items)
            for helper, items in (*CSUM_REPLACE.items(), ("skb_store_bytes", STORE_BYTES))
    }) as loaded:
        yield loaded


def _outcome(system, fd, prog, value: bytes, packet: bytes, complete: bool) -> tuple:
    """(errno of the run, retval, the packet after)."""
    system.map_update_elem(fd, bytes(4), value.ljust(VALUE_SIZE, b"\0"))
    try:
        run = prog.test_run(packet, flags=BPF_F_TEST_SKB_CHECKSUM_COMPLETE if complete else 0)
    except OSError as exc:
        return exc.errno, None, None
    return 0, run.retval, run.data_out


def _compare(programs, helper: str, value: bytes, packet: bytes, complete: bool,
             tally) -> None:
    kernel_run, emulated_run = programs[helper]
    want = _outcome(*kernel_run, value, packet, complete)
    got = _outcome(*emulated_run, value, packet, complete)
    tally.add("kernel", "emulated", f"bpf_{helper}", 1, 1, int(got != want))
    assert got == want


@st.composite
def packets(draw) -> bytes:
    """An Ethernet frame of 14..120 bytes, IPv4 (then 34 or more) or an EtherType without
    a header to check, of random or extreme bytes."""
    ipv4 = draw(st.booleans())
    size = draw(st.integers(34 if ipv4 else 14, 120))
    fill = draw(st.sampled_from([b"\0", b"\xff", None, None]))
    body = fill * (size - 14) if fill else draw(st.binary(min_size=size - 14,
                                                          max_size=size - 14))
    return bytes(12) + (b"\x08\x00" if ipv4 else ETH_P_EXPERIMENTAL) + body


def _offsets(limit: int):
    """Offsets: most of them even and inside the packet, then any up to its end, and the
    kernel's limits."""
    inside = st.integers(0, limit // 2 - 1).map(lambda half: half * 2)
    return st.one_of(inside, inside, inside, st.integers(0, limit), st.sampled_from(
        [0xFFFE, 0xFFFF, 0x10000, 0x7FFF_FFFF, 0x8000_0000, 0xFFFF_FFFF]))


WORDS = st.one_of(st.sampled_from([0, 1, 0xFFFF, 0x10000, 0xFFFF_FFFF, 1 << 32,
                                   (1 << 64) - 1]), st.integers(0, (1 << 64) - 1))
# the size field (0, 2, 4 and ones refused) and every flag, alone and together
CSUM_FLAGS = st.builds(lambda size, bits, stray: size | bits | stray,
                       st.sampled_from([0, 0, 2, 2, 2, 4, 4, 4, 1, 3, 8, 15]),
                       st.sets(st.sampled_from([BPF_F_PSEUDO_HDR, BPF_F_MARK_MANGLED_0,
                                                BPF_F_MARK_ENFORCE, BPF_F_IPV6])).map(sum),
                       st.sampled_from([0] * 12 + [1 << 8, 1 << 40]))

HYPOTHESIS = settings(max_examples=120, deadline=None,
                      suppress_health_check=[HealthCheck.too_slow,
                                             HealthCheck.function_scoped_fixture])


@HYPOTHESIS
@given(helper=st.sampled_from(list(CSUM_REPLACE)), packet=packets(), data=st.data(),
       complete=st.booleans())
def test_csum_replace_of_random_packets_is_the_kernels(programs, helper, packet, data,
                                                       complete, differential_tally):
    offset = data.draw(_offsets(len(packet)))
    frm, to, flags = data.draw(WORDS), data.draw(WORDS), data.draw(CSUM_FLAGS)
    if data.draw(st.booleans()):
        frm = 0  # the diff form's from
    if data.draw(st.booleans()):  # a checksum of 0: the MANGLED_0 cases
        packet = packet[:offset] + bytes(2) + packet[offset + 2:]
    value = CSUM_REPLACE_ARGS.pack(offset, frm, to, flags)
    _compare(programs, helper, value, packet, complete, differential_tally)


@HYPOTHESIS
@given(packet=packets(), data=st.data(), complete=st.booleans())
def test_skb_store_bytes_of_random_packets_is_the_kernels(programs, packet, data, complete,
                                                          differential_tally):
    offset = data.draw(_offsets(len(packet)))
    # the program stores size + 1 bytes
    size = data.draw(st.one_of(st.integers(0, 7), st.integers(0, 63)))
    flags = data.draw(st.sampled_from([0, 0, 1, 1, 2, 3, 4, 1 << 32]))
    value = STORE_BYTES_ARGS.pack(offset, size, flags, data.draw(st.binary(min_size=64,
                                                                           max_size=64)))
    _compare(programs, "skb_store_bytes", value, packet, complete, differential_tally)


# A UDP/IPv4 frame whose checksums are right: a NAT's rewrite of the source address (the IP
# header's checksum and the UDP one's, which covers the address in its pseudo-header).
NAT_FRAME = bytes.fromhex(
    "000000000000" "000000000000" "0800"
    "4500002400004000401100000a0000010a000002"  # IPv4, checksum 0 for now
    "1f9000350010" "0000" "6869212121212121")  # UDP 8080 -> 53, "hi!!!!!!"
NEW_SADDR = 0xC0A8_0001  # 192.168.0.1


def _nat_frame() -> bytes:
    def fold(data: bytes) -> int:
        total = sum(struct.unpack(f">{len(data) // 2}H", data))
        while total >> 16:
            total = (total & 0xFFFF) + (total >> 16)
        return ~total & 0xFFFF

    frame = bytearray(NAT_FRAME)
    frame[24:26] = fold(frame[14:34]).to_bytes(2, "big")
    pseudo = frame[26:34] + b"\0\x11" + frame[38:40]
    frame[40:42] = fold(pseudo + frame[34:]).to_bytes(2, "big")
    return bytes(frame)


def _nat(store_flags: int, l4_flags: int) -> list:
    """The source address to NEW_SADDR: stored, then both checksums replaced (4 bytes, the
    old address from the packet), with the flags given."""
    return [b.mov64(R6, R1), b.mov64(R2, 26), b.mov64(R3, FP), b.add64(R3, -4),
            b.mov64(R4, 4), b.call("skb_load_bytes"),
            b.ldxw(R7, FP, -4),  # the old address, as the packet has it
            b.st(4, FP, -8, int.from_bytes(NEW_SADDR.to_bytes(4, "big"), "little")),
            b.mov64(R1, R6), b.mov64(R2, 26), b.mov64(R3, FP), b.add64(R3, -8),
            b.mov64(R4, 4), b.mov64(R5, store_flags), b.call("skb_store_bytes"),
            b.ldxw(R4, FP, -8), b.mov64(R1, R6), b.mov64(R2, 24), b.mov64(R3, R7),
            b.mov64(R5, 4), b.call("l3_csum_replace"),
            b.ldxw(R4, FP, -8), b.mov64(R1, R6), b.mov64(R2, 40), b.mov64(R3, R7),
            b.mov64(R5, l4_flags), b.call("l4_csum_replace"), b.mov64(R0, 0), b.exit_()]


@pytest.mark.parametrize("store_flags", [0, BPF_F_RECOMPUTE_CSUM])
@pytest.mark.parametrize("l4_flags", [4, 4 | BPF_F_PSEUDO_HDR,
                                      4 | BPF_F_PSEUDO_HDR | BPF_F_MARK_MANGLED_0])
@pytest.mark.parametrize("complete", [False, True], ids=["none", "complete"])
def test_source_nat_is_the_kernels(kernel, emulated_engine, store_flags, l4_flags, complete):
    """The whole rewrite as a NAT does it: the packet after, and with CHECKSUM_COMPLETE
    whether skb->csum followed. It does with BPF_F_PSEUDO_HDR alone: the address and the IP
    checksum change by opposite amounts, and the pseudo-header's flag puts the UDP
    checksum's change into skb->csum; BPF_F_RECOMPUTE_CSUM on the store adds the address's
    change a second time (EBADMSG on the kernel, measured)."""
    items = _nat(store_flags, l4_flags)
    frame = _nat_frame()
    flags = BPF_F_TEST_SKB_CHECKSUM_COMPLETE if complete else 0
    outcomes = []
    for system in (kernel, emulated_engine):
        prog = load(system, ProgType.SCHED_CLS, items)
        try:
            outcomes.append((0, prog.test_run(frame, flags=flags).data_out))
        except OSError as exc:
            outcomes.append((exc.errno, None))
        finally:
            prog.close()
    assert outcomes[1] == outcomes[0]
    followed = not store_flags and l4_flags & BPF_F_PSEUDO_HDR
    assert outcomes[0][0] == (0 if not complete or followed else errno.EBADMSG)


# -- the verifier --------------------------------------------------------------------------------
PROG_TYPES = [ProgType.SOCKET_FILTER, ProgType.SCHED_CLS, ProgType.SCHED_ACT, ProgType.XDP,
              ProgType.CGROUP_SKB, ProgType.LWT_IN, ProgType.LWT_OUT, ProgType.LWT_XMIT,
              ProgType.SK_SKB, ProgType.SK_MSG, ProgType.KPROBE, ProgType.TRACEPOINT]
TC = {ProgType.SCHED_CLS, ProgType.SCHED_ACT}
TC_AND_LWT_XMIT = TC | {ProgType.LWT_XMIT}
# the helper's call, with arguments the verifier takes, and the program types that have it
CALLS = {
    "skb_store_bytes": ([b.st(8, FP, -8, 0), b.mov64(R2, 0), b.mov64(R3, FP), b.add64(R3, -8),
                         b.mov64(R4, 8), b.mov64(R5, 0), b.call("skb_store_bytes")],
                        TC_AND_LWT_XMIT | {ProgType.SK_SKB}),
    "l3_csum_replace": ([b.mov64(R2, 24), b.mov64(R3, 0), b.mov64(R4, 0), b.mov64(R5, 0),
                         b.call("l3_csum_replace")], TC_AND_LWT_XMIT),
    "l4_csum_replace": ([b.mov64(R2, 40), b.mov64(R3, 0), b.mov64(R4, 0), b.mov64(R5, 0),
                         b.call("l4_csum_replace")], TC_AND_LWT_XMIT),
    # the helpers that resize the skb (test_skb_resize_differential.py); sk_skb has its own
    # sk_skb_change_tail, sk_skb_change_head and sk_skb_adjust_room
    "skb_change_tail": ([b.mov64(R2, 64), b.mov64(R3, 0), b.call("skb_change_tail")],
                        TC_AND_LWT_XMIT | {ProgType.SK_SKB}),
    "skb_change_head": ([b.mov64(R2, 4), b.mov64(R3, 0), b.call("skb_change_head")],
                        TC_AND_LWT_XMIT | {ProgType.SK_SKB}),
    "skb_adjust_room": ([b.mov64(R2, 4), b.mov64(R3, 1), b.mov64(R4, 0),
                         b.call("skb_adjust_room")], TC | {ProgType.SK_SKB}),
    "skb_vlan_push": ([b.mov64(R2, 0x0081), b.mov64(R3, 1), b.call("skb_vlan_push")], TC),
    "skb_vlan_pop": ([b.call("skb_vlan_pop")], TC),
    "skb_change_proto": ([b.mov64(R2, 0xDD86), b.mov64(R3, 0), b.call("skb_change_proto")],
                         TC),
    "skb_change_type": ([b.mov64(R2, 0), b.call("skb_change_type")], TC),
}


def _verdict(system, prog_type: int, items: list) -> tuple[int, str]:
    """load_error's errno and the verifier's reason: its message's last line (the emulated
    backend's message has every line of a reason the kernel logs on two, such as an invalid
    packet access's, the kernel backend's the last)."""
    err, message = load_error(system, prog_type, items)
    reason = message.split("\nverifier log:")[0].partition("verifier: ")[2]
    return err, reason.splitlines()[-1] if reason else ""


@pytest.mark.parametrize("helper", list(CALLS))
@pytest.mark.parametrize("prog_type", PROG_TYPES, ids=[t.name for t in PROG_TYPES])
def test_program_types_that_may_call_the_helper_are_the_kernels(kernel, emulated, helper,
                                                                  prog_type):
    items, prog_types = CALLS[helper]
    want = _verdict(kernel, prog_type, items)
    got = _verdict(emulated, prog_type, items)
    assert want[0] == (0 if prog_type in prog_types else errno.EINVAL)
    assert got == want


def _packet_checked(then: list) -> list:
    """R7 = skb->data, checked for 8 bytes; ``then`` runs where it is."""
    return [b.mov64(R6, R1), b.ldxw(R7, R1, 76), b.ldxw(R2, R1, 80), b.mov64(R3, R7),
            b.add64(R3, 8), b.jgt(R3, R2, "out"), *then, b.label("out")]


# case -> (the program's start, the kernel's errno: 0 where it loads)
VERDICTS = {
    # ARG_CONST_SIZE: not 0
    "store_zero_size": ([b.mov64(R2, 0), b.mov64(R3, FP), b.add64(R3, -8), b.mov64(R4, 0),
                         b.mov64(R5, 0), b.call("skb_store_bytes")], errno.EACCES),
    # uninitialised stack bytes: a CAP_PERFMON loader may pass them (allow_uninit_stack)
    "store_uninit_stack": ([b.mov64(R2, 0), b.mov64(R3, FP), b.add64(R3, -8), b.mov64(R4, 8),
                            b.mov64(R5, 0), b.call("skb_store_bytes")], 0),
    # no .pkt_access: the bytes may not come from the packet
    "store_from_packet": (_packet_checked([b.mov64(R1, R6), b.mov64(R2, 0), b.mov64(R3, R7),
                                           b.mov64(R4, 8), b.mov64(R5, 0),
                                           b.call("skb_store_bytes")]), errno.EACCES),
    # ARG_PTR_TO_CTX
    "l4_not_ctx": ([b.mov64(R1, 0), b.mov64(R2, 40), b.mov64(R3, 0), b.mov64(R4, 0),
                    b.mov64(R5, 0), b.call("l4_csum_replace")], errno.EACCES),
    "l3_r5_uninit": ([b.mov64(R2, 24), b.mov64(R3, 0), b.mov64(R4, 0),
                      b.call("l3_csum_replace")], errno.EACCES),
}
for helper, (call, _) in CALLS.items():  # bpf_helper_changes_pkt_data: R7 is a scalar after
    # (bpf_skb_change_type changes no packet data: the pointer stays)
    VERDICTS[f"{helper}_forgets_packet"] = (_packet_checked(
        [b.st(8, FP, -8, 0), b.mov64(R1, R6), *call, b.ldxb(R0, R7, 0)]),
        0 if helper == "skb_change_type" else errno.EACCES)
# after a resize, the packet read again and checked again may be read
VERDICTS["change_tail_then_packet_again"] = ([
    b.mov64(R6, R1), b.mov64(R2, 64), b.mov64(R3, 0), b.call("skb_change_tail"),
    b.mov64(R1, R6), *_packet_checked([b.ldxb(R0, R7, 7)])], 0)
# ... but not past what was checked
VERDICTS["adjust_room_then_packet_past_check"] = ([
    b.mov64(R6, R1), b.mov64(R2, 4), b.mov64(R3, 1), b.mov64(R4, 0),
    b.call("skb_adjust_room"), b.mov64(R1, R6), *_packet_checked([b.ldxb(R0, R7, 8)])],
    errno.EACCES)


@pytest.mark.parametrize("case", list(VERDICTS))
def test_the_verifier_checks_calls_as_the_kernel(kernel, emulated, case):
    items, verdict = VERDICTS[case]
    want = _verdict(kernel, ProgType.SCHED_CLS, items)
    got = _verdict(emulated, ProgType.SCHED_CLS, items)
    assert want[0] == verdict
    assert got == want
