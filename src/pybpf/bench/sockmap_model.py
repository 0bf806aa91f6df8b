"""The modeled throughput of the emulated sockmap proxy on a declared machine: Gbit/s of one
TCP flow over loopback, direct and through the proxy with its backlog work unbound or on a
CPU of its own, from the emulated CPUs' modeled time (emulated/machine/timing.py), the same on every
run (issue 10; the sockmap CPU-affinity patch, shared/reference/patches-followups.md 1.1-1.3).

Rules this module keeps:
- The setup is ``pybpf bench sockmap``'s egress proxy on an emulated system of the profile:
  real loopback TCP sockets c1 -> p1 ... p2 -> c2, p1 and p2 in a SOCKHASH whose verdict
  program (sockmap_paths.verdict_program) redirects p1's data out of p2; ``direct`` is
  c1 -> c2 with no proxy. The unbound psock's work runs on the CPU that queued it (the
  client's: loopback runs the receive softirq, and so the verdict, on the sending CPU); the
  bound one on ``proxy_cpu`` (BPF_F_SOCKMAP_TARGET_CPU).
- Traffic is one skb at a time: the client sends one full-sized segment (the connection's
  MSS once warm, 64 KiB less headers, in one skb), and the next goes only once the server has read
  all of it and the psock's verdict and backlog work have returned, so the verdict reads
  exactly one skb and the work sends exactly one per run, whatever the host's scheduling;
  a run whose psock saw anything else is refused, with what it saw.
- The client and the server are not emulated code: the model charges their kernel work on
  their emulated CPUs (the client's send syscall, tcp_sendmsg with its copy from user memory,
  the loopback transmit and the receive softirq loopback runs on the sending CPU; the
  server's receive syscall, tcp_recvmsg with its copy out, the ACK). The psock's work is
  charged by emulated/net/skmsg.py where it happens, and the verdict's instructions by the
  engine. Costs are the profile's ([net]: cycle estimates of what each kernel function
  does); nothing here looks at a published result.
- The emulated run gives each context's work per skb (``ContextCosts``, split by the events
  each context charges): the client's send, the receive softirq on the client's CPU (into c2
  direct; into p1 with the verdict through the proxy), the backlog work's run and its send
  with c2's receive softirq (loopback runs it in the kworker's context), the server's read.
- Figures: that work streamed on the CPUs' scheduler (emulated/machine/sched.py): the
  client task, its receive softirq, the kworker (unbound: on the client's CPU, since
  schedule_delayed_work on WORK_CPU_UNBOUND queues locally; bound: on ``proxy_cpu``) and the
  server task contend, switch and wake one another in virtual time; Gbit/s = bytes the
  server read / the virtual time it took, after warm-up skbs; per CPU, time by context, time
  runnable but waiting, preemptions. Beside them, the additive figure of before (the
  busiest CPU's charged ns per skb, each event priced alone) for comparison.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from ..profiles import Profile, load_profile

if TYPE_CHECKING:
    from ..emulated import CpuStats

PROFILE = "sapphire-rapids-2s"
PATHS = ("direct", "unbound", "bound")
SKBS, WARMUP = 16, 4
ATTEMPTS = 3  # runs of a path the host split before the model gives up (NotOneSkbEach)
BUF_BYTES = 1 << 20  # socket buffers: the receive window never bounds the MSS (half of it)
WAIT_S = 10.0  # the most one skb may take through the real sockets
LINE = 64  # copy_user_line's bytes
WARM_BYTES = 1 << 16
# The client's send as the model charges it (its syscall, tcp_sendmsg, the copy in, the
# transmit); the receive softirq loopback runs next is charged apart.
SEND_EVENTS = ("syscall_entry", "tcp_sendmsg_skb", "copy_user_line", "tcp_write_xmit_skb")
SHOWN_CONTEXTS = ("user", "softirq", "ksoftirqd", "kworker")
SIM_SKBS, SIM_WARMUP = 2000, 200  # skbs streamed on the scheduler (about 15 ms of flow)
# c2's receive window: half its buffer (tcp_adv_win_scale 1, the default until 6.6, where
# tcp_win_from_space's scaling_ratio measures about the same for loopback's large skbs)
WINDOW_BYTES = BUF_BYTES // 2


@dataclass(frozen=True)
class SimulatedCpu:
    """One CPU over the measured skbs of a simulated path, ns per skb (counts in all)."""

    time: dict[str, float]  # context (user, softirq, ksoftirqd, kworker, ...) -> ns per skb
    waiting: float  # ns per skb its runnable tasks waited for it
    preemptions: int
    switches: int
    softirq_entries: int
    ksoftirqd_wakeups: int

    @classmethod
    def of(cls, stats: CpuStats, skbs: int) -> SimulatedCpu:
        """Per skb; the four contexts always, the other states where the CPU had any."""
        return cls({k: v / skbs for k, v in stats.time.items() if v or k in SHOWN_CONTEXTS},
                   stats.waiting / skbs,
                   stats.preemptions, stats.switches, stats.softirq_entries,
                   stats.ksoftirqd_wakeups)

    @property
    def busy(self) -> float:
        return sum(ns for state, ns in self.time.items() if state != "idle")


@dataclass(frozen=True)
class SimulatedPath:
    """A path streamed on the scheduler: SIM_SKBS skbs after SIM_WARMUP."""

    skbs: int
    ns: float  # virtual ns the measured skbs took
    cpus: dict[int, SimulatedCpu]
    work_runs: int  # runs of the backlog work over the measured skbs
    eagain_stalls: int  # runs the work ended on a full p2 (-EAGAIN), until write space
    # With timeline_ns: per CPU, (start, end, state) over the first timeline_ns of the
    # measured skbs, ns from their start (Scheduler.record_timeline).
    timeline: dict[int, list[tuple[float, float, str]]] = field(default_factory=dict)


@dataclass(frozen=True)
class ModeledPath:
    """One path's modeled figures (ns are modeled ns of the emulated CPUs, per skb): the
    emulated run's charges per CPU, and the flow streamed on the scheduler."""

    path: str
    skb_bytes: int
    skbs: int  # measured skbs of the emulated run
    cpu_ns: dict[int, float]  # CPU -> charged ns per skb
    breakdown: dict[int, dict[str, float]] = field(default_factory=dict)  # CPU -> cost -> ns
    simulated: SimulatedPath | None = None

    @property
    def busiest_cpu(self) -> int:
        return max(self.cpu_ns, key=lambda cpu: (self.cpu_ns[cpu], -cpu))

    @property
    def additive_gbps(self) -> float:
        """The rate when the busiest CPU is saturated, each event priced alone (before the
        scheduler)."""
        return self.skb_bytes * 8 / self.cpu_ns[self.busiest_cpu]

    @property
    def gbps(self) -> float:
        """The flow's rate on the scheduler (the additive one when not simulated)."""
        if self.simulated is None:
            return self.additive_gbps
        return self.simulated.skbs * self.skb_bytes * 8 / self.simulated.ns

    def as_dict(self) -> dict:
        return {**asdict(self), "busiest_cpu": self.busiest_cpu, "gbps": self.gbps,
                "additive_gbps": self.additive_gbps}


