"""XDP buffers and frames, running an XDP program on one, and the redirect machinery
(net/core/xdp.c, net/core/filter.c: xdp_do_redirect, xdp_do_flush), and the devices' transmit
bulk queues every redirect to a device fills (devmap.c's xdp_dev_bulk_queue, bq_enqueue).

Rules this module keeps:
- An ``XdpBuff`` is one page of packet memory with offsets into it, as ``struct xdp_buff``
  (``data_meta <= data <= data_end``, ``XDP_PACKET_HEADROOM`` before the packet, the page
  ending ``SKB_SHINFO_SIZE`` before ``frame_sz``); the same object is the ``xdp_frame`` once
  converted, since only the offsets matter here. Each frame owns its page: nothing a program
  writes leaks into another frame. For modeled time a page gets an address (``addr``) when a
  CPU first writes its xdp_frame (a redirect to a cpumap entry); building an skb from it then
  reads its header line from wherever that CPU left it.
- ``bpf_prog_run_xdp`` runs a program on a buffer and moves the offsets as its
  ``bpf_xdp_adjust_*`` calls did. A program that faults (the kernel's verifier would have
  refused it) returns XDP_ABORTED and is counted, never raised into a data path.
- Redirects follow the kernel in two steps: the helper records where to (``XdpRedirect`` on
  the run's state); ``xdp_do_redirect`` enqueues the frame on the target's per-CPU bulk queue
  (``tgt.xdp_enqueue``), and ``xdp_do_flush`` flushes every queue this thread touched, at the
  end of its NAPI poll or test-run batch, as ``bpf_net_context``'s flush lists do. A failed
  redirect returns the kernel's negative errno; the caller frees the frame and counts it.
"""

from __future__ import annotations

import errno
import threading
from typing import Any

from ...errors import ProgramFault
from ...packet import ETH_HLEN, mac_bytes
from ...uapi import XDP_ABORTED, XDP_PASS, MapType
from ..machine.machine import MODULE_TASK_LOCALS
from ..prog.core import run_prog
from ..prog.filter import (
    SKB_SHINFO_SIZE,
    XDP_FRAME_SIZE,
    XDP_MD,
    XDP_MD_DATA,
    XDP_MD_DATA_END,
    XDP_MD_DATA_META,
    XdpRedirect,
)
from ..prog.memory import CTX_REGION, M32, PACKET_REGION, CtxRegion, RunState
from .skbuff import (
    PACKET_BROADCAST,
    PACKET_HOST,
    PACKET_MULTICAST,
    PACKET_OTHERHOST,
    SKB_HEAD_SIZE,
    SKB_ZEROED,
    SkBuff,
)

PAGE_SIZE = 4096
XDP_PACKET_HEADROOM = 256
ETH_P_802_3_MIN = 0x600  # below: an 802.3 length, not a type
ETH_P_802_2 = 0x0004


class XdpBuff:
    """struct xdp_buff / xdp_frame: a page, offsets into it, and the receive queue."""

    __slots__ = ("page", "data", "data_end", "data_meta", "dev_rx", "rxq_index", "frame_sz",
                 "addr", "frags_size")

    def __init__(self, page: bytearray, data: int, data_end: int, dev_rx: Any,
                 rxq_index: int = 0, data_meta: int | None = None,
                 frame_sz: int = PAGE_SIZE) -> None:
        self.page = page
        self.data = data
        self.data_end = data_end
        self.data_meta = data if data_meta is None else data_meta
        self.dev_rx = dev_rx
        self.rxq_index = rxq_index
        self.frame_sz = frame_sz
        self.addr = 0  # the page's modeled memory, once a CPU placed it (0: not placed)
        # skb_shared_info.xdp_frags_size: the bytes in frags after the linear part (a test
        # run's data_in past the linear size; 0: no frags)
        self.frags_size = 0

    @classmethod
    def from_bytes(cls, packet: bytes | bytearray, dev_rx: Any, rxq_index: int = 0, *,
                   metasize: int = 0, headroom: int = XDP_PACKET_HEADROOM) -> XdpBuff:
        """A fresh page holding ``packet`` (metadata first, ``metasize`` bytes of it) after
        ``headroom`` bytes."""
        page = bytearray(PAGE_SIZE - SKB_SHINFO_SIZE)
        page[headroom:headroom + len(packet)] = packet
        return cls(page, headroom + metasize, headroom + len(packet), dev_rx, rxq_index,
                   data_meta=headroom)

    @property
    def len(self) -> int:
        return self.data_end - self.data

    @property
    def metasize(self) -> int:
        return self.data - self.data_meta

    def frame_bytes(self) -> bytes:
        """The packet, from ``data`` to ``data_end``."""
        return bytes(self.page[self.data:self.data_end])

    def clone(self) -> XdpBuff:
        """A copy on its own page (xdpf_clone, for broadcast redirects)."""
        return XdpBuff(bytearray(self.page), self.data, self.data_end, self.dev_rx,
                       self.rxq_index, self.data_meta, self.frame_sz)


