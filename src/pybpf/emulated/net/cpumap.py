"""CPUMAP (kernel/bpf/cpumap.c): creation and element rules.

Rules this module keeps:
- Values are ``struct bpf_cpumap_val { u32 qsize; union { int fd; u32 id; } bpf_prog; }`` cut
  to value_size (4: queue size only, 8: with an XDP program fd on update, its id on lookup).
- Create (``cpu_map_alloc``): max_entries 0, key_size != 4, value_size not 4 or 8, any flag but
  BPF_F_NUMA_NODE (RDONLY/WRONLY included) -> EINVAL; max_entries over NR_CPUS -> E2BIG.
  NR_CPUS is the host kernel's (``/sys/devices/system/cpu/kernel_max`` + 1), or the machine's
  CPU count when that is larger.
- UPDATE: flags > BPF_EXIST -> EINVAL; key >= max_entries -> E2BIG; BPF_NOEXIST -> EEXIST;
  qsize > 16384 -> EOVERFLOW; a key that is not a possible CPU of the machine -> ENODEV;
  qsize 0 removes the entry; otherwise a new entry replaces the old one, and any failure to
  build it (an fd that is not an XDP program with expected_attach_type XDP_CPUMAP included)
  -> ENOMEM, as the kernel reports it.
- LOOKUP of an empty slot or a key >= max_entries -> ENOENT; DELETE of key >= max_entries ->
  EINVAL, else 0. get_next_key walks every index; LOOKUP_AND_DELETE and batches -> ENOTSUPP.

The data path (``BpfCpuMapEntry``), as cpu_map_enqueue and cpu_map_kthread_run (6.15+):
- Each entry has a ring of ``qsize`` frames and a kthread, a real thread named
  ``cpumap/<cpu>/map:<id>`` that runs as the entry's CPU (pinned to the host CPU of that
  number when there is one) and holds a reference on the entry's program.
- A redirect puts the frame in the producing CPU's bulk queue of the entry (8 frames,
  CPU_MAP_BULK_SIZE); a full bulk queue, or ``xdp_do_flush`` at the end of the producer's
  NAPI poll or test-run batch, moves it to the ring. Frames that find the ring full are
  dropped and counted (``enqueue_drops``, the xdp_cpumap_enqueue tracepoint's drops); only
  the flush wakes the kthread.
- The kthread takes up to 8 frames at a time (CPUMAP_BATCH), runs the entry's program on
  them (PASS keeps, REDIRECT redirects and flushes, anything else drops; counted), takes
  that many skb heads at once: from its CPU's NAPI cache (``napi_skb_cache_get_bulk``, the
  default) or, as before 6.15, straight from the slab (``kmem_cache_alloc_bulk``, with
  ``net.cpumap_skb_alloc``), builds the skbs and hands them to the entry's GRO node; after
  64 frames, or when the ring is empty, GRO is flushed and the skbs go up the stack. With the
  device's GRO off the node still takes every skb (gro_receive_skb, the elide test,
  gro_normal_one's batches of 8) and is still flushed. Before 6.15 (``net.cpumap_rx =
  "netif_receive_skb_list"``) there was no GRO node: each pass's skbs went up as one list.
- Modeled time (emulated/machine/timing.py): the redirecting CPU pays ``xdp_do_redirect`` per frame
  and writes its xdp_frame and header lines, then ``ptr_ring_produce`` per frame under the
  ring's producer lock with the slots' lines; the kthread pays ``cpu_map_kthread_frame`` per
  frame with the slots' and frames' lines (transfers from the producer's CPU, dearer across
  nodes), then what skbuff.py, xdp.py, gro.py and stack.py charge for heads, skbs, GRO and
  the stack. A woken kthread first waits (``ring_wait``) until the producer's clock at the
  flush that woke it; its sleep and wake-up themselves cost nothing.
- Replacing or deleting an entry (or freeing the map) frees the old one after an RCU grace
  period: its kthread first empties the ring and the GRO node, so every frame that entered
  the ring is accounted for, then exits; the program reference goes with it.
"""

from __future__ import annotations