@dataclass(frozen=True)
class ModeledSockmap:
    """The three paths on one profile."""

    profile: str
    client_cpu: int
    server_cpu: int
    proxy_cpu: int
    paths: dict[str, ModeledPath]
    costs: ContextCosts | None = None

    def x_direct(self, path: str) -> float:
        return self.paths[path].gbps / self.paths["direct"].gbps

    def as_dict(self) -> dict:
        return {"profile": self.profile, "client_cpu": self.client_cpu,
                "server_cpu": self.server_cpu, "proxy_cpu": self.proxy_cpu,
                "costs": None if self.costs is None else asdict(self.costs),
                "paths": {name: {**p.as_dict(), "x_direct": self.x_direct(name),
                                 "additive_x_direct": p.additive_gbps
                                 / self.paths["direct"].additive_gbps}
                          for name, p in self.paths.items()}}


@dataclass(frozen=True)
class ContextCosts:
    """Each context's work, ns per skb (``work_run`` per run of the backlog work), from the
    emulated runs' charges."""

    skb_bytes: int
    send: float  # the client task: syscall, tcp_sendmsg, the copy in, the transmit
    direct_rx: float  # direct: c2's receive softirq, on the client's CPU
    proxy_rx: float  # proxy: p1's receive softirq with the verdict, on the client's CPU
    work_run: float  # process_one_work of a run (its two switches are the scheduler's)
    work_send: float  # skb_send_sock of one skb on p2, in the kworker
    work_rx: float  # c2's receive softirq, run in the kworker's context
    recv: float  # the server task: syscall, tcp_recvmsg, the copy out, the ACK


