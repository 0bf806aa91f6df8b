"""Network devices of the emulated machine (net/core/dev.c, drivers/net/veth.c): the
loopback device, veth pairs and plain NIC-like devices, their receive queues and NAPI, their
XDP program slots, and ``Net``, the one network namespace that holds them.

Rules this module keeps:
- ``Net`` is ``struct net``: devices by ifindex and name (``lo`` is ifindex 1; new devices
  take the next free index; a veth pair registers the peer first, as veth_newlink does, so
  ``add_veth("vA", "vB")`` gives vB 2 and vA 3 in a fresh machine, as in a fresh namespace),
  the skb head caches, the protocol stack, and per-CPU softirq state.
- Each device has ``real_num_rx_queues`` receive queues, each a bounded ring (256 frames) with
  its NAPI instance and GRO node. A queue's NAPI runs only when enabled: always on a NIC, on a
  veth only while a native XDP program is attached or its GRO feature is on (else frames sent
  to it fail with ENXIO, as veth_xdp_xmit). ``napi_schedule`` queues a NAPI on the calling
  thread's CPU; ``do_softirq`` polls that CPU's queue (budget 64 a poll) until nothing is
  left, as net_rx_action and ksoftirqd together do.
- A poll (veth_poll) takes frames off the ring, runs the native XDP program on each: PASS
  frames become skbs in bulks of 16 (heads from the CPU's NAPI cache) and go to GRO; TX goes
  back out of the device in bulks of 16; REDIRECT is enqueued and flushed at the end of the
  poll; DROP and ABORTED free the frame. The poll ends with a full GRO flush.
- ``ndo_xdp_xmit`` on a veth puts frames on the peer's ring of queue ``cpu %
  real_num_rx_queues`` (frames over MTU, or a full ring, stop it: the caller frees the rest);
  on a NIC it puts them on the wire (``transmitted()`` reads them back); the loopback device
  has none (EOPNOTSUPP).
- XDP attach follows ``dev_xdp_attach``'s checks and messages, in its order; the native
  (driver) mode exists on veth and NIC devices, the generic (skb) mode on every device, and
  the two exclude each other.
- Counters are per device and per CPU (``count``), summed by ``counters()``.
"""

from __future__ import annotations

import collections
import errno
import ipaddress
import threading
from collections.abc import Callable, Iterable
from typing import Any

from ...errors import KernelError
from ...packet import ETH_HLEN
from ...uapi import (
    XDP_ABORTED,
    XDP_DROP,
    XDP_PASS,
    XDP_REDIRECT,
    XDP_TX,
    AttachType,
    MapType,
    XdpFlags,
)
from ..machine.machine import per_machine
from .gro import GroNode, gro_stats_total
from .skbuff import SkbHeadCache, SkBuff
from .stack import Stack
from .xdp import (
    PAGE_SIZE,
    XdpBuff,
    bpf_prog_run_xdp,
    dev_xdp_enqueue,
    eth_type_trans,
    xdp_build_skb_from_frame,
    xdp_do_flush,
    xdp_do_redirect,
    xdp_ok_fwd_dev,
)

LOOPBACK_IFINDEX = 1
NAPI_POLL_WEIGHT = 64
VETH_RING_SIZE = 256
VETH_XDP_BATCH = 16  # frames turned into skbs at once
VETH_XDP_TX_BULK_SIZE = 16
RX_PAGE_POOL = VETH_RING_SIZE  # pages a CPU's receive side cycles through (modeled time)
VLAN_HLEN = 4
XDP_XMIT_FLUSH = 1

# plain ints: ~ of an IntFlag would keep only the defined bits
XDP_FLAGS_MODES = int(XdpFlags.SKB_MODE | XdpFlags.DRV_MODE | XdpFlags.HW_MODE)
XDP_FLAGS_MASK = int(XdpFlags.UPDATE_IF_NOEXIST | XDP_FLAGS_MODES | XdpFlags.REPLACE)
XDP_MODE_SKB, XDP_MODE_DRV, XDP_MODE_HW = "skb", "drv", "hw"


class _Softirq(threading.local):
    active = False