import errno
import os
import struct
import threading
import time
import weakref
from collections import Counter, deque
from typing import TYPE_CHECKING, Any

from ...errors import KernelError
from ...uapi import (
    BPF_EXIST,
    BPF_F_NUMA_NODE,
    BPF_NOEXIST,
    XDP_DROP,
    XDP_PASS,
    XDP_REDIRECT,
    AttachType,
    MapType,
)
from ..maps.arraymap import index_get_next_key
from ..maps.bpf_map import BpfMap, MapAttr, map_ops, u32_key
from .devmap import resolve_xdp_prog
from .gro import GroNode
from .netdev import NAPI_POLL_WEIGHT, net_of, xdp_do_generic_redirect
from .skbuff import Counters, SkBuff
from .xdp import (
    XdpBuff,
    bpf_prog_run_xdp,
    cpu_map_flush_list,
    xdp_build_skb_from_frame,
    xdp_do_flush,
    xdp_do_redirect,
)

if TYPE_CHECKING:
    from ..machine.machine import Machine

CPU_MAP_QSIZE_MAX = 16384
CPU_MAP_BULK_SIZE = 8
CPUMAP_BATCH = 8
RING_WAIT = "ring_wait"  # modeled time a woken kthread waits for the flush that woke it
DEFAULT_NR_CPUS = 8192  # x86-64 distribution kernels, when /sys does not say
SYS_KERNEL_MAX = "/sys/devices/system/cpu/kernel_max"


def host_nr_cpus() -> int:
    """NR_CPUS of the running kernel (kernel_max is NR_CPUS - 1)."""
    try:
        with open(SYS_KERNEL_MAX) as f:
            return int(f.read()) + 1
    except (OSError, ValueError):
        return DEFAULT_NR_CPUS


def nr_cpus(machine: Machine) -> int:
    return max(host_nr_cpus(), machine.num_cpus)


