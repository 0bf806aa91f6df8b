"""The modeled cpumap redirect rate: Mpps at the cpumap kthread of a declared machine,
from the emulated data path's modeled time (emulated/machine/timing.py), the same on every run.

Rules this module keeps:
- The setup is ``pybpf bench cpumap``'s, on an emulated machine of the profile (its
  topology): vA -> vB, a native XDP program on vB redirecting every frame to the cpumap
  entry of ``cpu`` (qsize 2048, no second-stage program), a UDP_GRO socket on vB, one UDP
  flow of 80-byte IPv6 frames with valid checksums, made by live-frames test runs of an
  XDP_TX program with ingress vA on ``producer_cpu`` (the generator and vB's NAPI run there).
- Traffic goes in bursts of 64 frames (one test-run batch: one NAPI poll of vB, one flush
  into the ring, one GRO flush in the kthread), each taken by the kthread before the next
  starts, and the reader empties the socket on ``app_cpu`` after each: so the host's thread
  interleaving never changes what is charged, and two runs give the same figures.
- Figures come from the emulated CPUs' clocks after warm-up bursts (caches, the NAPI cache
  and the slab's free lists in their steady cycle): the kthread's busy time per frame (its
  clock less ``ring_wait``, the time it slept for frames) gives the rate of a saturated
  kthread, as when many receive queues feed one cpumap CPU (the GRO series' trafficgen
  test); the producer's time per frame says how fast this setup's one generator could feed
  it. Costs are the profile's; nothing here looks at a published result.
"""

from __future__ import annotations

import struct
from dataclasses import asdict, dataclass, field

PORT = 9000
PAYLOAD = b"\x5a" * 18
A_ADDR, B_ADDR = "fd00::1", "fd00::2"
AF_INET6 = 10
BURST = 64
WARMUP_BURSTS = 8
BURSTS = 16
QSIZE = 2048
SKB_ALLOCS = ("kmem_cache_alloc_bulk", "napi_skb_cache_get_bulk")
# How the kthread passes skbs up: 6.15's GRO node, or 6.14's one list per pass (no GRO node,
# whatever the device's GRO setting).
RX_PATHS = ("gro_receive_skb", "netif_receive_skb_list")


@dataclass(frozen=True)
class ModeledRate:
    """What one modeled run gives (ns are modeled ns of the kthread's or producer's CPU)."""

    profile: str
    gro: bool
    skb_alloc: str
    rx: str
    frames: int  # frames the kthread took in the measured bursts
    kthread_ns: float  # busy ns per frame
    producer_ns: float  # ns per frame on the producer's CPU (the reader's work too, if there)
    frames_per_skb: float  # frames per skb reaching UDP
    heads: int
    heads_recycled: int
    breakdown: dict[str, float] = field(default_factory=dict)  # kthread ns per frame by cost
    events: dict[str, int] = field(default_factory=dict)  # how often the kthread paid each cost

    @property
    def mpps(self) -> float:
        """Frames per microsecond of a saturated kthread."""
        return 1e3 / self.kthread_ns

    @property
    def producer_mpps(self) -> float:
        return 1e3 / self.producer_ns

    def as_dict(self) -> dict:
        return {**asdict(self), "mpps": self.mpps, "producer_mpps": self.producer_mpps}


