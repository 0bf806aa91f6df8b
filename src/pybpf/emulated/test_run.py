"""BPF_PROG_TEST_RUN (net/bpf/test_run.c): skb, XDP (plain and live frames), raw tracepoint
and syscall programs, each with the kernel's checks in its order.

Rules this module keeps:
- skb programs run on a test skb as the loopback device would deliver it (``__sk_buff``
  filled as the kernel's test skb; ctx_in may set only what convert___skb_to_skb takes).
- A plain XDP run goes the data path's one route, ``xdp_prog_run`` on an ``XdpBuff``, so
  the test run and the devices lay out ``xdp_md`` and the page the same way; faults reach
  the caller instead of becoming XDP_ABORTED.
- Live frames (``BPF_F_TEST_XDP_LIVE_FRAMES``, the traffic generator xdp-trafficgen is built
  on): ``repeat`` frames (0 means 1) run in batches of ``batch_size`` (1..256, 64 by
  default), each on its own fresh copy of the input page, as received on the context's
  ingress device and queue (the loopback device by default), on the calling thread's CPU.
  Per frame: XDP_TX becomes a redirect to the ingress device; XDP_REDIRECT is enqueued
  (``xdp_do_redirect``); XDP_PASS frames of the batch become skbs (heads from the slab, as
  ``xdp_recv_frames``) and go up the stack together; anything else frees the frame. Failed
  redirects are counted on the ingress device (``xdp_redirect_err``). A batch runs inside an
  RCU read-side section and with "BH disabled": its redirects are flushed at its end
  (``xdp_do_flush``), then the softirqs it raised run on this CPU (a veth peer's NAPI), then
  RCU may advance.
- Output follows bpf_test_finish: data_out (a socket filter's Ethernet header comes back
  zeroed) and ctx_out clamped to their sizes, ENOSPC when clamped. ``duration`` is modeled
  time: the mean per run over ``repeat`` of what the run cost on the machine's profile
  (``prog_test_run`` per repetition, the program's instructions and calls, its map
  operations). Types without a test run answer ENOTSUPP.
"""

from __future__ import annotations

import errno
import struct
import time
from typing import Any

from ..attrs import TestRunRequest
from ..errors import KernelError
from ..packet import ETH_HLEN, ETH_P_IP, ETH_P_IPV6, IPV4_HLEN, IPV6_HLEN
from ..records import TestRun
from ..uapi import (
    BPF_F_TEST_RUN_ON_CPU,
    BPF_F_TEST_SKB_CHECKSUM_COMPLETE,
    BPF_F_TEST_XDP_LIVE_FRAMES,
    ENOTSUPP,
    XDP_PASS,
    XDP_REDIRECT,
    XDP_TX,
    AttachType,
    MapType,
    ProgType,
)
from .maps.bpf_map import INT_MAX
from .net.netdev import LOOPBACK_IFINDEX, NAPI_POLL_WEIGHT, net_of
from .net.skbuff import PACKET_HOST, PACKET_MULTICAST, PACKET_OTHERHOST
from .net.xdp import (
    ETH_P_802_2,
    ETH_P_802_3_MIN,
    PAGE_SIZE,
    XDP_PACKET_HEADROOM,
    XdpBuff,
    bpf_prog_run_xdp,
    xdp_build_skb_from_frame,
    xdp_do_flush,
    xdp_do_redirect,
    xdp_prog_run,
)
from .prog.core import run_prog
from .prog.filter import (
    NET_SKB_PAD,
    SK_BUFF_SIZE,
    SKB_CB,
    SKB_DATA,
    SKB_DATA_END,
    SKB_DATA_META,
    SKB_FAMILY,
    SKB_GSO_SEGS,
    SKB_GSO_SIZE,
    SKB_HWTSTAMP,
    SKB_IFINDEX,
    SKB_INGRESS_IFINDEX,
    SKB_LEN,
    SKB_LOCAL_IP4,
    SKB_LOCAL_IP6,
    SKB_MARK,
    SKB_PKT_TYPE,
    SKB_PRIORITY,
    SKB_PROTOCOL,
    SKB_REMOTE_IP4,
    SKB_REMOTE_IP6,
    SKB_SHINFO_SIZE,
    SKB_SK,
    SKB_TSTAMP,
    SKB_WIRE_LEN,
    XDP_FRAME_SIZE,
    XDP_MD,
    XDP_MD_SIZE,
    Skb,
    XdpRedirect,
    csum_fold,
    writable_fields,
)
from .prog.memory import CTX_REGION, M32, SOCK_REGION, CtxRegion, RunState