@map_ops(MapType.CPUMAP)
class CpuMap(BpfMap):
    """struct bpf_cpu_map: one optional entry per destination CPU."""

    @staticmethod
    def cpu_map_alloc_check(attr: MapAttr, machine: Machine) -> None:
        """cpu_map_alloc's checks, made before it allocates. cpu_map_ops has no
        map_alloc_check: they come after map_create's own (a BPF token's among them)."""
        if attr.max_entries == 0:
            raise KernelError(errno.EINVAL, "max_entries must be at least 1")
        if attr.key_size != 4:
            raise KernelError(errno.EINVAL, f"cpumap keys are u32 CPU numbers: key_size must be "
                                            f"4, got {attr.key_size}")
        if attr.value_size not in (4, 8):
            raise KernelError(errno.EINVAL, f"value_size {attr.value_size}: a cpumap value is a "
                                            f"u32 qsize (4) or qsize + XDP prog fd (8)")
        if attr.map_flags & ~BPF_F_NUMA_NODE:
            raise KernelError(errno.EINVAL, f"map_flags {attr.map_flags:#x}: cpumaps accept only "
                                            f"BPF_F_NUMA_NODE")
        limit = nr_cpus(machine)
        if attr.max_entries > limit:
            raise KernelError(errno.E2BIG, f"max_entries {attr.max_entries} is over NR_CPUS "
                                           f"({limit})")

    def __init__(self, attr: MapAttr, machine: Machine, node: int) -> None:
        """cpu_map_alloc."""
        self.cpu_map_alloc_check(attr, machine)
        super().__init__(attr, machine, node)
        self.cpu_map: dict[int, BpfCpuMapEntry] = {}
        self.cpu_map_lock = threading.Lock()  # the xchg of a slot
        self.freed_counters: Counter = Counter()  # what freed entries did, summed

    def retire(self, entry: BpfCpuMapEntry) -> None:
        """A freed entry's kthread is done: keep its counters in the map's totals."""
        counters = entry.counters()
        gro = counters.pop("gro")
        with self.cpu_map_lock:
            self.freed_counters.update(counters)
            self.freed_counters.update({f"gro_{k}": v for k, v in gro.items()})
            self.freed_counters["entries"] += 1

    def cpu_map_lookup_elem(self, key: bytes) -> bytearray | None:
        """The entry's live bpf_cpumap_val (qsize, prog id)."""
        self.access_stats.access(self.machine.current_cpu(), self.numa_node)
        entry = self.cpu_map.get(u32_key(key))
        return None if entry is None else entry.value

    def redirect_target(self, index: int) -> BpfCpuMapEntry | None:
        """__cpu_map_lookup_elem: the entry a redirect enqueues to."""
        return self.cpu_map.get(index)

    def cpu_map_update_elem(self, key: bytes, value: bytes, flags: int) -> None:
        key_cpu = u32_key(key)
        qsize = int.from_bytes(value[:4], "little")
        prog_fd = struct.unpack("<i", value[4:8])[0] if self.value_size == 8 else 0
        if flags > BPF_EXIST:
            raise KernelError(errno.EINVAL, f"flags {flags:#x}: use BPF_ANY or BPF_EXIST")
        if key_cpu >= self.max_entries:
            raise KernelError(errno.E2BIG, f"CPU {key_cpu} is out of range (max_entries "
                                           f"{self.max_entries})")
        if flags == BPF_NOEXIST:
            raise KernelError(errno.EEXIST, "every cpumap slot exists, so BPF_NOEXIST always "
                                            "fails")
        if qsize > CPU_MAP_QSIZE_MAX:
            raise KernelError(errno.EOVERFLOW, f"qsize {qsize} is over {CPU_MAP_QSIZE_MAX}")
        if key_cpu >= self.machine.num_cpus:
            raise KernelError(errno.ENODEV, f"CPU {key_cpu} is not a possible CPU of this "
                                            f"machine (CPUs 0-{self.machine.num_cpus - 1})")
        if qsize == 0:
            self._entry_replace(key_cpu, None)
            return
        prog = None
        if prog_fd > 0:
            try:
                prog = resolve_xdp_prog(self, prog_fd, AttachType.XDP_CPUMAP)
            except KernelError as exc:  # __cpu_map_entry_alloc fails: cpu_map_update_elem
                # reports ENOMEM whatever went wrong
                raise KernelError(errno.ENOMEM, f"{exc.detail} (the kernel reports this as "
                                  "ENOMEM)") from None
        self._entry_replace(key_cpu, BpfCpuMapEntry(self, key_cpu, qsize, prog))
        self.access_stats.access(self.machine.current_cpu(), self.machine.cpu_node[key_cpu])

    def _entry_replace(self, key_cpu: int, entry: BpfCpuMapEntry | None) -> None:
        """__cpu_map_entry_replace: swap the slot; free the old entry after a grace period."""
        with self.cpu_map_lock:
            old = self.cpu_map.pop(key_cpu, None)
            if entry is not None:
                self.cpu_map[key_cpu] = entry
        if old is not None:
            rcu = self.machine.rcu
            rcu.call_rcu(old.free)
            rcu.poll()

    def cpu_map_free(self) -> None:
        """cpu_map_free: after a grace period, every entry drains and stops."""
        rcu = self.machine.rcu
        if not rcu.in_read_section():
            rcu.synchronize_rcu()
        with self.cpu_map_lock:
            entries, self.cpu_map = list(self.cpu_map.values()), {}
        for entry in entries:
            entry.free()

    def mem_stats(self) -> dict:
        """The map's counters, with each entry's data path counters under "entries"."""
        stats = super().mem_stats()
        stats["entries"] = {cpu: entry.counters() for cpu, entry in sorted(self.cpu_map.items())}
        with self.cpu_map_lock:
            stats["freed_entries"] = dict(self.freed_counters)
        return stats

    def cpu_map_delete_elem(self, key: bytes) -> None:
        key_cpu = u32_key(key)
        if key_cpu >= self.max_entries:
            raise KernelError(errno.EINVAL, f"CPU {key_cpu} is out of range (max_entries "
                                            f"{self.max_entries})")
        self._entry_replace(key_cpu, None)

    def cpu_map_get_next_key(self, key: bytes | None) -> bytes:
        return index_get_next_key(self.max_entries, key)

    # struct bpf_map_ops cpu_map_ops
    map_lookup_elem = cpu_map_lookup_elem
    map_update_elem = cpu_map_update_elem
    map_delete_elem = cpu_map_delete_elem
    map_get_next_key = cpu_map_get_next_key
    map_free = cpu_map_free