class Napi:
    """One receive queue (veth_rq) with its NAPI instance and GRO node."""

    def __init__(self, dev: NetDevice, index: int) -> None:
        self.dev = dev
        self.index = index
        self.ring: collections.deque[XdpBuff] = collections.deque()
        self.ring_lock = threading.Lock()  # the ring's producer_lock
        self.lock = threading.Lock()  # NAPI state
        self.enabled = False
        self.scheduled = False
        net = dev.net
        self.gro = GroNode(net.stack.netif_receive_skb_list, net.napi_put_head,
                           net.stack.udp_gro_sock, net.charge)
        self.polls = 0

    def produce(self, frames: list[XdpBuff], max_len: int) -> int:
        """Put frames on the ring until one is too long or the ring is full; how many."""
        n = 0
        with self.ring_lock:
            room = VETH_RING_SIZE - len(self.ring)
            for frame in frames:
                if n == room or frame.len > max_len:
                    break
                self.ring.append(frame)
                n += 1
        return n

    def purge(self) -> int:
        """Drop what the ring holds (NAPI going away); how many frames."""
        with self.ring_lock:
            n = len(self.ring)
            self.ring.clear()
        return n

    def poll(self, budget: int) -> int:
        """veth_poll: up to ``budget`` frames through XDP, GRO and the stack."""
        dev = self.dev
        prog = dev.xdp_prog(XDP_MODE_DRV)
        passed: list[XdpBuff] = []
        tx: list[XdpBuff] = []
        redirected = False
        done = 0
        self.polls += 1
        while done < budget:
            try:
                frame = self.ring.popleft()
            except IndexError:
                break
            done += 1
            dev.count("rx_packets")
            dev.count("rx_bytes", frame.len)
            if prog is None:
                passed.append(frame)
            else:
                frame.dev_rx, frame.rxq_index = dev, self.index
                act, ri = bpf_prog_run_xdp(prog, frame)
                if act == XDP_PASS:
                    passed.append(frame)
                elif act == XDP_TX:
                    dev.count("xdp_tx")
                    tx.append(frame)
                    if len(tx) == VETH_XDP_TX_BULK_SIZE:
                        self._xmit_tx(tx)
                        tx = []
                elif act == XDP_REDIRECT:
                    if xdp_do_redirect(frame, ri):
                        dev.count("xdp_redirect_err")
                    else:
                        dev.count("xdp_redirect")
                        redirected = True
                else:
                    dev.count("xdp_drops")
                    if act != XDP_DROP:
                        dev.count("xdp_aborted" if act == XDP_ABORTED else "xdp_invalid")
            if len(passed) == VETH_XDP_BATCH:
                self._receive_bulk(passed)
                passed = []
        if passed:
            self._receive_bulk(passed)
        if redirected:
            xdp_do_flush()
        self.gro.flush()  # napi_complete_done / napi_poll's flush: full at HZ < 1000
        if tx:
            self._xmit_tx(tx)
        return done

    def _receive_bulk(self, frames: list[XdpBuff]) -> None:
        """veth_xdp_rcv_bulk_skb: heads from this CPU's NAPI cache, then GRO."""
        net = self.dev.net
        skbs = net.skb_cache.napi_skb_cache_get_bulk(net.machine.current_cpu(), len(frames))
        for frame, skb in zip(frames, skbs, strict=True):
            xdp_build_skb_from_frame(frame, skb, self.dev)
            skb.rx_queue = self.index
            self.gro.receive(skb)

    def _xmit_tx(self, frames: list[XdpBuff]) -> None:
        """veth_xdp_flush_bq: XDP_TX frames leave through this device."""
        sent = self.dev.ndo_xdp_xmit(frames, XDP_XMIT_FLUSH)
        if sent < len(frames):
            self.dev.count("xdp_tx_err", len(frames) - max(sent, 0))


class XdpState:
    """One XDP mode's slot of a device: the program and the link that holds it, if any."""

    __slots__ = ("prog", "link")

    def __init__(self) -> None:
        self.prog: Any = None
        self.link: Any = None