TEST_XDP_MAX_BATCH = 256
XDP_METADATA_MAX = 255  # xdp_metalen_invalid: skb_shared_info.meta_len is a u8
# sizeof(struct xdp_page_head) on x86-64: two struct xdp_buff (56 bytes each) and the
# struct xdp_frame (40) a live-frames run keeps at the start of each page
XDP_PAGE_HEAD_SIZE = 2 * 56 + 40
GSO_MAX_SEGS = 65535
GSO_LEGACY_MAX_SIZE = 65536
ETH_P_802_3 = 1  # eth_type_trans: a raw 802.3 frame (0xFFFF after the header)
AF_INET, AF_INET6 = 2, 10
MAX_BPF_FUNC_ARGS = 12
U16_MAX = 0xFFFF

# Program types with an skb test run; L2 ones see the Ethernet header.
SKB_PROG_TYPES = frozenset({ProgType.SOCKET_FILTER, ProgType.SCHED_CLS, ProgType.SCHED_ACT,
                            ProgType.CGROUP_SKB, ProgType.LWT_IN, ProgType.LWT_OUT,
                            ProgType.LWT_XMIT})
L2_PROG_TYPES = frozenset({ProgType.SCHED_CLS, ProgType.SCHED_ACT})
DIRECT_PACKET_PROG_TYPES = frozenset({ProgType.SCHED_CLS, ProgType.SCHED_ACT, ProgType.LWT_IN,
                                      ProgType.LWT_OUT, ProgType.LWT_XMIT,
                                      ProgType.CGROUP_SKB})

# The __sk_buff fields a test run's ctx_in may set (convert___skb_to_skb).
_SKB_CTX_IN_FIELDS = ((SKB_MARK, 4), (SKB_PRIORITY, 4), (SKB_INGRESS_IFINDEX, 4),
                      (SKB_IFINDEX, 4), (SKB_CB, 20), (SKB_TSTAMP, 8), (SKB_WIRE_LEN, 4),
                      (SKB_GSO_SEGS, 4), (SKB_GSO_SIZE, 4), (SKB_HWTSTAMP, 8))


def bpf_test_run_xdp_live(prog: Any, template: XdpBuff, repeat: int, batch_size: int) -> int:
    """Run ``prog`` on ``repeat`` copies of ``template``; the mean ns per frame."""
    machine = prog.system.machine
    net = net_of(machine)
    repeat = repeat or 1
    batch_size = batch_size or NAPI_POLL_WEIGHT
    start = time.perf_counter_ns()
    done = 0
    while done < repeat:
        batch = min(repeat - done, batch_size)
        with machine.rcu.read_section():
            _xdp_test_run_batch(prog, template, batch)
        net.do_softirq()  # local_bh_enable
        machine.rcu.poll()
        done += batch
    return (time.perf_counter_ns() - start) // repeat


def _xdp_test_run_batch(prog: Any, template: XdpBuff, batch: int) -> None:
    dev = template.dev_rx
    passed: list[XdpBuff] = []
    redirect = False
    for _ in range(batch):
        xdp = XdpBuff(bytearray(template.page), template.data, template.data_end, dev,
                      template.rxq_index, template.data_meta)
        act, ri = bpf_prog_run_xdp(prog, xdp)
        if act == XDP_TX:  # no real TX outside a driver: a redirect back to the device
            act, ri = XDP_REDIRECT, XdpRedirect(MapType.UNSPEC, INT_MAX, dev.ifindex)
        if act == XDP_REDIRECT:
            redirect = True
            if xdp_do_redirect(xdp, ri):
                dev.count("xdp_redirect_err")
        elif act == XDP_PASS:
            passed.append(xdp)
    if redirect:
        xdp_do_flush()
    if passed:
        _xdp_recv_frames(passed, dev)


