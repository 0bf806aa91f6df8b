"""The skb helpers that change a packet's length or headers on both backends:
bpf_skb_change_tail, bpf_skb_change_head, bpf_skb_adjust_room, bpf_skb_vlan_push,
bpf_skb_vlan_pop, bpf_skb_change_proto and bpf_skb_change_type.

One program per helper, as a tc program (skb->data at the Ethernet header) and, for the two
lwt_xmit has, as an lwt_xmit one (at the network header), takes the helper's arguments from
a map value, calls it, then stores what it returned and what the context then says (len,
protocol, the VLAN tag, pkt_type, the GSO fields, data_end - data) back into the value. Random
frames (IPv4, IPv6, VLAN-tagged, others), arguments and flags, with and without
BPF_F_TEST_SKB_CHECKSUM_COMPLETE, a GSO size from ctx_in and a second run of the same skb
(repeat 2: a second VLAN push goes into the frame) go through BPF_PROG_TEST_RUN on each
backend, the emulated one on each of its engines: the run's errno, retval, data_out, ctx_out
and the value must be the kernel's. Then case tables: a helper after another on a
CHECKSUM_COMPLETE skb, and the verifier's verdicts (the program types that have each helper
are test_tc_helpers_differential.py's).
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import load, loaded_on_each
from pybpf.asm import FP, R0, R1, R2, R3, R4, R5, R6, R7
from pybpf.asm import builder as b
from pybpf.uapi import (
    BPF_F_ADJ_ROOM_DECAP_L3_IPV4,
    BPF_F_ADJ_ROOM_DECAP_L3_IPV6,
    BPF_F_ADJ_ROOM_ENCAP_L2,
    BPF_F_ADJ_ROOM_ENCAP_L2_ETH,
    BPF_F_ADJ_ROOM_ENCAP_L3_IPV4,
    BPF_F_ADJ_ROOM_ENCAP_L3_IPV6,
    BPF_F_ADJ_ROOM_ENCAP_L4_GRE,
    BPF_F_ADJ_ROOM_ENCAP_L4_UDP,
    BPF_F_ADJ_ROOM_FIXED_GSO,
    BPF_F_ADJ_ROOM_NO_CSUM_RESET,
    BPF_F_RECOMPUTE_CSUM,
    BPF_F_TEST_SKB_CHECKSUM_COMPLETE,
    ProgType,
)

VALUE_SIZE = 96
ARGS = struct.Struct("<4Q")  # R2..R5 of the call
# after the call: R0 (s64 at 32), then u32s: len, protocol, vlan_present, vlan_tci,
# vlan_proto, pkt_type, gso_segs, gso_size, data_end - data
RESULTS_AT = 32
# __sk_buff offsets of the fields stored after R0, in that order
CTX_FIELDS = (0, 16, 20, 24, 28, 4, 164, 176)
SK_BUFF_SIZE = 192
GSO_SEGS, GSO_SIZE = 164, 176
BPF_SKB_MAX_LEN = 16064


def _program(helper: str) -> list:
    items = [b.mov64(R6, R1), b.ld_map_value(R7, "m"), b.ldxdw(R2, R7, 0), b.ldxdw(R3, R7, 8),
             b.ldxdw(R4, R7, 16), b.ldxdw(R5, R7, 24), b.mov64(R1, R6), b.call(helper),
             b.stxdw(R7, RESULTS_AT, R0)]
    for i, off in enumerate(CTX_FIELDS):
        items += [b.ldxw(R2, R6, off), b.stxw(R7, RESULTS_AT + 8 + 4 * i, R2)]
    # the packet pointers, read again after the call (it forgot the ones before)
    items += [b.ldxw(R2, R6, 76), b.ldxw(R3, R6, 80), b.sub64(R3, R2),
              b.stxw(R7, RESULTS_AT + 8 + 4 * len(CTX_FIELDS), R3), b.mov64(R0, 3), b.exit_()]
    return items


TC_ONLY = ("skb_adjust_room", "skb_vlan_push", "skb_vlan_pop", "skb_change_proto",
           "skb_change_type")
LWT_XMIT_TOO = ("skb_change_tail", "skb_change_head")
CASES = [(helper, ProgType.SCHED_CLS) for helper in LWT_XMIT_TOO + TC_ONLY] \
    + [(helper, ProgType.LWT_XMIT) for helper in LWT_XMIT_TOO]


@pytest.fixture
def programs(kernel, emulated_engine):
    """(helper, program type) -> [(system, map fd, program)] on each backend."""
    with loaded_on_each((kernel, emulated_engine), VALUE_SIZE, {
            (helper, prog_type): (prog_type, _program(helper))
            for helper, prog_type in CASES}) as loaded:
        yield loaded


def _outcome(system, fd, prog, args: tuple, packet: bytes, flags: int, ctx: bytes | None,
             repeat: int) -> tuple:
    """(errno of the run, retval, data_out, ctx_out, the value after)."""
    system.map_update_elem(fd, bytes(4), ARGS.pack(*args).ljust(VALUE_SIZE, b"\0"))
    try:
        run = prog.test_run(packet, flags=flags, ctx=ctx, repeat=repeat, data_size_out=1024,
                            ctx_size_out=SK_BUFF_SIZE if ctx is not None else None)
    except OSError as exc:
        return exc.errno, None, None, None, None
    return 0, run.retval, run.data_out, run.ctx_out, system.map_lookup_elem(fd, bytes(4))


# -- random frames and arguments --------------------------------------------------------------
ETH_P_8021Q, ETH_P_8021AD = b"\x81\x00", b"\x88\xa8"
IPV4_HEADER = bytes.fromhex("450000240000400040110000c0a80001c0a80002")


@st.composite
def frames(draw) -> bytes:
    """An Ethernet frame of 14..140 bytes: IPv4 (at least 34) or IPv6 (at least 54), maybe
    behind one or two VLAN tags (then maybe cut short), or another EtherType, an 802.3
    length among them; of random or extreme bytes."""
    kind = draw(st.sampled_from(["ipv4", "ipv4", "ipv6", "vlan", "vlan", "qinq", "other"]))
    fill = draw(st.sampled_from([b"\0", b"\xff", None, None, None]))

    def body(size: int) -> bytes:
        return fill * size if fill else draw(st.binary(min_size=size, max_size=size))

    macs = body(12)
    if kind == "ipv4":
        return macs + b"\x08\x00" + IPV4_HEADER + body(draw(st.integers(0, 100)))
    if kind == "ipv6":
        return macs + b"\x86\xdd" + b"\x60" + body(draw(st.integers(39, 120)))
    if kind == "other":
        ethertype = draw(st.sampled_from([b"\x88\xb5", b"\x00\x40", b"\x06\x00"]))
        return macs + ethertype + body(draw(st.integers(0, 100)))
    tags = b""
    for tpid in ([ETH_P_8021AD, ETH_P_8021Q] if kind == "qinq"
                 else [draw(st.sampled_from([ETH_P_8021Q, ETH_P_8021AD]))]):
        tags += tpid + body(2)
    inner = draw(st.sampled_from([b"\x08\x00" + IPV4_HEADER, b"\x86\xdd" + b"\x60" + bytes(39),
                                  b"\x00\x40", b"\x00\x40\xff\xff", b""]))
    frame = macs + tags + inner + body(draw(st.integers(0, 40)))
    return frame[:max(14, draw(st.integers(14, len(frame))))] if draw(st.booleans()) else frame


U64 = st.integers(0, (1 << 64) - 1)
FLAGS = st.sampled_from([0] * 8 + [1, 1 << 32, (1 << 64) - 1])


def _args(helper: str, size: int, data) -> tuple:
    """R2..R5 for ``helper`` on a frame of ``size`` bytes: mostly near the limits."""
    draw = data.draw
    if helper == "skb_change_tail":
        new_len = draw(st.one_of(st.integers(max(size - 40, 0), size + 40), st.integers(0, 20),
                                 st.sampled_from([BPF_SKB_MAX_LEN, BPF_SKB_MAX_LEN + 1,
                                                  (1 << 32) - 1, (1 << 32) + 20]), U64))
        return new_len, draw(FLAGS), 0, 0
    if helper == "skb_change_head":
        # a GSO skb (no length limit) grown past kmalloc's 4 MiB fails -ENOMEM on the
        # kernel, where the emulated skb has no allocator: not drawn
        head_room = draw(st.one_of(st.integers(0, 80), st.integers(0, 80),
                                   st.just(BPF_SKB_MAX_LEN - size),
                                   st.just(BPF_SKB_MAX_LEN - size + 1), st.integers(0, 1 << 21),
                                   st.sampled_from([(1 << 32) - size, (1 << 32) - 1,
                                                    (1 << 32) + 4, (1 << 64) - 1])))
        return head_room, draw(FLAGS), 0, 0
    if helper == "skb_adjust_room":
        len_diff = draw(st.one_of(st.integers(-60, 60), st.integers(-60, 60), st.sampled_from(
            [0xFFF, -0xFFF, 0x1000, -0x1000, -(1 << 31)]), U64))
        mode = draw(st.sampled_from([0, 0, 1, 1, 2, 1 << 32]))
        bits = draw(st.sets(st.sampled_from([
            BPF_F_ADJ_ROOM_FIXED_GSO, BPF_F_ADJ_ROOM_ENCAP_L3_IPV4, BPF_F_ADJ_ROOM_ENCAP_L3_IPV6,
            BPF_F_ADJ_ROOM_ENCAP_L4_GRE, BPF_F_ADJ_ROOM_ENCAP_L4_UDP,
            BPF_F_ADJ_ROOM_NO_CSUM_RESET, BPF_F_ADJ_ROOM_ENCAP_L2_ETH,
            BPF_F_ADJ_ROOM_DECAP_L3_IPV4, BPF_F_ADJ_ROOM_DECAP_L3_IPV6, 1 << 9, 1 << 40])))
        inner_mac_len = draw(st.sampled_from([0, 0, 13, 14, 20, 255]))
        flags = sum(bits) | BPF_F_ADJ_ROOM_ENCAP_L2(inner_mac_len)
        if draw(st.booleans()):  # room for an encapsulation's outer headers
            len_diff = draw(st.sampled_from([14, 20, 28, 34, 40, 48, 54]))
        return len_diff & (1 << 64) - 1, mode, flags, 0
    if helper == "skb_vlan_push":
        proto = draw(st.one_of(st.sampled_from([0x0081, 0xA888, 0x0008, 0]), U64))
        return proto, draw(st.one_of(st.integers(0, 0xFFFF), U64)), 0, 0
    if helper == "skb_change_proto":
        proto = draw(st.one_of(st.sampled_from([0x0008, 0xDD86, 0xDD86, 0x0081]), U64))
        return proto, draw(FLAGS), 0, 0
    if helper == "skb_change_type":
        return draw(st.one_of(st.integers(0, 5), U64)), 0, 0, 0
    return 0, 0, 0, 0  # skb_vlan_pop


def _gso_ctx(gso_size: int, gso_segs: int) -> bytes:
    ctx = bytearray(SK_BUFF_SIZE)
    struct.pack_into("<I", ctx, GSO_SEGS, gso_segs)
    struct.pack_into("<I", ctx, GSO_SIZE, gso_size)
    return bytes(ctx)


HYPOTHESIS = settings(max_examples=300, deadline=None,
                      suppress_health_check=[HealthCheck.too_slow,
                                             HealthCheck.function_scoped_fixture])


@HYPOTHESIS
@given(case=st.sampled_from(CASES), packet=frames(), data=st.data(), complete=st.booleans(),
       repeat=st.sampled_from([1, 1, 1, 2]))
def test_resizing_random_frames_is_the_kernels(programs, case, packet, data, complete, repeat,
                                               differential_tally):
    helper, _ = case
    args = _args(helper, len(packet), data)
    ctx = data.draw(st.one_of(st.none(), st.builds(_gso_ctx, st.sampled_from([0, 1, 1400]),
                                                   st.integers(0, 8))))
    flags = BPF_F_TEST_SKB_CHECKSUM_COMPLETE if complete else 0
    kernel_run, emulated_run = programs[case]
    want = _outcome(*kernel_run, args, packet, flags, ctx, repeat)
    got = _outcome(*emulated_run, args, packet, flags, ctx, repeat)
    tally_family = f"bpf_{helper}" + ("" if case[1] == ProgType.SCHED_CLS else " lwt")
    differential_tally.add("kernel", "emulated", tally_family, 1, 1, int(got != want))
    assert got == want


# -- one helper after another -------------------------------------------------------------------
def _then_store_bytes(first: list) -> list:
    """``first``, then 4 bytes stored at offset 20 with BPF_F_RECOMPUTE_CSUM."""
    return [b.mov64(R6, R1), *first, b.st(4, FP, -4, 0x12345678), b.mov64(R1, R6),
            b.mov64(R2, 20), b.mov64(R3, FP), b.add64(R3, -4), b.mov64(R4, 4),
            b.mov64(R5, BPF_F_RECOMPUTE_CSUM), b.call("skb_store_bytes"), b.mov64(R0, 0),
            b.exit_()]


def _call(helper: str, *args: int) -> list:
    return [b.mov64(R1, R6), *(b.mov64(reg, arg) for reg, arg in zip((R2, R3, R4), args,
                                                                     strict=False)),
            b.call(helper)]


# first helper -> the kernel's errno for the run (0: skb->csum still right)
SEQUENCES = {
    # a length change ends CHECKSUM_COMPLETE: the store's recompute no longer reaches skb->csum
    "tail_grown": (_call("skb_change_tail", 54, 0), 74),
    "tail_same": (_call("skb_change_tail", 50, 0), 0),
    # zeros after the MAC header leave the sum from the network header as it was
    "room_grown": (_call("skb_adjust_room", 4, 1, 0), 0),
    "head_grown": (_call("skb_change_head", 2, 0), 0),
    "proto_4_to_6": (_call("skb_change_proto", 0xDD86, 0), 0),
    "nothing": ([], 0),
}
FRAME = bytes(range(1, 13)) + b"\x08\x00" + IPV4_HEADER + bytes(range(16))


@pytest.mark.parametrize("case", list(SEQUENCES))
def test_checksum_after_a_resize_is_the_kernels(kernel, emulated_engine, case):
    first, verdict = SEQUENCES[case]
    outcomes = []
    for system in (kernel, emulated_engine):
        prog = load(system, ProgType.SCHED_CLS, _then_store_bytes(first))
        try:
            run = prog.test_run(FRAME, flags=BPF_F_TEST_SKB_CHECKSUM_COMPLETE)
            outcomes.append((0, run.data_out))
        except OSError as exc:
            outcomes.append((exc.errno, None))
        finally:
            prog.close()
    assert outcomes[0][0] == verdict
    assert outcomes[1] == outcomes[0]


# -- cases the random test found -----------------------------------------------------------------
TAGGED_FRAME = bytes(12) + ETH_P_8021Q + bytes(2) + b"\x08\x00" + IPV4_HEADER
IPV4_FRAME = bytes(12) + b"\x08\x00" + IPV4_HEADER + bytes(40)
# case -> (helper, R2..R5, frame, flags, ctx_in, repeat)
FOUND = {
    # a second push moves the first tag into the frame, the network header at its TCI
    "vlan_push_twice_complete": ("skb_vlan_push", (0x0081, 0, 0, 0), TAGGED_FRAME,
                                 BPF_F_TEST_SKB_CHECKSUM_COMPLETE, None, 2),
    # gso_segs without gso_size is no GSO skb: change_tail leaves gso_segs
    "change_tail_segs_without_gso": ("skb_change_tail", (14, 0, 0, 0), IPV4_FRAME, 0,
                                     _gso_ctx(0, 1), 1),
    # a decapsulation's shrink to an IPv6 inner header (6.3's DECAP flags)
    "adjust_room_decap_ipv6": ("skb_adjust_room", (-20 & (1 << 64) - 1, 1,
                                                   BPF_F_ADJ_ROOM_DECAP_L3_IPV6, 0),
                               IPV4_FRAME + bytes(20), 0, None, 1),
    # a GSO skb has no length limit, but skb_cow takes a head_room past INT_MAX as negative
    "change_head_gso_past_int_max": ("skb_change_head", ((1 << 32) - 34, 0, 0, 0),
                                     IPV4_FRAME, 0, _gso_ctx(1, 0), 1),
    "adjust_room_decap_both": ("skb_adjust_room", (-20 & (1 << 64) - 1, 1,
                                                   BPF_F_ADJ_ROOM_DECAP_L3_IPV4
                                                   | BPF_F_ADJ_ROOM_DECAP_L3_IPV6, 0),
                               IPV4_FRAME, 0, None, 1),
    # the head grows by the missing headroom rounded up to NET_SKB_PAD; the network header's
    # u16 offset from skb->head wraps past 64 KiB (65473: the first to), and the checksum
    # from where it then points is wrong
    **{f"change_head_gso_{head_room}{'_complete' if complete else ''}": (
        "skb_change_head", (head_room, 0, 0, 0), IPV4_FRAME,
        BPF_F_TEST_SKB_CHECKSUM_COMPLETE if complete else 0, _gso_ctx(1, 0), 1)
       for head_room in (65472, 65473, 70000) for complete in (False, True)},
}


@pytest.mark.parametrize("case", list(FOUND))
def test_found_cases_are_the_kernels(programs, case):
    helper, args, frame, flags, ctx, repeat = FOUND[case]
    kernel_run, emulated_run = programs[(helper, ProgType.SCHED_CLS)]
    want = _outcome(*kernel_run, args, frame, flags, ctx, repeat)
    assert _outcome(*emulated_run, args, frame, flags, ctx, repeat) == want