def xdp_prog_run(prog: Any, xdp: XdpBuff, egress_ifindex: int = 0) -> tuple[int, Any]:
    """Run ``prog`` on ``xdp`` with its ``xdp_md``: (the action, the redirect the program
    recorded or None). The offsets follow what the program did to the packet
    (``bpf_xdp_adjust_*``). A fault (ProgramFault) reaches the caller."""
    base = PACKET_REGION << 32
    pointers = {XDP_MD_DATA: base | xdp.data, XDP_MD_DATA_END: base | xdp.data_end,
                XDP_MD_DATA_META: base | xdp.data_meta}
    md = bytearray(XDP_MD.pack(0, 0, 0, getattr(xdp.dev_rx, "ifindex", 0), xdp.rxq_index,
                               egress_ifindex))
    view = memoryview(xdp.page)
    rs = RunState(prog.run_env, view[xdp.data:xdp.data_end])
    rs.mem[CTX_REGION] = CtxRegion("xdp_md", md, pointers)
    rs.mem[PACKET_REGION] = view
    rs.xdp_frags_size = xdp.frags_size
    act = run_prog(prog.executable, rs) & M32
    xdp.data = pointers[XDP_MD_DATA] & M32
    xdp.data_end = pointers[XDP_MD_DATA_END] & M32
    xdp.data_meta = pointers[XDP_MD_DATA_META] & M32
    return act, rs.redirect


def bpf_prog_run_xdp(prog: Any, xdp: XdpBuff, egress_ifindex: int = 0) -> tuple[int, Any]:
    """``xdp_prog_run`` in a data path: a program that faults (the kernel's verifier would
    have refused it) returns XDP_ABORTED and is counted."""
    try:
        return xdp_prog_run(prog, xdp, egress_ifindex)
    except ProgramFault:
        prog.faults = getattr(prog, "faults", 0) + 1
        return XDP_ABORTED, None


# -- bpf_net_context: what this thread must flush -----------------------------------------------
class _NetContext(threading.local):
    def __init__(self) -> None:
        self.dev_flush_list: list[Any] = []
        self.cpu_map_flush_list: list[Any] = []


_net_context = _NetContext()
MODULE_TASK_LOCALS.append(_net_context)


def dev_flush_list() -> list[Any]:
    """This thread's list of device bulk queues holding frames (bpf_net_ctx_get_dev_flush_list)."""
    return _net_context.dev_flush_list


def cpu_map_flush_list() -> list[Any]:
    """This thread's list of cpumap bulk queues holding frames."""
    return _net_context.cpu_map_flush_list


def xdp_do_flush() -> None:
    """Flush every bulk queue this thread enqueued to: devices (``ndo_xdp_xmit``) first, then
    cpumap entries (into their rings, waking their kthreads)."""
    ctx = _net_context
    while ctx.dev_flush_list or ctx.cpu_map_flush_list:
        devs, ctx.dev_flush_list = ctx.dev_flush_list, []
        for bq in devs:
            bq.flush()
        cpus, ctx.cpu_map_flush_list = ctx.cpu_map_flush_list, []
        for bq in cpus:
            bq.flush()


# -- a device's transmit bulk queues (devmap.c's xdp_dev_bulk_queue) ---------------------------
# Every redirect to a device goes through them, by ifindex as through a devmap entry, so they
# stand here, below both the devices (netdev.py) and the maps (devmap.py).
DEV_MAP_BULK_SIZE = 16
XDP_XMIT_FLUSH = 1
VLAN_HLEN = 4


class XdpDevBulkQueue:
    """struct xdp_dev_bulk_queue: one device's frames from one CPU, waiting for the flush."""

    __slots__ = ("dev", "q", "dev_rx", "xdp_prog", "lock", "on_list")

    def __init__(self, dev: Any) -> None:
        self.dev = dev
        self.q: list[XdpBuff] = []
        self.dev_rx: Any = None
        self.xdp_prog: Any = None
        self.lock = threading.Lock()
        self.on_list = False

    def flush(self) -> None:
        """__dev_flush for this queue: send what it holds."""
        with self.lock:
            self._xmit_all(XDP_XMIT_FLUSH)
            self.dev_rx = self.xdp_prog = None
            self.on_list = False

    def _xmit_all(self, flags: int) -> None:
        """bq_xmit_all: the entry's program first, then ndo_xdp_xmit; the rest is freed."""
        frames, self.q = self.q, []
        if not frames:
            return
        dev = self.dev
        cnt = len(frames)
        if self.xdp_prog is not None:
            frames = dev_map_bpf_prog_run(self.xdp_prog, frames, dev)
            if cnt > len(frames):
                dev.count("xdp_prog_drops", cnt - len(frames))
            if not frames:
                return
        sent = dev.ndo_xdp_xmit(frames, flags)
        dev.count("xdp_xmit", max(sent, 0))
        if sent < len(frames):
            dev.count("xdp_xmit_err", len(frames) - max(sent, 0))


def dev_map_bpf_prog_run(prog: Any, frames: list[XdpBuff], dev: Any) -> list[XdpBuff]:
    """The devmap entry's program on each frame, ``egress_ifindex`` set: the frames it
    passed (any other action drops the frame)."""
    return [xdpf for xdpf in frames
            if bpf_prog_run_xdp(prog, xdpf, dev.ifindex)[0] == XDP_PASS]