def _xdp_recv_frames(frames: list[XdpBuff], dev: Any) -> None:
    """xdp_recv_frames: heads straight from the slab, then netif_receive_skb_list."""
    net = dev.net
    heads = net.skb_cache.kmem_cache_alloc_bulk(len(frames))
    skbs = [xdp_build_skb_from_frame(xdpf, skb, dev)
            for xdpf, skb in zip(frames, heads, strict=True)]
    net.stack.netif_receive_skb_list(skbs)


def bpf_prog_test_run(prog: Any, req: TestRunRequest) -> TestRun:
    """BPF_PROG_TEST_RUN of ``prog`` (a loaded BpfProg), per program type."""
    prog_type = prog.prog_type
    if prog_type in SKB_PROG_TYPES:
        return bpf_prog_test_run_skb(prog, req)
    if prog_type == ProgType.XDP:
        return bpf_prog_test_run_xdp(prog, req)
    if prog_type == ProgType.RAW_TRACEPOINT:
        return bpf_prog_test_run_raw_tp(prog, req)
    if prog_type == ProgType.SYSCALL:
        return bpf_prog_test_run_syscall(prog, req)
    raise KernelError(ENOTSUPP, f"{ProgType(prog_type).name} programs have no test run")


def _timed_runs(prog: Any, repeat: int, run_once) -> tuple[int, int]:
    """Run ``repeat`` times (0 means 1); (retval of the last run, mean modeled ns per
    run on the current CPU)."""
    repeat = repeat or 1
    timing = prog.run_env.machine.timing
    cpu = prog.run_env.machine.current.cpu
    start = timing.clock[cpu]
    for _ in range(repeat):
        timing.charge(cpu, "prog_test_run")
        retval = run_once()
    elapsed = timing.clock[cpu] - start
    return retval & M32, min(int(elapsed // repeat), M32)


def bpf_prog_test_run_skb(prog: Any, req: TestRunRequest) -> TestRun:
    """bpf_prog_test_run_skb, its checks in the kernel's order."""
    if req.flags & ~BPF_F_TEST_SKB_CHECKSUM_COMPLETE or req.cpu or req.batch_size:
        raise KernelError(errno.EINVAL, "skb test runs take no cpu, no batch_size and no "
                                        "flags but BPF_F_TEST_SKB_CHECKSUM_COMPLETE")
    size = len(req.data_in)
    if size < ETH_HLEN:
        raise KernelError(errno.EINVAL, f"data_in is {size} bytes, less than an Ethernet "
                                        f"header ({ETH_HLEN})")
    if size > PAGE_SIZE - NET_SKB_PAD - SKB_SHINFO_SIZE:
        raise KernelError(errno.EINVAL, f"data_in is {size} bytes, over the "
                          f"{PAGE_SIZE - NET_SKB_PAD - SKB_SHINFO_SIZE} an skb test run takes")
    ctx = _ctx_init(req, SK_BUFF_SIZE)
    if ctx is not None:
        ifindex = struct.unpack_from("<I", ctx, SKB_IFINDEX)[0]
        net = net_of(prog.run_env.machine)
        if ifindex > LOOPBACK_IFINDEX and net.dev_get_by_index(ifindex) is None:
            raise KernelError(errno.ENODEV, f"no device with ifindex {ifindex}")
    packet = bytearray(req.data_in)
    protocol = eth_type_trans(packet)
    headlen = size - ETH_HLEN
    for proto, hlen, name in ((ETH_P_IP, IPV4_HLEN, "IPv4"), (ETH_P_IPV6, IPV6_HLEN, "IPv6")):
        if protocol == proto and headlen < hlen:
            raise KernelError(errno.EINVAL, f"an {name} frame of {size} bytes has no room "
                              f"for its {hlen}-byte header (at least {ETH_HLEN + hlen})")
    l2 = prog.prog_type in L2_PROG_TYPES
    start = 0 if l2 else ETH_HLEN
    ctx_buf = bytearray(SK_BUFF_SIZE)
    _fill_sk_buff(ctx_buf, packet, start, protocol)
    if ctx is not None:
        _convert___skb_to_skb(ctx, ctx_buf, size - start)
    # the packet pointers' fields, which Skb.attach sets
    pointers = dict.fromkeys((SKB_DATA, SKB_DATA_END, SKB_DATA_META), 0) \
        if prog.prog_type in DIRECT_PACKET_PROG_TYPES else {}
    ctx_region = CtxRegion("__sk_buff", ctx_buf, pointers,
                           writable_fields(prog.prog_type, SK_BUFF_SIZE))
    # the buffer from skb->head: NET_SKB_PAD bytes of headroom (bpf_test_init's zeros), then
    # the frame, whose bytes before skb->data (an L3 program's MAC header) are headroom too
    skb = Skb(bytearray(NET_SKB_PAD) + packet, NET_SKB_PAD + start, NET_SKB_PAD,
              NET_SKB_PAD + ETH_HLEN, protocol, ctx_buf[SKB_PKT_TYPE], ctx_region)
    skb.gso_size, skb.gso_segs = (struct.unpack_from("<I", ctx_buf, off)[0]
                                  for off in (SKB_GSO_SIZE, SKB_GSO_SEGS))
    if req.flags & BPF_F_TEST_SKB_CHECKSUM_COMPLETE:  # skb->csum from the network header on
        skb.csum, skb.csum_complete = skb.checksum(), True

    def once() -> int:  # repeated runs share the skb, its bytes and skb->csum
        rs = RunState(prog.run_env)
        rs.mem[CTX_REGION] = ctx_region
        rs.skb = skb
        skb.attach(rs)
        return run_prog(prog.executable, rs)

    retval, duration = _timed_runs(prog, req.repeat, once)
    # an L3 program's frame comes back with a zeroed Ethernet header before skb->data
    data_out = bytes(skb.buf[skb.data:skb.tail]) if l2 else \
        bytes(ETH_HLEN) + skb.buf[skb.data:skb.tail]
    if req.flags & BPF_F_TEST_SKB_CHECKSUM_COMPLETE \
            and csum_fold(skb.csum) != csum_fold(skb.checksum()):
        raise KernelError(errno.EBADMSG, "the program changed the packet without updating "
                                         "its CHECKSUM_COMPLETE checksum (skb->csum)")
    ctx_out = None
    if ctx is not None:  # convert_skb_to___skb
        ctx_out = bytearray(ctx)
        for off, length in ((SKB_MARK, 4), (SKB_PRIORITY, 4), (SKB_INGRESS_IFINDEX, 4),
                            (SKB_IFINDEX, 4), (SKB_CB, 20), (SKB_TSTAMP, 8),
                            (SKB_WIRE_LEN, 4), (SKB_GSO_SEGS, 4), (SKB_HWTSTAMP, 8)):
            ctx_out[off:off + length] = ctx_buf[off:off + length]
    return _test_finish(req, data_out, retval, duration, ctx_out)


def bpf_prog_test_run_xdp(prog: Any, req: TestRunRequest) -> TestRun:
    """bpf_prog_test_run_xdp, its checks in the kernel's order."""
    if prog.expected_attach_type in (AttachType.XDP_DEVMAP, AttachType.XDP_CPUMAP):
        raise KernelError(errno.EINVAL, "XDP programs for devmap/cpumap entries have no "
                                        "test run")
    if req.flags & ~BPF_F_TEST_XDP_LIVE_FRAMES:
        raise KernelError(errno.EINVAL, f"flags {req.flags:#x}: XDP test runs take only "
                                        "BPF_F_TEST_XDP_LIVE_FRAMES")
    live = bool(req.flags & BPF_F_TEST_XDP_LIVE_FRAMES)
    batch_size = req.batch_size
    if live:
        batch_size = batch_size or NAPI_POLL_WEIGHT
        if batch_size > TEST_XDP_MAX_BATCH:
            raise KernelError(errno.E2BIG, f"batch_size {batch_size} is over "
                                           f"{TEST_XDP_MAX_BATCH}")
    elif batch_size:
        raise KernelError(errno.EINVAL, "batch_size is for live-frames runs only "
                                        "(flags BPF_F_TEST_XDP_LIVE_FRAMES)")
    size = len(req.data_in)
    ctx = _ctx_init(req, XDP_MD_SIZE)
    headroom = XDP_PACKET_HEADROOM
    meta = 0
    linear = size
    ingress = rx_queue = 0
    if ctx is not None:
        data, data_end, data_meta, ingress, rx_queue, egress = XDP_MD.unpack_from(ctx)
        if data_meta or data_end > size or data > data_end or (
                live and (req.data_size_out or req.ctx_size_out)):
            raise KernelError(errno.EINVAL, "xdp_md: data_meta must be 0, data <= "
                              "data_end <= data size; a live-frames run returns no "
                              "data_out or ctx_out")
        if data % 4 or data > XDP_METADATA_MAX \
                or data > XDP_PACKET_HEADROOM - XDP_FRAME_SIZE:
            raise KernelError(errno.EINVAL, "xdp_md: metadata a multiple of 4 up to "
                              f"{XDP_PACKET_HEADROOM - XDP_FRAME_SIZE} bytes (the "
                              "headroom less struct xdp_frame)")
        headroom -= data
        meta, linear = data, data_end
    max_linear = PAGE_SIZE - headroom - (XDP_PAGE_HEAD_SIZE if live else 0) \
        - SKB_SHINFO_SIZE
    linear = min(linear, max_linear)
    if live and size > linear:
        raise KernelError(errno.EINVAL, f"data_in is {size} bytes: a live-frames run "
                                        f"takes no frame over {linear} bytes")
    if size - meta < ETH_HLEN:
        raise KernelError(errno.EINVAL, f"data_in is {size - meta} bytes after the metadata, "
                                        f"less than an Ethernet header ({ETH_HLEN})")
    if ctx is not None:  # xdp_convert_md_to_buff
        if egress:
            raise KernelError(errno.EINVAL, "xdp_md.egress_ifindex must be 0")
        if not ingress and rx_queue:
            raise KernelError(errno.EINVAL, "xdp_md.rx_queue_index needs an "
                                            "ingress_ifindex")
    dev = net_of(prog.run_env.machine).dev_get_by_index(ingress or LOOPBACK_IFINDEX)
    if dev is None:
        raise KernelError(errno.ENODEV, f"no device with ifindex {ingress}")
    if rx_queue >= dev.real_num_rx_queues:
        raise KernelError(errno.EINVAL, f"rx_queue_index {rx_queue}: {dev.name} has "
                                        f"{dev.real_num_rx_queues} rx queue(s)")
    if live:
        template = XdpBuff.from_bytes(req.data_in, dev, rx_queue, metasize=meta,
                                      headroom=headroom)
        duration = bpf_test_run_xdp_live(prog, template, req.repeat, batch_size)
        ctx_out = bytearray(ctx) if ctx is not None else None
        return _test_finish(req, req.data_in, 0, min(duration, M32), ctx_out)
    # The page: data_hard_start at 0, the packet (metadata first) after the headroom,
    # room to grow up to the frame's end less the shared info (xdp_data_hard_end).
    page = bytearray(PAGE_SIZE - SKB_SHINFO_SIZE)
    page[headroom:headroom + linear] = req.data_in[:linear]
    frags = req.data_in[linear:]
    xdp = XdpBuff(page, headroom + meta, headroom + linear, dev, rx_queue,
                  data_meta=headroom, frame_sz=PAGE_SIZE)
    xdp.frags_size = len(frags)

    def once() -> int:  # repeated runs share the buffer, head adjustments included
        return xdp_prog_run(prog, xdp)[0]

    retval, duration = _timed_runs(prog, req.repeat, once)
    data_out = bytes(page[xdp.data_meta:xdp.data_end]) + frags
    ctx_out = None
    if ctx is not None:
        ctx_out = bytearray(XDP_MD.pack(xdp.data - xdp.data_meta, xdp.data_end - xdp.data_meta,
                                        0, ingress, rx_queue, 0))
    return _test_finish(req, data_out, retval, duration, ctx_out)


def bpf_prog_test_run_raw_tp(prog: Any, req: TestRunRequest) -> TestRun:
    if req.data_in or req.data_size_out or req.ctx_size_out or req.repeat \
            or req.batch_size:
        raise KernelError(errno.EINVAL, "raw tracepoint test runs take only ctx_in (no "
                          "data, no ctx_out, repeat 0, no batch_size)")
    ctx_size = len(req.ctx_in)
    if ctx_size < prog.max_ctx_offset or ctx_size > MAX_BPF_FUNC_ARGS * 8:
        raise KernelError(errno.EINVAL, f"ctx_in is {ctx_size} bytes: the program reads "
                          f"{prog.max_ctx_offset}, at most {MAX_BPF_FUNC_ARGS * 8} allowed")
    if not req.flags & BPF_F_TEST_RUN_ON_CPU and req.cpu:
        raise KernelError(errno.EINVAL, "cpu needs flags=BPF_F_TEST_RUN_ON_CPU")
    cpu = req.cpu if req.flags & BPF_F_TEST_RUN_ON_CPU else prog.run_env.machine.current_cpu()
    if not 0 <= cpu < prog.run_env.machine.num_cpus:
        raise KernelError(errno.ENXIO, f"CPU {cpu} is not online")
    with prog.run_env.machine.on_cpu(cpu):
        rs = prog.run(bytes(req.ctx_in))
    return TestRun(retval=rs.retval & M32, duration=0)


def bpf_prog_test_run_syscall(prog: Any, req: TestRunRequest) -> TestRun:
    # bpf_prog_test_run_syscall reads no cpu (it runs where the caller does)
    if req.flags or req.batch_size:
        raise KernelError(errno.EINVAL, "syscall program test runs take no flags and no "
                          "batch_size")
    ctx_size = len(req.ctx_in)
    if ctx_size > U16_MAX:
        raise KernelError(errno.EINVAL, f"ctx_in is {ctx_size} bytes, over {U16_MAX}")
    if req.data_in or req.data_size_out or req.ctx_size_out or req.repeat:
        raise KernelError(errno.EINVAL, "syscall program test runs take only ctx_in (no "
                          "data, no ctx_out, repeat 0)")
    if ctx_size < prog.max_ctx_offset:
        raise KernelError(errno.EINVAL, f"ctx_in is {ctx_size} bytes, the program reads "
                                        f"{prog.max_ctx_offset}")
    rs = prog.run(bytearray(req.ctx_in))
    return TestRun(retval=rs.retval & M32, duration=0)


def _ctx_init(req: TestRunRequest, max_size: int) -> bytes | None:
    """bpf_ctx_init: None without ctx_in and ctx_out; a tail past the struct must be zero."""
    if not req.ctx_in and not req.ctx_size_out:
        return None
    ctx_in = req.ctx_in
    if len(ctx_in) > max_size and any(ctx_in[max_size:]):
        raise KernelError(errno.E2BIG, f"ctx_in has non-zero bytes past the {max_size}-byte "
                                       "context")
    return ctx_in[:max_size].ljust(max_size, b"\0")


def _convert___skb_to_skb(ctx: bytes, skb: bytearray, skb_len: int) -> None:
    """convert___skb_to_skb: only some __sk_buff fields may be set; copy them into ``skb``
    (the program's view), with the kernel's limits and its u16 gso_size."""
    allowed = bytearray(SK_BUFF_SIZE)
    for off, length in _SKB_CTX_IN_FIELDS:
        allowed[off:off + length] = b"\1" * length
    for i, byte in enumerate(ctx):
        if byte and not allowed[i]:
            raise KernelError(errno.EINVAL, f"ctx_in sets __sk_buff byte {i}: a test run takes "
                              "only mark, priority, ingress_ifindex, ifindex, cb, tstamp, "
                              "wire_len, gso_segs, gso_size and hwtstamp")
    for off, length in ((SKB_MARK, 4), (SKB_PRIORITY, 4), (SKB_INGRESS_IFINDEX, 4),
                        (SKB_CB, 20), (SKB_TSTAMP, 8), (SKB_HWTSTAMP, 8)):
        skb[off:off + length] = ctx[off:off + length]
    wire_len, gso_segs, gso_size = (struct.unpack_from("<I", ctx, off)[0]
                                    for off in (SKB_WIRE_LEN, SKB_GSO_SEGS, SKB_GSO_SIZE))
    if wire_len and not skb_len <= wire_len <= GSO_LEGACY_MAX_SIZE:
        raise KernelError(errno.EINVAL, f"wire_len {wire_len}: 0, or from the skb's length "
                                        f"({skb_len}) to {GSO_LEGACY_MAX_SIZE}")
    if gso_segs > GSO_MAX_SEGS:
        raise KernelError(errno.EINVAL, f"gso_segs {gso_segs} is over {GSO_MAX_SEGS}")
    for off, value in ((SKB_WIRE_LEN, wire_len or skb_len), (SKB_GSO_SEGS, gso_segs),
                       (SKB_GSO_SIZE, gso_size & U16_MAX)):  # shinfo's gso_size is a u16
        struct.pack_into("<I", skb, off, value)


def eth_type_trans(frame: bytes | bytearray) -> int:
    """The frame's skb->protocol on the loopback device (host byte order): its EtherType,
    or 802.3 (raw IPX, 0xFFFF after the header) / 802.2 LLC for a length field."""
    proto = int.from_bytes(frame[12:14], "big")
    if proto >= ETH_P_802_3_MIN:
        return proto
    return ETH_P_802_3 if frame[14:16] == b"\xff\xff" else ETH_P_802_2


def _fill_sk_buff(skb: bytearray, packet: bytearray, start: int, protocol: int) -> None:
    """The __sk_buff fields a program reads, as the kernel's test-run skb has them."""
    dst = packet[:6]
    if dst == bytes(6):  # the loopback device's address
        pkt_type = PACKET_HOST
    elif dst[0] & 1:  # lo's broadcast address is all zeros: ff:ff:.. is multicast to it
        pkt_type = PACKET_MULTICAST
    else:
        pkt_type = PACKET_OTHERHOST
    struct.pack_into("<I", skb, SKB_LEN, len(packet) - start)
    struct.pack_into("<I", skb, SKB_PKT_TYPE, pkt_type)
    skb[SKB_PROTOCOL:SKB_PROTOCOL + 2] = protocol.to_bytes(2, "big")  # __be16
    struct.pack_into("<I", skb, SKB_IFINDEX, LOOPBACK_IFINDEX)
    struct.pack_into("<I", skb, SKB_WIRE_LEN, len(packet) - start)
    struct.pack_into("<Q", skb, SKB_SK, SOCK_REGION << 32)
    # the test run's socket takes the family and addresses of an IP frame (raw, big-endian)
    if protocol == ETH_P_IP:
        struct.pack_into("<I", skb, SKB_FAMILY, AF_INET)
        skb[SKB_REMOTE_IP4:SKB_REMOTE_IP4 + 4] = packet[30:34]  # daddr
        skb[SKB_LOCAL_IP4:SKB_LOCAL_IP4 + 4] = packet[26:30]  # saddr
    elif protocol == ETH_P_IPV6:
        struct.pack_into("<I", skb, SKB_FAMILY, AF_INET6)
        skb[SKB_REMOTE_IP6:SKB_REMOTE_IP6 + 16] = packet[38:54]
        skb[SKB_LOCAL_IP6:SKB_LOCAL_IP6 + 16] = packet[22:38]


def _test_finish(req: TestRunRequest, data: bytes, retval: int, duration: int,
                 ctx: bytes | bytearray | None) -> TestRun:
    """bpf_test_finish + bpf_ctx_finish: clamp to the output sizes; ENOSPC when clamped."""
    data_out = data[:req.data_size_out] if req.data_size_out else b""
    if req.data_size_out and len(data) > req.data_size_out:
        raise KernelError(errno.ENOSPC, f"data_out needs {len(data)} bytes, data_size_out is "
                                        f"{req.data_size_out}")
    ctx_out = b""
    if ctx is not None and req.ctx_size_out:
        if len(ctx) > req.ctx_size_out:
            raise KernelError(errno.ENOSPC, f"ctx_out needs {len(ctx)} bytes, ctx_size_out is "
                                            f"{req.ctx_size_out}")
        ctx_out = bytes(ctx)
    return TestRun(retval=retval, duration=duration, data_out=data_out, ctx_out=ctx_out)