def model_cpumap_rate(profile: str, *, gro: bool, skb_alloc: str = "napi_skb_cache_get_bulk",
                      rx: str = "gro_receive_skb", cpu: int = 1, producer_cpu: int = 0,
                      app_cpu: int | None = None,
                      bursts: int = BURSTS, warmup: int = WARMUP_BURSTS) -> ModeledRate:
    """The modeled kthread rate of the setup above on ``profile`` (a shipped name or a file)."""
    import pybpf
    from pybpf.asm import R0, R1, R2, R3
    from pybpf.asm import builder as b
    from pybpf.emulated import RING_WAIT, XdpBuff, bpf_test_run_xdp_live, net_of
    from pybpf.packet import udp_frame
    from pybpf.programs import Program, ProgramSpec
    from pybpf.uapi import AttachType, MapType, ProgType, XdpAction

    if skb_alloc not in SKB_ALLOCS:
        raise ValueError(f"skb_alloc={skb_alloc!r}: choose one of {', '.join(SKB_ALLOCS)}")
    if rx not in RX_PATHS:
        raise ValueError(f"rx={rx!r}: choose one of {', '.join(RX_PATHS)}")
    if bursts < 1 or warmup < 0:
        raise ValueError(f"bursts must be >= 1 and warmup >= 0, got {bursts}, {warmup}")
    system = pybpf.system("emulated", profile=profile, cpumap_skb_alloc=skb_alloc,
                          cpumap_rx=rx, modeled_time=True)  # the figures are modeled time
    machine = system.machine
    app_cpu = producer_cpu if app_cpu is None else app_cpu
    for name, value in (("cpu", cpu), ("producer_cpu", producer_cpu), ("app_cpu", app_cpu)):
        if not 0 <= value < machine.num_cpus:
            raise ValueError(f"{name}={value}: profile {machine.profile.name!r} has CPUs "
                             f"0-{machine.num_cpus - 1}")
    if cpu == producer_cpu:
        raise ValueError("the cpumap CPU must differ from the producer's (a redirect to "
                         "another CPU)")
    net = net_of(machine)
    vA, vB = net.add_veth("vA", "vB")
    vB.add_address(B_ADDR)
    vB.set_gro(gro)
    with machine.on_cpu(app_cpu):
        sock = net.stack.udp_socket(PORT, gro=True, family=AF_INET6, rcvbuf=1 << 30)
    cpumap = system.map_create(MapType.CPUMAP, 4, 8, cpu + 1)
    fds = [cpumap]
    try:
        system.map_update_elem(cpumap, struct.pack("<I", cpu), struct.pack("<Ii", QSIZE, 0))
        redirect = Program.load(ProgramSpec(ProgType.XDP, [
            b.ld_map_fd(R1, "c"), b.mov64(R2, cpu), b.mov64(R3, 0), b.call("redirect_map"),
            b.exit_()], expected_attach_type=AttachType.XDP), system, maps={"c": cpumap})
        gen = Program.load(ProgramSpec(ProgType.XDP, [b.mov64(R0, XdpAction.TX), b.exit_()]),
                           system)
        fds += [redirect.fd, gen.fd]
        net.dev_xdp_attach(vB, system.prog_from_fd(redirect.fd))
        entry = system.map_from_fd(cpumap).cpu_map[cpu]
        template = XdpBuff.from_bytes(udp_frame(vB.mac, vA.mac, A_ADDR, B_ADDR, 1234, PORT,
                                                PAYLOAD), vA, 0)
        gen_prog = system.prog_from_fd(gen.fd)
        received = [0, 0]  # skbs read, frames they carried

        def burst() -> None:
            with machine.on_cpu(producer_cpu):
                bpf_test_run_xdp_live(gen_prog, template, BURST, BURST)
            entry.wait_idle()
            with machine.on_cpu(app_cpu):
                while (dgram := sock.recv()) is not None:
                    received[0] += 1
                    received[1] += len(dgram.segments())

        entry.wait_idle()
        for _ in range(warmup):
            burst()
        timing = machine.timing
        k0, p0 = timing.snapshot(cpu), timing.snapshot(producer_cpu)
        c0, r0 = entry.counters(), list(received)
        for _ in range(bursts):
            burst()
        k_ns, k_costs = timing.since(cpu, k0)
        p_ns, _ = timing.since(producer_cpu, p0)
        c1 = entry.counters()
    finally:
        net.del_device(vA)
        sock.close()
        for fd in fds:
            system.close(fd)
    frames = c1["polled"] - c0["polled"]
    waited = k_costs.pop(RING_WAIT, (0, 0.0))[1]
    skbs, segs = received[0] - r0[0], received[1] - r0[1]
    return ModeledRate(
        machine.profile.name, gro, skb_alloc, rx, frames, (k_ns - waited) / frames,
        p_ns / (bursts * BURST), segs / skbs if skbs else 0.0,
        c1["skb_heads"] - c0["skb_heads"], c1["heads_recycled"] - c0["heads_recycled"],
        {cost: ns / frames for cost, (_, ns) in k_costs.items() if ns},
        {cost: count for cost, (count, ns) in k_costs.items() if ns})