# -- the data path ---------------------------------------------------------------------------------
class XdpBulkQueue:
    """struct xdp_bulk_queue: one producer CPU's frames for one entry, before the ring."""

    __slots__ = ("rcpu", "q", "lock", "on_list", "processed", "drops", "flushes")

    def __init__(self, rcpu: BpfCpuMapEntry) -> None:
        self.rcpu = rcpu
        self.q: list[Any] = []
        self.lock = threading.Lock()  # bq_lock
        self.on_list = False
        self.processed = 0  # frames this queue moved to the ring or dropped there
        self.drops = 0  # of which the ring had no room for
        self.flushes = 0

    def flush_to_queue(self) -> None:
        """bq_flush_to_queue (bq_lock held): into the ring; no room means a counted drop."""
        frames, self.q = self.q, []
        if not frames:
            return
        rcpu = self.rcpu
        with rcpu.producer_lock:
            room = rcpu.qsize - len(rcpu.queue)
            rcpu.ring_produce(len(frames[:room]))
            rcpu.queue.extend(frames[:room])
        drops = max(0, len(frames) - room)
        self.processed += len(frames)
        self.drops += drops
        self.flushes += 1
        rcpu.trace_enqueue(len(frames), drops)

    def flush(self) -> None:
        """__cpu_map_flush for this queue: to the ring, then wake the kthread."""
        with self.lock:
            self.flush_to_queue()
            self.on_list = False
        rcpu = self.rcpu
        rcpu.woken_at = rcpu.timing.now(rcpu.machine.current.cpu)
        rcpu.wake.set()


def cpu_map_kthread_run(ref: weakref.ref, wake: threading.Event,
                        running: threading.Event) -> None:
    """The entry's kthread (cpu_map_kthread_run): sleep on an empty ring, else poll it."""
    rcpu = ref()
    rcpu.machine.set_cpu(rcpu.cpu)
    try:
        if rcpu.cpu in os.sched_getaffinity(0):
            os.sched_setaffinity(0, {rcpu.cpu})  # kthread_bind to the host CPU
    except OSError:
        pass  # a host that refuses affinity: the thread stays unbound
    running.set()
    packets = 0
    while not rcpu.should_stop or rcpu.queue:
        sched = 0
        if not rcpu.queue:
            wake.clear()
            if not rcpu.queue and not rcpu.should_stop:
                rcpu.sleeping = True
                del rcpu
                wake.wait()
                rcpu = ref()
                if rcpu is None:
                    return
                rcpu.sleeping = False
                rcpu.timing.wait_until(rcpu.cpu, rcpu.woken_at, RING_WAIT)
                sched = 1
        packets += rcpu.poll_once(sched)
        if packets >= NAPI_POLL_WEIGHT or not rcpu.queue:
            rcpu.gro_flush()
            packets = 0
        rcpu.net.do_softirq()  # local_bh_enable
    rcpu.kthread_exit()


class CpuMapEntryStats(Counters):
    """What an entry's kthread did: frames taken off the ring, passes that took some, sleeps,
    the program's verdicts, skb heads (recycled through the NAPI cache or new), heads it
    could not get, skbs handed to GRO."""

    __slots__ = ("polled", "batches", "sched", "prog_pass", "prog_drop", "prog_redirect",
                 "skb_heads", "heads_recycled", "heads_new", "alloc_drops", "skbs_in")