def context_costs(paths: dict[str, ModeledPath], cpus: tuple[int, int, int],
                  profile: Profile) -> ContextCosts:
    """Split the emulated runs' charges by the context that charged them: direct's and
    bound's client CPU into the send (SEND_EVENTS) and the receive softirq (the rest);
    bound's proxy CPU into the work's run (kworker_wakeup less the two context switches
    the scheduler now charges), c2's receive softirq (tcp_v4_rcv_skb) and the send (the
    rest, less the server's read where the two share a CPU); direct's server CPU is the
    server's read. The unbound path does the same work, on the client's CPU."""
    client, server, proxy = cpus
    direct, bound = paths["direct"].breakdown, paths["bound"].breakdown

    def part(costs: dict[str, float], events: tuple[str, ...]) -> float:
        return sum(ns for event, ns in costs.items() if event in events)

    send = part(direct[client], SEND_EVENTS)
    wakeup = bound[proxy].get("kworker_wakeup", 0.0)
    work_run = wakeup - 2 * profile["sched.context_switch"]
    if work_run < 0:
        raise ValueError(f"profile {profile.name!r}: net.kworker_wakeup ({wakeup:.0f} ns) is "
                         "less than the two context switches it includes "
                         f"(2 x sched.context_switch, {profile['sched.context_switch']:.0f} ns)")
    work_rx = bound[proxy].get("tcp_v4_rcv_skb", 0.0)
    recv = paths["direct"].cpu_ns[server]
    shared = recv if proxy == server else 0.0  # a 2-CPU machine: the work beside the server
    return ContextCosts(
        skb_bytes=paths["direct"].skb_bytes, send=send,
        direct_rx=paths["direct"].cpu_ns[client] - send,
        proxy_rx=paths["bound"].cpu_ns[client] - part(bound[client], SEND_EVENTS),
        work_run=work_run, work_send=paths["bound"].cpu_ns[proxy] - wakeup - work_rx - shared,
        work_rx=work_rx, recv=recv)