class NetDevice:
    """A network device. The base class is a NIC port: native XDP, a wire to transmit on."""

    kind = "nic"
    native_xdp = True  # has ndo_bpf
    xdp_xmit = True  # has ndo_xdp_xmit
    default_gro = True  # NETIF_F_GRO is among the default software features

    def __init__(self, net: Net, ifindex: int, name: str, num_rx_queues: int = 1) -> None:
        self.net = net
        self.ifindex = ifindex
        self.name = name
        self.mac = f"02:00:00:00:{ifindex >> 8 & 0xFF:02x}:{ifindex & 0xFF:02x}"
        self.mtu = 1500
        self.up = True
        self.gro = self.default_gro
        self.gro_udp_fwd = False
        self.addresses: list[bytes] = []
        self.rx = [Napi(self, q) for q in range(num_rx_queues)]
        self.xdp = {XDP_MODE_SKB: XdpState(), XDP_MODE_DRV: XdpState()}
        # devmap.c's per-CPU bulk queues of frames waiting for ndo_xdp_xmit
        self.xdp_bulkq: list[Any] = [None] * net.machine.num_cpus
        self._stats = [collections.Counter() for _ in range(net.machine.num_cpus)]
        self._wire: collections.deque[bytes] = collections.deque()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} ifindex {self.ifindex}>"

    @property
    def real_num_rx_queues(self) -> int:
        return len(self.rx)

    # -- counters ---------------------------------------------------------------------------------
    def count(self, name: str, n: int = 1) -> None:
        self._stats[self.net.machine.current_cpu()][name] += n

    def counters(self) -> dict[str, int]:
        total: collections.Counter = collections.Counter()
        for per_cpu in self._stats:
            total.update(per_cpu)
        return dict(total)

    def gro_counters(self) -> dict[str, int]:
        return gro_stats_total([napi.gro for napi in self.rx])

    # -- configuration ----------------------------------------------------------------------------
    def add_address(self, addr: str) -> None:
        self.addresses.append(ipaddress.ip_address(addr.split("/")[0]).packed)

    def set_gro(self, on: bool) -> None:
        """The GRO feature (``ethtool -K dev gro on|off``)."""
        self.gro = bool(on)
        self.update_napi()

    def napi_wanted(self) -> bool:
        return self.up

    def update_napi(self) -> None:
        """Enable or disable the receive queues' NAPI as the device's state asks."""
        wanted = self.napi_wanted()
        for napi in self.rx:
            if napi.enabled and not wanted:
                dropped = napi.purge()
                if dropped:
                    self.count("rx_dropped", dropped)
            napi.enabled = wanted

    def xdp_prog(self, mode: str) -> Any:
        return self.xdp[mode].prog

    @property
    def xdp_generic_prog(self) -> Any:
        return self.xdp[XDP_MODE_SKB].prog

    # -- transmit ---------------------------------------------------------------------------------
    def xdp_enqueue(self, xdpf: XdpBuff, dev_rx: NetDevice) -> int:
        """A redirect to this device by ifindex (dev_xdp_enqueue)."""
        return dev_xdp_enqueue(self, xdpf, dev_rx)

    def ndo_xdp_xmit(self, frames: list[XdpBuff], flags: int) -> int:
        """Transmit XDP frames; how many went (the caller frees the rest), or -errno."""
        for frame in frames:
            self._wire.append(frame.frame_bytes())
        self.count("tx_packets", len(frames))
        self.count("tx_bytes", sum(frame.len for frame in frames))
        return len(frames)

    def generic_redirect(self, skb: SkBuff) -> int:
        """A generic-XDP redirect to this device by ifindex: out it goes (0 or -errno)."""
        err = xdp_ok_fwd_dev(self, skb.len)
        if not err:
            self.xmit_skb(skb)
        return err

    def xmit_skb(self, skb: SkBuff) -> None:
        """dev_queue_xmit of an skb (generic XDP's TX and redirects)."""
        self._wire.append(skb.linearize())
        self.count("tx_packets")
        self.count("tx_bytes", skb.len)
        self.net.stack.free_skb(skb)

    def transmitted(self) -> list[bytes]:
        """Take the frames this device put on its wire so far (oldest first)."""
        frames = []
        while self._wire:
            frames.append(self._wire.popleft())
        return frames

    # -- receive ----------------------------------------------------------------------------------
    def receive(self, frames: Iterable[bytes], queue: int = 0) -> int:
        """Frames arriving from the wire on ``queue``: onto its ring, then its NAPI runs on
        this CPU. Returns how many the ring took (the rest are ``rx_dropped``)."""
        napi = self.rx[queue]
        if not napi.enabled:
            raise KernelError(errno.ENETDOWN, f"{self.name}: queue {queue} has no NAPI")
        bufs = [XdpBuff.from_bytes(frame, self, queue) for frame in frames]
        n = napi.produce(bufs, self.mtu + ETH_HLEN + VLAN_HLEN)
        if n < len(bufs):
            self.count("rx_dropped", len(bufs) - n)
        self.net.napi_schedule(napi)
        self.net.do_softirq()
        self.net.machine.rcu.poll()
        return n

    # -- XDP programs -----------------------------------------------------------------------------
    def ndo_bpf_check(self, prog: Any) -> None:
        """The driver's own checks when a native program is installed."""

    def xdp_installed(self, mode: str) -> None:
        """A native program came or went: the driver reconfigures."""