class BpfCpuMapEntry:
    """struct bpf_cpu_map_entry: a ring, per-CPU bulk queues, a GRO node and a kthread."""

    def __init__(self, cmap: CpuMap, cpu: int, qsize: int, prog: Any) -> None:
        machine = cmap.machine
        self.machine = machine
        self.net = net_of(machine)
        self.cpu = cpu
        self.map_id = cmap.id
        self.qsize = qsize
        self.prog = prog
        if prog is not None:
            cmap.system.bpf_prog_inc(prog)
        self.value = bytearray(struct.pack("<II", qsize, prog.id if prog is not None else 0))
        self.queue: deque[Any] = deque()  # the ptr_ring: xdp frames and generic skbs
        self.producer_lock = threading.Lock()
        self.bulkq: dict[int, XdpBulkQueue] = {}  # per producer CPU, made on first use
        stack = self.net.stack
        self.gro = GroNode(stack.netif_receive_skb_list, self.net.napi_put_head,
                           stack.udp_gro_sock, self.net.charge)
        self.gro_rx = self.net.cpumap_rx == "gro_receive_skb"  # 6.15+: through the GRO node
        # Modeled time: the ring's slots live on the entry's node (one 8-byte pointer each),
        # its producer lock on a line of its own; slots produced and consumed so far.
        timing = self.timing = machine.timing
        node = machine.cpu_node[cpu]
        self.ring_addr = timing.alloc_region(qsize * 8, node)
        self.ring_tlock = timing.new_lock(timing.alloc_region(64, node))
        self.ring_produced = 0
        self.ring_consumed = 0
        self.woken_at = 0.0  # the producer's clock at the flush that last woke the kthread
        self.stats = CpuMapEntryStats()
        self.skb_enqueued = 0  # generic-XDP skbs put in the ring
        self.skb_enqueue_drops = 0
        self.wake = threading.Event()
        self.sleeping = False
        self.should_stop = False
        self.freed = False
        self.cmap = cmap
        running = threading.Event()
        # The thread holds the entry weakly between passes: an entry dropped with its whole
        # system (never freed) wakes it through this finalizer, and it ends.
        self.kthread = threading.Thread(
            target=cpu_map_kthread_run, args=(weakref.ref(self), self.wake, running),
            name=f"cpumap/{cpu}/map:{self.map_id}", daemon=True)
        weakref.finalize(self, self.wake.set)
        self.kthread.start()
        running.wait()  # kthread_running

    # -- producers ----------------------------------------------------------------------------
    def xdp_enqueue(self, xdpf: XdpBuff, dev_rx: Any) -> int:
        """cpu_map_enqueue: into this CPU's bulk queue; 0 (drops are counted at the flush).
        Charges ``xdp_do_redirect``; the xdp_frame written into the page's headroom and the
        packet's header line are this CPU's (it received the page, or generated it)."""
        cpu = self.machine.current_cpu()
        timing = self.timing
        timing.charge(cpu, "xdp_do_redirect")
        if not xdpf.addr:
            xdpf.addr = self.net.rx_page(cpu)
        timing.access(cpu, xdpf.addr, write=True)
        timing.access(cpu, xdpf.addr + xdpf.data, write=True)
        bq = self.bulkq.get(cpu)
        if bq is None:
            bq = self.bulkq.setdefault(cpu, XdpBulkQueue(self))
        xdpf.dev_rx = dev_rx
        with bq.lock:
            if len(bq.q) == CPU_MAP_BULK_SIZE:
                bq.flush_to_queue()
            bq.q.append(xdpf)
            if not bq.on_list:
                bq.on_list = True
                cpu_map_flush_list().append(bq)
        return 0

    def generic_redirect(self, skb: SkBuff) -> int:
        """cpu_map_generic_redirect: a generic-XDP skb straight into the ring."""
        skb.redirected = True  # skb_set_redirected: no second generic XDP run
        with self.producer_lock:
            full = len(self.queue) >= self.qsize
            if not full:
                self.ring_produce(1)
                self.queue.append(skb)
        if full:
            self.skb_enqueue_drops += 1
        else:
            self.skb_enqueued += 1
            self.wake.set()
        self.trace_enqueue(1, int(full))
        return -errno.ENOSPC if full else 0

    def ring_produce(self, n: int) -> None:
        """Modeled time of ``n`` frames into the ring (producer_lock held): the producer's
        ``ptr_ring_produce`` each, under the modeled lock, writing their slots (lines the
        consumer zeroed come over from its CPU)."""
        cpu = self.machine.current.cpu
        timing = self.timing
        timing.spin_lock(cpu, self.ring_tlock)
        timing.charge(cpu, "ptr_ring_produce", n)
        qsize, base = self.qsize, self.ring_addr
        for slot in range(self.ring_produced, self.ring_produced + n):
            timing.access(cpu, base + (slot % qsize) * 8, write=True)
        self.ring_produced += n
        timing.spin_unlock(cpu, self.ring_tlock)

    def trace_enqueue(self, processed: int, drops: int) -> None:
        """The xdp:xdp_cpumap_enqueue tracepoint."""
        self.net.trace("xdp_cpumap_enqueue", self.map_id, processed, drops, self.cpu)

    # -- the kthread --------------------------------------------------------------------------
    def kthread_exit(self) -> None:
        """The kthread's last steps: flush GRO, then what __cpu_map_entry_free does after
        kthread_stop (drop the program), and hand the counters to the map."""
        self.gro_flush()
        prog, self.prog = self.prog, None
        if prog is not None:
            self.cmap.system.bpf_prog_put(prog)
        self.cmap.retire(self)

    def wait_idle(self, timeout: float = 30.0) -> None:
        """Wait until the kthread sleeps on an empty ring (for tests that need every
        frame handed over to be through)."""
        deadline = time.monotonic() + timeout
        while not (self.sleeping and not self.queue) and self.kthread.is_alive():
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.kthread.name} is still busy after {timeout} s")
            time.sleep(0.001)

    def poll_once(self, sched: int) -> int:
        """One pass of the kthread loop over up to CPUMAP_BATCH ring entries."""
        items = []
        queue = self.queue
        while len(items) < CPUMAP_BATCH:
            try:
                items.append(queue.popleft())
            except IndexError:
                break
        n = len(items)
        if not n and not sched:
            return 0
        self._ring_consume(items)
        frames = [item for item in items if type(item) is XdpBuff]
        skbs = [item for item in items if type(item) is not XdpBuff]
        stats = self.stats
        stats.polled += n
        stats.batches += 1 if n else 0
        stats.sched += sched
        redirects = 0
        if self.prog is not None:
            with self.machine.rcu.read_section():
                frames, redirects = self._prog_run_xdp(frames)
                skbs = self._prog_run_skb(skbs)
                if redirects:
                    xdp_do_flush()
        heads = self._alloc_heads(len(frames))
        alloc_drops = len(frames) - len(heads)
        stats.alloc_drops += alloc_drops
        built = [xdp_build_skb_from_frame(xdpf, skb, xdpf.dev_rx)
                 for xdpf, skb in zip(frames, heads, strict=False)]
        self.net.trace("xdp_cpumap_kthread", self.map_id, n, alloc_drops, sched, 0)
        stats.skbs_in += len(built) + len(skbs)
        if self.gro_rx:
            for skb in built + skbs:
                self.gro.receive(skb)
        elif built or skbs:
            self.net.stack.netif_receive_skb_list(built + skbs)  # before 6.15
        return n

    def gro_flush(self) -> None:
        """cpu_map_gro_flush: full (HZ < 1000), then gro_normal_list; before 6.15 the
        kthread had no GRO node to flush."""
        if self.gro_rx:
            self.gro.flush()

    def _ring_consume(self, items: list[Any]) -> None:
        """Modeled time of taking ``items`` off the ring: ``cpu_map_kthread_frame`` each, the
        slots read and zeroed (their lines come over from the producer's CPU), each frame's
        xdp_frame line read (written by the CPU that enqueued it)."""
        timing, cpu = self.timing, self.cpu
        timing.charge(cpu, "cpu_map_kthread_frame", len(items))
        qsize, base = self.qsize, self.ring_addr
        for slot in range(self.ring_consumed, self.ring_consumed + len(items)):
            timing.access(cpu, base + (slot % qsize) * 8, write=True)
        self.ring_consumed += len(items)
        for item in items:
            if type(item) is XdpBuff and item.addr:
                timing.access(cpu, item.addr)

    def _prog_run_xdp(self, frames: list[XdpBuff]) -> tuple[list[XdpBuff], int]:
        """cpu_map_bpf_prog_run_xdp: the frames that pass, and how many were redirected."""
        stats = self.stats
        passed = []
        redirects = 0
        for xdpf in frames:
            xdpf.rxq_index = 0
            act, ri = bpf_prog_run_xdp(self.prog, xdpf)
            if act == XDP_PASS:
                passed.append(xdpf)
            elif act == XDP_REDIRECT and not xdp_do_redirect(xdpf, ri):
                redirects += 1
            else:  # DROP, ABORTED, TX (invalid here), a failed redirect
                stats.prog_drop += 1
        stats.prog_pass += len(passed)
        stats.prog_redirect += redirects
        return passed, redirects

    def _prog_run_skb(self, skbs: list[SkBuff]) -> list[SkBuff]:
        """cpu_map_bpf_prog_run_skb: generic XDP on the skbs; those that pass."""
        stats = self.stats
        passed = []
        for skb in skbs:
            xdp = XdpBuff.from_bytes(skb.linearize(), skb.dev, 0)
            act, ri = bpf_prog_run_xdp(self.prog, xdp)
            if act == XDP_PASS:
                skb.data, skb.frags = bytearray(xdp.frame_bytes()), []
                passed.append(skb)
                continue
            if act == XDP_REDIRECT and ri is not None:
                skb.data, skb.frags = bytearray(xdp.frame_bytes()), []
                if not xdp_do_generic_redirect(self.net, skb, ri):
                    stats.prog_redirect += 1
                    continue
                self.net.stack.free_skb(skb)
            elif act == XDP_DROP:
                self.net.skb_cache.napi_skb_cache_put(self.cpu, skb)  # napi_consume_skb
            else:
                self.net.stack.free_skb(skb)
            stats.prog_drop += 1
        stats.prog_pass += len(passed)
        return passed

    def _alloc_heads(self, n: int) -> list[SkBuff]:
        if not n:
            return []
        cache = self.net.skb_cache
        if self.net.cpumap_skb_alloc == "kmem_cache_alloc_bulk":
            heads = cache.kmem_cache_alloc_bulk(n)
        else:
            heads = cache.napi_skb_cache_get_bulk(self.cpu, n)
        recycled = sum(1 for skb in heads if skb.recycled)
        stats = self.stats
        stats.skb_heads += len(heads)
        stats.heads_recycled += recycled
        stats.heads_new += len(heads) - recycled
        for skb in heads:
            skb.recycled = False
        return heads

    # -- teardown -----------------------------------------------------------------------------
    def free(self) -> None:
        """__cpu_map_entry_free: flush what producers still hold, stop the kthread (it
        empties the ring first, then drops the program reference)."""
        if self.freed:
            return
        self.freed = True
        for bq in list(self.bulkq.values()):
            with bq.lock:
                bq.flush_to_queue()
        self.should_stop = True
        self.wake.set()
        if threading.current_thread() is self.kthread:
            pass  # freed from inside: the loop ends once the ring is empty
        elif getattr(threading.current_thread(), "name", "").startswith("cpumap/"):
            threading.Thread(target=self.kthread.join, name="kworker/cpumap-stop",
                             daemon=True).start()  # never join one kthread from another
        else:
            self.kthread.join()

    def counters(self) -> dict[str, Any]:
        """Every step's counters: enqueue (per producer CPU, summed), the kthread, GRO."""
        bqs = list(self.bulkq.values())
        processed = sum(bq.processed for bq in bqs)
        drops = sum(bq.drops for bq in bqs)
        out: dict[str, Any] = {
            "enqueued": processed - drops + self.skb_enqueued,
            "enqueue_drops": drops + self.skb_enqueue_drops,
            "bulk_flushes": sum(bq.flushes for bq in bqs),
            "queued": len(self.queue),
        }
        out.update(self.stats.as_dict())
        out["gro"] = self.gro.stats.as_dict()
        return out