def simulate_path(profile: Profile | str, path: str, costs: ContextCosts,
                  cpus: tuple[int, int, int], *, skbs: int = SIM_SKBS,
                  warmup: int = SIM_WARMUP, timeline_ns: float = 0.0) -> SimulatedPath:
    """Stream ``path``'s skbs on the scheduler of ``profile``'s machine (see the module's
    rules): the client sends as long as c2's window allows (direct; the psock drains p1 in
    the softirq, so through the proxy nothing holds it back: ingress_skb has no bound), the
    backlog work sends while ingress_skb holds skbs: into c2 while its window is open, else
    into p2's write queue (sent on from the server's CPU as its reads open the window), and
    when that is full too it stops until p2's write space queues it again, from the server's
    CPU, as the emulated psock does (skmsg.py: it waits for write space, at most a jiffy;
    see docs/timing-model.md for the kernel's jiffy); the server reads while c2 holds
    data. ``timeline_ns`` > 0 records what each CPU did over that much of the measured
    skbs' time."""
    from ..emulated import SLEEP, Run, Scheduler, Work

    if path not in PATHS:
        raise ValueError(f"path must be one of {PATHS}, got {path!r}")
    if skbs < 1 or warmup < 0:
        raise ValueError(f"skbs must be >= 1 and warmup >= 0, got {skbs}, {warmup}")
    if timeline_ns < 0:
        raise ValueError(f"timeline_ns must be >= 0, got {timeline_ns}")
    prof = load_profile(profile) if isinstance(profile, str) else profile
    client, server, proxy = cpus
    sched = Scheduler.for_profile(prof)
    window = max(1, WINDOW_BYTES // costs.skb_bytes)  # skbs c2 may hold unread
    sndbuf = max(1, BUF_BYTES // costs.skb_bytes)  # skbs p2's write queue may hold
    flow = {"c2": 0, "p2": 0, "ingress": 0, "read": 0, "runs": 0, "retries": 0, "stalled": 0}
    marks: dict[str, Any] = {}
    tasks: dict[str, Any] = {}
    work = Work("sk_psock_backlog", lambda cpu: sk_psock_backlog(cpu))

    def c2_data_ready(cpu: int, ns: float) -> Any:
        """A receive softirq into c2: tcp_v4_rcv, the queueing, the server woken."""
        yield Run(ns)
        flow["c2"] += 1
        sched.wake_up(tasks["server"])

    def p1_verdict(cpu: int) -> Any:
        """p1's receive softirq: the verdict redirects the skb to p2's ingress_skb and
        schedules the work (queue_work_on the target CPU when bound, else WORK_CPU_UNBOUND:
        this CPU)."""
        yield Run(costs.proxy_rx)
        flow["ingress"] += 1
        if path == "bound":
            sched.queue_work_on(proxy, work)
        else:
            sched.queue_work(work)

    def sk_psock_backlog(cpu: int) -> Any:
        flow["runs"] += 1
        yield Run(costs.work_run)
        while flow["ingress"]:
            if flow["c2"] + flow["p2"] >= window + sndbuf:  # p2 full: -EAGAIN
                flow["retries"] += 1
                flow["stalled"] = 1  # the write-space callback queues the work again
                return
            flow["ingress"] -= 1
            yield Run(costs.work_send)
            if flow["c2"] < window:
                sched.raise_softirq(cpu, lambda c: c2_data_ready(c, costs.work_rx))
            else:
                flow["p2"] += 1  # in p2's write queue until c2's window opens

    def client_task() -> Any:
        rx: Callable[[int], Any] = (p1_verdict if path != "direct"
                                    else lambda c: c2_data_ready(c, costs.direct_rx))
        while True:
            while path == "direct" and flow["c2"] >= window:
                yield SLEEP  # sk_stream_wait_memory: the server's read wakes it
            yield Run(costs.send)
            sched.raise_softirq(client, rx)  # loopback_xmit -> netif_rx, bh re-enabled

    def server_task() -> Any:
        while True:
            while not flow["c2"]:
                yield SLEEP
            yield Run(costs.recv)
            flow["c2"] -= 1
            flow["read"] += 1
            if path == "direct":
                sched.wake_up(tasks["client"])
            elif flow["p2"]:
                # the read's window update reaches p2, which transmits a queued skb: c2's
                # receive softirq runs here, on the reader's CPU (loopback), and p2's write
                # space wakes a stalled work (sk_psock_write_space, from this CPU)
                flow["p2"] -= 1
                sched.raise_softirq(server, lambda c: c2_data_ready(c, costs.work_rx))
                if flow["stalled"]:
                    flow["stalled"] = 0
                    if path == "bound":
                        sched.queue_work_on(proxy, work)
                    else:
                        sched.queue_work(work)
            if flow["read"] == warmup:
                measure()

    def measure() -> None:
        """The measured skbs begin: what each CPU did so far, and the timeline's window."""
        marks["start"] = (sched.now, {cpu: sched.cpu_stats(cpu) for cpu in used},
                          flow["runs"], flow["retries"])
        if timeline_ns:
            sched.record_timeline(sched.now, sched.now + timeline_ns)

    used = (client, server) if path != "bound" else (client, server, proxy)
    tasks["server"] = sched.spawn("server", server, server_task())
    tasks["client"] = sched.spawn("client", client, client_task())
    if warmup == 0:
        measure()
    sched.run(stop=lambda: flow["read"] >= warmup + skbs)
    t0, before, runs0, retries0 = marks["start"]
    timeline = ({cpu: [(a - t0, b - t0, state) for a, b, state in sched.timeline(cpu)]
                 for cpu in used} if timeline_ns else {})
    return SimulatedPath(skbs, sched.now - t0,
                         {cpu: SimulatedCpu.of(sched.cpu_stats(cpu).since(before[cpu]), skbs)
                          for cpu in used},
                         flow["runs"] - runs0, flow["retries"] - retries0, timeline)


def model_sockmap(profile: str = PROFILE, *, proxy_cpu: int | None = None,
                  skbs: int = SKBS, warmup: int = WARMUP,
                  timeline_ns: float = 0.0) -> ModeledSockmap:
    """Direct, unbound and bound on ``profile`` (a shipped name or a file). The client's CPU
    is the emulated CPU of the first host CPU this process may use (the verdict runs where
    the host's loopback softirq ran); the server's is the next; ``proxy_cpu`` (default: the
    one after, or the server's on a 2-CPU machine) takes the bound psock's work."""
    import pybpf

    from ..emulated import psock_table

    if skbs < 1 or warmup < 0:
        raise ValueError(f"skbs must be >= 1 and warmup >= 0, got {skbs}, {warmup}")
    paths, cpus = {}, None
    for path, attempt in ((p, a) for p in PATHS for a in range(ATTEMPTS)):
        if path in paths:
            continue
        emulated = pybpf.system("emulated", profile=profile,
                                modeled_time=True)  # the figures are modeled time
        machine = emulated.machine
        table = psock_table(machine)
        host_cpu = table.host_cpus[0]
        client = table.emulated_cpu(host_cpu)
        others = [c for c in range(machine.num_cpus) if c != client]
        if not others:
            raise ValueError(f"profile {machine.profile.name!r} has one CPU: the model needs "
                             "the client's and another")
        server = others[0]
        proxy = others[len(others) > 1] if proxy_cpu is None else proxy_cpu
        machine.check_cpu(proxy)
        if proxy == client:
            raise ValueError(f"proxy_cpu={proxy} is the client's CPU: the bound psock's "
                             "work must run on another CPU")
        cpus = (client, server, proxy)
        try:
            paths[path] = _run_path(emulated, path, cpus, host_cpu, skbs, warmup)
        except NotOneSkbEach:
            if attempt == ATTEMPTS - 1:
                raise
    prof = machine.profile
    costs = context_costs(paths, cpus, prof)
    simulated = {name: ModeledPath(p.path, p.skb_bytes, p.skbs, p.cpu_ns, p.breakdown,
                                   simulate_path(prof, name, costs, cpus,
                                                 timeline_ns=timeline_ns))
                 for name, p in paths.items()}
    return ModeledSockmap(prof.name, *cpus, simulated, costs)


def _run_path(emulated: Any, path: str, cpus: tuple[int, int, int], host_cpu: int,
              skbs: int, warmup: int) -> ModeledPath:
    from ..emulated import psock_table
    from .sockmap_paths import SockmapPath

    client, server, proxy = cpus
    machine = emulated.machine
    timing, table = machine.timing, psock_table(machine)
    socks: list[socket.socket] = []
    sockmap = None
    mask = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, {host_cpu})  # this thread sends: the softirq runs here
        if path == "direct":
            c1, c2 = _connect(socks)
        else:
            (c1, p1), (p2, c2) = _connect(socks), _connect(socks)
            sockmap = SockmapPath(emulated, ingress=False,
                                  target_cpu=proxy if path == "bound" else None)
            sockmap.add_pair(p1, p2)
        size = min(c1.getsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG), 1 << 16)
        data = (bytes(range(251)) * (size // 251 + 1))[:size]
        lines = -(-size // LINE)
        used = (client, server) if path != "bound" else (client, server, proxy)
        snaps: dict[int, Any] = {}
        before = table.snapshot()
        for i in range(warmup + skbs):
            if i == warmup:
                snaps = {cpu: timing.snapshot(cpu) for cpu in used}
                before = table.snapshot()
            _send_one(timing, c1, data, client, lines)
            _recv_one(timing, c2, size, server, lines)
            if path != "direct":
                _wait_psock(table, i + 1)
        after = table.snapshot()
        spent = {cpu: timing.since(cpu, snaps[cpu]) for cpu in used}  # before the teardown
    finally:
        os.sched_setaffinity(0, mask)
        if sockmap is not None:
            sockmap.close()
        for sock in socks:
            sock.close()
    if path != "direct":
        _check_one_skb_each(path, before, after, skbs, client, proxy if path == "bound"
                            else client, size)
    cpu_ns, breakdown = {}, {}
    for cpu, (ns, costs) in spent.items():
        cpu_ns[cpu] = ns / skbs
        breakdown[cpu] = {cost: c_ns / skbs for cost, (_, c_ns) in costs.items() if c_ns}
    return ModeledPath(path, size, skbs, cpu_ns, breakdown)


def _connect(socks: list[socket.socket]) -> tuple[socket.socket, socket.socket]:
    """A loopback connection with large buffers, (connecting, accepted), both kept in
    ``socks``, and warm: 64 KiB went through it, so the sender's MSS is no longer bound by
    half the SYN's unscaled window (32 KiB) but by loopback's MTU (64 KiB less headers)."""
    lst = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        for opt in (socket.SO_RCVBUF, socket.SO_SNDBUF):
            lst.setsockopt(socket.SOL_SOCKET, opt, BUF_BYTES)
        lst.bind(("127.0.0.1", 0))
        lst.listen(1)
        cli = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        socks.append(cli)
        for opt in (socket.SO_RCVBUF, socket.SO_SNDBUF):
            cli.setsockopt(socket.SOL_SOCKET, opt, BUF_BYTES)
        cli.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        cli.connect(lst.getsockname())
        srv, _ = lst.accept()
        srv.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        socks.append(srv)
    finally:
        lst.close()
    for sock in (cli, srv):
        sock.settimeout(WAIT_S)
    cli.sendall(bytes(WARM_BYTES))
    _read_exactly(srv, WARM_BYTES)
    return cli, srv


def _send_one(timing: Any, sock: socket.socket, data: bytes, cpu: int, lines: int) -> None:
    """The client's write of one skb, and what its kernel does for it on its CPU: the
    syscall, tcp_sendmsg and the copy, the loopback transmit and the receive softirq into the
    next socket (c2 or p1), which loopback runs here."""
    for event, n in (("syscall_entry", 1), ("tcp_sendmsg_skb", 1), ("copy_user_line", lines),
                     ("tcp_write_xmit_skb", 1), ("tcp_v4_rcv_skb", 1)):
        timing.charge(cpu, event, n)
    sock.sendall(data)


def _recv_one(timing: Any, sock: socket.socket, size: int, cpu: int, lines: int) -> None:
    """The server's read of one skb (however many host reads it takes: one recvmsg of the
    model) and its kernel's work on its CPU: the syscall, tcp_recvmsg, the copy out, the
    ACK."""
    _read_exactly(sock, size)
    for event, n in (("syscall_entry", 1), ("tcp_recvmsg_skb", 1), ("copy_user_line", lines),
                     ("tcp_ack", 1)):
        timing.charge(cpu, event, n)


def _read_exactly(sock: socket.socket, size: int) -> None:
    got = 0
    while got < size:
        chunk = sock.recv(size - got)
        if not chunk:
            raise RuntimeError(f"the receiving socket closed after {got} of {size} bytes")
        got += len(chunk)


def _wait_psock(table: Any, runs: int) -> None:
    """Until the psock's verdict and backlog work for skb ``runs`` have returned (they
    charge their CPUs until then)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        stats = table.snapshot().values()
        if sum(s.verdicts for s in stats) >= runs and sum(s.backlog_runs for s in stats) >= runs:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"the psock's work for skb {runs} did not finish within "
                               f"{WAIT_S:g} s")
        time.sleep(0.0002)


class NotOneSkbEach(RuntimeError):
    """The host split a run's skbs (a loaded host can: a send cut short by memory pressure,
    a read that came between two halves), so its figures would not be the model's."""


def _check_one_skb_each(path: str, before: dict, after: dict, skbs: int, verdict_cpu: int,
                        work_cpu: int, size: int) -> None:
    """The measured skbs went one per verdict on the client's CPU and one per work run on
    ``work_cpu``, or the figures would depend on the host's scheduling."""
    delta = {cpu: {k: getattr(after[cpu], k) - getattr(before[cpu], k)
                   for k in ("verdicts", "backlog_runs", "bytes")} for cpu in after}
    busy = {cpu: d for cpu, d in delta.items() if any(d.values())}
    want = {verdict_cpu: {"verdicts": skbs}}
    want.setdefault(work_cpu, {}).update(backlog_runs=skbs, bytes=skbs * size)
    if any(busy.get(cpu, {}).get(k) != v for cpu, rec in want.items() for k, v in rec.items()) \
            or set(busy) - set(want):
        raise NotOneSkbEach(f"{path}: the psock did not take one skb per verdict on CPU "
                           f"{verdict_cpu} and send one per work run on CPU {work_cpu} "
                           f"({skbs} skbs of {size} bytes); per CPU it did {busy}")


def modeled_text(doc: dict) -> str:
    """``ModeledSockmap.as_dict()`` as a table and, per path and CPU, where its time goes on
    the scheduler and what the emulated run charged."""
    from .report import format_table

    roles: dict[int, str] = {}
    for role in ("client", "server", "proxy"):
        cpu = doc[f"{role}_cpu"]
        roles[cpu] = f"{roles[cpu]}+{role}" if cpu in roles else role
    paths = doc["paths"]
    first = next(iter(paths.values()))
    rows = [[name, f"{p['gbps']:.1f}", f"{p['x_direct']:.2f}x", f"{p['additive_gbps']:.1f}",
             f"{p['additive_x_direct']:.2f}x",
             f"cpu{p['busiest_cpu']} ({roles[int(p['busiest_cpu'])]})"]
            for name, p in paths.items()]
    sim = first.get("simulated")
    streamed = (f"streamed on the CPUs' scheduler, {sim['skbs']} skbs after warm-up"
                if sim else "not streamed")
    out = [f"modeled on {doc['profile']} (the emulated proxy's work per {first['skb_bytes']}-"
           f"byte skb, {streamed}: client on CPU {doc['client_cpu']}, server on CPU "
           f"{doc['server_cpu']}, the bound psock's work on CPU {doc['proxy_cpu']}):",
           format_table(["path", "modeled Gbit/s", "x direct", "additive Gbit/s", "x direct",
                         "busiest (additive)"], rows)]
    if sim:
        out.append("each CPU on the scheduler, ns per skb by context (switch: context "
                   "switches; wakeup: idle exits), ns per skb its runnable tasks waited, and "
                   f"counts over the {sim['skbs']} skbs:")
        for name, p in paths.items():
            s_path = p["simulated"]
            for cpu, c in s_path["cpus"].items():
                time = ", ".join(f"{state} {ns:.0f}" for state, ns in c["time"].items())
                out.append(f"  {name} cpu{cpu} ({roles[int(cpu)]}): {time}; waiting "
                           f"{c['waiting']:.0f}; {c['preemptions']} preemptions, "
                           f"{c['switches']} switches, {c['softirq_entries']} softirq entries, "
                           f"{c['ksoftirqd_wakeups']} ksoftirqd wake-ups")
            if name != "direct":
                out.append(f"  {name}: {s_path['work_runs']} runs of the backlog work, "
                           f"{s_path['eagain_stalls']} ended on a full p2 (-EAGAIN)")
    out.append("where each CPU's time goes, modeled ns per skb, as the emulated run charged "
               "it (the additive figure: the busiest CPU saturated):")
    for name, p in paths.items():
        for cpu, ns in p["cpu_ns"].items():
            costs = ", ".join(f"{cost} {c_ns:.0f}" for cost, c_ns in p["breakdown"][cpu].items())
            out.append(f"  {name} cpu{cpu} ({roles[int(cpu)]}) {ns:.0f}: {costs}")
    return "\n".join(out)