class Loopback(NetDevice):
    kind = "loopback"
    native_xdp = False
    xdp_xmit = False

    def ndo_xdp_xmit(self, frames: list[XdpBuff], flags: int) -> int:
        return -errno.EOPNOTSUPP

    def xmit_skb(self, skb: SkBuff) -> None:
        """loopback_xmit: the frame comes straight back in."""
        self.count("tx_packets")
        skb.protocol = eth_type_trans(skb, self)
        self.net.stack.netif_receive_skb(skb)


class Veth(NetDevice):
    """One end of a veth pair."""

    kind = "veth"
    default_gro = False  # veth starts with GRO off (and so without NAPI)

    def __init__(self, net: Net, ifindex: int, name: str, num_rx_queues: int) -> None:
        super().__init__(net, ifindex, name, num_rx_queues)
        self.peer: Veth | None = None

    def napi_wanted(self) -> bool:
        return self.up and (self.gro or self.xdp_prog(XDP_MODE_DRV) is not None)

    def xdp_installed(self, mode: str) -> None:
        self.update_napi()

    def ndo_bpf_check(self, prog: Any) -> None:
        """veth_xdp_set's checks."""
        peer = self.peer
        if peer is None:
            raise KernelError(errno.ENOTCONN, "Cannot set XDP when peer is detached")
        max_mtu = 4096 - 256 - 320 - ETH_HLEN  # SKB_WITH_OVERHEAD(PAGE_SIZE - headroom)
        if peer.mtu > max_mtu:
            raise KernelError(errno.ERANGE, "Peer MTU is too large to set XDP")
        if self.real_num_rx_queues < peer.real_num_rx_queues:
            raise KernelError(errno.ENOSPC, "XDP expects number of rx queues not less than "
                                            "peer tx queues")

    def ndo_xdp_xmit(self, frames: list[XdpBuff], flags: int) -> int:
        """veth_xdp_xmit: onto the peer's ring for this CPU's queue."""
        peer = self.peer
        if peer is None:
            return -errno.ENXIO
        napi = peer.rx[self.net.machine.current_cpu() % peer.real_num_rx_queues]
        if not napi.enabled:
            return -errno.ENXIO
        n = napi.produce(frames, peer.mtu + ETH_HLEN + VLAN_HLEN)
        self.count("tx_packets", n)
        peer.count("peer_tq_xdp_xmit", n)
        if n < len(frames):
            peer.count("peer_tq_xdp_xmit_err", len(frames) - n)
        if flags & XDP_XMIT_FLUSH:
            self.net.napi_schedule(napi)
        return n

    def xmit_skb(self, skb: SkBuff) -> None:
        """veth_xmit: the peer receives the frame (as netif_rx and its backlog would)."""
        peer = self.peer
        self.count("tx_packets")
        if peer is None or not peer.up:
            self.count("tx_dropped")
            self.net.stack.free_skb(skb)
            return
        peer.count("rx_packets")
        skb.dev = peer
        skb.protocol = eth_type_trans(skb, peer)
        self.net.stack.netif_receive_skb(skb)


def _prog_put(prog: Any) -> None:
    """Drop the reference an attachment held on ``prog``."""
    system = getattr(prog, "system", None)
    if system is not None:
        system.bpf_prog_put(prog)


def xdp_do_generic_redirect(net: Net, skb: SkBuff, ri: Any) -> int:
    """Where a generic-mode program's REDIRECT sends an skb; 0 or -errno (the caller frees)."""
    if ri.map_type == MapType.UNSPEC:
        target = net.dev_get_by_index(ri.tgt_index)
        return -errno.EINVAL if target is None else target.generic_redirect(skb)
    if ri.broadcast:
        return ri.bpf_map.dev_map_redirect_multi(skb, ri.exclude_ingress)
    return ri.tgt_value.generic_redirect(skb)