def xdp_ok_fwd_dev(dev: Any, length: int) -> int:
    """0, or why ``dev`` cannot send a frame of ``length`` bytes (-ENETDOWN, -EMSGSIZE)."""
    if not dev.up:
        return -errno.ENETDOWN
    if length > dev.mtu + ETH_HLEN + VLAN_HLEN:
        return -errno.EMSGSIZE
    return 0


def is_valid_dst(dev: Any, length: int) -> bool:
    return dev.xdp_xmit and not xdp_ok_fwd_dev(dev, length)


def bq_enqueue(dev: Any, xdpf: XdpBuff, dev_rx: Any, xdp_prog: Any) -> None:
    """Queue a frame on ``dev``'s bulk queue of this CPU (sending a full queue first)."""
    cpu = dev.net.machine.current_cpu()
    bq = dev.xdp_bulkq[cpu]
    if bq is None:
        bq = dev.xdp_bulkq[cpu] = XdpDevBulkQueue(dev)
    with bq.lock:
        if len(bq.q) == DEV_MAP_BULK_SIZE:
            bq._xmit_all(0)
        bq.q.append(xdpf)
        if not bq.on_list:  # the first frame since the last flush names ingress and program
            bq.dev_rx, bq.xdp_prog, bq.on_list = dev_rx, xdp_prog, True
            dev_flush_list().append(bq)


def _xdp_enqueue(dev: Any, xdpf: XdpBuff, dev_rx: Any, xdp_prog: Any) -> int:
    if not dev.xdp_xmit:
        return -errno.EOPNOTSUPP
    err = xdp_ok_fwd_dev(dev, xdpf.len)
    if err:
        return err
    bq_enqueue(dev, xdpf, dev_rx, xdp_prog)
    return 0


def dev_xdp_enqueue(dev: Any, xdpf: XdpBuff, dev_rx: Any) -> int:
    """A redirect to a device by ifindex (``bpf_redirect``, a live test run's XDP_TX)."""
    return _xdp_enqueue(dev, xdpf, dev_rx, None)



def xdp_do_redirect(xdp: XdpBuff, ri: XdpRedirect | None) -> int:
    """Send ``xdp`` where the program's redirect said; 0 or a negative errno (the caller then
    returns the frame)."""
    if ri is None:
        return -errno.EINVAL
    if xdp.data_meta < XDP_FRAME_SIZE:
        return -errno.EOVERFLOW  # xdp_convert_buff_to_frame: no room for struct xdp_frame
    if ri.map_type == MapType.UNSPEC:  # bpf_redirect(ifindex) or live-mode XDP_TX
        net = getattr(xdp.dev_rx, "net", None)
        fwd = net.dev_get_by_index(ri.tgt_index) if net is not None else None
        if fwd is None:
            return -errno.EINVAL
        return fwd.xdp_enqueue(xdp, xdp.dev_rx)
    if ri.broadcast:
        return ri.bpf_map.dev_map_enqueue_multi(xdp, xdp.dev_rx, ri.exclude_ingress)
    return ri.tgt_value.xdp_enqueue(xdp, xdp.dev_rx)


# -- frames to skbs ------------------------------------------------------------------------------
def eth_type_trans(skb: SkBuff, dev: Any) -> int:
    """Classify the frame for ``dev`` (pkt_type) and return its protocol (host order)."""
    dst = bytes(skb.data[:6])
    if dst[0] & 1:
        skb.pkt_type = PACKET_BROADCAST if dst == b"\xff" * 6 else PACKET_MULTICAST
    elif dst != mac_bytes(dev.mac):
        skb.pkt_type = PACKET_OTHERHOST
    else:
        skb.pkt_type = PACKET_HOST
    proto = int.from_bytes(skb.data[12:14], "big") if len(skb.data) >= ETH_HLEN else 0
    return proto if proto >= ETH_P_802_3_MIN else ETH_P_802_2


def xdp_build_skb_from_frame(xdpf: XdpBuff, skb: SkBuff, dev: Any) -> SkBuff:
    """__xdp_build_skb_from_frame: the head takes the frame's page (head_frag). Charges
    ``build_skb``, the head's zeroed lines (written) and the frame's Ethernet header (read by
    eth_type_trans) to the calling CPU."""
    machine = dev.net.machine
    cpu = machine.current.cpu
    timing = machine.timing
    timing.charge(cpu, "build_skb")
    if skb.addr:
        for offset in range(0, SKB_ZEROED, 1 << timing.line_shift):
            timing.access(cpu, skb.addr + offset, write=True)
    if xdpf.addr:
        timing.access(cpu, xdpf.addr + xdpf.data)
    skb.data = bytearray(xdpf.page[xdpf.data:xdpf.data_end])
    skb.metasize = xdpf.metasize
    skb.truesize = xdpf.frame_sz + SKB_HEAD_SIZE  # build_skb_around over the whole page
    skb.dev = dev
    skb.protocol = eth_type_trans(skb, dev)
    return skb
