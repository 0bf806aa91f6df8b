"""BPF_PROG_TEST_RUN of XDP programs in live-frames mode (net/bpf/test_run.c,
``BPF_F_TEST_XDP_LIVE_FRAMES``): the traffic generator xdp-trafficgen is built on.

Rules this module keeps:
- ``repeat`` frames (0 means 1) run in batches of ``batch_size`` (1..256, 64 by default),
  each on its own fresh copy of the input page, as received on the context's ingress device
  and queue (the loopback device by default), on the calling thread's CPU.
- Per frame: XDP_TX becomes a redirect to the ingress device; XDP_REDIRECT is enqueued
  (``xdp_do_redirect``); XDP_PASS frames of the batch become skbs (heads from the slab, as
  ``xdp_recv_frames``) and go up the stack together; anything else frees the frame. Failed
  redirects are counted on the ingress device (``xdp_redirect_err``).
- A batch runs inside an RCU read-side section and with "BH disabled": its redirects are
  flushed at its end (``xdp_do_flush``), then the softirqs it raised run on this CPU (a veth
  peer's NAPI), then RCU may advance.
"""

from __future__ import annotations

import time
from typing import Any

from ..uapi import XDP_PASS, XDP_REDIRECT, XDP_TX, MapType
from .maps.bpf_map import INT_MAX
from .net.netdev import NAPI_POLL_WEIGHT, net_of
from .net.xdp import (
    XdpBuff,
    bpf_prog_run_xdp,
    xdp_build_skb_from_frame,
    xdp_do_flush,
    xdp_do_redirect,
)
from .prog.helpers import XdpRedirect

TEST_XDP_MAX_BATCH = 256


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