class Net:
    """struct net of the emulated machine: devices, skb caches, the stack, softirqs."""

    def __init__(self, machine: Any) -> None:
        self.machine = machine
        self._lock = threading.RLock()
        self.devices: dict[int, NetDevice] = {}
        self.skb_cache = SkbHeadCache(machine.num_cpus, machine.timing, machine.current)
        self.stack = Stack(self)
        # How cpumap's kthreads get skb heads: "napi_skb_cache_get_bulk" (6.15+) or
        # "kmem_cache_alloc_bulk" (before), for the before/after of the GRO series.
        self.cpumap_skb_alloc = "napi_skb_cache_get_bulk"
        # How they pass skbs up: "gro_receive_skb" (a GRO node, 6.15+) or
        # "netif_receive_skb_list" (each pass's skbs as one list, no GRO node: before).
        self.cpumap_rx = "gro_receive_skb"
        # Who hears the tracepoints the data path fires: sink(name, args), once each (the
        # systems on this machine with raw tracepoint programs).
        self.trace_sinks: list[Callable[[str, tuple[int, ...]], Any]] = []
        self._poll_lists: list[collections.deque[Napi]] = [
            collections.deque() for _ in range(machine.num_cpus)]
        self._rx_pages: list[collections.deque[int]] = [
            collections.deque() for _ in range(machine.num_cpus)]
        self._softirq = _Softirq()
        lo = Loopback(self, LOOPBACK_IFINDEX, "lo")
        lo.addresses += [ipaddress.ip_address("127.0.0.1").packed,
                         ipaddress.ip_address("::1").packed]
        lo.mac = "00:00:00:00:00:00"
        self.devices[LOOPBACK_IFINDEX] = lo

    # -- devices ----------------------------------------------------------------------------------
    def dev_get_by_index(self, ifindex: int) -> NetDevice | None:
        return self.devices.get(ifindex)

    def dev_get_by_name(self, name: str) -> NetDevice | None:
        return next((dev for dev in list(self.devices.values()) if dev.name == name), None)

    @property
    def ifindexes(self) -> frozenset[int]:
        return frozenset(self.devices)

    def _new_index(self, ifindex: int | None) -> int:
        if ifindex is None:
            ifindex = max(self.devices) + 1
            while ifindex in self.devices:
                ifindex += 1
        elif not isinstance(ifindex, int) or ifindex < 1 or ifindex in self.devices:
            raise ValueError(f"ifindex {ifindex!r} is taken or not a positive int")
        return ifindex

    def _check_name(self, name: str) -> None:
        if not isinstance(name, str) or not 0 < len(name.encode()) < 16 or "/" in name \
                or " " in name:
            raise ValueError(f"interface name {name!r}: 1-15 bytes, no '/' or spaces")
        if self.dev_get_by_name(name) is not None:
            raise ValueError(f"a device named {name!r} exists already")

    def add_device(self, name: str, *, ifindex: int | None = None,
                   num_rx_queues: int = 1) -> NetDevice:
        """A NIC-like device whose transmitted frames tests read back (``transmitted()``)."""
        with self._lock:
            self._check_name(name)
            dev = NetDevice(self, self._new_index(ifindex), name, num_rx_queues)
            self.devices[dev.ifindex] = dev
        dev.update_napi()
        return dev

    def add_veth(self, name: str, peer_name: str) -> tuple[Veth, Veth]:
        """A veth pair; (``name``, ``peer_name``). The peer registers first, and each end
        has one receive queue per CPU, as veth does by default."""
        queues = self.machine.num_cpus
        with self._lock:
            self._check_name(name)
            self._check_name(peer_name)
            if name == peer_name:
                raise ValueError("a veth pair needs two names")
            peer = Veth(self, self._new_index(None), peer_name, queues)
            self.devices[peer.ifindex] = peer
            dev = Veth(self, self._new_index(None), name, queues)
            self.devices[dev.ifindex] = dev
        dev.peer, peer.peer = peer, dev
        return dev, peer

    def del_device(self, dev: NetDevice) -> None:
        """unregister_netdevice: the device leaves with its XDP programs (links stay open but
        detached) and what its rings held; a veth takes its peer with it."""
        for gone in (dev, getattr(dev, "peer", None)):
            if gone is None or self.devices.get(gone.ifindex) is not gone:
                continue
            with self._lock:
                del self.devices[gone.ifindex]
                for state in gone.xdp.values():
                    prog, link = state.prog, state.link
                    state.prog = state.link = None
                    if link is not None:
                        link.dev = None
                    elif prog is not None:
                        _prog_put(prog)
            gone.up = False
            gone.update_napi()

    def is_local_address(self, addr: bytes) -> bool:
        if addr[:1] == b"\x7f" and len(addr) == 4:
            return True
        return any(addr in dev.addresses for dev in list(self.devices.values()))

    def trace(self, name: str, *args: int) -> None:
        """Fire tracepoint ``name`` (xdp_cpumap_enqueue, ...) with its raw arguments."""
        for sink in self.trace_sinks:
            sink(name, args)

    def add_trace_sink(self, sink: Callable[[str, tuple[int, ...]], Any]) -> None:
        with self._lock:
            if sink not in self.trace_sinks:
                self.trace_sinks.append(sink)

    # -- softirq ----------------------------------------------------------------------------------
    def napi_schedule(self, napi: Napi) -> None:
        """Queue ``napi`` for a poll on the calling thread's CPU (once)."""
        with napi.lock:
            if napi.scheduled or not napi.enabled:
                return
            napi.scheduled = True
        self._poll_lists[self.machine.current_cpu()].append(napi)

    def do_softirq(self) -> None:
        """net_rx_action for the calling thread's CPU: poll until nothing is scheduled."""
        state = self._softirq
        if state.active:
            return  # already inside this thread's softirq
        state.active = True
        poll_list = self._poll_lists[self.machine.current_cpu()]
        self.machine.rcu.read_lock()  # softirqs are RCU read-side sections
        try:
            while True:
                try:
                    napi = poll_list.popleft()
                except IndexError:
                    return
                work = napi.poll(NAPI_POLL_WEIGHT) if napi.enabled else 0
                with napi.lock:
                    again = napi.enabled and (work == NAPI_POLL_WEIGHT or bool(napi.ring))
                    napi.scheduled = again
                if again:
                    poll_list.append(napi)
        finally:
            self.machine.rcu.read_unlock()
            state.active = False

    def charge(self, event: str, n: int = 1) -> None:
        """Modeled work on the calling thread's CPU (a [net] cost of the profile)."""
        self.machine.timing.charge(self.machine.current.cpu, event, n)

    def access(self, addr: int, write: bool = False) -> None:
        """A modeled memory access from the calling thread's CPU."""
        self.machine.timing.access(self.machine.current.cpu, addr, write)

    def rx_page(self, cpu: int) -> int:
        """The next page of ``cpu``'s receive page pool: RX_PAGE_POOL pages on its node,
        used in turn, as a driver's page_pool recycles them."""
        pool = self._rx_pages[cpu]
        if not pool:
            base = self.machine.timing.alloc_region(RX_PAGE_POOL * PAGE_SIZE,
                                                    self.machine.cpu_node[cpu])
            pool.extend(base + i * PAGE_SIZE for i in range(RX_PAGE_POOL))
        page = pool.popleft()
        pool.append(page)
        return page

    def napi_put_head(self, skb: SkBuff) -> None:
        """napi_skb_free_stolen_head: a merged skb's head goes to this CPU's NAPI cache."""
        self.skb_cache.napi_skb_cache_put(self.machine.current_cpu(), skb)

    # -- generic XDP ------------------------------------------------------------------------------
    def do_xdp_generic(self, skb: SkBuff) -> bool:
        """Run the device's generic-mode program on ``skb``; True when it goes on up."""
        dev = skb.dev
        prog = dev.xdp_generic_prog
        frame = skb.linearize()
        xdp = XdpBuff.from_bytes(frame, dev, skb.rx_queue)
        act, ri = bpf_prog_run_xdp(prog, xdp)
        if act == XDP_PASS:
            if xdp.data != 256 or xdp.data_end - xdp.data != len(frame) \
                    or xdp.page[xdp.data:xdp.data_end] != frame:
                skb.data, skb.frags = bytearray(xdp.frame_bytes()), []
                skb.protocol = eth_type_trans(skb, dev)
            return True
        skb.data, skb.frags = bytearray(xdp.frame_bytes()), []
        if act == XDP_TX:
            dev.count("xdp_tx")
            dev.xmit_skb(skb)
        elif act == XDP_REDIRECT and ri is not None:
            if xdp_do_generic_redirect(self, skb, ri):
                dev.count("xdp_redirect_err")
                self.stack.free_skb(skb)
            else:
                dev.count("xdp_redirect")
        else:
            dev.count("xdp_drops")
            self.stack.free_skb(skb)
        return False

    # -- XDP attach -------------------------------------------------------------------------------
    def dev_xdp_attach(self, dev: NetDevice, prog: Any, link: Any = None,
                       old_prog: Any = None, flags: int = 0) -> None:
        """dev_xdp_attach: install ``prog`` (or ``link``'s program; ``prog`` None without a
        link detaches) in the mode ``flags`` pick; the checks and messages of
        net/core/dev.c, in its order (KernelError). A program attached without a link is
        held by the device; a link holds its own (``link.prog``, ``link.dev``,
        ``link.mode``)."""
        modes = flags & XDP_FLAGS_MODES
        if link is not None and flags & ~XDP_FLAGS_MODES:
            raise KernelError(errno.EINVAL, "Invalid XDP flags for BPF link attachment")
        if bin(modes).count("1") > 1:
            raise KernelError(errno.EINVAL, "Only one XDP mode flag can be set")
        if old_prog is not None and not flags & XdpFlags.REPLACE:
            raise KernelError(errno.EINVAL, "XdpFlags.REPLACE is not specified")
        if flags & XdpFlags.HW_MODE:
            raise KernelError(errno.EOPNOTSUPP, "Underlying driver does not support XDP in "
                                                "HW mode")
        if flags & XdpFlags.SKB_MODE:
            mode = XDP_MODE_SKB
        elif flags & XdpFlags.DRV_MODE or dev.native_xdp:
            mode = XDP_MODE_DRV
        else:
            mode = XDP_MODE_SKB
        with self._lock:
            state = dev.xdp[mode]
            if state.link is not None:
                raise KernelError(errno.EBUSY, "Can't replace active BPF XDP link")
            cur = state.prog
            if link is not None and cur is not None:
                raise KernelError(errno.EBUSY, "Can't replace active XDP program with BPF link")
            if flags & XdpFlags.REPLACE and cur is not old_prog:
                raise KernelError(errno.EEXIST, "Active program does not match expected")
            new = link.prog if link is not None else prog
            if new is not None:
                other = XDP_MODE_DRV if mode == XDP_MODE_SKB else XDP_MODE_SKB
                if flags & XdpFlags.UPDATE_IF_NOEXIST and cur is not None:
                    raise KernelError(errno.EBUSY, "XDP program already attached")
                if dev.xdp[other].prog is not None:
                    raise KernelError(errno.EEXIST, "Native and generic XDP can't be active "
                                                    "at the same time")
                if new.expected_attach_type == AttachType.XDP_DEVMAP:
                    raise KernelError(errno.EINVAL, "BPF_XDP_DEVMAP programs can not be "
                                                    "attached to a device")
                if new.expected_attach_type == AttachType.XDP_CPUMAP:
                    raise KernelError(errno.EINVAL, "BPF_XDP_CPUMAP programs can not be "
                                                    "attached to a device")
            if new is not cur:
                if mode == XDP_MODE_DRV:
                    if not dev.native_xdp:
                        raise KernelError(errno.EOPNOTSUPP, "Underlying driver does not "
                                                            "support XDP in native mode")
                    if new is not None:
                        dev.ndo_bpf_check(new)
                if link is None and new is not None:
                    new.system.bpf_prog_inc(new)  # the device holds what it runs
                state.prog = new
                if mode == XDP_MODE_DRV:
                    dev.xdp_installed(mode)
            if link is not None:
                state.link = link
                link.dev, link.mode = dev, mode
        if cur is not None and cur is not new:
            _prog_put(cur)  # a program attached without a link: the device's reference

    def dev_xdp_detach_link(self, link: Any) -> None:
        """A link's program leaves its device (link close or detach)."""
        with self._lock:
            dev, mode = link.dev, link.mode
            if dev is None:
                return
            state = dev.xdp[mode]
            if state.link is link:
                state.link = None
                state.prog = None
                if mode == XDP_MODE_DRV:
                    dev.xdp_installed(mode)
            link.dev = None

    def counters(self) -> dict[str, Any]:
        """Every device's counters, the skb head caches and the SNMP tables."""
        return {"devices": {dev.name: dev.counters() for dev in list(self.devices.values())},
                "skb": self.skb_cache.counters(), "snmp": self.stack.counters()}


# net_of(machine): the machine's network namespace (devices, sockets, skb caches), made on first
# use; a side table, so the machine knows nothing of the network.
net_of = per_machine(Net)
